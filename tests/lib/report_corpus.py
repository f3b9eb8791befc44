# -*- coding: utf-8 -*-
"""The hostile corpus of the audit report's unit tests (tests/unit/plugins/plugin_utils/audit/report/).

Every value a node can influence (its name, finding ids, titles, evidence, remediation text,
references, errors, catalog sources and scores) is taken from HOSTILE: line breaks of every
kind, pipes, backslashes, HTML, backticks, Markdown structure, link syntax, bidi controls, NUL,
lone surrogates, a 1 MB string, javascript: URLs and NaN/Infinity numbers. ``corpus_nodes`` and
``cluster_findings`` are ``build_report``'s input, ``REPORT_ARGS`` the rest of its arguments;
each format's test builds the report with the real ``build_report`` and renders it with the real
renderer. Knows nothing of the collection's code.

Import as ``ansible_collections.kubegpu.fleet.tests.lib.report_corpus``.
"""
from __future__ import absolute_import, division, print_function

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
# Links a report may contain: the node anchors and these (they pass module_utils/catalog/validate.url_problem).
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


REPORT_ARGS = {"generated_at": "2026-11-22T05:00:00Z", "collection_version": "0.1.0\n<b>",
               "run": {"nan": float("nan"), "x": "<b>"}}
