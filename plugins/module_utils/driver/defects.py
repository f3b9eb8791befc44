# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""kubegpu.fleet.driver_guard's verdict and recommendation from the catalog's driver defects (node side).

The catalog is ``catalog/v2/driver.yml`` (format: catalog/README.md). The driver_guard action
plugin loads it on the controller (``plugins/plugin_utils/catalog/load.py``), validates it with
every other catalog file and the task's ``catalog_extra`` documents, and ships the driver
defects to the node; ``merge_catalog`` validates them again here with the same validator
(``module_utils/catalog/validate.py``, no ``jsonschema`` needed). Version ranges and conditions are
matched by ``module_utils/catalog/evaluate.match_entry``, the function the controller's audit
evaluates with, so the node and the controller cannot disagree on whether a version is in a range.

driver_guard considers the ``kind: defect`` entries of component ``driver``; security entries
are reported by the audit as ``security.driver`` findings (their floors are not part of the
recommendation here). On top of the catalog's evaluation:

* An entry matches a driver version when one of its ``affected`` items covers it by ordering
  (``introduced <= v < fixed``, or ``<= last_affected`` without a fix, or the whole branch).
* *State conditions* (``mig_mixed``, ``mig_enabled``) describe how the node is configured
  today: all hold -> ``known_bad``; one does not hold or is unknown -> ``at_risk`` (the bug is
  in the installed driver, its trigger is a reconfiguration away).
* Any other condition (``gpu_model``, ...) that fails rules the node out: the entry is listed
  under ``not_applicable`` with the reason. Unknown -> ``at_risk``.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubegpu.fleet.plugins.module_utils.catalog import evaluate as catalog_evaluate
from ansible_collections.kubegpu.fleet.plugins.module_utils.catalog.validate import (
    COMPONENT_SCHEMES,
    SEVERITIES,
    CatalogError,
    document_list,
    validate_documents,
)
from ansible_collections.kubegpu.fleet.plugins.module_utils._common.versions import (
    DriverVersion,
    SemVer,
)

COMPONENT = "driver"
SCHEME = COMPONENT_SCHEMES[COMPONENT]
KIND = "defect"
STATE_CONDITIONS = ("mig_mixed", "mig_enabled")
NONE_FIXED = "none"

VERDICT_OK = "ok"
VERDICT_KNOWN_BAD = "known_bad"
VERDICT_AT_RISK = "at_risk"
VERDICT_ABSENT = "absent"


def parse_component_version(text):
    """Parse an installed component (toolkit) version as SemVer; raise ValueError naming it.

    Package forms are accepted: the epoch (``1:``) and the Debian/RPM revision (after the last
    ``-``) are dropped, and a Debian ``~`` pre-release marker becomes a SemVer pre-release:
    ``1.14.6-1`` -> 1.14.6, ``1.18.0~rc.1-1`` -> 1.18.0-rc.1, ``1.17.8-1~ubuntu1`` -> 1.17.8.
    """
    if not isinstance(text, str):
        raise ValueError("version must be a string, got %r" % (text,))
    clean = text.strip()
    if ":" in clean:
        clean = clean.split(":", 1)[1]
    if "-" in clean:
        clean = clean.rsplit("-", 1)[0]
    clean = clean.replace("~", "-")
    try:
        return SemVer(clean)
    except ValueError:
        raise ValueError("cannot parse version %r (expected MAJOR.MINOR.PATCH, e.g. 1.14.6)" % (text,))


# --------------------------------------------------------------------------------------------
# Catalog documents
# --------------------------------------------------------------------------------------------

def merge_catalog(bundled_docs, extra):
    """``(entries, origin)``: bundled + ``catalog_extra`` documents, validated together.

    Extra entries may not reuse a bundled id (that would silently change a vetted entry); skip
    the bundled entry with ``skip_entries`` and add yours under a new id instead.
    """
    bundled = validate_documents(bundled_docs, "bundled catalog")
    extra_docs = document_list(extra, "catalog_extra")
    extra_entries = validate_documents(extra_docs, "catalog_extra") if extra_docs else []
    origin = dict((e["id"], "bundled") for e in bundled)
    problems = []
    for e in extra_entries:
        if e["id"] in origin:
            problems.append("id %r already exists in the bundled catalog (use skip_entries to drop "
                            "the bundled entry and pick a new id)" % e["id"])
        origin[e["id"]] = "catalog_extra"
    if problems:
        raise CatalogError("; ".join(problems), "catalog_extra")
    return bundled + extra_entries, origin


