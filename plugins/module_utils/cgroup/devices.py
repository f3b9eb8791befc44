# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which Kubernetes containers may still open the NVIDIA devices CUDA needs (node side, 3.8+).

The pieces, each a plain function the unit tests call directly:

* ``devices_list.py``: cgroup v1 ``devices.list`` with the kernel's own matching rules.
* ``kubepods.py``: where the pod cgroups live and the kubelet's cgroup names.
* ``device_table.py``: NVIDIA device numbers from ``<proc>`` and the nodes under ``dev_path``.
* ``process_evidence`` (here): what a container's own processes say about its GPUs.
* ``audit`` (here): evaluates every container in ``list`` mode (devices.list) or ``probe`` mode
  (``cgroup_probe``: a short-lived child process moved into the cgroup asks the kernel).
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import collections
import os
import re

from ansible_collections.kubegpu.fleet.plugins.module_utils._common.procfs import proc_file, read_text
from ansible_collections.kubegpu.fleet.plugins.module_utils.cgroup import probe as cgroup_probe
from ansible_collections.kubegpu.fleet.plugins.module_utils.cgroup.device_table import GPU_NODE_RE, build_device_table, list_dir
from ansible_collections.kubegpu.fleet.plugins.module_utils.cgroup.devices_list import DevicesList, DevicesListError
from ansible_collections.kubegpu.fleet.plugins.module_utils.cgroup.kubepods import (
    CgroupDevicesError,
    detect_layout,
    discover_containers,
    find_kubepods,
)
from ansible_collections.kubegpu.fleet.plugins.module_utils._common import safe_io

MODES = ("auto", "list", "probe")
# NVIDIA_VISIBLE_DEVICES values that say nothing about a GPU allocation: "all" is baked into
# the nvidia/cuda images, "void"/"none"/"" mean no GPU.
_NON_EVIDENCE_VISIBLE = ("", "void", "none", "all")
_PROCESS_SAMPLE = 16
# devices.list: the kernel lists "a *:* rwm" for a default-allow cgroup and one short line per
# allowed device otherwise (a GPU container: about 20 lines). 4 MiB is some 200,000 rules:
# anything larger is hostile and reported as too large, never cut and misparsed.
DEVICES_LIST_LIMIT = 4 << 20
_PID_RE = re.compile(r"^[0-9]{1,10}$")


# --------------------------------------------------------------------------- processes

def _read_pids(cgroup_dir, limit=_PROCESS_SAMPLE):
    text = read_text(os.path.join(cgroup_dir, "cgroup.procs"), limit=65536) or ""
    pids = []
    for tok in text.split():
        if _PID_RE.match(tok):
            pid = int(tok)
            if pid > 0:
                pids.append(pid)
        if len(pids) >= limit:
            break
    return pids


def process_evidence(cgroup_dir, proc_path):
    """What the container's own processes say about it.

    Returns ``{"pids", "visible_devices", "dev_nodes", "sandbox"}``: the first
    NVIDIA_VISIBLE_DEVICES value that names devices (set by the device plugin), NVIDIA nodes
    found in the container's /dev (``<proc>/<pid>/root/dev``; injected by the runtime hook),
    and whether every process is the pod sandbox (``pause``).
    """
    pids = _read_pids(cgroup_dir)
    visible = None
    nodes = set()
    names = []
    for pid in pids:
        base = proc_file(proc_path, str(pid))
        cmdline = read_text(os.path.join(base, "cmdline"), limit=4096)
        if cmdline:
            names.append(os.path.basename(cmdline.split("\0", 1)[0]))
        if visible is None:
            env = read_text(os.path.join(base, "environ")) or ""
            for var in env.split("\0"):
                if var.startswith("NVIDIA_VISIBLE_DEVICES="):
                    value = var.split("=", 1)[1].strip()
                    if value.lower() not in _NON_EVIDENCE_VISIBLE:
                        visible = value[:256]
        for entry in list_dir(os.path.join(base, "root", "dev")):
            if entry == "nvidiactl" or GPU_NODE_RE.match(entry):
                nodes.add(entry)
    return {"pids": pids, "visible_devices": visible, "dev_nodes": sorted(nodes),
            "sandbox": bool(names) and all(n == "pause" for n in names)}


