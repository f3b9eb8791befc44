# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""kubegpu.fleet.driver_upgrade_plan's logic; the module file is only the interface.

``driver_upgrade_plan(params, run_command, get_bin_path, warn, diff)`` reads the installed
NVIDIA packages, the loaded kernel module version and the apt/dpkg lock holders, asks the
package manager for the candidates and returns the plan (upgrade.py), or raises ProbeFailed
with the message and result keys the module fails with. ``run_driver_upgrade_plan(module)``
is the module's body: it builds the bounded command runner and exits or fails ``module``.

Node side: Python 3.8+. See _common/node_probes.py for the calling convention.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.kubegpu.fleet.plugins.module_utils.driver import upgrade as du
from ansible_collections.kubegpu.fleet.plugins.module_utils._common import safe_io
from ansible_collections.kubegpu.fleet.plugins.module_utils._common.node_probes import (
    ProbeFailed,
    to_native_text,
)
from ansible_collections.kubegpu.fleet.plugins.module_utils.driver.node import (
    list_packages,
    module_runner,
)
from ansible_collections.kubegpu.fleet.plugins.module_utils._common.procfs import (
    parse_nvidia_version,
    proc_file,
    read_text,
    read_text_reason,
)
from ansible_collections.kubegpu.fleet.plugins.module_utils._common.versions import DriverVersion

# The package queries run with this environment (parsed output must be English).
UPGRADE_PLAN_ENVIRON = dict(LANG="C", LC_ALL="C", LC_MESSAGES="C")


def _run(run, args, what, ok=(0,)):
    rc, out, err = run(args)
    if rc not in ok:
        raise ProbeFailed("%s failed (rc=%s): %s" % (what, rc, (err or out or "").strip()[:1000]),
                          command=args)
    return out


def _cmdline(proc_path, pid):
    text = read_text(os.path.join(proc_path, str(pid), "cmdline"), limit=65536)
    return (text or "").replace("\0", " ").strip() or None


