# -*- coding: utf-8 -*-
"""The report as one HTML page (html_format): what a built report says, and the hostile corpus
(tests/lib/report_corpus.py) parsed by ``html.parser``: only the template's elements and
attributes, links only to the node anchors and the https URLs that pass the catalog's URL check.
test_escaping.py checks that MarkupSafe is the only way a value gets into the page."""
import pytest

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import build
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import html_format
from ansible_collections.kubegpu.fleet.tests.lib.report_corpus import (
    JS,
    LINKABLE,
    REPORT_ARGS,
    SAFE_URLS,
    cluster_findings,
    corpus_nodes,
)
from ansible_collections.kubegpu.fleet.tests.lib.report_checks import html_problems
from ansible_collections.kubegpu.fleet.tests.unit.plugins.plugin_utils.audit.report.test_build import CRIT, nodes


@pytest.fixture(scope="module")
def report():
    return build.build_report(corpus_nodes(), cluster_findings=cluster_findings(), **REPORT_ARGS)


def test_html_contains_what_matters():
    rep = build.build_report(nodes(), generated_at="2026-11-22T05:00:00Z")
    page = html_format.render_html(rep)
    assert page.startswith("<!DOCTYPE html>") and "http://" not in page.split("<style>", maxsplit=1)[0]
    # one script, the page's own filter, allowed by hash in the Content-Security-Policy
    assert page.count("<script") == 1 and "<script>%s</script>" % html_format._SCRIPT in page
    assert "script-src &#39;sha256-" in page and "default-src &#39;none&#39;" in page
    assert 'data-finding="driver.known_bad" title="critical"' in page
    assert "upgrade to 570.172.08" in page
    # untrusted text is escaped
    assert "&#34;label&#34;" in page  # MarkupSafe spells &quot; as &#34;


def test_html_escapes_hostile_evidence():
    evil = dict(CRIT, evidence={"x": "<img src=x onerror=alert(1)>"})
    page = html_format.render_html(build.build_report([{"name": "<b>n</b>", "findings": [evil]}],
                                                      generated_at="2026-11-22T05:00:00Z"))
    assert "<img" not in page and "<b>n</b>" not in page


def test_html_has_only_the_templates_elements_attributes_and_links(report):
    page = html_format.render_html(report)
    problems, external = html_problems(page, report, LINKABLE)
    assert problems == []
    assert sorted(set(external)) == sorted(LINKABLE)
    # one link per reference or source that is a safe URL, wherever it was listed
    expected = sum(f["references"].count(SAFE_URLS[1]) for n in report["nodes"] for f in n["findings"])
    expected += sum(c["sources"].count(SAFE_URLS[1]) for c in report["cves"])
    assert external.count(SAFE_URLS[1]) == expected > 10
    assert JS in page.replace("&#34;", '"')  # shown as text, never a link


def test_html_check_is_not_vacuous(report):
    page = html_format.render_html(report)
    assert html_problems(page.replace("</p>", "<img src=x></p>", 1), report, LINKABLE)[0]
    assert html_problems(page.replace('rel="noopener', 'onclick="x" rel="noopener', 1), report, LINKABLE)[0]
    assert html_problems(page.replace(SAFE_URLS[0], JS, 1), report, LINKABLE)[0]
