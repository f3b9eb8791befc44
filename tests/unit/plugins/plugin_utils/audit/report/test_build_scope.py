# -*- coding: utf-8 -*-
"""Findings of cluster scope (the finding table's ``scope``: GPU Operator, device plugin, MIG
manager, DCGM Exporter) are reported once per cluster with the nodes they affect, in every
format, never once per node.

The fleet is the demo's shape (lab/playbooks/demo.yml, seven nodes): every node runs the same GPU
Operator, device plugin and MIG manager, each affected by advisories (21 findings of cluster scope
per node audit), and the nodes have 25 findings of their own: 46 findings as the nodes report
them, 28 in the report.
"""
import json
import re

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.finding_types import TYPES, finding
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import build
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import html_format
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import json_format
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import markdown_format
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import prometheus_format
from ansible_collections.kubegpu.fleet.tests.lib.report_checks import html_problems, markdown_problems, promtool_problems

NODES = ["gpu-%d" % i for i in range(7)]
COMPONENTS = (("gpu-operator", "24.6.1", "critical"), ("device-plugin", "0.14.1", "warning"),
              ("mig-manager", "0.8.0", "info"))
# the nodes' own findings: 25 over the seven nodes
OWN = {"gpu-0": ["driver.known_bad", "nvml.hung", "kubelet.admission_blocked", "security.driver"],
       "gpu-1": ["driver.known_bad", "nvml.hung", "kubelet.admission_blocked", "security.driver"],
       "gpu-2": ["cpumanager.device_specs", "security.container-toolkit", "security.driver"],
       "gpu-3": ["devchar.symlinks_missing", "security.container-toolkit", "security.driver"],
       "gpu-4": ["checkpoint.stale", "security.driver", "audit.module_failed"],
       "gpu-5": ["gpu.rma", "security.driver", "audit.module_failed", "driver.unlisted_branch"],
       "gpu-6": ["kubelet.memory_reservation", "security.driver", "audit.module_failed", "driver.unlisted_branch"]}


def component_finding(component, version, severity):
    """security.<component> as the catalog rule makes it for a component the node's API view names."""
    evidence = {"component": component, "version": version, "cves": ["CVE-2025-23359"], "max_cvss": 8.3,
                "advisories": [{"id": "%s-5659" % component, "cves": ["CVE-2025-23359"], "max_cvss": 8.3,
                                "severity": "high", "status": "affected", "fixed": "99.0.0",
                                "sources": ["https://nvidia.custhelp.com/app/answers/detail/a_id/5659"]}]}
    return finding("security.%s" % component, evidence,
                   remediation={"summary": "upgrade the %s %s" % (component, version)}, severity=severity)


def demo_nodes(versions=None):
    nodes = []
    for name in NODES:
        own = [finding(fid, {"node": name}) for fid in OWN[name]]
        comps = [component_finding(c, (versions or {}).get((name, c), v), sev) for c, v, sev in COMPONENTS]
        nodes.append({"name": name, "status": "audited", "findings": own + comps})
    return nodes


def report(nodes=None):
    return build.build_report(nodes or demo_nodes(), generated_at="2026-11-27T06:00:00Z", fail_on="warning")


def test_the_table_says_which_findings_are_the_clusters():
    assert set(fid for fid, row in TYPES.items() if row.scope == "cluster") >= {
        "security.gpu-operator", "security.device-plugin", "security.mig-manager", "security.dcgm-exporter",
        "defect.gpu-operator", "defect.device-plugin", "defect.mig-manager", "defect.dcgm-exporter",
        "cluster.device_plugin_outdated"}
    assert TYPES["security.driver"].scope == TYPES["security.dcgm"].scope == "node"


def test_46_node_findings_become_28_with_the_cluster_components_once_each():
    nodes = demo_nodes()
    assert sum(len(n["findings"]) for n in nodes) == 46
    rep = report(nodes)
    s = rep["summary"]
    assert s["findings_total"] == 28
    cluster = rep["cluster"]["findings"]
    assert [(f["id"], f["affected_nodes"], f["nodes"]) for f in cluster] == [
        ("security.gpu-operator", 7, NODES), ("security.device-plugin", 7, NODES), ("security.mig-manager", 7, NODES)]
    assert all(f["node"] is None and f["scope"] == "cluster" and re.match("^[0-9a-f]{16}$", f["digest"]) for f in cluster)
    for node in rep["nodes"]:
        assert [f["id"] for f in node["findings"]] == sorted(
            OWN[node["name"]], key=lambda fid: (-build.severity_rank(TYPES[fid].severity), fid))
        assert [r["id"] for r in node["cluster_findings"]] == [
            "security.device-plugin", "security.gpu-operator", "security.mig-manager"]
    assert s["by_id"]["security.gpu-operator"] == {
        "severity": "critical", "title": TYPES["security.gpu-operator"].title, "count": 1, "scope": "cluster",
        "nodes": NODES, "affected_nodes": 7}
    assert s["by_id"]["security.driver"]["count"] == 7 and s["by_id"]["security.driver"]["scope"] == "node"
    assert s["by_severity"]["critical"] == 1 + sum(
        1 for fids in OWN.values() for fid in fids if TYPES[fid].severity == "critical")
    # fail_on applies once to a finding of the cluster: one failing entry that names the nodes
    failing = [f for f in build.failing_findings(rep, "warning") if f["node"] is None]
    want = [("security.gpu-operator", NODES), ("security.device-plugin", NODES)]
    assert [(f["id"], f["nodes"]) for f in failing] == want
    # the CVE table still counts the nodes the components affect
    (cve,) = [c for c in rep["cves"] if c["id"] == "CVE-2025-23359"]
    assert cve["components"] == ["device-plugin", "gpu-operator", "mig-manager"] and cve["node_names"] == NODES


