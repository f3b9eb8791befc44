# -*- coding: utf-8 -*-
"""Audit rules for GPU hardware health: gpu.missing, gpu.xid, gpu.reset_required, gpu.rma,
gpu.ecc_uncorrectable. The node facts are built by the node-side code (PCI scan of a
sysfs-shaped tree, Xid parser and aggregate, health verdict), as gpu_facts returns them."""
from __future__ import absolute_import, division, print_function

import os

import pytest

from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu import health as gpu_health
from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu import pci as gpu_pci
from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu import xid as gpu_xid
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit import evaluate as fd

BUS = ["0000:18:00.0", "0000:28:00.0", "0000:38:00.0"]
XID_79 = ("[  812.345678] n kernel: NVRM: Xid (PCI:0000:38:00): 79, pid=1101234, "
          "name=nvc:[driver], GPU has fallen off the bus.")
XID_48 = ("[  899.000001] n kernel: NVRM: Xid (PCI:0000:28:00): 48, pid=1896, name=python, "
          "Ch 00000010, An uncorrectable double bit error (DBE) has been detected on GPU in the "
          "framebuffer at partition 6, subpartition 0.")
XID_13 = ("[  950.000001] n kernel: NVRM: Xid (PCI:0000:18:00): 13, pid=2001, name=python, "
          "Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address")
XID_74 = ("[ 999.000001] n kernel: NVRM: Xid (PCI:0000:18:00): 74, pid=7, name=x, NVLink: fatal error "
          "detected on link 12(0x10000, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0)")


def _device(root, addr, driver="nvidia"):
    real = os.path.join(root, "devices", addr)
    os.makedirs(real)
    for name, value in (("vendor", "0x10de\n"), ("device", "0x2330\n"), ("class", "0x030200\n")):
        with open(os.path.join(real, name), "w") as f:
            f.write(value)
    if driver:
        drv = os.path.join(root, "bus", "pci", "drivers", driver)
        if not os.path.isdir(drv):
            os.makedirs(drv)
        os.symlink(drv, os.path.join(real, "driver"))
    links = os.path.join(root, "bus", "pci", "devices")
    if not os.path.isdir(links):
        os.makedirs(links)
    os.symlink(real, os.path.join(links, addr))


def _health(pending=False, failure=False, vol=0, agg=0):
    return {"remapped_rows": {"supported": True, "correctable": 0, "uncorrectable": 1,
                              "pending": pending, "failure": failure},
            "retired_pages": {"supported": False, "pending": None},
            "ecc": {"volatile": {"uncorrectable": vol}, "aggregate": {"uncorrectable": agg}},
            "nvlink": None, "errors": {}}


def _nvidia(tmp_path, listed, bus=tuple(BUS), health=None, log=(), mig=()):
    """gpu_facts' nvidia facts for a node whose PCI bus shows ``bus`` and whose driver lists
    the GPUs at ``listed`` (indexes into ``bus``)."""
    root = str(tmp_path / "sys")
    for addr in bus:
        _device(root, addr)
    pci = gpu_pci.scan_pci(root)
    events, stats = gpu_xid.parse_xid_events("\n".join(log).encode())
    per_gpu = gpu_xid.aggregate(events)
    xid = {"source": "journal", "attempts": [], "stats": stats, "gpus": per_gpu,
           "action": gpu_xid.worst_action(per_gpu), "events": len(events)}
    gpus = []
    for i in listed:
        h = (health or {}).get(i, _health())
        gpus.append({"index": len(gpus), "uuid": "GPU-%d" % i, "pci_bus_id": "0000" + bus[i],
                     "mig_mode": {"current": "enabled" if i in mig else "disabled"},
                     "health": h, "health_verdict": gpu_health.verdict(h)})
    presence = gpu_pci.compare_gpus(pci["gpus"], [g["pci_bus_id"] for g in gpus], xid_gpus=per_gpu)
    presence["compared"] = True
    return {"source": "nvml", "gpus": gpus, "pci": pci, "xid": xid, "presence": presence,
            "probe": {"status": "ok"}}


