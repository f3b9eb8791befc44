# -*- coding: utf-8 -*-
"""kubegpu.fleet.checkpoint_guard: the role through real ansible-playbook, and the guard it
installs run for real.

The role is applied to temp directories (install dir, unit dir, kubelet root-dir are role
variables). The guard is then started exactly as its installed unit's ExecStart= line says,
under the system Python without Ansible on its path, against real checkpoint files. The
only fake is ``nvidia-smi`` (no GPU here): shell scripts that print real ``nvidia-smi -L``
captures, exit with nvidia-smi's failure codes, or hang the way a wedged NVML does (ignoring
SIGTERM while a child holds the output pipe). The unit file is checked with
``systemd-analyze verify``. Booting a node with the unit is proven in the lab.
"""
import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
FIX = os.path.join(REPO, "tests", "fixtures", "checkpoint")
SMI = os.path.join(FIX, "nvidia-smi")
sys.path.insert(0, os.path.join(REPO, "tests"))

from lib.ansible_runner import AnsibleRunner, ensure_collection_tree  # noqa: E402

UNIT = "kubegpu-checkpoint-guard.service"
GPU_B = "GPU-8f6e3c1a-0b7d-6f4e-2a9c-3e1d5b7a9c02"
# See test_checkpoint_sync.py: the shared runner's empty callbacks list breaks ansible 2.19.
HARNESS_ENV = {"ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.json"}
SYSTEM_PYTHON = "/usr/bin/python3"
PY38 = "/root/.pyenv/versions/3.8.18/bin/python3.8"


def role_play(role_vars, state=None):
    v = dict(role_vars)
    if state:
        v["kubegpu_checkpoint_guard_state"] = state
    return [{"hosts": "localhost", "gather_facts": False,
             "roles": [{"role": "kubegpu.fleet.checkpoint_guard", "vars": v}]}]


def changed_tasks(res):
    return [t["_task"] for t in res.tasks() if t.get("changed")]


def exec_start(unit_text):
    """The ExecStart= command of a unit file as an argv list (continuation lines joined)."""
    joined = unit_text.replace("\\\n", " ")
    for line in joined.splitlines():
        if line.startswith("ExecStart="):
            return shlex.split(line[len("ExecStart="):])
    raise AssertionError("no ExecStart= in unit")


