"""Unit tests for plugins/module_utils/driver/upgrade_plan_run.py (driver_upgrade_plan's body).

The run function is driven through its real code path: the module's bounded command runner
(``bounded_runner`` with UPGRADE_PLAN_ENVIRON) runs fake ``dpkg-query``/``apt-cache``/``dpkg``/
``rpm``/``dnf`` shell scripts from a temp directory that print the package listings in the
formats the real tools print, against a temp package root and a temp procfs. The scripts log
their arguments and locale so the tests see what the module asked for.
"""
import os

import pytest

from ansible_collections.kubegpu.fleet.plugins.module_utils._common.node_probes import ProbeFailed
from ansible_collections.kubegpu.fleet.plugins.module_utils.driver import upgrade as du
from ansible_collections.kubegpu.fleet.plugins.module_utils.driver.node import bounded_runner
from ansible_collections.kubegpu.fleet.plugins.module_utils.driver.upgrade_plan_run import (
    UPGRADE_PLAN_ENVIRON,
    candidate_names_apt,
    driver_upgrade_plan,
    lock_report,
)

OLD, NEW = "570.158.01", "570.172.08"
NVRM = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  %s  Tue Jul  8 18:30:54 UTC 2025\n" % OLD
APT_SET = ["nvidia-driver-570", "libnvidia-compute-570", "nvidia-utils-570", "nvidia-dkms-570",
           "nvidia-kernel-common-570"]
RHEL_570 = ["nvidia-driver", "nvidia-driver-libs", "kmod-nvidia-latest-dkms", "nvidia-kmod-common"]
DEFAULTS = dict(version=None, branch=None, fixed_releases=[], allow_branch_change=False,
                allow_downgrade=False, compute_utils=True, package_manager="auto",
                dnf_module="nvidia-driver", dnf_flavor="auto",
                dnf_versionlock_path="/etc/dnf/plugins/versionlock.list", proc_path="/proc",
                command_timeout=30.0)


class Node(object):
    """A temp package root, procfs and tool directory; ``plan()`` runs the real run function."""

    def __init__(self, tmp_path):
        self.tmp = tmp_path
        self.bin = tmp_path / "bin"
        self.bin.mkdir()
        self.root = tmp_path / "root"
        self.proc = tmp_path / "proc"
        self.log = tmp_path / "calls.log"
        self.warnings = []

    def write(self, rel, text):
        path = self.tmp / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return str(path)

    def tool(self, name, output, rc=0, stderr=""):
        out = self.write("out/%s" % name, output)
        err = self.write("out/%s.err" % name, stderr)
        script = self.bin / name
        script.write_text("#!/bin/sh\necho \"%s LC_ALL=$LC_ALL $*\" >> '%s'\ncat '%s'\ncat '%s' >&2\nexit %d\n"
                          % (name, self.log, out, err, rc))
        script.chmod(0o755)

    def apt(self, installed, madison, arch="amd64"):
        self.write("root/var/lib/dpkg/status", "")
        self.tool("dpkg-query", "".join("%s\t%s\tii \tamd64\n" % (n, v) for n, v in installed))
        self.tool("apt-cache", "".join(" %s | %s | http://archive.ubuntu.com/ubuntu noble-updates/restricted "
                                       "amd64 Packages\n" % (n, v) for n, v in madison))
        self.tool("dpkg", arch + "\n")

    def get_bin_path(self, name, required=False):
        path = self.bin / name
        if path.exists():
            return str(path)
        if required:
            raise AssertionError("the test node has no %s" % name)
        return None

    def calls(self):
        return self.log.read_text().splitlines() if self.log.exists() else []

    def plan(self, diff=False, **params):
        p = dict(DEFAULTS, proc_path=str(self.proc), package_root=str(self.root))
        p.update(params)
        run = bounded_runner(p["command_timeout"], environ_update=UPGRADE_PLAN_ENVIRON)
        return driver_upgrade_plan(p, run, self.get_bin_path, self.warnings.append, diff=diff)


@pytest.fixture
def node(tmp_path):
    n = Node(tmp_path)
    n.write("proc/driver/nvidia/version", NVRM)
    return n


