# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""cgroup_devices run helper (the body of kubegpu.fleet.cgroup_devices).

Node side: Python 3.8+. See node_probes.py for the calling convention.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubegpu.fleet.plugins.module_utils.cgroup.devices import audit as cgroup_audit
from ansible_collections.kubegpu.fleet.plugins.module_utils.cgroup.kubepods import CgroupDevicesError
from ansible_collections.kubegpu.fleet.plugins.module_utils._common.node_probes import ProbeFailed


def cgroup_devices_run(params, warn):
    """cgroup_devices: ``dict(changed=False, **audit)``."""
    try:
        result = cgroup_audit(cgroup_root=params["cgroup_root"], proc_path=params["proc_path"],
                              dev_path=params["dev_path"], mode=params["mode"],
                              kubepods_path=params["kubepods_path"],
                              probe_method=params["probe_method"],
                              probe_timeout=params["probe_timeout"],
                              process_evidence_enabled=params["process_evidence"])
    except CgroupDevicesError as e:
        raise ProbeFailed(str(e))
    for warning in result["host_warnings"]:
        warn(warning)
    return dict(changed=False, **result)
