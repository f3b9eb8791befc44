# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Rolling maintenance of GPU nodes: the pure decisions behind kubegpu.fleet.rolling_reboot.

Input is what ``kubernetes.core.k8s_info`` returns (plain dicts) and what
``kubegpu.fleet.gpu_facts`` gathers. Nothing here talks to a cluster or a node; the role's
tasks do, and call these functions through the ``kubegpu.fleet.rollout_decide`` action (and the
``kubegpu.fleet.rollout_plan``/``rollout_leftover`` filters). Whether a node needs a reboot is
plugin_utils/rollout/reboot_need.py.

The budget follows the GPU Operator's driver upgrade controller (k8s-operator-libs
``pkg/upgrade``): ``maxUnavailable`` is a count or a percentage of the GPU nodes, percentages
ROUNDED UP, and nodes that are already cordoned or not Ready count against it.
"""
from __future__ import annotations

import json
import math
import re
import time

from ansible_collections.kubegpu.fleet.plugins.plugin_utils import labels as label_selector, parse_bound

GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
RESOURCE_PREFIX = "nvidia.com/"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
DEFAULT_SKIP_LABEL = "kubegpu.io/maintenance=skip"
MIG_STRATEGIES = ("none", "single", "mixed")
TERMINAL_PHASES = ("Succeeded", "Failed")

_PERCENT_RE = re.compile(r"^\s*(\d+)\s*%\s*$")
_INT_RE = re.compile(r"^\s*(\d+)\s*$")


class RolloutError(ValueError):
    """An input the rollout cannot work with, or a rollout that must not start."""


# --------------------------------------------------------------------------------- nodes

def _meta(obj):
    return (obj or {}).get("metadata") or {}


def node_name(node):
    return _meta(node).get("name")


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
    labels = _meta(node).get("labels") or {}
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


def parse_label(selector):
    """``key=value`` or ``key`` (exists) -> (key, value or None); the one parser (plugin_utils/labels.py)."""
    try:
        return label_selector.parse_selector(selector)
    except label_selector.LabelError as exc:
        raise RolloutError(str(exc))


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


def _max_parallel(value):
    try:
        count = int(value)
    except (TypeError, ValueError):
        raise RolloutError("max_parallel must be an integer (0 = only the budget limits), got %r" % (value,))
    if count < 0:
        raise RolloutError("max_parallel must not be negative, got %r" % (value,))
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


def plan_rollout(nodes, targets, max_unavailable="25%", max_parallel=1, skip_label=DEFAULT_SKIP_LABEL, needs=None,
                 forks=None):
    """Order the targets and size the batches.

    ``targets``: list of ``{"host": inventory name, "node": Kubernetes node name}``, of
    ``[host, node]`` pairs (node None = the host name) or of plain names. ``needs``: host ->
    need.yml's record when it ran before the plan; hosts that need nothing are left out (they
    take no batch). Returns the plan; raises RolloutError when no budget is left.
    """
    by_name = dict((node_name(n), n) for n in nodes or [])
    gpu_total = sum(1 for n in nodes or [] if is_gpu_node(n))
    limit = scaled_max_unavailable(max_unavailable, gpu_total)
    parallel = _max_parallel(max_parallel)
    unavailable = unavailable_gpu_nodes(nodes)
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
        elif has_label(node, skip_label):
            skipped.append(dict(entry, reason="labelled %s" % skip_label))
        elif not is_gpu_node(node):
            skipped.append(dict(entry, reason="not a GPU node (no %s=true label, no nvidia.com/* resources)"
                                % GPU_PRESENT_LABEL))
        elif name in unavailable:
            free.append(dict(entry, unavailable=unavailable[name]))
        else:
            costly.append(dict(entry, unavailable=None))
    ordered = free + costly
    for item in ordered + skipped:
        item.pop("index", None)

    names = ", ".join("%s (%s)" % (k, unavailable[k]) for k in sorted(unavailable)) or "none"
    if ordered and budget <= 0 and not free:
        raise RolloutError(
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


# --------------------------------------------------------------------------------- drain

def _owner_kinds(pod):
    return [o.get("kind") for o in _meta(pod).get("ownerReferences") or []]


def _pod_ref(pod):
    meta = _meta(pod)
    return "%s/%s" % (meta.get("namespace", "default"), meta.get("name"))


def leftover_pods(pods, accept_terminating=False):
    """Classify the pods still bound to a drained node.

    DaemonSet pods, mirror (static) pods and finished pods do not block. A pod that was
    evicted or deleted (``deletionTimestamp`` set) but is still there blocks unless
    ``accept_terminating`` (a wedged kubelet never confirms deletions); a pod never evicted
    always blocks.
    """
    out = {"blocking": [], "terminating": [], "accepted": [], "ignored": []}
    for pod in pods or []:
        meta = _meta(pod)
        ref = _pod_ref(pod)
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
        pods = [p for p in pods or [] if _pod_ref(p) in wanted]
    out = []
    for pdb in pdbs or []:
        meta = _meta(pdb)
        covered = [_pod_ref(p) for p in pods or []
                   if _meta(p).get("namespace", "default") == meta.get("namespace", "default")
                   and _selector_matches((pdb.get("spec") or {}).get("selector"), _meta(p).get("labels") or {})]
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


# ----------------------------------------------------------------------------- validate

def expected_resources(nvidia, strategy="none"):
    """The ``nvidia.com/*`` resources the NVIDIA device plugin advertises for the GPUs in
    ``nvidia`` (gpu_facts' ``ansible_facts.nvidia``) under its MIG strategy; None when the
    strategy cannot serve this layout (``single`` with some GPUs in MIG mode and some not)."""
    strategy = str(strategy or "none").lower()
    if strategy not in MIG_STRATEGIES:
        raise RolloutError("unknown MIG strategy %r (none, single, mixed)" % strategy)
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
    return dict((k, parse_count(v)) for k, v in (resources or {}).items()
                if str(k).startswith(RESOURCE_PREFIX) and parse_count(v))


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
                    strategies[_meta(ds).get("name")] = env.get("value")
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
            for owner in _meta(pod).get("ownerReferences") or []:
                if owner.get("kind") == "DaemonSet" and owner.get("name") in strategies:
                    strategy = strategies[owner["name"]]
        status = pod.get("status") or {}
        ready = any(c.get("type") == "Ready" and str(c.get("status")) == "True"
                    for c in status.get("conditions") or [])
        return {"found": True, "pod": _pod_ref(pod), "phase": status.get("phase"),
                "ready": ready and not _meta(pod).get("deletionTimestamp"),
                "running": status.get("phase") == "Running" and not _meta(pod).get("deletionTimestamp"),
                "mig_strategy": (strategy or "none").lower()}
    return {"found": False, "pod": None, "phase": None, "ready": False, "running": False, "mig_strategy": "none"}


# --------------------------------------------------------------------- node annotation

def maintenance_annotation(record):
    """The ``kubegpu.io/maintenance`` annotation value for a maintenance record (stable JSON)."""
    keep = ("was_unschedulable", "boot_id", "allocatable", "started", "by")
    return json.dumps(dict((k, record.get(k)) for k in keep if k in record), sort_keys=True, separators=(",", ":"))


def parse_maintenance_annotation(text):
    """The record persisted on the Node, or None when absent or unreadable."""
    if not text:
        return None
    try:  # the Node's own credentials can write its annotations: node data, parsed under the bound
        data = parse_bound.load_json(text, "the maintenance annotation")
    except parse_bound.ParseError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("was_unschedulable"), bool):
        return None
    return data


def parse_failure_annotation(text):
    """The failure record (``kubegpu.io/maintenance-failed``) on a Node, or None when absent or unreadable."""
    if not text:
        return None
    try:  # node-writable, as the maintenance annotation
        data = parse_bound.load_json(text, "the maintenance-failed annotation")
    except parse_bound.ParseError:
        return None
    return data if isinstance(data, dict) else None


# ----------------------------------------------------------------- the role's decisions
# Each function below is one step of kubegpu.fleet.rolling_reboot, called through the
# kubegpu.fleet.rollout_decide action: the role's tasks only wire inputs and outputs.

ROLE = "kubegpu.fleet.rolling_reboot"


def _record_from(node, saved, now):
    return {
        "active": True, "drained": False, "node": node_name(node),
        "was_unschedulable": (saved["was_unschedulable"] if saved
                              else bool(((node or {}).get("spec") or {}).get("unschedulable"))),
        "boot_id": (((node or {}).get("status") or {}).get("nodeInfo") or {}).get("bootID") or "",
        "allocatable": (saved.get("allocatable") or {}) if saved else gpu_resources(node),
        "started": saved.get("started", int(now)) if saved else int(now),
        "resumed": bool(saved), "rebooted": False, "terminating_accepted": [],
    }


def start_maintenance(node, name, maintenance=None, annotation="kubegpu.io/maintenance",
                      skip_label=DEFAULT_SKIP_LABEL, drain_timeout=600, now=0):
    """Before the cordon: does the Node exist, does the skip label keep us away, is a maintenance
    already running (active and drained: nothing to start), and the record of the node's state
    before maintenance (from the annotation an earlier run left, else from the Node now).

    Returns ``{exists, skip, already, cordon, record, annotations, drain_deadline, msg}``
    (``cordon``: the budget wait, cordon and drain are to run); ``annotations``
    is what the cordon patch writes (nothing when the annotation is there already)."""
    maintenance = maintenance if isinstance(maintenance, dict) else {}
    out = {"exists": bool(node), "skip": False, "already": False, "cordon": False, "record": maintenance,
           "annotations": {}, "drain_deadline": int(now) + int(drain_timeout)}
    if not node:
        out["msg"] = "no Node %s in the cluster (set kubegpu_node_name for this host)" % name
        return out
    if has_label(node, skip_label):
        out.update(skip=True, msg="%s is labelled %s: not cordoned, drained, rebooted or changed" % (name, skip_label))
        return out
    if maintenance.get("active") and maintenance.get("drained"):
        out.update(already=True, msg="%s: maintenance already running and drained" % name)
        return out
    annotations = ((node.get("metadata") or {}).get("annotations")) or {}
    saved = parse_maintenance_annotation(annotations.get(annotation, ""))
    record = _record_from(node, saved, now)
    out["record"] = record
    out["cordon"] = True
    if not saved:
        out["annotations"] = {annotation: maintenance_annotation(dict(record, by=ROLE))}
    out["msg"] = "%s: cordon and drain (cordoned before: %s%s)" % (
        name, record["was_unschedulable"], ", resuming the maintenance recorded on the Node" if saved else "")
    return out


def drain_verdict(name, pods, accept_terminating=False, pdbs=None, maintenance=None, timeout=None,
                  pods_error=None, evict_error=None, wedged=False):
    """After the eviction: are only DaemonSet, mirror and finished pods left? Returns ``{ok,
    leftover, record, msg}``; ``record`` is the maintenance record marked drained (when ok)."""
    leftover = leftover_pods(pods, accept_terminating) if pods_error is None else {
        "ok": False, "blocking": [], "terminating": [], "accepted": [], "ignored": []}
    record = dict(maintenance or {})
    accepted = [p["pod"] for p in leftover["accepted"]]
    if pods_error is None and leftover["ok"]:
        record.update(drained=True, terminating_accepted=accepted)
        msg = "%s drained" % name
        if accepted:
            msg += ("; %s were evicted but are still Terminating (kubelet %s), accepted because %s is true"
                    % (", ".join(accepted), "wedged" if wedged else "slow",
                       "kubegpu_node_wedged" if wedged else "kubegpu_drain_accept_terminating"))
        return {"ok": True, "leftover": leftover, "record": record, "msg": msg}
    blocking = [p["pod"] for p in leftover["blocking"]]
    why = pods_error if pods_error is not None else drain_report(
        leftover, pdbs_for_pods(pods, pdbs, blocking) if pdbs else None)
    msg = "drain of %s did not finish within kubegpu_drain_timeout=%s s: %s." % (name, timeout, why)
    if evict_error:
        msg += " Last eviction error: %s." % evict_error
    msg += " The node stays cordoned and the rollout stops."
    return {"ok": False, "leftover": leftover, "record": record, "msg": msg}


def validation_verdict(name, checks, api, driver_version="", timeout=None, maintenance=None, reboot=None):
    """Is the node fit for GPU work again? ``checks``: kubegpu.fleet.rollout_node_check's result
    (NVML probe, driver, module, checkpoint); ``api``: kubegpu.fleet.node_maintenance
    ``state=validated``'s result (plugin pod, allocatable). ``reboot``: the Ready wait after the
    reboot, when the node was rebooted (recorded). Returns ``{ok, validation, reasons, record, msg}``."""
    checks = checks if isinstance(checks, dict) else {}
    api = api if isinstance(api, dict) else {}
    nvidia = checks.get("nvidia") or {}
    probe = (nvidia.get("probe") or {}).get("status") or ("failed" if checks else "not run")
    installed = nvidia.get("driver_version")
    plugin = api.get("plugin") or {"found": False, "pod": None, "phase": None, "ready": False, "running": False}
    resources = api.get("resources") or {"ok": False, "rule": None,
                                         "msg": api.get("msg") or "the API wait did not run"}
    validation = {
        "probe": probe,
        "probe_error": (nvidia.get("probe") or {}).get("error") or checks.get("msg"),
        "driver_version": installed,
        "driver_ok": not driver_version or installed == driver_version,
        "reboot_pending": checks.get("reboot_pending"),
        "checkpoint_stale": checks.get("checkpoint_stale"),
        "checkpoint_stale_ids": checks.get("checkpoint_stale_ids") or [],
        "plugin": plugin, "resources": resources,
    }
    reasons = []
    if probe != "ok":
        reasons.append("NVML probe %s: %s" % (probe, validation["probe_error"]))
    if not validation["driver_ok"]:
        reasons.append("driver %s is not %s" % (installed, driver_version))
    if validation["reboot_pending"] is not False:
        reasons.append("installed driver and loaded kernel module differ (reboot_pending %s)"
                       % validation["reboot_pending"])
    if validation["checkpoint_stale"] is not False:
        reasons.append("kubelet checkpoint stale or unchecked: %s" % ", ".join(validation["checkpoint_stale_ids"]))
    if not plugin.get("ready"):
        reasons.append("device plugin pod %s not Ready (phase %s)" % (plugin.get("pod") or "(none)", plugin.get("phase")))
    if not resources.get("ok"):
        reasons.append(str(resources.get("msg")))
    record = dict(maintenance or {})
    if isinstance(reboot, dict) and reboot.get("boot_id"):
        record.update(rebooted=True, new_boot_id=reboot.get("boot_id"), reboot_reasons=reboot.get("reasons") or [])
    record["validation"] = validation
    if reasons:
        msg = "%s did not validate within kubegpu_validate_timeout=%s s: %s" % (name, timeout, "; ".join(reasons))
    else:
        msg = ("%s validated: NVML ok, driver %s, checkpoint current, plugin %s Ready, %s (rule %s)"
               % (name, installed, plugin.get("pod"), resources.get("msg"), resources.get("rule")))
    return {"ok": not reasons, "validation": validation, "reasons": reasons, "record": record, "msg": msg}


def uncordon_decision(name, maintenance=None, node=None, annotation="kubegpu.io/maintenance", now=0):
    """May the node be made schedulable? Only when it was schedulable before the maintenance (the
    host fact, else the annotation on the Node). Returns ``{known, was_unschedulable, source,
    uncordon, record, msg}``; ``record`` is the closed maintenance record."""
    maintenance = dict(maintenance) if isinstance(maintenance, dict) else {}
    if "was_unschedulable" in maintenance:
        known, was, source = True, bool(maintenance["was_unschedulable"]), "host fact"
    else:
        annotations = (((node or {}).get("metadata") or {}).get("annotations")) or {}
        saved = parse_maintenance_annotation(annotations.get(annotation, ""))
        known, was, source = (True, saved["was_unschedulable"], "annotation") if saved else (False, None, None)
    uncordon = known and not was
    if uncordon:
        msg = "%s uncordoned (it was schedulable before the maintenance, %s)" % (name, source)
    elif known:
        msg = ("%s stays cordoned: it was cordoned before the maintenance (%s), so an operator uncordons it"
               % (name, source))
    else:
        msg = ("%s stays cordoned: no record of its state before maintenance (no kubegpu_maintenance fact, no %s "
               "annotation)" % (name, annotation))
    record = dict(maintenance, active=False, drained=False, finished=int(now), uncordoned=uncordon)
    return {"known": known, "was_unschedulable": was, "source": source, "uncordon": uncordon, "record": record,
            "msg": msg}


def failure_record(name, maintenance=None, reason=None, task=None, now=0, cordon=None, uncordon_failed=False,
                   run=None):
    """Why the maintenance failed and whether the role had started one on the Node (then the
    failure is written there and the node stays cordoned).

    ``cordon``: the cordon patch's registered result in this play ({} when it did not run). A
    record made for this run whose cordon never went through (the budget wait or the patch
    failed) started nothing; one resumed from the Node's annotation, or already drained, did.
    ``uncordon_failed``: the closing patch failed, so the node is still in maintenance."""
    maintenance = dict(maintenance) if isinstance(maintenance, dict) else {}
    cordon = cordon if isinstance(cordon, dict) else {}
    reason = str(reason or "").strip() or "maintenance failed"
    failure = {"reason": reason, "task": str(task or ""),
               "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)), "by": ROLE}
    if run:   # the runner (kubegpu.fleet.rollout_slot's run id): its other nodes start no more
        failure["run"] = str(run)
    cordoned = bool(cordon) and not cordon.get("failed") and not cordon.get("skipped")
    active = bool(maintenance.get("active")) and (
        bool(maintenance.get("resumed")) or bool(maintenance.get("drained")) or cordoned)
    if uncordon_failed:
        active = True
    where = (' in "%s"' % failure["task"]) if failure["task"] else ""
    msg = "maintenance of %s failed%s: %s. %s" % (
        name, where, reason,
        "The node stays cordoned; the reason is in its kubegpu.io/maintenance-failed annotation." if active
        else "The node was not cordoned by this run.")
    record = dict(maintenance, active=active, failed=failure)
    return {"failure": failure, "active": active, "record": record, "msg": msg}


def plan_from_hosts(nodes, hosts, hostvars, max_unavailable="25%", max_parallel=1, skip_label=DEFAULT_SKIP_LABEL,
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
