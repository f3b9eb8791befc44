# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Audit rule of the kubelet's device checkpoint: GPUs it names that the node no longer has."""
from __future__ import annotations

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.fields import as_dict as _d
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.finding_types import finding


def rule_checkpoint(ctx):
    ck = _d(ctx.get("checkpoint"))
    if not ck.get("stale"):
        return []
    return [finding("checkpoint.stale", {"path": ck.get("path"), "stale_ids": ck.get("stale_ids"),
                                         "format": ck.get("format")},
                    remediation={"summary": "drain, back up and remove the checkpoint, restart kubelet",
                                 "vars": {"kubegpu_kubelet_sync_checkpoint": True}})]
