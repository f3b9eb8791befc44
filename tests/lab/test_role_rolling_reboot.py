"""kubegpu.fleet.rolling_reboot against six real lab nodes and the API double.

One lab for the module (six small healthy nodes, device plugin DaemonSet, one ReplicaSet-owned
GPU pod per node); each test restores what it changed. Everything is asserted from the API
double's history (``unavailable_gpu_nodes`` after every request), the Node objects and the
nodes' boot IDs:

1. a budgeted rollout (max_unavailable 2, one node cordoned by the operator beforehand), then a
   second run that changes nothing and a check-mode run that changes nothing;
2. a node whose GPUs do not come back after its reboot (its DKMS-built nvidia module is not
   there for the running kernel, as after a kernel update DKMS failed to build for) stops the
   rollout, stays cordoned with the failure annotation; a re-run resumes it;
3. a PodDisruptionBudget that never allows eviction times the drain out cleanly;
4. the API double going away while the role waits for the rebooted node fails the play
   without uncordoning anything;
5. the budget the cluster holds: three rollouts started at once (separate ansible-playbook
   processes, as AWX slices) never have more than max_unavailable GPU nodes unavailable; a
   rollout killed mid-node is finished by the next one, which leaves an operator-cordoned node
   alone; a firing Prometheus alert holds new starts and its clearing releases them; a closed
   maintenance window starts nothing.
"""
import json
import os
import subprocess
import tempfile
import threading
import time

import pytest

from lab_fixture import lab_factory, wait_for  # noqa: F401  pylint: disable=unused-import
from test_rollout_budget import prometheus  # noqa: F401  pylint: disable=unused-import

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.rollout import slot as rollout_slot

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLAYBOOK = os.path.join(REPO, "playbooks", "rolling_reboot.yml")
NODES = ["rr-a", "rr-b", "rr-c", "rr-d", "rr-e", "rr-f"]
ROLE_UA = "OpenAPI-Generator/"   # the kubernetes Python client behind kubernetes.core
ANNOTATION = "kubegpu.io/maintenance"
FAILED_ANNOTATION = "kubegpu.io/maintenance-failed"
LEASES = "leases.coordination.k8s.io"
DKMS_DIR = "/lib/modules/$(uname -r)/updates/dkms"
DKMS_AWAY = "/root/kubegpu-test-dkms"

PLUGIN = {
    "apiVersion": "apps/v1", "kind": "DaemonSet",
    "metadata": {"name": "nvidia-device-plugin-daemonset", "namespace": "kube-system"},
    "spec": {"selector": {"matchLabels": {"name": "nvidia-device-plugin-ds"}},
             "updateStrategy": {"type": "RollingUpdate"},
             "template": {"metadata": {"labels": {"name": "nvidia-device-plugin-ds"}},
                          "spec": {"nodeSelector": {"nvidia.com/gpu.present": "true"},
                                   "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                                                    "effect": "NoSchedule"}],
                                   "priorityClassName": "system-node-critical",
                                   "containers": [{"name": "nvidia-device-plugin-ctr",
                                                   "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.2",
                                                   "env": [{"name": "PASS_DEVICE_SPECS", "value": "true"},
                                                           {"name": "MIG_STRATEGY", "value": "mixed"},
                                                           {"name": "FAIL_ON_INIT_ERROR", "value": "true"}],
                                                   "securityContext": {"privileged": True}}]}}},
}

PROFILE = {
    "name": "rollout",
    "description": "six small healthy GPU nodes for the rolling_reboot tests",
    "defaults": {
        "gpus": {"count": 2},
        "kubelet": {"config": {
            "kubeReserved": {"cpu": "500m", "memory": "5489Mi"}, "systemReserved": {"cpu": "500m", "memory": "512Mi"},
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "10%", "imagefs.available": "15%",
                             "nodefs.inodesFree": "5%"}}},
        "pods": [{"name": "train-{node}", "namespace": "ml", "gpus": 1, "app": "train"}],
    },
    "nodes": [{"name": n, "seed": "healthy", "gpus": {"count": 1 if n in ("rr-b", "rr-d") else 2}} for n in NODES],
    "cluster": {"manifests": [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}}, PLUGIN]},
}

