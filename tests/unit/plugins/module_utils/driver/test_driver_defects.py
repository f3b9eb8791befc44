"""Unit tests for plugins/module_utils/driver/defects.py: driver_guard on catalog v2
(validation, evaluation by ordering, state conditions, recommendation)."""
import copy
import os

import pytest
import yaml

from ansible_collections.kubegpu.fleet.plugins.module_utils.driver import defects as dc
from ansible_collections.kubegpu.fleet.plugins.module_utils.catalog import validate as cv
from ansible_collections.kubegpu.fleet.plugins.module_utils.catalog import evaluate as ce
from ansible_collections.kubegpu.fleet.tests.lib import paths

REPO = paths.REPO
DRIVER = os.path.join(REPO, "catalog", "v2", "driver.yml")
SEED = "driver-r570-mig-mixed-unschedulable"
CDMM = "driver-cdmm-grace-mig-gds"
H100 = "NVIDIA H100 80GB HBM3"


@pytest.fixture(scope="module")
def driver_doc():
    with open(DRIVER) as f:
        return yaml.safe_load(f)


@pytest.fixture(scope="module")
def entries(driver_doc):
    return cv.validate_documents([driver_doc], "bundled")


def doc(*entries_):
    return {"schema_version": 2, "component": "driver", "version_scheme": "driver", "entries": list(entries_)}


def entry(**over):
    base = {
        "id": "x-test",
        "kind": "defect",
        "title": "Test entry",
        "severity": "high",
        "affected": [{"branch": "570", "introduced": "570.100.01", "fixed": "570.110.01"}],
        "remediation": "Upgrade.",
        "sources": [{"url": "https://example.invalid/1", "verified": "2026-11-24"}],
    }
    base.update(over)
    return base


def merged(driver_doc, *extra_entries):
    return dc.merge_catalog([driver_doc], [doc(*extra_entries)])


def by_id(result):
    return dict((m["id"], m) for m in result["matches"])


# ------------------------------------------------------------------------------ the catalog

def test_seed_entry_carries_the_v1_facts_as_ordered_ranges(entries):
    seed = [e for e in entries if e["id"] == SEED][0]
    assert seed["kind"] == "defect" and seed["severity"] == "critical"
    items = dict((i["branch"], i) for i in seed["affected"])
    assert items["570"]["introduced"] == "570.124.06" and items["570"]["last_affected"] == "570.158.01"
    assert items["570"]["fixed"] == "570.172.08"
    assert "fixed" not in items["575"] and "introduced" not in items["575"]
    assert items["580"] == dict(items["580"], fixed="580.65.06")
    assert seed["conditions"] == {"mig_mixed": True}
    assert "https://github.com/NVIDIA/gpu-operator/issues/1361" in [s["url"] for s in seed["sources"]]


def test_unsourced_v1_entries_are_gone(entries, driver_doc):
    ids = set(e["id"] for e in entries)
    assert not ids & {"nvml-r570-mig-hang", "r535-build-fails-newer-kernels", "r525-gsp-xid119",
                      "cdmm-gh200-gb200", "toolkit-dev-char-symlinks-550"}
    for e in dc.driver_defects(entries):
        for item in e["affected"]:
            assert "535.183.08" not in item.values() and "550.40" not in item.values()


def test_driver_defects_leave_security_entries_out(entries):
    defects = dc.driver_defects(entries)
    assert len(defects) >= 4 and all(e["kind"] == "defect" for e in defects)
    assert len(entries) > len(defects)  # the CSAF security entries are in the same file


# ------------------------------------------------------------------------------ catalog_extra

def test_merge_catalog_extra_forms(driver_doc):
    one = doc(entry(id="site-a"))
    for extra in (one, [one], [one, doc(entry(id="site-b"))]):
        ents, origin = dc.merge_catalog([driver_doc], extra)
        assert origin["site-a"] == "catalog_extra" and origin[SEED] == "bundled"
    ents, origin = dc.merge_catalog([driver_doc], None)
    assert "site-a" not in origin


