"""plugin_utils/catalog/refresh.py: sources, bounds, the overlay's contents and its refusal."""
import copy
import datetime
import io
import os

import pytest

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import build
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.catalog import csaf
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.catalog import load
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.catalog import refresh
from ansible_collections.kubegpu.fleet.tests.lib import csaf_docs


class Body(io.BytesIO):
    """A response whose reads hand out ``step`` bytes at a time."""

    def __init__(self, data, step=1 << 16):
        super().__init__(data)
        self.step = step

    def read(self, n=-1):
        return super().read(min(n, self.step) if n and n > 0 else self.step)


def opener_of(pages):
    def opener(url, **kwargs):
        assert kwargs["timeout"] == 5 and kwargs["validate_certs"] is True
        if url not in pages:
            raise OSError("HTTP Error 404: Not Found")
        return Body(pages[url])
    return opener


def test_index_lines_are_relative_document_paths():
    text = "# CSAF index\n\n2099/9930/9930.json\n2099/9930/9930.json.sha256\n2098/x/y.json\n"
    assert refresh.index_urls("https://m.example/csaf/index.txt", text) == [
        "https://m.example/csaf/2099/9930/9930.json", "https://m.example/csaf/2098/x/y.json"]
    for bad in ("../etc/passwd.json", "/abs/a.json", "https://other.example/a.json", "a//b.json", "a b.json"):
        with pytest.raises(refresh.RefreshError, match="is not a relative document path"):
            refresh.index_urls("https://m.example/index.txt", bad + "\n")


def test_fetch_is_bounded_in_size_and_refuses_what_fails():
    big = b"x" * (1 << 17)
    with pytest.raises(refresh.RefreshError, match="larger than 1000 bytes"):
        refresh.fetch("https://m/a", 5, True, 1000, opener=opener_of({"https://m/a": big}))
    assert refresh.fetch("https://m/a", 5, True, len(big), opener=opener_of({"https://m/a": big})) == big
    with pytest.raises(refresh.RefreshError, match="cannot fetch https://m/b: HTTP Error 404"):
        refresh.fetch("https://m/b", 5, True, 1000, opener=opener_of({}))


def test_fetch_stops_a_download_that_outlasts_the_deadline():
    ticks = iter(range(0, 1000, 100))  # a clock on which each read takes 100 s (a server trickling bytes)
    with pytest.raises(refresh.RefreshError, match="took longer than 120 s"):
        refresh.fetch("https://m/a", 5, True, 1 << 20, opener=opener_of({"https://m/a": b"y" * 1000}),
                      clock=lambda: next(ticks))


def test_urls_and_index_through_read_sources():
    docs = {"https://m/i/2099/9930/9930.json": csaf_docs.json_bytes(csaf_docs.driver_bulletin()),
            "https://m/i/index.txt": b"2099/9930/9930.json\n"}
    args = {"index_url": "https://m/i/index.txt", "timeout": 5, "validate_certs": True, "max_documents": 10,
            "verified": "2026-11-27"}
    ((where, result),) = refresh.read_sources(args, opener=opener_of(docs))
    assert where == "https://m/i/2099/9930/9930.json" and sorted(result["entries"]) == ["driver"]
    with pytest.raises(refresh.RefreshError, match="more than max_documents"):
        refresh.read_sources(dict(args, max_documents=0), opener=opener_of(docs))
    with pytest.raises(refresh.RefreshError, match="is not an http"):
        refresh.read_sources(dict(args, index_url="file:///etc/index.txt"), opener=opener_of(docs))


def test_mirror_files_walks_json_only_and_is_bounded(tmp_path):
    csaf_docs.write(tmp_path, csaf_docs.driver_bulletin())
    csaf_docs.write(tmp_path, csaf_docs.toolkit_bulletin())
    (tmp_path / "README.md").write_text("x")
    (tmp_path / "2099" / "9930" / "CVE-2099-0001.json").write_text("{}")  # NVIDIA's CVE record beside the bulletin
    os.symlink("/etc", str(tmp_path / "link"))
    found = refresh.mirror_files(str(tmp_path), 10)
    assert [os.path.basename(p) for p in found] == ["9930.json", "9959.json"]
    with pytest.raises(refresh.RefreshError, match="more than 1 documents"):
        refresh.mirror_files(str(tmp_path), 1)
    with pytest.raises(refresh.RefreshError, match="is not a directory"):
        refresh.mirror_files(str(tmp_path / "nope"), 1)
    flat = tmp_path / "flat"
    flat.mkdir()
    (flat / "9930.json").write_text("{}")
    (flat / "notes.json").write_text("{}")
    assert [os.path.basename(p) for p in refresh.mirror_files(str(flat), 10)] == ["9930.json"]
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(refresh.RefreshError, match="holds no CSAF document"):
        refresh.read_sources({"mirror_dir": str(empty), "max_documents": 10})