# Short waits: the lab reboots in seconds; a real fleet keeps the 600 s defaults.
FAST = {
    "kubegpu_drain_timeout": 90, "kubegpu_drain_retry_delay": 2, "kubegpu_drain_pod_wait": 60,
    "kubegpu_validate_timeout": 90, "kubegpu_validate_poll": 2,
    "kubegpu_node_ready_timeout": 120, "kubegpu_node_ready_poll": 1,
    "kubegpu_budget_timeout": 20, "kubegpu_budget_poll": 2, "kubegpu_gpu_probe_timeout": 5,
}
ENV = {"ANSIBLE_PIPELINING": "1", "ANSIBLE_TIMEOUT": "30"}


@pytest.fixture(scope="module")
def lab(lab_factory):  # noqa: F811
    return lab_factory(PROFILE)


def rollout(ansible, lab, check=False, **extra):
    variables = dict(FAST)
    variables.update(extra)
    started = time.monotonic()
    res = ansible.playbook(PLAYBOOK, inventory=lab.inventory, extra_vars=variables, check=check, env=ENV,
                           timeout=1500)
    res.seconds = round(time.monotonic() - started, 1)
    print("rolling_reboot run (%s, check=%s): rc %s in %.1f s" % (extra, check, res.rc, res.seconds))
    return res


def last_seq(lab):
    return max([e["seq"] for e in lab.client.history(nodes=False)] or [0])


def role_writes(lab, since):
    """Mutating requests the role (kubernetes.core) made and the double applied."""
    return [e for e in lab.client.history(since=since)
            if e["seq"] > since and e["actor"] == "api" and (e.get("user_agent") or "").startswith(ROLE_UA)
            and e.get("changed") and not e.get("dry_run")]


def sets_unschedulable(entry, value):
    """Does this history entry's body set spec.unschedulable to value (merge or JSON patch)?"""
    try:
        body = json.loads(entry.get("body") or "{}")
    except ValueError:
        return False
    if isinstance(body, list):
        return any(isinstance(op, dict) and op.get("op") in ("add", "replace") and op.get("path") == "/spec/unschedulable"
                   and op.get("value") is value for op in body)
    return isinstance(body, dict) and (body.get("spec") or {}).get("unschedulable") is value


def node_patches(entries, name, unschedulable):
    return [e for e in entries if e["resource"] == "nodes" and e["name"] == name and e["verb"] == "patch"
            and sets_unschedulable(e, unschedulable)]


def boot_ids(lab):
    return dict((n, lab.node_obj(n)["status"]["nodeInfo"]["bootID"]) for n in NODES)


def annotations(lab, name):
    return lab.node_obj(name)["metadata"].get("annotations") or {}


def failure_text(res):
    return res.stdout + res.stderr


def restore(lab, operator_cordoned=()):
    """Back to the baseline: every node Ready, schedulable (unless the test wants it cordoned),
    no role annotation, a running GPU pod on each node."""
    for name in NODES:
        wait_for(lambda n=name: any(c["type"] == "Ready" and c["status"] == "True"
                                    for c in lab.node_obj(n)["status"].get("conditions", [])), 120, "%s Ready" % name)
        ann = annotations(lab, name)
        drop = [k + "-" for k in (ANNOTATION, FAILED_ANNOTATION) if k in ann]
        if drop:
            lab.kubectl("annotate", "node", name, *drop)
        lab.kubectl("cordon" if name in operator_cordoned else "uncordon", name)
    for lease in lab.client.state()["objects"].get("leases.coordination.k8s.io", []):
        if lease["metadata"]["name"].startswith("kubegpu-rollout-slot-"):   # a slot a killed run left
            lab.kubectl("delete", "lease", "-n", lease["metadata"]["namespace"], lease["metadata"]["name"])
    pods = lab.lab.state["node_pods"]
    lab.create([o for n in NODES for o in pods[n]])
    for name in NODES:
        wait_for(lambda n=name: (lab.pod("ml", "train-%s" % n) or {}).get("status", {}).get("phase") == "Running",
                 120, "train-%s Running" % name)


# ------------------------------------------------------------------------------ 1. budget

