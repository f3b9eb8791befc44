"""The audit as AWX runs it: sliced into separate ansible-playbook processes, then one report step
(AWX's slicing as awx_slicing.py reproduces it).

Against the lab's Kubernetes API double (the store: annotations and conditions on the Nodes) and
seven local "nodes" whose NVIDIA trees differ (each host's proc/dev paths): the unsliced run and the
sliced run give the same entry per node (status, findings, coverage, node pool); a node the cluster
has and the inventory lacks is not audited, counted in its pool by its Node's labels; fail_on and the
coverage limit (that node: 1 of 8 where 10% allows 0) fail the report step once and no slice; after
one node is fixed the next sliced run reports that finding resolved and the others persisting with
the first run's first-seen time; a run pointed at one pool lists that pool's nodes only.
test_audit_sliced_lab.py does the same on booted lab nodes over ssh.
"""
import json
import os
import stat
import sys
import threading

from apidouble_fixture import api_double_factory  # noqa: F401 pylint: disable=unused-import
from awx_slicing import (AUDIT, FAIL_TASK, REPORT, awx_slices, findings_by_node, job, node_entries, read_counts,
                         read_mark, reads_since, sliced_run)
from test_api_double import node, play_env

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit import results, store
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.rollout import node_api

HOSTS = ["gpu-a", "gpu-b", "gpu-c", "gpu-d", "gpu-e", "gpu-f", "gpu-g"]   # byte order = PostgreSQL's here
NO_UVM = ("gpu-b", "gpu-e")          # /dev/nvidia-uvm never created: uvm.node_missing (critical)
LEFT_OUT = "gpu-h"                   # a GPU Node the inventory does not have
TRAIN = ("gpu-a", "gpu-b", "gpu-c", "gpu-d")   # the Node label pool=train; the others pool=infer


def node_tree(base, name):
    """A node's NVIDIA proc tree and /dev: driver loaded, nvidia-uvm registered; /dev/nvidia-uvm made
    unless the node is one of NO_UVM."""
    proc = os.path.join(base, name, "nvproc")
    os.makedirs(os.path.join(proc, "driver", "nvidia"))
    with open(os.path.join(proc, "modules"), "w") as fh:
        fh.write("nvidia 54009856 0 - Live 0x0\nnvidia_uvm 1 0 - Live 0x0\n")
    with open(os.path.join(proc, "devices"), "w") as fh:
        fh.write("Character devices:\n195 nvidia\n508 nvidia-uvm\n\nBlock devices:\n")
    with open(os.path.join(proc, "driver", "nvidia", "version"), "w") as fh:
        fh.write("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.172.08  Release Build\n")
    dev = os.path.join(base, name, "dev")
    os.makedirs(dev)
    if name not in NO_UVM:
        make_uvm(dev)
    return proc, dev


def make_uvm(dev):
    os.mknod(os.path.join(dev, "nvidia-uvm"), stat.S_IFCHR | 0o666, os.makedev(508, 0))


def write_inventory(path, base, hosts):
    inv = {}
    for name in hosts:
        inv[name] = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                     "kubegpu_nvidia_proc_path": os.path.join(base, name, "nvproc"),
                     "kubegpu_dev_path": os.path.join(base, name, "dev"),
                     "kubegpu_gpu_backend": "nvidia_smi", "kubegpu_gpu_probe_timeout": 3}
    with open(path, "w") as fh:
        json.dump({"all": {"hosts": inv}}, fh)
    return path


def inventory_of(base):
    return lambda path, hosts: write_inventory(path, base, hosts)


def pool(name):
    return "train" if name in TRAIN else "infer"


