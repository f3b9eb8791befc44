"""kubegpu.fleet.kubelet on booted lab nodes: the real systemd kubelet, the API double.

* ``nomemres`` (62 GiB, no memory reservation, partial kubeReserved): GKE-ladder reservation and a
  complete evictionHard, every other key intact, 0600 backup, the Node's allocatable memory
  drops by the reservation after the restart; check mode changes nothing; a second run
  changes nothing.
* ``uuid`` (GPU UUIDs changed at the setup reboot): kubegpu_kubelet_sync_checkpoint backs up the
  stale checkpoint, the restarted kubelet writes one naming today's UUIDs.
* ``cpu`` (CPU manager policy none, also passed as a flag in KUBELET_EXTRA_ARGS): the flag makes
  the role fail cleanly; with flag_conflicts=move the policy goes static, reserved CPUs are
  ensured, cpu_manager_state is recreated and the kubelet does not crash-loop.
"""
import json

import pytest
import yaml

from lab_fixture import (device_plugin_ds, journal_cursor, lab_factory, wait_for,  # noqa: F401  pylint: disable=unused-import
                         wait_for_cpu_manager_reconciles)

GIB = 1 << 30
MIB = 1 << 20
CONFIG = "/var/lib/kubelet/config.yaml"
CKPT = "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"
CPU_STATE = "/var/lib/kubelet/cpu_manager_state"
FULL_EVICTION = {"memory.available": "100Mi", "nodefs.available": "10%", "imagefs.available": "15%",
                 "nodefs.inodesFree": "5%"}
PROFILE = {
    "name": "kubelet",
    "defaults": {"gpus": {"count": 1}, "memory": "62Gi", "cpus": 8, "pool": "h100",
                 "pods": [{"name": "train-{node}", "namespace": "ml", "gpus": 1, "app": "train"}]},
    "nodes": [
        {"name": "nomemres", "seed": "no-memory-reservation", "gpus": {"count": 2},
         "kubelet": {"config": {"kubeReserved": {"cpu": "1", "ephemeral-storage": "1Gi"}}}},
        {"name": "uuid", "seed": "stale-checkpoint", "gpus": {"count": 2},
         "faults": {"gpu_uuids_change_on_reboot": True}, "setup": {"reboots": 1}},
        {"name": "cpu", "seed": "healthy",
         "kubelet": {"config": {"cpuManagerPolicy": "none"}, "flags": ["--cpu-manager-policy=none"]}},
    ],
    "cluster": {"manifests": [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}},
                              device_plugin_ds("nvidia-device-plugin", pool="h100")]},
}
DRAINED = {"kubegpu_maintenance": {"active": True, "drained": True, "was_unschedulable": False}}


@pytest.fixture(scope="module")
def lab(lab_factory):  # noqa: F811
    return lab_factory(PROFILE)


def role_play(node, **role_vars):
    return [{"hosts": node, "gather_facts": False,
             "roles": [{"role": "kubegpu.fleet.kubelet", "vars": role_vars}]}]


def run_role(ansible, lab, node, check=False, extra_vars=None, **role_vars):
    return ansible.playbook(role_play(node, **role_vars), inventory=lab.inventory, check=check,
                            extra_vars=extra_vars)


def read_config(lab, node):
    return yaml.safe_load(lab.ssh(node, "cat %s" % CONFIG).stdout)


def unit_prop(lab, node, prop, unit="kubelet"):
    return lab.ssh(node, "systemctl show -p %s --value %s" % (prop, unit)).stdout.strip()


def memory_bytes(quantity):
    assert quantity.endswith("Ki"), quantity
    return int(quantity[:-2]) * 1024


def allocatable_memory(lab, node):
    return memory_bytes(lab.node_obj(node)["status"]["allocatable"]["memory"])


def lease_renew_time(lab, node):
    return lab.get("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/%s" % node)["spec"]["renewTime"]


def gpu_uuids(lab, node):
    out = lab.ssh(node, "nvidia-smi -L").stdout
    return sorted(line.split("UUID: ")[1].rstrip(")") for line in out.splitlines() if "UUID: GPU-" in line)


def checkpoint_ids(lab, node):
    data = json.loads(lab.ssh(node, "cat %s" % CKPT).stdout)["Data"]
    ids = set(d for v in (data.get("RegisteredDevices") or {}).values() for d in v)
    for e in data.get("PodDeviceEntries") or []:
        for v in e["DeviceIDs"].values():
            ids.update(v)
    return ids


