# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Is a cordoned node drained? The pods still bound to it, classified, and the
PodDisruptionBudgets that hold them (``policy/v1`` selector semantics), in words."""
from __future__ import annotations

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.rollout import gpu_nodes

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
TERMINAL_PHASES = ("Succeeded", "Failed")


def _owner_kinds(pod):
    return [o.get("kind") for o in gpu_nodes.object_meta(pod).get("ownerReferences") or []]


def leftover_pods(pods, accept_terminating=False):
    """Classify the pods still bound to a drained node.

    DaemonSet pods, mirror (static) pods and finished pods do not block. A pod that was
    evicted or deleted (``deletionTimestamp`` set) but is still there blocks unless
    ``accept_terminating`` (a wedged kubelet never confirms deletions); a pod never evicted
    always blocks.
    """
    out = {"blocking": [], "terminating": [], "accepted": [], "ignored": []}
    for pod in pods or []:
        meta = gpu_nodes.object_meta(pod)
        ref = gpu_nodes.pod_ref(pod)
        phase = ((pod.get("status") or {}).get("phase")) or "Unknown"
        if "DaemonSet" in _owner_kinds(pod):
            out["ignored"].append({"pod": ref, "reason": "DaemonSet"})
        elif MIRROR_ANNOTATION in (meta.get("annotations") or {}):
            out["ignored"].append({"pod": ref, "reason": "mirror pod"})
        elif phase in TERMINAL_PHASES and not meta.get("deletionTimestamp"):
            out["ignored"].append({"pod": ref, "reason": phase})
        elif meta.get("deletionTimestamp"):
            item = {"pod": ref, "phase": phase, "deletionTimestamp": meta.get("deletionTimestamp")}
            out["terminating"].append(item)
            if accept_terminating or phase in TERMINAL_PHASES:
                out["accepted"].append(item)
            else:
                out["blocking"].append(dict(item, reason="evicted but still Terminating"))
        else:
            out["blocking"].append({"pod": ref, "phase": phase, "reason": "not evicted"})
    out["ok"] = not out["blocking"]
    return out


def _selector_matches(selector, labels):
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def pdbs_for_pods(pods, pdbs, only=None):
    """The PodDisruptionBudgets (policy/v1 selector semantics) that cover ``pods`` (restricted
    to the ``namespace/name`` refs in ``only`` when given)."""
    if only is not None:
        wanted = set(only)
        pods = [p for p in pods or [] if gpu_nodes.pod_ref(p) in wanted]
    out = []
    for pdb in pdbs or []:
        meta = gpu_nodes.object_meta(pdb)
        covered = [gpu_nodes.pod_ref(p) for p in pods or []
                   if gpu_nodes.object_meta(p).get("namespace", "default") == meta.get("namespace", "default")
                   and _selector_matches((pdb.get("spec") or {}).get("selector"), gpu_nodes.object_meta(p).get("labels") or {})]
        if covered:
            status = pdb.get("status") or {}
            spec = pdb.get("spec") or {}
            out.append({"pdb": "%s/%s" % (meta.get("namespace", "default"), meta.get("name")),
                        "pods": covered,
                        "minAvailable": spec.get("minAvailable"), "maxUnavailable": spec.get("maxUnavailable"),
                        "disruptionsAllowed": status.get("disruptionsAllowed"),
                        "currentHealthy": status.get("currentHealthy"),
                        "desiredHealthy": status.get("desiredHealthy")})
    return out


def drain_report(leftover, pdbs=None):
    """One readable sentence naming the pods (and their budgets) that keep a node from draining."""
    parts = ["%s (%s)" % (p["pod"], p.get("reason", "")) for p in (leftover or {}).get("blocking") or []]
    text = "pods still on the node: %s" % (", ".join(parts) or "none")
    if pdbs:
        text += "; PodDisruptionBudget(s): %s" % ", ".join(
            "%s (disruptionsAllowed %s, currentHealthy %s, desiredHealthy %s, covers %s)"
            % (b["pdb"], b["disruptionsAllowed"], b["currentHealthy"], b["desiredHealthy"], ", ".join(b["pods"]))
            for b in pdbs)
    return text
