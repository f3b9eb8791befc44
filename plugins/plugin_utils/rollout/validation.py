# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Is GPU work possible on a node again after its maintenance? The device plugin pod and its MIG
strategy, the ``nvidia.com/*`` resources the plugin should advertise for the node's GPUs, and
whether the advertised resources are back."""
from __future__ import annotations

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.rollout import gpu_nodes

MIG_STRATEGIES = ("none", "single", "mixed")


def expected_resources(nvidia, strategy="none"):
    """The ``nvidia.com/*`` resources the NVIDIA device plugin advertises for the GPUs in
    ``nvidia`` (gpu_facts' ``ansible_facts.nvidia``) under its MIG strategy; None when the
    strategy cannot serve this layout (``single`` with some GPUs in MIG mode and some not)."""
    strategy = str(strategy or "none").lower()
    if strategy not in MIG_STRATEGIES:
        raise gpu_nodes.RolloutError("unknown MIG strategy %r (none, single, mixed)" % strategy)
    gpus = (nvidia or {}).get("gpus") or []
    whole, mig = [], []
    for gpu in gpus:
        mode = ((gpu.get("mig_mode") or {}).get("current")) or "disabled"
        (mig if mode == "enabled" else whole).append(gpu)
    out = {}
    if strategy == "none":
        out["nvidia.com/gpu"] = len(gpus)
    elif strategy == "single":
        if mig and whole:
            return None
        out["nvidia.com/gpu"] = (sum(len(g.get("mig_devices") or []) for g in mig) if mig else len(whole))
    else:
        out["nvidia.com/gpu"] = len(whole)
        for gpu in mig:
            for dev in gpu.get("mig_devices") or []:
                key = "nvidia.com/mig-%s" % (dev.get("profile") or "unknown")
                out[key] = out.get(key, 0) + 1
    return dict((k, v) for k, v in out.items() if v)


def _clean(resources):
    return dict((k, gpu_nodes.parse_count(v)) for k, v in (resources or {}).items()
                if str(k).startswith(gpu_nodes.RESOURCE_PREFIX) and gpu_nodes.parse_count(v))


def resources_check(pre, post, expected=None):
    """Are the GPU resources back? ``unchanged`` (post == pre) or ``mig_strategy`` (post ==
    what the plugin's MIG strategy gives for the GPUs the node has now), else not ok."""
    pre, post = _clean(pre), _clean(post)
    exp = None if expected is None else _clean(expected)
    if post == pre and (post or not exp):
        rule = "unchanged"
    elif exp is not None and exp and post == exp:
        rule = "mig_strategy"
    else:
        rule = None
    missing = dict((k, v - post.get(k, 0)) for k, v in pre.items() if post.get(k, 0) < v)
    if rule == "unchanged":
        msg = "allocatable %s as before maintenance" % (post or "{}")
    elif rule == "mig_strategy":
        msg = "allocatable %s matches the GPUs under the plugin's MIG strategy (before: %s)" % (post, pre or "{}")
    else:
        msg = "allocatable %s is neither the pre-maintenance %s nor the expected %s" % (
            post or "{}", pre or "{}", exp if exp is not None else "n/a")
    return {"ok": rule is not None, "rule": rule, "pre": pre, "post": post, "expected": exp,
            "missing": missing, "msg": msg}


def plugin_pod(pods, daemonsets=None, image_pattern="k8s-device-plugin"):
    """The device plugin pod among ``pods`` (one node's): name, phase, ready, MIG strategy."""
    strategies = {}
    for ds in daemonsets or []:
        for ctr in ((((ds.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or []):
            for env in ctr.get("env") or []:
                if env.get("name") == "MIG_STRATEGY":
                    strategies[gpu_nodes.object_meta(ds).get("name")] = env.get("value")
    for pod in pods or []:
        containers = ((pod.get("spec") or {}).get("containers")) or []
        if not any(image_pattern in str(c.get("image", "")) for c in containers):
            continue
        strategy = None
        for ctr in containers:
            for env in ctr.get("env") or []:
                if env.get("name") == "MIG_STRATEGY":
                    strategy = env.get("value")
        if strategy is None:
            for owner in gpu_nodes.object_meta(pod).get("ownerReferences") or []:
                if owner.get("kind") == "DaemonSet" and owner.get("name") in strategies:
                    strategy = strategies[owner["name"]]
        status = pod.get("status") or {}
        ready = any(c.get("type") == "Ready" and str(c.get("status")) == "True"
                    for c in status.get("conditions") or [])
        return {"found": True, "pod": gpu_nodes.pod_ref(pod), "phase": status.get("phase"),
                "ready": ready and not gpu_nodes.object_meta(pod).get("deletionTimestamp"),
                "running": status.get("phase") == "Running" and not gpu_nodes.object_meta(pod).get("deletionTimestamp"),
                "mig_strategy": (strategy or "none").lower()}
    return {"found": False, "pod": None, "phase": None, "ready": False, "running": False, "mig_strategy": "none"}
