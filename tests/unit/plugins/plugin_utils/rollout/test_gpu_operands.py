# -*- coding: utf-8 -*-
"""The decisions of kubegpu.fleet.gpu_operands (plugin_utils/rollout/gpu_operands.py): which
nvidia.com/gpu.deploy.* labels a pause changes and to what, what a restore sets back (from the
record on the Node, also after a killed run), which pods still hold a pause up, and the label
patch it sends through node_api (resourceVersion-guarded, RFC 6901 escaped)."""
import copy
import json

import pytest

from ansible_collections.kubegpu.fleet.plugins.module_utils._common.safe_io import UnsafeInput
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.rollout import gpu_operands as go
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.rollout import node_api

P = go.LABEL_PREFIX
PAUSED = go.PAUSED
ALL = list(go.DEFAULT_COMPONENTS)


def node(labels, annotations=None, rv="7"):
    meta = {"name": "gpu-0", "resourceVersion": rv, "labels": dict(labels)}
    if annotations is not None:
        meta["annotations"] = dict(annotations)
    return {"metadata": meta, "spec": {}}


def applied(obj, sets, annotations):
    """The Node as the API holds it after a patch of ``sets`` labels and ``annotations``."""
    out = copy.deepcopy(obj)
    out["metadata"]["labels"].update(sets)
    ann = out["metadata"].setdefault("annotations", {})
    for key, value in annotations.items():
        if value is None:
            ann.pop(key, None)
        else:
            ann[key] = value
    return out


def paused(obj, components=None):
    plan = go.pause_plan(obj, components or ALL)
    return applied(obj, plan["set"], {go.ANNOTATION: go.record_text(plan["record"])} if plan["set"] else {}), plan


def restored(obj):
    plan = go.restore_plan(obj)
    return applied(obj, plan["set"], {go.ANNOTATION: None}), plan


OPERATOR_NODE = {P + "device-plugin": "true", P + "gpu-feature-discovery": "true", P + "dcgm-exporter": "false",
                 P + "dcgm": "true", P + "mig-manager": "", P + "operator-validator": "true",
                 P + "container-toolkit": "true", P + "driver": "true", "nvidia.com/gpu.present": "true"}


# ------------------------------------------------------------------------------ pause

def test_pause_sets_true_to_the_marker_and_keeps_the_operators_false_and_empty():
    after, plan = paused(node(OPERATOR_NODE))
    labels = after["metadata"]["labels"]
    assert plan["set"] == {P + "device-plugin": PAUSED, P + "gpu-feature-discovery": PAUSED, P + "dcgm": PAUSED,
                           P + "operator-validator": PAUSED}
    assert labels[P + "dcgm-exporter"] == "false" and labels[P + "mig-manager"] == ""
    assert plan["kept"][P + "dcgm-exporter"].startswith("false: disabled")
    assert plan["kept"][P + "mig-manager"].startswith("empty: disabled")
    # not named by default: the toolkit and the driver are never touched
    assert labels[P + "container-toolkit"] == "true" and labels[P + "driver"] == "true"
    # labels the node does not carry are neither created nor reported
    assert P + "nvsm" not in labels and P + "nvsm" not in plan["kept"]
    # the record holds exactly the values that were changed
    assert plan["record"] == {P + "device-plugin": "true", P + "gpu-feature-discovery": "true", P + "dcgm": "true",
                              P + "operator-validator": "true"}
    assert json.loads(after["metadata"]["annotations"][go.ANNOTATION])["labels"] == plan["record"]


def test_pause_composes_with_another_pause_as_the_driver_manager_does():
    obj = node({P + "device-plugin": "paused-for-driver-upgrade", P + "dcgm": "custom.value"})
    plan = go.pause_plan(obj, ALL)
    assert plan["set"] == {P + "device-plugin": "paused-for-driver-upgrade_" + PAUSED,
                           P + "dcgm": "custom.value_" + PAUSED}
    assert plan["record"] == {P + "device-plugin": "paused-for-driver-upgrade", P + "dcgm": "custom.value"}


