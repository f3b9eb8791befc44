"""The Kubernetes API double, proven through the real clients: kubectl, the kubernetes Python
client and kubernetes.core modules run by ansible-playbook.

The double runs as a child process per test (``apidouble_fixture``); every test stops it and
checks that it exited.
"""
import json
import os
import socket
import threading
import time

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from apidouble_fixture import api_double, api_double_factory, kubectl  # noqa: F401 pylint: disable=unused-import

from kubegpu_lab.apidouble import resources  # noqa: E402
from kubegpu_lab.apidouble.errors import ApiError  # noqa: E402
from kubegpu_lab.apidouble.patch import strategic_merge_patch  # noqa: E402
from kubegpu_lab.apidouble.selectors import parse_label_selector  # noqa: E402
from kubegpu_lab.apidouble.store import Context, Store  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PDB_MESSAGE = "Cannot evict pod as it would violate the pod's disruption budget."
RS_UID = "5e1b6c7a-0000-4000-8000-000000000001"
DS_NAME = "nvidia-device-plugin-daemonset"


# --- manifests ----------------------------------------------------------------------------------

def node(name, gpus=8, ready="True", labels=None, mig=None, unschedulable=False):
    capacity = {"cpu": "64", "memory": "263848576Ki", "pods": "110"}
    if gpus:
        capacity["nvidia.com/gpu"] = str(gpus)
    for res, count in (mig or {}).items():
        capacity[res] = str(count)
    lab = {"kubernetes.io/hostname": name}
    if gpus or mig:
        lab["nvidia.com/gpu.present"] = "true"
    lab.update(labels or {})
    doc = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": lab},
           "spec": {"unschedulable": True} if unschedulable else {},
           "status": {"capacity": capacity, "allocatable": dict(capacity),
                      "conditions": [{"type": "Ready", "status": ready, "reason": "KubeletReady",
                                      "message": "kubelet is posting ready status"}],
                      "nodeInfo": {"bootID": "boot-%s-1" % name, "kubeletVersion": "v1.32.4",
                                   "machineID": "m-" + name, "systemUUID": "u-" + name,
                                   "kernelVersion": "6.1.0-28-amd64", "osImage": "Debian GNU/Linux 12 (bookworm)",
                                   "containerRuntimeVersion": "containerd://1.7.24", "kubeProxyVersion": "",
                                   "operatingSystem": "linux", "architecture": "amd64"}}}
    return doc


def device_plugin_ds(env=None):
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": DS_NAME, "namespace": "gpu-operator"},
            "spec": {"selector": {"matchLabels": {"name": "nvidia-device-plugin-ds"}},
                     "template": {"metadata": {"labels": {"name": "nvidia-device-plugin-ds"}},
                                  "spec": {"nodeSelector": {"nvidia.com/gpu.present": "true"},
                                           "containers": [{"name": "nvidia-device-plugin-ctr",
                                                           "image": "nvcr.io/nvidia/k8s-device-plugin:v0.14.5",
                                                           "env": env or [{"name": "FAIL_ON_INIT_ERROR",
                                                                           "value": "false"}]}]}}}}


def replicaset(name="train-rs", replicas=2, uid=RS_UID, app="train"):
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": name, "namespace": "default", "uid": uid},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": app}},
                     "template": {"metadata": {"labels": {"app": app}},
                                  "spec": {"containers": [{"name": "main", "image": "trainer:1"}]}}}}


def pod(name, node_name, app="train", owner_uid=RS_UID, owner="train-rs", empty_dir=False, ready=True):
    doc = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "default", "labels": {"app": app}},
           "spec": {"nodeName": node_name, "containers": [{"name": "main", "image": "trainer:1"}]}}
    if owner_uid:
        doc["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": owner,
                                               "uid": owner_uid, "controller": True}]
    if empty_dir:
        doc["spec"]["volumes"] = [{"name": "scratch", "emptyDir": {}}]
        doc["spec"]["containers"][0]["volumeMounts"] = [{"name": "scratch", "mountPath": "/scratch"}]
    if not ready:
        doc["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}
    return doc


def pdb(name="train-pdb", min_available=None, max_unavailable=None, app="train"):
    spec = {"selector": {"matchLabels": {"app": app}}}
    if min_available is not None:
        spec["minAvailable"] = min_available
    if max_unavailable is not None:
        spec["maxUnavailable"] = max_unavailable
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": "default"}, "spec": spec}


def cluster(min_available=1, extra=()):
    """Three GPU nodes and a CPU node, the device plugin, a 2-replica training job with a PDB."""
    docs = [node("gpu-0"), node("gpu-1"), node("gpu-2", gpus=0, mig={"nvidia.com/mig-1g.10gb": 7}),
            node("cpu-0", gpus=0),
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpu-operator"}},
            device_plugin_ds(), replicaset(),
            pod("train-0", "gpu-0"), pod("train-1", "gpu-1", empty_dir=True),
            pdb(min_available=min_available)]
    return docs + list(extra)


# --- helpers ------------------------------------------------------------------------------------

class Clients(object):
    def __init__(self, proc):
        self.api_client = k8s_config.new_client_from_config(config_file=proc.kubeconfig)
        self.core = k8s.CoreV1Api(self.api_client)
        self.apps = k8s.AppsV1Api(self.api_client)
        self.policy = k8s.PolicyV1Api(self.api_client)
        self.coord = k8s.CoordinationV1Api(self.api_client)

    def close(self):
        self.api_client.close()


@pytest.fixture
def clients():
    made = []

    def make(proc):
        c = Clients(proc)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


def body(exc):
    return json.loads(exc.body)


def lease(name, renew=None):
    renew = renew if renew is not None else time.time()
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime(renew))
    return {"metadata": {"name": name}, "spec": {"holderIdentity": name, "leaseDurationSeconds": 40,
                                                 "renewTime": stamp}}


def node_entries(history, name):
    return [e for e in history if e["resource"] == "nodes" and e["name"] == name and e["verb"] == "patch"]


def play_env(tmp_path):
    # TMPDIR: the kubernetes dynamic client caches discovery in tempfile.gettempdir().
    # ANSIBLE_CALLBACKS_ENABLED: tests/lib/ansible_runner.py sets it to "", which ansible-core 2.19
    # reads as one callback with an empty name and aborts (reported to the lead).
    return {"TMPDIR": str(tmp_path), "ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.json"}


def drain_play(kubeconfig, node_name, **options):
    args = {"kubeconfig": kubeconfig, "name": node_name, "state": options.pop("state", "drain")}
    task = {"name": "drain", "kubernetes.core.k8s_drain": args}
    if options:
        task["kubernetes.core.k8s_drain"]["delete_options"] = options
    return [{"hosts": "localhost", "gather_facts": False, "tasks": [task]}]


# --- pure logic (no server) ---------------------------------------------------------------------

