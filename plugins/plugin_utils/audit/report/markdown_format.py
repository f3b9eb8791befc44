# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The audit report as Markdown (CommonMark + GFM tables).

Everything in a report may come from a node, so ``md`` is the one escaper: lines are ``_Md``
values made only by ``md``, ``_md`` (a constant template whose arguments go through ``md``) and
``_md_join``; the document escapes any line that is not ``_Md``.
``tests/unit/plugins/plugin_utils/audit/report/test_escaping.py`` fails on any other way of
putting a value into the Markdown.
"""
from __future__ import annotations

import re

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report.build import (
    CVE_NODE_LIST_MAX,
    INVISIBLE,
    RENDER_MAX_DEPTH,
    clean_text,
    json_safe,
)


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
    text = INVISIBLE.sub("\ufffd", _MD_BREAK.sub(" ", clean_text(text)))
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
