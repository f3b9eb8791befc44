# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Per-node view of the cluster from Kubernetes API objects (controller side, pure).

Input is what ``kubernetes.core.k8s_info`` returns (``resources`` lists of plain dicts).
"""
from __future__ import annotations

import datetime

PASS_DEVICE_SPECS = "PASS_DEVICE_SPECS"


def parse_time(value):
    """RFC 3339 time from the API (``2026-11-22T05:00:00Z``) -> aware datetime, else None."""
    if not isinstance(value, str) or not value:
        return None
    text = value.strip().replace("Z", "+00:00")
    if "." in text:  # microTime: 2026-11-22T05:00:00.123456Z
        head, dot, tail = text.partition(".")
        frac = "".join(ch for ch in tail if ch.isdigit())
        zone = tail[len(frac):]
        text = head + dot + (frac + "000000")[:6] + zone
    try:
        dt = datetime.datetime.fromisoformat(text)
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=datetime.timezone.utc)
    return dt


def _d(value):
    """``value`` when it is a mapping, else {} (malformed API objects never raise)."""
    return value if isinstance(value, dict) else {}


def _l(value):
    """``value`` when it is a list, else []."""
    return value if isinstance(value, list) else []


def _s(value):
    """``value`` when it is a non-empty string, else None."""
    return value if isinstance(value, str) and value else None


def _meta(obj, key, default=None):
    return _d(_d(obj).get("metadata")).get(key, default)


def json_kind(value):
    """JSON name of a value's type ("a list", "a string"...), whatever class carries it."""
    for types, name in ((bool, "a boolean"), (dict, "an object"), (list, "a list"), (str, "a string"),
                        ((int, float), "a number")):
        if isinstance(value, types):
            return name
    return "null" if value is None else "a %s" % type(value).__name__


def shape_problems(obj, kind):
    """What is malformed in an API object, as short texts (empty when it is well-formed enough).

    Kubernetes never sends these; a proxy, a broken aggregated API or a hand-written
    ``nodes``/``pods`` option can. Each problem names the field and what it holds instead.
    """
    problems = []
    if not isinstance(obj, dict):
        return ["%s is %s, not an object" % (kind, json_kind(obj))]

    def want(parent, path, types, label):
        value = parent.get(path[-1]) if isinstance(parent, dict) else None
        if value is not None and not isinstance(value, types):
            problems.append("%s is %s, expected %s" % (".".join(path), json_kind(value), label))
            return {}
        return value

    meta = want(obj, ["metadata"], dict, "an object")
    if meta is None:
        problems.append("metadata is missing or null")
    elif meta:
        for key in ("name", "namespace", "uid"):
            want(meta, ["metadata", key], str, "a string")
        want(meta, ["metadata", "labels"], dict, "an object")
        want(meta, ["metadata", "ownerReferences"], list, "a list")
    spec = want(obj, ["spec"], dict, "an object") or {}
    status = want(obj, ["status"], dict, "an object") or {}
    if kind == "node":
        want(status, ["status", "conditions"], list, "a list")
        want(status, ["status", "allocatable"], dict, "an object")
        want(status, ["status", "nodeInfo"], dict, "an object")
        for i, c in enumerate(_l(status.get("conditions"))):
            if not isinstance(c, dict):
                problems.append("status.conditions[%d] is %s, expected an object" % (i, json_kind(c)))
    elif kind == "pod":
        want(spec, ["spec", "nodeName"], str, "a string")
        want(spec, ["spec", "containers"], list, "a list")
        want(status, ["status", "phase"], str, "a string")
        want(status, ["status", "conditions"], list, "a list")
    return problems


def node_conditions(node):
    out = {}
    for c in _l(_d(_d(node).get("status")).get("conditions")):
        if isinstance(c, dict) and _s(c.get("type")):
            out[c["type"]] = {"status": c.get("status"), "reason": c.get("reason"),
                              "lastTransitionTime": c.get("lastTransitionTime")}
    return out


