"""The reboot decision (plugin_utils/rollout/reboot_need.py) over /boot as real distributions lay it out."""
import pytest

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.rollout import reboot_need as rn

from ansible_collections.kubegpu.fleet.tests.unit.plugins.plugin_utils.boot_layouts import (
    DEBIAN_12, DEBIAN_12_LINKS_IN_BOOT, RESCUE, ROCKY_9, UBUNTU_2204, UBUNTU_2404)


def names(layout):
    return [e[0] for e in layout]


def paths(layout):
    return ["/boot/" + e[0] for e in layout]


def without(layout, *drop):
    return [e for e in layout if e[0] not in drop]


GUARD_OK = {"reboot_pending": False, "driver_version": "570.172.08", "kernel_module_version": "570.172.08"}


# ------------------------------------------------------------------------- ordering

@pytest.mark.parametrize("newer,older", [
    ("6.1.0-27-amd64", "6.1.0-9-amd64"),
    ("5.15.0-105-generic", "5.15.0-97-generic"),
    ("6.8.0-100-generic", "6.8.0-99-generic"),
    ("5.14.0-427.13.1.el9_4.x86_64", "5.14.0-362.8.1.el9_3.x86_64"),
    ("5.14.0-427.13.1.el9_4.x86_64", "5.14.0-427.2.1.el9_4.x86_64"),
    ("6.10.11+bpo-amd64", "6.1.0-27-amd64"),
    ("6.12.0", "6.9.12"),
])
def test_release_ordering_compares_numbers_as_numbers(newer, older):
    assert rn.release_key(newer) > rn.release_key(older)
    assert rn.installed_kernels(["vmlinuz-" + older, "vmlinuz-" + newer]) == [newer, older]


@pytest.mark.parametrize("release,expected", [
    ("6.1.0-27-amd64", "amd#"), ("6.1.0-27-cloud-amd64", "cloud-amd#"), ("5.15.0-105-generic", "generic"),
    ("6.8.0-51-lowlatency", "lowlatency"), ("5.14.0-427.13.1.el9_4.x86_64", "x86_64"),
    ("5.14.0-427.13.1.el9_4.x86_64+debug", "x86_64+debug"), ("6.18.0", None), ("6.12.0-rc3", "rc#"),
    ("6.18.44-fc-v669", "fc-v#"),
])
def test_flavour(release, expected):
    assert rn.flavour(release) == expected


# ----------------------------------------------------------------- real /boot layouts

@pytest.mark.parametrize("layout,installed", [
    (DEBIAN_12, ["6.1.0-27-amd64", "6.1.0-26-amd64"]),
    (DEBIAN_12_LINKS_IN_BOOT, ["6.1.0-27-amd64", "6.1.0-9-amd64"]),
    (UBUNTU_2204, ["5.15.0-105-generic", "5.15.0-97-generic"]),
    (UBUNTU_2404, ["6.8.0-51-lowlatency", "6.8.0-49-generic", "6.8.0-45-generic"]),
    (ROCKY_9, ["5.14.0-427.13.1.el9_4.x86_64", "5.14.0-362.8.1.el9_3.x86_64"]),
])
def test_only_vmlinuz_release_files_are_installed_kernels(layout, installed):
    # symlinks vmlinuz / vmlinuz.old, initrd/config/System.map/symvers, .hmac, the rescue image: never kernels
    assert rn.installed_kernels(names(layout)) == installed
    assert rn.installed_kernels(paths(layout)) == installed


@pytest.mark.parametrize("layout,running,pending,newest", [
    # after the update, before the reboot: the new kernel is pending
    (DEBIAN_12, "6.1.0-26-amd64", True, "6.1.0-27-amd64"),
    (DEBIAN_12_LINKS_IN_BOOT, "6.1.0-9-amd64", True, "6.1.0-27-amd64"),
    (UBUNTU_2204, "5.15.0-97-generic", True, "5.15.0-105-generic"),
    (UBUNTU_2404, "6.8.0-45-generic", True, "6.8.0-49-generic"),
    (ROCKY_9, "5.14.0-362.8.1.el9_3.x86_64", True, "5.14.0-427.13.1.el9_4.x86_64"),
    # after the reboot: the newest installed kernel runs, nothing is pending
    (DEBIAN_12, "6.1.0-27-amd64", False, "6.1.0-27-amd64"),
    (DEBIAN_12_LINKS_IN_BOOT, "6.1.0-27-amd64", False, "6.1.0-27-amd64"),   # 6.1.0-9 is older, not "newer" text
    (UBUNTU_2204, "5.15.0-105-generic", False, "5.15.0-105-generic"),       # 97 sorts after 105 as text
    (UBUNTU_2404, "6.8.0-49-generic", False, "6.8.0-49-generic"),           # the lowlatency flavour is no update
    (ROCKY_9, "5.14.0-427.13.1.el9_4.x86_64", False, "5.14.0-427.13.1.el9_4.x86_64"),  # rescue image never newer
])
def test_kernel_check_over_real_layouts(layout, running, pending, newest):
    out = rn.kernel_check(running, paths(layout))
    assert out["pending"] is pending, out
    assert out["newest"] == newest
    assert (running in out["reason"]) and ((newest in out["reason"]) or not pending)


