# -*- coding: utf-8 -*-
"""kubelet_facts through real ansible-playbook on localhost."""
import glob
import os
import shutil
import subprocess
import sys
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(REPO, "tests", "fixtures", "kubelet")
sys.path.insert(0, FIXTURES)

from kubelet_fakeproc import FakeProc, fixture_args, fixture_path  # noqa: E402

GIB = 1 << 30
MIB = 1 << 20
# tests/lib/ansible_runner.py sets ANSIBLE_CALLBACKS_ENABLED="", which ansible-core 2.19 reads as
# a callback named "" and aborts on; naming the stdout callback itself is a no-op there.
ENV = {"ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.json"}


def run(ansible, args, **kwargs):
    return ansible.module("kubelet_facts", args, env=ENV, **kwargs)


def _read(name):
    with open(fixture_path(name)) as f:
        return f.read()


def _facts(res):
    assert res["_rc"] == 0, res
    assert res.get("failed") is not True, res
    assert res["changed"] is False
    return res["ansible_facts"]["kubelet"]


def _tree(tmp_path, argv, config_name=None, config_file="config.yaml", mem=64 * GIB, pid=4242):
    fp = FakeProc(tmp_path)
    fp.add_noise()
    fp.set_meminfo(mem)
    exe = fp.default_exe()   # leaves fp.executed_marker if anything ever runs it
    cfg = None
    if config_name is not None:
        cfg = tmp_path / config_file
        cfg.write_text(_read(config_name))
        argv = [a.replace("@CONFIG@", str(cfg)) for a in argv]
    fp.add_process(pid, argv, exe=exe)
    return fp, cfg


def _kubelets_running():
    """PIDs whose comm is kubelet, read independently of the module."""
    pids = []
    for d in glob.glob("/proc/[0-9]*"):
        try:
            with open(os.path.join(d, "comm")) as f:
                if f.read().strip() == "kubelet":
                    pids.append(int(os.path.basename(d)))
        except (IOError, OSError):
            pass
    return pids


def test_kubeadm_node_fake_proc_and_check_mode(ansible, tmp_path):
    argv = [a if not a.startswith("--config=") else "--config=@CONFIG@"
            for a in fixture_args("kubeadm.args")]
    argv += ["--cpu-manager-policy", "static", "--root-dir=/data/kubelet"]
    fp, cfg = _tree(tmp_path, argv, "kubeadm-config.yaml.fixture", mem=256 * GIB)
    res = run(ansible, {"proc_path": fp.path})
    facts = _facts(res)
    assert facts["running"] is True and facts["pid"] == 4242
    assert facts["identified_by"] == "root-owned" and facts["impostors"] == []
    assert not os.path.exists(fp.executed_marker)            # never executed
    if facts["version"] is None:                                # no kubelet package here
        assert facts["version_source"] is None and "kubelet" in facts["version_error"]
    assert facts["flags"]["container-runtime-endpoint"] == \
        "unix:///var/run/containerd/containerd.sock"
    assert facts["config_path"] == str(cfg) and facts["config_parser"] == "pyyaml"
    assert facts["config"]["kind"] == "KubeletConfiguration"
    assert facts["cgroup_driver"] == "systemd"
    assert facts["cpu_manager_policy"] == "static"
    assert facts["checkpoint_path"] == "/data/kubelet/device-plugins/kubelet_internal_checkpoint"
    assert facts["node_memory_bytes"] == 256 * GIB
    mem = facts["memory"]
    assert mem["recommended_reserved_bytes"] == 1188 * GIB // 100
    assert mem["recommended_eviction_bytes"] == 100 * MIB
    assert mem["reserved_total_bytes"] == 0
    assert mem["eviction_hard_partial"] is False
    assert mem["eviction_hard"]["memory_available"]["bytes"] == 100 * MIB

    checked = run(ansible, {"proc_path": fp.path}, check=True, diff=True)
    assert _facts(checked) == facts


def test_eks_node_space_separated_config_and_partial_eviction(ansible, tmp_path):
    argv = fixture_args("eks.args")
    argv[argv.index("--config") + 1] = "@CONFIG@"
    fp, cfg = _tree(tmp_path, argv, "eks-kubelet-config.json", "kubelet-config.json",
                    mem=192 * GIB)
    facts = _facts(run(ansible, {"proc_path": fp.path}))
    assert facts["config_path"] == str(cfg) and facts["config_parser"] == "json"
    mem = facts["memory"]
    assert mem["eviction_hard"]["configured"] == {
        "memory.available": "100Mi", "nodefs.available": "10%", "nodefs.inodesFree": "5%"}
    assert mem["eviction_hard_partial"] is True
    assert mem["eviction_hard_missing_defaults"] == ["imagefs.available"]
    assert mem["kube_reserved"] == {"raw": "2829Mi", "bytes": 2829 * MIB, "source": "config"}
    assert mem["reserved_shortfall_bytes"] > 0


