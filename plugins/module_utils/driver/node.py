# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Collect the node facts driver_guard evaluates (node side, Python 3.8+).

Every fact has a source: an explicit module option wins; otherwise the value is detected on
the node (installed packages, ``<proc_path>/driver/nvidia/version``, and the gpu_facts probe,
which is only run when something is still unknown).
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.kubegpu.fleet.plugins.module_utils.driver import packages as driver_packages
from ansible_collections.kubegpu.fleet.plugins.module_utils._common import safe_io
from ansible_collections.kubegpu.fleet.plugins.module_utils.driver.defects import (
    parse_component_version,
)
from ansible_collections.kubegpu.fleet.plugins.module_utils._common.procfs import (
    parse_nvidia_version,
    proc_file,
    read_text_reason,
)
from ansible_collections.kubegpu.fleet.plugins.module_utils._common.versions import DriverVersion

NOT_INSTALLED = ("", "none")
# dpkg-query/rpm over the NVIDIA patterns take well under a second; apt-cache madison and dnf
# repoquery read the package lists (seconds). A command past its deadline is killed.
COMMAND_TIMEOUT = 120.0
COMMAND_OUTPUT_LIMIT = 16 << 20
RC_TIMEOUT = 124
RC_CANNOT_RUN = 127


class NodeInputError(ValueError):
    """An option value that does not parse; the message names the option and the value."""


def bounded_runner(timeout=COMMAND_TIMEOUT, environ_update=None, limit=COMMAND_OUTPUT_LIMIT):
    """A ``run_command(args, **kwargs) -> (rc, stdout, stderr)`` like AnsibleModule's, through
    :func:`safe_io.run_command`: no shell, stdin from /dev/null, a deadline (the command and
    anything it daemonised are killed), bounded output, and text that is always valid UTF-8
    (undecodable bytes, e.g. a Latin-1 package description, become U+FFFD), so the result is
    JSON the controller accepts.

    A command past its deadline answers rc 124 and one that cannot start rc 127, with stderr
    saying what happened, so callers report it the way they report any failed command.
    ``environ_update`` (and a per-call ``environ_update`` keyword) is added to the environment.
    """
    timeout = safe_io.check_timeout(timeout, "command timeout", minimum=0.001)
    base = dict(environ_update or {})

    def run(args, **kwargs):
        env = dict(os.environ)
        env.update(base)
        env.update(kwargs.get("environ_update") or {})
        try:
            res = safe_io.run_command(list(args), timeout, limit=limit, env=env)
        except safe_io.CommandTimeout as e:
            return RC_TIMEOUT, "", str(e)
        except safe_io.UnsafeInput as e:
            return RC_TIMEOUT, "", str(e)
        except (IOError, OSError) as e:
            return RC_CANNOT_RUN, "", "cannot run %s: %s" % (args[0], e.strerror or e)
        return res.rc, res.text("stdout"), res.text("stderr")
    return run


def module_runner(module, environ, **fail_result):
    """:func:`bounded_runner` for a module's ``command_timeout`` option, with ``environ`` for every
    command (also set as the module's ``run_command_environ_update``); a bad timeout fails the
    module with ``fail_result``."""
    module.run_command_environ_update = dict(environ)
    try:
        timeout = safe_io.check_timeout(module.params["command_timeout"], "command_timeout", minimum=0.001)
    except safe_io.UnsafeInput as e:
        module.fail_json(msg=str(e), **fail_result)
    return bounded_runner(timeout, environ_update=environ)


def check_version_option(name, value):
    """Return ``value`` when it parses as a driver version, else raise NodeInputError."""
    if value is None:
        return None
    try:
        return str(DriverVersion(value))
    except ValueError as e:
        raise NodeInputError("%s: %s" % (name, e))


def check_toolkit_option(value):
    """``toolkit_version`` option: None (detect), "none"/"" (not installed) or a version."""
    if value is None or value.strip().lower() in NOT_INSTALLED:
        return value
    try:
        parse_component_version(value)
    except ValueError as e:
        raise NodeInputError("toolkit_version: %s" % e)
    return value


DPKG_DB = ("var/lib/dpkg/status",)
RPM_DB = ("var/lib/rpm", "usr/lib/sysimage/rpm")


def _db_exists(package_root, candidates):
    return any(os.path.exists(os.path.join(package_root, c)) for c in candidates)


def list_packages(run_command, get_bin_path, package_root="/"):
    """{"manager": dpkg|rpm|None, "packages": [...], "error": str|None}.

    The manager is the one whose database exists under ``package_root`` (a host mounted at
    /host may run another distribution than the container auditing it) and whose query tool
    is installed. dpkg-query treats a missing database as empty, so the database is checked
    first: a wrong package_root is reported instead of looking like "no NVIDIA packages".
    """
    root = package_root or "/"
    tools = (("dpkg", "dpkg-query", DPKG_DB), ("rpm", "rpm", RPM_DB))
    found_db = [m for m, _b, dbs in tools if _db_exists(root, dbs)]
    for manager, binary, dbs in tools:
        if manager not in found_db:
            continue
        path = get_bin_path(binary)
        if path:
            pkgs, err = driver_packages.query_packages(run_command, manager, path, root)
            return {"manager": manager, "packages": pkgs, "error": err}
    if found_db:
        return {"manager": None, "packages": [],
                "error": "%s database found under %s but %s is not installed"
                         % (found_db[0], root, "dpkg-query" if found_db[0] == "dpkg" else "rpm")}
    return {"manager": None, "packages": [],
            "error": "no dpkg or rpm database under %s" % root}


