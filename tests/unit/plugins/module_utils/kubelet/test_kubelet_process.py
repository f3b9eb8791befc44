# -*- coding: utf-8 -*-
"""Finding and trusting the kubelet process in /proc (kubelet/process.py)."""
import os
import shutil
import subprocess
import threading
import time

import pytest

from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet.facts import gather_kubelet_facts
from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet.memory import read_meminfo_total
from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet.process import (
    exe_info,
    find_kubelet_processes,
    identify_kubelet,
    kubelet_argv,
    parse_stat,
    process_uids,
    read_cmdline,
    systemd_main_pid,
)
from ansible_collections.kubegpu.fleet.tests.fixtures.kubelet.kubelet_fakeproc import (
    FakeProc,
    fixture_args,
    write_script,
)


# -- /proc --------------------------------------------------------------------------------
@pytest.mark.parametrize("comm,cmdline,expected", [
    ("kubelet", ["/usr/bin/kubelet", "--v=2"], ["/usr/bin/kubelet", "--v=2"]),
    ("kubelet", ["/bin/sh", "/usr/local/bin/kubelet", "--v=2"],
     ["/usr/local/bin/kubelet", "--v=2"]),
    ("hyperkube", ["/hyperkube", "kubelet", "--v=2"], ["kubelet", "--v=2"]),
    ("kubelet", [], []),
    (None, ["/opt/bin/kubelet"], ["/opt/bin/kubelet"]),
    ("journalctl", ["journalctl", "-u", "kubelet"], None),
    ("kubelet-exporte", ["/usr/bin/kubelet-exporter"], None),
    ("sleep", ["sleep", "kubelet"], None),
])
def test_kubelet_argv(comm, cmdline, expected):
    assert kubelet_argv(comm, cmdline) == expected


def test_parse_stat():
    assert parse_stat("42 (kube let) (x) S 1 42 42 0 -1 4194560 1 0 0 0 1 1 0 0 20 0 9 0 "
                      "777 1 1") == ("S", 777)
    assert parse_stat("") == (None, None)
    assert parse_stat("garbage") == (None, None)
    with open("/proc/self/stat") as f:
        state, start = parse_stat(f.read())
    assert state == "R" and start > 0


def test_find_kubelet_in_fake_tree(tmp_path):
    fp = FakeProc(tmp_path)
    fp.add_noise()
    fp.add_process(4242, fixture_args("kubeadm.args"), starttime=3000)
    fp.add_process(4300, ["/usr/bin/kubelet"], state="Z", starttime=10)   # zombie: skipped
    fp.add_process(4400, ["/bin/bash", "/opt/wrap/kubelet", "--v=4"], comm="kubelet",
                   starttime=2000)
    found = find_kubelet_processes(fp.path)
    assert [p["pid"] for p in found] == [4400, 4242]    # oldest first
    assert found[0]["argv"] == ["/opt/wrap/kubelet", "--v=4"]
    assert found[1]["argv"][0] == "/usr/bin/kubelet"


def test_find_kubelet_survives_missing_and_odd_entries(tmp_path):
    assert find_kubelet_processes(str(tmp_path / "nope")) == []
    fp = FakeProc(tmp_path)
    fp.add_vanished(10)
    d = fp.add_process(11, ["/usr/bin/kubelet"])
    os.unlink(os.path.join(d, "stat"))          # vanished between reads: still reported
    os.unlink(os.path.join(d, "comm"))
    assert [p["pid"] for p in find_kubelet_processes(fp.path)] == [11]


def test_find_kubelet_on_real_proc_under_process_churn():
    stop = threading.Event()

    def churn():
        while not stop.is_set():
            procs = [subprocess.Popen(["true"]) for _i in range(8)]
            for p in procs:
                p.wait()

    t = threading.Thread(target=churn)
    t.start()
    try:
        for _round in range(30):
            found = find_kubelet_processes("/proc")
            assert all(p["argv"] is not None for p in found)
    finally:
        stop.set()
        t.join()


