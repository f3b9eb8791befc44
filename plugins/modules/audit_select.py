#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# This module is implemented as an action plugin and runs on the controller.
from __future__ import annotations

DOCUMENTATION = r"""
module: audit_select
short_description: Choose nodes from the fleet's published audit results with a JMESPath expression
version_added: 0.1.0
description:
  - Reads the per-node results an audit run published (M(kubegpu.fleet.audit_publish), O(store)), runs the
    JMESPath expression O(expression) over them and returns the nodes it chose and the inventory hosts they
    are, so an AWX workflow goes audit -> remediate (or rolling_reboot, or a report view) on exactly the nodes
    that need it. C(playbooks/remediate.yml) and C(playbooks/rolling_reboot.yml) run it first when
    C(kubegpu_select) is set.
  - The expression is compiled before anything is read; an invalid one fails the task with the parser's reason.
  - "The expression runs over a list, one object per node of the run, sorted by node name - C(node),
    C(status) (C(audited), C(unreachable), C(failed)), C(error), C(run), C(time), C(labels) (the Node's
    labels), C(coverage) (C(gpu_node), C(not_gpu_node), C(not_inspected) or null), C(ids) (the finding ids),
    C(severities), C(findings) (each C(id), C(severity), C(title), C(first_seen), C(evidence))."
  - It must give a list of node names or of those objects; anything else (null for a misspelt key, a
    number, a string that is not a node name) fails the task with what it gave.
  - An empty list is a valid selection of no node; RV(nodes) and RV(hosts) are then empty and the task
    succeeds. C(playbooks/select_from_audit.yml) then runs the playbook on no node as nothing to do, or
    fails when C(kubegpu_select_require_nodes) is true.
  - Every stored result is checked as the report step checks it; one that fails is not selectable and is
    named in RV(rejected).
  - Reads only; runs on the controller and never connects to a host.
requirements:
  - jmespath (Python, on the controller)
  - kubernetes >= 25.3.0 (Python, on the controller; only for O(store=kubernetes))
options:
  expression:
    description:
      - The JMESPath expression (at most 4096 characters) over the run's results; see the description for
        the document.
    type: str
    required: true
  store:
    description: Where the results were published - C(kubernetes) (the Nodes) or C(directory) (O(path)).
    type: str
    required: true
    choices: [kubernetes, directory]
  path:
    description: The result directory for O(store=directory).
    type: path
  run_id:
    description:
      - The run to select from (in an AWX workflow, C(kubegpu_audit_run_id) from the audit's artifacts).
      - Default - the run of the newest result in the store. Results of other runs are never selected.
    type: str
  hosts:
    description:
      - The inventory hosts the chosen nodes are looked up among (a host's C(kubegpu_node_name) names its
        Node, else its inventory name).
      - Default - every host of the inventory.
    type: list
    elements: str
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - kubegpu.fleet.controller_action
  - kubegpu.fleet.k8s_auth
  - kubegpu.fleet.action_group.k8s
attributes:
  check_mode:
    support: full
    details: Reads only; the same in check mode.
"""

EXAMPLES = r"""
- name: Every node of pool train with a known-bad driver
  kubegpu.fleet.audit_select:
    store: kubernetes
    run_id: "{{ kubegpu_audit_run_id | default(omit, true) }}"
    expression: >-
      [?contains(ids, 'driver.known_bad') && labels."cloud.google.com/gke-nodepool" == 'train'].node
  register: chosen

- name: Put them in a group the next play runs on
  ansible.builtin.add_host:
    name: "{{ item }}"
    groups: kubegpu_selected
  loop: "{{ chosen.hosts }}"

- name: Nodes with any critical finding, from a directory store
  kubegpu.fleet.audit_select:
    store: directory
    path: /runner/results/kubegpu
    expression: "[?contains(severities, 'critical')]"
"""

RETURN = r"""
run_id:
  description: The run the nodes were chosen from.
  returned: success
  type: str
store:
  description: The store read.
  returned: success
  type: str
considered:
  description: How many nodes of the run the expression ran over.
  returned: success
  type: int
nodes:
  description: The node names the expression chose, sorted.
  returned: success
  type: list
  elements: str
hosts:
  description: The inventory hostnames of the chosen nodes.
  returned: success
  type: list
  elements: str
missing:
  description: Chosen nodes no inventory host in O(hosts) is (a warning names them).
  returned: success
  type: list
  elements: str
rejected:
  description: Node (or directory entry) to why its stored result was not trusted (not selectable).
  returned: success
  type: dict
"""
