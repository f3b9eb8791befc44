# -*- coding: utf-8 -*-
"""The audit_report action's work (write.py): each host's audit fact into a report node, and the
rendered files written through the write primitive (tests/module/test_audit_report_write.py runs
the action through ansible-playbook)."""
import os
import stat

import pytest

from ansible_collections.kubegpu.fleet.plugins.module_utils._common import fileutil
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import build, write

FINDING = {"id": "driver.known_bad", "severity": "critical", "title": "Known-bad driver"}


COVERAGE = {"status": "gpu_node", "reason": None, "gpu_models": {"NVIDIA H100 80GB HBM3": 8},
            "checks": dict((c, {"state": "yes", "detail": "seen"}) for c in
                           ("pci_gpus", "driver", "nvml", "kubelet", "kernel_log", "cluster_view"))}


def test_every_named_host_is_a_node_never_dropped():
    hostvars = {
        "h-audited": {"kubegpu_audit": {"status": "audited", "node": "gpu-1", "findings": [FINDING],
                                        "coverage": COVERAGE, "labels": {"pool": "train"}}},
        "h-unreachable": {"kubegpu_audit": {"status": "unreachable", "error": "ssh: refused"},
                          "kubegpu_node_name": "gpu-2"},
        "h-no-fact": {"kubegpu_node_name": "gpu-3"},
        "h-odd": {"kubegpu_audit": {"status": "half-done"}},
    }
    nodes = write.audit_nodes(["h-audited", "h-unreachable", "h-no-fact", "h-odd", "h-not-in-inventory"], hostvars)
    unfinished = "the audit did not finish on this host (failed before evaluation)"
    assert nodes == [
        {"name": "gpu-1", "status": "audited", "findings": [FINDING], "coverage": COVERAGE, "labels": {"pool": "train"}},
        {"name": "gpu-2", "status": "unreachable", "error": "ssh: refused", "findings": []},
        {"name": "gpu-3", "status": "failed", "findings": [], "error": unfinished},
        {"name": "h-odd", "status": "failed", "findings": [], "error": unfinished},
        {"name": "h-not-in-inventory", "status": "failed", "findings": [], "error": unfinished},
    ]


def _report():
    return build.build_report([{"name": "gpu-1", "status": "audited", "findings": [FINDING]}],
                              generated_at="2026-11-22T05:00:00Z", collection_version="0.1.0")


def test_each_format_is_written_0644_with_the_renderers_text(tmp_path):
    dest = tmp_path / "audit" / "reports"  # created, parents included
    report = _report()
    files = write.write_report(report, str(dest), list(write.FORMATS))
    assert sorted(files) == sorted(write.FORMATS)
    for fmt, (name, render) in write.FORMATS.items():
        assert files[fmt] == str(dest / name)
        assert (dest / name).read_text(encoding="utf-8") == render(report)
        assert stat.S_IMODE(os.stat(files[fmt]).st_mode) == 0o644
    write.write_report(report, str(dest), ["json"])  # rewritten in place: no backup beside a report
    assert sorted(os.listdir(str(dest))) == sorted(name for name, _render in write.FORMATS.values())


def test_a_directory_others_can_write_is_refused_and_nothing_is_written(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(fileutil.FileOpError, match="writable by group and others"):
        write.write_report(_report(), str(shared), ["json", "html"])
    assert os.listdir(str(shared)) == []


def test_failing_names_a_node_or_the_cluster_with_its_nodes():
    """The task's ``failing`` (the role's fail message reads ``where``): a finding of the cluster is one
    entry with the nodes it affects."""
    operator = {"id": "security.gpu-operator", "severity": "critical", "title": "GPU Operator advisories",
                "evidence": {"component": "gpu-operator", "version": "24.6.1"}}
    nodes = [{"name": "gpu-%d" % i, "status": "audited", "findings": [operator, FINDING]} for i in range(3)]
    report = build.build_report(nodes, generated_at="2026-11-22T05:00:00Z")
    failing = [write.failing_entry(f) for f in build.failing_findings(report, "critical")]
    assert [f for f in failing if f["node"] is None] == [
        {"node": None, "id": "security.gpu-operator", "severity": "critical", "nodes": ["gpu-0", "gpu-1", "gpu-2"],
         "where": "cluster (3 nodes)"}]
    assert {f["where"] for f in failing if f["node"] is not None} <= {"gpu-0", "gpu-1", "gpu-2"}
