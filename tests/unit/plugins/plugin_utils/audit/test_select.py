"""Nodes chosen from the published results with JMESPath: the document, the checks on what an
expression gives, invalid expressions refused before anything is read, inventory hosts."""
import pytest

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit import results, select

KNOWN_BAD = {"id": "driver.known_bad", "severity": "critical", "title": "Known-bad driver",
             "evidence": {"driver_version": "570.148.08"}}
WARN = {"id": "kubelet.memory_reservation", "severity": "warning", "title": "No memory reservation"}
T1, T2 = "2026-11-01T02:00:00Z", "2026-11-02T02:00:00Z"
POOL = "cloud.google.com/gke-nodepool"
TRAIN_BAD = "[?contains(ids, 'driver.known_bad') && labels.\"%s\" == 'train'].node" % POOL


def rec(name, pool, *findings, run="run-2", time=T2, status="audited"):
    entry = {"name": name, "status": status, "findings": list(findings), "labels": {POOL: pool}}
    return results.check_record(results.make_record(entry, run, time))


def store_records():
    return {"train-1": rec("train-1", "train", KNOWN_BAD, WARN), "train-2": rec("train-2", "train", WARN),
            "infer-1": rec("infer-1", "infer", KNOWN_BAD),
            # an older run's result: never selected from run-2
            "train-3": rec("train-3", "train", KNOWN_BAD, run="run-1", time=T1)}


def test_every_node_of_a_pool_with_a_known_bad_driver():
    docs = select.documents(store_records(), "run-2")
    assert [d["node"] for d in docs] == ["infer-1", "train-1", "train-2"]
    assert docs[1]["ids"] == ["driver.known_bad", "kubelet.memory_reservation"]
    assert docs[1]["findings"][0]["first_seen"] == T2 and docs[1]["labels"][POOL] == "train"
    assert select.select(TRAIN_BAD, docs) == ["train-1"]
    # node objects are accepted too, and duplicates collapse
    assert select.select("[?contains(severities, 'critical')]", docs) == ["infer-1", "train-1"]
    assert select.select("[?status == 'audited'].node", docs) == ["infer-1", "train-1", "train-2"]


def test_an_expression_that_chooses_nothing_is_an_empty_list_not_an_error():
    docs = select.documents(store_records(), "run-2")
    assert select.select("[?contains(ids, 'gpu.xid_fatal')].node", docs) == []


@pytest.mark.parametrize("expression, message", [
    ("[?contains(ids, 'driver.known_bad'", "invalid JMESPath expression"),
    ("nodes[?", "invalid JMESPath expression"),
    ("", "empty"),
    ("[*].node" + " " * 5000, "more than 4096"),
])
def test_an_invalid_expression_is_refused_when_compiled(expression, message):
    with pytest.raises(select.SelectError, match=message):
        select.compile_expression(expression)


@pytest.mark.parametrize("expression, message", [
    ("[?labels.pool == 'train'].nodes | [0]", "gave None, not a list of node names"),   # a misspelt key
    ("length(@)", "gave 3, not a list"),
    ("[*].status", "gave 'audited' among its results, not a node name"),
    ("[*].labels", "not a node name"),
    ("[?contains(`1`, 'x')]", "failed on the published results"),
])
def test_a_result_that_is_not_a_list_of_node_names_fails_with_what_it_gave(expression, message):
    docs = select.documents(store_records(), "run-2")
    with pytest.raises(select.SelectError) as err:
        select.select(expression, docs)
    assert message in str(err.value)


def test_chosen_nodes_map_to_inventory_hosts_by_their_node_names():
    hostvars = {"h1": {"kubegpu_node_name": "train-1"}, "train-2": {}, "h3": {"kubegpu_node_name": "infer-1"}}
    hosts, missing = select.inventory_hosts(["infer-9", "train-1", "train-2"], list(hostvars), hostvars)
    assert hosts == ["h1", "train-2"] and missing == ["infer-9"]
