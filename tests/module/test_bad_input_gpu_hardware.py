# -*- coding: utf-8 -*-
"""Bad-input corpus for gpu_facts' hardware surfaces: the kernel log (journal, /dev/kmsg,
dmesg), the PCI tree under ``sys_path`` and the nvidia-smi XML document.

Same rules and helpers as tests/module/test_bad_input_gpu.py, through the real
``ansible-playbook`` (one play, one task per input, ``ignore_errors``): no traceback, no hang
(the modules' own deadlines end every wait), a clear message for what could not be read, the
files pointed at intact byte for byte. The kernel log commands are fakes on the task's PATH.
"""
from __future__ import absolute_import, division, print_function

import os

from test_bad_input_gpu import (  # pylint: disable=import-error
    SMI_XML, fifo, gpu_node, loop, run_cases, script, snapshot, sparse, write)

XID_79 = b"NVRM: Xid (PCI:0000:3b:00): 79, pid=1101234, name=nvc:[driver], GPU has fallen off the bus."
DMESG_DENIED = "echo 'dmesg: read kernel buffer failed: Operation not permitted' >&2; exit 1"


def _bin(tmp_path, cid, journalctl="exit 0", dmesg=DMESG_DENIED):
    d = tmp_path / "bin" / cid
    script(d / "journalctl", journalctl)
    script(d / "dmesg", dmesg)
    return {"PATH": "%s%s%s" % (d, os.pathsep, os.environ.get("PATH", ""))}


def _printing(tmp_path, cid, data):
    """A command body that prints ``data`` (bytes kept in a file beside the tree)."""
    return "cat '%s'" % write(tmp_path / "out" / cid, data)


# ------------------------------------------------------------------------------ kernel log

