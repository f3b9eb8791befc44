"""The decision modules of rolling_reboot (rollout_start, rollout_drain_verdict,
rollout_validation_verdict, rollout_uncordon_decision, rollout_failure_record) through real
ansible-playbook: each takes only its own options, sets the facts the role reads next, and the
deprecated rollout_decide says which module replaces it."""
import json

ENV = {"ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.json"}

NODE = {"metadata": {"name": "gpu-1", "labels": {"nvidia.com/gpu.present": "true"}, "annotations": {}},
        "spec": {}, "status": {"allocatable": {"nvidia.com/gpu": "2"}, "nodeInfo": {"bootID": "boot-1"},
                               "conditions": [{"type": "Ready", "status": "True"}]}}
CHECKS = {"nvidia": {"probe": {"status": "ok"}, "driver_version": "570.172.08"}, "reboot_pending": False,
          "checkpoint_stale": False, "checkpoint_stale_ids": []}
API = {"plugin": {"found": True, "pod": "kube-system/p", "phase": "Running", "ready": True},
       "resources": {"ok": True, "rule": "unchanged", "msg": "allocatable as before"}}
NEW = ("rollout_start", "rollout_drain_verdict", "rollout_validation_verdict", "rollout_uncordon_decision",
       "rollout_failure_record")


def play(tasks):
    return [{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]


def test_a_maintenance_through_the_decision_modules(ansible):
    tasks = [
        {"name": "start", "kubegpu.fleet.rollout_start": {"name": "gpu-1", "node": NODE, "drain_timeout": 60}},
        {"name": "drain", "kubegpu.fleet.rollout_drain_verdict": {
            "name": "gpu-1", "pods": [], "maintenance": "{{ kubegpu_maintenance }}", "drain_timeout": 60}},
        {"name": "validation", "kubegpu.fleet.rollout_validation_verdict": {
            "name": "gpu-1", "checks": CHECKS, "api": API, "maintenance": "{{ kubegpu_maintenance }}",
            "reboot": {"boot_id": "boot-2"}, "reboot_reasons": ["sentinel /run/reboot-required"],
            "driver_version": "570.172.08", "validate_timeout": 60}},
        {"name": "uncordon", "kubegpu.fleet.rollout_uncordon_decision": {
            "name": "gpu-1", "maintenance": "{{ kubegpu_maintenance }}", "node": NODE}},
        {"name": "facts", "ansible.builtin.debug": {
            "msg": "{{ {'m': kubegpu_maintenance, 'u': kubegpu_rolling_reboot_uncordon,"
                   " 'd': kubegpu_rolling_reboot_drained, 'w': kubegpu_rolling_reboot_wants_down} | to_json }}"}},
        {"name": "failure", "kubegpu.fleet.rollout_failure_record": {
            "name": "gpu-1", "maintenance": {"active": True, "drained": True}, "reason": "drain timed out",
            "task": "Drain", "fail": False}},
    ]
    res = ansible.playbook(play(tasks), env=ENV)
    assert res.rc == 0, res.stdout[-3000:]
    start = res.task("start")
    assert start["decision"]["cordon"] is True and start["decision"]["drain_deadline"] > 60
    assert json.loads(start["decision"]["annotations"]["kubegpu.io/maintenance"])["boot_id"] == "boot-1"
    assert res.task("drain")["msg"] == "gpu-1 drained"
    assert res.task("validation")["msg"].startswith("gpu-1 validated: NVML ok, driver 570.172.08")
    assert "uncordon" not in res.task("validation")["decision"]
    assert res.task("uncordon")["decision"]["uncordon"] is True
    facts = json.loads(res.task("facts")["msg"])
    assert facts["d"] is True and facts["w"] is False and facts["u"]["source"] == "host fact"
    assert facts["m"]["active"] is False and facts["m"]["rebooted"] is True and facts["m"]["new_boot_id"] == "boot-2"
    failure = res.task("failure")
    assert not failure.get("failed") and failure["decision"]["active"] is True
    assert failure["msg"].startswith('maintenance of gpu-1 failed in "Drain": drain timed out. The node stays cordoned')


def test_negative_verdicts_fail_and_name_their_timeout(ansible):
    tasks = [
        {"name": "no node", "kubegpu.fleet.rollout_start": {"name": "gone", "node": {}}, "ignore_errors": True},
        {"name": "not drained", "kubegpu.fleet.rollout_drain_verdict": {
            "name": "gpu-1", "pods_error": "API down", "drain_timeout": 30}, "ignore_errors": True},
        {"name": "not validated", "kubegpu.fleet.rollout_validation_verdict": {
            "name": "gpu-1", "checks": dict(CHECKS, reboot_pending=True), "api": API, "validate_timeout": 20,
            "close": True}, "ignore_errors": True},
        {"name": "failure", "kubegpu.fleet.rollout_failure_record": {"name": "gpu-1", "reason": "x"},
         "ignore_errors": True},
        {"name": "endless", "kubegpu.fleet.rollout_drain_verdict": {"name": "gpu-1", "drain_timeout": "inf"},
         "ignore_errors": True},
    ]
    res = ansible.playbook(play(tasks), env=ENV)
    assert res.task("no node")["failed"] is True and "no Node gone" in res.task("no node")["msg"]
    assert res.task("not drained")["msg"] == ("drain of gpu-1 did not finish within kubegpu_drain_timeout=30 s: API down. "
                                              "The node stays cordoned and the rollout stops.")
    bad = res.task("not validated")
    assert bad["failed"] is True and "uncordon" not in bad["decision"]
    assert bad["msg"] == ("gpu-1 did not validate within kubegpu_validate_timeout=20 s: installed driver and loaded "
                          "kernel module differ (reboot_pending True)")
    assert res.task("failure")["failed"] is True and res.task("failure")["decision"]["active"] is False
    assert res.task("endless")["failed"] is True and "drain_timeout" in res.task("endless")["msg"]


def test_each_module_takes_only_the_options_of_its_decision(ansible):
    foreign = {"rollout_start": {"pods": []}, "rollout_drain_verdict": {"checks": {}},
               "rollout_validation_verdict": {"skip_label": "a=b"}, "rollout_uncordon_decision": {"reason": "x"},
               "rollout_failure_record": {"timeout": 5}}
    tasks = [{"name": name, "kubegpu.fleet." + name: dict(foreign[name], name="gpu-1"), "ignore_errors": True}
             for name in NEW]
    res = ansible.playbook(play(tasks), env=ENV)
    for name in NEW:
        out = res.task(name)
        assert out["failed"] is True, name
        assert "Unsupported parameters" in out["msg"] and sorted(foreign[name])[0] in out["msg"], (name, out["msg"])


def test_rollout_decide_still_works_and_names_its_replacements(ansible):
    res = ansible.playbook(play([{"name": "uncordon", "kubegpu.fleet.rollout_decide": {
        "decision": "uncordon", "name": "gpu-1", "maintenance": {"was_unschedulable": False}}}]),
        env=dict(ENV, ANSIBLE_DEPRECATION_WARNINGS="1"))
    assert res.rc == 0, res.stdout[-3000:]
    assert res.task("uncordon")["decision"]["uncordon"] is True
    warned = " ".join((res.stdout + res.stderr).split())
    assert "rollout_decide" in warned and "1.0.0" in warned
    for name in NEW:
        assert "kubegpu.fleet." + name in warned, name
