# -*- coding: utf-8 -*-
"""Cluster-side NVIDIA stack facts (device plugin, MIG manager, GPU Operator) from API objects."""
import datetime
import os

import pytest

from ansible_collections.kubegpu.fleet.plugins.module_utils.catalog import evaluate as catalog_evaluate
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.catalog import load as catalog_load
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit import cluster_view as cl

NOW = datetime.datetime(2026, 11, 22, 6, 0, tzinfo=datetime.timezone.utc)
CATALOG = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "..", "catalog", "v2")


def node(name):
    return {"metadata": {"name": name, "uid": "n-" + name},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}


def pod(name, node_name, image, ns="gpu-operator", env=None, args=None, phase="Running", owner=None,
        deleting=False):
    c = {"name": "c", "image": image}
    if env is not None:
        c["env"] = [{"name": k, "value": v} for k, v in env.items()]
    if args is not None:
        c["args"] = args
    p = {"metadata": {"name": name, "namespace": ns, "uid": "u-" + name},
         "spec": {"nodeName": node_name, "containers": [c]}, "status": {"phase": phase}}
    if owner:
        p["metadata"]["ownerReferences"] = [{"kind": "DaemonSet", "name": owner, "controller": True}]
    if deleting:
        p["metadata"]["deletionTimestamp"] = "2026-11-22T05:59:00Z"
    return p


def deployment(name, ns, image):
    return {"metadata": {"name": name, "namespace": ns},
            "spec": {"template": {"spec": {"containers": [{"name": "gpu-operator", "image": image}]}}}}


def cluster_policy(name="cluster-policy", cdi=True, strategy="single", state="ready", driver=True):
    return {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": name},
            "spec": {"cdi": {"enabled": cdi, "default": False}, "mig": {"strategy": strategy},
                     "driver": {"enabled": driver}, "devicePlugin": {"version": "v0.17.2"},
                     "migManager": {"version": "v0.12.1"}, "toolkit": {"version": "v1.17.7-ubuntu20.04"}},
            "status": {"state": state}}


OPERATOR = deployment("gpu-operator", "gpu-operator", "nvcr.io/nvidia/gpu-operator:v25.3.1")


@pytest.mark.parametrize("image, scheme, version", [
    ("nvcr.io/nvidia/k8s-device-plugin:v0.17.2", "device-plugin", "0.17.2"),
    ("nvcr.io/nvidia/k8s-device-plugin:v0.17.0-ubi9", "device-plugin", "0.17.0"),
    ("nvcr.io/nvidia/k8s-device-plugin:v0.17.0-rc.1", "device-plugin", "0.17.0-rc.1"),
    ("registry.local:5000/nvidia/k8s-device-plugin", "device-plugin", None),
    ("registry.local:5000/nvidia/k8s-device-plugin@sha256:" + "a" * 64, "device-plugin", None),
    ("nvcr.io/nvidia/k8s-device-plugin:v0.16.2@sha256:" + "b" * 64, "device-plugin", "0.16.2"),
    ("nvcr.io/nvidia/k8s-device-plugin:latest", "device-plugin", None),
    ("nvcr.io/nvidia/cloud-native/k8s-mig-manager:v0.12.1-ubuntu20.04", "semver", "0.12.1"),
    ("nvcr.io/nvidia/gpu-operator:v25.3.1", "semver", "25.3.1"),
    ("", "semver", None),
    (None, "semver", None),
])
def test_image_version(image, scheme, version):
    assert cl.image_version(image, scheme) == version


