"""Published audit records: first-seen times carried across runs, the checks on what is read back,
the Node forms (annotations, conditions)."""
import base64
import json
import zlib

import pytest

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit import results

CRIT = {"id": "driver.known_bad", "severity": "critical", "title": "Known-bad driver",
        "evidence": {"driver_version": "570.148.08"}, "remediation": {"summary": "upgrade"},
        "references": ["https://example.com/a"], "node": "gpu-a"}
WARN = {"id": "kubelet.memory_reservation", "severity": "warning", "title": "No memory reservation"}
UVM = {"id": "uvm.node_missing", "severity": "critical", "title": "no /dev/nvidia-uvm"}
T1, T2, T3 = "2026-11-01T02:00:00Z", "2026-11-02T02:00:00Z", "2026-11-03T02:00:00Z"


def entry(*findings, status="audited", name="gpu-a", error=None):
    return {"name": name, "status": status, "error": error, "findings": list(findings)}


def test_first_seen_is_kept_while_a_finding_persists_and_restarts_after_it_was_resolved():
    r1 = results.make_record(entry(CRIT, WARN), "run-1", T1)
    assert r1["first_seen"] == {"driver.known_bad": T1, "kubelet.memory_reservation": T1}
    assert r1["previous"] is None
    r2 = results.make_record(entry(CRIT, UVM), "run-2", T2, previous=results.check_record(r1))
    assert r2["first_seen"] == {"driver.known_bad": T1, "uvm.node_missing": T2}
    assert r2["previous"]["run"] == "run-1"
    assert r2["previous"]["findings"] == ["driver.known_bad", "kubelet.memory_reservation"]
    r3 = results.make_record(entry(CRIT, WARN), "run-3", T3, previous=results.check_record(r2))
    assert r3["first_seen"]["kubelet.memory_reservation"] == T3   # gone in run 2: seen anew
    assert r3["first_seen"]["driver.known_bad"] == T1


def test_republishing_in_the_same_run_keeps_the_baseline():
    r1 = results.make_record(entry(CRIT), "run-1", T1)
    r2 = results.make_record(entry(WARN), "run-2", T2, previous=results.check_record(r1))
    again = results.make_record(entry(WARN), "run-2", T2, previous=results.check_record(r2))
    assert again["previous"]["run"] == "run-1" and again["previous"]["findings"] == ["driver.known_bad"]


def test_an_unreachable_run_keeps_first_seen_and_the_last_audited_baseline():
    r1 = results.make_record(entry(CRIT), "run-1", T1)
    r2 = results.make_record(entry(status="unreachable", error="ssh refused"), "run-2", T2,
                             previous=results.check_record(r1))
    assert r2["first_seen"] == {"driver.known_bad": T1} and r2["findings"] == []
    r3 = results.make_record(entry(CRIT), "run-3", T3, previous=results.check_record(r2))
    assert r3["first_seen"] == {"driver.known_bad": T1}
    assert r3["previous"]["run"] == "run-1"


def test_record_round_trip_and_tampering_is_refused():
    r = results.make_record(entry(CRIT, WARN), "awx-workflow-42", T1)
    back = results.parse_record(results.record_json(r), node="gpu-a")
    assert back["findings"] == r["findings"] and back["digest"] == r["digest"]
    tampered = dict(r, findings=[dict(r["findings"][0], severity="info")] + r["findings"][1:])
    with pytest.raises(results.StoredResultError, match="digest does not match"):
        results.check_record(json.loads(json.dumps(tampered)))
    with pytest.raises(results.StoredResultError, match="about node 'gpu-a', found on 'gpu-b'"):
        results.parse_record(results.record_json(r), node="gpu-b")