# --------------------------------------------------------------------------- evaluation

def _diagnosis(missing, ctl_allowed, any_gpu_allowed):
    names = [m["name"] for m in missing if m["required"]]
    if not names:
        return None
    if not ctl_allowed and not any_gpu_allowed:
        return ("every NVIDIA device entry is gone from the device cgroup: the kubelet "
                "CPU manager (static policy) or a systemd daemon-reload rewrote it without the "
                "devices the NVIDIA hook injected; set PASS_DEVICE_SPECS=true on the device "
                "plugin (and /dev/char symlinks for the systemd driver), then recreate the pod")
    if names == ["nvidia-uvm"]:
        return ("the container may open the GPU but not /dev/nvidia-uvm: the device plugin "
                "started before nvidia-uvm existed; load nvidia_uvm (nvidia-modprobe -u -c=0), "
                "restart the device-plugin pod on this node, then recreate the pod")
    return ("the device cgroup lacks %s: NVIDIA entries were rewritten (CPU manager static "
            "policy / daemon-reload) or never granted; recreate the pod after fixing the "
            "device plugin" % ", ".join(names))


def evaluate_container(ref, table, verdicts, evidence, allow_all=None):
    """Build the result for one container from per-device verdicts.

    ``verdicts`` maps device name to ``("allowed"|"denied"|"unknown", reason)``.
    """
    status = collections.OrderedDict(
        (d["name"], verdicts.get(d["name"], ("unknown", None))[0]) for d in table)
    by_name = dict((d["name"], d) for d in table)
    ctl_allowed = status.get("nvidiactl") == "allowed"
    gpu_minors = [d["minor"] for d in table
                  if d["role"] == "gpu" and status.get(d["name"]) == "allowed"]
    evidence_list = []
    if ctl_allowed or gpu_minors:
        evidence_list.append("cgroup")
    if evidence.get("visible_devices"):
        evidence_list.append("env")
    if evidence.get("dev_nodes"):
        evidence_list.append("dev_nodes")
    gpu = bool(evidence_list)
    warnings = []
    missing = []
    unchecked = []
    mig = []
    if gpu:
        for d in table:
            if d["role"] not in ("required", "recommended"):
                continue
            st, reason = verdicts.get(d["name"], ("unknown", "not checked"))
            if st == "denied":
                missing.append({"name": d["name"], "major": d["major"], "minor": d["minor"],
                                "path": d["path"], "required": d["role"] == "required"})
                if d["role"] == "recommended":
                    warnings.append("%s (%d:%d) is not allowed: profilers and some CUDA tools "
                                    "fail" % (d["name"], d["major"], d["minor"]))
            elif st == "unknown":
                unchecked.append(d["name"])
                warnings.append("%s could not be checked: %s" % (d["name"], reason))
        if "cgroup" not in evidence_list:
            warnings.append(
                "the container looks like a GPU container (%s) but its device cgroup allows "
                "neither nvidiactl nor any GPU" % ", ".join(
                    ("NVIDIA_VISIBLE_DEVICES=%s" % evidence["visible_devices"])
                    if e == "env" else "NVIDIA nodes in its /dev: %s"
                    % " ".join(evidence["dev_nodes"]) for e in evidence_list))
        allowed_gpus = set(gpu_minors)
        allowed_gi = set()
        for d in table:
            if d["role"] == "mig" and status.get(d["name"]) == "allowed":
                mig.append({"name": d["name"], "minor": d["minor"], "path": d["path"],
                            "gpu": d["gpu"], "gi": d["gi"], "ci": d["ci"], "cap": d["cap"]})
                if d["cap"] == "gi":
                    allowed_gi.add((d["gpu"], d["gi"]))
        for cap in mig:
            label = "gpu%s/gi%s%s" % (cap["gpu"], cap["gi"],
                                      "" if cap["ci"] is None else "/ci%s" % cap["ci"])
            if cap["gpu"] not in allowed_gpus and "nvidia%s" % cap["gpu"] in by_name:
                warnings.append("MIG %s is allowed but its parent /dev/nvidia%s is not"
                                % (label, cap["gpu"]))
            if cap["cap"] == "ci" and (cap["gpu"], cap["gi"]) not in allowed_gi:
                warnings.append("MIG %s is allowed but its GPU instance capability is not"
                                % label)
        if allow_all:
            warnings.append("devices.list shows 'a *:* rwm' (default allow): deny exceptions "
                            "are not listed by the kernel; mode probe checks them")
    broken = any(m["required"] for m in missing)
    return {
        "path": ref.path,
        "cgroup_dir": ref.cgroup_dir,
        "pod_uid": ref.pod_uid,
        "container_id": ref.container_id,
        "runtime": ref.runtime,
        "qos": ref.qos,
        "gpu": gpu,
        "gpu_evidence": evidence_list,
        "sandbox": evidence.get("sandbox", False),
        "processes": len(evidence.get("pids", [])),
        "allow_all": allow_all,
        "access": status,
        "gpu_minors": gpu_minors,
        "mig_caps": mig,
        "missing": missing,
        "unchecked": unchecked,
        "broken": broken,
        "diagnosis": _diagnosis(missing, ctl_allowed, bool(gpu_minors)) if broken else None,
        "warnings": warnings,
        "error": None,
    }


