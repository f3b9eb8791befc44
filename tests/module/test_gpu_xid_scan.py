# -*- coding: utf-8 -*-
"""The Xid scan through the real modules (ansible-playbook on localhost): a 20 MB kernel log
with an Xid on its newest line is found by gpu_facts and the cut is a module warning; a node
whose kernel log cannot be read at all gets an audit finding that the audit report (JSON and
Markdown, written by kubegpu.fleet.audit_report) shows in words. The node has no NVIDIA driver
(empty procfs): the kernel log scan does not depend on one. journalctl and dmesg are fakes on
PATH that answer as the real tools do.
"""
from __future__ import absolute_import, division, print_function

import json
import os

HARNESS_ENV = {"ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.json"}
XID_79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1101234, name=nvc:[driver], GPU has fallen off the bus."


def _script(path, body):
    with open(path, "w") as f:
        f.write("#!/bin/sh\n" + body + "\n")
    os.chmod(path, 0o755)


def _node(tmp_path, journalctl, dmesg):
    """Empty procfs/dev/sysfs and the two kernel log commands on PATH; args and env."""
    for d in ("proc", "dev", "sys", "driver", "bin"):
        (tmp_path / d).mkdir()
    _script(str(tmp_path / "bin" / "journalctl"), journalctl)
    _script(str(tmp_path / "bin" / "dmesg"), dmesg)
    args = {"proc_path": str(tmp_path / "proc"), "dev_path": str(tmp_path / "dev"),
            "driver_root": str(tmp_path / "driver"), "sys_path": str(tmp_path / "sys"),
            "kmsg_path": str(tmp_path / "no-kmsg")}
    env = dict(HARNESS_ENV, PATH=str(tmp_path / "bin") + os.pathsep + os.environ.get("PATH", ""))
    return args, env


def test_gpu_facts_finds_the_newest_xid_of_a_20_mb_journal(ansible, tmp_path):
    log = tmp_path / "kernel.log"
    with open(str(log), "w") as f:
        i = 0
        while f.tell() < 20 * 1000 * 1000:
            f.write("[%6d.%06d] gpu-node-7 kernel: cni0: port %d(veth%06x) entered forwarding state\n"
                    % (i // 1000, (i % 1000) * 1000, i % 64, i))
            i += 1
        f.write("[%6d.%06d] gpu-node-7 kernel: %s\n" % (i // 1000, (i % 1000) * 1000, XID_79))
    # journalctl -k -b -r -n N as the real one answers: the newest N records, newest first.
    args, env = _node(tmp_path, journalctl='n=\nfor a; do [ "$prev" = -n ] && n=$a; prev=$a; done\n'
                                           'tail -n "$n" %s | tac' % log,
                      dmesg="exit 1")
    res = ansible.module("gpu_facts", args, env=env)
    assert res["_rc"] == 0 and not res.get("failed"), res
    x = res["ansible_facts"]["nvidia"]["xid"]
    assert x["source"] == "journal" and x["gpus"]["0000:3b:00.0"]["counts"] == {"79": 1}
    assert x["action"] == "reboot" and x["scanned"] is True and x["truncated"] is True
    assert x["warning"].startswith("kernel log truncated (journal): ")
    assert any(w.startswith("gpu_facts: Xid scan: kernel log truncated (journal): ")
               for w in res.get("warnings") or []), res.get("warnings")


def test_unreadable_kernel_log_reaches_the_audit_report(ansible, tmp_path):
    # A container: journald does not collect kernel messages, dmesg is restricted, no /dev/kmsg.
    args, env = _node(tmp_path, journalctl="exit 0",
                      dmesg='echo "dmesg: read kernel buffer failed: Operation not permitted" >&2; exit 1')
    dest = tmp_path / "report"
    plays = [{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "Audit", "kubegpu.fleet.audit_node": dict(args, nvidia_proc_path=args["proc_path"]),
         "register": "audit"},
        {"name": "Report", "kubegpu.fleet.audit_report": {
            "hosts": ["localhost"], "dest": str(dest), "formats": ["json", "markdown"]}},
    ]}]
    res = ansible.playbook(plays, env=env)
    assert res.rc == 0, res.stdout
    audit = res.task("Audit")
    want = ("no kernel log could be read (journal: the journal holds no kernel messages for this "
            "boot, kmsg: %s: No such file or directory, dmesg: dmesg exited 1: dmesg: read kernel "
            "buffer failed: Operation not permitted): Xid errors cannot be ruled out"
            % args["kmsg_path"])
    nv = audit["probes"]["gpu_facts"]["ansible_facts"]["nvidia"]
    assert nv["xid"]["scanned"] is False and nv["xid"]["warning"] == want
    # The probe's warning, the task's warning and the finding.
    assert "gpu_facts: Xid scan: " + want in audit["probes"]["gpu_facts"]["warnings"]
    assert any(("gpu_facts: Xid scan: " + want) in str(w) for w in audit.get("warnings") or []), audit.get("warnings")
    (f,) = [f for f in audit["findings"] if f["evidence"].get("part") == "xid"]
    assert f["id"] == "audit.module_failed" and f["severity"] == "warning"
    assert f["evidence"]["error"] == want and f["title"] == "Xid scan failed: " + want
    # In the report files the audit writes.
    with open(str(dest / "kubegpu-audit.json")) as fh:
        report = json.load(fh)
    (node,) = report["nodes"]
    assert [g["evidence"]["error"] for g in node["findings"] if g["evidence"].get("part") == "xid"] == [want]
    with open(str(dest / "kubegpu-audit.md")) as fh:
        markdown = fh.read()
    assert "Xid scan failed: no kernel log could be read (journal: the journal holds no kernel" in markdown
    assert "Xid errors cannot be ruled out" in markdown
