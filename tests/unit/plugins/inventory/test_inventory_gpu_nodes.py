"""plugin_utils/inventory/gpu_nodes (what the kubegpu.fleet.gpu_nodes inventory plugin does with what
the API returns) and the plugin class itself: GPU detection, facts from GPU Feature Discovery labels,
malformed and hostile Node objects, the paged list read, agent pod choice, host variables per address
mode and group names. The plugin against a real API server (the lab's double) is
tests/lab/test_lab_inventory_gpu_nodes.py."""
import copy

import pytest

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from ansible_collections.kubegpu.fleet.plugins.inventory.gpu_nodes import InventoryModule
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.inventory import gpu_nodes as gn
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.k8s.client import K8sError

GFD = {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
       "nvidia.com/gpu.count": "8", "nvidia.com/gpu.memory": "81559", "nvidia.com/gpu.family": "hopper",
       "nvidia.com/gpu.compute.major": "9", "nvidia.com/gpu.compute.minor": "0",
       "nvidia.com/cuda.driver-version.full": "550.54.15", "nvidia.com/cuda.runtime-version.full": "12.4",
       "nvidia.com/mig.capable": "true", "nvidia.com/mig.strategy": "single", "kubegpu.io/pool": "train"}


def node(name="gpu-0", labels=None, capacity=None, addresses=(("InternalIP", "10.0.0.1"),), **extra):
    doc = {"metadata": {"name": name, "labels": dict(GFD) if labels is None else labels},
           "spec": {},
           "status": {"capacity": {"cpu": "64", "nvidia.com/gpu": "8"} if capacity is None else capacity,
                      "addresses": [{"type": t, "address": a} for t, a in addresses],
                      "conditions": [{"type": "Ready", "status": "True"}],
                      "nodeInfo": {"kubeletVersion": "v1.32.4", "kernelVersion": "6.8.0-1015-nvidia",
                                   "osImage": "Ubuntu 24.04.1 LTS", "containerRuntimeVersion": "containerd://1.7.24",
                                   "architecture": "amd64"}}}
    doc["status"]["allocatable"] = dict(doc["status"]["capacity"])
    for key, value in extra.items():
        doc[key] = value
    return doc


# --- label and name syntax ----------------------------------------------------------------------

@pytest.mark.parametrize("key,value,ok", [
    ("nvidia.com/gpu.product", "NVIDIA-A100-SXM4-80GB", True),
    ("kubernetes.io/hostname", "", True),                      # empty values are valid
    ("app", "a" * 63, True),
    ("app", "a" * 64, False),
    ("nvidia.com/gpu.product", "A100;rm -rf /", False),
    ("nvidia.com/gpu.product", "-A100", False),
    ("nvidia.com/gpu.product", "A100\n", False),                # fullmatch, not match: no trailing newline
    ("nvidia.com/gpu.family", "\u0430mpere", False),           # Cyrillic a
    ("nvidia.com/gpu.family", "{{ lookup('pipe', 'id') }}", False),
    ("a/b/c", "x", False),
    ("Bad_Prefix.com/x", "y", False),
    ("x" * 64, "y", False),
    ("", "y", False),
    (5, "y", False),
    ("app", 5, False),
    ("app", None, False),
])
def test_valid_label(key, value, ok):
    assert gn.valid_label(key, value) is ok


@pytest.mark.parametrize("name,ok", [
    ("gpu-0", True), ("gpu-0.dc1.example.com", True), ("a" * 63, True), ("a" * 64, False),
    (".".join(["a" * 63] * 4), False), ("GPU-0", False), ("gpu_0", False), ("-gpu", False), ("gpu-", False),
    ("gpu..0", False), ("", False), (None, False), ("gpu-0\n", False), ("$(id)", False), (u"gp\u00fc", False),
])
def test_dns_subdomain(name, ok):
    assert gn.dns_subdomain(name) is ok


# --- node records ----------------------------------------------------------------------------------

