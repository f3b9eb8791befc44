# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Audit rules: node facts in, findings out (controller side, pure functions).

Each rule reads the results of the node modules (gpu_facts, kubelet_facts, driver_guard,
checkpoint_sync, cgroup_devices) and the node's view from the Kubernetes API, and returns
findings with a stable id, a severity, the evidence that triggered it, the remediation (role
and variables) and references. ``FINDINGS`` is the registry: ids never change meaning.
"""
from __future__ import annotations

import math

from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu.pci import compare_gpus, listed_bus_ids, normalize_bus_id
from ansible_collections.kubegpu.fleet.plugins.module_utils._common.versions import DevicePluginVersion
from ansible_collections.kubegpu.fleet.plugins.plugin_utils import findings_stack

GH = "https://github.com/"
REF_R570 = [GH + "NVIDIA/gpu-operator/issues/1361", GH + "NVIDIA/go-nvml/issues/152"]
REF_ALLOC = [GH + "kubernetes/kubernetes/issues/130855", GH + "kubernetes/kubernetes/issues/129249"]
REF_CPUMGR = [GH + "kubernetes/kubernetes/issues/77073", GH + "NVIDIA/nvidia-docker/issues/966",
              GH + "NVIDIA/k8s-device-plugin/commit/ea604b28"]
REF_DEVCHAR = [GH + "NVIDIA/nvidia-container-toolkit/issues/48", GH + "opencontainers/runc/issues/3567"]
REF_UVM = [GH + "NVIDIA/k8s-device-plugin/blob/main/internal/plugin/server.go", GH + "moby/moby/issues/15270"]
REF_CKPT = ["https://github.com/kubernetes/kubernetes/tree/master/pkg/kubelet/cm/devicemanager/checkpoint"]
REF_XID = ["https://docs.nvidia.com/deploy/xid-errors/index.html"]
REF_MEMERR = ["https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/index.html",
              "https://docs.nvidia.com/deploy/dynamic-page-retirement/index.html"]
REF_DCGM = [GH + "NVIDIA/DCGM/blob/72fa3fe/modules/health/DcgmHealthWatch.cpp"]
REF_FM = ["https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/index.html"]
REF_MEM = ["https://kubernetes.io/docs/tasks/administer-cluster/reserve-compute-resources/",
           "https://cloud.google.com/kubernetes-engine/docs/concepts/plan-node-sizes"]

# Registry: id -> (severity, title). Severity can be raised per instance, never lowered below.
FINDINGS = {
    "driver.known_bad": ("critical", "Known-bad NVIDIA driver for this node's conditions"),
    "driver.at_risk": ("warning", "NVIDIA driver affected by a known bug whose trigger is absent today"),
    "driver.version_mismatch": ("critical", "NVIDIA userspace and kernel module versions differ (reboot pending)"),
    "driver.compute_utils": ("warning", "nvidia-compute-utils missing or at another version than the driver"),
    "nvml.hung": ("critical", "NVML does not answer (nvmlInit hung)"),
    "nvml.error": ("critical", "NVML fails on this node"),
    "kubelet.admission_blocked": ("critical", "Kubelet stopped admitting pods (device plugin Allocate hung)"),
    "cpumanager.device_specs": ("critical", "Static CPU manager with a device plugin that does not pass device specs"),
    "devchar.symlinks_missing": ("warning", "/dev/char symlinks for NVIDIA devices missing (systemd cgroup driver)"),
    "uvm.node_missing": ("critical", "/dev/nvidia-uvm missing or nvidia_uvm not loaded on the node"),
    "cgroup.devices_missing": ("critical", "GPU containers lost NVIDIA devices from their device cgroup"),
    "cgroup.uvm_tools_missing": ("info", "GPU containers cannot open /dev/nvidia-uvm-tools"),
    "checkpoint.stale": ("critical", "Kubelet device checkpoint names GPUs the node no longer has"),
    "kubelet.memory_reservation": ("warning", "Kubelet memory reservation missing or too small for the node"),
    "kubelet.eviction_hard_partial": ("warning", "evictionHard partially set: unset defaults are zeroed"),
    "node.not_ready": ("critical", "Node is NotReady in the Kubernetes API"),
    "cluster.device_plugin_outdated": ("critical", "NVIDIA device plugin older than 1.0.0-beta5"),
    "audit.module_failed": ("warning", "An audit probe could not run on this node"),
    "gpu.missing": ("critical", "GPUs on the PCI bus or in the inventory are missing from the driver's list"),
    "gpu.xid": ("info", "NVIDIA Xid errors in the kernel log since boot"),
    "gpu.reset_required": ("critical", "GPU memory repair pending: a GPU reset or reboot is needed"),
    "gpu.rma": ("critical", "GPU hardware fault that needs a replacement (RMA candidate)"),
    "gpu.ecc_uncorrectable": ("info", "Uncorrectable GPU memory (ECC) errors"),
    "gpu.recovery_action": ("warning", "The NVIDIA driver's recovery verdict for a GPU is not None"),
    "gpu.row_remap_exhausting": ("warning", "GPU memory banks running out of spare rows (early RMA signal)"),
    "gpu.pcie_degraded": ("warning", "GPU PCIe link degraded (trained below its maximum, or replaying)"),
    "gpu.clocks_slowdown": ("warning", "GPU clocks held down by hardware protection (thermal, power brake)"),
    "gpu.nvlink": ("warning", "NVLink errors or NVLinks down"),
    "gpu.fabric": ("critical", "GPU not registered with the NVLink fabric"),
    "nvswitch.sxid": ("info", "NVSwitch SXid errors in the kernel log since boot"),
}
# security.<component>, defect.<component>, fabricmanager.version_mismatch (catalog v2 rules).
FINDINGS.update(findings_stack.STACK_FINDINGS)

# gpu.xid severity from the action NVIDIA's catalog gives for the worst Xid on the node.
XID_SEVERITY = {"reboot": "critical", "reset_gpu": "critical", "investigate": "warning",
                "unknown": "warning", "restart_app": "info", "ignore": "info", "none": "info"}
# gpu.recovery_action severity from the driver's verdict (DCGM's health watch: GPU reset, node
# reboot and drain-and-reset FAIL, drain P2P WARN).
RECOVERY_SEVERITY = {"reset_gpu": "critical", "drain_and_reset": "critical", "reboot": "critical",
                     "drain_p2p": "warning", "recover_imex": "warning", "unknown": "warning"}
_ACTION_RANK = dict((a, i) for i, a in enumerate(
    ("none", "ignore", "restart_app", "unknown", "investigate", "reset_gpu", "reboot")))


def _worse(a, b):
    return a if _ACTION_RANK.get(a, 3) >= _ACTION_RANK.get(b, 3) else b


# Findings that take a person (hands-on work on the hardware): the node is cordoned with the
# reason and left; remediation.py and the report read this.
HANDS_ON = ("gpu.rma", "gpu.missing")

MIN_PLUGIN_FOR_DEVICE_SPECS = DevicePluginVersion("1.0.0-beta5")


def finding(fid, evidence, remediation=None, references=None, severity=None, title=None):
    sev, default_title = FINDINGS[fid]
    return {"id": fid, "severity": severity or sev, "title": title or default_title,
            "evidence": evidence, "remediation": remediation or {}, "references": list(references or [])}


def _g(d, *path, **kw):
    """Nested get that tolerates missing keys and non-dicts."""
    default = kw.get("default")
    cur = d
    for p in path:
        if not isinstance(cur, dict) or p not in cur:
            return default
        cur = cur[p]
    return cur


def _d(value):
    """``value`` when it is a mapping, else {}: a malformed node result never raises."""
    return value if isinstance(value, dict) else {}


def _l(value):
    """The dict items of ``value`` when it is a list, else []."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _num(value, default=0):
    """A number from a result field (bool and text are not numbers), else ``default``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return default
    return value


def _truthy_env(value):
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def plugin_version(image):
    """``nvcr.io/nvidia/k8s-device-plugin:v0.17.0`` -> DevicePluginVersion or None (digest, latest)."""
    if not isinstance(image, str) or ":" not in image.rsplit("/", 1)[-1]:
        return None
    tag = image.rsplit(":", 1)[1].split("@", 1)[0]
    try:
        return DevicePluginVersion(tag)
    except ValueError:
        return None


# ---------------------------------------------------------------------------------------------
# Rules. Each takes the node context ``ctx`` and returns a list of findings.


def rule_driver(ctx):
    dg = _d(ctx.get("driver_guard"))
    out = []
    verdict = dg.get("verdict")
    if verdict in ("known_bad", "at_risk"):
        fid = "driver.known_bad" if verdict == "known_bad" else "driver.at_risk"
        rec = dg.get("recommended_version")
        rec_version = rec.get("version") if isinstance(rec, dict) else rec
        matches = _l(dg.get("matches"))
        refs = []
        for m in matches:
            refs.extend(r for r in (m.get("references") if isinstance(m.get("references"), list) else [])
                        if isinstance(r, str))
        out.append(finding(fid, {
            "driver_version": dg.get("driver_version") or _g(ctx, "nvidia", "driver_version"),
            "branch": dg.get("branch"),
            "matches": [m.get("id") for m in matches],
            "mig_mixed": _g(ctx, "nvidia", "mig_mixed"),
            "recommended_version": rec,
        }, remediation={
            "summary": "upgrade the driver within its branch to %s with nvidia-compute-utils at the same "
                       "version, reboot, restart kubelet" % (rec_version or "the first fixed release"),
            "role": "kubegpu.fleet.driver",
            "vars": {"kubegpu_driver_version": rec_version} if rec_version else {},
        }, references=refs or REF_R570))
    if dg.get("reboot_pending"):
        out.append(finding("driver.version_mismatch", {
            "installed_version": dg.get("driver_version") or _g(ctx, "nvidia", "driver_version"),
            "kernel_module_version": dg.get("kernel_module_version")
            or _g(ctx, "nvidia", "kernel_module_version"),
            "nvml_error": _g(ctx, "nvidia", "probe", "error"),
        }, remediation={"summary": "reboot the node through the rolling rollout",
                        "role": "kubegpu.fleet.rolling_reboot", "vars": {"kubegpu_reboot": "needed"}}))
    cu = _d(dg.get("compute_utils"))
    if cu.get("checked") and (not cu.get("installed") or cu.get("matches_driver") is False):
        out.append(finding("driver.compute_utils", {
            "package": cu.get("package"), "installed": cu.get("installed"),
            "installed_version": cu.get("version"), "driver_version": dg.get("driver_version"),
            "reason": cu.get("reason"),
        }, remediation={"summary": "install %s at the driver's version (provides nvidia-cuda-mps-control)"
                        % (cu.get("package") or "nvidia-compute-utils-<branch>"),
                        "role": "kubegpu.fleet.driver",
                        "vars": {"kubegpu_driver_version": dg.get("driver_version")}},
            references=["https://github.com/NVIDIA/gpu-operator/issues/1361"]))
    return out


def rule_nvml(ctx):
    nv = _d(ctx.get("nvidia"))
    probe = _d(nv.get("probe"))
    status = probe.get("status")
    if status == "hung":
        return [finding("nvml.hung", {"backend": probe.get("backend"), "elapsed": probe.get("elapsed"),
                                      "timeout": probe.get("timeout"), "driver_version": nv.get("driver_version")
                                      or nv.get("kernel_module_version")},
                        remediation={"summary": "upgrade a known-bad driver (kubegpu.fleet.driver) and reboot; "
                                                "restart kubelet afterwards",
                                     "role": "kubegpu.fleet.driver"}, references=REF_R570)]
    if status == "error":
        err = probe.get("error") or ""
        if "RM_VERSION_MISMATCH" in str(err) and _d(ctx.get("driver_guard")).get("reboot_pending"):
            return []  # reported once, as driver.version_mismatch
        return [finding("nvml.error", {"error": err, "backend": probe.get("backend")},
                        remediation={"summary": "inspect the driver on the node; reboot if the kernel module "
                                                "and userspace differ", "role": "kubegpu.fleet.rolling_reboot"})]
    return []


def rule_admission(ctx, pending_threshold_s):
    api = _d(ctx.get("api"))
    stuck = [p for p in _l(api.get("pending_pods"))
             if _num(p.get("pending_seconds")) >= pending_threshold_s and not p.get("kubelet_events")]
    log_hits = [u for u in _l(_g(ctx, "kubelet", "allocation_log", "unanswered", default=[]))
                if u.get("age_seconds") is None or _num(u["age_seconds"]) >= pending_threshold_s]
    if not stuck and not log_hits:
        return []
    return [finding("kubelet.admission_blocked", {
        "pending_pods": ["%s/%s" % (p.get("namespace"), p.get("name")) for p in stuck],
        "oldest_pending_seconds": max([_num(p.get("pending_seconds")) for p in stuck] or [0]),
        "threshold_seconds": pending_threshold_s,
        "kubelet_log_unanswered_allocations": log_hits,
    }, remediation={"summary": "fix the hung device plugin (known-bad driver upgrade), then restart kubelet",
                    "role": "kubegpu.fleet.kubelet", "vars": {"kubegpu_kubelet_restart": True}},
        references=REF_ALLOC + REF_R570)]


def rule_cpumanager(ctx):
    kl = _d(ctx.get("kubelet"))
    dp = _d(_g(ctx, "api", "device_plugin"))
    out = []
    if kl.get("cpu_manager_policy") == "static" and dp:
        version = plugin_version(dp.get("image"))
        pass_specs = _truthy_env(dp.get("pass_device_specs"))
        too_old = version is not None and version < MIN_PLUGIN_FOR_DEVICE_SPECS
        if too_old or not pass_specs:
            out.append(finding("cpumanager.device_specs", {
                "cpu_manager_policy": "static", "device_plugin_image": dp.get("image"),
                "device_plugin_version": version.text if version else None,
                "PASS_DEVICE_SPECS": dp.get("pass_device_specs"), "plugin_older_than_1.0.0-beta5": too_old,
                "daemonset": dp.get("daemonset"),
            }, remediation={"summary": "set PASS_DEVICE_SPECS=true on the device plugin DaemonSet (and upgrade it "
                                       "to >= 1.0.0-beta5), then restart its pod on this node",
                            "role": "kubegpu.fleet.device_plugin",
                            "vars": {"kubegpu_device_plugin_pass_device_specs": True}},
                references=REF_CPUMGR))
    nv = _d(ctx.get("nvidia"))
    if kl.get("cgroup_driver") == "systemd" and nv.get("present"):
        missing = [n.get("path") for n in _l(nv.get("device_nodes"))
                   if n.get("exists") and n.get("dev_char_link") is not None and not n.get("dev_char_link")]
        if missing:
            out.append(finding("devchar.symlinks_missing", {"cgroup_driver": "systemd", "devices": missing},
                               remediation={"summary": "nvidia-ctk system create-dev-char-symlinks --create-all "
                                                       "at boot plus the udev rule",
                                            "role": "kubegpu.fleet.device_plugin"},
                               references=REF_DEVCHAR))
    return out


def rule_uvm(ctx):
    nv = _d(ctx.get("nvidia"))
    if not nv.get("present"):
        return []
    nodes = dict((n.get("name"), n) for n in _l(nv.get("device_nodes")) if isinstance(n.get("name"), str))
    uvm = _d(nodes.get("nvidia-uvm"))
    loaded = _g(nv, "kernel_modules", "nvidia_uvm")
    if isinstance(loaded, dict):
        loaded = loaded.get("loaded")
    if uvm.get("exists") and loaded is not False:
        return []
    return [finding("uvm.node_missing", {"dev_nvidia_uvm_exists": bool(uvm.get("exists")),
                                         "nvidia_uvm_loaded": loaded},
                    remediation={"summary": "load nvidia_uvm and create control device nodes at boot before "
                                            "kubelet (nvidia-modprobe -u -c=0), restart the device plugin pod",
                                 "role": "kubegpu.fleet.device_plugin"}, references=REF_UVM)]


def rule_cgroups(ctx):
    cg = _d(ctx.get("cgroups"))
    pods = dict((p.get("uid"), p) for p in _l(_g(ctx, "api", "pods", default=[]))
                if isinstance(p.get("uid"), str))
    broken, tools = [], []
    for c in _l(cg.get("containers")):
        if not c.get("gpu"):
            continue
        pod = pods.get(c.get("pod_uid")) if isinstance(c.get("pod_uid"), str) else None
        label = "%s/%s" % (pod.get("namespace"), pod.get("name")) if pod else c.get("pod_uid")
        missing = _l(c.get("missing"))
        required_missing = [m.get("name") for m in missing if m.get("required")]
        if required_missing:
            broken.append({"pod": label, "container_id": c.get("container_id"), "missing": required_missing})
        elif missing:
            tools.append({"pod": label, "container_id": c.get("container_id")})
    out = []
    if broken:
        uvm_only = all(b["missing"] == ["nvidia-uvm"] for b in broken)
        out.append(finding("cgroup.devices_missing", {"containers": broken, "count": len(broken)},
                           remediation={"summary": ("restart the device plugin pod after nvidia_uvm is loaded, then "
                                                    "recreate the affected GPU pods") if uvm_only else
                                        ("set PASS_DEVICE_SPECS=true on the device plugin and recreate the "
                                         "affected GPU pods"),
                                        "role": "kubegpu.fleet.device_plugin",
                                        "vars": {"kubegpu_device_plugin_recreate_broken_pods": True}},
                           references=REF_UVM if uvm_only else REF_CPUMGR))
    if tools:
        out.append(finding("cgroup.uvm_tools_missing", {"containers": tools},
                           remediation={"summary": "usually harmless (profilers need it); restart the device "
                                                   "plugin pod", "role": "kubegpu.fleet.device_plugin"}))
    return out


def rule_checkpoint(ctx):
    ck = _d(ctx.get("checkpoint"))
    if not ck.get("stale"):
        return []
    return [finding("checkpoint.stale", {"path": ck.get("path"), "stale_ids": ck.get("stale_ids"),
                                         "format": ck.get("format")},
                    remediation={"summary": "drain, back up and remove the checkpoint, restart kubelet",
                                 "role": "kubegpu.fleet.kubelet",
                                 "vars": {"kubegpu_kubelet_sync_checkpoint": True}}, references=REF_CKPT)]


def rule_memory(ctx, min_fraction):
    kl = _d(ctx.get("kubelet"))
    mem = _d(kl.get("memory"))
    if not kl or not mem or kl.get("config_error"):
        return []  # nothing trustworthy to compare (no kubelet config read)
    out = []
    reserved = _num(mem.get("reserved_total_bytes"))
    recommended = _num(mem.get("recommended_reserved_bytes"), None)
    if recommended and reserved < recommended * min_fraction:
        out.append(finding("kubelet.memory_reservation", {
            "node_memory_bytes": kl.get("node_memory_bytes"), "reserved_bytes": reserved,
            "recommended_reserved_bytes": recommended, "rule": "GKE ladder",
        }, remediation={"summary": "set systemReserved/kubeReserved memory from the GKE ladder and a complete "
                                   "evictionHard", "role": "kubegpu.fleet.kubelet"}, references=REF_MEM))
    if mem.get("eviction_hard_partial"):
        out.append(finding("kubelet.eviction_hard_partial", {"eviction_hard": mem.get("eviction_hard")},
                           remediation={"summary": "write evictionHard completely", "role": "kubegpu.fleet.kubelet"},
                           references=REF_MEM))
    return out


def rule_api_node(ctx):
    api = _d(ctx.get("api"))
    if api.get("ready") is False:
        return [finding("node.not_ready", {"conditions": api.get("conditions")},
                        remediation={"summary": "investigate kubelet on the node"})]
    return []


def _gpu_label(gpu):
    return "GPU %s (%s)" % (gpu.get("index"), gpu.get("pci_bus_id") or gpu.get("uuid") or "?")


def rule_gpu_presence(ctx, expected_gpus=None):
    """gpu.missing: the node's PCI scan vs the driver's list (node side, ``presence``) joined
    here with what the controller knows - the Node's advertised ``nvidia.com/gpu``
    (allocatable, from the cluster view) and the inventory's expected count."""
    nv = _d(ctx.get("nvidia"))
    presence = _d(nv.get("presence"))
    if not presence:
        return []  # an older gpu_facts, or gpu_facts failed (audit.module_failed says so)
    gpus = _l(nv.get("gpus"))
    pci = _d(nv.get("pci"))
    answered = nv.get("source") in ("nvml", "nvidia_smi")
    capacity = _d(_d(ctx.get("api")).get("allocatable")).get("nvidia.com/gpu") if answered else None
    if str(capacity).strip() in ("0", ""):
        # Nothing advertised at all is the device plugin's state (not running, not registered;
        # the device plugin and kubelet findings cover it), not evidence about the hardware.
        capacity = None
    mig = len([g for g in gpus if _g(g, "mig_mode", "current") == "enabled"])
    cmp = compare_gpus(_l(pci.get("gpus")) if presence.get("compared") else None,
                       listed_bus_ids(gpus),
                       capacity=capacity, expected_count=expected_gpus, mig_gpus=mig,
                       xid_gpus=_d(_d(nv.get("xid")).get("gpus")))
    # A GPU the driver lists that this sysfs does not show (a container's partial /sys) is
    # evidence, not a missing GPU.
    problems = [p for p in cmp["problems"] if not p.startswith("the driver lists ")]
    problems += [p for p in presence.get("problems") or [] if str(p).startswith("nvidia-smi reports")]
    if not problems:
        return []
    bound = [m["bus_id"] for m in cmp["missing"] if "bound to nvidia" in m["reason"]]
    return [finding("gpu.missing", {
        "missing": cmp["missing"], "bus_ids": [m["bus_id"] for m in cmp["missing"]],
        "pci_count": cmp["pci_count"], "present_count": cmp["present_count"],
        "capacity": cmp["capacity"], "expected_count": cmp["expected_count"],
        "not_on_bus": cmp["not_on_bus"], "problems": problems, "hands_on": True},
        remediation={"summary": "a person checks the GPU%s %s (reseat, power, firmware; RMA if it "
                                "stays off the bus); the node is cordoned until then"
                                % ("s" if len(bound) != 1 else "", ", ".join(bound) or "count")},
        references=REF_XID)]


