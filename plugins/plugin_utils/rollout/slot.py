# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Take, renew and give back a rollout slot (a ``coordination.k8s.io/v1`` Lease) from the controller.

The decisions are plugin_utils/rollout/lease.py's (which slot, expiry, the budget) and
plugin_utils/rollout/gates.py's (windows, alerts); this module makes the requests through the
collection's one Kubernetes layer (plugin_utils/k8s) and keeps the hold alive:

* ``acquire`` waits (polling, up to a deadline) until the gates are open and a slot is free, then
  creates or takes over its Lease; a write another runner won (409) is re-read at once. After the
  write it reads the pool again: when another runner took a slot for the same node at the same
  moment, this runner gives its own back and waits (at most one of two keeps the node).
* ``release`` deletes this runner's Lease, guarded by the resourceVersion it read.
* A renewer process keeps the Lease's ``renewTime`` fresh while the ``ansible-playbook`` process
  that took it lives (each run is one runner; its id names the controller host, the process id
  and its start time). It runs in a session of its own, so the end of an Ansible task worker does
  not end it; it gives the slot back as soon as that process is gone (a cancelled AWX job, a
  killed terminal), stops when the Lease is no longer this runner's (released, taken over) and
  after ``max_hold`` seconds in any case. If the renewer itself is killed with the job, the Lease
  expires after its duration: a dead runner never wedges the fleet.
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import random
import signal
import socket
import tempfile
import time

from ansible_collections.kubegpu.fleet.plugins.module_utils._common.safe_io import UnsafeInput, check_timeout
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.action import runner
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.k8s import action as k8s_action
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.k8s import client as k8s_client
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.k8s import service
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.rollout import gates as rollout_gates, gpu_nodes, node_api
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.rollout import lease as rollout_lease
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.rollout import run_queue

LEASES = ("coordination.k8s.io/v1", "leases")
K8sError = k8s_client.K8sError
# The slot wait polls every ``poll`` s +- 25 %. A watch on the Leases would hand a freed slot over
# at once; measured (bench/rollout_window.py, docs/benchmarks.md) the polled handover costs about
# half a poll interval per node (0.5 to 0.7 s mean at 1 s), 2 % of a rollout of nodes that take a
# minute and well under 1 % at real reboot times, so the wait polls (docs/rolling-reboot-budget.md).
POLL_JITTER = 0.25
# How long a node waits for a node before it in the plan that has not reached its slot wait (its
# host is on an earlier task; the play batch never holds more hosts than forks, so it has a
# worker): past it that node is taken as gone (its host failed before the slot wait) and the
# order is kept among the others. The budget holds either way.
ARRIVAL_GRACE = 120.0
RBAC_HINT = ("the runner's identity needs get, list, create, update and delete on coordination.k8s.io leases in "
             "the namespace %s (docs/rolling-reboot-budget.md)")


# ------------------------------------------------------------------------------- identity

def process_start(pid):
    """The start time of process ``pid`` (clock ticks since boot, /proc/<pid>/stat field 22), or
    None where /proc does not say (then only the pid identifies the process)."""
    try:
        with open("/proc/%d/stat" % int(pid), "rb") as fh:
            data = fh.read(4096)
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: fields start after the last ')'
    rest = data[data.rfind(b")") + 2:].split()
    try:
        return int(rest[19])
    except (IndexError, ValueError):
        return None


def alive(pid, start):
    """Is the process ``pid`` (started at ``start``, when known) still there?"""
    try:
        os.kill(int(pid), 0)
    except OSError as exc:
        if exc.errno != errno.EPERM:
            return False
    if start is not None:
        now = process_start(pid)
        return now is None or now == start
    return True


def run_identity(pid=None):
    """``(run id, holder identity, (pid, start))`` of the runner: the ``ansible-playbook`` process
    (an action plugin runs in a worker forked from it: its parent)."""
    pid = int(pid or os.getppid())
    start = process_start(pid)
    run = "%s/%d-%s" % (socket.gethostname().split(".")[0][:63] or "controller", pid, start if start is not None else "x")
    return run, rollout_lease.HOLDER_PREFIX + run, (pid, start)


