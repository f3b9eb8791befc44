"""Pytest fixtures that bring up real lab nodes (systemd-nspawn) and tear them down.

Import into a test module (there is deliberately no tests/lab/conftest.py):

    from lab_fixture import lab_factory, LabHandle, device_plugin_ds  # noqa: F401

``lab_factory(profile_dict)`` boots a lab from a profile (written to a temp file) under a
private lab root, waits until it has settled and returns a ``LabHandle``. Every lab a module
started is torn down at the end of the module, and the teardown fails the test run if any
process, cgroup, mount or directory of it is left. The lab needs root; elsewhere the tests
are skipped with the reason (the lab CLI itself refuses with the same message).
"""
import json
import os
import subprocess
import sys
import time

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAB = os.path.join(REPO, "lab")
if LAB not in sys.path:
    sys.path.insert(0, LAB)

from kubegpu_lab import cgroups  # noqa: E402
from kubegpu_lab.lab import Lab  # noqa: E402
from kubegpu_lab.util import mountpoints  # noqa: E402

KUBECTL = os.environ.get("KUBECTL", "kubectl")
PLUGIN_IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.17.2"


def device_plugin_ds(name="nvidia-device-plugin-daemonset", pool=None, pass_device_specs=True,
                     image=PLUGIN_IMAGE, mig_strategy="mixed"):
    """A device plugin DaemonSet like the GPU Operator's (optionally for one node pool)."""
    env = [{"name": "MIG_STRATEGY", "value": mig_strategy}, {"name": "FAIL_ON_INIT_ERROR", "value": "true"}]
    if pass_device_specs:
        env.insert(0, {"name": "PASS_DEVICE_SPECS", "value": "true"})
    selector = {"nvidia.com/gpu.present": "true"}
    if pool:
        selector["kubegpu.io/pool"] = pool
    return {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": "kube-system"},
        "spec": {"selector": {"matchLabels": {"name": name}},
                 "updateStrategy": {"type": "RollingUpdate"},
                 "template": {"metadata": {"labels": {"name": name}},
                              "spec": {"nodeSelector": selector,
                                       "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                                                        "effect": "NoSchedule"}],
                                       "containers": [{"name": "nvidia-device-plugin-ctr", "image": image,
                                                       "env": env, "securityContext": {"privileged": True}}]}}},
    }


def require_root():
    if os.geteuid() != 0:
        pytest.skip("the GPU node lab needs root (systemd-nspawn, overlay mounts, mknod)")


class LabHandle(object):
    """A running lab plus the helpers tests use against it."""

    def __init__(self, lab, workdir):
        self.lab = lab
        self.workdir = workdir

    @property
    def inventory(self):
        return self.lab.inventory_path

    @property
    def kubeconfig(self):
        return self.lab.kubeconfig_path

    @property
    def client(self):
        return self.lab.api_client()

    def node(self, name):
        return self.lab.node(name)

    def ssh(self, node, script, check=True, timeout=60):
        """Run a shell script on a node as root; return the CompletedProcess."""
        return self.lab.node(node).ssh(["sh", "-c", script], check=check, timeout=timeout)

    def kubectl(self, *args, **kw):
        check = kw.pop("check", True)
        timeout = kw.pop("timeout", 120)
        env = dict(os.environ)
        env.pop("KUBECONFIG", None)
        cmd = [KUBECTL, "--kubeconfig", self.kubeconfig, "--cache-dir", os.path.join(self.workdir, "kcache")]
        proc = subprocess.run(cmd + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, timeout=timeout, env=env, check=False)
        if check and proc.returncode != 0:
            raise AssertionError("kubectl %s failed (%d):\n%s\n%s" % (" ".join(args), proc.returncode,
                                                                      proc.stdout, proc.stderr))
        return proc

    def get(self, path):
        code, obj = self.client.request("GET", path)
        assert code == 200, "GET %s: %s %s" % (path, code, obj)
        return obj

    def node_obj(self, name):
        return self.get("/api/v1/nodes/%s" % name)

    def pods(self, node=None, namespace=None):
        path = "/api/v1/namespaces/%s/pods" % namespace if namespace else "/api/v1/pods"
        if node:
            path += "?fieldSelector=spec.nodeName%%3D%s" % node
        return self.get(path)["items"]

    def pod(self, namespace, name):
        code, obj = self.client.request("GET", "/api/v1/namespaces/%s/pods/%s" % (namespace, name))
        return obj if code == 200 else None

    def events_for(self, namespace, name):
        return self.get("/api/v1/namespaces/%s/events?fieldSelector=involvedObject.name%%3D%s"
                        % (namespace, name))["items"]

    def create(self, objects):
        return self.client.load(objects)

    def container_devices(self, node):
        """Every container cgroup on a node: path, pid, pod name (the container's HOSTNAME),
        NVIDIA_VISIBLE_DEVICES and the devices.list lines."""
        script = r'''
import json, os
root = "/run/kubegpu-lab/cgroup/devices"
out = []
for d, dirs, files in os.walk(root):
    base = os.path.basename(d)
    if "devices.list" not in files or not (base.startswith("cri-containerd-") or len(base) == 64):
        continue
    pids = open(os.path.join(d, "cgroup.procs")).read().split()
    env = {}
    if pids:
        try:
            env = dict(e.split("=", 1) for e in open("/proc/%s/environ" % pids[0]).read().split("\0") if "=" in e)
        except OSError:
            pass
    out.append({"path": d, "pid": int(pids[0]) if pids else None,
                "visible": env.get("NVIDIA_VISIBLE_DEVICES"), "pod": env.get("HOSTNAME"),
                "lines": [l.strip() for l in open(os.path.join(d, "devices.list")) if l.strip()]})
print(json.dumps(out))
'''
        proc = self.lab.node(node).ssh(["python3", "-c", script], timeout=30)
        return json.loads(proc.stdout)

    def proc_major(self, node, name):
        out = self.ssh(node, "awk '$2 == \"%s\" {print $1}' /proc/devices" % name).stdout.split()
        return int(out[0]) if out else None


