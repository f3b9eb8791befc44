# -*- coding: utf-8 -*-
"""The Xid parser and NVIDIA's catalog on kernel logs written by real drivers.

The logs are in ../shared/reference/realworld-gpu-health/kmsg/ beside the repository (their
sources are in its SOURCES.md; they are not the project's to copy): every format the driver
writes (MIG-attributed, dmesg -T, dmesg --ctime, dmesg --decode --time-format iso, journalctl -k
with and without host, kernel-thread tags, ARM PCI domains, syslog behind a monitor's wrapper)
and one test per resolution bucket of NVIDIA's Xid catalog on the real lines that carry it.
Skipped, with a message, where the folder is absent.
"""
from __future__ import absolute_import, division, print_function

import os

import pytest

from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu import xid as gpu_xid

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", "..", "..", "..", ".."))
REF = os.path.normpath(os.path.join(REPO, "..", "shared", "reference", "realworld-gpu-health", "kmsg"))

pytestmark = pytest.mark.skipif(
    not os.path.isdir(REF), reason="real-world kernel logs not present at %s (the shared reference "
                                   "folder beside the repository)" % REF)


def _log(name):
    with open(os.path.join(REF, name), "rb") as f:
        return f.read()


def _scanprobe(xid):
    """The verbatim lines of scanprobe-collected-lines.tsv (URL <tab> line) for one Xid."""
    with open(os.path.join(REF, "scanprobe-collected-lines.tsv")) as f:
        rows = [line.rstrip("\n").split("\t", 1) for line in f if "\t" in line]
    return [text for _url, text in rows if "): %d," % xid in text]


def _gpus(data):
    events, stats = gpu_xid.parse_xid_events(data)
    assert stats["long_lines"] == 0 and stats["truncated_lines"] == 0
    return gpu_xid.aggregate(events), events


def _action(bucket_line):
    per_gpu, _events = _gpus(bucket_line)
    assert len(per_gpu) == 1, per_gpu
    return list(per_gpu.values())[0]


# --------------------------------------------------------------------------- formats

def test_every_log_format_gives_bus_id_xid_and_time():
    cases = [
        # dmesg -T: wall-clock stamp, no monotonic time
        ("gpud-xe9680-xid119-dmesg-T.log", "0000:9b:00.0", {"119": 5}, None),
        # dmesg --decode --time-format iso ("kern  :warn  : 2025-01-21T04:41:44,283302+00:00 NVRM: ...")
        ("gpud-xid13-43-dmesg-decode-iso.log", "0000:38:00.0", {"13": 16, "43": 1}, None),
        # dmesg --ctime
        ("gpud-xid13-109-dmesg-ctime.log", "0000:cb:00.0", {"13": 3, "109": 1}, None),
        # journalctl -k with the host ("Aug 10 15:36:05 gpu-node-a kernel: NVRM: ...")
        ("blog-rtxpro6000-blackwell-journal-48-171-63-154.log", "0000:55:00.0",
         {"48": 2, "171": 1, "63": 1, "154": 1}, None),
        # journalctl without the host ("kernel: NVRM: ...")
        ("ogkm-1150-b200-journal-xid45.log", "0000:dc:00.0", {"45": 2}, None),
        # plain driver text (no prefix), R580+ form without pid/name
        ("ogkm-1151-rtx5090-xid79-kernel.log", "0000:06:00.0", {"79": 1}, None),
        # a monitor's wrapper around syslog around a monotonic stamp
        ("hf-m4-tr190-xid63-p4d.log", "0000:10:1c.0", {"63": 1}, None),
        # NVIDIA's own doc example: the old record without "PCI:"
        ("nvidia-xid-doc-example-xid14.log", "0000:03:00.0", {"14": 1}, None),
        # monotonic dmesg on GB200 with PCI domains above 0000
        ("gpud-gb200-xid149-154-dmesg.log", "0009:01:00.0", {"149": 3, "154": 1}, 171167.620236),
    ]
    for name, bus, counts, first_ts in cases:
        per_gpu, events = _gpus(_log(name))
        assert per_gpu[bus]["counts"] == counts, name
        if first_ts is not None:
            assert events[0]["timestamp"] == first_ts, name
    # kernel thread tag "[ T1946]" after the stamp, and an ARM64 PCI domain (0004)
    (thread,) = _scanprobe(31)
    per_gpu, events = _gpus(thread)
    assert list(per_gpu) == ["0000:2b:00.0"] and events[0]["timestamp"] == 130.45625
    assert (events[0]["pid"], events[0]["process"]) == ("1942", "llama-bench")
    arm = [line for line in _scanprobe(79) if "0004:01:00" in line]
    assert list(_gpus(arm[0])[0]) == ["0004:01:00.0"]


