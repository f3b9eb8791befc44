# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The work of kubegpu.fleet.audit_report: every host's audit into the fleet report, written.

``ACTION`` is what the action plugin runs (plugin_utils/action/runner.py): gather each named
host's ``kubegpu_audit`` fact (``audit_nodes``), date the known-bad catalog the audit used (the
same loader and ``catalog_extra``), build the report (``build.build_report``), render each asked
format and write it. The task returns the findings at or above ``fail_on`` (``failing``) and, when
the audit did not see more of the nodes in scope than ``max_unaudited`` allows, those nodes
(``coverage_failing``, ``coverage_limit.message``): the role's one fail task fails on either.

The report directory and files are created and written through the collection's one write
primitive (module_utils/_common/fileutil.py), run here by the user running ansible-playbook: a
directory on the path owned by another user than root and that user, or writable by group or
others (a root-owned sticky directory such as /tmp is fine on the path, not as ``dest``
itself), is refused with the reason; each file is written atomically (mode 0644).
"""
from __future__ import annotations

import os

from ansible_collections.kubegpu.fleet.plugins.module_utils._common import fileutil
from ansible_collections.kubegpu.fleet.plugins.module_utils.catalog.validate import CatalogError
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.action import runner
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit import fleet, publish, select
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.evaluate import node_labels
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import (
    build,
    html_format,
    json_format,
    markdown_format,
    prometheus_format,
)
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.catalog import load as catalog_load
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.k8s import action as k8s_action
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.k8s import client as k8s_client

# format -> (file name in dest, renderer)
FORMATS = {
    "json": ("kubegpu-audit.json", json_format.render_json),
    "html": ("kubegpu-audit.html", html_format.render_html),
    "markdown": ("kubegpu-audit.md", markdown_format.render_markdown),
    "prometheus": ("kubegpu_audit.prom", prometheus_format.render_prometheus),
}

ARGUMENT_SPEC = {
    "hosts": {"type": "list", "elements": "str", "default": []},
    "dest": {"type": "path", "required": True},
    "formats": {"type": "list", "elements": "str", "default": list(FORMATS), "choices": list(FORMATS)},
    "fail_on": {"type": "str", "default": "critical", "choices": ["critical", "warning", "info", "never"]},
    # how many GPU nodes in scope the audit may fail to see: a number or "N%" (build.check_max_unaudited)
    "max_unaudited": {"type": "raw", "default": build.DEFAULT_MAX_UNAUDITED},
    "cluster_findings": {"type": "list", "elements": "dict", "default": []},
    "collection_version": {"type": "str"},
    "run": {"type": "dict", "default": {}},
    "catalog_extra": {"type": "raw"},
    "catalog_max_age_days": {"type": "int", "default": build.CATALOG_MAX_AGE_DAYS},
    # a Node label (a node pool) the summary groups the nodes by
    "group_label": {"type": "str"},
    # the fleet report of a run from the published results (audit/publish.py, audit/fleet.py)
    "store": {"type": "str", "choices": list(publish.STORES)},
    "path": {"type": "path"},
    "run_id": {"type": "str"},
    "known_nodes": {"type": "list", "elements": "str", "default": []},
    "scope": {"type": "str", "default": "fleet", "choices": list(fleet.SCOPES)},
    # a view of the run: only the nodes a JMESPath expression chooses from its results (audit/select.py)
    "select": {"type": "str"},
}
ARGUMENT_SPEC.update(k8s_client.AUTH_ARG_SPEC)


def cluster_node_views(hostvars):
    """The cluster pass's view of each Node (``kubegpu_cluster.cluster.nodes`` of localhost, where
    kubegpu.fleet.audit_cluster runs); {} without one."""
    hv = hostvars["localhost"] if "localhost" in hostvars else {}
    registered = hv.get("kubegpu_cluster") if hasattr(hv, "get") else None
    nodes = ((registered.get("cluster") if isinstance(registered, dict) else None) or {})
    nodes = nodes.get("nodes") if isinstance(nodes, dict) else None
    return nodes if isinstance(nodes, dict) else {}


def audit_nodes(hosts, hostvars):
    """``build_report``'s nodes from each host's ``kubegpu_audit`` fact: a host without a finished
    audit (no fact, or a host missing from the inventory) is a failed node, never dropped. A node
    the audit did not see takes its labels from the cluster pass's view of its Node, when the
    cluster has one; else its labels are not known (None)."""
    nodes = []
    views = None
    for host in hosts:
        hv = hostvars[host] if host in hostvars else {}  # Mapping.get raises for a host not in the inventory (2.19)
        audit = hv.get("kubegpu_audit")
        name = hv.get("kubegpu_node_name") or host
        if isinstance(audit, dict) and audit.get("status") == "audited":
            nodes.append({"name": audit.get("node") or name, "status": "audited",
                          "findings": audit.get("findings") or [], "coverage": audit.get("coverage"),
                          "labels": audit.get("labels")})
            continue
        if isinstance(audit, dict) and audit.get("status") in ("unreachable", "failed"):
            entry = {"name": audit.get("node") or name, "status": audit["status"],
                     "error": audit.get("error"), "findings": []}
        else:
            entry = {"name": name, "status": "failed", "findings": [],
                     "error": "the audit did not finish on this host (failed before evaluation)"}
        if views is None:
            views = cluster_node_views(hostvars)
        view = views.get(entry["name"])
        if isinstance(view, dict) and view.get("exists") is True:
            entry.update(labels=node_labels(view), labels_from="cluster")
        nodes.append(entry)
    return nodes


def write_report(report, dest, formats):
    """Render ``report`` in each of ``formats`` and write the files into ``dest`` (created when
    missing) through the write primitive; ``{format: path}``. Raises OSError (the primitive's
    FileOpError names the file and the reason) on the first file it cannot write."""
    fileutil.make_dirs(dest)
    files = {}
    for fmt in formats:
        filename, render = FORMATS[fmt]
        path = os.path.join(dest, filename)
        fileutil.write_file(path, render(report), mode=0o644, backup=False)
        files[fmt] = path
    return files


def failing_entry(finding):
    """A failing finding as the task returns it: ``{"node", "id", "severity", "where"}`` (``where``:
    the node, or ``cluster (N nodes)`` for a finding of the cluster, which adds ``nodes``)."""
    out = {"node": finding["node"], "id": finding["id"], "severity": finding["severity"]}
    if finding["node"] is None:
        out["nodes"] = list(finding.get("nodes") or [])
        out["where"] = "cluster (%d nodes)" % len(out["nodes"]) if out["nodes"] else "cluster"
    else:
        out["where"] = finding["node"]
    return out


def work(task, args):
    """Build the report of ``args["hosts"]`` (or, with ``store``, of the run's published results)
    and write it; the task's result keys."""
    out = {}
    with k8s_action.masked(out, args) as secrets:
        out.update(_work(task, args, secrets))
    return out


def _work(task, args, secrets):
    fleet_run = None
    chooser = None
    try:
        args["max_unaudited"] = build.check_max_unaudited(args["max_unaudited"])   # before the store is read
    except build.ReportError as e:
        raise runner.ActionFailed(str(e))
    if args["select"]:
        if not args["store"]:
            raise runner.ActionFailed("select chooses nodes from the published results: it needs store")
        try:
            chooser = select.compile_expression(args["select"])   # before the store is read
        except select.SelectError as e:
            raise runner.ActionFailed(str(e))
    if args["store"]:
        run_id = args["run_id"] or None
        with publish.open_store(task, args, secrets) as where:
            known = fleet.node_names(args["known_nodes"], task.task_vars.get("hostvars", {}))
            nodes, run_records, rejected, run_id, out_of_scope = publish.read_fleet(where, run_id, known, args["scope"])
        if chooser is not None:
            try:
                chosen = set(select.select(chooser, select.documents(run_records, run_id)))
            except select.SelectError as e:
                raise runner.ActionFailed(str(e))
            nodes = [n for n in nodes if n["name"] in chosen]
            run_records = dict((k, v) for k, v in run_records.items() if k in chosen)
            args["run"] = dict(args["run"], selection={"expression": args["select"], "nodes": len(chosen)})
        fleet_run = (run_records, run_id, rejected)
        # out of scope: nodes the cluster or the store know outside the nodes the run was pointed at
        args["run"] = dict(args["run"], id=run_id, store=args["store"], scope=args["scope"],
                           nodes_out_of_scope=len(out_of_scope), out_of_scope=out_of_scope)
    else:
        nodes = audit_nodes(args["hosts"], task.task_vars.get("hostvars", {}))
    # the catalog the audit evaluated with (the same loader and catalog_extra): its date goes in the report
    catalog, catalog_error = None, None
    try:
        catalog = catalog_load.catalog_entries(args["catalog_extra"])
    except (CatalogError, OSError, ValueError) as e:
        catalog_error = str(e) or type(e).__name__
    try:
        report = build.build_report(nodes, cluster_findings=args["cluster_findings"], fail_on=args["fail_on"],
                                    collection_version=args["collection_version"] or build.collection_version(),
                                    run=args["run"], catalog=catalog, catalog_error=catalog_error,
                                    catalog_max_age_days=args["catalog_max_age_days"],
                                    group_label=args["group_label"] or None,
                                    max_unaudited=args["max_unaudited"])
    except build.ReportError as e:
        raise runner.ActionFailed("cannot build the audit report: %s" % e)
    if fleet_run is not None:
        fleet.annotate_changes(report, *fleet_run)
    try:
        files = write_report(report, args["dest"], args["formats"])
    except OSError as e:
        raise runner.ActionFailed("cannot write the audit report to %s: %s" % (args["dest"], e))
    failing = build.failing_findings(report, args["fail_on"])
    unseen = build.coverage_failing(report)
    limit = dict((k, v) for k, v in report["summary"]["coverage_limit"].items() if k != "nodes")
    limit["message"] = build.coverage_message(limit, unseen)
    # Reports are controller-side artifacts, written in check mode too; the task never
    # reports a change so the audit stays idempotent.
    return {"changed": False, "files": files, "summary": report["summary"],
            "failing": [failing_entry(f) for f in failing],
            "coverage_failing": unseen, "coverage_limit": limit,
            "report": report}


ACTION = runner.Action(ARGUMENT_SPEC, work)
