"""Unit tests for plugins/module_utils/driver/upgrade.py (the driver role's planning functions).

Version ordering is checked against the real implementations (``dpkg --compare-versions`` and
rpm's ``labelCompare`` through the system Python) where they are installed; the plans are
checked on package listings in the exact formats the module reads (dpkg-query / rpm rows,
``apt-cache madison``, ``dnf repoquery``, ``dnf module list``, versionlock.list, /proc/locks).
"""
import os
import shutil
import subprocess

import pytest

from ansible_collections.kubegpu.fleet.plugins.module_utils.driver import upgrade as du
from ansible_collections.kubegpu.fleet.plugins.module_utils.driver.packages import (
    parse_dpkg_query,
    parse_rpm_query,
)

OLD, NEW, REV = "570.158.01", "570.172.08", "-0ubuntu1"
CATALOG_FIXES = ["570.172.08", "580.65.06"]  # first fixed releases of the driver defects (catalog v2)

VERSIONS = ["570.172.08-0ubuntu1", "570.172.08-0ubuntu0.24.04.1", "570.172.08-0ubuntu0.24.04.2",
            "570.86.15-0ubuntu1", "1:570.86.15-0ubuntu1", "570.172.08", "570.172.08~rc1-1",
            "570.172.08+really570.158.01-0ubuntu1", "580.65.06-0ubuntu0.22.04.1", "3:570.172.08-1.el9",
            "1.0-1", "1.0a-1", "1.0-1a", "1.0.0-1", "1.0-0ubuntu10", "1.0-0ubuntu9"]


def dpkg_rows(rows):
    """dpkg-query rows (``name version [status [arch]]``) in the module's query format."""
    lines = []
    for row in rows:
        name, version = row[0], row[1]
        status = row[2] if len(row) > 2 else "ii "
        arch = row[3] if len(row) > 3 else "amd64"
        lines.append("%s\t%s\t%s\t%s" % (name, version, status, arch))
    return parse_dpkg_query("\n".join(lines) + "\n")


def madison(avail):
    return "".join(" %s | %s | http://archive.ubuntu.com/ubuntu noble-updates/restricted amd64 Packages\n"
                   % (name, v) for name, versions in avail.items() for v in versions)


def branch_avail(names, versions=(OLD + REV, NEW + REV)):
    return du.parse_apt_cache_madison(madison({n: list(versions) for n in names}))


UBUNTU_570 = ["nvidia-driver-570", "libnvidia-compute-570", "nvidia-utils-570", "nvidia-kernel-common-570",
              "nvidia-dkms-570", "nvidia-kernel-source-570", "libnvidia-gl-570", "libnvidia-extra-570",
              "libnvidia-decode-570", "libnvidia-encode-570", "libnvidia-fbc1-570", "libnvidia-cfg1-570",
              "xserver-xorg-video-nvidia-570", "nvidia-compute-utils-570", "libnvidia-common-570"]


# ---------------------------------------------------------------------------------------------
# version ordering
# ---------------------------------------------------------------------------------------------

@pytest.mark.skipif(not shutil.which("dpkg"), reason="dpkg not installed")
@pytest.mark.parametrize("a", VERSIONS)
@pytest.mark.parametrize("b", VERSIONS)
def test_deb_version_cmp_agrees_with_dpkg(a, b):
    def dpkg(op):
        return subprocess.run(["dpkg", "--compare-versions", a, op, b], check=False).returncode == 0
    want = -1 if dpkg("lt") else (1 if dpkg("gt") else 0)
    assert du.deb_version_cmp(a, b) == want


def _rpm_oracle():
    py = "/usr/bin/python3"
    if not os.path.exists(py):
        return None
    if subprocess.run([py, "-c", "import rpm"], check=False, stderr=subprocess.DEVNULL).returncode != 0:
        return None
    return py


RPM_VERSIONS = ["3:570.172.08-1.el9", "3:570.172.08-1.el9_2", "3:570.172.08-2.el9", "3:570.158.01-1.el9",
                "570.172.08-1.el9", "3:570.172.08~beta-1.el9", "3:570.172.08^post1-1.el9", "3:570.172.8-1.el9",
                "3:570.172.08a-1.el9", "3:580.65.06-1.el9"]


