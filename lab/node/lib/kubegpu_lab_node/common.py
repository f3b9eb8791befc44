"""Paths and small helpers shared by the node-side lab code."""
import contextlib
import fcntl
import json
import os
import sys
import tempfile
import time

NODE_CONFIG = "/etc/kubegpu-lab/node.json"
STATE_DIR = "/var/lib/kubegpu-lab"          # persists across reboots (the node's disk)
RUN_DIR = "/run/kubegpu-lab"                # per boot (tmpfs)
HW_STATE = os.path.join(STATE_DIR, "hw.json")
NVML_SCENARIO = os.path.join(RUN_DIR, "nvml.json")
NVML_SCENARIO_LINK = "/etc/kubegpu-lab/nvml.json"
KERNEL_DIR = os.path.join(RUN_DIR, "kernel")
PROC_OVERLAY_DIR = os.path.join(RUN_DIR, "procfs")   # backing files of the procfs views
PROC_VIEW = os.path.join(RUN_DIR, "proc")              # complete FUSE view (procview.py)
CGROUP_ROOT = os.path.join(RUN_DIR, "cgroup")
CONTAINERS_DIR = os.path.join(RUN_DIR, "containers")


def load_node_config(path=NODE_CONFIG):
    with open(path) as f:
        return json.load(f)


def read_json(path, default=None):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return default


def write_atomic(path, data, mode=0o644):
    d = os.path.dirname(path)
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp.", dir=d)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_json(path, obj, mode=0o644):
    write_atomic(path, json.dumps(obj, indent=2, sort_keys=True) + "\n", mode)


def write_in_place(path, text):
    """Rewrite a file keeping its inode: bind mounts of it (over /proc/...) see the change."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o444)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


@contextlib.contextmanager
def locked(path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def klog(level, msg, **kv):
    """One klog-formatted line on stderr (journald keeps it), like the real kubelet's."""
    now = time.time()
    lt = time.gmtime(now)
    parts = [msg if msg.startswith('"') else '"%s"' % msg.replace('"', '\\"')]
    for k, v in kv.items():
        if isinstance(v, str):
            v = '"%s"' % v.replace('"', '\\"')
        parts.append("%s=%s" % (k, v))
    sys.stderr.write("%s%02d%02d %02d:%02d:%02d.%06d %7d %s] %s\n" % (
        level, lt.tm_mon, lt.tm_mday, lt.tm_hour, lt.tm_min, lt.tm_sec,
        int((now % 1) * 1e6), os.getpid(), "kubelet.go:0", " ".join(parts)))
    sys.stderr.flush()


def boot_id():
    with open("/proc/sys/kernel/random/boot_id") as f:
        return f.read().strip()
