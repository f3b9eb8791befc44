"""kubegpu.fleet.rollout_node_check's verdict of one round of node checks (the module results as
gpu_facts, driver_guard and checkpoint_sync return them)."""
import pytest

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.rollout.node_check import node_checks_ok

FACTS = {"ansible_facts": {"nvidia": {"probe": {"status": "ok"}, "driver_version": "570.172.08"}}}
GUARD = {"reboot_pending": False}
CHECKPOINT = {"stale": False, "stale_ids": []}


def test_all_good():
    ok, why = node_checks_ok(FACTS, GUARD, CHECKPOINT, "570.172.08")
    assert ok is True and why == "NVML ok, driver 570.172.08, kernel module loaded, checkpoint current"
    assert node_checks_ok(FACTS, GUARD, CHECKPOINT, "")[0] is True


@pytest.mark.parametrize("facts,guard,checkpoint,expected", [
    ({"ansible_facts": {"nvidia": {"probe": {"status": "hung", "error": "nvmlInit did not return"}}}}, GUARD,
     CHECKPOINT, "NVML probe hung: nvmlInit did not return"),
    ({"failed": True, "msg": "unreachable"}, GUARD, CHECKPOINT, "NVML probe failed: unreachable"),
    (FACTS, {"reboot_pending": True}, CHECKPOINT, "reboot_pending True"),
    (FACTS, {"failed": True, "msg": "x"}, CHECKPOINT, "reboot_pending None"),
    (FACTS, GUARD, {"stale": True, "stale_ids": ["GPU-9"]}, "kubelet checkpoint stale or unchecked: GPU-9"),
    (FACTS, GUARD, {}, "kubelet checkpoint stale or unchecked: "),
])
def test_each_failure_is_named(facts, guard, checkpoint, expected):
    ok, why = node_checks_ok(facts, guard, checkpoint, "570.172.08")
    assert ok is False and expected in why, why


def test_wrong_driver_version():
    ok, why = node_checks_ok(FACTS, GUARD, CHECKPOINT, "575.57.08")
    assert ok is False and why == "driver 570.172.08 is not 575.57.08"