# -------------------------------------------------------------------------------- the API

class SlotApi(object):
    """The reads and writes of the budget, on a k8s.client.Client."""

    def __init__(self, client, namespace):
        self.client = client
        self.namespace = namespace

    def leases(self):
        return service.list_items(self.client, LEASES[0], LEASES[1], namespace=self.namespace,
                                  what="list Leases in %s" % self.namespace)

    def lease(self, name):
        return service.get(self.client, LEASES[0], LEASES[1], name, namespace=self.namespace,
                           what="read Lease %s/%s" % (self.namespace, name))

    def create(self, body):
        return service.create(self.client, LEASES[0], LEASES[1], body, namespace=self.namespace,
                              what="create Lease %s/%s" % (self.namespace, body["metadata"]["name"]))

    def replace(self, body):
        name = body["metadata"]["name"]
        return service.replace(self.client, LEASES[0], LEASES[1], name, body, namespace=self.namespace,
                               what="update Lease %s/%s" % (self.namespace, name))

    def delete(self, name, resource_version):
        return service.delete(self.client, LEASES[0], LEASES[1], name, namespace=self.namespace,
                              resource_version=resource_version,
                              what="delete Lease %s/%s" % (self.namespace, name))

    def nodes(self):
        return service.list_items(self.client, "v1", "nodes", what="list Nodes")


class Stop(Exception):
    """New starts must stop (a refusal that waiting does not cure, a failure of this run)."""


def _refusal(exc, namespace):
    """K8sError -> Stop for what waiting cannot cure (RBAC, a bad request), else None (retry)."""
    if exc.status in (401, 403):
        return Stop("%s; %s" % (exc, RBAC_HINT % namespace))
    if exc.status in (400, 404, 405, 415, 422) and "Lease" in str(exc):
        return Stop("%s (the API refuses coordination.k8s.io/v1 Leases here)" % exc)
    return None


class Tracker(object):
    """How long this runner has seen each Lease at one resourceVersion (its own monotonic clock)."""

    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self.seen = {}

    def update(self, leases):
        now = self.clock()
        out, current = {}, {}
        for lease in leases:
            meta = lease.get("metadata") or {}
            name, rv = meta.get("name"), meta.get("resourceVersion")
            first = self.seen.get(name)
            first = first if first is not None and first[0] == rv else (rv, now)
            current[name] = first
            out[name] = now - first[1]
        self.seen = current
        return out


def gates(windows=None, prometheus=None, now=None, deadline=None, fetch=rollout_gates.fetch_alerts):
    """The window and alert gates at ``now``: ``{open, stop, window, alerts, msg}``; ``stop`` when the
    window does not open before ``deadline`` (epoch seconds)."""
    now = time.time() if now is None else now
    window = rollout_gates.window_check(windows, now)
    out = {"open": True, "stop": False, "window": window, "alerts": None, "msg": window["msg"]}
    if not window["open"]:
        out.update(open=False, msg=window["msg"])
        if deadline is not None and (window["next_open"] is None or window["next_open"] > deadline):
            out["stop"] = True
        return out
    if prometheus and prometheus.get("url"):
        try:
            doc = fetch(prometheus["url"], timeout=prometheus.get("timeout", 10),
                        validate_certs=prometheus.get("validate_certs", True), ca_cert=prometheus.get("ca_cert"))
            alerts = rollout_gates.alerts_check(doc, prometheus.get("filter"), prometheus.get("match_only", False),
                                                prometheus.get("firing_only", False))
        except rollout_gates.GateError as exc:
            alerts = {"ok": False, "blocking": [], "ignored": [], "msg": "alert gate closed: %s" % exc}
        out["alerts"] = alerts
        if not alerts["ok"]:
            out.update(open=False, msg=alerts["msg"])
    return out


