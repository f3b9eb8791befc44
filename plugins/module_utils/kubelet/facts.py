# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""kubelet facts: process, flags, KubeletConfiguration, memory reservations (node side, 3.8+).

Everything here is a plain function over paths the caller supplies (``proc_path``...), so the
same code audits a node from inside a container that mounts the host at /host. Nothing raises
for a missing or odd node file: problems end up as messages in the returned facts, because an
audit must keep going. Functions that take user input (quantities, memory sizes) raise
``ValueError`` subclasses naming the bad value.

Precedence follows the kubelet: built-in defaults < ``--config`` file < ``--config-dir``
drop-ins < command-line flags (flags are deprecated but still win).
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import errno
import json
import math
import os
import re
import stat
import traceback
from fractions import Fraction

from ansible.module_utils.basic import missing_required_lib

from ansible_collections.kubegpu.fleet.plugins.module_utils._common import safe_io

try:
    import yaml
    HAS_YAML = True
    YAML_IMPORT_ERROR = None
except ImportError:  # the modules fail with missing_required_lib; the audit reports it
    yaml = None
    HAS_YAML = False
    YAML_IMPORT_ERROR = traceback.format_exc()

KIB = 1 << 10
MIB = 1 << 20
GIB = 1 << 30

DEFAULT_ROOT_DIR = "/var/lib/kubelet"
DEFAULT_CONFIG_PATH = "/var/lib/kubelet/config.yaml"
CHECKPOINT_RELPATH = os.path.join("device-plugins", "kubelet_internal_checkpoint")
DEFAULT_CPU_MANAGER_POLICY = "none"
DEFAULT_CGROUP_DRIVER = "cgroupfs"
# kubelet v1beta1 defaults (Linux). Setting ANY evictionHard key drops the unset ones, unless
# mergeDefaultEvictionSettings is true.
DEFAULT_EVICTION_HARD = {
    "memory.available": "100Mi",
    "nodefs.available": "10%",
    "imagefs.available": "15%",
    "nodefs.inodesFree": "5%",
}
DEFAULT_ENFORCE_NODE_ALLOCATABLE = ["pods"]
# GKE adds this hard-eviction threshold on top of its reserved-memory ladder.
GKE_EVICTION_THRESHOLD_BYTES = 100 * MIB
VERSION_TIMEOUT = 5.0
CONFIG_MAX_BYTES = 4 << 20
CMDLINE_MAX_BYTES = 4 << 20  # ARG_MAX is 2 MiB by default; /proc caps cmdline far below this
DEFAULT_UNIT = "kubelet.service"
DEFAULT_PACKAGE = "kubelet"
INT64_MAX = (1 << 63) - 1

# pflag boolean flags of the kubelet (current and removed ones that old nodes still pass).
# A boolean flag never takes the next argument as its value: ``--fail-swap-on false`` is an error
# for the kubelet, so ``false`` would be a stray argument.
BOOL_FLAGS = frozenset([
    "add-dir-header", "allow-privileged", "alsologtostderr", "anonymous-auth",
    "authentication-token-webhook", "cgroups-per-qos", "containerized", "contention-profiling",
    "cpu-cfs-quota", "docker-disable-shared-pid", "enable-cadvisor-json-endpoints",
    "enable-controller-attach-detach", "enable-debugging-handlers", "enable-load-reader",
    "enable-server", "exit-on-lock-contention", "experimental-allocatable-ignore-eviction",
    "experimental-check-node-capabilities-before-mount", "experimental-dockershim",
    "experimental-kernel-memcg-notification", "fail-swap-on", "help", "kernel-memcg-notification",
    "keep-terminated-pod-volumes", "local-storage-capacity-isolation", "log-json-split-stream",
    "logtostderr", "make-iptables-util-chains", "one-output", "protect-kernel-defaults",
    "really-crash-for-testing", "redirect-container-streaming", "register-node",
    "register-schedulable", "rotate-certificates", "rotate-server-certificates", "runonce",
    "seccomp-default", "serialize-image-pulls", "skip-headers", "skip-log-headers", "version",
    "windows-service",
])
SHORT_FLAGS = {"v": "v", "h": "help"}
_TRUE_STRINGS = frozenset(["1", "t", "T", "TRUE", "true", "True"])
_FALSE_STRINGS = frozenset(["0", "f", "F", "FALSE", "false", "False"])
_NUMBER_RE = re.compile(r"^-[0-9.]")
_VERSION_RE = re.compile(r"Kubernetes\s+(v?[0-9]+\.[0-9]+\.[0-9]+[0-9A-Za-z.+-]*)")

_BINARY_SUFFIXES = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL_SUFFIXES = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12,
                     "P": 15, "E": 18}
_QUANTITY_RE = re.compile(r"^([+-]?)([0-9]*)(?:\.([0-9]*))?([eEinumkKMGTP]*)([+-]?[0-9]*)$")
_LOOSE_QUANTITY_RE = re.compile(r"^[+-]?([0-9]+)?(?:\.([0-9]+))?\.?([^0-9.].*)$")


class QuantityError(ValueError):
    """A Kubernetes resource quantity that does not parse."""


# -- quantities ---------------------------------------------------------------------------
def parse_quantity(value):
    """Exact value of a Kubernetes resource quantity as a ``fractions.Fraction``.

    Accepts what ``resource.ParseQuantity`` accepts: an optional sign, digits with an optional
    decimal part, and a suffix: binary (Ki Mi Gi Ti Pi Ei), decimal (n u m "" k M G T P E) or a
    decimal exponent (``e3``, ``E-2``). Integers and floats (YAML numbers) are accepted too.
    Raises QuantityError naming the value.
    """
    if isinstance(value, bool) or value is None:
        raise QuantityError("invalid Kubernetes quantity %r: expected a string such as '512Mi'"
                            % (value,))
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise QuantityError("invalid Kubernetes quantity %r" % (value,))
        text = repr(value)
    elif isinstance(value, str):
        text = value.strip()
    else:
        raise QuantityError("invalid Kubernetes quantity %r: expected a string such as '512Mi'"
                            % (value,))
    if not text or len(text) > 64:
        raise QuantityError("invalid Kubernetes quantity %r: %s" % (
            value, "empty" if not text else "too long"))
    m = _QUANTITY_RE.match(text)
    loose = _LOOSE_QUANTITY_RE.match(text)
    if not m and loose and (loose.group(1) or loose.group(2)):
        raise QuantityError("invalid Kubernetes quantity %r: unknown suffix %r (use Ki, Mi, Gi, Ti, "
                            "Pi, Ei, n, u, m, k, M, G, T, P, E or an exponent such as e3)"
                            % (value, loose.group(3)))
    if not m or not (m.group(2) or m.group(3)):
        raise QuantityError("invalid Kubernetes quantity %r: expected a number with an optional "
                            "suffix (Ki, Mi, Gi, Ti, Pi, Ei, n, u, m, k, M, G, T, P, E or an "
                            "exponent such as e3)" % (value,))
    sign, whole, frac, suffix, exp_digits = m.groups()
    frac = frac or ""
    number = Fraction(int((whole or "0") + frac), 10 ** len(frac))
    if sign == "-":
        number = -number
    if suffix in _BINARY_SUFFIXES and not exp_digits:
        return number * (1 << (10 * _BINARY_SUFFIXES[suffix]))
    if suffix in _DECIMAL_SUFFIXES and not exp_digits:
        return number * Fraction(10) ** _DECIMAL_SUFFIXES[suffix]
    if suffix in ("e", "E") and exp_digits and exp_digits not in ("+", "-"):
        exponent = int(exp_digits)
        if abs(exponent) > 30:
            raise QuantityError("invalid Kubernetes quantity %r: exponent out of range" % (value,))
        return number * Fraction(10) ** exponent
    raise QuantityError("invalid Kubernetes quantity %r: unknown suffix %r (use Ki, Mi, Gi, Ti, "
                        "Pi, Ei, n, u, m, k, M, G, T, P, E or an exponent such as e3)"
                        % (value, suffix + exp_digits))


