# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU memory health: row remapping, retired pages, uncorrectable ECC, NVLink (node side, 3.8+).

Two readers produce the same per-GPU shape:

* :func:`parse_health_xml` reads the health sections of ``nvidia-smi -q -x`` across driver
  generations (``<ecc_errors>`` with ``<single_bit>``/``<double_bit>`` per location in the
  older documents, ``dram_uncorrectable``/``sram_uncorrectable[_parity|_secded]`` in newer
  ones; ``<retired_pages>``; ``<remapped_rows>``), and reports a document whose
  ``<attached_gpus>`` disagrees with its ``<gpu>`` elements.
* :func:`nvml_health` queries a pynvml module for one device handle. Every query is separate:
  NOT_SUPPORTED / FUNCTION_NOT_FOUND are "not supported", never a failure; other errors are
  recorded per query. It is meant to run inside gpu_probe's child process, which bounds it in
  time like every NVML call.

:func:`verdict` is pure: ``reset_required`` (a row remap or page retirement waiting for a GPU
reset), ``rma`` (row remapping failure, SRAM threshold exceeded) and the uncorrectable ECC
counts, each with its reason.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ctypes
import math
import re
import xml.etree.ElementTree as ET

MAX_XML = 8 << 20  # an 8-GPU node's full -q -x is about 200 KiB
MAX_FIELD = 256    # longest element text read: nvidia-smi's values are short (names, numbers)

NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_FUNCTION_NOT_FOUND = 13
_UNSUPPORTED = (NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_FUNCTION_NOT_FOUND)

# nvmlMemoryErrorType_t / nvmlEccCounterType_t / nvmlPageRetirementCause_t
_CORRECTED, _UNCORRECTED = 0, 1  # nvmlMemoryErrorType_t
_VOLATILE, _AGGREGATE = 0, 1
_CAUSE_MULTIPLE_SBE, _CAUSE_DBE = 0, 1
# nvmlNvLinkErrorCounter_t: DL replay, DL recovery, CRC flit, CRC data, ECC data
NVLINK_COUNTERS = (("replay", 0), ("recovery", 1), ("crc_flit", 2), ("crc_data", 3),
                   ("ecc_data", 4))
MAX_NVLINKS = 18  # NVLink 4 (Hopper) has 18 links per GPU; NVML answers INVALID_ARGUMENT beyond


class HealthParseError(ValueError):
    """The text is not an nvidia-smi XML document this parser accepts."""


# --------------------------------------------------------------------------- XML

def element_text(elem, path, na_is_none=False):
    """Stripped text at ``path`` under ``elem``; None when missing, empty, longer than
    ``MAX_FIELD`` (no nvidia-smi value is: a huge one is not believed, nor converted to a
    number) or, with ``na_is_none``, nvidia-smi's ``N/A``."""
    if elem is None:
        return None
    node = elem.find(path)
    if node is None or node.text is None:
        return None
    text = node.text.strip()
    if not text or len(text) > MAX_FIELD or (na_is_none and text == "N/A"):
        return None
    return text


def _count(elem, path):
    """Integer count at ``path``; None for N/A, missing or any non-number text."""
    text = element_text(elem, path)
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _yes_no(elem, path):
    text = element_text(elem, path)
    if text is None:
        return None
    low = text.lower()
    if low == "yes":
        return True
    if low == "no":
        return False
    return None


def _sum(values):
    nums = [v for v in values if v is not None]
    return sum(nums) if nums else None


_DOCTYPE_SUBSET_RE = re.compile(r"<!DOCTYPE[^>\[]*\[", re.IGNORECASE)


def _document_root(text, max_bytes):
    if text is None:
        raise HealthParseError("no nvidia-smi output")
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    if len(text) > max_bytes:
        raise HealthParseError("nvidia-smi XML is %d bytes, more than the %d this parses"
                               % (len(text), max_bytes))
    start = text.find("<nvidia_smi_log")
    if start < 0:
        raise HealthParseError("no <nvidia_smi_log> document in nvidia-smi output")
    # nvidia-smi prints '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_vNN.dtd">' (an external
    # DTD nobody fetches; it is cut with the prolog). An internal subset or any entity
    # declaration is never nvidia-smi's and could expand without bound: refused.
    if "<!ENTITY" in text.upper() or _DOCTYPE_SUBSET_RE.search(text):
        raise HealthParseError("nvidia-smi XML declares entities or an internal DTD subset; refused")
    body = text[start:]
    if "<!DOCTYPE" in body.upper():
        raise HealthParseError("nvidia-smi XML carries a DOCTYPE inside the document; refused")
    end = body.rfind("</nvidia_smi_log>")
    if end < 0:
        raise HealthParseError("nvidia-smi XML is truncated (no </nvidia_smi_log>)")
    try:
        return ET.fromstring(body[:end + len("</nvidia_smi_log>")])
    except ET.ParseError as e:
        raise HealthParseError("cannot parse nvidia-smi XML: %s" % e)


