# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Object helpers on a k8s.client.Client: get, list, and resourceVersion-guarded JSON patches."""
from __future__ import annotations

from urllib.parse import quote

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.k8s.client import K8sError

CONFLICT_RETRIES = 5


def json_pointer(*parts):
    """RFC 6901 pointer from raw path parts (``kubegpu.io/maintenance`` -> ``kubegpu.io~1maintenance``)."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def object_path(api_version, plural, name=None, namespace=None, subresource=None):
    """REST path of a collection or an object (or its ``subresource``, ``status``): ``v1`` -> /api/v1,
    ``apps/v1`` -> /apis/apps/v1."""
    path = ("/api/" if "/" not in api_version else "/apis/") + api_version
    if namespace:
        path += "/namespaces/" + quote(namespace, safe="")
    path += "/" + plural
    if name is not None:
        path += "/" + quote(name, safe="")
        if subresource:
            path += "/" + quote(subresource, safe="")
    return path


def get(client, api_version, plural, name, namespace=None, what=None):
    """The object, or None when it does not exist (404)."""
    try:
        return client.request(what or "read %s %s" % (plural, name), "GET",
                              object_path(api_version, plural, name, namespace))
    except K8sError as exc:
        if exc.status == 404:
            return None
        raise


def list_items(client, api_version, plural, namespace=None, field_selector=None, label_selector=None, what=None):
    """``items`` of a list call (every namespace unless ``namespace``)."""
    query = {}
    if field_selector:
        query["fieldSelector"] = field_selector
    if label_selector:
        query["labelSelector"] = label_selector
    return client.request(what or "list %s" % plural, "GET", object_path(api_version, plural, None, namespace),
                          query=query or None).get("items") or []


def json_patch(client, api_version, plural, name, ops, namespace=None, what=None, subresource=None):
    """Send an RFC 6902 JSON patch (to the object's ``subresource`` when given); the object as the API
    returns it."""
    return client.request(what or "patch %s %s" % (plural, name), "PATCH",
                          object_path(api_version, plural, name, namespace, subresource), body=ops,
                          content_type="application/json-patch+json")


def resource_version_test(obj):
    """The ``test`` op that makes a patch apply only to the resourceVersion it was computed from."""
    return {"op": "test", "path": "/metadata/resourceVersion",
            "value": ((obj or {}).get("metadata") or {}).get("resourceVersion")}


def guarded_patch(read, compute, send, check_mode=False, retries=CONFLICT_RETRIES, what="object"):
    """Read, compute a JSON patch from what was read, send it; a conflict re-reads and recomputes.

    ``read()`` returns the object (None: absent, K8sError 404); ``compute(obj)`` returns
    ``(ops, extra)`` with ``ops`` empty when nothing changes (a ``test`` of the resourceVersion is
    prepended here); ``send(ops)`` returns the patched object. A 409, or the 422 a failed ``test``
    gives, is retried ``retries`` times. Returns ``{changed, object, ops, attempts, extra}``.
    """
    for attempt in range(retries + 1):
        obj = read()
        if obj is None:
            raise K8sError("no %s in the cluster" % what, status=404)
        ops, extra = compute(obj)
        ops = list(ops)
        if ops:
            ops.insert(0, resource_version_test(obj))
        if not ops or check_mode:
            return {"changed": bool(ops), "object": obj, "ops": ops, "attempts": attempt + 1, "extra": extra}
        try:
            obj = send(ops)
            return {"changed": True, "object": obj, "ops": ops, "attempts": attempt + 1, "extra": extra}
        except K8sError as exc:
            if exc.status not in (409, 422) or attempt == retries:
                raise
    return None  # not reached: the last attempt returns or raises


def pending_bound(pods):
    """Pods bound to a node (spec.nodeName) whose phase is still Pending."""
    out = []
    for pod in pods or []:
        if not isinstance(pod, dict):
            continue
        if ((pod.get("spec") or {}).get("nodeName") and ((pod.get("status") or {}).get("phase") == "Pending")):
            out.append(pod)
    return out


def read_cluster(client):
    """What the GPU audit reads, one list call per kind: Nodes, Pods and DaemonSets of every namespace,
    and the core/v1 Events about each Pod bound to a node but still Pending (kubernetes.core.k8s_info's
    ``resources`` shape). Returns ``{nodes, pods, daemonsets, events, calls}``."""
    nodes = list_items(client, "v1", "nodes", what="list Nodes")
    pods = list_items(client, "v1", "pods", what="list Pods")
    daemonsets = list_items(client, "apps/v1", "daemonsets", what="list DaemonSets")
    events = []
    pending = pending_bound(pods)
    for pod in pending:
        meta = pod.get("metadata") or {}
        if not meta.get("uid") or not meta.get("namespace"):
            continue
        events.extend(list_items(client, "v1", "events", namespace=meta["namespace"],
                                 field_selector="involvedObject.uid=%s" % meta["uid"],
                                 what="list Events of Pod %s/%s" % (meta["namespace"], meta.get("name"))))
    return {"nodes": nodes, "pods": pods, "daemonsets": daemonsets, "events": events, "calls": 3 + len(pending)}


def create(client, api_version, plural, body, namespace=None, what=None):
    """POST a new object; the object as stored (K8sError 409 when the name exists)."""
    name = ((body or {}).get("metadata") or {}).get("name")
    return client.request(what or "create %s %s" % (plural, name), "POST",
                          object_path(api_version, plural, None, namespace), body=body,
                          content_type="application/json")


def replace(client, api_version, plural, name, body, namespace=None, what=None):
    """PUT the whole object; with ``metadata.resourceVersion`` set the API refuses (409) a write to
    any other version: the compare-and-swap every lock relies on."""
    return client.request(what or "update %s %s" % (plural, name), "PUT",
                          object_path(api_version, plural, name, namespace), body=body,
                          content_type="application/json")


def delete(client, api_version, plural, name, namespace=None, resource_version=None, what=None):
    """DELETE an object, only at ``resource_version`` when given (409 otherwise); True when it was
    deleted, False when it did not exist."""
    body = {"apiVersion": "v1", "kind": "DeleteOptions"}
    if resource_version:
        body["preconditions"] = {"resourceVersion": str(resource_version)}
    try:
        client.request(what or "delete %s %s" % (plural, name), "DELETE",
                       object_path(api_version, plural, name, namespace), body=body,
                       content_type="application/json")
    except K8sError as exc:
        if exc.status == 404:
            return False
        raise
    return True
