"""Remediation plans from real audit findings (findings produced by the audit rules)."""
import pytest

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit import evaluate as fd
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.finding_types import TYPES
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.remediation.plan import plan_node

NV_OK = {"present": True, "probe": {"status": "ok", "backend": "nvml"}, "driver_version": "570.172.08",
         "kernel_module_version": "570.172.08", "mig_mixed": False,
         "device_nodes": [{"name": "nvidiactl", "path": "/dev/nvidiactl", "exists": True, "dev_char_link": True},
                          {"name": "nvidia-uvm", "path": "/dev/nvidia-uvm", "exists": True, "dev_char_link": True}],
         "kernel_modules": {"nvidia": {"loaded": True}, "nvidia_uvm": {"loaded": True}}}
R570_GUARD = {"verdict": "known_bad", "branch": 570, "driver_version": "570.158.01", "reboot_pending": False,
              "recommended_version": "570.172.08", "matches": [{"id": "nvml-r570-mig-hang"}],
              "compute_utils": {"checked": True, "installed": True, "matches_driver": True}}


def audit(ctx, **kw):
    return {"node": "n", "status": "audited", "findings": fd.evaluate_node(ctx, **kw)}


def test_every_finding_is_routed_or_left_for_a_person():
    routed = set(fid for fid, t in TYPES.items() if t.automatic)
    manual = set(fid for fid, t in TYPES.items() if t.manual)
    assert routed | manual == set(TYPES) - {"cluster.device_plugin_outdated"}
    assert set(fid for fid, t in TYPES.items() if t.drain) <= routed


def test_healthy_node_has_nothing_to_do():
    plan = plan_node(audit({"nvidia": NV_OK}))
    assert plan["fix"] is False and plan["roles"] == {} and plan["reason"] == "nothing to fix"


def test_r570_node_driver_drain_reboot_wedged():
    nv = dict(NV_OK, driver_version="570.158.01", kernel_module_version="570.158.01",
              probe={"status": "hung", "backend": "nvml", "elapsed": 10.0})
    api = {"pending_pods": [{"namespace": "ml", "name": "train-late", "pending_seconds": 900,
                             "kubelet_events": []}]}
    plan = plan_node(audit({"nvidia": nv, "driver_guard": R570_GUARD, "api": api}))
    assert plan["findings"] == ["driver.known_bad", "kubelet.admission_blocked", "nvml.hung"]
    assert plan["roles"]["driver"] == {"kubegpu_driver_version": "570.172.08"}
    assert plan["drain"] and plan["wedged"] and plan["reboot"]
    # the reboot restarts the kubelet: no separate restart before it
    assert "kubegpu_kubelet_restart" not in plan["roles"]["kubelet"]


def test_admission_blocked_without_a_reboot_restarts_kubelet():
    api = {"pending_pods": [{"namespace": "ml", "name": "p", "pending_seconds": 900, "kubelet_events": []}]}
    plan = plan_node(audit({"nvidia": NV_OK, "api": api}))
    assert plan["roles"] == {"kubelet": {"kubegpu_kubelet_restart": True}}
    assert plan["drain"] and plan["wedged"] and not plan["reboot"]


def test_memory_reservation_only_is_not_disruptive():
    kl = {"memory": {"reserved_total_bytes": 0, "recommended_reserved_bytes": 5 << 30}, "node_memory_bytes": 62 << 30}
    plan = plan_node(audit({"kubelet": kl, "nvidia": NV_OK}))
    assert plan["findings"] == ["kubelet.memory_reservation"]
    assert plan["roles"] == {"kubelet": {}} and not plan["drain"] and not plan["reboot"]


def test_stale_checkpoint_drains_and_syncs():
    plan = plan_node(audit({"checkpoint": {"stale": True, "stale_ids": ["GPU-old"]}}))
    assert plan["roles"] == {"kubelet": {"kubegpu_kubelet_sync_checkpoint": True}}
    assert plan["drain"] and not plan["wedged"] and not plan["reboot"]


def test_uvm_late_node_restarts_plugin_and_drains_broken_pods():
    nv = dict(NV_OK, device_nodes=[{"name": "nvidia-uvm", "exists": True, "dev_char_link": False,
                                    "path": "/dev/nvidia-uvm"}])
    cg = {"containers": [{"gpu": True, "pod_uid": "u1", "container_id": "c1",
                          "missing": [{"name": "nvidia-uvm", "required": True}]}]}
    plan = plan_node(audit({"nvidia": nv, "cgroups": cg, "kubelet": {"cgroup_driver": "systemd"}}))
    assert plan["findings"] == ["cgroup.devices_missing", "devchar.symlinks_missing"]
    assert set(plan["roles"]) == {"device_plugin"} and plan["drain"] and not plan["reboot"]


def test_version_mismatch_reboots_without_a_role():
    nv = dict(NV_OK, probe={"status": "error", "error": "NVML_ERROR_LIB_RM_VERSION_MISMATCH"})
    plan = plan_node(audit({"nvidia": nv, "driver_guard": {"verdict": "ok", "reboot_pending": True}}))
    assert plan["findings"] == ["driver.version_mismatch"]
    assert plan["roles"] == {} and plan["reboot"] and plan["drain"] and plan["fix"]


def test_manual_and_skipped_findings():
    a = audit({"checkpoint": {"stale": True}, "errors": {"cgroup_devices": "denied"},
               "api": {"ready": False}})
    plan = plan_node(a, skip_findings=["checkpoint.stale"])
    assert plan["manual"] == ["audit.module_failed", "node.not_ready"]
    assert plan["skipped"] == ["checkpoint.stale"]
    assert plan["fix"] is False and "left for a person" in plan["reason"]


@pytest.mark.parametrize("status", ["unreachable", "failed", None])
def test_node_not_audited_is_never_touched(status):
    plan = plan_node({"status": status, "findings": [{"id": "checkpoint.stale"}]})
    assert plan["fix"] is False and plan["roles"] == {} and "not audited" in plan["reason"]
