"""The rolling_reboot role's GPU reset (tasks/gpu_reset.yml) with the GPU Operator's clients
paused around it: real ansible-playbook, the API double for the cluster (its DaemonSet controller
deletes and re-creates the operand pods), the fake NVML / nvidia-smi for the node's GPUs
(lab/fakes/nvml), the node's /proc and /dev as directories the modules are pointed at.

What the role must do: pause before the reset, restore afterwards whatever the reset did (block /
always), reset nothing and fall back to the reboot with the reason when the pause fails."""
import os
import sys

import pytest

from apidouble_fixture import api_double, api_double_factory  # noqa: F401 pylint: disable=unused-import
from test_api_double import play_env
from test_gpu_operands_playbook import OPERATOR_LABELS, P, PAUSED, node_patches, operand_pods, operator_cluster, \
    stored_node

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "lab", "fakes", "nvml"))
import fakenvml  # noqa: E402  pylint: disable=wrong-import-position

V = fakenvml.DEFAULT_VERSION
PENDING = {"remapped_rows": {"correctable": 0, "uncorrectable": 1, "pending": True, "failure": False}}
BUS = "00000000:28:00.0"
RESET = "kubegpu.fleet.rolling_reboot : Reset the GPUs on the drained node (nvidia-smi -r, NVIDIA's preconditions checked)"
PAUSE = "kubegpu.fleet.rolling_reboot : Pause the GPU Operator's GPU clients on the node (their nvidia.com/gpu.deploy.* labels)"
RESTORE = "kubegpu.fleet.rolling_reboot : Restore the GPU Operator's GPU clients on the node (the recorded labels, where unchanged since)"


@pytest.fixture(scope="module")
def driver():
    return fakenvml.build(V)


@pytest.fixture
def gpu_node(tmp_path, driver):
    """Two GPUs, the second with a row remap pending (what a reset is planned for)."""
    if os.geteuid() != 0:
        pytest.skip("the fake /dev needs mknod (root)")
    proc, dev, scenario = str(tmp_path / "proc"), str(tmp_path / "dev"), str(tmp_path / "nvml.json")
    gpus = [fakenvml.gpu(0, mig=False), fakenvml.gpu(1, mig=False, health=PENDING)]
    fakenvml.write_driver_files(proc, scenario, gpus, V)
    os.makedirs(dev)
    fakenvml.make_dev_nodes(dev, fakenvml.dev_nodes_for(gpus))
    boot = os.path.join(proc, "sys", "kernel", "random")
    os.makedirs(boot)
    with open(os.path.join(boot, "boot_id"), "w") as f:
        f.write("6b756265-6770-7573-0000-000000000003\n")
    return {"root": driver.root, "proc": proc, "dev": dev, "sys": str(tmp_path / "sys"), "scenario": scenario,
            "state": str(tmp_path / "state" / "gpu-reset.json")}


def holder(gpu_node, pid, comm, minor):
    """A process of the node (in its /proc) holding /dev/nvidia<minor> open, as a DCGM host engine
    or device plugin container does."""
    fd = os.path.join(gpu_node["proc"], str(pid), "fd")
    os.makedirs(fd)
    os.symlink(os.path.join(gpu_node["dev"], "nvidia%d" % minor), os.path.join(fd, "3"))
    with open(os.path.join(gpu_node["proc"], str(pid), "comm"), "w") as f:
        f.write(comm + "\n")


def role_play(proc, gpu_node, **extra):
    variables = {"kubegpu_node_name": "gpu-0", "kubegpu_kubeconfig": proc.kubeconfig,
                 "kubegpu_gpu_reset_bus_ids": [BUS], "kubegpu_driver_root": gpu_node["root"],
                 "kubegpu_proc_path": gpu_node["proc"], "kubegpu_dev_path": gpu_node["dev"],
                 "kubegpu_sys_path": gpu_node["sys"], "kubegpu_api_poll": 0.2, "kubegpu_gpu_operands_timeout": 60}
    variables.update(extra)
    # the reset record goes to the test's directory, not /var/lib/kubegpu
    return [{"hosts": "localhost", "gather_facts": False, "vars": variables,
             "module_defaults": {"kubegpu.fleet.gpu_reset": {"state_path": gpu_node["state"]}},
             "environment": {"KUBEGPU_FAKE_NVML_CONFIG": gpu_node["scenario"],
                             "KUBEGPU_FAKE_NVML_ALLOW_USER_RESET": "1"},
             "tasks": [{"name": "GPU reset step of the role",
                        "ansible.builtin.include_role": {"name": "kubegpu.fleet.rolling_reboot",
                                                         "tasks_from": "gpu_reset"}},
                       {"name": "outcome", "ansible.builtin.debug": {"msg": {
                           "reboot": "{{ kubegpu_reboot_required | default(false) }}",
                           "reasons": "{{ kubegpu_reboot_reasons | default([]) }}"}}}]}]


