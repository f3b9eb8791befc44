"""The Markdown and HTML reports say what changed since the previous run (a report built from published results)."""
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit import fleet, results
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import build

CRIT = {"id": "driver.known_bad", "severity": "critical", "title": "Known-bad driver", "evidence": {"v": 1}}
WARN = {"id": "kubelet.memory_reservation", "severity": "warning", "title": "No memory reservation"}
UVM = {"id": "uvm.node_missing", "severity": "critical", "title": "no /dev/nvidia-uvm"}
T1, T2 = "2026-11-01T02:00:00Z", "2026-11-10T02:00:00Z"


def entry(name, *findings, status="audited"):
    return {"name": name, "status": status, "findings": list(findings)}


def test_the_markdown_report_says_what_changed():
    from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import markdown_format
    prev = results.check_record(results.make_record(entry("gpu-a", CRIT, WARN), "run-1", T1))
    records = {"gpu-a": results.make_record(entry("gpu-a", CRIT, UVM), "run-2", T2, previous=prev)}
    nodes, run_records, _out = fleet.fleet_nodes(records, {"gpu-x": "the result on Node gpu-x is not trusted: schema"},
                                                 "run-2", known=["gpu-b"])
    report = fleet.annotate_changes(build.build_report(nodes, generated_at=T2), run_records, "run-2",
                                    {"gpu-x": "the result on Node gpu-x is not trusted: schema"})
    text = markdown_format.render_markdown(report)
    assert "## Since the previous run" in text and "1 new, 1 resolved, 1 persisting" in text
    assert "gpu-a `kubelet.memory_reservation`, first seen %s" % T1 in text
    assert "**Not audited in this run:** gpu-b, gpu-x" in text
    assert "gpu-x: the result on Node gpu-x is not trusted: schema" in text


def test_the_html_report_says_what_changed_escaped():
    from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import html_format
    prev = results.check_record(results.make_record(entry("gpu-a", CRIT, WARN), "run-1", T1))
    records = {"gpu-a": results.make_record(entry("gpu-a", CRIT, UVM), "run-2", T2, previous=prev)}
    reason = "the result on Node gpu-x is not trusted: <script>alert(1)</script>"
    nodes, run_records, _out = fleet.fleet_nodes(records, {"gpu-x": reason}, "run-2")
    report = fleet.annotate_changes(build.build_report(nodes, generated_at=T2), run_records, "run-2", {"gpu-x": reason})
    page = html_format.render_html(report)
    assert '<section id="changes"><h2>Since the previous run</h2><p>Run run-2: 1 new, 1 resolved, 1 persisting' in page
    assert "<code>kubelet.memory_reservation</code>, first seen %s" % T1 in page
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