@pytest.mark.skipif(_rpm_oracle() is None, reason="rpm Python bindings not installed")
def test_rpm_version_cmp_agrees_with_rpm_label_compare():
    script = ("import json, sys, rpm\n"
              "def split(v):\n"
              "    e, _, rest = v.rpartition(':')\n"
              "    ver, _, rel = rest.partition('-')\n"
              "    return (e or '0', ver, rel)\n"
              "vs = json.loads(sys.argv[1])\n"
              "print(json.dumps([[rpm.labelCompare(split(a), split(b)) for b in vs] for a in vs]))\n")
    import json
    out = subprocess.run([_rpm_oracle(), "-c", script, json.dumps(RPM_VERSIONS)], check=True,
                         stdout=subprocess.PIPE, universal_newlines=True).stdout
    want = json.loads(out)
    got = [[du.rpm_version_cmp(a, b) for b in RPM_VERSIONS] for a in RPM_VERSIONS]
    assert got == want


def test_pick_candidate_highest_revision_or_exact():
    avail = ["570.172.08-0ubuntu0.24.04.1", "570.172.08-0ubuntu0.24.04.2", "570.158.01-0ubuntu1",
             "575.57.08-0ubuntu1"]
    assert du.pick_candidate(avail, NEW, du.deb_version_cmp) == "570.172.08-0ubuntu0.24.04.2"
    assert du.pick_candidate(avail, "570.172.08-0ubuntu0.24.04.1", du.deb_version_cmp) == "570.172.08-0ubuntu0.24.04.1"
    assert du.pick_candidate(avail, "570.172.08-9", du.deb_version_cmp) is None
    assert du.pick_candidate(avail, "570.124.06", du.deb_version_cmp) is None
    assert du.pick_candidate(["3:570.172.08-1.el9"], "570.172.08-1.el9", du.rpm_version_cmp) == "3:570.172.08-1.el9"


def test_default_target_from_the_catalog():
    assert du.default_target(OLD, 570, CATALOG_FIXES)[0] == NEW
    # already newer within the branch: kept, never downgraded
    assert du.default_target("570.195.03", 570, CATALOG_FIXES)[0] == "570.195.03"
    # the highest first-fixed release of the branch fixes every entry of it
    assert du.default_target("570.86.15", 570, ["570.124.06", NEW])[0] == NEW
    # no fix in the catalog for the node's own branch: keep; for another branch: unknown
    assert du.default_target("575.57.08", 575, CATALOG_FIXES)[0] == "575.57.08"
    assert du.default_target("575.57.08", 590, CATALOG_FIXES)[0] is None
    assert du.default_target("575.57.08", 580, CATALOG_FIXES + ["none", "garbage"])[0] == "580.65.06"


# ---------------------------------------------------------------------------------------------
# apt
# ---------------------------------------------------------------------------------------------

def test_branch_names_and_renames():
    assert du.apt_branch_name("nvidia-dkms-570-server-open") == ("nvidia-dkms", 570, True, True)
    assert du.apt_branch_name("libnvidia-compute-570") == ("libnvidia-compute", 570, False, False)
    assert du.apt_branch_name("xserver-xorg-video-nvidia-570-server") == ("xserver-xorg-video-nvidia", 570, True, False)
    assert du.apt_branch_name("libnvidia-fbc1-570") == ("libnvidia-fbc1", 570, False, False)
    for other in ("nvidia-firmware-570-570.172.08", "linux-modules-nvidia-570-server-6.8.0-60-generic",
                  "nvidia-container-toolkit", "nvidia-modprobe", "nvidia-settings", "libnvidia-container1"):
        assert du.apt_branch_name(other) is None, other
    assert du.apt_rename("nvidia-driver-575-server-open", 570) == "nvidia-driver-570-server-open"


