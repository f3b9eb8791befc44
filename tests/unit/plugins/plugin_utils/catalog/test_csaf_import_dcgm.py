"""CSAF importer: DCGM and DCGM Exporter rows, and every row it does not import listed with the
reason. The documents are written here in the shape of NVIDIA's CSAF bulletins (vendor >
architecture > product_version branches, the branch naming the product, ``product.name`` the
version text), not copied from NVIDIA.
"""
import copy
import json
import os
import subprocess
import sys

import pytest

from ansible_collections.kubegpu.fleet.plugins.module_utils.catalog import validate as cv
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.catalog import load as cl
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.catalog import csaf as ci
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.rules import catalog as fs
from ansible_collections.kubegpu.fleet.tests.lib import paths

REPO = paths.REPO
SCRIPT = os.path.join(REPO, "scripts", "import_csaf.py")
V2 = os.path.join(REPO, "catalog", "v2")


def _row(pid, product, version_text):
    return {"category": "product_version", "name": product, "product": {"name": version_text, "product_id": pid}}


def _arch(name, *rows):
    return {"category": "architecture", "name": name, "branches": list(rows)}


def document():
    """A bulletin with DCGM, DCGM Exporter, a GeForce row, a Windows data-center row and a row no
    vulnerability names."""
    return {
        "document": {
            "category": "csaf_security_advisory", "csaf_version": "2.0", "title": "Test bulletin: DCGM Exporter",
            "publisher": {"name": "NVIDIA Product Security", "category": "vendor", "namespace": "https://www.nvidia.com"},
            "tracking": {"id": "9901", "version": "1.0.0", "initial_release_date": "2026-07-28T00:00:00Z",
                         "current_release_date": "2026-07-28T00:00:00Z", "status": "final",
                         "revision_history": [{"number": "1.0.0", "date": "2026-07-28T00:00:00Z", "summary": "x"}]},
        },
        "product_tree": {"branches": [{"category": "vendor", "name": "NVIDIA", "branches": [
            _arch("All(4.5)", _row("dcgm_aff", "DCGM", "0.0  to 4.5.2"), _row("dcgm_fix", "DCGM", "4.5.3")),
            _arch("All(4.8)", _row("exp_aff", "DCGM Exporter", "0.0  to 4.8.2"),
                  _row("exp_fix", "DCGM Exporter", "4.8.2")),
            _arch("Linux(R580)", _row("gf_aff", "GeForce", "All driver versions prior to 580.95.05")),
            _arch("Windows(R580)", _row("win_aff", "Tesla", "All driver versions prior to 581.42")),
            _arch("Linux", _row("dcgm_old", "DCGM", "All versions prior to 2.3.4"),
                  _row("dcgm_old_fix", "DCGM", "2.3.4 and 2.3.5 (latest)")),
        ]}]},
        "vulnerabilities": [
            {"cve": "CVE-2026-99001", "cwe": {"id": "CWE-770", "name": "x"},
             "notes": [{"category": "summary", "text": "DCGM Exporter <b>pprof</b> endpoints."}],
             "product_status": {"known_affected": ["exp_aff", "dcgm_aff", "gf_aff", "win_aff"],
                                "fixed": ["exp_fix", "dcgm_fix"]},
             "scores": [{"products": ["exp_aff", "dcgm_aff"],
                         "cvss_v3": {"version": "3.1", "baseScore": 8.2,
                                     "vectorString": "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:L/I:N/A:H"}}]},
            {"cve": "CVE-2022-99002",
             "product_status": {"known_affected": ["dcgm_old"], "fixed": ["dcgm_old_fix"]},
             "scores": [{"products": ["dcgm_old"],
                         "cvss_v3": {"version": "3.1", "baseScore": 6.3,
                                     "vectorString": "CVSS:3.1/AV:N/AC:L/PR:L/UI:N/S:U/C:L/I:L/A:L"}}]},
        ],
    }


def test_dcgm_and_exporter_rows_become_entries():
    result = ci.import_advisory(document(), verified="2026-11-27")
    assert sorted(result["entries"]) == ["dcgm", "dcgm-exporter"]
    dcgm = dict((e["id"], e) for e in result["entries"]["dcgm"])
    assert dcgm["dcgm-cve-2026-99001"]["affected"] == [{"last_affected": "4.5.2", "fixed": "4.5.3"}]
    # "2.3.4 and 2.3.5 (latest)": the lowest listed release is the first fixed one
    assert dcgm["dcgm-cve-2022-99002"]["affected"] == [{"fixed": "2.3.4"}]
    assert "notes" not in dcgm["dcgm-cve-2022-99002"]  # "(latest)" is no qualifier
    (exp,) = result["entries"]["dcgm-exporter"]
    # affected "0.0 to 4.8.2" but fixed "4.8.2": the fixed row decides, and the importer says so
    assert exp["affected"] == [{"fixed": "4.8.2"}]
    assert exp["severity"] == "high" and exp["cves"][0]["cwe"] == "CWE-770"
    assert any("dcgm-exporter-cve-2026-99001" in w and "using prior to 4.8.2" in w for w in result["warnings"])
    for entries in result["entries"].values():
        for e in entries:
            cv.validate_entry(e, cv.COMPONENT_SCHEMES[e["id"].rsplit("-cve-", 1)[0]])