def test_a_gfd_labelled_node_gives_its_gpu_facts():
    record, reason = gn.node_record(node())
    assert reason is None and record["name"] == "gpu-0" and record["problems"] == []
    assert record["gpu"] == {
        "product": "NVIDIA-H100-80GB-HBM3", "count": 8, "capacity": 8, "allocatable": 8, "memory_mib": 81559,
        "family": "hopper", "compute_capability": "9.0", "driver_version": "550.54.15", "cuda_version": "12.4",
        "mig": {"mode": "disabled", "strategy": "single", "capable": True, "config": None, "config_state": None,
                "devices": {}},
        "evidence": ["resources", "labels"]}
    assert record["addresses"] == [{"type": "InternalIP", "address": "10.0.0.1"}]
    assert record["ready"] is True and record["unschedulable"] is False
    assert record["info"]["kernel_version"] == "6.8.0-1015-nvidia"


@pytest.mark.parametrize("labels,capacity,evidence", [
    ({}, {"nvidia.com/gpu": "4"}, ["resources"]),                        # device plugin, no GFD
    ({"nvidia.com/gpu.present": "true"}, {}, ["labels"]),                 # GFD, device plugin not running
    ({"nvidia.com/gpu.product": "Tesla-T4"}, {}, ["labels"]),
    ({}, {"nvidia.com/mig-1g.10gb": "7"}, ["mig_resources"]),             # mixed strategy: no nvidia.com/gpu
])
def test_what_makes_a_gpu_node(labels, capacity, evidence):
    record, reason = gn.node_record(node(labels=labels, capacity=capacity))
    assert reason is None and record["gpu"]["evidence"] == evidence


@pytest.mark.parametrize("labels,capacity", [
    ({}, {"cpu": "64"}),
    ({"nvidia.com/gpu.present": "false"}, {"nvidia.com/gpu": "0"}),
    ({"nvidia.com/gpu.count": "0"}, {"nvidia.com/gpu": "-1"}),
    ({"nvidia.com/gpu.product": "x" * 64}, {"nvidia.com/gpu": "8Gi"}),     # invalid label, not a count
    ({}, {"nvidia.com/gpu": True}),
    ({}, {"nvidia.com/gpu": "99999999999"}),
    ({}, {"nvidia.com/mig-1g.10gb;x": "7", "amd.com/gpu": "8"}),
])
def test_a_node_without_gpus_is_left_out(labels, capacity):
    assert gn.node_record(node(labels=labels, capacity=capacity)) == (None, "not a GPU node")


@pytest.mark.parametrize("labels,driver,cuda", [
    ({"nvidia.com/cuda.driver-version.full": "570.124.06", "nvidia.com/cuda.runtime-version.full": "12.8"},
     "570.124.06", "12.8"),
    ({"nvidia.com/cuda.driver.major": "535", "nvidia.com/cuda.driver.minor": "104",
      "nvidia.com/cuda.driver.rev": "05", "nvidia.com/cuda.runtime.major": "12",
      "nvidia.com/cuda.runtime.minor": "2"}, "535.104.05", "12.2"),
    ({"nvidia.com/cuda.driver.major": "470", "nvidia.com/cuda.driver.minor": "57",
      "nvidia.com/cuda.driver.rev": ""}, "470.57", None),
    ({"nvidia.com/cuda.driver.major": "550"}, None, None),
    ({"nvidia.com/cuda.driver-version.full": "550", "nvidia.com/cuda.driver.major": "x"}, None, None),
    ({"nvidia.com/cuda.driver-version.full": "550.x.1"}, None, None),
])
def test_driver_and_cuda_versions(labels, driver, cuda):
    record, _reason = gn.node_record(node(labels=dict(labels, **{"nvidia.com/gpu.present": "true"})))
    assert (record["gpu"]["driver_version"], record["gpu"]["cuda_version"]) == (driver, cuda)


