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
    coverage_limit_text,
    json_safe,
)
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import view


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
        _md("%d nodes: %d audited, %d unreachable, %d failed, %d clean, %d not a GPU node, %d not inspected. "
            "Findings: %d critical, %d warning, %d info (a finding of the cluster counted once).",
            s["nodes_total"], s["nodes_audited"], s["nodes_unreachable"], s["nodes_failed"], s["nodes_clean"],
            s.get("nodes_not_gpu", 0), s.get("nodes_not_inspected", 0), sev["critical"], sev["warning"], sev["info"]),
        _md(""),
    ]
    lines += _markdown_catalog(report.get("catalog"))
    limit = s.get("coverage_limit")
    if isinstance(limit, dict):
        if limit["exceeded"]:
            lines.append(_md("**Coverage limit exceeded:** %s.", coverage_limit_text(limit)))
        else:
            lines.append(_md("Coverage limit: %s.", coverage_limit_text(limit)))
        lines.append(_md(""))
    for label, key in (("Unreachable", "unreachable"), ("Audit failed on", "failed"),
                       ("Not a GPU node", "not_gpu_node"), ("Not inspected", "not_inspected"),
                       ("Not audited in this run", "not_audited")):
        if s.get(key):
            lines += [_md("**%s:** %s", label, _bounded_names(s[key], view.NAMES_MAX)), _md("")]
    if s.get("hands_on"):
        lines += [_md("**Hands-on work (nodes left cordoned for a person):**"), _md("")]
        shown, more = view.bounded(s["hands_on"], view.NODES_MAX)
        for entry in shown:
            lines.append(_md("- **%s** (%s): %s", entry["node"],
                             _md_join(", ", [md(i, code=True) for i in entry["findings"]]),
                             _md_join("; ", [view.short(w) for w in entry["work"]])))
        if more:
            lines.append(_md("- %d more nodes: see the JSON report", more))
        lines.append(_md(""))
    if s["by_id"]:
        lines += [_md("| severity | finding | nodes |"), _md("| --- | --- | --- |")]
        shown, more = view.bounded(s["by_id"].items(), view.ROWS_MAX)
        for fid, slot in shown:
            lines.append(_md("| %s | %s %s | %s |", slot["severity"], md(fid, code=True), view.short(slot["title"]),
                             _where(slot["nodes"], slot.get("scope", "node"))))
        lines.append(_md(""))
        if more:
            lines += [_md("%d more findings: see the JSON report.", more), _md("")]
    lines += _markdown_changes(report.get("changes"))
    lines += _markdown_tables(report)
    lines += _markdown_cluster(report)
    lines += _markdown_nodes(report)
    lines += _markdown_cves(report.get("cves") or [])
    return _md_document(lines)


def _markdown_changes(changes):
    """What changed since each node's previous result (a report built from published results)."""
    if not isinstance(changes, dict):
        return []
    c = changes["counts"]
    lines = [_md("## Since the previous run"), _md(""),
             _md("Run %s: %d new, %d resolved, %d persisting findings; %d nodes without a previous result.",
                 changes["run"], c["new"], c["resolved"], c["persisting"], len(changes["no_previous"])), _md("")]
    for title, key in (("New", "new"), ("Resolved", "resolved"), ("Persisting, longest known first", "persisting")):
        entries = changes[key]
        if key == "persisting":
            entries = sorted(entries, key=lambda e: (e["first_seen"] or "", e["node"], e["id"]))
        if not entries:
            continue
        lines += [_md("**%s:**", title), _md("")]
        shown, more = view.bounded(entries, view.ROWS_MAX)
        for e in shown:
            lines.append(_md("- %s %s, first seen %s", e["node"], md(e["id"], code=True), e.get("first_seen") or "unknown"))
        if more:
            lines.append(_md("- %d more: see the JSON report", more))
        lines.append(_md(""))
    if changes["rejected"]:
        lines += [_md("**Stored results not trusted:**"), _md("")]
        shown, more = view.bounded(changes["rejected"], view.ROWS_MAX)
        lines += [_md("- %s: %s", e["entry"], view.short(e["reason"])) for e in shown]
        if more:
            lines.append(_md("- %d more: see the JSON report", more))
        lines.append(_md(""))
    return lines


def _where(names, scope):
    """A finding's nodes: ``N: a, b and K more``, ``cluster, N: ...`` for one of the cluster, ``cluster``."""
    if not names:
        return _md("cluster")
    return _md("%s%d: %s", _md("cluster, ") if scope == "cluster" else _md(""), len(names),
               _bounded_names(names, view.NAMES_MAX))