_OLD_SRAM_LOCATIONS = ("register_file", "l1_cache", "l2_cache", "texture_memory", "texture_shm",
                       "cbu", "sram")


def _ecc_counters(section):
    """Uncorrectable/correctable counts of one ``<volatile>`` or ``<aggregate>`` element."""
    out = {"dram_uncorrectable": None, "sram_uncorrectable": None, "uncorrectable": None,
           "correctable": None, "sram_threshold_exceeded": None, "layout": None}
    if section is None:
        return out
    dbe = section.find("double_bit")
    if dbe is not None:  # R4xx and earlier: per-location single/double bit counts
        out["layout"] = "single_bit/double_bit"
        out["dram_uncorrectable"] = _count(dbe, "device_memory")
        out["sram_uncorrectable"] = _sum(_count(dbe, loc) for loc in _OLD_SRAM_LOCATIONS)
        total = _count(dbe, "total")
        out["uncorrectable"] = total if total is not None else _sum(
            [out["dram_uncorrectable"], out["sram_uncorrectable"]])
        out["correctable"] = _count(section, "single_bit/total")
        return out
    out["layout"] = "dram/sram"
    out["dram_uncorrectable"] = _count(section, "dram_uncorrectable")
    sram = _count(section, "sram_uncorrectable")
    if sram is None:  # R570+ split SRAM uncorrectable errors by protection
        sram = _sum([_count(section, "sram_uncorrectable_parity"),
                     _count(section, "sram_uncorrectable_secded")])
    out["sram_uncorrectable"] = sram
    out["uncorrectable"] = _sum([out["dram_uncorrectable"], sram])
    out["correctable"] = _sum([_count(section, "dram_correctable"),
                               _count(section, "sram_correctable")])
    out["sram_threshold_exceeded"] = _yes_no(section, "sram_threshold_exceeded")
    return out


# nvidia-smi's <gpu_recovery_action> text (R570+; nvmlDeviceGetFieldValues
# NVML_FI_DEV_GET_GPU_RECOVERY_ACTION through NVML) -> this module's name for the driver's verdict.
DRIVER_ACTIONS = ("none", "reset_gpu", "drain_and_reset", "reboot", "drain_p2p", "recover_imex")
# nvmlGpuRecoveryAction_t (nvidia-ml-py 13.615.71): 0 none, 1 GPU reset, 2 node reboot,
# 3 drain P2P, 4 drain and reset, 5 recover IMEX domain, 6 bus reset, 7 system reboot.
RECOVERY_CODES = {0: "none", 1: "reset_gpu", 2: "reboot", 3: "drain_p2p", 4: "drain_and_reset",
                  5: "recover_imex", 6: "reboot", 7: "reboot"}
# Clock event reasons, in nvmlClocksEventReason* bit order; nvidia-smi names each element
# clocks_event_reason_<name> (R535+) or clocks_throttle_reason_<name> (older).
CLOCK_REASONS = (("gpu_idle", 0x1), ("applications_clocks_setting", 0x2), ("sw_power_cap", 0x4),
                 ("hw_slowdown", 0x8), ("sync_boost", 0x10), ("sw_thermal_slowdown", 0x20),
                 ("hw_thermal_slowdown", 0x40), ("hw_power_brake_slowdown", 0x80),
                 ("display_clocks_setting", 0x100))
# NVML_GPU_FABRIC_STATE_*: 0 not supported, 1 not started, 2 in progress, 3 completed.
FABRIC_STATES = {1: "Not Started", 2: "In Progress", 3: "Completed"}
HISTOGRAM = ("max", "high", "partial", "low", "none")
_BANKS_RE = re.compile(r"^([0-9]{1,9})\s*bank")
_WIDTH_RE = re.compile(r"^([0-9]{1,3})x$")


