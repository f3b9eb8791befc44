"""Host cgroups for lab nodes.

Without a systemd unit (``--keep-unit`` on a host whose PID 1 is not systemd) systemd-nspawn
splits the cgroup it runs in into ``payload`` and ``supervisor``. Two nodes started from the
same cgroup would share ``payload`` and their systemd instances would manage each other's
units, so every node supervisor first moves itself into its own cgroup,
``kubegpu-lab/<lab>/<node>``, in each hierarchy nspawn uses (name=systemd and the unified
hierarchy on a hybrid host, the single hierarchy on cgroup v2). The same cgroup tells the lab
every process a node still has, so ``down`` can prove nothing is left.
"""
import os
import signal
import time

from .util import LabError, kill_quiet

ROOT = "/sys/fs/cgroup"
TOP = "kubegpu-lab"


def hierarchies():
    """Mounted hierarchies nspawn places containers in."""
    if os.path.exists(os.path.join(ROOT, "cgroup.controllers")):
        return [ROOT]
    out = []
    for name in ("systemd", "unified"):
        path = os.path.join(ROOT, name)
        if os.path.exists(os.path.join(path, "cgroup.procs")):
            out.append(path)
    return out


def node_rel(lab, node):
    return os.path.join(TOP, lab, node)


def node_dirs(lab, node):
    return [os.path.join(h, node_rel(lab, node)) for h in hierarchies()]


def enter(lab, node, pid=None):
    """Create the node's cgroups and move ``pid`` (default: this process) into them."""
    pid = pid or os.getpid()
    dirs = node_dirs(lab, node)
    if not dirs:
        raise LabError("no name=systemd or unified cgroup hierarchy under %s" % ROOT)
    for d in dirs:
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "cgroup.procs"), "w") as f:
            f.write("%d\n" % pid)


def _walk_procs(top):
    pids = set()
    if not os.path.isdir(top):
        return pids
    for dirpath, _dirs, files in os.walk(top):
        if "cgroup.procs" in files:
            try:
                with open(os.path.join(dirpath, "cgroup.procs")) as f:
                    pids.update(int(p) for p in f.read().split())
            except OSError:
                continue
    return pids


def procs(lab, node):
    """Every pid in the node's cgroups (supervisor, nspawn and the whole container)."""
    pids = set()
    for d in node_dirs(lab, node):
        pids |= _walk_procs(d)
    return pids


def lab_procs(lab):
    pids = set()
    for h in hierarchies():
        pids |= _walk_procs(os.path.join(h, TOP, lab))
    return pids


def kill_all(lab, node, timeout=10):
    """SIGKILL every process of the node until none is left; True when empty."""
    deadline = time.monotonic() + timeout
    while True:
        pids = procs(lab, node)
        if not pids:
            return True
        if time.monotonic() > deadline:
            return False
        for pid in pids:
            kill_quiet(pid, signal.SIGKILL)
        time.sleep(0.1)


def remove(lab, node=None):
    """rmdir the node's (or the whole lab's) cgroups, deepest first; ignore busy ones."""
    left = []
    for h in hierarchies():
        top = os.path.join(h, TOP, lab, node) if node else os.path.join(h, TOP, lab)
        if not os.path.isdir(top):
            continue
        for dirpath, _dirs, _files in sorted(os.walk(top), key=lambda e: len(e[0]), reverse=True):
            try:
                os.rmdir(dirpath)
            except OSError:
                left.append(dirpath)
        for parent in (os.path.join(h, TOP, lab), os.path.join(h, TOP)):
            try:
                os.rmdir(parent)
            except OSError:
                pass
    return left


def leftover(lab):
    """cgroup directories of ``lab`` that still exist."""
    return [os.path.join(h, TOP, lab) for h in hierarchies() if os.path.isdir(os.path.join(h, TOP, lab))]
