"""Device plugin DaemonSet patch planning and broken-pod recreation (plugin_utils/stack/device_plugin.py)."""
import copy

import pytest

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.stack import device_plugin as dp
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit import finding_types
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.rules import devices as audit_devices

IMG = "nvcr.io/nvidia/k8s-device-plugin"


def ds(name, image, env=None, pool=None, args=None, affinity=None, uid=None, containers_before=()):
    selector = {"nvidia.com/gpu.present": "true"}
    if pool:
        selector["kubegpu.io/pool"] = pool
    ctr = {"name": "nvidia-device-plugin-ctr", "image": image, "env": list(env or []),
           "securityContext": {"privileged": True}}
    if args:
        ctr["args"] = list(args)
    spec = {"nodeSelector": selector, "containers": list(containers_before) + [ctr]}
    if affinity:
        spec["affinity"] = affinity
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": name, "namespace": "kube-system", "uid": uid or "uid-" + name},
            "spec": {"selector": {"matchLabels": {"name": name}},
                     "template": {"metadata": {"labels": {"name": name}}, "spec": spec}}}


def node(name, pool="h100", **labels):
    lab = {"nvidia.com/gpu.present": "true", "kubegpu.io/pool": pool}
    lab.update(labels)
    return {"metadata": {"name": name, "labels": lab}}


GOOD = ds("nvidia-device-plugin-daemonset", IMG + ":v0.17.2", pool="h100",
          env=[{"name": "PASS_DEVICE_SPECS", "value": "true"}, {"name": "MIG_STRATEGY", "value": "mixed"}])
LEGACY = ds("nvidia-device-plugin-legacy", IMG + ":v0.14.5", pool="h100-legacy",
            env=[{"name": "MIG_STRATEGY", "value": "single"}, {"name": "FAIL_ON_INIT_ERROR", "value": "true"}])
NODES = [node("gpu-healthy"), node("gpu-cpumanager", pool="h100-legacy"), node("gpu-uvm-late")]


def by_name(plans):
    return dict((p["name"], p) for p in plans)


def patched(plans):
    """The plans the role applies (cluster.yml patches the DaemonSets whose plan has a patch)."""
    return [p for p in plans if p["patch"]]


def apply_smp(ds_obj, patch):
    """Strategic merge of our patch shape (containers and env merged by name), as the API server does."""
    out = copy.deepcopy(ds_obj)
    spec = out["spec"]["template"]["spec"]
    for pc in patch["spec"]["template"]["spec"]["containers"]:
        ctr = next(c for c in spec["containers"] if c["name"] == pc["name"])
        for key, value in pc.items():
            if key == "env":
                for pe in value:
                    cur = next((e for e in ctr.setdefault("env", []) if e["name"] == pe["name"]), None)
                    if cur is None:
                        ctr["env"].append(dict((k, v) for k, v in pe.items() if v is not None))
                    else:
                        for k, v in pe.items():
                            if v is None:
                                cur.pop(k, None)
                            else:
                                cur[k] = v
            elif key != "name":
                ctr[key] = value
    return out


# ----------------------------------------------------------------------------- modes

@pytest.mark.parametrize("value,mode", [
    (True, "always"), (False, "never"), ("auto", "auto"), ("Always", "always"), ("never", "never"),
    ("true", "always"), ("no", "never"), (None, "auto"),
])
def test_pass_mode_normalisation(value, mode):
    assert dp.normalize_pass_mode(value) == mode


def test_pass_mode_rejects_nonsense():
    with pytest.raises(dp.DevicePluginError, match="auto, always"):
        dp.normalize_pass_mode("sometimes")


# ------------------------------------------------------------------------ versions/images

@pytest.mark.parametrize("image,version", [
    (IMG + ":v0.17.2", "v0.17.2"), (IMG + ":1.0.0-beta4", "1.0.0-beta4"), ("nvidia/k8s-device-plugin:1.11", "1.11"),
    ("reg.local:5000/nvidia/k8s-device-plugin:v0.14.5@sha256:abc", "v0.14.5"),
    (IMG + "@sha256:abc", None), (IMG, None), (IMG + ":latest", None), ("reg.local:5000/k8s-device-plugin", None),
])
def test_image_version(image, version):
    v = dp.image_version(image)
    assert (v.text if v else None) == version