def list_verdicts(cgroup_dir, table):
    """Verdicts from the container's devices.list; ``(verdicts, allow_all)``.

    Raises CgroupDevicesError when the file cannot be read or parsed.
    """
    path = os.path.join(cgroup_dir, "devices.list")
    try:
        text = safe_io.read_text(path, limit=DEVICES_LIST_LIMIT)
    except safe_io.TooLarge:
        raise CgroupDevicesError(
            "%s is too large to be a devices.list (more than %d bytes; a real one is a few "
            "lines): not audited" % (path, DEVICES_LIST_LIMIT))
    except safe_io.UnsafeInput as e:
        raise CgroupDevicesError("cannot read %s: %s" % (path, e))
    except (IOError, OSError) as e:
        raise CgroupDevicesError("cannot read %s: %s" % (path, e.strerror or e))
    try:
        dl = DevicesList.from_text(text)
    except DevicesListError as e:
        raise CgroupDevicesError("%s: %s" % (path, e))
    verdicts = {}
    for d in table:
        ok = dl.allows(d["type"], d["major"], d["minor"], d["needs"])
        verdicts[d["name"]] = ("allowed" if ok else "denied", None)
    return verdicts, dl.allow_all


def probe_verdicts(cgroup_dir, table, method, timeout):
    """Verdicts from the kernel: a child process in the cgroup asks for each device node.

    Returns ``(verdicts, warnings)``; raises CgroupDevicesError when the probe cannot run.
    """
    verdicts = {}
    probed = []
    for d in table:
        if d["node"] == "present":
            probed.append(d)
        else:
            verdicts[d["name"]] = ("unknown", "no character device node at %s (%s)"
                                   % (d["path"], d["node"]))
    warnings = []
    if probed:
        try:
            outcome = cgroup_probe.probe_cgroup(cgroup_dir, [d["path"] for d in probed],
                                                access=[d["needs"] for d in probed],
                                                method=method, timeout=timeout)
        except cgroup_probe.ProbeError as e:
            raise CgroupDevicesError(str(e))
        for d, res in zip(probed, outcome.results):
            verdicts[d["name"]] = (res.verdict, res.reason)
        warnings.extend(outcome.warnings)
    return verdicts, warnings


def _error_entry(ref, evidence, message):
    return {
        "path": ref.path, "cgroup_dir": ref.cgroup_dir, "pod_uid": ref.pod_uid,
        "container_id": ref.container_id, "runtime": ref.runtime, "qos": ref.qos,
        "gpu": bool(evidence.get("visible_devices") or evidence.get("dev_nodes")),
        "gpu_evidence": [], "sandbox": evidence.get("sandbox", False),
        "processes": len(evidence.get("pids", [])), "allow_all": None, "access": {},
        "gpu_minors": [], "mig_caps": [], "missing": [], "unchecked": [], "broken": False,
        "diagnosis": None, "warnings": [], "error": message,
    }


