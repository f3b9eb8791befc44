"""Catalog v2: every file against the JSON schema and the semantic rules; the evaluator.

The evaluator tests run the real catalog (catalog/v2) through plugins/plugin_utils/cv.py
with node facts, one test per entry class and condition kind (not per entry).
"""
import copy
import glob
import json
import os
import re

import jsonschema
import pytest
import yaml
from cvss import CVSS3

from ansible_collections.kubegpu.fleet.plugins.module_utils._common.versions import (
    DevicePluginVersion,
    DriverVersion,
    SemVer,
)
from ansible_collections.kubegpu.fleet.plugins.module_utils.catalog import validate as cv
from ansible_collections.kubegpu.fleet.plugins.module_utils.catalog import evaluate as ce
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.catalog import load as cl
from ansible_collections.kubegpu.fleet.tests.lib import paths

REPO = paths.REPO
V2 = os.path.join(REPO, "catalog", "v2")
SCHEMA = os.path.join(REPO, "catalog", "schema", "catalog-v2.schema.json")
FILES = sorted(glob.glob(os.path.join(V2, "*.yml")))
PARSERS = {"driver": DriverVersion, "semver": SemVer, "device-plugin": DevicePluginVersion}


@pytest.fixture(scope="module")
def schema():
    with open(SCHEMA) as f:
        data = json.load(f)
    jsonschema.Draft202012Validator.check_schema(data)
    return data


@pytest.fixture(scope="module")
def docs():
    out = {}
    for path in FILES:
        with open(path) as f:
            out[os.path.basename(path)] = yaml.safe_load(f)
    return out


@pytest.fixture(scope="module")
def entries():
    return cl.load_catalog(V2)


def by_id(result, eid):
    for group in ("matches", "not_applicable"):
        for m in result[group]:
            if m["id"] == eid:
                return m
    return None


# --------------------------------------------------------------------------- the files


def test_one_file_per_component_and_no_other_file():
    names = sorted(os.path.basename(p) for p in glob.glob(os.path.join(V2, "*")))
    assert names == sorted("%s.yml" % c for c in cv.COMPONENT_SCHEMES)


@pytest.mark.parametrize("path", FILES, ids=os.path.basename)
def test_file_validates_against_schema(schema, path):
    with open(path) as f:
        doc = yaml.safe_load(f)
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(doc), key=lambda e: list(e.path))
    assert not errors, ["%s: %s" % (list(e.path), e.message) for e in errors]
    assert doc["component"] + ".yml" == os.path.basename(path)


def test_catalog_size_and_coverage(entries):
    comps = {e["component"] for e in entries}
    assert len(entries) >= 60
    assert len(comps) >= 5
    kinds = {(e["component"], e["kind"]) for e in entries}
    for comp in ("driver", "container-toolkit", "gpu-operator", "device-plugin", "mig-manager"):
        assert (comp, "security") in kinds
    assert ("fabric-manager", "defect") in kinds


def test_every_entry_has_a_verified_https_source(entries):
    for e in entries:
        assert e["sources"], e["id"]
        for s in e["sources"]:
            assert s["url"].startswith("https://"), (e["id"], s)
            assert re.match(r"^\d{4}-\d{2}-\d{2}$", s["verified"]), (e["id"], s)


def test_security_entries_name_nvidia_bulletin_and_csaf_file(entries):
    for e in entries:
        if e["kind"] != "security":
            continue
        urls = [s["url"] for s in e["sources"]]
        aid = e["advisory"]["id"]
        assert "https://nvidia.custhelp.com/app/answers/detail/a_id/%s" % aid in urls, e["id"]
        assert any(re.search(r"NVIDIA/product-security/blob/main/\d{4}/%s/%s\.json$" % (aid, aid), u) for u in urls)


def test_no_duplicate_ids_across_files(docs):
    ids = [e["id"] for d in docs.values() for e in d["entries"]]
    assert len(ids) == len(set(ids))