def lock_report(proc_path="/proc", warn=None):
    """Holders of the dpkg/apt locks; always from the real /proc (pids of this namespace)."""
    files = {}
    for path in du.APT_LOCK_FILES:
        try:
            st = os.stat(path)
        except OSError:
            continue
        files[path] = (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
    if not files:
        return []
    locks_path = proc_file(proc_path, "locks")
    text, reason = read_text_reason(locks_path, 16 << 20)  # a line per lock held on the node
    if reason and warn:
        warn("cannot read %s: %s; holders of the apt/dpkg locks unknown" % (locks_path, reason))
    holders = du.lock_holders(du.parse_proc_locks(text), files)
    for h in holders:
        h["command"] = _cmdline(proc_path, h["pid"])
        h["description"] = "pid %d (%s) holds %s (%s %s lock)" % (
            h["pid"], h["command"] or "command unknown", h["path"], h["kind"], h["access"])
    return holders


def candidate_names_apt(packages, target_branch):
    """Package names to ask ``apt-cache madison`` about for a move to ``target_branch``."""
    names = set()
    for p in packages:
        parsed = du.apt_branch_name(p["name"]) if p.get("installed") else None
        if parsed:
            names.add(p["name"])
            names.add(du.apt_rename(p["name"], target_branch))
    names.add("%s-%d" % (du.COMPUTE_UTILS_STEM, target_branch))
    names.add("%s-%d-server" % (du.COMPUTE_UTILS_STEM, target_branch))
    return sorted(names)


def _target(params, installed):
    """``(target, reason)``: the option, else the default of the branch; raises PlanError."""
    target = params["version"]
    if target:
        up = du.target_upstream(target)
        if params["branch"] is not None and DriverVersion(up).branch != params["branch"]:
            raise du.PlanError("version %s is not in branch %d" % (target, params["branch"]))
        return target, "set explicitly"
    branch = params["branch"] if params["branch"] is not None else DriverVersion(installed).branch
    target, reason = du.default_target(installed, branch, params["fixed_releases"])
    if target is None:
        raise du.PlanError("%s and the node runs %s: set the target version explicitly "
                           "(kubegpu_driver_version)" % (reason, installed))
    return target, reason


def _plan_apt(params, run, get_bin_path, packages, target, target_branch):
    names = candidate_names_apt(packages, target_branch)
    out = _run(run, [get_bin_path("apt-cache", required=True), "madison"] + names,
               "apt-cache madison")
    arch = _run(run, [get_bin_path("dpkg", required=True), "--print-architecture"],
                "dpkg --print-architecture").strip()
    return du.plan_apt(packages, target, du.parse_apt_cache_madison(out),
                       allow_branch_change=params["allow_branch_change"],
                       allow_downgrade=params["allow_downgrade"],
                       compute_utils=params["compute_utils"], native_arch=arch)


def _plan_dnf(params, run, get_bin_path, packages, target, _target_branch):
    dnf = get_bin_path("dnf", required=True)
    streams = _run(run, [dnf, "-q", "module", "list", "--enabled", params["dnf_module"]],
                   "dnf module list", ok=(0, 1))
    names = sorted(set([x["name"] for x in packages if du.RPM_DRIVER_NAME.match(x["name"])]
                       + [du.RPM_COMPUTE_UTILS, "nvidia-driver"]))
    out = _run(run, [dnf, "-q", "repoquery", "--disable-modular-filtering", "--showduplicates",
                     "--qf", "%{name} %{epoch}:%{version}-%{release} %{arch}"] + names,
               "dnf repoquery")
    lock_path = params["dnf_versionlock_path"]
    lock_text, reason = read_text_reason(lock_path)
    if reason:
        raise du.PlanError("cannot read dnf_versionlock_path %s: %s" % (lock_path, reason))
    return du.plan_dnf(packages, target, du.parse_dnf_repoquery(out),
                       stream=du.parse_dnf_module_list(streams, params["dnf_module"]),
                       locks=du.parse_versionlock_list(lock_text),
                       allow_branch_change=params["allow_branch_change"],
                       allow_downgrade=params["allow_downgrade"],
                       compute_utils=params["compute_utils"], module=params["dnf_module"],
                       flavor=None if params["dnf_flavor"] == "auto" else params["dnf_flavor"])


def driver_upgrade_plan(params, run_command, get_bin_path, warn, diff=False):
    """The module's result for ``params`` (its options); raises ProbeFailed as the module fails.

    ``run_command`` must run with UPGRADE_PLAN_ENVIRON (see run_driver_upgrade_plan).
    ``params["package_root"]`` (not a module option; default ``/``) is where the package
    database is looked for.
    """
    result = dict(changed=False, locks=[], kernel_module_version=None)
    try:
        safe_io.check_package_name(params["dnf_module"], "dnf_module")
    except safe_io.UnsafeInput as e:
        raise ProbeFailed(str(e), **result)
    version_path = proc_file(params["proc_path"], "driver", "nvidia", "version")
    text, reason = read_text_reason(version_path)
    if reason:
        warn("cannot read %s: %s; kernel module version unknown" % (version_path, reason))
    result["kernel_module_version"] = parse_nvidia_version(text)
    result["locks"] = lock_report(warn=warn)

    info = list_packages(run_command, get_bin_path, params.get("package_root") or "/")
    if info["error"]:
        raise ProbeFailed("cannot list the installed NVIDIA packages: %s" % info["error"], **result)
    manager = params["package_manager"]
    if manager == "auto":
        manager = {"dpkg": "apt", "rpm": "dnf"}.get(info["manager"])
    if manager == "apt" and info["manager"] != "dpkg" or manager == "dnf" and info["manager"] != "rpm":
        raise ProbeFailed("package_manager %s does not match the package database found (%s)"
                          % (manager, info["manager"]), **result)
    packages = info["packages"]
    installed, _source = du.userspace_driver_version([x for x in packages if x.get("installed")])
    if installed is None:
        raise ProbeFailed("no installed NVIDIA driver found in the package database: this module "
                          "plans upgrades of an installed driver", packages=packages, **result)

    try:
        target, reason = _target(params, installed)
        target_branch = DriverVersion(du.target_upstream(target)).branch
        planner = _plan_apt if manager == "apt" else _plan_dnf
        plan = planner(params, run_command, get_bin_path, packages, target, target_branch)
    except du.PlanError as e:
        raise ProbeFailed(to_native_text(e), installed_version=installed, **result)

    plan_diff = plan.pop("diff")
    result.update(plan)
    result["target_reason"] = reason
    kmod = result["kernel_module_version"]
    result["reboot_pending"] = bool(kmod) and kmod != plan["target_version"]
    if diff:
        result["diff"] = dict(plan_diff, before_header="NVIDIA driver packages (installed)",
                              after_header="NVIDIA driver packages (plan)")
    return result


def run_driver_upgrade_plan(module):
    """kubegpu.fleet.driver_upgrade_plan: exits or fails ``module`` (read only: same in check mode)."""
    run = module_runner(module, UPGRADE_PLAN_ENVIRON, changed=False, locks=[], kernel_module_version=None)
    try:
        result = driver_upgrade_plan(module.params, run, module.get_bin_path, module.warn, diff=module._diff)
    except ProbeFailed as e:
        module.fail_json(msg=e.msg, **e.result)
    module.exit_json(**result)
