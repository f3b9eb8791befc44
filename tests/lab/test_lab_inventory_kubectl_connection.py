"""The kubegpu.fleet.gpu_nodes inventory with ``address: kubectl`` through a real connection.

``ansible-playbook`` runs over the inventory the plugin reads from the API double (GPU Nodes, Running
agent pods), so kubernetes.core's kubectl connection plugin really builds and runs its ``kubectl
exec`` command lines. ``kubectl`` is ``fake_kubectl.py`` first on PATH: it parses them as kubectl
does, GETs each pod from the double with the server, token and CA the command line names (a
missing pod or container, a wrong token, a flag kubectl would refuse fails with kubectl's text),
and runs the command in the pod's view - its node's fake root bind-mounted at the agent's host mount
in a private mount namespace. ``ansible.builtin.ping`` and the audit role (kubegpu.fleet.audit_node
with the host paths the inventory set) run through it on every node.
"""
import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml

import fake_kubectl
import test_lab_inventory_gpu_nodes as inventory_tests
from apidouble_fixture import KUBECTL, api_double_factory  # noqa: F401 pylint: disable=unused-import
from test_api_double import play_env

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "lab", "fakes", "nvml"))
import fakenvml  # noqa: E402  pylint: disable=wrong-import-position

NAMESPACE = "kubegpu-system"
# node -> (its agent pod the inventory must choose, the driver its fake root has loaded, GPU model)
NODES = {"gpu-h100": ("agent-h100", "550.54.15", "NVIDIA H100 80GB HBM3"),
         "gpu-a100-mig": ("agent-a100", "535.104.05", "NVIDIA A100-SXM4-80GB"),
         "gpu-plain": ("agent-plain", "570.148.08", "NVIDIA L40S")}
PING, AUDIT = "ping through kubectl exec", "Audit the node"


@pytest.fixture
def kubectl_job(tmp_path, monkeypatch, api_double_factory):  # noqa: F811
    """The double with the inventory tests' fleet, each GPU node's root filesystem, the agents' host
    mount and a fake kubectl first on PATH; an AWX-like job environment (no kubeconfig in HOME)."""
    proc = api_double_factory(seed=inventory_tests.fleet())
    home = tmp_path / "home"
    home.mkdir()
    for var in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT") + tuple(
            v for v in os.environ if v.startswith("K8S_AUTH_")):
        monkeypatch.delenv(var, raising=False)
    nodes = tmp_path / "nodes"
    for name, (_pod, driver, model) in NODES.items():
        root = nodes / name
        fakenvml.write_procfs(str(root / "proc"), version=driver, gpus=[fakenvml.gpu(0, name=model)])
        for sub in ("dev", "sys/fs/cgroup", "var/lib/kubelet/device-plugins"):
            (root / sub).mkdir(parents=True, exist_ok=True)
    mount = tmp_path / "host"          # the agent pods' hostPath mount of their node's /
    mount.mkdir()
    bin_dir = str(tmp_path / "bin")
    fake_kubectl.install(bin_dir)
    log = tmp_path / "kubectl.jsonl"
    env = dict(play_env(tmp_path), HOME=str(home), PATH=bin_dir + os.pathsep + os.environ["PATH"],
               FAKE_KUBECTL_LOG=str(log), FAKE_KUBECTL_NODES=str(nodes), FAKE_KUBECTL_HOST_MOUNT=str(mount))
    yield proc, env, str(mount), log
    assert os.listdir(str(mount)) == []   # every bind mount was the pod's own, gone with it


def run(ansible, tmp_path, env, config, k8s_auth=None, audit=True):
    path = tmp_path / "cluster.gpu_nodes.yml"
    path.write_text(yaml.safe_dump(dict({"plugin": "kubegpu.fleet.gpu_nodes", "address": "kubectl"}, **config)))
    env = dict(env, **{"K8S_AUTH_" + k: v for k, v in (k8s_auth or {}).items()})
    tasks = [{"name": PING, "ansible.builtin.ping": {}}]
    if audit:
        tasks.append({"name": AUDIT, "ansible.builtin.include_role": {"name": "kubegpu.fleet.audit"}})
    plays = [{"hosts": "gpu_nodes", "gather_facts": False, "tasks": tasks}]
    return ansible.playbook(plays, inventory=str(path), env=env)


def calls(log):
    with open(str(log)) as fh:
        return [json.loads(line) for line in fh]