def gather_node(params, run_command, get_bin_path, facts_fn=None, facts_error=None):
    """Return ``(node, packages_info, detection)``.

    ``params`` holds the module options. ``facts_fn`` is gpu.nvidia_facts (None when that
    module_utils is unavailable, with ``facts_error`` saying why).
    """
    node = {
        "driver_version": None, "driver_version_source": None,
        "kernel_module_version": None, "kernel_module_version_source": None,
        "mig_mixed": None, "mig_enabled": None, "mig_source": None,
        "toolkit_version": None, "toolkit_version_source": None,
        "gpu_names": None, "gpu_names_source": None,
    }
    detection = {"gpu_facts": "not needed", "probe": None, "error": None, "warnings": []}

    node["driver_version"] = check_version_option("driver_version", params.get("driver_version"))
    if node["driver_version"]:
        node["driver_version_source"] = "option"
    node["kernel_module_version"] = check_version_option("kernel_module_version",
                                                         params.get("kernel_module_version"))
    if node["kernel_module_version"]:
        node["kernel_module_version_source"] = "option"
    toolkit = check_toolkit_option(params.get("toolkit_version"))

    pkg_info = list_packages(run_command, get_bin_path, params.get("package_root") or "/")
    pkgs = pkg_info["packages"]

    if node["kernel_module_version"] is None:
        path = proc_file(params.get("proc_path") or "/proc", "driver", "nvidia", "version")
        text, reason = read_text_reason(path)
        if reason:
            detection["warnings"].append("cannot read %s: %s" % (path, reason))
        found = parse_nvidia_version(text)
        if found:
            node["kernel_module_version"] = found
            node["kernel_module_version_source"] = path
    if node["driver_version"] is None:
        version, name = driver_packages.userspace_driver_version(pkgs)
        if version:
            node["driver_version"] = version
            node["driver_version_source"] = "package %s" % name
    if toolkit is not None:
        if toolkit.strip().lower() in NOT_INSTALLED:
            node["toolkit_version"] = None
        else:
            node["toolkit_version"] = toolkit
        node["toolkit_version_source"] = "option"
    else:
        node["toolkit_version"] = driver_packages.toolkit_version(pkgs)
        node["toolkit_version_source"] = "packages" if pkg_info["manager"] else None

    for key in ("mig_mixed", "mig_enabled"):
        if params.get(key) is not None:
            node[key] = bool(params[key])
    if params.get("mig_mixed") is not None or params.get("mig_enabled") is not None:
        node["mig_source"] = "option"
    if params.get("gpu_names") is not None:
        node["gpu_names"] = [str(n) for n in params["gpu_names"]]
        node["gpu_names_source"] = "option"

    need = (node["driver_version"] is None or node["mig_mixed"] is None
            or node["mig_enabled"] is None or node["gpu_names"] is None)
    if need:
        if facts_fn is None:
            detection["gpu_facts"] = "unavailable"
            detection["error"] = facts_error or "gpu facts module_utils not available"
        else:
            try:
                facts = facts_fn(proc_path=params.get("proc_path") or "/proc",
                                 dev_path=params.get("dev_path") or "/dev",
                                 driver_root=params.get("driver_root") or "/",
                                 backend=params.get("backend") or "auto",
                                 timeout=float(params.get("timeout") or 10.0))
            except Exception as e:  # the probe must never turn into a traceback
                detection["gpu_facts"] = "error"
                detection["error"] = "%s: %s" % (type(e).__name__, e)
                facts = None
            if facts is not None:
                apply_facts(node, facts, detection)
    return node, pkg_info, detection


def apply_facts(node, facts, detection):
    """Fill still-unknown node values from an ``ansible_facts.nvidia`` dict."""
    probe = facts.get("probe") or {}
    detection["gpu_facts"] = "used"
    detection["probe"] = {"status": probe.get("status"), "backend": probe.get("backend"),
                          "error": probe.get("error")}
    if node["driver_version"] is None and facts.get("driver_version"):
        node["driver_version"] = facts["driver_version"]
        node["driver_version_source"] = "gpu_facts (%s)" % (facts.get("driver_version_source")
                                                            or probe.get("backend") or "probe")
    if node["kernel_module_version"] is None and facts.get("kernel_module_version"):
        node["kernel_module_version"] = facts["kernel_module_version"]
        node["kernel_module_version_source"] = "gpu_facts"
    detected_mig = False
    for key in ("mig_mixed", "mig_enabled"):
        if node[key] is None and facts.get(key) is not None:
            node[key] = bool(facts[key])
            detected_mig = True
    if detected_mig:
        node["mig_source"] = "option+gpu_facts" if node["mig_source"] == "option" else "gpu_facts"
    if node["gpu_names"] is None:
        names = [g.get("name") for g in (facts.get("gpus") or []) if isinstance(g, dict) and g.get("name")]
        if names:
            node["gpu_names"] = names
            node["gpu_names_source"] = "gpu_facts"
