# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pause the GPU Operator's node-local GPU clients for a GPU reset, and bring them back
(kubegpu.fleet.gpu_operands).

``nvidia-smi -r`` refuses while any application has the GPU open (nvidia-smi(1), ``-r``: "There
can't be any applications using these devices (e.g. CUDA application, graphics application like
X server, monitoring application like other instance of nvidia-smi)",
https://docs.nvidia.com/deploy/nvidia-smi/index.html). On a GPU Operator node the device plugin,
GPU Feature Discovery, DCGM, the DCGM exporter, the MIG manager and the validator are DaemonSet
pods: a drain leaves them running and they keep ``/dev/nvidia*`` open.

The GPU Operator stops them itself around a driver restart, in its k8s-driver-manager
(NVIDIA/k8s-driver-manager, ``driver-manager``: ``_evict_all_gpu_operator_components``,
``_reschedule_gpu_operator_components``). Each operand DaemonSet selects its nodes with a node
label ``nvidia.com/gpu.deploy.<component>=true``; the driver manager relabels the node so that the
DaemonSet controller deletes the pods there, waits until they are deleted, and relabels it back
afterwards. Its value rules (``_maybe_set_paused`` / ``_maybe_set_true``), which this module keeps:

* ``true`` becomes the pause value (there ``paused-for-driver-upgrade``);
* ``false`` and an empty value are the operator's own "do not deploy" and are never changed;
* a value that already carries the pause value is left alone;
* any other value gets ``_<pause value>`` appended, so it no longer selects the DaemonSet and
  still shows what it was.

Differences, each on purpose:

* The pause value is our own, :data:`PAUSED` (``paused-for-gpu-reset``), composed the same way,
  so an operator's or the driver manager's own pause is kept and never undone by us.