def test_plan_apt_whole_set_plus_compute_utils():
    installed = dpkg_rows([(n, OLD + REV) for n in UBUNTU_570
                           if n not in ("nvidia-compute-utils-570", "libnvidia-common-570")]
                          + [("libnvidia-common-570", OLD + REV, "ii ", "all"),
                             ("nvidia-container-toolkit", "1.17.8-1"), ("nvidia-modprobe", NEW + REV),
                             ("nvidia-firmware-570-570.158.01", OLD + REV),
                             ("libnvidia-compute-535", "535.247.01-0ubuntu1", "rc ")])
    plan = du.plan_apt(installed, NEW, branch_avail(UBUNTU_570), native_arch="amd64")
    assert plan["installed_version"] == OLD and plan["target_version"] == NEW
    assert sorted(plan["install"]) == sorted("%s=%s%s" % (n, NEW, REV) for n in UBUNTU_570)
    assert plan["hold"] == sorted(UBUNTU_570)
    changes = {c["name"]: (c["from"], c["to"], c["action"]) for c in plan["changes"]}
    assert changes["nvidia-compute-utils-570"] == (None, NEW + REV, "install")
    assert changes["nvidia-dkms-570"] == (OLD + REV, NEW + REV, "upgrade")
    assert len(changes) == len(UBUNTU_570)
    assert plan["reboot_required"] and plan["drain_required"] and not plan["nothing_to_do"]
    assert "nvidia-compute-utils-570" not in plan["reboot_packages"] and "nvidia-dkms-570" in plan["reboot_packages"]
    assert "nvidia-compute-utils-570 (not installed)\n" in plan["diff"]["before"]
    assert "nvidia-dkms-570 %s%s\n" % (NEW, REV) in plan["diff"]["after"]
    assert not plan["unavailable"] and not plan["downgrade"] and not plan["branch_change"]


def test_plan_apt_server_open_variants_and_revision_strings():
    names = ["nvidia-driver-570-server-open", "nvidia-dkms-570-server-open", "nvidia-kernel-source-570-server-open",
             "libnvidia-compute-570-server", "nvidia-utils-570-server", "nvidia-kernel-common-570-server",
             "libnvidia-cfg1-570-server"]
    rev_old, rev_new = "570.158.01-0ubuntu0.24.04.1", "570.172.08-0ubuntu0.24.04.1"
    installed = dpkg_rows([(n, rev_old) for n in names])
    avail = branch_avail(names + ["nvidia-compute-utils-570-server", "nvidia-compute-utils-570"],
                         (rev_old, rev_new, "570.172.08-0ubuntu0.22.04.1"))
    plan = du.plan_apt(installed, NEW, avail, native_arch="amd64")
    assert "nvidia-compute-utils-570-server=%s" % rev_new in plan["install"]
    assert "nvidia-compute-utils-570=%s" % rev_new not in plan["install"]
    assert all(spec.endswith("=" + rev_new) for spec in plan["install"])
    # an exact revision
    plan = du.plan_apt(installed, "570.172.08-0ubuntu0.22.04.1", avail, native_arch="amd64")
    assert all(spec.endswith("=570.172.08-0ubuntu0.22.04.1") for spec in plan["install"])


def test_plan_apt_foreign_arch_and_unavailable_members():
    installed = dpkg_rows([("nvidia-driver-570", OLD + REV), ("libnvidia-compute-570", OLD + REV),
                           ("libnvidia-compute-570", OLD + REV, "ii ", "i386"),
                           ("libnvidia-gl-570", OLD + REV), ("nvidia-compute-utils-570", OLD + REV)])
    avail = branch_avail(["nvidia-driver-570", "libnvidia-compute-570", "nvidia-compute-utils-570"])
    avail["libnvidia-gl-570"] = [OLD + REV]  # nothing at the target: left out, reported
    plan = du.plan_apt(installed, NEW, avail, native_arch="amd64")
    assert "libnvidia-compute-570:i386=%s%s" % (NEW, REV) in plan["install"]
    assert "libnvidia-compute-570=%s%s" % (NEW, REV) in plan["install"]
    assert plan["unavailable"] == ["libnvidia-gl-570"]
    assert not any(s.startswith("libnvidia-gl-570") for s in plan["install"])