def test_a_component_at_two_versions_is_two_entries_each_with_its_nodes():
    """During a device plugin upgrade two nodes run the new version: two findings of the cluster."""
    rep = report(demo_nodes({("gpu-5", "device-plugin"): "0.17.0", ("gpu-6", "device-plugin"): "0.17.0"}))
    dp = [f for f in rep["cluster"]["findings"] if f["id"] == "security.device-plugin"]
    assert [(f["evidence"]["version"], f["nodes"]) for f in dp] == [("0.14.1", NODES[:5]), ("0.17.0", NODES[5:])]
    assert rep["summary"]["by_id"]["security.device-plugin"]["count"] == 2
    assert rep["summary"]["by_id"]["security.device-plugin"]["affected_nodes"] == 7
    refs = dict((n["name"], n["cluster_findings"]) for n in rep["nodes"])
    assert {r["digest"] for r in refs["gpu-0"] if r["id"] == "security.device-plugin"} == {dp[0]["digest"]}
    assert {r["digest"] for r in refs["gpu-6"] if r["id"] == "security.device-plugin"} == {dp[1]["digest"]}


def test_json_keeps_the_affected_nodes_once_and_validates():
    import os

    jsonschema = __import__("pytest").importorskip("jsonschema")
    rep = report()
    doc = json.loads(json_format.render_json(rep))
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "..", "..", "docs",
                           "audit-report.schema.json")) as fh:
        jsonschema.validate(doc, json.load(fh))
    text = json_format.render_json(rep)
    # each component's evidence is in the document once, not once per node
    assert text.count('"upgrade the gpu-operator 24.6.1"') == 1
    assert doc["cluster"]["findings"][0]["nodes"] == NODES


def test_markdown_lists_each_cluster_finding_once_with_a_count():
    rep = report()
    text = markdown_format.render_markdown(rep)
    assert markdown_problems(text, rep) == []
    assert text.count("`security.gpu-operator`") == 2  # its row in the findings table and its line under Cluster
    assert "| critical | `security.gpu-operator` %s | cluster, 7: %s |" % (
        TYPES["security.gpu-operator"].title, ", ".join(NODES)) in text
    assert "- CRITICAL `security.gpu-operator`: %s — cluster, 7: %s — fix: upgrade the gpu-operator 24.6.1" % (
        TYPES["security.gpu-operator"].title, ", ".join(NODES)) in text
    assert "- **gpu-0** (3 finding(s) of the cluster)" in text


def test_html_shows_one_row_per_cluster_finding_and_a_matrix_of_node_findings_only():
    rep = report()
    page = html_format.render_html(rep)
    refs = set(r for n in rep["nodes"] for f in n["findings"] for r in f["references"])
    refs |= set(r for f in rep["cluster"]["findings"] for r in f["references"]) | set(rep["cves"][0]["sources"])
    problems, _external = html_problems(page, rep, refs)
    assert problems == []
    cluster = page[page.index('<section id="cluster">'):page.index("</section>", page.index('<section id="cluster">'))]
    assert cluster.count('data-finding="security.gpu-operator"') == 1
    assert cluster.count('data-affected-nodes="7"') == 3 and "affected nodes (7)" in cluster
    matrix = page[page.index('<section id="matrix">'):page.index('<section id="details">')]
    assert "security.gpu-operator" not in matrix and "security.driver" in matrix
    # a node's details name the cluster's findings affecting it without repeating them
    details = page[page.index('<section id="details">'):]
    assert 'data-finding="security.gpu-operator"' not in details
    assert "Affected by the cluster's <code>security.device-plugin</code> (warning)" in details


def test_prometheus_one_series_per_cluster_finding_and_an_affected_nodes_gauge():
    text = prometheus_format.render_prometheus(report())
    assert text.count('kubegpu_finding{node="",id="security.gpu-operator",severity="critical"} 1') == 1
    assert 'id="security.gpu-operator"' not in "".join(
        line for line in text.splitlines() if line.startswith('kubegpu_finding{node="gpu-'))
    assert 'kubegpu_cluster_finding_affected_nodes{id="security.gpu-operator",severity="critical"} 7' in text
    assert 'kubegpu_finding{node="gpu-0",id="security.driver",severity="info"} 1' in text
    assert promtool_problems(text) in (None, "")


def test_a_cluster_wide_finding_keeps_its_place_with_no_nodes():
    outdated = dict(finding("cluster.device_plugin_outdated", {"daemonset": "kube-system/nvidia-device-plugin"}),
                    node=None)
    rep = build.build_report(demo_nodes(), cluster_findings=[outdated], generated_at="2026-11-27T06:00:00Z")
    (f,) = [f for f in rep["cluster"]["findings"] if f["id"] == "cluster.device_plugin_outdated"]
    assert f["nodes"] == [] and f["affected_nodes"] == 0 and f["scope"] == "cluster"
    assert "| critical | `cluster.device_plugin_outdated` %s | cluster |" % TYPES[
        "cluster.device_plugin_outdated"].title in markdown_format.render_markdown(rep)
    assert 'kubegpu_cluster_finding_affected_nodes{id="cluster.device_plugin_outdated",severity="critical"} 0' in \
        prometheus_format.render_prometheus(rep)


def test_a_node_affected_only_by_the_cluster_is_not_clean():
    nodes = [{"name": "gpu-0", "status": "audited", "findings": [component_finding("gpu-operator", "24.6.1", "info")]},
             {"name": "gpu-1", "status": "audited", "findings": []}]
    s = build.build_report(nodes, generated_at="2026-11-27T06:00:00Z")["summary"]
    assert s["nodes_clean"] == 1 and s["findings_total"] == 1
