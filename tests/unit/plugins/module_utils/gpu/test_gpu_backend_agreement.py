# -*- coding: utf-8 -*-
"""Both backends give the same answer on the same node.

One fake node (the fake libnvidia-ml.so.1 and nvidia-smi over one scenario, a procfs, a sysfs
PCI tree and a kernel log) is read through gpu_facts' real code path (gpu_facts_run) once with
the NVML backend and once with the nvidia-smi backend; the audit rules then judge both. The
node carries every health signal the driver reports: its own recovery verdict, a pending row
remap, a pending channel repair, unrepairable memory, a bank without spare rows, a PCIe link
trained narrow under load and replaying, hardware slowdown, NVLink errors and a link down, a
fabric registration that did not complete, and a GPU the driver cannot open.
"""
from __future__ import absolute_import, division, print_function

import os

import pytest

from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu.facts_run import gpu_facts_run
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.evaluate import evaluate_node

from ansible_collections.kubegpu.fleet.lab.fakes.nvml import fakenvml

V = fakenvml.DEFAULT_VERSION
BUS = ["0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0"]


@pytest.fixture(scope="module")
def driver():
    return fakenvml.build(V)


def _pci_device(root, addr, driver=None):
    real = os.path.join(root, "devices", "pci0000:00", addr)
    os.makedirs(real)
    for name, value in (("vendor", 0x10de), ("device", 0x2330), ("class", 0x030200)):
        with open(os.path.join(real, name), "w") as f:
            f.write(("0x%06x\n" if name == "class" else "0x%04x\n") % value)
    if driver:
        drv = os.path.join(root, "bus", "pci", "drivers", driver)
        if not os.path.isdir(drv):
            os.makedirs(drv)
        os.symlink(os.path.relpath(drv, real), os.path.join(real, "driver"))
    links = os.path.join(root, "bus", "pci", "devices")
    if not os.path.isdir(links):
        os.makedirs(links)
    os.symlink(os.path.relpath(real, links), os.path.join(links, addr))


SICK = {
    "remapped_rows": {"correctable": 0, "uncorrectable": 1, "pending": True, "failure": False},
    "ecc": {"volatile_uncorrectable": 1, "aggregate_uncorrectable": 1},
    "recovery_action": "drain_and_reset",
    "repair": {"channel_repair_pending": True},
    "row_remapper_histogram": {"max": 2558, "none": 2},
    # busy (no gpu_idle), x8 of x16, and far more replays than DCGM's gen 5 x8 limit (16 a minute)
    "pcie": {"width": 8, "replay_counter": 60000},
    "clocks_event_reasons": ["hw_slowdown", "hw_power_brake_slowdown"],
    "nvlinks": [{"active": True, "replay": 3, "crc_flit": 2}, {"active": False}, {"active": True}],
}


@pytest.fixture
def node(tmp_path, driver, monkeypatch):
    proc, dev, sysfs = str(tmp_path / "proc"), str(tmp_path / "dev"), str(tmp_path / "sys")
    scenario = str(tmp_path / "nvml.json")
    monkeypatch.setenv("KUBEGPU_FAKE_NVML_CONFIG", scenario)
    empty = tmp_path / "nobin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # no journalctl/dmesg: the kernel log file is read
    gpus = [fakenvml.gpu(i, mig=False, pci_bus_id=BUS[i]) for i in range(4)]
    gpus[0]["health"] = SICK
    gpus[1]["health"] = {"fabric": {"state": "In Progress", "status": "Success"}}
    gpus[2]["lost"] = True  # bound to nvidia on the bus, the driver cannot open it
    gpus[3]["health"] = {"repair": {"unrepairable_memory": True}, "nvlinks": 0}
    fakenvml.write_driver_files(proc, scenario, gpus, V)
    with open(os.path.join(proc, "uptime"), "w") as f:
        f.write("7200.00 14000.00\n")
    os.makedirs(dev)
    fakenvml.make_dev_nodes(dev, fakenvml.dev_nodes_for(gpus))
    for addr in BUS:
        _pci_device(sysfs, addr, "nvidia")
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("6,0,0,-;Linux version 6.8.0\n"
                    "3,1,5000000,-;NVRM: Xid (PCI:0000:18:00): 48, pid=2211, name=python3, An uncorrectable "
                    "double bit error (DBE) has been detected on GPU in the framebuffer at partition 3.\n"
                    "3,2,5000100,-;NVRM: Xid (PCI:0000:3a:00): 79, GPU has fallen off the bus.\n")

    def facts(backend):
        params = {"proc_path": proc, "dev_path": dev, "driver_root": driver.root, "backend": backend,
                  "timeout": 20.0, "sys_path": sysfs, "xid": True, "xid_timeout": 10.0,
                  "kmsg_path": str(kmsg)}
        return gpu_facts_run(params, lambda msg: None)["ansible_facts"]["nvidia"]
    return facts


