# -*- coding: utf-8 -*-
"""Catalog v2 validation in code: hostile source URLs, non-finite numbers, and every schema rule.

``module_utils/catalog/validate.validate_catalog`` is the one validator of bundled files, ``catalog_extra`` and
the CSAF importer's output, on the controller and on the node, and needs no ``jsonschema``.
The differential test mutates valid entries at every path with wrong types, hostile strings
and NaN/Infinity, and requires the code to refuse whatever the JSON schema refuses, with a
CatalogError (never another exception). A child interpreter without ``jsonschema`` shows that
``catalog_extra`` with a ``javascript:`` URL or a NaN score is still refused.
"""
import copy
import json
import math
import os
import subprocess
import sys

import jsonschema
import pytest

from ansible_collections.kubegpu.fleet.plugins.module_utils.catalog import validate as cv
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.catalog import load as cl
from ansible_collections.kubegpu.fleet.tests.lib.paths import COLLECTIONS_ROOT, REPO

SCHEMA = os.path.join(REPO, "catalog", "schema", "catalog-v2.schema.json")

GOOD_URLS = [
    "https://nvidia.custhelp.com/app/answers/detail/a_id/5659",
    "https://github.com/NVIDIA/product-security/blob/main/2025/5659/5659.json",
    "https://example.com", "https://example.com:8443/a?b=c&d=%20#frag", "https://a-b.example/x(y)",
]
BAD_URLS = [
    ("javascript:alert(1)", "https://"), ("JAVASCRIPT:alert(1)", "https://"), ("jav\tascript:alert(1)", "RFC 3986"),
    ("http://example.com/", "https://"), ("HTTPS://example.com/", "https://"), ("data:text/html,x", "https://"),
    ("vbscript:x", "https://"), ("//example.com/", "https://"), ("https:example.com", "https://"),
    ("https://", "https://"), ("https:///path", "https://"), ("https://user:pw@example.com/", "user name"),
    ("https://user@example.com/", "user name"), ("https://example.com@evil.example/", "user name"),
    ("https://exa mple.com/", "RFC 3986"), ("https://example.com/a b", "RFC 3986"),
    ("https://example.com/\r\nSet-Cookie:x", "RFC 3986"), ("https://example.com/\x00", "RFC 3986"),
    ("https://example.com/\u202etxt.exe", "RFC 3986"), ("https://ex\u0430mple.com/", "RFC 3986"),
    ("https://example.com\\@evil.example/", "RFC 3986"), ('https://example.com/"onmouseover=x', "RFC 3986"),
    ("https://example.com/<script>", "RFC 3986"), ("https://-bad-.example/", "DNS host"),
    ("https://example..com/", "DNS host"), ("https://example.com:0/", "port 0"),
    ("https://example.com:99999/", "port 99999"), ("https://example.com:/", "https://"),
    ("https://" + "a" * 3000 + ".com/", "longer than 2048"), ("", "RFC 3986"),
    ("https://example.com/\n", "RFC 3986"), ("https://example.com\n", "RFC 3986"),
]


def _source(url):
    return {"url": url, "verified": "2026-11-23"}


def security_doc(**over):
    entry = {
        "id": "site-cve-2025-23266", "kind": "security", "title": "t", "description": "d",
        "cves": [{"id": "CVE-2025-23266", "cwe": "CWE-426",
                  "cvss": {"version": "3.1", "base_score": 9.0,
                           "vector": "CVSS:3.1/AV:A/AC:L/PR:L/UI:N/S:C/C:H/I:H/A:H"}}],
        "severity": "critical",
        "affected": [{"introduced": "1.17.0", "last_affected": "1.17.7", "fixed": "1.17.8", "note": "n",
                      "conditions": {"runtime": {"not_in": ["crun"]}}}],
        "conditions": {"injection_mode": ["legacy"], "cdi_enabled": False, "gpu_model": "H100"},
        "remediation": "r", "mitigation": "m", "notes": "n",
        "advisory": {"publisher": "NVIDIA", "id": "5659", "title": "t", "revision": "1.0", "date": "2025-07-15"},
        "sources": [dict(_source(GOOD_URLS[0]), what="w")],
    }
    entry.update(over)
    return {"schema_version": 2, "component": "container-toolkit", "version_scheme": "semver", "entries": [entry]}


