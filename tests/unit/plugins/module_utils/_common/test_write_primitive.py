# -*- coding: utf-8 -*-
"""The one write primitive (plugins/module_utils/_common/fileutil.py) on real files in tmp_path.

Ownership by another user is made with os.chown to uid 65534 (nobody), so these tests need root
(as they run here and in CI). tmp_path lies under /tmp (root's, sticky 1777) and root's 0700
pytest directories, which is the "sticky ancestor" case every test goes through.
"""
import errno
import hashlib
import os
import stat
import subprocess

import pytest

from ansible_collections.kubegpu.fleet.plugins.module_utils._common import fileutil
from ansible_collections.kubegpu.fleet.tests.lib.procs import python_for_uid

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="making files another uid owns (os.chown) needs root")

NOBODY = 65534


def _nobody_python():
    """The interpreter uid 65534 can run (the pinned core's, else the system's); skip without one."""
    python = python_for_uid(NOBODY)
    if python is None:
        pytest.skip("no Python interpreter that uid %d can start (setpriv)" % NOBODY)
    return python


def sha(path):
    with open(str(path), "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def snapshot(path):
    """What must not change: lstat's type, mode, owner, inode, and the content's sha256."""
    st = os.lstat(str(path))
    return (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, st.st_ino, sha(path))


@pytest.fixture
def etc(tmp_path):
    """tmp_path/etc (root's, 0755) holding config.toml (root's, 0644)."""
    d = tmp_path / "etc"
    d.mkdir()
    os.chmod(str(d), 0o755)
    f = d / "config.toml"
    f.write_bytes(b"old = 1\n")
    os.chmod(str(f), 0o644)
    return d


def refused(call, *words):
    """Run ``call``; it must raise FileOpError whose message holds every one of ``words``."""
    with pytest.raises(fileutil.FileOpError) as e:
        call()
    for w in words:
        assert w in str(e.value), (w, str(e.value))
    return str(e.value)


def test_tmp_path_is_under_a_root_sticky_directory(tmp_path):
    sticky = [p for p in [str(tmp_path)] + [str(x) for x in tmp_path.parents]
              if os.stat(p).st_mode & stat.S_ISVTX]
    assert sticky, "tmp_path should lie under /tmp (1777): every test here relies on it"
    assert all(os.stat(p).st_uid == 0 for p in sticky)


def test_write_backup_and_result(etc):
    f = etc / "config.toml"
    os.chown(str(f), 0, NOBODY)      # root's file, group nobody: not group-writable, so fine
    os.chmod(str(f), 0o640)
    inode = os.stat(str(f)).st_ino
    bak = fileutil.write_file(str(f), "new = 2\n")
    assert f.read_bytes() == b"new = 2\n"
    st = os.stat(str(f))
    assert st.st_ino != inode                               # renamed over, not rewritten in place
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, NOBODY, 0o640)   # fchown/fchmod
    assert os.path.dirname(bak) == str(etc) and os.path.basename(bak).startswith("config.toml.")
    bst = os.stat(bak)
    assert stat.S_IMODE(bst.st_mode) == 0o600 and bst.st_uid == 0
    with open(bak, "rb") as b:
        assert b.read() == b"old = 1\n"
    assert sorted(os.listdir(str(etc))) == sorted(["config.toml", os.path.basename(bak)])


def test_new_file_mode_and_explicit_mode(etc):
    assert fileutil.write_file(str(etc / "new.pref"), b"x") is None     # nothing to back up
    assert stat.S_IMODE(os.stat(str(etc / "new.pref")).st_mode) == 0o644
    fileutil.write_file(str(etc / "new.pref"), b"y", mode=0o600, backup=False)
    assert stat.S_IMODE(os.stat(str(etc / "new.pref")).st_mode) == 0o600
    assert sorted(os.listdir(str(etc))) == ["config.toml", "new.pref"]