def quantity_to_bytes(value):
    """Bytes (an int, rounded up like ``Quantity.Value()``) of a memory quantity.

    Negative or out-of-range (> int64) quantities raise QuantityError naming the value.
    """
    exact = parse_quantity(value)
    if exact < 0:
        raise QuantityError("invalid memory quantity %r: negative" % (value,))
    result = int(math.ceil(exact))
    if result > INT64_MAX:
        raise QuantityError("invalid memory quantity %r: larger than int64" % (value,))
    return result


def parse_memory_threshold(value, capacity_bytes=None):
    """An eviction threshold value: a quantity (``100Mi``) or a percentage (``5%``).

    Returns ``{"raw", "bytes", "percent"}``; for a percentage ``bytes`` is that share of
    ``capacity_bytes`` (truncated, as the kubelet does) or None when the capacity is unknown.
    """
    if isinstance(value, str) and value.strip().endswith("%"):
        text = value.strip()[:-1].strip()
        try:
            percent = float(text)
        except ValueError:
            raise QuantityError("invalid eviction threshold %r: not a percentage" % (value,))
        if math.isnan(percent) or percent < 0 or percent > 100:
            raise QuantityError("invalid eviction threshold %r: percentage must be within 0-100%%"
                                % (value,))
        nbytes = None
        if capacity_bytes is not None:
            nbytes = int(Fraction(capacity_bytes) * Fraction(text) / 100)
        return {"raw": value, "bytes": nbytes, "percent": percent}
    return {"raw": value if isinstance(value, str) else str(value),
            "bytes": quantity_to_bytes(value), "percent": None}


def gke_reserved_memory_bytes(node_memory_bytes):
    """Memory GKE reserves for system daemons on a node of ``node_memory_bytes``.

    25% of the first 4 GiB, 20% of the next 4 GiB, 10% of the next 8 GiB, 6% of the next
    112 GiB and 2% of everything above 128 GiB (rounded down to a byte). GKE adds a separate
    hard-eviction threshold of 100 MiB (``GKE_EVICTION_THRESHOLD_BYTES``), not included here.
    """
    if isinstance(node_memory_bytes, bool) or not isinstance(node_memory_bytes, int) \
            or node_memory_bytes < 0:
        raise ValueError("node_memory_bytes must be a non-negative integer, got %r"
                         % (node_memory_bytes,))
    remaining = node_memory_bytes
    scaled = 0
    for size, percent in ((4 * GIB, 25), (4 * GIB, 20), (8 * GIB, 10), (112 * GIB, 6),
                          (None, 2)):
        part = remaining if size is None else min(remaining, size)
        scaled += part * percent
        remaining -= part
        if remaining <= 0:
            break
    return scaled // 100


# -- /proc --------------------------------------------------------------------------------
def _read_proc_text(path, limit):
    """Text of a procfs file (bounded, never blocks on a FIFO planted in a fake tree), or None."""
    try:
        return safe_io.read_text(path, limit)
    except (safe_io.UnsafeInput, IOError, OSError):
        return None


def read_text(path, limit=1 << 20):
    """Compatibility name: :func:`_read_proc_text` (None when unreadable, odd or too large)."""
    return _read_proc_text(path, limit)


def read_cmdline(proc_path, pid):
    """argv of ``pid`` from ``<proc_path>/<pid>/cmdline`` (NUL-separated), or None."""
    try:
        data = safe_io.read_bytes(os.path.join(proc_path, str(pid), "cmdline"),
                                  CMDLINE_MAX_BYTES)
    except (safe_io.UnsafeInput, IOError, OSError):
        return None
    if data.endswith(b"\0"):
        data = data[:-1]
    if not data:
        return []
    return [part.decode("utf-8", "replace") for part in data.split(b"\0")]


def parse_stat(text):
    """(state, starttime) from ``/proc/<pid>/stat`` text; (None, None) when it does not parse."""
    if not text:
        return None, None
    close = text.rfind(")")
    if close < 0:
        return None, None
    fields = text[close + 1:].split()
    state = fields[0] if fields else None
    start = None
    if len(fields) > 19 and safe_io.is_ascii_digits(fields[19]):
        start = int(fields[19])
    return state, start


def kubelet_argv(comm, cmdline, name="kubelet"):
    """The kubelet's own argv (program first) when the process is a kubelet, else None.

    Matches on the command name or argv[0]'s basename; also handles a kubelet run through an
    interpreter (a wrapper script named kubelet) and ``hyperkube kubelet``.
    """
    cmdline = cmdline or []
    base0 = os.path.basename(cmdline[0]) if cmdline else ""
    if base0 == name:
        return list(cmdline)
    if base0 == "hyperkube" and len(cmdline) > 1 and cmdline[1] == name:
        return list(cmdline[1:])
    if comm == name:
        for i, arg in enumerate(cmdline[1:3], 1):
            if os.path.basename(arg) == name:
                return list(cmdline[i:])
        return list(cmdline)
    return None


def process_uids(proc_path, pid):
    """(real uid, effective uid) of ``pid`` from ``<proc>/<pid>/status`` (``Uid:`` line); the
    owner of ``<proc>/<pid>`` for both when there is no status file at all; (None, None) when
    unknown (a status that cannot be read or parsed proves nothing)."""
    status = os.path.join(proc_path, str(pid), "status")
    try:
        text = safe_io.read_text(status, 64 << 10, missing_ok=True)
    except (safe_io.UnsafeInput, IOError, OSError):
        return None, None
    if text is None:
        try:
            st = os.stat(os.path.join(proc_path, str(pid)))
        except OSError:
            return None, None
        return st.st_uid, st.st_uid
    for line in text.splitlines():
        if line.startswith("Uid:"):
            fields = line.split()[1:]
            if len(fields) >= 2 and safe_io.is_ascii_digits(fields[0]) and safe_io.is_ascii_digits(fields[1]):
                return int(fields[0]), int(fields[1])
            break
    return None, None


