# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of kubegpu.fleet.stack_facts.

The module returns the container toolkit's config.toml as bounded raw text (nodes may have
no TOML parser); this plugin parses it here with ``tomllib``, under the parse bound of
plugins/plugin_utils/parse_bound.py, and fills in the facts that depend on it
(plugins/plugin_utils/toolkit_config.py), then sets ``nvidia_stack``. A config that does not
parse, or that the bound refuses or stops, is a warning and ``config: null``. A result whose
fields have the wrong types (a compromised node) fails the task with a message naming the field.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.plugins.action import ActionBase

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.toolkit_config import StackShapeError, finish_stack_facts, shown

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
        node = (task_vars or {}).get("inventory_hostname")
        facts = module_result.get("ansible_facts")
        if not module_result.get("failed"):
            try:
                if not isinstance(facts, dict) or "nvidia_stack" not in facts:
                    raise StackShapeError("no nvidia_stack fact")
                _stack, warnings = finish_stack_facts(facts["nvidia_stack"], node)
            except StackShapeError as e:
                result.update(failed=True, changed=False, msg="stack_facts on %s returned a malformed result: %s"
                              % (node, shown(str(e))))
                return result
            if warnings:
                existing = module_result.get("warnings")
                module_result["warnings"] = (existing if isinstance(existing, list) else
                                             [] if existing is None else [shown(existing)]) + warnings
        result.update(module_result)
        return result
