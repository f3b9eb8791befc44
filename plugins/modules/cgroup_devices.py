#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: cgroup_devices
short_description: Find GPU containers whose device cgroup no longer lets them open the NVIDIA devices
version_added: "0.1.0"
description:
  - Discovers every kubelet container cgroup on the node (cgroupfs and systemd cgroup drivers,
    guaranteed, burstable and besteffort pods, containerd, CRI-O and Docker runtimes) under
    O(cgroup_root), on cgroup v1 and cgroup v2.
  - For each container it decides which NVIDIA devices the device cgroup lets it open for
    read and write. Required are C(/dev/nvidiactl) and C(/dev/nvidia-uvm); a missing
    C(/dev/nvidia-uvm-tools) is a warning. It also reports which GPU minors and MIG
    capabilities each GPU container may open.
  - A container is a GPU container when its cgroup lets it open any GPU or C(nvidiactl), or
    when its processes show it was given GPUs (C(NVIDIA_VISIBLE_DEVICES) naming devices, or
    NVIDIA device nodes in its C(/dev)); the latter catches the CPU manager / daemon-reload
    case where every NVIDIA entry vanished from the device cgroup.
  - Device numbers come from C(<proc_path>/devices) (the C(nvidia-uvm) major is dynamic; the
    GPU major is named C(nvidia) or, before driver 550.40, C(nvidia-frontend)),
    C(<proc_path>/driver/nvidia-caps/mig-minors) and the nodes under O(dev_path). Nothing is
    hardcoded.
  - Read only. Repairs (restarting the device plugin, recreating pods) belong to the
    device_plugin role.
