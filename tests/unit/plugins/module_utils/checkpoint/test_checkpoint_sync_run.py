# -*- coding: utf-8 -*-
"""Unit tests for plugins/module_utils/checkpoint/sync_run.py checkpoint_sync_run, the body of
kubegpu.fleet.checkpoint_sync, on real checkpoint fixtures in temp dirs.

kubelet is "restarted" by a recording ``systemctl`` script in a temp dir, found by ansible's
own get_bin_path (the one AnsibleModule.get_bin_path calls) and run by safe_io.run_command as
on a node; failures are scripts that fail or hang. The real restart of a real kubelet is proven
in the lab (tests/lab/test_lab_checkpoint.py).
"""
import os
import shutil
import stat

import pytest

from ansible.module_utils.common import process

from ansible_collections.kubegpu.fleet.plugins.module_utils.audit import probe_options
from ansible_collections.kubegpu.fleet.plugins.module_utils.checkpoint.sync_run import (
    DIFF_RAW_LIMIT,
    checkpoint_sync_run,
)
from ansible_collections.kubegpu.fleet.plugins.module_utils._common.node_probes import ProbeFailed
from ansible_collections.kubegpu.fleet.tests.fixtures.checkpoint.checkpoint_ids import (
    GPU_A, GPU_B, GPU_C, GPU_D, GPU_NEW)

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.abspath(os.path.join(HERE, "..", "..", "..", "..", "fixtures", "checkpoint"))
NODE = [GPU_A, GPU_B, GPU_C, GPU_D]
NODE_REPLACED = [GPU_A, GPU_NEW, GPU_C, GPU_D]


class Node(object):
    """A kubelet root-dir in a temp dir, a recording systemctl script, and the module's
    callbacks (warn, get_bin_path)."""

    def __init__(self, tmp_path):
        self.dir = tmp_path / "var-lib-kubelet" / "device-plugins"
        self.dir.mkdir(parents=True)
        self.path = self.dir / "kubelet_internal_checkpoint"
        self.bin = tmp_path / "bin"
        self.bin.mkdir()
        self.calls = tmp_path / "systemctl.calls"
        self.systemctl("printf '%%s\\n' \"$*\" >> '%s'\nexit 0" % self.calls)
        self.warnings = []

    def systemctl(self, body):
        shim = self.bin / "systemctl"
        shim.write_text("#!/bin/sh\n%s\n" % body)
        shim.chmod(0o755)

    def put(self, fixture, mode=0o644):
        shutil.copyfile(os.path.join(FIX, fixture), str(self.path))
        self.path.chmod(mode)
        return self.path.read_bytes()

    def get_bin_path(self, name, required=False):
        # ansible's lookup, this node's bin dir first (AnsibleModule.get_bin_path turns its
        # ValueError into fail_json when required)
        return process.get_bin_path(name, opt_dirs=[str(self.bin)])

    def run(self, check_mode=False, diff=False, **params):
        p = probe_options.defaults(probe_options.CHECKPOINT_SYNC)
        p["path"] = str(self.path)
        p.update(params)
        return checkpoint_sync_run(p, self.warnings.append, self.get_bin_path,
                                   check_mode=check_mode, diff=diff)

    def fail(self, **kw):
        with pytest.raises(ProbeFailed) as e:
            self.run(**kw)
        return e.value

    def systemctl_calls(self):
        return self.calls.read_text().splitlines() if self.calls.exists() else []

    def backups(self):
        return sorted(str(p) for p in self.dir.iterdir() if p.name.endswith(".bak"))


@pytest.fixture
def node(tmp_path):
    return Node(tmp_path)


def test_missing_and_matching_and_checked_return_without_touching(node):
    res = node.run(device_ids=NODE, state="synced")
    assert res["exists"] is False and res["changed"] is False
    assert res["msg"] == "%s does not exist; nothing to do" % node.path
    data = node.put("v2_numa.json")
    res = node.run(device_ids=NODE, state="synced")
    assert res["changed"] is False and res["stale"] is False and "matches the node" in res["msg"]
    res = node.run(device_ids=NODE_REPLACED)  # state=checked
    assert res["stale_ids"] == [GPU_B] and res["changed"] is False
    assert res["msg"] == "%s is stale: %s not on the node" % (node.path, GPU_B)
    assert node.path.read_bytes() == data and node.backups() == [] and node.systemctl_calls() == []


