# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVIDIA GPU facts for a node, gathered without ever hanging (node side, Python 3.8+).

Public entry point: :func:`nvidia_facts`, which returns the dict that ``gpu_facts`` publishes as
``ansible_facts.nvidia`` (other modules import it too). The NVML/nvidia-smi probe runs in a
child process (:mod:`gpu_probe`); everything read from procfs and /dev is read here directly.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import os
import re
import stat
import sys

from ansible_collections.kubegpu.fleet.plugins.module_utils._common import safe_io
from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu.probe import (
    nvml_probe, run_in_child, smi_probe)
from ansible_collections.kubegpu.fleet.plugins.module_utils._common.procfs import (
    char_major, nvidia_gpu_major, parse_mig_minors, parse_nvidia_version, parse_proc_devices,
    parse_proc_modules, proc_file, read_text_reason)
from ansible_collections.kubegpu.fleet.plugins.module_utils._common.versions import driver_branch

BACKENDS = ("auto", "nvml", "nvidia_smi")
LIBRARY_NAME = "libnvidia-ml.so.1"
# Where driver packages and the GPU Operator's driver container put the library and the tool.
LIBRARY_DIRS = (
    "usr/lib/x86_64-linux-gnu", "usr/lib/aarch64-linux-gnu", "usr/lib64", "usr/lib",
    "lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu", "lib64", "lib",
    "usr/local/nvidia/lib64", "usr/local/nvidia/lib",
)
SMI_DIRS = ("usr/bin", "bin", "usr/sbin", "sbin", "usr/local/nvidia/bin", "usr/local/bin")
KERNEL_MODULES = ("nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm", "nvidia_peermem")
# Probe outcomes that mean "there is no NVIDIA driver stack here" rather than a failure.
ABSENT_CODES = ("NVML_ERROR_DRIVER_NOT_LOADED", "NVML_ERROR_LIBRARY_NOT_FOUND")

_LIB_VERSION_RE = re.compile(r"^libnvidia-ml\.so\.(\d+\.\d+(?:\.\d+)?)$")
_INFO_RE = re.compile(r"^\s*([^:]+?)\s*:\s*(.*?)\s*$")
_GPU_NODE_RE = re.compile(r"^nvidia(\d+)$")
# BRANCH.MINOR[.PATCH] (versions.DriverVersion); anything else from a probe is not a version.
_DRIVER_VERSION_RE = re.compile(r"^\d{1,4}\.\d{1,4}(?:\.\d{1,4})?$")
# procfs text files the facts read: a few kB on real nodes.
PROC_READ_LIMIT = 1 << 20


class GpuFactsError(ValueError):
    """Bad input to nvidia_facts (the module turns it into fail_json)."""


def pynvml_available():
    try:
        import pynvml  # noqa: F401 pylint: disable=unused-import,import-error
    except ImportError:
        return False
    return True


# ------------------------------------------------------------------------ locating things

def _root_join(root, rel):
    return os.path.join(root, rel.lstrip("/"))


def find_library(driver_root="/", environ=None):
    """Path of libnvidia-ml.so.1 under ``driver_root``, or None.

    On the host root, LD_LIBRARY_PATH directories come first, as for the dynamic loader.
    """
    return _search(driver_root, environ, "LD_LIBRARY_PATH", LIBRARY_DIRS, LIBRARY_NAME, os.path.exists)


def library_version(path):
    """Userspace driver version from the library's real file name (libnvidia-ml.so.570.172.08).

    Driver packages install ``libnvidia-ml.so.1`` as a link to the versioned file, so this is
    known even when NVML cannot initialise (version mismatch, hang).
    """
    if not path:
        return None
    m = _LIB_VERSION_RE.match(os.path.basename(os.path.realpath(path)))
    return m.group(1) if m else None


def find_nvidia_smi(driver_root="/", environ=None):
    """Path of an executable nvidia-smi under ``driver_root`` (PATH first on the host root)."""
    return _search(driver_root, environ, "PATH", SMI_DIRS, "nvidia-smi", _is_executable)


def _is_executable(path):
    return os.path.isfile(path) and os.access(path, os.X_OK)


