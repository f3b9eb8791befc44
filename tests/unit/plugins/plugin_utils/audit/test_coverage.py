# -*- coding: utf-8 -*-
"""What the audit could see on a node (audit/coverage.py) and the audit.not_inspected finding,
through evaluate.evaluate (the kubegpu_audit fact audit_node and audit_evaluate set) and into the
report: a host with no GPU stack and no kubelet is "not a GPU node", a node whose probes saw
nothing is "not inspected", neither is ever counted clean."""
import copy

import pytest

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit import coverage, evaluate, finding_types
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import build

ARGS = {"pending_threshold": 300, "memory_min_fraction": 0.8, "skip": [], "expected_gpus": None}
H100 = "NVIDIA H100 80GB HBM3"
KMSG_EPERM = "no kernel log could be read: /dev/kmsg: [Errno 1] Operation not permitted; journalctl: not found"


def gpu_node():
    """A GPU node as audit_node's probes describe it (the fields coverage reads)."""
    return {
        "nvidia": {"present": True, "source": "nvml", "driver_version": "570.172.08",
                   "probe": {"status": "ok", "backend": "nvml", "error": None},
                   "gpus": [{"index": i, "name": H100, "pci_bus_id": "00000000:%02X:00.0" % (0x10 + i)} for i in range(2)],
                   "pci": {"available": True, "gpus": [{"bus_id": "0000:%02x:00.0" % (0x10 + i)} for i in range(2)],
                           "errors": []},
                   "xid": {"source": "journal", "scanned": True, "warning": None, "gpus": {}, "events": 0}},
        "kubelet": {"running": True, "pid": 812},
        "api": {"exists": True, "ready": True, "allocatable": {"nvidia.com/gpu": "2"},
                "labels": {"cloud.google.com/gke-nodepool": "train", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
        "errors": {},
    }


def cpu_host():
    """A host in the wrong inventory group: no NVIDIA GPU on its bus, no driver, no kubelet."""
    return {
        "nvidia": {"present": False, "source": None, "driver_version": None,
                   "probe": {"status": "absent", "backend": "nvml", "error": "libnvidia-ml.so.1 not found under driver_root /"},
                   "gpus": [], "pci": {"available": True, "gpus": [], "errors": []},
                   "xid": {"source": "journal", "scanned": True, "warning": None, "gpus": {}, "events": 0}},
        "kubelet": {"running": False, "pid": None},
        "api": {},
        "errors": {},
    }


def audit(ctx, **args):
    return evaluate.evaluate("n1", ctx, dict(ARGS, **args))


def ids(findings):
    return sorted(f["id"] for f in findings)


def test_a_gpu_node_the_audit_saw_is_covered_and_has_no_coverage_finding():
    findings, fact = audit(gpu_node())
    cov = fact["coverage"]
    assert cov["status"] == "gpu_node" and cov["reason"] is None
    assert dict((k, v["state"]) for k, v in cov["checks"].items()) == dict((k, "yes") for k in coverage.CHECKS)
    assert cov["checks"]["pci_gpus"]["detail"] == "2 NVIDIA GPU(s)"
    assert cov["checks"]["driver"]["detail"] == "loaded (570.172.08)"
    assert cov["gpu_models"] == {H100: 2}
    assert "audit.not_inspected" not in ids(findings)
    assert fact["labels"]["cloud.google.com/gke-nodepool"] == "train"


def test_a_host_without_gpu_driver_or_kubelet_is_not_a_gpu_node_and_warned():
    findings, fact = audit(cpu_host())
    cov = fact["coverage"]
    assert cov["status"] == "not_gpu_node"
    assert [cov["checks"][c]["state"] for c in ("pci_gpus", "driver", "nvml", "kubelet")] == ["no"] * 4
    assert "no NVIDIA GPU on the PCI bus" in cov["reason"] and "no kubelet process" in cov["reason"]
    (nf,) = [f for f in findings if f["id"] == "audit.not_inspected"]
    assert nf["severity"] == "warning" and nf["title"].startswith("Not a GPU node")
    assert nf["evidence"]["status"] == "not_gpu_node" and nf["evidence"]["checks"] == cov["checks"]


def test_a_cpu_worker_with_a_kubelet_is_not_a_gpu_node_either():
    ctx = cpu_host()
    ctx["kubelet"] = {"running": True, "pid": 5}
    _findings, fact = audit(ctx)
    assert fact["coverage"]["status"] == "not_gpu_node"
    assert "a kubelet runs (a CPU worker?)" in fact["coverage"]["reason"]


def test_every_probe_failed_is_not_inspected():
    """audit_node failed as a whole (no Python on the node, a crash): every probe's error, no facts."""
    errors = {"gpu_facts": "audit_node failed: MODULE FAILURE", "kubelet_facts": "audit_node failed: MODULE FAILURE"}
    findings, fact = audit({"nvidia": {}, "kubelet": {}, "api": {}, "errors": errors})
    cov = fact["coverage"]
    assert cov["status"] == "not_inspected" and "gpu_facts, kubelet_facts failed" in cov["reason"]
    assert cov["checks"]["pci_gpus"] == {"state": "unknown", "detail": "gpu_facts failed: audit_node failed: MODULE FAILURE"}
    assert "audit.not_inspected" in ids(findings) and "audit.module_failed" in ids(findings)


def test_results_never_gathered_are_not_inspected():
    """audit_evaluate given empty probe results: nothing was seen, so nothing is clean."""
    _findings, fact = audit({"nvidia": {}, "kubelet": {}, "api": {}})
    assert fact["coverage"]["status"] == "not_inspected"
    assert fact["coverage"]["checks"]["driver"]["detail"] == "gpu_facts did not run"


def test_the_cluster_lists_gpus_the_probes_cannot_see_is_not_inspected():
    """An audit container without the host's /proc, /sys and /dev: its own view has no GPU and no
    driver, while the Node advertises GPUs."""
    ctx = cpu_host()
    ctx["api"] = {"exists": True, "ready": True, "allocatable": {"nvidia.com/gpu": "8"}, "labels": {}}
    findings, fact = audit(ctx)
    assert fact["coverage"]["status"] == "not_inspected"
    assert "mount the host's /proc, /sys and /dev" in fact["coverage"]["reason"]
    assert [f["title"] for f in findings if f["id"] == "audit.not_inspected"] == [
        "Not inspected: the audit saw nothing of this node's GPUs"]


def test_a_driver_without_a_readable_pci_bus_is_still_a_gpu_node():
    ctx = gpu_node()
    ctx["nvidia"]["pci"] = {"available": False, "gpus": [],
                            "errors": [{"entry": "/sys/bus/pci/devices", "error": "Permission denied"}]}
    _findings, fact = audit(ctx)
    assert fact["coverage"]["status"] == "gpu_node"
    assert fact["coverage"]["checks"]["pci_gpus"] == {"state": "unknown",
                                                      "detail": "PCI bus not readable: Permission denied"}


def test_an_unreadable_kernel_log_is_coverage_and_keeps_the_xid_scan_warning():
    """The lab's nodes (/dev/kmsg EPERM in nspawn): coverage says the kernel log was not readable,
    and the Xid scan's own warning (no Xid found is no proof) stays, as it was."""
    ctx = gpu_node()
    ctx["nvidia"]["xid"] = {"source": None, "scanned": False, "warning": KMSG_EPERM, "gpus": {}, "events": 0}
    findings, fact = audit(ctx)
    assert fact["coverage"]["status"] == "gpu_node"
    assert fact["coverage"]["checks"]["kernel_log"] == {"state": "no", "detail": "not readable: " + KMSG_EPERM}
    assert [f["title"] for f in findings if f["id"] == "audit.module_failed"] == ["Xid scan failed: " + KMSG_EPERM]


def test_xid_scan_off_and_partly_read_logs():
    ctx = gpu_node()
    ctx["nvidia"]["xid"] = None
    assert audit(ctx)[1]["coverage"]["checks"]["kernel_log"] == {"state": "off", "detail": "Xid scan off"}
    ctx["nvidia"]["xid"] = {"source": "kmsg", "scanned": True, "warning": "only the newest 64 MiB read"}
    assert audit(ctx)[1]["coverage"]["checks"]["kernel_log"] == {
        "state": "yes", "detail": "partly read from kmsg: only the newest 64 MiB read"}


def test_gpu_models_fall_back_to_gpu_feature_discovery_labels():
    ctx = gpu_node()
    ctx["nvidia"]["gpus"] = []
    ctx["api"]["labels"]["nvidia.com/gpu.count"] = "8"
    assert coverage.gpu_models(ctx) == {"NVIDIA-H100-80GB-HBM3": 8}
    assert coverage.gpu_models({"nvidia": {}, "api": {}}) == {}


def test_skip_leaves_the_finding_out_but_never_the_coverage():
    findings, fact = audit(cpu_host(), skip=["audit.not_inspected"])
    assert "audit.not_inspected" not in ids(findings) and fact["coverage"]["status"] == "not_gpu_node"


@pytest.mark.parametrize("bad", [{"nvidia": "x", "kubelet": [], "api": 3, "errors": "e"},
                                 {"nvidia": {"present": "yes", "pci": "x", "probe": [], "xid": 7}},
                                 {"nvidia": {"pci": {"available": True, "gpus": "many"}}}])
def test_malformed_probe_results_read_as_unknown_never_raise(bad):
    cov = coverage.coverage(bad)
    assert cov["status"] in coverage.STATUSES
    assert set(cov["checks"]) == set(coverage.CHECKS)
    assert all(c["state"] in coverage.STATES for c in cov["checks"].values())


def test_node_supplied_text_in_coverage_is_bounded():
    ctx = gpu_node()
    ctx["nvidia"]["probe"] = {"status": "error", "backend": "nvml", "error": "E" * 100000}
    ctx["nvidia"]["present"] = False
    ctx["nvidia"]["pci"]["gpus"] = []
    cov = audit(ctx)[1]["coverage"]
    assert len(cov["checks"]["nvml"]["detail"]) <= coverage.DETAIL_MAX + 3


# The report tests look at coverage only: the other rules' findings on these minimal facts are skipped.
ONLY_AUDIT = dict(ARGS, skip=[fid for fid in finding_types.TYPES if not fid.startswith("audit.")])


def report_of(*ctxs):
    nodes = []
    for i, ctx in enumerate(ctxs):
        _findings, fact = evaluate.evaluate("n%d" % i, copy.deepcopy(ctx), ONLY_AUDIT)
        nodes.append({"name": fact["node"], "status": "audited", "findings": fact["findings"],
                      "coverage": fact["coverage"], "labels": fact["labels"]})
    return build.build_report(nodes, generated_at="2026-11-27T06:00:00Z", fail_on="warning",
                              group_label="cloud.google.com/gke-nodepool")


def test_the_report_never_counts_a_host_it_did_not_see_as_clean():
    """The issue's case: one host with no GPU stack and no kubelet is no longer "1 audited, 1 clean"."""
    rep = report_of(cpu_host())
    s = rep["summary"]
    assert (s["nodes_audited"], s["nodes_clean"], s["nodes_not_gpu"], s["nodes_not_inspected"]) == (1, 0, 1, 0)
    assert s["not_gpu_node"] == ["n0"]
    # fail_on warning fails the run on it; the default (critical) reports it without failing
    assert [f["id"] for f in build.failing_findings(rep, "warning")] == ["audit.not_inspected"]
    assert build.failing_findings(rep, "critical") == []


def test_the_report_counts_coverage_models_and_groups():
    lost = {"nvidia": {}, "kubelet": {}, "api": {}, "errors": {"gpu_facts": "x", "kubelet_facts": "y"}}
    rep = report_of(gpu_node(), gpu_node(), cpu_host(), lost)
    s = rep["summary"]
    assert (s["nodes_clean"], s["nodes_not_gpu"], s["nodes_not_inspected"]) == (2, 1, 1)
    assert s["coverage"]["status"] == {"gpu_node": 2, "not_gpu_node": 1, "not_inspected": 1}
    assert s["coverage"]["driver"] == {"yes": 2, "no": 1, "unknown": 1, "off": 0}
    assert s["by_gpu_model"][0] == {"model": H100, "nodes": 2, "audited": 2, "gpus": 4, "clean": 2, "with_findings": 0}
    assert s["by_group"]["label"] == "cloud.google.com/gke-nodepool"
    assert s["by_group"]["groups"] == [
        {"value": "train", "nodes": 2, "audited": 2, "clean": 2, "with_findings": 0},
        {"value": None, "nodes": 2, "audited": 2, "clean": 0, "with_findings": 2}]
    assert rep["nodes"][0]["group"] == "train" and rep["nodes"][0]["coverage"]["status"] == "gpu_node"


def test_a_malformed_coverage_is_refused_with_its_node():
    with pytest.raises(build.ReportError, match="'n1' has a coverage without a known status"):
        build.build_report([{"name": "n1", "status": "audited", "findings": [], "coverage": {"status": "fine"}}])
    rep = build.build_report([{"name": "n1", "status": "audited", "findings": [],
                               "coverage": {"status": "gpu_node", "checks": {"driver": {"state": "maybe"}},
                                            "gpu_models": {"A": True, "B": 2}}}])
    cov = rep["nodes"][0]["coverage"]
    assert cov["checks"]["driver"] == {"state": "unknown", "detail": "not reported"} and cov["gpu_models"] == {"B": 2}
