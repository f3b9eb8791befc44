# -*- coding: utf-8 -*-
"""gpu_health: nvidia-smi -q -x health sections of several driver generations, NVML health
through the real pynvml against the fake libnvidia-ml.so.1, and the per-GPU verdict."""
from __future__ import absolute_import, division, print_function

import ctypes
import os
import subprocess

import pytest

from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu import health as gpu_health
from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu.probe import run_in_child

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))))
FIXTURES = os.path.join(REPO, "tests", "fixtures", "nvidia-smi-health")
from ansible_collections.kubegpu.fleet.lab.fakes.nvml import fakenvml  # noqa: E402  pylint: disable=wrong-import-position


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as f:
        return f.read()


# ------------------------------------------------------------------ XML, by generation

def test_r470_old_layout_page_retirement_pending():
    doc = gpu_health.parse_health_xml(fixture("r470-v100-page-retirement-pending.xml"))
    assert doc["driver_version"] == "470.256.02" and doc["problems"] == []
    g = doc["gpus"][0]
    assert g["bus_id"] == "00000000:3B:00.0"
    assert g["remapped_rows"] == {"supported": False, "correctable": None, "uncorrectable": None,
                                  "pending": None, "failure": None, "histogram": None}
    assert g["retired_pages"] == {"supported": True, "multiple_single_bit": 1, "double_bit": 2,
                                  "pending": True}
    vol, agg = g["ecc"]["volatile"], g["ecc"]["aggregate"]
    assert vol["layout"] == "single_bit/double_bit"
    assert (vol["dram_uncorrectable"], vol["sram_uncorrectable"], vol["uncorrectable"]) == (2, 0, 2)
    assert (agg["dram_uncorrectable"], agg["sram_uncorrectable"], agg["uncorrectable"]) == (2, 1, 3)
    assert vol["correctable"] == 4 and agg["correctable"] == 17
    v = gpu_health.verdict(g)
    assert v["reset_required"] and not v["rma"]
    assert v["ecc_uncorrectable"] == {"volatile": 2, "aggregate": 3, "scope": "volatile"}
    assert v["findings"] == ["gpu.reset_required", "gpu.ecc_uncorrectable"]
    assert any("page retirement pending" in r for r in v["reasons"])


def test_r535_dram_sram_layout_one_gpu_remap_pending_one_healthy():
    doc = gpu_health.parse_health_xml(fixture("r535-a100-remap-pending.xml"))
    assert doc["attached_gpus"] == 2 and doc["gpu_elements"] == 2 and doc["problems"] == []
    bad, good = doc["gpus"]
    assert bad["remapped_rows"] == {"supported": True, "correctable": 0, "uncorrectable": 1,
                                    "pending": True, "failure": False,
                                    "histogram": {"max": 640, "high": 0, "partial": 0, "low": 0, "none": 0}}
    assert bad["retired_pages"]["supported"] is False  # N/A on Ampere: row remapping instead
    assert bad["ecc"]["volatile"]["layout"] == "dram/sram"
    assert bad["ecc"]["volatile"]["dram_uncorrectable"] == 1
    assert bad["ecc"]["volatile"]["correctable"] == 12
    vb, vg = gpu_health.verdict(bad), gpu_health.verdict(good)
    assert vb["findings"] == ["gpu.reset_required", "gpu.ecc_uncorrectable"]
    assert vb["reasons"][0].startswith("row remapping pending")
    assert vg == {"reset_required": False, "rma": False,
                  "ecc_uncorrectable": {"volatile": 0, "aggregate": 0, "scope": None},
                  "nvlink_errors": None,
                  "recovery": {"driver_action": None, "source": None, "action": None, "raw": None},
                  "pcie": None, "reasons": [], "findings": [], "details": {}}


def test_r550_attached_four_describes_one():
    doc = gpu_health.parse_health_xml(fixture("r550-h100-attached-4-described-1.xml"))
    assert doc["attached_gpus"] == 4 and doc["gpu_elements"] == 1
    assert doc["problems"] == ["nvidia-smi reports 4 attached GPUs but describes 1"]


