# -*- coding: utf-8 -*-
"""GPU hardware health through the real gpu_facts and audit_node modules (ansible-playbook).

The driver is the fake libnvidia-ml.so.1 / nvidia-smi from lab/fakes/nvml with per-GPU
``health`` state; the PCI bus is a sysfs-shaped tree (``sys_path``); the kernel log is a
``journalctl`` stand-in on PATH printing Xid records as the driver logs them.
"""
from __future__ import absolute_import, division, print_function

import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "lab", "fakes", "nvml"))
import fakenvml  # noqa: E402  pylint: disable=wrong-import-position

HARNESS_ENV = {"ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.json"}
V = fakenvml.DEFAULT_VERSION

# Xid records as R535+/R418 drivers print them (see tests/unit/.../test_gpu_xid.py sources).
KERNEL_LOG = [
    "[  812.345678] gpu-node-1 kernel: NVRM: Xid (PCI:0000:38:00): 79, pid=1101234, "
    "name=nvc:[driver], GPU has fallen off the bus.",
    "[  899.000001] gpu-node-1 kernel: NVRM: Xid (PCI:0000:28:00): 48, pid=1896, name=python, "
    "Ch 00000010, An uncorrectable double bit error (DBE) has been detected on GPU in the "
    "framebuffer at partition 6, subpartition 0.",
    "[  900.000001] gpu-node-1 kernel: NVRM: Xid (PCI:0000:28:00): 63, pid=1896, "
    "Row Remapper: New row marked for remapping, reset gpu to activate.",
    "[  950.000001] gpu-node-1 kernel: NVRM: Xid (PCI:0000:18:00): 13, pid=2001, name=python, "
    "Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address",
    "[  951.000001] gpu-node-1 kernel: NVRM: Xid (PCI:0000:18:00): 13, pid=2001, name=python, "
    "Graphics Exception: ESR 0x505648=0x103000e 0x505650=0x20",
]

PENDING = {"remapped_rows": {"correctable": 0, "uncorrectable": 1, "pending": True, "failure": False},
           "ecc": {"volatile_uncorrectable": 2, "aggregate_uncorrectable": 2}}
FAILED = {"remapped_rows": {"correctable": 0, "uncorrectable": 512, "pending": False, "failure": True},
          "ecc": {"volatile_uncorrectable": 0, "aggregate_uncorrectable": 9}}


@pytest.fixture(scope="module")
def driver():
    return fakenvml.build(V)


def _device(root, addr, vendor, device, pci_class, driver=None):
    real = os.path.join(root, "devices", "pci0000:00", addr)
    os.makedirs(real)
    for name, value in (("vendor", "0x%04x\n" % vendor), ("device", "0x%04x\n" % device),
                        ("class", "0x%06x\n" % pci_class)):
        with open(os.path.join(real, name), "w") as f:
            f.write(value)
    if driver:
        drv = os.path.join(root, "bus", "pci", "drivers", driver)
        if not os.path.isdir(drv):
            os.makedirs(drv)
        os.symlink(os.path.relpath(drv, real), os.path.join(real, "driver"))
    links = os.path.join(root, "bus", "pci", "devices")
    if not os.path.isdir(links):
        os.makedirs(links)
    os.symlink(os.path.relpath(real, links), os.path.join(links, addr))


