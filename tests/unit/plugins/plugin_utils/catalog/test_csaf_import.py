"""CSAF 2.0 importer (plugins/plugin_utils/catalog/csaf.py) on documents this project writes in
NVIDIA's shape (tests/lib/csaf_docs.py), and the regeneration check of the bundled catalog
against NVIDIA's real bulletins in ../shared/reference/nvidia-csaf (skipped where absent).
"""
import copy
import glob
import os
import subprocess
import sys

import pytest
import yaml

from ansible_collections.kubegpu.fleet.plugins.module_utils.catalog import evaluate as ce
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.catalog import csaf as ci
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.catalog import load as cl
from ansible_collections.kubegpu.fleet.tests.lib import csaf_docs as docs
from ansible_collections.kubegpu.fleet.tests.lib import paths

REPO = paths.REPO
V2 = os.path.join(REPO, "catalog", "v2")
SCRIPT = os.path.join(REPO, "scripts", "import_csaf.py")


def _run(*args, cwd=None):
    return subprocess.run([sys.executable, SCRIPT] + list(args), cwd=cwd, capture_output=True, text=True, timeout=300,
                          check=False)


# --------------------------------------------------------------- the real bulletins (regeneration)

def _shared_documents():
    if not os.path.isdir(docs.SHARED_CSAF):
        pytest.skip("NVIDIA's CSAF bulletins are not beside the checkout (%s is absent): the regeneration check "
                    "needs ../shared/reference/nvidia-csaf" % docs.SHARED_CSAF)
    found = sorted(glob.glob(os.path.join(docs.SHARED_CSAF, "*.json")))
    if not found:
        pytest.skip("%s holds no CSAF documents" % docs.SHARED_CSAF)
    return found


def test_the_bundled_catalog_regenerates_from_every_bulletin_with_zero_differences():
    found = _shared_documents()
    res = _run("--check", V2, *found)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    assert " 0 difference(s)" in res.stderr
    generated = int(res.stderr.strip().splitlines()[-1].split()[0])
    assert generated >= 200
    assert "error:" not in res.stderr


def test_every_cve_of_the_bulletins_is_in_the_catalog_once_per_component():
    found = _shared_documents()
    results = [(p, ci.import_advisory(ci.read_document(p), path=p, verified="2026-11-27")) for p in found]
    generated, notes = ci.combine(results)
    catalog = {e["id"]: e for e in cl.load_catalog(V2)}
    for component, entries in generated.items():
        for entry in entries:
            assert entry["id"] in catalog, entry["id"]
            assert catalog[entry["id"]]["component"] == component
    # CVE-2022-42265: 5415 names R515, 5520 R470; one entry with both bulletins as sources
    merged = catalog["driver-cve-2022-42265"]
    assert sorted(i["branch"] for i in merged["affected"] if not i.get("conditions")) == ["470", "515"]
    assert {"5415", "5520"} <= set(s["url"].rsplit("/", 1)[-1].replace(".json", "") for s in merged["sources"])
    assert any("driver-cve-2022-42265: listed in bulletins 5415, 5520" in n for n in notes)


# --------------------------------------------------------------- documents written here

