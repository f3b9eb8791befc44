# -*- coding: utf-8 -*-
"""nvidia_facts() through the real pynvml against the fake libnvidia-ml.so.1 (built with gcc),
and through the fake nvidia-smi; procfs and /dev trees are real files and mknod'ed nodes."""
from __future__ import absolute_import, division, print_function

import json
import os
import subprocess
import time

import pytest

from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu.facts import (
    GpuFactsError, device_ids, find_library, find_nvidia_smi, library_version, mig_state,
    nvidia_facts, parse_gpu_information, procfs_gpus, vgpu_guest)

from ansible_collections.kubegpu.fleet.lab.fakes.nvml import fakenvml
from ansible_collections.kubegpu.fleet.tests.lib.paths import COLLECTIONS_ROOT

V = fakenvml.DEFAULT_VERSION
# A hung fake never answers, so status "hung" proves the probe gave up; elapsed is checked only
# against this safety bound (a contended machine must not fail the suite). The timeout + 2 s
# goal is measured in bench/, not asserted here.
HANG_GUARD = 60
R570_BAD = "570.148.08"


@pytest.fixture(scope="session")
def driver():
    return fakenvml.build(V)


@pytest.fixture(scope="session")
def r570_driver():
    return fakenvml.build(R570_BAD)


class Node(object):
    """A fake GPU node: procfs tree, /dev tree, scenario file, driver root."""

    def __init__(self, tmp_path, driver, monkeypatch):
        self.tmp = tmp_path
        self.proc = str(tmp_path / "proc")
        self.dev = str(tmp_path / "dev")
        self.scenario = str(tmp_path / "nvml.json")
        self.driver = driver
        os.makedirs(self.dev)
        monkeypatch.setenv("KUBEGPU_FAKE_NVML_CONFIG", self.scenario)

    def setup(self, gpus, kernel=V, dev_nodes=True, mig_instances=None, gpu_major_name="nvidia",
              **scenario):
        fakenvml.write_driver_files(self.proc, self.scenario, gpus, kernel,
                                    procfs_args={"mig_instances": mig_instances, "gpu_major_name": gpu_major_name},
                                    **scenario)
        if dev_nodes is True:
            fakenvml.make_dev_nodes(self.dev, fakenvml.dev_nodes_for(gpus))
        elif dev_nodes:
            fakenvml.make_dev_nodes(self.dev, dev_nodes)
        return self

    def facts(self, driver_root=None, **kw):
        kw.setdefault("timeout", 10)
        return nvidia_facts(proc_path=self.proc, dev_path=self.dev,
                            driver_root=driver_root or self.driver.root, **kw)


@pytest.fixture
def node(tmp_path, driver, monkeypatch):
    return Node(tmp_path, driver, monkeypatch)


def _nodes(facts):
    return dict((n["name"], n) for n in facts["device_nodes"])


# --------------------------------------------------------------------------- healthy nodes

def test_one_gpu_no_mig(node):
    gpus = [fakenvml.gpu(0, mig=False)]
    f = node.setup(gpus).facts()
    assert f["probe"]["status"] == "ok", f["probe"]
    assert f["probe"]["backend"] == "nvml"
    assert f["present"] is True
    assert f["source"] == "nvml"
    assert f["driver_version"] == V and f["driver_version_source"] == "nvml"
    assert f["driver_branch"] == 570
    assert f["kernel_module_version"] == V
    assert f["library_version"] == V
    assert f["library_path"] == node.driver.library
    assert f["cuda_driver_version"] == "12.8"
    assert f["nvml_version"] == "12." + V
    assert f["mig_enabled"] is False and f["mig_mixed"] is False
    g = f["gpus"][0]
    assert g["index"] == 0
    assert g["uuid"] == fakenvml.gpu_uuid(0)
    assert g["name"] == "NVIDIA H100 80GB HBM3"
    assert g["minor_number"] == 0
    assert g["pci_bus_id"] == "00000000:18:00.0"
    assert g["memory_total_mib"] == 81559
    assert g["mig_mode"] == {"current": "disabled", "pending": "disabled"}
    assert g["mig_devices"] == [] and g["errors"] == []
    assert f["device_ids"] == [fakenvml.gpu_uuid(0)]
    assert all(n["ok"] for n in f["device_nodes"]), f["device_nodes"]
    assert f["kernel_modules"]["nvidia"]["loaded"] is True
    assert f["kernel_modules"]["nvidia_peermem"]["loaded"] is False