def test_module_defaults_through_the_node_action_group(ansible, tmp_path):
    argv = fixture_args("gke.args")
    argv[argv.index("--config") + 1] = "@CONFIG@"
    fp, _cfg = _tree(tmp_path, argv, "gke-kubelet-config.yaml.fixture", mem=85 * GIB)
    play = [{
        "hosts": "localhost", "gather_facts": False,
        "module_defaults": {"group/kubegpu.fleet.node": {"proc_path": fp.path}},
        "tasks": [
            {"name": "gather", "kubegpu.fleet.kubelet_facts": {}},
            {"name": "use", "ansible.builtin.assert": {"that": [
                "ansible_facts.kubelet.running",
                "ansible_facts.kubelet.memory.reserved_shortfall_bytes == 0",
                "ansible_facts.kubelet.memory.kube_reserved.bytes == 6902 * 1048576",
            ]}},
        ],
    }]
    res = ansible.playbook(play, env=ENV)
    assert res.rc == 0, res.stdout + res.stderr
    assert res.task("gather")["ansible_facts"]["kubelet"]["pid"] == 4242


def test_not_running_still_parses_config_option(ansible, tmp_path):
    fp = FakeProc(tmp_path)
    fp.add_noise()
    cfg = tmp_path / "gpu.yaml"
    cfg.write_text(_read("gpu-static-config.yaml.fixture"))
    facts = _facts(run(ansible, {"proc_path": fp.path, "config_path": str(cfg)}))
    assert facts["running"] is False and facts["pid"] is None
    assert facts["config_source"] == "option" and facts["config_error"] is None
    assert facts["cpu_manager_policy"] == "static"
    assert facts["memory"]["system_reserved"]["bytes"] == 4 * GIB
    assert facts["memory"]["eviction_hard"]["memory_available"]["percent"] == 2.0


def test_malformed_and_missing_configs_do_not_fail(ansible, tmp_path):
    fp, cfg = _tree(tmp_path, ["/usr/bin/kubelet", "--config=@CONFIG@"],
                    "malformed-config.yaml.fixture")
    facts = _facts(run(ansible, {"proc_path": fp.path}))
    assert facts["config_error"].startswith("cannot parse %s: " % cfg)
    assert "line 6" in facts["config_error"]
    assert facts["config"] == {}
    assert facts["cgroup_driver"] == "cgroupfs"          # the broken file is not used

    missing = str(tmp_path / "nowhere" / "config.yaml")
    facts = _facts(run(ansible, {"proc_path": fp.path, "config_path": missing}))
    assert facts["config_error"] == "%s does not exist" % missing
    assert facts["running"] is True


def test_bad_quantities_are_reported(ansible, tmp_path):
    fp, _cfg = _tree(tmp_path, ["/usr/bin/kubelet", "--config=@CONFIG@"],
                     "bad-quantities-config.yaml.fixture")
    facts = _facts(run(ansible, {"proc_path": fp.path}))
    assert any("'1GB'" in e for e in facts["errors"])
    assert any("'150%'" in e for e in facts["errors"])
    assert facts["memory"]["kube_reserved"]["bytes"] == 512 * MIB


@pytest.mark.parametrize("args,words", [
    ({"proc_path": "/nonexistent/proc"}, "proc_path '/nonexistent/proc' is not a directory"),
    ({"config_path": "relative/config.yaml"}, "must be an absolute path"),
    ({"config_path": "/"}, "config_path '/' is a directory"),
    ({"bogus": 1}, "Unsupported parameters"),
    ({"journal_unit": "*"}, "journal_unit must be a systemd unit name"),
    ({"journal_unit": "--all"}, "journal_unit must be a systemd unit name"),
    ({"kubelet_package": "-kubelet"}, "kubelet_package must be a package name"),
    ({"timeout": -1}, "timeout must be between"),
    ({"timeout": "nan"}, "timeout must be between"),
    ({"timeout": 1e300}, "timeout must be between"),
])
def test_bad_options_fail_with_a_message(ansible, args, words):
    res = run(ansible, args)
    assert res["_rc"] != 0
    assert res.get("failed") is True
    assert words in res["msg"]
    assert "Traceback" not in res.get("module_stderr", "")


