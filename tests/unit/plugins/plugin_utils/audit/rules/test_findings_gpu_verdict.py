# -*- coding: utf-8 -*-
"""The driver's own verdict first: gpu_recovery_action / gpu_reset_status decide what an Xid
calls for where the driver reports them (the Xid catalog is the fallback); unknown Xids are
reported, not hands-on; fatal NVSwitch SXids reboot; the monitoring findings' severities; and
what the remediation plan does with each."""
from __future__ import absolute_import, division, print_function

from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu import health as gpu_health
from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu import xid as gpu_xid
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit import evaluate as fd
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.remediation.plan import plan_node

from ansible_collections.kubegpu.fleet.tests.unit.plugins.plugin_utils.audit.rules.test_findings_gpu_hardware import (
    XID_48, _health, _nvidia, _only)

SXID_FATAL = "[6781753.400584] nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20034, Fatal, Link 48 LTSSM Fault Up"
SXID_NONFATAL = "[6781753.5] nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20001, Non-fatal, Link 02 TX Replay Error"
XID_300 = "[  900.0] n kernel: NVRM: Xid (PCI:0000:28:00): 300, pid=1, name=x, a future Xid"


def _with_driver_action(nv, index, action_text):
    g = nv["gpus"][index]
    g["health"] = dict(g["health"], recovery={"action": gpu_health.driver_action_text(action_text),
                                              "raw": action_text, "reset_required": None,
                                              "drain_and_reset_recommended": None})
    g["health_verdict"] = gpu_health.verdict(g["health"])
    return nv


def _audit(nv):
    return {"node": "n", "status": "audited", "findings": fd.evaluate_node({"nvidia": nv})}


def test_catalog_decides_on_a_driver_without_a_verdict(tmp_path):
    xid = _only(fd.evaluate_node({"nvidia": _nvidia(tmp_path, [0, 1, 2], log=[XID_48])}), "gpu.xid")
    g = xid["evidence"]["gpus"][0]
    assert (g["catalog_action"], g["driver_action"], g["action"]) == ("reset_gpu", None, "reset_gpu")
    assert xid["severity"] == "critical"


def test_driver_saying_none_overrides_the_catalog_reset(tmp_path):
    nv = _with_driver_action(_nvidia(tmp_path, [0, 1, 2], log=[XID_48]), 1, "None")
    found = fd.evaluate_node({"nvidia": nv})
    xid = _only(found, "gpu.xid")
    g = xid["evidence"]["gpus"][0]
    assert (g["catalog_action"], g["driver_action"], g["action"]) == ("reset_gpu", "none", "none")
    assert xid["evidence"]["action"] == "none" and xid["severity"] == "info"
    assert not [f for f in found if f["id"] == "gpu.recovery_action"]
    plan = plan_node(_audit(nv))
    assert plan["fix"] is False and plan["noted"] == ["gpu.xid"]


def test_driver_asking_for_a_reboot_reboots(tmp_path):
    nv = _with_driver_action(_nvidia(tmp_path, [0, 1, 2], log=[XID_48]), 1, "Node Reboot")
    found = fd.evaluate_node({"nvidia": nv})
    rec = _only(found, "gpu.recovery_action")
    assert rec["severity"] == "critical" and rec["evidence"]["action"] == "reboot"
    assert _only(found, "gpu.xid")["evidence"]["gpus"][0]["action"] == "reboot"
    plan = plan_node(_audit(nv))
    assert plan["reboot"] is True and plan["gpu_reset"] == []


def test_drain_p2p_is_a_warning_for_a_person_not_a_reboot(tmp_path):
    nv = _with_driver_action(_nvidia(tmp_path, [0, 1, 2]), 0, "Drain P2P")
    rec = _only(fd.evaluate_node({"nvidia": nv}), "gpu.recovery_action")
    assert rec["severity"] == "warning" and rec["evidence"]["action"] == "none"
    plan = plan_node(_audit(nv))
    assert plan["fix"] is False and "gpu.recovery_action" in plan["noted"]


def test_drain_and_reset_from_the_driver_resets_the_gpu(tmp_path):
    nv = _with_driver_action(_nvidia(tmp_path, [0, 1, 2]), 2, "Drain and Reset")
    rec = _only(fd.evaluate_node({"nvidia": nv}), "gpu.recovery_action")
    assert rec["severity"] == "critical" and rec["evidence"]["gpus"][0]["driver_action"] == "drain_and_reset"
    plan = plan_node(_audit(nv))
    assert plan["drain"] is True and plan["reboot"] is False and plan["gpu_reset"] == ["0000:38:00.0"]