def _verdicts(nv):
    """Per bus id: the verdict's findings, reasons per finding, recovery and PCIe evidence."""
    out = {}
    for g in nv["gpus"]:
        v = g.get("health_verdict")
        if not v:
            continue
        # "raw" is each backend's own text for the recovery action (nvidia-smi's words, NVML's number)
        recovery = dict((k, x) for k, x in v["recovery"].items() if k != "raw")
        out[g["pci_bus_id"].lower()[-12:]] = (v["findings"], v["details"], recovery, v["pcie"],
                                              v["reset_required"], v["rma"])
    return out


def _finding_shape(findings):
    shape = []
    for f in findings:
        ev = f["evidence"]
        buses = sorted(str(g.get("bus_id")).lower()[-12:] for g in ev.get("gpus") or [])
        shape.append((f["id"], f["severity"], ev.get("action"), buses,
                      sorted(m["bus_id"] for m in ev.get("missing") or [])))
    return sorted(shape)


def test_nvml_and_nvidia_smi_agree_on_every_health_signal(node):
    nvml, smi = node("nvml"), node("nvidia_smi")
    assert nvml["source"] == "nvml" and smi["source"] == "nvidia_smi"
    assert nvml["uptime_s"] == smi["uptime_s"] == 7200.0
    vn, vs = _verdicts(nvml), _verdicts(smi)
    for bus in sorted(set(vn) | set(vs)):
        assert vn.get(bus) == vs.get(bus), bus
    ctx_n, ctx_s = {"nvidia": nvml}, {"nvidia": smi}
    f_nvml, f_smi = evaluate_node(ctx_n), evaluate_node(ctx_s)
    # nvml.error: the GPU the driver cannot open fails a query in both.
    assert _finding_shape(f_nvml) == _finding_shape(f_smi)
    by_id = dict((f["id"], f) for f in f_nvml)
    assert sorted(by_id) == ["gpu.clocks_slowdown", "gpu.ecc_uncorrectable", "gpu.fabric", "gpu.missing",
                             "gpu.nvlink", "gpu.pcie_degraded", "gpu.recovery_action", "gpu.reset_required",
                             "gpu.rma", "gpu.row_remap_exhausting", "gpu.xid", "nvml.error"]
    # The GPU the driver cannot open is missing in both (nvidia-smi named its bus id, NVML did not).
    assert by_id["gpu.missing"]["evidence"]["bus_ids"] == ["0000:3a:00.0"]
    assert "Xid 79" in by_id["gpu.missing"]["evidence"]["missing"][0]["reason"]
    rec = by_id["gpu.recovery_action"]
    assert rec["severity"] == "critical" and rec["evidence"]["action"] == "reset_gpu"
    assert rec["evidence"]["gpus"][0]["driver_action"] == "drain_and_reset"
    reasons = by_id["gpu.reset_required"]["evidence"]["gpus"][0]["reasons"]
    assert any("row remapping pending" in r for r in reasons)
    assert any("memory channel repair pending" in r for r in reasons)
    assert by_id["gpu.rma"]["evidence"]["gpus"][0]["bus_id"].lower().endswith("5d:00.0")
    pcie = by_id["gpu.pcie_degraded"]["evidence"]["gpus"][0]
    assert pcie["pcie"]["replay_threshold_per_minute"] == 16  # ceil(32/1000*60 per lane * 8 lanes)
    assert any("x8 of x16" in r for r in pcie["reasons"])
    nvlink = by_id["gpu.nvlink"]
    assert nvlink["severity"] == "critical"  # a link down on a GPU not in MIG mode
    assert any("1 of 3 NVLinks down" in r for r in nvlink["evidence"]["gpus"][0]["reasons"])
    assert by_id["gpu.fabric"]["evidence"]["gpus"][0]["reasons"] == ["NVLink fabric registration In Progress"]
    # The driver's verdict decides what Xid 48 asks for (reset, as the driver says).
    xid = by_id["gpu.xid"]
    g18 = [g for g in xid["evidence"]["gpus"] if g["bus_id"] == "0000:18:00.0"][0]
    assert (g18["catalog_action"], g18["driver_action"], g18["action"]) == ("reset_gpu", "drain_and_reset",
                                                                            "reset_gpu")
    # The GPU that fell off the bus has no driver verdict: the catalog decides (reboot).
    assert xid["evidence"]["action"] == "reboot"