def test_sliced_audit_equals_unsliced_and_says_what_changed(tmp_path, api_double_factory):
    proc = api_double_factory(seed=[node(n, labels={"pool": pool(n)}) for n in HOSTS + [LEFT_OUT]]
                              + [node("cpu-0", gpus=0)])
    base = str(tmp_path / "nodes")
    for name in HOSTS:
        node_tree(base, name)
    full_inv = write_inventory(str(tmp_path / "inventory.json"), base, HOSTS)

    # 1. unsliced: one job over every host, publishing, the report from the store, fail_on
    mark = read_mark(proc.client)
    res, unsliced, _pod = job(tmp_path, proc, "unsliced", AUDIT, full_inv, {"awx_job_id": 100})
    unsliced_reads = reads_since(proc.client, mark)
    assert res.rc == 2, res.stdout[-3000:]
    assert unsliced["run"]["id"] == "awx-job-100"
    fail = res.task(FAIL_TASK)
    assert fail["failed"] and all("uvm.node_missing@%s" % n in fail["msg"] for n in NO_UVM)
    assert ("the audit did not see 1 of the 8 GPU nodes in scope (1 not audited); max_unaudited 10%% allows 0 of 8 "
            "(rounded down): exceeded. Not seen: %s (not audited)." % LEFT_OUT) in fail["msg"], fail["msg"]
    by = findings_by_node(unsliced)
    assert by[LEFT_OUT] == ("not_audited", []) and "cpu-0" not in by
    assert sorted(n for n, (_s, f) in by.items() if "uvm.node_missing" in [x["id"] for x in f]) == list(NO_UVM)
    entries = node_entries(unsliced)
    for name in HOSTS:   # what the audit saw and the node's pool come back from the store
        assert entries[name]["coverage"]["status"] == "gpu_node", entries[name]
        assert entries[name]["coverage"]["checks"]["driver"]["state"] == "yes"
        assert entries[name]["group"] == pool(name)
    # the node no slice covered is in its pool, by the labels of its Node as the report step lists it
    assert (entries[LEFT_OUT]["group"], entries[LEFT_OUT]["labels_from"]) == (pool(LEFT_OUT), "cluster")
    assert unsliced["summary"]["by_group"]["label"] == "pool"
    assert dict((g["value"], (g["nodes"], g["audited"])) for g in unsliced["summary"]["by_group"]["groups"]) == {
        "train": (4, 4), "infer": (4, 3)}
    limit = unsliced["summary"]["coverage_limit"]
    assert (limit["nodes_in_scope"], limit["allowed"], limit["nodes"], limit["exceeded"]) == (8, 0, [LEFT_OUT], True)
    assert unsliced["run"]["scope"] == "fleet" and unsliced["run"]["nodes_out_of_scope"] == 0
    first_time = unsliced["generated_at"]
    stored = proc.client.state()["objects"]["nodes"]
    gpu_b = [n for n in stored if n["metadata"]["name"] == "gpu-b"][0]
    summary = json.loads(gpu_b["metadata"]["annotations"][results.SUMMARY_ANNOTATION])
    assert summary["run"] == "awx-job-100" and "uvm.node_missing" in summary["findings"]
    conds = dict((c["type"], c) for c in gpu_b["status"]["conditions"])
    assert conds["KubegpuDeviceAccess"]["status"] == "True" and conds["Ready"]["status"] == "True"

    # 2. sliced 3 ways, then the report step: the same findings per node, gpu-h not audited,
    #    fail_on applied once (the report step), never in a slice
    mark = read_mark(proc.client)
    slices, res, sliced = sliced_run(tmp_path, proc, HOSTS, inventory_of(base), "run2", workflow_id=200, first_job_id=200)
    sliced_reads = reads_since(proc.client, mark)
    assert res.rc == 2 and res.task(FAIL_TASK)["failed"]
    assert all(FAIL_TASK not in [t["_task"] for t in s.tasks() if not t.get("skipped")] for s in slices)
    assert sliced["run"]["id"] == "awx-workflow-200"
    assert findings_by_node(sliced) == by
    assert node_entries(sliced) == entries
    assert sliced["summary"]["by_group"] == unsliced["summary"]["by_group"]
    assert sliced["summary"]["coverage"] == unsliced["summary"]["coverage"]
    assert sliced["summary"]["not_audited"] == [LEFT_OUT]
    assert sliced["summary"]["coverage_limit"] == unsliced["summary"]["coverage_limit"]
    assert sliced["summary"]["failing"] == unsliced["summary"]["failing"] == len(NO_UVM)
    assert sliced["changes"]["counts"]["new"] == 0 and sliced["changes"]["counts"]["resolved"] == 0
    for n in sliced["nodes"]:
        for f in n["findings"]:
            if f.get("node") == n["name"]:
                assert f["change"] == "persisting" and f["first_seen"] <= first_time, (n["name"], f)

    # the cluster pass once per run: a slice reads its own Nodes (one GET each) and the pods bound to
    # them (one field-selected list each); the whole-cluster Node list is the report step's only
    one, sliced_counts = read_counts(unsliced_reads), read_counts(sliced_reads)
    print("API reads, %d nodes: unsliced run %d %s; sliced run (3 slices + report step) %d %s"
          % (len(HOSTS), len(unsliced_reads), one, len(sliced_reads), sliced_counts))
    assert one["list pods"] == 1 and one["list nodes"] == 2   # the cluster pass, the report reading the store
    assert one["get nodes"] == len(HOSTS)                      # publishing: one read per node
    assert sliced_counts["list nodes"] == 1                    # the report step reads the store once
    assert sliced_counts["list pods"] == len(HOSTS)            # per node, never the whole cluster
    assert sliced_counts["get nodes"] == 2 * len(HOSTS)        # each slice's own Nodes, then publishing
    assert sliced_counts["list daemonsets.apps"] == 3 + 1      # once per slice, once in the report step

    # 3. one node fixed: the next sliced run reports it resolved, the others persisting since run 1
    make_uvm(os.path.join(base, "gpu-b", "dev"))
    _slices, res, third = sliced_run(tmp_path, proc, HOSTS, inventory_of(base), "run3", workflow_id=300, first_job_id=300)
    assert res.rc == 2
    ch = third["changes"]
    assert [(e["node"], e["id"]) for e in ch["resolved"]] == [("gpu-b", "uvm.node_missing")]
    assert ch["resolved"][0]["first_seen"] <= first_time and ch["counts"]["new"] == 0
    gpu_e = [n for n in third["nodes"] if n["name"] == "gpu-e"][0]
    uvm = [f for f in gpu_e["findings"] if f["id"] == "uvm.node_missing"][0]
    assert uvm["change"] == "persisting" and uvm["first_seen"] <= first_time
    assert third["summary"]["failing"] == 1 and third["summary"]["not_audited"] == [LEFT_OUT]
    prom = (tmp_path / "run3-report" / "report" / "kubegpu_audit.prom").read_text()
    assert 'kubegpu_finding_first_seen_timestamp_seconds{node="gpu-e",id="uvm.node_missing"' in prom

    # 4. a run pointed at one pool: its nodes are reported, the cluster's other GPU Nodes (the infer
    #    pool, gpu-h) are out of scope - counted, not listed as not audited
    res, targeted, _pod = job(tmp_path, proc, "train", AUDIT, full_inv,
                              {"awx_job_id": 400, "kubegpu_targets": ":".join(TRAIN)})
    assert res.rc == 0, res.stdout[-3000:]
    assert [n["name"] for n in targeted["nodes"]] == list(TRAIN)
    assert targeted["summary"]["coverage_limit"]["nodes_in_scope"] == len(TRAIN)   # out of scope: not counted
    assert targeted["summary"]["not_audited"] == [] and targeted["run"]["scope"] == "targets"
    assert targeted["run"]["out_of_scope"] == sorted(set(HOSTS + [LEFT_OUT]) - set(TRAIN))
    assert targeted["summary"]["failing"] == 0   # gpu-b's uvm.node_missing is fixed; gpu-e is out of scope


