# -*- coding: utf-8 -*-
"""The report's hands-on list: nodes whose GPU hardware needs a person (RMA, GPU off the bus,
Xid to investigate), in JSON (published schema), Markdown, HTML and the Prometheus textfile.
The findings come from the real audit rules over node facts built by the node-side code."""
from __future__ import absolute_import, division, print_function

import json
import os
import shutil
import subprocess

import pytest

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit import evaluate
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import build
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import html_format
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import json_format
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import markdown_format
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import prometheus_format

from ansible_collections.kubegpu.fleet.tests.unit.plugins.plugin_utils.audit.rules.test_findings_gpu_hardware import (
    XID_13, XID_74, XID_79, _health, _nvidia)

SCHEMA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..", "..", "..", "docs",
                      "audit-report.schema.json")


@pytest.fixture
def report(tmp_path):
    def node(name, nv):
        return {"name": name, "status": "audited", "findings": evaluate.evaluate_node({"nvidia": nv})}
    nodes = [
        node("gpu-rma", _nvidia(tmp_path / "a", [0, 1, 2], health={0: _health(failure=True)})),
        node("gpu-offbus", _nvidia(tmp_path / "b", [0, 1], log=[XID_79])),
        node("gpu-nvlink", _nvidia(tmp_path / "c", [0, 1, 2], log=[XID_74])),
        node("gpu-remap", _nvidia(tmp_path / "d", [0, 1, 2], health={1: _health(pending=True)})),
        node("gpu-app", _nvidia(tmp_path / "e", [0, 1, 2], log=[XID_13])),
        {"name": "gpu-down", "status": "unreachable", "error": "ssh: refused", "findings": []},
    ]
    return build.build_report(nodes, generated_at="2026-11-23T21:00:00Z", fail_on="critical")


def test_json_lists_hands_on_nodes_only_and_validates(report):
    jsonschema = pytest.importorskip("jsonschema")
    hands = report["summary"]["hands_on"]
    assert [h["node"] for h in hands] == ["gpu-nvlink", "gpu-offbus", "gpu-rma"]
    by = dict((h["node"], h) for h in hands)
    assert by["gpu-rma"]["findings"] == ["gpu.rma"]
    assert by["gpu-offbus"]["findings"] == ["gpu.missing"]
    assert "0000:38:00.0" in by["gpu-offbus"]["work"][0]
    assert by["gpu-nvlink"]["findings"] == ["gpu.xid"]
    with open(SCHEMA) as f:
        schema = json.load(f)
    doc = json.loads(json_format.render_json(report))
    jsonschema.validate(doc, schema)
    doc["summary"]["hands_on"][0]["extra"] = 1
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, schema)


def test_markdown_and_html_name_the_hands_on_nodes(report):
    md = markdown_format.render_markdown(report)
    assert "**Hands-on work (nodes left cordoned for a person):**" in md
    assert "- **gpu-rma** (`gpu.rma`): a person replaces the GPU (RMA)" in md
    assert "gpu-remap**" not in md.split("| severity |", maxsplit=1)[0]  # a reboot fixes it: not hands-on
    html = html_format.render_html(report)
    section = html.split('<section id="hands-on">')[1].split("</section>")[0]
    assert section.count("<li ") == 3 and 'data-node="gpu-offbus"' in section
    assert "gpu-remap" not in section and "gpu-app" not in section


def test_prometheus_hands_on_gauge_passes_promtool(report, tmp_path):
    text = prometheus_format.render_prometheus(report)
    assert 'kubegpu_audit_node_hands_on{node="gpu-rma"} 1' in text
    assert 'kubegpu_audit_node_hands_on{node="gpu-remap"} 0' in text
    assert 'kubegpu_audit_node_hands_on{node="gpu-down"} 0' in text
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed")
    res = subprocess.run([promtool, "check", "metrics"], input=text.encode(), capture_output=True,
                         check=False, timeout=60)
    assert res.returncode == 0, res.stderr.decode() + res.stdout.decode()


def test_report_without_hardware_findings_has_an_empty_list():
    rep = build.build_report([{"name": "n", "status": "audited", "findings": []}],
                             generated_at="2026-11-23T21:00:00Z")
    assert rep["summary"]["hands_on"] == []
    assert "Hands-on" not in markdown_format.render_markdown(rep) and 'id="hands-on"' not in html_format.render_html(rep)


def test_a_hands_on_finding_type_is_hands_on_whatever_its_evidence_says():
    """The finding table decides for gpu.rma and gpu.missing; gpu.xid's evidence decides per instance."""
    findings = [{"id": "gpu.rma", "severity": "critical", "title": "replace a GPU", "evidence": {}},
                {"id": "gpu.xid", "severity": "info", "title": "an Xid to reset", "evidence": {"hands_on": False}}]
    nodes = [{"name": "gpu-%d" % n, "status": "audited", "findings": [f]} for n, f in enumerate(findings)]
    nodes.append({"name": "gpu-9", "status": "audited", "findings": [dict(findings[1], evidence={"hands_on": True})]})
    rep = build.build_report(nodes, generated_at="2026-11-23T21:00:00Z")
    assert rep["summary"]["hands_on"] == [
        {"node": "gpu-0", "findings": ["gpu.rma"], "work": ["replace a GPU"]},
        {"node": "gpu-9", "findings": ["gpu.xid"], "work": ["an Xid to reset"]}]
