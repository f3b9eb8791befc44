# -*- coding: utf-8 -*-
"""kubelet_config through real ansible-playbook on localhost, against temp files and a fake
procfs (the running kubelet's command line, meminfo)."""
import glob
import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(REPO, "tests", "fixtures", "kubelet")
sys.path.insert(0, FIXTURES)

from kubelet_fakeproc import FakeProc  # noqa: E402

GIB = 1 << 30
ENV = {"ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.json"}
FULL_EVICTION = {"memory.available": "100Mi", "nodefs.available": "10%", "imagefs.available": "15%",
                 "nodefs.inodesFree": "5%"}
CONFIG = """# kubeadm writes this file
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous:
    enabled: false
  x509:
    clientCAFile: /etc/kubernetes/pki/ca.crt
cgroupDriver: systemd
clusterDNS:
- 10.96.0.10
healthzPort: 10248
kubeReserved: {cpu: "1", ephemeral-storage: 1Gi}
evictionHard:
  memory.available: 200Mi   # partial: the other defaults are zeroed
serializeImagePulls: false
"""


class Node(object):
    """A temp 'node': config file, fake procfs with a kubelet, env files, unit drop-ins."""

    def __init__(self, tmp_path, config=CONFIG, argv_extra=(), env_text=None, dropin=None, mem=62 * GIB,
                 name="config.yaml"):
        self.tmp = tmp_path
        self.config = str(tmp_path / name)
        with open(self.config, "w") as f:
            f.write(config)
        self.fp = FakeProc(tmp_path)
        self.fp.add_noise()
        self.fp.set_meminfo(mem)
        self.fp.add_process(4242, ["/usr/bin/kubelet", "--config=%s" % self.config] + list(argv_extra))
        self.env = str(tmp_path / "default-kubelet")
        if env_text is not None:
            with open(self.env, "w") as f:
                f.write(env_text)
        self.dropins = str(tmp_path / "kubelet.service.d")
        os.makedirs(self.dropins)
        if dropin is not None:
            with open(os.path.join(self.dropins, "10-kubeadm.conf"), "w") as f:
                f.write(dropin)

    def args(self, **kw):
        args = {"proc_path": self.fp.path, "flag_files": [self.env], "unit_dropin_dirs": [self.dropins]}
        args.update(kw)
        return args

    def text(self):
        with open(self.config) as f:
            return f.read()

    def backups(self, path=None):
        return sorted(glob.glob((path or self.config) + ".*.bak"))


def run(ansible, args, **kw):
    return ansible.module("kubelet_config", args, env=ENV, **kw)


def ok(res):
    assert res["_rc"] == 0 and not res.get("failed"), res
    return res


def failed(res, *words):
    assert res["_rc"] != 0 and res.get("failed"), res
    assert "Traceback" not in res.get("module_stderr", "") + res.get("msg", ""), res
    for word in words:
        assert word in res["msg"], res["msg"]
    return res


def test_reservation_changed_then_unchanged_backup_mode_and_bytes(ansible, tmp_path):
    node = Node(tmp_path)
    os.chmod(node.config, 0o640)
    res = ok(run(ansible, node.args(memory_reservation={}, settings={"maxPods": 64, "serializeImagePulls": None})))
    assert res["changed"] and res["restart_required"] and res["parser"] == "pyyaml"
    assert res["path"] == node.config   # taken from the running kubelet's --config
    assert set(res["changed_keys"]) == {"kubeReserved.memory", 'evictionHard["nodefs.available"]',
                                        'evictionHard["imagefs.available"]', 'evictionHard["nodefs.inodesFree"]',
                                        "maxPods", "serializeImagePulls"}
    new = yaml.safe_load(node.text())
    old = yaml.safe_load(CONFIG)
    assert new["kubeReserved"] == {"cpu": "1", "ephemeral-storage": "1Gi", "memory": "5489Mi"}
    assert new["evictionHard"] == dict(FULL_EVICTION, **{"memory.available": "200Mi"})
    assert "serializeImagePulls" not in new and new["maxPods"] == 64
    for key in old:
        if key not in ("kubeReserved", "evictionHard", "serializeImagePulls"):
            assert new[key] == old[key]
    assert list(new)[:len(old) - 1] == [k for k in old if k != "serializeImagePulls"]  # order kept
    assert node.text().startswith("# kubeadm writes this file\n")
    assert oct(os.stat(node.config).st_mode & 0o777) == oct(0o640)
    (backup,) = node.backups()
    assert res["backup_file"] == backup
    assert os.stat(backup).st_mode & 0o777 == 0o600
    with open(backup) as f:
        assert f.read() == CONFIG
    assert res["memory_reservation"]["kube_reserved"] == {"bytes": 5489 << 20, "value": "5489Mi", "action": "set"}

    again = ok(run(ansible, node.args(memory_reservation={}, settings={"maxPods": 64, "serializeImagePulls": None})))
    assert again["changed"] is False and again["changed_keys"] == [] and again["backup_file"] is None
    assert len(node.backups()) == 1