def driver_action_text(text):
    """nvidia-smi's recovery action text -> one of ``DRIVER_ACTIONS``, ``unknown`` for a text
    this does not know, None for N/A or a driver that does not report it."""
    if text is None:
        return None
    low = text.strip().lower()
    if low in ("", "n/a") or "deprecated" in low or "not supported" in low:
        return None
    if low == "none":
        return "none"
    if "drain" in low and "reset" in low:
        return "drain_and_reset"
    if "p2p" in low:
        return "drain_p2p"
    if "imex" in low:
        return "recover_imex"
    if "reboot" in low or "bus reset" in low:
        return "reboot"
    if "reset" in low:
        return "reset_gpu"
    return "unknown"


def _banks(elem, path):
    m = _BANKS_RE.match(element_text(elem, path) or "")
    return int(m.group(1)) if m else None


def _width(elem, path):
    m = _WIDTH_RE.match(element_text(elem, path) or "")
    return int(m.group(1)) if m else None


def _active(elem, path):
    text = element_text(elem, path)
    if text is None:
        return None
    if text == "Active":
        return True
    if text == "Not Active":
        return False
    return None


def _xml_clock_reasons(gpu):
    node = gpu.find("clocks_event_reasons")
    prefix = "clocks_event_reason_"
    if node is None:
        node, prefix = gpu.find("clocks_throttle_reasons"), "clocks_throttle_reason_"
    if node is None:
        return None
    states = dict((name, _active(node, prefix + name)) for name, _bit in CLOCK_REASONS)
    if all(v is None for v in states.values()):
        return None
    return sorted(name for name, v in states.items() if v)


def _xml_extras(gpu):
    """Driver verdict, repair state, remapper histogram, PCIe link, clock event reasons and
    fabric state of one <gpu> element (each None where the document does not carry it)."""
    ecc = gpu.find("ecc_errors")
    status = gpu.find("gpu_reset_status")
    recovery_text = element_text(gpu, "gpu_recovery_action")
    recovery = {"action": driver_action_text(recovery_text), "raw": recovery_text,
                "reset_required": _yes_no(status, "reset_required"),
                "drain_and_reset_recommended": _yes_no(status, "drain_and_reset_recommended")}
    repair = {"channel_repair_pending": _yes_no(ecc, "channel_repair_pending"),
              "tpc_repair_pending": _yes_no(ecc, "tpc_repair_pending"),
              "unrepairable_memory": _yes_no(ecc, "unrepairable_memory")}
    hist_node = gpu.find("remapped_rows/row_remapper_histogram")
    histogram = None
    if hist_node is not None:
        histogram = dict((k, _banks(hist_node, "row_remapper_histogram_" + k)) for k in HISTOGRAM)
        if all(v is None for v in histogram.values()):
            histogram = None
    link = gpu.find("pci/pci_gpu_link_info")
    pcie = {"link_gen_current": _count(link, "pcie_gen/current_link_gen"),
            "link_gen_max": _count(link, "pcie_gen/max_link_gen"),
            "link_width_current": _width(link, "link_widths/current_link_width"),
            "link_width_max": _width(link, "link_widths/max_link_width"),
            "replay_counter": _count(gpu, "pci/replay_counter"),
            "replay_rollover_counter": _count(gpu, "pci/replay_rollover_counter")}
    if all(v is None for v in pcie.values()):
        pcie = None
    fabric = None
    state = element_text(gpu, "fabric/state")
    if state is not None and state != "N/A":
        fabric_status = element_text(gpu, "fabric/status")
        fabric = {"state": state, "status": None if fabric_status in (None, "N/A") else fabric_status}
    return {"recovery": recovery, "repair": repair, "histogram": histogram, "pcie": pcie,
            "clocks_event_reasons": _xml_clock_reasons(gpu), "fabric": fabric}


def _xml_gpu(gpu, position):
    remap = gpu.find("remapped_rows")
    remap_supported = remap is not None and len(remap) > 0
    pages = gpu.find("retired_pages")
    pending_pages = _yes_no(pages, "pending_retirement")
    if pending_pages is None:
        pending_pages = _yes_no(pages, "pending_blacklist")
    sbe_pages = _count(pages, "multiple_single_bit_retirement/retired_count")
    dbe_pages = _count(pages, "double_bit_retirement/retired_count")
    ecc = gpu.find("ecc_errors")
    out = {
        "index": position,
        "bus_id": element_text(gpu, "pci/pci_bus_id") or gpu.get("id"),
        "uuid": element_text(gpu, "uuid"),
        "ecc_mode": element_text(gpu, "ecc_mode/current_ecc"),
        "remapped_rows": {
            "supported": remap_supported,
            "correctable": _count(remap, "remapped_row_corr") if remap_supported else None,
            "uncorrectable": _count(remap, "remapped_row_unc") if remap_supported else None,
            "pending": _yes_no(remap, "remapped_row_pending") if remap_supported else None,
            "failure": _yes_no(remap, "remapped_row_failure") if remap_supported else None,
        },
        "retired_pages": {
            "supported": any(v is not None for v in (pending_pages, sbe_pages, dbe_pages)),
            "multiple_single_bit": sbe_pages,
            "double_bit": dbe_pages,
            "pending": pending_pages,
        },
        "ecc": {
            "volatile": _ecc_counters(ecc.find("volatile") if ecc is not None else None),
            "aggregate": _ecc_counters(ecc.find("aggregate") if ecc is not None else None),
        },
        # nvidia-smi -q -x carries no NVLink error counters (that is `nvidia-smi nvlink -e`).
        "nvlink": None,
        "errors": {},
    }
    extras = _xml_extras(gpu)
    out["remapped_rows"]["histogram"] = extras.pop("histogram")
    out.update(extras)
    return out


def parse_health_xml(text, max_bytes=MAX_XML):
    """Health of every GPU in an ``nvidia-smi -q -x`` document.

    Returns ``{"driver_version", "attached_gpus", "gpu_elements", "gpus", "problems"}``;
    ``problems`` names a document whose ``attached_gpus`` differs from its ``<gpu>`` elements
    (the tool leaves out GPUs whose handle it could not open). Raises HealthParseError.
    """
    root = _document_root(text, max_bytes)
    gpus = [_xml_gpu(g, i) for i, g in enumerate(root.findall("gpu"))]
    attached = _count(root, "attached_gpus")
    problems = []
    if attached is not None and attached != len(gpus):
        problems.append("nvidia-smi reports %d attached GPUs but describes %d" % (attached, len(gpus)))
    return {"driver_version": element_text(root, "driver_version"), "attached_gpus": attached,
            "gpu_elements": len(gpus), "gpus": gpus, "problems": problems}


# --------------------------------------------------------------------------- NVML

def _call(pynvml, record, name, function, *args):
    """(value, ok) of ``pynvml.<function>(*args)``. On an NVML error, record it under
    ``name``: "not supported" for NOT_SUPPORTED / FUNCTION_NOT_FOUND or a pynvml without the
    wrapper, the error text and code otherwise."""
    fn = getattr(pynvml, function, None)
    if fn is None:  # pynvml too old to wrap the function at all
        record[name] = "not supported"
        return None, False
    try:
        return fn(*args), True
    except pynvml.NVMLError as e:
        code = getattr(e, "value", None)
        if code in _UNSUPPORTED:
            record[name] = "not supported"
        else:
            try:
                text = str(e)
            except Exception:  # pylint: disable=broad-except
                text = "NVML error"
            record[name] = "%s (%s)" % (text, code)
        return None, False


def _sram_status(pynvml, errors, handle):
    """nvmlDeviceGetSramEccErrorStatus (R570+ NVML, Hopper and later) or None."""
    struct = getattr(pynvml, "c_nvmlEccSramErrorStatus_v1_t", None)
    if struct is None:
        errors["sram_ecc_status"] = "not supported"
        return None
    status = struct()
    ok = _call(pynvml, errors, "sram_ecc_status", "nvmlDeviceGetSramEccErrorStatus", handle,
               ctypes.byref(status))[1]
    return status if ok else None


# nvmlDeviceGetFieldValues ids (nvidia-ml-py 13.615.71): PCIe replay rollovers, the R570+
# recovery action and its deprecated predecessors (reset required / drain and reset recommended).
FI_PCIE_REPLAY_ROLLOVER = 95
FI_RESET_STATUS = 226
FI_DRAIN_AND_RESET_STATUS = 227
FI_GPU_RECOVERY_ACTION = 230
_VALUE_FIELDS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")


def _field_values(pynvml, errors, handle, ids):
    """``{field id: int or None}``: None where NVML answers the field with an error (a driver
    that does not have it answers NOT_SUPPORTED or DEPRECATED per field)."""
    values, ok = _call(pynvml, errors, "field_values", "nvmlDeviceGetFieldValues", handle, list(ids))
    out = dict((i, None) for i in ids)
    if not ok:
        return out
    for v in values:
        if int(v.nvmlReturn) != 0 or int(v.fieldId) not in out:
            continue
        vtype = int(v.valueType)
        if 0 < vtype < len(_VALUE_FIELDS):
            out[int(v.fieldId)] = int(getattr(v.value, _VALUE_FIELDS[vtype]))
    return out


