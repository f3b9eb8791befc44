# -*- coding: utf-8 -*-
"""kubegpu.fleet.gpu_facts through real ansible-playbook on localhost.

The NVIDIA userspace is the fake libnvidia-ml.so.1 / nvidia-smi from lab/fakes/nvml (built
with gcc, loaded by the real pynvml inside the module); procfs and /dev are temp trees.
"""
from __future__ import absolute_import, division, print_function

import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "lab", "fakes", "nvml"))
import fakenvml  # noqa: E402  pylint: disable=wrong-import-position

# tests/lib/ansible_runner.py sets ANSIBLE_CALLBACKS_ENABLED="" which ansible-core 2.19 reads
# as one callback with an empty name; name the stdout callback instead.
HARNESS_ENV = {"ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.json"}
V = fakenvml.DEFAULT_VERSION


@pytest.fixture(scope="module")
def driver():
    return fakenvml.build(V)


@pytest.fixture
def node(tmp_path, driver):
    class Node(object):
        proc = str(tmp_path / "proc")
        dev = str(tmp_path / "dev")
        scenario = str(tmp_path / "nvml.json")
        root = driver.root

        def setup(self, gpus, kernel=V, **scenario):
            fakenvml.write_driver_files(self.proc, self.scenario, gpus, kernel, **scenario)
            os.makedirs(self.dev)
            if kernel:
                fakenvml.make_dev_nodes(self.dev, fakenvml.dev_nodes_for(gpus))
            return self

        def args(self, **extra):
            a = {"proc_path": self.proc, "dev_path": self.dev, "driver_root": self.root}
            a.update(extra)
            return a

        @property
        def env(self):
            env = dict(HARNESS_ENV)
            env["KUBEGPU_FAKE_NVML_CONFIG"] = self.scenario
            return env
    return Node()


def _facts(res):
    assert res["_rc"] == 0, res
    assert not res.get("failed"), res.get("msg")
    assert res["changed"] is False
    return res["ansible_facts"]["nvidia"]


def test_healthy_mig_node_in_check_mode(ansible, node):
    node.setup(fakenvml.hgx(8, 7))
    res = ansible.module("gpu_facts", node.args(timeout=10), check=True, diff=True, env=node.env)
    f = _facts(res)
    assert f["probe"]["status"] == "ok" and f["probe"]["backend"] == "nvml"
    assert f["present"] is True
    assert f["driver_version"] == V and f["kernel_module_version"] == V
    assert f["cuda_driver_version"] == "12.8"
    assert f["mig_enabled"] is True and f["mig_mixed"] is False
    assert f["gpu_count"] == 8
    assert len(f["device_ids"]) == 64
    assert all(n["ok"] for n in f["device_nodes"])
    assert "diff" not in res


def test_facts_feed_later_tasks_through_module_defaults(ansible, node):
    gpus = [fakenvml.gpu(0, profiles=["3g.40gb", "3g.40gb"]), fakenvml.gpu(1, mig=False)]
    node.setup(gpus)
    play = [{
        "hosts": "localhost", "gather_facts": False,
        "module_defaults": {"group/kubegpu.fleet.node": node.args()},
        "tasks": [
            {"name": "gather", "kubegpu.fleet.gpu_facts": {}},
            {"name": "check", "ansible.builtin.assert": {"that": [
                "ansible_facts.nvidia.mig_mixed",
                "ansible_facts.nvidia.gpus[0].mig_devices | length == 2",
                "ansible_facts.nvidia.gpus[0].mig_devices[1].profile == '3g.40gb'",
                "ansible_facts.nvidia.device_ids | length == 4",
            ]}},
        ],
    }]
    res = ansible.playbook(play, env=node.env)
    assert res.rc == 0, res.stdout
    assert res.task("check").get("failed") is not True


def test_version_mismatch_is_reported_not_failed(ansible, node):
    node.setup([fakenvml.gpu(0)], kernel="570.158.01")
    res = ansible.module("gpu_facts", node.args(), env=node.env)
    f = _facts(res)
    assert f["probe"]["status"] == "error"
    assert f["probe"]["error_code"] == "NVML_ERROR_LIB_RM_VERSION_MISMATCH"
    assert f["kernel_module_version"] == "570.158.01" and f["driver_version"] == V
    assert any("NVML_ERROR_LIB_RM_VERSION_MISMATCH" in w for w in res.get("warnings", []))


def test_no_driver_is_absent_and_succeeds(ansible, node, tmp_path):
    node.setup([], kernel=None)
    empty = tmp_path / "no-driver"
    empty.mkdir()
    f = _facts(ansible.module("gpu_facts", node.args(driver_root=str(empty)), env=node.env))
    assert f["probe"]["status"] == "absent"
    assert f["present"] is False
    assert f["gpus"] == [] and f["device_ids"] == []


