# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Device-plugin allocation calls the kubelet started and never finished, from its log.

Node side, Python 3.8+.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

_GPA_MSG = '"Issuing a GetPreferredAllocation call for container"'
_ALLOC_MSG = '"Making allocation request for device plugin"'
_KLOG_KV_RE = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
_EPOCH_RE = re.compile(r"^(\d{9,11}(?:\.\d+)?)\s")


def unanswered_allocations(lines, now=None):
    """Device-plugin calls the kubelet issued and never got past.

    ``lines`` are kubelet log lines, optionally prefixed with a Unix time as
    ``journalctl -o short-unix`` prints them. The kubelet (verbosity >= 4) logs
    "Issuing a GetPreferredAllocation call for container" before the RPC and "Making allocation
    request for device plugin" after it returns. Admission is serial, so any later allocation
    request means the earlier calls returned; the calls after the last one are still waiting.
    Returns ``[{"pod", "container", "time", "age_seconds"}]`` (time/age None without timestamps).
    """
    pending = []
    for line in lines:
        if _ALLOC_MSG in line:
            pending = []
            continue
        if _GPA_MSG not in line:
            continue
        ts = None
        m = _EPOCH_RE.match(line)
        if m:
            ts = float(m.group(1))
        kv = dict(_KLOG_KV_RE.findall(line.split(_GPA_MSG, 1)[1]))
        pending.append({"pod": kv.get("pod") or kv.get("podUID"), "container": kv.get("containerName"),
                        "time": ts, "age_seconds": (int(now - ts) if (now is not None and ts is not None) else None)})
    return pending
