# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The audit's evaluation on the controller: node facts in, findings out.

:func:`evaluate_node` runs every node rule (:data:`NODE_RULES`, in order; the rules live in
audit/rules/, one file per area) over one node's context, :func:`evaluate_cluster` the cluster
rules (:data:`CLUSTER_RULES`) over the cluster view. A rule takes the node context (a cluster
rule: the device plugin DaemonSet summaries of the cluster view) and returns findings, created
only through ``finding_types.finding``; a rule entry names the evaluation options it takes
(keyword arguments named as :func:`evaluate_node` names them). Shared by the
kubegpu.fleet.audit_node action (probes and evaluation in one task, audit/node_audit.py) and the
deprecated kubegpu.fleet.audit_evaluate (:data:`ACTION`: evaluation of results gathered by other
tasks): option checks, the catalog v2 for the evaluation, and the ``kubegpu_audit`` fact that
kubegpu.fleet.audit_report aggregates.
"""
from __future__ import annotations

import collections
import math

from ansible_collections.kubegpu.fleet.plugins.module_utils.audit import probe_options
from ansible_collections.kubegpu.fleet.plugins.module_utils.audit.probes import EVALUATION_OPTIONS
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.action import runner
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.coverage import coverage
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.fields import as_dict
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.finding_types import finding, unknown_ids_message
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.rules import (
    catalog,
    checkpoint,
    cluster,
    devices,
    driver,
    gpu,
    kubelet,
    lifecycle,
    probes,
)
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.catalog import load as catalog_load

Rule = collections.namedtuple("Rule", ("name", "function", "options"))

NODE_RULES = (
    Rule("driver", driver.rule_driver, ()),
    Rule("nvml", driver.rule_nvml, ()),
    Rule("admission", kubelet.rule_admission, ("pending_threshold_s",)),
    Rule("cpumanager", devices.rule_cpumanager, ()),
    Rule("uvm", devices.rule_uvm, ()),
    Rule("cgroups", devices.rule_cgroups, ()),
    Rule("checkpoint", checkpoint.rule_checkpoint, ()),
    Rule("memory", kubelet.rule_memory, ("memory_min_fraction",)),
    Rule("api_node", kubelet.rule_api_node, ()),
    Rule("gpu_presence", gpu.rule_gpu_presence, ("expected_gpus",)),
    Rule("gpu_xid", gpu.rule_gpu_xid, ()),
    Rule("nvswitch", gpu.rule_nvswitch, ()),
    Rule("gpu_health", gpu.rule_gpu_health, ()),
    Rule("catalog", catalog.rule_catalog, ()),
    Rule("driver_lifecycle", lifecycle.rule_unsupported_branch, ()),
    Rule("fabricmanager", catalog.rule_fabricmanager, ()),
    Rule("module_failures", probes.rule_module_failures, ()),
)

CLUSTER_RULES = (
    Rule("device_plugin_outdated", cluster.rule_device_plugin_outdated, ()),
)

# Exceptions a rule raises on a node result of an unexpected shape: reported as
# audit.module_failed for that rule, and the other rules still run.
MALFORMED = (AttributeError, TypeError, KeyError, ValueError, IndexError)


# The evaluation options' defaults, from their one spec (audit_node's and audit_evaluate's options).
_DEFAULTS = probe_options.defaults(EVALUATION_OPTIONS)


def evaluate_node(ctx, pending_threshold_s=_DEFAULTS["pending_threshold"],
                  memory_min_fraction=_DEFAULTS["memory_min_fraction"], skip=(), expected_gpus=None,
                  rules=NODE_RULES):
    """All findings for one node. ``ctx`` keys: nvidia, kubelet, driver_guard, checkpoint,
    cgroups, stack, api, catalog, errors (probe name -> message). ``expected_gpus``: the GPUs the
    inventory says the node has (None: not checked). Findings whose id is in ``skip`` are left out.
    ``rules``: the node rules, in order (:data:`NODE_RULES`)."""
    ctx = as_dict(ctx)
    options = {"pending_threshold_s": pending_threshold_s, "memory_min_fraction": memory_min_fraction,
               "expected_gpus": expected_gpus}
    out = []
    for rule in rules:
        try:
            out += rule.function(ctx, *[options[name] for name in rule.options])
        except MALFORMED as e:
            out.append(finding("audit.module_failed", {
                "probe": "evaluate:%s" % rule.name,
                "error": "malformed input for rule %s: %s: %s" % (rule.name, type(e).__name__, e)},
                title="Audit rule %s could not read this node's facts" % rule.name))
    return [f for f in out if f["id"] not in skip]


def evaluate_cluster(daemonsets):
    """Cluster-wide findings (``node`` None) from the device plugin DaemonSet summaries."""
    out = []
    for rule in CLUSTER_RULES:
        out += rule.function(daemonsets)
    return out


def check_evaluation_options(args):
    """The message for the first bad evaluation option, None when all are good."""
    if args.get("pending_threshold") is not None and args["pending_threshold"] < 0:
        return "pending_threshold must be a number of seconds >= 0, got %r" % (args["pending_threshold"],)
    fraction = args.get("memory_min_fraction")
    if fraction is not None and (math.isnan(fraction) or math.isinf(fraction) or fraction < 0):
        return ("memory_min_fraction must be a finite number >= 0 (a fraction such as 0.8), got %r"
                % (fraction,))
    if args.get("expected_gpus") is not None and args["expected_gpus"] < 0:
        return "expected_gpus must be a GPU count >= 0, got %r" % (args["expected_gpus"],)
    return unknown_ids_message(args.get("skip"), "skip")


def load_evaluation_catalog(catalog_extra=None, directory=None):
    """``(entries, error)``: the catalog v2 entries the findings are evaluated with - the bundled
    catalog plus the task's ``catalog_extra`` documents (``plugin_utils/catalog/load.for_task``).

    Invalid ``catalog_extra`` documents are left out (the driver_guard probe, which validates
    the same documents, already fails with the reason), so the bundled entries still apply;
    ``(None, message)`` only when the bundled catalog itself cannot be read or is invalid."""
    task_catalog = catalog_load.for_task(catalog_extra, directory)
    return task_catalog.entries, task_catalog.entries_error


def unreachable_audit(node, error):
    """``kubegpu_audit`` of a node the probes never reached: listed, never dropped."""
    return {"node": node, "status": "unreachable", "error": error, "findings": []}


def evaluate(node, ctx, args):
    """``(findings, kubegpu_audit)`` for one node; ``ctx`` as evaluate_node takes it, ``args``
    the evaluation options (pending_threshold, memory_min_fraction, skip, expected_gpus).

    The fact carries the node's ``coverage`` (audit/coverage.py: what the probes could see) and
    the findings of the node rules plus ``audit.not_inspected`` (rules/probes.rule_coverage) for a
    node that is not a GPU node or whose probes saw nothing."""
    findings = evaluate_node(ctx, pending_threshold_s=args["pending_threshold"],
                             memory_min_fraction=args["memory_min_fraction"], skip=args["skip"],
                             expected_gpus=args.get("expected_gpus"))
    cov = coverage(ctx)
    findings = probes.rule_coverage(cov, args["skip"]) + findings
    return findings, {"node": node, "status": "audited", "findings": findings, "coverage": cov,
                      "labels": node_labels(as_dict(ctx).get("api"))}


LABELS_MAX = 128        # labels of the Node kept in the fact (the report groups nodes by one of them)
LABEL_TEXT_MAX = 320    # characters of a label key or value (Kubernetes allows 317 and 63)


def node_labels(api):
    """The Node's labels from its API view (``api["labels"]``), strings only, bounded."""
    out = {}
    for key, value in sorted(as_dict(as_dict(api).get("labels")).items(), key=lambda kv: str(kv[0])):
        if isinstance(key, str) and isinstance(value, str) and len(out) < LABELS_MAX:
            out[key[:LABEL_TEXT_MAX]] = value[:LABEL_TEXT_MAX]
    return out


