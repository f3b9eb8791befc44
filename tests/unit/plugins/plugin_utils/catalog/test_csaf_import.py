"""CSAF 2.0 importer on trimmed real NVIDIA bulletins (tests/fixtures/csaf, see its README).

The central test: the importer regenerates the catalog's driver security entries from the
bulletins, equal on every field CSAF carries.
"""
import copy
import glob
import json
import os
import subprocess
import sys

import pytest
import yaml

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.catalog import load as cl
from ansible_collections.kubegpu.fleet.scripts.kubegpu_csaf import importer as ci
from ansible_collections.kubegpu.fleet.tests.lib import paths

REPO = paths.REPO
FIX = os.path.join(REPO, "tests", "fixtures", "csaf")
V2 = os.path.join(REPO, "catalog", "v2")
DRIVER_BULLETINS = ("5520", "5551", "5586", "5614", "5630", "5670", "5703", "5747", "5821")
TOOLKIT_BULLETINS = ("5582", "5585", "5599", "5616", "5659", "5850")
SCRIPT = os.path.join(REPO, "scripts", "import_csaf.py")


def load(aid):
    with open(os.path.join(FIX, "%s.json" % aid)) as f:
        return json.load(f)


def imported(aids, component):
    out = []
    for aid in aids:
        out.extend(ci.import_advisory(load(aid), verified="2026-11-23")["entries"].get(component, []))
    return out


@pytest.fixture(scope="module")
def catalog():
    return cl.load_catalog(V2)


def test_importer_regenerates_the_driver_security_entries(catalog):
    generated = imported(DRIVER_BULLETINS, "driver")
    hand = [e for e in catalog if e["component"] == "driver" and e["kind"] == "security"]
    assert sorted(e["id"] for e in generated) == sorted(e["id"] for e in hand)
    assert len(generated) == 34
    assert ci.compare(generated, hand) == []
    # the comparison is not vacuous: a changed fixed version is reported
    broken = copy.deepcopy(hand)
    broken[0]["affected"][0]["fixed"] = "999.1.1"
    assert ci.compare(generated, broken)


def test_toolkit_bulletins_differ_only_where_the_catalog_was_refined(catalog):
    comps = ("container-toolkit", "gpu-operator", "device-plugin", "mig-manager")
    diffs = []
    for comp in comps:
        gen = imported(TOOLKIT_BULLETINS, comp)
        diffs.extend(ci.compare(gen, [e for e in catalog if e["component"] == comp]))
    ids = sorted({d.split(":")[0] for d in diffs})
    assert ids == ["ctk-cve-2024-0135", "ctk-cve-2024-0136", "ctk-cve-2024-0137", "ctk-cve-2025-23266",
                   "ctk-cve-2025-23267", "gpu-operator-cve-2025-23266", "gpu-operator-cve-2025-23267"]
    assert all("affected differs" in d for d in diffs)


def test_bulletin_5630_keeps_the_non_data_center_fixed_build_and_skips_other_rows():
    result = ci.import_advisory(load("5630"), path="2025/5630/5630.json", verified="2026-11-23")
    (entry,) = result["entries"]["driver"]
    items = {i["branch"]: i for i in entry["affected"]}
    assert sorted(items) == ["535", "550", "570", "575"]
    assert items["570"] == {"branch": "570", "fixed": "570.133.07"}
    assert entry["cves"][0] == {"id": "CVE-2025-23244", "cwe": "CWE-863",
                                "cvss": {"version": "3.1", "base_score": 7.8,
                                         "vector": "CVSS:3.1/AV:L/AC:L/PR:L/UI:N/S:U/C:H/I:H/A:H"}}
    assert entry["severity"] == "high"
    skipped = sorted((s["product"], s["arch"], s["reason"].split(":")[0]) for s in result["skipped"])
    assert skipped == sorted(
        [("GeForce", "Linux(R%s)" % b, "GeForce/RTX/Quadro/NVS/Studio driver rows") for b in (535, 550, 570, 575)] * 2
        + [("Virtual GPU Manager", "Ubuntu(R570 vGPU 18)", "vGPU host software (Virtual GPU Manager)")] * 2)
    assert all(s["product_id"] and s["version_text"] for s in result["skipped"])
    assert [s["url"] for s in entry["sources"]] == [
        "https://nvidia.custhelp.com/app/answers/detail/a_id/5630",
        "https://github.com/NVIDIA/product-security/blob/main/2025/5630/5630.json"]
    assert entry["advisory"] == {"publisher": "NVIDIA Product Security", "id": "5630",
                                 "title": "Security Bulletin: NVIDIA GPU Display Driver - April 2025",
                                 "revision": "1.1.0", "date": "2025-04-30"}