def test_nvidias_bulletins_beside_the_checkout_add_nothing_to_the_bundled_catalog():
    """The refresh over the 47 real documents of ../shared (a flat mirror): the bundled catalog
    already holds every entry, equal on every CSAF field."""
    if not os.path.isdir(csaf_docs.SHARED_CSAF):
        pytest.skip("NVIDIA's CSAF bulletins are not beside the checkout (%s is absent)" % csaf_docs.SHARED_CSAF)
    results = refresh.read_sources({"mirror_dir": csaf_docs.SHARED_CSAF, "max_documents": 100, "verified": "2026-11-27"})
    assert len(results) == 47
    docs, summary = refresh.build_overlay(results, *load.load_bundled_docs())
    assert docs == [] and summary["new_entries"] == [] and summary["differs"] == []
    assert "5861" in summary["bulletins"]


def _results(*docs):
    return [("%s.json" % d["document"]["tracking"]["id"],
             csaf.import_advisory(d, verified="2026-11-27", unknown_products="skip")) for d in docs]


def test_the_overlay_holds_what_the_bundled_catalog_lacks_and_lists_what_differs():
    bundled_docs, bundled = load.load_bundled_docs()
    real = copy.deepcopy([e for e in bundled if e["id"] == "driver-cve-2025-23244"][0])
    doc = csaf_docs.driver_bulletin()
    doc["vulnerabilities"][0]["cve"] = "CVE-2025-23244"  # an id the bundled catalog has, described otherwise
    docs, summary = refresh.build_overlay(_results(doc, csaf_docs.toolkit_bulletin()), bundled_docs, bundled)
    assert sorted(d["component"] for d in docs) == ["container-toolkit", "device-plugin", "driver", "gpu-operator",
                                                    "mig-manager"]
    assert "driver-cve-2099-0002" in summary["new_entries"] and "driver-cve-2025-23244" not in summary["new_entries"]
    assert summary["differs"] and all(d.startswith("driver-cve-2025-23244:") for d in summary["differs"])
    assert summary["bulletins"] == ["9930", "9959"] and summary["newest_bulletin"]["id"] == "9959"
    assert real == [e for e in load.load_bundled_docs()[1] if e["id"] == "driver-cve-2025-23244"][0]
    text = refresh.overlay_text(docs, summary, "https://m/i/index.txt", "2026-11-27")
    assert text.startswith("---\n# kubegpu.fleet catalog overlay") and 'fixed: "570.133.20"' in text
    entries = load.catalog_entries(extra=load.parse_document(text, "overlay"))
    assert "driver-cve-2099-0002" in [e["id"] for e in entries]
    # the report dates the catalog by the overlay's newest bulletin (audit_report takes the same catalog_extra)
    state = build.catalog_state(entries, datetime.date(2099, 9, 1))
    assert state["newest_advisory"]["id"] == "9959" and state["newest_advisory"]["date"] == "2099-08-12"


def test_an_overlay_that_does_not_validate_is_refused():
    bundled_docs, bundled = load.load_bundled_docs()
    results = _results(csaf_docs.driver_bulletin())
    results[0][1]["entries"]["driver"][0]["severity"] = "low"  # not the CVSS rating of 7.8
    with pytest.raises(refresh.RefreshError, match="does not validate with the bundled catalog, nothing written"):
        refresh.build_overlay(results, bundled_docs, bundled)


def test_read_overlay_and_the_lookups_documents(tmp_path):
    path = tmp_path / "o.yml"
    with pytest.raises(refresh.RefreshError, match="run playbooks/catalog_refresh.yml first"):
        refresh.read_overlay(str(path))
    path.write_text("---\n- schema_version: 2\n  component: driver\n  version_scheme: driver\n  entries: []\n")
    site = {"schema_version": 2, "component": "container-toolkit", "version_scheme": "semver", "entries": []}
    got = refresh.overlay_documents([str(path)], site)
    assert [d["component"] for d in got] == ["container-toolkit", "driver"]
    assert refresh.overlay_documents([""], [site]) == [site]
    path.write_text("just text\n")
    with pytest.raises(refresh.RefreshError, match="not a list of catalog v2 documents"):
        refresh.read_overlay(str(path))
    os.mkfifo(str(tmp_path / "fifo"))
    with pytest.raises(refresh.RefreshError, match="not a regular file"):
        refresh.read_overlay(str(tmp_path / "fifo"))
    with pytest.raises(refresh.RefreshError, match="one path"):
        refresh.overlay_documents(["a", "b"], [])