@pytest.mark.parametrize("extra, needle", [
    ([entry(id="v1-style")], "not a catalog v2 document"),
    ({"entries": [entry()]}, "not a catalog v2 document"),
    ("nvml", "must be a catalog v2 document"),
    (doc(entry(id=SEED)), "already exists in the bundled catalog"),
    (doc(entry(affected=[{"branch": "570", "introduced": "570.120.01", "fixed": "570.110.01"}])),
     "introduced 570.120.01 is not below fixed 570.110.01"),
    (doc(entry(affected=[{"branch": "570", "fixed": 570.11}])), "must be a quoted string"),
    (doc(entry(affected=[{"branch": "570", "fixed": "575.51.02"}])), "not in branch 570"),
    (doc(entry(references=["https://example.invalid"])), "unknown key 'references'"),
    (doc(entry(), entry()), "duplicate entry id 'x-test'"),
    (dict(doc(entry()), component="toolkit"), "unknown component 'toolkit'"),
])
def test_catalog_extra_is_validated_with_the_catalog_rules(driver_doc, extra, needle):
    with pytest.raises(cv.CatalogError, match=r".*" + needle.replace("(", r"\(").replace(".", r"\.")):
        dc.merge_catalog([driver_doc], extra)


# ------------------------------------------------------------------------------ evaluation

@pytest.mark.parametrize("version", ["570.124.06", "570.133.20", "570.148.08", "570.158.01"])
def test_r570_releases_known_bad_when_mig_mixed(entries, version):
    res = dc.evaluate(entries, {"driver_version": version, "mig_mixed": True})
    assert res["verdict"] == "known_bad" and res["branch"] == 570
    m = by_id(res)[SEED]
    assert m["status"] == "known_bad" and m["conditions_met"] == ["mig_mixed"] and m["kind"] == "defect"
    assert m["matched_versions"][0]["by"] == "range"
    assert m["affected_range"] == "branch 570, >= 570.124.06, < 570.172.08"
    assert m["fixed_in_branch"] == "570.172.08"
    assert "https://github.com/NVIDIA/gpu-operator/issues/1361" in m["references"]
    assert res["recommended_version"] == "570.172.08"
    assert res["recommendation"]["same_branch"] is True


def test_ordering_not_membership(entries):
    # Neither 570.153.02 nor 570.169.01 is named anywhere: both are affected by ordering.
    for version in ("570.153.02", "570.169.01"):
        assert dc.evaluate(entries, {"driver_version": version, "mig_mixed": True})["verdict"] == "known_bad"
    m = by_id(dc.evaluate(entries, {"driver_version": "570.169.01", "mig_mixed": True}))[SEED]
    assert "above the last affected version 570.158.01" in m["reasons"][0]
    for good in ("570.86.15", "570.124.05", "570.172.08", "570.195.03"):
        assert dc.evaluate(entries, {"driver_version": good, "mig_mixed": True, "gpu_names": [H100]})["verdict"] == "ok", good


def test_bulletin_first_fixed_build_the_data_center_never_sees(driver_doc):
    # Bulletin 5630 names 570.133.07 as first fixed; data-center releases around it are
    # 570.124.06 (affected) and 570.133.20 (not affected). Compared by ordering, both come out right.
    ents, origin = merged(driver_doc, entry(id="site-bulletin", affected=[
        {"branch": "570", "last_affected": "570.124.06", "fixed": "570.133.07"}]))
    skip = [SEED]
    res = dc.evaluate(ents, {"driver_version": "570.124.06"}, origin=origin, skip=skip)
    assert res["verdict"] == "known_bad" and by_id(res)["site-bulletin"]["source"] == "catalog_extra"
    assert dc.evaluate(ents, {"driver_version": "570.133.20"}, origin=origin, skip=skip)["verdict"] == "ok"
    between = by_id(dc.evaluate(ents, {"driver_version": "570.130.01"}, origin=origin, skip=skip))["site-bulletin"]
    assert between["status"] == "known_bad" and "below the first fixed version 570.133.07" in between["reasons"][0]


def test_r570_at_risk_when_not_mixed_or_unknown(entries):
    res = dc.evaluate(entries, {"driver_version": "570.148.08", "mig_mixed": False})
    assert res["verdict"] == "at_risk" and res["recommended_version"] == "570.172.08"
    assert by_id(res)[SEED]["conditions_not_met"] == ["mig_mixed"]
    res = dc.evaluate(entries, {"driver_version": "570.148.08"})
    assert res["verdict"] == "at_risk"
    assert by_id(res)[SEED]["conditions_unknown"] == ["mig_mixed"]


def test_security_entries_do_not_drive_the_verdict(entries):
    # 570.172.08 is below several R570 security floors (security.driver findings elsewhere),
    # but clear of every known-bad defect: driver_guard says ok.
    sec = ce.evaluate(entries, "driver", "570.172.08", {"mig_mixed": True})
    assert [m for m in sec["matches"] if m["kind"] == "security"]
    res = dc.evaluate(entries, {"driver_version": "570.172.08", "mig_mixed": True})
    assert res["verdict"] == "ok" and res["matches"] == []


