"""audit -> remediate on exactly the nodes the audit says need it: a run's results published to a
directory store, then the playbooks' selection play (playbooks/select_from_audit.yml, imported first
by remediate.yml and rolling_reboot.yml) with a JMESPath expression over them; an invalid expression
fails the real remediate playbook before any node or the API is touched."""
import os

from test_api_double import play_env

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SELECT = os.path.join(REPO, "playbooks", "select_from_audit.yml")
REMEDIATE = os.path.join(REPO, "playbooks", "remediate.yml")
POOL = "cloud.google.com/gke-nodepool"
KNOWN_BAD = {"id": "driver.known_bad", "severity": "critical", "title": "Known-bad driver",
             "evidence": {"driver_version": "570.148.08"}}
WARN = {"id": "kubelet.memory_reservation", "severity": "warning", "title": "No memory reservation"}
# inventory host -> (its Node, pool, findings)
FLEET = {"train-1": ("gpu-t1", "train", [KNOWN_BAD, WARN]), "train-2": ("gpu-t2", "train", [WARN]),
         "infer-1": ("gpu-i1", "infer", [KNOWN_BAD])}
TRAIN_BAD = "[?contains(ids, 'driver.known_bad') && labels.\"%s\" == 'train'].node" % POOL
NODE_TASK = "work on the node"
# the node plays' hosts in remediate.yml and rolling_reboot.yml
NODE_HOSTS = "{{ kubegpu_targets | default('gpu_nodes') }}{{ ':&kubegpu_selected' if kubegpu_select | default('') | length > 0 else '' }}"


def inventory(tmp_path):
    path = tmp_path / "inv.ini"
    lines = ["[gpu_nodes]"] + ["%s ansible_connection=local kubegpu_node_name=%s" % (h, n) for h, (n, _p, _f) in
                               FLEET.items()]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def publish(ansible, tmp_path, inv, store):
    facts = dict((h, {"status": "audited", "node": n, "findings": f, "labels": {POOL: p}})
                 for h, (n, p, f) in FLEET.items())
    res = ansible.playbook([
        {"hosts": "gpu_nodes", "gather_facts": False, "tasks": [
            {"name": "result", "ansible.builtin.set_fact": {"kubegpu_audit": "{{ results[inventory_hostname] }}"}}],
         "vars": {"results": facts}},
        {"hosts": "localhost", "connection": "local", "gather_facts": False, "tasks": [
            {"name": "publish", "kubegpu.fleet.audit_publish": {
                "hosts": "{{ groups['gpu_nodes'] }}", "store": "directory", "path": store, "run_id": "nightly-7"}}]},
    ], inventory=inv, env=play_env(tmp_path))
    assert res.rc == 0 and res.task("publish")["published"] == 3, res.stdout[-3000:]


def selected_run(ansible, tmp_path, inv, store, expression):
    plays = [{"import_playbook": SELECT},
             {"hosts": NODE_HOSTS, "gather_facts": False, "tasks": [{"name": NODE_TASK, "ansible.builtin.ping": {}}]}]
    return ansible.playbook(plays, inventory=inv, env=play_env(tmp_path), extra_vars={
        "kubegpu_select": expression, "kubegpu_audit_store": "directory", "kubegpu_audit_store_path": store})


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
    # nothing chosen: the playbook stops, saying so, before its node plays
    res = selected_run(ansible, tmp_path, inv, store, "[?contains(ids, 'gpu.xid_fatal')].node")
    assert res.rc == 2 and ran_on(res) == []
    assert "chose no node" in res.task("Stop when no node was chosen")["msg"]
    # a result that is not a list of nodes fails with what it gave, and no node play runs
    res = selected_run(ansible, tmp_path, inv, store, "[?labels.pool == 'train'].nodes | [0]")
    assert res.rc == 2 and ran_on(res) == []
    assert "gave None, not a list of node names" in res.task(
        "Nodes the expression chooses from the published results")["msg"]


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
