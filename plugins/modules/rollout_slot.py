#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# This module is implemented as an action plugin and runs on the controller.
from __future__ import annotations

DOCUMENTATION = r"""
module: rollout_slot
short_description: Take or give back a slot of the rollout's disruption budget, held in the cluster as a Lease
version_added: 0.1.0
description:
  - The disruption budget every runner of C(kubegpu.fleet.rolling_reboot) shares (AWX slices,
    overlapping jobs, a person's run) - slots are C(coordination.k8s.io/v1) Leases named
    C(<pool>-slot-N) in O(namespace), as kured's lock is one object every runner obeys.
  - C(state=acquire) waits until the maintenance O(windows) are open, no alert of the
    Prometheus server at O(prometheus_url) holds new starts, no node of this run has failed, and
    the budget has a slot for the node - O(max_unavailable) counts the slots held plus the GPU
    nodes unavailable (cordoned or not Ready) for another reason, a node already unavailable
    costs nothing - then takes the lowest free slot (a create, or an update of an expired Lease
    guarded by its resourceVersion - when two runners race, one wins and the other reads again).
    A node another runner holds a slot for is waited for. It waits up to O(timeout) and then
    fails with the reason that held it last.
  - After taking a slot it starts a renewer process that renews the Lease every third of
    O(lease_duration) while the C(ansible-playbook) process of this run lives, gives the slot back
    when that process is gone, stops when the Lease is no longer this run's, and stops after
    O(max_hold) seconds in any case. A run killed together with its renewer leaves a Lease that
    expires after O(lease_duration) plus O(clock_skew).
  - The O(timeout) bounds the wait for others only; while a slot this run holds for another
    node keeps the node waiting (the run's own queue), the time does not count.
  - C(state=hold) is for a node in maintenance already (the role calls it before each reboot) -
    it renews the run's Lease for the node, or takes a slot anew when it was lost (no gates, no
    stop, no O(max_parallel)).
  - C(state=release) deletes this run's Lease for the node, guarded by its resourceVersion.
  - A Lease of the pool that is malformed or was not written by this collection counts as a held
    slot and is never changed; an expired one is taken over; a renewTime ahead of this
    controller's clock is a clock skew, and such a Lease expires only once this runner has seen
    it unchanged for O(lease_duration). An API that refuses the Lease writes for lack of
    permission (401/403) stops the node with the RBAC it needs; conflicts are read again; 5xx
    answers and timeouts are waited out.
  - The decisions are C(plugins/plugin_utils/rollout/lease.py) and C(gates.py), the
    requests and the renewer C(plugins/plugin_utils/rollout/slot.py).
requirements:
  - kubernetes >= 25.3.0 (Python, on the controller)
  - Python 3.9+ on the controller for O(windows) (zoneinfo and the controller's tz database)
options:
  name:
    description: Name of the Node.
    type: str
    required: true
  state:
    description: C(acquire) takes (or renews) a slot before a node starts, C(hold) keeps it for a started node, C(release) gives it back.
    type: str
    default: acquire
    choices: [acquire, hold, release]
  pool:
    description:
      - Name of the budget (a lowercase DNS label of at most 40 characters). Runners that share a
        node pool must use the same pool, namespace and O(max_unavailable).
    type: str
    default: kubegpu-rollout
  namespace:
    description:
      - Namespace of the slot Leases. The runner's identity needs C(get), C(list), C(create),
        C(update) and C(delete) on C(coordination.k8s.io) C(leases) there, and C(list) on Nodes.
    type: str
    default: kube-system
  max_unavailable:
    description: GPU nodes that may be unavailable at once, a count or a percentage of the GPU nodes (rounded up).
    type: str
    default: 25%
  max_parallel:
    description: Slots this run holds at most at once (C(0) - only the budget limits).
    type: int
    default: 0
  lease_duration:
    description: Seconds a Lease stays valid without a renewal (C(leaseDurationSeconds)).
    type: int
    default: 120
  clock_skew:
    description: Seconds the clocks of two runners may differ; a Lease expires this much after its duration.
    type: float
    default: 30
  timeout:
    description: Seconds C(state=acquire) waits for the gates and a slot.
    type: float
    default: 600
  poll:
    description:
      - Seconds between the reads of a wait, jittered by +-25 % so that runners started together do not poll in
        step. A slot given back waits about half of it for the next node on average; each read lists the Nodes
        and the pool's Leases (and asks Prometheus when O(prometheus_url) is set).
    type: float
    default: 2
  max_hold:
    description: Seconds after which the renewer stops in any case (the Lease then expires).
    type: float
    default: 86400
  renew:
    description: Start the renewer after taking a slot.
    type: bool
    default: true
  windows:
    description:
      - Maintenance windows; a node starts only while one is open. Each has C(days) (a list of
        C(mon) .. C(sun), default every day), C(start) and C(end) (C(HH:MM), 24 h; an end before
        the start runs over midnight, an end equal to the start is the whole day) and C(timezone)
        (an IANA name, default C(UTC)). None - always open. A window that does not open before
        O(timeout) ends stops the node at once.
    type: list
    elements: dict
    default: []
  prometheus_url:
    description:
      - Base URL of a Prometheus server (C(http(s)://host:port[/prefix])); its C(/api/v1/alerts) is read
        before each start and an active alert the filter does not exclude holds new starts. An answer
        that cannot be read holds them too.
    type: str
  alert_filter:
    description: Regular expression on C(alertname); matching alerts are ignored (kured's C(--alert-filter-regexp)).
    type: str
  alert_filter_match_only:
    description: Only alerts matching O(alert_filter) hold new starts (kured's C(--alert-filter-match-only)).
    type: bool
    default: false
  alert_firing_only:
    description: Pending alerts hold nothing, only firing ones (kured's C(--alert-firing-only)).
    type: bool
    default: false
  prometheus_timeout:
    description: Seconds one read of the alerts may take.
    type: float
    default: 10
  prometheus_validate_certs:
    description: Verify the Prometheus server's TLS certificate.
    type: bool
    default: true
  prometheus_ca_cert:
    description: CA bundle for the Prometheus server's certificate.
    type: path
  failed_annotation:
    description: The Node annotation a failed maintenance writes; one that names this run stops its new starts.
    type: str
    default: kubegpu.io/maintenance-failed
  unschedulable:
    description:
      - With C(state=acquire), C(true) cordons the node once the slot is held; with C(state=release), C(false)
        uncordons it before the slot goes back. Unset leaves C(spec.unschedulable) alone.
      - The patch is M(kubegpu.fleet.node_maintenance)'s (one RFC 6902 patch with the O(annotations), guarded by a
        C(test) of the resourceVersion it read; a conflict reads again). A failed cordon gives the slot back; a
        failed uncordon keeps it (the node is still in maintenance).
    type: bool
  annotations:
    description: Node annotations to set (strings) or remove (C(null)) in the same patch.
    type: dict
    default: {}
  queue:
    description:
      - With C(state=acquire), the nodes of this run's play batch in plan order (the role passes the plan's targets
        of C(ansible_play_batch)). Slots then go in that order within the run - a node waits while the budget has
        no room for it and for every node before it that has not taken its slot yet, including one whose host has
        not reached its slot wait yet (for at most 120 s, after which its host is taken as failed before the slot wait and
        named in RV(notes)) - whatever order Ansible's workers reach the task in (C(strategy=free)).
      - The run's hosts record their place (waiting, granted, stopped) in a file private to this user on the
        controller, named after the run; a node before this one that got no slot stops this one too.
      - Empty, or a queue without O(name), keeps no order. Other runs still compete through the Leases alone.
    type: list
    elements: str
    default: []
  skip_label:
    description: Nodes of O(queue) with this label (C(key=value), or C(key) for any value), or gone from the cluster, never wait for a slot and
      hold nobody back.
    type: str
    default: kubegpu.io/maintenance=skip
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - kubegpu.fleet.k8s_auth
  - kubegpu.fleet.action_group.k8s
attributes:
  check_mode:
    support: full
    details: Reads the budget and the gates, says which slot it would take or give back, and writes nothing.
  diff_mode:
    support: full
    details: Shows C(unschedulable) and the named annotations of the Node before and after its patch.
  platform:
    platforms: all
    details: Runs on the controller only; it never connects to the host it runs for.
notes:
  - The run id is the controller's host name, the C(ansible-playbook) process id and its start
    time; every task of one run holds slots under it.
  - The renewer runs in a session of its own on the controller, with its output to /dev/null;
    a lock file in the temp directory (mode 0700 directory) keeps one renewer per Lease.
seealso:
  - module: kubegpu.fleet.node_maintenance
  - name: kured's reboot lock and gates
    description: The model of the budget lock, the windows and the Prometheus gate.
    link: https://kured.dev/docs/configuration/
author:
  - kubegpu.fleet maintainers (@kubegpu)
"""

