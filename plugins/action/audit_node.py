# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of kubegpu.fleet.audit_node.

Like the driver_guard action plugin, it loads and validates the bundled known-bad driver
catalog together with the task's ``catalog_extra`` and passes it to the module in ``_catalog``.
A bad catalog fails only the driver_guard probe (as it fails only the driver_guard task when
the probes run as separate tasks); the other probes still run on the node. Afterwards it sets
the ``nvidia`` and ``kubelet`` facts from the probes that succeeded (as gpu_facts and
kubelet_facts do), on the controller, so the facts cross the connection only once.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.plugins.action import ActionBase

from ansible_collections.kubegpu.fleet.plugins.action.driver_guard import args_with_catalog, redact_catalog

MODULE = "kubegpu.fleet.audit_node"
PROBES = ("gpu_facts", "kubelet_facts", "driver_guard", "checkpoint_sync", "cgroup_devices")


class ActionModule(ActionBase):

    TRANSFERS_FILES = False
    _requires_connection = True

    def run(self, tmp=None, task_vars=None):
        self._supports_check_mode = True
        self._supports_async = False
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp

        try:
            args, catalog, catalog_error = args_with_catalog(self._task.args, "audit_node")
        except ValueError as e:
            result.update(failed=True, msg=str(e))
            return result

        module_result = self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars)
        if catalog is not None:
            redact_catalog(module_result, catalog)
        probes = module_result.get("probes")
        if isinstance(probes, dict):
            if catalog_error is not None:
                # What the driver_guard task reports for a bad catalog, before reaching the node.
                probes["driver_guard"] = {"changed": False, "failed": True, "msg": catalog_error}
                failed = set(module_result.get("failed_probes") or []) | set(["driver_guard"])
                module_result["failed_probes"] = [n for n in PROBES if n in failed]
            facts = {}
            for probe, key in (("gpu_facts", "nvidia"), ("kubelet_facts", "kubelet")):
                res = probes.get(probe) or {}
                if not res.get("failed") and key in (res.get("ansible_facts") or {}):
                    facts[key] = res["ansible_facts"][key]
            if facts:
                module_result["ansible_facts"] = facts
        result.update(module_result)
        return result
