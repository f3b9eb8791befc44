# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Tolerant reads of node results and API objects: a field of the wrong type reads as empty.

Node results and API objects are not trusted to have the documented shape (a broken or
compromised node, a proxy, a hand-written option): the audit reads every field through these,
so a malformed document gives fewer findings or a ``malformed`` note, never an exception.
"""
from __future__ import annotations

import math


def as_dict(value):
    """``value`` when it is a mapping, else {}."""
    return value if isinstance(value, dict) else {}


def dict_items(value):
    """The dict items of ``value`` when it is a list, else []."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def as_list(value):
    """``value`` when it is a list (items of any type), else []."""
    return value if isinstance(value, list) else []


def text(value):
    """``value`` when it is a non-empty string, else None."""
    return value if isinstance(value, str) and value else None


def nonblank(value):
    """``value`` when it is a string with more than white space, else None."""
    return value if isinstance(value, str) and value.strip() else None


def number(value, default=0):
    """A number from a result field (bool, text and NaN are not numbers), else ``default``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return default
    return value


def nested(d, *path, **kw):
    """``d[path[0]][path[1]]...``, ``default`` (None) where a key is missing or a level is no dict."""
    default = kw.get("default")
    cur = d
    for p in path:
        if not isinstance(cur, dict) or p not in cur:
            return default
        cur = cur[p]
    return cur