def rule_gpu_xid(ctx):
    """gpu.xid: Xid events of this boot per GPU, with the action NVIDIA documents. A scan that
    read none or only the newest part of this boot's kernel log (its ``warning``) is also an
    audit.module_failed warning: no Xid found is then no proof that there was none."""
    nv = _d(ctx.get("nvidia"))
    xid = _d(nv.get("xid"))
    return _xid_scan_incomplete(xid) + _xid_events(xid, nv)


def _xid_scan_incomplete(xid):
    warning = xid.get("warning")
    if not isinstance(warning, str) or not warning:
        return []
    scanned = xid.get("scanned") is not False
    return [finding("audit.module_failed", {
        "probe": "gpu_facts", "part": "xid", "error": warning, "source": xid.get("source"),
        "scanned": scanned, "truncated": bool(xid.get("truncated")),
        "dropped_bytes": _num(xid.get("dropped_bytes"))},
        title="Xid scan %s: %s" % ("incomplete" if scanned else "failed", warning),
        remediation={"summary": "look for Xid errors in this boot's kernel log on the node by hand "
                                "(journalctl -k -b | grep 'NVRM: Xid')%s"
                                % ("" if scanned else "; let the audit read the journal, /dev/kmsg "
                                   "or dmesg (root on the host, not a container without them)")},
        references=REF_XID)]


