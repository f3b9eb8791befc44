# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Known-bad NVIDIA driver catalog: validation, evaluation and recommendations.

Runs on the controller (the driver_guard action plugin validates the bundled catalog and the
user's ``catalog_extra`` before anything reaches a node) and on the node (the module validates
again and evaluates), so it depends on nothing outside the standard library and versions.py.
The checks mirror ``catalog/known_bad_drivers.schema.json`` and add the semantic rules a JSON
schema cannot express (versions parse, versions belong to their branch, fixed releases are
not themselves affected, ids are unique).

Catalog format (see catalog/README.md)::

    {"schema_version": 1, "entries": [{
        "id": "nvml-r570-mig-hang", "title": "...", "severity": "critical",
        "affected": [
            {"branch": 570, "versions": ["570.124.06"], "ranges": [{"from": "570.124.06",
             "before": "570.172.08"}], "fixed": "570.172.08"},
            {"branch": 575, "all_versions": true, "fixed": "none"},
            {"ranges": [{"from": "550.40"}]}],          # branch-less: any branch
        "conditions": {"mig_mixed": true, "toolkit_version": {"before": "1.14.6"}},
        "remediation": "...", "references": ["https://..."]}]}

Evaluation semantics:

* *Driver criteria*: a version is affected by an entry when an ``affected`` item lists it,
  one of the item's ranges contains it, or the item has ``all_versions`` (branch items only
  match versions of their branch).
* *Component conditions* (``toolkit_version``, ``gpu_model``) describe something the node
  must have. When the node lacks the component, or has it outside the condition, the entry
  does not match at all (it is reported under ``not_applicable``).
* *State conditions* (``mig_mixed``, ``mig_enabled``) describe how the node is configured
  today. All met: ``known_bad``. Any not met or unknown: ``at_risk``.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.kubegpu.fleet.plugins.module_utils.versions import (
    DriverVersion,
    SemVer,
)

SCHEMA_VERSION = 1
# Highest first; the order is used to sort matches and pick the worst severity.
SEVERITIES = ("critical", "high", "medium", "warning", "info")
STATE_CONDITIONS = ("mig_mixed", "mig_enabled")
COMPONENT_CONDITIONS = ("toolkit_version", "gpu_model")
CONDITIONS = STATE_CONDITIONS + COMPONENT_CONDITIONS
ENTRY_KEYS = ("id", "title", "severity", "description", "affected", "conditions",
              "remediation", "notes", "references")
ENTRY_REQUIRED = ("id", "title", "severity", "affected", "remediation", "references")
ITEM_KEYS = ("branch", "versions", "ranges", "all_versions", "fixed")
RANGE_KEYS = ("from", "to", "before")
NONE_FIXED = "none"
ID_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
MAX_BRANCH = 9999
_COMPONENT_VERSION_RE = re.compile(r"^v?[0-9]+\.[0-9]+\.[0-9]+([-~][0-9A-Za-z.-]+)?$")

VERDICT_OK = "ok"
VERDICT_KNOWN_BAD = "known_bad"
VERDICT_AT_RISK = "at_risk"
VERDICT_ABSENT = "absent"


class CatalogError(ValueError):
    """The catalog (bundled or catalog_extra) is invalid; ``problems`` lists every issue."""

    def __init__(self, source, problems):
        self.source = source
        self.problems = list(problems)
        shown = self.problems[:20]
        more = len(self.problems) - len(shown)
        msg = "invalid %s: %s" % (source, "; ".join(shown))
        if more > 0:
            msg += "; ... and %d more problem(s)" % more
        super(CatalogError, self).__init__(msg)


def _is_str(value):
    return isinstance(value, str)


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _describe(value):
    """Explain a value of the wrong type, with a hint for YAML's float trap."""
    if isinstance(value, float):
        return "%r (a number: quote versions in YAML, e.g. \"550.40\")" % (value,)
    return "%r (%s)" % (value, type(value).__name__)


def _driver(value, where, problems):
    if not _is_str(value):
        problems.append("%s: version must be a string, got %s" % (where, _describe(value)))
        return None
    try:
        return DriverVersion(value)
    except ValueError as e:
        problems.append("%s: %s" % (where, e))
        return None