def test_r570_parity_secded_split_remap_failure_and_sram_threshold_are_rma():
    doc = gpu_health.parse_health_xml(fixture("r570-h100-remap-failure.xml"))
    g = doc["gpus"][0]
    assert g["ecc"]["volatile"]["sram_uncorrectable"] == 3          # parity 2 + secded 1
    assert g["ecc"]["aggregate"]["uncorrectable"] == 10             # sram 6 + dram 4
    assert g["ecc"]["aggregate"]["sram_threshold_exceeded"] is True
    v = gpu_health.verdict(g)
    assert v["rma"] and not v["reset_required"]
    assert v["ecc_uncorrectable"]["scope"] == "volatile"
    assert v["findings"] == ["gpu.rma", "gpu.ecc_uncorrectable"]
    assert sum("RMA candidate" in r for r in v["reasons"]) == 2


def test_entities_and_internal_subset_refused_real_doctype_accepted():
    with pytest.raises(gpu_health.HealthParseError, match="entities"):
        gpu_health.parse_health_xml(fixture("hostile-entities.xml"))
    # An internal subset without ENTITY is refused too; a DOCTYPE inside the body as well.
    with pytest.raises(gpu_health.HealthParseError):
        gpu_health.parse_health_xml('<!DOCTYPE nvidia_smi_log [ ]><nvidia_smi_log></nvidia_smi_log>')
    with pytest.raises(gpu_health.HealthParseError):
        gpu_health.parse_health_xml('<nvidia_smi_log><!DOCTYPE x SYSTEM "y"></nvidia_smi_log>')
    # The real tool's external DOCTYPE line is fine (every fixture has one).
    assert '<!DOCTYPE nvidia_smi_log SYSTEM' in fixture("r535-a100-remap-pending.xml")