def test_rollout_keeps_the_budget_and_the_operator_cordon(lab, ansible):
    restore(lab, operator_cordoned=["rr-c"])
    before = boot_ids(lab)
    since = last_seq(lab)

    res = rollout(ansible, lab, kubegpu_max_unavailable=2, kubegpu_max_parallel=2, kubegpu_reboot="always")
    assert res.rc == 0, failure_text(res)[-6000:]

    history = [e for e in lab.client.history(since=since) if e["seq"] > since]
    worst = max(len(e["unavailable_gpu_nodes"]) for e in history)
    assert worst <= 2, [(e["seq"], e["unavailable_gpu_nodes"]) for e in history if len(e["unavailable_gpu_nodes"]) > 2]
    assert worst == 2, "the budget was used: the pre-cordoned node plus one more node"
    # every node was rebooted (a new boot ID in the API), drained (its GPU pod evicted)
    after = boot_ids(lab)
    assert all(after[n] != before[n] for n in NODES), (before, after)
    writes = role_writes(lab, since)
    evicted = sorted(e["name"] for e in writes if e["verb"] == "evict")
    assert evicted == sorted("train-%s" % n for n in NODES)
    # the operator's cordon survives; the role never uncordoned that node
    assert lab.node_obj("rr-c")["spec"].get("unschedulable") is True
    assert not node_patches(writes, "rr-c", False)
    for name in NODES:
        assert (name == "rr-c") == bool(lab.node_obj(name)["spec"].get("unschedulable")), name
        assert ANNOTATION not in annotations(lab, name) and FAILED_ANNOTATION not in annotations(lab, name)
    # the plan: the already cordoned node costs no budget and goes first
    plan = res.task("kubegpu.fleet.rolling_reboot : Plan the rollout")["ansible_facts"]["kubegpu_rollout"]
    assert plan["hosts"][0] == "rr-c" and plan["limit"] == 2 and plan["serial"] == [2, 1, 1, 1, 1]
    # each node was cordoned only once its batch was under the budget: never two at once
    cordons = [e for e in writes if e["resource"] == "nodes" and sets_unschedulable(e, True)]
    assert sorted(e["name"] for e in cordons) == sorted(n for n in NODES if n != "rr-c")


def test_second_run_and_check_mode_change_nothing(lab, ansible):
    restore(lab, operator_cordoned=["rr-c"])
    before = boot_ids(lab)
    since = last_seq(lab)

    again = rollout(ansible, lab, kubegpu_max_unavailable=2, kubegpu_max_parallel=2, kubegpu_reboot="needed")
    assert again.rc == 0, failure_text(again)[-6000:]
    changed = dict((h, s.get("changed", 0)) for h, s in again.stats.items())
    assert set(changed.values()) == {0}, changed
    assert role_writes(lab, since) == []
    assert boot_ids(lab) == before

    check = rollout(ansible, lab, check=True, kubegpu_targets="rr-a:rr-c", kubegpu_max_unavailable=2,
                    kubegpu_max_parallel=2, kubegpu_reboot="always")
    assert check.rc == 0, failure_text(check)[-6000:]
    assert "check mode: would reboot rr-a" in check.stdout
    assert role_writes(lab, since) == []
    assert boot_ids(lab) == before
    assert [n for n in NODES if lab.node_obj(n)["spec"].get("unschedulable")] == ["rr-c"]


# -------------------------------------------------------------------- 2. validation fails

