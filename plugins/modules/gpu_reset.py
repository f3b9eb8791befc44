#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: gpu_reset
short_description: Reset GPUs of a drained node (nvidia-smi -r) instead of rebooting it
version_added: 0.1.0
description:
  - Resets the GPUs named in O(bus_ids) with C(nvidia-smi -r) so that a pending row remap, page
    retirement or repair takes effect and the state NVIDIA's Xid catalog resets a GPU for is
    cleared, without rebooting the node and taking its other GPUs down.
  - Checks the preconditions nvidia-smi(1) states for C(-r) first and refuses with the reason
    (RV(refused), RV(fallback=reboot)) rather than resetting - no compute process and no process
    holding the GPU's device node open (a persistence daemon is stopped for the reset and started
    again, see O(stop_persistenced)); on GPUs before Ampere, and on NVSwitch systems without Fabric
    Manager running, every GPU with an active NVLink is reset in the same command (RV(group)), and
    then no GPU of the node may run a compute process. Also refused, by this module's own rule, is a
    GPU with MIG instances or a pending MIG mode change (a reset applies a pending mode; the MIG
    manager, which creates the instances, should make that change).
  - On a GPU Operator node its DaemonSet pods (device plugin, DCGM, ...) hold the GPUs open after a
    drain; pause them first with M(kubegpu.fleet.gpu_operands) (the rolling_reboot role does).
  - After the reset the GPUs are read again and validated - listed, same UUID, nothing pending,
    the driver's recovery verdict None (RV(validation)). A failed or unvalidated reset says so in
    RV(reset_error) with RV(fallback=reboot); the module itself does not fail for it, the rollout reboots.
  - Each reset is recorded in O(state_path) (this boot's id, seconds since boot), written through
    the collection's write primitive; M(kubegpu.fleet.gpu_facts) then counts the Xid events the
    GPU logged before the reset as cleared.
  - Run it on a drained node (the kubegpu.fleet.rolling_reboot role does, task file
    C(gpu_reset.yml)). See docs/hardware-health.md in the collection.
author:
  - kubegpu.fleet maintainers (@kubegpu)
options:
  bus_ids:
    description:
      - PCI bus ids of the GPUs to reset, in any form the stack prints (V(0000:18:00.0),
        V(00000000:18:00.0), V(PCI:0000:18:00)).
    type: list
    elements: str
    required: true
  driver_root:
    description: Root of the NVIDIA driver userspace; C(nvidia-smi) and C(libnvidia-ml.so.1) are looked for under it.
    type: path
    default: /
  proc_path:
    description: Where the host's procfs is mounted (device holders, boot id, Fabric Manager).
    type: path
    default: /proc
  dev_path:
    description: Where the host's C(/dev) is mounted; processes holding C(<dev_path>/nvidia<minor>) open block the reset.
    type: path
    default: /dev
  sys_path:
    description: Where the host's sysfs is mounted (NVSwitches on the PCI bus).
    type: path
    default: /sys
  state_path:
    description: The record of this boot's GPU resets M(kubegpu.fleet.gpu_facts) reads.
    type: path
    default: /var/lib/kubegpu/gpu-reset.json
  stop_persistenced:
    description:
      - Stop C(nvidia-persistenced) (systemctl) for the reset when it is the only process holding
        the GPUs open, and start it again afterwards. V(false) refuses the reset instead.
    type: bool
    default: true
  timeout:
    description: Seconds each nvidia-smi run may take (1 to 3600); a reset of several GPUs can take minutes.
    type: float
    default: 300
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Checks the preconditions and reports the GPUs it would reset (RV(reset)); resets nothing.
  diff_mode:
    support: none
  platform:
    platforms: posix
notes:
  - Needs root on the node (C(nvidia-smi -r) does).
  - A reset GPU loses its CUDA contexts; drain the node first.
"""

EXAMPLES = r"""
- name: Reset the GPU with a pending row remap on the drained node
  kubegpu.fleet.gpu_reset:
    bus_ids: ["0000:18:00.0"]
  register: reset

- name: Reboot when the reset was refused or did not validate
  ansible.builtin.reboot:
  when: reset.fallback == 'reboot'

- name: What a reset would do, without resetting
  kubegpu.fleet.gpu_reset:
    bus_ids: ["0000:18:00.0", "0000:2a:00.0"]
  check_mode: true
"""

RETURN = r"""
bus_ids:
  description: The GPUs asked for, normalised.
  returned: always
  type: list
  elements: str
reset:
  description: The GPUs reset (or, in check mode, that would be), the NVLink group included.
  returned: always
  type: list
  elements: str
refused:
  description: Why nothing was reset (a precondition, no nvidia-smi, the GPUs unreadable); null otherwise.
  returned: always
  type: str
reset_error:
  description: Why the reset failed or did not validate; null when it validated (the task itself does not fail for it).
  returned: always
  type: str
fallback:
  description: V(reboot) when the node must be rebooted instead (refused or failed); null after a validated reset.
  returned: always
  type: str
group:
  description: Why more GPUs than asked are reset together (NVLink), or null.
  returned: always
  type: str
validation:
  description: Problems of the reset GPUs read again after the reset (empty when validated).
  returned: always
  type: list
  elements: str
persistenced_stopped:
  description: nvidia-persistenced was stopped for the reset (and started again).
  returned: always
  type: bool
state_path:
  description: The reset record written.
  returned: always
  type: str
elapsed:
  description: Seconds the reset took, validation included.
  returned: always
  type: float
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu.reset import STATE_PATH, ResetError, gpu_reset_run


def main():
    module = AnsibleModule(
        argument_spec=dict(
            bus_ids=dict(type="list", elements="str", required=True),
            driver_root=dict(type="path", default="/"),
            proc_path=dict(type="path", default="/proc"),
            dev_path=dict(type="path", default="/dev"),
            sys_path=dict(type="path", default="/sys"),
            state_path=dict(type="path", default=STATE_PATH),
            stop_persistenced=dict(type="bool", default=True),
            timeout=dict(type="float", default=300.0),
        ),
        supports_check_mode=True,
    )
    try:
        result = gpu_reset_run(module.params, check_mode=module.check_mode)
    except ResetError as e:
        module.fail_json(msg=str(e))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
