# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parsers for ``nvidia-smi`` output (node side, Python 3.8+).

``nvidia-smi -q -x`` (the nvsmi_device XML) carries versions, GPUs, MIG mode and, per MIG
device, its GPU/compute instance ids and attributes, but neither the MIG device UUID nor its
profile name; ``nvidia-smi -L`` carries those. :func:`merge_smi` joins the two.

nvidia-smi exits with the NVML return code of what failed (9 driver not loaded, 12 library not
found, 15 GPU lost, 18 driver/library version mismatch, ...; 255 for "other error", which is
where NVML_ERROR_UNKNOWN (999) ends up), so :func:`smi_error` maps an exit status back to the
NVML error name.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu.health import (
    MAX_FIELD,
    MAX_XML,
    HealthParseError,
    element_text,
)
from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu.health import _document_root as document_root

# nvmlReturn_t values (NVML API reference, nvmlReturn_t enum).
NVML_ERROR_NAMES = {
    0: "NVML_SUCCESS",
    1: "NVML_ERROR_UNINITIALIZED",
    2: "NVML_ERROR_INVALID_ARGUMENT",
    3: "NVML_ERROR_NOT_SUPPORTED",
    4: "NVML_ERROR_NO_PERMISSION",
    5: "NVML_ERROR_ALREADY_INITIALIZED",
    6: "NVML_ERROR_NOT_FOUND",
    7: "NVML_ERROR_INSUFFICIENT_SIZE",
    8: "NVML_ERROR_INSUFFICIENT_POWER",
    9: "NVML_ERROR_DRIVER_NOT_LOADED",
    10: "NVML_ERROR_TIMEOUT",
    11: "NVML_ERROR_IRQ_ISSUE",
    12: "NVML_ERROR_LIBRARY_NOT_FOUND",
    13: "NVML_ERROR_FUNCTION_NOT_FOUND",
    14: "NVML_ERROR_CORRUPTED_INFOROM",
    15: "NVML_ERROR_GPU_IS_LOST",
    16: "NVML_ERROR_RESET_REQUIRED",
    17: "NVML_ERROR_OPERATING_SYSTEM",
    18: "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
    19: "NVML_ERROR_IN_USE",
    20: "NVML_ERROR_MEMORY",
    21: "NVML_ERROR_NO_DATA",
    22: "NVML_ERROR_VGPU_ECC_NOT_SUPPORTED",
    23: "NVML_ERROR_INSUFFICIENT_RESOURCES",
    24: "NVML_ERROR_FREQ_NOT_SUPPORTED",
    25: "NVML_ERROR_ARGUMENT_VERSION_MISMATCH",
    26: "NVML_ERROR_DEPRECATED",
    27: "NVML_ERROR_NOT_READY",
    28: "NVML_ERROR_GPU_NOT_FOUND",
    29: "NVML_ERROR_INVALID_STATE",
    30: "NVML_ERROR_RESET_TYPE_NOT_SUPPORTED",
    999: "NVML_ERROR_UNKNOWN",
}

_LIST_GPU_RE = re.compile(r"^GPU (\d+): (.*) \(UUID: ([^)\s]+)\)\s*$")
_LIST_MIG_RE = re.compile(r"^\s+MIG\s+(\S+)\s+Device\s+(\d+):\s+\(UUID: ([^)\s]+)\)\s*$")
_HANDLE_ERR_RE = re.compile(r"Unable to determine the device handle for (?:GPU|gpu)\s?([0-9A-Fa-f:.]+): (.*)$")
_MIB_RE = re.compile(r"^\s*(\d+)\s*MiB\s*$")
_NVLINK_GPU_RE = re.compile(r"^GPU (\d+): .*\(UUID: ([^)\s]+)\)\s*$")
_NVLINK_LINK_RE = re.compile(r"^\s+Link (\d{1,2}): (.*?)\s*$")
_NVLINK_COUNTER_RE = re.compile(r"^([A-Za-z ]+ Errors): (\d{1,20})$")
# nvidia-smi nvlink -e counter names -> NVML's nvmlNvLinkErrorCounter_t names (health.py);
# Hopper and later print one "CRC Errors" counter instead of flit/data.
NVLINK_COUNTER_NAMES = {"Replay Errors": "replay", "Recovery Errors": "recovery",
                        "CRC Flit Errors": "crc_flit", "CRC Data Errors": "crc_data",
                        "ECC Data Errors": "ecc_data", "CRC Errors": "crc"}