def test_backup_is_byte_for_byte_and_0600(etc):
    data = bytes(range(256)) * 4099          # not UTF-8, and larger than one read chunk is not needed
    f = etc / "blob"
    f.write_bytes(data)
    os.chmod(str(f), 0o644)
    bak = fileutil.backup_file(str(f))
    assert stat.S_IMODE(os.stat(bak).st_mode) == 0o600
    with open(bak, "rb") as b:
        assert b.read() == data
    refused(lambda: fileutil.backup_file(str(f), dest=bak), "cannot back up %s to %s" % (f, bak), "File exists")
    with open(bak, "rb") as b:
        assert b.read() == data


@pytest.mark.parametrize("mode,who", [(0o775, "group"), (0o757, "others"), (0o777, "group and others")])
def test_group_or_other_writable_directory_on_the_path_is_refused(tmp_path, mode, who):
    top = tmp_path / "top"
    (top / "etc").mkdir(parents=True)
    f = top / "etc" / "config.toml"
    f.write_bytes(b"old\n")
    os.chmod(str(top), mode)
    before = snapshot(f)
    msg = refused(lambda: fileutil.write_file(str(f), b"new\n"),
                  "refusing to write %s: the directory %s on its path is writable by %s (mode %04o)"
                  % (f, top, who, mode), "the file keeps its previous content")
    assert fileutil.unsafe_target(str(f)) in msg          # the same rules, the same reason
    os.chmod(str(top), 0o755)
    os.chmod(str(top / "etc"), mode)
    refused(lambda: fileutil.write_file(str(f), b"new\n"), "its directory %s is writable by %s" % (top / "etc", who))
    refused(lambda: fileutil.remove_file(str(f), b"old\n"), "refusing to remove %s: its directory" % f)
    refused(lambda: fileutil.backup_file(str(f)), "cannot back up %s: its directory" % f)
    assert snapshot(f) == before and os.listdir(str(top / "etc")) == ["config.toml"]


def test_directory_owned_by_another_uid_is_refused_anywhere_on_the_path(tmp_path):
    top = tmp_path / "top"
    (top / "a" / "b").mkdir(parents=True)
    f = top / "a" / "b" / "config.toml"
    f.write_bytes(b"old\n")
    os.chown(str(top / "a"), NOBODY, NOBODY)
    refused(lambda: fileutil.write_file(str(f), b"new\n"),
            "the directory %s on its path is owned by uid %d, not root" % (top / "a", NOBODY))
    assert f.read_bytes() == b"old\n" and os.listdir(str(top / "a" / "b")) == ["config.toml"]


def test_sticky_directory_is_fine_on_the_path_but_not_to_write_in(tmp_path):
    sticky = tmp_path / "shared"
    sticky.mkdir()
    os.chmod(str(sticky), 0o1777)
    (sticky / "etc").mkdir()
    os.chmod(str(sticky / "etc"), 0o755)
    fileutil.write_file(str(sticky / "etc" / "config.toml"), b"ok\n")
    assert (sticky / "etc" / "config.toml").read_bytes() == b"ok\n"
    refused(lambda: fileutil.write_file(str(sticky / "direct"), b"x"),
            "its directory %s is writable by group and others (mode 1777)" % sticky)
    assert sorted(os.listdir(str(sticky))) == ["etc"]
    os.chown(str(sticky), NOBODY, NOBODY)     # another user's sticky directory is theirs: refused
    refused(lambda: fileutil.write_file(str(sticky / "etc" / "config.toml"), b"no\n"),
            "the directory %s on its path is owned by uid %d" % (sticky, NOBODY))
    assert (sticky / "etc" / "config.toml").read_bytes() == b"ok\n"


