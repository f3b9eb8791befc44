"""plugin_utils/k8s: connection resolution in kubernetes.core's order (options > K8S_AUTH_* environment >
in-cluster > kubeconfig), against real kubeconfig files, a fake service account directory and a real
local HTTP server; tokens never reach a message."""
import http.server
import json
import os
import threading

import pytest
import yaml

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.k8s import client as k8s
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.k8s import service


def write_kubeconfig(path, contexts, current):
    """contexts: {name: (server, token)}"""
    doc = {"apiVersion": "v1", "kind": "Config", "current-context": current,
           "clusters": [{"name": n, "cluster": {"server": s, "insecure-skip-tls-verify": True}}
                        for n, (s, _t) in contexts.items()],
           "users": [{"name": n, "user": {"token": t}} for n, (_s, t) in contexts.items()],
           "contexts": [{"name": n, "context": {"cluster": n, "user": n}} for n in contexts]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc))
    return str(path)


@pytest.fixture
def world(tmp_path):
    """A HOME with ~/.kube/config, a second kubeconfig, a service account dir - and no KUBECONFIG."""
    home = tmp_path / "home"
    write_kubeconfig(home / ".kube" / "config", {"home": ("https://home.example:6443", "home-token")}, "home")
    other = write_kubeconfig(tmp_path / "other.yaml", {"a": ("https://a.example:6443", "a-token"),
                                                       "b": ("https://b.example:6443", "b-token")}, "a")
    sa = tmp_path / "serviceaccount"
    sa.mkdir()
    (sa / "token").write_text("sa-token")
    (sa / "ca.crt").write_text("not parsed before a request")
    ca = tmp_path / "ca.crt"
    ca.write_text("job CA")
    return {"home": str(home), "other": other, "sa": str(sa), "ca": str(ca), "tmp": tmp_path}


def resolve(world, params=None, env=None, in_pod=False):
    environ = {"HOME": world["home"]}
    if in_pod:
        environ.update(KUBERNETES_SERVICE_HOST="10.96.0.1", KUBERNETES_SERVICE_PORT="443")
    environ.update(env or {})
    auth, sources = k8s.auth_settings(params, environ)
    config, how = k8s.configuration(auth, environ, serviceaccount_dir=world["sa"])
    header = (config.auth_settings().get("BearerToken") or {}).get("value")
    return config, how, header, sources


def test_the_job_credential_alone_is_enough_no_kubeconfig_is_read(world):
    # the AWX "OpenShift or Kubernetes API Bearer Token" credential: host, token, CA - nothing else
    config, how, header, sources = resolve(world, env={
        "K8S_AUTH_HOST": "https://api.job.example:6443/", "K8S_AUTH_API_KEY": "job-token",
        "K8S_AUTH_SSL_CA_CERT": world["ca"], "K8S_AUTH_VERIFY_SSL": "true"}, in_pod=True)
    assert config.host == "https://api.job.example:6443" and header == "Bearer job-token"
    assert config.ssl_ca_cert == world["ca"] and config.verify_ssl is True
    assert how == "host https://api.job.example:6443 with a bearer token"
    assert sources == {"host": "K8S_AUTH_HOST", "api_key": "K8S_AUTH_API_KEY", "ca_cert": "K8S_AUTH_SSL_CA_CERT",
                       "validate_certs": "K8S_AUTH_VERIFY_SSL"}


@pytest.mark.parametrize("value,expected", [("false", False), ("No", False), ("0", False), ("FALSE", False),
                                            ("true", True), ("yes", True), ("1", True), ("anything", True)])
def test_environment_booleans_as_kubernetes_core_reads_them(world, value, expected):
    config, _how, _h, _s = resolve(world, env={"K8S_AUTH_HOST": "https://h", "K8S_AUTH_API_KEY": "t",
                                               "K8S_AUTH_VERIFY_SSL": value})
    assert config.verify_ssl is expected


