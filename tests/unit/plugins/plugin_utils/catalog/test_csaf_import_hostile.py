# -*- coding: utf-8 -*-
"""The CSAF importer against malformed documents, and ``--merge`` of two revisions of one bulletin.

* Every path of a bulletin in NVIDIA's shape (tests/lib/csaf_docs.py) is replaced by values of the
  wrong type, and every key dropped: ``import_advisory`` either converts the document or raises
  CsafError/CatalogError naming the problem, never another exception.
* Malformed files (empty, not UTF-8, NaN, truncated, 200,000 levels deep, larger than the bound,
  a FIFO, a directory, a symlink loop) through the real CLI: exit 2, ``error: FILE: reason`` on
  stderr, no traceback, no hang.
* ``--merge`` of revisions 1.0.0 and 2.0.0 of a toolkit bulletin (four components): every id once,
  the newer revision's entries, in either order, and the result loads with the audit's loader;
  a merge the catalog would not accept writes nothing (files unchanged by sha256).
"""
import copy
import hashlib
import json
import os
import stat
import subprocess
import sys

import pytest

from ansible_collections.kubegpu.fleet.plugins.module_utils.catalog import validate as cv
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.catalog import load as cl
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.catalog import csaf as ci
from ansible_collections.kubegpu.fleet.tests.lib import csaf_docs
from ansible_collections.kubegpu.fleet.tests.lib import paths

REPO = paths.REPO
SCRIPT = os.path.join(REPO, "scripts", "import_csaf.py")
V2 = os.path.join(REPO, "catalog", "v2")


def two_component_bulletin():
    """Container toolkit and GPU Operator rows, one CVE (the shape of bulletin 5850)."""
    archs = [csaf_docs.arch("All",
                            csaf_docs.row("ctk_aff", "NVIDIA Container Toolkit", "All versions up to and including 1.18.2"),
                            csaf_docs.row("ctk_fix", "NVIDIA Container Toolkit", "1.18.3"),
                            csaf_docs.row("op_aff", "NVIDIA GPU Operator", "All versions up to and including 26.3.0"),
                            csaf_docs.row("op_fix", "NVIDIA GPU Operator", "26.3.1"))]
    return csaf_docs.bulletin("9950", "NVIDIA Container Toolkit", archs,
                              [csaf_docs.vuln("CVE-2099-0201", ["ctk_aff", "op_aff"], ["ctk_fix", "op_fix"], score=8.2)])


def load(aid):
    return {"toolkit": csaf_docs.toolkit_bulletin, "driver": csaf_docs.driver_bulletin,
            "two": two_component_bulletin}[aid]()


def written(tmp_path, aid):
    return csaf_docs.write(tmp_path / "docs", load(aid))


def run(*args, timeout=300):
    res = subprocess.run([sys.executable, SCRIPT] + list(args), capture_output=True, text=True, timeout=timeout,
                         check=False)
    assert "Traceback" not in res.stderr + res.stdout, res.stderr[-3000:]
    return res


def snapshot(root):
    """sha256 of every regular file under ``root``, the kind of everything else (never opened)."""
    out = {}
    for dirpath, dirs, files in os.walk(str(root)):
        for name in dirs + files:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode):
                with open(path, "rb") as f:
                    out[path] = hashlib.sha256(f.read()).hexdigest()
            else:
                out[path] = "kind %o" % stat.S_IFMT(st.st_mode)
    return out


# ------------------------------------------------------------------------------ wrong types everywhere

WRONG = [None, True, 0, -1, 1e308, "", "x", "9.8", [], {}, [None], {"a": None}, ["x"], [[]], "CVE-1"]


def _paths(value, path=()):
    yield path
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, path + (k,))
    elif isinstance(value, list):
        for n, v in enumerate(value):
            yield from _paths(v, path + (n,))


def _mutated(doc, path, value=None, drop=False):
    out = copy.deepcopy(doc)
    target = out
    for key in path[:-1]:
        target = target[key]
    if drop:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return out


