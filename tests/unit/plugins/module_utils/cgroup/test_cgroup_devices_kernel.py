"""cgroup_devices against the real kernel: cgroup v1 devices controller and cgroup v2 BPF.

Every container verdict is compared with what the kernel does when a separate process in
that cgroup opens the node (``kernel_verdicts``), for list mode, probe mode (access and open)
and, on cgroup v2, a real BPF_PROG_TYPE_CGROUP_DEVICE program per container.
"""
import os

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ansible_collections.kubegpu.fleet.plugins.module_utils.cgroup import devices as cd
from ansible_collections.kubegpu.fleet.plugins.module_utils.cgroup import probe as cgroup_probe
from ansible_collections.kubegpu.fleet.plugins.module_utils.cgroup.devices_list import (
    DevicesList,
    format_rule,
    parse_devices_list,
)
from ansible_collections.kubegpu.fleet.plugins.module_utils.cgroup.kubepods import CgroupDevicesError, detect_layout

from ansible_collections.kubegpu.fleet.tests.unit.plugins.module_utils.cgroup.test_cgroup_support import (
    GPU_MAJOR,
    RUNC_DEFAULT,
    UVM_MAJOR,
    V1_DEVICES,
    V2_UNIFIED,
    CgroupTree,
    FakeNode,
    bpf_support,
    build_kubepods,
    kernel_verdicts,
    nvidia_rules,
)

_BPF_WHY = None


def _v2_or_skip():
    global _BPF_WHY  # pylint: disable=global-statement
    if _BPF_WHY is None:
        _BPF_WHY = bpf_support() or ""
    if _BPF_WHY:
        pytest.skip("no cgroup v2 device BPF here: %s" % _BPF_WHY)


@pytest.fixture
def v1_tree():
    tree = CgroupTree("v1")
    yield tree
    tree.cleanup()


@pytest.fixture
def v2_tree():
    _v2_or_skip()
    tree = CgroupTree("v2")
    yield tree
    tree.cleanup()


@pytest.fixture
def tree(request):
    version = request.param
    if version == "v2":
        _v2_or_skip()
    t = CgroupTree(version)
    yield t
    t.cleanup()


def _children_of_me():
    me = str(os.getpid())
    kids = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                stat = f.read()
        except OSError:
            continue
        if stat.rsplit(")", 1)[1].split()[1] == me:
            kids.add(int(entry))
    return kids


def _check_against_kernel_and_expectations(res, expect, mode):
    assert sorted(c["path"] for c in res["containers"]) == sorted(expect)
    nodes = [(d["path"], d["needs"]) for d in res["devices"]]
    for c in res["containers"]:
        e = expect[c["path"]]
        truth = kernel_verdicts(c["cgroup_dir"], nodes)
        mine = dict((d["path"], c["access"][d["name"]]) for d in res["devices"])
        assert mine == truth, c["path"]
        assert c["error"] is None
        assert c["gpu"] is e.gpu, c["path"]
        assert c["broken"] is e.broken, c["path"]
        assert sorted(m["name"] for m in c["missing"]) == e.missing, c["path"]
        assert c["gpu_minors"] == e.gpu_minors, c["path"]
        assert len(c["mig_caps"]) == e.mig, c["path"]
        assert c["sandbox"] is e.sandbox, c["path"]
        if e.evidence is not None:
            assert c["gpu_evidence"] == e.evidence, c["path"]
        warnings = [w for w in c["warnings"] if "a *:* rwm" not in w]
        if e.warn:
            assert any(e.warn in w for w in warnings), (c["path"], warnings)
        elif not e.broken:
            assert warnings == [], (c["path"], warnings)
        for m in c["missing"]:
            dev = [d for d in res["devices"] if d["name"] == m["name"]][0]
            assert (m["major"], m["minor"], m["path"]) == (dev["major"], dev["minor"],
                                                           dev["path"])
        if c["broken"]:
            assert c["diagnosis"]
    assert res["summary"]["containers"] == len(expect)
    assert res["summary"]["broken"] == sum(1 for e in expect.values() if e.broken)
    assert res["summary"]["gpu_containers"] == sum(1 for e in expect.values() if e.gpu)
    assert res["summary"]["pods"] == 4
    assert sorted(b["path"] for b in res["broken"]) == sorted(
        p for p, e in expect.items() if e.broken)


