# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Xid events from the kernel log, classified with NVIDIA's Xid catalog (node side, 3.8+).

The NVIDIA kernel driver reports GPU errors as ``NVRM: Xid (PCI:0000:17:00): 79, pid=...,
name=..., GPU has fallen off the bus.`` (older drivers: ``NVRM: Xid (0000:03:00): 14, ...``).
:func:`parse_xid_events` finds them in kernel log text whatever the record prefix (``journalctl
-k -o short-monotonic`` / ``-o json``, ``dmesg``, raw ``/dev/kmsg`` records), bounded in lines,
bytes and line length; :func:`read_kernel_log` gets that text since boot from the journal, else
``/dev/kmsg``, else ``dmesg``, each bounded in time and size; :func:`classify` maps an Xid to
the resolution bucket NVIDIA's catalog documents and :func:`aggregate` folds events per GPU.
Every catalog entry is sourced in docs/hardware-health.md.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import json
import re

from ansible_collections.kubegpu.fleet.plugins.module_utils._common import safe_io
from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu.pci import normalize_bus_id

MAX_BYTES = 16 << 20        # kernel ring buffers are at most a few MiB; journals since boot more
MAX_LINES = 200000
# Longer lines are cut before matching: printk records are far shorter and a journal JSON
# record with all its fields a few KiB, so a longer line is no driver record.
MAX_LINE = 16384
MAX_EVENTS = 10000
MAX_MESSAGE = 300

# --------------------------------------------------------------------------- catalog

# Actions, least to most severe. "reset_gpu" and "reboot" take the node out of service;
# "investigate" needs a person (NVIDIA: report / contact support / named workflow).
ACTIONS = ("none", "ignore", "restart_app", "investigate", "reset_gpu", "reboot")
_RANK = dict((a, i) for i, a in enumerate(ACTIONS))

# Catalog resolution bucket (immediate action) -> action of this collection.
BUCKET_ACTIONS = {
    "IGNORE": "ignore",
    "RESTART_APP": "restart_app",
    "WORKFLOW_XID_45": "restart_app",
    "UNEXPECTED_ERR_REPORT_ISSUE": "investigate",
    "CONTACT_SUPPORT": "investigate",
    "CHECK_MECHANICALS": "investigate",
    "UPDATE_SWFW": "investigate",
    "CHECK_UVM": "investigate",
    "WORKFLOW_NVLINK_ERR": "investigate",
    "WORKFLOW_NVLINK5_ERR": "investigate",
    "RESET_GPU": "reset_gpu",
    # Xid 48's workflow: an uncorrectable DRAM error marks the row for remapping, which only
    # takes effect at the next GPU reset (memory error management guide, "Row Remapping").
    "WORKFLOW_XID_48": "reset_gpu",
    "RESTART_VM": "reboot",
    "RESTART_BM": "reboot",
}

