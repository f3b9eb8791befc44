"""plugin_utils/k8s: the files the kubeconfig loader writes for a kubeconfig's inline data (the CA, the
client certificate and its private key) live exactly as long as the Client: they are there while it
opens TLS connections (a real HTTPS server that requires a client certificate) and gone after
close() - from a test-private TMPDIR, for a kubeconfig file and an inline dict. A file the user
named (ca_cert, client_cert, client_key options, certificate-authority: PATH, the service account's
ca.crt) is never removed."""
import base64
import http.server
import json
import os
import shutil
import ssl
import stat
import subprocess
import tempfile
import threading

import pytest
import yaml

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.k8s import client as k8s

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl makes the test certificates")


def openssl(*args):
    subprocess.run(("openssl",) + args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA, a server certificate for 127.0.0.1 and a client certificate, both signed by the CA."""
    d = tmp_path_factory.mktemp("pki")
    p = {n: str(d / n) for n in ("ca.key", "ca.crt", "server.key", "server.csr", "server.crt", "server.ext",
                                 "client.key", "client.csr", "client.crt")}
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    openssl("req", "-x509", *ec, "-keyout", p["ca.key"], "-out", p["ca.crt"], "-days", "2", "-subj", "/CN=t3-ca")
    with open(p["server.ext"], "w") as fh:
        fh.write("subjectAltName=IP:127.0.0.1\n")
    for who in ("server", "client"):
        openssl("req", *ec, "-keyout", p[who + ".key"], "-out", p[who + ".csr"], "-subj", "/CN=t3-" + who)
        extra = ("-extfile", p["server.ext"]) if who == "server" else ()
        openssl("x509", "-req", "-in", p[who + ".csr"], "-CA", p["ca.crt"], "-CAkey", p["ca.key"],
                "-CAcreateserial", "-out", p[who + ".crt"], "-days", "2", *extra)
    return p


def b64(path):
    with open(path, "rb") as fh:
        return base64.b64encode(fh.read()).decode()


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        peer = self.connection.getpeercert() or {}
        body = json.dumps({"path": self.path, "client": dict(x[0] for x in peer.get("subject", ()))}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def https(pki):
    """An HTTPS server that requires a client certificate signed by the CA; yields its URL."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(pki["server.crt"], pki["server.key"])
    ctx.load_verify_locations(pki["ca.crt"])
    ctx.verify_mode = ssl.CERT_REQUIRED
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield "https://127.0.0.1:%d" % httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()
    thread.join()


@pytest.fixture
def tmpdir_private(tmp_path, monkeypatch):
    """TMPDIR (tempfile.tempdir and the variable) is an empty directory of this test; both restored after."""
    d = tmp_path / "TMPDIR"
    d.mkdir()
    monkeypatch.setenv("TMPDIR", str(d))
    monkeypatch.setattr(tempfile, "tempdir", str(d))
    assert tempfile.gettempdir() == str(d)
    return d


def kubeconfig(server, cluster, user):
    return {"apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "c", "cluster": dict(cluster, server=server)}],
            "users": [{"name": "u", "user": user}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}


def inline(server, pki):
    return kubeconfig(server, {"certificate-authority-data": b64(pki["ca.crt"])},
                      {"client-certificate-data": b64(pki["client.crt"]), "client-key-data": b64(pki["client.key"])})


def listing(d):
    return sorted(os.path.relpath(os.path.join(r, n), str(d)) for r, ds, fs in os.walk(str(d)) for n in ds + fs)


def files_of(client):
    config = client._config  # pylint: disable=protected-access
    return [config.ssl_ca_cert, config.cert_file, config.key_file]


@pytest.mark.parametrize("as_dict", [False, True], ids=["kubeconfig-file", "inline-dict"])
def test_inline_ca_cert_and_key_live_while_connected_and_go_on_close(https, pki, tmpdir_private, tmp_path, as_dict):
    doc = inline(https, pki)
    if as_dict:
        source = doc
    else:
        source = str(tmp_path / "kubeconfig")
        with open(source, "w") as fh:
            yaml.safe_dump(doc, fh)
    client = k8s.connect({"kubeconfig": source}, {"HOME": str(tmp_path)})
    paths = files_of(client)
    # the loader's files: in one private 0700 directory under TMPDIR, the PEM the kubeconfig carried
    folder = os.path.dirname(paths[0])
    assert os.path.dirname(folder) == str(tmpdir_private) and all(os.path.dirname(p) == folder for p in paths)
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    for path, original in zip(paths, ("ca.crt", "client.crt", "client.key")):
        with open(path, "rb") as have, open(pki[original], "rb") as want:
            assert have.read() == want.read()
    # a real TLS connection: the server checks our client certificate, we check its CA
    assert client.request("read", "GET", "/api/v1/nodes")["client"] == {"commonName": "t3-client"}
    assert os.path.exists(paths[2])   # not removed after the first connection: later ones read it again
    client.close()
    assert listing(tmpdir_private) == []
    client.close()   # idempotent
    assert os.path.isfile(pki["client.key"]) and os.path.isfile(pki["ca.crt"])


def test_with_statement_closes_on_error(https, pki, tmpdir_private, tmp_path):
    with pytest.raises(RuntimeError):
        with k8s.connect({"kubeconfig": inline(https, pki)}, {"HOME": str(tmp_path)}) as client:
            assert client.request("read", "GET", "/version")["path"] == "/version"
            assert listing(tmpdir_private) != []
            raise RuntimeError("the action failed")
    assert listing(tmpdir_private) == []


def test_a_failed_connect_leaves_nothing(pki, tmpdir_private, tmp_path):
    doc = inline("https://127.0.0.1:1", pki)
    doc["current-context"] = "missing"
    with pytest.raises(k8s.K8sError):
        k8s.connect({"kubeconfig": doc}, {"HOME": str(tmp_path)})
    assert listing(tmpdir_private) == []


def test_close_never_removes_files_the_user_named(https, pki, tmpdir_private, tmp_path):
    # certificate-authority: PATH in the kubeconfig, client cert and key given as options
    user_files = [pki["ca.crt"], pki["client.crt"], pki["client.key"]]
    doc = kubeconfig(https, {"certificate-authority": pki["ca.crt"]}, {"token": "t"})
    client = k8s.connect({"kubeconfig": doc, "client_cert": pki["client.crt"], "client_key": pki["client.key"]},
                         {"HOME": str(tmp_path)})
    assert files_of(client) == user_files
    assert client.request("read", "GET", "/x")["client"] == {"commonName": "t3-client"}
    client.close()
    assert all(os.path.isfile(p) for p in user_files) and listing(tmpdir_private) == []
    # inline data, but the options name the files: the options win, and both kinds are handled
    client = k8s.connect({"kubeconfig": inline(https, pki), "ca_cert": pki["ca.crt"]}, {"HOME": str(tmp_path)})
    assert files_of(client)[0] == pki["ca.crt"]
    assert client.request("read", "GET", "/x")["client"] == {"commonName": "t3-client"}
    client.close()
    assert all(os.path.isfile(p) for p in user_files) and listing(tmpdir_private) == []
    # host, token and CA file (the AWX credential): no kubeconfig, nothing written, nothing removed
    client = k8s.connect({"host": https, "api_key": "t", "ca_cert": pki["ca.crt"], "client_cert": pki["client.crt"],
                          "client_key": pki["client.key"]}, {"HOME": str(tmp_path)})
    assert listing(tmpdir_private) == []
    assert client.request("read", "GET", "/x")["client"] == {"commonName": "t3-client"}
    client.close()
    assert all(os.path.isfile(p) for p in user_files) and listing(tmpdir_private) == []


def test_the_service_account_ca_is_never_removed(pki, tmpdir_private, tmp_path):
    sa = tmp_path / "serviceaccount"
    sa.mkdir()
    (sa / "token").write_text("sa-token")
    shutil.copy(pki["ca.crt"], str(sa / "ca.crt"))
    client = k8s.connect({}, {"HOME": str(tmp_path), "KUBERNETES_SERVICE_HOST": "127.0.0.1",
                              "KUBERNETES_SERVICE_PORT": "1"}, serviceaccount_dir=str(sa))
    assert "in-cluster" in client.how and files_of(client)[0] == str(sa / "ca.crt")
    client.close()
    assert sorted(os.listdir(str(sa))) == ["ca.crt", "token"] and listing(tmpdir_private) == []


def test_clients_with_the_same_inline_data_in_one_process(https, pki, tmpdir_private, tmp_path):
    """The loader keeps one file per content for the whole process: a second open client may be handed
    the first one's file, which must outlive the first client; a client made after both closed (the
    next item of an Ansible loop, in the same worker) gets fresh files."""
    env = {"HOME": str(tmp_path)}
    first = k8s.connect({"kubeconfig": inline(https, pki)}, env)
    second = k8s.connect({"kubeconfig": inline(https, pki)}, env)
    first.close()
    assert all(os.path.isfile(p) for p in files_of(second))
    assert second.request("read", "GET", "/x")["client"] == {"commonName": "t3-client"}
    second.close()
    assert listing(tmpdir_private) == []
    third = k8s.connect({"kubeconfig": inline(https, pki)}, env)
    assert all(os.path.isfile(p) for p in files_of(third))
    assert third.request("read", "GET", "/x")["client"] == {"commonName": "t3-client"}
    third.close()
    assert listing(tmpdir_private) == []


def test_pin_the_loader_private_file_map_close_relies_on(https, pki, tmpdir_private, tmp_path):
    """client._loader_cache is kubernetes.config.kube_config._temp_files (private): content -> path of
    the file written for it. Client.close() drops its removed files from it so that kubernetes releases
    that do not check a remembered file still exists (28 and older) write it anew. If the package
    renames or reshapes it, this fails: revisit client._release."""
    from kubernetes.config import kube_config

    assert k8s._loader_cache() is kube_config._temp_files  # pylint: disable=protected-access
    client = k8s.connect({"kubeconfig": inline(https, pki)}, {"HOME": str(tmp_path)})
    paths = files_of(client)
    assert set(paths) <= set(kube_config._temp_files.values())  # pylint: disable=protected-access
    client.close()
    assert not set(paths) & set(kube_config._temp_files.values())  # pylint: disable=protected-access


def test_the_action_helper_masks_the_kubeconfig_token_and_closes_the_client(https, pki, tmpdir_private, tmp_path):
    """k8s/action.connected, what every API action opens its client with: inside the body the client
    works; after it, also when the body fails, the loader's files are gone and the token the
    kubeconfig file carried (which only the client read) is masked in the task result
    (k8s/action.masked)."""
    from ansible_collections.kubegpu.fleet.plugins.plugin_utils.k8s import action as k8s_action
    doc = inline(https, pki)
    doc["users"][0]["user"]["token"] = "kc-secret-token"
    path = str(tmp_path / "kubeconfig")
    with open(path, "w") as fh:
        yaml.safe_dump(doc, fh)
    args = {"kubeconfig": path}
    assert k8s.secrets_of(args) == []
    result = {}
    with k8s_action.masked(result, args) as secrets:
        with k8s_action.connected(args, {"HOME": str(tmp_path)}, secrets) as client:
            assert client.request("read", "GET", "/version")["client"] == {"commonName": "t3-client"}
            assert listing(tmpdir_private) != []
            result["msg"] = "used kc-secret-token"
    assert listing(tmpdir_private) == []
    assert result == {"msg": "used ********"}
    result = {}
    with pytest.raises(RuntimeError):
        with k8s_action.masked(result, args) as secrets:
            with k8s_action.connected(args, {"HOME": str(tmp_path)}, secrets) as client:
                assert client.request("read", "GET", "/version")["path"] == "/version"
                result["msg"] = "failed with kc-secret-token"
                raise RuntimeError("the action failed")
    assert listing(tmpdir_private) == [] and result == {"msg": "failed with ********"}
