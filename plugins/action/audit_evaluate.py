# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side: evaluate one node's gathered facts into audit findings (no connection)."""
from __future__ import annotations

import math

from ansible.plugins.action import ActionBase

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.findings import FINDINGS, evaluate_node


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
        if args["pending_threshold"] < 0:
            result.update(failed=True, msg="pending_threshold must be a number of seconds >= 0, got %r"
                          % (args["pending_threshold"],))
            return result
        fraction = args["memory_min_fraction"]
        if math.isnan(fraction) or math.isinf(fraction) or fraction < 0:
            result.update(failed=True, msg="memory_min_fraction must be a finite number >= 0 (a fraction "
                          "such as 0.8), got %r" % (fraction,))
            return result
        if args["expected_gpus"] is not None and args["expected_gpus"] < 0:
            result.update(failed=True, msg="expected_gpus must be a GPU count >= 0, got %r"
                          % (args["expected_gpus"],))
            return result
        unknown = sorted(set(args["skip"]) - set(FINDINGS))
        if unknown:
            result.update(failed=True, msg="unknown finding id(s) in skip: %s (known: %s)"
                          % (", ".join(unknown), ", ".join(sorted(FINDINGS))))
            return result
        if args["unreachable"]:
            # The node probes never reached the node: listed as unreachable, never dropped.
            audit = {"node": args["node"], "status": "unreachable", "error": args["unreachable"], "findings": []}
            result.update(changed=False, findings=[], ansible_facts={"kubegpu_audit": audit})
            return result
        ctx = dict((k, args[k]) for k in ("nvidia", "kubelet", "driver_guard", "checkpoint", "cgroups", "api",
                                          "errors"))
        findings = evaluate_node(ctx, pending_threshold_s=args["pending_threshold"],
                                 memory_min_fraction=args["memory_min_fraction"], skip=args["skip"],
                                 expected_gpus=args["expected_gpus"])
        audit = {"node": args["node"], "status": "audited", "findings": findings}
        result.update(changed=False, findings=findings, ansible_facts={"kubegpu_audit": audit})
        return result