class Order(object):
    """The plan's order among this run's waiting hosts (run_queue.py): the batch's nodes in plan
    order and the run's ledger."""

    def __init__(self, queue, ledger, skip_label=gpu_nodes.DEFAULT_SKIP_LABEL):
        self.queue = run_queue.check_queue(queue)
        self.ledger = ledger
        self.skip_label = skip_label


def acquire(api, *, pool, node, holder, run, max_unavailable, duration, max_parallel=0, skew=30.0, timeout=600.0,
            poll=5.0,
            windows=None, prometheus=None, stop_hosts=None, failed_annotation="kubegpu.io/maintenance-failed",
            check_mode=False, started=False, clock=time.monotonic, sleep=time.sleep, wall=time.time,
            fetch=rollout_gates.fetch_alerts, order=None, jitter=random.uniform):
    """:func:`wait_and_take`, with this node's place in the run's order (``order``: an
    :class:`Order`, None for none) recorded: waiting, then granted or stopped."""
    if order is None or started or check_mode or node not in order.queue:
        order = None
    if order is not None:
        order.ledger.mark(node, run_queue.WAITING, order.queue)
        run_queue.prune(os.path.dirname(order.ledger.path), alive, keep=order.ledger.path)
    outcome = run_queue.STOPPED
    try:
        out = wait_and_take(api, pool=pool, node=node, holder=holder, run=run, max_unavailable=max_unavailable,
                            duration=duration, max_parallel=max_parallel, skew=skew, timeout=timeout, poll=poll,
                            windows=windows, prometheus=prometheus, stop_hosts=stop_hosts,
                            failed_annotation=failed_annotation, check_mode=check_mode, started=started, clock=clock,
                            sleep=sleep, wall=wall, fetch=fetch, order=order, jitter=jitter)
        if out["acquired"]:
            outcome = run_queue.GRANTED
        return out
    finally:
        if order is not None:
            order.ledger.mark(node, outcome, order.queue)


