"""The cached Debian base image every lab node overlays.

``debootstrap --variant=minbase`` of bookworm plus the few packages a GPU node needs for the
collection (python3 with yaml and apt bindings for Ansible, systemd, sshd, kmod, udev), then
trimmed so a node idles at a few tens of MiB: no getty, no logind, no apt/fstrim timers, a
volatile journal, no Debian apt sources (nodes only see the lab's driver repository) and no
ssh host keys or machine-id (each node gets its own). Built once per key (suite, package list,
trim recipe) under the cache directory and reused read-only as the overlay lower layer.
"""
import hashlib
import json
import os
import re
import shutil
import time

from .util import file_lock, log, run, write_file, write_json

SUITE = "bookworm"
INCLUDE = ["python3", "python3-yaml", "python3-apt", "systemd", "systemd-sysv",
           "openssh-server", "iproute2", "kmod", "procps", "udev", "util-linux", "python3-fusepy",
           "dbus", "libpam-systemd"]
# Units a lab node does not need: they cost memory and boot time or would run apt in every
# node at once. Masked, not removed, so the packages look installed as on a real node.
MASK_UNITS = [
    "console-getty.service", "getty@.service", "getty.target",
    "apt-daily.timer", "apt-daily-upgrade.timer", "dpkg-db-backup.timer", "fstrim.timer",
    "e2scrub_all.timer", "e2scrub_reap.service", "systemd-udevd.service",
    "systemd-udev-trigger.service", "systemd-udev-settle.service", "systemd-udevd-control.socket",
    "systemd-udevd-kernel.socket", "systemd-hwdb-update.service", "systemd-journal-catalog-update.service",
    "man-db.timer",
]
RECIPE_VERSION = 3
JOURNALD_CONF = """[Journal]
Storage=volatile
RuntimeMaxUse=16M
ForwardToConsole=no
ForwardToWall=no
"""


def default_mirror():
    mirror = os.environ.get("KUBEGPU_LAB_MIRROR")
    if mirror:
        return mirror
    for path in ("/etc/apt/sources.list.d/debian.sources", "/etc/apt/sources.list"):
        try:
            with open(path) as f:
                text = f.read()
        except OSError:
            continue
        m = re.search(r"^(?:URIs:\s*|deb\s+(?:\[[^\]]*\]\s+)?)(https?://\S+/debian)/?\s*$", text, re.M)
        if m:
            return m.group(1)
    return "http://deb.debian.org/debian"


def base_key():
    h = hashlib.sha256(json.dumps({"suite": SUITE, "include": INCLUDE, "mask": MASK_UNITS,
                                   "recipe": RECIPE_VERSION}, sort_keys=True).encode())
    return "%s-%s" % (SUITE, h.hexdigest()[:12])


def base_dir(cache):
    return os.path.join(cache, "base", base_key())


def ensure_base(cache, rebuild=False):
    """Return the rootfs path of the cached base image, building it when needed."""
    target = base_dir(cache)
    rootfs = os.path.join(target, "rootfs")
    with file_lock(os.path.join(cache, "base", ".lock"), what="base image"):
        if rebuild and os.path.isdir(target):
            shutil.rmtree(target)
        if os.path.exists(os.path.join(target, "complete.json")):
            return rootfs
        tmp = target + ".building"
        if os.path.exists(tmp):
            shutil.rmtree(tmp)
        os.makedirs(tmp)
        started = time.monotonic()
        mirror = default_mirror()
        log("building the node base image (debootstrap %s from %s, about a minute, cached in %s)",
            SUITE, mirror, target)
        run(["debootstrap", "--variant=minbase", "--include=" + ",".join(INCLUDE), SUITE,
             os.path.join(tmp, "rootfs"), mirror], capture=True)
        trim(os.path.join(tmp, "rootfs"))
        write_json(os.path.join(tmp, "complete.json"),
                   {"suite": SUITE, "include": INCLUDE, "mirror": mirror, "recipe": RECIPE_VERSION,
                    "seconds": round(time.monotonic() - started, 1)})
        os.rename(tmp, target)
        log("base image ready in %.0f s", time.monotonic() - started)
    return rootfs


def trim(rootfs):
    """Make the debootstrapped tree a lean, per-node-neutral node image."""
    def p(*parts):
        return os.path.join(rootfs, *parts)

    for name in os.listdir(p("etc", "ssh")):
        if name.startswith("ssh_host_"):
            os.unlink(p("etc", "ssh", name))
    write_file(p("etc", "machine-id"), "")
    for rel in ("etc/apt/sources.list",):
        if os.path.exists(p(rel)):
            os.unlink(p(rel))
    srcd = p("etc", "apt", "sources.list.d")
    for name in os.listdir(srcd) if os.path.isdir(srcd) else []:
        os.unlink(os.path.join(srcd, name))
    run(["rm", "-rf", p("var", "lib", "apt", "lists"), p("var", "cache", "apt", "archives")])
    os.makedirs(p("var", "lib", "apt", "lists", "partial"), exist_ok=True)
    os.makedirs(p("var", "cache", "apt", "archives", "partial"), exist_ok=True)
    for unit in MASK_UNITS:
        link = p("etc", "systemd", "system", unit)
        if os.path.lexists(link):
            os.unlink(link)
        os.symlink("/dev/null", link)
    write_file(p("etc", "systemd", "journald.conf.d", "kubegpu-lab.conf"), JOURNALD_CONF)
    # Nodes answer Ansible over ssh with many forks at once.
    write_file(p("etc", "ssh", "sshd_config.d", "00-kubegpu-lab-base.conf"),
               "UseDNS no\nMaxStartups 100:30:200\nMaxSessions 100\nPrintMotd no\n")
    write_file(p("etc", "motd"), "")
    # apt inside a node must never wait for a terminal
    write_file(p("etc", "apt", "apt.conf.d", "90kubegpu-lab"),
               'APT::Install-Recommends "true";\nDpkg::Use-Pty "0";\n')
