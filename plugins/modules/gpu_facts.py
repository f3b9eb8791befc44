#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_facts
short_description: Gather NVIDIA GPU, MIG, driver and device-node facts without ever hanging
version_added: 0.1.0
description:
  - Gathers NVIDIA facts on a node into C(ansible_facts.nvidia) - driver, kernel module and CUDA
    versions, GPUs and their MIG devices, the flat list of device IDs that Kubernetes uses, the
    NVIDIA device nodes checked against the majors in C(/proc/devices), and the NVIDIA kernel
    modules.
  - The NVML (or C(nvidia-smi)) probe runs in a child process in its own session. If it does not
    answer within O(timeout) seconds the child and everything it started is killed and the
    module returns C(probe.status=hung) within O(timeout) + 2 seconds. A probe stuck in
    uninterruptible sleep (it ignores SIGKILL) is never waited for; its PID is reported in
    C(probe.stuck_pids).
  - NVML errors come back by name, for example C(NVML_ERROR_LIB_RM_VERSION_MISMATCH) after a
    driver upgrade without reboot, or C(NVML_ERROR_GPU_IS_LOST) for a GPU that fell off the bus.
  - A node without the NVIDIA library or driver gives C(probe.status=absent) and a task that
    succeeds; C(present) is then false unless the kernel module is loaded.
  - When the probe cannot answer (hung, version mismatch) the GPU list comes from the kernel
    module's procfs files (C(driver/nvidia/gpus/*/information) and the MIG capability
    directories) and the driver version from the library's versioned file name.
author:
  - kubegpu.fleet maintainers (@kubegpu)
options:
  timeout:
    description:
      - Seconds to wait for the probe before it is declared hung and killed.
      - A finite number greater than 0 and at most 86400; anything else (V(nan), V(1e300), V(-1)) fails the task.
    type: float
    default: 10
  backend:
    description:
      - How to ask the driver.
      - V(auto) uses V(nvml) when the Python package C(nvidia-ml-py) (module C(pynvml)) is
        importable by the module's interpreter, otherwise V(nvidia_smi).
      - V(nvml) loads C(libnvidia-ml.so.1) through pynvml; it fails when pynvml is not installed.
      - V(nvidia_smi) runs C(nvidia-smi -q -x), and C(nvidia-smi -L) for MIG device UUIDs and
        profiles.
    type: str
    choices: [auto, nvml, nvidia_smi]
    default: auto
  proc_path:
    description:
      - Where the host's procfs is mounted (C(/host/proc) when auditing from a container that
        mounts the host at C(/host)), after node_exporter's C(--path.procfs).
      - Read for C(devices), C(modules), C(driver/nvidia/version), C(driver/nvidia/gpus) and
        C(driver/nvidia-caps/mig-minors).
    type: path
    default: /proc
  dev_path:
    description:
      - Where the host's C(/dev) is mounted; the NVIDIA device nodes are checked there.
    type: path
    default: /dev
  driver_root:
    description:
      - Root of the NVIDIA driver userspace. C(libnvidia-ml.so.1) and C(nvidia-smi) are looked
        for in the usual library and binary directories under it.
      - The NVIDIA GPU Operator installs the driver under C(/run/nvidia/driver).
      - On V(/), C(LD_LIBRARY_PATH) and C(PATH) are searched first, and the dynamic loader's
        own search is the last resort for the library.
      - A driver root that does not exist gives C(probe.status=absent).
    type: path
    default: /
  reset_state_path:
    description:
      - The record M(kubegpu.fleet.gpu_reset) keeps of the GPU resets of this boot. Xid events a
        GPU logged before its reset call for nothing (the reset cleared them); they are counted
        in C(before_reset). A record of another boot is ignored.
    type: path
    default: /var/lib/kubegpu/gpu-reset.json
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - kubegpu.fleet.gpu_hardware_scan
  - kubegpu.fleet.action_group.node
attributes:
  check_mode:
    support: full
    details: Read only; gathers the same facts in check mode.
  diff_mode:
    support: none
    details: Changes nothing, so there is nothing to diff.
  platform:
    support: full
    platforms: posix
    details: Linux nodes (procfs, /dev, cgroup v1 or v2); the node needs Python 3.8 or later.
notes:
  - The module is part of the C(kubegpu.fleet.node) action group, so O(proc_path), O(dev_path)
    and O(driver_root) can be set once with C(module_defaults).
  - C(mig_mixed) is the condition that triggers the R570 NVML hang (drivers 570.124.06 to
    570.158.01) - some GPUs in MIG mode and some not.
