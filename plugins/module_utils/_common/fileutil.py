# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one way the collection writes, backs up and removes a file (node side, Python 3.8+; the
controller's report writer uses it too). Standard library only: the checkpoint_guard role also
installs this file on its own beside checkpoint.py.

Safe by construction: every operation goes through :class:`NodeFile`, which opens the path
from ``/`` one component at a time with directory descriptors (``O_NOFOLLOW``, ``dir_fd``) and
works only inside the directory descriptor it holds at the end. Another user cannot choose or
swap what is written, backed up or removed, because:

* every directory on the path is owned by a trusted uid (root, and the effective uid when that
  is not root: the controller's report writer run by a normal user) and is not writable by
  group or others. A root-owned sticky directory (``/tmp``, mode 1777) is accepted on the path
  (others cannot rename or remove root's entries in it) but never as the directory written in;
* a symlink on the path, the target's included, is followed only when a trusted uid owns it
  (the directory holding it is checked already); its target is resolved from the directory it
  is in, ``..`` steps back to the real parent, at most :data:`MAX_SYMLINKS` links;
* a symlinked target file keeps its link: the link's target is written, atomically, in the
  target's own directory (which must pass the same checks). The link is never replaced by a
  regular file;
* the target itself is a regular file owned by a trusted uid and not writable by group or
  others, or does not exist yet; anything else (a FIFO, a device, a directory, a symlink owned by
  another uid) is refused;
* the temp file is created with ``O_CREAT|O_EXCL|O_NOFOLLOW`` and mode 0600 in the held
  directory, its mode and owner are set on its descriptor (``fchmod``/``fchown``: the existing
  file's, or 0644 and the writer's for a new file), it is fsynced and renamed over the target
  within the held directory, and the directory is fsynced. On any failure the temp file is
  unlinked in the held directory and :class:`FileOpError` names the file and the reason; the
  file keeps its previous content.

Nothing is lost: :func:`write_file` copies an existing file byte for byte to a new 0600
``<name>.<timestamp>.<ns>.bak`` beside it first (``O_EXCL``), and :func:`remove_file` removes
a file only while it still holds the bytes the caller analysed, after the same backup.

Check mode and diff stay with the callers: nothing here is called in check mode.
:func:`unsafe_target` runs the same walk without changing anything, for modules that want to
fail early (in check mode too) with the same reasons. :func:`private_tempdir` gives a private
0700 scratch directory for files a command must read (never a node path).

tests/unit/plugins/module_utils/_common/test_write_primitive_structure.py fails when code under
plugins/ writes, chmods, chowns, renames or removes a file any other way.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import binascii
import contextlib
import errno
import fcntl
import os
import shutil
import stat
import tempfile
import time

MAX_SYMLINKS = 40
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | os.O_NOFOLLOW | _CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | _CLOEXEC | getattr(os, "O_NOCTTY", 0)
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC
_CHUNK = 1 << 20


class FileOpError(OSError):
    """A backup, write or removal that failed or was refused; ``str()`` says what failed, on which
    file, and why.

    ``filename`` is the file the operation failed on (the target, or the backup)."""

    reason = None   # set when the walk refused the path: the reason without "refusing to ... <path>: "

    def __str__(self):
        return self.strerror or OSError.__str__(self)


def _refusal(err, message, filename, reason):
    e = FileOpError(err, message, filename)
    e.reason = reason
    return e


class ContentChanged(FileOpError):
    """:func:`remove_file`: the file no longer holds the bytes it was to remove (``gone``: it
    disappeared); it was left in place. ``backup`` names a backup made meanwhile, else None."""

    def __init__(self, err, message, filename, backup=None, gone=False):
        FileOpError.__init__(self, err, message, filename)
        self.backup = backup
        self.gone = gone


class _Refused(Exception):
    """The walk refuses the path: ``reason`` is a sentence naming the part that is unsafe."""

    def __init__(self, err, reason):
        Exception.__init__(self, reason)
        self.errno = err
        self.reason = reason


def _why(e):
    return e.strerror or str(e)


def _trusted():
    return (0, os.geteuid())


def _trusted_words():
    euid = os.geteuid()
    return "root" if euid == 0 else "root or uid %d (the user running this)" % euid


def _who_writes(mode):
    if mode & 0o022 == 0o022:
        return "group and others"
    return "others" if mode & 0o002 else "group"


def _owner_mode_problem(st, what, sticky_ok=False):
    """Why ``st`` (a directory or file, called ``what``) is not trusted; None when it is."""
    if st.st_uid not in _trusted():
        return "%s is owned by uid %d, not %s" % (what, st.st_uid, _trusted_words())
    if st.st_mode & 0o022 and not (sticky_ok and st.st_uid == 0 and st.st_mode & stat.S_ISVTX) \
            and not _own_group_only(st):
        return "%s is writable by %s (mode %04o)" % (what, _who_writes(st.st_mode), stat.S_IMODE(st.st_mode))
    return None


def _own_group_only(st):
    """A controller user (never root) may write where only a group it belongs to can write too:
    umask 002 checkouts, and execution-environment pods (OpenShift runs them with an arbitrary uid
    in group 0 and group-writable directories). Nobody outside the user's own groups can swap
    what it writes. Root on a node never relaxes: a group-writable directory there lets another
    account choose what root writes."""
    if os.geteuid() == 0 or st.st_mode & 0o002:
        return False
    return st.st_gid == os.getegid() or st.st_gid in os.getgroups()


def file_kind(mode):
    """What a file that is not a regular file is, in words (``a FIFO``, ``a directory``...)."""
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return "a special file"


def _components(text):
    return [c for c in text.split("/") if c and c != "."]


def _names_a_directory(text):
    """True when the path ``text`` ends in ``/``, ``.`` or ``..`` (it names a directory)."""
    return text.rsplit("/", 1)[-1] in ("", ".", "..")


def _close(fd):
    try:
        os.close(fd)
    except OSError:
        pass


class _Chain(object):
    """Descriptors of the real directories from ``/`` down to the current one, each checked."""

    def __init__(self):
        self.fds = []
        self.names = []

    def display(self, extra=None):
        return "/" + "/".join(self.names + ([extra] if extra else []))

    def root(self):
        self.close()
        fd = os.open("/", _DIR_FLAGS)
        self.fds.append(fd)
        problem = _owner_mode_problem(os.fstat(fd), "the directory / on its path", sticky_ok=True)
        if problem:
            raise _Refused(errno.EPERM, problem)

    def up(self):
        if len(self.fds) > 1:
            _close(self.fds.pop())
            self.names.pop()

    def down(self, name, what):
        """Open the directory ``name`` in the current one; ``what`` names it in a refusal."""
        path = self.display(name)
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=self.fds[-1])
        except OSError as e:
            raise _Refused(e.errno, "the directory %s cannot be opened: %s" % (path, _why(e)))
        self.fds.append(fd)
        self.names.append(name)
        problem = _owner_mode_problem(os.fstat(fd), what % path, sticky_ok=True)
        if problem:
            raise _Refused(errno.EPERM, problem)

    def close(self):
        while self.fds:
            _close(self.fds.pop())
        self.names = []


def _lstat_in(dfd, name):
    try:
        return os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except OSError as e:
        if e.errno == errno.ENOENT:
            return None
        raise


def _walk(path, want_file=True, create_mode=None):
    """Open the directories of ``path`` (see the module's docstring).

    Returns ``(chain, name, lst, link)``: the chain holds the directory the file is in,
    ``name`` is the file's name in it and ``lst`` its lstat (None when missing; a symlink only
    when a non-trusted uid owns it), ``link`` the first symlink followed as the file itself
    (where it is), else None. Without
    ``want_file`` the whole path is a directory (created with ``create_mode`` where missing) and
    ``name``/``lst`` are None. Raises :class:`_Refused`.
    """
    if not isinstance(path, str) or not path or "\0" in path:
        raise _Refused(errno.EINVAL, "%r is not a path" % (path,))
    full = path if path.startswith("/") else os.getcwd() + "/" + path
    if want_file and _names_a_directory(full):
        raise _Refused(errno.EISDIR, "%s names a directory, not a file" % path)
    chain = _Chain()
    try:
        chain.root()
        queue = list(reversed(_components(full)))
        hops = 0
        link = None
        name = lst = None
        while queue:
            comp = queue.pop()
            if comp == "..":
                chain.up()
                continue
            last = not queue
            try:
                cur = _lstat_in(chain.fds[-1], comp)
            except OSError as e:
                raise _Refused(e.errno, "%s cannot be examined: %s" % (chain.display(comp), _why(e)))
            if cur is not None and stat.S_ISLNK(cur.st_mode) and cur.st_uid in _trusted():
                hops += 1
                if hops > MAX_SYMLINKS:
                    raise _Refused(errno.ELOOP, "%s: more than %d symlinks on its path (a symlink loop)"
                                   % (path, MAX_SYMLINKS))
                try:
                    target = os.readlink(comp, dir_fd=chain.fds[-1])
                except OSError as e:
                    raise _Refused(e.errno, "the symlink %s cannot be read: %s" % (chain.display(comp), _why(e)))
                if not target or (last and want_file and _names_a_directory(target)):
                    raise _Refused(errno.EISDIR, "%s leads to %r, not a file" % (chain.display(comp), target))
                if last and want_file and link is None:
                    link = chain.display(comp)
                if target.startswith("/"):
                    chain.root()
                queue.extend(reversed(_components(target)))
                continue
            if last and want_file:
                name, lst = comp, cur
                break
            if cur is not None and stat.S_ISLNK(cur.st_mode):
                raise _Refused(errno.EPERM, "%s, a symlink on its path, is owned by uid %d, not %s"
                               % (chain.display(comp), cur.st_uid, _trusted_words()))
            if cur is None:
                if create_mode is None:
                    raise _Refused(errno.ENOENT, "the directory %s does not exist" % chain.display(comp))
                try:
                    os.mkdir(comp, create_mode, dir_fd=chain.fds[-1])
                except OSError as e:
                    if e.errno != errno.EEXIST:
                        raise _Refused(e.errno, "cannot create the directory %s: %s" % (chain.display(comp), _why(e)))
                queue.append(comp)      # examine what is there now, as any other component
                continue
            if not stat.S_ISDIR(cur.st_mode):
                raise _Refused(errno.ENOTDIR, "%s, on its path, is not a directory" % chain.display(comp))
            immediate = (len(queue) == 1 and want_file) or (not queue and not want_file)
            chain.down(comp, ("its directory %s" if want_file else "%s") if immediate
                       else "the directory %s on its path")
        held = chain.display()
        problem = _owner_mode_problem(os.fstat(chain.fds[-1]), ("its directory %s" if want_file else "%s") % held)
        if problem:
            raise _Refused(errno.EPERM, problem)
        return chain, name, lst, link
    except BaseException:
        chain.close()
        raise


def backup_path(path, now=None):
    """``<path>.<YYYYmmddTHHMMSS>.<ns>.bak`` beside the file; unique per call."""
    now = time.time() if now is None else now
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now))
    return "%s.%s.%09d.bak" % (path, stamp, int((now % 1) * 1e9))


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


