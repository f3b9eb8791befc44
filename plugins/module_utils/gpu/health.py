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

def _text(elem, path):
    """Stripped text at ``path``; None when missing, empty or longer than ``MAX_FIELD`` (no
    nvidia-smi value is: a huge one is not believed, nor converted to a number)."""
    if elem is None:
        return None
    node = elem.find(path)
    if node is None or node.text is None:
        return None
    text = node.text.strip()
    if len(text) > MAX_FIELD:
        return None
    return text or None


def _count(elem, path):
    """Integer count at ``path``; None for N/A, missing or any non-number text."""
    text = _text(elem, path)
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _yes_no(elem, path):
    text = _text(elem, path)
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
    return {
        "index": position,
        "bus_id": _text(gpu, "pci/pci_bus_id") or gpu.get("id"),
        "uuid": _text(gpu, "uuid"),
        "ecc_mode": _text(gpu, "ecc_mode/current_ecc"),
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
    return {"driver_version": _text(root, "driver_version"), "attached_gpus": attached,
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


def nvml_health(pynvml, handle, max_links=MAX_NVLINKS):
    """Health of one GPU through NVML; the shape of one :func:`parse_health_xml` GPU entry.

    ``errors`` maps each query that did not succeed to "not supported" or its NVML error.
    """
    errors = {}
    remap = {"supported": False, "correctable": None, "uncorrectable": None, "pending": None,
             "failure": None}
    value, ok = _call(pynvml, errors, "remapped_rows", "nvmlDeviceGetRemappedRows", handle)
    if ok:
        corr, unc, pending, failure = value
        remap = {"supported": True, "correctable": int(corr), "uncorrectable": int(unc),
                 "pending": bool(pending), "failure": bool(failure)}

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
    return {"remapped_rows": remap, "retired_pages": pages, "ecc": ecc, "nvlink": nvlink,
            "errors": errors}


# --------------------------------------------------------------------------- verdict

def verdict(health):
    """``{"reset_required", "rma", "ecc_uncorrectable": {"volatile", "aggregate", "scope"},
    "nvlink_errors", "reasons", "findings"}`` for one GPU's health dict (either reader)."""
    reasons = []
    reset = rma = False
    remap = health.get("remapped_rows") or {}
    pages = health.get("retired_pages") or {}
    if remap.get("pending"):
        reset = True
        reasons.append("row remapping pending: the spare row takes effect at the next GPU reset")
    if pages.get("pending"):
        reset = True
        reasons.append("page retirement pending: the page is retired at the next GPU reset or "
                       "driver reload")
    if remap.get("failure"):
        rma = True
        reasons.append("row remapping failure: a bank ran out of spare rows (RMA candidate)")
    ecc = health.get("ecc") or {}
    agg = ecc.get("aggregate") or {}
    if agg.get("sram_threshold_exceeded"):
        rma = True
        reasons.append("SRAM uncorrectable error threshold exceeded (RMA candidate)")
    vol_unc = (ecc.get("volatile") or {}).get("uncorrectable")
    agg_unc = agg.get("uncorrectable")
    if vol_unc:
        reasons.append("%d uncorrectable ECC errors since the last driver load (volatile)" % vol_unc)
    elif agg_unc:
        reasons.append("%d uncorrectable ECC errors over the GPU's life (aggregate)" % agg_unc)
    nvlink_errors = None
    nv = health.get("nvlink")
    if nv:
        nvlink_errors = sum(nv["totals"].values())
        if nvlink_errors:
            reasons.append("%d NVLink errors (%s)" % (nvlink_errors, ", ".join(
                "%s %d" % (k, v) for k, v in sorted(nv["totals"].items()) if v)))
    findings = []
    if reset:
        findings.append("gpu.reset_required")
    if rma:
        findings.append("gpu.rma")
    if vol_unc or agg_unc:
        findings.append("gpu.ecc_uncorrectable")
    # "volatile": errors since the driver loaded (current trouble); "aggregate": only lifetime
    # errors (history, for the report rather than the rollout).
    scope = "volatile" if vol_unc else ("aggregate" if agg_unc else None)
    return {"reset_required": reset, "rma": rma,
            "ecc_uncorrectable": {"volatile": vol_unc, "aggregate": agg_unc, "scope": scope},
            "nvlink_errors": nvlink_errors, "reasons": reasons, "findings": findings}
