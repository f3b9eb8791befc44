#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# This module is implemented as an action plugin and runs on the controller.
from __future__ import annotations

DOCUMENTATION = r"""
module: node_maintenance
short_description: Read, cordon, annotate and wait on one Kubernetes Node from the controller process
version_added: 0.1.0
description:
  - The Kubernetes API side of a GPU node's maintenance window, as the
    C(kubegpu.fleet.rolling_reboot) role uses it. It talks to the API with the official
    C(kubernetes) Python client inside the controller's task worker, so a read costs tens of
    milliseconds instead of the new Python process, client import and API discovery a
    C(kubernetes.core) task pays each time; waits poll in-process.
  - C(state=info) reads the Node.
  - C(state=patched) sets C(spec.unschedulable) and the given annotations in one JSON patch,
    guarded by a C(test) of the resourceVersion it read, so a concurrent change (an operator's
    C(kubectl cordon)) is never overwritten; on a conflict it reads again and recomputes.
    Cordon and the maintenance record, or uncordon and clearing the record, are one write.
  - C(state=ready) waits until the Node is Ready (cordoned is fine) and, with O(boot_id), reports
    a different C(status.nodeInfo.bootID) - the kubelet of a new boot registered.
  - C(state=budget) waits until taking O(batch) down keeps the unavailable GPU nodes (cordoned
    or not Ready, the batch included) within O(max_unavailable).
  - C(state=validated) waits until the node's NVIDIA device plugin pod is Running and Ready and
    the GPU resources on the Node are back (the same as before the maintenance, or exactly what
    O(nvidia) and the plugin's MIG strategy predict).
  - A wait that does not succeed within O(timeout) fails with the last condition it saw.
  - Draining stays with M(kubernetes.core.k8s_drain) (evictions, PodDisruptionBudgets).
  - The connection options and their C(K8S_AUTH_*) environment variables are those of
    C(kubernetes.core), resolved the same way, so one C(module_defaults) block for
    C(group/kubernetes.core.k8s) and C(group/kubegpu.fleet.k8s) gives this module and the
    C(kubernetes.core) tasks of a play the same identity - an AWX job's Kubernetes bearer token
    credential included.
options:
  state:
    description: What to do (see the description).
    type: str
    default: info
    choices: [info, patched, ready, budget, validated]
  unschedulable:
    description: With C(state=patched), C(true) cordons and C(false) uncordons; unset leaves it.
    type: bool
  annotations:
    description:
      - With C(state=patched), annotations to set (string values) or to remove (C(null)).
        Annotations not named are left alone.
    type: dict
    default: {}
  boot_id:
    description: With C(state=ready), the bootID before the reboot; the wait also needs a different one.
    type: str
    default: ""
  batch:
    description: With C(state=budget), the nodes to take down together. Default O(name) alone.
    type: list
    elements: str
    default: []
  max_unavailable:
    description: With C(state=budget), GPU nodes that may be unavailable at once, a count or a
      percentage of the GPU nodes (rounded up, at least 1).
    type: str
    default: "25%"
  allocatable:
    description: With C(state=validated), the GPU resources the Node had before the maintenance.
    type: dict
    default: {}
  nvidia:
    description:
      - With C(state=validated), the node's C(ansible_facts.nvidia) from M(kubegpu.fleet.gpu_facts)
        (probe ok). The GPU resources the device plugin should advertise are computed from them
        with the MIG strategy of the plugin pod found; when they differ from O(allocatable) (a
        MIG layout change), exactly these are accepted. Unset, only the resources of before pass.
    type: dict
  image_pattern:
    description: With C(state=validated), a substring of the device plugin container image.
    type: str
    default: k8s-device-plugin
  timeout:
    description: Seconds a wait may take; C(0) checks once.
    type: float
    default: 0
  poll:
    description: Seconds between the checks of a wait.
    type: float
    default: 1
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - kubegpu.fleet.k8s_auth
  - kubegpu.fleet.node_api
  - kubegpu.fleet.action_group.k8s
attributes:
  check_mode:
    support: full
    details: C(state=patched) reports what it would change and writes nothing; the other states only read.
  diff_mode:
    support: full
    details: C(state=patched) shows C(unschedulable) and the named annotations before and after.
  platform:
    platforms: all
    details: Runs on the controller only; it never connects to the host it runs for.
notes:
  - Every call reads the API afresh; nothing is cached between tasks.
seealso:
  - module: kubernetes.core.k8s_drain
  - module: kubernetes.core.k8s_info
author:
  - kubegpu.fleet maintainers (@kubegpu)
"""

