# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the human formats (Markdown, HTML) show of a report: the same bounded selection for both.

A fleet report of 5,000 nodes must still read summary first and open in a browser, so the
Markdown and the HTML show at most a fixed number of everything that grows with the fleet, and
say how many were left out ("and N more"); the JSON (and the Prometheus textfile, one series per
node) keeps everything. The bounds:

- :data:`NAMES_MAX` node names per list (a finding's nodes, the unreachable, ...);
- :data:`NODES_MAX` nodes with their findings in detail (and rows of the HTML matrix), the worst
  first (:func:`worst_first`: most severe finding, then most findings, then name);
- :data:`ROWS_MAX` rows per summary table (findings, GPU models, node groups, cluster findings);
- :data:`FINDINGS_MAX` findings shown per node;
- :data:`TEXT_MAX` characters of a title, a detail or a remediation summary, :data:`EVIDENCE_MAX`
  of a finding's evidence or role variables (as JSON), :data:`REFERENCES_MAX` references per finding.

So the page's size depends on these bounds and on the size of single findings, not on the
number of nodes (tests/unit/plugins/plugin_utils/audit/report/test_scale.py measures it).
"""
from __future__ import annotations

import json

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report.build import severity_rank, worst_severity

NAMES_MAX = 20
NODES_MAX = 100
ROWS_MAX = 100
FINDINGS_MAX = 40
TEXT_MAX = 1000
EVIDENCE_MAX = 4000
REFERENCES_MAX = 20


def bounded(items, limit):
    """``(shown, left out)``: the first ``limit`` items and how many more there are."""
    items = list(items)
    return items[:limit], max(0, len(items) - limit)


def short(text, limit=TEXT_MAX):
    """``text`` cut to ``limit`` characters, with `` [N more characters: see the JSON report]``."""
    text = "" if text is None else str(text)
    if len(text) <= limit:
        return text
    return "%s [%d more characters: see the JSON report]" % (text[:limit], len(text) - limit)


def json_text(value, limit=EVIDENCE_MAX):
    """``value`` as indented JSON, cut to ``limit`` characters."""
    return short(json.dumps(value, indent=2, sort_keys=True, allow_nan=False), limit)


def cluster_index(report):
    """``{(id, digest): finding}`` of the report's cluster findings."""
    return dict(((f["id"], f.get("digest")), f) for f in report["cluster"]["findings"])


def worst_first(report, nodes=None):
    """The nodes with something to show (findings of their own or of the cluster, a status other
    than audited, a coverage other than a GPU node), the worst first; with their worst severity:
    ``[(node, worst)]``."""
    index = cluster_index(report)
    out = []
    for node in report["nodes"] if nodes is None else nodes:
        worst = worst_severity(node, index)
        cov = node.get("coverage") or {}
        if worst is None and node["status"] == "audited" and cov.get("status", "gpu_node") == "gpu_node":
            continue
        out.append((node, worst))
    out.sort(key=lambda nw: (-(severity_rank(nw[1]) if nw[1] else 0), nw[0]["status"] == "audited",
                             -len(nw[0]["findings"]) - len(nw[0].get("cluster_findings") or []), nw[0]["name"]))
    return out


def clean_names(report):
    """The names of the clean nodes (``build.is_clean``), sorted."""
    shown = set(n["name"] for n, _w in worst_first(report))
    return [n["name"] for n in report["nodes"] if n["name"] not in shown]


def node_scope_ids(report):
    """The ids of ``summary.by_id`` whose findings are each node's own (the matrix's columns)."""
    return [fid for fid, slot in report["summary"]["by_id"].items() if slot.get("scope", "node") == "node"]


COVERAGE_CHECKS = (("pci_gpus", "GPUs on the PCI bus"), ("driver", "NVIDIA driver"), ("nvml", "NVML"),
                   ("kubelet", "kubelet"), ("kernel_log", "kernel log"), ("cluster_view", "cluster view"))
COVERAGE_STATUS = {"gpu_node": "GPU node", "not_gpu_node": "not a GPU node", "not_inspected": "not inspected"}


def coverage_line(cov):
    """``[(label, state, detail)]`` of a node's coverage, in a fixed order ([] without one)."""
    if not isinstance(cov, dict):
        return []
    return [(label, cov["checks"][key]["state"], short(cov["checks"][key]["detail"], 300))
            for key, label in COVERAGE_CHECKS if key in cov.get("checks", {})]
