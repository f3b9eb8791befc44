# -*- coding: utf-8 -*-
"""Unit tests for plugins/module_utils/checkpoint/sync.py on real-shaped checkpoint fixtures."""
import json
import os
import shutil
import stat
import subprocess
import sys
import threading
import time

import pytest

from ansible_collections.kubegpu.fleet.plugins.module_utils.checkpoint import sync as ck
from ansible_collections.kubegpu.fleet.plugins.module_utils._common.fileutil import backup_file

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", "..", "..", ".."))
FIX = os.path.join(REPO, "tests", "fixtures", "checkpoint")

from ansible_collections.kubegpu.fleet.tests.fixtures.checkpoint.checkpoint_ids import (  # noqa: E402  pylint: disable=wrong-import-position
    GPU_A, GPU_B, GPU_C, GPU_D, GPU_NEW, MIG_1, MIG_2, MIG_3)
LEGACY = ["MIG-%s/%d/0" % (GPU_A, gi) for gi in (7, 8, 9)]


def fixture_bytes(name):
    with open(os.path.join(FIX, name), "rb") as f:
        return f.read()


def smi_ids(name):
    with open(os.path.join(FIX, "nvidia-smi", name)) as f:
        ids, problems = ck.parse_nvidia_smi_list(f.read())
    assert problems == []
    return ids


def parse(name):
    return ck.parse_checkpoint(fixture_bytes(name))


# --------------------------------------------------------------------------- parsing

def test_v1_kubelet_119_list_device_ids():
    p = parse("v1_k8s119.json")
    assert p["format"] == "v1"
    assert p["boot_id"] is None
    assert p["checksum"] == 2842113574
    assert p["registered"] == {"example.com/foo": ["foo-0", "foo-1"],
                               "nvidia.com/gpu": [GPU_A, GPU_B]}
    assert p["entries"][0] == {"pod_uid": "0f1e2d3c-4b5a-4697-8879-6a5b4c3d2e1f",
                               "container": "cuda", "resource": "nvidia.com/gpu",
                               "device_ids": [GPU_A], "numa": None}
    assert p["entries"][1]["resource"] == "example.com/foo"


def test_v2_per_numa_map_flattens_in_numa_order():
    p = parse("v2_numa.json")
    assert p["format"] == "v2"
    infer = [e for e in p["entries"] if e["container"] == "infer"][0]
    assert infer["numa"] == {"0": [GPU_C], "1": [GPU_D]}
    assert infer["device_ids"] == [GPU_C, GPU_D]
    assert p["registered"]["amd.com/gpu"] == ["0000:c1:00.0", "0000:c2:00.0"]


def test_numa_keys_sort_numerically_including_no_topology():
    doc = {"Data": {"PodDeviceEntries": [{
        "PodUID": "u", "ContainerName": "c", "ResourceName": "nvidia.com/gpu",
        "DeviceIDs": {"10": [GPU_D], "2": [GPU_C], "-1": [GPU_A]}, "AllocResp": None}],
        "RegisteredDevices": None}, "Checksum": 0}
    p = ck.parse_checkpoint(json.dumps(doc))
    assert p["entries"][0]["device_ids"] == [GPU_A, GPU_C, GPU_D]
    assert list(p["entries"][0]["numa"]) == ["-1", "2", "10"]
    assert p["registered"] == {}


def test_null_entries_and_null_resource_list():
    p = parse("v2_null_entries.json")
    assert p["entries"] == []
    assert p["registered"] == {"nvidia.com/gpu": [GPU_A, GPU_B], "nvidia.com/mig-1g.10gb": []}
    # Nothing tells v1 from v2 here.
    assert p["format"] == "unknown"


def test_boot_id_key_is_accepted_and_means_v2():
    p = parse("v2_bootid.json")
    assert p["boot_id"] == "4f9c6ad2-8b57-4c3e-9d1a-7e2f0b6c5a48"
    assert p["format"] == "v2"
    assert p["entries"][0]["numa"] == {"-1": [GPU_B]}
    doc = json.loads(fixture_bytes("v2_null_entries.json"))
    doc["BootID"] = "x"
    assert ck.parse_checkpoint(json.dumps(doc))["format"] == "v2"


