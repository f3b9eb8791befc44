#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: kubelet_facts
short_description: Gather kubelet process, flag, configuration and memory-reservation facts
version_added: 0.1.0
description:
  - Finds the running kubelet the way the node knows it, never by its name alone (any user can
    start a program named C(kubelet)) - the main PID of the kubelet systemd unit
    (O(journal_unit), C(systemctl show -p MainPID), with the host's C(/proc) only), else a
    process named C(kubelet) in that unit's system cgroup, else the one process named
    C(kubelet) that runs as root (real and effective uid 0) from an executable owned by root
    and not writable by group or others. Processes named C(kubelet) that fail these tests are
    reported in RV(ansible_facts.kubelet.impostors) with a warning and never used; when
    several root-owned ones remain and systemd cannot tell, none is used.
  - Parses the kubelet's command line the way the kubelet's flag library does
    (C(--flag=value), C(--flag value), bare booleans, repeated flags), robust to processes
    vanishing mid-scan.
  - Reads the KubeletConfiguration file (C(--config), else C(/var/lib/kubelet/config.yaml), or
    O(config_path)) as JSON or YAML (PyYAML's safe loader; anchors, aliases and nesting deeper than 64
    levels are refused). C(--config-dir) drop-ins
    (C(*.conf), name order) are merged over it like the kubelet does.
  - Reports the effective values the kubelet uses, with the kubelet's precedence (defaults <
    config file < drop-ins < command-line flags) - CPU manager policy, cgroup driver, root dir,
    device-manager checkpoint path, memory reservations, hard eviction thresholds, node
    allocatable enforcement - plus the node's memory and the GKE reserved-memory recommendation.
  - A missing, unreadable or malformed config file does not fail the task; it is reported in
    RV(ansible_facts.kubelet.config_error) so an audit keeps going. So are bad quantities
    (RV(ansible_facts.kubelet.errors)).
  - No binary is ever executed. The version comes from the package database (C(dpkg-query),
    else C(rpm), for O(kubelet_package), each with a deadline of O(timeout)), else from
    O(node_version) (the Node's C(status.nodeInfo.kubeletVersion)); failing that it is null
    with RV(ansible_facts.kubelet.version_error) set. RV(ansible_facts.kubelet.version_source)
    says which.
  - Every file is read without blocking and with a size bound (a FIFO, socket, device,
    directory or symlink loop where a file is expected is reported, not waited on); YAML
    anchors and aliases are refused (an alias bomb costs nothing); every command has a
    deadline.
  - The kubelet command line in C(/proc) is authoritative; systemd drop-ins and
    C(KUBELET_EXTRA_ARGS) environment files are not read.
author:
  - kubegpu.fleet maintainers (@kubegpu)
options:
  proc_path:
    description:
      - Where the node's procfs is mounted. Set it to e.g. C(/host/proc) when the audit runs in
        a container that mounts the host; paths the kubelet names (config file, drop-ins) are
        then also tried through C(<proc_path>/<pid>/root).
    type: path
    default: /proc
  config_path:
    description:
      - KubeletConfiguration file to read, overriding the kubelet's C(--config) flag and the
        default C(/var/lib/kubelet/config.yaml). Must be an absolute path. It is read as given.
    type: path
  scan_journal:
    description:
      - Read the kubelet's journal (C(journalctl -u <journal_unit> --since <journal_since>)) for
        device-plugin calls that never returned - the kubelet logs C(Issuing a
        GetPreferredAllocation call for container) and, once the plugin answers, C(Making
        allocation request for device plugin) (verbosity 4 or more). Reported in
        RV(ansible_facts.kubelet.allocation_log). No journal is not an error.
    type: bool
    default: true
  journal_unit:
    description:
      - systemd unit of the kubelet - its main PID is the kubelet, and its journal is read.
      - A unit name (letters, digits, C(:_.-@\\)); globs and options are refused.
    type: str
    default: kubelet
  journal_since:
    description: How far back to read the journal (C(journalctl --since) syntax).
    type: str
    default: -2h
  kubelet_package:
    description: Package that installs the kubelet, asked for the version.
    type: str
    default: kubelet
  node_version:
    description:
      - The Node's C(status.nodeInfo.kubeletVersion) (for example from the API on the
        controller), used for the version when the package database has none.
    type: str
  timeout:
    description:
      - Deadline in seconds for each external command (C(systemctl), C(dpkg-query)/C(rpm),
        C(journalctl)); a command past it is killed with its descendants.
    type: float
    default: 30
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.facts
  - kubegpu.fleet.action_group.node
attributes:
  check_mode:
    support: full
    details: Read only; check mode returns the same facts.
  diff_mode:
    support: none
    details: Changes nothing, so there is nothing to diff.
  facts:
    support: full
  platform:
    platforms: posix
    details: Linux nodes (reads procfs).
requirements:
  - PyYAML on the managed node (package C(python3-yaml); cloud-init depends on it, so cloud
    images have it). Without it the task fails naming the package to install.
