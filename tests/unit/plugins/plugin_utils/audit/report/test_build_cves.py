# -*- coding: utf-8 -*-
"""The report's CVE section: security.<component> findings grouped by CVE, in every format.

The findings are built from real catalog v2 matches (module_utils/catalog/evaluate.evaluate on catalog/v2) in the
shape of the shared contract (evidence: component, version, cves, max_cvss, advisories).
"""
import json
import os
import shutil
import subprocess

import pytest

from ansible_collections.kubegpu.fleet.plugins.module_utils.catalog import evaluate as catalog_evaluate
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import build
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import html_format
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import json_format
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import markdown_format
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import prometheus_format
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.catalog import load as catalog_load

REPO = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "..", "..")
CATALOG = catalog_load.load_catalog(os.path.join(REPO, "catalog", "v2"))
PROMTOOL = shutil.which("promtool")
FINDING_SEVERITY = {"critical": "critical", "high": "critical", "medium": "warning", "low": "info", "info": "info"}


def security_finding(component, version, facts):
    """One security.<component> finding as the contract describes it, from the real catalog."""
    matches = [m for m in catalog_evaluate.evaluate(CATALOG, component, version, facts)["matches"]
               if m["kind"] == "security"]
    assert matches, (component, version, facts)
    advisories = [{"id": m["id"], "title": m["title"], "cves": m["cves"], "max_cvss": m["max_cvss"],
                   "severity": m["severity"], "status": m["status"], "affected_range": m["affected_range"],
                   "fixed": m["fixed"], "unknown_conditions": m["unknown_conditions"], "sources": m["sources"]}
                  for m in matches]
    top = max(matches, key=lambda m: m["max_cvss"] or 0)
    return {"id": "security.%s" % component, "severity": FINDING_SEVERITY[top["severity"]],
            "title": "%s %s is affected by %d advisories" % (component, version, len(matches)),
            "evidence": {"component": component, "version": version,
                         "cves": sorted(set(c for m in matches for c in m["cves"])),
                         "max_cvss": top["max_cvss"], "advisories": advisories},
            "remediation": {"summary": "upgrade %s" % component, "role": "kubegpu.fleet.device_plugin",
                            "fixed": dict((m["id"], m["fixed"]) for m in matches)}}


RUNC = {"runtime": "runc", "injection_mode": "legacy"}


def fleet():
    toolkit_old = security_finding("container-toolkit", "1.17.7", RUNC)
    toolkit_unknown = security_finding("container-toolkit", "1.17.7", {})  # runtime unknown: possibly
    dp = security_finding("device-plugin", "0.17.2", {"device_list_strategy": ["cdi-annotations"], "runtime": "runc"})
    return [
        {"name": "gpu-a", "status": "audited", "findings": [toolkit_old, dp]},
        {"name": "gpu-b", "status": "audited", "findings": [toolkit_unknown]},
        {"name": "gpu-c", "status": "audited", "findings": [
            {"id": "driver.known_bad", "severity": "critical", "title": "bad driver"}]},
        {"name": "gpu-d", "status": "unreachable", "error": "ssh", "findings": []},
    ]


def test_cves_are_grouped_across_nodes_and_components():
    rep = build.build_report(fleet(), generated_at="2026-11-22T06:00:00Z")
    cves = dict((c["id"], c) for c in rep["cves"])
    nvscape = cves["CVE-2025-23266"]
    assert nvscape["max_cvss"] == 9.0 and nvscape["severity"] == "critical"
    assert nvscape["components"] == ["container-toolkit", "device-plugin"]
    assert nvscape["affected_nodes"] == 2 and nvscape["node_names"] == ["gpu-a", "gpu-b"]
    assert nvscape["possibly_affected_nodes"] == ["gpu-b"]
    assert nvscape["fixed"] == {"container-toolkit": ["1.17.8"], "device-plugin": ["0.17.3"]}
    assert sorted(nvscape["advisories"]) == ["ctk-cve-2025-23266", "device-plugin-cve-2025-23266"]
    assert nvscape["sources"] and all(s.startswith("https://") for s in nvscape["sources"])
    assert [(n["node"], n["component"], n["version"], n["status"]) for n in nvscape["nodes"]] == [
        ("gpu-a", "container-toolkit", "1.17.7", "affected"), ("gpu-a", "device-plugin", "0.17.2", "affected"),
        ("gpu-b", "container-toolkit", "1.17.7", "possibly_affected")]
    # most severe first; each CVE once
    assert rep["cves"][0]["id"] == "CVE-2025-23266"
    assert len(rep["cves"]) == len(set(c["id"] for c in rep["cves"]))
    ranks = [(build.CVE_SEVERITY_RANK[c["severity"]], c["max_cvss"] or 0) for c in rep["cves"]]
    assert ranks == sorted(ranks, reverse=True)
    assert "CVE-2025-23267" in cves and cves["CVE-2025-23267"]["severity"] == "high"