def test_kernel_log_bad_inputs(ansible, tmp_path):
    base = dict(gpu_node(tmp_path / "node"), backend="nvidia_smi", timeout=5, xid_timeout=3,
                sys_path=str(tmp_path / "nosys"), kmsg_path="")
    cases = []

    def journal(cid, data, **args):
        # journalctl -r: newest first, as the real one prints it (the scan puts it back in order).
        body = "tac '%s'" % write(tmp_path / "out" / cid, data)
        cases.append((cid, dict(base, **args), _bin(tmp_path, cid, body)))

    line = b"[ 4242.000001] gpu-node-7 kernel: " + XID_79 + b"\n"
    journal("journal_binary_garbage", os.urandom(1 << 20) + b"\n" + line)
    journal("journal_nuls", b"\0" * 200000 + b"\n" + line.replace(b"pid=", b"\0\0pid="))
    journal("journal_invalid_utf8", b"[ 1.0] \xff\xfe\xc3\x28 \xed\xa0\x80\n"
            + line.replace(b"the bus.", b"the bus \xff\xc0."))
    journal("journal_2mb_single_line", b"A" * (2 << 20) + XID_79)           # no newline at all
    journal("journal_json_wrong_shape", b"\n".join([
        b'{"MESSAGE": {"NVRM: Xid": 79}}', b'{"MESSAGE": 79}', b'{"MESSAGE": ["x", null, 1.5]}',
        b'[{"MESSAGE": "NVRM: Xid (PCI:0000:3b:00): 79, in a list"}]', b'"NVRM: Xid"',
        b'{"MESSAGE": [' + b"[" * 100000, b'{"MESSAGE": ' + b'"' + b"\\ud800" * 1000 + b'"}',
        b'{"MESSAGE": "NVRM: Xid (PCI:0000:3b:00): 79, x", "__MONOTONIC_TIMESTAMP": ' + b"9" * 400 + b"}",
        b'{"MESSAGE": "NVRM: Xid (PCI:0000:3b:00): 79, shaped right", "__MONOTONIC_TIMESTAMP": "5000000"}',
        b""]))
    journal("journal_40mb_no_newline", b"\0" * (40 << 20))
    cases.append(("journal_never_returns", dict(base), _bin(tmp_path, "journal_never_returns", "exec sleep 300")))
    denied = "echo 'Failed to open journal: Permission denied' >&2; exit 1"
    cases.append(("journal_exits_1", dict(base), _bin(tmp_path, "journal_exits_1", denied)))
    # /dev/kmsg stand-ins (the journal is empty, as in a container).
    for cid, make in (("kmsg_fifo", fifo), ("kmsg_symlink_loop", loop),
                      ("kmsg_directory", os.makedirs),
                      ("kmsg_huge_sparse", lambda p: sparse(p, 50 << 20)),
                      ("kmsg_binary", lambda p: write(p, os.urandom(1 << 20) + b"\n4,7,9000000,-;" + XID_79 + b"\n")),
                      ("kmsg_unreadable", lambda p: write(p, b"4,0,1,-;x\n", mode=0))):
        path = str(tmp_path / "kmsg" / cid)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        make(path)
        cases.append((cid, dict(base, kmsg_path=path), _bin(tmp_path, cid)))
    dmesg = b"[ 1.5] \xff\xfe\n" * (3 << 20) + b"[ 9.5] " + XID_79 + b"\n"
    env = _bin(tmp_path, "dmesg_non_utf8_huge", dmesg=_printing(tmp_path, "dmesg", dmesg))
    cases.append(("dmesg_non_utf8_huge", dict(base), env))
    cases.append(("dmesg_never_returns", dict(base), _bin(tmp_path, "dmesg_never_returns", dmesg="exec sleep 300")))

    before = snapshot(tmp_path)
    res = run_cases(ansible, "gpu_facts", cases)
    assert snapshot(tmp_path) == before

    def xid(cid):
        r = res[cid]
        assert not r.get("failed"), (cid, r.get("msg"))
        return r["ansible_facts"]["nvidia"]["xid"]

    for cid in ("journal_binary_garbage", "journal_nuls", "journal_invalid_utf8"):
        x = xid(cid)
        assert x["source"] == "journal" and x["gpus"]["0000:3b:00.0"]["counts"] == {"79": 1}, (cid, x)
        assert x["warning"] is None, (cid, x["warning"])
    assert "\ufffd" in xid("journal_invalid_utf8")["gpus"]["0000:3b:00.0"]["last"]["message"]
    # A 2 MB line is no kernel record: cut before matching, counted, never parsed whole.
    x = xid("journal_2mb_single_line")
    assert x["events"] == 0 and x["stats"]["long_lines"] == 1 and x["scanned"] is True
    # Records of the wrong shape are skipped; the record text wherever it sits in a line counts
    # (the list line, the record with an oversized timestamp, which is dropped, and the good one).
    x = xid("journal_json_wrong_shape")
    assert x["gpus"]["0000:3b:00.0"]["counts"] == {"79": 3}
    assert x["gpus"]["0000:3b:00.0"]["last"]["timestamp"] == 5.0
    x = xid("journal_40mb_no_newline")
    assert x["source"] == "journal" and x["truncated"] is True and x["events"] == 0
    assert x["warning"].startswith("kernel log truncated (journal): ")
    for cid, text in (("journal_never_returns", "journalctl did not finish within 3s; it was killed"),
                      ("journal_exits_1", "journalctl exited 1: Failed to open journal: Permission denied"),
                      ("kmsg_fifo", "is a FIFO"), ("kmsg_symlink_loop", "symlink loop"),
                      ("kmsg_directory", "directory"),
                      ("dmesg_never_returns", "dmesg did not finish within 3s; it was killed")):
        x = xid(cid)
        assert x["scanned"] is False and x["source"] is None, (cid, x)
        assert x["warning"].startswith("no kernel log could be read (") and text in x["warning"], (cid, x["warning"])
        assert any("Xid scan: no kernel log could be read" in str(w) for w in res[cid].get("warnings") or []), cid
    x = xid("kmsg_huge_sparse")
    assert x["source"] == "kmsg" and x["truncated"] is True and x["dropped_bytes"] == 34 << 20
    assert "the oldest 34.0 MiB were not scanned" in x["warning"]
    x = xid("kmsg_binary")
    assert x["source"] == "kmsg" and x["gpus"]["0000:3b:00.0"]["last"]["timestamp"] == 9.0
    x = xid("kmsg_unreadable")
    if os.geteuid() != 0:   # root reads a mode-0 file; anyone else is refused, and it is said
        assert x["scanned"] is False and "Permission denied" in x["warning"]
    x = xid("dmesg_non_utf8_huge")
    assert x["source"] == "dmesg" and x["gpus"]["0000:3b:00.0"]["counts"] == {"79": 1}
    assert x["truncated"] is True and "dmesg printed more than 16.0 MiB" in x["warning"]


