# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The work of the kubegpu.fleet.driver_guard action: the task's catalog to the module on the node.

The task's options go to the module unchanged (it validates them) plus the bundled driver
defects in ``_catalog`` (``module_args.args_with_catalog``); a bad catalog fails the task here,
before anything runs on the node. The catalog is replaced by a short summary in the returned
``invocation``.
"""
from __future__ import annotations

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.action import runner
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.catalog.module_args import (
    args_with_catalog,
    redact_catalog,
)

MODULE = "kubegpu.fleet.driver_guard"


def run_driver_guard(task, task_args):
    """The module's result, with the catalog it was given redacted from its invocation."""
    try:
        args, catalog, error = args_with_catalog(task_args, "driver_guard")
    except ValueError as e:
        raise runner.ActionFailed(str(e))
    if error is not None:
        raise runner.ActionFailed(error)
    module_result = task.module(MODULE, args)
    redact_catalog(module_result, catalog)
    return module_result


ACTION = runner.Action(None, run_driver_guard)