def wait_for(predicate, timeout, what, interval=0.5):
    """Poll ``predicate`` until it returns a truthy value (returned) or fail naming ``what``."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError("timed out after %ss waiting for %s (last: %r)" % (timeout, what, last))


def journal_cursor(lab, node, unit="kubelet"):
    """The journal cursor of the unit's last entry on the node (None when it has none yet)."""
    out = lab.ssh(node, "journalctl -u %s -n 1 --show-cursor -o cat --no-pager" % unit).stdout
    cursors = [line[len("-- cursor: "):].strip() for line in out.splitlines() if line.startswith("-- cursor: ")]
    return cursors[-1] if cursors else None


def journal_since(lab, node, cursor, unit="kubelet"):
    """The unit's journal lines (message only) after ``cursor`` (all of them for None)."""
    after = " --after-cursor='%s'" % cursor if cursor else ""
    return lab.ssh(node, "journalctl -u %s -o cat --no-pager%s" % (unit, after)).stdout.splitlines()


CPU_MANAGER_RECONCILED = "[cpumanager] reconcileState: updated container cgroups"


def wait_for_cpu_manager_reconciles(lab, node, cursor, count=2, timeout=180):
    """Wait until the node's kubelet logged ``count`` CPU manager reconcile passes after ``cursor``
    (the kubelet logs each at verbosity 4): with count=2 at least one whole pass began after the
    cursor was taken. The event a "nothing was wiped" check must wait for, instead of sleeping
    through reconcile periods and hoping they ran."""
    return wait_for(lambda: len([line for line in journal_since(lab, node, cursor)
                                 if CPU_MANAGER_RECONCILED in line]) >= count,
                    timeout, "%d CPU manager reconcile passes on %s" % (count, node), interval=1)


def assert_lab_gone(lab):
    """Nothing of the lab may be left: processes, cgroups, mounts, directories."""
    assert not cgroups.lab_procs(lab.name), "lab %s left processes %s" % (lab.name, cgroups.lab_procs(lab.name))
    assert not cgroups.leftover(lab.name), "lab %s left cgroups %s" % (lab.name, cgroups.leftover(lab.name))
    real = os.path.realpath(lab.dir)
    mounts = [m for m in mountpoints() if m == real or m.startswith(real + "/")]
    assert not mounts, "lab %s left mounts %s" % (lab.name, mounts)
    assert not os.path.exists(lab.dir), "lab %s left %s" % (lab.name, lab.dir)
    for name in os.listdir("/run/systemd/nspawn/propagate") if os.path.isdir("/run/systemd/nspawn/propagate") else []:
        assert not name.startswith("kgl-%s-" % lab.name), "lab %s left nspawn dir %s" % (lab.name, name)


@pytest.fixture(scope="module")
def lab_factory(tmp_path_factory):
    require_root()
    root = str(tmp_path_factory.mktemp("labroot"))
    started = []

    def make(profile, name=None, settle=True):
        name = name or "t%d%d" % (os.getpid() % 100000, len(started))
        path = os.path.join(root, "%s-profile.yml" % name)
        with open(path, "w") as f:
            yaml.safe_dump(profile, f, sort_keys=False)
        lab = Lab(name, root=os.path.join(root, "labs"))
        started.append(lab)
        lab.up(path, settle=settle)
        workdir = os.path.join(root, "%s-work" % name)
        os.makedirs(workdir, exist_ok=True)
        return LabHandle(lab, workdir)

    yield make
    errors = []
    for lab in started:
        try:
            lab.down()
            assert_lab_gone(lab)
        except Exception as exc:  # tear down every lab, then report
            errors.append("%s: %s" % (lab.name, exc))
    assert not errors, "lab teardown failed: %s" % "; ".join(errors)
