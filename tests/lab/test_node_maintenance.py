"""kubegpu.fleet.node_maintenance through real ansible-playbook against the Kubernetes API double:
the real kubernetes client in the action plugin, real HTTP, the double's history as the record."""
import json
import threading

from kubernetes import client as k8s
from kubernetes import config as k8s_config

from apidouble_fixture import api_double, api_double_factory  # noqa: F401 pylint: disable=unused-import
from test_api_double import cluster, node, play_env

ANN = "kubegpu.io/maintenance"
FAILED = "kubegpu.io/maintenance-failed"


def run(ansible, tmp_path, proc, tasks, check=False, diff=False):
    for t in tasks:
        for key, args in list(t.items()):
            if key == "kubegpu.fleet.node_maintenance":
                args.setdefault("kubeconfig", proc.kubeconfig)
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]
    return ansible.playbook(play, env=play_env(tmp_path), check=check, diff=diff)


def nm(task, node_name="gpu-0", **args):
    args["name"] = node_name
    return {"name": task, "kubegpu.fleet.node_maintenance": args, "register": task.replace(" ", "_"),
            "ignore_errors": True}


def node_patches(proc, name):
    return [e for e in proc.client.history(resource="nodes")
            if e["name"] == name and e["verb"] == "patch" and e.get("changed")]


def stored(proc, name):
    return [n for n in proc.client.state()["objects"]["nodes"] if n["metadata"]["name"] == name][0]


def test_info_reads_the_node_or_reports_it_missing(ansible, tmp_path, api_double_factory):
    proc = api_double_factory(seed=cluster())
    res = run(ansible, tmp_path, proc, [nm("read"), nm("missing", "no-such-node")])
    assert res.rc == 0, res.stdout[-3000:]
    read = res.task("read")
    assert read["exists"] and read["node"]["metadata"]["name"] == "gpu-0" and not read["changed"]
    assert res.task("missing")["exists"] is False and not res.task("missing").get("failed")


def test_cordon_and_record_is_one_patch_check_mode_writes_nothing_and_reruns_change_nothing(ansible, tmp_path,
                                                                                            api_double_factory):
    proc = api_double_factory(seed=cluster())
    cordon = nm("cordon", state="patched", unschedulable=True, annotations={ANN: '{"was_unschedulable":false}'})
    check = run(ansible, tmp_path, proc, [dict(cordon)], check=True, diff=True)
    assert check.rc == 0 and check.task("cordon")["changed"] is True
    diff = check.task("cordon")["diff"]
    assert diff["before"] == {"unschedulable": False, "annotations": {}}
    assert diff["after"] == {"unschedulable": True, "annotations": {ANN: '{"was_unschedulable":false}'}}
    assert node_patches(proc, "gpu-0") == [] and not stored(proc, "gpu-0")["spec"].get("unschedulable")

    first = run(ansible, tmp_path, proc, [dict(cordon)])
    assert first.rc == 0 and first.task("cordon")["changed"] is True
    patches = node_patches(proc, "gpu-0")
    assert len(patches) == 1 and patches[0]["user_agent"].startswith("OpenAPI-Generator/")
    ops = json.loads(patches[0]["body"])
    assert ops[0]["op"] == "test" and ops[0]["path"] == "/metadata/resourceVersion"
    obj = stored(proc, "gpu-0")
    assert obj["spec"]["unschedulable"] is True and obj["metadata"]["annotations"][ANN] == '{"was_unschedulable":false}'
    assert any(t["key"] == "node.kubernetes.io/unschedulable" for t in obj["spec"].get("taints", []))

    again = run(ansible, tmp_path, proc, [dict(cordon)])
    assert again.task("cordon")["changed"] is False and len(node_patches(proc, "gpu-0")) == 1

    uncordon = nm("uncordon", state="patched", unschedulable=False, annotations={ANN: None, FAILED: None})
    res = run(ansible, tmp_path, proc, [uncordon])
    assert res.task("uncordon")["changed"] is True
    obj = stored(proc, "gpu-0")
    assert not obj["spec"].get("unschedulable") and ANN not in (obj["metadata"].get("annotations") or {})
    assert len(node_patches(proc, "gpu-0")) == 2


