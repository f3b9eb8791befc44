"""rollout_lease: the budget the cluster holds (slot Leases), expiry, skew, bad Leases, and the
acquire loop of rollout_slot driven by an injected clock over an in-memory API with real
resourceVersion semantics (the API double's fault injection tests are in tests/lab/test_rollout_budget.py)."""
import copy

import pytest

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.rollout import lease as rl
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.rollout import slot as rollout_slot
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.k8s.client import K8sError

POOL = "kubegpu-rollout"
NOW = 1_800_000_000.0


def gpu_node(name, unschedulable=False, ready="True", failed=None):
    node = {"metadata": {"name": name, "labels": {"nvidia.com/gpu.present": "true"}, "annotations": {}},
            "spec": {"unschedulable": unschedulable}, "status": {"conditions": [{"type": "Ready", "status": ready}]}}
    if failed is not None:
        node["metadata"]["annotations"]["kubegpu.io/maintenance-failed"] = failed
    return node


def lease(index, holder="kubegpu.fleet/ctl/1-1", node="n0", renewed=NOW, duration=60, rv="5", pool=POOL, **spec):
    body = rl.lease_body(pool, index, "kube-system", holder, node, duration, renewed)
    body["metadata"]["resourceVersion"] = rv
    body["spec"].update(spec)
    return body


def view(leases, nodes, limit=2, now=NOW, skew=30, unchanged=None):
    return rl.budget_view(leases, nodes, POOL, limit, now, skew, unchanged)


def test_time_round_trip_and_refusals():
    assert rl.parse_time(rl.micro_time(NOW + 0.25)) == pytest.approx(NOW + 0.25)
    assert rl.parse_time("2027-01-15T08:00:00+01:00") == rl.parse_time("2027-01-15T07:00:00Z")
    for bad in ("", None, 17, "yesterday", "2027-13-01T00:00:00Z", "2027-01-01 00:00:00Z"):
        assert rl.parse_time(bad) is None


def test_slot_names_and_pools():
    assert rl.slot_name(POOL, 3) == "kubegpu-rollout-slot-3"
    assert rl.slot_index(POOL, "kubegpu-rollout-slot-12") == 12
    for other in ("kubegpu-rollout-slot-01", "kubegpu-rollout-slot-", "kubegpu-rollout-slot-x", "other-slot-1", None):
        assert rl.slot_index(POOL, other) is None
    assert rl.check_pool("gpu-a") == "gpu-a"
    for bad in ("", "Upper", "a" * 41, "-x", "x_y"):
        with pytest.raises(rl.LeaseError):
            rl.check_pool(bad)


def test_budget_counts_slots_and_nodes_unavailable_for_other_reasons_once():
    nodes = [gpu_node("n0", unschedulable=True), gpu_node("n1", ready="False"), gpu_node("n2"), gpu_node("n3")]
    v = view([lease(0, node="n0")], nodes, limit=3)
    assert [h["node"] for h in v["held"]] == ["n0"]
    assert v["other"] == {"n1": "NotReady"} and v["used"] == 2
    # n2 costs one: 3 of 3 -> slot 1; n1 (already unavailable) costs nothing
    assert rl.acquire_decision(v, "n2", "kubegpu.fleet/me/2-2")["action"] == "create"
    full = view([lease(0, node="n0"), lease(1, node="n2", holder="kubegpu.fleet/b/3-3")], nodes, limit=3)
    assert rl.acquire_decision(full, "n3", "kubegpu.fleet/me/2-2")["action"] == "wait"
    free_one = rl.acquire_decision(full, "n1", "kubegpu.fleet/me/2-2")
    assert free_one["action"] == "create" and free_one["index"] == 2


def test_a_node_another_runner_holds_is_waited_for_and_our_own_is_renewed():
    nodes = [gpu_node("n0", unschedulable=True), gpu_node("n1")]
    v = view([lease(0, node="n0", holder="kubegpu.fleet/other/9-9")], nodes)
    d = rl.acquire_decision(v, "n0", "kubegpu.fleet/me/1-1")
    assert d["action"] == "wait" and "in maintenance by kubegpu.fleet/other/9-9" in d["msg"]
    mine = rl.acquire_decision(view([lease(0, node="n0", holder="kubegpu.fleet/me/1-1")], nodes), "n0",
                               "kubegpu.fleet/me/1-1")
    assert mine["action"] == "renew" and mine["name"] == "kubegpu-rollout-slot-0"


