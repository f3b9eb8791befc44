#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# This module is implemented as an action plugin and runs on the controller.
from __future__ import annotations

DOCUMENTATION = r"""
module: audit_publish
short_description: Publish each node's GPU audit result where a later fleet report can read it
version_added: 0.1.0
description:
  - Publishes the C(kubegpu_audit) fact of every host named in O(hosts) under the run's id, so that
    a report step run once - M(kubegpu.fleet.audit_report) with O(kubegpu.fleet.audit_report#module:store) -
    builds one fleet report from any number of slices (AWX job slicing) and says what changed since
    the previous run.
  - Each node's record holds the node's status and findings, the run id and time, the time each
    finding was first seen (kept from the node's previous record while the finding persists) and the
    previous run's finding ids.
  - O(store=kubernetes) writes to each Node - a compact JSON summary in the annotation
    C(kubegpu.io/audit-result) (run id, time, status, each finding id with its severity, first-seen
    time and evidence digest), the full findings zlib-compressed in C(kubegpu.io/audit-findings)
    (left out, and the summary says so, above 128 KiB), each with a JSON patch guarded by the Node's
    C(resourceVersion) and recomputed after a conflict, so two runs at once never lose each other's
    results; and one Node condition per finding area through C(nodes/status) (C(KubegpuDriver),
    C(KubegpuGPUHealth), C(KubegpuSecurity), C(KubegpuKubelet), C(KubegpuDeviceAccess),
    C(KubegpuClusterComponents), C(KubegpuAudit); status C(True) when the area has findings,
    C(lastTransitionTime) kept while the status holds). A node whose audit did not finish changes
    only C(KubegpuAudit).
  - The identity needs C(get), C(list) and C(patch) on C(nodes) and C(patch) on C(nodes/status); a
    refusal (401/403) fails the task with that RBAC named. A Node that does not exist is reported
    in RV(errors) for that node only.
  - O(store=directory) writes one JSON file per node, C(<path>/nodes/<node>.json), atomically
    through the collection's write primitive, under an exclusive lock on C(<path>/.lock).
  - A stored record that fails the checks (size, schema, node, run id, digest) is not trusted; it
    is replaced and named in RV(replaced).
  - Runs on the controller only; it never connects to a host.
requirements:
  - kubernetes >= 25.3.0 (Python, on the controller; only for O(store=kubernetes))
options:
  hosts:
    description: Inventory hostnames whose audit results to publish (the hosts of this run or slice).
    type: list
    elements: str
    required: true
  store:
    description:
      - C(kubernetes) - on the Nodes (annotations and conditions). C(directory) - files under O(path).
    type: str
    required: true
    choices: [kubernetes, directory]
  path:
    description:
      - The result directory for O(store=directory) (a PVC or NFS mount shared by every job of the run).
      - No directory on the path may be writable by another user than root and the user running the
        task.
    type: path
  run_id:
    description:
      - The run these results belong to; every slice of one run must use the same id.
      - Default - AWX's C(awx_workflow_job_id) (shared by every slice of a sliced job), then
        C(awx_job_id), then C(tower_workflow_job_id) and C(tower_job_id), else C(local-<time>-<pid>).
      - 1 to 128 letters, digits, C(.), C(_), C(:), C(-).
    type: str
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - kubegpu.fleet.controller_action
  - kubegpu.fleet.k8s_auth
  - kubegpu.fleet.action_group.k8s
attributes:
  check_mode:
    support: full
    details: Computes what would be written and reports whether anything would change; writes nothing.
"""

EXAMPLES = r"""
- name: Publish this slice's results on the Nodes
  kubegpu.fleet.audit_publish:
    hosts: "{{ ansible_play_hosts_all }}"
    store: kubernetes
  register: published

- name: Publish to a shared directory
  kubegpu.fleet.audit_publish:
    hosts: "{{ groups['gpu_nodes'] }}"
    store: directory
    path: /runner/results/kubegpu
    run_id: "nightly-{{ '%Y%m%d' | strftime }}"
"""

RETURN = r"""
run_id:
  description: The run id the results were published under.
  returned: success
  type: str
run_id_source:
  description: Where the run id came from (C(kubegpu_audit_run_id), C(awx_workflow_job_id), ..., C(generated)).
  returned: success
  type: str
run_time:
  description: The run time recorded (UTC, C(YYYY-MM-DDTHH:MM:SSZ)).
  returned: success
  type: str
store:
  description: The store written.
  returned: success
  type: str
nodes:
  description: Node names published (or attempted).
  returned: success
  type: list
  elements: str
published:
  description: How many nodes were published.
  returned: success
  type: int
errors:
  description: Node name to why its result was not published (a missing Node, an invalid node name).
  returned: success
  type: dict
replaced:
  description: Node name to why the record the store held was not trusted (it was replaced).
  returned: success
  type: dict
"""
