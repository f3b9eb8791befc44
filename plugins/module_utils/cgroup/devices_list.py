# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""cgroup v1 ``devices.list`` parsed and evaluated with the kernel's own matching rules.

Node side, Python 3.8+. One exception must cover the whole requested access; exceptions with
the same type and numbers are merged; ``a *:* rwm`` means default-allow. A malformed line is
:class:`DevicesListError`, never a guess.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import collections
import re

MAX_U32 = 0xFFFFFFFF
# Access CUDA needs on the GPU, control and uvm nodes (open(O_RDWR)).
NEEDED_ACCESS = "rw"

_NUM_RE = re.compile(r"^(?:\*|[0-9]{1,10})$")
_ACCESS_RE = re.compile(r"^[rwm]+$")


class DevicesListError(ValueError):
    """A devices.list line that is not ``<a|b|c> <major|*>:<minor|*> <rwm>``."""

    def __init__(self, lineno, line, reason):
        self.lineno = lineno
        self.line = line
        self.reason = reason
        super(DevicesListError, self).__init__(
            "line %d %r: %s" % (lineno, line[:80], reason))


DeviceRule = collections.namedtuple("DeviceRule", "type major minor access")
"""One devices.list line: type a/b/c, major/minor int or None for ``*``, access frozenset."""


def _parse_number(text, lineno, line, what):
    if not _NUM_RE.match(text):
        raise DevicesListError(lineno, line, "%s %r is neither '*' nor a decimal number"
                               % (what, text))
    if text == "*":
        return None
    value = int(text)
    if value > MAX_U32:
        raise DevicesListError(lineno, line, "%s %s is larger than 32 bits" % (what, text))
    return value


def parse_devices_list(text):
    """Parse a cgroup v1 ``devices.list`` into a list of ``DeviceRule``.

    Raises ``DevicesListError`` on the first malformed line: a half-understood allow list
    would turn into wrong verdicts, so it is reported instead of guessed at.
    """
    rules = []
    for lineno, raw in enumerate((text or "").splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        fields = line.split()
        if fields == ["a"]:
            # what one writes to devices.allow; the kernel itself lists "a *:* rwm"
            rules.append(DeviceRule("a", None, None, frozenset("rwm")))
            continue
        if len(fields) != 3:
            raise DevicesListError(lineno, line, "expected 3 fields, found %d" % len(fields))
        dtype, numbers, access = fields
        if dtype not in ("a", "b", "c"):
            raise DevicesListError(lineno, line, "device type %r is not a, b or c" % dtype)
        parts = numbers.split(":")
        if len(parts) != 2:
            raise DevicesListError(lineno, line, "%r is not <major>:<minor>" % numbers)
        major = _parse_number(parts[0], lineno, line, "major")
        minor = _parse_number(parts[1], lineno, line, "minor")
        if not _ACCESS_RE.match(access):
            raise DevicesListError(lineno, line, "access %r is not made of r, w, m" % access)
        rules.append(DeviceRule(dtype, major, minor, frozenset(access)))
    return rules


def format_rule(rule):
    """The kernel's spelling of a rule (``c 195:* rw``)."""
    def num(value):
        return "*" if value is None else str(value)
    access = "".join(c for c in "rwm" if c in rule.access)
    return "%s %s:%s %s" % (rule.type, num(rule.major), num(rule.minor), access)


class DevicesList(object):
    """Evaluates device access the way the v1 devices controller does.

    A cgroup is either default-allow (the kernel then lists only ``a *:* rwm`` and hides any
    deny exceptions) or default-deny with an allow list. Exceptions with identical type and
    numbers are merged (the kernel ORs their access); a request is allowed when ONE exception
    matches type, major, minor and covers every requested access letter.
    """

    def __init__(self, rules):
        self.rules = list(rules)
        self.allow_all = any(r.type == "a" for r in self.rules)
        merged = collections.OrderedDict()
        for r in self.rules:
            if r.type == "a":
                continue
            key = (r.type, r.major, r.minor)
            merged[key] = merged.get(key, frozenset()) | r.access
        self.exceptions = [DeviceRule(k[0], k[1], k[2], v) for k, v in merged.items()]

    @classmethod
    def from_text(cls, text):
        return cls(parse_devices_list(text))

    def allows(self, dtype, major, minor, access=NEEDED_ACCESS):
        if self.allow_all:
            return True
        need = frozenset(access)
        for ex in self.exceptions:
            if ex.type != dtype:
                continue
            if ex.major is not None and ex.major != major:
                continue
            if ex.minor is not None and ex.minor != minor:
                continue
            if need <= ex.access:
                return True
        return False
