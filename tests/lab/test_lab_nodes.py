"""Lab nodes boot, answer ssh, register with the API double, reboot for real, and go away.

One small lab (two nodes) for the module: node lifecycle, ``ansible.builtin.reboot`` through
the generated inventory, ``up`` repairing a powered-off node, and the CLI refusing to run
where it cannot.
"""
import os
import subprocess
import sys

import pytest
import yaml

from lab_fixture import LAB, device_plugin_ds, lab_factory, wait_for  # noqa: F401  pylint: disable=unused-import

PROFILE = {
    "name": "nodes",
    "defaults": {"gpus": {"count": 2}, "memory": "62Gi",
                 "kubelet": {"config": {"kubeReserved": {"cpu": "500m", "memory": "5489Mi"}}},
                 "pods": [{"name": "train-{node}", "namespace": "ml", "gpus": 1}]},
    "nodes": [{"name": "node-a", "seed": "healthy"}, {"name": "node-b", "seed": "healthy"}],
    "cluster": {"manifests": [device_plugin_ds()]},
}


@pytest.fixture(scope="module")
def lab(lab_factory):  # noqa: F811
    return lab_factory(PROFILE)


def _ready(node_obj):
    return any(c["type"] == "Ready" and c["status"] == "True" for c in node_obj["status"]["conditions"])


def test_nodes_answer_ssh_and_register_with_their_boot_id(lab):
    for name in ("node-a", "node-b"):
        boot_id = lab.ssh(name, "cat /proc/sys/kernel/random/boot_id").stdout.strip()
        assert lab.ssh(name, "hostname").stdout.strip() == name
        node = lab.node_obj(name)
        assert _ready(node)
        assert node["status"]["nodeInfo"]["bootID"] == boot_id
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "2"
        # 62 GiB node: the kubelet subtracts kubeReserved and the default hard eviction threshold
        assert node["status"]["capacity"]["memory"] == "%dKi" % (62 * 1024 * 1024)
        assert node["status"]["allocatable"]["memory"] == "%dKi" % (62 * 1024 * 1024 - 5489 * 1024 - 100 * 1024)
    # each node is its own machine: own machine-id, own sshd host key
    ids = {lab.ssh(n, "cat /etc/machine-id").stdout.strip() for n in ("node-a", "node-b")}
    assert len(ids) == 2


def test_node_sees_its_gpus_memory_and_driver_at_default_paths(lab):
    out = lab.ssh("node-a", "nvidia-smi -L; grep MemTotal /proc/meminfo; "
                            "head -1 /proc/driver/nvidia/version; grep -c nvidia /proc/devices").stdout
    assert out.count("NVIDIA H100 80GB HBM3") == 2
    assert "MemTotal:       65011712 kB" in out
    assert "570.172.08" in out
    # the complete procfs view the inventory gives modules as proc_path
    view = lab.ssh("node-a", "cat /run/kubegpu-lab/proc/modules; readlink /run/kubegpu-lab/proc/1; "
                             "cat /run/kubegpu-lab/proc/1/comm").stdout.split("\n")
    assert any(line.startswith("nvidia_uvm ") for line in view)
    assert any(line.startswith("nvidia ") for line in view)
    assert "/proc/1" in view and "systemd" in view


def test_running_gpu_pod_has_its_gpu_in_env_and_device_cgroup(lab):
    pod = wait_for(lambda: (lab.pod("ml", "train-node-a") or {}).get("status", {}).get("phase") == "Running"
                   and lab.pod("ml", "train-node-a"), 30, "train-node-a Running")
    assert pod["status"]["containerStatuses"][0]["ready"] is True
    ctrs = [c for c in lab.container_devices("node-a") if c["visible"] and c["visible"].startswith("GPU-")]
    assert len(ctrs) == 1
    uuid = ctrs[0]["visible"]
    smi = lab.ssh("node-a", "nvidia-smi -L").stdout
    minor = [i for i, line in enumerate(smi.splitlines()) if uuid in line][0]
    assert "c 195:%d rw" % minor in ctrs[0]["lines"]
    assert "c 195:255 rw" in ctrs[0]["lines"]
    uvm = lab.proc_major("node-a", "nvidia-uvm")
    assert "c %d:0 rw" % uvm in ctrs[0]["lines"]