def driver_defects(entries):
    """The entries driver_guard evaluates: component driver, kind defect."""
    return [e for e in entries if e.get("component") == COMPONENT and e.get("kind") == KIND]


# --------------------------------------------------------------------------------------------
# Evaluation
# --------------------------------------------------------------------------------------------

def node_facts(node):
    """catalog v2 condition facts from driver_guard's node facts (missing -> unknown)."""
    names = [n for n in (node.get("gpu_names") or []) if n]
    return {
        "mig_mixed": node.get("mig_mixed"),
        "mig_enabled": node.get("mig_enabled"),
        "gpu_model": names or None,
    }


def _is_state(condition):
    return condition in STATE_CONDITIONS


def match_one(entry, version, facts):
    """``catalog_evaluate.match_entry`` with driver_guard's state conditions; None or the tuple."""
    return catalog_evaluate.match_entry(entry, SCHEME, version, facts, keep=_is_state)


def entry_conditions_exclude(entry, facts):
    """Reason text when a non-state condition of the entry fails on this node, else None."""
    _held, failed, _unknown = catalog_evaluate.condition_states(entry.get("conditions") or {}, facts)
    hard = [r for k, r in failed if not _is_state(k)]
    return "; ".join(hard) or None


def _severity_rank(sev):
    try:
        return SEVERITIES.index(sev)
    except ValueError:
        return len(SEVERITIES)


def _versions_to_check(node):
    """[(DriverVersion, [components])] for the installed userspace and the loaded kernel module.

    The userspace version comes first when known; equal versions are checked once.
    """
    out = []
    for comp, key in (("userspace", "driver_version"), ("kernel_module", "kernel_module_version")):
        text = node.get(key)
        if not text:
            continue
        v = DriverVersion(text)
        for other, comps in out:
            if other == v:
                comps.append(comp)
                break
        else:
            out.append((v, [comp]))
    return out


def _fixed_in_branch(item):
    if not item.get("branch"):
        return None
    return item.get("fixed") or NONE_FIXED


def match_entries(entries, node, versions, origin=None):
    """Match every entry against each (DriverVersion, [components]) in ``versions``.

    Returns ``(matches, not_applicable)``. A match carries the entry's id, title, kind,
    severity, status (known_bad/at_risk), the conditions met / not met / unknown, the matched
    versions with the range that matched, the per-branch fix, remediation and sources.
    """
    facts = node_facts(node)
    matches = []
    not_applicable = []
    for entry in entries:
        hits = []
        for version, components in versions:
            best = match_one(entry, version, facts)
            if best is not None:
                hits.append((version, components, best))
        if not hits:
            continue
        top = max(h[2][0] for h in hits)
        if top == 0:
            _v, _c, (_r, item, _reasons, _held, failed, _unknown) = hits[0]
            not_applicable.append({"id": entry["id"], "title": entry["title"],
                                   "reason": "; ".join(r for k, r in failed if not _is_state(k)),
                                   "affected_range": catalog_evaluate.range_text(item)})
            continue
        hits = [h for h in hits if h[2][0] > 0]
        _rank, item, _reasons, held, failed, unknown = hits[0][2]
        status = VERDICT_KNOWN_BAD if top == 2 else VERDICT_AT_RISK
        matches.append({
            "id": entry["id"],
            "title": entry["title"],
            "kind": entry["kind"],
            "severity": entry["severity"],
            "status": status,
            "conditions_met": [k for k, _r in held],
            "conditions_not_met": [k for k, _r in failed],
            "conditions_unknown": [k for k, _r in unknown],
            "reasons": list(hits[0][2][2]) + [r for _k, r in held + failed + unknown],
            "matched_versions": [{"version": str(v), "components": list(c), "by": "range",
                                  "detail": catalog_evaluate.range_text(b[1])} for v, c, b in hits],
            "affected_range": catalog_evaluate.range_text(item),
            "fixed_in_branch": _fixed_in_branch(item),
            "remediation": entry["remediation"],
            "mitigation": entry.get("mitigation"),
            "references": [s["url"] for s in entry["sources"]],
            "source": (origin or {}).get(entry["id"], "bundled"),
        })
    matches.sort(key=lambda m: (m["status"] != VERDICT_KNOWN_BAD, _severity_rank(m["severity"]), m["id"]))
    return matches, not_applicable


