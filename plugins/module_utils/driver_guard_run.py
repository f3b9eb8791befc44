# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""driver_guard audit helper (the read-only part of kubegpu.fleet.driver_guard).

Node side: Python 3.8+. See node_probes.py for the calling convention.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubegpu.fleet.plugins.module_utils.driver_catalog import (
    CatalogError,
    driver_defects,
    evaluate,
    merge_catalog,
)
from ansible_collections.kubegpu.fleet.plugins.module_utils.driver_node import (
    NodeInputError,
    gather_node,
)
from ansible_collections.kubegpu.fleet.plugins.module_utils.driver_packages import (
    compute_utils_status,
)
from ansible_collections.kubegpu.fleet.plugins.module_utils.node_probes import ProbeFailed, to_native_text
from ansible_collections.kubegpu.fleet.plugins.module_utils import safe_io

try:
    from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu import nvidia_facts
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