@pytest.mark.parametrize("tree, mode, method", [
    ("v1", "list", "access"), ("v1", "probe", "access"), ("v1", "probe", "open"),
    ("v2", "probe", "access"), ("v2", "probe", "open"),
], indirect=["tree"])
@pytest.mark.parametrize("driver", ["cgroupfs", "systemd"])
def test_audit_matches_kernel(tree, mode, method, driver, tmp_path):
    node = FakeNode(str(tmp_path), gpu_major_name="nvidia" if driver == "systemd"
                    else "nvidia-frontend")
    expect = build_kubepods(tree, node, driver, str(tmp_path))
    before = _children_of_me()
    res = cd.audit(cgroup_root=tree.root, proc_path=node.proc, dev_path=node.dev, mode=mode,
                   probe_method=method)
    # the probe left no process behind: same children, cgroups hold only our processes
    assert _children_of_me() == before
    spawned = set(p.pid for p in tree.procs)
    for c in res["containers"]:
        with open(os.path.join(c["cgroup_dir"], "cgroup.procs")) as f:
            assert set(int(x) for x in f.read().split()) <= spawned
    assert res["cgroup_version"] == tree.version
    assert res["mode"] == mode
    assert res["host_warnings"] == []
    assert res["devices"][0]["major"] == GPU_MAJOR
    assert [d["major"] for d in res["devices"] if d["name"].startswith("nvidia-uvm")] == [
        UVM_MAJOR, UVM_MAJOR]
    _check_against_kernel_and_expectations(res, expect, mode)
    for c in res["containers"]:
        assert c["qos"] in c["path"] or c["qos"] == "guaranteed"
        assert c["pod_uid"].count("-") == 4 and "_" not in c["pod_uid"]
        if driver == "systemd":
            assert c["runtime"] in ("cri-containerd", "crio", "docker")
            assert c["path"].endswith("%s-%s.scope" % (c["runtime"], c["container_id"]))
        else:
            assert c["path"].endswith("/" + c["container_id"]) or c["runtime"] == "crio"


@pytest.mark.parametrize("tree", ["v1", "v2"], indirect=True)
def test_auto_mode_picks_by_version(tree, tmp_path):
    node = FakeNode(str(tmp_path))
    rel = "kubepods/burstable/pod%s/%s" % ("0f1c2d3e-4a5b-4c6d-8e9f-a0b1c2d3e4f5", "c0ffee")
    tree.restrict(rel, RUNC_DEFAULT + nvidia_rules(gpus=[0], uvm=False, tools=False))
    res = cd.audit(cgroup_root=tree.root, proc_path=node.proc, dev_path=node.dev)
    assert (res["cgroup_version"], res["mode"]) == (
        ("v1", "list") if tree.version == "v1" else ("v2", "probe"))
    [c] = res["containers"]
    assert c["broken"]
    assert [m["name"] for m in c["missing"]] == ["nvidia-uvm", "nvidia-uvm-tools"]
    if tree.version == "v2":
        with pytest.raises(CgroupDevicesError, match="mode list reads cgroup v1"):
            cd.audit(cgroup_root=tree.root, proc_path=node.proc, dev_path=node.dev,
                     mode="list")


def test_real_mount_points_are_detected():
    if not os.path.isfile(os.path.join(V1_DEVICES, "devices.list")):
        pytest.skip("no cgroup v1 devices hierarchy here")
    assert detect_layout("/sys/fs/cgroup") == ("v1", V1_DEVICES)
    assert detect_layout(V1_DEVICES) == ("v1", V1_DEVICES)
    if os.path.isfile(os.path.join(V2_UNIFIED, "cgroup.controllers")):
        assert detect_layout(V2_UNIFIED) == ("v2", V2_UNIFIED)


def test_hidden_deny_on_default_allow_cgroup(v1_tree, tmp_path):
    """devices.list of a default-allow cgroup shows 'a *:* rwm' even with deny exceptions:
    list mode says so in a warning, probe mode sees the real EPERM."""
    node = FakeNode(str(tmp_path))
    rel = "kubepods/pod%s/%s" % ("0f1c2d3e-4a5b-4c6d-8e9f-a0b1c2d3e4f5", "c0ffee")
    cdir = v1_tree.deny(rel, "c %d:0 rwm" % UVM_MAJOR)
    with open(os.path.join(cdir, "devices.list")) as f:
        assert f.read().split("\n")[0] == "a *:* rwm"
    listed = cd.audit(v1_tree.root, node.proc, node.dev, mode="list")
    probed = cd.audit(v1_tree.root, node.proc, node.dev, mode="probe")
    [lc], [pc] = listed["containers"], probed["containers"]
    assert lc["allow_all"] and not lc["broken"]
    assert any("mode probe checks them" in w for w in lc["warnings"])
    assert pc["broken"] and [m["name"] for m in pc["missing"]] == ["nvidia-uvm"]
    truth = kernel_verdicts(cdir, [(node.dev + "/nvidia-uvm", "rw")])
    assert truth == {node.dev + "/nvidia-uvm": "denied"}


