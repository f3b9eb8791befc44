"""The one /proc child/session scan (safe_io.live_processes) on a fake proc tree and on /proc.

safe_io's reaper (_children_of) and the GPU probe's children_of/session_members both go
through it; these tests drive all three over the same tree.
"""
import os
import subprocess
import sys

from ansible_collections.kubegpu.fleet.plugins.module_utils._common import safe_io
from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu import probe


def _stat(root, name, line):
    d = root / name
    d.mkdir()
    (d / "stat").write_bytes(line)
    return d


def _tree(tmp_path):
    """pid -> (state, ppid, pgrp, session), written as procfs would, plus traps."""
    root = tmp_path / "proc"
    root.mkdir()
    _stat(root, "1", b"1 (systemd) S 0 1 1 0 -1 4194560 0 0\n")
    # Plain child of 7 in session 55.
    _stat(root, "100", b"100 (worker) S 7 100 55 0 -1 0 0 0\n")
    # comm "a) b (c": spaces and both parentheses; the fields start after the LAST ")".
    _stat(root, "200", b"200 (a) b (c) R 7 200 55 0 -1 0 0 0\n")
    # comm "x) S 9 1 9": a parser splitting at the first ")" would read ppid 9 / session 9.
    _stat(root, "210", b"210 (x) S 9 1 9) S 7 210 55 0 -1 0 0 0\n")
    # Zombie and dead children of 7 in session 55: not live.
    _stat(root, "300", b"300 (zed) Z 7 300 55 0 -1 0 0 0\n")
    _stat(root, "301", b"301 (gone) X 7 301 55 0 -1 0 0 0\n")
    _stat(root, "302", b"302 (gone2) x 7 302 55 0 -1 0 0 0\n")
    # Directory names that are not ASCII digits are never read, even with a matching stat.
    _stat(root, "self", b"400 (self) S 7 400 55 0\n")
    _stat(root, "\u00b2", b"2 (sup) S 7 2 55 0\n")
    _stat(root, "\u0663", b"3 (arabic) S 7 3 55 0\n")
    # Oversized stat file: refused by the bound, not parsed from a cut prefix.
    _stat(root, "500", b"500 (big) S 7 500 55 " + b"0 " * safe_io.STAT_LIMIT + b"\n")
    # A FIFO where stat should be: skipped without blocking.
    fifo_dir = root / "501"
    fifo_dir.mkdir()
    os.mkfifo(str(fifo_dir / "stat"))
    # Truncated line, no ")" at all, non-numeric ppid, missing stat (exited meanwhile).
    _stat(root, "502", b"502 (short) S\n")
    _stat(root, "503", b"503 nocomm S 7 503 55 0\n")
    _stat(root, "504", b"504 (nan) S seven 504 5x5 0\n")
    (root / "505").mkdir()
    # A plain file named like a pid.
    (root / "506").write_bytes(b"506 (file) S 7 506 55 0\n")
    return str(root)


def test_children_by_ppid_on_a_fake_tree(tmp_path):
    proc = _tree(tmp_path)
    assert safe_io.live_processes(safe_io.STAT_PPID, 7, proc) == [100, 200, 210]
    assert safe_io.live_processes(safe_io.STAT_PPID, 9, proc) == []
    assert safe_io.live_processes(safe_io.STAT_PPID, 0, proc) == [1]


def test_session_and_group_fields_on_a_fake_tree(tmp_path):
    proc = _tree(tmp_path)
    assert safe_io.live_processes(safe_io.STAT_SESSION, 55, proc) == [100, 200, 210]
    assert safe_io.live_processes(safe_io.STAT_SESSION, 9, proc) == []
    assert safe_io.live_processes(safe_io.STAT_PGRP, 210, proc) == [210]


def test_both_callers_share_the_scan(tmp_path):
    proc = _tree(tmp_path)
    assert sorted(safe_io._children_of(7, proc)) == [100, 200, 210]
    assert probe.children_of(7, proc) == [100, 200, 210]
    assert probe.session_members(55, proc) == [100, 200, 210]
    assert probe.session_members(9, proc) == []


def test_missing_proc_is_empty(tmp_path):
    assert safe_io.live_processes(safe_io.STAT_PPID, 1, str(tmp_path / "nope")) == []


def test_real_proc_sees_a_live_child_and_not_its_zombie():
    """On the real /proc: a running child is listed; once it has exited (zombie, unreaped)
    it is not. Driven by the child's own pipe, never by sleeping."""
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE)
    try:
        me = os.getpid()
        assert child.pid in safe_io._children_of(me)
        assert child.pid in probe.children_of(me)
        assert child.pid in probe.session_members(os.getsid(0))
        child.stdin.close()
        # Wait for the exit without reaping: the child stays a zombie until waitpid.
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
        assert child.pid not in safe_io._children_of(me)
        assert child.pid not in probe.children_of(me)
    finally:
        if child.stdin and not child.stdin.closed:
            child.stdin.close()
        child.wait()