@pytest.fixture
def node(tmp_path, driver):
    class Node(object):
        proc = str(tmp_path / "proc")
        dev = str(tmp_path / "dev")
        sys = str(tmp_path / "sys")
        bin = str(tmp_path / "bin")
        scenario = str(tmp_path / "nvml.json")
        root = driver.root

        def setup(self, gpus, bus_gpus, log_lines):
            fakenvml.write_driver_files(self.proc, self.scenario, gpus, V)
            os.makedirs(self.dev)
            fakenvml.make_dev_nodes(self.dev, fakenvml.dev_nodes_for(gpus))
            _device(self.sys, "0000:00:00.0", 0x8086, 0x09a2, 0x060000)  # host bridge
            for i in range(bus_gpus):
                addr = "0000:%02x:00.0" % (0x18 + 0x10 * i)
                _device(self.sys, addr, 0x10de, 0x2330, 0x030200, "nvidia")
                _device(self.sys, addr[:-1] + "1", 0x10de, 0x22a3, 0x040300)  # audio function
            os.makedirs(self.bin)
            log = str(tmp_path / "kernel.log")
            with open(log, "w") as f:
                f.write("".join(line + "\n" for line in log_lines))
            jc = os.path.join(self.bin, "journalctl")
            with open(jc, "w") as f:
                # -r (newest first), as the real journalctl answers it.
                f.write('#!/bin/sh\necho "$@" > %s\ncase " $* " in *" -r "*) tac %s ;; *) cat %s ;; esac\n'
                        % (tmp_path / "journalctl.args", log, log))
            os.chmod(jc, 0o755)
            # dmesg as an unprivileged container sees it (kernel.dmesg_restrict=1).
            dm = os.path.join(self.bin, "dmesg")
            with open(dm, "w") as f:
                f.write('#!/bin/sh\necho "dmesg: read kernel buffer failed: Operation not '
                        'permitted" >&2\nexit 1\n')
            os.chmod(dm, 0o755)
            return self

        def args(self, **extra):
            a = {"proc_path": self.proc, "dev_path": self.dev, "driver_root": self.root,
                 "sys_path": self.sys, "kmsg_path": ""}
            a.update(extra)
            return a

        @property
        def env(self):
            env = dict(HARNESS_ENV)
            env["KUBEGPU_FAKE_NVML_CONFIG"] = self.scenario
            env["PATH"] = self.bin + os.pathsep + os.environ.get("PATH", "")
            return env
    return Node()


def _facts(res):
    assert res["_rc"] == 0, res
    assert not res.get("failed"), res.get("msg")
    return res["ansible_facts"]["nvidia"]


def _three_gpu_node(node):
    """GPU 0 needs RMA (row remap failure), GPU 1 has a row remap pending and volatile
    uncorrectable ECC, GPU 2 is on the bus (bound to nvidia) but not in the driver's list."""
    gpus = [fakenvml.gpu(0, mig=False, health=FAILED), fakenvml.gpu(1, mig=False, health=PENDING)]
    return node.setup(gpus, bus_gpus=3, log_lines=KERNEL_LOG)


@pytest.mark.parametrize("backend", ["nvml", "nvidia_smi"])
def test_missing_gpu_health_and_xids(ansible, node, backend):
    _three_gpu_node(node)
    f = _facts(ansible.module("gpu_facts", node.args(backend=backend), check=True, env=node.env))
    assert f["probe"]["status"] == "ok" and f["probe"]["backend"] == backend
    assert f["gpu_count"] == 2
    # PCI bus vs driver: the third H100 is missing, with its Xid 79 in the reason.
    assert [g["bus_id"] for g in f["pci"]["gpus"]] == ["0000:18:00.0", "0000:28:00.0", "0000:38:00.0"]
    assert f["presence"]["compared"] is True and f["presence"]["ok"] is False
    (missing,) = f["presence"]["missing"]
    assert missing["bus_id"] == "0000:38:00.0"
    assert "bound to nvidia" in missing["reason"] and "Xid 79" in missing["reason"]
    # Health per GPU, from NVML or from the same -q -x document.
    v0, v1 = f["gpus"][0]["health_verdict"], f["gpus"][1]["health_verdict"]
    assert v0["rma"] is True and v0["reset_required"] is False
    assert v0["ecc_uncorrectable"]["aggregate"] == 9 and v0["ecc_uncorrectable"]["scope"] == "aggregate"
    # 512 rows remapped for uncorrectable errors: DCGM warns at 512 (gpu.row_remap_exhausting)
    assert v0["findings"] == ["gpu.rma", "gpu.ecc_uncorrectable", "gpu.row_remap_exhausting"]
    assert v1["reset_required"] is True and v1["rma"] is False
    assert v1["ecc_uncorrectable"]["volatile"] == 2 and v1["ecc_uncorrectable"]["scope"] == "volatile"
    assert f["gpus"][1]["health"]["remapped_rows"]["pending"] is True
    # Xids of this boot from the journal, counted per GPU with the documented action.
    x = f["xid"]
    assert x["source"] == "journal" and x["events"] == 5
    assert x["gpus"]["0000:18:00.0"]["counts"] == {"13": 2}
    assert x["gpus"]["0000:28:00.0"]["counts"] == {"48": 1, "63": 1}
    assert x["gpus"]["0000:28:00.0"]["action"] == "reset_gpu"  # Xid 48's workflow; 63 is ignore
    assert x["gpus"]["0000:38:00.0"]["action"] == "reboot"
    assert x["gpus"]["0000:18:00.0"]["last"]["timestamp"] == 951.000001  # time order kept
    assert x["action"] == "reboot" and x["warning"] is None
    args = open(os.path.join(os.path.dirname(node.proc), "journalctl.args")).read().split()
    assert args[:3] == ["-k", "-b", "--no-pager"] and "-n" in args