@pytest.mark.parametrize("version", ["525.85.12", "535.154.05", "550.54.15", "570.148.08", "570.169.01",
                                     "575.57.08", "580.65.06", "580.95.05"])
@pytest.mark.parametrize("facts", [
    {"mig_mixed": True, "mig_enabled": True, "gpu_names": ["NVIDIA GH200 480GB"]},
    {"mig_mixed": True, "mig_enabled": True, "gpu_names": ["NVIDIA RTX PRO 6000 Blackwell Server Edition"]},
    {"mig_mixed": True, "mig_enabled": True, "gpu_names": ["NVIDIA B200"]},
])
def test_one_evaluator_driver_guard_agrees_with_catalog_evaluate(entries, version, facts):
    # Every condition fact known and holding-or-failing: driver_guard's matches are exactly
    # ce.evaluate's defect matches, its not_applicable exactly ce.evaluate's.
    res = dc.evaluate(entries, dict(facts, driver_version=version))
    v2 = ce.evaluate(entries, "driver", version, dc.node_facts(facts))
    assert sorted(m["id"] for m in res["matches"]) == sorted(m["id"] for m in v2["matches"] if m["kind"] == "defect")
    assert sorted(n["id"] for n in res["not_applicable"]) == sorted(
        n["id"] for n in v2["not_applicable"] if n["kind"] == "defect")
    for m in res["matches"]:
        assert m["status"] == "known_bad"


def test_branch_aware_575_newer_but_unfixed(entries):
    res = dc.evaluate(entries, {"driver_version": "575.57.08", "mig_mixed": True})
    assert res["verdict"] == "known_bad"
    rec = res["recommendation"]
    assert rec["same_branch_fix"] == "none" and rec["same_branch"] is False
    assert res["recommended_version"] == "580.65.06" and rec["branch"] == 580
    assert "no fixed 575 release" in rec["reason"] and "nearest fixed branch is 580" in rec["reason"]
    assert [(a["version"], a["branch"]) for a in rec["alternatives"]] == [("570.172.08", 570)]
    assert by_id(res)[SEED]["fixed_in_branch"] == "none"
    assert dc.evaluate(entries, {"driver_version": "580.65.06", "mig_mixed": True, "gpu_names": [H100]})["verdict"] == "ok"


def test_cdmm_caveat_demotes_the_newer_branch_on_gh200_with_mig(entries):
    node = {"driver_version": "575.57.08", "mig_mixed": True, "mig_enabled": True,
            "gpu_names": ["NVIDIA GH200 480GB"]}
    res = dc.evaluate(entries, node)
    rec = res["recommendation"]
    assert res["recommended_version"] == "570.172.08"
    assert rec["caveats"] == []
    alt = rec["alternatives"][0]
    assert alt["version"] == "580.65.06" and alt["caveats"][0]["id"] == CDMM
    # Without MIG the caveat is only at_risk and the newer branch wins again.
    node.update(mig_enabled=False, mig_mixed=False)
    res = dc.evaluate(entries, node)
    assert res["recommended_version"] == "580.65.06"
    assert res["recommendation"]["caveats"][0]["status"] == "at_risk"


def test_mig_and_gpu_model_conditions(entries):
    node = {"driver_version": "580.95.05", "mig_enabled": True, "gpu_names": ["NVIDIA GB200"]}
    res = dc.evaluate(entries, node)
    m = by_id(res)[CDMM]
    assert m["status"] == "known_bad" and m["conditions_met"] == ["gpu_model", "mig_enabled"]
    assert m["fixed_in_branch"] is None
    assert res["recommended_version"] is None and res["recommendation"]["not_fixed_by_driver"] == [CDMM]
    # MIG off today: the limitation is a reconfiguration away.
    res = dc.evaluate(entries, dict(node, mig_enabled=False))
    assert by_id(res)[CDMM]["status"] == "at_risk" and by_id(res)[CDMM]["conditions_not_met"] == ["mig_enabled"]
    # Another GPU model rules the node out, with the reason.
    res = dc.evaluate(entries, dict(node, gpu_names=["NVIDIA H100 80GB HBM3"]))
    na = dict((n["id"], n["reason"]) for n in res["not_applicable"])
    assert res["verdict"] == "ok" and "does not match /GH200|GB200/" in na[CDMM]
    # GPU model unknown: possibly affected (catalog v2), so at_risk, never ok.
    res = dc.evaluate(entries, dict(node, gpu_names=None))
    assert by_id(res)[CDMM]["status"] == "at_risk" and by_id(res)[CDMM]["conditions_unknown"] == ["gpu_model"]


