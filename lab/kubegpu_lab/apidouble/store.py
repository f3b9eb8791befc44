"""The double's storage and registry: what kube-apiserver does between the HTTP layer and etcd.

One ``Store`` holds every object under a single re-entrant lock. Each write assigns the next
global ``resourceVersion`` and lands in a bounded change log that watches read from. After
every top-level operation the controllers the lab needs (``controllers.py``) reconcile, the
state is persisted to ``<state_dir>/state.json`` (temp file + rename) and the request is
appended to the history (``<state_dir>/history.jsonl``).
"""
import collections
import copy
import json
import os
import threading
import time
import uuid

from . import resources
from .controllers import ControllersMixin, NODE_LEASE_NAMESPACE
from .errors import ApiError, already_exists, bad_request, conflict, invalid, not_found
from .patch import apply_patch
from .selectors import field_matches, parse_field_selector, parse_label_selector
from .util import (DNS1123_LABEL, DNS1123_SUBDOMAIN, atomic_write_json, iso, iso_micro, meta,
                   parse_time, pod_ready, random_suffix)

NODE_INFO_FIELDS = ("machineID", "systemUUID", "bootID", "kernelVersion", "osImage", "containerRuntimeVersion",
                    "kubeletVersion", "kubeProxyVersion", "operatingSystem", "architecture")
DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", NODE_LEASE_NAMESPACE)
_SUBDOMAIN_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
                  "or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
                  "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*"
                  "[a-z0-9])?)*')")
_LABEL_MSG = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
              "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex "
              "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
_POD_UPDATE_MSG = ("pod updates may not change fields other than `spec.containers[*].image`,"
                   "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
                   "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
                   "(allow it to be set to 1 if it was previously negative)")
EVENTS_V1 = resources.find("events.k8s.io", "v1", "events")
CORE_EVENTS = resources.find("", "v1", "events")

# events.k8s.io/v1 field <-> core/v1 field (k8s.io/kubernetes/pkg/apis/events/v1/conversion.go)
_EVENT_FIELDS = [("regarding", "involvedObject"), ("note", "message"),
                 ("reportingController", "reportingComponent"), ("deprecatedSource", "source"),
                 ("deprecatedFirstTimestamp", "firstTimestamp"), ("deprecatedLastTimestamp", "lastTimestamp"),
                 ("deprecatedCount", "count")]


class Context(object):
    """Who asks, for the history: the HTTP facts of one request (or a controller's name)."""

    def __init__(self, method="", path="", user_agent="", actor="api", patch_type=None, body=None,
                 dry_run=False):
        self.method = method
        self.path = path
        self.user_agent = user_agent
        self.actor = actor
        self.patch_type = patch_type
        self.body = body
        self.dry_run = dry_run


def summarize_body(body, limit=600):
    if body is None:
        return None
    try:
        text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError):
        text = repr(body)
    return text if len(text) <= limit else text[:limit] + "...(%d bytes)" % len(text)