def _remedy(summary, rollout):
    rem = {"summary": summary}
    if rollout:
        rem["role"] = "kubegpu.fleet.rolling_reboot"
    return rem


def _driver_verdicts(nv):
    """``{bus_id: recovery verdict}`` of the GPUs whose driver reports one (R570+)."""
    out = {}
    for g in _l(_d(nv).get("gpus")):
        rec = _d(_d(g.get("health_verdict")).get("recovery"))
        bus = normalize_bus_id(g.get("pci_bus_id")) if isinstance(g.get("pci_bus_id"), str) else None
        if bus and rec.get("action"):
            out[bus] = rec
    return out


def _xid_events(xid, nv=None):
    per_gpu = _d(xid.get("gpus"))
    if not any(_num(_d(g).get("total")) for g in per_gpu.values()):
        return []  # none, or only events a GPU reset of this boot cleared (before_reset)
    verdicts = _driver_verdicts(nv)
    gpus = []
    node_action = "none"
    for bus_id, g in sorted(per_gpu.items()):
        g = _d(g)
        last = _d(g.get("last"))
        catalog_action = g.get("action") or "none"
        action = catalog_action
        driver = verdicts.get(bus_id)
        if driver and catalog_action in ("reset_gpu", "reboot"):
            # The driver's own verdict decides what a reset or a reboot is for; the catalog is
            # the fallback on drivers that do not report one.
            action = driver["action"]
        elif driver:
            action = _worse(catalog_action, driver["action"]) if driver["action"] in ("reset_gpu", "reboot") \
                else catalog_action
        node_action = _worse(action, node_action)
        item = {"bus_id": bus_id, "counts": g.get("counts"), "total": g.get("total"),
                "action": action, "catalog_action": catalog_action,
                "driver_action": driver.get("driver_action") if driver else None,
                "action_xids": g.get("action_xids"), "action_events": g.get("action_events") or [],
                "last": {"xid": last.get("xid"), "message": last.get("message"),
                         "timestamp": last.get("timestamp"), "gpu_instance": last.get("gpu_instance"),
                         "compute_instance": last.get("compute_instance")},
                "meanings": dict((k, _d(v).get("meaning")) for k, v in _d(g.get("classes")).items()),
                "unknown_xids": sorted(int(k) for k, v in _d(g.get("classes")).items()
                                       if _d(v).get("action") == "unknown" and str(k).isdigit())}
        for key in ("mig", "kernel_events", "before_reset"):
            if g.get(key):
                item[key] = g[key]
        gpus.append(item)
    summary = {"reboot": "reboot the node (drained first)",
               "reset_gpu": "drain the node and reset the GPU (nvidia-smi -r); reboot if the reset is "
                            "refused or fails",
               "investigate": "a person follows NVIDIA's workflow for these Xids; the node is cordoned",
               "unknown": "Xids NVIDIA's catalog gives no immediate action for: reported, nothing is done",
               "restart_app": "the application on the GPU restarts; nothing to do on the node",
               "ignore": "informational; nothing to do",
               "none": "the driver reports no recovery needed; nothing to do"}.get(
                   node_action, "see NVIDIA's Xid catalog")
    return [finding("gpu.xid", {"action": node_action, "catalog_action": xid.get("action") or "none",
                                "source": xid.get("source"), "events": xid.get("events"),
                                "gpus": gpus, "hands_on": node_action == "investigate"},
                    remediation={"summary": summary}, references=REF_XID,
                    severity=XID_SEVERITY.get(node_action, "warning"))]


