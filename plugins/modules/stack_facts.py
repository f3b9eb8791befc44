#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: stack_facts
short_description: Gather NVIDIA container toolkit, fabric manager, NVSwitch and kernel module facts
version_added: 0.1.0
description:
  - Gathers the NVIDIA node stack beside the driver into C(ansible_facts.nvidia_stack), the facts
    the audit compares with the known-bad catalog (C(catalog/v2)).
  - B(Container toolkit) - the installed C(nvidia-container-toolkit), C(nvidia-container-toolkit-base),
    C(libnvidia-container1) and C(libnvidia-container-tools) packages (C(dpkg-query) or C(rpm), with a
    deadline), the runtime's C(/etc/nvidia-container-runtime/config.toml), the NVIDIA CDI specs
    (C(nvidia*.yaml|yml|json) in C(/etc/cdi) and C(/var/run/cdi)).
  - The config file is read on the node (a regular file of at most 256 KiB) and parsed on the
    controller by this module's action plugin with Python's C(tomllib) (nodes may lack a TOML parser).
    A broken, non-UTF-8 or too large file is a warning and C(config) null, never a failure.
  - The B(injection mode) comes from C(nvidia-container-runtime.mode) - V(legacy) is legacy, V(cdi) and
    V(jit-cdi) are CDI, V(auto) (the packaged default, also when the key is absent) resolves to legacy
    before toolkit 1.18.0 and to jit-cdi from 1.18.0, as the toolkit's own auto-detection does on a
    data-center (NVML) platform; V(csv) (Tegra) is reported as null.
  - The B(low-level runtime) is the first of the config's C(nvidia-container-runtime.runtimes)
    candidates (the default list is C(docker-runc), C(runc), C(crun)) that is installed as an executable
    in C(/usr/local/sbin), C(/usr/local/bin), C(/usr/sbin), C(/usr/bin), C(/sbin) or C(/bin) under O(root),
    which is the one the NVIDIA runtime hands containers to; C(docker-runc) is reported as V(runc).
  - B(Fabric manager) - the package (C(nvidia-fabricmanager-<branch>) on Debian/Ubuntu,
    C(nvidia-fabric-manager) on RHEL) and its version, and the state of its systemd unit
    (C(systemctl show -p ActiveState,UnitFileState), with a deadline).
  - B(NVSwitches) - NVIDIA PCI devices of class C(0x0680xx) under O(sys_path) and the
    C(nvidia-nvswitchN) device nodes under O(dev_path).
  - B(Kernel modules) - V(open) or V(proprietary) from the banner in C(driver/nvidia/version) under
    O(proc_path) (C(NVIDIA UNIX Open Kernel Module for x86_64 ...) vs C(NVIDIA UNIX x86_64 Kernel
    Module ...)), else from C(module/nvidia/taint) under O(sys_path) (the proprietary module taints the
    kernel with C(P)); null when the module is not loaded.
  - Nothing on the node is changed. What cannot be read is a warning and a null fact.
author:
  - kubegpu.fleet maintainers (@kubegpu)
