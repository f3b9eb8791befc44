# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of kubegpu.fleet.stack_facts.

The module returns the container toolkit's config.toml as bounded raw text (nodes may have
no TOML parser); this plugin parses it here with ``tomllib`` and fills in the facts that
depend on it (plugins/plugin_utils/toolkit_config.py), then sets ``nvidia_stack``. A config
that does not parse is a warning and ``config: null``.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.plugins.action import ActionBase

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.toolkit_config import finish_stack_facts

MODULE = "kubegpu.fleet.stack_facts"


class ActionModule(ActionBase):

    TRANSFERS_FILES = False
    _requires_connection = True

    def run(self, tmp=None, task_vars=None):
        self._supports_check_mode = True
        self._supports_async = False
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        module_result = self._execute_module(module_name=MODULE, module_args=dict(self._task.args),
                                             task_vars=task_vars)
        facts = module_result.get("ansible_facts")
        if isinstance(facts, dict) and isinstance(facts.get("nvidia_stack"), dict):
            _stack, warnings = finish_stack_facts(facts["nvidia_stack"])
            if warnings:
                module_result.setdefault("warnings", []).extend(warnings)
        result.update(module_result)
        return result