def test_mig_attributed_xid_keeps_its_instance():
    """kernel_rc.c prints "(PCI:%04x:%02x:%02x GPU-I:%02u)" for an Xid attributed to a MIG GPU
    instance: the record is read, and the instance stays in the evidence."""
    per_gpu, events = _gpus(_log("nvidia-ogkm-errcont-ga100-94-95.log"))
    g = per_gpu["0000:01:00.0"]
    assert g["counts"] == {"94": 2, "95": 1}
    assert events[0]["gpu_instance"] == 5 and events[0]["compute_instance"] is None
    assert events[0]["pid"] == "7194" and events[0]["message"].startswith("Contained: CE User Channel")
    assert g["mig"] == {"GI 5": {"gpu_instance": 5, "compute_instance": None, "counts": {"94": 1}}}
    # The GPU-I + GPU-CI form (same format string, both ids)
    line = "NVRM: Xid (PCI:0000:01:00 GPU-I:05 GPU-CI:01): 94, pid=7194, Contained: CE User Channel (0x9)."
    per_gpu, events = _gpus(line)
    assert (events[0]["gpu_instance"], events[0]["compute_instance"]) == (5, 1)
    assert per_gpu["0000:01:00.0"]["mig"]["GI 5 CI 1"]["counts"] == {"94": 1}


def test_fallen_off_the_bus_without_an_xid_is_xid_79():
    """The open driver's probe writes one three-line record and no Xid (NVSentinel #155)."""
    per_gpu, events = _gpus(_log("nvsentinel-155-fallen-off-bus-no-xid.log"))
    g = per_gpu["0000:b3:00.0"]
    assert g["counts"] == {"79": 1} and g["kernel_events"] == {"fallen_off_bus": 1}
    assert g["action"] == "reboot" and g["classes"]["79"]["bucket"] == "RESTART_BM"
    assert events[0]["kind"] == "fallen_off_bus" and events[0]["timestamp"] == 1843.308145
    # /dev/kmsg escapes the record's newlines: the same record on one line
    kmsg = ("3,812,1843308145,-;NVRM: The NVIDIA GPU 0000:b3:00.0\\x0aNVRM: (PCI ID: 10de:26b5) installed "
            "in this system has\\x0aNVRM: fallen off the bus and is not responding to commands.")
    assert _action(kmsg)["counts"] == {"79": 1}
    # Beside its Xid 79 record the driver's message is the same event, counted once
    per_gpu, _events = _gpus(_log("gpud-hgx-xid79-sxid20034-dmesg.log"))
    assert per_gpu["0000:91:00.0"]["counts"] == {"79": 1}
    assert per_gpu["0000:91:00.0"]["kernel_events"] == {}


def test_nvswitch_sxid_records_classify_by_their_severity():
    events, _stats = gpu_xid.parse_xid_events(_log("gpud-hgx-xid79-sxid20034-dmesg.log"))
    switches = gpu_xid.aggregate_sxids(events)
    assert sorted(switches) == ["0000:05:00.0", "0000:06:00.0", "0000:07:00.0"]
    sw0 = switches["0000:05:00.0"]
    # two "Fatal, Link .." heads; the "Severity .." and "Data {..}" lines continue them
    assert sw0["switch"] == "nvswitch0" and sw0["counts"] == {"20034": 2}
    assert sw0["fatal"] == [20034] and sw0["action"] == "reboot"
    assert "0000:05:00.0" not in gpu_xid.aggregate(events)  # SXids are no GPU's Xids
    nonfatal = "nvidia-nvswitch3: SXid (PCI:0000:08:00.0): 20001, Non-fatal, Link 12 TX Replay Error"
    sw = gpu_xid.aggregate_sxids(gpu_xid.parse_xid_events(nonfatal)[0])["0000:08:00.0"]
    assert (sw["non_fatal"], sw["action"]) == ([20001], "ignore")
    cont_only = "nvidia-nvswitch3: SXid (PCI:0000:08:00.0): 20034, Data {0x10000000}"
    sw = gpu_xid.aggregate_sxids(gpu_xid.parse_xid_events(cont_only)[0])["0000:08:00.0"]
    assert (sw["counts"], sw["action"]) == ({"20034": 1}, "unknown")


