"""The kernel part of the reboot decision asks the boot loader (plugin_utils/rollout/reboot_need.py,
boot_loader_check and decide(boot=...)): the next boot's kernel against the running one, whatever
the flavour; the default entry being the running kernel is no reason even with a newer kernel
installed; an unknown answer falls back to /boot and says so; the distribution's answers are
further reasons or notes. The end-to-end cases lay the lab's /boot and boot loader state out in
tmp_path and read it with the real node reader (module_utils/boot/facts.py)."""
import os

import pytest

from ansible_collections.kubegpu.fleet.plugins.module_utils.boot import facts
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.rollout import reboot_need as rn

from ansible_collections.kubegpu.fleet.lab.kubegpu_lab import bootfs

UBUNTU = ("vmlinuz-6.8.0-49-generic", "vmlinuz-6.8.0-50-generic", "vmlinuz-6.8.0-1015-nvidia")


def boot(next_kernel, title="Ubuntu", once=None, loader="grub", **extra):
    out = {"loader": loader, "next_kernel": next_kernel, "running": "6.8.0-50-generic",
           "default": {"kernel": next_kernel, "title": title} if next_kernel else None,
           "once": once, "how": ["/boot/grub/grub.cfg: grub.cfg set default=0 -> Ubuntu"], "problems": [],
           "distribution": {"needrestart": None, "dnf_needs_restarting": None,
                            "reboot_required": {"exists": False, "packages": []}}}
    out.update(extra)
    return out


def decide(boot_result, running="6.8.0-50-generic", entries=UBUNTU, sentinels=None):
    return rn.decide(mode="needed", running=running, boot_entries=list(entries), boot=boot_result, check_driver=False,
                     sentinels=sentinels)


def test_a_newer_kernel_of_another_flavour_set_as_default_reboots():
    need = decide(boot("6.8.0-1015-nvidia"))
    assert need["reboot"] is True
    assert need["reasons"] == ["the boot loader's default entry (Ubuntu) starts kernel 6.8.0-1015-nvidia "
                               "(another flavour, newer), 6.8.0-50-generic is running"]
    assert need["kernel"]["basis"] == "boot loader" and need["kernel"]["next_kernel"] == "6.8.0-1015-nvidia"
    # the /boot comparison alone would not have seen it (not the running flavour)
    assert rn.kernel_check("6.8.0-50-generic", UBUNTU)["pending"] is False


def test_the_default_entry_running_is_no_reason_even_with_a_newer_kernel_installed():
    entries = UBUNTU + ("vmlinuz-6.8.0-51-generic",)
    assert rn.kernel_check("6.8.0-50-generic", entries)["pending"] is True      # what /boot alone says
    need = decide(boot("6.8.0-50-generic", title="Ubuntu, with Linux 6.8.0-50-generic"), entries=entries)
    assert need["reboot"] is False and need["pending_reasons"] == []
    assert need["kernel"]["reason"] == (
        "the boot loader's default entry (Ubuntu, with Linux 6.8.0-50-generic) starts the running kernel "
        "6.8.0-50-generic: a reboot would start it again (6.8.0-1015-nvidia, 6.8.0-51-generic installed, "
        "not the default)")
    assert need["msg"].startswith("no reboot needed (kubegpu_reboot=needed): the boot loader's default entry")


def test_an_older_pinned_kernel_and_a_one_shot_entry():
    need = decide(boot("6.8.0-49-generic", title="Ubuntu, with Linux 6.8.0-49-generic"))
    assert need["reasons"] == ["the boot loader's default entry (Ubuntu, with Linux 6.8.0-49-generic) starts kernel "
                               "6.8.0-49-generic (older), 6.8.0-50-generic is running"]
    once = {"kernel": "6.8.0-49-generic", "title": "Ubuntu, with Linux 6.8.0-49-generic"}
    need = decide(boot("6.8.0-49-generic", once=once))
    assert need["reasons"] == ["the boot loader's next-boot-only entry (Ubuntu, with Linux 6.8.0-49-generic) "
                               "starts kernel 6.8.0-49-generic (older), 6.8.0-50-generic is running"]
    assert need["kernel"]["once"] is True


def test_unknown_boot_loader_falls_back_to_boot_and_says_so():
    entries = UBUNTU + ("vmlinuz-6.8.0-51-generic",)
    need = decide(boot(None, loader="unknown"), entries=entries)
    assert need["reasons"] == ["next boot's kernel unknown (no boot loader state found); by /boot: "
                               "kernel 6.8.0-51-generic is installed, 6.8.0-50-generic is running"]
    assert need["kernel"]["basis"] == "/boot"
    need = decide(boot(None, loader="grub-bls"), entries=entries)
    assert need["reasons"][0].startswith("next boot's kernel unknown (the grub-bls default entry names no kernel "
                                         "release); by /boot: ")
    need = decide({"failed": True, "msg": "boot_path must not contain '..'"}, entries=UBUNTU)
    assert need["reboot"] is False
    assert need["kernel"]["reason"] == ("next boot's kernel unknown (boot loader not read: boot_path must not "
                                        "contain '..'); by /boot: the running kernel 6.8.0-50-generic is the "
                                        "newest installed")
    # not asked at all: the /boot comparison as it always was
    assert decide(None, entries=entries)["reasons"] == ["kernel 6.8.0-51-generic is installed, 6.8.0-50-generic is running"]