def publish_play(hosts, store_args):
    return [
        {"hosts": "all", "gather_facts": False, "tasks": [
            {"name": "result", "ansible.builtin.set_fact": {"kubegpu_audit": {
                "status": "audited", "node": "{{ inventory_hostname }}", "findings": []}}}]},
        {"hosts": "localhost", "gather_facts": False, "tasks": [
            {"name": "publish", "kubegpu.fleet.audit_publish": dict({"hosts": hosts}, **store_args),
             "register": "published", "ignore_errors": True}]},
    ]


def test_a_read_only_identity_gets_the_rbac_it_needs(ansible, tmp_path, api_double_factory):
    proc = api_double_factory(seed=[node("gpu-a")])
    inv = tmp_path / "inv.ini"
    inv.write_text("gpu-a ansible_connection=local\nlocalhost ansible_connection=local\n")
    proc.client.add_fault({"methods": ["PATCH"], "resource": "nodes", "code": 403, "reason": "Forbidden",
                           "message": 'nodes "gpu-a" is forbidden: User "system:serviceaccount:awx:audit" '
                                      'cannot patch resource "nodes" in API group "" at the cluster scope'})
    res = ansible.playbook(publish_play(["gpu-a"], {"store": "kubernetes", "kubeconfig": proc.kubeconfig}),
                           inventory=str(inv), env=play_env(tmp_path))
    out = res.task("publish")
    assert out["failed"] and "cannot publish the audit result of node gpu-a" in out["msg"]
    assert "cannot patch resource" in out["msg"] and "patch on nodes and on nodes/status" in out["msg"]
    assert "Traceback" not in res.stdout + res.stderr
    assert results.SUMMARY_ANNOTATION not in (proc.client.state()["objects"]["nodes"][0]["metadata"]
                                              .get("annotations") or {})


