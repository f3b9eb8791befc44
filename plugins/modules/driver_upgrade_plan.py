#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: driver_upgrade_plan
short_description: Plan an NVIDIA driver upgrade within its branch (the whole package set at one version)
version_added: 0.1.0
description:
  - Reads the installed NVIDIA packages and the versions the package sources offer and plans
    the transaction that moves the whole driver branch package set to one version. The module
    is read only; the P(kubegpu.fleet.driver#role) role carries the plan out.
  - "apt (Ubuntu package names): the set is every installed package whose name ends in the
    branch (C(nvidia-driver-570), C(libnvidia-compute-570), C(nvidia-utils-570),
    C(nvidia-dkms-570), C(nvidia-kernel-common-570), C(xserver-xorg-video-nvidia-570), the
    C(-server) and C(-open) variants...) plus C(nvidia-compute-utils-<branch>[-server]), which
    ships C(nvidia-cuda-mps-control). Each member is pinned to the exact candidate of the
    target version (C(name=570.172.08-0ubuntu1)); apt refuses to move one of them alone because
    of their exact-version dependencies. An installed package that has no candidate at the
    target version is left out and listed in RV(unavailable)."
  - "dnf (NVIDIA's RHEL module streams C(nvidia-driver:<branch>-dkms) / C(<branch>-open)): the set
    is every installed NVIDIA driver package whose version is in the branch plus
    C(nvidia-driver-cuda) (C(nvidia-cuda-mps-control)); the plan names the stream to enable,
    the C(name-EPOCH:VERSION-RELEASE) specs and the versionlock entries to add and remove."
  - The target is O(version), else the highest first fixed release of the target branch among
    O(fixed_releases) (the P(kubegpu.fleet.driver#role) role passes those of the known-bad driver
    catalog), never below the installed version of that branch.
  - A move to another branch is refused unless O(allow_branch_change=true), a downgrade within
    the branch unless O(allow_downgrade=true); the task fails with a message naming both versions.
  - RV(locks) names the processes holding the dpkg/apt lock files (from C(/proc/locks)).
  - "Fabric manager (NVSwitch systems) moves in lockstep: an installed C(nvidia-fabricmanager-<branch>),
    C(nvidia-fabricmanager-dev-<branch>), C(cuda-drivers-fabricmanager-<branch>) (apt) or
    C(nvidia-fabric-manager[-devel]), C(nvidia-fabricmanager[-devel]-<branch>) (dnf) is a member
    pinned to the target in the same transaction; the plan fails when it has no candidate at the
    target (nv-fabricmanager refuses to start against a driver of another version). Its change
    alone needs no reboot (RV(fabric_manager))."
author:
  - kubegpu.fleet maintainers (@kubegpu)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: The module never changes anything; it runs the same in check mode.
  diff_mode:
    support: full
    details: The diff lists the package set before and after (name and version per line).
  platform:
    platforms: posix
    details: Debian/Ubuntu (dpkg-query, apt-cache) or RHEL-like nodes (rpm, dnf).
options:
  version:
    description:
      - Target driver version, V(570.172.08), or a full package version
        (V(570.172.08-0ubuntu1), V(3:570.172.08-1.el9)) to pick one revision exactly.
      - Default is derived from O(branch) and O(fixed_releases).
    type: str
  branch:
    description:
      - Target branch when O(version) is not set. Default is the installed branch.
      - Setting both O(version) and O(branch) to different branches is an error.
    type: int
  fixed_releases:
    description:
      - First fixed releases of known-bad catalog entries (any branch). The highest one of the
        target branch is the default target.
    type: list
    elements: str
    default: []
  allow_branch_change:
    description: Allow a target in another branch than the installed driver.
    type: bool
    default: false
  allow_downgrade:
    description: Allow a target below the installed version of the same branch.
    type: bool
    default: false
  compute_utils:
    description:
      - Add C(nvidia-compute-utils-<branch>) (apt) or C(nvidia-driver-cuda) (dnf), which ship
        C(nvidia-cuda-mps-control), to the set when it is not installed.
    type: bool
    default: true
  package_manager:
    description: V(auto) picks apt when the dpkg database exists, else dnf.
    type: str
    choices: [auto, apt, dnf]
    default: auto
  dnf_module:
    description: Name of the dnf module whose stream selects the driver branch.
    type: str
    default: nvidia-driver
  dnf_flavor:
    description:
      - Stream flavor, V(dkms) or V(open) (C(570-dkms), C(570-open)). V(auto) keeps the flavor of
        the enabled stream, else of the installed kernel module package.
    type: str
    choices: [auto, dkms, open]
    default: auto
  dnf_versionlock_path:
    description: The versionlock plugin's list, read to know which entries exist.
    type: path
    default: /etc/dnf/plugins/versionlock.list
  proc_path:
    description:
      - Mount point of the node's procfs for C(driver/nvidia/version). Lock holders are always
        read from C(/proc/locks).
    type: path
    default: /proc
  command_timeout:
    description:
      - Seconds each package command (C(dpkg-query), C(rpm), C(apt-cache madison), C(dpkg), C(dnf)) may run.
        A command that does not finish in time is killed, with anything it started, and the task fails
        saying which command timed out.
      - A finite number greater than 0 and at most 86400.
    type: float
    default: 300
notes:
  - The apt package lists are read as they are; refresh them first (the role does, with
    C(ansible.builtin.apt) O(ansible.builtin.apt#module:update_cache=true)).
seealso:
  - module: kubegpu.fleet.driver_guard
  - module: ansible.builtin.apt
  - module: ansible.builtin.dnf
"""

EXAMPLES = r"""
- name: Plan the upgrade to the catalog's fix of branch 570
  kubegpu.fleet.driver_upgrade_plan:
    branch: 570
    fixed_releases: ["570.172.08", "580.65.06"]
  register: plan

- name: Install the whole set at one version
  ansible.builtin.apt:
    name: "{{ plan.install }}"
    install_recommends: false
    allow_change_held_packages: true
  when: not plan.nothing_to_do

- name: Plan an explicit revision
  kubegpu.fleet.driver_upgrade_plan:
    version: 570.172.08-0ubuntu1
"""

RETURN = r"""
manager:
  description: C(apt) or C(dnf).
  returned: success
  type: str
installed_version:
  description: Installed userspace driver version (from the packages).
  returned: success
  type: str
  sample: 570.158.01
installed_branch:
  description: Its branch.
  returned: success
  type: int
  sample: 570
target_version:
  description: Target upstream driver version.
  returned: success
  type: str
  sample: 570.172.08
target_branch:
  description: Target branch.
  returned: success
  type: int
target_reason:
  description: How the target was chosen.
  returned: success
  type: str
branch_change:
  description: Whether the plan moves to another branch.
  returned: success
  type: bool
packages:
  description: The package set (name, arch, from, to, action install/upgrade/downgrade/none,
    replaces, compute_utils, fabric_manager).
  returned: success
  type: list
  elements: dict
install:
  description: Package specs for the package manager, every member pinned (C(name=version) for apt,
    C(name-EPOCH:VERSION-RELEASE) for dnf).
  returned: success
  type: list
  elements: str
  sample: ["libnvidia-compute-570=570.172.08-0ubuntu1", "nvidia-compute-utils-570=570.172.08-0ubuntu1"]
hold:
  description: Package names to hold (apt) or version-lock (dnf).
  returned: success
  type: list
  elements: str
changes:
  description: Members whose version changes (name, from, to, action).
  returned: success
  type: list
  elements: dict
nothing_to_do:
  description: True when every member is at the target version already (and the dnf stream is right).
  returned: success
  type: bool
downgrade:
  description: Whether a member goes to a lower version (apt needs C(allow_downgrade)).
  returned: success
  type: bool
reboot_required:
  description: Whether the change replaces driver packages (kernel module, libraries) so the node must
    reboot; installing only the compute utils does not.
  returned: success
  type: bool
drain_required:
  description: Whether the change disrupts GPU workloads (same rule as RV(reboot_required)).
  returned: success
  type: bool
reboot_packages:
  description: Changed packages that need the reboot.
  returned: success
  type: list
  elements: str
kernel_packages:
  description: Members other than the compute utils (what a pending reboot is about).
  returned: success
  type: list
  elements: str
unavailable:
  description: Installed members without a candidate at the target version (left out).
  returned: success
  type: list
  elements: str
other_branches:
  description: Installed NVIDIA packages of a third branch (left alone).
  returned: success
  type: list
  elements: str
fabric_manager:
  description:
    - Fabric manager in the set. C(installed) (a fabric manager package is installed), C(packages)
      (its members), C(from) (installed upstream version), C(to) (the target), C(changed) (the
      transaction changes it), C(matches_target) (already at the target; null when not installed),
      C(service) (C(nvidia-fabricmanager.service), null when not installed).
  returned: success
  type: dict
  sample: {"installed": true, "packages": ["nvidia-fabricmanager-570"], "from": "570.158.01",
           "to": "570.172.08", "changed": true, "matches_target": false,
           "service": "nvidia-fabricmanager.service"}
kernel_module_version:
  description: Loaded kernel module version (C(<proc_path>/driver/nvidia/version)), null when unknown.
  returned: always
  type: str
reboot_pending:
  description: True when the loaded kernel module differs from the target version.
  returned: success
  type: bool
dnf:
  description: dnf only. C(module_switch) (C(nvidia-driver:570-dkms) or null), C(stream_from),
    C(stream_to), C(versionlock_add) (specs), C(versionlock_delete) (names locked at another version).
  returned: when manager is dnf
  type: dict
locks:
  description: Holders of the dpkg/apt lock files (path, pid, kind, access, command, description).
  returned: always
  type: list
  elements: dict
summary:
  description: One line describing the plan.
  returned: success
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.kubegpu.fleet.plugins.module_utils.driver.upgrade_plan_run import (
    run_driver_upgrade_plan,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            version=dict(type="str"),
            branch=dict(type="int"),
            fixed_releases=dict(type="list", elements="str", default=[]),
            allow_branch_change=dict(type="bool", default=False),
            allow_downgrade=dict(type="bool", default=False),
            compute_utils=dict(type="bool", default=True),
            package_manager=dict(type="str", default="auto", choices=["auto", "apt", "dnf"]),
            dnf_module=dict(type="str", default="nvidia-driver"),
            dnf_flavor=dict(type="str", default="auto", choices=["auto", "dkms", "open"]),
            dnf_versionlock_path=dict(type="path", default="/etc/dnf/plugins/versionlock.list"),
            proc_path=dict(type="path", default="/proc"),
            command_timeout=dict(type="float", default=300.0),
        ),
        supports_check_mode=True,
    )
    run_driver_upgrade_plan(module)


if __name__ == "__main__":
    main()
