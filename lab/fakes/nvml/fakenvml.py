# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Helpers for the fake NVIDIA userspace in this directory (used by the tests and the lab).

* :func:`build` compiles the fake ``libnvidia-ml.so.1`` and ``nvidia-smi`` with gcc (via
  ``build.sh``) into ``lab/fakes/build/<version>/``, a driver-root-shaped tree.
* :func:`gpu`, :func:`hgx` and :func:`write_scenario` write scenario files (README.md).
* :func:`write_procfs` and :func:`make_dev_nodes` build procfs / dev trees shaped like a GPU node.
* :class:`FreezerCgroup` owns a cgroup v1 freezer cgroup for the "unkillable hang" scenario and
  thaws, reaps and removes everything in it afterwards.
"""
from __future__ import absolute_import, division, print_function

import contextlib
import ctypes
import errno
import json
import os
import shutil
import stat
import subprocess
import time
import uuid as uuidlib

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
BUILD_ROOT = os.path.join(REPO, "lab", "fakes", "build")
SOURCES = ("fake_nvml.c", "fake_json.c", "fake_json.h", "nvml_fake.h", "nvidia_smi.c", "build.sh")
FREEZER_ROOT = "/sys/fs/cgroup/freezer"
DEFAULT_VERSION = "570.172.08"

# Majors as a >= 550.40 node registers them; nvidia-uvm and nvidia-caps are dynamic.
GPU_MAJOR = 195
UVM_MAJOR = 511
CAPS_MAJOR = 236


class DriverRoot(object):
    """A built fake driver userspace: ``root`` works as gpu_facts' driver_root."""

    def __init__(self, root, version):
        self.root = root
        self.version = version
        libdirs = [d for d in os.listdir(os.path.join(root, "usr", "lib"))
                   if os.path.exists(os.path.join(root, "usr", "lib", d, "libnvidia-ml.so.1"))]
        self.libdir = os.path.join(root, "usr", "lib", libdirs[0]) if libdirs else os.path.join(root, "usr", "lib")
        self.library = os.path.join(self.libdir, "libnvidia-ml.so.1")
        self.smi = os.path.join(root, "usr", "bin", "nvidia-smi")

    def copy_to(self, dest):
        """Copy the tree (symlinks kept) to ``dest``, e.g. ``<tmp>/run/nvidia/driver``."""
        shutil.copytree(self.root, dest, symlinks=True)
        return DriverRoot(dest, self.version)


def _newest_source():
    return max(os.stat(os.path.join(HERE, s)).st_mtime for s in SOURCES)


def build(version=DEFAULT_VERSION, out=None):
    """Build (or reuse an up-to-date build of) the fake userspace for ``version``."""
    out = out or os.path.join(BUILD_ROOT, version)
    lib = None
    if os.path.isdir(out):
        try:
            d = DriverRoot(out, version)
            lib = os.path.realpath(d.library)
            if os.stat(lib).st_mtime >= _newest_source() and os.path.exists(d.smi):
                return d
        except OSError:
            pass
    proc = subprocess.run([os.path.join(HERE, "build.sh"), out, "--version", version],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                          check=False)
    if proc.returncode != 0:
        raise RuntimeError("building the fake NVML %s failed:\n%s" % (version, proc.stdout))
    return DriverRoot(out, version)


# ------------------------------------------------------------------------------- scenarios

def gpu_uuid(i):
    return "GPU-%08x-0000-4000-8000-%012x" % (0x6b756265, i)


def mig_uuid(i, j):
    return "MIG-%08x-%04x-5000-8000-%012x" % (0x6d696721, i, j)