options:
  cgroup_root:
    description:
      - The cgroup mount point (v1, hybrid or v2), the cgroup v1 C(devices) hierarchy itself,
        or any cgroup directory (or a plain copy of one) that holds the kubepods cgroup.
      - With a C(devices/) hierarchy below it (v1 and hybrid nodes) the pods are looked for
        there; with C(cgroup.controllers) and no C(devices/) it is cgroup v2.
    type: path
    default: /sys/fs/cgroup
  proc_path:
    description:
      - Where the node's procfs is mounted (C(/host/proc) from a container).
      - Provides C(devices), C(driver/nvidia-caps/mig-minors), C(driver/nvidia/gpus/*/information)
        and, for O(process_evidence), the container processes.
    type: path
    default: /proc
  dev_path:
    description: Directory holding the node's NVIDIA device nodes.
    type: path
    default: /dev
  mode:
    description:
      - V(list) reads each container's cgroup v1 C(devices.list) and applies the kernel's
        matching rules. It cannot see deny exceptions of a default-allow cgroup
        (C(a *:* rwm)).
      - V(probe) forks a short-lived process, moves it into the container's cgroup and lets
        the kernel answer for every device node (cgroup v1 and v2). Needs root. The process
        is always reaped.
      - V(auto) uses V(list) on cgroup v1 and V(probe) on cgroup v2.
    type: str
    choices: [auto, list, probe]
    default: auto
  kubepods_path:
    description:
      - The kubepods cgroup directory, absolute or relative to the devices (v1) or unified (v2)
        hierarchy. By default C(kubepods), C(kubepods.slice) or C(<prefix>-kubepods.slice) is
        searched one and two levels down.
    type: str
  probe_method:
    description:
      - How the probe process asks the kernel.
      - V(access) calls C(access(2)); the kernel runs the same device-cgroup check as for
        C(open) without calling into the NVIDIA driver, so a hung driver cannot block the audit
        and no GPU gets initialised.
      - V(open) opens each node with C(O_NONBLOCK) exactly like CUDA does; C(EPERM) means
        denied, C(ENXIO)/C(ENODEV) and other driver errors mean allowed.
    type: str
    choices: [access, open]
    default: access
  probe_timeout:
    description: Seconds one container's probe may take before its process is killed.
    type: float
    default: 10
  process_evidence:
    description:
      - Read the container processes' C(NVIDIA_VISIBLE_DEVICES) and C(/dev) (through
        C(<proc_path>/<pid>)) to recognise GPU containers whose cgroup lost every NVIDIA entry.
    type: bool
    default: true
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - kubegpu.fleet.action_group.node
attributes:
  check_mode:
    support: full
    details: The module never changes anything; check mode runs the same audit.
  diff_mode:
    support: none
    details: Nothing changes, so there is no diff.
  platform:
    platforms: posix
    details: Linux nodes with cgroup v1 (devices controller) or cgroup v2.
notes:
  - O(mode=probe) writes the pid of its own short-lived child into each container's
    C(cgroup.procs). The child only checks device access and exits; it is killed after
    O(probe_timeout). Frozen (paused) cgroup v2 containers are not probed.
  - On cgroup v1 a default-allow cgroup lists only C(a *:* rwm) even when deny rules were
    added below it; use O(mode=probe) to see those.
seealso:
  - name: kubelet CPU manager wipes NVIDIA device-cgroup entries
    description: kubernetes/kubernetes#77073 and NVIDIA/nvidia-docker#966.
    link: https://github.com/kubernetes/kubernetes/issues/77073
author:
  - kubegpu.fleet maintainers (@kubegpu)
"""

EXAMPLES = r"""
- name: Audit the device cgroups of all GPU containers
  kubegpu.fleet.cgroup_devices:
  become: true
  register: cgdev

- name: Fail when a GPU container cannot open nvidiactl or nvidia-uvm
  ansible.builtin.assert:
    that: cgdev.broken | length == 0
    fail_msg: "{{ cgdev.broken | map(attribute='path') | list }}"

- name: Audit from a privileged container that mounts the host at /host
  kubegpu.fleet.cgroup_devices:
    cgroup_root: /host/sys/fs/cgroup
    proc_path: /host/proc
    dev_path: /host/dev
    mode: probe

- name: Exact open(2) probe on a cgroup v1 node with a nested kubelet (kind)
  kubegpu.fleet.cgroup_devices:
    mode: probe
    probe_method: open
    kubepods_path: kubelet.slice/kubelet-kubepods.slice
"""

RETURN = r"""
cgroup_version:
  description: C(v1) (devices controller) or C(v2) (unified, BPF device programs).
  returned: success
  type: str
  sample: v1
mode:
  description: The mode actually used (V(auto) resolved).
  returned: success
  type: str
  sample: list
hierarchy:
  description: The cgroup hierarchy directory the container paths are relative to.
  returned: success
  type: str
  sample: /sys/fs/cgroup/devices
kubepods:
  description: The kubepods directories that were scanned.
  returned: success
  type: list
  elements: str
  sample: [/sys/fs/cgroup/devices/kubepods.slice]
devices:
  description:
    - The NVIDIA device table used for the checks. C(role) is C(required), C(recommended),
      C(gpu) or C(mig); C(node) is C(present), C(missing), C(not_char_device) or
      C(wrong_major) for the node under O(dev_path); C(needs) is the access checked (C(rw),
      C(r) for MIG capability nodes, which CUDA opens read-only).
  returned: success
  type: list
  elements: dict
  sample:
    - {name: nvidiactl, role: required, type: c, major: 195, minor: 255,
       path: /dev/nvidiactl, node: present, needs: rw}
    - {name: nvidia-uvm, role: required, type: c, major: 508, minor: 0,
       path: /dev/nvidia-uvm, node: present, needs: rw}
containers:
  description: One entry per container cgroup.
  returned: success
  type: list
  elements: dict
  contains:
    path:
      description: Cgroup path relative to RV(hierarchy).
      type: str
      sample: /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1b2c_3d.slice/cri-containerd-4f5e.scope
    cgroup_dir:
      description: Absolute cgroup directory.
      type: str
    pod_uid:
      description: Pod UID with dashes.
      type: str
      sample: 1b2c3d4e-0000-4000-8000-00000000abcd
    container_id:
      description: Container ID from the cgroup name.
      type: str
    runtime:
      description: C(cri-containerd), C(docker), C(crio), C(libpod), or null when the cgroupfs name carries none.
      type: str
    qos:
      description: C(guaranteed), C(burstable) or C(besteffort).
      type: str
    gpu:
      description: Whether this is a GPU container.
      type: bool
    gpu_evidence:
      description:
        - Why it counts as a GPU container - C(cgroup) (may open a GPU or nvidiactl),
          C(env) (NVIDIA_VISIBLE_DEVICES names devices), C(dev_nodes) (NVIDIA nodes in its /dev).
      type: list
      elements: str
    sandbox:
      description: All its processes are the pod sandbox (pause).
      type: bool
    processes:
      description: Number of processes looked at (at most 16).
      type: int
    allow_all:
      description: V(list) mode only - devices.list is C(a *:* rwm) (privileged or unrestricted).
      type: bool
    access:
      description: Device name to C(allowed), C(denied) or C(unknown).
      type: dict
    gpu_minors:
      description: GPU minors the container may open.
      type: list
      elements: int
    mig_caps:
      description: MIG capability nodes (GPU instance or compute instance) it may open.
      type: list
      elements: dict
    missing:
      description: Required or recommended devices a GPU container may not open.
      type: list
      elements: dict
      sample: [{name: nvidia-uvm, major: 508, minor: 0, path: /dev/nvidia-uvm, required: true}]
    unchecked:
      description: Required or recommended devices that could not be checked.
      type: list
      elements: str
    broken:
      description: GPU container missing a required device.
      type: bool
    diagnosis:
      description: Likely cause and fix when broken.
      type: str
    warnings:
      description: Problems short of broken (nvidia-uvm-tools, partial MIG access, unchecked devices).
      type: list
      elements: str
    error:
      description: Why this container could not be evaluated, else null.
      type: str
broken:
  description: The broken GPU containers, with the names of the required devices they miss.
  returned: success
  type: list
  elements: dict
  sample:
    - path: /kubepods/burstable/pod1b2c3d4e-0000-4000-8000-00000000abcd/4f5e
      pod_uid: 1b2c3d4e-0000-4000-8000-00000000abcd
      container_id: 4f5e
      missing: [nvidia-uvm]
      diagnosis: the container may open the GPU but not /dev/nvidia-uvm ...
summary:
  description: Counts of pods, containers, gpu_containers, broken, with_warnings, errors.
  returned: success
  type: dict
  sample: {pods: 3, containers: 7, gpu_containers: 4, broken: 1, with_warnings: 2, errors: 0}
host_warnings:
  description: Node-level problems (driver or nvidia_uvm not loaded, device nodes missing).
  returned: success
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.kubegpu.fleet.plugins.module_utils.audit import probe_options
from ansible_collections.kubegpu.fleet.plugins.module_utils.cgroup.devices_run import cgroup_devices_run
from ansible_collections.kubegpu.fleet.plugins.module_utils._common.node_probes import run_probe_module


def main():
    module = AnsibleModule(
        # the audit's probe registry uses the same options (module_utils/audit/probes.py)
        argument_spec=probe_options.spec(probe_options.CGROUP_DEVICES),
        supports_check_mode=True,
    )
    run_probe_module(module, cgroup_devices_run, module.params, module.warn)


if __name__ == "__main__":
    main()
