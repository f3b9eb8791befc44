"""The audit as AWX runs it, sliced, on booted lab nodes (systemd, sshd, the real ssh connection and
the lab's API double, which the nodes' kubelets keep in step): AWX's slicing as awx_slicing.py
reproduces it (test_audit_sliced_fleet.py does the same against local hosts).

Four one-GPU nodes; gpu-a and gpu-c never load nvidia-uvm (uvm.node_missing, critical); the
inventory the jobs get lacks gpu-d. The results are published on the Nodes (store = kubernetes).
An unsliced run and a run sliced 3 ways plus the report step give the same entry per node (status,
findings, coverage, pool); gpu-d is not audited, counted in its pool by its Node's labels; fail_on
and the coverage limit (gpu-d: 1 of 4 where 10% allows 0) fail the report step once and no slice.
Then the device_plugin role (the remediation of uvm.node_missing) fixes gpu-a over ssh, and the
next sliced run reports that finding resolved and every other finding persisting with the first
run's first-seen time. The published conditions survive the kubelet's own status updates.
"""
import json
import time

import pytest
import yaml

from awx_slicing import (AUDIT, FAIL_TASK, findings_by_node, job, node_entries, read_counts, read_mark,
                         reads_since, slice_ran_fail_task, sliced_run)
from lab_fixture import device_plugin_ds, lab_factory, wait_for  # noqa: F401  pylint: disable=unused-import

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit import results

POOL = "kubegpu.io/pool"
NODES = ["gpu-a", "gpu-b", "gpu-c", "gpu-d"]
NO_UVM = ("gpu-a", "gpu-c")      # nvidia-uvm never loaded: /dev/nvidia-uvm missing (uvm.node_missing)
FIXED = "gpu-a"
LEFT_OUT = "gpu-d"               # a GPU Node of the cluster that the inventory lacks
HOSTS = [n for n in NODES if n != LEFT_OUT]
PROFILE = {
    "name": "slicedlab",
    "defaults": {"gpus": {"count": 1}, "pool": "train"},
    "nodes": [{"name": "gpu-a", "uvm": "never"},
              {"name": "gpu-b", "seed": "healthy"},
              {"name": "gpu-c", "uvm": "never", "pool": "infer"},
              {"name": "gpu-d", "seed": "healthy", "pool": "infer"}],
    "cluster": {"manifests": [device_plugin_ds()]},
}
# what every job of this file passes besides AWX's own variables: the node pool label
EXTRA = {"kubegpu_audit_group_label": POOL}


@pytest.fixture(scope="module")
def lab(lab_factory):  # noqa: F811
    return lab_factory(PROFILE)


def lab_inventory(lab):
    """``inventory_for(path, hosts)``: the lab's inventory cut down to ``hosts``, as an AWX
    inventory gives a slice its hosts. The Kubernetes credential reaches the jobs as K8S_AUTH_*
    (awx_slicing.job), so the lab's kubeconfig variable is left out."""
    with open(lab.inventory) as f:
        inv = yaml.safe_load(f)["all"]
    common = dict((k, v) for k, v in inv["vars"].items() if k != "kubegpu_kubeconfig")
    hostvars = inv["children"]["gpu_nodes"]["hosts"]

    def write(path, hosts):
        with open(path, "w") as fh:
            json.dump({"all": {"vars": common, "children": {"gpu_nodes": {
                "hosts": dict((h, hostvars[h]) for h in hosts)}}}}, fh)
        return path
    return write


def api_reads(client, mark):
    """The audit's API reads since ``mark`` (the nodes' kubelets read their Node all along)."""
    return [r for r in reads_since(client, mark) if not (r.get("user_agent") or "").startswith("kubelet/")]


def first_seen(report):
    """{(node, finding id): first seen} of the nodes' own findings."""
    return dict(((n["name"], f["id"]), f["first_seen"]) for n in report["nodes"] for f in n["findings"]
                if f.get("node") == n["name"])


def conditions(lab, name):
    return dict((c["type"], c) for c in lab.node_obj(name)["status"].get("conditions") or [])


def device_plugin_fix(ansible, lab, host):
    """The role that fixes uvm.node_missing (finding_types: role device_plugin), on one node over ssh."""
    play = [{"hosts": host, "gather_facts": False,
             "tasks": [{"name": "device plugin node", "ansible.builtin.include_role": {
                 "name": "kubegpu.fleet.device_plugin"}}]}]
    return ansible.playbook(play, inventory=lab.inventory, timeout=600)