def _search(driver_root, environ, env_var, dirs, name, usable):
    """The first ``name`` that ``usable(path)`` accepts in ``environ[env_var]``'s directories
    (on the host root only) and then in ``dirs`` under ``driver_root``; None when there is none."""
    environ = os.environ if environ is None else environ
    found = []
    if os.path.realpath(driver_root) == "/":
        found.extend(d for d in environ.get(env_var, "").split(":") if d)
    found.extend(_root_join(driver_root, d) for d in dirs)
    for d in found:
        path = os.path.join(d, name)
        if usable(path):
            return path
    return None


# --------------------------------------------------------------------------------- procfs

def kernel_modules(modules):
    """``{name: {"loaded", "refcount", "state"}}`` for the NVIDIA modules, from parse_proc_modules."""
    out = {}
    for name in KERNEL_MODULES:
        mod = modules.get(name)
        out[name] = {"loaded": mod is not None,
                     "refcount": mod["refcount"] if mod else None,
                     "state": mod["state"] if mod else None}
    return out


def parse_gpu_information(text):
    """Parse ``<proc>/driver/nvidia/gpus/<bus>/information`` ("Model:", "GPU UUID:", "Device
    Minor:", "Bus Location:" ...). Returns ``{"name", "uuid", "minor_number", "pci_bus_id"}``."""
    fields = {}
    for line in (text or "").splitlines():
        m = _INFO_RE.match(line)
        if m:
            fields[m.group(1).lower()] = m.group(2)
    minor = fields.get("device minor")
    return {
        "name": fields.get("model") or None,
        "uuid": fields.get("gpu uuid") or None,
        "minor_number": int(minor) if safe_io.is_ascii_digits(minor) else None,
        "pci_bus_id": fields.get("bus location") or None,
    }


def procfs_mig_instances(proc_path, minor):
    """``[(gi, ci)]`` of MIG instances the driver exposes for GPU ``minor`` in procfs
    (``driver/nvidia/capabilities/gpu<minor>/mig/gi<G>/ci<C>``)."""
    base = proc_file(proc_path, "driver", "nvidia", "capabilities", "gpu%d" % minor, "mig")
    out = []
    try:
        gis = os.listdir(base)
    except OSError:
        return out
    for gi_name in gis:
        m = re.match(r"^gi(\d+)$", gi_name)
        if not m:
            continue
        try:
            cis = os.listdir(os.path.join(base, gi_name))
        except OSError:
            continue
        for ci_name in cis:
            c = re.match(r"^ci(\d+)$", ci_name)
            if c:
                out.append((int(m.group(1)), int(c.group(1))))
    return sorted(out)


def procfs_gpus(proc_path, warnings=None):
    """GPUs the loaded kernel module lists in ``<proc>/driver/nvidia/gpus``, sorted by minor.

    Used when the probe could not answer (hung, mismatch): procfs is served by the kernel
    module, not by NVML, so it still reads. MIG mode is inferred from the MIG capability
    directories: ``enabled`` where GPU instances exist, else ``unknown``.

    Only entries with a readable ``information`` file count as GPUs (the kernel module creates
    one per GPU); anything else there (a dangling symlink, a FIFO, an empty directory) is left
    out and, when ``warnings`` is a list, reported there.
    """
    warnings = [] if warnings is None else warnings
    base = proc_file(proc_path, "driver", "nvidia", "gpus")
    try:
        entries = sorted(os.listdir(base))
    except OSError as e:
        if e.errno not in (errno.ENOENT, errno.ENOTDIR):
            warnings.append("cannot list %s: %s; GPUs not counted from procfs"
                            % (base, e.strerror or e))
        return []
    gpus = []
    for entry in entries:
        info_path = os.path.join(base, entry, "information")
        text, reason = read_text_reason(info_path, PROC_READ_LIMIT)
        if text is None:
            warnings.append("%s/%s is not counted as a GPU: %s" % (
                base, entry, reason or "%s does not exist (dangling link or not a GPU entry)"
                % info_path))
            continue
        info = parse_gpu_information(text)
        if not info["pci_bus_id"]:
            info["pci_bus_id"] = entry
        instances = procfs_mig_instances(proc_path, info["minor_number"]) \
            if info["minor_number"] is not None else []
        gpus.append({
            "index": None, "uuid": info["uuid"], "name": info["name"],
            "minor_number": info["minor_number"], "pci_bus_id": info["pci_bus_id"],
            "memory_total_mib": None,
            "mig_mode": {"current": "enabled" if instances else "unknown", "pending": "unknown"},
            "mig_devices": [{"index": None, "uuid": None, "name": None, "profile": None,
                             "gpu_instance_id": gi, "compute_instance_id": ci,
                             "memory_total_mib": None, "multiprocessor_count": None}
                            for gi, ci in instances],
            "errors": [],
        })
    gpus.sort(key=lambda g: (g["minor_number"] is None, g["minor_number"]))
    return gpus


