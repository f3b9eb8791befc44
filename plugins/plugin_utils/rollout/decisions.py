# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The decisions of one node's rolling maintenance (kubegpu.fleet.rolling_reboot): start, drain
verdict, validation verdict, uncordon, failure. Each is a plain function over what the role's other
tasks read (the Node, its pods, the node checks, the API waits) and one controller module
(``rollout_start``, ``rollout_drain_verdict``, ``rollout_validation_verdict``,
``rollout_uncordon_decision``, ``rollout_failure_record``) wires it to the role's facts; the role's
tasks only wire inputs and outputs. Nothing here talks to a cluster or a node.
"""
from __future__ import annotations

import time

from ansible_collections.kubegpu.fleet.plugins.module_utils._common.safe_io import check_timeout
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.action import runner
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.rollout import drain, gpu_nodes, record as maintenance_record

ROLE = "kubegpu.fleet.rolling_reboot"


def _record_from(node, saved, now):
    return {
        "active": True, "drained": False, "node": gpu_nodes.node_name(node),
        "was_unschedulable": (saved["was_unschedulable"] if saved
                              else bool(((node or {}).get("spec") or {}).get("unschedulable"))),
        "boot_id": (((node or {}).get("status") or {}).get("nodeInfo") or {}).get("bootID") or "",
        "allocatable": (saved.get("allocatable") or {}) if saved else gpu_nodes.gpu_resources(node),
        "started": saved.get("started", int(now)) if saved else int(now),
        "resumed": bool(saved), "rebooted": False, "terminating_accepted": [],
    }


def start_maintenance(node, name, maintenance=None, annotation=maintenance_record.MAINTENANCE_ANNOTATION,
                      skip_label=gpu_nodes.DEFAULT_SKIP_LABEL, drain_timeout=600, now=0):
    """Before the cordon: does the Node exist, does the skip label keep us away, is a maintenance
    already running (active and drained: nothing to start), and the record of the node's state
    before maintenance (from the annotation an earlier run left, else from the Node now).

    Returns ``{exists, skip, already, cordon, record, annotations, drain_deadline, msg}``
    (``cordon``: the budget wait, cordon and drain are to run); ``annotations``
    is what the cordon patch writes (nothing when the annotation is there already)."""
    maintenance = maintenance if isinstance(maintenance, dict) else {}
    out = {"exists": bool(node), "skip": False, "already": False, "cordon": False, "record": maintenance,
           "annotations": {}, "drain_deadline": int(now) + int(drain_timeout)}
    if not node:
        out["msg"] = "no Node %s in the cluster (set kubegpu_node_name for this host)" % name
        return out
    if gpu_nodes.has_label(node, skip_label):
        out.update(skip=True, msg="%s is labelled %s: not cordoned, drained, rebooted or changed" % (name, skip_label))
        return out
    if maintenance.get("active") and maintenance.get("drained"):
        out.update(already=True, msg="%s: maintenance already running and drained" % name)
        return out
    annotations = ((node.get("metadata") or {}).get("annotations")) or {}
    saved = maintenance_record.parse_maintenance_annotation(annotations.get(annotation, ""))
    record = _record_from(node, saved, now)
    out["record"] = record
    out["cordon"] = True
    if not saved:
        out["annotations"] = {annotation: maintenance_record.maintenance_annotation(dict(record, by=ROLE))}
    out["msg"] = "%s: cordon and drain (cordoned before: %s%s)" % (
        name, record["was_unschedulable"], ", resuming the maintenance recorded on the Node" if saved else "")
    return out


def drain_verdict(name, pods, accept_terminating=False, pdbs=None, maintenance=None, timeout=None,
                  pods_error=None, evict_error=None, wedged=False):
    """After the eviction: are only DaemonSet, mirror and finished pods left? Returns ``{ok,
    leftover, record, msg}``; ``record`` is the maintenance record marked drained (when ok)."""
    leftover = drain.leftover_pods(pods, accept_terminating) if pods_error is None else {
        "ok": False, "blocking": [], "terminating": [], "accepted": [], "ignored": []}
    record = dict(maintenance or {})
    accepted = [p["pod"] for p in leftover["accepted"]]
    if pods_error is None and leftover["ok"]:
        record.update(drained=True, terminating_accepted=accepted)
        msg = "%s drained" % name
        if accepted:
            msg += ("; %s were evicted but are still Terminating (kubelet %s), accepted because %s is true"
                    % (", ".join(accepted), "wedged" if wedged else "slow",
                       "kubegpu_node_wedged" if wedged else "kubegpu_drain_accept_terminating"))
        return {"ok": True, "leftover": leftover, "record": record, "msg": msg}
    blocking = [p["pod"] for p in leftover["blocking"]]
    why = pods_error if pods_error is not None else drain.drain_report(
        leftover, drain.pdbs_for_pods(pods, pdbs, blocking) if pdbs else None)
    msg = "drain of %s did not finish within kubegpu_drain_timeout=%s s: %s." % (name, timeout, why)
    if evict_error:
        msg += " Last eviction error: %s." % evict_error
    msg += " The node stays cordoned and the rollout stops."
    return {"ok": False, "leftover": leftover, "record": record, "msg": msg}


def validation_verdict(name, checks, api, driver_version="", timeout=None, maintenance=None, reboot=None):
    """Is the node fit for GPU work again? ``checks``: kubegpu.fleet.rollout_node_check's result
    (NVML probe, driver, module, checkpoint); ``api``: kubegpu.fleet.node_maintenance
    ``state=validated``'s result (plugin pod, allocatable). ``reboot``: the Ready wait after the
    reboot, when the node was rebooted (recorded). Returns ``{ok, validation, reasons, record, msg}``."""
    checks = checks if isinstance(checks, dict) else {}
    api = api if isinstance(api, dict) else {}
    nvidia = checks.get("nvidia") or {}
    probe = (nvidia.get("probe") or {}).get("status") or ("failed" if checks else "not run")
    installed = nvidia.get("driver_version")
    plugin = api.get("plugin") or {"found": False, "pod": None, "phase": None, "ready": False, "running": False}
    resources = api.get("resources") or {"ok": False, "rule": None,
                                         "msg": api.get("msg") or "the API wait did not run"}
    validation = {
        "probe": probe,
        "probe_error": (nvidia.get("probe") or {}).get("error") or checks.get("msg"),
        "driver_version": installed,
        "driver_ok": not driver_version or installed == driver_version,
        "reboot_pending": checks.get("reboot_pending"),
        "checkpoint_stale": checks.get("checkpoint_stale"),
        "checkpoint_stale_ids": checks.get("checkpoint_stale_ids") or [],
        "plugin": plugin, "resources": resources,
    }
    reasons = []
    if probe != "ok":
        reasons.append("NVML probe %s: %s" % (probe, validation["probe_error"]))
    if not validation["driver_ok"]:
        reasons.append("driver %s is not %s" % (installed, driver_version))
    if validation["reboot_pending"] is not False:
        reasons.append("installed driver and loaded kernel module differ (reboot_pending %s)"
                       % validation["reboot_pending"])
    if validation["checkpoint_stale"] is not False:
        reasons.append("kubelet checkpoint stale or unchecked: %s" % ", ".join(validation["checkpoint_stale_ids"]))
    if not plugin.get("ready"):
        reasons.append("device plugin pod %s not Ready (phase %s)" % (plugin.get("pod") or "(none)", plugin.get("phase")))
    if not resources.get("ok"):
        reasons.append(str(resources.get("msg")))
    record = dict(maintenance or {})
    if isinstance(reboot, dict) and reboot.get("boot_id"):
        record.update(rebooted=True, new_boot_id=reboot.get("boot_id"), reboot_reasons=reboot.get("reasons") or [])
    record["validation"] = validation
    if reasons:
        msg = "%s did not validate within kubegpu_validate_timeout=%s s: %s" % (name, timeout, "; ".join(reasons))
    else:
        msg = ("%s validated: NVML ok, driver %s, checkpoint current, plugin %s Ready, %s (rule %s)"
               % (name, installed, plugin.get("pod"), resources.get("msg"), resources.get("rule")))
    return {"ok": not reasons, "validation": validation, "reasons": reasons, "record": record, "msg": msg}


def uncordon_decision(name, maintenance=None, node=None, annotation=maintenance_record.MAINTENANCE_ANNOTATION, now=0):
    """May the node be made schedulable? Only when it was schedulable before the maintenance (the
    host fact, else the annotation on the Node). Returns ``{known, was_unschedulable, source,
    uncordon, record, msg}``; ``record`` is the closed maintenance record."""
    maintenance = dict(maintenance) if isinstance(maintenance, dict) else {}
    if "was_unschedulable" in maintenance:
        known, was, source = True, bool(maintenance["was_unschedulable"]), "host fact"
    else:
        annotations = (((node or {}).get("metadata") or {}).get("annotations")) or {}
        saved = maintenance_record.parse_maintenance_annotation(annotations.get(annotation, ""))
        known, was, source = (True, saved["was_unschedulable"], "annotation") if saved else (False, None, None)
    uncordon = known and not was
    if uncordon:
        msg = "%s uncordoned (it was schedulable before the maintenance, %s)" % (name, source)
    elif known:
        msg = ("%s stays cordoned: it was cordoned before the maintenance (%s), so an operator uncordons it"
               % (name, source))
    else:
        msg = ("%s stays cordoned: no record of its state before maintenance (no kubegpu_maintenance fact, no %s "
               "annotation)" % (name, annotation))
    record = dict(maintenance, active=False, drained=False, finished=int(now), uncordoned=uncordon)
    return {"known": known, "was_unschedulable": was, "source": source, "uncordon": uncordon, "record": record,
            "msg": msg}


def failure_record(name, maintenance=None, reason=None, task=None, now=0, cordon=None, uncordon_failed=False,
                   run=None):
    """Why the maintenance failed and whether the role had started one on the Node (then the
    failure is written there and the node stays cordoned).

    ``cordon``: the cordon patch's registered result in this play ({} when it did not run). A
    record made for this run whose cordon never went through (the budget wait or the patch
    failed) started nothing; one resumed from the Node's annotation, or already drained, did.
    ``uncordon_failed``: the closing patch failed, so the node is still in maintenance."""
    maintenance = dict(maintenance) if isinstance(maintenance, dict) else {}
    cordon = cordon if isinstance(cordon, dict) else {}
    reason = str(reason or "").strip() or "maintenance failed"
    failure = {"reason": reason, "task": str(task or ""),
               "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)), "by": ROLE}
    if run:   # the runner (kubegpu.fleet.rollout_slot's run id): its other nodes start no more
        failure["run"] = str(run)
    cordoned = bool(cordon) and not cordon.get("failed") and not cordon.get("skipped")
    active = bool(maintenance.get("active")) and (
        bool(maintenance.get("resumed")) or bool(maintenance.get("drained")) or cordoned)
    if uncordon_failed:
        active = True
    where = (' in "%s"' % failure["task"]) if failure["task"] else ""
    msg = "maintenance of %s failed%s: %s. %s" % (
        name, where, reason,
        "The node stays cordoned; the reason is in its kubegpu.io/maintenance-failed annotation." if active
        else "The node was not cordoned by this run.")
    record = dict(maintenance, active=active, failed=failure)
    return {"failure": failure, "active": active, "record": record, "msg": msg}


# ------------------------------------------------------------------- the controller modules
# One module per decision (plugins/action/rollout_*.py run these Actions): the options of that
# decision only, the decision in ``decision`` and ``msg``, the host facts the role reads next.

def _option(kind, **more):
    return dict(more, type=kind)


NAME = {"name": _option("str", required=True)}
FAIL = {"fail": _option("bool", default=True)}
MAINTENANCE = {"maintenance": _option("dict", default={})}
ANNOTATION = {"annotation": _option("str", default=maintenance_record.MAINTENANCE_ANNOTATION)}
NODE = {"node": _option("dict", default={})}

START_SPEC = dict(NAME, **NODE, **MAINTENANCE, **ANNOTATION, **FAIL,
                  skip_label=_option("str", default=gpu_nodes.DEFAULT_SKIP_LABEL),
                  drain_timeout=_option("float", default=600))
DRAIN_SPEC = dict(NAME, **MAINTENANCE, **FAIL,
                  pods=_option("list", elements="dict", default=[]),
                  pods_error=_option("str"),
                  evict_error=_option("str"),
                  accept_terminating=_option("bool", default=False),
                  wedged=_option("bool", default=False),
                  pdbs=_option("list", elements="dict"),
                  drain_timeout=_option("float", default=600))
VALIDATION_SPEC = dict(NAME, **NODE, **MAINTENANCE, **ANNOTATION, **FAIL,
                       validate=_option("bool", default=True),
                       checks=_option("dict", default={}),
                       api=_option("dict", default={}),
                       driver_version=_option("str", default=""),
                       reboot=_option("dict", default={}),
                       reboot_reasons=_option("list", elements="str", default=[]),
                       validate_timeout=_option("float", default=600),
                       close=_option("bool", default=False))
UNCORDON_SPEC = dict(NAME, **NODE, **MAINTENANCE, **ANNOTATION)
FAILURE_SPEC = dict(NAME, **MAINTENANCE, **FAIL,
                    reason=_option("str"),
                    task=_option("str"),
                    cordon=_option("dict", default={}),
                    uncordon_failed=_option("bool", default=False),
                    run=_option("str"))


def _decided(out, facts, negative, fail):
    """The task's result: the decision and its facts; a failed task when the decision is negative
    and ``fail`` is set."""
    if negative and fail:
        raise runner.ActionFailed(out["msg"], decision=out, ansible_facts=facts)
    return {"changed": False, "decision": out, "msg": out["msg"], "ansible_facts": facts}


def _seconds(value, option):
    return check_timeout(value, option)   # nan, inf and 1e300 are no timeout


def start_work(task, args, now=None):
    """kubegpu.fleet.rollout_start."""
    out = start_maintenance(args["node"], args["name"], args["maintenance"], args["annotation"], args["skip_label"],
                            _seconds(args["drain_timeout"], "drain_timeout"), time.time() if now is None else now)
    # the hosts of the play batch that go down now: the budget check counts them
    facts = {"kubegpu_rolling_reboot_start": out, "kubegpu_rolling_reboot_wants_down": out["cordon"]}
    if out["exists"] and not out["skip"] and not out["already"]:
        facts["kubegpu_maintenance"] = out["record"]
    return _decided(out, facts, not out["exists"], args["fail"])


def drain_work(task, args):
    """kubegpu.fleet.rollout_drain_verdict."""
    out = drain_verdict(args["name"], args["pods"], args["accept_terminating"], args["pdbs"], args["maintenance"],
                        int(_seconds(args["drain_timeout"], "drain_timeout")), args["pods_error"], args["evict_error"],
                        args["wedged"])
    facts = {"kubegpu_rolling_reboot_drained": out["ok"], "kubegpu_rolling_reboot_wants_down": False}
    if out["ok"]:
        facts["kubegpu_maintenance"] = out["record"]
    return _decided(out, facts, not out["ok"], args["fail"])


def validation_work(task, args, now=None):
    """kubegpu.fleet.rollout_validation_verdict."""
    timeout = _seconds(args["validate_timeout"], "validate_timeout")
    facts = {}
    if not args["validate"] or task.check_mode:
        why = "check mode" if task.check_mode else "kubegpu_validate is false"
        out = {"ok": True, "skipped": True, "reasons": [], "record": args["maintenance"],
               "msg": "%s: would validate %s (NVML, driver version, checkpoint, device plugin, allocatable)"
                      % (why, args["name"])}
    else:
        reboot = dict(args["reboot"], reasons=args["reboot_reasons"]) if args["reboot"].get("boot_id") else None
        out = validation_verdict(args["name"], args["checks"], args["api"], args["driver_version"], int(timeout),
                                 args["maintenance"], reboot)
        facts["kubegpu_maintenance"] = out["record"]
        if reboot:
            facts.update(kubegpu_reboot_required=False, kubegpu_reboot_reasons=[])
    if out["ok"] and args["close"]:
        # the uncordon decision of a node that validated (the next task writes it)
        closing = uncordon_decision(args["name"], out["record"], args["node"], args["annotation"],
                                    time.time() if now is None else now)
        out["uncordon"] = closing
        out["msg"] += "; " + closing["msg"]
        facts.update(kubegpu_rolling_reboot_uncordon=closing, kubegpu_maintenance=closing["record"])
    return _decided(out, facts, not out["ok"], args["fail"])


def uncordon_work(task, args, now=None):
    """kubegpu.fleet.rollout_uncordon_decision."""
    out = uncordon_decision(args["name"], args["maintenance"], args["node"], args["annotation"],
                            time.time() if now is None else now)
    # closed before the patch: a failing patch tells the failure decision (uncordon_failed)
    return _decided(out, {"kubegpu_rolling_reboot_uncordon": out, "kubegpu_maintenance": out["record"]}, False, False)


def failure_work(task, args, now=None):
    """kubegpu.fleet.rollout_failure_record."""
    out = failure_record(args["name"], args["maintenance"], args["reason"], args["task"],
                         time.time() if now is None else now, args["cordon"], args["uncordon_failed"], args["run"])
    return _decided(out, {"kubegpu_maintenance": out["record"], "kubegpu_rolling_reboot_failure": out["failure"]},
                    True, args["fail"])


START = runner.Action(START_SPEC, start_work)
DRAIN = runner.Action(DRAIN_SPEC, drain_work)
VALIDATION = runner.Action(VALIDATION_SPEC, validation_work)
UNCORDON = runner.Action(UNCORDON_SPEC, uncordon_work)
FAILURE = runner.Action(FAILURE_SPEC, failure_work)

# kubegpu.fleet.rollout_decide (deprecated: meta/runtime.yml): the five decisions behind one
# ``decision`` option, the union of their options; ``timeout`` is the drain or the validation timeout.
DECISIONS = {"start": (START, "drain_timeout"), "drain": (DRAIN, "drain_timeout"),
             "validation": (VALIDATION, "validate_timeout"), "uncordon": (UNCORDON, None), "failure": (FAILURE, None)}
DECIDE_SPEC = {"decision": _option("str", required=True, choices=list(DECISIONS)),
               "timeout": _option("float", default=600)}
for _spec in (START_SPEC, DRAIN_SPEC, VALIDATION_SPEC, UNCORDON_SPEC, FAILURE_SPEC):
    DECIDE_SPEC.update((k, v) for k, v in _spec.items() if k not in ("drain_timeout", "validate_timeout"))


def decide_work(task, args):
    """kubegpu.fleet.rollout_decide: the decision its ``decision`` option names."""
    action, renamed = DECISIONS[args["decision"]]
    seconds = _seconds(args["timeout"], "timeout")   # checked whatever the decision
    options = dict((k, args[k]) for k in action.argument_spec if k in args)
    if renamed:
        options[renamed] = seconds
    return action.work(task, options)


DECIDE = runner.Action(DECIDE_SPEC, decide_work)