def test_max_parallel_caps_one_runners_slots():
    nodes = [gpu_node("n%d" % i) for i in range(6)]
    v = view([lease(0, node="n0", holder="kubegpu.fleet/me/1-1")], nodes, limit=3)
    assert rl.acquire_decision(v, "n1", "kubegpu.fleet/me/1-1", max_parallel=1)["action"] == "wait"
    assert rl.acquire_decision(v, "n1", "kubegpu.fleet/me/1-1", max_parallel=2)["action"] == "create"
    assert rl.acquire_decision(v, "n1", "kubegpu.fleet/other/2-2", max_parallel=1)["action"] == "create"


def test_expiry_by_renew_time_with_skew_and_by_local_observation():
    nodes = [gpu_node("n0", unschedulable=True), gpu_node("n1"), gpu_node("n2")]
    old = lease(0, node="n0", renewed=NOW - 100, duration=60)
    assert view([old], nodes, skew=30)["slots"][0]["state"] == rl.EXPIRED          # 100 > 60 + 30
    assert view([old], nodes, skew=50)["slots"][0]["state"] == rl.HELD             # within the skew allowed
    d = rl.acquire_decision(view([old], nodes, limit=1), "n1", "kubegpu.fleet/me/1-1")
    # n0 stays cordoned (other) once its slot expired: 1 of 1 used, n1 must wait
    assert d["action"] == "wait"
    d = rl.acquire_decision(view([old], nodes, limit=2), "n1", "kubegpu.fleet/me/1-1")
    assert d["action"] == "takeover" and d["index"] == 0 and d["lease"]["resource_version"] == "5"
    # a holder whose clock runs ahead: held, with a note, until this runner saw it unchanged for its duration
    ahead = lease(0, node="n0", renewed=NOW + 600, duration=60)
    v = view([ahead], nodes)
    assert v["slots"][0]["state"] == rl.HELD and "clocks of" in v["notes"][0]
    v = view([ahead], nodes, unchanged={"kubegpu-rollout-slot-0": 60.0})
    assert v["slots"][0]["state"] == rl.EXPIRED and "unchanged for 60 s" in v["notes"][0]


@pytest.mark.parametrize("broken, why", [
    ({"holderIdentity": "someone-else"}, "not a kubegpu.fleet runner"),
    ({"leaseDurationSeconds": 0}, "leaseDurationSeconds"),
    ({"leaseDurationSeconds": True}, "leaseDurationSeconds"),
    ({"renewTime": "soon", "acquireTime": None}, "renewTime"),
])
def test_malformed_leases_count_as_held_and_are_never_taken(broken, why):
    nodes = [gpu_node("n%d" % i) for i in range(4)]
    bad = lease(0, node="n3", renewed=NOW - 10_000, **broken)
    v = view([bad], nodes, limit=1)
    assert v["slots"][0]["state"] == rl.MALFORMED and why in v["notes"][0] and v["used"] == 1
    assert rl.acquire_decision(v, "n1", "kubegpu.fleet/me/1-1")["action"] == "wait"
    v = view([bad], nodes, limit=2)
    d = rl.acquire_decision(v, "n1", "kubegpu.fleet/me/1-1")
    assert d["action"] == "create" and d["index"] == 1


def test_a_lease_of_another_tool_under_the_pool_name_is_foreign():
    nodes = [gpu_node("n0"), gpu_node("n1")]
    foreign = lease(0, renewed=NOW - 10_000)
    foreign["metadata"]["labels"] = {"app": "something-else"}
    v = view([foreign], nodes, limit=2)
    assert v["slots"][0]["state"] == rl.FOREIGN and "not written by kubegpu.fleet" in v["notes"][0]
    d = rl.acquire_decision(v, "n1", "kubegpu.fleet/me/1-1")
    assert d["action"] == "create" and d["index"] == 1
    missing_node = lease(1)
    del missing_node["metadata"]["annotations"][rl.NODE_ANNOTATION]
    assert view([missing_node], nodes)["slots"][1]["state"] == rl.MALFORMED