seealso:
  - name: NVML API reference
    description: The NVIDIA Management Library calls the nvml backend makes.
    link: https://docs.nvidia.com/deploy/nvml-api/
  - name: nvidia-smi documentation
    description: The tool behind the nvidia_smi backend and its exit codes.
    link: https://docs.nvidia.com/deploy/nvidia-smi/
"""

EXAMPLES = r"""
- name: Gather NVIDIA facts
  kubegpu.fleet.gpu_facts:

- name: Stop early on nodes whose driver no longer answers
  ansible.builtin.assert:
    that: ansible_facts.nvidia.probe.status != 'hung'
    fail_msg: "NVML hung on {{ inventory_hostname }}: {{ ansible_facts.nvidia.probe.error }}"

- name: Gather facts for a GPU Operator node from a container that mounts the host at /host
  kubegpu.fleet.gpu_facts:
    proc_path: /host/proc
    dev_path: /host/dev
    driver_root: /host/run/nvidia/driver
    timeout: 5

- name: Use nvidia-smi where nvidia-ml-py is not installed
  kubegpu.fleet.gpu_facts:
    backend: nvidia_smi

- name: Find nodes that upgraded the driver but were not rebooted
  ansible.builtin.debug:
    msg: "reboot needed: userspace {{ ansible_facts.nvidia.driver_version }}, kernel {{ ansible_facts.nvidia.kernel_module_version }}"
  when: ansible_facts.nvidia.probe.error_code == 'NVML_ERROR_LIB_RM_VERSION_MISMATCH'

- name: List device nodes that do not match the driver's majors
  ansible.builtin.debug:
    msg: "{{ ansible_facts.nvidia.device_nodes | rejectattr('ok') | map(attribute='path') | list }}"
