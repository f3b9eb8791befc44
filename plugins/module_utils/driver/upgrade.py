# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Plan an NVIDIA driver upgrade within a branch (node side, Python 3.8+).

Pure functions on text and package lists; the module ``driver_upgrade_plan`` runs the queries
and the role ``kubegpu.fleet.driver`` carries the plan out.

apt (Ubuntu names): the driver of branch B is a set of packages whose names end in ``-B``
(``-B-server``, ``-B-open``, ``-B-server-open``): ``nvidia-driver-570``, ``libnvidia-compute-570``,
``nvidia-utils-570``, ``nvidia-dkms-570``... Their exact-version dependencies make apt refuse
to move one of them alone, so the plan installs every installed package of the branch, plus
``nvidia-compute-utils-B`` (``nvidia-cuda-mps-control``), each pinned to the candidate of the
target version (``name=570.172.08-0ubuntu1``).

dnf (NVIDIA's RHEL module streams ``nvidia-driver:570-dkms`` / ``570-open``): the set is every
installed NVIDIA driver package whose version is in the branch plus ``nvidia-driver-cuda``
(``nvidia-cuda-mps-control``); the plan switches the module stream when needed (reset +
enable, without syncing packages), installs ``name-EPOCH:VERSION-RELEASE`` and writes
versionlock entries.

Fabric manager (NVSwitch systems) must run exactly the driver's version: nv-fabricmanager refuses
to start against a kernel module of another version, the fabric stays uninitialised and CUDA
fails with error 802. An installed fabric manager (apt ``nvidia-fabricmanager-B``,
``nvidia-fabricmanager-dev-B``, ``cuda-drivers-fabricmanager-B``; dnf ``nvidia-fabric-manager``,
``nvidia-fabric-manager-devel``, ``nvidia-fabricmanager-B``, ``cuda-drivers-fabricmanager-B``)
is therefore a member of the set like any other: pinned to the target in the same transaction.
Unlike other members it is never left out when the target is missing from the sources (the
plan fails), it needs no reboot of its own, and the plan names it (``fabric_manager``) so the
role can restart its service and verify it.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.kubegpu.fleet.plugins.module_utils._common.safe_io import is_ascii_digits
from ansible_collections.kubegpu.fleet.plugins.module_utils.driver.packages import (
    userspace_driver_version,
)
from ansible_collections.kubegpu.fleet.plugins.module_utils._common.versions import (
    DriverVersion,
    strip_package_revision,
)


class PlanError(ValueError):
    """The transaction cannot or must not be planned; the message says why."""


# --------------------------------------------------------------------------------------------
# Version comparison: Debian (deb-version(7)) and RPM (rpmvercmp)
# --------------------------------------------------------------------------------------------
# dpkg and rpm know ASCII digits and letters only (C isdigit/isalpha); str.isdigit would take
# "\u00b2" (which int() refuses) and str.isalpha any letter. Anything else is a separator.

def _isdigit(c):
    return "0" <= c <= "9"


def _deb_order(c):
    if c == "~":
        return -1
    if _isdigit(c):
        return 0
    if "A" <= c <= "Z" or "a" <= c <= "z":
        return ord(c)
    return ord(c) + 256


def _deb_cmp_part(a, b):
    """Compare an upstream version or revision with the dpkg algorithm."""
    i = j = 0
    while i < len(a) or j < len(b):
        first_diff = 0
        while (i < len(a) and not _isdigit(a[i])) or (j < len(b) and not _isdigit(b[j])):
            ac = _deb_order(a[i]) if i < len(a) and not _isdigit(a[i]) else 0
            bc = _deb_order(b[j]) if j < len(b) and not _isdigit(b[j]) else 0
            if ac != bc:
                return -1 if ac < bc else 1
            i += 1
            j += 1
        while i < len(a) and a[i] == "0":
            i += 1
        while j < len(b) and b[j] == "0":
            j += 1
        while i < len(a) and _isdigit(a[i]) and j < len(b) and _isdigit(b[j]):
            if not first_diff:
                first_diff = (a[i] > b[j]) - (a[i] < b[j])
            i += 1
            j += 1
        if i < len(a) and _isdigit(a[i]):
            return 1
        if j < len(b) and _isdigit(b[j]):
            return -1
        if first_diff:
            return first_diff
    return 0


def _split_epoch(v):
    """``(epoch, rest)`` of ``[EPOCH:]REST``; epoch 0 when absent or not a number."""
    if ":" not in v:
        return 0, v
    e, rest = v.split(":", 1)
    return (int(e) if is_ascii_digits(e) else 0), rest


def _evr_cmp(a, b, split, cmp_part):
    """-1, 0 or 1 comparing two ``(epoch, version, release)`` versions: the epoch as a number,
    then version and release with ``cmp_part``; ``split`` takes a version string apart."""
    ea, va, ra = split(a.strip())
    eb, vb, rb = split(b.strip())
    if ea != eb:
        return -1 if ea < eb else 1
    return cmp_part(va, vb) or cmp_part(ra, rb)


def _deb_split(v):
    epoch, v = _split_epoch(v)
    if "-" in v:
        upstream, rev = v.rsplit("-", 1)
    else:
        upstream, rev = v, ""
    return epoch, upstream, rev


def deb_version_cmp(a, b):
    """-1, 0 or 1 as Debian package version ``a`` sorts before, equal to or after ``b``."""
    return _evr_cmp(a, b, _deb_split, _deb_cmp_part)


_RPM_SEG = re.compile(r"([0-9]+|[A-Za-z]+|~|\^)")


def _rpmvercmp(a, b):
    if a == b:
        return 0
    sa, sb = _RPM_SEG.findall(a), _RPM_SEG.findall(b)
    while sa or sb:
        if sa and sa[0] == "~" or sb and sb[0] == "~":
            if not (sa and sa[0] == "~"):
                return 1
            if not (sb and sb[0] == "~"):
                return -1
            sa, sb = sa[1:], sb[1:]
            continue
        if sa and sa[0] == "^" or sb and sb[0] == "^":
            if not sa:
                return -1
            if not sb:
                return 1
            if sa[0] != "^":
                return 1
            if sb[0] != "^":
                return -1
            sa, sb = sa[1:], sb[1:]
            continue
        if not sa or not sb:
            return 1 if sa else -1
        x, y = sa.pop(0), sb.pop(0)
        if is_ascii_digits(x) != is_ascii_digits(y):
            return 1 if is_ascii_digits(x) else -1
        if is_ascii_digits(x):
            x, y = int(x), int(y)
        if x != y:
            return 1 if x > y else -1
    return 0


def _rpm_split(v):
    epoch, v = _split_epoch(v)
    version, _sep, release = v.partition("-")
    return epoch, version, release


def rpm_version_cmp(a, b):
    """-1, 0 or 1 comparing ``[EPOCH:]VERSION-RELEASE`` strings like rpm does."""
    return _evr_cmp(a, b, _rpm_split, _rpmvercmp)


def _max_version(versions, cmp):
    best = None
    for v in versions:
        if best is None or cmp(v, best) > 0:
            best = v
    return best


def upstream_of(pkg_version):
    """``3:570.172.08-1.el9`` / ``570.172.08-0ubuntu1`` -> ``570.172.08`` (``None`` if not a driver version)."""
    try:
        return str(DriverVersion(strip_package_revision(pkg_version.strip())))
    except ValueError:
        return None


def pick_candidate(available, target, cmp):
    """The package version to install for ``target``.

    ``target`` is an upstream driver version (``570.172.08``: the highest available revision of
    it wins) or a full package version (``570.172.08-0ubuntu1``, exact match, epoch optional).
    """
    if not available:
        return None
    if "-" in target or ":" in target:
        want = target.split(":", 1)[1] if ":" in target else target
        for v in available:
            if v == target or (v.split(":", 1)[1] if ":" in v else v) == want:
                return v
        return None
    return _max_version([v for v in available if upstream_of(v) == target], cmp)


def target_upstream(target):
    """``570.172.08-0ubuntu1`` -> ``570.172.08``; raises PlanError for a non-driver version."""
    up = upstream_of(target)
    if up is None:
        raise PlanError("target version %r is not an NVIDIA driver version (BRANCH.MINOR[.PATCH], "
                        "optionally with a package revision)" % (target,))
    return up


def default_target(installed_version, target_branch, fixed_releases):
    """Default target version of ``target_branch``: its first fixed release from the catalog.

    ``fixed_releases`` lists first fixed releases of catalog entries (any branch); the highest
    one of the branch fixes every entry of the branch. A node already newer within the branch
    keeps its version (never a downgrade). Returns ``(version, reason)``; version is None when
    the catalog knows no fix for the branch and the node is in another branch.
    """
    fixes = []
    for text in fixed_releases or ():
        try:
            v = DriverVersion(str(text))
        except ValueError:
            continue
        if v.branch == target_branch:
            fixes.append(v)
    fix = max(fixes) if fixes else None
    installed = DriverVersion(installed_version) if installed_version else None
    same = installed is not None and installed.branch == target_branch
    if fix is None:
        if same:
            return str(installed), ("the catalog has no fixed release for branch %d: keeping %s"
                                    % (target_branch, installed))
        return None, "the catalog has no fixed release for branch %d" % target_branch
    if same and installed >= fix:
        return str(installed), ("installed %s is at or above the first fixed release %s of branch %d"
                                % (installed, fix, target_branch))
    return str(fix), "first fixed release of branch %d in the catalog" % target_branch


def _check_branch_move(installed_version, target, allow_branch_change, allow_downgrade):
    inst = DriverVersion(installed_version)
    tgt = DriverVersion(target)
    if inst.branch != tgt.branch and not allow_branch_change:
        raise PlanError(
            "refusing a cross-branch driver change: installed branch %d (%s), target branch %d (%s). "
            "A branch change replaces the whole driver stack and can change the CUDA driver API; "
            "set kubegpu_driver_allow_branch_change: true (module option allow_branch_change) to do it"
            % (inst.branch, inst, tgt.branch, tgt))
    if inst.branch == tgt.branch and tgt < inst and not allow_downgrade:
        raise PlanError(
            "refusing to downgrade the driver from %s to %s within branch %d; set "
            "kubegpu_driver_allow_downgrade: true (module option allow_downgrade) to do it"
            % (inst, tgt, tgt.branch))
    return inst, tgt


# --------------------------------------------------------------------------------------------
# apt
# --------------------------------------------------------------------------------------------

APT_BRANCH_NAME = re.compile(
    r"^(?P<stem>(?:lib)?nvidia-[a-z0-9][a-z0-9.+-]*?|xserver-xorg-video-nvidia|cuda-drivers-fabricmanager)"
    r"-(?P<branch>\d{3,})(?P<server>-server)?(?P<open>-open)?$")
COMPUTE_UTILS_STEM = "nvidia-compute-utils"
# apt stems of the fabric manager packages (NVIDIA's and Ubuntu's names)
APT_FABRIC_MANAGER_STEMS = ("nvidia-fabricmanager", "nvidia-fabricmanager-dev", "cuda-drivers-fabricmanager")
FABRIC_MANAGER_SERVICE = "nvidia-fabricmanager.service"


def apt_branch_name(name):
    """``(stem, branch, server, open)`` of a branch package name, or None.

    ``nvidia-dkms-570-server-open`` -> ``("nvidia-dkms", 570, True, True)``. Names that carry a
    full version (``nvidia-firmware-570-570.172.08``) or a kernel version
    (``linux-modules-nvidia-570-...``) are not branch packages.
    """
    m = APT_BRANCH_NAME.match(name)
    if not m:
        return None
    return m.group("stem"), int(m.group("branch")), bool(m.group("server")), bool(m.group("open"))


def apt_rename(name, branch):
    """The same package of another branch (``libnvidia-compute-575`` -> ``libnvidia-compute-570``)."""
    stem, _b, server, opn = apt_branch_name(name)
    return "%s-%d%s%s" % (stem, branch, "-server" if server else "", "-open" if opn else "")


def parse_apt_cache_madison(text):
    """``apt-cache madison NAME...`` -> ``{name: [version, ...]}`` (repository order, no duplicates)."""
    out = {}
    for line in (text or "").splitlines():
        fields = [f.strip() for f in line.split("|")]
        if len(fields) < 3 or not fields[0] or not fields[1]:
            continue
        versions = out.setdefault(fields[0], [])
        if fields[1] not in versions:
            versions.append(fields[1])
    return out


def _spec(name, arch, version, native_arch):
    qual = ":%s" % arch if arch and arch not in ("all", native_arch) and native_arch else ""
    return "%s%s=%s" % (name, qual, version)


def _driver_pkg(packages):
    inst = [p for p in packages if p.get("installed")]
    version, source = userspace_driver_version(inst)
    if version is None:
        raise PlanError("no installed NVIDIA driver found in the package database: this role upgrades "
                        "an installed driver, it does not install one")
    return inst, version, source


def plan_apt(packages, target, available, allow_branch_change=False, allow_downgrade=False,
             compute_utils=True, native_arch=None):
    """Plan the apt transaction for ``target`` (upstream ``570.172.08`` or full package version).

    ``packages``: installed packages (``driver_packages.parse_dpkg_query``); ``available``:
    ``{name: [candidate versions]}`` (``parse_apt_cache_madison``) for the branch names.
    Returns a dict (see the module's RETURN); raises PlanError when the move is refused or
    impossible.
    """
    inst, installed_version, source = _driver_pkg(packages)
    upstream = target_upstream(target)
    inst_v, tgt_v = _check_branch_move(installed_version, upstream, allow_branch_change, allow_downgrade)
    from_branch, to_branch = inst_v.branch, tgt_v.branch

    members = []  # (name, arch, from_version, replaces)
    seen = set()
    server = False
    other_branches = []
    for p in inst:
        parsed = apt_branch_name(p["name"])
        if parsed is None:
            continue
        stem, branch, is_server, _open = parsed
        if branch != from_branch:
            if branch != to_branch:
                other_branches.append("%s %s" % (p["name"], p["version"]))
                continue
            # already a package of the target branch (a half-done branch move)
        if stem == "libnvidia-compute" or stem.startswith("nvidia-driver"):
            server = server or is_server
        name = apt_rename(p["name"], to_branch)
        key = (name, p["arch"])
        if key in seen:
            continue
        seen.add(key)
        same = name == p["name"]
        members.append({"name": name, "arch": p["arch"], "from": p["version"] if same else None,
                        "replaces": None if same else "%s %s" % (p["name"], p["version"]),
                        "compute_utils": stem == COMPUTE_UTILS_STEM,
                        "fabric_manager": stem in APT_FABRIC_MANAGER_STEMS})
    # a target-branch package installed beside the old branch keeps its own version as "from"
    by_name = dict(((p["name"], p["arch"]), p["version"]) for p in inst)
    for m in members:
        if m["from"] is None and (m["name"], m["arch"]) in by_name:
            m["from"] = by_name[(m["name"], m["arch"])]
    if compute_utils and not any(m["compute_utils"] for m in members):
        cu = "%s-%d%s" % (COMPUTE_UTILS_STEM, to_branch, "-server" if server else "")
        arch = next((m["arch"] for m in members if m["arch"] not in ("", "all")), native_arch or "")
        members.append({"name": cu, "arch": arch, "from": by_name.get((cu, arch)), "replaces": None,
                        "compute_utils": True, "fabric_manager": False})

    selected, unavailable = _select_candidates(members, available, target, deb_version_cmp)
    essential = [m["name"] for m in members
                 if m["name"] in unavailable and (m["compute_utils"]
                                                  or re.match(r"^(libnvidia-compute|nvidia-driver)-\d", m["name"]))]
    if essential:
        raise PlanError("target %s is not available from the apt sources for %s (apt-cache madison "
                        "lists %s); check the repository or set kubegpu_driver_version"
                        % (target, ", ".join(essential),
                           "; ".join("%s: %s" % (n, ", ".join(available.get(n) or []) or "nothing")
                                     for n in essential)))
    _fabric_manager_available(members, unavailable, target, available)
    return _finish_plan("apt", selected, unavailable, other_branches, installed_version, source,
                        upstream, from_branch, to_branch, deb_version_cmp,
                        lambda m: _spec(m["name"], m["arch"], m["to"], native_arch))


def _select_candidates(members, available, target, cmp):
    """``(selected, unavailable)``: the members with a candidate at ``target`` (its version set as
    ``m["to"]``) and the names of those without one."""
    unavailable = []
    selected = []
    for m in members:
        cand = pick_candidate(available.get(m["name"]) or [], target, cmp)
        if cand is None:
            unavailable.append(m["name"])
            continue
        m["to"] = cand
        selected.append(m)
    return selected, unavailable


def _fabric_manager_available(members, unavailable, target, available):
    """Fail when an installed fabric manager package has no candidate at the target: the driver
    would move without it and the daemon would refuse to start (CUDA error 802)."""
    missing = [m["name"] for m in members if m["fabric_manager"] and m["name"] in unavailable]
    if missing:
        raise PlanError(
            "fabric manager must move with the driver (exactly the same version) but %s has no candidate "
            "at %s (the package sources list %s); add the fabric manager of %s to the repository or "
            "choose a target version it has"
            % (", ".join(missing), target,
               "; ".join("%s: %s" % (n, ", ".join(available.get(n) or []) or "nothing") for n in missing),
               target))


def fabric_manager_state(selected, upstream):
    """What the plan says about fabric manager: ``{installed, packages, from, to, changed,
    matches_target, service}``; ``from`` is the upstream version of the installed fabric manager
    (the service package's, else the first member's)."""
    fm = [m for m in selected if m.get("fabric_manager")]
    main = next((m for m in fm if re.match(r"^nvidia-fabric-?manager(-\d+)?$", m["name"])), fm[0] if fm else None)
    current = upstream_of(main["from"]) if main and main["from"] else None
    return {
        "installed": bool(fm),
        "packages": sorted(set(m["name"] for m in fm)),
        "from": current,
        "to": upstream if fm else None,
        "changed": any(m["action"] != "none" for m in fm),
        "matches_target": (all(m["from"] is not None and upstream_of(m["from"]) == upstream for m in fm)
                           if fm else None),
        "service": FABRIC_MANAGER_SERVICE if fm else None,
    }


def _finish_plan(manager, selected, unavailable, other_branches, installed_version, source,
                 upstream, from_branch, to_branch, cmp, spec):
    changes = []
    downgrade = False
    for m in selected:
        if m["from"] is None:
            m["action"] = "install"
        else:
            c = cmp(m["to"], m["from"])
            m["action"] = "none" if c == 0 else ("upgrade" if c > 0 else "downgrade")
            downgrade = downgrade or c < 0
        if m["action"] != "none":
            changes.append(m)
    selected.sort(key=lambda m: (m["name"], m["arch"]))
    # fabric manager is a userspace daemon: its own change needs a restart, not a reboot
    reboot_pkgs = sorted(set(m["name"] for m in changes
                             if not m["compute_utils"] and not m.get("fabric_manager")))
    before = "".join("%s %s\n" % (m["name"], m["from"] or "(not installed)") for m in selected)
    before += "".join("%s (replaced)\n" % m["replaces"] for m in selected if m["replaces"])
    after = "".join("%s %s\n" % (m["name"], m["to"]) for m in selected)
    if changes:
        summary = "%s -> %s: %s" % (installed_version, upstream, ", ".join(
            "%s %s -> %s" % (m["name"], m["from"] or "(none)", m["to"]) for m in changes))
    else:
        summary = "nothing to do: the %d packages of branch %d are at %s" % (len(selected), to_branch, upstream)
    return {
        "manager": manager,
        "installed_version": installed_version,
        "installed_version_source": source,
        "installed_branch": from_branch,
        "target_version": upstream,
        "target_branch": to_branch,
        "branch_change": from_branch != to_branch,
        "packages": [{"name": m["name"], "arch": m["arch"], "from": m["from"], "to": m["to"],
                      "action": m["action"], "replaces": m["replaces"],
                      "compute_utils": m["compute_utils"],
                      "fabric_manager": bool(m.get("fabric_manager"))} for m in selected],
        "install": [spec(m) for m in selected],
        "hold": sorted(set(m["name"] for m in selected)),
        "changes": [{"name": m["name"], "from": m["from"], "to": m["to"], "action": m["action"]}
                    for m in sorted(changes, key=lambda m: m["name"])],
        "nothing_to_do": not changes,
        "downgrade": downgrade,
        "reboot_required": bool(reboot_pkgs),
        "drain_required": bool(reboot_pkgs),
        "reboot_packages": reboot_pkgs,
        "kernel_packages": sorted(set(m["name"] for m in selected
                                      if not m["compute_utils"] and not m.get("fabric_manager"))),
        "fabric_manager": fabric_manager_state(selected, upstream),
        "unavailable": sorted(unavailable),
        "other_branches": sorted(other_branches),
        "summary": summary,
        "diff": {"before": before, "after": after},
    }


# --------------------------------------------------------------------------------------------
# dnf (NVIDIA CUDA repository module streams)
# --------------------------------------------------------------------------------------------

RPM_DRIVER_NAME = re.compile(
    r"^(nvidia-driver(-[A-Za-z0-9-]+)?|libnvidia-(?!container)[A-Za-z0-9-]+|nvidia-kmod-common|"
    r"kmod-nvidia-[A-Za-z0-9.-]+|nvidia-modprobe|nvidia-persistenced|nvidia-settings|nvidia-xconfig|"
    r"nvidia-libXNVCtrl(-devel)?|nvidia-fabric-manager(-devel)?|nvidia-fabricmanager(-devel)?-\d+|"
    r"cuda-drivers(-fabricmanager)?(-\d+)?)$")
RPM_FABRIC_MANAGER_NAME = re.compile(
    r"^(nvidia-fabric-manager(-devel)?|nvidia-fabricmanager(-devel)?-\d+|cuda-drivers-fabricmanager(-\d+)?)$")
RPM_COMPUTE_UTILS = "nvidia-driver-cuda"
DNF_MODULE = "nvidia-driver"


def parse_dnf_module_list(text, module=DNF_MODULE):
    """Enabled stream of ``module`` from ``dnf module list --enabled MODULE``, or None.

    Rows look like ``nvidia-driver   570-dkms [e]   default [d], fm, ks [i], src   Nvidia driver``.
    """
    for line in (text or "").splitlines():
        fields = line.split()
        if len(fields) < 3 or fields[0] != module:
            continue
        stream = re.sub(r"\[[a-z]\]", "", fields[1])
        flags = fields[1][len(stream):] + (fields[2] if fields[2].startswith("[") else "")
        if "[e]" in flags:
            return stream
    return None


def parse_dnf_repoquery(text):
    """``dnf repoquery --qf '%{name} %{epoch}:%{version}-%{release} %{arch}'`` -> ``{name: [evr, ...]}``."""
    out = {}
    for line in (text or "").splitlines():
        fields = line.split()
        if len(fields) < 2 or ":" not in fields[1]:
            continue
        versions = out.setdefault(fields[0], [])
        if fields[1] not in versions:
            versions.append(fields[1])
    return out


def parse_versionlock_list(text):
    """versionlock.list entries (``name-EPOCH:VERSION-RELEASE.ARCH`` globs) -> ``{name: [entry]}``."""
    out = {}
    for line in (text or "").splitlines():
        entry = line.strip()
        if not entry or entry.startswith("#") or entry.startswith("!"):
            continue
        m = re.match(r"^(.+)-(\d+):[^-]+-[^-]+$", entry)
        if m:
            out.setdefault(m.group(1), []).append(entry)
    return out


def dnf_flavor(stream, packages):
    """``dkms`` or ``open``: from the enabled stream, else from the installed kmod package."""
    if stream:
        if stream.endswith("open") or stream.endswith("open-dkms"):
            return "open"
        if stream.endswith("dkms"):
            return "dkms"
    names = set(p["name"] for p in packages if p.get("installed"))
    if any(n.startswith("kmod-nvidia-open") for n in names):
        return "open"
    return "dkms"


def versionlock_entry(name, evr):
    """``nvidia-driver`` + ``3:570.172.08-1.el9`` -> ``nvidia-driver-3:570.172.08-1.el9.*``."""
    if ":" not in evr:
        evr = "0:" + evr
    return "%s-%s.*" % (name, evr)


def plan_dnf(packages, target, available, stream=None, locks=None, allow_branch_change=False,
             allow_downgrade=False, compute_utils=True, module=DNF_MODULE, flavor=None):
    """Plan the dnf transaction for ``target``.

    ``packages``: installed (``driver_packages.parse_rpm_query``); ``available``:
    ``{name: [EPOCH:VERSION-RELEASE]}`` (``parse_dnf_repoquery``, with modular filtering off);
    ``stream``: the enabled stream of ``module``; ``locks``: ``parse_versionlock_list``.
    The result adds ``dnf``: ``{module_switch, stream_from, stream_to, versionlock_add,
    versionlock_delete}``.
    """
    inst, installed_version, source = _driver_pkg(packages)
    upstream = target_upstream(target)
    inst_v, tgt_v = _check_branch_move(installed_version, upstream, allow_branch_change, allow_downgrade)
    members = []
    seen = set()
    other_branches = []
    for p in inst:
        if not RPM_DRIVER_NAME.match(p["name"]):
            continue
        up = upstream_of(p["version"])
        if up is None:
            continue
        if DriverVersion(up).branch not in (inst_v.branch, tgt_v.branch):
            other_branches.append("%s %s" % (p["name"], p["version"]))
            continue
        key = (p["name"], p["arch"])
        if key in seen:
            continue
        seen.add(key)
        members.append({"name": p["name"], "arch": p["arch"], "from": p["version"], "replaces": None,
                        "compute_utils": p["name"] == RPM_COMPUTE_UTILS,
                        "fabric_manager": bool(RPM_FABRIC_MANAGER_NAME.match(p["name"]))})
    if compute_utils and not any(m["compute_utils"] for m in members):
        members.append({"name": RPM_COMPUTE_UTILS, "arch": "", "from": None, "replaces": None,
                        "compute_utils": True, "fabric_manager": False})
    selected, unavailable = _select_candidates(members, available, target, rpm_version_cmp)
    essential = [n for n in unavailable if n in (RPM_COMPUTE_UTILS, "nvidia-driver")]
    if essential:
        raise PlanError("target %s is not available from the dnf repositories for %s; check the "
                        "repository or set kubegpu_driver_version" % (target, ", ".join(essential)))
    _fabric_manager_available(members, unavailable, target, available)
    fl = flavor or dnf_flavor(stream, inst)
    stream_to = "%d-%s" % (tgt_v.branch, fl)
    plan = _finish_plan("dnf", selected, unavailable, other_branches, installed_version, source,
                        upstream, inst_v.branch, tgt_v.branch, rpm_version_cmp,
                        lambda m: "%s-%s" % (m["name"], m["to"]))
    locks = locks or {}
    wanted = dict((m["name"], versionlock_entry(m["name"], m["to"])) for m in selected)
    add = sorted(n for n, e in wanted.items() if e not in locks.get(n, []))
    delete = sorted(n for n in wanted if any(e != wanted[n] for e in locks.get(n, [])))
    switch = stream != stream_to
    plan["dnf"] = {
        "module": module,
        "stream_from": stream,
        "stream_to": stream_to,
        "module_switch": "%s:%s" % (module, stream_to) if switch else None,
        "versionlock_add": ["%s-%s" % (n, _evr0(next(m["to"] for m in selected if m["name"] == n))) for n in add],
        "versionlock_delete": delete,
    }
    if switch:
        plan["nothing_to_do"] = False
        plan["summary"] = "module stream %s -> %s:%s; %s" % (
            "%s:%s" % (module, stream) if stream else "(none enabled)", module, stream_to, plan["summary"])
    return plan


def _evr0(evr):
    return evr if ":" in evr else "0:" + evr


# --------------------------------------------------------------------------------------------
# Who holds the package manager lock (/proc/locks)
# --------------------------------------------------------------------------------------------

APT_LOCK_FILES = ("/var/lib/dpkg/lock-frontend", "/var/lib/dpkg/lock", "/var/lib/apt/lists/lock",
                  "/var/cache/apt/archives/lock")


def parse_proc_locks(text):
    """``/proc/locks`` -> list of ``{kind, access, pid, major, minor, inode}`` (held locks only)."""
    out = []
    for line in (text or "").splitlines():
        fields = line.split()
        if len(fields) < 6 or "->" in fields[:2]:
            continue  # "->" rows are waiters, not holders
        try:
            kind, access, pid, dev = fields[1], fields[3], int(fields[4]), fields[5]
            major, minor, inode = dev.split(":")
            out.append({"kind": kind, "access": access, "pid": pid, "major": int(major, 16),
                        "minor": int(minor, 16), "inode": int(inode)})
        except (ValueError, IndexError):
            continue
    return out


def lock_holders(locks, files):
    """Match parsed /proc/locks rows to ``files`` (``{path: (major, minor, inode)}``)."""
    out = []
    for path, ident in sorted(files.items()):
        for lk in locks:
            if (lk["major"], lk["minor"], lk["inode"]) == tuple(ident):
                out.append({"path": path, "pid": lk["pid"], "kind": lk["kind"], "access": lk["access"]})
    return out
