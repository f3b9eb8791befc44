"""Unit tests for plugins/module_utils/driver/pins.py: range patterns, apt and dnf rendering.

The dnf.conf rendering is tested as text here; tests/module/test_driver_guard.py also runs the
real apt (preferences) and, where installed, the real dnf (excludes) against local repositories.
"""
import fnmatch
import os
import re
import shutil
import subprocess

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.kubegpu.fleet.plugins.module_utils.catalog import validate as catalog_validate
from ansible_collections.kubegpu.fleet.plugins.module_utils.driver import defects as dc
from ansible_collections.kubegpu.fleet.plugins.module_utils.driver import pins as dp
from ansible_collections.kubegpu.fleet.plugins.module_utils._common.versions import DriverVersion

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))))


SEED = "driver-r570-mig-mixed-unschedulable"


@pytest.fixture(scope="module")
def driver_doc():
    with open(os.path.join(REPO, "catalog", "v2", "driver.yml")) as f:
        return yaml.safe_load(f)


@pytest.fixture(scope="module")
def entries(driver_doc):
    return catalog_validate.validate_documents([driver_doc])


def forms(n):
    """Spellings NVIDIA uses for a version component: natural, and two-digit zero-padded."""
    out = [str(n)]
    if n < 10:
        out.append("%02d" % n)
    return out


def in_interval(v, low, high, exclusive):
    if low is not None and v < low:
        return False
    if high is not None and (v >= high if exclusive else v > high):
        return False
    return True


def assert_patterns_agree(branch, low, high, exclusive, minors, patches):
    pairs = dp.version_interval_pairs(low, high, exclusive)
    rx = dp.interval_regex(branch, pairs)
    crx = re.compile("^(%s)$" % rx) if rx else None
    globs = dp.interval_globs(branch, pairs)
    for m in minors:
        for p in [None] + list(patches):
            for ms in forms(m):
                for ps in ([None] if p is None else forms(p)):
                    text = "%d.%s" % (branch, ms) + ("" if ps is None else "." + ps)
                    want = in_interval(DriverVersion(text), low, high, exclusive)
                    assert bool(crx and crx.match(text)) == want, (text, low, high, exclusive, rx)
                    assert any(fnmatch.fnmatchcase(text, g) for g in globs) == want, (text, globs)


# ------------------------------------------------------------------------------ integers

@given(lo=st.integers(0, 1200), span=st.integers(0, 1200))
@settings(max_examples=300, deadline=None)
def test_int_patterns_bounded(lo, span):
    hi = lo + span
    rx = re.compile("^(%s)$" % "|".join(dp._pattern_regex(p) for p in dp.int_patterns(lo, hi)))
    for n in range(0, 2500, 7):
        for s in forms(n):
            assert bool(rx.match(s)) == (lo <= n <= hi), (lo, hi, s)
    for n in (lo, hi):
        assert rx.match(str(n))


@given(lo=st.integers(0, 1200))
@settings(max_examples=200, deadline=None)
def test_int_patterns_unbounded(lo):
    rx = re.compile("^(%s)$" % "|".join(dp._pattern_regex(p) for p in dp.int_patterns(lo, None)))
    for n in list(range(0, 1500, 3)) + [9999, 123456]:
        for s in forms(n):
            assert bool(rx.match(s)) == (n >= lo), (lo, s)


def test_int_patterns_rejects_more_leading_zeros_and_empty():
    rx = re.compile("^(%s)$" % "|".join(dp._pattern_regex(p) for p in dp.int_patterns(0, 99)))
    assert rx.match("08") and rx.match("8") and not rx.match("008")
    assert dp.int_patterns(5, 4) == []


# ------------------------------------------------------------------------------ versions