def test_find_a_real_process_named_kubelet(tmp_path):
    binary = str(tmp_path / "kubelet")
    shutil.copy("/bin/sleep", binary)
    proc = subprocess.Popen([binary, "300"])
    try:
        deadline = time.time() + 10
        found = []
        while time.time() < deadline:
            found = [p for p in find_kubelet_processes("/proc") if p["pid"] == proc.pid]
            if found:
                break
            time.sleep(0.05)
        assert found and found[0]["argv"] == [binary, "300"]
        assert found[0]["comm"] == "kubelet"
        target, deleted = exe_info("/proc", proc.pid)
        assert target == binary and deleted is False
        os.unlink(binary)
        target, deleted = exe_info("/proc", proc.pid)
        assert target == binary and deleted is True
    finally:
        proc.kill()
        proc.wait()


def test_read_cmdline(tmp_path):
    fp = FakeProc(tmp_path)
    fp.add_process(5, ["/usr/bin/kubelet", "--node-labels=a=b c", ""])
    assert read_cmdline(fp.path, 5) == ["/usr/bin/kubelet", "--node-labels=a=b c", ""]
    fp.add_process(6, [])
    assert read_cmdline(fp.path, 6) == []
    assert read_cmdline(fp.path, 7) is None


# -- impostors (fake trees; the real-process test is tests/module/test_kubelet_impostor.py) --
def _user_exe(tmp_path, mode=0o755, uid=65534):
    path = tmp_path / "userbin" / "kubelet"
    path.parent.mkdir(exist_ok=True)
    path.write_text("#!/bin/sh\ntouch %s\n" % (tmp_path / "impostor-ran"))
    os.chmod(str(path), mode)
    os.chown(str(path), uid, uid)
    return str(path)


@pytest.mark.parametrize("impostor_first", [True, False])
def test_impostor_never_wins_whichever_starts_first(tmp_path, impostor_first):
    fp = FakeProc(tmp_path)
    evil = ["/home/mallory/kubelet", "--config=/etc/shadow", "--root-dir=/home/mallory/x"]
    real = ["/usr/bin/kubelet", "--config=/var/lib/kubelet/config.yaml", "--root-dir=/var/lib/kl"]
    fp.add_process(300, evil, exe=_user_exe(tmp_path), uid=65534,
                   starttime=10 if impostor_first else 900)
    fp.add_process(600, real, starttime=900 if impostor_first else 10)
    facts = gather_kubelet_facts(fp.path)
    assert facts["pid"] == 600 and facts["identified_by"] == "root-owned"
    assert facts["root_dir"] == "/var/lib/kl" and facts["flags"]["config"] != "/etc/shadow"
    assert facts["impostors"] == [{"pid": 300, "uid": 65534, "exe": _user_exe(tmp_path),
                                   "why": "runs as uid 65534 (effective 65534), not root"}]
    assert any("process 300 named kubelet" in e for e in facts["errors"])
    assert not (tmp_path / "impostor-ran").exists() and not os.path.exists(fp.executed_marker)


@pytest.mark.parametrize("uid,euid,mode,exe_uid,why", [
    (1000, 1000, 0o755, 0, "runs as uid 1000 (effective 1000), not root"),
    (1000, 0, 0o4755, 0, "runs as uid 1000 (effective 0), not root"),     # setuid-root binary
    (0, 0, 0o755, 1000, "is owned by uid 1000, not root"),
    (0, 0, 0o775, 0, "is writable by group (mode 0775)"),
    (0, 0, 0o757, 0, "is writable by others (mode 0757)"),
])
def test_trust_rules(tmp_path, uid, euid, mode, exe_uid, why):
    fp = FakeProc(tmp_path)
    fp.add_process(42, ["/usr/bin/kubelet"], exe=_user_exe(tmp_path, mode, exe_uid), uid=uid,
                   euid=euid)
    found = identify_kubelet(fp.path)
    assert found["proc"] is None and found["method"] is None
    assert found["rejected"][0]["pid"] == 42 and why in found["rejected"][0]["why"]


