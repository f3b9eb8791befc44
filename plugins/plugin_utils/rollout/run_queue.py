# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The plan's order among the nodes of one run that wait for a slot of the budget.

With the sliding window (``strategy: free``) every host of a play batch runs on its own: the hosts
reach kubegpu.fleet.rollout_slot in whatever order Ansible's workers take them, and each polls for
a slot on its own, so without a rule the host whose poll comes first after a slot frees takes it,
whatever the plan said (already unavailable nodes first, then the targets in their order). The
rule here: the plan's nodes of the batch (``queue``, in plan order) take slots in that order.

* Each waiting host records its state in the run's ledger, a file private to this user on the
  controller, named after the runner (the ``ansible-playbook`` process: every host of the run is a
  worker of it, and no other run shares the file): ``waiting``, ``granted`` (it took its slot) or
  ``stopped`` (it got none: a timeout, a stop).
* A host may take a slot only when the budget has room for it *and* for every node before it in
  the queue that has not taken its slot yet (:func:`ahead`), so slots go in plan order and two
  free slots still go to the first two waiters at once. A node before it that has not reached
  its slot wait yet (its worker is still on an earlier task) counts as ahead too: that is what
  keeps the first free slot for it.
* Nodes that never wait do not hold the queue: a node gone from the cluster or labelled with the
  skip label (the role skips both before the slot wait). A node before it that ``stopped`` stops
  this one too (the first failure of a run stops its new starts).

The ledger only orders this run's own hosts; runners of other runs compete through the Leases as
before (lease.py). Check mode and the hold of a started node do not use it.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile

from ansible_collections.kubegpu.fleet.plugins.module_utils._common import fileutil
from ansible_collections.kubegpu.fleet.plugins.plugin_utils import parse_bound
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.rollout import gpu_nodes

WAITING, GRANTED, STOPPED = "waiting", "granted", "stopped"
STATES = (WAITING, GRANTED, STOPPED)
MAX_LEDGER_BYTES = 1 << 20
MAX_QUEUE = 10000


class QueueError(ValueError):
    """A queue or ledger the order cannot work with."""


def check_queue(queue):
    """The queue option: node names in plan order, each once."""
    if queue is None:
        return []
    if not isinstance(queue, (list, tuple)) or len(queue) > MAX_QUEUE:
        raise QueueError("queue must be a list of at most %d node names in plan order" % MAX_QUEUE)
    out = []
    for item in queue:
        if not isinstance(item, str) or not item or len(item) > 253:
            raise QueueError("queue must hold node names (strings of 1 to 253 characters), not %r" % (item,))
        if item in out:
            raise QueueError("queue names %s twice" % item)
        out.append(item)
    return out


def ahead(queue, node, states, nodes=None, skip_label=gpu_nodes.DEFAULT_SKIP_LABEL):
    """The nodes of the queue before ``node`` that come before it to a slot.

    ``states``: node -> state from the run's ledger (a node without one has not reached its slot
    wait yet). ``nodes``: the Node objects just read (None: not read; then nobody is left out as
    gone). Returns ``{ahead, waiting, arriving, stopped}``: ``ahead`` every node still to take
    its slot before this one, ``waiting`` those of them in the slot wait already, ``arriving``
    those not there yet, ``stopped`` nodes before this one that got no slot."""
    out = {"ahead": [], "waiting": [], "arriving": [], "stopped": []}
    if node not in queue:
        return out
    present = None
    if nodes is not None:
        present = dict((gpu_nodes.node_name(n), n) for n in nodes)
    for other in queue[:queue.index(node)]:
        state = states.get(other)
        if state == GRANTED:
            continue
        if state == STOPPED:
            out["stopped"].append(other)
            continue
        if present is not None and (other not in present or gpu_nodes.has_label(present[other], skip_label)):
            continue        # the role skips it before the slot wait: it never comes
        out["ahead"].append(other)
        out["waiting" if state == WAITING else "arriving"].append(other)
    return out


# ------------------------------------------------------------------------------- the ledger

def ledger_path(holder, namespace, pool, tmpdir=None):
    """The run's ledger (in the 0700 directory of this user that holds the renewers' locks)."""
    digest = hashlib.sha256(("%s\0%s\0%s" % (holder, namespace, pool)).encode("utf-8")).hexdigest()[:32]
    return os.path.join(tmpdir or tempfile.gettempdir(), "kubegpu-lease-%d" % os.getuid(), "queue-%s.json" % digest)


