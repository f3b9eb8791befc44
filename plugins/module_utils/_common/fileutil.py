# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Safe file operations for node files (node side, Python 3.8+).

Nothing is lost: every rewrite or removal of a node file is preceded by a byte-for-byte backup
with mode 0600, and every write goes to a temp file in the same directory that is fsynced and
renamed over the target.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import os
import stat
import tempfile
import time


class FileOpError(OSError):
    """A backup or write that failed; ``str()`` says what failed, on which file, and why.

    ``filename`` is the file the operation failed on (the backup, or the temp file)."""

    def __str__(self):
        return self.strerror or OSError.__str__(self)


def _why(e):
    return e.strerror or str(e)


def backup_path(path, now=None):
    """``<path>.<YYYYmmddTHHMMSS>.<ns>.bak`` beside the file; unique per call."""
    now = time.time() if now is None else now
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now))
    return "%s.%s.%09d.bak" % (path, stamp, int((now % 1) * 1e9))


def _unlink_quietly(path):
    try:
        os.unlink(path)
    except OSError:
        pass


def _read_regular(path):
    """The bytes of the regular file ``path``; never blocks on a FIFO swapped in."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def backup_file(path, dest=None):
    """Copy ``path`` byte for byte to a new 0600 file; return the backup's path.

    The backup is created with O_EXCL so an existing file is never overwritten. When anything
    fails (the disk is full, the directory is read-only) the partial backup is removed and
    :class:`FileOpError` says which step failed on which file, naming both the source and the
    backup: nothing is left behind and the source is untouched.
    """
    dest = dest or backup_path(path)
    try:
        data = _read_regular(path)
    except OSError as e:
        raise FileOpError(e.errno, "cannot read %s to back it up: %s" % (path, _why(e)), path)
    fd = None
    created = False
    try:
        fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        created = True
        os.fchmod(fd, 0o600)
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        os.fsync(fd)
        fd, closing = None, fd
        os.close(closing)
    except OSError as e:
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass
        if created:
            _unlink_quietly(dest)
        raise FileOpError(e.errno, "cannot back up %s to %s: %s%s" % (
            path, dest, _why(e), "; no backup was left behind" if created else ""), dest)
    return dest


def atomic_write(path, data, mode=None):
    """Write ``data`` (bytes or str) to ``path`` atomically.

    ``mode`` defaults to the existing file's mode, else 0644. Ownership of an existing file is
    kept. On any failure (disk full...) the temp file is removed, ``path`` keeps its old
    content, and :class:`FileOpError` names ``path`` and the reason.
    """
    if isinstance(data, str):
        data = data.encode("utf-8")
    directory = os.path.dirname(os.path.abspath(path)) or "."
    st = None
    try:
        st = os.stat(path)
    except OSError:
        pass
    if mode is None:
        mode = (st.st_mode & 0o7777) if st else 0o644
    try:
        fd, tmp = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), dir=directory)
    except OSError as e:
        raise FileOpError(e.errno, "cannot write %s: cannot create a temp file in %s: %s"
                          % (path, directory, _why(e)), directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        if st is not None:
            try:
                os.chown(tmp, st.st_uid, st.st_gid)
            except OSError:
                pass
        os.rename(tmp, path)
    except BaseException as e:
        _unlink_quietly(tmp)
        if isinstance(e, OSError):
            raise FileOpError(e.errno, "cannot write %s: %s; the file keeps its previous "
                                       "content" % (path, _why(e)), path)
        raise
    try:
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


def _unsafe_owner_mode(st, what):
    if st.st_uid != 0:
        return "%s is owned by uid %d, not root" % (what, st.st_uid)
    if st.st_mode & 0o022:
        return "%s is writable by %s (mode %04o)" % (
            what, "group and others" if st.st_mode & 0o022 == 0o022 else
            ("others" if st.st_mode & 0o002 else "group"), stat.S_IMODE(st.st_mode))
    return None


def unsafe_target(path):
    """Why root must not rewrite, back up or remove ``path``, or None when it may.

    A node file root rewrites must be root's alone: the file (and a symlink leading to it)
    owned by root and not writable by group or others, and so must be the directory the
    rewrite happens in (the temp file and the rename), and the directory the link resolves
    to. Otherwise another user chose, or can swap, what root writes. A missing file is
    judged by its directory only.
    """
    abspath = os.path.abspath(path)
    try:
        lst = os.lstat(abspath)
    except OSError as e:
        if e.errno != errno.ENOENT:
            return "%s cannot be examined: %s" % (path, _why(e))
        lst = None
    if lst is not None:
        if stat.S_ISLNK(lst.st_mode) and lst.st_uid != 0:
            return "%s is a symlink owned by uid %d, not root" % (path, lst.st_uid)
        try:
            st = os.stat(abspath)
        except OSError as e:
            return "%s cannot be examined: %s" % (path, _why(e))
        if not stat.S_ISREG(st.st_mode):
            return "%s is not a regular file" % path
        problem = _unsafe_owner_mode(st, path)
        if problem:
            return problem
    dirs = [os.path.dirname(abspath)]
    real_dir = os.path.dirname(os.path.realpath(abspath))
    if real_dir not in dirs:
        dirs.append(real_dir)
    for directory in dirs:
        try:
            dst = os.stat(directory)
        except OSError as e:
            return "its directory %s cannot be examined: %s" % (directory, _why(e))
        problem = _unsafe_owner_mode(dst, "its directory %s" % directory)
        if problem:
            return problem
    return None
