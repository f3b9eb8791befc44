# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Evaluation of a component version against the known-bad catalog, by ordering.

One evaluator for both sides (Python 3.8+): the controller's audit (``evaluate``) and the
node's kubegpu.fleet.driver_guard (``module_utils/driver/defects.py``, through ``match_entry``)
cannot disagree on whether a version is in a range.

Evaluation is by ordering, never by membership in a list: an affected item covers the versions
``introduced <= v`` and ``v < fixed`` (or ``v <= last_affected`` when no fix is known). A
version above ``last_affected`` but below ``fixed`` is affected too: NVIDIA's "first fixed"
numbers are sometimes builds that data-center users never see (570.133.07 in bulletin 5630).
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.kubegpu.fleet.plugins.module_utils.catalog.validate import (
    COMPONENT_SCHEMES,
    CONDITIONS,
    SEVERITIES,
    CatalogError,
    in_branch,
    parse_version,
)


def _condition_state(key, want, facts):
    """(state, reason): state is True (holds), False (does not hold) or None (fact unknown)."""
    if key not in facts or facts[key] is None:
        return None, "%s unknown" % key
    have = facts[key]
    kind = CONDITIONS[key]
    if kind == "bool":
        ok = bool(have) is want
        return ok, "%s is %s" % (key, "true" if have else "false")
    values = have if isinstance(have, (list, tuple, set)) else [have]
    values = [str(v).lower() for v in values]
    if kind == "regex":
        ok = any(re.search(want, v, re.I) for v in values)
        return ok, "%s %s %s /%s/" % (key, ", ".join(values) or "(none)", "matches" if ok else "does not match", want)
    if isinstance(want, dict):
        banned = [w.lower() for w in want["not_in"]]
        ok = bool(values) and not any(v in banned for v in values)
        return ok, "%s is %s (affected unless %s)" % (key, ", ".join(values) or "(none)", ", ".join(banned))
    accepted = [w.lower() for w in want]
    ok = any(v in accepted for v in values)
    return ok, "%s is %s (affected: %s)" % (key, ", ".join(values) or "(none)", ", ".join(accepted))


def range_bounds(item):
    """The bounds of an affected-range item as texts: ``>= introduced``, then ``< fixed`` or else
    ``<= last_affected``."""
    parts = []
    if item.get("introduced"):
        parts.append(">= %s" % item["introduced"])
    if item.get("fixed"):
        parts.append("< %s" % item["fixed"])
    elif item.get("last_affected"):
        parts.append("<= %s" % item["last_affected"])
    return parts


def _range_text(item):
    parts = ["branch %s" % item["branch"]] if item.get("branch") else []
    return ", ".join(parts + range_bounds(item)) or "all versions"


def _version_hit(item, version, scheme):
    """None when ``version`` is outside the item; else a list of reasons."""
    if not in_branch(version, item.get("branch")):
        return None
    if item.get("introduced") and version < parse_version(scheme, item["introduced"]):
        return None
    reasons = []
    if item.get("fixed"):
        fixed = parse_version(scheme, item["fixed"])
        if not version < fixed:
            return None
        last = item.get("last_affected")
        if last and version > parse_version(scheme, last):
            reasons.append("%s is above the last affected version %s named by the source but below the "
                           "first fixed version %s, so it is affected by ordering" % (version.text, last, item["fixed"]))
        else:
            reasons.append("%s is below the first fixed version %s" % (version.text, item["fixed"]))
    elif item.get("last_affected"):
        if version > parse_version(scheme, item["last_affected"]):
            return None
        reasons.append("%s is at or below the last affected version %s (no fixed version known)"
                       % (version.text, item["last_affected"]))
    else:
        reasons.append("%s is in the affected range (%s; no fixed version known)" % (version.text, _range_text(item)))
    if item.get("introduced"):
        reasons.append("at or above %s, where the problem was introduced" % item["introduced"])
    return reasons


