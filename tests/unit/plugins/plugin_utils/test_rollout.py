"""The rolling_reboot decisions: budget (GPU Operator semantics), plan order and batches,
drain leftovers, PodDisruptionBudget matching, resource validation under MIG strategies."""
import json

import pytest

from ansible_collections.kubegpu.fleet.plugins.filter import rollout as rollout_filters
from ansible_collections.kubegpu.fleet.plugins.plugin_utils import rollout as ro


def node(name, gpus=2, cordoned=False, ready="True", labels=None, label_gpu=True, mig=None):
    lab = dict(labels or {})
    if label_gpu:
        lab["nvidia.com/gpu.present"] = "true"
    alloc = {"cpu": "31", "memory": "60Gi"}
    if gpus:
        alloc["nvidia.com/gpu"] = str(gpus)
    alloc.update(mig or {})
    obj = {"metadata": {"name": name, "labels": lab},
           "spec": {},
           "status": {"allocatable": alloc, "capacity": dict(alloc),
                      "conditions": [{"type": "Ready", "status": ready}],
                      "nodeInfo": {"bootID": "boot-%s" % name}}}
    if cordoned:
        obj["spec"]["unschedulable"] = True
    return obj


def fleet(n=6, **special):
    return [node("n%d" % i, **special.get("n%d" % i, {})) for i in range(n)]


# ----------------------------------------------------------------------------- budget

@pytest.mark.parametrize("value,total,expected", [
    ("25%", 6, 2),     # 1.5 rounded UP, as the GPU Operator does
    ("25%", 4, 1),
    ("25%", 5, 2),     # 1.25 -> 2
    ("10%", 1, 1),     # any percentage of a non-empty fleet gives at least one node
    ("0%", 6, 0),
    ("100%", 6, 6),
    (" 50 % ", 3, 2),
    (2, 6, 2),
    ("3", 6, 3),
    (0, 6, 0),
])
def test_max_unavailable_percent_rounds_up(value, total, expected):
    assert ro.scaled_max_unavailable(value, total) == expected


@pytest.mark.parametrize("value", ["25", "x%", "-1", -1, None, True, "1.5", "25%%"])
def test_max_unavailable_rejects_garbage(value):
    if value == "25":  # a plain count in a string is fine
        assert ro.scaled_max_unavailable(value, 6) == 25
        return
    with pytest.raises(ro.RolloutError):
        ro.scaled_max_unavailable(value, 6)


def test_gpu_node_detection_and_unavailability():
    plain = node("cpu", gpus=0, label_gpu=False)
    by_resource = node("r", gpus=1, label_gpu=False)
    by_label = node("l", gpus=0)
    mig_only = node("m", gpus=0, label_gpu=False, mig={"nvidia.com/mig-1g.10gb": "7"})
    assert not ro.is_gpu_node(plain)
    assert ro.is_gpu_node(by_resource) and ro.is_gpu_node(by_label) and ro.is_gpu_node(mig_only)
    nodes = [plain, node("a", cordoned=True), node("b", ready="False"), node("c", ready="Unknown"),
             node("d"), node("cpu2", gpus=0, label_gpu=False, cordoned=True)]
    assert ro.unavailable_gpu_nodes(nodes) == {"a": "cordoned", "b": "NotReady", "c": "Ready=Unknown"}
    assert ro.unavailable_reason(node("x", cordoned=True, ready="False")) == "cordoned, NotReady"
    no_conditions = node("y")
    no_conditions["status"]["conditions"] = []
    assert ro.unavailable_reason(no_conditions) == "Ready=Unknown"


def test_budget_counts_already_unavailable_nodes_and_the_batch_once():
    nodes = fleet(6, n0={"cordoned": True})
    ok = ro.budget_check(nodes, ["n0", "n1"], 2)   # n0 is in both: counted once
    assert ok["ok"] and ok["would_be"] == ["n0", "n1"] and ok["limit"] == 2
    bad = ro.budget_check(nodes, ["n1", "n2"], 2)
    assert not bad["ok"] and bad["would_be"] == ["n0", "n1", "n2"]
    assert "n0 (cordoned)" in bad["msg"] and "max_unavailable 2 = 2 of 6" in bad["msg"]
    # percentages are of GPU nodes only
    nodes.append(node("cpu", gpus=0, label_gpu=False, cordoned=True))
    assert ro.budget_check(nodes, ["n1"], "25%")["limit"] == 2
    assert ro.budget_check(nodes, ["n1"], "25%")["ok"]


# ------------------------------------------------------------------------------- plan

