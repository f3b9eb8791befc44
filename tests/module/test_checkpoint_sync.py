# -*- coding: utf-8 -*-
"""kubegpu.fleet.checkpoint_sync through real ansible-playbook on real files.

This machine is not booted with systemd and runs no kubelet. Where kubelet must be
restarted successfully, a recording ``systemctl`` shim is put first in PATH (it is found by
the module's own get_bin_path, and its invocation is asserted). The failure path uses the
machine's real /usr/bin/systemctl, which fails here as it would on a node where the restart
fails. The real restart of a real kubelet is proven in the lab with booted nodes.
"""
import os
import shutil
import stat
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.abspath(os.path.join(HERE, "..", "fixtures", "checkpoint"))

sys.path.insert(0, FIX)
from checkpoint_ids import (  # noqa: E402  pylint: disable=wrong-import-position
    GPU_A, GPU_B, GPU_C, GPU_D, GPU_NEW, MIG_1, MIG_2, MIG_3)
NODE = [GPU_A, GPU_B, GPU_C, GPU_D]
# tests/lib/ansible_runner.py sets ANSIBLE_CALLBACKS_ENABLED="", which ansible-core 2.19.14
# rejects ("A non-empty plugin name is required"); naming the stdout callback is a no-op.
HARNESS_ENV = {"ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.json"}
NODE_REPLACED = [GPU_A, GPU_NEW, GPU_C, GPU_D]


class Node(object):
    """A kubelet root-dir in a temp dir plus a recording systemctl shim."""

    def __init__(self, tmp_path):
        self.root = tmp_path / "var-lib-kubelet"
        self.dir = self.root / "device-plugins"
        self.dir.mkdir(parents=True)
        self.path = self.dir / "kubelet_internal_checkpoint"
        self.bin = tmp_path / "shim-bin"
        self.bin.mkdir()
        self.calls = tmp_path / "systemctl.calls"
        shim = self.bin / "systemctl"
        shim.write_text("#!/bin/sh\nprintf '%%s\\n' \"$*\" >> '%s'\nexit 0\n" % self.calls)
        shim.chmod(0o755)

    def put(self, fixture, mode=0o644):
        shutil.copyfile(os.path.join(FIX, fixture), str(self.path))
        self.path.chmod(mode)
        return self.path.read_bytes()

    def env(self):
        env = dict(HARNESS_ENV)
        env["PATH"] = "%s:%s" % (self.bin, os.environ.get("PATH", "/usr/bin:/bin"))
        return env

    def systemctl_calls(self):
        return self.calls.read_text().splitlines() if self.calls.exists() else []

    def backups(self):
        return sorted(str(p) for p in self.dir.iterdir() if p.name.endswith(".bak"))


@pytest.fixture
def node(tmp_path):
    return Node(tmp_path)


def run(ansible, node, args, **kw):
    args = dict(args)
    args.setdefault("path", str(node.path))
    kw.setdefault("env", node.env())
    return ansible.module("checkpoint_sync", args, **kw)


def test_missing_checkpoint_is_nothing_to_do(ansible, node):
    res = run(ansible, node, {"device_ids": NODE, "state": "synced"})
    assert res["_rc"] == 0, res
    assert res["exists"] is False and res["changed"] is False and res["stale"] is False
    assert res["format"] is None and res["registered"] == {} and res["allocated"] == []
    assert res["backup_file"] is None and res["kubelet_restarted"] is False
    assert node.systemctl_calls() == []


def test_checked_matching_v2_reports_only_nvidia_resources(ansible, node):
    data = node.put("v2_numa.json")
    res = run(ansible, node, {"device_ids": NODE})
    assert res["_rc"] == 0, res
    assert res["exists"] is True and res["format"] == "v2"
    assert res["stale"] is False and res["stale_ids"] == [] and res["changed"] is False
    assert res["registered"] == {"nvidia.com/gpu": NODE}
    assert res["allocated"] == [
        {"pod_uid": "6f1c1c9e-3f5e-4c55-9a43-6c1f8a0e8f10", "container": "trainer",
         "resource": "nvidia.com/gpu", "device_ids": [GPU_A, GPU_B]},
        {"pod_uid": "a2b3c4d5-e6f7-4809-9a1b-2c3d4e5f6a7b", "container": "infer",
         "resource": "nvidia.com/gpu", "device_ids": [GPU_C, GPU_D]}]
    assert node.path.read_bytes() == data


def test_checked_stale_v1_changes_nothing(ansible, node):
    data = node.put("v1_k8s119.json")
    res = run(ansible, node, {"device_ids": NODE_REPLACED}, diff=True)
    assert res["_rc"] == 0, res
    assert res["format"] == "v1" and res["stale"] is True and res["stale_ids"] == [GPU_B]
    assert res["changed"] is False and "diff" not in res
    assert "example.com/foo" not in res["registered"]
    assert node.path.read_bytes() == data and node.backups() == []
    assert node.systemctl_calls() == []