def test_eight_gpus_seven_mig_each(node):
    gpus = fakenvml.hgx(8, 7)
    f = node.setup(gpus).facts()
    assert f["probe"]["status"] == "ok", f["probe"]
    assert f["gpu_count"] == 8
    assert f["mig_enabled"] is True and f["mig_mixed"] is False
    for i, g in enumerate(f["gpus"]):
        assert g["index"] == i and g["minor_number"] == i
        assert g["mig_mode"]["current"] == "enabled"
        assert len(g["mig_devices"]) == 7
        for j, m in enumerate(g["mig_devices"]):
            assert m["index"] == j
            assert m["uuid"] == fakenvml.mig_uuid(i, j)
            assert m["profile"] == "1g.10gb"
            assert m["name"] == "NVIDIA H100 80GB HBM3 MIG 1g.10gb"
            assert m["gpu_instance_id"] == 7 + j
            assert m["compute_instance_id"] == 0
            assert m["memory_total_mib"] == 9984
    assert len(f["device_ids"]) == 8 + 56
    assert f["device_ids"][:2] == [fakenvml.gpu_uuid(0), fakenvml.mig_uuid(0, 0)]
    caps = [n for n in f["device_nodes"] if n["kind"] in ("mig_gi", "mig_ci")]
    assert len(caps) == 8 * 7 * 2
    assert all(n["ok"] and n["major"] == fakenvml.CAPS_MAJOR for n in caps)
    ci = [n for n in caps if n["kind"] == "mig_ci" and n["gpu"] == 2 and n["gpu_instance_id"] == 9][0]
    assert ci["name"] == "nvidia-caps/nvidia-cap%d" % fakenvml.mig_cap_minor(2, 9, 0)
    assert ci["uuid"] == fakenvml.mig_uuid(2, 2)


def test_mig_mixed(node):
    gpus = [fakenvml.gpu(0, profiles=["3g.40gb", "3g.40gb"]), fakenvml.gpu(1, mig=False),
            fakenvml.gpu(2, mig="N/A", name="Tesla T4")]
    f = node.setup(gpus).facts()
    assert f["probe"]["status"] == "ok"
    assert f["mig_enabled"] is True
    assert f["mig_mixed"] is True
    assert [g["mig_mode"]["current"] for g in f["gpus"]] == ["enabled", "disabled", "unsupported"]
    assert [m["profile"] for m in f["gpus"][0]["mig_devices"]] == ["3g.40gb", "3g.40gb"]


def test_pending_mig_mode_is_reported(node):
    g = fakenvml.gpu(0)
    g["mig_mode"] = {"current": False, "pending": True}
    f = node.setup([g]).facts()
    assert f["gpus"][0]["mig_mode"] == {"current": "disabled", "pending": "enabled"}
    assert f["mig_enabled"] is False


# ------------------------------------------------------------------------------- failures

def test_version_mismatch_after_upgrade_without_reboot(node):
    gpus = [fakenvml.gpu(0, mig=False), fakenvml.gpu(1, mig=False)]
    f = node.setup(gpus, kernel="570.158.01").facts()
    assert f["probe"]["status"] == "error"
    assert f["probe"]["error_code"] == "NVML_ERROR_LIB_RM_VERSION_MISMATCH"
    assert "version mismatch" in f["probe"]["error"].lower()
    assert f["present"] is True
    assert f["kernel_module_version"] == "570.158.01"
    # NVML cannot say, but the library's file name can.
    assert f["driver_version"] == V and f["driver_version_source"] == "library_file"
    # GPUs still listed from the kernel module's procfs files.
    assert f["source"] == "procfs"
    assert [g["uuid"] for g in f["gpus"]] == [fakenvml.gpu_uuid(0), fakenvml.gpu_uuid(1)]
    assert [g["minor_number"] for g in f["gpus"]] == [0, 1]
    assert f["device_ids"] == [fakenvml.gpu_uuid(0), fakenvml.gpu_uuid(1)]


def test_driver_not_loaded_is_absent(node):
    f = node.setup([fakenvml.gpu(0)], kernel=None, dev_nodes=False).facts()
    assert f["probe"]["status"] == "absent"
    assert f["probe"]["error_code"] == "NVML_ERROR_DRIVER_NOT_LOADED"
    assert f["present"] is False
    assert f["kernel_module_version"] is None
    assert f["gpus"] == [] and f["device_ids"] == []
    assert f["mig_enabled"] is None and f["mig_mixed"] is None
    assert not any(n["exists"] for n in f["device_nodes"])
    assert f["driver_version"] == V  # the library is installed, the driver is not loaded


def test_gpu_lost_on_one_device(node):
    gpus = [fakenvml.gpu(0, mig=False), fakenvml.gpu(1, mig=False, lost=True), fakenvml.gpu(2, mig=False)]
    f = node.setup(gpus).facts()
    assert f["probe"]["status"] == "error"
    assert f["probe"]["error_code"] == "NVML_ERROR_GPU_IS_LOST"
    assert "GPU 1" in f["probe"]["error"]
    lost = f["gpus"][1]
    assert lost["uuid"] is None
    assert lost["errors"][0]["function"] == "nvmlDeviceGetHandleByIndex"
    assert lost["errors"][0]["code"] == "NVML_ERROR_GPU_IS_LOST"
    assert f["gpus"][0]["uuid"] == fakenvml.gpu_uuid(0) and f["gpus"][2]["uuid"] == fakenvml.gpu_uuid(2)
    assert f["device_ids"] == [fakenvml.gpu_uuid(0), fakenvml.gpu_uuid(2)]
    assert f["driver_version"] == V and f["source"] == "nvml"