@pytest.mark.parametrize("image,repo", [
    (IMG + ":v0.14.5", IMG), ("reg.local:5000/nvidia/k8s-device-plugin:v0.14.5@sha256:abc",
                              "reg.local:5000/nvidia/k8s-device-plugin"),
    ("k8s-device-plugin", "k8s-device-plugin"), ("reg.local:5000/k8s-device-plugin", "reg.local:5000/k8s-device-plugin"),
])
def test_image_repository(image, repo):
    assert dp.image_repository(image) == repo


@pytest.mark.parametrize("tag,upgrade", [
    ("1.0.0-beta", True), ("1.0.0-beta4", True), ("v1.11", True), ("1.10", True),
    ("1.0.0-beta5", False), ("1.0.0-beta6", False), ("v0.6.0", False), ("v0.14.5", False),
])
def test_default_minimum_is_the_first_release_with_device_specs(tag, upgrade):
    d = ds("p", IMG + ":" + tag, env=[{"name": "PASS_DEVICE_SPECS", "value": "true"}])
    plan = dp.plan_daemonsets([d], [node("n")], pass_device_specs="never")[0]
    assert plan["upgrade"] is upgrade
    if upgrade:
        assert plan["target_image"] == IMG + ":v0.17.2"
        assert plan["patch"] == {"spec": {"template": {"spec": {"containers": [
            {"name": "nvidia-device-plugin-ctr", "image": IMG + ":v0.17.2"}]}}}}
    else:
        assert plan["patch"] is None
    # the same threshold the audit uses for cluster.device_plugin_outdated
    assert upgrade == (dp.image_version(d["spec"]["template"]["spec"]["containers"][0]["image"])
                       < audit_devices.MIN_PLUGIN_FOR_DEVICE_SPECS)


def test_higher_minimum_and_explicit_image():
    plans = dp.plan_daemonsets([GOOD, LEGACY], NODES, min_version="v0.15.0",
                               image="mirror.local/nvidia/k8s-device-plugin:v0.17.3", pass_device_specs="never")
    p = by_name(plans)
    assert p["nvidia-device-plugin-daemonset"]["patch"] is None
    legacy = p["nvidia-device-plugin-legacy"]
    assert legacy["upgrade"] and legacy["target_image"] == "mirror.local/nvidia/k8s-device-plugin:v0.17.3"
    assert "older than v0.15.0" in legacy["reasons"][0]


def test_target_must_not_be_below_the_minimum():
    with pytest.raises(dp.DevicePluginError, match="older than kubegpu_device_plugin_min_version"):
        dp.plan_daemonsets([LEGACY], NODES, min_version="v0.18.0", version="v0.17.2")
    with pytest.raises(dp.DevicePluginError, match="no version tag"):
        dp.plan_daemonsets([LEGACY], NODES, image=IMG + ":latest")
    with pytest.raises(dp.DevicePluginError, match="kubegpu_device_plugin_version"):
        dp.plan_daemonsets([LEGACY], NODES, version="newest")


def test_too_old_plugin_that_must_pass_specs_is_upgraded_even_below_a_lowered_minimum():
    old = ds("old", IMG + ":1.0.0-beta4", pool="h100-legacy")
    plan = dp.plan_daemonsets([old], NODES, static_nodes=["gpu-cpumanager"], min_version="1.0.0-beta")[0]
    assert plan["upgrade"] and plan["set_pass_device_specs"]
    assert "predates 1.0.0-beta5" in " ".join(plan["reasons"])
    ctr = plan["patch"]["spec"]["template"]["spec"]["containers"][0]
    assert ctr["image"] == IMG + ":v0.17.2" and ctr["env"] == [{"name": "PASS_DEVICE_SPECS", "value": "true"}]


def test_untagged_image_is_left_alone_with_a_warning():
    d = ds("digest", IMG + "@sha256:0123", pool="h100-legacy")
    plan = dp.plan_daemonsets([d], NODES, static_nodes=["gpu-cpumanager"])[0]
    assert not plan["upgrade"] and plan["set_pass_device_specs"]
    assert "no version tag" in plan["warnings"][0]


