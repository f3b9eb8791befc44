# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet report of one run from the published results of all its slices, and what changed.

**The run.** Every job of one run must publish under the same run id; the report step reports
that run. ``run_identity`` picks it from what AWX puts in every job's extra vars
(awx/main/models/unified_jobs.py ``UnifiedJob.awx_meta_vars``, ansible/awx e21dd0a):
``awx_job_id``/``tower_job_id`` (the job itself) and, for a job a workflow launched,
``awx_workflow_job_id``/``tower_workflow_job_id``. A sliced job template launches a workflow
job (awx/main/models/jobs.py ``JobTemplate.create_unified_job``: ``is_sliced_job``, one
workflow node per slice) whose slice jobs are launched by it, so every slice of one launch
has the same ``awx_workflow_job_id`` and its own ``awx_job_id``; the slice number and count
are not in the extra vars. Hence: an explicit ``kubegpu_audit_run_id`` first, then
``awx_workflow_job_id`` (all slices of a launch, or all jobs of a workflow), then
``awx_job_id``, then the ``tower_`` names, else ``local-<time>`` made once by the run.
The report step in a workflow after the sliced node gets the slices' run id as
``kubegpu_audit_run_id`` from their ``set_stats`` artifacts (a workflow passes a nested
workflow's aggregated artifacts to the next node: awx/main/models/workflow.py
``WorkflowJob.get_effective_artifacts``); without one it reports the newest run in the store.

**The fleet.** ``fleet_nodes`` lists every node in the run's scope: a node whose record is of
the reported run is reported as that record says; any other node of the scope is
``not_audited`` - no record, an older run's (named, with its time), or a record that failed the
checks (the reason). A node not audited takes its labels (its node pool, GPU Feature Discovery's
GPU product) from the cluster's Node when the cluster lists it, else from its last result of an
older run; a node known only from the inventory has none, and its reason says so.
``kubegpu_audit_fail_on`` and ``max_unaudited`` are then applied by the report to the whole fleet,
once. The scope (``SCOPES``) is what the run declared it covers:

* ``fleet`` - the whole fleet: every GPU Node the cluster has, every node the inventory knows and
  every node the store holds a result of (a node the inventory lost is not audited);
* ``targets`` - the nodes the run was pointed at (``kubegpu_targets``, ``--limit``: the known
  nodes). Other GPU Nodes of the cluster, and stored results of nodes outside it, are *out of
  scope*: counted, never listed as not audited. A node of the run's own records is always
  listed (a slice audited it).

