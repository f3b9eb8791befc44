"""kubegpu.fleet.gpu_operands through real ansible-playbook against the Kubernetes API double: the
real kubernetes client in the action plugin, real HTTP, the double's DaemonSet controller deleting
and re-creating the operand pods as the node's nvidia.com/gpu.deploy.* labels change, the
double's history as the record of every write."""
import json

from apidouble_fixture import api_double, api_double_factory  # noqa: F401 pylint: disable=unused-import
from test_api_double import node, play_env

P = "nvidia.com/gpu.deploy."
PAUSED = "paused-for-gpu-reset"
ANN = "kubegpu.io/gpu-operands-paused"
NS = "gpu-operator"
OPERATOR_LABELS = {P + "device-plugin": "true", P + "gpu-feature-discovery": "true", P + "dcgm": "true",
                   P + "operator-validator": "true", P + "container-toolkit": "true",
                   P + "dcgm-exporter": "false", P + "mig-manager": "paused-for-driver-upgrade"}
OPERANDS = {"nvidia-device-plugin-daemonset": "device-plugin", "gpu-feature-discovery": "gpu-feature-discovery",
            "nvidia-dcgm": "dcgm", "nvidia-operator-validator": "operator-validator",
            "nvidia-container-toolkit-daemonset": "container-toolkit", "nvidia-dcgm-exporter": "dcgm-exporter",
            "nvidia-mig-manager": "mig-manager"}


def operand_ds(name, component):
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": NS},
            "spec": {"selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"nodeSelector": {P + component: "true"},
                                           "containers": [{"name": "c", "image": "nvcr.io/nvidia/" + name}]}}}}


def operator_cluster(extra=()):
    docs = [node("gpu-0", labels=OPERATOR_LABELS), node("gpu-1"),
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}]
    docs += [operand_ds(name, component) for name, component in sorted(OPERANDS.items())]
    return docs + list(extra)


def run(ansible, tmp_path, proc, tasks, check=False, diff=False):
    for t in tasks:
        t["kubegpu.fleet.gpu_operands"].setdefault("kubeconfig", proc.kubeconfig)
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]
    return ansible.playbook(play, env=play_env(tmp_path), check=check, diff=diff)


def task(name, node_name="gpu-0", **args):
    args["name"] = node_name
    return {"name": name, "kubegpu.fleet.gpu_operands": args, "register": name.replace(" ", "_"),
            "ignore_errors": True}


def stored_node(proc, name="gpu-0"):
    return [n for n in proc.client.state()["objects"]["nodes"] if n["metadata"]["name"] == name][0]


def operand_pods(proc, name="gpu-0"):
    """{daemonset name: pod name} of the pods on the node."""
    out = {}
    for pod in proc.client.state()["objects"]["pods"]:
        if pod["spec"].get("nodeName") == name and pod["metadata"]["namespace"] == NS:
            out[pod["metadata"]["ownerReferences"][0]["name"]] = pod["metadata"]["name"]
    return out


def node_patches(proc, name="gpu-0"):
    return [e for e in proc.client.history(resource="nodes") if e["name"] == name and e["verb"] == "patch"
            and e.get("changed")]


