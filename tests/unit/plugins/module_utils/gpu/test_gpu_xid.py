# -*- coding: utf-8 -*-
"""gpu_xid: Xid lines as several driver generations print them, in each kernel log format,
bounded and hostile input, the catalog classification, and the journal/kmsg/dmesg reader."""
from __future__ import absolute_import, division, print_function

import json
import os
import stat
import sys

import pytest

from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu import xid as gpu_xid

# Record texts as the drivers print them (bus ids without the function; R4xx+ "PCI:" prefix,
# pid/name fields since R5xx; older drivers neither).
R535_79 = "NVRM: Xid (PCI:0000:c6:00): 79, pid=1101234, name=nvc:[driver], GPU has fallen off the bus."
R570_79_NOPID = "NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus."
R470_63 = ("NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, "
           "reset gpu to activate.")
R550_64 = "NVRM: Xid (PCI:0000:65:00): 64, pid='N/A', name=N/A, Row Remapper: Failed to remap row"
R550_94 = ("NVRM: Xid (PCI:0000:18:00): 94, pid=4321, name=python3, Contained: CE User Channel (0x9). "
           "RST: No, D-RST: No")
R418_13 = ("NVRM: Xid (PCI:0000:3b:00): 13, Graphics SM Warp Exception on (GPC 1, TPC 0, SM 0): "
           "Out Of Range Address")
R384_48 = "NVRM: Xid (0000:83:00): 48, An uncorrectable double bit error (DBE) has been detected on GPU"
R384_14 = "NVRM: Xid (0000:03:00): 14, Channel 00000001"
R535_119 = ("NVRM: Xid (PCI:0000:18:00): 119, pid=2211, name=nvidia-smi, Timeout after 6s of waiting "
            "for RPC response from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL)")
R570_154 = ("NVRM: Xid (PCI:0000:18:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 "
            "(Node Reboot Required)")


def test_record_prefixes_of_every_log_format():
    text = "\n".join([
        "[  812.345678] gpu-node-1 kernel: " + R535_79,                  # journalctl short-monotonic
        "[ 1023.000001] " + R470_63,                                       # dmesg
        "4,2711,1100500000,-;" + R550_64,                                  # /dev/kmsg record
        " SUBSYSTEM=pci",                                                  # kmsg dictionary line
        json.dumps({"MESSAGE": R550_94, "__MONOTONIC_TIMESTAMP": "1200000000",
                    "_TRANSPORT": "kernel"}),                              # journalctl -o json
        "Nov 18 10:00:00 gpu-node-1 kernel: " + R418_13,                   # journalctl short
        "[   12.5] " + R384_48,                                             # older driver form
        R384_14,
        "[   99.1] NVRM: GPU at PCI:0000:c6:00: GPU-6b756265-0000-4000-8000-000000000000",
    ])
    events, stats = gpu_xid.parse_xid_events(text)
    got = [(e["bus_id"], e["xid"], e["pid"], e["process"], e["timestamp"]) for e in events]
    assert got == [
        ("0000:c6:00.0", 79, "1101234", "nvc:[driver]", 812.345678),
        ("0000:10:1c.0", 63, "1896", None, 1023.000001),
        ("0000:65:00.0", 64, None, "N/A", 1100.5),
        ("0000:18:00.0", 94, "4321", "python3", 1200.0),
        ("0000:3b:00.0", 13, None, None, None),
        ("0000:83:00.0", 48, None, None, 12.5),
        ("0000:03:00.0", 14, None, None, None),
    ]
    assert events[0]["message"] == "GPU has fallen off the bus."
    assert events[1]["message"] == "Row Remapper: New row marked for remapping, reset gpu to activate."
    assert events[4]["message"].startswith("Graphics SM Warp Exception")
    assert stats["lines"] == 9 and stats["truncated_lines"] == 0


def test_json_message_as_byte_array_and_broken_json():
    raw = list(("[x] " + R570_79_NOPID).encode()) + [0xff]
    text = "\n".join([json.dumps({"MESSAGE": raw, "__MONOTONIC_TIMESTAMP": "5000000"}),
                      '{"MESSAGE": "NVRM: Xid (PCI:0000:18:00): 79, cut', "{not json"])
    events, _stats = gpu_xid.parse_xid_events(text)
    assert [(e["bus_id"], e["xid"], e["timestamp"]) for e in events] == [("0000:2b:00.0", 79, 5.0)]
    assert events[0]["message"].endswith("bus.\ufffd")