def test_symlinked_directory_owned_by_another_uid_is_refused(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (real / "config.toml").write_bytes(b"old\n")
    link = tmp_path / "etc"
    link.symlink_to(real)
    os.lchown(str(link), NOBODY, NOBODY)
    refused(lambda: fileutil.write_file(str(link / "config.toml"), b"new\n"),
            "%s, a symlink on its path, is owned by uid %d, not root" % (link, NOBODY))
    assert (real / "config.toml").read_bytes() == b"old\n"
    os.lchown(str(link), 0, 0)                # root's link: followed, to a directory that is root's
    fileutil.write_file(str(link / "config.toml"), b"new\n", backup=False)
    assert (real / "config.toml").read_bytes() == b"new\n" and link.is_symlink()
    os.chown(str(real), NOBODY, NOBODY)       # root's link to another user's directory
    refused(lambda: fileutil.write_file(str(link / "config.toml"), b"x\n"),
            "its directory %s is owned by uid %d" % (real, NOBODY))


def test_root_symlinked_target_is_written_and_the_link_kept(tmp_path, etc):
    store = tmp_path / "store"
    store.mkdir()
    real = store / "real.toml"
    real.write_bytes(b"old = 1\n")
    os.chmod(str(real), 0o640)
    link = etc / "link.toml"
    os.symlink("../store/real.toml", str(link))     # relative, resolved from the link's directory
    bak = fileutil.write_file(str(link), b"new = 2\n")
    assert os.path.islink(str(link)) and os.readlink(str(link)) == "../store/real.toml"
    assert real.read_bytes() == b"new = 2\n" and stat.S_IMODE(os.stat(str(real)).st_mode) == 0o640
    assert os.path.dirname(bak) == str(store)      # the backup is beside the file written
    with open(bak, "rb") as b:
        assert b.read() == b"old = 1\n"
    assert sorted(os.listdir(str(store))) == sorted(["real.toml", os.path.basename(bak)])
    assert sorted(os.listdir(str(etc))) == ["config.toml", "link.toml"]


def test_symlinked_target_owned_by_another_uid_is_refused(tmp_path, etc):
    secret = tmp_path / "secret"
    secret.write_bytes(b"root only\n")
    os.chmod(str(secret), 0o600)
    before = snapshot(secret)
    link = etc / "evil.toml"
    link.symlink_to(secret)
    os.lchown(str(link), NOBODY, NOBODY)
    why = "%s is a symlink owned by uid %d, not root" % (link, NOBODY)
    assert fileutil.unsafe_target(str(link)) == why
    refused(lambda: fileutil.write_file(str(link), b"pwned\n", mode=0o666), why)
    refused(lambda: fileutil.remove_file(str(link)), why)
    refused(lambda: fileutil.backup_file(str(link)), "cannot read %s to back it up: a symlink owned by uid" % link)
    assert snapshot(secret) == before and os.path.islink(str(link))
    assert sorted(os.listdir(str(etc))) == ["config.toml", "evil.toml"]


def test_target_owned_or_writable_by_others_is_refused(etc):
    f = etc / "config.toml"
    os.chown(str(f), NOBODY, NOBODY)
    refused(lambda: fileutil.write_file(str(f), b"x"), "%s is owned by uid %d, not root" % (f, NOBODY))
    os.chown(str(f), 0, 0)
    os.chmod(str(f), 0o666)
    refused(lambda: fileutil.write_file(str(f), b"x"), "%s is writable by group and others (mode 0666)" % f)
    assert f.read_bytes() == b"old = 1\n" and os.listdir(str(etc)) == ["config.toml"]


def test_fifo_directory_and_loop_are_refused_without_blocking(etc):
    fifo = etc / "fifo"
    os.mkfifo(str(fifo))
    refused(lambda: fileutil.write_file(str(fifo), b"x"), "%s is a FIFO, not a regular file" % fifo)
    refused(lambda: fileutil.backup_file(str(fifo)), "cannot read %s to back it up: a FIFO, not a regular file" % fifo)
    refused(lambda: fileutil.write_file(str(etc), b"x"), "%s is a directory, not a regular file" % etc)
    refused(lambda: fileutil.write_file(str(etc) + "/", b"x"), "names a directory, not a file")
    a, b = etc / "a", etc / "b"
    os.symlink("b", str(a))
    os.symlink("a", str(b))
    refused(lambda: fileutil.write_file(str(a), b"x"), "more than %d symlinks" % fileutil.MAX_SYMLINKS)
    assert stat.S_ISFIFO(os.lstat(str(fifo)).st_mode)
    assert sorted(os.listdir(str(etc))) == ["a", "b", "config.toml", "fifo"]


def test_dot_dot_steps_back_to_the_real_parent(tmp_path, etc, monkeypatch):
    store = tmp_path / "store" / "deep"
    store.mkdir(parents=True)
    os.symlink(str(store), str(etc / "deep"))
    # etc/deep/../x is store/../x (= tmp_path/store/x) for the kernel, not etc/x
    fileutil.write_file(str(etc / "deep" / ".." / "x"), b"1")
    assert (tmp_path / "store" / "x").read_bytes() == b"1" and not (etc / "x").exists()
    monkeypatch.chdir(str(etc))
    fileutil.write_file("rel.txt", b"2")                  # relative to the working directory
    assert (etc / "rel.txt").read_bytes() == b"2"


def test_missing_directory_is_named(tmp_path):
    msg = refused(lambda: fileutil.write_file(str(tmp_path / "no" / "f"), b"x"),
                  "the directory %s does not exist" % (tmp_path / "no"))
    assert not os.path.exists(str(tmp_path / "no"))
    assert fileutil.unsafe_target(str(tmp_path / "no" / "f")) in msg
    assert fileutil.unsafe_target(str(tmp_path / "missing-file")) is None


def test_failures_leave_no_temp_file_and_the_old_content(etc):
    f = etc / "config.toml"
    with pytest.raises(TypeError):
        fileutil.write_file(str(f), 12345)       # fails after the temp file was created
    assert f.read_bytes() == b"old = 1\n" and os.listdir(str(etc)) == ["config.toml"]


def test_remove_only_the_analysed_bytes_after_a_backup(etc):
    f = etc / "config.toml"
    e = refused(lambda: fileutil.remove_file(str(f), b"other\n"), "changed since it was read; left in place")
    assert "backup" not in e and f.read_bytes() == b"old = 1\n" and os.listdir(str(etc)) == ["config.toml"]
    bak = fileutil.remove_file(str(f), b"old = 1\n")
    assert not f.exists() and stat.S_IMODE(os.stat(bak).st_mode) == 0o600
    with open(bak, "rb") as b:
        assert b.read() == b"old = 1\n"
    with pytest.raises(fileutil.ContentChanged) as gone:
        fileutil.remove_file(str(f), b"old = 1\n")
    assert gone.value.gone and gone.value.errno == errno.ENOENT
    assert fileutil.remove_file(bak, backup=False) is None and os.listdir(str(etc)) == []


def test_make_dirs(tmp_path):
    made = fileutil.make_dirs(str(tmp_path / "r" / "s" / "t"))
    assert made == str(tmp_path / "r" / "s" / "t") and os.path.isdir(made)
    assert fileutil.make_dirs(made) == made                    # exists: fine
    os.chmod(str(tmp_path / "r"), 0o777)
    refused(lambda: fileutil.make_dirs(str(tmp_path / "r" / "s" / "u")),
            "the directory %s on its path is writable by group and others" % (tmp_path / "r"))
    assert sorted(os.listdir(str(tmp_path / "r" / "s"))) == ["t"]


def test_private_tempdir(tmp_path):
    outside = tmp_path / "outside"
    outside.write_bytes(b"keep")
    with fileutil.private_tempdir("wp-test-") as d:
        st = os.stat(d.path)
        assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == 0
        assert d.subdir("a/b") == os.path.join(d.path, "a", "b") and os.path.isdir(os.path.join(d.path, "a", "b"))
        p = d.write("a/f.pref", "text")
        assert stat.S_IMODE(os.stat(p).st_mode) == 0o600 and open(p).read() == "text"
        with pytest.raises(OSError) as e:
            d.write("a/f.pref", "again")                        # O_EXCL: never overwritten
        assert e.value.errno == errno.EEXIST
        with pytest.raises(ValueError):
            d.write("../escape", "x")
        os.symlink(str(outside), os.path.join(d.path, "link"))
        with pytest.raises(OSError):
            d.write("link/x", "x")                              # O_NOFOLLOW on the way
        path = d.path
    assert not os.path.exists(path) and outside.read_bytes() == b"keep"    # removed, link not followed


def test_a_normal_user_may_write_in_its_own_directory(tmp_path):
    """The controller's report writer runs as the user running ansible-playbook: trusted are
    root and that user. Runs the stdlib-only fileutil.py as uid 65534 with setpriv."""
    import shutil
    import tempfile
    if not shutil.which("setpriv"):
        pytest.skip("setpriv (util-linux) is not installed")
    base = tempfile.mkdtemp(prefix="kubegpu-wp-user-")       # /tmp/...: reachable by uid 65534
    try:
        os.chmod(base, 0o755)
        src = os.path.join(os.path.dirname(fileutil.__file__), "fileutil.py")
        shutil.copyfile(src, os.path.join(base, "fileutil.py"))
        mine = os.path.join(base, "mine")
        os.mkdir(mine)
        os.chown(mine, NOBODY, NOBODY)
        foreign = os.path.join(base, "foreign")
        os.mkdir(foreign, 0o755)
        os.chown(foreign, 1000, 1000)
        code = ("import sys; sys.path.insert(0, %r); import fileutil\n"
                "fileutil.write_file(%r, 'report')\n"
                "fileutil.make_dirs(%r)\n"
                "try:\n    fileutil.write_file(%r, 'x')\nexcept fileutil.FileOpError as e:\n    print(e)\n"
                % (base, os.path.join(mine, "r.json"), os.path.join(mine, "sub", "dir"),
                   os.path.join(foreign, "r.json")))
        out = subprocess.run(["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY, "--clear-groups",
                              _nobody_python(), "-I", "-B", "-c", code],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=60,
                             check=False)
        assert out.returncode == 0, out.stdout
        assert out.stdout.strip() == ("refusing to write %s: its directory %s is owned by uid 1000, not root or "
                                      "uid %d (the user running this); the file keeps its previous content"
                                      % (os.path.join(foreign, "r.json"), foreign, NOBODY))
        st = os.stat(os.path.join(mine, "r.json"))
        assert st.st_uid == NOBODY and os.path.isdir(os.path.join(mine, "sub", "dir"))
        assert os.listdir(foreign) == []
    finally:
        shutil.rmtree(base)


def test_full_disk_keeps_the_old_content_and_leaves_no_temp_file_nor_backup(tmp_path):
    """A 64 KiB tmpfs: the 20 KiB backup fits, the 50 KiB new content does not (ENOSPC)."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    try:
        subprocess.check_call(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0755", "tmpfs", str(mnt)])
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip("cannot mount a tmpfs here: %s" % e)
    try:
        f = mnt / "config.toml"
        f.write_bytes(b"o" * (20 << 10))
        os.chmod(str(f), 0o640)
        before = snapshot(f)
        msg = refused(lambda: fileutil.write_file(str(f), b"n" * (50 << 10)),
                      "cannot write %s: No space left on device; the file keeps its previous content" % f)
        assert msg.startswith("cannot write")
        assert snapshot(f) == before
        assert os.listdir(str(mnt)) == ["config.toml"]      # no .config.toml.*.tmp, and its backup dropped
    finally:
        subprocess.call(["umount", "-l", str(mnt)])


def test_a_file_is_not_removed_through_its_symlink(tmp_path, etc):
    real = tmp_path / "ckpt"
    real.write_bytes(b"{}")
    link = etc / "link"
    link.symlink_to(real)
    why = "%s is a symlink (to %s): a file is not removed through a symlink" % (link, real)
    assert fileutil.unsafe_target(str(link)) is None                     # written through it, yes
    assert fileutil.unsafe_target(str(link), action="remove").startswith(why)
    refused(lambda: fileutil.remove_file(str(link), b"{}"), "refusing to remove %s: %s" % (link, why),
            "the file was left in place")
    assert link.is_symlink() and real.read_bytes() == b"{}"
    assert sorted(os.listdir(str(etc))) == ["config.toml", "link"] and os.listdir(str(tmp_path / "etc")) != []


def _write_as_nobody(directory, groups):
    """Fork, become uid/gid 65534 with supplementary ``groups``, write ``directory``/report.json
    through the primitive; ``None`` when written, else the refusal's text."""
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        try:
            os.close(rfd)
            os.setgroups(groups)
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            try:
                fileutil.write_file(os.path.join(directory, "report.json"), b"{}\n", mode=0o644, backup=False)
                answer = b"written"
            except fileutil.FileOpError as e:
                answer = str(e).encode("utf-8", "replace")
            os.write(wfd, answer)
        finally:
            os._exit(0)
    os.close(wfd)
    with os.fdopen(rfd, "rb") as r:
        answer = r.read().decode("utf-8")
    os.waitpid(pid, 0)
    return None if answer == "written" else answer


@pytest.mark.parametrize("mode, group, groups, refusal", [
    (0o775, NOBODY, [NOBODY], None),             # umask 002: only the user's own group writes too
    (0o775, 0, [NOBODY], "writable by group"),   # a group the user is not in
    (0o775, 0, [0, NOBODY], None),               # an EE pod: arbitrary uid in group 0
    (0o777, NOBODY, [NOBODY], "writable by group and others"),
])
def test_a_controller_user_writes_where_only_its_own_groups_can_write(mode, group, groups, refusal):
    """The report writer runs as the controller's user; group-writable directories of a group
    it belongs to are its own (root on a node never relaxes: see the directory tests above)."""
    import tempfile
    directory = tempfile.mkdtemp(prefix="kubegpu-ctl-", dir="/tmp")
    try:
        os.chown(directory, NOBODY, group)
        os.chmod(directory, mode)
        answer = _write_as_nobody(directory, groups)
        if refusal is None:
            assert answer is None, answer
            st = os.stat(os.path.join(directory, "report.json"))
            assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (NOBODY, 0o644)
        else:
            assert answer is not None and refusal in answer, answer
            assert os.listdir(directory) == []
    finally:
        for name in os.listdir(directory):
            os.unlink(os.path.join(directory, name))
        os.rmdir(directory)


def test_root_never_writes_into_a_group_writable_directory_of_its_own_group(etc):
    os.chmod(str(etc), 0o775)
    refused(lambda: fileutil.write_file(str(etc / "config.toml"), b"new = 2\n"), "writable by group")
    assert (etc / "config.toml").read_bytes() == b"old = 1\n"


def _locked_elsewhere(path):
    """Whether another open file description cannot take the lock now (LOCK_NB)."""
    import fcntl
    fd = os.open(str(path), os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def test_lock_file_creates_a_private_empty_file_and_holds_the_lock(etc):
    path = etc / ".lock"
    with fileutil.lock_file(str(path)):
        st = os.lstat(str(path))
        assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600 and st.st_size == 0
        assert _locked_elsewhere(path)
    assert not _locked_elsewhere(path)
    with fileutil.lock_file(str(path)):   # an existing lock file is reused
        assert _locked_elsewhere(path)


def test_lock_file_refuses_a_symlink_of_another_uid_and_a_file_others_can_write(etc):
    os.symlink(str(etc / "config.toml"), str(etc / "link.lock"))
    os.lchown(str(etc / "link.lock"), NOBODY, NOBODY)
    before = snapshot(etc / "config.toml")
    refused(lambda: fileutil.lock_file(str(etc / "link.lock")).__enter__(), "refusing to lock")
    assert snapshot(etc / "config.toml") == before
    shared = etc / "shared.lock"
    shared.write_bytes(b"")
    os.chmod(str(shared), 0o666)
    refused(lambda: fileutil.lock_file(str(shared)).__enter__(), "refusing to lock", "writable")
    assert not _locked_elsewhere(shared)