def _semver(value, where, problems):
    if not _is_str(value):
        problems.append("%s: version must be a string, got %s" % (where, _describe(value)))
        return None
    try:
        return parse_catalog_component_version(value)
    except ValueError as e:
        problems.append("%s: %s" % (where, e))
        return None


def parse_component_version(text):
    """Parse an installed component (toolkit) version as SemVer; raise ValueError naming it.

    Package forms are accepted: the epoch (``1:``) and the Debian/RPM revision (after the last
    ``-``) are dropped, and a Debian ``~`` pre-release marker becomes a SemVer pre-release:
    ``1.14.6-1`` -> 1.14.6, ``1.18.0~rc.1-1`` -> 1.18.0-rc.1, ``1.17.8-1~ubuntu1`` -> 1.17.8.
    """
    if not _is_str(text):
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


def parse_catalog_component_version(text):
    """A catalog bound: SemVer as written (``1.14.6``, ``1.14.6-rc.1`` or ``1.14.6~rc.1``)."""
    if not _is_str(text) or not _COMPONENT_VERSION_RE.match(text):
        raise ValueError("cannot parse version %r (expected MAJOR.MINOR.PATCH, e.g. 1.14.6)" % (text,))
    return SemVer(text.replace("~", "-"))


def _unknown_keys(obj, allowed, where, problems):
    for key in sorted(k for k in obj if k not in allowed):
        problems.append("%s: unknown key %r (allowed: %s)" % (where, key, ", ".join(allowed)))


def _validate_range(rng, where, branch, problems, parse):
    """Check one range object; return (lower, upper, upper_inclusive) or None."""
    if not isinstance(rng, dict):
        problems.append("%s: a range must be a mapping with from/to/before, got %s"
                        % (where, _describe(rng)))
        return None
    _unknown_keys(rng, RANGE_KEYS, where, problems)
    if not any(k in rng for k in RANGE_KEYS):
        problems.append("%s: a range needs at least one of from, to, before" % where)
        return None
    if "to" in rng and "before" in rng:
        problems.append("%s: use either 'to' (inclusive) or 'before' (exclusive), not both" % where)
        return None
    bounds = {}
    for key in RANGE_KEYS:
        if key in rng:
            v = parse(rng[key], "%s.%s" % (where, key), problems)
            if v is None:
                return None
            if branch is not None and v.branch != branch:
                problems.append("%s.%s: %s is not in branch %d" % (where, key, rng[key], branch))
                return None
            bounds[key] = v
    low = bounds.get("from")
    high = bounds.get("to", bounds.get("before"))
    if low is not None and high is not None:
        if "before" in bounds and not low < high:
            problems.append("%s: empty range (from %s is not below before %s)"
                            % (where, rng["from"], rng["before"]))
            return None
        if "to" in bounds and low > high:
            problems.append("%s: empty range (from %s is above to %s)" % (where, rng["from"], rng["to"]))
            return None
    return low, high, "to" in bounds


