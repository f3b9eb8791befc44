# -*- coding: utf-8 -*-
"""The coverage limit (build.coverage_limit, audit_report's max_unaudited): how many GPU nodes in the
report's scope the audit may fail to see - unreachable, failed, not audited, not inspected - as a
number or a percentage rounded down like a Kubernetes Deployment's maxUnavailable; what every format
says about it."""
import json
import os

import pytest

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit import coverage as audit_coverage
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import (
    build,
    html_format,
    json_format,
    markdown_format,
    prometheus_format,
)
from ansible_collections.kubegpu.fleet.tests.lib.report_checks import (
    html_problems,
    inline_text,
    markdown_problems,
    parse_markdown,
    promtool_problems,
)

T = "2026-11-22T05:00:00Z"
GPU = {"nvidia": {"present": True, "probe": {"status": "ok"},
                  "pci": {"available": True, "gpus": [{"bus_id": "0000:3b:00.0"}], "errors": []},
                  "gpus": [{"name": "NVIDIA H100 80GB HBM3"}]},
       "kubelet": {"running": True}, "api": {"exists": True}}
CPU = {"nvidia": {"present": False, "probe": {"status": "no_driver"}, "pci": {"available": True, "gpus": [], "errors": []}},
       "kubelet": {"running": True}, "api": {"exists": True}}
LOST = {"nvidia": {}, "kubelet": {}, "api": {}, "errors": {"gpu_facts": "timed out", "kubelet_facts": "timed out"}}


def seen(name):
    return {"name": name, "status": "audited", "findings": [], "coverage": audit_coverage.coverage(GPU)}


def unseen(name, status="unreachable"):
    if status == "not_inspected":
        return {"name": name, "status": "audited", "findings": [], "coverage": audit_coverage.coverage(LOST)}
    if status == "not_gpu_node":
        return {"name": name, "status": "audited", "findings": [], "coverage": audit_coverage.coverage(CPU)}
    return {"name": name, "status": status, "findings": [], "error": "%s: ssh: connect to host %s port 22" % (status, name)}


def fleet(n_seen, *others):
    return [seen("gpu-%03d" % i) for i in range(n_seen)] + list(others)


def paragraphs(md):
    """The text a reader sees of each Markdown paragraph (markdown-it-py)."""
    tokens = parse_markdown(md)
    return [inline_text(tokens[n + 1]) for n, t in enumerate(tokens) if t.type == "paragraph_open"]


def limit_of(nodes, max_unaudited=build.DEFAULT_MAX_UNAUDITED):
    return build.build_report(nodes, generated_at=T, max_unaudited=max_unaudited)["summary"]["coverage_limit"]


@pytest.mark.parametrize("value, kept", [(0, 0), (5, 5), ("5", 5), (" 12 ", 12), ("10%", "10%"), (" 7% ", "7%"),
                                         ("0%", "0%"), ("100%", "100%"), ("007%", "7%")])
def test_max_unaudited_is_a_number_or_a_whole_percentage(value, kept):
    assert build.check_max_unaudited(value) == kept


@pytest.mark.parametrize("value, why", [(-1, "not be negative"), (10 ** 30, "nor more than 999999999"),
                                        ("1234567890", "percentage"), ("101%", "more than 100%"), ("10.5%", "whole percent"),
                                        ("ten", "percentage"), (True, "percentage"), (1.5, "percentage"),
                                        (None, "percentage"), ("%", "percentage"), ("-5%", "percentage"),
                                        ("", "percentage"), ("5 %", "percentage")])
def test_anything_else_is_refused_with_the_reason(value, why):
    with pytest.raises(build.ReportError, match=why):
        build.check_max_unaudited(value)


@pytest.mark.parametrize("value, in_scope, allowed", [
    # a percentage rounds down, as GetScaledValueFromIntOrPercent(maxUnavailable, desired, roundUp=false)
    ("10%", 9, 0), ("10%", 10, 1), ("10%", 19, 1), ("10%", 20, 2), ("25%", 7, 1), ("33%", 3, 0), ("34%", 3, 1),
    ("1%", 99, 0), ("1%", 100, 1), ("0%", 1000, 0), ("100%", 7, 7), ("100%", 0, 0), ("10%", 0, 0),
    (3, 2, 3), (0, 10, 0), ("3", 10, 3)])
