"""A minimal container runtime for lab nodes (what containerd + runc do for the fake kubelet).

A container is a real process started as a transient systemd service (so it outlives kubelet
restarts, as containers outlive kubelet under containerd) whose first program,
``kubegpu-lab-ctr-init``, moves into its own mount namespace with a private /dev:

* the default runc devices, plus the runtime's device list (the device plugin's DeviceSpecs);
* privileged containers get a copy of the node's NVIDIA device nodes as they are at start:
  a container's /dev is a snapshot, later nodes (a late /dev/nvidia-uvm) never appear in it;
* the OCI prestart hook (``nvidia-container-runtime-hook``, when nvidia-container-toolkit is
  installed) then adds NVIDIA devices behind the runtime's back.

The device cgroup of each container is a plain ``devices.list`` file (the node's real cgroup
hierarchies are read-only) under /run/kubegpu-lab/cgroup/devices, in the kubelet's cgroupfs
or systemd layout, with ``cgroup.procs`` naming the container's process. The runtime writes
it from its own device list; ``update`` rewrites it from that list (the CPU manager's periodic
cpuset update), dropping whatever the hook added, exactly as runc does on a real node.
"""
import ctypes
import json
import os
import secrets
import signal
import stat
import subprocess
import time

from .common import CGROUP_ROOT, CONTAINERS_DIR, read_json, write_atomic, write_json

HOOK = "/usr/bin/nvidia-container-runtime-hook"
CTR_INIT = "/usr/lib/kubegpu-lab/bin/kubegpu-lab-ctr-init"
DEVICE_PLUGIN = "/usr/lib/kubegpu-lab/bin/kubegpu-lab-device-plugin"
# runc's default allow list (libcontainer/specconv AllowedDevices), in devices.list spelling
DEFAULT_RULES = ["c *:* m", "b *:* m", "c 1:3 rwm", "c 1:8 rwm", "c 1:7 rwm", "c 5:0 rwm",
                 "c 1:5 rwm", "c 1:9 rwm", "c 5:1 rwm", "c 136:* rwm", "c 5:2 rwm", "c 10:200 rwm"]
DEFAULT_NODES = [("null", 1, 3), ("zero", 1, 5), ("full", 1, 7), ("random", 1, 8),
                 ("urandom", 1, 9), ("tty", 5, 0), ("ptmx", 5, 2)]
CLONE_NEWNS = 0x00020000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18


class RuntimeError_(Exception):
    """Container creation failed (the kubelet reports CreateContainerError)."""


# ----------------------------------------------------------------------------- cgroup layout

def qos_class(pod):
    qos = (pod.get("status") or {}).get("qosClass")
    if qos:
        return qos
    requests = limits = False
    guaranteed = True
    for c in pod["spec"].get("containers", []):
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        requests = requests or bool(req)
        limits = limits or bool(lim)
        for r in ("cpu", "memory"):
            if r not in lim or req.get(r, lim.get(r)) != lim.get(r):
                guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def pod_cgroup_rel(pod, driver):
    """The pod's cgroup path below the hierarchy, as the kubelet names it."""
    uid = pod["metadata"]["uid"]
    qos = qos_class(pod).lower()
    if driver == "systemd":
        u = uid.replace("-", "_")
        if qos == "guaranteed":
            return "kubepods.slice/kubepods-pod%s.slice" % u
        return "kubepods.slice/kubepods-%s.slice/kubepods-%s-pod%s.slice" % (qos, qos, u)
    if qos == "guaranteed":
        return "kubepods/pod%s" % uid
    return "kubepods/%s/pod%s" % (qos, uid)


def container_cgroup_rel(pod, driver, cid):
    base = pod_cgroup_rel(pod, driver)
    if driver == "systemd":
        return "%s/cri-containerd-%s.scope" % (base, cid)
    return "%s/%s" % (base, cid)


def devices_hierarchy():
    return os.path.join(CGROUP_ROOT, "devices")


def _ensure_dir_cgroup(path):
    """A cgroup directory as the v1 devices controller shows it: devices.list + cgroup.procs."""
    if not os.path.isdir(path):
        os.makedirs(path)
    for name, text in (("devices.list", "a *:* rwm\n"), ("cgroup.procs", "")):
        p = os.path.join(path, name)
        if not os.path.exists(p):
            write_atomic(p, text)


def ensure_hierarchy(pod, driver):
    top = devices_hierarchy()
    _ensure_dir_cgroup(top)
    rel = pod_cgroup_rel(pod, driver)
    cur = top
    for part in rel.split("/"):
        cur = os.path.join(cur, part)
        _ensure_dir_cgroup(cur)
    return cur


def remove_pod_cgroup(pod, driver):
    path = os.path.join(devices_hierarchy(), pod_cgroup_rel(pod, driver))
    subprocess.call(["rm", "-rf", path])


# ----------------------------------------------------------------------------- containers

def _unit(cid):
    return "kubegpu-ctr-%s.service" % cid[:16]