def test_interpreted_script_must_be_root_owned_too(tmp_path):
    fp = FakeProc(tmp_path)
    script = _user_exe(tmp_path)
    fp.add_process(43, ["/bin/sh", script, "--root-dir=/x"], comm="kubelet", exe="/bin/sh")
    found = identify_kubelet(fp.path)
    assert found["proc"] is None and "its script %s is owned by uid 65534" % script in \
        found["rejected"][0]["why"]
    os.chown(script, 0, 0)
    found = identify_kubelet(fp.path)
    assert found["proc"]["pid"] == 43 and found["proc"]["argv"] == [script, "--root-dir=/x"]


def test_unit_cgroup_picks_among_root_processes(tmp_path):
    fp = FakeProc(tmp_path)
    fp.add_process(50, ["/usr/bin/kubelet", "--v=1"])
    d = fp.add_process(51, ["/usr/bin/kubelet", "--v=2"])
    with open(os.path.join(d, "cgroup"), "w") as f:
        f.write("0::/system.slice/kubelet.service\n")
    # a user manager's kubelet.service is not the system unit
    d = fp.add_process(52, ["/usr/bin/kubelet", "--v=3"], exe=_user_exe(tmp_path), uid=1000)
    with open(os.path.join(d, "cgroup"), "w") as f:
        f.write("0::/user.slice/user-1000.slice/user@1000.service/app.slice/kubelet.service\n")
    found = identify_kubelet(fp.path, unit="kubelet")
    assert found["method"] == "cgroup" and found["proc"]["pid"] == 51
    assert sorted(r["pid"] for r in found["rejected"]) == [50, 52]


def _named_kubelet(tmp_path, name, owner=0):
    """A copy of sleep named kubelet, started as ``owner``; returns the Popen."""
    d = tmp_path / name
    d.mkdir(mode=0o755)
    binary = str(d / "kubelet")
    shutil.copy("/bin/sleep", binary)
    os.chmod(binary, 0o755)
    os.chown(str(d), owner, owner)
    os.chown(binary, owner, owner)
    argv = [binary, "300"]
    if owner:
        argv = ["setpriv", "--reuid=%d" % owner, "--regid=%d" % owner, "--clear-groups"] + argv
    return subprocess.Popen(argv)


def _wait_named(pid):
    """Until ``pid`` runs the kubelet-named binary (exec done); readiness, not timing."""
    for _i in range(2000):
        try:
            with open("/proc/%d/comm" % pid) as f:
                if f.read().strip() == "kubelet":
                    return
        except (IOError, OSError):
            pass
        time.sleep(0.005)
    raise AssertionError("pid %d never became kubelet" % pid)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="needs root and setpriv")
def test_systemd_main_pid_wins_on_the_real_proc(tmp_path):
    """systemd's MainPID is the kubelet even when an older impostor and other root processes
    named kubelet exist (a stand-in systemctl answers for the unit: systemd is not PID 1 here)."""
    os.chmod(str(tmp_path), 0o755)
    impostor = _named_kubelet(tmp_path, "mallory", owner=65534)
    others = [_named_kubelet(tmp_path, "other")]
    real = _named_kubelet(tmp_path, "real")
    try:
        for p in [impostor, real] + others:
            _wait_named(p.pid)
        calls = tmp_path / "calls"
        systemctl = write_script(str(tmp_path / "systemctl"),
                                 "#!/bin/sh\necho \"$*\" >> %s\necho %d\n" % (calls, real.pid))
        found = identify_kubelet("/proc", "kubelet.service", systemctl, sd_booted=True)
        assert found["method"] == "systemd" and found["proc"]["pid"] == real.pid
        assert calls.read_text() == "show -p MainPID --value kubelet.service\n"
        rejected = dict((r["pid"], r) for r in found["rejected"])
        assert "not root" in rejected[impostor.pid]["why"]
        assert others[0].pid in rejected
        # the unit is not running (MainPID 0): fall back to ownership, which is ambiguous here
        write_script(systemctl, "#!/bin/sh\necho 0\n")
        found = identify_kubelet("/proc", "kubelet.service", systemctl, sd_booted=True)
        assert found["method"] != "systemd"
        assert found["proc"] is None or found["proc"]["pid"] != impostor.pid
        # a unit name that could expand is refused before systemctl runs
        with pytest.raises(ValueError, match="must be a systemd unit name"):
            identify_kubelet("/proc", "kube*", systemctl, sd_booted=True)
    finally:
        for p in [impostor, real] + others:
            p.kill()
            p.wait()