def test_driver_bulletin_tesla_and_guest_rows_and_every_other_row_listed():
    result = ci.import_advisory(docs.driver_bulletin(), path="2099/9930/9930.json", verified="2026-11-27")
    entries = {e["id"]: e for e in result["entries"]["driver"]}
    assert sorted(entries) == ["driver-cve-2099-0001", "driver-cve-2099-0002"]
    both = entries["driver-cve-2099-0001"]["affected"]
    assert [(i["branch"], i.get("last_affected"), i["fixed"], i.get("conditions")) for i in both] == [
        ("535", None, "535.247.01", None), ("570", None, "570.133.07", None),
        ("570", "570.124.06", "570.133.20", {"vgpu_guest": True})]
    guest_only = entries["driver-cve-2099-0002"]
    assert [(i["branch"], i["last_affected"], i["fixed"]) for i in guest_only["affected"]] == [
        ("570", "570.124.06", "570.133.20"), ("580", "580.82.07", "580.95.05")]
    assert all(i["conditions"] == {"vgpu_guest": True} for i in guest_only["affected"])
    assert "vGPU 19.2" in guest_only["affected"][1]["note"]
    assert guest_only["severity"] == "medium"
    reasons = sorted((s["product"], s["arch"], s["reason"].split(":")[0]) for s in result["skipped"])
    assert reasons == [
        ("GeForce", "Linux(R535)", "GeForce/RTX/Quadro/NVS/Studio driver rows"),
        ("Guest driver", "Linux(R570 Gaming)", "Cloud Gaming guest driver rows"),
        ("Tesla", "Windows(R570)", "Windows rows"),
        ("Virtual GPU Manager", "Ubuntu(R570 vGPU 18)", "vGPU host software (Virtual GPU Manager)")]
    assert not [w for w in result["warnings"] if "structured condition" in w]  # vGPU release names are notes
    assert [s["url"] for s in entries["driver-cve-2099-0001"]["sources"]] == [
        "https://nvidia.custhelp.com/app/answers/detail/a_id/9930",
        "https://github.com/NVIDIA/product-security/blob/main/2099/9930/9930.json"]


def test_guest_items_are_reported_for_guests_and_not_for_bare_metal():
    result = ci.import_advisory(docs.driver_bulletin(), verified="2026-11-27")
    entries = [dict(e, component="driver") for e in result["entries"]["driver"]]
    guest = ce.evaluate(entries, "driver", "580.82.07", {"vgpu_guest": True})
    assert [(m["id"], m["status"]) for m in guest["matches"]] == [("driver-cve-2099-0002", "affected")]
    metal = ce.evaluate(entries, "driver", "580.82.07", {"vgpu_guest": False})
    assert metal["matches"] == []
    assert [n["id"] for n in metal["not_applicable"]] == ["driver-cve-2099-0002"]
    unknown = ce.evaluate(entries, "driver", "580.82.07", {})
    assert [(m["id"], m["status"]) for m in unknown["matches"]] == [("driver-cve-2099-0002", "possibly_affected")]
    # a data-center row holds whatever the node is
    metal_570 = ce.evaluate(entries, "driver", "570.124.06", {"vgpu_guest": False})
    assert [(m["id"], m["status"]) for m in metal_570["matches"]] == [("driver-cve-2099-0001", "affected")]


def test_a_fixed_row_outside_its_branch_keeps_only_the_affected_bound():
    doc = docs.driver_bulletin()
    doc["product_tree"]["branches"][0]["branches"][3]["branches"][1]["product"]["name"] = "575.274.02(vGPU 18.1)"
    result = ci.import_advisory(doc, verified="2026-11-27")
    entry = [e for e in result["entries"]["driver"] if e["id"] == "driver-cve-2099-0002"][0]
    assert entry["affected"][0]["last_affected"] == "570.124.06" and "fixed" not in entry["affected"][0]
    assert any("names 575.274.02, outside the branch" in w for w in result["warnings"])


def test_a_cve_in_two_bulletins_is_one_entry_with_both_ranges_and_sources():
    first = ("2099/9930/9930.json", ci.import_advisory(docs.driver_bulletin(), path="2099/9930/9930.json",
                                                       verified="2026-11-20"))
    later = ("2099/9931/9931.json", ci.import_advisory(docs.later_driver_bulletin(), path="2099/9931/9931.json",
                                                       verified="2026-11-27"))
    for order in ([first, later], [later, first]):
        generated, notes = ci.combine(order)
        entry = [e for e in generated["driver"] if e["id"] == "driver-cve-2099-0001"][0]
        assert [(i["branch"], i["fixed"], bool(i.get("conditions"))) for i in entry["affected"]] == [
            ("535", "535.247.01", False), ("550", "550.163.01", False), ("570", "570.133.07", False),
            ("570", "570.133.20", True)]
        assert entry["advisory"]["id"] == "9931"  # the newer bulletin
        assert [(s["url"].rsplit("/", 1)[-1], s["verified"]) for s in entry["sources"]] == [
            ("9931", "2026-11-27"), ("9931.json", "2026-11-27"), ("9930", "2026-11-20"), ("9930.json", "2026-11-20")]
        assert "bulletin 9930 revision 1.0.0 (2099-04-30) lists it too" in entry["notes"]
        assert "R550 550.163.01" in entry["remediation"] and "bulletins 9930 and 9931" in entry["remediation"]
        assert any("listed in bulletins 9930, 9931" in n for n in notes)
    # a CVSS vector the bulletins disagree on is for a person
    other = docs.later_driver_bulletin()
    other["vulnerabilities"][0]["scores"][0]["cvss_v3"].update(baseScore=5.5, vectorString=docs.VECTORS[5.5])
    with pytest.raises(ci.CsafError, match="different CVSS vectors"):
        ci.combine([first, ("x.json", ci.import_advisory(other, verified="2026-11-27"))])


