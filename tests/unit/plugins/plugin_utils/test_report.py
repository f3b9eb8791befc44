import json
import re

import pytest

from ansible_collections.kubegpu.fleet.plugins.plugin_utils import report as r

CRIT = {"id": "driver.known_bad", "severity": "critical", "title": "Known-bad driver 570.148.08",
        "evidence": {"driver_version": "570.148.08", "mig_mixed": True},
        "remediation": {"summary": "upgrade to 570.172.08", "role": "kubegpu.fleet.driver",
                        "vars": {"kubegpu_driver_version": "570.172.08"}},
        "references": ["https://github.com/NVIDIA/gpu-operator/issues/1361"]}
WARN = {"id": "kubelet.memory_reservation", "severity": "warning", "title": "No kubelet memory reservation"}
INFO = {"id": "node.note", "severity": "info", "title": 'odd "label"\nvalue \\ here'}


def nodes():
    return [
        {"name": "gpu-b", "status": "audited", "findings": [WARN, CRIT]},
        {"name": "gpu-a", "status": "audited", "findings": []},
        {"name": "gpu-c", "status": "unreachable", "error": "ssh: connect refused", "findings": []},
        {"name": "gpu-d", "status": "failed", "error": "module failed", "findings": [INFO]},
    ]


def test_build_report_aggregates_and_lists_unreachable():
    rep = r.build_report(nodes(), generated_at="2026-11-22T05:00:00Z", collection_version="0.1.0")
    s = rep["summary"]
    assert rep["schema"] == "kubegpu.fleet/audit-report" and rep["schema_version"] == 1
    assert [n["name"] for n in rep["nodes"]] == ["gpu-a", "gpu-b", "gpu-c", "gpu-d"]
    assert s["nodes_total"] == 4 and s["nodes_audited"] == 2 and s["nodes_unreachable"] == 1
    assert s["nodes_failed"] == 1 and s["nodes_clean"] == 1
    assert s["unreachable"] == ["gpu-c"] and s["failed"] == ["gpu-d"]
    assert s["by_severity"] == {"critical": 1, "warning": 1, "info": 1}
    assert list(s["by_id"]) == ["driver.known_bad", "kubelet.memory_reservation", "node.note"]
    assert s["by_id"]["driver.known_bad"]["nodes"] == ["gpu-b"]
    # findings sorted by severity within a node and carry their node
    b = rep["nodes"][1]
    assert [f["id"] for f in b["findings"]] == ["driver.known_bad", "kubelet.memory_reservation"]
    assert all(f["node"] == "gpu-b" for f in b["findings"])
    assert s["failing"] == 1


@pytest.mark.parametrize("fail_on,expected", [("critical", 1), ("warning", 2), ("info", 3), ("never", 0)])
def test_failing_findings_threshold(fail_on, expected):
    rep = r.build_report(nodes(), fail_on=fail_on, generated_at="2026-11-22T05:00:00Z")
    assert len(r.failing_findings(rep, fail_on)) == expected
    assert rep["summary"]["failing"] == expected


def test_cluster_findings_attach_to_known_nodes_or_cluster():
    cf = [dict(WARN, id="cluster.device_plugin_version", node=None),
          dict(CRIT, id="kubelet.admission_blocked", node="gpu-a")]
    rep = r.build_report(nodes(), cluster_findings=cf, generated_at="2026-11-22T05:00:00Z")
    assert [f["id"] for f in rep["cluster"]["findings"]] == ["cluster.device_plugin_version"]
    assert [f["id"] for f in rep["nodes"][0]["findings"]] == ["kubelet.admission_blocked"]
    assert rep["summary"]["nodes_clean"] == 0


@pytest.mark.parametrize("bad,msg", [
    ([{"status": "audited"}], "without a name"),
    ([{"name": "x", "status": "lost"}], "unknown status 'lost'"),
    ([{"name": "x", "findings": [{"id": "a", "severity": "fatal", "title": "t"}]}], "unknown severity 'fatal'"),
    ([{"name": "x", "findings": [{"severity": "info", "title": "t"}]}], "lacks a string 'id'"),
    ([{"name": "x"}, {"name": "x"}], "appears twice"),
])
def test_bad_input_is_named(bad, msg):
    with pytest.raises(r.ReportError, match=re.escape(msg)):
        r.build_report(bad)


def test_bad_fail_on():
    with pytest.raises(r.ReportError, match="fail_on"):
        r.build_report([], fail_on="sometimes")