def _validate_item(item, where, problems):
    if not isinstance(item, dict):
        problems.append("%s: must be a mapping, got %s" % (where, _describe(item)))
        return
    _unknown_keys(item, ITEM_KEYS, where, problems)
    branch = item.get("branch")
    if "branch" in item:
        if not _is_int(branch) or not 1 <= branch <= MAX_BRANCH:
            problems.append("%s.branch: must be an integer branch number (e.g. 570), got %s"
                            % (where, _describe(branch)))
            return
    else:
        for key in ("versions", "all_versions", "fixed"):
            if key in item:
                problems.append("%s: %r needs 'branch' (a branch-less item may only have ranges)"
                                % (where, key))
        if "ranges" not in item:
            problems.append("%s: a branch-less item needs 'ranges'" % where)
    versions = []
    if "versions" in item:
        vs = item["versions"]
        if not isinstance(vs, list) or not vs:
            problems.append("%s.versions: must be a non-empty list of version strings" % where)
        else:
            seen = set()
            for i, text in enumerate(vs):
                v = _driver(text, "%s.versions[%d]" % (where, i), problems)
                if v is None:
                    continue
                if branch is not None and v.branch != branch:
                    problems.append("%s.versions[%d]: %s is not in branch %d" % (where, i, text, branch))
                    continue
                if v in seen:
                    problems.append("%s.versions[%d]: %s listed twice" % (where, i, text))
                seen.add(v)
                versions.append(v)
    ranges = []
    if "ranges" in item:
        rs = item["ranges"]
        if not isinstance(rs, list) or not rs:
            problems.append("%s.ranges: must be a non-empty list of ranges" % where)
        else:
            for i, rng in enumerate(rs):
                r = _validate_range(rng, "%s.ranges[%d]" % (where, i), branch, problems,
                                    _driver)
                if r is not None:
                    ranges.append(r)
    all_versions = item.get("all_versions", False)
    if "all_versions" in item and not isinstance(all_versions, bool):
        problems.append("%s.all_versions: must be true or false, got %s" % (where, _describe(all_versions)))
        all_versions = False
    if all_versions and ("versions" in item or "ranges" in item):
        problems.append("%s: all_versions excludes versions and ranges" % where)
    if branch is None:
        return
    if "fixed" not in item:
        problems.append("%s: a branch item needs 'fixed' (the first fixed release of branch %d, "
                        "or \"none\")" % (where, branch))
        return
    fixed_text = item["fixed"]
    if fixed_text == NONE_FIXED:
        if not (versions or ranges or all_versions):
            problems.append("%s: fixed is \"none\" but the item lists no affected versions" % where)
        return
    fixed = _driver(fixed_text, "%s.fixed" % where, problems)
    if fixed is None:
        return
    if fixed.branch != branch:
        problems.append("%s.fixed: %s is not in branch %d" % (where, fixed_text, branch))
        return
    if all_versions:
        problems.append("%s: all_versions contradicts fixed %s (use fixed: none)" % (where, fixed_text))
    for v in versions:
        if v >= fixed:
            problems.append("%s: listed version %s is not below fixed %s" % (where, v, fixed_text))
    for low, high, inclusive in ranges:
        if high is None or (high > fixed if not inclusive else high >= fixed):
            problems.append("%s: a range reaches the fixed release %s" % (where, fixed_text))


def _validate_conditions(conds, where, problems):
    if not isinstance(conds, dict):
        problems.append("%s: must be a mapping, got %s" % (where, _describe(conds)))
        return
    _unknown_keys(conds, CONDITIONS, where, problems)
    for key in STATE_CONDITIONS:
        if key in conds and not isinstance(conds[key], bool):
            problems.append("%s.%s: must be true or false, got %s" % (where, key, _describe(conds[key])))
    if "toolkit_version" in conds:
        _validate_range(conds["toolkit_version"], where + ".toolkit_version", None, problems,
                        _semver)
    if "gpu_model" in conds:
        pat = conds["gpu_model"]
        if not _is_str(pat) or not pat:
            problems.append("%s.gpu_model: must be a non-empty regular expression string, got %s"
                            % (where, _describe(pat)))
        else:
            try:
                re.compile(pat)
            except re.error as e:
                problems.append("%s.gpu_model: invalid regular expression %r: %s" % (where, pat, e))


def _validate_entry(entry, where, problems):
    if not isinstance(entry, dict):
        problems.append("%s: must be a mapping, got %s" % (where, _describe(entry)))
        return
    if _is_str(entry.get("id")):
        where = "%s (id %s)" % (where, entry["id"])
    _unknown_keys(entry, ENTRY_KEYS, where, problems)
    for key in ENTRY_REQUIRED:
        if key not in entry:
            problems.append("%s: missing required key %r" % (where, key))
    if "id" in entry and not (_is_str(entry["id"]) and ID_RE.match(entry["id"])):
        problems.append("%s.id: %r must match %s" % (where, entry["id"], ID_RE.pattern))
    for key in ("title", "remediation", "description", "notes"):
        if key in entry and not (_is_str(entry[key]) and entry[key].strip()):
            problems.append("%s.%s: must be a non-empty string" % (where, key))
    if "severity" in entry and entry["severity"] not in SEVERITIES:
        problems.append("%s.severity: %r is not one of %s" % (where, entry["severity"], ", ".join(SEVERITIES)))
    if "references" in entry:
        refs = entry["references"]
        if not isinstance(refs, list) or not refs or not all(_is_str(r) and r.strip() for r in refs):
            problems.append("%s.references: must be a non-empty list of strings (URLs or "
                            "owner/repo#N)" % where)
    if "conditions" in entry:
        _validate_conditions(entry["conditions"], where + ".conditions", problems)
    if "affected" in entry:
        items = entry["affected"]
        if not isinstance(items, list) or not items:
            problems.append("%s.affected: must be a non-empty list" % where)
            return
        branches = set()
        affects = False
        for i, item in enumerate(items):
            iw = "%s.affected[%d]" % (where, i)
            _validate_item(item, iw, problems)
            if isinstance(item, dict):
                b = item.get("branch")
                if _is_int(b):
                    if b in branches:
                        problems.append("%s: branch %d appears twice" % (iw, b))
                    branches.add(b)
                if item.get("versions") or item.get("ranges") or item.get("all_versions"):
                    affects = True
        if not affects:
            problems.append("%s.affected: no item lists affected versions, ranges or all_versions"
                            % where)


