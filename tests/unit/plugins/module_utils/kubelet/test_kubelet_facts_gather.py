# -*- coding: utf-8 -*-
"""Whole kubelet facts on fake /proc trees (kubelet/facts.py)."""
import os
import shutil
import uuid


from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet.config_files import DEFAULT_CONFIG_PATH
from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet.facts import gather_kubelet_facts
from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet.memory import (
    DEFAULT_EVICTION_HARD,
    gke_reserved_memory_bytes,
)
from ansible_collections.kubegpu.fleet.tests.fixtures.kubelet.kubelet_fakeproc import (
    FakeProc,
    fake_tools,
    fixture_args,
    fixture_path,
    fixture_text,
    write_script,
)

GIB = 1 << 30
MIB = 1 << 20


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


def test_facts_kubeadm_node_with_flag_overrides(tmp_path):
    argv = [a if not a.startswith("--config=") else "--config=@CONFIG@"
            for a in fixture_args("kubeadm.args")]
    argv += ["--cpu-manager-policy=static", "--root-dir=/data/kubelet", "--v=2", "--v=4"]
    fp, cfg = _kubelet_tree(tmp_path, argv, fixture_text("kubeadm-config.yaml.fixture"))
    facts = gather_kubelet_facts(fp.path)
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
    assert mem["eviction_hard"]["effective"] == DEFAULT_EVICTION_HARD
    assert mem["eviction_hard"]["memory_available"]["bytes"] == 100 * MIB
    assert mem["eviction_hard_partial"] is False
    assert mem["enforce_node_allocatable"] == ["pods"]
    assert mem["reserved_total_bytes"] == 0
    assert mem["recommended_reserved_bytes"] == gke_reserved_memory_bytes(64 * GIB)
    assert mem["reserved_shortfall_bytes"] == mem["recommended_reserved_bytes"]
    assert mem["allocatable_bytes"] == 64 * GIB - 100 * MIB
    assert facts["errors"] == []


def test_facts_eks_partial_eviction(tmp_path):
    argv = fixture_args("eks.args")
    argv[argv.index("--config") + 1] = "@CONFIG@"
    fp, _cfg = _kubelet_tree(tmp_path, argv, fixture_text("eks-kubelet-config.json"),
                             config_name="kubelet-config.json", mem=192 * GIB)
    facts = gather_kubelet_facts(fp.path)
    assert facts["config_parser"] == "json"
    mem = facts["memory"]
    assert mem["eviction_hard_partial"] is True
    assert mem["eviction_hard_missing_defaults"] == ["imagefs.available"]
    assert "imagefs.available" not in mem["eviction_hard"]["effective"]
    assert mem["kube_reserved"] == {"raw": "2829Mi", "bytes": 2829 * MIB, "source": "config"}
    assert facts["kube_reserved"]["cpu"] == "190m"
    assert mem["reserved_total_bytes"] == 2829 * MIB
    assert mem["reserved_shortfall_bytes"] == gke_reserved_memory_bytes(192 * GIB) - 2829 * MIB
    assert facts["cgroup_driver"] == "systemd" and facts["cpu_manager_policy"] == "none"


def test_facts_gke_meets_its_own_ladder(tmp_path):
    argv = fixture_args("gke.args")
    argv[argv.index("--config") + 1] = "@CONFIG@"
    fp, _cfg = _kubelet_tree(tmp_path, argv, fixture_text("gke-kubelet-config.yaml.fixture"), mem=85 * GIB)
    facts = gather_kubelet_facts(fp.path)
    mem = facts["memory"]
    assert mem["kube_reserved"]["bytes"] == 6902 * MIB
    assert mem["reserved_shortfall_bytes"] == 0
    assert mem["eviction_hard_partial"] is True
    assert mem["eviction_hard"]["configured"]["pid.available"] == "10%"


