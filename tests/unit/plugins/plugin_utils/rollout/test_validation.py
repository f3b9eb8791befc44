"""Resource validation under MIG strategies and the device plugin pod."""
import pytest

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.rollout import gpu_nodes, validation
from ansible_collections.kubegpu.fleet.tests.unit.plugins.plugin_utils.rollout.cluster_objects import pod


# --------------------------------------------------------------------------- validate

def gpu(mig=None):
    if mig is None:
        return {"mig_mode": {"current": "disabled"}, "mig_devices": []}
    return {"mig_mode": {"current": "enabled"}, "mig_devices": [{"profile": p} for p in mig]}


R570 = {"gpus": [gpu(["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]), gpu()]}


def test_expected_resources_under_each_mig_strategy():
    assert validation.expected_resources({"gpus": [gpu(), gpu()]}, "none") == {"nvidia.com/gpu": 2}
    assert validation.expected_resources(R570, "none") == {"nvidia.com/gpu": 2}
    assert validation.expected_resources(R570, "mixed") == {"nvidia.com/gpu": 1, "nvidia.com/mig-3g.40gb": 1,
                                                            "nvidia.com/mig-2g.20gb": 1, "nvidia.com/mig-1g.10gb": 2}
    assert validation.expected_resources(R570, "single") is None   # the plugin refuses a mixed layout
    all_mig = {"gpus": [gpu(["1g.10gb"] * 7), gpu(["3g.40gb", "3g.40gb"])]}
    assert validation.expected_resources(all_mig, "single") == {"nvidia.com/gpu": 9}
    assert validation.expected_resources({"gpus": []}, "mixed") == {}
    with pytest.raises(gpu_nodes.RolloutError):
        validation.expected_resources(R570, "weird")


def test_resources_check_rules():
    pre = {"nvidia.com/gpu": 2}
    assert validation.resources_check(pre, {"nvidia.com/gpu": "2"})["rule"] == "unchanged"
    lost = validation.resources_check(pre, {"nvidia.com/gpu": "1"}, {"nvidia.com/gpu": 2})
    assert not lost["ok"] and lost["missing"] == {"nvidia.com/gpu": 1}
    # the R570 node: whole GPUs before, MIG devices after the fixed driver booted
    post = validation.expected_resources(R570, "mixed")
    mig = validation.resources_check(pre, post, post)
    assert mig["ok"] and mig["rule"] == "mig_strategy"
    assert not validation.resources_check(pre, post, None)["ok"]
    # zero entries do not matter; an empty node that should have GPUs does
    assert validation.resources_check({"nvidia.com/gpu": 2, "nvidia.com/mig-1g.10gb": "0"}, {"nvidia.com/gpu": 2})["ok"]
    assert not validation.resources_check({}, {}, {"nvidia.com/gpu": 2})["ok"]
    assert validation.resources_check({}, {}, None)["rule"] == "unchanged"
    assert validation.resources_check({"cpu": "3", "nvidia.com/gpu": "2"}, {"nvidia.com/gpu": 2})["ok"]


def test_plugin_pod_strategy_from_pod_or_daemonset():
    ds = {"metadata": {"name": "plugin"}, "spec": {"template": {"spec": {"containers": [
        {"name": "c", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.2",
         "env": [{"name": "MIG_STRATEGY", "value": "mixed"}]}]}}}}
    p = {"metadata": {"name": "plugin-x", "namespace": "kube-system",
                      "ownerReferences": [{"kind": "DaemonSet", "name": "plugin"}]},
         "spec": {"containers": [{"name": "c", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.2"}]},
         "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    got = validation.plugin_pod([pod("train"), p], [ds])
    assert got == {"found": True, "pod": "kube-system/plugin-x", "phase": "Running", "ready": True,
                   "running": True, "mig_strategy": "mixed"}
    assert validation.plugin_pod([p])["mig_strategy"] == "none"
    p["spec"]["containers"][0]["env"] = [{"name": "MIG_STRATEGY", "value": "single"}]
    assert validation.plugin_pod([p], [ds])["mig_strategy"] == "single"
    p["metadata"]["deletionTimestamp"] = "2026-11-22T05:00:00Z"
    assert not validation.plugin_pod([p])["ready"]
    assert not validation.plugin_pod([pod("train")])["found"]