def test_unknown_extra_keys_are_ignored():
    doc = json.loads(fixture_bytes("v2_numa.json"))
    doc["FutureField"] = {"a": 1}
    doc["Data"]["Other"] = [1, 2]
    doc["Data"]["PodDeviceEntries"][0]["Extra"] = True
    p = ck.parse_checkpoint(json.dumps(doc).encode())
    assert p == parse("v2_numa.json")


@pytest.mark.parametrize("name, fragment", [
    ("bad_truncated.json", "invalid JSON"),
    ("bad_empty.json", "file is empty"),
    ("bad_cpu_manager_state.json", "not a kubelet device-manager checkpoint"),
    ("bad_deviceids_string.json",
     "Data.PodDeviceEntries[0].DeviceIDs must be a list (v1) or a NUMA-node map (v2), got string"),
    ("bad_registered_number.json",
     "Data.RegisteredDevices['nvidia.com/gpu'][1] must be a string, got number"),
    ("bad_mixed_formats.json", "mixes list (v1) and NUMA-map (v2)"),
    ("bad_numa_key.json", "NUMA node key 'numa0'"),
])
def test_malformed_fixtures_raise_a_clear_error(name, fragment):
    with pytest.raises(ck.MalformedCheckpoint) as e:
        parse(name)
    assert fragment in str(e.value)
    assert isinstance(e.value, ck.CheckpointError) and isinstance(e.value, ValueError)


@pytest.mark.parametrize("data, fragment", [
    (b"\xff\xfe{}", "not UTF-8"),
    (b"[]", "top level must be a JSON object, got list"),
    (b'{"Data": []}', "Data must be an object, got list"),
    (b'{"Data": {}, "Checksum": "12"}', "Checksum must be an integer"),
    (b'{"Data": {}, "Checksum": true}', "Checksum must be an integer"),
    (b'{"Data": {}, "BootID": 5}', "BootID must be a string"),
    (b'{"Data": {"PodDeviceEntries": {}}}', "PodDeviceEntries must be a list or null"),
    (b'{"Data": {"PodDeviceEntries": [5]}}', "PodDeviceEntries[0] must be an object"),
    (b'{"Data": {"PodDeviceEntries": [{"DeviceIDs": []}]}}', "has no ResourceName"),
    (b'{"Data": {"PodDeviceEntries": [{"ResourceName": "r"}]}}', "has no DeviceIDs"),
    (b'{"Data": {"PodDeviceEntries": [{"ResourceName": 1, "DeviceIDs": []}]}}',
     "ResourceName must be a string, got number"),
    (b'{"Data": {"PodDeviceEntries": [{"ResourceName": "r", "PodUID": [], "DeviceIDs": []}]}}',
     "PodUID must be a string"),
    (b'{"Data": {"PodDeviceEntries": [{"ResourceName": "r", "DeviceIDs": [], "AllocResp": 1}]}}',
     "AllocResp must be a base64 string"),
    (b'{"Data": {"RegisteredDevices": []}}', "RegisteredDevices must be an object"),
    (b'{"Data": {"RegisteredDevices": {"r": "GPU-x"}}}', "must be a list of strings"),
    (b'{"Data": {}, "Checksum": NaN}', "invalid JSON number NaN"),
    (b'{"Data": {}, "Checksum": -Infinity}', "invalid JSON number -Infinity"),
    (b"\xef\xbb\xbf{\"Data\": {}}", "invalid JSON"),
    (b"   \n\t ", "file is empty"),
])
def test_unexpected_types_raise_a_clear_error(data, fragment):
    with pytest.raises(ck.MalformedCheckpoint) as e:
        ck.parse_checkpoint(data)
    assert fragment in str(e.value)


def test_deep_nesting_is_a_clean_error():
    with pytest.raises(ck.MalformedCheckpoint) as e:
        ck.parse_checkpoint(b"[" * 200000 + b"]" * 200000)
    assert "nested too deeply" in str(e.value) or "invalid JSON" in str(e.value)


