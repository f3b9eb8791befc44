# -*- coding: utf-8 -*-
"""Bad-input corpus for catalog_extra and the audit report's four formats, through the real
``ansible-playbook`` on localhost (the rules of test_bad_input_gpu.py: no traceback, no hang, a
clear ``msg``, the files the task was pointed at intact by sha256, nothing written elsewhere).

* ``catalog_extra`` (driver_guard's action plugin, the path audit_node shares): javascript:,
  credential, control-character and bidi URLs, NaN and infinite CVSS scores, a 1 MB string,
  deep nesting, every one refused on the controller with ``invalid catalog_extra: ...`` (by the
  JSON schema where jsonschema is installed, else by the same rules in code:
  tests/unit/plugins/module_utils/catalog/test_catalog_validate_hostile.py runs them without jsonschema).
* ``audit_report``: hosts whose audit records carry hostile node names, finding ids, titles,
  evidence (NaN, Infinity, 1 MB), references (javascript: URLs) and errors; the four files
  must parse with independent parsers into exactly the template's structure
  (``lib.report_checks``), and promtool must accept the metrics.

The CSAF importer's corpus is tests/unit/plugins/plugin_utils/catalog/test_csaf_import_hostile.py (a maintainer script, run
through its CLI there); the renderers' unit corpus is tests/lib/report_corpus.py, run by
tests/unit/plugins/plugin_utils/audit/report/test_*_format.py.
"""
from __future__ import absolute_import, division, print_function

import json
import os

from lib.report_checks import html_problems, markdown_problems, promtool_problems, strict_json
from test_bad_input_gpu import DEPTH, HARNESS_ENV, NVRM, VERSION, assert_clean, nested_dict, run_cases, snapshot, write

BIG = "B" * (1 << 20)
JS = "javascript:alert(document.cookie)"
NAN = "{{ 'nan' | float }}"
INF = "{{ 'inf' | float }}"


def _ctk_doc(url="https://example.com/advisory", score=9.0, **over):
    entry = {"id": "site-ctk-cve-2025-23266", "kind": "security", "title": "t", "severity": "critical",
             "cves": [{"id": "CVE-2025-23266", "cvss": {"version": "3.1", "base_score": score,
                                                        "vector": "CVSS:3.1/AV:A/AC:L/PR:L/UI:N/S:C/C:H/I:H/A:H"}}],
             "affected": [{"introduced": "1.17.0", "fixed": "1.17.8"}], "remediation": "upgrade",
             "advisory": {"id": "5659", "revision": "2.0.0", "date": "2025-08-12"},
             "sources": [{"url": url, "verified": "2026-11-23"}]}
    entry.update(over)
    return {"schema_version": 2, "component": "container-toolkit", "version_scheme": "semver", "entries": [entry]}


def test_catalog_extra_bad_inputs(ansible, tmp_path):
    proc = tmp_path / "proc"
    write(proc / "driver" / "nvidia" / "version", NVRM)
    known = {"driver_version": VERSION, "mig_mixed": False, "mig_enabled": False,
             "gpu_names": ["NVIDIA H100 80GB HBM3"], "proc_path": str(proc), "timeout": 5}
    cases = [
        ("url_javascript", _ctk_doc(JS), "url"),
        ("url_javascript_upper", _ctk_doc("JAVASCRIPT:alert(1)"), "url"),
        ("url_http", _ctk_doc("http://example.com/"), "url"),
        ("url_credentials", _ctk_doc("https://user:pw@example.com/"), "url"),
        ("url_crlf", _ctk_doc("https://example.com/\r\nSet-Cookie: x=1"), "url"),
        ("url_nul", _ctk_doc("https://example.com/\x00"), "url"),
        ("url_bidi", _ctk_doc("https://example.com/\u202egpj.exe"), "url"),
        ("url_huge", _ctk_doc("https://example.com/" + BIG), "url"),
        ("score_nan", _ctk_doc(score=NAN), "base_score is nan"),
        ("score_inf", _ctk_doc(score=INF), "base_score is inf"),
        ("score_11", _ctk_doc(score=11), "base_score"),
        ("score_string", _ctk_doc(score="9.0"), "base_score"),
        ("title_huge_id", _ctk_doc(id="x" * (1 << 20)), "id"),
        ("notes_nested", _ctk_doc(notes=nested_dict(DEPTH)), "nested deeper than 32 levels"),
        ("conditions_wrong_type", _ctk_doc(conditions="runtime=runc"), "conditions"),
    ]
    before = snapshot(tmp_path)
    res = run_cases(ansible, "driver_guard", [(cid, dict(known, catalog_extra=[doc]), None)
                                              for cid, doc, _word in cases])
    assert snapshot(tmp_path) == before
    for cid, _doc, word in cases:
        r = res[cid]
        assert r.get("failed"), (cid, r)
        assert r["msg"].startswith("invalid catalog_extra: "), (cid, r["msg"][:300])
        assert word in r["msg"], (cid, r["msg"][:300])
        assert len(r["msg"]) < 2000, (cid, len(r["msg"]))
    # the same document with a good URL and score is accepted (the corpus fails for its reason)
    ok = run_cases(ansible, "driver_guard", [("good", dict(known, catalog_extra=[_ctk_doc()]), None)])
    assert not ok["good"].get("failed"), ok["good"].get("msg")


