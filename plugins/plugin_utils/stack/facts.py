# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The controller half of the NVIDIA container stack facts (``nvidia_stack``).

The node module (``kubegpu.fleet.stack_facts``, or the ``stack_facts`` probe of
``kubegpu.fleet.audit_node``) returns the toolkit's ``config.toml`` as bounded raw text (nodes
may have no TOML parser); :func:`finish_stack_facts` parses it with the standard library's
``tomllib`` (Python 3.11+; ``tomli`` where an older controller has it) and fills in the facts
that depend on it:

- ``config``: the settings that matter (mode, runtimes, the feature flags, the
  unprivileged-envvar switch, the legacy cuda-compat mode).
- ``injection_mode``: ``mode = "legacy"`` -> legacy; ``cdi`` or ``jit-cdi`` -> cdi; ``auto``
  (the packaged default) resolves to legacy before toolkit 1.18.0 and to jit-cdi (cdi) from
  1.18.0 on a data-center (NVML) platform, as ``internal/info/auto.go`` of each release does;
  ``csv`` (Tegra) and anything unknown -> None.
- ``runtime``: the first of the config's ``nvidia-container-runtime.runtimes`` candidates
  (default ``docker-runc, runc, crun``) that is installed on the node, as the runtime itself
  picks it; ``docker-runc`` reports as runc, a path as its file name.