def test_json_roundtrip():
    rep = r.build_report(nodes(), generated_at="2026-11-22T05:00:00Z")
    assert json.loads(r.render_json(rep)) == rep


def test_prometheus_text_format():
    rep = r.build_report(nodes(), generated_at="2026-11-22T05:00:00Z")
    text = r.render_prometheus(rep)
    assert 'kubegpu_finding{node="gpu-b",id="driver.known_bad",severity="critical"} 1' in text
    # label escaping per the exposition format
    assert 'kubegpu_audit_node_up{node="gpu-c"} 0' in text
    assert "kubegpu_audit_timestamp_seconds 1795323600" in text
    assert 'kubegpu_audit_findings{severity="critical"} 1' in text
    for line in text.splitlines():
        assert line.startswith("#") or re.match(r'^[a-z_]+(\{.*\})? -?\d+(\.\d+)?$', line), line


def test_prometheus_escapes_label_values():
    n = [{"name": 'we"ird\\node', "status": "audited", "findings": [INFO]}]
    text = r.render_prometheus(r.build_report(n, generated_at="2026-11-22T05:00:00Z"))
    assert 'node="we\\"ird\\\\node"' in text


def test_markdown_and_html_contain_what_matters():
    rep = r.build_report(nodes(), generated_at="2026-11-22T05:00:00Z")
    md = r.render_markdown(rep)
    assert "4 nodes: 2 audited, 1 unreachable, 1 failed, 1 clean" in md
    assert "**Unreachable:** gpu-c" in md
    assert "| critical | `driver.known_bad` Known-bad driver 570.148.08 | gpu-b |" in md
    page = r.render_html(rep)
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page and "http://" not in page.split("<style>", maxsplit=1)[0]
    assert 'data-finding="driver.known_bad" title="critical"' in page
    assert "upgrade to 570.172.08" in page
    # untrusted text is escaped
    assert "&#34;label&#34;" in page  # MarkupSafe spells &quot; as &#34;


def test_html_escapes_hostile_evidence():
    evil = dict(CRIT, evidence={"x": "<img src=x onerror=alert(1)>"})
    page = r.render_html(r.build_report([{"name": "<b>n</b>", "findings": [evil]}],
                                        generated_at="2026-11-22T05:00:00Z"))
    assert "<img" not in page and "<b>n</b>" not in page


def test_report_validates_against_published_schema():
    import os

    import jsonschema

    schema_path = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "docs", "audit-report.schema.json")
    with open(schema_path) as f:
        schema = json.load(f)
    jsonschema.Draft202012Validator.check_schema(schema)
    cf = [dict(WARN, id="cluster.device_plugin_version", node=None)]
    rep = r.build_report(nodes(), cluster_findings=cf, generated_at="2026-11-22T05:00:00Z",
                         collection_version="0.1.0", run={"playbook": "kubegpu.fleet.audit"})
    jsonschema.validate(json.loads(r.render_json(rep)), schema)
    bad = json.loads(r.render_json(rep))
    bad["nodes"][0]["status"] = "lost"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


def test_collection_version_from_the_manifest_of_an_installed_collection_else_galaxy_yml(tmp_path):
    installed, checkout, bare, broken = (tmp_path / n for n in ("installed", "checkout", "bare", "broken"))
    for d in (installed, checkout, bare, broken):
        d.mkdir()
    (installed / "MANIFEST.json").write_text(json.dumps({"collection_info": {"namespace": "kubegpu", "name": "fleet",
                                                                             "version": "1.2.3"}}))
    (installed / "galaxy.yml").write_text("version: 9.9.9\n")  # the manifest is what was installed
    (checkout / "galaxy.yml").write_text("namespace: kubegpu\nname: fleet\nversion: 0.4.0\n")
    (broken / "MANIFEST.json").write_text("{not json")
    (broken / "galaxy.yml").write_text("version: [unclosed\n")
    assert r.collection_version(str(installed)) == "1.2.3"
    assert r.collection_version(str(checkout)) == "0.4.0"
    assert r.collection_version(str(bare)) is None and r.collection_version(str(broken)) is None
    # these plugins' own collection (this source checkout) says what its galaxy.yml says
    import os

    import yaml

    with open(os.path.join(r.COLLECTION_ROOT, "galaxy.yml")) as fh:
        assert r.collection_version() == yaml.safe_load(fh)["version"]
