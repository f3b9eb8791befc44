# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""kubegpu.fleet.driver_guard's logic: the evaluation (``driver_guard_evaluate``, also the audit
probe), ``state=pinned`` (``driver_guard_pinned``) and the module's body (``run_driver_guard``); the
module file is only the interface.

Node side: Python 3.8+. See node_probes.py for the calling convention.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.kubegpu.fleet.plugins.module_utils.catalog.validate import CatalogError
from ansible_collections.kubegpu.fleet.plugins.module_utils.driver.defects import (
    VERDICT_KNOWN_BAD,
    driver_defects,
    evaluate,
    merge_catalog,
)
from ansible_collections.kubegpu.fleet.plugins.module_utils.driver.node import (
    NodeInputError,
    gather_node,
    module_runner,
)
from ansible_collections.kubegpu.fleet.plugins.module_utils.driver.packages import (
    compute_utils_status,
)
from ansible_collections.kubegpu.fleet.plugins.module_utils._common.node_probes import ProbeFailed, to_native_text
from ansible_collections.kubegpu.fleet.plugins.module_utils.driver import pins as driver_pins
from ansible_collections.kubegpu.fleet.plugins.module_utils._common import safe_io
from ansible_collections.kubegpu.fleet.plugins.module_utils._common.fileutil import (
    FileOpError,
    private_tempdir,
    unsafe_target,
    write_file,
)

try:
    from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu.facts import nvidia_facts
    GPU_FACTS_ERROR = None
except ImportError as _e:  # gpu.py missing or its imports failing: detection unavailable
    nvidia_facts = None
    GPU_FACTS_ERROR = "cannot import kubegpu.fleet gpu module_utils: %s" % _e

# driver_guard runs its package queries with this environment (parsed output must be English).
DRIVER_GUARD_ENVIRON = dict(LANG="C", LC_ALL="C", LC_MESSAGES="C")


def driver_guard_summary(res):
    """One-line summary of a driver_guard result (its ``msg``)."""
    v = res.get("driver_version") or res.get("kernel_module_version")
    if res["verdict"] == "absent":
        return "no NVIDIA driver found"
    text = "driver %s: %s" % (v, res["verdict"])
    if res["matches"]:
        text += " (%s)" % ", ".join("%s: %s [%s]" % (m["id"], m["status"], m["severity"])
                                    for m in res["matches"])
    if res.get("recommended_version"):
        text += "; recommended %s" % res["recommended_version"]
        rec = res.get("recommendation") or {}
        if rec.get("reason"):
            text += ": %s" % rec["reason"]
        if rec.get("alternatives"):
            text += "; alternatives: %s" % ", ".join(a["version"] for a in rec["alternatives"])
    if res.get("reboot_pending"):
        text += "; reboot pending (loaded kernel module %s)" % res.get("kernel_module_version")
    probe = (res.get("detection") or {}).get("probe") or {}
    if probe.get("status") in ("hung", "error"):
        text += "; GPU probe %s (%s)" % (probe["status"], probe.get("error") or "no detail")
    unknown = sorted(set(c for m in res["matches"] for c in m["conditions_unknown"]))
    if unknown:
        text += "; unknown on this node: %s (pass them as options)" % ", ".join(unknown)
    return text


