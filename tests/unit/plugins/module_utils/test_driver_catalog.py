"""Unit tests for plugins/module_utils/driver_catalog.py (validation, evaluation, recommendation)."""
import copy
import os

import pytest
import yaml

from ansible_collections.kubegpu.fleet.plugins.module_utils import driver_catalog as dc

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))))
CATALOG = os.path.join(REPO, "catalog", "known_bad_drivers.yml")


@pytest.fixture(scope="module")
def catalog():
    with open(CATALOG) as f:
        return yaml.safe_load(f)


@pytest.fixture(scope="module")
def entries(catalog):
    return dc.validate_catalog(catalog, "bundled")


def entry(**over):
    base = {
        "id": "x-test",
        "title": "Test entry",
        "severity": "high",
        "affected": [{"branch": 570, "versions": ["570.100.01"], "fixed": "570.110.01"}],
        "remediation": "Upgrade.",
        "references": ["https://example.invalid/1"],
    }
    base.update(over)
    return base


def by_id(result):
    return dict((m["id"], m) for m in result["matches"])


# ------------------------------------------------------------------------------ the catalog

def test_bundled_catalog_validates_and_has_the_seed_entries(entries):
    ids = [e["id"] for e in entries]
    assert ids == ["nvml-r570-mig-hang", "toolkit-dev-char-symlinks-550",
                   "r535-build-fails-newer-kernels", "r525-gsp-xid119", "cdmm-gh200-gb200"]
    r570 = entries[0]
    items = dict((i["branch"], i) for i in r570["affected"])
    assert items[570]["versions"] == ["570.124.06", "570.133.20", "570.148.08", "570.158.01"]
    assert items[570]["fixed"] == "570.172.08"
    assert items[575]["fixed"] == "none" and items[575]["all_versions"] is True
    assert items[580]["fixed"] == "580.65.06"
    assert r570["conditions"] == {"mig_mixed": True}
    assert entries[4]["severity"] == "warning"


def test_entries_without_published_threshold_say_so(entries):
    e535 = [e for e in entries if e["id"] == "r535-build-fails-newer-kernels"][0]
    assert e535["conditions"] == {}
    assert "does not say which kernel" in e535["notes"]


# ------------------------------------------------------------------------------ validation

@pytest.mark.parametrize("mutate, needle", [
    (lambda e: e.update(severity="bad"), "severity: 'bad' is not one of"),
    (lambda e: e.update(id="Bad Id"), "must match"),
    (lambda e: e.pop("references"), "missing required key 'references'"),
    (lambda e: e.update(references=[]), "references: must be a non-empty list"),
    (lambda e: e.update(extra=1), "unknown key 'extra'"),
    (lambda e: e["affected"][0].update(versions=[570.1]), "a number: quote versions in YAML"),
    (lambda e: e["affected"][0].update(versions=["570.x.1"]), "cannot parse NVIDIA driver version '570.x.1'"),
    (lambda e: e["affected"][0].update(versions=["575.1.1"]), "575.1.1 is not in branch 570"),
    (lambda e: e["affected"][0].update(versions=["570.120.01"]), "is not below fixed 570.110.01"),
    (lambda e: e["affected"][0].update(fixed="580.1.1"), "580.1.1 is not in branch 570"),
    (lambda e: e["affected"][0].pop("fixed"), "a branch item needs 'fixed'"),
    (lambda e: e["affected"][0].update(ranges=[{"from": "570.1.1", "before": "570.1.1"}]), "empty range"),
    (lambda e: e["affected"][0].update(ranges=[{"from": "570.1.1", "to": "570.1.0"}]), "empty range"),
    (lambda e: e["affected"][0].update(ranges=[{"from": "570.1.1"}]), "a range reaches the fixed release"),
    (lambda e: e["affected"][0].update(ranges=[{"to": "570.1.1", "before": "570.2"}]), "either 'to'"),
    (lambda e: e["affected"][0].update(ranges=[{}]), "at least one of from, to, before"),
    (lambda e: e["affected"][0].update(all_versions=True), "all_versions excludes versions"),
    (lambda e: e["affected"][0].update(branch="570"), "must be an integer branch number"),
    (lambda e: e["affected"].append({"branch": 570, "fixed": "570.110.01"}), "branch 570 appears twice"),
    (lambda e: e.update(affected=[{"branch": 580, "fixed": "580.65.06"}]), "no item lists affected"),
    (lambda e: e.update(affected=[{"versions": ["570.1.1"]}]), "'versions' needs 'branch'"),
    (lambda e: e.update(affected=[{"branch": 570, "fixed": "none"}]), "fixed is \"none\" but"),
    (lambda e: e.update(conditions={"kernel": ">6"}), "unknown key 'kernel'"),
    (lambda e: e.update(conditions={"mig_mixed": "yes"}), "mig_mixed: must be true or false"),
    (lambda e: e.update(conditions={"gpu_model": "GH200("}), "invalid regular expression"),
    (lambda e: e.update(conditions={"toolkit_version": {"before": "1.14"}}), "cannot parse version '1.14'"),
    (lambda e: e.update(title="  "), "title: must be a non-empty string"),
])
def test_validation_names_the_problem(mutate, needle):
    e = entry()
    mutate(e)
    with pytest.raises(dc.CatalogError) as info:
        dc.validate_entries([e], "catalog_extra")
    assert needle in str(info.value)
    assert str(info.value).startswith("invalid catalog_extra: ")


