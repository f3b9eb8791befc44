# -*- coding: utf-8 -*-
"""The report as a Prometheus textfile (prometheus_format.render_prometheus): the metrics of a
built report, label escaping per the exposition format, and the hostile corpus
(tests/lib/report_corpus.py) through ``promtool check metrics`` (Debian's ``prometheus``
package; skipped without it)."""
import re

import pytest

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import build
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import prometheus_format
from ansible_collections.kubegpu.fleet.tests.lib.report_corpus import (
    REPORT_ARGS,
    cluster_findings,
    corpus_nodes,
)
from ansible_collections.kubegpu.fleet.tests.lib.report_checks import promtool_problems
from ansible_collections.kubegpu.fleet.tests.unit.plugins.plugin_utils.audit.report.test_build import INFO, nodes


@pytest.fixture(scope="module")
def report():
    return build.build_report(corpus_nodes(), cluster_findings=cluster_findings(), **REPORT_ARGS)


def test_prometheus_text_format():
    rep = build.build_report(nodes(), generated_at="2026-11-22T05:00:00Z")
    text = prometheus_format.render_prometheus(rep)
    assert 'kubegpu_finding{node="gpu-b",id="driver.known_bad",severity="critical"} 1' in text
    # label escaping per the exposition format
    assert 'kubegpu_audit_node_up{node="gpu-c"} 0' in text
    assert "kubegpu_audit_timestamp_seconds 1795323600" in text
    assert 'kubegpu_audit_findings{severity="critical"} 1' in text
    for line in text.splitlines():
        assert line.startswith("#") or re.match(r'^[a-z_]+(\{.*\})? -?\d+(\.\d+)?$', line), line


def test_prometheus_escapes_label_values():
    n = [{"name": 'we"ird\\node', "status": "audited", "findings": [INFO]}]
    text = prometheus_format.render_prometheus(build.build_report(n, generated_at="2026-11-22T05:00:00Z"))
    assert 'node="we\\"ird\\\\node"' in text


def test_prometheus_passes_promtool_and_has_one_series_per_label_set(report):
    text = prometheus_format.render_prometheus(report)
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
    assert prometheus_format._prom_label('a\\b"c\nd\re') == 'a\\\\b\\"c\\nd\re'
