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
  - Builds the per-node view used by M(kubegpu.fleet.audit_node) - Ready and cordon
    state, pods bound to the node that are Pending and whether any kubelet event exists for
    them, the device plugin pod's image and C(PASS_DEVICE_SPECS) - plus cluster-wide findings.
  - Without O(nodes) it reads the Kubernetes API itself, in the controller's task worker - Nodes,
    Pods, DaemonSets and Deployments of every namespace and the GPU Operator's ClusterPolicies (one
    list call each) and the events of each pod bound to a node but still Pending. A ClusterPolicy
    list answered 404 (no CRD) means no GPU Operator; a 403 on Deployments or ClusterPolicies leaves
    the operator facts unknown and is noted in C(cluster.notes). The connection options and their
    C(K8S_AUTH_*) environment variables are those of C(kubernetes.core) and are resolved the same
    way, so C(module_defaults) for C(group/kubegpu.fleet.k8s) and C(group/kubernetes.core.k8s)
    configure it and C(kubernetes.core) tasks alike.
  - Each node's view has C(components), the NVIDIA stack seen from the API - C(device-plugin)
    (version, image, C(mig_strategy), C(device_list_strategy)), C(mig-manager) (version, image) and
    C(gpu-operator) (version, C(cdi_enabled), C(mig_strategy), C(driver_enabled),
    C(driver_preinstalled)) - a key only for what runs on or manages the node; the audit evaluates
    them against the known-bad catalog.
  - With O(nodes) it only turns the results of M(kubernetes.core.k8s_info) passed in (nodes,
    pods, device plugin DaemonSets, events, Deployments, ClusterPolicies) into the view, and never
    connects anywhere.
  - Runs on the controller only; it never connects to a host.
requirements:
  - kubernetes >= 25.3.0 (Python, on the controller; only to read the API)
options:
  nodes:
    description:
      - Node objects (C(resources) of M(kubernetes.core.k8s_info) for kind Node).
      - Unset, the module reads Nodes, Pods, DaemonSets and events from the API and ignores
        O(pods), O(daemonsets) and O(events).
    type: list
    elements: dict
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
  deployments:
    description:
      - Deployment objects, any namespace; the one running the C(gpu-operator) image is the GPU Operator.
    type: list
    elements: dict
    default: []
  cluster_policies:
    description:
      - ClusterPolicy objects (C(nvidia.com/v1)) of the GPU Operator; their C(cdi), C(mig), C(driver)
        and component versions are read.
    type: list
    elements: dict
  device_plugin_image_pattern:
    description: Substring of the container image that identifies the NVIDIA device plugin.
    type: str
    default: k8s-device-plugin
  node_names:
    description:
      - Inventory hostnames (a host's C(kubegpu_node_name) names its Node, else its inventory name).
      - Read only these Nodes (one GET each), the pods bound to each (one list per node with a field
        selector), the events of those still Pending and the DaemonSets, Deployments and ClusterPolicies;
        the cluster pass of one slice of a sliced run, which needs only its own nodes.
      - A name the cluster does not have is noted in C(cluster.notes).
      - An empty list reads only the DaemonSets, Deployments and ClusterPolicies - what the cluster-wide
        findings need.
      - Not used with O(nodes).
    type: list
    elements: str
  cluster_findings:
    description:
      - Evaluate the cluster-wide findings (RV(cluster_findings)). A slice of a sliced run sets it false;
        the report step evaluates them once per run.
    type: bool
    default: true
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - kubegpu.fleet.controller_action
  - kubegpu.fleet.k8s_auth
  - kubegpu.fleet.action_group.k8s
"""

EXAMPLES = r"""
- name: Per-node cluster view, read from the API (K8S_AUTH_* environment, else the kubeconfig)
  kubegpu.fleet.audit_cluster:
  register: cluster

- name: Per-node cluster view from k8s_info results
  kubegpu.fleet.audit_cluster:
    nodes: "{{ nodes.resources }}"
    pods: "{{ pods.resources }}"
    daemonsets: "{{ daemonsets.resources }}"
  register: cluster
"""

RETURN = r"""
cluster:
  description:
    - C(nodes) (node name to view) and C(device_plugin_daemonsets).
    - C(malformed) lists API objects that could not be attached to a node (a Node without a name, a pod with
      a C(spec.nodeName) that is not a string, a DaemonSet or event that is not an object); each node's view
      has its own C(malformed) list for fields of the wrong type in its Node object and the pods bound to it.
      Malformed objects never fail the task; what could be read is still used.
    - Each node's C(components) is described above; versions are image tags in the catalog's version
      text (C(v0.17.2) -> C(0.17.2)); an image without a tag or with only a digest gives version null
      with the image kept. Unset device plugin options are the plugin's defaults (C(none), C([envvar])),
      or null when a config file may set them.
    - C(components) (cluster level) maps each component to C(nodes) (how many run it) and C(versions)
      (version, nodes, node_names, images); C(gpu_operator) lists the operator C(deployments), the
      C(cluster_policies), the C(cluster_policy) in effect and C(cluster_policy_crd) (false - the CRD is
      not served).
  returned: always
  type: dict
api_calls:
  description: API requests made to read the cluster (without O(nodes)).
  returned: when nodes is not set
  type: int
cluster_findings:
  description: Findings about the cluster as a whole (e.g. an outdated device plugin).
  returned: always
  type: list
  elements: dict
"""