def validate_entries(entries, source="catalog"):
    """Validate a list of entries; raise CatalogError listing every problem."""
    problems = []
    if not isinstance(entries, list):
        raise CatalogError(source, ["entries must be a list, got %s" % _describe(entries)])
    seen = {}
    for i, entry in enumerate(entries):
        _validate_entry(entry, "entries[%d]" % i, problems)
        if isinstance(entry, dict) and _is_str(entry.get("id")):
            if entry["id"] in seen:
                problems.append("entries[%d]: duplicate id %r (also entries[%d])"
                                % (i, entry["id"], seen[entry["id"]]))
            else:
                seen[entry["id"]] = i
    if problems:
        raise CatalogError(source, problems)
    return entries


def validate_catalog(data, source="catalog"):
    """Validate a whole catalog document; return its entries list."""
    if not isinstance(data, dict):
        raise CatalogError(source, ["the catalog must be a mapping with schema_version and "
                                    "entries, got %s" % _describe(data)])
    problems = []
    for key in sorted(k for k in data if k not in ("schema_version", "entries")):
        problems.append("unknown top-level key %r" % key)
    if data.get("schema_version") != SCHEMA_VERSION:
        problems.append("schema_version must be %d, got %r" % (SCHEMA_VERSION, data.get("schema_version")))
    if "entries" not in data:
        problems.append("missing 'entries'")
    if problems:
        raise CatalogError(source, problems)
    return validate_entries(data["entries"], source)


def normalize_extra(extra):
    """``catalog_extra`` may be a list of entries or a catalog document; return the list."""
    if extra is None:
        return []
    if isinstance(extra, dict):
        if "entries" in extra:
            return validate_catalog(dict(extra, schema_version=extra.get("schema_version", SCHEMA_VERSION)),
                                    "catalog_extra")
        raise CatalogError("catalog_extra", ["must be a list of entries (or a mapping with "
                                             "'entries'), got a mapping with keys %s"
                                             % ", ".join(sorted(str(k) for k in extra))])
    if not isinstance(extra, list):
        raise CatalogError("catalog_extra", ["must be a list of entries, got %s" % _describe(extra)])
    return validate_entries(extra, "catalog_extra")


def merge_catalog(bundled_entries, extra):
    """Return bundled + extra entries as ``(entries, origin)`` with ``origin[id]`` the source.

    Extra entries may not reuse a bundled id (that would silently change a vetted entry);
    skip the bundled entry with ``skip_entries`` and add yours under a new id instead.
    """
    extra_entries = normalize_extra(extra)
    origin = dict((e["id"], "bundled") for e in bundled_entries)
    problems = []
    for i, e in enumerate(extra_entries):
        if e["id"] in origin:
            problems.append("entries[%d]: id %r already exists in the bundled catalog (use "
                            "skip_entries to drop the bundled entry and pick a new id)" % (i, e["id"]))
        origin[e["id"]] = "catalog_extra"
    if problems:
        raise CatalogError("catalog_extra", problems)
    return list(bundled_entries) + list(extra_entries), origin


# --------------------------------------------------------------------------------------------
# Evaluation
# --------------------------------------------------------------------------------------------