def rule_nvswitch(ctx):
    """nvswitch.sxid: SXid records of this boot per NVSwitch; a fatal one (the record says so)
    stops the fabric and needs the NVSwitches and GPUs reset together: a reboot."""
    xid = _d(_d(ctx.get("nvidia")).get("xid"))
    switches = _d(xid.get("nvswitches"))
    if not switches:
        return []
    action = xid.get("sxid_action") or "none"
    items = []
    for bus_id, sw in sorted(switches.items()):
        sw = _d(sw)
        items.append({"bus_id": bus_id, "switch": sw.get("switch"), "counts": sw.get("counts"),
                      "fatal": sw.get("fatal"), "non_fatal": sw.get("non_fatal"),
                      "action": sw.get("action"), "last": sw.get("last")})
    severity = {"reboot": "critical", "unknown": "warning"}.get(action, "info")
    summary = ("drain and reboot the node: a fatal SXid needs the NVSwitches and GPUs reset together"
               if action == "reboot" else "non-fatal NVSwitch errors: reported, nothing to do")
    return [finding("nvswitch.sxid", {"action": action, "switches": items},
                    remediation=_remedy(summary, action in ("reboot",)),
                    references=REF_FM, severity=severity)]


_HEALTH_TEXT = {
    "gpu.row_remap_exhausting": ("watch the GPU: when a bank has no spare rows, its next uncorrectable "
                                 "error is a row remapping failure (RMA)", REF_MEMERR + REF_DCGM),
    "gpu.pcie_degraded": ("check the GPU's seating, riser and slot at the next maintenance (a slot wired "
                          "narrower than the GPU shows the same)", REF_DCGM),
    "gpu.clocks_slowdown": ("check cooling and power delivery of the node", REF_DCGM),
    "gpu.nvlink": ("follow NVIDIA's NVLink workflow if the errors grow or links stay down", REF_DCGM + REF_XID),
    "gpu.fabric": ("check nvidia-fabricmanager on the node; CUDA jobs cannot use the GPU until it is "
                   "registered with the fabric", REF_FM),
}