def test_injected_error_on_one_mig_device(node):
    g = fakenvml.gpu(0, profiles=["1g.10gb"] * 3)
    g["mig_devices"][1]["errors"] = {"nvmlDeviceGetUUID": "NVML_ERROR_UNKNOWN"}
    f = node.setup([g]).facts()
    assert f["probe"]["status"] == "error"
    err = f["probe"]["errors"][0]
    assert err == {"function": "nvmlDeviceGetUUID", "code": "NVML_ERROR_UNKNOWN",
                   "message": "Unknown Error", "gpu": 0, "mig_device": 1}
    assert [m["uuid"] for m in f["gpus"][0]["mig_devices"]] == [
        fakenvml.mig_uuid(0, 0), None, fakenvml.mig_uuid(0, 2)]
    assert len(f["device_ids"]) == 3


def test_not_supported_cuda_version_is_an_error_entry(node):
    f = node.setup([fakenvml.gpu(0)], errors={"nvmlSystemGetCudaDriverVersion": "NOT_SUPPORTED"}).facts()
    assert f["cuda_driver_version"] is None
    assert f["probe"]["errors"][0]["code"] == "NVML_ERROR_NOT_SUPPORTED"


# ---------------------------------------------------------------------------------- hangs

def test_r570_regression_hangs_on_mig_mixed_node(tmp_path, r570_driver, monkeypatch):
    node = Node(tmp_path, r570_driver, monkeypatch)
    gpus = [fakenvml.gpu(0, profiles=["1g.10gb"]), fakenvml.gpu(1, mig=False)]
    node.setup(gpus, kernel=R570_BAD, mig_instances={0: [(7, 0)]})
    start = time.monotonic()
    f = node.facts(timeout=1.0)
    assert time.monotonic() - start < HANG_GUARD
    assert f["probe"]["status"] == "hung" and f["probe"]["timeout"] == 1.0
    assert f["probe"]["hung_in"] == "nvmlInit"
    assert f["probe"]["stuck_pids"] == []
    assert f["present"] is True
    assert f["driver_version"] == R570_BAD and f["driver_version_source"] == "library_file"
    # procfs still shows one GPU with MIG instances and one without: mixed.
    assert f["source"] == "procfs"
    assert f["mig_enabled"] is True and f["mig_mixed"] is True


def test_r570_library_without_mixed_mig_answers(tmp_path, r570_driver, monkeypatch):
    node = Node(tmp_path, r570_driver, monkeypatch)
    f = node.setup(fakenvml.hgx(2, 7), kernel=R570_BAD).facts(timeout=5)
    assert f["probe"]["status"] == "ok"
    assert f["mig_mixed"] is False


def test_r570_emulation_can_be_switched_off(tmp_path, r570_driver, monkeypatch):
    node = Node(tmp_path, r570_driver, monkeypatch)
    gpus = [fakenvml.gpu(0, profiles=["1g.10gb"]), fakenvml.gpu(1, mig=False)]
    f = node.setup(gpus, kernel=R570_BAD, emulate_r570_mig_hang=False).facts(timeout=5)
    assert f["probe"]["status"] == "ok" and f["mig_mixed"] is True


def test_fixed_driver_does_not_hang_on_mixed_node(node):
    gpus = [fakenvml.gpu(0, profiles=["1g.10gb"]), fakenvml.gpu(1, mig=False)]
    assert node.setup(gpus).facts(timeout=5)["probe"]["status"] == "ok"


def test_explicit_hang_in_a_device_call(node):
    gpus = [fakenvml.gpu(0, mig=False), fakenvml.gpu(1, mig=False)]
    node.setup(gpus, hang={"function": "nvmlDeviceGetMigMode", "gpu": 1})
    start = time.monotonic()
    f = node.facts(timeout=1.0)
    assert time.monotonic() - start < HANG_GUARD
    assert f["probe"]["status"] == "hung"
    assert f["probe"]["hung_in"] == "nvmlDeviceGetMigMode gpu=1"
    assert "nvmlDeviceGetMigMode gpu=1" in f["probe"]["error"]


@pytest.fixture
def freezer():
    if not fakenvml.freezer_available():
        pytest.skip("cgroup v1 freezer not available at %s" % fakenvml.FREEZER_ROOT)
    with fakenvml.reaped_freezer_cgroup() as cg:
        yield cg