def rules_for(devices, privileged=False):
    if privileged:
        return ["a *:* rwm"]  # runc: a privileged container may use every device
    out = list(DEFAULT_RULES)
    for d in devices:
        out.append("c %d:%d %s" % (d["major"], d["minor"], d.get("permissions", "rw")))
    return out


def resolve_device_specs(specs):
    """DeviceSpecs (host paths) -> devices with numbers, as runc stats them at create time."""
    out = []
    for spec in specs:
        host = spec.get("host_path") or spec.get("HostPath")
        ctr = spec.get("container_path") or spec.get("ContainerPath") or host
        perms = spec.get("permissions") or spec.get("Permissions") or "rw"
        try:
            st = os.stat(host)
        except OSError as exc:
            raise RuntimeError_("failed to create containerd container: error gathering device "
                                "information while adding custom device %r: %s" % (host, exc.strerror))
        if not stat.S_ISCHR(st.st_mode):
            raise RuntimeError_("failed to create containerd container: %s is not a device node" % host)
        out.append({"path": ctr, "major": os.major(st.st_rdev), "minor": os.minor(st.st_rdev),
                    "permissions": perms})
    return out


def command_for(container):
    """What a lab "image" runs: the device plugin image runs the fake plugin, the rest sleep."""
    image = container.get("image", "")
    if "k8s-device-plugin" in image or "nvidia-device-plugin" in image:
        return [DEVICE_PLUGIN]
    return ["sleep", "infinity"]


def create(pod, container, driver, envs=None, device_specs=None, sandbox=False, hook=True):
    """Create and start one container; return its state dict. Raises RuntimeError_."""
    cid = secrets.token_hex(32)
    cdir = os.path.join(CONTAINERS_DIR, cid)
    os.makedirs(cdir)
    devices = resolve_device_specs(device_specs or [])
    privileged = not sandbox and bool((container.get("securityContext") or {}).get("privileged"))
    ensure_hierarchy(pod, driver)
    cg = os.path.join(devices_hierarchy(), container_cgroup_rel(pod, driver, cid))
    os.makedirs(cg)
    write_atomic(os.path.join(cg, "devices.list"), "\n".join(rules_for(devices, privileged)) + "\n")
    write_atomic(os.path.join(cg, "cgroup.procs"), "")
    env = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
           "HOSTNAME=%s" % pod["metadata"]["name"]]
    if sandbox:
        args = ["/pause"]
    else:
        for e in container.get("env") or []:
            if "value" in e:
                env.append("%s=%s" % (e["name"], e["value"]))
        for k, v in sorted((envs or {}).items()):
            env.append("%s=%s" % (k, v))
        args = command_for(container)
    spec = {
        "ociVersion": "1.0.2",
        "process": {"args": args, "env": env},
        "linux": {"devices": devices, "cgroupsPath": os.path.relpath(cg, devices_hierarchy())},
        "annotations": {"kubegpu-lab.io/devices-list": os.path.join(cg, "devices.list"),
                        "io.kubernetes.pod.uid": pod["metadata"]["uid"],
                        "io.kubernetes.pod.name": pod["metadata"]["name"],
                        "io.kubernetes.pod.namespace": pod["metadata"]["namespace"],
                        "io.kubernetes.container.name": "POD" if sandbox else container["name"]},
        "privileged": privileged,
    }
    write_json(os.path.join(cdir, "config.json"), spec)
    os.mkfifo(os.path.join(cdir, "start"))
    unit = _unit(cid)
    rc = subprocess.call(["systemd-run", "--quiet", "--collect", "--no-block", "--unit=" + unit,
                          "--slice=kubepods.slice", "-p", "KillMode=mixed", "-p", "TimeoutStopSec=10",
                          CTR_INIT, cdir], stdout=subprocess.DEVNULL)
    state = {"id": cid, "unit": unit, "dir": cdir, "cgroup": cg, "devices": devices, "pid": None,
             "privileged": privileged,
             "pod_uid": pod["metadata"]["uid"], "pod": "%s/%s" % (pod["metadata"]["namespace"],
                                                                  pod["metadata"]["name"]),
             "name": "POD" if sandbox else container["name"], "sandbox": sandbox,
             "created": time.time()}
    if rc != 0:
        _cleanup(state)
        raise RuntimeError_("failed to start container process (systemd-run exit %d)" % rc)
    pid = _wait_ready(cdir, unit)
    if pid is None:
        _abort(state)
        raise RuntimeError_("container init did not come up")
    state["pid"] = pid
    write_atomic(os.path.join(cg, "cgroup.procs"), "%d\n" % pid)
    if hook and not sandbox and os.access(HOOK, os.X_OK):
        proc = subprocess.run([HOOK, "prestart"], input=json.dumps({"pid": pid, "bundle": cdir}),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=False)
        if proc.returncode != 0:
            _abort(state)
            raise RuntimeError_("failed to create containerd task: failed to create shim task: OCI "
                                "runtime create failed: runc create failed: unable to start container "
                                "process: error during container init: error running prestart hook #0: "
                                "exit status %d, stdout: %s, stderr: %s"
                                % (proc.returncode, proc.stdout.strip(), proc.stderr.strip()))
    with open(os.path.join(cdir, "start"), "w") as f:
        f.write("start\n")
    state["started"] = time.time()
    write_json(os.path.join(cdir, "state.json"), state)
    return state


