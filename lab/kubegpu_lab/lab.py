"""A lab: N booted nodes from a profile, the Kubernetes API double, inventory and kubeconfig.

State lives in ``<root>/<name>/`` (root: ``$KUBEGPU_LAB_ROOT`` or /var/lib/kubegpu-lab):

    lab.json       ports, profile, nodes, API double pid (written by ``up``)
    lock           flock held by every command that changes the lab
    ssh/           the lab's root ssh key (id_ed25519)
    api/           the API double's state dir (state.json, history.jsonl, kubeconfig, CA)
    inventory.yml  Ansible inventory of the nodes (see docs/lab.md for the variables)
    kubeconfig     kubeconfig of the API double (token + CA)
    ssh_config     ``ssh -F ssh_config <node>`` for humans
    nodes/<node>/  see node.py

The image cache (debootstrap base, fake package repository) is shared by every lab under
``$KUBEGPU_LAB_CACHE`` or /var/cache/kubegpu-lab.
"""
import copy
import os
import shutil
import signal
import subprocess
import sys
import time

import yaml

from . import base, cgroups, hostenv, packages, paths, profiles
from .node import Node
from .util import (LabError, file_lock, kill_quiet, log, mountpoints, pick_ports, pid_alive, proc_cmdline, read_json,
                   umount_tree, write_file, write_json)

DEFAULT_ROOT = "/var/lib/kubegpu-lab"
DEFAULT_CACHE = "/var/cache/kubegpu-lab"
SSH_PORT_BASE = 22200
NAMESPACES = ("default", "kube-system", "kube-node-lease", "kube-public")
SETTLE_TIMEOUT = 180


def lab_root():
    return os.environ.get("KUBEGPU_LAB_ROOT", DEFAULT_ROOT)


def cache_root():
    return os.environ.get("KUBEGPU_LAB_CACHE", DEFAULT_CACHE)


def reserve_ports(cache, owner, count):
    """Reserve ``count`` free loopback ports for the lab at ``owner`` in a registry shared by
    every lab on the machine (labs under other roots included), so concurrent labs never pick
    the same ports before their sshd has bound them."""
    path = os.path.join(cache, "ports.json")
    with file_lock(path + ".lock", what="port registry"):
        reg = {int(k): v for k, v in (read_json(path) or {}).items() if os.path.isdir(v)}
        ports = pick_ports(count, SSH_PORT_BASE, taken=set(reg))
        for p in ports:
            reg[p] = owner
        write_json(path, {str(k): v for k, v in sorted(reg.items())})
    return ports


def release_ports(cache, owner):
    path = os.path.join(cache, "ports.json")
    if not os.path.exists(path):
        return
    with file_lock(path + ".lock", what="port registry"):
        reg = read_json(path) or {}
        write_json(path, {k: v for k, v in reg.items() if v != owner and os.path.isdir(v)})


def all_labs(root=None):
    root = root or lab_root()
    if not os.path.isdir(root):
        return []
    return sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)) and not d.startswith("."))