def test_ansible_reboot_gives_a_new_boot_id_and_the_node_comes_back(lab, ansible):
    before = lab.ssh("node-b", "cat /proc/sys/kernel/random/boot_id").stdout.strip()
    res = ansible.playbook([{"hosts": "node-b", "gather_facts": False,
                             "tasks": [{"name": "reboot", "ansible.builtin.reboot": {"reboot_timeout": 120}}]}],
                           inventory=lab.inventory)
    assert res.rc == 0, res.stdout
    assert res.task("reboot", host="node-b")["rebooted"] is True
    after = lab.ssh("node-b", "cat /proc/sys/kernel/random/boot_id").stdout.strip()
    assert after and after != before

    def back():
        n = lab.node_obj("node-b")
        return n if n["status"]["nodeInfo"]["bootID"] == after and _ready(n) else None

    node = wait_for(back, 60, "node-b Ready with its new boot ID")
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "2"
    assert lab.lab.node("node-b").supervisor_state()["boots"] == 2
    # the GPU pod bound to the node runs again after the reboot
    wait_for(lambda: (lab.pod("ml", "train-node-b") or {}).get("status", {}).get("phase") == "Running",
             60, "train-node-b Running after the reboot")


def test_up_repairs_a_powered_off_node(lab):
    node = lab.lab.node("node-a")
    lab.ssh("node-a", "systemctl poweroff", check=False)
    wait_for(lambda: not node.running(), 30, "node-a powered off")
    lab.lab.up(lab.lab.state["profile_source"])
    assert node.running()
    assert lab.ssh("node-a", "systemctl is-system-running --wait", check=False).stdout.strip() in ("running", "degraded")
    wait_for(lambda: lab.node_obj("node-a")["status"]["nodeInfo"]["bootID"]
             == lab.ssh("node-a", "cat /proc/sys/kernel/random/boot_id").stdout.strip(), 60,
             "node-a re-registered with its new boot ID")


def test_inventory_lists_every_node_with_lab_paths(lab):
    with open(lab.inventory) as f:
        inv = yaml.safe_load(f)
    hosts = inv["all"]["children"]["gpu_nodes"]["hosts"]
    assert sorted(hosts) == ["node-a", "node-b"]
    assert inv["all"]["vars"]["kubegpu_proc_path"] == "/run/kubegpu-lab/proc"
    assert inv["all"]["vars"]["kubegpu_cgroup_mode"] == "list"
    for name, hv in hosts.items():
        assert hv["ansible_port"] == lab.lab.state["nodes"][name]["ssh_port"]


def _cli(args, env=None):
    cmd = [sys.executable, "-m", "kubegpu_lab"] + args
    e = dict(os.environ, PYTHONPATH=LAB)
    e.update(env or {})
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                          env=e, timeout=120, check=False)


def test_cli_refuses_without_root(tmp_path):
    # The checkout (and its venv) may sit in a directory only root can read (a CI clone in a
    # mktemp dir is 0700), so the unprivileged run gets the lab code and PyYAML from a
    # world-readable copy and the real interpreter behind the venv.
    import shutil
    import tempfile

    import yaml

    pub = tempfile.mkdtemp(prefix="kubegpu-lab-nonroot-")
    try:
        os.chmod(pub, 0o755)
        shutil.copytree(LAB, os.path.join(pub, "lab"))
        yaml_dir = os.path.dirname(yaml.__file__)
        shutil.copytree(yaml_dir, os.path.join(pub, "site", "yaml"))
        for name in os.listdir(os.path.dirname(yaml_dir)):
            if name.startswith("_yaml"):
                src = os.path.join(os.path.dirname(yaml_dir), name)
                (shutil.copytree if os.path.isdir(src) else shutil.copy)(src, os.path.join(pub, "site", name))
        for root, dirs, files in os.walk(pub):
            for d in dirs:
                os.chmod(os.path.join(root, d), 0o755)
            for f in files:
                os.chmod(os.path.join(root, f), 0o644)
        state = os.path.join(pub, "state")
        os.mkdir(state)
        os.chmod(state, 0o777)
        cmd = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups",
               os.path.realpath(sys.executable), "-s", "-m", "kubegpu_lab", "up", "--name", "refused",
               "--profile", "smoke"]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(pub, "lab"), os.path.join(pub, "site")]),
                   KUBEGPU_LAB_ROOT=state, HOME=state)
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                              env=env, cwd=pub, timeout=120, check=False)
    finally:
        shutil.rmtree(pub, ignore_errors=True)
    assert proc.returncode == 1, proc.stderr
    assert "must run as root" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_cli_refuses_without_systemd_nspawn(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("debootstrap", "dpkg-deb", "apt-ftparchive", "gcc", "ssh", "ssh-keygen", "mount", "unshare"):
        src = subprocess.run(["sh", "-c", "command -v %s" % tool], stdout=subprocess.PIPE,
                             universal_newlines=True, check=False).stdout.strip()
        if src:
            os.symlink(src, str(bindir / tool))
    proc = _cli(["up", "--no-install", "--name", "refused", "--profile", "smoke"],
                env={"PATH": str(bindir), "KUBEGPU_LAB_ROOT": str(tmp_path / "root")})
    assert proc.returncode == 1
    assert "systemd-nspawn" in proc.stderr
    assert not (tmp_path / "root" / "refused").exists()
