"""The fleet report of a run from published results: the run id, the nodes no slice covered, what
changed; and the directory store (atomic files, lock, rejected entries)."""
import datetime
import json
import os

import pytest

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit import fleet, results, store
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import build

CRIT = {"id": "driver.known_bad", "severity": "critical", "title": "Known-bad driver", "evidence": {"v": 1}}
WARN = {"id": "kubelet.memory_reservation", "severity": "warning", "title": "No memory reservation"}
UVM = {"id": "uvm.node_missing", "severity": "critical", "title": "no /dev/nvidia-uvm"}
T1, T2 = "2026-11-01T02:00:00Z", "2026-11-10T02:00:00Z"


def entry(name, *findings, status="audited"):
    return {"name": name, "status": status, "findings": list(findings)}


def test_run_identity_follows_what_awx_puts_in_the_extra_vars():
    now = datetime.datetime(2026, 11, 1, 2, 0, 0, tzinfo=datetime.timezone.utc)
    slice_vars = {"awx_job_id": 812, "awx_workflow_job_id": 810, "tower_job_id": 812}
    assert fleet.run_identity(None, slice_vars) == ("awx-workflow-810", "awx_workflow_job_id")
    assert fleet.run_identity("", {"awx_job_id": 7}) == ("awx-job-7", "awx_job_id")
    assert fleet.run_identity("nightly-1", slice_vars) == ("nightly-1", "kubegpu_audit_run_id")
    assert fleet.run_identity(None, {}, now=now, pid=12) == ("local-20261101T020000Z-12", "generated")
    with pytest.raises(results.StoredResultError):
        fleet.run_identity("no spaces allowed", {})


def test_the_fleet_lists_every_known_node_and_says_why_one_was_not_audited():
    old = results.make_record(entry("gpu-c", WARN), "run-1", T1)
    records = {"gpu-a": results.make_record(entry("gpu-a", CRIT), "run-2", T2),
               "gpu-b": results.make_record(entry("gpu-b"), "run-2", T2), "gpu-c": old}
    rejected = {"gpu-d": "the result on Node gpu-d is not trusted: schema 'x'"}
    cluster = [{"metadata": {"name": "gpu-e", "labels": {"nvidia.com/gpu.present": "true"}}},
               {"metadata": {"name": "cpu-0"}}]
    assert fleet.select_run(records) == "run-2"
    nodes, run_records, _out = fleet.fleet_nodes(records, rejected, "run-2", known=["gpu-f"], cluster_nodes=cluster)
    by = dict((n["name"], n) for n in nodes)
    assert sorted(by) == ["gpu-a", "gpu-b", "gpu-c", "gpu-d", "gpu-e", "gpu-f"]   # cpu-0 is not a GPU node
    assert sorted(run_records) == ["gpu-a", "gpu-b"]
    assert by["gpu-c"]["status"] == "not_audited" and "last result is of run run-1 at %s" % T1 in by["gpu-c"]["error"]
    assert by["gpu-d"]["error"].startswith("the result on Node gpu-d is not trusted")
    assert "no slice of run run-2" in by["gpu-e"]["error"] and by["gpu-f"]["status"] == "not_audited"
    report = build.build_report(nodes, generated_at=T2)
    assert report["summary"]["nodes_not_audited"] == 4 and report["summary"]["not_audited"] == [
        "gpu-c", "gpu-d", "gpu-e", "gpu-f"]
    assert report["summary"]["nodes_clean"] == 1


def test_changes_new_resolved_persisting_with_first_seen():
    prev = results.check_record(results.make_record(entry("gpu-a", CRIT, WARN), "run-1", T1))
    now = results.make_record(entry("gpu-a", CRIT, UVM), "run-2", T2, previous=prev)
    nodes, run_records, _out = fleet.fleet_nodes({"gpu-a": now}, {}, "run-2")
    report = fleet.annotate_changes(build.build_report(nodes, generated_at=T2), run_records, "run-2")
    node = report["nodes"][0]
    f = dict((x["id"], x) for x in node["findings"])
    assert f["driver.known_bad"]["change"] == "persisting" and f["driver.known_bad"]["first_seen"] == T1
    assert f["driver.known_bad"]["known_days"] == 9.0
    assert f["uvm.node_missing"]["change"] == "new" and f["uvm.node_missing"]["first_seen"] == T2
    assert node["resolved"] == [{"id": "kubelet.memory_reservation", "first_seen": T1, "last_seen": T1}]
    assert node["previous_run"] == {"id": "run-1", "time": T1}
    assert report["changes"]["counts"] == {"new": 1, "resolved": 1, "persisting": 1}