def test_a_second_pause_changes_nothing_and_keeps_the_first_record():
    first, _plan = paused(node(OPERATOR_NODE))
    plan = go.pause_plan(first, ALL)
    assert plan["set"] == {} and plan["paused"] == {}
    assert plan["record"][P + "device-plugin"] == "true"
    assert plan["kept"][P + "device-plugin"] == "already paused for a GPU reset (recorded: true)"


def test_a_label_carrying_our_marker_without_a_record_is_left_and_not_recorded_as_its_own_value():
    obj = node({P + "device-plugin": PAUSED, P + "dcgm": "x_" + PAUSED})
    plan = go.pause_plan(obj, ALL)
    assert plan["set"] == {} and plan["record"] == {}
    assert plan["kept"][P + "device-plugin"] == "already paused for a GPU reset"


@pytest.mark.parametrize("value, why", [
    (7, "not a string: '7'"),
    (["true"], "not a string"),
    ("a" * 60, "cannot carry the pause marker"),
    ("-bad-", "cannot carry the pause marker"),
])
def test_hostile_label_values_are_left_alone_and_named(value, why):
    obj = node({P + "device-plugin": value, P + "dcgm": "true"})
    plan = go.pause_plan(obj, ALL)
    assert plan["set"] == {P + "dcgm": PAUSED}
    assert why in plan["kept"][P + "device-plugin"] and P + "device-plugin" not in plan["record"]


def test_hostile_labels_maps_read_as_no_labels():
    for meta in ({"labels": ["x"]}, {"labels": None}, {}):
        obj = {"metadata": dict(meta, name="gpu-0", resourceVersion="1")}
        assert go.pause_plan(obj, ALL)["set"] == {} and go.operator_labels(obj) == {}


def test_components_are_checked_and_the_driver_is_refused():
    assert go.check_components(["device-plugin", "dcgm", "dcgm"]) == ["device-plugin", "dcgm"]
    for bad in (["driver"], ["../x"], ["Device-Plugin"], [""], ["a" * 41], [], [7]):
        with pytest.raises(UnsafeInput):
            go.check_components(bad)


# ------------------------------------------------------------------------------ restore

def test_pause_then_restore_gives_back_exactly_the_labels_of_before():
    before = node(OPERATOR_NODE)
    after_pause, _plan = paused(before)
    back, plan = restored(after_pause)
    assert back["metadata"]["labels"] == before["metadata"]["labels"]
    assert go.ANNOTATION not in back["metadata"]["annotations"]
    assert set(plan["restored"]) == {P + "device-plugin", P + "gpu-feature-discovery", P + "dcgm",
                                     P + "operator-validator"} and plan["left"] == {}
    # idempotent: nothing more to do
    again = go.restore_plan(back)
    assert again["set"] == {} and again["had_record"] is False


def test_restore_after_a_killed_run_reads_the_record_left_on_the_node():
    """The run died after the pause: only the Node remains (its labels and the record). A new
    run's restore needs nothing else, custom values included."""
    before = node(dict(OPERATOR_NODE, **{P + "nvsm": "paused-for-driver-upgrade"}))
    left_behind, _plan = paused(before)
    left_behind = json.loads(json.dumps(left_behind))       # as read back from the API
    back, plan = restored(left_behind)
    assert back["metadata"]["labels"] == before["metadata"]["labels"]
    assert plan["restored"][P + "nvsm"] == {
        "from": "paused-for-driver-upgrade_" + PAUSED, "to": "paused-for-driver-upgrade"}


def test_restore_never_undoes_a_change_made_since_the_pause():
    after_pause, _plan = paused(node(OPERATOR_NODE))
    labels = after_pause["metadata"]["labels"]
    labels[P + "device-plugin"] = "false"                      # the operator disabled it meanwhile
    labels[P + "dcgm"] = "paused-for-driver-upgrade"             # the driver manager paused it
    del labels[P + "gpu-feature-discovery"]                      # someone removed it
    back, plan = restored(after_pause)
    out = back["metadata"]["labels"]
    assert out[P + "device-plugin"] == "false" and out[P + "dcgm"] == "paused-for-driver-upgrade"
    assert P + "gpu-feature-discovery" not in out
    assert out[P + "operator-validator"] == "true"
    assert sorted(plan["left"]) == [P + "dcgm", P + "device-plugin", P + "gpu-feature-discovery"]
    assert "changed since the pause" in plan["left"][P + "device-plugin"]
    assert "not created again" in plan["left"][P + "gpu-feature-discovery"]


