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

import os
import tempfile
import time


def backup_path(path, now=None):
    """``<path>.<YYYYmmddTHHMMSS>.<ns>.bak`` beside the file; unique per call."""
    now = time.time() if now is None else now
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now))
    return "%s.%s.%09d.bak" % (path, stamp, int((now % 1) * 1e9))


def backup_file(path, dest=None):
    """Copy ``path`` byte for byte to a new 0600 file; return the backup's path.

    The backup is created with O_EXCL so an existing file is never overwritten.
    """
    dest = dest or backup_path(path)
    with open(path, "rb") as src:
        data = src.read()
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(fd, 0o600)
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        os.fsync(fd)
    finally:
        os.close(fd)
    return dest


def atomic_write(path, data, mode=None):
    """Write ``data`` (bytes or str) to ``path`` atomically.

    ``mode`` defaults to the existing file's mode, else 0644. Ownership of an existing file is
    kept.
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
    fd, tmp = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), dir=directory)
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
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass
