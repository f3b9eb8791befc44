"""kubegpu.fleet.rollout_slot against the Kubernetes API double (real HTTP, real kubernetes client,
the double's history as the record) and a real Prometheus server on loopback.

* a run takes a slot, its renewer renews the Lease while the run lives and gives it back when the
  ansible-playbook process is killed; a renewer killed with its job leaves a Lease that the next
  runner takes over once it expired;
* bad cluster state through the double's fault injection: RBAC refusals stop with the RBAC
  needed and write nothing, 5xx answers are waited out, a conflict is read again, a malformed
  Lease is never taken, a Lease renewed in the future (clock skew) is taken only after this
  runner saw it unchanged for its duration;
* the alert gate: a Prometheus rule that fires holds the start, its clearing releases it.

Every wait is on an event (the double's history, the renewer's exit, Prometheus's API state);
the deadlines are safety limits only.
"""
import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time

import pytest
import yaml

from apidouble_fixture import api_double_factory  # noqa: F401 pylint: disable=unused-import
from test_api_double import node, play_env

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.rollout import gates as rollout_gates, lease as rollout_lease, slot as rollout_slot
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.rollout import run_queue
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.k8s import client as k8s_client

POOL = "kubegpu-rollout"
LEASES = "leases.coordination.k8s.io"
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"


def fleet(count=4):
    return [node("gpu-%d" % i) for i in range(count)]


def slot_task(name, node_name, kubeconfig, **args):
    args.update(name=node_name, kubeconfig=kubeconfig)
    args.setdefault("poll", 0.2)
    args.setdefault("timeout", 60)
    return {"name": name, "kubegpu.fleet.rollout_slot": args, "register": name.replace(" ", "_"), "ignore_errors": True}


