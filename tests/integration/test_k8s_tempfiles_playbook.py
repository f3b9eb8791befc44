"""The controller's temp dir after real ansible-playbook runs of the collection's k8s action plugins.

The kubernetes client's kubeconfig loader writes a kubeconfig's inline data (certificate-authority-data,
client-certificate-data, client-key-data) to temp files and removes them only from an atexit handler;
Ansible's forked workers end with os._exit, so before the fix every action that loaded such a
kubeconfig left the CA and the client's private key in TMPDIR. Here audit_cluster and
node_maintenance (info, patched in check mode, and a loop: one worker, several connections) talk
to the API double over HTTPS with TLS verification on, the CA only inline and a client certificate
and key inline, with TMPDIR an empty private directory: the tasks succeed (the files existed while
connecting) and TMPDIR is empty afterwards.
"""
import base64
import os
import shutil
import subprocess
import sys

import pytest
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
LAB_TESTS = os.path.join(os.path.dirname(HERE), "lab")
if LAB_TESTS not in sys.path:
    sys.path.insert(0, LAB_TESTS)

from apidouble_fixture import api_double_factory  # noqa: E402,F401 pylint: disable=unused-import,wrong-import-position
from test_api_double import cluster  # noqa: E402 pylint: disable=wrong-import-position

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl makes the client certificate")


def client_cert(tmp_path):
    """A self-signed client certificate and key (PEM), made with openssl."""
    key, crt = tmp_path / "client.key", tmp_path / "client.crt"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", str(key), "-out", str(crt), "-days", "2", "-subj", "/CN=kubegpu-t3"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return crt.read_bytes(), key.read_bytes()


def inline_kubeconfig(proc, tmp_path):
    """The double's kubeconfig (server, certificate-authority-data, token) plus inline client cert and key."""
    with open(proc.kubeconfig) as fh:
        doc = yaml.safe_load(fh)
    assert "certificate-authority-data" in doc["clusters"][0]["cluster"]
    crt, key = client_cert(tmp_path)
    doc["users"][0]["user"].update({"client-certificate-data": base64.b64encode(crt).decode(),
                                    "client-key-data": base64.b64encode(key).decode()})
    path = tmp_path / "kubeconfig-inline.yaml"
    path.write_text(yaml.safe_dump(doc))
    os.chmod(str(path), 0o600)
    return str(path), key


def leftovers(tmpdir):
    out = []
    for root, dirs, files in os.walk(tmpdir):
        out.extend(os.path.join(root, n) for n in dirs + files)
    return sorted(out)


def test_k8s_actions_leave_no_kubeconfig_credentials_in_tmpdir(ansible, api_double_factory, tmp_path, monkeypatch):
    proc = api_double_factory(seed=cluster())
    kubeconfig, key = inline_kubeconfig(proc, tmp_path)
    tmpdir = tmp_path / "controller-tmp"
    tmpdir.mkdir(mode=0o700)
    for var in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT") + tuple(
            v for v in os.environ if v.startswith("K8S_AUTH_")):
        monkeypatch.delenv(var, raising=False)
    auth = {"kubeconfig": kubeconfig, "validate_certs": True}
    plays = [{"hosts": "localhost", "gather_facts": False,
              "module_defaults": {"group/kubegpu.fleet.k8s": auth}, "tasks": [
                  {"name": "view", "kubegpu.fleet.audit_cluster": {}},
                  {"name": "read", "kubegpu.fleet.node_maintenance": {"name": "gpu-0"}},
                  {"name": "cordon", "kubegpu.fleet.node_maintenance": {
                      "name": "gpu-1", "state": "patched", "unschedulable": True}, "check_mode": True},
                  {"name": "loop", "kubegpu.fleet.node_maintenance": {"name": "{{ item }}"},
                   "loop": ["gpu-0", "gpu-1", "gpu-2"]},
              ]}]
    res = ansible.playbook(plays, env={"TMPDIR": str(tmpdir), "HOME": str(tmp_path),
                                       "ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.json"})
    assert res.rc == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert sorted(res.task("view")["cluster"]["nodes"]) == ["cpu-0", "gpu-0", "gpu-1", "gpu-2"]
    assert res.task("read")["node"]["metadata"]["name"] == "gpu-0"
    assert res.task("cordon")["changed"]
    assert [r["node"]["metadata"]["name"] for r in res.task("loop")["results"]] == ["gpu-0", "gpu-1", "gpu-2"]
    left = leftovers(str(tmpdir))
    with_key = [p for p in left if os.path.isfile(p) and key.strip() in open(p, "rb").read()]
    assert left == [], "left in TMPDIR: %s (%d hold the client's private key)" % (left, len(with_key))
