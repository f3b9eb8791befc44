#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# This module is implemented as an action plugin and runs on the controller.
from __future__ import annotations

DOCUMENTATION = r"""
module: rollout_uncordon_decision
short_description: Decide whether a GPU node is made schedulable after its maintenance
version_added: 0.1.0
description:
  - The closing decision of P(kubegpu.fleet.rolling_reboot#role) (C(uncordon_decision) in
    C(plugins/plugin_utils/rollout/decisions.py)).
  - The node is made schedulable only when it was schedulable before the maintenance, by the host
    fact O(maintenance), else by the maintenance annotation on O(node); without either record it
    stays cordoned. Closes the maintenance record.
  - Never fails; runs on the controller only and never connects to the node or the API.
options: {}
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - kubegpu.fleet.controller_action
  - kubegpu.fleet.rollout_decision
  - kubegpu.fleet.rollout_decision.node_record
"""

EXAMPLES = r"""
- name: Decide whether the node is uncordoned
  kubegpu.fleet.rollout_uncordon_decision:
    name: "{{ kubegpu_node_name }}"
    maintenance: "{{ kubegpu_maintenance | default({}) }}"
    node: "{{ node_info.node }}"
"""

RETURN = r"""
decision:
  description: The uncordon decision.
  returned: always
  type: dict
  sample: {known: true, was_unschedulable: false, source: host fact, uncordon: true, msg: "gpu-1 uncordoned (...)"}
  contains:
    msg:
      description: The decision in one line.
      type: str
      returned: always
    uncordon:
      description: Whether the node is made schedulable.
      type: bool
      returned: always
    known:
      description: Whether the state before maintenance is on record.
      type: bool
      returned: always
    was_unschedulable:
      description: The node was cordoned before the maintenance (null when not known).
      type: bool
      returned: always
    source:
      description: Where that came from (C(host fact) or C(annotation)), null when not known.
      type: str
      returned: always
    record:
      description: The closed maintenance record.
      type: dict
      returned: always
ansible_facts:
  description: The host facts the role's next tasks read.
  returned: success
  type: dict
  contains:
    kubegpu_rolling_reboot_uncordon:
      description: RV(decision).
      type: dict
      returned: success
    kubegpu_maintenance:
      description: The closed maintenance record.
      type: dict
      returned: success
msg:
  description: The decision in one line (RV(decision.msg)).
  returned: always
  type: str
"""
