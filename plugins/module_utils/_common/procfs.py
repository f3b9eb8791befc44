# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parsers for the procfs files NVIDIA nodes expose (node side, Python 3.8+).

Every parser takes text and returns plain data; malformed lines are skipped, never raised on,
so a truncated or odd file degrades to "not found" instead of a traceback. Paths are always
built from a caller-supplied ``proc_path`` so the same code audits a host mounted at /host.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

from ansible_collections.kubegpu.fleet.plugins.module_utils._common import safe_io

# /proc/devices names the GPU major "nvidia-frontend" before driver 550.40 and "nvidia" after.
NVIDIA_GPU_MAJOR_NAMES = ("nvidia", "nvidia-frontend")
NVIDIA_GPU_MAJOR_DEFAULT = 195

_NVRM_RE = re.compile(r"Kernel Module(?:\s+for\s+\S+)?\s+(\d+\.\d+(?:\.\d+)?)\b")
_MIG_RE = re.compile(r"^gpu(\d+)/gi(\d+)(?:/ci(\d+))?/access$")


def read_text(path, limit=1 << 20):
    """Return the file's text (at most ``limit`` bytes) or None when it cannot be read.

    Reads through :mod:`safe_io`: a FIFO, socket, device or directory where a file is expected
    never blocks and reads as None, like a file larger than ``limit`` (never a silent cut).
    Use :func:`read_text_reason` where the caller must say why a file could not be read.
    """
    return read_text_reason(path, limit)[0]


def read_text_reason(path, limit=1 << 20):
    """``(text, None)``, ``(None, None)`` for a missing file, or ``(None, reason)``."""
    return safe_io.try_read_text(path, limit)


def proc_file(proc_path, *parts):
    return os.path.join(proc_path, *parts)


def _is_decimal(text):
    """ASCII digits only: ``str.isdigit`` accepts ``"\u00b2"`` and other digits ``int`` refuses."""
    return safe_io.is_ascii_digits(text)


def parse_proc_devices(text):
    """Parse /proc/devices into ``{"character": {name: [majors]}, "block": {...}}``."""
    out = {"character": {}, "block": {}}
    section = None
    for line in (text or "").splitlines():
        s = line.strip()
        if not s:
            continue
        low = s.lower()
        if low.startswith("character devices"):
            section = "character"
            continue
        if low.startswith("block devices"):
            section = "block"
            continue
        if section is None:
            continue
        fields = s.split(None, 1)
        if len(fields) != 2 or not _is_decimal(fields[0]):
            continue
        major = int(fields[0])
        if major > 4095:  # MAJORBITS = 12
            continue
        out[section].setdefault(fields[1].strip(), []).append(major)
    return out


def char_major(devices, name):
    """First character-device major registered under ``name``, else None."""
    majors = devices.get("character", {}).get(name)
    return majors[0] if majors else None


def nvidia_gpu_major(devices):
    """(major, name) of the NVIDIA GPU major, accepting both pre- and post-550.40 names."""
    for name in NVIDIA_GPU_MAJOR_NAMES:
        major = char_major(devices, name)
        if major is not None:
            return major, name
    return None, None


def parse_proc_modules(text):
    """Parse /proc/modules into ``{name: {"size", "refcount", "state"}}``.

    ``refcount`` is None where the kernel prints ``-``: a kernel built without
    CONFIG_MODULE_UNLOAD (modules can never be unloaded) writes ``nvidia 14299136 - - Live
    0xffffffffc0400000 (O)``; the module is loaded all the same."""
    out = {}
    for line in (text or "").splitlines():
        f = line.split()
        if len(f) < 3 or not _is_decimal(f[1]) or not (f[2] == "-" or _is_decimal(f[2])):
            continue
        size = int(f[1])
        refcount = None if f[2] == "-" else int(f[2])
        out[f[0]] = {"size": size, "refcount": refcount,
                     "state": f[4] if len(f) > 4 else "Live"}
    return out


def parse_nvidia_version(text):
    """Kernel-module version from /proc/driver/nvidia/version ("NVRM version: ..."), or None."""
    for line in (text or "").splitlines():
        if "NVRM" not in line:
            continue
        m = _NVRM_RE.search(line)
        if m:
            return m.group(1)
    return None


def parse_mig_minors(text):
    """Parse /proc/driver/nvidia-caps/mig-minors.

    Returns a list of ``{"kind": "gi"|"ci"|"config"|"monitor", "gpu", "gi", "ci", "minor"}``;
    ``gpu``/``gi``/``ci`` are None where they do not apply.
    """
    out = []
    for line in (text or "").splitlines():
        f = line.split()
        if len(f) != 2 or not _is_decimal(f[1]):
            continue
        name, minor = f[0], int(f[1])
        if name in ("config", "monitor"):
            out.append({"kind": name, "gpu": None, "gi": None, "ci": None, "minor": minor})
            continue
        m = _MIG_RE.match(name)
        if not m:
            continue
        gpu, gi, ci = m.groups()
        out.append({"kind": "ci" if ci is not None else "gi", "gpu": int(gpu), "gi": int(gi),
                    "ci": int(ci) if ci is not None else None, "minor": minor})
    return out
