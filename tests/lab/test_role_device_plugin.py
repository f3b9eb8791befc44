"""kubegpu.fleet.device_plugin against real lab nodes and the API double.

One lab (1-GPU nodes, 2 on ``cpumgr`` so a probe pod fits beside its GPU pod): ``healthy`` (pool h100, served by the good DaemonSet), ``cpumgr``
(static CPU manager, pool h100-legacy served by the legacy DaemonSet without PASS_DEVICE_SPECS,
a bare GPU pod), ``uvmlate`` (nvidia-uvm loaded after the plugin started, no NVIDIA hook, a bare
GPU pod placed late) and ``oldctk`` (nvidia-container-toolkit 1.14.3 with a 570 driver).
The DaemonSets are the demo's (lab/profiles/demo.yml). Tests run in file order.
"""
import os
import time

import pytest
import yaml

from lab_fixture import (REPO, journal_cursor, lab_factory, wait_for,  # noqa: F401  pylint: disable=unused-import
                         wait_for_cpu_manager_reconciles)

RESERVED = {"kubeReserved": {"cpu": "1", "memory": "5489Mi"}, "systemReserved": {"cpu": "500m", "memory": "1Gi"},
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "10%", "imagefs.available": "15%",
                             "nodefs.inodesFree": "5%"}}


def _demo_daemonsets():
    with open(REPO + "/lab/profiles/demo.yml") as f:
        demo = yaml.safe_load(f)
    return [m for m in demo["cluster"]["manifests"] if m["kind"] == "DaemonSet"]


GOOD, LEGACY = "nvidia-device-plugin-daemonset", "nvidia-device-plugin-legacy"
PROFILE = {
    "name": "dplugin",
    "defaults": {"gpus": {"count": 1}, "memory": "62Gi", "pool": "h100",
                 "kubelet": {"config": dict(RESERVED, cgroupDriver="systemd", cpuManagerPolicy="none")}},
    "nodes": [
        {"name": "healthy", "seed": "healthy"},
        {"name": "cpumgr", "seed": "cpumanager-device-specs", "pool": "h100-legacy", "gpus": {"count": 2},
         "kubelet": {"config": {"cpuManagerPolicy": "static"}},
         "pods": [{"name": "train-{node}", "namespace": "ml", "gpus": 1, "app": "train", "cpu": 2,
                   "memory_request": "8Gi", "controller": "none"}]},
        {"name": "uvmlate", "seed": "uvm-late", "uvm": "late", "runtime": {"nvidia_hook": False},
         "late_pods": [{"name": "train-late-{node}", "namespace": "ml", "gpus": 1, "app": "train",
                        "controller": "none"}]},
        {"name": "oldctk", "seed": "healthy", "driver": {"container_toolkit": "1.14.3"}, "dev_char_symlinks": False},
    ],
    "cluster": {"manifests": [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}}]
                + _demo_daemonsets()},
}


@pytest.fixture(scope="module")
def lab(lab_factory):  # noqa: F811
    return lab_factory(PROFILE)


# --------------------------------------------------------------------------------- helpers

def cluster_play(lab, **extra):
    """The cluster entry point as kubegpu.fleet.remediate calls it (localhost, local connection)."""
    return [{"hosts": "localhost", "connection": "local", "gather_facts": False,
             "vars": dict({"ansible_python_interpreter": "{{ ansible_playbook_python }}"}, **extra),
             "tasks": [{"name": "device plugin DaemonSets", "ansible.builtin.include_role": {
                 "name": "kubegpu.fleet.device_plugin", "tasks_from": "cluster"}}]}]


def node_play(hosts, **extra):
    return [{"hosts": hosts, "gather_facts": False, "vars": extra,
             "tasks": [{"name": "device plugin node", "ansible.builtin.include_role": {
                 "name": "kubegpu.fleet.device_plugin"}}]}]


def changed(res):
    return sum(s.get("changed", 0) for s in res.stats.values())


def failures(res):
    return dict((h, s) for h, s in res.stats.items() if s.get("failures") or s.get("unreachable"))


def ds(lab, name):
    return lab.get("/apis/apps/v1/namespaces/kube-system/daemonsets/%s" % name)


def plugin_pod(lab, node):
    pods = [p for p in lab.pods(node) if p["metadata"]["name"].startswith("nvidia-device-plugin")
            and not p["metadata"].get("deletionTimestamp")]
    assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
    return pods[0]


def env_of(obj):
    spec = obj["spec"]["template"]["spec"] if "template" in obj["spec"] else obj["spec"]
    return dict((e["name"], e.get("value")) for e in spec["containers"][0].get("env") or [])


