# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The evaluation options of kubegpu.fleet.audit_node and the deprecated kubegpu.fleet.audit_evaluate,
documented once as plugins/module_utils/audit/probes.py ``EVALUATION_OPTIONS`` specifies them once."""
from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  pending_threshold:
    description: Seconds a pod bound to the node may stay Pending without kubelet events before
      the node counts as no longer admitting pods. Must not be negative.
    type: int
    default: 300
  memory_min_fraction:
    description: Fraction of the GKE-ladder recommendation below which the kubelet memory
      reservation is reported as too small. A finite number, not negative.
    type: float
    default: 0.8
  skip:
    description: Finding ids not to report (the ids of the README's finding table; an unknown id fails the task).
    type: list
    elements: str
    default: []
  expected_gpus:
    description:
      - GPUs the inventory says this node has (the audit role passes C(kubegpu_expected_gpus),
        typically set per inventory group). Fewer on the PCI bus and in the driver's list raise
        C(gpu.missing). Unset - not checked.
      - The node's advertised C(nvidia.com/gpu) (allocatable, from O(api)) is always compared
        with the driver's full GPUs (GPUs in MIG mode excluded).
    type: int
"""
