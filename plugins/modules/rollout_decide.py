#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# This module is implemented as an action plugin and runs on the controller.
from __future__ import annotations

DOCUMENTATION = r"""
module: rollout_decide
short_description: One decision of a GPU node's rolling maintenance, with its reasons
version_added: 0.1.0
deprecated:
  removed_in: 1.0.0
  why: Each decision has its own module with only the options of that decision.
  alternative: >-
    Use M(kubegpu.fleet.rollout_start), M(kubegpu.fleet.rollout_drain_verdict),
    M(kubegpu.fleet.rollout_validation_verdict), M(kubegpu.fleet.rollout_uncordon_decision) or
    M(kubegpu.fleet.rollout_failure_record).
description:
  - The decisions of P(kubegpu.fleet.rolling_reboot#role), computed by tested Python
    (C(plugins/plugin_utils/rollout/decisions.py)) from what the role's other tasks read, returned with
    their reasons and set as facts. Each decision has its own module; this one takes the union of
    their options and the O(decision) to make.
  - C(start) (before the cordon) fails when the Node does not exist; tells whether the skip label
    keeps the role away (RV(decision.skip)) or a maintenance already runs (RV(decision.already));
    records the node's state before maintenance (fact C(kubegpu_maintenance); from the annotation
    an earlier run left, else from the Node) and the annotation the cordon patch writes.
  - C(drain) (after the eviction) fails unless only DaemonSet, mirror and finished pods are left
    (evicted pods still Terminating count when O(accept_terminating)); names the pods and the
    PodDisruptionBudgets (O(pdbs)) that hold the drain.
  - C(validation) fails unless NVML answers with the expected driver, the loaded module matches the
    installed driver, the device checkpoint is current, the device plugin pod is Ready and the GPU
    resources are back; records the reboot (O(reboot)) and the validation; with O(close) it also
    decides the uncordon.
  - C(uncordon) says whether the node may be made schedulable (only when it was schedulable before
    the maintenance, by the host fact, else by the annotation on O(node)) and closes the record.
  - C(failure) records why the maintenance failed and whether the role had started one on the Node,
    and fails with that message.
  - Runs on the controller only; never connects to the node or the API.
options:
  decision:
    description: Which decision.
    type: str
    required: true
    choices: [start, drain, validation, uncordon, failure]
  skip_label:
    description: Nodes with this label (C(key=value), or C(key) with any value) are left alone (C(start)).
    type: str
    default: kubegpu.io/maintenance=skip
  timeout:
    description: The drain timeout (C(start) sets the drain deadline from it, C(drain) names it) or the validation timeout (C(validation)).
    type: float
    default: 600
  pods:
    description: The pods still bound to the node (C(drain)).
    type: list
    elements: dict
    default: []
  pods_error:
    description: Why the pods could not be read (C(drain)).
    type: str
  evict_error:
    description: The last eviction error (C(drain)).
    type: str
  accept_terminating:
    description: Accept evicted pods that are still Terminating (C(drain)).
    type: bool
    default: false
  wedged:
    description: The kubelet is wedged (for the message, C(drain)).
    type: bool
    default: false
  pdbs:
    description: The PodDisruptionBudgets of the cluster, to name those that hold the drain (C(drain)).
    type: list
    elements: dict
  checks:
    description: M(kubegpu.fleet.rollout_node_check)'s result (C(validation)).
    type: dict
    default: {}
  api:
    description: M(kubegpu.fleet.node_maintenance) C(state=validated)'s result (C(validation)).
    type: dict
    default: {}
  driver_version:
    description: The driver version the node must run; empty for any (C(validation)).
    type: str
    default: ""
  validate:
    description: Whether validation is on (C(validation)); V(false) and check mode return a skipped verdict.
    type: bool
    default: true
  reboot:
    description: The Ready wait's result after the reboot (C(validation)); recorded when it has a C(boot_id).
    type: dict
    default: {}
  reboot_reasons:
    description: Why the node was rebooted (C(validation)).
    type: list
    elements: str
    default: []
  reason:
    description: Why the maintenance failed (C(failure)).
    type: str
  task:
    description: The task that failed (C(failure)).
    type: str
  cordon:
    description:
      - The cordon patch's registered result in this play, V({}) when it did not run (C(failure)).
      - A maintenance record made in this run whose cordon did not go through started nothing on the Node.
    type: dict
    default: {}
  uncordon_failed:
    description: The closing patch failed, so the node is still in maintenance (C(failure)).
    type: bool
    default: false
  run:
    description:
      - With C(failure), the run id of the runner (M(kubegpu.fleet.rollout_slot)'s C(run)); the failure
        record on the Node names it, so the runner's other nodes start no more.
    type: str
  close:
    description:
      - With C(validation), when the node validated (or validation is off or in check mode), also
        decide the uncordon (as C(uncordon) does) and close the record; the result is in
        RV(decision.uncordon) and the fact C(kubegpu_rolling_reboot_uncordon).
    type: bool
    default: false
  fail:
    description: Fail the task when the decision is negative (C(start) without a Node, C(drain), C(validation)); C(failure) always fails.
    type: bool
    default: true
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - kubegpu.fleet.controller_action
  - kubegpu.fleet.rollout_decision
  - kubegpu.fleet.rollout_decision.node_record
"""

EXAMPLES = r"""
- name: Decide whether the node validated
  kubegpu.fleet.rollout_decide:
    decision: validation
    name: "{{ kubegpu_node_name }}"
    checks: "{{ node_checks }}"
    api: "{{ api_wait }}"
    maintenance: "{{ kubegpu_maintenance }}"
    timeout: 600
"""

RETURN = r"""
decision:
  description: The decision; its keys depend on O(decision) (see the module of that decision).
  returned: success
  type: dict
  sample: {ok: false, reasons: ["device plugin pod (none) not Ready (phase None)"], msg: "gpu-1 did not validate ..."}
  contains:
    msg:
      description: The decision in one line.
      type: str
      returned: always
    ok:
      description: Whether the node drained or validated (C(drain), C(validation)).
      type: bool
      returned: when O(decision) is C(drain) or C(validation)
    reasons:
      description: Every reason the node did not validate (C(validation)).
      type: list
      elements: str
      returned: when O(decision=validation)
    skip:
      description: The skip label keeps the role away from the node (C(start)).
      type: bool
      returned: when O(decision=start)
    already:
      description: A maintenance already runs and the node is drained (C(start)).
      type: bool
      returned: when O(decision=start)
    cordon:
      description: The budget wait, the cordon and the drain are to run (C(start)).
      type: bool
      returned: when O(decision=start)
    uncordon:
      description:
        - The uncordon decision (C(uncordon), or C(validation) with O(close)).
        - For C(uncordon) its C(uncordon) key says whether the node is made schedulable.
      type: raw
      returned: when O(decision) is C(uncordon), or C(validation) with O(close)
    active:
      description: Whether the role had started a maintenance on the Node (C(failure)).
      type: bool
      returned: when O(decision=failure)
msg:
  description: The decision in one line (RV(decision.msg)).
  returned: always
  type: str
"""