def node_ready(node):
    cond = node_conditions(node).get("Ready")
    return None if cond is None else cond.get("status") == "True"


def _containers(spec):
    return [c for c in _l(_d(spec).get("containers")) if isinstance(c, dict)]


def is_device_plugin_pod(pod, image_pattern):
    for c in _containers(_d(pod).get("spec")):
        if image_pattern in str(c.get("image") or ""):
            return True
    return False


def _container_env(container, name):
    for e in _l(container.get("env")):
        if isinstance(e, dict) and e.get("name") == name:
            return e.get("value")
    return None


def _plugin_container(spec, image_pattern):
    for c in _containers(spec):
        if image_pattern in str(c.get("image") or ""):
            return c
    return None


def _args_pass_specs(container):
    for arg in _l(container.get("args")) + _l(container.get("command")):
        if str(arg) in ("--pass-device-specs", "--pass-device-specs=true"):
            return "true"
    return None


def device_plugin_summary(pod_or_template_spec, image_pattern, owner=None):
    c = _plugin_container(pod_or_template_spec, image_pattern)
    if c is None:
        return None
    value = _container_env(c, PASS_DEVICE_SPECS)
    if value is None:
        value = _args_pass_specs(c)
    return {"image": c.get("image"), "pass_device_specs": value, "daemonset": owner}


def pod_owner(pod, kind="DaemonSet"):
    for ref in _l(_meta(pod, "ownerReferences", [])):
        if isinstance(ref, dict) and ref.get("kind") == kind:
            return ref.get("name")
    return None


def pending_since(pod):
    """When the pod became Pending on its node: PodScheduled transition, else creation."""
    for c in _l(_d(_d(pod).get("status")).get("conditions")):
        if isinstance(c, dict) and c.get("type") == "PodScheduled" and c.get("status") == "True":
            t = parse_time(c.get("lastTransitionTime"))
            if t:
                return t
    return parse_time(_meta(pod, "creationTimestamp"))


def event_component(ev):
    ev = _d(ev)
    src = _d(ev.get("source"))
    for value in (ev.get("reportingComponent"), ev.get("reportingController"), src.get("component")):
        if _s(value):
            return value
    return None


def kubelet_event_uids(events):
    """UIDs of pods that have at least one event reported by a kubelet."""
    out = set()
    for ev in _l(events):
        comp = event_component(ev) or ""
        if comp == "kubelet" or comp.endswith("/kubelet"):
            obj = _d(ev.get("involvedObject")) or _d(ev.get("regarding"))
            if obj.get("kind") == "Pod" and _s(obj.get("uid")):
                out.add(obj["uid"])
    return out


def _seconds_between(since, now):
    if since is None:
        return None
    try:
        return int((now - since).total_seconds())
    except (OverflowError, ValueError):  # a year-1 timestamp with an offset
        return None


def _label(obj, kind, index):
    name, ns = _s(_meta(obj, "name")), _s(_meta(obj, "namespace"))
    if name:
        return "%s %s" % (kind, "%s/%s" % (ns, name) if ns else name)
    return "%s #%d" % (kind, index)