def test_ranges_are_well_formed_and_ordered(docs):
    """Re-checked here with _common/versions.py directly (not through the catalog's validator)."""
    for doc in docs.values():
        parse = PARSERS[doc["version_scheme"]]
        for e in doc["entries"]:
            for item in e["affected"]:
                bounds = {}
                for key in ("introduced", "last_affected", "fixed"):
                    if key in item:
                        assert isinstance(item[key], str), (e["id"], key)
                        bounds[key] = parse(cv.normalize_version_text(doc["version_scheme"], item[key]))
                        if "branch" in item:
                            assert item[key].split(".")[0] == item["branch"], (e["id"], item)
                lo, last, fix = bounds.get("introduced"), bounds.get("last_affected"), bounds.get("fixed")
                assert lo is None or last is None or lo <= last, e["id"]
                assert lo is None or fix is None or lo < fix, e["id"]
                assert last is None or fix is None or last < fix, e["id"]
                assert bounds or e.get("conditions") or item.get("conditions"), e["id"]


def test_security_cvss_vectors_score_what_the_catalog_says(entries):
    for e in entries:
        if e["kind"] != "security":
            assert "cves" not in e, e["id"]
            continue
        top = 0.0
        for c in e["cves"]:
            computed = float(CVSS3(c["cvss"]["vector"]).base_score)
            assert computed == c["cvss"]["base_score"], (e["id"], c)
            top = max(top, computed)
        assert e["severity"] == cv.cvss_rating(top), e["id"]


def test_the_two_wrong_v1_facts_are_gone(docs):
    text = "".join(open(p).read() for p in FILES)
    assert "535.183.08" not in text
    for doc in docs.values():
        for e in doc["entries"]:
            for item in e["affected"]:
                assert "550.40" not in [item.get(k) for k in ("introduced", "last_affected", "fixed")]
    devchar = [e for e in docs["container-toolkit.yml"]["entries"] if e["id"] == "ctk-dev-char-symlinks-550"][0]
    assert devchar["conditions"] == {"driver_branch": ["550"]}


def test_schema_rejects_a_list_of_versions(schema, docs):
    doc = copy.deepcopy(docs["driver.yml"])
    doc["entries"][0]["affected"][0]["versions"] = ["570.124.06", "570.133.20"]
    assert not jsonschema.Draft202012Validator(schema).is_valid(doc)


# --------------------------------------------------------------------------- validator


def _doc(entry, component="driver"):
    return {"schema_version": 2, "component": component, "version_scheme": cv.COMPONENT_SCHEMES[component],
            "entries": [entry]}


def _defect(**over):
    entry = {"id": "x", "kind": "defect", "title": "t", "severity": "high", "remediation": "r",
             "affected": [{"branch": "570", "introduced": "570.124.06", "fixed": "570.172.08"}],
             "sources": [{"url": "https://example.invalid/", "verified": "2026-11-23"}]}
    entry.update(over)
    return entry


@pytest.mark.parametrize("over,message", [
    ({"affected": [{"branch": "570", "introduced": "570.172.08", "fixed": "570.124.06"}]}, "not below fixed"),
    ({"affected": [{"branch": "570", "last_affected": "570.172.08", "fixed": "570.172.08"}]}, "not below fixed"),
    ({"affected": [{"branch": "570", "introduced": "570.200.01", "last_affected": "570.124.06"}]}, "above last_affected"),
    ({"affected": [{"branch": "570", "fixed": "580.65.06"}]}, "not in branch 570"),
    ({"affected": [{"branch": "550", "fixed": 550.4}]}, "quoted string"),
    ({"affected": [{"fixed": "570.x"}]}, "cannot parse"),
    ({"affected": [{}]}, "would match every version"),
    ({"conditions": {"mig_mode": True}}, "unknown condition 'mig_mode'"),
    ({"conditions": {"gpu_model": "GH200("}}, "bad regular expression"),
    ({"conditions": {"mig_mixed": "yes"}}, "true or false"),
    ({"conditions": {"runtime": {"except": ["crun"]}}}, "takes a list"),
    ({"sources": []}, "at least one source"),
    ({"kind": "security"}, "at least one CVE"),
    ({"cves": [{"id": "CVE-2025-1", "cvss": {"base_score": 5.0, "vector": "v", "version": "3.1"}}]}, "carries no CVEs"),
])
def test_validator_rejects(over, message):
    with pytest.raises(cv.CatalogError, match=re.escape(message)):
        cv.validate_catalog([_doc(_defect(**over))])