@pytest.mark.parametrize("backend", ["nvml", "nvidia_smi"])
def test_frozen_probe_is_left_behind_not_waited_for(node, freezer, backend):
    node.setup([fakenvml.gpu(0)], hang={"freeze_cgroup": freezer.path})
    start = time.monotonic()
    f = node.facts(timeout=1.0, backend=backend)
    elapsed = time.monotonic() - start
    assert elapsed < HANG_GUARD
    assert f["probe"]["status"] == "hung"
    stuck = f["probe"]["stuck_pids"]
    assert stuck and stuck == freezer.pids()
    assert freezer.state() == "FROZEN"
    with open("/proc/%d/status" % stuck[0]) as fh:
        assert "State:\tD" in fh.read()
    assert "did not die on SIGKILL" in f["probe"]["error"]
    # Thaw: the pending SIGKILL ends it; the fixture reaps the child and removes the cgroup.
    assert freezer.cleanup() == stuck
    assert not os.path.exists("/proc/%d" % stuck[0])  # thawed, killed and reaped


# ------------------------------------------------------------------------------ absent

def test_no_library_at_all(node, tmp_path):
    empty = tmp_path / "empty-root"
    empty.mkdir()
    node.setup([], kernel=None, dev_nodes=False)
    f = node.facts(driver_root=str(empty))
    assert f["probe"]["status"] == "absent"
    assert f["probe"]["error_code"] == "NVML_ERROR_LIBRARY_NOT_FOUND"
    assert f["present"] is False
    assert f["library_path"] is None and f["driver_version"] is None
    assert f["gpus"] == [] and f["mig_mixed"] is None


def test_missing_driver_root_is_absent(node, tmp_path):
    node.setup([], kernel=None, dev_nodes=False)
    f = node.facts(driver_root=str(tmp_path / "run" / "nvidia" / "driver"))
    assert f["probe"]["status"] == "absent"
    assert "does not exist" in f["probe"]["error"]
    assert f["present"] is False


def test_library_missing_but_kernel_module_loaded(node, tmp_path):
    """E.g. driver_root pointing at the host while the GPU Operator keeps the driver elsewhere:
    the probe is absent, but the node does have a driver."""
    empty = tmp_path / "empty-root"
    empty.mkdir()
    gpus = [fakenvml.gpu(0)]
    f = node.setup(gpus).facts(driver_root=str(empty))
    assert f["probe"]["status"] == "absent"
    assert f["present"] is True
    assert f["kernel_module_version"] == V
    assert f["source"] == "procfs" and f["gpus"][0]["uuid"] == fakenvml.gpu_uuid(0)


# ---------------------------------------------------------------------- nvidia-smi backend

def _comparable(gpus):
    return [(g["index"], g["uuid"], g["name"], g["minor_number"], g["pci_bus_id"],
             g["memory_total_mib"], g["mig_mode"],
             [(m["index"], m["uuid"], m["name"], m["profile"], m["gpu_instance_id"],
               m["compute_instance_id"], m["memory_total_mib"], m["multiprocessor_count"])
              for m in g["mig_devices"]]) for g in gpus]


def test_nvidia_smi_backend_matches_nvml(node):
    gpus = fakenvml.hgx(4, 3) + [fakenvml.gpu(4, mig=False), fakenvml.gpu(5, mig="N/A")]
    node.setup(gpus)
    smi = node.facts(backend="nvidia_smi")
    nvml = node.facts(backend="nvml")
    assert smi["probe"]["status"] == "ok", smi["probe"]
    assert smi["probe"]["backend"] == "nvidia_smi" and smi["source"] == "nvidia_smi"
    assert smi["nvidia_smi_path"] == node.driver.smi
    assert _comparable(smi["gpus"]) == _comparable(nvml["gpus"])
    assert smi["device_ids"] == nvml["device_ids"]
    assert smi["driver_version"] == V and smi["cuda_driver_version"] == "12.8"
    assert smi["mig_mixed"] is True


def test_nvidia_smi_version_mismatch(node):
    f = node.setup([fakenvml.gpu(0)], kernel="570.158.01").facts(backend="nvidia_smi")
    assert f["probe"]["status"] == "error"
    assert f["probe"]["error_code"] == "NVML_ERROR_LIB_RM_VERSION_MISMATCH"
    assert "Failed to initialize NVML: Driver/library version mismatch" in f["probe"]["error"]


def test_nvidia_smi_driver_not_loaded(node):
    f = node.setup([fakenvml.gpu(0)], kernel=None, dev_nodes=False).facts(backend="nvidia_smi")
    assert f["probe"]["status"] == "absent"
    assert f["probe"]["error_code"] == "NVML_ERROR_DRIVER_NOT_LOADED"
    assert f["present"] is False


def test_nvidia_smi_gpu_lost(node):
    gpus = [fakenvml.gpu(0, mig=False), fakenvml.gpu(1, lost=True), fakenvml.gpu(2, mig=False)]
    f = node.setup(gpus).facts(backend="nvidia_smi")
    assert f["probe"]["status"] == "error"
    assert f["probe"]["error_code"] == "NVML_ERROR_GPU_IS_LOST"
    assert [g["uuid"] for g in f["gpus"]] == [fakenvml.gpu_uuid(0), None, fakenvml.gpu_uuid(2)]
    assert f["gpus"][1]["index"] == 1
    assert f["gpus"][1]["errors"][0]["code"] == "NVML_ERROR_GPU_IS_LOST"


