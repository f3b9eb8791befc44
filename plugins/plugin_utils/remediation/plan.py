# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which fixes a node's audit findings call for (controller side, plain functions).

The remediate playbook runs the audit, turns each node's findings into a plan with
:func:`plan_node`, then runs only the roles the plan names, inside a maintenance window
(cordon, drain, ..., reboot, validate, uncordon) only where a fix disrupts the node's pods.
"""
from __future__ import annotations

from ansible_collections.kubegpu.fleet.plugins.module_utils._common.versions import DriverVersion
from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu.pci import normalize_bus_id
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.action import runner
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.finding_types import TYPES, unknown_ids_message
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.remediation import toolkit as toolkit_fix
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.rollout.reboot_need import gpu_reasons

# gpu.xid is acted on by the action NVIDIA documents for its worst Xid.
XID_HANDS_ON_ACTIONS = ("investigate",)
# Findings acted on together: the drained node's device plugin pod is restarted first, so the
# pods the drain replaces get every device.
CGROUP_FINDINGS = frozenset(("cgroup.devices_missing", "cgroup.uvm_tools_missing"))


def _flagged(ids, flag):
    """The ids among ``ids`` whose finding type has ``flag`` set."""
    return set(fid for fid in ids if getattr(TYPES[fid], flag))


def _hands_on_reason(finding):
    """One line naming what a person has to look at, from a hands-on finding's evidence."""
    ev = finding.get("evidence") or {}
    fid = finding.get("id")
    if fid == "gpu.rma":
        gpus = [g.get("gpu") for g in ev.get("gpus") or [] if isinstance(g, dict)]
        return "gpu.rma: replace %s" % (", ".join(str(g) for g in gpus) or "the GPU")
    if fid == "gpu.missing":
        problems = [str(p) for p in ev.get("problems") or []]
        return "gpu.missing: %s" % ("; ".join(problems) or "GPUs missing")
    if fid == "gpu.xid":
        gpus = [g for g in ev.get("gpus") or [] if isinstance(g, dict)
                and g.get("action") in XID_HANDS_ON_ACTIONS]
        return "gpu.xid: follow NVIDIA's workflow for %s" % ", ".join(
            "Xid %s on %s" % ("/".join(str(x) for x in g.get("action_xids") or []), g.get("bus_id"))
            for g in gpus) if gpus else "gpu.xid: investigate"
    return "%s: %s" % (fid, finding.get("title") or "")


def xid_disposition(finding):
    """What a GPU finding acted on by its evidence (finding type ``gpu_reset``) asks for:
    "reset" (a GPU reset, the reboot its fallback), "reboot", "hands_on" or "note" (nothing to
    do on the node: the application's fault, informational, an Xid NVIDIA gives no action for)."""
    if finding.get("id") == "gpu.reset_required":
        return "reset"
    action = (finding.get("evidence") or {}).get("action")
    if action == "reset_gpu":
        return "reset"
    if action == "reboot":
        return "reboot"
    if action in XID_HANDS_ON_ACTIONS and finding.get("id") == "gpu.xid":
        return "hands_on"
    return "note"


def reset_targets(findings):
    """``(bus ids, reasons)`` of the GPUs the node's reset-disposition findings name."""
    buses, reasons = [], []
    for f in findings:
        if not isinstance(f, dict) or xid_disposition(f) != "reset":
            continue
        ev = f.get("evidence") if isinstance(f.get("evidence"), dict) else {}
        for g in ev.get("gpus") or []:
            if not isinstance(g, dict) or not isinstance(g.get("bus_id"), str):
                continue
            if f.get("id") != "gpu.reset_required" and g.get("action") != "reset_gpu":
                continue
            bus = normalize_bus_id(g["bus_id"])
            if bus and bus not in buses:
                buses.append(bus)
            why = "; ".join(str(r) for r in g.get("reasons") or []) if g.get("reasons") else (
                "Xid %s" % "/".join(str(x) for x in g.get("action_xids") or []) if f.get("id") == "gpu.xid"
                else f.get("id"))
            reasons.append("%s %s: %s" % (f.get("id"), g["bus_id"], why))
    return sorted(buses), reasons


def _vars(finding):
    rem = finding.get("remediation") or {}
    out = rem.get("vars") or {}
    out = dict(out) if isinstance(out, dict) else {}
    fid = finding.get("id")
    if fid in ("security.driver", "security.fabric-manager", "defect.fabric-manager"):
        target = branch_fix(finding)
        if target:
            out.setdefault("kubegpu_driver_version", target)
    elif fid in ("security.container-toolkit", "defect.container-toolkit"):
        out.update(toolkit_vars(finding))
    return out


