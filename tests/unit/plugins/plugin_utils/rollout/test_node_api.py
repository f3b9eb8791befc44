"""node_api: the JSON patch node_maintenance sends, its waits and their conditions (pure functions)."""
import pytest

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.rollout import node_api

ANN = "kubegpu.io/maintenance"
FAILED = "kubegpu.io/maintenance-failed"


def node(unschedulable=None, annotations=None, ready="True", boot_id="boot-1", rv="7", gpus=None):
    obj = {"metadata": {"name": "n1", "resourceVersion": rv},
           "spec": {}, "status": {"conditions": [{"type": "Ready", "status": ready}],
                                  "nodeInfo": {"bootID": boot_id},
                                  "allocatable": dict(gpus or {}), "capacity": dict(gpus or {})}}
    if unschedulable is not None:
        obj["spec"]["unschedulable"] = unschedulable
    if annotations is not None:
        obj["metadata"]["annotations"] = annotations
    return obj


def apply(doc, ops):
    """A minimal RFC 6902 applier for the ops node_patch_ops emits (test, add, remove)."""
    import copy
    doc = copy.deepcopy(doc)
    for op in ops:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        parent = doc
        for p in parts[:-1]:
            parent = parent[p]
        if op["op"] == "test":
            assert parent[parts[-1]] == op["value"]
        elif op["op"] == "add":
            parent[parts[-1]] = op["value"]
        elif op["op"] == "remove":
            del parent[parts[-1]]
    return doc


def test_json_pointer_escapes_slash_and_tilde():
    assert node_api.json_pointer("metadata", "annotations", "kubegpu.io/a~b") == "/metadata/annotations/kubegpu.io~1a~0b"


def test_cordon_and_record_in_one_guarded_patch_without_annotations_map():
    before = node()
    ops, was, will = node_api.node_patch_ops(before, True, {ANN: '{"was_unschedulable":false}'})
    assert ops[0] == {"op": "test", "path": "/metadata/resourceVersion", "value": "7"}
    assert {"op": "add", "path": "/spec/unschedulable", "value": True} in ops
    assert {"op": "add", "path": "/metadata/annotations", "value": {ANN: '{"was_unschedulable":false}'}} in ops
    after = apply(before, ops)
    assert after["spec"]["unschedulable"] is True and after["metadata"]["annotations"] == {ANN: '{"was_unschedulable":false}'}
    assert was == {"unschedulable": False, "annotations": {}}
    assert will == {"unschedulable": True, "annotations": {ANN: '{"was_unschedulable":false}'}}


def test_existing_annotations_are_kept_and_one_is_added_by_pointer():
    before = node(annotations={"other": "x"})
    ops, _b, _a = node_api.node_patch_ops(before, None, {ANN: "r"})
    assert ops[1:] == [{"op": "add", "path": "/metadata/annotations/kubegpu.io~1maintenance", "value": "r"}]
    assert apply(before, ops)["metadata"]["annotations"] == {"other": "x", ANN: "r"}


def test_uncordon_removes_only_present_annotations():
    before = node(unschedulable=True, annotations={ANN: "r", "other": "x"})
    ops, was, will = node_api.node_patch_ops(before, False, {ANN: None, FAILED: None})
    after = apply(before, ops)
    assert after["spec"]["unschedulable"] is False and after["metadata"]["annotations"] == {"other": "x"}
    assert [op["op"] for op in ops] == ["test", "add", "remove"]
    assert was == {"unschedulable": True, "annotations": {ANN: "r"}} and will == {"unschedulable": False, "annotations": {}}


def test_nothing_to_change_gives_no_ops():
    assert node_api.node_patch_ops(node(unschedulable=True, annotations={ANN: "r"}), True, {ANN: "r", FAILED: None})[0] == []
    assert node_api.node_patch_ops(node(), None, {})[0] == []
    # unschedulable absent counts as false: an uncordon of a schedulable node is a no-op
    assert node_api.node_patch_ops(node(), False, {})[0] == []


class FakeClock(object):
    def __init__(self):
        self.now = 100.0
        self.sleeps = []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


def test_wait_until_polls_until_done_and_counts():
    clock = FakeClock()
    values = iter([1, 2, 3, 4])
    out = node_api.wait_until(lambda: next(values), lambda v: v >= 3, timeout=10, poll=0.5, clock=clock, sleep=clock.sleep)
    assert (out["ok"], out["value"], out["polls"], out["waited"]) == (True, 3, 3, 1.0)
    assert clock.sleeps == [0.5, 0.5]