def test_pause_stops_the_operands_and_restore_brings_back_exactly_the_labels(ansible, tmp_path, api_double_factory):
    proc = api_double_factory(seed=operator_cluster())
    before = operand_pods(proc)
    # the operator's false keeps the exporter off; the driver manager's pause keeps the MIG manager off
    assert sorted(before) == ["gpu-feature-discovery", "nvidia-container-toolkit-daemonset", "nvidia-dcgm",
                              "nvidia-device-plugin-daemonset", "nvidia-operator-validator"]
    labels_before = stored_node(proc)["metadata"]["labels"]

    res = run(ansible, tmp_path, proc, [task("pause", state="paused", timeout=120, poll=0.2)])
    pause = res.task("pause")
    assert res.rc == 0 and pause["changed"] and pause["ok"] and not pause.get("failed"), pause
    labels = stored_node(proc)["metadata"]["labels"]
    for component in ("device-plugin", "gpu-feature-discovery", "dcgm", "operator-validator"):
        assert labels[P + component] == PAUSED
    assert labels[P + "dcgm-exporter"] == "false"                                   # untouched
    assert labels[P + "mig-manager"] == "paused-for-driver-upgrade_" + PAUSED        # composed
    assert labels[P + "container-toolkit"] == "true"                                 # not paused by default
    assert sorted(pause["paused"]) == sorted(P + c for c in ("device-plugin", "gpu-feature-discovery", "dcgm",
                                                             "operator-validator", "mig-manager"))
    assert pause["kept"][P + "dcgm-exporter"].startswith("false")
    # the pods are gone when the task returns: only the toolkit's is left
    assert sorted(operand_pods(proc)) == ["nvidia-container-toolkit-daemonset"] and pause["pods"] == []
    record = json.loads(stored_node(proc)["metadata"]["annotations"][ANN])["labels"]
    assert record == dict((k, labels_before[k]) for k in pause["paused"])
    patches = node_patches(proc)
    assert len(patches) == 1
    # one guarded write (the history keeps the body's first 600 characters)
    assert patches[0]["body"].startswith('[{"op":"test","path":"/metadata/resourceVersion"')
    assert patches[0]["user_agent"].startswith("OpenAPI-Generator/")

    # a second pause (a retried task) changes nothing and keeps the record of the first
    again = run(ansible, tmp_path, proc, [task("pause", state="paused", timeout=5, poll=0.2)]).task("pause")
    assert not again["changed"] and again["ok"] and len(node_patches(proc)) == 1
    assert json.loads(stored_node(proc)["metadata"]["annotations"][ANN])["labels"] == record

    # a new ansible-playbook run (as after a killed one) restores from the record on the Node alone
    res = run(ansible, tmp_path, proc, [task("restore", state="restored")])
    restore = res.task("restore")
    assert restore["changed"] and not restore.get("failed") and restore["left"] == {}, restore
    assert stored_node(proc)["metadata"]["labels"] == labels_before
    assert ANN not in (stored_node(proc)["metadata"].get("annotations") or {})
    back = operand_pods(proc)
    assert sorted(back) == sorted(before)
    assert all(back[ds] != before[ds] for ds in before if ds != "nvidia-container-toolkit-daemonset")  # new pods
    assert len(node_patches(proc)) == 2

    idle = run(ansible, tmp_path, proc, [task("restore", state="restored")]).task("restore")
    assert not idle["changed"] and "nothing paused" in idle["msg"] and len(node_patches(proc)) == 2


def test_restore_keeps_a_label_the_operator_changed_while_paused(ansible, tmp_path, api_double_factory):
    proc = api_double_factory(seed=operator_cluster())
    run(ansible, tmp_path, proc, [task("pause", state="paused", timeout=120, poll=0.2)])
    from kubernetes import client as k8s
    from kubernetes import config as k8s_config
    api = k8s_config.new_client_from_config(config_file=proc.kubeconfig)
    try:
        k8s.CoreV1Api(api).patch_node("gpu-0", {"metadata": {"labels": {P + "device-plugin": "false"}}})
    finally:
        api.close()
    restore = run(ansible, tmp_path, proc, [task("restore", state="restored")]).task("restore")
    labels = stored_node(proc)["metadata"]["labels"]
    assert labels[P + "device-plugin"] == "false" and labels[P + "dcgm"] == "true"
    assert list(restore["left"]) == [P + "device-plugin"] and "left as changed" in restore["msg"]
    assert "nvidia-device-plugin-daemonset" not in operand_pods(proc) and "nvidia-dcgm" in operand_pods(proc)


def test_check_mode_says_what_it_would_pause_and_writes_nothing(ansible, tmp_path, api_double_factory):
    proc = api_double_factory(seed=operator_cluster())
    res = run(ansible, tmp_path, proc, [task("pause", state="paused")], check=True, diff=True)
    pause = res.task("pause")
    assert res.rc == 0 and pause["changed"] and "would pause" in pause["msg"] and P + "dcgm" in pause["msg"]
    assert pause["diff"]["after"]["labels"][P + "device-plugin"] == PAUSED
    assert pause["diff"]["before"]["labels"][P + "device-plugin"] == "true"
    assert node_patches(proc) == [] and stored_node(proc)["metadata"]["labels"][P + "device-plugin"] == "true"
    assert len(operand_pods(proc)) == 5


