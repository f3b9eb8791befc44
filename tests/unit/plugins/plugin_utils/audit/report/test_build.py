import json
import re

import pytest

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import build
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import json_format

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
    rep = build.build_report(nodes(), generated_at="2026-11-22T05:00:00Z", collection_version="0.1.0")
    s = rep["summary"]
    assert rep["schema"] == "kubegpu.fleet/audit-report" and rep["schema_version"] == 2
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
    rep = build.build_report(nodes(), fail_on=fail_on, generated_at="2026-11-22T05:00:00Z")
    assert len(build.failing_findings(rep, fail_on)) == expected
    assert rep["summary"]["failing"] == expected


def test_cluster_findings_attach_to_known_nodes_or_cluster():
    cf = [dict(WARN, id="cluster.device_plugin_version", node=None),
          dict(CRIT, id="kubelet.admission_blocked", node="gpu-a")]
    rep = build.build_report(nodes(), cluster_findings=cf, generated_at="2026-11-22T05:00:00Z")
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
    with pytest.raises(build.ReportError, match=re.escape(msg)):
        build.build_report(bad)


def test_bad_fail_on():
    with pytest.raises(build.ReportError, match="fail_on"):
        build.build_report([], fail_on="sometimes")


def test_report_validates_against_published_schema():
    import os

    import jsonschema

    schema_path = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "..", "..", "docs", "audit-report.schema.json")
    with open(schema_path) as f:
        schema = json.load(f)
    jsonschema.Draft202012Validator.check_schema(schema)
    cf = [dict(WARN, id="cluster.device_plugin_version", node=None)]
    rep = build.build_report(nodes(), cluster_findings=cf, generated_at="2026-11-22T05:00:00Z",
                             collection_version="0.1.0", run={"playbook": "kubegpu.fleet.audit"})
    jsonschema.validate(json.loads(json_format.render_json(rep)), schema)
    bad = json.loads(json_format.render_json(rep))
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
    assert build.collection_version(str(installed)) == "1.2.3"
    assert build.collection_version(str(checkout)) == "0.4.0"
    assert build.collection_version(str(bare)) is None and build.collection_version(str(broken)) is None
    # these plugins' own collection (this source checkout) says what its galaxy.yml says
    import os

    import yaml

    with open(os.path.join(build.COLLECTION_ROOT, "galaxy.yml")) as fh:
        assert build.collection_version() == yaml.safe_load(fh)["version"]