def test_validation_failure_stops_the_rollout_and_a_rerun_resumes(lab, ansible):
    restore(lab)
    before = boot_ids(lab)
    # no nvidia.ko for the running kernel (DKMS did not build it): after the reboot the lab
    # kernel cannot load the driver, NVML fails, the plugin never advertises the GPUs
    lab.ssh("rr-b", "mv %s %s" % (DKMS_DIR, DKMS_AWAY))
    since = last_seq(lab)
    try:
        res = rollout(ansible, lab, kubegpu_targets="rr-b:rr-d", kubegpu_max_unavailable=1,
                      kubegpu_reboot="always", kubegpu_validate_timeout=20)
    finally:
        lab.ssh("rr-b", "test -d %s && mv %s %s || true" % (DKMS_AWAY, DKMS_AWAY, DKMS_DIR))
    assert res.rc != 0
    text = failure_text(res)
    assert "rr-b did not validate within kubegpu_validate_timeout=20 s" in text, text[-6000:]
    assert "NVML probe" in text
    node_b = lab.node_obj("rr-b")
    assert node_b["spec"].get("unschedulable") is True
    assert node_b["status"]["nodeInfo"]["bootID"] != before["rr-b"]
    failed = annotations(lab, "rr-b")[FAILED_ANNOTATION]
    assert "did not validate" in failed and '"time"' in failed
    assert ANNOTATION in annotations(lab, "rr-b")   # the pre-maintenance state stays for a re-run
    events = lab.get("/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3Drr-b")["items"]
    assert any(e.get("reason") == "KubegpuMaintenanceFailed" for e in events)
    # no node started after the failure: the other node was either never touched or (the sliding
    # window gave it the slot first) finished before rr-b started; nothing of it after rr-b's failure
    writes = role_writes(lab, since)
    failed_at = min(e["seq"] for e in writes if e["resource"] == "nodes" and e["name"] == "rr-b"
                    and FAILED_ANNOTATION in (e.get("body") or ""))
    cordoned_b = min(e["seq"] for e in node_patches(writes, "rr-b", True))
    other = [e for e in writes if e["name"] in ("rr-d", "train-rr-d")]
    assert not [e for e in other if e["seq"] > cordoned_b], [(e["seq"], e["verb"], e["name"]) for e in other]
    assert failed_at > cordoned_b
    assert not lab.node_obj("rr-d")["spec"].get("unschedulable")
    if other:   # done before: rebooted, validated, uncordoned, its record cleared
        assert lab.node_obj("rr-d")["status"]["nodeInfo"]["bootID"] != before["rr-d"]
        assert ANNOTATION not in annotations(lab, "rr-d") and FAILED_ANNOTATION not in annotations(lab, "rr-d")
    else:
        assert lab.node_obj("rr-d")["status"]["nodeInfo"]["bootID"] == before["rr-d"]
    assert not node_patches(writes, "rr-b", False)

    # fixed: a re-run resumes the open maintenance from the annotation and finishes it
    resumed = rollout(ansible, lab, kubegpu_targets="rr-b", kubegpu_max_unavailable=1, kubegpu_reboot="always")
    assert resumed.rc == 0, failure_text(resumed)[-6000:]
    assert "resuming an unfinished maintenance" in resumed.stdout
    assert not lab.node_obj("rr-b")["spec"].get("unschedulable")
    assert ANNOTATION not in annotations(lab, "rr-b") and FAILED_ANNOTATION not in annotations(lab, "rr-b")


# --------------------------------------------------------------------------- 3. PDB blocks

def test_pdb_that_never_allows_eviction_times_the_drain_out(lab, ansible):
    restore(lab)
    before = boot_ids(lab)
    pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
           "metadata": {"name": "train-all", "namespace": "ml"},
           "spec": {"minAvailable": 100, "selector": {"matchLabels": {"app": "train"}}}}
    lab.create([pdb])
    since = last_seq(lab)
    try:
        wait_for(lambda: lab.get("/apis/policy/v1/namespaces/ml/poddisruptionbudgets/train-all")
                 .get("status", {}).get("observedGeneration"), 20, "the PDB status")
        t0 = time.monotonic()
        res = rollout(ansible, lab, kubegpu_targets="rr-e:rr-f", kubegpu_max_unavailable=1,
                      kubegpu_reboot="always", kubegpu_drain_timeout=12)
        took = time.monotonic() - t0
    finally:
        lab.kubectl("delete", "pdb", "-n", "ml", "train-all", check=False)
    assert res.rc != 0
    text = failure_text(res)
    writes = role_writes(lab, since)
    # the sliding window starts whichever node takes the slot first; the other never starts
    cordoned = [n for n in ("rr-e", "rr-f") if node_patches(writes, n, True)]
    assert len(cordoned) == 1, cordoned
    first = cordoned[0]
    other = "rr-f" if first == "rr-e" else "rr-e"
    assert "drain of %s did not finish within kubegpu_drain_timeout=12 s" % first in text, text[-6000:]
    assert "ml/train-%s (not evicted)" % first in text and "ml/train-all (disruptionsAllowed 0" in text
    assert "The node stays cordoned and the rollout stops" in text
    assert took < 400
    refused = [e for e in lab.client.history(since=since, verb="evict")
               if e["seq"] > since and e["name"] == "train-%s" % first]
    assert len(refused) >= 2 and all(e["code"] == 429 for e in refused), "retried, never granted"
    assert lab.node_obj(first)["spec"].get("unschedulable") is True
    assert lab.pod("ml", "train-%s" % first)["status"]["phase"] == "Running"
    assert lab.node_obj(first)["status"]["nodeInfo"]["bootID"] == before[first], "not rebooted"
    assert "drain of %s" % first in annotations(lab, first)[FAILED_ANNOTATION]
    assert not [e for e in writes if e["name"] in (other, "train-%s" % other)]
    assert not node_patches(writes, first, False)


