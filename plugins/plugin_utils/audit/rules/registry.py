# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The audit rules, in the order they run: one entry per rule, its name and the evaluation
options it takes (keyword arguments named as :func:`..evaluate.evaluate_node` names them).

A node rule takes the node context and returns a list of findings; a cluster rule takes the
device plugin DaemonSet summaries of the cluster view. Each finding id is a row of
``audit/finding_types.py``; a rule creates findings only through ``finding_types.finding``.
"""
from __future__ import annotations

import collections

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.rules import (
    catalog,
    checkpoint,
    cluster,
    devices,
    driver,
    gpu,
    kubelet,
    lifecycle,
    probes,
)

Rule = collections.namedtuple("Rule", ("name", "function", "options"))

NODE_RULES = (
    Rule("driver", driver.rule_driver, ()),
    Rule("nvml", driver.rule_nvml, ()),
    Rule("admission", kubelet.rule_admission, ("pending_threshold_s",)),
    Rule("cpumanager", devices.rule_cpumanager, ()),
    Rule("uvm", devices.rule_uvm, ()),
    Rule("cgroups", devices.rule_cgroups, ()),
    Rule("checkpoint", checkpoint.rule_checkpoint, ()),
    Rule("memory", kubelet.rule_memory, ("memory_min_fraction",)),
    Rule("api_node", kubelet.rule_api_node, ()),
    Rule("gpu_presence", gpu.rule_gpu_presence, ("expected_gpus",)),
    Rule("gpu_xid", gpu.rule_gpu_xid, ()),
    Rule("nvswitch", gpu.rule_nvswitch, ()),
    Rule("gpu_health", gpu.rule_gpu_health, ()),
    Rule("catalog", catalog.rule_catalog, ()),
    Rule("driver_lifecycle", lifecycle.rule_unsupported_branch, ()),
    Rule("fabricmanager", catalog.rule_fabricmanager, ()),
    Rule("module_failures", probes.rule_module_failures, ()),
)

CLUSTER_RULES = (
    Rule("device_plugin_outdated", cluster.rule_device_plugin_outdated, ()),
)
