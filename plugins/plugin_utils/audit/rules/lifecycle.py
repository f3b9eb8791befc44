# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""driver.unsupported_branch: a driver branch past NVIDIA's end of life, or absent from NVIDIA's
current support matrix (controller side, a pure function of the node's driver version and the
day of the audit).

The table is NVIDIA's own, from the "Supported Drivers and CUDA Toolkit Versions" page of the
NVIDIA Data Center Drivers documentation (table "CUDA and Drivers": branch, branch designation,
end of life month), as read on :data:`CHECKED`:

* docs.nvidia.com/datacenter/tesla/drivers/620/: R580 Long Term Support Branch, June 2028;
  R595 Production Branch, March 2027; R620 Long Term Support Branch, September 2029. "Only Long
  Term Support and Production branches are listed. New Feature Branches are short-lived and do
  not have an end-of-life date." This is the current support matrix (:data:`CURRENT`).
* the same page for R615 (drivers/615/): R535 Long Term Support Branch, June 2026; R610 New
  Feature Branch, August 2026 (and R580, R595 as above).
* NVIDIA CUDA and Drivers Support (RN-08625-001 v02, March 2021): R418 LTSB March 2022, R440
  New Feature Branch November 2020, R450 LTSB July 2023, R460 Production Branch January 2022.

Verdicts (``evidence.status``): ``end_of_life`` (the branch's end-of-life month is over:
definite, ``warning``); ``unsupported`` (not in the table and older than every branch of the
current matrix, which lists every supported Long Term Support and Production branch: definite,
``warning``); ``possibly_unsupported`` (not in the table, between the current matrix's branches:
a New Feature Branch or a retired Production Branch, for which NVIDIA gives no date; or newer
than every branch of the table, released after it was read: ``info``). A branch of the table
before its end of life gives nothing; so does an audit without the catalog (``ctx["catalog"]``),
as the catalog's other rules. The advice is the driver bulletins' own
(rules/catalog.UNLISTED_BRANCH_ADVICE): move to the latest release of a supported branch.
"""
from __future__ import annotations

import calendar
import datetime

from ansible_collections.kubegpu.fleet.plugins.module_utils.catalog import validate as catalog_validate
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.fields import as_dict as _d, nonblank as _str
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.finding_types import finding
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.rules import catalog as catalog_rules

CHECKED = "2026-11-27"
SOURCES = (
    "https://docs.nvidia.com/datacenter/tesla/drivers/620/supported-drivers-and-cuda-toolkit-versions.html",
    "https://docs.nvidia.com/datacenter/tesla/drivers/615/supported-drivers-and-cuda-toolkit-versions.html",
    "https://docs.nvidia.com/datacenter/tesla/pdf/NVIDIA_CUDA_Drivers_Support.pdf",
)
LTSB, PB, NFB = "Long Term Support Branch", "Production Branch", "New Feature Branch"
# branch -> (designation, end of life "YYYY-MM", the source that gives it)
BRANCHES = {
    418: (LTSB, "2022-03", SOURCES[2]),
    440: (NFB, "2020-11", SOURCES[2]),
    450: (LTSB, "2023-07", SOURCES[2]),
    460: (PB, "2022-01", SOURCES[2]),
    535: (LTSB, "2026-06", SOURCES[1]),
    580: (LTSB, "2028-06", SOURCES[0]),
    595: (PB, "2027-03", SOURCES[0]),
    610: (NFB, "2026-08", SOURCES[1]),
    620: (LTSB, "2029-09", SOURCES[0]),
}
# NVIDIA's current support matrix (the newest page read): every supported LTSB and PB
CURRENT = (580, 595, 620)


def _month_end(text):
    year, month = (int(p) for p in text.split("-"))
    return datetime.date(year, month, calendar.monthrange(year, month)[1])


def _month_words(text):
    year, month = (int(p) for p in text.split("-"))
    return "%s %d" % (calendar.month_name[month], year)


def _today(ctx):
    """The audit's day: ``ctx["today"]`` (``YYYY-MM-DD``) where given, else today (UTC)."""
    given = _str(ctx.get("today"))
    if given:
        try:
            return datetime.date.fromisoformat(given[:10])
        except ValueError:
            pass
    return datetime.datetime.now(datetime.timezone.utc).date()


def supported(today):
    """The table's branches whose end of life is not over on ``today``, newest first."""
    return sorted((b for b, (_des, eol, _src) in BRANCHES.items() if _month_end(eol) >= today), reverse=True)


def verdict(branch, today):
    """``None`` (supported) or ``(status, severity, reason, designation, end_of_life, source)``."""
    row = BRANCHES.get(branch)
    if row is not None:
        designation, eol, source = row
        if _month_end(eol) >= today:
            return None
        return ("end_of_life", "warning", "R%d (%s) reached NVIDIA's end of life in %s"
                % (branch, designation, _month_words(eol)), designation, eol, source)
    if branch < min(CURRENT):
        return ("unsupported", "warning",
                "R%d is not in NVIDIA's support matrix, which lists every supported Long Term Support and "
                "Production branch (%s), and is older than all of them" % (branch, ", ".join("R%d" % b for b in CURRENT)),
                None, None, SOURCES[0])
    if branch > max(BRANCHES):
        return ("possibly_unsupported", "info",
                "R%d is newer than every branch of NVIDIA's support matrix as read on %s: its support is not known"
                % (branch, CHECKED), None, None, SOURCES[0])
    return ("possibly_unsupported", "info",
            "R%d is not in NVIDIA's support matrix: a New Feature Branch (short-lived, NVIDIA gives no end of life) "
            "or a retired Production Branch" % branch, None, None, SOURCES[0])


def rule_unsupported_branch(ctx):
    """driver.unsupported_branch for the node's driver branch (see the module docstring)."""
    ctx = _d(ctx)
    version = catalog_rules.driver_version(ctx)
    if version is None or not isinstance(ctx.get("catalog"), list) or not ctx["catalog"]:
        return []  # with the catalog's other rules: an audit without the catalog judges no release
    try:
        branch = catalog_validate.parse_version("driver", version).branch
    except catalog_validate.CatalogError:
        return []
    today = _today(ctx)
    found = verdict(branch, today)
    if found is None:
        return []
    status, severity, reason, designation, eol, source = found
    targets = [b for b in supported(today) if BRANCHES[b][0] in (LTSB, PB)]
    names = ", ".join("R%d (%s, end of life %s)" % (b, BRANCHES[b][0], _month_words(BRANCHES[b][1]))
                      for b in targets)
    return [finding("driver.unsupported_branch", {
        "component": "driver", "version": version, "branch": branch, "status": status, "reason": reason,
        "designation": designation, "end_of_life": eol, "supported_branches": targets,
        "lifecycle_checked": CHECKED, "audit_day": today.isoformat(),
        "advice": catalog_rules.UNLISTED_BRANCH_ADVICE},
        remediation={"summary": "move to the latest release of a supported branch: %s" % (names or "see NVIDIA's "
                                                                                          "support matrix")},
        references=[source] + [s for s in SOURCES if s != source], severity=severity)]
