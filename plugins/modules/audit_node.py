#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: audit_node
short_description: Audit a GPU node - every node probe in one module run, findings on the controller
version_added: 0.1.0
description:
  - Runs, in one Python process on the node, the probes of the audit's probe registry
    (C(plugins/module_utils/audit/probes.py)) - M(kubegpu.fleet.gpu_facts), M(kubegpu.fleet.kubelet_facts),
    M(kubegpu.fleet.driver_guard) (O(kubegpu.fleet.driver_guard#module:state=audit)),
    M(kubegpu.fleet.checkpoint_sync) (O(kubegpu.fleet.checkpoint_sync#module:state=checked))
    M(kubegpu.fleet.cgroup_devices) and M(kubegpu.fleet.stack_facts) - with the same code and option defaults those modules use,
    and returns each probe's result under RV(probes) exactly as the module's task would have returned it.
  - Then, in the same task and on the controller, evaluates the findings (every rule of the audit's rule
    registry, C(plugins/plugin_utils/audit/rules/), with the node's API view in O(api) and the bundled
    catalog v2; the finding ids are listed in the collection's README) and sets the fact
    C(kubegpu_audit) that M(kubegpu.fleet.audit_report) aggregates. The C(kubegpu.fleet.audit) role
    needs one task execution per node.
  - The probes are chained by the registry. driver_guard gets the driver and kernel module
    versions, MIG state and GPU names from gpu_facts. checkpoint_sync runs only when the NVML
    probe answered without errors (a stale check needs a trustworthy device list) and reads the
    checkpoint kubelet_facts found. cgroup_devices runs only when an NVIDIA driver is present;
    when it is skipped, C(skip_reason) says whether gpu_facts failed (and why) or found no driver.
  - A probe that fails - or raises - becomes a failed result (C(failed), C(msg)) for that
    probe only and an C(audit.module_failed) finding; the other probes still run and the task
    itself does not fail.
  - A node the module cannot reach is recorded with C(kubegpu_audit.status=unreachable) and a
    warning, and the task succeeds so the fact is kept; a module run that fails as a whole
    (no Python on the node) makes each probe failed with its message. The node is never
    dropped from the report.
  - The gpu_facts probe keeps its guarantee - the NVML (or C(nvidia-smi)) call runs in a
    forked child that is killed after O(timeout) seconds (C(probe.status=hung)).
  - The known-bad driver catalog is bundled with the collection; the action plugin reads it on
    the controller (as for M(kubegpu.fleet.driver_guard)) and passes it to the node.
author:
  - kubegpu.fleet maintainers (@kubegpu)
options:
  proc_path:
    description:
      - Where the node's procfs is mounted, for the kubelet probe (C(/host/proc) from a
        container that mounts the host at C(/host)).
    type: path
    default: /proc
  nvidia_proc_path:
    description:
      - procfs holding the NVIDIA driver files (C(devices), C(driver/nvidia)), for the GPU,
        driver and cgroup probes. Defaults to O(proc_path).
    type: path
  dev_path:
    description: Where the node's C(/dev) is mounted.
    type: path
    default: /dev
  driver_root:
    description: Root of the NVIDIA driver userspace (C(/run/nvidia/driver) with the GPU Operator).
    type: path
    default: /
  root:
    description:
      - Root of the node's filesystem, V(/host) from a container that mounts the host at C(/host).
      - The driver_guard probe reads the package database under it (M(kubegpu.fleet.driver_guard)
        O(kubegpu.fleet.driver_guard#module:package_root)); the stack_facts probe the package database,
        C(<root>/etc/nvidia-container-runtime/config.toml), the CDI spec directories and the
        runtime binaries (M(kubegpu.fleet.stack_facts) O(kubegpu.fleet.stack_facts#module:root)).
      - The action plugin parses that config.toml on the controller from the text the node read
        under this root.
    type: path
    default: /
  backend:
    description:
      - How gpu_facts asks the driver, as M(kubegpu.fleet.gpu_facts) O(kubegpu.fleet.gpu_facts#module:backend).
      - The driver_guard probe keeps its own default (V(auto)) for the rare case it must probe again.
    type: str
    choices: [auto, nvml, nvidia_smi]
    default: auto
  timeout:
    description:
      - Seconds before the NVML probe counts as hung (gpu_facts and driver_guard).
      - A finite number greater than 0 and at most 86400; anything else fails the task.
    type: float
    default: 10
  kubelet_config_path:
    description:
      - KubeletConfiguration file for the kubelet probe; empty or unset means the one the
        kubelet's C(--config) flag names.
    type: path
  cgroup_root:
    description: cgroup mount point for the cgroup_devices probe.
    type: path
    default: /sys/fs/cgroup
  cgroup_mode:
    description: How cgroup_devices decides device access (see M(kubegpu.fleet.cgroup_devices)).
    type: str
    choices: [auto, list, probe]
    default: auto
  catalog_extra:
    description:
      - Additional known-bad catalog entries for the driver_guard probe, as
        M(kubegpu.fleet.driver_guard) O(kubegpu.fleet.driver_guard#module:catalog_extra).
      - Items that are catalog v2 documents (C(schema_version=2)) are also added to the bundled
        catalog v2 the findings are evaluated with.
    type: raw
  catalog_overlay:
    description:
      - Path of the overlay file M(kubegpu.fleet.catalog_refresh) wrote, on the controller. Its catalog v2
        documents are added after those of O(catalog_extra), as the P(kubegpu.fleet.catalog_overlay#lookup)
        lookup adds them. Empty means no overlay.
      - Read on the controller as a regular file of at most 64 MiB by the action plugin (no lookup plugin to load
        in each node's task worker); a missing, oversized or malformed overlay fails the task with the
        lookup's message. Never sent to the node; its documents travel in O(catalog_extra).
    type: str
    default: ""
  node:
    description:
      - Kubernetes node name of the host, for the findings and C(kubegpu_audit.node). Defaults to
        the inventory hostname. Evaluated on the controller, never sent to the node.
    type: str
  api:
    description:
      - This node's entry of the view from M(kubegpu.fleet.audit_cluster)
        (C(kubegpu_cluster.cluster.nodes[node])) - Ready and cordon state, pods Pending on the node, the
        device plugin and the NVIDIA components running there.
    type: dict
    default: {}
  details:
    description:
      - Return each probe's data in its C(probes) entry, the findings in C(findings), and set the C(nvidia),
        C(kubelet) and C(nvidia_stack) facts, as the probe modules' own tasks would.
      - V(false) - the result is the evaluation (C(ansible_facts.kubegpu_audit), whose findings carry their
        evidence) and each probe's outcome only (C(changed), C(failed), C(msg), C(raised_at), C(skipped),
        C(skip_reason)), about a tenth of the size. Each byte of a node's result costs controller CPU (the task
        worker cleans and sends it, ansible-playbook's main process registers it), so the C(kubegpu.fleet.audit)
        role sets V(false) unless C(kubegpu_audit_details) is set.
      - Used on the controller, never sent to the node.
    type: bool
    default: true
  _catalog:
    description:
      - Internal. Set by the action plugin to the bundled catalog; do not set it.
    type: raw
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - kubegpu.fleet.audit_evaluation
  - kubegpu.fleet.gpu_hardware_scan
  - kubegpu.fleet.action_group.node
attributes:
  check_mode:
    support: full
    details: Read only; every probe runs the same in check mode.
  diff_mode:
    support: none
    details: Changes nothing, so there is nothing to diff.
  platform:
    platforms: posix
    details: Linux nodes (procfs, /dev, cgroup v1 or v2); the node needs Python 3.8 or later.
notes:
  - The C(kubegpu.fleet.audit) role uses this module (one task per node).
  - The journal scan of kubelet_facts and every other option of the five modules keep their
    module defaults (C(plugins/module_utils/audit/probe_options.py)).
  - It replaces M(kubegpu.fleet.audit_evaluate) (deprecated), which evaluates probe results gathered
    by separate tasks.
seealso:
  - module: kubegpu.fleet.gpu_facts
  - module: kubegpu.fleet.kubelet_facts
  - module: kubegpu.fleet.driver_guard
  - module: kubegpu.fleet.checkpoint_sync
  - module: kubegpu.fleet.cgroup_devices
  - module: kubegpu.fleet.audit_report
"""

EXAMPLES = r"""
- name: Gather everything the audit needs in one round trip
  kubegpu.fleet.audit_node:
    timeout: 5
  register: node_audit

- name: Audit a node with its API view (as the kubegpu.fleet.audit role does)
  kubegpu.fleet.audit_node:
    node: "{{ kubegpu_node_name }}"
    api: "{{ hostvars['localhost'].kubegpu_cluster.cluster.nodes[kubegpu_node_name] | default({}) }}"
    skip: [kubelet.memory_reservation]
    details: false

- name: Show the findings
  ansible.builtin.debug:
    msg: "{{ kubegpu_audit.findings | map(attribute='id') | list }}"

- name: Show the driver verdict
  ansible.builtin.debug:
    msg: "{{ node_audit.probes.driver_guard.verdict | default('driver_guard failed') }}"

- name: List the probes that failed
  ansible.builtin.debug:
    msg: "{{ node_audit.probes | dict2items | selectattr('value.failed', 'defined')
             | selectattr('value.failed') | map(attribute='key') | list }}"

- name: Audit a GPU Operator node from a container that mounts the host at /host
  kubegpu.fleet.audit_node:
    root: /host
    proc_path: /host/proc
    dev_path: /host/dev
    driver_root: /host/run/nvidia/driver
    cgroup_root: /host/sys/fs/cgroup
"""

RETURN = r"""
probes:
  description:
    - One entry per probe, shaped like the result the corresponding module's task registers
      (without C(invocation)); with O(details=false), each probe's outcome only (C(changed), C(failed),
      C(msg), C(raised_at), C(skipped), C(skip_reason)). A probe that failed has C(failed=true) and C(msg) (and, when
      it raised, C(raised_at), the file, line and function that raised; never a traceback); a probe that did not run has C(skipped=true) and
      C(skip_reason). Warnings a probe raised are in its C(warnings) and shown by the task.
  returned: always
  type: dict
  contains:
    gpu_facts:
      description: Result of M(kubegpu.fleet.gpu_facts) - the facts are in C(ansible_facts.nvidia).
      type: dict
      returned: always
    kubelet_facts:
      description: Result of M(kubegpu.fleet.kubelet_facts) - the facts are in C(ansible_facts.kubelet).
      type: dict
      returned: always
    driver_guard:
      description: Result of M(kubegpu.fleet.driver_guard) in state audit (C(verdict), C(matches), ...).
      type: dict
      returned: always
    checkpoint_sync:
      description: Result of M(kubegpu.fleet.checkpoint_sync) in state checked, or skipped when
        the NVML probe did not answer cleanly.
      type: dict
      returned: always
    cgroup_devices:
      description: Result of M(kubegpu.fleet.cgroup_devices), or skipped when no NVIDIA driver is present.
      type: dict
      returned: always
    stack_facts:
      description:
        - Result of M(kubegpu.fleet.stack_facts) (container toolkit, fabric manager, NVSwitches, kernel
          module flavour), its config.toml parsed on the controller as that module's action does.
        - Reads packages and config under C(/); C(sys_path), C(dev_path) and C(nvidia_proc_path) are passed on.
      type: dict
      returned: always
  sample:
    gpu_facts: {changed: false, ansible_facts: {nvidia: {present: true, probe: {status: ok}}}}
    kubelet_facts: {changed: false, ansible_facts: {kubelet: {running: true}}}
    driver_guard: {changed: false, verdict: ok, matches: []}
    checkpoint_sync: {changed: false, exists: true, stale: false, stale_ids: []}
    cgroup_devices: {changed: false, broken: [], summary: {pods: 1, containers: 2}}
failed_probes:
  description: Names of the probes that failed, in run order.
  returned: when the node was reached
  type: list
  elements: str
  sample: [kubelet_facts]
elapsed:
  description: Seconds each probe took (0 for a skipped one).
  returned: when the module ran
  type: dict
  sample: {gpu_facts: 0.021, kubelet_facts: 0.004, driver_guard: 0.03, checkpoint_sync: 0.001, cgroup_devices: 0.01}
findings:
  description:
    - Findings for the node (id, severity, title, evidence, remediation, references); the same list as
      C(ansible_facts.kubegpu_audit.findings).
  returned: with O(details=true), and for a node that was unreachable
  type: list
  elements: dict
ansible_facts:
  description:
    - C(kubegpu_audit) with C(node), C(status) (C(audited) or C(unreachable)), C(findings) and,
      for an unreachable node, C(error); M(kubegpu.fleet.audit_report) aggregates it.
    - An audited node's C(kubegpu_audit) also has C(coverage) (what the probes could see - GPUs on the PCI
      bus, driver, NVML, kubelet, kernel log, the cluster's view - and C(status) C(gpu_node), C(not_gpu_node)
      or C(not_inspected), which the finding C(audit.not_inspected) reports) and C(labels) (the Node's labels
      from O(api)).
    - With O(details=true), C(nvidia), C(kubelet) and C(nvidia_stack), as M(kubegpu.fleet.gpu_facts),
      M(kubegpu.fleet.kubelet_facts) and M(kubegpu.fleet.stack_facts) set them, when those probes succeeded
      (set by the action plugin on the controller).
  returned: always
  type: dict
unreachable_node:
  description: True when the node could not be reached (the probes did not run).
  returned: when the node was unreachable
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.kubegpu.fleet.plugins.module_utils._common.node_probes import run_probe_module
from ansible_collections.kubegpu.fleet.plugins.module_utils.audit.probes import audit_node_run
from ansible_collections.kubegpu.fleet.plugins.module_utils.audit.probes import audit_argument_spec


def main():
    module = AnsibleModule(argument_spec=audit_argument_spec(), supports_check_mode=True)
    run_probe_module(module, audit_node_run, module.params, module)


if __name__ == "__main__":
    main()
