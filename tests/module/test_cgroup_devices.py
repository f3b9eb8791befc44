"""kubegpu.fleet.cgroup_devices through real ansible-playbook, against real kernel cgroups.

The kubepods hierarchies live in the real cgroup v1 devices controller
(/sys/fs/cgroup/devices/kgtest-*) with real allow/deny rules, and in the real cgroup v2
hierarchy (/sys/fs/cgroup/unified/kgtest-*) with real BPF device programs; the GPU driver is
the only fake edge (a proc dir with its /proc/devices lines, mknod'ed nodes without a driver).
"""
import os

import pytest

from ansible_collections.kubegpu.fleet.tests.unit.plugins.module_utils.cgroup.test_cgroup_support import (
    RUNC_DEFAULT,
    UVM_MAJOR,
    CgroupTree,
    FakeNode,
    bpf_support,
    build_kubepods,
    kernel_verdicts,
    nvidia_rules,
)

UID = "0f1c2d3e-4a5b-4c6d-8e9f-a0b1c2d3e4f5"
# tests/lib/ansible_runner.py sets ANSIBLE_CALLBACKS_ENABLED="" which ansible-core 2.19 reads
# as one callback with an empty name (rc 250); name the stdout callback instead.
HARNESS_ENV = {"ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.json"}


def _run(ansible, args, **kwargs):
    return ansible.module("cgroup_devices", args, env=HARNESS_ENV, **kwargs)


@pytest.fixture
def tree(request):
    version = getattr(request, "param", "v1")
    if version == "v2":
        why = bpf_support()
        if why:
            pytest.skip("no cgroup v2 device BPF here: %s" % why)
    t = CgroupTree(version)
    yield t
    t.cleanup()


def _strip(res):
    return dict((k, v) for k, v in res.items() if not k.startswith("_"))


def _assert_matches(res, expect):
    assert res["_rc"] == 0, res
    assert not res.get("failed"), res.get("msg")
    assert res["changed"] is False
    assert sorted(c["path"] for c in res["containers"]) == sorted(expect)
    nodes = [(d["path"], d["needs"]) for d in res["devices"]]
    for c in res["containers"]:
        e = expect[c["path"]]
        assert (c["gpu"], c["broken"]) == (e.gpu, e.broken), c["path"]
        assert sorted(m["name"] for m in c["missing"]) == e.missing, c["path"]
        assert c["gpu_minors"] == e.gpu_minors
        assert len(c["mig_caps"]) == e.mig
        truth = kernel_verdicts(c["cgroup_dir"], nodes)
        assert dict((d["path"], c["access"][d["name"]]) for d in res["devices"]) == truth
    assert res["summary"]["broken"] == len(res["broken"]) == sum(
        1 for e in expect.values() if e.broken)
    for b in res["broken"]:
        assert b["missing"] and b["diagnosis"] and b["pod_uid"].count("-") == 4


@pytest.mark.parametrize("tree, driver, mode", [
    ("v1", "cgroupfs", "auto"), ("v1", "systemd", "probe"), ("v2", "systemd", "auto"),
    ("v2", "cgroupfs", "probe"),
], indirect=["tree"])
def test_audit_seeds_check_mode_identical(ansible, tree, driver, mode, tmp_path):
    """Seeds 3 and 4 on both drivers, cgroup v1 and v2: same answer as the kernel, and check
    mode returns exactly the same result."""
    node = FakeNode(str(tmp_path / "node"))
    expect = build_kubepods(tree, node, driver, str(tmp_path))
    args = {"cgroup_root": tree.root, "proc_path": node.proc, "dev_path": node.dev,
            "mode": mode}
    res = _run(ansible, args)
    _assert_matches(res, expect)
    assert res["cgroup_version"] == tree.version
    assert res["mode"] == (mode if mode != "auto" else
                           ("list" if tree.version == "v1" else "probe"))
    checked = _run(ansible, args, check=True, diff=True)
    assert _strip(checked) == _strip(res)
    assert "diff" not in checked