notes:
  - Runs on Python 3.8 and later; PyYAML is optional on the node.
  - Kubernetes 1.31+ can take the cgroup driver from the container runtime
    (KubeletCgroupDriverFromCRI); RV(ansible_facts.kubelet.cgroup_driver) is the configured value.
seealso:
  - name: Reserve compute resources for system daemons
    description: Node allocatable, kube-reserved, system-reserved and eviction thresholds.
    link: https://kubernetes.io/docs/tasks/administer-cluster/reserve-compute-resources/
  - name: Set kubelet parameters via a configuration file
    description: KubeletConfiguration files, drop-in directories and evictionHard defaults.
    link: https://kubernetes.io/docs/tasks/administer-cluster/kubelet-config-file/
"""

EXAMPLES = r"""
- name: Gather kubelet facts
  kubegpu.fleet.kubelet_facts:

- name: Audit a node from a container that mounts the host at /host
  kubegpu.fleet.kubelet_facts:
    proc_path: /host/proc

- name: Read a config file the kubelet is not started with (e.g. EKS)
  kubegpu.fleet.kubelet_facts:
    config_path: /etc/kubernetes/kubelet/kubelet-config.json

- name: Warn when reservations are below the GKE ladder
  ansible.builtin.debug:
    msg: >-
      {{ inventory_hostname }} reserves {{ ansible_facts.kubelet.memory.reserved_total_bytes }} bytes,
      recommended {{ ansible_facts.kubelet.memory.recommended_reserved_bytes }}
  when: ansible_facts.kubelet.memory.reserved_shortfall_bytes | default(0, true) > 0