def test_validator_rejects_severity_that_is_not_the_cvss_rating():
    entry = _defect(kind="security", severity="medium",
                    cves=[{"id": "CVE-2025-23244", "cvss": {"version": "3.1", "base_score": 7.8,
                                                            "vector": "CVSS:3.1/AV:L/AC:L/PR:L/UI:N/S:U/C:H/I:H/A:H"}}],
                    advisory={"id": "5630", "revision": "1.0", "date": "2025-04-24"})
    with pytest.raises(cv.CatalogError, match="does not match the highest CVSS base score 7.8 .high."):
        cv.validate_catalog([_doc(entry)])


def test_validator_rejects_duplicate_ids_and_wrong_headers():
    with pytest.raises(cv.CatalogError, match="duplicate entry id 'x'"):
        cv.validate_catalog([_doc(_defect()), _doc(_defect(affected=[{"fixed": "1.17.8"}]), "container-toolkit")])
    bad = _doc(_defect())
    bad["version_scheme"] = "semver"
    with pytest.raises(cv.CatalogError, match="uses version_scheme driver"):
        cv.validate_catalog([bad])
    bad = _doc(_defect())
    bad["schema_version"] = 1
    with pytest.raises(cv.CatalogError, match="schema_version must be 2"):
        cv.validate_catalog([bad])


def test_extra_documents_join_the_catalog_and_are_validated():
    extra = _doc(_defect(id="site-local-570-regression"))
    entries = cl.load_catalog(V2, extra_docs=[extra])
    assert any(e["id"] == "site-local-570-regression" and e["component"] == "driver" for e in entries)
    clash = _doc(_defect(id="driver-cve-2025-23244"))
    with pytest.raises(cv.CatalogError, match="duplicate entry id 'driver-cve-2025-23244'"):
        cl.load_catalog(V2, extra_docs=[clash])


# --------------------------------------------------------------------------- evaluator: driver security


def test_driver_security_per_branch_fixed_versions(entries):
    r = ce.evaluate(entries, "driver", "535.161.08")
    m = by_id(r, "driver-cve-2024-0090")
    assert m["status"] == "affected" and m["fixed"] == "535.183.01" and m["branch"] == "535"
    assert m["cves"] == ["CVE-2024-0090"] and m["max_cvss"] == 7.8
    assert m["cvss_vectors"]["CVE-2024-0090"] == "CVSS:3.1/AV:L/AC:L/PR:L/UI:N/S:U/C:H/I:H/A:H"
    assert by_id(ce.evaluate(entries, "driver", "550.54.15"), "driver-cve-2024-0090")["fixed"] == "550.90.07"
    assert by_id(ce.evaluate(entries, "driver", "470.223.02"), "driver-cve-2024-0090")["fixed"] == "470.256.02"
    # numeric per field: 535.183.06 > 535.183.01 (fixed), 535.183.01 itself is fixed
    assert by_id(ce.evaluate(entries, "driver", "535.183.06"), "driver-cve-2024-0090") is None
    assert by_id(ce.evaluate(entries, "driver", "535.183.01"), "driver-cve-2024-0090") is None


def test_driver_first_fixed_that_is_not_a_data_center_build_compares_by_ordering(entries):
    # bulletin 5630 names 570.133.07 for R570; the data-center releases around it are 570.124.06, 570.133.20
    hit = by_id(ce.evaluate(entries, "driver", "570.124.06"), "driver-cve-2025-23244")
    assert hit["status"] == "affected" and hit["fixed"] == "570.133.07"
    assert by_id(ce.evaluate(entries, "driver", "570.133.20"), "driver-cve-2025-23244") is None


def test_driver_branch_not_in_a_bulletin_does_not_match_its_entry(entries):
    # 5630 lists R535/R550/R570/R575; R560 is not a listed branch
    assert by_id(ce.evaluate(entries, "driver", "560.35.03"), "driver-cve-2025-23244") is None
    assert by_id(ce.evaluate(entries, "driver", "575.51.01"), "driver-cve-2025-23244")["fixed"] == "575.51.02"


def test_driver_package_version_is_normalised(entries):
    r = ce.evaluate(entries, "driver", "3:570.124.06-0ubuntu1")
    assert by_id(r, "driver-cve-2025-23244")["version"] == "570.124.06"