def rule_gpu_health(ctx):
    """gpu.reset_required, gpu.rma, gpu.ecc_uncorrectable, gpu.recovery_action and the
    monitoring findings from each GPU's health verdict."""
    reset, rma, ecc, recovery = [], [], [], []
    others = {}
    for g in _l(_d(ctx.get("nvidia")).get("gpus")):
        v = _d(g.get("health_verdict"))
        if not v:
            continue
        details = _d(v.get("details"))
        item = {"gpu": _gpu_label(g), "bus_id": g.get("pci_bus_id"), "uuid": g.get("uuid"),
                "reasons": v.get("reasons")}
        if v.get("reset_required"):
            reset.append(dict(item, reasons=details.get("gpu.reset_required") or v.get("reasons")))
        if v.get("rma"):
            rma.append(dict(item, reasons=details.get("gpu.rma") or v.get("reasons")))
        unc = _d(v.get("ecc_uncorrectable"))
        if unc.get("scope"):
            ecc.append(dict(item, volatile=unc.get("volatile"), aggregate=unc.get("aggregate"),
                            scope=unc.get("scope")))
        rec = _d(v.get("recovery"))
        if rec.get("driver_action") not in (None, "none"):
            recovery.append(dict(item, reasons=details.get("gpu.recovery_action"),
                                 driver_action=rec.get("driver_action"), action=rec.get("action"),
                                 source=rec.get("source"), raw=rec.get("raw")))
        for fid in _HEALTH_TEXT:
            if details.get(fid):
                entry = dict(item, reasons=details[fid])
                if fid == "gpu.pcie_degraded":
                    entry["pcie"] = v.get("pcie")
                others.setdefault(fid, []).append(entry)
    out = []
    if recovery:
        action = "none"
        for r in recovery:
            action = _worse(r.get("action") or "unknown", action)
        severity = "warning"
        for r in recovery:
            if RECOVERY_SEVERITY.get(r.get("driver_action"), "warning") == "critical":
                severity = "critical"
        summary = {"reset_gpu": "drain the node and reset the GPU (nvidia-smi -r), as the driver asks; "
                                "reboot if the reset is refused or fails",
                   "reboot": "drain and reboot the node, as the driver asks"}.get(
                       action, "the driver asks to quiesce peer-to-peer traffic or to recover the IMEX "
                               "domain: reported for a person")
        out.append(finding("gpu.recovery_action", {"action": action, "gpus": recovery},
                           remediation=_remedy(summary, action in ("reset_gpu", "reboot")),
                           references=REF_DCGM + REF_XID, severity=severity))
    if reset:
        out.append(finding("gpu.reset_required", {"gpus": reset},
                           remediation={"summary": "drain the node and reset the GPU (nvidia-smi -r; the "
                                                   "pending row remap / page retirement / repair takes "
                                                   "effect); reboot if the reset is refused or fails",
                                        "role": "kubegpu.fleet.rolling_reboot"},
                           references=REF_MEMERR))
    if rma:
        out.append(finding("gpu.rma", {"gpus": rma, "hands_on": True},
                           remediation={"summary": "a person replaces the GPU (RMA); the node is cordoned "
                                                   "until then"},
                           references=REF_MEMERR + REF_DCGM))
    if ecc:
        volatile = any(e["scope"] == "volatile" for e in ecc)
        out.append(finding("gpu.ecc_uncorrectable", {"gpus": ecc},
                           remediation={"summary": "watch the GPU: uncorrectable errors since the driver "
                                                   "loaded" if volatile else "history only (lifetime count)"},
                           references=REF_MEMERR, severity="warning" if volatile else "info"))
    for fid, items in sorted(others.items()):
        summary, refs = _HEALTH_TEXT[fid]
        severity = None
        if fid == "gpu.nvlink" and any("NVLinks down" in r for i in items for r in i["reasons"]):
            severity = "critical"  # DCGM: an NVLink down on a GPU not in MIG mode is a FAIL
        out.append(finding(fid, {"gpus": items}, remediation={"summary": summary},
                           references=refs, severity=severity))
    return out