def wait_and_take(api, *, pool, node, holder, run, max_unavailable, duration, max_parallel=0, skew=30.0,
                  timeout=600.0, poll=5.0, windows=None, prometheus=None, stop_hosts=None,
                  failed_annotation="kubegpu.io/maintenance-failed", check_mode=False, started=False,
                  clock=time.monotonic, sleep=time.sleep, wall=time.time, fetch=rollout_gates.fetch_alerts,
                  order=None, jitter=random.uniform):
    """Wait for the gates and a slot for ``node``, then take it. Returns ``{acquired, decision, slot,
    index, lease, waited, queued, polls, budget, gates, notes, msg}``; raises Stop (new starts must
    stop: a failure of this run, RBAC, a window that does not open in time) or returns ``acquired``
    false at the deadline, with the reason that held it last.

    The deadline bounds the wait for others only: while a slot this run holds for another node is
    what keeps the node waiting (the run's own queue, which moves as its nodes finish, each under
    its own timeouts), the time does not count (``queued``); so while nodes of this run before it
    in the plan wait in their own slot wait (``order``: they take slots first, each bounded by its
    own deadline). ``started``: the node is in
    maintenance already (the hold before its reboot): no gates, no stop, no max_parallel; renew its
    slot, or take one anew if it was lost."""
    if started:
        windows, prometheus, stop_hosts, run, max_parallel = None, None, None, None, 0
    start = clock()
    deadline = start + max(float(timeout), 0.0)
    tracker = Tracker(clock)
    polls, last, notes, queued = 0, None, [], 0.0
    arriving_since = {}
    if stop_hosts:
        raise Stop("the rollout stopped after the failure of %s: %s not started" % (", ".join(sorted(stop_hosts)), node))
    while True:
        polls += 1
        waited = round(clock() - start, 3)
        gate = gates(windows, prometheus, wall(), wall() + (deadline - clock()), fetch)
        if gate["stop"]:
            raise Stop("%s not started: %s" % (node, gate["msg"]))
        result = {"acquired": False, "decision": "wait", "slot": None, "index": None, "lease": None, "waited": waited,
                  "queued": round(queued, 3), "polls": polls, "budget": None, "gates": gate, "notes": notes,
                  "msg": gate["msg"], "own": False, "ahead": []}
        try:
            # read every poll, gates open or not: a failure of this run stops a held node too
            nodes = api.nodes()
            failures = rollout_lease.run_failures(nodes, run, failed_annotation) if run else []
            if failures:
                raise Stop("the rollout stopped after the failure of %s: %s not started" % (", ".join(failures), node))
            if gate["open"]:
                leases = api.leases()
                view = rollout_lease.budget_view(leases, nodes, pool, max_unavailable, wall(), skew,
                                                 tracker.update(leases))
                for note in view["notes"]:
                    if note not in notes:
                        notes.append(note)
                line = {"ahead": [], "waiting": [], "stopped": []}
                if order is not None:
                    line = run_queue.ahead(order.queue, node, order.ledger.states(), nodes, order.skip_label)
                    if line["stopped"]:
                        raise Stop("the rollout stopped: %s, before %s in the plan, got no slot: %s not started"
                                   % (", ".join(line["stopped"]), node, node))
                    now = clock()
                    for other in line["arriving"]:
                        arriving_since.setdefault(other, now)
                    late = [a for a in line["arriving"] if now - arriving_since[a] >= ARRIVAL_GRACE]
                    if late:
                        line["ahead"] = [a for a in line["ahead"] if a not in late]
                        note = ("%s, before %s in the plan, did not reach the slot wait within %d s (its host failed "
                                "or is held up on an earlier task): not waited for"
                                % (", ".join(late), node, ARRIVAL_GRACE))
                        if note not in notes:
                            notes.append(note)
                decision = rollout_lease.acquire_decision(view, node, holder, max_parallel, line["ahead"])
                result.update(budget=_budget_summary(view), msg=decision["msg"], decision=decision["action"],
                              ahead=line["ahead"],
                              own=bool(line["waiting"]) or any(
                                  v["state"] == rollout_lease.HELD and v["holder"] == holder and v["node"] != node
                                  for v in view["held"]))
                if decision["action"] != "wait":
                    if check_mode:
                        return dict(result, acquired=True, index=decision["index"],
                                    slot=decision["name"] or rollout_lease.slot_name(pool, decision["index"]),
                                    msg="check mode: would take a slot: " + decision["msg"])
                    got, why = _take(api, pool, node, holder, duration, decision, leases, wall())
                    if got is not None:
                        rival = _rivals(api, pool, node, holder, max_unavailable, skew, got, wall())
                        if rival is None:
                            return dict(result, acquired=True, index=decision["index"],
                                        slot=got["metadata"]["name"], lease=got, waited=round(clock() - start, 3))
                        # (a rival: waiting for it is a wait for others)
                        result.update(msg=rival, decision="wait")
                    elif why == "conflict" and clock() < deadline:
                        continue   # another runner wrote first: read again at once
                    else:
                        result.update(msg=why, decision="wait")
        except K8sError as exc:
            stop = _refusal(exc, api.namespace)
            if stop is not None:
                raise stop
            result["msg"] = "the API did not answer as needed (%s); waiting" % exc
        last = result
        remaining = deadline - clock()
        if remaining <= 0:
            last["msg"] = "no slot for %s within %s s (%d polls): %s" % (node, timeout, polls, last["msg"])
            return last
        before = clock()
        # jittered (+-25 %): runners that started together do not poll (and write) in step
        sleep(min(max(float(poll), 0.05) * jitter(1.0 - POLL_JITTER, 1.0 + POLL_JITTER), remaining))
        if last["own"] and last["decision"] == "wait":
            slept = clock() - before
            queued += slept
            deadline += slept


def _budget_summary(view):
    return {"limit": view["limit"], "gpu_nodes": view["gpu_nodes"], "used": view["used"],
            "held": [{"slot": v["name"], "node": v["node"], "holder": v["holder"], "state": v["state"]}
                     for v in view["held"]],
            "other": view["other"]}


