#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# This module is implemented as an action plugin and runs on the controller.
from __future__ import annotations

DOCUMENTATION = r"""
module: audit_evaluate
short_description: Turn one GPU node's gathered facts into audit findings (deprecated)
version_added: 0.1.0
deprecated:
  removed_in: 1.0.0
  why: M(kubegpu.fleet.audit_node) runs the probes and this evaluation in one task, and no role uses this module.
  alternative: Use M(kubegpu.fleet.audit_node).
description:
  - Evaluates the results of M(kubegpu.fleet.gpu_facts), M(kubegpu.fleet.kubelet_facts),
    M(kubegpu.fleet.driver_guard), M(kubegpu.fleet.checkpoint_sync) and
    M(kubegpu.fleet.cgroup_devices) for one node, plus the node's API view from
    M(kubegpu.fleet.audit_cluster), into findings with a stable id, severity, evidence,
    remediation and references.
  - Component versions are evaluated against the bundled catalog v2 (C(catalog/v2)) for the
    C(security.*) and C(defect.*) findings.
  - Runs on the controller only (no connection, no round trip to the node).
  - Deprecated - M(kubegpu.fleet.audit_node) runs the probes and this evaluation in one task; this module
    evaluates probe results gathered by separate tasks and is removed in 1.0.0.
  - Sets the fact C(kubegpu_audit) that M(kubegpu.fleet.audit_report) aggregates.
options:
  node:
    description: Kubernetes node name of the host.
    type: str
    required: true
  nvidia:
    description:
      - C(ansible_facts.nvidia) from M(kubegpu.fleet.gpu_facts).
      - Results of any shape are accepted (they come from nodes that may be hostile). A field of an unexpected
        type makes the rule reading it report an C(audit.module_failed) finding naming the rule
        (C(evaluate:<rule>)); the other rules still run.
    type: dict
    default: {}
  kubelet:
    description: C(ansible_facts.kubelet) from M(kubegpu.fleet.kubelet_facts).
    type: dict
    default: {}
  driver_guard:
    description: Registered result of M(kubegpu.fleet.driver_guard).
    type: dict
    default: {}
  checkpoint:
    description: Registered result of M(kubegpu.fleet.checkpoint_sync) in state C(checked).
    type: dict
    default: {}
  cgroups:
    description: Registered result of M(kubegpu.fleet.cgroup_devices).
    type: dict
    default: {}
  stack:
    description: C(ansible_facts.nvidia_stack) from M(kubegpu.fleet.stack_facts) (container toolkit, fabric
      manager, NVSwitch and kernel module facts for the catalog findings).
    type: dict
    default: {}
  api:
    description: This node's entry of the view from M(kubegpu.fleet.audit_cluster).
    type: dict
    default: {}
  errors:
    description: Probe name to error message for probes that could not run.
    type: dict
    default: {}
  unreachable:
    description:
      - Non-empty when the node probes could not reach the node (the message of the
        unreachable result). The node is then recorded with C(status=unreachable) and this
        message as C(error), without findings, and every other fact option is ignored.
    type: str
    default: ""
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - kubegpu.fleet.audit_evaluation
  - kubegpu.fleet.controller_action
"""

EXAMPLES = r"""
- name: Evaluate findings
  kubegpu.fleet.audit_evaluate:
    node: "{{ kubegpu_node_name }}"
    nvidia: "{{ ansible_facts.nvidia }}"
    kubelet: "{{ ansible_facts.kubelet }}"
    driver_guard: "{{ guard }}"
"""

RETURN = r"""
findings:
  description: Findings for the node (id, severity, title, evidence, remediation, references).
  returned: always
  type: list
  elements: dict
ansible_facts:
  description: C(kubegpu_audit) with C(node), C(status) (C(audited) or C(unreachable)), C(findings)
    and, for an unreachable node, C(error); an audited node's also C(coverage) (what the given probe results
    show - C(gpu_node), C(not_gpu_node) or C(not_inspected)) and C(labels) (the Node's, from O(api)).
  returned: always
  type: dict
"""