def audit(cgroup_root="/sys/fs/cgroup", proc_path="/proc", dev_path="/dev", mode="auto",
          kubepods_path=None, probe_method="access", probe_timeout=10.0,
          process_evidence_enabled=True):
    """Audit every kubelet container cgroup; returns the module's result dict (no changed)."""
    if mode not in MODES:
        raise CgroupDevicesError("mode %r is not one of %s" % (mode, ", ".join(MODES)))
    if probe_method not in cgroup_probe.METHODS:
        raise CgroupDevicesError("probe_method %r is not one of %s"
                                 % (probe_method, ", ".join(cgroup_probe.METHODS)))
    if not os.path.isdir(dev_path):
        raise CgroupDevicesError("dev_path %s does not exist or is not a directory" % dev_path)
    if not os.path.isdir(proc_path):
        raise CgroupDevicesError("proc_path %s does not exist or is not a directory"
                                 % proc_path)
    try:
        probe_timeout = safe_io.check_timeout(probe_timeout, "probe_timeout", minimum=0.001)
    except safe_io.UnsafeInput as e:
        raise CgroupDevicesError(str(e))
    version, hierarchy = detect_layout(cgroup_root)
    effective = mode
    if mode == "auto":
        effective = "list" if version == "v1" else "probe"
    if effective == "list" and version == "v2":
        raise CgroupDevicesError(
            "mode list reads cgroup v1 devices.list, but cgroup_root %s is cgroup v2 (device "
            "access is a BPF program there); use mode probe or auto" % cgroup_root)
    if effective == "probe" and os.geteuid() != 0:
        raise CgroupDevicesError("mode probe must run as root: it moves a probe process into "
                                 "each container cgroup (use become: true)")
    table, host_warnings = build_device_table(proc_path, dev_path)
    kubepods = find_kubepods(hierarchy, kubepods_path)
    if not kubepods:
        host_warnings.append("no kubepods cgroup under %s: kubelet has no pods here, or set "
                             "kubepods_path" % hierarchy)
    refs = discover_containers(hierarchy, kubepods)
    containers = []
    for ref in refs:
        if process_evidence_enabled:
            evidence = process_evidence(ref.cgroup_dir, proc_path)
        else:
            evidence = {"pids": [], "visible_devices": None, "dev_nodes": [],
                        "sandbox": False}
        if not os.path.isdir(ref.cgroup_dir):
            continue  # container went away while we looked
        extra = []
        allow_all = None
        try:
            if effective == "list":
                verdicts, allow_all = list_verdicts(ref.cgroup_dir, table)
            else:
                verdicts, extra = probe_verdicts(ref.cgroup_dir, table, probe_method,
                                                 probe_timeout)
        except CgroupDevicesError as e:
            if not os.path.isdir(ref.cgroup_dir):
                continue
            containers.append(_error_entry(ref, evidence, str(e)))
            continue
        entry = evaluate_container(ref, table, verdicts, evidence, allow_all)
        entry["warnings"].extend(extra)
        containers.append(entry)
    broken = [{"path": c["path"], "pod_uid": c["pod_uid"], "container_id": c["container_id"],
               "missing": [m["name"] for m in c["missing"] if m["required"]],
               "diagnosis": c["diagnosis"]} for c in containers if c["broken"]]
    summary = {
        "pods": len(set(c["pod_uid"] for c in containers)),
        "containers": len(containers),
        "gpu_containers": sum(1 for c in containers if c["gpu"]),
        "broken": len(broken),
        "with_warnings": sum(1 for c in containers if c["warnings"]),
        "errors": sum(1 for c in containers if c["error"]),
    }
    return {
        "cgroup_version": version,
        "mode": effective,
        "hierarchy": hierarchy,
        "kubepods": kubepods,
        "devices": table,
        "containers": containers,
        "broken": broken,
        "summary": summary,
        "host_warnings": host_warnings,
    }