def _take(api, pool, node, holder, duration, decision, leases, now):
    """Write the Lease the decision names: ``(stored Lease, None)``, or ``(None, why)`` with why
    ``conflict`` when another runner wrote first (409/422), else the API's error (5xx, no answer:
    the write may have been applied, the next read decides: a Lease of this runner is renewed)."""
    try:
        if decision["action"] == "renew":
            lease = api.lease(decision["name"])
            if lease is None or not rollout_lease.owned_by(lease, pool, holder, node):
                return None, "conflict"
            return api.replace(rollout_lease.renewed_body(lease, now)), None
        previous = None
        if decision["action"] == "takeover":
            previous = [x for x in leases if (x.get("metadata") or {}).get("name") == decision["name"]][0]
        body = rollout_lease.lease_body(pool, decision["index"], api.namespace, holder, node, duration, now, previous)
        return (api.create(body) if previous is None else api.replace(body)), None
    except K8sError as exc:
        if exc.status in (409, 422):
            return None, "conflict"
        if exc.status is None or exc.status >= 500 or exc.status == 429:
            return None, "the API did not take the Lease write (%s); waiting" % exc
        raise


def _rivals(api, pool, node, holder, max_unavailable, skew, got, now):
    """After taking a slot: did another runner take one for the same node at the same moment? Then
    give ours back (of two that see each other, both yield; at most one keeps) and say so."""
    leases = api.leases()
    view = rollout_lease.budget_view(leases, api.nodes(), pool, max_unavailable, now, skew)
    mine = got["metadata"]["name"]
    others = rollout_lease.rivals(view, node, holder, mine)
    if not others:
        return None
    try:
        api.delete(mine, got["metadata"].get("resourceVersion"))
    except K8sError:
        pass   # renewed or gone meanwhile: no renewer runs for it yet, so it expires
    return ("%s was taken at the same moment by %s (Lease %s): this runner gave its slot back and waits"
            % (node, others[0]["holder"], others[0]["name"]))


def find_mine(api, pool, holder, node):
    """This runner's Lease for ``node`` in the pool, or None."""
    for lease in api.leases():
        if rollout_lease.slot_index(pool, (lease.get("metadata") or {}).get("name")) is not None \
                and rollout_lease.owned_by(lease, pool, holder, node):
            return lease
    return None


def release(api, *, pool, node, holder, check_mode=False, retries=5):
    """Give this runner's slot for ``node`` back. ``{released, slot, msg}``."""
    for _attempt in range(retries + 1):
        lease = find_mine(api, pool, holder, node)
        if lease is None:
            return {"released": False, "slot": None,
                    "msg": "no slot Lease of this runner for %s (never taken, released, or taken over after it "
                           "expired)" % node}
        name = lease["metadata"]["name"]
        if check_mode:
            return {"released": True, "slot": name, "msg": "check mode: would release %s" % name}
        try:
            if api.delete(name, lease["metadata"].get("resourceVersion")):
                return {"released": True, "slot": name, "msg": "released slot %s of %s" % (name, node)}
        except K8sError as exc:
            if exc.status != 409:   # renewed between the read and the delete: read again
                stop = _refusal(exc, api.namespace)
                raise stop if stop is not None else exc
    raise K8sError("cannot release the slot of %s: its Lease kept changing (%d attempts)" % (node, retries + 1))


# ------------------------------------------------------------------------------- renewer

def lock_path(holder, namespace, name, tmpdir=None):
    """The renewer's lock file of one Lease (in a 0700 directory of this user under ``tmpdir``)."""
    digest = hashlib.sha256(("%s\0%s\0%s" % (holder, namespace, name)).encode("utf-8")).hexdigest()[:32]
    return os.path.join(tmpdir or tempfile.gettempdir(), "kubegpu-lease-%d" % os.getuid(), digest + ".lock")


