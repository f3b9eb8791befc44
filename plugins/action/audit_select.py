# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of kubegpu.fleet.audit_select: nodes chosen from the published audit results
with a JMESPath expression (plugin_utils/audit/select.py)."""
from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.action import runner
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit import select


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        return runner.run(self, super().run(tmp, task_vars), task_vars, select.ACTION)