@pytest.mark.parametrize("aid", ["toolkit", "driver"])
def test_wrong_types_and_missing_keys_anywhere_raise_a_named_error(aid):
    base = load(aid)
    paths = [p for p in _paths(base) if p]
    converted = refused = 0
    for path in paths:
        cases = [(repr(v), _mutated(base, path, v)) for v in WRONG] + [("dropped", _mutated(base, path, drop=True))]
        for what, doc in cases:
            try:
                ci.import_advisory(doc, path="2099/%s/%s.json" % (aid, aid), verified="2026-11-23")
                converted += 1
            except (ci.CsafError, cv.CatalogError) as exc:
                assert str(exc), (path, what)
                assert len(str(exc)) < 2000, (path, what, str(exc)[:200])
                refused += 1
            except Exception as exc:  # pylint: disable=broad-except
                pytest.fail("%s at %s: %s: %s" % (what, "/".join(map(str, path)), type(exc).__name__, exc))
    assert len(paths) > 100 and refused > 500 and converted > 100, (len(paths), refused, converted)


def test_deep_product_tree_and_huge_strings_are_refused_or_bounded():
    doc = load("toolkit")
    branches = doc["product_tree"]["branches"]
    for _level in range(1000):
        branches = [{"category": "vendor", "name": "x", "branches": branches}]
    doc["product_tree"]["branches"] = branches
    with pytest.raises(ci.CsafError, match="nested deeper than 32 levels"):
        ci.import_advisory(doc)
    doc = load("toolkit")
    doc["document"]["tracking"]["id"] = "5" * (1 << 20)
    with pytest.raises(ci.CsafError) as err:
        ci.import_advisory(doc)
    assert len(str(err.value)) < 400
    doc = load("toolkit")
    doc["vulnerabilities"][0]["scores"][0]["cvss_v3"]["baseScore"] = float("nan")
    with pytest.raises(ci.CsafError, match="baseScore must be a number from 0 to 10"):
        ci.import_advisory(doc)


@pytest.mark.parametrize("data,message", [
    (b"", "not JSON"),
    (b"null", "not a CSAF document"),
    (b"[]", "not a CSAF document"),
    (b"\xff\xfe{\x00}\x00", "not UTF-8"),
    (b'{"document": "\xe9t\xe9"}', "not UTF-8"),
    (b'{"document": NaN}', "NaN is not JSON"),
    (b'{"x": -Infinity}', "-Infinity is not JSON"),
    (b'{"document": {"csaf_version": "2.0"', "not JSON"),
    (b"[" * 200000 + b"]" * 200000, "nested deeper than 32 levels"),
    (b'{"a":' * 100000 + b"1" + b"}" * 100000, "nested deeper than 32 levels"),
    (b'{"s": "' + b"[" * 100 + b'"}', "not a CSAF document"),  # brackets in a string are text
])
def test_parse_json_bounds(data, message):
    with pytest.raises(ci.CsafError, match=message):
        ci.import_advisory(ci.parse_json(data))


def test_a_document_over_the_size_bound_is_not_read(tmp_path):
    path = tmp_path / "huge.json"
    with open(str(path), "wb") as f:
        f.truncate(ci.MAX_BYTES + 1)
    with pytest.raises(ci.CsafError, match="larger than"):
        ci.read_document(str(path))


def test_the_deadline_interrupts_a_runaway_conversion():
    with pytest.raises(ci.DeadlineExceeded, match="took longer than"):
        with ci.deadline(0.05):
            while True:
                pass


class OuterAlarm(Exception):
    pass