def _unsafe_file(st):
    """Why a file (an executable) cannot be trusted as root's, or None."""
    if st.st_uid != 0:
        return "owned by uid %d, not root" % st.st_uid
    if st.st_mode & 0o022:
        return "writable by %s (mode %04o)" % (
            "group and others" if st.st_mode & 0o022 == 0o022 else
            ("others" if st.st_mode & 0o002 else "group"), stat.S_IMODE(st.st_mode))
    return None


def _interpreted_script(proc_path, pid, comm, cmdline, exe, name="kubelet"):
    """The script path when a process named ``name`` is an interpreter running a script of that
    name (``/bin/sh /opt/bin/kubelet``): the name then comes from the script, so the script is
    what must be root's. None when the executable itself carries the name."""
    if exe is not None and os.path.basename(exe) == name:
        return None
    cmdline = cmdline or []
    for arg in cmdline[1:3]:
        if os.path.basename(arg) == name:
            path = arg
            if not os.path.isabs(path):
                try:
                    path = os.path.join(os.readlink(os.path.join(proc_path, str(pid), "cwd")),
                                        path)
                except OSError:
                    return arg
            return path
    return None


def check_process_trust(proc_path, pid, comm=None, cmdline=None, name="kubelet"):
    """Whether a process named ``name`` can be the node's kubelet without systemd saying so.

    Trusted: real and effective uid 0, and the executable (``stat`` of ``<proc>/<pid>/exe``,
    which follows the link to the very inode the process runs, even when it was deleted) is
    owned by root and not writable by group or others. When an interpreter runs a script named
    ``name``, the script must pass the same file test. Nothing is ever executed.

    Returns ``{"uid", "euid", "exe", "exe_deleted", "exe_uid", "exe_mode", "trusted", "why"}``.
    """
    uid, euid = process_uids(proc_path, pid)
    exe, deleted = exe_info(proc_path, pid)
    info = {"uid": uid, "euid": euid, "exe": exe, "exe_deleted": deleted, "exe_uid": None,
            "exe_mode": None, "trusted": False, "why": None}
    exe_problem = None
    try:
        st = os.stat(os.path.join(proc_path, str(pid), "exe"))
        info["exe_uid"], info["exe_mode"] = st.st_uid, "%04o" % stat.S_IMODE(st.st_mode)
    except OSError as e:
        st = None
        exe_problem = "its executable cannot be examined (%s)" % (e.strerror or e)
    if uid is None or euid is None:
        info["why"] = "its owner cannot be read"
    elif uid != 0 or euid != 0:
        info["why"] = "runs as uid %d (effective %d), not root" % (uid, euid)
    elif st is None:
        info["why"] = exe_problem
    else:
        problem = _unsafe_file(st)
        if problem:
            info["why"] = "its executable %s is %s" % (exe, problem)
    if info["why"] is None:
        script = _interpreted_script(proc_path, pid, comm, cmdline, exe, name)
        if script is not None:
            root_view = os.path.join(proc_path, str(pid), "root", script.lstrip("/"))
            try:
                sst = os.stat(root_view if os.path.exists(root_view) else script)
            except OSError as e:
                info["why"] = "its script %s cannot be examined (%s)" % (script, e.strerror or e)
            else:
                problem = _unsafe_file(sst)
                if problem:
                    info["why"] = "its script %s is %s" % (script, problem)
    info["trusted"] = info["why"] is None
    return info


def find_kubelet_processes(proc_path, name="kubelet"):
    """All live processes named like a kubelet under ``proc_path``, oldest first.

    Each is ``{"pid", "comm", "argv", "starttime"}``. Processes that vanish or cannot be read
    mid-scan are skipped; zombies are skipped. A name proves nothing: see
    :func:`identify_kubelet` for which of them is the node's kubelet.
    """
    try:
        entries = os.listdir(proc_path)
    except OSError:
        return []
    found = []
    for entry in entries:
        if not safe_io.is_ascii_digits(entry):
            continue
        base = os.path.join(proc_path, entry)
        comm = _read_proc_text(os.path.join(base, "comm"), 256)
        comm = comm.rstrip("\n") if comm is not None else None
        cmdline = read_cmdline(proc_path, entry)
        if comm is None and cmdline is None:
            continue  # vanished
        argv = kubelet_argv(comm, cmdline, name)
        if argv is None:
            continue
        state, start = parse_stat(_read_proc_text(os.path.join(base, "stat"), 4096))
        if state in ("Z", "X"):
            continue
        if cmdline is None and not os.path.isdir(base):
            continue  # vanished between reads
        found.append({"pid": int(entry), "comm": comm, "argv": argv, "starttime": start,
                      "cmdline": cmdline})
    found.sort(key=lambda p: (p["starttime"] is None, p["starttime"] or 0, p["pid"]))
    for p in found:
        p.pop("cmdline")
    return found


def systemd_main_pid(unit, systemctl, timeout=VERSION_TIMEOUT):
    """``(MainPID or None, error or None)`` of ``unit`` from ``systemctl show`` (deadline-bound).

    MainPID 0 (unit not running) gives ``(None, None)``."""
    safe_io.check_unit_name(unit, "kubelet unit")
    try:
        res = safe_io.run_command([systemctl, "show", "-p", "MainPID", "--value", unit],
                                  timeout, limit=4096, env=dict(os.environ, LC_ALL="C",
                                                                SYSTEMD_PAGER=""))
    except (safe_io.UnsafeInput, OSError) as e:
        return None, "systemctl show %s: %s" % (unit, e)
    text = res.text().strip()
    if res.rc != 0 or not safe_io.is_ascii_digits(text):
        detail = (res.text("stderr").strip() or text or "no output").splitlines()[-1][:200]
        return None, "systemctl show %s exited %d: %s" % (unit, res.rc, detail)
    pid = int(text)
    return (pid or None), None


def _unit_file_name(unit):
    return unit if re.search(r"\.[a-z]+$", unit) else unit + ".service"