def test_ping_and_the_audit_run_in_each_nodes_agent_pod(ansible, tmp_path, kubectl_job):
    """The AWX credential (K8S_AUTH_HOST, _API_KEY, _SSL_CA_CERT, _VERIFY_SSL) in the inventory
    update's and the job's environment, nothing else: every node's tasks run in its own agent pod,
    and the audit reads that node's files under the host mount."""
    proc, env, mount, log = kubectl_job
    res = run(ansible, tmp_path, env, {"kubectl_host_mount": mount}, k8s_auth=inventory_tests.awx(proc))
    assert res.rc == 0, res.stdout[-4000:] + res.stderr[-3000:]
    assert sorted(h for h in res.stats if h != "localhost") == sorted(NODES)   # gpu-noip, gpu-hostile: no agent
    for host, (pod, driver, model) in NODES.items():
        assert res.task(PING, host=host)["ping"] == "pong"
        audit = res.task(AUDIT, host=host)
        assert not audit.get("failed") and not audit.get("unreachable"), audit
    facts = dict((h, res.task("kubegpu.fleet.audit : Audit the node", host=h)) for h in NODES)
    for host, (pod, driver, model) in NODES.items():
        coverage = facts[host]["ansible_facts"]["kubegpu_audit"]["coverage"]
        # the node's own root under the host mount (/proc/driver/nvidia of its pod's node)
        assert coverage["checks"]["driver"] == {"state": "yes", "detail": "loaded (%s)" % driver}, coverage
        assert coverage["gpu_models"] == {model: 1}
        assert facts[host]["ansible_facts"]["kubegpu_audit"]["node"] == host
    made = calls(log)
    assert made and all(c["refused"] is None for c in made), [c["refused"] for c in made if c["refused"]]
    assert {(c["pod"], c["node"]) for c in made} == {(pod, host) for host, (pod, _d, _m) in NODES.items()}
    for c in made:
        # kubernetes.core.kubectl's command line from K8S_AUTH_*: namespace, server, token, CA, then exec
        assert c["argv"][:c["argv"].index("exec")] == [
            "-n", NAMESPACE, "--server", proc.url, "--token", "<token>", "--certificate-authority",
            proc.info["ca_file"]], c["argv"]
        assert c["argv"][c["argv"].index("exec"):c["argv"].index("--")] == ["exec", "-i", c["pod"], "-c", "agent"]
        assert c["container"] == "agent" and c["namespace"] == NAMESPACE and c["stdin"] is True
        assert c["command"][:2] == ["/bin/sh", "-c"]
    # each exec read its pod from the API first, as kubectl does
    reads = [r for r in proc.client.reads(resource="pods", verb="get") if r["namespace"] == NAMESPACE]
    assert len(reads) == len(made) and {r["name"] for r in reads} == {p for p, _d, _m in NODES.values()}
    assert proc.token not in res.stdout + res.stderr + log.read_text()


def test_a_kubeconfig_and_context_from_the_inventory_file_reach_kubectl(ansible, tmp_path, kubectl_job):
    """The file's kubeconfig and context become ansible_kubectl_kubeconfig/_context: kubectl finds the
    server, token and CA there, with no K8S_AUTH_* anywhere."""
    proc, env, mount, log = kubectl_job
    with open(proc.kubeconfig) as fh:
        context = yaml.safe_load(fh)["contexts"][0]["name"]
    res = run(ansible, tmp_path, env, {"kubectl_host_mount": mount, "kubeconfig": proc.kubeconfig,
                                       "context": context}, audit=False)
    assert res.rc == 0, res.stdout[-4000:] + res.stderr[-3000:]
    assert all(res.task(PING, host=h)["ping"] == "pong" for h in NODES)
    made = calls(log)
    assert {(c["pod"], c["node"]) for c in made} == {(pod, host) for host, (pod, _d, _m) in NODES.items()}
    assert all(c["argv"][:c["argv"].index("exec")] == [
        "-n", NAMESPACE, "--kubeconfig", proc.kubeconfig, "--context", context] for c in made)
    assert all(c["server"] == proc.url for c in made)


def test_a_container_the_agent_pod_lacks_is_refused_as_kubectl_refuses_it(ansible, tmp_path, kubectl_job):
    """kubectl_container names a container the agent pods do not have: every host is unreachable with
    the API server's answer and nothing runs."""
    proc, env, mount, log = kubectl_job
    res = run(ansible, tmp_path, env, {"kubectl_host_mount": mount, "kubectl_container": "driver"},
              k8s_auth=inventory_tests.awx(proc), audit=False)
    for host in NODES:
        ping = res.task(PING, host=host)
        # ansible shows kubectl's stderr only at -vvvv; its exit status is kubectl's
        assert ping.get("unreachable") and ping["msg"].endswith("exited with result 1"), ping
    made = calls(log)
    assert {c["argv"][c["argv"].index("-i") + 1] for c in made} == {p for p, _d, _m in NODES.values()}
    assert all(c["refused"] == "Error from server (BadRequest): container driver is not valid for pod %s"
               % c["argv"][c["argv"].index("-i") + 1] for c in made)
    assert all("command" not in c for c in made)     # refused before anything ran


