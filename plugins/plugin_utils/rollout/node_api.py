# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Node maintenance against the Kubernetes API from the controller process (kubegpu.fleet.node_maintenance).

A rollout spends most of its time above the node's own work in API round trips, and a
``kubernetes.core`` task pays a fresh Python process, the client import and API discovery
for each of them (2-5 s on a busy 2-core controller). These helpers make the same reads and
patches through the collection's Kubernetes layer (``plugin_utils/k8s``: kubernetes.core's
connection resolution, the official client's REST layer) inside the action plugin's worker
(tens of milliseconds each), and poll in-process:

* ``node_patch_ops`` - one RFC 6902 JSON patch for cordon/uncordon and the role's
  annotations, guarded by a ``test`` of the resourceVersion it was computed from, so a
  concurrent writer (an operator's kubectl cordon) is never overwritten: a conflict re-reads.
* ``wait_until`` - the layer's deadline loop with an injectable clock, shared by every wait.
* ``ready_check`` / ``validated_check`` - the conditions of the role's waits, on plain dicts
  (the JSON the API returns, the same shape ``kubernetes.core.k8s_info`` returns).
"""
from __future__ import annotations

from ansible_collections.kubegpu.fleet.plugins.module_utils._common.safe_io import UnsafeInput, check_timeout
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.action import runner
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.k8s import action as k8s_action
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.k8s import client as k8s_client
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.k8s import service
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.k8s.service import CONFLICT_RETRIES, json_pointer
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.k8s.waiter import wait_until
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.rollout import gpu_nodes, validation

__all__ = ["CONFLICT_RETRIES", "NodeApi", "NodeApiError", "json_pointer", "node_patch_ops", "patch_node",
           "ready_check", "validated_check", "wait_until"]

NodeApiError = k8s_client.K8sError


def _map_ops(current, wanted, *path):
    """RFC 6902 ops that set (string values) or remove (None) keys of the string map at ``path``
    (``metadata.annotations`` or ``metadata.labels``) whose current content is ``current``."""
    sets = dict((k, str(v)) for k, v in wanted.items() if v is not None and current.get(k) != str(v))
    removes = sorted(k for k, v in wanted.items() if v is None and k in current)
    if sets and not current:
        ops = [{"op": "add", "path": json_pointer(*path), "value": sets}]
    else:
        ops = [{"op": "add", "path": json_pointer(*(path + (k,))), "value": sets[k]} for k in sorted(sets)]
    ops.extend({"op": "remove", "path": json_pointer(*(path + (k,)))} for k in removes)
    return ops


def _map_before_after(current, wanted):
    before = dict((k, current[k]) for k in sorted(wanted) if k in current)
    after = dict((k, v) for k, v in sorted(wanted.items()) if v is not None)
    return before, after


def node_patch_ops(node, unschedulable=None, annotations=None, labels=None):
    """JSON patch that sets spec.unschedulable, the given annotations and the given labels (None
    removes one).

    Returns ``(ops, before, after)`` where before/after are ``{'unschedulable', 'annotations'}``
    (and ``'labels'`` when labels are given) restricted to the keys asked for; ``ops`` is empty
    when nothing would change, else it starts with a ``test`` of the node's resourceVersion.
    """
    meta = (node or {}).get("metadata") or {}
    current = meta.get("annotations") or {}
    was = bool(((node or {}).get("spec") or {}).get("unschedulable"))
    wanted = dict(annotations or {})
    before, after = {}, {}
    before["annotations"], after["annotations"] = _map_before_after(current, wanted)
    ops = []
    if unschedulable is not None:
        before["unschedulable"] = was
        after["unschedulable"] = bool(unschedulable)
        if was != bool(unschedulable):
            ops.append({"op": "add", "path": "/spec/unschedulable", "value": bool(unschedulable)})
    ops.extend(_map_ops(current, wanted, "metadata", "annotations"))
    if labels is not None:
        current_labels = meta.get("labels") or {}
        before["labels"], after["labels"] = _map_before_after(current_labels, dict(labels))
        ops.extend(_map_ops(current_labels, dict(labels), "metadata", "labels"))
    if ops:
        ops.insert(0, service.resource_version_test(node))
    return ops, before, after


def ready_check(node, old_boot_id=""):
    """Is the node back: Ready (cordoned is fine) and, when old_boot_id is set, with another bootID?"""
    if not node:
        return {"ok": False, "msg": "the Node does not exist", "boot_id": None}
    boot_id = ((node.get("status") or {}).get("nodeInfo") or {}).get("bootID") or ""
    reason = gpu_nodes.unavailable_reason(node) or ""
    problems = []
    if reason not in ("", "cordoned"):
        problems.append(reason.replace("cordoned, ", ""))
    if old_boot_id and boot_id in ("", old_boot_id):
        problems.append("bootID still %s" % (boot_id or "empty"))
    return {"ok": not problems, "msg": "; ".join(problems) or "Ready", "boot_id": boot_id}


def validated_check(node, pods, daemonsets, allocatable_before, nvidia=None, image_pattern="k8s-device-plugin"):
    """Is GPU work possible on the node again: device plugin pod Ready and GPU resources back?

    ``nvidia`` (gpu_facts of the node, probe ok) gives the resources the plugin should advertise
    with the MIG strategy of the plugin pod found; without it only "same as before" passes.
    """
    plugin = validation.plugin_pod(pods, daemonsets, image_pattern)
    expected = validation.expected_resources(nvidia, plugin["mig_strategy"]) if nvidia else None
    resources = validation.resources_check(allocatable_before or {}, gpu_nodes.gpu_resources(node or {}), expected)
    problems = []
    if not plugin["ready"]:
        problems.append("device plugin pod %s not Ready (phase %s)" % (plugin["pod"] or "(none)", plugin["phase"]))
    if not resources["ok"]:
        problems.append(resources["msg"])
    return {"ok": not problems, "plugin": plugin, "resources": resources, "msg": "; ".join(problems) or "ok"}


class NodeApi(object):
    """The few calls node maintenance needs, on a k8s.client.Client, returning the API's JSON as dicts."""

    def __init__(self, client):
        self.client = client

    @classmethod
    def connect(cls, params=None, **kwargs):
        """Resolve the connection from the task's options (k8s.client.AUTH_ARG_SPEC) as kubernetes.core does."""
        return cls(k8s_client.connect(params, **kwargs))

    def node(self, name):
        """The Node, or None when it does not exist."""
        return service.get(self.client, "v1", "nodes", name, what="read Node %s" % name)

    def nodes(self):
        return service.list_items(self.client, "v1", "nodes", what="list Nodes")

    def pods_on(self, name):
        return service.list_items(self.client, "v1", "pods", field_selector="spec.nodeName=%s" % name,
                                  what="list Pods on %s" % name)

    def daemonsets(self):
        return service.list_items(self.client, "apps/v1", "daemonsets", what="list DaemonSets")

    def patch_node(self, name, ops):
        return service.json_patch(self.client, "v1", "nodes", name, ops, what="patch Node %s" % name)


def patch_node(api, name, unschedulable=None, annotations=None, check_mode=False, retries=CONFLICT_RETRIES,
               labels=None):
    """Read the Node and apply node_patch_ops in one request; a conflict (409, or 422 from the
    resourceVersion test) re-reads and recomputes. ``annotations`` and ``labels`` may also be
    functions of the Node read (returning what to set), for a change that depends on the Node's
    current values: they are called again after a conflict.
    Returns {changed, node, before, after, ops, attempts}."""

    def compute(node):
        ops, before, after = node_patch_ops(node, unschedulable,
                                            annotations(node) if callable(annotations) else annotations,
                                            labels(node) if callable(labels) else labels)
        return ops[1:], (before, after)   # guarded_patch prepends the resourceVersion test again

    out = service.guarded_patch(lambda: api.node(name), compute, lambda ops: api.patch_node(name, ops),
                                check_mode=check_mode, retries=retries, what="Node %s" % name)
    before, after = out["extra"]
    return {"changed": out["changed"], "node": out["object"], "before": before, "after": after, "ops": out["ops"],
            "attempts": out["attempts"]}


# -------------------------------------------------------------- kubegpu.fleet.node_maintenance

MAINTENANCE_SPEC = dict({
    "name": {"type": "str", "required": True},
    "state": {"type": "str", "default": "info", "choices": ["info", "patched", "ready", "budget", "validated"]},
    "unschedulable": {"type": "bool"},
    "annotations": {"type": "dict", "default": {}},
    "boot_id": {"type": "str", "default": ""},
    "batch": {"type": "list", "elements": "str", "default": []},
    "max_unavailable": {"type": "str", "default": "25%"},
    "allocatable": {"type": "dict", "default": {}},
    "nvidia": {"type": "dict"},
    "image_pattern": {"type": "str", "default": "k8s-device-plugin"},
    "timeout": {"type": "float", "default": 0},
    "poll": {"type": "float", "default": 1},
}, **k8s_client.AUTH_ARG_SPEC)


def checked_options(args):
    """The options a maintenance step can work with (raises UnsafeInput naming the first that is not)."""
    bad = sorted(k for k, v in args["annotations"].items() if v is not None and not isinstance(v, str))
    if bad:
        raise UnsafeInput("annotations must map to strings or null (to remove); not strings: %s" % ", ".join(bad))
    if args["state"] != "patched" and (args["unschedulable"] is not None or args["annotations"]):
        raise UnsafeInput("unschedulable and annotations need state=patched (state=%s)" % args["state"])
    # nan, inf and 1e300 would make every wait endless
    args["timeout"] = check_timeout(args["timeout"], "timeout")
    args["poll"] = check_timeout(args["poll"], "poll", minimum=0.001, maximum=3600)
    return args


def node_diff(name, out):
    """The task's diff of a Node patch (patch_node's before and after)."""
    return {"before": out["before"], "after": out["after"], "before_header": "Node %s" % name,
            "after_header": "Node %s" % name}


def _waited(args, fetch, check, what):
    """Poll until check(fetch())['ok'] or the timeout; returns (last check, wait fields)."""
    state = {}

    def done(value):
        state["check"] = check(value)
        return state["check"]["ok"]

    out = wait_until(fetch, done, args["timeout"], args["poll"])
    last = state.get("check") or {"ok": False, "msg": "no answer"}
    info = {"ok": out["ok"], "waited": out["waited"], "polls": out["polls"]}
    if not out["ok"]:
        info.update(failed=True, msg="%s: not within %s s (%d polls): %s" % (
            what, args["timeout"], out["polls"], out["last_error"] or last.get("msg")))
    return last, info


def _info(task, api, args):
    node = api.node(args["name"])
    return {"node": node or {}, "exists": node is not None}


def _patched(task, api, args):
    out = patch_node(api, args["name"], args["unschedulable"], args["annotations"], check_mode=task.check_mode)
    res = {"changed": out["changed"], "node": out["node"], "exists": True, "attempts": out["attempts"]}
    if task.diff:
        res["diff"] = node_diff(args["name"], out)
    return res


def _ready(task, api, args):
    seen = {}

    def fetch():
        seen["node"] = api.node(args["name"])
        return seen["node"]

    what = "Node %s Ready%s" % (args["name"], " with a bootID other than %s" % args["boot_id"] if args["boot_id"] else "")
    last, info = _waited(args, fetch, lambda node: ready_check(node, args["boot_id"]), what)
    return dict(info, node=seen.get("node") or {}, boot_id=last.get("boot_id"), ready=last)


def _budget(task, api, args):
    batch = args["batch"] or [args["name"]]
    last, info = _waited(args, api.nodes, lambda nodes: gpu_nodes.budget_check(nodes, batch, args["max_unavailable"]),
                         "disruption budget for %s" % ", ".join(batch))
    return dict(info, budget=last)


def _validated(task, api, args):
    seen = {}

    def fetch():
        seen["node"] = api.node(args["name"])
        seen["pods"] = api.pods_on(args["name"])
        if "daemonsets" not in seen:
            seen["daemonsets"] = api.daemonsets()
        return seen

    def check(value):
        return validated_check(value["node"], value["pods"], value["daemonsets"], args["allocatable"],
                               args["nvidia"], args["image_pattern"])

    last, info = _waited(args, fetch, check, "GPU work on %s" % args["name"])
    return dict(info, node=seen.get("node") or {}, plugin=last.get("plugin"), resources=last.get("resources"))


STATES = {"info": _info, "patched": _patched, "ready": _ready, "budget": _budget, "validated": _validated}


def maintenance_work(task, args):
    """kubegpu.fleet.node_maintenance: one ``state`` against the Node; secrets masked in the result."""
    result = {}
    with k8s_action.masked(result, args) as secrets:
        try:
            checked_options(args)
            with k8s_action.connected(args, task.environ(), secrets) as client:
                result.update(STATES[args["state"]](task, NodeApi(client), args))
        except (UnsafeInput, NodeApiError, gpu_nodes.RolloutError) as exc:
            result.update(failed=True, msg=str(exc))
    return result


ACTION = runner.Action(MAINTENANCE_SPEC, maintenance_work)