def test_the_reset_runs_with_the_operands_paused_and_they_come_back(ansible, tmp_path, api_double_factory, gpu_node):
    proc = api_double_factory(seed=operator_cluster())
    pods_before = operand_pods(proc)
    res = ansible.playbook(role_play(proc, gpu_node), env=play_env(tmp_path))
    assert res.rc == 0, res.stdout[-3000:]
    pause, reset, restore = res.task(PAUSE), res.task(RESET), res.task(RESTORE)
    assert pause["ok"] and P + "device-plugin" in pause["paused"] and pause["pods"] == []
    assert reset["changed"] and reset["reset"] == ["0000:28:00.0"] and reset["fallback"] is None, reset
    assert restore["changed"] and restore["left"] == {}
    assert res.task("outcome")["msg"] == {"reboot": False, "reasons": []}
    # the pause came before the reset, the restore after: two writes on the Node, labels as before
    assert len(node_patches(proc)) == 2
    assert stored_node(proc)["metadata"]["labels"] == dict(stored_node(proc)["metadata"]["labels"], **OPERATOR_LABELS)
    assert sorted(operand_pods(proc)) == sorted(pods_before)


def test_a_refused_reset_still_restores_and_falls_back_to_the_reboot(ansible, tmp_path, api_double_factory,
                                                                     gpu_node):
    """A GPU client outside the GPU Operator (here a host DCGM) keeps the GPU open: the reset is
    refused naming it, the operands are restored anyway, and the node is marked for a reboot."""
    holder(gpu_node, 4242, "nv-hostengine", 1)
    proc = api_double_factory(seed=operator_cluster())
    res = ansible.playbook(role_play(proc, gpu_node), env=play_env(tmp_path))
    assert res.rc == 0, res.stdout[-3000:]
    reset = res.task(RESET)
    assert reset["fallback"] == "reboot" and "nv-hostengine (pid 4242)" in reset["refused"]
    assert res.task(RESTORE)["changed"]
    outcome = res.task("outcome")["msg"]
    assert outcome["reboot"] is True and "refused: GPU 0000:28:00.0 is open in nv-hostengine" in outcome["reasons"][0]
    assert stored_node(proc)["metadata"]["labels"][P + "device-plugin"] == "true"
    assert "nvidia-device-plugin-daemonset" in operand_pods(proc)


def test_a_failed_pause_resets_nothing_and_records_why_the_node_reboots(ansible, tmp_path, api_double_factory,
                                                                        gpu_node):
    proc = api_double_factory(seed=operator_cluster())
    proc.client.add_fault({"resource": "nodes", "verbs": ["patch"], "code": 403, "reason": "Forbidden",
                           "message": 'nodes "gpu-0" is forbidden: User "viewer" cannot patch resource "nodes"'})
    res = ansible.playbook(role_play(proc, gpu_node), env=play_env(tmp_path))
    assert res.rc == 0, res.stdout[-3000:]
    assert res.task(PAUSE)["failed"] and res.task(RESET).get("skipped")
    assert not os.path.exists(gpu_node["state"]) and not res.task(RESTORE).get("failed")
    outcome = res.task("outcome")["msg"]
    assert outcome["reboot"] is True
    assert outcome["reasons"][0].startswith("GPU reset of %s not tried: the GPU Operator clients could not be "
                                            "paused: " % BUS)
    assert "HTTP 403" in outcome["reasons"][0] and "needs get and patch on nodes" in outcome["reasons"][0]
    assert stored_node(proc)["metadata"]["labels"][P + "device-plugin"] == "true"


def test_without_the_pause_the_operands_keep_running(ansible, tmp_path, api_double_factory, gpu_node):
    proc = api_double_factory(seed=operator_cluster())
    res = ansible.playbook(role_play(proc, gpu_node, kubegpu_gpu_reset_pause_operands=False), env=play_env(tmp_path))
    assert res.rc == 0, res.stdout[-3000:]
    assert res.task(PAUSE).get("skipped") and res.task(RESTORE).get("skipped")
    assert res.task(RESET)["fallback"] is None and node_patches(proc) == []
    assert PAUSED not in stored_node(proc)["metadata"]["labels"].values()