@pytest.mark.parametrize("labels,capacity,mode,strategy", [
    ({"nvidia.com/mig.strategy": "mixed", "nvidia.com/mig.config": "all-1g.10gb"},
     {"nvidia.com/mig-1g.10gb": "7"}, "enabled", "mixed"),
    ({}, {"nvidia.com/mig-3g.40gb": "2"}, "enabled", "mixed"),             # strategy inferred from resources
    ({"nvidia.com/mig.strategy": "single",
      "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"}, {"nvidia.com/gpu": "56"}, "enabled", "single"),
    ({"nvidia.com/mig.config": "all-disabled"}, {"nvidia.com/gpu": "8"}, "disabled", None),
    ({"nvidia.com/mig.capable": "false"}, {"nvidia.com/gpu": "8"}, "disabled", None),
    ({"nvidia.com/mig.capable": "true", "nvidia.com/mig.strategy": "mixed"}, {"nvidia.com/gpu": "8"},
     "disabled", "mixed"),
    ({"nvidia.com/mig.capable": "true", "nvidia.com/mig.strategy": "none"}, {"nvidia.com/gpu": "8"},
     "unknown", "none"),
    ({"nvidia.com/mig.strategy": "bogus"}, {"nvidia.com/gpu": "8"}, "unknown", None),
])
def test_mig_mode_and_strategy(labels, capacity, mode, strategy):
    record, _reason = gn.node_record(node(labels=labels, capacity=capacity))
    assert (record["gpu"]["mig"]["mode"], record["gpu"]["mig"]["strategy"]) == (mode, strategy)


@pytest.mark.parametrize("mutate,reason", [
    (lambda n: "a string", "not an object"),
    (lambda n: dict(n, metadata=None), "its name is not a valid Kubernetes node name"),
    (lambda n: dict(n, metadata={"name": "$(reboot)"}), "its name is not a valid Kubernetes node name"),
    (lambda n: dict(n, metadata={"name": "x" * 300}), "its name is not a valid Kubernetes node name"),
    (lambda n: dict(n, metadata={"name": ["gpu-0"]}), "its name is not a valid Kubernetes node name"),
])
def test_an_unnamed_or_badly_named_node_is_left_out(mutate, reason):
    assert gn.node_record(mutate(node())) == (None, reason)


def test_malformed_parts_are_dropped_and_reported():
    doc = node(labels=dict(GFD, **{"x" * 400: "v", "nvidia.com/gpu.family": u"h\u00f6pper", "ok/label": "{{ 7*7 }}"}))
    doc["status"]["addresses"] = [{"type": "InternalIP", "address": "10.0.0.1; reboot"},
                                  {"type": "InternalIP", "address": "10.0.0.2"},
                                  {"type": "Hostname", "address": "-oProxyCommand=id"},
                                  {"type": "Weird", "address": "10.0.0.3"}, "not a dict", None]
    doc["status"]["nodeInfo"] = {"kernelVersion": "k" * 5000, "osImage": "\u202eevil", "kubeletVersion": 1}
    doc["status"]["conditions"] = "Ready"
    doc["spec"] = {"unschedulable": "yes"}
    record, reason = gn.node_record(doc)
    assert reason is None
    assert record["gpu"]["family"] is None and record["gpu"]["product"] == "NVIDIA-H100-80GB-HBM3"
    assert "ok/label" not in record["labels"] and len(record["labels"]) == len(GFD) - 1
    assert record["addresses"] == [{"type": "InternalIP", "address": "10.0.0.2"}]
    assert record["info"] == {"kubelet_version": None, "kernel_version": None, "os_image": None,
                              "container_runtime": None, "architecture": None}
    assert record["ready"] is None and record["unschedulable"] is False
    assert record["problems"] == [
        "3 label(s) that are not valid Kubernetes labels ignored",
        "an address that is not a valid InternalIP ignored", "an address that is not a valid Hostname ignored",
        "an address that is not a valid address type ignored", "an address that is not a valid address type ignored",
        "an address that is not a valid address type ignored"]


