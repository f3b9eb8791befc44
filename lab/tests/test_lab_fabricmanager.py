"""The lab's fake fabric manager package (lab/kubegpu_lab/packages.py build_fabricmanager) and the
profile key that installs it (driver.fabric_manager): the .deb is built with dpkg-deb as the lab
builds it, its daemon refuses to start against a kernel module of another version (as
nv-fabricmanager does) and daemonises when the versions are equal."""
import os
import shutil
import signal
import subprocess

import pytest

from ansible_collections.kubegpu.fleet.lab.kubegpu_lab import packages, profiles
from ansible_collections.kubegpu.fleet.lab.kubegpu_lab.util import LabError

pytestmark = pytest.mark.skipif(not shutil.which("dpkg-deb"), reason="dpkg-deb is not installed")

NVRM = ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  %s  Tue Jul  8 18:43:39 UTC 2025\n"
        "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n")


@pytest.fixture(scope="module")
def fm_deb(tmp_path_factory):
    out = tmp_path_factory.mktemp("repo")
    work = tmp_path_factory.mktemp("work")
    cat = packages.catalog()
    packages.build_fabricmanager("570.158.01", cat, str(work), str(out))
    debs = sorted(os.listdir(str(out)))
    assert debs == ["nvidia-fabricmanager-570_570.158.01-0ubuntu1_amd64.deb"]
    root = tmp_path_factory.mktemp("root")
    deb = os.path.join(str(out), debs[0])
    subprocess.run(["dpkg-deb", "-x", deb, str(root)], check=True)
    return deb, root


def field(deb, name):
    return subprocess.run(["dpkg-deb", "-f", deb, name], check=True, stdout=subprocess.PIPE,
                          universal_newlines=True).stdout.strip()


def test_control_fields_follow_nvidia_packaging(fm_deb):
    deb, root = fm_deb
    assert field(deb, "Package") == "nvidia-fabricmanager-570"
    assert field(deb, "Version") == packages.deb_version("570.158.01")
    assert field(deb, "Provides") == "nvidia-fabricmanager"
    assert field(deb, "Conflicts") == "nvidia-fabricmanager"
    assert field(deb, "Depends") == ""  # NVIDIA's package does not depend on the driver
    unit = (root / "lib/systemd/system/nvidia-fabricmanager.service").read_text()
    assert "Type=forking" in unit and "ExecStart=/usr/bin/nv-fabricmanager -c " in unit
    assert "@" not in unit


def _run_fm(root, tmp_path, loaded):
    proc_dir = tmp_path / "proc" / "driver" / "nvidia"
    proc_dir.mkdir(parents=True)
    if loaded:
        (proc_dir / "version").write_text(NVRM % loaded)
    cfg = root / "usr/share/nvidia/nvswitch/fabricmanager.cfg"
    env = dict(os.environ, KUBEGPU_LAB_PROC=str(tmp_path / "proc"), KUBEGPU_LAB_RUN=str(tmp_path / "run"))
    return subprocess.run([str(root / "usr/bin/nv-fabricmanager"), "-c", str(cfg)], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                          stdin=subprocess.DEVNULL, timeout=30, check=False)


def test_version_flag(fm_deb):
    _deb, root = fm_deb
    out = subprocess.run([str(root / "usr/bin/nv-fabricmanager"), "-v"], stdout=subprocess.PIPE,
                         universal_newlines=True, check=True).stdout
    assert out.strip() == "Fabric Manager version is : 570.158.01"


def test_refuses_a_kernel_module_of_another_version(fm_deb, tmp_path):
    _deb, root = fm_deb
    proc = _run_fm(root, tmp_path, "570.172.08")
    assert proc.returncode == 1
    assert ("fabric manager NVIDIA GPU driver interface version 570.158.01 don't match with driver "
            "version 570.172.08") in proc.stderr
    assert not (tmp_path / "run").exists()


def test_refuses_without_a_loaded_module(fm_deb, tmp_path):
    _deb, root = fm_deb
    proc = _run_fm(root, tmp_path, None)
    assert proc.returncode == 1 and "not loaded" in proc.stderr


def test_daemonises_with_the_matching_module(fm_deb, tmp_path):
    _deb, root = fm_deb
    proc = _run_fm(root, tmp_path, "570.158.01")
    assert proc.returncode == 0, proc.stderr
    pid = int((tmp_path / "run/nvidia-fabricmanager/nv-fabricmanager.pid").read_text())
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            assert f.read().split(b"\0")[0] == b"nv-fabricmanager"
    finally:
        os.kill(pid, signal.SIGTERM)


def _node(fm, version="570.158.01"):
    node = profiles.expand({"nodes": [{"name": "fm", "driver": {"version": version, "fabric_manager": fm}}]})
    return node["nodes"][0]


def test_profile_key_installs_fabric_manager():
    cat = packages.catalog()
    assert "nvidia-fabricmanager-570=570.158.01-0ubuntu1" in profiles.packages_for(_node("same"), cat)
    assert "nvidia-fabricmanager-570=570.148.08-0ubuntu1" in profiles.packages_for(_node("570.148.08"), cat)
    assert not [p for p in profiles.packages_for(_node(None), cat) if "fabricmanager" in p]
    with pytest.raises(LabError, match="fabric_manager 570.1.2 is not a driver version"):
        profiles.packages_for(_node("570.1.2"), cat)
    with pytest.raises(LabError, match="driver.fabric_manager must be null, same or a driver version, not 'yes'"):
        _node("yes")