def test_two_runs_publishing_at_once_keep_each_others_results(tmp_path, api_double_factory):
    """Run B publishes the node between run A's read and A's patch: A's guarded patch is refused
    (the resourceVersion moved), A re-reads and recomputes, so A's record builds on B's."""
    proc = api_double_factory(seed=[node("gpu-a")])
    crit = {"id": "driver.known_bad", "severity": "critical", "title": "Known-bad driver"}
    entry = {"name": "gpu-a", "status": "audited", "findings": [crit]}
    other = store.NodeStore(node_api.NodeApi.connect({"kubeconfig": proc.kubeconfig}))
    done = threading.Event()

    class Interleaved(node_api.NodeApi):
        def patch_node(self, name, ops):
            if not done.is_set():
                done.set()
                other.publish([entry], "run-b", "2026-11-01T00:00:00Z")
            return super().patch_node(name, ops)

    api = Interleaved.connect({"kubeconfig": proc.kubeconfig})
    try:
        out, _replaced = store.NodeStore(api).publish([entry], "run-a", "2026-11-02T00:00:00Z")
        assert out["gpu-a"]["attempts"] >= 3   # refused once, then annotations and status
        records, rejected, _nodes = store.NodeStore(api).read()
        assert not rejected
        rec = records["gpu-a"]
        assert rec["run"]["id"] == "run-a" and rec["previous"]["run"] == "run-b"
        assert rec["first_seen"] == {"driver.known_bad": "2026-11-01T00:00:00Z"}
        refused = [e for e in proc.client.history(resource="nodes", verb="patch", nodes=False) if e["code"] == 422]
        assert len(refused) == 1
    finally:
        api.client.close()
        other.api.client.close()


def test_a_malformed_or_foreign_annotation_is_reported_never_trusted(tmp_path, api_double_factory):
    proc = api_double_factory(seed=[node("gpu-a"), node("gpu-b"), node("gpu-c")])
    api = node_api.NodeApi.connect({"kubeconfig": proc.kubeconfig})
    try:
        where = store.NodeStore(api)
        where.publish([{"name": n, "status": "audited", "findings": []} for n in ("gpu-a", "gpu-b", "gpu-c")],
                      "run-1", "2026-11-01T00:00:00Z")
        good = api.node("gpu-a")["metadata"]["annotations"]
        node_api.patch_node(api, "gpu-b", annotations={results.SUMMARY_ANNOTATION: "{" * 5000})
        node_api.patch_node(api, "gpu-c", annotations=dict(good))   # gpu-a's record copied onto gpu-c
        records, rejected, _nodes = where.read()
        assert sorted(records) == ["gpu-a"]
        assert "not valid JSON" in rejected["gpu-b"] or "nested" in rejected["gpu-b"]
        assert "about node 'gpu-a', found on 'gpu-c'" in rejected["gpu-c"]
    finally:
        api.client.close()