def test_diff_and_check_mode_change_nothing(ansible, tmp_path):
    node = Node(tmp_path)
    res = ok(run(ansible, node.args(memory_reservation={"kube_reserved": "6Gi"}), check=True, diff=True))
    assert res["changed"] is True
    (diff,) = res["diff"]
    assert diff["before"] == CONFIG and "  memory: 6Gi\n" in diff["after"]
    assert yaml.safe_load(diff["after"])["kubeReserved"]["memory"] == "6Gi"
    assert node.text() == CONFIG and node.backups() == []
    assert res["config"]["kubeReserved"]["memory"] == "6Gi"


def test_semantically_equal_file_is_not_rewritten(ansible, tmp_path):
    text = CONFIG.replace("memory.available: 200Mi   # partial: the other defaults are zeroed",
                          "memory.available: 200Mi\n  nodefs.available: 10%\n  imagefs.available: 15%\n"
                          "  nodefs.inodesFree: 5%")
    node = Node(tmp_path, config=text.replace('{cpu: "1", ephemeral-storage: 1Gi}',
                                              '{cpu: "1", ephemeral-storage: 1Gi, memory: 8Gi}'))
    before = node.text()
    res = ok(run(ansible, node.args(memory_reservation={}, settings={"healthzPort": 10248})))
    assert res["changed"] is False and node.text() == before and node.backups() == []
    assert res["memory_reservation"]["kube_reserved"]["action"] == "kept-larger"
    lowered = ok(run(ansible, node.args(memory_reservation={"allow_lower": True})))
    assert lowered["changed"] and yaml.safe_load(node.text())["kubeReserved"]["memory"] == "5489Mi"


@pytest.mark.parametrize("content,words", [
    ("kind: KubeletConfiguration\nfoo: [unclosed\n", ["cannot parse", "left untouched"]),
    ("- just\n- a list\n", ["not a KubeletConfiguration mapping"]),
    ("kind: Pod\napiVersion: v1\n", ["not a KubeletConfiguration"]),
    ("", ["not a KubeletConfiguration mapping"]),
])
def test_bad_file_fails_cleanly_and_is_left_alone(ansible, tmp_path, content, words):
    node = Node(tmp_path, config=content)
    failed(run(ansible, node.args(settings={"maxPods": 1})), *words)
    assert node.text() == content and node.backups() == []


def test_bad_input_fails_cleanly(ansible, tmp_path):
    node = Node(tmp_path)
    failed(run(ansible, node.args(memory_reservation={"kube_reserved": "lots"})), "kube_reserved", "lots")
    failed(run(ansible, node.args(memory_reservation={"eviction_hard": {"memory.available": "x%"}})),
           "memory.available")
    failed(run(ansible, node.args(path=str(tmp_path / "missing.yaml"), settings={"a": 1})), "does not exist")
    failed(run(ansible, node.args(path=str(tmp_path), settings={"a": 1})), "directory")
    assert node.text() == CONFIG and node.backups() == []


def test_flag_overriding_a_key_fails_unless_moved(ansible, tmp_path):
    env = '# extra args\nKUBELET_EXTRA_ARGS="--v=4 --kube-reserved=cpu=2,memory=10Gi --node-ip=10.0.0.7"\n'
    node = Node(tmp_path, env_text=env, argv_extra=["--v=4", "--kube-reserved=cpu=2,memory=10Gi",
                                                    "--node-ip=10.0.0.7"])
    res = failed(run(ansible, node.args(memory_reservation={})), "--kube-reserved", "kubeReserved",
                 "flag_conflicts=move")
    assert {c["source"] for c in res["flag_conflicts"]} == {"process", "file"}
    assert node.text() == CONFIG
    # a key no flag touches is fine
    ok(run(ansible, node.args(settings={"maxPods": 30}), check=True))
    # ignore: written with a warning
    ign = ok(run(ansible, node.args(memory_reservation={}, flag_conflicts="ignore"), check=True))
    assert any("--kube-reserved" in w for w in ign.get("warnings", []))

    moved = ok(run(ansible, node.args(memory_reservation={}, flag_conflicts="move"), diff=True))
    cfg = yaml.safe_load(node.text())
    # the flag replaced the whole map (ephemeral-storage gone), its larger memory is kept
    assert cfg["kubeReserved"] == {"cpu": "2", "memory": "10Gi"}
    with open(node.env) as f:
        assert f.read() == '# extra args\nKUBELET_EXTRA_ARGS="--v=4 --node-ip=10.0.0.7"\n'
    (changed_file,) = moved["flag_files_changed"]
    assert changed_file["removed"] == ["KUBELET_EXTRA_ARGS --kube-reserved=cpu=2,memory=10Gi"]
    assert os.stat(changed_file["backup_file"]).st_mode & 0o777 == 0o600
    with open(changed_file["backup_file"]) as f:
        assert f.read() == env
    assert len(moved["diff"]) == 2


