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

import base64
import hashlib
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


def shown(text, limit=None):
    """What the human formats show of a long text: cut to the report's text bound, saying how much is left out."""
    from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import view
    limit = view.TEXT_MAX if limit is None else limit
    text = "" if text is None else str(text)
    return text if len(text) <= limit else "%s [%d more characters: see the JSON report]" % (text[:limit], len(text) - limit)


def bounded_names(names, limit):
    """``a, b and N more``: the first ``limit`` names of a list as the human formats show it."""
    head = ", ".join(display(n) for n in names[:limit])
    return head + (" and %d more" % (len(names) - limit) if len(names) > limit else "")


def is_clean(node):
    """A node the human formats only count (audited, no finding of its own or of the cluster, a GPU node)."""
    cov = node.get("coverage") or {}
    return (node["status"] == "audited" and not node["findings"] and not node.get("cluster_findings")
            and cov.get("status", "gpu_node") == "gpu_node")


RANK = {"critical": 3, "warning": 2, "info": 1}


def listed_nodes(report):
    """The nodes the human formats show in detail, in their order: the most severe finding first (the
    node's own or the cluster's that affect it), then those not audited, then the most findings, then by name."""
    sev = dict(((f["id"], f.get("digest")), f["severity"]) for f in report["cluster"]["findings"])

    def key(node):
        sevs = [f["severity"] for f in node["findings"]] + [sev.get((r["id"], r["digest"]))
                                                            for r in node.get("cluster_findings") or []]
        worst = max([RANK.get(x, 0) for x in sevs] or [0])
        return (-worst, node["status"] == "audited",
                -len(node["findings"]) - len(node.get("cluster_findings") or []), node["name"])
    return sorted([n for n in report["nodes"] if not is_clean(n)], key=key)


def markdown_problems(text, report):
    """What in the Markdown is not what the template makes for ``report`` (empty: all good)."""
    from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import view  # the bounds only
    out = []
    tokens = parse_markdown(text)
    kinds = set(t.type for t in tokens) | set(c.type for t in tokens for c in t.children or [])
    if kinds & MD_FORBIDDEN:
        out.append("forbidden elements %s" % sorted(kinds & MD_FORBIDDEN))
    s = report["summary"]
    cluster = report["cluster"]["findings"]
    models = list(s.get("by_gpu_model") or [])
    models = models if any(m["model"] is not None for m in models) else []
    groups = (s.get("by_group") or {}).get("groups") or []
    coverage = sum(((s.get("coverage") or {}).get("status") or {}).values())
    listed = listed_nodes(report)
    headings = [inline_text(tokens[n + 1]) for n, t in enumerate(tokens) if t.type == "heading_open"]
    want = ["kubegpu.fleet audit — %s" % report["generated_at"]]
    want += ["Coverage"] if coverage else []
    want += ["GPU models"] if models else []
    want += ["Nodes by %s" % display(s["by_group"]["label"])] if groups else []
    want += ["Cluster"] if cluster else []
    want += ["Per node"] if report["nodes"] else []
    want += ["CVEs across the fleet"] if report.get("cves") else []
    if headings != want:
        out.append("headings %r" % headings)
    found = tables(tokens)
    by_id_rows = min(len(s["by_id"]), view.ROWS_MAX)
    want_tables = (([1 + by_id_rows] if s["by_id"] else []) + ([7] if coverage else [])
                   + ([1 + min(len(models), view.ROWS_MAX)] if models else [])
                   + ([1 + min(len(groups), view.ROWS_MAX)] if groups else [])
                   + ([1 + len(report["cves"])] if report.get("cves") else []))
    if [len(t) for t in found] != want_tables:
        return out + ["tables of %s rows, expected %s" % ([len(t) for t in found], want_tables)]
    if s["by_id"]:
        by_id = found[0]
        if any(len(row) != 3 for row in by_id):
            out.append("a finding table row without 3 cells")
        for row, (fid, slot) in zip(by_id[1:], s["by_id"].items()):
            nodes = slot["nodes"]
            where = "cluster" if not nodes else "%s%d: %s" % (
                "cluster, " if slot.get("scope") == "cluster" else "", len(nodes), bounded_names(nodes, view.NAMES_MAX))
            if row != [slot["severity"], display(fid) + " " + display(shown(slot["title"])), where]:
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
    hands = s.get("hands_on") or []
    want_items = min(len(hands), view.NODES_MAX) + (len(hands) > view.NODES_MAX)
    want_items += min(len(cluster), view.ROWS_MAX) + (len(cluster) > view.ROWS_MAX)
    for node in listed[:view.NODES_MAX]:
        gaps = [c for c in ((node.get("coverage") or {}).get("checks") or {}).values() if c["state"] != "yes"]
        want_items += (1 + bool(node.get("error")) + bool(gaps) + min(len(node["findings"]), view.FINDINGS_MAX)
                       + (len(node["findings"]) > view.FINDINGS_MAX))
    want_items += len(listed) > view.NODES_MAX
    if items != want_items:
        out.append("%d list items, expected %d" % (items, want_items))
    paragraphs = [inline_text(tokens[n + 1]) for n, t in enumerate(tokens) if t.type == "paragraph_open"]
    for label, key in (("Unreachable: ", "unreachable"), ("Audit failed on: ", "failed"),
                       ("Not audited in this run: ", "not_audited"),
                       ("Not a GPU node: ", "not_gpu_node"), ("Not inspected: ", "not_inspected")):
        names = s.get(key) or []
        if names and label + bounded_names(names, view.NAMES_MAX) not in paragraphs:
            out.append("no line %r" % label)
    for node in listed[:view.NODES_MAX]:
        if not any(p == display(node["name"]) or p.startswith(display(node["name"]) + " (") for p in paragraphs):
            out.append("no per-node line for %s" % ascii(node["name"][:80]))
    if "\r" in text or "\x00" in text:
        out.append("CR or NUL in the text")
    return out


