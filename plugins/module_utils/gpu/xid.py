# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Xid events from the kernel log, classified with NVIDIA's Xid catalog (node side, 3.8+).

The NVIDIA kernel driver reports GPU errors as ``NVRM: Xid (PCI:0000:17:00): 79, pid=...,
name=..., GPU has fallen off the bus.`` (older drivers: ``NVRM: Xid (0000:03:00): 14, ...``).
:func:`parse_xid_events` finds them in kernel log text whatever the record prefix (``journalctl
-k -o short-monotonic`` / ``-o json``, ``dmesg``, raw ``/dev/kmsg`` records), bounded in lines,
bytes and line length; :func:`read_kernel_log` gets that text since boot from the journal, else
``/dev/kmsg``, else ``dmesg``, each bounded in time and size and keeping the newest part when
the log is larger (:func:`scan_warning` says what was not scanned, or that nothing could be
read: never a silent "no Xid"); :func:`classify` maps an Xid to the resolution bucket NVIDIA's
catalog documents and :func:`aggregate` folds events per GPU. Every catalog entry is sourced
in docs/hardware-health.md.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

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
# "[ 1234.567890] ..." (dmesg, journalctl -o short-monotonic). Numbers are bounded in digits (and
# ASCII only) so that no field converts to an infinite or oversized number.
_BRACKET_TS_RE = re.compile(r"^\[\s*([0-9]{1,12})\.([0-9]{1,9})\]")
# /dev/kmsg record: "<prio>,<seq>,<usec>,<flags>[,...];<text>"
_KMSG_RE = re.compile(r"^([0-9]{1,3}),([0-9]{1,20}),([0-9]{1,20}),[^;]*;")
_JSON_BYTES_RE = re.compile(r'"MESSAGE"\s*:\s*\[')


def _as_text(data):
    if isinstance(data, bytes):
        return data.decode("utf-8", "replace")
    return data or ""


def _json_message(line):
    """(message, monotonic seconds) of one ``journalctl -o json`` record, or (None, None)."""
    try:
        rec = json.loads(line)
    except (ValueError, RecursionError):  # RecursionError: nesting deeper than json recurses
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
    if isinstance(mono, str) and safe_io.is_ascii_digits(mono) and len(mono) <= 20:
        ts = int(mono) / 1e6
    elif isinstance(mono, int) and not isinstance(mono, bool) and 0 <= mono < 10 ** 20:
        ts = mono / 1e6
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

# First field of a /dev/kmsg record: "<prio>,<seq>,...": the kernel numbers records from 0 at boot.
_KMSG_SEQ_RE = re.compile(br"^\d{1,3},(\d{1,20}),")


def _size(n):
    if n < 1024:
        return "%d bytes" % n
    if n < 1 << 20:
        return "%.1f KiB" % (n / 1024.0)
    return "%.1f MiB" % (n / float(1 << 20))


def _log(data, source, attempts, notes=None, dropped=0):
    return {"data": data, "source": source, "attempts": attempts, "notes": list(notes or []),
            "dropped_bytes": dropped}


