import os
import stat

import pytest

from ansible_collections.kubegpu.fleet.plugins.module_utils._common import fileutil
from ansible_collections.kubegpu.fleet.plugins.module_utils._common import procfs

PROC_DEVICES = """Character devices:
  1 mem
  4 /dev/vc/0
195 nvidia
234 nvidia-caps
508 nvidia-uvm
999999 bogus
junk line

Block devices:
  8 sd
"""


def test_proc_devices_both_gpu_major_names():
    d = procfs.parse_proc_devices(PROC_DEVICES)
    assert procfs.nvidia_gpu_major(d) == (195, "nvidia")
    assert procfs.char_major(d, "nvidia-uvm") == 508
    assert procfs.char_major(d, "bogus") is None and d["block"] == {"sd": [8]}
    old = procfs.parse_proc_devices(PROC_DEVICES.replace("195 nvidia\n", "195 nvidia-frontend\n"))
    assert procfs.nvidia_gpu_major(old) == (195, "nvidia-frontend")
    assert procfs.nvidia_gpu_major(procfs.parse_proc_devices("")) == (None, None)


def test_non_ascii_digits_are_not_majors_or_minors():
    """``"\u00b2".isdigit()`` is true but ``int("\u00b2")`` raises: such lines are skipped."""
    d = procfs.parse_proc_devices("Character devices:\n\u00b2 0\n195 nvidia\n\u0663 x\n")
    assert d["character"] == {"nvidia": [195]}
    assert procfs.parse_mig_minors("config \u00b2\nmonitor 2\n") == [
        {"kind": "monitor", "gpu": None, "gi": None, "ci": None, "minor": 2}]


def test_nvrm_version_lines():
    closed = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.86.15  Wed Jan 22 23:40:01 UTC 2025\n"
    open_ = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.172.08  Release Build  (dvs-builder@U16)\n"
    assert procfs.parse_nvidia_version(closed) == "570.86.15"
    assert procfs.parse_nvidia_version(open_) == "570.172.08"
    assert procfs.parse_nvidia_version("GCC version: gcc 12\n") is None


def test_modules_and_mig_minors():
    mods = procfs.parse_proc_modules("nvidia_uvm 1437696 0 - Live 0x0000000000000000\nnvidia 54009856 2 nvidia_uvm, Live 0x0\nbad\n")
    assert mods["nvidia_uvm"]["refcount"] == 0 and mods["nvidia"]["state"] == "Live" and "bad" not in mods
    mig = procfs.parse_mig_minors("config 1\nmonitor 2\ngpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\ngpuX/gi1/access 9\n")
    assert [m["kind"] for m in mig] == ["config", "monitor", "gi", "ci"]
    assert mig[3] == {"kind": "ci", "gpu": 0, "gi": 1, "ci": 0, "minor": 13}


def test_backup_is_0600_byte_identical_and_never_overwrites(tmp_path):
    src = tmp_path / "kubelet_internal_checkpoint"
    src.write_bytes(b"\x00\xffdata")
    os.chmod(str(src), 0o644)
    b1 = fileutil.backup_file(str(src))
    assert open(b1, "rb").read() == b"\x00\xffdata"
    assert stat.S_IMODE(os.stat(b1).st_mode) == 0o600
    with pytest.raises(OSError):
        fileutil.backup_file(str(src), dest=b1)
    assert fileutil.backup_file(str(src)) != b1


def test_atomic_write_keeps_mode_and_leaves_no_temp(tmp_path):
    target = tmp_path / "config.yaml"
    target.write_text("old")
    os.chmod(str(target), 0o640)
    fileutil.atomic_write(str(target), "new: true\n")
    assert target.read_text() == "new: true\n" and stat.S_IMODE(os.stat(str(target)).st_mode) == 0o640
    fileutil.atomic_write(str(tmp_path / "fresh"), b"x", mode=0o600)
    assert stat.S_IMODE(os.stat(str(tmp_path / "fresh")).st_mode) == 0o600
    assert sorted(os.listdir(str(tmp_path))) == ["config.yaml", "fresh"]