def test_plan_orders_unavailable_targets_first_and_sizes_batches():
    nodes = fleet(6, n3={"cordoned": True})
    plan = ro.plan_rollout(nodes, ["n0", "n1", "n2", "n3", "n4", "n5"], 2, 0)
    assert plan["hosts"] == ["n3", "n0", "n1", "n2", "n4", "n5"]
    assert plan["limit"] == 2 and plan["budget"] == 1 and plan["batch_size"] == 1
    # the cordoned node costs nothing, so it shares the first batch with one more node
    assert plan["serial"] == [2, 1, 1, 1, 1]
    assert sum(plan["serial"]) == 6
    assert plan["targets"][0]["unavailable"] == "cordoned"


def test_plan_batch_size_is_min_of_parallel_and_budget():
    nodes = fleet(8)
    assert ro.plan_rollout(nodes, [n["metadata"]["name"] for n in nodes], "50%", 3)["batch_size"] == 3
    assert ro.plan_rollout(nodes, [n["metadata"]["name"] for n in nodes], "50%", 3)["serial"] == [3, 3, 2]
    assert ro.plan_rollout(nodes, [n["metadata"]["name"] for n in nodes], "50%", 0)["batch_size"] == 4
    assert ro.plan_rollout(nodes, [n["metadata"]["name"] for n in nodes], "25%", 1)["serial"] == [1] * 8


def test_plan_maps_hosts_to_node_names_and_skips():
    nodes = fleet(4, n1={"labels": {"kubegpu.io/maintenance": "skip"}})
    nodes.append(node("cpu", gpus=0, label_gpu=False))
    targets = [["h0", "n0"], {"host": "h1", "node": "n1"}, ["h2", None], "cpu", ["h0", "n0"]]
    plan = ro.plan_rollout(nodes, targets, 1, 1)
    assert plan["hosts"] == ["h0"]
    assert plan["targets"] == [{"host": "h0", "node": "n0", "unavailable": None}]
    reasons = dict((s["host"], s["reason"]) for s in plan["skipped"])
    assert reasons["h1"] == "labelled kubegpu.io/maintenance=skip"
    assert reasons["h2"] == "no Node h2 in the cluster"
    assert reasons["cpu"].startswith("not a GPU node")
    # a custom skip label, key only
    nodes[0]["metadata"]["labels"]["frozen"] = "yes"
    assert ro.plan_rollout(nodes, ["n0", "n2"], 1, 1, skip_label="frozen")["hosts"] == ["n2"]


def test_plan_leaves_out_nodes_whose_need_check_found_nothing_to_do():
    nodes = fleet(5, n4={"cordoned": True})
    needs = {"n0": {"planned": True, "reboot": True, "resume": False, "mode": "needed"},
             "n1": {"planned": True, "reboot": False, "resume": False, "mode": "needed", "pending_reasons": []},
             "n2": {"planned": True, "reboot": False, "resume": True, "mode": "needed"},        # unfinished: resumed
             "n3": {"planned": True, "reboot": False, "resume": False, "mode": "never",
                    "pending_reasons": ["sentinel /run/reboot-required"]},
             "n4": {"planned": False, "reboot": False, "resume": False}}                        # not for this plan
    plan = ro.plan_rollout(nodes, ["n0", "n1", "n2", "n3", "n4"], 2, 0, needs=needs)
    assert plan["hosts"] == ["n4", "n0", "n2"] and plan["serial"] == [2, 1]
    reasons = dict((s["host"], s["reason"]) for s in plan["skipped"])
    assert reasons == {"n1": "nothing to do: no reboot pending, no maintenance left open",
                       "n3": "nothing to do: kubegpu_reboot=never holds back a reboot (sentinel /run/reboot-required)"}
    assert ro.plan_rollout(nodes, ["n1"], 2, 0, needs=needs)["hosts"] == []
    assert ro.nothing_to_do(None) is None and ro.nothing_to_do({"reboot": False}) is None


def test_plan_fails_naming_the_unavailable_nodes_when_no_budget_is_left():
    nodes = fleet(6, n0={"cordoned": True}, n1={"ready": "False"})
    with pytest.raises(ro.RolloutError) as err:
        ro.plan_rollout(nodes, ["n2", "n3"], 2, 1)
    assert "n0 (cordoned)" in str(err.value) and "n1 (NotReady)" in str(err.value)
    # ...unless some targets are the unavailable nodes themselves: they cost nothing
    plan = ro.plan_rollout(nodes, ["n2", "n0"], 2, 1)
    assert plan["hosts"] == ["n0", "n2"] and plan["serial"] == [1, 1] and plan["budget"] == 0


def test_plan_rejects_bad_inputs():
    with pytest.raises(ro.RolloutError):
        ro.plan_rollout(fleet(2), ["n0"], "many", 1)
    with pytest.raises(ro.RolloutError):
        ro.plan_rollout(fleet(2), ["n0"], 1, -1)
    with pytest.raises(ro.RolloutError):
        ro.plan_rollout(fleet(2), ["n0"], 1, 1, skip_label="=x")
    assert ro.plan_rollout(fleet(2), [], 1, 1)["hosts"] == []