def test_stale_is_backed_up_removed_and_kubelet_restarted(node):
    data = node.put("v2_numa.json")
    res = node.run(device_ids=NODE_REPLACED, state="synced", diff=True)
    assert res["changed"] is True and res["kubelet_restarted"] is True
    assert not node.path.exists() and node.backups() == [res["backup_file"]]
    with open(res["backup_file"], "rb") as f:
        assert f.read() == data
    assert stat.S_IMODE(os.stat(res["backup_file"]).st_mode) == 0o600
    assert node.systemctl_calls() == ["restart kubelet"]
    assert res["msg"] == "removed %s (stale: %s), backup at %s; restarted kubelet" % (
        node.path, GPU_B, res["backup_file"])
    assert res["diff"]["after"] == "" and GPU_B in res["diff"]["before"]
    assert res["diff"]["after_header"] == "%s (absent)" % node.path
    assert node.warnings == ["%s records 2 GPU allocations of pod containers; kubelet forgets "
                             "them when the checkpoint is removed (drain GPU pods first)"
                             % node.path]


def test_check_mode_reports_what_it_would_do_and_touches_nothing(node):
    data = node.put("v2_numa.json")
    res = node.run(device_ids=NODE_REPLACED, state="synced", check_mode=True,
                   kubelet_service="kubelet-gpu.service")
    assert res["changed"] is True and res["kubelet_restarted"] is True and "diff" not in res
    assert res["backup_file"] is None
    assert res["msg"] == "would back up and remove %s (stale: %s) and restart kubelet-gpu.service" \
        % (node.path, GPU_B)
    res = node.run(device_ids=NODE_REPLACED, state="synced", check_mode=True, backup=False,
                   restart_kubelet=False)
    assert res["kubelet_restarted"] is False
    assert res["msg"] == "would remove %s (stale: %s)" % (node.path, GPU_B)
    assert node.path.read_bytes() == data and node.backups() == [] and node.systemctl_calls() == []


def test_no_restart_no_backup_warns(node):
    node.put("v1_k8s119.json")
    res = node.run(device_ids=[GPU_A], state="synced", restart_kubelet=False, backup=False)
    assert res["changed"] is True and res["kubelet_restarted"] is False
    assert res["backup_file"] is None and node.backups() == [] and not node.path.exists()
    assert res["msg"].startswith("removed %s (stale: " % node.path)
    assert res["msg"].endswith(", no backup")
    assert node.warnings[-1] == ("%s; kubelet was not restarted: a running kubelet keeps the old "
                                 "device state in memory and writes it back" % res["msg"])
    assert node.systemctl_calls() == []


def test_unparsable_with_force_is_removed_and_its_bytes_shown(node):
    data = node.put("bad_truncated.json", mode=0o640)
    chk = node.run(device_ids=NODE, state="synced", force=True, check_mode=True, diff=True)
    before = chk["diff"]["before"]
    assert before.startswith("# %s (unparsable: " % node.path)
    assert ", %d bytes)\n" % len(data) in before
    assert before.endswith(data[:DIFF_RAW_LIMIT].decode("utf-8", "replace") + "\n")
    assert node.path.read_bytes() == data
    assert node.warnings[0].startswith("%s is not a usable device checkpoint (" % node.path)
    assert node.warnings[0].endswith("); force=true: removing it")
    res = node.run(device_ids=NODE, state="synced", force=True)
    assert res["changed"] is True and res["kubelet_restarted"] is True and not node.path.exists()
    assert "(unparsable: " in res["msg"]
    with open(res["backup_file"], "rb") as f:
        assert f.read() == data
    assert node.systemctl_calls() == ["restart kubelet"]


def test_a_large_unparsable_checkpoint_is_cut_in_the_diff(node):
    node.path.write_bytes(b"{" + b"x" * (DIFF_RAW_LIMIT * 2))
    res = node.run(device_ids=NODE, state="synced", force=True, check_mode=True, diff=True)
    assert res["diff"]["before"].endswith("x...\n")
    assert len(res["diff"]["before"]) < DIFF_RAW_LIMIT + 300