def test_validate_certs_false_in_the_file_is_kubectls_own_insecure_flag(ansible, tmp_path, kubectl_job):
    """validate_certs: false with the AWX credential's CA and VERIFY_SSL in the environment: kubectl
    gets --insecure-skip-tls-verify=true and no CA file (it refuses the two together), and runs."""
    proc, env, mount, log = kubectl_job
    res = run(ansible, tmp_path, env, {"kubectl_host_mount": mount, "validate_certs": False},
              k8s_auth=inventory_tests.awx(proc), audit=False)
    assert res.rc == 0, res.stdout[-4000:] + res.stderr[-3000:]
    assert all(res.task(PING, host=h)["ping"] == "pong" for h in NODES)
    made = calls(log)
    assert made and all(c["argv"][:c["argv"].index("exec")] == [
        "-n", NAMESPACE, "--server", proc.url, "--token", "<token>", "--insecure-skip-tls-verify=true"]
        for c in made), made[0]["argv"]


def _refusals(proc, tmp_path):
    """Command lines kubectl refuses before it streams anything (the double serves no pods/exec)."""
    ca, token, url = proc.info["ca_file"], proc.token, proc.url
    auth = ["--server", url, "--token", token, "--certificate-authority", ca]
    run_true = ["--", "/bin/sh", "-c", "true"]
    return {
        "no such pod": ["-n", NAMESPACE] + auth + ["exec", "-i", "agent-gone", "-c", "agent"] + run_true,
        "no such namespace": ["-n", "kubegpu-gone"] + auth + ["exec", "-i", "agent-h100", "-c", "agent"] + run_true,
        "wrong token": ["-n", NAMESPACE, "--server", url, "--token", "wrong-" + token, "--certificate-authority", ca,
                        "exec", "-i", "agent-h100"] + run_true,
        "untrusted server": ["-n", NAMESPACE, "--server", url, "--token", token, "exec", "-i", "agent-h100"] + run_true,
        "CA and insecure": ["-n", NAMESPACE] + auth + ["--insecure-skip-tls-verify=true", "exec", "-i", "agent-h100"]
        + run_true,
        "verify_ssl as a word": ["-n", NAMESPACE] + auth + ["--insecure-skip-tls-verify", "true"]
        + ["exec", "-i", "agent-h100"] + run_true,
        "not a bool": ["-n", NAMESPACE] + auth + ["--insecure-skip-tls-verify=maybe", "exec", "-i", "agent-h100"]
        + run_true,
        "no such context": ["-n", NAMESPACE, "--kubeconfig", proc.kubeconfig, "--context", "gone", "exec", "-i",
                            "agent-h100"] + run_true,
        "no such kubeconfig": ["-n", NAMESPACE, "--kubeconfig", str(tmp_path / "gone"), "exec", "-i", "agent-h100"]
        + run_true,
        "command without --": ["-n", NAMESPACE] + auth + ["exec", "-i", "agent-h100", "true"],
        "unknown exec flag": ["-n", NAMESPACE] + auth + ["exec", "-i", "-x", "agent-h100"] + run_true,
    }


def test_the_fake_refuses_what_kubectl_refuses_with_its_words(tmp_path, api_double_factory):  # noqa: F811
    """The real kubectl and the fake, each command line against the same double: the same exit status
    and the same message, so the connection tests' refusals are kubectl's."""
    if shutil.which(KUBECTL) is None:
        pytest.skip("kubectl is not installed (set KUBECTL=/path/to/kubectl)")
    proc = api_double_factory(seed=inventory_tests.fleet())
    home = tmp_path / "home"
    home.mkdir()
    env = dict((k, v) for k, v in os.environ.items() if k != "KUBECONFIG" and not k.startswith("K8S_AUTH_"))
    env["HOME"] = str(home)
    fake = [sys.executable, fake_kubectl.__file__]
    for case, args in _refusals(proc, tmp_path).items():
        real = subprocess.run([KUBECTL] + args, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, universal_newlines=True, timeout=120, check=False)
        ours = subprocess.run(fake + args, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, universal_newlines=True, timeout=120, check=False)
        assert real.returncode != 0, (case, real.stderr)
        assert (ours.returncode, ours.stdout, ours.stderr) == (real.returncode, real.stdout, real.stderr), case