# ------------------------------------------------------------------------------ /dev nodes

def _node(dev_path, rel, kind, expected_major, expected_minor, major_name, **extra):
    path = os.path.join(dev_path, rel)
    entry = {"name": rel, "path": path, "kind": kind, "exists": False, "char_device": False,
             "major": None, "minor": None, "expected_major": expected_major,
             "expected_minor": expected_minor, "major_name": major_name, "ok": False}
    entry.update(extra)
    try:
        st = os.stat(path)
    except OSError:
        return entry
    entry["exists"] = True
    entry["char_device"] = stat.S_ISCHR(st.st_mode)
    if entry["char_device"]:
        entry["major"] = os.major(st.st_rdev)
        entry["minor"] = os.minor(st.st_rdev)
        entry["ok"] = (expected_major is not None and entry["major"] == expected_major
                       and entry["minor"] == expected_minor)
        entry["dev_char_link"] = dev_char_link_ok(dev_path, entry["major"], entry["minor"])
    return entry


def dev_char_link_ok(dev_path, major, minor):
    """True when ``<dev_path>/char/<major>:<minor>`` resolves to a char device with those numbers.

    runc (systemd cgroup driver) resolves injected device rules through these links; without
    them a ``systemctl daemon-reload`` drops NVIDIA devices from containers
    (NVIDIA/nvidia-container-toolkit#48).
    """
    link = os.path.join(dev_path, "char", "%d:%d" % (major, minor))
    try:
        st = os.stat(link)
    except OSError:
        return False
    return stat.S_ISCHR(st.st_mode) and os.major(st.st_rdev) == major and os.minor(st.st_rdev) == minor


def device_nodes(dev_path, devices, gpus, mig_minors):
    """Check the NVIDIA device nodes against the majors the running driver registered.

    ``devices``: parse_proc_devices result; ``gpus``: GPU facts (minor numbers, MIG devices);
    ``mig_minors``: parse_mig_minors result. GPU majors are looked up under both
    "nvidia-frontend" (before 550.40) and "nvidia"; nvidia-uvm's major is dynamic.
    """
    gpu_major, gpu_name = nvidia_gpu_major(devices)
    uvm_major = char_major(devices, "nvidia-uvm")
    caps_major = char_major(devices, "nvidia-caps")
    nodes = [
        _node(dev_path, "nvidiactl", "control", gpu_major, 255, gpu_name),
        _node(dev_path, "nvidia-modeset", "modeset", gpu_major, 254, gpu_name),
        _node(dev_path, "nvidia-uvm", "uvm", uvm_major, 0, "nvidia-uvm" if uvm_major is not None else None),
        _node(dev_path, "nvidia-uvm-tools", "uvm_tools", uvm_major, 1,
              "nvidia-uvm" if uvm_major is not None else None),
    ]
    minors = [g["minor_number"] for g in gpus if g.get("minor_number") is not None]
    if not gpus:
        # Nothing told us which GPUs exist: check the GPU nodes that are there.
        try:
            minors = sorted(int(m.group(1)) for m in (_GPU_NODE_RE.match(n) for n in os.listdir(dev_path)) if m)
        except OSError:
            minors = []
    by_minor = dict((g.get("minor_number"), g) for g in gpus)
    for minor in minors:
        gpu = by_minor.get(minor) or {}
        nodes.append(_node(dev_path, "nvidia%d" % minor, "gpu", gpu_major, minor, gpu_name,
                           gpu=gpu.get("index"), uuid=gpu.get("uuid")))
    caps = {}
    for entry in mig_minors:
        if entry["kind"] == "gi":
            caps[("gi", entry["gpu"], entry["gi"], None)] = entry["minor"]
        elif entry["kind"] == "ci":
            caps[("ci", entry["gpu"], entry["gi"], entry["ci"])] = entry["minor"]
    seen = set()
    for gpu in gpus:
        minor = gpu.get("minor_number")
        for mig in gpu.get("mig_devices", []):
            gi, ci = mig.get("gpu_instance_id"), mig.get("compute_instance_id")
            for kind, key in (("mig_gi", ("gi", minor, gi, None)), ("mig_ci", ("ci", minor, gi, ci))):
                cap = caps.get(key)
                if cap is None or cap in seen:
                    continue
                seen.add(cap)
                nodes.append(_node(dev_path, "nvidia-caps/nvidia-cap%d" % cap, kind, caps_major, cap,
                                   "nvidia-caps" if caps_major is not None else None,
                                   gpu=gpu.get("index"), gpu_instance_id=gi,
                                   compute_instance_id=ci if kind == "mig_ci" else None,
                                   uuid=mig.get("uuid") if kind == "mig_ci" else None))
    return nodes, {"gpu": gpu_major, "gpu_name": gpu_name, "nvidia_uvm": uvm_major,
                   "nvidia_caps": caps_major}


