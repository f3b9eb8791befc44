# -*- coding: utf-8 -*-
"""The four report formats against a hostile corpus, and the structure of report.py's escaping.

Every value a node can influence (its name, finding ids, titles, evidence, remediation text,
references, errors, catalog sources and scores) is taken from HOSTILE: line breaks of every
kind, pipes, backslashes, HTML, backticks, Markdown structure, link syntax, bidi controls, NUL,
lone surrogates, a 1 MB string, javascript: URLs and NaN/Infinity numbers. The report is built
by the real ``build_report`` and rendered by the real renderers; each output is then parsed by
an independent parser and compared with what the template makes:

* JSON: ``json.loads`` with ``parse_constant`` refusing NaN/Infinity;
* Markdown: markdown-it-py (CommonMark + GFM tables): the tables have the rows and cells the
  template makes, every cell's text is the value, no HTML, link, image, heading or block that
  the template does not make;
* HTML: ``html.parser``: only the template's elements and attributes, links only to the
  node anchors and the https URLs that pass the catalog's URL check;
* Prometheus: ``promtool check metrics`` (Debian's ``prometheus`` package; skipped without it).

The structure test walks report.py's AST: a Markdown or HTML renderer that formats a value
any other way than through ``md``/``_md``/``_md_join`` or ``Markup(constant) % value`` fails it.
"""
import ast
import json
import re

import pytest

from ansible_collections.kubegpu.fleet.plugins.plugin_utils import report as r
from ansible_collections.kubegpu.fleet.tests.lib.report_checks import (
    display,
    html_problems,
    inline_text,
    markdown_problems,
    parse_markdown,
    promtool_problems,
    refuse,
    tables,
)

REPORT_PY = r.__file__
BIG = "M" * (1 << 20)
JS = "javascript:alert(document.cookie)"
HOSTILE = [
    "lone\rcr", "crlf\r\nline", "lf\nline", "tab\tx", "vt\x0bff\x0cnel\x85ls\u2028ps\u2029",
    "pipe|cell", "esc\\|aped", "trailing\\", "\\", "|", "||",
    "<script>alert(1)</script>", "<img src=x onerror=alert(1)>", '"><svg onload=alert(1)>', "&lt;&#x3C;&amp;",
    "<!-- comment -->", "`tick`", "``double``", "```fence", "~~~fence",
    "# heading", "## two", "- item", "+ item", "* item", "> quote", "1. ordered", "2) ordered", "---", "===",
    "    indented code", "[link](%s)" % JS, "![img](https://evil.example/x.png)", "[ref]: https://evil.example/",
    "<https://evil.example/auto>", "https://evil.example/bare", "www.evil.example", "*emph* _emph_ **strong**",
    "~~strike~~", "$x^2$", "{curly}", "[^footnote]",
    "bidi\u202eevil\u202c", "iso\u2066late\u2069", "zero\u200bwidth", "bom\ufeff", "nul\x00byte", "del\x7f",
    "esc\x1b[31mred", "c1\x9bx", "lone\udcffsurrogate", "\u00e9\u4e2d\U0001f600", BIG,
]
# Links a report may contain: the node anchors and these (they pass catalog_core.url_problem).
SAFE_URLS = ["https://nvidia.custhelp.com/app/answers/detail/a_id/5659", "https://ok.example/ref?a=1&b=2"]
# A reference that is a plain https URL becomes a link even from hostile text: it is one.
LINKABLE = SAFE_URLS + ["https://evil.example/bare"]
UNSAFE_URLS = [JS, "JAVASCRIPT:alert(1)", "data:text/html,<script>alert(1)</script>", "http://plain.example/",
               "https://user:pw@evil.example/", "https://evil.example/\u202etxt", "https://evil.example/a b",
               "https://evil.example/\nx", "//evil.example/", "https:evil.example", "vbscript:msgbox(1)", BIG]


def short(i, text):
    """A node-name-sized hostile value (unique per index) for names that appear in labels and ids."""
    return "n%02d-%s" % (i, text if len(text) < 100 else text[:64])


