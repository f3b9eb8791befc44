# -*- coding: utf-8 -*-
"""Independent checks of the audit report's four formats, shared by the unit corpus
(tests/unit/plugins/plugin_utils/audit/report/test_*_format.py) and the module corpus
(tests/module/test_bad_input_reports.py).

Each parses an output with a parser of its own (json, markdown-it-py, html.parser, promtool)
and knows nothing of the report's code: ``display``/``html_display`` say what a reader must see for a
value, written here from the rules (one line, invisible characters as U+FFFD), not from the
code under test.

Import as ``ansible_collections.kubegpu.fleet.tests.lib.report_checks`` (unit tests) or
``lib.report_checks`` (module tests).
"""
from __future__ import absolute_import, division, print_function

import html.parser
import json
import re
import shutil
import subprocess

PROMTOOL = shutil.which("promtool")
_INVISIBLE = ("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2064"
              "\u2066-\u2069\ufeff]")


def _no_surrogates(text):
    if re.search("[\ud800-\udfff]", text):
        text = text.encode("utf-8", "surrogatepass").decode("utf-8", "backslashreplace")
    return text


def display(text):
    """What a Markdown reader sees for ``text``: one line, invisible characters as U+FFFD."""
    text = re.sub("\r\n|[\r\n\t\x0b\x0c\x85\u2028\u2029]", " ", _no_surrogates(text))
    return re.sub(_INVISIBLE, "\ufffd", text)


def html_display(text):
    """What the HTML shows for ``text``: line breaks kept, invisible characters as U+FFFD."""
    return re.sub(_INVISIBLE, "\ufffd", _no_surrogates(text))


def refuse(constant):
    raise AssertionError("non-standard JSON constant %s" % constant)


def strict_json(text):
    """``json.loads`` that refuses NaN, Infinity and -Infinity."""
    return json.loads(text, parse_constant=refuse)


# ------------------------------------------------------------------------------ Markdown


def parse_markdown(text):
    from markdown_it import MarkdownIt  # test dependency (requirements-dev.txt)

    return MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"]).parse(text)


def inline_text(token):
    return "".join(c.content for c in token.children or [] if c.type in ("text", "text_special", "code_inline"))


def tables(tokens):
    """[[row cells as text]] per table."""
    found, rows, row = [], None, None
    for n, tok in enumerate(tokens):
        if tok.type == "table_open":
            rows = []
        elif tok.type == "tr_open":
            row = []
        elif tok.type in ("th_open", "td_open"):
            row.append(inline_text(tokens[n + 1]))
        elif tok.type == "tr_close":
            rows.append(row)
        elif tok.type == "table_close":
            found.append(rows)
    return found


# Block and inline kinds the Markdown template never makes.
MD_FORBIDDEN = {"html_block", "html_inline", "link_open", "image", "code_block", "fence", "hr",
                "blockquote_open", "ordered_list_open", "s_open", "lheading"}


def markdown_problems(text, report):
    """What in the Markdown is not what the template makes for ``report`` (empty: all good)."""
    out = []
    tokens = parse_markdown(text)
    kinds = set(t.type for t in tokens) | set(c.type for t in tokens for c in t.children or [])
    if kinds & MD_FORBIDDEN:
        out.append("forbidden elements %s" % sorted(kinds & MD_FORBIDDEN))
    headings = [inline_text(tokens[n + 1]) for n, t in enumerate(tokens) if t.type == "heading_open"]
    want = ["kubegpu.fleet audit — %s" % report["generated_at"]]
    want += ["Per node"] if report["summary"]["by_id"] else []
    want += ["CVEs across the fleet"] if report.get("cves") else []
    if headings != want:
        out.append("headings %r" % headings)
    s = report["summary"]
    found = tables(tokens)
    want_tables = ([1 + len(s["by_id"])] if s["by_id"] else []) + ([1 + len(report["cves"])] if report.get("cves") else [])
    if [len(t) for t in found] != want_tables:
        return out + ["tables of %s rows, expected %s" % ([len(t) for t in found], want_tables)]
    if s["by_id"]:
        by_id = found[0]
        if any(len(row) != 3 for row in by_id):
            out.append("a finding table row without 3 cells")
        for row, (fid, slot) in zip(by_id[1:], s["by_id"].items()):
            if row != [slot["severity"], display(fid) + " " + display(slot["title"]),
                       ", ".join(display(n) for n in slot["nodes"]) or "cluster"]:
                out.append("finding row %r" % ([c[:80] for c in row],))
    if report.get("cves"):
        cves = found[-1]
        if any(len(row) != 7 for row in cves):
            out.append("a CVE table row without 7 cells")
        for row, cve in zip(cves[1:], report["cves"]):
            score = "%.1f" % cve["max_cvss"] if cve["max_cvss"] is not None else "?"
            if row[:4] != [cve["id"], score, cve["severity"], display(", ".join(cve["components"]))] \
                    or row[6] != (display(", ".join(cve["advisories"])) or "-"):
                out.append("CVE row %r" % ([c[:80] for c in row],))
    items = sum(1 for t in tokens if t.type == "list_item_open")
    with_findings = [n for n in report["nodes"] if n["findings"]]
    want_items = (len(s.get("hands_on") or []) + len(with_findings) + sum(len(n["findings"]) for n in with_findings)
                  + (len(report["cluster"]["findings"]) if s["by_id"] else 0))
    if items != want_items:
        out.append("%d list items, expected %d" % (items, want_items))
    paragraphs = [inline_text(tokens[n + 1]) for n, t in enumerate(tokens) if t.type == "paragraph_open"]
    for label, names in (("Unreachable: ", s["unreachable"]), ("Audit failed on: ", s["failed"])):
        if names and label + ", ".join(display(n) for n in names) not in paragraphs:
            out.append("no line %r" % label)
    for node in with_findings:
        if display(node["name"]) not in paragraphs:
            out.append("no per-node line for %s" % ascii(node["name"][:80]))
    if "\r" in text or "\x00" in text:
        out.append("CR or NUL in the text")
    return out


