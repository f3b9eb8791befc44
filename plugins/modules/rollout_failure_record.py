#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# This module is implemented as an action plugin and runs on the controller.
from __future__ import annotations

DOCUMENTATION = r"""
module: rollout_failure_record
short_description: Record why a GPU node's maintenance failed
version_added: 0.1.0
description:
  - The failure decision of P(kubegpu.fleet.rolling_reboot#role) (C(failure_record) in
    C(plugins/plugin_utils/rollout/decisions.py)).
  - Records why the maintenance failed and whether the role had started one on the Node
    (RV(decision.active); then the failure is written on the Node and the node stays cordoned), and
    fails with that message unless O(fail=false).
  - Runs on the controller only; never connects to the node or the API.
options:
  reason:
    description: Why the maintenance failed.
    type: str
  task:
    description: The task that failed.
    type: str
  cordon:
    description:
      - The cordon's registered result in this play (M(kubegpu.fleet.rollout_slot)), V({}) when it did not run.
      - A maintenance record made in this run whose cordon did not go through started nothing on the Node.
    type: dict
    default: {}
  uncordon_failed:
    description: The closing patch failed, so the node is still in maintenance.
    type: bool
    default: false
  run:
    description:
      - The run id of the runner (M(kubegpu.fleet.rollout_slot)'s C(run)); the failure record on the
        Node names it, so the runner's other nodes start no more.
    type: str
  fail:
    description: Fail the task when the failure is recorded (always); V(false) returns the decision with the task ok.
    type: bool
    default: true
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - kubegpu.fleet.controller_action
  - kubegpu.fleet.rollout_decision
"""

EXAMPLES = r"""
- name: Work out why the maintenance failed
  kubegpu.fleet.rollout_failure_record:
    name: "{{ kubegpu_node_name }}"
    maintenance: "{{ kubegpu_maintenance | default({}) }}"
    reason: "{{ ansible_failed_result.msg }}"
    task: "{{ ansible_failed_task.name }}"
    fail: false
  register: failure
"""

RETURN = r"""
decision:
  description: The failure record.
  returned: always
  type: dict
  sample: {active: true, msg: "maintenance of gpu-1 failed in \"Drain\": drain timed out. The node stays cordoned; ..."}
  contains:
    msg:
      description: The failure in one line.
      type: str
      returned: always
    active:
      description: Whether the role had started a maintenance on the Node.
      type: bool
      returned: always
    failure:
      description: What the C(kubegpu.io/maintenance-failed) annotation records (reason, task, time, by, run).
      type: dict
      returned: always
    record:
      description: The maintenance record with the failure.
      type: dict
      returned: always
ansible_facts:
  description: The host facts the role's next tasks read.
  returned: success
  type: dict
  contains:
    kubegpu_maintenance:
      description: The maintenance record (docs/maintenance-fact.schema.json).
      type: dict
      returned: success
    kubegpu_rolling_reboot_failure:
      description: RV(decision.failure).
      type: dict
      returned: success
msg:
  description: The decision in one line (RV(decision.msg)).
  returned: always
  type: str
"""