class Layout(object):
    def __init__(self, base):
        self.base = base
        self.install = os.path.join(base, "usr-local-lib", "kubegpu")
        self.units = os.path.join(base, "etc-systemd-system")
        self.kubelet = os.path.join(base, "var-lib-kubelet", "device-plugins")
        self.ckpt = os.path.join(self.kubelet, "kubelet_internal_checkpoint")
        self.unit = os.path.join(self.units, UNIT)
        self.link = os.path.join(self.units, "kubelet.service.wants", UNIT)

    def vars(self, **extra):
        v = {"kubegpu_checkpoint_guard_install_dir": self.install,
             "kubegpu_checkpoint_guard_unit_dir": self.units,
             "kubegpu_checkpoint_path": self.ckpt,
             "kubegpu_checkpoint_guard_python": SYSTEM_PYTHON,
             "kubegpu_checkpoint_guard_nvml_timeout": 2,
             "kubegpu_checkpoint_guard_driver_wait": 1}
        v.update(extra)
        return v


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The role applied once (module scope); tests run the guard it installed."""
    base = str(tmp_path_factory.mktemp("guard-role"))
    runner = AnsibleRunner(REPO, ensure_collection_tree(REPO), base)
    lay = Layout(base)
    os.makedirs(lay.units)
    res = runner.playbook(role_play(lay.vars()), env=HARNESS_ENV)
    assert res.rc == 0, res.stdout + res.stderr
    with open(lay.unit) as f:
        lay.argv = exec_start(f.read())
    yield lay
    shutil.rmtree(base, ignore_errors=True)


class Guard(object):
    """A node for one guard run: kubelet dir, fake procfs, fake nvidia-smi on PATH."""

    def __init__(self, lay, tmp_path):
        self.lay = lay
        self.tmp = tmp_path
        self.bin = tmp_path / "bin"
        self.bin.mkdir()
        self.proc = tmp_path / "proc"
        self.calls = tmp_path / "nvidia-smi.calls"
        self.pids = tmp_path / "nvidia-smi.pids"
        shutil.rmtree(lay.kubelet, ignore_errors=True)
        os.makedirs(lay.kubelet)

    def driver_loaded(self):
        d = self.proc / "driver" / "nvidia"
        d.mkdir(parents=True)
        (d / "version").write_text(
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.172.08  Tue Jul  8 18:22:29 UTC 2025\n"
            "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n")

    def smi(self, body):
        path = self.bin / "nvidia-smi"
        path.write_text("#!/bin/sh\necho \"$@\" >> '%s'\n%s" % (self.calls, body))
        path.chmod(0o755)

    def smi_prints(self, capture, rc=0):
        self.smi("cat '%s'\nexit %d\n" % (os.path.join(SMI, capture), rc))

    def put(self, fixture):
        shutil.copyfile(os.path.join(FIX, fixture), self.lay.ckpt)
        with open(self.lay.ckpt, "rb") as f:
            return f.read()

    def run(self, *extra, **kw):
        """Run the guard as the unit would; returns (rc, output lines, summary dict)."""
        argv = list(self.lay.argv)
        if kw.get("python"):
            argv[0] = kw["python"]
        argv += ["--proc-path", str(self.proc)] + list(extra)
        env = {"PATH": "%s:/usr/bin:/bin" % self.bin, "LANG": "C.UTF-8"}
        env.update(kw.get("env", {}))
        proc = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True, timeout=120, check=False)
        lines = proc.stdout.splitlines()
        summaries = [ln for ln in lines if " summary {" in ln or ln.startswith("<")
                     and "summary {" in ln]
        assert summaries, proc.stdout
        summary = json.loads(summaries[-1].split("summary ", 1)[1])
        return proc.returncode, proc.stdout, summary

    def smi_calls(self):
        return self.calls.read_text().splitlines() if self.calls.exists() else []

    def backups(self):
        return sorted(os.path.join(self.lay.kubelet, n) for n in os.listdir(self.lay.kubelet)
                      if n.endswith(".bak"))

    def ckpt_bytes(self):
        with open(self.lay.ckpt, "rb") as f:
            return f.read()

    def cleanup(self):
        if self.pids.exists():
            for pid in self.pids.read_text().split():
                try:
                    os.kill(int(pid), 9)
                except OSError:
                    pass


@pytest.fixture
def guard(installed, tmp_path):
    g = Guard(installed, tmp_path)
    yield g
    g.cleanup()


# --------------------------------------------------------------------------- the role

def test_role_installs_verbatim_logic_and_an_ordered_bounded_unit(installed):
    lay = installed
    for name, source in (("checkpoint.py", ("checkpoint", "sync.py")),
                         ("fileutil.py", ("_common", "fileutil.py"))):
        with open(os.path.join(lay.install, name), "rb") as a, \
                open(os.path.join(REPO, "plugins", "module_utils", *source), "rb") as b:
            assert a.read() == b.read()
        assert stat.S_IMODE(os.stat(os.path.join(lay.install, name)).st_mode) == 0o644
    script = os.path.join(lay.install, "checkpoint_guard.py")
    assert stat.S_IMODE(os.stat(script).st_mode) == 0o644  # run by an explicit interpreter
    assert stat.S_IMODE(os.stat(lay.unit).st_mode) == 0o644
    assert os.path.islink(lay.link) and os.readlink(lay.link) == lay.unit
    with open(lay.unit) as f:
        text = f.read()
    assert "\nType=oneshot\n" in text and "\nRemainAfterExit=yes\n" in text
    assert "\nBefore=kubelet.service\n" in text
    assert "\nWantedBy=kubelet.service\n" in text and "RequiredBy=" not in text
    after = [ln for ln in text.splitlines() if ln.startswith("After=")][0].split("=", 1)[1]
    assert {"systemd-modules-load.service", "nvidia-persistenced.service",
            "nvidia-mig-manager.service"} <= set(after.split())
    assert "\nTimeoutStartSec=33\n" in text  # nvml_timeout 2 + driver_wait 1 + 30
    assert "\nConditionPathExists=%s\n" % lay.ckpt in text
    assert lay.argv[:4] == [SYSTEM_PYTHON, "-I", "-B", script]
    assert lay.argv[4:] == ["--checkpoint", lay.ckpt, "--nvidia-smi", "nvidia-smi",
                            "--timeout", "2", "--driver-wait", "1",
                            "--resource-name", "nvidia.com/*"]


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="no systemd-analyze")
def test_unit_passes_systemd_analyze_verify(installed):
    proc = subprocess.run(["systemd-analyze", "verify", installed.unit],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, check=False)
    # verify returns 0 even for lines it ignores; any output is a finding.
    assert proc.returncode == 0 and proc.stdout.strip() == "", proc.stdout


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="no systemd-analyze")
def test_systemd_analyze_verify_does_catch_a_broken_unit(installed, tmp_path):
    """The check above can fail: a typo in the same unit is reported."""
    with open(installed.unit) as f:
        text = f.read()
    bad = tmp_path / UNIT
    bad.write_text(text.replace("TimeoutStartSec=33", "TimeoutStartSec=thirty"))
    proc = subprocess.run(["systemd-analyze", "verify", str(bad)], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True, check=False)
    assert "TimeoutStartSec" in proc.stdout


def test_role_check_mode_idempotence_options_and_removal(tmp_path):
    base = str(tmp_path)
    runner = AnsibleRunner(REPO, ensure_collection_tree(REPO), base)
    lay = Layout(base)
    os.makedirs(lay.units)

    chk = runner.playbook(role_play(lay.vars()), check=True, diff=True, env=HARNESS_ENV)
    assert chk.rc == 0, chk.stdout + chk.stderr
    assert changed_tasks(chk)
    assert not os.path.exists(lay.install) and os.listdir(lay.units) == []

    first = runner.playbook(role_play(lay.vars()), env=HARNESS_ENV)
    assert first.rc == 0, first.stdout + first.stderr
    assert os.path.islink(lay.link)
    second = runner.playbook(role_play(lay.vars()), env=HARNESS_ENV)
    assert second.rc == 0 and changed_tasks(second) == [], changed_tasks(second)
    assert second.stats["localhost"]["changed"] == 0
    chk2 = runner.playbook(role_play(lay.vars()), check=True, env=HARNESS_ENV)
    assert chk2.rc == 0 and changed_tasks(chk2) == []

    # Options reach the unit; disabling removes the wants link only.
    opts = lay.vars(kubegpu_checkpoint_guard_enabled=False, kubegpu_checkpoint_guard_backup=False,
                    kubegpu_checkpoint_guard_remove_malformed=True,
                    kubegpu_checkpoint_guard_resource_names=["nvidia.com/gpu", "example.com/*"])
    res = runner.playbook(role_play(opts), env=HARNESS_ENV)
    assert res.rc == 0, res.stdout + res.stderr
    with open(lay.unit) as f:
        argv = exec_start(f.read())
    assert argv[-6:] == ["--resource-name", "nvidia.com/gpu", "--resource-name",
                         "example.com/*", "--no-backup", "--remove-malformed"]
    assert not os.path.lexists(lay.link) and os.path.exists(lay.unit)

    # Another kubelet unit name: ordered before and wanted by that one.
    res = runner.playbook(role_play(lay.vars(
        kubegpu_checkpoint_guard_kubelet_service="kubelet-gpu.service")), env=HARNESS_ENV)
    assert res.rc == 0, res.stdout + res.stderr
    with open(lay.unit) as f:
        text = f.read()
    assert "\nBefore=kubelet-gpu.service\n" in text and "\nWantedBy=kubelet-gpu.service\n" in text
    gpu_link = os.path.join(lay.units, "kubelet-gpu.service.wants", UNIT)
    assert os.path.islink(gpu_link) and os.readlink(gpu_link) == lay.unit
    res = runner.playbook(role_play(lay.vars(
        kubegpu_checkpoint_guard_kubelet_service="kubelet-gpu.service"), state="absent"),
        env=HARNESS_ENV)
    assert res.rc == 0 and not os.path.lexists(gpu_link)
    runner.playbook(role_play(lay.vars()), env=HARNESS_ENV)
    assert os.path.islink(lay.link)

    # Removal, idempotent; the install dir goes only when nothing else lives there.
    res = runner.playbook(role_play(lay.vars(), state="absent"), env=HARNESS_ENV)
    assert res.rc == 0, res.stdout + res.stderr
    assert not os.path.exists(lay.unit) and not os.path.lexists(lay.link)
    assert not os.path.exists(lay.install)
    again = runner.playbook(role_play(lay.vars(), state="absent"), env=HARNESS_ENV)
    assert again.rc == 0 and changed_tasks(again) == []

    runner.playbook(role_play(lay.vars()), env=HARNESS_ENV)
    other = os.path.join(lay.install, "other-component.py")
    with open(other, "w") as f:
        f.write("# not ours\n")
    res = runner.playbook(role_play(lay.vars(), state="absent"), env=HARNESS_ENV)
    assert res.rc == 0
    assert os.listdir(lay.install) == ["other-component.py"]


@pytest.mark.parametrize("bad, fragment", [
    ({"kubegpu_checkpoint_path": "/var/lib/kubelet dir/ckpt"}, "must be absolute"),
    ({"kubegpu_checkpoint_path": "relative/ckpt"}, "must be absolute"),
    ({"kubegpu_checkpoint_guard_kubelet_service": "kubelet"}, "must be absolute"),
    ({"kubegpu_checkpoint_guard_resource_names": ["nvidia.com/$x"]}, "must be absolute"),
    ({"kubegpu_checkpoint_guard_nvml_timeout": "soon"}, "kubegpu_checkpoint_guard_nvml_timeout"),
    ({"kubegpu_checkpoint_guard_state": "gone"}, "kubegpu_checkpoint_guard_state"),
])
def test_role_rejects_bad_settings_before_touching_anything(tmp_path, bad, fragment):
    runner = AnsibleRunner(REPO, ensure_collection_tree(REPO), str(tmp_path))
    lay = Layout(str(tmp_path))
    res = runner.playbook(role_play(lay.vars(**bad)), env=HARNESS_ENV)
    assert res.rc != 0
    failed = [t for t in res.tasks() if t.get("failed")]
    assert failed and fragment in failed[0]["msg"], failed
    assert not os.path.exists(lay.install) and not os.path.exists(lay.units)


# --------------------------------------------------------------------------- the guard

def test_stale_checkpoint_is_backed_up_and_removed(guard):
    data = guard.put("v2_numa.json")
    guard.driver_loaded()
    guard.smi_prints("a100x4_replaced.txt")
    rc, out, summary = guard.run()
    assert rc == 0, out
    assert summary["action"] == "removed" and summary["reason"] == "stale: %s" % GPU_B
    assert not os.path.exists(guard.lay.ckpt)
    assert guard.backups() == [summary["backup_file"]]
    assert stat.S_IMODE(os.stat(summary["backup_file"]).st_mode) == 0o600
    with open(summary["backup_file"], "rb") as f:
        assert f.read() == data
    assert "%s [stale]" % GPU_B in out and "is stale: 1 ids are not on this node" in out
    assert guard.smi_calls() == ["-L"]


def test_journal_priorities_under_systemd(guard):
    guard.put("v1_mig_legacy.json")
    guard.driver_loaded()
    guard.smi_prints("a100_mig_mixed.txt")  # R470+ driver: legacy MIG ids are gone
    rc, out, summary = guard.run(env={"JOURNAL_STREAM": "8:12345"})
    assert rc == 0 and summary["action"] == "removed", out
    lines = out.splitlines()
    assert all(ln[:3] in ("<3>", "<4>", "<5>", "<6>") for ln in lines), out
    assert any(ln.startswith("<5>removed ") for ln in lines)


def test_matching_checkpoint_is_left_alone(guard):
    data = guard.put("v2_mig_mixed.json")
    guard.driver_loaded()
    guard.smi_prints("a100_mig_mixed.txt")
    rc, out, summary = guard.run()
    assert rc == 0 and summary["action"] == "none" and summary["reason"] == "not stale", out
    assert guard.ckpt_bytes() == data and guard.backups() == []


def test_hung_nvml_never_deletes_and_is_bounded(guard):
    data = guard.put("v2_numa.json")
    guard.driver_loaded()
    guard.smi("trap '' TERM\nsleep 300 &\necho $$ $! > '%s'\nwait\n" % guard.pids)
    start = time.monotonic()
    rc, out, summary = guard.run()
    elapsed = time.monotonic() - start
    assert rc == 0, out
    assert summary["action"] == "none" and "did not answer within 2s" in summary["reason"]
    assert guard.ckpt_bytes() == data and guard.backups() == []
    # Bounded: 2 s nvml timeout + 2 s kill grace, far below TimeoutStartSec=33.
    assert elapsed < 33, elapsed
    for pid in guard.pids.read_text().split():
        deadline = time.monotonic() + 30  # waits for the exit; the deadline only bounds a failure
        while time.monotonic() < deadline:
            try:
                with open("/proc/%s/stat" % pid) as f:
                    if f.read().split(") ", 1)[1][0] == "Z":
                        break
            except (IOError, OSError):
                break
            time.sleep(0.05)
        else:
            raise AssertionError("nvidia-smi process %s survived" % pid)


@pytest.mark.parametrize("capture, rc, reason", [
    ("no_driver.txt", 9, "exited 9"),
    ("no_devices.txt", 6, "exited 6"),
    ("lost_gpu.txt", 0, "Unable to determine the device handle"),
    ("no_devices.txt", 0, "No devices found"),
])
def test_untrustworthy_device_lists_never_delete(guard, capture, rc, reason):
    data = guard.put("v2_numa.json")
    guard.driver_loaded()
    guard.smi_prints(capture, rc)
    code, out, summary = guard.run()
    assert code == 0 and summary["action"] == "none", out
    assert summary["reason"].startswith("untrusted device list") and reason in summary["reason"]
    assert guard.ckpt_bytes() == data and guard.backups() == []


def test_driver_not_loaded_waits_then_leaves_it(guard):
    data = guard.put("v2_numa.json")
    guard.smi_prints("a100x4_replaced.txt")
    rc, out, summary = guard.run()
    assert rc == 0 and summary["reason"] == "driver not loaded", out
    assert guard.smi_calls() == []
    assert guard.ckpt_bytes() == data


def test_nvidia_smi_missing_leaves_it(guard):
    data = guard.put("v2_numa.json")
    guard.driver_loaded()
    rc, out, summary = guard.run("--nvidia-smi", "kubegpu-no-such-nvidia-smi")
    assert rc == 0 and summary["reason"] == "nvidia-smi not found", out
    assert guard.ckpt_bytes() == data


def test_missing_checkpoint_and_non_nvidia_only_checkpoint_need_no_driver(guard):
    guard.smi_prints("a100x4.txt")
    rc, out, summary = guard.run()
    assert rc == 0 and summary["reason"] == "no checkpoint", out
    doc = {"Data": {"PodDeviceEntries": None,
                    "RegisteredDevices": {"amd.com/gpu": ["0000:c1:00.0"]}}, "Checksum": 7}
    with open(guard.lay.ckpt, "w") as f:
        json.dump(doc, f)
    rc, out, summary = guard.run()
    assert rc == 0 and summary["reason"] == "no matching devices", out
    assert guard.smi_calls() == []


def test_malformed_is_left_alone_unless_configured(guard):
    data = guard.put("bad_truncated.json")
    guard.driver_loaded()
    guard.smi_prints("a100x4.txt")
    rc, out, summary = guard.run()
    assert rc == 0 and summary["action"] == "none" and "unparsable" in summary["reason"], out
    assert guard.ckpt_bytes() == data
    rc, out, summary = guard.run("--remove-malformed")
    assert rc == 0 and summary["action"] == "removed", out
    with open(summary["backup_file"], "rb") as f:
        assert f.read() == data
    assert not os.path.exists(guard.lay.ckpt)
    assert guard.smi_calls() == []


def test_index_ids_are_not_stale(guard):
    data = guard.put("v2_index_ids.json")
    guard.driver_loaded()
    guard.smi_prints("a100x4.txt")
    rc, out, summary = guard.run()
    assert rc == 0 and summary["reason"] == "not stale", out
    assert "device-id-strategy=index" in out and guard.ckpt_bytes() == data


def test_dry_run_and_no_backup(guard):
    data = guard.put("v2_replicas.json")
    guard.driver_loaded()
    guard.smi_prints("a100x4_replaced.txt")  # GPU B and the MIG device are gone
    rc, out, summary = guard.run("--dry-run")
    assert rc == 0 and summary["action"] == "would-remove", out
    assert guard.ckpt_bytes() == data
    rc, out, summary = guard.run("--no-backup")
    assert rc == 0 and summary["action"] == "removed" and summary["backup_file"] is None, out
    assert guard.backups() == [] and not os.path.exists(guard.lay.ckpt)


def test_removal_failure_is_reported_and_exits_1(guard):
    """A read-only kubelet dir (bind mount gone wrong): the unlink fails, the guard says so."""
    data = guard.put("v2_numa.json")
    guard.driver_loaded()
    guard.smi_prints("a100x4_replaced.txt")
    # Root ignores permission bits; the immutable attribute stops even root.
    if subprocess.run(["chattr", "+i", guard.lay.kubelet], stderr=subprocess.DEVNULL,
                      check=False).returncode != 0:
        pytest.skip("chattr +i not supported on this filesystem")
    try:
        rc, out, summary = guard.run()
    finally:
        subprocess.run(["chattr", "-i", guard.lay.kubelet], check=True)
    assert rc == 1 and summary["action"] == "failed", out
    assert guard.ckpt_bytes() == data


@pytest.mark.skipif(not os.path.exists(PY38), reason="no Python 3.8 here")
def test_guard_runs_on_python_38(guard):
    data = guard.put("v1_k8s119.json")
    guard.driver_loaded()
    guard.smi_prints("a100x4_replaced.txt")
    rc, out, summary = guard.run(python=PY38)
    assert rc == 0 and summary["action"] == "removed", out
    with open(summary["backup_file"], "rb") as f:
        assert f.read() == data
