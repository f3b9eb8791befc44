# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""kubelet facts: process, flags, KubeletConfiguration, memory reservations (node side, 3.8+).

:func:`gather_kubelet_facts` assembles what ``kubelet_facts`` returns from the pieces beside it:
the process (``process.py``), its flags (``flags.py``), its version (``version.py``), its config
files (``config_files.py``, ``config_yaml.py``, ``merge_patch.py``) and memory settings
(``memory.py``).

Everything here is a plain function over paths the caller supplies (``proc_path``...), so the
same code audits a node from inside a container that mounts the host at /host. Nothing raises
for a missing or odd node file: problems end up as messages in the returned facts, because an
audit must keep going.

Precedence follows the kubelet: built-in defaults < ``--config`` file < ``--config-dir``
drop-ins < command-line flags (flags are deprecated but still win).
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet.config_files import (
    DEFAULT_CONFIG_PATH,
    kubelet_view_paths,
    load_dropins,
    read_config_file,
)
from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet.config_yaml import parse_config
from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet.flags import flag_value, flags_dict, parse_flags
from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet.memory import DEFAULT_EVICTION_HARD, memory_facts, read_meminfo_total
from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet.merge_patch import merge_patch
from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet.process import COMMAND_TIMEOUT, DEFAULT_UNIT, identify_kubelet
from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet.version import DEFAULT_PACKAGE, package_version

DEFAULT_ROOT_DIR = "/var/lib/kubelet"
CHECKPOINT_RELPATH = os.path.join("device-plugins", "kubelet_internal_checkpoint")
DEFAULT_CPU_MANAGER_POLICY = "none"
DEFAULT_CGROUP_DRIVER = "cgroupfs"


def _pick(flag_val, config, key, default):
    """(effective value, source) for a scalar setting."""
    if flag_val is not None and flag_val is not True:
        return flag_val, "flag"
    if isinstance(config, dict) and config.get(key) not in (None, ""):
        return config.get(key), "config"
    return default, "default"


