# -*- coding: utf-8 -*-
"""kubelet module_utils: quantities, the GKE ladder, flags, /proc scanning, config, facts."""
import json
import os
import shutil
import subprocess
import threading
import time
import uuid
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet import facts as k

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "kubelet")

from ansible_collections.kubegpu.fleet.tests.fixtures.kubelet.kubelet_fakeproc import FakeProc, fixture_args, fixture_path, write_script  # noqa: E402

GIB = 1 << 30
MIB = 1 << 20


# -- quantities ---------------------------------------------------------------------------
@pytest.mark.parametrize("text,expected", [
    ("100Mi", 100 * MIB),
    ("1Gi", GIB),
    ("1.5Gi", 3 * GIB // 2),
    ("3.5Gi", 7 * GIB // 2),
    ("2829Mi", 2829 * MIB),
    ("128974848", 128974848),
    ("129e6", 129000000),
    ("129M", 129000000),
    ("1k", 1000),
    ("1Ki", 1024),
    ("7Ti", 7 << 40),
    ("1P", 10 ** 15),
    ("1Pi", 1 << 50),
    ("1E", 10 ** 18),
    ("1Ei", 1 << 60),
    ("1E3", 1000),
    ("2.5e+3", 2500),
    ("1e-3", 1),          # rounds up like Quantity.Value()
    ("500m", 1),
    ("1000m", 1),
    ("1001m", 2),
    ("100u", 1),
    ("100n", 1),
    ("0", 0),
    ("0.1", 1),
    ("+1Ki", 1024),
    (".5Ki", 512),
    ("1.Gi", GIB),
    ("00100Mi", 100 * MIB),
    (" 256Mi ", 256 * MIB),
    (1073741824, GIB),    # YAML integer
    (1.5, 2),             # YAML float
])
def test_quantity_to_bytes(text, expected):
    assert k.quantity_to_bytes(text) == expected


def test_parse_quantity_is_exact():
    assert k.parse_quantity("1.5Gi") == Fraction(3 << 29)
    assert k.parse_quantity("100m") == Fraction(1, 10)
    assert k.parse_quantity("-2k") == -2000
    assert k.parse_quantity("12.345678901234567890123456789Gi") == \
        Fraction(12345678901234567890123456789, 10 ** 27) * GIB


@pytest.mark.parametrize("bad,words", [
    ("1GB", "unknown suffix 'GB'"),
    ("1KiB", "unknown suffix 'KiB'"),
    ("1K", "unknown suffix 'K'"),
    ("1ki", "unknown suffix 'ki'"),
    ("1e", "unknown suffix 'e'"),
    ("1Ki1", "unknown suffix 'Ki1'"),
    ("1 Gi", "unknown suffix ' Gi'"),
    ("Mi", "expected a number"),
    ("ten", "expected a number"),
    ("1.5.5", ""),
    ("--1", "expected a number"),
    ("", "empty"),
    ("1e31", "exponent out of range"),
    (True, "expected a string"),
    (None, "expected a string"),
    ([1], "expected a string"),
    (float("nan"), ""),
])
def test_bad_quantities_name_the_value(bad, words):
    with pytest.raises(k.QuantityError) as e:
        k.quantity_to_bytes(bad)
    assert repr(bad) in str(e.value)
    assert words in str(e.value)
    assert isinstance(e.value, ValueError)


@pytest.mark.parametrize("bad,words", [("-1Gi", "negative"), ("9Ei", "larger than int64")])
def test_memory_quantities_must_fit(bad, words):
    with pytest.raises(k.QuantityError) as e:
        k.quantity_to_bytes(bad)
    assert repr(bad) in str(e.value) and words in str(e.value)


@given(st.integers(0, 2 ** 40), st.sampled_from(sorted(k._BINARY_SUFFIXES)))
def test_binary_suffixes_property(n, suffix):
    expected = n * 1024 ** k._BINARY_SUFFIXES[suffix]
    if expected > 2 ** 63 - 1:
        with pytest.raises(k.QuantityError):
            k.quantity_to_bytes("%d%s" % (n, suffix))
    else:
        assert k.quantity_to_bytes("%d%s" % (n, suffix)) == expected


@given(st.integers(0, 10 ** 6), st.integers(0, 999))
def test_decimal_fractions_round_up(whole, milli):
    value = k.quantity_to_bytes("%d.%03dk" % (whole, milli))
    assert value == whole * 1000 + milli


def test_memory_threshold():
    assert k.parse_memory_threshold("100Mi") == {"raw": "100Mi", "bytes": 100 * MIB, "percent": None}
    assert k.parse_memory_threshold("10%", 1000) == {"raw": "10%", "bytes": 100, "percent": 10.0}
    assert k.parse_memory_threshold("2.5%", 64 * GIB)["bytes"] == int(64 * GIB * 0.025)
    assert k.parse_memory_threshold("5%", 1001)["bytes"] == 50   # truncated like the kubelet
    assert k.parse_memory_threshold("2%")["bytes"] is None
    for bad in ("150%", "-1%", "abc%", "%"):
        with pytest.raises(k.QuantityError) as e:
            k.parse_memory_threshold(bad, GIB)
        assert repr(bad) in str(e.value)


# -- GKE ladder ---------------------------------------------------------------------------
@pytest.mark.parametrize("gib,reserved_hundredths_gib", [
    (0, 0),
    (1, 25),                 # 25% of 1 GiB
    (4, 100),                # 25% of 4
    (8, 180),                # + 20% of 4
    (16, 260),               # + 10% of 8
    (32, 356),               # + 6% of 16
    (128, 932),              # + 6% of 112
    (256, 1188),             # + 2% of 128
    (2048, 4772),            # + 2% of 1920
])
def test_gke_ladder(gib, reserved_hundredths_gib):
    assert k.gke_reserved_memory_bytes(gib * GIB) == reserved_hundredths_gib * GIB // 100


def test_gke_ladder_byte_exact_and_eviction_separate():
    assert k.gke_reserved_memory_bytes(85 * GIB) == 7237019893
    assert k.gke_reserved_memory_bytes(1000) == 250
    assert k.GKE_EVICTION_THRESHOLD_BYTES == 100 * MIB


@given(st.integers(0, 2 ** 44), st.integers(1, 2 ** 34))
def test_gke_ladder_monotonic_and_bounded(n, delta):
    a = k.gke_reserved_memory_bytes(n)
    b = k.gke_reserved_memory_bytes(n + delta)
    assert a <= b <= a + delta // 4 + 1
    assert a <= n // 4
    assert a >= n // 50


@pytest.mark.parametrize("bad", [-1, 1.5, True, "16Gi", None])
def test_gke_ladder_rejects_bad_input(bad):
    with pytest.raises(ValueError) as e:
        k.gke_reserved_memory_bytes(bad)
    assert repr(bad) in str(e.value)


# -- flags --------------------------------------------------------------------------------
def test_parse_flags_forms():
    pairs, args = k.parse_flags([
        "--config=/var/lib/kubelet/config.yaml", "--root-dir", "/data/kubelet",
        "--fail-swap-on", "--v=2", "-v", "4", "-v5", "-h", "--root_dir=/other",
        "--anonymous-auth=false", "--cpu-manager-policy", "static", "--oom-score-adj", "-999",
        "--unknown-bool", "--node-labels=a=b,c=d", "--", "--not-a-flag", "x"])
    assert pairs == [
        ("config", "/var/lib/kubelet/config.yaml"), ("root-dir", "/data/kubelet"),
        ("fail-swap-on", True), ("v", "2"), ("v", "4"), ("v", "5"), ("help", True),
        ("root-dir", "/other"), ("anonymous-auth", False), ("cpu-manager-policy", "static"),
        ("oom-score-adj", "-999"), ("unknown-bool", True), ("node-labels", "a=b,c=d")]
    assert args == ["--not-a-flag", "x"]


def test_bool_flags_never_eat_the_next_argument():
    pairs, args = k.parse_flags(["--fail-swap-on", "false", "--rotate-certificates",
                                 "--register-node=F", "--version"])
    assert pairs == [("fail-swap-on", True), ("rotate-certificates", True),
                     ("register-node", False), ("version", True)]
    assert args == ["false"]
    # a value that is not a bool literal stays text (the kubelet would refuse it)
    assert k.parse_flags(["--fail-swap-on=maybe"])[0] == [("fail-swap-on", "maybe")]


def test_flag_at_end_without_value():
    assert k.parse_flags(["--config"]) == ([("config", True)], [])
    assert k.parse_flags(["--config", "--v=2"])[0] == [("config", True), ("v", "2")]


def test_flags_dict_last_wins_and_repeats():
    pairs, _args = k.parse_flags(["--v=2", "--node-ip=10.0.0.1", "--v=4",
                                  "--feature-gates=A=true", "--feature-gates=B=false"])
    last, repeated = k.flags_dict(pairs)
    assert last == {"v": "4", "node-ip": "10.0.0.1", "feature-gates": "B=false"}
    assert repeated == {"v": ["2", "4"], "feature-gates": ["A=true", "B=false"]}


def test_flag_map_and_list():
    pairs, _args = k.parse_flags([
        "--system-reserved=cpu=500m,memory=1Gi",
        "--system-reserved", "memory=2Gi, ephemeral-storage=10Gi",
        "--eviction-hard=memory.available<500Mi,nodefs.available<10%",
        "--enforce-node-allocatable=pods", "--enforce-node-allocatable",
        "system-reserved,kube-reserved"])
    assert k.flag_map(pairs, "system-reserved") == {
        "cpu": "500m", "memory": "2Gi", "ephemeral-storage": "10Gi"}
    assert k.flag_map(pairs, "eviction-hard", "<") == {
        "memory.available": "500Mi", "nodefs.available": "10%"}
    assert k.flag_map(pairs, "kube-reserved") is None
    assert k.flag_list(pairs, "enforce-node-allocatable") == [
        "pods", "system-reserved", "kube-reserved"]
    assert k.flag_list(pairs, "nope") is None
    assert k.flag_list([("enforce-node-allocatable", "")], "enforce-node-allocatable") == []
    with pytest.raises(ValueError) as e:
        k.flag_map([("kube-reserved", "memory:1Gi")], "kube-reserved")
    assert "'memory:1Gi'" in str(e.value) and "--kube-reserved" in str(e.value)


@pytest.mark.parametrize("name", ["kubeadm.args", "eks.args", "gke.args"])
def test_real_shaped_command_lines(name):
    argv = fixture_args(name)
    pairs, args = k.parse_flags(argv[1:])
    flags, _repeated = k.flags_dict(pairs)
    assert args == []
    assert flags["config"].startswith("/")
    assert all(not n.startswith("-") for n, _value in pairs)
    if name == "eks.args":
        assert flags["config"] == "/etc/kubernetes/kubelet/kubelet-config.json"
        assert flags["container-runtime-endpoint"] == "unix:///run/containerd/containerd.sock"
        assert flags["node-labels"].count("=") == 3


# -- /proc --------------------------------------------------------------------------------
@pytest.mark.parametrize("comm,cmdline,expected", [
    ("kubelet", ["/usr/bin/kubelet", "--v=2"], ["/usr/bin/kubelet", "--v=2"]),
    ("kubelet", ["/bin/sh", "/usr/local/bin/kubelet", "--v=2"],
     ["/usr/local/bin/kubelet", "--v=2"]),
    ("hyperkube", ["/hyperkube", "kubelet", "--v=2"], ["kubelet", "--v=2"]),
    ("kubelet", [], []),
    (None, ["/opt/bin/kubelet"], ["/opt/bin/kubelet"]),
    ("journalctl", ["journalctl", "-u", "kubelet"], None),
    ("kubelet-exporte", ["/usr/bin/kubelet-exporter"], None),
    ("sleep", ["sleep", "kubelet"], None),
])
def test_kubelet_argv(comm, cmdline, expected):
    assert k.kubelet_argv(comm, cmdline) == expected


def test_parse_stat():
    assert k.parse_stat("42 (kube let) (x) S 1 42 42 0 -1 4194560 1 0 0 0 1 1 0 0 20 0 9 0 "
                        "777 1 1") == ("S", 777)
    assert k.parse_stat("") == (None, None)
    assert k.parse_stat("garbage") == (None, None)
    with open("/proc/self/stat") as f:
        state, start = k.parse_stat(f.read())
    assert state == "R" and start > 0


def test_find_kubelet_in_fake_tree(tmp_path):
    fp = FakeProc(tmp_path)
    fp.add_noise()
    fp.add_process(4242, fixture_args("kubeadm.args"), starttime=3000)
    fp.add_process(4300, ["/usr/bin/kubelet"], state="Z", starttime=10)   # zombie: skipped
    fp.add_process(4400, ["/bin/bash", "/opt/wrap/kubelet", "--v=4"], comm="kubelet",
                   starttime=2000)
    found = k.find_kubelet_processes(fp.path)
    assert [p["pid"] for p in found] == [4400, 4242]    # oldest first
    assert found[0]["argv"] == ["/opt/wrap/kubelet", "--v=4"]
    assert found[1]["argv"][0] == "/usr/bin/kubelet"


def test_find_kubelet_survives_missing_and_odd_entries(tmp_path):
    assert k.find_kubelet_processes(str(tmp_path / "nope")) == []
    fp = FakeProc(tmp_path)
    fp.add_vanished(10)
    d = fp.add_process(11, ["/usr/bin/kubelet"])
    os.unlink(os.path.join(d, "stat"))          # vanished between reads: still reported
    os.unlink(os.path.join(d, "comm"))
    assert [p["pid"] for p in k.find_kubelet_processes(fp.path)] == [11]


def test_find_kubelet_on_real_proc_under_process_churn():
    stop = threading.Event()

    def churn():
        while not stop.is_set():
            procs = [subprocess.Popen(["true"]) for _i in range(8)]
            for p in procs:
                p.wait()

    t = threading.Thread(target=churn)
    t.start()
    try:
        for _round in range(30):
            found = k.find_kubelet_processes("/proc")
            assert all(p["argv"] is not None for p in found)
    finally:
        stop.set()
        t.join()


def test_find_a_real_process_named_kubelet(tmp_path):
    binary = str(tmp_path / "kubelet")
    shutil.copy("/bin/sleep", binary)
    proc = subprocess.Popen([binary, "300"])
    try:
        deadline = time.time() + 10
        found = []
        while time.time() < deadline:
            found = [p for p in k.find_kubelet_processes("/proc") if p["pid"] == proc.pid]
            if found:
                break
            time.sleep(0.05)
        assert found and found[0]["argv"] == [binary, "300"]
        assert found[0]["comm"] == "kubelet"
        target, deleted = k.exe_info("/proc", proc.pid)
        assert target == binary and deleted is False
        os.unlink(binary)
        target, deleted = k.exe_info("/proc", proc.pid)
        assert target == binary and deleted is True
    finally:
        proc.kill()
        proc.wait()


def test_read_meminfo_total(tmp_path):
    fp = FakeProc(tmp_path)
    assert k.read_meminfo_total(fp.path) is None
    fp.set_meminfo(256 * GIB)
    assert k.read_meminfo_total(fp.path) == 256 * GIB
    assert k.read_meminfo_total("/proc") > 0


def test_read_cmdline(tmp_path):
    fp = FakeProc(tmp_path)
    fp.add_process(5, ["/usr/bin/kubelet", "--node-labels=a=b c", ""])
    assert k.read_cmdline(fp.path, 5) == ["/usr/bin/kubelet", "--node-labels=a=b c", ""]
    fp.add_process(6, [])
    assert k.read_cmdline(fp.path, 6) == []
    assert k.read_cmdline(fp.path, 7) is None


# -- version ------------------------------------------------------------------------------
def test_parse_version_output():
    assert k.parse_version_output("Kubernetes v1.30.5-gke.1014001\n") == "v1.30.5-gke.1014001"
    assert k.parse_version_output("Kubernetes v1.29.3-eks-ae9a62a") == "v1.29.3-eks-ae9a62a"
    assert k.parse_version_output("Python 3.11.7") is None


def _fake_tools(tmp_path, **scripts):
    """get_bin_path over stand-in dpkg-query/rpm scripts (the package database's interface)."""
    bindir = tmp_path / "tools"
    bindir.mkdir(exist_ok=True)
    for name, body in scripts.items():
        write_script(str(bindir / name.replace("_", "-")), "#!/bin/sh\n" + body)

    def get_bin_path(name):
        path = bindir / name
        return str(path) if path.exists() else None
    return get_bin_path


@pytest.mark.parametrize("body,version,source", [
    ("echo 'ii |1.31.4-1.1'\n", "v1.31.4", "package:kubelet 1.31.4-1.1 (dpkg)"),
    ("echo 'ii |1:1.30.2-00'\n", "v1.30.2", "package:kubelet 1:1.30.2-00 (dpkg)"),
])
def test_package_version_from_dpkg(tmp_path, body, version, source):
    assert k.package_version(_fake_tools(tmp_path, dpkg_query=body)) == (version, source, None)


def test_package_version_falls_back_to_rpm_and_reports_failures(tmp_path):
    tools = _fake_tools(tmp_path, dpkg_query="echo 'dpkg-query: no packages found' >&2\nexit 1\n",
                        rpm="echo 'ii |1.29.8-150500.1.1'\n")
    assert k.package_version(tools) == ("v1.29.8", "package:kubelet 1.29.8-150500.1.1 (rpm)", None)
    tools = _fake_tools(tmp_path / "b" if (tmp_path / "b").mkdir() is None else None,
                        dpkg_query="printf 'rc |1.31.4-1.1'\n")
    version, source, err = k.package_version(tools)
    assert version is None and source is None and "status rc" in err
    assert k.package_version(lambda name: None)[2] == \
        "no package database (dpkg-query, rpm) on the node"


def test_package_version_survives_hostile_output(tmp_path):
    tools = _fake_tools(tmp_path, dpkg_query="printf 'ii |\\377\\376abc'\n")
    version, _source, err = k.package_version(tools)
    assert version is None and "not a Kubernetes version" in err
    with pytest.raises(ValueError, match="kubelet package must be a package name"):
        k.package_version(tools, package="-kubelet")


def _alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return k.parse_stat(f.read())[0] not in ("Z", "X")
    except (IOError, OSError):
        return False


def test_package_version_deadline_kills_the_whole_group(tmp_path):
    pids = tmp_path / "pids"
    tools = _fake_tools(tmp_path, dpkg_query="sleep 300 &\necho $$ $! > %s\nwait\n" % pids)
    version, _source, err = k.package_version(tools, timeout=1.0)
    assert version is None and "did not finish within 1s" in err
    shell, child = [int(x) for x in pids.read_text().split()]
    assert not _alive(shell) and not _alive(child)


# -- config -------------------------------------------------------------------------------
def test_parse_config_messages():
    cfg, parser, err, warn = k.parse_config("kind: KubeletConfiguration\n", "/x.yaml")
    assert err is None and parser == "pyyaml" and cfg == {"kind": "KubeletConfiguration"}
    assert warn == []
    _c, _p, err, warn = k.parse_config("cgroupDriver: systemd\n", "/x.yaml")
    assert err is None and "no 'kind'" in warn[0]
    _c, _p, err, _w = k.parse_config("kind: Pod\n", "/x.yaml")
    assert "/x.yaml is a 'Pod', not a KubeletConfiguration" == err
    _c, _p, err, _w = k.parse_config("- a\n", "/x.yaml")
    assert err == "/x.yaml holds a list, not a KubeletConfiguration mapping"
    _c, _p, err, _w = k.parse_config("", "/x.yaml")
    assert err == "/x.yaml is empty"
    _c, _p, err, _w = k.parse_config("apiVersion: v1\nkind: KubeletConfiguration\n", "/x")
    assert err is None and "apiVersion 'v1'" in _w[0]


def test_malformed_config_message_names_file_and_line():
    with open(fixture_path("malformed-config.yaml.fixture")) as f:
        text = f.read()
    cfg, _p, err, _w = k.parse_config(text, "/etc/kubelet.yaml")
    assert cfg == {}
    assert err.startswith("cannot parse /etc/kubelet.yaml: ")
    assert "line 6" in err


def test_read_config_file(tmp_path):
    good = tmp_path / "c.yaml"
    good.write_text("kind: KubeletConfiguration\n")
    missing = str(tmp_path / "missing.yaml")
    assert k.read_config_file([missing, str(good)]) == (
        "kind: KubeletConfiguration\n", str(good), None)
    assert k.read_config_file([missing]) == (None, None, "%s does not exist" % missing)
    text, path, err = k.read_config_file([str(tmp_path)])
    assert text is None and err == "%s is a directory; refusing to read it" % tmp_path
    fifo = str(tmp_path / "fifo")
    os.mkfifo(fifo)
    assert k.read_config_file([fifo])[2] == "%s is a FIFO; refusing to read it" % fifo
    loop = str(tmp_path / "loop")
    os.symlink(loop, loop)
    assert k.read_config_file([loop])[2] == "%s: symlink loop" % loop
    big = tmp_path / "big.yaml"
    with open(str(big), "wb") as f:
        f.truncate(k.CONFIG_MAX_BYTES + 1)
    assert "more than the %d bytes" % k.CONFIG_MAX_BYTES in k.read_config_file([str(big)])[2]
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(b"kind: KubeletConfiguration\nx: caf\xe9\n")
    assert k.read_config_file([str(latin)])[2] == "%s is not UTF-8 text (byte 33)" % latin


def test_merge_patch():
    base = {"a": {"b": 1, "c": [1, 2]}, "d": 1, "e": 2}
    assert k.merge_patch(base, {"a": {"c": [3], "x": 1}, "d": None}) == {
        "a": {"b": 1, "c": [3], "x": 1}, "e": 2}
    assert base == {"a": {"b": 1, "c": [1, 2]}, "d": 1, "e": 2}


# RFC 7386 section 3, "Example Test Cases": (original, patch, result), all eighteen of them.
RFC7386_CASES = [
    ({"a": "b"}, {"a": "c"}, {"a": "c"}),
    ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
    ({"a": "b"}, {"a": None}, {}),
    ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
    ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
    ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
    ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
    ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
    (["a", "b"], ["c", "d"], ["c", "d"]),
    ({"a": "b"}, ["c"], ["c"]),
    ({"a": "foo"}, None, None),
    ({"a": "foo"}, "bar", "bar"),
    ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
    ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
    ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
]


@pytest.mark.parametrize("original,patch,result", RFC7386_CASES)
def test_merge_patch_rfc7386_examples(original, patch, result):
    assert k.merge_patch(original, patch) == result


def test_merge_patch_rfc7386_section1_example_keeps_order_and_shares_nothing():
    target = {"title": "Goodbye!", "author": {"givenName": "John", "familyName": "Doe"},
              "tags": ["example", "sample"], "content": "This will be unchanged"}
    patch = {"title": "Hello!", "phoneNumber": "+01-123-456-7890",
             "author": {"familyName": None}, "tags": ["example"]}
    out = k.merge_patch(target, patch)
    assert out == {"title": "Hello!", "author": {"givenName": "John"}, "tags": ["example"],
                   "content": "This will be unchanged", "phoneNumber": "+01-123-456-7890"}
    assert list(out) == ["title", "author", "tags", "content", "phoneNumber"]  # new keys last
    out["author"]["givenName"] = "Jane"
    out["tags"].append("x")
    assert target["author"]["givenName"] == "John" and patch["tags"] == ["example"]


# -- the KubeletConfiguration reader (PyYAML's safe loader with refusals) --------------------
BOMB = ("a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
        + "".join("%s: &%s [%s]\n" % (n, n, ", ".join(["*" + p] * 9))
                  for p, n in zip("abcdefgh", "bcdefghi")))


@pytest.mark.parametrize("text,line", [
    ("base: &anchor {a: 1}\n", 1),
    ("a: 1\nb: *alias\n", 2),
    ("- &x 1\n- *x\n", 1),
    ("k: [&x 1, *x]\n", 1),
    ("k: &s scalar\n", 1),
    (BOMB, 1),
])
@pytest.mark.parametrize("loader", k.YAML_LOADERS, ids=lambda c: c.__name__)
def test_anchors_and_aliases_are_refused_while_composing(text, line, loader):
    """A billion-laughs file (nine levels of nine aliases) is refused at its first anchor,
    before anything is built."""
    with pytest.raises(k.ConfigParseError) as e:
        k.load_config_text(text, loader)
    assert "anchors and aliases (&name, *name) are refused" in str(e.value)
    assert e.value.line == line and str(e.value).startswith("line %d: " % line)


@pytest.mark.parametrize("text", [
    "[" * 100000,
    "{" * 100000 + "}" * 100000,
    "a:\n" + "".join(" " * i + "b:\n" for i in range(1, 3000)),
    "x: " + "[" * 5000 + "]" * 5000,
    "x: " + "[" * 70 + "]" * 70,
    "- " * 5000 + "a\n",
    '{"Data": ' + "[" * 100000 + "]" * 100000 + "}",
    '{"x": ' + "[" * 70 + "]" * 70 + "}",
])
@pytest.mark.parametrize("loader", k.YAML_LOADERS, ids=lambda c: c.__name__)
def test_deep_nesting_is_a_parse_error_not_a_recursion_error(text, loader):
    with pytest.raises(k.ConfigParseError) as e:
        k.load_config_text(text, loader)
    assert "nested" in str(e.value)


def test_nesting_within_the_bound_reads():
    nested = "[" * 62 + "1" + "]" * 62   # 63 levels with the top mapping: within 64
    assert k.load_config_text("x: " + nested + "\n")[0]["x"] == json.loads(nested)
    assert k.load_config_text('{"x": %s}' % nested)[0]["x"] == json.loads(nested)


@pytest.mark.parametrize("text,words", [
    ("a: b: c\n", "mapping values are not allowed"),
    ("a: [1\n", "expected ',' or ']'"),
    ("a: 1\n---\nb: 2\n", "expected a single document"),
    ("a: x\n\tb: y\n", "at line 2, column 1"),   # a tab (libyaml and Python word it apart)
    ("a: \"bad \\q escape\"\n", "unknown escape"),
    ("a: !!binary x\n", "base64"),
    ("a: !!python/object:os.system x\n", "could not determine a constructor"),
    ("{a: 1}: b\n", "unhashable"),
])
@pytest.mark.parametrize("loader", k.YAML_LOADERS, ids=lambda c: c.__name__)
def test_bad_yaml_is_a_config_parse_error_naming_the_problem(text, words, loader):
    with pytest.raises(k.ConfigParseError) as e:
        k.load_config_text(text, loader)
    assert words in str(e.value)


def test_the_libyaml_loader_is_used_where_pyyaml_has_libyaml():
    assert [c.__name__ for c in k.YAML_LOADERS] == ["_LibyamlLoader", "_PureLoader"]


@pytest.mark.parametrize("loader", k.YAML_LOADERS, ids=lambda c: c.__name__)
def test_loaders_read_the_fixture_configs_like_safe_load(loader):
    import yaml
    for name in ("kubeadm-config.yaml.fixture", "gke-kubelet-config.yaml.fixture",
                 "gpu-static-config.yaml.fixture", "dropin-10-gpu.conf", "dropin-20-eviction.conf",
                 "bad-quantities-config.yaml.fixture"):
        text = _read(name)
        assert k.load_config_text(text, loader)[0] == yaml.safe_load(text), name


def test_load_config_text_readers_and_types():
    assert k.load_config_text('{"kind": "KubeletConfiguration"}') == (
        {"kind": "KubeletConfiguration"}, "json")
    # JSON-looking YAML (single quotes, comments) falls through to YAML
    assert k.load_config_text("{'a': 1} # c\n") == ({"a": 1}, "pyyaml")
    data, parser = k.load_config_text(
        "b: yes\nn: ~\ni: 0x1F\nf: 1.5\ns: 1e3\nq: '10'\nd: 2001-12-14\n"
        "t: 2001-12-14t21:59:43.10-05:00\nbin: !!binary aGk=\nset: !!set {y, x}\n"
        "2001-12-15: key\n")
    assert parser == "pyyaml"
    assert data == {"b": True, "n": None, "i": 31, "f": 1.5, "s": "1e3", "q": "10",
                    "d": "2001-12-14", "t": "2001-12-14t21:59:43.10-05:00", "bin": "hi",
                    "set": ["x", "y"], "2001-12-15": "key"}
    json.dumps(data)  # facts must be JSON-safe
    assert list(data) == ["b", "n", "i", "f", "s", "q", "d", "t", "bin", "set", "2001-12-15"]


def test_config_error_when_pyyaml_is_missing(monkeypatch):
    """The audit keeps going on a node without PyYAML: a YAML config is a config_error naming
    the package; a JSON one still reads. (The modules fail first: tests/module.)"""
    monkeypatch.setattr(k, "HAS_YAML", False)
    cfg, parser, err, _w = k.parse_config("kind: KubeletConfiguration\n", "/c.yaml")
    assert cfg == {} and parser is None
    assert "cannot parse /c.yaml: PyYAML is not installed" in err and "python3-yaml" in err
    assert k.parse_config('{"kind": "KubeletConfiguration"}', "/c.json")[:3] == (
        {"kind": "KubeletConfiguration"}, "json", None)


def test_kubelet_view_paths(tmp_path):
    fp = FakeProc(tmp_path)
    fp.add_process(7, ["/usr/bin/kubelet"], cwd="/etc/kubernetes", root=str(tmp_path / "root"))
    assert k.kubelet_view_paths("/var/lib/kubelet/config.yaml") == (
        "/var/lib/kubelet/config.yaml", ["/var/lib/kubelet/config.yaml"])
    path, cands = k.kubelet_view_paths("kubelet.yaml", fp.path, 7)
    assert path == "/etc/kubernetes/kubelet.yaml"
    assert cands == [path, os.path.join(fp.path, "7", "root", "etc/kubernetes/kubelet.yaml")]


# -- whole facts on fake trees ------------------------------------------------------------
def _kubelet_tree(tmp_path, argv, config_text=None, config_name="config.yaml", mem=64 * GIB,
                  pid=4242):
    fp = FakeProc(tmp_path)
    fp.add_noise()
    fp.set_meminfo(mem)
    exe = write_script(str(tmp_path / "kubelet-bin"))
    cfg = None
    if config_text is not None:
        cfg = tmp_path / config_name
        cfg.write_text(config_text)
        argv = [a.replace("@CONFIG@", str(cfg)) for a in argv]
    fp.add_process(pid, argv, exe=exe)
    return fp, cfg


def _read(name):
    with open(fixture_path(name)) as f:
        return f.read()


def test_facts_kubeadm_node_with_flag_overrides(tmp_path):
    argv = [a if not a.startswith("--config=") else "--config=@CONFIG@"
            for a in fixture_args("kubeadm.args")]
    argv += ["--cpu-manager-policy=static", "--root-dir=/data/kubelet", "--v=2", "--v=4"]
    fp, cfg = _kubelet_tree(tmp_path, argv, _read("kubeadm-config.yaml.fixture"))
    facts = k.gather_kubelet_facts(fp.path)
    assert facts["running"] is True and facts["pid"] == 4242 and facts["pids"] == [4242]
    assert facts["identified_by"] == "root-owned" and facts["impostors"] == []
    assert facts["version"] is None and facts["version_source"] is None
    assert facts["version_error"] == "no package database to ask and no Node object"
    assert facts["exe"] == str(tmp_path / "kubelet-bin") and facts["exe_deleted"] is False
    assert facts["flags"]["v"] == "4" and facts["flags_repeated"] == {"v": ["2", "4"]}
    assert facts["config_path"] == str(cfg) and facts["config_source"] == "flag"
    assert facts["config_loaded_by_kubelet"] is True and facts["config_error"] is None
    assert facts["config"]["clusterDNS"] == ["10.96.0.10"]
    assert facts["cgroup_driver"] == "systemd"
    assert facts["cpu_manager_policy"] == "static"
    assert facts["sources"]["cpu_manager_policy"] == "flag"
    assert facts["sources"]["cgroup_driver"] == "config"
    assert facts["root_dir"] == "/data/kubelet"
    assert facts["checkpoint_path"] == "/data/kubelet/device-plugins/kubelet_internal_checkpoint"
    mem = facts["memory"]
    assert facts["node_memory_bytes"] == 64 * GIB
    assert mem["system_reserved"] == {"raw": None, "bytes": None, "source": "default"}
    assert mem["eviction_hard"]["configured"] is None
    assert mem["eviction_hard"]["effective"] == k.DEFAULT_EVICTION_HARD
    assert mem["eviction_hard"]["memory_available"]["bytes"] == 100 * MIB
    assert mem["eviction_hard_partial"] is False
    assert mem["enforce_node_allocatable"] == ["pods"]
    assert mem["reserved_total_bytes"] == 0
    assert mem["recommended_reserved_bytes"] == k.gke_reserved_memory_bytes(64 * GIB)
    assert mem["reserved_shortfall_bytes"] == mem["recommended_reserved_bytes"]
    assert mem["allocatable_bytes"] == 64 * GIB - 100 * MIB
    assert facts["errors"] == []


def test_facts_eks_partial_eviction(tmp_path):
    argv = fixture_args("eks.args")
    argv[argv.index("--config") + 1] = "@CONFIG@"
    fp, _cfg = _kubelet_tree(tmp_path, argv, _read("eks-kubelet-config.json"),
                             config_name="kubelet-config.json", mem=192 * GIB)
    facts = k.gather_kubelet_facts(fp.path)
    assert facts["config_parser"] == "json"
    mem = facts["memory"]
    assert mem["eviction_hard_partial"] is True
    assert mem["eviction_hard_missing_defaults"] == ["imagefs.available"]
    assert "imagefs.available" not in mem["eviction_hard"]["effective"]
    assert mem["kube_reserved"] == {"raw": "2829Mi", "bytes": 2829 * MIB, "source": "config"}
    assert facts["kube_reserved"]["cpu"] == "190m"
    assert mem["reserved_total_bytes"] == 2829 * MIB
    assert mem["reserved_shortfall_bytes"] == k.gke_reserved_memory_bytes(192 * GIB) - 2829 * MIB
    assert facts["cgroup_driver"] == "systemd" and facts["cpu_manager_policy"] == "none"


def test_facts_gke_meets_its_own_ladder(tmp_path):
    argv = fixture_args("gke.args")
    argv[argv.index("--config") + 1] = "@CONFIG@"
    fp, _cfg = _kubelet_tree(tmp_path, argv, _read("gke-kubelet-config.yaml.fixture"), mem=85 * GIB)
    facts = k.gather_kubelet_facts(fp.path)
    mem = facts["memory"]
    assert mem["kube_reserved"]["bytes"] == 6902 * MIB
    assert mem["reserved_shortfall_bytes"] == 0
    assert mem["eviction_hard_partial"] is True
    assert mem["eviction_hard"]["configured"]["pid.available"] == "10%"


def _hand_written_facts(tmp_path):
    tmp_path.mkdir(exist_ok=True)
    fp, _cfg = _kubelet_tree(tmp_path, ["/usr/bin/kubelet", "--config", "@CONFIG@"],
                             _read("gpu-static-config.yaml.fixture"), mem=2048 * GIB)
    return k.gather_kubelet_facts(fp.path)


def test_facts_hand_written_config(tmp_path):
    facts = _hand_written_facts(tmp_path)
    assert facts["config_parser"] == "pyyaml"
    assert facts["cpu_manager_policy"] == "static"
    mem = facts["memory"]
    assert mem["system_reserved"]["bytes"] == 4 * GIB
    assert mem["kube_reserved"]["bytes"] == 7 * GIB // 2
    assert mem["reserved_total_bytes"] == 4 * GIB + 7 * GIB // 2
    assert mem["eviction_hard"]["memory_available"] == {
        "raw": "2%", "bytes": int(2048 * GIB * 0.02), "percent": 2.0}
    assert mem["eviction_hard_missing_defaults"] == ["imagefs.available", "nodefs.inodesFree"]
    assert mem["enforce_node_allocatable"] == ["pods", "system-reserved", "kube-reserved"]
    assert mem["allocatable_bytes"] == 2048 * GIB - mem["reserved_total_bytes"] - \
        int(2048 * GIB * 0.02)


def test_flags_override_config_maps_entirely(tmp_path):
    argv = ["/usr/bin/kubelet", "--config=@CONFIG@", "--system-reserved=memory=1Gi",
            "--eviction-hard=memory.available<500Mi", "--enforce-node-allocatable=pods",
            "--cgroup-driver=cgroupfs"]
    fp, _cfg = _kubelet_tree(tmp_path, argv, _read("gpu-static-config.yaml.fixture"))
    facts = k.gather_kubelet_facts(fp.path)
    assert facts["system_reserved"] == {"memory": "1Gi"}          # cpu from the file is gone
    assert facts["kube_reserved"]["memory"] == "3.5Gi"            # untouched by flags
    mem = facts["memory"]
    assert mem["system_reserved"]["source"] == "flag"
    assert mem["eviction_hard"]["configured"] == {"memory.available": "500Mi"}
    assert mem["eviction_hard"]["source"] == "flag"
    assert mem["eviction_hard_partial"] is True
    assert mem["enforce_node_allocatable"] == ["pods"]
    assert facts["cgroup_driver"] == "cgroupfs" and facts["sources"]["cgroup_driver"] == "flag"


def test_merge_default_eviction_settings(tmp_path):
    text = ("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
            "mergeDefaultEvictionSettings: true\nevictionHard:\n  memory.available: 1Gi\n")
    fp, _cfg = _kubelet_tree(tmp_path, ["/usr/bin/kubelet", "--config=@CONFIG@"], text)
    mem = k.gather_kubelet_facts(fp.path)["memory"]
    assert mem["eviction_hard_partial"] is False
    assert mem["eviction_hard"]["merge_defaults"] is True
    assert mem["eviction_hard"]["effective"] == dict(k.DEFAULT_EVICTION_HARD,
                                                     **{"memory.available": "1Gi"})
    assert mem["eviction_bytes"] == GIB


def test_config_dir_dropins(tmp_path):
    dropins = tmp_path / "kubelet.conf.d"
    (dropins / "sub").mkdir(parents=True)
    shutil.copy(fixture_path("dropin-10-gpu.conf"), str(dropins / "10-gpu.conf"))
    shutil.copy(fixture_path("dropin-20-eviction.conf"), str(dropins / "sub" / "20-ev.conf"))
    (dropins / "30-ignored.yaml").write_text("cpuManagerPolicy: none\n")
    (dropins / "40-broken.conf").write_text("kind: KubeletConfiguration\nx: [\n")
    argv = ["/usr/bin/kubelet", "--config=@CONFIG@", "--config-dir=%s" % dropins]
    fp, _cfg = _kubelet_tree(tmp_path, argv, _read("kubeadm-config.yaml.fixture"))
    facts = k.gather_kubelet_facts(fp.path)
    assert facts["config_dropins"] == [str(dropins / "10-gpu.conf"),
                                       str(dropins / "sub" / "20-ev.conf")]
    assert facts["config_dir"] == str(dropins)
    assert "cpuManagerPolicy" not in facts["config"]              # the file itself
    assert facts["effective_config"]["cpuManagerPolicy"] == "static"
    assert facts["cpu_manager_policy"] == "static"
    assert facts["sources"]["cpu_manager_policy"] == "config"
    mem = facts["memory"]
    assert mem["system_reserved"]["bytes"] == GIB
    assert mem["kube_reserved"]["bytes"] == 2 * GIB
    # drop-ins merge into the defaulted config: the defaults stay, memory.available changes
    assert mem["eviction_hard"]["effective"] == dict(k.DEFAULT_EVICTION_HARD,
                                                     **{"memory.available": "500Mi"})
    assert mem["eviction_hard_partial"] is False
    assert len(facts["errors"]) == 1 and "40-broken.conf" in facts["errors"][0]


def test_config_read_through_the_kubelets_root(tmp_path):
    hidden = "/etc/kubegpu-test-%s/kubelet.yaml" % uuid.uuid4().hex
    assert not os.path.exists(hidden)
    host_root = tmp_path / "hostroot"
    target = host_root / hidden.lstrip("/")
    target.parent.mkdir(parents=True)
    target.write_text(_read("gpu-static-config.yaml.fixture"))
    fp = FakeProc(tmp_path)
    fp.add_process(77, ["/usr/bin/kubelet", "--config", hidden], root=str(host_root))
    facts = k.gather_kubelet_facts(fp.path)
    assert facts["config_path"] == hidden
    assert facts["config_read_path"] == os.path.join(fp.path, "77", "root", hidden.lstrip("/"))
    assert facts["config_error"] is None and facts["cpu_manager_policy"] == "static"
    assert not os.path.exists(fp.executed_marker)


def test_relative_config_resolved_against_kubelet_cwd(tmp_path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "k.yaml").write_text(_read("kubeadm-config.yaml.fixture"))
    fp = FakeProc(tmp_path)
    fp.add_process(78, ["/usr/bin/kubelet", "--config=k.yaml"], cwd=str(tmp_path / "etc"))
    facts = k.gather_kubelet_facts(fp.path)
    assert facts["config_path"] == str(tmp_path / "etc" / "k.yaml")
    assert facts["cgroup_driver"] == "systemd"


def test_not_running_still_parses_config(tmp_path):
    fp = FakeProc(tmp_path)
    fp.add_noise()
    cfg = tmp_path / "config.yaml"
    cfg.write_text(_read("gpu-static-config.yaml.fixture"))
    tools = _fake_tools(tmp_path, dpkg_query="echo 'ii |1.31.4-1.1'\n")
    facts = k.gather_kubelet_facts(fp.path, config_path=str(cfg), get_bin_path=tools)
    assert facts["running"] is False and facts["pid"] is None and facts["pids"] == []
    assert facts["config_source"] == "option" and facts["config_loaded_by_kubelet"] is None
    assert facts["cpu_manager_policy"] == "static"
    assert facts["version"] == "v1.31.4"
    assert facts["version_source"] == "package:kubelet 1.31.4-1.1 (dpkg)"
    assert facts["node_memory_bytes"] is None and facts["memory"]["allocatable_bytes"] is None
    assert facts["memory"]["recommended_reserved_bytes"] is None


def test_running_without_config_flag_ignores_default_file(tmp_path):
    fp = FakeProc(tmp_path)
    fp.add_process(79, ["/usr/bin/kubelet", "--cgroup-driver=systemd"])
    facts = k.gather_kubelet_facts(fp.path)
    assert facts["config_source"] == "default"
    assert facts["config_path"] == k.DEFAULT_CONFIG_PATH
    assert facts["config_loaded_by_kubelet"] is False
    assert facts["effective_config"] == {}
    assert facts["cgroup_driver"] == "systemd"
    if facts["config_error"] is None:    # a config at the default path on this machine
        assert "runs without --config" in facts["config_warnings"][-1]


def test_option_overrides_flag(tmp_path):
    fp, cfg = _kubelet_tree(tmp_path, ["/usr/bin/kubelet", "--config=@CONFIG@"],
                            _read("kubeadm-config.yaml.fixture"))
    other = tmp_path / "other.yaml"
    other.write_text(_read("gpu-static-config.yaml.fixture"))
    facts = k.gather_kubelet_facts(fp.path, config_path=str(other))
    assert facts["config_source"] == "option" and facts["config_path"] == str(other)
    assert facts["config_loaded_by_kubelet"] is False
    assert facts["cpu_manager_policy"] == "static"


def test_bad_values_are_reported_not_raised(tmp_path):
    argv = ["/usr/bin/kubelet", "--config=@CONFIG@", "--kube-reserved=memory:1Gi"]
    fp, _cfg = _kubelet_tree(tmp_path, argv, _read("bad-quantities-config.yaml.fixture"))
    facts = k.gather_kubelet_facts(fp.path)
    mem = facts["memory"]
    assert "'1GB'" in mem["system_reserved"]["error"]
    assert mem["system_reserved"]["bytes"] is None
    assert mem["kube_reserved"]["bytes"] == 512 * MIB       # malformed flag ignored
    assert "'150%'" in mem["eviction_hard"]["memory_available"]["error"]
    errors = "\n".join(facts["errors"])
    assert "'memory:1Gi'" in errors and "'1GB'" in errors and "'150%'" in errors


def test_wrong_types_in_config_are_reported(tmp_path):
    text = ("kind: KubeletConfiguration\nsystemReserved: 1Gi\nenforceNodeAllocatable: pods\n"
            "evictionHard: [memory.available<1Gi]\n")
    fp, _cfg = _kubelet_tree(tmp_path, ["/usr/bin/kubelet", "--config=@CONFIG@"], text)
    facts = k.gather_kubelet_facts(fp.path)
    errors = "\n".join(facts["errors"])
    assert "systemReserved must be a mapping, got '1Gi'" in errors
    assert "enforceNodeAllocatable must be a list, got 'pods'" in errors
    assert "evictionHard must be a mapping" in errors
    assert facts["memory"]["enforce_node_allocatable"] == ["pods"]


def test_several_root_kubelets_are_ambiguous_and_none_is_used(tmp_path):
    fp = FakeProc(tmp_path)
    fp.add_process(500, ["/usr/bin/kubelet", "--v=1"], starttime=50)
    fp.add_process(400, ["/usr/bin/kubelet", "--v=2"], starttime=90)
    facts = k.gather_kubelet_facts(fp.path)
    assert facts["pid"] is None and facts["running"] is False and facts["pids"] == [500, 400]
    assert facts["flags"] == {}
    assert any("2 root-owned processes named kubelet (500, 400)" in e for e in facts["errors"])


def test_dangling_exe_is_not_trusted(tmp_path):
    fp = FakeProc(tmp_path)
    fp.add_process(81, ["/usr/bin/kubelet"], exe="/nonexistent/kubelet (deleted)")
    facts = k.gather_kubelet_facts(fp.path, version_timeout=2)
    assert facts["running"] is False
    assert facts["impostors"][0]["pid"] == 81
    assert "executable cannot be examined" in facts["impostors"][0]["why"]


def test_version_error_when_nothing_answers(tmp_path):
    fp = FakeProc(tmp_path)
    facts = k.gather_kubelet_facts(fp.path, get_bin_path=lambda name: None)
    assert facts["version"] is None
    assert facts["version_error"] == "no package database (dpkg-query, rpm) on the node"
    facts = k.gather_kubelet_facts(fp.path, get_bin_path=lambda name: None,
                                   node_version="v1.32.4")
    assert facts["version"] == "v1.32.4"
    assert facts["version_source"] == "node:status.nodeInfo.kubeletVersion"


# -- impostors (fake trees; the real-process test is tests/module/test_kubelet_impostor.py) --
def _user_exe(tmp_path, mode=0o755, uid=65534):
    path = tmp_path / "userbin" / "kubelet"
    path.parent.mkdir(exist_ok=True)
    path.write_text("#!/bin/sh\ntouch %s\n" % (tmp_path / "impostor-ran"))
    os.chmod(str(path), mode)
    os.chown(str(path), uid, uid)
    return str(path)


@pytest.mark.parametrize("impostor_first", [True, False])
def test_impostor_never_wins_whichever_starts_first(tmp_path, impostor_first):
    fp = FakeProc(tmp_path)
    evil = ["/home/mallory/kubelet", "--config=/etc/shadow", "--root-dir=/home/mallory/x"]
    real = ["/usr/bin/kubelet", "--config=/var/lib/kubelet/config.yaml", "--root-dir=/var/lib/kl"]
    fp.add_process(300, evil, exe=_user_exe(tmp_path), uid=65534,
                   starttime=10 if impostor_first else 900)
    fp.add_process(600, real, starttime=900 if impostor_first else 10)
    facts = k.gather_kubelet_facts(fp.path)
    assert facts["pid"] == 600 and facts["identified_by"] == "root-owned"
    assert facts["root_dir"] == "/var/lib/kl" and facts["flags"]["config"] != "/etc/shadow"
    assert facts["impostors"] == [{"pid": 300, "uid": 65534, "exe": _user_exe(tmp_path),
                                   "why": "runs as uid 65534 (effective 65534), not root"}]
    assert any("process 300 named kubelet" in e for e in facts["errors"])
    assert not (tmp_path / "impostor-ran").exists() and not os.path.exists(fp.executed_marker)


@pytest.mark.parametrize("uid,euid,mode,exe_uid,why", [
    (1000, 1000, 0o755, 0, "runs as uid 1000 (effective 1000), not root"),
    (1000, 0, 0o4755, 0, "runs as uid 1000 (effective 0), not root"),     # setuid-root binary
    (0, 0, 0o755, 1000, "is owned by uid 1000, not root"),
    (0, 0, 0o775, 0, "is writable by group (mode 0775)"),
    (0, 0, 0o757, 0, "is writable by others (mode 0757)"),
])
def test_trust_rules(tmp_path, uid, euid, mode, exe_uid, why):
    fp = FakeProc(tmp_path)
    fp.add_process(42, ["/usr/bin/kubelet"], exe=_user_exe(tmp_path, mode, exe_uid), uid=uid,
                   euid=euid)
    found = k.identify_kubelet(fp.path)
    assert found["proc"] is None and found["method"] is None
    assert found["rejected"][0]["pid"] == 42 and why in found["rejected"][0]["why"]


def test_interpreted_script_must_be_root_owned_too(tmp_path):
    fp = FakeProc(tmp_path)
    script = _user_exe(tmp_path)
    fp.add_process(43, ["/bin/sh", script, "--root-dir=/x"], comm="kubelet", exe="/bin/sh")
    found = k.identify_kubelet(fp.path)
    assert found["proc"] is None and "its script %s is owned by uid 65534" % script in \
        found["rejected"][0]["why"]
    os.chown(script, 0, 0)
    found = k.identify_kubelet(fp.path)
    assert found["proc"]["pid"] == 43 and found["proc"]["argv"] == [script, "--root-dir=/x"]


def test_unit_cgroup_picks_among_root_processes(tmp_path):
    fp = FakeProc(tmp_path)
    fp.add_process(50, ["/usr/bin/kubelet", "--v=1"])
    d = fp.add_process(51, ["/usr/bin/kubelet", "--v=2"])
    with open(os.path.join(d, "cgroup"), "w") as f:
        f.write("0::/system.slice/kubelet.service\n")
    # a user manager's kubelet.service is not the system unit
    d = fp.add_process(52, ["/usr/bin/kubelet", "--v=3"], exe=_user_exe(tmp_path), uid=1000)
    with open(os.path.join(d, "cgroup"), "w") as f:
        f.write("0::/user.slice/user-1000.slice/user@1000.service/app.slice/kubelet.service\n")
    found = k.identify_kubelet(fp.path, unit="kubelet")
    assert found["method"] == "cgroup" and found["proc"]["pid"] == 51
    assert sorted(r["pid"] for r in found["rejected"]) == [50, 52]


def _named_kubelet(tmp_path, name, owner=0):
    """A copy of sleep named kubelet, started as ``owner``; returns the Popen."""
    d = tmp_path / name
    d.mkdir(mode=0o755)
    binary = str(d / "kubelet")
    shutil.copy("/bin/sleep", binary)
    os.chmod(binary, 0o755)
    os.chown(str(d), owner, owner)
    os.chown(binary, owner, owner)
    argv = [binary, "300"]
    if owner:
        argv = ["setpriv", "--reuid=%d" % owner, "--regid=%d" % owner, "--clear-groups"] + argv
    return subprocess.Popen(argv)


def _wait_named(pid):
    """Until ``pid`` runs the kubelet-named binary (exec done); readiness, not timing."""
    for _i in range(2000):
        try:
            with open("/proc/%d/comm" % pid) as f:
                if f.read().strip() == "kubelet":
                    return
        except (IOError, OSError):
            pass
        time.sleep(0.005)
    raise AssertionError("pid %d never became kubelet" % pid)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="needs root and setpriv")
def test_systemd_main_pid_wins_on_the_real_proc(tmp_path):
    """systemd's MainPID is the kubelet even when an older impostor and other root processes
    named kubelet exist (a stand-in systemctl answers for the unit: systemd is not PID 1 here)."""
    os.chmod(str(tmp_path), 0o755)
    impostor = _named_kubelet(tmp_path, "mallory", owner=65534)
    others = [_named_kubelet(tmp_path, "other")]
    real = _named_kubelet(tmp_path, "real")
    try:
        for p in [impostor, real] + others:
            _wait_named(p.pid)
        calls = tmp_path / "calls"
        systemctl = write_script(str(tmp_path / "systemctl"),
                                 "#!/bin/sh\necho \"$*\" >> %s\necho %d\n" % (calls, real.pid))
        found = k.identify_kubelet("/proc", "kubelet.service", systemctl, sd_booted=True)
        assert found["method"] == "systemd" and found["proc"]["pid"] == real.pid
        assert calls.read_text() == "show -p MainPID --value kubelet.service\n"
        rejected = dict((r["pid"], r) for r in found["rejected"])
        assert "not root" in rejected[impostor.pid]["why"]
        assert others[0].pid in rejected
        # the unit is not running (MainPID 0): fall back to ownership, which is ambiguous here
        write_script(systemctl, "#!/bin/sh\necho 0\n")
        found = k.identify_kubelet("/proc", "kubelet.service", systemctl, sd_booted=True)
        assert found["method"] != "systemd"
        assert found["proc"] is None or found["proc"]["pid"] != impostor.pid
        # a unit name that could expand is refused before systemctl runs
        with pytest.raises(ValueError, match="must be a systemd unit name"):
            k.identify_kubelet("/proc", "kube*", systemctl, sd_booted=True)
    finally:
        for p in [impostor, real] + others:
            p.kill()
            p.wait()


def test_fifo_and_odd_proc_files_never_block(tmp_path):
    fp = FakeProc(tmp_path)
    d = fp.add_process(60, ["/usr/bin/kubelet"])
    d2 = fp.add_process(61, ["/usr/bin/kubelet"])
    for name in ("cmdline", "comm"):       # nothing readable: as if it vanished
        os.unlink(os.path.join(d2, name))
        os.mkfifo(os.path.join(d2, name))
    for name in ("cmdline", "status"):
        os.unlink(os.path.join(d, name))
        os.mkfifo(os.path.join(d, name))
    os.mkfifo(os.path.join(fp.path, "meminfo"))
    facts = k.gather_kubelet_facts(fp.path)
    assert facts["running"] is False and facts["node_memory_bytes"] is None
    assert facts["pids"] == [60]
    assert facts["impostors"][0]["why"] == "its owner cannot be read"


def test_unanswered_allocations_from_the_journal():
    from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet.facts import unanswered_allocations

    gpa = ('%s gpu-1 kubelet[812]: I1122 05:00:00.000000     812 manager.go:831] "Issuing a GetPreferredAllocation '
           'call for container" containerName="%s" pod="%s"')
    alloc = ('%s gpu-1 kubelet[812]: I1122 05:00:00.100000     812 manager.go:880] "Making allocation request for '
             'device plugin" devices=["GPU-1"] resourceName="nvidia.com/gpu"')
    lines = [gpa % ("1795323000.5", "main", "ml/train-0"), alloc % "1795323000.6",
             "1795323100.0 gpu-1 kubelet[812]: I1122 sync loop", gpa % ("1795323200.25", "main", "ml/train-late")]
    out = unanswered_allocations(lines, now=1795323500.0)
    assert out == [{"pod": "ml/train-late", "container": "main", "time": 1795323200.25, "age_seconds": 299}]
    assert unanswered_allocations(lines + [alloc % "1795323300.0"]) == []
    # plain klog lines (no journal timestamp): still found, age unknown
    plain = ['I1122 05:00:00.0 812 manager.go:831] "Issuing a GetPreferredAllocation call for container" '
             'containerName="c" podUID="1234"']
    assert unanswered_allocations(plain) == [{"pod": "1234", "container": "c", "time": None, "age_seconds": None}]


# -- numbers that are not ASCII digits ('²'.isdigit() is True, int('²') raises) -------------
NON_ASCII_DIGITS = ["\u00b2", "\u0663", "\uff14\uff12"]  # superscript two, Arabic-Indic three, full-width 42


@pytest.mark.parametrize("digits", NON_ASCII_DIGITS)
def test_find_kubelet_skips_pid_entries_that_are_not_ascii_digits(tmp_path, digits):
    fp = FakeProc(tmp_path)
    fp.add_process(4242, ["/usr/bin/kubelet"], starttime=3000)
    d = fp.add_process(4343, ["/usr/bin/kubelet"], starttime=10)
    os.rename(d, os.path.join(fp.path, digits))
    assert [p["pid"] for p in k.find_kubelet_processes(fp.path)] == [4242]


@pytest.mark.parametrize("digits", NON_ASCII_DIGITS)
def test_proc_numbers_that_are_not_ascii_digits_are_unknown(tmp_path, digits):
    fields = ["S"] + ["1"] * 18 + [digits, "1", "1"]
    assert k.parse_stat("42 (kubelet) " + " ".join(fields)) == ("S", None)
    fp = FakeProc(tmp_path)
    d = fp.add_process(77, ["/usr/bin/kubelet"])
    with open(os.path.join(d, "status"), "w") as f:
        f.write("Name:\tkubelet\nUid:\t%s\t0\t0\t0\n" % digits)
    assert k.process_uids(fp.path, 77) == (None, None)
    with open(os.path.join(fp.path, "meminfo"), "w") as f:
        f.write("MemTotal:       %s kB\nMemFree:        1024 kB\n" % digits)
    assert k.read_meminfo_total(fp.path) is None


@pytest.mark.parametrize("digits", NON_ASCII_DIGITS)
def test_systemd_main_pid_that_is_not_ascii_digits_is_an_error(tmp_path, digits):
    systemctl = write_script(str(tmp_path / "systemctl"), "#!/bin/sh\nprintf '%s\\n'\n" % digits)
    pid, err = k.systemd_main_pid("kubelet.service", systemctl)
    assert pid is None
    assert err == "systemctl show kubelet.service exited 0: %s" % digits