# --------------------------------------------------------------- one test per bucket

def test_bucket_ignore():
    for line, xid in ((_log("hf-m4-tr190-xid63-p4d.log"), 63), (_scanprobe(43)[0], 43),
                      (_log("nvidia-xid-doc-example-xid14.log"), 14), (_scanprobe(38)[0], 38)):
        g = _action(line)
        assert g["classes"][str(xid)]["bucket"] == "IGNORE" and g["action"] == "ignore", xid


def test_bucket_restart_app():
    g = _action(_scanprobe(31)[0])
    assert g["classes"]["31"]["bucket"] == "RESTART_APP" and g["action"] == "restart_app"
    g = _action(_scanprobe(13)[0])
    assert g["action"] == "restart_app"
    # Xid 94, contained: only the application that hit it (MIG-attributed line)
    g = _action(_log("nvidia-ogkm-errcont-ga100-94-95.log").split(b"\n")[0])
    assert g["classes"]["94"]["bucket"] == "RESTART_APP" and g["action"] == "restart_app"


def test_bucket_workflow_xid_45():
    per_gpu, _events = _gpus(_log("ogkm-1150-b200-journal-xid45.log"))
    assert set(g["action"] for g in per_gpu.values()) == {"restart_app"}
    assert per_gpu["0000:dc:00.0"]["classes"]["45"]["bucket"] == "WORKFLOW_XID_45"


def test_bucket_reset_gpu():
    cases = (("gpud-xe9680-xid119-dmesg-T.log", "119"), ("hf-m4-tr190-xid64-p4d.log", "64"),
             ("gpud-xid13-109-dmesg-ctime.log", "109"))
    for name, xid in cases:
        g = _action(_log(name))
        assert g["classes"][xid]["bucket"] == "RESET_GPU" and g["action"] == "reset_gpu", name
        assert int(xid) in g["action_xids"]
    g = _action(_log("nvidia-ogkm-errcont-ga100-94-95.log"))
    assert g["action"] == "reset_gpu" and g["action_xids"] == [95]  # uncontained


def test_bucket_workflow_xid_48_with_its_dram_companion_171():
    g = _action(_log("blog-rtxpro6000-blackwell-journal-48-171-63-154.log"))
    assert g["classes"]["48"]["bucket"] == "WORKFLOW_XID_48"
    assert g["classes"]["171"]["action"] == "reset_gpu" and "companion of Xid 48" in g["classes"]["171"]["meaning"]
    assert g["classes"]["63"]["action"] == "ignore"
    # Xid 154 "to 0x4 (Drain and Reset)": the driver's verdict in the log, a reset
    assert g["recovery_action"] == "reset_gpu"
    assert g["action"] == "reset_gpu" and g["action_xids"] == [48, 171, 154]
    for line in _scanprobe(48):
        assert _action(line)["action"] == "reset_gpu"


def test_bucket_restart_bm():
    for line in [_log("ogkm-1151-rtx5090-xid79-kernel.log")] + _scanprobe(79):
        g = _action(line)
        assert g["classes"]["79"]["bucket"] == "RESTART_BM" and g["action"] == "reboot"


def test_bucket_workflow_nvlink_err_is_for_a_person():
    g = _action(_scanprobe(74)[0])
    assert g["classes"]["74"]["bucket"] == "WORKFLOW_NVLINK_ERR" and g["action"] == "investigate"


