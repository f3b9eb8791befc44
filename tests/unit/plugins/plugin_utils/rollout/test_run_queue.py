"""The plan's order among one run's waiting hosts (plugin_utils/rollout/run_queue.py) and the slot
wait that follows it (slot.acquire with an Order).

The hosts of a run are separate processes that each poll; here each host's slot wait runs in a
thread whose sleep hands control back to the test, so the test decides who polls when (the
adversarial order: the last in the plan first) and every step is driven by events, never by time.
"""
import os
import threading

import pytest

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.rollout import lease as rl
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.rollout import run_queue as rq
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.rollout import slot as rollout_slot

from ansible_collections.kubegpu.fleet.tests.unit.plugins.plugin_utils.rollout.test_lease import NOW, POOL, FakeApi, gpu_node, view

ME = "kubegpu.fleet/me/1-1"
PLAN = ["n0", "n1", "n2", "n3"]


def test_ahead_counts_the_nodes_before_that_have_no_slot_yet():
    states = {"n0": rq.GRANTED, "n2": rq.WAITING}
    out = rq.ahead(PLAN, "n3", states)
    assert out == {"ahead": ["n1", "n2"], "waiting": ["n2"], "arriving": ["n1"], "stopped": []}
    assert rq.ahead(PLAN, "n0", states)["ahead"] == []
    assert rq.ahead(PLAN, "other", states)["ahead"] == []          # not in the queue: no order
    # a node gone from the cluster or skip-labelled never comes to its slot wait
    nodes = [gpu_node("n0"), gpu_node("n2"), gpu_node("n3")]
    nodes[1]["metadata"]["labels"]["kubegpu.io/maintenance"] = "skip"
    assert rq.ahead(PLAN, "n3", {}, nodes)["ahead"] == ["n0"]
    assert rq.ahead(PLAN, "n3", {}, nodes, skip_label="other/label")["ahead"] == ["n0", "n2"]
    assert rq.ahead(PLAN, "n3", {"n1": rq.STOPPED})["stopped"] == ["n1"]


def test_check_queue_refuses_what_is_no_plan_order():
    assert rq.check_queue(None) == [] and rq.check_queue(["a", "b"]) == ["a", "b"]
    for bad, why in ((["a", "a"], "twice"), (["a", 3], "node names"), ("a,b", "a list"), ([""], "node names")):
        with pytest.raises(rq.QueueError, match=why):
            rq.check_queue(bad)


def test_the_budget_must_have_room_for_the_nodes_before_it_first():
    nodes = [gpu_node(n) for n in PLAN]
    v = view([], nodes, limit=1)
    assert rl.acquire_decision(v, "n0", ME)["action"] == "create"
    waits = rl.acquire_decision(v, "n2", ME, ahead=["n0", "n1"])
    assert waits["action"] == "wait" and waits["msg"].startswith("n2 waits for n0, n1, before it in the plan")
    two = view([], nodes, limit=2)
    assert rl.acquire_decision(two, "n1", ME, ahead=["n0"])["action"] == "create"   # one for n0, one for n1
    assert rl.acquire_decision(two, "n2", ME, ahead=["n0", "n1"])["action"] == "wait"
    # a node before it that holds its slot already, or is unavailable already, costs nothing more
    held = view([rl.lease_body(POOL, 0, "kube-system", ME, "n0", 60, NOW)], nodes, limit=2)
    assert rl.acquire_decision(held, "n1", ME, ahead=["n0"])["action"] == "create"
    down = [gpu_node("n0", unschedulable=True)] + [gpu_node(n) for n in PLAN[1:]]
    assert rl.acquire_decision(view([], down, limit=2), "n1", ME, ahead=["n0"])["action"] == "create"
    # max_parallel counts the nodes before it too
    capped = rl.acquire_decision(view([], nodes, limit=3), "n1", ME, max_parallel=1, ahead=["n0"])
    assert capped["action"] == "wait" and "max_parallel 1" in capped["msg"]