def test_validation_reports_every_problem_and_duplicate_ids():
    bad = [entry(), entry(severity="nope"), entry(id="y", title="")]
    with pytest.raises(dc.CatalogError) as info:
        dc.validate_entries(bad)
    problems = info.value.problems
    assert any("duplicate id 'x-test'" in p for p in problems)
    assert any("severity" in p for p in problems)
    assert any("title" in p for p in problems)


def test_validate_catalog_top_level():
    with pytest.raises(dc.CatalogError, match="schema_version must be 1"):
        dc.validate_catalog({"schema_version": 2, "entries": []})
    with pytest.raises(dc.CatalogError, match="must be a mapping"):
        dc.validate_catalog([entry()])
    with pytest.raises(dc.CatalogError, match="unknown top-level key 'extra'"):
        dc.validate_catalog({"schema_version": 1, "entries": [], "extra": 1})
    assert dc.validate_catalog({"schema_version": 1, "entries": [entry()]})[0]["id"] == "x-test"


def test_merge_catalog_extra_forms_and_duplicates(entries):
    merged, origin = dc.merge_catalog(entries, [entry()])
    assert len(merged) == len(entries) + 1 and origin["x-test"] == "catalog_extra"
    assert origin["nvml-r570-mig-hang"] == "bundled"
    merged, _o = dc.merge_catalog(entries, {"entries": [entry()]})
    assert merged[-1]["id"] == "x-test"
    assert dc.merge_catalog(entries, None)[0] == list(entries)
    with pytest.raises(dc.CatalogError, match="already exists in the bundled catalog"):
        dc.merge_catalog(entries, [entry(id="nvml-r570-mig-hang")])
    with pytest.raises(dc.CatalogError, match="must be a list of entries"):
        dc.merge_catalog(entries, "570.148.08")
    with pytest.raises(dc.CatalogError, match="got a mapping with keys affected, id"):
        dc.merge_catalog(entries, entry())


# ------------------------------------------------------------------------------ evaluation

@pytest.mark.parametrize("version", ["570.124.06", "570.133.20", "570.148.08", "570.158.01"])
def test_r570_listed_versions_known_bad_when_mig_mixed(entries, version):
    res = dc.evaluate(entries, {"driver_version": version, "mig_mixed": True})
    assert res["verdict"] == "known_bad"
    m = by_id(res)["nvml-r570-mig-hang"]
    assert m["status"] == "known_bad" and m["conditions_met"] == ["mig_mixed"]
    assert m["matched_versions"][0]["by"] == "listed"
    assert "https://github.com/NVIDIA/gpu-operator/issues/1361" in m["references"]
    assert res["recommended_version"] == "570.172.08"
    assert res["branch"] == 570