@pytest.mark.parametrize("low, high, exclusive", [
    ("570.124.06", "570.172.08", True),
    (None, "535.183.08", True),
    (None, "525.105.17", True),
    ("570.124.06", None, False),
    ("570.124", None, False),
    (None, "570.100", True),
    ("570.5.3", "570.5.3", False),
    ("570.99.99", "570.100.00", False),
    (None, None, False),
])
def test_version_patterns_match_exactly_the_interval(low, high, exclusive):
    branch = DriverVersion(low or high or "570.0").branch
    assert_patterns_agree(branch, DriverVersion(low) if low else None,
                          DriverVersion(high) if high else None, exclusive,
                          minors=list(range(0, 260)) + [999, 1000], patches=list(range(0, 110)) + [999, 1000])


@given(a=st.tuples(st.integers(0, 300), st.integers(0, 120)),
       b=st.tuples(st.integers(0, 300), st.integers(0, 120)),
       exclusive=st.booleans(), open_low=st.booleans(), open_high=st.booleans())
@settings(max_examples=60, deadline=None)
def test_version_patterns_property(a, b, exclusive, open_low, open_high):
    lo, hi = sorted([a, b])
    low = None if open_low else DriverVersion("570.%d.%02d" % lo)
    high = None if open_high else DriverVersion("570.%d.%02d" % hi)

    def around(values, fixed):
        return sorted(set(fixed + [x for v in values for x in (v - 1, v, v + 1) if x >= 0]))
    minors = around((lo[0], hi[0]), [0, 1, 9, 10, 99, 100, 301, 1000])
    patches = around((lo[1], hi[1]), [0, 1, 9, 10, 99, 121])
    assert_patterns_agree(570, low, high, exclusive, minors, patches)


def test_empty_interval():
    assert dp.version_interval_pairs(None, DriverVersion("570.0.0"), True) == []
    assert dp.interval_regex(570, []) is None


# ------------------------------------------------------------------------------ plan

def test_pin_plan_from_bundled_catalog(entries):
    plan = dp.pin_plan(entries, {})
    kinds = [(p["id"], p["branch"], p["kind"], p["description"]) for p in plan]
    assert (SEED, 570, "range", "branch 570, >= 570.124.06, < 570.172.08") in kinds
    assert (SEED, 575, "branch", "every 575 release (no fixed 575 release known)") in kinds
    assert (SEED, 580, "range", "branch 580, < 580.65.06") in kinds
    # Only driver defects: no security entry is pinned (their floors are upgrades, not pins).
    ids = set(p["id"] for p in plan)
    assert not [i for i in ids if i.startswith("driver-cve-")]
    # Branch-less items (CDMM limitation, HGX B200 minimum) are never pinned.
    assert not ids & {"driver-cdmm-grace-mig-gds", "driver-hgx-b200-minimum"}


def test_pins_block_bad_and_spare_fixed_versions(entries):
    plan = dp.pin_plan(entries, {"gpu_names": ["NVIDIA H100 80GB HBM3"]})

    def blocked(v):
        return any(dp.pin_matches_version(p, v) for p in plan)

    # by ordering: 570.153.02 and 570.169.01 are named nowhere, both lie in the range
    for bad in ("570.124.06-0ubuntu1", "570.148.08-0ubuntu0.24.04.1", "570.153.02-1", "570.169.01-1",
                "575.57.08-0ubuntu1", "575.64.03", "1:575.51.02-1", "3:570.158.01-1.el9"):
        assert blocked(bad), bad
    for good in ("570.172.08-0ubuntu1", "570.86.15-0ubuntu1", "580.65.06-0ubuntu1", "580.95.05-1",
                 "535.183.06-1", "525.105.17-1", "550.54.15-1", "5750.1-1", "570.1720.08"):
        assert not blocked(good), good


def test_pin_plan_scope_and_skip(entries):
    plan = dp.pin_plan(entries, {}, branch=570)
    assert set(p["branch"] for p in plan) == {570}
    plan = dp.pin_plan(entries, {}, skip=[SEED])
    assert not [p for p in plan if p["id"] == SEED]