def corpus_nodes():
    nodes = []
    for i, text in enumerate(HOSTILE):
        status = ("audited", "audited", "unreachable", "failed")[i % 4]
        finding = {"id": "x.%s" % short(i, text), "severity": ("critical", "warning", "info")[i % 3],
                   "title": text,
                   "evidence": {"value": text, "nan": float("nan"), "inf": float("inf"), "ninf": float("-inf"),
                                "big": 10 ** 400, "deep": _nested(200), "tuple": (1, 2), 7: "int key",
                                "hands_on": i % 5 == 0},
                   "remediation": {"summary": text, "role": text, "vars": {"x": float("nan"), "t": text}},
                   "references": SAFE_URLS + UNSAFE_URLS + [text]}
        nodes.append({"name": short(i, text), "status": status, "error": text if status != "audited" else None,
                      "findings": [finding] if status != "unreachable" else []})
    nodes.append({"name": BIG, "status": "audited", "findings": [dict(SECURITY, node=None)]})
    return nodes


def _nested(depth):
    value = "leaf"
    for _level in range(depth):
        value = {"a": [value]}
    return value


SECURITY = {
    "id": "security.container-toolkit", "severity": "critical", "title": "toolkit |<b>1.17.7</b>",
    "evidence": {"component": "container-toolkit|<i>", "version": "1.17.7\r\n|x",
                 "cves": ["CVE-2025-23266", "CVE-2025-23267", "not-a-cve"], "max_cvss": float("nan"),
                 "advisories": [
                     {"id": "ctk-cve-2025-23266|<x>", "cves": ["CVE-2025-23266"], "max_cvss": float("inf"),
                      "severity": "critical", "status": "affected", "fixed": "1.17.8\n| evil |",
                      "sources": SAFE_URLS + UNSAFE_URLS},
                     {"id": "ctk-cve-2025-23267", "cves": ["CVE-2025-23267"], "max_cvss": 8.2,
                      "severity": "high", "status": "affected", "fixed": "1.17.8",
                      "sources": [{"url": JS}, {"url": SAFE_URLS[0]}]}]},
    "remediation": {"summary": "upgrade\r`now`"},
}


def cluster_findings():
    return [{"id": "cluster.%02d" % i, "severity": "info", "title": text, "node": None}
            for i, text in enumerate(HOSTILE[:12])]


@pytest.fixture(scope="module")
def report():
    return r.build_report(corpus_nodes(), cluster_findings=cluster_findings(), generated_at="2026-11-22T05:00:00Z",
                          collection_version="0.1.0\n<b>", run={"nan": float("nan"), "x": "<b>"})


# ------------------------------------------------------------------------------ JSON


def test_json_is_strict_and_non_finite_numbers_become_strings(report):
    text = r.render_json(report)
    data = json.loads(text, parse_constant=refuse)
    assert data == report  # build_report already made everything strict
    node = [n for n in data["nodes"] if n["name"] == short(0, HOSTILE[0])][0]
    ev = node["findings"][0]["evidence"]
    assert (ev["nan"], ev["inf"], ev["ninf"]) == ("NaN", "Infinity", "-Infinity")
    assert ev["big"] == "<integer of 1329 bits>" and ev["tuple"] == [1, 2] and ev["7"] == "int key"
    assert "nested deeper than 64 levels" in json.dumps(ev["deep"])
    assert data["run"]["nan"] == "NaN"
    assert [c["max_cvss"] for c in data["cves"]] == [None, 8.2]  # NaN and Infinity scores are unknown, not numbers
    surrogate = [n["name"] for n in data["nodes"] if n["name"].startswith("n%02d-lone" % HOSTILE.index("lone\udcffsurrogate"))]
    assert surrogate == ["n%02d-lone\\xed\\xb3\\xbfsurrogate" % HOSTILE.index("lone\udcffsurrogate")]
    text.encode("utf-8")  # no lone surrogate left: the file can be written as UTF-8