@pytest.mark.parametrize("change, message", [
    (lambda d: d.update(schema="someone/else"), "schema 'someone/else'"),
    (lambda d: d.update(schema_version=9), "schema_version 9"),
    (lambda d: d["run"].update(id="bad id with spaces"), "run id"),
    (lambda d: d["run"].update(time="yesterday"), "run time"),
    (lambda d: d.update(status="clean"), "status 'clean'"),
    (lambda d: d.update(findings="all good"), "findings is not a list"),
    (lambda d: d["findings"][0].update(severity="urgent"), "severity 'urgent'"),
    (lambda d: d["findings"][0].update(id="../../etc"), "no valid id"),
    (lambda d: d.update(first_seen={}), "first_seen lacks driver.known_bad"),
    (lambda d: d.update(node="GPU_A"), "not a Kubernetes node name"),
])
def test_malformed_records_are_refused_with_the_reason(change, message):
    doc = json.loads(results.record_json(results.make_record(entry(CRIT), "run-1", T1)))
    change(doc)
    with pytest.raises(results.StoredResultError) as err:
        results.check_record(doc)
    assert message in str(err.value)


def test_oversized_and_deep_documents_are_refused_before_parsing():
    with pytest.raises(results.StoredResultError, match="more than"):
        results.parse_record(b" " * (results.RECORD_MAX + 1))
    with pytest.raises(results.StoredResultError, match="nested"):
        results.parse_record("[" * 100000 + "]" * 100000)
    with pytest.raises(results.StoredResultError, match="not valid JSON"):
        results.parse_record("{")


def test_node_annotations_round_trip_and_summary_only_when_findings_are_large():
    r = results.make_record(entry(CRIT, WARN), "run-1", T1)
    ann = results.node_annotations(r)
    summary = json.loads(ann[results.SUMMARY_ANNOTATION])
    assert summary["run"] == "run-1" and summary["findings"]["driver.known_bad"][:2] == ["critical", T1]
    assert results.parse_node_annotations("gpu-a", ann)["findings"] == r["findings"]
    big = dict(CRIT, evidence={"blob": "".join("%08x" % (i * 2654435761 % 2 ** 32) for i in range(40000))})
    r_big = results.make_record(entry(big), "run-1", T1)
    ann_big = results.node_annotations(r_big)
    assert ann_big[results.FINDINGS_ANNOTATION] is None and json.loads(ann_big[results.SUMMARY_ANNOTATION])["full"] is False
    back = results.parse_node_annotations("gpu-a", ann_big)
    assert [f["id"] for f in back["findings"]] == ["driver.known_bad"] and "digest" in back["findings"][0]["evidence"]


def test_a_findings_annotation_that_inflates_without_bound_is_refused():
    r = results.make_record(entry(CRIT), "run-1", T1)
    ann = results.node_annotations(r)
    bomb = base64.b64encode(zlib.compress(b"[" + b" " * (results.RECORD_MAX * 4) + b"]", 9)).decode()
    assert len(bomb) < results.FINDINGS_MAX
    with pytest.raises(results.StoredResultError, match="inflates to more than"):
        results.parse_node_annotations("gpu-a", dict(ann, **{results.FINDINGS_ANNOTATION: bomb}))
    with pytest.raises(results.StoredResultError, match="not base64"):
        results.parse_node_annotations("gpu-a", dict(ann, **{results.FINDINGS_ANNOTATION: "%%%"}))
    other = results.node_annotations(results.make_record(entry(WARN), "run-1", T1))[results.FINDINGS_ANNOTATION]
    with pytest.raises(results.StoredResultError):
        results.parse_node_annotations("gpu-a", dict(ann, **{results.FINDINGS_ANNOTATION: other}))
    assert results.parse_node_annotations("gpu-a", {"other": "x"}) is None
    with pytest.raises(results.StoredResultError, match="not a version 1 summary"):
        results.parse_node_annotations("gpu-a", {results.SUMMARY_ANNOTATION: "[1]"})


