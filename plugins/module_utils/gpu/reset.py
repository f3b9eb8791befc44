# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU reset as a remediation step (node side, Python 3.8+): the body of kubegpu.fleet.gpu_reset.

A GPU reset (``nvidia-smi -r``) applies a pending row remap, page retirement or repair and
clears the state NVIDIA's Xid catalog resets a GPU for, without rebooting the node and taking
its other GPUs down. nvidia-smi(1) (``-r, --gpu-reset``, https://docs.nvidia.com/deploy/nvidia-smi/)
states its preconditions; this module checks them before it resets anything and refuses with
the reason otherwise, so that the rollout falls back to a reboot:

* "There can't be any applications using these devices (e.g. CUDA application, graphics
  application like X server, monitoring application like other instance of nvidia-smi)":
  compute processes nvidia-smi lists, and any process holding the GPU's device node open (a
  monitoring agent, the device plugin). Clients attach a GPU by opening its device file (NVIDIA's
  Driver Persistence guide, "Implementation Details"), which is how nvidia-persistenced keeps the
  GPU state loaded: the daemon alone is stopped for the reset and started again
  (``stop_persistenced``);
* "There also can't be any compute applications running on any other GPU in the system if
  individual GPU reset is not feasible": when NVLink peers are reset together (below), a compute
  process on any GPU of the node refuses the reset;
* NVLink: the same page's tables say NVLink-connected GPUs before Ampere are reset together with
  their peers; from Ampere on each GPU can be reset alone on direct-connected NVLink systems, and
  on NVSwitch systems while Fabric Manager runs, its peers with it when it does not. The page
  also says that "On Hopper and later NVSwitch systems, the dependency on Fabric Manager to
  facilitate reset is removed", while its table and the next paragraph still ask for the peers
  without Fabric Manager: the stricter reading is kept, so on any NVSwitch system without Fabric
  Manager running every GPU with an active NVLink is reset in the same command (the node is
  drained: they are idle);