def renew_loop(api, *, pool, node, holder, name, interval, watch, max_hold, clock=time.monotonic, sleep=time.sleep,
               wall=time.time, stopping=lambda: False):
    """Renew Lease ``name`` every ``interval`` s while ``watch`` (pid, start) lives. Returns why it
    stopped: ``gone`` (released or taken over), ``parent`` (the runner ended: slot released),
    ``max_hold`` or ``signal``."""
    started = clock()
    next_renew = clock() + interval
    while True:
        if stopping():
            return "signal"
        if not alive(*watch):
            # give the slot back; an API away meanwhile is tried again until the Lease would have
            # expired anyway (three renewal intervals)
            give_up = clock() + 3 * interval
            while True:
                try:
                    release(api, pool=pool, node=node, holder=holder)
                    return "parent"
                except K8sError as exc:
                    if exc.status in (401, 403) or clock() >= give_up or stopping():
                        return "parent"
                sleep(1.0)
        if clock() - started > max_hold:
            return "max_hold"
        if clock() >= next_renew:
            try:
                lease = api.lease(name)
                if lease is None or not rollout_lease.owned_by(lease, pool, holder, node):
                    return "gone"
                api.replace(rollout_lease.renewed_body(lease, wall()))
                next_renew = clock() + interval
            except K8sError as exc:
                if exc.status in (401, 403):
                    return "refused"
                next_renew = clock() + min(interval, 1.0)   # 409 (changed meanwhile) or 5xx: read again soon
        sleep(min(1.0, max(next_renew - clock(), 0.05)))


def spawn_renewer(params, environ, *, namespace, pool, node, holder, name, duration, watch, max_hold):
    """Start the renewer of Lease ``name`` (unless one runs for it already: a lock file says so).
    Returns the renewer's pid (None when one was running)."""
    interval = max(float(duration) / 3.0, 0.5)
    path = lock_path(holder, namespace, name)
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    st = os.lstat(os.path.dirname(path))
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise K8sError("%s is not a private directory of this user: the slot renewer is not started"
                       % os.path.dirname(path))
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:   # pragma: no cover - the child ends with os._exit (coverage cannot see it)
        code = 0
        try:
            os.close(read_end)
            os.setsid()
            if os.fork():
                os._exit(0)
            _daemon(write_end, params, environ, path, namespace=namespace, pool=pool, node=node, holder=holder,
                    name=name, interval=interval, watch=watch, max_hold=max_hold)
        except BaseException:  # pylint: disable=broad-except
            code = 1
        os._exit(code)
    os.close(write_end)
    data = b""
    while True:
        chunk = os.read(read_end, 64)
        if not chunk:
            break
        data += chunk
    os.close(read_end)
    os.waitpid(pid, 0)
    text = data.decode("ascii", "replace").strip()
    return int(text) if text.isdigit() else None


def _daemon(report_fd, params, environ, path, **kw):  # pragma: no cover - runs in the daemon
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.write(report_fd, b"running")
        os._exit(0)
    os.write(report_fd, str(os.getpid()).encode("ascii"))
    os.close(report_fd)
    devnull = os.open(os.devnull, os.O_RDWR)
    for std in (0, 1, 2):
        os.dup2(devnull, std)
    keep = {0, 1, 2, fd}
    for other in range(3, 1024):   # the worker's pipes to ansible-playbook and the test harness
        if other not in keep:
            try:
                os.close(other)
            except OSError:
                pass
    flag = {"stop": False}

    def on_term(_signum, _frame):
        flag["stop"] = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    client = None
    try:
        client = k8s_client.connect(params, environ=environ)
        renew_loop(SlotApi(client, kw.pop("namespace")), stopping=lambda: flag["stop"], **kw)
    finally:
        if client is not None:
            client.close()
        try:
            os.unlink(path)
        except OSError:
            pass


# ------------------------------------------------------------------ kubegpu.fleet.rollout_slot