def _nvml_extras(pynvml, errors, handle):
    fields = _field_values(pynvml, errors, handle, (FI_GPU_RECOVERY_ACTION, FI_RESET_STATUS,
                                                    FI_DRAIN_AND_RESET_STATUS, FI_PCIE_REPLAY_ROLLOVER))
    code = fields[FI_GPU_RECOVERY_ACTION]
    recovery = {"action": None if code is None else RECOVERY_CODES.get(code, "unknown"),
                "raw": None if code is None else str(code),
                "reset_required": None if fields[FI_RESET_STATUS] is None else bool(fields[FI_RESET_STATUS]),
                "drain_and_reset_recommended": (None if fields[FI_DRAIN_AND_RESET_STATUS] is None
                                                else bool(fields[FI_DRAIN_AND_RESET_STATUS]))}
    repair = {"channel_repair_pending": None, "tpc_repair_pending": None, "unrepairable_memory": None}
    value, ok = _call(pynvml, errors, "repair_status", "nvmlDeviceGetRepairStatus", handle)
    if ok:
        repair["channel_repair_pending"], repair["tpc_repair_pending"] = bool(value[0]), bool(value[1])
    value, ok = _call(pynvml, errors, "unrepairable_memory", "nvmlDeviceGetUnrepairableMemoryFlag_v1", handle)
    if ok:
        repair["unrepairable_memory"] = bool(value)
    histogram = None
    value, ok = _call(pynvml, errors, "row_remapper_histogram", "nvmlDeviceGetRowRemapperHistogram", handle)
    if ok:
        histogram = dict((k, int(getattr(value, k))) for k in HISTOGRAM)
    pcie = {}
    for key, fn in (("link_gen_current", "nvmlDeviceGetCurrPcieLinkGeneration"),
                    ("link_gen_max", "nvmlDeviceGetMaxPcieLinkGeneration"),
                    ("link_width_current", "nvmlDeviceGetCurrPcieLinkWidth"),
                    ("link_width_max", "nvmlDeviceGetMaxPcieLinkWidth"),
                    ("replay_counter", "nvmlDeviceGetPcieReplayCounter")):
        value, ok = _call(pynvml, errors, "pcie_" + key, fn, handle)
        pcie[key] = int(value) if ok else None
    pcie["replay_rollover_counter"] = fields[FI_PCIE_REPLAY_ROLLOVER]
    if all(v is None for v in pcie.values()):
        pcie = None
    reasons = None
    value, ok = _call(pynvml, errors, "clocks_event_reasons", "nvmlDeviceGetCurrentClocksEventReasons", handle)
    if ok:
        reasons = sorted(name for name, bit in CLOCK_REASONS if int(value) & bit)
    # A GPU outside an NVLink fabric (PCIe boards, HGX before Hopper) answers NOT_SUPPORTED, as
    # nvidia-smi prints N/A: no fabric is no error. Other errors are recorded.
    fabric = None
    struct = getattr(pynvml, "c_nvmlGpuFabricInfo_t", None)
    if struct is not None:
        info = struct()
        fabric_errors = {}
        ok = _call(pynvml, fabric_errors, "fabric", "nvmlDeviceGetGpuFabricInfo", handle, ctypes.byref(info))[1]
        if fabric_errors.get("fabric", "not supported") != "not supported":
            errors.update(fabric_errors)
        if ok:
            state = FABRIC_STATES.get(int(info.state))
            if state is not None:
                status = int(info.status)
                fabric = {"state": state, "status": "Success" if status == 0 else _error_text(pynvml, status)}
    return {"recovery": recovery, "repair": repair, "histogram": histogram, "pcie": pcie,
            "clocks_event_reasons": reasons, "fabric": fabric}


def _error_text(pynvml, code):
    try:
        text = pynvml.nvmlErrorString(code)
    except Exception:  # pylint: disable=broad-except
        return "NVML error %d" % code
    return text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text)