def match_entry(entry, scheme, version, facts, keep=None):
    """How one entry applies to a parsed ``version``: None (outside every affected item) or
    ``(rank, item, reasons, held, failed, unknown)``.

    ``rank`` 2: every condition holds; 1: none fails, some fact is unknown; 0: a condition fails.
    ``held``/``failed``/``unknown`` are lists of ``(condition, reason)``. The item with the
    highest rank wins. ``keep(condition)`` (optional) marks failed conditions that do not lower
    the rank below 1 (driver_guard: a MIG layout that is not there today).
    """
    best = None
    for item in entry.get("affected") or []:
        hit = _version_hit(item, version, scheme)
        if hit is None:
            continue
        conds = dict(entry.get("conditions") or {})
        conds.update(item.get("conditions") or {})
        held, failed, unknown = condition_states(conds, facts)
        hard = [f for f in failed if keep is None or not keep(f[0])]
        rank = 0 if hard else (1 if (unknown or failed) else 2)
        if best is None or rank > best[0]:
            best = (rank, item, hit, held, failed, unknown)
    return best


def condition_states(conditions, facts):
    """``(held, failed, unknown)``: lists of ``(condition, reason)`` for ``facts``."""
    held, failed, unknown = [], [], []
    for key, want in sorted((conditions or {}).items()):
        state, reason = _condition_state(key, want, facts)
        (held if state else unknown if state is None else failed).append((key, reason))
    return held, failed, unknown


def range_text(item):
    """``branch 570, >= 570.124.06, < 570.172.08`` for an affected item."""
    return _range_text(item)


def evaluate(entries, component, version, facts=None):
    """Match one component version against the catalog.

    ``entries``: the list from load_catalog/validate_catalog. ``facts``: condition facts of
    the node or cluster (keys of CONDITIONS; a missing or None value is unknown).
    Returns ``{"matches": [...], "not_applicable": [...]}``. A match has ``status``
    ``affected`` (every condition holds) or ``possibly_affected`` (a condition fact is
    unknown, none fails); ``not_applicable`` lists entries whose version range matches but a
    condition rules out, with the reason. Entries outside the version range are not listed.
    """
    facts = dict(facts or {})
    scheme = COMPONENT_SCHEMES.get(component)
    if scheme is None:
        raise CatalogError("unknown component %r (known: %s)" % (component, ", ".join(sorted(COMPONENT_SCHEMES))))
    v = parse_version(scheme, version)
    if scheme == "driver" and "driver_branch" not in facts:
        facts["driver_branch"] = str(v.branch)
    matches, not_applicable = [], []
    for entry in entries:
        if entry.get("component") != component:
            continue
        best = match_entry(entry, scheme, v, facts)
        if best is None:
            continue
        rank, item, hit, held, failed, unknown = best
        held = [r for _k, r in held]
        failed = [r for _k, r in failed]
        unknown = [r for _k, r in unknown]
        result = _result(entry, component, v, item, hit + held, unknown)
        if rank == 0:
            result["status"] = "not_applicable"
            result["reasons"] = hit + failed
            not_applicable.append(result)
        else:
            result["status"] = "affected" if rank == 2 else "possibly_affected"
            matches.append(result)
    order = {s: n for n, s in enumerate(SEVERITIES)}
    matches.sort(key=lambda m: (order.get(m["severity"], 9), -(m["max_cvss"] or 0), m["id"]))
    return {"matches": matches, "not_applicable": not_applicable}


def _result(entry, component, version, item, reasons, unknown):
    cves = entry.get("cves") or []
    return {
        "id": entry["id"],
        "component": component,
        "kind": entry["kind"],
        "title": entry.get("title"),
        "severity": entry["severity"],
        "version": version.text,
        "branch": item.get("branch"),
        "affected_range": _range_text(item),
        "fixed": item.get("fixed"),
        "cves": [c["id"] for c in cves],
        "max_cvss": max([float(c["cvss"]["base_score"]) for c in cves]) if cves else None,
        "cvss_vectors": {c["id"]: c["cvss"]["vector"] for c in cves},
        "reasons": reasons,
        "unknown_conditions": unknown,
        "remediation": entry.get("remediation"),
        "mitigation": entry.get("mitigation"),
        "sources": [s["url"] for s in entry.get("sources") or []],
    }