def defect_doc():
    return {"schema_version": 2, "component": "driver", "version_scheme": "driver", "entries": [{
        "id": "site-defect", "kind": "defect", "title": "t", "severity": "high", "remediation": "r",
        "affected": [{"branch": "570", "introduced": "570.124.06", "fixed": "570.172.08"}],
        "conditions": {"mig_mixed": True}, "sources": [_source(GOOD_URLS[1])]}]}


@pytest.fixture(scope="module")
def validator():
    with open(SCHEMA) as f:
        return jsonschema.Draft202012Validator(json.load(f))


def test_the_two_base_documents_pass_code_and_schema(validator):
    for doc in (security_doc(), defect_doc()):
        assert list(validator.iter_errors(doc)) == []
        cv.validate_catalog([copy.deepcopy(doc)])


@pytest.mark.parametrize("url", GOOD_URLS)
def test_good_urls(url):
    assert cv.url_problem(url) is None and cv.is_safe_url(url)
    cv.validate_catalog([security_doc(sources=[_source(url)])])


@pytest.mark.parametrize("url,why", BAD_URLS, ids=[ascii(u[0])[:40] for u in BAD_URLS])
def test_bad_urls_are_refused_with_the_reason(url, why):
    assert why in cv.url_problem(url)
    assert not cv.is_safe_url(url)
    with pytest.raises(cv.CatalogError, match="source") as err:
        cv.validate_catalog([security_doc(sources=[_source(GOOD_URLS[0]), _source(url)][1:])])
    assert len(str(err.value)) < 600  # a 3000-character URL is not echoed whole


@pytest.mark.parametrize("score", [float("nan"), float("inf"), float("-inf"), True, "9.0", 10.5, -0.1, None, [9.0]])
def test_base_score_must_be_a_finite_number_from_0_to_10(score):
    doc = security_doc()
    doc["entries"][0]["cves"][0]["cvss"]["base_score"] = score
    with pytest.raises(cv.CatalogError):
        cv.validate_catalog([doc])


def test_non_finite_numbers_are_refused_anywhere_even_from_yaml():
    doc = cl.parse_document(b"schema_version: 2\ncomponent: driver\nversion_scheme: driver\nentries: [.nan]\n", "x.yml")
    with pytest.raises(cv.CatalogError, match="entries/0 is nan: numbers must be finite"):
        cv.validate_catalog([doc])
    doc = security_doc()
    doc["entries"][0]["cves"][0]["cvss"]["base_score"] = cl.parse_document(b"-.inf", "y")
    with pytest.raises(cv.CatalogError, match="base_score is -inf"):
        cv.validate_catalog([doc])


def test_deep_nesting_is_refused_without_recursion():
    value = "x"
    for _level in range(100000):
        value = {"a": value}
    with pytest.raises(cv.CatalogError, match="nested deeper than 32 levels"):
        cv.validate_catalog([security_doc(notes=value)])


@pytest.mark.parametrize("field,value", [("id", "site-x\n"), ("severity", "high\n")])
def test_a_trailing_newline_is_not_a_match(field, value):
    with pytest.raises(cv.CatalogError):
        cv.validate_catalog([security_doc(**{field: value})])
    doc = security_doc()
    doc["entries"][0]["cves"][0]["id"] = "CVE-2025-23266\n"
    with pytest.raises(cv.CatalogError, match="CVE id"):
        cv.validate_catalog([doc])


def test_hostile_values_are_named_briefly():
    with pytest.raises(cv.CatalogError) as err:
        cv.validate_catalog([security_doc(severity="x" * (1 << 20))])
    assert len(str(err.value)) < 400
    doc = security_doc()
    doc["entries"][0][1] = "int key"
    with pytest.raises(cv.CatalogError, match="unknown key 1 "):
        cv.validate_catalog([doc])


# ------------------------------------------------------------------------------ code vs schema

HOSTILE = [None, True, 0, 1.5, float("nan"), float("inf"), "", " ", "x", "javascript:alert(1)", [], {}, ["x"],
           {"x": 1}, "1.17.8\n", "CVE-2025-1", "2025-13-45x"]


def _paths(value, path=()):
    yield path
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, path + (k,))
    elif isinstance(value, list):
        for n, v in enumerate(value):
            yield from _paths(v, path + (n,))


