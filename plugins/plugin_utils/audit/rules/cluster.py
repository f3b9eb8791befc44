# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Cluster-wide audit rules: the device plugin DaemonSets."""
from __future__ import annotations

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.fields import dict_items as _l
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.finding_types import finding
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.rules.devices import MIN_PLUGIN_FOR_DEVICE_SPECS, plugin_version


def rule_device_plugin_outdated(daemonsets):
    """cluster.device_plugin_outdated: a device plugin DaemonSet (summaries of the cluster view) whose
    image is older than the first release that passes device specs."""
    out = []
    for ds in _l(daemonsets):
        v = plugin_version(ds.get("image"))
        if v is not None and v < MIN_PLUGIN_FOR_DEVICE_SPECS:
            f = finding("cluster.device_plugin_outdated", {"daemonset": ds.get("name"), "namespace": ds.get("namespace"),
                                                           "image": ds.get("image")},
                        remediation={"summary": "upgrade the device plugin"})
            f["node"] = None
            out.append(f)
    return out