def task(res, name, host):
    """The result of the role's task ``name`` (the callback prefixes the role's name)."""
    return res.task("kubegpu.fleet.kubelet : " + name, host=host)


def changed_tasks(res, host):
    return [t["_task"] for t in res.tasks(host) if t.get("changed")]


def test_memory_reservation_check_mode_apply_and_idempotence(lab, ansible):
    node = "nomemres"
    before_text = lab.ssh(node, "cat %s" % CONFIG).stdout
    before = yaml.safe_load(before_text)
    assert "memory" not in before["kubeReserved"] and "evictionHard" not in before
    capacity = memory_bytes(lab.node_obj(node)["status"]["capacity"]["memory"])
    assert capacity == 62 * GIB
    assert allocatable_memory(lab, node) == capacity - 100 * MIB
    pid = unit_prop(lab, node, "MainPID")

    # check mode: reports the change, touches nothing
    res = run_role(ansible, lab, node, check=True, kubegpu_kubelet_checkpoint_guard=False)
    assert res.rc == 0, res.stdout[-4000:]
    cfg_task = task(res, "Write the kubelet configuration", node)
    assert cfg_task["changed"] and "kubeReserved.memory" in cfg_task["changed_keys"], cfg_task
    assert lab.ssh(node, "cat %s" % CONFIG).stdout == before_text
    assert lab.ssh(node, "ls %s.*.bak" % CONFIG, check=False).returncode != 0
    assert unit_prop(lab, node, "MainPID") == pid

    # apply
    lease_before = lease_renew_time(lab, node)
    res = run_role(ansible, lab, node)
    assert res.rc == 0, res.stdout[-4000:]
    cfg_task = task(res, "Write the kubelet configuration", node)
    assert cfg_task["changed"] and cfg_task["memory_reservation"]["kube_reserved"]["value"] == "5489Mi"
    after = read_config(lab, node)
    assert after["kubeReserved"] == {"cpu": "1", "ephemeral-storage": "1Gi", "memory": "5489Mi"}
    assert after["evictionHard"] == FULL_EVICTION
    assert "systemReserved" not in after
    for key, value in before.items():  # every other key intact
        if key not in ("kubeReserved", "evictionHard"):
            assert after[key] == value, key
    backup = cfg_task["backup_file"]
    assert lab.ssh(node, "stat -c %%a %s" % backup).stdout.strip() == "600"
    assert lab.ssh(node, "cat %s" % backup).stdout == before_text
    # the kubelet really restarted, the role waited for its Lease and the Node
    assert unit_prop(lab, node, "MainPID") != pid
    assert lease_renew_time(lab, node) != lease_before
    ready = [c for c in lab.node_obj(node)["status"]["conditions"] if c["type"] == "Ready"]
    assert ready and ready[0]["status"] == "True"
    # the GKE ladder for 62 GiB is 5489 MiB, on top of the 100Mi eviction threshold
    wait_for(lambda: allocatable_memory(lab, node) == capacity - 5489 * MIB - 100 * MIB, 180,
             "allocatable memory minus the reservation")

    # second run: nothing to do
    pid = unit_prop(lab, node, "MainPID")
    res = run_role(ansible, lab, node)
    assert res.rc == 0, res.stdout[-4000:]
    assert res.stats[node]["changed"] == 0, changed_tasks(res, node)
    assert unit_prop(lab, node, "MainPID") == pid
    assert len(lab.ssh(node, "ls %s.*.bak" % CONFIG).stdout.split()) == 1


