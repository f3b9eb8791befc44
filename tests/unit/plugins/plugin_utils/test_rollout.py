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
    assert set(filters) == {"rollout_plan", "rollout_leftover"}
    with pytest.raises(AnsibleFilterError):
        filters["rollout_plan"](fleet(2), ["n0"], {}, "lots")


# ----------------------------------------------------------------- the role's decisions

def test_plan_from_inventory_hosts_reads_node_names_and_need_records():
    hostvars = {"h0": {"kubegpu_node_name": "n0"},
                "h1": {"kubegpu_node_name": "n1", "kubegpu_rolling_reboot_need": {
                    "planned": True, "reboot": False, "resume": False, "pending_reasons": [], "mode": "needed"}},
                "n2": {}}
    plan = rollout_filters.FilterModule().filters()["rollout_plan"](fleet(3), ["h0", "h1", "n2"], hostvars, 2, 0)
    assert plan["hosts"] == ["h0", "n2"]
    assert [t["node"] for t in plan["targets"]] == ["n0", "n2"]
    assert plan["report"][0] == plan["msg"] and plan["report"][1] == "order: n0, n2"
    assert plan["report"][2] == "skipped: n1: nothing to do: no reboot pending, no maintenance left open"
    assert ro.plan_from_hosts(fleet(1), "n0", {})["hosts"] == ["n0"]


def test_start_records_the_state_before_maintenance_or_resumes_the_annotation():
    n = node("n1", cordoned=True)
    out = ro.start_maintenance(n, "n1", {}, now=1000, drain_timeout=60)
    rec = out["record"]
    assert out["exists"] and not out["skip"] and not out["already"] and out["cordon"]
    assert rec["active"] is True and rec["drained"] is False and rec["was_unschedulable"] is True
    assert rec["boot_id"] == "boot-n1" and rec["allocatable"] == {"nvidia.com/gpu": 2} and rec["started"] == 1000
    assert out["drain_deadline"] == 1060
    saved = json.loads(out["annotations"]["kubegpu.io/maintenance"])
    assert saved == {"was_unschedulable": True, "boot_id": "boot-n1", "allocatable": {"nvidia.com/gpu": 2},
                     "started": 1000, "by": "kubegpu.fleet.rolling_reboot"}
    # an earlier run's record wins over the Node's cordon (which that run made)
    n["metadata"]["annotations"] = {"kubegpu.io/maintenance": json.dumps(dict(saved, was_unschedulable=False))}
    again = ro.start_maintenance(n, "n1", {}, now=2000)
    assert again["record"]["was_unschedulable"] is False and again["record"]["resumed"] is True
    assert again["record"]["started"] == 1000 and again["annotations"] == {}


def test_start_without_node_with_skip_label_or_already_drained():
    assert ro.start_maintenance({}, "gone")["exists"] is False
    assert "no Node gone" in ro.start_maintenance({}, "gone")["msg"]
    skip = ro.start_maintenance(node("n1", labels={"kubegpu.io/maintenance": "later"}), "n1",
                                skip_label="kubegpu.io/maintenance")
    assert skip["skip"] is True and skip["cordon"] is False and "labelled kubegpu.io/maintenance" in skip["msg"]
    running = {"active": True, "drained": True, "was_unschedulable": False}
    already = ro.start_maintenance(node("n1"), "n1", running)
    assert already["already"] is True and already["record"] == running and already["annotations"] == {}
    assert already["cordon"] is False


def test_drain_verdict_names_pods_and_budgets():
    left = [{"metadata": {"name": "train", "namespace": "ml", "labels": {"app": "train"}}, "status": {"phase": "Running"}},
            {"metadata": {"name": "ds", "namespace": "kube-system", "ownerReferences": [{"kind": "DaemonSet"}]}}]
    pdb = {"metadata": {"name": "all", "namespace": "ml"}, "spec": {"selector": {"matchLabels": {"app": "train"}}},
           "status": {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1}}
    out = ro.drain_verdict("n1", left, pdbs=[pdb], timeout=12, evict_error="429", maintenance={"active": True})
    assert out["ok"] is False
    assert out["msg"].startswith("drain of n1 did not finish within kubegpu_drain_timeout=12 s: ")
    assert "ml/train (not evicted)" in out["msg"] and "ml/all (disruptionsAllowed 0" in out["msg"]
    assert "Last eviction error: 429." in out["msg"] and out["msg"].endswith("The node stays cordoned and the rollout stops.")
    ok = ro.drain_verdict("n1", left[1:], maintenance={"active": True})
    assert ok["ok"] and ok["record"] == {"active": True, "drained": True, "terminating_accepted": []}
    going = [{"metadata": {"name": "p", "namespace": "ml", "deletionTimestamp": "t"}, "status": {"phase": "Running"}}]
    assert not ro.drain_verdict("n1", going)["ok"]
    wedged = ro.drain_verdict("n1", going, accept_terminating=True, wedged=True)
    assert wedged["ok"] and wedged["record"]["terminating_accepted"] == ["ml/p"] and "kubegpu_node_wedged" in wedged["msg"]
    api = ro.drain_verdict("n1", [], pods_error="connection refused", timeout=5)
    assert not api["ok"] and "within kubegpu_drain_timeout=5 s: connection refused." in api["msg"]


