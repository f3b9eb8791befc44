# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The NVIDIA node stack beside the driver (node side, Python 3.8+): container toolkit,
fabric manager, NVSwitches and the kernel module flavour.

Everything is read through :mod:`safe_io` (regular files only, size bounds) and every command
runs with a deadline. The toolkit's ``config.toml`` is returned as bounded raw text: TOML is
parsed on the controller (``plugins/plugin_utils/stack/facts.py``, stdlib ``tomllib``),
because nodes may run a Python without a TOML parser. Facts that depend on the config
(injection mode, low-level runtime, the cuda-compat hook mitigation) are therefore filled in
by the controller; this module returns what they are derived from.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re
import stat

from ansible_collections.kubegpu.fleet.plugins.module_utils._common import safe_io
from ansible_collections.kubegpu.fleet.plugins.module_utils.driver.packages import upstream_version
from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu.pci import scan_pci

TOOLKIT_PACKAGES = ("nvidia-container-toolkit", "nvidia-container-toolkit-base",
                    "libnvidia-container1", "libnvidia-container-tools")
# Debian/Ubuntu (NVIDIA CUDA repo): nvidia-fabricmanager-<branch>; RHEL: nvidia-fabric-manager
# (older CUDA repos also shipped nvidia-fabricmanager / nvidia-fabric-manager-<branch>).
FABRIC_MANAGER_RE = re.compile(r"^nvidia-fabric-?manager(-\d+)?$")
FABRIC_MANAGER_UNIT = "nvidia-fabricmanager.service"
# DCGM host packages: datacenter-gpu-manager (DCGM 3 and earlier), datacenter-gpu-manager-4-core,
# -4-cuda12, -4-proprietary, ... (DCGM 4; all of one release share its version).
DCGM_RE = re.compile(r"^datacenter-gpu-manager(-\d+)?(-[a-z0-9]+)*$")
CONFIG_REL = ("etc", "nvidia-container-runtime", "config.toml")
CONFIG_LIMIT = 256 << 10      # the default file is about 1.5 KiB
CDI_DIRS = (("etc", "cdi"), ("var", "run", "cdi"))
CDI_SPEC_RE = re.compile(r"^nvidia[^/]*\.(ya?ml|json)$")
MAX_DIR_ENTRIES = 4096
# Low-level OCI runtimes the nvidia-container-runtime can hand over to (its ``runtimes``
# candidates; the default list is docker-runc, runc, crun), looked up under the root.
RUNTIME_NAMES = ("docker-runc", "runc", "crun", "youki")
BIN_DIRS = ("usr/local/sbin", "usr/local/bin", "usr/sbin", "usr/bin", "sbin", "bin")
VERSION_LIMIT = 64 << 10
TAINT_LIMIT = 64
_NVSWITCH_DEV_RE = re.compile(r"^nvidia-nvswitch\d+$")


def _join(root, *parts):
    return os.path.join(root or "/", *parts)


def toolkit_packages(packages):
    """``{"installed", "version", "packages"}`` from the package list (driver_node.list_packages).

    ``version`` is the upstream version of nvidia-container-toolkit (or of -base when only the
    base package is installed): ``1.17.8-1`` -> ``1.17.8``."""
    found = {}
    for pkg in packages or []:
        if pkg.get("installed") and pkg.get("name") in TOOLKIT_PACKAGES:
            found[pkg["name"]] = pkg.get("version")
    version = None
    for name in ("nvidia-container-toolkit", "nvidia-container-toolkit-base"):
        if found.get(name):
            version = upstream_version(found[name])
            break
    return {"installed": version is not None, "version": version, "packages": found}


def fabric_manager_package(packages):
    """``{"installed", "package", "version"}``: the installed fabric manager package, if any
    (the highest version when several are installed)."""
    best = None
    for pkg in packages or []:
        if pkg.get("installed") and FABRIC_MANAGER_RE.match(pkg.get("name") or ""):
            v = upstream_version(pkg.get("version") or "")
            key = tuple(int(x) if safe_io.is_ascii_digits(x) else 0 for x in v.split("."))
            if best is None or key > best[0]:
                best = (key, pkg["name"], v)
    if best is None:
        return {"installed": False, "package": None, "version": None}
    return {"installed": True, "package": best[1], "version": best[2] or None}


def dcgm_package(packages):
    """``{"installed", "package", "version"}``: DCGM's host package, if any (the highest
    upstream version when several are installed): ``1:4.2.3-1`` -> ``4.2.3``."""
    best = None
    for pkg in packages or []:
        if pkg.get("installed") and DCGM_RE.match(pkg.get("name") or ""):
            v = upstream_version(pkg.get("version") or "")
            key = tuple(int(x) if safe_io.is_ascii_digits(x) else 0 for x in v.split("."))
            if v and (best is None or key > best[0]):
                best = (key, pkg["name"], v)
    if best is None:
        return {"installed": False, "package": None, "version": None}
    return {"installed": True, "package": best[1], "version": best[2]}