def test_report_with_cves_validates_against_the_published_schema():
    jsonschema = pytest.importorskip("jsonschema")
    with open(os.path.join(REPO, "docs", "audit-report.schema.json")) as f:
        schema = json.load(f)
    rep = json.loads(json_format.render_json(build.build_report(fleet(), generated_at="2026-11-22T06:00:00Z")))
    jsonschema.validate(rep, schema)
    rep["cves"][0]["severity"] = "warning"  # finding severities are not CVE severities
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(rep, schema)


def test_markdown_and_html_cve_sections_bound_the_node_list():
    many = [{"name": "gpu-%02d" % i, "status": "audited",
             "findings": [security_finding("container-toolkit", "1.17.7", RUNC)]} for i in range(13)]
    rep = build.build_report(many, generated_at="2026-11-22T06:00:00Z")
    md = markdown_format.render_markdown(rep)
    assert "## CVEs across the fleet" in md
    row = [line for line in md.splitlines() if line.startswith("| CVE-2025-23266 |")][0]
    assert "| 9.0 | critical | container-toolkit | 13: gpu-00, gpu-01" in row
    assert "gpu-09 and 3 more" in row and "gpu-10" not in row and "container-toolkit 1.17.8" in row
    page = html_format.render_html(rep)
    assert '<tr class="fi" data-cve="CVE-2025-23266" data-affected-nodes="13">' in page
    assert page.index('id="cves"') < page.index('id="matrix"')
    row = page[page.index('data-cve="CVE-2025-23266"'):].split("</tr>", 1)[0]
    assert '<a href="#node-gpu-09">gpu-09</a> <span class="more">and 3 more</span>' in row and "gpu-10" not in row
    # JSON keeps every node
    assert len(rep["cves"][0]["node_names"]) == 13


