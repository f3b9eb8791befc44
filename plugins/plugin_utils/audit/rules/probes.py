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
