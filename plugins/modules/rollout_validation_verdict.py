#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# This module is implemented as an action plugin and runs on the controller.
from __future__ import annotations

DOCUMENTATION = r"""
module: rollout_validation_verdict
short_description: Decide whether a GPU node is fit for GPU work again after its maintenance
version_added: 0.1.0
description:
  - The validation decision of P(kubegpu.fleet.rolling_reboot#role) (C(validation_verdict) in
    C(plugins/plugin_utils/rollout/decisions.py)).
  - Fails unless NVML answers with the expected driver, the loaded module matches the installed
    driver, the device checkpoint is current, the device plugin pod is Ready and the GPU resources
    are back; records the reboot (O(reboot)) and the validation in the maintenance record.
  - With O(close), a node that validated also gets its uncordon decision (as
    M(kubegpu.fleet.rollout_uncordon_decision) makes it).
  - O(validate=false) and check mode return a skipped verdict.
  - Runs on the controller only; never connects to the node or the API.
options:
  checks:
    description: M(kubegpu.fleet.rollout_node_check)'s result.
    type: dict
    default: {}
  api:
    description: M(kubegpu.fleet.node_maintenance) C(state=validated)'s result.
    type: dict
    default: {}
  driver_version:
    description: The driver version the node must run; empty for any.
    type: str
    default: ""
  validate:
    description: Whether validation is on; V(false) returns a skipped verdict.
    type: bool
    default: true
  reboot:
    description: The Ready wait's result after the reboot; recorded when it has a C(boot_id).
    type: dict
    default: {}
  reboot_reasons:
    description: Why the node was rebooted (recorded with the reboot).
    type: list
    elements: str
    default: []
  validate_timeout:
    description: The validation timeout in seconds (named in the message).
    type: float
    default: 600
  close:
    description:
      - When the node validated (or validation is off or in check mode), also decide the uncordon
        and close the record; the result is in RV(decision.uncordon) and the fact
        C(kubegpu_rolling_reboot_uncordon).
    type: bool
    default: false
  fail:
    description: Fail the task when the node did not validate; V(false) returns the decision with the task ok.
    type: bool
    default: true
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - kubegpu.fleet.controller_action
  - kubegpu.fleet.rollout_decision
  - kubegpu.fleet.rollout_decision.node_record
"""

EXAMPLES = r"""
- name: Decide whether the node validated
  kubegpu.fleet.rollout_validation_verdict:
    name: "{{ kubegpu_node_name }}"
    checks: "{{ node_checks }}"
    api: "{{ api_wait }}"
    driver_version: 570.172.08
    maintenance: "{{ kubegpu_maintenance }}"
    validate_timeout: 600
"""

RETURN = r"""
decision:
  description: The validation verdict.
  returned: always
  type: dict
  sample: {ok: false, reasons: ["device plugin pod (none) not Ready (phase None)"], msg: "gpu-1 did not validate ..."}
  contains:
    msg:
      description: The verdict in one line.
      type: str
      returned: always
    ok:
      description: Whether the node validated.
      type: bool
      returned: always
    reasons:
      description: Every reason the node did not validate.
      type: list
      elements: str
      returned: always
    skipped:
      description: Validation was off or the task ran in check mode.
      type: bool
      returned: when validation did not run
    validation:
      description: What was checked (probe, driver, checkpoint, plugin, resources).
      type: dict
      returned: when validation ran
    record:
      description: The maintenance record with the validation (and the reboot).
      type: dict
      returned: always
    uncordon:
      description: The uncordon decision (see M(kubegpu.fleet.rollout_uncordon_decision)).
      type: dict
      returned: with O(close) when the node validated
ansible_facts:
  description: The host facts the role's next tasks read.
  returned: success
  type: dict
  contains:
    kubegpu_maintenance:
      description: The maintenance record (docs/maintenance-fact.schema.json).
      type: dict
      returned: success
    kubegpu_rolling_reboot_uncordon:
      description: The uncordon decision (with O(close), when the node validated).
      type: dict
      returned: success
    kubegpu_reboot_required:
      description: False once the rebooted node validated.
      type: bool
      returned: success
    kubegpu_reboot_reasons:
      description: Empty once the rebooted node validated.
      type: list
      returned: success
msg:
  description: The decision in one line (RV(decision.msg)).
  returned: always
  type: str
"""
