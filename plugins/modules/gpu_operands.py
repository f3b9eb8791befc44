#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# This module is implemented as an action plugin and runs on the controller.
from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_operands
short_description: Pause the GPU Operator's GPU clients on one Node for a GPU reset, and restore them
version_added: 0.1.0
description:
  - C(nvidia-smi -r) refuses to reset a GPU that any application has open. On a node managed by
    the NVIDIA GPU Operator the device plugin, GPU Feature Discovery, DCGM, the DCGM exporter, the
    MIG manager and the validators are DaemonSet pods; a drain leaves them running, and they
    keep C(/dev/nvidia*) open. This module stops them the way the GPU Operator's own
    k8s-driver-manager does around a driver restart - each operand DaemonSet selects its nodes
    with the label C(nvidia.com/gpu.deploy.<component>=true), so relabelling the node makes the
    DaemonSet controller delete the pods there - and brings them back afterwards.
  - C(state=paused) sets each named component's label from C(true) to C(paused-for-gpu-reset)
    (a value other than C(true), C(false) or empty gets C(_paused-for-gpu-reset) appended, as the
    driver manager composes its C(paused-for-driver-upgrade)); C(false) and an empty value - the
    cluster operator's own "do not deploy" - are never changed, nor is a label the node does not
    carry. The values before the pause are recorded in the annotation O(annotation) in the same
    write, guarded by a C(test) of the resourceVersion it read (a conflict reads again). It then
    waits up to O(timeout) until no pod on the node that a DaemonSet controls and that selects the
    node by a paused label is left (terminating pods included); the task fails naming the pods
    that are still there.
  - C(state=restored) sets every recorded label back to its recorded value where the label still
    holds the value the pause set (a label someone changed since - an operator's C(false) - is
    kept and reported), unmarks any label carrying C(paused-for-gpu-reset) that the record lacks,
    and removes the record, in one guarded write. It is idempotent and resumes a run that was
    killed between pause and restore. The DaemonSet controller then creates the pods again.
  - C(state=info) reads the operand labels, the record and the pods still holding a pause up.
  - A node without C(nvidia.com/gpu.deploy.*) labels has no GPU Operator operands to pause; the
    task says so and changes nothing (a GPU client that still holds the GPUs then makes
    M(kubegpu.fleet.gpu_reset) refuse, and the rollout reboots the node instead).
  - The connection options and their C(K8S_AUTH_*) environment variables are those of
    C(kubernetes.core), resolved the same way (action group C(kubegpu.fleet.k8s)).
options:
  state:
    description: What to do (see the description).
    type: str
    default: info
    choices: [info, paused, restored]
  components:
    description:
      - GPU Operator components to pause (the C(<component>) of C(nvidia.com/gpu.deploy.<component>)).
      - The default is the set k8s-driver-manager stops for a driver restart less C(container-toolkit),
        which holds no GPU open. C(driver) is refused (its DaemonSet unloads the kernel modules when
        it stops).
    type: list
    elements: str
    default: [operator-validator, device-plugin, gpu-feature-discovery, dcgm-exporter, dcgm, nvsm, mig-manager,
              sandbox-validator, sandbox-device-plugin, vgpu-device-manager]
  annotation:
    description: Node annotation that records the labels' values before the pause.
    type: str
    default: kubegpu.io/gpu-operands-paused
  timeout:
    description: With C(state=paused), seconds to wait for the operand pods on the node to be gone; C(0) checks once.
    type: float
    default: 300
  poll:
    description: Seconds between the checks of the wait.
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
    details: C(state=paused) and C(state=restored) report which labels they would change and write nothing (no wait).
  diff_mode:
    support: full
    details: The named labels and the record annotation before and after.
  platform:
    platforms: all
    details: Runs on the controller only; it never connects to the host it runs for.
notes:
  - The identity needs C(get) and C(patch) on C(nodes) and C(list) on C(pods) (cluster scope); a refused write
    fails with that hint.
  - The GPU Operator's upgrade controller and k8s-driver-manager use the same labels with their own pause value;
    their pause is kept, never undone by this module.
seealso:
  - module: kubegpu.fleet.gpu_reset
  - module: kubegpu.fleet.node_maintenance
  - name: NVIDIA k8s-driver-manager
    description: The GPU Operator's driver manager (C(_evict_all_gpu_operator_components)), whose label rules this follows.
    link: https://github.com/NVIDIA/k8s-driver-manager
  - name: nvidia-smi(1), -r/--gpu-reset
    description: No application may use a GPU that is reset.
    link: https://docs.nvidia.com/deploy/nvidia-smi/index.html
author:
  - kubegpu.fleet maintainers (@kubegpu)
"""

EXAMPLES = r"""
- name: Stop the GPU Operator's GPU clients on the drained node
  kubegpu.fleet.gpu_operands:
    name: gpu-node-1
    state: paused
    timeout: 300
  register: operands

- name: Reset the GPU, then always bring the clients back
  block:
    - name: Reset
      kubegpu.fleet.gpu_reset:
        bus_ids: ["0000:18:00.0"]
      delegate_to: gpu-node-1
  always:
    - name: Restore the operand labels exactly as recorded
      kubegpu.fleet.gpu_operands:
        name: gpu-node-1
        state: restored

- name: Pause only the device plugin and DCGM exporter
  kubegpu.fleet.gpu_operands:
    name: gpu-node-1
    state: paused
    components: [device-plugin, dcgm-exporter]
"""

RETURN = r"""
labels:
  description: The node's C(nvidia.com/gpu.deploy.*) labels after the task.
  returned: always
  type: dict
  sample: {"nvidia.com/gpu.deploy.device-plugin": "paused-for-gpu-reset", "nvidia.com/gpu.deploy.dcgm": "false"}
exists:
  description: Whether the Node exists.
  returned: when state is info
  type: bool
record:
  description: The labels' values before the pause, as recorded on the Node (after the task for C(state=paused)).
  returned: when state is info or paused
  type: dict
paused:
  description: The labels this task paused, each C({from, to}).
  returned: when state is paused
  type: dict
kept:
  description: Named components' labels left as they are, each with the reason (C(false), empty, already paused, ...).
  returned: when state is paused
  type: dict
paused_labels:
  description: Every label now paused for a GPU reset (this task's and an earlier pause's).
  returned: when state is info or paused
  type: list
  elements: str
pods:
  description: The pods still holding the pause up (C(namespace), C(name), C(daemonset), C(labels), C(terminating)).
  returned: when state is info or paused
  type: list
  elements: dict
ok:
  description: Whether the operand pods are gone (C(state=paused)).
  returned: when state is paused
  type: bool
waited:
  description: Seconds the wait for the pods took.
  returned: when state is paused and labels were paused
  type: float
polls:
  description: Pod listings the wait made.
  returned: when state is paused and labels were paused
  type: int
restored:
  description: The labels set back to their recorded value, each C({from, to}).
  returned: when state is restored
  type: dict
unrecorded:
  description: Labels carrying the pause marker that the record lacked, unmarked, each C({from, to}).
  returned: when state is restored
  type: dict
left:
  description: Recorded labels not set back because they changed since the pause, each with the reason.
  returned: when state is restored
  type: dict
problems:
  description: Record entries that could not be used (malformed annotation, hostile values), each named.
  returned: always
  type: list
  elements: str
attempts:
  description: Read-patch attempts the write needed (more than 1 after a conflict).
  returned: when state is paused or restored
  type: int
msg:
  description: What was done, or why the task failed.
  returned: always
  type: str
"""