- ``cuda_compat_hook_disabled``: ``features.disable-cuda-compat-lib-hook`` (the mitigation
  NVIDIA's bulletin 5659 gave for CVE-2025-23266 in legacy mode); None without a config.

The text comes from the node: it is parsed through plugins/plugin_utils/parse_bound.py (a
size and shape check, then a parse killed at its deadline). A broken, non-UTF-8, too large or
hostile file (one the bound refuses or stops) is a warning and ``config: null`` - the file is
treated as unreadable - never an exception. Node-supplied fields of the wrong type (a
compromised node) raise :class:`StackShapeError` naming the field.

:data:`ACTION` is the ``kubegpu.fleet.stack_facts`` action: it runs the module, finishes its
``nvidia_stack`` fact here and fails the task, naming the field, when the result is malformed.
"""
from __future__ import annotations

from ansible_collections.kubegpu.fleet.plugins.module_utils._common.versions import SemVer
from ansible_collections.kubegpu.fleet.plugins.plugin_utils import parse_bound
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.action import runner
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.fields import nested as _nested

MODULE = "kubegpu.fleet.stack_facts"

DEFAULT_RUNTIMES = ["docker-runc", "runc", "crun"]
JIT_CDI_DEFAULT_FROM = SemVer("1.18.0")
FEATURES = ("disable-cuda-compat-lib-hook", "allow-cuda-compat-libs-from-container",
            "allow-ldconfig-from-container", "disable-imex-channel-creation",
            "ignore-imex-channel-requests", "no-additional-gids-for-device-nodes",
            "allow-unknown-oci-spec-fields")


MAX_SHOWN = 200  # characters of a node-supplied string quoted in a message


class StackShapeError(ValueError):
    """The node's ``nvidia_stack`` is not of the shape the module returns; the message names the field."""


def parse_config(text, node=None):
    """``(dict, None)`` or ``(None, reason)`` for config.toml text (from ``node``, named in the
    reason), parsed under the bound of plugin_utils/parse_bound.py."""
    if not isinstance(text, str):
        return None, "config.toml text is not a string"
    try:
        return parse_bound.load_toml(text, "config.toml", node), None
    except parse_bound.ParseError as e:
        return None, str(e)


def shown(value, limit=MAX_SHOWN):
    """A node-supplied string for a message, cut to ``limit`` characters."""
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _typed(tk, key, types, what):
    value = tk.get(key)
    if value is not None and not isinstance(value, types):
        raise StackShapeError("nvidia_stack.container_toolkit.%s is %s, not %s"
                              % (key, "a %s" % type(value).__name__, what))
    return value


def selected_settings(doc):
    """The settings that matter for security and injection, from a parsed config."""
    rt = _nested(doc, "nvidia-container-runtime") or {}
    features = _nested(doc, "features") or {}
    runtimes = rt.get("runtimes") if isinstance(rt, dict) else None
    if not (isinstance(runtimes, list) and all(isinstance(r, str) for r in runtimes)):
        runtimes = None
    return {
        "mode": rt.get("mode") if isinstance(rt, dict) and isinstance(rt.get("mode"), str) else None,
        "runtimes": runtimes,
        "features": dict((k, features[k]) for k in FEATURES if isinstance(features, dict)
                         and isinstance(features.get(k), bool)),
        "accept-nvidia-visible-devices-envvar-when-unprivileged":
            doc.get("accept-nvidia-visible-devices-envvar-when-unprivileged")
            if isinstance(doc.get("accept-nvidia-visible-devices-envvar-when-unprivileged"), bool) else None,
        "accept-nvidia-visible-devices-as-volume-mounts":
            doc.get("accept-nvidia-visible-devices-as-volume-mounts")
            if isinstance(doc.get("accept-nvidia-visible-devices-as-volume-mounts"), bool) else None,
        "cuda-compat-mode": _nested(doc, "nvidia-container-runtime", "modes", "legacy", "cuda-compat-mode"),
        "cdi-spec-dirs": _nested(doc, "nvidia-container-runtime", "modes", "cdi", "spec-dirs"),
    }


def injection_mode(mode, toolkit_version):
    """``(legacy|cdi|None, how)`` from the configured mode and the toolkit version."""
    if mode in (None, ""):
        mode = "auto"  # the runtime's default when the key is absent
    mode = str(mode).strip().lower()
    if mode == "legacy":
        return "legacy", "mode = legacy"
    if mode in ("cdi", "jit-cdi"):
        return "cdi", "mode = %s" % mode
    if mode == "auto":
        if not toolkit_version:
            return None, "mode = auto and the toolkit version is unknown"
        try:
            v = SemVer(str(toolkit_version).split("-", 1)[0])
        except ValueError:
            return None, "mode = auto and the toolkit version %r does not parse" % (toolkit_version,)
        if v < JIT_CDI_DEFAULT_FROM:
            return "legacy", "mode = auto resolves to legacy before toolkit 1.18.0"
        return "cdi", "mode = auto resolves to jit-cdi from toolkit 1.18.0"
    return None, "mode = %s is neither legacy nor CDI" % mode


def low_level_runtime(runtimes, installed):
    """The first candidate of ``runtimes`` installed on the node (runc/crun/...), or None."""
    installed = set(installed or [])
    for cand in runtimes if runtimes is not None else DEFAULT_RUNTIMES:
        name = str(cand).rstrip("/").rsplit("/", 1)[-1]
        if name in installed:
            return "runc" if name == "docker-runc" else name
    return None


def check_stack_shape(stack):
    """:class:`StackShapeError` unless the fields :func:`finish_stack_facts` reads have the
    module's types (a compromised node may return anything)."""
    if not isinstance(stack, dict):
        raise StackShapeError("nvidia_stack is a %s, not a dict" % type(stack).__name__)
    tk = stack.get("container_toolkit")
    if tk is None:
        return
    if not isinstance(tk, dict):
        raise StackShapeError("nvidia_stack.container_toolkit is a %s, not a dict" % type(tk).__name__)
    _typed(tk, "config_text", str, "text")
    _typed(tk, "config_error", str, "text")
    _typed(tk, "config_path", str, "text")
    _typed(tk, "version", str, "text")
    _typed(tk, "installed", bool, "a boolean")
    binaries = _typed(tk, "runtime_binaries", list, "a list")
    if binaries is not None and not all(isinstance(b, str) for b in binaries):
        raise StackShapeError("nvidia_stack.container_toolkit.runtime_binaries holds something other than names")


def finish_stack_facts(stack, node=None):
    """Complete the node's ``nvidia_stack`` (in place and returned): parse ``config_text`` (then
    dropped), fill ``config``, ``injection_mode``, ``runtime``, ``cuda_compat_hook_disabled``.
    Returns ``(stack, warnings)``; :class:`StackShapeError` when a field it reads has the wrong
    type (checked before anything is changed). ``node`` names the node in parse errors."""
    warnings = []
    check_stack_shape(stack)
    tk = stack.get("container_toolkit")
    if tk is None:
        return stack, warnings
    text = tk.pop("config_text", None)
    doc = None
    # A config the node could not read (config_error set there) was warned about by the module.
    if not tk.get("config_error") and text is not None:
        doc, err = parse_config(text, node)
        if err:
            tk["config_error"] = err
            warnings.append("nvidia-container-runtime config %s: %s" % (shown(tk.get("config_path")), err))
    settings = selected_settings(doc) if isinstance(doc, dict) else None
    tk["config"] = settings
    # A file that exists but could not be read or parsed: what it says is unknown (a missing
    # file means the runtime's built-in defaults).
    unreadable = settings is None and (text is not None or bool(tk.get("config_error")))
    if not tk.get("installed"):
        tk["injection_mode"] = None
        tk["injection_mode_reason"] = "the toolkit is not installed"
    elif unreadable:
        tk["injection_mode"] = None
        tk["injection_mode_reason"] = "config.toml could not be read"
    else:
        mode, how = injection_mode(settings.get("mode") if settings else None, tk.get("version"))
        tk["injection_mode"], tk["injection_mode_reason"] = mode, how
    runtimes = settings.get("runtimes") if settings else None
    if tk.get("installed") and not unreadable:
        tk["runtime"] = low_level_runtime(runtimes, tk.get("runtime_binaries"))
    else:
        tk["runtime"] = None
    if settings is not None:
        tk["cuda_compat_hook_disabled"] = bool(settings["features"].get("disable-cuda-compat-lib-hook", False))
    else:
        tk["cuda_compat_hook_disabled"] = None
    return stack, warnings


def _stack_facts(task, args):
    """The stack_facts module's result with its ``nvidia_stack`` finished (the warnings added)."""
    result = task.module(MODULE, args)
    if result.get("failed"):
        return result
    facts = result.get("ansible_facts")
    try:
        if not isinstance(facts, dict) or "nvidia_stack" not in facts:
            raise StackShapeError("no nvidia_stack fact")
        _stack, warnings = finish_stack_facts(facts["nvidia_stack"], task.hostname)
    except StackShapeError as e:
        raise runner.ActionFailed("stack_facts on %s returned a malformed result: %s" % (task.hostname, shown(str(e))))
    if warnings:
        existing = result.get("warnings")
        result["warnings"] = (existing if isinstance(existing, list) else
                              [] if existing is None else [shown(existing)]) + warnings
    return result


# the module validates its own options
ACTION = runner.Action(None, _stack_facts)
