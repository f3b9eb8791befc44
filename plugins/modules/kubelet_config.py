#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: kubelet_config
short_description: Edit a KubeletConfiguration file, keeping every other key
version_added: 0.1.0
description:
  - Sets and merges keys of a kubelet configuration file (C(KubeletConfiguration), YAML or
    JSON). O(settings) is merged into the file as an RFC 7386 merge patch; a V(null) value removes a
    key and a list replaces the list. Every other
    key keeps its value and place; new keys are added at the end of their mapping.
  - Optionally sizes the memory reservations from the node's memory (O(memory_reservation),
    the GKE ladder by default) and writes C(evictionHard) completely, and sets the CPU manager
    policy (O(cpu_manager_policy)) with the reserved CPUs the C(static) policy needs.
  - The file is read with PyYAML's safe loader (C(json) for a JSON file) and written with
    PyYAML's block-style dumper, which quotes what needs quoting; the new text is read back and
    must give exactly the new settings before anything is written. Comments inside the file
    are not kept (the leading comment block and C(---) are); the backup keeps the original.
  - The file is rewritten only when its content changes semantically (types count, key order
    and formatting do not); then it is first copied to a 0600 backup beside it and replaced
    atomically, keeping its owner and mode.
  - kubelet command-line flags win over the config file (C(--kube-reserved),
    C(--system-reserved), C(--eviction-hard), C(--cpu-manager-policy), ...). The module looks
    for flags overriding the keys it sets on the running kubelet's command line, in the
    environment files the kubelet unit reads (kubeadm's C(KUBELET_KUBEADM_ARGS),
    C(KUBELET_EXTRA_ARGS)), in the unit's drop-ins and in C(--config-dir) drop-ins, and fails
    naming them (O(flag_conflicts=fail)) rather than write settings the kubelet would ignore.
  - The kubelet reads its configuration only when it starts; restart it after a change
    (RV(restart_required)). The M(kubegpu.fleet.kubelet_config) module never restarts it.
author:
  - kubegpu.fleet maintainers (@kubegpu)
