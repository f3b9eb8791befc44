"""GPU nodes and the disruption budget (GPU Operator semantics: percentages rounded up, unavailable
nodes counted once)."""
import pytest

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.rollout import gpu_nodes
from ansible_collections.kubegpu.fleet.tests.unit.plugins.plugin_utils.rollout.cluster_objects import node, fleet


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
    assert gpu_nodes.scaled_max_unavailable(value, total) == expected


@pytest.mark.parametrize("value", ["25", "x%", "-1", -1, None, True, "1.5", "25%%"])
def test_max_unavailable_rejects_garbage(value):
    if value == "25":  # a plain count in a string is fine
        assert gpu_nodes.scaled_max_unavailable(value, 6) == 25
        return
    with pytest.raises(gpu_nodes.RolloutError):
        gpu_nodes.scaled_max_unavailable(value, 6)


def test_gpu_node_detection_and_unavailability():
    plain = node("cpu", gpus=0, label_gpu=False)
    by_resource = node("r", gpus=1, label_gpu=False)
    by_label = node("l", gpus=0)
    mig_only = node("m", gpus=0, label_gpu=False, mig={"nvidia.com/mig-1g.10gb": "7"})
    assert not gpu_nodes.is_gpu_node(plain)
    assert gpu_nodes.is_gpu_node(by_resource) and gpu_nodes.is_gpu_node(by_label) and gpu_nodes.is_gpu_node(mig_only)
    nodes = [plain, node("a", cordoned=True), node("b", ready="False"), node("c", ready="Unknown"),
             node("d"), node("cpu2", gpus=0, label_gpu=False, cordoned=True)]
    assert gpu_nodes.unavailable_gpu_nodes(nodes) == {"a": "cordoned", "b": "NotReady", "c": "Ready=Unknown"}
    assert gpu_nodes.unavailable_reason(node("x", cordoned=True, ready="False")) == "cordoned, NotReady"
    no_conditions = node("y")
    no_conditions["status"]["conditions"] = []
    assert gpu_nodes.unavailable_reason(no_conditions) == "Ready=Unknown"


def test_budget_counts_already_unavailable_nodes_and_the_batch_once():
    nodes = fleet(6, n0={"cordoned": True})
    ok = gpu_nodes.budget_check(nodes, ["n0", "n1"], 2)   # n0 is in both: counted once
    assert ok["ok"] and ok["would_be"] == ["n0", "n1"] and ok["limit"] == 2
    bad = gpu_nodes.budget_check(nodes, ["n1", "n2"], 2)
    assert not bad["ok"] and bad["would_be"] == ["n0", "n1", "n2"]
    assert "n0 (cordoned)" in bad["msg"] and "max_unavailable 2 = 2 of 6" in bad["msg"]
    # percentages are of GPU nodes only
    nodes.append(node("cpu", gpus=0, label_gpu=False, cordoned=True))
    assert gpu_nodes.budget_check(nodes, ["n1"], "25%")["limit"] == 2
    assert gpu_nodes.budget_check(nodes, ["n1"], "25%")["ok"]
