#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: boot_facts
short_description: Which kernel the next boot of a node starts, from its boot loader, and how that is known
version_added: 0.1.0
description:
  - Reads the boot loader's state on the node and answers which kernel its next boot starts
    (RV(next_kernel)), the entry and the way it was found (RV(default), RV(once), RV(how)), with
    the running kernel (RV(running)) and the distribution's own answers (RV(distribution)).
    M(kubegpu.fleet.reboot_need) runs it and compares RV(next_kernel) with the running kernel.
  - "GRUB: the environment block (C(grubenv) in O(boot_path)/grub or O(boot_path)/grub2:
    C(next_entry) boots once, as C(grub-reboot) sets it, C(saved_entry) as C(grub-set-default)
    and C(GRUB_DEFAULT=saved) use it) and C(grub.cfg) beside it: its C(set default=) (an index,
    an entry's title or id, one level per C(>), as C(gnulinux-advanced-UUID>gnulinux-6.1.0-27-amd64-advanced-UUID)),
    its C(menuentry)/C(submenu) titles and ids and each entry's C(linux) line. A default that
    names no entry boots the first one, as GRUB does."
  - "RHEL family (C(blscfg) in grub.cfg): the Boot Loader Specification entries in
    O(boot_path)/loader/entries, newest first, with C(saved_entry) naming an entry's file name;
    C(grubby --default-kernel), where installed, is the distribution's answer and wins where it
    differs (the difference is in RV(problems))."
  - "systemd-boot (its C(LoaderInfo) EFI variable, or a C(loader/loader.conf) under O(esp_paths)
    without a grub.cfg): the C(LoaderEntryOneShot) and C(LoaderEntryDefault) EFI variables, then
    loader.conf's C(default) glob, else the first entry."
  - "The distribution's answers, where installed: C(needrestart -b -k) (its C(NEEDRESTART-KCUR),
    C(NEEDRESTART-KEXP), C(NEEDRESTART-KSTA) keys), C(dnf needs-restarting -r) (exit code 1 with
    its sentence: reboot required), C(/run/reboot-required) and C(/run/reboot-required.pkgs)."
  - Every file is read with a size bound and without blocking (a FIFO, a device or a symlink loop is
    reported in RV(problems), never read); every command runs with the O(timeout) deadline. A
    missing file or tool makes the answer unknown (RV(loader=unknown), RV(next_kernel) null), never
    a failure. Nothing on the node is changed.
options:
  boot_path:
    description: Where the node's /boot is (grub/, grub2/, loader/entries/).
    type: path
    default: /boot
  esp_paths:
    description: Where an EFI system partition or XBOOTLDR partition may be mounted (systemd-boot's loader/).
    type: list
    elements: path
    default: [/boot/efi, /efi, /boot]
  proc_path:
    description: Mount point of procfs (the running release is C(<proc_path>/sys/kernel/osrelease)).
    type: path
    default: /proc
  sys_path:
    description: Mount point of sysfs (EFI variables in C(<sys_path>/firmware/efi/efivars)).
    type: path
    default: /sys
  run_path:
    description: Directory of C(reboot-required) and C(reboot-required.pkgs).
    type: path
    default: /run
  commands:
    description: Run C(grubby), C(needrestart) and C(dnf) where installed; V(false) reads files only.
    type: bool
    default: true
  timeout:
    description: Seconds each command may run (0.1 to 600); it is killed past that and its answer is unknown.
    type: float
    default: 30
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Reads only; check mode returns the same answer.
  diff_mode:
    support: none
  platform:
    platforms: posix
notes:
  - Needs root to read a grubenv or efivars that only root may read; what cannot be read is in RV(problems).
author:
  - kubegpu.fleet maintainers (@kubegpu)
seealso:
  - module: kubegpu.fleet.reboot_need
"""

EXAMPLES = r"""
- name: Which kernel does the next boot start?
  kubegpu.fleet.boot_facts:
  register: boot

- name: Say when the next boot changes the kernel
  ansible.builtin.debug:
    msg: "next boot starts {{ boot.next_kernel }} ({{ boot.how | join('; ') }}), {{ boot.running }} runs"
  when: boot.next_kernel is not none and boot.next_kernel != boot.running

- name: Files only, no grubby/needrestart/dnf
  kubegpu.fleet.boot_facts:
    commands: false
"""

RETURN = r"""
running:
  description: The running kernel release, or null when unreadable.
  returned: always
  type: str
  sample: 6.8.0-50-generic
loader:
  description: "The boot loader whose state was read: V(grub), V(grub-bls) (GRUB with BLS entries), V(systemd-boot) or V(unknown)."
  returned: always
  type: str
next_kernel:
  description: The release the next boot starts (RV(once) where set, else RV(default)); null when unknown.
  returned: always
  type: str
  sample: 6.8.0-1015-nvidia
default:
  description: "The persistent default entry: C(kernel), C(title), C(id), C(linux), C(how), C(matched) (false: the default
    named no entry and the first is booted); null when unknown."
  returned: always
  type: dict
once:
  description: The entry set for the next boot only (GRUB C(next_entry), systemd-boot C(LoaderEntryOneShot)), same keys as RV(default); null when none.
  returned: always
  type: dict
how:
  description: How the answer was found, in words, one step each.
  returned: always
  type: list
  elements: str
  sample: ["/boot/grub/grubenv: no saved or next entry", "/boot/grub/grub.cfg: grub.cfg set default=0 -> Ubuntu"]
entries:
  description: The first 32 bootable entries in menu order (C(title), C(id), C(kernel)).
  returned: always
  type: list
  elements: dict
grubenv:
  description: The environment block read (C(path), C(saved_entry), C(next_entry)), or null.
  returned: always
  type: dict
grub_cfg:
  description: The grub.cfg read, or null.
  returned: always
  type: str
loader_conf:
  description: The systemd-boot loader.conf read, or null.
  returned: always
  type: str
distribution:
  description: "The distribution's answers: C(needrestart) (C(version), C(kcur), C(kexp), C(ksta), C(status), C(rc)) or null,
    C(dnf_needs_restarting) (C(required) true/false/null, C(rc), C(msg)) or null, C(reboot_required) (C(exists), C(packages))."
  returned: always
  type: dict
problems:
  description: What could not be read or did not agree (a refused file, a command past its deadline, grubby against grub.cfg).
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.kubegpu.fleet.plugins.module_utils.boot.facts import BootFactsError, boot_facts


def main():
    module = AnsibleModule(
        argument_spec=dict(
            boot_path=dict(type="path", default="/boot"),
            esp_paths=dict(type="list", elements="path", default=["/boot/efi", "/efi", "/boot"]),
            proc_path=dict(type="path", default="/proc"),
            sys_path=dict(type="path", default="/sys"),
            run_path=dict(type="path", default="/run"),
            commands=dict(type="bool", default=True),
            timeout=dict(type="float", default=30.0),
        ),
        supports_check_mode=True,
    )
    try:
        result = boot_facts(module.params)
    except BootFactsError as e:
        module.fail_json(msg=str(e))
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