def _set(doc, path, value):
    out = copy.deepcopy(doc)
    if not path:
        return value
    target = out
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return out


def _drop(doc, path):
    out = copy.deepcopy(doc)
    target = out
    for key in path[:-1]:
        target = target[key]
    del target[path[-1]]
    return out


def _mutations(doc):
    for path in _paths(doc):
        for value in HOSTILE:
            yield "%s=%r" % ("/".join(map(str, path)), value), _set(doc, path, value)
        if path:
            yield "drop %s" % "/".join(map(str, path)), _drop(doc, path)
        parent = doc
        for key in path:
            parent = parent[key]
        if isinstance(parent, dict):
            yield "extra key under %s" % "/".join(map(str, path)), _set(doc, path + ("unexpected",), 1)


def test_the_code_refuses_everything_the_schema_refuses(validator):
    checked = refused_by_schema = 0
    for base in (security_doc(), defect_doc()):
        for name, doc in _mutations(base):
            checked += 1
            schema_says_bad = bool(list(validator.iter_errors(doc))) if isinstance(doc, dict) else True
            try:
                cv.validate_catalog([copy.deepcopy(doc)])
                code_says_bad = False
            except cv.CatalogError:
                code_says_bad = True
            refused_by_schema += schema_says_bad
            assert code_says_bad or not schema_says_bad, "the schema refuses, the code accepts: %s" % name
    assert checked > 1000 and refused_by_schema > 800, (checked, refused_by_schema)


def test_the_schema_url_pattern_is_no_looser_than_https():
    with open(SCHEMA) as f:
        assert json.load(f)["$defs"]["source"]["properties"]["url"]["pattern"].startswith("^https://")


# ------------------------------------------------------------------------------ without jsonschema

CHILD = r"""
import json, sys
sys.modules["jsonschema"] = None  # as on a controller or EE without the optional package
sys.path.insert(0, sys.argv[1])
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.catalog import load as cl
assert cl._schema_validator() is None
out = []
for doc in json.loads(sys.stdin.read()):
    out.append(cl.for_task([doc]).error)
print(json.dumps(out))
"""


def test_catalog_extra_is_refused_without_jsonschema():
    bad_url = security_doc(sources=[_source("javascript:alert(document.cookie)")])
    cred_url = security_doc(sources=[_source("https://user:pw@evil.example/")])
    nan = security_doc()
    nan["entries"][0]["cves"][0]["cvss"]["base_score"] = float("nan")
    good = security_doc()
    docs = json.dumps([bad_url, cred_url, nan, good], allow_nan=True)
    res = subprocess.run([sys.executable, "-c", CHILD, COLLECTIONS_ROOT], input=docs, capture_output=True,
                         text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr
    errors = json.loads(res.stdout)
    assert "url" in errors[0] and "https://" in errors[0], errors[0]
    assert "user name or password" in errors[1], errors[1]
    assert "base_score" in errors[2] and "nan" in errors[2], errors[2]
    assert errors[3] is None
    assert math.isnan(nan["entries"][0]["cves"][0]["cvss"]["base_score"])


def test_parsed_versions_are_remembered_up_to_a_bound_and_errors_never(monkeypatch):
    from ansible_collections.kubegpu.fleet.plugins.module_utils.catalog import validate as v
    monkeypatch.setattr(v, "_PARSED", {})
    monkeypatch.setattr(v, "PARSED_MAX", 3)
    one = v.parse_version("driver", "570.172.08")
    assert v.parse_version("driver", "570.172.08") is one
    assert v.parse_version("semver", "570.172.08") is not one        # the scheme is part of the key
    for bad in ("570.x", "not a version"):
        with pytest.raises(v.CatalogError):
            v.parse_version("driver", bad)
    assert len(v._PARSED) == 2
    v.parse_version("driver", "580.95.05")
    v.parse_version("driver", "595.45.04")                              # past the bound: parsed, not kept
    assert len(v._PARSED) == 3 and ("driver", "595.45.04") not in v._PARSED
    assert v.parse_version("driver", "595.45.04") == v.parse_version("driver", "595.45.04")
    assert v.in_branch(v.parse_version("driver", "570.172.08"), "570")
    assert not v.in_branch(v.parse_version("driver", "570.172.08"), "57")
    assert v.in_branch(v.parse_version("device-plugin", "v0.17.1"), "0.17")