def test_synced_check_mode_reports_and_changes_nothing(ansible, node):
    data = node.put("v2_numa.json")
    res = run(ansible, node, {"device_ids": NODE_REPLACED, "state": "synced"},
              check=True, diff=True)
    assert res["_rc"] == 0, res
    assert res["changed"] is True and res["stale_ids"] == [GPU_B]
    assert res["kubelet_restarted"] is True  # would be
    assert res["backup_file"] is None
    diff = res["diff"]
    assert diff["before_header"] == str(node.path)
    assert diff["after_header"] == "%s (absent)" % node.path and diff["after"] == ""
    assert "%s [stale]" % GPU_B in diff["before"]
    assert node.path.read_bytes() == data and node.backups() == []
    assert node.systemctl_calls() == []


def test_synced_stale_backs_up_removes_and_restarts_then_is_idempotent(ansible, node):
    data = node.put("v2_numa.json")
    res = run(ansible, node, {"device_ids": NODE_REPLACED, "state": "synced"}, diff=True)
    assert res["_rc"] == 0, res
    assert res["changed"] is True and res["stale_ids"] == [GPU_B]
    assert not node.path.exists()
    assert node.backups() == [res["backup_file"]]
    st = os.stat(res["backup_file"])
    assert stat.S_IMODE(st.st_mode) == 0o600
    with open(res["backup_file"], "rb") as f:
        assert f.read() == data
    assert res["kubelet_restarted"] is True
    assert node.systemctl_calls() == ["restart kubelet"]
    assert res["diff"]["after"] == "" and GPU_B in res["diff"]["before"]
    assert any("records 2 GPU allocations" in w for w in res.get("warnings", []))

    again = run(ansible, node, {"device_ids": NODE_REPLACED, "state": "synced"}, diff=True)
    assert again["_rc"] == 0, again
    assert again["changed"] is False and again["exists"] is False
    assert node.systemctl_calls() == ["restart kubelet"]
    assert node.backups() == [res["backup_file"]]


def test_synced_not_stale_changes_nothing(ansible, node):
    data = node.put("v2_bootid.json")
    res = run(ansible, node, {"device_ids": [GPU_A, GPU_B], "state": "synced"})
    assert res["_rc"] == 0, res
    assert res["changed"] is False and res["stale"] is False and res["format"] == "v2"
    assert node.path.read_bytes() == data and node.backups() == []
    assert node.systemctl_calls() == []


def test_custom_kubelet_service_no_backup(ansible, node):
    node.put("v2_mig_mixed.json")
    res = run(ansible, node, {"device_ids": [GPU_A, GPU_C, MIG_3], "state": "synced",
                              "kubelet_service": "kubelet-gpu.service", "backup": False})
    assert res["_rc"] == 0, res
    assert res["stale_ids"] == sorted([MIG_1, MIG_2])
    assert res["backup_file"] is None and node.backups() == [] and not node.path.exists()
    assert node.systemctl_calls() == ["restart kubelet-gpu.service"]


def test_restart_kubelet_false_removes_and_warns(ansible, node):
    node.put("v2_replicas.json")
    res = run(ansible, node, {"device_ids": [GPU_A, MIG_1], "state": "synced",
                              "restart_kubelet": False})
    assert res["_rc"] == 0, res
    assert res["stale_ids"] == sorted(GPU_B + "::%d" % i for i in range(4))
    assert res["kubelet_restarted"] is False and not node.path.exists()
    assert len(node.backups()) == 1
    assert node.systemctl_calls() == []
    assert any("kubelet was not restarted" in w for w in res["warnings"])


def test_real_systemctl_failure_is_reported_with_the_backup(ansible, node):
    """No shim: the machine's real systemctl, asked to restart a unit that does not exist
    (on this machine it cannot restart anything at all: not booted with systemd). That is
    how a failed kubelet restart looks to the module on a node."""
    data = node.put("v1_k8s119.json")
    unit = "kubegpu-test-no-such-unit.service"
    res = run(ansible, node, {"device_ids": [GPU_A], "state": "synced",
                              "kubelet_service": unit}, env=HARNESS_ENV)
    assert res["_rc"] != 0
    assert res["failed"] is True
    assert "systemctl restart %s' failed" % unit in res["msg"]
    assert str(node.path) in res["msg"]
    assert res["changed"] is True and res["kubelet_restarted"] is False
    assert not node.path.exists()
    with open(res["backup_file"], "rb") as f:
        assert f.read() == data