@pytest.mark.parametrize("labels,addresses,problem", [
    (["nvidia.com/gpu.present"], [], "metadata.labels is not a map"),
    ({}, "10.0.0.1", "status.addresses is not a list"),
])
def test_wrong_types_are_reported(labels, addresses, problem):
    doc = node(labels=labels)
    doc["status"]["addresses"] = addresses
    record, _reason = gn.node_record(doc)
    assert problem in record["problems"] and record["gpu"]["evidence"] == ["resources"]


def test_counts_are_bounded():
    labels = dict(("l%d" % i, "v") for i in range(gn.MAX_LABELS + 10))
    labels["nvidia.com/gpu.present"] = "true"
    doc = node(labels=labels, addresses=[("InternalIP", "10.0.%d.%d" % (i // 250, i % 250)) for i in range(100)])
    record, _reason = gn.node_record(doc)
    assert len(record["labels"]) == gn.MAX_LABELS and len(record["addresses"]) == gn.MAX_ADDRESSES
    assert "more than %d labels: the rest ignored" % gn.MAX_LABELS in record["problems"]
    assert "more than %d addresses: the rest ignored" % gn.MAX_ADDRESSES in record["problems"]


# --- the paged list read ---------------------------------------------------------------------------

class PagedApi(object):
    """A client double: answers the list request with pages it was given, records each query."""

    def __init__(self, pages):
        self.pages = list(pages)
        self.queries = []

    def request(self, what, method, path, query=None, body=None, content_type=None):
        assert method == "GET" and body is None
        self.queries.append((path, dict(query or {})))
        return self.pages.pop(0)


def page(names, token=None):
    return {"kind": "NodeList", "metadata": {"continue": token} if token else {},
            "items": [{"metadata": {"name": n}} for n in names]}


def test_list_all_follows_continue_tokens_with_a_limit():
    api = PagedApi([page(["a", "b"], "t1"), page(["c", "d"], "t2"), page(["e"])])
    items, requests = gn.list_all(api, "v1", "nodes", "list Nodes", label_selector="x=y", page_size=2)
    assert [i["metadata"]["name"] for i in items] == ["a", "b", "c", "d", "e"] and requests == 3
    assert api.queries == [("/api/v1/nodes", {"limit": "2", "labelSelector": "x=y"}),
                           ("/api/v1/nodes", {"limit": "2", "labelSelector": "x=y", "continue": "t1"}),
                           ("/api/v1/nodes", {"limit": "2", "labelSelector": "x=y", "continue": "t2"})]


def test_list_all_namespaced_and_null_items():
    api = PagedApi([{"kind": "PodList", "metadata": {}, "items": None}])
    assert gn.list_all(api, "v1", "pods", "list pods", namespace="kubegpu-system") == ([], 1)
    assert api.queries[0][0] == "/api/v1/namespaces/kubegpu-system/pods"


@pytest.mark.parametrize("pages,message", [
    ([page(["a"], "t1"), page([], "t2")], "list Nodes: the API sent an empty page and asked to continue"),
    ([page(["a"], "t" * (gn.MAX_CONTINUE + 1))], "list Nodes: the API's continue token is not a string"),
    ([dict(page(["a"]), metadata={"continue": ["t"]})], "list Nodes: the API's continue token is not a string"),
    ([["not", "a", "list", "object"]], "list Nodes: the API's answer is not a list"),
    ([{"items": "nodes"}], "list Nodes: the API's answer is not a list"),
    ([page(["a", "b"], "t1"), page(["c", "d"], "t2")], "list Nodes: more than 3 objects"),
])
def test_list_all_refuses_what_would_never_end(pages, message):
    with pytest.raises(K8sError) as exc:
        gn.list_all(PagedApi(pages), "v1", "nodes", "list Nodes", page_size=2, max_items=3)
    assert str(exc.value).startswith(message)


def test_a_server_that_never_stops_paging_is_cut_at_max_items():
    class Endless(object):
        calls = 0

        def request(self, what, method, path, query=None, body=None, content_type=None):
            Endless.calls += 1
            return page(["n%d" % Endless.calls], "more")

    with pytest.raises(K8sError, match="more than 100 objects"):
        gn.list_all(Endless(), "v1", "nodes", "list Nodes", max_items=100)
    assert Endless.calls == 101


# --- agent pods --------------------------------------------------------------------------------------

def pod(name, node_name, phase="Running", ready=True, deleting=False, containers=("agent",)):
    doc = {"metadata": {"name": name}, "spec": {"nodeName": node_name,
                                                "containers": [{"name": c} for c in containers]},
           "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}
    if deleting:
        doc["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return doc


def test_agent_pods_one_per_node_ready_first():
    pods = [pod("b-ready", "gpu-0"), pod("a-not-ready", "gpu-0", ready=False), pod("c-ready", "gpu-0"),
            pod("pending", "gpu-1", phase="Pending"), pod("going", "gpu-2", deleting=True),
            pod("$(id)", "gpu-3"), pod("ok", "GPU_4"), pod("bad-container", "gpu-5", containers=("a.b",)),
            pod("nocontainers", "gpu-6", containers=()), "junk", {"metadata": None}]
    assert gn.agent_pods(pods) == {"gpu-0": {"pod": "b-ready", "container": "agent"},
                                   "gpu-5": {"pod": "bad-container", "container": None},
                                   "gpu-6": {"pod": "nocontainers", "container": None}}


# --- host variables and groups -----------------------------------------------------------------------

def record(**labels):
    rec, _reason = gn.node_record(node(labels=dict(GFD, **labels) if labels else None,
                                       addresses=(("Hostname", "gpu-0"), ("InternalIP", "10.0.0.1"),
                                                  ("InternalIP", "10.0.0.9"))))
    return rec


def test_internal_ip_and_hostname_addresses():
    variables, reason = gn.host_vars(record(), "internal_ip", "kubegpu.io/pool")
    assert reason is None and variables["ansible_host"] == "10.0.0.1"
    assert variables["kubegpu_node_name"] == "gpu-0" and variables["kubegpu_node"]["pool"] == "train"
    assert "ansible_connection" not in variables
    variables, _reason = gn.host_vars(record(), "hostname")
    assert variables["ansible_host"] == "gpu-0" and variables["kubegpu_node"]["pool"] is None
    no_ip = copy.deepcopy(record())
    no_ip["addresses"] = [{"type": "Hostname", "address": "gpu-0"}]
    assert gn.host_vars(no_ip, "internal_ip") == (None, "it has no valid InternalIP address")
    with pytest.raises(gn.InventoryError, match="address must be one of internal_ip, hostname, kubectl"):
        gn.host_vars(record(), "ssh")


def test_kubectl_address_sets_the_connection_and_host_paths_never_a_token():
    kubectl = {"namespace": "kubegpu-system", "selector": "app=agent", "container": None, "host_mount": "/host/",
               "auth": {"kubeconfig": "/etc/kubegpu/kubeconfig", "context": "prod", "api_key": "SECRET",
                        "validate_certs": False, "host": None}}
    pods = {"gpu-0": {"pod": "agent-x", "container": "agent"}}
    variables, reason = gn.host_vars(record(), "kubectl", None, pods, kubectl)
    assert reason is None
    assert {k: v for k, v in variables.items() if k.startswith("ansible_")} == {
        "ansible_connection": "kubernetes.core.kubectl", "ansible_kubectl_pod": "agent-x",
        "ansible_kubectl_namespace": "kubegpu-system", "ansible_kubectl_container": "agent",
        "ansible_kubectl_kubeconfig": "/etc/kubegpu/kubeconfig", "ansible_kubectl_context": "prod",
        # validate_certs false: kubectl's own flag, never kubernetes.core's "--insecure-skip-tls-verify False"
        "ansible_kubectl_validate_certs": "", "ansible_kubectl_extra_args": "--insecure-skip-tls-verify=true",
        "ansible_kubectl_ca_cert": ""}
    assert "SECRET" not in repr(variables)
    assert variables["kubegpu_host_root"] == "/host" and variables["kubegpu_driver_root"] == "/host"
    assert variables["kubegpu_kmsg_path"] == "/host/dev/kmsg" and variables["kubegpu_cgroup_root"] == "/host/sys/fs/cgroup"
    # the container option wins; an inline kubeconfig (a dict) is never passed on; no mount: no path variables
    kubectl.update(container="main", host_mount="", auth={"kubeconfig": {"users": [{"user": {"token": "SECRET"}}]}})
    variables, _reason = gn.host_vars(record(), "kubectl", None, pods, kubectl)
    assert variables["ansible_kubectl_container"] == "main" and "ansible_kubectl_kubeconfig" not in variables
    # validate_certs unset (or true): kept off kubectl's command line, where K8S_AUTH_VERIFY_SSL would put it
    assert variables["ansible_kubectl_validate_certs"] == "" and "ansible_kubectl_extra_args" not in variables
    assert "kubegpu_proc_path" not in variables and "SECRET" not in repr(variables)
    # a mount of / keeps the host's own paths
    kubectl["host_mount"] = "/"
    variables, _reason = gn.host_vars(record(), "kubectl", None, pods, kubectl)
    assert variables["kubegpu_host_root"] == "/" and variables["kubegpu_proc_path"] == "/proc"
    assert gn.host_vars(record(), "kubectl", None, {}, kubectl) == (
        None, "no running pod of the agent (namespace kubegpu-system, selector app=agent) on it")


def test_groups_are_safe_names():
    rec = record(**{"nvidia.com/mig.config": "all-1g.10gb"})
    assert gn.host_groups(rec, "gpu_", "kubegpu.io/pool") == [
        "gpu_nodes", "gpu_product_NVIDIA_H100_80GB_HBM3", "gpu_driver_550_54_15", "gpu_mig_enabled",
        "gpu_mig_strategy_single", "gpu_pool_train"]
    assert gn.host_groups(rec, "k8s-", None)[:2] == ["k8s_nodes", "k8s_product_NVIDIA_H100_80GB_HBM3"]
    bare, _reason = gn.node_record(node(labels={}, capacity={"nvidia.com/gpu": "1"}))
    assert gn.host_groups(bare) == ["gpu_nodes", "gpu_mig_unknown"]


def test_make_unsafe_marks_only_what_could_be_a_template():
    """A string with braces is never templated; every other value is returned as it is (the same object):
    AWX would store a wrapped value as {"__ansible_unsafe": ...}."""
    plain = ["10.0.0.1", 3, None]
    value = gn.make_unsafe({"a": "{{ 7 * 7 }}", "b": plain, "c": "x}", "{{ 6 * 7 }}": "plain"})
    templar = Templar(loader=DataLoader())
    assert templar.template(value["a"]) == "{{ 7 * 7 }}" and templar.template(value["c"]) == "x}"
    assert [templar.template(k) for k in value if "{" in k] == ["{{ 6 * 7 }}"]
    assert all(a is b for a, b in zip(value["b"], plain)) and value["{{ 6 * 7 }}"] == "plain"


# --- the plugin class (its parse() runs in tests/lab/test_lab_inventory_gpu_nodes.py) ----------------

@pytest.mark.parametrize("name,ok", [("cluster.gpu_nodes.yml", True), ("gpu_nodes.yaml", True),
                                     ("cluster.gpu_nodes.json", False), ("inventory.yml", False)])
def test_verify_file(tmp_path, name, ok):
    path = tmp_path / name
    path.write_text("plugin: kubegpu.fleet.gpu_nodes\n")
    assert InventoryModule().verify_file(str(path)) is ok
    assert InventoryModule().verify_file(str(tmp_path / "missing.gpu_nodes.yml")) is False
