"""The fake NVIDIA packages and kernel modules behave like a real node's driver stack.

* the kernel module version is the one loaded at boot: upgrading the packages gives
  NVML_ERROR_LIB_RM_VERSION_MISMATCH from the new libnvidia-ml.so.1 until the node reboots;
* Ubuntu's package set and dependency shape: compute-utils only recommended by the driver
  metapackage, removed by apt when the libraries go below it;
* nvidia-modprobe / modprobe load nvidia-uvm with a dynamic major, rmmod refuses a busy module;
* nvidia-ctk before 1.14.6 cannot create /dev/char symlinks with a >= 550.40 driver.
"""
import pytest

from lab_fixture import device_plugin_ds, lab_factory, wait_for  # noqa: F401  pylint: disable=unused-import

OLD = "570.158.01"
NEW = "570.172.08"
PKGS = ("nvidia-driver-570", "libnvidia-compute-570", "nvidia-utils-570", "nvidia-kernel-common-570",
        "nvidia-dkms-570")

PROFILE = {
    "name": "driver",
    "defaults": {"gpus": {"count": 2}, "kubelet": {"config": {"kubeReserved": {"cpu": "500m", "memory": "5489Mi"}}}},
    "nodes": [
        {"name": "drv-old", "driver": {"version": OLD, "compute_utils": "none", "container_toolkit": "1.14.3"},
         "uvm": "never"},
        {"name": "drv-new", "driver": {"version": NEW, "compute_utils": "same", "container_toolkit": "1.17.8"}},
    ],
    "cluster": {"manifests": [device_plugin_ds()]},
}


@pytest.fixture(scope="module")
def lab(lab_factory):  # noqa: F811
    return lab_factory(PROFILE)


def installed_packages(lab, node):
    out = lab.ssh(node, "dpkg-query -W -f '${db:Status-Abbrev} ${Package} ${Version}\\n' 'nvidia-*' 'libnvidia-*'").stdout
    return {f[1]: f[2] for f in (line.split() for line in out.splitlines()) if f[0] == "ii"}


def install(version):
    return "apt-get install -y -q --allow-downgrades --no-install-recommends %s" % " ".join(
        "%s=%s-0ubuntu1" % (p, version) for p in PKGS)


def test_packages_have_ubuntu_names_and_versions(lab):
    installed = installed_packages(lab, "drv-new")
    for p in PKGS + ("nvidia-compute-utils-570", "nvidia-modprobe"):
        assert installed[p] == NEW + "-0ubuntu1", p
    assert installed["nvidia-container-toolkit"] == "1.17.8-1"
    lib = lab.ssh("drv-new", "readlink /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1").stdout.strip()
    assert lib == "libnvidia-ml.so.%s" % NEW
    deps = lab.ssh("drv-new", "apt-cache show nvidia-driver-570=%s-0ubuntu1" % NEW).stdout
    assert "Recommends: nvidia-compute-utils-570" in deps
    assert "libnvidia-compute-570 (= %s-0ubuntu1)" % NEW in deps


def test_compute_utils_absent_means_no_mps_control(lab):
    assert lab.ssh("drv-old", "command -v nvidia-cuda-mps-control", check=False).returncode != 0
    assert "nvidia-compute-utils-570" not in installed_packages(lab, "drv-old")
    assert installed_packages(lab, "drv-old")["nvidia-driver-570"] == OLD + "-0ubuntu1"
    mps = lab.ssh("drv-new", "nvidia-cuda-mps-control -d && pgrep -f nvidia-cuda-mps-control").stdout
    assert mps.strip()


def test_downgrading_the_libraries_below_compute_utils_removes_it(lab):
    proc = lab.ssh("drv-new", "apt-get install -s --allow-downgrades --no-install-recommends %s"
                   % " ".join("%s=%s-0ubuntu1" % (p, OLD) for p in PKGS))
    assert "Remv nvidia-compute-utils-570" in proc.stdout