def test_pin_plan_skips_entries_ruled_out_by_gpu_model_but_not_by_mig_state(driver_doc):
    extra = {"schema_version": 2, "component": "driver", "version_scheme": "driver", "entries": [
        {"id": "site-gh200-570", "kind": "defect", "title": "GH200 only", "severity": "high",
         "affected": [{"branch": "570", "introduced": "570.86.15", "fixed": "570.172.08"}],
         "conditions": {"gpu_model": "GH200", "mig_enabled": True}, "remediation": "x",
         "sources": [{"url": "https://example.invalid/y", "verified": "2026-11-23"}]}]}
    merged, _o = dc.merge_catalog([driver_doc], extra)
    ids = set(p["id"] for p in dp.pin_plan(merged, {"gpu_names": ["NVIDIA H100"]}))
    assert "site-gh200-570" not in ids
    ids = set(p["id"] for p in dp.pin_plan(merged, {"gpu_names": ["NVIDIA GH200 480GB"], "mig_enabled": False}))
    assert "site-gh200-570" in ids


# ------------------------------------------------------------------------------ apt

def test_render_apt_preferences(entries):
    plan = dp.pin_plan(entries, {}, branch=570)
    text = dp.render_apt_preferences(plan)
    stanzas = [s for s in text.split("\n\n") if s.startswith("Explanation:")]
    assert len(stanzas) == len(plan) == 1
    first = stanzas[0].splitlines()
    assert first[0].startswith("Explanation: %s: R570 drivers 570.124.06 to 570.158.01 hang NVML" % SEED)
    assert first[0].endswith("(branch 570, >= 570.124.06, < 570.172.08)")
    assert first[1] == "Package: *nvidia* cuda-drivers* libcuda*"
    assert first[2].startswith("Pin: version /^([0-9]+:)?(570\\.(") and first[2].endswith(")([-+~].*)?$/")
    assert first[3] == "Pin-Priority: -1"
    assert text.startswith("# Managed by kubegpu.fleet driver_guard")
    assert dp.render_apt_preferences([]) == dp.APT_HEADER


def test_apt_preferences_name_rules():
    assert dp.apt_preferences_name_ok("/etc/apt/preferences.d/kubegpu-fleet-nvidia-known-bad.pref")
    assert dp.apt_preferences_name_ok("/etc/apt/preferences.d/kubegpu_nvidia")
    assert not dp.apt_preferences_name_ok("/etc/apt/preferences.d/nvidia.conf")
    assert not dp.apt_preferences_name_ok("/etc/apt/preferences.d/nvidia pins")


def test_validate_pin_packages():
    assert dp.validate_pin_packages(["*nvidia*", "libcuda1"]) == ["*nvidia*", "libcuda1"]
    with pytest.raises(ValueError, match="'a b'"):
        dp.validate_pin_packages(["a b"])
    with pytest.raises(ValueError, match="'/nvidia/'"):
        dp.validate_pin_packages(["/nvidia/"])
    with pytest.raises(ValueError, match="at least one"):
        dp.validate_pin_packages([])