def test_r570_at_risk_when_not_mixed_or_unknown(entries):
    res = dc.evaluate(entries, {"driver_version": "570.148.08", "mig_mixed": False})
    assert res["verdict"] == "at_risk"
    assert by_id(res)["nvml-r570-mig-hang"]["conditions_not_met"] == ["mig_mixed"]
    res = dc.evaluate(entries, {"driver_version": "570.148.08"})
    assert res["verdict"] == "at_risk"
    assert by_id(res)["nvml-r570-mig-hang"]["conditions_unknown"] == ["mig_mixed"]


def test_r570_range_covers_unlisted_versions_and_bounds(entries):
    res = dc.evaluate(entries, {"driver_version": "570.153.02", "mig_mixed": True})
    assert by_id(res)["nvml-r570-mig-hang"]["matched_versions"][0]["by"] == "range"
    for good in ("570.86.15", "570.172.08", "570.195.03"):
        assert dc.evaluate(entries, {"driver_version": good, "mig_mixed": True})["verdict"] == "ok"


def test_branch_aware_575_newer_but_unfixed(entries):
    res = dc.evaluate(entries, {"driver_version": "575.57.08", "mig_mixed": True})
    assert res["verdict"] == "known_bad"
    rec = res["recommendation"]
    assert rec["same_branch_fix"] == "none" and rec["same_branch"] is False
    assert res["recommended_version"] == "580.65.06" and rec["branch"] == 580
    assert "no fixed 575 release" in rec["reason"] and "nearest fixed branch is 580" in rec["reason"]
    assert [(a["version"], a["branch"]) for a in rec["alternatives"]] == [("570.172.08", 570)]
    # 580.65.06 is fine: the 580 item is fix-only.
    assert dc.evaluate(entries, {"driver_version": "580.65.06", "mig_mixed": True})["verdict"] == "ok"


def test_cdmm_caveat_demotes_the_newer_branch_on_gh200_with_mig(entries):
    node = {"driver_version": "575.57.08", "mig_mixed": True, "mig_enabled": True,
            "gpu_names": ["NVIDIA GH200 480GB"]}
    res = dc.evaluate(entries, node)
    rec = res["recommendation"]
    assert res["recommended_version"] == "570.172.08"
    assert rec["caveats"] == []
    alt = rec["alternatives"][0]
    assert alt["version"] == "580.65.06" and alt["caveats"][0]["id"] == "cdmm-gh200-gb200"
    # Without MIG the caveat is only at_risk and the newer branch wins again.
    node.update(mig_enabled=False, mig_mixed=False)
    res = dc.evaluate(entries, node)
    assert res["recommended_version"] == "580.65.06"
    assert res["recommendation"]["caveats"][0]["status"] == "at_risk"


def test_toolkit_entry_needs_the_component(entries):
    base = {"driver_version": "550.54.15"}
    res = dc.evaluate(entries, dict(base))
    assert res["verdict"] == "ok"
    assert res["not_applicable"][0]["id"] == "toolkit-dev-char-symlinks-550"
    assert "not installed" in res["not_applicable"][0]["reason"]
    res = dc.evaluate(entries, dict(base, toolkit_version="1.17.8-1"))
    assert res["verdict"] == "ok" and "outside < 1.14.6" in res["not_applicable"][0]["reason"]
    res = dc.evaluate(entries, dict(base, toolkit_version="1.14.5-1"))
    assert res["verdict"] == "known_bad"
    m = by_id(res)["toolkit-dev-char-symlinks-550"]
    assert m["conditions_met"] == ["toolkit_version"] and m["fixed_in_branch"] is None
    assert res["recommended_version"] is None
    assert res["recommendation"]["not_fixed_by_driver"] == ["toolkit-dev-char-symlinks-550"]
    # Before 550.40 the /proc/devices name was the old one: no match.
    assert dc.evaluate(entries, {"driver_version": "550.39.01", "toolkit_version": "1.14.5"})["verdict"] == "ok"
    # Pre-release toolkits sort before their release.
    res = dc.evaluate(entries, dict(base, toolkit_version="1.14.6~rc.1-1"))
    assert res["verdict"] == "known_bad"