def gather_kubelet_facts(proc_path="/proc", config_path=None, version_timeout=COMMAND_TIMEOUT,
                         unit=DEFAULT_UNIT, get_bin_path=None,
                         package=DEFAULT_PACKAGE, node_version=None):
    """Everything ``kubelet_facts`` returns as ``ansible_facts.kubelet``.

    ``config_path`` overrides the ``--config`` flag. The kubelet is found by
    :func:`identify_kubelet` (``systemctl`` from ``get_bin_path``); its version comes from the
    package database (``get_bin_path`` finds ``dpkg-query``/``rpm``) or ``node_version`` (the
    Node's ``status.nodeInfo.kubeletVersion`` when the caller has it). No binary is executed.
    """
    errors = []
    systemctl = get_bin_path("systemctl") if get_bin_path else None
    found = identify_kubelet(proc_path, unit, systemctl, version_timeout)
    errors.extend(found["errors"])
    proc = found["proc"]
    pid = proc["pid"] if proc else None
    argv = proc["argv"] if proc else []
    pairs, positional = parse_flags(argv[1:])
    flags, repeated = flags_dict(pairs)

    facts = {
        "running": proc is not None,
        "pid": pid,
        "pids": [p["pid"] for p in found["candidates"]],
        "identified_by": found["method"],
        "unit": unit,
        "impostors": found["rejected"],
        "cmdline": argv,
        "flags": flags,
        "flags_repeated": repeated,
        "args": positional,
        "exe": proc.get("exe") if proc else None,
        "exe_deleted": proc.get("exe_deleted") if proc else None,
        "version": None,
        "version_source": None,
        "version_error": None,
    }
    for imp in found["rejected"]:
        errors.append("process %s named kubelet (uid %s, executable %s) is not the kubelet: %s"
                      % (imp["pid"], imp["uid"], imp["exe"], imp["why"]))

    # version: never by running a binary; the package database, else the Node object.
    version, source, err = None, None, None
    if get_bin_path is not None:
        version, source, err = package_version(get_bin_path, package, version_timeout)
    if version is None and node_version:
        version, source = str(node_version), "node:status.nodeInfo.kubeletVersion"
    facts["version"], facts["version_source"] = version, source
    if version is None:
        facts["version_error"] = err or "no package database to ask and no Node object"

    # config file
    flag_config = flag_value(pairs, "config")
    if config_path:
        source, wanted = "option", config_path
    elif flag_config not in (None, True, ""):
        source, wanted = "flag", flag_config
    else:
        source, wanted = "default", DEFAULT_CONFIG_PATH
    wanted, candidates = kubelet_view_paths(wanted, proc_path, pid)
    if source == "option":
        candidates = [config_path]
    if proc is None:
        loaded_by_kubelet = None
    elif flag_config in (None, True, ""):
        loaded_by_kubelet = False
    else:
        loaded_by_kubelet = kubelet_view_paths(flag_config, proc_path, pid)[0] == wanted
    text, read_path, error = read_config_file(candidates)
    config, parser, warnings = {}, None, []
    if error is None:
        config, parser, error, warnings = parse_config(text, wanted)
    facts.update({
        "config_path": wanted,
        "config_source": source,
        "config_read_path": read_path,
        "config_loaded_by_kubelet": loaded_by_kubelet,
        "config_parser": parser,
        "config": config,
        "config_error": error,
        "config_warnings": warnings,
    })
    # values the kubelet itself uses: the file only when it loads it (or the user named one)
    effective = config if error is None and (loaded_by_kubelet is not False or
                                             source == "option") else {}
    if loaded_by_kubelet is False and source != "option" and error is None:
        warnings.append("kubelet pid %s runs without --config; %s is not used by it" % (pid, wanted))

    config_dir = flag_value(pairs, "config-dir")
    dropins = []
    if proc is not None and config_dir not in (None, True, ""):
        loaded, dropin_errors = load_dropins(config_dir, proc_path, pid)
        errors.extend(dropin_errors)
        if "evictionHard" not in effective and any("evictionHard" in data for _p, data in loaded):
            # drop-ins merge into the already-defaulted config: a drop-in's evictionHard keys
            # add to the four defaults instead of replacing them
            effective = dict(effective, evictionHard=dict(DEFAULT_EVICTION_HARD))
        for path, data in loaded:
            effective = merge_patch(effective, data)
            dropins.append(path)
    facts["config_dir"] = config_dir if config_dir not in (None, True, "") else None
    facts["config_dropins"] = dropins
    facts["effective_config"] = effective

    sources = {}
    facts["cpu_manager_policy"], sources["cpu_manager_policy"] = _pick(
        flag_value(pairs, "cpu-manager-policy"), effective,
        "cpuManagerPolicy", DEFAULT_CPU_MANAGER_POLICY)
    facts["cgroup_driver"], sources["cgroup_driver"] = _pick(
        flag_value(pairs, "cgroup-driver"), effective, "cgroupDriver",
        DEFAULT_CGROUP_DRIVER)
    root_dir = flag_value(pairs, "root-dir")
    if root_dir in (None, True, ""):
        root_dir, sources["root_dir"] = DEFAULT_ROOT_DIR, "default"
    else:
        sources["root_dir"] = "flag"
    facts["root_dir"] = root_dir
    facts["checkpoint_path"] = os.path.join(root_dir, CHECKPOINT_RELPATH)

    node_memory = read_meminfo_total(proc_path)
    facts["node_memory_bytes"] = node_memory
    memory, system, kube = memory_facts(pairs, effective, node_memory, errors)
    facts["memory"] = memory
    facts["system_reserved"] = system
    facts["kube_reserved"] = kube
    sources["system_reserved"] = memory["system_reserved"]["source"]
    sources["kube_reserved"] = memory["kube_reserved"]["source"]
    sources["eviction_hard"] = memory["eviction_hard"]["source"]
    sources["enforce_node_allocatable"] = memory["enforce_node_allocatable_source"]
    facts["sources"] = sources
    facts["errors"] = errors
    return facts