def in_unit_cgroup(proc_path, pid, unit):
    """Whether ``pid`` sits in the cgroup systemd gives the system unit ``unit``
    (``/system.slice/<unit>``, cgroup v2 or the v1 ``name=systemd`` hierarchy). Only root can
    move a process there; a user manager's ``kubelet.service`` lives under ``user.slice``."""
    want = "/system.slice/%s" % _unit_file_name(unit)
    text = _read_proc_text(os.path.join(proc_path, str(pid), "cgroup"), 64 << 10)
    for line in (text or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and (parts[0] == "0" or parts[1] == "name=systemd") \
                and parts[2] == want:
            return True
    return False


def identify_kubelet(proc_path="/proc", unit=DEFAULT_UNIT, systemctl=None,
                     timeout=VERSION_TIMEOUT, name="kubelet", sd_booted=None):
    """Find the node's kubelet the way the node knows it, never by name alone.

    1. The MainPID of the kubelet systemd unit (``systemctl show -p MainPID``; only for the
       host's own ``/proc``, the pids of another procfs mean nothing to this systemd).
    2. Else the processes named ``name`` that run as root in the unit's system cgroup.
    3. Else the processes named ``name`` whose real and effective uid are 0 and whose
       executable is root's and not group/world-writable (:func:`check_process_trust`); exactly
       one must remain, several are ambiguous and none is picked.

    Returns ``{"proc", "method", "candidates", "rejected", "errors"}``: ``proc`` as in
    :func:`find_kubelet_processes` plus the trust details, ``method`` ``systemd``, ``cgroup``,
    ``root-owned`` or None; ``rejected`` lists impostors ``{"pid", "uid", "exe", "why"}``.
    ``sd_booted`` None means "systemd is PID 1" (``/run/systemd/system`` exists).
    """
    errors = []
    procs = find_kubelet_processes(proc_path, name)
    for p in procs:
        p.update(check_process_trust(proc_path, p["pid"], p["comm"],
                                     read_cmdline(proc_path, p["pid"]), name))
    out = {"proc": None, "method": None, "candidates": procs, "rejected": [], "errors": errors}

    def rejected(chosen):
        return [{"pid": p["pid"], "uid": p["uid"], "exe": p["exe"],
                 "why": p["why"] or "not the kubelet unit's main process"}
                for p in procs if chosen is None or p["pid"] != chosen["pid"]]

    main_pid = None
    if sd_booted is None:  # sd_booted(3): systemd is PID 1 when /run/systemd/system exists
        sd_booted = os.path.isdir("/run/systemd/system")
    if systemctl and sd_booted and os.path.realpath(proc_path) == "/proc":
        main_pid, err = systemd_main_pid(unit, systemctl, timeout)
        if err:
            errors.append(err)
    if main_pid is not None:
        chosen = None
        for p in procs:
            if p["pid"] == main_pid:
                chosen = p
        if chosen is None:
            cmdline = read_cmdline(proc_path, main_pid)
            if cmdline is not None:
                comm = _read_proc_text(os.path.join(proc_path, str(main_pid), "comm"), 256)
                chosen = {"pid": main_pid, "comm": (comm or "").rstrip("\n") or None,
                          "argv": kubelet_argv(comm, cmdline, name) or cmdline,
                          "starttime": parse_stat(_read_proc_text(
                              os.path.join(proc_path, str(main_pid), "stat"), 4096))[1]}
                chosen.update(check_process_trust(proc_path, main_pid, chosen["comm"], cmdline,
                                                  name))
        if chosen is not None:
            out.update(proc=chosen, method="systemd", rejected=rejected(chosen))
            return out
    in_cgroup = [p for p in procs if p["uid"] == 0 and p["euid"] == 0
                 and in_unit_cgroup(proc_path, p["pid"], unit)]
    if len(in_cgroup) == 1:
        out.update(proc=in_cgroup[0], method="cgroup", rejected=rejected(in_cgroup[0]))
        return out
    trusted = in_cgroup or [p for p in procs if p["trusted"]]
    if len(trusted) == 1:
        out.update(proc=trusted[0], method="root-owned", rejected=rejected(trusted[0]))
        return out
    out["rejected"] = [r for r in rejected(None) if r["pid"] not in
                       set(p["pid"] for p in trusted)]
    if len(trusted) > 1:
        errors.append("%d root-owned processes named %s (%s) and no systemd unit %s to tell "
                      "which is the kubelet; none is used" % (
                          len(trusted), name, ", ".join(str(p["pid"]) for p in trusted), unit))
    return out


def read_meminfo_total(proc_path):
    """MemTotal in bytes from ``<proc_path>/meminfo``, or None."""
    text = _read_proc_text(os.path.join(proc_path, "meminfo"), 1 << 20)
    for line in (text or "").splitlines():
        if line.startswith("MemTotal:"):
            fields = line.split()
            if len(fields) >= 2 and safe_io.is_ascii_digits(fields[1]):
                unit = fields[2].lower() if len(fields) > 2 else ""
                return int(fields[1]) * (1024 if unit == "kb" else 1)
    return None


def exe_info(proc_path, pid):
    """(path the exe link points at, deleted?) for ``pid``; (None, None) when unreadable."""
    try:
        target = os.readlink(os.path.join(proc_path, str(pid), "exe"))
    except OSError:
        return None, None
    deleted = target.endswith(" (deleted)")
    if deleted:
        target = target[:-len(" (deleted)")]
    return target, deleted


# -- flags --------------------------------------------------------------------------------
def _norm_flag(name):
    return name.replace("_", "-")


def _looks_like_flag(arg):
    return arg.startswith("-") and len(arg) > 1 and not _NUMBER_RE.match(arg)


def _coerce_bool(name, value):
    if name in BOOL_FLAGS and isinstance(value, str):
        if value in _TRUE_STRINGS:
            return True
        if value in _FALSE_STRINGS:
            return False
    return value


def parse_flags(args):
    """Parse kubelet arguments (without the program name) the way pflag does.

    Handles ``--flag=value``, ``--flag value``, bare boolean flags, ``-v=4``/``-v 4``/``-v4``,
    ``_`` in names (pflag normalises it to ``-``) and ``--`` ending the flags. Returns
    ``(pairs, positional)``: every ``(name, value)`` in command-line order (bare booleans as
    True) and the arguments that are not flags.
    """
    pairs = []
    positional = []
    i = 0
    n = len(args)
    while i < n:
        arg = args[i]
        i += 1
        if arg == "--":
            positional.extend(args[i:])
            break
        if arg.startswith("--") and len(arg) > 2:
            body = arg[2:]
            if "=" in body:
                name, value = body.split("=", 1)
                name = _norm_flag(name)
                pairs.append((name, _coerce_bool(name, value)))
                continue
            name = _norm_flag(body)
        elif _looks_like_flag(arg):
            name = SHORT_FLAGS.get(arg[1], arg[1])
            rest = arg[2:]
            if rest:
                value = rest[1:] if rest.startswith("=") else rest
                pairs.append((name, _coerce_bool(name, value)))
                continue
        else:
            positional.append(arg)
            continue
        if name in BOOL_FLAGS:
            pairs.append((name, True))
        elif i < n and not _looks_like_flag(args[i]):
            pairs.append((name, args[i]))
            i += 1
        else:
            pairs.append((name, True))
    return pairs, positional


def flags_dict(pairs):
    """``({name: last value}, {name: [all values]} for names given more than once)``."""
    last = {}
    seen = {}
    for name, value in pairs:
        last[name] = value
        seen.setdefault(name, []).append(value)
    return last, dict((k, v) for k, v in seen.items() if len(v) > 1)


def flag_map(pairs, name, separator="="):
    """The map a ``mapStringString`` flag builds (``--kube-reserved=cpu=1,memory=2Gi``).

    Like pflag, the first occurrence replaces the config file's map and later occurrences
    merge into it. None when the flag is absent. Raises ValueError for a malformed pair.
    """
    out = None
    for flag, value in pairs:
        if flag != name:
            continue
        if out is None:
            out = {}
        text = "" if value is True else str(value)
        for item in text.split(","):
            if not item:
                continue
            if separator not in item:
                raise ValueError("--%s: malformed pair %r, expected key%svalue"
                                 % (name, item, separator))
            key, val = item.split(separator, 1)
            out[key.strip()] = val.strip()
    return out


def flag_list(pairs, name):
    """The list a ``stringSlice`` flag builds (first occurrence replaces, later ones append)."""
    out = None
    for flag, value in pairs:
        if flag != name:
            continue
        if out is None:
            out = []
        text = "" if value is True else str(value)
        out.extend(item.strip() for item in text.split(",") if item.strip())
    return out


def flag_value(pairs, name):
    value = None
    for flag, val in pairs:
        if flag == name:
            value = val
    return value


# -- version ------------------------------------------------------------------------------
def parse_version_output(text):
    """``v1.31.4`` from ``Kubernetes v1.31.4`` (``kubelet --version``), or None."""
    m = _VERSION_RE.search(text or "")
    return m.group(1) if m else None


_PKG_VERSION_RE = re.compile(r"^(?:[0-9]+:)?v?([0-9]+\.[0-9]+\.[0-9]+[0-9A-Za-z.+~]*?)(?:-[0-9A-Za-z.+~]+)?$")


def package_version(get_bin_path, package=DEFAULT_PACKAGE, timeout=VERSION_TIMEOUT):
    """The kubelet version from the package database; ``(version, source, error)``.

    Asks ``dpkg-query`` then ``rpm`` (each with a deadline and a bounded output; bytes that are
    not UTF-8 are replaced, never an error) for ``package``. ``version`` is ``v<upstream>``
    (``1.31.4-1.1`` -> ``v1.31.4``), ``source`` says which database, e.g.
    ``package:kubelet 1.31.4-1.1 (dpkg)``. Nothing found through /proc is ever executed.
    """
    safe_io.check_package_name(package, "kubelet package")
    errors = []
    for tool, argv in (("dpkg-query", ["-W", "-f=${db:Status-Abbrev}|${Version}", "--", package]),
                       ("rpm", ["-q", "--qf", "ii |%{VERSION}-%{RELEASE}", "--", package])):
        binary = get_bin_path(tool) if get_bin_path else None
        if not binary:
            continue
        try:
            res = safe_io.run_command([binary] + argv, timeout, limit=4096,
                                      env=dict(os.environ, LC_ALL="C"))
        except (safe_io.UnsafeInput, OSError) as e:
            errors.append("%s: %s" % (tool, e))
            continue
        text = res.text().strip()
        if res.rc != 0 or "|" not in text:
            errors.append("%s: package %s is not installed" % (tool, package))
            continue
        status, raw = text.split("|", 1)
        raw = raw.strip()
        if not status.startswith("ii"):
            errors.append("%s: package %s is not installed (status %s)"
                          % (tool, package, status.strip()))
            continue
        m = _PKG_VERSION_RE.match(raw)
        if not m:
            errors.append("%s: package %s has version %r, not a Kubernetes version"
                          % (tool, package, raw[:100]))
            continue
        return "v" + m.group(1), "package:%s %s (%s)" % (package, raw, tool.split("-", 1)[0]), None
    return None, None, "; ".join(errors) or "no package database (dpkg-query, rpm) on the node"


# -- config -------------------------------------------------------------------------------
def kubelet_view_paths(path, proc_path=None, pid=None):
    """Where to read a path the kubelet names: as-is, then through ``<proc>/<pid>/root``.

    The second candidate reaches the kubelet's own mount namespace (an audit running in a
    container with the host's /proc). Relative paths are resolved against the kubelet's cwd.
    """
    candidates = []
    if pid is not None and proc_path and not os.path.isabs(path):
        try:
            cwd = os.readlink(os.path.join(proc_path, str(pid), "cwd"))
            path = os.path.join(cwd, path)
        except OSError:
            pass
    candidates.append(path)
    if pid is not None and proc_path and os.path.isabs(path):
        via_root = os.path.join(proc_path, str(pid), "root", path.lstrip("/"))
        if via_root != path:
            candidates.append(via_root)
    return path, candidates


def read_config_file(candidates):
    """Read the first readable candidate; return ``(text, read_path, error)``.

    Reads are bounded and never block (:func:`safe_io.read_bytes`): a FIFO, socket, device,
    directory, symlink loop or a file over ``CONFIG_MAX_BYTES`` is an error naming the path.
    When none can be read the error names the first candidate, with the most telling reason
    (permission denied over "does not exist").
    """
    failure = None
    for path in candidates:
        try:
            data = safe_io.read_bytes(path, CONFIG_MAX_BYTES)
        except safe_io.UnsafeInput as e:
            return None, path, str(e)
        except (IOError, OSError) as e:
            if failure is None or (failure[1].errno == errno.ENOENT and e.errno != errno.ENOENT):
                failure = (path, e)
            continue
        try:
            return data.decode("utf-8"), path, None
        except UnicodeDecodeError as e:
            return None, path, "%s is not UTF-8 text (byte %d)" % (path, e.start)
    if failure is None:
        return None, None, "no config file to read"
    path, e = failure
    if e.errno == errno.ENOENT:
        return None, None, "%s does not exist" % candidates[0]
    return None, None, "cannot read %s: %s" % (path, e.strerror or e)


# -- KubeletConfiguration text ----------------------------------------------------------------
# Far deeper than any KubeletConfiguration (4 levels); bounds every reader's recursion.
MAX_DEPTH = 64
ANCHORS_REFUSED = ("YAML anchors and aliases (&name, *name) are refused: an alias can expand a "
                   "small file into a huge one; write the values out")
YAML_INSTALL_HINT = ("Install PyYAML on the node: the python3-yaml package (Debian, Ubuntu, "
                     "Fedora, RHEL 9), python3-pyyaml (RHEL 8), or pip install PyYAML")


class ConfigParseError(ValueError):
    """The text is not a JSON/YAML document this collection reads; the message names the line."""

    def __init__(self, msg, line=None):
        self.line = line
        if line is not None:
            msg = "line %d: %s" % (line, msg)
        super(ConfigParseError, self).__init__(msg)


def _nested_too_deep():
    return ConfigParseError("nested more than %d levels deep; not a KubeletConfiguration"
                            % MAX_DEPTH)


YAML_LOADERS = []  # the refusing loaders, fastest first
if HAS_YAML:
    try:
        from yaml._yaml import CParser as _LibyamlParser  # libyaml's scanner and parser
    except ImportError:  # PyYAML built without libyaml
        _LibyamlParser = None

    class _RefusingComposer(yaml.composer.Composer):
        """Composes PyYAML's node graph, refusing anchors, aliases and deep nesting at their
        event (before anything is built or expanded); YAML 1.1 timestamps stay the strings the
        kubelet's Go decoder sees."""

        yaml_implicit_resolvers = dict(
            (first, [(tag, regexp) for tag, regexp in resolvers
                     if tag != "tag:yaml.org,2002:timestamp"])
            for first, resolvers in yaml.resolver.Resolver.yaml_implicit_resolvers.items())
        _kubegpu_depth = 0

        def compose_node(self, parent, index):
            event = self.peek_event()
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                raise ConfigParseError(ANCHORS_REFUSED, event.start_mark.line + 1)
            depth = self._kubegpu_depth + 1
            if depth > MAX_DEPTH:
                raise _nested_too_deep()
            self._kubegpu_depth = depth
            try:
                return super(_RefusingComposer, self).compose_node(parent, index)
            finally:
                self._kubegpu_depth = depth - 1

    class _PureLoader(_RefusingComposer, yaml.SafeLoader):  # pylint: disable=too-many-ancestors
        """PyYAML's pure-Python safe loader with the refusals."""

    YAML_LOADERS.append(_PureLoader)
    if _LibyamlParser is not None:
        class _LibyamlLoader(_RefusingComposer, _LibyamlParser, yaml.constructor.SafeConstructor,
                             yaml.resolver.Resolver):
            """libyaml's events (5 times faster) composed in Python with the refusals."""

            def __init__(self, stream):  # pylint: disable=super-init-not-called
                _LibyamlParser.__init__(self, stream)
                _RefusingComposer.__init__(self)
                yaml.constructor.SafeConstructor.__init__(self)
                yaml.resolver.Resolver.__init__(self)

        YAML_LOADERS.insert(0, _LibyamlLoader)

    class _ConfigDumper(yaml.SafeDumper):  # pylint: disable=too-many-ancestors
        """Block style, key order kept, sequences indented under their key."""

        def increase_indent(self, flow=False, indentless=False):
            return super(_ConfigDumper, self).increase_indent(flow, False)

    def _represent_str(dumper, data):
        # PyYAML writes NEL and the Unicode line separators raw in plain and single-quoted
        # scalars, where a reader folds them; double quotes escape them.
        style = '"' if any(c in data for c in u"\x85\u2028\u2029") else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)

    _ConfigDumper.add_representer(str, _represent_str)