def test_an_alarm_armed_outside_is_kept():
    """Ansible's task timeout arms SIGALRM in the worker: the deadline re-arms what is left of
    it afterwards, and stands aside when the outer alarm is due first."""
    import signal

    def outer(_signum, _frame):
        raise OuterAlarm()

    previous = signal.signal(signal.SIGALRM, outer)
    try:
        signal.setitimer(signal.ITIMER_REAL, 3600)
        with ci.deadline(30):
            pass
        remaining, _interval = signal.getitimer(signal.ITIMER_REAL)
        assert 3000 < remaining <= 3600 and signal.getsignal(signal.SIGALRM) is outer
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        with pytest.raises(OuterAlarm):
            with ci.deadline(30):
                while True:
                    pass
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _files(tmp_path):
    d = tmp_path / "docs"
    d.mkdir()
    out = {}

    def put(name, data):
        path = d / name
        path.write_bytes(data)
        out[name] = str(path)

    put("empty.json", b"")
    put("latin1.json", json.dumps(load("driver")).encode().replace(b"NVIDIA", b"NVIDIA\xe9"))
    put("nan.json", json.dumps(dict(load("driver"), x=float("nan"))).encode())
    put("deep.json", b"[" * 200000 + b"]" * 200000)
    put("types.json", json.dumps(dict(load("driver"), vulnerabilities={"cve": 1})).encode())
    put("keys.json", json.dumps({"document": {"csaf_version": "2.0", "category": "csaf_security_advisory",
                                              "tracking": {"id": "1"}}, "product_tree": {"branches": [1]}}).encode())
    put("branch.json", json.dumps(dict(load("driver"), product_tree={"branches": [{"branches": "x"}]})).encode())
    with open(str(d / "huge.json"), "wb") as f:
        f.truncate(ci.MAX_BYTES + 10)
    out["huge.json"] = str(d / "huge.json")
    os.mkfifo(str(d / "fifo.json"))
    out["fifo.json"] = str(d / "fifo.json")
    os.symlink(str(d / "loop.json"), str(d / "loop2.json"))
    os.symlink(str(d / "loop2.json"), str(d / "loop.json"))
    out["loop.json"] = str(d / "loop.json")
    (d / "dir.json").mkdir()
    out["dir.json"] = str(d / "dir.json")
    out["missing.json"] = str(d / "missing.json")
    return out


def test_cli_refuses_each_malformed_file_with_a_message(tmp_path):
    files = _files(tmp_path)
    good = written(tmp_path, "driver")
    catalog = tmp_path / "v2"
    catalog.mkdir()
    before = snapshot(tmp_path)
    for name, path in sorted(files.items()):
        for mode in ([], ["--merge", str(catalog)], ["--check", V2]):
            res = run(*(mode + [good, path]))
            assert res.returncode == 2, (name, mode, res.stderr[-500:])
            lines = res.stderr.strip().splitlines()
            assert lines[-1].startswith("error: %s: " % path), (name, lines[-1:])
            assert len(lines[-1]) < 800
    assert snapshot(tmp_path) == before


# ------------------------------------------------------------------------------ --merge


def revisions(tmp_path):
    """Revision 1.0.0 (older, a different fix) and 2.0.0 of a toolkit bulletin."""
    d = tmp_path / "2099" / "9959"
    d.mkdir(parents=True)
    new = load("toolkit")
    old = copy.deepcopy(new)
    old["document"]["tracking"].update(version="1.0.0", current_release_date="2025-07-15T00:00:00Z")
    for branch in old["product_tree"]["branches"][0]["branches"][0]["branches"]:
        if branch["product"]["name"] == "v1.17.8":
            branch["product"]["name"] = "1.17.9"
    (d / "old").mkdir()
    (d / "old" / "9959.json").write_text(json.dumps(old))
    (d / "9959.json").write_text(json.dumps(new))
    return str(d / "old" / "9959.json"), str(d / "9959.json")


