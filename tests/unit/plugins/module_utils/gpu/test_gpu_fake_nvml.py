# -*- coding: utf-8 -*-
"""The fake libnvidia-ml.so.1 itself, driven through the real pynvml.

Each case runs in a forked child (gpu_probe.run_in_child) so pynvml's process-global state and
any hang stay out of the test process.
"""
from __future__ import absolute_import, division, print_function

import ctypes
import os

import pytest

from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu.probe import run_in_child

from ansible_collections.kubegpu.fleet.lab.fakes.nvml import fakenvml


@pytest.fixture(scope="module")
def lib():
    return fakenvml.build().library


@pytest.fixture
def scenario(tmp_path, monkeypatch):
    path = str(tmp_path / "nvml.json")
    monkeypatch.setenv("KUBEGPU_FAKE_NVML_CONFIG", path)
    return path


def in_child(lib, fn, timeout=10):
    def target(emit):
        import pynvml  # pylint: disable=import-error
        pynvml.nvmlLib = ctypes.CDLL(lib)
        return fn(pynvml)
    out = run_in_child(target, timeout)
    if out.status == "ok" and not out.value["ok"]:
        raise AssertionError(out.value["error"])
    return out


def code_of(pynvml, call, *args):
    try:
        call(*args)
    except pynvml.NVMLError as e:
        return e.value
    return 0


def test_calls_before_init_and_refcounted_shutdown(lib, scenario):
    fakenvml.write_scenario(scenario, [fakenvml.gpu(0)])

    def body(p):
        res = [code_of(p, p.nvmlDeviceGetCount)]
        p.nvmlInit()
        p.nvmlInit()
        p.nvmlShutdown()
        res.append(p.nvmlDeviceGetCount())       # still initialised once
        p.nvmlShutdown()
        res.append(code_of(p, p.nvmlDeviceGetCount))
        res.append(code_of(p, p.nvmlShutdown))
        return res
    out = in_child(lib, body)
    assert out.value["value"] == [1, 1, 1, 1]  # UNINITIALIZED, count, UNINITIALIZED x2


def test_handles_by_uuid_and_pci_and_mig_navigation(lib, scenario):
    fakenvml.write_scenario(scenario, [fakenvml.gpu(0, mig=False), fakenvml.gpu(1, profiles=["2g.20gb", "1c.2g.20gb"])])

    def body(p):
        p.nvmlInit()
        g1 = p.nvmlDeviceGetHandleByUUID(fakenvml.gpu_uuid(1))
        by_pci = p.nvmlDeviceGetHandleByPciBusId("0000:28:00.0")
        m = p.nvmlDeviceGetMigDeviceHandleByIndex(g1, 1)
        parent = p.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(m)
        attrs = p.nvmlDeviceGetAttributes(m)
        mem2 = p.nvmlDeviceGetMemoryInfo(g1, version=p.nvmlMemory_v2)
        return {
            "pci_index": p.nvmlDeviceGetIndex(by_pci),
            "uuid_index": p.nvmlDeviceGetIndex(g1),
            "mig_by_uuid": p.nvmlDeviceGetUUID(p.nvmlDeviceGetHandleByUUID(fakenvml.mig_uuid(1, 0))),
            "is_mig": int(p.nvmlDeviceIsMigDeviceHandle(m).value),
            "parent_uuid": p.nvmlDeviceGetUUID(parent),
            "mig_name": p.nvmlDeviceGetName(m),
            "slices": [attrs.gpuInstanceSliceCount, attrs.computeInstanceSliceCount],
            "slot2": code_of(p, p.nvmlDeviceGetMigDeviceHandleByIndex, g1, 2),
            "slot9": code_of(p, p.nvmlDeviceGetMigDeviceHandleByIndex, g1, 9),
            "attrs_full_gpu": code_of(p, p.nvmlDeviceGetAttributes, g1),
            "gi_full_gpu": code_of(p, p.nvmlDeviceGetGpuInstanceId, g1),
            "mig_on_gpu0": code_of(p, p.nvmlDeviceGetMigDeviceHandleByIndex, p.nvmlDeviceGetHandleByIndex(0), 0),
            "unknown_uuid": code_of(p, p.nvmlDeviceGetHandleByUUID, "GPU-nope"),
            "bad_index": code_of(p, p.nvmlDeviceGetHandleByIndex, 7),
            "mem2": [mem2.total >> 20, mem2.reserved >> 20],
            "cc": list(p.nvmlDeviceGetCudaComputeCapability(g1)),
            "arch": p.nvmlDeviceGetArchitecture(g1),
        }
    v = in_child(lib, body).value["value"]
    assert v["pci_index"] == 1 and v["uuid_index"] == 1
    assert v["mig_by_uuid"] == fakenvml.mig_uuid(1, 0)
    assert v["is_mig"] == 1 and v["parent_uuid"] == fakenvml.gpu_uuid(1)
    assert v["mig_name"] == "NVIDIA H100 80GB HBM3 MIG 1c.2g.20gb"
    assert v["slices"] == [2, 1]
    assert v["slot2"] == 6 and v["slot9"] == 2          # NOT_FOUND (empty slot), INVALID_ARGUMENT
    assert v["attrs_full_gpu"] == 3 and v["gi_full_gpu"] == 3  # NOT_SUPPORTED
    assert v["mig_on_gpu0"] == 6
    assert v["unknown_uuid"] == 6 and v["bad_index"] == 2
    assert v["mem2"] == [81559, 329]
    assert v["cc"] == [9, 0] and v["arch"] == 9  # Hopper