# ------------------------------------------------------------------------------- derived

def mig_state(gpus, inferred=False):
    """(mig_enabled, mig_mixed) from GPU facts; None where it cannot be told.

    mig_mixed is the R570 trigger: at least one GPU in MIG mode and at least one that is not.
    From NVML/nvidia-smi, GPUs whose mode could not be read do not count. With ``inferred``
    (GPUs from procfs, where only MIG instances are visible) a GPU without instances counts as
    not in MIG mode once another GPU has instances; with no instances anywhere nothing is known.
    """
    modes = [g["mig_mode"]["current"] for g in gpus]
    if inferred:
        if "enabled" not in modes:
            return None, None
        return True, any(m != "enabled" for m in modes)
    known = [m for m in modes if m != "unknown"]
    if not known:
        return None, None
    enabled = "enabled" in known
    return enabled, enabled and any(m != "enabled" for m in known)


def vgpu_guest(gpus):
    """Whether the node runs NVIDIA's vGPU guest driver: True when any GPU's virtualization mode
    is ``vgpu`` (NVML's NVML_GPU_VIRTUALIZATION_MODE_VGPU, "vGPU inside virtual machine"), False
    when every GPU's mode is known and none is, None when no GPU's mode could be read (procfs,
    an NVML without the query). A GPU passed through to a VM (``passthrough``) runs the
    data-center driver: not a vGPU guest."""
    modes = [g.get("virtualization_mode") or "unknown" for g in gpus]
    if "vgpu" in modes:
        return True
    if modes and "unknown" not in modes:
        return False
    return None


def device_ids(gpus):
    """Every GPU and MIG UUID, GPUs first in index order, each followed by its MIG devices."""
    ids = []
    for gpu in gpus:
        if gpu.get("uuid"):
            ids.append(gpu["uuid"])
        ids.extend(m["uuid"] for m in gpu.get("mig_devices", []) if m.get("uuid"))
    return ids


def _describe(err):
    where = []
    if err.get("function"):
        where.append(err["function"])
    if err.get("gpu") is not None:
        where.append("GPU %s" % err["gpu"])
    if err.get("mig_device") is not None:
        where.append("MIG device %s" % err["mig_device"])
    head = "%s: %s" % (err["code"], err.get("message")) if err.get("code") else err.get("message")
    return "%s (%s)" % (head, ", ".join(where)) if where else head