def test_unknown_xid_is_reported_not_hands_on(tmp_path):
    found = fd.evaluate_node({"nvidia": _nvidia(tmp_path, [0, 1, 2], log=[XID_300])})
    xid = _only(found, "gpu.xid")
    assert xid["severity"] == "warning" and xid["evidence"]["action"] == "unknown"
    assert xid["evidence"]["hands_on"] is False and xid["evidence"]["gpus"][0]["unknown_xids"] == [300]
    plan = plan_node({"node": "n", "status": "audited", "findings": found})
    assert plan["cordon"] is False and plan["fix"] is False and plan["noted"] == ["gpu.xid"]


def test_noted_findings_are_left_not_unresolved_after_the_rollout(tmp_path):
    from ansible_collections.kubegpu.fleet.plugins.plugin_utils.remediation.verdict import final_verdict
    found = fd.evaluate_node({"nvidia": _nvidia(tmp_path, [0, 1, 2], log=[XID_300])})
    plan = plan_node({"node": "n", "status": "audited", "findings": found})
    report = {"nodes": [{"name": "n", "findings": [dict(f, node="n") for f in found]}]}
    verdict = final_verdict(report, "warning", {"n": plan})
    assert verdict["unresolved"] == [] and verdict["left_for_person"] == [
        {"node": "n", "id": "gpu.xid", "severity": "warning", "where": "n"}]


def test_fatal_sxid_reboots_nonfatal_is_noted(tmp_path):
    nv = _nvidia(tmp_path, [0, 1, 2])
    events, _stats = gpu_xid.parse_xid_events(SXID_NONFATAL)
    nv["xid"]["nvswitches"] = gpu_xid.aggregate_sxids(events)
    nv["xid"]["sxid_action"] = "ignore"
    sx = _only(fd.evaluate_node({"nvidia": nv}), "nvswitch.sxid")
    assert sx["severity"] == "info" and sx["evidence"]["switches"][0]["non_fatal"] == [20001]
    assert plan_node(_audit(nv))["fix"] is False
    events, _stats = gpu_xid.parse_xid_events(SXID_FATAL + "\n" + SXID_NONFATAL)
    nv["xid"]["nvswitches"] = gpu_xid.aggregate_sxids(events)
    nv["xid"]["sxid_action"] = "reboot"
    sx = _only(fd.evaluate_node({"nvidia": nv}), "nvswitch.sxid")
    assert sx["severity"] == "critical" and sx["remediation"]["role"] == "kubegpu.fleet.rolling_reboot"
    plan = plan_node(_audit(nv))
    assert plan["reboot"] is True and plan["drain"] is True


def test_monitoring_findings_are_warnings_left_for_a_person(tmp_path):
    sick = dict(_health(), remapped_rows=dict(_health()["remapped_rows"],
                                              histogram={"max": 10, "high": 0, "partial": 0, "low": 0, "none": 1}),
                clocks_event_reasons=["hw_thermal_slowdown"],
                pcie={"link_gen_current": 4, "link_gen_max": 4, "link_width_current": 16, "link_width_max": 16,
                      "replay_counter": 100000, "replay_rollover_counter": 0})
    nv = _nvidia(tmp_path, [0, 1, 2], health={0: sick})
    nv["gpus"][0]["health_verdict"] = gpu_health.verdict(sick, uptime_s=600)
    found = fd.evaluate_node({"nvidia": nv})
    ids = dict((f["id"], f["severity"]) for f in found)
    assert ids == {"gpu.row_remap_exhausting": "warning", "gpu.clocks_slowdown": "warning",
                   "gpu.pcie_degraded": "warning"}
    pcie = _only(found, "gpu.pcie_degraded")["evidence"]["gpus"][0]
    # 100000 replays in 10 minutes; DCGM's limit for gen 4 x16 is ceil(16/1000*60*16) = 16 a minute
    assert pcie["pcie"]["replay_threshold_per_minute"] == 16 and pcie["pcie"]["replays_per_minute"] == 10000.0
    plan = plan_node(_audit(nv))
    assert plan["fix"] is False and plan["cordon"] is False
    assert plan["manual"] == ["gpu.clocks_slowdown", "gpu.pcie_degraded", "gpu.row_remap_exhausting"]
