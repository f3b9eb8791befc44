# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVIDIA GPUs on the PCI bus (sysfs) and the expected-vs-present comparison (node side, 3.8+).

The driver only lists the GPUs it could bring up: a GPU that fell off the bus or failed to
initialise disappears from NVML and ``nvidia-smi`` while it is still enumerated on the PCI bus.
:func:`scan_pci` reads ``<sys_path>/bus/pci/devices/*/{vendor,device,class}`` (the kernel's
sysfs-bus-pci ABI: vendor and class as ``0x``-prefixed hex, class as 24 bits
base/sub/prog-if) through :mod:`safe_io`, so a FIFO, a device node or a huge file planted in a
test or hostile tree never blocks or floods the probe. :func:`compare_gpus` is pure: it joins
what the bus shows, what the driver lists and what the node advertises to Kubernetes.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

from ansible_collections.kubegpu.fleet.plugins.module_utils._common import safe_io

NVIDIA_VENDOR = 0x10DE
# PCI class codes (base class << 8 | subclass): display controllers and "other bridge".
CLASS_VGA = 0x0300
CLASS_3D = 0x0302
CLASS_BRIDGE_OTHER = 0x0680  # NVSwitch enumerates as 0x068000
GPU_CLASSES = {CLASS_VGA: "vga", CLASS_3D: "3d"}

MAX_DEVICES = 4096          # far above any real PCI hierarchy; a larger listing is refused
ATTR_LIMIT = 64             # "0x10de\n" is 7 bytes; sysfs attributes this reads are tiny

_HEX_ATTR_RE = re.compile(r"^0x[0-9A-Fa-f]{1,8}\n?\Z")
_BUS_ID_RE = re.compile(
    r"^(?:PCI:)?(?:([0-9A-Fa-f]{1,8}):)?([0-9A-Fa-f]{1,2}):([0-9A-Fa-f]{1,2})(?:\.([0-7]))?$")


def normalize_bus_id(value):
    """Canonical ``dddd:bb:dd.f`` (lower case) for any PCI address form the stack prints.

    NVML's ``00000000:17:00.0``, sysfs ``0000:17:00.0``, the Xid form ``PCI:0000:17:00`` (no
    function: 0) and a bare ``17:00.0`` (domain 0) all give ``0000:17:00.0``. Domains above
    0xffff keep all their digits. Returns None for anything else.
    """
    if not isinstance(value, str):
        return None
    m = _BUS_ID_RE.match(value.strip())
    if not m:
        return None
    domain = int(m.group(1), 16) if m.group(1) else 0
    return "%04x:%02x:%02x.%d" % (domain, int(m.group(2), 16), int(m.group(3), 16),
                                  int(m.group(4) or 0))


def _hex_attr(path):
    """(int, None) or (None, reason) for a sysfs hex attribute such as ``vendor``."""
    text, err = safe_io.try_read_text(path, limit=ATTR_LIMIT)
    if err:
        return None, err
    if text is None:
        return None, "%s is missing" % path
    # The kernel writes "0x%04x\n" / "0x%06x\n": int(..., 16) alone would also take "1_0de" and
    # non-ASCII digits.
    if not _HEX_ATTR_RE.match(text):
        return None, "%s does not hold a hex number: %r" % (path, text.strip()[:32])
    return int(text.strip(), 16), None


def _driver_of(entry):
    """Name of the kernel driver bound to the device (``nvidia``, ``vfio-pci``) or None."""
    try:
        target = os.readlink(os.path.join(entry, "driver"))
    except OSError:
        return None
    return os.path.basename(target.rstrip("/")) or None


def scan_pci(sys_path="/sys"):
    """NVIDIA GPUs and NVSwitches enumerated under ``<sys_path>/bus/pci/devices``.

    Returns ``{"available", "path", "gpus", "nvswitches", "errors"}``. Each device is
    ``{"bus_id", "vendor_id", "device_id", "class", "kind", "driver"}`` (``kind`` ``vga`` or
    ``3d`` for GPUs, ``nvswitch`` for bridges); ``errors`` lists ``{"entry", "error"}`` for
    entries that could not be read (dangling links, FIFOs, unreadable attributes), which are
    left out rather than guessed. ``available`` is False when the directory itself cannot be
    listed (no sysfs in a container, wrong ``sys_path``); the reason is in ``errors``.
    """
    safe_io.check_path(sys_path, "sys_path")
    devdir = os.path.join(sys_path, "bus", "pci", "devices")
    out = {"available": False, "path": devdir, "gpus": [], "nvswitches": [], "errors": []}
    try:
        names = os.listdir(devdir)
    except OSError as e:
        out["errors"].append({"entry": devdir, "error": "%s: %s" % (devdir, e.strerror or e)})
        return out
    if len(names) > MAX_DEVICES:
        out["errors"].append({"entry": devdir, "error": "%s lists %d entries, more than the %d "
                                                        "this reads" % (devdir, len(names), MAX_DEVICES)})
        return out
    out["available"] = True
    for name in sorted(names):
        bus_id = normalize_bus_id(name)
        if bus_id is None:
            continue  # not a PCI address; sysfs only holds addresses here
        entry = os.path.join(devdir, name)
        vendor, err = _hex_attr(os.path.join(entry, "vendor"))
        if err:
            out["errors"].append({"entry": name, "error": err})
            continue
        if vendor != NVIDIA_VENDOR:
            continue
        pci_class, err = _hex_attr(os.path.join(entry, "class"))
        if err:
            out["errors"].append({"entry": name, "error": err})
            continue
        device, err = _hex_attr(os.path.join(entry, "device"))
        if err:
            out["errors"].append({"entry": name, "error": err})
            continue
        base_sub = (pci_class >> 8) & 0xFFFF
        if base_sub in GPU_CLASSES:
            kind, bucket = GPU_CLASSES[base_sub], "gpus"
        elif base_sub == CLASS_BRIDGE_OTHER:
            # NVSwitches enumerate as "Bridge [0680]" (lspci: "GH100 [H100 NVSwitch] [10de:22a3]"),
            # but so did the Ethernet of NVIDIA's old nForce/MCP chipsets (driver forcedeth):
            # a bridge bound to anything but the NVSwitch driver is not a switch.
            driver = _driver_of(entry)
            if driver not in (None, "nvidia-nvswitch", "nvidia"):
                continue
            kind, bucket = "nvswitch", "nvswitches"
        else:
            continue  # the GPU's audio / USB-C functions share the vendor id
        out[bucket].append({"bus_id": bus_id, "vendor_id": "0x%04x" % vendor,
                            "device_id": "0x%04x" % device, "class": "0x%06x" % pci_class,
                            "kind": kind, "driver": _driver_of(entry)})
    return out


def listed_bus_ids(gpus):
    """Bus ids of the GPUs the driver lists *and can open*: a GPU whose handle could not be
    opened is not in service, whichever backend saw it (nvidia-smi names its bus id in
    "Unable to determine the device handle for GPU0000:08:00.0: Unknown Error", NVML's
    nvmlDeviceGetHandleByIndex gives none), so both backends count it missing alike."""
    out = []
    for gpu in gpus or ():
        if not isinstance(gpu, dict) or not isinstance(gpu.get("pci_bus_id"), str):
            continue
        errors = gpu.get("errors") if isinstance(gpu.get("errors"), list) else []
        if gpu.get("uuid") is None and any(isinstance(e, dict) and e.get("function") == "nvmlDeviceGetHandleByIndex"
                                           for e in errors):
            continue
        out.append(gpu["pci_bus_id"])
    return out


# Drivers that take a GPU away from the NVIDIA driver on purpose (passthrough to a VM).
PASSTHROUGH_DRIVERS = ("vfio-pci", "pci-stub")


def compare_gpus(pci_gpus, present_bus_ids, capacity=None, expected_count=None, mig_gpus=0,
                 xid_gpus=None):
    """Expected GPUs (PCI bus) vs present (driver) vs advertised (``nvidia.com/gpu``).

    ``pci_gpus``: the ``gpus`` list of :func:`scan_pci` (or None when the bus could not be
    read). ``present_bus_ids``: bus ids the driver lists (NVML/nvidia-smi, any domain format).
    ``capacity``: the Node's ``status.capacity["nvidia.com/gpu"]`` or None. ``expected_count``:
    GPUs the inventory says the node has, or None. ``mig_gpus``: GPUs in MIG mode, which the
    device plugin advertises as MIG resources instead of ``nvidia.com/gpu`` (mixed strategy),
    so the capacity check only expects the others. ``xid_gpus``: gpu_xid's per-GPU aggregate;
    a missing GPU's Xids since boot are added to its reason (``xid``: counts and last message).

    Returns ``{"ok", "pci_count", "present_count", "capacity", "expected_count", "missing",
    "not_on_bus", "passthrough", "problems"}``: ``missing`` is ``[{"bus_id", "reason"}]``,
    ``problems`` human-readable lines, each naming numbers and bus ids.
    """
    present = {}
    for raw in present_bus_ids or ():
        norm = normalize_bus_id(raw)
        if norm:
            present[norm] = raw
    missing, passthrough, problems = [], [], []
    pci_ids = set()
    if pci_gpus is not None:
        for gpu in pci_gpus:
            bus_id = gpu["bus_id"]
            pci_ids.add(bus_id)
            if bus_id in present:
                continue
            driver = gpu.get("driver")
            if driver in PASSTHROUGH_DRIVERS:
                passthrough.append(bus_id)
                continue
            ident = "%s:%s" % (gpu.get("vendor_id", "0x10de")[2:], gpu.get("device_id", "0x?")[2:])
            if driver is None:
                why = "on the PCI bus (%s) with no kernel driver bound; the driver does not list it" % ident
            elif driver != "nvidia":
                why = "on the PCI bus (%s) bound to %s, not nvidia; the driver does not list it" % (ident, driver)
            else:
                why = ("on the PCI bus (%s) and bound to nvidia, but NVML/nvidia-smi do not list it "
                       "(fallen off the bus or failed to initialise)" % ident)
            item = {"bus_id": bus_id, "reason": why}
            xid = (xid_gpus or {}).get(bus_id)
            if xid:
                item["xid"] = {"counts": xid["counts"], "last": xid["last"]}
                item["reason"] += "; kernel log since boot: %s, last: Xid %s %s" % (
                    ", ".join("Xid %s x%d" % (k, v) for k, v in sorted(xid["counts"].items(),
                                                                       key=lambda kv: int(kv[0]))),
                    xid["last"]["xid"], xid["last"]["message"])
            missing.append(item)
    not_on_bus = sorted(b for b in present if pci_gpus is not None and b not in pci_ids)
    for item in missing:
        problems.append("GPU %s: %s" % (item["bus_id"], item["reason"]))
    if not_on_bus:
        problems.append("the driver lists %s, which the PCI scan does not show"
                        % ", ".join(not_on_bus))
    pci_count = None if pci_gpus is None else len(pci_gpus) - len(passthrough)
    if capacity is not None:
        try:
            cap = int(capacity)
        except (TypeError, ValueError):
            cap = None
            problems.append("nvidia.com/gpu capacity %r is not a number" % (capacity,))
        if cap is not None:
            advertised_expected = max(len(present) - int(mig_gpus or 0), 0)
            if cap < advertised_expected:
                problems.append("the node advertises %d nvidia.com/gpu but the driver lists %d "
                                "full GPUs" % (cap, advertised_expected))
            capacity = cap
    if expected_count is not None:
        seen = max(pci_count or 0, len(present))
        if seen < int(expected_count):
            problems.append("the inventory expects %d GPUs; the PCI bus shows %s and the driver "
                            "lists %d" % (int(expected_count),
                                          "nothing readable" if pci_count is None else pci_count,
                                          len(present)))
    return {"ok": not problems, "pci_count": pci_count, "present_count": len(present),
            "capacity": capacity, "expected_count": expected_count, "missing": missing,
            "not_on_bus": not_on_bus, "passthrough": sorted(passthrough), "problems": problems}