def driver_guard_evaluate(params, run_command, get_bin_path, warn):
    """driver_guard up to the audit result; returns ``(result, entries, evaluation, node)``.

    ``run_command`` must run with DRIVER_GUARD_ENVIRON (the module sets
    run_command_environ_update). The caller handles state=enforce and state=pinned.
    """
    if params.get("_catalog") is None:
        raise ProbeFailed("driver_guard received no catalog: run it as the task "
                          "kubegpu.fleet.driver_guard so its action plugin loads the bundled catalog")
    skip_entries = params.get("skip_entries") or []
    if params.get("timeout") is not None:
        try:
            safe_io.check_timeout(params["timeout"], "timeout", minimum=0.001)
        except safe_io.UnsafeInput as e:
            raise ProbeFailed(to_native_text(e))
    try:
        entries, origin = merge_catalog(params["_catalog"], params.get("catalog_extra"))
    except CatalogError as e:
        raise ProbeFailed(to_native_text(e))
    entries = driver_defects(entries)
    ids = set(e["id"] for e in entries)
    unknown = sorted(set(skip_entries) - ids)
    if unknown:
        raise ProbeFailed("skip_entries: unknown catalog id(s) %s (known driver defects: %s)"
                          % (", ".join(repr(u) for u in unknown), ", ".join(sorted(ids))))
    try:
        node, pkg_info, detection = gather_node(params, run_command, get_bin_path,
                                                nvidia_facts, GPU_FACTS_ERROR)
    except NodeInputError as e:
        raise ProbeFailed(to_native_text(e))
    try:
        ev = evaluate(entries, node, origin=origin, skip=skip_entries)
    except ValueError as e:
        raise ProbeFailed("cannot evaluate the driver: %s" % to_native_text(e), node=node)

    result = dict(
        changed=False,
        verdict=ev["verdict"],
        branch=ev["branch"],
        driver_version=node["driver_version"],
        kernel_module_version=node["kernel_module_version"],
        reboot_pending=ev["reboot_pending"],
        matches=ev["matches"],
        not_applicable=ev["not_applicable"],
        recommended_version=ev["recommended_version"],
        recommendation=ev["recommendation"],
        packages=pkg_info["packages"],
        package_manager=pkg_info["manager"],
        package_query_error=pkg_info["error"],
        compute_utils=compute_utils_status(pkg_info["packages"], node["driver_version"],
                                           pkg_info["manager"]),
        node=node,
        detection=detection,
        catalog={"entries": len(entries),
                 "bundled": len([e for e in entries if origin.get(e["id"]) == "bundled"]),
                 "extra": len([e for e in entries if origin.get(e["id"]) == "catalog_extra"]),
                 "skipped": sorted(set(skip_entries))},
    )
    if pkg_info["error"]:
        warn("installed NVIDIA packages unknown: %s" % pkg_info["error"])
    for warning in detection.get("warnings") or []:
        warn(warning)
    result["msg"] = driver_guard_summary(result)
    return result, entries, ev, node


def enforce_message(ev, node):
    """state=enforce: the failure message for a known_bad verdict (entries, recommendation)."""
    bad = [m for m in ev["matches"] if m["status"] == "known_bad"]
    msg = "known-bad NVIDIA driver %s: %s" % (
        node["driver_version"] or node["kernel_module_version"],
        "; ".join("%s (%s: %s)" % (m["id"], m["severity"], m["title"]) for m in bad))
    if ev["recommended_version"]:
        rec = ev["recommendation"]
        msg += ". Recommended version: %s (%s)" % (ev["recommended_version"], rec["reason"])
        if rec.get("alternatives"):
            msg += "; alternatives: %s" % ", ".join(
                "%s (%s)" % (a["version"], a["reason"]) for a in rec["alternatives"])
    else:
        msg += ". No driver version fixes this; follow the remediation of the entries"
    return msg


# --------------------------------------------------------------------------------------------
# state=pinned
# --------------------------------------------------------------------------------------------

class PinError(Exception):
    """state=pinned cannot go on; the message names the bad value or the failing step."""


def _read(path):
    """The file's text, None when it does not exist. Never blocks (a FIFO is refused), never
    reads more than 4 MiB, and refuses bytes that are not UTF-8 (UnicodeDecodeError) rather
    than rewriting them."""
    data = safe_io.read_bytes(path, missing_ok=True)
    return None if data is None else data.decode("utf-8")


def _validate_apt(content, apt_cache, run):
    """Make apt-cache parse the rendered preferences; PinError when apt rejects them."""
    try:
        with private_tempdir("driver_guard-") as scratch:
            pref = scratch.write("check.pref", content)
            empty = scratch.subdir("empty")
            scratch.subdir("lists/partial")
            scratch.subdir("cache/archives/partial")
            # Only the rendered file and no repositories: problems elsewhere in the node's apt
            # configuration (a broken sources entry, another preferences file) do not count here.
            rc, out, err = run([
                apt_cache,
                "-o", "Dir::Etc::Preferences=%s" % pref, "-o", "Dir::Etc::PreferencesParts=%s" % empty,
                "-o", "Dir::Etc::SourceList=%s" % os.devnull, "-o", "Dir::Etc::SourceParts=%s" % empty,
                "-o", "Dir::State::Lists=%s" % os.path.join(scratch.path, "lists"),
                "-o", "Dir::Cache=%s" % os.path.join(scratch.path, "cache"),
                "policy"])
    except (IOError, OSError) as e:
        raise PinError("cannot validate the preferences: no private scratch directory for apt-cache: %s"
                       % to_native_text(e))
    problems = [line for line in (err or "").splitlines() if line.startswith(("E:", "W:"))]
    if rc != 0 or problems:
        raise PinError("apt-cache rejected the generated preferences (nothing written): %s"
                       % ("; ".join(problems) or err or out).strip())