def _only(found, fid):
    got = [f for f in found if f["id"] == fid]
    assert len(got) == 1, [f["id"] for f in found]
    return got[0]


def test_healthy_node_has_no_hardware_findings(tmp_path):
    nv = _nvidia(tmp_path, [0, 1, 2])
    found = fd.evaluate_node({"nvidia": nv, "api": {"allocatable": {"nvidia.com/gpu": "3"}}},
                             expected_gpus=3)
    assert [f["id"] for f in found if f["id"].startswith("gpu.")] == []


def test_gpu_off_the_bus_is_missing_with_bus_id_reason_and_xid(tmp_path):
    nv = _nvidia(tmp_path, [0, 1], log=[XID_79])
    found = fd.evaluate_node({"nvidia": nv, "api": {"allocatable": {"nvidia.com/gpu": "2"}}})
    f = _only(found, "gpu.missing")
    assert f["severity"] == "critical" and f["evidence"]["hands_on"] is True
    assert f["evidence"]["bus_ids"] == ["0000:38:00.0"]
    assert "bound to nvidia" in f["evidence"]["missing"][0]["reason"]
    assert f["evidence"]["missing"][0]["xid"]["counts"] == {"79": 1}
    assert "0000:38:00.0" in f["remediation"]["summary"]
    x = _only(found, "gpu.xid")
    assert x["severity"] == "critical" and x["evidence"]["action"] == "reboot"


def test_advertised_capacity_and_inventory_count_short(tmp_path):
    # All GPUs the bus shows are listed, but the Node advertises fewer and the inventory
    # expects a fourth the bus does not show at all.
    nv = _nvidia(tmp_path, [0, 1, 2])
    found = fd.evaluate_node({"nvidia": nv, "api": {"allocatable": {"nvidia.com/gpu": "2"}}},
                             expected_gpus=4)
    f = _only(found, "gpu.missing")
    assert f["evidence"]["bus_ids"] == [] and f["evidence"]["capacity"] == 2
    assert any("advertises 2 nvidia.com/gpu but the driver lists 3" in p for p in f["evidence"]["problems"])
    assert any("inventory expects 4 GPUs" in p for p in f["evidence"]["problems"])


def test_nothing_advertised_is_the_device_plugin_not_the_hardware(tmp_path):
    nv = _nvidia(tmp_path, [0, 1, 2])
    for alloc in ({"nvidia.com/gpu": "0"}, {}, {"nvidia.com/mig-1g.10gb": "7"}):
        found = fd.evaluate_node({"nvidia": nv, "api": {"allocatable": alloc}})
        assert "gpu.missing" not in [f["id"] for f in found], alloc
    f = _only(fd.evaluate_node({"nvidia": nv, "api": {"allocatable": {"nvidia.com/gpu": "1"}}}), "gpu.missing")
    assert f["evidence"]["capacity"] == 1


def test_mig_gpus_are_not_expected_in_the_full_gpu_capacity(tmp_path):
    nv = _nvidia(tmp_path, [0, 1, 2], mig=(2,))
    found = fd.evaluate_node({"nvidia": nv, "api": {"allocatable": {"nvidia.com/gpu": "2"}}})
    assert "gpu.missing" not in [f["id"] for f in found]


def test_driver_gpu_absent_from_a_partial_sysfs_is_evidence_not_a_finding(tmp_path):
    nv = _nvidia(tmp_path, [0, 1], bus=BUS[:1] + ["0000:99:00.0"])
    nv["gpus"][1]["pci_bus_id"] = "00000000:28:00.0"
    nv["gpus"].append(dict(nv["gpus"][0], pci_bus_id="00000000:99:00.0"))
    found = fd.evaluate_node({"nvidia": nv})
    assert "gpu.missing" not in [f["id"] for f in found]


