"""The rollout plan: order, batches, the nodes left out, the plan filter over inventory hosts."""
import pytest

from ansible_collections.kubegpu.fleet.plugins.filter import rollout as rollout_filters
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.rollout import gpu_nodes, plan as planner
from ansible_collections.kubegpu.fleet.tests.unit.plugins.plugin_utils.rollout.cluster_objects import node, fleet


# ------------------------------------------------------------------------------- plan

def test_plan_orders_unavailable_targets_first_and_sizes_batches():
    nodes = fleet(6, n3={"cordoned": True})
    plan = planner.plan_rollout(nodes, ["n0", "n1", "n2", "n3", "n4", "n5"], 2, 0)
    assert plan["hosts"] == ["n3", "n0", "n1", "n2", "n4", "n5"]
    assert plan["limit"] == 2 and plan["budget"] == 1 and plan["batch_size"] == 1
    # the cordoned node costs nothing, so it shares the first batch with one more node
    assert plan["serial"] == [2, 1, 1, 1, 1]
    assert sum(plan["serial"]) == 6
    assert plan["targets"][0]["unavailable"] == "cordoned"


def test_plan_batch_size_is_min_of_parallel_and_budget():
    nodes = fleet(8)
    assert planner.plan_rollout(nodes, [n["metadata"]["name"] for n in nodes], "50%", 3)["batch_size"] == 3
    assert planner.plan_rollout(nodes, [n["metadata"]["name"] for n in nodes], "50%", 3)["serial"] == [3, 3, 2]
    assert planner.plan_rollout(nodes, [n["metadata"]["name"] for n in nodes], "50%", 0)["batch_size"] == 4
    assert planner.plan_rollout(nodes, [n["metadata"]["name"] for n in nodes], "25%", 1)["serial"] == [1] * 8


def test_plan_maps_hosts_to_node_names_and_skips():
    nodes = fleet(4, n1={"labels": {"kubegpu.io/maintenance": "skip"}})
    nodes.append(node("cpu", gpus=0, label_gpu=False))
    targets = [["h0", "n0"], {"host": "h1", "node": "n1"}, ["h2", None], "cpu", ["h0", "n0"]]
    plan = planner.plan_rollout(nodes, targets, 1, 1)
    assert plan["hosts"] == ["h0"]
    assert plan["targets"] == [{"host": "h0", "node": "n0", "unavailable": None}]
    reasons = dict((s["host"], s["reason"]) for s in plan["skipped"])
    assert reasons["h1"] == "labelled kubegpu.io/maintenance=skip"
    assert reasons["h2"] == "no Node h2 in the cluster"
    assert reasons["cpu"].startswith("not a GPU node")
    # a custom skip label, key only
    nodes[0]["metadata"]["labels"]["frozen"] = "yes"
    assert planner.plan_rollout(nodes, ["n0", "n2"], 1, 1, skip_label="frozen")["hosts"] == ["n2"]


def test_plan_leaves_out_nodes_whose_need_check_found_nothing_to_do():
    nodes = fleet(5, n4={"cordoned": True})
    needs = {"n0": {"planned": True, "reboot": True, "resume": False, "mode": "needed"},
             "n1": {"planned": True, "reboot": False, "resume": False, "mode": "needed", "pending_reasons": []},
             "n2": {"planned": True, "reboot": False, "resume": True, "mode": "needed"},        # unfinished: resumed
             "n3": {"planned": True, "reboot": False, "resume": False, "mode": "never",
                    "pending_reasons": ["sentinel /run/reboot-required"]},
             "n4": {"planned": False, "reboot": False, "resume": False}}                        # not for this plan
    plan = planner.plan_rollout(nodes, ["n0", "n1", "n2", "n3", "n4"], 2, 0, needs=needs)
    assert plan["hosts"] == ["n4", "n0", "n2"] and plan["serial"] == [2, 1]
    reasons = dict((s["host"], s["reason"]) for s in plan["skipped"])
    assert reasons == {"n1": "nothing to do: no reboot pending, no maintenance left open",
                       "n3": "nothing to do: kubegpu_reboot=never holds back a reboot (sentinel /run/reboot-required)"}
    assert planner.plan_rollout(nodes, ["n1"], 2, 0, needs=needs)["hosts"] == []
    assert planner.nothing_to_do(None) is None and planner.nothing_to_do({"reboot": False}) is None


def test_plan_fails_naming_the_unavailable_nodes_when_no_budget_is_left():
    nodes = fleet(6, n0={"cordoned": True}, n1={"ready": "False"})
    with pytest.raises(gpu_nodes.RolloutError) as err:
        planner.plan_rollout(nodes, ["n2", "n3"], 2, 1)
    assert "n0 (cordoned)" in str(err.value) and "n1 (NotReady)" in str(err.value)
    # ...unless some targets are the unavailable nodes themselves: they cost nothing
    plan = planner.plan_rollout(nodes, ["n2", "n0"], 2, 1)
    assert plan["hosts"] == ["n0", "n2"] and plan["serial"] == [1, 1] and plan["budget"] == 0


def test_plan_rejects_bad_inputs():
    with pytest.raises(gpu_nodes.RolloutError):
        planner.plan_rollout(fleet(2), ["n0"], "many", 1)
    with pytest.raises(gpu_nodes.RolloutError):
        planner.plan_rollout(fleet(2), ["n0"], 1, -1)
    with pytest.raises(gpu_nodes.RolloutError):
        planner.plan_rollout(fleet(2), ["n0"], 1, 1, skip_label="=x")
    assert planner.plan_rollout(fleet(2), [], 1, 1)["hosts"] == []


def test_filters_are_registered_and_raise_filter_errors():
    from ansible.errors import AnsibleFilterError
    filters = rollout_filters.FilterModule().filters()
    assert set(filters) == {"rollout_plan", "rollout_leftover"}
    with pytest.raises(AnsibleFilterError):
        filters["rollout_plan"](fleet(2), ["n0"], {}, "lots")


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
    assert planner.plan_from_hosts(fleet(1), "n0", {})["hosts"] == ["n0"]
