# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Audit rules of the kubelet: pod admission blocked by a hung device plugin Allocate, memory
reservations and evictionHard, and the Node's readiness in the API."""
from __future__ import annotations

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.fields import as_dict as _d, dict_items as _l, nested as _g, number as _num
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.finding_types import finding


def rule_admission(ctx, pending_threshold_s):
    api = _d(ctx.get("api"))
    stuck = [p for p in _l(api.get("pending_pods"))
             if _num(p.get("pending_seconds")) >= pending_threshold_s and not p.get("kubelet_events")]
    log_hits = [u for u in _l(_g(ctx, "kubelet", "allocation_log", "unanswered", default=[]))
                if u.get("age_seconds") is None or _num(u["age_seconds"]) >= pending_threshold_s]
    if not stuck and not log_hits:
        return []
    return [finding("kubelet.admission_blocked", {
        "pending_pods": ["%s/%s" % (p.get("namespace"), p.get("name")) for p in stuck],
        "oldest_pending_seconds": max([_num(p.get("pending_seconds")) for p in stuck] or [0]),
        "threshold_seconds": pending_threshold_s,
        "kubelet_log_unanswered_allocations": log_hits,
    }, remediation={"summary": "fix the hung device plugin (known-bad driver upgrade), then restart kubelet",
                    "vars": {"kubegpu_kubelet_restart": True}})]


def rule_memory(ctx, min_fraction):
    kl = _d(ctx.get("kubelet"))
    mem = _d(kl.get("memory"))
    if not kl or not mem or kl.get("config_error"):
        return []  # nothing trustworthy to compare (no kubelet config read)
    out = []
    reserved = _num(mem.get("reserved_total_bytes"))
    recommended = _num(mem.get("recommended_reserved_bytes"), None)
    if recommended and reserved < recommended * min_fraction:
        out.append(finding("kubelet.memory_reservation", {
            "node_memory_bytes": kl.get("node_memory_bytes"), "reserved_bytes": reserved,
            "recommended_reserved_bytes": recommended, "rule": "GKE ladder",
        }, remediation={"summary": "set systemReserved/kubeReserved memory from the GKE ladder and a complete "
                                   "evictionHard"}))
    if mem.get("eviction_hard_partial"):
        out.append(finding("kubelet.eviction_hard_partial", {"eviction_hard": mem.get("eviction_hard")},
                           remediation={"summary": "write evictionHard completely"}))
    return out


def rule_api_node(ctx):
    api = _d(ctx.get("api"))
    if api.get("ready") is False:
        return [finding("node.not_ready", {"conditions": api.get("conditions")},
                        remediation={"summary": "investigate kubelet on the node"})]
    return []
