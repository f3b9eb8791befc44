#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# This module is implemented as an action plugin and runs on the controller.
from __future__ import annotations

DOCUMENTATION = r"""
module: rollout_start
short_description: Decide how a GPU node's maintenance starts
version_added: 0.1.0
description:
  - The first decision of P(kubegpu.fleet.rolling_reboot#role), before the cordon (C(start_maintenance) in
    C(plugins/plugin_utils/rollout/decisions.py)).
  - Fails when the Node does not exist; tells whether the skip label keeps the role away
    (RV(decision.skip)) or a maintenance already runs (RV(decision.already)); records the node's
    state before maintenance (fact C(kubegpu_maintenance); from the annotation an earlier run left,
    else from the Node) and the annotation the cordon patch writes (RV(decision.annotations)).
  - Runs on the controller only; never connects to the node or the API.
options:
  skip_label:
    description: Nodes with this label (C(key=value), or C(key) with any value) are left alone.
    type: str
    default: kubegpu.io/maintenance=skip
  drain_timeout:
    description: Seconds the drain may take; the drain deadline (RV(decision.drain_deadline)) is now plus this.
    type: float
    default: 600
  fail:
    description: Fail the task when the Node does not exist; V(false) returns the decision with the task ok.
    type: bool
    default: true
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - kubegpu.fleet.controller_action
  - kubegpu.fleet.rollout_decision
  - kubegpu.fleet.rollout_decision.node_record
"""

EXAMPLES = r"""
- name: Decide how the maintenance starts
  kubegpu.fleet.rollout_start:
    name: "{{ kubegpu_node_name }}"
    node: "{{ node_info.node }}"
    maintenance: "{{ kubegpu_maintenance | default({}) }}"
    drain_timeout: 600
"""

RETURN = r"""
decision:
  description: The start decision.
  returned: always
  type: dict
  sample: {exists: true, skip: false, already: false, cordon: true, msg: "gpu-1: cordon and drain (cordoned before: False)"}
  contains:
    msg:
      description: The decision in one line.
      type: str
      returned: always
    exists:
      description: Whether the Node exists.
      type: bool
      returned: always
    skip:
      description: The skip label keeps the role away from the node.
      type: bool
      returned: always
    already:
      description: A maintenance already runs and the node is drained.
      type: bool
      returned: always
    cordon:
      description: The budget wait, the cordon and the drain are to run.
      type: bool
      returned: always
    record:
      description: The maintenance record (the fact C(kubegpu_maintenance)).
      type: dict
      returned: always
    annotations:
      description: The annotations the cordon patch writes (none when the Node has the record already).
      type: dict
      returned: always
    drain_deadline:
      description: When the drain must be over (seconds since the epoch).
      type: int
      returned: always
ansible_facts:
  description: The host facts the role's next tasks read.
  returned: success
  type: dict
  contains:
    kubegpu_rolling_reboot_start:
      description: RV(decision).
      type: dict
      returned: success
    kubegpu_rolling_reboot_wants_down:
      description: Whether this host goes down now (the budget check counts it).
      type: bool
      returned: success
    kubegpu_maintenance:
      description: The maintenance record (docs/maintenance-fact.schema.json).
      type: dict
      returned: success
msg:
  description: The decision in one line (RV(decision.msg)).
  returned: always
  type: str
"""
