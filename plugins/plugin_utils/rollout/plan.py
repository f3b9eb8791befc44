# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rollout plan of kubegpu.fleet.rolling_reboot: which targets take part, in which order, and
the batch sizes of the play (``serial`` for budgeted batches, the sliding window for ``strategy:
free``). The ``kubegpu.fleet.rollout_plan`` filter calls :func:`plan_from_hosts` on localhost."""
from __future__ import annotations

import math

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.rollout import gpu_nodes


def _max_parallel(value):
    try:
        count = int(value)
    except (TypeError, ValueError):
        raise gpu_nodes.RolloutError("max_parallel must be an integer (0 = only the budget limits), got %r" % (value,))
    if count < 0:
        raise gpu_nodes.RolloutError("max_parallel must not be negative, got %r" % (value,))
    return count


def nothing_to_do(need):
    """Why a node whose need was checked before the plan needs no maintenance, else None.

    ``need`` is the host fact need.yml sets (``reboot``, ``resume``, ``pending_reasons``, ``mode``);
    only a record made for this plan (``planned`` true) counts.
    """
    if not isinstance(need, dict) or not need.get("planned") or need.get("reboot") or need.get("resume"):
        return None
    pending = need.get("pending_reasons") or []
    if pending:
        return "nothing to do: kubegpu_reboot=%s holds back a reboot (%s)" % (need.get("mode"), "; ".join(pending))
    return "nothing to do: no reboot pending, no maintenance left open"


def sliding_batches(count, forks):
    """Play batches for the sliding window (``strategy: free``): every node of a batch gets its slot
    as soon as one frees, so only a batch boundary waits for the slowest node. A batch never has
    more hosts than Ansible has forks: a host waiting for its slot holds a worker, and the hosts
    holding slots must always find one free for their next task."""
    if not count:
        return [1]
    size = count if not forks or int(forks) <= 0 else min(count, int(forks))
    return [size] * int(math.ceil(count / float(size)))


def plan_rollout(nodes, targets, max_unavailable="25%", max_parallel=1, skip_label=gpu_nodes.DEFAULT_SKIP_LABEL, needs=None,
                 forks=None):
    """Order the targets and size the batches.

    ``targets``: list of ``{"host": inventory name, "node": Kubernetes node name}``, of
    ``[host, node]`` pairs (node None = the host name) or of plain names. ``needs``: host ->
    need.yml's record when it ran before the plan; hosts that need nothing are left out (they
    take no batch). Returns the plan; raises gpu_nodes.RolloutError when no budget is left.
    """
    by_name = dict((gpu_nodes.node_name(n), n) for n in nodes or [])
    gpu_total = sum(1 for n in nodes or [] if gpu_nodes.is_gpu_node(n))
    limit = gpu_nodes.scaled_max_unavailable(max_unavailable, gpu_total)
    parallel = _max_parallel(max_parallel)
    unavailable = gpu_nodes.unavailable_gpu_nodes(nodes)
    budget = limit - len(unavailable)

    seen = set()
    free, costly, skipped = [], [], []
    for index, target in enumerate(targets or []):
        if isinstance(target, dict):
            host = target.get("host") or target.get("node")
            name = target.get("node") or host
        elif isinstance(target, (list, tuple)) and target:
            host = target[0]
            name = (target[1] if len(target) > 1 else None) or host
        else:
            host = name = str(target)
        if not host or host in seen:
            continue
        seen.add(host)
        node = by_name.get(name)
        entry = {"host": host, "node": name, "index": index}
        idle = nothing_to_do((needs or {}).get(host))
        if node is None:
            skipped.append(dict(entry, reason="no Node %s in the cluster" % name))
        elif idle:
            skipped.append(dict(entry, reason=idle))
        elif gpu_nodes.has_label(node, skip_label):
            skipped.append(dict(entry, reason="labelled %s" % skip_label))
        elif not gpu_nodes.is_gpu_node(node):
            skipped.append(dict(entry, reason="not a GPU node (no %s=true label, no nvidia.com/* resources)"
                                % gpu_nodes.GPU_PRESENT_LABEL))
        elif name in unavailable:
            free.append(dict(entry, unavailable=unavailable[name]))
        else:
            costly.append(dict(entry, unavailable=None))
    ordered = free + costly
    for item in ordered + skipped:
        item.pop("index", None)

    names = ", ".join("%s (%s)" % (k, unavailable[k]) for k in sorted(unavailable)) or "none"
    if ordered and budget <= 0 and not free:
        raise gpu_nodes.RolloutError(
            "no disruption budget left: max_unavailable %s = %d of %d GPU nodes, and %d GPU node(s) are already "
            "unavailable: %s. Bring them back or raise kubegpu_max_unavailable."
            % (max_unavailable, limit, gpu_total, len(unavailable), names))

    # Nodes already unavailable cost nothing: with no budget left only they can go first.
    batch_size = max(1, min(parallel, budget) if parallel else budget) if ordered else 0
    # Batch sizes for the play's ``serial`` list: a node already unavailable costs no budget
    # (it stays counted either way), the others one each; max_parallel caps every batch.
    serial = []
    rest = list(ordered)
    while rest:
        size = cost = 0
        for item in rest:
            extra = 0 if item["unavailable"] else 1
            if (parallel and size >= parallel) or cost + extra > max(budget, 0):
                break
            size += 1
            cost += extra
        size = max(size, 1)
        serial.append(size)
        rest = rest[size:]
    out = {
        "gpu_nodes": gpu_total,
        "max_unavailable": max_unavailable,
        "limit": limit,
        "max_parallel": parallel,
        "unavailable": unavailable,
        "budget": budget,
        "batch_size": batch_size,
        "serial": serial or [1],
        "window": sliding_batches(len(ordered), forks),
        "forks": forks,
        "targets": ordered,
        "hosts": [t["host"] for t in ordered],
        "skipped": skipped,
        "msg": ("%d target(s) in %d budgeted batch(es) %s; %d skipped; %d of %d GPU nodes already unavailable (%s), "
                "limit %d" % (len(ordered), len(serial), serial, len(skipped), len(unavailable), gpu_total,
                              names, limit)),
        "report": [
            None,
            "order: %s" % (", ".join(t["node"] for t in ordered) or "none"),

            "skipped: %s" % ("; ".join("%s: %s" % (t["node"], t["reason"]) for t in skipped) or "none"),
            "sliding window: play batches %s (each node starts when a slot of the budget frees; a batch holds "
            "at most forks=%s hosts)" % (sliding_batches(len(ordered), forks), forks if forks else "unknown"),
        ],
    }
    out["report"][0] = out["msg"]
    return out


def plan_from_hosts(nodes, hosts, hostvars, max_unavailable="25%", max_parallel=1, skip_label=gpu_nodes.DEFAULT_SKIP_LABEL,
                    forks=None):
    """:func:`plan_rollout` for inventory hosts: each host's ``kubegpu_node_name`` and its need
    record (``kubegpu_rolling_reboot_need``, when the ``need`` entry point ran for this plan) are
    read from ``hostvars``."""
    if isinstance(hosts, str):
        hosts = [hosts]
    targets, needs = [], {}
    for host in hosts or []:
        try:
            hv = hostvars[host]
        except (KeyError, TypeError):
            hv = {}
        try:
            name = hv.get("kubegpu_node_name") or host
            need = hv.get("kubegpu_rolling_reboot_need")
        except AttributeError:
            name, need = host, None
        targets.append({"host": host, "node": str(name)})
        if isinstance(need, dict):
            needs[host] = dict(need)
    return plan_rollout(nodes, targets, max_unavailable, max_parallel, skip_label, needs, forks)