def test_nvidia_smi_hang_kills_the_tool(node):
    node.setup([fakenvml.gpu(0)], hang=True)
    f = node.facts(backend="nvidia_smi", timeout=1.0)
    assert f["probe"]["status"] == "hung"
    assert f["probe"]["hung_in"].endswith("nvidia-smi -q -x")
    assert f["probe"]["stuck_pids"] == []
    out = subprocess.run(["pgrep", "-f", node.driver.smi], stdout=subprocess.PIPE, check=False)
    assert out.stdout.strip() == b""


def test_nvidia_smi_absent(node, tmp_path):
    empty = tmp_path / "empty-root"
    empty.mkdir()
    node.setup([], kernel=None, dev_nodes=False)
    f = node.facts(driver_root=str(empty), backend="nvidia_smi")
    assert f["probe"]["status"] == "absent" and f["nvidia_smi_path"] is None


# --------------------------------------------------------------------- driver root layouts

def test_gpu_operator_driver_root(node, tmp_path):
    root = node.driver.copy_to(str(tmp_path / "run" / "nvidia" / "driver"))
    node.setup([fakenvml.gpu(0, mig=False)])
    for backend in ("nvml", "nvidia_smi"):
        f = node.facts(driver_root=root.root, backend=backend)
        assert f["probe"]["status"] == "ok", f["probe"]
        assert f["device_ids"] == [fakenvml.gpu_uuid(0)]
    assert f["library_path"] == os.path.join(root.libdir, "libnvidia-ml.so.1")
    assert f["nvidia_smi_path"] == os.path.join(root.root, "usr", "bin", "nvidia-smi")


def test_lib64_layout(node, tmp_path):
    """RHEL-style root: the library in usr/lib64."""
    root = tmp_path / "rhel"
    (root / "usr" / "lib64").mkdir(parents=True)
    real = os.path.realpath(node.driver.library)
    os.symlink(real, str(root / "usr" / "lib64" / os.path.basename(real)))
    os.symlink(os.path.basename(real), str(root / "usr" / "lib64" / "libnvidia-ml.so.1"))
    assert find_library(str(root)) == str(root / "usr" / "lib64" / "libnvidia-ml.so.1")
    assert library_version(find_library(str(root))) == V
    node.setup([fakenvml.gpu(0)])
    assert node.facts(driver_root=str(root))["probe"]["status"] == "ok"


def test_host_root_honours_ld_library_path_and_path(node, monkeypatch):
    monkeypatch.setenv("LD_LIBRARY_PATH", node.driver.libdir)
    monkeypatch.setenv("PATH", os.path.dirname(node.driver.smi) + os.pathsep + os.environ["PATH"])
    assert find_library("/") == node.driver.library
    assert find_nvidia_smi("/") == node.driver.smi
    node.setup([fakenvml.gpu(0)])
    assert node.facts(driver_root="/")["probe"]["status"] == "ok"
    assert node.facts(driver_root="/", backend="nvidia_smi")["probe"]["status"] == "ok"


def test_unversioned_library_file_has_no_version(tmp_path):
    lib = tmp_path / "libnvidia-ml.so.1"
    lib.write_bytes(b"")
    assert library_version(str(lib)) is None
    assert library_version(None) is None


def test_broken_library_is_an_error_not_absent(node, tmp_path):
    root = tmp_path / "broken"
    (root / "usr" / "lib64").mkdir(parents=True)
    (root / "usr" / "lib64" / "libnvidia-ml.so.1").write_bytes(b"not an ELF file")
    node.setup([fakenvml.gpu(0)])
    f = node.facts(driver_root=str(root))
    # dlopen failing on an existing file: a broken install, reported as an error (pynvml's
    # NVML_ERROR_LIBRARY_NOT_FOUND code) with the loader's reason.
    assert f["probe"]["status"] == "error"
    assert f["probe"]["error_code"] == "NVML_ERROR_LIBRARY_NOT_FOUND"
    assert f["present"] is True
    assert "invalid ELF header" in f["probe"]["error"] or "file too short" in f["probe"]["error"]


# ---------------------------------------------------------------------------- device nodes