def read_kernel_log(timeout=10.0, limit=MAX_BYTES, journalctl="journalctl", kmsg="/dev/kmsg",
                    dmesg="dmesg", max_lines=MAX_LINES):
    """The newest kernel log of this boot, oldest line first, from the first source that answers.

    Returns ``{"data", "source", "attempts", "notes", "dropped_bytes"}``: ``data`` (bytes, None
    when no source worked) from ``source`` (``journal``, ``kmsg`` or ``dmesg``); ``attempts``
    lists ``{"source", "error"}`` for the sources that failed before it; ``notes`` says what of
    this boot's log was not read (empty when all of it was) and ``dropped_bytes`` how many older
    bytes were cut (at least: an unknown amount is only in ``notes``).

    Each source is bounded by ``timeout`` seconds (commands are killed with their descendants)
    and ``limit`` bytes, and on overflow keeps the newest ``limit`` bytes - the newest records
    are the ones that matter:

    * ``journalctl -k -b -r -n max_lines`` prints the newest record first: it is stopped once
      ``limit`` bytes are in (or at the deadline, keeping what it printed) and its lines are put
      back in time order. An empty answer is a failure (journald does not collect the kernel's
      messages here: a container, ``ReadKMsg=no``).
    * ``kmsg`` (``/dev/kmsg``, a character device read without blocking until it has no more
      records; or a file) keeps its last ``limit`` bytes. Its records are numbered from 0 at
      boot: a first record numbered N means the kernel ring buffer had already overwritten N.
    * ``dmesg`` runs to its end and its last ``limit`` bytes are kept.

    Any of the three can be set to None to skip it.
    """
    timeout = safe_io.check_timeout(timeout, "timeout", minimum=0.1, maximum=600)
    attempts = []
    if journalctl:
        got = _read_journal(journalctl, timeout, limit, max_lines)
        if isinstance(got, dict):
            got["attempts"] = attempts
            return got
        attempts.append({"source": "journal", "error": got})
    if kmsg:
        got = _read_kmsg(kmsg, timeout, limit)
        if isinstance(got, dict):
            got["attempts"] = attempts
            return got
        attempts.append({"source": "kmsg", "error": got})
    if dmesg:
        got = _read_dmesg(dmesg, timeout, limit)
        if isinstance(got, dict):
            got["attempts"] = attempts
            return got
        attempts.append({"source": "dmesg", "error": got})
    return _log(None, None, attempts)


def _read_journal(journalctl, timeout, limit, max_lines):
    """The journal's newest kernel records in time order (a :func:`_log` dict), or a reason."""
    argv = [journalctl, "-k", "-b", "--no-pager", "-q", "-o", "short-monotonic", "-r",
            "-n", str(int(max_lines))]
    notes = []
    try:
        res = safe_io.run_command(argv, timeout, limit=limit, keep="head")
    except safe_io.CommandTimeout as e:
        if e.result is None or not e.result.stdout.strip():
            return str(e)
        # Newest first: what it printed before the deadline is the newest part of the log.
        res = e.result
        notes.append("journalctl did not finish within %gs: only the newest %s it printed were "
                     "scanned" % (timeout, _size(len(res.stdout))))
    except safe_io.UnsafeInput as e:
        return str(e)
    except (IOError, OSError) as e:
        return "%s: %s" % (journalctl, e.strerror or e)
    if res.rc not in (0, None) and not res.truncated:
        return _exit_reason(journalctl, res)
    if not res.stdout.strip():
        # A booted kernel always logs something: an empty answer means journald does not
        # collect kernel messages here (a container, ReadKMsg=no), not a quiet kernel.
        return "the journal holds no kernel messages for this boot"
    lines = res.stdout.rstrip(b"\n").split(b"\n")
    if res.truncated and not notes:
        notes.append("this boot's kernel messages in the journal exceed %s: only the newest %s "
                     "were scanned" % (_size(limit), _size(len(res.stdout))))
    if len(lines) >= max_lines:
        notes.append("journalctl -n %d: only the newest %d records were read" % (max_lines, max_lines))
    lines.reverse()
    return _log(b"\n".join(lines) + b"\n", "journal", None, notes)


def _read_kmsg(kmsg, timeout, limit):
    """The kernel ring buffer's newest ``limit`` bytes (a :func:`_log` dict), or a reason."""
    try:
        tail = safe_io.read_tail(kmsg, limit=limit, timeout=timeout, allow_char_device=True)
    except safe_io.UnsafeInput as e:
        return str(e)
    except (IOError, OSError) as e:
        return "%s: %s" % (kmsg, e.strerror or e)
    if not tail.data.strip():
        return "%s holds no kernel records" % kmsg
    notes = []
    if tail.dropped:
        notes.append("%s holds more than %s: the oldest %s were not scanned"
                     % (kmsg, _size(limit), _size(tail.dropped)))
    if tail.overwritten:
        notes.append("the kernel overwrote records of %s while it was read (%d times)"
                     % (kmsg, tail.overwritten))
    m = _KMSG_SEQ_RE.match(tail.data)
    if m and not tail.dropped and int(m.group(1)) > 0:
        notes.append("the kernel ring buffer no longer holds the first %d records of this boot"
                     % int(m.group(1)))
    return _log(tail.data, "kmsg", None, notes, tail.dropped)


