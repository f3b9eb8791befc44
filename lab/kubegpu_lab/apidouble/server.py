"""HTTP front of the double: Kubernetes API paths, discovery, auth, watch, faults, control paths.

``ApiDoubleServer`` is a threaded HTTP/1.1 server (one thread per connection, keep-alive)
bound to loopback. ``serve(...)`` runs it until ``stop()``; ``stop()`` releases hanging
requests and watches, closes every open connection and the listening socket, and persists
the store.
"""
import collections
import fnmatch
import hmac
import itertools
import json
import socket
import sys
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

from . import resources
from .errors import ApiError, bad_request, method_not_allowed, not_found_path, unauthorized, \
    unsupported_media_type
from .patch import PATCH_TYPES
from .selectors import parse_field_selector, parse_label_selector
from .store import Context
from .util import parse_time

DEFAULT_KUBE_VERSION = "v1.32.4"
MUTATING = ("POST", "PUT", "PATCH", "DELETE")


def _age(item, now=None):
    now = time.time() if now is None else now
    created = parse_time((item.get("metadata") or {}).get("creationTimestamp")) or now
    age = int(max(now - created, 0))
    if age < 120:
        return "%ds" % age
    if age < 7200:
        return "%dm" % (age // 60)
    if age < 172800:
        return "%dh" % (age // 3600)
    return "%dd" % (age // 86400)


def _node_cells(node):
    ready = "Unknown"
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            ready = "Ready" if cond.get("status") == "True" else "NotReady"
    status = ready + (",SchedulingDisabled" if (node.get("spec") or {}).get("unschedulable") else "")
    labels = node["metadata"].get("labels") or {}
    roles = sorted(k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/")) or ["<none>"]
    info = (node.get("status") or {}).get("nodeInfo") or {}
    return [node["metadata"]["name"], status, ",".join(roles), _age(node), info.get("kubeletVersion", ""),
            info.get("bootID", "<none>") or "<none>"]


def _pod_cells(pod):
    status = pod.get("status") or {}
    ctrs = (pod.get("spec") or {}).get("containers") or []
    statuses = status.get("containerStatuses") or []
    ready = len([c for c in statuses if c.get("ready")])
    restarts = sum(int(c.get("restartCount", 0)) for c in statuses)
    phase = "Terminating" if pod["metadata"].get("deletionTimestamp") else status.get("phase", "Pending")
    return [pod["metadata"]["name"], "%d/%d" % (ready, len(ctrs)), phase, str(restarts), _age(pod),
            status.get("podIP", "<none>") or "<none>", (pod.get("spec") or {}).get("nodeName") or "<none>"]


def _ds_cells(ds):
    st = ds.get("status") or {}
    tmpl_spec = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
    sel = ",".join("%s=%s" % kv for kv in sorted((tmpl_spec.get("nodeSelector") or {}).items()))
    return [ds["metadata"]["name"], str(st.get("desiredNumberScheduled", 0)),
            str(st.get("currentNumberScheduled", 0)), str(st.get("numberReady", 0)),
            str(st.get("updatedNumberScheduled", 0)), str(st.get("numberAvailable", 0)), sel or "<none>", _age(ds)]


def _pdb_cells(pdb):
    spec = pdb.get("spec") or {}
    st = pdb.get("status") or {}
    return [pdb["metadata"]["name"], str(spec.get("minAvailable", "N/A")), str(spec.get("maxUnavailable", "N/A")),
            str(st.get("disruptionsAllowed", 0)), _age(pdb)]


def table_printer(rtype):
    """(columns as (name, priority), function item -> cells) for a resource type."""
    if rtype.plural == "nodes":
        return ([("Name", 0), ("Status", 0), ("Roles", 0), ("Age", 0), ("Version", 0), ("Boot-ID", 1)],
                _node_cells)
    if rtype.plural == "pods":
        return ([("Name", 0), ("Ready", 0), ("Status", 0), ("Restarts", 0), ("Age", 0), ("IP", 1), ("Node", 1)],
                _pod_cells)
    if rtype.plural == "daemonsets":
        return ([("Name", 0), ("Desired", 0), ("Current", 0), ("Ready", 0), ("Up-to-date", 0),
                 ("Available", 0), ("Node Selector", 0), ("Age", 0)], _ds_cells)
    if rtype.plural == "poddisruptionbudgets":
        return ([("Name", 0), ("Min Available", 0), ("Max Unavailable", 0), ("Allowed Disruptions", 0),
                 ("Age", 0)], _pdb_cells)
    return [("Name", 0), ("Age", 0)], lambda item: [item["metadata"]["name"], _age(item)]


def version_doc(git_version):
    parts = git_version.lstrip("v").split(".")
    return {"major": parts[0], "minor": parts[1] if len(parts) > 1 else "0", "gitVersion": git_version,
            "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
            "buildDate": "2025-01-01T00:00:00Z", "goVersion": "go1.23.6", "compiler": "gc",
            "platform": "linux/amd64"}


class FaultRule(object):
    FIELDS = ("methods", "verbs", "resource", "subresource", "namespace", "name", "path", "user_agent")
    ACTIONS = ("error", "hang", "delay", "drop")

    def __init__(self, rule_id, spec):
        if not isinstance(spec, dict):
            raise bad_request("a fault rule is a JSON object")
        unknown = set(spec) - set(self.FIELDS) - {"action", "code", "reason", "message", "retry_after",
                                                  "causes", "seconds", "count", "id"}
        if unknown:
            raise bad_request("unknown fault rule fields: %s" % ", ".join(sorted(unknown)))
        self.id = str(spec.get("id") or rule_id)
        self.spec = dict(spec)
        self.spec["id"] = self.id
        self.action = spec.get("action", "error")
        if self.action not in self.ACTIONS:
            raise bad_request("fault action must be one of %s, not %r" % (", ".join(self.ACTIONS), self.action))
        self.code = int(spec.get("code", 503))
        self.count = spec.get("count")
        self.hits = 0
        self.released = threading.Event()

    def matches(self, req):
        s = self.spec
        if s.get("methods") and req["method"] not in [m.upper() for m in s["methods"]]:
            return False
        if s.get("verbs") and req["verb"] not in s["verbs"]:
            return False
        if s.get("resource") and req["resource"] not in (s["resource"],) and \
                req["resource_key"] != s["resource"]:
            return False
        if s.get("subresource") is not None and (req["subresource"] or "") != s["subresource"]:
            return False
        if s.get("namespace") and req["namespace"] != s["namespace"]:
            return False
        if s.get("name") and not fnmatch.fnmatchcase(req["name"] or "", s["name"]):
            return False
        if s.get("path") and not fnmatch.fnmatchcase(req["path"], s["path"]):
            return False
        if s.get("user_agent") and not fnmatch.fnmatchcase(req["user_agent"] or "", s["user_agent"]):
            return False
        return True

    def describe(self):
        out = dict(self.spec)
        out["hits"] = self.hits
        return out

    def error(self, req):
        code = self.code
        message = self.spec.get("message")
        details = {}
        if self.spec.get("causes"):
            details["causes"] = self.spec["causes"]
        if code == 429 and req["subresource"] == "eviction" and not message:
            message = "Cannot evict pod as it would violate the pod's disruption budget."
            details.setdefault("causes", [{"reason": "DisruptionBudget",
                                           "message": "The disruption budget %s needs 1 healthy pods and has 0 "
                                                      "currently" % (self.spec.get("id"))}])
        if not message:
            message = {503: "the server is currently unable to handle the request",
                       500: "an error on the server (\"\") has prevented the request from succeeding",
                       504: "the server was unable to return a response in the time allotted",
                       429: "the server has received too many requests and has asked us to try again later",
                       }.get(code, "injected fault %s" % self.id)
        return ApiError(code, message, reason=self.spec.get("reason"), details=details or None,
                        retry_after=self.spec.get("retry_after"))


class ApiDoubleServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address, store, token, kube_version=DEFAULT_KUBE_VERSION, ssl_context=None,
                 access_log=None):
        self.store = store
        self.token = token
        self.kube_version = kube_version
        self.ssl_context = ssl_context
        self.access_log = access_log
        self.faults = []
        self.fault_ids = itertools.count(1)
        self.faults_lock = threading.Lock()
        self.stopping = threading.Event()
        self.connections = set()
        self.conn_lock = threading.Lock()
        self.on_shutdown_request = None
        # reads served (get/list), for tests that must act only after a client has seen a state:
        # GET /_double/reads?wait=S blocks on this condition instead of the test sleeping
        self.reads = collections.deque(maxlen=20000)
        self.reads_seq = 0
        self.reads_cond = threading.Condition()
        ThreadingHTTPServer.__init__(self, address, Handler)
        if ssl_context is not None:
            self.socket = ssl_context.wrap_socket(self.socket, server_side=True, do_handshake_on_connect=False)

    @property
    def port(self):
        return self.server_address[1]

    @property
    def url(self):
        scheme = "https" if self.ssl_context is not None else "http"
        return "%s://127.0.0.1:%d" % (scheme, self.port)

    def process_request(self, request, client_address):
        with self.conn_lock:
            self.connections.add(request)
        ThreadingHTTPServer.process_request(self, request, client_address)

    def shutdown_request(self, request):
        with self.conn_lock:
            self.connections.discard(request)
        ThreadingHTTPServer.shutdown_request(self, request)

    def handle_error(self, request, client_address):
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, socket.timeout, OSError)) or self.stopping.is_set():
            return
        ThreadingHTTPServer.handle_error(self, request, client_address)

    def add_fault(self, spec):
        with self.faults_lock:
            rule = FaultRule("f%d" % next(self.fault_ids), spec)
            self.faults = [f for f in self.faults if f.id != rule.id] + [rule]
            return rule

    def remove_faults(self, rule_id=None):
        with self.faults_lock:
            keep, gone = [], []
            for rule in self.faults:
                (gone if rule_id is None or rule.id == rule_id else keep).append(rule)
            self.faults = keep
        for rule in gone:
            rule.released.set()
        return gone

    def record_read(self, req, obj):
        """Note one get/list answered with ``obj`` (its resourceVersion is what the client saw)."""
        with self.reads_cond:
            self.reads_seq += 1
            self.reads.append({
                "seq": self.reads_seq, "ts": time.time(), "verb": req["verb"], "resource": req["resource_key"],
                "namespace": req["namespace"], "name": req["name"], "user_agent": req["user_agent"],
                "resourceVersion": ((obj or {}).get("metadata") or {}).get("resourceVersion"),
            })
            self.reads_cond.notify_all()

    def reads_since(self, since=0, resource=None, name=None, verb=None, user_agent=None, wait=0.0):
        """Read entries with seq > since matching every filter given; with ``wait`` > 0, block up to
        that many seconds (or until the server stops) for the first match."""
        def matching():
            return [e for e in self.reads if e["seq"] > since
                    and (not resource or e["resource"] == resource or e["resource"].split(".")[0] == resource)
                    and (not name or e["name"] == name) and (not verb or e["verb"] == verb)
                    and (not user_agent or fnmatch.fnmatchcase(e["user_agent"] or "", user_agent))]
        deadline = time.time() + max(float(wait), 0.0)
        with self.reads_cond:
            found = matching()
            while not found and not self.stopping.is_set():
                remaining = deadline - time.time()
                if remaining <= 0:
                    break
                self.reads_cond.wait(min(remaining, 0.5))
                found = matching()
            return found, self.reads_seq

    def match_fault(self, req):
        with self.faults_lock:
            for rule in self.faults:
                if rule.matches(req):
                    rule.hits += 1
                    if rule.count is not None and rule.hits >= int(rule.count):
                        self.faults.remove(rule)
                    return rule
        return None

    def stop(self):
        """Stop serving, release every waiting request and close every connection."""
        if self.stopping.is_set():
            return
        self.stopping.set()
        self.remove_faults()
        with self.store.lock:
            self.store.cond.notify_all()
        self.shutdown()
        self.server_close()
        with self.conn_lock:
            conns = list(self.connections)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                conn.close()
            except OSError:
                pass
        self.store.close()


def _truthy(value):
    return value is not None and value.lower() in ("true", "1")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "kubegpu-apidouble"
    sys_version = ""
    timeout = 300

    # --- plumbing ---------------------------------------------------------------------------

    def setup(self):
        if self.server.ssl_context is not None:
            self.request.settimeout(30)
            try:
                self.request.do_handshake()
            except (OSError, ValueError):
                raise ConnectionError("TLS handshake failed")
        BaseHTTPRequestHandler.setup(self)

    def log_message(self, fmt, *args):  # noqa: D401 - silence the default stderr access log
        if self.server.access_log is not None:
            self.server.access_log.write("%s %s\n" % (time.strftime("%Y-%m-%dT%H:%M:%S"), fmt % args))

    def do_GET(self):
        self._dispatch()

    def do_POST(self):
        self._dispatch()

    def do_PUT(self):
        self._dispatch()

    def do_PATCH(self):
        self._dispatch()

    def do_DELETE(self):
        self._dispatch()

    def _read_body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send_json(self, code, body, extra_headers=None):
        data = (json.dumps(body, separators=(",", ":")) + "\n").encode("utf-8")
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (extra_headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _send_error(self, err):
        headers = {}
        if err.retry_after:
            headers["Retry-After"] = str(int(err.retry_after))
        self._send_json(err.code, err.status(), headers)

    def _drop(self):
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    # --- request classification -------------------------------------------------------------

    def _classify(self, path, query):
        """Describe a request: kind (discovery/resource/control/other), resource type and names."""
        req = {"method": self.command, "path": path, "verb": None, "resource": None, "resource_key": None,
               "subresource": None, "namespace": None, "name": None, "rtype": None, "kind": "other",
               "user_agent": self.headers.get("User-Agent", "")}
        parts = [unquote(p) for p in path.strip("/").split("/")] if path.strip("/") else []
        if parts[:1] == ["_double"]:
            req["kind"] = "control"
            return req
        if parts[:1] == ["api"]:
            if len(parts) <= 2:
                req["kind"] = "discovery"
                return req
            if parts[1] != "v1":
                return req
            group, version, rest = "", "v1", parts[2:]
        elif parts[:1] == ["apis"]:
            if len(parts) <= 3:
                req["kind"] = "discovery"
                return req
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return req
        namespace = None
        if len(rest) > 2 and rest[0] == "namespaces":
            inner = resources.find(group, version, rest[2])
            if inner is not None and inner.namespaced:
                namespace = rest[1]
                rest = rest[2:]
        rtype = resources.find(group, version, rest[0])
        if rtype is None or len(rest) > 3 or not resources.served(rtype, self.server.store.crd_names()):
            return req  # a custom resource whose CRD is absent: 404 like any unknown path
        if namespace is None and rtype.namespaced and len(rest) > 1:
            return req  # /api/v1/pods/NAME is not a path
        req.update({"kind": "resource", "rtype": rtype, "resource": rtype.plural, "resource_key": rtype.key,
                    "namespace": namespace, "name": rest[1] if len(rest) > 1 else None,
                    "subresource": rest[2] if len(rest) > 2 else None})
        if req["subresource"] and req["subresource"] not in rtype.subresources:
            req["kind"] = "other"
            return req
        method = self.command
        if req["name"] is None:
            req["verb"] = {"GET": "watch" if _truthy((query.get("watch") or [None])[0]) else "list",
                           "POST": "create"}.get(method, "deletecollection" if method == "DELETE" else method.lower())
        elif req["subresource"] == "eviction":
            req["verb"] = "evict" if method == "POST" else method.lower()
        else:
            req["verb"] = {"GET": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(
                method, method.lower())
        return req

    # --- main dispatch ----------------------------------------------------------------------

    def _dispatch(self):
        split = urlsplit(self.path)
        path = split.path
        query = parse_qs(split.query, keep_blank_values=True)
        req = self._classify(path, query)
        body_bytes = self._read_body() if self.command in MUTATING else b""
        dry_run = bool(query.get("dryRun"))
        ctx = Context(method=self.command, path=self.path, user_agent=req["user_agent"], dry_run=dry_run)
        try:
            if req["kind"] != "control":
                rule = self.server.match_fault(req)
                if rule is not None and self._apply_fault(rule, req, ctx, body_bytes):
                    return
            if not self._authenticated():
                err = unauthorized()
                if self.command in MUTATING and req["rtype"] is not None:
                    self.server.store.record(ctx, req["verb"], req["rtype"], req["namespace"], req["name"], 401,
                                             subresource=req["subresource"], changed=False, error=err)
                raise err
            if req["kind"] == "control":
                return self._control(path, query, body_bytes)
            if req["kind"] == "discovery" or path in ("/version", "/healthz", "/livez", "/readyz") or \
                    path.startswith("/openapi/"):
                return self._nonresource(path)
            if req["kind"] != "resource":
                raise not_found_path()
            return self._resource(req, query, body_bytes, ctx)
        except ApiError as err:
            self._send_error(err)
        except (ConnectionError, BrokenPipeError):
            self.close_connection = True
        except Exception:  # a bug in the double must still answer like an apiserver does
            traceback.print_exc()
            self._send_error(ApiError(500, "Internal error occurred: %s" % sys.exc_info()[1],
                                      reason="InternalError"))

    def _authenticated(self):
        header = self.headers.get("Authorization", "")
        if not header.startswith("Bearer "):
            return False
        return hmac.compare_digest(header[len("Bearer "):].strip().encode("utf-8"),
                                   self.server.token.encode("utf-8"))

    def _apply_fault(self, rule, req, ctx, body_bytes):
        """Act out a fault; True when the request has been answered (or dropped)."""
        action = rule.action
        if action == "delay":
            rule.released.wait(float(rule.spec.get("seconds", 1)))
            return False
        if req["rtype"] is not None and self.command in MUTATING:
            ctx.body = _try_json(body_bytes)
            err = rule.error(req) if action == "error" else ApiError(0, "injected %s" % action, reason=action)
            self.server.store.record(ctx, req["verb"], req["rtype"], req["namespace"], req["name"],
                                     err.code if action == "error" else None, subresource=req["subresource"],
                                     changed=False, error=err)
        if action == "error":
            self._send_error(rule.error(req))
            return True
        if action == "hang":
            seconds = rule.spec.get("seconds")
            deadline = None if seconds is None else time.time() + float(seconds)
            while not self.server.stopping.is_set() and not rule.released.is_set():
                if deadline is not None and time.time() >= deadline:
                    break
                rule.released.wait(0.2)
        self._drop()
        return True

    # --- non-resource paths -----------------------------------------------------------------

    def _nonresource(self, path):
        parts = path.strip("/").split("/")
        crds = self.server.store.crd_names()
        if path == "/version":
            return self._send_json(200, version_doc(self.server.kube_version))
        if path in ("/healthz", "/livez", "/readyz"):
            data = b"ok"
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return None
        if path == "/api":
            return self._send_json(200, resources.api_versions_doc("127.0.0.1:%d" % self.server.port))
        if path == "/api/v1":
            return self._send_json(200, resources.resource_list_doc("", "v1"))
        if path == "/apis":
            return self._send_json(200, resources.api_group_list_doc(crds))
        if path == "/openapi/v3":
            return self._send_json(200, resources.openapi_v3_root(crds))
        if path.startswith("/openapi/v3/"):
            doc = resources.openapi_v3_doc(path[len("/openapi/v3/"):], crds)
            if doc is not None:
                return self._send_json(200, doc)
        if parts[0] == "apis" and len(parts) == 2:
            doc = resources.api_group_doc(parts[1], crds)
            if doc is not None:
                return self._send_json(200, doc)
        if parts[0] == "apis" and len(parts) == 3:
            doc = resources.resource_list_doc(parts[1], parts[2], crds)
            if doc is not None:
                return self._send_json(200, doc)
        raise not_found_path()

    # --- resources --------------------------------------------------------------------------

    def _resource(self, req, query, body_bytes, ctx):
        store = self.server.store
        rtype = req["rtype"]
        verb = req["verb"]
        ns = req["namespace"]
        name = req["name"]
        sub = req["subresource"]

        def q(key, default=None):
            values = query.get(key)
            return values[0] if values else default

        if rtype.namespaced and verb == "create" and ns is None:
            raise method_not_allowed()
        if sub == "eviction" and verb != "evict":
            raise method_not_allowed()
        if verb == "list":
            try:
                limit = int(q("limit") or 0)
            except ValueError:
                raise bad_request("invalid limit %r" % q("limit"))
            table = "as=Table" in (self.headers.get("Accept") or "")
            result = store.list(rtype, ns, q("labelSelector", ""), q("fieldSelector", ""),
                                limit=limit if limit > 0 else None, cont=q("continue"))
            self._send_json(200, self._table(rtype, result) if table else result)
            return self.server.record_read(req, result)
        if verb == "watch":
            return self._watch(rtype, ns, q("labelSelector", ""), q("fieldSelector", ""), q("resourceVersion"),
                               q("timeoutSeconds"), table="as=Table" in (self.headers.get("Accept") or ""))
        if verb == "get":
            obj = store.get(rtype, ns, name)
            if "as=Table" in (self.headers.get("Accept") or ""):
                self._send_json(200, self._table(rtype, {"items": [obj], "metadata": {
                    "resourceVersion": obj["metadata"].get("resourceVersion")}}))
            else:
                self._send_json(200, obj)
            return self.server.record_read(req, obj)
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if verb in ("create", "update", "evict") and body_bytes:
            body = _decode_body(body_bytes, ctype)
        else:
            body = _try_json(body_bytes)
        ctx.body = body
        if verb == "create":
            if body is _INVALID:
                raise bad_request("the body of the request was in an unknown format")
            return self._send_json(201, store.create(ctx, rtype, ns, body))
        if verb == "evict":
            if body is _INVALID:
                raise bad_request("the body of the request was in an unknown format")
            return self._send_json(201, store.evict(ctx, ns, name, body))
        if verb == "update":
            if body is _INVALID:
                raise bad_request("the body of the request was in an unknown format")
            return self._send_json(200, store.update(ctx, rtype, ns, name, body, sub))
        if verb == "patch":
            patch_type = PATCH_TYPES.get(ctype)
            ctx.patch_type = patch_type
            if patch_type is None or patch_type == "apply":
                err = unsupported_media_type(ctype or "none")
                store.record(ctx, verb, rtype, ns, name, 415, subresource=sub, changed=False, error=err)
                raise err
            if body is _INVALID:
                raise bad_request("the body of the request was in an unknown format")
            try:
                return self._send_json(200, store.patch(ctx, rtype, ns, name, patch_type, body, sub))
            except ApiError as err:
                store.record(ctx, verb, rtype, ns, name, err.code, subresource=sub, changed=False, error=err)
                raise
        if verb == "delete":
            options = body if isinstance(body, dict) else {}
            if q("gracePeriodSeconds") is not None:
                options["gracePeriodSeconds"] = q("gracePeriodSeconds")
            if q("propagationPolicy") is not None:
                options["propagationPolicy"] = q("propagationPolicy")
            if sub:
                raise method_not_allowed()
            return self._send_json(200, store.delete(ctx, rtype, ns, name, options))
        raise method_not_allowed()

    def _table(self, rtype, result):
        """A meta.k8s.io/v1 Table like the apiserver's printers give kubectl for plain ``get``."""
        columns, cells = table_printer(rtype)
        rows = []
        for item in result["items"]:
            partial = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                       "metadata": item.get("metadata", {})}
            rows.append({"cells": cells(item), "object": partial})
        defs = [{"name": name, "type": "string", "format": "name" if name == "Name" else "",
                 "description": name, "priority": prio} for name, prio in columns]
        return {"kind": "Table", "apiVersion": "meta.k8s.io/v1",
                "metadata": {"resourceVersion": result["metadata"].get("resourceVersion", "")},
                "columnDefinitions": defs, "rows": rows}

    def _watch(self, rtype, ns, label_text, field_text, rv_param, timeout_param, table=False):
        store = self.server.store
        labels = parse_label_selector(label_text)
        fields = parse_field_selector(field_text, rtype)
        try:
            timeout = float(timeout_param) if timeout_param else 1800.0
        except ValueError:
            raise bad_request("invalid timeoutSeconds %r" % timeout_param)
        deadline = time.time() + timeout
        initial = []
        if rv_param in (None, "", "0"):
            with store.lock:
                listed = store.list(rtype, ns, label_text, field_text)
                since = int(listed["metadata"]["resourceVersion"])
            for item in listed["items"]:
                item["apiVersion"] = rtype.api_version
                item["kind"] = rtype.kind
                initial.append({"type": "ADDED", "object": item})
        else:
            try:
                since = int(rv_param)
            except ValueError:
                raise bad_request("invalid resource version %r" % rv_param)
            try:
                store.watch_events(rtype, since, ns, labels, fields)
            except ApiError as err:
                initial.append({"type": "ERROR", "object": err.status()})
                deadline = 0
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.close_connection = True

        first = [True]

        def emit(event):
            if table and event["type"] != "ERROR":
                obj = self._table(rtype, {"items": [event["object"]], "metadata": {
                    "resourceVersion": event["object"]["metadata"].get("resourceVersion", "")}})
                if not first[0]:
                    obj["columnDefinitions"] = []
                first[0] = False
                event = {"type": event["type"], "object": obj}
            data = (json.dumps(event, separators=(",", ":")) + "\n").encode("utf-8")
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        try:
            for event in initial:
                emit(event)
            while time.time() < deadline and not self.server.stopping.is_set():
                with store.lock:
                    if store.rv <= since and not store.closed:
                        store.cond.wait(min(1.0, max(deadline - time.time(), 0.01)))
                    if store.closed:
                        break
                try:
                    events, scanned = store.watch_events(rtype, since, ns, labels, fields)
                except ApiError as err:
                    emit({"type": "ERROR", "object": err.status()})
                    break
                for rv, etype, obj in events:
                    emit({"type": etype, "object": obj})
                since = scanned
            if not self.server.stopping.is_set():
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
        except (ConnectionError, BrokenPipeError, OSError):
            pass

    # --- /_double control paths -------------------------------------------------------------

    def _control(self, path, query, body_bytes):
        server = self.server
        store = server.store
        parts = path.strip("/").split("/")[1:]
        method = self.command
        if parts == ["history"] and method == "GET":
            since = int((query.get("since") or ["0"])[0])
            items = store.history_since(since, resource=(query.get("resource") or [None])[0],
                                        name=(query.get("name") or [None])[0],
                                        actor=(query.get("actor") or [None])[0],
                                        verb=(query.get("verb") or [None])[0])
            if (query.get("nodes") or ["true"])[0].lower() in ("false", "0"):
                items = [dict((k, v) for k, v in e.items() if k != "nodes") for e in items]
            return self._send_json(200, {"items": items, "last_seq": store.seq})
        if parts == ["reads"] and method == "GET":
            def one(key):
                return (query.get(key) or [None])[0]
            try:
                since, wait = int(one("since") or 0), float(one("wait") or 0)
            except ValueError:
                raise bad_request("since must be an integer and wait a number of seconds")
            if not 0 <= wait <= 600:
                raise bad_request("wait must be between 0 and 600 seconds, not %s" % wait)
            items, last = server.reads_since(since, resource=one("resource"), name=one("name"), verb=one("verb"),
                                             user_agent=one("user_agent"), wait=wait)
            return self._send_json(200, {"items": items, "last_seq": last})
        if parts == ["state"] and method == "GET":
            return self._send_json(200, store.dump())
        if parts == ["faults"]:
            if method == "GET":
                with server.faults_lock:
                    return self._send_json(200, {"items": [f.describe() for f in server.faults]})
            if method == "POST":
                spec = _try_json(body_bytes)
                if spec is _INVALID or spec is None:
                    raise bad_request("POST /_double/faults takes a JSON fault rule")
                rules = spec if isinstance(spec, list) else [spec]
                added = [server.add_fault(r).describe() for r in rules]
                return self._send_json(201, {"items": added})
            if method == "DELETE":
                gone = server.remove_faults()
                return self._send_json(200, {"removed": [f.id for f in gone]})
        if len(parts) == 2 and parts[0] == "faults" and method == "DELETE":
            gone = server.remove_faults(parts[1])
            if not gone:
                raise ApiError(404, "no fault rule %s" % parts[1])
            return self._send_json(200, {"removed": [f.id for f in gone]})
        if parts == ["objects"] and method == "POST":
            docs = _load_docs(body_bytes)
            replace = _truthy((query.get("replace") or ["false"])[0])
            try:
                created = store.load_objects(docs, actor="seed", replace=replace)
            except ValueError as exc:
                raise bad_request(str(exc))
            return self._send_json(201, {"items": created})
        if parts == ["tick"] and method == "POST":
            store.tick()
            return self._send_json(200, {"resourceVersion": str(store.rv)})
        if parts == ["shutdown"] and method == "POST":
            self._send_json(200, {"status": "stopping"})
            self.close_connection = True
            hook = server.on_shutdown_request
            threading.Thread(target=hook or server.stop, name="apidouble-shutdown", daemon=True).start()
            return None
        raise ApiError(404, "unknown control path %s %s" % (method, path))


_INVALID = object()


def _decode_body(data, ctype):
    """Request bodies in JSON or YAML; anything else (protobuf, CBOR) is 415 like an apiserver
    that does not offer that serializer."""
    if ctype in ("", "application/json", "*/*"):
        return _try_json(data)
    if ctype in ("application/yaml", "application/x-yaml", "text/yaml"):
        import yaml
        try:
            return yaml.safe_load(data.decode("utf-8"))
        except (yaml.YAMLError, UnicodeDecodeError):
            return _INVALID
    raise ApiError(415, "the body of the request was in an unknown format - accepted media types include: "
                   "application/json, application/yaml", reason="UnsupportedMediaType")


def _try_json(data):
    if not data:
        return None
    try:
        return json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return _INVALID


def _load_docs(data):
    text = data.decode("utf-8") if data else ""
    stripped = text.lstrip()
    if stripped.startswith("[") or stripped.startswith("{"):
        try:
            value = json.loads(text)
            return value if isinstance(value, list) else [value]
        except ValueError:
            pass
    import yaml
    try:
        return [d for d in yaml.safe_load_all(text) if d]
    except yaml.YAMLError as exc:
        raise bad_request("cannot parse manifests: %s" % exc)


class ServerThread(object):
    """Run an ApiDoubleServer plus its node-lifecycle ticker in background threads."""

    def __init__(self, server, tick_interval=1.0):
        self.server = server
        self.tick_interval = tick_interval
        self._threads = []

    def start(self):
        serve = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.2},
                                 name="apidouble-serve", daemon=True)
        ticker = threading.Thread(target=self._tick, name="apidouble-tick", daemon=True)
        self._threads = [serve, ticker]
        for t in self._threads:
            t.start()
        return self

    def _tick(self):
        while not self.server.stopping.wait(self.tick_interval):
            try:
                self.server.store.tick()
            except Exception:  # keep ticking; a bug here must not kill the lifecycle loop
                traceback.print_exc()

    def stop(self):
        self.server.stop()
        for t in self._threads:
            t.join(timeout=5)
