# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Audit rules of the NVIDIA driver and NVML: driver_guard's verdict, a reboot pending after a
driver change, nvidia-compute-utils, and an NVML that hangs or fails."""
from __future__ import annotations

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.fields import as_dict as _d, dict_items as _l, nested as _g
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.finding_types import finding


def rule_driver(ctx):
    dg = _d(ctx.get("driver_guard"))
    out = []
    verdict = dg.get("verdict")
    if verdict in ("known_bad", "at_risk"):
        fid = "driver.known_bad" if verdict == "known_bad" else "driver.at_risk"
        rec = dg.get("recommended_version")
        rec_version = rec.get("version") if isinstance(rec, dict) else rec
        matches = _l(dg.get("matches"))
        refs = []
        for m in matches:
            refs.extend(r for r in (m.get("references") if isinstance(m.get("references"), list) else [])
                        if isinstance(r, str))
        out.append(finding(fid, {
            "driver_version": dg.get("driver_version") or _g(ctx, "nvidia", "driver_version"),
            "branch": dg.get("branch"),
            "matches": [m.get("id") for m in matches],
            "mig_mixed": _g(ctx, "nvidia", "mig_mixed"),
            "recommended_version": rec,
        }, remediation={
            "summary": "upgrade the driver within its branch to %s with nvidia-compute-utils at the same "
                       "version, reboot, restart kubelet" % (rec_version or "the first fixed release"),
            "vars": {"kubegpu_driver_version": rec_version} if rec_version else {},
        }, references=refs or None))
    if dg.get("reboot_pending"):
        out.append(finding("driver.version_mismatch", {
            "installed_version": dg.get("driver_version") or _g(ctx, "nvidia", "driver_version"),
            "kernel_module_version": dg.get("kernel_module_version")
            or _g(ctx, "nvidia", "kernel_module_version"),
            "nvml_error": _g(ctx, "nvidia", "probe", "error"),
        }, remediation={"summary": "reboot the node through the rolling rollout",
                        "vars": {"kubegpu_reboot": "needed"}}))
    cu = _d(dg.get("compute_utils"))
    if cu.get("checked") and (not cu.get("installed") or cu.get("matches_driver") is False):
        out.append(finding("driver.compute_utils", {
            "package": cu.get("package"), "installed": cu.get("installed"),
            "installed_version": cu.get("version"), "driver_version": dg.get("driver_version"),
            "reason": cu.get("reason"),
        }, remediation={"summary": "install %s at the driver's version (provides nvidia-cuda-mps-control)"
                        % (cu.get("package") or "nvidia-compute-utils-<branch>"),
                        "vars": {"kubegpu_driver_version": dg.get("driver_version")}}))
    return out


def rule_nvml(ctx):
    nv = _d(ctx.get("nvidia"))
    probe = _d(nv.get("probe"))
    status = probe.get("status")
    if status == "hung":
        return [finding("nvml.hung", {"backend": probe.get("backend"), "elapsed": probe.get("elapsed"),
                                      "timeout": probe.get("timeout"), "driver_version": nv.get("driver_version")
                                      or nv.get("kernel_module_version")},
                        remediation={"summary": "upgrade a known-bad driver (kubegpu.fleet.driver) and reboot; "
                                                "restart kubelet afterwards"})]
    if status == "error":
        err = probe.get("error") or ""
        if "RM_VERSION_MISMATCH" in str(err) and _d(ctx.get("driver_guard")).get("reboot_pending"):
            return []  # reported once, as driver.version_mismatch
        return [finding("nvml.error", {"error": err, "backend": probe.get("backend")},
                        remediation={"summary": "inspect the driver on the node; reboot if the kernel module "
                                                "and userspace differ"})]
    return []
