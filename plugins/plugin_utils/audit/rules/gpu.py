# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Audit rules of GPU hardware health: GPUs missing from the driver's list, Xid and NVSwitch SXid
errors of this boot, and each GPU's health verdict (pending memory repair, RMA, ECC, the driver's
recovery action, row remap, PCIe, clocks, NVLink, fabric)."""
from __future__ import annotations

from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu.pci import compare_gpus, listed_bus_ids, normalize_bus_id
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.finding_types import REF_XID, finding
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.fields import as_dict as _d, dict_items as _l, nested as _g, number as _num


XID_SEVERITY = {"reboot": "critical", "reset_gpu": "critical", "investigate": "warning",
                "unknown": "warning", "restart_app": "info", "ignore": "info", "none": "info"}


RECOVERY_SEVERITY = {"reset_gpu": "critical", "drain_and_reset": "critical", "reboot": "critical",
                     "drain_p2p": "warning", "recover_imex": "warning", "unknown": "warning"}


_ACTION_RANK = dict((a, i) for i, a in enumerate(
    ("none", "ignore", "restart_app", "unknown", "investigate", "reset_gpu", "reboot")))


def _worse(a, b):
    return a if _ACTION_RANK.get(a, 3) >= _ACTION_RANK.get(b, 3) else b


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
                                % ("s" if len(bound) != 1 else "", ", ".join(bound) or "count")})]


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
                    remediation={"summary": summary}, fix=False,
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
                    remediation={"summary": summary}, fix=action == "reboot", severity=severity)]


# The monitoring findings of a GPU's health verdict (its ``details``) and what to do about each.
_HEALTH_TEXT = {
    "gpu.row_remap_exhausting": "watch the GPU: when a bank has no spare rows, its next uncorrectable "
                                "error is a row remapping failure (RMA)",
    "gpu.pcie_degraded": "check the GPU's seating, riser and slot at the next maintenance (a slot wired "
                         "narrower than the GPU shows the same)",
    "gpu.clocks_slowdown": "check cooling and power delivery of the node",
    "gpu.nvlink": "follow NVIDIA's NVLink workflow if the errors grow or links stay down",
    "gpu.fabric": "check nvidia-fabricmanager on the node; CUDA jobs cannot use the GPU until it is "
                  "registered with the fabric",
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
                           remediation={"summary": summary}, fix=action in ("reset_gpu", "reboot"),
                           severity=severity))
    if reset:
        out.append(finding("gpu.reset_required", {"gpus": reset},
                           remediation={"summary": "drain the node and reset the GPU (nvidia-smi -r; the "
                                                   "pending row remap / page retirement / repair takes "
                                                   "effect); reboot if the reset is refused or fails"}))
    if rma:
        out.append(finding("gpu.rma", {"gpus": rma, "hands_on": True},
                           remediation={"summary": "a person replaces the GPU (RMA); the node is cordoned "
                                                   "until then"}))
    if ecc:
        volatile = any(e["scope"] == "volatile" for e in ecc)
        out.append(finding("gpu.ecc_uncorrectable", {"gpus": ecc},
                           remediation={"summary": "watch the GPU: uncorrectable errors since the driver "
                                                   "loaded" if volatile else "history only (lifetime count)"},
                           severity="warning" if volatile else "info"))
    for fid in sorted(_HEALTH_TEXT):
        items = others.get(fid)
        if not items:
            continue
        severity = None
        if fid == "gpu.nvlink" and any("NVLinks down" in r for i in items for r in i["reasons"]):
            severity = "critical"  # DCGM: an NVLink down on a GPU not in MIG mode is a FAIL
        out.append(finding(fid, {"gpus": items}, remediation={"summary": _HEALTH_TEXT[fid]}, severity=severity))
    return out