_TAILS = {"write": "; the file keeps its previous content", "remove": "; the file was left in place"}


class NodeFile(object):
    """One file, reached safely (see the module's docstring), with the directory it is in held
    open. Use it as a context manager; the functions below are one-call shorthands.

    ``path`` is the caller's path (messages name it), ``real_path`` the file the operations act
    on (a symlinked target's target), ``directory`` the held directory. Raises
    :class:`FileOpError` when the path cannot be used at all (a directory on it is unsafe or
    missing). ``problem`` says why the file itself must not be touched (it is not a regular file,
    or another uid owns or can write it), else None; every operation refuses then.
    """

    def __init__(self, path, action="write"):
        self.path = path
        tail = _TAILS.get(action, "")
        try:
            self._chain, self.name, self.st, self.link = _walk(path)
        except _Refused as e:
            raise _refusal(e.errno, "refusing to %s %s: %s%s" % (action, path, e.reason, tail), path, e.reason)
        except OSError as e:
            raise _refusal(e.errno, "cannot %s %s: %s%s" % (action, path, _why(e), tail), path, _why(e))
        self.dfd = self._chain.fds[-1]
        self.directory = self._chain.display()
        self.real_path = self._chain.display(self.name)
        what = "%s, the target of %s," % (self.real_path, path) if self.link else path
        self.problem = self.detail = None
        st = self.st
        if st is None:
            return
        if stat.S_ISLNK(st.st_mode):
            self.detail = "a symlink owned by uid %d, not %s" % (st.st_uid, _trusted_words())
        elif not stat.S_ISREG(st.st_mode):
            self.detail = "%s, not a regular file" % file_kind(st.st_mode)
        else:
            problem = _owner_mode_problem(st, what)
            if problem:
                self.problem = problem
                self.detail = problem[len(what) + len(" is "):]
                return
        if self.detail:
            self.problem = "%s is %s" % (what, self.detail)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self._chain.close()
        self.dfd = None

    @property
    def exists(self):
        return self.st is not None

    def link_problem(self):
        """Why the file is not removed through its symlink (None without one): removing the
        link's target would leave a dangling link, removing the link would not remove the file."""
        if not self.link:
            return None
        return ("%s is a symlink (to %s): a file is not removed through a symlink; remove the link or "
                "its target by hand" % (self.link, self.real_path))

    def _refuse(self, action, tail):
        raise FileOpError(errno.EPERM, "refusing to %s %s: %s; %s" % (action, self.path, self.problem, tail),
                          self.path)

    def _unlink_quietly(self, name, dfd=None):
        try:
            os.unlink(name, dir_fd=self.dfd if dfd is None else dfd)
        except OSError:
            pass

    def _fsync_dir(self):
        try:
            os.fsync(self.dfd)
        except OSError:
            pass

    def _open_source(self):
        """A read descriptor on the examined file, with its fstat (the same inode)."""
        fd = os.open(self.name, _READ_FLAGS, dir_fd=self.dfd)
        try:
            fst = os.fstat(fd)
            if not stat.S_ISREG(fst.st_mode):
                raise OSError(errno.EINVAL, "not a regular file")
            if (fst.st_dev, fst.st_ino) != (self.st.st_dev, self.st.st_ino):
                raise OSError(errno.EAGAIN, "replaced while it was being examined")
        except BaseException:
            _close(fd)
            raise
        return fd, fst

    def lock(self, wait=True):
        """An exclusive ``flock(2)`` on this file, created empty (0600) in the held directory when
        it is missing; returns the open descriptor, whose close releases the lock. The file's
        content is never read or written: it only names the lock. ``wait`` False: raise
        ``BlockingIOError`` at once when another open file holds it."""
        if self.problem:
            self._refuse("lock", "nothing was locked")
        fd = os.open(self.name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600,
                     dir_fd=self.dfd)
        try:
            fst = os.fstat(fd)
            what = self.real_path
            problem = (file_kind(fst.st_mode) + ", not a regular file") if not stat.S_ISREG(fst.st_mode) \
                else _owner_mode_problem(fst, what)
            if problem:
                raise _refusal(errno.EPERM, "refusing to lock %s: %s" % (self.path, problem), self.path, problem)
            fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BaseException:
            _close(fd)
            raise
        return fd

    def read(self, limit=None):
        """The file's bytes (at most ``limit`` + 1 with ``limit``); None when it does not exist."""
        if self.st is None:
            return None
        if self.problem:
            self._refuse("read", "nothing was read")
        fd, _fst = self._open_source()
        try:
            return read_fd(fd, limit)
        finally:
            _close(fd)

    def backup(self, dest=None):
        """Copy the file byte for byte to a new 0600 file (``dest``, else :func:`backup_path`
        beside it); return the backup's path. Nothing is left behind on failure."""
        if self.st is None:
            raise FileOpError(errno.ENOENT, "cannot read %s to back it up: %s" % (self.path, os.strerror(errno.ENOENT)),
                              self.path)
        if self.problem:
            raise FileOpError(errno.EPERM, "cannot read %s to back it up: %s" % (self.path, self.detail), self.path)
        try:
            src, _fst = self._open_source()
        except OSError as e:
            raise FileOpError(e.errno, "cannot read %s to back it up: %s" % (self.path, _why(e)), self.path)
        try:
            return self._copy_to_backup(src, dest)[0]
        finally:
            _close(src)

    def _copy_to_backup(self, src, dest, expected=None):
        """Copy from the descriptor ``src``; returns ``(backup path, whether the bytes copied are
        ``expected``)`` (True without ``expected``)."""
        target = None
        if dest is None:
            dfd, name = self.dfd, os.path.basename(backup_path(self.real_path))
            shown = self._chain.display(name)
        else:
            try:
                target = NodeFile(dest, action="back up %s to" % self.path)
            except FileOpError as e:
                raise FileOpError(e.errno, "cannot back up %s to %s: %s; no backup was left behind"
                                  % (self.path, dest, e.reason), dest)
            dfd, name, shown = target.dfd, target.name, dest
        fd = None
        created = False
        copied = 0
        same = True
        try:
            fd = os.open(name, _CREATE_FLAGS, 0o600, dir_fd=dfd)
            created = True
            os.fchmod(fd, 0o600)
            while True:
                chunk = os.read(src, _CHUNK)
                if not chunk:
                    break
                if expected is not None and same:
                    same = expected[copied:copied + len(chunk)] == chunk
                copied += len(chunk)
                _write_all(fd, chunk)
            os.fsync(fd)
            fd, closing = None, fd
            os.close(closing)
            try:
                os.fsync(dfd)
            except OSError:
                pass
        except OSError as e:
            if fd is not None:
                _close(fd)
            if created:
                self._unlink_quietly(name, dfd)
            raise FileOpError(e.errno, "cannot back up %s to %s: %s%s" % (
                self.path, shown, _why(e), "; no backup was left behind" if created else ""), shown)
        finally:
            if target is not None:
                target.close()
        return shown, same and (expected is None or copied == len(expected))

    def write(self, data, mode=None):
        """Replace the file's content with ``data`` (bytes, or str as UTF-8), atomically.

        ``mode`` defaults to the existing file's mode (its owner and group are kept too), else
        0644. No backup (see :meth:`backup`, :func:`write_file`)."""
        if isinstance(data, str):
            data = data.encode("utf-8")
        if self.problem:
            self._refuse("write", "the file keeps its previous content")
        tmp = fd = None
        try:
            tmp, fd = self._create_temp()
            _write_all(fd, data)
            if self.st is not None:
                fst = os.fstat(fd)
                if (fst.st_uid, fst.st_gid) != (self.st.st_uid, self.st.st_gid):
                    try:
                        os.fchown(fd, self.st.st_uid, self.st.st_gid)
                    except OSError:
                        if os.geteuid() == 0:
                            raise   # root can always keep the owner; anyone else keeps their own
                if mode is None:
                    mode = stat.S_IMODE(self.st.st_mode)
            os.fchmod(fd, 0o644 if mode is None else mode)    # after fchown, which clears set-id bits
            os.fsync(fd)
            fd, closing = None, fd
            os.close(closing)
            os.rename(tmp, self.name, src_dir_fd=self.dfd, dst_dir_fd=self.dfd)
        except BaseException as e:
            if fd is not None:
                _close(fd)
            if tmp is not None:
                self._unlink_quietly(tmp)
            if isinstance(e, OSError):
                raise FileOpError(e.errno, "cannot write %s: %s; the file keeps its previous content"
                                  % (self.path, _why(e)), self.path)
            raise
        self._fsync_dir()
        try:
            self.st = os.stat(self.name, dir_fd=self.dfd, follow_symlinks=False)
        except OSError:
            self.st = None

    def save(self, data, mode=None, backup=True):
        """:meth:`backup` (when ``backup`` and the file exists), then :meth:`write`; returns the
        backup's path or None. When the write fails the file keeps its content and the backup
        just made, equal to it, is removed."""
        if self.problem:
            self._refuse("write", "the file keeps its previous content")
        dest = self.backup() if backup and self.exists else None
        try:
            self.write(data, mode)
        except BaseException:
            if dest:
                self._unlink_quietly(os.path.basename(dest))
            raise
        return dest

    def _create_temp(self):
        prefix = "." + self.name[:200] + "."
        for _attempt in range(100):
            tmp = prefix + binascii.hexlify(os.urandom(6)).decode("ascii") + ".tmp"
            try:
                return tmp, os.open(tmp, _CREATE_FLAGS, 0o600, dir_fd=self.dfd)
            except OSError as e:
                if e.errno != errno.EEXIST:
                    raise
        raise OSError(errno.EEXIST, "cannot find a free temp file name in %s" % self.directory)

    def remove(self, expected=None, backup=True):
        """Remove the file, only while it holds ``expected`` (bytes; None: any content), after a
        0600 backup of exactly those bytes (``backup``). Returns the backup's path or None.

        :class:`ContentChanged` (the file left in place) when the file holds other bytes, is
        replaced or changes before the removal; a backup made meanwhile is kept and named."""
        if self.st is None:
            raise ContentChanged(errno.ENOENT, "cannot remove %s: it does not exist" % self.path, self.path, gone=True)
        if self.problem or self.link:
            self.problem = self.problem or self.link_problem()
            self._refuse("remove", "the file was left in place")
        try:
            src, fst = self._open_source()
        except OSError as e:
            raise FileOpError(e.errno, "cannot remove %s: %s; the file was left in place" % (self.path, _why(e)),
                              self.path)
        dest = None
        try:
            if expected is not None:
                data = read_fd(src, len(expected))
                if data != expected:
                    raise ContentChanged(errno.EAGAIN, "%s changed since it was read; left in place" % self.path,
                                         self.path)
                os.lseek(src, 0, os.SEEK_SET)
            if backup:
                dest, same = self._copy_to_backup(src, None, expected)
                if not same:
                    raise ContentChanged(errno.EAGAIN, "%s changed while it was being backed up; left in place, "
                                         "backup of the new content kept at %s" % (self.path, dest), self.path,
                                         backup=dest)
            now = _lstat_in(self.dfd, self.name)
            if now is None or not _same_file(now, fst) or not _same_file(os.fstat(src), fst):
                raise ContentChanged(errno.EAGAIN, "%s changed since it was read; left in place%s" % (
                    self.path, ", backup kept at %s" % dest if dest else ""), self.path, backup=dest,
                    gone=now is None)
            os.unlink(self.name, dir_fd=self.dfd)
        except ContentChanged:
            raise
        except OSError as e:
            raise FileOpError(e.errno, "cannot remove %s: %s; the file was left in place%s" % (
                self.path, _why(e), ", backup kept at %s" % dest if dest else ""), self.path)
        finally:
            _close(src)
        self.st = None
        self._fsync_dir()
        return dest


