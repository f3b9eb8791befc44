"""The report's catalog section: the newest bulletin the known-bad catalog knows, its revision
date and age, and the warning when the catalog is older than the configured age, in every format."""
import datetime
import json
import os

import pytest

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import build
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import html_format
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import json_format
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import markdown_format
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import prometheus_format
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.catalog import load as catalog_load

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "..", ".."))
NODES = [{"name": "gpu-1", "status": "audited", "findings": []}]


def entry(eid, aid, date, revision="1.0.0", title="Security Bulletin"):
    return {"id": eid, "kind": "security",
            "advisory": {"id": aid, "title": title, "revision": revision, "date": date}}


CATALOG = [entry("a-1", "5700", "2026-01-10"), entry("a-2", "5700", "2026-01-10"),
           entry("b-1", "5861", "2026-09-30", title="GPU Display Driver - September 2026"),
           entry("c-1", "5850", "2026-06-30"), {"id": "defect-1", "kind": "defect"}]


def test_newest_bulletin_by_revision_date_and_its_age():
    state = build.catalog_state(CATALOG, datetime.date(2026, 11, 14))
    assert state == {"entries": 5, "advisories": 3, "age_days": 45, "max_age_days": 45, "stale": False,
                     "warning": None, "error": None,
                     "newest_advisory": {"id": "5861", "title": "GPU Display Driver - September 2026",
                                         "revision": "1.0.0", "date": "2026-09-30"}}


def test_older_than_the_configured_age_is_stale_with_a_warning():
    state = build.catalog_state(CATALOG, datetime.date(2026, 11, 15))
    assert state["stale"] is True and state["age_days"] == 46
    assert state["warning"] == ("the known-bad catalog's newest bulletin (5861, revision 1.0.0 of 2026-09-30) is 46 "
                                "days old, more than 45: advisories published since are not reported; refresh the "
                                "catalog")
    assert build.catalog_state(CATALOG, datetime.date(2026, 11, 15), max_age_days=46)["stale"] is False


def test_no_dated_bulletin_or_an_unreadable_catalog_is_stale():
    state = build.catalog_state([{"id": "x", "advisory": {"id": "1", "date": "2026-02-30"}}], datetime.date(2026, 11, 1))
    assert (state["stale"], state["newest_advisory"], state["advisories"]) == (True, None, 0)
    assert "names no dated bulletin" in state["warning"]
    state = build.catalog_state(None, datetime.date(2026, 11, 1), error="catalog_extra: bad")
    assert state["stale"] is True and state["error"] == "catalog_extra: bad" and "bad" in state["warning"]


@pytest.mark.parametrize("bad", [0, -3, True, "45", 4.5])
def test_max_age_must_be_a_positive_whole_number(bad):
    with pytest.raises(build.ReportError, match="catalog_max_age_days"):
        build.build_report(NODES, catalog=CATALOG, catalog_max_age_days=bad, generated_at="2026-11-27T03:00:00Z")


def test_every_format_states_the_date_and_the_warning():
    rep = build.build_report(NODES, catalog=CATALOG, generated_at="2026-11-27T03:00:00Z")
    assert rep["catalog"]["age_days"] == 58 and rep["catalog"]["stale"] is True
    md = markdown_format.render_markdown(rep)
    assert ("\nKnown-bad catalog: 5 entries from 3 bulletins; newest bulletin 5861 (GPU Display Driver - September "
            "2026), revision 1.0.0 of 2026-09-30, 58 days old (warning after 45).\n\n**Warning:** the known-bad "
            "catalog's newest bulletin (5861, revision 1.0.0 of 2026-09-30) is 58 days old") in md
    html = html_format.render_html(rep)
    assert '<p id="catalog">Known-bad catalog: 5 entries from 3 bulletins; newest bulletin 5861' in html
    assert '<p id="catalog-warning">' in html and "58 days old, more than 45" in html
    prom = prometheus_format.render_prometheus(rep)
    # 2026-09-30T00:00:00Z
    assert "kubegpu_audit_catalog_newest_bulletin_timestamp_seconds 1790726400\n" in prom
    assert "kubegpu_audit_catalog_stale 1\n" in prom
    assert json.loads(json_format.render_json(rep))["catalog"] == rep["catalog"]
    fresh = build.build_report(NODES, catalog=CATALOG, generated_at="2026-10-01T00:00:00Z")
    assert "Warning" not in markdown_format.render_markdown(fresh) and "catalog-warning" not in html_format.render_html(fresh)
    assert "kubegpu_audit_catalog_stale 0\n" in prometheus_format.render_prometheus(fresh)
    assert "catalog" not in build.build_report(NODES, generated_at="2026-10-01T00:00:00Z")


def test_hostile_advisory_text_from_catalog_extra_is_escaped():
    hostile = [entry("x-1", "<b>9</b>", "2026-11-01", title="[x](javascript:alert(1)) <script>alert(1)</script> *a*",
                     revision="1|2")]
    rep = build.build_report(NODES, catalog=hostile, generated_at="2026-11-27T03:00:00Z")
    html = html_format.render_html(rep)
    # the page's one script is its own filter; the catalog's text is escaped
    assert html.count("<script>") == 1 and "<script>alert" not in html and "<b>9</b>" not in html
    assert "&lt;script&gt;" in html
    md = markdown_format.render_markdown(rep)
    assert "<script>" not in md and "<b>" not in md and "[x](javascript:" not in md and "1\\|2" in md
    markdown_it = pytest.importorskip("markdown_it")
    tokens = markdown_it.MarkdownIt("commonmark").parse(md)
    inline = [c for t in tokens for c in (t.children or [])]
    assert not [c for c in inline if c.type in ("link_open", "html_inline", "em_open")]
    assert not [t for t in tokens if t.type == "html_block"]


def test_bundled_catalog_report_validates_against_the_schema():
    jsonschema = pytest.importorskip("jsonschema")
    with open(os.path.join(REPO, "docs", "audit-report.schema.json")) as f:
        schema = json.load(f)
    entries = catalog_load.load_catalog(os.path.join(REPO, "catalog", "v2"))
    newest = max(e["advisory"]["date"] for e in entries if e.get("advisory"))
    for catalog, error in ((entries, None), (None, "cannot read")):
        rep = build.build_report(NODES, catalog=catalog, catalog_error=error, generated_at="2026-11-27T03:00:00Z")
        jsonschema.validate(json.loads(json_format.render_json(rep)), schema)
    rep = build.build_report(NODES, catalog=entries, generated_at="2026-11-27T03:00:00Z")
    assert rep["catalog"]["newest_advisory"]["date"] == newest