def _range_contains(rng, version, parse=DriverVersion):
    if "from" in rng and version < parse(rng["from"]):
        return False
    if "to" in rng and version > parse(rng["to"]):
        return False
    if "before" in rng and not version < parse(rng["before"]):
        return False
    return True


def describe_range(rng):
    parts = []
    if "from" in rng:
        parts.append(">= %s" % rng["from"])
    if "to" in rng:
        parts.append("<= %s" % rng["to"])
    if "before" in rng:
        parts.append("< %s" % rng["before"])
    return ", ".join(parts)


def affected_by(entry, version):
    """How ``entry`` affects ``version`` (a DriverVersion): a dict or None.

    ``{"item": <affected item>, "by": "listed"|"range"|"branch", "detail": str}``.
    """
    for item in entry["affected"]:
        branch = item.get("branch")
        if branch is not None and version.branch != branch:
            continue
        for text in item.get("versions", ()):
            if DriverVersion(text) == version:
                return {"item": item, "by": "listed", "detail": "listed version %s" % text}
        if item.get("all_versions"):
            return {"item": item, "by": "branch",
                    "detail": "every %d release (no fixed %d release known)" % (branch, branch)}
        for rng in item.get("ranges", ()):
            if _range_contains(rng, version):
                where = ("branch %d " % branch) if branch is not None else ""
                return {"item": item, "by": "range", "detail": "%srange %s" % (where, describe_range(rng))}
    return None


def evaluate_conditions(conditions, node):
    """Evaluate an entry's conditions on node facts.

    ``node`` keys: ``mig_mixed``/``mig_enabled`` (True/False/None = unknown),
    ``toolkit_version`` (string or None = not installed), ``gpu_names`` (list, empty/None =
    unknown). Returns ``{"met", "not_met", "unknown": [names], "excluded": reason or None}``.
    """
    out = {"met": [], "not_met": [], "unknown": [], "excluded": None}
    for name in sorted(conditions or {}):
        want = conditions[name]
        if name in STATE_CONDITIONS:
            have = node.get(name)
            if have is None:
                out["unknown"].append(name)
            elif bool(have) == want:
                out["met"].append(name)
            else:
                out["not_met"].append(name)
        elif name == "toolkit_version":
            have = node.get("toolkit_version")
            if not have:
                out["excluded"] = ("nvidia-container-toolkit is not installed on the node (pass "
                                   "toolkit_version if it runs in a container)")
                continue
            try:
                ok = _range_contains(want, parse_component_version(have), parse_catalog_component_version)
            except ValueError as e:
                raise ValueError("toolkit_version: %s" % e)
            if ok:
                out["met"].append(name)
            else:
                out["excluded"] = ("nvidia-container-toolkit %s is outside %s"
                                   % (have, describe_range(want)))
        elif name == "gpu_model":
            names = [n for n in (node.get("gpu_names") or []) if n]
            if not names:
                out["excluded"] = ("no GPU model known on the node (pass gpu_names when GPU "
                                   "detection is not possible)")
                continue
            rx = re.compile(want, re.IGNORECASE)
            if any(rx.search(n) for n in names):
                out["met"].append(name)
            else:
                out["excluded"] = "no GPU matches %r (GPUs: %s)" % (want, ", ".join(sorted(set(names))))
    return out


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


def match_entries(entries, node, versions, origin=None):
    """Match every entry against each (DriverVersion, [components]) in ``versions``.

    Returns ``(matches, not_applicable)``. A match carries the entry's id, title, severity,
    status (known_bad/at_risk), conditions met / not met / unknown, references, remediation,
    the matched versions and the per-branch fix info of the item that matched.
    """
    matches = []
    not_applicable = []
    for entry in entries:
        hits = []
        for version, component in versions:
            how = affected_by(entry, version)
            if how is not None:
                hits.append((version, component, how))
        if not hits:
            continue
        cond = evaluate_conditions(entry.get("conditions") or {}, node)
        if cond["excluded"]:
            not_applicable.append({"id": entry["id"], "title": entry["title"],
                                   "reason": cond["excluded"]})
            continue
        status = VERDICT_AT_RISK if (cond["not_met"] or cond["unknown"]) else VERDICT_KNOWN_BAD
        first_item = hits[0][2]["item"]
        m = {
            "id": entry["id"],
            "title": entry["title"],
            "severity": entry["severity"],
            "status": status,
            "conditions_met": cond["met"],
            "conditions_not_met": cond["not_met"],
            "conditions_unknown": cond["unknown"],
            "matched_versions": [{"version": str(v), "components": list(c), "by": h["by"],
                                  "detail": h["detail"]} for v, c, h in hits],
            "fixed_in_branch": first_item.get("fixed") if "branch" in first_item else None,
            "remediation": entry["remediation"],
            "references": list(entry["references"]),
            "source": (origin or {}).get(entry["id"], "bundled"),
        }
        matches.append(m)
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