def test_device_nodes_wrong_major_and_missing_nodes(node):
    gpus = [fakenvml.gpu(0, mig=False), fakenvml.gpu(1, mig=False)]
    nodes = [("nvidiactl", 195, 255), ("nvidia-modeset", 195, 254),
             ("nvidia-uvm", 510, 0),  # stale dynamic major from an earlier boot
             ("nvidia0", 195, 0)]     # nvidia1 and nvidia-uvm-tools missing
    f = _nodes(node.setup(gpus, dev_nodes=nodes).facts())
    assert f["nvidiactl"]["ok"] is True and f["nvidiactl"]["expected_minor"] == 255
    assert f["nvidia-uvm"]["exists"] is True and f["nvidia-uvm"]["ok"] is False
    assert f["nvidia-uvm"]["major"] == 510 and f["nvidia-uvm"]["expected_major"] == fakenvml.UVM_MAJOR
    assert f["nvidia-uvm-tools"]["exists"] is False and f["nvidia-uvm-tools"]["expected_minor"] == 1
    assert f["nvidia0"]["ok"] is True and f["nvidia0"]["uuid"] == fakenvml.gpu_uuid(0)
    assert f["nvidia1"]["exists"] is False and f["nvidia1"]["gpu"] == 1


def test_device_nodes_pre_550_frontend_name(node):
    gpus = [fakenvml.gpu(0, mig=False)]
    facts = node.setup(gpus, gpu_major_name="nvidia-frontend").facts()
    f = _nodes(facts)
    assert facts["device_majors"]["gpu"] == 195 and facts["device_majors"]["gpu_name"] == "nvidia-frontend"
    assert f["nvidia0"]["ok"] is True and f["nvidia0"]["major_name"] == "nvidia-frontend"


def test_device_node_that_is_not_a_char_device(node):
    gpus = [fakenvml.gpu(0, mig=False)]
    node.setup(gpus, dev_nodes=[("nvidiactl", 195, 255)])
    with open(os.path.join(node.dev, "nvidia0"), "w") as fh:
        fh.write("a regular file left by a broken container runtime")
    f = _nodes(node.facts())
    assert f["nvidia0"]["exists"] is True and f["nvidia0"]["char_device"] is False
    assert f["nvidia0"]["ok"] is False


def test_uvm_module_not_loaded(node):
    gpus = [fakenvml.gpu(0, mig=False)]
    fakenvml.write_procfs(node.proc, gpus=gpus, uvm=False)
    fakenvml.write_scenario(node.scenario, gpus)
    f = node.facts()
    assert f["device_majors"]["nvidia_uvm"] is None
    assert _nodes(f)["nvidia-uvm"]["expected_major"] is None
    assert _nodes(f)["nvidia-uvm"]["ok"] is False


def test_gpu_nodes_from_dev_when_nothing_else_knows(node, tmp_path):
    empty = tmp_path / "empty-root"
    empty.mkdir()
    node.setup([], kernel=V, dev_nodes=[("nvidia0", 195, 0), ("nvidia3", 195, 3)])
    names = [n["name"] for n in node.facts(driver_root=str(empty))["device_nodes"] if n["kind"] == "gpu"]
    assert names == ["nvidia0", "nvidia3"]


# ------------------------------------------------------------------------ procfs parsing

def test_parse_gpu_information():
    text = ("Model: \t\t NVIDIA A100-SXM4-40GB\nIRQ:   \t\t 164\n"
            "GPU UUID: \t GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77\nBus Location: \t 0000:07:00.0\n"
            "Device Minor: \t 2\nGPU Excluded:\t No\n")
    assert parse_gpu_information(text) == {
        "name": "NVIDIA A100-SXM4-40GB", "uuid": "GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77",
        "minor_number": 2, "pci_bus_id": "0000:07:00.0"}
    assert parse_gpu_information(None) == {"name": None, "uuid": None, "minor_number": None,
                                           "pci_bus_id": None}


def test_procfs_gpus_with_mig_instances(tmp_path):
    gpus = [fakenvml.gpu(1), fakenvml.gpu(0)]
    proc = fakenvml.write_procfs(str(tmp_path / "proc"), gpus=gpus, mig_instances={1: [(1, 0), (2, 0), (2, 1)]})
    found = procfs_gpus(proc)
    assert [g["minor_number"] for g in found] == [0, 1]
    assert found[0]["mig_mode"]["current"] == "unknown"
    assert found[1]["mig_mode"]["current"] == "enabled"
    assert [(m["gpu_instance_id"], m["compute_instance_id"]) for m in found[1]["mig_devices"]] == [
        (1, 0), (2, 0), (2, 1)]
    assert mig_state(found, inferred=True) == (True, True)


@pytest.mark.parametrize("modes,inferred,expected", [
    (["enabled", "enabled"], False, (True, False)),
    (["enabled", "disabled"], False, (True, True)),
    (["enabled", "unsupported"], False, (True, True)),
    (["disabled", "unsupported"], False, (False, False)),
    (["enabled", "unknown"], False, (True, False)),
    (["unknown"], False, (None, None)),
    ([], False, (None, None)),
    (["unknown", "unknown"], True, (None, None)),
    (["enabled", "unknown"], True, (True, True)),
])
def test_mig_state(modes, inferred, expected):
    gpus = [{"mig_mode": {"current": m}} for m in modes]
    assert mig_state(gpus, inferred=inferred) == expected