def test_a_build_number_in_the_suffix_is_no_new_flavour():
    assert rn.kernel_check("6.18.44-fc-v669", ["vmlinuz-6.18.44-fc-v669", "vmlinuz-6.18.45-fc-v669"])["pending"] is True
    assert rn.kernel_check("6.18.44-fc-v669", ["vmlinuz-6.18.44-fc-v669", "vmlinuz-6.18.43-fc-v669"])["pending"] is False


def test_the_running_kernel_removed_from_boot_still_counts_the_newer_one():
    # apt autoremove took the running 6.1.0-26 away: 6.1.0-27 waits for the reboot
    out = rn.kernel_check("6.1.0-26-amd64", names(without(DEBIAN_12, "vmlinuz-6.1.0-26-amd64")))
    assert out["pending"] is True and out["newest"] == "6.1.0-27-amd64"


def test_rescue_image_alone_and_empty_boot_are_unknown_not_pending():
    assert rn.kernel_check("5.14.0-427.13.1.el9_4.x86_64", [RESCUE])["pending"] is None
    assert rn.kernel_check("6.1.0-27-amd64", [])["pending"] is None
    assert rn.kernel_check("", names(DEBIAN_12))["pending"] is None
    # a running kernel newer than anything in /boot (a lab node runs the host's kernel)
    assert rn.kernel_check("6.12.0-1-amd64", names(DEBIAN_12))["pending"] is False


@pytest.mark.parametrize("leftover", ["vmlinuz-6.1.0-28-amd64.dpkg-tmp", "vmlinuz-6.1.0-28-amd64.old",
                                      "vmlinuz-6.1.0-28-amd64.bak", "vmlinuz-6.1.0-28-amd64.dpkg-new",
                                      ".vmlinuz-6.1.0-28-amd64.hmac", "vmlinuz-rescue", "vmlinuz-"])
def test_package_manager_leftovers_are_not_kernels(leftover):
    assert rn.kernel_check("6.1.0-27-amd64", names(DEBIAN_12) + [leftover])["pending"] is False


def test_swapped_arguments_fail_loudly_instead_of_answering():
    """The defect of need.yml: the /boot list passed as the release and the release as the list.
    The old function walked the release string and answered True for every node."""
    with pytest.raises(rn.RebootNeedError):
        rn.kernel_check(paths(DEBIAN_12), "6.1.0-27-amd64")
    with pytest.raises(rn.RebootNeedError):
        rn.kernel_check("6.1.0-27-amd64", "6.1.0-27-amd64")
    with pytest.raises(rn.RebootNeedError):
        rn.kernel_check("/boot/vmlinuz-6.1.0-27-amd64", [])
    with pytest.raises(TypeError):
        rn.decide("needed", [], {}, "6.1.0-27-amd64")   # keyword arguments only  # pylint: disable=too-many-function-args


# ---------------------------------------------------------------------- the decision

def test_a_node_with_nothing_pending_needs_nothing():
    need = rn.decide(mode="needed", sentinels=[], guard=GUARD_OK, running="6.1.0-27-amd64",
                     boot_entries=paths(DEBIAN_12), node={"metadata": {"annotations": {}}})
    assert need["reboot"] is False and need["resume"] is False
    assert need["reasons"] == [] and need["pending_reasons"] == []
    assert need["kernel"]["pending"] is False and need["driver"]["pending"] is False
    assert "no reboot needed" in need["msg"]