def test_bucket_workflow_nvlink5_decodes_fatal_and_nonfatal():
    per_gpu, _events = _gpus(_log("gpud-gb200-xid149-154-dmesg.log"))
    g = per_gpu["0009:01:00.0"]
    assert g["classes"]["149"]["bucket"] == "WORKFLOW_NVLINK5_ERR"
    assert g["classes"]["149"]["action"] == "reset_gpu"          # "NETIR_LINK_EVT  Fatal"
    g = _action(_scanprobe(145)[0])                               # "RLW_REMAP Nonfatal"
    assert g["classes"]["145"]["action"] == "ignore" and g["action"] == "ignore"


def test_bucket_xid_154_follows_the_newest_recovery_action():
    per_gpu, _events = _gpus(_log("gpud-gb200-xid149-154-dmesg.log"))
    # "changed from 0x4 (Drain and Reset) to 0x1 (GPU Reset Required)"
    for bus in ("0019:01:00.0", "0018:01:00.0"):
        assert per_gpu[bus]["recovery_action"] == "reset_gpu" and per_gpu[bus]["action"] == "reset_gpu"
    # A later 154 back to None replaces the earlier verdict
    lines = (b"[1.0] NVRM: Xid (PCI:0019:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 "
             b"(Node Reboot Required)\n[2.0] NVRM: Xid (PCI:0019:01:00): 154, GPU recovery action changed "
             b"from 0x2 (Node Reboot Required) to 0x0 (None)")
    g = _action(lines)
    assert g["recovery_action"] == "none" and g["action"] == "none"


def test_buckets_without_a_real_line_in_the_corpus_follow_the_catalog_row():
    """No public log in the corpus carries these buckets (the 'Unused' Xids, 54, 78, 151, 159);
    their rows map as the catalog says."""
    expect = {1: ("CONTACT_SUPPORT", "investigate"), 54: ("CHECK_MECHANICALS", "investigate"),
              78: ("UPDATE_SWFW", "investigate"), 151: ("RESTART_VM", "reboot"),
              159: ("CHECK_UVM", "investigate"), 160: ("IGNORE", "ignore")}
    for xid, (bucket, action) in expect.items():
        cls = gpu_xid.classify(xid)
        assert (cls["bucket"], cls["action"]) == (bucket, action), xid


def test_unknown_xids_are_reported_as_such_not_hands_on():
    # a real record's format with an Xid the catalog does not have, and one it lists without
    # an immediate action (167 PCIE_FATAL_TIMEOUT)
    for xid, known in ((300, False), (167, True)):
        line = "[171167.62] NVRM: Xid (PCI:0009:01:00): %d, pid=1, name=x, something" % xid
        g = _action(line)
        assert g["action"] == "unknown" and g["classes"][str(xid)]["known"] is known
    assert gpu_xid.rank("unknown") < gpu_xid.rank("investigate")


def test_catalog_carries_every_row_of_nvidia_catalog():
    assert sorted(gpu_xid.CATALOG) == list(range(1, 173))
    buckets = set(b for _m, b, _d in gpu_xid.CATALOG.values())
    assert buckets - {None} <= set(gpu_xid.BUCKET_ACTIONS) | {gpu_xid.XID_154, gpu_xid.NVLINK5}


def test_rm_init_adapter_failure_is_a_gpu_init_error():
    line = "[   12.5] NVRM: GPU 0000:3b:00.0: RmInitAdapter failed! (0x24:0x65:1426)"
    g = _action(line)
    assert g["kernel_events"] == {"rm_init_failed": 1} and g["counts"] == {}
    assert g["action"] == "reset_gpu" and g["action_events"] == ["rm_init_failed"]


def test_events_before_a_gpu_reset_no_longer_call_for_it():
    data = _log("gpud-xe9680-xid119-dmesg-T.log")  # dmesg -T: no monotonic stamps to order by
    assert _gpus(data)[0]["0000:9b:00.0"]["action"] == "reset_gpu"
    per_gpu, events = _gpus(_log("gpud-gb200-xid149-154-dmesg.log"))
    resets = {"0009:01:00.0": 171168.0}
    after = gpu_xid.aggregate(events, resets)
    g = after["0009:01:00.0"]
    # 149 at .620 and .969 and the 154 at .621 are before the reset, the 149 at 171168.109 after
    assert g["before_reset"] == 3 and g["counts"] == {"149": 1} and g["action"] == "reset_gpu"
    assert after["0008:01:00.0"] == per_gpu["0008:01:00.0"]