**What changed.** ``annotate_changes`` adds to each finding of the report its ``first_seen``
time and ``change`` (``new`` or ``persisting``) against the node's previous result, to each node
the findings ``resolved`` since then, and the fleet-wide ``changes`` section.
"""
from __future__ import annotations

import datetime
import os

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit import results
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.rollout import gpu_nodes

SCOPES = ("fleet", "targets")
AWX_RUN_VARS = ("awx_workflow_job_id", "awx_job_id", "tower_workflow_job_id", "tower_job_id")


def run_identity(explicit, task_vars, now=None, pid=None):
    """``(run_id, source)``: see the module docstring for the order."""
    if explicit not in (None, ""):
        return results.check_run_id(str(explicit)), "kubegpu_audit_run_id"
    for var in AWX_RUN_VARS:
        value = (task_vars or {}).get(var)
        if value not in (None, ""):
            kind = "workflow" if "workflow" in var else "job"
            return results.check_run_id("awx-%s-%s" % (kind, value)), var
    now = now or datetime.datetime.now(datetime.timezone.utc)
    return "local-%s-%d" % (now.strftime("%Y%m%dT%H%M%SZ"), os.getpid() if pid is None else pid), "generated"


def node_names(hosts, hostvars):
    """The Node name of each inventory host: its ``kubegpu_node_name``, else its inventory name."""
    out = []
    for host in hosts or []:
        hv = hostvars[host] if host in hostvars else {}
        name = hv.get("kubegpu_node_name") if hasattr(hv, "get") else None
        out.append(name if isinstance(name, str) and name else host)
    return out


def select_run(records, run_id=None):
    """The run to report: ``run_id`` when given, else the run of the newest record (by its time,
    then run id). None when the store holds no record."""
    if run_id:
        return run_id
    if not records:
        return None
    newest = max(records.values(), key=lambda r: (r["run"]["time"], r["run"]["id"]))
    return newest["run"]["id"]


def cluster_labels(cluster_nodes):
    """``{name: labels}`` of every Node the cluster lists (its ``metadata.labels``, bounded as the
    audit bounds them: ``results.node_view_labels``); a Node whose labels are malformed is left out."""
    out = {}
    for node in cluster_nodes or []:
        meta = node.get("metadata") if isinstance(node, dict) else None
        name = meta.get("name") if isinstance(meta, dict) else None
        if not isinstance(name, str) or not name:
            continue
        try:
            out[name] = results.node_view_labels(meta.get("labels"))
        except results.StoredResultError:
            continue
    return out


def fleet_nodes(records, rejected, run_id, known=(), cluster_nodes=None, scope="fleet"):
    """``build_report``'s nodes for run ``run_id``: the nodes of the run's records, and every other
    node of the ``scope`` (see the module docstring) - known to the inventory (``known``: node
    names), the cluster (``cluster_nodes``: its Nodes; None when the store does not list them) or
    the store - as ``not_audited`` with the reason and, where known, the labels. Returns ``(nodes,
    run_records, out_of_scope)`` (``out_of_scope``: the sorted names of the other nodes, not listed)."""
    if scope not in SCOPES:
        raise ValueError("scope must be one of %s, got %r" % (", ".join(SCOPES), scope))
    everywhere = set(records) | set(rejected) | set(n for n in known if n)
    for node in cluster_nodes or []:
        meta = node.get("metadata") if isinstance(node, dict) else None
        if not isinstance(meta, dict) or not isinstance(meta.get("labels") or {}, dict):
            continue   # a malformed Node (its labels not a mapping) is no GPU Node the report can tell
        if gpu_nodes.is_gpu_node(node):
            name = gpu_nodes.node_name(node)
            if isinstance(name, str) and name:
                everywhere.add(name)
    if scope == "fleet":
        names = everywhere
    else:
        names = set(n for n in known if n) | set(n for n, r in records.items() if r["run"]["id"] == run_id)
    views = cluster_labels(cluster_nodes)
    out, run_records = [], {}
    for name in sorted(names):
        record = records.get(name)
        if record is not None and record["run"]["id"] == run_id:
            run_records[name] = record
            out.append({"name": name, "status": record["status"], "error": record["error"],
                        "findings": record["findings"], "coverage": record["coverage"], "labels": record["labels"],
                        "labels_from": "result"})
            continue
        labels, source = views.get(name), "cluster"
        if record is not None:
            error = ("not audited in run %s: the last result is of run %s at %s"
                     % (run_id, record["run"]["id"], record["run"]["time"]))
            if labels is None:
                labels, source = record["labels"], "last_result"
        elif name in rejected:
            error = rejected[name]
        else:
            error = "no slice of run %s published a result for this node" % run_id
        if labels is None:
            error += ("; the cluster lists no Node %s: its labels are not known" % name if cluster_nodes is not None
                      else "; its labels are not known (this store does not list the cluster's Nodes)")
        out.append({"name": name, "status": "not_audited", "findings": [], "error": error, "labels": labels,
                    "labels_from": source if labels is not None else None})
    return out, run_records, sorted(everywhere - names)


def _days(since, until):
    try:
        a = datetime.datetime.strptime(since, "%Y-%m-%dT%H:%M:%SZ")
        b = datetime.datetime.strptime(until, "%Y-%m-%dT%H:%M:%SZ")
    except (TypeError, ValueError):
        return None
    return round((b - a).total_seconds() / 86400.0, 2)


def annotate_changes(report, run_records, run_id, rejected=None):
    """Add first-seen times and what changed since each node's previous result to ``report``
    (``build_report``'s document for the run's nodes); returns it."""
    fleet = {"run": run_id, "new": [], "resolved": [], "persisting": [], "no_previous": [],
             "rejected": [{"entry": k, "reason": v} for k, v in sorted((rejected or {}).items())]}
    for node in report["nodes"]:
        record = run_records.get(node["name"])
        if node.get("status") == "not_audited":
            continue
        if record is None:
            continue
        now = record["run"]["time"]
        prev = record["previous"]
        prev_ids = set(prev["findings"]) if prev else set()
        node["previous_run"] = None if prev is None else {"id": prev["run"], "time": prev["time"]}
        if prev is None:
            fleet["no_previous"].append(node["name"])
        ids = set()
        for f in node["findings"]:
            if f.get("node") != node["name"]:
                continue   # a cluster finding attached to the node: not part of its published result
            ids.add(f["id"])
            f["first_seen"] = record["first_seen"].get(f["id"], now)
            f["known_days"] = _days(f["first_seen"], now)
            f["change"] = "persisting" if f["id"] in prev_ids else "new"
            fleet[f["change"]].append({"node": node["name"], "id": f["id"], "severity": f["severity"],
                                       "first_seen": f["first_seen"]})
        node["resolved"] = []
        if prev is not None and record["status"] == "audited":
            for fid in sorted(prev_ids - ids):
                entry = {"id": fid, "first_seen": prev["first_seen"].get(fid), "last_seen": prev["time"]}
                node["resolved"].append(entry)
                fleet["resolved"].append(dict(entry, node=node["name"]))
    for key in ("new", "resolved", "persisting"):
        fleet[key].sort(key=lambda e: (e["node"], e["id"]))
    fleet["counts"] = dict((k, len(fleet[k])) for k in ("new", "resolved", "persisting"))
    report["changes"] = fleet
    return report