# Xid -> (mnemonic, immediate-action bucket, short meaning). From NVIDIA's Xid catalog for
# Ampere and newer (docs/hardware-health.md has the sources and the date read). Xids outside
# this table classify as "investigate".
CATALOG = {
    8: ("ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT", "RESTART_APP", "GPU stopped processing"),
    11: ("ROBUST_CHANNEL_GR_ERROR_MISSING_HW", "RESTART_APP", "invalid or corrupted push buffer stream"),
    13: ("ROBUST_CHANNEL_GR_EXCEPTION", "RESTART_APP", "graphics engine exception (usually the application)"),
    31: ("ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "RESTART_APP", "GPU memory page fault (usually the application)"),
    32: ("ROBUST_CHANNEL_PBDMA_ERROR", "RESTART_APP", "invalid or corrupted push buffer stream"),
    38: ("ROBUST_CHANNEL_FECS_ERR_WATCHDOG_TIMEOUT", "IGNORE", "driver firmware watchdog"),
    43: ("ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "IGNORE", "GPU stopped processing the application's channel"),
    44: ("ROBUST_CHANNEL_GR_FAULT_DURING_CTXSW", "IGNORE", "graphics engine fault during context switch"),
    45: ("ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "WORKFLOW_XID_45", "preemptive cleanup after an earlier error or process end"),
    46: ("ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "RESET_GPU", "GPU stopped processing"),
    48: ("ROBUST_CHANNEL_GPU_ECC_DBE", "WORKFLOW_XID_48", "double bit (uncorrectable) ECC error"),
    54: ("SILENT_RUNNING_PWR_REDUCED_CLOCKING", "CHECK_MECHANICALS", "auxiliary power not connected / reduced clocks"),
    62: ("PMU_HALT_ERROR", "RESET_GPU", "internal micro-controller halt"),
    63: ("INFOROM_DRAM_RETIREMENT_EVENT", "IGNORE", "row remapping / page retirement recorded"),
    64: ("INFOROM_DRAM_RETIREMENT_FAILURE", "RESET_GPU", "row remapping / page retirement failed to record"),
    68: ("ROBUST_CHANNEL_NVDEC0_ERROR", "RESTART_APP", "video decoder exception"),
    69: ("ROBUST_CHANNEL_GR_CLASS_ERROR", "RESTART_APP", "graphics engine class error"),
    74: ("NVLINK_ERROR", "WORKFLOW_NVLINK_ERR", "NVLink error"),
    79: ("ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "RESTART_BM", "GPU has fallen off the bus"),
    92: ("EXCESSIVE_SBE_INTERRUPTS", "IGNORE", "high single-bit ECC error rate"),
    94: ("ROBUST_CHANNEL_CONTAINED_ERROR", "RESTART_APP", "contained ECC error (only the affected application)"),
    95: ("ROBUST_CHANNEL_UNCONTAINED_ERROR", "RESET_GPU", "uncontained ECC error"),
    109: ("ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "RESET_GPU", "context switch timeout"),
    110: ("SEC_FAULT_ERROR", "RESET_GPU", "security fault"),
    119: ("GSP_RPC_TIMEOUT", "RESET_GPU", "GSP firmware RPC timeout"),
    120: ("GSP_ERROR", "RESET_GPU", "GSP firmware error"),
    121: ("C2C_ERROR", "IGNORE", "chip-to-chip link error (corrected)"),
    136: ("ALI_TRAINING_FAIL", "RESET_GPU", "NVLink training failure"),
    140: ("UNRECOVERABLE_ECC_ERROR_ESCAPE", "RESET_GPU", "unrecovered ECC error"),
    143: ("GPU_INIT_ERROR", "RESET_GPU", "GPU initialisation failure"),
    144: ("NVLINK_SAW_ERROR", "WORKFLOW_NVLINK5_ERR", "NVLink SAW error"),
    145: ("NVLINK_RLW_ERROR", "WORKFLOW_NVLINK5_ERR", "NVLink RLW error"),
    146: ("NVLINK_TLW_ERROR", "WORKFLOW_NVLINK5_ERR", "NVLink TLW error"),
    147: ("NVLINK_TREX_ERROR", "WORKFLOW_NVLINK5_ERR", "NVLink TREX error"),
    148: ("NVLINK_NVLPW_CTRL_ERROR", "WORKFLOW_NVLINK5_ERR", "NVLink NVLPW control error"),
    149: ("NVLINK_NETIR_ERROR", "WORKFLOW_NVLINK5_ERR", "NVLink NETIR error"),
    150: ("NVLINK_MSE_ERROR", "WORKFLOW_NVLINK5_ERR", "NVLink MSE error"),
    151: ("ROBUST_CHANNEL_KEY_ROTATION_ERROR", "RESTART_VM", "confidential-computing key rotation error"),
    154: ("GPU_RECOVERY_ACTION_CHANGED", None, "the driver changed the GPU's recovery action"),
    155: ("NVLINK_SW_DEFINED_ERROR", "RESET_GPU", "NVLink software-defined error"),
    156: ("RESOURCE_RETIREMENT_EVENT", "RESET_GPU", "resource retirement event"),
    157: ("RESOURCE_RETIREMENT_FAILURE", "IGNORE", "resource retirement failure"),
    158: ("GPU_FATAL_TIMEOUT", "RESET_GPU", "GPU fatal timeout"),
    159: ("ROBUST_CHANNEL_CHI_NON_DATA_ERROR", "CHECK_UVM", "CHI non-data error"),
    160: ("CHANNEL_RETIREMENT_EVENT", "RESTART_BM", "memory marked for repair"),
    161: ("CHANNEL_RETIREMENT_FAILURE", "IGNORE", "channel retirement failure"),
}

# Xid 154 names the new recovery action: "... to 0x1 (GPU Reset Required)". NVML's
# nvmlGpuRecoveryAction_t: 0 none, 1 GPU reset, 2 node reboot, 3 drain P2P, 4 drain and reset,
# 5 recover IMEX domain, 6 bus reset, 7 system reboot.
_RECOVERY_CODES = {0: "none", 1: "reset_gpu", 2: "reboot", 3: "investigate", 4: "reset_gpu",
                   5: "investigate", 6: "reboot", 7: "reboot"}
_RECOVERY_RE = re.compile(r"to\s+0x([0-9A-Fa-f]+)")


def worse(a, b):
    """The more severe of two actions."""
    return a if _RANK.get(a, 3) >= _RANK.get(b, 3) else b


def classify(xid, message=None):
    """``{"xid", "mnemonic", "bucket", "action", "meaning", "known"}`` for one Xid."""
    entry = CATALOG.get(xid)
    if entry is None:
        return {"xid": xid, "mnemonic": None, "bucket": None, "action": "investigate",
                "meaning": "not in the catalog table this collection carries", "known": False}
    mnemonic, bucket, meaning = entry
    if xid == 154:
        action = "investigate"
        m = _RECOVERY_RE.search(message or "")
        if m:
            action = _RECOVERY_CODES.get(int(m.group(1), 16), "investigate")
    else:
        action = BUCKET_ACTIONS.get(bucket, "investigate")
    return {"xid": xid, "mnemonic": mnemonic, "bucket": bucket, "action": action,
            "meaning": meaning, "known": True}


# --------------------------------------------------------------------------- parsing

# The Xid record itself, wherever it sits in the line.
_XID_RE = re.compile(
    r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)\):"
    r"\s*(\d{1,5})(?:,\s*(.*))?$")
_PID_RE = re.compile(r"^pid=('[^']*'|[^,]*),\s*name=([^,]*),\s*(.*)$")
_PID_ONLY_RE = re.compile(r"^pid=('[^']*'|[^,]*),\s*(.*)$")
# "[ 1234.567890] ..." (dmesg, journalctl -o short-monotonic)
_BRACKET_TS_RE = re.compile(r"^\[\s*(\d+)\.(\d+)\]")
# /dev/kmsg record: "<prio>,<seq>,<usec>,<flags>[,...];<text>"
_KMSG_RE = re.compile(r"^(\d+),(\d+),(\d+),[^;]*;")
_JSON_BYTES_RE = re.compile(r'"MESSAGE"\s*:\s*\[')


def _as_text(data):
    if isinstance(data, bytes):
        return data.decode("utf-8", "replace")
    return data or ""


def _json_message(line):
    """(message, monotonic seconds) of one ``journalctl -o json`` record, or (None, None)."""
    try:
        rec = json.loads(line)
    except ValueError:
        return None, None
    if not isinstance(rec, dict):
        return None, None
    msg = rec.get("MESSAGE")
    if isinstance(msg, list):  # journald exports non-UTF-8 messages as byte arrays
        try:
            msg = bytes(bytearray(b & 0xFF for b in msg if isinstance(b, int))).decode("utf-8", "replace")
        except (TypeError, ValueError):
            msg = None
    if not isinstance(msg, str):
        return None, None
    ts = None
    mono = rec.get("__MONOTONIC_TIMESTAMP")
    try:
        ts = int(mono) / 1e6 if mono is not None else None
    except (TypeError, ValueError):
        ts = None
    return msg, ts


def _parse_line(line):
    """One Xid event dict from one log line, or None."""
    ts = None
    if line.startswith("{"):
        line, ts = _json_message(line)
        if line is None:
            return None
    else:
        m = _KMSG_RE.match(line)
        if m:
            ts = int(m.group(3)) / 1e6
        else:
            m = _BRACKET_TS_RE.match(line)
            if m:
                ts = float("%s.%s" % (m.group(1), m.group(2)))
    pos = line.find("NVRM: Xid (")
    if pos < 0:
        return None
    m = _XID_RE.match(line[pos:].rstrip("\r\n"))
    if not m:
        return None
    bus_id = normalize_bus_id(m.group(1))
    if bus_id is None:
        return None
    rest = (m.group(3) or "").strip()
    pid = process = None
    pm = _PID_RE.match(rest)
    if pm:
        pid, process, rest = pm.group(1).strip("'"), pm.group(2).strip() or None, pm.group(3)
    else:
        pm = _PID_ONLY_RE.match(rest)
        if pm:
            pid, rest = pm.group(1).strip("'"), pm.group(2)
    if pid in ("", "N/A"):
        pid = None
    return {"bus_id": bus_id, "xid": int(m.group(2)), "pid": pid, "process": process,
            "message": rest.strip()[:MAX_MESSAGE], "timestamp": ts}


def parse_xid_events(data, max_lines=MAX_LINES, max_bytes=MAX_BYTES, max_events=MAX_EVENTS):
    """Xid events in kernel log text (str or bytes; non-UTF-8 bytes become U+FFFD).

    Only the last ``max_bytes`` bytes and ``max_lines`` lines are read (the newest records
    matter most), lines longer than ``MAX_LINE`` characters are cut, at most ``max_events``
    events are kept (the newest). Returns ``(events, stats)``; ``stats`` says what was cut:
    ``{"lines", "truncated_bytes", "truncated_lines", "long_lines", "dropped_events"}``.
    """
    stats = {"lines": 0, "truncated_bytes": 0, "truncated_lines": 0, "long_lines": 0,
             "dropped_events": 0}
    if isinstance(data, bytes) and len(data) > max_bytes:
        stats["truncated_bytes"] = len(data) - max_bytes
        data = data[-max_bytes:]
    text = _as_text(data)
    if len(text) > max_bytes:
        stats["truncated_bytes"] += len(text) - max_bytes
        text = text[-max_bytes:]
    lines = text.split("\n")
    if len(lines) > max_lines:
        stats["truncated_lines"] = len(lines) - max_lines
        lines = lines[-max_lines:]
    events = []
    for line in lines:
        if not line:
            continue
        stats["lines"] += 1
        if len(line) > MAX_LINE:
            stats["long_lines"] += 1
            line = line[:MAX_LINE]
        # journald exports a non-UTF-8 MESSAGE as a byte array: only those are decoded first.
        if "NVRM: Xid" not in line and not (line.startswith("{") and _JSON_BYTES_RE.search(line)):
            continue
        ev = _parse_line(line)
        if ev is not None:
            events.append(ev)
    if len(events) > max_events:
        stats["dropped_events"] = len(events) - max_events
        events = events[-max_events:]
    return events, stats


def aggregate(events):
    """Per-GPU summary ``{bus_id: {"bus_id", "counts", "total", "last", "action",
    "action_xids", "classes"}}``: counts per Xid (string keys), the newest event, the most
    severe action and the Xids that call for it. :func:`worst_action` gives the node's."""
    out = {}
    for ev in events:
        gpu = out.setdefault(ev["bus_id"], {"bus_id": ev["bus_id"], "counts": {}, "total": 0,
                                            "last": None, "action": "none", "action_xids": [],
                                            "classes": {}})
        key = str(ev["xid"])
        gpu["counts"][key] = gpu["counts"].get(key, 0) + 1
        gpu["total"] += 1
        gpu["last"] = {"xid": ev["xid"], "message": ev["message"], "timestamp": ev["timestamp"],
                       "pid": ev["pid"], "process": ev["process"]}
        cls = classify(ev["xid"], ev["message"])
        gpu["classes"][key] = {"mnemonic": cls["mnemonic"], "bucket": cls["bucket"],
                               "action": worse(cls["action"],
                                               gpu["classes"].get(key, {}).get("action", "none")),
                               "meaning": cls["meaning"]}
        if _RANK[cls["action"]] > _RANK[gpu["action"]]:
            gpu["action"] = cls["action"]
            gpu["action_xids"] = [ev["xid"]]
        elif cls["action"] == gpu["action"] and ev["xid"] not in gpu["action_xids"]:
            gpu["action_xids"].append(ev["xid"])
    return out


def worst_action(per_gpu):
    action = "none"
    for gpu in per_gpu.values():
        action = worse(gpu["action"], action)
    return action


# --------------------------------------------------------------------------- reading

def read_kernel_log(timeout=10.0, limit=MAX_BYTES, journalctl="journalctl", kmsg="/dev/kmsg",
                    dmesg="dmesg", max_lines=MAX_LINES):
    """Kernel log text since boot: ``(data, source, attempts)``.

    Tries ``journalctl -k -b`` (newest ``max_lines`` records, ``short-monotonic``; an empty
    answer counts as a failure), then a non-blocking read of ``/dev/kmsg`` (the ring buffer; character device), then ``dmesg``.
    Each source is bounded by ``timeout`` seconds (commands are killed with their descendants)
    and ``limit`` bytes; ``attempts`` lists ``{"source", "error"}`` for the sources that failed.
    ``data`` is None when none worked. Any of the three can be set to None to skip it.
    """
    timeout = safe_io.check_timeout(timeout, "timeout", minimum=0.1, maximum=600)
    attempts = []
    if journalctl:
        argv = [journalctl, "-k", "-b", "--no-pager", "-q", "-o", "short-monotonic",
                "-n", str(int(max_lines))]
        err = _try_command(argv, timeout, limit)
        if isinstance(err, bytes) and err.strip():
            return err, "journal", attempts
        if isinstance(err, bytes):
            # A booted kernel always logs something: an empty answer means journald does not
            # collect kernel messages here (a container, ReadKMsg=no), not a quiet kernel.
            err = "the journal holds no kernel messages for this boot"
        attempts.append({"source": "journal", "error": err})
    if kmsg:
        try:
            data = safe_io.read_bytes(kmsg, limit=limit, allow_char_device=True)
            return data, "kmsg", attempts
        except safe_io.UnsafeInput as e:
            attempts.append({"source": "kmsg", "error": str(e)})
        except (IOError, OSError) as e:
            why = "records were overwritten while reading" if e.errno == errno.EPIPE else (e.strerror or str(e))
            attempts.append({"source": "kmsg", "error": "%s: %s" % (kmsg, why)})
    if dmesg:
        err = _try_command([dmesg], timeout, limit)
        if isinstance(err, bytes):
            return err, "dmesg", attempts
        attempts.append({"source": "dmesg", "error": err})
    return None, None, attempts


def _try_command(argv, timeout, limit):
    """stdout bytes, or a reason string."""
    try:
        res = safe_io.run_command(argv, timeout, limit=limit)
    except safe_io.UnsafeInput as e:  # includes CommandTimeout
        return str(e)
    except (IOError, OSError) as e:
        return "%s: %s" % (argv[0], e.strerror or e)
    if res.rc != 0:
        err = res.text("stderr").strip().splitlines()
        return "%s exited %d%s" % (argv[0], res.rc, (": " + err[-1][:200]) if err else "")
    return res.stdout


def xid_report(timeout=10.0, limit=MAX_BYTES, **sources):
    """Read, parse and aggregate: the node's Xid facts in one dict.

    ``{"source", "attempts", "stats", "gpus": {bus_id: ...}, "action", "events"}`` (``events``
    is the count). ``source`` None means no kernel log could be read (``attempts`` says why).
    """
    data, source, attempts = read_kernel_log(timeout=timeout, limit=limit, **sources)
    if data is None:
        return {"source": None, "attempts": attempts, "stats": None, "gpus": {},
                "action": "none", "events": 0}
    events, stats = parse_xid_events(data, max_bytes=limit)
    per_gpu = aggregate(events)
    return {"source": source, "attempts": attempts, "stats": stats, "gpus": per_gpu,
            "action": worst_action(per_gpu), "events": len(events)}
