"""The fake kubelet of a kubegpu lab node.

It does, through the real Kubernetes REST API of the lab's API double, what the parts of the
real kubelet the collection depends on do:

* reads the KubeletConfiguration (``--config``) and the flags that override it; refuses to
  start like the real one on a broken config, on a CPU manager policy that differs from
  ``cpu_manager_state``, or on the static policy without reserved CPUs;
* heartbeats: a Lease in kube-node-lease every 10 s and the Node status (Ready, bootID from
  /proc/sys/kernel/random/boot_id, capacity/allocatable incl. nvidia.com/gpu and MIG
  resources from the device plugin, memory allocatable = capacity - reservations - hard
  eviction threshold) from a thread of its own, so the node stays Ready while the pod sync
  loop is blocked, as with the real kubelet;
* runs the pods bound to the node (sandbox + containers through ``runtime``) one at a time in
  its sync loop; admission allocates devices from the device plugin with GetPreferredAllocation
  and Allocate and **no timeout** (kubelet's devicemanager uses context.Background()), so a
  hung plugin stops every later pod on the node from being admitted or deleted;
* keeps ``device-plugins/kubelet_internal_checkpoint`` in the v2 format (PodDeviceEntries with
  per-NUMA DeviceIDs and AllocResp, RegisteredDevices) and reuses the checkpointed allocation
  of a pod whose containers it restarts (after a reboot too), as the real device manager does;
* graceful deletion: stops the containers, releases the devices, deletes the pod with grace 0;
* the static CPU manager's reconcile loop updates every container's cgroup through the runtime
  every ``cpuManagerReconcilePeriod``, which rewrites devices.list from the runtime's list.

Checksum: the real one is FNV-32a over a go-spew dump of the Go struct; this kubelet uses
FNV-32a over the canonical JSON of ``Data`` (documented in docs/lab.md). A checkpoint whose
checksum does not match is ignored with the real kubelet's log line.
"""
import base64
import http.client
import json
import os
import random
import re
import signal
import socket
import ssl
import threading
import time
import traceback
import urllib.parse

import yaml

from . import runtime
from .common import boot_id, klog, read_json, write_atomic

VERSION_DEFAULT = "v1.31.4"
NODE_CONFIG = "/etc/kubegpu-lab/node.json"
LEASE_NS = "kube-node-lease"
REGISTERED_MARK = "/run/kubegpu-lab/plugin-registered"
SYNCED = "/run/kubegpu-lab/kubelet-synced"
EXTENDED_PREFIX = "nvidia.com/"


class ConfigError(Exception):
    pass


class AdmissionError(Exception):
    def __init__(self, reason, message):
        Exception.__init__(self, message)
        self.reason = reason


# ----------------------------------------------------------------------------- quantities

_UNITS = {"Ki": 1024, "Mi": 1024 ** 2, "Gi": 1024 ** 3, "Ti": 1024 ** 4, "Pi": 1024 ** 5,
          "k": 1000, "K": 1000, "M": 1000 ** 2, "G": 1000 ** 3, "T": 1000 ** 4, "P": 1000 ** 5,
          "m": 0.001, "": 1}


def quantity(value):
    """Kubernetes quantity -> float (bytes or cores)."""
    if isinstance(value, (int, float)):
        return float(value)
    m = re.match(r"^\s*([0-9.]+)\s*([A-Za-z]*)\s*$", str(value))
    if not m or m.group(2) not in _UNITS:
        raise ConfigError("invalid quantity %r" % (value,))
    return float(m.group(1)) * _UNITS[m.group(2)]


def duration(value, default):
    if value in (None, ""):
        return default
    m = re.match(r"^(?:(\d+)h)?(?:(\d+)m(?!s))?(?:(\d+(?:\.\d+)?)s)?(?:(\d+)ms)?$", str(value))
    if not m or not any(m.groups()):
        raise ConfigError("invalid duration %r" % (value,))
    h, mi, s, ms = m.groups()
    return int(h or 0) * 3600 + int(mi or 0) * 60 + float(s or 0) + int(ms or 0) / 1000.0


def iso(t=None):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t if t is not None else time.time()))


def iso_micro(t=None):
    t = time.time() if t is None else t
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + ".%06dZ" % int((t % 1) * 1e6)


# ----------------------------------------------------------------------------- API client

