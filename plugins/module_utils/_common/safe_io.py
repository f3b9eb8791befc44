# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Bounded, non-blocking reads and deadline-bound commands for hostile nodes (node side, 3.8+).

The audit runs as root beside other users' processes, so nothing a module reads or runs on the
node may make it hang, exhaust memory or act on something it did not mean to:

* :func:`read_bytes` / :func:`read_text` open with ``O_NONBLOCK`` (a FIFO never blocks the open),
  refuse anything but a regular file (procfs/sysfs files are regular; character devices only
  where the caller says so), and never read more than ``limit`` bytes: a larger file is an
  error that says so, never a silent cut.
* :func:`read_tail` reads logs that may legitimately be larger than the bound (the kernel log
  through ``/dev/kmsg`` or a file): it keeps the newest ``limit`` bytes, cut at a line boundary,
  and says how much older data it dropped.
* :func:`run_command` runs an argv list (never a shell) in its own session with a hard deadline
  and an output bound; on time-out or overflow the whole process group is killed, and
  descendants that daemonised out of it (double fork + ``setsid``) are found through the child
  subreaper and killed too. Output past the bound is an error by default; ``keep="head"`` (a
  command that prints the newest records first) or ``keep="tail"`` (newest last) keep the
  newest ``limit`` bytes instead and say that, and how much, was cut.
* :func:`check_timeout`, :func:`check_unit_name`, :func:`check_package_name` and
  :func:`check_path` validate option values before they reach a command line or a file system
  call.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import collections
import errno
import math
import os
import re
import select
import signal
import stat
import subprocess
import time

from ansible_collections.kubegpu.fleet.plugins.module_utils._common.fileutil import file_kind

DEFAULT_LIMIT = 4 << 20  # 4 MiB: far above any config/procfs file the collection reads
MAX_TIMEOUT = 86400.0

_PR_SET_CHILD_SUBREAPER = 36


class UnsafeInput(ValueError):
    """A node file or option value the collection refuses to act on. The message names it."""


class TooLarge(UnsafeInput):
    """A file holds more than the bound the caller set (never cut silently)."""


class CommandTimeout(UnsafeInput):
    """A command did not finish within its deadline (it and its descendants were killed).

    ``result``: with :func:`run_command`'s ``keep`` set, the :class:`CommandResult` of what the
    command printed before it was killed (``rc`` None, ``truncated`` True); else None."""

    def __init__(self, msg, result=None):
        UnsafeInput.__init__(self, msg)
        self.result = result


# --------------------------------------------------------------------------- files