SLOT_SPEC = dict({
    "name": {"type": "str", "required": True},
    "state": {"type": "str", "default": "acquire", "choices": ["acquire", "hold", "release"]},
    "pool": {"type": "str", "default": rollout_lease.DEFAULT_POOL},
    "namespace": {"type": "str", "default": "kube-system"},
    "max_unavailable": {"type": "str", "default": "25%"},
    "max_parallel": {"type": "int", "default": 0},
    "lease_duration": {"type": "int", "default": 120},
    "clock_skew": {"type": "float", "default": 30},
    "timeout": {"type": "float", "default": 600},
    "poll": {"type": "float", "default": 2},
    "max_hold": {"type": "float", "default": 86400},
    "renew": {"type": "bool", "default": True},
    "windows": {"type": "list", "elements": "dict", "default": []},
    "prometheus_url": {"type": "str"},
    "alert_filter": {"type": "str"},
    "alert_filter_match_only": {"type": "bool", "default": False},
    "alert_firing_only": {"type": "bool", "default": False},
    "prometheus_timeout": {"type": "float", "default": 10},
    "prometheus_validate_certs": {"type": "bool", "default": True},
    "prometheus_ca_cert": {"type": "path"},
    "failed_annotation": {"type": "str", "default": "kubegpu.io/maintenance-failed"},
    "unschedulable": {"type": "bool"},
    "annotations": {"type": "dict", "default": {}},
    "queue": {"type": "list", "elements": "str", "default": []},
    "skip_label": {"type": "str", "default": gpu_nodes.DEFAULT_SKIP_LABEL},
}, **k8s_client.AUTH_ARG_SPEC)


def stopped_hosts(task_vars):
    """Hosts of this play that failed or became unreachable (Ansible removes them from
    ``ansible_play_hosts``), leaving out those the skip label ended on purpose."""
    task_vars = task_vars or {}
    everyone = list(task_vars.get("ansible_play_hosts_all") or [])
    remaining = set(task_vars.get("ansible_play_hosts") or [])
    hostvars = task_vars.get("hostvars") or {}
    out = []
    for host in everyone:
        if host in remaining:
            continue
        try:
            start = hostvars[host].get("kubegpu_rolling_reboot_start") or {}
        except (KeyError, AttributeError, TypeError):
            start = {}
        if isinstance(start, dict) and start.get("skip"):
            continue
        out.append(host)
    return out


def checked_options(args):
    """The options a slot request can work with (raises UnsafeInput, LeaseError, GateError or
    RolloutError naming the first that is not)."""
    bad = sorted(k for k, v in args["annotations"].items() if v is not None and not isinstance(v, str))
    if bad:
        raise UnsafeInput("annotations must map to strings or null (to remove); not strings: %s" % ", ".join(bad))
    if args["state"] == "hold" and (args["unschedulable"] is not None or args["annotations"]):
        raise UnsafeInput("unschedulable and annotations go with state=acquire (the cordon) or release (the uncordon)")
    for key, low, high in (("timeout", 0, None), ("poll", 0.05, 3600), ("clock_skew", 0, 3600),
                           ("max_hold", 1, None), ("prometheus_timeout", 0.1, 300)):
        kwargs = {"minimum": low}
        if high is not None:
            kwargs["maximum"] = high
        args[key] = check_timeout(args[key], key, **kwargs)
    if args["max_parallel"] < 0:
        raise UnsafeInput("max_parallel must not be negative (0: only the budget limits), got %s" % args["max_parallel"])
    if not 1 <= args["lease_duration"] <= rollout_lease.MAX_DURATION:
        raise UnsafeInput("lease_duration must be 1..%d seconds, got %s" % (rollout_lease.MAX_DURATION,
                                                                            args["lease_duration"]))
    args["pool"] = rollout_lease.check_pool(args["pool"])
    rollout_gates.normalize_windows(args["windows"])
    rollout_gates.compile_filter(args["alert_filter"])
    gpu_nodes.scaled_max_unavailable(args["max_unavailable"], 1)
    args["queue"] = run_queue.check_queue(args["queue"])
    return args


def _patch(task, result, args, client):
    """The Node patch that goes with the slot (the cordon and the maintenance record, or the
    uncordon and clearing it): node_api.patch_node, guarded by the resourceVersion it read."""
    if args["unschedulable"] is None and not args["annotations"]:
        return False
    out = node_api.patch_node(node_api.NodeApi(client), args["name"], args["unschedulable"], args["annotations"],
                              check_mode=task.check_mode)
    result.update(node=out["node"], attempts=out["attempts"], patched=out["changed"])
    if task.diff:
        result["diff"] = node_api.node_diff(args["name"], out)
    return out["changed"]


