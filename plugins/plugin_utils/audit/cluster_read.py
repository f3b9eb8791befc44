# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cluster pass of one slice: only the slice's own Nodes and the pods bound to them.

A sliced run (AWX job slicing: every slice a separate ansible-playbook) that read the whole
cluster in every slice would list every Node and every Pod once per slice. ``read_nodes`` reads
what the slice's nodes need and nothing else: each Node (one GET), the pods bound to it (one list
with ``fieldSelector=spec.nodeName=<node>``), the events of those still Pending, and the
DaemonSets once (the device plugin pod's owner). API reads per run: 2 per node plus 1 per slice
(plus the GPU Operator's Deployments and ClusterPolicies, 2 per slice), against 3 whole-cluster
lists per slice. The cluster-wide findings are the report step's, read once per run.
"""
from __future__ import annotations

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.k8s import service


def read_nodes(client, names):
    """``{nodes, pods, daemonsets, events, calls, missing}`` for the Nodes ``names`` (a name the
    cluster does not have is in ``missing``)."""
    nodes, pods, events, missing = [], [], [], []
    calls = 0
    for name in sorted(set(n for n in names if isinstance(n, str) and n)):
        calls += 1
        node = service.get(client, "v1", "nodes", name, what="read Node %s" % name)
        if node is None:
            missing.append(name)
            continue
        nodes.append(node)
        calls += 1
        pods.extend(service.list_items(client, "v1", "pods", field_selector="spec.nodeName=%s" % name,
                                       what="list Pods on %s" % name))
    daemonsets = service.list_items(client, "apps/v1", "daemonsets", what="list DaemonSets")
    calls += 1
    for pod in service.pending_bound(pods):
        meta = pod.get("metadata") or {}
        if not meta.get("uid") or not meta.get("namespace"):
            continue
        calls += 1
        events.extend(service.list_items(client, "v1", "events", namespace=meta["namespace"],
                                         field_selector="involvedObject.uid=%s" % meta["uid"],
                                         what="list Events of Pod %s/%s" % (meta["namespace"], meta.get("name"))))
    return {"nodes": nodes, "pods": pods, "daemonsets": daemonsets, "events": events, "calls": calls,
            "missing": missing}
