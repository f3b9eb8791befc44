# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The verdict on the audit after remediation (the kubegpu.fleet.remediation_verdict filter)."""
from __future__ import annotations

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import build


def final_verdict(report, fail_on, plans):
    """Judge the audit after remediation.

    ``report`` is the after-remediation audit report (kubegpu.fleet.audit_report's ``report``),
    ``fail_on`` the severity threshold, ``plans`` maps node names to the remediation plans made
    from the audit before (``plan_node``'s result). A finding at or above ``fail_on`` that the
    node's plan marked ``manual`` (left for a person: cluster components Helm or the GPU Operator
    deploy, hardware, ...) is reported but does not fail the run; any other one - something the
    rollout should have fixed, a finding that appeared during it, a cluster-wide finding - is
    unresolved. Returns ``{"unresolved": [...], "left_for_person": [...]}``, each entry
    ``{"node", "id", "severity"}``.
    """
    plans = plans or {}
    unresolved, left = [], []
    for f in build.failing_findings(report, fail_on):
        entry = {"node": f.get("node"), "id": f.get("id"), "severity": f.get("severity")}
        plan = plans.get(entry["node"]) if entry["node"] is not None else None
        # manual: left for a person; noted: nothing to do on the node (an unknown Xid, the
        # driver asking to quiesce P2P traffic): reported, not something the rollout failed at
        manual = ((plan or {}).get("manual") or []) + ((plan or {}).get("noted") or [])
        (left if entry["id"] in manual else unresolved).append(entry)
    return {"unresolved": unresolved, "left_for_person": left}