def _acquire(task, result, args, api, run, holder, watch, environ):
    prometheus = None
    if args["prometheus_url"]:
        prometheus = {"url": args["prometheus_url"], "filter": args["alert_filter"],
                      "match_only": args["alert_filter_match_only"], "firing_only": args["alert_firing_only"],
                      "timeout": args["prometheus_timeout"], "validate_certs": args["prometheus_validate_certs"],
                      "ca_cert": args["prometheus_ca_cert"]}
    order = None
    if args["queue"] and args["name"] in args["queue"]:
        ledger = run_queue.Ledger(run_queue.ledger_path(holder, args["namespace"], args["pool"]), owner=watch)
        order = Order(args["queue"], ledger, args["skip_label"])
    out = acquire(
        api, pool=args["pool"], node=args["name"], holder=holder, run=run, max_unavailable=args["max_unavailable"],
        duration=args["lease_duration"], max_parallel=args["max_parallel"], skew=args["clock_skew"],
        timeout=args["timeout"], poll=args["poll"], windows=args["windows"], prometheus=prometheus,
        stop_hosts=stopped_hosts(task.task_vars), failed_annotation=args["failed_annotation"],
        check_mode=task.check_mode, started=args["state"] == "hold", order=order)
    out.pop("lease", None)
    out.pop("own", None)
    result.update(out)
    if not out["acquired"]:
        result["failed"] = True
        return
    result["changed"] = out["decision"] in ("create", "takeover") and not task.check_mode
    try:   # the cordon, only with the slot held; a failed cordon gives the slot back
        if _patch(task, result, args, api.client):
            result["changed"] = True
    except K8sError:
        if out["decision"] in ("create", "takeover") and not task.check_mode:
            release(api, pool=args["pool"], node=args["name"], holder=holder)
        raise
    result["cordoned"] = args["unschedulable"] is True
    if args["renew"] and not task.check_mode:
        auth = dict((k, args[k]) for k in k8s_client.AUTH_ARG_SPEC if args.get(k) is not None)
        result["renewer"] = spawn_renewer(
            auth, environ, namespace=args["namespace"], pool=args["pool"], node=args["name"], holder=holder,
            name=out["slot"], duration=args["lease_duration"], watch=watch, max_hold=args["max_hold"])


def _slot(task, result, args, secrets):
    try:
        checked_options(args)
    except (UnsafeInput, rollout_lease.LeaseError, rollout_gates.GateError, gpu_nodes.RolloutError,
            run_queue.QueueError) as exc:
        result.update(failed=True, msg=str(exc))
        return
    run, holder, watch = run_identity()
    result.update(run=run, holder=holder, changed=False)
    environ = task.environ()
    try:
        with k8s_action.connected(args, environ, secrets) as client:
            api = SlotApi(client, args["namespace"])
            if args["state"] == "release":
                # the uncordon first: a failed patch keeps the slot (the node is still in maintenance)
                patched = _patch(task, result, args, client)
                out = release(api, pool=args["pool"], node=args["name"], holder=holder, check_mode=task.check_mode)
                result.update(out, changed=out["released"] or patched)
                return
            _acquire(task, result, args, api, run, holder, watch, environ)
    except Stop as exc:
        result.update(failed=True, stopped=True, acquired=False, msg=str(exc))
    except (K8sError, run_queue.QueueError) as exc:
        result.update(failed=True, msg=str(exc))


def slot_work(task, args):
    """kubegpu.fleet.rollout_slot: acquire, hold or release this node's slot; secrets masked in the result."""
    result = {}
    with k8s_action.masked(result, args) as secrets:
        _slot(task, result, args, secrets)
    return result


ACTION = runner.Action(SLOT_SPEC, slot_work)