def test_oversized_bytes_are_refused_without_parsing():
    with pytest.raises(ck.MalformedCheckpoint) as e:
        ck.parse_checkpoint(b" " * (ck.MAX_CHECKPOINT_BYTES + 1))
    assert "larger than any device checkpoint" in str(e.value)


def test_non_bytes_input_is_a_clean_error():
    with pytest.raises(ck.MalformedCheckpoint):
        ck.parse_checkpoint(12)


# --------------------------------------------------------------------------- ids

@pytest.mark.parametrize("dev, base, kind", [
    (GPU_A, GPU_A, "gpu"),
    (GPU_A + "::3", GPU_A, "gpu"),
    (MIG_1, MIG_1, "mig"),
    (MIG_1 + "::0", MIG_1, "mig"),
    (LEGACY[0], LEGACY[0], "mig-legacy"),
    (LEGACY[0] + "::12", LEGACY[0], "mig-legacy"),
    ("0", "0", "other"),
    ("1::2", "1", "other"),
    ("GPU-", "GPU-", "other"),
    ("0000:c1:00.0", "0000:c1:00.0", "other"),
])
def test_classify_and_base(dev, base, kind):
    assert ck.base_id(dev) == base
    assert ck.classify_id(dev) == kind
    assert ck.normalize_id(dev) == base.strip().lower()


def test_resource_globs_are_case_sensitive_shell_patterns():
    pats = ["nvidia.com/*"]
    assert ck.resource_matches("nvidia.com/gpu", pats)
    assert ck.resource_matches("nvidia.com/mig-1g.10gb", pats)
    assert not ck.resource_matches("amd.com/gpu", pats)
    assert not ck.resource_matches("NVIDIA.com/gpu", pats)
    assert ck.resource_matches("example.com/foo", ["amd.com/*", "example.com/f?o"])
    assert not ck.resource_matches("nvidia.com/gpu", [])


# --------------------------------------------------------------------------- analysis

def test_v1_matching_node_is_not_stale_and_other_resources_are_ignored():
    a = ck.analyze(parse("v1_k8s119.json"), [GPU_A, GPU_B])
    assert a["stale"] is False and a["stale_ids"] == []
    assert a["registered"] == {"nvidia.com/gpu": [GPU_A, GPU_B]}
    assert [x["resource"] for x in a["allocated"]] == ["nvidia.com/gpu"]
    assert a["checked_ids"] == 2
    assert a["unverifiable_ids"] == []


def test_v1_replaced_gpu_is_stale():
    a = ck.analyze(parse("v1_k8s119.json"), [GPU_A, GPU_NEW])
    assert a["stale_ids"] == [GPU_B] and a["stale"] is True


def test_v2_replaced_gpu_in_allocation_and_registration():
    a = ck.analyze(parse("v2_numa.json"), smi_ids("a100x4_replaced.txt"))
    assert a["stale_ids"] == [GPU_B]
    assert a["allocated"][0] == {"pod_uid": "6f1c1c9e-3f5e-4c55-9a43-6c1f8a0e8f10",
                                 "container": "trainer", "resource": "nvidia.com/gpu",
                                 "device_ids": [GPU_A, GPU_B]}
    assert "amd.com/gpu" not in a["registered"]
    assert len(a["allocated"]) == 2


def test_v2_matching_node():
    a = ck.analyze(parse("v2_numa.json"), smi_ids("a100x4.txt"))
    assert a["stale"] is False and a["checked_ids"] == 4


def test_explicit_resource_names_bring_other_vendors_in():
    # amd ids are PCI addresses, not UUIDs: never stale, reported as unverifiable.
    a = ck.analyze(parse("v2_numa.json"), smi_ids("a100x4.txt"), ["amd.com/gpu"])
    assert a["stale"] is False
    assert a["unverifiable_ids"] == ["0000:c1:00.0", "0000:c2:00.0"]
    assert list(a["registered"]) == ["amd.com/gpu"]


def test_comparison_ignores_case_and_whitespace_in_node_ids():
    a = ck.analyze(parse("v1_k8s119.json"), [" " + GPU_A.upper(), GPU_B.lower() + "\n"])
    assert a["stale"] is False