def _merge_vars(into, new):
    """Add one finding's role variables; two findings that both name a driver target (say
    security.driver's branch fix and fabricmanager.version_mismatch's current driver) get the
    higher one - fabric manager follows the driver to it in the same transaction; the toolkit
    plans of a security and a defect finding are merged (higher target, every mitigation)."""
    for key, value in new.items():
        old = into.get(key)
        if key == "kubegpu_driver_version" and old and value and old != value:
            try:
                value = max(DriverVersion(str(old)), DriverVersion(str(value))).text
            except ValueError:
                pass
        elif key == "kubegpu_toolkit_fix" and old:
            value = toolkit_fix.merge(old, value)
        into[key] = value


def _evidence(finding):
    ev = finding.get("evidence")
    return ev if isinstance(ev, dict) else {}


def branch_fix(finding):
    """Driver target for a security.driver (or fabric-manager) finding: the highest first fixed
    release of the node's branch among its advisories (fabric manager runs the driver's version,
    so its fix is a driver version too). None when no advisory names a fix in the branch: the
    driver role then takes its catalog default."""
    ev = _evidence(finding)
    try:
        branch = DriverVersion(str(ev.get("version"))).branch
    except ValueError:
        return None
    best = None
    for adv in ev.get("advisories") or []:
        fixed = adv.get("fixed") if isinstance(adv, dict) else None
        try:
            v = DriverVersion(str(fixed))
        except ValueError:
            continue
        if v.branch == branch and (best is None or v > best):
            best = v
    return str(best) if best else None


def toolkit_vars(finding):
    """Role variables of the toolkit fix path for a container-toolkit finding: ``kubegpu_toolkit_fix``
    (the plan of :func:`toolkit_fix.fix_plan`: target version, packages, mitigations)."""
    ev = _evidence(finding)
    try:
        plan = toolkit_fix.fix_plan(ev.get("advisories") or [], ev.get("version"),
                                    injection_mode=ev.get("injection_mode"))
    except toolkit_fix.FixError as exc:
        return {"kubegpu_toolkit_fix": {"error": str(exc)}}
    return {"kubegpu_toolkit_fix": plan}


