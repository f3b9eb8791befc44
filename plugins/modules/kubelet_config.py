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
    JSON). O(settings) is deep-merged into the file; a V(null) value removes a key. Every other
    key keeps its value and place; new keys are added at the end of their mapping.
  - Optionally sizes the memory reservations from the node's memory (O(memory_reservation),
    the GKE ladder by default) and writes C(evictionHard) completely, and sets the CPU manager
    policy (O(cpu_manager_policy)) with the reserved CPUs the C(static) policy needs.
  - The file is read with PyYAML when the node has it, else with the collection's parser for
    the YAML subset kubelet configs use, and written with a block-style emitter that quotes
    what needs quoting; the new text is read back (by both parsers when PyYAML is there) and
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
      - The file and its directory must be owned by root and not writable by group or others
        (nor a symlink another user owns); the module refuses to edit it otherwise and says
        why.
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
  - ansible.builtin.action_common_attributes.actiongroups
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
  action_group:
    membership:
      - kubegpu.fleet.node
notes:
  - Runs on Python 3.8 and later; PyYAML is optional on the node (RV(parser) tells which
    parser read the file).
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
  description: What read the file, C(pyyaml), C(fallback) (no PyYAML on the node) or C(json).
  returned: always
  type: str
  sample: fallback
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

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kubegpu.fleet.plugins.module_utils import kubelet_yaml, safe_io
from ansible_collections.kubegpu.fleet.plugins.module_utils.fileutil import (
    atomic_write,
    backup_file,
    unsafe_target,
)
from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet import (
    CONFIG_MAX_BYTES,
    DEFAULT_CONFIG_PATH,
    flag_value,
    identify_kubelet,
    kubelet_view_paths,
    load_dropins,
    parse_flags,
    read_meminfo_total,
)
from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet_config import (
    SettingsError,
    changed_paths,
    check_round_trip,
    coerce_settings,
    complete_eviction_hard,
    deep_merge,
    flag_values,
    flags_in_words,
    format_path,
    memory_reservation_settings,
    parse_env_text,
    parse_unit_text,
    remove_flags_from_env_text,
    render,
    replace_maps,
    same,
    split_unit_words,
    static_cpu_settings,
)


IDENTIFY_TIMEOUT = 10.0


def _read_text(module, path, what, result=None):
    """The UTF-8 text of ``path``: bounded, never blocks (FIFO, socket, device, directory and
    symlink loops are refused); fails the module naming the file otherwise."""
    result = result or {}
    try:
        data = safe_io.read_bytes(path, CONFIG_MAX_BYTES)
    except safe_io.UnsafeInput as e:
        module.fail_json(msg="cannot read %s: %s; nothing was changed" % (what, e), **result)
    except (IOError, OSError) as e:
        module.fail_json(msg="cannot read %s %s: %s" % (what, path, e.strerror or e), **result)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        module.fail_json(msg="%s %s is not UTF-8 text (byte %d); nothing was changed"
                             % (what, path, e.start), **result)


def _kubelet(module):
    """The identified kubelet (never a process merely named kubelet) and its flag pairs."""
    p = module.params
    systemctl = module.get_bin_path("systemctl")
    found = identify_kubelet(p["proc_path"], p["kubelet_unit"], systemctl, IDENTIFY_TIMEOUT)
    for imp in found["rejected"]:
        module.warn("process %s is named kubelet but is not the kubelet (uid %s, executable %s): "
                    "%s; its flags are ignored" % (imp["pid"], imp["uid"], imp["exe"],
                                                   imp["why"]))
    for err in found["errors"]:
        module.warn(err)
    info = {"pid": found["proc"]["pid"] if found["proc"] else None,
            "identified_by": found["method"], "impostors": found["rejected"]}
    if found["proc"] is None:
        return None, [], info
    return found["proc"], parse_flags(found["proc"]["argv"][1:])[0], info


