# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run one command and account the controller CPU of its whole process tree.

    cpu_wrap.py RESULT.json -- CMD [ARG...]

This process becomes a child subreaper (prctl PR_SET_CHILD_SUBREAPER), so descendants that
daemonize - the ssh ControlPersist masters ansible leaves behind - are re-parented to it
instead of to init. After CMD exits they are stopped (SIGTERM, then SIGKILL) and reaped, so
getrusage(RUSAGE_CHILDREN) holds the user+system CPU of CMD and of everything it started on
this machine. Processes of the lab nodes are not descendants (each node runs under its own
supervisor, in its own session and cgroup), so their CPU is not counted.

RESULT.json: rc, wall_s (CMD start to exit; cleanup not included), user_s, sys_s (whole
tree), main_user_s, main_sys_s (CMD's own process only, sampled from /proc every 50 ms while
it runs), leftovers (descendants stopped after CMD exited).
"""
import ctypes
import errno
import json
import os
import resource
import signal
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
TICK = os.sysconf("SC_CLK_TCK")


def _children(pid):
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d, "rb") as f:
                data = f.read()
        except OSError:
            continue
        fields = data[data.rfind(b")") + 2:].split()
        if int(fields[1]) == pid:
            out.append(int(d))
    return out


def _own_cpu(pid):
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2:].split()
    return int(fields[11]) / TICK, int(fields[12]) / TICK  # utime, stime (own, not children)


def _reap_all(deadline):
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except OSError as e:
            if e.errno == errno.ECHILD:
                return True
            raise
        if pid == 0:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)


def main(argv):
    if len(argv) < 4 or argv[2] != "--":
        sys.stderr.write("usage: cpu_wrap.py RESULT.json -- CMD [ARG...]\n")
        return 2
    out, cmd = argv[1], argv[3:]
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        sys.stderr.write("cpu_wrap: prctl(PR_SET_CHILD_SUBREAPER) failed\n")
        return 2
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd)
    main_cpu = (0.0, 0.0)
    while proc.poll() is None:
        sample = _own_cpu(proc.pid)
        if sample:
            main_cpu = sample
        time.sleep(0.05)
    wall = time.monotonic() - t0
    leftovers = _children(os.getpid())
    for sig, wait_s in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        for pid in _children(os.getpid()):
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        if _reap_all(time.monotonic() + wait_s):
            break
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = {"rc": proc.returncode, "wall_s": wall, "user_s": ru.ru_utime, "sys_s": ru.ru_stime,
              "main_user_s": main_cpu[0], "main_sys_s": main_cpu[1], "leftovers": len(leftovers),
              "max_rss_kib": ru.ru_maxrss}
    with open(out, "w") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