HOSTILE = ["pipe|cell", "esc\\|aped", "lone\rcr", "crlf\r\nline", "<script>alert(1)</script>", '"><svg onload=x>',
           "`tick`", "# heading", "- item", "> quote", "1. ordered", "[link](%s)" % JS, "bidi\u202eevil\u202c",
           "nul\x00byte", "zero\u200bwidth", "&lt;&amp;", "https://evil.example/bare", "www.evil.example"]
LINKABLE = ["https://ok.example/ref", "https://evil.example/bare"]


def _records():
    """Audit records for hosts h00..hNN, as the audit role sets kubegpu_audit per host."""
    out = {}
    for i, text in enumerate(HOSTILE):
        status = ("audited", "audited", "unreachable", "failed")[i % 4]
        finding = {"id": "x.%02d.%s" % (i, text), "severity": ("critical", "warning", "info")[i % 3], "title": text,
                   "evidence": {"value": text, "nan": NAN, "inf": INF, "hands_on": i % 5 == 0, "big": BIG if i == 0 else ""},
                   "remediation": {"summary": text},
                   "references": ["https://ok.example/ref", JS, "https://user:pw@evil.example/", text]}
        out["h%02d" % i] = {"status": status, "node": "n%02d-%s" % (i, text), "error": text,
                            "findings": [finding] if status == "audited" else []}
    out["h%02d" % len(HOSTILE)] = {"status": "audited", "node": BIG, "findings": []}
    return out


def test_audit_report_hostile_records_render_safely(ansible, tmp_path):
    dest = tmp_path / "reports"
    records = _records()
    outside = snapshot(tmp_path)
    # add_host, then set_fact per host as the audit role does (set_fact templates: NaN is a float)
    tasks = []
    for host, record in sorted(records.items()):
        tasks.append({"name": "add %s" % host, "ansible.builtin.add_host": {"name": host}})
        tasks.append({"name": "record %s" % host, "ansible.builtin.set_fact": {"kubegpu_audit": record},
                      "delegate_to": host, "delegate_facts": True})
    tasks.append({"name": "report", "kubegpu.fleet.audit_report": {
        # a host that is not in the inventory is a failed node named by the host
        "hosts": sorted(records) + ["never-ran-\u202e|<b>"], "dest": str(dest), "fail_on": "never",
        "cluster_findings": [{"id": "cluster.x", "severity": "info", "title": "cluster |<b>\r\n", "node": None}],
        "run": {"nan": NAN, "text": "<b>|"}}, "ignore_errors": True})
    res = ansible.playbook([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}],
                           env=HARNESS_ENV, timeout=600)
    r = res.task("report")
    assert_clean("report", r)
    assert not r.get("failed"), r.get("msg")
    assert sorted(os.listdir(str(dest))) == ["kubegpu-audit.html", "kubegpu-audit.json", "kubegpu-audit.md",
                                             "kubegpu_audit.prom"]
    after = snapshot(tmp_path)
    assert dict((p, k) for p, k in after.items() if not p.startswith(str(dest))) == outside  # nothing elsewhere

    def read(name):
        with open(str(dest / name), encoding="utf-8", newline="") as f:  # CR as written
            return f.read()

    report = strict_json(read("kubegpu-audit.json"))
    assert report["summary"]["nodes_total"] == len(records) + 1
    names = set(n["name"] for n in report["nodes"])
    assert "n01-esc\\|aped" in names and "never-ran-\u202e|<b>" in names and BIG in names
    ev = [f for n in report["nodes"] for f in n["findings"]][0]["evidence"]
    assert (ev["nan"], ev["inf"]) == ("NaN", "Infinity")
    assert report["run"]["nan"] == "NaN"
    assert markdown_problems(read("kubegpu-audit.md"), report) == []
    problems, external = html_problems(read("kubegpu-audit.html"), report, LINKABLE)
    assert problems == [] and sorted(set(external)) == sorted(LINKABLE)
    prom = promtool_problems(read("kubegpu_audit.prom"))
    assert prom in (None, ""), prom  # None: promtool not installed (Debian package prometheus)
    assert json.dumps(r["summary"], allow_nan=False)  # the task result is strict JSON too