MAX_NVLINK_LINES = 32 * 64 * 8  # 32 GPUs x 64 links x counters: far above any node


class SmiParseError(ValueError):
    """nvidia-smi printed something that is not the expected document."""


def error_name(code):
    """NVML error name for a return code (``NVML_ERROR_<code>`` style for unknown ones)."""
    if code is None:
        return None
    return NVML_ERROR_NAMES.get(code, "NVML_ERROR_%d" % code)


def _text(elem, path):
    """:func:`health.element_text`, ``N/A`` read as None (nothing to report)."""
    return element_text(elem, path, na_is_none=True)


def _attr(elem, name):
    """An attribute's value, None when missing, empty or longer than ``MAX_FIELD``."""
    value = (elem.get(name) or "").strip()
    return value if value and len(value) <= MAX_FIELD else None


def _int(text):
    if text is None:
        return None
    try:
        return int(text, 0) if text.lower().startswith("0x") else int(text)
    except ValueError:
        return None


def _mib(text):
    m = _MIB_RE.match(text or "")
    return int(m.group(1)) if m else None


def mig_mode_value(text):
    """nvidia-smi's Enabled/Disabled/N/A -> enabled/disabled/unsupported; anything else unknown."""
    if text is None or text.strip() in ("", "N/A"):
        return "unsupported"
    low = text.strip().lower()
    if low in ("enabled", "disabled"):
        return low
    return "unknown"


# nvmlGpuVirtualizationMode_t (NVML API reference, "GRID Virtualization Enums"): NONE (bare
# metal), PASSTHROUGH, VGPU ("vGPU inside virtual machine": the node runs NVIDIA's vGPU guest
# driver), HOST_VGPU / HOST_VSGA (the hypervisor). nvidia-smi prints them as None, Pass-Through,
# VGPU, Host VGPU, Host VSGA; compared without case, spaces and dashes.
VIRTUALIZATION_MODES = ("none", "passthrough", "vgpu", "host_vgpu", "host_vsga")


def virtualization_mode_value(value):
    """NVML's enum value (int) or nvidia-smi's text -> one of VIRTUALIZATION_MODES, or
    "unknown" (absent, an error text, a value NVML may add later)."""
    if isinstance(value, bool):
        return "unknown"
    if isinstance(value, int):
        return VIRTUALIZATION_MODES[value] if 0 <= value < len(VIRTUALIZATION_MODES) else "unknown"
    if not isinstance(value, str):
        return "unknown"
    key = "".join(c for c in value.strip().lower() if c.isalnum())
    words = {"none": "none", "passthrough": "passthrough", "vgpu": "vgpu", "hostvgpu": "host_vgpu",
             "hostvsga": "host_vsga"}
    return words.get(key, "unknown")


def parse_smi_xml(text):
    """Parse ``nvidia-smi -q -x`` output.

    Returns ``{"driver_version", "cuda_driver_version", "attached_gpus", "gpus": [...]}``; each
    GPU is ``{"uuid", "name", "minor_number", "pci_bus_id", "memory_total_mib",
    "mig_mode": {"current", "pending"}, "mig_devices": [{"index", "gpu_instance_id",
    "compute_instance_id", "multiprocessor_count", "memory_total_mib"}]}``. Raises
    SmiParseError when the text is not an nvidia_smi_log document, is larger than ``MAX_XML``
    or declares entities (the one guarded parse of health.py: the same bounds for both readers
    of the document).
    """
    try:
        root = document_root(text or "", MAX_XML)
    except HealthParseError as e:
        raise SmiParseError(str(e))
    out = {
        "driver_version": _text(root, "driver_version"),
        "cuda_driver_version": _text(root, "cuda_version"),
        "attached_gpus": _int(_text(root, "attached_gpus")),
        "gpus": [],
    }
    for gpu in root.findall("gpu"):
        migs = []
        for mig in gpu.findall("mig_devices/mig_device"):
            migs.append({
                "index": _int(_text(mig, "index")),
                "gpu_instance_id": _int(_text(mig, "gpu_instance_id")),
                "compute_instance_id": _int(_text(mig, "compute_instance_id")),
                "multiprocessor_count": _int(_text(mig, "device_attributes/shared/multiprocessor_count")),
                "memory_total_mib": _mib(_text(mig, "fb_memory_usage/total")),
            })
        mig_node = gpu.find("mig_mode")
        out["gpus"].append({
            "uuid": _uuid(_text(gpu, "uuid"), "GPU-"),
            "name": _text(gpu, "product_name"),
            "minor_number": _int(_text(gpu, "minor_number")),
            "pci_bus_id": _text(gpu, "pci/pci_bus_id") or _attr(gpu, "id"),
            "memory_total_mib": _mib(_text(gpu, "fb_memory_usage/total")),
            "mig_mode": {
                "current": mig_mode_value(_text(mig_node, "current_mig") if mig_node is not None else None),
                "pending": mig_mode_value(_text(mig_node, "pending_mig") if mig_node is not None else None),
            },
            "mig_devices": migs,
            "virtualization_mode": virtualization_mode_value(_text(gpu, "gpu_virtualization_mode/virtualization_mode")),
        })
    return out