def test_old_branches_535_525(entries):
    res = dc.evaluate(entries, {"driver_version": "535.154.05"})
    assert res["verdict"] == "known_bad" and res["recommended_version"] == "535.183.08"
    assert dc.evaluate(entries, {"driver_version": "535.183.08"})["verdict"] == "ok"
    res = dc.evaluate(entries, {"driver_version": "525.85.12"})
    assert by_id(res)["r525-gsp-xid119"]["status"] == "known_bad"
    assert res["recommended_version"] == "525.105.17"
    assert dc.evaluate(entries, {"driver_version": "525.105.17"})["verdict"] == "ok"


def test_absent_and_reboot_pending(entries):
    res = dc.evaluate(entries, {})
    assert res["verdict"] == "absent" and res["branch"] is None and res["reboot_pending"] is None
    res = dc.evaluate(entries, {"driver_version": "570.172.08", "kernel_module_version": "570.172.08"})
    assert res["reboot_pending"] is False
    assert dc.reboot_pending("570.172.08", "570.148.08") is True
    assert dc.reboot_pending(None, "570.148.08") is None


def test_loaded_kernel_module_still_bad_after_upgrade(entries):
    node = {"driver_version": "570.172.08", "kernel_module_version": "570.148.08", "mig_mixed": True}
    res = dc.evaluate(entries, node)
    assert res["verdict"] == "known_bad" and res["reboot_pending"] is True
    m = by_id(res)["nvml-r570-mig-hang"]
    assert m["matched_versions"] == [{"version": "570.148.08", "components": ["kernel_module"],
                                      "by": "listed", "detail": "listed version 570.148.08"}]
    assert res["recommended_version"] == "570.172.08"
    assert "reboot to load it" in res["recommendation"]["reason"]


def test_same_version_checked_once_with_both_components(entries):
    res = dc.evaluate(entries, {"driver_version": "570.148.08", "kernel_module_version": "570.148.08",
                                "mig_mixed": True})
    assert by_id(res)["nvml-r570-mig-hang"]["matched_versions"][0]["components"] == ["userspace", "kernel_module"]


def test_only_kernel_module_known(entries):
    res = dc.evaluate(entries, {"kernel_module_version": "535.104.05"})
    assert res["verdict"] == "known_bad" and res["branch"] == 535
    assert res["recommended_version"] == "535.183.08"


def test_unparseable_versions_raise_naming_the_value(entries):
    with pytest.raises(ValueError, match="'570.abc'"):
        dc.evaluate(entries, {"driver_version": "570.abc"})
    with pytest.raises(ValueError, match="toolkit_version: cannot parse version 'latest'"):
        dc.evaluate(entries, {"driver_version": "550.54.15", "toolkit_version": "latest"})


def test_skip_entries(entries):
    res = dc.evaluate(entries, {"driver_version": "535.154.05"}, skip=["r535-build-fails-newer-kernels"])
    assert res["verdict"] == "ok"


