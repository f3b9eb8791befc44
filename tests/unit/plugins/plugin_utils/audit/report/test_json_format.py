# -*- coding: utf-8 -*-
"""The report as strict JSON (json_format.render_json): a round trip of a built report, and the
hostile corpus (tests/lib/report_corpus.py) parsed by ``json.loads`` refusing NaN/Infinity."""
import json

import pytest

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import build
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import json_format
from ansible_collections.kubegpu.fleet.tests.lib.report_corpus import (
    HOSTILE,
    REPORT_ARGS,
    cluster_findings,
    corpus_nodes,
    short,
)
from ansible_collections.kubegpu.fleet.tests.lib.report_checks import refuse
from ansible_collections.kubegpu.fleet.tests.unit.plugins.plugin_utils.audit.report.test_build import nodes


@pytest.fixture(scope="module")
def report():
    return build.build_report(corpus_nodes(), cluster_findings=cluster_findings(), **REPORT_ARGS)


def test_json_roundtrip():
    rep = build.build_report(nodes(), generated_at="2026-11-22T05:00:00Z")
    assert json.loads(json_format.render_json(rep)) == rep


def test_json_is_strict_and_non_finite_numbers_become_strings(report):
    text = json_format.render_json(report)
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
    text = json_format.render_json(doc)
    assert json.loads(text, parse_constant=refuse) == {"a": "NaN", "b": ["Infinity", {"c": "-Infinity"}],
                                                       "('t', 1)": [1, 2], "d": "<class 'object'>"}