def driver_guard_pinned(params, entries, node, result, get_bin_path, run, check_mode, diff):
    """Write the negative pins of ``entries`` (driver defects, after skip_entries) for ``node``.

    Updates ``result`` (``pins``, ``changed``, ``diff`` when ``diff``); raises PinError.
    ``run`` runs a command with the command_timeout deadline (apt-cache validation).
    """
    manager = params["package_manager"]
    if manager == "auto":
        if get_bin_path("apt-get"):
            manager = "apt"
        elif get_bin_path("dnf") or get_bin_path("yum") or get_bin_path("microdnf"):
            manager = "dnf"
        else:
            raise PinError("state=pinned: neither apt-get nor dnf/yum found; set package_manager")
    branch = None
    if params["pin_scope"] == "branch":
        branch = result["branch"]
        if branch is None:
            raise PinError("pin_scope=branch needs the node's driver branch, but no driver "
                           "version is known (set driver_version)")
    try:
        packages = driver_pins.validate_pin_packages(params["pin_packages"])
    except ValueError as e:
        raise PinError(to_native_text(e))
    plan = driver_pins.pin_plan(entries, node, branch=branch, skip=params.get("skip_entries"))
    recommended = result.get("recommended_version")
    if recommended:
        for pin in plan:
            if driver_pins.pin_matches_version(pin, recommended):
                raise PinError("refusing to pin: %s (%s) would also block the recommended version %s"
                               % (pin["id"], pin["description"], recommended))
    if manager == "apt":
        path = params["apt_preferences_path"]
        if not driver_pins.apt_preferences_name_ok(path):
            raise PinError("apt_preferences_path %r: apt ignores preference files whose name "
                           "has an extension other than .pref or characters other than letters, "
                           "digits, '-', '_' and '.'" % path)
        mode = 0o644
    else:
        path = params["dnf_conf_path"]
        mode = None
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise PinError("cannot write %s: directory %s does not exist" % (path, directory))
    problem = unsafe_target(path)
    if problem:
        raise PinError("refusing to write %s: %s; nothing was written. A file root rewrites must be "
                       "writable by root only, or another user chooses what root writes: fix its "
                       "ownership and mode (chown root:root, chmod go-w)" % (path, problem))
    try:
        old = _read(path)
    except (safe_io.UnsafeInput, IOError, OSError, UnicodeDecodeError) as e:
        raise PinError("cannot read %s: %s" % (path, to_native_text(e)))
    if manager == "apt":
        new = driver_pins.render_apt_preferences(plan, packages)
    else:
        new = driver_pins.render_dnf_conf(old or "", driver_pins.dnf_tokens(plan, packages))
    changed = old is None or old != new
    pins = {"manager": manager, "path": path, "scope": params["pin_scope"],
            "count": len(plan), "entries": sorted(set(p["id"] for p in plan)),
            "versions": ["%s: %s" % (p["id"], p["description"]) for p in plan],
            "backup_file": None, "validation": None}
    if changed and manager == "apt" and params["validate_pins"]:
        apt_cache = get_bin_path("apt-cache")
        if not apt_cache:
            pins["validation"] = "apt-cache not found; preferences not validated"
        else:
            _validate_apt(new, apt_cache, run)
            pins["validation"] = "apt-cache policy parsed the file"
    if changed and not check_mode:
        try:
            pins["backup_file"] = write_file(path, new, mode=mode, backup=old is not None)
        except FileOpError as e:
            raise PinError(to_native_text(e))
    result["pins"] = pins
    result["changed"] = changed
    if diff:
        result["diff"] = {"before": old or "", "after": new,
                          "before_header": path if old is not None else "%s (absent)" % path,
                          "after_header": path}
    return result


def run_driver_guard(module):
    """kubegpu.fleet.driver_guard: evaluate, then enforce or pin; exits or fails ``module``."""
    p = module.params
    run = module_runner(module, DRIVER_GUARD_ENVIRON)
    try:
        result, entries, ev, node = driver_guard_evaluate(p, run, module.get_bin_path, module.warn)
    except ProbeFailed as e:
        module.fail_json(msg=e.msg, **e.result)
    if p["state"] == "enforce" and ev["verdict"] == VERDICT_KNOWN_BAD:
        result["msg"] = enforce_message(ev, node)
        module.fail_json(**result)
    if p["state"] == "pinned":
        try:
            driver_guard_pinned(p, entries, node, result, module.get_bin_path, run,
                                module.check_mode, module._diff)
        except PinError as e:
            out = dict(result)
            out["msg"] = str(e)
            module.fail_json(**out)
    module.exit_json(**result)