def test_plan_apt_target_missing_for_the_driver_is_an_error():
    installed = dpkg_rows([("nvidia-driver-570", OLD + REV), ("libnvidia-compute-570", OLD + REV)])
    avail = branch_avail(["nvidia-driver-570", "libnvidia-compute-570", "nvidia-compute-utils-570"], (OLD + REV,))
    with pytest.raises(du.PlanError, match=r"target 570\.172\.08 is not available .*nvidia-compute-utils-570"):
        du.plan_apt(installed, NEW, avail)


def test_plan_apt_nothing_to_do_and_compute_utils_alone():
    at_target = dpkg_rows([(n, NEW + REV) for n in UBUNTU_570])
    plan = du.plan_apt(at_target, NEW, branch_avail(UBUNTU_570))
    assert plan["nothing_to_do"] and not plan["changes"] and not plan["reboot_required"]
    assert plan["summary"].startswith("nothing to do")
    # held packages ("hi") count as installed
    held = dpkg_rows([(n, NEW + REV, "hi ") for n in UBUNTU_570])
    assert du.plan_apt(held, NEW, branch_avail(UBUNTU_570))["nothing_to_do"]
    # the driver finding alone: compute-utils missing, or at another version
    without = dpkg_rows([(n, NEW + REV) for n in UBUNTU_570 if n != "nvidia-compute-utils-570"])
    plan = du.plan_apt(without, NEW, branch_avail(UBUNTU_570))
    assert [c["name"] for c in plan["changes"]] == ["nvidia-compute-utils-570"]
    assert not plan["reboot_required"] and not plan["drain_required"]
    other = dpkg_rows([(n, NEW + REV) for n in UBUNTU_570 if n != "nvidia-compute-utils-570"]
                      + [("nvidia-compute-utils-570", OLD + REV)])
    plan = du.plan_apt(other, NEW, branch_avail(UBUNTU_570))
    assert plan["changes"] == [{"name": "nvidia-compute-utils-570", "from": OLD + REV, "to": NEW + REV,
                                "action": "upgrade"}]
    # compute_utils disabled: not added
    plan = du.plan_apt(without, NEW, branch_avail(UBUNTU_570), compute_utils=False)
    assert plan["nothing_to_do"]


def test_plan_apt_refuses_cross_branch_and_downgrades():
    installed = dpkg_rows([("nvidia-driver-575", "575.57.08-0ubuntu1"), ("libnvidia-compute-575", "575.57.08-0ubuntu1")])
    avail = branch_avail(["nvidia-driver-570", "libnvidia-compute-570", "nvidia-compute-utils-570"])
    with pytest.raises(du.PlanError) as e:
        du.plan_apt(installed, NEW, avail)
    msg = str(e.value)
    assert "installed branch 575 (575.57.08), target branch 570 (570.172.08)" in msg
    assert "kubegpu_driver_allow_branch_change" in msg
    plan = du.plan_apt(installed, NEW, avail, allow_branch_change=True)
    assert plan["branch_change"] and plan["installed_branch"] == 575 and plan["target_branch"] == 570
    assert sorted(plan["install"]) == sorted("%s=%s%s" % (n, NEW, REV) for n in
                                             ("nvidia-driver-570", "libnvidia-compute-570", "nvidia-compute-utils-570"))
    assert {p["name"]: p["replaces"] for p in plan["packages"]}["nvidia-driver-570"] == "nvidia-driver-575 575.57.08-0ubuntu1"
    # within the branch, down is refused unless asked
    newer = dpkg_rows([("nvidia-driver-570", NEW + REV), ("libnvidia-compute-570", NEW + REV)])
    with pytest.raises(du.PlanError, match="refusing to downgrade the driver from 570.172.08 to 570.158.01"):
        du.plan_apt(newer, OLD, avail)
    plan = du.plan_apt(newer, OLD, avail, allow_downgrade=True)
    assert plan["downgrade"]


