# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""kubegpu.fleet.audit_node on the controller: the node probes and the evaluation in one task.

1. Like the driver_guard action plugin, it loads and validates the bundled catalog v2
   together with the task's ``catalog_extra`` and passes the driver defects to the module in ``_catalog``. A
   bad catalog fails only the driver_guard probe (as it fails only the driver_guard task when
   the probes run as separate tasks); the other probes still run on the node.
2. It runs the module (every probe of the registry, module_utils/audit/probes.py, in one round trip),
   checks the shape of every probe result and runs each probe's controller-side step
   (:data:`CONTROLLER_STEPS`: stack_facts' config.toml, parsed under plugin_utils/parse_bound.py)
   - a result of the wrong shape or a step that fails becomes that probe's failure with a
   message, as on the node, never the task's.
3. It evaluates the findings here, on the controller (audit/evaluate.py, with the
   catalog v2 - read and validated once per ansible-playbook run, see :func:`warm` - and the
   node's API view from the ``api`` option), and
   sets ``kubegpu_audit`` (the fact kubegpu.fleet.audit_report aggregates) - so the audit needs one
   task execution per node. With ``details`` the result keeps the probes' data and sets the
   ``nvidia``, ``kubelet`` and ``nvidia_stack`` facts; without (the audit role's default) it is
   the evaluation and each probe's outcome. A node the module cannot reach is recorded as unreachable (with
   a warning; the task itself succeeds so the fact is kept), a module that fails as a whole
   becomes an error of each probe: the node is never dropped from the report.
"""
from __future__ import annotations

from ansible.errors import AnsibleConnectionFailure
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.common.text.converters import to_text

from ansible_collections.kubegpu.fleet.plugins.module_utils.audit.probes import (
    CONTROLLER_OPTIONS,
    EVALUATION_OPTIONS,
    NAMES,
    REGISTRY,
    evaluation_input,
)
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.action import runner
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit import evaluate
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.rules import catalog as rules_catalog
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.catalog import load as catalog_load
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.catalog import refresh as catalog_refresh
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.catalog.module_args import args_with_catalog, redact_catalog
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.stack.facts import finish_stack_facts, shown

MODULE = "kubegpu.fleet.audit_node"
MAX_MSG = 2000  # characters of a node-supplied probe message kept


class ProbeResultError(ValueError):
    """A probe result of the wrong shape (a broken or compromised node); the message says how."""


def _finish_stack_facts(res, node, warnings):
    # config.toml comes back as text (nodes may lack a TOML parser): parsed here, under the
    # parse bound, as the stack_facts action does.
    warnings.extend(finish_stack_facts(res["ansible_facts"]["nvidia_stack"], node)[1])


# The controller-side step of each probe whose result needs one, after the shape check.
CONTROLLER_STEPS = {"stack_facts": _finish_stack_facts}


def check_probe_result(probe, res):
    """The shape every probe result must have before the controller reads it; raises
    :class:`ProbeResultError`. A failed probe's ``msg`` is made text and cut to :data:`MAX_MSG`."""
    if res is None:
        raise ProbeResultError("audit_node returned no result for this probe")
    if not isinstance(res, dict):
        raise ProbeResultError("the probe's result is a %s, not a dict" % type(res).__name__)
    if res.get("failed") or res.get("skipped"):
        key = "msg" if res.get("failed") else "skip_reason"
        res[key] = shown(res.get(key) or ("failed" if key == "msg" else "skipped"), MAX_MSG)
        return
    facts = res.get("ansible_facts")
    if facts is not None and not isinstance(facts, dict):
        raise ProbeResultError("the probe's ansible_facts is a %s, not a dict" % type(facts).__name__)
    if probe.facts and facts is not None and probe.facts in facts and not isinstance(facts[probe.facts], dict):
        raise ProbeResultError("the probe's %s fact is a %s, not a dict" % (probe.facts, type(facts[probe.facts]).__name__))
    if probe.facts and probe.name in CONTROLLER_STEPS and not (facts and probe.facts in facts):
        raise ProbeResultError("the probe's result has no %s fact" % probe.facts)


def finish_probes(probes, node, warnings):
    """Check every probe result's shape and run its controller-side step (:data:`CONTROLLER_STEPS`),
    in place. A result that fails either becomes that probe's failure with a message, as a
    probe that fails on the node is; the other probes are kept. Returns the names so failed."""
    failed = []
    for probe in REGISTRY:
        res = probes.get(probe.name)
        try:
            check_probe_result(probe, res)
            step = CONTROLLER_STEPS.get(probe.name)
            if step is not None and not res.get("failed") and not res.get("skipped"):
                step(res, node, warnings)
        except Exception as e:  # pylint: disable=broad-except  # any malformed result fails this probe only
            why = str(e) if isinstance(e, ValueError) else "%s: %s" % (type(e).__name__, e)
            msg = "the node's %s result could not be read on the controller: %s" % (probe.name, shown(why, MAX_MSG))
            probes[probe.name] = {"changed": False, "failed": True, "msg": msg}
            warnings.append("%s: %s" % (node, msg))
            failed.append(probe.name)
    return failed


def lift_facts(probes, facts):
    """Set each succeeded probe's fact (``nvidia``, ``kubelet``, ``nvidia_stack``) in ``facts``, the
    task's ``ansible_facts`` (``details``: the probe results keep theirs too, as the probe
    modules' tasks would register them)."""
    for probe in REGISTRY:
        res = probes[probe.name]
        if probe.facts and not (res.get("failed") or res.get("skipped")) \
                and probe.facts in (res.get("ansible_facts") or {}):
            facts[probe.facts] = res["ansible_facts"][probe.facts]


# What a probe's result keeps without ``details``: its outcome.
OUTCOME_KEYS = ("changed", "failed", "msg", "raised_at", "skipped", "skip_reason")


def outcomes(probes):
    """Each probe's outcome (:data:`OUTCOME_KEYS`) without its data, once the evaluation has read
    the data (``details`` false, the audit role's default): an audited node's result is then its
    evaluation - ``kubegpu_audit``, whose findings carry their evidence - and what each probe did,
    about a tenth of the size. Each byte of a result costs controller CPU per node: the worker
    cleans and sends it, the main process registers it and stores its facts."""
    return dict((name, dict((k, res[k]) for k in OUTCOME_KEYS if k in res)) for name, res in probes.items())


def summary(probes):
    """audit_node's ``msg`` for ``probes`` (as the module words it)."""
    failed = [n for n in NAMES if probes[n].get("failed")]
    skipped = [n for n in NAMES if probes[n].get("skipped")]
    return "%d probes run, %d skipped, %d failed%s" % (len(NAMES) - len(skipped), len(skipped), len(failed),
                                                       (": " + ", ".join(failed)) if failed else "")


def warning_list(result):
    """``result["warnings"]`` as a list of strings (a node may return anything there)."""
    warnings = result.get("warnings")
    if not isinstance(warnings, list):
        warnings = [] if warnings is None else [shown(warnings, MAX_MSG)]
    result["warnings"] = [w if isinstance(w, str) else shown(w, MAX_MSG) for w in warnings]
    return result["warnings"]


def whole_failure(msg):
    """The probe results when the module failed as a whole (no ``probes``): each probe that
    runs unconditionally failed with the module's message; those with a skip rule skipped (no
    trustworthy input), as separate tasks would have registered them."""
    out = {}
    for probe in REGISTRY:
        if probe.skip({}) is None:
            out[probe.name] = {"changed": False, "failed": True, "msg": msg}
        else:
            out[probe.name] = {"changed": False, "skipped": True,
                               "skip_reason": "audit_node failed before this probe could run"}
    return out


def audit_node(task, raw_args):
    """The probes' round trip, their controller-side steps and the evaluation (see the module docstring)."""
    node_args = dict((k, v) for k, v in raw_args.items() if k not in CONTROLLER_OPTIONS)
    validated = ArgumentSpecValidator(CONTROLLER_OPTIONS).validate(
        dict((k, v) for k, v in raw_args.items() if k in CONTROLLER_OPTIONS))
    if validated.error_messages:
        raise runner.ActionFailed("; ".join(validated.error_messages))
    ev = dict((k, v) for k, v in validated.validated_parameters.items() if k in EVALUATION_OPTIONS)
    details = validated.validated_parameters["details"]
    error = evaluate.check_evaluation_options(ev)
    if error:
        raise runner.ActionFailed(error)
    node = ev["node"] or task.hostname
    overlay = validated.validated_parameters["catalog_overlay"]
    if overlay:
        # the refresh job's overlay, read here once per node task (as the catalog_overlay lookup
        # reads it): its documents follow catalog_extra's, then go to the node and the evaluation
        try:
            node_args["catalog_extra"] = catalog_refresh.overlay_documents([overlay], node_args.get("catalog_extra"))
        except catalog_refresh.RefreshError as e:
            raise runner.ActionFailed(str(e))
        except OSError as e:
            raise runner.ActionFailed("cannot read the catalog overlay %s: %s" % (overlay, e))
    task_catalog = catalog_load.for_task(node_args.get("catalog_extra"))  # loaded once for the node and the evaluation

    try:
        args, catalog, catalog_error = args_with_catalog(node_args, "audit_node", task_catalog)
    except ValueError as e:
        raise runner.ActionFailed(str(e))

    try:
        module_result = task.module(MODULE, args)
    except AnsibleConnectionFailure as e:
        # Recorded, never dropped: the report lists the node as unreachable.
        return _unreachable(node, to_text(e) or "unreachable")
    if module_result.get("unreachable"):
        return _unreachable(node, shown(module_result.get("msg") or "unreachable", MAX_MSG))
    if catalog is not None:
        redact_catalog(module_result, catalog)

    probes = module_result.get("probes")
    facts = {}
    if isinstance(probes, dict):
        if catalog_error is not None:
            # What the driver_guard task reports for a bad catalog, before reaching the node.
            probes["driver_guard"] = {"changed": False, "failed": True, "msg": catalog_error}
        warnings = warning_list(module_result)
        controller_failed = finish_probes(probes, node, warnings)
        failed = [n for n in NAMES if probes[n].get("failed")]
        if controller_failed or catalog_error is not None or module_result.get("failed_probes") != failed:
            module_result["failed_probes"] = failed
            module_result["msg"] = summary(probes)
    elif module_result.get("failed") and not set(("module_stderr", "module_stdout")) & set(module_result):
        # The module ran and refused its options (fail_json; a crash or a missing interpreter
        # comes back as MODULE FAILURE with module_stderr/module_stdout): the caller's error, not the
        # node's - the task fails with the module's message, nothing is evaluated.
        return dict(module_result)
    else:
        # The module failed as a whole (no Python, a crash): every probe is in error.
        msg = shown(module_result.get("msg") or "audit_node failed", MAX_MSG)
        probes = whole_failure(msg)
        module_result = dict(changed=False, probes=probes, failed_probes=[n for n in NAMES if probes[n].get("failed")],
                             msg="audit_node failed: %s" % msg,
                             warnings=warning_list(module_result) + ["audit_node failed: %s" % msg])

    ctx, errors = evaluation_input(probes)
    if task_catalog.entries_error is not None:
        errors["catalog_v2"] = task_catalog.entries_error
    ctx.update(api=ev["api"], errors=errors, catalog=task_catalog.entries or [])
    findings, audit = evaluate.evaluate(node, ctx, ev)
    facts["kubegpu_audit"] = audit
    out = dict(module_result)
    out.update(failed=False, changed=False, ansible_facts=facts)
    if details:
        lift_facts(probes, facts)
        out["findings"] = findings
    else:
        out["probes"] = outcomes(probes)
    return out


def _unreachable(node, msg):
    """The result for a node the module cannot reach: recorded as unreachable, the task succeeds."""
    return {"changed": False, "unreachable_node": True, "msg": "unreachable: %s" % msg, "findings": [],
            "ansible_facts": {"kubegpu_audit": evaluate.unreachable_audit(node, msg)},
            "warnings": ["%s is unreachable, recorded as such: %s" % (node, msg)]}


def warm():
    """Fill this process's caches that every node's evaluation reads - the bundled catalog (read
    and validated when plugin_utils/catalog/load.py is imported), the versions it names, its
    newest driver bulletin - never raising. Called when this module is imported: ansible-playbook
    imports the audit_node action plugin in its main process before it forks a worker per node, so
    each worker starts with them instead of redoing them for its one node."""
    try:
        entries = catalog_load.for_task(None).entries
        if entries:
            rules_catalog.latest_driver_bulletin(entries)
    except Exception:  # pylint: disable=broad-except  # the task reports the same problem itself
        pass


warm()

# The options go to the module (which validates them) but for the evaluation options, validated here.
ACTION = runner.Action(None, audit_node)
