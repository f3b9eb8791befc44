# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which process is the node's kubelet, and whether it can be trusted, read from ``/proc``.

Node side, Python 3.8+. The kubelet is found the way the node knows it (its systemd unit's
MainPID, else the unit's cgroup, else a single root-owned process named kubelet), never by
name alone: a process any user can start under that name is reported as an impostor. Every
read is bounded and nothing found through ``/proc`` is ever executed.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re
import stat

from ansible_collections.kubegpu.fleet.plugins.module_utils._common import safe_io
from ansible_collections.kubegpu.fleet.plugins.module_utils._common.procfs import read_text as read_proc_text

DEFAULT_UNIT = "kubelet.service"
# Deadline of each command the kubelet probes run (systemctl show, dpkg-query, rpm).
COMMAND_TIMEOUT = 5.0
CMDLINE_MAX_BYTES = 4 << 20  # ARG_MAX is 2 MiB by default; /proc caps cmdline far below this


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
        comm = read_proc_text(os.path.join(base, "comm"), 256)
        comm = comm.rstrip("\n") if comm is not None else None
        cmdline = read_cmdline(proc_path, entry)
        if comm is None and cmdline is None:
            continue  # vanished
        argv = kubelet_argv(comm, cmdline, name)
        if argv is None:
            continue
        state, start = parse_stat(read_proc_text(os.path.join(base, "stat"), 4096))
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


def systemd_main_pid(unit, systemctl, timeout=COMMAND_TIMEOUT):
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
    text = read_proc_text(os.path.join(proc_path, str(pid), "cgroup"), 64 << 10)
    for line in (text or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and (parts[0] == "0" or parts[1] == "name=systemd") \
                and parts[2] == want:
            return True
    return False


def identify_kubelet(proc_path="/proc", unit=DEFAULT_UNIT, systemctl=None,
                     timeout=COMMAND_TIMEOUT, name="kubelet", sd_booted=None):
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
                comm = read_proc_text(os.path.join(proc_path, str(main_pid), "comm"), 256)
                chosen = {"pid": main_pid, "comm": (comm or "").rstrip("\n") or None,
                          "argv": kubelet_argv(comm, cmdline, name) or cmdline,
                          "starttime": parse_stat(read_proc_text(
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
