# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of kubegpu.fleet.toolkit_config.

Nodes have no TOML writer: the node module reads config.toml (bounded, regular files only),
the edit is made here with tomlkit (plugins/plugin_utils/toolkit_config_edit.py; the text comes
from the node, so the edit runs under the parse bound of plugins/plugin_utils/parse_bound.py: a
shape check, then the whole edit in a process killed at its deadline), and the
module writes the new text only when a value changes and not in check mode, refusing when the
file changed since it was read (sha256 of the bytes the edit was based on).
"""
from __future__ import annotations

import base64
import binascii

from ansible.plugins.action import ActionBase

from ansible_collections.kubegpu.fleet.plugins.plugin_utils import toolkit_config_edit as tce

MODULE = "kubegpu.fleet.toolkit_config"
INTERNAL = ("read", "content", "expected_sha256")


class ActionModule(ActionBase):

    TRANSFERS_FILES = False
    _requires_connection = True

    ARGSPEC = {
        # str, not path: "~" and variables are the node's, the module (type path) expands them there
        "path": {"type": "str", "default": "/etc/nvidia-container-runtime/config.toml"},
        "settings": {"type": "dict", "required": True},
        "backup": {"type": "bool", "default": True},
    }

    def run(self, tmp=None, task_vars=None):
        self._supports_check_mode = True
        self._supports_async = False
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        internal = [k for k in INTERNAL if k in self._task.args]
        if internal:
            result.update(failed=True, msg="%s: %s set by the action plugin, not by a task"
                          % (", ".join(internal), "is" if len(internal) == 1 else "are"))
            return result
        _dummy, args = self.validate_argument_spec(argument_spec=self.ARGSPEC)
        path = args["path"]
        result.update(changed=False, path=path, changes=[])
        missing = tce.missing_library()
        if missing:
            result.update(failed=True, msg=missing)
            return result
        try:
            tce.check_settings(args["settings"])
        except tce.TomlEditError as e:
            result.update(failed=True, msg="%s: %s" % (path, e))
            return result

        read = self._execute_module(module_name=MODULE, module_args=dict(args, read=True), task_vars=task_vars)
        if read.get("failed") or "content_b64" not in read:
            read.pop("invocation", None)
            result.update(read)
            result.setdefault("msg", "%s: the module returned no content" % path)
            result["failed"] = True
            return result
        try:
            data = base64.b64decode(read["content_b64"], validate=True)
            plan = tce.plan_edit(data, args["settings"], path, (task_vars or {}).get("inventory_hostname"))
        except (binascii.Error, ValueError, TypeError) as e:
            result.update(failed=True, msg=str(e) if isinstance(e, tce.TomlEditError)
                          else "%s: the module returned undecodable content (%s)" % (path, e))
            return result
        result["changes"] = plan["changes"]
        if self._task.diff:
            result["diff"] = {"before": plan["before"], "after": plan["after"],
                              "before_header": path, "after_header": path}
        if not plan["changes"]:
            return result
        result["changed"] = True
        if self._task.check_mode:
            return result
        write = self._execute_module(module_name=MODULE, task_vars=task_vars, module_args=dict(
            args, content=plan["after"], expected_sha256=plan["sha256"]))
        write.pop("invocation", None)
        if write.get("failed"):
            result.update(write)
            result["changed"] = False
            return result
        result["changed"] = bool(write.get("changed"))
        for key in ("backup_file", "warnings", "deprecations"):
            if key in write:
                result[key] = write[key]
        return result
