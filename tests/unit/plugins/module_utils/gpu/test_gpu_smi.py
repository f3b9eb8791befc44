# -*- coding: utf-8 -*-
"""Unit tests for the nvidia-smi output parsers (gpu_smi.py)."""
from __future__ import absolute_import, division, print_function

import pytest
from hypothesis import given, settings, strategies as st

from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu.smi import (
    SmiParseError, error_name, merge_smi, mig_mode_value, parse_handle_errors, parse_smi_list,
    parse_smi_xml, smi_error, virtualization_mode_value)

# Shaped like real `nvidia-smi -q -x` output (nvsmi_device_v12), trimmed to what matters.
XML = """<?xml version="1.0" ?>
<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">
<nvidia_smi_log>
\t<timestamp>Tue Jul 22 10:00:00 2025</timestamp>
\t<driver_version>570.172.08</driver_version>
\t<cuda_version>12.8</cuda_version>
\t<attached_gpus>2</attached_gpus>
\t<gpu id="00000000:18:00.0">
\t\t<product_name>NVIDIA H100 80GB HBM3</product_name>
\t\t<mig_mode>
\t\t\t<current_mig>Enabled</current_mig>
\t\t\t<pending_mig>Disabled</pending_mig>
\t\t</mig_mode>
\t\t<mig_devices>
\t\t\t<mig_device>
\t\t\t\t<index>0</index>
\t\t\t\t<gpu_instance_id>7</gpu_instance_id>
\t\t\t\t<compute_instance_id>0</compute_instance_id>
\t\t\t\t<device_attributes>
\t\t\t\t\t<shared>
\t\t\t\t\t\t<multiprocessor_count>16</multiprocessor_count>
\t\t\t\t\t</shared>
\t\t\t\t</device_attributes>
\t\t\t\t<fb_memory_usage>
\t\t\t\t\t<total>9984 MiB</total>
\t\t\t\t</fb_memory_usage>
\t\t\t</mig_device>
\t\t\t<mig_device>
\t\t\t\t<index>1</index>
\t\t\t\t<gpu_instance_id>2</gpu_instance_id>
\t\t\t\t<compute_instance_id>0</compute_instance_id>
\t\t\t\t<fb_memory_usage>
\t\t\t\t\t<total>N/A</total>
\t\t\t\t</fb_memory_usage>
\t\t\t</mig_device>
\t\t</mig_devices>
\t\t<serial>1652320001000</serial>
\t\t<uuid>GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77</uuid>
\t\t<minor_number>3</minor_number>
\t\t<pci>
\t\t\t<pci_bus>18</pci_bus>
\t\t\t<pci_bus_id>00000000:18:00.0</pci_bus_id>
\t\t</pci>
\t\t<fb_memory_usage>
\t\t\t<total>81559 MiB</total>
\t\t</fb_memory_usage>
\t</gpu>
\t<gpu id="00000000:3B:00.0">
\t\t<product_name>Tesla T4</product_name>
\t\t<mig_mode>
\t\t\t<current_mig>N/A</current_mig>
\t\t\t<pending_mig>N/A</pending_mig>
\t\t</mig_mode>
\t\t<mig_devices>
\t\t\tNone
\t\t</mig_devices>
\t\t<uuid>Unknown Error</uuid>
\t\t<minor_number>N/A</minor_number>
\t\t<pci>
\t\t\t<pci_bus_id>00000000:3B:00.0</pci_bus_id>
\t\t</pci>
\t</gpu>
</nvidia_smi_log>
"""

LISTING = """GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77)
  MIG 1g.10gb     Device  0: (UUID: MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f)
  MIG 3g.40gb     Device  1: (UUID: MIG-cba663e8-9bed-5b25-b243-5985ef7c9beb)
GPU 1: Tesla T4 (UUID: GPU-0de39361-0b4b-e773-281b-837a713951d3)
"""


def test_parse_xml_versions_and_gpus():
    facts = parse_smi_xml(XML)
    assert facts["driver_version"] == "570.172.08"
    assert facts["cuda_driver_version"] == "12.8"
    assert facts["attached_gpus"] == 2
    h100, t4 = facts["gpus"]
    assert h100["uuid"] == "GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77"
    assert h100["name"] == "NVIDIA H100 80GB HBM3"
    assert h100["minor_number"] == 3
    assert h100["pci_bus_id"] == "00000000:18:00.0"
    assert h100["memory_total_mib"] == 81559
    assert h100["mig_mode"] == {"current": "enabled", "pending": "disabled"}
    assert h100["mig_devices"] == [
        {"index": 0, "gpu_instance_id": 7, "compute_instance_id": 0, "multiprocessor_count": 16,
         "memory_total_mib": 9984},
        {"index": 1, "gpu_instance_id": 2, "compute_instance_id": 0, "multiprocessor_count": None,
         "memory_total_mib": None},
    ]
    # "None" text in <mig_devices>, N/A values and error text in place of a UUID.
    assert t4["mig_mode"] == {"current": "unsupported", "pending": "unsupported"}
    assert t4["mig_devices"] == []
    assert t4["uuid"] is None
    assert t4["minor_number"] is None


def test_parse_xml_without_document_or_truncated():
    with pytest.raises(SmiParseError, match="no <nvidia_smi_log>"):
        parse_smi_xml("Failed to initialize NVML: Driver/library version mismatch\n")
    with pytest.raises(SmiParseError, match="truncated"):
        parse_smi_xml(XML[:XML.index("</nvidia_smi_log>")])
    with pytest.raises(SmiParseError, match="cannot parse"):
        parse_smi_xml("<nvidia_smi_log><gpu></nvidia_smi_log>")


def test_parse_xml_tolerates_leading_noise():
    facts = parse_smi_xml("WARNING: infoROM is corrupted at gpu 0000:18:00.0\n" + XML)
    assert len(facts["gpus"]) == 2


