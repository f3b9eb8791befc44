"""Fabric manager in lockstep with the driver (plugins/module_utils/driver/upgrade.py).

On NVSwitch systems nv-fabricmanager must be exactly the driver's version. The plans are checked
on package listings in the formats the module reads (dpkg-query and rpm rows through the real
parsers, ``apt-cache madison``, ``dnf repoquery``) with the package names NVIDIA and Ubuntu use.
"""
import pytest

from ansible_collections.kubegpu.fleet.plugins.module_utils.driver import upgrade as du
from ansible_collections.kubegpu.fleet.plugins.module_utils.driver.packages import (
    parse_dpkg_query,
    parse_rpm_query,
)

OLD, NEW, REV = "570.158.01", "570.172.08", "-0ubuntu1"
DRIVER = ["nvidia-driver-570", "libnvidia-compute-570", "nvidia-utils-570", "nvidia-kernel-common-570",
          "nvidia-dkms-570", "nvidia-compute-utils-570"]
FM = "nvidia-fabricmanager-570"


def dpkg_rows(rows):
    return parse_dpkg_query("".join("%s\t%s\tii \tamd64\n" % (n, v) for n, v in rows))


def madison(avail):
    return du.parse_apt_cache_madison("".join(
        " %s | %s | https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64  Packages\n"
        % (n, v) for n, versions in avail.items() for v in versions))


def avail_apt(names, versions=(OLD + REV, NEW + REV)):
    return madison({n: list(versions) for n in names})


def test_apt_fabric_manager_moves_in_the_same_transaction():
    installed = dpkg_rows([(n, OLD + REV) for n in DRIVER] + [(FM, OLD + REV), ("nvidia-fabricmanager-dev-570", OLD + REV)])
    plan = du.plan_apt(installed, NEW, avail_apt(DRIVER + [FM, "nvidia-fabricmanager-dev-570"]), native_arch="amd64")
    assert "%s=%s%s" % (FM, NEW, REV) in plan["install"]
    assert "nvidia-fabricmanager-dev-570=%s%s" % (NEW, REV) in plan["install"]
    assert "nvidia-dkms-570=%s%s" % (NEW, REV) in plan["install"]
    assert FM in plan["hold"]
    assert plan["fabric_manager"] == {
        "installed": True, "packages": ["nvidia-fabricmanager-570", "nvidia-fabricmanager-dev-570"],
        "from": OLD, "to": NEW, "changed": True, "matches_target": False,
        "service": "nvidia-fabricmanager.service"}
    # the daemon needs a restart, not a reboot: it is not a reason to reboot on its own
    assert FM not in plan["reboot_packages"] and FM not in plan["kernel_packages"]
    assert plan["reboot_required"] and "nvidia-dkms-570" in plan["reboot_packages"]
    assert [p for p in plan["packages"] if p["name"] == FM][0]["fabric_manager"] is True


def test_apt_only_the_fabric_manager_differs():
    """fabricmanager.version_mismatch with the driver at the target: FM alone, no reboot, no drain."""
    installed = dpkg_rows([(n, NEW + REV) for n in DRIVER] + [(FM, OLD + REV)])
    plan = du.plan_apt(installed, NEW, avail_apt(DRIVER + [FM]), native_arch="amd64")
    assert [(c["name"], c["from"], c["to"]) for c in plan["changes"]] == [(FM, OLD + REV, NEW + REV)]
    assert not plan["nothing_to_do"] and not plan["reboot_required"] and not plan["drain_required"]
    assert plan["fabric_manager"]["changed"] and plan["fabric_manager"]["from"] == OLD


def test_apt_fabric_manager_at_the_target_is_nothing_to_do():
    installed = dpkg_rows([(n, NEW + REV) for n in DRIVER] + [(FM, NEW + REV)])
    plan = du.plan_apt(installed, NEW, avail_apt(DRIVER + [FM]), native_arch="amd64")
    assert plan["nothing_to_do"]
    assert plan["fabric_manager"]["matches_target"] is True and not plan["fabric_manager"]["changed"]


def test_apt_without_fabric_manager_installs_none():
    installed = dpkg_rows([(n, OLD + REV) for n in DRIVER])
    plan = du.plan_apt(installed, NEW, avail_apt(DRIVER + [FM]), native_arch="amd64")
    assert not any("fabricmanager" in s for s in plan["install"])
    assert plan["fabric_manager"] == {"installed": False, "packages": [], "from": None, "to": None,
                                      "changed": False, "matches_target": None, "service": None}