options:
  root:
    description:
      - Root of the node's filesystem. The package databases (C(dpkg-query --admindir <root>/var/lib/dpkg),
        C(rpm --root <root>)), C(<root>/etc/nvidia-container-runtime/config.toml), the CDI spec directories
        and the runtime binaries are looked for under it.
      - V(/host) when auditing from a container (for example the GPU Operator's) that mounts the host at C(/host).
    type: path
    default: /
  sys_path:
    description: Where the host's sysfs is mounted (NVSwitch PCI devices, C(module/nvidia/taint)).
    type: path
    default: /sys
  dev_path:
    description: Where the host's C(/dev) is mounted (C(nvidia-nvswitchN) device nodes).
    type: path
    default: /dev
  proc_path:
    description: Where the host's procfs is mounted (C(driver/nvidia/version)).
    type: path
    default: /proc
  fabric_manager_unit:
    description: The fabric manager's systemd unit.
    type: str
    default: nvidia-fabricmanager.service
  service_state:
    description:
      - Ask systemd for the fabric manager unit's state. V(false) leaves
        C(fabric_manager.service) null (a container without access to the
        host's systemd).
    type: bool
    default: true
  command_timeout:
    description:
      - Seconds each command (C(dpkg-query), C(rpm), C(systemctl)) may take before it is killed.
      - A finite number greater than 0 and at most 86400.
    type: float
    default: 30
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - kubegpu.fleet.action_group.node
attributes:
  check_mode:
    support: full
    description: Read-only; runs the same in check mode.
  diff_mode:
    support: none
    description: Changes nothing, so there is no diff.
  platform:
    support: full
    platforms: posix
    description: Linux nodes with dpkg or rpm.
  facts:
    support: full
    description: Sets C(ansible_facts.nvidia_stack).
notes:
  - Part of the C(kubegpu.fleet.node) action group, so C(module_defaults) can point it at C(/host).
seealso:
  - module: kubegpu.fleet.gpu_facts
  - module: kubegpu.fleet.audit_node
"""

EXAMPLES = r"""
- name: Gather the NVIDIA node stack
  kubegpu.fleet.stack_facts:

- name: Show the toolkit's injection mode
  ansible.builtin.debug:
    msg: "{{ nvidia_stack.container_toolkit.version }} in {{ nvidia_stack.container_toolkit.injection_mode }} mode"

- name: From a container that mounts the host at /host (no host systemd)
  kubegpu.fleet.stack_facts:
    root: /host
    sys_path: /host/sys
    dev_path: /host/dev
    proc_path: /host/proc
    service_state: false
"""

RETURN = r"""
ansible_facts:
  description: The facts.
  returned: always
  type: dict
  contains:
    nvidia_stack:
      description: The NVIDIA node stack beside the driver.
      returned: always
      type: dict
      contains:
        container_toolkit:
          description: The NVIDIA Container Toolkit.
          type: dict
          returned: always
          sample:
            installed: true
            version: 1.17.8
            packages: {nvidia-container-toolkit: 1.17.8-1, nvidia-container-toolkit-base: 1.17.8-1}
            package_manager: dpkg
            config_path: /etc/nvidia-container-runtime/config.toml
            config_error: null
            config:
              mode: auto
              runtimes: [docker-runc, runc, crun]
              features: {disable-cuda-compat-lib-hook: true}
              accept-nvidia-visible-devices-envvar-when-unprivileged: null
              accept-nvidia-visible-devices-as-volume-mounts: null
              cuda-compat-mode: ldconfig
              cdi-spec-dirs: [/etc/cdi, /var/run/cdi]
            injection_mode: legacy
            injection_mode_reason: mode = auto resolves to legacy before toolkit 1.18.0
            cdi_specs: [/etc/cdi/nvidia.yaml]
            runtime: runc
            runtime_binaries: [runc]
            cuda_compat_hook_disabled: true
        fabric_manager:
          description: Fabric manager package, version and systemd unit state (C(active), C(enabled)).
          type: dict
          returned: always
          sample:
            installed: true
            package: nvidia-fabricmanager-570
            version: 570.172.08
            unit: nvidia-fabricmanager.service
            service: {active: active, enabled: enabled}
        dcgm:
          description:
            - DCGM's host package (C(datacenter-gpu-manager), C(datacenter-gpu-manager-4-core), ...) and its
              upstream version; C(installed) false when none is installed (DCGM may still run in a pod).
          type: dict
          returned: always
          sample:
            installed: true
            package: datacenter-gpu-manager-4-core
            version: 4.2.3
        nvswitch:
          description: NVSwitches; C(present) null when neither sysfs nor the device nodes could be read.
          type: dict
          returned: always
          sample: {present: true, count: 4, bus_ids: ["0000:05:00.0"], device_nodes: [/dev/nvidia-nvswitch0]}
        kernel_modules:
          description: V(open), V(proprietary) or null (module not loaded).
          type: str
          returned: always
          sample: open
        kernel_modules_source:
          description: What decided RV(ansible_facts.nvidia_stack.kernel_modules) (V(proc_version), V(module_taint)).
          type: str
          returned: always
          sample: proc_version
        errors:
          description: What could not be read (also returned as warnings).
          type: list
          elements: str
          returned: always
          sample: []
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.kubegpu.fleet.plugins.module_utils.audit import probe_options
from ansible_collections.kubegpu.fleet.plugins.module_utils._common.node_probes import run_probe_module
from ansible_collections.kubegpu.fleet.plugins.module_utils.stack.facts import stack_facts_run


def main():
    module = AnsibleModule(
        argument_spec=probe_options.spec(probe_options.STACK_FACTS),
        supports_check_mode=True,
    )
    run_probe_module(module, stack_facts_run, module.params, module.get_bin_path, module.warn)


if __name__ == "__main__":
    main()