def rule_module_failures(ctx):
    out = []
    for name, err in sorted(_d(ctx.get("errors")).items(), key=lambda kv: str(kv[0])):
        out.append(finding("audit.module_failed", {"probe": name, "error": err},
                           title="Audit probe %s could not run" % name))
    return out


def evaluate_node(ctx, pending_threshold_s=300, memory_min_fraction=0.8, skip=(), expected_gpus=None):
    """All findings for one node. ``ctx`` keys: nvidia, kubelet, driver_guard, checkpoint,
    cgroups, api, errors (probe name -> message). ``expected_gpus``: the GPUs the inventory
    says the node has (None: not checked)."""
    ctx = _d(ctx)
    out = []
    rules = (("driver", rule_driver, ()), ("nvml", rule_nvml, ()),
             ("admission", rule_admission, (pending_threshold_s,)), ("cpumanager", rule_cpumanager, ()),
             ("uvm", rule_uvm, ()), ("cgroups", rule_cgroups, ()), ("checkpoint", rule_checkpoint, ()),
             ("memory", rule_memory, (memory_min_fraction,)), ("api_node", rule_api_node, ()),
             ("gpu_presence", rule_gpu_presence, (expected_gpus,)), ("gpu_xid", rule_gpu_xid, ()),
             ("nvswitch", rule_nvswitch, ()),
             ("gpu_health", rule_gpu_health, ()), ("catalog", findings_stack.rule_catalog, ()),
             ("fabricmanager", findings_stack.rule_fabricmanager, ()),
             ("module_failures", rule_module_failures, ()))
    for name, rule, args in rules:
        try:
            out += rule(ctx, *args)
        except (AttributeError, TypeError, KeyError, ValueError, IndexError) as e:
            # A node result of an unexpected shape: reported, and the other rules still run.
            out.append(finding("audit.module_failed", {
                "probe": "evaluate:%s" % name,
                "error": "malformed input for rule %s: %s: %s" % (name, type(e).__name__, e)},
                title="Audit rule %s could not read this node's facts" % name))
    return [f for f in out if f["id"] not in skip]


def evaluate_cluster(daemonsets):
    """Cluster-wide findings from the device plugin DaemonSets (list of summaries)."""
    out = []
    for ds in _l(daemonsets):
        v = plugin_version(ds.get("image"))
        if v is not None and v < MIN_PLUGIN_FOR_DEVICE_SPECS:
            f = finding("cluster.device_plugin_outdated", {"daemonset": ds.get("name"), "namespace": ds.get("namespace"),
                                                           "image": ds.get("image")},
                        remediation={"summary": "upgrade the device plugin", "role": "kubegpu.fleet.device_plugin"},
                        references=REF_CPUMGR)
            f["node"] = None
            out.append(f)
    return out
