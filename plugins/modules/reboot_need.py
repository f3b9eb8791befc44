#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# This module is implemented as an action plugin: it runs read-only modules on the node and
# decides on the controller.
from __future__ import annotations

DOCUMENTATION = r"""
module: reboot_need
short_description: Decide whether a GPU node needs a reboot, with the reasons
version_added: 0.1.0
description:
  - Gathers from the node in one task what decides a reboot, then decides on the controller
    (the logic is in C(plugins/plugin_utils/rollout/reboot_need.py)), the way
    P(kubegpu.fleet.rolling_reboot#role) uses it for O(mode=needed).
  - "Pending reasons: a reboot sentinel exists (O(sentinels); Ubuntu's update-notifier, kured and
    the C(kubegpu.fleet.driver) role write C(/run/reboot-required)); the installed NVIDIA driver
    differs from the loaded kernel module (M(kubegpu.fleet.driver_guard) in audit state); the boot
    loader's next boot starts another kernel than the running one; the distribution says a reboot
    is required (C(dnf needs-restarting -r); needrestart's kernel status where the boot loader's
    answer is unknown); an earlier role of the play set O(required)."
  - "The kernel the next boot starts is asked of the boot loader (M(kubegpu.fleet.boot_facts) on
    the node: GRUB's C(grubenv) and C(grub.cfg) default with its submenus, the RHEL family's BLS
    entries with grubby's C(saved_entry) and C(grubby --default-kernel), systemd-boot). A default
    entry of another kernel is a reason whatever its flavour (a newer C(6.8.0-1015-nvidia) set as
    default beside a running C(6.8.0-50-generic)); a default entry of the running kernel is none,
    even with a newer kernel installed (the reason says a reboot would start the running kernel
    again). Where the boot loader's answer is unknown the installed kernels decide, as below, and
    the reason says so."
  - Installed kernels are the C(vmlinuz-<release>) files of O(boot_path) as Debian, Ubuntu and
    RHEL-family systems install them. The C(vmlinuz)/C(vmlinuz.old) symlinks, RHEL's
    C(vmlinuz-0-rescue-<machine-id>), C(.hmac) files and package manager leftovers never count.
    Releases compare segment by segment with numbers as numbers (C(6.1.0-27) is newer than
    C(6.1.0-9)), and only kernels of the running kernel's flavour (C(amd64), C(generic),
    C(x86_64)) are compared with it (the fallback when the boot loader's answer is unknown). A
    node whose newest installed kernel is the running one needs nothing.
  - O(node) (the Node object from the API) tells whether an earlier run left a maintenance open
    (annotation O(annotation)); that is returned as RV(need.resume).
  - Sets the fact C(kubegpu_rolling_reboot_need) (RV(need)). Never changes anything.
options:
  mode:
    description:
      - C(needed) reboots when a reason is pending, C(always) reboots in any case, C(never) reports
        the pending reasons without rebooting.
    type: str
    choices: [needed, always, never]
    default: needed
  sentinels:
    description: Files whose existence means a reboot is pending. A file reached through two listed paths counts once.
    type: list
    elements: str
    default: [/run/reboot-required, /var/run/reboot-required]
  check_kernel:
    description:
      - Compare the kernel the boot loader starts next (else the installed kernels in O(boot_path)) with the running one,
        and ask the distribution's tools.
    type: bool
    default: true
  check_driver:
    description: Compare the installed NVIDIA driver with the loaded kernel module (M(kubegpu.fleet.driver_guard)).
    type: bool
    default: true
  boot_path:
    description: Directory of the installed kernels.
    type: str
    default: /boot
  proc_path:
    description: Mount point of procfs (the running release is C(<proc_path>/sys/kernel/osrelease)).
    type: str
    default: /proc
  nvidia_proc_path:
    description: procfs for the NVIDIA driver files, as O(kubegpu.fleet.driver_guard#module:proc_path); defaults to O(proc_path).
    type: str
  dev_path:
    description: As O(kubegpu.fleet.driver_guard#module:dev_path).
    type: str
    default: /dev
  driver_root:
    description: As O(kubegpu.fleet.driver_guard#module:driver_root).
    type: str
    default: /
  backend:
    description: As O(kubegpu.fleet.driver_guard#module:backend).
    type: str
    choices: [auto, nvml, nvidia_smi]
    default: auto
  timeout:
    description: As O(kubegpu.fleet.driver_guard#module:timeout).
    type: float
    default: 10
  node:
    description: The Node object as the Kubernetes API returns it (for a maintenance left open); V({}) when not read.
    type: dict
    default: {}
  annotation:
    description: Annotation that records an open maintenance on the Node.
    type: str
    default: kubegpu.io/maintenance
  required:
    description: An earlier role of the play recorded that the node needs a reboot (C(kubegpu_reboot_required)).
    type: bool
    default: false
  required_reasons:
    description: Why, as that role recorded it (C(kubegpu_reboot_reasons)).
    type: list
    elements: str
    default: []
  planned:
    description: Recorded in the result, for a rollout plan that leaves out nodes that need nothing.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: posix
    details: Runs ansible.builtin.find, ansible.builtin.slurp, kubegpu.fleet.boot_facts and kubegpu.fleet.driver_guard (audit)
      on the node; decides on the controller.
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
author:
  - kubegpu.fleet maintainers (@kubegpu)
"""

EXAMPLES = r"""
- name: Does the node need a reboot?
  kubegpu.fleet.reboot_need:
    mode: needed
  register: need

- name: Reboot only where needed
  ansible.builtin.reboot:
    msg: "{{ need.need.reasons | join('; ') }}"
  when: need.need.reboot
"""

RETURN = r"""
need:
  description: The decision (also set as the fact C(kubegpu_rolling_reboot_need)).
  returned: success
  type: dict
  contains:
    reboot:
      description: Whether this run reboots the node.
      type: bool
    resume:
      description: Whether a maintenance an earlier run left open on the Node is to be finished.
      type: bool
    reasons:
      description: Why this run reboots (empty when it does not).
      type: list
      elements: str
      sample: ["kernel 6.1.0-28-amd64 is installed, 6.1.0-27-amd64 is running"]
    pending_reasons:
      description: Why a reboot is pending, whatever O(mode) says.
      type: list
      elements: str
    mode:
      description: O(mode).
      type: str
    planned:
      description: O(planned).
      type: bool
    kernel:
      description: "The kernel comparison: C(pending), C(running), C(installed) (newest first), C(compared), C(newest), C(reason);
        with the boot loader asked, C(next_kernel), C(loader), C(entry), C(once), C(how), C(basis) (V(boot loader) or V(/boot)),
        C(notes)."
      type: dict
    driver:
      description: "The driver comparison: C(pending), C(driver_version), C(kernel_module_version), C(reason)."
      type: dict
    sentinels:
      description: The sentinels that exist.
      type: list
      elements: str
    boot_id:
      description: The Node's C(status.nodeInfo.bootID) from O(node) (empty when not given), for the wait after the reboot.
      type: str
    maintenance:
      description: The open maintenance annotation's value, or null.
      type: str
    msg:
      description: The decision in one line.
      type: str
msg:
  description: "RV(need.msg); in check mode, for a node this run would reboot, C(check mode: would reboot NAME (reasons))."
  returned: success
  type: str
  sample: "no reboot needed (kubegpu_reboot=needed): the running kernel 6.1.0-27-amd64 is the newest installed; driver 570.172.08 installed and loaded"
"""
