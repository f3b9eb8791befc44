# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of kubegpu.fleet.toolkit_config: the node module reads and writes config.toml,
the edit is made here with tomlkit under the parse bound (plugins/plugin_utils/stack/toolkit_config.py)."""
from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.action import runner
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.stack import toolkit_config


class ActionModule(ActionBase):

    TRANSFERS_FILES = False
    _requires_connection = True
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        return runner.run(self, super().run(tmp, task_vars), task_vars, toolkit_config.ACTION)