def _probe(backend, timeout, library_path, smi_path, driver_root, on_host_root):
    """Run the chosen probe; return (probe facts, data dict or None)."""
    probe = {"status": None, "backend": backend, "elapsed": 0.0, "error": None, "error_code": None,
             "errors": [], "hung_in": None, "stuck_pids": []}
    if backend == "nvml":
        if library_path is None and not on_host_root:
            probe.update(status="absent", error="%s not found under driver_root %s" % (LIBRARY_NAME, driver_root),
                         error_code="NVML_ERROR_LIBRARY_NOT_FOUND")
            return probe, None
        outcome = run_in_child(lambda emit: nvml_probe(emit, library_path), timeout)
    else:
        if smi_path is None:
            probe.update(status="absent", error="nvidia-smi not found under driver_root %s" % driver_root)
            return probe, None
        env = dict(os.environ)
        env["LC_ALL"] = "C"
        if library_path:
            env["LD_LIBRARY_PATH"] = os.pathsep.join(
                [os.path.dirname(library_path)] + [d for d in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d])
        outcome = run_in_child(lambda emit: smi_probe(emit, smi_path, env, timeout), timeout)
    probe["elapsed"] = round(outcome.elapsed, 3)

    if outcome.status == "hung":
        probe.update(status="hung", hung_in=outcome.stage)
        msg = "no answer from the %s probe within %s s" % (backend, timeout)
        if outcome.stage:
            msg += " (stuck in %s)" % outcome.stage
        stuck = sorted(set(outcome.leftovers) | (set() if outcome.reaped else set([outcome.pid])))
        if stuck:
            probe["stuck_pids"] = stuck
            msg += "; process(es) %s did not die on SIGKILL (uninterruptible sleep?) and were left " \
                "behind" % ", ".join(str(p) for p in stuck)
        probe["error"] = msg
        return probe, None
    if outcome.status == "error":
        probe.update(status="error", error=outcome.error)
        return probe, None
    if outcome.status == "died":
        probe.update(status="error", error="probe process %s during %s" % (
            outcome.exit_status or "died", outcome.stage or "start-up"))
        return probe, None
    if not outcome.value.get("ok"):
        probe.update(status="error", error="probe failed: %s" % outcome.value.get("error"))
        return probe, None

    data = outcome.value["value"]
    init_error = data.get("init_error")
    if init_error:
        probe["errors"] = [init_error]
        probe["error"] = _describe(init_error)
        probe["error_code"] = init_error.get("code")
        # A library file that exists but cannot be loaded is a broken install, not absence.
        if init_error.get("code") in ABSENT_CODES and init_error.get("function") != "dlopen":
            probe["status"] = "absent"
        else:
            probe["status"] = "error"
        return probe, None
    probe["errors"] = data.get("errors") or []
    if probe["errors"]:
        probe.update(status="error", error=_describe(probe["errors"][0]),
                     error_code=probe["errors"][0].get("code"))
    else:
        probe["status"] = "ok"
    return probe, data


def check_driver_version(probe, data, warnings):
    """Drop a driver version the probe reported that is not BRANCH.MINOR[.PATCH] ("abc"):
    the probe is then not ok, and the error says what it reported."""
    version = data.get("driver_version")
    if version is None or (isinstance(version, str) and _DRIVER_VERSION_RE.match(version.strip())):
        if isinstance(version, str):
            data["driver_version"] = version.strip()
        return
    data["driver_version"] = None
    msg = ("the %s probe reported driver version %r, which is not an NVIDIA driver version "
           "(BRANCH.MINOR[.PATCH], e.g. 570.172.08); ignored" % (probe["backend"], version))
    warnings.append(msg)
    if probe["status"] == "ok":
        probe.update(status="error", error=msg, error_code=None)
    probe["errors"] = list(probe.get("errors") or []) + [
        {"function": "driver version", "code": None, "message": msg}]


def _check_dir(option, path):
    if not isinstance(path, str) or not path:
        raise GpuFactsError("%s must be a non-empty path, got %r" % (option, path))
    if not os.path.isdir(path):
        raise GpuFactsError("%s %s is not a directory" % (option, path))