def test_render_json_makes_any_document_strict():
    doc = {"a": float("nan"), "b": [float("inf"), {"c": float("-inf")}], ("t", 1): {1, 2}, "d": object}
    text = r.render_json(doc)
    assert json.loads(text, parse_constant=refuse) == {"a": "NaN", "b": ["Infinity", {"c": "-Infinity"}],
                                                       "('t', 1)": [1, 2], "d": "<class 'object'>"}


# ------------------------------------------------------------------------------ Markdown


def test_markdown_structure_is_the_templates(report):
    text = r.render_markdown(report)
    assert markdown_problems(text, report) == []
    tokens = parse_markdown(text)
    headings = [inline_text(tokens[n + 1]) for n, t in enumerate(tokens) if t.type == "heading_open"]
    assert headings == ["kubegpu.fleet audit — 2026-11-22T05:00:00Z", "Per node", "CVEs across the fleet"]
    by_id, cves = tables(tokens)
    assert len(by_id) == 1 + len(report["summary"]["by_id"]) > 50 and len(cves) == 3


def test_markdown_check_is_not_vacuous(report):
    text = r.render_markdown(report)
    assert markdown_problems(text.replace("\\|", "|"), report)
    assert markdown_problems(text + "\n<b>x</b>\n", report)
    assert markdown_problems(text.replace("&lt;", "<").replace("&gt;", ">"), report)


@pytest.mark.parametrize("text", HOSTILE[:-1] + ["  - lead", "3. x", "=", "a://b", "WWW.x"])
def test_md_is_literal_text_in_a_paragraph_and_in_a_cell(text):
    md = r.md(text)
    assert "\n" not in md and "\r" not in md
    para = parse_markdown("x " + md)
    assert [t.type for t in para] == ["paragraph_open", "inline", "paragraph_close"]
    assert set(c.type for c in para[1].children) <= {"text", "text_special"}
    assert inline_text(para[1]) == "x " + display(text)
    table = tables(parse_markdown("| a | b |\n| --- | --- |\n| %s | z |" % md))
    assert table == [[["a", "b"], [display(text), "z"]]]
    lead = parse_markdown(md)  # at the start of a line: still one paragraph of text, no list/heading/quote
    assert [t.type for t in lead] in (["paragraph_open", "inline", "paragraph_close"], [])


def test_md_code_spans_hold_any_backtick_run_and_refuse_pipes():
    for text in ("a`b", "``", "`x`", "a```b"):
        span = r.md(text, code=True)
        (inline,) = [t for t in parse_markdown("x " + span) if t.type == "inline"]
        assert [c.type for c in inline.children] == ["text", "code_inline"]
        assert inline.children[1].content == text
    assert not r.md("a|b", code=True).startswith("`")
    assert not r.md("a\\b", code=True).startswith("`")


def test_a_line_that_is_not_built_by_the_escaper_is_escaped():
    assert r._md_document([r._md("| %s |", "a|b"), "<b>|x"]) == "| a\\|b |\n&lt;b&gt;\\|x"


# ------------------------------------------------------------------------------ HTML


def test_html_has_only_the_templates_elements_attributes_and_links(report):
    page = r.render_html(report)
    problems, external = html_problems(page, report, LINKABLE)
    assert problems == []
    assert sorted(set(external)) == sorted(LINKABLE)
    # one link per reference or source that is a safe URL, wherever it was listed
    expected = sum(f["references"].count(SAFE_URLS[1]) for n in report["nodes"] for f in n["findings"])
    expected += sum(c["sources"].count(SAFE_URLS[1]) for c in report["cves"])
    assert external.count(SAFE_URLS[1]) == expected > 10
    assert JS in page.replace("&#34;", '"')  # shown as text, never a link


def test_html_check_is_not_vacuous(report):
    page = r.render_html(report)
    assert html_problems(page.replace("</p>", "<img src=x></p>", 1), report, LINKABLE)[0]
    assert html_problems(page.replace('rel="noopener', 'onclick="x" rel="noopener', 1), report, LINKABLE)[0]
    assert html_problems(page.replace(SAFE_URLS[0], JS, 1), report, LINKABLE)[0]


# ------------------------------------------------------------------------------ Prometheus