def _wait_ready(cdir, unit, timeout=20):
    deadline = time.monotonic() + timeout
    ready = os.path.join(cdir, "ready")
    while time.monotonic() < deadline:
        try:
            with open(ready) as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            pass
        time.sleep(0.02)
    return None


def _abort(state):
    try:
        fd = os.open(os.path.join(state["dir"], "start"), os.O_WRONLY | os.O_NONBLOCK)
        os.write(fd, b"abort\n")
        os.close(fd)
    except OSError:
        pass
    subprocess.call(["systemctl", "kill", "--signal=SIGKILL", state["unit"]], stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL)
    _cleanup(state)


def _cleanup(state):
    subprocess.call(["rm", "-rf", state["dir"], state["cgroup"]])


def alive(state):
    pid = state.get("pid")
    if not pid:
        return False
    try:
        with open("/proc/%d/stat" % pid) as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                return False
        with open("/proc/%d/environ" % pid, "rb") as f:
            f.read(1)
    except (OSError, IndexError):
        return False
    return subprocess.call(["systemctl", "is-active", "--quiet", state["unit"]]) == 0


def stop(state, grace=30):
    """Stop the container: SIGTERM, then SIGKILL after ``grace`` seconds; remove its cgroup."""
    unit = state["unit"]
    subprocess.call(["systemctl", "kill", "--signal=SIGTERM", unit], stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + max(0, grace)
    while time.monotonic() < deadline and alive(state):
        time.sleep(0.1)
    if alive(state):
        subprocess.call(["systemctl", "kill", "--signal=SIGKILL", unit], stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL)
    subprocess.call(["systemctl", "stop", unit], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _cleanup(state)


def update(state):
    """runc update: rewrite the device cgroup from the runtime's own list (hook entries drop)."""
    path = os.path.join(state["cgroup"], "devices.list")
    if os.path.exists(path):
        write_atomic(path, "\n".join(rules_for(state["devices"], state.get("privileged", False))) + "\n")


def list_containers():
    out = []
    if not os.path.isdir(CONTAINERS_DIR):
        return out
    for cid in os.listdir(CONTAINERS_DIR):
        st = read_json(os.path.join(CONTAINERS_DIR, cid, "state.json"))
        if st:
            out.append(st)
    return out


# ----------------------------------------------------------------------------- container init

def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _mount(src, target, fstype, flags, data=None):
    libc = _libc()
    rc = libc.mount(src.encode() if src else None, target.encode(),
                    fstype.encode() if fstype else None, ctypes.c_ulong(flags),
                    data.encode() if data else None)
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, "mount %s: %s" % (target, os.strerror(err)))


def _snapshot_nvidia_nodes():
    nodes = []
    for base in ("/dev", "/dev/nvidia-caps"):
        try:
            names = os.listdir(base)
        except OSError:
            continue
        for name in names:
            if not name.startswith("nvidia"):
                continue
            path = os.path.join(base, name)
            st = os.lstat(path)
            if stat.S_ISCHR(st.st_mode):
                nodes.append((path, os.major(st.st_rdev), os.minor(st.st_rdev), stat.S_IMODE(st.st_mode)))
    return nodes


def ctr_init(argv):
    """Container init: own mount namespace and /dev, report ready, wait for start, exec."""
    cdir = argv[0]
    with open(os.path.join(cdir, "config.json")) as f:
        spec = json.load(f)
    snapshot = _snapshot_nvidia_nodes() if spec.get("privileged") else []
    if _libc().unshare(CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS)")
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _mount("kubegpu-ctr-dev", "/dev", "tmpfs", 0, "mode=0755,size=1m")
    for name, major, minor in DEFAULT_NODES:
        os.mknod("/dev/" + name, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
        os.chmod("/dev/" + name, 0o666)
    for link, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
        os.symlink(target, "/dev/" + link)
    os.makedirs("/dev/shm")
    for path, major, minor, mode in snapshot:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.mknod(path, mode | stat.S_IFCHR, os.makedev(major, minor))
    for d in spec["linux"].get("devices", []):
        os.makedirs(os.path.dirname(d["path"]), exist_ok=True)
        if not os.path.lexists(d["path"]):
            os.mknod(d["path"], 0o666 | stat.S_IFCHR, os.makedev(d["major"], d["minor"]))
    write_atomic(os.path.join(cdir, "ready"), "%d\n" % os.getpid())
    with open(os.path.join(cdir, "start")) as f:
        word = f.read().strip()
    if word != "start":
        return 1
    env = dict(e.split("=", 1) for e in spec["process"]["env"])
    args = spec["process"]["args"]
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if args == ["/pause"]:
        os.execvpe("sleep", ["/pause", "infinity"], env)
    os.execvpe(args[0], args, env)
    return 127
