# -*- coding: utf-8 -*-
"""The kubelet's command line parsed as pflag does (kubelet/flags.py)."""

import pytest

from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet.flags import (
    flag_list,
    flag_map,
    flags_dict,
    parse_flags,
)
from ansible_collections.kubegpu.fleet.tests.fixtures.kubelet.kubelet_fakeproc import fixture_args


# -- flags --------------------------------------------------------------------------------
def test_parse_flags_forms():
    pairs, args = parse_flags([
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
    pairs, args = parse_flags(["--fail-swap-on", "false", "--rotate-certificates",
                               "--register-node=F", "--version"])
    assert pairs == [("fail-swap-on", True), ("rotate-certificates", True),
                     ("register-node", False), ("version", True)]
    assert args == ["false"]
    # a value that is not a bool literal stays text (the kubelet would refuse it)
    assert parse_flags(["--fail-swap-on=maybe"])[0] == [("fail-swap-on", "maybe")]


def test_flag_at_end_without_value():
    assert parse_flags(["--config"]) == ([("config", True)], [])
    assert parse_flags(["--config", "--v=2"])[0] == [("config", True), ("v", "2")]


def test_flags_dict_last_wins_and_repeats():
    pairs, _args = parse_flags(["--v=2", "--node-ip=10.0.0.1", "--v=4",
                                "--feature-gates=A=true", "--feature-gates=B=false"])
    last, repeated = flags_dict(pairs)
    assert last == {"v": "4", "node-ip": "10.0.0.1", "feature-gates": "B=false"}
    assert repeated == {"v": ["2", "4"], "feature-gates": ["A=true", "B=false"]}


def test_flag_map_and_list():
    pairs, _args = parse_flags([
        "--system-reserved=cpu=500m,memory=1Gi",
        "--system-reserved", "memory=2Gi, ephemeral-storage=10Gi",
        "--eviction-hard=memory.available<500Mi,nodefs.available<10%",
        "--enforce-node-allocatable=pods", "--enforce-node-allocatable",
        "system-reserved,kube-reserved"])
    assert flag_map(pairs, "system-reserved") == {
        "cpu": "500m", "memory": "2Gi", "ephemeral-storage": "10Gi"}
    assert flag_map(pairs, "eviction-hard", "<") == {
        "memory.available": "500Mi", "nodefs.available": "10%"}
    assert flag_map(pairs, "kube-reserved") is None
    assert flag_list(pairs, "enforce-node-allocatable") == [
        "pods", "system-reserved", "kube-reserved"]
    assert flag_list(pairs, "nope") is None
    assert flag_list([("enforce-node-allocatable", "")], "enforce-node-allocatable") == []
    with pytest.raises(ValueError) as e:
        flag_map([("kube-reserved", "memory:1Gi")], "kube-reserved")
    assert "'memory:1Gi'" in str(e.value) and "--kube-reserved" in str(e.value)


@pytest.mark.parametrize("name", ["kubeadm.args", "eks.args", "gke.args"])
def test_real_shaped_command_lines(name):
    argv = fixture_args(name)
    pairs, args = parse_flags(argv[1:])
    flags, _repeated = flags_dict(pairs)
    assert args == []
    assert flags["config"].startswith("/")
    assert all(not n.startswith("-") for n, _value in pairs)
    if name == "eks.args":
        assert flags["config"] == "/etc/kubernetes/kubelet/kubelet-config.json"
        assert flags["container-runtime-endpoint"] == "unix:///run/containerd/containerd.sock"
        assert flags["node-labels"].count("=") == 3
