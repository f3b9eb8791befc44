# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Is the node fit for GPU work after its maintenance, as the node itself sees it
(kubegpu.fleet.rollout_node_check)? kubegpu.fleet.gpu_facts (NVML and the driver version),
kubegpu.fleet.driver_guard (audit: the loaded kernel module is the installed driver) and
kubegpu.fleet.checkpoint_sync (checked: the kubelet's device checkpoint names the GPUs the node
has) run on the node until they all pass or the deadline passes, in one task."""
from __future__ import annotations

import time

from ansible_collections.kubegpu.fleet.plugins.module_utils._common.safe_io import check_timeout
from ansible_collections.kubegpu.fleet.plugins.module_utils.audit.probe_options import CHECKPOINT_SYNC, GPU_FACTS, passed_on
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.action import runner
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.catalog.module_args import args_with_catalog, redact_catalog

CHECK_SPEC = {
    "driver_version": {"type": "str", "default": ""},
    "timeout": {"type": "float", "default": 600},
    "poll": {"type": "float", "default": 5},
    # passed on to gpu_facts, driver_guard and checkpoint_sync: their defaults
    "probe_timeout": passed_on(GPU_FACTS, "timeout"),
    "backend": passed_on(GPU_FACTS, "backend"),
    "proc_path": passed_on(GPU_FACTS, "proc_path"),
    "dev_path": passed_on(GPU_FACTS, "dev_path"),
    "driver_root": passed_on(GPU_FACTS, "driver_root"),
    "checkpoint_path": passed_on(CHECKPOINT_SYNC, "path"),
}


def node_checks_ok(facts, guard, checkpoint, driver_version):
    """(ok, why) of one round of checks (the module results as returned)."""
    nvidia = ((facts or {}).get("ansible_facts") or {}).get("nvidia") or {}
    probe = (nvidia.get("probe") or {}).get("status")
    if (facts or {}).get("failed") or probe != "ok":
        return False, "NVML probe %s: %s" % (probe or "failed", (nvidia.get("probe") or {}).get("error")
                                             or (facts or {}).get("msg"))
    if driver_version and nvidia.get("driver_version") != driver_version:
        return False, "driver %s is not %s" % (nvidia.get("driver_version"), driver_version)
    if (guard or {}).get("failed") or (guard or {}).get("reboot_pending") is not False:
        return False, "installed driver and loaded kernel module differ (reboot_pending %s)" % (
            (guard or {}).get("reboot_pending"))
    if (checkpoint or {}).get("failed") or (checkpoint or {}).get("stale") is not False:
        return False, "kubelet checkpoint stale or unchecked: %s" % ", ".join((checkpoint or {}).get("stale_ids") or [])
    return True, "NVML ok, driver %s, kernel module loaded, checkpoint current" % nvidia.get("driver_version")


def check_work(task, args, clock=time.monotonic, sleep=time.sleep):
    """kubegpu.fleet.rollout_node_check: the rounds of checks until one passes or the deadline."""
    # nan, inf and 1e300 would make the wait endless
    args["timeout"] = check_timeout(args["timeout"], "timeout")
    args["poll"] = check_timeout(args["poll"], "poll", minimum=0.001, maximum=3600)
    started = clock()
    deadline = started + args["timeout"]
    common = {"proc_path": args["proc_path"], "dev_path": args["dev_path"], "driver_root": args["driver_root"],
              "backend": args["backend"], "timeout": args["probe_timeout"]}
    guard_args, catalog, error = args_with_catalog(dict(common, state="audit"), "rollout_node_check")
    if error is not None:
        raise runner.ActionFailed(error)
    attempts = 0
    while True:
        attempts += 1
        # The check reads the device list; the kernel-log Xid scan is the audit's.
        facts = task.module("kubegpu.fleet.gpu_facts", dict(common, xid=False))
        guard = task.module("kubegpu.fleet.driver_guard", guard_args)
        redact_catalog(guard, catalog)
        nvidia = (facts.get("ansible_facts") or {}).get("nvidia") or {}
        checkpoint = {}
        if (nvidia.get("probe") or {}).get("status") == "ok":
            checkpoint = task.module("kubegpu.fleet.checkpoint_sync", {
                "state": "checked", "path": args["checkpoint_path"], "device_ids": nvidia.get("device_ids") or []})
        ok, why = node_checks_ok(facts, guard, checkpoint, args["driver_version"])
        if ok or clock() + args["poll"] > deadline:
            break
        sleep(args["poll"])
    now = clock()
    return {"changed": False, "ok": ok, "msg": why, "attempts": attempts, "waited": round(now - started, 3),
            "time_left": max(0, int(deadline - now)), "nvidia": nvidia,
            "probe_ok": (nvidia.get("probe") or {}).get("status") == "ok",
            "reboot_pending": guard.get("reboot_pending") if not guard.get("failed") else None,
            "guard_msg": guard.get("msg") if guard.get("failed") else None,
            "checkpoint_stale": checkpoint.get("stale") if checkpoint and not checkpoint.get("failed") else None,
            "checkpoint_stale_ids": checkpoint.get("stale_ids") or [],
            "ansible_facts": {"nvidia": nvidia} if nvidia else {}}


ACTION = runner.Action(CHECK_SPEC, check_work)
