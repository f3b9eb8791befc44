"""Each fault switch of a node profile produces its failure, through the mechanism that causes
it on a real GPU node, and a node without the switch does not fail (the control).

One lab for the module (seven 2-GPU nodes): healthy, R570 NVML hang, static CPU manager with and
without PASS_DEVICE_SPECS, nvidia-uvm loaded late, GPU UUIDs changing at reboot, no memory
reservation. Also: PDB-blocked eviction through ``kubectl drain`` and
``kubernetes.core.k8s_drain`` against lab nodes.
"""
import json

import pytest

from lab_fixture import (CPU_MANAGER_RECONCILED, device_plugin_ds, journal_cursor,  # noqa: F401  pylint: disable=unused-import
                         journal_since, lab_factory, wait_for, wait_for_cpu_manager_reconciles)

RESERVED = {"kubeReserved": {"cpu": "1", "memory": "5489Mi"}, "systemReserved": {"cpu": "500m", "memory": "1Gi"},
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "10%", "imagefs.available": "15%",
                             "nodefs.inodesFree": "5%"}}
TRAIN = {"name": "train-{node}", "namespace": "ml", "gpus": 1, "app": "train"}
WEB = {"name": "web-{node}", "namespace": "default", "app": "web"}

PROFILE = {
    "name": "seeds",
    "defaults": {"gpus": {"count": 2}, "memory": "62Gi", "pool": "h100",
                 "kubelet": {"config": RESERVED}, "pods": [TRAIN, WEB]},
    "nodes": [
        {"name": "healthy", "seed": "healthy"},
        {"name": "r570", "seed": "r570-nvml-hang", "driver": {"version": "570.158.01"},
         "mig": {0: ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]}, "mig_apply": "after-device-plugin",
         "late_pods": [{"name": "train-late-{node}", "namespace": "ml", "gpus": 1},
                       {"name": "web-late-{node}", "namespace": "default"}]},
        {"name": "cpumgr", "seed": "cpumanager-device-specs", "pool": "legacy",
         "kubelet": {"config": {"cpuManagerPolicy": "static"}}},
        {"name": "cpumgr-ok", "seed": "healthy", "kubelet": {"config": {"cpuManagerPolicy": "static"}}},
        {"name": "uvm-late", "seed": "uvm-late", "uvm": "late", "runtime": {"nvidia_hook": False}},
        {"name": "uuid", "seed": "stale-checkpoint", "faults": {"gpu_uuids_change_on_reboot": True},
         "setup": {"reboots": 1}},
        {"name": "nomemres", "seed": "no-memory-reservation",
         "kubelet": {"config": {"kubeReserved": None, "systemReserved": None, "evictionHard": None}}},
    ],
    "cluster": {"manifests": [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}},
        device_plugin_ds("nvidia-device-plugin", pool="h100", pass_device_specs=True),
        device_plugin_ds("nvidia-device-plugin-legacy", pool="legacy", pass_device_specs=False,
                         image="nvcr.io/nvidia/k8s-device-plugin:v0.14.5"),
    ]},
}


@pytest.fixture(scope="module")
def lab(lab_factory):  # noqa: F811
    return lab_factory(PROFILE)


