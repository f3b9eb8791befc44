#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: driver_guard
short_description: Check a node's NVIDIA driver against the known-bad catalog (v2), and pin bad versions away
version_added: 0.1.0
description:
  - Evaluates the NVIDIA driver of a node against the driver defects of the collection's
    known-bad catalog v2 (C(catalog/v2/driver.yml), the entries whose C(kind) is C(defect)) plus
    O(catalog_extra), and returns a verdict, the matching entries, the branch, a recommended
    version, whether a reboot is pending and the installed NVIDIA packages.
  - The catalog is bundled with the collection. The action plugin of this module reads every
    C(catalog/v2/*.yml) on the controller, validates it with O(catalog_extra) and passes the
    driver defects to the node; users never pass it.
  - Security entries of the driver (CVE floors from NVIDIA's bulletins) are not part of the
    verdict or the recommendation; the audit reports them separately as C(security.driver)
    findings (M(kubegpu.fleet.audit_node)).
  - "Versions are compared by ordering, never by membership in a list: an affected item covers
    C(introduced <= version < fixed) (or C(<= last_affected) without a known fix, or the whole
    branch), so releases the catalog does not name are judged too."
  - Conditions are evaluated on node facts as in catalog v2. An entry whose version range
    matches and whose conditions all hold makes the node C(known_bad). The MIG state conditions
    (C(mig_mixed), C(mig_enabled)) describe how the node is configured today; if one does not
    hold (the bug is in the driver, its trigger is a reconfiguration away) or a condition fact
    is unknown, the node is C(at_risk). Any other condition that fails (another C(gpu_model))
    rules the entry out; it is listed in RV(not_applicable) with the reason.
  - Both the installed userspace driver and the loaded kernel module are evaluated; after an
    upgrade without reboot the loaded module may still be known-bad.
  - "Recommendation rule: the first version of the node's branch that is clear of every
    known-bad driver defect on this node: the highest first-fixed version of the branch among
    the matched entries, raised while that version itself matches another defect here. Security
    floors are reported separately (C(security.driver)) and may be higher. When the branch has no
    fix, the nearest fixed branch: the nearest newer branch first (moving forward keeps the
    CUDA driver API at least as new), else the nearest older one; the remaining fixed branches
    are returned as RV(recommendation.alternatives) (e.g. 575.57.08: no 575 fix, recommended
    580.65.06, alternative 570.172.08). A candidate that would still be C(known_bad) on this
    node through an entry a driver cannot fix ranks last."
  - "O(state=pinned) writes negative pins so known-bad versions are never installed again: an
    apt preferences file with C(Pin-Priority: -1) stanzas, or dnf C(excludepkgs) entries in
    C([main]) of dnf.conf. The branch items of the driver defects become apt version regular
    expressions / dnf globs. Branch-less items (limitations, platform minimums) and security
    entries are never pinned."
author:
  - kubegpu.fleet maintainers (@kubegpu)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - kubegpu.fleet.action_group.node
attributes:
  check_mode:
    support: full
    details: O(state=pinned) reports the change and diff without writing.
  diff_mode:
    support: full
    details: O(state=pinned) returns the before/after of the apt preferences file or dnf.conf.
  platform:
    platforms: posix
    details: Linux nodes. Package listing uses dpkg-query (Debian/Ubuntu) or rpm (RHEL).
options:
  state:
    description:
      - V(audit) only reports (read only).
      - V(enforce) fails the task when the verdict is C(known_bad), with a message naming the
        entries and the recommended version (for AWX alerting). Read only.
      - V(pinned) reports like V(audit) and writes the negative pins.
    type: str
    choices: [audit, enforce, pinned]
    default: audit
  driver_version:
    description:
      - Installed userspace driver version to evaluate, e.g. V(570.148.08).
      - Default is detected from the installed driver packages, else from the NVML probe.
    type: str
  kernel_module_version:
    description:
      - Loaded kernel module version. Default is read from C(<proc_path>/driver/nvidia/version).
    type: str
  mig_mixed:
    description:
      - Whether the node mixes MIG-enabled and full GPUs (the R570 NVML hang trigger).
      - Default is detected by the GPU probe; unknown when the probe cannot tell.
    type: bool
  mig_enabled:
    description:
      - Whether any GPU on the node has MIG enabled. Default is detected by the GPU probe.
    type: bool
  toolkit_version:
    description:
      - Installed nvidia-container-toolkit version, reported in RV(node). Default is detected
        from packages (C(nvidia-container-toolkit), C(nvidia-container-toolkit-base)). The
        toolkit's own catalog entries are C(container-toolkit) findings of the audit.
      - Package forms are accepted (V(1.14.5-1), V(1:1.17.8-1)); write pre-releases the Debian
        way (V(1.18.0~rc.1)), since text after the last C(-) is read as a package revision.
      - V(none) declares that no toolkit is installed. Set the version when the toolkit runs in a
        container (GPU Operator) and is therefore not a host package.
    type: str
  gpu_names:
    description:
      - GPU model names (e.g. V(NVIDIA GH200 480GB)) for C(gpu_model) conditions.
        Default is detected by the GPU probe; unknown names make C(gpu_model) entries C(at_risk).
    type: list
    elements: str
  catalog_extra:
    description:
      - Site-local catalog entries as catalog v2 documents, each shaped exactly like a file in
        C(catalog/v2/) (keys C(schema_version) (2), C(component), C(version_scheme), C(entries)), one
        document or a list of them. See C(catalog/README.md), section C(catalog_extra).
      - Validated on the controller with the bundled catalog by the same rules (the JSON schema
        C(catalog/schema/catalog-v2.schema.json) when C(jsonschema) is installed, ordered ranges
        inside their branch, CVSS severity, ids unique across the bundled files and the extra
        documents); a bad document fails the task naming the entry and the value.
      - Only the C(defect) entries of C(driver) documents reach the verdict;
        documents of other components are validated and otherwise left to the audit.
      - An id that already exists in the bundled catalog is an error; skip the bundled entry
        with O(skip_entries) and add yours under a new id.
      - Anything else (a bare entry, a list of entries) is refused.
    type: raw
  skip_entries:
    description:
      - Driver defect ids to ignore (e.g. an accepted limitation). Unknown ids are an error.
    type: list
    elements: str
    default: []
  pin_scope:
    description:
      - Which known-bad versions O(state=pinned) pins. V(all) pins every branch in the
        catalog; V(branch) only the node's driver branch.
    type: str
    choices: [all, branch]
    default: all
  pin_packages:
    description:
      - Package-name globs the pins apply to. Pins match the exact known-bad versions, so
        broad globs only block packages at those versions.
    type: list
    elements: str
    default: ["*nvidia*", "cuda-drivers*", "libcuda*"]
  package_manager:
    description:
      - Where O(state=pinned) writes pins. V(auto) picks apt when apt-get exists, else dnf.
    type: str
    choices: [auto, apt, dnf]
    default: auto
  apt_preferences_path:
    description:
      - The apt preferences file this module owns (rewritten as a whole; backed up first).
      - As for O(dnf_conf_path), the file and every directory on its path must be root's and not
        writable by group or others, and a symlink on the path or the file itself must be
        root's (a root-owned sticky directory such as C(/tmp) is accepted on the path, not as
        the file's directory); otherwise O(state=pinned) fails, in check mode too, writing
        nothing and naming the part and the reason. A file that is a symlink owned by root keeps
        its link - its target is written atomically in its own directory, never replaced by a
        regular file.
      - apt ignores files in C(preferences.d) whose name has an extension other than C(.pref).
    type: path
    default: /etc/apt/preferences.d/kubegpu-fleet-nvidia-known-bad.pref
  dnf_conf_path:
    description:
      - dnf configuration file whose C([main]) section receives the C(excludepkgs) entries.
        Other lines and the user's own exclude entries are kept; the file is backed up first.
      - The same ownership, mode and symlink rules as for O(apt_preferences_path) apply.
    type: path
    default: /etc/dnf/dnf.conf
  validate_pins:
    description:
      - Before writing an apt preferences file, check that C(apt-cache policy) parses it.
    type: bool
    default: true
  package_root:
    description:
      - Root of the package databases (C(dpkg-query --admindir <root>/var/lib/dpkg),
        C(rpm --root <root>)); V(/host) when auditing from a container.
    type: path
    default: /
  proc_path:
    description: Mount point of the node's procfs.
    type: path
    default: /proc
  dev_path:
    description: Mount point of the node's /dev, for the GPU probe.
    type: path
    default: /dev
  driver_root:
    description: Root of the driver installation, for the GPU probe (GPU Operator uses C(/run/nvidia/driver)).
    type: path
    default: /
  backend:
    description: GPU probe backend, as for M(kubegpu.fleet.gpu_facts).
    type: str
    choices: [auto, nvml, nvidia_smi]
    default: auto
  timeout:
    description:
      - Seconds the GPU probe may take (it is only run when something is still unknown).
      - A finite number greater than 0 and at most 86400; anything else fails the task.
      - The package query has its own deadline, O(command_timeout).
    type: float
    default: 10.0
  command_timeout:
    description:
      - Seconds the package query (C(dpkg-query) or C(rpm)) and the C(apt-cache policy) validation of
        O(state=pinned) may run. A command that does not finish in time is killed, with anything it
        started; a query is then reported in RV(package_query_error), a validation fails the task.
      - A finite number greater than 0 and at most 86400.
    type: float
    default: 120
  _catalog:
    description:
      - Internal. Set by the action plugin to the bundled catalog v2 driver defects; do not set it.
    type: raw
notes:
  - "apt: C(Pin-Priority: -1) stops apt from choosing a version as install or upgrade
    candidate; an explicit C(apt-get install PACKAGE=VERSION) still overrides pins."
  - "dnf: C(excludepkgs) also stops explicit installs of an excluded version. Verified with dnf 4.14
    (libdnf) against a local repository of epoch-3 NVIDIA-style packages; not run on RHEL itself."
seealso:
  - module: kubegpu.fleet.gpu_facts
"""

EXAMPLES = r"""
- name: Audit the driver against the known-bad catalog
  kubegpu.fleet.driver_guard:
  register: guard

- name: Fail the job (AWX alert) when the node runs a known-bad driver
  kubegpu.fleet.driver_guard:
    state: enforce

- name: Never install known-bad drivers again on this node
  kubegpu.fleet.driver_guard:
    state: pinned

- name: Add a site-specific entry without editing the collection (a catalog v2 document)
  kubegpu.fleet.driver_guard:
    catalog_extra:
      - schema_version: 2
        component: driver
        version_scheme: driver
        entries:
          - id: site-570-86-ecc
            kind: defect
            title: ECC storms seen on our A100 fleet
            severity: high
            affected:
              - branch: "570"
                introduced: "570.86.15"
                last_affected: "570.86.15"
                fixed: "570.172.08"
            conditions:
              gpu_model: A100
            remediation: Upgrade to 570.172.08.
            sources:
              - url: https://wiki.example.com/gpu/ecc-570
                verified: "2026-11-24"

- name: Evaluate a planned version without touching the node
  kubegpu.fleet.driver_guard:
    driver_version: "575.57.08"
    kernel_module_version: "575.57.08"
    mig_mixed: false
    mig_enabled: false
"""

RETURN = r"""
verdict:
  description: C(ok), C(known_bad) (affected and conditions met), C(at_risk) (affected,
    conditions not met today or unknown) or C(absent) (no NVIDIA driver found).
  returned: always
  type: str
  sample: known_bad
branch:
  description: Driver branch evaluated (of the installed userspace driver, else of the loaded module).
  returned: always
  type: int
  sample: 570
driver_version:
  description: Installed userspace driver version evaluated.
  returned: always
  type: str
  sample: 570.148.08
kernel_module_version:
  description: Loaded kernel module version.
  returned: always
  type: str
  sample: 570.148.08
reboot_pending:
  description: True when the installed userspace driver differs from the loaded kernel module;
    null when either is unknown.
  returned: always
  type: bool
matches:
  description: Matching catalog entries, known_bad first, then by severity.
  returned: always
  type: list
  elements: dict
  contains:
    id:
      description: Entry id.
      type: str
      returned: always
    title:
      description: Entry title.
      type: str
      returned: always
    kind:
      description: Always C(defect) (security entries are reported by the audit).
      type: str
      returned: always
    severity:
      description: critical, high, medium, low or info.
      type: str
      returned: always
    status:
      description: known_bad or at_risk.
      type: str
      returned: always
    conditions_met:
      description: Conditions that hold on the node.
      type: list
      elements: str
      returned: always
    conditions_not_met:
      description: MIG state conditions that do not hold today.
      type: list
      elements: str
      returned: always
    conditions_unknown:
      description: Conditions the node could not tell.
      type: list
      elements: str
      returned: always
    matched_versions:
      description: Which versions matched (C(components) userspace and/or kernel_module), and how.
      type: list
      elements: dict
      returned: always
    reasons:
      description: Why the version is in the range (ordering) and how each condition came out.
      type: list
      elements: str
      returned: always
    affected_range:
      description: The catalog range that matched, e.g. C(branch 570, >= 570.124.06, < 570.172.08).
      type: str
      returned: always
    fixed_in_branch:
      description: First fixed release in the matched branch, C(none) (no fix known), or null for branch-less items.
      type: str
      returned: always
    mitigation:
      description: What to do where the upgrade is not allowed (null when the entry has none).
      type: str
      returned: always
    remediation:
      description: What to do.
      type: str
      returned: always
    references:
      description: The entry's source URLs.
      type: list
      elements: str
      returned: always
    source:
      description: bundled or catalog_extra.
      type: str
      returned: always
not_applicable:
  description: Entries whose version range matches but whose condition rules the node out
    (e.g. another GPU model), with the reason and the range.
  returned: always
  type: list
  elements: dict
recommended_version:
  description: Recommended driver version (see the recommendation rule in the description);
    null when nothing matches or no driver version fixes the matches.
  returned: always
  type: str
  sample: 570.172.08
recommendation:
  description: How RV(recommended_version) was chosen.
  returned: when something matches
  type: dict
  contains:
    version:
      description: The recommended version.
      type: str
    branch:
      description: Its branch.
      type: int
    same_branch:
      description: Whether it is in the node's branch.
      type: bool
    same_branch_fix:
      description: First fixed release in the node's branch, or C(none).
      type: str
    reason:
      description: Why.
      type: str
    alternatives:
      description: Fixed releases in other branches (version, branch, reason, caveats).
      type: list
      elements: dict
    caveats:
      description: Entries no driver version fixes that still match the recommended version here.
      type: list
      elements: dict
    not_fixed_by_driver:
      description: Matched entries that a driver version cannot fix.
      type: list
      elements: str
packages:
  description: Installed NVIDIA packages (name, version, arch, status, installed, held).
  returned: always
  type: list
  elements: dict
package_manager:
  description: Package database that was queried (dpkg or rpm), null when none was found.
  returned: always
  type: str
package_query_error:
  description: Why the installed packages could not be listed (no package database under
    O(package_root), query failure); null when they were.
  returned: always
  type: str
compute_utils:
  description: Whether nvidia-compute-utils-<branch> (nvidia-cuda-mps-control) is installed at the
    driver's version (Debian/Ubuntu naming only).
  returned: always
  type: dict
  sample:
    checked: true
    package: nvidia-compute-utils-570
    installed: true
    version: 570.172.08-0ubuntu1
    matches_driver: true
node:
  description: The facts the evaluation used and where each came from.
  returned: always
  type: dict
detection:
  description:
    - Whether the GPU probe was needed and what it reported (C(gpu_facts), C(probe), C(error)).
    - C(warnings) lists node files that could not be read (a FIFO, a directory or a file too large where
      C(<proc_path>/driver/nvidia/version) is expected); each is also issued as a task warning.
  returned: always
  type: dict
catalog:
  description: Catalog summary (driver defects evaluated, bundled and extra counts, skipped ids).
  returned: always
  type: dict
pins:
  description: What O(state=pinned) wrote (manager, path, pinned entries and versions, backup file).
  returned: when state is pinned
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.kubegpu.fleet.plugins.module_utils.driver import pins as driver_pins
from ansible_collections.kubegpu.fleet.plugins.module_utils.audit import probe_options
from ansible_collections.kubegpu.fleet.plugins.module_utils.driver.guard_run import run_driver_guard


def main():
    module = AnsibleModule(
        # the audit's probe registry uses the same options (module_utils/audit/probes.py); the
        # pinning options are driver_guard's own
        argument_spec=probe_options.spec(
            probe_options.DRIVER_GUARD,
            pin_scope=dict(type="str", default="all", choices=["all", "branch"]),
            pin_packages=dict(type="list", elements="str",
                              default=list(driver_pins.DEFAULT_PIN_PACKAGES)),
            package_manager=dict(type="str", default="auto", choices=["auto", "apt", "dnf"]),
            apt_preferences_path=dict(type="path",
                                      default="/etc/apt/preferences.d/kubegpu-fleet-nvidia-known-bad.pref"),
            dnf_conf_path=dict(type="path", default="/etc/dnf/dnf.conf"),
            validate_pins=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    run_driver_guard(module)


if __name__ == "__main__":
    main()
