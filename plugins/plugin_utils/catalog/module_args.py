# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The catalog a module on the node takes, and its removal from the module's result.

Modules run on the node and cannot read the collection's data files, so every action plugin that
runs a module with the driver_guard evaluation (``driver_guard``, ``audit_node``,
``reboot_need``, ``rollout_node_check``) passes the bundled driver defects in the internal
``_catalog`` option, after ``load.for_task`` validated the whole bundled catalog together with
the task's ``catalog_extra`` (a bad catalog fails on the controller, before anything runs on the
node). ``redact_catalog`` replaces the catalog in the returned ``invocation`` by a one-line
summary.
"""
from __future__ import annotations

import os

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.catalog import load


def args_with_catalog(task_args, owner, task_catalog=None):
    """``(args, catalog, error)`` for a module that takes the catalog in ``_catalog``: a copy of
    the task's arguments with the bundled driver defects added (``catalog_extra`` validated and
    passed on), or without it and ``error`` set when the catalog is invalid.

    ``task_catalog``: the task's ``load.for_task`` result when the caller also evaluates with it
    (loaded here otherwise). Raises ValueError when the task passed the internal ``_catalog``
    itself."""
    args = dict(task_args)
    if "_catalog" in args:
        raise ValueError("_catalog is internal to %s: the bundled catalog is loaded by the action plugin; "
                         "use catalog_extra to add entries" % owner)
    if task_catalog is None:
        task_catalog = load.for_task(args.get("catalog_extra"))
    if task_catalog.node_catalog is not None:
        args["_catalog"] = task_catalog.node_catalog
    return args, task_catalog.node_catalog, task_catalog.error


def redact_catalog(module_result, catalog):
    """Replace the injected catalog in the echoed invocation by a one-line summary."""
    invocation = module_result.get("invocation")
    if isinstance(invocation, dict) and isinstance(invocation.get("module_args"), dict):
        if invocation["module_args"].get("_catalog") is not None:
            invocation["module_args"]["_catalog"] = "<bundled catalog v2 %s: %d driver defect entries>" % (
                os.path.join(load.CATALOG_DIR, "driver.yml"), sum(len(d["entries"]) for d in catalog or []))
