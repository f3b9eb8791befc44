"""remediation_plan through ansible-playbook: audit_evaluate's real findings -> the plan fact."""

R570_GUARD = {"verdict": "known_bad", "branch": 570, "driver_version": "570.158.01", "reboot_pending": False,
              "recommended_version": "570.172.08", "matches": [{"id": "nvml-r570-mig-hang"}]}


def test_plan_from_evaluated_findings(ansible):
    plays = [{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "Evaluate", "kubegpu.fleet.audit_evaluate": {
            "node": "gpu-r570", "driver_guard": R570_GUARD,
            # the plan for the known-bad driver alone (catalog advisories of 570.158.01 aside)
            "skip": ["security.driver"],
            "nvidia": {"present": True, "probe": {"status": "hung", "backend": "nvml"},
                       "device_nodes": [{"name": "nvidia-uvm", "path": "/dev/nvidia-uvm", "exists": True}],
                       "kernel_modules": {"nvidia_uvm": {"loaded": True}}}}},
        {"name": "Plan", "kubegpu.fleet.remediation_plan": {"audit": "{{ kubegpu_audit }}"}},
        {"name": "Group", "ansible.builtin.group_by": {"key": "fix_{{ kubegpu_remediation.fix }}"}},
        {"name": "Show", "ansible.builtin.debug": {"msg": "{{ groups['fix_True'] | default([]) }}"}},
    ]}]
    res = ansible.playbook(plays)
    assert res.rc == 0, res.stdout
    plan = res.task("Plan")["plan"]
    assert plan["roles"] == {"driver": {"kubegpu_driver_version": "570.172.08"}}
    assert plan["drain"] and plan["wedged"] and plan["reboot"] and plan["fix"]
    assert res.task("Plan")["changed"] is False
    assert res.task("Show")["msg"] == ["localhost"]


def test_unknown_skip_id_fails_cleanly(ansible):
    out = ansible.module("remediation_plan", {"audit": {"status": "audited", "findings": []},
                                              "skip_findings": ["no.such"]})
    assert out["_rc"] != 0 and out["failed"]
    assert "unknown finding id(s) in skip_findings: no.such" in out["msg"]
    assert "Traceback" not in out["_stderr"]


def test_unaudited_node_gets_an_empty_plan_in_check_mode(ansible):
    out = ansible.module("remediation_plan", {"audit": {"status": "unreachable"}}, check=True)
    assert out["_rc"] == 0 and out["plan"]["fix"] is False and "not audited" in out["plan"]["reason"]
