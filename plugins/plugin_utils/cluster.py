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


def _meta(obj, key, default=None):
    return (obj.get("metadata") or {}).get(key, default)


def node_conditions(node):
    out = {}
    for c in (node.get("status") or {}).get("conditions") or []:
        if isinstance(c, dict) and c.get("type"):
            out[c["type"]] = {"status": c.get("status"), "reason": c.get("reason"),
                              "lastTransitionTime": c.get("lastTransitionTime")}
    return out


def node_ready(node):
    cond = node_conditions(node).get("Ready")
    return None if cond is None else cond.get("status") == "True"


def is_device_plugin_pod(pod, image_pattern):
    for c in (pod.get("spec") or {}).get("containers") or []:
        if image_pattern in str(c.get("image") or ""):
            return True
    return False


def _container_env(container, name):
    for e in container.get("env") or []:
        if isinstance(e, dict) and e.get("name") == name:
            return e.get("value")
    return None


def _plugin_container(spec, image_pattern):
    for c in (spec or {}).get("containers") or []:
        if image_pattern in str(c.get("image") or ""):
            return c
    return None


def _args_pass_specs(container):
    for arg in (container.get("args") or []) + (container.get("command") or []):
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
    for ref in _meta(pod, "ownerReferences", []) or []:
        if ref.get("kind") == kind:
            return ref.get("name")
    return None


def pending_since(pod):
    """When the pod became Pending on its node: PodScheduled transition, else creation."""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "True":
            t = parse_time(c.get("lastTransitionTime"))
            if t:
                return t
    return parse_time(_meta(pod, "creationTimestamp"))


def event_component(ev):
    src = ev.get("source") or {}
    return ev.get("reportingComponent") or ev.get("reportingController") or src.get("component")


def kubelet_event_uids(events):
    """UIDs of pods that have at least one event reported by a kubelet."""
    out = set()
    for ev in events or []:
        comp = event_component(ev) or ""
        if comp == "kubelet" or comp.endswith("/kubelet"):
            obj = ev.get("involvedObject") or ev.get("regarding") or {}
            if obj.get("kind") == "Pod" and obj.get("uid"):
                out.add(obj["uid"])
    return out


def cluster_view(nodes, pods, daemonsets=None, events=None, now=None,
                 image_pattern="k8s-device-plugin"):
    """Per-node API view: ``{node_name: {...}}`` plus the device plugin DaemonSets.

    Per node: ``exists``, ``ready``, ``unschedulable``, ``conditions``, ``boot_id``,
    ``allocatable`` (nvidia.com/*), ``pods`` (uid, namespace, name, phase),
    ``pending_pods`` (bound to the node and Pending: namespace, name, uid,
    ``pending_seconds``, ``kubelet_events``), ``device_plugin`` (image and PASS_DEVICE_SPECS of
    the plugin pod actually running there, else of its DaemonSet template).
    """
    now = now or datetime.datetime.now(datetime.timezone.utc)
    kubelet_seen = kubelet_event_uids(events)
    ds_by_name = {}
    ds_summaries = []
    for ds in daemonsets or []:
        spec = ((ds.get("spec") or {}).get("template") or {}).get("spec")
        summary = device_plugin_summary(spec, image_pattern, owner=_meta(ds, "name"))
        if summary is None:
            continue
        summary.update({"name": _meta(ds, "name"), "namespace": _meta(ds, "namespace")})
        ds_by_name[(_meta(ds, "namespace"), _meta(ds, "name"))] = summary
        ds_summaries.append(summary)

    view = {}
    for n in nodes or []:
        name = _meta(n, "name")
        if not name:
            continue
        status = n.get("status") or {}
        alloc = dict((k, v) for k, v in (status.get("allocatable") or {}).items() if k.startswith("nvidia.com/"))
        view[name] = {
            "exists": True,
            "ready": node_ready(n),
            "unschedulable": bool((n.get("spec") or {}).get("unschedulable")),
            "conditions": node_conditions(n),
            "boot_id": (status.get("nodeInfo") or {}).get("bootID"),
            "allocatable": alloc,
            "labels": _meta(n, "labels", {}) or {},
            "pods": [],
            "pending_pods": [],
            "device_plugin": None,
        }

    for p in pods or []:
        node = (p.get("spec") or {}).get("nodeName")
        if not node or node not in view:
            continue
        entry = view[node]
        phase = (p.get("status") or {}).get("phase")
        uid = _meta(p, "uid")
        entry["pods"].append({"uid": uid, "namespace": _meta(p, "namespace"), "name": _meta(p, "name"),
                              "phase": phase})
        if is_device_plugin_pod(p, image_pattern):
            owner = pod_owner(p)
            summary = device_plugin_summary(p.get("spec"), image_pattern, owner=owner)
            summary["pod"] = "%s/%s" % (_meta(p, "namespace"), _meta(p, "name"))
            summary["phase"] = phase
            entry["device_plugin"] = summary
        if phase == "Pending" and not _meta(p, "deletionTimestamp"):
            since = pending_since(p)
            entry["pending_pods"].append({
                "namespace": _meta(p, "namespace"), "name": _meta(p, "name"), "uid": uid,
                "pending_seconds": int((now - since).total_seconds()) if since else None,
                "kubelet_events": uid in kubelet_seen,
            })
    for entry in view.values():
        entry["pods"].sort(key=lambda x: (x["namespace"] or "", x["name"] or ""))
        entry["pending_pods"].sort(key=lambda x: (x["namespace"] or "", x["name"] or ""))
    return {"nodes": view, "device_plugin_daemonsets": ds_summaries}