def nvml_health(pynvml, handle, max_links=MAX_NVLINKS):
    """Health of one GPU through NVML; the shape of one :func:`parse_health_xml` GPU entry.

    ``errors`` maps each query that did not succeed to "not supported" or its NVML error.
    """
    errors = {}
    remap = {"supported": False, "correctable": None, "uncorrectable": None, "pending": None,
             "failure": None, "histogram": None}
    value, ok = _call(pynvml, errors, "remapped_rows", "nvmlDeviceGetRemappedRows", handle)
    if ok:
        corr, unc, pending, failure = value
        remap = {"supported": True, "correctable": int(corr), "uncorrectable": int(unc),
                 "pending": bool(pending), "failure": bool(failure), "histogram": None}

    pages = {"supported": False, "multiple_single_bit": None, "double_bit": None, "pending": None}
    sbe, ok_sbe = _call(pynvml, errors, "retired_pages_sbe", "nvmlDeviceGetRetiredPages",
                        handle, _CAUSE_MULTIPLE_SBE)
    dbe, ok_dbe = _call(pynvml, errors, "retired_pages_dbe", "nvmlDeviceGetRetiredPages",
                        handle, _CAUSE_DBE)
    pend, ok_pend = _call(pynvml, errors, "retired_pages_pending",
                          "nvmlDeviceGetRetiredPagesPendingStatus", handle)
    if ok_sbe or ok_dbe or ok_pend:
        pages = {"supported": True, "multiple_single_bit": len(sbe) if ok_sbe else None,
                 "double_bit": len(dbe) if ok_dbe else None,
                 "pending": bool(pend) if ok_pend else None}

    sram = _sram_status(pynvml, errors, handle)
    ecc = {}
    for key, counter in (("volatile", _VOLATILE), ("aggregate", _AGGREGATE)):
        total, ok = _call(pynvml, errors, "ecc_uncorrectable_" + key,
                          "nvmlDeviceGetTotalEccErrors", handle, _UNCORRECTED, counter)
        total = int(total) if ok else None
        # nvidia-smi's <dram_correctable> + <sram_correctable> are this one total: both
        # backends report the same count (an NVIDIA H100 with driver 580.159.04 gives 0 in both).
        corrected, ok = _call(pynvml, errors, "ecc_correctable_" + key,
                              "nvmlDeviceGetTotalEccErrors", handle, _CORRECTED, counter)
        corrected = int(corrected) if ok else None
        sram_unc = None
        if sram is not None:
            sram_unc = (int(getattr(sram, key + "UncParity")) + int(getattr(sram, key + "UncSecDed")))
        ecc[key] = {
            # The total covers every location; DRAM is what SRAM does not account for.
            "dram_uncorrectable": (max(total - sram_unc, 0)
                                   if total is not None and sram_unc is not None else None),
            "sram_uncorrectable": sram_unc,
            "uncorrectable": total, "correctable": corrected,
            "sram_threshold_exceeded": (bool(sram.bThresholdExceeded)
                                        if sram is not None and key == "aggregate" else None),
            "layout": "nvml"}

    nvlink = None
    for link in range(max_links):
        refused = {}
        state, ok = _call(pynvml, refused, "nvlink", "nvmlDeviceGetNvLinkState", handle, link)
        if not ok:
            # Links are numbered from 0; the first one NVML refuses ends the list (a GPU
            # without NVLink refuses link 0 with NOT_SUPPORTED). Any other error on link 0 is
            # an error of the query.
            if link == 0:
                errors.update(refused)
            elif not refused["nvlink"].endswith("(%d)" % NVML_ERROR_INVALID_ARGUMENT) \
                    and refused["nvlink"] != "not supported":
                errors["nvlink_%d_state" % link] = refused["nvlink"]
            break
        if nvlink is None:
            nvlink = {"links": 0, "active": 0, "totals": dict((c[0], 0) for c in NVLINK_COUNTERS),
                      "by_link": {}}
        nvlink["links"] += 1
        if not state:
            continue
        nvlink["active"] += 1
        for cname, code in NVLINK_COUNTERS:
            v, ok = _call(pynvml, errors, "nvlink_%d_%s" % (link, cname),
                          "nvmlDeviceGetNvLinkErrorCounter", handle, link, code)
            if ok and v:
                nvlink["totals"][cname] += int(v)
                nvlink["by_link"].setdefault(str(link), {})[cname] = int(v)
    out = {"remapped_rows": remap, "retired_pages": pages, "ecc": ecc, "nvlink": nvlink,
           "errors": errors}
    extras = _nvml_extras(pynvml, errors, handle)
    remap["histogram"] = extras.pop("histogram")
    out.update(extras)
    return out


# --------------------------------------------------------------------------- verdict

# The driver's verdict -> this collection's action (DCGM's health watch, DcgmHealthWatch.cpp,
# MonitorGpuRecoveryAction: GPU reset, node reboot and drain-and-reset FAIL, drain P2P WARN).
DRIVER_ACTION_ACTIONS = {"none": "none", "reset_gpu": "reset_gpu", "drain_and_reset": "reset_gpu",
                         "reboot": "reboot", "drain_p2p": "none", "recover_imex": "none",
                         "unknown": "unknown"}
