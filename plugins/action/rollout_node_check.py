# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of kubegpu.fleet.rollout_node_check: after a maintenance, run
kubegpu.fleet.gpu_facts, kubegpu.fleet.driver_guard (audit) and kubegpu.fleet.checkpoint_sync
(checked) on the node until they all pass or the deadline passes, in one task
(plugins/plugin_utils/rollout/node_check.py)."""
from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.action import runner
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.rollout import node_check


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _requires_connection = True

    def run(self, tmp=None, task_vars=None):
        return runner.run(self, super().run(tmp, task_vars), task_vars, node_check.ACTION)