def test_takeover_counts_transitions_and_renewal_moves_only_renew_time():
    prev = lease(0, holder="kubegpu.fleet/old/1-1", renewed=NOW - 500, leaseTransitions=3)
    body = rl.lease_body(POOL, 0, "kube-system", "kubegpu.fleet/me/2-2", "n4", 60, NOW, prev)
    assert body["metadata"]["resourceVersion"] == "5" and body["spec"]["leaseTransitions"] == 4
    assert body["metadata"]["labels"] == {rl.POOL_LABEL: POOL}
    renewed = rl.renewed_body(body, NOW + 20)
    assert renewed["spec"]["acquireTime"] == body["spec"]["acquireTime"]
    assert rl.parse_time(renewed["spec"]["renewTime"]) == pytest.approx(NOW + 20)
    assert rl.owned_by(renewed, POOL, "kubegpu.fleet/me/2-2", "n4")
    assert not rl.owned_by(renewed, POOL, "kubegpu.fleet/me/2-2", "n5")


def test_run_failures_name_only_this_run():
    record = '{"reason": "did not validate", "run": "ctl/10-20"}'
    nodes = [gpu_node("n0", failed=record), gpu_node("n1", failed='{"reason": "x", "run": "ctl/10-2"}'),
             gpu_node("n2", failed="not json ctl/10-20")]
    assert rl.run_failures(nodes, "ctl/10-20") == ["n0 (did not validate)"]


# ------------------------------------------------------------- the acquire loop, in memory

class FakeApi(object):
    """Leases with the apiserver's rules that matter here: create refuses an existing name (409),
    update and delete refuse a stale resourceVersion (409); ``faults`` raise K8sError per call."""

    def __init__(self, nodes, namespace="kube-system"):
        self.namespace = namespace
        self.store = {}
        self.node_list = nodes
        self.rv = 10
        self.faults = {}
        self.calls = []

    def _fault(self, verb):
        self.calls.append(verb)
        queue = self.faults.get(verb)
        if queue:
            raise queue.pop(0)

    def _stamp(self, body):
        self.rv += 1
        body = copy.deepcopy(body)
        body["metadata"]["resourceVersion"] = str(self.rv)
        self.store[body["metadata"]["name"]] = body
        return copy.deepcopy(body)

    def leases(self):
        self._fault("list")
        return [copy.deepcopy(v) for _k, v in sorted(self.store.items())]

    def lease(self, name):
        self._fault("get")
        return copy.deepcopy(self.store.get(name))

    def nodes(self):
        self._fault("nodes")
        return copy.deepcopy(self.node_list)

    def create(self, body):
        self._fault("create")
        if body["metadata"]["name"] in self.store:
            raise K8sError("create: HTTP 409 AlreadyExists", status=409)
        return self._stamp(body)

    def replace(self, body):
        self._fault("update")
        cur = self.store.get(body["metadata"]["name"])
        if cur is None:
            raise K8sError("update: HTTP 404", status=404)
        if body["metadata"].get("resourceVersion") != cur["metadata"]["resourceVersion"]:
            raise K8sError("update: HTTP 409 Conflict", status=409)
        return self._stamp(body)

    def delete(self, name, resource_version):
        self._fault("delete")
        cur = self.store.get(name)
        if cur is None:
            return False
        if resource_version and resource_version != cur["metadata"]["resourceVersion"]:
            raise K8sError("delete: HTTP 409 Conflict", status=409)
        del self.store[name]
        return True


class Clock(object):
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t

    def sleep(self, seconds):
        self.t += seconds


def acquire(api, node, holder="kubegpu.fleet/me/1-1", run="me/1-1", clock=None, **kw):
    clock = clock or Clock()
    kw.setdefault("max_unavailable", 2)
    kw.setdefault("timeout", 30)
    kw.setdefault("poll", 5)
    kw.setdefault("jitter", lambda low, high: 1.0)   # the poll interval exactly (its jitter: its own test)
    return rollout_slot.acquire(api, pool=POOL, node=node, holder=holder, run=run, duration=60, clock=clock,
                                sleep=clock.sleep, wall=lambda: NOW + clock.t, **kw)