# DCGM's PCIe replay threshold (DcgmHealthWatch.cpp GetExpectedPcieReplayRate): a bit error rate
# of 1e-12 at the link's speed, per lane per minute, times the lanes; more is a WARN.
PCIE_GT_PER_LANE = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}
# DCGM_LIMIT_MAX_ROW_REMAP_UNCORRECTABLE (common/DcgmGPUHardwareLimits.h): WARN at 512.
ROW_REMAP_UNCORRECTABLE_LIMIT = 512
# Clock event reasons that are hardware protection engaging (nvmlClocksEventReason* docs: HW
# slowdown = temperature too high, external power brake or power draw too high; thermal and
# power-brake variants name the cause); DCGM warns on thermal and power violations.
SLOWDOWN_REASONS = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown",
                    "sw_thermal_slowdown")


def pcie_replay_threshold(gen, width):
    """Replays per minute above which DCGM's health watch warns, for a link of ``gen`` x
    ``width`` (None when either is unknown)."""
    if not gen or not width:
        return None
    rate = PCIE_GT_PER_LANE[min(max(int(gen), 1), max(PCIE_GT_PER_LANE))] / 1000.0 * 60
    return int(math.ceil(rate * int(width)))


def _driver_verdict(recovery):
    """(driver action, source) from the recovery action, else the deprecated reset status."""
    recovery = recovery or {}
    if recovery.get("action") is not None:
        return recovery["action"], "gpu_recovery_action"
    if recovery.get("drain_and_reset_recommended"):
        return "drain_and_reset", "gpu_reset_status"
    if recovery.get("reset_required"):
        return "reset_gpu", "gpu_reset_status"
    if recovery.get("reset_required") is False or recovery.get("drain_and_reset_recommended") is False:
        return "none", "gpu_reset_status"
    return None, None


def _pcie_verdict(pcie, reasons, uptime_s):
    """(degraded reasons, evidence) of one GPU's PCIe link."""
    if not pcie:
        return [], None
    out = []
    idle = "gpu_idle" in (reasons or [])
    evidence = dict(pcie, idle=idle, replays_per_minute=None, replay_threshold_per_minute=None)
    cur_w, max_w = pcie.get("link_width_current"), pcie.get("link_width_max")
    cur_g, max_g = pcie.get("link_gen_current"), pcie.get("link_gen_max")
    # An idle GPU lowers its link speed (and, on some boards, width) to save power; real
    # documents of healthy idle GPUs show gen 1 of 4. Only a busy GPU's link is judged.
    if not idle and reasons is not None:
        if cur_w and max_w and cur_w < max_w:
            out.append("PCIe link x%d of x%d while the GPU is busy" % (cur_w, max_w))
        if cur_g and max_g and cur_g < max_g:
            out.append("PCIe link gen %d of %d while the GPU is busy" % (cur_g, max_g))
    replays = pcie.get("replay_counter")
    threshold = pcie_replay_threshold(cur_g, cur_w)
    if replays and uptime_s and uptime_s > 0 and threshold is not None:
        rate = replays / (uptime_s / 60.0)
        evidence["replays_per_minute"] = round(rate, 3)
        evidence["replay_threshold_per_minute"] = threshold
        if rate > threshold:
            out.append("%d PCIe replays, %.2f per minute since boot, above the %d per minute DCGM "
                       "allows for gen %d x%d" % (replays, rate, threshold, cur_g, cur_w))
    if pcie.get("replay_rollover_counter"):
        out.append("the PCIe replay counter rolled over %d times" % pcie["replay_rollover_counter"])
    return out, evidence


