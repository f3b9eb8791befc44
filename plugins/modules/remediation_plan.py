#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# This module is implemented as an action plugin and runs on the controller.
from __future__ import annotations

DOCUMENTATION = r"""
module: remediation_plan
short_description: Decide which fixes one GPU node's audit findings call for
version_added: 0.1.0
description:
  - Turns the C(kubegpu_audit) fact that M(kubegpu.fleet.audit_node) set for a node into a
    remediation plan, the way the C(kubegpu.fleet.remediate) playbook uses it.
  - The plan names the roles to run (C(driver), C(kubelet), C(device_plugin)) with the variables
    the findings' remediation gives, whether the node must be drained first (driver packages,
    device checkpoint, containers that lost devices), whether its kubelet is wedged in a
    device-plugin call (evicted pods then stay Terminating until the reboot), and whether it
    needs a reboot.
  - Findings no role can fix (C(node.not_ready), C(audit.module_failed)) are listed under
    C(manual); a node that was not audited (unreachable, failed) gets an empty plan.
  - Runs on the controller only and sets the fact C(kubegpu_remediation).
options:
  audit:
    description: The node's C(kubegpu_audit) fact.
    type: dict
    required: true
  skip_findings:
    description: Finding ids to leave alone on this node (the ids of the README's finding table; an unknown
      id fails the task).
    type: list
    elements: str
    default: []
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - kubegpu.fleet.controller_action
"""

EXAMPLES = r"""
- name: Plan the fixes for this node
  kubegpu.fleet.remediation_plan:
    audit: "{{ kubegpu_audit }}"
    skip_findings: [kubelet.memory_reservation]

- name: Group the nodes that need work
  ansible.builtin.group_by:
    key: "kubegpu_remediate_{{ kubegpu_remediation.fix }}"
"""

RETURN = r"""
plan:
  description: The plan (also set as the fact C(kubegpu_remediation)).
  returned: success
  type: dict
  contains:
    fix:
      description: Whether anything is to be done on the node.
      type: bool
    roles:
      description: Role short name to the variables the findings ask it to run with.
      type: dict
      sample: {driver: {kubegpu_driver_version: 570.172.08}, kubelet: {}}
    drain:
      description: Whether the node is drained (maintenance window) before the fixes.
      type: bool
    wedged:
      description: Whether the kubelet is blocked in a device-plugin call.
      type: bool
    reboot:
      description: Whether a reboot is needed whatever the roles find.
      type: bool
    findings:
      description: Finding ids acted on.
      type: list
      elements: str
    manual:
      description: Finding ids no role fixes.
      type: list
      elements: str
    skipped:
      description: Finding ids left alone because of O(skip_findings).
      type: list
      elements: str
    hands_on:
      description:
        - One line per GPU hardware problem a person must handle (C(gpu.rma), C(gpu.missing),
          C(gpu.xid) whose NVIDIA action is to investigate).
      type: list
      elements: str
    cordon:
      description:
        - The node has hands-on work; the remediate playbook cordons it with the reasons
          (annotation C(kubegpu.io/hands-on)) and runs nothing else on it (C(fix) is false).
      type: bool
    noted:
      description: Finding ids that need nothing on the node (Xids of an application fault).
      type: list
      elements: str
    reboot_reasons:
      description: The GPU reasons for the reboot (reboot Xids and driver verdicts; the GPU findings of a reboot planned anyway), one line per GPU.
      type: list
      elements: str
    gpu_reset:
      description:
        - Bus ids of the GPUs the drained node resets (M(kubegpu.fleet.gpu_reset)) instead of
          rebooting - a pending row remap, page retirement or repair, an Xid NVIDIA resets the GPU
          for, the driver asking for a reset. A refused or failed reset falls back to the reboot.
          Empty when a reboot is planned anyway (it resets every GPU).
      type: list
      elements: str
    gpu_reset_reasons:
      description: Why each GPU is reset, one line per finding and GPU.
      type: list
      elements: str
    status:
      description: The node's audit status.
      type: str
    reason:
      description: One-line summary of the plan.
      type: str
      sample: "roles driver, kubelet; drain; reboot"
"""