def test_strategic_merge_patch_merges_env_by_name_and_honours_directives():
    ds = device_plugin_ds(env=[{"name": "A", "value": "1"}, {"name": "B", "value": "2"}])
    patched = strategic_merge_patch(ds, {"spec": {"template": {"spec": {"containers": [
        {"name": "nvidia-device-plugin-ctr", "env": [{"name": "B", "value": "3"}, {"name": "C", "value": "4"},
                                                     {"name": "A", "$patch": "delete"}]}]}}}}, "DaemonSet")
    env = patched["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env == [{"name": "B", "value": "3"}, {"name": "C", "value": "4"}]
    assert patched["spec"]["template"]["spec"]["containers"][0]["image"].endswith("v0.14.5")
    replaced = strategic_merge_patch(ds, {"spec": {"template": {"spec": {"containers": [
        {"$patch": "replace"}, {"name": "other", "image": "x"}]}}}}, "DaemonSet")
    assert replaced["spec"]["template"]["spec"]["containers"] == [{"name": "other", "image": "x"}]
    n = node("gpu-0")
    n2 = strategic_merge_patch(n, {"status": {"conditions": [{"type": "Ready", "status": "False"}],
                                              "$setElementOrder/conditions": [{"type": "Ready"}]},
                                   "metadata": {"labels": {"kubernetes.io/hostname": None}}}, "Node")
    assert n2["status"]["conditions"] == [{"type": "Ready", "status": "False", "reason": "KubeletReady",
                                           "message": "kubelet is posting ready status"}]
    assert "kubernetes.io/hostname" not in n2["metadata"]["labels"]
    # a list without a merge key is replaced, not merged
    n3 = strategic_merge_patch({"spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]}},
                               {"spec": {"taints": [{"key": "b", "effect": "NoSchedule"}]}}, "Node")
    assert n3["spec"]["taints"] == [{"key": "b", "effect": "NoSchedule"}]
    with pytest.raises(ApiError) as err:
        strategic_merge_patch(ds, {"spec": {"template": {"spec": {"containers": [{"image": "x"}]}}}}, "DaemonSet")
    assert err.value.code == 422


@pytest.mark.parametrize("text,labels,expected", [
    ("app=train", {"app": "train"}, True),
    ("app==train,tier!=web", {"app": "train"}, True),
    ("app!=train", {}, True),
    ("app in (a, train)", {"app": "train"}, True),
    ("app notin (a,train)", {"app": "train"}, False),
    ("app notin (a,b)", {}, True),
    ("gpu", {"gpu": ""}, True),
    ("!gpu", {"gpu": "x"}, False),
    ("count>3", {"count": "4"}, True),
    ("count<3", {"count": "4"}, False),
])
def test_label_selector_grammar(text, labels, expected):
    assert parse_label_selector(text).matches(labels) is expected


def test_label_selector_rejects_bad_syntax():
    for bad in ("app in ()", "app=(x", "=x", "app in (a", "a b c"):
        with pytest.raises(ApiError) as err:
            parse_label_selector(bad)
        assert err.value.code == 400, bad


def test_pdb_status_math_matches_disruption_controller(tmp_path):
    """maxUnavailable percentages scale by the controller's replicas, rounding up."""
    store = Store(str(tmp_path / "s"))
    try:
        store.load_objects([node("gpu-0"), node("gpu-1"), replicaset(replicas=3),
                            pod("train-0", "gpu-0"), pod("train-1", "gpu-1"),
                            pod("train-2", "gpu-1", ready=False),
                            pdb(max_unavailable="34%")])
        got = store.get(resources.find("policy", "v1", "poddisruptionbudgets"), "default", "train-pdb")["status"]
        # expected 3 (RS replicas), maxUnavailable ceil(3*0.34)=2 -> desired 1, healthy 2 -> 1 allowed
        assert (got["expectedPods"], got["desiredHealthy"], got["currentHealthy"], got["disruptionsAllowed"]) == \
            (3, 1, 2, 1)
        assert got["conditions"][0]["reason"] == "SufficientPods"
        # pods whose controller is unknown make the real controller fail safe
        store.load_objects([pod("orphan", "gpu-0", owner_uid="nope", owner="gone-rs"),
                            pdb("orphan-pdb", max_unavailable=1, app="train")])
        bad = store.get(resources.find("policy", "v1", "poddisruptionbudgets"), "default", "orphan-pdb")["status"]
        assert bad["disruptionsAllowed"] == 0
        assert bad["conditions"][0]["reason"] == "SyncFailed"
        assert 'found no controllers for pod "orphan"' in bad["conditions"][0]["message"]
    finally:
        store.close()


def test_daemonset_controller_follows_node_selector_taints_and_template(tmp_path):
    store = Store(str(tmp_path / "s"))
    pods = resources.find("", "v1", "pods")
    try:
        tainted = node("gpu-2")
        tainted["spec"]["taints"] = [{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}]
        store.load_objects([node("gpu-0"), node("gpu-1", unschedulable=True), tainted, node("cpu-0", gpus=0),
                            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpu-operator"}},
                            device_plugin_ds()])
        listed = store.list(pods, "gpu-operator")["items"]
        # cordoned gpu-1 still gets its daemon pod; the untolerated taint and the CPU node do not
        assert sorted(p["spec"]["nodeName"] for p in listed) == ["gpu-0", "gpu-1"]
        for p in listed:
            ref = p["metadata"]["ownerReferences"][0]
            assert (ref["kind"], ref["name"], ref["controller"]) == ("DaemonSet", DS_NAME, True)
            assert p["status"]["phase"] == "Running"
        ctx = Context(actor="api")
        store.patch(ctx, resources.find("apps", "v1", "daemonsets"), "gpu-operator", DS_NAME, "strategic",
                    {"spec": {"template": {"spec": {"containers": [{"name": "nvidia-device-plugin-ctr",
                                                                    "env": [{"name": "PASS_DEVICE_SPECS",
                                                                             "value": "true"}]}]}}}})
        ds = store.get(resources.find("apps", "v1", "daemonsets"), "gpu-operator", DS_NAME)
        assert ds["metadata"]["generation"] == 2
        assert ds["status"]["updatedNumberScheduled"] == 2 and ds["status"]["observedGeneration"] == 2
        for p in store.list(pods, "gpu-operator")["items"]:
            assert {"name": "PASS_DEVICE_SPECS", "value": "true"} in p["spec"]["containers"][0]["env"]
            assert p["metadata"]["labels"]["pod-template-generation"] == "2"
    finally:
        store.close()


def test_watch_from_a_compacted_resource_version_is_expired(tmp_path):
    store = Store(str(tmp_path / "s"), watch_log_size=5)
    nodes = resources.find("", "v1", "nodes")
    try:
        store.load_objects([node("n%d" % i) for i in range(8)])
        labels = parse_label_selector("")
        with pytest.raises(ApiError) as err:
            store.watch_events(nodes, 1, None, labels, [])
        assert err.value.code == 410 and err.value.message.startswith("too old resource version: 1 (")
        events, upto = store.watch_events(nodes, store.rv - 1, None, labels, [])
        assert [(e[1], e[2]["metadata"]["name"]) for e in events] == [("ADDED", "n7")] and upto == store.rv
    finally:
        store.close()


# --- kubectl ------------------------------------------------------------------------------------

def test_kubectl_get_nodes_and_pods_json(api_double_factory, kubectl):
    proc = api_double_factory(seed=cluster())
    kc = kubectl(proc)
    nodes = json.loads(kc("get", "nodes", "-o", "json").stdout)
    assert nodes["kind"] == "List" or nodes["kind"] == "NodeList"
    by_name = dict((n["metadata"]["name"], n) for n in nodes["items"])
    assert sorted(by_name) == ["cpu-0", "gpu-0", "gpu-1", "gpu-2"]
    assert by_name["gpu-2"]["status"]["allocatable"]["nvidia.com/mig-1g.10gb"] == "7"
    assert all(n["metadata"]["resourceVersion"] for n in nodes["items"])
    pods = json.loads(kc("get", "pods", "-A", "-o", "json", "--field-selector", "spec.nodeName=gpu-0").stdout)
    names = sorted(p["metadata"]["name"] for p in pods["items"])
    assert len(names) == 2 and "train-0" in names and names[0].startswith(DS_NAME + "-")
    labelled = json.loads(kc("get", "pods", "-n", "default", "-o", "json", "-l", "app in (train)").stdout)
    assert sorted(p["metadata"]["name"] for p in labelled["items"]) == ["train-0", "train-1"]
    table = kc("get", "nodes").stdout
    assert "gpu-0" in table and "STATUS" in table and "Ready" in table


def test_kubectl_cordon_uncordon_recorded_in_history(api_double_factory, kubectl):
    proc = api_double_factory(seed=cluster())
    kc = kubectl(proc)
    assert "node/gpu-0 cordoned" in kc("cordon", "gpu-0").stdout
    assert "node/gpu-1 cordoned" in kc("cordon", "gpu-1").stdout
    node_json = json.loads(kc("get", "node", "gpu-0", "-o", "json").stdout)
    assert node_json["spec"]["unschedulable"] is True
    assert {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}.items() <= \
        node_json["spec"]["taints"][0].items()
    assert "node/gpu-0 uncordoned" in kc("uncordon", "gpu-0").stdout
    history = proc.client.history()
    patches = node_entries(history, "gpu-0")
    assert [e["object"]["unschedulable"] for e in patches] == [True, False]
    assert all(e["patch_type"] == "strategic" and e["code"] == 200 for e in patches)
    assert patches[0]["user_agent"].startswith("kubectl/")
    assert patches[0]["ts"] <= patches[1]["ts"] and patches[0]["seq"] < patches[1]["seq"]
    assert '"unschedulable":true' in patches[0]["body"]
    # the cluster-wide view after each write: how many GPU nodes were unavailable
    assert patches[0]["unavailable_gpu_nodes"] == ["gpu-0"]
    after_second = [e for e in history if e["name"] == "gpu-1" and e["verb"] == "patch"][0]
    assert after_second["unavailable_gpu_nodes"] == ["gpu-0", "gpu-1"]
    assert patches[1]["unavailable_gpu_nodes"] == ["gpu-1"]
    assert max(len(e["unavailable_gpu_nodes"]) for e in history) == 2
    assert history[-1]["nodes"]["gpu-1"] == {"unschedulable": True, "ready": "True", "gpu": True,
                                             "bootID": "boot-gpu-1-1", "kubelet": False}
    compact = proc.client.history(since=patches[0]["seq"], nodes=False)
    assert compact[0]["seq"] == patches[0]["seq"] + 1 and all("nodes" not in e for e in compact)
    uncordon_again = kc("uncordon", "gpu-0").stdout
    assert "already uncordoned" in uncordon_again


def test_kubectl_patch_strategic_merge_json(api_double_factory, kubectl):
    proc = api_double_factory(seed=cluster())
    kc = kubectl(proc)
    kc("patch", "daemonset", DS_NAME, "-n", "gpu-operator", "-p", json.dumps(
        {"spec": {"template": {"spec": {"containers": [{"name": "nvidia-device-plugin-ctr",
                                                        "env": [{"name": "PASS_DEVICE_SPECS", "value": "true"}]}]}}}}))
    ds = json.loads(kc("get", "ds", DS_NAME, "-n", "gpu-operator", "-o", "json").stdout)
    assert ds["spec"]["template"]["spec"]["containers"][0]["env"] == [
        {"name": "FAIL_ON_INIT_ERROR", "value": "false"}, {"name": "PASS_DEVICE_SPECS", "value": "true"}]
    assert ds["metadata"]["generation"] == 2
    rv = ds["metadata"]["resourceVersion"]
    out = kc("patch", "daemonset", DS_NAME, "-n", "gpu-operator", "-p", json.dumps(
        {"spec": {"template": {"spec": {"containers": [{"name": "nvidia-device-plugin-ctr",
                                                        "env": [{"name": "PASS_DEVICE_SPECS", "value": "true"}]}]}}}})).stdout
    assert "(no change)" in out
    again = json.loads(kc("get", "ds", DS_NAME, "-n", "gpu-operator", "-o", "json").stdout)
    assert again["metadata"]["resourceVersion"] == rv and again["metadata"]["generation"] == 2
    kc("patch", "node", "gpu-0", "--type", "merge", "-p", '{"metadata":{"labels":{"lab":"x"}}}')
    kc("patch", "node", "gpu-0", "--type", "json", "-p",
       '[{"op":"replace","path":"/metadata/labels/lab","value":"y"},{"op":"add","path":"/spec/unschedulable","value":true}]')
    n = json.loads(kc("get", "node", "gpu-0", "-o", "json").stdout)
    assert n["metadata"]["labels"]["lab"] == "y" and n["spec"]["unschedulable"] is True
    bad = kc("patch", "node", "gpu-0", "--type", "json", "-p",
             '[{"op":"test","path":"/metadata/labels/lab","value":"z"}]', check=False)
    assert bad.returncode != 0 and "testing value /metadata/labels/lab failed" in bad.stderr
    missing = kc("patch", "node", "nope", "-p", '{"spec":{}}', check=False)
    assert missing.returncode != 0 and 'nodes "nope" not found' in missing.stderr
    types = [(e["name"], e["patch_type"], e["code"]) for e in proc.client.history(resource="nodes")
             if e["verb"] == "patch"]
    assert ("gpu-0", "merge", 200) in types and ("gpu-0", "json", 200) in types
    assert ("gpu-0", "json", 422) in types  # kubectl GETs first: the missing node is never patched


def test_kubectl_drain_ignores_daemonsets_and_evicts(api_double_factory, kubectl):
    proc = api_double_factory(seed=cluster(min_available=1))
    kc = kubectl(proc)
    res = kc("drain", "gpu-1", "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=60s")
    assert "node/gpu-1 cordoned" in res.stdout
    assert "pod/train-1 evicted" in res.stdout and "node/gpu-1 drained" in res.stdout
    assert "ignoring DaemonSet-managed Pods: gpu-operator/%s-" % DS_NAME in res.stderr
    left = json.loads(kc("get", "pods", "-A", "-o", "json", "--field-selector", "spec.nodeName=gpu-1").stdout)
    assert [p["metadata"]["ownerReferences"][0]["kind"] for p in left["items"]] == ["DaemonSet"]
    evictions = [e for e in proc.client.history() if e["verb"] == "evict"]
    assert [(e["name"], e["code"]) for e in evictions] == [("train-1", 201)]


def test_kubectl_drain_refuses_emptydir_and_unmanaged_pods(api_double_factory, kubectl):
    proc = api_double_factory(seed=cluster(extra=[pod("bare", "gpu-1", app="bare", owner_uid=None)]))
    kc = kubectl(proc)
    res = kc("drain", "gpu-1", "--ignore-daemonsets", "--timeout=20s", check=False)
    assert res.returncode != 0
    assert "cannot delete Pods with local storage (use --delete-emptydir-data to override): default/train-1" \
        in res.stderr
    assert "cannot delete Pods that declare no controller (use --force to override): default/bare" in res.stderr


def test_kubectl_drain_blocked_by_pdb_times_out(api_double_factory, kubectl):
    proc = api_double_factory(seed=cluster(min_available=2))
    kc = kubectl(proc)
    res = kc("drain", "gpu-0", "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=8s", check=False)
    assert res.returncode != 0
    assert 'error when evicting pods/"train-0" -n "default" (will retry after 5s): ' + PDB_MESSAGE in res.stderr
    assert "global timeout reached: 8s" in res.stderr
    n = json.loads(kc("get", "node", "gpu-0", "-o", "json").stdout)
    assert n["spec"]["unschedulable"] is True  # drain leaves the node cordoned
    kc("get", "pod", "train-0", "-n", "default")
    refused = [e for e in proc.client.history() if e["verb"] == "evict"]
    assert len(refused) >= 2 and all(e["code"] == 429 for e in refused)
    assert refused[0]["error"]["reason"] == "TooManyRequests"


def test_kubectl_drain_waits_for_kubelet_to_confirm_deletion(api_double_factory, kubectl, clients):
    """On a node with a kubelet (its Lease exists) an evicted pod stays Terminating until the kubelet
    confirms with a grace-0 delete, and kubectl drain waits for exactly that."""
    proc = api_double_factory(seed=cluster(min_available=1))
    c = clients(proc)
    c.coord.create_namespaced_lease("kube-node-lease", lease("gpu-0"))
    kc = kubectl(proc)
    res = kc("drain", "gpu-0", "--ignore-daemonsets", "--timeout=6s", check=False)
    assert res.returncode != 0
    assert 'error when waiting for pod "train-0" in namespace "default" to terminate: context deadline exceeded' \
        in res.stderr
    terminating = c.core.read_namespaced_pod("train-0", "default")
    assert terminating.metadata.deletion_timestamp is not None
    assert terminating.metadata.deletion_grace_period_seconds == 30
    assert [x.type for x in terminating.status.conditions][-1] == "DisruptionTarget"

    stop = threading.Event()
    confirmed = []

    def kubelet():
        while not stop.is_set():
            for p in c.core.list_pod_for_all_namespaces(field_selector="spec.nodeName=gpu-0").items:
                if p.metadata.deletion_timestamp is not None:
                    c.core.delete_namespaced_pod(p.metadata.name, p.metadata.namespace, grace_period_seconds=0,
                                                 body={"preconditions": {"uid": p.metadata.uid}})
                    confirmed.append(p.metadata.name)
            stop.wait(0.3)

    thread = threading.Thread(target=kubelet)
    thread.start()
    try:
        res = kc("drain", "gpu-0", "--ignore-daemonsets", "--timeout=60s")
    finally:
        stop.set()
        thread.join()
    assert "node/gpu-0 drained" in res.stdout
    assert confirmed == ["train-0"]
    history = proc.client.history(resource="pods", name="train-0")
    verbs = [(e["verb"], e["code"]) for e in history if e["actor"] == "api"]
    assert ("evict", 201) in verbs and verbs[-1] == ("delete", 200)


# --- kubernetes.core modules through ansible-playbook -------------------------------------------

def test_k8s_info_lists_with_selectors(api_double_factory, ansible, tmp_path):
    proc = api_double_factory(seed=cluster())
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "nodes", "kubernetes.core.k8s_info": {"kubeconfig": proc.kubeconfig, "kind": "Node",
                                                       "label_selectors": ["nvidia.com/gpu.present=true"]}},
        {"name": "pods", "kubernetes.core.k8s_info": {"kubeconfig": proc.kubeconfig, "kind": "Pod",
                                                      "field_selectors": ["spec.nodeName=gpu-1"],
                                                      "label_selectors": ["app"]}},
        {"name": "ds", "kubernetes.core.k8s_info": {"kubeconfig": proc.kubeconfig, "kind": "DaemonSet",
                                                    "api_version": "apps/v1", "namespace": "gpu-operator",
                                                    "name": DS_NAME}},
    ]}]
    res = ansible.playbook(play, env=play_env(tmp_path))
    assert res.rc == 0, res.stdout
    assert sorted(r["metadata"]["name"] for r in res.task("nodes")["resources"]) == ["gpu-0", "gpu-1", "gpu-2"]
    assert [r["metadata"]["name"] for r in res.task("pods")["resources"]] == ["train-1"]
    ds = res.task("ds")["resources"][0]
    assert ds["status"]["desiredNumberScheduled"] == 3


