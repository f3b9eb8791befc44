# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Thin "run" helpers shared by the node modules and kubegpu.fleet.audit_node.

Each helper holds the part of a module's ``main()`` that used to be inline: it takes the
module's options as a plain dict (plus ``run_command``/``get_bin_path``/``warn`` callables
where the module used those of its AnsibleModule) and returns the result the module exits
with, or raises ProbeFailed with the message (and extra result keys) the module fails with.
gpu_facts, kubelet_facts, driver_guard, checkpoint_sync and cgroup_devices call them, so
audit_node, which runs the same probes in one process, returns exactly what they return.

Node side: Python 3.8+.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import time

from ansible.module_utils.basic import missing_required_lib

from ansible_collections.kubegpu.fleet.plugins.module_utils.cgroup_devices import (
    CgroupDevicesError,
    audit as cgroup_audit,
)
from ansible_collections.kubegpu.fleet.plugins.module_utils.checkpoint import (
    MalformedCheckpoint,
    analyze,
    parse_checkpoint,
    read_checkpoint,
)
from ansible_collections.kubegpu.fleet.plugins.module_utils.driver_catalog import (
    CatalogError,
    evaluate,
    merge_catalog,
    validate_catalog,
)
from ansible_collections.kubegpu.fleet.plugins.module_utils.driver_node import (
    NodeInputError,
    gather_node,
)
from ansible_collections.kubegpu.fleet.plugins.module_utils.driver_packages import (
    compute_utils_status,
)
from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet import (
    gather_kubelet_facts,
    unanswered_allocations,
)

try:
    from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu import (
        GpuFactsError,
        nvidia_facts,
        pynvml_available,
    )
    GPU_FACTS_ERROR = None
except ImportError as _e:  # gpu.py missing or its imports failing: detection unavailable
    nvidia_facts = None
    pynvml_available = None
    GpuFactsError = ValueError
    GPU_FACTS_ERROR = "cannot import kubegpu.fleet gpu module_utils: %s" % _e

# driver_guard runs its package queries with this environment (parsed output must be English).
DRIVER_GUARD_ENVIRON = dict(LANG="C", LC_ALL="C", LC_MESSAGES="C")


class ProbeFailed(Exception):
    """A probe failed the way its module fails: ``msg`` plus extra result keys."""

    def __init__(self, msg, **result):
        super(ProbeFailed, self).__init__(msg)
        self.msg = msg
        self.result = result


def _to_native(e):
    try:
        return str(e)
    except Exception:  # pylint: disable=broad-except
        return repr(e)


# ---------------------------------------------------------------------------------------------
# gpu_facts

def gpu_facts_run(params, warn):
    """gpu_facts: ``{"changed": False, "ansible_facts": {"nvidia": facts}}``."""
    if nvidia_facts is None:
        raise ProbeFailed(GPU_FACTS_ERROR)
    if params["backend"] == "nvml" and not pynvml_available():
        raise ProbeFailed(missing_required_lib("nvidia-ml-py (module pynvml)",
                                               reason="for backend=nvml"))
    try:
        facts = nvidia_facts(proc_path=params["proc_path"], dev_path=params["dev_path"],
                             driver_root=params["driver_root"], backend=params["backend"],
                             timeout=params["timeout"])
    except GpuFactsError as e:
        raise ProbeFailed(str(e))
    probe = facts["probe"]
    if probe["status"] in ("hung", "error"):
        warn("gpu_facts: %s probe %s: %s" % (probe["backend"], probe["status"], probe["error"]))
    return dict(changed=False, ansible_facts={"nvidia": facts})


# ---------------------------------------------------------------------------------------------
# kubelet_facts

def kubelet_allocation_log(params, run_command, get_bin_path):
    """Unanswered device-plugin calls from the kubelet's journal (never fails the task)."""
    out = {"source": None, "unit": params["journal_unit"], "since": params["journal_since"],
           "error": None, "unanswered": []}
    if not params["scan_journal"]:
        return out
    journalctl = get_bin_path("journalctl")
    if journalctl is None:
        out["error"] = "journalctl not found"
        return out
    rc, stdout, stderr = run_command(
        [journalctl, "-u", params["journal_unit"], "--since", params["journal_since"],
         "-o", "short-unix", "--no-pager", "-q"],
        environ_update={"SYSTEMD_PAGER": "", "LC_ALL": "C"})
    if rc != 0:
        out["error"] = (stderr or stdout).strip()[:500] or "journalctl exited %d" % rc
        return out
    out["source"] = "journal"
    out["unanswered"] = unanswered_allocations(stdout.splitlines(), now=time.time())
    return out


def kubelet_facts_run(params, run_command, get_bin_path):
    """kubelet_facts: ``{"changed": False, "ansible_facts": {"kubelet": facts}}``."""
    proc_path = params["proc_path"]
    config_path = params["config_path"]
    if not proc_path or not os.path.isdir(proc_path):
        raise ProbeFailed("proc_path %r is not a directory" % (proc_path,))
    if config_path is not None:
        if not config_path or not os.path.isabs(config_path):
            raise ProbeFailed("config_path %r must be an absolute path" % (config_path,))
        if os.path.isdir(config_path):
            raise ProbeFailed("config_path %r is a directory, not a KubeletConfiguration file"
                              % (config_path,))
    facts = gather_kubelet_facts(proc_path=proc_path, config_path=config_path,
                                 path_binary=get_bin_path("kubelet"))
    facts["allocation_log"] = kubelet_allocation_log(params, run_command, get_bin_path)
    return dict(changed=False, ansible_facts={"kubelet": facts})


