"""/boot directories as real distributions leave them after a kernel update (names, symlinks,
directories), for the reboot decision tests. Each layout: entries (name, kind[, target]) and the
release the machine runs before its reboot.

Sources: a Debian 12 cloud image after `apt upgrade` (linux-image-amd64 6.1.0-26 -> 6.1.0-27;
Debian keeps its /vmlinuz links in / unless link_in_boot is set), Ubuntu 22.04 and 24.04 server
after unattended-upgrades (linux-image-generic; /boot/vmlinuz and /boot/vmlinuz.old links made
by linux-base), Rocky Linux 9.4 after `dnf update kernel` (installonly kernels, BLS entries in
/boot/loader/entries, the rescue image made at install time, FIPS .hmac files).
"""

RESCUE = "vmlinuz-0-rescue-5b1d3a7e0f8c4b3e9a2d6c1f0e7a9b4c"

DEBIAN_12 = [
    ("System.map-6.1.0-26-amd64", "file"), ("System.map-6.1.0-27-amd64", "file"),
    ("config-6.1.0-26-amd64", "file"), ("config-6.1.0-27-amd64", "file"),
    ("grub", "dir"),
    ("initrd.img-6.1.0-26-amd64", "file"), ("initrd.img-6.1.0-27-amd64", "file"),
    ("vmlinuz-6.1.0-26-amd64", "file"), ("vmlinuz-6.1.0-27-amd64", "file"),
]
# Debian with link_in_boot = yes (and the 6.1.0-9 kernel still installed from 12.1)
DEBIAN_12_LINKS_IN_BOOT = [
    ("System.map-6.1.0-9-amd64", "file"), ("System.map-6.1.0-27-amd64", "file"),
    ("config-6.1.0-9-amd64", "file"), ("config-6.1.0-27-amd64", "file"),
    ("grub", "dir"),
    ("initrd.img", "link", "initrd.img-6.1.0-27-amd64"), ("initrd.img.old", "link", "initrd.img-6.1.0-9-amd64"),
    ("initrd.img-6.1.0-9-amd64", "file"), ("initrd.img-6.1.0-27-amd64", "file"),
    ("vmlinuz", "link", "vmlinuz-6.1.0-27-amd64"), ("vmlinuz.old", "link", "vmlinuz-6.1.0-9-amd64"),
    ("vmlinuz-6.1.0-9-amd64", "file"), ("vmlinuz-6.1.0-27-amd64", "file"),
]
UBUNTU_2204 = [
    ("System.map-5.15.0-97-generic", "file"), ("System.map-5.15.0-105-generic", "file"),
    ("config-5.15.0-97-generic", "file"), ("config-5.15.0-105-generic", "file"),
    ("efi", "dir"), ("grub", "dir"),
    ("initrd.img", "link", "initrd.img-5.15.0-105-generic"),
    ("initrd.img-5.15.0-105-generic", "file"), ("initrd.img-5.15.0-97-generic", "file"),
    ("initrd.img.old", "link", "initrd.img-5.15.0-97-generic"),
    ("vmlinuz", "link", "vmlinuz-5.15.0-105-generic"),
    ("vmlinuz-5.15.0-105-generic", "file"), ("vmlinuz-5.15.0-97-generic", "file"),
    ("vmlinuz.old", "link", "vmlinuz-5.15.0-97-generic"),
]
# 24.04 with a lowlatency kernel installed beside the generic one the node runs
UBUNTU_2404 = [
    ("System.map-6.8.0-45-generic", "file"), ("System.map-6.8.0-49-generic", "file"),
    ("System.map-6.8.0-51-lowlatency", "file"),
    ("config-6.8.0-45-generic", "file"), ("config-6.8.0-49-generic", "file"), ("config-6.8.0-51-lowlatency", "file"),
    ("efi", "dir"), ("grub", "dir"),
    ("initrd.img", "link", "initrd.img-6.8.0-49-generic"),
    ("initrd.img-6.8.0-45-generic", "file"), ("initrd.img-6.8.0-49-generic", "file"),
    ("initrd.img-6.8.0-51-lowlatency", "file"),
    ("initrd.img.old", "link", "initrd.img-6.8.0-45-generic"),
    ("vmlinuz", "link", "vmlinuz-6.8.0-49-generic"),
    ("vmlinuz-6.8.0-45-generic", "file"), ("vmlinuz-6.8.0-49-generic", "file"),
    ("vmlinuz-6.8.0-51-lowlatency", "file"),
    ("vmlinuz.old", "link", "vmlinuz-6.8.0-45-generic"),
]
ROCKY_9 = [
    (".vmlinuz-5.14.0-362.8.1.el9_3.x86_64.hmac", "file"), (".vmlinuz-5.14.0-427.13.1.el9_4.x86_64.hmac", "file"),
    ("System.map-5.14.0-362.8.1.el9_3.x86_64", "file"), ("System.map-5.14.0-427.13.1.el9_4.x86_64", "file"),
    ("config-5.14.0-362.8.1.el9_3.x86_64", "file"), ("config-5.14.0-427.13.1.el9_4.x86_64", "file"),
    ("efi", "dir"), ("grub2", "dir"), ("loader", "dir"),
    ("initramfs-0-rescue-5b1d3a7e0f8c4b3e9a2d6c1f0e7a9b4c.img", "file"),
    ("initramfs-5.14.0-362.8.1.el9_3.x86_64.img", "file"),
    ("initramfs-5.14.0-362.8.1.el9_3.x86_64kdump.img", "file"),
    ("initramfs-5.14.0-427.13.1.el9_4.x86_64.img", "file"),
    ("symvers-5.14.0-362.8.1.el9_3.x86_64.gz", "link", "/lib/modules/5.14.0-362.8.1.el9_3.x86_64/symvers.gz"),
    ("symvers-5.14.0-427.13.1.el9_4.x86_64.gz", "link", "/lib/modules/5.14.0-427.13.1.el9_4.x86_64/symvers.gz"),
    (RESCUE, "file"),
    ("vmlinuz-5.14.0-362.8.1.el9_3.x86_64", "file"), ("vmlinuz-5.14.0-427.13.1.el9_4.x86_64", "file"),
]
