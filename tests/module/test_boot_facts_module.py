"""kubegpu.fleet.boot_facts through real ansible-playbook (AnsiballZ, argument spec, check mode) on
boot trees in tmp_path: the lab's Ubuntu layout with a newer -nvidia kernel that grub-mkconfig lists
first, the same with the running kernel pinned (GRUB_DEFAULT=saved), Rocky 9 (blscfg, BLS entries,
grubby's saved_entry, grubby itself a small script on PATH printing what grubby prints), a Debian
grub.cfg beside a FIFO grubenv; and a bad option failing with the option named."""
import os
import shutil

from ansible_collections.kubegpu.fleet.lab.kubegpu_lab import bootfs

FIX = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "boot")
ENV = {"ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.json"}


def lay_out(root, entries):
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


def node(root, running):
    os.makedirs(os.path.join(root, "proc", "sys", "kernel"), exist_ok=True)
    with open(os.path.join(root, "proc", "sys", "kernel", "osrelease"), "w") as fh:
        fh.write(running + "\n")
    return {"boot_path": os.path.join(root, "boot"), "esp_paths": [os.path.join(root, "boot", "efi")],
            "proc_path": os.path.join(root, "proc"), "sys_path": os.path.join(root, "sys"),
            "run_path": os.path.join(root, "run"), "commands": False, "timeout": 5}


def test_boot_facts_module(ansible, tmp_path):
    running = "6.8.0-50-generic"
    cases = {}
    root = str(tmp_path / "ubuntu-newest")
    lay_out(root, bootfs.boot_entries("ubuntu", running, False, "ab" * 16, True, "newest"))
    cases["ubuntu-newest"] = (node(root, running), "grub", "6.8.0-1050-nvidia")
    root = str(tmp_path / "ubuntu-pinned")
    lay_out(root, bootfs.boot_entries("ubuntu", running, True, "ab" * 16, True, "running"))
    cases["ubuntu-pinned"] = (node(root, running), "grub", running)
    root = str(tmp_path / "rocky")
    shutil.copytree(os.path.join(FIX, "rocky9", "loader"), os.path.join(root, "boot", "loader"))
    os.makedirs(os.path.join(root, "boot", "grub2"))
    for name in ("grub.cfg", "grubenv"):
        shutil.copyfile(os.path.join(FIX, "rocky9", "grub2", name), os.path.join(root, "boot", "grub2", name))
    cases["rocky"] = (node(root, "5.14.0-362.8.1.el9_3.x86_64"), "grub-bls", "5.14.0-427.13.1.el9_4.x86_64")
    root = str(tmp_path / "debian-fifo")
    os.makedirs(os.path.join(root, "boot", "grub"))
    shutil.copyfile(os.path.join(FIX, "debian12-grub.cfg"), os.path.join(root, "boot", "grub", "grub.cfg"))
    os.mkfifo(os.path.join(root, "boot", "grub", "grubenv"))
    cases["debian-fifo"] = (node(root, "6.1.0-26-amd64"), "grub", "6.1.0-27-amd64")
    tasks = [{"name": name, "kubegpu.fleet.boot_facts": args} for name, (args, _l, _k) in sorted(cases.items())]
    for check in (False, True):
        res = ansible.playbook([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}], check=check, env=ENV)
        assert res.rc == 0, res.stdout[-4000:] + res.stderr[-2000:]
        for name, (args, loader, kernel) in cases.items():
            out = res.task(name)
            assert out["changed"] is False
            assert (out["loader"], out["next_kernel"]) == (loader, kernel), (name, out["how"], out["problems"])
    fifo = res.task("debian-fifo")
    assert fifo["problems"] == ["%s is a FIFO; refusing to read it" % os.path.join(
        str(tmp_path), "debian-fifo", "boot", "grub", "grubenv")]


def test_boot_facts_asks_grubby_on_path(ansible, tmp_path):
    root = str(tmp_path)
    shutil.copytree(os.path.join(FIX, "rocky9", "loader"), os.path.join(root, "boot", "loader"))
    bindir = os.path.join(root, "bin")
    os.makedirs(bindir)
    with open(os.path.join(bindir, "grubby"), "w") as fh:
        fh.write("#!/bin/sh\n[ \"$1\" = --default-kernel ] || exit 2\necho /boot/vmlinuz-5.14.0-362.8.1.el9_3.x86_64\n")
    os.chmod(os.path.join(bindir, "grubby"), 0o755)
    args = dict(node(root, "5.14.0-427.13.1.el9_4.x86_64"), commands=True)
    out = ansible.module("boot_facts", args, env=dict(ENV, PATH=bindir + os.pathsep + os.environ["PATH"]))
    assert out["_rc"] == 0, out
    assert (out["loader"], out["next_kernel"]) == ("grub-bls", "5.14.0-362.8.1.el9_3.x86_64")
    assert out["how"][-1] == "grubby --default-kernel: /boot/vmlinuz-5.14.0-362.8.1.el9_3.x86_64"


def test_boot_facts_rejects_a_bad_option_naming_it(ansible):
    out = ansible.module("boot_facts", {"boot_path": "/boot/../etc", "commands": False}, env=ENV)
    assert out["_rc"] != 0 and out["failed"] is True
    assert out["msg"] == "boot_path must not contain '..', got '/boot/../etc'"
    out = ansible.module("boot_facts", {"timeout": 1000}, env=ENV)
    assert out["msg"] == "timeout must be between 0.1 and 600 seconds, got 1000.0"
