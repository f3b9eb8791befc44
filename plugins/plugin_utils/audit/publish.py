# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""kubegpu.fleet.audit_publish and the store side of kubegpu.fleet.audit_report.

``open_store`` connects the store a task names (``kubernetes``: the collection's Kubernetes
layer with kubernetes.core's connection resolution; ``directory``: a path), ``publish_work`` is
the action of audit_publish: each named host's ``kubegpu_audit`` fact (``write.audit_nodes``)
published under the run's id (``fleet.run_identity``). ``read_fleet`` is what the report step
does with a store: read every record back (checked), pick the run, list the fleet.
"""
from __future__ import annotations

import contextlib

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.action import runner
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit import fleet, results, store
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.k8s import action as k8s_action
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.k8s import client as k8s_client
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.rollout import node_api

STORES = ("kubernetes", "directory")
STORE_SPEC = {
    "store": {"type": "str", "required": True, "choices": list(STORES)},
    "path": {"type": "path"},
    "run_id": {"type": "str"},
}

ARGUMENT_SPEC = dict({
    "hosts": {"type": "list", "elements": "str", "required": True},
}, **STORE_SPEC)
ARGUMENT_SPEC.update(k8s_client.AUTH_ARG_SPEC)


@contextlib.contextmanager
def open_store(task, args, secrets):
    """The store of ``args`` (closed after the body); ``runner.ActionFailed`` when it cannot be used."""
    if args["store"] == "directory":
        if not args.get("path"):
            raise runner.ActionFailed("store=directory needs path (the result directory: a PVC or NFS mount)")
        try:
            yield store.DirectoryStore(args["path"])
        except store.StoreError as e:
            raise runner.ActionFailed(str(e))
        return
    try:
        with k8s_action.connected(args, task.environ(), secrets) as client:
            yield store.NodeStore(node_api.NodeApi(client))
    except k8s_client.K8sError as e:
        raise runner.ActionFailed("cannot reach the Kubernetes API for the audit results: %s" % e)
    except store.StoreError as e:
        raise runner.ActionFailed(str(e))


def publish_work(task, args):
    """Publish the results of ``args["hosts"]``; the task's result keys."""
    from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import write  # import cycle
    out = {}
    with k8s_action.masked(out, args) as secrets:
        try:
            run_id, source = fleet.run_identity(args.get("run_id"), task.task_vars)
        except results.StoredResultError as e:
            raise runner.ActionFailed("kubegpu_audit_run_id: %s" % e)
        run_time = results.utc_time()
        entries = write.audit_nodes(args["hosts"], task.task_vars.get("hostvars", {}))
        with open_store(task, args, secrets) as where:
            published, replaced = where.publish(entries, run_id, run_time, check_mode=task.check_mode)
        errors = dict((k, v["error"]) for k, v in published.items() if v.get("error"))
        out.update(changed=any(v.get("changed") for v in published.values()), run_id=run_id, run_id_source=source,
                   run_time=run_time, store=args["store"], nodes=sorted(published), errors=errors,
                   replaced=replaced, published=len(published) - len(errors))
        if errors:
            out["warnings"] = ["not published: %s" % "; ".join("%s: %s" % kv for kv in sorted(errors.items()))]
    return out


def read_fleet(where, run_id, known, scope="fleet"):
    """``(nodes, run_records, rejected, run_id, out_of_scope)`` of the run from the store ``where``
    (``scope``: ``fleet.SCOPES``)."""
    records, rejected, cluster_nodes = where.read()
    chosen = fleet.select_run(records, run_id)
    if chosen is None:
        raise runner.ActionFailed("the %s store holds no audit result: publish a run first (kubegpu_audit_store)"
                                  % where.kind)
    nodes, run_records, out_of_scope = fleet.fleet_nodes(records, rejected, chosen, known=known,
                                                         cluster_nodes=cluster_nodes, scope=scope)
    if not run_records:
        raise runner.ActionFailed("the %s store holds no result of run %s (runs found: %s)" % (
            where.kind, chosen, ", ".join(sorted(set(r["run"]["id"] for r in records.values()))) or "none"))
    return nodes, run_records, rejected, chosen, out_of_scope


ACTION = runner.Action(ARGUMENT_SPEC, publish_work)