def test_option_names_come_before_client_names_and_options_before_the_environment(world):
    env = {"K8S_AUTH_HOST": "https://env.example", "K8S_AUTH_API_KEY": "env-token",
           "K8S_AUTH_VALIDATE_CERTS": "no", "K8S_AUTH_VERIFY_SSL": "yes",
           "K8S_AUTH_CA_CERT": "/ca/option-name", "K8S_AUTH_SSL_CA_CERT": "/ca/client-name"}
    config, _how, header, sources = resolve(world, env=env)
    assert config.verify_ssl is False and sources["validate_certs"] == "K8S_AUTH_VALIDATE_CERTS"
    assert config.ssl_ca_cert == "/ca/option-name"
    config, how, header, sources = resolve(world, params={"host": "https://opt.example", "api_key": "opt-token",
                                                          "validate_certs": True, "ca_cert": "/ca/opt"}, env=env)
    assert (config.host, header, config.verify_ssl, config.ssl_ca_cert) == (
        "https://opt.example", "Bearer opt-token", True, "/ca/opt")
    assert set(sources.values()) == {"option"}
    # an empty variable counts as unset, like os.getenv(a) or os.getenv(b)
    _c, _h, _hd, sources = resolve(world, env=dict(env, K8S_AUTH_VALIDATE_CERTS=""))
    assert sources["validate_certs"] == "K8S_AUTH_VERIFY_SSL"


def test_kubeconfig_option_then_its_variable_then_kubeconfig_then_home(world, tmp_path):
    third = write_kubeconfig(tmp_path / "third.yaml", {"t": ("https://third.example", "third-token")}, "t")
    config, how, header, _s = resolve(world, params={"kubeconfig": world["other"]},
                                      env={"K8S_AUTH_KUBECONFIG": third, "KUBECONFIG": third})
    assert config.host == "https://a.example:6443" and header == "Bearer a-token" and world["other"] in how
    config, how, header, _s = resolve(world, env={"K8S_AUTH_KUBECONFIG": world["other"], "KUBECONFIG": third})
    assert config.host == "https://a.example:6443"
    config, how, header, _s = resolve(world, env={"KUBECONFIG": third})
    assert config.host == "https://third.example" and header == "Bearer third-token"
    config, how, header, _s = resolve(world)
    assert config.host == "https://home.example:6443" and how == "the kubeconfig %s/.kube/config" % world["home"]


def test_context_option_and_variable_select_the_context(world):
    config, how, header, _s = resolve(world, params={"kubeconfig": world["other"], "context": "b"})
    assert config.host == "https://b.example:6443" and header == "Bearer b-token" and how.endswith("(context b)")
    config, _how, header, _s = resolve(world, env={"KUBECONFIG": world["other"], "K8S_AUTH_CONTEXT": "b"},
                                       in_pod=True)
    assert header == "Bearer b-token"   # a context names a kubeconfig: the service account is not used


def test_in_cluster_comes_before_the_default_kubeconfig_as_in_kubernetes_core(world):
    config, how, header, _s = resolve(world, env={"KUBECONFIG": world["other"]}, in_pod=True)
    assert config.host == "https://10.96.0.1:443" and header == "bearer sa-token"
    assert config.ssl_ca_cert == os.path.join(world["sa"], "ca.crt") and "in-cluster" in how
    # a service account dir without a token is not in a cluster: the kubeconfig follows
    os.unlink(os.path.join(world["sa"], "token"))
    config, how, header, _s = resolve(world, env={"KUBECONFIG": world["other"]}, in_pod=True)
    assert config.host == "https://a.example:6443"


def test_settings_given_override_what_was_loaded(world, tmp_path):
    tokenless = tmp_path / "tokenless.yaml"
    tokenless.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://kc.example"}}],
        "users": [{"name": "c", "user": {}}], "contexts": [{"name": "c", "context": {"cluster": "c", "user": "c"}}]}))
    config, how, header, _s = resolve(world, env={"KUBECONFIG": str(tokenless), "K8S_AUTH_HOST": "https://override.example",
                                                  "K8S_AUTH_VERIFY_SSL": "false"})
    # a host without a token is not a complete credential: the kubeconfig is loaded, then overridden
    assert config.host == "https://override.example" and header is None
    assert config.verify_ssl is False and how == "the kubeconfig %s" % tokenless


def test_inline_kubeconfig_dict_is_accepted_and_its_token_is_a_secret(world):
    doc = yaml.safe_load(open(world["other"]))
    config, _how, header, _s = resolve(world, params={"kubeconfig": doc, "context": "b"})
    assert config.host == "https://b.example:6443"
    assert set(k8s.secrets_of({"kubeconfig": doc, "api_key": "x"})) == {"x", "a-token", "b-token"}
    with pytest.raises(k8s.K8sError, match="kubeconfig must be a path or a dict"):
        resolve(world, params={"kubeconfig": ["a", "b"]})