def test_fleet_on_latest_fixes_has_no_security_match(entries):
    # the latest fix of each branch in the newest bulletins (5821 for R535, 5861 for the rest)
    for version in ("535.309.01", "580.178.04", "595.91.07", "610.57.04", "615.71.09"):
        for facts in ({}, {"vgpu_guest": True}, {"vgpu_guest": False}):
            r = ce.evaluate(entries, "driver", version, facts)
            assert [m["id"] for m in r["matches"] if m["kind"] == "security"] == [], (version, facts)
    # one release earlier on R580 is not clean
    assert [m for m in ce.evaluate(entries, "driver", "580.159.03")["matches"] if m["kind"] == "security"]


# --------------------------------------------------------------------------- evaluator: defects, conditions


def test_defect_with_a_bool_state_condition(entries):
    # 570.148.08 is between 570.124.06 and 570.158.01: matched by ordering, not by a list
    for version in ("570.124.06", "570.148.08", "570.158.01"):
        m = by_id(ce.evaluate(entries, "driver", version, {"mig_mixed": True}), "driver-r570-mig-mixed-unschedulable")
        assert m["status"] == "affected" and m["fixed"] == "570.172.08" and m["kind"] == "defect", version
    assert by_id(ce.evaluate(entries, "driver", "570.172.08", {"mig_mixed": True}),
                 "driver-r570-mig-mixed-unschedulable") is None
    assert by_id(ce.evaluate(entries, "driver", "570.86.15", {"mig_mixed": True}),
                 "driver-r570-mig-mixed-unschedulable") is None
    off = by_id(ce.evaluate(entries, "driver", "570.148.08", {"mig_mixed": False}), "driver-r570-mig-mixed-unschedulable")
    assert off["status"] == "not_applicable" and "mig_mixed is false" in off["reasons"]
    unknown = by_id(ce.evaluate(entries, "driver", "570.148.08"), "driver-r570-mig-mixed-unschedulable")
    assert unknown["status"] == "possibly_affected" and unknown["unknown_conditions"] == ["mig_mixed unknown"]


def test_version_above_last_affected_and_below_fixed_is_affected_by_ordering(entries):
    m = by_id(ce.evaluate(entries, "driver", "570.169.01", {"mig_mixed": True}), "driver-r570-mig-mixed-unschedulable")
    assert m["status"] == "affected"
    assert "above the last affected version 570.158.01" in m["reasons"][0]


def test_regex_condition_on_gpu_model(entries):
    facts = {"gpu_model": ["NVIDIA GH200 480GB"], "mig_enabled": True}
    m = by_id(ce.evaluate(entries, "driver", "580.95.05", facts), "driver-cdmm-grace-mig-gds")
    assert m["status"] == "affected" and m["fixed"] is None
    h100 = {"gpu_model": ["NVIDIA H100 80GB HBM3"], "mig_enabled": True}
    other = by_id(ce.evaluate(entries, "driver", "580.95.05", h100), "driver-cdmm-grace-mig-gds")
    assert other["status"] == "not_applicable"
    assert by_id(ce.evaluate(entries, "driver", "570.172.08", facts), "driver-cdmm-grace-mig-gds") is None


def test_enum_condition_list_facts_and_injection_mode(entries):
    # CVE-2024-0132: legacy (default) mode only
    legacy = by_id(ce.evaluate(entries, "container-toolkit", "1.16.1", {"injection_mode": "legacy"}), "ctk-cve-2024-0132")
    assert legacy["status"] == "affected" and legacy["fixed"] == "1.16.2" and legacy["severity"] == "critical"
    cdi = by_id(ce.evaluate(entries, "container-toolkit", "1.16.1", {"injection_mode": "cdi"}), "ctk-cve-2024-0132")
    assert cdi["status"] == "not_applicable"
    # device plugin: any of the configured strategies counts
    facts = {"device_list_strategy": ["envvar", "cdi-cri"], "runtime": "runc"}
    assert by_id(ce.evaluate(entries, "device-plugin", "v0.17.2", facts), "device-plugin-cve-2025-23266")["status"] == "affected"
    facts = {"device_list_strategy": ["envvar"], "runtime": "runc"}
    assert by_id(ce.evaluate(entries, "device-plugin", "v0.17.2", facts), "device-plugin-cve-2025-23266")["status"] == "not_applicable"


