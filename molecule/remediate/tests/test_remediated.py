"""Molecule verify (testinfra) for the remediate scenario: each seeded failure was fixed by the
right role, the final audit is clean but for the cluster components left for a person, and the
rollout respected the unavailability budget.

Runs once per lab node (``--hosts ansible://gpu_nodes``); cluster checks use the real
kubernetes client against the lab's API double (kubeconfig from the inventory).
"""
import json
import os
import time

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config

EPHEMERAL = os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "")
STATE = os.path.join(EPHEMERAL, "remediate")
INVENTORY = os.path.join(os.environ.get("KUBEGPU_LAB_ROOT", "/var/lib/kubegpu-lab"),
                         "molecule-remediate", "inventory.yml")
OPERATOR_CORDONED = "gpu-uuid"
MAX_UNAVAILABLE = 2
# The R570 branch's security floor (catalog/v2/driver.yml, NVIDIA security bulletin 5747): above
# gpu-r570's defect fix 570.172.08, so the higher one wins on every node.
TARGET = "570.211.01"
TOOLKIT_TARGET = "1.19.1"  # highest first-fixed release in catalog/v2/container-toolkit.yml
# Cluster components the GPU Operator / Helm deploy: no node role fixes them, the plan leaves
# them for a person and they stay in the final report. The demo API runs GPU Operator v25.3.1 and
# MIG manager v0.12.1 (every node), device plugin v0.17.2 with cdi-annotations (the h100 pool)
# and v0.14.5 (gpu-cpumanager: the XID 109 defect; remediate sets PASS_DEVICE_SPECS, not the image).
LEFT_FOR_PERSON = {"security.device-plugin", "security.gpu-operator", "security.mig-manager", "defect.device-plugin",
                   # R570 (570.211.01 too) is not among the branches of NVIDIA's latest driver bulletin
                   "driver.unlisted_branch",
                   # R570 is past NVIDIA's support (not in the support matrix, rules/lifecycle.py)
                   "driver.unsupported_branch"}


def inventory_vars():
    with open(INVENTORY) as fh:
        return yaml.safe_load(fh)["all"]["vars"]


@pytest.fixture(scope="module")
def api():
    k8s_config.load_kube_config(config_file=inventory_vars()["kubegpu_kubeconfig"])
    return k8s.CoreV1Api()


@pytest.fixture(scope="module")
def history():
    path = os.path.join(os.path.dirname(inventory_vars()["kubegpu_kubeconfig"]), "api", "history.jsonl")
    with open(os.path.join(STATE, "history_lines")) as fh:
        start = int(fh.read().strip() or 0)
    with open(path) as fh:
        return [json.loads(line) for line in fh.readlines()[start:] if line.strip()]


def seed_of(host):
    return host.ansible.get_variables()["kubegpu_lab_seed"]


def node_of(host):
    return host.ansible.get_variables()["inventory_hostname"]


def dpkg_version(host, pkg):
    cmd = host.run("dpkg-query -W -f '${Status}|${Version}' %s" % pkg)
    status, _sep, version = cmd.stdout.partition("|")
    return version if cmd.rc == 0 and status.endswith(" installed") else None


