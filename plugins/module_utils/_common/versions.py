# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Version parsing shared by every kubegpu.fleet module (node side, Python 3.8+).

NVIDIA driver versions are ``BRANCH.MINOR[.PATCH]`` (570.172.08, 550.40, 525.105.17). They
compare numerically per component; the branch is the first component. Debian/RPM package
versions carry a revision/epoch (``570.172.08-0ubuntu1``, ``3:570.172.08-1.el9``) that is
stripped before parsing.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.kubegpu.fleet.plugins.module_utils._common.safe_io import is_ascii_digits

# Digits are ASCII 0-9 (re.ASCII): a str pattern's \d also takes Arabic-Indic or full-width
# digits, which int() turns into numbers no package version or tag is written with.
_DRIVER_RE = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?$", re.ASCII)
_SEMVER_RE = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$", re.ASCII)


class _Ordered:
    """Total ordering on ``key()``; equal only to an instance of the same class."""

    __slots__ = ()

    def key(self):
        raise NotImplementedError

    def __eq__(self, other):
        return type(other) is type(self) and self.key() == other.key()

    def __ne__(self, other):
        return not self == other

    def __lt__(self, other):
        return self.key() < other.key()

    def __le__(self, other):
        return self.key() <= other.key()

    def __gt__(self, other):
        return self.key() > other.key()

    def __ge__(self, other):
        return self.key() >= other.key()

    def __hash__(self):
        return hash(self.key())


class DriverVersion(_Ordered):
    """An NVIDIA driver version. Ordering is numeric per component."""

    __slots__ = ("text", "parts")

    def __init__(self, text):
        if not isinstance(text, str):
            raise ValueError("driver version must be a string, got %r" % (text,))
        clean = strip_package_revision(text.strip())
        m = _DRIVER_RE.match(clean)
        if not m:
            raise ValueError("cannot parse NVIDIA driver version %r (expected BRANCH.MINOR[.PATCH], "
                             "e.g. 570.172.08)" % (text,))
        self.text = clean
        self.parts = tuple(int(p) for p in m.groups() if p is not None)

    @property
    def branch(self):
        return self.parts[0]

    def key(self):
        return self.parts + (0,) * (3 - len(self.parts))

    def __repr__(self):
        return "DriverVersion(%r)" % self.text

    def __str__(self):
        return self.text


def strip_package_revision(text):
    """``3:570.172.08-0ubuntu1`` -> ``570.172.08``; plain versions pass through."""
    if ":" in text:
        text = text.split(":", 1)[1]
    if "-" in text:
        text = text.split("-", 1)[0]
    return text


def driver_branch(text):
    """Branch number of a driver version string, or None when it does not parse."""
    try:
        return DriverVersion(text).branch
    except ValueError:
        return None


class SemVer(_Ordered):
    """Semantic version with pre-release ordering (1.0.0-beta5 < 1.0.0-rc.1 < 1.0.0).

    Used for the device plugin (``v0.17.0``, ``1.0.0-beta5``) and the container toolkit.
    """

    __slots__ = ("text", "core", "pre")

    def __init__(self, text):
        if not isinstance(text, str):
            raise ValueError("version must be a string, got %r" % (text,))
        m = _SEMVER_RE.match(text.strip())
        if not m:
            raise ValueError("cannot parse version %r (expected [v]MAJOR.MINOR.PATCH[-PRE])" % (text,))
        self.text = text.strip()
        self.core = tuple(int(x) for x in m.groups()[:3])
        self.pre = tuple(_pre_key(p) for p in m.group(4).split(".")) if m.group(4) else None

    def key(self):
        # A release sorts after all of its pre-releases.
        return (self.core, (1,) if self.pre is None else (0,) + self.pre)

    def __repr__(self):
        return "SemVer(%r)" % self.text


def _pre_key(part):
    # Split "beta5" into ("beta", 5) so beta5 < beta10; numeric identifiers sort before text.
    m = re.match(r"^([A-Za-z-]*)([0-9]*)$", part)
    if m and m.group(2):
        return (1, m.group(1), int(m.group(2)))
    return (1, part, -1) if not is_ascii_digits(part) else (0, "", int(part))


class DevicePluginVersion(_Ordered):
    """NVIDIA k8s-device-plugin release order, which plain semver gets wrong.

    The plugin's tags went ``v1.8``..``v1.12`` (versioned after Kubernetes), then
    ``1.0.0-beta``..``1.0.0-beta6``, then restarted at ``v0.6.0``/``v0.7.x`` and up (``v0.17.0``,
    ``v0.20.0``); its maintainers call v0.7.1 newer than 1.11 (NVIDIA/nvidia-docker#966), so
    semver would rank the current releases below 1.0.0-beta5. Eras, oldest first:
    0 = ``v1.8``-``v1.12``, 1 = ``1.0.0-betaN``, 2 = ``v0.x.y``, 3 = a final ``1.0.0`` or later.
    """

    __slots__ = ("text", "era", "parts")

    _K8S_ERA = re.compile(r"^v?1\.(\d+)$", re.ASCII)
    _BETA = re.compile(r"^v?1\.0\.0-beta(\d*)$", re.ASCII)

    def __init__(self, text):
        if not isinstance(text, str):
            raise ValueError("device plugin version must be a string, got %r" % (text,))
        t = text.strip()
        m = self._K8S_ERA.match(t)
        if m:
            self.text, self.era, self.parts = t, 0, (int(m.group(1)),)
            return
        m = self._BETA.match(t)
        if m:
            self.text, self.era, self.parts = t, 1, (int(m.group(1) or 0),)
            return
        sv = SemVer(t)  # raises ValueError naming the value
        self.text = t
        self.era = 2 if sv.core[0] == 0 else 3
        self.parts = sv.key()

    def key(self):
        return (self.era, self.parts)

    def passes_device_specs(self):
        """Whether this release has --pass-device-specs (added in 1.0.0-beta5, commit ea604b28)."""
        return self.era >= 2 or (self.era == 1 and self.parts[0] >= 5)

    def __repr__(self):
        return "DevicePluginVersion(%r)" % self.text
