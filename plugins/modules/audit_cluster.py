#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# This module is implemented as an action plugin and runs on the controller.
from __future__ import annotations

DOCUMENTATION = r"""
module: audit_cluster
short_description: Build the per-node Kubernetes view the GPU audit needs
version_added: 0.1.0
description:
  - Turns the results of M(kubernetes.core.k8s_info) (nodes, pods, device plugin DaemonSets,
    events) into a per-node view used by M(kubegpu.fleet.audit_evaluate) - Ready and cordon
    state, pods bound to the node that are Pending and whether any kubelet event exists for
    them, the device plugin pod's image and C(PASS_DEVICE_SPECS) - plus cluster-wide findings.
  - Runs on the controller only; it never connects to a host.
options:
  nodes:
    description: Node objects (C(resources) of M(kubernetes.core.k8s_info) for kind Node).
    type: list
    elements: dict
    required: true
  pods:
    description: Pod objects, any namespace.
    type: list
    elements: dict
    default: []
  daemonsets:
    description: DaemonSet objects; those running the device plugin image are summarised.
    type: list
    elements: dict
    default: []
  events:
    description: Event objects (core/v1 or events.k8s.io/v1) about the pods.
    type: list
    elements: dict
    default: []
  device_plugin_image_pattern:
    description: Substring of the container image that identifies the NVIDIA device plugin.
    type: str
    default: k8s-device-plugin
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - kubegpu.fleet.controller_action
"""

EXAMPLES = r"""
- name: Per-node cluster view
  kubegpu.fleet.audit_cluster:
    nodes: "{{ nodes.resources }}"
    pods: "{{ pods.resources }}"
    daemonsets: "{{ daemonsets.resources }}"
  register: cluster
"""

RETURN = r"""
cluster:
  description: C(nodes) (node name to view) and C(device_plugin_daemonsets).
  returned: always
  type: dict
cluster_findings:
  description: Findings about the cluster as a whole (e.g. an outdated device plugin).
  returned: always
  type: list
  elements: dict
"""