def test_wait_until_never_sleeps_past_the_deadline_and_keeps_the_last_error():
    clock = FakeClock()

    def fetch():
        raise node_api.NodeApiError("read Node n1: HTTP 503 down", status=503)

    out = node_api.wait_until(fetch, lambda v: True, timeout=2.5, poll=1, clock=clock, sleep=clock.sleep)
    assert not out["ok"] and out["polls"] == 4 and clock.sleeps == [1, 1, 0.5]
    assert out["last_error"] == "read Node n1: HTTP 503 down"


def test_wait_until_with_zero_timeout_checks_once():
    clock = FakeClock()
    out = node_api.wait_until(lambda: 0, lambda v: False, timeout=0, poll=1, clock=clock, sleep=clock.sleep)
    assert (out["ok"], out["polls"], clock.sleeps) == (False, 1, [])


@pytest.mark.parametrize("obj,old,ok,msg", [
    (node(), "boot-0", True, "Ready"),
    (node(unschedulable=True), "boot-0", True, "Ready"),              # cordoned is fine
    (node(), "boot-1", False, "bootID still boot-1"),                 # same boot: the reboot is not seen yet
    (node(ready="False", boot_id="boot-2"), "boot-1", False, "NotReady"),
    (node(ready="Unknown", unschedulable=True), "boot-0", False, "Ready=Unknown"),
    (node(boot_id=""), "boot-1", False, "bootID still empty"),
    (node(), "", True, "Ready"),                                      # no old boot ID: Ready is enough
    (None, "boot-1", False, "the Node does not exist"),
])
def test_ready_check(obj, old, ok, msg):
    out = node_api.ready_check(obj, old)
    assert (out["ok"], out["msg"]) == (ok, msg)


def plugin_pod(ready=True, strategy="none"):
    return {"metadata": {"name": "nvdp-x", "namespace": "kube-system",
                         "ownerReferences": [{"kind": "DaemonSet", "name": "nvdp"}]},
            "spec": {"nodeName": "n1",
                     "containers": [{"name": "p", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.1",
                                     "env": [{"name": "MIG_STRATEGY", "value": strategy}]}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def test_validated_needs_the_plugin_ready_and_the_resources_back():
    before = {"nvidia.com/gpu": 2}
    back = node(gpus={"nvidia.com/gpu": "2"})
    out = node_api.validated_check(back, [plugin_pod()], [], before)
    assert out["ok"] and out["plugin"]["ready"] and out["resources"]["ok"]
    out = node_api.validated_check(back, [plugin_pod(ready=False)], [], before)
    assert not out["ok"] and "not Ready" in out["msg"]
    out = node_api.validated_check(node(gpus={"nvidia.com/gpu": "1"}), [plugin_pod()], [], before)
    assert not out["ok"] and out["resources"]["ok"] is False
    out = node_api.validated_check(back, [], [], before)
    assert not out["ok"] and "(none)" in out["msg"]


class FakeApi(object):
    """Stands in for NodeApi (no HTTP): serves one node and fails the first N patches with a conflict."""

    def __init__(self, obj, conflicts=0):
        self.obj = obj
        self.conflicts = conflicts
        self.patches = []

    def node(self, name):
        return self.obj

    def patch_node(self, name, ops):
        self.patches.append(ops)
        if self.conflicts:
            self.conflicts -= 1
            self.obj = apply(self.obj, [{"op": "add", "path": "/metadata/resourceVersion", "value": "8"}])
            raise node_api.NodeApiError("patch Node n1: HTTP 422 test failed", status=422)
        self.obj = apply(self.obj, ops)
        return self.obj


def test_patch_node_rereads_after_a_conflict():
    api = FakeApi(node(), conflicts=1)
    out = node_api.patch_node(api, "n1", True, {ANN: "r"})
    assert out["changed"] and out["attempts"] == 2
    assert api.patches[1][0]["value"] == "8"        # recomputed from the fresh read
    assert api.obj["spec"]["unschedulable"] is True


def test_patch_node_check_mode_writes_nothing_and_other_errors_raise():
    api = FakeApi(node())
    out = node_api.patch_node(api, "n1", True, {}, check_mode=True)
    assert out["changed"] and api.patches == []
    api = FakeApi(node(), conflicts=10)
    with pytest.raises(node_api.NodeApiError):
        node_api.patch_node(api, "n1", True, {}, retries=2)
    assert len(api.patches) == 3