def gpu(i, mig=None, profiles=None, **extra):
    """One GPU. ``mig``: None (MIG capable, disabled), True/False, or "N/A" (not capable).
    ``profiles``: MIG device profiles (implies MIG enabled)."""
    spec = {"uuid": gpu_uuid(i), "name": "NVIDIA H100 80GB HBM3",
            "pci_bus_id": "00000000:%02X:00.0" % (0x18 + 0x10 * i), "minor_number": i}
    if profiles:
        mig = True if mig is None else mig
        spec["mig_devices"] = [
            {"uuid": mig_uuid(i, j), "profile": p, "gpu_instance_id": 7 + j if p.startswith("1g") else j + 1,
             "compute_instance_id": 0}
            for j, p in enumerate(profiles)]
    if mig == "N/A":
        spec["mig_mode"] = None
    elif mig is not None:
        spec["mig_mode"] = {"current": bool(mig), "pending": bool(mig)}
    spec.update(extra)
    return spec


def vgpu_guest(n=1, profile="NVIDIA H100XM-80C"):
    """A VM with ``n`` vGPUs on NVIDIA's vGPU guest driver: NVML reports each GPU's
    virtualization mode as NVML_GPU_VIRTUALIZATION_MODE_VGPU ("virtualization_mode": "vgpu"),
    named after its vGPU type, without MIG (a C-series vGPU of a whole GPU)."""
    return [gpu(i, mig="N/A", name=profile, virtualization_mode="vgpu") for i in range(n)]


def hgx(n=8, migs_per_gpu=7, profile="1g.10gb"):
    """``n`` GPUs, each split into ``migs_per_gpu`` MIG devices (0 = MIG disabled)."""
    return [gpu(i, profiles=[profile] * migs_per_gpu if migs_per_gpu else None,
                mig=None if migs_per_gpu else False) for i in range(n)]


def write_scenario(path, gpus, **extra):
    """Write a scenario file; ``extra`` are top-level keys (driver_version, hang, errors, ...)."""
    data = {"gpus": gpus}
    data.update(extra)
    with open(path, "w") as f:
        json.dump(data, f, indent=1)
    return path


# --------------------------------------------------------------------------- procfs, /dev

def nvrm_line(version, open_module=True):
    if open_module:
        return ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  %s  Release Build  "
                "(dvs-builder@U16-I3-B13-02-1)  Tue Jul  8 18:54:52 UTC 2025\n"
                "GCC version:  gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04)\n" % version)
    return ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  %s  Tue Jul  8 18:54:52 UTC 2025\n"
            "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n" % version)


def mig_cap_minor(gpu_minor, gi, ci=None):
    """Minor of /dev/nvidia-caps/nvidia-cap<N> as the driver numbers them in mig-minors:
    config=1, monitor=2, then per GPU 15 GPU instances x (access + 8 compute instances)."""
    base = 3 + gpu_minor * 15 * 9 + gi * 9
    return base if ci is None else base + 1 + ci


def mig_minors_text(gpus=8):
    lines = ["config 1", "monitor 2"]
    for g in range(gpus):
        for gi in range(15):
            lines.append("gpu%d/gi%d/access %d" % (g, gi, mig_cap_minor(g, gi)))
            for ci in range(8):
                lines.append("gpu%d/gi%d/ci%d/access %d" % (g, gi, ci, mig_cap_minor(g, gi, ci)))
    return "\n".join(lines) + "\n"


def _write(path, text):
    d = os.path.dirname(path)
    if not os.path.isdir(d):
        os.makedirs(d)
    with open(path, "w") as f:
        f.write(text)


