# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""kubegpu.fleet.audit_cluster: the per-node view of the cluster and the cluster-wide findings,
from the API read in-process (plugin_utils/k8s) or from k8s_info results the task passes in."""
from __future__ import annotations

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.action import runner
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit import cluster_read, fleet
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.cluster_view import cluster_view
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.evaluate import evaluate_cluster
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.k8s import action as k8s_action
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.k8s import client as k8s_client
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.k8s import service


def read_gpu_operator(client):
    """Deployments of every namespace and the ClusterPolicies (nvidia.com/v1, cluster-scoped).

    A 404 on the ClusterPolicy list means the CRD is not installed: no GPU Operator, not an error.
    A 403 (RBAC) on either read leaves that part unknown and says so; other errors fail the task.
    Returns ``({deployments, cluster_policies, cluster_policy_crd}, calls, notes)``.
    """
    notes = []
    out = {"deployments": [], "cluster_policies": [], "cluster_policy_crd": None}
    try:
        out["deployments"] = service.list_items(client, "apps/v1", "deployments", what="list Deployments")
    except k8s_client.K8sError as exc:
        if exc.status != 403:
            raise
        notes.append("Deployments not readable (403): the GPU Operator version is unknown")
    try:
        out["cluster_policies"] = service.list_items(client, "nvidia.com/v1", "clusterpolicies",
                                                     what="list ClusterPolicies")
        out["cluster_policy_crd"] = True
    except k8s_client.K8sError as exc:
        if exc.status == 404:
            out["cluster_policy_crd"] = False
        elif exc.status == 403:
            notes.append("ClusterPolicies not readable (403): the GPU Operator settings are unknown")
        else:
            raise
    return out, 2, notes


ARGUMENT_SPEC = {
    "nodes": {"type": "list", "elements": "dict"},
    "pods": {"type": "list", "elements": "dict", "default": []},
    "daemonsets": {"type": "list", "elements": "dict", "default": []},
    "events": {"type": "list", "elements": "dict", "default": []},
    "deployments": {"type": "list", "elements": "dict", "default": []},
    "cluster_policies": {"type": "list", "elements": "dict"},
    "device_plugin_image_pattern": {"type": "str", "default": "k8s-device-plugin"},
    "node_names": {"type": "list", "elements": "str"},
    "cluster_findings": {"type": "bool", "default": True},
}
ARGUMENT_SPEC.update(k8s_client.AUTH_ARG_SPEC)


def audit_cluster(task, args):
    """The ``cluster`` view and ``cluster_findings``; every secret the task knows is masked in them
    and in a failure's message."""
    out = {}
    with k8s_action.masked(out, args) as secrets:
        objects = {k: args[k] for k in ("nodes", "pods", "daemonsets", "events", "deployments")}
        objects["cluster_policies"] = args["cluster_policies"] or []
        # Given k8s_info results: ClusterPolicies passed prove the CRD; none passed proves nothing.
        objects["cluster_policy_crd"] = True if args["cluster_policies"] else None
        notes = []
        if args["nodes"] is None:
            try:
                with k8s_action.connected(args, task.environ(), secrets) as client:
                    if args["node_names"] is not None:   # one slice of a run: its own Nodes only
                        names = fleet.node_names(args["node_names"], task.task_vars.get("hostvars", {}))
                        objects = cluster_read.read_nodes(client, names)
                    else:
                        objects = service.read_cluster(client)
                    extra, calls, notes = read_gpu_operator(client)
                objects.update(extra)
                out["api_calls"] = objects["calls"] + calls
            except k8s_client.K8sError as exc:
                out["msg"] = str(exc)
        if "msg" not in out:
            view = cluster_view(objects["nodes"], objects["pods"], objects["daemonsets"], objects["events"],
                                image_pattern=args["device_plugin_image_pattern"],
                                deployments=objects["deployments"], cluster_policies=objects["cluster_policies"],
                                cluster_policy_crd=objects["cluster_policy_crd"])
            view["notes"] = notes + ["Node %s is not in the cluster" % n for n in objects.get("missing") or []]
            # a slice's pass leaves the cluster-wide findings to the report step, once per run
            cluster_findings = evaluate_cluster(view["device_plugin_daemonsets"]) if args["cluster_findings"] else []
            out.update(cluster=view, cluster_findings=cluster_findings)
    if "msg" in out:
        raise runner.ActionFailed(out.pop("msg"), **out)
    return out


ACTION = runner.Action(ARGUMENT_SPEC, audit_cluster)
