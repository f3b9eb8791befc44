#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: checkpoint_sync
short_description: Detect and remove a stale kubelet device-manager checkpoint
version_added: 0.1.0
description:
  - Reads the kubelet device-manager checkpoint (C(kubelet_internal_checkpoint)) and compares
    the device ids it records for GPU resources with the GPU and MIG UUIDs the node has now.
    Ids the node no longer has (a replaced GPU, a changed MIG layout, UUIDs that changed
    across a reboot) make the checkpoint stale; kubelet then keeps handing out devices that
    do not exist.
  - Understands the pre-1.20 format (C(v1), C(DeviceIDs) is a list) and the per-NUMA-node
    format of kubelet 1.20 and later (C(v2)), C(PodDeviceEntries) of C(null), an extra
    C(BootID) key, time-slicing/MPS replica ids C(<uuid>::<n>) (compared on C(<uuid>)),
    C(MIG-<uuid>) and the legacy C(MIG-GPU-<uuid>/<gi>/<ci>) MIG ids.
  - Legacy C(MIG-GPU-<uuid>/<gi>/<ci>) ids are what drivers before R470 reported for MIG
    devices; later drivers report C(MIG-<uuid>) and the two cannot be converted into each
    other. A legacy id therefore counts as present only when O(device_ids) contains exactly
    that id, and as stale otherwise.
  - Ids that are not GPU or MIG UUIDs and are not in O(device_ids) (for example C(0), C(1)
    from the device plugin's C(--device-id-strategy=index)) cannot be compared with a UUID
    list. They are never counted as stale; the module warns about them.
  - The file is never edited (its checksum is computed by kubelet over a Go-specific dump and
    cannot be recomputed here). With O(state=synced) a stale checkpoint is copied to a
    timestamped backup beside it (mode 0600, byte for byte), removed, and kubelet is
    restarted so that it drops its in-memory device state and starts from an empty
    checkpoint. The file is removed only if it still holds exactly the bytes that were
    analysed.
  - A missing checkpoint is not an error; there is nothing to do.
  - Removing the checkpoint makes kubelet forget which devices running pods hold. Drain GPU
    pods from the node first; the module warns when the checkpoint records allocations.
  - For a check before kubelet starts at boot, see the P(kubegpu.fleet.checkpoint_guard#role)
    role, which installs the same logic as a systemd oneshot.
author:
  - kubegpu.fleet maintainers (@kubegpu)
options:
  path:
    description:
      - Path of the checkpoint, C(<kubelet root-dir>/device-plugins/kubelet_internal_checkpoint).
    type: path
    default: /var/lib/kubelet/device-plugins/kubelet_internal_checkpoint
  device_ids:
    description:
      - The GPU and MIG UUIDs the node has now (C(GPU-...), C(MIG-...)), typically
        C(ansible_facts.nvidia.device_ids) from M(kubegpu.fleet.gpu_facts).
      - It must be a trustworthy list. An empty list makes every id in the checkpoint stale,
        so O(state=synced) refuses to act on it unless O(force=true).
    type: list
    elements: str
    required: true
  resource_names:
    description:
      - Glob patterns (shell style, case sensitive) of the extended resources to compare.
        Resources that match none, such as C(amd.com/gpu), are ignored.
    type: list
    elements: str
    default: ["nvidia.com/*"]
  state:
    description:
      - V(checked) only reads and reports.
      - V(synced) backs up and removes a stale checkpoint and restarts kubelet. A checkpoint
        that is not stale is left alone.
    type: str
    choices: [checked, synced]
    default: checked
  restart_kubelet:
    description:
      - Restart O(kubelet_service) with C(systemctl) after removing the checkpoint.
      - Without a restart a running kubelet keeps the stale device state in memory and writes
        it back to a new checkpoint; disable only when kubelet is stopped.
    type: bool
    default: true
  kubelet_service:
    description:
      - systemd unit name of kubelet (letters, digits, C(:_.-@\\)); globs such as C(*) and
        options are refused, so the restart can never reach other units.
    type: str
    default: kubelet
  restart_timeout:
    description:
      - Seconds C(systemctl restart) may take; past that it is killed and the task fails.
    type: float
    default: 300
  backup:
    description:
      - Copy the checkpoint to C(<path>.<timestamp>.<ns>.bak) (mode 0600) before removing it.
    type: bool
    default: true
  force:
    description:
      - With O(state=synced), back up and remove a checkpoint that cannot be parsed (invalid
        JSON, unexpected types) instead of failing, and act even when O(device_ids) is empty.
      - Has no effect with O(state=checked), which always fails on an unparsable checkpoint.
    type: bool
    default: false
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - kubegpu.fleet.action_group.node
attributes:
  check_mode:
    support: full
    details: Reports whether the checkpoint would be removed and kubelet restarted; changes nothing.
  diff_mode:
    support: full
    details: The diff shows a summary of the checkpoint going away (after is absent).
  platform:
    platforms: posix
    support: full
    details: Restarting kubelet needs systemd (C(systemctl)).
notes:
  - Malformed JSON or unexpected types fail the task with a message naming the file and the
    problem; the file is left untouched unless O(force=true) and O(state=synced).
  - The checkpoint is read without blocking and with a size bound (a FIFO, socket, directory
    or symlink loop in its place is refused). It is removed only when it and every directory on
    its path are owned by root and not writable by group or others (a root-owned sticky directory
    such as C(/tmp) is accepted on the path, not as the file's directory) and no symlink on the
    path belongs to another user; otherwise the task fails before any backup (in check mode
    too), changes nothing and says which part is wrong and why.
  - A checkpoint that is itself a symlink is not removed through it (removing its target would
    leave a dangling link); the task fails saying so and the link and its target are left alone.
seealso:
  - module: kubegpu.fleet.gpu_facts
"""

EXAMPLES = r"""
- name: Gather GPU facts (device_ids)
  kubegpu.fleet.gpu_facts:

- name: Report a stale device checkpoint
  kubegpu.fleet.checkpoint_sync:
    device_ids: "{{ ansible_facts.nvidia.device_ids }}"
  register: ckpt

- name: Remove it (after draining GPU pods) and restart kubelet
  kubegpu.fleet.checkpoint_sync:
    device_ids: "{{ ansible_facts.nvidia.device_ids }}"
    state: synced
  when: ckpt.stale

- name: kubelet with a moved root-dir, and a private resource name as well
  kubegpu.fleet.checkpoint_sync:
    path: /data/kubelet/device-plugins/kubelet_internal_checkpoint
    device_ids: "{{ ansible_facts.nvidia.device_ids }}"
    resource_names: ["nvidia.com/*", "example.com/vgpu"]
    state: synced

- name: Get rid of a corrupt checkpoint (kubelet is stopped for maintenance)
  kubegpu.fleet.checkpoint_sync:
    device_ids: "{{ ansible_facts.nvidia.device_ids }}"
    state: synced
    force: true
    restart_kubelet: false
"""

RETURN = r"""
exists:
  description: Whether the checkpoint file existed.
  returned: always
  type: bool
  sample: true
format:
  description:
    - C(v1) (kubelet before 1.20, list DeviceIDs), C(v2) (per-NUMA-node map), C(unknown)
      when the file records no pod entries and no C(BootID) to tell them apart.
    - null when the file does not exist or cannot be parsed.
  returned: always
  type: str
  sample: v2
registered:
  description: Devices registered per matching resource, as recorded in the checkpoint.
  returned: always
  type: dict
  sample: {"nvidia.com/gpu": ["GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77"]}
allocated:
  description: Device allocations of pod containers for matching resources.
  returned: always
  type: list
  elements: dict
  contains:
    pod_uid:
      description: UID of the pod.
      type: str
    container:
      description: Container name.
      type: str
    resource:
      description: Extended resource name.
      type: str
    device_ids:
      description: Allocated device ids (all NUMA nodes, in order).
      type: list
      elements: str
  sample:
    - pod_uid: 6f1c1c9e-3f5e-4c55-9a43-6c1f8a0e8f10
      container: cuda
      resource: nvidia.com/gpu
      device_ids: ["GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77"]
stale_ids:
  description: Ids in the checkpoint, for matching resources, that the node does not have.
  returned: always
  type: list
  elements: str
  sample: ["GPU-0a3c2b21-6d0f-4d4b-b2b5-0f8e0f6c1d11"]
stale:
  description: Whether RV(stale_ids) is not empty.
  returned: always
  type: bool
  sample: true
backup_file:
  description: Path of the backup made before removal; null when none was made.
  returned: always
  type: str
  sample: /var/lib/kubelet/device-plugins/kubelet_internal_checkpoint.20250101T000000.000000001.bak
kubelet_restarted:
  description: Whether kubelet was restarted (in check mode, whether it would be).
  returned: always
  type: bool
  sample: true
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kubegpu.fleet.plugins.module_utils.audit import probe_options
from ansible_collections.kubegpu.fleet.plugins.module_utils.checkpoint.sync_run import checkpoint_sync_run
from ansible_collections.kubegpu.fleet.plugins.module_utils._common.node_probes import run_probe_module


def main():
    module = AnsibleModule(
        # the audit's probe registry uses the same options (module_utils/audit/probes.py)
        argument_spec=probe_options.spec(probe_options.CHECKPOINT_SYNC),
        supports_check_mode=True,
    )
    run_probe_module(module, checkpoint_sync_run, module.params, module.warn, module.get_bin_path,
                     check_mode=module.check_mode, diff=module._diff)


if __name__ == "__main__":
    main()