# ------------------------------------------------------------------ 4. API double goes away

def test_api_going_away_fails_the_play_without_uncordoning(lab, ansible):
    restore(lab)
    node = lab.node("rr-d")
    boots = node.supervisor_state().get("boots")
    since = last_seq(lab)
    out = {}

    def run():
        out["res"] = rollout(ansible, lab, kubegpu_targets="rr-d", kubegpu_max_unavailable=1, kubegpu_reboot="always",
                             kubegpu_node_ready_timeout=15)

    worker = threading.Thread(target=run)
    worker.start()
    try:
        # the node boots again: the role is now waiting for it (ansible.builtin.reboot, then the API)
        wait_for(lambda: (node.supervisor_state().get("boots") or 0) > boots or not worker.is_alive(), 600,
                 "rr-d to reboot", interval=0.1)
        assert worker.is_alive(), "the play ended before the node rebooted"
        lab.lab.stop_api()
        worker.join(900)
    finally:
        if lab.lab.api_info() is None:
            lab.lab.start_api([])
    assert not worker.is_alive()
    res = out["res"]
    assert res.rc != 0
    assert "Wait until the Node is Ready with a new boot ID" in failure_text(res)
    writes = role_writes(lab, since)
    assert not [e for e in writes if e["resource"] == "nodes" and sets_unschedulable(e, False)]
    assert lab.node_obj("rr-d")["spec"].get("unschedulable") is True
    restore(lab)


# ------------------------------------------------------- 5. the budget the cluster holds