def test_restore_without_a_usable_record_unmarks_our_marker_only():
    obj = node({P + "device-plugin": PAUSED, P + "dcgm": "paused-for-driver-upgrade_" + PAUSED,
                P + "dcgm-exporter": "paused-for-driver-upgrade", P + "mig-manager": "false"},
               {go.ANNOTATION: "{not json"})
    back, plan = restored(obj)
    out = back["metadata"]["labels"]
    assert out[P + "device-plugin"] == "true" and out[P + "dcgm"] == "paused-for-driver-upgrade"
    assert out[P + "dcgm-exporter"] == "paused-for-driver-upgrade" and out[P + "mig-manager"] == "false"
    assert sorted(plan["unrecorded"]) == [P + "dcgm", P + "device-plugin"]
    assert plan["problems"] and "not valid JSON" in plan["problems"][0]
    assert go.ANNOTATION not in back["metadata"]["annotations"]


@pytest.mark.parametrize("record, problem", [
    ({"labels": {"kubernetes.io/hostname": "evil"}}, "is not a nvidia.com/gpu.deploy.* label"),
    ({"labels": {P + "device-plugin": "false"}}, "has no value a pause could have changed"),
    ({"labels": {P + "device-plugin": ""}}, "has no value a pause could have changed"),
    ({"labels": {P + "device-plugin": {"x": 1}}}, "has no value a pause could have changed"),
    ({"labels": {P + "device-plugin": "bad value!"}}, "has no value a pause could have changed"),
    ({"labels": ["x"]}, "holds no labels mapping"),
    ([1, 2], "holds no labels mapping"),
])
def test_hostile_record_entries_are_dropped_and_named_and_never_set(record, problem):
    obj = node({P + "device-plugin": "false", "kubernetes.io/hostname": "gpu-0"},
               {go.ANNOTATION: json.dumps(record)})
    plan = go.restore_plan(obj)
    assert plan["set"] == {} and any(problem in p for p in plan["problems"]), plan["problems"]


def test_an_oversized_or_deep_record_is_refused_by_the_parse_bound():
    big = json.dumps({"labels": {P + "x%d" % i: "true" for i in range(2000)}})
    deep = "[" * 500 + "]" * 500
    for text in (big, deep):
        record, problems = go.read_record(node({}, {go.ANNOTATION: text}))
        assert record == {} and len(problems) == 1


def test_restore_of_a_node_never_paused_changes_nothing():
    plan = go.restore_plan(node(OPERATOR_NODE))
    assert plan["set"] == {} and plan["restored"] == {} and plan["had_record"] is False


# ------------------------------------------------------------------------------ pods

def ds_pod(name, selector=None, owner="DaemonSet", terminating=False, affinity_keys=()):
    meta = {"name": name, "namespace": "gpu-operator"}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": name.rsplit("-", 1)[0], "controller": True}]
    if terminating:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    spec = {"nodeName": "gpu-0"}
    if selector is not None:
        spec["nodeSelector"] = selector
    if affinity_keys:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": k, "operator": "In", "values": ["true"]} for k in affinity_keys]}]}}}
    return {"metadata": meta, "spec": spec}