def test_apt_plan_through_the_runner(node):
    node.apt([(n, OLD + "-0ubuntu1") for n in APT_SET],
             [(n, v + "-0ubuntu1") for n in APT_SET + ["nvidia-compute-utils-570"] for v in (OLD, NEW)])
    res = node.plan(diff=True, fixed_releases=[NEW, "580.65.06"])
    assert res["changed"] is False and res["manager"] == "apt"
    assert res["installed_version"] == OLD and res["target_version"] == NEW
    assert res["target_branch"] == 570 and res["kernel_module_version"] == OLD
    assert res["reboot_pending"] is True and res["reboot_required"] is True
    assert res["target_reason"] == "first fixed release of branch 570 in the catalog"
    assert sorted(res["install"]) == sorted("%s=%s-0ubuntu1" % (n, NEW)
                                            for n in APT_SET + ["nvidia-compute-utils-570"])
    assert res["diff"]["before_header"] == "NVIDIA driver packages (installed)"
    assert res["diff"]["after_header"] == "NVIDIA driver packages (plan)"
    assert isinstance(res["locks"], list)
    calls = node.calls()
    madison = [c for c in calls if c.startswith("apt-cache ")]
    assert len(madison) == 1 and "LC_ALL=C madison " in madison[0]
    asked = madison[0].split(" madison ", 1)[1].split()
    assert asked == candidate_names_apt(
        [{"name": n, "installed": True} for n in APT_SET], 570)
    assert any(c.startswith("dpkg LC_ALL=C --print-architecture") for c in calls)
    assert not node.warnings


def test_apt_plan_without_diff_and_nothing_to_do(node):
    node.apt([(n, NEW + "-0ubuntu1") for n in APT_SET + ["nvidia-compute-utils-570"]],
             [(n, NEW + "-0ubuntu1") for n in APT_SET + ["nvidia-compute-utils-570"]])
    node.write("proc/driver/nvidia/version", NVRM.replace(OLD, NEW))
    res = node.plan(version=NEW)
    assert "diff" not in res
    assert res["nothing_to_do"] is True and res["changes"] == []
    assert res["target_reason"] == "set explicitly" and res["reboot_pending"] is False


def test_apt_cache_failure_names_the_command(node):
    node.apt([(n, OLD + "-0ubuntu1") for n in APT_SET], [])
    node.tool("apt-cache", "", rc=100, stderr="E: Could not get lock /var/lib/apt/lists/lock\n")
    with pytest.raises(ProbeFailed) as e:
        node.plan(version=NEW)
    assert e.value.msg == "apt-cache madison failed (rc=100): E: Could not get lock /var/lib/apt/lists/lock"
    assert e.value.result["command"][0] == str(node.bin / "apt-cache")
    assert e.value.result["command"][1] == "madison"


def test_version_outside_the_branch_fails_naming_both(node):
    node.apt([(n, OLD + "-0ubuntu1") for n in APT_SET], [])
    with pytest.raises(ProbeFailed) as e:
        node.plan(version="580.65.06", branch=570)
    assert e.value.msg == "version 580.65.06 is not in branch 570"
    assert e.value.result["installed_version"] == OLD
    assert e.value.result["kernel_module_version"] == OLD and e.value.result["changed"] is False


def test_no_default_target_asks_for_an_explicit_version(node):
    node.apt([(n, OLD + "-0ubuntu1") for n in APT_SET], [])
    with pytest.raises(ProbeFailed) as e:
        node.plan(branch=575, fixed_releases=["580.65.06"])
    assert e.value.msg == ("the catalog has no fixed release for branch 575 and the node runs %s: set the "
                           "target version explicitly (kubegpu_driver_version)" % OLD)
    assert e.value.result["installed_version"] == OLD


def test_no_installed_driver(node):
    node.apt([("nvidia-container-toolkit", "1.17.8-1")], [])
    with pytest.raises(ProbeFailed) as e:
        node.plan(version=NEW)
    assert e.value.msg.startswith("no installed NVIDIA driver found in the package database")
    assert [p["name"] for p in e.value.result["packages"]] == ["nvidia-container-toolkit"]


def test_package_manager_must_match_the_database(node):
    node.apt([(n, OLD + "-0ubuntu1") for n in APT_SET], [])
    with pytest.raises(ProbeFailed) as e:
        node.plan(version=NEW, package_manager="dnf")
    assert e.value.msg == "package_manager dnf does not match the package database found (dpkg)"


def test_no_package_database(node):
    with pytest.raises(ProbeFailed) as e:
        node.plan(version=NEW)
    assert e.value.msg == "cannot list the installed NVIDIA packages: no dpkg or rpm database under %s" % node.root


def test_bad_dnf_module_fails_before_anything_runs(node):
    node.apt([(n, OLD + "-0ubuntu1") for n in APT_SET], [])
    with pytest.raises(ProbeFailed) as e:
        node.plan(version=NEW, dnf_module="*")
    assert "dnf_module" in e.value.msg and "'*'" in e.value.msg
    assert e.value.result == dict(changed=False, locks=[], kernel_module_version=None)
    assert node.calls() == []