def _hand_written_facts(tmp_path):
    tmp_path.mkdir(exist_ok=True)
    fp, _cfg = _kubelet_tree(tmp_path, ["/usr/bin/kubelet", "--config", "@CONFIG@"],
                             fixture_text("gpu-static-config.yaml.fixture"), mem=2048 * GIB)
    return gather_kubelet_facts(fp.path)


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
    fp, _cfg = _kubelet_tree(tmp_path, argv, fixture_text("gpu-static-config.yaml.fixture"))
    facts = gather_kubelet_facts(fp.path)
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
    mem = gather_kubelet_facts(fp.path)["memory"]
    assert mem["eviction_hard_partial"] is False
    assert mem["eviction_hard"]["merge_defaults"] is True
    assert mem["eviction_hard"]["effective"] == dict(DEFAULT_EVICTION_HARD,
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
    fp, _cfg = _kubelet_tree(tmp_path, argv, fixture_text("kubeadm-config.yaml.fixture"))
    facts = gather_kubelet_facts(fp.path)
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
    assert mem["eviction_hard"]["effective"] == dict(DEFAULT_EVICTION_HARD,
                                                     **{"memory.available": "500Mi"})
    assert mem["eviction_hard_partial"] is False
    assert len(facts["errors"]) == 1 and "40-broken.conf" in facts["errors"][0]


def test_config_read_through_the_kubelets_root(tmp_path):
    hidden = "/etc/kubegpu-test-%s/kubelet.yaml" % uuid.uuid4().hex
    assert not os.path.exists(hidden)
    host_root = tmp_path / "hostroot"
    target = host_root / hidden.lstrip("/")
    target.parent.mkdir(parents=True)
    target.write_text(fixture_text("gpu-static-config.yaml.fixture"))
    fp = FakeProc(tmp_path)
    fp.add_process(77, ["/usr/bin/kubelet", "--config", hidden], root=str(host_root))
    facts = gather_kubelet_facts(fp.path)
    assert facts["config_path"] == hidden
    assert facts["config_read_path"] == os.path.join(fp.path, "77", "root", hidden.lstrip("/"))
    assert facts["config_error"] is None and facts["cpu_manager_policy"] == "static"
    assert not os.path.exists(fp.executed_marker)


def test_relative_config_resolved_against_kubelet_cwd(tmp_path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "k.yaml").write_text(fixture_text("kubeadm-config.yaml.fixture"))
    fp = FakeProc(tmp_path)
    fp.add_process(78, ["/usr/bin/kubelet", "--config=k.yaml"], cwd=str(tmp_path / "etc"))
    facts = gather_kubelet_facts(fp.path)
    assert facts["config_path"] == str(tmp_path / "etc" / "k.yaml")
    assert facts["cgroup_driver"] == "systemd"


def test_not_running_still_parses_config(tmp_path):
    fp = FakeProc(tmp_path)
    fp.add_noise()
    cfg = tmp_path / "config.yaml"
    cfg.write_text(fixture_text("gpu-static-config.yaml.fixture"))
    tools = fake_tools(tmp_path, dpkg_query="echo 'ii |1.31.4-1.1'\n")
    facts = gather_kubelet_facts(fp.path, config_path=str(cfg), get_bin_path=tools)
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
    facts = gather_kubelet_facts(fp.path)
    assert facts["config_source"] == "default"
    assert facts["config_path"] == DEFAULT_CONFIG_PATH
    assert facts["config_loaded_by_kubelet"] is False
    assert facts["effective_config"] == {}
    assert facts["cgroup_driver"] == "systemd"
    if facts["config_error"] is None:    # a config at the default path on this machine
        assert "runs without --config" in facts["config_warnings"][-1]


def test_option_overrides_flag(tmp_path):
    fp, cfg = _kubelet_tree(tmp_path, ["/usr/bin/kubelet", "--config=@CONFIG@"],
                            fixture_text("kubeadm-config.yaml.fixture"))
    other = tmp_path / "other.yaml"
    other.write_text(fixture_text("gpu-static-config.yaml.fixture"))
    facts = gather_kubelet_facts(fp.path, config_path=str(other))
    assert facts["config_source"] == "option" and facts["config_path"] == str(other)
    assert facts["config_loaded_by_kubelet"] is False
    assert facts["cpu_manager_policy"] == "static"


def test_bad_values_are_reported_not_raised(tmp_path):
    argv = ["/usr/bin/kubelet", "--config=@CONFIG@", "--kube-reserved=memory:1Gi"]
    fp, _cfg = _kubelet_tree(tmp_path, argv, fixture_text("bad-quantities-config.yaml.fixture"))
    facts = gather_kubelet_facts(fp.path)
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
    facts = gather_kubelet_facts(fp.path)
    errors = "\n".join(facts["errors"])
    assert "systemReserved must be a mapping, got '1Gi'" in errors
    assert "enforceNodeAllocatable must be a list, got 'pods'" in errors
    assert "evictionHard must be a mapping" in errors
    assert facts["memory"]["enforce_node_allocatable"] == ["pods"]


def test_several_root_kubelets_are_ambiguous_and_none_is_used(tmp_path):
    fp = FakeProc(tmp_path)
    fp.add_process(500, ["/usr/bin/kubelet", "--v=1"], starttime=50)
    fp.add_process(400, ["/usr/bin/kubelet", "--v=2"], starttime=90)
    facts = gather_kubelet_facts(fp.path)
    assert facts["pid"] is None and facts["running"] is False and facts["pids"] == [500, 400]
    assert facts["flags"] == {}
    assert any("2 root-owned processes named kubelet (500, 400)" in e for e in facts["errors"])


def test_dangling_exe_is_not_trusted(tmp_path):
    fp = FakeProc(tmp_path)
    fp.add_process(81, ["/usr/bin/kubelet"], exe="/nonexistent/kubelet (deleted)")
    facts = gather_kubelet_facts(fp.path, version_timeout=2)
    assert facts["running"] is False
    assert facts["impostors"][0]["pid"] == 81
    assert "executable cannot be examined" in facts["impostors"][0]["why"]


def test_version_error_when_nothing_answers(tmp_path):
    fp = FakeProc(tmp_path)
    facts = gather_kubelet_facts(fp.path, get_bin_path=lambda name: None)
    assert facts["version"] is None
    assert facts["version_error"] == "no package database (dpkg-query, rpm) on the node"
    facts = gather_kubelet_facts(fp.path, get_bin_path=lambda name: None,
                                 node_version="v1.32.4")
    assert facts["version"] == "v1.32.4"
    assert facts["version_source"] == "node:status.nodeInfo.kubeletVersion"
