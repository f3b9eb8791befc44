"""The decisions of one node's maintenance: start, drain verdict, validation verdict, uncordon, failure."""
import json
import pytest

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.rollout import decisions
from ansible_collections.kubegpu.fleet.tests.unit.plugins.plugin_utils.rollout.cluster_objects import node


# ----------------------------------------------------------------- the role's decisions

def test_start_records_the_state_before_maintenance_or_resumes_the_annotation():
    n = node("n1", cordoned=True)
    out = decisions.start_maintenance(n, "n1", {}, now=1000, drain_timeout=60)
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
    again = decisions.start_maintenance(n, "n1", {}, now=2000)
    assert again["record"]["was_unschedulable"] is False and again["record"]["resumed"] is True
    assert again["record"]["started"] == 1000 and again["annotations"] == {}


def test_start_without_node_with_skip_label_or_already_drained():
    assert decisions.start_maintenance({}, "gone")["exists"] is False
    assert "no Node gone" in decisions.start_maintenance({}, "gone")["msg"]
    skip = decisions.start_maintenance(node("n1", labels={"kubegpu.io/maintenance": "later"}), "n1",
                                       skip_label="kubegpu.io/maintenance")
    assert skip["skip"] is True and skip["cordon"] is False and "labelled kubegpu.io/maintenance" in skip["msg"]
    running = {"active": True, "drained": True, "was_unschedulable": False}
    already = decisions.start_maintenance(node("n1"), "n1", running)
    assert already["already"] is True and already["record"] == running and already["annotations"] == {}
    assert already["cordon"] is False


def test_drain_verdict_names_pods_and_budgets():
    left = [{"metadata": {"name": "train", "namespace": "ml", "labels": {"app": "train"}}, "status": {"phase": "Running"}},
            {"metadata": {"name": "ds", "namespace": "kube-system", "ownerReferences": [{"kind": "DaemonSet"}]}}]
    pdb = {"metadata": {"name": "all", "namespace": "ml"}, "spec": {"selector": {"matchLabels": {"app": "train"}}},
           "status": {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1}}
    out = decisions.drain_verdict("n1", left, pdbs=[pdb], timeout=12, evict_error="429", maintenance={"active": True})
    assert out["ok"] is False
    assert out["msg"].startswith("drain of n1 did not finish within kubegpu_drain_timeout=12 s: ")
    assert "ml/train (not evicted)" in out["msg"] and "ml/all (disruptionsAllowed 0" in out["msg"]
    assert "Last eviction error: 429." in out["msg"] and out["msg"].endswith("The node stays cordoned and the rollout stops.")
    ok = decisions.drain_verdict("n1", left[1:], maintenance={"active": True})
    assert ok["ok"] and ok["record"] == {"active": True, "drained": True, "terminating_accepted": []}
    going = [{"metadata": {"name": "p", "namespace": "ml", "deletionTimestamp": "t"}, "status": {"phase": "Running"}}]
    assert not decisions.drain_verdict("n1", going)["ok"]
    wedged = decisions.drain_verdict("n1", going, accept_terminating=True, wedged=True)
    assert wedged["ok"] and wedged["record"]["terminating_accepted"] == ["ml/p"] and "kubegpu_node_wedged" in wedged["msg"]
    api = decisions.drain_verdict("n1", [], pods_error="connection refused", timeout=5)
    assert not api["ok"] and "within kubegpu_drain_timeout=5 s: connection refused." in api["msg"]


GOOD_CHECKS = {"nvidia": {"probe": {"status": "ok"}, "driver_version": "570.172.08"}, "reboot_pending": False,
               "checkpoint_stale": False, "checkpoint_stale_ids": []}
GOOD_API = {"plugin": {"found": True, "pod": "kube-system/plugin-x", "phase": "Running", "ready": True},
            "resources": {"ok": True, "rule": "unchanged", "msg": "allocatable {'nvidia.com/gpu': 2} as before"}}


def test_validation_verdict_passes_and_records_the_reboot():
    out = decisions.validation_verdict("n1", GOOD_CHECKS, GOOD_API, "570.172.08", 600, {"active": True},
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
    out = decisions.validation_verdict("n1", checks, api, "570.172.08", 20)
    assert out["ok"] is False
    assert out["msg"].startswith("n1 did not validate within kubegpu_validate_timeout=20 s: ")
    assert expected in out["msg"], out["msg"]


def test_uncordon_only_nodes_that_were_schedulable_before():
    assert decisions.uncordon_decision("n1", {"was_unschedulable": False, "active": True})["uncordon"] is True
    kept = decisions.uncordon_decision("n1", {"was_unschedulable": True})
    assert kept["uncordon"] is False and "cordoned before the maintenance (host fact)" in kept["msg"]
    n = node("n1", cordoned=True)
    n["metadata"]["annotations"] = {"kubegpu.io/maintenance": '{"was_unschedulable":false}'}
    by_annotation = decisions.uncordon_decision("n1", {}, n, now=5)
    assert by_annotation["uncordon"] is True and by_annotation["source"] == "annotation"
    assert by_annotation["record"] == {"active": False, "drained": False, "finished": 5, "uncordoned": True}
    unknown = decisions.uncordon_decision("n1", {}, node("n1"))
    assert unknown["known"] is False and unknown["uncordon"] is False and "no record" in unknown["msg"]


def test_failure_record_knows_whether_the_node_was_cordoned_by_this_run():
    started = {"active": True, "drained": False, "resumed": False}
    never = decisions.failure_record("n1", started, "disruption budget", "Wait until the disruption budget allows this batch")
    assert never["active"] is False and never["msg"].endswith("The node was not cordoned by this run.")
    assert 'failed in "Wait until the disruption budget allows this batch": disruption budget.' in never["msg"]
    cordoned = decisions.failure_record("n1", started, "drain", cordon={"changed": True})
    assert cordoned["active"] is True and "stays cordoned" in cordoned["msg"]
    assert cordoned["record"]["failed"]["reason"] == "drain" and cordoned["failure"]["by"] == decisions.ROLE
    assert decisions.failure_record("n1", started, "x", cordon={"failed": True})["active"] is False
    assert decisions.failure_record("n1", dict(started, resumed=True), "x")["active"] is True
    assert decisions.failure_record("n1", {"active": True, "drained": True}, "x")["active"] is True
    closing = decisions.failure_record("n1", {"active": False}, "patch conflict", uncordon_failed=True)
    assert closing["active"] is True
    assert decisions.failure_record("n1", None, "")["failure"]["reason"] == "maintenance failed"