def test_missing_uvm_module_and_nodes(v1_tree, tmp_path):
    """No nvidia-uvm line in /proc/devices: host warning, uvm unchecked, nothing broken."""
    node = FakeNode(str(tmp_path), uvm=False)
    rel = "kubepods/pod%s/%s" % ("0f1c2d3e-4a5b-4c6d-8e9f-a0b1c2d3e4f5", "c0ffee")
    v1_tree.restrict(rel, RUNC_DEFAULT + nvidia_rules(gpus=[0], uvm=False, tools=False))
    for mode in ("list", "probe"):
        res = cd.audit(v1_tree.root, node.proc, node.dev, mode=mode)
        assert any("nvidia-uvm is not registered" in w for w in res["host_warnings"])
        [c] = res["containers"]
        assert c["gpu"] and not c["broken"] and c["gpu_minors"] == [0]


def test_probe_missing_node_is_unchecked(v1_tree, tmp_path):
    node = FakeNode(str(tmp_path))
    os.unlink(os.path.join(node.dev, "nvidia-uvm"))
    rel = "kubepods/pod%s/%s" % ("0f1c2d3e-4a5b-4c6d-8e9f-a0b1c2d3e4f5", "c0ffee")
    v1_tree.restrict(rel, RUNC_DEFAULT + nvidia_rules(gpus=[0]))
    res = cd.audit(v1_tree.root, node.proc, node.dev, mode="probe")
    [c] = res["containers"]
    assert c["unchecked"] == ["nvidia-uvm"] and not c["broken"]
    assert any("no character device node" in w for w in c["warnings"])
    assert any("nvidia-uvm (508:0) has no character device node" in w
               for w in res["host_warnings"])
    # list mode still knows the numbers from /proc/devices
    res = cd.audit(v1_tree.root, node.proc, node.dev, mode="list")
    assert res["containers"][0]["access"]["nvidia-uvm"] == "allowed"


def test_nested_kubelet_and_kubepods_path(v1_tree, tmp_path):
    """kind-style kubelet.slice/kubelet-kubepods.slice is found; deeper needs kubepods_path."""
    node = FakeNode(str(tmp_path))
    uid = "0f1c2d3e_4a5b_4c6d_8e9f_a0b1c2d3e4f5"
    v1_tree.restrict("kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
                     "kubelet-kubepods-besteffort-pod%s.slice/cri-containerd-ab12.scope" % uid,
                     RUNC_DEFAULT + nvidia_rules(gpus=[1]))
    v1_tree.restrict("docker/f00d/kubepods/pod%s/cd34" % uid.replace("_", "-"), RUNC_DEFAULT)
    res = cd.audit(v1_tree.root, node.proc, node.dev)
    assert [c["container_id"] for c in res["containers"]] == ["ab12"]
    assert res["containers"][0]["qos"] == "besteffort"
    res = cd.audit(v1_tree.root, node.proc, node.dev, kubepods_path="docker/f00d/kubepods")
    assert [(c["container_id"], c["gpu"]) for c in res["containers"]] == [("cd34", False)]
    assert res["containers"][0]["path"] == "/docker/f00d/kubepods/pod%s/cd34" % uid.replace(
        "_", "-")


def test_frozen_v2_cgroup_is_not_probed(v2_tree, tmp_path):
    node = FakeNode(str(tmp_path))
    pod = "kubepods.slice/kubepods-pod0f1c2d3e_4a5b_4c6d_8e9f_a0b1c2d3e4f5.slice"
    v2_tree.restrict(pod + "/cri-containerd-ab12.scope", RUNC_DEFAULT + nvidia_rules(gpus=[0]))
    freeze = os.path.join(v2_tree.path(pod), "cgroup.freeze")
    with open(freeze, "w") as f:
        f.write("1")
    try:
        before = _children_of_me()
        res = cd.audit(v2_tree.root, node.proc, node.dev)
        assert _children_of_me() == before
    finally:
        with open(freeze, "w") as f:
            f.write("0")
    [c] = res["containers"]
    assert "frozen" in c["error"] and not c["broken"]
    assert res["summary"]["errors"] == 1


# --------------------------------------------------------------------------- differential fuzz

_MAJORS = [GPU_MAJOR, UVM_MAJOR, 509]
_MINORS = [0, 1, 255]


