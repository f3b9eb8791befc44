# -*- coding: utf-8 -*-
"""The report as Markdown (markdown_format): what a built report says, and the hostile corpus
(tests/lib/report_corpus.py) parsed by markdown-it-py (CommonMark + GFM tables): the tables have
the rows and cells the template makes, every cell's text is the value, no HTML, link, image,
heading or block that the template does not make; ``md`` is literal text wherever it is placed.
test_escaping.py checks that ``md`` is the only way a value gets into the Markdown."""
import pytest

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import build
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import markdown_format
from ansible_collections.kubegpu.fleet.tests.lib.report_corpus import (
    HOSTILE,
    REPORT_ARGS,
    cluster_findings,
    corpus_nodes,
)
from ansible_collections.kubegpu.fleet.tests.lib.report_checks import (
    display,
    inline_text,
    markdown_problems,
    parse_markdown,
    tables,
)
from ansible_collections.kubegpu.fleet.tests.unit.plugins.plugin_utils.audit.report.test_build import nodes


@pytest.fixture(scope="module")
def report():
    return build.build_report(corpus_nodes(), cluster_findings=cluster_findings(), **REPORT_ARGS)


def test_markdown_contains_what_matters():
    rep = build.build_report(nodes(), generated_at="2026-11-22T05:00:00Z")
    md = markdown_format.render_markdown(rep)
    assert "4 nodes: 2 audited, 1 unreachable, 1 failed, 1 clean, 0 not a GPU node, 0 not inspected" in md
    assert "**Unreachable:** gpu-c" in md
    assert "| critical | `driver.known_bad` Known-bad driver 570.148.08 | 1: gpu-b |" in md
    assert "**Clean (1):** gpu-a" in md


def test_markdown_structure_is_the_templates(report):
    text = markdown_format.render_markdown(report)
    assert markdown_problems(text, report) == []
    tokens = parse_markdown(text)
    headings = [inline_text(tokens[n + 1]) for n, t in enumerate(tokens) if t.type == "heading_open"]
    assert headings == ["kubegpu.fleet audit — 2026-11-22T05:00:00Z", "Cluster", "Per node", "CVEs across the fleet"]
    by_id, cves = tables(tokens)
    assert len(by_id) == 1 + len(report["summary"]["by_id"]) > 50 and len(cves) == 3


def test_markdown_check_is_not_vacuous(report):
    text = markdown_format.render_markdown(report)
    assert markdown_problems(text.replace("\\|", "|"), report)
    assert markdown_problems(text + "\n<b>x</b>\n", report)
    assert markdown_problems(text.replace("&lt;", "<").replace("&gt;", ">"), report)


@pytest.mark.parametrize("text", HOSTILE[:-1] + ["  - lead", "3. x", "=", "a://b", "WWW.x"])
def test_md_is_literal_text_in_a_paragraph_and_in_a_cell(text):
    md = markdown_format.md(text)
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
        span = markdown_format.md(text, code=True)
        (inline,) = [t for t in parse_markdown("x " + span) if t.type == "inline"]
        assert [c.type for c in inline.children] == ["text", "code_inline"]
        assert inline.children[1].content == text
    assert not markdown_format.md("a|b", code=True).startswith("`")
    assert not markdown_format.md("a\\b", code=True).startswith("`")


def test_a_line_that_is_not_built_by_the_escaper_is_escaped():
    assert markdown_format._md_document([markdown_format._md("| %s |", "a|b"), "<b>|x"]) == "| a\\|b |\n&lt;b&gt;\\|x"