def test_hostile_input_non_utf8_huge_line_no_newline_and_bounds():
    junk = b"\xff\xfe\x00garbage " * 10
    huge = b"A" * (1 << 20) + b" NVRM: Xid (PCI:0000:18:00): 79, hidden after a megabyte"
    data = junk + b"\n" + huge + b"\n" + ("[1.0] " + R535_119).encode() + b"\n" + R570_154.encode()
    events, stats = gpu_xid.parse_xid_events(data)
    assert [e["xid"] for e in events] == [119, 154]          # the last line has no newline
    assert stats["long_lines"] == 1                           # cut before matching, not parsed
    # Bounded: only the newest bytes / lines are read, the cut is reported.
    many = "\n".join("[%d.0] %s" % (i, R550_94) for i in range(1000))
    events, stats = gpu_xid.parse_xid_events(many, max_lines=10)
    assert len(events) == 10 and events[0]["timestamp"] == 990.0
    assert stats["truncated_lines"] == 990
    events, stats = gpu_xid.parse_xid_events(many.encode(), max_bytes=500)
    assert stats["truncated_bytes"] == len(many) - 500 and 0 < len(events) < 10
    events, stats = gpu_xid.parse_xid_events(many, max_events=3)
    assert len(events) == 3 and stats["dropped_events"] == 997
    # Lookalikes that are not driver records.
    fake = "NVRM: Xid (PCI:zzzz:18:00): 79, x\nNVRM: Xid (PCI:0000:18:00): abc\nNVRM: Xid (PCI:0000:18:00)"
    assert gpu_xid.parse_xid_events(fake)[0] == []


def test_hostile_numbers_and_nesting_never_raise():
    """Fields a hostile log could make huge or deep: never an exception, never an infinite
    timestamp; the Xid itself is still read."""
    rec = "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."
    found = [(79, None)]
    cases = [('{"MESSAGE": [' + "[" * 5000, []),                                 # deeper than json recurses
             ('{"MESSAGE": %s, "__MONOTONIC_TIMESTAMP": "%s"}' % (json.dumps(rec), "9" * 400), found),
             ('{"MESSAGE": %s, "__MONOTONIC_TIMESTAMP": 1e400}' % json.dumps(rec), found),
             # Python 3.11+ refuses to convert an integer this long (the record is skipped);
             # older ones read it, and the timestamp is out of range
             ('{"MESSAGE": %s, "__MONOTONIC_TIMESTAMP": %s}' % (json.dumps(rec), "9" * 5000),
              [] if hasattr(sys, "get_int_max_str_digits") else found),
             ("4,1,%s,-;%s" % ("9" * 400, rec), found),                           # kmsg usec
             ("[%s.5] %s" % ("9" * 400, rec), found),                             # dmesg seconds
             ("\u0663,1,5,-;" + rec, found)]                                      # non-ASCII digit
    for line, want in cases:
        events, _stats = gpu_xid.parse_xid_events(line)
        assert [(e["xid"], e["timestamp"]) for e in events] == want, line[:60]


@pytest.mark.parametrize("xid, action, bucket", [
    (13, "restart_app", "RESTART_APP"), (31, "restart_app", "RESTART_APP"),
    (43, "ignore", "IGNORE"), (48, "reset_gpu", "WORKFLOW_XID_48"), (63, "ignore", "IGNORE"),
    (64, "reset_gpu", "RESET_GPU"), (74, "investigate", "WORKFLOW_NVLINK_ERR"),
    (79, "reboot", "RESTART_BM"), (92, "ignore", "IGNORE"), (94, "restart_app", "RESTART_APP"),
    (95, "reset_gpu", "RESET_GPU"), (119, "reset_gpu", "RESET_GPU"), (120, "reset_gpu", "RESET_GPU"),
    (999, "unknown", None),
])
def test_catalog_classification(xid, action, bucket):
    cls = gpu_xid.classify(xid)
    assert (cls["action"], cls["bucket"], cls["known"]) == (action, bucket, xid != 999)


def test_xid_154_follows_the_recovery_action_it_names():
    assert gpu_xid.classify(154, R570_154.split(", ", 1)[1])["action"] == "reboot"
    assert gpu_xid.classify(154, "GPU recovery action changed from 0x0 (None) to 0x1 "
                                 "(GPU Reset Required)")["action"] == "reset_gpu"
    assert gpu_xid.classify(154, "something else")["action"] == "unknown"


def test_aggregate_per_gpu_counts_last_message_worst_action():
    text = "\n".join(["[1.0] " + R550_94, "[2.0] " + R535_119, "[3.0] " + R550_94,
                      "[4.0] " + R535_79, "[5.0] " + R384_14])
    per_gpu = gpu_xid.aggregate(gpu_xid.parse_xid_events(text)[0])
    g18 = per_gpu["0000:18:00.0"]
    assert g18["counts"] == {"94": 2, "119": 1} and g18["total"] == 3
    assert g18["last"]["xid"] == 94 and g18["last"]["timestamp"] == 3.0
    assert g18["action"] == "reset_gpu" and g18["action_xids"] == [119]
    assert g18["classes"]["94"]["bucket"] == "RESTART_APP"
    assert per_gpu["0000:c6:00.0"]["action"] == "reboot"
    assert per_gpu["0000:03:00.0"]["action"] == "ignore"  # 14: ROBUST_CHANNEL_FAKE_ERROR, IGNORE
    assert gpu_xid.worst_action(per_gpu) == "reboot"
    assert gpu_xid.worst_action({}) == "none"