def test_acquire_takes_the_lowest_slot_and_reads_again_after_a_lost_race():
    api = FakeApi([gpu_node("n%d" % i) for i in range(4)])
    first = acquire(api, "n0")
    assert first["acquired"] and first["slot"] == "kubegpu-rollout-slot-0" and first["decision"] == "create"
    # another runner creates slot 1 between our read and our write: our create gets 409, we read again
    real_create = api.create

    def racing(body):
        api.create = real_create
        real_create(rl.lease_body(POOL, 1, "kube-system", "kubegpu.fleet/b/1-1", "n3", 60, NOW))
        return real_create(body)

    api.create = racing
    second = acquire(api, "n1", holder="kubegpu.fleet/c/1-1", run="c/1-1")
    assert not second["acquired"] and "max_unavailable allows 2" in second["msg"]
    assert sorted(api.store) == ["kubegpu-rollout-slot-0", "kubegpu-rollout-slot-1"]


def test_acquire_waits_until_a_slot_frees_and_gives_up_at_the_deadline():
    api = FakeApi([gpu_node("n%d" % i) for i in range(3)])
    assert acquire(api, "n0", max_unavailable=1)["acquired"]
    clock = Clock()
    out = acquire(api, "n1", holder="kubegpu.fleet/b/1-1", run="b/1-1", clock=clock, max_unavailable=1, timeout=12)
    assert not out["acquired"] and out["polls"] == 4 and clock.t == 12
    assert out["msg"].startswith("no slot for n1 within 12")
    rollout_slot.release(api, pool=POOL, node="n0", holder="kubegpu.fleet/me/1-1")
    assert acquire(api, "n1", holder="kubegpu.fleet/b/1-1", run="b/1-1", max_unavailable=1)["acquired"]


def test_a_dead_runners_lease_is_taken_over_once_expired_by_this_runners_own_clock():
    api = FakeApi([gpu_node("n0", unschedulable=True), gpu_node("n1")])
    # the dead holder's clock ran 10 minutes ahead: renewTime is in our future
    api._stamp(lease(0, holder="kubegpu.fleet/dead/1-1", node="n0", renewed=NOW + 600, duration=60))
    clock = Clock()
    out = acquire(api, "n0", clock=clock, max_unavailable=1, timeout=300, poll=10)
    assert out["acquired"] and out["decision"] == "takeover" and 60 <= clock.t <= 70
    assert api.store["kubegpu-rollout-slot-0"]["spec"]["leaseTransitions"] == 1
    assert any("clocks of" in n for n in out["notes"]) and any("unchanged for" in n for n in out["notes"])


def test_api_errors_rbac_stops_5xx_waits_and_a_write_of_unknown_outcome_is_recognised():
    api = FakeApi([gpu_node("n0"), gpu_node("n1")])
    api.faults["create"] = [K8sError("create Lease: HTTP 403 forbidden", status=403)]
    with pytest.raises(rollout_slot.Stop) as err:
        acquire(api, "n0")
    assert "needs get, list, create, update and delete on coordination.k8s.io leases in the namespace kube-system" \
        in str(err.value)
    assert api.store == {}
    api.faults["list"] = [K8sError("list Leases: HTTP 503", status=503)] * 2
    out = acquire(api, "n0")
    assert out["acquired"] and out["polls"] == 3
    # the API applies the create and then answers 500: the next read finds our Lease and renews it
    real_create = api.create

    def applied_then_500(body):
        real_create(body)
        raise K8sError("create Lease: HTTP 500", status=500)

    api.create = applied_then_500
    out = acquire(api, "n1", holder="kubegpu.fleet/b/1-1", run="b/1-1")
    assert out["acquired"] and out["decision"] == "renew" and len(api.store) == 2