def test_device_plugin_mig_manager_and_operator_facts_per_node():
    pods = [
        pod("nvdp-a", "gpu-a", "nvcr.io/nvidia/k8s-device-plugin:v0.17.2",
            env={"MIG_STRATEGY": "mixed", "DEVICE_LIST_STRATEGY": "cdi-annotations,envvar"}, owner="nvdp"),
        # the flag wins over the environment variable, as in the plugin
        pod("nvdp-b", "gpu-b", "nvcr.io/nvidia/k8s-device-plugin:v0.16.1",
            env={"MIG_STRATEGY": "mixed"}, args=["--mig-strategy", "single", "--device-list-strategy=volume-mounts"],
            owner="nvdp"),
        pod("mig-a", "gpu-a", "nvcr.io/nvidia/cloud-native/k8s-mig-manager:v0.12.1-ubuntu20.04", owner="mig"),
        # operator's validator image is not the operator
        pod("validator-c", "gpu-c", "nvcr.io/nvidia/cloud-native/gpu-operator-validator:v25.3.1", ns="other"),
        pod("web", "gpu-c", "nginx:1.27", ns="default"),
    ]
    view = cl.cluster_view([node("gpu-a"), node("gpu-b"), node("gpu-c")], pods, [], [], now=NOW,
                           deployments=[OPERATOR, deployment("web", "default", "nginx:1.27")],
                           cluster_policies=[cluster_policy()], cluster_policy_crd=True)
    a, b, c = (view["nodes"][n]["components"] for n in ("gpu-a", "gpu-b", "gpu-c"))
    assert a["device-plugin"] == {"version": "0.17.2", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.2",
                                  "mig_strategy": "mixed", "device_list_strategy": ["cdi-annotations", "envvar"],
                                  "pod": "gpu-operator/nvdp-a"}
    assert b["device-plugin"]["mig_strategy"] == "single"
    assert b["device-plugin"]["device_list_strategy"] == ["volume-mounts"]
    assert a["mig-manager"]["version"] == "0.12.1" and "mig-manager" not in b
    assert a["gpu-operator"] == {"version": "25.3.1", "image": "nvcr.io/nvidia/gpu-operator:v25.3.1",
                                 "cdi_enabled": True, "mig_strategy": "single", "driver_enabled": True,
                                 "driver_preinstalled": False, "cluster_policy": "cluster-policy"}
    assert c == {}  # no operand of the operator runs there
    summary = view["components"]
    assert summary["device-plugin"]["nodes"] == 2
    assert [(v["version"], v["nodes"], v["node_names"]) for v in summary["device-plugin"]["versions"]] == [
        ("0.16.1", 1, ["gpu-b"]), ("0.17.2", 1, ["gpu-a"])]
    assert summary["gpu-operator"]["versions"][0]["version"] == "25.3.1"
    assert summary["gpu-operator"]["nodes"] == 2
    assert view["gpu_operator"]["cluster_policy"]["toolkit_version"] == "v1.17.7-ubuntu20.04"
    assert view["gpu_operator"]["cluster_policy_crd"] is True and view["malformed"] == []


def test_defaults_apply_unless_a_config_file_may_set_the_option():
    plain = pod("p", "gpu-a", "nvcr.io/nvidia/k8s-device-plugin:v0.14.5", ns="kube-system")
    config = pod("q", "gpu-b", "nvcr.io/nvidia/k8s-device-plugin:v0.14.5", ns="kube-system",
                 args=["--config-file=/config/config.yaml"])
    view = cl.cluster_view([node("gpu-a"), node("gpu-b")], [plain, config], [], [], now=NOW)
    a = view["nodes"]["gpu-a"]["components"]["device-plugin"]
    b = view["nodes"]["gpu-b"]["components"]["device-plugin"]
    assert (a["mig_strategy"], a["device_list_strategy"]) == ("none", ["envvar"])
    assert (b["mig_strategy"], b["device_list_strategy"]) == (None, None)
    # no operator anywhere: no gpu-operator key, no operator state
    assert "gpu-operator" not in view["nodes"]["gpu-a"]["components"]
    assert view["gpu_operator"]["deployments"] == [] and view["gpu_operator"]["cluster_policy"] is None


def test_untagged_and_digest_only_images_keep_the_image_without_a_version():
    digest = "nvcr.io/nvidia/k8s-device-plugin@sha256:" + "c" * 64
    view = cl.cluster_view([node("gpu-a")], [pod("p", "gpu-a", digest)], [], [], now=NOW)
    facts = view["nodes"]["gpu-a"]["components"]["device-plugin"]
    assert facts["version"] is None and facts["image"] == digest
    assert view["components"]["device-plugin"]["versions"] == [
        {"version": None, "nodes": 1, "node_names": ["gpu-a"], "images": [digest]}]


def test_a_running_pod_wins_over_a_terminating_one_on_the_same_node():
    old = pod("old", "gpu-a", "nvcr.io/nvidia/k8s-device-plugin:v0.16.2", deleting=True)
    new = pod("new", "gpu-a", "nvcr.io/nvidia/k8s-device-plugin:v0.17.3")
    for order in ([old, new], [new, old]):
        view = cl.cluster_view([node("gpu-a")], order, [], [], now=NOW)
        assert view["nodes"]["gpu-a"]["components"]["device-plugin"]["version"] == "0.17.3"


