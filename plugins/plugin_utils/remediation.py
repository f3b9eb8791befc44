# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which fixes a node's audit findings call for (controller side, plain functions).

The remediate playbook runs the audit, turns each node's findings into a plan with
:func:`plan_node`, then runs only the roles the plan names, inside a maintenance window
(cordon, drain, ..., reboot, validate, uncordon) only where a fix disrupts the node's pods.
"""
from __future__ import annotations

# Findings whose fix changes what running GPU pods depend on (driver files, the device
# checkpoint, device cgroups of existing containers) or needs a reboot: the node is drained
# first and goes through the rolling_reboot window.
DRAIN = frozenset((
    "driver.known_bad", "driver.at_risk", "driver.version_mismatch",
    "nvml.hung", "nvml.error", "kubelet.admission_blocked", "cgroup.devices_missing",
    "cgroup.uvm_tools_missing", "checkpoint.stale",
))
# The kubelet on these nodes is wedged in a device-plugin call: it never confirms pod
# deletions, so evicted pods stay Terminating until the node reboots.
WEDGED = frozenset(("nvml.hung", "kubelet.admission_blocked"))
# Findings that need a reboot whatever role runs (the kernel module must change).
REBOOT = frozenset(("driver.version_mismatch", "nvml.error", "nvml.hung"))
# Findings nothing here can fix automatically: reported, the node is not touched for them.
MANUAL = frozenset(("node.not_ready", "audit.module_failed"))

ROLE_FOR = {
    "driver.known_bad": "driver",
    "driver.at_risk": "driver",
    "driver.compute_utils": "driver",
    "nvml.hung": "driver",
    "kubelet.admission_blocked": "kubelet",
    "checkpoint.stale": "kubelet",
    "kubelet.memory_reservation": "kubelet",
    "kubelet.eviction_hard_partial": "kubelet",
    "cpumanager.device_specs": "device_plugin",
    "devchar.symlinks_missing": "device_plugin",
    "uvm.node_missing": "device_plugin",
    "cgroup.devices_missing": "device_plugin",
    "cgroup.uvm_tools_missing": "device_plugin",
    "driver.version_mismatch": "rolling_reboot",
    "nvml.error": "rolling_reboot",
}


def _vars(finding):
    rem = finding.get("remediation") or {}
    out = rem.get("vars") or {}
    return dict(out) if isinstance(out, dict) else {}


def plan_node(audit, skip_findings=()):
    """Plan for one node from its ``kubegpu_audit`` fact.

    Returns a dict: ``fix`` (anything to do), ``roles`` (role short name -> vars for it),
    ``drain``, ``wedged``, ``reboot`` (a reboot is needed whatever the roles find),
    ``findings`` (ids acted on), ``manual`` (ids left for a person), ``skipped`` (ids the
    operator asked to leave), ``reason`` (one line).
    """
    audit = audit or {}
    status = audit.get("status") or "unknown"
    empty = {"fix": False, "roles": {}, "drain": False, "wedged": False, "reboot": False,
             "findings": [], "manual": [], "skipped": [], "status": status}
    if status != "audited":
        empty["reason"] = "not audited (%s): nothing is changed on it" % status
        return empty
    roles, ids, manual, skipped = {}, [], [], []
    for f in audit.get("findings") or []:
        fid = f.get("id")
        if not fid:
            continue
        if fid in skip_findings:
            skipped.append(fid)
            continue
        if fid in MANUAL or fid not in ROLE_FOR:
            manual.append(fid)
            continue
        ids.append(fid)
        role = ROLE_FOR[fid]
        roles.setdefault(role, {}).update(_vars(f))
    ids_set = set(ids)
    plan = dict(empty)
    plan.update(findings=sorted(ids_set), manual=sorted(set(manual)), skipped=sorted(set(skipped)))
    plan["drain"] = bool(ids_set & DRAIN)
    plan["wedged"] = bool(ids_set & WEDGED)
    plan["reboot"] = bool(ids_set & REBOOT)
    if "rolling_reboot" in roles:
        rr = roles.pop("rolling_reboot")
        if rr.get("kubegpu_reboot") == "needed":
            plan["reboot"] = True
    if "driver" in roles:
        # A driver fix reboots the node: that restarts the kubelet too.
        plan["reboot"] = plan["reboot"] or bool(ids_set & {"driver.known_bad", "driver.at_risk", "nvml.hung"})
    if "kubelet" in roles and plan["reboot"]:
        roles["kubelet"].pop("kubegpu_kubelet_restart", None)
    if "kubelet" in roles and "kubegpu_kubelet_restart" not in roles["kubelet"] and \
            "kubelet.admission_blocked" in ids_set and not plan["reboot"]:
        roles["kubelet"]["kubegpu_kubelet_restart"] = True
    if ids_set & {"cgroup.devices_missing", "cgroup.uvm_tools_missing"}:
        # The drain replaces the broken pods; the plugin pod is restarted first so the
        # replacements get every device.
        roles.setdefault("device_plugin", {})
    plan["roles"] = roles
    plan["fix"] = bool(roles) or plan["reboot"]
    parts = []
    if roles:
        parts.append("roles " + ", ".join(sorted(roles)))
    if plan["drain"]:
        parts.append("drain" + (" (kubelet wedged: evicted pods may stay Terminating until the reboot)"
                                if plan["wedged"] else ""))
    if plan["reboot"]:
        parts.append("reboot")
    if manual:
        parts.append("left for a person: " + ", ".join(sorted(set(manual))))
    plan["reason"] = "; ".join(parts) if parts else "nothing to fix"
    return plan


def cluster_plan(findings_by_node, cluster_findings=()):
    """Cluster-side work: does the device plugin DaemonSet need changes, and for which nodes."""
    static_nodes = sorted(n for n, ids in findings_by_node.items() if "cpumanager.device_specs" in ids)
    outdated = [f.get("evidence", {}).get("daemonset") for f in cluster_findings or []
                if f.get("id") == "cluster.device_plugin_outdated"]
    return {"device_plugin": bool(static_nodes or outdated), "static_cpu_manager_nodes": static_nodes,
            "outdated_daemonsets": [d for d in outdated if d]}