def test_fifo_and_odd_proc_files_never_block(tmp_path):
    fp = FakeProc(tmp_path)
    d = fp.add_process(60, ["/usr/bin/kubelet"])
    d2 = fp.add_process(61, ["/usr/bin/kubelet"])
    for name in ("cmdline", "comm"):       # nothing readable: as if it vanished
        os.unlink(os.path.join(d2, name))
        os.mkfifo(os.path.join(d2, name))
    for name in ("cmdline", "status"):
        os.unlink(os.path.join(d, name))
        os.mkfifo(os.path.join(d, name))
    os.mkfifo(os.path.join(fp.path, "meminfo"))
    facts = gather_kubelet_facts(fp.path)
    assert facts["running"] is False and facts["node_memory_bytes"] is None
    assert facts["pids"] == [60]
    assert facts["impostors"][0]["why"] == "its owner cannot be read"


# -- numbers that are not ASCII digits ('²'.isdigit() is True, int('²') raises) -------------
NON_ASCII_DIGITS = ["\u00b2", "\u0663", "\uff14\uff12"]  # superscript two, Arabic-Indic three, full-width 42


@pytest.mark.parametrize("digits", NON_ASCII_DIGITS)
def test_find_kubelet_skips_pid_entries_that_are_not_ascii_digits(tmp_path, digits):
    fp = FakeProc(tmp_path)
    fp.add_process(4242, ["/usr/bin/kubelet"], starttime=3000)
    d = fp.add_process(4343, ["/usr/bin/kubelet"], starttime=10)
    os.rename(d, os.path.join(fp.path, digits))
    assert [p["pid"] for p in find_kubelet_processes(fp.path)] == [4242]


@pytest.mark.parametrize("digits", NON_ASCII_DIGITS)
def test_proc_numbers_that_are_not_ascii_digits_are_unknown(tmp_path, digits):
    fields = ["S"] + ["1"] * 18 + [digits, "1", "1"]
    assert parse_stat("42 (kubelet) " + " ".join(fields)) == ("S", None)
    fp = FakeProc(tmp_path)
    d = fp.add_process(77, ["/usr/bin/kubelet"])
    with open(os.path.join(d, "status"), "w") as f:
        f.write("Name:\tkubelet\nUid:\t%s\t0\t0\t0\n" % digits)
    assert process_uids(fp.path, 77) == (None, None)
    with open(os.path.join(fp.path, "meminfo"), "w") as f:
        f.write("MemTotal:       %s kB\nMemFree:        1024 kB\n" % digits)
    assert read_meminfo_total(fp.path) is None


@pytest.mark.parametrize("digits", NON_ASCII_DIGITS)
def test_systemd_main_pid_that_is_not_ascii_digits_is_an_error(tmp_path, digits):
    systemctl = write_script(str(tmp_path / "systemctl"), "#!/bin/sh\nprintf '%s\\n'\n" % digits)
    pid, err = systemd_main_pid("kubelet.service", systemctl)
    assert pid is None
    assert err == "systemctl show kubelet.service exited 0: %s" % digits
