"""audit -> remediate on exactly the nodes the audit says need it: a run's results published to a
directory store, then the playbooks' selection play (playbooks/select_from_audit.yml, imported first
by remediate.yml and rolling_reboot.yml) with a JMESPath expression over them; an invalid expression
fails the real remediate playbook before any node or the API is touched."""
import os

import pytest

from apidouble_fixture import api_double_factory  # noqa: F401 pylint: disable=unused-import
from test_api_double import node, play_env

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SELECT = os.path.join(REPO, "playbooks", "select_from_audit.yml")
REMEDIATE = os.path.join(REPO, "playbooks", "remediate.yml")
ROLLING_REBOOT = os.path.join(REPO, "playbooks", "rolling_reboot.yml")
POOL = "cloud.google.com/gke-nodepool"
KNOWN_BAD = {"id": "driver.known_bad", "severity": "critical", "title": "Known-bad driver",
             "evidence": {"driver_version": "570.148.08"}}
WARN = {"id": "kubelet.memory_reservation", "severity": "warning", "title": "No memory reservation"}
# inventory host -> (its Node, pool, findings)
FLEET = {"train-1": ("gpu-t1", "train", [KNOWN_BAD, WARN]), "train-2": ("gpu-t2", "train", [WARN]),
         "infer-1": ("gpu-i1", "infer", [KNOWN_BAD])}
TRAIN_BAD = "[?contains(ids, 'driver.known_bad') && labels.\"%s\" == 'train'].node" % POOL
NODE_TASK = "work on the node"
NOTHING = "[?contains(ids, 'gpu.xid_fatal')].node"   # valid, and no node of the run has that finding
NOTHING_TASK = "Say that the selection chose no node"
STOP_TASK = "Stop when the selection chose no node and kubegpu_select_require_nodes is true"
MISSING_TASK = "Stop when none of the chosen nodes is a host of the inventory"
SELECT_TASK = "Nodes the expression chooses from the published results"
EMPTY_TASK = "Nothing to do when the selection chose no node"
# the node plays' hosts in remediate.yml and rolling_reboot.yml
NODE_HOSTS = "{{ kubegpu_targets | default('gpu_nodes') }}{{ ':&kubegpu_selected' if kubegpu_select | default('') | length > 0 else '' }}"


def inventory(tmp_path):
    path = tmp_path / "inv.ini"
    lines = ["[gpu_nodes]"] + ["%s ansible_connection=local kubegpu_node_name=%s" % (h, n) for h, (n, _p, _f) in
                               FLEET.items()]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def publish(ansible, tmp_path, inv, store, kubeconfig=None):
    """Run nightly-7's results of FLEET into the directory ``store``, or onto the Nodes (``kubeconfig``)."""
    facts = dict((h, {"status": "audited", "node": n, "findings": f, "labels": {POOL: p}})
                 for h, (n, p, f) in FLEET.items())
    where = {"store": "kubernetes", "kubeconfig": kubeconfig} if kubeconfig else {"store": "directory", "path": store}
    res = ansible.playbook([
        {"hosts": "gpu_nodes", "gather_facts": False, "tasks": [
            {"name": "result", "ansible.builtin.set_fact": {"kubegpu_audit": "{{ results[inventory_hostname] }}"}}],
         "vars": {"results": facts}},
        {"hosts": "localhost", "connection": "local", "gather_facts": False, "tasks": [
            {"name": "publish", "kubegpu.fleet.audit_publish": dict(
                where, hosts="{{ groups['gpu_nodes'] }}", run_id="nightly-7")}]},
    ], inventory=inv, env=play_env(tmp_path))
    assert res.rc == 0 and res.task("publish")["published"] == 3, res.stdout[-3000:]


def selected_run(ansible, tmp_path, inv, store, expression, **extra):
    plays = [{"import_playbook": SELECT},
             {"hosts": NODE_HOSTS, "gather_facts": False, "tasks": [{"name": NODE_TASK, "ansible.builtin.ping": {}}]}]
    return ansible.playbook(plays, inventory=inv, env=play_env(tmp_path), extra_vars=dict({
        "kubegpu_select": expression, "kubegpu_audit_store": "directory", "kubegpu_audit_store_path": store}, **extra))


