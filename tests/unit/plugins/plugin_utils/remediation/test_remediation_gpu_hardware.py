# -*- coding: utf-8 -*-
"""GPU hardware findings in the rollout: reboot reasons (reboot_need.gpu_reasons, decide) and
the remediation plan (drain + reboot for a pending row remap or a reboot/reset Xid; cordon and
leave for a person for RMA, a GPU off the bus or an Xid NVIDIA says to investigate)."""
from __future__ import absolute_import, division, print_function


from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit import evaluate as fd
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.rollout import reboot_need
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.remediation.plan import plan_node

from ansible_collections.kubegpu.fleet.tests.unit.plugins.plugin_utils.audit.rules.test_findings_gpu_hardware import (
    XID_13, XID_48, XID_74, XID_79, _health, _nvidia)


def _audit(nv, **kw):
    return {"node": "n", "status": "audited", "findings": fd.evaluate_node({"nvidia": nv}, **kw)}


def test_pending_row_remap_drains_and_resets_the_gpu_not_the_node(tmp_path):
    audit = _audit(_nvidia(tmp_path, [0, 1, 2], health={1: _health(pending=True, vol=1)}))
    plan = plan_node(audit)
    assert plan["fix"] is True and plan["drain"] is True and plan["reboot"] is False
    assert plan["findings"] == ["gpu.reset_required"] and plan["roles"] == {}
    assert plan["manual"] == ["gpu.ecc_uncorrectable"] and plan["cordon"] is False
    assert plan["gpu_reset"] == ["0000:28:00.0"]
    assert plan["gpu_reset_reasons"] == [
        "gpu.reset_required 00000000:28:00.0: row remapping pending: the spare row takes effect at the next "
        "GPU reset"]
    assert plan["reason"].startswith("drain; reset GPU 0000:28:00.0 (reboot if refused or failed)")
    # A reboot planned anyway (a driver version mismatch) resets every GPU: no separate reset,
    # the GPU reasons join the reboot's.
    audit["findings"].append({"id": "driver.version_mismatch", "evidence": {}})
    plan = plan_node(audit)
    assert plan["reboot"] is True and plan["gpu_reset"] == []
    assert plan["reboot_reasons"][0].startswith("GPU 1 (00000000:28:00.0): row remapping pending")
    need = reboot_need.decide(mode="needed", required=True,
                              required_reasons=["audit: " + ", ".join(plan["findings"])] + plan["reboot_reasons"],
                              check_kernel=False, check_driver=False)
    assert need["reboot"] is True and need["reasons"][1].startswith("GPU 1 (00000000:28:00.0): row remapping")


def test_reset_xid_resets_the_gpu_application_xid_is_only_noted(tmp_path):
    plan = plan_node(_audit(_nvidia(tmp_path, [0, 1, 2], log=[XID_13, XID_48])))
    assert plan["reboot"] is False and plan["drain"] is True and plan["findings"] == ["gpu.xid"]
    assert plan["gpu_reset"] == ["0000:28:00.0"] and plan["gpu_reset_reasons"] == ["gpu.xid 0000:28:00.0: Xid 48"]
    plan = plan_node(_audit(_nvidia(tmp_path / "b", [0, 1, 2], log=[XID_13])))
    assert plan["fix"] is False and plan["noted"] == ["gpu.xid"] and plan["manual"] == []
    assert plan["reason"] == "nothing to fix"


def test_rma_gpu_cordons_the_node_and_holds_back_other_fixes(tmp_path):
    nv = _nvidia(tmp_path, [0, 1, 2], health={0: _health(failure=True), 1: _health(pending=True)})
    plan = plan_node(_audit(nv))
    assert plan["cordon"] is True and plan["fix"] is False and plan["reboot"] is False
    assert plan["drain"] is False and plan["findings"] == []
    assert plan["hands_on"] == ["gpu.rma: replace GPU 0 (00000000:18:00.0)"]
    assert "gpu.rma" in plan["manual"]
    assert plan["reason"].startswith("cordoned, left for a person (hands-on): gpu.rma: replace GPU 0")
    assert plan["reason"].endswith("fixes held back: gpu.reset_required")


def test_gpu_off_the_bus_and_investigate_xid_are_hands_on(tmp_path):
    plan = plan_node(_audit(_nvidia(tmp_path, [0, 1], log=[XID_79])))
    assert plan["cordon"] is True and plan["fix"] is False
    assert plan["hands_on"][0].startswith("gpu.missing: GPU 0000:38:00.0: on the PCI bus")
    plan = plan_node(_audit(_nvidia(tmp_path / "b", [0, 1, 2], log=[XID_74])))
    assert plan["cordon"] is True
    assert plan["hands_on"] == ["gpu.xid: follow NVIDIA's workflow for Xid 74 on 0000:18:00.0"]


def test_skipped_hardware_findings_are_not_acted_on(tmp_path):
    nv = _nvidia(tmp_path, [0, 1, 2], health={0: _health(failure=True)})
    plan = plan_node(_audit(nv), skip_findings=("gpu.rma", "gpu.ecc_uncorrectable"))
    assert plan["cordon"] is False and plan["skipped"] == ["gpu.rma"] and plan["fix"] is False


def test_gpu_reasons_ignore_other_and_malformed_findings():
    assert reboot_need.gpu_reasons(None) == []
    assert reboot_need.gpu_reasons([{"id": "gpu.reset_required", "evidence": "x"},
                                    {"id": "gpu.xid", "evidence": {"gpus": ["x", {"action": "ignore"}]}},
                                    {"id": "driver.known_bad", "evidence": {"gpus": [{"gpu": "g"}]}},
                                    "junk"]) == []
    assert reboot_need.gpu_reasons([{"id": "gpu.reset_required", "evidence": {"gpus": [{"bus_id": "b"}]}}]) == \
        ["b: GPU reset required"]