def test_mig_enabled_only_entry(driver_doc):
    ents, _o = merged(driver_doc, entry(id="site-mig", conditions={"mig_enabled": True}))
    node = {"driver_version": "570.105.01", "mig_enabled": True, "mig_mixed": False}
    assert by_id(dc.evaluate(ents, node))["site-mig"]["status"] == "known_bad"
    assert by_id(dc.evaluate(ents, dict(node, mig_enabled=False)))["site-mig"]["status"] == "at_risk"


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
    m = by_id(res)[SEED]
    assert m["matched_versions"] == [{"version": "570.148.08", "components": ["kernel_module"],
                                      "by": "range", "detail": "branch 570, >= 570.124.06, < 570.172.08"}]
    assert res["recommended_version"] == "570.172.08"
    assert "reboot to load it" in res["recommendation"]["reason"]


def test_same_version_checked_once_with_both_components(entries):
    res = dc.evaluate(entries, {"driver_version": "570.148.08", "kernel_module_version": "570.148.08",
                                "mig_mixed": True})
    assert by_id(res)[SEED]["matched_versions"][0]["components"] == ["userspace", "kernel_module"]


def test_only_kernel_module_known(entries):
    res = dc.evaluate(entries, {"kernel_module_version": "570.133.20", "mig_mixed": True})
    assert res["verdict"] == "known_bad" and res["branch"] == 570
    assert res["recommended_version"] == "570.172.08"


def test_unparseable_versions_raise_naming_the_value(entries):
    with pytest.raises(ValueError, match="'570.abc'"):
        dc.evaluate(entries, {"driver_version": "570.abc"})


def test_skip_entries(entries):
    res = dc.evaluate(entries, {"driver_version": "570.148.08", "mig_mixed": True}, skip=[SEED])
    assert res["verdict"] == "ok"


def test_recommendation_is_raised_past_a_second_entry(driver_doc):
    # A site entry says the first R570 fix is itself bad; the recommendation moves on.
    ents, origin = merged(driver_doc, entry(id="site-570-172", affected=[
        {"branch": "570", "introduced": "570.172.08", "last_affected": "570.172.08", "fixed": "570.181.01"}]))
    res = dc.evaluate(ents, {"driver_version": "570.148.08", "mig_mixed": True}, origin=origin)
    assert res["recommended_version"] == "570.181.01"
    assert res["recommendation"]["same_branch_fix"] == "570.172.08"
    res = dc.evaluate(ents, {"driver_version": "570.172.08"}, origin=origin)
    assert by_id(res)["site-570-172"]["source"] == "catalog_extra"


def test_recommendation_falls_over_when_first_fix_leads_into_unfixed_entry(driver_doc):
    ents, _o = merged(driver_doc, entry(id="site-570-all-late", affected=[
        {"branch": "570", "introduced": "570.172.08"}]))
    res = dc.evaluate(ents, {"driver_version": "570.148.08", "mig_mixed": True})
    rec = res["recommendation"]
    assert rec["same_branch_fix"] == "none"
    assert "site-570-all-late has no fixed 570 release" in rec["same_branch_note"]
    assert res["recommended_version"] == "580.65.06"


def test_matches_sorted_known_bad_first_then_severity(driver_doc):
    ents, _o = merged(
        driver_doc,
        entry(id="a-low", severity="low", affected=[{"branch": "570", "introduced": "570.148.08", "fixed": "570.172.08"}]),
        entry(id="b-risk", severity="critical", conditions={"mig_enabled": True},
              affected=[{"branch": "570", "introduced": "570.148.08", "fixed": "570.172.08"}]))
    res = dc.evaluate(ents, {"driver_version": "570.148.08", "mig_mixed": True, "mig_enabled": False})
    assert [m["id"] for m in res["matches"]] == [SEED, "a-low", "b-risk"]


def test_evaluate_does_not_mutate_the_catalog(driver_doc):
    before = copy.deepcopy(driver_doc)
    ents = cv.validate_documents([driver_doc])
    dc.evaluate(ents, {"driver_version": "575.57.08", "mig_mixed": True})
    assert driver_doc == before


def test_parse_component_version():
    p = dc.parse_component_version
    assert p("1.14.6-1") == p("1.14.6") == p("v1.14.6")
    assert p("1:1.17.0-1") == p("1.17.0")
    assert p("1.17.8-1~ubuntu1") == p("1.17.8")
    assert p("1.18.0~rc.1-1") == p("1.18.0~rc.1") < p("1.18.0")
    with pytest.raises(ValueError, match="'1.x'"):
        p("1.x")