@pytest.mark.parametrize("order", ["old-first", "new-first"])
def test_merging_two_revisions_keeps_each_id_once_from_the_newer_revision(tmp_path, order):
    old, new = revisions(tmp_path)
    catalog = tmp_path / "v2"
    catalog.mkdir()
    docs = [old, new] if order == "old-first" else [new, old]
    res = run("--merge", str(catalog), "--verified", "2026-11-23", *docs)
    assert res.returncode == 0, res.stderr
    assert ("replaces revision 1.0.0" if order == "old-first" else "is kept over revision 1.0.0") in res.stderr
    assert sorted(os.listdir(str(catalog))) == ["container-toolkit.yml", "device-plugin.yml", "gpu-operator.yml",
                                                "mig-manager.yml"]
    cl._CACHE.clear()
    _docs, entries = cl.load_bundled_docs(str(catalog))  # the audit's loader accepts the result
    ids = [e["id"] for e in entries]
    assert len(ids) == len(set(ids)) == 4
    assert set(e["advisory"]["revision"] for e in entries) == {"2.0.0"}
    ctk = [e for e in entries if e["id"] == "ctk-cve-2099-0101"][0]
    assert ctk["affected"][0]["fixed"] == "1.17.8"
    again = run("--merge", str(catalog), old, new)  # nothing new, nothing rewritten
    assert again.returncode == 0 and again.stderr.count("nothing new") == 4


def test_one_revision_with_two_contents_is_refused_and_nothing_is_written(tmp_path):
    old, new = revisions(tmp_path)
    with open(old) as f:
        doc = json.load(f)
    doc["document"]["tracking"]["version"] = "2.0"  # claims the revision of the other file
    with open(old, "w") as f:
        json.dump(doc, f)
    catalog = tmp_path / "v2"
    catalog.mkdir()
    (catalog / "driver.yml").write_bytes(open(os.path.join(V2, "driver.yml"), "rb").read())
    before = snapshot(catalog)
    res = run("--merge", str(catalog), new, old)
    assert res.returncode == 2 and "claims the same revision" in res.stderr
    assert res.stderr.strip().splitlines()[-1].startswith("error: %s: " % old)
    assert snapshot(catalog) == before


def test_a_merge_the_catalog_would_refuse_writes_nothing(tmp_path):
    toolkit, two = written(tmp_path / "in", "toolkit"), written(tmp_path / "in2", "two")
    catalog = tmp_path / "v2"
    catalog.mkdir()
    # 'entries' is not the file's last key: appended entries would land elsewhere
    (catalog / "container-toolkit.yml").write_text(
        "schema_version: 2\nentries:\n  - id: ctk-site\n    kind: defect\n    title: t\n    severity: low\n"
        "    affected: [{fixed: \"1.0.1\"}]\n    remediation: r\n"
        "    sources: [{url: \"https://example.com/\", verified: \"2026-01-01\"}]\n"
        "component: container-toolkit\nversion_scheme: semver\n")
    (catalog / "driver.yml").write_bytes(open(os.path.join(V2, "driver.yml"), "rb").read())
    before = snapshot(tmp_path)
    res = run("--merge", str(catalog), toolkit)
    assert res.returncode == 2 and "nothing written" in res.stderr, res.stderr
    assert snapshot(tmp_path) == before
    # an invalid catalog is refused before anything is planned
    (catalog / "driver.yml").write_text((catalog / "driver.yml").read_text().replace("https://", "javascript://", 1))
    before = snapshot(tmp_path)
    res = run("--merge", str(catalog), two)
    assert res.returncode == 2 and "invalid before the merge" in res.stderr and "url" in res.stderr
    assert snapshot(tmp_path) == before


def test_plan_merge_validates_with_the_audits_reader_in_memory(tmp_path):
    catalog = tmp_path / "v2"
    catalog.mkdir()
    generated, _notes = ci.combine([("9950.json", ci.import_advisory(load("two"), verified="2026-11-23"))])
    changes, lines = ci.plan_merge(str(catalog), generated)
    assert os.listdir(str(catalog)) == []  # planning writes nothing
    assert sorted(os.path.basename(p) for p in changes) == ["container-toolkit.yml", "gpu-operator.yml"]
    assert all("appended 1 entry" in line for line in lines)
    docs = [cl.parse_document(text, path) for path, text in changes.items()]
    assert len(cv.validate_catalog(docs)) == 2
    ci.write_files(changes)
    assert sorted(os.listdir(str(catalog))) == ["container-toolkit.yml", "gpu-operator.yml"]  # no temp file left
    assert oct(os.stat(str(catalog / "gpu-operator.yml")).st_mode & 0o777) == "0o644"