"""

RETURN = r"""
ansible_facts:
  description: Facts added under C(kubelet).
  returned: always
  type: dict
  contains:
    kubelet:
      description: kubelet facts.
      returned: always
      type: dict
      contains:
        running:
          description: Whether a kubelet process was found.
          type: bool
          returned: always
        pid:
          description: PID of the identified kubelet, or null.
          type: int
          returned: always
        pids:
          description: PIDs of every process named C(kubelet), oldest first (impostors too).
          type: list
          elements: int
          returned: always
        identified_by:
          description: How the kubelet was identified - V(systemd) (the unit's MainPID),
            V(cgroup) (in the unit's system cgroup, as root), V(root-owned) (the one root
            process from a root-owned executable), or null.
          type: str
          returned: always
        unit:
          description: The kubelet systemd unit asked (O(journal_unit)).
          type: str
          returned: always
        impostors:
          description: Processes named C(kubelet) that are not the kubelet, and why.
          type: list
          elements: dict
          returned: always
          contains:
            pid:
              description: Their PID.
              type: int
            uid:
              description: Their real uid.
              type: int
            exe:
              description: Their executable.
              type: str
            why:
              description: Why they were rejected.
              type: str
        cmdline:
          description: The kubelet's argv (program first), from C(<proc_path>/<pid>/cmdline).
          type: list
          elements: str
          returned: always
        flags:
          description:
            - Command-line flags, names without dashes (C(_) normalised to C(-)). The last
              occurrence wins; bare flags are V(true); boolean flags given a value are booleans.
          type: dict
          returned: always
          sample: {"config": "/var/lib/kubelet/config.yaml", "v": "2", "fail-swap-on": false}
        flags_repeated:
          description: Every value of flags given more than once, in order.
          type: dict
          returned: always
        args:
          description: Arguments that are not flags (the kubelet accepts none).
          type: list
          elements: str
          returned: always
        exe:
          description: Binary the process runs (target of C(<proc_path>/<pid>/exe)).
          type: str
          returned: always
        exe_deleted:
          description: The running binary was replaced or removed on disk (kubelet upgraded
            but not restarted).
          type: bool
          returned: always
        version:
          description: kubelet version, e.g. V(v1.31.4), or null.
          type: str
          returned: always
        version_source:
          description: C(package:<name> <version> (dpkg|rpm)) (the package database),
            C(node:status.nodeInfo.kubeletVersion) (O(node_version)), or null.
          type: str
          returned: always
        version_error:
          description: Why the version is null.
          type: str
          returned: always
        config_path:
          description: KubeletConfiguration path as the kubelet sees it.
          type: str
          returned: always
          sample: /var/lib/kubelet/config.yaml
        config_source:
          description: Where RV(ansible_facts.kubelet.config_path) came from.
          type: str
          returned: always
          choices: [option, flag, default]
        config_read_path:
          description: Path the file was actually read from (may go through
            C(<proc_path>/<pid>/root)), or null.
          type: str
          returned: always
        config_loaded_by_kubelet:
          description: V(true) when the running kubelet was started with this file,
            V(false) when it runs with another one or none (then the file does not count
            towards the effective values unless O(config_path) named it), null when no kubelet
            runs.
          type: bool
          returned: always
        config_parser:
          description: V(json) or V(pyyaml), what read the file; null when it was not read.
          type: str
          returned: always
        config:
          description: The parsed KubeletConfiguration file (empty when it could not be read).
          type: dict
          returned: always
        config_error:
          description: Why the config file could not be used (missing, unreadable, malformed,
            not a KubeletConfiguration), or null.
          type: str
          returned: always
        config_warnings:
          description: Oddities that do not stop the config from being used.
          type: list
          elements: str
          returned: always
        config_dir:
          description: The kubelet's C(--config-dir), or null.
          type: str
          returned: always
        config_dropins:
          description: Drop-in files merged over the config file, in order.
          type: list
          elements: str
          returned: always
        effective_config:
          description: Config file plus drop-ins as the kubelet merges them (before flags).
          type: dict
          returned: always
        cpu_manager_policy:
          description: Effective CPU manager policy (flag > config > V(none)).
          type: str
          returned: always
        cgroup_driver:
          description: Effective cgroup driver (flag > config > V(cgroupfs)).
          type: str
          returned: always
        root_dir:
          description: kubelet root directory (C(--root-dir), default V(/var/lib/kubelet)).
          type: str
          returned: always
        checkpoint_path:
          description: Device-manager checkpoint,
            C(<root_dir>/device-plugins/kubelet_internal_checkpoint).
          type: str
          returned: always
        system_reserved:
          description: Effective systemReserved map (all resources), or null.
          type: dict
          returned: always
        kube_reserved:
          description: Effective kubeReserved map (all resources), or null.
          type: dict
          returned: always
        sources:
          description: For each effective setting, V(flag), V(config) or V(default).
          type: dict
          returned: always
        node_memory_bytes:
          description: MemTotal from C(<proc_path>/meminfo), in bytes, or null.
          type: int
          returned: always
        allocation_log:
          description:
            - What the kubelet's journal says about device-plugin calls (see O(scan_journal)).
              C(unanswered) lists GetPreferredAllocation calls after which no allocation request
              was made (C(pod), C(container), C(time), C(age_seconds)); with a hung plugin the
              kubelet blocks there and admits no pod. C(source) is V(journal) or null, C(error) says why not.
          type: dict
          returned: always
          sample: {"source": "journal", "unit": "kubelet", "since": "-2h", "error": null,
                   "unanswered": [{"pod": "ml/train-late", "container": "main", "time": 1795323600.5, "age_seconds": 420}]}
        memory:
          description: Memory reservations and hard eviction, in bytes where they are known.
          type: dict
          returned: always
          contains:
            system_reserved:
              description: C(raw) quantity, C(bytes), C(source) (and C(error) for a bad quantity).
              type: dict
              returned: always
            kube_reserved:
              description: C(raw) quantity, C(bytes), C(source) (and C(error) for a bad quantity).
              type: dict
              returned: always
            eviction_hard:
              description:
                - C(configured) is the map as configured (null when unset), C(effective) the map
                  the kubelet uses, C(source), C(merge_defaults) (mergeDefaultEvictionSettings),
                  and C(memory_available) with C(raw), C(bytes) and C(percent) (a percentage is
                  converted with the node's memory).
              type: dict
              returned: always
            eviction_hard_partial:
              description: evictionHard is set but lacks some of the four default keys, which
                the kubelet then leaves unset (zero) instead of defaulting.
              type: bool
              returned: always
            eviction_hard_missing_defaults:
              description: The default evictionHard keys a configured evictionHard lacks.
              type: list
              elements: str
              returned: always
            enforce_node_allocatable:
              description: Effective enforceNodeAllocatable (default V([pods])).
              type: list
              elements: str
              returned: always
            reserved_total_bytes:
              description: systemReserved + kubeReserved memory.
              type: int
              returned: always
            eviction_bytes:
              description: Hard eviction threshold for memory.available, in bytes, or null.
              type: int
              returned: always
            allocatable_bytes:
              description: Node memory minus reservations and the hard eviction threshold.
              type: int
              returned: always
            recommended_reserved_bytes:
              description: GKE ladder for this node's memory (25% of the first 4 GiB, 20% of the
                next 4, 10% of the next 8, 6% of the next 112, 2% above 128 GiB).
              type: int
              returned: always
            recommended_eviction_bytes:
              description: Hard eviction threshold GKE adds on top (100 MiB).
              type: int
              returned: always
            reserved_shortfall_bytes:
              description: How far RV(ansible_facts.kubelet.memory.reserved_total_bytes) is below the
                recommendation (0 when it is not), or null.
              type: int
              returned: always
        errors:
          description: Problems found while gathering (bad quantities or flag values, several
            kubelets, unreadable drop-ins). The task does not fail for them.
          type: list
          elements: str
          returned: always
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.kubegpu.fleet.plugins.module_utils.audit import probe_options
from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet.config_yaml import require_yaml
from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet.facts_run import kubelet_facts_run
from ansible_collections.kubegpu.fleet.plugins.module_utils._common.node_probes import run_probe_module


def main():
    module = AnsibleModule(
        # the audit's probe registry uses the same options (module_utils/audit/probes.py)
        argument_spec=probe_options.spec(probe_options.KUBELET_FACTS),
        supports_check_mode=True,
    )
    require_yaml(module, "to read the KubeletConfiguration and its drop-ins")
    run_probe_module(module, kubelet_facts_run, module.params, module.run_command,
                     module.get_bin_path, module.warn)


if __name__ == "__main__":
    main()
