"""Audit rules on real module outputs (kubelet facts from fixture configs) and API objects."""
import datetime
import os

import pytest

from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet.facts import gather_kubelet_facts
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit import cluster_view as cl
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit import evaluate as fd
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit import evaluate as registry
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.rules import devices

HERE = os.path.dirname(os.path.abspath(__file__))
KUBELET_FIXTURES = os.path.join(HERE, "..", "..", "..", "..", "..", "fixtures", "kubelet")
from ansible_collections.kubegpu.fleet.tests.fixtures.kubelet.kubelet_fakeproc import FakeProc  # noqa: E402  pylint: disable=wrong-import-position

GIB = 1 << 30
NOW = datetime.datetime(2026, 11, 22, 6, 0, 0, tzinfo=datetime.timezone.utc)


def ids(found):
    return sorted(f["id"] for f in found)


def kubelet_for(tmp_path, config, mem_gib=62):
    proc = FakeProc(str(tmp_path))
    proc.set_meminfo(mem_gib * GIB)
    return gather_kubelet_facts(proc_path=proc.path,
                                config_path=os.path.join(KUBELET_FIXTURES, config))


NV_OK = {"present": True, "probe": {"status": "ok", "backend": "nvml"}, "driver_version": "570.172.08",
         "kernel_module_version": "570.172.08", "mig_mixed": False,
         "device_nodes": [{"name": "nvidiactl", "path": "/dev/nvidiactl", "exists": True, "dev_char_link": True},
                          {"name": "nvidia-uvm", "path": "/dev/nvidia-uvm", "exists": True, "dev_char_link": True}],
         "kernel_modules": {"nvidia": {"loaded": True}, "nvidia_uvm": {"loaded": True}}}


def test_memory_reservation_missing_on_big_node(tmp_path):
    kl = kubelet_for(tmp_path, "kubeadm-config.yaml.fixture", mem_gib=62)
    found = fd.evaluate_node({"kubelet": kl, "nvidia": NV_OK})
    assert "kubelet.memory_reservation" in ids(found)
    f = [x for x in found if x["id"] == "kubelet.memory_reservation"][0]
    assert f["evidence"]["reserved_bytes"] == 0
    assert f["evidence"]["recommended_reserved_bytes"] == kl["memory"]["recommended_reserved_bytes"] > 3 * GIB
    assert f["remediation"]["role"] == "kubegpu.fleet.kubelet"


def test_gke_sized_reservation_is_clean(tmp_path):
    kl = kubelet_for(tmp_path, "gke-kubelet-config.yaml.fixture", mem_gib=62)
    found = fd.evaluate_node({"kubelet": kl, "nvidia": NV_OK})
    assert "kubelet.memory_reservation" not in ids(found)


def test_partial_eviction_hard_reported(tmp_path):
    kl = kubelet_for(tmp_path, "eks-kubelet-config.json", mem_gib=62)
    assert kl["memory"]["eviction_hard_partial"] is True
    assert "kubelet.eviction_hard_partial" in ids(fd.evaluate_node({"kubelet": kl}))


def test_unreadable_kubelet_config_gives_no_memory_finding(tmp_path):
    kl = kubelet_for(tmp_path, "malformed-config.yaml.fixture")
    assert kl["config_error"]
    assert not [f for f in fd.evaluate_node({"kubelet": kl}) if f["id"].startswith("kubelet.")]


def test_known_bad_driver_and_remediation():
    dg = {"verdict": "known_bad", "branch": 570, "driver_version": "570.148.08", "reboot_pending": False,
          "recommended_version": "570.172.08",
          "matches": [{"id": "nvml-r570-mig-hang", "references": ["https://github.com/NVIDIA/gpu-operator/issues/1361"]}],
          "compute_utils": {"checked": True, "package": "nvidia-compute-utils-570", "installed": True,
                            "version": "570.148.08-0ubuntu1", "matches_driver": True}}
    found = fd.evaluate_node({"driver_guard": dg, "nvidia": dict(NV_OK, mig_mixed=True)})
    assert ids(found) == ["driver.known_bad"]
    f = found[0]
    assert f["severity"] == "critical"
    assert f["remediation"]["vars"] == {"kubegpu_driver_version": "570.172.08"}
    assert f["evidence"]["matches"] == ["nvml-r570-mig-hang"]
    at_risk = fd.evaluate_node({"driver_guard": dict(dg, verdict="at_risk")})
    assert [(f["id"], f["severity"]) for f in at_risk] == [("driver.at_risk", "warning")]