def test_size_bound_truncation_and_garbage():
    text = fixture("r535-a100-remap-pending.xml")
    with pytest.raises(gpu_health.HealthParseError, match="more than the 100"):
        gpu_health.parse_health_xml(text, max_bytes=100)
    with pytest.raises(gpu_health.HealthParseError, match="truncated"):
        gpu_health.parse_health_xml(text[:len(text) // 2])
    with pytest.raises(gpu_health.HealthParseError, match="no <nvidia_smi_log>"):
        gpu_health.parse_health_xml("Failed to initialize NVML: Driver/library version mismatch\n")
    with pytest.raises(gpu_health.HealthParseError, match="cannot parse"):
        gpu_health.parse_health_xml(b"<nvidia_smi_log><gpu></nvidia_smi_log>")


# ------------------------------------------------------------- fake NVML / nvidia-smi

@pytest.fixture(scope="module")
def driver():
    return fakenvml.build()


@pytest.fixture
def scenario(tmp_path, monkeypatch):
    path = str(tmp_path / "nvml.json")
    monkeypatch.setenv("KUBEGPU_FAKE_NVML_CONFIG", path)
    return path


HEALTH_GPUS = [
    fakenvml.gpu(0, mig=False, health={
        "remapped_rows": {"correctable": 2, "uncorrectable": 1, "pending": True},
        "retired_pages": {"double_bit": 3, "pending": True},
        "ecc": {"volatile_uncorrectable": 1, "aggregate_uncorrectable": 5,
                "volatile_correctable": 11, "aggregate_correctable": 40},
        "nvlinks": [{"active": True}, {"active": True, "replay": 7, "crc_flit": 2},
                    {"active": False, "replay": 99}]}),
    fakenvml.gpu(1, mig=False, health={"remapped_rows": {"failure": True}, "nvlinks": 0,
                                       "ecc": {"sram": {"volatile_parity": 2, "aggregate_parity": 6,
                                                        "aggregate_secded": 1,
                                                        "threshold_exceeded": True}}}),
    fakenvml.gpu(2, mig=False, health={"supported": False, "nvlinks": 0}),
    fakenvml.gpu(3, mig=False, errors={"nvmlDeviceGetRemappedRows": "NVML_ERROR_UNKNOWN"}),
    fakenvml.gpu(4, mig=False, errors={"nvmlDeviceGetNvLinkState": "GPU_IS_LOST",
                                       "nvmlDeviceGetTotalEccErrors": "NVML_ERROR_TIMEOUT"}),
]


def _nvml_health_child(lib):
    def target(emit):
        import pynvml  # pylint: disable=import-error
        pynvml.nvmlLib = ctypes.CDLL(lib)
        pynvml.nvmlInit()
        try:
            return [gpu_health.nvml_health(pynvml, pynvml.nvmlDeviceGetHandleByIndex(i))
                    for i in range(pynvml.nvmlDeviceGetCount())]
        finally:
            pynvml.nvmlShutdown()
    out = run_in_child(target, 20)
    assert out.status == "ok", out.__dict__
    assert out.value["ok"], out.value
    return out.value["value"]


def test_nvml_health_through_real_pynvml(driver, scenario):
    fakenvml.write_scenario(scenario, HEALTH_GPUS)
    g0, g1, g2, g3, g4 = _nvml_health_child(driver.library)

    assert g0["remapped_rows"] == {"supported": True, "correctable": 2, "uncorrectable": 1,
                                   "pending": True, "failure": False,
                                   "histogram": {"max": 2560, "high": 0, "partial": 0, "low": 0, "none": 0}}
    assert g0["retired_pages"] == {"supported": True, "multiple_single_bit": 0, "double_bit": 3,
                                   "pending": True}
    assert g0["ecc"]["volatile"]["uncorrectable"] == 1
    assert g0["ecc"]["aggregate"]["uncorrectable"] == 5
    # Corrected counts come from NVML as nvidia-smi's <dram_correctable> + <sram_correctable> do.
    assert (g0["ecc"]["volatile"]["correctable"], g0["ecc"]["aggregate"]["correctable"]) == (11, 40)
    assert g0["nvlink"]["links"] == 3 and g0["nvlink"]["active"] == 2
    assert g0["nvlink"]["totals"]["replay"] == 7 and g0["nvlink"]["totals"]["crc_flit"] == 2
    assert g0["nvlink"]["by_link"] == {"1": {"replay": 7, "crc_flit": 2}}  # inactive link 2 unread
    assert g0["errors"] == {}
    v0 = gpu_health.verdict(g0)
    # link 2 inactive while links 0-1 are up: an NVLink down (DCGM: FAIL outside MIG mode)
    assert v0["findings"] == ["gpu.reset_required", "gpu.ecc_uncorrectable", "gpu.nvlink"]
    assert gpu_health.verdict(g0, mig_enabled=True)["details"]["gpu.nvlink"] == ["9 NVLink errors (crc_flit 2, replay 7)"]
    assert v0["nvlink_errors"] == 9

    assert g0["ecc"]["volatile"]["dram_uncorrectable"] == 1
    assert g0["ecc"]["aggregate"]["sram_threshold_exceeded"] is False

    assert g1["remapped_rows"]["failure"] is True and g1["nvlink"] is None
    assert g1["errors"] == {"nvlink": "not supported"}
    # SRAM errors count in the total (as in NVML); DRAM is the rest.
    assert g1["ecc"]["volatile"] == {"dram_uncorrectable": 0, "sram_uncorrectable": 2,
                                     "uncorrectable": 2, "correctable": 0,
                                     "sram_threshold_exceeded": None, "layout": "nvml"}
    assert g1["ecc"]["aggregate"]["sram_uncorrectable"] == 7
    # Lifetime-only errors are reported with their scope (history, not current trouble).
    history = {"ecc": {"volatile": {"uncorrectable": 0}, "aggregate": {"uncorrectable": 4}}}
    vh = gpu_health.verdict(history)
    assert vh["ecc_uncorrectable"]["scope"] == "aggregate" and vh["findings"] == ["gpu.ecc_uncorrectable"]
    assert vh["reasons"] == ["4 uncorrectable ECC errors over the GPU's life (aggregate)"]
    assert g1["ecc"]["aggregate"]["sram_threshold_exceeded"] is True
    v1 = gpu_health.verdict(g1)
    assert v1["findings"] == ["gpu.rma", "gpu.ecc_uncorrectable"]
    assert len([r for r in v1["reasons"] if "RMA candidate" in r]) == 2

    # A consumer-class GPU: every memory query NOT_SUPPORTED, which is no failure and no finding.
    assert g2["remapped_rows"]["supported"] is False and g2["retired_pages"]["supported"] is False
    assert set(g2["errors"].values()) == {"not supported"}
    assert gpu_health.verdict(g2)["findings"] == []

    # A real error on one query is recorded under that query; the others still answer.
    assert g3["errors"]["remapped_rows"].endswith("(999)")
    assert g3["ecc"]["volatile"]["uncorrectable"] == 0
    assert g3["nvlink"]["active"] == 18
    # Errors that are not "unsupported" stay errors, NVLink on link 0 included.
    assert g4["nvlink"] is None
    assert g4["errors"]["nvlink"] == "GPU is lost (15)"
    assert g4["errors"]["ecc_uncorrectable_volatile"] == "Timeout (10)"
    assert g4["ecc"]["volatile"]["uncorrectable"] is None
    assert g4["remapped_rows"]["supported"] is True


def test_nvml_health_with_a_pynvml_that_lacks_the_wrappers(driver, scenario):
    fakenvml.write_scenario(scenario, [fakenvml.gpu(0, mig=False)])

    def target(emit):
        import pynvml  # pylint: disable=import-error
        pynvml.nvmlLib = ctypes.CDLL(driver.library)
        pynvml.nvmlInit()
        for name in ("nvmlDeviceGetRemappedRows", "nvmlDeviceGetSramEccErrorStatus",
                     "c_nvmlEccSramErrorStatus_v1_t", "nvmlDeviceGetNvLinkState"):
            delattr(pynvml, name)  # an old nvidia-ml-py, in this child only
        try:
            return gpu_health.nvml_health(pynvml, pynvml.nvmlDeviceGetHandleByIndex(0))
        finally:
            pynvml.nvmlShutdown()
    out = run_in_child(target, 20)
    assert out.status == "ok" and out.value["ok"], out.__dict__
    h = out.value["value"]
    assert h["errors"] == {"remapped_rows": "not supported", "sram_ecc_status": "not supported",
                           "nvlink": "not supported"}, h["errors"]
    assert h["remapped_rows"]["supported"] is False and h["nvlink"] is None
    assert h["ecc"]["volatile"]["uncorrectable"] == 0


def test_fake_nvidia_smi_health_document_parses_the_same(driver, scenario):
    fakenvml.write_scenario(scenario, HEALTH_GPUS[:4] + [fakenvml.gpu(4, mig=False, lost=True)])
    env = dict(os.environ, LD_LIBRARY_PATH=driver.libdir)
    proc = subprocess.run([driver.smi, "-q", "-x"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          env=env, timeout=20, check=False, universal_newlines=True)
    assert proc.returncode == 15  # NVML_ERROR_GPU_IS_LOST for GPU 4, as the real tool exits
    doc = gpu_health.parse_health_xml(proc.stdout)
    assert doc["problems"] == ["nvidia-smi reports 5 attached GPUs but describes 4"]
    g0, g1, g2, g3 = doc["gpus"]
    assert g0["remapped_rows"]["pending"] is True and g0["retired_pages"]["pending"] is True
    assert g0["retired_pages"]["double_bit"] == 3
    assert g0["ecc"]["volatile"]["dram_uncorrectable"] == 1
    assert g0["ecc"]["aggregate"]["uncorrectable"] == 5
    assert gpu_health.verdict(g1)["rma"] is True
    assert g1["ecc"]["volatile"]["sram_uncorrectable"] == 2   # parity 2 + secded 0
    assert g1["ecc"]["volatile"]["dram_uncorrectable"] == 0
    assert g1["ecc"]["aggregate"]["sram_threshold_exceeded"] is True
    assert g2["remapped_rows"]["supported"] is False and g2["ecc_mode"] == "N/A"
    assert g2["ecc"]["volatile"]["uncorrectable"] is None
    assert g3["remapped_rows"]["supported"] is False  # the query failed: printed as its error