# --------------------------------------------------------------------------- reader

def _script(path, body):
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_reader_uses_the_journal_with_bounded_arguments(tmp_path):
    args = tmp_path / "args"
    jc = _script(tmp_path / "journalctl", 'echo "$@" > %s\necho "[ 5.000000] n kernel: %s"'
                 % (args, R535_79))
    rep = gpu_xid.xid_report(timeout=10, journalctl=jc, kmsg=None, dmesg=None)
    assert rep["source"] == "journal" and rep["events"] == 1 and rep["action"] == "reboot"
    # Newest record first (-r): a bound on the output keeps the newest records.
    assert args.read_text().split() == ["-k", "-b", "--no-pager", "-q", "-o", "short-monotonic",
                                        "-r", "-n", str(gpu_xid.MAX_LINES)]
    assert rep["scanned"] is True and rep["truncated"] is False and rep["warning"] is None


def test_reader_falls_back_from_hung_journal_to_kmsg(tmp_path):
    fifo = tmp_path / "never-written"
    os.mkfifo(str(fifo))
    jc = _script(tmp_path / "journalctl", 'exec cat "%s"' % fifo)  # blocks forever on the open
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("4,1,2000000,-;%s\n" % R550_64)
    rep = gpu_xid.xid_report(timeout=0.5, journalctl=jc, kmsg=str(kmsg), dmesg=None)
    assert rep["source"] == "kmsg" and rep["gpus"]["0000:65:00.0"]["counts"] == {"64": 1}
    assert "did not finish within 0.5s" in rep["attempts"][0]["error"]


def test_reader_empty_journal_is_no_kernel_log(tmp_path):
    jc = _script(tmp_path / "journalctl", "exit 0")
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("6,1,1000,-;Linux version 6.8.0\n4,2,3000000,-;%s\n" % R384_48)
    rep = gpu_xid.xid_report(journalctl=jc, kmsg=str(kmsg), dmesg=None)
    assert rep["source"] == "kmsg" and rep["action"] == "reset_gpu"
    assert rep["attempts"] == [{"source": "journal",
                                "error": "the journal holds no kernel messages for this boot"}]


def test_reader_kmsg_character_device_then_dmesg(tmp_path):
    # A character device is read, not refused; with nothing in it (the kernel's /dev/null) it is
    # no kernel log: a booted kernel always logs something.
    log = gpu_xid.read_kernel_log(journalctl=str(tmp_path / "absent"), kmsg="/dev/null", dmesg=None)
    assert (log["data"], log["source"]) == (None, None)
    assert "absent" in log["attempts"][0]["error"]
    assert log["attempts"][1] == {"source": "kmsg", "error": "/dev/null holds no kernel records"}
    fifo = tmp_path / "kmsg-fifo"
    os.mkfifo(str(fifo))
    dm = _script(tmp_path / "dmesg", 'echo "[ 7.25] %s"' % R384_48)
    rep = gpu_xid.xid_report(journalctl=None, kmsg=str(fifo), dmesg=dm)
    assert rep["source"] == "dmesg" and rep["gpus"]["0000:83:00.0"]["last"]["timestamp"] == 7.25
    assert "a FIFO" in rep["attempts"][0]["error"]


def test_reader_nothing_readable_is_a_warning_never_no_xid(tmp_path):
    jc = _script(tmp_path / "journalctl", "exit 0")
    dm = _script(tmp_path / "dmesg", "echo 'dmesg: read kernel buffer failed: Operation not permitted' >&2; exit 1")
    rep = gpu_xid.xid_report(limit=100000, journalctl=jc, kmsg=str(tmp_path / "no-kmsg"), dmesg=dm)
    assert rep["source"] is None and rep["events"] == 0 and rep["scanned"] is False
    errs = [a["error"] for a in rep["attempts"]]
    assert errs[0] == "the journal holds no kernel messages for this boot"
    assert "No such file" in errs[1]
    assert errs[2].endswith("exited 1: dmesg: read kernel buffer failed: Operation not permitted")
    assert rep["warning"].startswith("no kernel log could be read (journal: the journal holds no kernel")
    assert rep["warning"].endswith("dmesg: read kernel buffer failed: Operation not permitted): "
                                   "Xid errors cannot be ruled out")