def test_compare_accepts_a_split_row_and_a_sourced_wider_range_but_not_a_narrower_one():
    generated = ci.import_advisory(docs.toolkit_bulletin(), verified="2026-11-27")["entries"]["container-toolkit"]
    split = copy.deepcopy(generated)
    split[0]["affected"] = [{"introduced": "1.17.5", "last_affected": "1.17.7", "fixed": "1.17.8"},
                            {"last_affected": "1.17.4", "fixed": "1.17.8", "conditions": {"injection_mode": ["cdi"]}}]
    assert ci.compare(generated, split) == []
    wider = copy.deepcopy(generated)
    wider[0]["affected"] = [{"last_affected": "1.17.8", "fixed": "1.17.9"}]
    assert ci.compare(generated, wider) == [
        "ctk-cve-2099-0101: branch (any) differs: CSAF < 1.17.8 last affected 1.17.7, catalog < 1.17.9 last affected 1.17.8"]
    wider[0]["sources"].append({"url": "https://github.com/NVIDIA/cloud-native-docs/blob/main/gpu-operator/security.rst",
                                "verified": "2026-11-27", "what": "CVE table"})
    assert ci.compare(generated, wider) == []
    narrower = copy.deepcopy(wider)
    narrower[0]["affected"] = [{"last_affected": "1.17.6", "fixed": "1.17.7"}]
    assert ci.compare(generated, narrower)
    guest = ci.import_advisory(docs.driver_bulletin(), verified="2026-11-27")["entries"]["driver"]
    lost = copy.deepcopy(guest)
    lost[1]["affected"] = lost[1]["affected"][:1]
    assert ci.compare(guest, lost) == ["driver-cve-2099-0002: branch 580 (vGPU guest) missing: CSAF < 580.95.05 "
                                       "last affected 580.82.07"]


def test_toolkit_bulletin_maps_four_components_reports_qualifiers_and_normalises_versions():
    result = ci.import_advisory(docs.toolkit_bulletin(), verified="2026-11-27")
    assert sorted(result["entries"]) == ["container-toolkit", "device-plugin", "gpu-operator", "mig-manager"]
    (dp,) = result["entries"]["device-plugin"]
    assert dp["affected"] == [{"last_affected": "0.17.2", "fixed": "0.17.3"}]
    assert "device-list-strategy is cdi-cri" in dp["notes"]
    assert len([w for w in result["warnings"] if "structured condition" in w]) == 3
    (ctk,) = result["entries"]["container-toolkit"]
    assert ctk["affected"] == [{"last_affected": "1.17.7", "fixed": "1.17.8"}]  # "v1.17.8"
    assert ctk["severity"] == "critical" and ctk["cves"][0]["cvss"]["base_score"] == 9.0


def test_a_score_that_does_not_match_its_vector_is_reported():
    doc = docs.driver_bulletin()
    doc["vulnerabilities"][0]["scores"][0]["cvss_v3"]["baseScore"] = 9.9
    result = ci.import_advisory(doc, verified="2026-11-23")
    if ci.CVSS3 is not None:
        assert any("scores 7.8, the document says 9.9" in w for w in result["warnings"])
    doc["vulnerabilities"][0]["scores"][0]["cvss_v3"]["vectorString"] = "CVSS:3.1/AV:X"
    with pytest.raises(ci.CsafError, match="does not parse"):
        ci.import_advisory(doc)