def test_the_ledger_keeps_states_under_a_lock_and_goes_when_the_batch_is_through(tmp_path):
    where = tmp_path / "private"
    where.mkdir(mode=0o700)
    ledger = rq.Ledger(str(where / "queue.json"))
    assert ledger.states() == {}
    ledger.mark("n1", rq.WAITING, PLAN)
    ledger.mark("n0", rq.GRANTED, PLAN)
    assert ledger.states() == {"n0": rq.GRANTED, "n1": rq.WAITING}
    assert oct(os.stat(ledger.path).st_mode & 0o777) == "0o600"
    for node in PLAN[1:]:
        ledger.mark(node, rq.STOPPED if node == "n3" else rq.GRANTED, PLAN)
    assert not os.path.exists(ledger.path)
    with open(ledger.path, "w") as fh:
        fh.write("not json")
    with pytest.raises(rq.QueueError, match="not valid JSON"):
        ledger.states()
    os.unlink(ledger.path)
    os.symlink("/etc/passwd", ledger.path)
    os.lchown(ledger.path, 65534, 65534)   # a link the write primitive does not trust
    with pytest.raises(rq.QueueError, match="refusing to read"):
        ledger.states()
    with pytest.raises(rq.QueueError, match="refusing to read"):   # mark reads first: nothing written
        ledger.mark("n1", rq.WAITING, PLAN)
    assert open("/etc/passwd").read().count("\n") > 0 and os.readlink(ledger.path) == "/etc/passwd"
    os.chmod(str(where), 0o755)
    os.unlink(ledger.path)
    with pytest.raises(rq.QueueError, match="not a private directory"):
        ledger.states()


def test_ledger_path_is_per_run_and_pool():
    a = rq.ledger_path("kubegpu.fleet/ctl/1-1", "kube-system", POOL, tmpdir="/t")
    assert a.startswith("/t/kubegpu-lease-%d/queue-" % os.getuid())
    assert a != rq.ledger_path("kubegpu.fleet/ctl/2-1", "kube-system", POOL, tmpdir="/t")
    assert a != rq.ledger_path("kubegpu.fleet/ctl/1-1", "kube-system", "other", tmpdir="/t")


# ---------------------------------------------------------------- hosts of one run, in threads

class Clock(object):
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


class Host(threading.Thread):
    """One host's slot wait. Its sleep advances the shared fake clock and blocks until the test
    wakes it; ``settled`` is set whenever it sleeps or has finished."""

    def __init__(self, api, node, order, clock, timeout=600.0, max_unavailable=1):
        super().__init__(name="host-" + node, daemon=True)
        self.api, self.node, self.order, self.clock = api, node, order, clock
        self.timeout, self.max_unavailable = timeout, max_unavailable
        self.wake, self.settled = threading.Event(), threading.Event()
        self.result, self.error = None, None

    def sleep(self, seconds):
        self.clock.t += seconds
        self.settled.set()
        self.wake.wait()
        self.wake.clear()

    def run(self):
        try:
            self.result = rollout_slot.acquire(
                self.api, pool=POOL, node=self.node, holder=ME, run="me/1-1", max_unavailable=self.max_unavailable,
                duration=60, timeout=self.timeout, poll=5, clock=self.clock, sleep=self.sleep,
                wall=lambda: NOW + self.clock.t, order=self.order)
        except Exception as exc:  # pylint: disable=broad-except
            self.error = exc      # the test reads it
        finally:
            self.settled.set()

    def begin(self):
        self.start()
        self.settle()

    def poll(self):
        """Let it poll once more; return once it sleeps again or has finished."""
        if self.is_alive():
            self.settled.clear()
            self.wake.set()
            self.settle()

    def settle(self):
        assert self.settled.wait(30), "%s neither slept nor finished" % self.node   # a hang, not a timing
        if not self.is_alive() or self.result is not None or self.error is not None:
            self.join(30)

    @property
    def done(self):
        return not self.is_alive()


@pytest.fixture
def ledger(tmp_path):
    where = tmp_path / "private"
    where.mkdir(mode=0o700)
    return rq.Ledger(str(where / "queue.json"))


def granted(hosts):
    return [h.node for h in hosts if h.done and h.result and h.result["acquired"]]


