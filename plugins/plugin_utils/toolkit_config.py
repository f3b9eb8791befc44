# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The NVIDIA Container Toolkit's ``config.toml`` on the controller (pure functions).

The node module (``kubegpu.fleet.stack_facts``, or the ``stack_facts`` probe of
``kubegpu.fleet.audit_node``) returns the file as bounded raw text; :func:`finish_stack_facts`
parses it with the standard library's ``tomllib`` (Python 3.11+; ``tomli`` where an older
controller has it) and fills in the facts that depend on it:

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

A broken, non-UTF-8 or too large file is a warning and ``config: null``, never an exception.
"""
from __future__ import annotations

from ansible_collections.kubegpu.fleet.plugins.module_utils._common.versions import SemVer

try:
    import tomllib as _toml
except ImportError:  # pragma: no cover - Python < 3.11 controllers
    try:
        import tomli as _toml
    except ImportError:
        _toml = None

DEFAULT_RUNTIMES = ["docker-runc", "runc", "crun"]
JIT_CDI_DEFAULT_FROM = SemVer("1.18.0")
FEATURES = ("disable-cuda-compat-lib-hook", "allow-cuda-compat-libs-from-container",
            "allow-ldconfig-from-container", "disable-imex-channel-creation",
            "ignore-imex-channel-requests", "no-additional-gids-for-device-nodes",
            "allow-unknown-oci-spec-fields")


def parse_config(text):
    """``(dict, None)`` or ``(None, reason)`` for config.toml text."""
    if _toml is None:
        return None, "no TOML parser on the controller (Python 3.11+ tomllib, or tomli)"
    if not isinstance(text, str):
        return None, "config.toml text is not a string"
    try:
        return _toml.loads(text), None
    except Exception as e:  # pylint: disable=broad-except  # tomllib.TOMLDecodeError and ValueError
        return None, "config.toml is not valid TOML: %s" % e


def _get(d, *path):
    cur = d
    for p in path:
        if not isinstance(cur, dict) or p not in cur:
            return None
        cur = cur[p]
    return cur


def selected_settings(doc):
    """The settings that matter for security and injection, from a parsed config."""
    rt = _get(doc, "nvidia-container-runtime") or {}
    features = _get(doc, "features") or {}
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
        "cuda-compat-mode": _get(doc, "nvidia-container-runtime", "modes", "legacy", "cuda-compat-mode"),
        "cdi-spec-dirs": _get(doc, "nvidia-container-runtime", "modes", "cdi", "spec-dirs"),
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


def finish_stack_facts(stack):
    """Complete the node's ``nvidia_stack`` (in place and returned): parse ``config_text`` (then
    dropped), fill ``config``, ``injection_mode``, ``runtime``, ``cuda_compat_hook_disabled``.
    Returns ``(stack, warnings)``."""
    warnings = []
    if not isinstance(stack, dict):
        return stack, warnings
    tk = stack.get("container_toolkit")
    if not isinstance(tk, dict):
        return stack, warnings
    text = tk.pop("config_text", None)
    doc = None
    # A config the node could not read (config_error set there) was warned about by the module.
    if not tk.get("config_error") and text is not None:
        doc, err = parse_config(text)
        if err:
            tk["config_error"] = err
            warnings.append("nvidia-container-runtime config %s: %s" % (tk.get("config_path"), err))
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