def test_legacy_mig_after_driver_upgrade_is_stale(ansible, node):
    node.put("v1_mig_legacy.json")
    legacy = ["MIG-%s/%d/0" % (GPU_A, gi) for gi in (7, 8, 9)]
    res = run(ansible, node, {"device_ids": [GPU_A, GPU_B] + legacy})
    assert res["_rc"] == 0 and res["stale"] is False, res
    res = run(ansible, node, {"device_ids": [GPU_A, GPU_B, MIG_1, MIG_2, MIG_3]})
    assert res["_rc"] == 0, res
    assert res["stale_ids"] == sorted(legacy)


def test_index_ids_warn_and_are_not_stale(ansible, node):
    data = node.put("v2_index_ids.json")
    res = run(ansible, node, {"device_ids": NODE, "state": "synced"})
    assert res["_rc"] == 0, res
    assert res["stale"] is False and res["changed"] is False
    assert any("device-id-strategy=index" in w for w in res["warnings"])
    assert node.path.read_bytes() == data


def test_resource_names_select_what_is_compared(ansible, node):
    node.put("v1_k8s119.json")
    res = run(ansible, node, {"device_ids": [GPU_A], "resource_names": ["example.com/*"]})
    assert res["_rc"] == 0, res
    assert res["registered"] == {"example.com/foo": ["foo-0", "foo-1"]}
    assert res["allocated"][0]["resource"] == "example.com/foo"
    assert res["stale"] is False  # foo ids are not UUIDs: unverifiable, warned
    assert res["warnings"]


def test_null_entries_v2(ansible, node):
    node.put("v2_null_entries.json")
    res = run(ansible, node, {"device_ids": [GPU_A]})
    assert res["_rc"] == 0, res
    assert res["format"] == "unknown" and res["allocated"] == []
    assert res["registered"] == {"nvidia.com/gpu": [GPU_A, GPU_B], "nvidia.com/mig-1g.10gb": []}
    assert res["stale_ids"] == [GPU_B]


@pytest.mark.parametrize("fixture, problem", [
    ("bad_truncated.json", "invalid JSON"),
    ("bad_cpu_manager_state.json", "not a kubelet device-manager checkpoint"),
    ("bad_deviceids_string.json", "DeviceIDs must be a list (v1) or a NUMA-node map (v2)"),
    ("bad_empty.json", "file is empty"),
])
@pytest.mark.parametrize("state", ["checked", "synced"])
def test_malformed_fails_naming_file_and_problem_and_leaves_it(ansible, node, fixture,
                                                               problem, state):
    data = node.put(fixture)
    res = run(ansible, node, {"device_ids": NODE, "state": state})
    assert res["_rc"] != 0 and res["failed"] is True
    assert res["msg"].startswith(str(node.path) + ": ")
    assert problem in res["msg"] and "left untouched" in res["msg"]
    # ansible-core 2.19 marks every failure "(traceback unavailable)"; a real one would be here.
    assert res.get("exception", "(traceback unavailable)") == "(traceback unavailable)"
    assert "Traceback" not in res["msg"]
    assert node.path.read_bytes() == data and node.backups() == []
    assert node.systemctl_calls() == []


def test_malformed_with_force_is_backed_up_and_removed(ansible, node):
    data = node.put("bad_truncated.json", mode=0o640)
    chk = run(ansible, node, {"device_ids": NODE, "state": "synced", "force": True},
              check=True, diff=True)
    assert chk["_rc"] == 0 and chk["changed"] is True, chk
    assert "unparsable" in chk["diff"]["before"] and node.path.read_bytes() == data
    res = run(ansible, node, {"device_ids": NODE, "state": "synced", "force": True})
    assert res["_rc"] == 0, res
    assert res["changed"] is True and res["kubelet_restarted"] is True
    assert not node.path.exists()
    with open(res["backup_file"], "rb") as f:
        assert f.read() == data
    assert stat.S_IMODE(os.stat(res["backup_file"]).st_mode) == 0o600
    assert any("force=true" in w for w in res["warnings"])
    assert node.systemctl_calls() == ["restart kubelet"]


def test_force_does_not_act_in_checked_state(ansible, node):
    data = node.put("bad_truncated.json")
    res = run(ansible, node, {"device_ids": NODE, "force": True})
    assert res["_rc"] != 0 and node.path.read_bytes() == data


def test_empty_device_ids_refuses_to_sync_without_force(ansible, node):
    data = node.put("v2_numa.json")
    res = run(ansible, node, {"device_ids": [], "state": "synced"})
    assert res["_rc"] != 0 and "device_ids is empty" in res["msg"]
    assert res["stale"] is True
    assert node.path.read_bytes() == data and node.systemctl_calls() == []
    res = run(ansible, node, {"device_ids": [], "state": "synced", "force": True})
    assert res["_rc"] == 0 and res["changed"] is True, res
    assert not node.path.exists()