def roll(api, hosts, order_of_polls):
    """Wake the waiting hosts in ``order_of_polls`` until one takes the free slot; return it."""
    for h in order_of_polls:
        if not h.done:
            h.poll()
        if h.done and h.error is None and h.result["acquired"]:
            return h
    raise AssertionError("nobody took the free slot: %s" % [(h.node, h.result and h.result["msg"]) for h in hosts])


@pytest.mark.parametrize("keep_order", [True, False])
def test_one_slot_goes_to_the_waiting_hosts_in_plan_order_whoever_polls_first(ledger, keep_order):
    api = FakeApi([gpu_node(n) for n in PLAN + ["x"]])
    other = "kubegpu.fleet/other/9-9"     # another run holds the only slot while ours arrive
    assert rollout_slot.acquire(api, pool=POOL, node="x", holder=other, run="other/9-9", max_unavailable=1,
                                duration=60, timeout=0, poll=1, wall=lambda: NOW)["acquired"]
    clock = Clock()
    order = rollout_slot.Order(PLAN, ledger) if keep_order else None
    hosts = dict((n, Host(api, n, order, clock)) for n in PLAN)
    backwards = [hosts[n] for n in reversed(PLAN)]
    for h in backwards:                   # the workers reach the slot wait last-in-the-plan first
        h.begin()
        assert not h.done
    sequence = []
    rollout_slot.release(api, pool=POOL, node="x", holder=other)
    for _round in PLAN:
        winner = roll(api, hosts.values(), [h for h in backwards if not h.done])
        sequence.append(winner.node)
        # its maintenance ends: the slot goes back and the others poll again
        rollout_slot.release(api, pool=POOL, node=winner.node, holder=ME)
    if keep_order:
        assert sequence == PLAN
        assert not os.path.exists(ledger.path)        # everyone granted: the ledger is gone
    else:
        assert sequence == list(reversed(PLAN))        # whoever polls first: what the order fixes
    assert all(h.error is None for h in hosts.values())
    assert all(h.result["queued"] >= 0 for h in hosts.values())


def test_a_free_slot_waits_for_the_first_in_the_plan_until_it_arrives(ledger):
    api = FakeApi([gpu_node(n) for n in PLAN])
    clock = Clock()
    order = rollout_slot.Order(PLAN, ledger)
    late = Host(api, "n2", order, clock, max_unavailable=2)
    late.begin()
    assert not late.done and late.result is None            # two free slots, but n0 and n1 are to come
    first = Host(api, "n0", order, clock, max_unavailable=2)
    first.begin()
    assert first.done and first.result["acquired"] and first.result["slot"] == "kubegpu-rollout-slot-0"
    late.poll()
    assert not late.done                                      # n1 has not arrived: its slot stays free
    second = Host(api, "n1", order, clock, max_unavailable=2)
    second.begin()
    assert second.done and second.result["acquired"]
    rollout_slot.release(api, pool=POOL, node="n0", holder=ME)
    late.poll()
    assert late.done and late.result["acquired"] and granted([first, second, late]) == ["n0", "n1", "n2"]


def test_a_node_before_that_never_arrives_bounds_the_wait_and_one_that_got_no_slot_stops_the_rest(ledger):
    api = FakeApi([gpu_node(n) for n in PLAN])
    clock = Clock()
    order = rollout_slot.Order(PLAN, ledger)
    lone = Host(api, "n1", order, clock, timeout=12)
    lone.begin()
    while not lone.done:
        lone.poll()
    # n0 has not come (yet): waiting for it counts, and the timeout (shorter than the grace) ends it
    assert not lone.result["acquired"] and clock.t == pytest.approx(12)
    assert "n1 waits for n0, before it in the plan" in lone.result["msg"]
    assert ledger.states()["n1"] == rq.STOPPED
    # n1 got no slot: the nodes after it start no more
    after = Host(api, "n3", rollout_slot.Order(PLAN, ledger), Clock())
    after.begin()
    assert after.done and isinstance(after.error, rollout_slot.Stop)
    assert str(after.error) == "the rollout stopped: n1, before n3 in the plan, got no slot: n3 not started"
    assert ledger.states()["n3"] == rq.STOPPED and api.store == {}