# ------------------------------------------------------------------------------ drain

def pod(name, ns="ml", owner="ReplicaSet", deleting=False, phase="Running", labels=None, mirror=False):
    meta = {"name": name, "namespace": ns, "labels": labels or {}}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": "x", "controller": True}]
    if deleting:
        meta["deletionTimestamp"] = "2026-11-22T05:00:00Z"
    if mirror:
        meta["annotations"] = {"kubernetes.io/config.mirror": "abc"}
    return {"metadata": meta, "spec": {"containers": [{"name": "c", "image": "i"}]}, "status": {"phase": phase}}


def test_leftover_pods_classification():
    pods = [pod("plugin", ns="kube-system", owner="DaemonSet"), pod("static", owner=None, mirror=True),
            pod("done", phase="Succeeded"), pod("stuck", deleting=True), pod("running")]
    res = ro.leftover_pods(pods)
    assert not res["ok"]
    assert [(b["pod"], b["reason"]) for b in res["blocking"]] == [
        ("ml/stuck", "evicted but still Terminating"), ("ml/running", "not evicted")]
    assert sorted(i["reason"] for i in res["ignored"]) == ["DaemonSet", "Succeeded", "mirror pod"]
    # a wedged kubelet: evicted pods may stay Terminating, never-evicted ones still block
    wedged = ro.leftover_pods(pods, accept_terminating=True)
    assert [a["pod"] for a in wedged["accepted"]] == ["ml/stuck"]
    assert [b["pod"] for b in wedged["blocking"]] == ["ml/running"]
    assert ro.leftover_pods(pods[:4], accept_terminating=True)["ok"]
    assert ro.leftover_pods([])["ok"]


def test_pdbs_for_pods_and_report():
    pods = [pod("train-a", labels={"app": "train", "tier": "gpu"}), pod("web", labels={"app": "web"}),
            pod("other-ns", ns="default", labels={"app": "train"})]
    pdbs = [
        {"metadata": {"name": "train", "namespace": "ml"},
         "spec": {"minAvailable": 100, "selector": {"matchLabels": {"app": "train"}}},
         "status": {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 100}},
        {"metadata": {"name": "expr", "namespace": "ml"},
         "spec": {"maxUnavailable": 0, "selector": {"matchExpressions": [
             {"key": "tier", "operator": "In", "values": ["gpu"]}, {"key": "gone", "operator": "DoesNotExist"}]}}},
        {"metadata": {"name": "notin", "namespace": "ml"},
         "spec": {"selector": {"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["train"]},
                                                    {"key": "app", "operator": "Exists"}]}}},
        {"metadata": {"name": "noselector", "namespace": "ml"}, "spec": {}},
    ]
    found = ro.pdbs_for_pods(pods, pdbs)
    assert [(f["pdb"], f["pods"]) for f in found] == [
        ("ml/train", ["ml/train-a"]), ("ml/expr", ["ml/train-a"]), ("ml/notin", ["ml/web"])]
    only = ro.pdbs_for_pods(pods, pdbs, only=["ml/web"])
    assert [f["pdb"] for f in only] == ["ml/notin"]
    left = ro.leftover_pods([pods[0]])
    text = ro.drain_report(left, ro.pdbs_for_pods(pods, pdbs[:1]))
    assert "ml/train-a (not evicted)" in text
    assert "ml/train (disruptionsAllowed 0, currentHealthy 1, desiredHealthy 100, covers ml/train-a)" in text


# --------------------------------------------------------------------------- validate

def gpu(mig=None):
    if mig is None:
        return {"mig_mode": {"current": "disabled"}, "mig_devices": []}
    return {"mig_mode": {"current": "enabled"}, "mig_devices": [{"profile": p} for p in mig]}


