"""The lab's boot loader state (lab/kubegpu_lab/bootfs.py) read by the collection's node reader
(plugins/module_utils/boot/facts.py): for every layout, the kernel releases real machines run,
with and without a pending kernel and a newer kernel of another flavour, the next boot starts the
kernel the profile's ``boot.default`` says, found the way a real node's GRUB finds it; the
grubenv is the block Debian's grub-editenv writes, byte for byte."""
import os
import shutil
import subprocess

import pytest

from ansible_collections.kubegpu.fleet.plugins.module_utils.boot import facts, formats

from ansible_collections.kubegpu.fleet.lab.kubegpu_lab import bootfs

RELEASES = ["6.1.0-27-amd64", "5.15.0-105-generic", "6.8.0-50-generic", "5.14.0-427.13.1.el9_4.x86_64",
            "6.12.7", "6.18.44-fc-v669", os.uname().release]
MACHINE_ID = "ab" * 16


def lay_out(root, entries):
    """The lab's entries written under ``root`` as node.py's install_boot writes them."""
    for path, kind, data in entries:
        full = os.path.join(root, path.lstrip("/"))
        if kind == "dir":
            os.makedirs(full, exist_ok=True)
        elif kind == "link":
            os.makedirs(os.path.dirname(full), exist_ok=True)
            os.symlink(data, full)
        else:
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "wb") as fh:
                fh.write(data)


def read(root, running):
    os.makedirs(os.path.join(root, "proc", "sys", "kernel"))
    with open(os.path.join(root, "proc", "sys", "kernel", "osrelease"), "w") as fh:
        fh.write(running + "\n")
    return facts.boot_facts({"boot_path": os.path.join(root, "boot"), "esp_paths": [os.path.join(root, "boot", "efi")],
                             "proc_path": os.path.join(root, "proc"), "sys_path": os.path.join(root, "sys"),
                             "run_path": os.path.join(root, "run"), "commands": False, "timeout": 5})


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("layout", ["debian", "ubuntu", "rhel"])
@pytest.mark.parametrize("pending, other, default", [
    (False, False, "newest"), (True, False, "newest"), (False, True, "newest"), (True, True, "newest"),
    (True, True, "running"), (False, True, "running")])
def test_the_lab_boots_what_its_boot_loader_says(tmp_path, layout, release, pending, other, default):
    root = str(tmp_path)
    lay_out(root, bootfs.boot_entries(layout, release, pending, MACHINE_ID, other, default))
    out = read(root, release)
    assert out["problems"] == [] and out["running"] == release
    assert out["loader"] == ("grub-bls" if layout == "rhel" else "grub")
    if default == "running":
        expected = release
    elif other:
        expected = bootfs.other_flavour_release(release, layout)
    elif pending:
        expected = bootfs.newer_release(release)
    else:
        expected = release
    assert out["next_kernel"] == expected, out["how"]
    assert out["default"]["matched"] is True and out["once"] is None
    # the menu lists every installed kernel; on Debian/Ubuntu the newest by sort -V comes first
    kernels = set(e["kernel"] for e in out["entries"] if e["kernel"])
    installed = set([bootfs.older_release(release), release]
                    + ([bootfs.newer_release(release)] if pending else [])
                    + ([bootfs.other_flavour_release(release, layout)] if other else []))
    assert kernels == installed
    assert out["entries"][0]["kernel"] == max(installed, key=bootfs.version_sort_key)


def test_other_flavours_are_other_flavours_and_sort_first():
    from ansible_collections.kubegpu.fleet.plugins.plugin_utils.rollout import reboot_need as rn
    for layout in ("debian", "ubuntu", "rhel"):
        for release in RELEASES:
            other = bootfs.other_flavour_release(release, layout)
            assert rn.flavour(other) != rn.flavour(release), (layout, release, other)
            assert bootfs.version_sort_key(other) > bootfs.version_sort_key(bootfs.newer_release(release))
    assert bootfs.other_flavour_release("6.8.0-50-generic", "ubuntu") == "6.8.0-1050-nvidia"
    assert bootfs.other_flavour_release("6.1.0-27-amd64", "debian") == "6.1.0-28-rt-amd64"
    assert bootfs.other_flavour_release("5.14.0-427.13.1.el9_4.x86_64", "rhel") == "5.14.0-428.13.1.el9_4.x86_64+rt"


def test_grubenv_block_format():
    block = bootfs.grubenv_block([("saved_entry", "a>b"), ("weird", "x\\y\nz")])
    assert len(block) == 1024 and block.endswith(b"#")
    assert block.startswith(bootfs.GRUBENV_SIGNATURE + bootfs.GRUBENV_WARNING + b"saved_entry=a>b\nweird=x\\\\y\\\nz\n#")
    assert formats.parse_grubenv(block) == {"saved_entry": "a>b", "weird": "x\\y\nz"}
    with pytest.raises(ValueError):
        bootfs.grubenv_block([("saved_entry", "x" * 1000)])


@pytest.mark.skipif(shutil.which("grub-editenv") is None, reason="grub-editenv (grub-common) is not installed here")
def test_grubenv_block_is_what_grub_editenv_writes(tmp_path):
    """Debian 12's grub-editenv, the real one, writes the same 1024 bytes."""
    variables = [("saved_entry", "gnulinux-advanced-ab>gnulinux-6.1.0-27-amd64-advanced-ab"), ("boot_success", "0"),
                 ("odd", "back\\slash and\nnewline")]
    path = str(tmp_path / "grubenv")
    subprocess.run(["grub-editenv", path, "create"], check=True, timeout=30)
    subprocess.run(["grub-editenv", path, "set"] + ["%s=%s" % kv for kv in variables], check=True, timeout=30)
    with open(path, "rb") as fh:
        assert fh.read() == bootfs.grubenv_block(variables)
    subprocess.run(["grub-editenv", path, "create"], check=True, timeout=30)
    os.unlink(path)
    subprocess.run(["grub-editenv", path, "create"], check=True, timeout=30)
    with open(path, "rb") as fh:
        assert fh.read() == bootfs.grubenv_block([])


def test_profile_keys():
    assert bootfs.validate({"layout": "ubuntu", "pending_kernel": False, "other_flavour": True, "default": "running"},
                           "p", "n") is None
    assert bootfs.validate({"layout": "ubuntu", "pending_kernel": False}, "p", "n") is None
    assert "boot.other_flavour must be true or false" in bootfs.validate(
        {"layout": "ubuntu", "pending_kernel": False, "other_flavour": "yes"}, "p", "n")
    assert "boot.default must be one of newest, running" in bootfs.validate(
        {"layout": "ubuntu", "pending_kernel": False, "default": "oldest"}, "p", "n")
    with pytest.raises(ValueError):
        bootfs.boot_entries("debian", "6.1.0-27-amd64", default="oldest")
