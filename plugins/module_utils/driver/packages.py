# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Installed NVIDIA packages on a node: dpkg-query / rpm queries and their parsing.

Node side, Python 3.8+. The query is run by the caller's ``run_command`` (the module's
``AnsibleModule.run_command``) with explicit argument lists; everything else is plain functions
on text so unit tests drive them directly.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

from ansible_collections.kubegpu.fleet.plugins.module_utils._common.versions import (
    DriverVersion,
    strip_package_revision,
)

# Package-name globs queried on the node (dpkg-query and rpm both take shell globs).
# datacenter-gpu-manager*: DCGM's host packages (datacenter-gpu-manager, datacenter-gpu-manager-4-core, ...).
QUERY_PATTERNS = ("*nvidia*", "cuda-drivers*", "libcuda*", "datacenter-gpu-manager*")
DPKG_FORMAT = "${Package}\\t${Version}\\t${db:Status-Abbrev}\\t${Architecture}\\n"
RPM_FORMAT = "%{NAME}\\t%|EPOCH?{%{EPOCH}:}:{}|%{VERSION}-%{RELEASE}\\tii \\t%{ARCH}\\n"

# Where the installed userspace driver version is read from, best first: the package that
# ships libnvidia-ml / libcuda, then the driver metapackages.
_USERSPACE_PACKAGES = (
    re.compile(r"^libnvidia-compute-\d+(-server)?$"),      # Ubuntu, NVIDIA CUDA repo (deb)
    re.compile(r"^nvidia-driver-(NVML|cuda-libs|libs)$"),   # NVIDIA CUDA repo (rpm)
    re.compile(r"^(libnvidia-ml1|libcuda1)$"),              # Debian's own packaging
    re.compile(r"^nvidia-driver(-\d+)?(-server)?(-open)?$"),
    re.compile(r"^nvidia-utils-\d+(-server)?$"),
)
_TOOLKIT_PACKAGES = ("nvidia-container-toolkit", "nvidia-container-toolkit-base")
# dpkg db:Status-Abbrev second character: i installed, W/t triggers pending (files in place).
_DPKG_INSTALLED = ("i", "W", "t")


def dpkg_query_args(binary, package_root="/"):
    """Argument list for dpkg-query listing NVIDIA packages (optionally of another root)."""
    args = [binary]
    if package_root and package_root != "/":
        args.append("--admindir=%s" % os.path.join(package_root, "var", "lib", "dpkg"))
    # dpkg-query expands the \t and \n escapes itself.
    args += ["-W", "-f=" + DPKG_FORMAT]
    return args + list(QUERY_PATTERNS)


def rpm_query_args(binary, package_root="/"):
    """Argument list for rpm listing NVIDIA packages (optionally of another root)."""
    args = [binary]
    if package_root and package_root != "/":
        args += ["--root", package_root]
    args += ["-qa", "--qf", RPM_FORMAT]  # rpm expands \t and \n itself
    return args + list(QUERY_PATTERNS)


def parse_dpkg_query(text):
    """Parse ``dpkg-query -W -f='${Package}\\t${Version}\\t${db:Status-Abbrev}\\t${Architecture}\\n'``.

    Rows for packages that are not installed (status ``un``) or only have config files left
    (``rc``) are dropped. Returns a list of ``{name, version, arch, status, installed, held}``
    sorted by name.
    """
    out = []
    for line in (text or "").splitlines():
        fields = line.split("\t")
        if len(fields) < 3 or not fields[0].strip():
            continue
        name, version, status = fields[0].strip(), fields[1].strip(), fields[2]
        arch = fields[3].strip() if len(fields) > 3 else ""
        if len(status) < 2 or not version:
            continue
        if status[1] in ("n", "c"):
            continue
        out.append({
            "name": name,
            "version": version,
            "arch": arch,
            "status": status.strip(),
            "installed": status[1] in _DPKG_INSTALLED,
            "held": status[0] == "h",
        })
    out.sort(key=lambda p: (p["name"], p["arch"]))
    return out