def cluster_view(nodes, pods, daemonsets=None, events=None, now=None,
                 image_pattern="k8s-device-plugin"):
    """Per-node API view: ``{node_name: {...}}`` plus the device plugin DaemonSets.

    Per node: ``exists``, ``ready``, ``unschedulable``, ``conditions``, ``boot_id``,
    ``allocatable`` (nvidia.com/*), ``pods`` (uid, namespace, name, phase),
    ``pending_pods`` (bound to the node and Pending: namespace, name, uid,
    ``pending_seconds``, ``kubelet_events``), ``device_plugin`` (image and PASS_DEVICE_SPECS of
    the plugin pod actually running there, else of its DaemonSet template), ``malformed``
    (what was wrong with the Node object or the pods bound to it: fields of the wrong type
    or missing; the rest of the view is built from what could be read).

    Malformed objects never raise: ``malformed`` at the top level lists those that could not
    be attached to a node (a Node without a name, a pod whose node is unknown because its
    ``spec.nodeName`` is not a string, a DaemonSet or event that is not an object).
    """
    now = now or datetime.datetime.now(datetime.timezone.utc)
    image_pattern = image_pattern if isinstance(image_pattern, str) else "k8s-device-plugin"
    kubelet_seen = kubelet_event_uids(events)
    malformed = []
    ds_by_name = {}
    ds_summaries = []
    for i, ds in enumerate(_l(daemonsets)):
        problems = shape_problems(ds, "daemonset")
        if problems:
            malformed.append("%s: %s" % (_label(ds, "daemonset", i), "; ".join(problems)))
        spec = _d(_d(_d(ds).get("spec")).get("template")).get("spec")
        summary = device_plugin_summary(spec, image_pattern, owner=_s(_meta(ds, "name")))
        if summary is None:
            continue
        summary.update({"name": _s(_meta(ds, "name")), "namespace": _s(_meta(ds, "namespace"))})
        ds_by_name[(summary["namespace"], summary["name"])] = summary
        ds_summaries.append(summary)
    for i, ev in enumerate(_l(events)):
        if not isinstance(ev, dict):
            malformed.append("event #%d is %s, not an object" % (i, json_kind(ev)))

    view = {}
    for i, n in enumerate(_l(nodes)):
        problems = shape_problems(n, "node")
        name = _s(_meta(n, "name"))
        if not name:
            malformed.append("%s: %s" % (_label(n, "node", i), "; ".join(
                problems or ["metadata.name is missing"])))
            continue
        status = _d(n.get("status"))
        alloc = dict((k, v) for k, v in _d(status.get("allocatable")).items()
                     if isinstance(k, str) and k.startswith("nvidia.com/"))
        boot_id = _d(status.get("nodeInfo")).get("bootID")
        view[name] = {
            "exists": True,
            "ready": node_ready(n),
            "unschedulable": _d(n.get("spec")).get("unschedulable") is True,
            "conditions": node_conditions(n),
            "boot_id": boot_id if isinstance(boot_id, str) else None,
            "allocatable": alloc,
            "labels": _d(_meta(n, "labels", {})),
            "pods": [],
            "pending_pods": [],
            "device_plugin": None,
            "malformed": ["Node: %s" % p for p in problems],
        }

    for i, p in enumerate(_l(pods)):
        problems = shape_problems(p, "pod")
        node = _d(_d(p).get("spec")).get("nodeName")
        if not isinstance(node, str) or node not in view:
            if problems:
                malformed.append("%s: %s" % (_label(p, "pod", i), "; ".join(problems)))
            continue
        entry = view[node]
        if problems:
            entry["malformed"].append("%s: %s" % (_label(p, "pod", i), "; ".join(problems)))
        phase = _s(_d(p.get("status")).get("phase"))
        uid = _s(_meta(p, "uid"))
        ns, pname = _s(_meta(p, "namespace")), _s(_meta(p, "name"))
        entry["pods"].append({"uid": uid, "namespace": ns, "name": pname, "phase": phase})
        if is_device_plugin_pod(p, image_pattern):
            owner = pod_owner(p)
            summary = device_plugin_summary(p.get("spec"), image_pattern, owner=owner)
            summary["pod"] = "%s/%s" % (ns, pname)
            summary["phase"] = phase
            entry["device_plugin"] = summary
        if phase == "Pending" and not _meta(p, "deletionTimestamp"):
            since = pending_since(p)
            entry["pending_pods"].append({
                "namespace": ns, "name": pname, "uid": uid,
                "pending_seconds": _seconds_between(since, now),
                "kubelet_events": uid in kubelet_seen,
            })
    for entry in view.values():
        entry["pods"].sort(key=lambda x: (x["namespace"] or "", x["name"] or ""))
        entry["pending_pods"].sort(key=lambda x: (x["namespace"] or "", x["name"] or ""))
    return {"nodes": view, "device_plugin_daemonsets": ds_summaries, "malformed": malformed}