def test_modprobe_loads_uvm_with_a_dynamic_major_and_rmmod_refuses_busy_modules(lab):
    before = lab.ssh("drv-old", "cat /run/kubegpu-lab/proc/modules").stdout
    assert "nvidia_uvm" not in before and "nvidia " in before
    assert lab.ssh("drv-old", "test -e /dev/nvidia-uvm", check=False).returncode != 0
    assert lab.proc_major("drv-old", "nvidia-uvm") is None
    lab.ssh("drv-old", "nvidia-modprobe -u -c=0")
    uvm = lab.proc_major("drv-old", "nvidia-uvm")
    caps = lab.proc_major("drv-old", "nvidia-caps")
    assert uvm is not None and uvm not in (195, caps)
    st = lab.ssh("drv-old", "stat -c '%t %T' /dev/nvidia-uvm /dev/nvidia-uvm-tools").stdout.split()
    assert [int(x, 16) for x in st] == [uvm, 0, uvm, 1]
    assert "nvidia_uvm" in lab.ssh("drv-old", "cat /run/kubegpu-lab/proc/modules").stdout
    busy = lab.ssh("drv-old", "modprobe -r nvidia", check=False)
    assert busy.returncode != 0 and "in use by: nvidia_uvm" in busy.stderr
    lab.ssh("drv-old", "modprobe -r nvidia_uvm")
    assert "nvidia_uvm" not in lab.ssh("drv-old", "cat /run/kubegpu-lab/proc/modules").stdout


def test_nvidia_ctk_before_1_14_6_cannot_create_dev_char_symlinks_for_new_drivers(lab):
    old = lab.ssh("drv-old", "nvidia-ctk system create-dev-char-symlinks --create-all", check=False)
    assert old.returncode == 1
    assert "nvidia-frontend" in old.stderr
    assert lab.ssh("drv-old", "systemctl is-failed nvidia-dev-char-symlinks", check=False).stdout.strip() == "failed"
    new = lab.ssh("drv-new", "rm -rf /dev/char/195:*; nvidia-ctk system create-dev-char-symlinks --create-all "
                             "&& readlink /dev/char/195:0 /dev/char/195:255")
    assert new.stdout.split() == ["../nvidia0", "../nvidiactl"]


def test_upgrade_without_reboot_is_a_version_mismatch_until_the_node_reboots(lab):
    node = lab.node("drv-old")
    lab.ssh("drv-old", "apt-get update -q >/dev/null && " + install(NEW), timeout=180)
    smi = lab.ssh("drv-old", "nvidia-smi", check=False)
    assert smi.returncode == 18
    assert "Driver/library version mismatch" in smi.stdout + smi.stderr
    running = lab.ssh("drv-old", "head -1 /proc/driver/nvidia/version").stdout
    assert OLD in running
    on_disk = lab.ssh("drv-old", "grep ^version: /lib/modules/$(uname -r)/updates/dkms/nvidia.ko").stdout
    assert NEW in on_disk
    # a module of the new version cannot be inserted next to the running old core module
    late = lab.ssh("drv-old", "modprobe nvidia_uvm", check=False)
    assert late.returncode != 0 and "API mismatch" in late.stderr
    # the NVML C API itself, through ctypes
    rc = lab.ssh("drv-old", "python3 -c \"import ctypes; print(ctypes.CDLL('libnvidia-ml.so.1').nvmlInit_v2())\"")
    assert rc.stdout.strip() == "18"
    node.reboot()
    smi = lab.ssh("drv-old", "nvidia-smi -L && head -1 /proc/driver/nvidia/version")
    assert NEW in smi.stdout and OLD not in smi.stdout
    wait_for(lambda: lab.node_obj("drv-old")["status"]["allocatable"].get("nvidia.com/gpu") == "2", 60,
             "drv-old advertising its GPUs again")
