# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rollout's disruption budget held in the cluster: slots as ``coordination.k8s.io/v1`` Leases.

Pure decisions on the Lease and Node objects the API returns (plain dicts); the requests are
plugin_utils/rollout/slot.py's. kured's lock is the model (one lock every runner obeys, with a
TTL so a dead holder never wedges the fleet); the slots are Leases so that each holder renews its
own object with the fields Kubernetes defines for that (``holderIdentity``,
``leaseDurationSeconds``, ``acquireTime``, ``renewTime``, ``leaseTransitions``).

* A pool (``kubegpu_rollout_pool``, default ``kubegpu-rollout``) owns the Leases
  ``<pool>-slot-0`` .. ``<pool>-slot-<limit-1>`` in one namespace. A runner (one
  ``ansible-playbook`` process: an AWX slice, a scheduled job, a person's run) takes the lowest
  free index with a create (409 when another runner was first) or, for an expired Lease, an
  update guarded by the resourceVersion it read (409 when another runner renewed or took it);
  every runner picks the lowest free index from what it read, so two that read the same state
  collide on the same name and only one wins.
* ``max_unavailable`` counts the slots held plus the GPU nodes unavailable (cordoned, not
  Ready) for another reason, as the GPU Operator's upgrade controller counts them: a node in a
  held slot is counted once. A node already unavailable costs no budget when it takes a slot.
* A Lease is expired when its holder's ``renewTime`` is older than ``leaseDurationSeconds``
  plus the clock skew allowed between runners, or when this runner has itself watched it stay
  unchanged (the same resourceVersion) for ``leaseDurationSeconds`` on its own monotonic clock
  (client-go's leader election judges expiry so; it is immune to skew).
* A Lease of the pool that is not well formed (no holder of this collection's shape, no node,
  a bad duration or time) or that another tool created under the pool's name counts as a held
  slot and is never taken over: the runner waits, and says which Lease to look at.
"""
from __future__ import annotations

import calendar
import re
import time

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.rollout import gpu_nodes, record as maintenance_record

POOL_LABEL = "kubegpu.io/rollout-pool"
NODE_ANNOTATION = "kubegpu.io/rollout-node"
HOLDER_PREFIX = "kubegpu.fleet/"
DEFAULT_POOL = "kubegpu-rollout"
MAX_DURATION = 86400

_POOL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$")
_TIME_RE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$")

FREE, HELD, EXPIRED, MALFORMED, FOREIGN = "free", "held", "expired", "malformed", "foreign"


class LeaseError(ValueError):
    """A setting the budget cannot work with."""


def check_pool(pool):
    pool = str(pool or "")
    if not _POOL_RE.match(pool):
        raise LeaseError("the rollout pool %r must be a lowercase DNS label of at most 40 characters (it names "
                         "the Leases <pool>-slot-N and labels them)" % pool)
    return pool


def slot_name(pool, index):
    return "%s-slot-%d" % (pool, int(index))


def slot_index(pool, name):
    """The index of a Lease named ``<pool>-slot-N``, else None."""
    prefix = pool + "-slot-"
    rest = str(name or "")[len(prefix):] if str(name or "").startswith(prefix) else ""
    if rest.isdigit() and rest.isascii() and (rest == "0" or not rest.startswith("0")) and len(rest) <= 6:
        return int(rest)
    return None


def micro_time(ts):
    """A Lease MicroTime (RFC 3339, microseconds, UTC)."""
    whole = int(ts)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + ".%06dZ" % int(round((ts - whole) * 1e6) % 1000000)


def parse_time(text):
    """Seconds since the epoch of an RFC 3339 time (``Z`` or an offset), else None."""
    match = _TIME_RE.match(str(text or "")) if isinstance(text, str) else None
    if not match:
        return None
    year, month, day, hour, minute, second = (int(match.group(i)) for i in range(1, 7))
    try:
        ts = calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0))
    except (ValueError, OverflowError):
        return None
    if not (1 <= month <= 12 and 1 <= day <= 31 and hour < 24 and minute < 60 and second < 61):
        return None
    fraction = match.group(7)
    if fraction:
        ts += float("0" + fraction)
    zone = match.group(8)
    if zone != "Z":
        sign = 1 if zone[0] == "+" else -1
        ts -= sign * (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60)
    return ts


def slot_view(lease, pool, now, skew=30.0, unchanged_for=None):
    """What a pool's Lease says: ``{name, index, state, holder, node, renewed, duration, age,
    resource_version, transitions, problem, note}``.

    ``state``: ``free`` (released in place: no holder), ``held``, ``expired``, ``malformed`` or
    ``foreign`` (the last two count as held and are never taken over). ``unchanged_for``: seconds
    this runner has seen the Lease at the same resourceVersion (its own clock), or None."""
    meta = gpu_nodes.object_meta(lease)
    name = meta.get("name")
    spec = lease.get("spec") if isinstance(lease, dict) and isinstance(lease.get("spec"), dict) else {}
    labels = meta.get("labels") if isinstance(meta.get("labels"), dict) else {}
    annotations = meta.get("annotations") if isinstance(meta.get("annotations"), dict) else {}
    out = {"name": name, "index": slot_index(pool, name), "state": HELD, "holder": None, "node": None,
           "renewed": None, "duration": None, "age": None, "resource_version": meta.get("resourceVersion"),
           "transitions": spec.get("leaseTransitions") if isinstance(spec.get("leaseTransitions"), int) else 0,
           "problem": None, "note": None}
    if labels.get(POOL_LABEL) != pool:
        out.update(state=FOREIGN, problem="Lease %s was not written by kubegpu.fleet for the pool %s (no %s=%s "
                   "label); it is counted as a held slot and never changed" % (name, pool, POOL_LABEL, pool))
        return out
    holder = spec.get("holderIdentity")
    if holder in (None, ""):
        out["state"] = FREE
        return out
    problems = []
    if not isinstance(holder, str) or not holder.startswith(HOLDER_PREFIX) or len(holder) > 512:
        problems.append("holderIdentity %r is not a kubegpu.fleet runner" % (holder if isinstance(holder, str)
                                                                             else type(holder).__name__))
    else:
        out["holder"] = holder
    node = annotations.get(NODE_ANNOTATION)
    if not isinstance(node, str) or not node or len(node) > 253:
        problems.append("no %s annotation naming its node" % NODE_ANNOTATION)
    else:
        out["node"] = node
    duration = spec.get("leaseDurationSeconds")
    if isinstance(duration, bool) or not isinstance(duration, int) or not 1 <= duration <= MAX_DURATION:
        problems.append("leaseDurationSeconds %r is not 1..%d" % (duration, MAX_DURATION))
    else:
        out["duration"] = duration
    renewed = parse_time(spec.get("renewTime")) or parse_time(spec.get("acquireTime"))
    if renewed is None:
        problems.append("renewTime %r is not a time" % (spec.get("renewTime"),))
    else:
        out["renewed"] = renewed
    if problems:
        out.update(state=MALFORMED, problem="Lease %s is malformed (%s); it is counted as a held slot and never "
                   "taken over: delete it once no rollout holds it" % (name, "; ".join(problems)))
        return out
    age = now - renewed
    out["age"] = round(age, 3)
    if age > duration + skew:
        out.update(state=EXPIRED, note="Lease %s of %s (node %s) expired: not renewed for %d s (lease %d s + %d s "
                   "allowed clock skew)" % (name, holder, node, age, duration, skew))
    elif unchanged_for is not None and unchanged_for >= duration:
        out.update(state=EXPIRED, note="Lease %s of %s (node %s) expired: unchanged for %d s as this runner saw it "
                   "(lease %d s)" % (name, holder, node, unchanged_for, duration))
    elif age < -skew:
        out["note"] = ("Lease %s was renewed %d s in the future by this runner's clock: the clocks of %s and this "
                       "runner differ; it is held until this runner sees it unchanged for %d s"
                       % (name, -age, holder, duration))
    return out


def budget_view(leases, nodes, pool, max_unavailable, now, skew=30.0, unchanged=None):
    """The budget as the cluster holds it: ``{limit, gpu_nodes, slots, held, holding, other, used, notes}``.

    ``slots``: index -> view of the pool's Leases (names that are no ``<pool>-slot-N`` are left
    out); ``held``: views that occupy budget (held, malformed, foreign); ``holding``: node ->
    view of a held slot; ``other``: GPU nodes unavailable without a slot (name -> reason)."""
    gpu = [n for n in nodes or [] if gpu_nodes.is_gpu_node(n)]
    limit = gpu_nodes.scaled_max_unavailable(max_unavailable, len(gpu))
    unchanged = unchanged or {}
    slots = {}
    for lease in leases or []:
        name = gpu_nodes.object_meta(lease).get("name")
        index = slot_index(pool, name)
        if index is None:
            continue
        slots[index] = slot_view(lease, pool, now, skew, unchanged.get(name))
    held = [v for _i, v in sorted(slots.items()) if v["state"] in (HELD, MALFORMED, FOREIGN)]
    holding = dict((v["node"], v) for v in held if v["state"] == HELD)
    unavailable = gpu_nodes.unavailable_gpu_nodes(nodes)
    other = dict((k, v) for k, v in unavailable.items() if k not in holding)
    notes = [v["problem"] or v["note"] for _i, v in sorted(slots.items()) if v["problem"] or v["note"]]
    return {"limit": limit, "gpu_nodes": len(gpu), "slots": slots, "held": held, "holding": holding,
            "other": other, "used": len(held) + len(other), "notes": notes}


def _describe(view):
    held = ", ".join("%s (%s)" % (v["name"], v["node"] or v["state"]) for v in view["held"]) or "none"
    other = ", ".join("%s (%s)" % (k, view["other"][k]) for k in sorted(view["other"])) or "none"
    return "slots held: %s; unavailable without a slot: %s" % (held, other)


def acquire_decision(view, node, holder, max_parallel=0, ahead=()):
    """May ``holder`` take a slot for ``node`` now? ``{action, index, name, lease, used, limit, msg}``.

    ``max_parallel`` (0: no cap) caps the slots one runner holds at once. ``ahead``: nodes of the
    same run before ``node`` in the plan that have not taken their slot yet (run_queue.ahead):
    the budget must have room for them first, so the run's slots go in plan order.

    ``action``: ``renew`` (this runner holds a slot for the node already), ``create`` (the slot's
    Lease does not exist), ``takeover`` (it is free or expired: update it guarded by ``lease``'s
    resourceVersion) or ``wait``."""
    limit = view["limit"]
    mine = view["holding"].get(node)
    base = {"index": None, "name": None, "lease": None, "used": view["used"], "limit": limit}
    if mine is not None and mine["holder"] == holder:
        return dict(base, action="renew", index=mine["index"], name=mine["name"],
                    msg="%s holds slot %s for %s already" % (holder, mine["name"], node))
    if mine is not None:
        return dict(base, action="wait", msg="%s is in maintenance by %s (Lease %s, renewed %s s ago): waiting for "
                    "it to finish or its Lease to expire" % (node, mine["holder"], mine["name"], mine["age"]))
    own = [v["node"] for v in view["held"] if v["state"] == HELD and v["holder"] == holder]
    first = [a for a in ahead or () if a != node and a not in view["holding"]]
    if max_parallel and len(own) >= int(max_parallel):
        return dict(base, action="wait", msg="%s waits: this runner has %d node(s) in maintenance (%s), "
                    "max_parallel %s" % (node, len(own), ", ".join(sorted(own)), max_parallel))
    if max_parallel and len(own) + len(first) >= int(max_parallel):
        return dict(base, action="wait", msg="%s waits for %s, before it in the plan (max_parallel %s, %d in "
                    "maintenance)" % (node, ", ".join(first), max_parallel, len(own)))
    after = len(view["held"]) + 1 + len([k for k in view["other"] if k != node])
    if after > limit:
        return dict(base, action="wait", msg="no free slot for %s: %d of %d GPU node(s) would be unavailable, "
                    "max_unavailable allows %d (%s)" % (node, after, view["gpu_nodes"], limit, _describe(view)))
    # a node before it that is unavailable already moves from "other" to a slot: it costs nothing
    costly = [a for a in first if a not in view["other"]]
    if after + len(costly) > limit:
        return dict(base, action="wait", msg="%s waits for %s, before it in the plan: %d of %d slot(s) free, "
                    "they take them first (%s)" % (node, ", ".join(first), limit - after + 1, limit, _describe(view)))
    for index in range(limit):
        slot = view["slots"].get(index)
        if slot is None:
            return dict(base, action="create", index=index, name=None,
                        msg="slot %d is free for %s (%d of %d with it)" % (index, node, after, limit))
        if slot["state"] in (FREE, EXPIRED):
            return dict(base, action="takeover", index=index, name=slot["name"], lease=slot,
                        msg="slot %s is %s: taken for %s%s" % (
                            slot["name"], slot["state"], node, " (%s)" % slot["note"] if slot["note"] else ""))
    return dict(base, action="wait", msg="no free slot for %s: every slot Lease below the limit %d is held or "
                "unusable (%s)" % (node, limit, _describe(view)))


def lease_body(pool, index, namespace, holder, node, duration, now, previous=None):
    """The Lease a runner writes to take slot ``index`` (a create, or an update of ``previous``
    guarded by its resourceVersion)."""
    meta = {"name": slot_name(pool, index), "namespace": namespace, "labels": {POOL_LABEL: pool},
            "annotations": {NODE_ANNOTATION: node}}
    transitions = 0
    if previous is not None:
        pmeta = gpu_nodes.object_meta(previous)
        meta["resourceVersion"] = pmeta.get("resourceVersion")
        spec = previous.get("spec") if isinstance(previous.get("spec"), dict) else {}
        old = spec.get("leaseTransitions") if isinstance(spec.get("leaseTransitions"), int) else 0
        transitions = old + (1 if spec.get("holderIdentity") not in (None, "", holder) else 0)
    stamp = micro_time(now)
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta,
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": int(duration), "acquireTime": stamp,
                     "renewTime": stamp, "leaseTransitions": transitions}}


def renewed_body(lease, now):
    """``lease`` with ``renewTime`` set to ``now`` (sent with its resourceVersion: a PUT that fails
    with 409 when anything changed it since)."""
    out = dict(lease)
    out["spec"] = dict(lease.get("spec") or {}, renewTime=micro_time(now))
    return out


def owned_by(lease, pool, holder, node):
    """Is ``lease`` this runner's slot for ``node``?"""
    meta = gpu_nodes.object_meta(lease)
    spec = lease.get("spec") if isinstance(lease, dict) and isinstance(lease.get("spec"), dict) else {}
    return ((meta.get("labels") or {}).get(POOL_LABEL) == pool and spec.get("holderIdentity") == holder
            and (meta.get("annotations") or {}).get(NODE_ANNOTATION) == node)


def rivals(view, node, holder, mine):
    """Other valid slots that name ``node`` (two runners acquired it at once): the views."""
    return [v for v in view["held"] if v["state"] == HELD and v["node"] == node and v["name"] != mine
            and v["holder"] != holder]


def run_failures(nodes, run, annotation="kubegpu.io/maintenance-failed"):
    """Nodes whose maintenance failed in the run ``run`` (the failure annotation names it)."""
    out = []
    for node in nodes or []:
        value = (gpu_nodes.object_meta(node).get("annotations") or {}).get(annotation)
        if not value or run not in str(value):
            continue
        record = maintenance_record.parse_failure_annotation(value)
        if record and record.get("run") == run:
            out.append("%s (%s)" % (gpu_nodes.node_name(node), record.get("reason")))
    return out
