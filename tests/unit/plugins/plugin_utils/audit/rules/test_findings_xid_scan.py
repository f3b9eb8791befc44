"""An incomplete Xid scan is a finding the report shows in words: the node-side xid_report (a
real kernel log file larger than the bound) -> evaluate_node -> build_report -> JSON and
Markdown. A complete scan adds nothing; a malformed xid fact never raises."""
import json

from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu import xid as gpu_xid
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import build, json_format, markdown_format
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.evaluate import evaluate_node

XID_79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1101234, name=nvc:[driver], GPU has fallen off the bus."


def _kmsg(path, records):
    path.write_bytes(b"".join(b"6,%d,%d,-;cni0: port %d entered forwarding state\n" % (i, i * 1000, i % 64)
                              for i in range(records))
                     + b"4,%d,%d,-;%s\n" % (records, records * 1000, XID_79.encode()))
    return str(path)


def _findings(xid):
    return evaluate_node({"nvidia": {"xid": xid}}, skip=())


def test_truncated_scan_reports_the_xid_and_the_cut(tmp_path):
    xid = gpu_xid.xid_report(limit=64 << 10, journalctl=None, kmsg=_kmsg(tmp_path / "kmsg", 5000), dmesg=None)
    assert xid["truncated"] is True
    found = dict((f["id"], f) for f in _findings(xid))
    assert found["gpu.xid"]["evidence"]["action"] == "reboot"
    scan = found["audit.module_failed"]
    assert scan["severity"] == "warning" and scan["evidence"]["part"] == "xid"
    assert scan["evidence"]["error"] == xid["warning"] and scan["evidence"]["truncated"] is True
    assert scan["title"] == "Xid scan incomplete: " + xid["warning"]
    assert scan["evidence"]["dropped_bytes"] == xid["dropped_bytes"] > 0

    doc = build.build_report([{"name": "gpu-7", "status": "audited", "findings": _findings(xid)}],
                             generated_at="2025-01-01T00:00:00Z", collection_version="0")
    out = json.loads(json_format.render_json(doc))
    (node,) = out["nodes"]
    assert [f["evidence"]["error"] for f in node["findings"] if f["id"] == "audit.module_failed"] == [xid["warning"]]
    md = markdown_format.render_markdown(doc)
    assert "Xid scan incomplete: kernel log truncated (kmsg): " in md
    assert "the oldest" in md and "were not scanned" in md


def test_complete_scan_adds_nothing(tmp_path):
    xid = gpu_xid.xid_report(journalctl=None, kmsg=_kmsg(tmp_path / "kmsg", 10), dmesg=None)
    assert xid["warning"] is None
    assert [f["id"] for f in _findings(xid)] == ["gpu.xid"]


def test_malformed_xid_facts_never_raise():
    for xid in ({"warning": 7}, {"warning": ["a"]}, {"warning": ""}, [], "x", None,
                {"warning": "w", "scanned": "no", "dropped_bytes": "many", "gpus": []}):
        found = _findings(xid)
        assert not [f for f in found if str(f["evidence"].get("probe")).startswith("evaluate:")], found
    (f,) = _findings({"warning": "w", "scanned": False, "dropped_bytes": float("nan")})
    assert f["title"] == "Xid scan failed: w" and f["evidence"]["dropped_bytes"] == 0