def read_toolkit_config(root="/"):
    """``(path or None, text or None, error or None)`` of the runtime's config.toml.

    Missing: (None, None, None). A FIFO, device, directory or a file over CONFIG_LIMIT bytes is
    an error, never a blocked or flooded read. Non-UTF-8 bytes are an error too (TOML is UTF-8)."""
    path = _join(root, *CONFIG_REL)
    try:
        data = safe_io.read_bytes(path, limit=CONFIG_LIMIT, missing_ok=True)
    except safe_io.UnsafeInput as e:
        return path, None, str(e)
    except (IOError, OSError) as e:
        return path, None, "%s: %s" % (path, e.strerror or e)
    if data is None:
        return None, None, None
    try:
        return path, data.decode("utf-8"), None
    except UnicodeDecodeError as e:
        return path, None, "%s is not UTF-8 (byte %d); TOML must be UTF-8" % (path, e.start)


def _listdir(path):
    """(names, error): a bounded directory listing; a missing directory is ([], None)."""
    try:
        names = os.listdir(path)
    except OSError as e:
        if not os.path.exists(path):
            return [], None
        return [], "%s: %s" % (path, e.strerror or e)
    if len(names) > MAX_DIR_ENTRIES:
        return [], "%s lists %d entries, more than the %d this reads" % (path, len(names), MAX_DIR_ENTRIES)
    return sorted(names), None


def cdi_specs(root="/"):
    """``(paths, errors)``: NVIDIA CDI specs (``nvidia*.yaml|yml|json``, regular files) in the
    CDI spec directories ``/etc/cdi`` and ``/var/run/cdi`` (paths as seen on the node)."""
    out, errors = [], []
    for parts in CDI_DIRS:
        d = _join(root, *parts)
        names, err = _listdir(d)
        if err:
            errors.append(err)
        for name in names:
            if not CDI_SPEC_RE.match(name):
                continue
            try:
                name.encode("utf-8")
            except UnicodeEncodeError:  # the controller refuses a result holding it: named, escaped
                errors.append("%s: skipped %s, a name that is not UTF-8" % (d, ascii(name)))
                continue
            try:
                st = os.stat(os.path.join(d, name))
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                out.append("/" + "/".join(parts + (name,)))
    return out, errors


def runtime_binaries(root="/"):
    """Names of the low-level OCI runtimes installed under ``root`` (RUNTIME_NAMES order)."""
    found = []
    for name in RUNTIME_NAMES:
        for d in BIN_DIRS:
            p = _join(root, d, name)
            try:
                st = os.stat(p)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and st.st_mode & 0o111:
                found.append(name)
                break
    return found


def parse_systemctl_show(text):
    """``Key=value`` lines of ``systemctl show -p ...`` -> dict."""
    out = {}
    for line in (text or "").splitlines():
        if "=" in line:
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def service_state(systemctl, unit=FABRIC_MANAGER_UNIT, timeout=10.0):
    """``({"active", "enabled"}, error)`` of a systemd unit (``systemctl show``, deadline-bound).

    A unit systemd does not know answers ActiveState=inactive, UnitFileState= (empty: None)."""
    unit = safe_io.check_unit_name(unit, "fabric manager unit")
    state = {"active": None, "enabled": None}
    if not systemctl:
        return state, "systemctl not found"
    try:
        res = safe_io.run_command([systemctl, "show", "-p", "ActiveState,UnitFileState", "--", unit],
                                  timeout, limit=64 << 10)
    except safe_io.UnsafeInput as e:
        return state, "systemctl show %s: %s" % (unit, e)
    except (IOError, OSError) as e:
        return state, "cannot run systemctl: %s" % (e.strerror or e)
    if res.rc != 0:
        return state, "systemctl show %s exited %d: %s" % (unit, res.rc, res.text("stderr").strip()[:300])
    props = parse_systemctl_show(res.text())
    state["active"] = props.get("ActiveState") or None
    state["enabled"] = props.get("UnitFileState") or None
    return state, None


def nvswitch_facts(sys_path="/sys", dev_path="/dev"):
    """``({"present", "count", "bus_ids", "device_nodes"}, errors)``.

    NVSwitches are NVIDIA PCI devices of class 0x0680xx (gpu_pci.scan_pci) and the
    ``nvidia-nvswitchN`` device nodes the driver creates. ``present`` is None when neither the
    PCI tree could be read nor a device node exists (nothing to decide from)."""
    errors = []
    pci = scan_pci(sys_path)
    if not pci["available"]:
        errors.extend(e["error"] for e in pci["errors"])
    bus_ids = [d["bus_id"] for d in pci["nvswitches"]]
    names, err = _listdir(dev_path)
    if err:
        errors.append(err)
    nodes = ["%s/%s" % (dev_path.rstrip("/"), n) for n in names if _NVSWITCH_DEV_RE.match(n)]
    count = max(len(bus_ids), len(nodes))
    if count:
        present = True
    elif pci["available"]:
        present = False
    else:
        present = None
    return {"present": present, "count": count, "bus_ids": bus_ids, "device_nodes": nodes}, errors


_OPEN_RE = re.compile(r"NVRM version:.*\bOpen Kernel Module\b")
_PROPRIETARY_RE = re.compile(r"NVRM version:\s*NVIDIA UNIX\s+\S+\s+Kernel Module\b")