def _open_checked(path, missing_ok=False, allow_char_device=False):
    """``(fd, stat)`` of ``path`` opened read-only without blocking, or ``(None, None)`` for a
    missing file when ``missing_ok``. Raises :class:`UnsafeInput` for a FIFO, socket, device
    (a character device is allowed with ``allow_char_device``), directory or symlink loop.
    A regular file's descriptor is blocking again (NFS and friends read normally)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if e.errno == errno.ENOENT and missing_ok:
            return None, None
        if e.errno == errno.ELOOP:
            raise UnsafeInput("%s: symlink loop" % path)
        if e.errno in (errno.ENXIO, errno.EISDIR):
            raise UnsafeInput("%s is not a regular file (%s)" % (path, os.strerror(e.errno)))
        raise
    try:
        st = os.fstat(fd)
        regular = stat.S_ISREG(st.st_mode)
        if not regular and not (allow_char_device and stat.S_ISCHR(st.st_mode)):
            raise UnsafeInput("%s is %s; refusing to read it" % (path, file_kind(st.st_mode)))
        if regular:
            # Regular files never block; clear O_NONBLOCK so NFS and friends read normally.
            try:
                import fcntl
                fl = fcntl.fcntl(fd, fcntl.F_GETFL)
                fcntl.fcntl(fd, fcntl.F_SETFL, fl & ~os.O_NONBLOCK)
            except (ImportError, OSError):
                pass
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def read_bytes(path, limit=DEFAULT_LIMIT, missing_ok=False, allow_char_device=False):
    """Return at most ``limit`` bytes of the regular file ``path``.

    Raises :class:`UnsafeInput` when ``path`` is a FIFO, socket, device (unless
    ``allow_char_device``), directory, a symlink loop, or larger than ``limit``; ``OSError`` for
    other read errors (permissions, I/O). Returns None for a missing file when ``missing_ok``.
    """
    fd, st = _open_checked(path, missing_ok, allow_char_device)
    if fd is None:
        return None
    try:
        # The bound is enforced on what is read, never on st_size: sysfs reports every
        # attribute as 4096 bytes (a PCI "vendor" file holds 7) and procfs reports 0.
        chunks = []
        total = 0
        while True:
            try:
                chunk = os.read(fd, min(65536, limit + 1 - total))
            except OSError as e:
                if e.errno == errno.EAGAIN:  # a character device with nothing (more) to read
                    break
                raise
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                size = (" (it is %d bytes)" % st.st_size
                        if stat.S_ISREG(st.st_mode) and st.st_size > limit else "")
                raise TooLarge("%s holds more than the %d bytes this reads%s" % (path, limit, size))
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_text(path, limit=DEFAULT_LIMIT, missing_ok=False, allow_char_device=False):
    """:func:`read_bytes` decoded as UTF-8; undecodable bytes become U+FFFD, never an error."""
    data = read_bytes(path, limit, missing_ok=missing_ok, allow_char_device=allow_char_device)
    if data is None:
        return None
    return data.decode("utf-8", "replace")


class _Kept(object):
    """What is kept of a stream under a ``limit``: everything (``keep`` None: ``overflow`` says
    it went past), the first ``limit`` bytes (``"head"``) or the last ``limit`` bytes
    (``"tail"``, a ring of the chunks read). ``dropped`` counts the bytes not kept; memory stays
    below ``limit`` plus one chunk."""

    __slots__ = ("keep", "limit", "chunks", "size", "dropped", "overflow", "last_dropped")

    def __init__(self, keep, limit):
        self.keep = keep
        self.limit = limit
        self.chunks = collections.deque()
        self.size = 0
        self.dropped = 0
        self.overflow = False
        self.last_dropped = b""  # tail: the byte before the kept part ("\n": it starts a line)

    def add(self, chunk):
        if self.keep == "head":
            take = chunk[:max(0, self.limit - self.size)]
            if take:
                self.chunks.append(take)
                self.size += len(take)
            self.dropped += len(chunk) - len(take)
            return
        self.chunks.append(chunk)
        self.size += len(chunk)
        if self.keep == "tail":
            while self.size - len(self.chunks[0]) >= self.limit:
                old = self.chunks.popleft()
                self.size -= len(old)
                self.dropped += len(old)
                self.last_dropped = old[-1:]
        elif self.size > self.limit:
            self.overflow = True

    def data(self, stopped=False):
        """The kept bytes, whole lines only where a line was cut: once something was dropped,
        the partial line at the cut is dropped too (and counted), so the head ends at its last
        newline and the tail starts after its first; ``stopped`` (the stream was cut off, e.g.
        at a deadline) drops a partial last line. A kept part without any newline (one huge
        line) is returned as it is. Call once: the buffer is consumed."""
        data = b"".join(self.chunks)
        self.chunks = collections.deque()
        if self.keep == "tail" and len(data) > self.limit:
            cut = len(data) - self.limit
            self.last_dropped = data[cut - 1:cut]
            data = data[cut:]
            self.dropped += cut
        if self.keep == "tail" and self.dropped and self.last_dropped != b"\n":
            start = data.find(b"\n")
            if 0 <= start < len(data) - 1:
                self.dropped += start + 1
                data = data[start + 1:]
        if (self.keep == "head" and self.dropped) or stopped:
            end = data.rfind(b"\n")
            if 0 <= end < len(data) - 1:
                self.dropped += len(data) - end - 1
                data = data[:end + 1]
        self.size = len(data)
        return data


class TailRead(object):
    """What :func:`read_tail` read: ``data`` (the newest bytes, whole lines), ``dropped`` (older
    bytes not kept), ``overwritten`` (times a character device such as ``/dev/kmsg`` said records
    were overwritten before they could be read: older data lost, an unknown amount)."""

    __slots__ = ("data", "dropped", "overwritten")

    def __init__(self, data, dropped, overwritten):
        self.data = data
        self.dropped = dropped
        self.overwritten = overwritten

    @property
    def truncated(self):
        return bool(self.dropped or self.overwritten)


def read_tail(path, limit=DEFAULT_LIMIT, timeout=10.0, allow_char_device=False):
    """The newest ``limit`` bytes of the log ``path``: a :class:`TailRead`.

    For logs whose newest records matter most and that may be larger than any bound: a
    regular file larger than ``limit`` is read from ``size - limit`` on (never read whole); a
    character device (``/dev/kmsg``, with ``allow_char_device``) is read record by record until
    it has nothing more (``EAGAIN``), keeping the last ``limit`` bytes; an ``EPIPE`` (the kernel
    overwrote records before they were read) is counted and reading goes on with the next
    record. Whatever is cut is cut at a line boundary and counted in ``dropped``. Raises
    :class:`UnsafeInput` as :func:`read_bytes` does for FIFOs, sockets, directories and symlink
    loops, and when ``timeout`` seconds pass before the end is reached (a device written to
    faster than it can be read); ``OSError`` for other errors. A missing file is an OSError.
    """
    timeout = check_timeout(timeout, "timeout", minimum=0.001)
    deadline = time.monotonic() + timeout
    fd, st = _open_checked(path, False, allow_char_device)
    try:
        kept = _Kept("tail", limit)
        overwritten = 0
        if stat.S_ISREG(st.st_mode) and st.st_size > limit:
            # One byte more than kept: whether the kept part starts a line.
            os.lseek(fd, st.st_size - limit - 1, os.SEEK_SET)
            kept.dropped = st.st_size - limit - 1
        while True:
            if time.monotonic() > deadline:
                raise UnsafeInput("%s: still reading after %gs (written faster than it can be "
                                  "read); stopped" % (path, timeout))
            try:
                chunk = os.read(fd, 65536)
            except OSError as e:
                if e.errno == errno.EAGAIN:
                    break
                if e.errno == errno.EPIPE and stat.S_ISCHR(st.st_mode):
                    overwritten += 1
                    continue
                raise
            if not chunk:
                break
            kept.add(chunk)
        data = kept.data()
        return TailRead(data, kept.dropped, overwritten)
    finally:
        os.close(fd)


def try_read_text(path, limit=DEFAULT_LIMIT):
    """(text, None) or (None, reason): for probes that record why a file could not be read.

    A missing file gives (None, None)."""
    try:
        return read_text(path, limit, missing_ok=True), None
    except UnsafeInput as e:
        return None, str(e)
    except (IOError, OSError) as e:
        return None, "%s: %s" % (path, e.strerror or e)


# --------------------------------------------------------------------------- options

def is_ascii_digits(text):
    """True when ``text`` is a non-empty run of ASCII digits ``0``-``9``.

    Use it, not ``str.isdigit``/``isnumeric``/``isdecimal``, before ``int(text)`` on anything
    read from a node: ``"\u00b2".isdigit()`` is True and ``int("\u00b2")`` raises ValueError,
    and ``int`` turns Arabic-Indic or full-width digits into numbers no tool on the node writes.
    """
    return isinstance(text, str) and bool(text) and all("0" <= c <= "9" for c in text)


def check_timeout(value, name="timeout", minimum=0.0, maximum=MAX_TIMEOUT):
    """A finite number of seconds in [minimum, maximum]; :class:`UnsafeInput` otherwise."""
    try:
        t = float(value)
    except (TypeError, ValueError, OverflowError):
        raise UnsafeInput("%s must be a number of seconds, got %r" % (name, value))
    if math.isnan(t) or math.isinf(t) or t < minimum or t > maximum:
        raise UnsafeInput("%s must be between %g and %g seconds, got %r"
                          % (name, minimum, maximum, value))
    return t


# systemd.unit(5): "[a-zA-Z0-9:_.\-]" plus "@" for templates and "\" for escapes; at most 255
# characters; a type suffix. No glob characters, so systemctl never expands a pattern.
_UNIT_RE = re.compile(r"^[A-Za-z0-9:_.\\-]+(@[A-Za-z0-9:_.\\-]*)?"
                      r"\.(service|socket|device|mount|automount|swap|target|path|timer|slice|scope)$")
_UNIT_BARE_RE = re.compile(r"^[A-Za-z0-9:_.\\-]+(@[A-Za-z0-9:_.\\-]*)?$")


def check_unit_name(value, name="unit"):
    """A systemd unit name (``kubelet`` or ``kubelet.service``), never a glob or an option."""
    if not isinstance(value, str) or not value or len(value) > 255 or value.startswith("-") \
            or not (_UNIT_RE.fullmatch(value) or _UNIT_BARE_RE.fullmatch(value)) or value in (".", ".."):
        raise UnsafeInput("%s must be a systemd unit name such as kubelet.service "
                          "(letters, digits, ':_.-\\@', no glob or option), got %r" % (name, value))
    return value


# Debian policy 5.6.1 (lower case, digits, + - . ; two characters at least, alphanumeric first);
# RPM names also allow upper case and '_'. Never an option ("-...") or a glob.
_PACKAGE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9+._-]{0,254}$")


def check_package_name(value, name="package"):
    if not isinstance(value, str) or not _PACKAGE_RE.fullmatch(value):
        raise UnsafeInput("%s must be a package name (letters, digits, '+._-', not starting with "
                          "'-'), got %r" % (name, value))
    return value


def check_path(value, name="path", absolute=True):
    """An absolute path without NUL or newline and no '..' component."""
    if not isinstance(value, str) or not value or "\0" in value or "\n" in value:
        raise UnsafeInput("%s must be a path, got %r" % (name, value))
    if absolute and not value.startswith("/"):
        raise UnsafeInput("%s must be an absolute path, got %r" % (name, value))
    if ".." in value.split("/"):
        raise UnsafeInput("%s must not contain '..', got %r" % (name, value))
    return value


# --------------------------------------------------------------------------- commands

def _become_subreaper():
    """Make this process the child subreaper (Linux 3.4+): orphaned descendants of the commands
    it runs are reparented here instead of to init, so a daemonised grandchild can be found."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError, ImportError):
        return False