"""

RETURN = r"""
ansible_facts:
  description: Facts added under C(nvidia).
  returned: always
  type: dict
  contains:
    nvidia:
      description: NVIDIA facts of the node.
      returned: always
      type: dict
      contains:
        present:
          description: True when an NVIDIA driver is there (the probe found it, or the kernel module is loaded).
          type: bool
          sample: true
        probe:
          description: How the probe went.
          type: dict
          contains:
            status:
              description:
                - V(ok), V(hung) (no answer within O(timeout); the child was killed),
                  V(error) (NVML answered with an error, possibly for one GPU only; the rest
                  of the facts are filled), or V(absent) (no library, no nvidia-smi or no driver).
              type: str
              sample: ok
            backend:
              description: V(nvml) or V(nvidia_smi).
              type: str
              sample: nvml
            elapsed:
              description: Seconds the probe took.
              type: float
              sample: 0.021
            timeout:
              description: The O(timeout) in seconds the probe ran under (a V(hung) probe gave up after it).
              type: float
              sample: 10.0
            error:
              description: The first error, readable; null when none.
              type: str
              sample: "NVML_ERROR_LIB_RM_VERSION_MISMATCH: Driver/library version mismatch (nvmlInit)"
            error_code:
              description: NVML error name of the first error, when known.
              type: str
              sample: NVML_ERROR_LIB_RM_VERSION_MISMATCH
            errors:
              description: Every error, each with C(function), C(code), C(message) and, where it applies, C(gpu) and C(mig_device).
              type: list
              elements: dict
            hung_in:
              description: The call the probe was making when it was declared hung.
              type: str
              sample: nvmlInit
            stuck_pids:
              description: Probe processes that did not die on SIGKILL (uninterruptible sleep) and were left behind.
              type: list
              elements: int
        source:
          description: Where C(gpus) came from - V(nvml), V(nvidia_smi), V(procfs) (probe failed) or null.
          type: str
          sample: nvml
        driver_version:
          description: Userspace driver version (from NVML/nvidia-smi, else from the library's file name).
          type: str
          sample: 570.172.08
        driver_version_source:
          description: V(nvml), V(nvidia_smi) or V(library_file).
          type: str
          sample: nvml
        driver_branch:
          description: Driver branch (first version component).
          type: int
          sample: 570
        kernel_module_version:
          description: Version of the loaded kernel module, from C(<proc_path>/driver/nvidia/version).
          type: str
          sample: 570.172.08
        cuda_driver_version:
          description: CUDA version the driver supports.
          type: str
          sample: "12.8"
        nvml_version:
          description: NVML library version (nvml backend).
          type: str
          sample: 12.570.172.08
        library_path:
          description: The C(libnvidia-ml.so.1) found under O(driver_root).
          type: str
          sample: /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1
        library_version:
          description: Version in the name of the file C(libnvidia-ml.so.1) links to.
          type: str
          sample: 570.172.08
        nvidia_smi_path:
          description: The C(nvidia-smi) found under O(driver_root).
          type: str
          sample: /usr/bin/nvidia-smi
        mig_enabled:
          description: At least one GPU is in MIG mode; null when unknown.
          type: bool
          sample: true
        mig_mixed:
          description: Some GPUs are in MIG mode and some are not (the R570 hang trigger); null when unknown.
          type: bool
          sample: false
        vgpu_guest:
          description:
            - The node is a VM running NVIDIA's vGPU guest driver - some GPU's C(virtualization_mode) is
              V(vgpu) (NVML C(NVML_GPU_VIRTUALIZATION_MODE_VGPU), "vGPU inside virtual machine"). False when
              every GPU's mode is known and none is (bare metal, or a GPU passed through to a VM, which runs
              the data-center driver); null when unknown (procfs backend, an NVML without the query).
            - The audit's catalog condition C(vgpu_guest) - NVIDIA's bulletins list the guest driver's CVEs
              apart from the data-center driver's.
          type: bool
          sample: false
        gpu_count:
          description: Number of GPUs in C(gpus).
          type: int
          sample: 8
        gpus:
          description: GPUs in NVML index order.
          type: list
          elements: dict
          contains:
            index:
              description: NVML index (null for GPUs read from procfs).
              type: int
            uuid:
              description: GPU UUID.
              type: str
              sample: GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77
            name:
              description: Product name.
              type: str
              sample: NVIDIA H100 80GB HBM3
            minor_number:
              description: Minor number of C(/dev/nvidia<N>).
              type: int
            pci_bus_id:
              description: PCI bus ID.
              type: str
              sample: 00000000:18:00.0
            memory_total_mib:
              description: Framebuffer memory in MiB.
              type: int
            mig_mode:
              description: C(current) and C(pending) MIG mode, each V(enabled), V(disabled), V(unsupported) or V(unknown).
              type: dict
            mig_devices:
              description:
                - MIG devices with C(index), C(uuid), C(name), C(profile), C(gpu_instance_id), C(compute_instance_id),
                  C(memory_total_mib), C(multiprocessor_count).
              type: list
              elements: dict
            virtualization_mode:
              description:
                - NVML's virtualization mode of the GPU (C(nvmlDeviceGetVirtualizationMode); nvidia-smi's
                  C(GPU Virtualization Mode)) - V(none) (bare metal), V(passthrough), V(vgpu) (a vGPU inside a VM,
                  guest driver), V(host_vgpu), V(host_vsga) (the hypervisor), or V(unknown).
              type: str
              sample: none
            errors:
              description: Errors of the calls about this GPU.
              type: list
              elements: dict
            health:
              description:
                - Memory and NVLink health (nvml and nvidia_smi backends, the same shape) -
                  C(remapped_rows) (C(supported), C(correctable), C(uncorrectable), C(pending),
                  C(failure), C(histogram) of banks by spare rows left), C(retired_pages)
                  (C(multiple_single_bit), C(double_bit), C(pending)), C(ecc) (C(volatile) and
                  C(aggregate) counters), C(nvlink) (C(links), C(active), per-counter C(totals),
                  C(by_link); C(nvidia-smi nvlink -s/-e) for the nvidia_smi backend), C(recovery)
                  (the driver's verdict - C(action) from C(gpu_recovery_action) and the deprecated
                  C(reset_required), C(drain_and_reset_recommended)), C(repair)
                  (C(channel_repair_pending), C(tpc_repair_pending), C(unrepairable_memory)),
                  C(pcie) (link gen and width, current and max, C(replay_counter),
                  C(replay_rollover_counter)), C(clocks_event_reasons) (the active ones),
                  C(fabric) (C(state), C(status)) and C(errors) (query name to V(not supported)
                  or the NVML error).
                - See docs/hardware-health.md in the collection.
              type: dict
              returned: when the driver answered
            health_verdict:
              description:
                - C(reset_required), C(rma), C(ecc_uncorrectable) (C(volatile), C(aggregate),
                  C(scope)), C(nvlink_errors), C(recovery) (the driver's verdict, its C(source)
                  and the C(action) it means), C(pcie) (the link judged, with the replay rate
                  and DCGM's threshold), C(reasons), the audit C(findings) this GPU raises and
                  C(details) (the reasons per finding). Computed the same way for both backends,
                  with the node's uptime and the GPU's MIG mode.
              type: dict
              returned: when the driver answered
        pci:
          description:
            - NVIDIA devices under C(<sys_path>/bus/pci/devices) - C(available), C(path), C(gpus)
              and C(nvswitches) (each C(bus_id), C(vendor_id), C(device_id), C(class), C(kind),
              C(driver)) and C(errors) (entries that could not be read).
          type: dict
        xid:
          description:
            - Xid events of this boot - C(source) (V(journal), V(kmsg), V(dmesg) or null when
              no kernel log could be read), C(attempts) (sources that failed, with the reason),
              C(stats), C(gpus) (per bus id - C(counts), C(last) event, C(action) from NVIDIA's
              Xid catalog, C(classes), C(mig) (Xids the driver attributed to a MIG instance),
              C(kernel_events) (the fallen-off-the-bus message without an Xid, read as Xid 79;
              C(RmInitAdapter failed)), C(recovery_action) (the newest Xid 154's)), C(action)
              (the worst documented action), C(nvswitches) (SXid records per NVSwitch, with
              C(fatal) and C(non_fatal) SXids), C(sxid_action) and C(events) (count). Null when
              O(xid=false).
            - How much was scanned - C(scanned) (false when no source could be read),
              C(truncated) (true when the oldest part of this boot's log was not scanned),
              C(dropped_bytes) (at least that many older bytes cut) and C(warning) (what was
              not scanned or why nothing was, in words; null when the whole log was).
          type: dict
          contains:
            scanned:
              description: A kernel log source was read; false means Xid errors cannot be ruled out.
              type: bool
            truncated:
              description: Only the newest part of this boot's kernel log was scanned.
              type: bool
            dropped_bytes:
              description: Older bytes of the log that were cut (at least; some cuts have no known size).
              type: int
            warning:
              description:
                - Starts with C(kernel log truncated) (the source, then what was not scanned) or
                  with C(no kernel log could be read) (each source and why), and says that Xid
                  errors there cannot be ruled out. Null when the whole log was scanned.
              type: str
        uptime_s:
          description: Seconds since boot (C(<proc_path>/uptime)); the PCIe replay rate is judged over it.
          type: float
        presence:
          description:
            - GPUs on the PCI bus vs GPUs the driver lists - C(ok), C(compared) (false when the
              bus or the driver's list could not be read), C(pci_count), C(present_count),
              C(missing) (C(bus_id), C(reason), C(xid)), C(not_on_bus), C(passthrough) and
              C(problems) (also an C(attached_gpus) count nvidia-smi does not describe).
          type: dict
        device_ids:
          description: Every GPU and MIG device UUID, as Kubernetes device plugins and the kubelet checkpoint name them.
          type: list
          elements: str
        device_majors:
          description: Majors from C(<proc_path>/devices) - C(gpu) (and C(gpu_name), V(nvidia) or V(nvidia-frontend)), C(nvidia_uvm), C(nvidia_caps).
          type: dict
        device_nodes:
          description:
            - C(nvidiactl), C(nvidia-modeset), C(nvidia-uvm), C(nvidia-uvm-tools), one C(nvidia<minor>) per GPU and the
              C(nvidia-caps/nvidia-cap<N>) nodes of each MIG device (from C(mig-minors)).
            - Each with C(name), C(path), C(kind), C(exists), C(char_device), C(major), C(minor), C(expected_major),
              C(expected_minor), C(major_name) and C(ok) (exists and matches the driver's numbers).
            - Existing char devices also carry C(dev_char_link), true when C(<dev_path>/char/<major>:<minor>)
              resolves to the node (runc needs these links with the systemd cgroup driver).
          type: list
          elements: dict
        kernel_modules:
          description:
            - C(nvidia), C(nvidia_uvm), C(nvidia_modeset), C(nvidia_drm), C(nvidia_peermem), each C(loaded),
              C(refcount) and C(state).
            - C(refcount) is null where the kernel cannot unload modules and prints C(-) in C(/proc/modules).
          type: dict
        warnings:
          description:
            - What could not be read or was not believed, each also issued as a task warning. A procfs file that
              cannot be read (a FIFO, a directory, too large, no permission; a missing C(devices) or C(modules)),
              an entry under C(driver/nvidia/gpus) without a readable C(information) file (not counted as a
              GPU), a driver version from the probe that is not C(BRANCH.MINOR[.PATCH]) (dropped; the probe
              status becomes V(error)).
            - No file is ever opened in a way that blocks; nothing is read past 1 MiB.
          type: list
          elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.kubegpu.fleet.plugins.module_utils.audit import probe_options
from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu.facts_run import gpu_facts_run
from ansible_collections.kubegpu.fleet.plugins.module_utils._common.node_probes import run_probe_module


def main():
    module = AnsibleModule(
        # the audit's probe registry uses the same options (module_utils/audit/probes.py)
        argument_spec=probe_options.spec(probe_options.GPU_FACTS),
        supports_check_mode=True,
    )
    run_probe_module(module, gpu_facts_run, module.params, module.warn)


if __name__ == "__main__":
    main()