def test_plan_apt_without_a_driver_and_bad_targets():
    with pytest.raises(du.PlanError, match="no installed NVIDIA driver"):
        du.plan_apt(dpkg_rows([("nvidia-container-toolkit", "1.17.8-1")]), NEW, {})
    with pytest.raises(du.PlanError, match="not an NVIDIA driver version"):
        du.plan_apt(dpkg_rows([("libnvidia-compute-570", OLD + REV)]), "latest", {})


def test_madison_parsing():
    text = (" nvidia-driver-570 | 570.172.08-0ubuntu1 | file:/srv/repo ./ Packages\n"
            " nvidia-driver-570 | 570.158.01-0ubuntu1 | file:/srv/repo ./ Packages\n"
            " nvidia-driver-570 | 570.172.08-0ubuntu1 | http://mirror noble/restricted amd64 Packages\n"
            "N: Unable to locate package nothing-here\n")
    assert du.parse_apt_cache_madison(text) == {"nvidia-driver-570": ["570.172.08-0ubuntu1", "570.158.01-0ubuntu1"]}


# ---------------------------------------------------------------------------------------------
# dnf
# ---------------------------------------------------------------------------------------------

RHEL_570 = ["nvidia-driver", "nvidia-driver-libs", "nvidia-driver-cuda-libs", "nvidia-driver-NVML",
            "nvidia-kmod-common", "kmod-nvidia-latest-dkms", "nvidia-modprobe", "nvidia-persistenced",
            "nvidia-settings", "libnvidia-ml", "libnvidia-cfg"]


def rpm_rows(rows):
    return parse_rpm_query("".join("%s\t%s\tii \t%s\n" % (n, v, a) for n, v, a in rows))


def repoquery(names, versions):
    return du.parse_dnf_repoquery("".join("%s %s x86_64\n" % (n, v) for n in names for v in versions))


MODULE_LIST = """Last metadata expiration check: 0:01:02 ago on Mon 01 Sep 2025.
CUDA rhel9 x86_64
Name            Stream              Profiles                         Summary
nvidia-driver   570-dkms [e]        default [d], fm, ks, src         Nvidia driver for 570-dkms branch

Hint: [d]efault, [e]nabled, [x]disabled, [i]nstalled
"""


def test_dnf_module_list_and_versionlock_parsing():
    assert du.parse_dnf_module_list(MODULE_LIST) == "570-dkms"
    assert du.parse_dnf_module_list("nvidia-driver   latest-dkms [d][e]  default [d] [i]  Nvidia\n") == "latest-dkms"
    assert du.parse_dnf_module_list("nvidia-driver   575-open  default  Nvidia\n") is None
    assert du.parse_dnf_module_list("") is None
    locks = du.parse_versionlock_list("# added by me\nnvidia-driver-3:570.158.01-1.el9.*\n"
                                      "nvidia-driver-cuda-3:570.158.01-1.el9.*\n!kernel-0:6.1-1.*\n\n")
    assert locks == {"nvidia-driver": ["nvidia-driver-3:570.158.01-1.el9.*"],
                     "nvidia-driver-cuda": ["nvidia-driver-cuda-3:570.158.01-1.el9.*"]}
    assert du.versionlock_entry("nvidia-driver", "3:570.172.08-1.el9") == "nvidia-driver-3:570.172.08-1.el9.*"


def test_plan_dnf_within_the_stream_adds_cuda_and_relocks():
    installed = rpm_rows([(n, "3:%s-1.el9" % OLD, "x86_64") for n in RHEL_570]
                         + [("nvidia-container-toolkit", "1.17.8-1", "x86_64"),
                            ("libnvidia-container1", "1.17.8-1", "x86_64")])
    avail = repoquery(RHEL_570 + ["nvidia-driver-cuda"], ["3:%s-1.el9" % OLD, "3:%s-1.el9" % NEW])
    locks = du.parse_versionlock_list("nvidia-driver-3:%s-1.el9.*\n" % OLD)
    plan = du.plan_dnf(installed, NEW, avail, stream="570-dkms", locks=locks)
    assert plan["manager"] == "dnf" and plan["dnf"]["module_switch"] is None
    assert sorted(plan["install"]) == sorted("%s-3:%s-1.el9" % (n, NEW) for n in RHEL_570 + ["nvidia-driver-cuda"])
    assert not any("container" in s for s in plan["install"])
    assert {c["name"]: c["action"] for c in plan["changes"]}["nvidia-driver-cuda"] == "install"
    assert plan["dnf"]["versionlock_delete"] == ["nvidia-driver"]
    assert "nvidia-driver-3:%s-1.el9" % NEW in plan["dnf"]["versionlock_add"]
    assert len(plan["dnf"]["versionlock_add"]) == len(RHEL_570) + 1
    assert plan["reboot_required"]