class Api(object):
    def __init__(self, kubeconfig_path):
        with open(kubeconfig_path) as f:
            kc = yaml.safe_load(f)
        ctx_name = kc.get("current-context")
        ctx = next(c["context"] for c in kc["contexts"] if c["name"] == ctx_name)
        cluster = next(c["cluster"] for c in kc["clusters"] if c["name"] == ctx["cluster"])
        user = next(u["user"] for u in kc["users"] if u["name"] == ctx["user"])
        self.url = urllib.parse.urlsplit(cluster["server"])
        self.token = user.get("token")
        if not self.token and user.get("tokenFile"):
            with open(user["tokenFile"]) as f:
                self.token = f.read().strip()
        self.ctx = None
        if self.url.scheme == "https":
            self.ctx = ssl.create_default_context(cafile=cluster.get("certificate-authority"))
            if cluster.get("certificate-authority-data"):
                self.ctx.load_verify_locations(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
        self.local = threading.local()

    def _conn(self):
        conn = getattr(self.local, "conn", None)
        if conn is None:
            if self.ctx is not None:
                conn = http.client.HTTPSConnection(self.url.hostname, self.url.port or 443, timeout=30,
                                                   context=self.ctx)
            else:
                conn = http.client.HTTPConnection(self.url.hostname, self.url.port or 80, timeout=30)
            self.local.conn = conn
        return conn

    def request(self, method, path, body=None, content_type="application/json"):
        headers = {"Authorization": "Bearer %s" % self.token, "Accept": "application/json",
                   "User-Agent": "kubelet/%s (linux/amd64) kubegpu-lab" % VERSION_DEFAULT}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        for attempt in (1, 2):
            conn = self._conn()
            try:
                conn.request(method, path, body=data, headers=headers)
                resp = conn.getresponse()
                raw = resp.read()
                break
            except (OSError, http.client.HTTPException):
                conn.close()
                self.local.conn = None
                if attempt == 2:
                    raise
        try:
            obj = json.loads(raw.decode()) if raw.strip() else None
        except ValueError:
            obj = raw.decode("utf-8", "replace")
        return resp.status, obj


# ----------------------------------------------------------------------------- checkpoint

def fnv32a(data):
    h = 0x811C9DC5
    for b in data:
        h ^= b
        h = (h * 0x01000193) & 0xFFFFFFFF
    return h


def checkpoint_checksum(data):
    return fnv32a(json.dumps(data, sort_keys=True, separators=(",", ":")).encode())


def read_checkpoint(path):
    """(pod_entries, registered) from the checkpoint; the real kubelet's leniency on errors."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except FileNotFoundError:
        return [], {}
    except (OSError, ValueError) as exc:
        klog("E", "Continue after failing to read checkpoint file. Device allocation info may NOT "
                  "be up-to-date", err=str(exc))
        return [], {}
    data = doc.get("Data") or {}
    if doc.get("Checksum") != checkpoint_checksum(data):
        klog("E", "Continue after failing to read checkpoint file. Device allocation info may NOT "
                  "be up-to-date", err="checkpoint is corrupted")
        return [], {}
    entries = []
    for e in data.get("PodDeviceEntries") or []:
        ids = e.get("DeviceIDs")
        if isinstance(ids, list):  # pre-1.20 format
            ids = {"-1": ids}
        entries.append({"PodUID": e.get("PodUID"), "ContainerName": e.get("ContainerName"),
                        "ResourceName": e.get("ResourceName"), "DeviceIDs": ids or {},
                        "AllocResp": e.get("AllocResp", "")})
    return entries, data.get("RegisteredDevices") or {}


def write_checkpoint(path, entries, registered):
    data = {"PodDeviceEntries": entries or None, "RegisteredDevices": registered}
    doc = {"Data": data, "Checksum": checkpoint_checksum(data)}
    write_atomic(path, json.dumps(doc, separators=(",", ":")), mode=0o644)


# ----------------------------------------------------------------------------- device manager

def _send(sock, obj):
    sock.sendall((json.dumps(obj) + "\n").encode())


class DeviceManager(object):
    def __init__(self, kubelet, plugin_dir):
        self.kubelet = kubelet
        self.dir = plugin_dir
        self.sock_path = os.path.join(plugin_dir, "kubelet.sock")
        self.ckpt_path = os.path.join(plugin_dir, "kubelet_internal_checkpoint")
        self.lock = threading.RLock()
        self.endpoints = {}    # resource -> {"socket": path, "options": {...}, "alive": bool}
        self.healthy = {}      # resource -> set(ids)
        self.registered = {}   # resource -> list of ids as last registered (checkpoint)
        self.entries = []      # checkpoint PodDeviceEntries

    def start(self):
        os.makedirs(self.dir, exist_ok=True)
        entries, registered = read_checkpoint(self.ckpt_path)
        self.entries = entries
        self.registered = dict(registered)
        for resource in registered:
            # capacity stays zero until the plugin registers again (kubelet readCheckpoint)
            self.healthy[resource] = set()
        if os.path.exists(self.sock_path):
            os.unlink(self.sock_path)
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(self.sock_path)
        srv.listen(16)
        threading.Thread(target=self._serve, args=(srv,), daemon=True, name="registration").start()

    def _serve(self, srv):
        while True:
            conn, _addr = srv.accept()
            threading.Thread(target=self._register, args=(conn,), daemon=True).start()

    def _register(self, conn):
        with conn, conn.makefile("r") as f:
            try:
                req = json.loads(f.readline())
            except ValueError:
                return
            if req.get("method") != "Register" or req.get("version") != "v1beta1":
                _send(conn, {"error": "unsupported request %r" % req.get("method")})
                return
            endpoint = os.path.join(self.dir, req["endpoint"])
            resources = req.get("resources") or {}
            klog("I", "Got registration request from device plugin with resource", resourceName=",".join(sorted(resources)))
            with self.lock:
                for resource, ids in resources.items():
                    self.endpoints[resource] = {"socket": endpoint, "options": req.get("options") or {},
                                                "alive": True}
                    self.healthy[resource] = set(ids)
                    self.registered[resource] = sorted(ids)
                self._write()
            _send(conn, {})
        try:
            write_atomic(REGISTERED_MARK, "%s\n" % ",".join(sorted(resources)))
        except OSError:
            pass
        threading.Thread(target=self._watch, args=(endpoint, sorted(resources)), daemon=True).start()
        self.kubelet.node_changed.set()

    def _watch(self, endpoint, resources):
        """ListAndWatch stream: when the plugin goes away its devices turn unhealthy."""
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(endpoint)
            _send(s, {"method": "ListAndWatch"})
            while s.recv(4096):
                pass
        except OSError:
            pass
        with self.lock:
            for r in resources:
                ep = self.endpoints.get(r)
                if ep and ep["socket"] == endpoint:
                    ep["alive"] = False
                    self.healthy[r] = set()
        klog("I", "Endpoint stopped: device plugin went away", resources=",".join(resources))
        self.kubelet.node_changed.set()

    def _write(self):
        write_checkpoint(self.ckpt_path, self.entries, {k: sorted(v) for k, v in self.registered.items()})

    def capacity(self):
        with self.lock:
            cap = {r: len(self.registered.get(r, [])) for r in self.registered}
            alloc = {r: len(self.healthy.get(r, set())) for r in self.registered}
        return cap, alloc

    def allocated_ids(self, resource):
        out = set()
        for e in self.entries:
            if e["ResourceName"] == resource:
                for ids in e["DeviceIDs"].values():
                    out.update(ids)
        return out

    def entry(self, pod_uid, container, resource):
        for e in self.entries:
            if (e["PodUID"], e["ContainerName"], e["ResourceName"]) == (pod_uid, container, resource):
                return e
        return None

    def _rpc(self, endpoint, req):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(endpoint)   # no timeout: the kubelet uses context.Background()
        with s, s.makefile("r") as f:
            _send(s, req)
            line = f.readline()
        if not line:
            raise AdmissionError("UnexpectedAdmissionError", "rpc error: code = Unavailable desc = "
                                 "error reading from server: EOF")
        reply = json.loads(line)
        if reply.get("error"):
            raise AdmissionError("UnexpectedAdmissionError", "rpc error: code = Unknown desc = %s"
                                 % reply["error"])
        return reply

    def allocate(self, pod, container, resource, count):
        """Device allocation for one container (blocking RPCs, like devicemanager.Allocate)."""
        uid = pod["metadata"]["uid"]
        with self.lock:
            if self.entry(uid, container["name"], resource):
                return  # already allocated (checkpoint): reused as is
            if resource not in self.healthy:
                raise AdmissionError("UnexpectedAdmissionError",
                                     "Allocate failed due to can't allocate unregistered device %s, "
                                     "which is unexpected" % resource)
            free = sorted(self.healthy[resource] - self.allocated_ids(resource))
            if len(free) < count:
                raise AdmissionError("UnexpectedAdmissionError",
                                     "Allocate failed due to requested number of devices unavailable "
                                     "for %s. Requested: %d, Available: %d, which is unexpected"
                                     % (resource, count, len(free)))
            ep = self.endpoints.get(resource)
        if ep is None or not ep["alive"]:
            raise AdmissionError("UnexpectedAdmissionError",
                                 "Allocate failed due to endpoint for %s not available, which is "
                                 "unexpected" % resource)
        chosen = free[:count]
        if ep["options"].get("get_preferred_allocation_available"):
            klog("I", "Issuing a GetPreferredAllocation call for container", containerName=container["name"],
                 pod="%s/%s" % (pod["metadata"]["namespace"], pod["metadata"]["name"]))
            reply = self._rpc(ep["socket"], {"method": "GetPreferredAllocation", "resource": resource,
                                             "available": free, "must_include": [], "size": count})
            pref = [d for d in reply.get("device_ids") or [] if d in free]
            if len(pref) == count:
                chosen = pref
        klog("I", "Making allocation request for device plugin", devices=",".join(chosen), resourceName=resource)
        resp = self._rpc(ep["socket"], {"method": "Allocate", "resource": resource, "device_ids": chosen})
        with self.lock:
            self.entries.append({"PodUID": uid, "ContainerName": container["name"], "ResourceName": resource,
                                 "DeviceIDs": {"0": chosen},
                                 "AllocResp": base64.b64encode(json.dumps(resp, sort_keys=True).encode()).decode()})
            self._write()

    def run_options(self, pod_uid, container_name):
        """envs + device specs for a container from its (checkpointed) allocations."""
        envs, devices = {}, []
        with self.lock:
            for e in self.entries:
                if e["PodUID"] == pod_uid and e["ContainerName"] == container_name:
                    try:
                        resp = json.loads(base64.b64decode(e["AllocResp"]).decode())
                    except (ValueError, TypeError):
                        resp = {}
                    envs.update(resp.get("envs") or {})
                    devices += resp.get("devices") or []
        return envs, devices

    def release(self, pod_uid):
        with self.lock:
            before = len(self.entries)
            self.entries = [e for e in self.entries if e["PodUID"] != pod_uid]
            if len(self.entries) != before:
                self._write()

    def prune(self, active_uids):
        """UpdateAllocatedDevices: forget allocations of pods that are gone."""
        with self.lock:
            before = len(self.entries)
            self.entries = [e for e in self.entries if e["PodUID"] in active_uids]
            if len(self.entries) != before:
                self._write()


# ----------------------------------------------------------------------------- kubelet

def parse_flags(argv):
    flags = {}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("--"):
            k, eq, v = a[2:].partition("=")
            if not eq:
                if i + 1 < len(argv) and not argv[i + 1].startswith("--") and k not in ("version",):
                    v = argv[i + 1]
                    i += 1
                else:
                    v = "true"
            flags[k] = v
        elif a.startswith("-v="):
            flags["v"] = a[3:]
        i += 1
    return flags


def _kv(text):
    out = {}
    for part in (text or "").split(","):
        if "=" in part:
            k, v = part.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def _eviction(text):
    out = {}
    for part in (text or "").split(","):
        m = re.match(r"^\s*([a-z.A-Z]+)\s*<\s*(\S+)\s*$", part)
        if m:
            out[m.group(1)] = m.group(2)
    return out


class Kubelet(object):
    def __init__(self, flags):
        self.flags = flags
        self.verbosity = int(flags.get("v", "0") or 0)
        self.root = flags.get("root-dir", "/var/lib/kubelet")
        self.node_cfg = read_json(NODE_CONFIG, {})
        self.name = flags.get("hostname-override") or socket.gethostname()
        self.version = self.node_cfg.get("kubelet_version", VERSION_DEFAULT)
        self.config = self.load_config(flags.get("config"))
        self.api = Api(flags.get("kubeconfig", "/etc/kubernetes/kubelet.conf"))
        self.devices = DeviceManager(self, os.path.join(self.root, "device-plugins"))
        self.pods = {}                 # uid -> record
        self.node_changed = threading.Event()
        self.stopping = False
        self.lock = threading.RLock()
        self.node_uid = None
        self.pod_ips = {}

    # --- config ---------------------------------------------------------------------------

    def load_config(self, path):
        cfg = {}
        if path:
            try:
                with open(path) as f:
                    cfg = yaml.safe_load(f) or {}
            except OSError as exc:
                raise ConfigError("failed to load Kubelet config file %s, error: %s" % (path, exc))
            except yaml.YAMLError as exc:
                raise ConfigError("failed to load Kubelet config file %s, error failed to decode: %s" % (path, exc))
            if not isinstance(cfg, dict) or cfg.get("kind") != "KubeletConfiguration":
                raise ConfigError("failed to load Kubelet config file %s, error: kind is not "
                                  "KubeletConfiguration" % path)
        f = self.flags
        if "cgroup-driver" in f:
            cfg["cgroupDriver"] = f["cgroup-driver"]
        if "cpu-manager-policy" in f:
            cfg["cpuManagerPolicy"] = f["cpu-manager-policy"]
        if "system-reserved" in f:
            cfg["systemReserved"] = _kv(f["system-reserved"])
        if "kube-reserved" in f:
            cfg["kubeReserved"] = _kv(f["kube-reserved"])
        if "eviction-hard" in f:
            cfg["evictionHard"] = _eviction(f["eviction-hard"])
        if "max-pods" in f:
            cfg["maxPods"] = int(f["max-pods"])
        cfg.setdefault("cgroupDriver", "cgroupfs")
        cfg.setdefault("cpuManagerPolicy", "none")
        if cfg["cgroupDriver"] not in ("cgroupfs", "systemd"):
            raise ConfigError("invalid configuration: cgroupDriver %r" % cfg["cgroupDriver"])
        if cfg["cpuManagerPolicy"] not in ("none", "static"):
            raise ConfigError("invalid configuration: unknown CPU manager policy %r" % cfg["cpuManagerPolicy"])
        for key in ("systemReserved", "kubeReserved"):
            for k, v in (cfg.get(key) or {}).items():
                quantity(v)
        duration(cfg.get("cpuManagerReconcilePeriod"), 10)
        return cfg

    def check_cpu_manager(self):
        policy = self.config["cpuManagerPolicy"]
        path = os.path.join(self.root, "cpu_manager_state")
        state = read_json(path)
        if state and state.get("policyName") and state["policyName"] != policy:
            raise ConfigError(
                'failed to run Kubelet: failed to initialize top level QOS containers: could not '
                'restore state from checkpoint: configured policy "%s" differs from state checkpoint '
                'policy "%s", please drain this node and delete the CPU manager checkpoint file "%s" '
                'before restarting Kubelet' % (policy, state["policyName"], path))
        if policy == "static":
            reserved = 0.0
            for key in ("systemReserved", "kubeReserved"):
                reserved += quantity((self.config.get(key) or {}).get("cpu", 0))
            if self.config.get("reservedSystemCPUs"):
                reserved += 1
            if reserved <= 0:
                raise ConfigError("failed to run Kubelet: [cpumanager] unable to determine reserved CPU "
                                  "resources for static policy")
        cpus = int(self.node_cfg.get("cpus", os.cpu_count() or 1))
        doc = {"policyName": policy, "defaultCpuSet": "0-%d" % (cpus - 1) if policy == "static" else ""}
        doc["checksum"] = fnv32a(json.dumps(doc, sort_keys=True).encode())
        write_atomic(path, json.dumps(doc))

    def v(self, level):
        return self.verbosity >= level

    # --- node -----------------------------------------------------------------------------

    def capacity(self):
        mem = int(self.node_cfg.get("memory_bytes") or 0)
        if not mem:
            with open("/proc/meminfo") as f:
                mem = int(f.readline().split()[1]) * 1024
        cpus = int(self.node_cfg.get("cpus", os.cpu_count() or 1))
        cap = {"cpu": str(cpus), "memory": "%dKi" % (mem // 1024), "pods": str(self.config.get("maxPods", 110)),
               "ephemeral-storage": "%dKi" % (200 * 1024 * 1024), "hugepages-2Mi": "0", "hugepages-1Gi": "0"}
        alloc = dict(cap)
        reserved_mem = 0.0
        reserved_cpu = 0.0
        for key in ("systemReserved", "kubeReserved"):
            r = self.config.get(key) or {}
            reserved_mem += quantity(r.get("memory", 0))
            reserved_cpu += quantity(r.get("cpu", 0))
        eviction = self.config.get("evictionHard")
        if eviction is None:
            eviction = {"memory.available": "100Mi"}
        thr = eviction.get("memory.available")
        if thr:
            reserved_mem += mem * float(thr[:-1]) / 100 if str(thr).endswith("%") else quantity(thr)
        alloc["memory"] = "%dKi" % max(0, (mem - reserved_mem) // 1024)
        millis = int(cpus * 1000 - reserved_cpu * 1000)
        alloc["cpu"] = str(cpus) if millis == cpus * 1000 else "%dm" % max(0, millis)
        dcap, dalloc = self.devices.capacity()
        for r in dcap:
            cap[r] = str(dcap[r])
            alloc[r] = str(dalloc[r])
        return cap, alloc

    def node_labels(self):
        labels = {"kubernetes.io/hostname": self.name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                  "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64"}
        labels.update(self.node_cfg.get("labels") or {})
        labels.update(_kv(self.flags.get("node-labels", "")))
        return labels

    def node_status(self):
        cap, alloc = self.capacity()
        now = iso()
        try:
            with open("/etc/machine-id") as f:
                machine_id = f.read().strip()
        except OSError:
            machine_id = ""
        os_image = "Linux"
        try:
            with open("/etc/os-release") as f:
                m = re.search(r'^PRETTY_NAME="?([^"\n]*)"?', f.read(), re.M)
                os_image = m.group(1) if m else os_image
        except OSError:
            pass
        conds = []
        for t, reason, msg in (("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                               ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                               ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available")):
            conds.append({"type": t, "status": "False", "reason": reason, "message": msg,
                          "lastHeartbeatTime": now, "lastTransitionTime": self.started_iso})
        conds.append({"type": "Ready", "status": "True", "reason": "KubeletReady",
                      "message": "kubelet is posting ready status", "lastHeartbeatTime": now,
                      "lastTransitionTime": self.started_iso})
        return {"capacity": cap, "allocatable": alloc, "conditions": conds,
                "addresses": [{"type": "InternalIP", "address": "127.0.0.1"},
                              {"type": "Hostname", "address": self.name}],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                "nodeInfo": {"machineID": machine_id, "systemUUID": machine_id, "bootID": boot_id(),
                             "kernelVersion": os.uname().release, "osImage": os_image,
                             "containerRuntimeVersion": "containerd://1.7.27",
                             "kubeletVersion": self.version, "kubeProxyVersion": self.version,
                             "operatingSystem": "linux", "architecture": "amd64"}}

    def register(self):
        lease_path = "/apis/coordination.k8s.io/v1/namespaces/%s/leases" % LEASE_NS
        # The lease first: the API double treats nodes without a lease as kubelet-less.
        code, obj = self.api.request("GET", "%s/%s" % (lease_path, self.name))
        if code == 404:
            self.api.request("POST", lease_path, {
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": LEASE_NS},
                "spec": {"holderIdentity": self.name, "leaseDurationSeconds": 40, "renewTime": iso_micro()}})
        else:
            self.renew_lease()
        body = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": self.name, "labels": self.node_labels(),
                             "annotations": {"volumes.kubernetes.io/controller-managed-attach-detach": "true",
                                             "kubegpu-lab.io/node": "true"}},
                "spec": {}, "status": self.node_status()}
        code, obj = self.api.request("POST", "/api/v1/nodes", body)
        if code == 409:
            code, obj = self.api.request("PATCH", "/api/v1/nodes/%s" % self.name,
                                         {"metadata": {"labels": self.node_labels()}},
                                         "application/merge-patch+json")
        if code >= 300:
            raise RuntimeError("Unable to register node with API server: %s %s" % (code, obj))
        self.node_uid = obj["metadata"]["uid"]
        klog("I", "Successfully registered node", node=self.name)
        self.api.request("PATCH", "%s/%s" % (lease_path, self.name),
                         {"metadata": {"ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": self.name,
                                                            "uid": self.node_uid}]}},
                         "application/merge-patch+json")
        self.post_status(force=True)

    def renew_lease(self):
        path = "/apis/coordination.k8s.io/v1/namespaces/%s/leases/%s" % (LEASE_NS, self.name)
        body = {"spec": {"holderIdentity": self.name, "renewTime": iso_micro(), "leaseDurationSeconds": 40}}
        code, _obj = self.api.request("PATCH", path, body, "application/merge-patch+json")
        return code

    def post_status(self, force=False):
        """Patch the node status when what the API shows differs from what this kubelet wants
        (or every 60 s): the node lifecycle controller may have set it Unknown meanwhile. A
        strategic merge patch, as the kubelet's (component-helpers PatchNodeStatus): conditions
        merge by type, so other writers' conditions (node-problem-detector's) stay."""
        status = self.node_status()
        want = self._status_key(status)
        if not force and time.monotonic() - getattr(self, "_last_status_time", 0) < 60:
            code, obj = self.api.request("GET", "/api/v1/nodes/%s" % self.name)
            if code == 200 and self._status_key(obj.get("status") or {}) == want:
                return
        code, obj = self.api.request("PATCH", "/api/v1/nodes/%s/status" % self.name, {"status": status},
                                     "application/strategic-merge-patch+json")
        if code == 404:
            self.register()
            return
        if code < 300:
            self._last_status_time = time.monotonic()

    @staticmethod
    def _status_key(status):
        ready = [c.get("status") for c in status.get("conditions") or [] if c.get("type") == "Ready"]
        return json.dumps({"ready": ready, "capacity": status.get("capacity"),
                           "allocatable": status.get("allocatable"),
                           "bootID": (status.get("nodeInfo") or {}).get("bootID")}, sort_keys=True)

    def heartbeat(self):
        while not self.stopping:
            try:
                self.renew_lease()
                self.post_status()
            except Exception as exc:  # keep beating whatever the API does
                klog("E", "Error updating node status, will retry", err=str(exc))
            self.node_changed.wait(10)
            self.node_changed.clear()

    # --- events ---------------------------------------------------------------------------

    def event(self, pod, etype, reason, message, field_path=None):
        md = pod["metadata"]
        now = iso()
        obj = {"apiVersion": "v1", "kind": "Event",
               "metadata": {"name": "%s.%x" % (md["name"], random.getrandbits(64)), "namespace": md["namespace"]},
               "involvedObject": {"kind": "Pod", "namespace": md["namespace"], "name": md["name"],
                                  "uid": md["uid"], "apiVersion": "v1"},
               "reason": reason, "message": message, "type": etype, "count": 1,
               "firstTimestamp": now, "lastTimestamp": now, "eventTime": iso_micro(),
               "action": reason,
               "source": {"component": "kubelet", "host": self.name},
               "reportingComponent": "kubelet", "reportingInstance": self.name}
        if field_path:
            obj["involvedObject"]["fieldPath"] = field_path
        try:
            self.api.request("POST", "/api/v1/namespaces/%s/events" % md["namespace"], obj)
        except Exception:
            pass

    # --- pods -----------------------------------------------------------------------------

    def list_pods(self):
        q = urllib.parse.urlencode({"fieldSelector": "spec.nodeName=%s" % self.name})
        code, obj = self.api.request("GET", "/api/v1/pods?" + q)
        if code != 200:
            raise RuntimeError("list pods: %s %s" % (code, obj))
        items = obj.get("items") or []
        items.sort(key=lambda p: (p["metadata"].get("creationTimestamp") or "", p["metadata"]["name"]))
        return items

    @staticmethod
    def gpu_requests(container):
        res = container.get("resources") or {}
        out = {}
        for src in (res.get("requests") or {}, res.get("limits") or {}):
            for k, v in src.items():
                if k.startswith(EXTENDED_PREFIX):
                    out[k] = int(quantity(v))
        return out

    def adopt(self):
        """After a kubelet restart: containers that are still running belong to their pods."""
        by_pod = {}
        for st in runtime.list_containers():
            if runtime.alive(st):
                by_pod.setdefault(st["pod_uid"], []).append(st)
            else:
                runtime.stop(st, 0)
        return by_pod

    def record(self, pod):
        uid = pod["metadata"]["uid"]
        rec = self.pods.get(uid)
        if rec is None:
            rec = {"pod": pod, "admitted": False, "sandbox": None, "containers": {}, "restarts": {},
                   "waiting": {}, "backoff": {}, "failed": None, "last_status": None, "started": None,
                   "terminated": False}
            self.pods[uid] = rec
        rec["pod"] = pod
        return rec

    def admit(self, rec):
        pod = rec["pod"]
        for c in pod["spec"].get("containers") or []:
            for resource, count in sorted(self.gpu_requests(c).items()):
                self.devices.allocate(pod, c, resource, count)
        rec["admitted"] = True

    def pod_ip(self, pod):
        uid = pod["metadata"]["uid"]
        if pod["spec"].get("hostNetwork"):
            return "127.0.0.1"
        if uid not in self.pod_ips:
            idx = int(self.node_cfg.get("index", 0))
            self.pod_ips[uid] = "10.244.%d.%d" % (idx, 2 + len(self.pod_ips) % 250)
        return self.pod_ips[uid]

    def start_container(self, rec, c):
        pod = rec["pod"]
        uid = pod["metadata"]["uid"]
        field = "spec.containers{%s}" % c["name"]
        envs, devices = self.devices.run_options(uid, c["name"])
        try:
            st = runtime.create(pod, c, self.config["cgroupDriver"], envs=envs, device_specs=devices,
                                hook=self.node_cfg.get("runtime", {}).get("nvidia_hook", True))
        except runtime.RuntimeError_ as exc:
            rec["waiting"][c["name"]] = ("CreateContainerError", str(exc))
            self.event(pod, "Warning", "Failed", "Error: %s" % exc, field)
            n = rec["restarts"].get(c["name"], 0)
            rec["backoff"][c["name"]] = time.monotonic() + min(300, 10 * (2 ** min(n, 5)))
            rec["restarts"][c["name"]] = n + 1
            return False
        rec["containers"][c["name"]] = st
        rec["waiting"].pop(c["name"], None)
        self.event(pod, "Normal", "Pulled", 'Container image "%s" already present on machine' % c.get("image"), field)
        self.event(pod, "Normal", "Created", "Created container %s" % c["name"], field)
        self.event(pod, "Normal", "Started", "Started container %s" % c["name"], field)
        return True

    def ensure_running(self, rec):
        pod = rec["pod"]
        if rec["sandbox"] is None or not runtime.alive(rec["sandbox"]):
            try:
                rec["sandbox"] = runtime.create(pod, {"name": "POD"}, self.config["cgroupDriver"], sandbox=True)
            except runtime.RuntimeError_ as exc:
                self.event(pod, "Warning", "FailedCreatePodSandBox", "Failed to create pod sandbox: %s" % exc)
                return
            rec["started"] = rec["started"] or iso()
        for c in pod["spec"].get("containers") or []:
            st = rec["containers"].get(c["name"])
            if st is not None and runtime.alive(st):
                continue
            if st is not None:
                # the container exited: restart with back-off (restartPolicy Always)
                runtime.stop(st, 0)
                rec["containers"].pop(c["name"], None)
                n = rec["restarts"].get(c["name"], 0) + 1
                rec["restarts"][c["name"]] = n
                rec["backoff"][c["name"]] = time.monotonic() + min(300, 10 * (2 ** min(n - 1, 5)))
                rec["waiting"][c["name"]] = ("CrashLoopBackOff", "back-off restarting failed container %s "
                                             "in pod %s" % (c["name"], pod["metadata"]["name"]))
                self.event(pod, "Warning", "BackOff", "Back-off restarting failed container %s" % c["name"],
                           "spec.containers{%s}" % c["name"])
                continue
            if time.monotonic() < rec["backoff"].get(c["name"], 0):
                continue
            self.start_container(rec, c)

    def terminate(self, rec, grace):
        pod = rec["pod"]
        for name, st in list(rec["containers"].items()):
            self.event(pod, "Normal", "Killing", "Stopping container %s" % name, "spec.containers{%s}" % name)
            runtime.stop(st, grace)
        rec["containers"] = {}
        if rec["sandbox"] is not None:
            runtime.stop(rec["sandbox"], 0)
            rec["sandbox"] = None
        runtime.remove_pod_cgroup(pod, self.config["cgroupDriver"])
        self.devices.release(pod["metadata"]["uid"])
        rec["terminated"] = True

    def pod_status(self, rec):
        pod = rec["pod"]
        now = iso()
        statuses = []
        all_ready = True
        for c in pod["spec"].get("containers") or []:
            st = rec["containers"].get(c["name"])
            cs = {"name": c["name"], "image": c.get("image", ""), "imageID": "",
                  "restartCount": rec["restarts"].get(c["name"], 0), "started": False, "ready": False}
            if st is not None:
                cs.update({"containerID": "containerd://" + st["id"], "ready": True, "started": True,
                           "state": {"running": {"startedAt": iso(st.get("started"))}}})
            else:
                all_ready = False
                reason, msg = rec["waiting"].get(c["name"], ("ContainerCreating", ""))
                cs["state"] = {"waiting": {"reason": reason, "message": msg}}
            statuses.append(cs)
        if rec["failed"]:
            reason, msg = rec["failed"]
            return {"phase": "Failed", "reason": reason, "message": "Pod was rejected: %s" % msg,
                    "startTime": rec["started"] or now, "qosClass": runtime.qos_class(pod)}
        ready = "True" if all_ready and rec["sandbox"] else "False"
        conds = [{"type": "PodReadyToStartContainers", "status": "True" if rec["sandbox"] else "False"},
                 {"type": "Initialized", "status": "True"},
                 {"type": "Ready", "status": ready},
                 {"type": "ContainersReady", "status": ready},
                 {"type": "PodScheduled", "status": "True"}]
        if ready == "False":
            for cnd in conds[2:4]:
                cnd.update({"reason": "ContainersNotReady",
                            "message": "containers with unready status: [%s]" % " ".join(
                                s["name"] for s in statuses if not s["ready"])})
        status = {"phase": "Running" if rec["sandbox"] and any(s["ready"] for s in statuses) else "Pending",
                  "conditions": conds, "hostIP": "127.0.0.1", "hostIPs": [{"ip": "127.0.0.1"}],
                  "podIP": self.pod_ip(pod), "podIPs": [{"ip": self.pod_ip(pod)}],
                  "startTime": rec["started"] or now, "containerStatuses": statuses,
                  "qosClass": runtime.qos_class(pod)}
        return status

    def sync_status(self, rec):
        status = self.pod_status(rec)
        key = json.dumps(status, sort_keys=True)
        if key == rec["last_status"]:
            return
        # lastTransitionTime only changes with the status: stamp it now
        for cnd in status.get("conditions") or []:
            cnd["lastTransitionTime"] = iso()
            cnd["lastProbeTime"] = None
        md = rec["pod"]["metadata"]
        path = "/api/v1/namespaces/%s/pods/%s/status" % (md["namespace"], md["name"])
        code, _obj = self.api.request("PATCH", path, {"status": status}, "application/merge-patch+json")
        if code < 300:
            rec["last_status"] = key

    def finalize(self, rec):
        md = rec["pod"]["metadata"]
        code, obj = self.api.request("DELETE", "/api/v1/namespaces/%s/pods/%s" % (md["namespace"], md["name"]),
                                     {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
                                      "preconditions": {"uid": md["uid"]}})
        return code in (200, 202, 404, 409)

    def sync_once(self, adopted):
        pods = self.list_pods()
        seen = set()
        for pod in pods:
            uid = pod["metadata"]["uid"]
            seen.add(uid)
            rec = self.record(pod)
            if pod["metadata"].get("deletionTimestamp"):
                if not rec["terminated"]:
                    grace = pod["metadata"].get("deletionGracePeriodSeconds", 30) or 0
                    self.terminate(rec, min(int(grace), 30))
                if self.finalize(rec):
                    self.pods.pop(uid, None)
                continue
            phase = (pod.get("status") or {}).get("phase")
            if phase in ("Succeeded", "Failed") and not rec["admitted"]:
                continue
            if not rec["admitted"] and not rec["failed"]:
                for st in adopted.pop(uid, []):
                    if st.get("sandbox"):
                        rec["sandbox"] = st
                    else:
                        rec["containers"][st["name"]] = st
                    rec["started"] = rec["started"] or iso(st.get("created"))
                try:
                    self.admit(rec)
                except AdmissionError as exc:
                    rec["failed"] = (exc.reason, str(exc))
                    self.event(pod, "Warning", exc.reason, str(exc))
                    for st in list(rec["containers"].values()) + ([rec["sandbox"]] if rec["sandbox"] else []):
                        runtime.stop(st, 0)
                    rec["containers"], rec["sandbox"] = {}, None
                    self.sync_status(rec)
                    continue
            if rec["failed"]:
                self.sync_status(rec)
                continue
            self.ensure_running(rec)
            self.sync_status(rec)
        for uid in list(self.pods):
            if uid not in seen:
                rec = self.pods.pop(uid)
                if not rec["terminated"]:
                    self.terminate(rec, 0)
        for uid, states in list(adopted.items()):
            if uid not in seen:
                for st in states:
                    runtime.stop(st, 0)
                adopted.pop(uid)
        self.devices.prune(seen)

    def cpu_manager_loop(self):
        period = duration(self.config.get("cpuManagerReconcilePeriod"), 10)
        while not self.stopping:
            time.sleep(period)
            records = list(self.pods.values())  # no lock: independent of a blocked sync loop
            for rec in records:
                for st in list(rec["containers"].values()):
                    runtime.update(st)
            if self.v(4):
                klog("I", "[cpumanager] reconcileState: updated container cgroups", containers=sum(
                    len(r["containers"]) for r in records))

    def run(self):
        self.started_iso = iso()
        klog("I", "Kubelet version", kubeletVersion=self.version)
        self.check_cpu_manager()
        self.devices.start()
        adopted = self.adopt()
        while True:
            try:
                self.register()
                break
            except Exception as exc:
                klog("E", "Unable to register node with API server", err=str(exc))
                time.sleep(2)
        threading.Thread(target=self.heartbeat, daemon=True, name="heartbeat").start()
        if self.config["cpuManagerPolicy"] == "static":
            threading.Thread(target=self.cpu_manager_loop, daemon=True, name="cpumanager").start()
        klog("I", "Starting kubelet main sync loop")
        while not self.stopping:
            try:
                self.sync_once(adopted)
                # every pod bound when the plugin registered has been through admission now
                if not os.path.exists(SYNCED) and os.path.exists(REGISTERED_MARK):
                    write_atomic(SYNCED, "%d\n" % time.time())
            except Exception as exc:
                klog("E", "Error syncing pods, will retry", err=str(exc))
                if self.v(4):
                    traceback.print_exc()
            time.sleep(1)


def main(argv):
    flags = parse_flags(argv)
    if "version" in flags:
        cfg = read_json(NODE_CONFIG, {})
        print("Kubernetes %s" % cfg.get("kubelet_version", VERSION_DEFAULT))
        return 0
    try:
        kubelet = Kubelet(flags)
    except ConfigError as exc:
        klog("E", "command failed", err=str(exc))
        return 1

    def stop(signum, frame):
        kubelet.stopping = True
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    try:
        kubelet.run()
    except ConfigError as exc:
        klog("E", "command failed", err=str(exc))
        return 1
    return 0