# Fields of ``<proc>/<pid>/stat`` counted after the state (field 0): 1 ppid, 2 pgrp, 3 session.
STAT_PPID = 1
STAT_PGRP = 2
STAT_SESSION = 3
# A stat line is a few hundred bytes (comm is at most 64); a bigger file is not procfs.
STAT_LIMIT = 8192


def live_processes(field, value, proc="/proc"):
    """Sorted pids of live processes whose ``<proc>/<pid>/stat`` field ``field`` (counted after
    the state: :data:`STAT_PPID`, :data:`STAT_PGRP`, :data:`STAT_SESSION`) equals ``value``.

    Zombie (``Z``) and dead (``X``/``x``) processes are skipped. Only directories named by ASCII
    digits are read; each stat file is read through :func:`read_bytes` (bounded, non-blocking,
    regular files only), so a FIFO or an oversized file is skipped rather than read. The command
    name may hold spaces and parentheses: the fields are taken after the last ``)``. Reads only:
    it never runs a command, so :func:`run_command`'s reaper can call it.
    """
    out = []
    try:
        names = os.listdir(proc)
    except OSError:
        return out
    for name in names:
        if not is_ascii_digits(name):
            continue
        try:
            data = read_bytes(os.path.join(proc, name, "stat"), limit=STAT_LIMIT)
        except (UnsafeInput, IOError, OSError):
            continue  # gone meanwhile, unreadable, or not a procfs stat file
        # "pid (comm) state ppid pgrp session ...": comm may hold spaces and parentheses.
        close = data.rfind(b")")
        if close < 0:
            continue
        fields = data[close + 1:].split()
        try:
            if fields[0] not in (b"Z", b"X", b"x") and int(fields[field]) == value:
                out.append(int(name))
        except (IndexError, ValueError):
            continue
    return sorted(out)


