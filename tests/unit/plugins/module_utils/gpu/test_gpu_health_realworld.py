# -*- coding: utf-8 -*-
"""health.parse_health_xml and the verdict on nvidia-smi -q -x documents real drivers wrote
(R418 to R595, in ../shared/reference/realworld-gpu-health/smi/ beside the repository; sources in
its SOURCES.md). Skipped, with a message, where the folder is absent."""
from __future__ import absolute_import, division, print_function

import glob
import os

import pytest

from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu import health as gpu_health

HERE = os.path.dirname(os.path.abspath(__file__))
REF = os.path.normpath(os.path.join(HERE, "..", "..", "..", "..", "..", "..", "shared", "reference",
                                    "realworld-gpu-health"))

pytestmark = pytest.mark.skipif(
    not os.path.isdir(REF), reason="real-world nvidia-smi documents not present at %s" % REF)


def _doc(rel):
    with open(os.path.join(REF, rel)) as f:
        return gpu_health.parse_health_xml(f.read())


def test_every_real_document_parses_and_healthy_gpus_have_no_finding():
    seen = 0
    for path in sorted(glob.glob(os.path.join(REF, "smi", "*.xml"))):
        name = os.path.basename(path)
        for gpu in _doc(os.path.join("smi", name))["gpus"]:
            seen += 1
            findings = gpu_health.verdict(gpu, uptime_s=3600)["findings"]
            if name == "telegraf-tesla-t4-515.105.01.xml":
                # a busy (not idle) T4 whose link trained x8 of its x16: reported, a warning
                assert findings == ["gpu.pcie_degraded"], name
            else:
                assert findings == [], name
    assert seen >= 13


def test_idle_gpus_at_a_low_link_speed_are_not_judged():
    """Real idle consumer GPUs sit at gen 1 (RTX 3060 laptop: gen 1 x8 of gen 4 x16): power
    saving, not degradation."""
    (g,) = _doc("smi/netdata-rtx3060-laptop-515.65.01.xml")["gpus"]
    assert g["pcie"]["link_gen_current"] == 1 and g["clocks_event_reasons"] == ["gpu_idle"]
    assert gpu_health.verdict(g)["pcie"]["idle"] is True


def test_r570_deprecated_reset_status_and_r595_repair_fields():
    (g,) = _doc("smi/telegraf-rtx3060-570.124.04-v12.xml")["gpus"]
    # "Requested functionality has been deprecated" is no answer; the recovery action is
    assert g["recovery"] == {"action": "none", "raw": "None", "reset_required": None,
                             "drain_and_reset_recommended": None}
    assert gpu_health.verdict(g)["recovery"]["source"] == "gpu_recovery_action"
    (g,) = _doc("smi/telegraf-rtx4000-sff-ada-595.84-v13.xml")["gpus"]
    assert g["repair"]["channel_repair_pending"] is False and g["repair"]["tpc_repair_pending"] is False
    assert g["remapped_rows"]["histogram"] == {"max": 96, "high": 0, "partial": 0, "low": 0, "none": 0}


def test_the_transcribed_a10_with_a_pending_remap_needs_a_reset():
    (g,) = _doc("derived/gpud-a10-535.129.03-remap-pending.xml")["gpus"]
    v = gpu_health.verdict(g)
    assert v["findings"] == ["gpu.reset_required"] and v["reset_required"] is True
    # R535's gpu_reset_status says "Reset Required: No": the driver's own answer, and no recovery
    assert v["recovery"] == {"driver_action": "none", "source": "gpu_reset_status", "action": "none", "raw": None}