def test_sync_stale_checkpoint_on_a_drained_node(lab, ansible):
    node = "uuid"
    now = gpu_uuids(lab, node)
    assert not checkpoint_ids(lab, node) <= set(now), "the seed left a stale checkpoint"
    before_bytes = lab.ssh(node, "base64 -w0 %s" % CKPT).stdout
    pid = unit_prop(lab, node, "MainPID")
    res = run_role(ansible, lab, node, extra_vars=DRAINED, kubegpu_kubelet_sync_checkpoint=True,
                   kubegpu_kubelet_reservations=False)
    assert res.rc == 0, res.stdout[-4000:]
    synced = task(res, "Back up and remove the stale device checkpoint", node)
    assert synced["changed"] and synced["stale"] and not synced["kubelet_restarted"], synced
    assert lab.ssh(node, "stat -c %%a %s" % synced["backup_file"]).stdout.strip() == "600"
    assert lab.ssh(node, "base64 -w0 %s" % synced["backup_file"]).stdout == before_bytes
    assert unit_prop(lab, node, "MainPID") not in ("0", pid)
    wait_for(lambda: lab.ssh(node, "test -s %s" % CKPT, check=False).returncode == 0, 180, "new checkpoint")
    wait_for(lambda: checkpoint_ids(lab, node) and checkpoint_ids(lab, node) <= set(now), 180,
             "checkpoint naming today's GPUs only")
    # nothing stale any more: no restart, nothing changed
    again = run_role(ansible, lab, node, extra_vars=DRAINED, kubegpu_kubelet_sync_checkpoint=True,
                     kubegpu_kubelet_reservations=False)
    assert again.rc == 0 and again.stats[node]["changed"] == 0, changed_tasks(again, node)


def test_cpu_manager_static_on_a_drained_node(lab, ansible):
    node = "cpu"
    before_text = lab.ssh(node, "cat %s" % CONFIG).stdout
    assert json.loads(lab.ssh(node, "cat %s" % CPU_STATE).stdout)["policyName"] == "none"
    # the --cpu-manager-policy flag would override the file: clean failure, nothing changed
    res = run_role(ansible, lab, node, extra_vars=DRAINED, kubegpu_kubelet_cpu_manager_policy="static")
    assert res.rc != 0
    failed = task(res, "Write the kubelet configuration", node)
    assert failed.get("failed") and "--cpu-manager-policy" in failed["msg"], failed
    assert "Traceback" not in failed.get("module_stderr", "")
    assert lab.ssh(node, "cat %s" % CONFIG).stdout == before_text

    pid = unit_prop(lab, node, "MainPID")
    res = run_role(ansible, lab, node, extra_vars=DRAINED, kubegpu_kubelet_cpu_manager_policy="static",
                   kubegpu_kubelet_flag_conflicts="move")
    assert res.rc == 0, res.stdout[-4000:]
    cfg = read_config(lab, node)
    assert cfg["cpuManagerPolicy"] == "static"
    assert cfg["kubeReserved"]["cpu"] == "1"     # the kubelet refuses static without reserved CPUs
    assert "--cpu-manager-policy" not in lab.ssh(node, "cat /etc/default/kubelet").stdout
    assert lab.ssh(node, "stat -c %a /etc/default/kubelet.*.bak").stdout.strip() == "600"
    backups = lab.ssh(node, "ls %s.*.bak" % CPU_STATE).stdout.split()
    assert len(backups) == 1 and json.loads(lab.ssh(node, "cat %s" % backups[0]).stdout)["policyName"] == "none"
    assert lab.ssh(node, "stat -c %%a %s" % backups[0]).stdout.strip() == "600"
    # the kubelet came back with the new policy and stays up
    assert json.loads(lab.ssh(node, "cat %s" % CPU_STATE).stdout)["policyName"] == "static"
    assert unit_prop(lab, node, "MainPID") not in ("0", pid)
    restarts = unit_prop(lab, node, "NRestarts")
    cmdline = lab.ssh(node, "tr '\\0' ' ' < /proc/%s/cmdline" % unit_prop(lab, node, "MainPID")).stdout
    assert "--cpu-manager-policy" not in cmdline
    wait_for(lambda: unit_prop(lab, node, "ActiveState") == "active", 120, "kubelet active")
    # "stays up": this kubelet got past its CPU manager start-up check and ran a reconcile pass
    # of the static policy (logged), an event rather than a few seconds of hoping
    wait_for_cpu_manager_reconciles(lab, node, journal_cursor(lab, node), count=1)
    assert unit_prop(lab, node, "NRestarts") == restarts and unit_prop(lab, node, "ActiveState") == "active"
    again = run_role(ansible, lab, node, extra_vars=DRAINED, kubegpu_kubelet_cpu_manager_policy="static",
                     kubegpu_kubelet_flag_conflicts="move")
    assert again.rc == 0 and again.stats[node]["changed"] == 0, changed_tasks(again, node)
