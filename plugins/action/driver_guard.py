# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of kubegpu.fleet.driver_guard.

Modules run on the node and cannot read the collection's data files, so this action plugin
loads the bundled known-bad driver catalog (``<collection>/catalog/known_bad_drivers.yml``),
validates it together with the task's ``catalog_extra`` (a bad catalog fails here, on the
controller, before anything runs on the node), and passes it to the module in the internal
``_catalog`` option. The catalog is replaced by a short summary in the returned
``invocation`` so verbose output stays readable.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import yaml

from ansible.module_utils.common.text.converters import to_native
from ansible.plugins.action import ActionBase

from ansible_collections.kubegpu.fleet.plugins.module_utils.driver_catalog import (
    CatalogError,
    merge_catalog,
    validate_catalog,
)

MODULE = "kubegpu.fleet.driver_guard"
CATALOG_PATH = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                             "catalog", "known_bad_drivers.yml"))


def load_bundled_catalog(path=CATALOG_PATH):
    """Read and validate the bundled catalog; raise CatalogError (or IOError) on problems."""
    with open(path, "rb") as f:
        try:
            data = yaml.safe_load(f)
        except yaml.YAMLError as e:
            raise CatalogError("bundled catalog %s" % path, ["not valid YAML: %s" % e])
    validate_catalog(data, "bundled catalog %s" % path)
    return data


def catalog_with_extra(extra):
    """``(catalog, None)``: the bundled catalog with ``catalog_extra`` merged in; or
    ``(None, message)`` when either is invalid or the bundled file cannot be read."""
    try:
        catalog = load_bundled_catalog()
        merge_catalog(catalog["entries"], extra)
    except CatalogError as e:
        return None, to_native(e)
    except (IOError, OSError) as e:
        return None, "cannot read the bundled catalog %s: %s" % (CATALOG_PATH, to_native(e))
    return catalog, None


def args_with_catalog(task_args, owner):
    """``(args, catalog, error)`` for a module that takes the catalog in ``_catalog``: a copy of
    the task's arguments with the bundled catalog (plus ``catalog_extra``) added, or without it
    and ``error`` set when the catalog is invalid. Raises ValueError when the task passed the
    internal ``_catalog`` itself."""
    args = dict(task_args)
    if "_catalog" in args:
        raise ValueError("_catalog is internal to %s: the bundled catalog is loaded by the action plugin; "
                         "use catalog_extra to add entries" % owner)
    catalog, error = catalog_with_extra(args.get("catalog_extra"))
    if catalog is not None:
        args["_catalog"] = catalog
    return args, catalog, error


def redact_catalog(module_result, catalog):
    """Replace the injected catalog in the echoed invocation by a one-line summary."""
    invocation = module_result.get("invocation")
    if isinstance(invocation, dict) and isinstance(invocation.get("module_args"), dict):
        if invocation["module_args"].get("_catalog") is not None:
            invocation["module_args"]["_catalog"] = "<bundled catalog %s: %d entries>" % (
                CATALOG_PATH, len(catalog["entries"]))


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