def test_replicas_compare_on_base_uuid():
    node = [GPU_A, GPU_B, MIG_1]
    a = ck.analyze(parse("v2_replicas.json"), node)
    assert a["stale"] is False and a["checked_ids"] == 10
    a = ck.analyze(parse("v2_replicas.json"), [GPU_A, MIG_1])
    assert a["stale_ids"] == sorted(GPU_B + "::%d" % i for i in range(4))
    a = ck.analyze(parse("v2_replicas.json"), [GPU_A, GPU_B])
    assert a["stale_ids"] == [MIG_1 + "::0", MIG_1 + "::1"]
    # Replica suffixes on the node side are tolerated too.
    assert not ck.analyze(parse("v2_replicas.json"),
                          [GPU_A + "::0", GPU_B + "::1", MIG_1 + "::0"])["stale"]


def test_mig_mixed_matches_and_relayout_is_stale():
    assert not ck.analyze(parse("v2_mig_mixed.json"), smi_ids("a100_mig_mixed.txt"))["stale"]
    a = ck.analyze(parse("v2_mig_mixed.json"), smi_ids("a100_mig_relayout.txt"))
    assert a["stale_ids"] == sorted([MIG_1, MIG_2])
    assert sorted(a["registered"]) == ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb",
                                       "nvidia.com/mig-3g.40gb"]


def test_legacy_mig_ids_match_only_the_exact_legacy_id():
    # Same pre-R470 driver and layout: present.
    a = ck.analyze(parse("v1_mig_legacy.json"), smi_ids("a100_mig_r450_legacy.txt"))
    assert a["stale"] is False and a["checked_ids"] == 4
    # Driver upgraded to R470+: the parent GPU is there but the node now reports MIG-<uuid>;
    # the legacy ids no longer exist for the device plugin.
    a = ck.analyze(parse("v1_mig_legacy.json"), [GPU_A, GPU_B, MIG_1, MIG_2, MIG_3])
    assert a["stale_ids"] == sorted(LEGACY)
    # One legacy slice destroyed.
    a = ck.analyze(parse("v1_mig_legacy.json"), [GPU_A, GPU_B] + LEGACY[:2])
    assert a["stale_ids"] == [LEGACY[2]]


def test_index_strategy_ids_are_unverifiable_not_stale():
    a = ck.analyze(parse("v2_index_ids.json"), smi_ids("a100x4.txt"))
    assert a["stale"] is False
    assert a["unverifiable_ids"] == ["0", "1"]
    # When the node list carries them they simply match.
    a = ck.analyze(parse("v2_index_ids.json"), ["0", "1"])
    assert a["unverifiable_ids"] == [] and a["stale"] is False


def test_empty_node_list_makes_every_uuid_stale():
    a = ck.analyze(parse("v2_numa.json"), [])
    assert a["stale_ids"] == sorted([GPU_A, GPU_B, GPU_C, GPU_D])


def test_describe_marks_stale_ids():
    p = parse("v2_numa.json")
    a = ck.analyze(p, smi_ids("a100x4_replaced.txt"))
    text = ck.describe("/k/ckpt", p, a, size=1322)
    assert text.startswith("# /k/ckpt (format v2, 1322 bytes)\n")
    assert "registered nvidia.com/gpu: %s %s [stale] %s" % (GPU_A, GPU_B, GPU_C) in text
    assert "allocated pod 6f1c1c9e-3f5e-4c55-9a43-6c1f8a0e8f10 container trainer" in text
    assert text.endswith("stale: %s\n" % GPU_B)
    assert "amd.com" not in text


# --------------------------------------------------------------------------- nvidia-smi -L

def test_parse_nvidia_smi_list_forms():
    assert smi_ids("a100x4.txt") == [GPU_A, GPU_B, GPU_C, GPU_D]
    assert smi_ids("a100_mig_mixed.txt") == [GPU_A, MIG_1, MIG_2, MIG_3, GPU_C]
    assert smi_ids("a100_mig_r450_legacy.txt") == [GPU_A] + LEGACY + [GPU_B]


