"""kubegpu.fleet.audit_evaluate is deprecated through meta/runtime.yml's plugin_routing: a playbook
that uses it still works and is told, by ansible-core's own deprecation warning, to use
kubegpu.fleet.audit_node and when the module goes."""

ENV = {"ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.json", "ANSIBLE_DEPRECATION_WARNINGS": "1"}


def test_audit_evaluate_still_works_and_names_its_replacement(ansible):
    res = ansible.playbook([{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "evaluate", "kubegpu.fleet.audit_evaluate": {"node": "gpu-1", "unreachable": "ssh: timed out"}}]}],
        env=ENV)
    assert res.rc == 0, res.stdout[-3000:]
    audit = res.task("evaluate")["ansible_facts"]["kubegpu_audit"]
    assert audit["node"] == "gpu-1" and audit["status"] == "unreachable"
    warned = " ".join((res.stdout + res.stderr).split())
    assert "audit_evaluate" in warned and "1.0.0" in warned and "kubegpu.fleet.audit_node" in warned
