# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of kubegpu.fleet.stack_facts: the module's result, its ``nvidia_stack`` fact
finished on the controller (config.toml parsed under the parse bound; plugins/plugin_utils/stack/facts.py)."""
from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.action import runner
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.stack import facts


class ActionModule(ActionBase):

    TRANSFERS_FILES = False
    _requires_connection = True
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        return runner.run(self, super().run(tmp, task_vars), task_vars, facts.ACTION)