def test_a_node_without_gpu_operator_labels_has_nothing_to_pause(ansible, tmp_path, api_double_factory):
    proc = api_double_factory(seed=operator_cluster())
    res = run(ansible, tmp_path, proc, [task("pause", "gpu-1", state="paused"), task("restore", "gpu-1", state="restored"),
                                        task("info", "gpu-1")])
    pause = res.task("pause")
    assert pause["ok"] and not pause["changed"] and not pause.get("failed")
    assert "no nvidia.com/gpu.deploy.* labels" in pause["msg"] and "fall back to a reboot" in pause["msg"]
    assert not res.task("restore")["changed"] and res.task("info")["labels"] == {}
    assert node_patches(proc, "gpu-1") == []


def test_a_read_only_identity_gets_a_clear_message_and_nothing_changes(ansible, tmp_path, api_double_factory):
    proc = api_double_factory(seed=operator_cluster())
    proc.client.add_fault({"resource": "nodes", "verbs": ["patch"], "code": 403, "reason": "Forbidden",
                           "message": 'nodes "gpu-0" is forbidden: User "viewer" cannot patch resource "nodes"'})
    res = run(ansible, tmp_path, proc, [task("pause", state="paused"), task("restore", state="restored")])
    pause = res.task("pause")
    assert pause["failed"] and "HTTP 403" in pause["msg"] and "cannot patch resource" in pause["msg"]
    assert "needs get and patch on nodes and list on pods" in pause["msg"]
    assert "Traceback" not in res.stdout
    restore = res.task("restore")   # nothing was recorded: nothing to write, no 403
    assert not restore.get("failed") and not restore["changed"]
    assert stored_node(proc)["metadata"]["labels"] == node("gpu-0", labels=OPERATOR_LABELS)["metadata"]["labels"]
    assert len(operand_pods(proc)) == 5


def test_a_pod_that_does_not_go_fails_the_pause_naming_it(ansible, tmp_path, api_double_factory):
    """A pod that a DaemonSet no longer reconciles (here: its owner is gone, the garbage collector
    has not removed it) keeps the GPUs open: the pause fails with its name after the timeout and
    the restore still brings the labels back."""
    ghost = {"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": "old-dcgm-exporter-x1", "namespace": NS,
                          "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "old-dcgm",
                                               "uid": "00000000-0000-4000-8000-00000000dead", "controller": True}]},
             "spec": {"nodeName": "gpu-0", "nodeSelector": {P + "dcgm": "true"},
                      "containers": [{"name": "c", "image": "nvcr.io/nvidia/dcgm"}]}}
    proc = api_double_factory(seed=operator_cluster(extra=[ghost]))
    res = run(ansible, tmp_path, proc, [task("pause", state="paused", timeout=1, poll=0.2),
                                        task("restore", state="restored")])
    pause = res.task("pause")
    assert pause["failed"] and not pause["ok"] and pause["polls"] >= 1
    assert "still there after 1.0 s" in pause["msg"] and NS + "/old-dcgm-exporter-x1" in pause["msg"]
    assert [p["name"] for p in pause["pods"]] == ["old-dcgm-exporter-x1"]
    assert res.task("restore")["changed"]
    assert stored_node(proc)["metadata"]["labels"] == node("gpu-0", labels=OPERATOR_LABELS)["metadata"]["labels"]


def test_bad_options_fail_before_any_write(ansible, tmp_path, api_double_factory):
    proc = api_double_factory(seed=operator_cluster())
    res = run(ansible, tmp_path, proc, [task("driver", state="paused", components=["driver"]),
                                        task("inf", state="paused", timeout="inf")])
    assert "never paused" in res.task("driver")["msg"] and res.task("inf")["failed"]
    assert node_patches(proc) == []


def test_an_identity_that_cannot_list_pods_fails_the_wait_with_the_hint_and_restores(ansible, tmp_path,
                                                                                     api_double_factory):
    proc = api_double_factory(seed=operator_cluster())
    proc.client.add_fault({"resource": "pods", "verbs": ["list"], "code": 403, "reason": "Forbidden",
                           "message": 'pods is forbidden: User "nodes-only" cannot list resource "pods"'})
    res = run(ansible, tmp_path, proc, [task("pause", state="paused", timeout=1, poll=0.2),
                                        task("restore", state="restored")])
    pause = res.task("pause")
    assert pause["failed"] and "last error: " in pause["msg"] and "HTTP 403" in pause["msg"]
    assert "needs get and patch on nodes and list on pods" in pause["msg"]
    assert res.task("restore")["changed"]
    assert stored_node(proc)["metadata"]["labels"] == node("gpu-0", labels=OPERATOR_LABELS)["metadata"]["labels"]