def test_list_and_probe_disagree_only_on_hidden_deny(ansible, tree, tmp_path):
    node = FakeNode(str(tmp_path / "node"))
    cdir = tree.deny("kubepods/pod%s/abc123" % UID, "c %d:0 rwm" % UVM_MAJOR)
    tree.restrict("kubepods/pod%s/def456" % UID, RUNC_DEFAULT + nvidia_rules(gpus=[0]))
    args = {"cgroup_root": tree.root, "proc_path": node.proc, "dev_path": node.dev}
    listed = _run(ansible, dict(args, mode="list"))
    probed = _run(ansible, dict(args, mode="probe", probe_method="open"))
    assert listed["_rc"] == probed["_rc"] == 0
    lc = dict((c["container_id"], c) for c in listed["containers"])
    pc = dict((c["container_id"], c) for c in probed["containers"])
    assert not lc["abc123"]["broken"] and lc["abc123"]["allow_all"]
    assert pc["abc123"]["broken"]
    assert kernel_verdicts(cdir, [(node.dev + "/nvidia-uvm", "rw")]) == {
        node.dev + "/nvidia-uvm": "denied"}
    assert lc["def456"]["access"] == pc["def456"]["access"]
    assert not lc["def456"]["broken"]


def test_host_warnings_when_uvm_not_loaded(ansible, tree, tmp_path):
    node = FakeNode(str(tmp_path / "node"), uvm=False)
    tree.restrict("kubepods/pod%s/abc123" % UID,
                  RUNC_DEFAULT + nvidia_rules(gpus=[0], uvm=False))
    res = _run(ansible, {"cgroup_root": tree.root, "proc_path": node.proc,
                         "dev_path": node.dev})
    assert res["_rc"] == 0
    assert any("nvidia-uvm is not registered" in w for w in res["warnings"])
    assert res["containers"][0]["gpu"] and not res["containers"][0]["broken"]


def test_plain_file_tree_like_the_lab(ansible, tmp_path):
    """Plain devices.list copies under a fake cgroup_root, mode list."""
    node = FakeNode(str(tmp_path / "node"))
    leaf = tmp_path / "cg" / "devices" / "kubepods.slice" / "kubepods-besteffort.slice" / (
        "kubepods-besteffort-pod%s.slice" % UID.replace("-", "_")) / "cri-containerd-ab12.scope"
    leaf.mkdir(parents=True)
    (leaf / "devices.list").write_text("\n".join(RUNC_DEFAULT + nvidia_rules(
        gpus=[1], uvm=False)) + "\n")
    res = _run(ansible, {"cgroup_root": str(tmp_path / "cg"), "proc_path": node.proc,
                         "dev_path": node.dev, "mode": "list"})
    assert res["_rc"] == 0
    assert res["broken"] == [{
        "path": "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod%s.slice/"
                "cri-containerd-ab12.scope" % UID.replace("-", "_"),
        "pod_uid": UID, "container_id": "ab12", "missing": ["nvidia-uvm"],
        "diagnosis": res["containers"][0]["diagnosis"]}]
    probe = _run(ansible, {"cgroup_root": str(tmp_path / "cg"), "proc_path": node.proc,
                           "dev_path": node.dev, "mode": "probe"})
    assert probe["_rc"] == 0
    assert "no cgroup.procs" in probe["containers"][0]["error"]
    assert probe["summary"]["errors"] == 1


@pytest.mark.parametrize("args, message", [
    ({"cgroup_root": "/nonexistent/cg"}, "cgroup_root /nonexistent/cg does not exist"),
    ({"mode": "bogus"}, "value of mode must be one of: auto, list, probe, got: bogus"),
    ({"probe_method": "ioctl"}, "value of probe_method must be one of: access, open"),
    ({"proc_path": "/nonexistent/proc"}, "proc_path /nonexistent/proc does not exist"),
    ({"dev_path": "/nonexistent/dev"}, "dev_path /nonexistent/dev does not exist"),
    ({"kubepods_path": "no/such"}, "kubepods_path no/such is not a directory"),
    ({"probe_timeout": 0}, "probe_timeout must be between 0.001 and 86400 seconds, got 0"),
    ({"cgroup_root": "/sys/fs/cgroup/unified", "mode": "list"}, "mode list reads cgroup v1"),
])
def test_bad_input_fails_cleanly(ansible, tmp_path, args, message):
    node = FakeNode(str(tmp_path / "node"))
    full = {"proc_path": node.proc, "dev_path": node.dev}
    full.update(args)
    if "unified" in full.get("cgroup_root", "") and not os.path.isfile(
            "/sys/fs/cgroup/unified/cgroup.controllers"):
        pytest.skip("no cgroup2 mount at /sys/fs/cgroup/unified")
    res = _run(ansible, full)
    assert res["_rc"] != 0 and res.get("failed")
    assert message in res["msg"]
    # ansible-core 2.19 puts "(traceback unavailable)" in every fail_json result
    assert "Traceback" not in res["_stderr"] + str(res.get("exception", ""))
