"""Checks that this machine can run the lab, and installs the host tools it needs.

The lab needs root (overlay mounts, systemd-nspawn, mknod in the nodes), systemd-nspawn,
debootstrap, dpkg-deb + apt-ftparchive (the fake driver repository), a C compiler (the fake
NVML library), OpenSSH (ssh-keygen, the client Ansible uses) and overlayfs. On a Debian/Ubuntu
host the missing tools are installed with apt-get; anywhere else the lab refuses with a message
that says what is missing.
"""
import os
import shutil

from .util import LabError, log, run

# tool -> Debian package providing it
HOST_TOOLS = {
    "systemd-nspawn": "systemd-container",
    "debootstrap": "debootstrap",
    "dpkg-deb": "dpkg",
    "apt-ftparchive": "apt-utils",
    "gcc": "gcc",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
    "mount": "mount",
    "unshare": "util-linux",
    "openssl": "openssl",  # the API double's TLS certificates
}
# headers the fake NVML library needs besides the compiler
HOST_PACKAGES_EXTRA = ["libc6-dev", "ca-certificates"]


def missing_tools():
    return sorted(t for t in HOST_TOOLS if shutil.which(t) is None)


def overlay_supported():
    try:
        with open("/proc/filesystems") as f:
            if any(line.split()[-1] == "overlay" for line in f if line.strip()):
                return True
    except OSError:
        pass
    run(["modprobe", "overlay"], check=False, capture=True)
    try:
        with open("/proc/filesystems") as f:
            return any(line.split()[-1] == "overlay" for line in f if line.strip())
    except OSError:
        return False


def require_root():
    if os.geteuid() != 0:
        raise LabError("the GPU node lab must run as root: it mounts overlay filesystems and boots "
                       "systemd-nspawn containers (run it with sudo, or as root in CI)")


def ensure_host(install=True):
    """Refuse (LabError) where the lab cannot run; install missing Debian packages if allowed."""
    require_root()
    missing = missing_tools()
    have_libc_dev = os.path.exists("/usr/include/stdio.h")
    if missing or not have_libc_dev:
        pkgs = sorted({HOST_TOOLS[t] for t in missing} | set(HOST_PACKAGES_EXTRA))
        if not install:
            raise LabError("missing host tools: %s (Debian packages: %s)"
                           % (", ".join(missing) or "C headers", " ".join(pkgs)))
        if shutil.which("apt-get") is None:
            raise LabError("missing host tools: %s; this is not a Debian/Ubuntu host, install "
                           "the equivalents of %s yourself" % (", ".join(missing), " ".join(pkgs)))
        log("installing host packages: %s", " ".join(pkgs))
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        run(["apt-get", "update", "-q"], env=env, capture=True)
        run(["apt-get", "install", "-y", "-q", "--no-install-recommends"] + pkgs, env=env,
            capture=True)
        still = missing_tools()
        if still:
            raise LabError("still missing after apt-get install: %s" % ", ".join(still))
    if shutil.which("systemd-nspawn") is None:
        raise LabError("systemd-nspawn is not available (Debian package systemd-container)")
    if not overlay_supported():
        raise LabError("the kernel has no overlay filesystem: the lab keeps one read-only base "
                       "image and a writable overlay per node")
    cgroup_layout()
    raise_inotify_limit()
    if not os.path.exists("/dev/fuse"):
        run(["modprobe", "fuse"], check=False, capture=True)
        if not os.path.exists("/dev/fuse"):
            log("warning: no /dev/fuse: nodes get no complete procfs view at /run/kubegpu-lab/proc "
                "(the lab files are still bind-mounted over /proc where the kernel has them)")


INOTIFY_INSTANCES = "/proc/sys/fs/inotify/max_user_instances"
INOTIFY_MIN = 1024


def raise_inotify_limit(path=INOTIFY_INSTANCES, minimum=INOTIFY_MIN):
    """Every node's systemd, journald, udev and logind take inotify instances, all as host root
    (nspawn without user namespaces): the kernel default of 128 per user runs out at about
    20 nodes across labs ("Too many open files" at boot). Raise it (never lower it)."""
    try:
        with open(path) as fh:
            current = int(fh.read().strip())
        if current < minimum:
            with open(path, "w") as fh:
                fh.write("%d\n" % minimum)
            log("raised fs.inotify.max_user_instances from %d to %d for the lab nodes", current, minimum)
    except (OSError, ValueError) as exc:
        log("warning: could not raise fs.inotify.max_user_instances (%s): many nodes may fail to boot", exc)


def cgroup_layout():
    """'hybrid' (v1 + unified), 'v2' or 'v1'; raise where nspawn could not place its cgroups."""
    if os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
        return "v2"
    if os.path.isdir("/sys/fs/cgroup/unified") and os.path.isdir("/sys/fs/cgroup/systemd"):
        return "hybrid"
    if os.path.isdir("/sys/fs/cgroup/systemd"):
        return "v1"
    raise LabError("no usable cgroup hierarchy under /sys/fs/cgroup (systemd-nspawn needs the "
                   "name=systemd v1 hierarchy or cgroup v2)")
