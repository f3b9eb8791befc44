"""The NVIDIA device plugin as the fake kubelet sees it (runs inside the plugin pod's container).

Mirrors NVIDIA/k8s-device-plugin where the seeds depend on it:

* start: nvmlInit and device discovery through the node's libnvidia-ml.so.1 (an NVML error
  with FAIL_ON_INIT_ERROR=true, the default, exits the plugin: the pod crash-loops; a hung
  nvmlInit hangs it and it never registers);
* MIG_STRATEGY none|single|mixed decides the resources (nvidia.com/gpu, nvidia.com/mig-<profile>);
* registers with the kubelet over /var/lib/kubelet/device-plugins/kubelet.sock and registers
  again whenever the kubelet recreates that socket (kubelet restart);
* GetPreferredAllocation initialises NVML (the allocator does) -> with the R570 regression on a
  MIG-mixed node that call never returns, and since the kubelet calls it without a timeout the
  kubelet's pod sync loop blocks behind it;
* Allocate answers NVIDIA_VISIBLE_DEVICES and, only with PASS_DEVICE_SPECS=true, DeviceSpecs:
  the allocated GPU/MIG nodes plus /dev/nvidiactl, /dev/nvidia-uvm, /dev/nvidia-uvm-tools and
  /dev/nvidia-modeset *if os.stat finds them in the plugin's own /dev*, which is the snapshot
  its container got at start: a plugin started before nvidia-uvm existed never passes it.

The kubelet<->plugin protocol is newline-delimited JSON over the same Unix sockets instead of
gRPC (the lab has no gRPC); the messages carry the v1beta1 fields.
"""
import json
import os
import socket
import stat
import sys
import threading
import time

from . import nvml

PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
KUBELET_SOCK = os.path.join(PLUGIN_DIR, "kubelet.sock")
ENDPOINT = "nvidia-gpu.sock"
CONTROL_DEVICES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset")
GPU_MAJOR = 195


def log(msg, *args):
    sys.stderr.write("%s %s\n" % (time.strftime("I%m%d %H:%M:%S"), msg % args if args else msg))
    sys.stderr.flush()


def truthy(v):
    return str(v).lower() in ("1", "true", "yes", "on")


def send(sock, obj):
    sock.sendall((json.dumps(obj) + "\n").encode())


def recv(f):
    line = f.readline()
    if not line:
        raise EOFError("connection closed")
    return json.loads(line)


def socket_identity(path):
    """(inode, ctime) of the kubelet socket: a restarted kubelet's new socket can reuse the old
    inode number, so the inode alone misses restarts (the real plugin uses fsnotify create events)."""
    st = os.stat(path)
    return (st.st_ino, st.st_ctime_ns)