@pytest.fixture(scope="module")
def node_universe(tmp_path_factory):
    """Char and block nodes for every (major, minor) the rule fuzzer uses."""
    base = str(tmp_path_factory.mktemp("universe"))
    nodes = []
    for kind, flag in (("c", 0o020000), ("b", 0o060000)):
        for major in _MAJORS:
            for minor in _MINORS:
                path = os.path.join(base, "%s-%d-%d" % (kind, major, minor))
                os.mknod(path, 0o600 | flag, os.makedev(major, minor))
                nodes.append((kind, major, minor, path))
    return nodes


@pytest.fixture(scope="module")
def v1_module_tree():
    tree = CgroupTree("v1")
    yield tree
    tree.cleanup()


@pytest.fixture(scope="module")
def v2_module_tree():
    _v2_or_skip()
    tree = CgroupTree("v2")
    yield tree
    tree.cleanup()


_rules = st.lists(st.builds(
    lambda t, ma, mi, acc: "%s %s:%s %s" % (t, ma, mi, "".join(sorted(acc))),
    st.sampled_from("bc"), st.sampled_from(["*"] + [str(m) for m in _MAJORS]),
    st.sampled_from(["*"] + [str(m) for m in _MINORS]),
    st.sets(st.sampled_from("rwm"), min_size=1)), max_size=7)
_DIFF = settings(max_examples=50, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow,
                                        HealthCheck.function_scoped_fixture])
_counter = [0]


@_DIFF
@given(rules=_rules)
@example(rules=["c 195:* r", "c 195:0 w", "b *:0 rw"])   # one exception must cover rw
@example(rules=["c *:* m", "c 508:* rwm", "b 508:1 r"])
def test_devices_list_semantics_match_v1_kernel(v1_module_tree, node_universe, rules):
    """Random allow lists written to a real v1 cgroup: the kernel's own devices.list parses,
    round-trips, and our evaluator and both probe methods agree with the kernel on r, w, rw."""
    _counter[0] += 1
    rel = "diff%d" % _counter[0]
    cdir = v1_module_tree.restrict(rel, rules)
    with open(os.path.join(cdir, "devices.list")) as f:
        text = f.read()
    parsed = parse_devices_list(text)
    assert [format_rule(r) for r in parsed] == [line for line in text.splitlines() if line]
    dl = DevicesList(parsed)
    for access in ("r", "w", "rw"):
        requests = [(path, access) for _k, _ma, _mi, path in node_universe]
        truth = kernel_verdicts(cdir, requests)
        for method in cgroup_probe.METHODS:
            outcome = cgroup_probe.probe_cgroup(cdir, [p for p, _a in requests], access=access,
                                                method=method)
            assert outcome.warnings == []
            assert dict((r.path, r.verdict) for r in outcome.results) == truth, (method,
                                                                                 access)
        for kind, major, minor, path in node_universe:
            assert dl.allows(kind, major, minor, access) is (truth[path] == "allowed"), (
                rules, text, path, access)
    os.rmdir(cdir)
    v1_module_tree.dirs.remove(cdir)


@_DIFF
@given(rules=_rules)
@example(rules=["c 195:* r", "c 195:0 w", "b *:0 rw"])
def test_probe_matches_v2_bpf_kernel(v2_module_tree, node_universe, rules):
    """Random BPF device programs on a real cgroup v2 leaf: probe == kernel."""
    _counter[0] += 1
    cdir = v2_module_tree.restrict("diff%d" % _counter[0], rules)
    for access in ("r", "rw"):
        requests = [(path, access) for _k, _ma, _mi, path in node_universe]
        truth = kernel_verdicts(cdir, requests)
        for method in cgroup_probe.METHODS:
            outcome = cgroup_probe.probe_cgroup(cdir, [p for p, _a in requests], access=access,
                                                method=method)
            assert dict((r.path, r.verdict) for r in outcome.results) == truth, (method,
                                                                                 access)
        # the program implements runc's rules; without duplicate keys v1 semantics hold
        keys = [r.rsplit(" ", 1)[0] for r in rules]
        if len(keys) == len(set(keys)):
            dl = DevicesList.from_text("\n".join(rules))
            for kind, major, minor, path in node_universe:
                assert dl.allows(kind, major, minor, access) is (truth[path] == "allowed")


def test_kernel_ground_truth_helper_sees_eperm(v1_tree, tmp_path):
    """The ground truth itself: EPERM only for denied nodes, ENXIO for allowed ones."""
    node = FakeNode(str(tmp_path))
    cdir = v1_tree.restrict("k/a", ["c %d:0 rw" % GPU_MAJOR])
    assert kernel_verdicts(cdir, [(node.dev + "/nvidia0", "rw"),
                                  (node.dev + "/nvidiactl", "rw")]) == {
        node.dev + "/nvidia0": "allowed", node.dev + "/nvidiactl": "denied"}
