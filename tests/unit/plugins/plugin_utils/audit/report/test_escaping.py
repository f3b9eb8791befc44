# -*- coding: utf-8 -*-
"""The report has one escaping path per format: the structure of every module of
plugins/plugin_utils/audit/report/ (its AST; nothing is imported from it but its location).

A Markdown or HTML renderer that formats a value any other way than through
``md``/``_md``/``_md_join`` (markdown_format.py) or ``Markup(constant) % value`` (html_format.py)
fails it, wherever in the package it is written; each bypass in BYPASSES must be caught.
"""
import ast
import os
import re

import pytest

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import build

PACKAGE = os.path.dirname(os.path.abspath(build.__file__))
SOURCES = sorted(f for f in os.listdir(PACKAGE) if f.endswith(".py"))

MD_PRIMITIVES = {"md", "_md", "_md_join", "_md_document"}
MD_NAMES = MD_PRIMITIVES | {"_Md"}
LINK_FUNCS = {"_html_link", "_html_anchor"}
# The page's one script element: a constant (its hash is in the page's Content-Security-Policy).
SCRIPT_FUNC = "_html_script"


def _calls(node, name):
    return [c for c in ast.walk(node) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id == name]


def _is_str(node):
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def escape_violations(source):
    """Ways a report module (``source``) could put a value into Markdown or HTML past the escapers."""
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
                if f.name not in LINK_FUNCS and not (f.name == SCRIPT_FUNC and n.value == "<script>%s</script>"):
                    out.append("%s: link or active markup outside _html_link/_html_anchor" % where)
        if f.name == "render_markdown" and not _calls(f, "_md_document"):
            out.append("render_markdown does not assemble with _md_document")
        if f.name == "render_html" and not any(isinstance(c.func, ast.Attribute) and c.func.attr == "join"
                                               and isinstance(c.func.value, ast.Call) for c in ast.walk(f)
                                               if isinstance(c, ast.Call)):
            out.append("render_html does not assemble with Markup(...).join")
        if f.name == "_html_link" and not _calls(f, "is_safe_url"):
            out.append("_html_link makes links without is_safe_url")
        if f.name == SCRIPT_FUNC:
            formatted = [n.right for n in ast.walk(f) if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod)]
            if f.args.args or f.args.vararg or f.args.kwarg or f.args.kwonlyargs \
                    or not all(isinstance(r, ast.Name) and r.id == "_SCRIPT" for r in formatted):
                out.append("_html_script puts something other than the constant _SCRIPT into the page")
        if f.name == "_html_anchor":
            consts = [n.value for n in ast.walk(f) if _is_str(n) and "href" in n.value]
            if consts != ['<a href="#node-%s">%s</a>']:
                out.append("_html_anchor links elsewhere than #node-: %r" % consts)
    return out


def _source(name):
    with open(os.path.join(PACKAGE, name), encoding="utf-8") as fh:
        return fh.read()


@pytest.mark.parametrize("name", SOURCES)
def test_report_module_has_one_escaping_path_per_format(name):
    assert escape_violations(_source(name)) == []


def test_the_check_sees_the_renderers_and_escapers():
    names = set(f.name for name in SOURCES for f in ast.walk(ast.parse(_source(name))) if isinstance(f, ast.FunctionDef))
    assert {"render_markdown", "render_html", "md", "_html_link", SCRIPT_FUNC} <= names


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
    ("script elsewhere", "def _html_x(n):\n    return Markup('<script>%s</script>') % n\n"),
    ("script with a value", "def _html_script(n):\n    return Markup('<script>%s</script>') % n\n"),
    ("script of data", "def _html_script():\n    return Markup('<script>%s</script>') % DATA\n"),
    ("event handler", "def _html_x(n):\n    return Markup('<b onclick=\"%s\">x</b>') % n\n"),
    ("no html join", "def render_html(report):\n    return Markup('<p>%s</p>') % report\n"),
]


@pytest.mark.parametrize("source", [b[1] for b in BYPASSES], ids=[b[0] for b in BYPASSES])
def test_the_structure_check_catches_each_bypass(source):
    assert escape_violations(source), source