def test_recommendation_is_raised_past_a_second_entry(entries):
    # A site entry says the first R570 fix is itself bad; the recommendation moves on.
    extra = entry(id="site-570-172",
                  affected=[{"branch": 570, "versions": ["570.172.08"], "fixed": "570.181.01"}])
    merged, origin = dc.merge_catalog(entries, [extra])
    res = dc.evaluate(merged, {"driver_version": "570.148.08", "mig_mixed": True}, origin=origin)
    assert res["recommended_version"] == "570.181.01"
    assert res["recommendation"]["same_branch_fix"] == "570.172.08"
    # And the site entry itself matches its listed version, tagged with its source.
    res = dc.evaluate(merged, {"driver_version": "570.172.08"}, origin=origin)
    assert by_id(res)["site-570-172"]["source"] == "catalog_extra"


def test_recommendation_falls_over_when_first_fix_leads_into_unfixed_entry(entries):
    extra = entry(id="site-570-all-late",
                  affected=[{"branch": 570, "ranges": [{"from": "570.172.08"}], "fixed": "none"}])
    merged, _o = dc.merge_catalog(entries, [extra])
    res = dc.evaluate(merged, {"driver_version": "570.148.08", "mig_mixed": True})
    rec = res["recommendation"]
    assert rec["same_branch_fix"] == "none"
    assert "site-570-all-late has no fixed 570 release" in rec["same_branch_note"]
    assert res["recommended_version"] == "580.65.06"


def test_gpu_model_condition(entries):
    node = {"driver_version": "580.65.06", "mig_enabled": True, "gpu_names": ["NVIDIA GB200"]}
    res = dc.evaluate(entries, node)
    m = by_id(res)["cdmm-gh200-gb200"]
    assert m["status"] == "known_bad" and m["severity"] == "warning"
    assert m["conditions_met"] == ["gpu_model", "mig_enabled"]
    assert res["recommended_version"] is None
    res = dc.evaluate(entries, dict(node, gpu_names=["NVIDIA H100 80GB HBM3"]))
    na = dict((n["id"], n["reason"]) for n in res["not_applicable"])
    assert res["verdict"] == "ok" and "no GPU matches" in na["cdmm-gh200-gb200"]
    res = dc.evaluate(entries, dict(node, gpu_names=None))
    na = dict((n["id"], n["reason"]) for n in res["not_applicable"])
    assert res["verdict"] == "ok" and "no GPU model known" in na["cdmm-gh200-gb200"]


def test_matches_sorted_known_bad_first_then_severity(entries):
    extra = [entry(id="a-warn", severity="warning",
                   affected=[{"branch": 570, "versions": ["570.148.08"], "fixed": "570.172.08"}]),
             entry(id="b-risk", severity="critical", conditions={"mig_enabled": True},
                   affected=[{"branch": 570, "versions": ["570.148.08"], "fixed": "570.172.08"}])]
    merged, _o = dc.merge_catalog(entries, extra)
    res = dc.evaluate(merged, {"driver_version": "570.148.08", "mig_mixed": True, "mig_enabled": False})
    assert [m["id"] for m in res["matches"]] == ["nvml-r570-mig-hang", "a-warn", "b-risk"]


def test_evaluate_does_not_mutate_the_catalog(catalog):
    before = copy.deepcopy(catalog)
    ents = dc.validate_catalog(catalog)
    dc.evaluate(ents, {"driver_version": "575.57.08", "mig_mixed": True})
    assert catalog == before


def test_parse_component_version():
    p = dc.parse_component_version
    assert p("1.14.6-1") == p("1.14.6") == p("v1.14.6")
    assert p("1:1.17.0-1") == p("1.17.0")
    assert p("1.17.8-1~ubuntu1") == p("1.17.8")
    assert p("1.18.0~rc.1-1") == p("1.18.0~rc.1") < p("1.18.0")
    assert p("1.18.0~rc.1-1") == dc.parse_catalog_component_version("1.18.0-rc.1")
    assert dc.parse_catalog_component_version("1.14.6~rc.1") < dc.parse_catalog_component_version("1.14.6")
    with pytest.raises(ValueError, match="'1.x'"):
        p("1.x")
    with pytest.raises(ValueError, match="'1:1.14.6'"):
        dc.parse_catalog_component_version("1:1.14.6")
