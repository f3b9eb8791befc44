# -*- coding: utf-8 -*-
"""gpu_pci: NVIDIA GPUs from a sysfs-shaped tree, and expected vs present vs advertised."""
from __future__ import absolute_import, division, print_function

import os

import pytest

from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu import pci as gpu_pci
from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu import xid as gpu_xid
from ansible_collections.kubegpu.fleet.plugins.module_utils._common import safe_io


def _device(root, addr, vendor, device, pci_class, driver=None):
    """One /sys/devices/pci.../<addr> directory and its /sys/bus/pci/devices/<addr> link, the
    way the kernel lays them out (attributes end in a newline)."""
    real = root / "devices" / "pci0000:00" / addr
    real.mkdir(parents=True)
    (real / "vendor").write_text("0x%04x\n" % vendor)
    (real / "device").write_text("0x%04x\n" % device)
    (real / "class").write_text("0x%06x\n" % pci_class)
    if driver:
        drv = root / "bus" / "pci" / "drivers" / driver
        drv.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(str(drv), str(real)), str(real / "driver"))
    link = root / "bus" / "pci" / "devices" / addr
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(os.path.relpath(str(real), str(link.parent)), str(link))
    return real


@pytest.fixture
def sysfs(tmp_path):
    root = tmp_path / "sys"
    _device(root, "0000:00:00.0", 0x8086, 0x09a2, 0x060000)                 # host bridge
    _device(root, "0000:03:00.0", 0x1a03, 0x2000, 0x030000)                 # BMC VGA (ASPEED)
    _device(root, "0000:18:00.0", 0x10de, 0x2330, 0x030200, "nvidia")       # H100 3D controller
    _device(root, "0000:18:00.1", 0x10de, 0x22a3, 0x040300, "snd_hda_intel")  # its audio fn
    _device(root, "0000:2a:00.0", 0x10de, 0x2330, 0x030200, "nvidia")
    _device(root, "0000:3a:00.0", 0x10de, 0x2330, 0x030200)                 # no driver bound
    _device(root, "0000:5d:00.0", 0x10de, 0x1eb8, 0x030000, "vfio-pci")     # VGA, passthrough
    _device(root, "0001:9a:00.0", 0x10de, 0x2330, 0x030200, "nvidia")       # second domain
    _device(root, "0000:c5:00.0", 0x10de, 0x22a3, 0x068000, "nvidia-nvswitch")  # NVSwitch
    _device(root, "0000:c6:00.0", 0x10de, 0x22a3, 0x068000)                 # NVSwitch, no driver
    _device(root, "0000:d0:07.0", 0x10de, 0x03ef, 0x068000, "forcedeth")    # nForce MCP Ethernet
    devs = root / "bus" / "pci" / "devices"
    os.symlink("../../../devices/pci0000:00/0000:ee:00.0", str(devs / "0000:ee:00.0"))  # dangling
    fifo = _device(root, "0000:ef:00.0", 0x10de, 0x2330, 0x030200)
    os.unlink(str(fifo / "vendor"))
    os.mkfifo(str(fifo / "vendor"))                                          # would block a read
    return str(root)


def test_scan_finds_gpus_nvswitch_and_reports_unreadable_entries(sysfs):
    out = gpu_pci.scan_pci(sysfs)
    assert out["available"] is True
    assert [(g["bus_id"], g["kind"], g["driver"]) for g in out["gpus"]] == [
        ("0000:18:00.0", "3d", "nvidia"), ("0000:2a:00.0", "3d", "nvidia"),
        ("0000:3a:00.0", "3d", None), ("0000:5d:00.0", "vga", "vfio-pci"),
        ("0001:9a:00.0", "3d", "nvidia")]
    assert out["gpus"][0]["device_id"] == "0x2330" and out["gpus"][0]["class"] == "0x030200"
    assert [(s["bus_id"], s["driver"]) for s in out["nvswitches"]] == [
        ("0000:c5:00.0", "nvidia-nvswitch"), ("0000:c6:00.0", None)]
    errors = dict((e["entry"], e["error"]) for e in out["errors"])
    assert set(errors) == {"0000:ee:00.0", "0000:ef:00.0"}
    assert "missing" in errors["0000:ee:00.0"]
    assert "a FIFO" in errors["0000:ef:00.0"]


def test_scan_without_sysfs_and_bad_option(tmp_path):
    out = gpu_pci.scan_pci(str(tmp_path / "nothing"))
    assert out["available"] is False and out["gpus"] == []
    assert "No such file" in out["errors"][0]["error"]
    with pytest.raises(safe_io.UnsafeInput):
        gpu_pci.scan_pci("relative/sys")
    with pytest.raises(safe_io.UnsafeInput):
        gpu_pci.scan_pci("/sys/../etc")


