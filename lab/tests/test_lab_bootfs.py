"""The lab's /boot layouts (lab/kubegpu_lab/bootfs.py) read by the collection's reboot decision:
the running kernel is the newest unless the profile adds a pending one, for every layout and for
the kernel releases real machines run (the lab builds around the host's uname -r)."""
import os

import pytest

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.rollout import reboot_need as rn

from ansible_collections.kubegpu.fleet.lab.kubegpu_lab import bootfs


RELEASES = ["6.12.0", "6.1.0-27-amd64", "5.15.0-105-generic", "6.8.0-9-generic", "5.14.0-427.13.1.el9_4.x86_64",
            "6.12.7", "6.18.44-fc-v669", "6.10.11+bpo-amd64", os.uname().release]


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("layout", ["debian", "ubuntu", "rhel"])
def test_lab_layouts_decide_like_real_ones(layout, release):
    current = [p for p, kind, _d in bootfs.boot_entries(layout, release, False, "ab" * 16) if p.startswith("/boot/")]
    pending = [p for p, kind, _d in bootfs.boot_entries(layout, release, True, "ab" * 16) if p.startswith("/boot/")]
    assert rn.kernel_check(release, current)["pending"] is False
    out = rn.kernel_check(release, pending)
    assert out["pending"] is True and out["newest"] == bootfs.newer_release(release)
    assert bootfs.older_release(release) in out["installed"]


def test_bump_and_layout_details():
    assert bootfs.newer_release("6.1.0-27-amd64") == "6.1.0-28-amd64"
    assert bootfs.newer_release("5.14.0-427.13.1.el9_4.x86_64") == "5.14.0-428.13.1.el9_4.x86_64"
    assert bootfs.newer_release("6.18.44-fc-v669") == "6.18.45-fc-v669"
    for release in RELEASES + ["6.12.0", "6.1.0-0-amd64"]:
        assert rn.release_key(bootfs.older_release(release)) < rn.release_key(release), release
        assert rn.flavour(bootfs.older_release(release)) == rn.flavour(release)
    assert bootfs.older_release("6.12.0") == "6.11.0"
    debian = dict((p, (k, d)) for p, k, d in bootfs.boot_entries("debian", "6.1.0-27-amd64", True))
    assert debian["/vmlinuz"] == ("link", "boot/vmlinuz-6.1.0-28-amd64")
    assert debian["/vmlinuz.old"] == ("link", "boot/vmlinuz-6.1.0-27-amd64")
    ubuntu = dict((p, (k, d)) for p, k, d in bootfs.boot_entries("ubuntu", "6.8.0-45-generic", False))
    assert ubuntu["/boot/vmlinuz"] == ("link", "vmlinuz-6.8.0-45-generic")
    rhel = [p for p, _k, _d in bootfs.boot_entries("rhel", "5.14.0-427.13.1.el9_4.x86_64", False, "f" * 32)]
    assert "/boot/vmlinuz-0-rescue-" + "f" * 32 in rhel
    assert bootfs.boot_entries("none", "6.1.0-27-amd64") == []
    with pytest.raises(ValueError):
        bootfs.boot_entries("arch", "6.1.0-27-amd64")
    assert bootfs.validate({"layout": "rhel", "pending_kernel": True}, "p", "n") is None
    assert "boot.layout" in bootfs.validate({"layout": "arch", "pending_kernel": False}, "p", "n")
    assert "pending_kernel" in bootfs.validate({"layout": "rhel", "pending_kernel": "yes"}, "p", "n")