def ran_on(res):
    return sorted(h for h in FLEET if any(t["_task"] == NODE_TASK for t in res.tasks(h)))


def test_the_node_plays_run_on_exactly_the_nodes_the_expression_chooses(ansible, tmp_path):
    inv, store = inventory(tmp_path), str(tmp_path / "results")
    publish(ansible, tmp_path, inv, store)
    res = selected_run(ansible, tmp_path, inv, store, TRAIN_BAD)
    assert res.rc == 0, res.stdout[-3000:]
    chosen = res.task("Nodes the expression chooses from the published results")
    assert chosen["nodes"] == ["gpu-t1"] and chosen["hosts"] == ["train-1"] and chosen["run_id"] == "nightly-7"
    assert ran_on(res) == ["train-1"]
    # every node with a critical finding, any pool
    res = selected_run(ansible, tmp_path, inv, store, "[?contains(severities, 'critical')].node")
    assert res.rc == 0 and ran_on(res) == ["infer-1", "train-1"]
    # nothing chosen: nothing to do - the run succeeds on no node, saying so
    res = selected_run(ansible, tmp_path, inv, store, NOTHING)
    assert res.rc == 0 and ran_on(res) == [], res.stdout[-3000:]
    assert res.task(NOTHING_TASK)["msg"].startswith(
        "kubegpu_select chose no node among the 3 nodes of run nightly-7: nothing to do")
    # ... unless the run asks for a node
    res = selected_run(ansible, tmp_path, inv, store, NOTHING, kubegpu_select_require_nodes=True)
    assert res.rc == 2 and ran_on(res) == []
    assert res.task(STOP_TASK)["msg"] == ("kubegpu_select chose no node among the 3 nodes of run nightly-7, "
                                          "and kubegpu_select_require_nodes is true.")
    # nodes chosen, none of them a host of the inventory: work the run cannot do fails
    res = selected_run(ansible, tmp_path, inv, store, "[?labels.\"%s\" == 'infer'].node" % POOL,
                       kubegpu_targets="train-1,train-2")
    assert res.rc == 2 and ran_on(res) == []
    assert "chose 1 of the 3 nodes of run nightly-7, none of them a host of the inventory (train-1,train-2): gpu-i1" \
        in res.task(MISSING_TASK)["msg"]
    # a result that is not a list of nodes fails with what it gave, and no node play runs
    res = selected_run(ansible, tmp_path, inv, store, "[?labels.pool == 'train'].nodes | [0]")
    assert res.rc == 2 and ran_on(res) == []
    assert "gave None, not a list of node names" in res.task(
        "Nodes the expression chooses from the published results")["msg"]


@pytest.mark.parametrize("playbook,store", [(REMEDIATE, "kubernetes"), (REMEDIATE, "directory"),
                                            (ROLLING_REBOOT, "kubernetes")])