EXAMPLES = r"""
- name: Take a slot for the node (waits for the window, the alerts and the budget)
  kubegpu.fleet.rollout_slot:
    name: gpu-node-07
    max_unavailable: "20%"
    windows:
      - days: [mon, tue, wed, thu]
        start: "22:00"
        end: "05:00"
        timezone: Europe/Berlin
    prometheus_url: http://prometheus.monitoring:9090
    alert_filter: "^(Watchdog|InfoInhibitor)$"
    timeout: 7200
  register: slot

- name: Give it back after the uncordon
  kubegpu.fleet.rollout_slot:
    name: gpu-node-07
    state: release
"""

RETURN = r"""
acquired:
  description: Whether this run holds a slot for the node now (C(state=acquire)).
  returned: when state is acquire
  type: bool
decision:
  description: What the last decision was - C(create), C(takeover), C(renew) or C(wait).
  returned: when state is acquire
  type: str
slot:
  description: Name of the slot Lease.
  returned: success
  type: str
index:
  description: Index of the slot.
  returned: when state is acquire
  type: int
run:
  description: This run's id (the failure record of a node names it).
  returned: always
  type: str
holder:
  description: The Leases' C(holderIdentity) of this run.
  returned: always
  type: str
waited:
  description: Seconds the node waited.
  returned: when state is acquire
  type: float
queued:
  description: Seconds of the wait spent behind this run's own slots or behind nodes before it in O(queue) that were in
    their slot wait already (not counted against O(timeout)).
  returned: when state is acquire
  type: float
polls:
  description: Reads the wait made.
  returned: when state is acquire
  type: int
budget:
  description: The budget as last read - C(limit), C(gpu_nodes), C(used), C(held) (slot, node, holder, state), C(other).
  returned: when state is acquire
  type: dict
gates:
  description: The last gate check - C(open), C(stop), C(window), C(alerts), C(msg).
  returned: when state is acquire
  type: dict
ahead:
  description: The nodes before this one in O(queue) without a slot yet at the wait's last read (when it took its own,
    the budget had room for them too).
  returned: when state is acquire
  type: list
  elements: str
notes:
  description: What the budget found odd (malformed or foreign Leases, clock skew, expired Leases taken over, a node
    before it in O(queue) that never reached its slot wait).
  returned: when state is acquire
  type: list
  elements: str
renewer:
  description: Process id of the renewer started (null when one runs already).
  returned: when a slot was taken and renew is true
  type: int
released:
  description: Whether a Lease was given back (C(state=release)).
  returned: when state is release
  type: bool
node:
  description: The Node after the patch (with O(unschedulable) or O(annotations)).
  returned: when the node was patched
  type: dict
patched:
  description: Whether the Node patch changed the Node.
  returned: when the node was patched
  type: bool
cordoned:
  description: Whether this task cordoned the node with its slot (C(state=acquire), O(unschedulable=true)).
  returned: when state is acquire and a slot was taken
  type: bool
stopped:
  description: New starts stopped (a failure of this run, a window that does not open in time, RBAC).
  returned: when the node must not start
  type: bool
"""
