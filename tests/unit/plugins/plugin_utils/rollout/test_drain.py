"""The pods still on a drained node and the PodDisruptionBudgets that hold them."""

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.rollout import drain
from ansible_collections.kubegpu.fleet.tests.unit.plugins.plugin_utils.rollout.cluster_objects import pod


# ------------------------------------------------------------------------------ drain

def test_leftover_pods_classification():
    pods = [pod("plugin", ns="kube-system", owner="DaemonSet"), pod("static", owner=None, mirror=True),
            pod("done", phase="Succeeded"), pod("stuck", deleting=True), pod("running")]
    res = drain.leftover_pods(pods)
    assert not res["ok"]
    assert [(b["pod"], b["reason"]) for b in res["blocking"]] == [
        ("ml/stuck", "evicted but still Terminating"), ("ml/running", "not evicted")]
    assert sorted(i["reason"] for i in res["ignored"]) == ["DaemonSet", "Succeeded", "mirror pod"]
    # a wedged kubelet: evicted pods may stay Terminating, never-evicted ones still block
    wedged = drain.leftover_pods(pods, accept_terminating=True)
    assert [a["pod"] for a in wedged["accepted"]] == ["ml/stuck"]
    assert [b["pod"] for b in wedged["blocking"]] == ["ml/running"]
    assert drain.leftover_pods(pods[:4], accept_terminating=True)["ok"]
    assert drain.leftover_pods([])["ok"]


def test_pdbs_for_pods_and_report():
    pods = [pod("train-a", labels={"app": "train", "tier": "gpu"}), pod("web", labels={"app": "web"}),
            pod("other-ns", ns="default", labels={"app": "train"})]
    pdbs = [
        {"metadata": {"name": "train", "namespace": "ml"},
         "spec": {"minAvailable": 100, "selector": {"matchLabels": {"app": "train"}}},
         "status": {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 100}},
        {"metadata": {"name": "expr", "namespace": "ml"},
         "spec": {"maxUnavailable": 0, "selector": {"matchExpressions": [
             {"key": "tier", "operator": "In", "values": ["gpu"]}, {"key": "gone", "operator": "DoesNotExist"}]}}},
        {"metadata": {"name": "notin", "namespace": "ml"},
         "spec": {"selector": {"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["train"]},
                                                    {"key": "app", "operator": "Exists"}]}}},
        {"metadata": {"name": "noselector", "namespace": "ml"}, "spec": {}},
    ]
    found = drain.pdbs_for_pods(pods, pdbs)
    assert [(f["pdb"], f["pods"]) for f in found] == [
        ("ml/train", ["ml/train-a"]), ("ml/expr", ["ml/train-a"]), ("ml/notin", ["ml/web"])]
    only = drain.pdbs_for_pods(pods, pdbs, only=["ml/web"])
    assert [f["pdb"] for f in only] == ["ml/notin"]
    left = drain.leftover_pods([pods[0]])
    text = drain.drain_report(left, drain.pdbs_for_pods(pods, pdbs[:1]))
    assert "ml/train-a (not evicted)" in text
    assert "ml/train (disruptionsAllowed 0, currentHealthy 1, desiredHealthy 100, covers ml/train-a)" in text