def test_waiting_behind_the_runs_own_waiting_hosts_does_not_count_against_the_timeout(ledger):
    api = FakeApi([gpu_node(n) for n in PLAN + ["x"]])
    other = "kubegpu.fleet/other/9-9"
    assert rollout_slot.acquire(api, pool=POOL, node="x", holder=other, run="other/9-9", max_unavailable=1,
                                duration=3600, timeout=0, poll=1, wall=lambda: NOW)["acquired"]
    clock = Clock()
    order = rollout_slot.Order(PLAN, ledger)
    first = Host(api, "n0", order, clock, timeout=1000)
    second = Host(api, "n1", order, clock, timeout=10)
    first.begin()
    second.begin()
    for _poll in range(6):              # 60 s on the shared clock: n1's 10 s would be long gone
        second.poll()
        first.poll()
    assert not second.done and not first.done and clock.t >= 60
    rollout_slot.release(api, pool=POOL, node="x", holder=other)
    second.poll()
    first.poll()
    assert first.done and first.result["acquired"]
    rollout_slot.release(api, pool=POOL, node="n0", holder=ME)
    second.poll()
    assert second.done and second.result["acquired"] and second.result["queued"] >= 50


def test_check_mode_and_the_hold_keep_no_order(ledger):
    api = FakeApi([gpu_node(n) for n in PLAN])
    order = rollout_slot.Order(PLAN, ledger)
    out = rollout_slot.acquire(api, pool=POOL, node="n3", holder=ME, run="me/1-1", max_unavailable=1, duration=60,
                               timeout=0, poll=1, check_mode=True, order=order)
    assert out["acquired"] and api.store == {} and not os.path.exists(ledger.path)


def test_a_node_before_that_never_arrives_is_waited_for_a_bounded_time_only(ledger):
    api = FakeApi([gpu_node(n) for n in PLAN])
    clock = Clock()
    lone = Host(api, "n1", rollout_slot.Order(PLAN, ledger), clock, timeout=600)
    lone.begin()
    while not lone.done:
        lone.poll()
    # n0's host never came to its slot wait: after the grace n1 goes, and says why
    out = lone.result
    assert out["acquired"] and rollout_slot.ARRIVAL_GRACE <= clock.t < rollout_slot.ARRIVAL_GRACE + 10
    assert "n0, before n1 in the plan, did not reach the slot wait within 120 s" in " ".join(out["notes"])
    assert ledger.states()["n1"] == rq.GRANTED


def test_ledgers_of_runs_that_died_are_pruned_and_live_or_busy_ones_kept(tmp_path):
    where = tmp_path / "private"
    where.mkdir(mode=0o700)
    dead = rq.Ledger(str(where / "queue-dead.json"), owner=(101, 7))
    live = rq.Ledger(str(where / "queue-live.json"), owner=(202, 7))
    mine = rq.Ledger(str(where / "queue-mine.json"), owner=(101, 7))
    busy = rq.Ledger(str(where / "queue-busy.json"), owner=(101, 7))
    for ledger in (dead, live, mine, busy):
        ledger.mark("n1", rq.WAITING, PLAN)
    (where / "queue-ownerless.json").write_text('{"states": {}}')
    (where / "other.lock").write_text("")
    fd = busy._locked()          # a host of that run holds it right now
    try:
        removed = rq.prune(str(where), lambda pid, start: pid == 202, keep=mine.path)
    finally:
        os.close(fd)
    assert removed == [dead.path]
    # the dead run's ledger and its lock file are gone; every other ledger keeps its lock file
    assert sorted(os.listdir(str(where))) == [
        "other.lock", "queue-busy.json", "queue-busy.json.lock", "queue-live.json", "queue-live.json.lock",
        "queue-mine.json", "queue-mine.json.lock", "queue-ownerless.json", "queue-ownerless.json.lock"]
    assert rq.prune(str(where / "missing"), lambda pid, start: False) == []