def test_k8s_patches_device_plugin_env_idempotently(api_double_factory, ansible, tmp_path):
    proc = api_double_factory(seed=cluster())
    task = {"name": "plugin", "kubernetes.core.k8s": {
        "kubeconfig": proc.kubeconfig, "state": "present", "definition": {
            "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": DS_NAME, "namespace": "gpu-operator"},
            "spec": {"template": {"spec": {"containers": [{
                "name": "nvidia-device-plugin-ctr", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0",
                "env": [{"name": "PASS_DEVICE_SPECS", "value": "true"}]}]}}}}}}
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": [task]}]
    first = ansible.playbook(play, env=play_env(tmp_path))
    assert first.rc == 0, first.stdout
    assert first.task("plugin")["changed"] is True
    ds = proc.client.state()["objects"]["daemonsets.apps"][0]
    ctr = ds["spec"]["template"]["spec"]["containers"][0]
    assert ctr["image"].endswith("v0.17.0")
    assert ctr["env"] == [{"name": "FAIL_ON_INIT_ERROR", "value": "false"},
                          {"name": "PASS_DEVICE_SPECS", "value": "true"}]
    assert ds["metadata"]["generation"] == 2
    # the DaemonSet controller rolled every daemon pod onto the new template
    plugin_pods = [p for p in proc.client.state()["objects"]["pods"] if p["metadata"]["namespace"] == "gpu-operator"]
    assert len(plugin_pods) == 3
    assert all(p["spec"]["containers"][0]["image"].endswith("v0.17.0") for p in plugin_pods)
    second = ansible.playbook(play, env=play_env(tmp_path))
    assert second.rc == 0 and second.task("plugin")["changed"] is False
    patches = [e for e in proc.client.history(resource="daemonsets.apps") if e["verb"] == "patch"]
    assert [e["changed"] for e in patches] == [True, False]