def test_a_percentage_of_the_nodes_in_scope_rounds_down_like_max_unavailable(value, in_scope, allowed):
    assert build.allowed_unaudited(value, in_scope) == allowed


def test_exactly_the_allowed_number_passes_and_one_more_fails():
    at = limit_of(fleet(9, unseen("gpu-x")))                         # 10 in scope, 10% allows 1
    assert (at["nodes_in_scope"], at["allowed"], at["unaudited"], at["exceeded"]) == (10, 1, 1, False)
    over = limit_of(fleet(8, unseen("gpu-x"), unseen("gpu-y", "failed")))
    assert (over["nodes_in_scope"], over["allowed"], over["unaudited"], over["exceeded"]) == (10, 1, 2, True)
    assert over["nodes"] == ["gpu-x", "gpu-y"] and over["by_status"] == {
        "unreachable": 1, "failed": 1, "not_audited": 0, "not_inspected": 0}
    # a number: the same boundary
    assert limit_of(fleet(3, unseen("a"), unseen("b")), 2)["exceeded"] is False
    assert limit_of(fleet(3, unseen("a"), unseen("b"), unseen("c")), 2)["exceeded"] is True


def test_no_node_in_scope_passes():
    empty = limit_of([])
    assert (empty["nodes_in_scope"], empty["allowed"], empty["unaudited"], empty["exceeded"]) == (0, 0, 0, False)
    # a fleet of CPU workers only: no GPU node in scope, nothing unseen
    cpus = limit_of([unseen("cpu-0", "not_gpu_node"), unseen("cpu-1", "not_gpu_node")])
    assert (cpus["nodes_in_scope"], cpus["unaudited"], cpus["exceeded"]) == (0, 0, False)


def test_every_node_unreachable_fails_and_100_percent_turns_the_check_off():
    nodes = [unseen("gpu-%d" % i) for i in range(12)]
    lim = limit_of(nodes)
    assert (lim["nodes_in_scope"], lim["allowed"], lim["unaudited"], lim["exceeded"]) == (12, 1, 12, True)
    off = limit_of(nodes, "100%")
    assert (off["allowed"], off["unaudited"], off["exceeded"]) == (12, 12, False)
    rep = build.build_report(nodes, generated_at=T)
    assert rep["summary"]["failing"] == 0   # no finding: fail_on alone would pass this run
    failing = build.coverage_failing(rep)
    assert [e["node"] for e in failing] == sorted(n["name"] for n in nodes)
    assert all(e["status"] == "unreachable" and "port 22" in e["why"] for e in failing)
    assert build.coverage_failing(build.build_report(nodes, generated_at=T, max_unaudited="100%")) == []


def test_what_counts_unreachable_failed_not_audited_not_inspected_but_never_a_cpu_host():
    nodes = fleet(20, unseen("u"), unseen("f", "failed"), unseen("n", "not_audited"), unseen("i", "not_inspected"),
                  unseen("cpu-0", "not_gpu_node"), unseen("cpu-1", "not_gpu_node"))
    lim = limit_of(nodes, "20%")
    # 24 GPU nodes in scope (the two CPU workers are not), 20% of 24 = 4.8 -> 4: exactly at the limit
    assert (lim["nodes_in_scope"], lim["allowed"], lim["unaudited"], lim["exceeded"]) == (24, 4, 4, False)
    assert lim["by_status"] == {"unreachable": 1, "failed": 1, "not_audited": 1, "not_inspected": 1}
    assert lim["nodes"] == ["f", "i", "n", "u"]
    rep = build.build_report(nodes, generated_at=T, max_unaudited="10%")
    why = dict((e["node"], e) for e in build.coverage_failing(rep))
    assert sorted(why) == ["f", "i", "n", "u"]
    assert why["i"]["status"] == "not_inspected" and why["i"]["why"].startswith("the probes saw nothing")
    assert why["n"]["status"] == "not_audited"


