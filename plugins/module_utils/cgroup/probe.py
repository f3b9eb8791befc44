# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ask the kernel whether a cgroup may use device nodes (node side, Python 3.8+).

Works the same on cgroup v1 (devices controller) and cgroup v2 (BPF_PROG_TYPE_CGROUP_DEVICE
programs): a forked child writes its own pid into the cgroup's ``cgroup.procs`` and asks for
each device node, reporting one errno per node through a pipe. The parent never enters the
cgroup; the child is always reaped (killed after ``timeout``).

Two methods:

* ``access`` (default): ``access(2)`` with R_OK/W_OK. The kernel runs the device-cgroup check
  in ``inode_permission`` (v1 exception list or the v2 BPF program) without calling into the
  driver, so a wedged NVIDIA driver cannot hang the probe and no GPU is initialised.
  0 = allowed, EPERM = denied by the cgroup, anything else = unknown.
* ``open``: ``open(2)`` with O_NONBLOCK, exactly what CUDA does. EPERM = denied; ENXIO, ENODEV
  and other driver errors come after the cgroup check = allowed; EACCES (DAC, LSM or a nodev
  mount), ENOENT and similar = unknown.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import collections
import errno
import os
import select
import signal
import time

from ansible_collections.kubegpu.fleet.plugins.module_utils._common import safe_io

try:
    import ctypes
    _LIBC = ctypes.CDLL(None, use_errno=True)
    _ACCESS = _LIBC.access
    _ACCESS.argtypes = [ctypes.c_char_p, ctypes.c_int]
    _ACCESS.restype = ctypes.c_int
except Exception:  # pylint: disable=broad-except  # no ctypes/libc: open method only
    ctypes = None
    _ACCESS = None

METHODS = ("access", "open")
KILL_GRACE = 5.0
MOUNTINFO_LIMIT = 16 << 20
# open() failures that happen before (or instead of) the device-cgroup check.
_OPEN_UNKNOWN = frozenset([errno.EACCES, errno.ENOENT, errno.ENOTDIR, errno.ELOOP,
                           errno.ENAMETOOLONG, errno.EISDIR, errno.EMFILE, errno.ENFILE,
                           errno.EFAULT])

ProbeResult = collections.namedtuple("ProbeResult", "path verdict errno reason")
"""verdict: allowed | denied | unknown; errno: name (``EPERM``) or None; reason: text."""

ProbeOutcome = collections.namedtuple("ProbeOutcome", "results warnings")


class ProbeError(Exception):
    """The probe could not run in this cgroup (no cgroup.procs, frozen, move refused...)."""


def _errname(num):
    return errno.errorcode.get(num, str(num)) if num else None


def _access_bits(access):
    if not access or any(c not in "rw" for c in access):
        raise ValueError("access %r must be made of r and w (mknod cannot be probed)"
                         % (access,))
    mode = 0
    if "r" in access:
        mode |= os.R_OK
    if "w" in access:
        mode |= os.W_OK
    if "r" in access and "w" in access:
        flags = os.O_RDWR
    elif "w" in access:
        flags = os.O_WRONLY
    else:
        flags = os.O_RDONLY
    return mode, flags | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0)


def _make_checker(method):
    """A callable ``(path_bytes, mode, flags) -> errno`` (0 = success), safe after fork."""
    if method == "access":
        if _ACCESS is None:
            raise ProbeError("probe_method access needs ctypes and the C library; "
                             "use probe_method open")

        def check_access(path, mode, _flags):
            ctypes.set_errno(0)
            if _ACCESS(path, mode) == 0:
                return 0
            return ctypes.get_errno() or errno.EIO
        return check_access
    if method == "open":
        def check_open(path, _mode, flags):
            try:
                fd = os.open(path, flags)
            except OSError as e:
                return e.errno or errno.EIO
            os.close(fd)
            return 0
        return check_open
    raise ValueError("probe method %r is not one of %s" % (method, ", ".join(METHODS)))