def _read_dmesg(dmesg, timeout, limit):
    """``dmesg``'s newest ``limit`` bytes (a :func:`_log` dict), or a reason."""
    try:
        res = safe_io.run_command([dmesg], timeout, limit=limit, keep="tail")
    except safe_io.UnsafeInput as e:  # includes CommandTimeout: its output is the oldest part
        return str(e)
    except (IOError, OSError) as e:
        return "%s: %s" % (dmesg, e.strerror or e)
    if res.rc != 0:
        return _exit_reason(dmesg, res)
    if not res.stdout.strip():
        return "%s printed no kernel records" % dmesg
    notes = []
    if res.truncated:
        notes.append("dmesg printed more than %s: the oldest %s were not scanned"
                     % (_size(limit), _size(res.dropped)))
    return _log(res.stdout, "dmesg", None, notes, res.dropped)


def _exit_reason(argv0, res):
    err = res.text("stderr").strip().splitlines()
    return "%s exited %d%s" % (argv0, res.rc, (": " + err[-1][:200]) if err else "")


def scan_warning(log, stats=None):
    """The warning for a kernel log scan that did not cover this boot's whole log, or None.

    ``log`` is :func:`read_kernel_log`'s dict, ``stats`` :func:`parse_xid_events`'s."""
    if log["data"] is None:
        if not log["attempts"]:
            return "no kernel log source is enabled: Xid errors cannot be ruled out"
        return "no kernel log could be read (%s): Xid errors cannot be ruled out" % ", ".join(
            "%s: %s" % (a["source"], a["error"]) for a in log["attempts"])
    notes = list(log["notes"])
    stats = stats or {}
    if stats.get("truncated_bytes"):
        notes.append("the oldest %s read were not scanned" % _size(stats["truncated_bytes"]))
    if stats.get("truncated_lines"):
        notes.append("only the newest %d lines were scanned (%d older lines were not)"
                     % (stats["lines"], stats["truncated_lines"]))
    if not notes:
        return None
    return "kernel log truncated (%s): %s; Xid errors in the part not scanned cannot be ruled out" % (
        log["source"], "; ".join(notes))


def xid_report(timeout=10.0, limit=MAX_BYTES, **sources):
    """Read, parse and aggregate: the node's Xid facts in one dict.

    ``{"source", "attempts", "stats", "gpus": {bus_id: ...}, "action", "events", "scanned",
    "truncated", "dropped_bytes", "warning"}`` (``events`` is the count). ``source`` None and
    ``scanned`` false mean no kernel log could be read (``attempts`` says why); ``truncated``
    means the oldest part of this boot's log was not scanned (``dropped_bytes``: at least that
    many bytes). ``warning`` says either in words, None when the whole log was scanned: no Xid
    found is then "none in the log", not "none in the part that could be read".
    """
    log = read_kernel_log(timeout=timeout, limit=limit, **sources)
    if log["data"] is None:
        return {"source": None, "attempts": log["attempts"], "stats": None, "gpus": {},
                "action": "none", "events": 0, "scanned": False, "truncated": False,
                "dropped_bytes": 0, "warning": scan_warning(log)}
    events, stats = parse_xid_events(log["data"], max_bytes=limit)
    per_gpu = aggregate(events)
    warning = scan_warning(log, stats)
    return {"source": log["source"], "attempts": log["attempts"], "stats": stats, "gpus": per_gpu,
            "action": worst_action(per_gpu), "events": len(events), "scanned": True,
            "truncated": warning is not None,
            "dropped_bytes": log["dropped_bytes"] + stats["truncated_bytes"], "warning": warning}