def verdict(health, uptime_s=None, mig_enabled=None):
    """One GPU's health verdict (either reader's health dict): ``{"reset_required", "rma",
    "ecc_uncorrectable", "nvlink_errors", "recovery", "pcie", "reasons", "findings",
    "details"}``. ``details`` holds the reasons per finding id. ``uptime_s``: seconds since boot,
    for the PCIe replay rate; ``mig_enabled``: NVML reports a MIG GPU's NVLinks down."""
    reasons = []
    details = {}

    def add(fid, text):
        reasons.append(text)
        details.setdefault(fid, []).append(text)

    reset = rma = False
    remap = health.get("remapped_rows") or {}
    pages = health.get("retired_pages") or {}
    repair = health.get("repair") or {}
    if remap.get("pending"):
        reset = True
        add("gpu.reset_required", "row remapping pending: the spare row takes effect at the next GPU reset")
    if pages.get("pending"):
        reset = True
        add("gpu.reset_required", "page retirement pending: the page is retired at the next GPU reset "
            "or driver reload")
    for key, what in (("channel_repair_pending", "memory channel"), ("tpc_repair_pending", "TPC")):
        if repair.get(key):
            reset = True
            add("gpu.reset_required", "%s repair pending: applied at the next GPU reset" % what)
    if remap.get("failure"):
        rma = True
        add("gpu.rma", "row remapping failure: a bank ran out of spare rows (RMA candidate)")
    if repair.get("unrepairable_memory"):
        rma = True
        add("gpu.rma", "the GPU reports unrepairable memory (DCGM: faulty memory, FAIL)")
    ecc = health.get("ecc") or {}
    agg = ecc.get("aggregate") or {}
    if agg.get("sram_threshold_exceeded"):
        rma = True
        add("gpu.rma", "SRAM uncorrectable error threshold exceeded (RMA candidate)")
    vol_unc = (ecc.get("volatile") or {}).get("uncorrectable")
    agg_unc = agg.get("uncorrectable")
    if vol_unc:
        add("gpu.ecc_uncorrectable", "%d uncorrectable ECC errors since the last driver load (volatile)" % vol_unc)
    elif agg_unc:
        add("gpu.ecc_uncorrectable", "%d uncorrectable ECC errors over the GPU's life (aggregate)" % agg_unc)
    hist = remap.get("histogram") or {}
    if hist.get("none"):
        add("gpu.row_remap_exhausting", "%d memory banks have no spare rows left: the next uncorrectable "
            "error in one of them cannot be remapped" % hist["none"])
    if (remap.get("uncorrectable") or 0) >= ROW_REMAP_UNCORRECTABLE_LIMIT:
        add("gpu.row_remap_exhausting", "%d rows remapped for uncorrectable errors (DCGM warns at %d)"
            % (remap["uncorrectable"], ROW_REMAP_UNCORRECTABLE_LIMIT))
    driver_action, source = _driver_verdict(health.get("recovery"))
    recovery = {"driver_action": driver_action, "source": source,
                "action": DRIVER_ACTION_ACTIONS.get(driver_action) if driver_action else None,
                "raw": (health.get("recovery") or {}).get("raw")}
    if driver_action not in (None, "none"):
        add("gpu.recovery_action", "the driver's recovery verdict is %s (%s)" % (driver_action, source))
    clock_reasons = health.get("clocks_event_reasons")
    slow = [r for r in (clock_reasons or []) if r in SLOWDOWN_REASONS]
    if slow:
        add("gpu.clocks_slowdown", "clocks held down by %s" % ", ".join(slow))
    pcie_reasons, pcie = _pcie_verdict(health.get("pcie"), clock_reasons, uptime_s)
    for text in pcie_reasons:
        add("gpu.pcie_degraded", text)
    nvlink_errors = None
    nv = health.get("nvlink")
    if nv:
        nvlink_errors = sum(nv["totals"].values())
        if nvlink_errors:
            add("gpu.nvlink", "%d NVLink errors (%s)" % (nvlink_errors, ", ".join(
                "%s %d" % (k, v) for k, v in sorted(nv["totals"].items()) if v)))
        down = nv.get("links", 0) - nv.get("active", 0)
        if down and nv.get("active") and not mig_enabled:
            add("gpu.nvlink", "%d of %d NVLinks down" % (down, nv["links"]))
    fabric = health.get("fabric")
    if fabric and (fabric.get("state") != "Completed" or
                   (fabric.get("status") not in (None, "Success"))):
        add("gpu.fabric", "NVLink fabric registration %s%s" % (
            fabric.get("state"), (", status %s" % fabric["status"])
            if fabric.get("status") not in (None, "Success") else ""))
    findings = [fid for fid in ("gpu.reset_required", "gpu.rma", "gpu.ecc_uncorrectable",
                                "gpu.recovery_action", "gpu.row_remap_exhausting", "gpu.pcie_degraded",
                                "gpu.clocks_slowdown", "gpu.nvlink", "gpu.fabric") if fid in details]
    # "volatile": errors since the driver loaded (current trouble); "aggregate": only lifetime
    # errors (history, for the report rather than the rollout).
    scope = "volatile" if vol_unc else ("aggregate" if agg_unc else None)
    return {"reset_required": reset, "rma": rma,
            "ecc_uncorrectable": {"volatile": vol_unc, "aggregate": agg_unc, "scope": scope},
            "nvlink_errors": nvlink_errors, "recovery": recovery, "pcie": pcie,
            "reasons": reasons, "findings": findings, "details": details}