options:
  path:
    description:
      - The KubeletConfiguration file.
      - When omitted, the C(--config) file of the running kubelet (identified as
        M(kubegpu.fleet.kubelet_facts) does, see O(kubelet_unit)), else
        C(/var/lib/kubelet/config.yaml).
      - The file and every directory on its path must be owned by root and not writable by
        group or others (a root-owned sticky directory such as C(/tmp) is accepted on the path,
        not as the file's directory), and a symlink on the path or the file itself must be
        root's; the module refuses to edit it otherwise (in check mode too), changes nothing,
        and says which part is wrong and why. The same holds for the flag files
        O(flag_conflicts=move) edits.
      - A file that is a symlink owned by root keeps its link - the link's target is rewritten
        atomically in the target's own directory (where the backup goes too). The link is never
        replaced by a regular file.
    type: path
  settings:
    description:
      - Keys to set, as a (nested) mapping deep-merged into the file. Mappings merge key by
        key; lists and scalars replace; V(null) removes the key.
      - When the result touches C(evictionHard), the missing kubelet defaults are added (see
        O(complete_eviction_hard)).
      - Values are converted to the types of the KubeletConfiguration v1beta1 fields, so
        C(settings=maxPods=110 failSwapOn=false) writes the integer C(110) and the boolean
        C(false); integers (int32/int64 ranges), booleans and C(memoryThrottlingFactor) are
        converted from strings, durations (C(syncFrequency)...) must be duration strings, and
        string fields, maps of strings (C(kubeReserved)...) and C(featureGates) (booleans) are
        converted too. A value that does not convert fails the task naming the key.
    type: dict
    default: {}
  memory_reservation:
    description:
      - Size C(kubeReserved.memory) and C(systemReserved.memory) and write a complete
        C(evictionHard). The other keys of those sections (C(cpu), C(ephemeral-storage)) are
        kept. Applied over O(settings).
    type: dict
    suboptions:
      kube_reserved:
        description:
          - V(auto) for the GKE ladder (25% of the first 4 GiB, 20% of the next 4, 10% of the
            next 8, 6% of the next 112, 2% above 128 GiB; written in whole MiB, rounded up),
            or a quantity such as V(6Gi).
        type: str
        default: auto
      system_reserved:
        description:
          - V(auto) leaves C(systemReserved.memory) as it is (the ladder covers system
            daemons, as on GKE), or a quantity.
        type: str
        default: auto
      eviction_hard:
        description:
          - Hard eviction thresholds merged over the current ones and the four kubelet
            defaults (C(memory.available) 100Mi, C(nodefs.available) 10%,
            C(imagefs.available) 15%, C(nodefs.inodesFree) 5%). V(null) drops a threshold.
        type: dict
        default: {}
      allow_lower:
        description:
          - Lower an existing reservation that is larger than the target. By default a larger
            value is kept.
        type: bool
        default: false
      node_memory_bytes:
        description:
          - Node memory in bytes; default C(MemTotal) from C(<proc_path>/meminfo).
        type: int
  cpu_manager_policy:
    description:
      - Set C(cpuManagerPolicy). With V(static), C(kubeReserved.cpu) is set to
        O(static_reserved_cpu) when nothing reserves CPUs (the kubelet refuses to start the
        static policy without). Changing the policy also needs the kubelet's
        C(cpu_manager_state) removed with the node drained (the P(kubegpu.fleet.kubelet#role)
        role does that).
    type: str
    choices: [none, static]
  static_reserved_cpu:
    description: CPU quantity reserved for the static policy when nothing reserves CPUs yet.
    type: str
    default: "1"
  complete_eviction_hard:
    description:
      - When C(evictionHard) is set, add the kubelet's default thresholds that it lacks;
        setting any evictionHard key makes the kubelet drop the unset defaults.
    type: bool
    default: true
  flag_conflicts:
    description:
      - What to do about kubelet flags that override keys being set.
      - V(fail) fails and names them. V(ignore) writes the file anyway and warns.
      - V(move) moves them into the config - their values become config values (map flags
        replace the whole mapping, as the kubelet does), O(settings) apply over them - and
        removes them from the environment files (O(flag_files) and the unit's
        C(EnvironmentFile=)s), each backed up first. Flags set elsewhere (unit
        C(Environment=)/C(ExecStart=), C(--config-dir) drop-ins, or only on the running
        command line) cannot be moved and still fail.
    type: str
    choices: [fail, move, ignore]
    default: fail
  flag_files:
    description:
      - Environment files whose variables end up on the kubelet command line, besides those
        the unit drop-ins name with C(EnvironmentFile=). Missing files are skipped.
    type: list
    elements: path
    default: [/var/lib/kubelet/kubeadm-flags.env, /etc/default/kubelet, /etc/sysconfig/kubelet]
  unit_dropin_dirs:
    description: Drop-in directories of the kubelet unit (C(*.conf) files are read).
    type: list
    elements: path
    default:
      - /etc/systemd/system/kubelet.service.d
      - /usr/lib/systemd/system/kubelet.service.d
      - /lib/systemd/system/kubelet.service.d
  proc_path:
    description: Where the node's procfs is mounted (running kubelet, C(meminfo)).
    type: path
    default: /proc
  kubelet_unit:
    description:
      - systemd unit of the kubelet. Its main PID is the kubelet whose C(--config) is the
        default O(path) and whose flags are checked; without systemd, a process named
        C(kubelet) in that unit's cgroup, else the one root process named C(kubelet) running a
        root-owned executable that is not group/world-writable. Processes merely named
        C(kubelet) are ignored with a warning (see M(kubegpu.fleet.kubelet_facts)).
    type: str
    default: kubelet
  backup:
    description: Copy every file to C(<file>.<timestamp>.<ns>.bak) (mode 0600) before rewriting it.
    type: bool
    default: true
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - kubegpu.fleet.action_group.node
attributes:
  check_mode:
    support: full
    details: Computes and reports the new content, conflicts and diff; writes nothing.
  diff_mode:
    support: full
    details: Before/after text of the config file (and of environment files a V(move) edits).
  platform:
    platforms: posix
    support: full
    details: Linux nodes; reads procfs for the running kubelet and the node memory.
requirements:
  - PyYAML on the managed node (package C(python3-yaml); cloud-init depends on it, so cloud
    images have it). Without it the task fails naming the package to install.
notes:
  - Runs on Python 3.8 and later.
  - Files are read without blocking and with a size bound (a FIFO, socket, directory or
    symlink loop is refused, as is text that is not UTF-8); YAML anchors and aliases are
    refused (a rewrite would write their expansion out), and so is nesting deeper than 64
    levels.
  - A failed write (disk full...) fails the task, reported as not changed when no file was
    rewritten; the original file is intact and no temp file or empty backup is left.
seealso:
  - module: kubegpu.fleet.kubelet_facts
  - name: Reserve compute resources for system daemons
    description: Node allocatable, kube-reserved, system-reserved and eviction thresholds.
    link: https://kubernetes.io/docs/tasks/administer-cluster/reserve-compute-resources/
"""

EXAMPLES = r"""
- name: Reserve memory by the GKE ladder, complete evictionHard
  kubegpu.fleet.kubelet_config:
    memory_reservation: {}
  register: kubelet_cfg

- name: Restart kubelet when the file changed
  ansible.builtin.systemd_service:
    name: kubelet
    state: restarted
  when: kubelet_cfg.restart_required

- name: Set keys, remove one, with a larger reservation and a softer memory threshold
  kubegpu.fleet.kubelet_config:
    path: /var/lib/kubelet/config.yaml
    settings:
      maxPods: 64
      featureGates: {KubeletPodResourcesGet: true}
      serializeImagePulls: null
    memory_reservation:
      kube_reserved: 8Gi
      eviction_hard: {memory.available: 500Mi}

- name: Static CPU manager policy, moving a --cpu-manager-policy flag out of KUBELET_EXTRA_ARGS
  kubegpu.fleet.kubelet_config:
    cpu_manager_policy: static
    flag_conflicts: move
"""

RETURN = r"""
path:
  description: The KubeletConfiguration file.
  returned: always
  type: str
  sample: /var/lib/kubelet/config.yaml
format:
  description: C(yaml) or C(json) (the file is written back in its own format).
  returned: always
  type: str
  sample: yaml
parser:
  description: What read the file, C(pyyaml) or C(json).
  returned: always
  type: str
  sample: pyyaml
changed_keys:
  description: Keys whose values change (added, removed or different), dotted; keys with dots
    in brackets.
  returned: always
  type: list
  elements: str
  sample: ["kubeReserved.memory", "evictionHard[\"nodefs.available\"]"]
backup_file:
  description: Backup of the config file made before rewriting it; null when none was made.
  returned: always
  type: str
  sample: /var/lib/kubelet/config.yaml.20250101T000000.000000001.bak
config:
  description: The configuration as it is after the task (as it would be, in check mode).
  returned: always
  type: dict
restart_required:
  description: Whether the kubelet must be restarted to apply the change.
  returned: always
  type: bool
flag_conflicts:
  description: Flags that override keys being set.
  returned: always
  type: list
  elements: dict
  contains:
    flag:
      description: The flag, e.g. C(--kube-reserved).
      type: str
    key:
      description: The config key it overrides.
      type: str
    value:
      description: Its value.
      type: str
    source:
      description: C(process) (running command line), C(file) (environment file), C(unit)
        (unit drop-in), C(config-dir) (a --config-dir drop-in setting the key).
      type: str
    where:
      description: The pid, file or drop-in.
      type: str
flag_files_changed:
  description: Environment files a O(flag_conflicts=move) rewrote.
  returned: always
  type: list
  elements: dict
  contains:
    path:
      description: The file.
      type: str
    backup_file:
      description: Its backup (null without O(backup)).
      type: str
    removed:
      description: The flag words removed, as C(VARIABLE --flag=value).
      type: list
      elements: str
kubelet:
  description: The kubelet whose command line was used, and how it was identified.
  returned: always
  type: dict
  contains:
    pid:
      description: Its PID, or null when no kubelet was identified.
      type: int
    identified_by:
      description: V(systemd), V(cgroup), V(root-owned) or null (see O(kubelet_unit)).
      type: str
    impostors:
      description: Processes named C(kubelet) that were ignored, with C(pid), C(uid), C(exe), C(why).
      type: list
      elements: dict
memory_reservation:
  description: The sizing decision when O(memory_reservation) is given, else null.
  returned: always
  type: dict
  sample:
    node_memory_bytes: 66571993088
    gke_reserved_bytes: 5755256176
    kube_reserved: {bytes: 5755633664, value: 5489Mi, action: set}
    system_reserved: {bytes: null, value: null, action: left}
    eviction_hard: {memory.available: 100Mi, nodefs.available: 10%, imagefs.available: 15%,
                    nodefs.inodesFree: 5%}
    reserved_total_bytes: 5755633664
    allocatable_bytes: 60711501824
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet.config_run import (
    run_kubelet_config,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path"),
            settings=dict(type="dict", default={}),
            memory_reservation=dict(type="dict", options=dict(
                kube_reserved=dict(type="str", default="auto"),
                system_reserved=dict(type="str", default="auto"),
                eviction_hard=dict(type="dict", default={}),
                allow_lower=dict(type="bool", default=False),
                node_memory_bytes=dict(type="int"),
            )),
            cpu_manager_policy=dict(type="str", choices=["none", "static"]),
            static_reserved_cpu=dict(type="str", default="1"),
            complete_eviction_hard=dict(type="bool", default=True),
            flag_conflicts=dict(type="str", choices=["fail", "move", "ignore"], default="fail"),
            flag_files=dict(type="list", elements="path",
                            default=["/var/lib/kubelet/kubeadm-flags.env", "/etc/default/kubelet",
                                     "/etc/sysconfig/kubelet"]),
            unit_dropin_dirs=dict(type="list", elements="path",
                                  default=["/etc/systemd/system/kubelet.service.d",
                                           "/usr/lib/systemd/system/kubelet.service.d",
                                           "/lib/systemd/system/kubelet.service.d"]),
            proc_path=dict(type="path", default="/proc"),
            kubelet_unit=dict(type="str", default="kubelet"),
            backup=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    run_kubelet_config(module)


if __name__ == "__main__":
    main()