class Store(ControllersMixin):
    def __init__(self, state_dir=None, node_monitor_grace=40.0, watch_log_size=20000, event_ttl=3600.0):
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.data = {}
        self.rv = 0
        self.log = collections.deque(maxlen=watch_log_size)
        self.history = []
        self.seq = 0
        self.state_dir = state_dir
        self.node_monitor_grace = float(node_monitor_grace)
        self.event_ttl = float(event_ttl)
        self._dirty = False
        self._pending_gc = set()
        self._history_fh = None
        self.closed = False
        if state_dir:
            os.makedirs(state_dir, exist_ok=True)
            self._load()
            self._history_fh = open(os.path.join(state_dir, "history.jsonl"), "a", buffering=1)
        with self.lock:
            for name in DEFAULT_NAMESPACES:
                if ("", name) not in self._bucket(resources.find("", "v1", "namespaces")):
                    self._create_internal(resources.find("", "v1", "namespaces"),
                                          {"metadata": {"name": name}}, None, actor="bootstrap")
            self._reconcile()
            self._persist()

    # --- persistence ------------------------------------------------------------------------

    @property
    def state_file(self):
        return os.path.join(self.state_dir, "state.json") if self.state_dir else None

    def _load(self):
        path = self.state_file
        if os.path.exists(path):
            with open(path) as fh:
                state = json.load(fh)
            self.rv = int(state.get("resourceVersion", 0))
            for key, items in state.get("objects", {}).items():
                bucket = self.data.setdefault(key, {})
                for obj in items:
                    bucket[(obj["metadata"].get("namespace", ""), obj["metadata"]["name"])] = obj
        hist = os.path.join(self.state_dir, "history.jsonl")
        if os.path.exists(hist):
            with open(hist) as fh:
                for line in fh:
                    line = line.strip()
                    if not line:
                        continue
                    try:
                        entry = json.loads(line)
                    except ValueError:
                        continue  # a torn last line after a kill -9
                    self.history.append(entry)
                    self.seq = max(self.seq, int(entry.get("seq", 0)))

    def _persist(self):
        if not self._dirty or not self.state_dir or self.closed:
            self._dirty = False
            return
        objects = {}
        for key, bucket in self.data.items():
            objects[key] = [bucket[k] for k in sorted(bucket)]
        atomic_write_json(self.state_file, {"resourceVersion": self.rv, "objects": objects})
        self._dirty = False

    def close(self):
        with self.lock:
            self._persist()
            self.closed = True
            if self._history_fh:
                self._history_fh.close()
                self._history_fh = None
            self.cond.notify_all()

    # --- low-level storage ------------------------------------------------------------------

    def _bucket(self, rtype):
        return self.data.setdefault(rtype.key, {})

    def _get(self, rtype, namespace, name):
        return self._bucket(rtype).get((namespace or "" if rtype.namespaced else "", name))

    def _objects(self, rtype, namespace=None):
        bucket = self._bucket(rtype)
        keys = sorted(bucket)
        return [bucket[k] for k in keys if namespace is None or k[0] == namespace]

    @staticmethod
    def _normalize_times(rtype, obj):
        """Timestamps re-encoded as Go encodes metav1.Time (seconds) and MicroTime (microseconds), UTC."""
        def fix(holder, key, micro):
            value = holder.get(key) if isinstance(holder, dict) else None
            if isinstance(value, str):
                ts = parse_time(value)
                if ts is not None:
                    holder[key] = iso_micro(ts) if micro else iso(ts)
        md = obj.get("metadata") or {}
        for key in ("creationTimestamp", "deletionTimestamp"):
            fix(md, key, False)
        if rtype.plural == "events":
            fix(obj, "eventTime", True)
            fix(obj.get("series"), "lastObservedTime", True)
            for key in ("firstTimestamp", "lastTimestamp"):
                fix(obj, key, False)
        elif rtype.plural == "leases":
            for key in ("renewTime", "acquireTime"):
                fix(obj.get("spec"), key, True)
        status = obj.get("status")
        if isinstance(status, dict):
            fix(status, "startTime", False)
            for cond in status.get("conditions") or []:
                for key in ("lastTransitionTime", "lastHeartbeatTime", "lastProbeTime", "lastUpdateTime"):
                    fix(cond, key, False)

    @classmethod
    def _normalize(cls, rtype, obj):
        """Fields Go always serialises (no omitempty) appear with their zero value, as from a real
        apiserver; strict clients (kubernetes>=35 models) require them."""
        cls._normalize_times(rtype, obj)
        if rtype.plural == "nodes":
            status = obj.setdefault("status", {})
            info = status.setdefault("nodeInfo", {})
            for field in NODE_INFO_FIELDS:
                if info.get(field) is None:
                    info[field] = ""
            endpoints = status.setdefault("daemonEndpoints", {})
            endpoints.setdefault("kubeletEndpoint", {}).setdefault("Port", 0)
        elif rtype.plural == "pods":
            status = obj.get("status") or {}
            for field in ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"):
                for cst in status.get(field) or []:
                    for key, zero in (("name", ""), ("image", ""), ("imageID", ""), ("ready", False),
                                      ("restartCount", 0)):
                        if cst.get(key) is None:
                            cst[key] = zero
        elif rtype.plural in ("replicasets", "statefulsets"):
            obj.setdefault("status", {}).setdefault("replicas", 0)
        elif rtype.plural == "poddisruptionbudgets":
            status = obj.setdefault("status", {})
            for field in ("disruptionsAllowed", "currentHealthy", "desiredHealthy", "expectedPods"):
                status.setdefault(field, 0)
        elif rtype.plural == "events":
            obj.setdefault("involvedObject", {})
            obj.setdefault("eventTime", None)

    def _write(self, rtype, obj, etype, old=None):
        self._normalize(rtype, obj)
        self.rv += 1
        meta(obj)["resourceVersion"] = str(self.rv)
        key = (obj["metadata"].get("namespace", "") if rtype.namespaced else "", obj["metadata"]["name"])
        self._bucket(rtype)[key] = obj
        self.log.append((self.rv, rtype.key, etype, copy.deepcopy(obj), copy.deepcopy(old)))
        self._dirty = True
        self.cond.notify_all()
        return obj

    def _remove(self, rtype, obj):
        key = (obj["metadata"].get("namespace", "") if rtype.namespaced else "", obj["metadata"]["name"])
        old = self._bucket(rtype).pop(key, None)
        if old is None:
            return None
        self.rv += 1
        final = copy.deepcopy(old)
        final["metadata"]["resourceVersion"] = str(self.rv)
        self.log.append((self.rv, rtype.key, "DELETED", copy.deepcopy(final), None))
        self._pending_gc.add(old["metadata"].get("uid"))
        self._dirty = True
        self.cond.notify_all()
        return final

    # --- representation (events.k8s.io/v1 shares core/v1 event storage) ---------------------

    def _external(self, rtype, obj):
        out = copy.deepcopy(obj)
        if rtype is EVENTS_V1:
            for new, old in _EVENT_FIELDS:
                if old in out:
                    out[new] = out.pop(old)
            out["apiVersion"] = "events.k8s.io/v1"
        else:
            out["apiVersion"] = rtype.api_version
        out["kind"] = rtype.kind
        return out

    def _internal(self, rtype, obj):
        out = copy.deepcopy(obj)
        if rtype is EVENTS_V1:
            for new, old in _EVENT_FIELDS:
                if new in out:
                    out[old] = out.pop(new)
            out["apiVersion"] = "v1"
        else:
            out["apiVersion"] = rtype.api_version
        out["kind"] = rtype.kind
        return out

    # --- history ----------------------------------------------------------------------------

    def _node_snapshot(self):
        snap = {}
        unavailable, unavailable_gpu = [], []
        for node in self._objects(resources.find("", "v1", "nodes")):
            name = node["metadata"]["name"]
            ready = self._node_ready(node)
            gpu = self._is_gpu_node(node)
            unsched = bool((node.get("spec") or {}).get("unschedulable"))
            snap[name] = {"unschedulable": unsched, "ready": ready, "gpu": gpu,
                          "bootID": ((node.get("status") or {}).get("nodeInfo") or {}).get("bootID"),
                          "kubelet": self._node_managed(name)}
            if unsched or ready != "True":
                unavailable.append(name)
                if gpu:
                    unavailable_gpu.append(name)
        return snap, unavailable, unavailable_gpu

    def _object_summary(self, rtype, obj):
        if obj is None:
            return None
        md = obj.get("metadata", {})
        out = {"resourceVersion": md.get("resourceVersion"), "uid": md.get("uid")}
        if md.get("deletionTimestamp"):
            out["deletionTimestamp"] = md["deletionTimestamp"]
        if rtype.plural == "nodes":
            out["unschedulable"] = bool((obj.get("spec") or {}).get("unschedulable"))
            out["ready"] = self._node_ready(obj)
        elif rtype.plural == "pods":
            out["nodeName"] = (obj.get("spec") or {}).get("nodeName")
            out["phase"] = (obj.get("status") or {}).get("phase")
            out["ready"] = pod_ready(obj)
        elif rtype.plural == "daemonsets":
            out["generation"] = md.get("generation")
        elif rtype.plural == "poddisruptionbudgets":
            out["disruptionsAllowed"] = (obj.get("status") or {}).get("disruptionsAllowed")
        return out

    def record(self, ctx, verb, rtype, namespace, name, code, obj=None, subresource=None,
               changed=None, error=None):
        """Append one history entry (caller holds no lock or the lock: it is re-entrant)."""
        with self.lock:
            self.seq += 1
            now = time.time()
            nodes, unavailable, unavailable_gpu = self._node_snapshot()
            entry = {
                "seq": self.seq, "time": iso_micro(now), "ts": now, "actor": ctx.actor, "verb": verb,
                "method": ctx.method, "path": ctx.path,
                "resource": rtype.key if rtype is not None else None,
                "subresource": subresource, "namespace": namespace or None, "name": name, "code": code,
                "changed": changed, "dry_run": bool(ctx.dry_run), "user_agent": ctx.user_agent,
                "patch_type": ctx.patch_type, "body": summarize_body(ctx.body),
                "object": self._object_summary(rtype, obj) if rtype is not None else None,
                "nodes": nodes, "unavailable_nodes": unavailable, "unavailable_gpu_nodes": unavailable_gpu,
            }
            if error is not None:
                entry["error"] = {"reason": error.reason, "message": error.message}
            self.history.append(entry)
            if self._history_fh:
                self._history_fh.write(json.dumps(entry, sort_keys=True) + "\n")
            return entry

    def history_since(self, since=0, resource=None, name=None, actor=None, verb=None):
        with self.lock:
            out = []
            for entry in self.history:
                if entry["seq"] <= since:
                    continue
                if verb and entry.get("verb") != verb:
                    continue
                if resource and entry.get("resource") != resource:
                    continue
                if name and entry.get("name") != name:
                    continue
                if actor and entry.get("actor") != actor:
                    continue
                out.append(entry)
            return out

    def _controller_ctx(self, actor):
        return Context(actor=actor)

    # --- reads ------------------------------------------------------------------------------

    def crd_names(self):
        """Names of the CustomResourceDefinitions stored and not being deleted."""
        crd_type = resources.find("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        with self.lock:
            return set(o["metadata"]["name"] for o in self._objects(crd_type)
                       if not o["metadata"].get("deletionTimestamp"))

    def get(self, rtype, namespace, name):
        with self.lock:
            obj = self._get(rtype, namespace, name)
            if obj is None:
                raise not_found(rtype, name)
            return self._external(rtype, obj)

    def list(self, rtype, namespace=None, label_selector="", field_selector="", limit=None, cont=None):
        labels = parse_label_selector(label_selector)
        fields = parse_field_selector(field_selector, rtype)
        with self.lock:
            items = []
            for obj in self._objects(rtype, namespace if rtype.namespaced else None):
                ext = self._external(rtype, obj)
                if not labels.matches(ext["metadata"].get("labels")):
                    continue
                if fields and not field_matches(ext, fields):
                    continue
                items.append(ext)
            start = 0
            if cont:
                try:
                    token = json.loads(bytes.fromhex(cont).decode("utf-8"))
                    start = int(token["start"])
                except (ValueError, KeyError, TypeError):
                    raise ApiError(400, "continue key is not valid: %s" % cont, reason="BadRequest")
            list_meta = {"resourceVersion": str(self.rv)}
            if limit:
                page = items[start:start + limit]
                if start + limit < len(items):
                    list_meta["continue"] = json.dumps({"start": start + limit}).encode("utf-8").hex()
                    list_meta["remainingItemCount"] = len(items) - start - limit
            else:
                page = items[start:]
            for item in page:
                item.pop("apiVersion", None)
                item.pop("kind", None)
            return {"kind": rtype.kind + "List", "apiVersion": rtype.api_version, "metadata": list_meta,
                    "items": page}

    def dump(self):
        with self.lock:
            out = {"resourceVersion": str(self.rv), "objects": {}}
            for key in sorted(self.data):
                rtype = resources.by_key(key)
                out["objects"][key] = [self._external(rtype, o) for o in self._objects(rtype)]
            return out

    # --- validation / defaults --------------------------------------------------------------

    def _validate_name(self, rtype, name):
        if rtype.plural == "namespaces":
            ok = len(name) <= 63 and DNS1123_LABEL.match(name)
            msg = _LABEL_MSG
        else:
            ok = len(name) <= 253 and DNS1123_SUBDOMAIN.match(name)
            msg = _SUBDOMAIN_MSG
        if not ok:
            raise invalid(rtype, rtype.kind, name, [("metadata.name", 'Invalid value: "%s": %s' % (name, msg))])

    def _validate(self, rtype, obj):
        name = obj["metadata"]["name"]
        spec = obj.get("spec") or {}
        causes = []
        for idx, ref in enumerate(obj["metadata"].get("ownerReferences") or []):
            for field in ("apiVersion", "kind", "name", "uid"):
                if not ref.get(field):
                    causes.append(("metadata.ownerReferences[%d].%s" % (idx, field),
                                   'Invalid value: "": %s must not be empty' % field))
        if rtype.plural == "pods":
            containers = spec.get("containers") or []
            if not containers:
                causes.append(("spec.containers", "Required value"))
            for idx, ctr in enumerate(containers):
                if not ctr.get("name"):
                    causes.append(("spec.containers[%d].name" % idx, "Required value"))
                if not ctr.get("image"):
                    causes.append(("spec.containers[%d].image" % idx, "Required value"))
        elif rtype.plural in ("daemonsets", "deployments", "replicasets", "statefulsets"):
            selector = spec.get("selector")
            tmpl_labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
            if not selector:
                causes.append(("spec.selector", "Required value"))
            else:
                from .selectors import from_label_selector_object
                try:
                    sel = from_label_selector_object(selector)
                except ValueError as exc:
                    causes.append(("spec.selector", "Invalid value: %s" % exc))
                    sel = None
                if sel is not None and (sel.empty or not sel.matches(tmpl_labels)):
                    causes.append(("spec.template.metadata.labels",
                                   'Invalid value: %s: `selector` does not match template `labels`'
                                   % json.dumps(tmpl_labels, sort_keys=True)))
            if not ((spec.get("template") or {}).get("spec") or {}).get("containers"):
                causes.append(("spec.template.spec.containers", "Required value"))
        elif rtype.plural == "customresourcedefinitions":
            names = spec.get("names") or {}
            if not names.get("plural"):
                causes.append(("spec.names.plural", "Required value"))
            if not names.get("kind"):
                causes.append(("spec.names.kind", "Required value"))
            if not spec.get("group"):
                causes.append(("spec.group", "Required value"))
            if spec.get("scope") not in ("Cluster", "Namespaced"):
                causes.append(("spec.scope", 'Unsupported value: "%s": supported values: "Cluster", "Namespaced"'
                               % (spec.get("scope") or "")))
            if names.get("plural") and spec.get("group") and name != "%s.%s" % (names["plural"], spec["group"]):
                causes.append(("metadata.name", 'Invalid value: "%s": must be spec.names.plural+"."+spec.group'
                               % name))
        elif rtype.plural == "poddisruptionbudgets":
            if spec.get("minAvailable") is not None and spec.get("maxUnavailable") is not None:
                causes.append(("spec", "Invalid value: minAvailable and maxUnavailable cannot be both set"))
            for field in ("minAvailable", "maxUnavailable"):
                value = spec.get(field)
                if isinstance(value, str):
                    text = value.strip()
                    if not text.endswith("%") or not text[:-1].isdigit():
                        causes.append(("spec.%s" % field, 'Invalid value: "%s": a valid percent string must '
                                       'be a numeric string followed by an ending \'%%\'' % value))
                    elif int(text[:-1]) > 100:
                        causes.append(("spec.%s" % field, 'Invalid value: "%s": must not be greater than 100%%'
                                       % value))
                elif isinstance(value, int) and value < 0:
                    causes.append(("spec.%s" % field, "Invalid value: %d: must be greater than or equal to 0"
                                   % value))
            policy = spec.get("unhealthyPodEvictionPolicy")
            if policy not in (None, "IfHealthyBudget", "AlwaysAllow"):
                causes.append(("spec.unhealthyPodEvictionPolicy", 'Unsupported value: "%s": supported values: '
                               '"AlwaysAllow", "IfHealthyBudget"' % policy))
        if rtype is EVENTS_V1:
            for internal, external in (("eventTime", "eventTime"), ("reportingComponent", "reportingController"),
                                       ("reportingInstance", "reportingInstance"), ("action", "action"),
                                       ("reason", "reason")):
                if not obj.get(internal):
                    causes.append((external, "Required value"))
        if causes:
            raise invalid(rtype, rtype.kind, name, causes)

    def _defaults(self, rtype, obj):
        spec = obj.get("spec")
        if rtype.plural == "pods":
            self._pod_spec_defaults(obj.setdefault("spec", {}))
        elif rtype.plural in ("daemonsets", "deployments", "replicasets", "statefulsets"):
            tmpl = spec.setdefault("template", {})
            self._pod_spec_defaults(tmpl.setdefault("spec", {}))
            spec.setdefault("revisionHistoryLimit", 10)
            if rtype.plural == "daemonsets":
                strategy = spec.setdefault("updateStrategy", {"type": "RollingUpdate"})
                if strategy.get("type", "RollingUpdate") == "RollingUpdate":
                    strategy["type"] = "RollingUpdate"
                    ru = strategy.setdefault("rollingUpdate", {})
                    ru.setdefault("maxUnavailable", 1)
                    ru.setdefault("maxSurge", 0)
            else:
                spec.setdefault("replicas", 1)
        elif rtype.plural == "namespaces":
            obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
            meta(obj).setdefault("labels", {})["kubernetes.io/metadata.name"] = obj["metadata"]["name"]
            obj.setdefault("status", {})["phase"] = "Active"
        elif rtype.plural == "nodes":
            obj.setdefault("spec", {})
        elif rtype.plural == "customresourcedefinitions":
            status = obj.setdefault("status", {})
            if not status.get("conditions"):
                status["conditions"] = [
                    {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
                     "message": "no conflicts found", "lastTransitionTime": iso()},
                    {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
                     "message": "the initial names have been accepted", "lastTransitionTime": iso()}]
            status.setdefault("acceptedNames", dict((spec or {}).get("names") or {}))
            status.setdefault("storedVersions", [v.get("name") for v in (spec or {}).get("versions") or []
                                                 if isinstance(v, dict) and v.get("storage")])
        elif rtype.plural == "events" and rtype.group == "":
            obj.setdefault("involvedObject", {})
            obj.setdefault("reportingComponent", "")
            obj.setdefault("reportingInstance", "")

    @staticmethod
    def _pod_spec_defaults(spec):
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("terminationGracePeriodSeconds", 30)
        spec.setdefault("dnsPolicy", "ClusterFirst")
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("securityContext", {})
        for ctr in spec.get("containers") or []:
            ctr.setdefault("terminationMessagePath", "/dev/termination-log")
            ctr.setdefault("terminationMessagePolicy", "File")
            ctr.setdefault("imagePullPolicy", "Always" if str(ctr.get("image", "")).endswith(":latest")
                           or ":" not in str(ctr.get("image", "")).rsplit("/", 1)[-1] else "IfNotPresent")
            ctr.setdefault("resources", {})

    # --- create -----------------------------------------------------------------------------

    def _check_namespace(self, rtype, namespace, name):
        if not rtype.namespaced:
            return
        ns = self._get(resources.find("", "v1", "namespaces"), None, namespace)
        if ns is None:
            raise not_found(resources.find("", "v1", "namespaces"), namespace)
        if ns["metadata"].get("deletionTimestamp"):
            raise ApiError(403, '%s "%s" is forbidden: unable to create new content in namespace %s because '
                           'it is being terminated' % (rtype.plural if not rtype.group else
                                                       "%s.%s" % (rtype.plural, rtype.group), name, namespace),
                           reason="Forbidden", details={"name": name, "kind": rtype.plural})

    def _create_internal(self, rtype, body, namespace, actor="api", keep_status=False, dry_run=False):
        if not isinstance(body, dict):
            raise bad_request("the body of the request was in an unknown format")
        obj = self._internal(rtype, body)
        md = meta(obj)
        if rtype.namespaced:
            body_ns = md.get("namespace")
            if namespace and body_ns and body_ns != namespace:
                raise bad_request("the namespace of the provided object does not match the namespace sent on "
                                  "the request")
            namespace = namespace or body_ns or "default"
            md["namespace"] = namespace
        else:
            md.pop("namespace", None)
        if not md.get("name"):
            if md.get("generateName"):
                for dummy in range(10):
                    candidate = md["generateName"] + random_suffix()
                    if self._get(rtype, namespace, candidate) is None:
                        break
                md["name"] = candidate
            else:
                raise invalid(rtype, rtype.kind, "", [("metadata.name",
                                                       "Required value: name or generateName is required")])
        name = md["name"]
        self._validate_name(rtype, name)
        if self._get(rtype, namespace, name) is not None:
            raise already_exists(rtype, name)
        if actor != "bootstrap":
            self._check_namespace(rtype, namespace, name)
        for field in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink",
                      "managedFields"):
            md.pop(field, None)
        md["uid"] = str(uuid.uuid4()) if not (keep_status and md.get("uid")) else md["uid"]
        if not (keep_status and md.get("creationTimestamp")):
            md["creationTimestamp"] = iso()
        if rtype.generation:
            md["generation"] = 1
        self._defaults(rtype, obj)
        self._validate(rtype, obj)
        fresh_pod = False
        if rtype.plural == "pods":
            if not keep_status or not obj.get("status"):
                obj["status"] = {"phase": "Pending", "qosClass": self._qos_class(obj)}
                fresh_pod = True
        elif rtype.has_status and not keep_status and rtype.plural != "namespaces":
            obj["status"] = {}
        if rtype.plural == "nodes":
            self._sync_node_taints(obj)
        if rtype.plural == "events" and rtype.group == "" and not obj.get("firstTimestamp") \
                and not obj.get("eventTime"):
            obj["firstTimestamp"] = obj["lastTimestamp"] = iso()
        if fresh_pod:
            self._phantom_kubelet_start(obj)
        if dry_run:
            obj["metadata"]["resourceVersion"] = ""
            return obj
        self._write(rtype, obj, "ADDED")
        if actor not in ("api", "bootstrap", "seed"):
            self.record(self._controller_ctx(actor), "create", rtype, namespace, name, 201, obj, changed=True)
        return obj

    @staticmethod
    def _qos_class(pod):
        ctrs = (pod.get("spec") or {}).get("containers") or []
        reqs = [((c.get("resources") or {}).get("requests") or {}) for c in ctrs]
        lims = [((c.get("resources") or {}).get("limits") or {}) for c in ctrs]
        if not any(reqs) and not any(lims):
            return "BestEffort"
        guaranteed = all(l.get("cpu") and l.get("memory") and
                         (not r.get("cpu") or r.get("cpu") == l.get("cpu")) and
                         (not r.get("memory") or r.get("memory") == l.get("memory"))
                         for r, l in zip(reqs, lims))
        return "Guaranteed" if guaranteed else "Burstable"

    def create(self, ctx, rtype, namespace, body):
        with self.lock:
            obj = self._create_internal(rtype, body, namespace, dry_run=ctx.dry_run)
            out = self._external(rtype, obj)
            if not ctx.dry_run:
                self._reconcile()
                self._persist()
            md = out["metadata"]
            self.record(ctx, "create", rtype, md.get("namespace"), md["name"], 201, obj, changed=not ctx.dry_run)
            return out

    def load_objects(self, docs, actor="seed", replace=False):
        """Create (or with ``replace`` overwrite) objects from manifests, keeping given status."""
        created = []
        with self.lock:
            for doc in docs:
                if not doc:
                    continue
                if doc.get("kind", "").endswith("List") and "items" in doc:
                    created += self.load_objects(doc["items"], actor=actor, replace=replace)
                    continue
                rtype = resources.by_kind(doc.get("apiVersion", ""), doc.get("kind", ""))
                if rtype is None:
                    raise ValueError("unsupported object %s/%s" % (doc.get("apiVersion"), doc.get("kind")))
                if not resources.served(rtype, self.crd_names()):
                    # kubectl's message for a kind whose CRD is not installed
                    raise ValueError('no matches for kind "%s" in version "%s" (create the CustomResourceDefinition '
                                     '%s first)' % (rtype.kind, rtype.api_version, rtype.crd))
                md = doc.get("metadata") or {}
                namespace = md.get("namespace") or ("default" if rtype.namespaced else None)
                if rtype.namespaced:
                    nstype = resources.find("", "v1", "namespaces")
                    if self._get(nstype, None, namespace) is None:
                        self._create_internal(nstype, {"metadata": {"name": namespace}}, None, actor=actor)
                existing = self._get(rtype, namespace, md.get("name", "")) if md.get("name") else None
                if existing is not None:
                    if not replace:
                        continue
                    self._remove(rtype, existing)
                obj = self._create_internal(rtype, doc, namespace, actor=actor, keep_status=True)
                self.record(Context(actor=actor), "create", rtype, namespace, obj["metadata"]["name"], 201, obj,
                            changed=True)
                created.append(self._external(rtype, obj))
                self._reconcile()
            self._persist()
        return created

    # --- update / patch ---------------------------------------------------------------------

    def _prepare_update(self, rtype, old, new, subresource):
        if not isinstance(new, dict):
            raise bad_request("the body of the request was in an unknown format")
        new = self._internal(rtype, new)
        nmd = meta(new)
        omd = old["metadata"]
        if nmd.get("name") and nmd["name"] != omd["name"]:
            raise bad_request("the name of the object (%s) does not match the name on the URL (%s)"
                              % (nmd["name"], omd["name"]))
        if rtype.namespaced and nmd.get("namespace") and nmd["namespace"] != omd.get("namespace"):
            raise bad_request("the namespace of the provided object does not match the namespace sent on the "
                              "request")
        want_rv = nmd.get("resourceVersion")
        if want_rv and want_rv != omd.get("resourceVersion"):
            raise conflict(rtype, omd["name"], "the object has been modified; please apply your changes to the "
                           "latest version and try again")
        if nmd.get("uid") and nmd["uid"] != omd.get("uid"):
            raise conflict(rtype, omd["name"], "Precondition failed: UID in precondition: %s, UID in object meta: %s"
                           % (nmd["uid"], omd.get("uid")))
        if subresource == "status":
            result = copy.deepcopy(old)
            result["status"] = new.get("status", {})
        else:
            result = new
            if rtype.has_status:
                if "status" in old:
                    result["status"] = copy.deepcopy(old["status"])
                else:
                    result.pop("status", None)
            rmd = meta(result)
            for field in ("name", "namespace", "uid", "creationTimestamp", "deletionTimestamp",
                          "deletionGracePeriodSeconds", "generation"):
                if field in omd:
                    rmd[field] = omd[field]
                else:
                    rmd.pop(field, None)
            for field in ("selfLink", "managedFields"):
                rmd.pop(field, None)
            if rtype.plural == "pods":
                self._pod_spec_defaults(result.setdefault("spec", {}))
                self._check_pod_update(old, result)
            else:
                self._defaults(rtype, result)
            self._validate(rtype, result)
            if rtype.generation and (old.get("spec") != result.get("spec")):
                rmd["generation"] = int(omd.get("generation", 1)) + 1
        if rtype.plural == "nodes":
            self._sync_node_taints(result)
        result["metadata"]["resourceVersion"] = omd.get("resourceVersion")
        return result

    def _check_pod_update(self, old, new):
        def masked(spec):
            spec = copy.deepcopy(spec or {})
            for field in ("containers", "initContainers"):
                for ctr in spec.get(field) or []:
                    ctr.pop("image", None)
            spec.pop("activeDeadlineSeconds", None)
            spec.pop("tolerations", None)
            return spec
        if masked(old.get("spec")) != masked(new.get("spec")):
            name = old["metadata"]["name"]
            raise invalid(resources.find("", "v1", "pods"), "Pod", name, [("spec", "Forbidden: " + _POD_UPDATE_MSG)])

    def _commit_update(self, ctx, rtype, old, result, subresource, verb):
        changed = result != old
        if changed and not ctx.dry_run:
            self._write(rtype, result, "MODIFIED", old=old)
            if not (result["metadata"].get("finalizers")) and result["metadata"].get("deletionTimestamp") \
                    and rtype.plural != "pods":
                self._remove(rtype, result)
            self._reconcile()
            self._persist()
        md = result["metadata"]
        self.record(ctx, verb, rtype, md.get("namespace"), md["name"], 200, result, subresource=subresource,
                    changed=changed and not ctx.dry_run)
        return self._external(rtype, result)

    def update(self, ctx, rtype, namespace, name, body, subresource=None):
        with self.lock:
            old = self._get(rtype, namespace, name)
            if old is None:
                raise not_found(rtype, name)
            result = self._prepare_update(rtype, old, body, subresource)
            return self._commit_update(ctx, rtype, old, result, subresource, "update")

    def patch(self, ctx, rtype, namespace, name, patch_type, body, subresource=None):
        with self.lock:
            old = self._get(rtype, namespace, name)
            if old is None:
                raise not_found(rtype, name)
            current = self._external(rtype, old)
            patched = apply_patch(current, patch_type, body, rtype.kind)
            if not isinstance(patched, dict):
                raise bad_request("the patched object is not a JSON object")
            pmd = patched.get("metadata") or {}
            # a resourceVersion in the patch is a precondition; the copied one from `current` is not
            if pmd.get("resourceVersion") == old["metadata"].get("resourceVersion"):
                pmd.pop("resourceVersion", None)
            result = self._prepare_update(rtype, old, patched, subresource)
            return self._commit_update(ctx, rtype, old, result, subresource, "patch")

    # --- delete -----------------------------------------------------------------------------

    @staticmethod
    def _grace(options):
        value = options.get("gracePeriodSeconds")
        if value is None:
            return None
        try:
            return int(value)
        except (TypeError, ValueError):
            raise bad_request("invalid gracePeriodSeconds %r" % (value,))

    def _check_preconditions(self, rtype, obj, options):
        pre = options.get("preconditions") or {}
        md = obj["metadata"]
        if pre.get("uid") and pre["uid"] != md.get("uid"):
            raise conflict(rtype, md["name"], "Precondition failed: UID in precondition: %s, UID in object meta: %s"
                           % (pre["uid"], md.get("uid")))
        if pre.get("resourceVersion") and pre["resourceVersion"] != md.get("resourceVersion"):
            raise conflict(rtype, md["name"], "Precondition failed: ResourceVersion in precondition: %s, "
                           "ResourceVersion in object meta: %s" % (pre["resourceVersion"], md.get("resourceVersion")))

    def _delete_internal(self, rtype, obj, options, dry_run=False, actor="api"):
        """Returns (object as answered, removed?)."""
        grace = self._grace(options)
        md = obj["metadata"]
        if options.get("propagationPolicy") == "Orphan" or options.get("orphanDependents") is True:
            self._orphan_dependents(md.get("uid"), dry_run)
        if rtype.plural == "pods":
            spec = obj.get("spec") or {}
            phase = (obj.get("status") or {}).get("phase")
            if grace is None:
                grace = int(spec.get("terminationGracePeriodSeconds", 30))
            if not spec.get("nodeName") or phase in ("Succeeded", "Failed"):
                grace = 0
            elif not self._node_managed(spec["nodeName"]):
                grace = 0  # no kubelet claims the node: nobody would ever confirm (see docs)
            if grace > 0:
                new = copy.deepcopy(obj)
                deadline = time.time() + grace
                current = parse_time(md.get("deletionTimestamp"))
                if current is not None and current <= deadline:
                    return obj, False
                new["metadata"]["deletionTimestamp"] = iso(deadline)
                new["metadata"]["deletionGracePeriodSeconds"] = grace
                if dry_run:
                    return new, False
                self._write(rtype, new, "MODIFIED", old=obj)
                return new, False
        if md.get("finalizers"):
            if md.get("deletionTimestamp"):
                return obj, False
            new = copy.deepcopy(obj)
            new["metadata"]["deletionTimestamp"] = iso()
            new["metadata"]["deletionGracePeriodSeconds"] = 0
            if rtype.plural == "namespaces":
                new.setdefault("status", {})["phase"] = "Terminating"
            if not dry_run:
                self._write(rtype, new, "MODIFIED", old=obj)
            return new, False
        if rtype.plural == "namespaces":
            new = copy.deepcopy(obj)
            if not md.get("deletionTimestamp"):
                new["metadata"]["deletionTimestamp"] = iso()
                new["metadata"]["deletionGracePeriodSeconds"] = 0
                new.setdefault("status", {})["phase"] = "Terminating"
                if not dry_run:
                    self._write(rtype, new, "MODIFIED", old=obj)
            return new, False
        if dry_run:
            return obj, True
        final = self._remove(rtype, obj)
        if rtype.plural == "nodes":
            self._pods_gc_for_node(md["name"])
        if rtype.plural == "customresourcedefinitions":
            custom = resources.crd_resource(obj)
            if custom is not None:  # kube-apiserver removes a CRD's objects with it
                for cr in list(self._objects(custom)):
                    self._remove(custom, cr)
        return final, True

    def delete(self, ctx, rtype, namespace, name, options):
        with self.lock:
            obj = self._get(rtype, namespace, name)
            if obj is None:
                raise not_found(rtype, name)
            self._check_preconditions(rtype, obj, options)
            result, removed = self._delete_internal(rtype, obj, options, dry_run=ctx.dry_run)
            if not ctx.dry_run:
                self._reconcile()
                self._persist()
            self.record(ctx, "delete", rtype, namespace, name, 200, result,
                        changed=not ctx.dry_run and (removed or result is not obj))
            return self._external(rtype, result)

    # --- eviction (k8s.io/kubernetes/pkg/registry/core/pod/storage/eviction.go) --------------

    def evict(self, ctx, namespace, name, body):
        pods = resources.find("", "v1", "pods")
        pdbs = resources.find("policy", "v1", "poddisruptionbudgets")
        with self.lock:
            try:
                if not isinstance(body, dict):
                    raise bad_request("the body of the request was in an unknown format")
                if body.get("kind") not in (None, "Eviction"):
                    raise bad_request("the body of the request was in an unknown format")
                body_name = (body.get("metadata") or {}).get("name")
                if body_name and body_name != name:
                    raise bad_request("name in URL does not match name in Eviction object")
                pod = self._get(pods, namespace, name)
                if pod is None:
                    raise not_found(pods, name)
                options = body.get("deleteOptions") or {}
                self._check_preconditions(pods, pod, options)
                phase = (pod.get("status") or {}).get("phase")
                if phase in ("Succeeded", "Failed", "Pending") or pod["metadata"].get("deletionTimestamp"):
                    self._evict_delete(ctx, pods, pod, options)
                    return self._evicted(ctx, namespace, name, pod)
                matching = []
                for pdb in self._objects(pdbs, namespace):
                    try:
                        sel = self._pdb_selector(pdb)
                    except ValueError:
                        continue
                    if sel.empty or sel.nothing or not sel.matches(pod["metadata"].get("labels")):
                        continue
                    matching.append(pdb)
                if len(matching) > 1:
                    raise ApiError(500, "This pod has more than one PodDisruptionBudget, which the eviction "
                                   "subresource does not support.", reason="InternalError")
                if matching:
                    pdb = matching[0]
                    status = pdb.get("status") or {}
                    spec = pdb.get("spec") or {}
                    if not pod_ready(pod) and (
                            spec.get("unhealthyPodEvictionPolicy") == "AlwaysAllow" or
                            (status.get("currentHealthy", 0) >= status.get("desiredHealthy", 0) and
                             status.get("desiredHealthy", 0) > 0)):
                        self._evict_delete(ctx, pods, pod, options)
                        return self._evicted(ctx, namespace, name, pod)
                    self._check_and_decrement(ctx, pdbs, pdb, name)
                self._evict_delete(ctx, pods, pod, options)
                return self._evicted(ctx, namespace, name, pod)
            except ApiError as err:
                self.record(ctx, "evict", pods, namespace, name, err.code, self._get(pods, namespace, name),
                            subresource="eviction", changed=False, error=err)
                raise

    def _check_and_decrement(self, ctx, pdbs, pdb, pod_name):
        status = pdb.get("status") or {}
        name = pdb["metadata"]["name"]
        if int(status.get("observedGeneration", 0)) < int(pdb["metadata"].get("generation", 1)):
            raise ApiError(429, "Cannot evict pod as it would violate the pod's disruption budget.",
                           reason="TooManyRequests", retry_after=10,
                           details={"causes": [{"reason": "DisruptionBudget",
                                                "message": "The disruption budget %s is still being processed "
                                                           "by the server." % name}]})
        allowed = int(status.get("disruptionsAllowed", 0))
        if allowed < 0:
            raise ApiError(403, 'poddisruptionbudgets.policy "%s" is forbidden: pdb disruptions allowed is '
                           'negative' % name, reason="Forbidden")
        if allowed == 0:
            raise ApiError(429, "Cannot evict pod as it would violate the pod's disruption budget.",
                           reason="TooManyRequests",
                           details={"causes": [{"reason": "DisruptionBudget",
                                                "message": "The disruption budget %s needs %d healthy pods and "
                                                           "has %d currently" % (name, status.get("desiredHealthy", 0),
                                                                                 status.get("currentHealthy", 0))}]})
        if ctx.dry_run:
            return
        new = copy.deepcopy(pdb)
        nstatus = new.setdefault("status", {})
        nstatus["disruptionsAllowed"] = allowed - 1
        nstatus.setdefault("disruptedPods", {})[pod_name] = iso()
        if nstatus["disruptionsAllowed"] == 0:
            self._set_pdb_condition(new, False, "InsufficientPods", "")
        self._write(pdbs, new, "MODIFIED", old=pdb)

    def _evict_delete(self, ctx, pods, pod, options):
        if ctx.dry_run:
            return
        new = copy.deepcopy(pod)
        conds = new.setdefault("status", {}).setdefault("conditions", [])
        if not any(c.get("type") == "DisruptionTarget" for c in conds):
            conds.append({"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
                          "message": "Eviction API: evicting", "lastProbeTime": None,
                          "lastTransitionTime": iso()})
            self._write(pods, new, "MODIFIED", old=pod)
        self._delete_internal(pods, new, options)

    def _evicted(self, ctx, namespace, name, pod):
        pods = resources.find("", "v1", "pods")
        if not ctx.dry_run:
            self._reconcile()
            self._persist()
        self.record(ctx, "evict", pods, namespace, name, 201, self._get(pods, namespace, name) or pod,
                    subresource="eviction", changed=not ctx.dry_run)
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    # --- watch ------------------------------------------------------------------------------

    def watch_events(self, rtype, since_rv, namespace, labels, fields):
        """(changes after ``since_rv`` that concern a watcher as [(rv, type, object)], rv scanned up to)."""
        out = []
        with self.lock:
            if self.log and since_rv < self.log[0][0] - 1:
                raise ApiError(410, "too old resource version: %d (%d)" % (since_rv, self.log[0][0] - 1),
                               reason="Expired")
            for rv, key, etype, obj, old in self.log:
                if rv <= since_rv or key != rtype.key:
                    continue
                if rtype.namespaced and namespace and obj["metadata"].get("namespace") != namespace:
                    continue
                now_in = self._matches(rtype, obj, labels, fields)
                was_in = old is not None and self._matches(rtype, old, labels, fields)
                if etype == "MODIFIED":
                    if now_in and not was_in:
                        etype = "ADDED"
                    elif was_in and not now_in:
                        etype = "DELETED"
                    elif not now_in:
                        continue
                elif not now_in:
                    continue
                out.append((rv, etype, self._external(rtype, obj)))
            return out, self.rv

    def _matches(self, rtype, obj, labels, fields):
        ext = self._external(rtype, obj)
        return labels.matches(ext["metadata"].get("labels")) and (not fields or field_matches(ext, fields))