def _children_of(ppid, proc="/proc"):
    return live_processes(STAT_PPID, ppid, proc)


def _reap_orphans(known):
    """Kill and reap processes reparented to us (daemonised descendants) other than ``known``."""
    me = os.getpid()
    for _attempt in range(50):
        strays = [p for p in _children_of(me) if p not in known]
        if not strays:
            break
        for pid in strays:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for pid in strays:
            try:
                os.waitpid(pid, 0)
            except OSError:
                pass
    # Zombies of strays that exited on their own.
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except OSError:
            break
        if pid == 0:
            break


class CommandResult(object):
    """A finished command: ``rc`` (None when it was cut off at its deadline; negative: killed
    by that signal), ``stdout``/``stderr`` bytes, ``elapsed`` seconds. With ``keep`` set,
    ``truncated`` says stdout was cut to its bound and ``dropped`` how many bytes of it were
    not kept (keep="head": at least that many, the command was stopped)."""

    __slots__ = ("argv", "rc", "stdout", "stderr", "elapsed", "truncated", "dropped")

    def __init__(self, argv, rc, stdout, stderr, elapsed, truncated=False, dropped=0):
        self.argv = argv
        self.rc = rc
        self.stdout = stdout
        self.stderr = stderr
        self.elapsed = elapsed
        self.truncated = truncated
        self.dropped = dropped

    def text(self, which="stdout"):
        return getattr(self, which).decode("utf-8", "replace")


