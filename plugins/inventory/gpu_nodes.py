# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
name: gpu_nodes
short_description: The GPU nodes of a Kubernetes cluster, grouped by GPU product, driver, MIG mode and node pool
version_added: 0.1.0
description:
  - Reads the cluster's Nodes from the Kubernetes API and makes every node that has NVIDIA GPUs a host,
    named by its node name. A node is a GPU node when its capacity or allocatable has C(nvidia.com/gpu)
    or C(nvidia.com/mig-*) devices, or when GPU Feature Discovery (GFD, shipped with the NVIDIA device
    plugin and the GPU Operator) labelled it (C(nvidia.com/gpu.present=true), C(nvidia.com/gpu.product),
    C(nvidia.com/gpu.count)). Every other node is left out.
  - Groups (names made safe with Ansible's C(to_safe_group_name), prefix O(group_prefix)) -
    C(gpu_nodes) (every GPU node), C(gpu_product_<product>) (C(nvidia.com/gpu.product)),
    C(gpu_driver_<version>) (C(nvidia.com/cuda.driver-version.full) or C(nvidia.com/cuda.driver.major),
    C(.minor), C(.rev)), C(gpu_mig_enabled), C(gpu_mig_disabled) or C(gpu_mig_unknown) (the MIG mode, see
    C(kubegpu_gpu.mig.mode)), C(gpu_mig_strategy_<none|single|mixed>) (C(nvidia.com/mig.strategy)) and, with
    O(pool_label), C(gpu_pool_<value>). A group is made only from what the node shows.
  - Host variables - C(kubegpu_node_name) (the node name, what every kubegpu.fleet role calls the host by in
    the API), C(kubegpu_gpu) (GPU facts from the labels and resources), C(kubegpu_node) (addresses, labels,
    Ready, unschedulable, pool, node info) and the connection variables of O(address).
    O(compose), O(groups) and O(keyed_groups) (Constructable) work on these.
  - Nothing read from the API is trusted. Only labels of valid Kubernetes syntax (ASCII, values of at most 63
    characters) are read or become groups, node and pod names must be valid DNS subdomains, addresses must
    parse as IP addresses or DNS names; a node with anything else is reported in a warning (what was ignored),
    never a traceback. A value from the API that could be a template (a string with C({) or C(})) is
    marked unsafe, so it is never templated.
  - The Nodes are read in pages of 500 (the API's C(limit)), at most 50,000 in all. An API or credential
    failure fails the inventory source with the API's message (the token masked), and nothing is added.
author:
  - kubegpu.fleet maintainers (@kubegpu)
requirements:
  - kubernetes (Python package) on the controller (the execution environment)
extends_documentation_fragment:
  - constructed
  - inventory_cache
  - kubegpu.fleet.k8s_auth
options:
  plugin:
    description: The name of this plugin; a file whose name ends in C(gpu_nodes.yml) or C(gpu_nodes.yaml) holds it.
    required: true
    type: str
    choices: [kubegpu.fleet.gpu_nodes]
  node_selector:
    description:
      - A label selector (C(kubectl get nodes -l) syntax) the API applies to the Nodes it lists, for example
        C(node-role.kubernetes.io/worker). Nodes it leaves out are not read at all.
      - GPU nodes are still chosen among the selected ones as the description says.
    type: str
  address:
    description:
      - How Ansible reaches each node.
      - V(internal_ip) - C(ansible_host) is the node's first C(InternalIP) address (SSH to the node). A node
        without a valid InternalIP is left out with a warning.
      - V(hostname) - C(ansible_host) is the node name (SSH to a name DNS resolves; on most clouds and
        kubeadm clusters the node name is the host's name).
      - V(kubectl) - C(ansible_connection=kubernetes.core.kubectl) into a running pod of an agent DaemonSet on
        the node (O(kubectl_namespace), O(kubectl_pod_selector)), with C(ansible_kubectl_pod),
        C(ansible_kubectl_namespace) and C(ansible_kubectl_container) set. The pod must be privileged, use
        the host's PID namespace and mount the host's root at O(kubectl_host_mount) (the audit reads
        C(/proc), C(/sys), C(/dev), C(/dev/kmsg), C(/sys/fs/cgroup), the package database, the kubelet's
        configuration and device plugin checkpoint under C(/var/lib/kubelet), and runs C(nvidia-smi)
        from the host or the driver container), and have Python 3.8 or later. A GPU node without such a
        pod is left out with a warning. The kubectl connection reads the same C(K8S_AUTH_*) variables;
        the connection options given in this file (not O(api_key)) are passed to it as
        C(ansible_kubectl_*) host variables. C(ansible_kubectl_validate_certs) is set empty (kubernetes.core's
        kubectl connection would put its value, or that of C(K8S_AUTH_VERIFY_SSL), on kubectl's command line
        as a word kubectl refuses), so kubectl verifies the server as it does by default; O(validate_certs=false)
        sets C(ansible_kubectl_extra_args=--insecure-skip-tls-verify=true) and an empty C(ansible_kubectl_ca_cert)
        instead.
    type: str
    choices: [internal_ip, hostname, kubectl]
    default: internal_ip
  kubectl_namespace:
    description: Namespace of the agent pods for O(address=kubectl).
    type: str
    default: kubegpu-system
  kubectl_pod_selector:
    description: Label selector of the agent pods for O(address=kubectl); per node a Running pod (a Ready one first) is chosen.
    type: str
    default: app.kubernetes.io/name=kubegpu-node-agent
  kubectl_container:
    description: Container of the agent pod to run in. Default the pod's first container.
    type: str
  kubectl_host_mount:
    description:
      - Where the agent pod mounts the host's root filesystem, for O(address=kubectl). The host variables
        C(kubegpu_host_root), C(kubegpu_driver_root), C(kubegpu_proc_path), C(kubegpu_dev_path),
        C(kubegpu_sys_path), C(kubegpu_cgroup_root), C(kubegpu_kmsg_path) and C(kubegpu_checkpoint_path)
        are set below it, so the collection's roles read the host, not the container.
      - Empty - set none of them (a pod that runs in the host's namespaces with the host's paths itself).
    type: str
    default: /host
  pool_label:
    description:
      - A node label that names the node pool, for example C(cloud.google.com/gke-nodepool),
        C(eks.amazonaws.com/nodegroup), C(kubernetes.azure.com/agentpool), C(karpenter.sh/nodepool) or
        C(kubegpu.io/pool). Its value makes the group C(<group_prefix>pool_<value>) and
        C(kubegpu_node.pool).
    type: str
  group_prefix:
    description: Prefix of every group this plugin makes (not of O(keyed_groups)).
    type: str
    default: gpu_
notes:
  - The connection options are those of the collection's API modules and of C(kubernetes.core), written in
    the inventory file instead of a task; each unset one falls back to its C(K8S_AUTH_*) variable in the
    environment C(ansible-inventory) runs with, then to the kubeconfig or the in-cluster service account.
    So the AWX / Automation Platform credential type "OpenShift or Kubernetes API Bearer Token" on the
    inventory source (C(K8S_AUTH_HOST), C(K8S_AUTH_API_KEY), C(K8S_AUTH_SSL_CA_CERT), C(K8S_AUTH_VERIFY_SSL))
    is all it needs.
  - The identity needs C(list) on C(nodes) (cluster scope) and, for O(address=kubectl), C(list) on C(pods)
    in O(kubectl_namespace); the kubectl connection then needs C(create) on C(pods/exec) there.
  - With O(cache) the nodes read (not the credentials) are kept in the cache plugin's store for O(cache_timeout).
seealso:
  - name: Inventory from the cluster (docs/awx.md)
    description: The plugin as an AWX inventory source, and an agent DaemonSet for O(address=kubectl).
    link: https://github.com/kubegpu/fleet/blob/main/docs/awx.md
"""

EXAMPLES = r"""
# inventory/cluster.gpu_nodes.yml - SSH to the InternalIP, groups by product, driver, MIG and pool
plugin: kubegpu.fleet.gpu_nodes
pool_label: cloud.google.com/gke-nodepool

# inventory/prod.gpu_nodes.yml - one kubeconfig context, hosts reached by node name (a file of its own):
#   plugin: kubegpu.fleet.gpu_nodes
#   kubeconfig: ~/.kube/prod
#   context: prod-admin
#   address: hostname
#   node_selector: node-role.kubernetes.io/gpu-worker
#   keyed_groups:
#     - key: kubegpu_node.labels['topology.kubernetes.io/zone'] | default('none')
#       prefix: zone
#   groups:
#     needs_attention: kubegpu_gpu.mig.config_state == 'failed' or not kubegpu_node.ready

# inventory/awx.gpu_nodes.yml - no SSH: exec into the kubegpu node agent DaemonSet's pod on each node (a file of its own):
#   plugin: kubegpu.fleet.gpu_nodes
#   address: kubectl
#   kubectl_namespace: kubegpu-system
#   kubectl_pod_selector: app.kubernetes.io/name=kubegpu-node-agent
#   kubectl_host_mount: /host
#   cache: true
#   cache_plugin: ansible.builtin.jsonfile
#   cache_connection: /tmp/kubegpu-inventory-cache
#   cache_timeout: 600
"""

import os

from ansible.errors import AnsibleParserError
from ansible.plugins.inventory import BaseInventoryPlugin, Cacheable, Constructable

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.inventory import gpu_nodes
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.k8s import client as k8s_client

AUTH_OPTIONS = tuple(k8s_client.AUTH_ARG_SPEC)


class InventoryModule(BaseInventoryPlugin, Constructable, Cacheable):
    """GPU nodes of a Kubernetes cluster."""

    NAME = "kubegpu.fleet.gpu_nodes"

    def verify_file(self, path):
        return super().verify_file(path) and path.endswith(("gpu_nodes.yml", "gpu_nodes.yaml"))

    def parse(self, inventory, loader, path, cache=True):
        super().parse(inventory, loader, path, cache)
        self._read_config_data(path)
        address = self.get_option("address")
        pool_label = self.get_option("pool_label")
        if pool_label and not gpu_nodes.valid_label(pool_label, ""):
            raise AnsibleParserError("%s: pool_label %r is not a Kubernetes label key" % (path, pool_label))
        kubectl = None
        if address == "kubectl":
            kubectl = {"namespace": self.get_option("kubectl_namespace"),
                       "selector": self.get_option("kubectl_pod_selector"),
                       "container": self.get_option("kubectl_container"),
                       "host_mount": self.get_option("kubectl_host_mount"),
                       "auth": {k: self.get_option(k) for k in AUTH_OPTIONS}}
            if not gpu_nodes.dns_subdomain(kubectl["namespace"]) or not kubectl["selector"]:
                raise AnsibleParserError("%s: address=kubectl needs kubectl_namespace (a namespace name) and "
                                         "kubectl_pod_selector" % path)

        cache_key = self.get_cache_key(path)
        use_cache = self.get_option("cache") and cache
        update_cache = self.get_option("cache") and not cache
        data = None
        if use_cache:
            try:
                data = self._cache[cache_key]
            except KeyError:
                update_cache = True
        if not isinstance(data, dict) or data.get("address") != address:
            data = self._read(kubectl)
            update_cache = bool(self.get_option("cache"))
        if update_cache:
            self._cache[cache_key] = data
        self._populate(data, address, pool_label, kubectl)

    def _read(self, kubectl):
        """Nodes (and agent pods) from the API as plain data: ``{address, records, skipped, pods}``."""
        params = {k: self.get_option(k) for k in AUTH_OPTIONS}
        client = None
        try:
            client = k8s_client.connect(params, environ=os.environ)
            nodes, _requests = gpu_nodes.list_all(client, "v1", "nodes", "list Nodes",
                                                  label_selector=self.get_option("node_selector"))
            pods = {}
            if kubectl is not None:
                items, _requests = gpu_nodes.list_all(
                    client, "v1", "pods", "list the agent pods in %s" % kubectl["namespace"],
                    namespace=kubectl["namespace"], label_selector=kubectl["selector"])
                pods = gpu_nodes.agent_pods(items)
        except k8s_client.K8sError as exc:
            raise AnsibleParserError("kubegpu.fleet.gpu_nodes: %s" % exc)
        finally:
            if client is not None:
                client.close()
        records, skipped = [], []
        for index, node in enumerate(nodes):
            record, reason = gpu_nodes.node_record(node)
            if record is not None:
                records.append(record)
            elif reason != "not a GPU node":
                skipped.append("the Node at position %d of the list: %s" % (index, reason))
        return {"address": self.get_option("address"), "records": records, "skipped": skipped, "pods": pods}

    def _populate(self, data, address, pool_label, kubectl):
        for line in data.get("skipped") or []:
            self.display.warning("kubegpu.fleet.gpu_nodes: left out %s" % line)
        strict = self.get_option("strict")
        for record in data.get("records") or []:
            name = record["name"]
            if record.get("problems"):
                self.display.warning("kubegpu.fleet.gpu_nodes: node %s: %s" % (name, "; ".join(record["problems"])))
            variables, reason = gpu_nodes.host_vars(record, address, pool_label, data.get("pods"), kubectl)
            if variables is None:
                self.display.warning("kubegpu.fleet.gpu_nodes: left out node %s: %s" % (name, reason))
                continue
            self.inventory.add_host(name)
            for group in gpu_nodes.host_groups(record, self.get_option("group_prefix"), pool_label):
                self.inventory.add_group(group)
                self.inventory.add_child(group, name)
            for key, value in variables.items():
                self.inventory.set_variable(name, key, gpu_nodes.make_unsafe(value))
            hostvars = self.inventory.get_host(name).get_vars()
            self._set_composite_vars(self.get_option("compose"), hostvars, name, strict=strict)
            self._add_host_to_composed_groups(self.get_option("groups"), hostvars, name, strict=strict)
            self._add_host_to_keyed_groups(self.get_option("keyed_groups"), hostvars, name, strict=strict)