def test_flags_that_cannot_be_moved(ansible, tmp_path):
    dropin = ("[Service]\nEnvironment=\"KUBELET_CONFIG_ARGS=--config=/x --eviction-hard=memory.available<1Gi\"\n"
              "ExecStart=\nExecStart=/usr/bin/kubelet $KUBELET_CONFIG_ARGS\n")
    node = Node(tmp_path, dropin=dropin)
    failed(run(ansible, node.args(memory_reservation={}, flag_conflicts="move")), "--eviction-hard",
           "cannot be moved", "Environment=KUBELET_CONFIG_ARGS")
    # only on the running command line (unit ExecStart, or files edited without a restart)
    other = tmp_path / "other"
    other.mkdir()
    node2 = Node(other, argv_extra=["--cpu-manager-policy=none"])
    failed(run(ansible, node2.args(cpu_manager_policy="static", flag_conflicts="move")), "--cpu-manager-policy",
           "process")
    assert node.text() == CONFIG and node2.text() == CONFIG


def test_static_cpu_policy_adds_reserved_cpu_only_when_missing(ansible, tmp_path):
    node = Node(tmp_path, config=CONFIG.replace('{cpu: "1", ephemeral-storage: 1Gi}', "{ephemeral-storage: 1Gi}"))
    res = ok(run(ansible, node.args(cpu_manager_policy="static")))
    cfg = yaml.safe_load(node.text())
    assert cfg["cpuManagerPolicy"] == "static" and cfg["kubeReserved"] == {"ephemeral-storage": "1Gi", "cpu": "1"}
    assert set(res["changed_keys"]) == {"cpuManagerPolicy", "kubeReserved.cpu"}
    assert ok(run(ansible, node.args(cpu_manager_policy="static")))["changed"] is False


def test_json_config_stays_json(ansible, tmp_path):
    text = json.dumps({"kind": "KubeletConfiguration", "apiVersion": "kubelet.config.k8s.io/v1beta1",
                       "maxPods": 29, "evictionHard": {"memory.available": "100Mi"}}, indent=4) + "\n"
    node = Node(tmp_path, config=text, name="kubelet-config.json")
    res = ok(run(ansible, node.args(path=node.config, settings={"maxPods": 58})))
    assert res["format"] == "json" and res["parser"] == "json"
    data = json.loads(node.text())
    assert data["maxPods"] == 58 and data["evictionHard"] == {"memory.available": "100Mi"}  # not touched
    ok(run(ansible, node.args(path=node.config, settings={"evictionHard": {"memory.available": "200Mi"}})))
    data = json.loads(node.text())
    assert data["evictionHard"] == dict(FULL_EVICTION, **{"memory.available": "200Mi"})  # completed
    assert list(data)[:3] == ["kind", "apiVersion", "maxPods"] and '\n    "kind"' in node.text()


def _python_without_yaml(tmp_path):
    """An interpreter that cannot import PyYAML: a pyenv 3.8 without it, else a bare venv."""
    for py in sorted(glob.glob("/root/.pyenv/versions/3.8*/bin/python3.8")) + ["/usr/bin/python3.8"]:
        if os.access(py, os.X_OK) and subprocess.call([py, "-c", "import yaml"], stdout=subprocess.DEVNULL,
                                                      stderr=subprocess.DEVNULL) != 0:
            return py
    venv = str(tmp_path / "noyaml")
    subprocess.check_call([shutil.which("python3") or sys.executable, "-m", "venv", "--without-pip", venv])
    return os.path.join(venv, "bin", "python3")


def test_node_without_pyyaml_fails_with_missing_required_lib_and_changes_nothing(ansible, tmp_path):
    """The real module under an interpreter that cannot import yaml: missing_required_lib with
    the package to install, no traceback, the file and its directory untouched."""
    py = _python_without_yaml(tmp_path)
    probe = subprocess.run([py, "-c", "import yaml"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, check=False)
    assert probe.returncode != 0 and "No module named 'yaml'" in probe.stderr
    (tmp_path / "node").mkdir()
    node = Node(tmp_path / "node")
    before = sorted(os.listdir(str(tmp_path / "node")))
    res = failed(run(ansible, node.args(memory_reservation={}, settings={"maxPods": 64}),
                     task_extra={"vars": {"ansible_python_interpreter": py}}),
                 "Failed to import the required Python library (PyYAML)", py,
                 "to read and write the KubeletConfiguration", "python3-yaml", "pip install PyYAML")
    assert res["changed"] is False
    assert node.text() == CONFIG and node.backups() == []
    assert sorted(os.listdir(str(tmp_path / "node"))) == before
    # the same task with PyYAML importable edits the file
    assert ok(run(ansible, node.args(memory_reservation={}, settings={"maxPods": 64})))["changed"]