def test_unreadable_kernel_module_version_warns(node):
    node.apt([(n, OLD + "-0ubuntu1") for n in APT_SET],
             [(n, NEW + "-0ubuntu1") for n in APT_SET + ["nvidia-compute-utils-570"]])
    os.remove(str(node.proc / "driver" / "nvidia" / "version"))
    os.mkfifo(str(node.proc / "driver" / "nvidia" / "version"))
    res = node.plan(version=NEW)
    assert res["kernel_module_version"] is None and res["reboot_pending"] is False
    assert any("kernel module version unknown" in w for w in node.warnings), node.warnings


def test_dnf_plan_through_the_runner(node):
    node.write("root/var/lib/rpm/rpmdb.sqlite", "")
    node.tool("rpm", "".join("%s\t3:%s-1.el9\tii \tx86_64\n" % (n, OLD) for n in RHEL_570))
    node.tool("dnf", "nvidia-driver   570-dkms [e]   default [d]   Nvidia driver for 570-dkms branch\n"
              + "".join("%s 3:%s-1.el9 x86_64\n" % (n, v) for n in RHEL_570 + ["nvidia-driver-cuda"]
                        for v in (OLD, NEW)))
    locks = node.write("versionlock.list", "nvidia-driver-3:%s-1.el9.*\n" % OLD)
    res = node.plan(version=NEW, dnf_versionlock_path=locks)
    assert res["manager"] == "dnf" and res["target_version"] == NEW
    assert sorted(res["install"]) == sorted("%s-3:%s-1.el9" % (n, NEW) for n in RHEL_570 + ["nvidia-driver-cuda"])
    assert res["dnf"]["versionlock_delete"] == ["nvidia-driver"]
    dnf_calls = [c for c in node.calls() if c.startswith("dnf ")]
    assert dnf_calls[0] == "dnf LC_ALL=C -q module list --enabled nvidia-driver"
    assert "repoquery --disable-modular-filtering --showduplicates" in dnf_calls[1]


def test_dnf_unreadable_versionlock_fails_naming_the_option(node):
    node.write("root/var/lib/rpm/rpmdb.sqlite", "")
    node.tool("rpm", "".join("%s\t3:%s-1.el9\tii \tx86_64\n" % (n, OLD) for n in RHEL_570))
    node.tool("dnf", "")
    fifo = str(node.tmp / "locks.fifo")
    os.mkfifo(fifo)
    with pytest.raises(ProbeFailed) as e:
        node.plan(version=NEW, dnf_versionlock_path=fifo)
    assert e.value.msg.startswith("cannot read dnf_versionlock_path %s: " % fifo) and "FIFO" in e.value.msg


def test_candidate_names_apt_renames_for_a_branch_move():
    pkgs = [{"name": "nvidia-driver-570-server", "installed": True},
            {"name": "libnvidia-compute-570-server", "installed": True},
            {"name": "nvidia-utils-570", "installed": False},
            {"name": "nvidia-container-toolkit", "installed": True}]
    assert candidate_names_apt(pkgs, 580) == sorted([
        "nvidia-driver-570-server", "nvidia-driver-580-server", "libnvidia-compute-570-server",
        "libnvidia-compute-580-server", "nvidia-compute-utils-580", "nvidia-compute-utils-580-server"])


def test_lock_report_names_the_holder(tmp_path):
    held = [p for p in du.APT_LOCK_FILES if os.path.exists(p)]
    if not held:
        pytest.skip("no dpkg/apt lock file on this host")
    st = os.stat(held[0])
    proc = tmp_path / "proc"
    (proc / "4242").mkdir(parents=True)
    (proc / "4242" / "cmdline").write_bytes(b"/usr/bin/apt-get\0install\0-y\0")
    (proc / "locks").write_text("1: POSIX  ADVISORY  WRITE 4242 %02x:%02x:%d 0 EOF\n"
                                "2: FLOCK  ADVISORY  WRITE 77 08:01:99 0 EOF\n"
                                % (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino))
    warnings = []
    holders = lock_report(str(proc), warn=warnings.append)
    assert [h["pid"] for h in holders] == [4242]
    assert holders[0]["path"] == held[0] and holders[0]["command"] == "/usr/bin/apt-get install -y"
    assert holders[0]["description"] == "pid 4242 (/usr/bin/apt-get install -y) holds %s (POSIX WRITE lock)" % held[0]
    assert not warnings


def test_lock_report_warns_when_proc_locks_is_unreadable(tmp_path):
    if not any(os.path.exists(p) for p in du.APT_LOCK_FILES):
        pytest.skip("no dpkg/apt lock file on this host")
    proc = tmp_path / "proc"
    proc.mkdir()
    os.mkfifo(str(proc / "locks"))
    warnings = []
    assert lock_report(str(proc), warn=warnings.append) == []
    assert len(warnings) == 1 and "holders of the apt/dpkg locks unknown" in warnings[0]