@pytest.mark.parametrize("modes,expected", [
    (["vgpu"], True),
    (["vgpu", "unknown"], True),           # one vGPU is enough: the node runs the guest driver
    (["none", "passthrough"], False),      # bare metal, and a GPU passed through to a VM
    (["none", "unknown"], None),           # a GPU whose mode could not be read
    ([None], None),                        # procfs GPUs carry no mode
    ([], None),
    (["host_vgpu"], False),                # the hypervisor is no guest
])
def test_vgpu_guest(modes, expected):
    assert vgpu_guest([{"virtualization_mode": m} if m else {} for m in modes]) is expected


def test_device_ids_order():
    gpus = [{"uuid": "GPU-a", "mig_devices": [{"uuid": "MIG-1"}, {"uuid": None}]},
            {"uuid": None, "mig_devices": []}, {"uuid": "GPU-b", "mig_devices": []}]
    assert device_ids(gpus) == ["GPU-a", "MIG-1", "GPU-b"]


# --------------------------------------------------------------------------- bad arguments

@pytest.mark.parametrize("kwargs,message", [
    ({"backend": "cuda"}, "backend must be one of auto, nvml, nvidia_smi, got 'cuda'"),
    ({"timeout": 0}, "timeout must be between 0.001 and 86400 seconds, got 0"),
    ({"timeout": -3}, "got -3"),
    ({"timeout": "soon"}, "timeout must be a number of seconds, got 'soon'"),
    ({"timeout": float("inf")}, "got inf"),
    ({"timeout": float("nan")}, "got nan"),
    ({"timeout": 1e300}, "got 1e+300"),
    ({"proc_path": "/nonexistent/proc"}, "proc_path /nonexistent/proc is not a directory"),
    ({"dev_path": "/nonexistent/dev"}, "dev_path /nonexistent/dev is not a directory"),
    ({"driver_root": ""}, "driver_root must be a non-empty path"),
])
def test_bad_arguments(kwargs, message):
    with pytest.raises(GpuFactsError) as e:
        nvidia_facts(**kwargs)
    assert message in str(e.value)


# --------------------------------------------------------------------------- Python 3.8

PY38 = "/root/.pyenv/versions/3.8.18/bin/python3.8"


