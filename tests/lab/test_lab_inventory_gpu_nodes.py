"""The kubegpu.fleet.gpu_nodes inventory plugin through the real ``ansible-inventory`` (``--graph``,
``--list``) and ``ansible-playbook`` against the API double over HTTPS, with the credentials an AWX
inventory source gets (K8S_AUTH_* only, no kubeconfig in HOME) or a kubeconfig file.
"""
import json
import os
import subprocess

import pytest
import yaml

from apidouble_fixture import api_double, api_double_factory  # noqa: F401 pylint: disable=unused-import
from test_api_double import node, play_env

POOL = "kubegpu.io/pool"
PWNED = "/tmp/kubegpu-inventory-pwned"


def addressed(doc, *addresses):
    doc["status"]["addresses"] = [{"type": t, "address": a} for t, a in addresses]
    return doc


def running_pod(name, node_name, labels=None, ready=True, namespace="kubegpu-system"):
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": labels or {"app.kubernetes.io/name": "kubegpu-node-agent"}},
            "spec": {"nodeName": node_name, "containers": [{"name": "agent", "image": "kubegpu/agent:1"}]},
            "status": {"phase": "Running",
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def fleet():
    """Five GPU nodes of different kinds, a CPU node, a hostile node, and agent pods on three GPU nodes."""
    h100 = addressed(node("gpu-h100", labels={
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8",
        "nvidia.com/gpu.memory": "81559", "nvidia.com/gpu.family": "hopper",
        "nvidia.com/gpu.compute.major": "9", "nvidia.com/gpu.compute.minor": "0",
        "nvidia.com/cuda.driver-version.full": "550.54.15", "nvidia.com/cuda.runtime-version.full": "12.4",
        "nvidia.com/mig.capable": "true", "nvidia.com/mig.strategy": "single", POOL: "train"}),
        ("InternalIP", "10.0.0.11"), ("Hostname", "gpu-h100"))
    a100 = addressed(node("gpu-a100-mig", gpus=0, mig={"nvidia.com/mig-1g.10gb": 7}, labels={
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/cuda.driver.major": "535",
        "nvidia.com/cuda.driver.minor": "104", "nvidia.com/cuda.driver.rev": "05",
        "nvidia.com/cuda.runtime.major": "12", "nvidia.com/cuda.runtime.minor": "2",
        "nvidia.com/mig.capable": "true", "nvidia.com/mig.strategy": "mixed",
        "nvidia.com/mig.config": "all-1g.10gb", "nvidia.com/mig.config.state": "success", POOL: "infer"}),
        ("InternalIP", "10.0.0.12"))
    bare = node("gpu-plain", gpus=4)            # device plugin only: capacity, no GFD labels
    del bare["metadata"]["labels"]["nvidia.com/gpu.present"]
    bare = addressed(bare, ("InternalIP", "fd00::13"))
    no_ip = addressed(node("gpu-noip", gpus=2), ("Hostname", "gpu-noip"))
    cpu = addressed(node("cpu-0", gpus=0), ("InternalIP", "10.0.0.20"))
    hostile = addressed(node("gpu-hostile", labels={
        "nvidia.com/gpu.product": "A100;rm -rf /",                                   # not a label value
        "nvidia.com/gpu.family": "\u0430mpere",                                      # not ASCII
        "nvidia.com/cuda.driver-version.full": "9" * 5000,                           # too long
        POOL: "{{ lookup('ansible.builtin.pipe', 'touch %s') }}" % PWNED,             # a template
        "nvidia.com/mig.config": "x" * 63,                                            # valid, long
        "nvidia.com/gpu.count": "4"}),
        ("InternalIP", "10.0.0.14 -oProxyCommand=touch%s" % PWNED), ("InternalIP", "10.0.0.14"),
        ("Hostname", "$(touch %s)" % PWNED))
    hostile["status"]["nodeInfo"]["osImage"] = "{{ lookup('ansible.builtin.pipe', 'touch %s') }}" % PWNED
    pods = [running_pod("agent-h100", "gpu-h100"),
            running_pod("agent-a100-old", "gpu-a100-mig", ready=False), running_pod("agent-a100", "gpu-a100-mig"),
            running_pod("agent-plain", "gpu-plain"),
            running_pod("other-on-noip", "gpu-noip", labels={"app": "something-else"}),
            running_pod("agent-cpu", "cpu-0")]
    return [h100, a100, bare, no_ip, cpu, hostile,
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kubegpu-system"}}] + pods


@pytest.fixture
def cluster_job(tmp_path, monkeypatch, api_double_factory):
    """The double with fleet(), and a job environment with no kubeconfig (an AWX inventory update)."""
    proc = api_double_factory(seed=fleet())
    home = tmp_path / "home"
    home.mkdir()
    for var in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT") + tuple(
            v for v in os.environ if v.startswith("K8S_AUTH_")):
        monkeypatch.delenv(var, raising=False)
    if os.path.exists(PWNED):
        os.unlink(PWNED)
    yield proc, home
    assert not os.path.exists(PWNED), "a node label was executed"


def inventory(ansible, tmp_path, home, config, *args, k8s_auth=None, name="cluster.gpu_nodes.yml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(dict({"plugin": "kubegpu.fleet.gpu_nodes"}, **config)))
    env = ansible.env(play_env(tmp_path))
    env.update({"HOME": str(home), "ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED": "1"})
    env.update(("K8S_AUTH_" + k, v) for k, v in (k8s_auth or {}).items())
    binary = os.path.join(os.path.dirname(ansible.python), "ansible-inventory")
    return subprocess.run([binary, "-i", str(path)] + list(args), cwd=str(tmp_path), env=env,
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=300, check=False)


def awx(proc):
    """What the credential type "OpenShift or Kubernetes API Bearer Token" injects."""
    return {"HOST": proc.url, "API_KEY": proc.token, "SSL_CA_CERT": proc.info["ca_file"], "VERIFY_SSL": "true"}


def plain(value):
    """--list output without ansible-core's unsafe markers (2.19 marks every value an inventory
    plugin set; older releases the values it wrapped)."""
    if isinstance(value, dict):
        if set(value) == {"__ansible_unsafe"}:
            return value["__ansible_unsafe"]
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def listed(run):
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "Traceback" not in run.stderr
    return plain(json.loads(run.stdout))


def squash(text):
    """Text without whitespace: ansible-core before 2.19 wraps warnings at 80 columns, also inside words."""
    return "".join(text.split())


def hosts_of(data, group):
    return sorted(data.get(group, {}).get("hosts", []))


def test_graph_groups_by_product_driver_mig_and_pool(ansible, tmp_path, cluster_job):
    proc, home = cluster_job
    run = inventory(ansible, tmp_path, home, {"pool_label": POOL}, "--graph", k8s_auth=awx(proc))
    assert run.returncode == 0, run.stderr[-3000:]
    graph = run.stdout
    for line in ("@gpu_nodes:", "@gpu_product_NVIDIA_H100_80GB_HBM3:", "@gpu_product_NVIDIA_A100_SXM4_80GB:",
                 "@gpu_driver_550_54_15:", "@gpu_driver_535_104_05:", "@gpu_mig_enabled:", "@gpu_mig_disabled:",
                 "@gpu_mig_unknown:", "@gpu_mig_strategy_single:", "@gpu_mig_strategy_mixed:",
                 "@gpu_pool_train:", "@gpu_pool_infer:"):
        assert line in graph, graph
    data = listed(inventory(ansible, tmp_path, home, {"pool_label": POOL}, "--list", k8s_auth=awx(proc)))
    assert hosts_of(data, "gpu_nodes") == ["gpu-a100-mig", "gpu-h100", "gpu-hostile", "gpu-plain"]
    assert hosts_of(data, "gpu_product_NVIDIA_H100_80GB_HBM3") == ["gpu-h100"]
    assert hosts_of(data, "gpu_driver_535_104_05") == ["gpu-a100-mig"]
    assert hosts_of(data, "gpu_mig_enabled") == ["gpu-a100-mig", "gpu-hostile"]   # mig.config set
    assert hosts_of(data, "gpu_mig_disabled") == ["gpu-h100"]
    assert hosts_of(data, "gpu_mig_unknown") == ["gpu-plain"]
    assert hosts_of(data, "gpu_pool_train") == ["gpu-h100"] and hosts_of(data, "gpu_pool_infer") == ["gpu-a100-mig"]
    # the CPU node is no host; gpu-noip has no InternalIP and is left out with a warning
    every = set(data["_meta"]["hostvars"])
    assert "cpu-0" not in every and "gpu-noip" not in every
    assert squash("left out node gpu-noip: it has no valid InternalIP address") in squash(run.stderr)
    assert proc.token not in run.stdout + run.stderr


def test_list_host_vars_are_the_nodes_gpu_facts(ansible, tmp_path, cluster_job):
    proc, home = cluster_job
    data = listed(inventory(ansible, tmp_path, home, {"pool_label": POOL}, "--list", k8s_auth=awx(proc)))
    h100 = data["_meta"]["hostvars"]["gpu-h100"]
    assert h100["ansible_host"] == "10.0.0.11" and h100["kubegpu_node_name"] == "gpu-h100"
    assert h100["kubegpu_gpu"] == {
        "product": "NVIDIA-H100-80GB-HBM3", "count": 8, "capacity": 8, "allocatable": 8, "memory_mib": 81559,
        "family": "hopper", "compute_capability": "9.0", "driver_version": "550.54.15", "cuda_version": "12.4",
        "mig": {"mode": "disabled", "strategy": "single", "capable": True, "config": None, "config_state": None,
                "devices": {}},
        "evidence": ["resources", "labels"]}
    assert h100["kubegpu_node"]["addresses"] == [{"type": "InternalIP", "address": "10.0.0.11"},
                                                 {"type": "Hostname", "address": "gpu-h100"}]
    assert h100["kubegpu_node"]["pool"] == "train" and h100["kubegpu_node"]["ready"] is True
    assert h100["kubegpu_node"]["info"]["kubelet_version"] == "v1.32.4"
    a100 = data["_meta"]["hostvars"]["gpu-a100-mig"]["kubegpu_gpu"]
    assert a100["driver_version"] == "535.104.05" and a100["cuda_version"] == "12.2" and a100["count"] is None
    assert a100["mig"] == {"mode": "enabled", "strategy": "mixed", "capable": True, "config": "all-1g.10gb",
                           "config_state": "success", "devices": {"1g.10gb": 7}}
    bare = data["_meta"]["hostvars"]["gpu-plain"]
    assert bare["ansible_host"] == "fd00::13" and bare["kubegpu_gpu"]["count"] == 4
    assert bare["kubegpu_gpu"]["product"] is None and bare["kubegpu_gpu"]["evidence"] == ["resources"]


def test_hostile_labels_and_addresses_are_dropped_never_templated(ansible, tmp_path, cluster_job):
    """Labels that are no valid Kubernetes labels (injection-like, unicode, 5000 characters, a Jinja
    template) are ignored with a warning; the valid ones still group; an address that is no IP is not used."""
    proc, home = cluster_job
    run = inventory(ansible, tmp_path, home, {"pool_label": POOL, "compose": {"pool_seen": "kubegpu_node.pool"},
                                              "keyed_groups": [{"key": "kubegpu_gpu.mig.config", "prefix": "cfg"}]},
                    "--list", k8s_auth=awx(proc))
    data = listed(run)
    hostile = data["_meta"]["hostvars"]["gpu-hostile"]
    assert hostile["ansible_host"] == "10.0.0.14"
    assert hostile["kubegpu_node"]["addresses"] == [{"type": "InternalIP", "address": "10.0.0.14"}]
    gpu = hostile["kubegpu_gpu"]
    assert gpu["product"] is None and gpu["family"] is None and gpu["driver_version"] is None and gpu["count"] == 4
    assert hostile["kubegpu_node"]["pool"] is None and hostile["pool_seen"] in (None, "")   # "" before 2.19
    assert POOL not in hostile["kubegpu_node"]["labels"]
    # node info may hold braces: kept as text (the playbook test shows it is never templated)
    assert hostile["kubegpu_node"]["info"]["os_image"] == "{{ lookup('ansible.builtin.pipe', 'touch %s') }}" % PWNED
    assert hosts_of(data, "cfg_" + "x" * 63) == ["gpu-hostile"]
    assert not [g for g in data if "rm" in g or "lookup" in g or "touch" in g]
    warning = squash(run.stderr)
    assert squash("node gpu-hostile: 4 label(s) that are not valid Kubernetes labels ignored") in warning
    assert squash("an address that is not a valid InternalIP ignored") in warning
    assert squash("an address that is not a valid Hostname ignored") in warning
    assert not os.path.exists(PWNED)


@pytest.mark.parametrize("mode", ["hostname", "kubectl"])
def test_address_modes(ansible, tmp_path, cluster_job, mode):
    proc, home = cluster_job
    run = inventory(ansible, tmp_path, home, {"address": mode}, "--list", k8s_auth=awx(proc))
    data = listed(run)
    hostvars = data["_meta"]["hostvars"]
    if mode == "hostname":
        assert sorted(hostvars) == ["gpu-a100-mig", "gpu-h100", "gpu-hostile", "gpu-noip", "gpu-plain"]
        assert all(v["ansible_host"] == k for k, v in hostvars.items())
        assert all("ansible_connection" not in v for v in hostvars.values())
        return
    # kubectl: the agent pod on each node (the Ready one of two), nodes without an agent pod left out
    assert sorted(hostvars) == ["gpu-a100-mig", "gpu-h100", "gpu-plain"]
    h100 = hostvars["gpu-h100"]
    assert {k: v for k, v in h100.items() if k.startswith("ansible_")} == {
        "ansible_connection": "kubernetes.core.kubectl", "ansible_kubectl_pod": "agent-h100",
        "ansible_kubectl_namespace": "kubegpu-system", "ansible_kubectl_container": "agent",
        "ansible_kubectl_validate_certs": ""}
    assert hostvars["gpu-a100-mig"]["ansible_kubectl_pod"] == "agent-a100"
    assert h100["kubegpu_proc_path"] == "/host/proc" and h100["kubegpu_host_root"] == "/host"
    assert h100["kubegpu_checkpoint_path"] == "/host/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"
    assert squash("left out node gpu-noip: no running pod of the agent (namespace kubegpu-system, selector "
                  "app.kubernetes.io/name=kubegpu-node-agent) on it") in squash(run.stderr)
    pod_reads = proc.client.reads(resource="pods")
    assert len(pod_reads) == 1 and pod_reads[0]["namespace"] == "kubegpu-system"   # one page, one namespace


def test_kubeconfig_and_context_options(ansible, tmp_path, cluster_job):
    """The file's own connection options: a kubeconfig path and its context, no K8S_AUTH_* at all."""
    proc, home = cluster_job
    with open(proc.kubeconfig, encoding="utf-8") as fh:
        context = yaml.safe_load(fh)["contexts"][0]["name"]
    data = listed(inventory(ansible, tmp_path, home, {"kubeconfig": proc.kubeconfig, "context": context}, "--list"))
    assert hosts_of(data, "gpu_nodes") == ["gpu-a100-mig", "gpu-h100", "gpu-hostile", "gpu-plain"]


def test_host_and_token_in_the_file_with_kubernetes_core_aliases(ansible, tmp_path, cluster_job):
    """host, api_key and verify_ssl (validate_certs' alias) written in the inventory file, no environment."""
    proc, home = cluster_job
    run = inventory(ansible, tmp_path, home, {"host": proc.url, "api_key": proc.token, "verify_ssl": False}, "--list")
    assert hosts_of(listed(run), "gpu_nodes") == ["gpu-a100-mig", "gpu-h100", "gpu-hostile", "gpu-plain"]
    assert proc.token not in run.stdout + run.stderr


def test_a_wrong_token_fails_the_source_cleanly(ansible, tmp_path, cluster_job):
    proc, home = cluster_job
    wrong = "wrong-" + proc.token[::-1]
    run = inventory(ansible, tmp_path, home, {}, "--list", k8s_auth=dict(awx(proc), API_KEY=wrong))
    out = squash(run.stdout + run.stderr)
    assert run.returncode != 0
    assert squash("kubegpu.fleet.gpu_nodes: list Nodes: HTTP 401 Unauthorized (credentials from host %s with a "
                  "bearer token)" % proc.url) in out
    assert "Traceback" not in out and wrong not in out and proc.token not in out


def test_an_unreachable_api_fails_the_source_cleanly(ansible, tmp_path, cluster_job):
    proc, home = cluster_job
    run = inventory(ansible, tmp_path, home, {"validate_certs": True}, "--list",
                    k8s_auth={"HOST": proc.url, "API_KEY": proc.token})   # no CA: the certificate is refused
    out = squash(run.stdout + run.stderr)
    assert run.returncode != 0 and squash("kubegpu.fleet.gpu_nodes: list Nodes:") in out
    assert "CERTIFICATE_VERIFY_FAILED" in out and "Traceback" not in out and proc.token not in out


def test_a_playbook_runs_on_the_groups(ansible, tmp_path, cluster_job):
    """ansible-playbook with the inventory file: the groups select hosts, the variables are there."""
    proc, home = cluster_job
    path = tmp_path / "cluster.gpu_nodes.yml"
    path.write_text(yaml.safe_dump({"plugin": "kubegpu.fleet.gpu_nodes", "pool_label": POOL}))
    plays = [{"hosts": "gpu_pool_train:gpu_mig_enabled", "gather_facts": False, "connection": "local",
              "tasks": [{"name": "facts", "ansible.builtin.debug": {
                  "msg": "{{ kubegpu_node_name }} {{ kubegpu_gpu.product | default('-', true) }} "
                         "{{ kubegpu_node.pool | default('-', true) }}"}},
                        {"name": "os", "ansible.builtin.debug": {"msg": "{{ kubegpu_node.info.os_image }}"}}]}]
    env = dict(play_env(tmp_path), HOME=str(home), **{"K8S_AUTH_" + k: v for k, v in awx(proc).items()})
    res = ansible.playbook(plays, inventory=str(path), env=env)
    assert res.rc == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert res.task("facts", host="gpu-h100")["msg"] == "gpu-h100 NVIDIA-H100-80GB-HBM3 train"
    assert res.task("facts", host="gpu-a100-mig")["msg"] == "gpu-a100-mig NVIDIA-A100-SXM4-80GB infer"
    # the hostile node is in gpu_mig_enabled: its template label is never rendered
    assert res.task("facts", host="gpu-hostile")["msg"] == "gpu-hostile - -"
    assert res.task("os", host="gpu-hostile")["msg"] == "{{ lookup('ansible.builtin.pipe', 'touch %s') }}" % PWNED
    assert sorted(h for h in res.stats) == ["gpu-a100-mig", "gpu-h100", "gpu-hostile"]


@pytest.mark.parametrize("config,messages", [
    ({"address": "kubectl", "kubectl_namespace": "Bad_NS"}, ["address=kubectl needs kubectl_namespace"]),
    ({"pool_label": "not a label/"}, ["pool_label 'not a label/' is not a Kubernetes label key"]),
    ({"address": "ssh"}, ["Invalid value", "ssh", "address"]),   # ansible-core's choices check (wording varies)
])
def test_bad_options_fail_before_any_request(ansible, tmp_path, cluster_job, config, messages):
    proc, home = cluster_job
    run = inventory(ansible, tmp_path, home, config, "--list", k8s_auth=awx(proc))
    out = squash(run.stdout + run.stderr)
    assert run.returncode != 0 and all(squash(m) in out for m in messages) and "Traceback" not in out
    assert proc.client.reads(resource="nodes") == []


def test_the_cache_serves_a_second_run_without_the_api(ansible, tmp_path, cluster_job):
    """cache: true with the jsonfile cache: the first run reads the API (one page of Nodes), the second
    reads nothing and gives the same inventory, the token is not in the cache; without the cache it reads again."""
    proc, home = cluster_job
    cache_dir = tmp_path / "cache"
    config = {"pool_label": POOL, "cache": True, "cache_plugin": "ansible.builtin.jsonfile",
              "cache_connection": str(cache_dir), "cache_timeout": 3600}
    first = listed(inventory(ansible, tmp_path, home, config, "--list", k8s_auth=awx(proc)))
    assert len(proc.client.reads(resource="nodes")) == 1
    cached = "".join(p.read_text() for p in cache_dir.iterdir())
    assert "gpu-h100" in cached and proc.token not in cached
    second = listed(inventory(ansible, tmp_path, home, config, "--list", k8s_auth=awx(proc)))
    assert second == first and len(proc.client.reads(resource="nodes")) == 1
    for entry in cache_dir.iterdir():      # an expired or emptied cache: read again
        entry.unlink()
    assert listed(inventory(ansible, tmp_path, home, config, "--list", k8s_auth=awx(proc))) == first
    assert len(proc.client.reads(resource="nodes")) == 2