def test_every_row_not_imported_is_listed_with_its_reason():
    result = ci.import_advisory(document(), verified="2026-11-27")
    skipped = dict((s["product_id"], s) for s in result["skipped"])
    assert sorted(skipped) == ["gf_aff", "win_aff"]
    assert skipped["gf_aff"]["reason"].startswith("GeForce/RTX/Quadro/NVS/Studio driver rows")
    assert skipped["win_aff"]["reason"] == "Windows rows: Kubernetes GPU nodes run Linux"
    doc = document()
    doc["product_tree"]["branches"][0]["branches"].append(
        _arch("Linux", _row("orphan", "NVIDIA GPU Operator", "25.3.0")))
    orphan = [s for s in ci.import_advisory(doc)["skipped"] if s["product_id"] == "orphan"]
    assert orphan == [{"product_id": "orphan", "product": "NVIDIA GPU Operator", "arch": "Linux",
                       "version_text": "25.3.0", "reason": "no vulnerability's product_status names this row"}]


@pytest.mark.parametrize("where", ["named", "unnamed"])
def test_an_unknown_product_is_an_error(where):
    doc = document()
    doc["product_tree"]["branches"][0]["branches"].append(
        _arch("Linux", _row("new", "NVIDIA Frobnicator", "All versions prior to 1.2.3")))
    if where == "named":
        doc["vulnerabilities"][0]["product_status"]["known_affected"].append("new")
    with pytest.raises(ci.CsafError, match="unknown product 'NVIDIA Frobnicator'"):
        ci.import_advisory(doc)


def test_an_unknown_architecture_of_a_component_is_an_error():
    doc = document()
    doc["product_tree"]["branches"][0]["branches"][0]["name"] = "Solaris(4.5)"
    with pytest.raises(ci.CsafError, match="unknown architecture 'Solaris"):
        ci.import_advisory(doc)


def _run(tmp_path, doc, *args):
    path = tmp_path / "9901.json"
    path.write_text(json.dumps(doc))
    return subprocess.run([sys.executable, SCRIPT, "--verified", "2026-11-27"] + list(args) + [str(path)],
                          capture_output=True, text=True, timeout=120, check=False), path


def test_cli_lists_rows_not_imported_and_fails_on_an_unknown_product(tmp_path):
    proc, path = _run(tmp_path, document())
    assert proc.returncode == 0, proc.stderr
    assert "%s: not imported: gf_aff (GeForce Linux(R580): All driver versions prior to 580.95.05): GeForce" \
        % path in proc.stderr
    assert "%s: not imported: win_aff (Tesla Windows(R580)" % path in proc.stderr
    assert "# component: dcgm-exporter (1 entries)" in proc.stdout
    doc = copy.deepcopy(document())
    doc["product_tree"]["branches"][0]["branches"][0]["branches"][0]["name"] = "NVIDIA Frobnicator"
    proc, path = _run(tmp_path, doc)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: %s: unknown product 'NVIDIA Frobnicator'" % path), proc.stderr


def test_bundled_catalog_reports_security_dcgm_exporter_and_dcgm():
    catalog = cl.load_catalog(V2)
    ctx = {"catalog": catalog, "api": {"components": {"dcgm-exporter": {"version": "4.8.1"},
                                                      "dcgm": {"version": "4.5.2"}}}}
    found = dict((f["id"], f) for f in fs.rule_catalog(ctx))
    assert sorted(found) == ["security.dcgm", "security.dcgm-exporter"]
    exp = found["security.dcgm-exporter"]
    assert exp["severity"] == "critical"  # CVSS 8.2, high
    assert exp["evidence"]["component"] == "dcgm-exporter" and exp["evidence"]["cves"] == ["CVE-2026-47483"]
    assert exp["remediation"]["summary"] == "upgrade the DCGM Exporter 4.8.1 to 4.8.2 or later"
    assert "https://nvidia.custhelp.com/app/answers/detail/a_id/5857" in exp["references"]
    assert set(exp) == set(found["security.dcgm"]) == {"id", "severity", "title", "evidence", "remediation",
                                                       "references"}
    fixed = {"catalog": catalog, "api": {"components": {"dcgm-exporter": {"version": "4.8.2"},
                                                        "dcgm": {"version": "4.5.3"}}}}
    assert fs.rule_catalog(fixed) == []