def test_sliced_audit_through_a_directory_store(tmp_path):
    """The offline store: two slices and the report step share only a directory (a PVC or NFS
    path); no Kubernetes API at all. A slice that never ran leaves its nodes not audited, with the
    run their last result is of."""
    base = str(tmp_path / "nodes")
    for name in HOSTS:
        node_tree(base, name)
    results_dir = str(tmp_path / "results")
    common = {"kubegpu_audit_store": "directory", "kubegpu_audit_store_path": results_dir,
              "kubegpu_audit_cluster": False}
    full_inv = write_inventory(str(tmp_path / "inventory.json"), base, HOSTS)
    res, first, _pod = job(tmp_path, None, "first", AUDIT, full_inv, dict(common, kubegpu_audit_run_id="nightly-1"))
    assert res.rc == 2 and first["run"]["id"] == "nightly-1" and first["summary"]["not_audited"] == []
    assert sorted(os.listdir(os.path.join(results_dir, "nodes"))) == ["%s.json" % n for n in HOSTS]
    # the next night: slices 1 and 2 of 3 run, slice 3 fails before it publishes
    make_uvm(os.path.join(base, "gpu-e", "dev"))
    ran = []
    for n, hosts in enumerate(awx_slices(HOSTS, 3)[:2], 1):
        inv = write_inventory(str(tmp_path / ("d-slice%d.json" % n)), base, hosts)
        res, report, _pod = job(tmp_path, None, "d-slice%d" % n, AUDIT, inv, dict(
            common, kubegpu_audit_step="slice", awx_job_id=500 + n, awx_workflow_job_id=500))
        assert res.rc == 0 and report is None, res.stdout[-3000:]
        ran += hosts
    res, report, _pod = job(tmp_path, None, "d-report", REPORT, full_inv,
                            dict(common, kubegpu_audit_run_id="awx-workflow-500"))
    assert res.rc == 2, res.stdout[-3000:]
    missing = sorted(set(HOSTS) - set(ran))
    assert report["summary"]["not_audited"] == missing
    gone = [n for n in report["nodes"] if n["name"] == missing[0]][0]
    assert "the last result is of run nightly-1" in gone["error"] and gone["labels_from"] == "last_result"
    limit = report["summary"]["coverage_limit"]
    assert (limit["nodes"], limit["by_status"]["not_audited"], limit["exceeded"]) == (missing, len(missing), True)
    ch = report["changes"]
    assert [(e["node"], e["id"]) for e in ch["resolved"]] == [("gpu-e", "uvm.node_missing")]
    assert [e["node"] for e in ch["persisting"] if e["id"] == "uvm.node_missing"] == ["gpu-b"]
    assert report["summary"]["failing"] == 1


def test_check_mode_publishes_nothing(ansible, tmp_path, api_double_factory):
    proc = api_double_factory(seed=[node("gpu-a")])
    inv = tmp_path / "inv.ini"
    inv.write_text("gpu-a ansible_connection=local\nlocalhost ansible_connection=local\n")
    res = ansible.playbook(publish_play(["gpu-a"], {"store": "kubernetes", "kubeconfig": proc.kubeconfig}),
                           inventory=str(inv), env=play_env(tmp_path), check=True)
    out = res.task("publish")
    assert not out.get("failed") and out["changed"] and out["published"] == 1, out
    assert proc.client.history(resource="nodes", verb="patch", nodes=False) == []
    res = ansible.playbook(publish_play(["gpu-a"], {"store": "kubernetes", "kubeconfig": proc.kubeconfig}),
                           inventory=str(inv), env=play_env(tmp_path))
    assert res.task("publish")["changed"]
    patches = proc.client.history(resource="nodes", verb="patch", nodes=False)
    assert [(e["subresource"], e["code"]) for e in patches] == [(None, 200), ("status", 200)]
    node_obj = proc.client.state()["objects"]["nodes"][0]
    assert [c["type"] for c in node_obj["status"]["conditions"]][0] == "Ready"
    assert set(results.CONDITION_TYPES) <= set(c["type"] for c in node_obj["status"]["conditions"])
