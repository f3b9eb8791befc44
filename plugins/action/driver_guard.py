# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of kubegpu.fleet.driver_guard.

Modules run on the node and cannot read the collection's data files, so this action plugin
loads catalog v2 (``<collection>/catalog/v2/*.yml``), validates it together with the task's
``catalog_extra`` documents (a bad catalog fails here, on the controller, before anything runs
on the node), and passes the driver defects to the module in the internal ``_catalog`` option
(``plugins/plugin_utils/driver_catalog_ctl.py``, shared with the other action plugins that run
driver_guard). The catalog is replaced by a short summary in the returned ``invocation``.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.plugins.action import ActionBase

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.driver_catalog_ctl import (
    args_with_catalog,
    redact_catalog,
)

MODULE = "kubegpu.fleet.driver_guard"


class ActionModule(ActionBase):

    TRANSFERS_FILES = False
    _requires_connection = True

    def run(self, tmp=None, task_vars=None):
        self._supports_check_mode = True
        self._supports_async = False
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp

        try:
            args, catalog, error = args_with_catalog(self._task.args, "driver_guard")
        except ValueError as e:
            args, catalog, error = None, None, str(e)
        if error is not None:
            result.update(failed=True, msg=error)
            return result

        module_result = self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars)
        redact_catalog(module_result, catalog)
        result.update(module_result)
        return result