def play(tasks):
    return [{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]


def lease_writes(proc, since=0):
    return [e for e in proc.client.history(since=since, resource=LEASES, nodes=False) if e["verb"] != "get"]


def stored_leases(proc):
    return dict((x["metadata"]["name"], x) for x in proc.client.state()["objects"].get(LEASES, []))


def wait_until(what, predicate, timeout=120.0, interval=0.1):
    """Poll a predicate on an event source (history, a process table); ``timeout`` is a safety limit."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("no %s within %s s" % (what, timeout))
        time.sleep(interval)


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:
        with open("/proc/%d/stat" % pid) as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def descendants(pid):
    """Every process below ``pid`` (Ansible's workers run in sessions of their own: a signal to the
    playbook's process group does not reach them)."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def kill_tree(pids):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def renewers(holder, tmpdir):
    """Processes holding the renewer lock of ``holder``'s slot 0 (the lock file names no pid: /proc/*/fd does)."""
    out = []
    lock = rollout_slot.lock_path(holder, "kube-system", "kubegpu-rollout-slot-0", str(tmpdir))
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fds = os.listdir("/proc/%s/fd" % entry)
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink("/proc/%s/fd/%s" % (entry, fd))
            except OSError:
                continue
            if target == lock:
                out.append(int(entry))
    return out


def start_playbook(ansible, tmp_path, plays):
    path = os.path.join(str(tmp_path), "held.yml")
    with open(path, "w") as fh:
        yaml.safe_dump(plays, fh, sort_keys=False)
    cmd = [os.path.join(os.path.dirname(ansible.python), "ansible-playbook"), path, "-i", "localhost,", "-c", "local"]
    return subprocess.Popen(cmd, cwd=ansible.workdir, env=ansible.env(play_env(tmp_path)), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


# ------------------------------------------------------------------------- renewal, death

def test_a_run_renews_its_slot_while_it_lives_and_gives_it_back_when_killed(ansible, tmp_path, api_double_factory):
    proc = api_double_factory(seed=fleet())
    gate = tmp_path / "go"
    held = play([slot_task("take", "gpu-0", proc.kubeconfig, lease_duration=3, max_unavailable="2"),
                 {"name": "hold", "ansible.builtin.wait_for": {"path": str(gate), "timeout": 300}}])
    runner = start_playbook(ansible, tmp_path, held)
    try:
        created = wait_until("slot Lease", lambda: [e for e in lease_writes(proc) if e["verb"] == "create"])
        assert created[0]["name"] == "kubegpu-rollout-slot-0" and created[0]["code"] == 201
        # the renewer renews every lease_duration / 3 s: two renewals are the event to wait for
        renewals = wait_until("two renewals", lambda: [e for e in lease_writes(proc) if e["verb"] == "update"
                                                       and e["changed"]][1:])
        assert renewals
        lease = stored_leases(proc)["kubegpu-rollout-slot-0"]
        holder = lease["spec"]["holderIdentity"]
        assert holder.startswith("kubegpu.fleet/") and holder.endswith("/%d-%s" % (
            runner.pid, rollout_slot.process_start(runner.pid)))
        assert lease["metadata"]["annotations"][rollout_lease.NODE_ANNOTATION] == "gpu-0"
        renewer = wait_until("the renewer", lambda: renewers(holder, tmp_path))
        assert len(renewer) == 1 and renewer[0] not in descendants(runner.pid)   # a session of its own
        tree = descendants(runner.pid)
        kill_tree([runner.pid] + tree)          # the job is killed: the playbook and its workers
        runner.wait()
        deleted = wait_until("the slot given back", lambda: [e for e in lease_writes(proc) if e["verb"] == "delete"])
        assert deleted[0]["code"] == 200 and stored_leases(proc) == {}
        wait_until("the renewer to end", lambda: not pid_alive(renewer[0]))
    finally:
        if runner.poll() is None:
            kill_tree([runner.pid] + descendants(runner.pid))
            runner.wait()
        kill_tree(descendants(runner.pid))


def test_a_lease_left_by_a_job_killed_with_its_renewer_expires_and_is_taken_over(
        ansible, tmp_path, api_double_factory):
    proc = api_double_factory(seed=fleet())
    # the dead job's Lease (its renewer died with it): last renewed just now, 2 s valid
    dead = rollout_lease.lease_body(POOL, 0, "kube-system", "kubegpu.fleet/gone/1-1", "gpu-1", 2, time.time())
    proc.client.load([dead])
    res = ansible.playbook(play([slot_task("take", "gpu-2", proc.kubeconfig, max_unavailable="1", clock_skew=0,
                                           lease_duration=30, renew=False)]), env=play_env(tmp_path))
    take = res.task("take")
    assert take["acquired"] and take["decision"] == "takeover" and take["slot"] == "kubegpu-rollout-slot-0", take
    assert any("expired" in n for n in take["notes"])
    lease = stored_leases(proc)["kubegpu-rollout-slot-0"]
    assert lease["spec"]["leaseTransitions"] == 1 and lease["spec"]["holderIdentity"] == take["holder"]
    updates = [e for e in lease_writes(proc) if e["verb"] == "update"]
    assert len(updates) == 1 and json.loads(updates[0]["body"])["metadata"]["resourceVersion"]


# ---------------------------------------------------------------------- bad cluster state

def test_refusals_conflicts_and_5xx(ansible, tmp_path, api_double_factory):
    proc = api_double_factory(seed=fleet())
    proc.client.add_fault({"resource": "leases", "verbs": ["create"], "code": 403,
                           "message": 'leases.coordination.k8s.io is forbidden: User "ci" cannot create resource'})
    res = ansible.playbook(play([slot_task("take", "gpu-0", proc.kubeconfig, renew=False)]), env=play_env(tmp_path))
    take = res.task("take")
    assert take["failed"] and take["stopped"] and not take["acquired"]
    assert "HTTP 403" in take["msg"] and "needs get, list, create, update and delete on coordination.k8s.io " \
        "leases in the namespace kube-system" in take["msg"]
    assert stored_leases(proc) == {} and not [e for e in proc.client.history(resource="nodes") if e["verb"] == "patch"]
    proc.client.clear_faults()

    # two 503s on the list, then a conflict on the create (another runner was first): waited out, read again
    proc.client.add_fault({"resource": "leases", "verbs": ["list"], "code": 503, "count": 2})
    proc.client.add_fault({"resource": "leases", "verbs": ["create"], "code": 409, "reason": "AlreadyExists",
                           "count": 1})
    since = max([e["seq"] for e in proc.client.history(nodes=False)] or [0])
    res = ansible.playbook(play([slot_task("take", "gpu-0", proc.kubeconfig, renew=False)]), env=play_env(tmp_path))
    take = res.task("take")
    assert take["acquired"] and take["slot"] == "kubegpu-rollout-slot-0" and take["polls"] >= 3, take
    creates = [e for e in lease_writes(proc, since) if e["verb"] == "create"]
    assert [e["code"] for e in creates] == [409, 201]

    # the delete of the release fails once with a 500: the release fails and the Lease stays for
    # the next try (a slot is never half given back); the next release gives it back
    proc.client.add_fault({"resource": "leases", "verbs": ["delete"], "code": 500, "count": 1})
    client = k8s_client.connect({"kubeconfig": proc.kubeconfig})
    try:
        api = rollout_slot.SlotApi(client, "kube-system")
        with pytest.raises(k8s_client.K8sError) as err:
            rollout_slot.release(api, pool=POOL, node="gpu-0", holder=take["holder"])
        assert "HTTP 500" in str(err.value) and "kubegpu-rollout-slot-0" in stored_leases(proc)
        out = rollout_slot.release(api, pool=POOL, node="gpu-0", holder=take["holder"])
    finally:
        client.close()
    assert out["released"] and stored_leases(proc) == {}


def test_malformed_and_foreign_leases_are_never_taken(ansible, tmp_path, api_double_factory):
    proc = api_double_factory(seed=fleet())
    bad = rollout_lease.lease_body(POOL, 0, "kube-system", "someone", "gpu-3", 1, time.time() - 3600)
    foreign = rollout_lease.lease_body(POOL, 1, "kube-system", "kubegpu.fleet/x/1-1", "gpu-3", 1, time.time() - 3600)
    foreign["metadata"]["labels"] = {"app": "other-tool"}
    proc.client.load([bad, foreign])
    res = ansible.playbook(play([slot_task("limit two", "gpu-0", proc.kubeconfig, max_unavailable="2", timeout=1,
                                           renew=False),
                                 slot_task("limit three", "gpu-0", proc.kubeconfig, max_unavailable="3", renew=False)]),
                           env=play_env(tmp_path))
    two = res.task("limit two")
    assert two["failed"] and not two["acquired"] and "no free slot for gpu-0" in two["msg"]
    assert any("kubegpu-rollout-slot-0 is malformed" in n for n in two["notes"])
    assert any("kubegpu-rollout-slot-1 was not written by kubegpu.fleet" in n for n in two["notes"])
    three = res.task("limit three")
    assert three["acquired"] and three["slot"] == "kubegpu-rollout-slot-2"
    leases = stored_leases(proc)
    assert leases["kubegpu-rollout-slot-0"]["spec"]["holderIdentity"] == "someone"
    assert leases["kubegpu-rollout-slot-1"]["metadata"]["labels"] == {"app": "other-tool"}


def test_a_lease_renewed_in_the_future_is_held_until_seen_unchanged(tmp_path, api_double_factory):
    proc = api_double_factory(seed=fleet())
    ahead = rollout_lease.lease_body(POOL, 0, "kube-system", "kubegpu.fleet/fast/1-1", "gpu-1", 2, time.time() + 600)
    proc.client.load([ahead])
    client = k8s_client.connect({"kubeconfig": proc.kubeconfig})
    try:
        api = rollout_slot.SlotApi(client, "kube-system")
        polls = []

        def sleep(seconds):
            polls.append(seconds)
            time.sleep(seconds)

        out = rollout_slot.acquire(api, pool=POOL, node="gpu-2", holder="kubegpu.fleet/me/1-1", run="me/1-1",
                                   max_unavailable="1", duration=30, skew=30, timeout=120, poll=0.5, sleep=sleep)
    finally:
        client.close()
    assert out["acquired"] and out["decision"] == "takeover", out
    assert any("clocks of kubegpu.fleet/fast/1-1 and this runner differ" in n for n in out["notes"])
    assert any("unchanged for" in n for n in out["notes"])
    assert len(polls) >= 4   # held while seen unchanged for less than its 2 s duration


# -------------------------------------------------------------------------------- alerts

class Exporter(object):
    """A metrics endpoint Prometheus scrapes: one gauge the test sets."""

    def __init__(self):
        self.value = 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):   # noqa: N802
                body = ("# TYPE kubegpu_test_alarm gauge\nkubegpu_test_alarm %d\n" % outer.value).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def port(self):
        return self.server.server_address[1]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def prometheus(tmp_path):
    if not os.path.exists(PROMETHEUS):
        pytest.skip("Debian's prometheus package is not installed (make deps)")
    exporter = Exporter()
    rules = tmp_path / "rules.yml"
    rules.write_text("groups:\n- name: fleet\n  interval: 1s\n  rules:\n"
                     "  - alert: GPUFleetOnFire\n    expr: kubegpu_test_alarm > 0\n"
                     "  - alert: Watchdog\n    expr: vector(1)\n")
    config = tmp_path / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n- %s\n"
                      "scrape_configs:\n- job_name: fleet\n  static_configs:\n  - targets: ['127.0.0.1:%d']\n"
                      % (rules, exporter.port))
    port = free_port()
    log = open(str(tmp_path / "prometheus.log"), "wb")
    server = subprocess.Popen([PROMETHEUS, "--config.file=%s" % config, "--storage.tsdb.path=%s" % (tmp_path / "tsdb"),
                               "--web.listen-address=127.0.0.1:%d" % port], stdout=log, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, start_new_session=True)
    url = "http://127.0.0.1:%d" % port

    def firing():
        try:
            doc = rollout_gates.fetch_alerts(url, timeout=2)
        except rollout_gates.GateError:
            return None
        return sorted(a["labels"]["alertname"] for a in doc["data"]["alerts"] if a.get("state") == "firing")

    try:
        yield {"url": url, "exporter": exporter, "firing": firing}
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()
        exporter.close()


def test_a_firing_alert_holds_the_start_and_its_clearing_releases_it(tmp_path, api_double_factory, prometheus):
    proc = api_double_factory(seed=fleet())
    exporter, firing = prometheus["exporter"], prometheus["firing"]
    exporter.value = 1
    wait_until("GPUFleetOnFire firing", lambda: firing() == ["GPUFleetOnFire", "Watchdog"], timeout=120, interval=0.5)
    held = threading.Event()
    seen = []

    def sleep(seconds):
        seen.append(seconds)
        held.set()
        time.sleep(seconds)

    result = {}
    client = k8s_client.connect({"kubeconfig": proc.kubeconfig})

    def run():
        result["out"] = rollout_slot.acquire(
            rollout_slot.SlotApi(client, "kube-system"), pool=POOL, node="gpu-0", holder="kubegpu.fleet/me/1-1",
            run="me/1-1", max_unavailable="1", duration=30, timeout=300, poll=0.5, sleep=sleep,
            prometheus={"url": prometheus["url"], "filter": "^Watchdog$", "timeout": 5})

    worker = threading.Thread(target=run)
    worker.start()
    try:
        assert held.wait(120), "the slot wait never polled"
        # the wait goes on reading the Nodes (a failure of its run would stop it) and writes nothing
        proc.client.wait_for_read(resource="nodes", verb="list", timeout=120)
        assert stored_leases(proc) == {}
        assert not list(proc.client.reads(resource="leases"))
        cleared_at = max([e["seq"] for e in proc.client.history(nodes=False)] or [0])
        exporter.value = 0
        worker.join(300)
    finally:
        exporter.value = 0
        worker.join(300)
        client.close()
    out = result["out"]
    assert out["acquired"] and out["gates"]["alerts"]["ok"], out
    assert out["gates"]["alerts"]["ignored"] == [{"alertname": "Watchdog", "state": "firing"}]
    assert len(seen) >= 1 and out["polls"] >= 2
    created = [e for e in lease_writes(proc) if e["verb"] == "create"]
    assert len(created) == 1 and created[0]["seq"] > cleared_at
    assert firing() == ["Watchdog"]


def test_the_cordon_goes_with_the_slot_and_a_failed_cordon_gives_it_back(ansible, tmp_path, api_double_factory):
    proc = api_double_factory(seed=fleet())
    record = {"kubegpu.io/maintenance": '{"was_unschedulable":false}'}
    res = ansible.playbook(play([
        slot_task("take and cordon", "gpu-0", proc.kubeconfig, unschedulable=True, annotations=record,
                  lease_duration=6),
        slot_task("uncordon and give back", "gpu-0", proc.kubeconfig, state="release", unschedulable=False,
                  annotations={"kubegpu.io/maintenance": None})]), env=play_env(tmp_path), diff=True)
    take, back = res.task("take and cordon"), res.task("uncordon and give back")
    # the renewer ends with its run (its slot is given back already): nothing of the test outlives it.
    # A renewer busy in an API call when its run ends finishes that call (read timeout 60 s) and may
    # retry the release for three renewal intervals: the safety limit covers both.
    wait_until("the renewer to end", lambda: not renewers(take["holder"], tmp_path), timeout=300.0)
    assert take["acquired"] and take["cordoned"] and take["patched"] and take["changed"], take
    assert take["diff"]["after"] == {"unschedulable": True, "annotations": record}
    assert back["released"] and back["patched"] and back["changed"], back
    writes = [e for e in proc.client.history(nodes=False) if e["actor"] == "api"
              and e["verb"] in ("create", "patch", "delete") and e["resource"] in (LEASES, "nodes")]
    assert [(e["resource"], e["verb"]) for e in writes] == [(LEASES, "create"), ("nodes", "patch"), ("nodes", "patch"),
                                                            (LEASES, "delete")]
    # the API refuses the cordon (RBAC on nodes): the slot goes back, the node is untouched
    proc.client.add_fault({"resource": "nodes", "verbs": ["patch"], "code": 403, "message": "nodes is forbidden"})
    res = ansible.playbook(play([slot_task("take and cordon", "gpu-1", proc.kubeconfig, unschedulable=True,
                                           annotations=record)]), env=play_env(tmp_path))
    take = res.task("take and cordon")
    assert take["failed"] and "HTTP 403" in take["msg"], take
    assert stored_leases(proc) == {}
    node1 = [n for n in proc.client.state()["objects"]["nodes"] if n["metadata"]["name"] == "gpu-1"][0]
    assert not node1["spec"].get("unschedulable")


# ---------------------------------------------------------------------- the plan's order

def test_one_run_with_one_slot_starts_its_nodes_in_plan_order(ansible, tmp_path, api_double_factory):
    """Four hosts of one run (strategy free, as the rolling_reboot playbook runs them), listed in
    the inventory against the plan's order so that the workers reach the slot wait in the wrong
    order: the slots still go in the plan's order (the queue the role passes), read from the
    double's history of Lease creates."""
    proc = api_double_factory(seed=fleet(6))
    plan = ["gpu-2", "gpu-0", "gpu-3", "gpu-1"]
    inventory = tmp_path / "hosts.yml"
    hosts = dict(("h-%s" % n, {"ansible_connection": "local", "kubegpu_node_name": n}) for n in reversed(plan))
    inventory.write_text(yaml.safe_dump({"all": {"hosts": hosts}}, sort_keys=False))
    since = max([e["seq"] for e in proc.client.history(nodes=False)] or [0])
    take = slot_task("take", "{{ kubegpu_node_name }}", proc.kubeconfig, max_unavailable="1", renew=False,
                     lease_duration=60, timeout=120, queue=plan)
    take["ignore_errors"] = False
    back = slot_task("give back", "{{ kubegpu_node_name }}", proc.kubeconfig, state="release")
    back["ignore_errors"] = False
    plays = [{"hosts": "all", "gather_facts": False, "strategy": "ansible.builtin.free", "tasks": [take, back]}]
    res = ansible.playbook(plays, inventory=str(inventory), env=dict(play_env(tmp_path), ANSIBLE_FORKS="5"))
    assert res.rc == 0, (res.stdout + res.stderr)[-4000:]
    creates = [e for e in lease_writes(proc, since) if e["verb"] == "create" and e["code"] == 201]
    started = [json.loads(e["body"])["metadata"]["annotations"][rollout_lease.NODE_ANNOTATION] for e in creates]
    assert started == plan, started
    # one slot: each create comes after the previous holder gave its Lease back
    deletes = [e for e in lease_writes(proc, since) if e["verb"] == "delete" and e["code"] == 200]
    assert len(deletes) == 4 and all(d["seq"] < c["seq"] for d, c in zip(deletes, creates[1:]))
    assert stored_leases(proc) == {}
    ledger = run_queue.ledger_path(res.task("take", host="h-gpu-2")["holder"], "kube-system", POOL, str(tmp_path))
    assert not os.path.exists(ledger)     # every node granted: the run's ledger is gone