def check_depth(data, limit=MAX_DEPTH):
    """Raise ConfigParseError when ``data`` nests more than ``limit`` levels (iterative)."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list)):
            if depth > limit:
                raise _nested_too_deep()
            items = value.values() if isinstance(value, dict) else value
            stack.extend((v, depth + 1) for v in items)


def _plain(data):
    """JSON-safe data from explicit YAML tags (!!binary, !!set, !!omap; depth is bounded)."""
    if isinstance(data, dict):
        return dict((k if isinstance(k, (str, int, float, bool)) or k is None else str(_plain(k)),
                     _plain(v)) for k, v in data.items())
    if isinstance(data, (list, tuple)):
        return [_plain(v) for v in data]
    if isinstance(data, (set, frozenset)):
        return sorted((_plain(v) for v in data), key=repr)
    if isinstance(data, bytes):
        return data.decode("utf-8", "replace")
    if isinstance(data, (datetime.date, datetime.datetime)):
        return data.isoformat()
    return data


def load_config_text(text, loader_class=None):
    """Parse a kubelet config file's text; return ``(data, parser)``, parser ``json`` (text
    that starts with ``{`` and is JSON) or ``pyyaml``. Raises ConfigParseError, nothing else,
    when the text does not parse (and when PyYAML is missing and the text is not JSON).
    ``loader_class``: one of ``YAML_LOADERS`` (default: the first, libyaml when built in)."""
    if text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except RecursionError:
            raise ConfigParseError("nested more deeply than the JSON reader goes")
        except ValueError:
            pass  # JSON-looking YAML (flow mapping with comments, single quotes...)
        else:
            check_depth(data)
            return data, "json"
    if not HAS_YAML:
        raise ConfigParseError("PyYAML is not installed on this node. " + YAML_INSTALL_HINT)
    loader = (loader_class or YAML_LOADERS[0])(text)
    try:
        return _plain(loader.get_single_data()), "pyyaml"
    except yaml.YAMLError as e:
        message = str(e).replace('in "<unicode string>", line', "at line")
        raise ConfigParseError(" ".join(message.split()))
    except RecursionError:
        raise _nested_too_deep()
    except (ValueError, TypeError, OverflowError) as e:
        if isinstance(e, ConfigParseError):
            raise
        raise ConfigParseError("%s: %s" % (type(e).__name__, e))
    finally:
        loader.dispose()


def require_yaml(module, reason):
    """Fail ``module`` with ``missing_required_lib`` and the install hint when PyYAML is not
    importable by the node's Python."""
    if not HAS_YAML:
        module.fail_json(msg="%s %s." % (missing_required_lib("PyYAML", reason=reason),
                                         YAML_INSTALL_HINT),
                         exception=YAML_IMPORT_ERROR)


