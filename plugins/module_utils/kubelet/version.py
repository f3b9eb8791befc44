# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The kubelet's version from the node's package database (dpkg or rpm), never by running it.

Node side, Python 3.8+.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

from ansible_collections.kubegpu.fleet.plugins.module_utils._common import safe_io
from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet.process import COMMAND_TIMEOUT

DEFAULT_PACKAGE = "kubelet"
_PKG_VERSION_RE = re.compile(r"^(?:[0-9]+:)?v?([0-9]+\.[0-9]+\.[0-9]+[0-9A-Za-z.+~]*?)(?:-[0-9A-Za-z.+~]+)?$")


def package_version(get_bin_path, package=DEFAULT_PACKAGE, timeout=COMMAND_TIMEOUT):
    """The kubelet version from the package database; ``(version, source, error)``.

    Asks ``dpkg-query`` then ``rpm`` (each with a deadline and a bounded output; bytes that are
    not UTF-8 are replaced, never an error) for ``package``. ``version`` is ``v<upstream>``
    (``1.31.4-1.1`` -> ``v1.31.4``), ``source`` says which database, e.g.
    ``package:kubelet 1.31.4-1.1 (dpkg)``. Nothing found through /proc is ever executed.
    """
    safe_io.check_package_name(package, "kubelet package")
    errors = []
    for tool, argv in (("dpkg-query", ["-W", "-f=${db:Status-Abbrev}|${Version}", "--", package]),
                       ("rpm", ["-q", "--qf", "ii |%{VERSION}-%{RELEASE}", "--", package])):
        binary = get_bin_path(tool) if get_bin_path else None
        if not binary:
            continue
        try:
            res = safe_io.run_command([binary] + argv, timeout, limit=4096,
                                      env=dict(os.environ, LC_ALL="C"))
        except (safe_io.UnsafeInput, OSError) as e:
            errors.append("%s: %s" % (tool, e))
            continue
        text = res.text().strip()
        if res.rc != 0 or "|" not in text:
            errors.append("%s: package %s is not installed" % (tool, package))
            continue
        status, raw = text.split("|", 1)
        raw = raw.strip()
        if not status.startswith("ii"):
            errors.append("%s: package %s is not installed (status %s)"
                          % (tool, package, status.strip()))
            continue
        m = _PKG_VERSION_RE.match(raw)
        if not m:
            errors.append("%s: package %s has version %r, not a Kubernetes version"
                          % (tool, package, raw[:100]))
            continue
        return "v" + m.group(1), "package:%s %s (%s)" % (package, raw, tool.split("-", 1)[0]), None
    return None, None, "; ".join(errors) or "no package database (dpkg-query, rpm) on the node"
