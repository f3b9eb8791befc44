# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Audit rule of the audit itself: a probe that could not run on the node."""
from __future__ import annotations

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.fields import as_dict as _d
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.finding_types import finding


def rule_module_failures(ctx):
    out = []
    for name, err in sorted(_d(ctx.get("errors")).items(), key=lambda kv: str(kv[0])):
        out.append(finding("audit.module_failed", {"probe": name, "error": err},
                           title="Audit probe %s could not run" % name))
    return out


def rule_coverage(cov, skip=()):
    """audit.not_inspected: the node is not a GPU node or the probes saw nothing (``cov``: the node's
    coverage, audit/coverage.py). Run by evaluate.evaluate after the node rules, over what they
    could see; nothing for a GPU node."""
    cov = _d(cov)
    status = cov.get("status")
    if status not in ("not_gpu_node", "not_inspected") or "audit.not_inspected" in skip:
        return []
    title = ("Not a GPU node: the audit saw no NVIDIA GPU and no driver" if status == "not_gpu_node"
             else "Not inspected: the audit saw nothing of this node's GPUs")
    return [finding("audit.not_inspected", {"status": status, "reason": cov.get("reason"),
                                            "checks": cov.get("checks")},
                    title=title,
                    remediation={"summary": "check the inventory group (only GPU nodes belong in it) and that the "
                                            "audit reaches the host itself: the host's /proc, /sys and /dev (or "
                                            "kubegpu_proc_path, kubegpu_sys_path, kubegpu_dev_path) and root"})]
