# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side: turn one node's audit findings into its remediation plan (no connection)."""
from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.findings import FINDINGS
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.remediation import plan_node


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _requires_connection = False

    ARGSPEC = {
        "audit": {"type": "dict", "required": True},
        "skip_findings": {"type": "list", "elements": "str", "default": []},
    }

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _dummy, args = self.validate_argument_spec(argument_spec=self.ARGSPEC)
        unknown = sorted(set(args["skip_findings"]) - set(FINDINGS))
        if unknown:
            result.update(failed=True, msg="unknown finding id(s) in skip_findings: %s (known: %s)"
                          % (", ".join(unknown), ", ".join(sorted(FINDINGS))))
            return result
        plan = plan_node(args["audit"], skip_findings=args["skip_findings"])
        result.update(changed=False, plan=plan, ansible_facts={"kubegpu_remediation": plan})
        return result