* The driver manager restores by stripping its marker from whatever the label holds. Here the
  values before the pause are recorded on the Node (annotation :data:`ANNOTATION`, written in the
  same resourceVersion-guarded patch as the labels), and a restore sets back exactly what was
  recorded, only where the label still holds the value we set: a label someone changed meanwhile
  (an operator's ``false``) is kept. A run killed between pause and restore leaves the record,
  so the next restore (the role runs one on every finish) still finds what to set back. Labels
  that carry our marker but are missing from the record (a record lost or unreadable) are
  unmarked as the driver manager does it.
* A label the node does not carry is never created (the driver manager sets missing labels to an
  empty value).
* The wait is on the pods themselves, not on fixed ``app=`` selectors in one namespace: every pod
  on the node that a DaemonSet controls and whose ``nodeSelector`` (or required node affinity)
  names a paused label holds the pause up until it is gone (a terminating pod still has its
  devices open).
* ``container-toolkit`` is not paused by default: it holds no GPU device open (it installs the
  runtime and its configuration), and a GPU reset does not change the driver root it points at,
  which is why the driver manager stops it for a driver restart. ``driver`` is never paused: the
  driver DaemonSet unloads the kernel modules when it stops.

Every Node read is the API's JSON; labels and the record are untrusted: non-string values are
ignored and named, the record is parsed through the one JSON bound (``parse_bound.load_json``).
"""
from __future__ import annotations

import json
import re

from ansible_collections.kubegpu.fleet.plugins.module_utils._common.safe_io import UnsafeInput, check_timeout
from ansible_collections.kubegpu.fleet.plugins.plugin_utils import parse_bound
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.action import runner
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.k8s import action as k8s_action
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.k8s import client as k8s_client
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.k8s.waiter import wait_until
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.rollout import node_api

PAUSED = "paused-for-gpu-reset"
LABEL_PREFIX = "nvidia.com/gpu.deploy."
ANNOTATION = "kubegpu.io/gpu-operands-paused"
# The operands k8s-driver-manager stops around a driver restart, less container-toolkit (see above).
DEFAULT_COMPONENTS = ("operator-validator", "device-plugin", "gpu-feature-discovery", "dcgm-exporter", "dcgm",
                      "nvsm", "mig-manager", "sandbox-validator", "sandbox-device-plugin", "vgpu-device-manager")
NEVER = ("driver",)
COMPONENT = re.compile(r"^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$")
# A label value as the API validates it (k8s.io/apimachinery validation.IsValidLabelValue).
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
LABEL_VALUE_MAX = 63
RECORD_MAX_BYTES = 16 << 10
SHOWN = 80
RBAC_HINT = "the identity needs get and patch on nodes and list on pods (cluster scope)"


class OperandsError(ValueError):
    """The record or the options cannot be worked with (the task fails with the message)."""


def shown(value):
    """A label value or name from the API, cut and repr'd for a message."""
    text = value if isinstance(value, str) else repr(value)
    return repr(text[:SHOWN] + ("..." if len(text) > SHOWN else ""))


def valid_label_value(value):
    return isinstance(value, str) and len(value) <= LABEL_VALUE_MAX and bool(LABEL_VALUE.match(value))


def label_of(component):
    return LABEL_PREFIX + component


def check_components(components):
    """The component names, checked: DNS-label shaped, never the driver, no repeats."""
    out = []
    for name in components:
        if not isinstance(name, str) or not COMPONENT.match(name):
            raise UnsafeInput("components: %s is not a GPU Operator component name (a-z, 0-9 and -, at most 40)"
                              % shown(name))
        if name in NEVER:
            raise UnsafeInput("components: %s is never paused (its DaemonSet unloads the driver when it stops)" % name)
        if name not in out:
            out.append(name)
    if not out:
        raise UnsafeInput("components: name at least one component")
    return out


# ------------------------------------------------------------------------------ decisions

def paused_value(current):
    """``(value to set or None, reason it is left)`` for one ``nvidia.com/gpu.deploy.*`` label
    whose value is ``current`` (None: the node does not carry it); the driver manager's
    ``_maybe_set_paused`` rules with our marker."""
    if current is None:
        return None, "not on the node (the GPU Operator does not deploy it here by this label)"
    if not isinstance(current, str):
        return None, "not a string: %s" % shown(current)
    if current == "":
        return None, "empty: disabled by the cluster's operator"
    if current == "false":
        return None, "false: disabled by the cluster's operator"
    if current == "true":
        return PAUSED, None
    if PAUSED in current:
        return None, "already paused for a GPU reset"
    composed = current + "_" + PAUSED
    if not valid_label_value(composed):
        return None, "%s cannot carry the pause marker (not a label value then); it does not select 'true'" % shown(
            current)
    return composed, None


def unmarked(current):
    """What a label carrying our marker held before it (the driver manager's ``_maybe_set_true``
    for our marker), or None when it does not carry it."""
    if not isinstance(current, str):
        return None
    if current == PAUSED:
        return "true"
    suffix = "_" + PAUSED
    if current.endswith(suffix) and len(current) > len(suffix):
        return current[:-len(suffix)]
    return None


def node_labels(node):
    labels = ((node or {}).get("metadata") or {}).get("labels")
    return labels if isinstance(labels, dict) else {}


def operator_labels(node):
    """The node's ``nvidia.com/gpu.deploy.*`` labels (GPU Operator operand switches)."""
    return dict((k, v) for k, v in sorted(node_labels(node).items())
                if isinstance(k, str) and k.startswith(LABEL_PREFIX))


def read_record(node, annotation=ANNOTATION):
    """``(record, problems)``: the labels' values before the pause, from the Node's annotation.
    ``record`` maps label -> value (only well-formed entries); ``problems`` names what was
    dropped. No annotation: ``({}, [])``."""
    annotations = ((node or {}).get("metadata") or {}).get("annotations")
    text = annotations.get(annotation) if isinstance(annotations, dict) else None
    if text is None:
        return {}, []
    if not isinstance(text, str):
        return {}, ["annotation %s is not a string" % annotation]
    try:
        doc = parse_bound.load_json(text, "the annotation %s" % annotation, max_bytes=RECORD_MAX_BYTES)
    except parse_bound.ParseError as exc:
        return {}, [str(exc)]
    labels = doc.get("labels") if isinstance(doc, dict) else None
    if not isinstance(labels, dict):
        return {}, ["annotation %s holds no labels mapping" % annotation]
    record, problems = {}, []
    for key, value in sorted(labels.items(), key=lambda kv: str(kv[0])):
        if not (isinstance(key, str) and key.startswith(LABEL_PREFIX) and len(key) <= 253):
            problems.append("record entry %s is not a %s* label" % (shown(key), LABEL_PREFIX))
        elif not valid_label_value(value) or value in ("", "false"):
            problems.append("record entry %s has no value a pause could have changed: %s" % (key, shown(value)))
        else:
            record[key] = value
    return record, problems


def record_text(record):
    """The annotation's value for ``record`` (sorted, compact: one write, readable with kubectl)."""
    return json.dumps({"labels": dict(sorted(record.items())), "by": "kubegpu.fleet.gpu_operands"},
                      sort_keys=True, separators=(",", ":"))


def pause_plan(node, components, annotation=ANNOTATION):
    """What a pause changes on ``node``: ``{set: {label: value}, record: {label: before},
    paused: {label: {from, to}}, kept: {label: reason}, problems: [...]}``. Labels already in
    the record keep their recorded value (a repeated or resumed pause never records its own
    marker as the value to restore)."""
    labels = node_labels(node)
    record, problems = read_record(node, annotation)
    out = {"set": {}, "record": dict(record), "paused": {}, "kept": {}, "problems": problems}
    for component in components:
        key = label_of(component)
        current = labels.get(key)
        new, reason = paused_value(current)
        if new is None:
            if key in record and isinstance(current, str) and PAUSED in current:
                reason = "already paused for a GPU reset (recorded: %s)" % record[key]
            if current is not None or key in record:
                out["kept"][key] = reason
            continue
        out["set"][key] = new
        out["paused"][key] = {"from": current, "to": new}
        out["record"].setdefault(key, current)
    return out


def restore_plan(node, annotation=ANNOTATION):
    """What a restore changes on ``node``: ``{set: {label: value}, restored: {label: {from, to}},
    left: {label: reason}, unrecorded: {label: {from, to}}, problems, had_record}``. A recorded
    label is set back only while it holds the value our pause set; one someone changed since is
    left as it is. A label with our marker that the record lacks is unmarked."""
    labels = node_labels(node)
    record, problems = read_record(node, annotation)
    annotations = ((node or {}).get("metadata") or {}).get("annotations")
    had = isinstance(annotations, dict) and annotation in annotations
    out = {"set": {}, "restored": {}, "left": {}, "unrecorded": {}, "problems": problems, "had_record": had}
    for key, before in sorted(record.items()):
        current = labels.get(key)
        ours, _reason = paused_value(before)
        if current == before:
            continue
        if current is None:
            out["left"][key] = "removed from the node since the pause: not created again"
        elif current != ours:
            out["left"][key] = "now %s, changed since the pause (our pause set %s): kept" % (
                shown(current), shown(ours))
        else:
            out["set"][key] = before
            out["restored"][key] = {"from": current, "to": before}
    for key, current in operator_labels(node).items():
        if key in record:
            continue
        before = unmarked(current)
        if before is not None and valid_label_value(before):
            out["set"][key] = before
            out["unrecorded"][key] = {"from": current, "to": before}
    return out


def _selector_keys(pod):
    spec = (pod or {}).get("spec") or {}
    keys = set()
    selector = spec.get("nodeSelector")
    if isinstance(selector, dict):
        keys.update(k for k in selector if isinstance(k, str))
    required = ((((spec.get("affinity") or {}).get("nodeAffinity") or {})
                 .get("requiredDuringSchedulingIgnoredDuringExecution")) or {})
    terms = required.get("nodeSelectorTerms") if isinstance(required, dict) else None
    for term in terms if isinstance(terms, list) else []:
        exprs = term.get("matchExpressions") if isinstance(term, dict) else None
        for expr in exprs if isinstance(exprs, list) else []:
            if isinstance(expr, dict) and isinstance(expr.get("key"), str):
                keys.add(expr["key"])
    return keys


def _daemonset_owner(pod):
    refs = ((pod or {}).get("metadata") or {}).get("ownerReferences")
    for ref in refs if isinstance(refs, list) else []:
        if isinstance(ref, dict) and ref.get("controller") and ref.get("kind") == "DaemonSet":
            return str(ref.get("name") or "")[:253]
    return None


def holding_pods(pods, paused_labels):
    """The pods that still hold a pause up: controlled by a DaemonSet and selecting the node by
    one of ``paused_labels`` (the DaemonSet controller deletes them once the label no longer
    matches; until they are gone, terminating included, their containers may have the GPUs open).
    Each ``{namespace, name, daemonset, labels, terminating}``."""
    wanted = set(paused_labels)
    out = []
    for pod in pods or []:
        if not isinstance(pod, dict):
            continue
        owner = _daemonset_owner(pod)
        if owner is None:
            continue
        keys = sorted(_selector_keys(pod) & wanted)
        if not keys:
            continue
        meta = pod.get("metadata") or {}
        out.append({"namespace": str(meta.get("namespace") or "")[:253], "name": str(meta.get("name") or "")[:253],
                    "daemonset": owner, "labels": keys, "terminating": bool(meta.get("deletionTimestamp"))})
    return sorted(out, key=lambda p: (p["namespace"], p["name"]))


def pods_text(pods, limit=10):
    names = ["%s/%s%s" % (p["namespace"], p["name"], " (terminating)" if p["terminating"] else "") for p in pods]
    return ", ".join(names[:limit]) + (" and %d more" % (len(names) - limit) if len(names) > limit else "")


# ------------------------------------------------------------------------------ the action

OPERANDS_SPEC = dict({
    "name": {"type": "str", "required": True},
    "state": {"type": "str", "default": "info", "choices": ["info", "paused", "restored"]},
    "components": {"type": "list", "elements": "str", "default": list(DEFAULT_COMPONENTS)},
    "annotation": {"type": "str", "default": ANNOTATION},
    "timeout": {"type": "float", "default": 300},
    "poll": {"type": "float", "default": 1},
}, **k8s_client.AUTH_ARG_SPEC)


def _checked(args):
    args["components"] = check_components(args["components"])
    if not re.match(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$",
                    args["annotation"] or "") or len(args["annotation"]) > 316:
        raise UnsafeInput("annotation: %s is not an annotation key" % shown(args["annotation"]))
    args["timeout"] = check_timeout(args["timeout"], "timeout")
    args["poll"] = check_timeout(args["poll"], "poll", minimum=0.001, maximum=3600)
    return args


def _paused_keys(node, components, annotation):
    """The labels a pause of ``components`` holds on ``node`` now (our marker on them)."""
    labels = node_labels(node)
    record, _problems = read_record(node, annotation)
    keys = set(k for k in record if isinstance(labels.get(k), str) and PAUSED in labels[k])
    keys.update(label_of(c) for c in components if isinstance(labels.get(label_of(c)), str)
                and PAUSED in labels[label_of(c)])
    return sorted(keys)


def _info(task, api, args):
    node = api.node(args["name"])
    if node is None:
        return {"exists": False, "labels": {}, "record": {}, "problems": [], "paused_labels": [], "pods": [],
                "msg": "no Node %s" % args["name"]}
    record, problems = read_record(node, args["annotation"])
    keys = _paused_keys(node, args["components"], args["annotation"])
    pods = holding_pods(api.pods_on(args["name"]), keys) if keys else []
    return {"exists": True, "labels": operator_labels(node), "record": record, "problems": problems,
            "paused_labels": keys, "pods": pods,
            "msg": "%s paused on %s%s" % (", ".join(keys) or "nothing", args["name"],
                                          "; pods still there: %s" % pods_text(pods) if pods else "")}


def _pause(task, api, args):
    name, components, annotation = args["name"], args["components"], args["annotation"]
    seen = {}

    def plan_for(node):   # one plan per Node read (a conflict reads again)
        if seen.get("node") is not node:
            seen.update(node=node, plan=pause_plan(node, components, annotation))
        return seen["plan"]

    def labels(node):
        return plan_for(node)["set"]

    def annotations(node):
        plan = plan_for(node)
        return {annotation: record_text(plan["record"])} if plan["set"] else {}

    out = node_api.patch_node(api, name, labels=labels, annotations=annotations, check_mode=task.check_mode)
    plan = seen["plan"]
    node = out["node"]
    res = {"changed": out["changed"], "labels": operator_labels(node), "paused": plan["paused"], "kept": plan["kept"],
           "record": plan["record"], "problems": plan["problems"], "attempts": out["attempts"], "pods": []}
    if task.diff:
        res["diff"] = node_api.node_diff(name, out)
    if not operator_labels(node):
        res.update(ok=True, msg="Node %s has no %s* labels: no GPU Operator operands to pause (a GPU client that "
                                "still holds the GPUs makes the reset fall back to a reboot)" % (name, LABEL_PREFIX))
        return res
    keys = sorted(set(plan["paused"]) | set(_paused_keys(node, components, annotation)))
    if task.check_mode:
        res.update(ok=True, paused_labels=keys, msg="would pause %s on %s" % (
            ", ".join(sorted(plan["paused"])) or "nothing", name))
        return res
    if not keys:
        res.update(ok=True, paused_labels=[], msg="nothing to pause on %s: %s" % (
            name, "; ".join("%s %s" % (k, v) for k, v in sorted(plan["kept"].items())) or "no component named"))
        return res
    state = {"pods": []}

    def done(pods):
        state["pods"] = holding_pods(pods, keys)
        return not state["pods"]

    waited = wait_until(lambda: api.pods_on(name), done, args["timeout"], args["poll"])
    res.update(ok=waited["ok"], waited=waited["waited"], polls=waited["polls"], pods=state["pods"],
               paused_labels=keys)
    if not waited["ok"]:
        error = waited["last_error"] or ""
        if error and "HTTP 403" in error:
            error += "; " + RBAC_HINT
        if state["pods"]:
            what = "GPU operand pods on %s still there after %s s (%d polls): %s" % (
                name, args["timeout"], waited["polls"], pods_text(state["pods"]))
        else:
            what = "cannot tell whether the GPU operand pods on %s are gone: no answer within %s s (%d polls)" % (
                name, args["timeout"], waited["polls"])
        raise runner.ActionFailed(what + ("; last error: %s" % error if error else ""), **res)
    res["msg"] = "paused %s on %s; their pods are gone" % (", ".join(keys), name)
    return res


def _restore(task, api, args):
    name, annotation = args["name"], args["annotation"]
    seen = {}

    def labels(node):
        seen["plan"] = restore_plan(node, annotation)
        return seen["plan"]["set"]

    def annotations(node):
        return {annotation: None}

    out = node_api.patch_node(api, name, labels=labels, annotations=annotations, check_mode=task.check_mode)
    plan = seen["plan"]
    res = {"changed": out["changed"], "labels": operator_labels(out["node"]), "restored": plan["restored"],
           "left": plan["left"], "unrecorded": plan["unrecorded"], "problems": plan["problems"],
           "attempts": out["attempts"]}
    if task.diff:
        res["diff"] = node_api.node_diff(name, out)
    verb = "would restore" if task.check_mode else "restored"
    done = sorted(set(plan["restored"]) | set(plan["unrecorded"]))
    res["msg"] = ("%s %s on %s" % (verb, ", ".join(done), name) if done else
                  "nothing paused for a GPU reset on %s" % name)
    if plan["left"]:
        res["msg"] += "; left as changed since the pause: %s" % ", ".join(sorted(plan["left"]))
    return res


STATES = {"info": _info, "paused": _pause, "restored": _restore}


def operands_work(task, args):
    """kubegpu.fleet.gpu_operands: one ``state`` against the Node; secrets masked in the result."""
    result = {}
    with k8s_action.masked(result, args) as secrets:
        try:
            _checked(args)
            with k8s_action.connected(args, task.environ(), secrets) as client:
                result.update(STATES[args["state"]](task, node_api.NodeApi(client), args))
        except runner.ActionFailed as exc:
            result.update(exc.result)
            result.update(failed=True, msg=str(exc))
        except (UnsafeInput, node_api.NodeApiError) as exc:
            msg = str(exc)
            if getattr(exc, "status", None) == 403:
                msg += "; " + RBAC_HINT
            result.update(failed=True, msg=msg)
    return result


ACTION = runner.Action(OPERANDS_SPEC, operands_work)