def kernel_module_flavour(proc_path="/proc", sys_path="/sys"):
    """``(flavour, source)``: ``open``/``proprietary``/None and what decided it.

    1. ``/proc/driver/nvidia/version``: the open modules print ``NVRM version: NVIDIA UNIX Open
       Kernel Module for x86_64 <version> ...``, the proprietary ones ``NVRM version: NVIDIA UNIX
       x86_64 Kernel Module <version> ...``.
    2. ``/sys/module/nvidia/taint``: the proprietary module taints the kernel with ``P``
       (proprietary licence); the open modules (Dual MIT/GPL) do not.
    Neither readable (module not loaded): (None, None)."""
    text, _err = safe_io.try_read_text(os.path.join(proc_path, "driver", "nvidia", "version"),
                                       limit=VERSION_LIMIT)
    if text:
        if _OPEN_RE.search(text):
            return "open", "proc_version"
        if _PROPRIETARY_RE.search(text):
            return "proprietary", "proc_version"
    taint, _err = safe_io.try_read_text(os.path.join(sys_path, "module", "nvidia", "taint"),
                                        limit=TAINT_LIMIT)
    if taint is not None:
        return ("proprietary" if "P" in taint else "open"), "module_taint"
    return None, None


def stack_facts(params, list_packages, get_bin_path, command_timeout=10.0):
    """The ``nvidia_stack`` facts as the node sees them (config.toml as raw text).

    ``params``: root, sys_path, dev_path, proc_path, fabric_manager_unit, service_state.
    ``list_packages(package_root)`` -> driver_node.list_packages' dict; ``get_bin_path(name)``.
    """
    root = safe_io.check_path(params.get("root") or "/", "root")
    sys_path = safe_io.check_path(params.get("sys_path") or "/sys", "sys_path")
    dev_path = safe_io.check_path(params.get("dev_path") or "/dev", "dev_path")
    proc_path = safe_io.check_path(params.get("proc_path") or "/proc", "proc_path")
    unit = safe_io.check_unit_name(params.get("fabric_manager_unit") or FABRIC_MANAGER_UNIT,
                                   "fabric_manager_unit")
    errors = []
    pk = list_packages(root)
    if pk.get("error"):
        errors.append("packages: %s" % pk["error"])
    packages = pk.get("packages") or []

    tk = toolkit_packages(packages)
    path, text, err = read_toolkit_config(root)
    if err:
        errors.append("config.toml: %s" % err)
    specs, cdi_errors = cdi_specs(root)
    errors.extend("cdi: %s" % e for e in cdi_errors)
    tk.update({"package_manager": pk.get("manager"), "config_path": path, "config_text": text,
               "config_error": err, "config": None, "injection_mode": None, "cdi_specs": specs,
               "runtime": None, "runtime_binaries": runtime_binaries(root),
               "cuda_compat_hook_disabled": None})

    fm = fabric_manager_package(packages)
    service = {"active": None, "enabled": None}
    if params.get("service_state", True):
        service, err = service_state(get_bin_path("systemctl"), unit, command_timeout)
        if err:
            errors.append("fabric manager service: %s" % err)
    fm["service"] = service
    fm["unit"] = unit

    try:
        nvs, nvs_errors = nvswitch_facts(sys_path, dev_path)
    except safe_io.UnsafeInput as e:
        nvs, nvs_errors = {"present": None, "count": 0, "bus_ids": [], "device_nodes": []}, [str(e)]
    errors.extend("nvswitch: %s" % e for e in nvs_errors)
    flavour, source = kernel_module_flavour(proc_path, sys_path)
    return {"container_toolkit": tk, "fabric_manager": fm, "dcgm": dcgm_package(packages), "nvswitch": nvs,
            "kernel_modules": flavour, "kernel_modules_source": source, "errors": errors}


def stack_facts_run(params, get_bin_path, warn):
    """kubegpu.fleet.stack_facts: ``{"changed": False, "ansible_facts": {"nvidia_stack": ...}}``.

    Bad option values raise node_probes.ProbeFailed with a message naming the value; what
    could not be read on the node becomes a warning and a null fact."""
    from ansible_collections.kubegpu.fleet.plugins.module_utils.driver import node as driver_node
    from ansible_collections.kubegpu.fleet.plugins.module_utils._common.node_probes import ProbeFailed
    from ansible_collections.kubegpu.fleet.plugins.module_utils.audit import probe_options

    p = probe_options.defaults(probe_options.STACK_FACTS)
    p.update(dict((k, v) for k, v in (params or {}).items() if v is not None))
    try:
        timeout = safe_io.check_timeout(p["command_timeout"], "command_timeout", minimum=0.001)
        runner = driver_node.bounded_runner(timeout)
        facts = stack_facts(p, lambda root: driver_node.list_packages(runner, get_bin_path, root),
                            get_bin_path, command_timeout=timeout)
    except safe_io.UnsafeInput as e:
        raise ProbeFailed(str(e))
    for err in facts["errors"]:
        warn("stack_facts: %s" % err)
    return dict(changed=False, ansible_facts={"nvidia_stack": facts})
