# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The kubelet's memory reservations and hard eviction, and the GKE reservation ladder.

Node side, Python 3.8+. :func:`memory_facts` resolves ``systemReserved``, ``kubeReserved``,
``evictionHard`` and ``enforceNodeAllocatable`` from the flags and the effective config as the
kubelet does (flags win; setting any ``evictionHard`` key drops the unset defaults unless
``mergeDefaultEvictionSettings`` is true) and compares the reservation with GKE's ladder.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math
import os
from fractions import Fraction

from ansible_collections.kubegpu.fleet.plugins.module_utils._common import safe_io
from ansible_collections.kubegpu.fleet.plugins.module_utils._common.procfs import read_text as read_proc_text
from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet.flags import flag_list, flag_map
from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet.quantity import QuantityError, quantity_to_bytes

MIB = 1 << 20
GIB = 1 << 30

# kubelet v1beta1 defaults (Linux). Setting ANY evictionHard key drops the unset ones, unless
# mergeDefaultEvictionSettings is true.
DEFAULT_EVICTION_HARD = {
    "memory.available": "100Mi",
    "nodefs.available": "10%",
    "imagefs.available": "15%",
    "nodefs.inodesFree": "5%",
}
DEFAULT_ENFORCE_NODE_ALLOCATABLE = ["pods"]
# GKE adds this hard-eviction threshold on top of its reserved-memory ladder.
GKE_EVICTION_THRESHOLD_BYTES = 100 * MIB


def parse_memory_threshold(value, capacity_bytes=None):
    """An eviction threshold value: a quantity (``100Mi``) or a percentage (``5%``).

    Returns ``{"raw", "bytes", "percent"}``; for a percentage ``bytes`` is that share of
    ``capacity_bytes`` (truncated, as the kubelet does) or None when the capacity is unknown.
    """
    if isinstance(value, str) and value.strip().endswith("%"):
        text = value.strip()[:-1].strip()
        try:
            percent = float(text)
        except ValueError:
            raise QuantityError("invalid eviction threshold %r: not a percentage" % (value,))
        if math.isnan(percent) or percent < 0 or percent > 100:
            raise QuantityError("invalid eviction threshold %r: percentage must be within 0-100%%"
                                % (value,))
        nbytes = None
        if capacity_bytes is not None:
            nbytes = int(Fraction(capacity_bytes) * Fraction(text) / 100)
        return {"raw": value, "bytes": nbytes, "percent": percent}
    return {"raw": value if isinstance(value, str) else str(value),
            "bytes": quantity_to_bytes(value), "percent": None}


def gke_reserved_memory_bytes(node_memory_bytes):
    """Memory GKE reserves for system daemons on a node of ``node_memory_bytes``.

    25% of the first 4 GiB, 20% of the next 4 GiB, 10% of the next 8 GiB, 6% of the next
    112 GiB and 2% of everything above 128 GiB (rounded down to a byte). GKE adds a separate
    hard-eviction threshold of 100 MiB (``GKE_EVICTION_THRESHOLD_BYTES``), not included here.
    """
    if isinstance(node_memory_bytes, bool) or not isinstance(node_memory_bytes, int) \
            or node_memory_bytes < 0:
        raise ValueError("node_memory_bytes must be a non-negative integer, got %r"
                         % (node_memory_bytes,))
    remaining = node_memory_bytes
    scaled = 0
    for size, percent in ((4 * GIB, 25), (4 * GIB, 20), (8 * GIB, 10), (112 * GIB, 6),
                          (None, 2)):
        part = remaining if size is None else min(remaining, size)
        scaled += part * percent
        remaining -= part
        if remaining <= 0:
            break
    return scaled // 100


def read_meminfo_total(proc_path):
    """MemTotal in bytes from ``<proc_path>/meminfo``, or None."""
    text = read_proc_text(os.path.join(proc_path, "meminfo"), 1 << 20)
    for line in (text or "").splitlines():
        if line.startswith("MemTotal:"):
            fields = line.split()
            if len(fields) >= 2 and safe_io.is_ascii_digits(fields[1]):
                unit = fields[2].lower() if len(fields) > 2 else ""
                return int(fields[1]) * (1024 if unit == "kb" else 1)
    return None