def test_directory_at_path_is_a_clear_failure(ansible, node):
    node.path.mkdir()
    res = run(ansible, node, {"device_ids": NODE, "state": "synced", "force": True})
    assert res["_rc"] != 0 and "not a regular file" in res["msg"]
    assert node.path.is_dir()


@pytest.mark.parametrize("args, fragment", [
    ({"kubelet_service": "kubelet; reboot"}, "kubelet_service must be a systemd unit name"),
    ({"kubelet_service": "--now"}, "kubelet_service must be a systemd unit name"),
    ({"kubelet_service": "*"}, "kubelet_service must be a systemd unit name"),
    ({"kubelet_service": "kube*.service"}, "kubelet_service must be a systemd unit name"),
    ({"kubelet_service": "kubelet[12]"}, "kubelet_service must be a systemd unit name"),
    ({"path": "relative/checkpoint"}, "path must be an absolute path"),
    ({"path": "/var/lib/kubelet/../../etc/shadow"}, "path must not contain '..'"),
    ({"restart_timeout": -1}, "restart_timeout must be between"),
    ({"restart_timeout": 1e300}, "restart_timeout must be between"),
    ({"restart_timeout": "nan"}, "restart_timeout must be between"),
    ({"device_ids": [GPU_A, " "]}, "device_ids[1] is empty"),
    ({"resource_names": [""]}, "resource_names[0] is empty"),
    ({"state": "deleted"}, "value of state must be one of"),
])
def test_bad_options_fail_cleanly(ansible, node, args, fragment):
    data = node.put("v2_numa.json")
    full = {"device_ids": NODE_REPLACED, "state": "synced"}
    full.update(args)
    res = run(ansible, node, full)
    assert res["_rc"] != 0 and fragment in res["msg"], res
    assert node.path.read_bytes() == data and node.systemctl_calls() == []


@pytest.mark.parametrize("what", ["file-owner", "file-mode", "dir-owner", "dir-mode"])
def test_unsafe_checkpoint_is_never_removed(ansible, node, what):
    """A checkpoint (or its directory) another user owns or can write: root would remove what
    that user chose; the module refuses, says why, and leaves file and directory as they are."""
    data = node.put("v2_numa.json")
    if what == "file-owner":
        os.chown(str(node.path), 65534, 65534)
    elif what == "file-mode":
        node.path.chmod(0o666)
    elif what == "dir-owner":
        os.chown(str(node.dir), 65534, 65534)
    else:
        node.dir.chmod(0o777)
    res = run(ansible, node, {"device_ids": NODE_REPLACED, "state": "synced"})
    assert res["_rc"] != 0 and res["changed"] is False, res
    assert res["msg"].startswith("refusing to remove %s: " % node.path)
    assert {"file-owner": "is owned by uid 65534, not root",
            "file-mode": "is writable by group and others (mode 0666)",
            "dir-owner": "its directory %s is owned by uid 65534" % node.dir,
            "dir-mode": "its directory %s is writable by group and others" % node.dir}[what] \
        in res["msg"]
    assert node.path.read_bytes() == data and node.backups() == []
    assert node.systemctl_calls() == []


def test_restart_past_its_deadline_is_killed_and_reported(ansible, node):
    node.put("v2_numa.json")
    (node.bin / "systemctl").write_text("#!/bin/sh\nexec sleep 600\n")
    res = run(ansible, node, {"device_ids": NODE_REPLACED, "state": "synced",
                              "restart_timeout": 2})
    assert res["_rc"] != 0 and "did not finish within 2s; it was killed" in res["msg"], res
    # a clean fail_json (ansible 2.19 adds a placeholder "exception" to every failure)
    assert "module_stderr" not in res
    assert res.get("exception", "(traceback unavailable)") == "(traceback unavailable)"
    assert not node.path.exists() and len(node.backups()) == 1    # removed and backed up


PY38 = "/root/.pyenv/versions/3.8.18/bin/python3.8"


@pytest.mark.skipif(not os.path.exists(PY38), reason="no Python 3.8 here")
def test_runs_on_a_python_38_node(ansible, node):
    """Node-side code must run on Python 3.8: the whole synced path under a 3.8 interpreter."""
    data = node.put("v2_mig_mixed.json")
    env = node.env()
    env["ANSIBLE_PYTHON_INTERPRETER"] = PY38
    res = run(ansible, node, {"device_ids": [GPU_A, GPU_C, MIG_1, MIG_3], "state": "synced"},
              env=env, diff=True)
    assert res["_rc"] == 0, res
    assert res["stale_ids"] == [MIG_2] and res["kubelet_restarted"] is True
    with open(res["backup_file"], "rb") as f:
        assert f.read() == data
    assert node.systemctl_calls() == ["restart kubelet"]