def decide_with(**changes):
    """The decision for a Debian 12 node that runs its newest kernel, with ``changes``."""
    args = {"mode": "needed", "sentinels": [], "guard": GUARD_OK, "running": "6.1.0-27-amd64",
            "boot_entries": paths(DEBIAN_12)}
    args.update(changes)
    return rn.decide(**args)


def test_each_reason_alone_makes_a_reboot_needed():
    kernel = decide_with(running="6.1.0-26-amd64")
    assert kernel["reboot"] and kernel["reasons"] == ["kernel 6.1.0-27-amd64 is installed, 6.1.0-26-amd64 is running"]
    sentinel = decide_with(sentinels=["/run/reboot-required"])
    assert sentinel["reboot"] and sentinel["reasons"] == ["sentinel /run/reboot-required"]
    driver = decide_with(guard={"reboot_pending": True, "driver_version": "570.172.08",
                                "kernel_module_version": "570.124.06"})
    assert driver["reboot"] and driver["reasons"] == ["driver 570.172.08 installed, kernel module 570.124.06 loaded"]
    recorded = decide_with(required=True, required_reasons=["driver: 570.124.06 -> 570.172.08 installed"])
    assert recorded["reasons"] == ["driver: 570.124.06 -> 570.172.08 installed"]
    assert decide_with(required=True)["reasons"] == ["kubegpu_reboot_required is set"]
    # recorded reasons without `required` (a finished maintenance cleared it) do not count
    assert decide_with(required=False, required_reasons=["old"])["reboot"] is False
    assert decide_with()["reboot"] is False


def test_driver_guard_failure_or_unknown_versions_are_no_reason():
    for guard in ({"failed": True, "msg": "no NVIDIA driver"}, {"reboot_pending": None}, {}):
        need = rn.decide(mode="needed", guard=guard, running="6.1.0-27-amd64", boot_entries=paths(DEBIAN_12))
        assert need["reboot"] is False and need["driver"]["pending"] is None, guard


def test_modes_always_and_never():
    pending = dict(sentinels=["/run/reboot-required"], running="6.1.0-27-amd64", boot_entries=paths(DEBIAN_12))
    always = rn.decide(mode="always", running="6.1.0-27-amd64", boot_entries=paths(DEBIAN_12))
    assert always["reboot"] and always["reasons"] == ["forced (kubegpu_reboot=always)"]
    never = rn.decide(mode="never", **pending)
    assert never["reboot"] is False and never["pending_reasons"] == ["sentinel /run/reboot-required"]
    assert "kubegpu_reboot=never holds back" in never["msg"]
    with pytest.raises(rn.RebootNeedError, match="'sometimes'"):
        rn.decide(mode="sometimes")


def test_a_maintenance_left_open_on_the_node_is_resumed():
    node = {"metadata": {"annotations": {"kubegpu.io/maintenance": '{"was_unschedulable":false}'}}}
    need = rn.decide(mode="needed", running="6.1.0-27-amd64", boot_entries=paths(DEBIAN_12), node=node)
    assert need["resume"] is True and need["reboot"] is False
    assert need["msg"].startswith("resuming an unfinished maintenance")
    other = rn.decide(mode="needed", node=node, annotation="example.com/other")
    assert other["resume"] is False


def test_sentinels_are_deduplicated_and_kept_in_order():
    need = rn.decide(mode="needed", sentinels=["/run/reboot-required", "/run/reboot-required", "/run/x"])
    assert need["sentinels"] == ["/run/reboot-required", "/run/x"]


@pytest.mark.parametrize("digits", ["\u00b2", "\u0663", "\uff16"])
def test_releases_with_digits_that_are_not_ascii(digits):
    """'²'.isdigit() is True, int('²') raises; \\d took Arabic-Indic and full-width digits as
    numbers. A /boot entry starting with one is no kernel; inside a release it is a separator."""
    assert rn.kernel_release_of("vmlinuz-%s.1.0-27-amd64" % digits) is None
    assert rn.installed_kernels(["vmlinuz-%s.1.0-27-amd64" % digits, "vmlinuz-6.1.0-9-amd64"]) == ["6.1.0-9-amd64"]
    assert rn.release_key("6.1.0-%s-amd64" % digits) == rn.release_key("6.1.0--amd64")
    assert rn.installed_kernels(["vmlinuz-6.1.0-2%s-amd64" % digits, "vmlinuz-6.1.0-9-amd64"]) == [
        "6.1.0-9-amd64", "6.1.0-2%s-amd64" % digits]