def _map_setting(pairs, flag, config, key, errors, separator="="):
    """(map or None, source) for a map setting (reserved resources, eviction thresholds)."""
    try:
        from_flag = flag_map(pairs, flag, separator)
    except ValueError as e:
        errors.append(str(e))
        from_flag = None
    if from_flag is not None:
        return from_flag, "flag"
    value = config.get(key) if isinstance(config, dict) else None
    if value is None:
        return None, "default"
    if not isinstance(value, dict):
        errors.append("%s must be a mapping, got %r" % (key, value))
        return None, "default"
    return dict(value), "config"


def _memory_entry(mapping, source, errors, what):
    raw = (mapping or {}).get("memory")
    entry = {"raw": None if raw is None else str(raw), "bytes": None, "source": source}
    if raw is not None:
        try:
            entry["bytes"] = quantity_to_bytes(raw)
        except QuantityError as e:
            entry["error"] = str(e)
            errors.append("%s: %s" % (what, e))
    return entry


def memory_facts(pairs, config, node_memory_bytes, errors):
    """The ``memory`` facts: reservations, hard eviction, enforcement and the GKE ladder."""
    system, system_src = _map_setting(pairs, "system-reserved", config, "systemReserved", errors)
    kube, kube_src = _map_setting(pairs, "kube-reserved", config, "kubeReserved", errors)
    eviction, eviction_src = _map_setting(pairs, "eviction-hard", config, "evictionHard", errors,
                                          separator="<")
    merge_defaults = isinstance(config, dict) and config.get("mergeDefaultEvictionSettings") is True
    if eviction is None:
        effective = dict(DEFAULT_EVICTION_HARD)
        missing = []
    else:
        missing = sorted(k for k in DEFAULT_EVICTION_HARD if k not in eviction)
        effective = dict(eviction)
        if merge_defaults:
            for key in missing:
                effective[key] = DEFAULT_EVICTION_HARD[key]
    partial = bool(eviction is not None and missing and not merge_defaults)

    mem_avail = {"raw": None, "bytes": None, "percent": None}
    if "memory.available" in effective:
        try:
            mem_avail = parse_memory_threshold(effective["memory.available"], node_memory_bytes)
        except QuantityError as e:
            mem_avail = {"raw": str(effective["memory.available"]), "bytes": None,
                         "percent": None, "error": str(e)}
            errors.append("evictionHard memory.available: %s" % e)

    enforce = flag_list(pairs, "enforce-node-allocatable")
    enforce_src = "flag"
    if enforce is None:
        value = config.get("enforceNodeAllocatable") if isinstance(config, dict) else None
        if isinstance(value, list):
            enforce, enforce_src = [str(v) for v in value], "config"
        else:
            if value is not None:
                errors.append("enforceNodeAllocatable must be a list, got %r" % (value,))
            enforce, enforce_src = list(DEFAULT_ENFORCE_NODE_ALLOCATABLE), "default"

    system_entry = _memory_entry(system, system_src, errors, "systemReserved memory")
    kube_entry = _memory_entry(kube, kube_src, errors, "kubeReserved memory")
    reserved_total = (system_entry["bytes"] or 0) + (kube_entry["bytes"] or 0)
    eviction_bytes = mem_avail.get("bytes")
    allocatable = None
    if node_memory_bytes is not None:
        allocatable = node_memory_bytes - reserved_total - (eviction_bytes or 0)
    recommended = None
    if node_memory_bytes is not None:
        recommended = gke_reserved_memory_bytes(node_memory_bytes)
    return {
        "system_reserved": system_entry,
        "kube_reserved": kube_entry,
        "eviction_hard": {
            "configured": eviction,
            "source": eviction_src,
            "effective": effective,
            "merge_defaults": merge_defaults,
            "memory_available": mem_avail,
        },
        "eviction_hard_partial": partial,
        "eviction_hard_missing_defaults": missing if eviction is not None else [],
        "enforce_node_allocatable": enforce,
        "enforce_node_allocatable_source": enforce_src,
        "reserved_total_bytes": reserved_total,
        "eviction_bytes": eviction_bytes,
        "allocatable_bytes": allocatable,
        "recommended_reserved_bytes": recommended,
        "recommended_eviction_bytes": GKE_EVICTION_THRESHOLD_BYTES,
        "reserved_shortfall_bytes": (max(recommended - reserved_total, 0)
                                     if recommended is not None else None),
    }, system, kube