def test_oversized_attribute_is_an_error_not_a_read(tmp_path):
    root = tmp_path / "sys"
    dev = _device(root, "0000:18:00.0", 0x10de, 0x2330, 0x030200, "nvidia")
    (dev / "class").write_text("0x030200" + " " * 200)
    out = gpu_pci.scan_pci(str(root))
    assert out["gpus"] == [] and "more than the 64 bytes" in out["errors"][0]["error"]


@pytest.mark.parametrize("raw, norm", [
    ("00000000:17:00.0", "0000:17:00.0"), ("0000:17:00.0", "0000:17:00.0"),
    ("PCI:0000:17:00", "0000:17:00.0"), ("0000:AB:1F.3", "0000:ab:1f.3"), ("17:00.0", "0000:17:00.0"),
    ("00010000:05:00.0", "10000:05:00.0"), ("0000:17:00.8", None), ("GPU-1234", None), (None, None),
    ("", None),
])
def test_normalize_bus_id(raw, norm):
    assert gpu_pci.normalize_bus_id(raw) == norm


def test_compare_names_missing_bus_ids_with_reasons(sysfs):
    pci = gpu_pci.scan_pci(sysfs)["gpus"]
    # NVML lists two of the four nvidia-driven GPUs (its 8-digit domain form).
    res = gpu_pci.compare_gpus(pci, ["00000000:18:00.0", "00000001:9A:00.0"], capacity="2",
                               expected_count=8)
    assert res["ok"] is False
    assert res["pci_count"] == 4 and res["present_count"] == 2 and res["capacity"] == 2
    assert res["passthrough"] == ["0000:5d:00.0"]
    missing = dict((m["bus_id"], m["reason"]) for m in res["missing"])
    assert set(missing) == {"0000:2a:00.0", "0000:3a:00.0"}
    assert "bound to nvidia" in missing["0000:2a:00.0"] and "10de:2330" in missing["0000:2a:00.0"]
    assert "no kernel driver bound" in missing["0000:3a:00.0"]
    assert any("inventory expects 8 GPUs; the PCI bus shows 4 and the driver lists 2" in p
               for p in res["problems"])


def test_compare_all_present_and_capacity_short(sysfs):
    pci = [g for g in gpu_pci.scan_pci(sysfs)["gpus"] if g["driver"] == "nvidia"]
    present = ["00000000:18:00.0", "00000000:2A:00.0", "00000001:9A:00.0"]
    assert gpu_pci.compare_gpus(pci, present, capacity=3, expected_count=3)["ok"] is True
    short = gpu_pci.compare_gpus(pci, present, capacity=2)
    assert short["problems"] == ["the node advertises 2 nvidia.com/gpu but the driver lists 3 full GPUs"]
    # Two GPUs in MIG mode are advertised as MIG resources: capacity 1 is then right.
    assert gpu_pci.compare_gpus(pci, present, capacity=1, mig_gpus=2)["ok"] is True


def test_compare_driver_lists_a_gpu_the_bus_does_not_show_and_no_pci_data():
    res = gpu_pci.compare_gpus([], ["00000000:18:00.0"])
    assert res["not_on_bus"] == ["0000:18:00.0"] and res["ok"] is False
    res = gpu_pci.compare_gpus(None, ["00000000:18:00.0"], capacity="x", expected_count=2)
    assert res["pci_count"] is None and res["not_on_bus"] == []
    assert "nvidia.com/gpu capacity 'x' is not a number" in res["problems"]
    assert any("PCI bus shows nothing readable" in p for p in res["problems"])


def test_missing_gpu_reason_carries_its_xids(sysfs):
    pci = [g for g in gpu_pci.scan_pci(sysfs)["gpus"] if g["driver"] == "nvidia"]
    log = ("[ 50.0] NVRM: Xid (PCI:0000:2a:00): 119, pid=7, name=nvidia-smi, Timeout after 6s\n"
           "[ 90.5] NVRM: Xid (PCI:0000:2a:00): 79, pid=1, name=nvc:[driver], GPU has fallen off the bus.\n"
           "[ 91.0] NVRM: Xid (PCI:0000:18:00): 13, Graphics Exception\n")
    xids = gpu_xid.aggregate(gpu_xid.parse_xid_events(log)[0])
    res = gpu_pci.compare_gpus(pci, ["00000000:18:00.0", "00000001:9A:00.0"], xid_gpus=xids)
    (item,) = res["missing"]
    assert item["bus_id"] == "0000:2a:00.0"
    assert item["xid"]["counts"] == {"119": 1, "79": 1}
    assert item["reason"].endswith("kernel log since boot: Xid 79 x1, Xid 119 x1, last: Xid 79 "
                                   "GPU has fallen off the bus.")