def dump_config_yaml(data):
    """Block-style YAML for ``data``: key order kept, nothing folded, UTF-8 written as is."""
    return yaml.dump(data, Dumper=_ConfigDumper, default_flow_style=False, sort_keys=False,
                     allow_unicode=True, width=1 << 30)


def parse_config(text, path):
    """Parse a KubeletConfiguration; return ``(config dict, parser, error, warnings)``."""
    warnings = []
    try:
        data, parser = load_config_text(text)
    except ConfigParseError as e:
        return {}, None, "cannot parse %s: %s" % (path, e), warnings
    if data is None:
        return {}, parser, "%s is empty" % path, warnings
    if not isinstance(data, dict):
        return {}, parser, "%s holds a %s, not a KubeletConfiguration mapping" % (
            path, type(data).__name__), warnings
    kind = data.get("kind")
    if kind is None:
        warnings.append("%s has no 'kind' (the kubelet requires kind: KubeletConfiguration)" % path)
    elif kind != "KubeletConfiguration":
        return data, parser, "%s is a %r, not a KubeletConfiguration" % (path, kind), warnings
    api = data.get("apiVersion")
    if api is not None and not str(api).startswith("kubelet.config.k8s.io/"):
        warnings.append("%s has apiVersion %r (expected kubelet.config.k8s.io/v1beta1)" % (path, api))
    return data, parser, None, warnings