def test_two_runners_that_took_the_same_node_at_once_do_not_both_keep_it():
    api = FakeApi([gpu_node("n0"), gpu_node("n1"), gpu_node("n2")])
    real_create = api.create

    def rival_first(body):   # runner b's create for n0 lands between our decision and our write
        api.create = real_create
        real_create(rl.lease_body(POOL, 1, "kube-system", "kubegpu.fleet/b/1-1", "n0", 60, NOW))
        return real_create(body)

    api.create = rival_first
    out = acquire(api, "n0", max_unavailable=3, timeout=0)
    assert not out["acquired"] and "taken at the same moment by kubegpu.fleet/b/1-1" in out["msg"]
    assert sorted(api.store) == ["kubegpu-rollout-slot-1"]


def test_a_failure_of_this_run_or_a_failed_peer_host_stops_new_starts():
    record = '{"reason": "did not validate", "run": "me/1-1"}'
    api = FakeApi([gpu_node("n0", unschedulable=True, failed=record), gpu_node("n1")])
    with pytest.raises(rollout_slot.Stop) as err:
        acquire(api, "n1")
    assert "after the failure of n0 (did not validate)" in str(err.value)
    assert acquire(api, "n1", holder="kubegpu.fleet/x/1-1", run="x/1-1")["acquired"]   # another run goes on
    with pytest.raises(rollout_slot.Stop):
        acquire(FakeApi([gpu_node("n1")]), "n1", stop_hosts=["host-a"])


def test_a_closed_window_that_opens_after_the_deadline_stops_at_once_and_check_mode_writes_nothing():
    api = FakeApi([gpu_node("n0")])
    # NOW is Friday 2027-01-15 08:00 UTC; a Sunday window does not open within 30 s
    with pytest.raises(rollout_slot.Stop) as err:
        acquire(api, "n0", windows=[{"days": ["sun"], "start": "01:00", "end": "05:00"}])
    assert "outside the maintenance window(s) sun 01:00-05:00 UTC" in str(err.value)
    assert api.calls == []
    out = acquire(api, "n0", check_mode=True)
    assert out["acquired"] and out["msg"].startswith("check mode: would take a slot") and api.store == {}


def test_release_deletes_only_our_lease_and_retries_a_renewal_in_between():
    api = FakeApi([gpu_node("n0"), gpu_node("n1")])
    acquire(api, "n0")
    acquire(api, "n1", holder="kubegpu.fleet/b/1-1", run="b/1-1")
    out = rollout_slot.release(api, pool=POOL, node="n1", holder="kubegpu.fleet/me/1-1")
    assert not out["released"] and len(api.store) == 2
    api.faults["delete"] = [K8sError("delete: HTTP 409 Conflict", status=409)]
    out = rollout_slot.release(api, pool=POOL, node="n0", holder="kubegpu.fleet/me/1-1")
    assert out["released"] and out["slot"] == "kubegpu-rollout-slot-0" and api.calls.count("delete") == 2
    assert list(api.store) == ["kubegpu-rollout-slot-1"]


def test_renew_loop_renews_and_stops_when_the_lease_is_gone_or_the_runner_ended():
    api = FakeApi([gpu_node("n0")])
    acquire(api, "n0")
    clock = Clock()
    renewals = []
    real_replace = api.replace

    def counting(body):
        renewals.append(body["spec"]["renewTime"])
        if len(renewals) == 3:
            del api.store["kubegpu-rollout-slot-0"]     # released by the role meanwhile
        return real_replace(body)

    api.replace = counting
    why = rollout_slot.renew_loop(api, pool=POOL, node="n0", holder="kubegpu.fleet/me/1-1",
                                  name="kubegpu-rollout-slot-0", interval=20, watch=(1, None), max_hold=3600,
                                  clock=clock, sleep=clock.sleep, wall=lambda: NOW + clock.t)
    assert why in ("gone",) and len(renewals) == 3
    acquire(api, "n0")
    why = rollout_slot.renew_loop(api, pool=POOL, node="n0", holder="kubegpu.fleet/me/1-1",
                                  name="kubegpu-rollout-slot-0", interval=20, watch=(2 ** 22 + 7, None),
                                  max_hold=3600, clock=clock, sleep=clock.sleep, wall=lambda: NOW + clock.t)
    assert why == "parent" and api.store == {}