def test_k8s_drain_cordon_drain_uncordon(api_double_factory, ansible, tmp_path):
    proc = api_double_factory(seed=cluster(min_available=1))
    env = play_env(tmp_path)
    cordon = ansible.playbook(drain_play(proc.kubeconfig, "gpu-1", state="cordon"), env=env)
    assert cordon.rc == 0 and cordon.task("drain")["result"] == "node gpu-1 marked unschedulable."
    drain = ansible.playbook(drain_play(proc.kubeconfig, "gpu-1", ignore_daemonsets=True,
                                        delete_emptydir_data=True, wait_timeout=30, wait_sleep=1), env=env)
    assert drain.rc == 0, drain.stdout
    out = drain.task("drain")
    assert out["result"] == "node gpu-1 already marked unschedulable. 1 Pod(s) deleted from node."
    assert any("Ignoring DaemonSet-managed Pods" in w for w in out.get("warnings", []))
    state = proc.client.state()["objects"]["pods"]
    on_node = [p["metadata"]["name"] for p in state if p["spec"].get("nodeName") == "gpu-1"]
    assert len(on_node) == 1 and on_node[0].startswith(DS_NAME)
    uncordon = ansible.playbook(drain_play(proc.kubeconfig, "gpu-1", state="uncordon"), env=env)
    assert uncordon.rc == 0 and uncordon.task("drain")["changed"] is True
    patches = node_entries(proc.client.history(), "gpu-1")
    assert [e["object"]["unschedulable"] for e in patches] == [True, False]
    assert all(e["user_agent"].startswith("OpenAPI-Generator/") for e in patches)


def test_k8s_drain_fails_at_once_on_pdb_429(api_double_factory, ansible, tmp_path):
    proc = api_double_factory(seed=cluster(min_available=2))
    res = ansible.playbook(drain_play(proc.kubeconfig, "gpu-0", ignore_daemonsets=True,
                                      delete_emptydir_data=True, wait_timeout=30), env=play_env(tmp_path))
    assert res.rc == 2
    out = res.task("drain")
    assert out["failed"] is True
    assert out["msg"] == "Failed to delete pod default/train-0 due to: " + PDB_MESSAGE
    evictions = [e for e in proc.client.history() if e["verb"] == "evict"]
    assert [(e["name"], e["code"]) for e in evictions] == [("train-0", 429)]
    node_now = [n for n in proc.client.state()["objects"]["nodes"] if n["metadata"]["name"] == "gpu-0"][0]
    assert node_now["spec"]["unschedulable"] is True


def test_k8s_drain_without_ignore_daemonsets_reverts_its_cordon(api_double_factory, ansible, tmp_path):
    proc = api_double_factory(seed=cluster())
    res = ansible.playbook(drain_play(proc.kubeconfig, "gpu-0"), env=play_env(tmp_path))
    assert res.rc == 2
    assert "cannot delete DaemonSet-managed Pods" in res.task("drain")["msg"]
    patches = node_entries(proc.client.history(), "gpu-0")
    assert [e["object"]["unschedulable"] for e in patches] == [True, False]


# --- kubernetes Python client -------------------------------------------------------------------