def gpu_pod(name, node, namespace="ml"):
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 2,
                     "containers": [{"name": "main", "image": "nvcr.io/nvidia/cuda:12.8.1-base-ubuntu22.04",
                                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}


def phase(lab, namespace, name):
    return ((lab.pod(namespace, name) or {}).get("status") or {}).get("phase")


def running(lab, namespace, name, timeout=120):
    return wait_for(lambda: phase(lab, namespace, name) == "Running", timeout, "%s/%s Running" % (namespace, name))


def gpu_container(lab, node, uuid_prefix="GPU-"):
    return [c for c in lab.container_devices(node) if (c["visible"] or "").startswith(uuid_prefix)]


def nvidia_lines(lines):
    return [line for line in lines if line.startswith("c 195:")]


# ------------------------------------------------------------------------ seed 1: R570 hang

def test_r570_nvml_init_hangs_on_the_mig_mixed_node(lab):
    hang = lab.ssh("r570", "timeout 5 nvidia-smi -L; echo rc=$?", timeout=30)
    assert "rc=124" in hang.stdout
    init = lab.ssh("r570", "timeout 5 python3 -c \"import ctypes; ctypes.CDLL('libnvidia-ml.so.1').nvmlInit_v2()\";"
                           " echo rc=$?", timeout=30)
    assert "rc=124" in init.stdout
    mig = lab.ssh("r570", "python3 -c \"import json; print([g['mig_mode'] for g in "
                          "json.load(open('/etc/kubegpu-lab/nvml.json'))['gpus']])\"").stdout
    assert mig.strip() == "['Enabled', 'Disabled']"
    # the same driver without mixed MIG answers (control): healthy node, fixed driver
    assert lab.ssh("healthy", "timeout 60 nvidia-smi -L", timeout=90).returncode == 0


def kubelet_log(lab, node):
    return lab.ssh(node, "journalctl -u kubelet --no-pager -o cat").stdout.splitlines()


def test_r570_kubelet_blocks_every_new_pod_without_events(lab):
    # the event that the kubelet is stuck: it asked the plugin for the late GPU pod's allocation
    wait_for(lambda: any("Issuing a GetPreferredAllocation call" in line and "train-late-r570" in line
                         for line in kubelet_log(lab, "r570")), 120, "the kubelet to call the plugin for train-late-r570")
    for name, ns in (("train-late-r570", "ml"), ("web-late-r570", "default")):
        pod = lab.pod(ns, name)
        assert pod["status"].get("phase") == "Pending", pod["status"]
        assert not pod["status"].get("containerStatuses")
        assert lab.events_for(ns, name) == []
    # pods admitted before the MIG split keep running, the node stays Ready
    assert phase(lab, "ml", "train-r570") == "Running"
    node = lab.node_obj("r570")
    assert [c["status"] for c in node["status"]["conditions"] if c["type"] == "Ready"] == ["True"]
    log = kubelet_log(lab, "r570")
    issued = [i for i, line in enumerate(log) if "Issuing a GetPreferredAllocation call" in line
              and "train-late-r570" in line]
    assert issued, "no GetPreferredAllocation call for the late GPU pod"
    assert not any("Making allocation request" in line for line in log[issued[-1]:])
    # a deletion is never confirmed either: the pod hangs in Terminating, while a working kubelet
    # (the healthy node's, same request at the same time) confirms its own: wait for that event
    lab.create([{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-ctl-healthy", "namespace": "default"},
                 "spec": {"nodeName": "healthy", "containers": [{"name": "main", "image": "busybox"}]}}])
    running(lab, "default", "web-ctl-healthy", 120)
    lab.kubectl("delete", "pod", "-n", "default", "web-r570", "web-ctl-healthy", "--wait=false")
    wait_for(lambda: lab.pod("default", "web-ctl-healthy") is None, 120, "the healthy kubelet to confirm its deletion")
    stuck = lab.pod("default", "web-r570")
    assert stuck is not None and stuck["metadata"].get("deletionTimestamp")


def test_late_gpu_pod_on_a_healthy_node_runs(lab):
    lab.create([gpu_pod("late-healthy", "healthy")])
    running(lab, "ml", "late-healthy", 120)
    assert any(e["reason"] == "Started" for e in lab.events_for("ml", "late-healthy"))
    lab.kubectl("delete", "pod", "-n", "ml", "late-healthy", "--timeout=120s", timeout=180)
    assert lab.pod("ml", "late-healthy") is None


# ------------------------------------------------------------ seed 2: CPU manager wipes devices

def _devices_of_new_pod(lab, node, name):
    lab.create([gpu_pod(name, node)])
    running(lab, "ml", name, 120)
    return wait_for(lambda: [c for c in gpu_container(lab, node) if c["pod"] == name], 120,
                    "the container of %s" % name)[0]


def test_static_cpu_manager_drops_hook_device_entries_without_device_specs(lab):
    # Right after start the NVIDIA hook has allowed the GPU and the control devices. The CPU
    # manager's reconcile runs every 10 s whatever the container's age, so it may already have
    # wiped them when the test first reads the cgroup. A miss is accepted only when the kubelet's
    # journal shows a reconcile pass since the pod was created (the observable cause); then a
    # fresh pod is tried. Without such a pass, missing entries fail the test.
    seen = []
    for attempt in range(6):
        name = "cpu-probe-%d" % attempt
        cursor = journal_cursor(lab, "cpumgr")
        ctr = _devices_of_new_pod(lab, "cpumgr", name)
        seen.append(ctr["lines"])
        if nvidia_lines(ctr["lines"]):
            break
        assert any(CPU_MANAGER_RECONCILED in line for line in journal_since(lab, "cpumgr", cursor)), \
            "no NVIDIA entries in %s and no CPU manager pass since it was created: %r" % (name, ctr["lines"])
        # the node's free GPU goes back to the plugin only once the pod is gone
        lab.kubectl("delete", "pod", "-n", "ml", name, "--wait=false")
        wait_for(lambda n=name: lab.pod("ml", n) is None, 60, "pod %s gone" % name)
    assert nvidia_lines(ctr["lines"]), seen
    # the CPU manager's reconcile (10 s) rewrites the cgroup from the runtime's own list
    path = ctr["path"]
    wait_for(lambda: not nvidia_lines(lab.ssh("cpumgr", "cat %s/devices.list" % path).stdout.splitlines()), 180,
             "NVIDIA entries to disappear from %s" % path)
    # the device nodes are still in the container's /dev: it is the cgroup that now says no
    assert lab.ssh("cpumgr", "ls /proc/%d/root/dev/nvidiactl" % ctr["pid"]).returncode == 0


def test_static_cpu_manager_keeps_entries_the_plugin_passed_as_device_specs(lab):
    ctr = _devices_of_new_pod(lab, "cpumgr-ok", "cpu-probe-ok")
    before = sorted(nvidia_lines(ctr["lines"]))
    assert before
    # not a sleep through "two periods": two reconcile passes the kubelet logged after the read
    wait_for_cpu_manager_reconciles(lab, "cpumgr-ok", journal_cursor(lab, "cpumgr-ok"))
    after = sorted(set(nvidia_lines(lab.ssh("cpumgr-ok", "cat %s/devices.list" % ctr["path"]).stdout.splitlines())))
    assert after == sorted(set(before))


# ---------------------------------------------------------------------- seed 3: uvm loaded late

def test_uvm_late_gpu_containers_lack_uvm_until_the_plugin_restarts(lab):
    uvm = lab.proc_major("uvm-late", "nvidia-uvm")
    assert uvm is not None, "nvidia-uvm was never loaded on uvm-late"
    assert lab.ssh("uvm-late", "test -c /dev/nvidia-uvm").returncode == 0
    old = gpu_container(lab, "uvm-late")
    assert old and all("c %d:0 rw" % uvm not in c["lines"] for c in old)
    assert all(nvidia_lines(c["lines"]) for c in old)  # they do have their GPU
    plugin = [p for p in lab.pods("uvm-late") if p["metadata"]["name"].startswith("nvidia-device-plugin-")]
    assert len(plugin) == 1
    lab.kubectl("delete", "pod", "-n", "kube-system", plugin[0]["metadata"]["name"])
    wait_for(lambda: [p for p in lab.pods("uvm-late") if p["metadata"]["name"].startswith("nvidia-device-plugin-")
                      and p["metadata"]["uid"] != plugin[0]["metadata"]["uid"]
                      and (p.get("status") or {}).get("phase") == "Running"], 120, "a new device plugin pod")
    wait_for(lambda: lab.node_obj("uvm-late")["status"]["allocatable"].get("nvidia.com/gpu") not in (None, "0"),
             120, "the new plugin registered")
    lab.create([gpu_pod("after-restart", "uvm-late")])
    running(lab, "ml", "after-restart", 120)
    new = [c for c in gpu_container(lab, "uvm-late") if c["path"] not in {o["path"] for o in old}]
    assert len(new) == 1
    assert "c %d:0 rw" % uvm in new[0]["lines"]


# ------------------------------------------------------------ seed 4: UUIDs change at reboot

def test_uuid_change_at_reboot_leaves_a_stale_checkpoint(lab):
    ckpt = json.loads(lab.ssh("uuid", "cat /var/lib/kubelet/device-plugins/kubelet_internal_checkpoint").stdout)
    assert set(ckpt) == {"Data", "Checksum"}
    now = set(lab.ssh("uuid", "nvidia-smi -L | sed -n 's/.*UUID: \\(GPU-[^)]*\\)).*/\\1/p'").stdout.split())
    assert len(now) == 2
    assert set(ckpt["Data"]["RegisteredDevices"]["nvidia.com/gpu"]) == now
    entries = ckpt["Data"]["PodDeviceEntries"]
    assert entries, "the GPU pod's allocation is kept across the reboot"
    stale = [d for e in entries for ids in e["DeviceIDs"].values() for d in ids if d not in now]
    assert stale, entries
    pod = lab.pod("ml", "train-uuid")
    waiting = pod["status"]["containerStatuses"][0]["state"].get("waiting") or {}
    assert waiting.get("reason") == "CreateContainerError"
    assert "unknown device" in waiting.get("message", "")
    # control: the healthy node's checkpoint names only its own GPUs
    hc = json.loads(lab.ssh("healthy", "cat /var/lib/kubelet/device-plugins/kubelet_internal_checkpoint").stdout)
    hnow = set(lab.ssh("healthy", "nvidia-smi -L | sed -n 's/.*UUID: \\(GPU-[^)]*\\)).*/\\1/p'").stdout.split())
    assert {d for e in hc["Data"]["PodDeviceEntries"] for ids in e["DeviceIDs"].values() for d in ids} <= hnow


# ------------------------------------------------------------- seed 5: no memory reservation

def test_node_without_reservations_offers_nearly_all_memory_to_pods(lab):
    cfg = lab.ssh("nomemres", "cat /var/lib/kubelet/config.yaml").stdout
    assert "kubeReserved" not in cfg and "systemReserved" not in cfg and "evictionHard" not in cfg
    node = lab.node_obj("nomemres")["status"]
    cap = int(node["capacity"]["memory"][:-2])
    assert cap == 62 * 1024 * 1024
    assert int(node["allocatable"]["memory"][:-2]) == cap - 100 * 1024  # only the default eviction threshold
    healthy = lab.node_obj("healthy")["status"]
    assert int(healthy["allocatable"]["memory"][:-2]) == cap - (5489 + 1024 + 100) * 1024


# ------------------------------------------------------------------------------ drains

PDB = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
       "metadata": {"name": "train-all", "namespace": "ml"},
       "spec": {"minAvailable": 100, "selector": {"matchLabels": {"app": "train"}}}}


