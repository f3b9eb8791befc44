#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# This module is implemented as an action plugin and runs on the controller.
from __future__ import annotations

DOCUMENTATION = r"""
module: rollout_drain_verdict
short_description: Decide whether a cordoned GPU node is drained, naming what holds it
version_added: 0.1.0
description:
  - The drain decision of P(kubegpu.fleet.rolling_reboot#role), after the eviction (C(drain_verdict) in
    C(plugins/plugin_utils/rollout/decisions.py)).
  - Fails unless only DaemonSet, mirror and finished pods are left (evicted pods still Terminating
    count when O(accept_terminating)); names the pods and the PodDisruptionBudgets (O(pdbs)) that
    hold the drain, and marks the maintenance record drained when it passes.
  - Runs on the controller only; never connects to the node or the API.
options:
  pods:
    description: The pods still bound to the node.
    type: list
    elements: dict
    default: []
  pods_error:
    description: Why the pods could not be read (the verdict is negative with this reason).
    type: str
  evict_error:
    description: The last eviction error (named in the message).
    type: str
  accept_terminating:
    description: Accept evicted pods that are still Terminating.
    type: bool
    default: false
  wedged:
    description: The kubelet is wedged (for the message).
    type: bool
    default: false
  pdbs:
    description: The PodDisruptionBudgets of the cluster, to name those that hold the drain.
    type: list
    elements: dict
  drain_timeout:
    description: The drain timeout in seconds (named in the message).
    type: float
    default: 600
  fail:
    description: Fail the task when the node is not drained; V(false) returns the decision with the task ok.
    type: bool
    default: true
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - kubegpu.fleet.controller_action
  - kubegpu.fleet.rollout_decision
"""

EXAMPLES = r"""
- name: Decide whether the node is drained
  kubegpu.fleet.rollout_drain_verdict:
    name: "{{ kubegpu_node_name }}"
    pods: "{{ left.resources }}"
    maintenance: "{{ kubegpu_maintenance }}"
    drain_timeout: 600
    fail: false
"""

RETURN = r"""
decision:
  description: The drain verdict.
  returned: always
  type: dict
  sample: {ok: false, msg: "drain of gpu-1 did not finish within kubegpu_drain_timeout=600 s: pods still on the node: ml/job (not evicted)."}
  contains:
    msg:
      description: The verdict in one line.
      type: str
      returned: always
    ok:
      description: Whether the node is drained.
      type: bool
      returned: always
    leftover:
      description: The pods left, classified (C(blocking), C(terminating), C(accepted), C(ignored)).
      type: dict
      returned: always
    record:
      description: The maintenance record, marked drained when RV(decision.ok).
      type: dict
      returned: always
ansible_facts:
  description: The host facts the role's next tasks read.
  returned: success
  type: dict
  contains:
    kubegpu_rolling_reboot_drained:
      description: RV(decision.ok).
      type: bool
      returned: success
    kubegpu_rolling_reboot_wants_down:
      description: Always false (the node is down already).
      type: bool
      returned: success
    kubegpu_maintenance:
      description: The record marked drained (only when the node drained).
      type: dict
      returned: success
msg:
  description: The decision in one line (RV(decision.msg)).
  returned: always
  type: str
"""