EXAMPLES = r"""
# One set of connection settings for kubernetes.core and this collection; unset values are
# omitted, so the K8S_AUTH_* environment (an AWX credential) or the kubeconfig applies.
- name: Maintenance of one node
  module_defaults:
    group/kubernetes.core.k8s: &k8s
      kubeconfig: "{{ kubegpu_kubeconfig | default(omit, true) }}"
      context: "{{ kubegpu_kube_context | default(omit, true) }}"
      host: "{{ kubegpu_k8s_host | default(omit, true) }}"
      api_key: "{{ kubegpu_k8s_api_key | default(omit, true) }}"
      ca_cert: "{{ kubegpu_k8s_ca_cert | default(omit, true) }}"
      validate_certs: "{{ kubegpu_k8s_validate_certs | default(omit) }}"
    group/kubegpu.fleet.k8s: *k8s
  block:
    - name: Read the node
      kubegpu.fleet.node_maintenance:
        name: gpu-node-1
      register: node

    - name: Drain it
      kubernetes.core.k8s_drain:
        name: gpu-node-1
        state: drain

- name: Cordon the node and record the maintenance in one write
  kubegpu.fleet.node_maintenance:
    name: gpu-node-1
    state: patched
    unschedulable: true
    annotations:
      kubegpu.io/maintenance: '{"was_unschedulable":false}'

- name: Wait up to 10 minutes for the node to come back from its reboot
  kubegpu.fleet.node_maintenance:
    name: gpu-node-1
    state: ready
    boot_id: "{{ old_boot_id }}"
    timeout: 600
    poll: 1

- name: Uncordon and clear the record
  kubegpu.fleet.node_maintenance:
    name: gpu-node-1
    state: patched
    unschedulable: false
    annotations:
      kubegpu.io/maintenance: null
"""

RETURN = r"""
node:
  description: The Node as the API returned it last (empty when it does not exist).
  returned: always
  type: dict
exists:
  description: Whether the Node exists (C(state=info) and C(patched)).
  returned: when state is info or patched
  type: bool
attempts:
  description: Read-patch attempts C(state=patched) needed (more than 1 after a conflict).
  returned: when state is patched
  type: int
ok:
  description: Whether the wait's condition held.
  returned: when state is ready, budget or validated
  type: bool
waited:
  description: Seconds the wait took.
  returned: when state is ready, budget or validated
  type: float
polls:
  description: Checks the wait made.
  returned: when state is ready, budget or validated
  type: int
boot_id:
  description: The Node's bootID when the wait ended.
  returned: when state is ready
  type: str
ready:
  description: The last readiness check (C(ok), C(msg), C(boot_id)).
  returned: when state is ready
  type: dict
budget:
  description: The last budget check (C(ok), C(limit), C(gpu_nodes), C(unavailable), C(batch), C(would_be), C(msg)).
  returned: when state is budget
  type: dict
plugin:
  description: The device plugin pod on the node (C(found), C(pod), C(phase), C(ready), C(running), C(mig_strategy)).
  returned: when state is validated
  type: dict
resources:
  description: The GPU resources check (C(ok), C(rule), C(pre), C(post), C(expected), C(msg)).
  returned: when state is validated
  type: dict
"""