@pytest.mark.parametrize("cu,expected", [
    ({"checked": True, "installed": False, "package": "nvidia-compute-utils-570"}, True),
    ({"checked": True, "installed": True, "matches_driver": False, "version": "570.148.08-0ubuntu1"}, True),
    ({"checked": True, "installed": True, "matches_driver": True}, False),
    ({"checked": False, "reason": "rpm node"}, False),
])
def test_compute_utils(cu, expected):
    found = fd.evaluate_node({"driver_guard": {"verdict": "ok", "compute_utils": cu, "driver_version": "570.172.08"}})
    assert ("driver.compute_utils" in ids(found)) is expected


def test_reboot_pending_and_mismatch_reported_once():
    nv = dict(NV_OK, probe={"status": "error", "error": "NVML_ERROR_LIB_RM_VERSION_MISMATCH"})
    found = fd.evaluate_node({"nvidia": nv, "driver_guard": {"verdict": "ok", "reboot_pending": True,
                                                             "driver_version": "570.172.08",
                                                             "kernel_module_version": "570.148.08"}})
    assert ids(found) == ["driver.version_mismatch"]


def test_nvml_hung():
    nv = dict(NV_OK, probe={"status": "hung", "backend": "nvml", "elapsed": 10.1})
    assert ids(fd.evaluate_node({"nvidia": nv})) == ["nvml.hung"]


def test_uvm_missing_on_node():
    nv = dict(NV_OK, device_nodes=[{"name": "nvidia-uvm", "exists": False}],
              kernel_modules={"nvidia_uvm": {"loaded": False}})
    assert ids(fd.evaluate_node({"nvidia": nv})) == ["uvm.node_missing"]
    assert fd.evaluate_node({"nvidia": dict(nv, present=False)}) == []


def test_cpumanager_static_needs_device_specs():
    kl = {"cpu_manager_policy": "static", "cgroup_driver": "cgroupfs"}
    api = {"device_plugin": {"image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0", "pass_device_specs": None}}
    assert ids(fd.evaluate_node({"kubelet": kl, "api": api})) == ["cpumanager.device_specs"]
    api["device_plugin"]["pass_device_specs"] = "true"
    assert fd.evaluate_node({"kubelet": kl, "api": api}) == []
    old = {"device_plugin": {"image": "nvidia/k8s-device-plugin:1.0.0-beta4", "pass_device_specs": "true"}}
    f = fd.evaluate_node({"kubelet": kl, "api": old})
    assert ids(f) == ["cpumanager.device_specs"] and f[0]["evidence"]["plugin_older_than_1.0.0-beta5"] is True
    assert fd.evaluate_node({"kubelet": dict(kl, cpu_manager_policy="none"), "api": api}) == []


def test_dev_char_symlinks_with_systemd_driver():
    nv = dict(NV_OK, device_nodes=[dict(NV_OK["device_nodes"][0], dev_char_link=False),
                                   NV_OK["device_nodes"][1]])
    kl = {"cgroup_driver": "systemd", "cpu_manager_policy": "none"}
    f = fd.evaluate_node({"kubelet": kl, "nvidia": nv})
    assert ids(f) == ["devchar.symlinks_missing"] and f[0]["evidence"]["devices"] == ["/dev/nvidiactl"]
    assert fd.evaluate_node({"kubelet": dict(kl, cgroup_driver="cgroupfs"), "nvidia": nv}) == []