class Plugin(object):
    def __init__(self):
        self.pass_specs = truthy(os.environ.get("PASS_DEVICE_SPECS", "false"))
        self.strategy = os.environ.get("MIG_STRATEGY", "none")
        self.fail_on_init = truthy(os.environ.get("FAIL_ON_INIT_ERROR", "true"))
        self.resources = {}   # resource -> {id: {"paths": [...]}}
        self.kubelet_ino = None

    def discover(self):
        log("Starting NVML")
        nvml.init()
        try:
            log("driver version %s", nvml.driver_version())
            devs = nvml.devices()
        finally:
            nvml.shutdown()
        caps_major, minors = caps_info()
        res = {}
        for d in devs:
            gpu_path = "/dev/nvidia%d" % d["minor"]
            if d["mig_enabled"] and self.strategy in ("single", "mixed"):
                for m in d["mig"]:
                    name = "nvidia.com/gpu" if self.strategy == "single" else "nvidia.com/mig-%s" % m.get("profile", "unknown")
                    paths = [gpu_path]
                    for key in ("gpu%d/gi%d/access" % (d["minor"], m["gi"]),
                                "gpu%d/gi%d/ci%d/access" % (d["minor"], m["gi"], m["ci"])):
                        if key in minors:
                            paths.append("/dev/nvidia-caps/nvidia-cap%d" % minors[key])
                    res.setdefault(name, {})[m["uuid"]] = {"paths": paths}
            else:
                res.setdefault("nvidia.com/gpu", {})[d["uuid"]] = {"paths": [gpu_path]}
        self.resources = res
        log("discovered %s", {k: len(v) for k, v in res.items()})

    def register(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(KUBELET_SOCK)
        self.kubelet_ino = socket_identity(KUBELET_SOCK)
        with s, s.makefile("r") as f:
            send(s, {"method": "Register", "version": "v1beta1", "endpoint": ENDPOINT,
                     "resources": {k: sorted(v) for k, v in self.resources.items()},
                     "options": {"get_preferred_allocation_available": True,
                                 "pre_start_required": False}})
            reply = recv(f)
        if reply.get("error"):
            raise RuntimeError(reply["error"])
        log("Registered device plugin with Kubelet: %s", ", ".join(sorted(self.resources)))

    def preferred(self, req):
        # the allocator asks NVML about topology: the call the R570 regression hangs
        nvml.init()
        nvml.shutdown()
        must = list(req.get("must_include") or [])
        avail = [d for d in req.get("available") or [] if d not in must]
        return {"device_ids": (must + avail)[: int(req.get("size", 1))]}

    def allocate(self, req):
        resource = req["resource"]
        ids = req["device_ids"]
        known = self.resources.get(resource, {})
        for i in ids:
            if i not in known:
                return {"error": "invalid allocation request for '%s': unknown device: %s" % (resource, i)}
        resp = {"envs": {"NVIDIA_VISIBLE_DEVICES": ",".join(ids)}, "devices": [], "mounts": []}
        if self.pass_specs:
            paths = []
            for i in ids:
                paths += known[i]["paths"]
            for p in CONTROL_DEVICES:
                try:
                    if stat.S_ISCHR(os.stat(p).st_mode):
                        paths.append(p)
                except OSError:
                    continue
            seen = set()
            for p in paths:
                if p not in seen:
                    seen.add(p)
                    resp["devices"].append({"container_path": p, "host_path": p, "permissions": "rw"})
        return resp

    def handle(self, conn):
        with conn, conn.makefile("r") as f:
            while True:
                try:
                    req = recv(f)
                except (EOFError, ValueError, OSError):
                    return
                method = req.get("method")
                try:
                    if method == "GetPreferredAllocation":
                        out = self.preferred(req)
                    elif method == "Allocate":
                        out = self.allocate(req)
                    elif method == "ListAndWatch":
                        send(conn, {"devices": {k: sorted(v) for k, v in self.resources.items()}})
                        while f.readline():
                            pass
                        return
                    elif method == "GetDevicePluginOptions":
                        out = {"get_preferred_allocation_available": True}
                    else:
                        out = {"error": "unknown method %r" % method}
                except nvml.NVMLError as exc:
                    out = {"error": "nvml: %s" % exc}
                try:
                    send(conn, out)
                except OSError:
                    return

    def serve(self):
        path = os.path.join(PLUGIN_DIR, ENDPOINT)
        if os.path.exists(path):
            os.unlink(path)
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(path)
        srv.listen(16)
        threading.Thread(target=self.watch_kubelet, daemon=True).start()
        while True:
            conn, _addr = srv.accept()
            threading.Thread(target=self.handle, args=(conn,), daemon=True).start()

    def watch_kubelet(self):
        """Re-register when the kubelet restarts (its socket is recreated)."""
        while True:
            time.sleep(1)
            try:
                ino = socket_identity(KUBELET_SOCK)
            except OSError:
                continue
            if ino != self.kubelet_ino:
                try:
                    self.register()
                except (OSError, EOFError, RuntimeError) as exc:
                    log("registration failed: %s", exc)
                    self.kubelet_ino = None


def caps_info():
    major = None
    try:
        with open("/proc/devices") as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2 and parts[1] == "nvidia-caps":
                    major = int(parts[0])
    except OSError:
        pass
    minors = {}
    try:
        with open("/proc/driver/nvidia-caps/mig-minors") as f:
            for line in f:
                p = line.split()
                if len(p) == 2 and p[1].isdigit():
                    minors[p[0]] = int(p[1])
    except OSError:
        pass
    return major, minors


def main(argv):
    p = Plugin()
    log("kubegpu lab NVIDIA device plugin: PASS_DEVICE_SPECS=%s MIG_STRATEGY=%s", p.pass_specs, p.strategy)
    try:
        p.discover()
    except nvml.NVMLError as exc:
        log("failed to initialize NVML: %s", exc)
        if p.fail_on_init:
            log("If this is a GPU node, did you configure the NVIDIA Container Toolkit?")
            return 1
        log("Ignoring error because FAIL_ON_INIT_ERROR=false; no devices are advertised")
        while True:
            time.sleep(3600)
    threading.Thread(target=p.serve, daemon=True).start()
    for _attempt in range(100):
        if os.path.exists(os.path.join(PLUGIN_DIR, ENDPOINT)):
            break
        time.sleep(0.05)
    while True:
        try:
            p.register()
            break
        except (OSError, EOFError, RuntimeError) as exc:
            log("Could not register device plugin: %s; retrying", exc)
            time.sleep(2)
    while True:
        time.sleep(3600)