def test_bulletin_5659_maps_four_components_and_reports_qualifiers():
    result = ci.import_advisory(load("5659"), verified="2026-11-23")
    assert sorted(result["entries"]) == ["container-toolkit", "device-plugin", "gpu-operator", "mig-manager"]
    dp = {e["id"]: e for e in result["entries"]["device-plugin"]}
    assert dp["device-plugin-cve-2025-23266"]["affected"] == [{"last_affected": "0.17.2", "fixed": "0.17.3"}]
    assert "cdi-annotations and/or cdi-cri" in dp["device-plugin-cve-2025-23266"]["notes"]
    assert len(result["warnings"]) == 8 and all("structured condition" in w for w in result["warnings"])
    ctk = {e["id"]: e for e in result["entries"]["container-toolkit"]}
    assert ctk["ctk-cve-2025-23266"]["severity"] == "critical"
    assert ctk["ctk-cve-2025-23266"]["cves"][0]["cvss"]["base_score"] == 9.0


def test_versions_spelled_with_v_and_two_fields_are_normalised():
    result = ci.import_advisory(load("5585"), verified="2026-11-23")
    (entry,) = result["entries"]["container-toolkit"]
    assert entry["affected"] == [{"last_affected": "1.16.2", "fixed": "1.17.0"}]  # bulletin: "v1.16.2", "v1.17"
    (op,) = result["entries"]["gpu-operator"]
    assert op["affected"] == [{"last_affected": "24.6.2", "fixed": "24.9.0"}]


def test_a_score_that_does_not_match_its_vector_is_reported():
    doc = load("5586")
    doc["vulnerabilities"][0]["scores"][0]["cvss_v3"]["baseScore"] = 9.9
    result = ci.import_advisory(doc, verified="2026-11-23")
    assert any("scores 8.2, the document says 9.9" in w for w in result["warnings"])
    doc["vulnerabilities"][0]["scores"][0]["cvss_v3"]["vectorString"] = "CVSS:3.1/AV:X"
    with pytest.raises(ci.CsafError, match="does not parse"):
        ci.import_advisory(doc)


@pytest.mark.parametrize("mutate,message", [
    (lambda d: d.pop("document"), "not a CSAF document"),
    (lambda d: d["document"].update(csaf_version="1.2"), "csaf_version is '1.2'"),
    (lambda d: d["document"].update(category="csaf_informational_advisory"), "not an advisory"),
    (lambda d: d.pop("product_tree"), "no product_tree"),
    (lambda d: d["vulnerabilities"][0]["product_status"]["fixed"].append("nope"), "product_tree lacks"),
])
def test_unreadable_documents_are_refused(mutate, message):
    doc = load("5586")
    mutate(doc)
    with pytest.raises(ci.CsafError, match=message):
        ci.import_advisory(doc)


def test_an_unknown_version_text_names_the_row():
    doc = load("5586")
    branches = doc["product_tree"]["branches"][0]["branches"]
    for arch in branches:
        for pv in arch.get("branches", []):
            if pv["product"]["name"].startswith("All driver versions"):
                pv["product"]["name"] = "Versions from the spring release"
    with pytest.raises(ci.CsafError, match="'Versions from the spring release'"):
        ci.import_advisory(doc)