def test_cgroup_findings_name_the_pods():
    cg = {"containers": [
        {"gpu": True, "pod_uid": "u1", "container_id": "c1",
         "missing": [{"name": "nvidia-uvm", "required": True}, {"name": "nvidia-uvm-tools", "required": False}]},
        {"gpu": True, "pod_uid": "u2", "container_id": "c2", "missing": [{"name": "nvidia-uvm-tools", "required": False}]},
        {"gpu": False, "pod_uid": "u3", "container_id": "c3", "missing": [{"name": "nvidiactl", "required": True}]},
    ]}
    api = {"pods": [{"uid": "u1", "namespace": "ml", "name": "train-0"}]}
    found = fd.evaluate_node({"cgroups": cg, "api": api})
    assert ids(found) == ["cgroup.devices_missing", "cgroup.uvm_tools_missing"]
    broken = found[0]["evidence"]["containers"]
    assert broken == [{"pod": "ml/train-0", "container_id": "c1", "missing": ["nvidia-uvm"]}]


def test_checkpoint_stale():
    ck = {"stale": True, "stale_ids": ["GPU-old"], "format": "v2", "path": "/var/lib/kubelet/x"}
    assert ids(fd.evaluate_node({"checkpoint": ck})) == ["checkpoint.stale"]


def test_skip_and_module_failures():
    ck = {"stale": True}
    assert fd.evaluate_node({"checkpoint": ck}, skip=["checkpoint.stale"]) == []
    f = fd.evaluate_node({"errors": {"cgroup_devices": "permission denied"}})
    assert ids(f) == ["audit.module_failed"] and "cgroup_devices" in f[0]["title"]


# --- cluster view from API objects ---------------------------------------------------------

def node(name, ready=True, unschedulable=False):
    return {"metadata": {"name": name}, "spec": {"unschedulable": unschedulable},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                       "nodeInfo": {"bootID": "b-" + name}, "allocatable": {"nvidia.com/gpu": "8", "cpu": "64"}}}


def pod(name, node_name, phase, uid, scheduled_at=None, image="busybox", env=None, owner=None):
    p = {"metadata": {"name": name, "namespace": "ml", "uid": uid, "creationTimestamp": "2026-11-22T05:00:00Z"},
         "spec": {"nodeName": node_name, "containers": [{"name": "c", "image": image, "env": env or []}]},
         "status": {"phase": phase}}
    if scheduled_at:
        p["status"]["conditions"] = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": scheduled_at}]
    if owner:
        p["metadata"]["ownerReferences"] = [{"kind": "DaemonSet", "name": owner, "controller": True}]
    return p


def test_cluster_view_pending_without_kubelet_events_blocks_admission():
    pods = [pod("stuck", "gpu-1", "Pending", "u-stuck", scheduled_at="2026-11-22T05:50:00Z"),
            pod("fresh", "gpu-1", "Pending", "u-fresh", scheduled_at="2026-11-22T05:59:30Z"),
            pod("pulling", "gpu-2", "Pending", "u-pull", scheduled_at="2026-11-22T05:40:00Z"),
            pod("plugin", "gpu-1", "Running", "u-dp", image="nvcr.io/nvidia/k8s-device-plugin:v0.17.0",
                env=[{"name": "PASS_DEVICE_SPECS", "value": "false"}], owner="nvidia-device-plugin")]
    events = [{"involvedObject": {"kind": "Pod", "uid": "u-pull"}, "source": {"component": "kubelet"},
               "reason": "Pulling"},
              {"involvedObject": {"kind": "Pod", "uid": "u-stuck"}, "source": {"component": "default-scheduler"},
               "reason": "Scheduled"}]
    view = cl.cluster_view([node("gpu-1"), node("gpu-2", ready=False, unschedulable=True)], pods, [], events, now=NOW)
    g1, g2 = view["nodes"]["gpu-1"], view["nodes"]["gpu-2"]
    assert g1["device_plugin"]["pass_device_specs"] == "false" and g1["device_plugin"]["daemonset"] == "nvidia-device-plugin"
    assert [(p["name"], p["pending_seconds"], p["kubelet_events"]) for p in g1["pending_pods"]] == [
        ("fresh", 30, False), ("stuck", 600, False)]
    assert g2["ready"] is False and g2["unschedulable"] is True and g2["pending_pods"][0]["kubelet_events"] is True
    f1 = fd.evaluate_node({"api": g1}, pending_threshold_s=300)
    assert ids(f1) == ["kubelet.admission_blocked"]
    assert f1[0]["evidence"]["pending_pods"] == ["ml/stuck"]
    assert ids(fd.evaluate_node({"api": g2}, pending_threshold_s=300)) == ["node.not_ready"]