def _validate(module):
    """Option values that name a unit or a path: refuse globs, options and odd paths."""
    p = module.params
    try:
        safe_io.check_unit_name(p["kubelet_unit"], "kubelet_unit")
        safe_io.check_path(p["proc_path"], "proc_path")
        if p["path"] is not None:
            safe_io.check_path(p["path"], "path")
        for i, path in enumerate(p["flag_files"]):
            safe_io.check_path(path, "flag_files[%d]" % i)
        for i, path in enumerate(p["unit_dropin_dirs"]):
            safe_io.check_path(path, "unit_dropin_dirs[%d]" % i)
        p["settings"] = coerce_settings(p["settings"] or {})
    except (safe_io.UnsafeInput, SettingsError) as e:
        module.fail_json(msg=str(e))


class FlagSources(object):
    """Where kubelet flags come from: the running command line, unit drop-ins, env files."""

    def __init__(self, module, proc, pairs):
        p = module.params
        self.module = module
        self.proc = proc
        self.pairs = pairs
        self.units = []      # (path, parsed)
        self.env_files = []  # (path, text)
        files = list(p["flag_files"])
        for directory in p["unit_dropin_dirs"]:
            try:
                names = sorted(n for n in os.listdir(directory) if n.endswith(".conf"))
            except OSError:
                continue
            for name in names:
                path = os.path.join(directory, name)
                parsed = parse_unit_text(_read_text(module, path, "kubelet unit drop-in"))
                self.units.append((path, parsed))
                files.extend(parsed["environment_files"])
        seen = set()
        for path in files:
            if path in seen or not os.path.lexists(path):
                continue
            seen.add(path)
            self.env_files.append((path, _read_text(module, path, "kubelet flag file")))

    def conflicts(self, keys):
        out = []
        if self.proc is not None:
            words = []
            for name, value in self.pairs:
                words.append("--%s" % name if value is True else "--%s=%s" % (name, value))
            out += flags_in_words(words, keys, "process", "pid %d" % self.proc["pid"])
        for path, parsed in self.units:
            for name, value in parsed["environment"]:
                out += flags_in_words(split_unit_words(value), keys, "unit",
                                      "%s (Environment=%s)" % (path, name))
            for command in parsed["exec_start"]:
                words = [w for w in split_unit_words(command) if not w.startswith("$")]
                out += flags_in_words(words, keys, "unit", "%s (ExecStart=)" % path)
        for path, text in self.env_files:
            for _index, name, value, _quote in parse_env_text(text):
                out += flags_in_words(split_unit_words(value), keys, "file",
                                      "%s (%s)" % (path, name))
        if self.proc is not None:
            config_dir = flag_value(self.pairs, "config-dir")
            if config_dir not in (None, True, ""):
                loaded, _errors = load_dropins(config_dir, self.module.params["proc_path"],
                                               self.proc["pid"])
                for dropin, data in loaded:
                    for key in keys:
                        if isinstance(data, dict) and key in data:
                            out.append({"flag": "(drop-in)", "key": key,
                                        "value": str(data[key]), "source": "config-dir",
                                        "where": dropin})
        return out