def test_kubectl_drain_is_blocked_by_a_pdb_then_drains(lab):
    lab.create([PDB])
    try:
        wait_for(lambda: lab.get("/apis/policy/v1/namespaces/ml/poddisruptionbudgets/train-all")
                 .get("status", {}).get("observedGeneration"), 120, "the PDB status")
        blocked = lab.kubectl("drain", "healthy", "--ignore-daemonsets", "--timeout=12s", check=False, timeout=60)
        assert blocked.returncode != 0
        assert "global timeout reached" in blocked.stderr, blocked.stderr
        assert phase(lab, "ml", "train-healthy") == "Running"
        # not covered by the budget: evicted, and gone once the kubelet confirms (an event, not the 12 s)
        wait_for(lambda: lab.pod("default", "web-healthy") is None, 120, "web-healthy evicted and gone")
    finally:
        lab.kubectl("delete", "pdb", "-n", "ml", "train-all", check=False)
    lab.kubectl("drain", "healthy", "--ignore-daemonsets", "--timeout=300s", timeout=360)
    left = [p["metadata"]["name"] for p in lab.pods("healthy")]
    assert all(n.startswith("nvidia-device-plugin") for n in left), left
    # the kubelet stopped the containers and released the GPU of the evicted pod
    ckpt = json.loads(lab.ssh("healthy", "cat /var/lib/kubelet/device-plugins/kubelet_internal_checkpoint").stdout)
    assert not ckpt["Data"]["PodDeviceEntries"]
    lab.kubectl("uncordon", "healthy")


def test_k8s_drain_module_drains_a_lab_node(lab, ansible):
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "drain", "kubernetes.core.k8s_drain": {
            "kubeconfig": lab.kubeconfig, "name": "nomemres", "state": "drain",
            "delete_options": {"ignore_daemonsets": True, "wait_timeout": 300, "terminate_grace_period": 5}}},
        {"name": "left", "kubernetes.core.k8s_info": {"kubeconfig": lab.kubeconfig, "kind": "Pod",
                                                      "field_selectors": ["spec.nodeName=nomemres"]}},
    ]}]
    res = ansible.playbook(play)
    assert res.rc == 0, res.stdout
    assert res.task("drain")["changed"] is True
    names = [p["metadata"]["name"] for p in res.task("left")["resources"]]
    assert names and all(n.startswith("nvidia-device-plugin") for n in names), names
    assert lab.node_obj("nomemres")["spec"].get("unschedulable") is True
