# -*- coding: utf-8 -*-
"""gpu.reset.plan_reset on inventories as nvidia-smi describes them: which GPUs one nvidia-smi -r
resets, or why it refuses, as nvidia-smi(1) (-r/--gpu-reset) states the preconditions:

* NVLink peers are reset together before Ampere, and on an NVSwitch system without Fabric
  Manager running whatever the architecture (the page's table and its paragraph; its sentence on
  Hopper dropping the Fabric Manager dependency is not relied on); from Ampere on a GPU on a
  direct-connected NVLink system, or on an NVSwitch system with Fabric Manager, is reset alone;
* when peers are reset together ("individual GPU reset is not feasible") no compute application
  may run on any other GPU of the system."""
from __future__ import absolute_import, division, print_function

import pytest

from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu.reset import plan_reset

BUSES = ["0000:18:00.0", "0000:28:00.0", "0000:38:00.0", "0000:48:00.0"]


def inventory(arch, processes=None, linked=(0, 1, 2)):
    gpus, nvlink = {}, {}
    for i, bus in enumerate(BUSES):
        gpus[bus] = {"bus_id": bus, "uuid": "GPU-%d" % i, "minor": i, "architecture": arch,
                     "mig_current": "disabled", "mig_pending": "disabled", "mig_devices": 0,
                     "processes": (processes or {}).get(i, [])}
        nvlink["GPU-%d" % i] = {"active": i in linked}
    return {"gpus": gpus, "unopened": [], "error": None}, nvlink


@pytest.mark.parametrize("arch, nvswitches, fabric_manager, together", [
    ("Volta", False, False, True),        # before Ampere: peers always together
    ("Volta", True, True, True),
    ("Ampere", False, False, False),      # direct-connected NVLink: alone
    ("Ampere", True, True, False),        # NVSwitch with Fabric Manager: alone
    ("Ampere", True, False, True),        # NVSwitch without Fabric Manager: together
    ("Hopper", True, False, True),        # the same on Hopper (the stricter reading)
    ("Hopper", True, True, False),
    ("Blackwell", False, False, False),
])
def test_which_gpus_one_reset_takes(arch, nvswitches, fabric_manager, together):
    inv, nvlink = inventory(arch)
    out = plan_reset([BUSES[0]], inv, {}, nvlink, nvswitches, fabric_manager)
    assert out["refused"] is None
    if together:
        assert out["reset"] == BUSES[:3] and "every GPU with an active NVLink" in out["group"]
    else:
        assert out["reset"] == [BUSES[0]] and out["group"] is None


def test_a_gpu_without_active_nvlink_is_reset_alone_even_without_fabric_manager():
    inv, nvlink = inventory("Hopper")
    out = plan_reset([BUSES[3]], inv, {}, nvlink, True, False)
    assert out["reset"] == [BUSES[3]] and out["group"] is None


def test_a_group_reset_needs_every_gpu_of_the_node_free_of_compute_processes():
    inv, nvlink = inventory("Ampere", processes={3: [4711]})
    out = plan_reset([BUSES[0]], inv, {}, nvlink, True, False)
    assert out["reset"] == [] and out["refused"] == (
        "GPU 0000:48:00.0 runs compute processes (pids 4711): with NVLink peers reset together, nvidia-smi -r "
        "needs no compute application on any GPU of the node")
    # a GPU reset alone only needs itself free
    out = plan_reset([BUSES[0]], inv, {}, nvlink, True, True)
    assert out["refused"] is None and out["reset"] == [BUSES[0]]
