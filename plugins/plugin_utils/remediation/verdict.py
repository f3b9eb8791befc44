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
    unresolved. A finding of cluster scope (node None, ``nodes``: those it affects) is left for a
    person when every affected node's plan marked it so. Returns ``{"unresolved": [...],
    "left_for_person": [...]}``, each entry ``{"node", "id", "severity", "where"}`` (the node, or
    ``cluster (N nodes)``; and ``nodes`` for one of cluster scope).
    """
    plans = plans or {}
    unresolved, left = [], []
    for f in build.failing_findings(report, fail_on):
        entry = {"node": f.get("node"), "id": f.get("id"), "severity": f.get("severity")}
        # a finding of cluster scope is listed once with the nodes it affects: left for a person
        # when the plan of every one of them says so
        names = [entry["node"]] if entry["node"] is not None else list(f.get("nodes") or [])
        if entry["node"] is None and names:
            entry["nodes"] = names
        entry["where"] = entry["node"] or ("cluster (%d nodes)" % len(names) if names else "cluster")
        excused = bool(names)
        for name in names:
            plan = plans.get(name) or {}
            # manual: left for a person; noted: nothing to do on the node (an unknown Xid, the
            # driver asking to quiesce P2P traffic): reported, not something the rollout failed at
            excused = excused and entry["id"] in (plan.get("manual") or []) + (plan.get("noted") or [])
        (left if excused else unresolved).append(entry)
    return {"unresolved": unresolved, "left_for_person": left}