def _plan(module, config, base, node_memory):
    """Final settings over ``base`` (the config, with moved flag values), and the report."""
    p = module.params
    settings = p["settings"] or {}
    report = None
    work = deep_merge(base, settings)
    extra = {}
    if p["memory_reservation"] is not None:
        mr = p["memory_reservation"]
        if node_memory is None:
            node_memory = mr.get("node_memory_bytes") or read_meminfo_total(p["proc_path"])
            if not node_memory:
                module.fail_json(msg="cannot read the node memory (MemTotal) from %s/meminfo; "
                                     "set memory_reservation.node_memory_bytes"
                                 % p["proc_path"])
        extra, report = memory_reservation_settings(
            work, node_memory, kube_reserved=mr["kube_reserved"],
            system_reserved=mr["system_reserved"], eviction_hard=mr["eviction_hard"],
            allow_lower=mr["allow_lower"])
        work = deep_merge(work, extra)
    if p["cpu_manager_policy"] is not None:
        cpu = static_cpu_settings(work, p["cpu_manager_policy"], p["static_reserved_cpu"])
        extra = deep_merge(extra, cpu)
        work = deep_merge(work, cpu)
    if p["complete_eviction_hard"] and isinstance(work.get("evictionHard"), dict) \
            and work.get("mergeDefaultEvictionSettings") is not True \
            and ("evictionHard" in settings or "evictionHard" in extra):
        work["evictionHard"] = complete_eviction_hard(work["evictionHard"])
    keys = list(settings) + list(extra)
    if p["memory_reservation"] is not None:
        keys += ["kubeReserved", "systemReserved", "evictionHard"]
    if p["cpu_manager_policy"] is not None:
        keys += ["cpuManagerPolicy"]
    return work, sorted(set(keys)), report, node_memory


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
    p = module.params
    _validate(module)
    if not os.path.isdir(p["proc_path"]):
        module.fail_json(msg="proc_path %r is not a directory" % p["proc_path"])
    mr = p["memory_reservation"]
    if mr is not None and mr["node_memory_bytes"] is not None and mr["node_memory_bytes"] <= 0:
        module.fail_json(msg="memory_reservation.node_memory_bytes must be positive, got %d"
                             % mr["node_memory_bytes"])
    proc, pairs, kubelet_info = _kubelet(module)
    path = p["path"]
    if not path:
        flag_config = flag_value(pairs, "config") if proc else None
        if flag_config not in (None, True, ""):
            path = kubelet_view_paths(flag_config, p["proc_path"], proc["pid"])[0]
        else:
            path = DEFAULT_CONFIG_PATH
    result = dict(changed=False, path=path, format=None, parser=None, changed_keys=[],
                  backup_file=None, config={}, restart_required=False, flag_conflicts=[],
                  flag_files_changed=[], memory_reservation=None, kubelet=kubelet_info)
    if os.path.isdir(path):
        module.fail_json(msg="path %s is a directory, not a KubeletConfiguration file" % path,
                         **result)
    if not os.path.lexists(path):
        module.fail_json(msg="%s does not exist; the kubelet config file must exist to be "
                             "edited" % path, **result)
    text = _read_text(module, path, "KubeletConfiguration", result)
    problem = unsafe_target(path)
    if problem:
        module.fail_json(msg="refusing to edit %s: %s. A file root rewrites must be writable by "
                             "root only, or another user chooses what root writes; fix its "
                             "ownership and mode (chown root:root, chmod go-w)" % (path, problem),
                         **result)
    try:
        config, parser = kubelet_yaml.load_config_text(text)
    except kubelet_yaml.ConfigParseError as e:
        module.fail_json(msg="cannot parse %s: %s; the file was left untouched" % (path, e),
                         **result)
    result["parser"] = parser
    result["format"] = "json" if parser == "json" else "yaml"
    if not isinstance(config, dict):
        what = "nothing" if config is None else "a %s" % type(config).__name__
        module.fail_json(msg="%s holds %s, not a KubeletConfiguration mapping; the file was left "
                             "untouched" % (path, what), **result)
    kind = config.get("kind")
    if kind is not None and kind != "KubeletConfiguration":
        module.fail_json(msg="%s is a %r, not a KubeletConfiguration; the file was left untouched"
                             % (path, kind), **result)
    if kind is None:
        module.warn("%s has no 'kind' (the kubelet requires kind: KubeletConfiguration)" % path)

    try:
        sources = FlagSources(module, proc, pairs)
        after, keys, report, node_memory = _plan(module, config, config, None)
        conflicts = sources.conflicts(keys)
        moves = []
        if conflicts and p["flag_conflicts"] == "move":
            fixed = [c for c in conflicts if c["source"] in ("unit", "config-dir")]
            in_files = set(c["flag"] for c in conflicts if c["source"] == "file")
            fixed += [c for c in conflicts if c["source"] == "process" and c["flag"] not in in_files]
            if fixed:
                module.fail_json(msg="kubelet flags override %s and cannot be moved into the "
                                     "config: %s. Remove them where they are set (and restart "
                                     "the kubelet), or use flag_conflicts=ignore"
                                     % (", ".join(sorted(set(c["key"] for c in fixed))),
                                        "; ".join("%s=%s (%s: %s)" % (c["flag"], c["value"],
                                                                      c["source"], c["where"])
                                                  for c in fixed)),
                                 flag_conflicts=conflicts,
                                 **dict((k, v) for k, v in result.items() if k != "flag_conflicts"))
            moves = [c for c in conflicts if c["source"] == "file"]
            base = deep_merge(config, replace_maps(config, flag_values(moves)))
            after, keys, report, node_memory = _plan(module, config, base, node_memory)
        elif conflicts and p["flag_conflicts"] == "fail":
            module.fail_json(msg="kubelet flags override keys this task sets (%s), so the kubelet "
                                 "would not use the new values: %s. Remove the flags, set "
                                 "flag_conflicts=move to move their values into the config, or "
                                 "flag_conflicts=ignore"
                                 % (", ".join(sorted(set(c["key"] for c in conflicts))),
                                    "; ".join("%s=%s (%s: %s)" % (c["flag"], c["value"],
                                                                  c["source"], c["where"])
                                              for c in conflicts)),
                             flag_conflicts=conflicts,
                             **dict((k, v) for k, v in result.items() if k != "flag_conflicts"))
        elif conflicts:
            module.warn("kubelet flags override %s; the kubelet keeps using the flag values: %s"
                        % (", ".join(sorted(set(c["key"] for c in conflicts))),
                           "; ".join("%s=%s (%s)" % (c["flag"], c["value"], c["where"])
                                     for c in conflicts)))
        result["flag_conflicts"] = conflicts
        result["memory_reservation"] = report
        new_text = render(after, text, result["format"])
        check_round_trip(new_text, after, result["format"],
                         kubelet_yaml._yaml if kubelet_yaml.HAS_PYYAML else None)
    except SettingsError as e:
        module.fail_json(msg=str(e), **result)

    config_changed = not same(config, after)
    result["config"] = after
    result["changed_keys"] = [format_path(x) for x in changed_paths(config, after)]
    diffs = []
    if config_changed:
        diffs.append({"before": text, "after": new_text, "before_header": path,
                      "after_header": path})

    env_edits = []
    if moves:
        names = set(c["flag"][2:] for c in moves)
        for env_path, env_text in sources.env_files:
            variables = set(n for _i, n, _v, _q in parse_env_text(env_text))
            new_env, removed = remove_flags_from_env_text(env_text, variables, names)
            if removed:
                problem = unsafe_target(env_path)
                if problem:
                    module.fail_json(msg="refusing to edit %s to move its flags: %s; nothing was "
                                         "changed" % (env_path, problem), **result)
                env_edits.append((env_path, env_text, new_env, removed))
                diffs.append({"before": env_text, "after": new_env, "before_header": env_path,
                              "after_header": env_path})

    result["changed"] = config_changed or bool(env_edits)
    result["restart_required"] = result["changed"]
    if module._diff and diffs:
        result["diff"] = diffs
    if not result["changed"] or module.check_mode:
        result["flag_files_changed"] = [{"path": e[0], "backup_file": None,
                                         "removed": ["%s %s" % r for r in e[3]]} for e in env_edits]
        module.exit_json(**result)

    written = []
    backups = []  # (file, its fresh backup)
    try:
        if config_changed:
            if p["backup"]:
                result["backup_file"] = backup_file(path)
                backups.append((path, result["backup_file"]))
            atomic_write(path, new_text)
            written.append(path)
        for env_path, _old, new_env, removed in env_edits:
            bak = backup_file(env_path) if p["backup"] else None
            if bak:
                backups.append((env_path, bak))
            atomic_write(env_path, new_env)
            written.append(env_path)
            result["flag_files_changed"].append({"path": env_path, "backup_file": bak,
                                                 "removed": ["%s %s" % r for r in removed]})
    except (IOError, OSError) as e:
        # Only what was really written counts as changed; the rest keeps its old content, and
        # the backups just made of files that kept it are removed (they equal the file).
        for target, bak in backups:
            if target not in written:
                try:
                    os.unlink(bak)
                except OSError:
                    pass
                if result["backup_file"] == bak:
                    result["backup_file"] = None
        result["changed"] = result["restart_required"] = bool(written)
        if path not in written:
            result["config"] = config
            result["changed_keys"] = []
        result.pop("diff", None)
        module.fail_json(msg="%s%s" % (e, "; already written: %s" % ", ".join(written)
                                       if written else "; nothing was changed"), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
