# -*- coding: utf-8 -*-
"""Unit tests for the hang-proof child runner and probe helpers (gpu_probe.py)."""
from __future__ import absolute_import, division, print_function

import os
import select
import subprocess
import sys
import textwrap
import time

import pytest

from ansible_collections.kubegpu.fleet.tests.lib.paths import COLLECTIONS_ROOT as COLLECTIONS
from ansible_collections.kubegpu.fleet.tests.lib.procs import alive

from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu.probe import (
    mig_profile_from_attributes, mig_profile_from_name, run_in_child, session_members)


def test_child_result_comes_back():
    out = run_in_child(lambda emit: {"answer": 42, "pid": os.getpid()}, timeout=10)
    assert out.status == "ok"
    assert out.value["ok"] is True
    assert out.value["value"]["answer"] == 42
    assert out.value["value"]["pid"] != os.getpid()
    assert out.reaped is True
    assert out.exit_status == "exited with status 0"


def test_child_exception_is_reported_not_raised():
    def boom(emit):
        emit.stage("about to fail")
        raise RuntimeError("bad things")
    out = run_in_child(boom, timeout=10)
    assert out.status == "ok"
    assert out.value == {"ok": False, "error": "RuntimeError: bad things"}
    assert out.stage == "about to fail"


def test_child_that_dies_without_result():
    def die(emit):
        emit.stage("crashing")
        os.kill(os.getpid(), 11)
    out = run_in_child(die, timeout=10)
    assert out.status == "died"
    assert out.stage == "crashing"
    assert out.exit_status == "killed by signal 11"


def test_child_runs_in_own_session_with_null_stdio():
    def inspect(emit):
        return {"sid": os.getsid(0), "pid": os.getpid(),
                "stdout": os.readlink("/proc/self/fd/1"),
                "fds": sorted(int(x) for x in os.listdir("/proc/self/fd"))}
    out = run_in_child(inspect, timeout=10)
    v = out.value["value"]
    assert v["sid"] == v["pid"]
    assert v["stdout"] == "/dev/null"
    # stdio, the result pipe and the descriptor listdir itself used: nothing inherited.
    assert len(v["fds"]) <= 5


def test_hung_child_is_killed_with_its_grandchildren():
    def hang(emit):
        p = subprocess.Popen(["sleep", "300"])
        emit.stage("waiting for sleep %d" % p.pid)
        p.wait()
    start = time.monotonic()
    out = run_in_child(hang, timeout=1.0)
    elapsed = time.monotonic() - start
    assert out.status == "hung"
    # the fake never answers: "hung" means the probe gave up. A safety bound only (a slow,
    # contended machine must not fail it); the timeout + 2 s goal is measured in bench/.
    assert elapsed < 60
    assert out.reaped is True
    assert out.leftovers == []
    grandchild = int(out.stage.split()[-1])
    assert not alive(grandchild)
    assert not alive(out.pid)


def test_large_result_is_not_truncated():
    big = ["x" * 1000] * 500  # ~500 kB: more than a pipe buffer
    out = run_in_child(lambda emit: big, timeout=10)
    assert out.status == "ok" and out.value["value"] == big


def test_hung_child_does_not_hold_callers_stdout():
    """Ansible reads module output until EOF: a child stuck after the module exits must not
    keep that pipe open."""
    code = textwrap.dedent("""
        import sys, time
        sys.path.insert(0, %r)
        from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu.probe import run_in_child
        def hang(emit):
            print("child writes to stdout", flush=True)
            time.sleep(300)
        out = run_in_child(hang, timeout=0.5, reap_grace=0.0)
        print(out.status, out.pid, flush=True)
    """ % COLLECTIONS)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        data = b""
        end = time.monotonic() + 20
        while time.monotonic() < end:
            r = select.select([proc.stdout], [], [], end - time.monotonic())[0]
            if not r:
                break
            chunk = os.read(proc.stdout.fileno(), 4096)
            if not chunk:
                break
            data += chunk
        assert proc.wait(timeout=20) == 0, proc.stderr.read()
        assert b"child writes to stdout" not in data
        assert data.split()[0] == b"hung"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_session_members_sees_own_session():
    assert os.getpid() in session_members(os.getsid(0))
    assert session_members(-5) == []


@pytest.mark.parametrize("name,profile", [
    ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", "1g.5gb"),
    ("NVIDIA H100 80GB HBM3 MIG 1c.2g.20gb", "1c.2g.20gb"),
    ("NVIDIA H100 80GB HBM3", None),
    (None, None),
])
def test_profile_from_name(name, profile):
    assert mig_profile_from_name(name) == profile


@pytest.mark.parametrize("gi,ci,mem_mb,parent_mib,profile", [
    (1, 1, 9984, 81559, "1g.10gb"),     # H100 80GB
    (3, 3, 40704, 81559, "3g.40gb"),
    (7, 7, 80896, 81559, "7g.80gb"),
    (1, 1, 4864, 40536, "1g.5gb"),      # A100 40GB
    (3, 3, 19968, 40536, "3g.20gb"),
    (2, 1, 19968, 81559, "1c.2g.20gb"),
])
def test_profile_from_attributes(gi, ci, mem_mb, parent_mib, profile):
    assert mig_profile_from_attributes(gi, ci, mem_mb, parent_mib * 1024 * 1024) == profile


def test_profile_from_attributes_unknown():
    assert mig_profile_from_attributes(0, 0, 0, 0) is None
    assert mig_profile_from_attributes(1, 1, 9984, None) is None


def test_interrupted_parent_kills_the_child(tmp_path):
    import signal

    class Interrupted(Exception):
        pass

    def on_alarm(signum, frame):
        raise Interrupted()

    pidfile = str(tmp_path / "child.pid")

    def hang(emit):
        with open(pidfile, "w") as f:
            f.write(str(os.getpid()))
        time.sleep(300)

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, 0.5)
    try:
        with pytest.raises(Interrupted):
            run_in_child(hang, timeout=30)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    with open(pidfile) as f:
        pid = int(f.read())
    # Killed and reaped by run_in_child: not even a zombie is left.
    assert not os.path.exists("/proc/%d" % pid)


def test_what_a_probe_daemonises_is_killed_with_it(tmp_path):
    """A descendant that leaves the probe's session (double fork + setsid) would survive the
    session kill; run_in_child takes it back as child subreaper and kills it. By pid."""
    pidfile = str(tmp_path / "daemon.pid")
    daemonise = ["sh", "-c", "( setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $! > '%s' )" % pidfile]

    def answers(emit):
        subprocess.run(daemonise, check=True)  # no subreaper in the child: it goes to us
        return "done"

    out = run_in_child(answers, timeout=30)
    assert out.status == "ok" and out.value["value"] == "done"
    with open(pidfile) as f:
        pid = int(f.read())
    assert out.leftovers == []
    assert not alive(pid)


def test_what_a_hung_probe_daemonised_is_killed_too(tmp_path):
    pidfile = str(tmp_path / "daemon.pid")

    def hangs(emit):
        subprocess.run(["sh", "-c", "( setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $! > '%s' )"
                        % pidfile], check=True)
        emit.stage("daemonised")
        time.sleep(300)

    out = run_in_child(hangs, timeout=1.0)
    assert out.status == "hung" and out.stage == "daemonised"
    with open(pidfile) as f:
        pid = int(f.read())
    assert out.leftovers == []
    assert not alive(pid)