# ------------------------------------------------------------------------ PASS_DEVICE_SPECS

def test_auto_patches_only_the_daemonset_serving_static_cpu_manager_nodes():
    plans = by_name(dp.plan_daemonsets([GOOD, LEGACY], NODES, static_nodes=["gpu-cpumanager"]))
    good, legacy = plans["nvidia-device-plugin-daemonset"], plans["nvidia-device-plugin-legacy"]
    assert good["nodes"] == ["gpu-healthy", "gpu-uvm-late"] and good["static_nodes"] == []
    assert good["patch"] is None and good["pass_device_specs"] is True
    assert legacy["nodes"] == ["gpu-cpumanager"] and legacy["static_nodes"] == ["gpu-cpumanager"]
    assert legacy["set_pass_device_specs"] and not legacy["upgrade"]
    assert legacy["patch"] == {"spec": {"template": {"spec": {"containers": [
        {"name": "nvidia-device-plugin-ctr", "env": [{"name": "PASS_DEVICE_SPECS", "value": "true"}]}]}}}}
    assert patched(plans.values()) == [legacy]


def test_auto_without_static_nodes_changes_nothing_and_always_patches_every_daemonset_lacking_it():
    assert patched(dp.plan_daemonsets([GOOD, LEGACY], NODES)) == []
    always = patched(dp.plan_daemonsets([GOOD, LEGACY], NODES, pass_device_specs=True))
    assert [p["name"] for p in always] == ["nvidia-device-plugin-legacy"]
    never = dp.plan_daemonsets([GOOD, LEGACY], NODES, static_nodes=["gpu-cpumanager"], pass_device_specs="never")
    assert patched(never) == []


def test_env_merge_keeps_every_other_entry_and_field():
    legacy = copy.deepcopy(LEGACY)
    legacy["spec"]["template"]["spec"]["containers"][0]["env"].append(
        {"name": "PASS_DEVICE_SPECS", "value": "false"})
    sidecar = {"name": "sidecar", "image": "busybox", "env": [{"name": "X", "value": "1"}]}
    legacy["spec"]["template"]["spec"]["containers"].insert(0, sidecar)
    plan = dp.plan_daemonsets([legacy], NODES, static_nodes=["gpu-cpumanager"])[0]
    assert plan["pass_device_specs"] is False and plan["set_pass_device_specs"]
    after = apply_smp(legacy, plan["patch"])
    ctr = after["spec"]["template"]["spec"]["containers"][1]
    assert ctr["env"] == [{"name": "MIG_STRATEGY", "value": "single"}, {"name": "FAIL_ON_INIT_ERROR", "value": "true"},
                          {"name": "PASS_DEVICE_SPECS", "value": "true"}]
    assert ctr["securityContext"] == {"privileged": True} and ctr["image"] == IMG + ":v0.14.5"
    assert after["spec"]["template"]["spec"]["containers"][0] == sidecar
    # planning the patched object again: nothing left to do (idempotent)
    assert dp.plan_daemonsets([after], NODES, static_nodes=["gpu-cpumanager"])[0]["patch"] is None