def gpu_pod(api, node, name):
    """A fresh GPU pod bound to ``node`` (no scheduler in the lab: nodeName set); returns its
    container's devices.list lines once Running."""
    body = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "labels": {"app": "verify"}},
            "spec": {"nodeName": node, "restartPolicy": "Never",
                     "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                     "containers": [{"name": "cuda", "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
                                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
    api.create_namespaced_pod("default", body)
    deadline = time.monotonic() + 300  # waits for Running; the deadline only bounds a failure
    while time.monotonic() < deadline:
        pod = api.read_namespaced_pod(name, "default")
        if pod.status.phase == "Running":
            return pod
        assert pod.status.phase not in ("Failed", "Succeeded"), pod.status
        time.sleep(1)
    raise AssertionError("pod %s on %s never ran: %s" % (name, node, pod.status))


def container_devices(host, pod_name):
    script = r'''
import json, os
root = "/run/kubegpu-lab/cgroup/devices"
out = []
for d, dirs, files in os.walk(root):
    if "devices.list" not in files or "cgroup.procs" not in files:
        continue
    pids = open(os.path.join(d, "cgroup.procs")).read().split()
    for pid in pids:
        try:
            env = dict(e.split("=", 1) for e in open("/proc/%s/environ" % pid).read().split("\0") if "=" in e)
        except OSError:
            continue
        if env.get("HOSTNAME") == POD and env.get("NVIDIA_VISIBLE_DEVICES"):
            out.append([l.strip() for l in open(os.path.join(d, "devices.list")) if l.strip()])
            break
print(json.dumps(out))
'''.replace("POD", json.dumps(pod_name))
    cmd = host.run("python3 -c %s" % _quote(script))
    assert cmd.rc == 0, cmd.stderr
    lists = json.loads(cmd.stdout)
    assert lists, "no GPU container of %s found on the node" % pod_name
    return lists[0]


def _quote(text):
    return "'" + text.replace("'", "'\"'\"'") + "'"


def proc_major(host, name):
    out = host.check_output("awk '$2 == \"%s\" {print $1}' /proc/devices" % name).split()
    return out[0] if out else None


# --------------------------------------------------------------------------------------------
# The final audit


def _read_json(*parts):
    with open(os.path.join(STATE, "reports", *parts)) as fh:
        return json.load(fh)


def test_final_audit_is_clean(host):
    """Nothing is left but what the remediation plans marked manual (left for a person), and
    that is exactly the cluster components - which were already there before and stay as found."""
    if node_of(host) != "gpu-healthy":
        pytest.skip("fleet-wide check, run once")
    report = _read_json("after", "kubegpu-audit.json")
    verdict = _read_json("after", "kubegpu-remediate-verdict.json")
    assert report["summary"]["nodes_audited"] == 7
    # the cluster components' findings are listed once each with the nodes they affect; none is
    # about the cluster as a whole (cluster.device_plugin_outdated)
    assert all(f["nodes"] for f in report["cluster"]["findings"]), report["cluster"]
    found = per_node(report)
    left = {(name, e["id"]) for e in verdict["left_for_person"] for name in ([e["node"]] if e["node"] else e["nodes"])}
    assert verdict["unresolved"] == [], verdict["unresolved"]
    assert found == left, (found - left, left - found)
    assert {fid for _node, fid in found} == LEFT_FOR_PERSON, found
    # (reports/before is rewritten by the idempotence run, which found nothing to fix but them)
    before = _read_json("before", "kubegpu-audit.json")
    assert per_node(before) == found


def per_node(report):
    """(node, finding id) of every finding: each node's own and the cluster's on the nodes they affect."""
    return ({(n["name"], f["id"]) for n in report["nodes"] for f in n["findings"]}
            | {(name, f["id"]) for f in report["cluster"]["findings"] for name in f["nodes"]})


def test_rollout_respected_budget_and_cordons(host, api, history):
    if node_of(host) != "gpu-healthy":
        pytest.skip("fleet-wide check, run once")
    unavailable = [e.get("unavailable_gpu_nodes") or [] for e in history]
    assert unavailable and max(len(u) for u in unavailable) <= MAX_UNAVAILABLE, \
        max(unavailable, key=len)
    # something was really taken down: nodes other than the operator's were cordoned at some point
    assert any(set(u) - {OPERATOR_CORDONED} for u in unavailable)
    nodes = {n.metadata.name: n for n in api.list_node().items}
    assert nodes[OPERATOR_CORDONED].spec.unschedulable is True
    for name, node in nodes.items():
        if name != OPERATOR_CORDONED:
            assert not node.spec.unschedulable, name
        ann = node.metadata.annotations or {}
        assert "kubegpu.io/maintenance-failed" not in ann, (name, ann)
    # no uncordon of the operator's node, ever
    for e in history:
        if e.get("resource") == "nodes" and e.get("name") == OPERATOR_CORDONED and e.get("verb") == "patch":
            # the history keeps long bodies truncated (the kubelet's status patches): match text
            body = (e.get("body") or "").replace(" ", "")
            assert '"unschedulable":false' not in body, e                        # merge patch
            assert '"path":"/spec/unschedulable","value":false' not in body, e   # JSON patch (node_maintenance)


# --------------------------------------------------------------------------------------------
# Per seed


def test_r570_node_on_fixed_driver_with_compute_utils(host, api):
    if seed_of(host) != "r570-nvml-hang":
        pytest.skip("R570 node only")
    for pkg in ("nvidia-driver-570", "libnvidia-compute-570", "nvidia-utils-570", "nvidia-dkms-570",
                "nvidia-kernel-common-570", "nvidia-compute-utils-570"):
        assert (dpkg_version(host, pkg) or "").startswith(TARGET + "-"), pkg
    assert host.file("/usr/bin/nvidia-cuda-mps-control").exists
    smi = host.run("timeout 10 nvidia-smi -L")  # NVML answers (it hung before the fix)
    assert smi.rc == 0 and "GPU 0" in smi.stdout, smi
    assert host.file("/proc/driver/nvidia/version").contains(TARGET)
    held = host.check_output("dpkg --get-selections | awk '$2 == \"hold\" {print $1}'").split()
    assert "nvidia-driver-570" in held and "nvidia-compute-utils-570" in held
    # the plugin now advertises the MIG devices the split created before the fix
    alloc = api.read_node("gpu-r570").status.allocatable
    assert any(k.startswith("nvidia.com/mig-") for k in alloc), alloc


def test_stale_checkpoint_replaced(host):
    if seed_of(host) != "stale-checkpoint":
        pytest.skip("UUID-change node only")
    uuids = set(host.check_output("nvidia-smi -L").replace(")", " ").split())
    ck = json.loads(host.file("/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint").content_string)
    used = {d for e in ck["Data"]["PodDeviceEntries"] or [] for ids in e["DeviceIDs"].values() for d in ids}
    assert used <= uuids, used - uuids
    # The drain evicted the pod whose entry named the old UUIDs and the kubelet pruned it, so
    # checkpoint_sync may have found nothing left to remove; any backup it made is 0600.
    backups = host.run("find /var/lib/kubelet/device-plugins -maxdepth 1 -name 'kubelet_internal_checkpoint.*.bak' "
                       "-printf '%m %p\\n'").stdout.split("\n")
    assert all(b.startswith("600 ") for b in backups if b), backups


def test_uvm_late_node_gives_gpu_containers_uvm(host, api):
    if seed_of(host) != "uvm-late":
        pytest.skip("uvm-late node only")
    loaded = host.run("grep -rhs '^nvidia[-_]uvm' /etc/modules-load.d/")
    assert loaded.rc == 0, "nvidia-uvm is not loaded at boot"
    gpu_pod(api, "gpu-uvm-late", "verify-uvm")
    try:
        lines = container_devices(host, "verify-uvm")
        uvm = "c %s:0 " % proc_major(host, "nvidia-uvm")
        assert any(line.startswith(uvm) for line in lines), lines
    finally:
        api.delete_namespaced_pod("verify-uvm", "default", grace_period_seconds=0)


RECONCILED = "[cpumanager] reconcileState: updated container cgroups"


def wait_for_cpu_manager_reconciles(host, count=2, timeout=300):
    """Wait until the node's kubelet logged ``count`` CPU manager reconcile passes after now
    (verbosity 4 logs each): with 2, a whole pass ran over every container that exists now."""
    out = host.check_output("journalctl -u kubelet -n 1 --show-cursor -o cat --no-pager")
    cursor = [line[len("-- cursor: "):] for line in out.splitlines() if line.startswith("-- cursor: ")][-1]
    deadline = time.monotonic() + timeout
    while True:
        lines = host.check_output("journalctl -u kubelet -o cat --no-pager --after-cursor=%s", cursor).splitlines()
        if len([line for line in lines if RECONCILED in line]) >= count:
            return
        assert time.monotonic() < deadline, "no %d CPU manager passes logged within %s s" % (count, timeout)
        time.sleep(1)  # poll interval


def test_cpumanager_node_keeps_gpu_devices(host, api):
    if seed_of(host) != "cpumanager-device-specs":
        pytest.skip("CPU manager node only")
    ds = k8s.AppsV1Api().read_namespaced_daemon_set("nvidia-device-plugin-legacy", "kube-system")
    env = {e.name: e.value for e in ds.spec.template.spec.containers[0].env or []}
    assert env.get("PASS_DEVICE_SPECS") == "true", env
    gpu_pod(api, "gpu-cpumanager", "verify-cpumanager")
    try:
        wait_for_cpu_manager_reconciles(host)  # passes that ran over this container, not a sleep
        lines = container_devices(host, "verify-cpumanager")
        assert any(line.startswith("c 195:") for line in lines), lines
    finally:
        api.delete_namespaced_pod("verify-cpumanager", "default", grace_period_seconds=0)


def test_memory_reservation_written(host, api):
    if seed_of(host) != "no-memory-reservation":
        pytest.skip("no-memory-reservation node only")
    cfg = yaml.safe_load(host.file("/var/lib/kubelet/config.yaml").content_string)
    assert cfg["kubeReserved"]["memory"] == "5489Mi", cfg.get("kubeReserved")
    assert set(cfg["evictionHard"]) == {"memory.available", "nodefs.available", "imagefs.available",
                                        "nodefs.inodesFree"}
    assert cfg["cgroupDriver"] == "systemd"  # the rest of the config is intact
    node = api.read_node("gpu-nomemres").status
    cap, alloc = node.capacity["memory"], node.allocatable["memory"]
    assert _bytes(cap) - _bytes(alloc) >= 5489 * (1 << 20)


def _bytes(q):
    units = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30}
    for u, m in units.items():
        if q.endswith(u):
            return int(q[:-2]) * m
    return int(q)