def test_nvidiascape_item_conditions_cdi_before_1_17_5_and_crun(entries):
    def ev(version, **facts):
        return by_id(ce.evaluate(entries, "container-toolkit", version, facts), "ctk-cve-2025-23266")

    assert ev("1.17.3", injection_mode="legacy", runtime="runc")["status"] == "not_applicable"
    assert ev("1.17.3", injection_mode="cdi", runtime="runc")["status"] == "affected"
    hit = ev("1.17.6", injection_mode="legacy", runtime="runc")
    assert hit["status"] == "affected" and hit["fixed"] == "1.17.8" and hit["max_cvss"] == 9.0
    assert ev("1.17.6", injection_mode="legacy", runtime="crun")["status"] == "not_applicable"
    assert ev("1.17.8", injection_mode="cdi", runtime="runc") is None
    assert "disable-cuda-compat-lib-hook" in hit["mitigation"]


def test_crun_gets_its_own_fixed_version_for_cve_2025_23267(entries):
    def ev(version, **facts):
        return by_id(ce.evaluate(entries, "container-toolkit", version, facts), "ctk-cve-2025-23267")

    assert ev("1.17.6", runtime="crun")["fixed"] == "1.17.7"
    assert ev("1.17.6", runtime="runc")["fixed"] == "1.17.8"
    assert ev("1.17.7", runtime="crun")["status"] == "not_applicable"
    assert ev("1.17.7", runtime="runc")["status"] == "affected"
    unknown = ev("1.17.6")  # runtime unknown: the conservative (later) fix is reported
    assert unknown["status"] == "possibly_affected" and unknown["fixed"] == "1.17.8"


def test_toolkit_condition_on_the_driver_branch(entries):
    m = by_id(ce.evaluate(entries, "container-toolkit", "1.14.5", {"driver_branch": "550"}), "ctk-dev-char-symlinks-550")
    assert m["status"] == "affected" and m["fixed"] == "1.14.6"
    m = by_id(ce.evaluate(entries, "container-toolkit", "1.14.5", {"driver_branch": "535"}), "ctk-dev-char-symlinks-550")
    assert m["status"] == "not_applicable"


def test_fabric_manager_mismatch_on_nvswitch_only(entries):
    def ev(**facts):
        return by_id(ce.evaluate(entries, "fabric-manager", "570.172.08", facts), "fabric-manager-driver-version-mismatch")

    hit = ev(nvswitch=True, fabric_manager_matches_driver=False)
    assert hit["status"] == "affected" and hit["severity"] == "critical"
    assert ev(nvswitch=True, fabric_manager_matches_driver=True)["status"] == "not_applicable"
    assert ev(nvswitch=False, fabric_manager_matches_driver=False)["status"] == "not_applicable"


def test_mig_manager_os_and_preinstalled_driver(entries):
    hit = by_id(ce.evaluate(entries, "mig-manager", "v0.13.1", {"os": "rhel8", "driver_preinstalled": True}),
                "mig-manager-rhel8-glibc")
    assert hit["status"] == "affected" and hit["fixed"] is None
    assert by_id(ce.evaluate(entries, "mig-manager", "v0.12.3", {"os": "rhel8", "driver_preinstalled": True}),
                 "mig-manager-rhel8-glibc") is None


# --------------------------------------------------------------------------- evaluator: version schemes


def test_pre_release_ordering(entries):
    # device plugin: 0.16.0-rc.1 < 0.16.0 (the fix is in 0.16.0 only); 0.17.0-rc.1 > 0.16.2
    facts = {"mig_strategy": "mixed"}
    assert by_id(ce.evaluate(entries, "device-plugin", "v0.16.0-rc.1", facts), "device-plugin-mixed-empty-mig-error")
    assert by_id(ce.evaluate(entries, "device-plugin", "v0.16.0", facts), "device-plugin-mixed-empty-mig-error") is None
    facts = {"device_list_strategy": ["volume-mounts"]}
    assert by_id(ce.evaluate(entries, "device-plugin", "v0.16.1", facts), "device-plugin-volume-mounts-cap-sys-admin")
    assert by_id(ce.evaluate(entries, "device-plugin", "v0.17.0-rc.1", facts),
                 "device-plugin-volume-mounts-cap-sys-admin") is None
    # the device plugin's pre-v0.6 1.0.0-betaN tags order below every v0.x release
    assert by_id(ce.evaluate(entries, "device-plugin", "1.0.0-beta6", {}), "device-plugin-xid109-marks-unhealthy")
    # toolkit: 1.17.8-rc.1 is a pre-release of the fix, still affected
    hit = by_id(ce.evaluate(entries, "container-toolkit", "1.17.8-rc.1", {"injection_mode": "legacy", "runtime": "runc"}),
                "ctk-cve-2025-23266")
    assert hit["status"] == "affected"