def test_prometheus_cve_metric():
    text = prometheus_format.render_prometheus(build.build_report(fleet(), generated_at="2026-11-22T06:00:00Z"))
    assert "# TYPE kubegpu_cve_affected_nodes gauge" in text
    assert 'kubegpu_cve_affected_nodes{cve="CVE-2025-23266",component="container-toolkit",severity="critical"} 2' in text
    assert 'kubegpu_cve_affected_nodes{cve="CVE-2025-23266",component="device-plugin",severity="critical"} 1' in text
    assert 'kubegpu_cve_max_cvss{cve="CVE-2025-23266",severity="critical"} 9.0' in text
    if PROMTOOL:
        proc = subprocess.run([PROMTOOL, "check", "metrics"], input=text.encode(), capture_output=True, check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_fleet_without_security_findings_renders_no_cve_noise():
    nodes = [n for n in fleet() if n["name"] in ("gpu-c", "gpu-d")]
    rep = build.build_report(nodes, generated_at="2026-11-22T06:00:00Z")
    assert rep["cves"] == []
    assert "CVE" not in markdown_format.render_markdown(rep) and 'id="cves"' not in html_format.render_html(rep)
    assert "kubegpu_cve" not in prometheus_format.render_prometheus(rep)


def test_odd_security_evidence_is_tolerated():
    odd = [{"name": "gpu-a", "status": "audited", "findings": [
        {"id": "security.gpu-operator", "severity": "critical", "title": "x",
         "evidence": {"component": "gpu-operator", "version": None, "cves": ["CVE-2024-0132", 7],
                      "max_cvss": "9", "advisories": ["x", {"id": "a", "cves": "CVE-2024-0132"}]}},
        {"id": "security.driver", "severity": "warning", "title": "no evidence"}]}]
    rep = build.build_report(odd, generated_at="2026-11-22T06:00:00Z")
    assert [(c["id"], c["max_cvss"], c["severity"], c["components"]) for c in rep["cves"]] == [
        ("CVE-2024-0132", None, "info", ["gpu-operator"])]
    markdown_format.render_markdown(rep)
    html_format.render_html(rep)
    prometheus_format.render_prometheus(rep)


def test_cluster_components_to_findings_to_cve_section():
    """End to end on the controller: API objects -> cluster_view components -> the catalog rules
    (catalog_rules.rule_catalog, E2) -> the report's CVE grouping."""
    from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit import cluster_view as cl
    from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.rules import catalog as catalog_rules

    def pod(name, node, image, env=None):
        return {"metadata": {"name": name, "namespace": "gpu-operator", "uid": "u-" + name},
                "spec": {"nodeName": node, "containers": [{"name": "c", "image": image, "env": env or []}]},
                "status": {"phase": "Running"}}

    nodes = [{"metadata": {"name": n}} for n in ("gpu-a", "gpu-b")]
    pods = [pod("dp-a", "gpu-a", "nvcr.io/nvidia/k8s-device-plugin:v0.17.2",
                [{"name": "DEVICE_LIST_STRATEGY", "value": "cdi-annotations"}]),
            pod("dp-b", "gpu-b", "nvcr.io/nvidia/k8s-device-plugin:v0.17.3",
                [{"name": "DEVICE_LIST_STRATEGY", "value": "cdi-annotations"}]),
            pod("mig-a", "gpu-a", "nvcr.io/nvidia/cloud-native/k8s-mig-manager:v0.12.1-ubuntu20.04"),
            pod("mig-b", "gpu-b", "nvcr.io/nvidia/cloud-native/k8s-mig-manager:v0.12.1-ubuntu20.04")]
    operator = {"metadata": {"name": "gpu-operator", "namespace": "gpu-operator"},
                "spec": {"template": {"spec": {"containers": [{"image": "nvcr.io/nvidia/gpu-operator:v25.3.1"}]}}}}
    policy = {"metadata": {"name": "cluster-policy"}, "spec": {"cdi": {"enabled": True}}}
    view = cl.cluster_view(nodes, pods, [], [], deployments=[operator], cluster_policies=[policy],
                           cluster_policy_crd=True)
    stack = {"container_toolkit": {"installed": True, "version": "1.18.0", "runtime": "runc",
                                   "injection_mode": "cdi"}}
    audited = [{"name": name, "status": "audited",
                "findings": catalog_rules.rule_catalog({"api": api, "catalog": CATALOG, "stack": stack})}
               for name, api in sorted(view["nodes"].items())]
    rep = build.build_report(audited, generated_at="2026-11-22T06:00:00Z")
    nvscape = dict((c["id"], c) for c in rep["cves"])["CVE-2025-23266"]
    assert nvscape["components"] == ["device-plugin", "gpu-operator", "mig-manager"]
    assert nvscape["node_names"] == ["gpu-a", "gpu-b"] and nvscape["possibly_affected_nodes"] == []
    # gpu-b's device plugin is fixed (0.17.3): only gpu-a counts for that component
    assert [(n["node"], n["component"]) for n in nvscape["nodes"] if n["component"] == "device-plugin"] == [
        ("gpu-a", "device-plugin")]
    assert nvscape["fixed"]["mig-manager"] == ["0.12.2"] and nvscape["fixed"]["device-plugin"] == ["0.17.3"]
    text = prometheus_format.render_prometheus(rep)
    assert 'kubegpu_cve_affected_nodes{cve="CVE-2025-23266",component="gpu-operator",severity="critical"} 2' in text
    assert 'kubegpu_cve_affected_nodes{cve="CVE-2025-23266",component="device-plugin",severity="critical"} 1' in text