@pytest.mark.parametrize("name", ["lost_gpu.txt", "no_devices.txt", "no_driver.txt"])
def test_parse_nvidia_smi_list_reports_lines_it_cannot_vouch_for(name):
    with open(os.path.join(FIX, "nvidia-smi", name)) as f:
        ids, problems = ck.parse_nvidia_smi_list(f.read())
    assert problems
    if name == "lost_gpu.txt":
        assert ids == [GPU_A, GPU_C]
        assert problems == ["Unable to determine the device handle for GPU0000:1B:00.0: "
                            "Unknown Error"]


def _script(tmp_path, name, body):
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def test_list_node_devices_trusts_a_clean_listing(tmp_path):
    smi = _script(tmp_path, "nvidia-smi", "cat '%s'\n" % os.path.join(FIX, "nvidia-smi",
                                                                      "a100_mig_mixed.txt"))
    assert ck.list_node_devices(smi, 10) == ([GPU_A, MIG_1, MIG_2, MIG_3, GPU_C], None)


def test_list_node_devices_refuses_failures(tmp_path):
    smi = _script(tmp_path, "smi-fail", "cat '%s'\nexit 9\n" % os.path.join(
        FIX, "nvidia-smi", "no_driver.txt"))
    ids, err = ck.list_node_devices(smi, 10)
    assert ids == [] and "exited 9" in err and "couldn't communicate" in err
    smi = _script(tmp_path, "smi-partial", "cat '%s'\n" % os.path.join(
        FIX, "nvidia-smi", "lost_gpu.txt"))
    ids, err = ck.list_node_devices(smi, 10)
    assert ids == [] and "Unable to determine the device handle" in err
    smi = _script(tmp_path, "smi-empty", "exit 0\n")
    assert ck.list_node_devices(smi, 10) == ([], "%s -L listed no GPUs" % smi)
    ids, err = ck.list_node_devices(str(tmp_path / "absent"), 10)
    assert ids == [] and "cannot run" in err


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    # A zombie still answers kill(0); it no longer runs.
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except (IOError, OSError):
        return False