def test_directory_store_publishes_reads_and_rejects(tmp_path):
    where = store.DirectoryStore(str(tmp_path / "results"))
    out, replaced = where.publish([entry("gpu-a", CRIT), entry("gpu-b", WARN), entry("Bad_Name")], "run-1", T1)
    assert out["gpu-a"]["changed"] and "not a Kubernetes node name" in out["Bad_Name"]["error"] and not replaced
    assert oct(os.stat(str(tmp_path / "results" / "nodes" / "gpu-a.json")).st_mode & 0o777) == "0o640"
    (tmp_path / "results" / "nodes" / "gpu-b.json").write_text('{"schema": "kubegpu.fleet/audit-node-result"')
    (tmp_path / "results" / "nodes" / "notes.txt").write_text("hello")
    (tmp_path / "results" / "nodes" / "gpu-c.json").write_bytes(b"x" * (results.RECORD_MAX + 10))
    records, rejected, _nodes = where.read()
    assert sorted(records) == ["gpu-a"]
    assert "not valid JSON" in rejected["gpu-b"] and "not a node result file" in rejected["notes.txt"]
    assert "more than" in rejected["gpu-c"]
    # the next run replaces the untrusted file and says so; check mode writes nothing
    out, replaced = where.publish([entry("gpu-b", WARN)], "run-2", T2, check_mode=True)
    assert out["gpu-b"]["changed"] and "gpu-b" in replaced
    assert "not valid JSON" in where.read()[1]["gpu-b"]
    where.publish([entry("gpu-a", CRIT), entry("gpu-b", WARN)], "run-2", T2)
    records, rejected, _nodes = where.read()
    assert records["gpu-a"]["first_seen"] == {"driver.known_bad": T1} and records["gpu-b"]["previous"] is None
    assert json.loads((tmp_path / "results" / "nodes" / "gpu-a.json").read_text())["run"]["id"] == "run-2"


