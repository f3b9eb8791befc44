# -*- coding: utf-8 -*-
"""kubegpu.fleet.audit_report writes its report files through the write primitive, run by the
real ansible-playbook (the action plugin on the controller): a report directory another user
controls, or a report file that is another user's symlink, is refused with the reason; a
normal destination gets 0644 files and no temp file. uid 65534 via os.chown (root only)."""
from __future__ import absolute_import, division, print_function

import hashlib
import os
import stat

import pytest

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="making files another uid owns (os.chown) needs root")

NOBODY = 65534
FILES = ["kubegpu-audit.html", "kubegpu-audit.json", "kubegpu-audit.md", "kubegpu_audit.prom"]


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def test_report_destinations(ansible, tmp_path):
    ok = tmp_path / "ok" / "reports"
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(str(theirs), NOBODY, NOBODY)
    linked = tmp_path / "linked"
    linked.mkdir()
    secret = tmp_path / "secret"
    secret.write_bytes(b"root only\n")
    os.chmod(str(secret), 0o600)
    os.symlink(str(secret), str(linked / "kubegpu-audit.json"))
    os.lchown(str(linked / "kubegpu-audit.json"), NOBODY, NOBODY)
    before = digest(str(secret))
    audit = {"kubegpu_audit": {"status": "audited", "node": "gpu-1", "findings": []}}
    tasks = [{"name": "record", "ansible.builtin.set_fact": audit}]
    for name, dest in (("ok", ok), ("theirs", theirs / "reports"), ("linked", linked)):
        tasks.append({"name": name, "ignore_errors": True, "kubegpu.fleet.audit_report": {
            "hosts": ["localhost"], "dest": str(dest), "fail_on": "never"}})
    res = ansible.playbook([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}],
                           env={"ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.json"})
    good = res.task("ok")
    assert not good.get("failed"), good
    assert sorted(os.listdir(str(ok))) == FILES                 # no temp file left
    assert all(stat.S_IMODE(os.stat(str(ok / n)).st_mode) == 0o644 for n in FILES)

    mine = res.task("theirs")
    assert mine.get("failed") and mine["msg"] == (
        "cannot write the audit report to %s: refusing to use the directory %s: the directory %s on its "
        "path is owned by uid %d, not root" % (theirs / "reports", theirs / "reports", theirs, NOBODY))
    assert os.listdir(str(theirs)) == []

    link = res.task("linked")
    assert link.get("failed") and "%s is a symlink owned by uid %d, not root" % (
        linked / "kubegpu-audit.json", NOBODY) in link["msg"]
    assert digest(str(secret)) == before and stat.S_IMODE(os.stat(str(secret)).st_mode) == 0o600
    assert os.path.islink(str(linked / "kubegpu-audit.json"))