def _entry_branch_items(entry):
    return dict((item["branch"], item) for item in entry["affected"] if "branch" in item)


def _blocking(entries, node, version):
    """Entries that still match ``version`` on this node, split by driver-fixability."""
    matches, _na = match_entries(entries, node, [(version, ["candidate"])])
    by_id = dict((e["id"], e) for e in entries)
    fixable, unfixable = [], []
    for m in matches:
        item = affected_by(by_id[m["id"]], version)["item"]
        (fixable if "branch" in item else unfixable).append((m, item))
    return fixable, unfixable


def _settle(entries, node, branch, start, limit=16):
    """Raise ``start`` within ``branch`` until no driver-fixable entry matches it.

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
            if item["fixed"] == NONE_FIXED:
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

    Rule (documented in catalog/README.md and the module docs):

    1. Only matches that a driver version can fix count (entries matched through a branch item);
       branch-less entries (driver/toolkit combinations, limitations) are listed in
       ``not_fixed_by_driver`` and their remediation applies.
    2. Same branch first: the highest ``fixed`` among the matched entries' items for the
       target's branch, raised again while that version itself matches another entry of the
       catalog on this node. That is the recommendation when it exists.
    3. When the branch has no fix (an entry says ``fixed: none`` there), candidates come from
       every other branch a matched entry names a fix for (computed the same way). The
       nearest newer branch wins (moving forward keeps the CUDA driver API at least as new);
       without one, the nearest older branch. The others are returned as ``alternatives``
       (e.g. 575.57.08: no 575 fix, recommended 580.65.06, alternative 570.172.08).
    4. ``caveats`` lists entries that a driver version cannot fix which would still match a
       candidate on this node (e.g. a limitation of the newer branch). A candidate with a
       known_bad caveat ranks after every candidate without one.
    """
    out = {"version": None, "branch": None, "same_branch": False, "same_branch_fix": None,
           "same_branch_note": None, "reason": None, "alternatives": [], "caveats": [],
           "not_fixed_by_driver": []}
    by_id = dict((e["id"], e) for e in entries)
    fixable_ids = []
    for m in matches:
        item = affected_by(by_id[m["id"]], target)
        if item is None:
            continue
        if "branch" in item["item"]:
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
        for b, item in _entry_branch_items(by_id[eid]).items():
            fixes.setdefault(b, []).append(item["fixed"])

    same = fixes.get(branch, [])
    candidates = []
    if same and NONE_FIXED not in same:
        start = max(DriverVersion(f) for f in same)
        version, caveats = _settle(entries, node, branch, start)
        if version is not None:
            out["same_branch_fix"] = str(start)
            candidates.append((branch, version, caveats))
        else:
            # caveats holds _settle's reason: the first fix leads into an unfixed entry.
            out["same_branch_fix"] = NONE_FIXED
            out["same_branch_note"] = caveats
    else:
        out["same_branch_fix"] = NONE_FIXED

    for b in sorted(fixes):
        if b == branch or NONE_FIXED in fixes[b]:
            continue
        start = max(DriverVersion(f) for f in fixes[b])
        version, caveats = _settle(entries, node, b, start)
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
    """Full evaluation for one node.

    ``node``: driver_version (installed userspace), kernel_module_version (loaded), mig_mixed,
    mig_enabled, toolkit_version, gpu_names. Versions that do not parse raise ValueError
    naming the value. Returns verdict, branch, matches, not_applicable, recommended_version,
    recommendation and reboot_pending.
    """
    skip = set(skip or ())
    active = [e for e in entries if e["id"] not in skip]
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