def test_smi_attached_gpus_mismatch_is_missing_even_without_sysfs(tmp_path):
    nv = _nvidia(tmp_path, [0])
    nv["pci"] = {"available": False, "gpus": [], "errors": [{"entry": "/sys", "error": "no sysfs"}]}
    nv["presence"] = gpu_pci.compare_gpus(None, ["00000000:18:00.0"])
    nv["presence"].update(compared=False, ok=False,
                          problems=["nvidia-smi reports 4 attached GPUs but describes 1"])
    f = _only(fd.evaluate_node({"nvidia": nv}), "gpu.missing")
    assert f["evidence"]["problems"] == ["nvidia-smi reports 4 attached GPUs but describes 1"]


@pytest.mark.parametrize("lines,action,severity,hands_on", [
    ([XID_13, XID_13], "restart_app", "info", False),
    ([XID_13, XID_48], "reset_gpu", "critical", False),
    ([XID_74], "investigate", "warning", True),
])
def test_xid_severity_follows_the_documented_action(tmp_path, lines, action, severity, hands_on):
    nv = _nvidia(tmp_path, [0, 1, 2], log=lines)
    x = _only(fd.evaluate_node({"nvidia": nv}), "gpu.xid")
    assert (x["evidence"]["action"], x["severity"], x["evidence"]["hands_on"]) == (action, severity, hands_on)
    first = x["evidence"]["gpus"][0]
    assert first["last"]["message"] and sum(first["counts"].values()) == first["total"]
    assert all(first["meanings"].values())


def test_health_findings_reset_rma_and_ecc_scope(tmp_path):
    nv = _nvidia(tmp_path, [0, 1, 2], health={0: _health(failure=True, agg=9),
                                              1: _health(pending=True, vol=2, agg=2)})
    found = fd.evaluate_node({"nvidia": nv})
    reset = _only(found, "gpu.reset_required")
    assert [g["bus_id"] for g in reset["evidence"]["gpus"]] == ["00000000:28:00.0"]
    assert reset["remediation"]["role"] == "kubegpu.fleet.rolling_reboot"
    rma = _only(found, "gpu.rma")
    assert [g["bus_id"] for g in rma["evidence"]["gpus"]] == ["00000000:18:00.0"]
    assert rma["evidence"]["hands_on"] is True and "row remapping failure" in rma["evidence"]["gpus"][0]["reasons"][0]
    ecc = _only(found, "gpu.ecc_uncorrectable")
    assert ecc["severity"] == "warning"  # GPU 1 has volatile errors
    assert [(g["scope"], g["volatile"], g["aggregate"]) for g in ecc["evidence"]["gpus"]] == \
        [("aggregate", 0, 9), ("volatile", 2, 2)]


def test_aggregate_only_ecc_is_info(tmp_path):
    nv = _nvidia(tmp_path, [0, 1, 2], health={2: _health(agg=3)})
    ecc = _only(fd.evaluate_node({"nvidia": nv}), "gpu.ecc_uncorrectable")
    assert ecc["severity"] == "info" and ecc["evidence"]["gpus"][0]["scope"] == "aggregate"


def test_malformed_hardware_facts_are_reported_not_raised(tmp_path):
    nv = _nvidia(tmp_path, [0, 1, 2])
    nv["presence"] = {"compared": True}
    nv["pci"] = {"gpus": [{"no_bus_id": 1}]}
    nv["gpus"][0]["health_verdict"] = {"reset_required": True, "ecc_uncorrectable": "x"}
    nv["gpus"][1]["health_verdict"] = ["not", "a", "dict"]
    found = fd.evaluate_node({"nvidia": nv})
    probes = sorted(f["evidence"]["probe"] for f in found if f["id"] == "audit.module_failed")
    assert probes == ["evaluate:gpu_presence"]
    # Odd verdict fields are read as absent; what is readable still counts.
    assert [g["gpu"] for g in _only(found, "gpu.reset_required")["evidence"]["gpus"]] == \
        ["GPU 0 (00000000:18:00.0)"]


def test_older_facts_without_hardware_keys_give_nothing():
    found = fd.evaluate_node({"nvidia": {"source": "nvml", "gpus": [{"index": 0}], "probe": {"status": "ok"}}})
    assert [f["id"] for f in found if f["id"].startswith("gpu.")] == []