def test_an_empty_selection_is_nothing_to_do_for_remediate_and_rolling_reboot(
        ansible, tmp_path, api_double_factory, playbook, store):  # noqa: F811
    """The real playbooks with a selection of no node: the job succeeds, says so, and touches nothing -
    no node play, no API request after the selection (no cluster view, no plan, no lease, no cordon),
    no report of no node, and the store as the audit left it."""
    proc = api_double_factory(seed=[node(n, labels={POOL: p}) for n, p, _f in FLEET.values()])
    inv, path = inventory(tmp_path), str(tmp_path / "results")
    publish(ansible, tmp_path, inv, path, kubeconfig=proc.kubeconfig if store == "kubernetes" else None)
    stored = sorted(os.listdir(path)) if store == "directory" else None
    writes = max([e["seq"] for e in proc.client.history(nodes=False)] or [0])
    reads = max([e["seq"] for e in proc.client.reads()] or [0])
    reports = tmp_path / "reports"
    res = ansible.playbook(playbook, inventory=inv, env=dict(play_env(tmp_path), KUBEGPU_REMEDIATE_REPORT_DIR=str(reports)),
                           extra_vars={"kubegpu_select": NOTHING, "kubegpu_audit_store": store,
                                       "kubegpu_audit_store_path": path if store == "directory" else "",
                                       "kubegpu_kubeconfig": proc.kubeconfig})
    assert res.rc == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert res.task(NOTHING_TASK)["msg"].startswith(
        "kubegpu_select chose no node among the 3 nodes of run nightly-7: nothing to do, the playbook runs on no node")
    assert res.task(SELECT_TASK)["nodes"] == [] and res.task(SELECT_TASK)["hosts"] == []
    assert all(res.tasks(h) == [] for h in FLEET)
    # on localhost: the selection, and then every play ends at its first task
    assert [t["_task"] for t in res.tasks() if not t.get("skipped")] == [SELECT_TASK, EMPTY_TASK, NOTHING_TASK]
    assert proc.client.history(since=writes, nodes=False) == []     # no lease, no cordon, no publish
    read_after = proc.client.reads(since=reads)
    assert [(e["verb"], e["resource"]) for e in read_after] == ([("list", "nodes")] if store == "kubernetes" else [])
    assert not reports.exists()
    if store == "directory":
        assert sorted(os.listdir(path)) == stored
    # the opt-in: an empty selection fails the job before anything else
    res = ansible.playbook(playbook, inventory=inv, env=play_env(tmp_path), extra_vars={
        "kubegpu_select": NOTHING, "kubegpu_audit_store": store, "kubegpu_select_require_nodes": "true",
        "kubegpu_audit_store_path": path if store == "directory" else "", "kubegpu_kubeconfig": proc.kubeconfig})
    assert res.rc == 2 and "kubegpu_select_require_nodes is true" in res.task(STOP_TASK)["msg"]
    assert [t["_task"] for t in res.tasks() if not t.get("skipped")][-1] == STOP_TASK


def test_an_invalid_expression_fails_remediate_before_anything_runs(ansible, tmp_path):
    inv = inventory(tmp_path)
    missing_store = str(tmp_path / "never-written")
    res = ansible.playbook(REMEDIATE, inventory=inv, env=play_env(tmp_path), extra_vars={
        "kubegpu_select": "[?contains(ids, 'driver.known_bad'", "kubegpu_audit_store": "directory",
        "kubegpu_audit_store_path": missing_store, "kubegpu_kubeconfig": str(tmp_path / "no-such-kubeconfig")})
    assert res.rc == 2
    ran = [t["_task"] for t in res.tasks() if not t.get("skipped")]
    assert ran == ["Nodes the expression chooses from the published results"], ran
    assert "invalid JMESPath expression" in res.task("Nodes the expression chooses from the published results")["msg"]
    assert all(res.tasks(h) == [] for h in FLEET)
    assert not os.path.exists(missing_store)   # compiled before the store was opened
    assert "Traceback" not in res.stdout + res.stderr


def test_a_report_view_of_the_nodes_an_expression_chooses(ansible, tmp_path):
    inv, store = inventory(tmp_path), str(tmp_path / "results")
    publish(ansible, tmp_path, inv, store)

    def report(expression, dest):
        return ansible.playbook([{"hosts": "localhost", "connection": "local", "gather_facts": False, "tasks": [
            {"name": "view", "kubegpu.fleet.audit_report": {
                "store": "directory", "path": store, "select": expression, "dest": str(tmp_path / dest),
                "formats": ["json"], "fail_on": "never", "group_label": POOL}, "register": "view",
             "ignore_errors": True}]}], inventory=inv, env=play_env(tmp_path)).task("view")

    out = report("[?labels.\"%s\" == 'train'].node" % POOL, "train")
    assert not out.get("failed"), out
    assert [n["name"] for n in out["report"]["nodes"]] == ["gpu-t1", "gpu-t2"]
    assert out["report"]["run"]["selection"]["nodes"] == 2
    assert out["report"]["summary"]["by_group"]["groups"][0]["value"] == "train"
    bad = report("[?contains(ids, 'driver.known_bad')", "bad")
    assert bad["failed"] and "invalid JMESPath expression" in bad["msg"]
    assert not os.path.exists(str(tmp_path / "bad"))
