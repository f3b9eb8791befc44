# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""kubelet_config run helper: the body of kubegpu.fleet.kubelet_config (node side, 3.8+).

``run_kubelet_config(module)`` reads the KubeletConfiguration (bounded, never blocking), plans
the change (kubelet_config.py), checks the flags that would override it, and writes the file
and moved flag files through fileutil.write_file (a 0600 backup, an atomic rename within the
held directory; files another user owns or can write, or reaches through a symlink, are
refused). The module keeps only its interface (documentation and argument spec).
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.kubegpu.fleet.plugins.module_utils._common import safe_io
from ansible_collections.kubegpu.fleet.plugins.module_utils._common.fileutil import (
    unsafe_target,
    write_file,
)
from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet.config_files import (
    CONFIG_MAX_BYTES,
    DEFAULT_CONFIG_PATH,
    kubelet_view_paths,
    load_dropins,
)
from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet.config_yaml import (
    ConfigParseError,
    load_config_text,
    require_yaml,
)
from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet.flags import flag_value, parse_flags
from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet.memory import read_meminfo_total
from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet.merge_patch import merge_patch
from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet.process import identify_kubelet
from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet.config import (
    SettingsError,
    changed_paths,
    check_round_trip,
    coerce_settings,
    complete_eviction_hard,
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
    work = merge_patch(base, settings)
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
        work = merge_patch(work, extra)
    if p["cpu_manager_policy"] is not None:
        cpu = static_cpu_settings(work, p["cpu_manager_policy"], p["static_reserved_cpu"])
        extra = merge_patch(extra, cpu)
        work = merge_patch(work, cpu)
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


def run_kubelet_config(module):
    """kubegpu.fleet.kubelet_config: exits or fails ``module``."""
    require_yaml(module, "to read and write the KubeletConfiguration")
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
        config, parser = load_config_text(text)
    except ConfigParseError as e:
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
            base = merge_patch(config, replace_maps(config, flag_values(moves)))
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
        check_round_trip(new_text, after)
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
    try:
        if config_changed:
            result["backup_file"] = write_file(path, new_text, backup=p["backup"])
            written.append(path)
        for env_path, _old, new_env, removed in env_edits:
            bak = write_file(env_path, new_env, backup=p["backup"])
            written.append(env_path)
            result["flag_files_changed"].append({"path": env_path, "backup_file": bak,
                                                 "removed": ["%s %s" % r for r in removed]})
    except (IOError, OSError) as e:
        # Only what was really written counts as changed; the rest keeps its old content (a
        # write that fails removes the backup it just made: it equals the file).
        result["changed"] = result["restart_required"] = bool(written)
        if path not in written:
            result["config"] = config
            result["changed_keys"] = []
        result.pop("diff", None)
        module.fail_json(msg="%s%s" % (e, "; already written: %s" % ", ".join(written)
                                       if written else "; nothing was changed"), **result)
    module.exit_json(**result)
