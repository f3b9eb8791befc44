"""docs/maintenance-fact.schema.json is the contract of the kubegpu_maintenance host fact: every
record the rolling_reboot decisions build (plugins/plugin_utils/rollout/decisions.py, through the same
inputs the decision modules and kubegpu.fleet.node_maintenance give them) validates
against it, and records that break the contract do not."""
import json
import os

import pytest

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.rollout import decisions, node_api, record

jsonschema = pytest.importorskip("jsonschema")

SCHEMA_PATH = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "..", "docs", "maintenance-fact.schema.json")


@pytest.fixture(scope="module")
def validator():
    with open(SCHEMA_PATH) as f:
        schema = json.load(f)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def fact(record):
    """The fact as a play sees it: JSON-serialisable (ansible_facts go through JSON)."""
    return json.loads(json.dumps(record))


def node(name="gpu-1", gpus="2", cordoned=False, boot="boot-1", annotations=None, mig=None):
    alloc = {"cpu": "31", "nvidia.com/gpu": gpus}
    alloc.update(mig or {})
    return {"metadata": {"name": name, "labels": {"nvidia.com/gpu.present": "true"},
                         "annotations": dict(annotations or {})},
            "spec": {"unschedulable": True} if cordoned else {},
            "status": {"allocatable": alloc, "nodeInfo": {"bootID": boot},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def pod(name, ns="gpu-jobs", owner="ReplicaSet", phase="Running", deleting=False, image="cuda:12"):
    meta = {"name": name, "namespace": ns, "ownerReferences": [{"kind": owner, "name": name + "-owner"}]}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"containers": [{"name": "c", "image": image}]},
            "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True"}]}}


PLUGIN = pod("nvidia-device-plugin-x", ns="kube-system", owner="DaemonSet",
             image="nvcr.io/nvidia/k8s-device-plugin:v0.17.2")
CHECKS_OK = {"nvidia": {"probe": {"status": "ok"}, "driver_version": "570.172.08"}, "reboot_pending": False,
             "checkpoint_stale": False, "checkpoint_stale_ids": []}


def test_a_whole_maintenance_validates_at_every_step(validator):
    start = decisions.start_maintenance(node(), "gpu-1", {}, now=1700000000)
    assert start["cordon"] is True
    validator.validate(fact(start["record"]))

    drained = decisions.drain_verdict("gpu-1", [PLUGIN, pod("job-a", deleting=True)], accept_terminating=True,
                                      maintenance=start["record"], timeout=600)
    assert drained["ok"] is True and drained["record"]["terminating_accepted"] == ["gpu-jobs/job-a"]
    validator.validate(fact(drained["record"]))

    api = node_api.validated_check(node(boot="boot-2"), [PLUGIN], [], drained["record"]["allocatable"])
    valid = decisions.validation_verdict("gpu-1", CHECKS_OK, api, "570.172.08", 600, drained["record"],
                                         {"boot_id": "boot-2", "reasons": ["sentinel /run/reboot-required"]})
    assert valid["ok"] is True and valid["record"]["validation"]["resources"]["rule"] == "unchanged"
    validator.validate(fact(valid["record"]))

    closed = decisions.uncordon_decision("gpu-1", valid["record"], node(boot="boot-2"), now=1700000600)
    assert closed["uncordon"] is True
    validator.validate(fact(closed["record"]))


def test_failures_resumes_and_mig_validation_validate(validator):
    # resumed from the annotation an earlier run left on a node an operator had cordoned
    saved = record.maintenance_annotation({"was_unschedulable": True, "boot_id": "boot-0",
                                           "allocatable": {"nvidia.com/gpu": 2}, "started": 1600000000,
                                           "by": decisions.ROLE})
    resumed = decisions.start_maintenance(node(cordoned=True, annotations={"kubegpu.io/maintenance": saved}), "gpu-1",
                                          {}, now=1700000000)
    assert resumed["record"]["resumed"] is True and resumed["record"]["started"] == 1600000000
    validator.validate(fact(resumed["record"]))

    # a drain that did not finish, then the failure the abort entry point records
    stuck = decisions.drain_verdict("gpu-1", [pod("job-b")], maintenance=resumed["record"], timeout=5)
    assert stuck["ok"] is False
    failed = decisions.failure_record("gpu-1", stuck["record"], "drain timed out", "Drain", now=1700000100,
                                      cordon={"changed": True}, run="ctl/4711-99")
    assert failed["active"] is True and failed["failure"]["run"] == "ctl/4711-99"
    validator.validate(fact(failed["record"]))

    # a failure before anything was recorded (the abort of a node that never started)
    validator.validate(fact(decisions.failure_record("gpu-2", None, "", None, now=1700000100)["record"]))

    # the R570 node: after the reboot it advertises MIG devices (rule mig_strategy), NVML hung before
    mig_after = node(gpus="0", mig={"nvidia.com/mig-1g.10gb": "7"}, boot="boot-2")
    nvidia = {"probe": {"status": "ok"}, "driver_version": "570.172.08",
              "gpus": [{"uuid": "GPU-1", "mig_mode": {"current": "enabled"},
                        "mig_devices": [{"uuid": "MIG-%d" % i, "profile": "1g.10gb"} for i in range(7)]}]}
    plugin_mixed = pod("nvidia-device-plugin-y", ns="kube-system", owner="DaemonSet",
                       image="nvcr.io/nvidia/k8s-device-plugin:v0.17.2")
    plugin_mixed["spec"]["containers"][0]["env"] = [{"name": "MIG_STRATEGY", "value": "mixed"}]
    api = node_api.validated_check(mig_after, [plugin_mixed], [], {"nvidia.com/gpu": 1}, nvidia)
    verdict = decisions.validation_verdict("gpu-1", dict(CHECKS_OK, nvidia=nvidia), api, "", 600, {"active": True})
    assert verdict["ok"] is True and verdict["record"]["validation"]["resources"]["rule"] == "mig_strategy"
    validator.validate(fact(verdict["record"]))
    hung = decisions.validation_verdict("gpu-1", {"nvidia": {"probe": {"status": "hung", "error": "timeout"}}}, {},
                                        "570.172.08", 600, {"active": True})
    assert hung["ok"] is False
    validator.validate(fact(hung["record"]))


@pytest.mark.parametrize("change, where", [
    (lambda r: r.pop("active"), "'active' is a required property"),
    (lambda r: r.update(drained="yes"), "'yes' is not of type 'boolean'"),
    (lambda r: r.update(started=-1), "-1 is less than the minimum of 0"),
    (lambda r: r.update(allocatable={"cpu": 4}), "'cpu' does not match"),
    (lambda r: r.update(terminating_accepted=["job-a"]), "'job-a' does not match"),
    (lambda r: r.update(cordoned_by="someone"), "Additional properties are not allowed"),
    (lambda r: r.update(failed={"reason": "x", "task": "", "time": "yesterday", "by": decisions.ROLE}),
     "'yesterday' does not match"),
])
def test_records_that_break_the_contract_do_not_validate(validator, change, where):
    record = fact(decisions.start_maintenance(node(), "gpu-1", {}, now=1700000000)["record"])
    change(record)
    errors = [e.message for e in validator.iter_errors(record)]
    assert errors and any(where in e for e in errors), errors
