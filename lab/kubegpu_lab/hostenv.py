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
    if _overlay_listed():
        return True
    run(["modprobe", "overlay"], check=False, capture=True)
    return _overlay_listed()


ROOT_MESSAGE = ("the GPU node lab must run as root: it mounts overlay filesystems and boots "
                "systemd-nspawn containers (run it with sudo, or as root in CI)")


def require_root():
    if os.geteuid() != 0:
        raise LabError(ROOT_MESSAGE)


def check_host(install=True):
    """What the lab needs of this machine, checked without changing it (``kubegpu-lab check``,
    the Molecule driver before every step). ``problems`` holds one message per requirement that
    is not met and cannot be met by ``up`` itself (which apt-get installs missing Debian packages
    when ``install`` and apt-get is there); an empty list means the lab can boot here.

    Not required: the cgroup v1 devices controller or cgroup v2 BPF device programs. The lab's
    containers get their device cgroups as plain files (docs/lab.md, "Device cgroups"), and the
    node supervisors start systemd-nspawn with --keep-unit --register=no, so no device policy is
    set up on the host."""
    problems = []
    if os.geteuid() != 0:
        problems.append(ROOT_MESSAGE)
    missing = missing_tools()
    have_libc_dev = os.path.exists("/usr/include/stdio.h")
    pkgs = sorted({HOST_TOOLS[t] for t in missing} | (set() if have_libc_dev else {"libc6-dev"}))
    installable = install and shutil.which("apt-get") is not None
    if pkgs and not installable:
        problems.append("missing host tools: %s (Debian/Ubuntu packages: %s)%s"
                        % (", ".join(missing) or "C headers", " ".join(pkgs),
                           "" if shutil.which("apt-get") else "; this is not a Debian/Ubuntu host, "
                           "install their equivalents"))
    try:
        layout = cgroup_layout()
    except LabError as exc:
        layout = None
        problems.append(str(exc))
    # listed, or a module `up` can load (modprobe -n changes nothing)
    overlay = _overlay_listed() or (shutil.which("modprobe") is not None and run(
        ["modprobe", "-n", "-q", "overlay"], check=False, capture=True, timeout=30).returncode == 0)
    if not overlay:
        problems.append("the kernel has no overlay filesystem (none in /proc/filesystems, no module "
                        "modprobe could load): the lab keeps one read-only base image and a writable "
                        "overlay per node")
    return {"ok": not problems, "problems": problems, "root": os.geteuid() == 0, "missing_tools": missing,
            "install_packages": pkgs if installable else [], "cgroup": layout, "overlay": overlay}


def _overlay_listed():
    try:
        with open("/proc/filesystems") as f:
            return any(line.split()[-1] == "overlay" for line in f if line.strip())
    except OSError:
        return False


def ensure_host(install=True):
    """Refuse (LabError) where the lab cannot run; install missing Debian packages if allowed."""
    report = check_host(install=install)
    if report["problems"]:
        raise LabError("this machine cannot run the GPU node lab:\n- " + "\n- ".join(report["problems"]))
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