def test_unparsable_without_force_fails_and_leaves_it(node):
    data = node.put("bad_truncated.json")
    e = node.fail(device_ids=NODE, state="synced")
    assert e.msg.startswith("%s: " % node.path)
    assert e.msg.endswith("; the file was left untouched (state=synced with force=true backs it "
                          "up and removes it)")
    assert e.result["exists"] is True and e.result["changed"] is False
    assert node.path.read_bytes() == data and node.systemctl_calls() == []


def test_empty_device_ids_are_refused_without_force(node):
    data = node.put("v1_k8s119.json")
    e = node.fail(device_ids=[], state="synced")
    assert e.msg.startswith("device_ids is empty: refusing to remove %s," % node.path)
    assert e.result["stale"] is True and e.result["changed"] is False and "msg" not in e.result
    assert node.path.read_bytes() == data and node.systemctl_calls() == []
    res = node.run(device_ids=[], state="synced", force=True)
    assert res["changed"] is True and not node.path.exists()


@pytest.mark.parametrize("what", ["file-owner", "dir-mode"])
def test_unsafe_target_is_refused_without_diff_or_change(node, what):
    data = node.put("v2_numa.json")
    if what == "file-owner":
        os.chown(str(node.path), 65534, 65534)
    else:
        node.dir.chmod(0o777)
    e = node.fail(device_ids=NODE_REPLACED, state="synced", diff=True)
    assert e.msg.startswith("refusing to remove %s: " % node.path)
    assert e.msg.endswith("; the file was left untouched")
    assert e.result["changed"] is False and "diff" not in e.result
    assert node.path.read_bytes() == data and node.backups() == [] and node.systemctl_calls() == []


def test_a_failed_restart_is_reported_with_its_output_and_the_backup(node):
    data = node.put("v2_numa.json")
    node.systemctl("echo 'Failed to restart kubelet.service: Unit not found.' >&2\nexit 5")
    e = node.fail(device_ids=NODE_REPLACED, state="synced", diff=True)
    backup = e.result["backup_file"]
    assert e.msg == ("removed %s (stale: %s), backup at %s, but 'systemctl restart kubelet' "
                     "failed (rc=5): Failed to restart kubelet.service: Unit not found."
                     % (node.path, GPU_B, backup))
    assert e.result["rc"] == 5 and e.result["stdout"] == ""
    assert e.result["stderr"].strip() == "Failed to restart kubelet.service: Unit not found."
    assert e.result["changed"] is True and e.result["kubelet_restarted"] is False
    assert "diff" in e.result
    assert not node.path.exists()
    with open(backup, "rb") as f:
        assert f.read() == data


def test_a_silent_failed_restart_says_no_output(node):
    node.put("v2_numa.json")
    node.systemctl("exit 1")
    e = node.fail(device_ids=NODE_REPLACED, state="synced")
    assert e.msg.endswith("failed (rc=1): no output")


def test_a_hanging_restart_is_killed_at_its_deadline(node):
    node.put("v2_numa.json")
    node.systemctl("exec sleep 600")
    e = node.fail(device_ids=NODE_REPLACED, state="synced", restart_timeout=1)
    assert "'systemctl restart kubelet' failed: " in e.msg
    assert "did not finish within 1s; it was killed" in e.msg
    assert e.result["changed"] is True and "rc" not in e.result
    assert not node.path.exists() and len(node.backups()) == 1


def test_a_checkpoint_replaced_after_reading_is_not_removed(node):
    """backup_and_remove removes only the bytes that were analysed: a get_bin_path that
    rewrites the file stands for kubelet writing it between the read and the removal."""
    node.put("v2_numa.json")
    replaced = node.path.read_bytes().replace(b"{", b"{ ", 1)

    def get_bin_path(name, required=False):
        node.path.write_bytes(replaced)
        return process.get_bin_path(name, opt_dirs=[str(node.bin)])

    p = probe_options.defaults(probe_options.CHECKPOINT_SYNC)
    p.update(path=str(node.path), device_ids=NODE_REPLACED, state="synced")
    with pytest.raises(ProbeFailed) as e:
        checkpoint_sync_run(p, node.warnings.append, get_bin_path, diff=True)
    assert e.value.msg == ("%s: changed since it was read (kubelet wrote it meanwhile); left in "
                           "place, run again" % node.path)
    assert e.value.result["changed"] is False and "diff" not in e.value.result
    assert node.path.read_bytes() == replaced and node.backups() == []
    assert node.systemctl_calls() == []