def nvidia_facts(proc_path="/proc", dev_path="/dev", driver_root="/", backend="auto", timeout=10.0):
    """Gather NVIDIA facts; the returned dict is ``ansible_facts.nvidia``.

    Never hangs: the probe answers within ``timeout`` (+ about 0.5 s to kill it) or is reported
    as ``hung``. Raises GpuFactsError for bad arguments (naming the value).
    """
    if backend not in BACKENDS:
        raise GpuFactsError("backend must be one of %s, got %r" % (", ".join(BACKENDS), backend))
    try:
        timeout = safe_io.check_timeout(timeout, "timeout", minimum=0.001)
    except safe_io.UnsafeInput as e:
        raise GpuFactsError(str(e))
    _check_dir("proc_path", proc_path)
    _check_dir("dev_path", dev_path)
    if not isinstance(driver_root, str) or not driver_root:
        raise GpuFactsError("driver_root must be a non-empty path, got %r" % (driver_root,))

    have_pynvml = pynvml_available()
    if backend == "auto":
        backend = "nvml" if have_pynvml else "nvidia_smi"
    elif backend == "nvml" and not have_pynvml:
        raise GpuFactsError("backend nvml needs the Python package nvidia-ml-py (module pynvml), which "
                            "%s cannot import; install it or use backend nvidia_smi" % sys.executable)

    on_host_root = os.path.realpath(driver_root) == "/"
    root_exists = os.path.isdir(driver_root)
    library_path = find_library(driver_root) if root_exists else None
    smi_path = find_nvidia_smi(driver_root) if root_exists else None

    if not root_exists:
        probe = {"status": "absent", "backend": backend, "elapsed": 0.0,
                 "error": "driver_root %s does not exist" % driver_root, "error_code": None,
                 "errors": [], "hung_in": None, "stuck_pids": []}
        data = None
    else:
        probe, data = _probe(backend, timeout, library_path, smi_path, driver_root, on_host_root)
    probe["timeout"] = timeout  # the bound the probe ran under (nvml.hung evidence names it)

    warnings = []

    def proc_text(*parts, **kw):
        path = proc_file(proc_path, *parts)
        text, reason = read_text_reason(path, PROC_READ_LIMIT)
        if text is None and (reason or kw.get("required")):
            warnings.append("cannot read %s: %s" % (path, reason or "no such file")
                            + (("; " + kw["means"]) if kw.get("means") else ""))
        return text

    devices = parse_proc_devices(proc_text(
        "devices", required=True,
        means="device majors unknown, /dev nodes cannot be checked against them"))
    modules = kernel_modules(parse_proc_modules(proc_text(
        "modules", required=True, means="kernel module state unknown")))
    kmod_version = parse_nvidia_version(proc_text(
        "driver", "nvidia", "version", means="kernel module version unknown"))
    mig_minors = parse_mig_minors(proc_text("driver", "nvidia-caps", "mig-minors"))

    lib_version = library_version(library_path)
    if data is not None:
        check_driver_version(probe, data, warnings)
        warnings.extend(data.get("warnings") or [])
        gpus = data.get("gpus") or []
        source = backend
    else:
        gpus = procfs_gpus(proc_path, warnings)
        source = "procfs" if gpus else None

    driver_version, version_source = None, None
    if data is not None and data.get("driver_version"):
        driver_version, version_source = data["driver_version"], backend
    elif lib_version:
        driver_version, version_source = lib_version, "library_file"

    mig_enabled, mig_mixed = mig_state(gpus, inferred=source == "procfs")
    nodes, majors = device_nodes(dev_path, devices, gpus, mig_minors)
    present = probe["status"] != "absent" or kmod_version is not None or modules["nvidia"]["loaded"]
    if not present and warnings:
        warnings.append("present is false, but procfs could not be fully read (see the warnings "
                        "above): a loaded driver may have been missed")

    return {
        "present": bool(present),
        "probe": probe,
        "source": source,
        "driver_version": driver_version,
        "driver_version_source": version_source,
        "driver_branch": driver_branch(driver_version) if driver_version else None,
        "kernel_module_version": kmod_version,
        "cuda_driver_version": data.get("cuda_driver_version") if data else None,
        "nvml_version": data.get("nvml_version") if data else None,
        "library_path": library_path,
        "library_version": lib_version,
        "nvidia_smi_path": smi_path,
        "mig_enabled": mig_enabled,
        "mig_mixed": mig_mixed,
        "vgpu_guest": vgpu_guest(gpus),
        "gpu_count": len(gpus),
        "gpus": gpus,
        "device_ids": device_ids(gpus),
        "device_majors": majors,
        "device_nodes": nodes,
        "kernel_modules": modules,
        "warnings": warnings,
    }
