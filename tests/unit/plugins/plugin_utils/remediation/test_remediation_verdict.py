"""The verdict on the audit after remediation (remediation/verdict.py final_verdict and the
kubegpu.fleet.remediation_verdict filter): findings the node's plan left for a person (cluster
components) are reported but do not fail the run; anything else at or above fail_on does."""
import copy
import os

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.kubegpu.fleet.plugins.filter.remediation import remediation_verdict
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.catalog import load as catalog_load
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit import evaluate as fd
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import build as rep
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.remediation.plan import plan_node
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.remediation.verdict import final_verdict

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..", ".."))
CATALOG = catalog_load.load_catalog(os.path.join(ROOT, "catalog", "v2"))
CLUSTER = {"security.device-plugin", "security.gpu-operator", "security.mig-manager"}


def ctx(driver, toolkit):
    """A demo-fleet node: H100, driver/toolkit as given, the cluster components of the demo API."""
    return {
        "nvidia": {"present": True, "driver_version": driver, "kernel_module_version": driver, "mig_mixed": False,
                   "probe": {"status": "ok", "backend": "nvml"},
                   "device_nodes": [{"name": "nvidiactl", "path": "/dev/nvidiactl", "exists": True,
                                     "dev_char_link": True},
                                    {"name": "nvidia-uvm", "path": "/dev/nvidia-uvm", "exists": True,
                                     "dev_char_link": True}],
                   "kernel_modules": {"nvidia": {"loaded": True}, "nvidia_uvm": {"loaded": True}},
                   "gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "mig_mode": {"current": "disabled"}}]},
        "stack": {"container_toolkit": {"installed": True, "version": toolkit,
                                        "packages": {"nvidia-container-toolkit": "%s-1" % toolkit},
                                        "injection_mode": "legacy", "runtime": "runc", "cdi_specs": [],
                                        "cuda_compat_hook_disabled": False},
                  "fabric_manager": {"installed": False, "package": None, "version": None,
                                     "service": {"active": None, "enabled": None}},
                  "nvswitch": {"present": False, "count": 0, "bus_ids": []},
                  "kernel_modules": "open"},
        "api": {"components": {"device-plugin": {"version": "0.17.1", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.1",
                                                 "mig_strategy": "single", "device_list_strategy": "envvar"},
                               "mig-manager": {"version": "0.12.1", "image": "nvcr.io/nvidia/cloud-native/k8s-mig-manager:v0.12.1"},
                               "gpu-operator": {"version": "25.3.1", "cdi_enabled": False}}},
        "catalog": CATALOG,
    }


def node(name, c):
    return {"node": name, "name": name, "status": "audited", "findings": fd.evaluate_node(c)}


def report_of(nodes):
    return rep.build_report([{"name": n["name"], "status": "audited", "findings": n["findings"]} for n in nodes],
                            cluster_findings=[], fail_on="info", collection_version="0", run={})


@pytest.fixture(scope="module")
def before():
    return node("gpu-a", ctx("570.172.08", "1.17.8"))


def test_plan_leaves_the_cluster_components_for_a_person(before):
    ids = {f["id"] for f in before["findings"]}
    assert {"security.driver", "security.container-toolkit"} <= ids
    plan = plan_node(before)
    found_cluster = ids & CLUSTER
    assert found_cluster, ids  # the demo components are affected by catalog v2 advisories
    # R570 is not among the branches of NVIDIA's latest driver bulletin: a branch move is a person's choice
    assert "driver.unlisted_branch" in ids
    # and past NVIDIA's support (not in NVIDIA's support matrix): a branch move too
    assert "driver.unsupported_branch" in ids
    assert set(plan["manual"]) == found_cluster | {"driver.unlisted_branch", "driver.unsupported_branch"}
    assert plan["roles"]["driver"]["kubegpu_driver_version"] == "570.211.01"
    assert plan["roles"]["device_plugin"]["kubegpu_toolkit_fix"]["target"] == "1.19.1"


def test_fixed_node_leaves_only_the_manual_findings(before):
    plan = plan_node(before)
    after = node("gpu-a", ctx("570.211.01", "1.19.1"))
    verdict = final_verdict(report_of([after]), "info", {"gpu-a": plan})
    assert verdict["unresolved"] == []
    assert {e["id"] for e in verdict["left_for_person"]} == set(plan["manual"])
    # a cluster component's finding is listed once for the cluster, with the nodes it affects
    assert all(e["node"] == "gpu-a" or (e["node"] is None and e["nodes"] == ["gpu-a"])
               for e in verdict["left_for_person"])
    assert {e["id"] for e in verdict["left_for_person"] if e["node"] is None} == found_cluster_ids(plan)


def found_cluster_ids(plan):
    return set(plan["manual"]) & CLUSTER


def test_cluster_component_left_for_a_person_only_when_every_affected_plan_says_so(before):
    """The GPU Operator's advisory on two nodes is one finding of the cluster: left for a person
    when both nodes' plans left it so, unresolved when one node had no plan."""
    plan = plan_node(before)
    a, b = node("gpu-a", ctx("570.211.01", "1.19.1")), node("gpu-b", ctx("570.211.01", "1.19.1"))
    both = final_verdict(report_of([a, b]), "info", {"gpu-a": plan, "gpu-b": plan})
    operator = [e for e in both["left_for_person"] if e["id"] == "security.gpu-operator"]
    assert operator == [{"node": None, "id": "security.gpu-operator", "severity": operator[0]["severity"],
                         "nodes": ["gpu-a", "gpu-b"], "where": "cluster (2 nodes)"}]
    one = final_verdict(report_of([a, b]), "info", {"gpu-a": plan})
    assert "security.gpu-operator" in {e["id"] for e in one["unresolved"] if e["node"] is None}


def test_what_the_rollout_should_have_fixed_is_unresolved(before):
    plan = plan_node(before)
    after = node("gpu-a", ctx("570.172.08", "1.19.1"))  # the driver did not move
    verdict = final_verdict(report_of([after]), "info", {"gpu-a": plan})
    assert [e["id"] for e in verdict["unresolved"]] == ["security.driver"]


def test_manual_only_on_the_node_whose_plan_said_so(before):
    """A plan is per node: another node's manual list does not excuse this node's findings, and a
    node without a plan (no audit before) has nothing excused."""
    plan = plan_node(before)
    after = node("gpu-b", ctx("570.211.01", "1.19.1"))
    verdict = final_verdict(report_of([after]), "info", {"gpu-a": plan})
    assert {e["id"] for e in verdict["unresolved"]} == set(plan["manual"])
    assert verdict["left_for_person"] == []


def test_threshold_and_never(before):
    plan = plan_node(before)
    after = node("gpu-a", ctx("570.172.08", "1.19.1"))
    assert final_verdict(report_of([after]), "never", {"gpu-a": plan}) == {"unresolved": [], "left_for_person": []}
    crit = final_verdict(report_of([after]), "critical", {"gpu-a": plan})
    assert all(e["severity"] == "critical" for e in crit["unresolved"] + crit["left_for_person"])


def test_cluster_wide_finding_is_never_left_for_a_person(before):
    plan = copy.deepcopy(plan_node(before))
    plan["manual"].append("cluster.device_plugin_outdated")
    after = node("gpu-a", ctx("570.211.01", "1.19.1"))
    cluster = [{"id": "cluster.device_plugin_outdated", "severity": "warning", "title": "outdated",
                "node": None, "evidence": {"daemonset": "kube-system/nvidia-device-plugin"}}]
    r = rep.build_report([{"name": "gpu-a", "status": "audited", "findings": after["findings"]}],
                         cluster_findings=cluster, fail_on="info", collection_version="0", run={})
    verdict = final_verdict(r, "info", {"gpu-a": plan})
    assert [e["id"] for e in verdict["unresolved"]] == ["cluster.device_plugin_outdated"]


def test_filter_reads_plans_from_host_variables(before):
    plan = plan_node(before)
    after = node("gpu-a", ctx("570.211.01", "1.19.1"))
    hosts = [{"inventory_hostname": "host-a", "kubegpu_node_name": "gpu-a", "kubegpu_remediation": plan},
             {"inventory_hostname": "host-b"}]
    verdict = remediation_verdict(report_of([after]), "info", hosts)
    assert verdict["unresolved"] == [] and len(verdict["left_for_person"]) == len(plan["manual"])


@pytest.mark.parametrize("args,msg", [
    (({"no": "nodes"}, "info", []), "must be an audit report"),
    (({"nodes": []}, "loud", []), "fail_on must be"),
    (({"nodes": []}, "info", ["host-a"]), "hosts must be host variable dicts"),
])
def test_filter_refuses_bad_input(args, msg):
    with pytest.raises(AnsibleFilterError, match=msg):
        remediation_verdict(*args)


def test_no_device_plugin_restart_before_a_driver_reboot():
    """uvm.node_missing asks for a plugin pod restart; with a driver upgrade in the same window the
    restarted plugin would meet libraries newer than the loaded module (no GPU advertised): the
    reboot restarts it instead. Without the driver change the restart stays the role's own call."""
    c = ctx("570.172.08", "1.19.1")
    c["nvidia"]["device_nodes"][1]["exists"] = False  # /dev/nvidia-uvm missing
    with_driver = plan_node(node("gpu-a", c))
    assert "uvm.node_missing" in with_driver["findings"] and with_driver["reboot"]
    assert with_driver["roles"]["device_plugin"]["kubegpu_device_plugin_restart_pod"] == "never"
    c = ctx("570.211.01", "1.19.1")
    c["nvidia"]["device_nodes"][1]["exists"] = False
    alone = plan_node(node("gpu-a", c))
    assert alone["findings"] == ["uvm.node_missing"] and not alone["reboot"]
    assert "kubegpu_device_plugin_restart_pod" not in alone["roles"]["device_plugin"]
