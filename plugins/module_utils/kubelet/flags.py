# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The kubelet's command line parsed the way its flag library (spf13/pflag) parses it.

Node side, Python 3.8+. :func:`parse_flags` gives every ``(name, value)`` in command-line
order; the other functions build what the kubelet builds from them: the last value of a scalar
flag, a ``mapStringString`` (``--kube-reserved=cpu=1,memory=2Gi``) or a ``stringSlice``.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

# pflag boolean flags of the kubelet (current and removed ones that old nodes still pass).
# A boolean flag never takes the next argument as its value: ``--fail-swap-on false`` is an error
# for the kubelet, so ``false`` would be a stray argument.
BOOL_FLAGS = frozenset([
    "add-dir-header", "allow-privileged", "alsologtostderr", "anonymous-auth",
    "authentication-token-webhook", "cgroups-per-qos", "containerized", "contention-profiling",
    "cpu-cfs-quota", "docker-disable-shared-pid", "enable-cadvisor-json-endpoints",
    "enable-controller-attach-detach", "enable-debugging-handlers", "enable-load-reader",
    "enable-server", "exit-on-lock-contention", "experimental-allocatable-ignore-eviction",
    "experimental-check-node-capabilities-before-mount", "experimental-dockershim",
    "experimental-kernel-memcg-notification", "fail-swap-on", "help", "kernel-memcg-notification",
    "keep-terminated-pod-volumes", "local-storage-capacity-isolation", "log-json-split-stream",
    "logtostderr", "make-iptables-util-chains", "one-output", "protect-kernel-defaults",
    "really-crash-for-testing", "redirect-container-streaming", "register-node",
    "register-schedulable", "rotate-certificates", "rotate-server-certificates", "runonce",
    "seccomp-default", "serialize-image-pulls", "skip-headers", "skip-log-headers", "version",
    "windows-service",
])
SHORT_FLAGS = {"v": "v", "h": "help"}
_TRUE_STRINGS = frozenset(["1", "t", "T", "TRUE", "true", "True"])
_FALSE_STRINGS = frozenset(["0", "f", "F", "FALSE", "false", "False"])
_NUMBER_RE = re.compile(r"^-[0-9.]")


def _norm_flag(name):
    return name.replace("_", "-")


def _looks_like_flag(arg):
    return arg.startswith("-") and len(arg) > 1 and not _NUMBER_RE.match(arg)


def _coerce_bool(name, value):
    if name in BOOL_FLAGS and isinstance(value, str):
        if value in _TRUE_STRINGS:
            return True
        if value in _FALSE_STRINGS:
            return False
    return value


def parse_flags(args):
    """Parse kubelet arguments (without the program name) the way pflag does.

    Handles ``--flag=value``, ``--flag value``, bare boolean flags, ``-v=4``/``-v 4``/``-v4``,
    ``_`` in names (pflag normalises it to ``-``) and ``--`` ending the flags. Returns
    ``(pairs, positional)``: every ``(name, value)`` in command-line order (bare booleans as
    True) and the arguments that are not flags.
    """
    pairs = []
    positional = []
    i = 0
    n = len(args)
    while i < n:
        arg = args[i]
        i += 1
        if arg == "--":
            positional.extend(args[i:])
            break
        if arg.startswith("--") and len(arg) > 2:
            body = arg[2:]
            if "=" in body:
                name, value = body.split("=", 1)
                name = _norm_flag(name)
                pairs.append((name, _coerce_bool(name, value)))
                continue
            name = _norm_flag(body)
        elif _looks_like_flag(arg):
            name = SHORT_FLAGS.get(arg[1], arg[1])
            rest = arg[2:]
            if rest:
                value = rest[1:] if rest.startswith("=") else rest
                pairs.append((name, _coerce_bool(name, value)))
                continue
        else:
            positional.append(arg)
            continue
        if name in BOOL_FLAGS:
            pairs.append((name, True))
        elif i < n and not _looks_like_flag(args[i]):
            pairs.append((name, args[i]))
            i += 1
        else:
            pairs.append((name, True))
    return pairs, positional


def flags_dict(pairs):
    """``({name: last value}, {name: [all values]} for names given more than once)``."""
    last = {}
    seen = {}
    for name, value in pairs:
        last[name] = value
        seen.setdefault(name, []).append(value)
    return last, dict((k, v) for k, v in seen.items() if len(v) > 1)


def flag_map(pairs, name, separator="="):
    """The map a ``mapStringString`` flag builds (``--kube-reserved=cpu=1,memory=2Gi``).

    Like pflag, the first occurrence replaces the config file's map and later occurrences
    merge into it. None when the flag is absent. Raises ValueError for a malformed pair.
    """
    out = None
    for flag, value in pairs:
        if flag != name:
            continue
        if out is None:
            out = {}
        text = "" if value is True else str(value)
        for item in text.split(","):
            if not item:
                continue
            if separator not in item:
                raise ValueError("--%s: malformed pair %r, expected key%svalue"
                                 % (name, item, separator))
            key, val = item.split(separator, 1)
            out[key.strip()] = val.strip()
    return out


def flag_list(pairs, name):
    """The list a ``stringSlice`` flag builds (first occurrence replaces, later ones append)."""
    out = None
    for flag, value in pairs:
        if flag != name:
            continue
        if out is None:
            out = []
        text = "" if value is True else str(value)
        out.extend(item.strip() for item in text.split(",") if item.strip())
    return out


def flag_value(pairs, name):
    value = None
    for flag, val in pairs:
        if flag == name:
            value = val
    return value