def test_the_message_names_the_limit_and_a_bounded_list_of_nodes():
    nodes = fleet(5, *[unseen("gone-%02d" % i) for i in range(25)] + [unseen("lost", "not_audited")])
    rep = build.build_report(nodes, generated_at=T)
    lim = rep["summary"]["coverage_limit"]
    failing = build.coverage_failing(rep)
    msg = build.coverage_message(lim, failing)
    assert msg.startswith("the audit did not see 26 of the 31 GPU nodes in scope (25 unreachable, 1 not audited); "
                          "max_unaudited 10% allows 3 of 31 (rounded down): exceeded. Not seen: gone-00 (unreachable), ")
    assert "gone-19 (unreachable) and 6 more." in msg and "gone-20" not in msg and "lost" not in msg
    assert '"100%" turns this check off' in msg
    assert len(failing) == 26   # the task result and the report keep them all
    assert build.coverage_message(limit_of(fleet(3)), []) is None
    assert build.coverage_limit_text(limit_of(fleet(3), 1)) == "the audit saw all 3 GPU nodes in scope; max_unaudited 1 allows 1 of 3"


def test_every_format_says_the_limit_and_whether_it_was_exceeded():
    import jsonschema
    from ansible_collections.kubegpu.fleet.tests.lib.paths import REPO
    nodes = fleet(2, unseen("gpu-gone"), unseen("gpu-lost", "not_audited"))
    rep = build.build_report(nodes, generated_at=T, run={"playbook": "x"})
    with open(os.path.join(REPO, "docs", "audit-report.schema.json")) as fh:
        schema = json.load(fh)
    doc = json.loads(json_format.render_json(rep))
    jsonschema.validate(doc, schema)
    assert doc["run"]["max_unaudited"] == "10%" and doc["summary"]["coverage_limit"]["exceeded"] is True
    text = ("the audit did not see 2 of the 4 GPU nodes in scope (1 unreachable, 1 not audited); max_unaudited 10% "
            "allows 0 of 4 (rounded down)")
    md = markdown_format.render_markdown(rep)
    assert "Coverage limit exceeded: %s." % text in paragraphs(md)
    assert "**Coverage limit exceeded:**" in md and markdown_problems(md, rep) == []
    page = html_format.render_html(rep)
    assert '<p id="coverage-limit"><span class="sev critical">exceeded</span> Coverage limit: %s.</p>' % text in page
    assert html_problems(page, rep, set())[0] == []
    prom = prometheus_format.render_prometheus(rep)
    for line in ('kubegpu_audit_unaudited_nodes{reason="not_audited"} 1', 'kubegpu_audit_unaudited_nodes{reason="unreachable"} 1',
                 'kubegpu_audit_unaudited_nodes{reason="failed"} 0', "kubegpu_audit_unaudited_nodes_allowed 0",
                 "kubegpu_audit_gpu_nodes_in_scope 4", "kubegpu_audit_coverage_limit_exceeded 1"):
        assert line in prom.splitlines(), line
    assert promtool_problems(prom) in (None, "")
    # within the limit: said so, the gauge 0
    ok = build.build_report(nodes, generated_at=T, max_unaudited=2)
    assert ("Coverage limit: the audit did not see 2 of the 4 GPU nodes in scope (1 unreachable, 1 not audited); "
            "max_unaudited 2 allows 2 of 4.") in paragraphs(markdown_format.render_markdown(ok))
    assert '<p id="coverage-limit">Coverage limit: ' in html_format.render_html(ok)
    assert "kubegpu_audit_coverage_limit_exceeded 0" in prometheus_format.render_prometheus(ok).splitlines()
    jsonschema.validate(json.loads(json_format.render_json(ok)), schema)


def test_build_report_refuses_a_bad_limit():
    with pytest.raises(build.ReportError, match="more than 100%"):
        build.build_report(fleet(1), generated_at=T, max_unaudited="150%")