def test_mig_mode_value():
    assert mig_mode_value("Enabled") == "enabled"
    assert mig_mode_value(" Disabled ") == "disabled"
    assert mig_mode_value("N/A") == "unsupported"
    assert mig_mode_value(None) == "unsupported"
    assert mig_mode_value("GPU is lost") == "unknown"


def test_parse_list():
    gpus = parse_smi_list("No devices were found? no\n" + LISTING)
    assert [g["index"] for g in gpus] == [0, 1]
    assert gpus[0]["name"] == "NVIDIA H100 80GB HBM3"
    assert gpus[0]["mig_devices"] == [
        {"index": 0, "profile": "1g.10gb", "uuid": "MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f"},
        {"index": 1, "profile": "3g.40gb", "uuid": "MIG-cba663e8-9bed-5b25-b243-5985ef7c9beb"},
    ]
    assert gpus[1]["mig_devices"] == []


def test_parse_list_legacy_mig_uuid():
    gpus = parse_smi_list("GPU 0: A100-SXM4-40GB (UUID: GPU-11111111-2222-3333-4444-555555555555)\n"
                          "  MIG 1g.5gb Device 0: (UUID: MIG-GPU-11111111-2222-3333-4444-555555555555/7/0)\n")
    assert gpus[0]["mig_devices"][0]["uuid"] == "MIG-GPU-11111111-2222-3333-4444-555555555555/7/0"


def test_handle_errors_index_and_pci_forms():
    errs = parse_handle_errors(
        "Unable to determine the device handle for GPU1: GPU is lost\n"
        "Unable to determine the device handle for gpu 0000:3B:00.0: Unknown Error\n"
        "unrelated line\n")
    assert errs == [{"gpu": 1, "pci_bus_id": None, "message": "GPU is lost"},
                    {"gpu": None, "pci_bus_id": "0000:3B:00.0", "message": "Unknown Error"}]


@pytest.mark.parametrize("rc,name", [
    (9, "NVML_ERROR_DRIVER_NOT_LOADED"), (12, "NVML_ERROR_LIBRARY_NOT_FOUND"),
    (15, "NVML_ERROR_GPU_IS_LOST"), (18, "NVML_ERROR_LIB_RM_VERSION_MISMATCH"),
    (255, "NVML_ERROR_UNKNOWN")])
def test_smi_error_maps_exit_status_to_nvml_name(rc, name):
    err = smi_error(rc, "\nFailed to initialize NVML: whatever\nmore\n")
    assert err == {"code": name, "message": "Failed to initialize NVML: whatever"}


def test_smi_error_signal_and_unknown_status():
    assert smi_error(-9, "")["message"] == "nvidia-smi killed by signal 9"
    assert smi_error(77, "") == {"code": None, "message": "nvidia-smi exited with status 77"}
    assert error_name(1234) == "NVML_ERROR_1234"
    assert error_name(None) is None


def test_merge_joins_by_uuid_and_mig_index():
    gpus = merge_smi(parse_smi_xml(XML), parse_smi_list(LISTING))
    h100 = gpus[0]
    assert h100["index"] == 0
    assert [m["uuid"] for m in h100["mig_devices"]] == [
        "MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f", "MIG-cba663e8-9bed-5b25-b243-5985ef7c9beb"]
    assert [m["profile"] for m in h100["mig_devices"]] == ["1g.10gb", "3g.40gb"]
    assert h100["mig_devices"][0]["name"] == "NVIDIA H100 80GB HBM3 MIG 1g.10gb"
    assert h100["mig_devices"][1]["gpu_instance_id"] == 2
    # The T4's UUID was an error text, so it cannot be joined: it keeps its position.
    assert gpus[1]["index"] == 1 and gpus[1]["uuid"] is None


def test_merge_keeps_slot_of_gpu_that_could_not_be_opened():
    xml = parse_smi_xml(XML)
    errs = parse_handle_errors("Unable to determine the device handle for GPU0: GPU is lost\n")
    gpus = merge_smi(xml, [], errs)
    assert [g["index"] for g in gpus] == [0, 1, 2]
    assert gpus[0]["uuid"] is None
    assert gpus[0]["errors"][0]["code"] == "NVML_ERROR_GPU_IS_LOST"
    assert gpus[1]["uuid"] == "GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77"


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_parsers_never_raise_unexpected(text):
    assert isinstance(parse_smi_list(text), list)
    assert isinstance(parse_handle_errors(text), list)
    try:
        parse_smi_xml(text)
    except SmiParseError:
        pass


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(["<gpu>", "</gpu>", "<uuid>", "</uuid>", "x", "<mig_devices>",
                                 "</mig_devices>", "<mig_device>", "</mig_device>", "&", "N/A"])))
def test_xml_fragments_inside_a_document(parts):
    text = "<nvidia_smi_log>%s</nvidia_smi_log>" % "".join(parts)
    try:
        facts = parse_smi_xml(text)
    except SmiParseError:
        return
    assert isinstance(facts["gpus"], list)


@pytest.mark.parametrize("value,expected", [
    (0, "none"), (1, "passthrough"), (2, "vgpu"), (3, "host_vgpu"), (4, "host_vsga"), (5, "unknown"), (-1, "unknown"),
    ("None", "none"), ("Pass-Through", "passthrough"), ("VGPU", "vgpu"), ("Host VGPU", "host_vgpu"),
    ("Host VSGA", "host_vsga"), ("N/A", "unknown"), ("Unknown Error", "unknown"), (None, "unknown"), (True, "unknown"),
])
def test_virtualization_mode_from_nvml_and_nvidia_smi(value, expected):
    assert virtualization_mode_value(value) == expected