def test_apt_fabric_manager_missing_at_the_target_fails_the_plan():
    installed = dpkg_rows([(n, OLD + REV) for n in DRIVER] + [(FM, OLD + REV)])
    avail = avail_apt(DRIVER)
    avail[FM] = [OLD + REV]
    with pytest.raises(du.PlanError, match=r"fabric manager must move with the driver .* nvidia-fabricmanager-570 "
                                           r"has no candidate at 570\.172\.08 .*nvidia-fabricmanager-570: 570\.158\.01-0ubuntu1"):
        du.plan_apt(installed, NEW, avail, native_arch="amd64")


def test_apt_cuda_metapackage_and_branch_change():
    rows = [(n, OLD + REV) for n in DRIVER] + [(FM, OLD + REV), ("cuda-drivers-fabricmanager-570", OLD + "-1")]
    installed = dpkg_rows(rows)
    names580 = [n.replace("570", "580") for n in DRIVER + [FM, "cuda-drivers-fabricmanager-570"]]
    avail = avail_apt(names580, ("580.65.06-0ubuntu1",))
    avail["cuda-drivers-fabricmanager-580"] = ["580.65.06-1"]
    plan = du.plan_apt(installed, "580.65.06", avail, allow_branch_change=True, native_arch="amd64")
    assert "nvidia-fabricmanager-580=580.65.06-0ubuntu1" in plan["install"]
    assert "cuda-drivers-fabricmanager-580=580.65.06-1" in plan["install"]
    fm = [p for p in plan["packages"] if p["name"] == "nvidia-fabricmanager-580"][0]
    assert fm["replaces"] == "%s %s%s" % (FM, OLD, REV) and fm["fabric_manager"]
    assert plan["fabric_manager"]["packages"] == ["cuda-drivers-fabricmanager-580", "nvidia-fabricmanager-580"]


RHEL = ["nvidia-driver", "nvidia-driver-libs", "nvidia-driver-cuda", "nvidia-kmod-common", "kmod-nvidia-latest-dkms"]


def rpm_rows(rows):
    return parse_rpm_query("".join("%s\t%s\tii \tx86_64\n" % (n, v) for n, v in rows))


def repoquery(names, versions):
    return du.parse_dnf_repoquery("".join("%s %s x86_64\n" % (n, v) for n in names for v in versions))


@pytest.mark.parametrize("fm_names", [["nvidia-fabric-manager", "nvidia-fabric-manager-devel"],
                                      ["nvidia-fabricmanager-570", "nvidia-fabricmanager-devel-570"]])
def test_dnf_fabric_manager_moves_and_is_version_locked(fm_names):
    installed = rpm_rows([(n, "3:%s-1.el9" % OLD) for n in RHEL] + [(n, "%s-1" % OLD) for n in fm_names])
    avail = repoquery(RHEL, ["3:%s-1.el9" % OLD, "3:%s-1.el9" % NEW])
    avail.update(repoquery(fm_names, ["0:%s-1" % OLD, "0:%s-1" % NEW]))  # repoquery prints epoch 0
    plan = du.plan_dnf(installed, NEW, avail, stream="570-dkms")
    for n in fm_names:
        assert "%s-0:%s-1" % (n, NEW) in plan["install"]
        assert "%s-0:%s-1" % (n, NEW) in plan["dnf"]["versionlock_add"]
    assert plan["fabric_manager"]["installed"] and plan["fabric_manager"]["from"] == OLD
    assert plan["fabric_manager"]["packages"] == sorted(fm_names)
    assert not set(fm_names) & set(plan["reboot_packages"])


def test_dnf_fabric_manager_missing_at_the_target_fails_the_plan():
    installed = rpm_rows([(n, "3:%s-1.el9" % OLD) for n in RHEL] + [("nvidia-fabric-manager", "%s-1" % OLD)])
    avail = repoquery(RHEL, ["3:%s-1.el9" % NEW])
    avail.update(repoquery(["nvidia-fabric-manager"], ["0:%s-1" % OLD]))
    with pytest.raises(du.PlanError, match=r"nvidia-fabric-manager has no candidate at 570\.172\.08"):
        du.plan_dnf(installed, NEW, avail, stream="570-dkms")


def test_dnf_without_fabric_manager():
    installed = rpm_rows([(n, "3:%s-1.el9" % OLD) for n in RHEL])
    avail = repoquery(RHEL + ["nvidia-fabric-manager"], ["3:%s-1.el9" % NEW])
    plan = du.plan_dnf(installed, NEW, avail, stream="570-dkms")
    assert not plan["fabric_manager"]["installed"]
    assert not any("fabric" in s for s in plan["install"])