# ------------------------------------------------------------------------------ HTML

ALLOWED = {
    "html": {"lang"}, "head": set(), "meta": {"charset", "http-equiv", "content"}, "title": set(), "style": set(),
    "body": set(), "h1": set(), "h2": set(), "h3": {"id"}, "section": {"id"}, "p": {"id", "class"}, "strong": set(),
    "em": set(), "small": set(), "code": set(), "pre": set(), "ul": set(), "li": {"data-node", "class"},
    "a": {"href", "rel"}, "div": {"class", "id", "data-metric", "data-finding", "data-severity", "data-node",
                                  "data-affected-nodes"},
    "span": {"class"}, "table": {"class"}, "thead": set(), "tbody": set(),
    "tr": {"class", "data-node", "data-cve", "data-affected-nodes", "data-finding"},
    "th": {"class", "title"}, "td": {"class", "data-finding", "title"},
    "details": {"class", "open", "data-open"}, "summary": set(), "script": set(),
    "input": {"class", "id", "type", "hidden", "placeholder", "aria-label"},
}
CLASSES = {"meta", "cards", "card", "clean", "critical", "warning", "info", "n", "l", "matrix", "rot", "cell",
           "none", "unreachable", "failed", "sev", "finding", "cves", "", "unseen", "fi", "fd", "more", "node",
           "by-id", "coverage", "gpu-models", "groups", "filter"}
# The page's Content-Security-Policy: nothing but its own style sheet and script, by hash.
CSP = re.compile(r"^default-src 'none'; style-src 'sha256-([A-Za-z0-9+/]{43}=)'; script-src 'sha256-([A-Za-z0-9+/]{43}=)'; "
                 r"base-uri 'none'; form-action 'none'$")


class Page(html.parser.HTMLParser):
    """Elements with their attributes, the title, the node headings, and anything unexpected."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags, self.problems, self.stack, self.h3 = [], [], [], []
        self.title = ""
        self.style, self.script = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag not in ("meta", "input"):
            self.stack.append(tag)
        if tag == "h3":
            self.h3.append("")

    def handle_startendtag(self, tag, attrs):
        self.problems.append("self-closing %s" % tag)

    def handle_endtag(self, tag):
        if tag in ("meta", "input"):
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
        if self.stack and self.stack[-1] in ("style", "script"):
            getattr(self, self.stack[-1]).append(data)

    def handle_comment(self, data):
        self.problems.append("comment %r" % data[:40])

    def handle_pi(self, data):
        self.problems.append("processing instruction")

    def unknown_decl(self, data):
        self.problems.append("declaration %r" % data[:40])


def _sha256(text):
    return base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")


def html_problems(page, report, linkable):
    """What in the HTML is not what the template makes (empty: all good); ``linkable``: the
    only external URLs that may be links. Returns ``(problems, external hrefs)``."""
    parser = Page()
    parser.feed(page)
    parser.close()
    out = list(parser.problems)
    if parser.stack:
        out.append("unclosed %s" % parser.stack[-3:])
    ids = set(attrs.get("id") for _tag, attrs in parser.tags if attrs.get("id"))
    external = []
    for tag, attrs in parser.tags:
        if tag not in ALLOWED or not set(attrs) <= ALLOWED[tag]:
            out.append("element %s with %s" % (tag, sorted(attrs)))
            continue
        if "class" in attrs and not set(attrs["class"].split(" ")) <= CLASSES:
            out.append("class %r" % attrs["class"][:80])
        if tag == "a":
            href = attrs.get("href") or ""
            if href.startswith("#node-") and href[1:] in ids:
                continue
            if href not in linkable:
                out.append("link to %r" % href[:80])
            external.append(href)
        if tag == "meta" and attrs != {"charset": "utf-8"} and set(attrs) != {"http-equiv", "content"}:
            out.append("meta %r" % attrs)
    metas = [attrs for tag, attrs in parser.tags if tag == "meta" and "http-equiv" in attrs]
    csp = CSP.match(metas[0].get("content") or "") if len(metas) == 1 else None
    if csp is None or metas[0]["http-equiv"] != "Content-Security-Policy":
        out.append("no strict Content-Security-Policy: %r" % metas)
    elif len(parser.style) != 1 or len(parser.script) != 1 \
            or (_sha256(parser.style[0]), _sha256(parser.script[0])) != csp.groups():
        out.append("the CSP hashes are not those of the page's one style sheet and one script")
    if parser.title != "kubegpu.fleet audit %s" % report["generated_at"]:
        out.append("title %r" % parser.title[:80])
    from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import view  # the bounds only
    listed = listed_nodes(report)
    headings = list(parser.h3)
    for node in listed[:view.NODES_MAX]:
        if not any(h.startswith("%s (%s" % (html_display(node["name"]), node["status"])) for h in headings):
            out.append("no heading for %s" % ascii(node["name"][:80]))
    node_headings = [h for h in headings if h not in ("Findings", "Coverage", "GPU models")
                     and not h.startswith("Nodes by ")]
    if len(node_headings) != min(len(listed), view.NODES_MAX):
        out.append("%d node headings, expected %d" % (len(node_headings), min(len(listed), view.NODES_MAX)))
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