class Lab(object):
    def __init__(self, name, root=None):
        if not profiles.NAME_RE.match(name):
            raise LabError("lab name %r must be a DNS label of at most 32 characters" % name)
        self.name = name
        self.root = root or lab_root()
        self.dir = os.path.join(self.root, name)
        self.state_path = os.path.join(self.dir, "lab.json")
        self.state = read_json(self.state_path)
        self.key_path = os.path.join(self.dir, "ssh", "id_ed25519")
        self.api_dir = os.path.join(self.dir, "api")

    # --- helpers ----------------------------------------------------------------------------

    def exists(self):
        return self.state is not None

    def lock(self, timeout=None):
        os.makedirs(self.dir, exist_ok=True)
        return file_lock(os.path.join(self.dir, "lock"), timeout=timeout)

    def save(self):
        write_json(self.state_path, self.state)

    def nodes(self):
        return [Node(self, n) for n in (self.state or {}).get("nodes", {})]

    def node(self, name):
        if not self.state or name not in self.state["nodes"]:
            known = ", ".join(sorted((self.state or {}).get("nodes", {})))
            raise LabError("lab %s has no node %r (nodes: %s)" % (self.name, name, known))
        return Node(self, name)

    @property
    def inventory_path(self):
        return os.path.join(self.dir, "inventory.yml")

    @property
    def kubeconfig_path(self):
        return os.path.join(self.dir, "kubeconfig")

    def api_info(self):
        info = read_json(os.path.join(self.api_dir, "server.json"))
        if info and pid_alive(info.get("pid")):
            return info
        return None

    def api_client(self):
        from .apidouble.control import DoubleClient
        info = self.api_info()
        if info is None:
            raise LabError("the API double of lab %s is not running (kubegpu-lab up repairs it)" % self.name)
        return DoubleClient.from_state_dir(self.api_dir)

    # --- API double -------------------------------------------------------------------------

    def start_api(self, seed_docs):
        if self.api_info():
            return self.api_info()
        os.makedirs(self.api_dir, mode=0o700, exist_ok=True)
        seed_path = os.path.join(self.dir, "seed.yaml")
        with open(seed_path, "w") as f:
            yaml.safe_dump_all(seed_docs, f, sort_keys=False)
        env = dict(os.environ)
        env["PYTHONPATH"] = paths.IMPORT_ROOT
        cmd = [sys.executable, "-m", "kubegpu_lab.apidouble", "--state-dir", self.api_dir,
               "--port", str(self.state["api_port"]), "--seed", seed_path]
        log_path = os.path.join(self.api_dir, "apidouble.log")
        info_path = os.path.join(self.api_dir, "server.json")
        if os.path.exists(info_path):
            os.unlink(info_path)
        with open(log_path, "ab") as logf, open(os.devnull, "rb") as devnull:
            proc = subprocess.Popen(cmd, stdin=devnull, stdout=logf, stderr=logf, env=env, cwd="/",
                                    start_new_session=True, close_fds=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                with open(log_path, "rb") as f:
                    tail = f.read()[-3000:].decode("utf-8", "replace")
                raise LabError("the API double exited with %s:\n%s" % (proc.returncode, tail))
            info = read_json(info_path) if os.path.exists(info_path) else None
            if info and info.get("pid") == proc.pid:
                self.state["api_pid"] = proc.pid
                self.save()
                return info
            time.sleep(0.1)
        kill_quiet(proc.pid, signal.SIGKILL)
        raise LabError("the API double did not come up within 60 s (log %s)" % log_path)

    def stop_api(self, timeout=20):
        info = read_json(os.path.join(self.api_dir, "server.json")) or {}
        pid = info.get("pid") or (self.state or {}).get("api_pid")
        if pid and pid_alive(pid):
            cmdline = proc_cmdline(pid)
            if "kubegpu_lab.apidouble" not in cmdline or self.api_dir not in cmdline:
                return  # the pid was reused by something else: not ours
            kill_quiet(pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and pid_alive(pid):
                time.sleep(0.1)
            if pid_alive(pid):
                kill_quiet(pid, signal.SIGKILL)

    def seed_docs(self, profile):
        """Namespaces + the profile's cluster objects. Pods bound to nodes are placed later,
        once their node advertises its GPUs (as the scheduler would bind them)."""
        docs = []
        namespaces = set(NAMESPACES)
        body = list(copy.deepcopy(profile["manifests"]))
        for spec in profile["nodes"]:
            for pod in spec["pods"] + spec["late_pods"]:
                namespaces.add(profiles.pod_manifest(spec, pod)["metadata"]["namespace"])
        for doc in body:
            ns = (doc.get("metadata") or {}).get("namespace")
            if ns:
                namespaces.add(ns)
        for ns in sorted(namespaces):
            if not any(d.get("kind") == "Namespace" and d["metadata"]["name"] == ns for d in body):
                docs.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        return docs + body

    # --- up ---------------------------------------------------------------------------------

    def up(self, profile_name="demo", node_count=None, install=True, settle=True):
        hostenv.ensure_host(install=install)
        with self.lock():
            self.state = read_json(self.state_path)
            if self.state is None:
                self._create(profile_name, node_count)
            else:
                log("lab %s exists: checking and repairing it", self.name)
            self._start_all(settle=settle)
            self.write_access_files()
        return self.status()

    def _create(self, profile_name, node_count):
        profile = profiles.load_profile(profile_name, node_count)
        cache = cache_root()
        base_rootfs = base.ensure_base(cache)
        repo = packages.ensure_repo(cache)
        cat = packages.catalog()
        ports = reserve_ports(cache, self.dir, len(profile["nodes"]) + 1)
        self.state = {"name": self.name, "profile": profile["name"], "profile_source": profile["source"],
                      "created": time.time(), "base": base_rootfs, "repo": repo, "api_port": ports[0],
                      "nodes": {}, "specs": {}}
        for spec, port in zip(profile["nodes"], ports[1:]):
            self.state["nodes"][spec["name"]] = {"ssh_port": port, "seed": spec.get("seed", ""),
                                                 "gpus": spec["gpus"]["count"], "setup_done": False}
            self.state["specs"][spec["name"]] = spec
        os.makedirs(os.path.dirname(self.key_path), mode=0o700, exist_ok=True)
        if not os.path.exists(self.key_path):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "kubegpu-lab-%s" % self.name,
                            "-f", self.key_path], check=True)
        self.save()
        api = self.start_api(self.seed_docs(profile))
        with open(api["token_file"]) as f:
            token = f.read().strip()
        api_view = {"url": api["url"], "token": token, "ca_file": api["ca_file"]}
        with open(self.key_path + ".pub") as f:
            pubkey = f.read()
        started = time.monotonic()
        for node in self.nodes():
            t0 = time.monotonic()
            node.mount(base_rootfs)
            node.provision(self.state["specs"][node.name], api_view, pubkey, cat)
            self.state["nodes"][node.name]["provisioned"] = True
            self.save()
            log("node %s provisioned in %.1f s", node.name, time.monotonic() - t0)
        self.state["provision_seconds"] = round(time.monotonic() - started, 1)
        self.state["node_pods"] = {spec["name"]: [o for p in spec["pods"] for o in profiles.pod_objects(spec, p)]
                                   for spec in profile["nodes"]}
        self.state["late_pods"] = [o for spec in profile["nodes"] for p in spec["late_pods"]
                                   for o in profiles.pod_objects(spec, p)]
        self.save()

    def _start_all(self, settle=True):
        self.start_api([])
        t0 = time.monotonic()
        for node in self.nodes():
            node.mount(self.state["base"])
            if node.start():
                log("node %s booting (ssh 127.0.0.1:%d)", node.name, node.ssh_port)
        for node in self.nodes():
            node.wait_ssh()
        self.state["boot_seconds"] = round(time.monotonic() - t0, 1)
        self.save()
        if not settle:
            return
        nodes = self.nodes()
        fresh = [n for n in nodes if not self.state["nodes"][n.name].get("setup_done")]
        self.wait_ready(nodes)
        client = self.api_client()
        for node in fresh:
            pods = self.state.get("node_pods", {}).get(node.name) or []
            if pods:
                client.load(pods)
        self.wait_pods_started([n.name for n in fresh])
        for node in fresh:
            node.ssh(["sh", "-c", "mkdir -p /var/lib/kubegpu-lab && date +%s > /var/lib/kubegpu-lab/pods-placed"])
        self.wait_events(nodes)
        # one-time setup reboots (e.g. the node whose GPUs change UUIDs at reboot)
        rebooted = []
        for node in fresh:
            for count in range(int(self.state["specs"][node.name].get("setup", {}).get("reboots", 0))):
                log("node %s: setup reboot %d", node.name, count + 1)
                node.reboot()
                rebooted.append(node)
        if rebooted:
            self.wait_ready(rebooted)
            self.wait_events(rebooted)
        late = self.state.get("late_pods") or []
        if late and not self.state.get("late_created"):
            client.load(late)
            self.state["late_created"] = True
        for node in fresh:
            self.state["nodes"][node.name]["setup_done"] = True
        self.save()

    def _get_node(self, client, name):
        code, obj = client.request("GET", "/api/v1/nodes/%s" % name)
        return obj if code == 200 else None

    def wait_ready(self, nodes, timeout=SETTLE_TIMEOUT):
        """Ready in the API with the node's current boot ID and, for GPU nodes, GPUs advertised
        by the device plugin (allocatable nvidia.com/* > 0)."""
        client = self.api_client()
        deadline = time.monotonic() + timeout
        boot_ids = {n.name: n.boot_id() for n in nodes}
        pending = {n.name for n in nodes}
        while pending and time.monotonic() < deadline:
            for name in sorted(pending):
                obj = self._get_node(client, name)
                if obj is None:
                    continue
                st = obj.get("status") or {}
                ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                            for c in st.get("conditions") or [])
                if not ready or (st.get("nodeInfo") or {}).get("bootID") != boot_ids[name]:
                    continue
                gpus = self.state["nodes"][name].get("gpus", 0)
                if gpus and not any(k.startswith("nvidia.com/") and str(v) not in ("0", "")
                                    for k, v in (st.get("allocatable") or {}).items()):
                    continue
                pending.discard(name)
            if pending:
                time.sleep(0.5)
        if pending:
            log("warning: nodes not Ready with GPUs advertised after %ds: %s", timeout, ", ".join(sorted(pending)))
        return not pending

    def wait_pods_started(self, node_names, timeout=90):
        """Every pod bound to the nodes has left Pending (Running, or failed admission)."""
        client = self.api_client()
        deadline = time.monotonic() + timeout
        left = []
        while time.monotonic() < deadline:
            left = []
            for name in node_names:
                code, obj = client.request("GET", "/api/v1/pods?fieldSelector=spec.nodeName%%3D%s" % name)
                for pod in ((obj or {}).get("items") or []) if code == 200 else []:
                    if (pod.get("status") or {}).get("phase") in (None, "Pending"):
                        left.append(pod["metadata"]["name"])
            if not left:
                return True
            time.sleep(0.5)
        log("warning: pods still Pending after %ds: %s", timeout, ", ".join(sorted(left)))
        return False

    def wait_events(self, nodes, timeout=SETTLE_TIMEOUT):
        """The node's kubegpu-lab-events.service has finished (late uvm, MIG split)."""
        deadline = time.monotonic() + timeout
        pending = {n.name: n for n in nodes}
        while pending and time.monotonic() < deadline:
            for name, node in list(pending.items()):
                if node.ssh(["test", "-e", "/run/kubegpu-lab/events-done"], check=False,
                            timeout=15).returncode == 0:
                    pending.pop(name)
            if pending:
                time.sleep(0.5)
        if pending:
            log("warning: node events not finished after %ds: %s", timeout, ", ".join(sorted(pending)))

    # --- access files -----------------------------------------------------------------------

    def write_access_files(self):
        api_kubeconfig = os.path.join(self.api_dir, "kubeconfig")
        if os.path.exists(api_kubeconfig):
            shutil.copyfile(api_kubeconfig, self.kubeconfig_path)
            os.chmod(self.kubeconfig_path, 0o600)
        hosts = {}
        for node in self.nodes():
            info = self.state["nodes"][node.name]
            spec = self.state["specs"][node.name]
            hosts[node.name] = {
                "ansible_port": info["ssh_port"],
                "kubegpu_node_name": node.name,
                "kubegpu_lab_seed": info.get("seed") or "",
                "kubegpu_lab_gpu_count": spec["gpus"]["count"],
                "kubegpu_lab_memory_bytes": spec["memory_bytes"],
            }
        inv = {"all": {
            "vars": {
                "ansible_host": "127.0.0.1",
                "ansible_user": "root",
                "ansible_ssh_private_key_file": self.key_path,
                "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null "
                                           "-o LogLevel=ERROR",
                "ansible_python_interpreter": "/usr/bin/python3",
                "kubegpu_kubeconfig": self.kubeconfig_path,
                "kubegpu_lab_name": self.name,
                "kubegpu_proc_path": "/run/kubegpu-lab/proc",
                # the node's own PCI tree and kernel log (docs/lab.md, "GPU hardware faults")
                "kubegpu_sys_path": "/run/kubegpu-lab/sys",
                "kubegpu_kmsg_path": "/run/kubegpu-lab/kmsg",
                "kubegpu_dev_path": "/dev",
                "kubegpu_cgroup_root": "/run/kubegpu-lab/cgroup",
                "kubegpu_cgroup_mode": "list",
                # the lab's "kernel" (driver load, device nodes) runs as this unit at boot: the
                # boot-time checkpoint check orders itself after it, as after the driver on a node
                "kubegpu_checkpoint_guard_after_units": ["kubegpu-lab-kernel.service", "systemd-modules-load.service",
                                                         "nvidia-persistenced.service", "nvidia-fabricmanager.service",
                                                         "nvidia-mig-manager.service"],
            },
            "children": {"gpu_nodes": {"hosts": hosts}},
        }}
        header = ("# Generated by kubegpu-lab for lab %s (profile %s). Regenerated by every 'up'.\n"
                  % (self.name, self.state.get("profile")))
        write_file(self.inventory_path, header + yaml.safe_dump(inv, sort_keys=False))
        lines = []
        for node in self.nodes():
            lines += ["Host %s" % node.name, "  HostName 127.0.0.1", "  Port %d" % node.ssh_port, "  User root",
                      "  IdentityFile %s" % self.key_path, "  StrictHostKeyChecking no",
                      "  UserKnownHostsFile /dev/null", "  LogLevel ERROR", ""]
        write_file(os.path.join(self.dir, "ssh_config"), "\n".join(lines))

    # --- down -------------------------------------------------------------------------------

    def down(self):
        if not os.path.isdir(self.dir):
            return {"removed": False, "lab": self.name}
        hostenv.require_root()
        with self.lock():
            self.state = read_json(self.state_path) or {"nodes": {}}
            names = set(self.state.get("nodes", {}))
            nodes_dir = os.path.join(self.dir, "nodes")
            if os.path.isdir(nodes_dir):
                names |= set(os.listdir(nodes_dir))
            self.state.setdefault("nodes", {})
            for name in sorted(names):
                self.state["nodes"].setdefault(name, {"ssh_port": 0})
                node = Node(self, name)
                if os.path.isdir(node.dir):
                    node.destroy()
                else:
                    node.stop()
            self.stop_api()
            left = cgroups.lab_procs(self.name)
            if left:
                raise LabError("lab %s: processes still running: %s" % (self.name, sorted(left)))
            cgroups.remove(self.name)
            umount_tree(self.dir)
            busy = [m for m in mountpoints() if m.startswith(os.path.realpath(self.dir) + "/")]
            if busy:
                raise LabError("lab %s: still mounted: %s" % (self.name, busy))
        shutil.rmtree(self.dir)
        release_ports(cache_root(), self.dir)
        return {"removed": True, "lab": self.name}

    # --- status -----------------------------------------------------------------------------

    def status(self, memory=False):
        if self.state is None:
            return {"lab": self.name, "exists": False}
        api = self.api_info()
        out = {"lab": self.name, "exists": True, "dir": self.dir, "profile": self.state.get("profile"),
               "inventory": self.inventory_path, "kubeconfig": self.kubeconfig_path,
               "ssh_key": self.key_path,
               "api": {"running": api is not None, "url": api["url"] if api else None,
                       "pid": api["pid"] if api else None},
               "boot_seconds": self.state.get("boot_seconds"), "nodes": {}}
        for node in self.nodes():
            st = node.supervisor_state()
            entry = {"running": node.running(), "ssh_port": node.ssh_port, "boots": st.get("boots"),
                     "seed": self.state["nodes"][node.name].get("seed")}
            if memory and entry["running"]:
                entry["memory_bytes"] = node.memory()
            out["nodes"][node.name] = entry
        return out