def test_semver_v_prefix_package_revision_and_image_flavour(entries):
    facts = {"injection_mode": "legacy", "runtime": "runc"}
    for version in ("1.17.7", "v1.17.7", "1.17.7-1", "1:1.17.7-1.el9", "v1.17.7-ubuntu20.04", "v1.17.7-ubi8"):
        hit = by_id(ce.evaluate(entries, "container-toolkit", version, facts), "ctk-cve-2025-23266")
        assert hit and hit["version"] == "1.17.7", version
    for version in ("1.17.8-1", "v1.17.8-ubuntu20.04"):
        assert by_id(ce.evaluate(entries, "container-toolkit", version, facts), "ctk-cve-2025-23266") is None
    assert by_id(ce.evaluate(entries, "gpu-operator", "v25.3.1", {"runtime": "runc"}), "gpu-operator-cve-2025-23266")
    assert by_id(ce.evaluate(entries, "gpu-operator", "v25.3.2", {"runtime": "runc"}), "gpu-operator-cve-2025-23266") is None
    # "v1.17" (bulletin 5585's spelling) reads as 1.17.0
    assert by_id(ce.evaluate(entries, "container-toolkit", "v1.17", {}), "ctk-cve-2024-0134") is None


def test_bad_input_names_the_value(entries):
    with pytest.raises(cv.CatalogError, match="unknown component 'cuda'"):
        ce.evaluate(entries, "cuda", "12.4.0")
    with pytest.raises(cv.CatalogError, match="'latest'"):
        ce.evaluate(entries, "container-toolkit", "latest")
    with pytest.raises(cv.CatalogError, match="'570'"):
        ce.evaluate(entries, "driver", "570")


def test_evaluate_orders_matches_by_severity(entries):
    facts = {"injection_mode": "legacy", "runtime": "runc"}
    ctk = ce.evaluate(entries, "container-toolkit", "1.16.1", facts)["matches"]
    assert ctk[0]["severity"] == "critical"
    driver = ce.evaluate(entries, "driver", "535.161.07", facts)["matches"]
    order = {s: n for n, s in enumerate(cv.SEVERITIES)}
    sev = [order[m["severity"]] for m in driver]
    assert sev == sorted(sev)
    assert {m["id"] for m in driver} >= {"driver-cve-2024-0090", "driver-cve-2025-23244"}
    assert "driver-cve-2024-0074" not in {m["id"] for m in driver}  # 535.161.07 is its fix


# --------------------------------------------------------------------------- property: ordering oracle

from hypothesis import given, settings, strategies as st  # noqa: E402


@settings(max_examples=200, deadline=None)
@given(branch=st.sampled_from([450, 470, 510, 515, 525, 535, 550, 570, 575, 580, 590, 595, 610, 615]),
       minor=st.integers(min_value=0, max_value=320), patch=st.integers(min_value=0, max_value=99))
def test_driver_security_matches_equal_a_tuple_ordering_oracle(entries, branch, minor, patch):
    version = "%d.%d.%02d" % (branch, minor, patch)
    key = (branch, minor, patch)

    def tup(text):
        parts = [int(p) for p in text.split(".")]
        return tuple(parts + [0] * (3 - len(parts)))

    expected = {}
    for e in entries:
        if e["component"] != "driver" or e["kind"] != "security":
            continue
        for item in e["affected"]:
            if item.get("conditions"):  # vGPU guest-driver items: not on bare metal
                continue
            if item["branch"] == str(branch) and key < tup(item["fixed"]):
                expected[e["id"]] = item["fixed"]
    result = ce.evaluate(entries, "driver", version, {"vgpu_guest": False})
    got = {m["id"]: m["fixed"] for m in result["matches"] if m["kind"] == "security"}
    assert got == expected