def start_rollout(ansible, lab, **extra):
    """``rollout`` as a background ansible-playbook process (Popen), output to a file."""
    variables = dict(FAST)
    variables.update(extra)
    log = open(os.path.join(ansible.workdir, "rollout-%d.log" % time.monotonic_ns()), "w")
    cmd = [os.path.join(os.path.dirname(ansible.python), "ansible-playbook"), PLAYBOOK, "-i", lab.inventory,
           "-e", json.dumps(variables)]
    env = ansible.env(ENV)
    env["ANSIBLE_STDOUT_CALLBACK"] = "default"
    proc = subprocess.Popen(cmd, cwd=ansible.workdir, env=env, stdin=subprocess.DEVNULL, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    proc.log = log
    return proc


def lease_renewers(lease):
    """Processes holding the renewer lock of ``lease`` (the controller's temporary directory, as
    the playbook's)."""
    lock = rollout_slot.lock_path(lease["spec"]["holderIdentity"], lease["metadata"]["namespace"],
                                  lease["metadata"]["name"], tempfile.gettempdir())
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fds = os.listdir("/proc/%s/fd" % entry)
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink("/proc/%s/fd/%s" % (entry, fd)) == lock:
                    out.append(int(entry))
            except OSError:
                continue
    return out


def slot_leases(lab):
    return [x for x in lab.client.state()["objects"].get(LEASES, [])
            if x["metadata"]["name"].startswith("kubegpu-rollout-slot-")]


def test_three_rollouts_at_once_never_exceed_the_budget(lab, ansible):
    restore(lab)
    before = boot_ids(lab)
    since = last_seq(lab)
    results = {}

    def run(targets):
        # each waits for the others' slots: a timeout that the others' work fits in
        results[targets] = rollout(ansible, lab, kubegpu_targets=targets, kubegpu_max_unavailable=2,
                                   kubegpu_max_parallel=0, kubegpu_reboot="always", kubegpu_budget_timeout=1200)

    # three AWX slices of one job: separate ansible-playbook processes, started together
    workers = [threading.Thread(target=run, args=(t,)) for t in ("rr-a:rr-b", "rr-c:rr-d", "rr-e:rr-f")]
    for w in workers:
        w.start()
    for w in workers:
        w.join(1500)
    for targets, res in results.items():
        assert res.rc == 0, (targets, failure_text(res)[-6000:])
    assert len(results) == 3
    history = [e for e in lab.client.history(since=since) if e["seq"] > since]
    worst = max(len(e["unavailable_gpu_nodes"]) for e in history)
    assert worst <= 2, [(e["seq"], e["unavailable_gpu_nodes"]) for e in history if len(e["unavailable_gpu_nodes"]) > 2]
    after = boot_ids(lab)
    assert all(after[n] != before[n] for n in NODES), (before, after)
    # the slots were taken by the three runs, never more than two held at once, all given back
    writes = [e for e in history if e["resource"] == LEASES and e["verb"] in ("create", "update", "delete")
              and (e.get("code") or 0) < 300]
    holders = set()
    held = {}
    most = 0
    for e in writes:
        body = json.loads(e.get("body") or "{}")
        if e["verb"] in ("create", "update") and (body.get("spec") or {}).get("holderIdentity"):
            holders.add(body["spec"]["holderIdentity"])
            held[e["name"]] = True
        elif e["verb"] == "delete":
            held.pop(e["name"], None)
        most = max(most, len(held))
    assert len(holders) == 3 and most <= 2, (holders, most)
    assert slot_leases(lab) == []
    for name in NODES:
        assert not lab.node_obj(name)["spec"].get("unschedulable"), name


def test_one_slot_starts_the_nodes_in_the_plans_order(lab, ansible):
    """One run, one slot, four nodes: each starts after the previous one gave its slot back, in the
    plan's order (the sliding window's workers reach the slot wait in any order, and each polls
    on its own), read from the double's history of Lease creates and cordons."""
    restore(lab)
    since = last_seq(lab)
    targets = ["rr-d", "rr-b", "rr-f", "rr-a"]
    res = rollout(ansible, lab, kubegpu_targets=":".join(targets), kubegpu_max_unavailable=1, kubegpu_max_parallel=0,
                  kubegpu_reboot="always", kubegpu_budget_timeout=1200)
    assert res.rc == 0, failure_text(res)[-6000:]
    plan = res.task("kubegpu.fleet.rolling_reboot : Plan the rollout")["ansible_facts"]["kubegpu_rollout"]
    order = [t["node"] for t in plan["targets"]]
    assert sorted(order) == sorted(targets)
    history = [e for e in lab.client.history(since=since) if e["seq"] > since]
    creates = [e for e in history if e["resource"] == LEASES and e["verb"] == "create" and e.get("code") == 201]
    slots = [json.loads(e["body"])["metadata"]["annotations"]["kubegpu.io/rollout-node"] for e in creates]
    cordons = [e["name"] for e in role_writes(lab, since) if node_patches([e], e["name"], True)]
    assert slots == order and cordons == order, (order, slots, cordons)
    worst = max(len(e["unavailable_gpu_nodes"]) for e in history)
    assert worst <= 1
    assert slot_leases(lab) == []


def test_a_killed_rollout_is_finished_by_the_next_and_the_operator_cordon_stays(lab, ansible):
    from test_rollout_budget import descendants, kill_tree   # pylint: disable=import-outside-toplevel
    restore(lab, operator_cordoned=["rr-f"])
    lab.ssh("rr-a", "touch /run/reboot-required")
    since = last_seq(lab)
    runner = start_rollout(ansible, lab, kubegpu_targets="rr-a:rr-f", kubegpu_max_unavailable=2)
    try:
        # the job is cancelled once rr-a is cordoned (mid-node) and its slot's renewer runs (the
        # cordon is written before the renewer starts: a kill in between leaves the Lease to expire
        # instead, the other way a dead run frees its slot): the playbook and its workers die
        wait_for(lambda: node_patches(role_writes(lab, since), "rr-a", True), 300, "rr-a cordoned")
        wait_for(lambda: [p for x in slot_leases(lab) for p in lease_renewers(x)], 60, "the slot's renewer")
        kill_tree([runner.pid] + descendants(runner.pid))
        runner.wait()
    finally:
        kill_tree([runner.pid] + descendants(runner.pid))
        runner.log.close()
    assert lab.node_obj("rr-a")["spec"].get("unschedulable") is True
    assert ANNOTATION in annotations(lab, "rr-a")
    # its renewer sees the run gone and gives the slot back
    wait_for(lambda: not slot_leases(lab), 120, "the killed run's slot given back")

    res = rollout(ansible, lab, kubegpu_targets="rr-a:rr-f", kubegpu_max_unavailable=2)
    assert res.rc == 0, failure_text(res)[-6000:]
    assert "resuming an unfinished maintenance" in res.stdout
    node_a = lab.node_obj("rr-a")
    assert not node_a["spec"].get("unschedulable")
    assert ANNOTATION not in annotations(lab, "rr-a") and FAILED_ANNOTATION not in annotations(lab, "rr-a")
    # the operator's cordon: never changed, its pod never evicted, by either run
    writes = role_writes(lab, since)
    assert lab.node_obj("rr-f")["spec"].get("unschedulable") is True
    assert not [e for e in writes if e["name"] in ("rr-f", "train-rr-f")]
    assert slot_leases(lab) == []


def test_a_firing_alert_holds_new_starts_and_a_closed_window_starts_nothing(lab, ansible, prometheus):
    restore(lab)
    before = boot_ids(lab)
    # a window on another day of the week: closed now, and not open within the slot timeout
    other_day = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"][(time.gmtime().tm_wday + 3) % 7]
    since = last_seq(lab)
    closed = rollout(ansible, lab, kubegpu_targets="rr-b", kubegpu_max_unavailable=1, kubegpu_reboot="always",
                     kubegpu_maintenance_windows=[{"days": [other_day], "start": "00:00", "end": "00:01"}])
    assert closed.rc != 0
    assert "rr-b not started: outside the maintenance window(s) %s 00:00-00:01 UTC" % other_day in failure_text(closed)
    assert role_writes(lab, since) == [] and slot_leases(lab) == []

    exporter, firing = prometheus["exporter"], prometheus["firing"]
    exporter.value = 1
    wait_for(lambda: firing() == ["GPUFleetOnFire", "Watchdog"], 120, "GPUFleetOnFire firing")
    since = last_seq(lab)
    reads = lab.client.reads(resource="nodes", verb="list", user_agent=ROLE_UA + "*")
    mark = max([e["seq"] for e in reads] or [0])
    runner = start_rollout(ansible, lab, kubegpu_targets="rr-b", kubegpu_max_unavailable=1, kubegpu_reboot="always",
                           kubegpu_prometheus_url=prometheus["url"], kubegpu_alert_filter="^Watchdog$")
    try:
        # the plan lists the Nodes once, the slot wait on each poll: three lists = two polls held
        wait_for(lambda: len(lab.client.reads(since=mark, resource="nodes", verb="list",
                                              user_agent=ROLE_UA + "*")) >= 3, 300,
                 "the slot wait to poll while the alert fires", interval=0.2)
        assert runner.poll() is None
        assert role_writes(lab, since) == [] and slot_leases(lab) == []
        cleared = last_seq(lab)
        exporter.value = 0
        runner.wait(900)
    finally:
        exporter.value = 0
        if runner.poll() is None:
            runner.kill()
            runner.wait()
        runner.log.close()
    assert runner.returncode == 0, open(runner.log.name).read()[-6000:]
    cordons = node_patches(role_writes(lab, since), "rr-b", True)
    assert cordons and all(e["seq"] > cleared for e in cordons)
    assert boot_ids(lab)["rr-b"] != before["rr-b"]
    assert firing() == ["Watchdog"]