def classify(method, err):
    """``(verdict, reason)`` for the errno a probe got (0 = success)."""
    if err == 0:
        return "allowed", None
    name = _errname(err)
    if err == errno.EPERM:
        return "denied", "EPERM from the device cgroup"
    if method == "open" and err not in _OPEN_UNKNOWN:
        return "allowed", "%s after the device-cgroup check (no usable driver behind it)" % name
    return "unknown", "%s (%s) before the device-cgroup check" % (name, os.strerror(err))


def _child(procs, requests, checker, wfd, rfd):
    """Runs in the forked child: never returns, never touches Python-level buffers."""
    status = 0
    try:
        os.close(rfd)
        try:
            fd = os.open(procs, os.O_WRONLY)
            try:
                os.write(fd, str(os.getpid()).encode("ascii"))
            finally:
                os.close(fd)
        except OSError as e:
            os.write(wfd, b"X %d\n" % (e.errno or errno.EIO))
            status = 2
        else:
            os.write(wfd, b"M\n")
            for index, (path, mode, flags) in enumerate(requests):
                os.write(wfd, b"%d %d\n" % (index, checker(path, mode, flags)))
    except BaseException:  # pylint: disable=broad-except
        status = 3
    finally:
        os._exit(status)  # pylint: disable=protected-access


def _read_all(rfd, timeout):
    """Read the pipe until EOF or ``timeout``; ``(data, timed_out)``."""
    deadline = time.monotonic() + timeout
    poller = select.poll()
    poller.register(rfd, select.POLLIN | select.POLLHUP | select.POLLERR)
    chunks = []
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return b"".join(chunks), True
        if not poller.poll(max(1, int(remaining * 1000))):
            continue
        chunk = os.read(rfd, 65536)
        if not chunk:
            return b"".join(chunks), False
        chunks.append(chunk)


def _reap(pid, kill):
    """Wait for the child (SIGKILL first when ``kill``); True when it is gone."""
    if kill:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    deadline = time.monotonic() + KILL_GRACE
    killed = kill
    while True:
        try:
            wpid, _status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return True  # already reaped (SIGCHLD ignored)
        if wpid == pid:
            return True
        if time.monotonic() > deadline:
            if killed:
                return False
            killed = True
            deadline = time.monotonic() + KILL_GRACE
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.005)


def _read_small(path):
    """A small cgroup file (cgroup.freeze, cgroup.events), never blocking; None if unreadable."""
    try:
        return safe_io.read_text(path, limit=4096)
    except (safe_io.UnsafeInput, IOError, OSError):
        return None