def test_value_from_is_replaced_by_a_literal_value():
    d = ds("vf", IMG + ":v0.17.2", pool="h100-legacy",
           env=[{"name": "PASS_DEVICE_SPECS", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}])
    plan = dp.plan_daemonsets([d], NODES, static_nodes=["gpu-cpumanager"])[0]
    env = plan["patch"]["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env == [{"name": "PASS_DEVICE_SPECS", "value": "true", "valueFrom": None}]
    after = apply_smp(d, plan["patch"])
    assert after["spec"]["template"]["spec"]["containers"][0]["env"] == [{"name": "PASS_DEVICE_SPECS", "value": "true"}]


@pytest.mark.parametrize("args,value", [(["--pass-device-specs"], True), (["--pass-device-specs=true"], True),
                                        (["--mig-strategy=single"], None)])
def test_flags_count_as_passing_specs(args, value):
    d = ds("f", IMG + ":v0.17.2", pool="h100-legacy", args=args)
    plan = dp.plan_daemonsets([d], NODES, static_nodes=["gpu-cpumanager"])[0]
    assert plan["pass_device_specs"] is value
    assert (plan["patch"] is None) == (value is True)


def test_a_false_flag_blocks_the_change_with_the_reason():
    d = ds("f", IMG + ":v0.17.2", pool="h100-legacy", args=["--pass-device-specs=false"])
    plan = dp.plan_daemonsets([d], NODES, static_nodes=["gpu-cpumanager"])[0]
    assert plan["patch"] is None and "--pass-device-specs=false" in plan["blocked"]


def test_skip_label_blocks_a_daemonset_serving_that_node():
    nodes = [node("gpu-healthy"), node("gpu-cpumanager", pool="h100-legacy", **{"kubegpu.io/maintenance": "skip"})]
    plan = dp.plan_daemonsets([LEGACY], nodes, static_nodes=["gpu-cpumanager"])[0]
    assert plan["skip_nodes"] == ["gpu-cpumanager"] and plan["patch"] is None
    assert "kubegpu.io/maintenance=skip" in plan["blocked"]


def test_non_plugin_daemonsets_are_ignored():
    other = ds("dcgm", "nvcr.io/nvidia/k8s/dcgm-exporter:3.3.9")
    assert dp.plan_daemonsets([other, LEGACY], NODES) == [by_name(dp.plan_daemonsets([LEGACY], NODES))[
        "nvidia-device-plugin-legacy"]]


# ---------------------------------------------------------------------- node matching

def test_node_affinity_and_bound_pods_decide_which_nodes_a_daemonset_serves():
    aff = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "gpu.model", "operator": "In", "values": ["h100", "a100"]},
                              {"key": "legacy", "operator": "DoesNotExist"}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["special"]}]}]}}}
    d = ds("aff", IMG + ":v0.17.2", affinity=aff)
    nodes = [node("a", **{"gpu.model": "h100"}), node("b", **{"gpu.model": "l4"}),
             node("c", **{"gpu.model": "a100", "legacy": "1"}), node("special"), node("other")]
    pods = [{"metadata": {"namespace": "kube-system", "name": "aff-x",
                          "ownerReferences": [{"kind": "DaemonSet", "name": "aff", "uid": "uid-aff", "controller": True}]},
             "spec": {"nodeName": "pinned"}},
            {"metadata": {"namespace": "kube-system", "name": "foreign",
                          "ownerReferences": [{"kind": "DaemonSet", "name": "x", "uid": "uid-x"}]},
             "spec": {"nodeName": "elsewhere"}}]
    assert dp.daemonset_nodes(d, nodes, pods) == ["a", "pinned", "special"]
    plan = dp.plan_daemonsets([d], nodes, pods, static_nodes=["pinned"])[0]
    assert plan["static_nodes"] == ["pinned"] and plan["set_pass_device_specs"]


@pytest.mark.parametrize("op,values,labels,ok", [
    ("NotIn", ["x"], {"k": "y"}, True), ("NotIn", ["x"], {}, True), ("NotIn", ["x"], {"k": "x"}, False),
    ("Exists", [], {"k": ""}, True), ("Gt", ["3"], {"k": "4"}, True), ("Lt", ["3"], {"k": "4"}, False),
    ("Gt", ["3"], {"k": "x"}, False), ("Bogus", [], {"k": "x"}, False),
])
def test_match_expression_operators(op, values, labels, ok):
    term = {"matchExpressions": [{"key": "k", "operator": op, "values": values}]}
    spec = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}}
    assert dp.node_selected(spec, {"metadata": {"name": "n", "labels": labels}}) is ok


# ---------------------------------------------------------------- static CPU manager nodes

def test_static_nodes_from_facts_audit_and_explicit_list():
    audit = {"node": "gpu-b", "status": "audited", "findings": [
        finding_types.finding("cpumanager.device_specs", {}), finding_types.finding("uvm.node_missing", {})]}
    hosts = [
        {"host": "a", "node": "gpu-a", "kubelet": {"cpu_manager_policy": "static"}, "audit": {}},
        {"host": "b", "node": "gpu-b", "kubelet": {}, "audit": audit},
        {"host": "c", "node": "gpu-c", "kubelet": {"cpu_manager_policy": "none"}, "audit": {}},
        {"host": "d", "node": "gpu-d", "kubelet": {}, "audit": {}},
    ]
    assert dp.static_cpu_manager_nodes(hosts, ["gpu-x"]) == ["gpu-a", "gpu-b", "gpu-x"]
    assert dp.cpu_manager_known(hosts) == ["a", "b", "c"]