def write_procfs(root, version=DEFAULT_VERSION, gpu_major_name="nvidia", uvm=True, caps=True,
                 modules=("nvidia", "nvidia_uvm", "nvidia_modeset"), gpus=(), mig_instances=None):
    """A procfs tree for a node whose kernel module ``version`` is loaded (None: no driver).

    ``gpus``: GPU specs (as :func:`gpu`) listed in driver/nvidia/gpus; ``mig_instances``:
    ``{gpu_minor: [(gi, ci), ...]}`` exposed under driver/nvidia/capabilities.
    """
    chars = ["  1 mem", "  4 /dev/vc/0", "  4 tty", "  5 /dev/tty", " 10 misc", "136 pts"]
    if version is not None:
        chars.append("%d %s" % (GPU_MAJOR, gpu_major_name))
        if caps:
            chars.append("%d nvidia-caps" % CAPS_MAJOR)
        if uvm:
            chars.append("%d nvidia-uvm" % UVM_MAJOR)
    _write(os.path.join(root, "devices"), "Character devices:\n%s\n\nBlock devices:\n  7 loop\n259 blkext\n"
           % "\n".join(chars))
    mods = ["ext4 1007616 2 - Live 0x0000000000000000", "overlay 212992 0 - Live 0x0000000000000000"]
    if version is not None:
        sizes = {"nvidia": 11431936, "nvidia_uvm": 4956160, "nvidia_modeset": 1806336,
                 "nvidia_drm": 126976, "nvidia_peermem": 16384}
        for m in modules:
            mods.append("%s %d %d - Live 0x0000000000000000" % (m, sizes.get(m, 16384), 2))
    _write(os.path.join(root, "modules"), "\n".join(mods) + "\n")
    if version is None:
        return root
    _write(os.path.join(root, "driver", "nvidia", "version"), nvrm_line(version))
    _write(os.path.join(root, "driver", "nvidia-caps", "mig-minors"), mig_minors_text(max(len(gpus), 8)))
    for spec in gpus:
        bus = spec["pci_bus_id"][4:].lower()
        _write(os.path.join(root, "driver", "nvidia", "gpus", bus, "information"),
               "Model: \t\t %s\nIRQ:   \t\t 164\nGPU UUID: \t %s\nVideo BIOS: \t 96.00.99.00.01\n"
               "Bus Type: \t PCIe\nDMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\n"
               "Bus Location: \t %s\nDevice Minor: \t %d\nGPU Excluded:\t No\n"
               % (spec["name"], spec["uuid"], bus, spec["minor_number"]))
    for minor, instances in (mig_instances or {}).items():
        for gi, ci in instances:
            base = os.path.join(root, "driver", "nvidia", "capabilities", "gpu%d" % minor, "mig", "gi%d" % gi)
            _write(os.path.join(base, "access"), "DeviceFileMinor: %d\nDeviceFileMode: 292\nDeviceFileModify: 1\n"
                   % mig_cap_minor(minor, gi))
            _write(os.path.join(base, "ci%d" % ci, "access"), "DeviceFileMinor: %d\nDeviceFileMode: 292\n"
                   "DeviceFileModify: 1\n" % mig_cap_minor(minor, gi, ci))
    return root


def make_dev_nodes(root, nodes):
    """mknod character devices: ``nodes`` is ``[(relative name, major, minor), ...]``."""
    for name, major, minor in nodes:
        path = os.path.join(root, name)
        if not os.path.isdir(os.path.dirname(path)):
            os.makedirs(os.path.dirname(path))
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(major, minor))
    return root


def standard_dev_nodes(gpus, mig=()):
    """Correct nodes for GPU minors ``gpus`` plus MIG caps ``mig`` = [(gpu_minor, gi, ci)]."""
    nodes = [("nvidiactl", GPU_MAJOR, 255), ("nvidia-modeset", GPU_MAJOR, 254),
             ("nvidia-uvm", UVM_MAJOR, 0), ("nvidia-uvm-tools", UVM_MAJOR, 1)]
    nodes += [("nvidia%d" % m, GPU_MAJOR, m) for m in gpus]
    seen = set()
    for g, gi, ci in mig:
        for minor in (mig_cap_minor(g, gi), mig_cap_minor(g, gi, ci)):
            if minor not in seen:
                seen.add(minor)
                nodes.append(("nvidia-caps/nvidia-cap%d" % minor, CAPS_MAJOR, minor))
    return nodes