@pytest.mark.skipif(not os.path.exists(PY38), reason="no Python 3.8 interpreter on this machine")
def test_runs_on_python38_without_pynvml(node):
    """Node-side code on the oldest supported Python, where nvidia-ml-py is not installed:
    auto falls back to nvidia-smi, nvml is refused with a clear message."""
    gpus = fakenvml.hgx(2, 2)
    node.setup(gpus)
    code = (
        "import json, sys\n"
        "sys.path.insert(0, %r)\n"
        "from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu.facts import nvidia_facts, GpuFactsError\n"
        "f = nvidia_facts(proc_path=%r, dev_path=%r, driver_root=%r, timeout=10)\n"
        "try:\n"
        "    nvidia_facts(proc_path=%r, dev_path=%r, driver_root=%r, backend='nvml')\n"
        "    err = None\n"
        "except GpuFactsError as e:\n"
        "    err = str(e)\n"
        "print(json.dumps({'facts': f, 'nvml_error': err}))\n"
    ) % (COLLECTIONS_ROOT, node.proc, node.dev, node.driver.root,
         node.proc, node.dev, node.driver.root)
    out = subprocess.run([PY38, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         universal_newlines=True, timeout=60, env=dict(os.environ), check=False)
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert res["facts"]["probe"]["backend"] == "nvidia_smi"
    assert res["facts"]["probe"]["status"] == "ok"
    assert len(res["facts"]["device_ids"]) == 2 + 4
    assert "nvidia-ml-py" in res["nvml_error"]


def test_nvidia_smi_unknown_error_exit_status(node):
    """NVML_ERROR_UNKNOWN (999) does not fit an exit status: nvidia-smi exits 255."""
    node.setup([fakenvml.gpu(0)], init_error="NVML_ERROR_UNKNOWN")
    proc = subprocess.run([node.driver.smi, "-q", "-x"], stdout=subprocess.PIPE, check=False,
                          env=dict(os.environ, LD_LIBRARY_PATH=node.driver.libdir))
    assert proc.returncode == 255
    assert proc.stdout.startswith(b"Failed to initialize NVML: Unknown Error")
    f = node.facts(backend="nvidia_smi")
    assert f["probe"]["status"] == "error" and f["probe"]["error_code"] == "NVML_ERROR_UNKNOWN"


def test_dev_char_links_checked_against_real_nodes(tmp_path):
    """/dev/char/<major>:<minor> links: present and right, dangling, or missing."""
    import os
    import stat as st_mod

    from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu.facts import dev_char_link_ok

    dev = tmp_path / "dev"
    (dev / "char").mkdir(parents=True)
    os.mknod(str(dev / "nvidiactl"), st_mod.S_IFCHR | 0o666, os.makedev(195, 255))
    os.mknod(str(dev / "nvidia0"), st_mod.S_IFCHR | 0o666, os.makedev(195, 0))
    os.symlink("../nvidiactl", str(dev / "char" / "195:255"))
    os.symlink("../nvidia9", str(dev / "char" / "195:9"))  # dangling
    os.symlink("../nvidiactl", str(dev / "char" / "195:1"))  # points at the wrong device
    assert dev_char_link_ok(str(dev), 195, 255) is True
    assert dev_char_link_ok(str(dev), 195, 0) is False
    assert dev_char_link_ok(str(dev), 195, 9) is False
    assert dev_char_link_ok(str(dev), 195, 1) is False


# ------------------------------------------------------------------ hostile procfs

def test_procfs_gpus_counts_only_entries_with_a_readable_information_file(tmp_path):
    proc = fakenvml.write_procfs(str(tmp_path / "proc"), gpus=[fakenvml.gpu(0)])
    base = os.path.join(proc, "driver", "nvidia", "gpus")
    os.symlink("/nonexistent/kubegpu-gone", os.path.join(base, "0000:99:00.0"))  # dangling
    os.makedirs(os.path.join(base, "0000:9a:00.0"))  # no information file
    os.makedirs(os.path.join(base, "0000:9b:00.0"))
    os.mkfifo(os.path.join(base, "0000:9b:00.0", "information"))
    warnings = []
    found = procfs_gpus(proc, warnings)
    assert [g["minor_number"] for g in found] == [0]
    assert len(warnings) == 3
    assert all("is not counted as a GPU" in w for w in warnings)
    assert "0000:9b:00.0 is not counted as a GPU" in warnings[2] and "a FIFO" in warnings[2]


def test_driver_version_that_is_no_version_is_a_probe_error(node, tmp_path):
    node.setup([fakenvml.gpu(0, mig=False)])
    copy = node.driver.copy_to(str(tmp_path / "root"))
    root, smi = copy.root, copy.smi
    real = smi + ".real"
    os.rename(smi, real)
    with open(smi, "w") as f:
        f.write("#!/bin/sh\n'%s' \"$@\" | sed 's|<driver_version>[^<]*<|<driver_version>abc<|'\n" % real)
    os.chmod(smi, 0o755)
    f = node.facts(driver_root=root, backend="nvidia_smi")
    # Not believed from the probe: the version comes from the library's file name instead.
    assert f["driver_version"] == V and f["driver_version_source"] == "library_file"
    assert f["probe"]["status"] == "error" and "'abc'" in f["probe"]["error"]
    assert f["gpu_count"] == 1  # the GPUs it did list are kept
    assert any("'abc'" in w for w in f["warnings"])


def test_unreadable_procfs_is_never_a_silent_absent(node, tmp_path):
    node.setup([], kernel=None, dev_nodes=False)
    os.makedirs(node.proc, exist_ok=True)
    for name in ("devices", "modules"):
        path = os.path.join(node.proc, name)
        if os.path.exists(path):
            os.remove(path)
        os.mkfifo(path)
    empty = tmp_path / "empty-root"
    empty.mkdir()
    f = node.facts(driver_root=str(empty))
    assert f["present"] is False
    assert any("devices is a FIFO" in w for w in f["warnings"])
    assert any("modules is a FIFO" in w for w in f["warnings"])
    assert f["warnings"][-1].startswith("present is false, but procfs could not be fully read")


def test_readable_procfs_without_driver_has_no_warnings(node, tmp_path):
    node.setup([], kernel=None, dev_nodes=False)
    empty = tmp_path / "empty-root"
    empty.mkdir()
    f = node.facts(driver_root=str(empty))
    assert f["present"] is False and f["warnings"] == []


@pytest.mark.parametrize("digits", ["\u00b2", "\u0663", "\uff12"])
def test_procfs_device_minor_that_is_not_ascii_digits_is_unknown(tmp_path, digits):
    """'²'.isdigit() is True but int('²') raises: such a "Device Minor:" is no minor number
    (null), the GPU is still counted from procfs and sorts after those with a minor."""
    proc = fakenvml.write_procfs(str(tmp_path / "proc"), gpus=[fakenvml.gpu(0)])
    base = os.path.join(proc, "driver", "nvidia", "gpus")
    os.makedirs(os.path.join(base, "0000:9c:00.0"))
    with open(os.path.join(base, "0000:9c:00.0", "information"), "w") as f:
        f.write("Model: \t\t NVIDIA H100 80GB HBM3\nDevice Minor: \t %s\nBus Location: \t 0000:9c:00.0\n" % digits)
    warnings = []
    found = procfs_gpus(proc, warnings)
    assert [(g["pci_bus_id"], g["minor_number"]) for g in found][-1] == ("0000:9c:00.0", None)
    assert [g["minor_number"] for g in found] == [0, None] and not warnings
