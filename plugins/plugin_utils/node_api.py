# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Node maintenance against the Kubernetes API from the controller process (kubegpu.fleet.node_maintenance).

A rollout spends most of its time above the node's own work in API round trips, and a
``kubernetes.core`` task pays a fresh Python process, the client import and API discovery
for each of them (2-5 s on a busy 2-core controller). These helpers make the same reads and
patches with the official ``kubernetes`` client inside the action plugin's worker (tens of
milliseconds each), and poll in-process:

* ``node_patch_ops`` - one RFC 6902 JSON patch for cordon/uncordon and the role's
  annotations, guarded by a ``test`` of the resourceVersion it was computed from, so a
  concurrent writer (an operator's kubectl cordon) is never overwritten: a conflict re-reads.
* ``wait_until`` - a deadline loop with an injectable clock, shared by every wait.
* ``ready_check`` / ``validated_check`` - the conditions of the role's waits, on plain dicts
  (the JSON the API returns, the same shape ``kubernetes.core.k8s_info`` returns).
"""
from __future__ import annotations

import json
import os
import time

from urllib.parse import quote, urlencode

from ansible_collections.kubegpu.fleet.plugins.plugin_utils import rollout

CONFLICT_RETRIES = 5


class NodeApiError(Exception):
    """An API call failed; ``status`` is the HTTP status (None when no response)."""

    def __init__(self, msg, status=None):
        super().__init__(msg)
        self.status = status


def json_pointer(*parts):
    """RFC 6901 pointer from raw path parts (``kubegpu.io/maintenance`` -> ``kubegpu.io~1maintenance``)."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def node_patch_ops(node, unschedulable=None, annotations=None):
    """JSON patch that sets spec.unschedulable and the given annotations (None removes one).

    Returns ``(ops, before, after)`` where before/after are ``{'unschedulable', 'annotations'}``
    restricted to the keys asked for; ``ops`` is empty when nothing would change, else it starts
    with a ``test`` of the node's resourceVersion.
    """
    meta = (node or {}).get("metadata") or {}
    current = meta.get("annotations") or {}
    was = bool(((node or {}).get("spec") or {}).get("unschedulable"))
    wanted = dict(annotations or {})
    before = {"annotations": dict((k, current[k]) for k in sorted(wanted) if k in current)}
    after = {"annotations": dict((k, v) for k, v in sorted(wanted.items()) if v is not None)}
    ops = []
    if unschedulable is not None:
        before["unschedulable"] = was
        after["unschedulable"] = bool(unschedulable)
        if was != bool(unschedulable):
            ops.append({"op": "add", "path": "/spec/unschedulable", "value": bool(unschedulable)})
    sets = dict((k, str(v)) for k, v in wanted.items() if v is not None and current.get(k) != str(v))
    removes = sorted(k for k, v in wanted.items() if v is None and k in current)
    if sets and not current:
        ops.append({"op": "add", "path": "/metadata/annotations", "value": sets})
    else:
        ops.extend({"op": "add", "path": json_pointer("metadata", "annotations", k), "value": sets[k]} for k in sorted(sets))
    ops.extend({"op": "remove", "path": json_pointer("metadata", "annotations", k)} for k in removes)
    if ops:
        ops.insert(0, {"op": "test", "path": "/metadata/resourceVersion", "value": meta.get("resourceVersion")})
    return ops, before, after


def wait_until(fetch, done, timeout, poll, clock=time.monotonic, sleep=time.sleep):
    """Call ``fetch()`` until ``done(value)`` is true or ``timeout`` seconds have passed.

    ``fetch`` errors (NodeApiError) count as not done and are kept as ``last_error``; the loop
    never sleeps past the deadline and always makes at least one call. Returns
    ``{'ok', 'value', 'waited', 'polls', 'last_error'}``.
    """
    start = clock()
    deadline = start + max(float(timeout), 0.0)
    polls = 0
    value = None
    last_error = None
    while True:
        polls += 1
        try:
            value = fetch()
            last_error = None
            if done(value):
                return {"ok": True, "value": value, "waited": round(clock() - start, 3), "polls": polls,
                        "last_error": None}
        except NodeApiError as exc:
            last_error = str(exc)
        remaining = deadline - clock()
        if remaining <= 0:
            return {"ok": False, "value": value, "waited": round(clock() - start, 3), "polls": polls,
                    "last_error": last_error}
        sleep(min(max(float(poll), 0.05), remaining))


def ready_check(node, old_boot_id=""):
    """Is the node back: Ready (cordoned is fine) and, when old_boot_id is set, with another bootID?"""
    if not node:
        return {"ok": False, "msg": "the Node does not exist", "boot_id": None}
    boot_id = ((node.get("status") or {}).get("nodeInfo") or {}).get("bootID") or ""
    reason = rollout.unavailable_reason(node) or ""
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
    plugin = rollout.plugin_pod(pods, daemonsets, image_pattern)
    expected = rollout.expected_resources(nvidia, plugin["mig_strategy"]) if nvidia else None
    resources = rollout.resources_check(allocatable_before or {}, rollout.gpu_resources(node or {}), expected)
    problems = []
    if not plugin["ready"]:
        problems.append("device plugin pod %s not Ready (phase %s)" % (plugin["pod"] or "(none)", plugin["phase"]))
    if not resources["ok"]:
        problems.append(resources["msg"])
    return {"ok": not problems, "plugin": plugin, "resources": resources, "msg": "; ".join(problems) or "ok"}


def kubeconfig_from(kubeconfig=None, context=None, environ=None):
    """(config file or None, context or None) the way kubernetes.core resolves them."""
    env = os.environ if environ is None else environ
    path = kubeconfig or env.get("K8S_AUTH_KUBECONFIG") or None
    return path, (context or env.get("K8S_AUTH_CONTEXT") or None)


class NodeApi(object):
    """The few calls node maintenance needs, returning the API's JSON as plain dicts.

    Requests go through the official client's configuration (kubeconfig, TLS, token or exec
    credentials, refreshed by its hooks) and REST layer, without the generated typed API
    classes: importing CoreV1Api alone costs about 0.5 s, paid by every task's forked worker.
    """

    TIMEOUT = (10, 60)   # connect, read seconds

    def __init__(self, api_client):
        from kubernetes.client import exceptions  # pylint: disable=import-outside-toplevel

        self._exc = exceptions.ApiException
        self._client = api_client
        self._config = api_client.configuration

    @classmethod
    def connect(cls, kubeconfig=None, context=None):
        try:
            from kubernetes import config  # pylint: disable=import-outside-toplevel
        except ImportError as exc:
            raise NodeApiError("the kubernetes Python package is required on the controller (pip install kubernetes): %s"
                               % exc)
        path, ctx = kubeconfig_from(kubeconfig, context)
        try:
            if path is None and os.environ.get("KUBERNETES_SERVICE_HOST") and not os.environ.get("KUBECONFIG"):
                from kubernetes import client  # pylint: disable=import-outside-toplevel
                config.load_incluster_config()
                return cls(client.ApiClient())
            return cls(config.new_client_from_config(config_file=path, context=ctx))
        except Exception as exc:  # pylint: disable=broad-except  # kubeconfig loading raises many types
            raise NodeApiError("cannot load the kubeconfig %s%s: %s"
                               % (path or "(default)", " context %s" % ctx if ctx else "", exc))

    def _headers(self, content_type=None):
        headers = dict(getattr(self._client, "default_headers", None) or {})
        headers.setdefault("User-Agent", self._client.user_agent)
        headers["Accept"] = "application/json"
        for auth in (self._config.auth_settings() or {}).values():
            if auth.get("in") == "header" and auth.get("value"):
                headers[auth["key"]] = auth["value"]
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    def request(self, what, method, path, query=None, body=None, content_type=None):
        """One HTTP request; the decoded JSON body, or NodeApiError with the API's message."""
        url = self._config.host.rstrip("/") + path + ("?" + urlencode(query) if query else "")
        try:
            resp = self._client.rest_client.request(method, url, headers=self._headers(content_type), body=body,
                                                    _request_timeout=self.TIMEOUT)
            status = resp.status
            data = resp.data if getattr(resp, "data", None) is not None else resp.read()
        except self._exc as exc:   # clients before v31 raise on any status other than 2xx
            status, data = exc.status, exc.body
        except Exception as exc:  # pylint: disable=broad-except  # urllib3/ssl/socket errors
            raise NodeApiError("%s: %s" % (what, exc))
        try:
            doc = json.loads(data or b"{}")
        except (TypeError, ValueError):
            doc = {"message": (data or b"").decode("utf-8", "replace")[:300] if isinstance(data, bytes) else str(data)}
        if not 200 <= int(status or 0) < 300:
            raise NodeApiError("%s: HTTP %s %s" % (what, status, (doc or {}).get("message") or ""), status=status)
        return doc

    def node(self, name):
        """The Node, or None when it does not exist."""
        try:
            return self.request("read Node %s" % name, "GET", "/api/v1/nodes/%s" % quote(name, safe=""))
        except NodeApiError as exc:
            if exc.status == 404:
                return None
            raise

    def nodes(self):
        return self.request("list Nodes", "GET", "/api/v1/nodes").get("items") or []

    def pods_on(self, name):
        return self.request("list Pods on %s" % name, "GET", "/api/v1/pods",
                            query={"fieldSelector": "spec.nodeName=%s" % name}).get("items") or []

    def daemonsets(self):
        return self.request("list DaemonSets", "GET", "/apis/apps/v1/daemonsets").get("items") or []

    def patch_node(self, name, ops):
        return self.request("patch Node %s" % name, "PATCH", "/api/v1/nodes/%s" % quote(name, safe=""), body=ops,
                            content_type="application/json-patch+json")


def patch_node(api, name, unschedulable=None, annotations=None, check_mode=False, retries=CONFLICT_RETRIES):
    """Read the Node and apply node_patch_ops in one request; a conflict (409, or 422 from the
    resourceVersion test) re-reads and recomputes. Returns {changed, node, before, after, ops}."""
    for attempt in range(retries + 1):
        node = api.node(name)
        if node is None:
            raise NodeApiError("no Node %s in the cluster" % name, status=404)
        ops, before, after = node_patch_ops(node, unschedulable, annotations)
        if not ops or check_mode:
            return {"changed": bool(ops), "node": node, "before": before, "after": after, "ops": ops,
                    "attempts": attempt + 1}
        try:
            node = api.patch_node(name, ops)
            return {"changed": True, "node": node, "before": before, "after": after, "ops": ops, "attempts": attempt + 1}
        except NodeApiError as exc:
            if exc.status not in (409, 422) or attempt == retries:
                raise
    return None  # not reached: the last attempt returns or raises
