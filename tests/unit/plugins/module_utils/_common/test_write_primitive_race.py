# -*- coding: utf-8 -*-
"""An unprivileged attacker races the write primitive (plugins/module_utils/_common/fileutil.py).

A process running as uid 65534 (``setpriv --reuid/--regid --clear-groups``) owns a directory on
the path of the file root writes, and swaps, in a tight loop, every entry it can for a symlink
to a root-owned 0600 secret (the temp-file swap of the old by-name chmod/chown), or the
root-owned directory below it for a symlink to the secret's directory. Root calls every entry
point of the primitive many times meanwhile. Every call must be refused and the secret's
type, mode, owner, inode and content must never change.

No sleeps: the attacker says ``ready`` on its stdout after its first full pass (so it has swapped
at least once before root starts), and stops when the test closes its stdin (EOF). It is killed
and everything removed in ``finally``. Needs root (os.chown, setpriv); runs in CI as root.
"""
import hashlib
import os
import shutil
import stat
import subprocess
import tempfile

import pytest

from ansible_collections.kubegpu.fleet.plugins.module_utils._common import fileutil
from ansible_collections.kubegpu.fleet.tests.lib.procs import python_for_uid

NOBODY = 65534


def _nobody_python():
    """The interpreter uid 65534 can run (the pinned core's, else the system's); skip without one."""
    python = python_for_uid(NOBODY)
    if python is None:
        pytest.skip("no Python interpreter that uid %d can start (setpriv)" % NOBODY)
    return python


ITERATIONS = 300

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="the attacker is started with setpriv as uid 65534: needs root"),
    pytest.mark.skipif(shutil.which("setpriv") is None, reason="setpriv (util-linux) is not installed"),
]

ATTACKER = r'''
import os, select, sys
mode, d, target = sys.argv[1], sys.argv[2], sys.argv[3]
swapped = set()
ready = False
while not select.select([0], [], [], 0)[0]:          # stdin readable = EOF: the test is done
    if mode == "files":                               # every entry that is not our symlink yet
        for name in os.listdir(d):
            p = os.path.join(d, name)
            try:
                if os.path.islink(p):
                    continue
                os.unlink(p)
                os.symlink(target, p)
                swapped.add(name)
            except OSError:
                pass
    else:                                             # the root-owned directory below ours
        inner = os.path.join(d, "inner")
        try:
            os.rename(inner, inner + ".moved")
            os.symlink(target, inner)
            swapped.add("inner")
            os.unlink(inner)
            os.rename(inner + ".moved", inner)
        except OSError:
            pass
    if not ready:
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        ready = True
sys.stdout.write("swapped %s\n" % " ".join(sorted(swapped)))
'''


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def snapshot(path):
    st = os.lstat(path)
    return (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, st.st_ino, sha(path))


@pytest.fixture
def arena(tmp_path):
    """``(base, secret)``: base is a 0755 root directory under /tmp (uid 65534 must reach it;
    tmp_path's parents are 0700), removed afterwards; secret is a root 0600 file in tmp_path."""
    base = tempfile.mkdtemp(prefix="kubegpu-race-")
    os.chmod(base, 0o755)
    secret_dir = tmp_path / "secretdir"
    secret_dir.mkdir()
    secret = secret_dir / "config.toml"
    secret.write_bytes(b"root's secret\n")
    os.chmod(str(secret), 0o600)
    try:
        yield base, str(secret)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def attack(mode, directory, target, calls):
    """Run the attacker on ``directory`` while ``calls()`` runs; return the names it swapped."""
    proc = subprocess.Popen(["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY, "--clear-groups",
                             _nobody_python(), "-I", "-B", "-c", ATTACKER, mode, directory, target],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, universal_newlines=True)
    try:
        assert proc.stdout.readline() == "ready\n", "the attacker did not start"
        calls()
        proc.stdin.close()                   # EOF: the attacker stops and reports
        last = proc.stdout.read()
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert last.startswith("swapped ")
    return last.split()[1:]


def hammer(path, owned, secret):
    """Every entry point of the primitive on ``path``, ITERATIONS times in all: each refused
    because the attacker's directory ``owned`` is on the path, the secret unchanged after each."""
    expect = "%s is owned by uid %d, not root" % (owned, NOBODY)
    expect_on_path = "the directory %s on its path is owned by uid %d, not root" % (owned, NOBODY)
    before = snapshot(secret)
    ops = [
        lambda: fileutil.write_file(path, b"pwned\n", mode=0o666),
        lambda: fileutil.atomic_write(path, b"pwned\n"),
        lambda: fileutil.backup_file(path),
        lambda: fileutil.remove_file(path, b"root's secret\n"),
        lambda: fileutil.make_dirs(os.path.join(os.path.dirname(path), "sub")),
    ]

    def run():
        for i in range(ITERATIONS):
            op = ops[i % (len(ops) + 1)] if i % (len(ops) + 1) < len(ops) else None
            if op is None:
                why = fileutil.unsafe_target(path)
                assert why and (expect in why or expect_on_path in why), why
            else:
                with pytest.raises(fileutil.FileOpError) as e:
                    op()
                assert expect in str(e.value) or expect_on_path in str(e.value), str(e.value)
            assert snapshot(secret) == before, "the secret changed at iteration %d" % i
    return run


def test_attacker_owned_directory_of_the_target(arena):
    base, secret = arena
    d = os.path.join(base, "attacker")
    os.mkdir(d, 0o755)
    target = os.path.join(d, "config.toml")
    with open(target, "w") as f:
        f.write("old\n")
    os.chown(d, NOBODY, NOBODY)
    swapped = attack("files", d, secret, hammer(target, d, secret))
    # the attacker swapped the target itself (it could), and never saw a file root made there
    assert swapped == ["config.toml"]
    assert all(os.lstat(os.path.join(d, n)).st_uid == NOBODY for n in os.listdir(d))


def test_attacker_owned_directory_higher_up(arena):
    base, secret = arena
    up = os.path.join(base, "attacker")
    os.mkdir(up, 0o755)
    inner = os.path.join(up, "inner")             # root's 0755, in the attacker's directory
    os.mkdir(inner, 0o755)
    target = os.path.join(inner, "config.toml")
    with open(target, "w") as f:
        f.write("old\n")
    os.chown(up, NOBODY, NOBODY)
    swapped = attack("dir", up, os.path.dirname(secret), hammer(target, up, secret))
    assert swapped == ["inner"]
    assert sorted(os.listdir(inner)) == ["config.toml"]       # no temp file, no backup, no sub/
    with open(target) as f:
        assert f.read() == "old\n"