def test_nothing_to_connect_with_says_what_was_tried(world, tmp_path):
    empty = {"HOME": str(tmp_path / "nohome")}
    with pytest.raises(k8s.K8sError) as err:
        k8s.connect({}, empty, serviceaccount_dir=str(tmp_path / "nosa"))
    msg = str(err.value)
    assert "no Kubernetes connection" in msg and "K8S_AUTH_HOST" in msg and "not in a cluster" in msg
    assert "nohome/.kube/config" in msg
    with pytest.raises(k8s.K8sError, match="cannot load the kubeconfig /nonexistent"):
        k8s.connect({"kubeconfig": "/nonexistent", "api_key": "never-shown"}, empty)


class Recorder(http.server.BaseHTTPRequestHandler):
    """A local API stand-in: 401 unless the token is 'good'; echoes the Authorization header in its
    error body (a careless server), so the client must mask it."""

    seen = []

    def do_GET(self):  # noqa: N802
        Recorder.seen.append({"path": self.path, "headers": self.headers})
        auth = self.headers.get("Authorization") or ""
        if auth != "Bearer good":
            body, code = {"kind": "Status", "message": "bad credentials %s" % auth, "code": 401}, 401
        elif self.path.startswith("/api/v1/nodes/missing"):
            body, code = {"kind": "Status", "message": "nodes \"missing\" not found", "code": 404}, 404
        else:
            body, code = {"kind": "NodeList", "items": [{"metadata": {"name": "n1"}}]}, 200
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    Recorder.seen = []
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield "http://127.0.0.1:%d" % httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()
    thread.join()


def test_requests_send_the_token_and_impersonation_and_read_json(server, tmp_path):
    env = {"HOME": str(tmp_path), "K8S_AUTH_HOST": server, "K8S_AUTH_API_KEY": "good",
           "K8S_AUTH_IMPERSONATE_GROUPS": "g1,g2"}
    client = k8s.connect({"impersonate_user": "alice"}, env)
    assert [n["metadata"]["name"] for n in service.list_items(client, "v1", "nodes")] == ["n1"]
    assert service.get(client, "v1", "nodes", "missing") is None
    headers = Recorder.seen[0]["headers"]
    assert headers["Authorization"] == "Bearer good" and headers["Impersonate-User"] == "alice"
    assert headers.get_all("Impersonate-Group") == ["g1", "g2"]
    assert Recorder.seen[1]["path"] == "/api/v1/nodes/missing"


def test_a_wrong_token_fails_with_the_status_and_where_the_credentials_came_from_never_the_token(server, tmp_path):
    client = k8s.connect({}, {"HOME": str(tmp_path), "K8S_AUTH_HOST": server, "K8S_AUTH_API_KEY": "s3cr3t-wrong"})
    with pytest.raises(k8s.K8sError) as err:
        service.list_items(client, "v1", "nodes", what="list Nodes")
    msg = str(err.value)
    assert Recorder.seen[0]["headers"]["Authorization"] == "Bearer s3cr3t-wrong"   # it was sent ...
    assert "s3cr3t-wrong" not in msg and "********" in msg                           # ... and never shown
    assert msg.startswith("list Nodes: HTTP 401 bad credentials") and err.value.status == 401
    assert "credentials from host %s with a bearer token" % server in msg


def test_a_token_from_a_kubeconfig_is_masked_too(server, tmp_path):
    path = write_kubeconfig(tmp_path / "kc", {"c": (server, "kc-secret-token")}, "c")
    client = k8s.connect({"kubeconfig": path}, {"HOME": str(tmp_path)})
    with pytest.raises(k8s.K8sError) as err:
        service.get(client, "v1", "nodes", "n1")
    assert "kc-secret-token" not in str(err.value) and "HTTP 401" in str(err.value)
    assert "kc-secret-token" in client.secrets
    client.close()   # removes the private directory the kubeconfig was loaded with