def test_operator_managed_through_a_daemonset_owned_by_the_cluster_policy():
    ds = {"metadata": {"name": "nvidia-device-plugin-daemonset", "namespace": "nvidia",
                       "ownerReferences": [{"kind": "ClusterPolicy", "name": "cluster-policy", "uid": "cp"}]},
          "spec": {"template": {"spec": {"containers": [{"image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.2"}]}}}}
    p = pod("nvdp", "gpu-a", "nvcr.io/nvidia/k8s-device-plugin:v0.17.2", ns="nvidia",
            owner="nvidia-device-plugin-daemonset")
    view = cl.cluster_view([node("gpu-a")], [p], [ds], [], now=NOW, deployments=[],
                           cluster_policies=[cluster_policy(cdi="false"),
                                             cluster_policy("second", state="ignored", cdi=True)])
    op = view["nodes"]["gpu-a"]["components"]["gpu-operator"]
    assert op["version"] is None and op["cdi_enabled"] is False and op["cluster_policy"] == "cluster-policy"


@pytest.mark.parametrize("objs, problem", [
    ({"deployments": [{"metadata": {"name": "gpu-operator", "namespace": "gpu-operator"},
                       "spec": {"template": {"spec": {"containers": "nvcr.io/nvidia/gpu-operator:v25.3.1"}}}}]},
     "deployment gpu-operator/gpu-operator: spec.template.spec.containers is a string, expected a list"),
    ({"cluster_policies": [{"metadata": {"name": "cp"}, "spec": {"cdi": ["enabled"]}}]},
     "clusterpolicy cp: spec.cdi is a list, expected an object"),
    ({"cluster_policies": [{"metadata": {"name": "cp"}, "spec": {"cdi": {"enabled": 1}, "mig": {"strategy": 3}}}]},
     "clusterpolicy cp: spec.cdi.enabled is a number, expected a boolean; spec.mig.strategy is a number, expected a string"),
    ({"cluster_policies": ["cp"]}, "clusterpolicy #0: clusterpolicy is a string, not an object"),
    ({"deployments": [None]}, "deployment #0: deployment is null, not an object"),
])
def test_malformed_operator_objects_are_recorded_not_raised(objs, problem):
    p = pod("mig", "gpu-a", "nvcr.io/nvidia/cloud-native/k8s-mig-manager")
    view = cl.cluster_view([node("gpu-a")], [p], [], [], now=NOW, **objs)
    assert problem in view["malformed"]
    assert view["nodes"]["gpu-a"]["components"]["mig-manager"] == {
        "version": None, "image": "nvcr.io/nvidia/cloud-native/k8s-mig-manager", "pod": "gpu-operator/mig"}


def test_components_evaluate_against_the_catalog():
    """The facts are what the catalog's evaluate takes: versions in its text, conditions by name."""
    entries = catalog_load.load_catalog(CATALOG)
    pods = [pod("nvdp", "gpu-a", "nvcr.io/nvidia/k8s-device-plugin:v0.17.2",
                env={"DEVICE_LIST_STRATEGY": "cdi-annotations"}),
            pod("mig", "gpu-a", "nvcr.io/nvidia/cloud-native/k8s-mig-manager:v0.12.1-ubuntu20.04")]
    view = cl.cluster_view([node("gpu-a")], pods, [], [], now=NOW, deployments=[OPERATOR],
                           cluster_policies=[cluster_policy()], cluster_policy_crd=True)
    comps = view["nodes"]["gpu-a"]["components"]
    dp = comps["device-plugin"]
    facts = {"device_list_strategy": dp["device_list_strategy"], "mig_strategy": dp["mig_strategy"],
             "runtime": "runc", "cdi_enabled": comps["gpu-operator"]["cdi_enabled"]}
    got = dict((c, sorted(m["id"] for m in catalog_evaluate.evaluate(entries, c, comps[c]["version"], facts)["matches"]
                          if m["kind"] == "security"))
               for c in ("device-plugin", "mig-manager", "gpu-operator"))
    assert "device-plugin-cve-2025-23266" in got["device-plugin"]
    assert "mig-manager-cve-2025-23266" in got["mig-manager"]
    assert "gpu-operator-cve-2025-23266" in got["gpu-operator"]
