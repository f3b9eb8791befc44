#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# This module is implemented as an action plugin: it runs read-only modules on the node until
# they pass or the deadline passes.
from __future__ import annotations

DOCUMENTATION = r"""
module: rollout_node_check
short_description: Wait until a GPU node's driver, NVML and device checkpoint are right again
version_added: 0.1.0
description:
  - After a maintenance, runs M(kubegpu.fleet.gpu_facts), M(kubegpu.fleet.driver_guard) (audit)
    and M(kubegpu.fleet.checkpoint_sync) (checked, against the GPUs NVML reports) on the node,
    again every O(poll) seconds, until NVML answers with O(driver_version), the loaded kernel module
    is the installed driver and the kubelet device checkpoint names only GPUs the node has, or
    until O(timeout). One task where three retried tasks were.
  - Never fails for a node that does not pass; RV(ok) and RV(msg) say why, and
    M(kubegpu.fleet.rollout_validation_verdict) turns them into the verdict.
  - Sets the fact C(nvidia) (M(kubegpu.fleet.gpu_facts)'s) from the last round.
options:
  driver_version:
    description: The driver version NVML must report; empty for any.
    type: str
    default: ""
  timeout:
    description: Seconds to wait for the checks to pass.
    type: float
    default: 600
  poll:
    description: Seconds between rounds.
    type: float
    default: 5
  probe_timeout:
    description: As O(kubegpu.fleet.gpu_facts#module:timeout).
    type: float
    default: 10
  backend:
    description: As O(kubegpu.fleet.gpu_facts#module:backend).
    type: str
    choices: [auto, nvml, nvidia_smi]
    default: auto
  proc_path:
    description: As O(kubegpu.fleet.gpu_facts#module:proc_path).
    type: str
    default: /proc
  dev_path:
    description: As O(kubegpu.fleet.gpu_facts#module:dev_path).
    type: str
    default: /dev
  driver_root:
    description: As O(kubegpu.fleet.gpu_facts#module:driver_root).
    type: str
    default: /
  checkpoint_path:
    description: As O(kubegpu.fleet.checkpoint_sync#module:path).
    type: str
    default: /var/lib/kubelet/device-plugins/kubelet_internal_checkpoint
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: posix
    details: Runs read-only node modules over the host's connection.
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
author:
  - kubegpu.fleet maintainers (@kubegpu)
"""

EXAMPLES = r"""
- name: Wait until NVML, the driver and the checkpoint are right on the node
  kubegpu.fleet.rollout_node_check:
    driver_version: 570.172.08
    timeout: 600
  register: checks
"""

RETURN = r"""
ok:
  description: Whether every check passed.
  returned: success
  type: bool
msg:
  description: Why not, or what passed.
  returned: success
  type: str
attempts:
  description: Rounds of checks.
  returned: success
  type: int
waited:
  description: Seconds spent.
  returned: success
  type: float
time_left:
  description: Whole seconds left of O(timeout) (for the next wait of the validation).
  returned: success
  type: int
nvidia:
  description: M(kubegpu.fleet.gpu_facts)'s C(nvidia) facts of the last round.
  returned: success
  type: dict
probe_ok:
  description: Whether the NVML probe answered.
  returned: success
  type: bool
reboot_pending:
  description: M(kubegpu.fleet.driver_guard)'s C(reboot_pending); null when unknown.
  returned: success
  type: bool
checkpoint_stale:
  description: M(kubegpu.fleet.checkpoint_sync)'s C(stale); null when not checked.
  returned: success
  type: bool
checkpoint_stale_ids:
  description: Device ids in the checkpoint the node does not have.
  returned: success
  type: list
  elements: str
"""