R570 = {"gpus": [gpu(["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]), gpu()]}


def test_expected_resources_under_each_mig_strategy():
    assert ro.expected_resources({"gpus": [gpu(), gpu()]}, "none") == {"nvidia.com/gpu": 2}
    assert ro.expected_resources(R570, "none") == {"nvidia.com/gpu": 2}
    assert ro.expected_resources(R570, "mixed") == {"nvidia.com/gpu": 1, "nvidia.com/mig-3g.40gb": 1,
                                                    "nvidia.com/mig-2g.20gb": 1, "nvidia.com/mig-1g.10gb": 2}
    assert ro.expected_resources(R570, "single") is None   # the plugin refuses a mixed layout
    all_mig = {"gpus": [gpu(["1g.10gb"] * 7), gpu(["3g.40gb", "3g.40gb"])]}
    assert ro.expected_resources(all_mig, "single") == {"nvidia.com/gpu": 9}
    assert ro.expected_resources({"gpus": []}, "mixed") == {}
    with pytest.raises(ro.RolloutError):
        ro.expected_resources(R570, "weird")


def test_resources_check_rules():
    pre = {"nvidia.com/gpu": 2}
    assert ro.resources_check(pre, {"nvidia.com/gpu": "2"})["rule"] == "unchanged"
    lost = ro.resources_check(pre, {"nvidia.com/gpu": "1"}, {"nvidia.com/gpu": 2})
    assert not lost["ok"] and lost["missing"] == {"nvidia.com/gpu": 1}
    # the R570 node: whole GPUs before, MIG devices after the fixed driver booted
    post = ro.expected_resources(R570, "mixed")
    mig = ro.resources_check(pre, post, post)
    assert mig["ok"] and mig["rule"] == "mig_strategy"
    assert not ro.resources_check(pre, post, None)["ok"]
    # zero entries do not matter; an empty node that should have GPUs does
    assert ro.resources_check({"nvidia.com/gpu": 2, "nvidia.com/mig-1g.10gb": "0"}, {"nvidia.com/gpu": 2})["ok"]
    assert not ro.resources_check({}, {}, {"nvidia.com/gpu": 2})["ok"]
    assert ro.resources_check({}, {}, None)["rule"] == "unchanged"
    assert ro.resources_check({"cpu": "3", "nvidia.com/gpu": "2"}, {"nvidia.com/gpu": 2})["ok"]


def test_plugin_pod_strategy_from_pod_or_daemonset():
    ds = {"metadata": {"name": "plugin"}, "spec": {"template": {"spec": {"containers": [
        {"name": "c", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.2",
         "env": [{"name": "MIG_STRATEGY", "value": "mixed"}]}]}}}}
    p = {"metadata": {"name": "plugin-x", "namespace": "kube-system",
                      "ownerReferences": [{"kind": "DaemonSet", "name": "plugin"}]},
         "spec": {"containers": [{"name": "c", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.2"}]},
         "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    got = ro.plugin_pod([pod("train"), p], [ds])
    assert got == {"found": True, "pod": "kube-system/plugin-x", "phase": "Running", "ready": True,
                   "running": True, "mig_strategy": "mixed"}
    assert ro.plugin_pod([p])["mig_strategy"] == "none"
    p["spec"]["containers"][0]["env"] = [{"name": "MIG_STRATEGY", "value": "single"}]
    assert ro.plugin_pod([p], [ds])["mig_strategy"] == "single"
    p["metadata"]["deletionTimestamp"] = "2026-11-22T05:00:00Z"
    assert not ro.plugin_pod([p])["ready"]
    assert not ro.plugin_pod([pod("train")])["found"]


# ------------------------------------------------------------------- reboot, annotation

def test_kernel_reboot_needed():
    assert ro.kernel_reboot_needed("6.8.0-45-generic", ["/boot/vmlinuz-6.8.0-45-generic"]) is False
    assert ro.kernel_reboot_needed("6.8.0-45-generic", ["/boot/vmlinuz-6.8.0-45-generic",
                                                        "/boot/vmlinuz-6.8.0-49-generic"]) is True
    assert ro.kernel_reboot_needed("6.8.0-100-generic", ["vmlinuz-6.8.0-99-generic", "vmlinuz-6.8.0-100-generic"]) is False
    assert ro.kernel_reboot_needed("6.18.0", []) is None
    assert ro.kernel_reboot_needed("", ["vmlinuz-1"]) is None


def test_maintenance_annotation_round_trip():
    rec = {"active": True, "was_unschedulable": True, "boot_id": "b", "allocatable": {"nvidia.com/gpu": 2},
           "started": 1, "drained": True}
    text = ro.maintenance_annotation(rec)
    assert json.loads(text) == {"was_unschedulable": True, "boot_id": "b", "allocatable": {"nvidia.com/gpu": 2},
                                "started": 1}
    assert ro.parse_maintenance_annotation(text)["was_unschedulable"] is True
    assert ro.parse_maintenance_annotation("") is None
    assert ro.parse_maintenance_annotation("{not json") is None
    assert ro.parse_maintenance_annotation('{"was_unschedulable": "yes"}') is None


def test_filters_are_registered_and_raise_filter_errors():
    from ansible.errors import AnsibleFilterError
    filters = rollout_filters.FilterModule().filters()
    assert {"rollout_plan", "rollout_budget", "rollout_leftover", "rollout_resources_check"} <= set(filters)
    with pytest.raises(AnsibleFilterError):
        filters["rollout_plan"](fleet(2), ["n0"], "lots")