def test_sliced_audit_on_lab_nodes_equals_unsliced_and_says_what_changed(lab, ansible, tmp_path):
    started = time.monotonic()
    client = lab.client
    inventory_for = lab_inventory(lab)
    full_inv = inventory_for(str(tmp_path / "inventory.json"), HOSTS)

    # 1. unsliced: one job over the inventory, publishing, the report from the store, fail_on
    mark = read_mark(client)
    res, unsliced, _pod = job(tmp_path, lab, "unsliced", AUDIT, full_inv, dict(EXTRA, awx_job_id=100))
    unsliced_reads = api_reads(client, mark)
    assert res.rc == 2, res.stdout[-3000:] + res.stderr[-2000:]
    assert unsliced["run"]["id"] == "awx-job-100"
    fail = res.task(FAIL_TASK)
    assert fail["failed"] and all("uvm.node_missing@%s" % n in fail["msg"] for n in NO_UVM), fail["msg"]
    assert "Not seen: %s (not audited)." % LEFT_OUT in fail["msg"], fail["msg"]
    by = findings_by_node(unsliced)
    assert sorted(by) == NODES
    assert by[LEFT_OUT] == ("not_audited", [])
    assert sorted(n for n, (_s, f) in by.items() if "uvm.node_missing" in [x["id"] for x in f]) == list(NO_UVM)
    entries = node_entries(unsliced)
    for name in HOSTS:   # what the probes saw over ssh, and the node's pool, come back from the store
        assert entries[name]["status"] == "audited", entries[name]
        assert entries[name]["coverage"]["status"] == "gpu_node", entries[name]
        assert entries[name]["coverage"]["checks"]["driver"]["state"] == "yes", entries[name]["coverage"]
        assert entries[name]["group"] == lab.lab.state["specs"][name]["pool"]
    # the node no slice covered is in its pool, by the labels of its Node as the report step lists it
    assert (entries[LEFT_OUT]["group"], entries[LEFT_OUT]["labels_from"]) == ("infer", "cluster"), entries[LEFT_OUT]
    assert dict((g["value"], (g["nodes"], g["audited"])) for g in unsliced["summary"]["by_group"]["groups"]) == {
        "train": (2, 2), "infer": (2, 1)}
    assert unsliced["summary"]["coverage_limit"]["exceeded"] is True
    assert unsliced["summary"]["not_audited"] == [LEFT_OUT]
    critical = sum(1 for n in unsliced["nodes"] for f in n["findings"] if f["severity"] == "critical")
    assert unsliced["summary"]["failing"] == critical > len(NO_UVM)   # the lab's driver and toolkit advisories too
    seen = first_seen(unsliced)
    assert ("gpu-c", "uvm.node_missing") in seen and (FIXED, "uvm.node_missing") in seen
    annotations = lab.node_obj(FIXED)["metadata"]["annotations"]
    summary = json.loads(annotations[results.SUMMARY_ANNOTATION])
    assert summary["run"] == "awx-job-100" and "uvm.node_missing" in summary["findings"]
    assert annotations["kubegpu-lab.io/node"] == "true"   # the kubelet's own annotation is kept
    conds = conditions(lab, FIXED)
    assert conds["KubegpuDeviceAccess"]["status"] == "True" and conds["Ready"]["status"] == "True"

    # 2. sliced 3 ways (one host each), then the report step: the same entry per node, gpu-d not
    #    audited, fail_on applied once (the report step), never in a slice
    mark = read_mark(client)
    slices, res, sliced = sliced_run(tmp_path, lab, HOSTS, inventory_for, "run2", workflow_id=200, first_job_id=200,
                                     extra_vars=EXTRA)
    sliced_reads = api_reads(client, mark)
    assert res.rc == 2 and res.task(FAIL_TASK)["failed"], res.stdout[-3000:]
    assert not any(slice_ran_fail_task(s) for s in slices)
    assert sliced["run"]["id"] == "awx-workflow-200"
    assert findings_by_node(sliced) == by
    assert node_entries(sliced) == entries
    assert sliced["summary"]["not_audited"] == [LEFT_OUT]
    assert sliced["summary"]["failing"] == unsliced["summary"]["failing"]
    assert sliced["summary"]["coverage"] == unsliced["summary"]["coverage"]
    assert sliced["summary"]["by_group"] == unsliced["summary"]["by_group"]
    assert sliced["changes"]["counts"]["new"] == 0 and sliced["changes"]["counts"]["resolved"] == 0
    assert first_seen(sliced) == seen

    # the cluster pass once per run: the whole-cluster Node list is the report step's only
    one, per_slice = read_counts(unsliced_reads), read_counts(sliced_reads)
    print("API reads on the lab, %d audited nodes: unsliced run %d %s; sliced run (3 slices + report step) %d %s"
          % (len(HOSTS), len(unsliced_reads), one, len(sliced_reads), per_slice))
    assert one["list pods"] == 1 and one["list nodes"] == 2   # the cluster pass, the report reading the store
    assert one["get nodes"] == len(HOSTS)                      # publishing: one read per node
    assert per_slice["list nodes"] == 1                        # the report step reads the store once
    assert per_slice["list pods"] == len(HOSTS)                # per node, never the whole cluster
    assert per_slice["get nodes"] == 2 * len(HOSTS)            # each slice's own Nodes, then publishing
    assert per_slice["list daemonsets.apps"] == 3 + 1          # once per slice, once in the report step

    # 3. gpu-a fixed by the collection's remediation of uvm.node_missing, over ssh
    fixed = device_plugin_fix(ansible, lab, FIXED)
    assert fixed.rc == 0, fixed.stdout[-4000:]
    assert lab.ssh(FIXED, "test -c /dev/nvidia-uvm", check=False).returncode == 0
    assert lab.ssh("gpu-c", "test -e /dev/nvidia-uvm", check=False).returncode != 0

    # 4. the next sliced run: that finding resolved, every other one persisting since run 1
    _slices, res, third = sliced_run(tmp_path, lab, HOSTS, inventory_for, "run3", workflow_id=300, first_job_id=300,
                                     extra_vars=EXTRA)
    assert res.rc == 2, res.stdout[-3000:]
    assert "uvm.node_missing@%s" % FIXED not in res.task(FAIL_TASK)["msg"]
    ch = third["changes"]
    assert [(e["node"], e["id"]) for e in ch["resolved"]] == [(FIXED, "uvm.node_missing")], ch["resolved"]
    assert ch["resolved"][0]["first_seen"] == seen[(FIXED, "uvm.node_missing")]
    assert ch["counts"]["new"] == 0, ch
    after = first_seen(third)
    assert sorted(after) == sorted(k for k in seen if k != (FIXED, "uvm.node_missing"))
    assert after == dict((k, v) for k, v in seen.items() if k in after)
    for n in third["nodes"]:
        for f in n["findings"]:
            if f.get("node") == n["name"]:
                assert f["change"] == "persisting", (n["name"], f)
    assert sorted((e["node"], e["id"]) for e in ch["persisting"] if e.get("node") in HOSTS) == sorted(after)
    assert third["summary"]["failing"] == critical - 1 and third["summary"]["not_audited"] == [LEFT_OUT]
    prom = (tmp_path / "run3-report" / "report" / "kubegpu_audit.prom").read_text()
    assert 'kubegpu_finding_first_seen_timestamp_seconds{node="gpu-c",id="uvm.node_missing"' in prom
    assert conditions(lab, FIXED)["KubegpuDeviceAccess"]["status"] == "False"
    assert conditions(lab, "gpu-c")["KubegpuDeviceAccess"]["status"] == "True"

    # 5. the kubelet's own status updates keep the published conditions (a strategic merge by type,
    #    as the kubelet patches its Node's status): restart gpu-c's kubelet, wait for its status patch
    history = client.history(since=0, resource="nodes", nodes=False)
    mark = max([e["seq"] for e in history] or [0])
    lab.ssh("gpu-c", "systemctl restart kubelet.service")
    wait_for(lambda: [e for e in client.history(since=mark, resource="nodes", name="gpu-c", verb="patch", nodes=False)
                      if e.get("subresource") == "status" and (e.get("user_agent") or "").startswith("kubelet/")
                      and e["code"] == 200], 120, "the restarted kubelet's status patch of gpu-c")
    conds = conditions(lab, "gpu-c")
    assert conds["Ready"]["status"] == "True"
    assert conds["KubegpuDeviceAccess"]["status"] == "True", sorted(conds)
    assert set(results.CONDITION_TYPES) <= set(conds)
    print("sliced audit on the lab: %.1f s after the lab was up" % (time.monotonic() - started))