def test_plan_dnf_stream_switch_from_latest_and_open_flavor():
    installed = rpm_rows([("nvidia-driver", "3:%s-1.el9" % OLD, "x86_64"),
                          ("kmod-nvidia-open-dkms", "3:%s-1.el9" % OLD, "noarch"),
                          ("nvidia-driver-cuda", "3:%s-1.el9" % OLD, "x86_64")])
    avail = repoquery(["nvidia-driver", "kmod-nvidia-open-dkms", "nvidia-driver-cuda"], ["3:%s-1.el9" % NEW])
    plan = du.plan_dnf(installed, NEW, avail, stream="open-dkms")
    assert plan["dnf"]["stream_to"] == "570-open" and plan["dnf"]["module_switch"] == "nvidia-driver:570-open"
    assert plan["summary"].startswith("module stream nvidia-driver:open-dkms -> nvidia-driver:570-open")
    # no stream enabled yet, flavor from the kmod package
    assert du.plan_dnf(installed, NEW, avail, stream=None)["dnf"]["module_switch"] == "nvidia-driver:570-open"


def test_plan_dnf_nothing_to_do_and_cross_branch():
    names = ["nvidia-driver", "kmod-nvidia-latest-dkms", "nvidia-driver-cuda"]
    at = rpm_rows([(n, "3:%s-1.el9" % NEW, "x86_64") for n in names])
    avail = repoquery(names, ["3:%s-1.el9" % NEW, "3:580.65.06-1.el9"])
    locks = du.parse_versionlock_list("".join("%s-3:%s-1.el9.*\n" % (n, NEW) for n in names))
    plan = du.plan_dnf(at, NEW, avail, stream="570-dkms", locks=locks)
    assert plan["nothing_to_do"] and plan["dnf"]["versionlock_add"] == [] and plan["dnf"]["versionlock_delete"] == []
    with pytest.raises(du.PlanError, match=r"installed branch 570 \(570.172.08\), target branch 580 \(580.65.06\)"):
        du.plan_dnf(at, "580.65.06", avail, stream="570-dkms")
    plan = du.plan_dnf(at, "580.65.06", avail, stream="570-dkms", locks=locks, allow_branch_change=True)
    assert plan["dnf"]["module_switch"] == "nvidia-driver:580-dkms"
    assert sorted(plan["dnf"]["versionlock_delete"]) == sorted(names)
    assert all(s.endswith("-3:580.65.06-1.el9") for s in plan["install"])


# ---------------------------------------------------------------------------------------------
# locks
# ---------------------------------------------------------------------------------------------

def test_lock_holders_from_proc_locks():
    text = ("1: POSIX  ADVISORY  WRITE 4242 00:2f:1234 0 EOF\n"
            "1: -> POSIX  ADVISORY  WRITE 4343 00:2f:1234 0 EOF\n"
            "2: FLOCK  ADVISORY  WRITE 77 08:01:99 0 EOF\n"
            "3: OFDLCK ADVISORY  READ  -1 00:2f:555 0 EOF\n")
    locks = du.parse_proc_locks(text)
    assert [lk["pid"] for lk in locks] == [4242, 77, -1]
    holders = du.lock_holders(locks, {"/var/lib/dpkg/lock-frontend": (0, 0x2f, 1234), "/var/lib/dpkg/lock": (0, 0x2f, 1)})
    assert holders == [{"path": "/var/lib/dpkg/lock-frontend", "pid": 4242, "kind": "POSIX", "access": "WRITE"}]