GOOD_CHECKS = {"nvidia": {"probe": {"status": "ok"}, "driver_version": "570.172.08"}, "reboot_pending": False,
               "checkpoint_stale": False, "checkpoint_stale_ids": []}
GOOD_API = {"plugin": {"found": True, "pod": "kube-system/plugin-x", "phase": "Running", "ready": True},
            "resources": {"ok": True, "rule": "unchanged", "msg": "allocatable {'nvidia.com/gpu': 2} as before"}}


def test_validation_verdict_passes_and_records_the_reboot():
    out = ro.validation_verdict("n1", GOOD_CHECKS, GOOD_API, "570.172.08", 600, {"active": True},
                                {"boot_id": "b2", "reasons": ["sentinel /run/reboot-required"]})
    assert out["ok"] is True and out["reasons"] == []
    assert out["msg"].startswith("n1 validated: NVML ok, driver 570.172.08")
    assert out["record"]["rebooted"] is True and out["record"]["new_boot_id"] == "b2"
    assert out["record"]["reboot_reasons"] == ["sentinel /run/reboot-required"]
    assert out["record"]["validation"]["plugin"]["ready"] is True


@pytest.mark.parametrize("checks,api,expected", [
    (dict(GOOD_CHECKS, nvidia={"probe": {"status": "failed", "error": "no libnvidia-ml"}}, msg="x"), GOOD_API,
     "NVML probe failed: no libnvidia-ml"),
    (dict(GOOD_CHECKS, nvidia={"probe": {"status": "ok"}, "driver_version": "570.124.06"}), GOOD_API,
     "driver 570.124.06 is not 570.172.08"),
    (dict(GOOD_CHECKS, reboot_pending=None), GOOD_API, "installed driver and loaded kernel module differ (reboot_pending None)"),
    (dict(GOOD_CHECKS, checkpoint_stale=True, checkpoint_stale_ids=["GPU-1"]), GOOD_API,
     "kubelet checkpoint stale or unchecked: GPU-1"),
    (GOOD_CHECKS, dict(GOOD_API, plugin={"found": False, "pod": None, "phase": None, "ready": False}),
     "device plugin pod (none) not Ready (phase None)"),
    (GOOD_CHECKS, {"failed": True, "msg": "GPU work on n1: not within 3 s"}, "GPU work on n1: not within 3 s"),
    ({}, {}, "NVML probe not run"),
])
def test_validation_verdict_names_each_failure(checks, api, expected):
    out = ro.validation_verdict("n1", checks, api, "570.172.08", 20)
    assert out["ok"] is False
    assert out["msg"].startswith("n1 did not validate within kubegpu_validate_timeout=20 s: ")
    assert expected in out["msg"], out["msg"]


def test_uncordon_only_nodes_that_were_schedulable_before():
    assert ro.uncordon_decision("n1", {"was_unschedulable": False, "active": True})["uncordon"] is True
    kept = ro.uncordon_decision("n1", {"was_unschedulable": True})
    assert kept["uncordon"] is False and "cordoned before the maintenance (host fact)" in kept["msg"]
    n = node("n1", cordoned=True)
    n["metadata"]["annotations"] = {"kubegpu.io/maintenance": '{"was_unschedulable":false}'}
    by_annotation = ro.uncordon_decision("n1", {}, n, now=5)
    assert by_annotation["uncordon"] is True and by_annotation["source"] == "annotation"
    assert by_annotation["record"] == {"active": False, "drained": False, "finished": 5, "uncordoned": True}
    unknown = ro.uncordon_decision("n1", {}, node("n1"))
    assert unknown["known"] is False and unknown["uncordon"] is False and "no record" in unknown["msg"]


def test_failure_record_knows_whether_the_node_was_cordoned_by_this_run():
    started = {"active": True, "drained": False, "resumed": False}
    never = ro.failure_record("n1", started, "disruption budget", "Wait until the disruption budget allows this batch")
    assert never["active"] is False and never["msg"].endswith("The node was not cordoned by this run.")
    assert 'failed in "Wait until the disruption budget allows this batch": disruption budget.' in never["msg"]
    cordoned = ro.failure_record("n1", started, "drain", cordon={"changed": True})
    assert cordoned["active"] is True and "stays cordoned" in cordoned["msg"]
    assert cordoned["record"]["failed"]["reason"] == "drain" and cordoned["failure"]["by"] == ro.ROLE
    assert ro.failure_record("n1", started, "x", cordon={"failed": True})["active"] is False
    assert ro.failure_record("n1", dict(started, resumed=True), "x")["active"] is True
    assert ro.failure_record("n1", {"active": True, "drained": True}, "x")["active"] is True
    closing = ro.failure_record("n1", {"active": False}, "patch conflict", uncordon_failed=True)
    assert closing["active"] is True
    assert ro.failure_record("n1", None, "")["failure"]["reason"] == "maintenance failed"