def _markdown_tables(report):
    """The coverage, GPU model and node group tables of the summary."""
    s = report["summary"]
    lines = []
    counts = s.get("coverage") or {}
    if sum((counts.get("status") or {}).values()):
        lines += [_md("## Coverage"), _md(""), _md("What the audit could see on the audited nodes (nodes per answer)."),
                  _md(""), _md("| check | yes | no | unknown | off |"), _md("| --- | --- | --- | --- | --- |")]
        for key, label in view.COVERAGE_CHECKS:
            c = counts.get(key) or {}
            lines.append(_md("| %s | %d | %d | %d | %d |", label, c.get("yes", 0), c.get("no", 0), c.get("unknown", 0),
                             c.get("off", 0)))
        lines.append(_md(""))
    group = s.get("by_group") or {}
    models = s.get("by_gpu_model") or []
    for title, rows, key in ((_md("GPU models"), models if any(m["model"] is not None for m in models) else [], "model"),
                             (_md("Nodes by %s", group.get("label")), group.get("groups") or [], "value")):
        if not rows:
            continue
        lines += [_md("## %s", title), _md(""), _md("| %s | nodes | audited | clean | with findings |", key),
                  _md("| --- | --- | --- | --- | --- |")]
        shown, more = view.bounded(rows, view.ROWS_MAX)
        for row in shown:
            lines.append(_md("| %s | %d | %d | %d | %d |", view.short(row[key]) if row[key] is not None else _md("(none)"),
                             row["nodes"], row.get("audited", row["nodes"]), row["clean"], row["with_findings"]))
        lines.append(_md(""))
        if more:
            lines += [_md("%d more rows: see the JSON report.", more), _md("")]
    return lines


def _markdown_cluster(report):
    """One line per finding of the cluster, with the nodes it affects."""
    findings = report["cluster"]["findings"]
    if not findings:
        return []
    lines = [_md("## Cluster"), _md("")]
    shown, more = view.bounded(findings, view.ROWS_MAX)
    for f in shown:
        fix = f["remediation"].get("summary") or f["remediation"].get("role") or ""
        lines.append(_md("- %s %s: %s — %s%s", f["severity"].upper(), md(f["id"], code=True), view.short(f["title"]),
                         _where(f.get("nodes") or [], "cluster") if f.get("nodes") else _md("the cluster"),
                         _md(" — fix: %s", view.short(fix)) if fix else _md("")))
    if more:
        lines.append(_md("- %d more: see the JSON report", more))
    return lines + [_md("")]


def _markdown_nodes(report):
    """The nodes with something to show, worst first and bounded, then the clean ones' names."""
    nodes = view.worst_first(report)
    clean = view.clean_names(report)
    if not nodes and not clean:
        return [_md("No nodes."), _md("")]
    lines = [_md("## Per node"), _md("")]
    shown, more = view.bounded(nodes, view.NODES_MAX)
    for node, _worst in shown:
        cov = node.get("coverage") or {}
        notes = []
        if node["status"] != "audited":
            notes.append(node["status"])
        if cov.get("status") not in (None, "gpu_node"):
            notes.append(view.COVERAGE_STATUS[cov["status"]])
        if node.get("cluster_findings"):
            notes.append(_md("%d finding(s) of the cluster", len(node["cluster_findings"])))
        lines.append(_md("- **%s**%s", node["name"], _md(" (%s)", _md_join("; ", notes)) if notes else _md("")))
        if node.get("error"):
            lines.append(_md("  - error: %s", view.short(node["error"])))
        gaps = [(label, state, detail) for label, state, detail in view.coverage_line(cov) if state != "yes"]
        if gaps:
            lines.append(_md("  - coverage: %s", _md_join("; ", [_md("%s: %s (%s)", *g) for g in gaps])))
        fshown, fmore = view.bounded(node["findings"], view.FINDINGS_MAX)
        for f in fshown:
            fix = f["remediation"].get("summary") or f["remediation"].get("role") or ""
            lines.append(_md("  - %s %s: %s%s", f["severity"].upper(), md(f["id"], code=True), view.short(f["title"]),
                             _md(" — fix: %s", view.short(fix)) if fix else _md("")))
        if fmore:
            lines.append(_md("  - %d more findings: see the JSON report", fmore))
    if more:
        lines.append(_md("- %d more nodes with findings or not audited: see the JSON report", more))
    if clean:
        lines += [_md(""), _md("**Clean (%d):** %s", len(clean), _bounded_names(clean, view.NAMES_MAX))]
    return lines + [_md("")]


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
