# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fleet audit report: aggregation and renderers (controller side).

Pure functions: ``build_report`` turns per-node audit results into the versioned report
document (schema in ``docs/audit-report.schema.json``; ``cves`` groups the ``security.*``
findings across the fleet by CVE); ``render_json``, ``render_html``, ``render_markdown``
and ``render_prometheus`` render that document. Nothing here touches the network or nodes.

Everything in a report may come from a node (names, finding text, evidence), so each format has
one escaping path, safe by construction:

* data: ``json_safe`` turns the document into strict JSON values (NaN and infinities become the
  strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``; lone surrogates become ``\\udcxx`` text;
  nesting deeper than JSON_MAX_DEPTH becomes a string); every renderer starts with it and
  ``render_json`` writes with ``allow_nan=False``;
* Markdown: ``md`` is the one escaper; lines are ``_Md`` values made only by ``md``, ``_md``
  (a constant template whose arguments go through ``md``) and ``_md_join``; the document
  escapes any line that is not ``_Md``;
* HTML: MarkupSafe (Jinja2's, so always on a controller): ``Markup(constant) % values``
  escapes every value; links only for URLs that pass ``catalog_core.is_safe_url``;
* Prometheus: ``_prom_label`` escapes label values per the exposition format.

``tests/unit/plugins/plugin_utils/test_report_hostile.py`` fails on any other way of putting a
value into Markdown or HTML.
"""
from __future__ import annotations

import datetime
import json
import math
import os
import re

import yaml  # ansible-core depends on PyYAML: always there on a controller
from markupsafe import Markup  # Jinja2's dependency: always there with ansible-core

from ansible_collections.kubegpu.fleet.plugins.module_utils.driver.catalog_core import is_safe_url

SCHEMA_ID = "kubegpu.fleet/audit-report"
SCHEMA_VERSION = 1

SEVERITIES = ("critical", "warning", "info")
GENERATED_AT = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z\Z")
SEVERITY_RANK = {"info": 1, "warning": 2, "critical": 3}
NODE_STATUSES = ("audited", "unreachable", "failed")


class ReportError(ValueError):
    """Raised for malformed audit input; the message names the offending value."""


COLLECTION_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def collection_version(root=COLLECTION_ROOT):
    """Version of the collection these plugins belong to, or None when it does not say.

    An installed collection (``ansible-galaxy collection install``, a tarball) has
    ``MANIFEST.json`` with ``collection_info.version``; a source checkout (this repository
    linked into a collections path) has ``galaxy.yml``. Both are small files we wrote.
    """
    try:
        with open(os.path.join(root, "MANIFEST.json"), encoding="utf-8") as fh:
            version = (json.load(fh).get("collection_info") or {}).get("version")
        if isinstance(version, str) and version:
            return version
    except (OSError, ValueError, AttributeError):
        pass
    try:
        with open(os.path.join(root, "galaxy.yml"), encoding="utf-8") as fh:
            doc = yaml.safe_load(fh)
    except (OSError, ValueError, yaml.YAMLError):
        return None
    version = doc.get("version") if isinstance(doc, dict) else None
    return str(version) if version not in (None, "") else None


JSON_MAX_DEPTH = 64
# The renderers' own pass: deeper than anything build_report leaves (its inputs sit a few levels
# below the report's root), so a built report renders unchanged.
RENDER_MAX_DEPTH = JSON_MAX_DEPTH + 16
NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}
_SURROGATE = re.compile("[\ud800-\udfff]")
# Invisible or direction-changing characters: C0/C1 controls (not tab, LF, CR), DEL, bidi
# embeddings, overrides and isolates, zero-width characters, BOM. Shown as U+FFFD in HTML and
# Markdown so a node name cannot hide or reorder what a reader sees.
_INVISIBLE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u200b-\u200f\u202a-\u202e"
                        "\u2060-\u2064\u2066-\u2069\ufeff]")


def _clean_text(text, visible=False):
    if _SURROGATE.search(text):
        text = text.encode("utf-8", "surrogatepass").decode("utf-8", "backslashreplace")
    if visible:
        text = _INVISIBLE.sub("\ufffd", text)
    return str(text)


def json_safe(value, visible=False, max_depth=JSON_MAX_DEPTH, _depth=0):
    """A copy of ``value`` made of strict JSON values only.

    NaN/Infinity (a node's reading) become the strings ``"NaN"``/``"Infinity"``/``"-Infinity"``,
    integers wider than 64 bits a string saying so, keys strings, tuples and sets lists, other
    objects their ``str``; strings lose lone surrogates (``\\udcff`` text instead), and with
    ``visible`` their invisible characters (U+FFFD instead). Nesting deeper than ``max_depth``
    is replaced by a string saying so.
    """
    if isinstance(value, str):
        return _clean_text(value, visible)
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value) if value.bit_length() <= 64 else "<integer of %d bits>" % value.bit_length()
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else NON_FINITE[repr(value)]
    if _depth >= max_depth:
        return "<nested deeper than %d levels: dropped>" % max_depth
    if isinstance(value, dict):
        return dict((_json_key(k, visible), json_safe(v, visible, max_depth, _depth + 1)) for k, v in value.items())
    if isinstance(value, (list, tuple, set, frozenset)):
        return [json_safe(v, visible, max_depth, _depth + 1) for v in value]
    return _clean_text(str(value), visible)


def _json_key(key, visible):
    if isinstance(key, str):
        return _clean_text(key, visible)
    if key is None or isinstance(key, (bool, int, float)):
        safe = json_safe(key)
        return safe if isinstance(safe, str) else json.dumps(safe)
    return _clean_text(str(key), visible)


def severity_rank(severity):
    try:
        return SEVERITY_RANK[severity]
    except (KeyError, TypeError):
        raise ReportError("unknown severity %r (expected one of %s)" % (severity, ", ".join(SEVERITIES)))


def _check_finding(finding, node):
    if not isinstance(finding, dict):
        raise ReportError("finding on node %r is not a mapping: %r" % (node, finding))
    for key in ("id", "severity", "title"):
        if not isinstance(finding.get(key), str) or not finding.get(key):
            raise ReportError("finding on node %r lacks a string %r: %r" % (node, key, finding))
    severity_rank(finding["severity"])
    evidence = finding.get("evidence") or {}
    remediation = finding.get("remediation") or {}
    references = finding.get("references") or []
    out = {
        "id": finding["id"],
        "severity": finding["severity"],
        "title": finding["title"],
        "node": node,
        # a malformed shape is kept, never dropped, in the shape the renderers expect
        "evidence": evidence if isinstance(evidence, dict) else {"value": evidence},
        "remediation": remediation if isinstance(remediation, dict) else {"summary": str(remediation)},
        "references": list(references) if isinstance(references, list) else [str(references)],
    }
    return out


CATALOG_MAX_AGE_DAYS = 45
_ISO_DATE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})\Z")


def _advisory_date(value):
    m = _ISO_DATE.match(value) if isinstance(value, str) else None
    if not m:
        return None
    try:
        return datetime.date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    except ValueError:
        return None


def catalog_state(entries, today, max_age_days=CATALOG_MAX_AGE_DAYS, error=None):
    """How current the known-bad catalog in use is.

    ``entries``: the catalog's entries (``driver_catalog_ctl.catalog_entries``: bundled plus
    ``catalog_extra``); ``today``: a ``datetime.date`` (the report's date). Returns
    ``{"entries", "advisories", "newest_advisory": {"id", "title", "revision", "date"} | None,
    "age_days", "max_age_days", "stale", "warning", "error"}``: the newest bulletin is the one
    whose revision date (``advisory.date``, CSAF ``current_release_date``) is latest, the age
    counts from that date, and ``stale`` is true (with ``warning`` saying so) when it is more
    than ``max_age_days`` old, when no entry names a dated bulletin, or when the catalog could
    not be read (``error``).
    """
    if isinstance(max_age_days, bool) or not isinstance(max_age_days, int) or max_age_days < 1:
        raise ReportError("catalog_max_age_days must be a whole number of days >= 1, got %r" % (max_age_days,))
    entries = [e for e in entries or [] if isinstance(e, dict)]
    advisories = {}
    for e in entries:
        adv = e.get("advisory") if isinstance(e.get("advisory"), dict) else {}
        date = _advisory_date(adv.get("date"))
        if date is None or adv.get("id") is None:
            continue
        key = str(adv["id"])
        if key not in advisories or date > advisories[key][0]:
            advisories[key] = (date, adv)
    out = {"entries": len(entries), "advisories": len(advisories), "newest_advisory": None, "age_days": None,
           "max_age_days": max_age_days, "stale": True, "warning": None, "error": error}
    if error:
        out["warning"] = "the known-bad catalog could not be read, no security finding is reliable: %s" % error
        return out
    if not advisories:
        out["warning"] = "the known-bad catalog names no dated bulletin: how current it is is unknown"
        return out
    date, adv = max(advisories.values(), key=lambda da: (da[0], str(da[1].get("id"))))
    age = (today - date).days
    out.update(newest_advisory={"id": str(adv["id"]), "title": adv.get("title"),
                                "revision": None if adv.get("revision") is None else str(adv["revision"]),
                                "date": date.isoformat()},
               age_days=age, stale=age > max_age_days)
    if out["stale"]:
        out["warning"] = ("the known-bad catalog's newest bulletin (%s, revision %s of %s) is %d days old, more than "
                          "%d: advisories published since are not reported; refresh the catalog"
                          % (adv["id"], out["newest_advisory"]["revision"], date.isoformat(), age, max_age_days))
    return out


def build_report(nodes, cluster_findings=None, generated_at=None, collection_version=None,
                 fail_on="critical", run=None, catalog=None, catalog_max_age_days=CATALOG_MAX_AGE_DAYS,
                 catalog_error=None):
    """Aggregate per-node results into the report document.

    ``catalog``: the entries of the known-bad catalog the audit used (or ``catalog_error``, why
    it could not be read); the report's ``catalog`` section says how current it is
    (``catalog_state``, dated by ``generated_at``). Without either the section is left out.

    ``nodes`` is a list of ``{"name", "status", "error"?, "findings": [...]}`` where status is
    audited | unreachable | failed. Unreachable and failed nodes are listed, never dropped.
    ``cluster_findings`` are findings about the cluster as a whole (node ``None``) or about a
    named node seen from the API (they carry ``node``).
    """
    if fail_on not in SEVERITY_RANK and fail_on not in ("never", "none"):
        raise ReportError("fail_on must be one of critical, warning, info, never; got %r" % (fail_on,))
    if generated_at is None:
        generated_at = datetime.datetime.now(datetime.timezone.utc)
    if isinstance(generated_at, datetime.datetime):
        generated_at = generated_at.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    if not isinstance(generated_at, str) or not GENERATED_AT.match(generated_at):
        raise ReportError("generated_at must be a UTC time YYYY-MM-DDTHH:MM:SSZ, got %r" % (generated_at,))
    # Node data from here on is strict JSON (finite numbers, valid Unicode, bounded nesting).
    if not isinstance(nodes, (list, tuple)):
        raise ReportError("nodes must be a list, got %s" % type(nodes).__name__)
    nodes = json_safe(list(nodes))
    cluster_findings = json_safe(list(cluster_findings or []))
    run = json_safe(run) if isinstance(run, dict) else {}
    collection_version = json_safe(collection_version)
    catalog_info = None
    if catalog is not None or catalog_error is not None:
        today = datetime.date(int(generated_at[:4]), int(generated_at[5:7]), int(generated_at[8:10]))
        catalog_info = json_safe(catalog_state(catalog, today, catalog_max_age_days,
                                               error=None if catalog_error is None else str(catalog_error)))

    seen = set()
    out_nodes = []
    for entry in nodes:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise ReportError("node entry without a name: %r" % (entry,))
        name = entry["name"]
        if name in seen:
            raise ReportError("node %r appears twice" % name)
        seen.add(name)
        status = entry.get("status", "audited")
        if status not in NODE_STATUSES:
            raise ReportError("node %r has unknown status %r" % (name, status))
        findings = [_check_finding(f, name) for f in entry.get("findings") or []]
        out_nodes.append({"name": name, "status": status, "error": entry.get("error"),
                          "findings": sorted(findings, key=_finding_order)})

    by_name = {n["name"]: n for n in out_nodes}
    cluster = []
    for f in cluster_findings or []:
        node = f.get("node") if isinstance(f, dict) else None
        if node is not None and not isinstance(node, str):
            raise ReportError("cluster finding names a node that is not a string: %r" % (node,))
        checked = _check_finding(f, node)
        if node is not None and node in by_name:
            by_name[node]["findings"].append(checked)
            by_name[node]["findings"].sort(key=_finding_order)
        else:
            cluster.append(checked)
    cluster.sort(key=_finding_order)

    out_nodes.sort(key=lambda n: n["name"])
    all_findings = [f for n in out_nodes for f in n["findings"]] + cluster
    by_severity = dict((s, 0) for s in SEVERITIES)
    by_id = {}
    for f in all_findings:
        by_severity[f["severity"]] += 1
        slot = by_id.setdefault(f["id"], {"severity": f["severity"], "title": f["title"], "count": 0,
                                          "nodes": []})
        slot["count"] += 1
        if severity_rank(f["severity"]) > severity_rank(slot["severity"]):
            slot["severity"] = f["severity"]
        if f["node"] is not None and f["node"] not in slot["nodes"]:
            slot["nodes"].append(f["node"])
    for slot in by_id.values():
        slot["nodes"].sort()

    counts = dict((s, sum(1 for n in out_nodes if n["status"] == s)) for s in NODE_STATUSES)
    clean = sum(1 for n in out_nodes if n["status"] == "audited" and not n["findings"])
    failing = failing_findings({"nodes": out_nodes, "cluster": {"findings": cluster}}, fail_on)
    out = {
        "schema": SCHEMA_ID,
        "schema_version": SCHEMA_VERSION,
        "generated_at": generated_at,
        "collection_version": collection_version,
        "run": dict(run or {}, fail_on=fail_on),
        "summary": {
            "nodes_total": len(out_nodes),
            "nodes_audited": counts["audited"],
            "nodes_unreachable": counts["unreachable"],
            "nodes_failed": counts["failed"],
            "nodes_clean": clean,
            "unreachable": sorted(n["name"] for n in out_nodes if n["status"] == "unreachable"),
            "failed": sorted(n["name"] for n in out_nodes if n["status"] == "failed"),
            "findings_total": len(all_findings),
            "by_severity": by_severity,
            "by_id": dict(sorted(by_id.items(), key=lambda kv: (-severity_rank(kv[1]["severity"]), kv[0]))),
            "fail_on": fail_on,
            "failing": len(failing),
            "hands_on": hands_on(out_nodes),
        },
        "nodes": out_nodes,
        "cluster": {"findings": cluster},
        "cves": group_cves(all_findings),
    }
    if catalog_info is not None:
        out["catalog"] = catalog_info
    return out


CVE_SEVERITIES = ("critical", "high", "medium", "low", "info")
CVE_SEVERITY_RANK = dict((sev, len(CVE_SEVERITIES) - i) for i, sev in enumerate(CVE_SEVERITIES))
SECURITY_PREFIX = "security."
CVE_ID = re.compile(r"^CVE-\d{4}-\d{4,}\Z")
CVE_NODE_LIST_MAX = 10  # node names shown per CVE in Markdown and HTML; JSON has them all


def _cvss_rating(score):
    """CVSS v3 qualitative rating of a base score (NVD: critical >= 9.0, high >= 7.0, ...)."""
    if score is None:
        return None
    if score >= 9.0:
        return "critical"
    if score >= 7.0:
        return "high"
    if score >= 4.0:
        return "medium"
    return "low" if score > 0 else "info"


def _number(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _source_urls(sources):
    out = []
    for src in sources if isinstance(sources, list) else []:
        url = src.get("url") if isinstance(src, dict) else src
        if isinstance(url, str) and url and url not in out:
            out.append(url)
    return out


def _list(value):
    return value if isinstance(value, list) else []


def _cve_ids(value):
    """The CVE ids in a list (``CVE-2025-23266``); anything else in it is ignored."""
    return [c for c in _list(value) if isinstance(c, str) and CVE_ID.match(c)]


def group_cves(findings):
    """The ``security.<component>`` findings grouped by CVE across the fleet.

    Input: report findings (with ``node``) whose evidence is ``{component, version, cves, max_cvss,
    advisories: [{id, title, cves, max_cvss, severity, status, fixed, sources, ...}]}``. One entry
    per CVE: ``id``, ``max_cvss`` (highest score of the advisories naming it), ``severity`` (the
    highest catalog severity of those advisories, else the CVSS rating), ``components``,
    ``affected_nodes`` (count) and ``node_names``, ``possibly_affected_nodes`` (the nodes where only
    unknown conditions keep it), ``fixed`` (component -> first fixed versions of the nodes'
    branches), ``advisories`` (ids), ``sources`` (URLs) and ``nodes`` (node, component, version,
    status). Sorted by severity, score, id. Findings without CVEs add nothing.
    """
    by_cve = {}
    for f in findings:
        if not f["id"].startswith(SECURITY_PREFIX) or not isinstance(f.get("evidence"), dict):
            continue
        ev = f["evidence"]
        component = ev.get("component") if isinstance(ev.get("component"), str) else f["id"][len(SECURITY_PREFIX):]
        version = ev.get("version") if isinstance(ev.get("version"), str) else None
        advisories = [a for a in _list(ev.get("advisories")) if isinstance(a, dict)]
        cves = _cve_ids(ev.get("cves"))
        for adv in advisories:
            cves += [c for c in _cve_ids(adv.get("cves")) if c not in cves]
        for cve in cves:
            slot = by_cve.setdefault(cve, {"id": cve, "max_cvss": None, "severity": None, "components": [],
                                           "fixed": {}, "advisories": [], "sources": [], "_nodes": {}})
            naming = [a for a in advisories if cve in _cve_ids(a.get("cves"))]
            status = "affected"
            if naming and all(a.get("status") == "possibly_affected" for a in naming):
                status = "possibly_affected"
            for adv in naming or [{"max_cvss": ev.get("max_cvss")}]:
                score = _number(adv.get("max_cvss"))
                if score is not None and (slot["max_cvss"] is None or score > slot["max_cvss"]):
                    slot["max_cvss"] = score
                sev = adv.get("severity") if adv.get("severity") in CVE_SEVERITY_RANK else None
                if sev and (slot["severity"] is None or CVE_SEVERITY_RANK[sev] > CVE_SEVERITY_RANK[slot["severity"]]):
                    slot["severity"] = sev
                if isinstance(adv.get("id"), str) and adv["id"] not in slot["advisories"]:
                    slot["advisories"].append(adv["id"])
                fixed = adv.get("fixed")
                if isinstance(fixed, str) and fixed:
                    versions = slot["fixed"].setdefault(component, [])
                    if fixed not in versions:
                        versions.append(fixed)
                for url in _source_urls(adv.get("sources")):
                    if url not in slot["sources"]:
                        slot["sources"].append(url)
            if component not in slot["components"]:
                slot["components"].append(component)
            node = f["node"] if f["node"] is not None else ""
            key = (node, component)
            prev = slot["_nodes"].get(key)
            if prev is None or (prev["status"] == "possibly_affected" and status == "affected"):
                slot["_nodes"][key] = {"node": f["node"], "component": component, "version": version,
                                       "status": status}
    out = []
    for slot in by_cve.values():
        nodes = sorted(slot.pop("_nodes").values(), key=lambda n: (n["node"] or "", n["component"]))
        if slot["severity"] is None:
            slot["severity"] = _cvss_rating(slot["max_cvss"]) or "info"
        named = sorted(set(n["node"] for n in nodes if n["node"] is not None))
        sure = set(n["node"] for n in nodes if n["node"] is not None and n["status"] == "affected")
        slot.update(components=sorted(slot["components"]), advisories=sorted(slot["advisories"]),
                    fixed=dict((c, sorted(v)) for c, v in sorted(slot["fixed"].items())),
                    affected_nodes=len(named), node_names=named,
                    possibly_affected_nodes=sorted(set(named) - sure), nodes=nodes)
        out.append(slot)
    out.sort(key=lambda c: (-CVE_SEVERITY_RANK[c["severity"]], -(c["max_cvss"] or 0.0), c["id"]))
    return out


def _finding_order(f):
    return (-severity_rank(f["severity"]), f["id"])


def hands_on(nodes):
    """Nodes with hardware work a person must do: findings whose evidence says ``hands_on``
    (a GPU to replace, a GPU off the bus, an Xid NVIDIA says to investigate). The remediation
    leaves these nodes cordoned. ``[{"node", "findings", "work"}]`` sorted by node."""
    out = []
    for node in nodes:
        picked = [f for f in node["findings"] if isinstance(f.get("evidence"), dict)
                  and f["evidence"].get("hands_on") is True]
        if picked:
            out.append({"node": node["name"], "findings": [f["id"] for f in picked],
                        "work": [str((f.get("remediation") or {}).get("summary") or f["title"])
                                 for f in picked]})
    return sorted(out, key=lambda e: e["node"])


def failing_findings(report, fail_on):
    """Findings at or above ``fail_on`` (``never``/``none`` -> none)."""
    if fail_on in ("never", "none"):
        return []
    threshold = severity_rank(fail_on)
    out = [f for n in report["nodes"] for f in n["findings"] if severity_rank(f["severity"]) >= threshold]
    out += [f for f in report.get("cluster", {}).get("findings", []) if severity_rank(f["severity"]) >= threshold]
    return out


def render_json(report):
    """Strict JSON (RFC 8259): ``json.loads(text, parse_constant=...)`` never sees NaN/Infinity."""
    return json.dumps(json_safe(report, max_depth=RENDER_MAX_DEPTH), indent=2, sort_keys=False,
                      allow_nan=False) + "\n"


# ---------------------------------------------------------------------------------------------
# Markdown (CommonMark + GFM tables)


class _Md(str):
    """Markdown-safe text: made only by ``md``, ``_md``, ``_md_join`` and ``_md_document``."""

    __slots__ = ()


_MD_BREAK = re.compile("\r\n|[\r\n\t\x0b\x0c\x85\u2028\u2029]")
_MD_PUNCT = re.compile(r"([\\`*_\[\]|~#!$^{}])")
_MD_LEADING = re.compile(r"^(\s*)([-+=])|^(\s*\d+)([.)])(?=\s|$)")
_MD_OUTER_SPACE = re.compile(r"^ +| +$")
_MD_AUTOLINK = re.compile(r"(?i)(?<=[a-z0-9])(://)|\b(www)(\.)")


def md(value, code=False):
    """The one Markdown escaper: ``value`` as literal text on one line, wherever it is placed.

    Line breaks of any kind (CR LF, lone CR, LF, tab, VT, FF, NEL, U+2028/9) become a space;
    invisible and bidi control characters U+FFFD; ``& < >`` entities (no raw HTML, no
    autolink); ``\\ ` * _ [ ] | ~ # ! $ ^ { }`` get a backslash (no code span, emphasis, link,
    image, footnote, math, table cell break; a backslash stays a backslash, ``\\|`` stays both
    characters); a leading ``- + =`` or ordered-list number is escaped too, and ``://``/``www.``
    so that GFM makes no link of node text; leading and trailing spaces become ``&#32;``.
    ``code=True`` renders a code span instead (its
    content is literal) unless the text holds a pipe or a backslash, which a GFM table would
    read inside a code span: then plain escaped text.
    """
    text = "" if value is None else str(value)
    text = _INVISIBLE.sub("\ufffd", _MD_BREAK.sub(" ", _clean_text(text)))
    if code and text.strip() and "|" not in text and "\\" not in text:
        fence = "`" * (max([len(run) for run in re.findall("`+", text)] or [0]) + 1)
        return _Md("%s %s %s" % (fence, text, fence) if "`" in text else "%s%s%s" % (fence, text, fence))
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = _MD_PUNCT.sub(r"\\\1", text)
    text = _MD_AUTOLINK.sub(lambda m: "\\" + m.group(0) if m.group(1) else m.group(2) + "\\" + m.group(3), text)
    text = _MD_LEADING.sub(lambda m: "%s\\%s" % (m.group(1), m.group(2)) if m.group(2)
                           else "%s\\%s" % (m.group(3), m.group(4)), text)
    # outer spaces as entities: kept in table cells, and ``**name **`` still closes the emphasis
    return _Md(_MD_OUTER_SPACE.sub(lambda m: "&#32;" * len(m.group(0)), text))


def _md(template, *values):
    """``template % values`` with every value that is not already ``_Md`` or a number through ``md``."""
    safe = tuple(v if isinstance(v, _Md) or (isinstance(v, (int, float)) and not isinstance(v, bool)) else md(v)
                 for v in values)
    return _Md(template % safe)


def _md_join(separator, values):
    """``separator.join(values)`` with every value that is not already ``_Md`` through ``md``."""
    return _Md(separator.join(v if isinstance(v, _Md) else md(v) for v in values))


def _md_document(lines):
    """The document (a plain ``str``): lines joined, any line that is not ``_Md`` escaped as text."""
    return "\n".join(line if isinstance(line, _Md) else md(line) for line in lines)


def render_markdown(report):
    report = json_safe(report, max_depth=RENDER_MAX_DEPTH)
    s = report["summary"]
    sev = s["by_severity"]
    lines = [
        _md("# kubegpu.fleet audit — %s", report["generated_at"]),
        _md(""),
        _md("%d nodes: %d audited, %d unreachable, %d failed, %d clean. Findings: %d critical, %d warning, %d info.",
            s["nodes_total"], s["nodes_audited"], s["nodes_unreachable"], s["nodes_failed"], s["nodes_clean"],
            sev["critical"], sev["warning"], sev["info"]),
        _md(""),
    ]
    lines += _markdown_catalog(report.get("catalog"))
    if s["unreachable"]:
        lines += [_md("**Unreachable:** %s", _md_join(", ", s["unreachable"])), _md("")]
    if s["failed"]:
        lines += [_md("**Audit failed on:** %s", _md_join(", ", s["failed"])), _md("")]
    if s.get("hands_on"):
        lines += [_md("**Hands-on work (nodes left cordoned for a person):**"), _md("")]
        for entry in s["hands_on"]:
            lines.append(_md("- **%s** (%s): %s", entry["node"],
                             _md_join(", ", [md(i, code=True) for i in entry["findings"]]),
                             _md_join("; ", entry["work"])))
        lines.append(_md(""))
    if s["by_id"]:
        lines += [_md("| severity | finding | nodes |"), _md("| --- | --- | --- |")]
        for fid, slot in s["by_id"].items():
            lines.append(_md("| %s | %s %s | %s |", slot["severity"], md(fid, code=True), slot["title"],
                             _md_join(", ", slot["nodes"]) if slot["nodes"] else _md("cluster")))
        lines += [_md(""), _md("## Per node"), _md("")]
        for node in report["nodes"]:
            if not node["findings"]:
                continue
            lines.append(_md("- **%s**", node["name"]))
            for f in node["findings"]:
                fix = f["remediation"].get("summary") or f["remediation"].get("role") or ""
                lines.append(_md("  - %s %s: %s%s", f["severity"].upper(), md(f["id"], code=True), f["title"],
                                 _md(" — fix: %s", fix) if fix else _md("")))
        for f in report["cluster"]["findings"]:
            lines.append(_md("- **cluster**: %s %s: %s", f["severity"].upper(), md(f["id"], code=True), f["title"]))
        lines.append(_md(""))
    else:
        lines += [_md("No findings."), _md("")]
    lines += _markdown_cves(report.get("cves") or [])
    return _md_document(lines)


def _markdown_catalog(cat):
    """The catalog's date and, when it is stale, the warning (nothing without a catalog section)."""
    if not isinstance(cat, dict):
        return []
    lines = []
    newest = cat.get("newest_advisory")
    if isinstance(newest, dict):
        lines.append(_md("Known-bad catalog: %d entries from %d bulletins; newest bulletin %s (%s), revision %s of %s, "
                         "%d days old (warning after %d).", cat["entries"], cat["advisories"], newest["id"],
                         newest.get("title") or "", newest.get("revision") or "?", newest["date"], cat["age_days"],
                         cat["max_age_days"]))
    if cat.get("warning"):
        lines += [_md("")] if lines else []
        lines.append(_md("**Warning:** %s.", cat["warning"]))
    return lines + [_md("")] if lines else []


def _bounded_names(names, limit=CVE_NODE_LIST_MAX):
    """``a, b, c`` or ``a, ..., j and 5 more``: the first ``limit`` names and how many were left out."""
    shown = _md_join(", ", names[:limit])
    return _md("%s and %d more", shown, len(names) - limit) if len(names) > limit else shown


def _fixed_text(fixed):
    return _md_join("; ", [_md("%s %s", comp, _md_join(", ", versions)) for comp, versions in fixed.items()])


def _markdown_cves(cves):
    if not cves:
        return []
    lines = [_md("## CVEs across the fleet"), _md(""),
             _md("%d CVE(s) from the known-bad catalog affect audited nodes (possibly: only an unknown condition "
                 "keeps the node in the advisory's scope).", len(cves)), _md(""),
             _md("| CVE | CVSS | severity | components | nodes | fixed in | advisories |"),
             _md("| --- | --- | --- | --- | --- | --- | --- |")]
    for c in cves:
        nodes = _md("%d: %s", c["affected_nodes"], _bounded_names(c["node_names"])) if c["node_names"] else _md("cluster")
        if c["possibly_affected_nodes"]:
            nodes = _md("%s (possibly: %s)", nodes, _bounded_names(c["possibly_affected_nodes"]))
        lines.append(_md("| %s | %s | %s | %s | %s | %s | %s |",
                         c["id"], _md("%.1f", c["max_cvss"]) if c["max_cvss"] is not None else _md("?"), c["severity"],
                         _md_join(", ", c["components"]), nodes, _fixed_text(c["fixed"]) or _md("-"),
                         _md_join(", ", c["advisories"]) or _md("-")))
    lines.append(_md(""))
    return lines


# ---------------------------------------------------------------------------------------------
# Prometheus textfile (node_exporter textfile collector format)


def _prom_label(value):
    """A label value per the exposition format: backslash, double quote and line feed escaped.

    Other characters are legal there; the report's strings are valid Unicode (``json_safe``)."""
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _prom_labels(**labels):
    return "{" + ",".join('%s="%s"' % (k, _prom_label(v)) for k, v in labels.items()) + "}"


def _epoch(iso):
    dt = datetime.datetime.strptime(iso, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
    return int(dt.timestamp())


def render_prometheus(report):
    report = json_safe(report, max_depth=RENDER_MAX_DEPTH)
    s = report["summary"]
    out = []

    def metric(name, mtype, help_text, samples):
        out.append("# HELP %s %s" % (name, help_text))
        out.append("# TYPE %s %s" % (name, mtype))
        for labels, value in samples:
            out.append("%s%s %s" % (name, _prom_labels(**labels) if labels else "", value))

    findings = []
    for node in report["nodes"]:
        for f in node["findings"]:
            findings.append(({"node": node["name"], "id": f["id"], "severity": f["severity"]}, 1))
    for f in report["cluster"]["findings"]:
        findings.append(({"node": "", "id": f["id"], "severity": f["severity"]}, 1))
    # Duplicate label sets are invalid exposition: one sample per (node, id, severity).
    dedup = {}
    for labels, value in findings:
        dedup[tuple(sorted(labels.items()))] = (labels, value)
    metric("kubegpu_finding", "gauge",
           "Finding present on a node at the last kubegpu.fleet audit (1 = present).",
           [dedup[k] for k in sorted(dedup)])
    metric("kubegpu_audit_findings", "gauge", "Findings at the last audit by severity.",
           [({"severity": sev}, s["by_severity"][sev]) for sev in SEVERITIES])
    metric("kubegpu_audit_nodes", "gauge", "Nodes at the last audit by outcome.",
           [({"status": "audited"}, s["nodes_audited"]), ({"status": "unreachable"}, s["nodes_unreachable"]),
            ({"status": "failed"}, s["nodes_failed"]), ({"status": "clean"}, s["nodes_clean"])])
    metric("kubegpu_audit_node_up", "gauge", "1 when the node was audited, 0 when unreachable or failed.",
           [({"node": n["name"]}, 1 if n["status"] == "audited" else 0) for n in report["nodes"]])
    needs_hands = set(e["node"] for e in s.get("hands_on") or [])
    metric("kubegpu_audit_node_hands_on", "gauge",
           "1 when the node has GPU hardware work for a person (RMA, GPU off the bus, Xid to investigate).",
           [({"node": n["name"]}, 1 if n["name"] in needs_hands else 0) for n in report["nodes"]])
    metric("kubegpu_audit_timestamp_seconds", "gauge", "Unix time the last kubegpu.fleet audit finished.",
           [({}, _epoch(report["generated_at"]))])
    cat = report.get("catalog")
    if isinstance(cat, dict):
        newest = cat.get("newest_advisory")
        if isinstance(newest, dict) and _advisory_date(newest.get("date")) is not None:
            metric("kubegpu_audit_catalog_newest_bulletin_timestamp_seconds", "gauge",
                   "Unix time of the revision date of the newest bulletin in the known-bad catalog the audit used.",
                   [({}, _epoch(newest["date"] + "T00:00:00Z"))])
        metric("kubegpu_audit_catalog_stale", "gauge",
               "1 when the known-bad catalog is older than its configured age, names no dated bulletin or could not "
               "be read.", [({}, 1 if cat.get("stale") else 0)])
    cves = report.get("cves") or []
    if cves:
        per_component = []
        for c in cves:
            for comp in c["components"]:
                count = len(set(n["node"] for n in c["nodes"] if n["component"] == comp and n["node"] is not None))
                per_component.append(({"cve": c["id"], "component": comp, "severity": c["severity"]}, count))
        metric("kubegpu_cve_affected_nodes", "gauge",
               "Nodes whose NVIDIA component is affected (or possibly affected) by the CVE at the last audit.",
               per_component)
        metric("kubegpu_cve_max_cvss", "gauge", "Highest CVSS base score of the advisories naming the CVE.",
               [({"cve": c["id"], "severity": c["severity"]}, c["max_cvss"]) for c in cves if c["max_cvss"] is not None])
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------------
# HTML (self-contained: inline CSS, no scripts, no external resources)

_CSS = Markup("""
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px;color:#1d2430;background:#fff}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px}h3{font-size:15px;margin:18px 0 6px}
.meta{color:#5b6575;font-size:13px;margin-bottom:16px}
.cards{display:flex;gap:12px;flex-wrap:wrap;margin:12px 0}
.card{border:1px solid #d8dde6;border-radius:8px;padding:10px 14px;min-width:110px}
.card .n{font-size:26px;font-weight:600}.card .l{font-size:12px;color:#5b6575;text-transform:uppercase}
.card.critical{border-color:#c62828;background:#fdecea}.card.warning{border-color:#ef8f00;background:#fff5e0}
.card.info{border-color:#1565c0;background:#e8f1fc}.card.clean{border-color:#2e7d32;background:#e9f5ea}
table{border-collapse:collapse;font-size:13px}th,td{border:1px solid #d8dde6;padding:4px 8px;text-align:left}
th{background:#f3f5f8}td.cell{text-align:center;font-weight:600;min-width:28px}
td.critical,span.critical{background:#c62828;color:#fff}td.warning,span.warning{background:#ef8f00;color:#111}
td.info,span.info{background:#1565c0;color:#fff}td.none{background:#e9f5ea;color:#2e7d32}
td.unreachable,td.failed{background:#6b7280;color:#fff}
span.sev{border-radius:4px;padding:1px 6px;font-size:12px;font-weight:600}
.finding{border:1px solid #d8dde6;border-radius:8px;padding:8px 12px;margin:8px 0}
pre{background:#f6f8fa;padding:8px;border-radius:6px;overflow:auto;font-size:12px;margin:6px 0}
.matrix th.rot{writing-mode:vertical-rl;transform:rotate(180deg);white-space:nowrap}
""")
# Class names come from these fixed sets only; anything else renders as the neutral class.
_SEV_CLASS = {"critical": Markup("critical"), "warning": Markup("warning"), "info": Markup("info")}
_STATUS_CLASS = {"unreachable": Markup("unreachable"), "failed": Markup("failed")}


def _html_link(url):
    """A link for a URL that passes ``is_safe_url`` (https, a host, no credentials); else the URL as text."""
    if is_safe_url(url):
        return Markup('<a href="%s" rel="noopener noreferrer">%s</a>') % (url, url)
    return Markup("%s") % url


def _html_anchor(name):
    """A link to a node's details (``#node-NAME``) with the name as its text."""
    return Markup('<a href="#node-%s">%s</a>') % (name, name)


def render_html(report):
    report = json_safe(report, visible=True, max_depth=RENDER_MAX_DEPTH)
    s = report["summary"]
    ids = list(s["by_id"].keys())
    parts = [Markup("<!DOCTYPE html>"), Markup('<html lang="en"><head><meta charset="utf-8">'),
             Markup("<title>kubegpu.fleet audit %s</title>") % report["generated_at"],
             Markup("<style>%s</style></head><body>") % _CSS,
             Markup("<h1>kubegpu.fleet GPU fleet audit</h1>"),
             Markup('<div class="meta">Generated %s &middot; report schema %s v%s &middot; collection %s &middot; '
                    "fail on: %s</div>") % (report["generated_at"], report["schema"], report["schema_version"],
                                            report["collection_version"] or "?", s["fail_on"])]
    parts.append(Markup('<section id="summary"><h2>Fleet summary</h2><div class="cards">'))
    for label, value, cls in (("nodes", s["nodes_total"], ""), ("audited", s["nodes_audited"], ""),
                              ("clean", s["nodes_clean"], "clean"),
                              ("unreachable", s["nodes_unreachable"], ""), ("failed", s["nodes_failed"], ""),
                              ("critical", s["by_severity"]["critical"], "critical"),
                              ("warning", s["by_severity"]["warning"], "warning"),
                              ("info", s["by_severity"]["info"], "info")):
        parts.append(Markup('<div class="card %s" data-metric="%s"><div class="n">%s</div><div class="l">%s</div></div>')
                     % (cls, label, value, label))
    parts.append(Markup("</div>"))
    parts += _html_catalog(report.get("catalog"))
    if s["unreachable"]:
        parts.append(Markup('<p id="unreachable"><strong>Unreachable:</strong> %s</p>')
                     % Markup(", ").join(s["unreachable"]))
    if s["failed"]:
        parts.append(Markup('<p id="failed"><strong>Audit failed on:</strong> %s</p>') % Markup(", ").join(s["failed"]))
    parts.append(Markup("</section>"))
    if s.get("hands_on"):
        parts.append(Markup('<section id="hands-on"><h2>Hands-on work</h2><p>Left cordoned for a person:</p><ul>'))
        for entry in s["hands_on"]:
            parts.append(Markup('<li data-node="%s"><strong>%s</strong> (%s): %s</li>')
                         % (entry["node"], _html_anchor(entry["node"]),
                            Markup(", ").join(Markup("<code>%s</code>") % i for i in entry["findings"]),
                            Markup("; ").join(entry["work"])))
        parts.append(Markup("</ul></section>"))

    parts += _html_cves(report.get("cves") or [])
    parts.append(Markup('<section id="matrix"><h2>Node &times; finding</h2>'))
    if ids:
        parts.append(Markup('<table class="matrix"><thead><tr><th>node</th>'))
        for fid in ids:
            parts.append(Markup('<th class="rot" title="%s">%s</th>') % (s["by_id"][fid]["title"], fid))
        parts.append(Markup("</tr></thead><tbody>"))
        for node in report["nodes"]:
            have = dict((f["id"], f["severity"]) for f in node["findings"])
            parts.append(Markup('<tr data-node="%s"><th>%s</th>') % (node["name"], node["name"]))
            for fid in ids:
                if node["status"] != "audited":
                    parts.append(Markup('<td class="cell %s" title="%s">?</td>')
                                 % (_STATUS_CLASS.get(node["status"], ""), node["status"]))
                elif fid in have:
                    parts.append(Markup('<td class="cell %s" data-finding="%s" title="%s">%s</td>')
                                 % (_SEV_CLASS.get(have[fid], ""), fid, have[fid], have[fid][:1].upper()))
                else:
                    parts.append(Markup('<td class="cell none"></td>'))
            parts.append(Markup("</tr>"))
        parts.append(Markup("</tbody></table>"))
    else:
        parts.append(Markup('<p id="no-findings">No findings on any audited node.</p>'))
    parts.append(Markup("</section>"))

    parts.append(Markup('<section id="details"><h2>Details</h2>'))
    for node in report["nodes"]:
        parts.append(Markup('<h3 id="node-%s">%s <small>(%s)</small></h3>') % (node["name"], node["name"], node["status"]))
        if node.get("error"):
            parts.append(Markup("<pre>%s</pre>") % node["error"])
        if node["status"] == "audited" and not node["findings"]:
            parts.append(Markup("<p>No findings.</p>"))
        for f in node["findings"]:
            parts.append(_html_finding(f))
    if report["cluster"]["findings"]:
        parts.append(Markup('<h3 id="cluster">Cluster</h3>'))
        for f in report["cluster"]["findings"]:
            parts.append(_html_finding(f))
    parts.append(Markup("</section></body></html>"))
    return str(Markup("\n").join(parts) + Markup("\n"))


def _html_catalog(cat):
    """The catalog's date and, when it is stale, the warning (nothing without a catalog section)."""
    if not isinstance(cat, dict):
        return []
    parts = []
    newest = cat.get("newest_advisory")
    if isinstance(newest, dict):
        parts.append(Markup('<p id="catalog">Known-bad catalog: %s entries from %s bulletins; newest bulletin %s (%s), '
                            "revision %s of %s, %s days old (warning after %s).</p>")
                     % (cat["entries"], cat["advisories"], newest["id"], newest.get("title") or "",
                        newest.get("revision") or "?", newest["date"], cat["age_days"], cat["max_age_days"]))
    if cat.get("warning"):
        parts.append(Markup('<p id="catalog-warning"><span class="sev warning">warning</span> %s.</p>') % cat["warning"])
    return parts


def _html_names(names):
    shown = Markup(", ").join(_html_anchor(n) for n in names[:CVE_NODE_LIST_MAX])
    if len(names) > CVE_NODE_LIST_MAX:
        shown += Markup(" and %d more") % (len(names) - CVE_NODE_LIST_MAX)
    return shown


def _html_cves(cves):
    if not cves:
        return []
    parts = [Markup('<section id="cves"><h2>CVEs across the fleet</h2>'),
             Markup("<p>%d CVE(s) from the known-bad catalog affect audited nodes. <em>Possibly</em>: only an unknown "
                    "condition keeps the node in the advisory's scope.</p>") % len(cves),
             Markup('<table class="cves"><thead><tr><th>CVE</th><th>CVSS</th><th>severity</th><th>components</th>'
                    "<th>nodes</th><th>fixed in</th><th>advisories</th></tr></thead><tbody>")]
    for c in cves:
        sev_class = {"critical": "critical", "high": "critical", "medium": "warning"}.get(c["severity"], "info")
        nodes = Markup("%d: %s") % (c["affected_nodes"], _html_names(c["node_names"])) if c["node_names"] \
            else Markup("cluster")
        if c["possibly_affected_nodes"]:
            nodes += Markup(" <small>(possibly: %s)</small>") % _html_names(c["possibly_affected_nodes"])
        links = Markup("").join(Markup("<li>%s</li>") % _html_link(u) for u in c["sources"])
        fixed = Markup("; ").join(Markup("%s %s") % (comp, Markup(", ").join(versions))
                                  for comp, versions in c["fixed"].items())
        parts.append(
            Markup('<tr data-cve="%s" data-affected-nodes="%d"><td><code>%s</code>%s</td><td>%s</td>'
                   '<td><span class="sev %s">%s</span></td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>')
            % (c["id"], c["affected_nodes"], c["id"], Markup("<ul>%s</ul>") % links if links else "",
               Markup("%.1f") % c["max_cvss"] if c["max_cvss"] is not None else "?", _SEV_CLASS[sev_class], c["severity"],
               Markup(", ").join(c["components"]), nodes, fixed or "-", Markup(", ").join(c["advisories"]) or "-"))
    parts.append(Markup("</tbody></table></section>"))
    return parts


def _html_finding(f):
    rem = f["remediation"] or {}
    out = [Markup('<div class="finding" data-finding="%s" data-severity="%s">') % (f["id"], f["severity"]),
           Markup('<div><span class="sev %s">%s</span> <code>%s</code> %s</div>')
           % (_SEV_CLASS.get(f["severity"], ""), f["severity"], f["id"], f["title"])]
    if f["evidence"]:
        out.append(Markup("<div><strong>Evidence</strong><pre>%s</pre></div>")
                   % json.dumps(f["evidence"], indent=2, sort_keys=True, allow_nan=False))
    if rem:
        out.append(Markup("<div><strong>Remediation</strong>: %s") % rem.get("summary", ""))
        if rem.get("role"):
            out.append(Markup(" &mdash; role <code>%s</code>") % rem["role"])
        if rem.get("vars"):
            out.append(Markup("<pre>%s</pre>") % json.dumps(rem["vars"], indent=2, sort_keys=True, allow_nan=False))
        out.append(Markup("</div>"))
    if f["references"]:
        out.append(Markup("<div><strong>References</strong><ul>%s</ul></div>")
                   % Markup("").join(Markup("<li>%s</li>") % _html_link(r) for r in f["references"]))
    out.append(Markup("</div>"))
    return Markup("").join(out)