* MIG: a GPU with MIG devices, or with a pending MIG mode change, is refused. A reset applies a
  pending mode change (MIG User Guide, "Deployment Considerations": setting MIG mode "requires a
  GPU reset"), which the MIG manager, not a health repair, should make. GPU and compute instances
  are re-created by the MIG manager whenever the node boots (NVIDIA mig-parted, systemd
  deployment README); that they are gone after a reset too is our reading, not stated by NVIDIA
  in what we read, so a GPU carrying them is left to the reboot.

nvidia-smi(1) also says that a reset "is not guaranteed to work in all cases" and recommends
verifying each reset GPU's health before use, "a complete reset ... by power cycling the node"
otherwise: the GPUs are validated after the reset and any doubt falls back to the reboot.

After the reset the GPUs are read again and validated (listed, same UUID, nothing pending, the
driver's recovery verdict None); a reset that fails or does not validate says so, and the
caller reboots. Each reset is recorded (this boot's id and the monotonic time) in a state file
written through the one write primitive, so that the Xid scan does not count the events the
reset cleared (xid.aggregate ``resets``).
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import time

from ansible_collections.kubegpu.fleet.plugins.module_utils._common import fileutil, safe_io
from ansible_collections.kubegpu.fleet.plugins.module_utils.audit.probe_options import RESET_STATE_PATH
from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu.facts import find_library, find_nvidia_smi
from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu.health import (
    HealthParseError, parse_health_xml, verdict)
from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu.pci import normalize_bus_id, scan_pci
from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu.smi import (
    SmiParseError, parse_handle_errors, parse_nvlink, parse_smi_xml, smi_error)
from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu.smi import document_root

STATE_PATH = RESET_STATE_PATH
STATE_LIMIT = 64 << 10
SMI_LIMIT = 32 << 20
MAX_PIDS = 65536          # /proc entries looked at for device holders
MAX_FDS = 65536           # descriptors looked at per process
# nvidia-smi's <product_architecture> of GPUs before Ampere (their NVLink peers reset together).
PRE_AMPERE = ("kepler", "maxwell", "pascal", "volta", "turing")
FABRIC_MANAGER = "nv-fabricmanager"
PERSISTENCED = "nvidia-persistenced"


class ResetError(ValueError):
    """Bad options (the module fails with the message)."""


# ------------------------------------------------------------------------------ state file

def boot_id(proc_path="/proc"):
    text, _err = safe_io.try_read_text(os.path.join(proc_path, "sys", "kernel", "random", "boot_id"), limit=128)
    text = (text or "").strip()
    return text if 0 < len(text) <= 64 else None


def read_resets(path=STATE_PATH, proc_path="/proc"):
    """``({bus_id: seconds since boot}, problem)`` of the GPU resets recorded this boot. A
    record of another boot, or no file, gives ``{}``; an unreadable or malformed one ``{}``
    and the reason."""
    if not path:
        return {}, None
    text, err = safe_io.try_read_text(path, limit=STATE_LIMIT)
    if err:
        return {}, err
    if text is None:
        return {}, None
    try:
        doc = json.loads(text)
    except ValueError as e:
        return {}, "%s is not JSON: %s" % (path, e)
    if not isinstance(doc, dict) or not isinstance(doc.get("resets"), dict):
        return {}, "%s holds no resets mapping" % path
    if doc.get("boot_id") != boot_id(proc_path):
        return {}, None
    out = {}
    for bus, at in doc["resets"].items():
        norm = normalize_bus_id(bus) if isinstance(bus, str) else None
        if norm and isinstance(at, (int, float)) and not isinstance(at, bool) and 0 <= at < 1e10:
            out[norm] = float(at)
    return out, None


def record_resets(buses, path=STATE_PATH, proc_path="/proc", now=None):
    """Add ``buses`` (reset now) to this boot's record; returns the record."""
    now = time.monotonic() if now is None else now
    current, _problem = read_resets(path, proc_path)
    for bus in buses:
        current[normalize_bus_id(bus) or bus] = round(now, 6)
    doc = {"boot_id": boot_id(proc_path), "resets": current,
           "note": "GPU resets by kubegpu.fleet.gpu_reset this boot (seconds since boot); "
                   "gpu_facts counts Xid events logged before them as cleared"}
    parent = os.path.dirname(path)
    if parent:
        fileutil.make_dirs(parent, 0o755)
    fileutil.write_file(path, (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode("utf-8"),
                        mode=0o644, backup=False)
    return doc


# ------------------------------------------------------------------------------ inventory

def smi_env(driver_root):
    env = dict(os.environ)
    env["LC_ALL"] = "C"
    lib = find_library(driver_root) if os.path.isdir(driver_root) else None
    if lib:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            [os.path.dirname(lib)] + [d for d in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d])
    return env


def _run(smi, args, env, timeout):
    return safe_io.run_command([smi] + list(args), timeout, limit=SMI_LIMIT, env=env)


def _processes(root):
    """``{bus_id: [pid, ...]}`` from the <processes> of each <gpu> of an -q -x document."""
    out = {}
    for gpu in root.findall("gpu"):
        bus = normalize_bus_id((gpu.findtext("pci/pci_bus_id") or gpu.get("id") or "").strip())
        pids = []
        for proc in gpu.findall("processes/process_info"):
            pid = (proc.findtext("pid") or "").strip()
            if safe_io.is_ascii_digits(pid) and len(pid) <= 10:
                pids.append(int(pid))
        if bus:
            out[bus] = pids
    return out


def _attr(root, bus, path):
    for gpu in root.findall("gpu"):
        if normalize_bus_id((gpu.findtext("pci/pci_bus_id") or gpu.get("id") or "").strip()) == bus:
            text = (gpu.findtext(path) or "").strip()
            return text or None
    return None


def inventory(smi, env, timeout):
    """The GPUs as nvidia-smi sees them now: ``{"gpus": {bus_id: {...}}, "unopened": [...],
    "error"}``. Each GPU: ``uuid``, ``minor``, ``architecture``, ``persistence_mode``,
    ``mig_current``, ``mig_pending``, ``mig_devices``, ``processes``, ``health``, ``verdict``."""
    try:
        res = _run(smi, ["-q", "-x"], env, timeout)
    except (safe_io.UnsafeInput, OSError) as e:
        return {"gpus": {}, "unopened": [], "error": "nvidia-smi -q -x: %s" % e}
    out = res.text("stdout")
    if "<nvidia_smi_log" not in out:
        return {"gpus": {}, "unopened": [], "error": "nvidia-smi -q -x: %s" % smi_error(
            res.rc, out + "\n" + res.text("stderr"))["message"]}
    try:
        facts = parse_smi_xml(out)
        health = parse_health_xml(out)
        root = document_root(out, SMI_LIMIT)
    except (SmiParseError, HealthParseError) as e:
        return {"gpus": {}, "unopened": [], "error": "nvidia-smi -q -x: %s" % e}
    procs = _processes(root)
    by_bus = dict((normalize_bus_id(h["bus_id"] or ""), h) for h in health["gpus"])
    gpus = {}
    for g in facts["gpus"]:
        bus = normalize_bus_id(g.get("pci_bus_id") or "")
        if not bus:
            continue
        h = by_bus.get(bus) or {}
        gpus[bus] = {"bus_id": bus, "uuid": g.get("uuid"), "minor": g.get("minor_number"),
                     "architecture": _attr(root, bus, "product_architecture"),
                     "persistence_mode": _attr(root, bus, "persistence_mode"),
                     "mig_current": g["mig_mode"]["current"], "mig_pending": g["mig_mode"]["pending"],
                     "mig_devices": len(g.get("mig_devices") or []), "processes": procs.get(bus, []),
                     "health": h, "verdict": verdict(h) if h else None}
    unopened = []
    for err in parse_handle_errors(res.text("stderr") + "\n" + out):
        unopened.append(normalize_bus_id(err["pci_bus_id"]) if err.get("pci_bus_id") else
                        "GPU index %s" % err.get("gpu"))
    return {"gpus": gpus, "unopened": unopened, "error": None}


def nvlink_state(smi, env, timeout):
    """``{uuid: nvlink}`` from ``nvidia-smi nvlink -s`` (empty when the tool cannot say)."""
    try:
        res = _run(smi, ["nvlink", "-s"], env, timeout)
    except (safe_io.UnsafeInput, OSError):
        return {}
    return parse_nvlink(res.text("stdout"), "")


def _comm(proc_path, pid):
    text, _err = safe_io.try_read_text(os.path.join(proc_path, str(pid), "comm"), limit=64)
    return (text or "").strip() or None


def device_holders(minors, proc_path="/proc", dev_path="/dev", exclude=()):
    """``{minor: [{"pid", "comm"}]}``: processes holding ``<dev_path>/nvidia<minor>`` open,
    from ``<proc_path>/<pid>/fd`` (processes and descriptors this cannot read are skipped: a
    non-root run sees only its own)."""
    wanted = dict((os.path.join(dev_path, "nvidia%d" % m), m) for m in minors if m is not None)
    out = dict((m, []) for m in wanted.values())
    try:
        pids = [p for p in os.listdir(proc_path) if safe_io.is_ascii_digits(p)][:MAX_PIDS]
    except OSError:
        return out
    for pid in pids:
        if int(pid) in exclude:
            continue
        fd_dir = os.path.join(proc_path, pid, "fd")
        try:
            fds = os.listdir(fd_dir)[:MAX_FDS]
        except OSError:
            continue
        hit = set()
        for fd in fds:
            try:
                target = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            minor = wanted.get(target)
            if minor is not None and minor not in hit:
                hit.add(minor)
                out[minor].append({"pid": int(pid), "comm": _comm(proc_path, pid)})
    return out


def process_running(name, proc_path="/proc"):
    """PIDs whose ``comm`` is ``name`` (truncated to 15 characters, as the kernel keeps it)."""
    short = name[:15]
    found = []
    try:
        pids = [p for p in os.listdir(proc_path) if safe_io.is_ascii_digits(p)][:MAX_PIDS]
    except OSError:
        return found
    for pid in pids:
        if _comm(proc_path, pid) == short:
            found.append(int(pid))
    return found


# ------------------------------------------------------------------------------ the plan

def plan_reset(targets, inv, holders, nvlink, nvswitches, fabric_manager):
    """Which GPUs one ``nvidia-smi -r`` resets, or why not.

    Returns ``{"reset": [bus ids], "group": reason or None, "refused": reason or None,
    "persistenced": [pids]}`` (``persistenced``: the persistence daemon is the only holder of
    these GPUs and is stopped for the reset)."""
    gpus = inv["gpus"]
    out = {"reset": [], "group": None, "refused": None, "persistenced": []}
    missing = [b for b in targets if b not in gpus]
    if missing:
        out["refused"] = ("the driver does not list %s: a reset through it cannot reach %s"
                          % (", ".join(missing), "them" if len(missing) > 1 else "it"))
        return out
    reset = list(targets)
    archs = set((gpus[b].get("architecture") or "").lower() for b in reset)
    pre_ampere = bool(archs & set(PRE_AMPERE))
    linked = sorted(b for b, g in gpus.items()
                    if (nvlink.get(g.get("uuid")) or {}).get("active"))
    if any(b in linked for b in reset) and (pre_ampere or (nvswitches and not fabric_manager)):
        out["group"] = ("%s: every GPU with an active NVLink is reset in the same command"
                        % ("GPUs before Ampere" if pre_ampere else
                           "an NVSwitch system without Fabric Manager running"))
        reset = sorted(set(reset) | set(linked))
        busy = sorted(b for b in gpus if b not in reset and gpus[b]["processes"])
        if busy:
            out["refused"] = ("GPU %s runs compute processes (pids %s): with NVLink peers reset together, "
                              "nvidia-smi -r needs no compute application on any GPU of the node" % (
                                  busy[0], ", ".join(str(p) for p in gpus[busy[0]]["processes"])))
            return out
    for bus in reset:
        g = gpus[bus]
        if g["processes"]:
            out["refused"] = "GPU %s runs compute processes (pids %s): nvidia-smi -r needs it unused" % (
                bus, ", ".join(str(p) for p in g["processes"]))
            return out
        if g["mig_current"] == "enabled" and g["mig_devices"]:
            out["refused"] = ("GPU %s has %d MIG devices: GPU and compute instances do not survive a "
                              "reset (the MIG manager creates them at boot)" % (bus, g["mig_devices"]))
            return out
        if g["mig_pending"] not in ("unsupported", "unknown") and g["mig_pending"] != g["mig_current"]:
            out["refused"] = ("GPU %s has a pending MIG mode change (%s -> %s) that a reset would apply"
                              % (bus, g["mig_current"], g["mig_pending"]))
            return out
        users = holders.get(g.get("minor"), [])
        others = [u for u in users if u.get("comm") != PERSISTENCED[:15]]
        if others:
            out["refused"] = "GPU %s is open in %s: nvidia-smi -r needs it unused" % (
                bus, ", ".join("%s (pid %d)" % (u.get("comm") or "?", u["pid"]) for u in others))
            return out
        out["persistenced"].extend(u["pid"] for u in users if u not in others)
    out["reset"] = sorted(reset)
    out["persistenced"] = sorted(set(out["persistenced"]))
    return out


def validate(before, after, buses):
    """Problems of the reset GPUs read again after the reset (empty: validated)."""
    problems = []
    if after.get("error"):
        return ["cannot read the GPUs after the reset: %s" % after["error"]]
    for bus in buses:
        g = after["gpus"].get(bus)
        if g is None:
            problems.append("GPU %s is not listed after the reset" % bus)
            continue
        old = (before["gpus"].get(bus) or {}).get("uuid")
        if old and g.get("uuid") != old:
            problems.append("GPU %s came back as %s, not %s" % (bus, g.get("uuid"), old))
        v = g.get("verdict") or {}
        if v.get("reset_required"):
            problems.append("GPU %s still has a reset pending: %s" % (
                bus, "; ".join((v.get("details") or {}).get("gpu.reset_required") or [])))
        rec = v.get("recovery") or {}
        if rec.get("driver_action") not in (None, "none"):
            problems.append("GPU %s: the driver's recovery verdict is still %s" % (bus, rec["driver_action"]))
    for name in after.get("unopened") or []:
        if name in buses or name.startswith("GPU index"):
            problems.append("nvidia-smi cannot open %s after the reset" % name)
    return problems


# ------------------------------------------------------------------------------ the run

def _systemctl(verb, unit, timeout):
    try:
        res = safe_io.run_command(["systemctl", verb, unit], timeout, limit=1 << 16)
    except (safe_io.UnsafeInput, OSError) as e:
        return str(e)
    return None if res.rc == 0 else "systemctl %s %s exited %s: %s" % (
        verb, unit, res.rc, res.text("stderr").strip()[:200])


def _check(params):
    buses = []
    for raw in params.get("bus_ids") or []:
        norm = normalize_bus_id(raw) if isinstance(raw, str) else None
        if norm is None:
            raise ResetError("bus_ids: %r is not a PCI bus id (e.g. 0000:18:00.0)" % (raw,))
        if norm not in buses:
            buses.append(norm)
    if not buses:
        raise ResetError("bus_ids: name at least one GPU to reset")
    try:
        timeout = safe_io.check_timeout(params.get("timeout"), "timeout", minimum=1, maximum=3600)
    except safe_io.UnsafeInput as e:
        raise ResetError(str(e))
    return sorted(buses), timeout


def gpu_reset_run(params, check_mode=False):
    """kubegpu.fleet.gpu_reset: returns the module result. Raises ResetError for bad options."""
    buses, timeout = _check(params)
    driver_root = params.get("driver_root") or "/"
    proc_path = params.get("proc_path") or "/proc"
    result = {"changed": False, "bus_ids": buses, "reset": [], "refused": None, "reset_error": None,
              "fallback": None, "group": None, "validation": [], "persistenced_stopped": False,
              "state_path": params.get("state_path") or STATE_PATH, "elapsed": 0.0}
    start = time.monotonic()
    smi = find_nvidia_smi(driver_root) if os.path.isdir(driver_root) else None
    if smi is None:
        result.update(refused="nvidia-smi not found under driver_root %s" % driver_root, fallback="reboot")
        return result
    env = smi_env(driver_root)
    before = inventory(smi, env, timeout)
    if before["error"]:
        result.update(refused=before["error"], fallback="reboot")
        return result
    minors = [g.get("minor") for g in before["gpus"].values()]
    holders = device_holders(minors, proc_path, params.get("dev_path") or "/dev", exclude=(os.getpid(),))
    pci = scan_pci(params.get("sys_path") or "/sys")
    plan = plan_reset(buses, before, holders, nvlink_state(smi, env, timeout), bool(pci["nvswitches"]),
                      bool(process_running(FABRIC_MANAGER, proc_path)))
    result["group"] = plan["group"]
    if plan["persistenced"] and not params.get("stop_persistenced", True):
        plan["refused"] = "nvidia-persistenced holds the GPUs open and stop_persistenced is false"
    if plan["refused"]:
        result.update(refused=plan["refused"], fallback="reboot")
        return result
    result["reset"] = plan["reset"]
    if check_mode:
        result["changed"] = True
        return result
    restart = False
    if plan["persistenced"]:
        err = _systemctl("stop", PERSISTENCED, timeout)
        if err:
            result.update(refused="cannot stop %s for the reset: %s" % (PERSISTENCED, err), fallback="reboot",
                          reset=[])
            return result
        restart = result["persistenced_stopped"] = True
    try:
        try:
            res = _run(smi, ["-r", "-i", ",".join(plan["reset"])], env, timeout)
        except (safe_io.UnsafeInput, OSError) as e:
            result.update(reset_error="nvidia-smi -r: %s" % e, fallback="reboot", changed=True)
            return result
        result["changed"] = True
        said = " ".join((res.text("stdout") + " " + res.text("stderr")).split())[:500]
        if res.rc != 0:
            result.update(reset_error="nvidia-smi -r exited %d: %s" % (res.rc, said), fallback="reboot")
            return result
        record_resets(plan["reset"], result["state_path"], proc_path)
    finally:
        if restart:
            err = _systemctl("start", PERSISTENCED, timeout)
            if err:
                result["reset_error"] = result["reset_error"] or "the reset ran, but %s did not start again: %s" % (
                    PERSISTENCED, err)
                result["fallback"] = "reboot"
        result["elapsed"] = round(time.monotonic() - start, 3)
    after = inventory(smi, env, timeout)
    result["validation"] = validate(before, after, plan["reset"])
    if result["validation"]:
        result.update(reset_error="the reset GPUs did not validate: %s" % "; ".join(result["validation"]),
                      fallback="reboot")
    result["elapsed"] = round(time.monotonic() - start, 3)
    return result