def _same_file(a, b):
    return (a.st_dev, a.st_ino, a.st_size, a.st_mtime_ns, a.st_ctime_ns) == \
        (b.st_dev, b.st_ino, b.st_size, b.st_mtime_ns, b.st_ctime_ns)


def read_fd(fd, limit=None):
    """What the open ``fd`` holds from its position, read to its end; with ``limit``, at most
    ``limit`` + 1 bytes, so that more than ``limit`` says the source is larger than the bound."""
    chunks = []
    total = 0
    while limit is None or total <= limit:
        chunk = os.read(fd, _CHUNK if limit is None else min(_CHUNK, limit + 1 - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


def write_file(path, data, mode=None, backup=True):
    """Write ``data`` to ``path`` atomically through :class:`NodeFile`, after a 0600 backup of
    an existing file (``backup``). Returns the backup's path, or None (no backup made)."""
    with NodeFile(path) as f:
        return f.save(data, mode, backup)


def atomic_write(path, data, mode=None):
    """:func:`write_file` without a backup: ``mode`` defaults to the existing file's, else 0644;
    owner and group of an existing file are kept; on failure the file keeps its content."""
    write_file(path, data, mode=mode, backup=False)


def backup_file(path, dest=None):
    """Copy ``path`` byte for byte to a new 0600 file (``O_EXCL``, never overwriting); return the
    backup's path. On failure nothing is left behind, the source is untouched, and
    :class:`FileOpError` names the step, the source and the backup."""
    try:
        f = NodeFile(path, action="back up")
    except FileOpError as e:
        raise _refusal(e.errno, "cannot back up %s: %s" % (path, e.reason), path, e.reason)
    with f:
        return f.backup(dest)


def remove_file(path, expected=None, backup=True):
    """Remove ``path`` through :class:`NodeFile` (see :meth:`NodeFile.remove`); returns the
    backup's path or None."""
    with NodeFile(path, action="remove") as f:
        return f.remove(expected, backup)


@contextlib.contextmanager
def lock_file(path):
    """Hold an exclusive lock named by the file ``path`` (created 0600 through the same walk when
    missing; see :meth:`NodeFile.lock`) for the ``with`` body."""
    with NodeFile(path, action="lock") as f:
        fd = f.lock()
    try:
        yield
    finally:
        _close(fd)


def make_dirs(path, mode=0o755):
    """Create the directory ``path`` and any missing parent (``mode``, less the umask) through
    the same walk; returns the real path. Raises :class:`FileOpError` when a directory on it is
    not trusted or cannot be created."""
    try:
        chain = _walk(path, want_file=False, create_mode=mode)[0]
    except _Refused as e:
        raise FileOpError(e.errno, "refusing to use the directory %s: %s" % (path, e.reason), path)
    except OSError as e:
        raise FileOpError(e.errno, "cannot use the directory %s: %s" % (path, _why(e)), path)
    try:
        return chain.display()
    finally:
        chain.close()


def unsafe_target(path, action="write"):
    """Why root must not rewrite or back up (``action`` "write") or remove (``action``
    "remove") ``path``, or None when it may.

    The same walk as every write (see the module's docstring), read only: a missing file is
    judged by its directories only. A symlinked file is written through its link, but not
    removed through it."""
    try:
        with NodeFile(path, action=action) as f:
            return f.problem or (f.link_problem() if action == "remove" else None)
    except FileOpError as e:
        return e.reason


class PrivateDir(object):
    """A new 0700 directory of this process (``tempfile.mkdtemp``) for scratch files a command
    reads; never a node path. Created and written through its own descriptor; :meth:`cleanup`
    removes it (``shutil.rmtree``, descriptor based: a symlink inside is removed, never
    followed)."""

    def __init__(self, prefix="kubegpu-"):
        self.path = tempfile.mkdtemp(prefix=prefix)
        try:
            self._fd = os.open(self.path, _DIR_FLAGS)
            st = os.fstat(self._fd)
            if st.st_uid != os.geteuid() or stat.S_IMODE(st.st_mode) & 0o077:
                raise OSError(errno.EPERM, "%s is not a private directory" % self.path)
        except BaseException:
            shutil.rmtree(self.path, ignore_errors=True)
            raise

    def _parent(self, relpath, create_last):
        """Descriptor of the directory holding the last component of ``relpath`` (created, 0700,
        where missing), and that component."""
        parts = relpath.split("/")
        if relpath.startswith("/") or any(p in ("", ".", "..") for p in parts):
            raise ValueError("%r is not a plain relative path" % relpath)
        dirs = parts if create_last else parts[:-1]
        fd = os.dup(self._fd)
        try:
            for part in dirs:
                try:
                    os.mkdir(part, 0o700, dir_fd=fd)
                except OSError as e:
                    if e.errno != errno.EEXIST:
                        raise
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = nxt
        except BaseException:
            _close(fd)
            raise
        return fd, parts[-1]

    def subdir(self, relpath):
        """Create ``relpath`` (and its parents) inside; return its path."""
        fd = self._parent(relpath, True)[0]
        os.close(fd)
        return os.path.join(self.path, relpath)

    def write(self, relpath, data):
        """Create the new file ``relpath`` (0600) inside with ``data``; return its path."""
        if isinstance(data, str):
            data = data.encode("utf-8")
        dfd, name = self._parent(relpath, False)
        try:
            fd = os.open(name, _CREATE_FLAGS, 0o600, dir_fd=dfd)
            try:
                _write_all(fd, data)
            finally:
                os.close(fd)
        finally:
            os.close(dfd)
        return os.path.join(self.path, relpath)

    def cleanup(self):
        if self._fd is not None:
            _close(self._fd)
            self._fd = None
        shutil.rmtree(self.path, ignore_errors=True)


@contextlib.contextmanager
def private_tempdir(prefix="kubegpu-"):
    """``with private_tempdir("x-") as d:`` a :class:`PrivateDir`, removed on exit."""
    d = PrivateDir(prefix)
    try:
        yield d
    finally:
        d.cleanup()