def test_ready_waits_for_a_new_boot_id_and_times_out_with_the_reason(ansible, tmp_path, api_double_factory):
    """Event-driven: the node "reboots" only after the double has served the waiting task the Node
    with the old bootID, so the wait must have seen the old one and polled again, however slow
    Ansible is to start. The safety deadline only bounds a broken run; no duration is asserted."""
    proc = api_double_factory(seed=cluster())
    control = proc.client
    api = k8s_config.new_client_from_config(config_file=proc.kubeconfig)
    core = k8s.CoreV1Api(api)
    old_rv = stored(proc, "gpu-1")["metadata"]["resourceVersion"]
    start_seq = max([e["seq"] for e in control.reads()] or [0])
    outcome = {}

    def reboot_after_the_first_read():
        try:
            outcome["seen"] = control.wait_for_read(since=start_seq, timeout=300, verb="get", resource="nodes",
                                                    name="gpu-1", user_agent="OpenAPI-Generator/*")
            patched = core.patch_node_status("gpu-1", {"status": {"nodeInfo": {"bootID": "boot-gpu-1-2"}}})
            outcome["rv"] = patched.metadata.resource_version
        except Exception as exc:  # pylint: disable=broad-except
            outcome["error"] = repr(exc)

    worker = threading.Thread(target=reboot_after_the_first_read)
    worker.start()
    try:
        res = run(ansible, tmp_path, proc, [
            nm("back", "gpu-1", state="ready", boot_id="boot-gpu-1-1", timeout=300, poll=0.2),
            nm("stuck", "gpu-0", state="ready", boot_id="boot-gpu-0-1", timeout=1, poll=0.2)])
    finally:
        worker.join()
        api.close()
    assert "error" not in outcome, outcome
    assert outcome["seen"]["resourceVersion"] == old_rv          # the task was served the old bootID ...
    back = res.task("back")
    assert back["ok"] and back["boot_id"] == "boot-gpu-1-2" and back["polls"] > 1, back   # ... and kept polling
    served = [e["resourceVersion"] for e in control.reads(since=start_seq, verb="get", resource="nodes", name="gpu-1")]
    assert served[0] == old_rv and served[-1] == outcome["rv"] and len(served) == back["polls"], served
    stuck = res.task("stuck")
    assert stuck["failed"] and "bootID still boot-gpu-0-1" in stuck["msg"] and "not within 1.0 s" in stuck["msg"]
    assert stuck["polls"] >= 1 and stuck["boot_id"] == "boot-gpu-0-1"


def test_budget_counts_nodes_already_unavailable(ansible, tmp_path, api_double_factory):
    proc = api_double_factory(seed=cluster(extra=[node("gpu-3", unschedulable=True)]))
    res = run(ansible, tmp_path, proc, [
        nm("one", state="budget", batch=["gpu-0"], max_unavailable="1"),
        nm("two", state="budget", batch=["gpu-0"], max_unavailable="2")])
    one, two = res.task("one"), res.task("two")
    assert one["failed"] and one["budget"]["ok"] is False and "gpu-3 (cordoned)" in one["msg"]
    assert two["ok"] and two["budget"]["would_be"] == ["gpu-0", "gpu-3"] and not two.get("failed")


def test_validated_needs_the_plugin_pod_ready_and_the_gpus_back(ansible, tmp_path, api_double_factory):
    proc = api_double_factory(seed=cluster())
    pods = [p for p in proc.client.state()["objects"]["pods"] if p["spec"].get("nodeName") == "gpu-0"
            and "device-plugin" in p["spec"]["containers"][0]["image"]]
    assert pods, "the double's DaemonSet controller made no plugin pod on gpu-0"
    res = run(ansible, tmp_path, proc, [
        nm("same", state="validated", allocatable={"nvidia.com/gpu": 8}, timeout=5, poll=0.2),
        nm("fewer", state="validated", allocatable={"nvidia.com/gpu": 9}, timeout=0.5, poll=0.2)])
    same, fewer = res.task("same"), res.task("fewer")
    assert same["ok"] and same["plugin"]["ready"] and same["resources"]["ok"], same
    assert fewer["failed"] and fewer["resources"]["ok"] is False and "GPU work on gpu-0" in fewer["msg"]


def test_bad_input_fails_with_a_message(ansible, tmp_path, api_double_factory):
    proc = api_double_factory(seed=cluster())
    res = run(ansible, tmp_path, proc, [
        nm("number", state="patched", annotations={ANN: 3}),
        nm("mixed", state="info", unschedulable=True),
        nm("poll", state="ready", poll=0),
        {"name": "nokube", "kubegpu.fleet.node_maintenance": {"name": "gpu-0", "kubeconfig": str(tmp_path / "none")},
         "register": "nokube", "ignore_errors": True}])
    assert "not strings: kubegpu.io/maintenance" in res.task("number")["msg"]
    assert "need state=patched" in res.task("mixed")["msg"]
    assert "poll must be between 0.001 and 3600 seconds, got 0.0" in res.task("poll")["msg"]
    assert "cannot load the kubeconfig" in res.task("nokube")["msg"]
    assert all("Traceback" not in (res.task(n).get("msg") or "") for n in ("number", "mixed", "poll", "nokube"))
    assert node_patches(proc, "gpu-0") == []