def parse_rpm_query(text):
    """Parse ``rpm -qa --qf '%{NAME}\\t[EPOCH:]VERSION-RELEASE\\tii \\t%{ARCH}\\n'`` output."""
    out = []
    for line in (text or "").splitlines():
        fields = line.split("\t")
        if len(fields) < 2 or not fields[0].strip() or not fields[1].strip():
            continue
        arch = fields[3].strip() if len(fields) > 3 else (fields[2].strip() if len(fields) > 2 else "")
        out.append({
            "name": fields[0].strip(),
            "version": fields[1].strip(),
            "arch": arch,
            "status": "installed",
            "installed": True,
            "held": False,
        })
    out.sort(key=lambda p: (p["name"], p["arch"]))
    return out


def upstream_version(pkg_version):
    """``3:570.172.08-1.el9`` / ``570.172.08-0ubuntu1`` -> ``570.172.08``."""
    return strip_package_revision(pkg_version.strip())


def _driver_version_of(pkg):
    try:
        return DriverVersion(upstream_version(pkg["version"]))
    except ValueError:
        return None


def userspace_driver_version(packages):
    """(version, package name) of the installed userspace driver, or (None, None).

    The first rule in ``_USERSPACE_PACKAGES`` that has an installed package with a driver-shaped
    version wins; among several packages of one rule the highest version wins.
    """
    for rx in _USERSPACE_PACKAGES:
        best = None
        for pkg in packages:
            if not pkg.get("installed") or not rx.match(pkg["name"]):
                continue
            v = _driver_version_of(pkg)
            if v is not None and (best is None or v > best[0]):
                best = (v, pkg["name"])
        if best is not None:
            return str(best[0]), best[1]
    return None, None


def toolkit_version(packages):
    """Installed nvidia-container-toolkit version (package version string) or None."""
    for name in _TOOLKIT_PACKAGES:
        for pkg in packages:
            if pkg["name"] == name and pkg.get("installed"):
                return pkg["version"]
    return None


def compute_utils_status(packages, driver_version, manager):
    """Whether ``nvidia-compute-utils-<branch>`` (Ubuntu naming) is installed at the driver's version.

    It ships nvidia-cuda-mps-control; without it the MPS control daemon crash-loops after a
    driver upgrade. Only Debian/Ubuntu naming is known, so rpm nodes report ``checked: false``.
    """
    out = {"checked": False, "package": None, "installed": None, "version": None,
           "matches_driver": None, "reason": None}
    if manager != "dpkg":
        out["reason"] = ("package naming for nvidia-cuda-mps-control is only known for "
                         "Debian/Ubuntu (nvidia-compute-utils-<branch>)")
        return out
    if not driver_version:
        out["reason"] = "driver version unknown"
        return out
    dv = DriverVersion(driver_version)
    names = ("nvidia-compute-utils-%d" % dv.branch, "nvidia-compute-utils-%d-server" % dv.branch)
    out["checked"] = True
    out["package"] = names[0]
    out["installed"] = False
    out["matches_driver"] = False
    for name in names:
        for pkg in packages:
            if pkg["name"] == name and pkg.get("installed"):
                out["package"] = name
                out["installed"] = True
                out["version"] = pkg["version"]
                pv = _driver_version_of(pkg)
                out["matches_driver"] = pv is not None and pv == dv
                if out["matches_driver"]:
                    return out
    if not out["installed"]:
        out["reason"] = "%s is not installed" % names[0]
    elif not out["matches_driver"]:
        out["reason"] = "%s %s does not match driver %s" % (out["package"], out["version"], driver_version)
    return out


def query_packages(run_command, manager, binary, package_root="/"):
    """Run the query for ``manager`` (``dpkg``/``rpm``); return ``(packages, error)``.

    dpkg-query exits 1 when a pattern matches no package, which is not an error here.
    """
    if manager == "dpkg":
        args = dpkg_query_args(binary, package_root)
        ok_rc = (0, 1)
        parse = parse_dpkg_query
    elif manager == "rpm":
        args = rpm_query_args(binary, package_root)
        ok_rc = (0,)
        parse = parse_rpm_query
    else:
        raise ValueError("unknown package manager %r" % (manager,))
    rc, out, err = run_command(args)
    if rc not in ok_rc or (rc != 0 and err and "no packages found matching" not in err):
        return [], "%s failed (rc=%s): %s" % (os.path.basename(binary), rc, (err or out or "").strip()[:500])
    return parse(out), None
