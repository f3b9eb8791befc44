"""cgroup_devices parsers, name rules, device table and evaluation (no kernel needed).

Hypothesis feeds arbitrary text to every parser the module relies on: devices.list, cgroup
directory names, <proc>/devices and mig-minors (through build_device_table), and whole
directory trees (through discover_containers). Only clean results or the documented errors.
"""
import os
import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.kubegpu.fleet.plugins.module_utils.cgroup import devices as cd
from ansible_collections.kubegpu.fleet.plugins.module_utils.cgroup.device_table import _device, build_device_table
from ansible_collections.kubegpu.fleet.plugins.module_utils.cgroup.devices_list import (
    MAX_U32,
    DeviceRule,
    DevicesList,
    DevicesListError,
    format_rule,
    parse_devices_list,
)
from ansible_collections.kubegpu.fleet.plugins.module_utils.cgroup.kubepods import (
    CgroupDevicesError,
    ContainerRef,
    detect_layout,
    discover_containers,
    find_kubepods,
    parse_container_dirname,
    parse_pod_dirname,
    parse_qos_dirname,
)

FUZZ = settings(max_examples=300, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


# --------------------------------------------------------------------------- devices.list

def test_parse_kernel_output():
    rules = parse_devices_list("c 195:* rw\nc 508:0 rwm\nb 8:0 r\nc *:* m\n\n")
    assert rules == [
        DeviceRule("c", 195, None, frozenset("rw")),
        DeviceRule("c", 508, 0, frozenset("rwm")),
        DeviceRule("b", 8, 0, frozenset("r")),
        DeviceRule("c", None, None, frozenset("m")),
    ]
    assert [format_rule(r) for r in rules] == ["c 195:* rw", "c 508:0 rwm", "b 8:0 r",
                                               "c *:* m"]


@pytest.mark.parametrize("line, reason", [
    ("c 195:0", "expected 3 fields"),
    ("x 195:0 rw", "device type"),
    ("c 195 rw", "is not <major>:<minor>"),
    ("c 195:0:1 rw", "is not <major>:<minor>"),
    ("c -1:0 rw", "major"),
    ("c 195:x rw", "minor"),
    ("c 4294967296:0 rw", "larger than 32 bits"),
    ("c 195:0 rwx", "access"),
    ("c 195:\u0662 rw", "minor"),          # unicode digit: not a kernel number
    ("c 99999999999:0 rw", "major"),
])
def test_parse_errors_name_line_and_problem(line, reason):
    with pytest.raises(DevicesListError) as exc:
        parse_devices_list("c 1:3 rwm\n" + line + "\n")
    assert exc.value.lineno == 2
    assert reason in str(exc.value)
    assert "line 2" in str(exc.value)


def test_allow_all_forms():
    assert DevicesList.from_text("a *:* rwm\n").allow_all
    assert DevicesList.from_text("a\n").allow_all
    assert not DevicesList.from_text("").allow_all
    assert not DevicesList.from_text("").allows("c", 195, 255)


def test_single_exception_must_cover_all_access():
    # what the v1 controller does: "c 195:* r" + "c 195:0 w" do not add up to rw on 195:0
    dl = DevicesList.from_text("c 195:* r\nc 195:0 w\n")
    assert dl.allows("c", 195, 0, "r")
    assert dl.allows("c", 195, 0, "w")
    assert not dl.allows("c", 195, 0, "rw")
    # ...but identical type:major:minor lines are merged by the kernel
    dl = DevicesList.from_text("c 196:0 r\nc 196:0 w\n")
    assert dl.allows("c", 196, 0, "rw")


def test_block_and_char_and_wildcards():
    dl = DevicesList.from_text("c *:* m\nb 195:0 rw\nc 195:* rw\nc *:7 r\n")
    assert dl.allows("c", 195, 3)
    assert not dl.allows("b", 195, 3)
    assert dl.allows("b", 195, 0)
    assert not dl.allows("c", 508, 0)
    assert dl.allows("c", 508, 0, "m")
    assert dl.allows("c", 42, 7, "r")
    assert not dl.allows("c", 42, 7, "rw")


_rule = st.builds(
    DeviceRule, st.sampled_from("bc"), st.one_of(st.none(), st.integers(0, MAX_U32)),
    st.one_of(st.none(), st.integers(0, MAX_U32)),
    st.sets(st.sampled_from("rwm"), min_size=1).map(frozenset))


@FUZZ
@given(st.lists(_rule, max_size=20))
def test_format_parse_roundtrip(rules):
    assert parse_devices_list("\n".join(format_rule(r) for r in rules)) == rules


@FUZZ
@given(st.text(max_size=400))
def test_devices_list_fuzz_text(text):
    try:
        rules = parse_devices_list(text)
    except DevicesListError as e:
        assert e.lineno >= 1 and e.reason
        return
    dl = DevicesList(rules)
    for r in rules:
        assert r.type in ("a", "b", "c")
        assert r.access and r.access <= frozenset("rwm")
        if r.type != "a":
            # every listed rule allows what it names
            assert dl.allows(r.type, r.major or 0, r.minor or 0, "".join(r.access))


_line = st.one_of(
    st.text(alphabet="abcx*:0123456789 rwm\t", max_size=30),
    st.builds(lambda t, a, b, acc: "%s %s:%s %s" % (t, a, b, acc), st.sampled_from("abcd"),
              st.sampled_from(["*", "0", "195", "4294967295", "4294967296", "-1", ""]),
              st.sampled_from(["*", "0", "255", "x"]), st.text(alphabet="rwmx", max_size=4)))


@FUZZ
@given(st.lists(_line, max_size=12), st.sampled_from("bc"), st.integers(0, 5000),
       st.integers(0, 300), st.sampled_from(["r", "w", "rw", "m", "rwm"]))
def test_devices_list_fuzz_lines(lines, dtype, major, minor, access):
    try:
        dl = DevicesList.from_text("\n".join(lines))
    except DevicesListError:
        return
    verdict = dl.allows(dtype, major, minor, access)
    assert isinstance(verdict, bool)
    # less access never turns an allow into a deny
    if verdict:
        for letter in access:
            assert dl.allows(dtype, major, minor, letter)


# --------------------------------------------------------------------------- cgroup names

@pytest.mark.parametrize("name, uid", [
    ("pod0f1c2d3e-4a5b-4c6d-8e9f-a0b1c2d3e4f5", "0f1c2d3e-4a5b-4c6d-8e9f-a0b1c2d3e4f5"),
    ("kubepods-besteffort-pod0f1c2d3e_4a5b_4c6d_8e9f_a0b1c2d3e4f5.slice",
     "0f1c2d3e-4a5b-4c6d-8e9f-a0b1c2d3e4f5"),
    ("kubepods-pod0f1c2d3e_4a5b_4c6d_8e9f_a0b1c2d3e4f5.slice",
     "0f1c2d3e-4a5b-4c6d-8e9f-a0b1c2d3e4f5"),
    ("kubelet-kubepods-burstable-pod6a4e0d3b1c2f5e6d7c8b9a0f1e2d3c4b.slice",
     "6a4e0d3b1c2f5e6d7c8b9a0f1e2d3c4b"),   # static pod: md5 UID
    ("pod", None), ("kubepods-besteffort.slice", None), ("besteffort", None),
    ("kubepods-pod.slice", None), ("podx/y", None), ("system.slice", None),
])
def test_pod_dirnames(name, uid):
    assert parse_pod_dirname(name) == uid


@pytest.mark.parametrize("name, qos", [
    ("besteffort", "besteffort"), ("burstable", "burstable"),
    ("kubepods-besteffort.slice", "besteffort"), ("kubepods-burstable.slice", "burstable"),
    ("kubelet-kubepods-burstable.slice", "burstable"),
    ("guaranteed", None), ("-burstable.slice", None), ("kubepods.slice", None),
])
def test_qos_dirnames(name, qos):
    assert parse_qos_dirname(name) == qos


CID = "4f5e6d7c8b9a0f1e2d3c4b5a69788796a5b4c3d2e1f00112233445566778899a"


@pytest.mark.parametrize("name, parsed", [
    ("cri-containerd-%s.scope" % CID, ("cri-containerd", CID)),
    ("docker-%s.scope" % CID, ("docker", CID)),
    ("crio-%s.scope" % CID, ("crio", CID)),
    ("crio-conmon-%s.scope" % CID, None),
    ("crio-conmon-%s" % CID, None),
    (CID, (None, CID)),
    ("crio-%s" % CID, ("crio", CID)),
    ("init.scope", None), ("kubepods-burstable.slice", None), ("..", None), ("", None),
    ("a b", None),
])
def test_container_dirnames(name, parsed):
    assert parse_container_dirname(name) == parsed


_names = st.one_of(
    st.text(max_size=80),
    st.builds(lambda p, u, s: p + u + s,
              st.sampled_from(["pod", "kubepods-pod", "kubepods-burstable-pod", "x-pod", "-pod"]),
              st.text(alphabet=string.hexdigits + "_-", max_size=40),
              st.sampled_from(["", ".slice", ".scope", "-"])),
    st.builds(lambda p, i, s: p + i + s,
              st.sampled_from(["cri-containerd-", "docker-", "crio-", "crio-conmon-", ""]),
              st.text(alphabet=string.hexdigits + "._-", max_size=70),
              st.sampled_from(["", ".scope", ".slice"])),
)


@FUZZ
@given(_names)
def test_name_parsers_fuzz(name):
    uid = parse_pod_dirname(name)
    if uid is not None:
        assert uid and "_" not in uid and all(c.isalnum() or c == "-" for c in uid)
        assert uid.replace("-", "").isascii()
    qos = parse_qos_dirname(name)
    assert qos in (None, "besteffort", "burstable")
    parsed = parse_container_dirname(name)
    if parsed is not None:
        runtime, cid = parsed
        assert runtime in (None, "cri-containerd", "docker", "crio", "cri-o", "libpod")
        assert cid and "/" not in cid and cid not in (".", "..")
        assert not name.startswith("crio-conmon-")


def test_name_parsers_reject_non_strings():
    for value in (None, 5, b"pod1"):
        assert parse_pod_dirname(value) is None
        assert parse_qos_dirname(value) is None
        assert parse_container_dirname(value) is None


# --------------------------------------------------------------------------- discovery on plain trees

def _touch(path, text=""):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


UID = "0f1c2d3e-4a5b-4c6d-8e9f-a0b1c2d3e4f5"


def test_discovery_plain_tree_all_layouts(tmp_path):
    """Plain directories (the lab's shape) for both drivers and every QoS class."""
    root = str(tmp_path / "cg")
    u = UID.replace("-", "_")
    paths = [
        "devices/kubepods/besteffort/pod%s/%s" % (UID, CID),
        "devices/kubepods/burstable/pod%s/crio-%s" % (UID, CID),
        "devices/kubepods/pod%s/%s" % (UID, CID),
        "devices/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod%s.slice/"
        "cri-containerd-%s.scope" % (u, CID),
        "devices/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod%s.slice/"
        "docker-%s.scope" % (u, CID),
        "devices/kubepods.slice/kubepods-pod%s.slice/crio-%s.scope" % (u, CID),
    ]
    for p in paths:
        _touch(os.path.join(root, p, "devices.list"), "a *:* rwm\n")
    _touch(os.path.join(root, "devices/kubepods.slice/kubepods-pod%s.slice/crio-conmon-%s.scope"
                        % (u, CID), "devices.list"))
    _touch(os.path.join(root, "devices/system.slice/containerd.service/devices.list"))
    version, hierarchy = detect_layout(root)
    assert (version, hierarchy) == ("v1", os.path.join(root, "devices"))
    kp = find_kubepods(hierarchy)
    assert sorted(os.path.basename(k) for k in kp) == ["kubepods", "kubepods.slice"]
    refs = discover_containers(hierarchy, kp)
    assert sorted(r.path for r in refs) == sorted("/" + p[len("devices/"):] for p in paths)
    assert {r.pod_uid for r in refs} == {UID}
    assert {r.container_id for r in refs} == {CID}
    assert sorted(r.qos for r in refs) == ["besteffort", "besteffort", "burstable",
                                           "burstable", "guaranteed", "guaranteed"]


def test_detect_layout_variants(tmp_path):
    v2 = tmp_path / "v2"
    _touch(str(v2 / "cgroup.controllers"), "cpu memory\n")
    assert detect_layout(str(v2)) == ("v2", str(v2))
    dev = tmp_path / "dev_hier"
    _touch(str(dev / "devices.list"), "a *:* rwm\n")
    assert detect_layout(str(dev)) == ("v1", str(dev))
    bare = tmp_path / "bare"
    (bare / "kubepods.slice").mkdir(parents=True)
    assert detect_layout(str(bare)) == ("v1", str(bare))
    with pytest.raises(CgroupDevicesError, match="does not exist"):
        detect_layout(str(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(CgroupDevicesError, match="cannot tell the cgroup version"):
        detect_layout(str(tmp_path / "empty"))


def test_find_kubepods_nested_and_explicit(tmp_path):
    hier = tmp_path / "h"
    (hier / "kubelet.slice" / "kubelet-kubepods.slice").mkdir(parents=True)
    (hier / "docker" / "abc" / "kubepods").mkdir(parents=True)
    assert find_kubepods(str(hier)) == [str(hier / "kubelet.slice" / "kubelet-kubepods.slice")]
    assert find_kubepods(str(hier), "docker/abc/kubepods") == [
        str(hier / "docker" / "abc" / "kubepods")]
    assert find_kubepods(str(hier), str(hier / "docker/abc/kubepods")) == [
        str(hier / "docker" / "abc" / "kubepods")]
    with pytest.raises(CgroupDevicesError, match="kubepods_path nope"):
        find_kubepods(str(hier), "nope")


@FUZZ
@given(st.lists(st.tuples(_names, _names, _names), max_size=6))
def test_discovery_fuzz_tree(tmp_path_factory, triples):
    root = str(tmp_path_factory.mktemp("fuzz"))
    for a, b, c in triples:
        parts = []
        for part in ("kubepods", a, b, c):
            if not part or "/" in part or "\0" in part or part in (".", "..") \
                    or len(part.encode("utf-8", "surrogatepass")) > 200:
                break
            parts.append(part)
        try:
            os.makedirs(os.path.join(root, *parts), exist_ok=True)
        except (OSError, UnicodeError, ValueError):
            continue
    refs = discover_containers(root, find_kubepods(root))
    for r in refs:
        assert os.path.isdir(r.cgroup_dir)
        assert r.path.startswith("/kubepods/")
        assert r.qos in ("guaranteed", "besteffort", "burstable")
        assert parse_container_dirname(os.path.basename(r.cgroup_dir))[1] == r.container_id


# --------------------------------------------------------------------------- device table

PROC_DEVICES = """Character devices:
  1 mem
195 nvidia-frontend
236 nvidia-caps
511 nvidia-uvm

Block devices:
  8 sd
"""


def _plain_node(tmp_path, devices=PROC_DEVICES, mig="gpu0/gi1/access 12\n"
                "gpu0/gi1/ci0/access 13\n", dev_files=("nvidiactl", "nvidia0", "nvidia3",
                                                       "nvidia-uvm", "nvidia-caps/nvidia-cap12",
                                                       "nvidia-caps/nvidia-cap13",
                                                       "nvidia-caps/nvidia-cap99")):
    proc = tmp_path / "proc"
    dev = tmp_path / "dev"
    _touch(str(proc / "devices"), devices)
    _touch(str(proc / "driver/nvidia-caps/mig-minors"), mig)
    for f in dev_files:
        _touch(str(dev / f))
    dev.mkdir(exist_ok=True)
    return str(proc), str(dev)


def test_device_table_plain_files_lab_style(tmp_path):
    """Lab nodes have plain files: minors come from the names, majors from /proc/devices."""
    proc, dev = _plain_node(tmp_path)
    _touch(os.path.join(proc, "driver/nvidia/gpus/0000:3b:00.0/information"),
           "Model: H100\nDevice Minor: \t 1\n")
    table, warnings = build_device_table(proc, dev)
    by = {d["name"]: d for d in table}
    assert (by["nvidiactl"]["major"], by["nvidiactl"]["minor"]) == (195, 255)
    assert (by["nvidia-uvm"]["major"], by["nvidia-uvm"]["minor"]) == (511, 0)
    assert (by["nvidia-uvm-tools"]["major"], by["nvidia-uvm-tools"]["minor"]) == (511, 1)
    assert by["nvidia-uvm-tools"]["role"] == "recommended"
    assert by["nvidia-uvm-tools"]["node"] == "missing"
    assert sorted(d["minor"] for d in table if d["role"] == "gpu") == [0, 1, 3]
    assert by["nvidia1"]["node"] == "missing"       # known only from /proc/driver/nvidia/gpus
    assert by["nvidia0"]["node"] == "not_char_device"
    mig = [d for d in table if d["role"] == "mig"]
    assert [(d["minor"], d["cap"], d["gpu"], d["gi"], d["ci"], d["major"], d["needs"])
            for d in mig] == [(12, "gi", 0, 1, None, 236, "r"), (13, "ci", 0, 1, 0, 236, "r")]
    assert any("nvidia-uvm-tools" in w for w in warnings)
    assert all(d["needs"] == "rw" for d in table if d["role"] != "mig")


def test_device_table_uvm_not_loaded(tmp_path):
    proc, dev = _plain_node(tmp_path, devices="Character devices:\n195 nvidia\n")
    table, warnings = build_device_table(proc, dev)
    assert [d["name"] for d in table if d["role"] == "required"] == ["nvidiactl"]
    assert any("nvidia-uvm is not registered" in w for w in warnings)


def test_device_table_no_driver(tmp_path):
    proc, dev = _plain_node(tmp_path, devices="Character devices:\n  1 mem\n")
    table, warnings = build_device_table(proc, dev)
    assert table == []
    assert any("NVIDIA driver is not loaded" in w for w in warnings)


def test_device_table_unreadable_proc(tmp_path):
    with pytest.raises(CgroupDevicesError, match="cannot read .*devices"):
        build_device_table(str(tmp_path / "nope"), str(tmp_path))


_devices_line = st.one_of(
    st.text(max_size=40),
    st.builds(lambda n, name: "%s %s" % (n, name),
              st.one_of(st.integers(-5, 5000).map(str), st.text(max_size=5)),
              st.sampled_from(["nvidia", "nvidia-frontend", "nvidia-uvm", "nvidia-caps",
                               "nvidia-modeset", ""])),
    st.sampled_from(["Character devices:", "Block devices:", ""]))
_mig_line = st.one_of(
    st.text(max_size=40),
    st.builds(lambda g, i, c, m: "gpu%s/gi%s%s/access %s" % (g, i, c, m),
              st.integers(0, 40), st.integers(0, 20),
              st.one_of(st.just(""), st.integers(0, 10).map(lambda x: "/ci%d" % x)),
              st.one_of(st.integers(0, 5000).map(str), st.text(max_size=4))),
    st.sampled_from(["config 1", "monitor 2", "config x"]))


@FUZZ
@given(st.lists(_devices_line, max_size=15), st.lists(_mig_line, max_size=15),
       st.lists(st.integers(0, 300), max_size=5))
def test_device_table_fuzz_proc_text(tmp_path_factory, devlines, miglines, caps):
    base = tmp_path_factory.mktemp("node")
    proc, dev = _plain_node(base, devices="\n".join(devlines), mig="\n".join(miglines),
                            dev_files=["nvidiactl", "nvidia0"]
                            + ["nvidia-caps/nvidia-cap%d" % c for c in caps])
    table, warnings = build_device_table(proc, dev)
    names = [d["name"] for d in table]
    assert len(names) == len(set(names))
    for d in table:
        assert 0 <= d["major"] <= 4095
        assert 0 <= d["minor"] <= 0xFFFFF
        assert d["role"] in ("required", "recommended", "gpu", "mig")
        assert d["needs"] in ("r", "rw")
    assert all(isinstance(w, str) for w in warnings)


# --------------------------------------------------------------------------- evaluation

def _ref(path="/kubepods/pod1/abc"):
    return ContainerRef("/x" + path, path, "1", "abc", None, "guaranteed")


def _table():
    t = [
        _device("nvidiactl", "required", 195, 255, "/dev/nvidiactl", "present"),
        _device("nvidia-uvm", "required", 508, 0, "/dev/nvidia-uvm", "present"),
        _device("nvidia-uvm-tools", "recommended", 508, 1, "/dev/nvidia-uvm-tools",
                "present"),
        _device("nvidia0", "gpu", 195, 0, "/dev/nvidia0", "present", gpu=0),
    ]
    return t


def _verdicts(text):
    dl = DevicesList.from_text(text)
    return dict((d["name"], ("allowed" if dl.allows("c", d["major"], d["minor"], d["needs"])
                             else "denied", None)) for d in _table())


def test_evaluate_seed4_uvm_missing():
    res = cd.evaluate_container(_ref(), _table(), _verdicts("c 195:255 rw\nc 195:0 rw\n"), {})
    assert res["gpu"] and res["broken"]
    assert [(m["name"], m["major"], m["minor"], m["required"]) for m in res["missing"]] == [
        ("nvidia-uvm", 508, 0, True), ("nvidia-uvm-tools", 508, 1, False)]
    assert "nvidia-uvm" in res["diagnosis"] and "device plugin" in res["diagnosis"]


def test_evaluate_cpu_manager_wipe_needs_evidence():
    wiped = _verdicts("c 1:3 rwm\nc *:* m\n")
    res = cd.evaluate_container(_ref(), _table(), wiped, {})
    assert not res["gpu"] and not res["broken"] and res["missing"] == []
    res = cd.evaluate_container(_ref(), _table(), wiped,
                                {"visible_devices": "GPU-1", "pids": [5]})
    assert res["gpu"] and res["broken"] and res["gpu_evidence"] == ["env"]
    assert "CPU manager" in res["diagnosis"]


def test_evaluate_unknown_is_not_broken():
    v = _verdicts("c 195:255 rw\nc 195:0 rw\n")
    v["nvidia-uvm"] = ("unknown", "no character device node")
    res = cd.evaluate_container(_ref(), _table(), v, {})
    assert not res["broken"] and res["unchecked"] == ["nvidia-uvm"]
    assert any("nvidia-uvm could not be checked" in w for w in res["warnings"])


def test_audit_bad_input(tmp_path):
    proc, dev = _plain_node(tmp_path)
    root = tmp_path / "cg"
    (root / "kubepods").mkdir(parents=True)
    with pytest.raises(CgroupDevicesError, match="mode 'bogus'"):
        cd.audit(str(root), proc, dev, mode="bogus")
    with pytest.raises(CgroupDevicesError, match="probe_method 'x'"):
        cd.audit(str(root), proc, dev, probe_method="x")
    with pytest.raises(CgroupDevicesError, match="dev_path /nonexistent"):
        cd.audit(str(root), proc, "/nonexistent")
    with pytest.raises(CgroupDevicesError, match="proc_path /nonexistent"):
        cd.audit(str(root), "/nonexistent", dev)
    with pytest.raises(CgroupDevicesError, match="probe_timeout"):
        cd.audit(str(root), proc, dev, probe_timeout=0)
    with pytest.raises(CgroupDevicesError, match="cgroup_root /nonexistent"):
        cd.audit("/nonexistent", proc, dev)
    v2 = tmp_path / "v2"
    _touch(str(v2 / "cgroup.controllers"))
    with pytest.raises(CgroupDevicesError, match="mode list reads cgroup v1"):
        cd.audit(str(v2), proc, dev, mode="list")


def test_audit_plain_tree_list_mode(tmp_path):
    """The lab's shape end to end: plain devices.list files, plain dev files."""
    proc, dev = _plain_node(tmp_path)
    root = tmp_path / "cg" / "devices"
    good = root / ("kubepods/burstable/pod%s/%s" % (UID, CID))
    bad = root / ("kubepods/burstable/pod%s/%s" % (UID, CID[::-1]))
    junk = root / ("kubepods/pod%s/%s" % (UID, "deadbeef"))
    _touch(str(good / "devices.list"), "c 195:255 rw\nc 511:0 rw\nc 511:1 rw\nc 195:0 rw\n")
    _touch(str(bad / "devices.list"), "c 195:255 rw\nc 195:3 rw\n")
    _touch(str(junk / "devices.list"), "c 195:255 rw\ngarbage\n")
    res = cd.audit(str(tmp_path / "cg"), proc, dev, mode="auto")
    assert res["mode"] == "list" and res["cgroup_version"] == "v1"
    by = {c["container_id"]: c for c in res["containers"]}
    assert not by[CID]["broken"] and by[CID]["gpu_minors"] == [0]
    assert by[CID[::-1]]["broken"] and by[CID[::-1]]["gpu_minors"] == [3]
    assert "line 2 'garbage'" in by["deadbeef"]["error"]
    assert res["summary"] == {"pods": 1, "containers": 3, "gpu_containers": 2, "broken": 1,
                              "with_warnings": 1, "errors": 1}
    assert res["broken"] == [{"path": "/kubepods/burstable/pod%s/%s" % (UID, CID[::-1]),
                              "pod_uid": UID, "container_id": CID[::-1],
                              "missing": ["nvidia-uvm"], "diagnosis": by[CID[::-1]]["diagnosis"]}]


# ------------------------------------------------------------ hostile devices.list

def test_huge_devices_list_is_too_large_not_a_parse_error(tmp_path):
    leaf = tmp_path / "c"
    leaf.mkdir()
    with open(str(leaf / "devices.list"), "wb") as f:
        f.write(b"c 195:0 rwm\n" * 20)
        f.truncate(50 << 20)  # 50 MB: the first MiB parses, the rest is NUL bytes
    with pytest.raises(CgroupDevicesError) as e:
        cd.list_verdicts(str(leaf), [])
    assert "too large to be a devices.list" in str(e.value)
    assert "line 1" not in str(e.value) and "expected 3 fields" not in str(e.value)


def test_devices_list_under_the_bound_is_read_whole(tmp_path):
    """Many rules (a few MiB) are still read completely: the last one counts."""
    leaf = tmp_path / "c"
    leaf.mkdir()
    rules = "".join("b 8:%d rwm\n" % i for i in range(200000)) + "c 195:7 rwm\n"
    assert 1 << 20 < len(rules) < cd.DEVICES_LIST_LIMIT
    (leaf / "devices.list").write_text(rules)
    table = [{"name": "nvidia7", "type": "c", "major": 195, "minor": 7, "needs": "rw"}]
    verdicts, allow_all = cd.list_verdicts(str(leaf), table)
    assert verdicts == {"nvidia7": ("allowed", None)} and allow_all is False


@pytest.mark.parametrize("make, message", [
    (os.mkfifo, "is a FIFO"),
    (os.mkdir, "is a directory"),
    (lambda p: (os.symlink(p + ".b", p), os.symlink(p, p + ".b")), "symlink loop"),
])
def test_devices_list_that_is_not_a_file_is_refused_without_blocking(tmp_path, make, message):
    leaf = tmp_path / "c"
    leaf.mkdir()
    make(str(leaf / "devices.list"))
    with pytest.raises(CgroupDevicesError, match=message):
        cd.list_verdicts(str(leaf), [])


@pytest.mark.parametrize("value", [float("nan"), 1e300, -1])
def test_out_of_range_probe_timeout(tmp_path, value):
    with pytest.raises(CgroupDevicesError, match="probe_timeout must be between"):
        cd.audit(str(tmp_path), str(tmp_path), str(tmp_path), probe_timeout=value)