def _private_dir(path):
    where = os.path.dirname(path)
    try:
        fileutil.make_dirs(where, mode=0o700)
    except OSError as exc:
        raise QueueError("cannot use %s for the run's slot order: %s" % (where, exc)) from exc
    st = os.lstat(where)
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise QueueError("%s is not a private directory of this user: the run's slot order is not kept there" % where)


def _lock(path, wait=True):
    """The exclusive lock of ledger ``path`` (its ``.lock`` file, through the write primitive)."""
    with fileutil.NodeFile(path + ".lock", action="lock") as f:
        return f.lock(wait=wait)


def _load(path):
    """The states and owner in ledger ``path``: ``({}, None)`` when there is none."""
    try:
        with fileutil.NodeFile(path, action="read") as f:
            data = f.read(limit=MAX_LEDGER_BYTES)
    except OSError as exc:
        raise QueueError("cannot read the run's slot order %s: %s" % (path, exc)) from exc
    if data is None or not data.strip():
        return {}, None
    if len(data) > MAX_LEDGER_BYTES:
        raise QueueError("the run's slot order file is over %d bytes" % MAX_LEDGER_BYTES)
    try:
        doc = parse_bound.load_json(data, "the run's slot order file", max_bytes=MAX_LEDGER_BYTES)
    except parse_bound.ParseError as exc:
        raise QueueError(str(exc)) from exc
    states = doc.get("states") if isinstance(doc, dict) else None
    if not isinstance(states, dict):
        raise QueueError("the run's slot order file has no states")
    return dict((k, v) for k, v in states.items() if isinstance(k, str) and v in STATES), doc.get("owner")


class Ledger(object):
    """The run's ledger: ``{node: state}`` in one JSON file, read and written under an exclusive
    lock (every host of the run is a process of its own), through the write primitive. ``owner``:
    the run's process (pid, start time), written with the states so that a later run can remove
    the ledger of a run that died before its batch was through (:func:`prune`)."""

    def __init__(self, path, owner=None):
        self.path = path
        self.owner = list(owner) if owner else None

    def _locked(self):
        _private_dir(self.path)
        try:
            return _lock(self.path)
        except OSError as exc:
            raise QueueError("cannot lock the run's slot order %s: %s" % (self.path, exc)) from exc

    def states(self):
        fd = self._locked()
        try:
            return _load(self.path)[0]
        finally:
            os.close(fd)

    def mark(self, node, state, queue=None):
        """Record ``node``'s state; returns all states. The file goes once every node of
        ``queue`` is granted or stopped (the run has nothing left to order)."""
        if state not in STATES:
            raise QueueError("unknown queue state %r" % (state,))
        fd = self._locked()
        try:
            states = _load(self.path)[0]
            states[node] = state
            try:
                if queue and all(states.get(n) in (GRANTED, STOPPED) for n in queue):
                    if os.path.lexists(self.path):
                        fileutil.remove_file(self.path, backup=False)
                    return states
                data = json.dumps({"states": states, "owner": self.owner}, sort_keys=True)
                fileutil.write_file(self.path, data, mode=0o600, backup=False)
            except OSError as exc:
                raise QueueError("cannot record the run's slot order in %s: %s" % (self.path, exc)) from exc
            return states
        finally:
            os.close(fd)


def prune(directory, alive, keep=None):
    """Remove the ledgers in ``directory`` whose run's process is gone (``alive(pid, start)``
    false), with their lock files; a ledger in use (locked), without an owner, or that fails the
    write primitive's checks is left alone. Returns the paths removed."""
    removed = []
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return removed
    for name in names:
        path = os.path.join(directory, name)
        if not (name.startswith("queue-") and name.endswith(".json")) or path == keep:
            continue
        try:
            fd = _lock(path, wait=False)
        except OSError:
            continue          # a host of that run is reading or writing it: the run lives
        try:
            try:
                _states, owner = _load(path)
            except QueueError:
                continue
            if not (isinstance(owner, list) and len(owner) == 2 and isinstance(owner[0], int)):
                continue
            if not alive(owner[0], owner[1]):
                try:
                    fileutil.remove_file(path, backup=False)
                    fileutil.remove_file(path + ".lock", backup=False)
                except OSError:
                    continue
                removed.append(path)
        finally:
            os.close(fd)
    return removed
