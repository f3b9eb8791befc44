# -*- coding: utf-8 -*-
"""kubegpu.fleet.gpu_reset's body on a fake node: the fake nvidia-smi -r resets through the fake
libnvidia-ml.so.1 (which records the reset next to its scenario and clears what a reset
clears), with the preconditions NVIDIA documents for nvidia-smi -r and the fake's refusals.
Then gpu_facts reads the node again: the pending remap is gone and the Xid the reset cleared
calls for nothing."""
from __future__ import absolute_import, division, print_function

import json
import os

import pytest

from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu import reset as gpu_reset
from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu.facts_run import gpu_facts_run
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.evaluate import evaluate_node

from ansible_collections.kubegpu.fleet.lab.fakes.nvml import fakenvml

V = fakenvml.DEFAULT_VERSION
BOOT = "6b756265-6770-7573-0000-000000000001"
PENDING = {"remapped_rows": {"correctable": 0, "uncorrectable": 1, "pending": True, "failure": False},
           "ecc": {"volatile_uncorrectable": 1, "aggregate_uncorrectable": 1},
           "recovery_action": "drain_and_reset"}


@pytest.fixture(scope="module")
def driver():
    return fakenvml.build(V)


class Node(object):
    def __init__(self, tmp_path, driver, monkeypatch):
        self.tmp = tmp_path
        self.proc, self.dev, self.sys = (str(tmp_path / n) for n in ("proc", "dev", "sys"))
        self.scenario = str(tmp_path / "etc" / "nvml.json")
        self.state = str(tmp_path / "var" / "gpu-reset.json")
        self.kmsg = str(tmp_path / "kmsg")
        self.driver = driver
        os.makedirs(os.path.dirname(self.scenario))
        os.makedirs(self.sys)
        monkeypatch.setenv("KUBEGPU_FAKE_NVML_CONFIG", self.scenario)
        monkeypatch.setenv("KUBEGPU_FAKE_NVML_ALLOW_USER_RESET", "1")
        empty = tmp_path / "nobin"
        empty.mkdir()
        monkeypatch.setenv("PATH", str(empty))  # no systemctl, journalctl, dmesg of the host

    def setup(self, gpus, **scenario):
        fakenvml.write_driver_files(self.proc, self.scenario, gpus, V, **scenario)
        rnd = os.path.join(self.proc, "sys", "kernel", "random")
        os.makedirs(rnd)
        with open(os.path.join(rnd, "boot_id"), "w") as f:
            f.write(BOOT + "\n")
        with open(os.path.join(self.proc, "uptime"), "w") as f:
            f.write("600.00 1000.00\n")
        os.makedirs(self.dev)
        fakenvml.make_dev_nodes(self.dev, fakenvml.dev_nodes_for(gpus))
        return self

    def reset(self, bus_ids, check_mode=False, **kw):
        params = dict(bus_ids=bus_ids, driver_root=self.driver.root, proc_path=self.proc, dev_path=self.dev,
                      sys_path=self.sys, state_path=self.state, stop_persistenced=True, timeout=30.0)
        params.update(kw)
        return gpu_reset.gpu_reset_run(params, check_mode=check_mode)

    def facts(self):
        params = {"proc_path": self.proc, "dev_path": self.dev, "driver_root": self.driver.root,
                  "backend": "nvidia_smi", "timeout": 20.0, "sys_path": self.sys, "xid": True,
                  "xid_timeout": 10.0, "kmsg_path": self.kmsg, "reset_state_path": self.state}
        return gpu_facts_run(params, lambda msg: None)["ansible_facts"]["nvidia"]


@pytest.fixture
def node(tmp_path, driver, monkeypatch):
    return Node(tmp_path, driver, monkeypatch)


def _gpu(i, **kw):
    return fakenvml.gpu(i, mig=False, **kw)