# ------------------------------------------------------------------------ pod recreation

def pod(name, uid, owner=None, labels=None, deleting=False, image="cuda"):
    md = {"name": name, "namespace": "ml", "uid": uid, "resourceVersion": "17", "creationTimestamp": "t",
          "labels": dict(labels or {"app": name}), "managedFields": [{"manager": "kubectl"}],
          "annotations": {"a": "b"}}
    if owner:
        md["ownerReferences"] = [{"kind": owner[0], "name": owner[1], "uid": "o", "controller": True}]
    if deleting:
        md["deletionTimestamp"] = "t2"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": md,
            "spec": {"nodeName": "gpu-a",
                     "containers": [{"name": "main", "image": image,
                                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
            "status": {"phase": "Running"}}


def test_pods_to_recreate_bare_owned_skipped():
    pods = [pod("bare", "u1"), pod("owned", "u2", owner=("ReplicaSet", "train-abc")),
            pod("skip", "u3", labels={"kubegpu.io/maintenance": "skip"}), pod("going", "u4", deleting=True),
            pod("static", "u5", owner=("Node", "gpu-a")), pod("plugin", "u6", image=IMG + ":v0.17.2"),
            pod("healthy", "u7")]
    broken = [{"pod_uid": u, "container_id": "c" + u, "missing": ["nvidia-uvm"]} for u in
              ("u1", "u2", "u3", "u4", "u5", "u6", "gone")]
    broken.append({"pod_uid": "u1", "container_id": "side", "missing": ["nvidiactl"]})
    out = dict((p["name"], p) for p in dp.pods_to_recreate(broken, pods))
    assert set(out) == {"bare", "owned", "skip", "going", "static", "plugin"}
    assert out["bare"]["action"] == "recreate" and out["bare"]["missing"] == ["nvidia-uvm", "nvidiactl"]
    assert out["owned"]["action"] == "delete" and out["owned"]["owner"] == "ReplicaSet/train-abc"
    assert out["owned"]["manifest"] is None and out["owned"]["skipped"] is None
    assert "labelled" in out["skip"]["skipped"] and out["going"]["skipped"] == "already being deleted"
    assert "static pod" in out["static"]["skipped"] and "device plugin" in out["plugin"]["skipped"]
    m = out["bare"]["manifest"]
    assert m["metadata"] == {"name": "bare", "namespace": "ml", "labels": {"app": "bare"}, "annotations": {"a": "b"}}
    assert m["spec"]["nodeName"] == "gpu-a" and "status" not in m


def test_ready_pods():
    ok = pod("a", "1")
    ok["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    notready = copy.deepcopy(ok)
    notready["status"]["conditions"][0]["status"] = "False"
    going = copy.deepcopy(ok)
    going["metadata"]["deletionTimestamp"] = "t"
    assert dp.ready_pods([ok, notready, going, pod("b", "2")]) == [ok]
    owned = copy.deepcopy(ok)
    owned["metadata"]["ownerReferences"] = [{"kind": "DaemonSet", "name": "d", "uid": "ds-uid", "controller": True}]
    assert dp.ready_pods([ok, owned], owner_uid="ds-uid") == [owned]


@pytest.mark.parametrize("selector,labels,ok", [
    ("kubegpu.io/maintenance=skip", {"kubegpu.io/maintenance": "skip"}, True),
    ("kubegpu.io/maintenance=skip", {"kubegpu.io/maintenance": "later"}, False),
    ("kubegpu.io/maintenance", {"kubegpu.io/maintenance": "later"}, True),
    ("", {"a": "b"}, False),
])
def test_has_label(selector, labels, ok):
    assert dp.has_label({"metadata": {"labels": labels}}, selector) is ok