# ------------------------------------------------------------------------------ HTML

ALLOWED = {
    "html": {"lang"}, "head": set(), "meta": {"charset"}, "title": set(), "style": set(), "body": set(),
    "h1": set(), "h2": set(), "h3": {"id"}, "section": {"id"}, "p": {"id"}, "strong": set(), "em": set(),
    "small": set(), "code": set(), "pre": set(), "ul": set(), "li": {"data-node"}, "a": {"href", "rel"},
    "div": {"class", "data-metric", "data-finding", "data-severity"}, "span": {"class"},
    "table": {"class"}, "thead": set(), "tbody": set(), "tr": {"data-node", "data-cve", "data-affected-nodes"},
    "th": {"class", "title"}, "td": {"class", "data-finding", "title"},
}
CLASSES = {"meta", "cards", "card", "clean", "critical", "warning", "info", "n", "l", "matrix", "rot", "cell",
           "none", "unreachable", "failed", "sev", "finding", "cves", ""}


class Page(html.parser.HTMLParser):
    """Elements with their attributes, the title, the node headings, and anything unexpected."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags, self.problems, self.stack, self.h3 = [], [], [], []
        self.title = ""

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag != "meta":
            self.stack.append(tag)
        if tag == "h3":
            self.h3.append("")

    def handle_startendtag(self, tag, attrs):
        self.problems.append("self-closing %s" % tag)

    def handle_endtag(self, tag):
        if tag == "meta":
            return
        if not self.stack or self.stack[-1] != tag:
            self.problems.append("unbalanced </%s> (open: %s)" % (tag, self.stack[-3:]))
        else:
            self.stack.pop()

    def handle_data(self, data):
        if self.stack and self.stack[-1] == "title":
            self.title += data
        if "h3" in self.stack and self.h3:
            self.h3[-1] += data

    def handle_comment(self, data):
        self.problems.append("comment %r" % data[:40])

    def handle_pi(self, data):
        self.problems.append("processing instruction")

    def unknown_decl(self, data):
        self.problems.append("declaration %r" % data[:40])


def html_problems(page, report, linkable):
    """What in the HTML is not what the template makes (empty: all good); ``linkable``: the
    only external URLs that may be links. Returns ``(problems, external hrefs)``."""
    parser = Page()
    parser.feed(page)
    parser.close()
    out = list(parser.problems)
    if parser.stack:
        out.append("unclosed %s" % parser.stack[-3:])
    names = set(html_display(n["name"]) for n in report["nodes"])
    external = []
    for tag, attrs in parser.tags:
        if tag not in ALLOWED or not set(attrs) <= ALLOWED[tag]:
            out.append("element %s with %s" % (tag, sorted(attrs)))
            continue
        if "class" in attrs and not set(attrs["class"].split(" ")) <= CLASSES:
            out.append("class %r" % attrs["class"][:80])
        if tag == "a":
            href = attrs.get("href") or ""
            if href.startswith("#node-") and href[6:] in names:
                continue
            if href not in linkable:
                out.append("link to %r" % href[:80])
            external.append(href)
        if tag == "meta" and attrs != {"charset": "utf-8"}:
            out.append("meta %r" % attrs)
    if parser.title != "kubegpu.fleet audit %s" % report["generated_at"]:
        out.append("title %r" % parser.title[:80])
    for node in report["nodes"]:
        if "%s (%s)" % (html_display(node["name"]), node["status"]) not in parser.h3:
            out.append("no heading for %s" % ascii(node["name"][:80]))
    if "\x00" in page or "\u202e" in page:
        out.append("NUL or a bidi override in the page")
    return out, external


# ------------------------------------------------------------------------------ Prometheus


def promtool_problems(text):
    """``promtool check metrics`` output when it refuses ``text``; None without promtool."""
    if PROMTOOL is None:
        return None
    res = subprocess.run([PROMTOOL, "check", "metrics"], input=text.encode("utf-8"), capture_output=True,
                         check=False, timeout=120)
    return "" if res.returncode == 0 else (res.stdout + res.stderr).decode("utf-8", "replace")[:3000]