@pytest.mark.parametrize("mutate,message", [
    (lambda d: d.pop("document"), "not a CSAF document"),
    (lambda d: d["document"].update(csaf_version="1.2"), "csaf_version is '1.2'"),
    (lambda d: d["document"].update(category="csaf_informational_advisory"), "not an advisory"),
    (lambda d: d.pop("product_tree"), "no product_tree"),
    (lambda d: d["vulnerabilities"][0]["product_status"]["fixed"].append("nope"), "product_tree lacks"),
    (lambda d: d["product_tree"]["branches"][0]["branches"][4].update(name="Linux(vGPU nineteen)"),
     "unknown architecture 'Linux\\(vGPU nineteen\\)'"),
])
def test_unreadable_documents_are_refused(mutate, message):
    doc = docs.driver_bulletin()
    mutate(doc)
    with pytest.raises(ci.CsafError, match=message):
        ci.import_advisory(doc)


def test_an_unknown_version_text_names_the_row():
    doc = docs.driver_bulletin()
    doc["product_tree"]["branches"][0]["branches"][0]["branches"][0]["product"]["name"] = "Versions from the spring"
    with pytest.raises(ci.CsafError, match="'Versions from the spring'"):
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
            "cve": "CVE-2099-24260",
            "product_status": {"known_affected": ["ctk-old-on-os"], "fixed": ["ctk-new"]},
            "scores": [{"products": ["ctk-old-on-os"], "cvss_v3": {
                "version": "3.1", "baseScore": 9.0, "vectorString": docs.VECTORS[9.0]}}],
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
    entries = ci.import_advisory(docs.driver_bulletin(), verified="2026-11-23")["entries"]["driver"]
    text = ci.dump_entries(entries)
    assert 'fixed: "535.247.01"' in text and 'branch: "535"' in text and "&id" not in text
    assert yaml.safe_load(text) == [ci._plain(e) for e in entries]  # pylint: disable=protected-access


def test_cli_check_and_merge_on_written_documents(tmp_path):
    src = tmp_path / "src"
    d1 = docs.write(src, docs.driver_bulletin())
    d2 = docs.write(src, docs.toolkit_bulletin())
    d3 = docs.write(src, docs.later_driver_bulletin())
    out = tmp_path / "v2"
    out.mkdir()
    res = _run("--merge", str(out), "--verified", "2026-11-27", d1, d2, d3)
    assert res.returncode == 0, res.stderr
    entries = cl.load_catalog(str(out))
    assert sorted(e["id"] for e in entries) == [
        "ctk-cve-2099-0101", "device-plugin-cve-2099-0101", "driver-cve-2099-0001", "driver-cve-2099-0002",
        "gpu-operator-cve-2099-0101", "mig-manager-cve-2099-0101"]
    ok = _run("--check", str(out), d1, d2, d3)
    assert ok.returncode == 0 and "6 generated entries, 0 difference(s)" in ok.stderr, ok.stdout + ok.stderr
    again = _run("--merge", str(out), d1)  # nothing new: files stay as they are
    assert again.returncode == 0 and "nothing new" in again.stderr
    diff = _run("--check", V2, d1)
    assert diff.returncode == 1 and "driver-cve-2099-0001: not in the catalog (new)" in diff.stdout
    bad = _run(os.path.join(str(tmp_path), "missing.json"))
    assert bad.returncode == 2 and "missing.json" in bad.stderr


def test_cli_skips_unknown_products_only_when_asked(tmp_path):
    doc = docs.driver_bulletin()
    doc["product_tree"]["branches"][0]["branches"].append(
        docs.arch("Android-P", docs.row("tv_aff", "SHIELD TV", "All versions prior to 9.2")))
    doc["vulnerabilities"][1]["product_status"]["known_affected"].append("tv_aff")
    path = docs.write(tmp_path, doc)
    refused = _run(path)
    assert refused.returncode == 2 and "unknown product 'SHIELD TV'" in refused.stderr
    skipped = _run("--skip-unknown-products", path)
    assert skipped.returncode == 0, skipped.stderr
    assert "not imported: tv_aff (SHIELD TV Android-P: All versions prior to 9.2): a product that is not a component" \
        in skipped.stderr
    assert "driver-cve-2099-0002" in skipped.stdout