def test_healthy_node_all_present_and_xid_off(ansible, node):
    node.setup([fakenvml.gpu(0, mig=False), fakenvml.gpu(1, mig=False)], bus_gpus=2, log_lines=[])
    f = _facts(ansible.module("gpu_facts", node.args(xid=False), env=node.env))
    assert f["presence"]["ok"] is True and f["presence"]["missing"] == []
    assert f["presence"]["pci_count"] == 2 and f["presence"]["present_count"] == 2
    assert f["xid"] is None
    for g in f["gpus"]:
        assert g["health_verdict"]["findings"] == [] and g["health_verdict"]["reset_required"] is False
    assert not os.path.exists(os.path.join(os.path.dirname(node.proc), "journalctl.args"))


def test_no_sysfs_is_not_compared_and_bad_timeout_fails(ansible, node, tmp_path):
    node.setup([fakenvml.gpu(0, mig=False)], bus_gpus=1, log_lines=[])
    f = _facts(ansible.module("gpu_facts", node.args(sys_path=str(tmp_path / "nosys")), env=node.env))
    assert f["pci"]["available"] is False and f["pci"]["errors"]
    assert f["presence"]["compared"] is False and f["presence"]["missing"] == []
    # An empty journal is no kernel log (the kmsg source is off here): reported, not guessed.
    assert f["xid"]["source"] is None and f["xid"]["events"] == 0
    assert [a["source"] for a in f["xid"]["attempts"]] == ["journal", "dmesg"]
    assert "Operation not permitted" in f["xid"]["attempts"][1]["error"]
    res = ansible.module("gpu_facts", node.args(xid_timeout=float("nan")), env=node.env)
    assert res.get("failed") and "xid_timeout" in res["msg"], res


def test_audit_node_carries_hardware_facts_in_one_round_trip(ansible, node):
    _three_gpu_node(node)
    res = ansible.module("audit_node", node.args(nvidia_proc_path=node.proc, backend="nvml"),
                         env=node.env)
    assert res["_rc"] == 0 and not res.get("failed"), res
    nv = res["probes"]["gpu_facts"]["ansible_facts"]["nvidia"]
    assert [m["bus_id"] for m in nv["presence"]["missing"]] == ["0000:38:00.0"]
    assert nv["gpus"][1]["health_verdict"]["findings"] == ["gpu.reset_required", "gpu.ecc_uncorrectable"]
    assert nv["xid"]["gpus"]["0000:28:00.0"]["counts"] == {"48": 1, "63": 1}