def test_prometheus_passes_promtool_and_has_one_series_per_label_set(report):
    text = r.render_prometheus(report)
    finding = [line for line in text.split("\n") if line.startswith("kubegpu_finding{")]
    expected = set((n["name"], f["id"], f["severity"]) for n in report["nodes"] for f in n["findings"])
    expected |= set(("", f["id"], f["severity"]) for f in report["cluster"]["findings"])
    assert len(finding) == len(expected)
    up = [line for line in text.split("\n") if line.startswith("kubegpu_audit_node_up{")]
    assert len(up) == len(report["nodes"])
    problems = promtool_problems(text)
    if problems is None:
        pytest.skip("promtool not installed (Debian package prometheus): the exposition format is not checked")
    assert problems == ""
    assert promtool_problems(text.replace('node="', 'node="x"y', 1))  # the check is not vacuous


def test_prometheus_label_escaping_per_the_exposition_format():
    assert r._prom_label('a\\b"c\nd\re') == 'a\\\\b\\"c\\nd\re'


# ------------------------------------------------------------------------------ structure of report.py

MD_PRIMITIVES = {"md", "_md", "_md_join", "_md_document"}
MD_NAMES = MD_PRIMITIVES | {"_Md"}
LINK_FUNCS = {"_html_link", "_html_anchor"}


def _calls(node, name):
    return [c for c in ast.walk(node) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id == name]


def _is_str(node):
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def escape_violations(source):
    """Ways report.py (``source``) could put a value into Markdown or HTML past the escapers."""
    tree = ast.parse(source)
    out = []
    funcs = [f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)]
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            mods = [a.name for a in node.names] + ([node.module] if isinstance(node, ast.ImportFrom) else [])
            if "html" in mods or "escape" in [a.name for a in node.names]:
                out.append("imports an HTML escape other than Markup's: %s" % ast.dump(node)[:80])
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Markup":
            if len(node.args) != 1 or node.keywords or not _is_str(node.args[0]):
                out.append("line %d: Markup() of something other than one string constant" % node.lineno)
        if isinstance(node, ast.Attribute) and node.attr in ("escape", "unescape", "striptags"):
            out.append("line %d: .%s()" % (node.lineno, node.attr))
    for f in funcs:
        names = set(n.id for n in ast.walk(f) if isinstance(n, ast.Name))
        is_md = f.name == "render_markdown" or (names & MD_NAMES and f.name not in MD_PRIMITIVES)
        is_html = f.name == "render_html" or "Markup" in names
        if f.name in MD_PRIMITIVES or not (is_md or is_html):
            if _calls(f, "_Md") and f.name not in MD_PRIMITIVES:
                out.append("%s: builds _Md outside the escaper" % f.name)
            continue
        for n in ast.walk(f):
            where = "%s line %d" % (f.name, getattr(n, "lineno", 0))
            if isinstance(n, ast.JoinedStr):
                out.append("%s: f-string" % where)
            elif isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod) and _is_str(n.left):
                out.append("%s: str %% formatting (use _md or Markup(...) %%)" % where)
            elif isinstance(n, ast.BinOp) and isinstance(n.op, ast.Add) and (_is_str(n.left) or _is_str(n.right)):
                out.append("%s: str concatenation" % where)
            elif isinstance(n, ast.AugAssign) and _is_str(n.value):
                out.append("%s: str concatenation" % where)
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
                if n.func.attr in ("format", "format_map", "replace", "translate"):
                    out.append("%s: .%s()" % (where, n.func.attr))
                if n.func.attr == "join" and _is_str(n.func.value):
                    out.append("%s: str.join (use _md_join or Markup(...).join)" % where)
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name):
                if n.func.id == "_Md":
                    out.append("%s: builds _Md outside the escaper" % where)
                if n.func.id in ("_md", "_md_join") and not (n.args and _is_str(n.args[0])):
                    out.append("%s: %s() without a constant template" % (where, n.func.id))
                if n.func.id in ("str", "repr", "format") and is_md:
                    out.append("%s: %s() of a value" % (where, n.func.id))
            if _is_str(n) and re.search(r"\]\(|<a |href=|<img|<script|src=|on\w+=", n.value):
                if f.name not in LINK_FUNCS:
                    out.append("%s: link or active markup outside _html_link/_html_anchor" % where)
        if f.name == "render_markdown" and not _calls(f, "_md_document"):
            out.append("render_markdown does not assemble with _md_document")
        if f.name == "render_html" and not any(isinstance(c.func, ast.Attribute) and c.func.attr == "join"
                                               and isinstance(c.func.value, ast.Call) for c in ast.walk(f)
                                               if isinstance(c, ast.Call)):
            out.append("render_html does not assemble with Markup(...).join")
        if f.name == "_html_link" and not _calls(f, "is_safe_url"):
            out.append("_html_link makes links without is_safe_url")
        if f.name == "_html_anchor":
            consts = [n.value for n in ast.walk(f) if _is_str(n) and "href" in n.value]
            if consts != ['<a href="#node-%s">%s</a>']:
                out.append("_html_anchor links elsewhere than #node-: %r" % consts)
    return out