def test_client_field_and_label_selectors(api_double_factory, clients):
    proc = api_double_factory(seed=cluster(extra=[pod("infer", "gpu-2", app="infer", owner_uid=None)]))
    c = clients(proc)

    def names(items):
        return sorted(p.metadata.name for p in items)

    assert names(c.core.list_pod_for_all_namespaces(field_selector="spec.nodeName=gpu-2").items)[0] == "infer"
    assert names(c.core.list_namespaced_pod("default", label_selector="app in (infer,train)").items) == \
        ["infer", "train-0", "train-1"]
    assert names(c.core.list_namespaced_pod("default", label_selector="app!=train").items) == ["infer"]
    assert names(c.core.list_namespaced_pod("default", label_selector="app notin (train),app").items) == ["infer"]
    assert names(c.core.list_namespaced_pod("default", label_selector="!app").items) == []
    assert len(c.core.list_pod_for_all_namespaces(field_selector="status.phase=Running").items) == 6
    assert names(c.core.list_namespaced_pod(
        "default", field_selector="spec.nodeName=gpu-0,status.phase!=Pending").items) == ["train-0"]
    assert [n.metadata.name for n in c.core.list_node(field_selector="spec.unschedulable=false",
                                                      label_selector="nvidia.com/gpu.present").items] == \
        ["gpu-0", "gpu-1", "gpu-2"]
    with pytest.raises(k8s.ApiException) as err:
        c.core.list_pod_for_all_namespaces(field_selector="spec.gpu=1")
    assert err.value.status == 400 and body(err.value)["message"] == "field label not supported: spec.gpu"
    page = c.core.list_pod_for_all_namespaces(limit=2)
    assert len(page.items) == 2 and page.metadata._continue
    rest = c.core.list_pod_for_all_namespaces(limit=10, _continue=page.metadata._continue)
    assert len(rest.items) == 4 and not rest.metadata._continue


def test_client_eviction_statuses(api_double_factory, clients):
    proc = api_double_factory(seed=cluster(min_available=1, extra=[
        pod("sick", "gpu-2", app="train", ready=False)]))
    c = clients(proc)
    budget = c.policy.read_namespaced_pod_disruption_budget("train-pdb", "default").status
    assert (budget.current_healthy, budget.desired_healthy, budget.disruptions_allowed, budget.expected_pods) == \
        (2, 1, 1, 3)

    def evict(name):
        return c.core.create_namespaced_pod_eviction(name, "default", {
            "apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": "default"}})

    evict("sick")  # unhealthy pod while the budget holds: IfHealthyBudget lets it go without using the budget
    assert c.policy.read_namespaced_pod_disruption_budget("train-pdb", "default").status.disruptions_allowed == 1
    evict("train-0")
    after = c.policy.read_namespaced_pod_disruption_budget("train-pdb", "default").status
    assert (after.current_healthy, after.disruptions_allowed) == (1, 0)
    with pytest.raises(k8s.ApiException) as err:
        evict("train-1")
    assert err.value.status == 429
    status = body(err.value)
    assert status["reason"] == "TooManyRequests" and status["message"] == PDB_MESSAGE
    assert status["details"]["causes"] == [{"reason": "DisruptionBudget",
                                            "message": "The disruption budget train-pdb needs 1 healthy pods "
                                                       "and has 1 currently"}]
    with pytest.raises(k8s.ApiException) as err:
        evict("nope")
    assert err.value.status == 404 and body(err.value)["message"] == 'pods "nope" not found'
    with pytest.raises(k8s.ApiException) as err:
        c.core.create_namespaced_pod_eviction("train-1", "default", {"metadata": {"name": "other"}})
    assert err.value.status == 400
    c.policy.create_namespaced_pod_disruption_budget("default", pdb("second", max_unavailable="50%"))
    with pytest.raises(k8s.ApiException) as err:
        evict("train-1")
    assert err.value.status == 500 and "more than one PodDisruptionBudget" in body(err.value)["message"]


def _kubeconfig_with_token(src, dst, token):
    with open(src) as fh:
        doc = yaml.safe_load(fh)
    user = doc["users"][0]["user"]
    if token is None:
        user.pop("token")
    else:
        user["token"] = token
    with open(dst, "w") as fh:
        yaml.safe_dump(doc, fh)
    return dst


def test_client_requires_bearer_token(api_double_factory, tmp_path):
    proc = api_double_factory(seed=cluster())
    anon = k8s_config.new_client_from_config(config_file=_kubeconfig_with_token(
        proc.kubeconfig, str(tmp_path / "anon.kubeconfig"), None))
    wrong = k8s_config.new_client_from_config(config_file=_kubeconfig_with_token(
        proc.kubeconfig, str(tmp_path / "wrong.kubeconfig"), "not-the-token"))
    try:
        for api_client in (anon, wrong):
            with pytest.raises(k8s.ApiException) as err:
                k8s.CoreV1Api(api_client).list_node()
            assert err.value.status == 401 and body(err.value)["reason"] == "Unauthorized"
        with pytest.raises(k8s.ApiException) as err:
            k8s.CoreV1Api(anon).patch_node("gpu-0", {"spec": {"unschedulable": True}})
        assert err.value.status == 401
    finally:
        anon.close()
        wrong.close()
    assert proc.client.request("GET", "/_double/history", token=False)[0] == 401
    denied = [e for e in proc.client.history(resource="nodes") if e["code"] == 401]
    assert len(denied) == 1 and denied[0]["verb"] == "patch"
    assert [n["spec"].get("unschedulable") for n in proc.client.state()["objects"]["nodes"]] == [None] * 4


def test_graceful_deletion_watch_and_kubelet_confirmation(api_double_factory, clients):
    proc = api_double_factory(seed=cluster())
    c = clients(proc)
    c.coord.create_namespaced_lease("kube-node-lease", lease("gpu-0"))
    start_rv = c.core.list_namespaced_pod("default").metadata.resource_version
    c.core.delete_namespaced_pod("train-0", "default", grace_period_seconds=20)
    p = c.core.read_namespaced_pod("train-0", "default")
    assert p.metadata.deletion_grace_period_seconds == 20
    with pytest.raises(k8s.ApiException) as err:
        c.core.delete_namespaced_pod("train-0", "default", grace_period_seconds=0,
                                     body={"preconditions": {"uid": "not-the-uid"}})
    assert err.value.status == 409 and "Precondition failed: UID in precondition" in body(err.value)["message"]
    c.core.delete_namespaced_pod("train-0", "default", grace_period_seconds=0,
                                 body={"preconditions": {"uid": p.metadata.uid}})
    from kubernetes import watch
    w = watch.Watch()
    seen = [(ev["type"], ev["object"].metadata.name)
            for ev in w.stream(c.core.list_namespaced_pod, "default", resource_version=start_rv,
                               field_selector="spec.nodeName=gpu-0", timeout_seconds=1)]
    assert seen == [("MODIFIED", "train-0"), ("DELETED", "train-0")]
    budget = c.policy.read_namespaced_pod_disruption_budget("train-pdb", "default").status
    assert (budget.current_healthy, budget.disruptions_allowed) == (1, 0)


def test_node_lease_expiry_marks_node_unknown(api_double_factory, clients):
    proc = api_double_factory(seed=cluster(), args=["--node-monitor-grace", "5"])
    c = clients(proc)
    c.coord.create_namespaced_lease("kube-node-lease", lease("gpu-0", renew=time.time() - 60))
    proc.client.tick()
    n = c.core.read_node("gpu-0")
    ready = [x for x in n.status.conditions if x.type == "Ready"][0]
    assert (ready.status, ready.reason) == ("Unknown", "NodeStatusUnknown")
    assert [(t.key, t.effect) for t in n.spec.taints] == [("node.kubernetes.io/unreachable", "NoSchedule")]
    train = c.core.read_namespaced_pod("train-0", "default")
    assert [x.status for x in train.status.conditions if x.type == "Ready"] == ["False"]
    entries = proc.client.history(actor="controller/node-lifecycle")
    assert entries[0]["name"] == "gpu-0" and entries[0]["unavailable_gpu_nodes"] == ["gpu-0"]
    # the kubelet comes back: it renews the lease and reports Ready, the taint goes away
    c.coord.patch_namespaced_lease("gpu-0", "kube-node-lease", {"spec": lease("gpu-0")["spec"]})
    c.core.patch_node_status("gpu-0", {"status": {"conditions": [{"type": "Ready", "status": "True",
                                                                  "reason": "KubeletReady"}],
                                                  "nodeInfo": {"bootID": "boot-gpu-0-2"}}})
    n = c.core.read_node("gpu-0")
    assert not n.spec.taints and n.status.node_info.boot_id == "boot-gpu-0-2"
    assert n.status.capacity["nvidia.com/gpu"] == "8"