def verdict_of(matches):
    if any(m["status"] == VERDICT_KNOWN_BAD for m in matches):
        return VERDICT_KNOWN_BAD
    if matches:
        return VERDICT_AT_RISK
    return VERDICT_OK


# --------------------------------------------------------------------------------------------
# Recommendation
# --------------------------------------------------------------------------------------------

def branch_fixes(entry):
    """{branch (int): first fixed DriverVersion or NONE_FIXED} over the entry's branch items."""
    out = {}
    for item in entry["affected"]:
        if not item.get("branch"):
            continue
        b = int(item["branch"])
        fixed = DriverVersion(item["fixed"]) if item.get("fixed") else NONE_FIXED
        prev = out.get(b)
        if prev == NONE_FIXED or fixed == NONE_FIXED:
            out[b] = NONE_FIXED
        elif prev is None or fixed > prev:
            out[b] = fixed
    return out


def _blocking(entries, node, version):
    """Entries that still match ``version`` on this node, split by driver-fixability."""
    facts = node_facts(node)
    matches, _na = match_entries(entries, node, [(version, ["candidate"])])
    by_id = dict((e["id"], e) for e in entries)
    fixable, unfixable = [], []
    for m in matches:
        item = match_one(by_id[m["id"]], version, facts)[1]
        (fixable if item.get("branch") else unfixable).append((m, item))
    return fixable, unfixable


def _settle(entries, node, branch, start, limit=16):
    """Raise ``start`` within ``branch`` until no driver-fixable defect matches it.

    Returns ``(version, caveats)`` or ``(None, reason)`` when some entry has no fix in the
    branch. ``caveats`` are matches that a driver version cannot fix (e.g. limitations).
    """
    candidate = start
    for _i in range(limit):
        fixable, unfixable = _blocking(entries, node, candidate)
        if not fixable:
            caveats = [{"id": m["id"], "title": m["title"], "severity": m["severity"],
                        "status": m["status"]} for m, _item in unfixable]
            return candidate, caveats
        bump = None
        for m, item in fixable:
            if not item.get("fixed"):
                return None, "%s has no fixed %d release" % (m["id"], branch)
            fixed = DriverVersion(item["fixed"])
            if bump is None or fixed > bump:
                bump = fixed
        if bump <= candidate:  # defensive: a validated catalog never gets here
            return None, "catalog does not converge at %s" % candidate
        candidate = bump
    return None, "no settled version in branch %d after %d steps" % (branch, limit)