def test_reset_applies_the_pending_remap_validates_and_clears_its_xids(node):
    node.setup([_gpu(0, health=PENDING), _gpu(1)])
    with open(node.kmsg, "w") as f:  # the Xid 48 that marked the row, logged 5 s after boot
        f.write("3,0,5000000,-;NVRM: Xid (PCI:0000:18:00): 48, pid=7, name=python3, An uncorrectable "
                "double bit error (DBE) has been detected on GPU in the framebuffer at partition 1.\n")
    before = evaluate_node({"nvidia": node.facts()})
    assert {"gpu.reset_required", "gpu.recovery_action", "gpu.xid"} <= set(f["id"] for f in before)

    dry = node.reset(["00000000:18:00.0"], check_mode=True)
    assert dry["changed"] is True and dry["reset"] == ["0000:18:00.0"] and dry["refused"] is None
    assert not os.path.exists(node.state)  # check mode resets nothing

    out = node.reset(["00000000:18:00.0"])
    assert out["changed"] is True and out["reset"] == ["0000:18:00.0"]
    assert (out["refused"], out["reset_error"], out["fallback"], out["validation"]) == (None, None, None, [])
    with open(node.state) as f:
        record = json.load(f)
    assert record["boot_id"] == BOOT and list(record["resets"]) == ["0000:18:00.0"]
    assert oct(os.stat(node.state).st_mode & 0o777) == "0o644"

    after = node.facts()
    (g0,) = [g for g in after["gpus"] if g["pci_bus_id"].endswith("18:00.0")]
    assert g0["health"]["remapped_rows"]["pending"] is False and g0["health"]["recovery"]["action"] == "none"
    # the Xid 48 was logged before the reset (seconds since boot): it no longer calls for it
    assert after["xid"]["gpus"]["0000:18:00.0"]["before_reset"] == 1
    assert after["xid"]["gpus"]["0000:18:00.0"]["action"] == "none"
    found = set(f["id"] for f in evaluate_node({"nvidia": after}))
    assert not found & {"gpu.reset_required", "gpu.recovery_action", "gpu.xid"}, found
    assert found == {"gpu.ecc_uncorrectable"}  # the lifetime count stays: history, info


def test_refusals_name_the_precondition_and_fall_back_to_a_reboot(node):
    node.setup([_gpu(0, health=PENDING, processes=[{"pid": 4242}]),
                fakenvml.gpu(1, profiles=["3g.40gb"]),
                _gpu(2, mig_mode={"current": False, "pending": True})])
    out = node.reset(["0000:18:00.0"])
    assert out["fallback"] == "reboot" and out["changed"] is False and out["reset"] == []
    assert out["refused"] == "GPU 0000:18:00.0 runs compute processes (pids 4242): nvidia-smi -r needs it unused"
    out = node.reset(["0000:28:00.0"])
    assert out["refused"].startswith("GPU 0000:28:00.0 has 1 MIG devices")
    out = node.reset(["0000:38:00.0"])
    assert out["refused"] == ("GPU 0000:38:00.0 has a pending MIG mode change (disabled -> enabled) that a "
                              "reset would apply")
    out = node.reset(["0000:99:00.0"])
    assert out["refused"].startswith("the driver does not list 0000:99:00.0")
    assert not os.path.exists(node.state)


def test_a_process_holding_the_device_node_blocks_the_reset(node):
    node.setup([_gpu(0, health=PENDING)])
    fd_dir = os.path.join(node.proc, "31337", "fd")
    os.makedirs(fd_dir)
    os.symlink(os.path.join(node.dev, "nvidia0"), os.path.join(fd_dir, "7"))
    with open(os.path.join(node.proc, "31337", "comm"), "w") as f:
        f.write("dcgm-exporter\n")
    out = node.reset(["0000:18:00.0"])
    assert out["refused"] == "GPU 0000:18:00.0 is open in dcgm-exporter (pid 31337): nvidia-smi -r needs it unused"
    # nvidia-persistenced alone is stopped for the reset: here systemctl is not there, so the
    # reset is refused with that reason rather than run with the daemon holding the GPU
    with open(os.path.join(node.proc, "31337", "comm"), "w") as f:
        f.write("nvidia-persiste\n")  # comm: the kernel keeps 15 characters
    out = node.reset(["0000:18:00.0"])
    assert out["refused"].startswith("cannot stop nvidia-persistenced for the reset")
    out = node.reset(["0000:18:00.0"], stop_persistenced=False)
    assert out["refused"] == "nvidia-persistenced holds the GPUs open and stop_persistenced is false"