def test_audit_findings_and_plan_from_the_node_probe(ansible, node):
    """The audit path on the control node: audit_node's one round trip -> audit_evaluate (with
    the Node's advertised nvidia.com/gpu and the inventory count) -> remediation_plan."""
    _three_gpu_node(node)
    args = node.args(nvidia_proc_path=node.proc, backend="nvml")
    plays = [{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "Probe", "kubegpu.fleet.audit_node": args, "register": "probe"},
        {"name": "Evaluate", "kubegpu.fleet.audit_evaluate": {
            "node": "gpu-hw", "nvidia": "{{ probe.probes.gpu_facts.ansible_facts.nvidia }}",
            "api": {"ready": True, "allocatable": {"nvidia.com/gpu": "2"}}, "expected_gpus": 4}},
        {"name": "Plan", "kubegpu.fleet.remediation_plan": {"audit": "{{ kubegpu_audit }}"}},
    ]}]
    res = ansible.playbook(plays, env=node.env)
    assert res.rc == 0, res.stdout
    found = dict((f["id"], f) for f in res.task("Evaluate")["findings"])
    assert set(["gpu.missing", "gpu.xid", "gpu.reset_required", "gpu.rma", "gpu.ecc_uncorrectable"]) <= set(found)
    missing = found["gpu.missing"]["evidence"]
    assert missing["bus_ids"] == ["0000:38:00.0"] and missing["capacity"] == 2
    assert any("inventory expects 4 GPUs" in p for p in missing["problems"])
    assert found["gpu.xid"]["severity"] == "critical" and found["gpu.xid"]["evidence"]["action"] == "reboot"
    assert [g["bus_id"] for g in found["gpu.reset_required"]["evidence"]["gpus"]] == ["00000000:28:00.0"]
    assert [g["bus_id"] for g in found["gpu.rma"]["evidence"]["gpus"]] == ["00000000:18:00.0"]
    assert found["gpu.ecc_uncorrectable"]["severity"] == "warning"
    plan = res.task("Plan")["plan"]
    assert plan["cordon"] is True and plan["fix"] is False
    assert [h.split(":")[0] for h in plan["hands_on"]] == ["gpu.missing", "gpu.rma"]


def test_bad_expected_gpus_is_named(ansible):
    out = ansible.module("audit_evaluate", {"node": "n", "expected_gpus": -1})
    assert out["_rc"] != 0 and "expected_gpus must be a GPU count >= 0, got -1" in out["msg"]


def test_smi_document_describing_fewer_gpus_than_attached_is_reported(ansible, node):
    """A GPU the driver lost: nvidia-smi counts it in <attached_gpus> but writes no <gpu> for it."""
    node.setup([fakenvml.gpu(0, mig=False), fakenvml.gpu(1, mig=False, lost=True)], bus_gpus=2, log_lines=[])
    res = ansible.module("gpu_facts", node.args(backend="nvidia_smi", xid=False), env=node.env)
    f = _facts(res)
    assert "nvidia-smi reports 2 attached GPUs but describes 1" in f["warnings"]
    assert "nvidia-smi reports 2 attached GPUs but describes 1" in f["presence"]["problems"]
    assert f["presence"]["ok"] is False
    assert any("describes 1" in w for w in res.get("warnings") or []), res.get("warnings")


def test_gpu_reset_module_resets_a_pending_remap_and_gpu_facts_sees_it_cleared(ansible, node, tmp_path):
    """kubegpu.fleet.gpu_reset through ansible-playbook: check mode resets nothing, the reset
    validates, and gpu_facts (reading the reset record) no longer finds the remap pending."""
    _three_gpu_node(node)
    env = dict(node.env, KUBEGPU_FAKE_NVML_ALLOW_USER_RESET="1")
    state = str(tmp_path / "state" / "gpu-reset.json")
    rnd = os.path.join(node.proc, "sys", "kernel", "random")
    os.makedirs(rnd)
    with open(os.path.join(rnd, "boot_id"), "w") as f:
        f.write("6b756265-6770-7573-0000-000000000002\n")
    args = {"bus_ids": ["00000000:28:00.0"], "driver_root": node.root, "proc_path": node.proc,
            "dev_path": node.dev, "sys_path": node.sys, "state_path": state}
    dry = ansible.module("gpu_reset", args, check=True, env=env)
    assert dry["_rc"] == 0 and dry["changed"] is True and dry["reset"] == ["0000:28:00.0"], dry
    assert not os.path.exists(state)
    res = ansible.module("gpu_reset", args, env=env)
    assert res["_rc"] == 0 and res["changed"] is True, res
    assert res["reset_error"] is None and not res.get("failed"), res
    assert res["fallback"] is None and res["validation"] == [] and os.path.exists(state)
    f = _facts(ansible.module("gpu_facts", node.args(backend="nvidia_smi", reset_state_path=state),
                              check=True, env=env))
    (g1,) = [g for g in f["gpus"] if g["pci_bus_id"].endswith("28:00.0")]
    assert g1["health"]["remapped_rows"]["pending"] is False
    assert g1["health_verdict"]["reset_required"] is False
    bad = ansible.module("gpu_reset", dict(args, bus_ids=["zz"]), env=env)
    assert bad.get("failed") is True and "'zz' is not a PCI bus id" in bad["msg"]