CONTEXT_KEYS = ("nvidia", "kubelet", "driver_guard", "checkpoint", "cgroups", "stack", "api", "errors")
# audit_node's evaluation options (node required here), each probe result as a dict, unreachable.
ARGUMENT_SPEC = probe_options.spec(EVALUATION_OPTIONS, unreachable={"type": "str", "default": ""},
                                   **dict((k, {"type": "dict", "default": {}}) for k in CONTEXT_KEYS))
ARGUMENT_SPEC["node"]["required"] = True


def evaluate_task(task, args):
    """kubegpu.fleet.audit_evaluate: the findings and ``kubegpu_audit`` of one node from probe
    results gathered by other tasks (the bundled catalog v2; a catalog that cannot be loaded is
    a ``catalog_v2`` error of the node, as in audit_node)."""
    error = check_evaluation_options(args)
    if error:
        raise runner.ActionFailed(error)
    if args["unreachable"]:
        # The node probes never reached the node: listed as unreachable, never dropped.
        audit = unreachable_audit(args["node"], args["unreachable"])
        return {"findings": [], "ansible_facts": {"kubegpu_audit": audit}}
    ctx = dict((k, args[k]) for k in CONTEXT_KEYS)
    catalog, catalog_error = load_evaluation_catalog()
    if catalog_error is not None:
        ctx["errors"] = dict(ctx["errors"], catalog_v2=catalog_error)
    ctx["catalog"] = catalog or []
    findings, audit = evaluate(args["node"], ctx, args)
    return {"findings": findings, "ansible_facts": {"kubegpu_audit": audit}}


ACTION = runner.Action(ARGUMENT_SPEC, evaluate_task)
