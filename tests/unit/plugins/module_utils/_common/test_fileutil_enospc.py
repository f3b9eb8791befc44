# -*- coding: utf-8 -*-
"""fileutil on a really full disk: a 64 KiB tmpfs mounted for each test (root only).

Nothing lost: a backup or rewrite that hits ENOSPC leaves no empty ``.bak`` and no temp file
behind, the original keeps its bytes, and the message names the step and the files.
"""
import errno
import hashlib
import os
import subprocess

import pytest

from ansible_collections.kubegpu.fleet.plugins.module_utils._common import fileutil

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")


@pytest.fixture
def tiny_fs(tmp_path):
    """A 64 KiB tmpfs (mode 0755, root's), unmounted in teardown whatever the test did."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    try:
        subprocess.check_call(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0755",
                               "tmpfs", str(mnt)])
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip("cannot mount a tmpfs here: %s" % e)
    try:
        yield mnt
    finally:
        subprocess.call(["umount", "-l", str(mnt)])


def sha(path):
    with open(str(path), "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def fill(directory, leave=0):
    """Fill the file system holding ``directory`` until at most ``leave`` bytes are free."""
    st = os.statvfs(str(directory))
    free = st.f_bavail * st.f_frsize
    if free > leave:
        with open(os.path.join(str(directory), "filler"), "wb") as f:
            try:
                f.write(b"\0" * (free - leave))
                f.flush()
                os.fsync(f.fileno())
            except OSError as e:
                assert e.errno == errno.ENOSPC


def test_backup_on_a_full_disk_leaves_nothing_and_names_both_files(tiny_fs):
    src = tiny_fs / "config.yaml"
    src.write_bytes(os.urandom(40 << 10))       # 40 KiB: a copy cannot fit in 64 KiB
    before = sha(src)
    with pytest.raises(fileutil.FileOpError) as e:
        fileutil.backup_file(str(src))
    assert e.value.errno == errno.ENOSPC
    msg = str(e.value)
    assert msg.startswith("cannot back up %s to %s.2" % (src, src)), msg
    assert msg.endswith(".bak: No space left on device; no backup was left behind")
    assert e.value.filename.startswith(str(src) + ".") and e.value.filename.endswith(".bak")
    assert sorted(os.listdir(str(tiny_fs))) == ["config.yaml"]       # no empty .bak
    assert sha(src) == before


def test_backup_elsewhere_names_the_source_and_the_backup(tiny_fs, tmp_path):
    src = tmp_path / "kubelet_internal_checkpoint"
    src.write_bytes(b"{}" * (50 << 10))          # 100 KiB outside, backup inside the tmpfs
    dest = tiny_fs / "ckpt.bak"
    with pytest.raises(fileutil.FileOpError) as e:
        fileutil.backup_file(str(src), dest=str(dest))
    assert str(e.value) == ("cannot back up %s to %s: No space left on device; no backup was "
                            "left behind" % (src, dest))
    assert not dest.exists() and os.listdir(str(tiny_fs)) == []


def test_backup_that_cannot_even_be_created(tiny_fs):
    src = tiny_fs / "config.yaml"
    src.write_bytes(b"kind: KubeletConfiguration\n")
    fill(tiny_fs)
    # no block left: the backup's inode is created, its first write fails, and it is removed
    with pytest.raises(fileutil.FileOpError) as e:
        fileutil.backup_file(str(src))
    assert "cannot back up %s to " % src in str(e.value)
    assert sorted(os.listdir(str(tiny_fs))) == ["config.yaml", "filler"]
    assert src.read_bytes() == b"kind: KubeletConfiguration\n"


def test_backup_of_an_unreadable_source_names_the_source(tmp_path):
    missing = tmp_path / "missing.yaml"
    with pytest.raises(fileutil.FileOpError) as e:
        fileutil.backup_file(str(missing))
    assert str(e.value) == "cannot read %s to back it up: No such file or directory" % missing
    fifo = tmp_path / "fifo"
    os.mkfifo(str(fifo))
    with pytest.raises(fileutil.FileOpError) as e:      # never blocks on a FIFO
        fileutil.backup_file(str(fifo))
    assert "cannot read %s to back it up: a FIFO, not a regular file" % fifo == str(e.value)
    assert sorted(os.listdir(str(tmp_path))) == ["fifo"]


def test_atomic_write_on_a_full_disk_keeps_the_original_and_no_temp_file(tiny_fs):
    target = tiny_fs / "config.yaml"
    target.write_bytes(b"kind: KubeletConfiguration\nmaxPods: 110\n")
    os.chmod(str(target), 0o600)
    before = sha(target)
    with pytest.raises(fileutil.FileOpError) as e:
        fileutil.atomic_write(str(target), b"x" * (80 << 10))
    assert e.value.errno == errno.ENOSPC
    assert str(e.value) == ("cannot write %s: No space left on device; the file keeps its "
                            "previous content" % target)
    assert sorted(os.listdir(str(tiny_fs))) == ["config.yaml"]     # no .config.yaml.* temp
    assert sha(target) == before and os.stat(str(target)).st_mode & 0o777 == 0o600


def test_atomic_write_succeeds_when_it_fits(tiny_fs):
    target = tiny_fs / "config.yaml"
    target.write_bytes(b"old\n")
    fileutil.atomic_write(str(target), "new\n")
    assert target.read_bytes() == b"new\n" and os.listdir(str(tiny_fs)) == ["config.yaml"]


@pytest.mark.parametrize("setup,why", [
    (lambda d, f: os.chown(f, 65534, 65534), "is owned by uid 65534, not root"),
    (lambda d, f: os.chmod(f, 0o664), "is writable by group (mode 0664)"),
    (lambda d, f: os.chmod(f, 0o646), "is writable by others (mode 0646)"),
    (lambda d, f: os.chmod(d, 0o777), "its directory %(d)s is writable by group and others"),
    (lambda d, f: os.chown(d, 1000, 1000), "its directory %(d)s is owned by uid 1000"),
])
def test_unsafe_target(tmp_path, setup, why):
    d = tmp_path / "etc"
    d.mkdir(mode=0o755)
    f = d / "config.yaml"
    f.write_text("kind: KubeletConfiguration\n")
    os.chmod(str(f), 0o644)
    assert fileutil.unsafe_target(str(f)) is None
    setup(str(d), str(f))
    assert why % {"d": d} in fileutil.unsafe_target(str(f))


def test_unsafe_target_symlinks(tmp_path):
    d = tmp_path / "etc"
    d.mkdir(mode=0o755)
    real = d / "real.yaml"
    real.write_text("x\n")
    link = d / "link.yaml"
    link.symlink_to(real)
    assert fileutil.unsafe_target(str(link)) is None
    os.lchown(str(link), 65534, 65534)
    assert fileutil.unsafe_target(str(link)) == "%s is a symlink owned by uid 65534, not root" \
        % link
    other = tmp_path / "userdir"
    other.mkdir(mode=0o755)
    os.chown(str(other), 65534, 65534)
    (other / "x.yaml").write_text("x\n")
    link2 = d / "link2.yaml"
    link2.symlink_to(other / "x.yaml")
    assert "its directory %s is owned by uid 65534" % other in fileutil.unsafe_target(str(link2))
    fifo = d / "fifo"
    os.mkfifo(str(fifo))
    assert fileutil.unsafe_target(str(fifo)) == "%s is a FIFO, not a regular file" % fifo
    assert fileutil.unsafe_target(str(d / "missing.yaml")) is None