def _unescape_mountinfo(field):
    # mountinfo escapes space, tab, newline and backslash as \ooo
    out = []
    i = 0
    while i < len(field):
        digits = field[i + 1:i + 4]
        if field[i] == "\\" and len(digits) == 3 and all(c in "01234567" for c in digits):
            out.append(chr(int(digits, 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def filesystem_type(path, mountinfo="/proc/self/mountinfo"):
    """Filesystem type of the mount holding ``path`` in this process's mount namespace."""
    target = os.path.realpath(path)
    text = _read_small_all(mountinfo)
    best, best_type = None, None
    for line in (text or "").splitlines():
        left, sep, right = line.partition(" - ")
        fields = left.split()
        if not sep or len(fields) < 5 or not right.split():
            continue
        mount_point = _unescape_mountinfo(fields[4])
        if target == mount_point or target.startswith(mount_point.rstrip("/") + "/"):
            if best is None or len(mount_point) >= len(best):
                best, best_type = mount_point, right.split()[0]
    return best_type


def _read_small_all(path):
    """mountinfo: a node with thousands of pod mounts has a few MiB of it."""
    try:
        return safe_io.read_text(path, limit=MOUNTINFO_LIMIT)
    except (safe_io.UnsafeInput, IOError, OSError):
        return None


def _is_frozen(cgroup_dir):
    """cgroup v2: frozen itself (cgroup.freeze) or through an ancestor (cgroup.events)."""
    if (_read_small(os.path.join(cgroup_dir, "cgroup.freeze")) or "").strip() == "1":
        return True
    for line in (_read_small(os.path.join(cgroup_dir, "cgroup.events")) or "").splitlines():
        if line.split() == ["frozen", "1"]:
            return True
    return False


def probe_cgroup(cgroup_dir, paths, access="rw", method="access", timeout=10.0):
    """Probe each device node in ``paths`` from a child process placed in ``cgroup_dir``.

    ``access`` is one string for every path (``"rw"``, ``"r"``, ``"w"``) or a list with one
    per path. Returns ``ProbeOutcome(results, warnings)`` with one ``ProbeResult`` per path,
    in order. Raises ``ProbeError`` when the probe cannot run in that cgroup at all.
    """
    paths = list(paths)
    accesses = [access] * len(paths) if isinstance(access, str) else list(access)
    if len(accesses) != len(paths):
        raise ValueError("%d access strings for %d paths" % (len(accesses), len(paths)))
    requests = []
    for path, acc in zip(paths, accesses):
        mode, flags = _access_bits(acc)
        requests.append((os.fsencode(path), mode, flags))
    checker = _make_checker(method)
    procs = os.path.join(cgroup_dir, "cgroup.procs")
    if not os.path.isfile(procs):
        raise ProbeError("%s has no cgroup.procs: not a live cgroup, cannot probe" % cgroup_dir)
    fstype = filesystem_type(cgroup_dir)
    if fstype not in ("cgroup", "cgroup2"):
        raise ProbeError("%s is on a %s filesystem, not a live cgroup tree: probe mode cannot "
                         "run there (use mode list for copies of devices.list files)"
                         % (cgroup_dir, fstype or "unknown"))
    if _is_frozen(cgroup_dir):
        raise ProbeError("%s is frozen (paused container or frozen parent): a probe process "
                         "would freeze too" % cgroup_dir)
    rfd, wfd = os.pipe()
    try:
        pid = os.fork()
    except OSError as e:
        os.close(rfd)
        os.close(wfd)
        raise ProbeError("cannot fork a probe process: %s" % e)
    if pid == 0:  # pragma: no cover - the child always _exits
        _child(procs, requests, checker, wfd, rfd)
    os.close(wfd)
    return collect(pid, rfd, cgroup_dir, paths, method, timeout)


def collect(pid, rfd, cgroup_dir, paths, method, timeout):
    """Read a probe child's answers from ``rfd`` (closed here), reap it, build the outcome.

    The child is killed when it has not finished after ``timeout`` seconds; devices it did not
    answer for are ``unknown``.
    """
    try:
        data, timed_out = _read_all(rfd, timeout)
    finally:
        os.close(rfd)
    gone = _reap(pid, timed_out)
    warnings = []
    if not gone:
        warnings.append("probe process %d did not exit after SIGKILL (uninterruptible "
                        "sleep in the driver?)" % pid)
    moved = False
    answers = {}
    for line in data.decode("ascii", "replace").splitlines():
        fields = line.split()
        if fields[:1] == ["X"] and len(fields) == 2 and safe_io.is_ascii_digits(fields[1]):
            err = int(fields[1])
            raise ProbeError("cannot move a probe process into %s: %s (%s)"
                             % (cgroup_dir, _errname(err), os.strerror(err)))
        if fields == ["M"]:
            moved = True
        elif len(fields) == 2 and safe_io.is_ascii_digits(fields[0]) and safe_io.is_ascii_digits(fields[1]):
            answers[int(fields[0])] = int(fields[1])
    if not moved:
        raise ProbeError("the probe process for %s died before entering the cgroup%s"
                         % (cgroup_dir, " (timed out)" if timed_out else ""))
    results = []
    for index, path in enumerate(paths):
        if index in answers:
            verdict, reason = classify(method, answers[index])
            results.append(ProbeResult(path, verdict, _errname(answers[index]), reason))
        elif timed_out:
            results.append(ProbeResult(path, "unknown", None,
                                       "no answer within %.1fs (probe process killed)"
                                       % timeout))
        else:
            results.append(ProbeResult(path, "unknown", None, "probe process exited early"))
    if timed_out:
        blocked = [p for i, p in enumerate(paths) if i not in answers][:1]
        warnings.append("probing %s timed out after %.1fs%s" % (
            cgroup_dir, timeout, (" at %s" % blocked[0]) if blocked else ""))
    return ProbeOutcome(results, warnings)
