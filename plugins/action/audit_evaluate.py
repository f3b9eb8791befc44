# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side: evaluate one node's gathered facts into audit findings (no connection).

kubegpu.fleet.audit_node evaluates in the same task as its probes, with the same helpers
(plugin_utils/audit_eval.py); this module is for results gathered by other tasks.
"""
from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.kubegpu.fleet.plugins.plugin_utils import audit_eval


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _requires_connection = False

    ARGSPEC = {
        "node": {"type": "str", "required": True},
        "nvidia": {"type": "dict", "default": {}},
        "kubelet": {"type": "dict", "default": {}},
        "driver_guard": {"type": "dict", "default": {}},
        "checkpoint": {"type": "dict", "default": {}},
        "cgroups": {"type": "dict", "default": {}},
        "stack": {"type": "dict", "default": {}},
        "api": {"type": "dict", "default": {}},
        "errors": {"type": "dict", "default": {}},
        "pending_threshold": {"type": "int", "default": 300},
        "memory_min_fraction": {"type": "float", "default": 0.8},
        "skip": {"type": "list", "elements": "str", "default": []},
        "expected_gpus": {"type": "int"},
        "unreachable": {"type": "str", "default": ""},
    }

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _dummy, args = self.validate_argument_spec(argument_spec=self.ARGSPEC)
        error = audit_eval.check_evaluation_options(args)
        if error:
            result.update(failed=True, msg=error)
            return result
        if args["unreachable"]:
            # The node probes never reached the node: listed as unreachable, never dropped.
            audit = audit_eval.unreachable_audit(args["node"], args["unreachable"])
            result.update(changed=False, findings=[], ansible_facts={"kubegpu_audit": audit})
            return result
        ctx = dict((k, args[k]) for k in ("nvidia", "kubelet", "driver_guard", "checkpoint", "cgroups", "stack",
                                          "api", "errors"))
        catalog, catalog_error = audit_eval.load_evaluation_catalog()
        if catalog_error is not None:
            ctx["errors"] = dict(ctx["errors"], catalog_v2=catalog_error)
        ctx["catalog"] = catalog or []
        findings, audit = audit_eval.evaluate(args["node"], ctx, args)
        result.update(changed=False, findings=findings, ansible_facts={"kubegpu_audit": audit})
        return result