def merge_patch(target, patch):
    """RFC 7386 JSON merge patch: ``patch`` over ``target``, both left untouched.

    The one merge of the collection: ``--config-dir`` drop-ins over the config (as the kubelet
    applies them) and kubelet_config's settings over the file. A mapping merges key by key
    (existing keys keep their place, new ones go last), ``None`` deletes a key, anything else
    (arrays included) replaces. The result shares nothing mutable with the inputs."""
    if not isinstance(patch, dict):
        return _copy(patch)
    out = dict((k, _copy(v)) for k, v in target.items()) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def _copy(value):
    if isinstance(value, dict):
        return dict((k, _copy(v)) for k, v in value.items())
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _walk_conf_files(directory, limit=256):
    """``*.conf`` files under ``directory`` in Go ``filepath.WalkDir`` order (lexical, depth first)."""
    out = []
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return out
    for name in names:
        path = os.path.join(directory, name)
        if os.path.isdir(path) and not os.path.islink(path):
            out.extend(_walk_conf_files(path, limit - len(out)))
        elif name.endswith(".conf") and os.path.isfile(path):
            out.append(path)
        if len(out) >= limit:
            break
    return out


def load_dropins(config_dir, proc_path, pid):
    """Parse the ``*.conf`` drop-ins of ``--config-dir`` in the order the kubelet applies them.

    Returns ``(list of (path as the kubelet sees it, data), errors)``.
    """
    errors = []
    config_dir, candidates = kubelet_view_paths(config_dir, proc_path, pid)
    directory = None
    for cand in candidates:
        if os.path.isdir(cand):
            directory = cand
            break
    if directory is None:
        return [], ["config-dir %s does not exist" % config_dir]
    if not os.access(directory, os.R_OK | os.X_OK):
        return [], ["cannot list config-dir %s: permission denied" % config_dir]
    out = []
    for path in _walk_conf_files(directory):
        shown = os.path.join(config_dir, os.path.relpath(path, directory))
        text, _read, error = read_config_file([path])
        if error:
            errors.append(error.replace(path, shown))
            continue
        data, _parser, error, _warnings = parse_config(text, shown)
        if error:
            errors.append(error)
            continue
        out.append((shown, data))
    return out, errors


# -- facts --------------------------------------------------------------------------------
def _pick(flag_val, config, key, default):
    """(effective value, source) for a scalar setting."""
    if flag_val is not None and flag_val is not True:
        return flag_val, "flag"
    if isinstance(config, dict) and config.get(key) not in (None, ""):
        return config.get(key), "config"
    return default, "default"


def _map_setting(pairs, flag, config, key, errors, separator="="):
    """(map or None, source) for a map setting (reserved resources, eviction thresholds)."""
    try:
        from_flag = flag_map(pairs, flag, separator)
    except ValueError as e:
        errors.append(str(e))
        from_flag = None
    if from_flag is not None:
        return from_flag, "flag"
    value = config.get(key) if isinstance(config, dict) else None
    if value is None:
        return None, "default"
    if not isinstance(value, dict):
        errors.append("%s must be a mapping, got %r" % (key, value))
        return None, "default"
    return dict(value), "config"


def _memory_entry(mapping, source, errors, what):
    raw = (mapping or {}).get("memory")
    entry = {"raw": None if raw is None else str(raw), "bytes": None, "source": source}
    if raw is not None:
        try:
            entry["bytes"] = quantity_to_bytes(raw)
        except QuantityError as e:
            entry["error"] = str(e)
            errors.append("%s: %s" % (what, e))
    return entry


def memory_facts(pairs, config, node_memory_bytes, errors):
    """The ``memory`` facts: reservations, hard eviction, enforcement and the GKE ladder."""
    system, system_src = _map_setting(pairs, "system-reserved", config, "systemReserved", errors)
    kube, kube_src = _map_setting(pairs, "kube-reserved", config, "kubeReserved", errors)
    eviction, eviction_src = _map_setting(pairs, "eviction-hard", config, "evictionHard", errors,
                                          separator="<")
    merge_defaults = isinstance(config, dict) and config.get("mergeDefaultEvictionSettings") is True
    if eviction is None:
        effective = dict(DEFAULT_EVICTION_HARD)
        missing = []
    else:
        missing = sorted(k for k in DEFAULT_EVICTION_HARD if k not in eviction)
        effective = dict(eviction)
        if merge_defaults:
            for key in missing:
                effective[key] = DEFAULT_EVICTION_HARD[key]
    partial = bool(eviction is not None and missing and not merge_defaults)

    mem_avail = {"raw": None, "bytes": None, "percent": None}
    if "memory.available" in effective:
        try:
            mem_avail = parse_memory_threshold(effective["memory.available"], node_memory_bytes)
        except QuantityError as e:
            mem_avail = {"raw": str(effective["memory.available"]), "bytes": None,
                         "percent": None, "error": str(e)}
            errors.append("evictionHard memory.available: %s" % e)

    enforce = flag_list(pairs, "enforce-node-allocatable")
    enforce_src = "flag"
    if enforce is None:
        value = config.get("enforceNodeAllocatable") if isinstance(config, dict) else None
        if isinstance(value, list):
            enforce, enforce_src = [str(v) for v in value], "config"
        else:
            if value is not None:
                errors.append("enforceNodeAllocatable must be a list, got %r" % (value,))
            enforce, enforce_src = list(DEFAULT_ENFORCE_NODE_ALLOCATABLE), "default"

    system_entry = _memory_entry(system, system_src, errors, "systemReserved memory")
    kube_entry = _memory_entry(kube, kube_src, errors, "kubeReserved memory")
    reserved_total = (system_entry["bytes"] or 0) + (kube_entry["bytes"] or 0)
    eviction_bytes = mem_avail.get("bytes")
    allocatable = None
    if node_memory_bytes is not None:
        allocatable = node_memory_bytes - reserved_total - (eviction_bytes or 0)
    recommended = None
    if node_memory_bytes is not None:
        recommended = gke_reserved_memory_bytes(node_memory_bytes)
    return {
        "system_reserved": system_entry,
        "kube_reserved": kube_entry,
        "eviction_hard": {
            "configured": eviction,
            "source": eviction_src,
            "effective": effective,
            "merge_defaults": merge_defaults,
            "memory_available": mem_avail,
        },
        "eviction_hard_partial": partial,
        "eviction_hard_missing_defaults": missing if eviction is not None else [],
        "enforce_node_allocatable": enforce,
        "enforce_node_allocatable_source": enforce_src,
        "reserved_total_bytes": reserved_total,
        "eviction_bytes": eviction_bytes,
        "allocatable_bytes": allocatable,
        "recommended_reserved_bytes": recommended,
        "recommended_eviction_bytes": GKE_EVICTION_THRESHOLD_BYTES,
        "reserved_shortfall_bytes": (max(recommended - reserved_total, 0)
                                     if recommended is not None else None),
    }, system, kube