# ------------------------------------------------------------------------------ PCI tree

def _pci_device(root, addr, vendor=b"0x10de\n", pci_class=b"0x030200\n", device=b"0x2330\n"):
    d = os.path.join(root, "bus", "pci", "devices", addr)
    for name, value in (("vendor", vendor), ("class", pci_class), ("device", device)):
        path = os.path.join(d, name)
        if callable(value):
            os.makedirs(d, exist_ok=True)
            value(path)
        else:
            write(path, value)
    return d


def test_pci_tree_bad_inputs(ansible, tmp_path):
    base = dict(gpu_node(tmp_path / "node"), backend="nvidia_smi", timeout=5, xid=False)
    cases = []
    # One tree with a hostile entry of each kind beside one good GPU.
    mixed = str(tmp_path / "sys-mixed")
    _pci_device(mixed, "0000:3b:00.0")
    _pci_device(mixed, "0000:01:00.0", vendor=lambda p: sparse(p, 50 << 20))
    _pci_device(mixed, "0000:02:00.0", vendor=fifo)
    _pci_device(mixed, "0000:03:00.0", vendor=loop)
    _pci_device(mixed, "0000:04:00.0", vendor=b"0xZZZZ\n")
    _pci_device(mixed, "0000:05:00.0", vendor=u"\u0660x10de\n".encode("utf-8"))   # Arabic-Indic zero
    _pci_device(mixed, "0000:06:00.0", vendor=b"0x1_0de\n")
    _pci_device(mixed, "0000:07:00.0", pci_class=b"\xff\xfe\x00\n")
    _pci_device(mixed, "0000:08:00.0", device=os.urandom(40))
    os.symlink("driver", os.path.join(_pci_device(mixed, "0000:09:00.0"), "driver"))  # link loop
    os.symlink("nowhere", os.path.join(mixed, "bus", "pci", "devices", "0000:0a:00.0"))
    write(os.path.join(mixed, "bus", "pci", "devices", "not-an-address"), b"x")
    cases.append(("mixed_hostile_entries", dict(base, sys_path=mixed), None))
    # The devices directory itself.
    for cid, make in (("devices_is_fifo", fifo), ("devices_is_loop", loop),
                      ("devices_is_file", lambda p: write(p, b"x"))):
        root = str(tmp_path / ("sys-" + cid))
        make(os.path.join(root, "bus", "pci", "devices"))
        cases.append((cid, dict(base, sys_path=root), None))
    many = str(tmp_path / "sys-many")
    os.makedirs(os.path.join(many, "bus", "pci", "devices"))
    for i in range(4097):
        os.mkdir(os.path.join(many, "bus", "pci", "devices", "0000:%02x:%02x.%d" % (i // 256, (i // 8) % 32, i % 8)))
    cases.append(("too_many_entries", dict(base, sys_path=many), None))

    before = snapshot(tmp_path)
    res = run_cases(ansible, "gpu_facts", cases)
    assert snapshot(tmp_path) == before

    def pci(cid):
        r = res[cid]
        assert not r.get("failed"), (cid, r.get("msg"))
        return r["ansible_facts"]["nvidia"]["pci"]

    p = pci("mixed_hostile_entries")
    assert [g["bus_id"] for g in p["gpus"]] == ["0000:09:00.0", "0000:3b:00.0"]
    errors = dict((e["entry"], e["error"]) for e in p["errors"])
    assert "more than the 64 bytes" in errors["0000:01:00.0"]
    assert "is a FIFO" in errors["0000:02:00.0"]
    assert "symlink loop" in errors["0000:03:00.0"]
    for entry in ("0000:04:00.0", "0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0"):
        assert "does not hold a hex number" in errors[entry], (entry, errors[entry])
    assert "is missing" in errors["0000:0a:00.0"]
    for cid, text in (("devices_is_fifo", "Not a directory"), ("devices_is_loop", "symbolic links"),
                      ("devices_is_file", "Not a directory"), ("too_many_entries", "4097 entries")):
        p = pci(cid)
        assert p["available"] is False and text in p["errors"][0]["error"], (cid, p["errors"])


# ------------------------------------------------------------------------------ nvidia-smi XML

BILLION_LAUGHS = (
    '<?xml version="1.0" ?>\n<!DOCTYPE nvidia_smi_log [\n <!ENTITY a "aaaaaaaaaa">\n'
    + "".join(' <!ENTITY %s "%s">\n' % (chr(ord("a") + i), ("&%s;" % chr(ord("a") + i - 1)) * 10)
              for i in range(1, 10))
    + ']>\n')


def test_smi_xml_bad_inputs(ansible, tmp_path):
    cases = []

    def smi(cid, text):
        n = gpu_node(tmp_path / cid, smi="cat '%s'" % write(tmp_path / "smi" / cid, text))
        cases.append((cid, dict(n, backend="nvidia_smi", timeout=10, xid=False), None))

    body = SMI_XML.split("\n", 1)[1]
    smi("billion_laughs", BILLION_LAUGHS + body.replace("NVIDIA H100 80GB HBM3", "&j;"))
    smi("external_entity", '<?xml version="1.0" ?>\n<!DOCTYPE nvidia_smi_log [ <!ENTITY x SYSTEM '
        '"file:///etc/passwd"> ]>\n' + body.replace("NVIDIA H100 80GB HBM3", "&x;"))
    smi("entity_in_body_only", SMI_XML.replace("NVIDIA H100 80GB HBM3", "&undefined;"))
    smi("huge_attribute", SMI_XML.replace('<gpu id="00000000:3B:00.0">', '<gpu id="%s">' % ("A" * (20 << 20))))
    smi("huge_text", SMI_XML.replace("NVIDIA H100 80GB HBM3", "B" * (20 << 20)))
    smi("big_attribute", SMI_XML.replace('<gpu id="00000000:3B:00.0">', '<gpu id="%s">' % ("A" * (6 << 20))))
    smi("big_number", SMI_XML.replace("<minor_number>0<", "<minor_number>%s<" % ("9" * (6 << 20))))
    smi("many_attributes", SMI_XML.replace('<gpu id="00000000:3B:00.0">', "<gpu %s>" % " ".join(
        'a%d="x"' % i for i in range(200000))))
    smi("truncated_mid_element", SMI_XML[:SMI_XML.index("<uuid>") + 9])
    smi("truncated_after_root_close", SMI_XML.replace("</gpu></nvidia_smi_log>", "</gpu"))
    smi("unclosed_inner", SMI_XML.replace("</uuid>", ""))

    before = snapshot(tmp_path)
    res = run_cases(ansible, "gpu_facts", cases)
    assert snapshot(tmp_path) == before

    def probe(cid):
        r = res[cid]
        assert not r.get("failed"), (cid, r.get("msg"))
        return r["ansible_facts"]["nvidia"]

    for cid, text in (("billion_laughs", "declares entities or an internal DTD subset; refused"),
                      ("external_entity", "declares entities or an internal DTD subset; refused"),
                      ("entity_in_body_only", "undefined entity"),
                      ("truncated_mid_element", "truncated (no </nvidia_smi_log>)"),
                      ("truncated_after_root_close", "truncated (no </nvidia_smi_log>)"),
                      ("unclosed_inner", "cannot parse nvidia-smi XML: mismatched tag"),
                      ("huge_attribute", "more than the 8388608 this parses"),
                      ("huge_text", "more than the 8388608 this parses")):
        f = probe(cid)
        assert f["probe"]["status"] == "error" and f["driver_version"] is None, (cid, f["probe"])
        assert text in f["probe"]["error"], (cid, f["probe"]["error"])
        assert "root:" not in str(res[cid])     # no file content ever read through an entity
    # Under the document bound, a value no nvidia-smi prints is not believed (nor converted).
    f = probe("big_attribute")
    assert f["probe"]["status"] == "ok" and f["gpus"][0]["pci_bus_id"] is None
    f = probe("big_number")
    assert f["probe"]["status"] == "ok" and f["gpus"][0]["minor_number"] is None
    assert probe("many_attributes")["probe"]["status"] == "ok"
    for cid in ("huge_attribute", "huge_text", "big_attribute", "big_number", "many_attributes"):
        assert len(str(res[cid])) < (1 << 20), (cid, len(str(res[cid])))   # nothing unbounded comes back