def test_standard_layout_relationships_and_remediations():
    """The OASIS layout vendor > product_name > product_version, plus a relationship and remediations."""
    doc = {
        "document": {"category": "csaf_security_advisory", "csaf_version": "2.0", "title": "t",
                     "publisher": {"name": "NVIDIA Product Security"},
                     "tracking": {"id": "9999", "version": "1", "current_release_date": "2026-01-01T00:00:00Z"}},
        "product_tree": {
            "branches": [{"category": "vendor", "name": "NVIDIA", "branches": [
                {"category": "product_name", "name": "NVIDIA Container Toolkit", "branches": [
                    {"category": "product_version", "name": "All versions up to and including 1.19.0",
                     "product": {"product_id": "ctk-old", "name": "NVIDIA Container Toolkit <= 1.19.0"}},
                    {"category": "product_version", "name": "1.19.1",
                     "product": {"product_id": "ctk-new", "name": "NVIDIA Container Toolkit 1.19.1"}}]}]}],
            "relationships": [{"category": "default_component_of", "product_reference": "ctk-old",
                               "relates_to_product_reference": "os",
                               "full_product_name": {"product_id": "ctk-old-on-os", "name": "x"}}],
        },
        "vulnerabilities": [{
            "cve": "CVE-2026-24260",
            "product_status": {"known_affected": ["ctk-old-on-os"], "fixed": ["ctk-new"]},
            "scores": [{"products": ["ctk-old-on-os"], "cvss_v3": {
                "version": "3.1", "baseScore": 8.5, "vectorString": "CVSS:3.1/AV:N/AC:H/PR:L/UI:N/S:C/C:H/I:H/A:H"}}],
            "remediations": [
                {"category": "vendor_fix", "details": "<p>Install <b>1.19.1</b></p>", "product_ids": ["ctk-old-on-os"],
                 "url": "https://docs.nvidia.com/"},
                {"category": "mitigation", "details": "Use CDI.", "product_ids": ["ctk-old-on-os"]}],
        }],
    }
    result = ci.import_advisory(doc, verified="2026-11-23")
    (entry,) = result["entries"]["container-toolkit"]
    assert entry["affected"] == [{"last_affected": "1.19.0", "fixed": "1.19.1"}]
    assert entry["remediation"] == "Install 1.19.1 (https://docs.nvidia.com/)"
    assert entry["mitigation"] == "Use CDI."
    assert [s["url"] for s in entry["sources"]] == ["https://nvidia.custhelp.com/app/answers/detail/a_id/9999"]


def test_dumped_entries_quote_versions_and_load_back_equal():
    entries = ci.import_advisory(load("5821"), verified="2026-11-23")["entries"]["driver"]
    text = ci.dump_entries(entries)
    assert 'fixed: "535.309.01"' in text and 'branch: "535"' in text and "&id" not in text
    assert yaml.safe_load(text) == [dict(e) for e in entries]


def _run(*args, cwd=FIX):
    return subprocess.run([sys.executable, SCRIPT] + list(args), cwd=cwd, capture_output=True, text=True, timeout=120,
                          check=False)


def test_cli_check_passes_for_driver_bulletins_and_flags_refined_toolkit_entries():
    ok = _run("--check", V2, *["%s.json" % a for a in DRIVER_BULLETINS])
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "34 generated entries, 0 difference(s)" in ok.stderr
    diff = _run("--check", V2, "5599.json")
    assert diff.returncode == 1
    assert "ctk-cve-2024-0135: affected differs" in diff.stdout


def test_cli_merge_creates_valid_component_files(tmp_path):
    out = tmp_path / "v2"
    out.mkdir()
    res = _run("--merge", str(out), "--verified", "2026-11-23", "5747.json", "5850.json")
    assert res.returncode == 0, res.stderr
    entries = cl.load_catalog(str(out))
    assert sorted(e["id"] for e in entries) == ["ctk-cve-2026-24260", "driver-cve-2025-33219",
                                                "driver-cve-2025-33220", "gpu-operator-cve-2026-24260"]
    again = _run("--merge", str(out), "5747.json")  # nothing new: files stay as they are
    assert again.returncode == 0 and "nothing new" in again.stderr
    assert len(cl.load_catalog(str(out))) == 4
    bad = _run(os.path.join(str(tmp_path), "missing.json"))
    assert bad.returncode == 2 and "missing.json" in bad.stderr


def test_fixtures_are_trimmed_real_documents():
    for path in glob.glob(os.path.join(FIX, "*.json")):
        with open(path) as f:
            doc = json.load(f)
        assert doc["document"]["publisher"]["name"] == "NVIDIA Product Security", path
        assert os.path.getsize(path) < 32 * 1024, path