def test_an_unreachable_host_fails_cleanly(tmp_path):
    client = k8s.connect({"host": "https://127.0.0.1:1", "api_key": "tok"}, {"HOME": str(tmp_path)})
    with pytest.raises(k8s.K8sError) as err:
        service.get(client, "v1", "nodes", "n1", what="read Node n1")
    assert str(err.value).startswith("read Node n1: ") and "tok" not in str(err.value).replace("127.0.0.1", "")


class Routes(http.server.BaseHTTPRequestHandler):
    """Serves ``Routes.table`` (path with query -> JSON document) and records every path asked for."""

    table = {}
    asked = []

    def do_GET(self):  # noqa: N802
        Routes.asked.append(self.path)
        doc = Routes.table.get(self.path)
        code = 200 if doc is not None else 404
        data = json.dumps(doc if doc is not None else {"kind": "Status", "message": "not found"}).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_read_cluster_lists_each_kind_once_and_the_events_of_pending_bound_pods(tmp_path):
    pending = {"metadata": {"name": "p1", "namespace": "ml", "uid": "u-1"}, "spec": {"nodeName": "gpu-0"},
               "status": {"phase": "Pending"}}
    unbound = {"metadata": {"name": "p2", "namespace": "ml", "uid": "u-2"}, "spec": {}, "status": {"phase": "Pending"}}
    running = {"metadata": {"name": "p3", "namespace": "ml", "uid": "u-3"}, "spec": {"nodeName": "gpu-0"},
               "status": {"phase": "Running"}}
    Routes.asked = []
    Routes.table = {
        "/api/v1/nodes": {"items": [{"metadata": {"name": "gpu-0"}}]},
        "/api/v1/pods": {"items": [pending, unbound, running, "not an object"]},
        "/apis/apps/v1/daemonsets": {"items": []},
        "/api/v1/namespaces/ml/events?fieldSelector=involvedObject.uid%3Du-1": {"items": [{"reason": "FailedMount"}]},
    }
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Routes)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        client = k8s.connect({"host": "http://127.0.0.1:%d" % httpd.server_address[1], "api_key": "t"},
                             {"HOME": str(tmp_path)})
        out = service.read_cluster(client)
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()
    assert out["calls"] == 4 and out["events"] == [{"reason": "FailedMount"}]
    assert [n["metadata"]["name"] for n in out["nodes"]] == ["gpu-0"] and len(out["pods"]) == 4
    assert Routes.asked == ["/api/v1/nodes", "/api/v1/pods", "/apis/apps/v1/daemonsets",
                            "/api/v1/namespaces/ml/events?fieldSelector=involvedObject.uid%3Du-1"]


def test_object_paths():
    assert service.object_path("v1", "nodes", "a/b") == "/api/v1/nodes/a%2Fb"
    assert service.object_path("apps/v1", "daemonsets", namespace="kube-system") == \
        "/apis/apps/v1/namespaces/kube-system/daemonsets"


class Endless(http.server.BaseHTTPRequestHandler):
    """An API impostor that answers a list with a body that never ends (chunked, 64 KiB at a time)
    until the client hangs up."""

    def do_GET(self):  # noqa: N802
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        piece = b" " * 65536
        try:
            head = b'{"items": ['
            self.wfile.write(b"%x\r\n%s\r\n" % (len(head), head))
            while True:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
        except (BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, *args):
        pass


@pytest.fixture
def endless():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Endless)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield "http://127.0.0.1:%d" % httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()
    thread.join()


def test_a_response_without_end_fails_at_the_size_bound(endless, tmp_path):
    client = k8s.connect({"host": endless, "api_key": "tok"}, {"HOME": str(tmp_path)})
    client.MAX_BODY = 4 * 1024 * 1024
    with pytest.raises(k8s.K8sError) as err:
        service.list_items(client, "v1", "pods", what="list Pods")
    assert str(err.value) == "list Pods: the response is larger than 4 MiB; nothing of it was used"
    client.close()


def test_a_response_past_its_deadline_fails(endless, tmp_path):
    client = k8s.connect({"host": endless, "api_key": "tok"}, {"HOME": str(tmp_path)})
    client.DEADLINE = 0   # any response arrives after a deadline of now
    with pytest.raises(k8s.K8sError) as err:
        service.list_items(client, "v1", "pods", what="list Pods")
    assert str(err.value) == "list Pods: the response took longer than 0 s to arrive; nothing of it was used"
    client.close()