def gpu_pod(name, node):
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ml", "labels": {"app": name}},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 2,
                     "containers": [{"name": "main", "image": "nvcr.io/nvidia/cuda:12.8.1-base-ubuntu22.04",
                                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}


def phase(lab, name, ns="ml"):
    return ((lab.pod(ns, name) or {}).get("status") or {}).get("phase")


def container_of(lab, node, pod_name):
    return wait_for(lambda: [c for c in lab.container_devices(node) if c["pod"] == pod_name], 180,
                    "the container of %s" % pod_name)[0]


def new_gpu_container(lab, node, name):
    lab.create([gpu_pod(name, node)])
    wait_for(lambda: phase(lab, name) == "Running", 180, "%s Running" % name)
    return container_of(lab, node, name)


def nvidia_lines(lines):
    return sorted(set(line for line in lines if line.startswith("c 195:")))


def devices_list(lab, node, path):
    return lab.ssh(node, "cat %s/devices.list" % path).stdout.splitlines()


def files_on(lab, node, paths):
    out = lab.ssh(node, "for f in %s; do [ -e $f ] && echo $f; done; true" % " ".join(paths)).stdout.split()
    return sorted(out)


ROLE = "kubegpu.fleet.device_plugin : "
with open(os.path.join(REPO, "lab", "packages", "catalog.yml")) as _f:
    NEWEST_TOOLKIT = max((str(v) for v in yaml.safe_load(_f)["container_toolkit_versions"]),
                         key=lambda v: tuple(int(x) for x in v.split(".")))
GATHER = ROLE + "Read the kubelet of a GPU node whose CPU manager policy is not known yet"
NODE_FILES = ["/etc/modules-load.d/nvidia-uvm.conf", "/etc/systemd/system/nvidia-uvm-init.service",
              "/etc/systemd/system/nvidia-dev-char-symlinks.service", "/etc/udev/rules.d/71-nvidia-dev-char.rules"]


# ------------------------------------------------------------------- (a) CPU manager node

def test_cluster_check_mode_changes_nothing(lab, ansible):
    before = ds(lab, LEGACY)
    res = ansible.playbook(cluster_play(lab, kubegpu_kubeconfig=lab.kubeconfig), inventory=lab.inventory, check=True)
    assert res.rc == 0, res.stdout[-4000:]
    patch = res.task(ROLE + "Patch the device plugin DaemonSets")
    assert patch["changed"] is True
    assert [r["item"]["name"] for r in patch["results"]] == [LEGACY]
    after = ds(lab, LEGACY)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert "PASS_DEVICE_SPECS" not in env_of(after)


def test_without_device_specs_a_new_gpu_pod_loses_its_devices(lab):
    # the contrast: before the fix the CPU manager reconcile drops the hook's c 195:* entries
    ctr = new_gpu_container(lab, "cpumgr", "probe-before")
    assert (ctr["visible"] or "").startswith("GPU-"), ctr
    wait_for(lambda: not nvidia_lines(devices_list(lab, "cpumgr", ctr["path"])), 180,
             "the CPU manager to drop the NVIDIA entries of probe-before")
    # the nodes are still in the container's /dev: the cgroup is what now says no
    assert lab.ssh("cpumgr", "test -c /proc/%d/root/dev/nvidiactl" % ctr["pid"], check=False).returncode == 0
    lab.kubectl("delete", "pod", "-n", "ml", "probe-before", "--timeout=180s", timeout=240)


def test_cluster_sets_pass_device_specs_on_the_legacy_daemonset_only(lab, ansible):
    good_before, legacy_before = ds(lab, GOOD), ds(lab, LEGACY)
    old_cpumgr, old_healthy = plugin_pod(lab, "cpumgr"), plugin_pod(lab, "healthy")
    assert old_cpumgr["metadata"]["ownerReferences"][0]["name"] == LEGACY
    t0 = time.monotonic()
    res = ansible.playbook(cluster_play(lab, kubegpu_kubeconfig=lab.kubeconfig), inventory=lab.inventory)
    took = time.monotonic() - t0
    assert res.rc == 0, res.stdout[-4000:]
    # the CPU manager policy was read from the nodes' kubelets (nothing known beforehand)
    gathered = [t for t in res.tasks() if t["_task"] == GATHER]
    assert sorted(t["ansible_facts"]["kubelet"]["cpu_manager_policy"] for t in gathered) == [
        "none", "none", "none", "static"]
    assert res.task(ROLE + "Work out the nodes that run the static CPU manager policy")["ansible_facts"][
        "kubegpu_device_plugin_static_nodes"] == ["cpumgr"]
    legacy = ds(lab, LEGACY)
    assert env_of(legacy) == {"MIG_STRATEGY": "single", "FAIL_ON_INIT_ERROR": "true", "PASS_DEVICE_SPECS": "true"}
    ctr, ctr_before = legacy["spec"]["template"]["spec"]["containers"][0], legacy_before["spec"]["template"]["spec"]["containers"][0]
    assert dict(ctr, env=None) == dict(ctr_before, env=None)  # image, securityContext, mounts untouched
    assert legacy["spec"]["template"]["spec"]["nodeSelector"] == legacy_before["spec"]["template"]["spec"]["nodeSelector"]
    good = ds(lab, GOOD)
    assert good["metadata"]["resourceVersion"] == good_before["metadata"]["resourceVersion"]
    # RollingUpdate replaced the legacy pool's plugin pod; the other pool's pod is the same
    new_cpumgr = plugin_pod(lab, "cpumgr")
    assert new_cpumgr["metadata"]["uid"] != old_cpumgr["metadata"]["uid"]
    assert new_cpumgr["status"]["phase"] == "Running" and env_of(new_cpumgr)["PASS_DEVICE_SPECS"] == "true"
    assert plugin_pod(lab, "healthy")["metadata"]["uid"] == old_healthy["metadata"]["uid"]
    assert legacy["status"]["updatedNumberScheduled"] == legacy["status"]["numberReady"] == 1
    print("cluster entry point: %.1fs" % took)

    again = ansible.playbook(cluster_play(lab, kubegpu_kubeconfig=lab.kubeconfig), inventory=lab.inventory)
    assert again.rc == 0 and changed(again) == 0, again.stats
    assert ds(lab, LEGACY)["metadata"]["resourceVersion"] == legacy["metadata"]["resourceVersion"]


def test_after_the_fix_a_new_gpu_pod_keeps_its_devices(lab):
    wait_for(lambda: lab.node_obj("cpumgr")["status"]["allocatable"].get("nvidia.com/gpu") not in (None, "0"),
             180, "the new plugin registered")
    ctr = new_gpu_container(lab, "cpumgr", "probe-after")
    before = nvidia_lines(ctr["lines"])
    assert "c 195:255 rw" in before or "c 195:255 rwm" in before, before
    # two reconcile passes the kubelet logged after the read, not a sleep through two periods
    wait_for_cpu_manager_reconciles(lab, "cpumgr", journal_cursor(lab, "cpumgr"))
    assert nvidia_lines(devices_list(lab, "cpumgr", ctr["path"])) == before
    lab.kubectl("delete", "pod", "-n", "ml", "probe-after", "--timeout=180s", timeout=240)


def test_opt_in_recreate_fixes_the_broken_bare_pod(lab, ansible):
    old = lab.pod("ml", "train-cpumgr")
    ctr = container_of(lab, "cpumgr", "train-cpumgr")
    assert not nvidia_lines(ctr["lines"]), "the seeded pod should have lost its devices"
    kv = {"kubegpu_device_plugin_recreate_broken_pods": True}
    check = ansible.playbook(node_play("cpumgr", **kv), inventory=lab.inventory, check=True)
    assert check.rc == 0, check.stdout[-4000:]
    assert lab.pod("ml", "train-cpumgr")["metadata"]["uid"] == old["metadata"]["uid"]
    res = ansible.playbook(node_play("cpumgr", **kv), inventory=lab.inventory)
    assert res.rc == 0, res.stdout[-4000:]
    assert res.task(ROLE + "Delete the device plugin pod (its DaemonSet replaces it)", "cpumgr").get("skipped")
    new = lab.pod("ml", "train-cpumgr")
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    assert new["spec"]["nodeName"] == "cpumgr" and new["status"]["phase"] == "Running"
    assert new["metadata"]["labels"] == old["metadata"]["labels"]
    assert new["spec"]["containers"][0]["resources"] == old["spec"]["containers"][0]["resources"]
    ctr = container_of(lab, "cpumgr", "train-cpumgr")
    before = nvidia_lines(ctr["lines"])
    assert before
    wait_for_cpu_manager_reconciles(lab, "cpumgr", journal_cursor(lab, "cpumgr"))
    assert nvidia_lines(devices_list(lab, "cpumgr", ctr["path"])) == before
    again = ansible.playbook(node_play("cpumgr", **kv), inventory=lab.inventory)
    assert again.rc == 0 and changed(again) == 0, [t["_task"] for t in again.tasks("cpumgr") if t.get("changed")]
    assert lab.pod("ml", "train-cpumgr")["metadata"]["uid"] == new["metadata"]["uid"]


# --------------------------------------------------------------------- (b) nvidia-uvm late

def test_uvm_late_check_mode_changes_nothing(lab, ansible):
    plugin = plugin_pod(lab, "uvmlate")
    train = lab.pod("ml", "train-late-uvmlate")
    res = ansible.playbook(node_play("uvmlate", kubegpu_device_plugin_recreate_broken_pods=True),
                           inventory=lab.inventory, check=True)
    assert res.rc == 0, res.stdout[-4000:]
    assert changed(res) > 0
    assert res.task(ROLE + "Delete the device plugin pod (its DaemonSet replaces it)", "uvmlate")["changed"] is True
    assert files_on(lab, "uvmlate", NODE_FILES[:2]) == []
    assert plugin_pod(lab, "uvmlate")["metadata"]["uid"] == plugin["metadata"]["uid"]
    assert lab.pod("ml", "train-late-uvmlate")["metadata"]["uid"] == train["metadata"]["uid"]


def test_uvm_late_fixed_now_and_idempotent(lab, ansible):
    uvm = lab.proc_major("uvmlate", "nvidia-uvm")
    assert uvm is not None
    old_plugin = plugin_pod(lab, "uvmlate")
    broken = container_of(lab, "uvmlate", "train-late-uvmlate")
    assert "c %d:0 rw" % uvm not in broken["lines"]
    assert lab.ssh("uvmlate", "test -L /dev/char/%d:0" % uvm, check=False).returncode != 0
    kv = {"kubegpu_device_plugin_recreate_broken_pods": True}
    t0 = time.monotonic()
    res = ansible.playbook(node_play("uvmlate", **kv), inventory=lab.inventory)
    took = time.monotonic() - t0
    assert res.rc == 0, res.stdout[-4000:]
    assert files_on(lab, "uvmlate", NODE_FILES) == sorted(NODE_FILES)
    units = lab.ssh("uvmlate", "systemctl is-enabled nvidia-uvm-init.service nvidia-dev-char-symlinks.service; "
                               "ls /etc/systemd/system/kubelet.service.wants/").stdout
    assert units.split()[:2] == ["enabled", "enabled"] and "nvidia-uvm-init.service" in units
    assert lab.ssh("uvmlate", "readlink -f /dev/char/%d:0" % uvm).stdout.strip() == "/dev/nvidia-uvm"
    # the plugin pod was replaced and the node advertises its GPU again
    new_plugin = plugin_pod(lab, "uvmlate")
    assert new_plugin["metadata"]["uid"] != old_plugin["metadata"]["uid"]
    assert lab.node_obj("uvmlate")["status"]["allocatable"]["nvidia.com/gpu"] == "1"
    # the broken bare pod was created again and now has nvidia-uvm
    fixed = container_of(lab, "uvmlate", "train-late-uvmlate")
    assert "c %d:0 rw" % uvm in fixed["lines"]
    print("main on uvmlate: %.1fs" % took)

    again = ansible.playbook(node_play("uvmlate", **kv), inventory=lab.inventory)
    assert again.rc == 0, again.stdout[-4000:]
    assert changed(again) == 0, [t["_task"] for t in again.tasks("uvmlate") if t.get("changed")]
    assert plugin_pod(lab, "uvmlate")["metadata"]["uid"] == new_plugin["metadata"]["uid"]


def test_uvm_loaded_before_kubelet_after_a_reboot(lab):
    boot_before = lab.node("uvmlate").boot_id()
    lab.node("uvmlate").reboot()
    assert lab.node("uvmlate").boot_id() != boot_before
    wait_for(lambda: lab.node_obj("uvmlate")["status"]["nodeInfo"]["bootID"] != boot_before, 180, "new bootID")
    wait_for(lambda: lab.ssh("uvmlate", "test -e /run/kubegpu-lab/events-done", check=False).returncode == 0,
             180, "the node's boot events")
    # nvidia-uvm-init ran before kubelet started; the late "CUDA job" found nvidia-uvm loaded
    order = lab.ssh("uvmlate", "systemctl show -p ActiveEnterTimestampMonotonic --value nvidia-uvm-init.service; "
                               "systemctl show -p ExecMainStartTimestampMonotonic --value kubelet.service").stdout.split()
    assert 0 < int(order[0]) <= int(order[1]), order
    events = lab.ssh("uvmlate", "journalctl -b -u kubegpu-lab-events --no-pager -o cat").stdout
    assert "loads nvidia-uvm now" not in events, events
    uvm = lab.proc_major("uvmlate", "nvidia-uvm")
    assert lab.ssh("uvmlate", "readlink -f /dev/char/%d:0" % uvm).stdout.strip() == "/dev/nvidia-uvm"
    wait_for(lambda: lab.node_obj("uvmlate")["status"]["allocatable"].get("nvidia.com/gpu") == "1", 180,
             "the plugin registered after the reboot")
    lab.kubectl("delete", "pod", "-n", "ml", "train-late-uvmlate", "--timeout=180s", timeout=240)
    ctr = new_gpu_container(lab, "uvmlate", "after-reboot")
    assert "c %d:0 rw" % uvm in ctr["lines"], ctr["lines"]


# ----------------------------------------------------------------- old nvidia-ctk, 570 driver

def test_old_nvidia_ctk_fails_clearly_then_is_upgraded(lab, ansible):
    assert "1.14.3" in lab.ssh("oldctk", "nvidia-ctk --version").stdout
    # the command this role would otherwise run really fails with this driver
    broken = lab.ssh("oldctk", "nvidia-ctk system create-dev-char-symlinks --create-all", check=False)
    assert broken.returncode != 0 and "nvidia-frontend" in broken.stderr
    res = ansible.playbook(node_play("oldctk"), inventory=lab.inventory)
    assert res.rc != 0 and "oldctk" in failures(res)
    msg = res.task(ROLE + "Refuse to run a broken nvidia-ctk", "oldctk")["msg"]
    assert "1.14.3" in msg and "1.14.6" in msg and "550.x" in msg, msg
    assert files_on(lab, "oldctk", NODE_FILES[3:]) == []

    res = ansible.playbook(node_play("oldctk", kubegpu_device_plugin_upgrade_toolkit=True), inventory=lab.inventory)
    assert res.rc == 0, res.stdout[-4000:]
    # upgraded to the newest toolkit the lab's repository carries
    assert NEWEST_TOOLKIT in lab.ssh("oldctk", "nvidia-ctk --version").stdout
    assert lab.ssh("oldctk", "dpkg-query -W -f='${Version}' nvidia-container-toolkit").stdout.startswith(NEWEST_TOOLKIT + "-")
    gpu = lab.ssh("oldctk", "readlink -f /dev/char/195:0").stdout.strip()
    assert gpu == "/dev/nvidia0"
    again = ansible.playbook(node_play("oldctk", kubegpu_device_plugin_upgrade_toolkit=True), inventory=lab.inventory)
    assert again.rc == 0 and changed(again) == 0, [t["_task"] for t in again.tasks("oldctk") if t.get("changed")]


def test_skip_label_leaves_the_node_alone(lab, ansible):
    lab.kubectl("label", "node", "healthy", "kubegpu.io/maintenance=skip")
    try:
        res = ansible.playbook(node_play("healthy", kubegpu_device_plugin_restart_pod="always"),
                               inventory=lab.inventory)
        assert res.rc == 0 and changed(res) == 0, res.stdout[-3000:]
        skipped = res.task(ROLE + "Leave a node labelled for no maintenance alone", "healthy")
        assert "labelled kubegpu.io/maintenance=skip" in skipped["msg"]
        assert files_on(lab, "healthy", NODE_FILES[1:2]) == []
    finally:
        lab.kubectl("label", "node", "healthy", "kubegpu.io/maintenance-")


def test_cluster_audit_findings_drive_auto_mode(lab, ansible):
    """Audit results in hostvars (what remediate has) are enough: no kubelet gathering."""
    plays = [{"hosts": "gpu_nodes", "gather_facts": False, "tasks": [
        {"name": "fake an audit result", "ansible.builtin.set_fact": {
            "kubegpu_audit": {"node": "{{ kubegpu_node_name }}", "status": "audited", "findings": []}}}]}]
    plays += cluster_play(lab, kubegpu_kubeconfig=lab.kubeconfig, kubegpu_device_plugin_pass_device_specs="auto")
    res = ansible.playbook(plays, inventory=lab.inventory)
    assert res.rc == 0, res.stdout[-3000:]
    assert [t for t in res.tasks() if t["_task"] == GATHER] == []
    assert res.task(ROLE + "Work out the nodes that run the static CPU manager policy")["ansible_facts"][
        "kubegpu_device_plugin_static_nodes"] == []
    assert changed(res) == 0