def _uuid(text, prefix):
    """A UUID field, or None when nvidia-smi printed an error text in its place."""
    if text and text.startswith(prefix):
        return text
    return None


def parse_smi_list(text):
    """Parse ``nvidia-smi -L``: ``[{"index", "name", "uuid", "mig_devices": [{"index", "profile",
    "uuid"}]}]``. Lines that do not match (warnings, errors) are ignored."""
    gpus = []
    for line in (text or "").splitlines():
        m = _LIST_GPU_RE.match(line)
        if m:
            gpus.append({"index": int(m.group(1)), "name": m.group(2).strip(), "uuid": m.group(3),
                         "mig_devices": []})
            continue
        m = _LIST_MIG_RE.match(line)
        if m and gpus:
            gpus[-1]["mig_devices"].append({"index": int(m.group(2)), "profile": m.group(1),
                                            "uuid": m.group(3)})
    return gpus


def parse_handle_errors(text):
    """``Unable to determine the device handle for GPU<id>: <message>`` lines.

    Returns ``[{"gpu": <index or None>, "pci_bus_id": <id or None>, "message"}]``.
    """
    out = []
    for line in (text or "").splitlines():
        m = _HANDLE_ERR_RE.search(line.strip())
        if not m:
            continue
        ident, msg = m.group(1), m.group(2).strip()
        if ident.isdigit():
            out.append({"gpu": int(ident), "pci_bus_id": None, "message": msg})
        else:
            out.append({"gpu": None, "pci_bus_id": ident, "message": msg})
    return out


def parse_nvlink(status_text, errors_text):
    """``nvidia-smi nvlink -s`` and ``nvidia-smi nvlink -e`` -> ``{gpu uuid: nvlink}`` in the
    shape of health.nvml_health's ``nvlink`` (``{"links", "active", "totals", "by_link"}``; a
    GPU that lists no link has None). Link states: a rate is active, ``<inactive>`` is not."""
    out = {}
    uuid = None
    for line in (status_text or "").splitlines()[:MAX_NVLINK_LINES]:
        m = _NVLINK_GPU_RE.match(line)
        if m:
            uuid = m.group(2)
            out[uuid] = None
            continue
        m = _NVLINK_LINK_RE.match(line)
        if m and uuid is not None:
            nv = out[uuid]
            if nv is None:
                nv = out[uuid] = {"links": 0, "active": 0,
                                  "totals": dict((k, 0) for k in ("replay", "recovery", "crc_flit",
                                                                  "crc_data", "ecc_data")),
                                  "by_link": {}}
            nv["links"] += 1
            if "inactive" not in m.group(2).lower():
                nv["active"] += 1
    uuid = None
    for line in (errors_text or "").splitlines()[:MAX_NVLINK_LINES]:
        m = _NVLINK_GPU_RE.match(line)
        if m:
            uuid = m.group(2)
            continue
        m = _NVLINK_LINK_RE.match(line)
        if not m or uuid is None or out.get(uuid) is None:
            continue
        c = _NVLINK_COUNTER_RE.match(m.group(2))
        if not c or c.group(1) not in NVLINK_COUNTER_NAMES:
            continue
        name, value = NVLINK_COUNTER_NAMES[c.group(1)], int(c.group(2))
        nv = out[uuid]
        nv["totals"][name] = nv["totals"].get(name, 0) + value
        if value:
            nv["by_link"].setdefault(m.group(1), {})[name] = value
    return out