def test_waiting_behind_the_runs_own_slots_does_not_count_against_the_timeout():
    api = FakeApi([gpu_node("n%d" % i) for i in range(4)])
    assert acquire(api, "n0", max_unavailable=1)["acquired"]
    clock = Clock()
    real_sleep = clock.sleep

    def sleep(seconds):   # the run's own node finishes after 40 s of queueing (its Lease is 60 s)
        real_sleep(seconds)
        if clock.t >= 40 and "kubegpu-rollout-slot-0" in api.store:
            rollout_slot.release(api, pool=POOL, node="n0", holder="kubegpu.fleet/me/1-1")

    clock.sleep = sleep
    out = acquire(api, "n1", clock=clock, max_unavailable=1, timeout=10)
    assert out["acquired"] and out["decision"] == "create" and out["queued"] >= 40 and clock.t >= 40
    # behind another runner's slot the timeout counts
    clock = Clock()
    out = acquire(api, "n2", holder="kubegpu.fleet/b/1-1", run="b/1-1", clock=clock, max_unavailable=1, timeout=10)
    assert not out["acquired"] and out["queued"] == 0 and clock.t == 10


def test_hold_renews_a_started_node_whatever_the_gates_and_failures_say():
    record = '{"reason": "did not validate", "run": "me/1-1"}'
    api = FakeApi([gpu_node("n0", unschedulable=True, failed=record), gpu_node("n1", unschedulable=True)])
    api._stamp(lease(0, holder="kubegpu.fleet/me/1-1", node="n1", rv="1"))
    out = acquire(api, "n1", started=True, stop_hosts=["other"],
                  windows=[{"days": ["sun"], "start": "01:00", "end": "02:00"}])
    assert out["acquired"] and out["decision"] == "renew"
    del api.store["kubegpu-rollout-slot-0"]   # lost (taken over and released by another runner)
    out = acquire(api, "n1", started=True, max_unavailable=2)
    assert out["acquired"] and out["decision"] == "create"


def test_renew_loop_keeps_trying_to_give_the_slot_back_while_the_api_is_away():
    api = FakeApi([gpu_node("n0")])
    acquire(api, "n0")
    api.faults["list"] = [K8sError("list Leases: no answer", status=None)] * 3
    api.calls = []
    clock = Clock()
    why = rollout_slot.renew_loop(api, pool=POOL, node="n0", holder="kubegpu.fleet/me/1-1",
                                  name="kubegpu-rollout-slot-0", interval=20, watch=(2 ** 22 + 7, None),
                                  max_hold=3600, clock=clock, sleep=clock.sleep, wall=lambda: NOW + clock.t)
    assert why == "parent" and api.store == {} and api.calls.count("list") == 4


def _jittered_wait(api, pick):
    """One wait of 20 s at poll 5 with ``pick`` choosing within the jitter's bounds: (bounds asked, sleeps, clock)."""
    asked, slept = [], []
    clock = Clock()
    real = clock.sleep

    def sleep(seconds):
        slept.append(seconds)
        real(seconds)

    def jitter(low, high):
        asked.append((low, high))
        return pick(low, high)

    clock.sleep = sleep
    out = acquire(api, "n1", holder="kubegpu.fleet/b/1-1", run="b/1-1", clock=clock, max_unavailable=1, timeout=20,
                  jitter=jitter)
    assert not out["acquired"]
    return asked, slept, clock


def test_the_slot_wait_polls_with_jitter_within_a_quarter_of_the_interval():
    api = FakeApi([gpu_node("n%d" % i) for i in range(3)])
    assert acquire(api, "n0", max_unavailable=1)["acquired"]
    for pick, interval in ((min, 3.75), (max, 6.25)):
        asked, slept, clock = _jittered_wait(api, pick)
        assert set(asked) == {(0.75, 1.25)}
        # every sleep is the jittered interval, the last one cut at the deadline
        assert slept[:-1] == [interval] * (len(slept) - 1) and 0 < slept[-1] <= interval and clock.t == 20