@pytest.mark.skipif(shutil.which("apt-cache") is None, reason="apt-cache not installed")
def test_real_apt_cache_parses_rendered_preferences(entries, tmp_path):
    pref = tmp_path / "kubegpu.pref"
    pref.write_text(dp.render_apt_preferences(dp.pin_plan(entries, {})))
    parts = tmp_path / "parts"
    parts.mkdir()
    proc = subprocess.run(["apt-cache", "-o", "Dir::Etc::Preferences=%s" % pref,
                           "-o", "Dir::Etc::PreferencesParts=%s" % parts, "policy"],
                          check=False, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    assert proc.returncode == 0, proc.stderr
    assert not [l for l in proc.stderr.splitlines() if l.startswith(("E:", "W:"))], proc.stderr
    # Sanity of the check itself: apt does reject a broken stanza.
    pref.write_text("Package: *nvidia*\nPin: version 570*\n")
    proc = subprocess.run(["apt-cache", "-o", "Dir::Etc::Preferences=%s" % pref,
                           "-o", "Dir::Etc::PreferencesParts=%s" % parts, "policy"],
                          check=False, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    assert proc.returncode != 0 and "E:" in proc.stderr


# ------------------------------------------------------------------------------ dnf

def test_dnf_tokens(entries):
    plan = dp.pin_plan(entries, {}, branch=570)
    toks = dp.dnf_tokens(plan, ["*nvidia*"])
    assert "*nvidia*-570.124.0[6-9]-*" in toks and "*nvidia*-570.12[5-9].*-*" in toks
    assert len(toks) == len(set(toks))
    # Each token is name-version-release: the version globs match exactly the bad versions.
    globs = [t[len("*nvidia*-"):-len("-*")] for t in toks]
    for bad in ("570.124.06", "570.148.08", "570.153.02", "570.158.01", "570.169.01"):
        assert any(fnmatch.fnmatchcase(bad, g) for g in globs), bad
    for good in ("570.172.08", "570.86.15", "570.123.99"):
        assert not any(fnmatch.fnmatchcase(good, g) for g in globs), good


DNF_CONF = """[main]
gpgcheck=1
installonly_limit=3
exclude=kernel* foo
best=True

[other]
excludepkgs=bar
"""


def test_render_dnf_conf_keeps_user_tokens_and_is_idempotent():
    toks = ["*nvidia*-570.148.08-*", "*nvidia*-575.*-*"]
    new = dp.render_dnf_conf(DNF_CONF, toks)
    lines = new.splitlines()
    assert "exclude=kernel*,foo,*nvidia*-570.148.08-*,*nvidia*-575.*-*" in lines
    assert lines[lines.index("exclude=kernel*,foo,*nvidia*-570.148.08-*,*nvidia*-575.*-*") - 1] == \
        dp.DNF_MARKER + " *nvidia*-570.148.08-* *nvidia*-575.*-*"
    assert "[other]" in lines and "excludepkgs=bar" in lines and "best=True" in lines
    assert dp.render_dnf_conf(new, toks) == new
    # A new plan replaces exactly the managed tokens.
    newer = dp.render_dnf_conf(new, ["*nvidia*-535.1[0-7][0-9].*-*"])
    assert "exclude=kernel*,foo,*nvidia*-535.1[0-7][0-9].*-*" in newer.splitlines()
    assert "575" not in newer
    # No tokens: back to the user's line, without marker.
    back = dp.render_dnf_conf(newer, [])
    assert "exclude=kernel*,foo" in back.splitlines() and dp.DNF_MARKER not in back


def test_render_dnf_conf_adds_key_and_section():
    new = dp.render_dnf_conf("[main]\ngpgcheck=1\n\n[repo]\nname=x\n", ["a-1.2-*"])
    assert new == ("[main]\ngpgcheck=1\n%s a-1.2-*\nexcludepkgs=a-1.2-*\n\n[repo]\nname=x\n" % dp.DNF_MARKER)
    assert dp.render_dnf_conf(new, []) == "[main]\ngpgcheck=1\n\n[repo]\nname=x\n"
    fresh = dp.render_dnf_conf("", ["a-1.2-*"])
    assert fresh == "[main]\n%s a-1.2-*\nexcludepkgs=a-1.2-*\n" % dp.DNF_MARKER
    assert dp.render_dnf_conf("# only a comment\n", []) == "# only a comment\n"


def test_render_dnf_conf_continuation_lines_and_long_marker():
    conf = "[main]\nexcludepkgs=kernel*\n  foo*\n# comment\n"
    toks = ["pkg%02d-570.148.08-*" % i for i in range(12)]
    new = dp.render_dnf_conf(conf, toks)
    markers = [l for l in new.splitlines() if l.startswith(dp.DNF_MARKER)]
    assert len(markers) > 1
    assert "excludepkgs=kernel*,foo*," + ",".join(toks) in new.splitlines()
    assert "# comment" in new.splitlines()
    assert dp.render_dnf_conf(new, toks) == new
    assert "excludepkgs=kernel*,foo*" in dp.render_dnf_conf(new, []).splitlines()