def test_distribution_answers():
    dist = {"needrestart": {"ksta": "3", "kcur": "6.8.0-50-generic", "kexp": "6.8.0-51-generic"},
            "dnf_needs_restarting": {"required": True},
            "reboot_required": {"exists": True, "packages": ["linux-image-6.8.0-51-generic", "libc6"]}}
    need = decide(boot(None, loader="unknown", distribution=dist), sentinels=["/run/reboot-required"])
    assert need["reasons"] == [
        "sentinel /run/reboot-required (packages: linux-image-6.8.0-51-generic, libc6)",
        "dnf needs-restarting -r: reboot is required",
        "needrestart: kernel 6.8.0-51-generic expected, 6.8.0-50-generic running (version upgrade pending)"]
    # the boot loader starts the running kernel: needrestart's newest image is noted, not counted
    need = decide(boot("6.8.0-50-generic", distribution=dict(dist, dnf_needs_restarting={"required": False})))
    assert need["reboot"] is False
    assert need["kernel"]["notes"] == ["needrestart: kernel 6.8.0-51-generic expected, 6.8.0-50-generic running "
                                       "(version upgrade pending); not counted: the boot loader's default entry "
                                       "starts the running kernel"]
    # dnf's answer without a kernel change still counts (core libraries)
    need = decide(boot("6.8.0-50-generic", distribution={"dnf_needs_restarting": {"required": True}}))
    assert need["reasons"] == ["dnf needs-restarting -r: reboot is required"]


@pytest.mark.parametrize("hostile", [
    {"next_kernel": "/etc/passwd"}, {"next_kernel": "6.8.0 50"}, {"next_kernel": "x" * 10000},
    {"next_kernel": ["6.8.0-1015-nvidia"]}, {"next_kernel": "generic-6.8"}, {"how": "not a list"},
    {"distribution": "no"}, {"distribution": {"needrestart": {"ksta": 3, "kexp": {"a": 1}}}},
    {"default": ["x"], "once": "y"}])
def test_hostile_boot_facts_never_raise_and_never_invent_a_kernel(hostile):
    result = dict(boot("6.8.0-50-generic"), **hostile)
    need = decide(result, entries=UBUNTU)
    kernel = need["kernel"]
    assert kernel["next_kernel"] in (None, "6.8.0-50-generic")
    assert all(isinstance(h, str) and len(h) <= rn.BOOT_TEXT_CHARS for h in kernel["how"])
    big = dict(boot("6.8.0-50-generic"), how=["y" * 5000] * 500, problems=["z" * 5000] * 500)
    kernel = decide(big)["kernel"]
    assert len(kernel["how"]) == rn.BOOT_HOW_ITEMS and len(kernel["how"][0]) == rn.BOOT_TEXT_CHARS
    assert len(kernel["notes"]) == rn.BOOT_HOW_ITEMS


def lab_node(tmp_path, layout, running, pending, other, default):
    root = str(tmp_path)
    for path, kind, data in bootfs.boot_entries(layout, running, pending, "cd" * 16, other, default):
        full = os.path.join(root, path.lstrip("/"))
        if kind == "dir":
            os.makedirs(full, exist_ok=True)
            continue
        os.makedirs(os.path.dirname(full), exist_ok=True)
        if kind == "link":
            os.symlink(data, full)
        else:
            with open(full, "wb") as fh:
                fh.write(data)
    os.makedirs(os.path.join(root, "proc", "sys", "kernel"))
    with open(os.path.join(root, "proc", "sys", "kernel", "osrelease"), "w") as fh:
        fh.write(running + "\n")
    result = facts.boot_facts({"boot_path": os.path.join(root, "boot"), "esp_paths": [os.path.join(root, "efi")],
                               "proc_path": os.path.join(root, "proc"), "sys_path": os.path.join(root, "sys"),
                               "run_path": os.path.join(root, "run"), "commands": False, "timeout": 5})
    names = sorted(n for n in os.listdir(os.path.join(root, "boot")) if n.startswith("vmlinuz-"))
    return rn.decide(mode="needed", running=running, boot_entries=names, boot=result, check_driver=False)


@pytest.mark.parametrize("layout, running", [("ubuntu", "6.8.0-50-generic"), ("debian", "6.1.0-27-amd64"),
                                             ("rhel", "5.14.0-427.13.1.el9_4.x86_64")])
def test_lab_nodes_decide_by_their_boot_loader(tmp_path, layout, running):
    other = bootfs.other_flavour_release(running, layout)
    need = lab_node(tmp_path / "other", layout, running, False, True, "newest")
    assert need["reboot"] is True and need["kernel"]["next_kernel"] == other
    assert "starts kernel %s (another flavour, newer), %s is running" % (other, running) in need["reasons"][0]
    need = lab_node(tmp_path / "pinned", layout, running, True, True, "running")
    assert need["reboot"] is False, need["reasons"]
    assert "a reboot would start it again" in need["kernel"]["reason"]
    need = lab_node(tmp_path / "pending", layout, running, True, False, "newest")
    assert need["reboot"] is True and need["kernel"]["next_kernel"] == bootfs.newer_release(running)
    need = lab_node(tmp_path / "idle", layout, running, False, False, "newest")
    assert need["reboot"] is False and need["kernel"]["basis"] == "boot loader"
