# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Edit a KubeletConfiguration: merge, compare, render, size reservations, find overriding flags.

Node side, Python 3.8+. The config is read with ``config_yaml.load_config_text`` and written back
with ``render`` (PyYAML's dumper, or ``json`` for a JSON file); settings apply with
``merge_patch.merge_patch`` (RFC 7386, the one merge of the collection). Everything here is a
plain function; ``kubelet_config_run`` does the module's file I/O.

* ``same`` / ``changed_paths``: semantic comparison (types matter: ``true`` is not ``1``).
* ``memory_reservation_settings``: kubeReserved/systemReserved memory from the GKE ladder or a
  quantity, never lowering a larger existing value unless asked, plus a complete evictionHard.
* ``static_cpu_settings``: the static CPU manager policy needs reserved CPUs.
* flags: the kubelet flags that override config keys, parsed from the running kubelet's command
  line, the kubeadm/systemd environment files and unit drop-ins, and removed from environment
  files when the operator asks for their values to move into the config.
* ``coerce_settings``: settings converted to the KubeletConfiguration v1beta1 field types.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import math
import re

from ansible_collections.kubegpu.fleet.plugins.module_utils._common import safe_io
from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet.config_yaml import (
    MAX_DEPTH,
    check_depth,
    ConfigParseError,
    dump_config_yaml,
    load_config_text,
)
from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet.flags import BOOL_FLAGS
from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet.memory import (
    DEFAULT_EVICTION_HARD,
    gke_reserved_memory_bytes,
    parse_memory_threshold,
)
from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet.quantity import (
    parse_quantity,
    quantity_to_bytes,
    QuantityError,
)

MIB = 1 << 20


class SettingsError(ValueError):
    """Bad input from the operator (a setting, quantity or policy); the message names it."""


# -- compare ----------------------------------------------------------------------------------
def same(a, b):
    """Semantic equality of loaded YAML: order of keys ignored, types strict, NaN == NaN."""
    if isinstance(a, dict) and isinstance(b, dict):
        return set(a) == set(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if type(a) is not type(b):  # pylint: disable=unidiomatic-typecheck
        return False
    if isinstance(a, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def changed_paths(before, after, prefix=()):
    """Paths (tuples of keys) whose values differ: added, removed or changed leaves."""
    if isinstance(before, dict) and isinstance(after, dict):
        out = []
        for key in list(before) + [k for k in after if k not in before]:
            if key not in after or key not in before:
                out.append(prefix + (key,))
            else:
                out.extend(changed_paths(before[key], after[key], prefix + (key,)))
        return out
    return [] if same(before, after) else [prefix]


def format_path(path):
    """``('evictionHard', 'memory.available')`` -> ``evictionHard["memory.available"]``."""
    out = ""
    for key in path:
        text = str(key)
        if re.match(r"^[A-Za-z_][A-Za-z0-9_-]*$", text):
            out += ("." if out else "") + text
        else:
            out += "[%s]" % json.dumps(text)
    return out


# -- render ---------------------------------------------------------------------------------
def header_lines(text):
    """Leading comment, directive and blank lines plus a ``---`` marker line, verbatim."""
    out = []
    for line in text.splitlines(True):
        stripped = line.strip()
        if stripped.startswith("#") or stripped.startswith("%") or not stripped:
            out.append(line)
            continue
        if stripped == "---":
            out.append(line)
        break
    while out and not out[-1].strip():
        out.pop()
    return "".join(out if not out or out[-1].endswith("\n") else out + ["\n"])


def json_indent(text):
    """The indentation width an existing JSON file uses (2 when it cannot tell)."""
    for line in text.splitlines()[1:]:
        width = len(line) - len(line.lstrip(" "))
        if width:
            return width
    return 2


def render(data, original_text, fmt):
    """New file text: JSON when the file was JSON, else YAML below the original header."""
    if fmt == "json":
        return json.dumps(data, indent=json_indent(original_text), ensure_ascii=False) + "\n"
    try:
        return header_lines(original_text) + dump_config_yaml(data)
    except Exception as e:  # pylint: disable=broad-except
        # yaml.representer.RepresenterError for values YAML cannot represent
        raise SettingsError("cannot write %s to a KubeletConfiguration" % (e,))


def check_round_trip(text, data):
    """Raise SettingsError unless ``text`` reads back as ``data``: the last guard before
    anything is written."""
    try:
        back = load_config_text(text)[0]
    except ConfigParseError as e:
        raise SettingsError("internal error: the new config does not read back: %s" % e)
    if not same(back, data):
        raise SettingsError("internal error: the new config reads back differently")


# -- memory reservations --------------------------------------------------------------------
def mebibytes(nbytes):
    """A quantity for ``nbytes`` in whole MiB, rounded up (``5489Mi``)."""
    return "%dMi" % (-(-nbytes // MIB))


def _target_bytes(what, spec):
    if spec in (None, "", "auto"):
        return None
    try:
        return quantity_to_bytes(spec)
    except QuantityError as e:
        raise SettingsError("%s: %s" % (what, e))


def _existing_bytes(config, key):
    section = config.get(key)
    if not isinstance(section, dict) or section.get("memory") is None:
        return None, None
    raw = section.get("memory")
    try:
        return quantity_to_bytes(raw), raw
    except QuantityError as e:
        raise SettingsError("the config's %s.memory %r does not parse: %s" % (key, raw, e))


def complete_eviction_hard(current, overrides=None):
    """A complete evictionHard: kubelet defaults < current values < ``overrides``.

    Setting any evictionHard key zeroes the unset ones (domain facts), so the four defaults
    are always written. An override of ``None`` removes that threshold on purpose.
    """
    if current is not None and not isinstance(current, dict):
        raise SettingsError("the config's evictionHard is a %s, not a mapping"
                            % type(current).__name__)
    out = dict(DEFAULT_EVICTION_HARD)
    for source in (current or {}, overrides or {}):
        for key, value in source.items():
            if value is None:
                out.pop(key, None)
                continue
            out[key] = value if isinstance(value, str) else str(value)
    for key, value in out.items():
        if key.startswith("memory.") or key.startswith("nodefs.") or \
                key.startswith("imagefs.") or key.startswith("pid."):
            try:
                if not key.endswith("inodesFree") and not key.startswith("pid."):
                    parse_memory_threshold(value, 1)
                elif not value.endswith("%") and not safe_io.is_ascii_digits(value):
                    quantity_to_bytes(value)
            except QuantityError as e:
                raise SettingsError("evictionHard %s: %s" % (key, e))
    return out


def memory_reservation_settings(config, node_memory_bytes, kube_reserved="auto",
                                system_reserved="auto", eviction_hard=None, allow_lower=False):
    """Settings that size the memory reservations, and a report of the decision.

    ``kube_reserved``: ``auto`` = the GKE ladder for ``node_memory_bytes`` (GKE puts its whole
    reservation into kube-reserved), or a quantity. ``system_reserved``: ``auto`` = leave
    systemReserved.memory as it is (the ladder covers system daemons), or a quantity. An
    existing larger value is kept unless ``allow_lower``. Values that already equal the target
    keep their spelling. Other keys of the sections (cpu, ephemeral-storage) are untouched.
    evictionHard is always written completely (``complete_eviction_hard``).
    """
    if isinstance(node_memory_bytes, bool) or not isinstance(node_memory_bytes, int) or \
            node_memory_bytes <= 0:
        raise SettingsError("node memory must be a positive number of bytes, got %r"
                            % (node_memory_bytes,))
    settings = {}
    report = {"node_memory_bytes": node_memory_bytes,
              "gke_reserved_bytes": gke_reserved_memory_bytes(node_memory_bytes)}
    for key, spec, name in (("kubeReserved", kube_reserved, "kube_reserved"),
                            ("systemReserved", system_reserved, "system_reserved")):
        existing, raw = _existing_bytes(config, key)
        target = _target_bytes(name, spec)
        if target is None and key == "kubeReserved":
            target = report["gke_reserved_bytes"]
            text = mebibytes(target)
            target = quantity_to_bytes(text)
        elif target is None:
            report[name] = {"bytes": existing, "value": raw, "action": "left"}
            continue
        else:
            text = spec if isinstance(spec, str) else str(spec)
        if existing is not None and existing == target:
            action, text = "kept", raw
        elif existing is not None and existing > target and not allow_lower:
            action, text, target = "kept-larger", raw, existing
        else:
            action = "set"
        report[name] = {"bytes": target, "value": text, "action": action}
        if action == "set":
            settings[key] = {"memory": text}
    current = config.get("evictionHard")
    complete = complete_eviction_hard(current, eviction_hard)
    if not same(current, complete):
        settings["evictionHard"] = dict(complete, **dict(
            (k, None) for k in (current or {}) if k not in complete))
    report["eviction_hard"] = complete
    threshold = complete.get("memory.available")
    evict = parse_memory_threshold(threshold, node_memory_bytes)["bytes"] if threshold else 0
    reserved = sum(report[n]["bytes"] or 0 for n in ("kube_reserved", "system_reserved"))
    report["reserved_total_bytes"] = reserved
    report["allocatable_bytes"] = node_memory_bytes - reserved - (evict or 0)
    return settings, report


# -- CPU manager ----------------------------------------------------------------------------
CPU_MANAGER_POLICIES = ("none", "static")


def reserved_cpu_millis(config, flag_maps=None):
    """Reserved CPU in millicores from kubeReserved/systemReserved cpu (flags win), and whether
    reservedSystemCPUs is set."""
    total = 0
    for key, flag in (("kubeReserved", "kube-reserved"), ("systemReserved", "system-reserved")):
        section = (flag_maps or {}).get(flag)
        if section is None:
            section = config.get(key) if isinstance(config.get(key), dict) else {}
        raw = section.get("cpu")
        if raw in (None, ""):
            continue
        try:
            total += int(math.ceil(parse_quantity(raw) * 1000))
        except QuantityError as e:
            raise SettingsError("%s.cpu: %s" % (key, e))
    cpus = config.get("reservedSystemCPUs")
    return total, bool(cpus not in (None, "") or (flag_maps or {}).get("reserved-cpus"))


def static_cpu_settings(config, policy, reserved_cpu="1"):
    """Settings for ``cpuManagerPolicy: <policy>``; for ``static`` also kubeReserved.cpu when
    nothing reserves CPUs (the kubelet refuses to start the static policy without)."""
    if policy not in CPU_MANAGER_POLICIES:
        raise SettingsError("cpu_manager_policy must be one of %s, got %r"
                            % (", ".join(CPU_MANAGER_POLICIES), policy))
    settings = {"cpuManagerPolicy": policy}
    if policy == "static":
        millis, cpuset = reserved_cpu_millis(config)
        if millis <= 0 and not cpuset:
            try:
                if parse_quantity(reserved_cpu) <= 0:
                    raise QuantityError("must be positive")
            except QuantityError as e:
                raise SettingsError("static_reserved_cpu %r: %s" % (reserved_cpu, e))
            settings["kubeReserved"] = {"cpu": str(reserved_cpu)}
    return settings


# -- flags that override config keys --------------------------------------------------------
def _map_value(text, separator):
    out = {}
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        if separator not in item:
            raise SettingsError("malformed flag value %r: expected key%svalue" % (item, separator))
        key, value = item.split(separator, 1)
        out[key.strip()] = value.strip()
    return out


def _int_value(text):
    try:
        return int(text)
    except (TypeError, ValueError):
        raise SettingsError("flag value %r is not an integer" % (text,))


def _list_value(text):
    return [v.strip() for v in (text or "").split(",") if v.strip()]


# flag -> (config key, converter). Map flags replace the config's whole map.
FLAG_KEYS = {
    "kube-reserved": ("kubeReserved", lambda v: _map_value(v, "=")),
    "system-reserved": ("systemReserved", lambda v: _map_value(v, "=")),
    "eviction-hard": ("evictionHard", lambda v: _map_value(v, "<")),
    "eviction-soft": ("evictionSoft", lambda v: _map_value(v, "<")),
    "eviction-soft-grace-period": ("evictionSoftGracePeriod", lambda v: _map_value(v, "=")),
    "eviction-minimum-reclaim": ("evictionMinimumReclaim", lambda v: _map_value(v, "=")),
    "cpu-manager-policy": ("cpuManagerPolicy", str),
    "cpu-manager-policy-options": ("cpuManagerPolicyOptions", lambda v: _map_value(v, "=")),
    "cpu-manager-reconcile-period": ("cpuManagerReconcilePeriod", str),
    "reserved-cpus": ("reservedSystemCPUs", str),
    "topology-manager-policy": ("topologyManagerPolicy", str),
    "memory-manager-policy": ("memoryManagerPolicy", str),
    "enforce-node-allocatable": ("enforceNodeAllocatable", _list_value),
    "cgroup-driver": ("cgroupDriver", str),
    "max-pods": ("maxPods", _int_value),
    "fail-swap-on": ("failSwapOn", lambda v: v in (True, "true", "True", "1", "t", "T", "TRUE")),
}
KEY_FLAGS = dict((key, flag) for flag, (key, _conv) in FLAG_KEYS.items())


def split_unit_words(value):
    """Words of an unquoted ``$VAR`` as systemd expands it: split at whitespace."""
    return value.split()


def flag_occurrences(words):
    """``[(start, end, name, value)]`` for each flag in ``words`` (pflag rules: ``--f=v``,
    ``--f v`` unless boolean, ``-f``); ``end`` is exclusive."""
    out = []
    i = 0
    n = len(words)
    while i < n:
        word = words[i]
        if word == "--":
            break
        if not word.startswith("-") or word == "-" or re.match(r"^-[0-9.]", word):
            i += 1
            continue
        body = word.lstrip("-").replace("_", "-")
        if "=" in body:
            name, value = body.split("=", 1)
            out.append((i, i + 1, name, value))
            i += 1
            continue
        if body in BOOL_FLAGS or i + 1 >= n or (words[i + 1].startswith("-") and
                                                not re.match(r"^-[0-9.]", words[i + 1])):
            out.append((i, i + 1, body, True))
            i += 1
            continue
        out.append((i, i + 2, body, words[i + 1]))
        i += 2
    return out


_ENV_LINE = re.compile(r"^(\s*(?:export\s+)?)([A-Za-z_][A-Za-z0-9_]*)(\s*=\s*)(.*?)(\s*)$")


def _env_unquote(raw):
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "\"'":
        inner = raw[1:-1]
        if raw[0] == '"':
            inner = re.sub(r'\\(["\\$`])', r"\1", inner)
        return inner, raw[0]
    return raw, ""


def parse_env_text(text):
    """``[(line index, name, value, quote)]`` of the assignments of an environment file
    (systemd ``EnvironmentFile=`` / ``/etc/default/kubelet`` syntax, one line each)."""
    out = []
    for index, line in enumerate(text.splitlines()):
        if not line.strip() or line.lstrip().startswith(("#", ";")):
            continue
        m = _ENV_LINE.match(line)
        if not m:
            continue
        value, quote = _env_unquote(m.group(4))
        out.append((index, m.group(2), value, quote))
    return out


def parse_unit_text(text):
    """From a systemd unit / drop-in: ``{"environment": [(name, value)], "environment_files":
    [path], "exec_start": [command]}`` (later ``ExecStart=`` lines after an empty one win)."""
    env = []
    files = []
    execs = []
    joined = re.sub(r"\\\n", " ", text)
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";", "[")) or "=" not in line:
            continue
        key, value = line.split("=", 1)
        key = key.strip()
        value = value.strip()
        if key == "Environment":
            for assignment in re.findall(r'"[^"]*"|\'[^\']*\'|\S+', value):
                assignment = _env_unquote(assignment)[0]
                if "=" in assignment:
                    name, val = assignment.split("=", 1)
                    env.append((name, val))
        elif key == "EnvironmentFile":
            if value:
                files.append(value.lstrip("-"))
        elif key == "ExecStart":
            if value:
                execs.append(value)
            else:
                execs = []
    return {"environment": env, "environment_files": files, "exec_start": execs}


def flags_in_words(words, keys, source, where):
    """Conflicts: flags in ``words`` that override one of the config ``keys``."""
    out = []
    for _start, _end, name, value in flag_occurrences(words):
        if name in FLAG_KEYS and FLAG_KEYS[name][0] in keys:
            out.append({"flag": "--" + name, "key": FLAG_KEYS[name][0],
                        "value": value if value is not True else "", "source": source,
                        "where": where})
    return out


def remove_flags_from_env_text(text, variables, flag_names):
    """``(new text, removed [(variable, flag word(s))])``: the flags named ``flag_names``
    (without dashes) taken out of the assignments of ``variables``; everything else kept."""
    lines = text.splitlines(True)
    removed = []
    for index, name, value, quote in parse_env_text(text):
        if name not in variables:
            continue
        words = split_unit_words(value)
        drop = set()
        for start, end, flag, _value in flag_occurrences(words):
            if flag in flag_names:
                drop.update(range(start, end))
                removed.append((name, " ".join(words[start:end])))
        if not drop:
            continue
        kept = " ".join(w for i, w in enumerate(words) if i not in drop)
        m = _ENV_LINE.match(lines[index].rstrip("\n"))
        newline = lines[index][len(lines[index].rstrip("\n")):]
        q = quote or ('"' if not kept else "")
        if q == '"':
            kept = re.sub(r'(["\\$`])', r"\\\1", kept)
        lines[index] = "%s%s%s%s%s%s%s%s" % (
            m.group(1), m.group(2), m.group(3), q, kept, q, m.group(5), newline)
    return "".join(lines), removed


def flag_values(conflicts):
    """Config settings carrying the values of the overriding flags (last one wins per flag,
    except map flags, which merge like pflag: the first replaces, later ones add)."""
    out = {}
    for c in conflicts:
        name = c["flag"][2:]
        key, convert = FLAG_KEYS[name]
        value = convert(c["value"])
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key].update(value)
        else:
            out[key] = value
    return out


def replace_maps(config, values):
    """Flags replace the config's map wholesale: ``values`` as settings that do the same."""
    settings = {}
    for key, value in values.items():
        current = config.get(key)
        if isinstance(value, dict) and isinstance(current, dict):
            patch = dict((k, None) for k in current if k not in value)
            patch.update(value)
            settings[key] = patch
        else:
            settings[key] = value
    return settings


# -- setting types --------------------------------------------------------------------------
# Types of the KubeletConfiguration fields, from k8s.io/kubelet/config/v1beta1/types.go
# (Kubernetes 1.31-1.33; the reference is the "kubelet.config.k8s.io/v1beta1" config API page).
# Settings that arrive as strings (``settings: maxPods=110 failSwapOn=false`` is a dict of
# strings) are converted to these types; a value that does not convert is refused. Go int32 /
# int64 ranges are enforced. Durations (metav1.Duration) and quantities stay strings; fields not
# listed (structs, lists of structs, fields of newer releases) are written as given.
INT32, INT64, BOOL, FLOAT, STRING, DURATION, MAP_STRING, MAP_BOOL, LIST_STRING = (
    "int32", "int64", "bool", "float64", "string", "duration", "map[string]string",
    "map[string]bool", "[]string")
FIELD_TYPES = {}
for _names, _type in (
        (("maxPods", "podsPerCore", "port", "readOnlyPort", "healthzPort", "registryPullQPS",
          "registryBurst", "eventRecordQPS", "eventBurst", "kubeAPIQPS", "kubeAPIBurst",
          "imageGCHighThresholdPercent", "imageGCLowThresholdPercent", "oomScoreAdj",
          "evictionMaxPodGracePeriod", "nodeStatusMaxImages", "nodeLeaseDurationSeconds",
          "containerLogMaxFiles", "containerLogMaxWorkers", "maxParallelImagePulls",
          "iptablesMasqueradeBit", "iptablesDropBit"), INT32),
        (("podPidsLimit", "maxOpenFiles"), INT64),
        (("enableServer", "failSwapOn", "serializeImagePulls", "cgroupsPerQOS",
          "protectKernelDefaults", "makeIPTablesUtilChains", "enableDebuggingHandlers",
          "enableContentionProfiling", "enableProfilingHandler", "enableDebugFlagsHandler",
          "cpuCFSQuota", "rotateCertificates", "serverTLSBootstrap", "registerNode",
          "localStorageCapacityIsolation", "enableSystemLogHandler", "enableSystemLogQuery",
          "seccompDefault", "kernelMemcgNotification", "mergeDefaultEvictionSettings",
          "failCgroupV1", "singleProcessOOMKill", "enableControllerAttachDetach"), BOOL),
        (("memoryThrottlingFactor",), FLOAT),
        (("syncFrequency", "fileCheckFrequency", "httpCheckFrequency", "nodeStatusUpdateFrequency",
          "nodeStatusReportFrequency", "imageMinimumGCAge", "imageMaximumGCAge",
          "volumeStatsAggPeriod", "cpuManagerReconcilePeriod", "runtimeRequestTimeout",
          "streamingConnectionIdleTimeout", "evictionPressureTransitionPeriod",
          "shutdownGracePeriod", "shutdownGracePeriodCriticalPods", "cpuCFSQuotaPeriod",
          "containerLogMonitorInterval"), DURATION),
        (("cpuManagerPolicy", "cgroupDriver", "topologyManagerPolicy", "topologyManagerScope",
          "memoryManagerPolicy", "reservedSystemCPUs", "containerRuntimeEndpoint",
          "imageServiceEndpoint", "resolvConf", "hairpinMode", "cgroupRoot", "kubeletCgroups",
          "systemCgroups", "systemReservedCgroup", "kubeReservedCgroup", "staticPodPath",
          "staticPodURL", "podCIDR", "clusterDomain", "providerID", "containerLogMaxSize",
          "address", "healthzBindAddress", "tlsCertFile", "tlsPrivateKeyFile", "tlsMinVersion",
          "volumePluginDir", "kubeAPIContentType", "configMapAndSecretChangeDetectionStrategy",
          "showHiddenMetricsForVersion", "podLogsDir", "apiVersion", "kind"), STRING),
        (("kubeReserved", "systemReserved", "evictionHard", "evictionSoft",
          "evictionSoftGracePeriod", "evictionMinimumReclaim", "cpuManagerPolicyOptions",
          "topologyManagerPolicyOptions", "qosReserved"), MAP_STRING),
        (("featureGates",), MAP_BOOL),
        (("clusterDNS", "enforceNodeAllocatable", "allowedUnsafeSysctls", "tlsCipherSuites"),
         LIST_STRING)):
    for _name in _names:
        FIELD_TYPES[_name] = _type
_INT_RANGES = {INT32: (-(1 << 31), (1 << 31) - 1), INT64: (-(1 << 63), (1 << 63) - 1)}
_BOOL_WORDS = {"true": True, "false": False, "yes": True, "no": False, "on": True,
               "off": False}
_DURATION_RE = re.compile(r"^[-+]?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:ns|us|\u00b5s|ms|s|m|h))+$|^0$")


def _bad(key, value, want):
    return SettingsError("settings.%s must be %s (KubeletConfiguration v1beta1), got %r"
                         % (key, want, value))


def _coerce_scalar(key, value, kind):
    if kind in _INT_RANGES:
        if isinstance(value, str) and re.match(r"^[-+]?[0-9]{1,20}$", value.strip()):
            value = int(value.strip())
        if isinstance(value, bool) or not isinstance(value, int):
            raise _bad(key, value, "an integer (%s)" % kind)
        low, high = _INT_RANGES[kind]
        if not low <= value <= high:
            raise _bad(key, value, "an %s within %d..%d" % (kind, low, high))
        return value
    if kind == BOOL:
        if isinstance(value, str) and value.strip().lower() in _BOOL_WORDS:
            return _BOOL_WORDS[value.strip().lower()]
        if not isinstance(value, bool):
            raise _bad(key, value, "a boolean (true or false)")
        return value
    if kind == FLOAT:
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                raise _bad(key, value, "a number")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                math.isnan(value) or math.isinf(value):
            raise _bad(key, value, "a finite number")
        return float(value)
    if kind == DURATION:
        if not isinstance(value, str) or not _DURATION_RE.match(value.strip()):
            raise _bad(key, value, "a duration string such as 10s, 1m30s or 2h")
        return value.strip()
    if kind == STRING:
        if isinstance(value, bool) or isinstance(value, float) or not \
                isinstance(value, (str, int)):
            raise _bad(key, value, "a string")
        return value if isinstance(value, str) else str(value)
    return value


def coerce_settings(settings):
    """``settings`` with values converted to the KubeletConfiguration's field types
    (:data:`FIELD_TYPES`); ``None`` (remove the key) is kept. Raises SettingsError naming the key,
    the value and the type it must have."""
    if not isinstance(settings, dict):
        raise SettingsError("settings must be a mapping of KubeletConfiguration keys, got %r"
                            % (settings,))
    try:
        check_depth(settings, MAX_DEPTH - 1)
    except ConfigParseError:
        raise SettingsError("settings nest more than %d levels deep; no KubeletConfiguration "
                            "field does" % (MAX_DEPTH - 1))
    out = {}
    for key, value in settings.items():
        if not isinstance(key, str) or not key:
            raise SettingsError("settings keys must be KubeletConfiguration field names, got %r"
                                % (key,))
        kind = FIELD_TYPES.get(key)
        if value is None or kind is None:
            out[key] = value
        elif kind in (MAP_STRING, MAP_BOOL):
            if not isinstance(value, dict):
                raise _bad(key, value, "a mapping (%s)" % kind)
            inner = BOOL if kind == MAP_BOOL else STRING
            out[key] = dict((k, None if v is None else _coerce_scalar("%s.%s" % (key, k), v, inner))
                            for k, v in value.items())
        elif kind == LIST_STRING:
            if isinstance(value, str):
                value = [v.strip() for v in value.split(",") if v.strip()]
            if not isinstance(value, list):
                raise _bad(key, value, "a list of strings")
            out[key] = [_coerce_scalar("%s[%d]" % (key, i), v, STRING)
                        for i, v in enumerate(value)]
        else:
            out[key] = _coerce_scalar(key, value, kind)
    return out
