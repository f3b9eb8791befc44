# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node-side parsers on what a real NVIDIA GPU node wrote, and on this machine's real sysfs.

tests/fixtures/real-gpu/h100-580.159.04/ was captured by bench/real_gpu.py on one NVIDIA H100 80GB
HBM3 (PCIe passthrough into a VM, NVIDIA's open kernel module 580.159.04, kernel 6.18.44): the
driver's ``nvidia-smi -q -x`` and ``-L`` documents, the procfs files the probe reads, the PCI
attributes of the GPU in sysfs, and gpu_facts' result with each backend. Two defects were found
on that machine and are pinned here: a kernel built without CONFIG_MODULE_UNLOAD prints ``-`` as
the refcount in /proc/modules (the NVIDIA modules read as not loaded), and sysfs reports every
attribute as 4096 bytes (the PCI scan refused every ``vendor`` file, so a GPU missing from the
driver could never be seen on a real node).
"""
from __future__ import absolute_import, division, print_function

import json
import os

import pytest

from ansible_collections.kubegpu.fleet.plugins.module_utils._common import procfs
from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu import facts as gpu_facts
from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu import health as gpu_health
from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu import pci as gpu_pci
from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu import smi as gpu_smi

HERE = os.path.dirname(os.path.abspath(__file__))
H100 = os.path.join(HERE, "..", "..", "..", "..", "fixtures", "real-gpu", "h100-580.159.04")
UUID = "GPU-06e21e2d-aece-704f-9ce6-1d407b3320d5"


def _fixture(name):
    with open(os.path.join(H100, name), encoding="utf-8") as f:
        return f.read()


@pytest.fixture(scope="module")
def node_state():
    return json.loads(_fixture("node-state.json"))


def test_nvidia_smi_documents_of_a_real_h100():
    doc = gpu_smi.parse_smi_xml(_fixture("nvidia-smi-q-x.xml"))
    assert (doc["driver_version"], doc["cuda_driver_version"], doc["attached_gpus"]) == ("580.159.04", "13.0", 1)
    (gpu,) = doc["gpus"]
    assert gpu == {"uuid": UUID, "name": "NVIDIA H100 80GB HBM3", "minor_number": 0,
                   "pci_bus_id": "00000000:00:06.0", "memory_total_mib": 81559,
                   "mig_mode": {"current": "disabled", "pending": "disabled"}, "mig_devices": [],
                   "virtualization_mode": "passthrough"}
    assert gpu_smi.parse_smi_list(_fixture("nvidia-smi-L.txt")) == [
        {"index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": UUID, "mig_devices": []}]


def test_health_of_a_real_h100_is_clean_in_both_backends():
    doc = gpu_health.parse_health_xml(_fixture("nvidia-smi-q-x.xml"))
    assert doc["problems"] == [] and doc["gpu_elements"] == doc["attached_gpus"] == 1
    (smi_health,) = doc["gpus"]
    assert smi_health["remapped_rows"] == {"supported": True, "correctable": 0, "uncorrectable": 0,
                                           "pending": False, "failure": False,
                                           "histogram": {"max": 2560, "high": 0, "partial": 0, "low": 0,
                                                         "none": 0}}
    # The R570+ elements of a real R580 document: the driver's verdict (None; R580 leaves out the
    # deprecated gpu_reset_status), the R590-era repair fields, the PCIe link, clock reasons.
    assert smi_health["recovery"] == {"action": "none", "raw": "None", "reset_required": None,
                                      "drain_and_reset_recommended": None}
    assert smi_health["repair"] == {"channel_repair_pending": False, "tpc_repair_pending": False,
                                    "unrepairable_memory": False}
    assert smi_health["pcie"] == {"link_gen_current": 5, "link_gen_max": 5, "link_width_current": 16,
                                  "link_width_max": 16, "replay_counter": 0, "replay_rollover_counter": 0}
    assert smi_health["clocks_event_reasons"] == ["gpu_idle"] and smi_health["fabric"] is None
    assert smi_health["retired_pages"]["supported"] is False  # Hopper remaps rows, retires no pages
    verdict = gpu_health.verdict(smi_health)
    assert (verdict["findings"], verdict["reset_required"], verdict["rma"]) == ([], False, False)

    # What NVML said on the same machine (the module run with backend=nvml): the same counts.
    nvml = json.loads(_fixture("gpu_facts-nvml.json"))["ansible_facts"]["nvidia"]
    (nvml_gpu,) = nvml["gpus"]
    # (the capture predates the histogram read: the counts are compared)
    for key in ("remapped_rows", "retired_pages"):
        assert nvml_gpu["health"][key] == dict((k, v) for k, v in smi_health[key].items()
                                               if k in nvml_gpu["health"][key]), key
    for scope in ("volatile", "aggregate"):
        for count in ("uncorrectable", "dram_uncorrectable", "sram_uncorrectable", "correctable"):
            assert nvml_gpu["health"]["ecc"][scope][count] == smi_health["ecc"][scope][count], (scope, count)


def test_both_backends_agree_on_a_real_h100():
    results = dict((b, json.loads(_fixture("gpu_facts-%s.json" % b))["ansible_facts"]["nvidia"])
                   for b in ("nvml", "nvidia_smi"))
    for facts in results.values():
        assert facts["probe"]["status"] == "ok"
        assert facts["device_ids"] == [UUID]
        assert facts["kernel_modules"]["nvidia"]["loaded"] and facts["kernel_modules"]["nvidia_uvm"]["loaded"]
        assert facts["presence"]["ok"], facts["presence"]
        assert [g["bus_id"] for g in facts["pci"]["gpus"]] == ["0000:00:06.0"]
    keys = ("uuid", "name", "pci_bus_id", "memory_total_mib", "mig_mode", "mig_devices", "minor_number",
            "health_verdict")
    assert [dict((k, g[k]) for k in keys) for g in results["nvml"]["gpus"]] == \
        [dict((k, g[k]) for k in keys) for g in results["nvidia_smi"]["gpus"]]
    for key in ("driver_version", "kernel_module_version", "mig_enabled", "mig_mixed", "device_nodes"):
        assert results["nvml"][key] == results["nvidia_smi"][key], key


def test_proc_modules_of_a_kernel_that_cannot_unload_modules(node_state):
    text = node_state["files"]["proc/modules"]
    assert "nvidia 14299136 - - Live" in text
    modules = gpu_facts.kernel_modules(procfs.parse_proc_modules(text))
    assert modules["nvidia"] == {"loaded": True, "refcount": None, "state": "Live"}
    assert modules["nvidia_uvm"] == {"loaded": True, "refcount": None, "state": "Live"}
    assert modules["nvidia_modeset"]["loaded"] is False
    # A kernel that can unload modules prints a count; a malformed count is still no module.
    parsed = procfs.parse_proc_modules("nvidia 14299136 12 nvidia_uvm, Live 0xffff (PO)\n"
                                       "nvidia_uvm 1830912 \u00b2 - Live 0xffff (O)\n")
    assert parsed == {"nvidia": {"size": 14299136, "refcount": 12, "state": "Live"}}


def test_gpu_information_of_a_real_h100(node_state):
    info = gpu_facts.parse_gpu_information(
        node_state["files"]["proc/driver/nvidia/gpus/0000:00:06.0/information"])
    assert info == {"name": "NVIDIA H100 80GB HBM3", "uuid": UUID, "minor_number": 0,
                    "pci_bus_id": "0000:00:06.0"}
    assert procfs.parse_nvidia_version(node_state["files"]["proc/driver/nvidia/version"]) == "580.159.04"


def test_pci_scan_of_the_captured_h100_attributes(tmp_path, node_state):
    devices = tmp_path / "bus" / "pci" / "devices"
    for bus_id, attrs in node_state["sysfs_pci"].items():
        entry = devices / bus_id
        entry.mkdir(parents=True)
        for name in ("vendor", "device", "class"):
            (entry / name).write_text(attrs[name] + "\n")
    scan = gpu_pci.scan_pci(str(tmp_path))
    assert scan["errors"] == []
    assert [(g["bus_id"], g["kind"], g["device_id"]) for g in scan["gpus"]] == [("0000:00:06.0", "3d", "0x2330")]


def test_pci_scan_reads_this_machines_real_sysfs():
    """Real sysfs attributes report st_size 4096 whatever they hold: every one must be read."""
    devdir = "/sys/bus/pci/devices"
    try:
        names = os.listdir(devdir)
    except OSError as e:
        pytest.skip("no %s on this machine: %s" % (devdir, e))
    if not names:
        pytest.skip("%s lists no PCI device on this machine" % devdir)
    st = os.stat(os.path.join(devdir, sorted(names)[0], "vendor"))
    scan = gpu_pci.scan_pci("/sys")
    assert scan["available"] is True
    assert scan["errors"] == [], "st_size %d: %s" % (st.st_size, scan["errors"][:3])