def _python_without_yaml(tmp_path):
    """An interpreter that cannot import PyYAML: a Python 3.8 without it, else a bare venv."""
    candidates = sorted(glob.glob("/root/.pyenv/versions/3.8*/bin/python3.8")) + \
        ["/usr/bin/python3.8"]
    for py in candidates:
        if not os.access(py, os.X_OK):
            continue
        rc = subprocess.call([py, "-c", "import yaml"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        if rc != 0:
            return py
    venv = str(tmp_path / "noyaml")
    subprocess.check_call([shutil.which("python3") or sys.executable, "-m", "venv",
                           "--without-pip", venv])
    return os.path.join(venv, "bin", "python3")


def test_node_without_pyyaml_fails_with_missing_required_lib(ansible, tmp_path):
    py = _python_without_yaml(tmp_path)
    probe = subprocess.run([py, "-c", "import yaml"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, universal_newlines=True, check=False)
    assert probe.returncode != 0 and "No module named 'yaml'" in probe.stderr
    fp, _cfg = _tree(tmp_path, ["/usr/bin/kubelet", "--config", "@CONFIG@", "--v=2"],
                     "gpu-static-config.yaml.fixture", mem=2048 * GIB)
    res = run(ansible, {"proc_path": fp.path},
              task_extra={"vars": {"ansible_python_interpreter": py}})
    assert res["_rc"] != 0 and res.get("failed") is True, res
    assert "Traceback" not in res.get("module_stderr", "") + res["msg"]
    for words in ("Failed to import the required Python library (PyYAML)", py,
                  "to read the KubeletConfiguration", "python3-yaml", "pip install PyYAML"):
        assert words in res["msg"], res["msg"]
    assert "ansible_facts" not in res
    facts = _facts(run(ansible, {"proc_path": fp.path}))   # with PyYAML: the config reads
    assert facts["config_parser"] == "pyyaml"
    assert facts["memory"]["reserved_total_bytes"] == 4 * GIB + 7 * GIB // 2


def test_real_proc_without_kubelet(ansible):
    before = _kubelets_running()
    facts = _facts(run(ansible, {}))
    after = _kubelets_running()
    if before or after:
        pytest.skip("a kubelet process runs on this machine (pids %s)" % (before or after))
    assert facts["running"] is False and facts["pid"] is None and facts["pids"] == []
    assert facts["node_memory_bytes"] > 0
    assert facts["memory"]["recommended_reserved_bytes"] > 0
    assert facts["root_dir"] == "/var/lib/kubelet"
    if not os.path.exists("/var/lib/kubelet/config.yaml"):
        assert facts["config_error"] == "/var/lib/kubelet/config.yaml does not exist"


def test_real_process_on_real_proc(ansible, tmp_path):
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        pytest.skip("no C compiler to build the stand-in kubelet")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    binary = str(bindir / "kubelet")
    subprocess.check_call([gcc, "-O1", "-o", binary, fixture_path("fake_kubelet.c")])
    cfg = tmp_path / "config.yaml"
    cfg.write_text(_read("gpu-static-config.yaml.fixture"))
    proc = subprocess.Popen([binary, "--config=%s" % cfg, "--cpu-manager-policy=none",
                             "--root-dir", str(tmp_path / "root"), "--v=2"])
    try:
        deadline = time.time() + 10
        while proc.pid not in _kubelets_running() and time.time() < deadline:
            time.sleep(0.05)
        facts = _facts(run(ansible, {}))
        assert proc.pid in facts["pids"]
        if facts["pids"] != [proc.pid]:
            pytest.skip("other kubelet processes run here: %s" % facts["pids"])
        assert facts["running"] is True and facts["pid"] == proc.pid
        assert facts["exe"] == binary and facts["exe_deleted"] is False
        assert facts["identified_by"] == "root-owned"
        assert facts["version_source"] is None or facts["version_source"].startswith("package:")
        assert facts["config_path"] == str(cfg) and facts["config_loaded_by_kubelet"] is True
        assert facts["cpu_manager_policy"] == "none"          # flag beats the file's static
        assert facts["sources"]["cpu_manager_policy"] == "flag"
        assert facts["checkpoint_path"] == str(
            tmp_path / "root" / "device-plugins" / "kubelet_internal_checkpoint")
        assert facts["memory"]["system_reserved"]["bytes"] == 4 * GIB
    finally:
        proc.kill()
        proc.wait()
