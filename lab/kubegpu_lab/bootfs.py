"""Installed kernels in a lab node's /boot, as Debian, Ubuntu and RHEL-family systems lay them out.

A booted nspawn node runs the host's kernel, so the layout is built around the host's release
(``uname -r``): that kernel and an older one are "installed" (kernel image, initrd, config,
System.map with the distribution's names, symlinks and extras), and the profile switch
``boot.pending_kernel`` adds a newer release of the same flavour, as after an update that waits
for its reboot. The files are small placeholders: nothing boots from them, but every tool that
decides a reboot from /boot (kubegpu.fleet.reboot_need, needrestart, kured's checks) reads
exactly what it reads on a real node.

Profile keys (per node, under ``boot``): ``layout`` debian | ubuntu | rhel | none (default
debian, the lab's base image), ``pending_kernel`` (default false).
"""
import re

LAYOUTS = ("debian", "ubuntu", "rhel", "none")
RESCUE_ID = "0-rescue-%s"


def _bump(release, delta):
    """The release with its ABI/build number moved by ``delta``: the number right after the first
    ``-`` (Debian/Ubuntu ABI, RHEL build: 6.1.0-27-amd64 -> 6.1.0-28-amd64,
    5.14.0-427.13.1.el9_4.x86_64 -> 5.14.0-428.13.1.el9_4.x86_64), else the patch level of the
    leading x.y.z (6.12.7 -> 6.12.8, 6.18.44-fc-v669 -> 6.18.45-fc-v669)."""
    match = re.match(r"^(\d+\.\d+(?:\.\d+)?-)(\d+)(.*)$", release)
    if match:
        return match.group(1) + str(max(int(match.group(2)) + delta, 0)) + match.group(3)
    match = re.match(r"^(\d+\.\d+\.)(\d+)(.*)$", release) or re.match(r"^(\d+\.)(\d+)(.*)$", release)
    if not match:
        raise ValueError("kernel release %r does not start with a version" % release)
    return match.group(1) + str(max(int(match.group(2)) + delta, 0)) + match.group(3)


def newer_release(release):
    return _bump(release, 1)


def older_release(release):
    """A release before ``release`` (its ABI/build or patch number one lower; at zero, the
    previous minor version: 6.12.0 -> 6.11.0)."""
    older = _bump(release, -1)
    if older != release:
        return older
    match = re.match(r"^(\d+)\.(\d+)(.*)$", release)
    if not match or int(match.group(2)) == 0:
        raise ValueError("no release before %r to lay out" % release)
    return "%s.%d%s" % (match.group(1), int(match.group(2)) - 1, match.group(3))


def boot_entries(layout, running, pending_kernel=False, machine_id="0" * 32):
    """[(path in the node, kind, data)]: kind ``file`` (data: content), ``link`` (data: target) or
    ``dir``. Paths are absolute inside the node's root."""
    if layout not in LAYOUTS:
        raise ValueError("boot.layout must be one of %s, not %r" % (", ".join(LAYOUTS), layout))
    if layout == "none":
        return []
    releases = [older_release(running), running] + ([newer_release(running)] if pending_kernel else [])
    newest, previous = releases[-1], releases[-2]
    out = []

    def image(release):
        return ("placeholder kernel image %s (kubegpu.fleet lab)\n" % release).encode()

    if layout in ("debian", "ubuntu"):
        out.append(("/boot/grub", "dir", None))
        if layout == "ubuntu":
            out.append(("/boot/efi", "dir", None))
        for rel in releases:
            out += [("/boot/vmlinuz-%s" % rel, "file", image(rel)),
                    ("/boot/initrd.img-%s" % rel, "file", b"initramfs placeholder\n"),
                    ("/boot/config-%s" % rel, "file", ("# Linux/x86 %s Kernel Configuration\n" % rel).encode()),
                    ("/boot/System.map-%s" % rel, "file", b"ffffffff81000000 T _stext\n")]
        # Debian keeps its links in / (link_in_boot = no); Ubuntu's linux-base puts them in /boot
        where = "/boot" if layout == "ubuntu" else ""
        prefix = "" if layout == "ubuntu" else "boot/"
        out += [(where + "/vmlinuz", "link", prefix + "vmlinuz-" + newest),
                (where + "/vmlinuz.old", "link", prefix + "vmlinuz-" + previous),
                (where + "/initrd.img", "link", prefix + "initrd.img-" + newest),
                (where + "/initrd.img.old", "link", prefix + "initrd.img-" + previous)]
    else:
        rescue = RESCUE_ID % machine_id
        out += [("/boot/efi", "dir", None), ("/boot/grub2", "dir", None), ("/boot/loader/entries", "dir", None),
                ("/boot/vmlinuz-%s" % rescue, "file", image(releases[0])),
                ("/boot/initramfs-%s.img" % rescue, "file", b"initramfs placeholder\n")]
        for rel in releases:
            out += [("/boot/vmlinuz-%s" % rel, "file", image(rel)),
                    ("/boot/.vmlinuz-%s.hmac" % rel, "file", ("0000  vmlinuz-%s\n" % rel).encode()),
                    ("/boot/initramfs-%s.img" % rel, "file", b"initramfs placeholder\n"),
                    ("/boot/config-%s" % rel, "file", ("# Linux/x86_64 %s Kernel Configuration\n" % rel).encode()),
                    ("/boot/System.map-%s" % rel, "file", b"ffffffff81000000 T _stext\n"),
                    ("/boot/symvers-%s.gz" % rel, "link", "/lib/modules/%s/symvers.gz" % rel),
                    ("/boot/loader/entries/%s-%s.conf" % (machine_id, rel), "file",
                     ("title Lab Linux (%s)\nversion %s\nlinux /vmlinuz-%s\ninitrd /initramfs-%s.img\n"
                      % (rel, rel, rel, rel)).encode())]
        out.append(("/boot/loader/entries/%s-%s.conf" % (machine_id, rescue), "file",
                    ("title Lab Linux (0-rescue-%s)\nlinux /vmlinuz-%s\n" % (machine_id, rescue)).encode()))
    return out


def validate(boot, where, name):
    """Normalise a node's ``boot`` profile key; return an error message or None."""
    if not isinstance(boot, dict):
        return "%s: node %s: boot must be a mapping (layout, pending_kernel), not %r" % (where, name, boot)
    if boot.get("layout") not in LAYOUTS:
        return "%s: node %s: boot.layout must be one of %s, not %r" % (
            where, name, ", ".join(LAYOUTS), boot.get("layout"))
    if not isinstance(boot.get("pending_kernel"), bool):
        return "%s: node %s: boot.pending_kernel must be true or false, not %r" % (
            where, name, boot.get("pending_kernel"))
    return None