def test_parse_time_forms():
    assert cl.parse_time("2026-11-22T05:00:00Z") == datetime.datetime(2026, 11, 22, 5, tzinfo=datetime.timezone.utc)
    assert cl.parse_time("2026-11-22T05:00:00.123456789Z").microsecond == 123456
    assert cl.parse_time("nonsense") is None and cl.parse_time(None) is None


def test_outdated_device_plugin_daemonset_is_a_cluster_finding():
    ds = {"metadata": {"name": "nvdp", "namespace": "kube-system"},
          "spec": {"template": {"spec": {"containers": [{"image": "nvidia/k8s-device-plugin:1.0.0-beta4"}]}}}}
    view = cl.cluster_view([], [], [ds], [], now=NOW)
    f = fd.evaluate_cluster(view["device_plugin_daemonsets"])
    assert [x["id"] for x in f] == ["cluster.device_plugin_outdated"] and f[0]["node"] is None
    assert devices.plugin_version("repo/k8s-device-plugin@sha256:abc") is None


def test_admission_blocked_from_kubelet_journal_alone():
    kl = {"allocation_log": {"source": "journal", "unanswered": [
        {"pod": "ml/train-late", "container": "main", "time": 1.0, "age_seconds": 400}]}}
    f = fd.evaluate_node({"kubelet": kl}, pending_threshold_s=300)
    assert ids(f) == ["kubelet.admission_blocked"]
    assert f[0]["evidence"]["kubelet_log_unanswered_allocations"][0]["pod"] == "ml/train-late"
    young = {"allocation_log": {"unanswered": [{"pod": "ml/x", "age_seconds": 10}]}}
    assert fd.evaluate_node({"kubelet": young}, pending_threshold_s=300) == []


# ------------------------------------------------------------- malformed input

