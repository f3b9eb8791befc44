"""The kubegpu_maintenance fact as kubegpu.fleet.rollout_decide sets it in a real play (the
decisions rolling_reboot's cordon, finish and abort entry points run) validates against
docs/maintenance-fact.schema.json at every step."""
import json
import os

import pytest

jsonschema = pytest.importorskip("jsonschema")

ENV = {"ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.json"}
SCHEMA_PATH = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "maintenance-fact.schema.json")

NODE = {"metadata": {"name": "gpu-1", "labels": {"nvidia.com/gpu.present": "true"}, "annotations": {}},
        "spec": {}, "status": {"allocatable": {"nvidia.com/gpu": "2"}, "nodeInfo": {"bootID": "boot-1"},
                               "conditions": [{"type": "Ready", "status": "True"}]}}
CHECKS = {"nvidia": {"probe": {"status": "ok"}, "driver_version": "570.172.08"}, "reboot_pending": False,
          "checkpoint_stale": False, "checkpoint_stale_ids": []}
API = {"plugin": {"found": True, "pod": "kube-system/p", "phase": "Running", "ready": True, "running": True,
                  "mig_strategy": "none"},
       "resources": {"ok": True, "rule": "unchanged", "pre": {"nvidia.com/gpu": 2}, "post": {"nvidia.com/gpu": 2},
                     "expected": None, "missing": {}, "msg": "allocatable as before"}}


def snapshot(name):
    return {"name": "fact after " + name, "ansible.builtin.debug": {"msg": "{{ kubegpu_maintenance | to_json }}"}}


def test_the_fact_of_every_decision_matches_the_schema(ansible):
    with open(SCHEMA_PATH) as f:
        validator = jsonschema.Draft202012Validator(json.load(f))
    steps = [
        ("start", {"decision": "start", "name": "gpu-1", "node": NODE, "timeout": 60}),
        ("drain", {"decision": "drain", "name": "gpu-1", "pods": [], "maintenance": "{{ kubegpu_maintenance }}"}),
        ("validation", {"decision": "validation", "name": "gpu-1", "checks": CHECKS, "api": API, "close": True,
                        "maintenance": "{{ kubegpu_maintenance }}", "reboot": {"boot_id": "boot-2"},
                        "reboot_reasons": ["sentinel /run/reboot-required"], "driver_version": "570.172.08"}),
        ("failure", {"decision": "failure", "name": "gpu-1", "maintenance": "{{ kubegpu_maintenance }}",
                     "reason": "validation failed", "task": "Validate", "fail": False}),
    ]
    tasks = []
    for name, args in steps:
        tasks += [{"name": name, "kubegpu.fleet.rollout_decide": args}, snapshot(name)]
    res = ansible.playbook([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}], env=ENV)
    assert res.rc == 0, res.stdout[-3000:]
    seen = {}
    for name, _args in steps:
        record = json.loads(res.task("fact after " + name)["msg"])
        errors = [e.message for e in validator.iter_errors(record)]
        assert not errors, (name, errors, record)
        seen[name] = record
    assert seen["start"]["active"] is True and seen["drain"]["drained"] is True
    assert seen["validation"]["uncordoned"] is True and seen["validation"]["rebooted"] is True
    assert seen["failure"]["failed"]["task"] == "Validate"