def test_client_events_core_and_events_k8s_io_share_storage(api_double_factory, clients):
    proc = api_double_factory(seed=cluster())
    c = clients(proc)
    events_v1 = k8s.EventsV1Api(c.api_client)
    c.core.create_namespaced_event("default", {
        "metadata": {"name": "gpu-0.reboot"}, "involvedObject": {"kind": "Node", "name": "gpu-0"},
        "reason": "Rebooted", "message": "Node gpu-0 has been rebooted, boot id: b2", "type": "Warning",
        "source": {"component": "kubelet", "host": "gpu-0"}})
    now = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
    events_v1.create_namespaced_event("default", {
        "metadata": {"name": "drain.1"}, "eventTime": now, "reportingController": "kubegpu.fleet/rolling_reboot",
        "reportingInstance": "controller", "action": "Drain", "reason": "Draining", "type": "Normal",
        "regarding": {"kind": "Node", "name": "gpu-1"}, "note": "draining gpu-1"})
    core = c.core.list_namespaced_event("default", field_selector="involvedObject.kind=Node")
    assert sorted((e.metadata.name, e.involved_object.name, e.message) for e in core.items) == [
        ("drain.1", "gpu-1", "draining gpu-1"), ("gpu-0.reboot", "gpu-0", "Node gpu-0 has been rebooted, boot id: b2")]
    assert [e.metadata.name for e in c.core.list_event_for_all_namespaces(field_selector="reason=Rebooted").items] \
        == ["gpu-0.reboot"]
    # read raw: like a real apiserver, a core event without eventTime shows "eventTime": null through
    # events.k8s.io/v1, which this client's EventsV1Event model refuses to deserialize
    raw = json.loads(events_v1.list_namespaced_event("default", _preload_content=False).data)
    assert raw["kind"] == "EventList" and raw["apiVersion"] == "events.k8s.io/v1"
    assert sorted((e["metadata"]["name"], e["regarding"]["name"], e["note"], e["eventTime"]) for e in raw["items"]) \
        == [("drain.1", "gpu-1", "draining gpu-1", now),
            ("gpu-0.reboot", "gpu-0", "Node gpu-0 has been rebooted, boot id: b2", None)]
    assert raw["items"][1]["deprecatedSource"] == {"component": "kubelet", "host": "gpu-0"}
    # the Python client refuses to send an events.k8s.io event without eventTime; plain HTTP can
    code, status = proc.client.request("POST", "/apis/events.k8s.io/v1/namespaces/default/events", {
        "apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "bad"}, "reason": "X",
        "regarding": {"kind": "Node", "name": "gpu-1"}})
    assert code == 422 and status["reason"] == "Invalid"
    assert "eventTime: Required value" in status["message"] and "action: Required value" in status["message"]


def test_events_expire_after_event_ttl(api_double_factory, clients):
    """No race on the clock: the event is listed right after its creation (well inside the TTL),
    then the test waits for the observable expiry and checks it came no earlier than the TTL."""
    ttl = 5
    proc = api_double_factory(args=["--event-ttl", str(ttl)])
    c = clients(proc)
    created = c.core.create_namespaced_event("default", {
        "metadata": {"name": "old"}, "involvedObject": {"kind": "Node", "name": "gpu-0"}, "reason": "Old"})
    born = created.metadata.creation_timestamp.timestamp()
    proc.client.tick()
    listed = c.core.list_namespaced_event("default").items
    assert [e.metadata.name for e in listed] == ["old"]
    deadline = time.time() + ttl + 120  # safety deadline for a broken TTL, not a timing goal
    while c.core.list_namespaced_event("default").items:
        assert time.time() < deadline, "event outlived its TTL by 120 s"
        time.sleep(0.2)  # poll interval of the wait for the expiry, not an assumption about it
        proc.client.tick()
    # expired, and not before its TTL (creationTimestamp has whole seconds: allow that second)
    assert time.time() - born > ttl - 1


def test_reads_record_what_each_client_was_served_and_wait_for_the_next(api_double_factory, clients):
    proc = api_double_factory(seed=cluster())
    c = clients(proc)
    control = proc.client
    assert control.reads(resource="nodes", name="gpu-1") == []
    node = c.core.read_node("gpu-1")
    c.core.list_node()
    got = control.reads(resource="nodes", name="gpu-1")
    assert len(got) == 1 and got[0]["verb"] == "get" and got[0]["resourceVersion"] == node.metadata.resource_version
    assert got[0]["user_agent"].startswith("OpenAPI-Generator/")
    assert [e["verb"] for e in control.reads(resource="nodes")] == ["get", "list"]
    assert control.reads(resource="nodes", user_agent="kubectl/*") == []
    # a waiting reader is woken by the read it waits for (another thread makes it)
    since = got[0]["seq"]
    waiter = {}
    worker = threading.Thread(target=lambda: waiter.update(
        entry=control.wait_for_read(since=since, timeout=120, verb="get", resource="nodes", name="gpu-0")))
    worker.start()
    c.core.read_node("gpu-1")  # not what it waits for
    c.core.read_node("gpu-0")
    worker.join()
    assert waiter["entry"]["name"] == "gpu-0" and waiter["entry"]["seq"] > since
    code, body = control.request("GET", "/_double/reads?wait=9999")
    assert code == 400 and "wait must be between" in body["message"]


def test_client_update_semantics_status_subresource_and_conflicts(api_double_factory, clients):
    proc = api_double_factory(seed=cluster())
    c = clients(proc)
    ds = c.apps.read_namespaced_daemon_set(DS_NAME, "gpu-operator")
    ds.spec.template.spec.containers[0].image = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"
    replaced = c.apps.replace_namespaced_daemon_set(DS_NAME, "gpu-operator", ds)
    assert replaced.metadata.generation == 2
    assert int(replaced.metadata.resource_version) > int(ds.metadata.resource_version)
    with pytest.raises(k8s.ApiException) as err:  # ds still carries the old resourceVersion
        c.apps.replace_namespaced_daemon_set(DS_NAME, "gpu-operator", ds)
    assert err.value.status == 409 and body(err.value)["reason"] == "Conflict"
    assert "the object has been modified" in body(err.value)["message"]
    # writes to the main resource keep status; writes to /status keep spec
    c.core.patch_node("gpu-0", {"spec": {"unschedulable": True}, "status": {"capacity": {"nvidia.com/gpu": "0"}}})
    n = c.core.read_node("gpu-0")
    assert n.spec.unschedulable is True and n.status.capacity["nvidia.com/gpu"] == "8"
    c.core.patch_node_status("gpu-0", {"spec": {"unschedulable": False}, "status": {"allocatable": {
        "nvidia.com/gpu": "7"}}})
    n = c.core.read_node("gpu-0")
    assert n.spec.unschedulable is True and n.status.allocatable["nvidia.com/gpu"] == "7"
    full = c.core.read_node_status("gpu-0")
    full.status.capacity["nvidia.com/mig-1g.10gb"] = "7"
    replaced_status = c.core.replace_node_status("gpu-0", full)
    assert replaced_status.status.capacity["nvidia.com/mig-1g.10gb"] == "7"
    # a kubelet reporting its pod: /status changes phase and conditions, never the spec
    c.core.patch_namespaced_pod_status("train-0", "default", {
        "spec": {"nodeName": "gpu-2"},
        "status": {"phase": "Failed", "conditions": [{"type": "Ready", "status": "False"}]}})
    p = c.core.read_namespaced_pod("train-0", "default")
    assert p.spec.node_name == "gpu-0" and p.status.phase == "Failed"
    assert [(x.type, x.status) for x in p.status.conditions if x.type == "Ready"] == [("Ready", "False")]
    with pytest.raises(k8s.ApiException) as err:
        c.core.patch_namespaced_pod("train-0", "default", {"spec": {"nodeName": "gpu-1"}})
    assert err.value.status == 422 and "pod updates may not change fields" in body(err.value)["message"]
    created = c.core.create_namespaced_pod("default", {
        "metadata": {"generateName": "probe-"}, "spec": {"containers": [{"name": "c", "image": "x"}]}})
    assert created.metadata.name.startswith("probe-") and len(created.metadata.name) == len("probe-") + 5
    assert created.status.phase == "Pending"  # unscheduled: no kubelet will ever run it
    with pytest.raises(k8s.ApiException) as err:
        c.core.create_namespaced_pod("nowhere", {"metadata": {"name": "x"},
                                                 "spec": {"containers": [{"name": "c", "image": "x"}]}})
    assert err.value.status == 404 and body(err.value)["message"] == 'namespaces "nowhere" not found'
    with pytest.raises(k8s.ApiException) as err:
        c.core.create_node(node("gpu-0"))
    assert err.value.status == 409 and body(err.value)["reason"] == "AlreadyExists"
    dry = c.core.patch_node("gpu-1", {"spec": {"unschedulable": True}}, dry_run="All")
    assert dry.spec.unschedulable is True and c.core.read_node("gpu-1").spec.unschedulable is None