def test_error_injection_names_and_numbers(lib, scenario):
    g = fakenvml.gpu(0, errors={"nvmlDeviceGetSerial": "INSUFFICIENT_POWER", "nvmlDeviceGetPciInfo_v3": 14})
    fakenvml.write_scenario(scenario, [g, fakenvml.gpu(1)], errors={"nvmlDeviceGetName": "NVML_ERROR_TIMEOUT"})

    def body(p):
        p.nvmlInit()
        h0, h1 = p.nvmlDeviceGetHandleByIndex(0), p.nvmlDeviceGetHandleByIndex(1)
        return [code_of(p, p.nvmlDeviceGetSerial, h0), code_of(p, p.nvmlDeviceGetPciInfo, h0),
                code_of(p, p.nvmlDeviceGetSerial, h1), code_of(p, p.nvmlDeviceGetName, h1),
                p.nvmlErrorString(14)]
    assert in_child(lib, body).value["value"] == [8, 14, 0, 10, "Corrupted infoROM"]


def test_scenario_reread_on_new_session(lib, scenario):
    fakenvml.write_scenario(scenario, [fakenvml.gpu(0)])

    def body(p):
        p.nvmlInit()
        first = p.nvmlDeviceGetCount()
        fakenvml.write_scenario(scenario, fakenvml.hgx(3, 0))
        same = p.nvmlDeviceGetCount()
        p.nvmlShutdown()
        p.nvmlInit()
        return [first, same, p.nvmlDeviceGetCount()]
    assert in_child(lib, body).value["value"] == [1, 1, 3]


@pytest.mark.parametrize("extra,code", [
    ({"kernel_module_version": "570.158.01"}, 18),
    ({"kernel_module_version": None}, 9),
    ({"kernel_module_version_file": "/nonexistent/driver/nvidia/version"}, 9),
    ({"kernel_module_version_file": "/etc/hostname"}, 9),
    ({"init_error": "NVML_ERROR_NO_PERMISSION"}, 4),
    ({"driver_version": "575.57.08", "kernel_module_version": "575.57.08"}, 0),
])
def test_init_mechanics(lib, scenario, extra, code):
    fakenvml.write_scenario(scenario, [fakenvml.gpu(0)], **extra)
    assert in_child(lib, lambda p: code_of(p, p.nvmlInit)).value["value"] == code


def test_pre_550_kernel_module_line(lib, scenario, tmp_path):
    version = tmp_path / "version"
    version.write_text(fakenvml.nvrm_line(fakenvml.DEFAULT_VERSION, open_module=False))
    fakenvml.write_scenario(scenario, [fakenvml.gpu(0)], kernel_module_version_file=str(version))
    assert in_child(lib, lambda p: code_of(p, p.nvmlInit)).value["value"] == 0


def test_missing_scenario_means_no_driver(lib, scenario):
    assert not os.path.exists(scenario)
    assert in_child(lib, lambda p: code_of(p, p.nvmlInit)).value["value"] == 9


def test_broken_scenario_is_unknown_error(lib, scenario):
    with open(scenario, "w") as f:
        f.write('{"gpus": [')
    assert in_child(lib, lambda p: code_of(p, p.nvmlInit)).value["value"] == 999


@pytest.mark.parametrize("version,hangs", [
    ("570.86.15", False), ("570.124.06", True), ("570.148.08", True), ("570.158.01", True),
    ("570.172.08", False), ("575.57.08", False),
])
def test_r570_range_on_mixed_node(lib, scenario, version, hangs):
    gpus = [fakenvml.gpu(0, profiles=["1g.10gb"]), fakenvml.gpu(1, mig=False)]
    fakenvml.write_scenario(scenario, gpus, driver_version=version, kernel_module_version=version)
    out = in_child(lib, lambda p: code_of(p, p.nvmlInit), timeout=0.5 if hangs else 10)
    assert out.status == ("hung" if hangs else "ok")
    if hangs:
        assert out.stage is None  # the child never got past nvmlInit to report anything


def test_hang_holds_the_library_lock(lib, scenario):
    """A hung call blocks every other NVML caller in the process, as with the real RM lock."""
    fakenvml.write_scenario(scenario, [fakenvml.gpu(0)], hang={"function": "nvmlDeviceGetSerial"})

    def body(p):
        import select
        import threading
        import time
        p.nvmlInit()
        h = p.nvmlDeviceGetHandleByIndex(0)
        # The second call must start only once the first one holds the lock and hangs: the fake
        # logs "hanging in <fn>" (KUBEGPU_FAKE_NVML_DEBUG) with the lock held; wait for that line.
        rfd, wfd = os.pipe()
        os.dup2(wfd, 2)
        os.environ["KUBEGPU_FAKE_NVML_DEBUG"] = "1"
        threading.Thread(target=p.nvmlDeviceGetSerial, args=(h,), daemon=True).start()
        seen, deadline = b"", time.monotonic() + 60  # the deadline only bounds a broken fake
        while b"hanging in nvmlDeviceGetSerial" not in seen:
            if not select.select([rfd], [], [], max(deadline - time.monotonic(), 0))[0]:
                raise RuntimeError("the first caller never reported its hang: %r" % seen)
            seen += os.read(rfd, 4096)
        body.emit.stage("second caller")
        return p.nvmlDeviceGetUUID(h)

    def target(emit):
        body.emit = emit
        import pynvml  # pylint: disable=import-error
        pynvml.nvmlLib = ctypes.CDLL(lib)
        return body(pynvml)
    # generous: the child hangs for good at the second caller; the timeout only has to outlast
    # the steps before it on a contended machine
    out = run_in_child(target, 10.0)
    assert out.status == "hung", out
    assert out.stage == "second caller"