def test_conditions_per_area_keep_transition_times_and_other_conditions():
    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady"}
    r1 = results.make_record(entry(CRIT, WARN), "run-1", T1)
    c1 = dict((c["type"], c) for c in results.node_conditions(r1, [ready]))
    assert c1["Ready"] == ready
    assert c1["KubegpuDriver"]["status"] == "True" and c1["KubegpuDriver"]["reason"] == "DriverKnownBad"
    assert c1["KubegpuKubelet"]["status"] == "True" and c1["KubegpuGPUHealth"]["status"] == "False"
    assert c1["KubegpuAudit"]["status"] == "False"
    r2 = results.make_record(entry(CRIT), "run-2", T2, previous=results.check_record(r1))
    c2 = dict((c["type"], c) for c in results.node_conditions(r2, list(c1.values())))
    assert c2["KubegpuDriver"]["lastTransitionTime"] == T1 and c2["KubegpuDriver"]["lastHeartbeatTime"] == T2
    assert c2["KubegpuKubelet"]["status"] == "False" and c2["KubegpuKubelet"]["lastTransitionTime"] == T2
    # an unreachable node: nothing was seen, only KubegpuAudit changes
    r3 = results.make_record(entry(status="unreachable", error="ssh refused"), "run-3", T3,
                             previous=results.check_record(r2))
    c3 = dict((c["type"], c) for c in results.node_conditions(r3, list(c2.values())))
    assert c3["KubegpuDriver"] == c2["KubegpuDriver"]
    assert c3["KubegpuAudit"]["status"] == "True" and c3["KubegpuAudit"]["reason"] == "Unreachable"


COVERAGE = {"status": "gpu_node", "reason": None, "gpu_models": {"NVIDIA H100 80GB HBM3": 8},
            "checks": dict((c, {"state": "yes", "detail": "seen"}) for c in
                           ("pci_gpus", "driver", "nvml", "kubelet", "kernel_log", "cluster_view"))}
POOL = {"cloud.google.com/gke-nodepool": "train", "kubernetes.io/hostname": "gpu-a"}


def test_coverage_and_labels_are_kept_in_both_forms_and_checked_when_read_back():
    r = results.make_record(dict(entry(CRIT), coverage=COVERAGE, labels=POOL), "run-1", T1)
    assert r["coverage"] == COVERAGE and r["labels"] == POOL
    back = results.parse_record(results.record_json(r), node="gpu-a")
    assert back["coverage"] == COVERAGE and back["labels"] == POOL
    # on a Node: the coverage in the findings annotation (its status in the summary), the labels the Node's own
    ann = results.node_annotations(r)
    assert json.loads(ann[results.SUMMARY_ANNOTATION])["coverage"] == "gpu_node"
    on_node = results.parse_node_annotations("gpu-a", ann, dict(POOL, extra=7))
    assert on_node["coverage"] == COVERAGE and on_node["labels"] == POOL   # strings only, as the audit keeps them
    # an unreachable node has neither
    u = results.make_record(entry(status="unreachable", error="ssh refused"), "run-1", T1)
    assert u["coverage"] is None and u["labels"] == {}


@pytest.mark.parametrize("change, message", [
    (lambda d: d.update(coverage={"status": "clean"}), "coverage without a known status"),
    (lambda d: d["coverage"]["checks"]["driver"].update(detail="x" * 400), "detail of more than"),
    (lambda d: d["coverage"].update(reason="y" * 5000), "coverage reason is more than"),
    (lambda d: d["coverage"].update(gpu_models=dict(("m%d" % i, 1) for i in range(40))), "GPU models"),
    (lambda d: d.update(labels=["pool"]), "labels is not a mapping"),
    (lambda d: d.update(labels={"pool": 3}), "label 'pool'"),
    (lambda d: d.update(labels=dict(("k%d" % i, "v") for i in range(200))), "200 labels"),
])
def test_a_stored_coverage_or_labels_out_of_bounds_is_refused(change, message):
    doc = json.loads(results.record_json(results.make_record(dict(entry(CRIT), coverage=COVERAGE, labels=POOL),
                                                             "run-1", T1)))
    change(doc)
    with pytest.raises(results.StoredResultError) as err:
        results.check_record(doc)
    assert message in str(err.value)