def test_row_remap_node_was_drained_and_its_gpu_reset_not_rebooted(host, history):
    if seed_of(host) != "row-remap-pending":
        pytest.skip("row remap node only")
    node = node_of(host)
    # Drained in its batch: the node was among the unavailable ones at some point.
    assert any(node in (e.get("unavailable_gpu_nodes") or []) for e in history)
    # Repaired by a GPU reset (kubegpu.fleet.gpu_reset through the fake nvidia-smi -r), not a
    # reboot: NVML no longer reports the remap pending, the node kept the boot whose kernel log
    # holds the Xid 63, and the reset is recorded for this boot (gpu_facts counts the Xid as
    # cleared by it).
    xml = host.check_output("nvidia-smi -q -x")
    assert "<remapped_row_pending>No</remapped_row_pending>" in xml, xml[-2000:]
    assert "NVRM: Xid (PCI:0000:18:00): 63" in host.run("cat /run/kubegpu-lab/kmsg 2>/dev/null").stdout
    record = json.loads(host.file("/var/lib/kubegpu/gpu-reset.json").content_string)
    assert record["boot_id"] == host.file("/proc/sys/kernel/random/boot_id").content_string.strip()
    assert list(record["resets"]) == ["0000:18:00.0"]
    boots = set((e.get("nodes") or {}).get(node, {}).get("bootID") for e in history
                if (e.get("nodes") or {}).get(node, {}).get("bootID"))
    assert len(boots) == 1, boots


def test_every_node_on_the_security_fixes(host):
    """security.driver and security.container-toolkit were on every node: the driver went to the
    branch's security floor (and runs it after the reboot), the toolkit to its highest fix."""
    for pkg in ("nvidia-driver-570", "libnvidia-compute-570", "nvidia-utils-570"):
        assert (dpkg_version(host, pkg) or "").startswith(TARGET + "-"), (pkg, dpkg_version(host, pkg))
    assert host.file("/proc/driver/nvidia/version").contains(TARGET)
    for pkg in ("nvidia-container-toolkit", "nvidia-container-toolkit-base"):
        assert (dpkg_version(host, pkg) or "").startswith(TOOLKIT_TARGET + "-"), (pkg, dpkg_version(host, pkg))


def test_fabric_manager_in_lockstep_with_the_driver(host):
    fm = dpkg_version(host, "nvidia-fabricmanager-570")
    if node_of(host) != "gpu-nomemres":
        assert fm is None  # only the NVSwitch node has fabric manager
        return
    assert (fm or "").startswith(TARGET + "-"), fm
    assert host.service("nvidia-fabricmanager").is_running


def test_no_node_left_with_a_reboot_sentinel(host):
    assert not host.file("/run/reboot-required").exists
