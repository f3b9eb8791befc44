# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The audit report as a Prometheus textfile (node_exporter textfile collector format).

Label values are escaped by ``_prom_label`` per the exposition format, the one escaping path.
"""
from __future__ import annotations

import datetime

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report.build import (
    GENERATED_AT,
    RENDER_MAX_DEPTH,
    SEVERITIES,
    advisory_date,
    json_safe,
)


def _prom_label(value):
    """A label value per the exposition format: backslash, double quote and line feed escaped.

    Other characters are legal there; the report's strings are valid Unicode (``json_safe``)."""
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _prom_labels(**labels):
    return "{" + ",".join('%s="%s"' % (k, _prom_label(v)) for k, v in labels.items()) + "}"


def _epoch(iso):
    dt = datetime.datetime.strptime(iso, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
    return int(dt.timestamp())


def render_prometheus(report):
    report = json_safe(report, max_depth=RENDER_MAX_DEPTH)
    s = report["summary"]
    out = []

    def metric(name, mtype, help_text, samples):
        out.append("# HELP %s %s" % (name, help_text))
        out.append("# TYPE %s %s" % (name, mtype))
        for labels, value in samples:
            out.append("%s%s %s" % (name, _prom_labels(**labels) if labels else "", value))

    findings = []
    for node in report["nodes"]:
        for f in node["findings"]:
            findings.append(({"node": node["name"], "id": f["id"], "severity": f["severity"]}, 1))
    for f in report["cluster"]["findings"]:
        findings.append(({"node": "", "id": f["id"], "severity": f["severity"]}, 1))
    # Duplicate label sets are invalid exposition: one sample per (node, id, severity).
    dedup = {}
    for labels, value in findings:
        dedup[tuple(sorted(labels.items()))] = (labels, value)
    metric("kubegpu_finding", "gauge",
           "Finding present on a node at the last kubegpu.fleet audit (1 = present); node empty: a finding of the "
           "cluster, once however many nodes it affects.",
           [dedup[k] for k in sorted(dedup)])
    affected = {}
    for f in report["cluster"]["findings"]:
        affected.setdefault((f["id"], f["severity"]), set()).update(f.get("nodes") or [])
    metric("kubegpu_cluster_finding_affected_nodes", "gauge",
           "Nodes a finding of the cluster (GPU Operator, device plugin, MIG manager, DCGM Exporter) affects at the "
           "last audit (0: the cluster as a whole).",
           [({"id": fid, "severity": sev}, len(affected[(fid, sev)])) for fid, sev in sorted(affected)])
    # first-seen times (kept across runs in the result store, audit/fleet.py): "known-bad for 9 days"
    seen = {}
    for node in report["nodes"]:
        for f in node["findings"]:
            if isinstance(f.get("first_seen"), str) and GENERATED_AT.match(f["first_seen"]):
                labels = {"node": node["name"], "id": f["id"], "severity": f["severity"]}
                seen[tuple(sorted(labels.items()))] = (labels, _epoch(f["first_seen"]))
    if seen:
        metric("kubegpu_finding_first_seen_timestamp_seconds", "gauge",
               "Unix time the finding was first seen on the node, kept across audit runs.",
               [seen[k] for k in sorted(seen)])
    metric("kubegpu_audit_findings", "gauge", "Findings at the last audit by severity.",
           [({"severity": sev}, s["by_severity"][sev]) for sev in SEVERITIES])
    metric("kubegpu_audit_nodes", "gauge", "Nodes at the last audit by outcome.",
           [({"status": "audited"}, s["nodes_audited"]), ({"status": "unreachable"}, s["nodes_unreachable"]),
            ({"status": "failed"}, s["nodes_failed"]), ({"status": "clean"}, s["nodes_clean"]),
            ({"status": "not_gpu_node"}, s.get("nodes_not_gpu", 0)),
            ({"status": "not_inspected"}, s.get("nodes_not_inspected", 0))])
    metric("kubegpu_audit_node_coverage", "gauge",
           "What the audit saw of the node (1 for its coverage status: gpu_node, not_gpu_node, not_inspected).",
           [({"node": n["name"], "status": n["coverage"]["status"]}, 1) for n in report["nodes"]
            if n["status"] == "audited" and isinstance(n.get("coverage"), dict)])
    metric("kubegpu_audit_node_up", "gauge", "1 when the node was audited, 0 when unreachable or failed.",
           [({"node": n["name"]}, 1 if n["status"] == "audited" else 0) for n in report["nodes"]])
    needs_hands = set(e["node"] for e in s.get("hands_on") or [])
    metric("kubegpu_audit_node_hands_on", "gauge",
           "1 when the node has GPU hardware work for a person (RMA, GPU off the bus, Xid to investigate).",
           [({"node": n["name"]}, 1 if n["name"] in needs_hands else 0) for n in report["nodes"]])
    limit = s.get("coverage_limit")
    if isinstance(limit, dict):
        metric("kubegpu_audit_unaudited_nodes", "gauge",
               "GPU nodes in the report's scope the last audit did not see, by why (unreachable, failed, not_audited: "
               "no slice covered it, not_inspected: its probes saw nothing).",
               [({"reason": reason}, limit["by_status"][reason]) for reason in sorted(limit["by_status"])])
        metric("kubegpu_audit_unaudited_nodes_allowed", "gauge",
               "GPU nodes the last audit may fail to see (max_unaudited of the nodes in scope, rounded down).",
               [({}, limit["allowed"])])
        metric("kubegpu_audit_gpu_nodes_in_scope", "gauge",
               "GPU nodes in the last audit report's scope (every node but those that are not a GPU node).",
               [({}, limit["nodes_in_scope"])])
        metric("kubegpu_audit_coverage_limit_exceeded", "gauge",
               "1 when the last audit did not see more GPU nodes than max_unaudited allows (the run failed on it).",
               [({}, 1 if limit["exceeded"] else 0)])
    metric("kubegpu_audit_timestamp_seconds", "gauge", "Unix time the last kubegpu.fleet audit finished.",
           [({}, _epoch(report["generated_at"]))])
    cat = report.get("catalog")
    if isinstance(cat, dict):
        newest = cat.get("newest_advisory")
        if isinstance(newest, dict) and advisory_date(newest.get("date")) is not None:
            metric("kubegpu_audit_catalog_newest_bulletin_timestamp_seconds", "gauge",
                   "Unix time of the revision date of the newest bulletin in the known-bad catalog the audit used.",
                   [({}, _epoch(newest["date"] + "T00:00:00Z"))])
        metric("kubegpu_audit_catalog_stale", "gauge",
               "1 when the known-bad catalog is older than its configured age, names no dated bulletin or could not "
               "be read.", [({}, 1 if cat.get("stale") else 0)])
    cves = report.get("cves") or []
    if cves:
        per_component = []
        for c in cves:
            for comp in c["components"]:
                count = len(set(n["node"] for n in c["nodes"] if n["component"] == comp and n["node"] is not None))
                per_component.append(({"cve": c["id"], "component": comp, "severity": c["severity"]}, count))
        metric("kubegpu_cve_affected_nodes", "gauge",
               "Nodes whose NVIDIA component is affected (or possibly affected) by the CVE at the last audit.",
               per_component)
        metric("kubegpu_cve_max_cvss", "gauge", "Highest CVSS base score of the advisories naming the CVE.",
               [({"cve": c["id"], "severity": c["severity"]}, c["max_cvss"]) for c in cves if c["max_cvss"] is not None])
    return "\n".join(out) + "\n"