def smi_error(rc, output):
    """``{"code", "message"}`` for a failed nvidia-smi run (exit status = NVML return code)."""
    lines = [ln.strip() for ln in (output or "").splitlines() if ln.strip()]
    message = lines[0] if lines else "nvidia-smi exited with status %s" % rc
    if rc is not None and rc < 0:
        return {"code": None, "message": "nvidia-smi killed by signal %d" % -rc}
    if rc == 255:
        return {"code": "NVML_ERROR_UNKNOWN", "message": message}
    return {"code": error_name(rc) if rc in NVML_ERROR_NAMES else None, "message": message}


def merge_smi(xml_facts, listing, handle_errors=()):
    """Join ``parse_smi_xml`` and ``parse_smi_list`` results into probe GPUs.

    GPUs are matched by UUID (the XML has no index); MIG devices by their index on the GPU.
    GPUs nvidia-smi could not open (``handle_errors``) keep their index slot with an error.
    """
    by_uuid = dict((g["uuid"], g) for g in listing if g.get("uuid"))
    failed = dict((e["gpu"], e) for e in handle_errors if e.get("gpu") is not None)
    gpus = []
    index = 0
    for xgpu in xml_facts.get("gpus", []):
        while index in failed:
            gpus.append(_failed_gpu(index, failed.pop(index)))
            index += 1
        lgpu = by_uuid.get(xgpu.get("uuid")) or {}
        lmigs = dict((m["index"], m) for m in lgpu.get("mig_devices", []))
        migs = []
        for xmig in xgpu.get("mig_devices", []):
            lmig = lmigs.get(xmig.get("index")) or {}
            profile = lmig.get("profile")
            migs.append({
                "index": xmig.get("index"),
                "uuid": lmig.get("uuid"),
                # NVML names a MIG device "<GPU name> MIG <profile>"; -L prints only the profile.
                "name": "%s MIG %s" % (xgpu.get("name"), profile) if profile and xgpu.get("name") else None,
                "profile": profile,
                "gpu_instance_id": xmig.get("gpu_instance_id"),
                "compute_instance_id": xmig.get("compute_instance_id"),
                "memory_total_mib": xmig.get("memory_total_mib"),
                "multiprocessor_count": xmig.get("multiprocessor_count"),
            })
        gpus.append({
            "index": lgpu.get("index", index),
            "uuid": xgpu.get("uuid"),
            "name": xgpu.get("name"),
            "minor_number": xgpu.get("minor_number"),
            "pci_bus_id": xgpu.get("pci_bus_id"),
            "memory_total_mib": xgpu.get("memory_total_mib"),
            "mig_mode": dict(xgpu.get("mig_mode") or {"current": "unknown", "pending": "unknown"}),
            "mig_devices": migs,
            "virtualization_mode": xgpu.get("virtualization_mode") or "unknown",
            "errors": [],
        })
        index = gpus[-1]["index"] + 1
    for idx in sorted(failed):
        gpus.append(_failed_gpu(idx, failed[idx]))
    for err in handle_errors:
        if err.get("gpu") is None:
            gpus.append(_failed_gpu(None, err))
    return gpus


def _failed_gpu(index, err):
    return {
        "index": index, "uuid": None, "name": None, "minor_number": None,
        "pci_bus_id": err.get("pci_bus_id"), "memory_total_mib": None,
        "mig_mode": {"current": "unknown", "pending": "unknown"}, "mig_devices": [], "virtualization_mode": "unknown",
        "errors": [{"function": "nvmlDeviceGetHandleByIndex", "code": _code_from_message(err["message"]),
                    "message": err["message"]}],
    }


_MESSAGES = {
    "gpu is lost": "NVML_ERROR_GPU_IS_LOST",
    "unknown error": "NVML_ERROR_UNKNOWN",
    "insufficient permissions": "NVML_ERROR_NO_PERMISSION",
    "gpu requires restart": "NVML_ERROR_RESET_REQUIRED",
    "not supported": "NVML_ERROR_NOT_SUPPORTED",
    "timeout": "NVML_ERROR_TIMEOUT",
    "corrupted inforom": "NVML_ERROR_CORRUPTED_INFOROM",
    "not found": "NVML_ERROR_NOT_FOUND",
}


def _code_from_message(message):
    low = (message or "").lower()
    for text, code in _MESSAGES.items():
        if low.startswith(text):
            return code
    return None