def test_list_node_devices_kills_a_hung_nvidia_smi_and_its_children(tmp_path):
    """A hung NVML: the process ignores SIGTERM and a child keeps the output pipe open."""
    pidfile = tmp_path / "pids"
    smi = _script(tmp_path, "smi-hang",
                  "trap '' TERM\nsleep 300 &\necho $$ $! > '%s'\nwait\n" % pidfile)
    start = time.monotonic()
    try:
        ids, err = ck.list_node_devices(smi, 1)
        elapsed = time.monotonic() - start
        assert ids == [] and "did not answer within 1s" in err
        # Bounded, not hung: a safety bound only, so a contended machine cannot fail it (the
        # script never answers: "did not answer" above proves the wait gave up).
        assert elapsed < 60
        pids = [int(x) for x in pidfile.read_text().split()]
        deadline = time.monotonic() + 30  # waits for the condition; the deadline only bounds a failure
        while any(_pid_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(_pid_alive(p) for p in pids)
    finally:
        if pidfile.exists():
            for p in pidfile.read_text().split():
                try:
                    os.kill(int(p), 9)
                except OSError:
                    pass


# --------------------------------------------------------------------------- files

def test_read_checkpoint_missing_directory_and_oversized(tmp_path):
    assert ck.read_checkpoint(str(tmp_path / "absent")) is None
    with pytest.raises(ck.MalformedCheckpoint) as e:
        ck.read_checkpoint(str(tmp_path))
    assert "not a regular file" in str(e.value)
    big = tmp_path / "big"
    with open(str(big), "wb") as f:
        f.truncate(ck.MAX_CHECKPOINT_BYTES + 1)  # sparse: no disk used
    with pytest.raises(ck.MalformedCheckpoint) as e:
        ck.read_checkpoint(str(big))
    assert "larger than any device checkpoint" in str(e.value)
    good = tmp_path / "ckpt"
    good.write_bytes(fixture_bytes("v2_numa.json"))
    assert ck.read_checkpoint(str(good)) == fixture_bytes("v2_numa.json")


def test_backup_and_remove_keeps_a_0600_byte_identical_copy(tmp_path):
    path = tmp_path / "kubelet_internal_checkpoint"
    data = fixture_bytes("v2_numa.json")
    path.write_bytes(data)
    path.chmod(0o644)
    dest = ck.backup_and_remove(str(path), data, backup_func=backup_file)
    assert not path.exists()
    assert os.path.dirname(dest) == str(tmp_path)
    assert os.path.basename(dest).startswith("kubelet_internal_checkpoint.")
    assert stat.S_IMODE(os.stat(dest).st_mode) == 0o600
    with open(dest, "rb") as f:
        assert f.read() == data


def test_backup_and_remove_without_backup(tmp_path):
    path = tmp_path / "ckpt"
    path.write_bytes(b"{}")
    assert ck.backup_and_remove(str(path), b"{}") is None
    assert os.listdir(str(tmp_path)) == []


def test_backup_and_remove_refuses_a_file_that_changed(tmp_path):
    path = tmp_path / "ckpt"
    path.write_bytes(b'{"Data":{}, "Checksum": 2}')
    with pytest.raises(ck.CheckpointChanged) as e:
        ck.backup_and_remove(str(path), b'{"Data":{}, "Checksum": 1}', backup_func=backup_file)
    assert "changed since it was read" in str(e.value)
    assert path.read_bytes() == b'{"Data":{}, "Checksum": 2}'
    assert os.listdir(str(tmp_path)) == ["ckpt"]
    with pytest.raises(ck.CheckpointChanged):
        ck.backup_and_remove(str(tmp_path / "gone"), b"{}")


def test_backup_and_remove_detects_a_write_during_the_backup(tmp_path):
    """kubelet rewriting the file between the check and the copy: nothing is removed."""
    path = tmp_path / "ckpt"
    path.write_bytes(b"old")

    def racing_backup(p):
        with open(p, "wb") as f:
            f.write(b"new")
        return backup_file(p)

    with pytest.raises(ck.CheckpointChanged) as e:
        ck.backup_and_remove(str(path), b"old", backup_func=racing_backup)
    assert "backup of the new content kept at" in str(e.value)
    assert path.read_bytes() == b"new"


def test_wait_for_driver(tmp_path):
    assert ck.wait_for_driver(str(tmp_path), 0) is False
    marker = tmp_path / "driver" / "nvidia" / "version"

    def load():
        time.sleep(0.3)
        marker.parent.mkdir(parents=True)
        marker.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.172.08\n")

    t = threading.Thread(target=load)
    t.start()
    try:
        assert ck.wait_for_driver(str(tmp_path), 30, interval=0.05) is True
    finally:
        t.join()
    assert ck.wait_for_driver(str(tmp_path), 0) is True


def test_module_is_importable_with_the_standard_library_alone(tmp_path):
    """The boot-time guard imports this file outside Ansible, under an isolated Python."""
    src = os.path.join(REPO, "plugins", "module_utils", "checkpoint", "sync.py")
    fixture = os.path.join(FIX, "v1_k8s119.json")
    installed = tmp_path / "guard"  # as checkpoint.py beside fileutil.py, as the checkpoint_guard role does
    installed.mkdir()
    shutil.copyfile(src, str(installed / "checkpoint.py"))
    shutil.copyfile(os.path.join(REPO, "plugins", "module_utils", "_common", "fileutil.py"),
                    str(installed / "fileutil.py"))
    code = ("import sys; sys.path.insert(0, {d!r}); import checkpoint; "
            "assert not any(m.startswith('ansible') for m in sys.modules); "
            "assert checkpoint.fileutil.__file__ == {f!r}; "
            "print(checkpoint.analyze(checkpoint.parse_checkpoint(open({x!r},'rb').read()),"
            " [{g!r}])['stale_ids'])").format(d=str(installed), f=str(installed / "fileutil.py"),
                                              x=fixture, g=GPU_A)
    out = subprocess.check_output([sys.executable, "-I", "-B", "-c", code],
                                  universal_newlines=True)
    assert out.strip() == repr([GPU_B])
