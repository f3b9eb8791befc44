# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU nodes as the Kubernetes API returns them (plain dicts, the shape ``kubernetes.core.k8s_info``
returns): which are GPU nodes, which are unavailable, their GPU resources, and the disruption budget
over them.

The budget follows the GPU Operator's driver upgrade controller (k8s-operator-libs
``pkg/upgrade``): ``maxUnavailable`` is a count or a percentage of the GPU nodes, percentages
ROUNDED UP, and nodes that are already cordoned or not Ready count against it.
"""
from __future__ import annotations

import math
import re

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.k8s import labels as label_selector

GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
RESOURCE_PREFIX = "nvidia.com/"
DEFAULT_SKIP_LABEL = "kubegpu.io/maintenance=skip"

_PERCENT_RE = re.compile(r"^\s*(\d+)\s*%\s*$")
_INT_RE = re.compile(r"^\s*(\d+)\s*$")


class RolloutError(ValueError):
    """An input the rollout cannot work with, or a rollout that must not start."""


# --------------------------------------------------------------------------------- nodes

def object_meta(obj):
    """``metadata`` of a Kubernetes object; {} when it has none (or is no object)."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    return meta if isinstance(meta, dict) else {}


def node_name(node):
    return object_meta(node).get("name")


def pod_ref(pod):
    """``namespace/name`` of a pod."""
    meta = object_meta(pod)
    return "%s/%s" % (meta.get("namespace", "default"), meta.get("name"))


def parse_count(value):
    """A Kubernetes quantity of whole devices (``"2"``, ``2``, ``"0"``) -> int (0 if unparsable)."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value)
    text = str(value or "").strip()
    if _INT_RE.match(text):
        return int(text)
    if text.endswith("k") and _INT_RE.match(text[:-1]):
        return int(text[:-1]) * 1000
    return 0


def gpu_resources(node, field="allocatable"):
    """``nvidia.com/*`` resources of a node's ``status.<field>`` -> {name: int}, zeros dropped."""
    values = ((node or {}).get("status") or {}).get(field) or {}
    out = {}
    for key, value in values.items():
        if str(key).startswith(RESOURCE_PREFIX):
            count = parse_count(value)
            if count:
                out[key] = count
    return out


def is_gpu_node(node):
    """Label ``nvidia.com/gpu.present=true`` or a non-zero ``nvidia.com/*`` allocatable/capacity."""
    labels = object_meta(node).get("labels") or {}
    if str(labels.get(GPU_PRESENT_LABEL, "")).lower() == "true":
        return True
    return bool(gpu_resources(node, "allocatable") or gpu_resources(node, "capacity"))


def ready_status(node):
    for cond in ((node or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return str(cond.get("status"))
    return "Unknown"


def unavailable_reason(node):
    """Why a node is unavailable (``cordoned``, ``NotReady``, ``Ready=Unknown``), else None."""
    reasons = []
    if ((node or {}).get("spec") or {}).get("unschedulable"):
        reasons.append("cordoned")
    ready = ready_status(node)
    if ready != "True":
        reasons.append("NotReady" if ready == "False" else "Ready=%s" % ready)
    return ", ".join(reasons) or None


def unavailable_gpu_nodes(nodes):
    """{name: reason} of the GPU nodes that are cordoned or not Ready."""
    out = {}
    for node in nodes or []:
        if is_gpu_node(node):
            reason = unavailable_reason(node)
            if reason:
                out[node_name(node)] = reason
    return out


def has_label(node, selector):
    try:
        return label_selector.has_label(node, selector)
    except label_selector.LabelError as exc:
        raise RolloutError(str(exc))


# -------------------------------------------------------------------------------- budget

def scaled_max_unavailable(value, total):
    """GPU Operator semantics: an int count, or ``"NN%"`` of ``total`` rounded UP."""
    if isinstance(value, bool) or value is None:
        raise RolloutError("max_unavailable must be a count or a percentage, got %r" % (value,))
    if isinstance(value, int):
        count = value
    else:
        text = str(value)
        pct = _PERCENT_RE.match(text)
        if pct:
            return int(math.ceil(int(pct.group(1)) * int(total) / 100.0))
        if not _INT_RE.match(text):
            raise RolloutError("max_unavailable must be a count (2) or a percentage ('25%%'), got %r" % (value,))
        count = int(text)
    if count < 0:
        raise RolloutError("max_unavailable must not be negative, got %r" % (value,))
    return count


def budget_check(nodes, batch, max_unavailable):
    """May ``batch`` (node names) be taken down now? |unavailable GPU nodes ∪ batch| <= limit."""
    gpu = [n for n in nodes or [] if is_gpu_node(n)]
    limit = scaled_max_unavailable(max_unavailable, len(gpu))
    unavailable = unavailable_gpu_nodes(nodes)
    batch = sorted(set(b for b in batch or [] if b))
    would_be = sorted(set(unavailable) | set(batch))
    ok = len(would_be) <= limit
    if ok:
        msg = "%d of %d GPU nodes unavailable with this batch (limit %d)" % (len(would_be), len(gpu), limit)
    else:
        msg = ("taking down %s would make %d GPU nodes unavailable, more than max_unavailable %s = %d of %d; "
               "already unavailable: %s"
               % (", ".join(batch), len(would_be), max_unavailable, limit, len(gpu),
                  ", ".join("%s (%s)" % (k, unavailable[k]) for k in sorted(unavailable)) or "none"))
    return {"ok": ok, "limit": limit, "gpu_nodes": len(gpu), "unavailable": unavailable,
            "batch": batch, "would_be": would_be, "msg": msg}