def dev_nodes_for(gpus):
    """standard_dev_nodes for scenario GPUs (gpu() dicts): their minors and MIG devices."""
    mig = [(g["minor_number"], m["gpu_instance_id"], m["compute_instance_id"])
           for g in gpus for m in g.get("mig_devices", [])]
    return standard_dev_nodes([g["minor_number"] for g in gpus], mig)


def write_driver_files(proc, scenario_path, gpus, version=DEFAULT_VERSION, procfs_args=None, **scenario):
    """A node's NVIDIA procfs (kernel module ``version``, None = not loaded) and the fake NVML's
    scenario, whose kernel module version is read from that procfs unless the scenario says."""
    write_procfs(proc, version=version, gpus=gpus, **(procfs_args or {}))
    scenario.setdefault("kernel_module_version_file", os.path.join(proc, "driver", "nvidia", "version"))
    write_scenario(scenario_path, gpus, **scenario)


# ------------------------------------------------------------------------- freezer cgroup

PR_SET_CHILD_SUBREAPER = 36


def set_child_subreaper(on):
    """Make this process the reaper of orphaned descendants (so tests can reap what a module
    left behind). Returns True on success."""
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(PR_SET_CHILD_SUBREAPER, 1 if on else 0, 0, 0, 0) == 0


def freezer_available():
    return os.path.isfile(os.path.join(FREEZER_ROOT, "cgroup.procs")) and os.access(FREEZER_ROOT, os.W_OK)


class FreezerCgroup(object):
    """A cgroup v1 freezer cgroup named for one test; :meth:`cleanup` thaws, reaps and removes it."""

    def __init__(self, prefix="kubegpu-test"):
        self.path = os.path.join(FREEZER_ROOT, "%s-%s" % (prefix, uuidlib.uuid4().hex[:12]))

    def pids(self):
        try:
            with open(os.path.join(self.path, "cgroup.procs")) as f:
                return [int(x) for x in f.read().split()]
        except (IOError, OSError):
            return []

    def state(self):
        try:
            with open(os.path.join(self.path, "freezer.state")) as f:
                return f.read().strip()
        except (IOError, OSError):
            return None

    def wait_frozen(self, timeout=5.0):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.pids() and self.state() == "FROZEN":
                return True
            time.sleep(0.02)
        return False

    def cleanup(self, timeout=10.0):
        """Thaw, SIGKILL and reap every task of the cgroup, then remove it. Returns the pids."""
        if not os.path.isdir(self.path):
            return []
        pids = self.pids()
        try:
            with open(os.path.join(self.path, "freezer.state"), "w") as f:
                f.write("THAWED")
        except (IOError, OSError):
            pass
        end = time.monotonic() + timeout
        for pid in pids:
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        for pid in pids:
            while time.monotonic() < end:
                try:
                    got = os.waitpid(pid, os.WNOHANG)[0]
                    if got == pid:
                        break
                except OSError as e:
                    if e.errno != errno.ECHILD:
                        raise
                    if _is_zombie(pid) is not False:  # gone, or dead and waiting for its parent
                        break
                time.sleep(0.01)
        while os.path.isdir(self.path):
            try:
                os.rmdir(self.path)
            except OSError as e:
                if e.errno != errno.EBUSY or time.monotonic() > end:
                    raise
                time.sleep(0.02)
        return pids


def _is_zombie(pid):
    """True/False for a process's zombie state; None when it no longer exists."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            data = f.read()
    except (IOError, OSError):
        return None
    return data[data.rfind(b")") + 2:].split()[0] == b"Z"


@contextlib.contextmanager
def reaped_freezer_cgroup():
    """A freezer cgroup for the "unkillable" hang, with this process as child subreaper.

    A frozen probe outlives the module (or its killed parent); as subreaper the test process
    inherits it and can reap it once ``cleanup`` has thawed it.
    """
    assert set_child_subreaper(True)
    cg = FreezerCgroup()
    try:
        yield cg
    finally:
        try:
            cg.cleanup()
        finally:
            set_child_subreaper(False)