def test_lock_holders_of_a_real_lock(tmp_path):
    import fcntl
    path = str(tmp_path / "lock-frontend")
    with open(path, "w") as f:
        fcntl.lockf(f, fcntl.LOCK_EX)
        st = os.stat(path)
        with open("/proc/locks") as pl:
            holders = du.lock_holders(du.parse_proc_locks(pl.read()),
                                      {path: (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)})
    assert [(h["pid"], h["kind"]) for h in holders] == [(os.getpid(), "POSIX")]


# ---------------------------------------------------------------------------------------------
# digits that are not ASCII ('²'.isdigit() is True but int('²') raises; dpkg and rpm know 0-9 only)
# ---------------------------------------------------------------------------------------------

HOSTILE_DIGITS = ["\u00b2", "\u0663", "\uff15\uff17\uff10"]  # superscript two, Arabic-Indic three, full-width 570


@pytest.mark.parametrize("digits", HOSTILE_DIGITS)
def test_deb_version_cmp_non_ascii_epoch_counts_as_zero(digits):
    # epoch that is not ASCII digits: 0, like any other non-numeric epoch (no ValueError)
    assert du.deb_version_cmp("%s:%s%s" % (digits, NEW, REV), NEW + REV) == 0
    assert du.deb_version_cmp("1:%s%s" % (OLD, REV), "%s:%s%s" % (digits, NEW, REV)) == 1
    # a non-ASCII digit inside the version is a separator, never a digit run
    assert du.deb_version_cmp("570.172.0%s%s" % (digits, REV), "570.172.01" + REV) == -1
    # and no driver version: such a candidate never stands for 570.172.08
    assert du.upstream_of("570.172.0%s%s" % (digits, REV)) is None
    assert du.upstream_of("%s.172.08%s" % (digits, REV)) is None


@pytest.mark.parametrize("digits", HOSTILE_DIGITS)
def test_rpm_version_cmp_non_ascii_digits(digits):
    assert du.rpm_version_cmp("%s:%s-1.el9" % (digits, NEW), "3:%s-1.el9" % OLD) == -1
    assert du.rpm_version_cmp("%s:%s-1.el9" % (digits, NEW), "%s-1.el9" % NEW) == 0
    # "５７０" is no rpm segment (rpm compares ASCII digit runs): the versions differ
    assert du.rpm_version_cmp("%s.172.08-1.el9" % digits, "570.172.08-1.el9") == -1


@pytest.mark.parametrize("digits", HOSTILE_DIGITS)
def test_plan_apt_with_a_non_ascii_epoch_in_madison(digits):
    """A source listing ``²:570.172.08-0ubuntu1`` (hostile or corrupt) raises nothing while the
    candidate is picked: its epoch counts as 0 and the real revision wins."""
    installed = dpkg_rows([("nvidia-driver-570", OLD + REV), ("libnvidia-compute-570", OLD + REV)])
    avail = du.parse_apt_cache_madison(madison({
        n: ["%s:%s%s" % (digits, NEW, REV), NEW + "-0ubuntu2"]
        for n in ("nvidia-driver-570", "libnvidia-compute-570", "nvidia-compute-utils-570")}))
    plan = du.plan_apt(installed, NEW, avail, native_arch="amd64")
    assert sorted(plan["install"]) == sorted("%s=%s-0ubuntu2" % (n, NEW) for n in (
        "nvidia-driver-570", "libnvidia-compute-570", "nvidia-compute-utils-570"))


@pytest.mark.parametrize("digits", HOSTILE_DIGITS)
def test_plan_dnf_with_a_non_ascii_epoch_in_repoquery(digits):
    names = ["nvidia-driver", "kmod-nvidia-latest-dkms", "nvidia-driver-cuda"]
    installed = rpm_rows([(n, "3:%s-1.el9" % OLD, "x86_64") for n in names])
    avail = repoquery(names, ["%s:%s-1.el9" % (digits, NEW), "3:%s-1.el9" % NEW])
    plan = du.plan_dnf(installed, NEW, avail, stream="570-dkms", locks={})
    assert sorted(plan["install"]) == sorted("%s-3:%s-1.el9" % (n, NEW) for n in names)
