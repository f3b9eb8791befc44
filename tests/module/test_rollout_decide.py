"""kubegpu.fleet.rollout_decide through real ansible-playbook: each decision's facts, its failure
and check mode, as the rolling_reboot role wires them."""
import json

ENV = {"ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.json"}

NODE = {"metadata": {"name": "gpu-1", "labels": {"nvidia.com/gpu.present": "true"}, "annotations": {}},
        "spec": {}, "status": {"allocatable": {"nvidia.com/gpu": "2"}, "nodeInfo": {"bootID": "boot-1"},
                               "conditions": [{"type": "Ready", "status": "True"}]}}
CHECKS = {"nvidia": {"probe": {"status": "ok"}, "driver_version": "570.172.08"}, "reboot_pending": False,
          "checkpoint_stale": False, "checkpoint_stale_ids": []}
API = {"plugin": {"found": True, "pod": "kube-system/p", "phase": "Running", "ready": True},
       "resources": {"ok": True, "rule": "unchanged", "msg": "allocatable as before"}}


def play(tasks):
    return [{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]


def test_a_maintenance_from_start_to_uncordon(ansible):
    tasks = [
        {"name": "start", "kubegpu.fleet.rollout_decide": {"decision": "start", "name": "gpu-1", "node": NODE,
                                                           "timeout": 60}},
        {"name": "drain", "kubegpu.fleet.rollout_decide": {
            "decision": "drain", "name": "gpu-1", "pods": [], "maintenance": "{{ kubegpu_maintenance }}"}},
        {"name": "validation", "kubegpu.fleet.rollout_decide": {
            "decision": "validation", "name": "gpu-1", "checks": CHECKS, "api": API, "close": True,
            "maintenance": "{{ kubegpu_maintenance }}", "reboot": {"boot_id": "boot-2"},
            "reboot_reasons": ["sentinel /run/reboot-required"], "driver_version": "570.172.08"}},
        {"name": "facts", "ansible.builtin.debug": {
            "msg": "{{ {'m': kubegpu_maintenance, 'u': kubegpu_rolling_reboot_uncordon,"
                   " 'w': kubegpu_rolling_reboot_wants_down} | to_json }}"}},
    ]
    res = ansible.playbook(play(tasks), env=ENV)
    assert res.rc == 0, res.stdout[-3000:]
    start = res.task("start")
    assert start["decision"]["cordon"] is True
    saved = json.loads(start["decision"]["annotations"]["kubegpu.io/maintenance"])
    assert saved["was_unschedulable"] is False and saved["boot_id"] == "boot-1"
    assert res.task("validation")["msg"].startswith("gpu-1 validated: NVML ok, driver 570.172.08")
    assert "gpu-1 uncordoned" in res.task("validation")["msg"]
    facts = json.loads(res.task("facts")["msg"])
    assert facts["u"]["uncordon"] is True and facts["w"] is False
    assert facts["m"]["active"] is False and facts["m"]["rebooted"] is True and facts["m"]["new_boot_id"] == "boot-2"
    assert facts["m"]["validation"]["driver_ok"] is True


def test_negative_decisions_fail_with_their_reasons(ansible):
    tasks = [
        {"name": "no node", "kubegpu.fleet.rollout_decide": {"decision": "start", "name": "gone", "node": {}},
         "ignore_errors": True},
        {"name": "not validated", "kubegpu.fleet.rollout_decide": {
            "decision": "validation", "name": "gpu-1", "checks": dict(CHECKS, reboot_pending=True), "api": API,
            "timeout": 20, "close": True}, "ignore_errors": True},
        {"name": "failure", "kubegpu.fleet.rollout_decide": {
            "decision": "failure", "name": "gpu-1", "maintenance": {"active": True, "drained": True},
            "reason": "drain timed out", "task": "Drain"}, "ignore_errors": True},
        {"name": "bad decision", "kubegpu.fleet.rollout_decide": {"decision": "maybe", "name": "gpu-1"},
         "ignore_errors": True},
    ]
    res = ansible.playbook(play(tasks), env=ENV)
    assert res.task("no node")["failed"] is True and "no Node gone" in res.task("no node")["msg"]
    bad = res.task("not validated")
    assert bad["failed"] is True
    assert bad["msg"] == ("gpu-1 did not validate within kubegpu_validate_timeout=20 s: installed driver and loaded "
                          "kernel module differ (reboot_pending True)")
    assert "uncordon" not in bad["decision"]
    failure = res.task("failure")
    assert failure["failed"] is True and failure["decision"]["active"] is True
    assert failure["msg"].startswith('maintenance of gpu-1 failed in "Drain": drain timed out. The node stays cordoned')
    assert res.task("bad decision")["failed"] is True and "maybe" in res.task("bad decision")["msg"]


def test_check_mode_validation_is_a_report(ansible):
    out = ansible.module("rollout_decide", {"decision": "validation", "name": "gpu-1", "close": True,
                                            "maintenance": {"was_unschedulable": True, "active": True}},
                         check=True, env=ENV)
    assert out["_rc"] == 0
    assert out["msg"].startswith("check mode: would validate gpu-1")
    assert "gpu-1 stays cordoned: it was cordoned before the maintenance (host fact)" in out["msg"]