# ---------------------------------------------------------------------------------------------
# driver_guard

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
    try:
        bundled = validate_catalog(params["_catalog"], "bundled catalog")
        entries, origin = merge_catalog(bundled, params.get("catalog_extra"))
    except CatalogError as e:
        raise ProbeFailed(_to_native(e))
    ids = set(e["id"] for e in entries)
    unknown = sorted(set(skip_entries) - ids)
    if unknown:
        raise ProbeFailed("skip_entries: unknown catalog id(s) %s (known: %s)"
                          % (", ".join(repr(u) for u in unknown), ", ".join(sorted(ids))))
    try:
        node, pkg_info, detection = gather_node(params, run_command, get_bin_path,
                                                nvidia_facts, GPU_FACTS_ERROR)
    except NodeInputError as e:
        raise ProbeFailed(_to_native(e))
    try:
        ev = evaluate(entries, node, origin=origin, skip=skip_entries)
    except ValueError as e:
        raise ProbeFailed("cannot evaluate the driver: %s" % _to_native(e), node=node)

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
        catalog={"entries": len(entries), "bundled": len(bundled),
                 "extra": len(entries) - len(bundled), "skipped": sorted(set(skip_entries))},
    )
    if pkg_info["error"]:
        warn("installed NVIDIA packages unknown: %s" % pkg_info["error"])
    result["msg"] = driver_guard_summary(result)
    return result, entries, ev, node


# ---------------------------------------------------------------------------------------------
# checkpoint_sync

def checkpoint_validate(params):
    """checkpoint_sync's option checks; raises ProbeFailed."""
    for i, dev in enumerate(params["device_ids"]):
        if not dev.strip():
            raise ProbeFailed("device_ids[%d] is empty; expected a GPU-/MIG- UUID" % i)
    for i, pat in enumerate(params["resource_names"]):
        if not pat.strip():
            raise ProbeFailed("resource_names[%d] is empty; expected a glob such as "
                              "nvidia.com/*" % i)
    svc = params["kubelet_service"]
    if not svc or svc.startswith("-") or any(c.isspace() for c in svc):
        raise ProbeFailed("kubelet_service %r is not a systemd unit name" % svc)
    if not os.path.basename(params["path"]):
        raise ProbeFailed("path %r names a directory, expected the checkpoint file"
                          % params["path"])


def checkpoint_inspect(params, warn):
    """Read and compare the checkpoint (checkpoint_sync before any removal).

    Returns ``(result, action)``: ``action`` is None when the module exits with ``result``
    (absent, matching, or stale with state=checked), else ``("unparsable", data, problem)``
    (state=synced with force) or ``("stale", data, parsed, analysis)`` (state=synced) for the
    caller's removal. Raises ProbeFailed (with the result keys) where the module fails.
    """
    checkpoint_validate(params)
    path = params["path"]
    result = dict(changed=False, exists=False, format=None, registered={}, allocated=[],
                  stale_ids=[], stale=False, backup_file=None, kubelet_restarted=False)
    data = None
    problem = None
    try:
        data = read_checkpoint(path)
    except MalformedCheckpoint as e:
        problem = e
        result["exists"] = True
    except (IOError, OSError) as e:
        raise ProbeFailed("%s: cannot read the checkpoint: %s" % (path, e), **result)
    if data is None and problem is None:
        result["msg"] = "%s does not exist; nothing to do" % path
        return result, None
    result["exists"] = True

    parsed = None
    if problem is None:
        try:
            parsed = parse_checkpoint(data)
        except MalformedCheckpoint as e:
            problem = e
    if problem is not None:
        if params["state"] == "synced" and params["force"] and data is not None:
            return result, ("unparsable", data, problem)
        raise ProbeFailed("%s: %s; the file was left untouched (state=synced with "
                          "force=true backs it up and removes it)" % (path, problem), **result)

    analysis = analyze(parsed, params["device_ids"], params["resource_names"])
    result.update(format=parsed["format"], registered=analysis["registered"],
                  allocated=analysis["allocated"], stale_ids=analysis["stale_ids"],
                  stale=analysis["stale"])
    if analysis["unverifiable_ids"]:
        warn("%s: ids %s are not GPU/MIG UUIDs (device plugin with "
             "--device-id-strategy=index?) and are not in device_ids; they cannot be "
             "compared and are not counted as stale"
             % (path, ", ".join(analysis["unverifiable_ids"][:10])))
    if not analysis["stale"]:
        result["msg"] = "%s matches the node (%d device ids checked)" % (
            path, analysis["checked_ids"])
        return result, None
    if params["state"] == "checked":
        result["msg"] = "%s is stale: %s not on the node" % (path, ", ".join(
            analysis["stale_ids"][:10]))
        return result, None
    return result, ("stale", data, parsed, analysis)


# ---------------------------------------------------------------------------------------------
# cgroup_devices

def cgroup_devices_run(params, warn):
    """cgroup_devices: ``dict(changed=False, **audit)``."""
    try:
        result = cgroup_audit(cgroup_root=params["cgroup_root"], proc_path=params["proc_path"],
                              dev_path=params["dev_path"], mode=params["mode"],
                              kubepods_path=params["kubepods_path"],
                              probe_method=params["probe_method"],
                              probe_timeout=params["probe_timeout"],
                              process_evidence_enabled=params["process_evidence"])
    except CgroupDevicesError as e:
        raise ProbeFailed(str(e))
    for warning in result["host_warnings"]:
        warn(warning)
    return dict(changed=False, **result)
