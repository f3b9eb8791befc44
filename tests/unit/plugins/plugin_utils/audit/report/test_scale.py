# -*- coding: utf-8 -*-
"""A report that reads at 5,000 nodes: summary first, node lists collapsed and bounded, the HTML
and Markdown of a bounded size while the JSON keeps every node (bounds: report/view.py).

The fleet is synthetic but shaped like a real one: 5,000 nodes in 8 node pools with 3 GPU
models, a third of them with findings of their own (real finding types, evidence of a few hundred
bytes), every node affected by the GPU Operator's and the device plugin's advisories (findings of
the cluster), some unreachable, some not GPU nodes.
"""
import json

import pytest

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.finding_types import finding
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import build
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import html_format
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import json_format
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import markdown_format
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import prometheus_format
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import view
from ansible_collections.kubegpu.fleet.tests.lib.report_checks import html_problems, markdown_problems

NODES = 5000
# The documented bounds (README, "The fleet report"): what the pages may weigh at any fleet size for
# findings of ordinary size.
HTML_MAX_BYTES = 1024 * 1024
MARKDOWN_MAX_BYTES = 256 * 1024
POOL = "cloud.google.com/gke-nodepool"
MODELS = ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "NVIDIA L40S")
CHECKS = ("pci_gpus", "driver", "nvml", "kubelet", "kernel_log", "cluster_view")


def coverage(i):
    if i % 997 == 0:
        return {"status": "not_gpu_node", "reason": "nothing of a GPU node", "gpu_models": {},
                "checks": dict((c, {"state": "no", "detail": "not seen"}) for c in CHECKS)}
    checks = dict((c, {"state": "yes", "detail": "seen"}) for c in CHECKS)
    checks["kernel_log"] = {"state": "no", "detail": "not readable: /dev/kmsg: Operation not permitted"}
    return {"status": "gpu_node", "reason": None, "checks": checks, "gpu_models": {MODELS[i % 3]: 8}}


def node_findings(i):
    out = [finding("security.gpu-operator", {"component": "gpu-operator", "version": "24.6.1",
                                             "cves": ["CVE-2025-23359"], "max_cvss": 8.3, "advisories": []},
                   severity="critical"),
           finding("security.device-plugin", {"component": "device-plugin", "version": "0.14.1", "cves": [],
                                              "advisories": []}, severity="warning")]
    if i % 3 == 0:
        out.append(finding("driver.known_bad", {"driver_version": "570.148.08", "branch": 570, "mig_mixed": True,
                                                "matches": [{"id": "nvml-r570-mig-hang", "note": "x" * 300}]}))
    if i % 5 == 0:
        out.append(finding("kubelet.memory_reservation", {"reserved_bytes": 0, "wanted_bytes": 8 << 30,
                                                          "memory_bytes": 1 << 40}))
    if i % 11 == 0:
        gpus = [{"bus_id": "0000:%02x:00.0" % g, "total": 3} for g in range(8)]
        out.append(finding("gpu.xid", {"action": "reset_gpu", "gpus": gpus}, severity="critical"))
    if i % 997 == 0:
        out = [finding("audit.not_inspected", {"status": "not_gpu_node"})]
    return out


@pytest.fixture(scope="module")
def fleet_report():
    nodes = []
    for i in range(NODES):
        name = "gke-prod-pool-%d-%08x" % (i % 8, i * 2654435761 % (1 << 32))
        if i % 499 == 0:
            nodes.append({"name": name, "status": "unreachable", "error": "ssh: connect timed out", "findings": []})
            continue
        nodes.append({"name": name, "status": "audited", "findings": node_findings(i), "coverage": coverage(i),
                      "labels": {POOL: "pool-%d" % (i % 8)}})
    return build.build_report(nodes, generated_at="2026-11-27T06:00:00Z", group_label=POOL)


def test_the_summary_counts_the_whole_fleet(fleet_report):
    s = fleet_report["summary"]
    assert s["nodes_total"] == NODES and s["nodes_unreachable"] == 11 and s["nodes_not_gpu"] == 5
    # the cluster's two findings once each, the nodes' own findings each
    assert s["by_id"]["security.gpu-operator"]["count"] == 1
    assert s["by_id"]["security.gpu-operator"]["affected_nodes"] == NODES - 11 - 5
    groups = s["by_group"]["groups"]
    # the unreachable nodes' labels are unknown: value None
    assert sorted(g["value"] for g in groups if g["value"]) == ["pool-%d" % p for p in range(8)]
    assert [g["nodes"] for g in groups if g["value"] is None] == [11]
    assert sum(g["nodes"] for g in groups) == NODES and [g["nodes"] for g in groups] == sorted(
        (g["nodes"] for g in groups), reverse=True)
    assert sum(m["nodes"] for m in s["by_gpu_model"] if m["model"]) == NODES - 11 - 5
    assert s["coverage"]["kernel_log"]["no"] == NODES - 11


def test_the_html_stays_under_its_bound_and_reads_summary_first(fleet_report):
    page = html_format.render_html(fleet_report)
    size = len(page.encode("utf-8"))
    assert size < HTML_MAX_BYTES, size
    # summary, then the cluster, the CVEs, the matrix and the details
    order = [page.index(mark) for mark in ('id="summary"', 'id="by-finding"', 'id="coverage"', 'id="gpu-models"',
                                           'id="groups"', 'id="cluster"', 'id="cves"', 'id="matrix"', 'id="details"')]
    assert order == sorted(order)
    assert page.count('<div class="node fi"') == view.NODES_MAX
    assert "more nodes with findings or not audited: see the JSON report" in page
    # a finding's node list is collapsed and bounded
    assert '<details class="fd"><summary>affected nodes (%d)</summary>' % (NODES - 16) in page
    assert page.count("<details") < 60
    problems, _external = html_problems(page, fleet_report, set(
        r for f in fleet_report["cluster"]["findings"] for r in f["references"]) | set(
        r for n in fleet_report["nodes"] for f in n["findings"] for r in f["references"]))
    assert problems == []


def test_the_worst_nodes_come_first_in_the_details(fleet_report):
    shown = view.worst_first(fleet_report)[:view.NODES_MAX]
    assert all(w == "critical" for _n, w in shown)
    # unreachable nodes have no findings, and still come before nodes with none but the cluster's
    assert shown[0][0]["findings"]


def test_the_markdown_stays_under_its_bound(fleet_report):
    text = markdown_format.render_markdown(fleet_report)
    assert len(text.encode("utf-8")) < MARKDOWN_MAX_BYTES, len(text)
    assert markdown_problems(text, fleet_report) == []
    assert "more nodes with findings or not audited: see the JSON report" in text


def test_the_json_keeps_every_node_and_every_name(fleet_report):
    doc = json.loads(json_format.render_json(fleet_report))
    assert len(doc["nodes"]) == NODES
    (operator,) = [f for f in doc["cluster"]["findings"] if f["id"] == "security.gpu-operator"]
    assert len(operator["nodes"]) == NODES - 16
    assert len(doc["summary"]["by_id"]["driver.known_bad"]["nodes"]) == doc["summary"]["by_id"]["driver.known_bad"]["count"]


def test_prometheus_has_one_series_per_cluster_finding(fleet_report):
    text = prometheus_format.render_prometheus(fleet_report)
    assert sum(1 for line in text.splitlines() if 'id="security.gpu-operator"' in line
               and line.startswith("kubegpu_finding{")) == 1
    assert 'kubegpu_cluster_finding_affected_nodes{id="security.gpu-operator",severity="critical"} %d' % (
        NODES - 16) in text