def plan_node(audit, skip_findings=()):
    """Plan for one node from its ``kubegpu_audit`` fact.

    Returns a dict: ``fix`` (anything to do), ``roles`` (role short name -> vars for it),
    ``drain``, ``wedged``, ``reboot`` (a reboot is needed whatever the roles find),
    ``findings`` (ids acted on), ``manual`` (ids left for a person), ``skipped`` (ids the
    operator asked to leave), ``hands_on`` (one line per hardware problem a person must handle),
    ``cordon`` (the node is cordoned with those reasons and nothing else is done on it),
    ``noted`` (ids that need nothing: Xids of an application fault), ``reboot_reasons`` (the
    GPU reasons for the reboot, one line per GPU), ``gpu_reset`` (bus ids of the GPUs the drained
    node resets instead of rebooting, empty when a reboot is planned anyway) and
    ``gpu_reset_reasons``, ``reason`` (one line).
    """
    audit = audit or {}
    status = audit.get("status") or "unknown"
    empty = {"fix": False, "roles": {}, "drain": False, "wedged": False, "reboot": False,
             "findings": [], "manual": [], "skipped": [], "hands_on": [], "cordon": False,
             "noted": [], "reboot_reasons": [], "gpu_reset": [], "gpu_reset_reasons": [],
             "status": status}
    if status != "audited":
        empty["reason"] = "not audited (%s): nothing is changed on it" % status
        return empty
    roles, ids, manual, skipped, hands_on, noted = {}, [], [], [], [], []
    reboot_by_gpu, reset_findings = False, []
    for f in audit.get("findings") or []:
        fid = f.get("id")
        if not fid:
            continue
        if fid in skip_findings:
            skipped.append(fid)
            continue
        ftype = TYPES.get(fid)
        if ftype is not None and ftype.gpu_reset:
            disposition = xid_disposition(f)
            if disposition == "note":
                noted.append(fid)
                continue
            if disposition == "hands_on":
                hands_on.append(_hands_on_reason(f))
                manual.append(fid)
                continue
            if disposition == "reboot":
                reboot_by_gpu = True
            else:
                reset_findings.append(f)
        if ftype is not None and ftype.hands_on:
            hands_on.append(_hands_on_reason(f))
        if ftype is None or not ftype.automatic:
            manual.append(fid)
            continue
        ids.append(fid)
        _merge_vars(roles.setdefault(ftype.role, {}), _vars(f))
    ids_set = set(ids)
    plan = dict(empty)
    plan.update(findings=sorted(ids_set), manual=sorted(set(manual)), skipped=sorted(set(skipped)),
                hands_on=hands_on, noted=sorted(set(noted)))
    if hands_on:
        # Nothing automatic on a node a person has to take: drain/reboot/uncordon would put the
        # faulty GPU back into service. It is cordoned with the reasons; the other fixes wait.
        plan.update(cordon=True, fix=False, roles={}, drain=False, wedged=False, reboot=False,
                    findings=[])
        plan["reason"] = "cordoned, left for a person (hands-on): %s%s" % (
            "; ".join(hands_on), (" - fixes held back: %s" % ", ".join(sorted(ids_set))) if ids_set else "")
        return plan
    plan["drain"] = bool(_flagged(ids_set, "drain"))
    plan["wedged"] = bool(_flagged(ids_set, "wedged"))
    # a driver fix reboots the node (which restarts the kubelet too); so does a GPU finding whose evidence asks for it
    plan["reboot"] = bool(_flagged(ids_set, "reboot")) or reboot_by_gpu
    acted = [f for f in audit.get("findings") or [] if isinstance(f, dict) and f.get("id") in ids_set]
    plan["reboot_reasons"] = gpu_reasons(acted)
    if "rolling_reboot" in roles:
        rr = roles.pop("rolling_reboot")
        if rr.get("kubegpu_reboot") == "needed":
            plan["reboot"] = True
    if reset_findings and not plan["reboot"]:
        # The drained node's GPUs are reset (kubegpu.fleet.gpu_reset); a reboot only if that is
        # refused or fails. A reboot the plan needs anyway resets every GPU: no separate reset.
        plan["gpu_reset"], plan["gpu_reset_reasons"] = reset_targets(reset_findings)
        plan["reboot_reasons"] = []
    if "kubelet" in roles and plan["reboot"]:
        roles["kubelet"].pop("kubegpu_kubelet_restart", None)
    if "device_plugin" in roles and "driver" in roles and plan["reboot"]:
        # Until the reboot the new driver's libraries do not match the loaded kernel module: a
        # device plugin pod restarted now cannot initialise NVML and advertises no GPU. The
        # reboot starts it afresh (with /dev as the boot leaves it): no restart before it.
        roles["device_plugin"]["kubegpu_device_plugin_restart_pod"] = "never"
    if "kubelet" in roles and "kubegpu_kubelet_restart" not in roles["kubelet"] and \
            "kubelet.admission_blocked" in ids_set and not plan["reboot"]:
        roles["kubelet"]["kubegpu_kubelet_restart"] = True
    if ids_set & CGROUP_FINDINGS:
        # The drain replaces the broken pods; the plugin pod is restarted first so the
        # replacements get every device.
        roles.setdefault("device_plugin", {})
    plan["roles"] = roles
    plan["fix"] = bool(roles) or plan["reboot"] or bool(plan["gpu_reset"])
    parts = []
    if roles:
        parts.append("roles " + ", ".join(sorted(roles)))
    if plan["drain"]:
        parts.append("drain" + (" (kubelet wedged: evicted pods may stay Terminating until the reboot)"
                                if plan["wedged"] else ""))
    if plan["gpu_reset"]:
        parts.append("reset GPU%s %s (reboot if refused or failed)" % (
            "s" if len(plan["gpu_reset"]) != 1 else "", ", ".join(plan["gpu_reset"])))
    if plan["reboot"]:
        parts.append("reboot")
    if manual:
        parts.append("left for a person: " + ", ".join(sorted(set(manual))))
    plan["reason"] = "; ".join(parts) if parts else "nothing to fix"
    return plan


ARGUMENT_SPEC = {
    "audit": {"type": "dict", "required": True},
    "skip_findings": {"type": "list", "elements": "str", "default": []},
}


def plan_task(task, args):
    """kubegpu.fleet.remediation_plan: the node's plan as ``plan`` and the ``kubegpu_remediation`` fact."""
    error = unknown_ids_message(args["skip_findings"], "skip_findings")
    if error:
        raise runner.ActionFailed(error)
    plan = plan_node(args["audit"], skip_findings=args["skip_findings"])
    return {"plan": plan, "ansible_facts": {"kubegpu_remediation": plan}}


ACTION = runner.Action(ARGUMENT_SPEC, plan_task)