@pytest.mark.parametrize("node, problem", [
    ({"metadata": None}, "metadata is missing or null"),
    ({"metadata": ["gpu-9"]}, "metadata is a list, expected an object"),
    ({"metadata": {"name": 7}}, "metadata.name is a number, expected a string"),
    ("gpu-9", "node is a string, not an object"),
])
def test_cluster_view_nodes_that_cannot_be_named_are_listed_as_malformed(node, problem):
    good = {"metadata": {"name": "gpu-1"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    view = cl.cluster_view([good, node], [], [], [], now=NOW)
    assert list(view["nodes"]) == ["gpu-1"] and view["nodes"]["gpu-1"]["ready"] is True
    assert len(view["malformed"]) == 1 and problem in view["malformed"][0]


def test_cluster_view_wrong_types_inside_a_node_and_its_pods_are_recorded_there():
    node = {"metadata": {"name": "gpu-1", "labels": ["x"]}, "spec": "cordoned",
            "status": {"conditions": {"type": "Ready"}, "allocatable": {1: 2, "nvidia.com/gpu": "8"},
                       "nodeInfo": "b-1"}}
    pods = [
        {"metadata": {"name": "a", "namespace": "ml", "uid": "u-a", "ownerReferences": "ds"},
         "spec": {"nodeName": "gpu-1", "containers": "cuda"}, "status": "Pending"},
        {"metadata": {"name": "b", "namespace": "ml", "uid": "u-b", "creationTimestamp": "2026-11-22T05:00:00Z"},
         "spec": {"nodeName": "gpu-1",
                  "containers": [None, {"image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0",
                                        "env": "PASS_DEVICE_SPECS=true", "args": "x"}]},
         "status": {"phase": "Pending", "conditions": [None, "PodScheduled"]}},
        {"metadata": {"name": "c", "namespace": "ml"}, "spec": {"nodeName": ["gpu-1"]}},
    ]
    events = [{"involvedObject": "Pod/b", "source": "kubelet"}, {"reportingComponent": 5}]
    view = cl.cluster_view([node], pods, [{"spec": {"template": "x"}}, "ds"], events, now=NOW)
    n = view["nodes"]["gpu-1"]
    assert n["ready"] is None and n["labels"] == {} and n["allocatable"] == {"nvidia.com/gpu": "8"}
    assert n["boot_id"] is None and n["unschedulable"] is False
    assert [p["name"] for p in n["pods"]] == ["a", "b"]
    assert n["pods"][0]["phase"] is None
    assert n["pending_pods"] == [{"namespace": "ml", "name": "b", "uid": "u-b", "pending_seconds": 3600,
                                  "kubelet_events": False}]
    assert n["device_plugin"]["pass_device_specs"] is None
    text = " | ".join(n["malformed"])
    for part in ("Node: metadata.labels is a list", "Node: spec is a string",
                 "Node: status.conditions is an object", "Node: status.nodeInfo is a string",
                 "pod ml/a: metadata.ownerReferences is a string", "spec.containers is a string",
                 "status is a string"):
        assert part in text, (part, text)
    top = " | ".join(view["malformed"])
    assert "pod ml/c: spec.nodeName is a list" in top
    assert "daemonset #1: daemonset is a string" in top


def test_cluster_view_odd_times_do_not_raise():
    pods = [{"metadata": {"name": n, "namespace": "ml", "uid": n, "creationTimestamp": t},
             "spec": {"nodeName": "gpu-1"}, "status": {"phase": "Pending"}}
            for n, t in (("a", "0001-01-01T00:00:00+23:59"), ("b", "not a time"), ("c", 17),
                         ("d", "9999-12-31T23:59:59.999999999Z"))]
    view = cl.cluster_view([{"metadata": {"name": "gpu-1"}}], pods, now=NOW)
    secs = dict((p["name"], p["pending_seconds"]) for p in view["nodes"]["gpu-1"]["pending_pods"])
    assert secs["b"] is None and secs["c"] is None
    assert isinstance(secs["a"], int) and secs["d"] < 0


def test_evaluate_node_tolerates_results_of_any_shape():
    ctx = {"nvidia": {"present": True, "probe": "hung", "device_nodes": "nvidia-uvm",
                      "kernel_modules": ["nvidia_uvm"]},
           "driver_guard": {"verdict": "known_bad", "matches": ["x", None, {"id": "r570", "references": "u"}],
                            "compute_utils": "yes", "reboot_pending": False},
           "api": {"pending_pods": [{"name": "a", "pending_seconds": "lots"}, "b", {"pending_seconds": 900}],
                   "pods": "none", "device_plugin": "nvdp"},
           "kubelet": {"cpu_manager_policy": "static", "memory": {"reserved_total_bytes": "1Gi",
                                                                  "recommended_reserved_bytes": 2 * GIB},
                       "allocation_log": {"unanswered": [None, {"age_seconds": "old"}]}},
           "cgroups": {"containers": [{"gpu": True, "pod_uid": ["x"], "missing": ["nvidia-uvm", {"name": "nvidia0",
                                                                                                 "required": True}]}]},
           "checkpoint": ["stale"],
           "errors": {1: "x", "gpu_facts": None}}
    found = fd.evaluate_node(ctx, pending_threshold_s=300)
    assert ids(found) == ["audit.module_failed", "audit.module_failed", "cgroup.devices_missing",
                          "driver.known_bad", "kubelet.admission_blocked", "kubelet.memory_reservation",
                          "uvm.node_missing"]
    known_bad = [f for f in found if f["id"] == "driver.known_bad"][0]
    assert known_bad["evidence"]["matches"] == ["r570"]


def test_a_rule_that_still_trips_is_reported_and_the_others_run():
    def broken(ctx):
        return ctx["nvidia"]["probe"]["status"].upper()  # AttributeError on a non-str status

    rules = tuple(r._replace(function=broken) if r.name == "checkpoint" else r for r in registry.NODE_RULES)
    found = fd.evaluate_node({"nvidia": {"probe": {"status": 5}}, "api": {"ready": False}}, rules=rules)
    assert ids(found) == ["audit.module_failed", "node.not_ready"]
    failed = [f for f in found if f["id"] == "audit.module_failed"][0]
    assert failed["evidence"]["probe"] == "evaluate:checkpoint"
    assert "malformed input for rule checkpoint: AttributeError" in failed["evidence"]["error"]