KEEP_MODES = (None, "head", "tail")


def run_command(argv, timeout, limit=DEFAULT_LIMIT, env=None, grace=2.0, keep=None):
    """Run ``argv`` (a list; no shell) with stdin from /dev/null, at most ``timeout`` seconds and
    ``limit`` bytes of stdout and of stderr each.

    Returns a :class:`CommandResult`. Raises :class:`CommandTimeout` when the deadline passes
    (the process group and daemonised descendants are killed first), :class:`UnsafeInput` when
    the output exceeds ``limit``, and ``OSError`` when the command cannot be started. A process
    in uninterruptible sleep that ignores SIGKILL is waited for at most ``grace`` seconds more,
    then abandoned: the caller never blocks past ``timeout + grace``.

    ``keep`` is for logs, where the newest records matter and the output may be larger than
    any bound: output past ``limit`` is then kept in part and said, never an error.
    ``keep="head"`` (a command that prints the newest first, ``journalctl -r``): once stdout
    passes ``limit`` the command is stopped (killed) and its first ``limit`` bytes up to the last
    whole line are kept. ``keep="tail"`` (newest last, ``dmesg``): the command runs to its end
    (or the deadline), all output is read and the last ``limit`` bytes from the first whole
    line on are kept. Either way the result says ``truncated`` and ``dropped``, and a
    :class:`CommandTimeout` carries what was printed before the deadline in ``result``. stderr is
    kept the same way (its bound only ever cuts it).
    """
    if not isinstance(argv, (list, tuple)) or not argv:
        raise UnsafeInput("command must be a non-empty list, got %r" % (argv,))
    if keep not in KEEP_MODES:
        raise UnsafeInput("keep must be one of None, 'head', 'tail', got %r" % (keep,))
    timeout = check_timeout(timeout)
    subreaper = _become_subreaper()
    known = set(_children_of(os.getpid())) if subreaper else set()
    start = time.monotonic()
    proc = subprocess.Popen([str(a) for a in argv], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                            close_fds=True, start_new_session=True)
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    kept = {out_fd: _Kept(keep, limit), err_fd: _Kept(keep, limit)}
    open_fds = list(kept)
    problem = None
    deadline = start + timeout
    try:
        while open_fds:
            left = deadline - time.monotonic()
            if left <= 0:
                problem = "timeout"
                break
            ready = select.select(open_fds, [], [], left)[0]
            for fd in ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    open_fds.remove(fd)
                    continue
                kept[fd].add(chunk)
                if kept[fd].overflow:
                    problem = "overflow"
            if keep == "head" and kept[out_fd].dropped:
                problem = "full"  # the newest records are in; the rest is not read
            if problem:
                break
        if not problem:
            left = max(0.0, deadline - time.monotonic())
            try:
                proc.wait(timeout=left)
            except subprocess.TimeoutExpired:
                problem = "timeout"
    finally:
        if problem or proc.returncode is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
        proc.stdout.close()
        proc.stderr.close()
        if subreaper:
            # Whatever the command left behind (a daemon it forked off) does not outlive it.
            known.add(proc.pid)
            _reap_orphans(known)
    elapsed = time.monotonic() - start
    if problem == "overflow":
        raise UnsafeInput("%s printed more than %d bytes; it was killed" % (argv[0], limit))
    timed_out = problem == "timeout"
    stdout = kept[out_fd].data(stopped=timed_out and keep is not None)
    stderr = kept[err_fd].data(stopped=timed_out and keep is not None)
    result = CommandResult(list(argv), None if timed_out else proc.returncode, stdout, stderr,
                           elapsed, truncated=timed_out or bool(kept[out_fd].dropped),
                           dropped=kept[out_fd].dropped)
    if timed_out:
        raise CommandTimeout("%s did not finish within %gs; it was killed" % (argv[0], timeout),
                             result if keep is not None else None)
    return result


__all__ = ["UnsafeInput", "TooLarge", "CommandTimeout", "CommandResult", "read_bytes", "read_text",
           "read_tail", "TailRead", "try_read_text", "check_timeout", "check_unit_name", "check_package_name",
           "check_path", "run_command", "DEFAULT_LIMIT", "live_processes", "STAT_PPID",
           "STAT_PGRP", "STAT_SESSION"]