def test_nvlink_peers_before_ampere_reset_together(node):
    volta = dict(architecture="Volta", name="Tesla V100-SXM2-32GB")
    node.setup([_gpu(0, health=PENDING, **volta), _gpu(1, **volta), _gpu(2, health={"nvlinks": 0}, **volta)],
               reset_groups=[["0000:18:00.0", "0000:28:00.0"]])
    out = node.reset(["0000:18:00.0"])
    assert out["group"].startswith("GPUs before Ampere: every GPU with an active NVLink")
    assert out["reset"] == ["0000:18:00.0", "0000:28:00.0"] and out["reset_error"] is None


def test_the_tool_refusing_or_a_gpu_not_coming_back_falls_back_to_a_reboot(node):
    node.setup([_gpu(0, health=PENDING, reset={"refuse": "NVML_ERROR_NOT_SUPPORTED"}),
                _gpu(1, health=PENDING, reset={"result": "lost"})],
               reset_groups=[["0000:18:00.0", "0000:28:00.0"]])
    out = node.reset(["0000:18:00.0", "0000:28:00.0"])
    assert out["fallback"] == "reboot" and out["changed"] is True
    assert out["reset_error"].startswith("nvidia-smi -r exited 3: Resetting GPU 00000000:18:00.0 is not supported")
    # the fake's reset groups are what the tool enforces: naming one of two is refused by it
    node2 = node.reset(["0000:28:00.0"])
    assert node2["reset_error"].startswith("nvidia-smi -r exited 2: GPU 00000000:28:00.0 is connected to GPU")


def test_a_reset_that_loses_the_gpu_does_not_validate(node):
    node.setup([_gpu(0, health=PENDING, reset={"result": "lost"}), _gpu(1)])
    out = node.reset(["0000:18:00.0"])
    assert out["fallback"] == "reboot" and out["changed"] is True
    assert out["validation"] and "0000:18:00.0" in out["reset_error"]


def test_bad_options_fail_with_the_value(node):
    with pytest.raises(gpu_reset.ResetError, match="'zz:1' is not a PCI bus id"):
        node.reset(["zz:1"])
    with pytest.raises(gpu_reset.ResetError, match="name at least one GPU"):
        node.reset([])


def test_reset_record_of_another_boot_or_malformed_is_not_used(tmp_path):
    proc = tmp_path / "proc" / "sys" / "kernel" / "random"
    proc.mkdir(parents=True)
    (proc / "boot_id").write_text(BOOT + "\n")
    state = tmp_path / "gpu-reset.json"
    state.write_text(json.dumps({"boot_id": "another", "resets": {"0000:18:00.0": 5.0}}))
    assert gpu_reset.read_resets(str(state), str(tmp_path / "proc")) == ({}, None)
    state.write_text(json.dumps({"boot_id": BOOT, "resets": {"0000:18:00.0": 5.0, "junk": 1, "0000:28:00.0": "x"}}))
    assert gpu_reset.read_resets(str(state), str(tmp_path / "proc")) == ({"0000:18:00.0": 5.0}, None)
    state.write_text("{not json")
    resets, problem = gpu_reset.read_resets(str(state), str(tmp_path / "proc"))
    assert resets == {} and "is not JSON" in problem
    assert gpu_reset.read_resets(str(tmp_path / "none.json"), str(tmp_path / "proc")) == ({}, None)
