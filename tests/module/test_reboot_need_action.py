"""kubegpu.fleet.reboot_need through real ansible-playbook: /boot directories laid out on disk as
Debian 12, Ubuntu 22.04/24.04 and Rocky 9 leave them (regular files, symlinks, directories), the
running release in a fake procfs, the sentinels in a fake /run. The real action runs the real
ansible.builtin.find and slurp on "the node" (localhost) and decides on the controller."""
import os

from ansible_collections.kubegpu.fleet.tests.unit.plugins.plugin_utils.boot_layouts import (
    DEBIAN_12, ROCKY_9, UBUNTU_2204, UBUNTU_2404)

ENV = {"ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.json"}
# no grub.cfg, grubenv or BLS entry in these trees: /boot decides, and the reason says so
BY_BOOT = "next boot's kernel unknown (no boot loader state found); by /boot: "


def lay_out(root, layout):
    os.makedirs(root)
    for entry in layout:
        path = os.path.join(root, entry[0])
        if entry[1] == "dir":
            os.makedirs(path)
        elif entry[1] == "link":
            os.symlink(entry[2], path)
        else:
            with open(path, "wb") as f:
                f.write(b"\x7fELF")
    return root


def fake_proc(root, release):
    os.makedirs(os.path.join(root, "sys", "kernel"))
    with open(os.path.join(root, "sys", "kernel", "osrelease"), "w") as f:
        f.write(release + "\n")
    return root


CASES = [
    # name, layout, running, sentinel, expected reboot, expected reasons
    ("debian-current", DEBIAN_12, "6.1.0-27-amd64", False, False, []),
    ("debian-pending", DEBIAN_12, "6.1.0-26-amd64", False, True,
     [BY_BOOT + "kernel 6.1.0-27-amd64 is installed, 6.1.0-26-amd64 is running"]),
    ("ubuntu2204-current", UBUNTU_2204, "5.15.0-105-generic", False, False, []),
    ("ubuntu2204-pending", UBUNTU_2204, "5.15.0-97-generic", False, True,
     [BY_BOOT + "kernel 5.15.0-105-generic is installed, 5.15.0-97-generic is running"]),
    ("ubuntu2404-flavours", UBUNTU_2404, "6.8.0-49-generic", False, False, []),
    ("rocky9-current", ROCKY_9, "5.14.0-427.13.1.el9_4.x86_64", False, False, []),
    ("rocky9-sentinel", ROCKY_9, "5.14.0-427.13.1.el9_4.x86_64", True, True, ["sentinel {run}/reboot-required"]),
]


def test_reboot_need_over_real_boot_directories(ansible, tmp_path):
    tasks = []
    expected = {}
    for name, layout, running, sentinel, reboot, reasons in CASES:
        base = tmp_path / name
        boot = lay_out(str(base / "boot"), layout)
        proc = fake_proc(str(base / "proc"), running)
        run = str(base / "run")
        os.makedirs(run)
        os.symlink(run, str(base / "varrun"))   # /var/run -> /run: one sentinel, two paths
        if sentinel:
            with open(os.path.join(run, "reboot-required"), "w") as f:
                f.write("*** System restart required ***\n")
        tasks.append({"name": name, "kubegpu.fleet.reboot_need": {
            "boot_path": boot, "proc_path": proc, "check_driver": False,
            "sentinels": [run + "/reboot-required", str(base / "varrun") + "/reboot-required"]}})
        expected[name] = (reboot, [r.format(run=run) for r in reasons], running)
    res = ansible.playbook([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}], env=ENV)
    assert res.rc == 0, res.stdout[-4000:] + res.stderr[-2000:]
    for name, (reboot, reasons, running) in expected.items():
        out = res.task(name)
        need = out["need"]
        assert need["reboot"] is reboot, (name, need)
        assert need["reasons"] == reasons, (name, need)
        assert need["kernel"]["running"] == running
        assert out["ansible_facts"]["kubegpu_rolling_reboot_need"] == need
        assert out["changed"] is False


def test_reboot_need_rejects_a_relative_path_naming_it(ansible):
    out = ansible.module("reboot_need", {"boot_path": "boot", "check_driver": False}, env=ENV)
    assert out["_rc"] != 0
    assert "must be absolute paths: boot" in out["msg"]