def test_only_daemonset_pods_selecting_by_a_paused_label_hold_the_pause_up():
    pods = [ds_pod("plugin-a", {P + "device-plugin": "true"}),
            ds_pod("dcgm-b", {P + "dcgm": "true"}, terminating=True),
            ds_pod("gfd-c", affinity_keys=[P + "gpu-feature-discovery"]),
            ds_pod("toolkit-d", {P + "container-toolkit": "true"}),     # not paused
            ds_pod("bare-e", {P + "device-plugin": "true"}, owner=None),  # nobody deletes it
            ds_pod("rs-f", {P + "device-plugin": "true"}, owner="ReplicaSet"),
            "not a pod", {"metadata": None, "spec": ["x"]}, {"metadata": {"ownerReferences": "x"}}]
    held = go.holding_pods(pods, [P + "device-plugin", P + "dcgm", P + "gpu-feature-discovery"])
    assert [(p["name"], p["labels"], p["terminating"]) for p in held] == [
        ("dcgm-b", [P + "dcgm"], True), ("gfd-c", [P + "gpu-feature-discovery"], False),
        ("plugin-a", [P + "device-plugin"], False)]
    assert "gpu-operator/dcgm-b (terminating)" in go.pods_text(held)
    assert go.holding_pods(pods, []) == []


# ------------------------------------------------------------------------------ the patch

def test_the_label_patch_is_guarded_escaped_and_computed_from_the_node_read():
    obj = node(OPERATOR_NODE)
    plan = go.pause_plan(obj, ["device-plugin", "dcgm-exporter"])
    ops, before, after = node_api.node_patch_ops(obj, annotations={go.ANNOTATION: go.record_text(plan["record"])},
                                                 labels=plan["set"])
    assert ops[0] == {"op": "test", "path": "/metadata/resourceVersion", "value": "7"}
    assert {"op": "add", "path": "/metadata/labels/nvidia.com~1gpu.deploy.device-plugin", "value": PAUSED} in ops
    assert {"op": "add", "path": "/metadata/annotations",
            "value": {go.ANNOTATION: go.record_text({P + "device-plugin": "true"})}} in ops
    assert before["labels"] == {P + "device-plugin": "true"} and after["labels"] == {P + "device-plugin": PAUSED}
    # without labels the patch is what it always was (no labels key)
    ops2, before2, _after2 = node_api.node_patch_ops(obj, unschedulable=True)
    assert "labels" not in before2 and [o["op"] for o in ops2] == ["test", "add"]


class FakeApi(object):
    """A Node store that answers as the API does: a patch applies only at the resourceVersion its
    test names (else 422), and bumps the version; ``racer`` changes the Node between the read and
    the first patch, as a concurrent writer would."""

    def __init__(self, obj, racer=None):
        self.obj = obj
        self.racer = racer
        self.patches = []

    def node(self, name):
        return copy.deepcopy(self.obj)

    def patch_node(self, name, ops):
        if self.racer:
            self.racer(self.obj)
            self.obj["metadata"]["resourceVersion"] = str(int(self.obj["metadata"]["resourceVersion"]) + 1)
            self.racer = None
        if ops[0]["value"] != self.obj["metadata"]["resourceVersion"]:
            raise node_api.NodeApiError("HTTP 422 the test failed", status=422)
        self.patches.append(ops)
        for op in ops[1:]:
            parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
            target = self.obj
            for part in parts[:-1]:
                target = target.setdefault(part, {})
            if op["op"] == "remove":
                del target[parts[-1]]
            else:
                target[parts[-1]] = copy.deepcopy(op["value"])
        self.obj["metadata"]["resourceVersion"] = str(int(self.obj["metadata"]["resourceVersion"]) + 1)
        return copy.deepcopy(self.obj)


def test_a_conflicting_writer_makes_the_pause_read_again_and_respect_its_false():
    def operator_disables_the_plugin(obj):
        obj["metadata"]["labels"][P + "device-plugin"] = "false"

    api = FakeApi(node(OPERATOR_NODE), racer=operator_disables_the_plugin)
    seen = {}

    def labels(obj):
        seen["plan"] = go.pause_plan(obj, ALL)
        return seen["plan"]["set"]

    out = node_api.patch_node(api, "gpu-0", labels=labels,
                              annotations=lambda obj: {go.ANNOTATION: go.record_text(go.pause_plan(obj, ALL)["record"])})
    assert out["attempts"] == 2 and len(api.patches) == 1
    stored = api.obj["metadata"]
    assert stored["labels"][P + "device-plugin"] == "false" and stored["labels"][P + "dcgm"] == PAUSED
    assert P + "device-plugin" not in json.loads(stored["annotations"][go.ANNOTATION])["labels"]