def gather_kubelet_facts(proc_path="/proc", config_path=None, version_timeout=VERSION_TIMEOUT,
                         unit=DEFAULT_UNIT, get_bin_path=None,
                         package=DEFAULT_PACKAGE, node_version=None):
    """Everything ``kubelet_facts`` returns as ``ansible_facts.kubelet``.

    ``config_path`` overrides the ``--config`` flag. The kubelet is found by
    :func:`identify_kubelet` (``systemctl`` from ``get_bin_path``); its version comes from the
    package database (``get_bin_path`` finds ``dpkg-query``/``rpm``) or ``node_version`` (the
    Node's ``status.nodeInfo.kubeletVersion`` when the caller has it). No binary is executed.
    """
    errors = []
    systemctl = get_bin_path("systemctl") if get_bin_path else None
    found = identify_kubelet(proc_path, unit, systemctl, version_timeout)
    errors.extend(found["errors"])
    proc = found["proc"]
    pid = proc["pid"] if proc else None
    argv = proc["argv"] if proc else []
    pairs, positional = parse_flags(argv[1:])
    flags, repeated = flags_dict(pairs)

    facts = {
        "running": proc is not None,
        "pid": pid,
        "pids": [p["pid"] for p in found["candidates"]],
        "identified_by": found["method"],
        "unit": unit,
        "impostors": found["rejected"],
        "cmdline": argv,
        "flags": flags,
        "flags_repeated": repeated,
        "args": positional,
        "exe": proc.get("exe") if proc else None,
        "exe_deleted": proc.get("exe_deleted") if proc else None,
        "version": None,
        "version_source": None,
        "version_error": None,
    }
    for imp in found["rejected"]:
        errors.append("process %s named kubelet (uid %s, executable %s) is not the kubelet: %s"
                      % (imp["pid"], imp["uid"], imp["exe"], imp["why"]))

    # version: never by running a binary; the package database, else the Node object.
    version, source, err = None, None, None
    if get_bin_path is not None:
        version, source, err = package_version(get_bin_path, package, version_timeout)
    if version is None and node_version:
        version, source = str(node_version), "node:status.nodeInfo.kubeletVersion"
    facts["version"], facts["version_source"] = version, source
    if version is None:
        facts["version_error"] = err or "no package database to ask and no Node object"

    # config file
    flag_config = flag_value(pairs, "config")
    if config_path:
        source, wanted = "option", config_path
    elif flag_config not in (None, True, ""):
        source, wanted = "flag", flag_config
    else:
        source, wanted = "default", DEFAULT_CONFIG_PATH
    wanted, candidates = kubelet_view_paths(wanted, proc_path, pid)
    if source == "option":
        candidates = [config_path]
    if proc is None:
        loaded_by_kubelet = None
    elif flag_config in (None, True, ""):
        loaded_by_kubelet = False
    else:
        loaded_by_kubelet = kubelet_view_paths(flag_config, proc_path, pid)[0] == wanted
    text, read_path, error = read_config_file(candidates)
    config, parser, warnings = {}, None, []
    if error is None:
        config, parser, error, warnings = parse_config(text, wanted)
    facts.update({
        "config_path": wanted,
        "config_source": source,
        "config_read_path": read_path,
        "config_loaded_by_kubelet": loaded_by_kubelet,
        "config_parser": parser,
        "config": config,
        "config_error": error,
        "config_warnings": warnings,
    })
    # values the kubelet itself uses: the file only when it loads it (or the user named one)
    effective = config if error is None and (loaded_by_kubelet is not False or
                                             source == "option") else {}
    if loaded_by_kubelet is False and source != "option" and error is None:
        warnings.append("kubelet pid %s runs without --config; %s is not used by it" % (pid, wanted))

    config_dir = flag_value(pairs, "config-dir")
    dropins = []
    if proc is not None and config_dir not in (None, True, ""):
        loaded, dropin_errors = load_dropins(config_dir, proc_path, pid)
        errors.extend(dropin_errors)
        if "evictionHard" not in effective and any("evictionHard" in data for _p, data in loaded):
            # drop-ins merge into the already-defaulted config: a drop-in's evictionHard keys
            # add to the four defaults instead of replacing them
            effective = dict(effective, evictionHard=dict(DEFAULT_EVICTION_HARD))
        for path, data in loaded:
            effective = merge_patch(effective, data)
            dropins.append(path)
    facts["config_dir"] = config_dir if config_dir not in (None, True, "") else None
    facts["config_dropins"] = dropins
    facts["effective_config"] = effective

    sources = {}
    facts["cpu_manager_policy"], sources["cpu_manager_policy"] = _pick(
        flag_value(pairs, "cpu-manager-policy"), effective,
        "cpuManagerPolicy", DEFAULT_CPU_MANAGER_POLICY)
    facts["cgroup_driver"], sources["cgroup_driver"] = _pick(
        flag_value(pairs, "cgroup-driver"), effective, "cgroupDriver",
        DEFAULT_CGROUP_DRIVER)
    root_dir = flag_value(pairs, "root-dir")
    if root_dir in (None, True, ""):
        root_dir, sources["root_dir"] = DEFAULT_ROOT_DIR, "default"
    else:
        sources["root_dir"] = "flag"
    facts["root_dir"] = root_dir
    facts["checkpoint_path"] = os.path.join(root_dir, CHECKPOINT_RELPATH)

    node_memory = read_meminfo_total(proc_path)
    facts["node_memory_bytes"] = node_memory
    memory, system, kube = memory_facts(pairs, effective, node_memory, errors)
    facts["memory"] = memory
    facts["system_reserved"] = system
    facts["kube_reserved"] = kube
    sources["system_reserved"] = memory["system_reserved"]["source"]
    sources["kube_reserved"] = memory["kube_reserved"]["source"]
    sources["eviction_hard"] = memory["eviction_hard"]["source"]
    sources["enforce_node_allocatable"] = memory["enforce_node_allocatable_source"]
    facts["sources"] = sources
    facts["errors"] = errors
    return facts


# ------------------------------------------------------------------------------ kubelet log

_GPA_MSG = '"Issuing a GetPreferredAllocation call for container"'
_ALLOC_MSG = '"Making allocation request for device plugin"'
_KLOG_KV_RE = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
_EPOCH_RE = re.compile(r"^(\d{9,11}(?:\.\d+)?)\s")


def unanswered_allocations(lines, now=None):
    """Device-plugin calls the kubelet issued and never got past (domain-facts §2).

    ``lines`` are kubelet log lines, optionally prefixed with a Unix time as
    ``journalctl -o short-unix`` prints them. The kubelet (verbosity >= 4) logs
    "Issuing a GetPreferredAllocation call for container" before the RPC and "Making allocation
    request for device plugin" after it returns. Admission is serial, so any later allocation
    request means the earlier calls returned; the calls after the last one are still waiting.
    Returns ``[{"pod", "container", "time", "age_seconds"}]`` (time/age None without timestamps).
    """
    pending = []
    for line in lines:
        if _ALLOC_MSG in line:
            pending = []
            continue
        if _GPA_MSG not in line:
            continue
        ts = None
        m = _EPOCH_RE.match(line)
        if m:
            ts = float(m.group(1))
        kv = dict(_KLOG_KV_RE.findall(line.split(_GPA_MSG, 1)[1]))
        pending.append({"pod": kv.get("pod") or kv.get("podUID"), "container": kv.get("containerName"),
                        "time": ts, "age_seconds": (int(now - ts) if (now is not None and ts is not None) else None)})
    return pending