def test_directory_store_refuses_a_directory_others_can_write(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(str(shared), 0o777)
    with pytest.raises(store.StoreError, match="cannot use the result directory"):
        store.DirectoryStore(str(shared / "results")).publish([entry("gpu-a")], "run-1", T1)
    with pytest.raises(store.StoreError, match="absolute path"):
        store.DirectoryStore("relative/dir")


def test_a_fleet_report_with_changes_matches_the_schema():
    import jsonschema
    from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import json_format, prometheus_format
    from ansible_collections.kubegpu.fleet.tests.lib.paths import REPO
    with open(os.path.join(REPO, "docs", "audit-report.schema.json")) as fh:
        schema = json.load(fh)
    jsonschema.Draft202012Validator.check_schema(schema)
    prev = results.check_record(results.make_record(entry("gpu-a", CRIT, WARN), "run-1", T1))
    records = {"gpu-a": results.make_record(entry("gpu-a", CRIT, UVM), "run-2", T2, previous=prev),
               "gpu-b": results.make_record(entry("gpu-b", status="unreachable"), "run-2", T2)}
    nodes, run_records, _out = fleet.fleet_nodes(records, {"x.txt": "not a node result file"}, "run-2", known=["gpu-c"])
    report = build.build_report(nodes, generated_at=T2, run={"id": "run-2", "store": "directory"})
    fleet.annotate_changes(report, run_records, "run-2", {"x.txt": "not a node result file"})
    doc = json.loads(json_format.render_json(report))
    jsonschema.validate(doc, schema)
    assert doc["changes"]["rejected"] == [{"entry": "x.txt", "reason": "not a node result file"}]
    prom = prometheus_format.render_prometheus(report)
    first = int(datetime.datetime(2026, 11, 1, 2, 0, tzinfo=datetime.timezone.utc).timestamp())
    assert ('kubegpu_finding_first_seen_timestamp_seconds{node="gpu-a",id="driver.known_bad",severity="critical"} %d'
            % first) in prom
    bad = json.loads(json.dumps(doc))
    bad["nodes"][0]["findings"][0]["change"] = "gone"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


def test_inventory_hosts_are_known_by_their_node_names():
    hostvars = {"node-1.example": {"kubegpu_node_name": "gpu-a"}, "gpu-b": {}, "gpu-c": {"kubegpu_node_name": ""}}
    assert fleet.node_names(["node-1.example", "gpu-b", "gpu-c", "not-in-inventory"], hostvars) == [
        "gpu-a", "gpu-b", "gpu-c", "not-in-inventory"]


def test_a_targeted_run_lists_its_own_nodes_and_counts_the_rest_out_of_scope():
    """A run pointed at one pool: the pool's node no slice covered is not audited; the cluster's
    other GPU Nodes and a stored result of another pool's node are out of scope, not listed."""
    records = {"train-1": results.make_record(entry("train-1", CRIT), "run-2", T2),
               "infer-1": results.make_record(entry("infer-1", WARN), "run-1", T1)}
    rejected = {"infer-2": "the result on Node infer-2 is not trusted: schema 'x'"}
    cluster = [{"metadata": {"name": n, "labels": {"nvidia.com/gpu.present": "true"}}}
               for n in ("train-1", "train-2", "infer-1", "infer-2", "infer-3")]
    nodes, run_records, out = fleet.fleet_nodes(records, rejected, "run-2", known=["train-1", "train-2"],
                                                cluster_nodes=cluster, scope="targets")
    assert [(n["name"], n["status"]) for n in nodes] == [("train-1", "audited"), ("train-2", "not_audited")]
    assert sorted(run_records) == ["train-1"] and out == ["infer-1", "infer-2", "infer-3"]
    # the same store reported for the whole fleet: every GPU Node without a result of the run is not audited
    nodes, _r, out = fleet.fleet_nodes(records, rejected, "run-2", known=["train-1", "train-2"],
                                       cluster_nodes=cluster, scope="fleet")
    assert [n["name"] for n in nodes if n["status"] == "not_audited"] == ["infer-1", "infer-2", "infer-3", "train-2"]
    assert out == []
    # a node a slice of the run published is listed even when the report step's inventory lacks it
    nodes, _r, _out = fleet.fleet_nodes(records, {}, "run-2", known=["train-2"], scope="targets")
    assert [n["name"] for n in nodes] == ["train-1", "train-2"]
    with pytest.raises(ValueError, match="scope must be one of fleet, targets"):
        fleet.fleet_nodes(records, {}, "run-2", scope="pool")


def test_the_report_from_the_store_has_each_nodes_coverage_and_group():
    cov = {"status": "not_gpu_node", "reason": "nothing of a GPU node", "gpu_models": {},
           "checks": dict((c, {"state": "no", "detail": "none"}) for c in
                          ("pci_gpus", "driver", "nvml", "kubelet", "kernel_log", "cluster_view"))}
    audited = [dict(entry("gpu-a", CRIT), coverage=dict(cov, status="gpu_node", reason=None),
                    labels={"pool": "train"}),
               dict(entry("cpu-0"), coverage=cov, labels={"pool": "infer"})]
    records = dict((e["name"], results.check_record(json.loads(results.record_json(
        results.make_record(e, "run-1", T1))))) for e in audited)
    nodes, _r, _out = fleet.fleet_nodes(records, {}, "run-1")
    direct = build.build_report(audited, generated_at=T1, group_label="pool")
    stored = build.build_report(nodes, generated_at=T1, group_label="pool")
    assert stored["nodes"] == direct["nodes"] and stored["summary"] == direct["summary"]
    assert stored["summary"]["not_gpu_node"] == ["cpu-0"] and stored["summary"]["nodes_clean"] == 0


H100 = "NVIDIA-H100-80GB-HBM3"


def test_a_node_no_slice_audited_is_grouped_by_its_nodes_labels_from_the_cluster():
    """gpu-d of pool infer, left out of every slice: the cluster's Node gives its pool and GPU product,
    so the infer row counts it; a node known only from the inventory has no labels and says so."""
    records = dict((e["name"], results.make_record(e, "run-2", T2)) for e in (
        dict(entry("gpu-a", CRIT), labels={"pool": "train", "nvidia.com/gpu.product": H100}),
        dict(entry("gpu-c"), labels={"pool": "infer", "nvidia.com/gpu.product": H100})))
    cluster = [{"metadata": {"name": n, "labels": dict(labels, **{"nvidia.com/gpu.present": "true"})}}
               for n, labels in (("gpu-a", {"pool": "train"}), ("gpu-c", {"pool": "infer"}),
                                 ("gpu-d", {"pool": "infer", "nvidia.com/gpu.product": H100,
                                            "nvidia.com/gpu.count": "8"}))]
    cluster.append({"metadata": {"name": "gpu-e", "labels": "not a mapping"}})
    nodes, _r, _out = fleet.fleet_nodes(records, {}, "run-2", known=["gpu-a", "gpu-c", "gpu-x"], cluster_nodes=cluster)
    by = dict((n["name"], n) for n in nodes)
    assert by["gpu-d"]["labels"]["pool"] == "infer" and by["gpu-d"]["labels_from"] == "cluster"
    assert by["gpu-x"]["labels"] is None and by["gpu-x"]["labels_from"] is None
    assert by["gpu-x"]["error"].endswith("the cluster lists no Node gpu-x: its labels are not known")
    rep = build.build_report(nodes, generated_at=T2, group_label="pool")
    out = dict((n["name"], n) for n in rep["nodes"])
    assert (out["gpu-d"]["status"], out["gpu-d"]["group"], out["gpu-d"]["labels_from"]) == ("not_audited", "infer", "cluster")
    assert out["gpu-d"]["gpu_models"] == {H100: 8}
    assert (out["gpu-x"]["group"], out["gpu-x"]["labels_from"], out["gpu-x"]["gpu_models"]) == (None, None, {})
    assert out["gpu-a"]["labels_from"] == "result" and "gpu_models" not in out["gpu-a"]
    groups = dict((g["value"], g) for g in rep["summary"]["by_group"]["groups"])
    assert groups["infer"] == {"value": "infer", "nodes": 2, "audited": 1, "clean": 1, "with_findings": 0}
    assert groups["train"]["nodes"] == 1 and groups[None]["nodes"] == 1   # gpu-x: labels not known
    models = dict((m["model"], m) for m in rep["summary"]["by_gpu_model"])
    assert (models[H100]["nodes"], models[H100]["audited"], models[H100]["gpus"]) == (1, 0, 8)
    assert (models[None]["nodes"], models[None]["audited"]) == (3, 2)   # the audit saw no GPU model (no coverage)


def test_without_the_clusters_nodes_a_node_not_audited_keeps_its_last_results_labels():
    """The directory store lists no Node: a node of an older run keeps the labels its last result had
    (labels_from last_result); a node without any result has none, and its reason says why."""
    old = results.make_record(dict(entry("gpu-c", WARN), labels={"pool": "infer"}), "run-1", T1)
    records = {"gpu-a": results.make_record(dict(entry("gpu-a"), labels={"pool": "train"}), "run-2", T2), "gpu-c": old}
    nodes, _r, _out = fleet.fleet_nodes(records, {"gpu-r": "the result file of node gpu-r is not trusted: x"}, "run-2",
                                        known=["gpu-x"])
    by = dict((n["name"], n) for n in nodes)
    assert (by["gpu-c"]["labels"], by["gpu-c"]["labels_from"]) == ({"pool": "infer"}, "last_result")
    assert by["gpu-x"]["labels"] is None
    assert by["gpu-x"]["error"].endswith("its labels are not known (this store does not list the cluster's Nodes)")
    assert by["gpu-r"]["labels"] is None and by["gpu-r"]["error"].startswith("the result file of node gpu-r is not trusted")
    rep = build.build_report(nodes, generated_at=T2, group_label="pool")
    assert dict((n["name"], n["group"]) for n in rep["nodes"]) == {"gpu-a": "train", "gpu-c": "infer", "gpu-r": None,
                                                                   "gpu-x": None}


def test_an_unreachable_host_takes_its_labels_from_the_cluster_pass():
    """The report of the play's hosts: a host the audit could not reach is grouped by the cluster
    pass's view of its Node; a host the cluster does not list has no labels."""
    from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import write
    view = {"gpu-b": {"exists": True, "labels": {"pool": "infer", "nvidia.com/gpu.product": H100, 7: "x"}}}
    hostvars = {"localhost": {"kubegpu_cluster": {"cluster": {"nodes": view}}},
                "gpu-a": {"kubegpu_audit": {"status": "audited", "node": "gpu-a", "findings": [],
                                            "labels": {"pool": "train"}}},
                "gpu-b": {"kubegpu_audit": {"status": "unreachable", "node": "gpu-b", "error": "ssh: port 22"}},
                "gpu-c": {}}
    nodes = write.audit_nodes(["gpu-a", "gpu-b", "gpu-c"], hostvars)
    assert nodes[1]["labels"] == {"pool": "infer", "nvidia.com/gpu.product": H100} and nodes[1]["labels_from"] == "cluster"
    assert "labels" not in nodes[2]
    rep = build.build_report(nodes, generated_at=T2, group_label="pool")
    assert [(n["name"], n["status"], n["group"], n["labels_from"]) for n in rep["nodes"]] == [
        ("gpu-a", "audited", "train", "result"), ("gpu-b", "unreachable", "infer", "cluster"),
        ("gpu-c", "failed", None, None)]
    assert [m["model"] for m in rep["summary"]["by_gpu_model"]] == [None, H100]
    # without a cluster pass (kubegpu_audit_cluster false) the labels are not known
    assert "labels" not in write.audit_nodes(["gpu-b"], dict(hostvars, localhost={}))[0]