def recommend(entries, node, target, matches):
    """Recommend a driver version for a node whose evaluated version is ``target``.

    Rule (documented in catalog/README.md and the module docs): the first version of the
    node's branch that is clear of every known-bad driver defect on this node.

    1. Only matches through a branch item count; branch-less items (limitations, platform
       minimums) are listed in ``not_fixed_by_driver`` and their remediation applies.
    2. Same branch first: the highest first-fixed version of the node's branch among the
       matched entries, raised again while that version itself matches another defect on
       this node. Fixed versions are bounds of an ordering: a version the catalog names as
       first fixed is recommended as is.
    3. When the branch has no fix (an item of the branch without ``fixed``), candidates come
       from every other branch a matched entry names a fix for (computed the same way). The
       nearest newer branch wins (moving forward keeps the CUDA driver API at least as new);
       without one, the nearest older branch; the others are ``alternatives`` (575.57.08: no
       575 fix, recommended 580.65.06, alternative 570.172.08).
    4. ``caveats`` lists entries a driver version cannot fix that would still match a
       candidate on this node. A candidate with a known_bad caveat ranks after the others.

    Security entries are not considered: their floors are reported as ``security.driver``.
    """
    out = {"version": None, "branch": None, "same_branch": False, "same_branch_fix": None,
           "same_branch_note": None, "reason": None, "alternatives": [], "caveats": [],
           "not_fixed_by_driver": []}
    facts = node_facts(node)
    by_id = dict((e["id"], e) for e in entries)
    fixable_ids = []
    for m in matches:
        best = match_one(by_id[m["id"]], target, facts)
        if best is None:
            continue
        if best[1].get("branch"):
            fixable_ids.append(m["id"])
        else:
            out["not_fixed_by_driver"].append(m["id"])
    if not fixable_ids:
        if out["not_fixed_by_driver"]:
            out["reason"] = ("no driver version fixes %s; follow the entry remediation"
                             % ", ".join(out["not_fixed_by_driver"]))
        else:
            out["reason"] = "no catalog entry that a driver version fixes matches %s" % target
        return out

    branch = target.branch
    fixes = {}
    for eid in fixable_ids:
        for b, fixed in branch_fixes(by_id[eid]).items():
            fixes.setdefault(b, []).append(fixed)

    same = fixes.get(branch, [])
    candidates = []
    if same and NONE_FIXED not in same:
        start = max(same)
        version, caveats = _settle(entries, node, branch, start)
        if version is not None:
            out["same_branch_fix"] = str(start)
            candidates.append((branch, version, caveats))
        else:
            out["same_branch_fix"] = NONE_FIXED
            out["same_branch_note"] = caveats
    else:
        out["same_branch_fix"] = NONE_FIXED

    for b in sorted(fixes):
        if b == branch or NONE_FIXED in fixes[b]:
            continue
        version, caveats = _settle(entries, node, b, max(fixes[b]))
        if version is not None:
            candidates.append((b, version, caveats))

    def preference(c):
        b, _v, cav = c
        bad = any(x["status"] == VERDICT_KNOWN_BAD for x in cav)
        if b == branch:
            return (bad, 0, 0)
        if b > branch:
            return (bad, 1, b - branch)
        return (bad, 2, branch - b)

    candidates.sort(key=preference)
    if not candidates:
        out["reason"] = ("no fixed release in branch %d and no other branch with a fix for %s"
                         % (branch, ", ".join(fixable_ids)))
        return out
    b, version, caveats = candidates[0]
    out["version"] = str(version)
    out["branch"] = b
    out["caveats"] = caveats
    if b == branch:
        out["same_branch"] = True
        out["reason"] = "first fixed %d release for %s" % (branch, ", ".join(fixable_ids))
    else:
        out["reason"] = ("no fixed %d release for %s; nearest fixed branch is %d (first fixed "
                         "release %s)" % (branch, ", ".join(fixable_ids), b, version))
    for ab, av, acav in candidates[1:]:
        out["alternatives"].append({
            "version": str(av), "branch": ab, "caveats": acav,
            "reason": ("older branch %d" % ab) if ab < branch else ("newer branch %d" % ab),
        })
    return out


def evaluate(entries, node, origin=None, skip=()):
    """Full evaluation for one node against the driver defects among ``entries``.

    ``node``: driver_version (installed userspace), kernel_module_version (loaded), mig_mixed,
    mig_enabled, gpu_names. Versions that do not parse raise ValueError naming the value.
    Returns verdict, branch, matches, not_applicable, recommended_version, recommendation and
    reboot_pending.
    """
    skip = set(skip or ())
    active = [e for e in driver_defects(entries) if e["id"] not in skip]
    versions = _versions_to_check(node)
    result = {"verdict": VERDICT_ABSENT, "branch": None, "matches": [], "not_applicable": [],
              "recommended_version": None, "recommendation": None,
              "reboot_pending": reboot_pending(node.get("driver_version"),
                                               node.get("kernel_module_version"))}
    if not versions:
        return result
    target = versions[0][0]  # userspace when known (what runs after a reboot), else kernel module
    result["branch"] = target.branch
    matches, not_applicable = match_entries(active, node, versions, origin)
    result["matches"] = matches
    result["not_applicable"] = not_applicable
    result["verdict"] = verdict_of(matches)
    if not matches:
        return result
    target_matches = [m for m in matches
                      if any(DriverVersion(mv["version"]) == target for mv in m["matched_versions"])]
    if not target_matches:
        # Only the loaded kernel module is affected: the installed driver fixes it at reboot.
        result["recommended_version"] = str(target)
        result["recommendation"] = {
            "version": str(target), "branch": target.branch, "same_branch": True,
            "same_branch_fix": None, "same_branch_note": None, "alternatives": [], "caveats": [],
            "not_fixed_by_driver": [],
            "reason": ("installed driver %s is not affected; reboot to load it (loaded kernel "
                       "module: %s)" % (target, node.get("kernel_module_version"))),
        }
        return result
    rec = recommend(active, node, target, target_matches)
    result["recommendation"] = rec
    result["recommended_version"] = rec["version"]
    return result


def reboot_pending(driver_version, kernel_module_version):
    """True when installed userspace and loaded kernel module differ; None when either is unknown."""
    if not driver_version or not kernel_module_version:
        return None
    return DriverVersion(driver_version) != DriverVersion(kernel_module_version)
