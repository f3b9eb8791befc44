"""Stale device checkpoints on booted lab nodes: checkpoint_sync restarting the real systemd
kubelet, and the checkpoint_guard oneshot running before kubelet across a real reboot that
gives the GPUs new UUIDs."""
import json

import pytest

from lab_fixture import device_plugin_ds, lab_factory, wait_for  # noqa: F401  pylint: disable=unused-import

CKPT = "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"
PROFILE = {
    "name": "ckpt",
    "defaults": {"gpus": {"count": 2}, "memory": "62Gi", "pool": "h100",
                 "pods": [{"name": "train-{node}", "namespace": "ml", "gpus": 1, "app": "train"}]},
    "nodes": [
        # the lab reboots it once after its GPU pod ran: the checkpoint names the old UUIDs
        {"name": "uuid", "seed": "stale-checkpoint", "faults": {"gpu_uuids_change_on_reboot": True},
         "setup": {"reboots": 1}},
        # the guard node reboots in the test, with the guard installed
        {"name": "guard", "seed": "stale-checkpoint", "faults": {"gpu_uuids_change_on_reboot": True}},
    ],
    "cluster": {"manifests": [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}},
                              device_plugin_ds("nvidia-device-plugin", pool="h100")]},
}


@pytest.fixture(scope="module")
def lab(lab_factory):  # noqa: F811
    return lab_factory(PROFILE)


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


def unit_prop(lab, node, unit, prop):
    return lab.ssh(node, "systemctl show -p %s --value %s" % (prop, unit)).stdout.strip()


def test_synced_backs_up_removes_and_restarts_the_real_kubelet(lab, ansible):
    now = gpu_uuids(lab, "uuid")
    assert not checkpoint_ids(lab, "uuid") <= set(now), "the seed left a stale checkpoint"
    before_bytes = lab.ssh("uuid", "base64 -w0 %s" % CKPT).stdout
    pid_before = unit_prop(lab, "uuid", "kubelet", "MainPID")
    task = {"name": "sync", "kubegpu.fleet.checkpoint_sync": {"state": "synced", "device_ids": now}}
    play = [{"hosts": "uuid", "gather_facts": False, "tasks": [task]}]
    res = ansible.playbook(play, inventory=lab.inventory)
    assert res.rc == 0, res.stdout[-3000:]
    out = res.task("sync", host="uuid")
    assert out["changed"] and out["stale"] and out["kubelet_restarted"], out
    backup = out["backup_file"]
    assert lab.ssh("uuid", "stat -c %%a %s" % backup).stdout.strip() == "600"
    assert lab.ssh("uuid", "base64 -w0 %s" % backup).stdout == before_bytes
    # systemd really restarted kubelet, and the new kubelet wrote a checkpoint of today's GPUs
    wait_for(lambda: unit_prop(lab, "uuid", "kubelet", "MainPID") not in ("0", pid_before), 30, "kubelet restarted")
    wait_for(lambda: lab.ssh("uuid", "test -s %s" % CKPT, check=False).returncode == 0, 60, "new checkpoint")
    wait_for(lambda: checkpoint_ids(lab, "uuid") <= set(now), 60, "checkpoint with current GPUs only")
    again = ansible.playbook(play, inventory=lab.inventory).task("sync", host="uuid")
    assert again["changed"] is False and again["stale"] is False


def test_guard_removes_a_stale_checkpoint_before_kubelet_starts_after_reboot(lab, ansible):
    old = gpu_uuids(lab, "guard")
    assert checkpoint_ids(lab, "guard") <= set(old) and checkpoint_ids(lab, "guard")
    play = [{"hosts": "guard", "gather_facts": False, "tasks": [
        {"name": "install", "ansible.builtin.include_role": {"name": "kubegpu.fleet.checkpoint_guard"},
         "vars": {"kubegpu_checkpoint_guard_after_units": ["kubegpu-lab-kernel.service"]}},
        {"name": "reboot", "ansible.builtin.reboot": {"reboot_timeout": 120}},
    ]}]
    res = ansible.playbook(play, inventory=lab.inventory)
    assert res.rc == 0, res.stdout[-3000:]
    new = gpu_uuids(lab, "guard")
    assert not set(new) & set(old), "the reboot gave the GPUs new UUIDs"
    journal = lab.ssh("guard", "journalctl -b -u kubegpu-checkpoint-guard -o cat --no-pager").stdout
    assert "stale" in journal and "removed" in journal, journal
    # it ran to completion before kubelet started
    guard_done = int(unit_prop(lab, "guard", "kubegpu-checkpoint-guard", "ExecMainExitTimestampMonotonic"))
    kubelet_start = int(unit_prop(lab, "guard", "kubelet", "ExecMainStartTimestampMonotonic"))
    assert 0 < guard_done <= kubelet_start
    backups = lab.ssh("guard", "ls %s.*.bak" % CKPT).stdout.split()
    assert len(backups) == 1 and lab.ssh("guard", "stat -c %%a %s" % backups[0]).stdout.strip() == "600"
    assert json.loads(lab.ssh("guard", "cat %s" % backups[0]).stdout)["Data"]["RegisteredDevices"]
    wait_for(lambda: lab.ssh("guard", "test -s %s" % CKPT, check=False).returncode == 0, 60, "kubelet checkpoint")
    assert checkpoint_ids(lab, "guard") <= set(new)