def test_r570_hang_returns_hung(ansible, node):
    bad = fakenvml.build("570.148.08")
    node.root = bad.root
    node.setup([fakenvml.gpu(0, profiles=["1g.10gb"]), fakenvml.gpu(1, mig=False)], kernel="570.148.08")
    res = ansible.module("gpu_facts", node.args(timeout=1.5), env=node.env)
    f = _facts(res)
    assert f["probe"]["status"] == "hung"
    assert f["probe"]["hung_in"] == "nvmlInit"
    # "hung" proves the module gave up on the child; the timeout + 2 s goal is measured in bench/.
    assert f["driver_version"] == "570.148.08"
    assert any("hung" in w for w in res.get("warnings", []))


@pytest.fixture
def frozen_cgroup():
    if not fakenvml.freezer_available():
        pytest.skip("cgroup v1 freezer not available at %s" % fakenvml.FREEZER_ROOT)
    with fakenvml.reaped_freezer_cgroup() as cg:
        yield cg


def test_unkillable_probe_does_not_block_ansible(ansible, node, frozen_cgroup):
    node.setup([fakenvml.gpu(0)], hang={"freeze_cgroup": frozen_cgroup.path})
    play = [{"hosts": "localhost", "gather_facts": False,
             "tasks": [{"name": "under test", "kubegpu.fleet.gpu_facts": node.args(timeout=1.0)}]}]
    # A module whose child held the output pipe would block ansible-playbook until the
    # subprocess timeout below; the frozen child stays frozen for the whole run.
    res = ansible.playbook(play, env=node.env, timeout=120)
    assert res.rc == 0, res.stdout
    f = res.task("under test")["ansible_facts"]["nvidia"]
    assert f["probe"]["status"] == "hung"
    assert f["probe"]["stuck_pids"] == frozen_cgroup.pids()
    assert frozen_cgroup.state() == "FROZEN"
    assert frozen_cgroup.cleanup() == f["probe"]["stuck_pids"]


def test_nvidia_smi_backend(ansible, node):
    node.setup(fakenvml.hgx(2, 3))
    f = _facts(ansible.module("gpu_facts", node.args(backend="nvidia_smi"), env=node.env))
    assert f["probe"]["status"] == "ok" and f["probe"]["backend"] == "nvidia_smi"
    assert f["device_ids"] == [fakenvml.gpu_uuid(0)] + [fakenvml.mig_uuid(0, j) for j in range(3)] + \
        [fakenvml.gpu_uuid(1)] + [fakenvml.mig_uuid(1, j) for j in range(3)]


@pytest.mark.parametrize("backend", ["nvml", "nvidia_smi"])
def test_vgpu_guest_and_bare_metal(ansible, node, backend):
    node.setup(fakenvml.vgpu_guest(2) + [fakenvml.gpu(2, virtualization_mode="none")])
    f = _facts(ansible.module("gpu_facts", node.args(backend=backend), env=node.env))
    assert f["probe"]["status"] == "ok" and f["probe"]["backend"] == backend
    assert [g["virtualization_mode"] for g in f["gpus"]] == ["vgpu", "vgpu", "none"]
    assert f["vgpu_guest"] is True


@pytest.mark.parametrize("backend", ["nvml", "nvidia_smi"])
def test_bare_metal_and_passthrough_are_not_vgpu_guests(ansible, node, backend):
    node.setup([fakenvml.gpu(0), fakenvml.gpu(1, virtualization_mode="passthrough")])
    f = _facts(ansible.module("gpu_facts", node.args(backend=backend), env=node.env))
    assert [g["virtualization_mode"] for g in f["gpus"]] == ["none", "passthrough"]
    assert f["vgpu_guest"] is False


@pytest.mark.parametrize("args,message", [
    ({"timeout": -1}, "timeout must be between 0.001 and 86400 seconds, got -1.0"),
    ({"proc_path": "/nonexistent/proc"}, "proc_path /nonexistent/proc is not a directory"),
    ({"backend": "cuda"}, "value of backend must be one of: auto, nvml, nvidia_smi, got: cuda"),
])
def test_bad_options_fail_with_a_message(ansible, node, args, message):
    node.setup([fakenvml.gpu(0)])
    all_args = node.args()
    all_args.update(args)
    res = ansible.module("gpu_facts", all_args, env=node.env)
    assert res["_rc"] != 0
    assert res.get("failed") is True
    assert message in res["msg"]
    assert "Traceback" not in res.get("module_stderr", "")


PY38 = "/root/.pyenv/versions/3.8.18/bin/python3.8"


@pytest.mark.skipif(not os.path.exists(PY38), reason="no Python 3.8 interpreter on this machine")
def test_python38_target_without_pynvml(ansible, node):
    """The oldest supported target Python, without nvidia-ml-py: auto uses nvidia-smi, and
    backend=nvml fails with a message naming the missing package."""
    node.setup(fakenvml.hgx(2, 2))
    env = node.env
    env["ANSIBLE_PYTHON_INTERPRETER"] = PY38
    f = _facts(ansible.module("gpu_facts", node.args(), env=env))
    assert f["probe"]["backend"] == "nvidia_smi" and f["probe"]["status"] == "ok"
    assert len(f["device_ids"]) == 6
    res = ansible.module("gpu_facts", node.args(backend="nvml"), env=env)
    assert res.get("failed") is True
    assert "nvidia-ml-py" in res["msg"]