# --- faults, lifecycle, persistence -------------------------------------------------------------

def test_faults_503_hang_and_eviction_429(api_double_factory, clients, kubectl):
    proc = api_double_factory(seed=cluster(min_available=0))
    c = clients(proc)
    kc = kubectl(proc)
    rule = proc.client.add_fault({"code": 503})[0]
    with pytest.raises(k8s.ApiException) as err:
        c.core.list_node()
    assert err.value.status == 503 and body(err.value)["reason"] == "ServiceUnavailable"
    denied = kc("get", "nodes", check=False)
    assert denied.returncode != 0
    assert [f["hits"] > 1 for f in proc.client.faults()] == [True]
    proc.client.clear_faults(rule["id"])
    assert len(c.core.list_node().items) == 4

    proc.client.add_fault({"action": "hang", "resource": "nodes", "verbs": ["patch"]})
    with pytest.raises(Exception):
        c.core.patch_node("gpu-0", {"spec": {"unschedulable": True}}, _request_timeout=1)
    proc.client.clear_faults()
    assert c.core.read_node("gpu-0").spec.unschedulable is None
    hung = [e for e in proc.client.history(resource="nodes") if e["verb"] == "patch"]
    assert hung[0]["error"]["reason"] == "hang" and hung[0]["changed"] is False

    proc.client.add_fault({"resource": "pods", "subresource": "eviction", "name": "train-1", "code": 429})
    res = kc("drain", "gpu-1", "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=7s", check=False)
    assert res.returncode != 0 and PDB_MESSAGE in res.stderr
    ok = kc("drain", "gpu-0", "--ignore-daemonsets", "--timeout=30s")
    assert "pod/train-0 evicted" in ok.stdout
    codes = [(e["name"], e["code"]) for e in proc.client.history() if e["verb"] == "evict"]
    assert ("train-0", 201) in codes and ("train-1", 429) in codes and ("train-1", 201) not in codes


