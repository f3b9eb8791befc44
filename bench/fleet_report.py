# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Part 6: the report step of a sliced audit over 10,000 synthetic nodes (no lab).

Two nightly runs of 10,000 nodes are published through the real stores (audit/store.py): the
directory store writes one file per node (the write primitive, atomic, under the lock); the
Kubernetes store's Node forms (audit/results.py: the summary and compressed findings annotations)
are made for every node and read back the way the report step reads the one Node list. Then the
report step as ``audit_report`` runs it: read every record back (checked), the fleet of the run
(fleet.py), the report with what changed since the first run (build + annotate), each format
rendered. Times are wall seconds on the controller, the sizes those of the files written.

API reads per audited node of a sliced run are counted, not timed: the lab test
(tests/lab/test_audit_sliced_fleet.py) measures them on the API double - 3 per node (the slice's
Node and its pods, the Node again when publishing), 2 per slice, 3 in the report step - and the
figure here applies that count to 10,000 nodes in 10 slices.
"""
import os
import sys
import time

import benchlib

sys.path.insert(0, os.path.join(benchlib.REPO, ".build", "collections"))
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit import fleet, results, store  # noqa: E402
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import build  # noqa: E402
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import write  # noqa: E402

TITLE = "Fleet report step over 10,000 synthetic nodes (published results, what changed)"
NODES = int(os.environ.get("BENCH_FLEET_NODES", "10000"))
SLICES = 10
# counted on the API double by tests/lab/test_audit_sliced_fleet.py (7 nodes, 3 slices: 30 reads)
READS_PER_NODE, READS_PER_SLICE, READS_REPORT_STEP = 3, 2, 3
RUN1, RUN2 = "2026-11-01T02:00:00Z", "2026-11-02T02:00:00Z"


def node_findings(i, night):
    """A node's findings: every 7th node a missing UVM device (fixed on every other such node the
    second night), every 11th a known-bad driver, every 5th a driver with CVEs (a realistic evidence
    size), every 13th a memory-reservation warning appearing only the second night."""
    out = []
    if i % 7 == 0 and not (night == 2 and i % 14 == 0):
        out.append({"id": "uvm.node_missing", "severity": "critical", "title": "no /dev/nvidia-uvm",
                    "evidence": {"dev_nvidia_uvm_exists": False, "nvidia_uvm_loaded": True}})
    if i % 11 == 0:
        out.append({"id": "driver.known_bad", "severity": "critical", "title": "Known-bad driver 570.148.08",
                    "evidence": {"driver_version": "570.148.08", "matches": ["nvml-r570-mig-hang"]},
                    "remediation": {"summary": "upgrade to 570.172.08", "role": "kubegpu.fleet.driver"},
                    "references": ["https://github.com/NVIDIA/gpu-operator/issues/1361"]})
    if i % 5 == 0:
        cves = ["CVE-2025-%05d" % (23000 + k) for k in range(12)]
        out.append({"id": "security.driver", "severity": "critical", "title": "driver 570.148.08 has advisories",
                    "evidence": {"component": "driver", "version": "570.148.08", "cves": cves, "max_cvss": 8.8,
                                 "advisories": [{"id": "nvidia-%d" % k, "cves": cves[k:k + 3], "max_cvss": 8.8,
                                                 "severity": "high", "status": "affected", "fixed": "570.172.08",
                                                 "sources": ["https://nvidia.custhelp.com/app/answers/detail/a_id/%d"
                                                             % (5600 + k)]} for k in range(4)]}})
    if night == 2 and i % 13 == 0:
        out.append({"id": "kubelet.memory_reservation", "severity": "warning", "title": "No memory reservation",
                    "evidence": {"system_reserved": None}})
    return out


def entries(night):
    return [{"name": "gpu-%05d" % i, "status": "unreachable" if i % 997 == 0 else "audited",
             "error": "ssh: connect timed out" if i % 997 == 0 else None,
             "findings": [] if i % 997 == 0 else node_findings(i, night)} for i in range(NODES)]


def timed(func, *args):
    t0 = time.monotonic()
    out = func(*args)
    return out, time.monotonic() - t0


def report_step(records, rejected, run_id, dest):
    t = {}
    (nodes, run_records, _out), t["fleet_s"] = timed(fleet.fleet_nodes, records, rejected, run_id)
    report, t["build_s"] = timed(lambda: build.build_report(nodes, generated_at=RUN2, run={"id": run_id}))
    _r, t["changes_s"] = timed(fleet.annotate_changes, report, run_records, run_id, rejected)
    sizes = {}
    for fmt, (name, render) in sorted(write.FORMATS.items()):
        text, t["render_%s_s" % fmt] = timed(render, report)
        sizes[fmt] = len(text.encode("utf-8"))
    files, t["write_s"] = timed(write.write_report, report, dest, list(write.FORMATS))
    return report, t, sizes, files


def run(ctx):
    scratch = benchlib.scratch("fleet")
    try:
        where = store.DirectoryStore(os.path.join(scratch, "results"))
        _o, pub1 = timed(where.publish, entries(1), "nightly-1", RUN1)
        _o, pub2 = timed(where.publish, entries(2), "nightly-2", RUN2)
        (records, rejected, _nodes), read_s = timed(where.read)
        report, t, sizes, _files = report_step(records, rejected, "nightly-2", os.path.join(scratch, "report"))
        # the Kubernetes store: each Node's annotations, read back as the report step reads the Node list
        annotations, node_forms_s = timed(lambda: [(r["node"], results.node_annotations(r)) for r in records.values()])
        _parsed, parse_s = timed(lambda: [results.parse_node_annotations(n, a) for n, a in annotations])
        ann_bytes = [sum(len(v or "") for v in a.values()) for _n, a in annotations]
        reads = NODES * READS_PER_NODE + SLICES * READS_PER_SLICE + READS_REPORT_STEP
        c = report["changes"]["counts"]
        return {
            "nodes": NODES, "slices": SLICES,
            "publish_directory_s": {"first_run": pub1, "second_run": pub2},
            "read_directory_s": read_s, "node_annotations_s": node_forms_s, "parse_node_annotations_s": parse_s,
            "annotation_bytes": {"max": max(ann_bytes), "mean": sum(ann_bytes) / float(len(ann_bytes))},
            "report_step_s": dict(t, read_directory_s=read_s,
                                  total_directory_s=read_s + sum(v for v in t.values())),
            "sizes_bytes": sizes, "changes": c, "failing": report["summary"]["failing"],
            "api_reads": {"sliced_run": reads, "per_node": reads / float(NODES),
                          "per_node_lab_measured": {"nodes": 7, "slices": 3, "reads": 30}},
        }
    finally:
        benchlib.rmtree(scratch)


def summary(r):
    t = r["report_step_s"]
    return [
        "report step, %d nodes from the directory store: %.1f s (read %.1f s, fleet + build + changes %.1f s, "
        "render + write %.1f s); HTML %.0f KiB, JSON %.1f MiB"
        % (r["nodes"], t["total_directory_s"], t["read_directory_s"], t["fleet_s"] + t["build_s"] + t["changes_s"],
           sum(v for k, v in t.items() if k.startswith("render_")) + t["write_s"], r["sizes_bytes"]["html"] / 1024.0,
           r["sizes_bytes"]["json"] / 2.0 ** 20),
        "publishing %d nodes to a directory: %.1f s the first night, %.1f s the second; the Node annotations read "
        "back (the Kubernetes store) in %.1f s, at most %d bytes per Node"
        % (r["nodes"], r["publish_directory_s"]["first_run"], r["publish_directory_s"]["second_run"],
           r["parse_node_annotations_s"], r["annotation_bytes"]["max"]),
        "what changed: %(new)d new, %(resolved)d resolved, %(persisting)d persisting" % r["changes"],
        "API reads of a run sliced %d ways: %d (%.2f per audited node)"
        % (r["slices"], r["api_reads"]["sliced_run"], r["api_reads"]["per_node"]),
    ]


def render(r):
    t = r["report_step_s"]
    rows = [["read every record back (checked)", "%.2f" % t["read_directory_s"]],
            ["the fleet of the run (not audited nodes)", "%.2f" % t["fleet_s"]],
            ["build the report", "%.2f" % t["build_s"]],
            ["what changed (first seen, new/resolved/persisting)", "%.2f" % t["changes_s"]]]
    rows += [["render %s (%.0f KiB)" % (fmt, r["sizes_bytes"][fmt] / 1024.0), "%.2f" % t["render_%s_s" % fmt]]
             for fmt in sorted(r["sizes_bytes"])]
    rows += [["write the files", "%.2f" % t["write_s"]], ["**report step in all**", "**%.2f**" % t["total_directory_s"]]]
    return "\n".join([
        "%d synthetic nodes, two nightly runs published through the directory store (%.1f s and %.1f s), then "
        "the report step as `audit_report` with `store` runs it:" % (
            r["nodes"], r["publish_directory_s"]["first_run"], r["publish_directory_s"]["second_run"]), "",
        benchlib.md_table(["report step", "s"], rows), "",
        "The Kubernetes store's Node annotations of the same records: made in %.1f s, read back and checked in "
        "%.1f s; at most %d bytes per Node (mean %.0f). What changed: %d new, %d resolved, %d persisting."
        % (r["node_annotations_s"], r["parse_node_annotations_s"], r["annotation_bytes"]["max"],
           r["annotation_bytes"]["mean"], r["changes"]["new"], r["changes"]["resolved"], r["changes"]["persisting"]),
        "",
        "API reads of a run sliced %d ways over %d nodes: **%d, %.2f per audited node** (3 per node, 2 per slice, "
        "3 in the report step, as counted on the API double by tests/lab/test_audit_sliced_fleet.py: 30 reads for "
        "7 nodes in 3 slices)." % (r["slices"], r["nodes"], r["api_reads"]["sliced_run"], r["api_reads"]["per_node"]),
    ])