def test_report_py_has_one_escaping_path_per_format():
    with open(REPORT_PY, encoding="utf-8") as fh:
        source = fh.read()
    assert escape_violations(source) == []
    names = set(f.name for f in ast.walk(ast.parse(source)) if isinstance(f, ast.FunctionDef))
    assert {"render_markdown", "render_html", "md", "_html_link"} <= names


BYPASSES = [
    ("f-string", "def render_markdown(report):\n    return _md_document([f'- {report}'])\n"),
    ("percent", "def _markdown_x(n):\n    return [_md('x'), '- %s' % n]\n"),
    ("concat", "def _markdown_x(n):\n    return [_md('x'), '- ' + n]\n"),
    ("augassign", "def _markdown_x(n):\n    s = _md('x')\n    s += '|'\n    return s\n"),
    ("format", "def _markdown_x(n):\n    return [_md('x'), '- {}'.format(n)]\n"),
    ("join", "def _markdown_x(n):\n    return _md('%s', ', '.join(n))\n"),
    ("replace", "def _markdown_x(n):\n    return _md('%s', n.replace('|', ''))\n"),
    ("own _Md", "def _markdown_x(n):\n    return _Md(n)\n"),
    ("own _Md elsewhere", "def helper(n):\n    return _Md(n)\n"),
    ("template var", "def _markdown_x(t, n):\n    return _md(t, n)\n"),
    ("str()", "def _markdown_x(n):\n    return [_md('x'), str(n)]\n"),
    ("no document", "def render_markdown(report):\n    return '\\n'.join(_md('x'))\n"),
    ("md link", "def _markdown_x(u):\n    return _md('[source](%s)', u)\n"),
    ("Markup of data", "def _html_x(n):\n    return Markup(n)\n"),
    ("Markup concat", "def _html_x(n):\n    return Markup('<b>' + n + '</b>')\n"),
    ("html percent", "def _html_x(n):\n    return Markup('x') + '<b>%s</b>' % n\n"),
    ("html join", "def render_html(report):\n    return Markup('x').join(['<b>'.join(report)])\n"),
    ("escape import", "import html\n"),
    ("markupsafe escape", "from markupsafe import Markup, escape\n"),
    ("unescape", "def _html_x(n):\n    return (Markup('%s') % n).unescape()\n"),
    ("href outside", "def _html_x(u):\n    return Markup('<a href=\"%s\">x</a>') % u\n"),
    ("img", "def _html_x(u):\n    return Markup('<img src=\"%s\">') % u\n"),
    ("unchecked link", "def _html_link(u):\n    return Markup('<a href=\"%s\">%s</a>') % (u, u)\n"),
    ("anchor elsewhere", "def _html_anchor(u):\n    return Markup('<a href=\"%s\">%s</a>') % (u, u)\n"),
    ("no html join", "def render_html(report):\n    return Markup('<p>%s</p>') % report\n"),
]


@pytest.mark.parametrize("source", [b[1] for b in BYPASSES], ids=[b[0] for b in BYPASSES])
def test_the_structure_check_catches_each_bypass(source):
    assert escape_violations(source), source