def _port_free(port):
    """Nothing listens there any more: a new server (SO_REUSEADDR, as servers bind) can listen."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("127.0.0.1", port))
        s.listen(1)
        return True
    except OSError:
        return False
    finally:
        s.close()


def test_stop_restart_persists_state_and_frees_port(api_double_factory, kubectl, clients):
    proc = api_double_factory(seed=cluster(), name="persist")
    kc = kubectl(proc)
    kc("cordon", "gpu-0")
    port, rv = proc.port, proc.client.state()["resourceVersion"]
    # a client in the middle of a long watch must not keep the double alive: stop() is SIGTERM and
    # returns 0 only when the double exited by itself (else it kills it: -9)
    c = clients(proc)
    from kubernetes import watch
    stream = watch.Watch().stream(c.core.list_node, timeout_seconds=60)
    assert next(stream)["type"] == "ADDED"
    assert proc.stop() == 0
    assert _port_free(port)
    assert not os.path.exists(os.path.join(proc.state_dir, "server.json"))
    again = api_double_factory(seed=cluster(), name="persist", port=port)
    state = again.client.state()
    assert int(state["resourceVersion"]) >= int(rv)
    gpu0 = [n for n in state["objects"]["nodes"] if n["metadata"]["name"] == "gpu-0"][0]
    assert gpu0["spec"]["unschedulable"] is True  # kept; the seed did not overwrite it
    assert len(state["objects"]["pods"]) == 5
    history = again.client.history()
    assert [e["object"]["unschedulable"] for e in node_entries(history, "gpu-0")] == [True]
    with open(os.path.join(again.state_dir, "history.jsonl")) as fh:
        assert len(fh.readlines()) == len(history)
    json.loads(kubectl(again)("get", "nodes", "-o", "json").stdout)


def test_shutdown_request_and_kill(api_double_factory, clients):
    proc = api_double_factory(seed=cluster())
    port = proc.port
    proc.client.shutdown()
    proc.proc.wait(15)
    assert proc.proc.returncode == 0 and _port_free(port)
    crashed = api_double_factory(seed=cluster())
    c = clients(crashed)
    c.core.patch_node("gpu-1", {"spec": {"unschedulable": True}})
    assert crashed.kill() == -9
    with open(os.path.join(crashed.state_dir, "state.json")) as fh:
        saved = json.load(fh)
    gpu1 = [n for n in saved["objects"]["nodes"] if n["metadata"]["name"] == "gpu-1"][0]
    assert gpu1["spec"]["unschedulable"] is True


def test_many_concurrent_clients(api_double_factory, clients):
    """20 fake kubelets polling and patching status while a drain-like client lists and patches."""
    docs = [node("n%02d" % i) for i in range(20)]
    proc = api_double_factory(seed=docs)
    c = clients(proc)
    errors = []

    def kubelet(i):
        try:
            for j in range(10):
                c.core.list_pod_for_all_namespaces(field_selector="spec.nodeName=n%02d" % i)
                c.core.patch_node_status("n%02d" % i, {"status": {"nodeInfo": {"bootID": "b%d" % j}}})
        except Exception as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=kubelet, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for i in range(20):
        c.core.patch_node("n%02d" % i, {"spec": {"unschedulable": True}})
    for t in threads:
        t.join()
    assert errors == []
    nodes = c.core.list_node().items
    assert all(n.status.node_info.boot_id == "b9" and n.spec.unschedulable for n in nodes)
    assert len([e for e in proc.client.history(resource="nodes") if e["subresource"] == "status"]) == 200


def test_bad_seed_is_refused_with_a_clear_message(tmp_path):
    from kubegpu_lab.apidouble.control import ApiDoubleProcess
    seed = tmp_path / "bad.yaml"
    seed.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "Bad_Name"}}))
    proc = ApiDoubleProcess(str(tmp_path / "s"), seeds=[str(seed)])
    with pytest.raises(RuntimeError) as err:
        proc.start(timeout=20)
    assert "Bad_Name" in str(err.value) and "RFC 1123" in str(err.value)
    assert proc.proc.returncode not in (0, None)


# --- custom resources: the GPU Operator's ClusterPolicy ----------------------------------------

CLUSTER_POLICY_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "clusterpolicies.nvidia.com"},
    "spec": {"group": "nvidia.com", "scope": "Cluster",
             "names": {"kind": "ClusterPolicy", "listKind": "ClusterPolicyList", "plural": "clusterpolicies",
                       "singular": "clusterpolicy"},
             "versions": [{"name": "v1", "served": True, "storage": True, "subresources": {"status": {}},
                           "schema": {"openAPIV3Schema": {"type": "object",
                                                          "x-kubernetes-preserve-unknown-fields": True}}}]}}
CLUSTER_POLICY = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "cluster-policy"},
                  "spec": {"cdi": {"enabled": True, "default": False}, "mig": {"strategy": "mixed"},
                           "devicePlugin": {"version": "v0.17.2"}, "migManager": {"version": "v0.12.1"}},
                  "status": {"state": "ready"}}
GPU_OPERATOR = {"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "gpu-operator", "namespace": "gpu-operator"},
                "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "gpu-operator"}},
                         "template": {"metadata": {"labels": {"app": "gpu-operator"}},
                                      "spec": {"containers": [{"name": "gpu-operator",
                                                               "image": "nvcr.io/nvidia/gpu-operator:v25.3.1"}]}}}}


def test_custom_resource_is_served_only_while_its_crd_exists(tmp_path):
    store = Store(str(tmp_path / "s"))
    policies = resources.find("nvidia.com", "v1", "clusterpolicies")
    crds = resources.find("apiextensions.k8s.io", "v1", "customresourcedefinitions")
    try:
        assert not resources.served(policies, store.crd_names())
        assert "nvidia.com" not in [g["name"] for g in resources.api_group_list_doc(store.crd_names())["groups"]]
        with pytest.raises(ValueError, match='no matches for kind "ClusterPolicy" in version "nvidia.com/v1"'):
            store.load_objects([CLUSTER_POLICY])
        bad = dict(CLUSTER_POLICY_CRD, metadata={"name": "policies.nvidia.com"})
        with pytest.raises(ApiError) as err:
            store.create(Context(actor="api"), crds, None, bad)
        assert err.value.code == 422 and "spec.names.plural" in err.value.message
        store.load_objects([CLUSTER_POLICY_CRD, CLUSTER_POLICY])
        crd = store.get(crds, None, "clusterpolicies.nvidia.com")
        assert [c["type"] for c in crd["status"]["conditions"]] == ["NamesAccepted", "Established"]
        assert store.crd_names() == {"clusterpolicies.nvidia.com"}
        assert resources.resource_list_doc("nvidia.com", "v1", store.crd_names())["resources"][0]["name"] == \
            "clusterpolicies"
        assert store.list(policies)["items"][0]["spec"]["cdi"]["enabled"] is True
        store.delete(Context(actor="api"), crds, None, "clusterpolicies.nvidia.com", {})
        assert store.crd_names() == set() and store.list(policies)["items"] == []
    finally:
        store.close()


def test_gpu_operator_reads_through_the_collections_k8s_layer(api_double_factory, kubectl):
    """audit_cluster's reads: a ClusterPolicy list is 404 without the CRD (no operator, not an error),
    then the Deployment and ClusterPolicy once they exist; kubectl discovers the custom resource."""
    from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.cluster_audit import read_gpu_operator
    from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit import cluster_view as cl
    from ansible_collections.kubegpu.fleet.plugins.plugin_utils.k8s import client as k8s_client
    from ansible_collections.kubegpu.fleet.plugins.plugin_utils.k8s import service

    proc = api_double_factory(seed=cluster())
    client = k8s_client.connect({"kubeconfig": proc.kubeconfig}, environ={})
    got, calls, notes = read_gpu_operator(client)
    assert got == {"deployments": [], "cluster_policies": [], "cluster_policy_crd": False}
    assert calls == 2 and notes == []
    assert proc.client.reads(resource="clusterpolicies") == []  # a 404 is no served list
    # RBAC without the ClusterPolicy read: unknown, said so; a broken API fails the task
    proc.client.add_fault({"path": "/apis/nvidia.com/*", "code": 403, "reason": "Forbidden",
                           "message": 'clusterpolicies.nvidia.com is forbidden'})
    got, _calls, notes = read_gpu_operator(client)
    assert got["cluster_policy_crd"] is None and notes and "403" in notes[0]
    proc.client.clear_faults()
    proc.client.add_fault({"path": "/apis/apps/v1/deployments", "code": 503, "count": 1})
    with pytest.raises(k8s_client.K8sError) as err:
        read_gpu_operator(client)
    assert err.value.status == 503
    proc.client.clear_faults()

    proc.client.load([CLUSTER_POLICY_CRD, CLUSTER_POLICY, GPU_OPERATOR])
    got, _calls, _notes = read_gpu_operator(client)
    assert [r["verb"] for r in proc.client.reads(resource="clusterpolicies")] == ["list"]
    assert got["cluster_policy_crd"] is True
    assert [d["metadata"]["name"] for d in got["deployments"]] == ["gpu-operator"]
    assert got["cluster_policies"][0]["spec"]["mig"]["strategy"] == "mixed"
    objects = service.read_cluster(client)
    client.close()   # removes the private directory of the kubeconfig's inline CA
    view = cl.cluster_view(objects["nodes"], objects["pods"], objects["daemonsets"], objects["events"], **got)
    comps = view["nodes"]["gpu-0"]["components"]
    assert comps["gpu-operator"]["version"] == "25.3.1" and comps["gpu-operator"]["cdi_enabled"] is True
    assert comps["device-plugin"]["image"].startswith("nvcr.io/nvidia/k8s-device-plugin:")
    kc = kubectl(proc)
    listed = json.loads(kc("get", "clusterpolicies", "-o", "json").stdout)
    assert [p["metadata"]["name"] for p in listed["items"]] == ["cluster-policy"]


def test_demo_fleet_seeding_gives_security_findings_for_every_cluster_component(tmp_path):
    """The demo profile's cluster objects, served by the double, read into the cluster view and judged
    by the catalog rules: device plugin, MIG manager and GPU Operator each have a security finding."""
    from kubegpu_lab import profiles
    from kubegpu_lab.lab import Lab
    from ansible_collections.kubegpu.fleet.plugins.plugin_utils.catalog import load as catalog_load
    from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit import cluster_view as cl
    from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.rules import catalog as catalog_rules

    profile = profiles.load_profile("demo")
    store = Store(str(tmp_path / "s"))
    try:
        store.load_objects([node(n["name"], labels={"kubegpu.io/pool": n["pool"]}) for n in profile["nodes"]])
        store.load_objects(Lab.seed_docs(Lab.__new__(Lab), profile))
        objs = dict((key, store.list(resources.find(group, "v1", plural))["items"]) for key, group, plural in (
            ("nodes", "", "nodes"), ("pods", "", "pods"), ("daemonsets", "apps", "daemonsets"),
            ("deployments", "apps", "deployments"), ("cluster_policies", "nvidia.com", "clusterpolicies")))
    finally:
        store.close()
    view = cl.cluster_view(objs["nodes"], objs["pods"], objs["daemonsets"], [], deployments=objs["deployments"],
                           cluster_policies=objs["cluster_policies"], cluster_policy_crd=True)
    assert view["malformed"] == []
    catalog = catalog_load.load_catalog(os.path.join(REPO, "catalog", "v2"))
    stack = {"container_toolkit": {"installed": True, "version": "1.17.8", "runtime": "runc",
                                   "injection_mode": "legacy"}}
    seen = {}
    for name, api in view["nodes"].items():
        assert sorted(api["components"]) == ["device-plugin", "gpu-operator", "mig-manager"], name
        for f in catalog_rules.rule_catalog({"api": api, "catalog": catalog, "stack": stack}):
            if f["id"] in ("security.device-plugin", "security.gpu-operator", "security.mig-manager"):
                seen.setdefault(f["id"], []).append(name)
                assert "CVE-2025-23266" in f["evidence"]["cves"], f
    assert sorted(seen) == ["security.device-plugin", "security.gpu-operator", "security.mig-manager"]
    assert len(seen["security.gpu-operator"]) == len(profile["nodes"]) == len(seen["security.mig-manager"])
    # the legacy pool's v0.14.5 uses the default envvar strategy: out of the CDI advisories' scope
    assert "gpu-cpumanager" not in seen["security.device-plugin"]
    summary = view["components"]
    assert [v["version"] for v in summary["device-plugin"]["versions"]] == ["0.17.2", "0.14.5"]
    assert summary["gpu-operator"]["versions"][0]["version"] == "25.3.1"
