# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of kubegpu.fleet.reboot_need: gather what decides a reboot on the node, decide
on the controller (plugin_utils/rollout/reboot_need.py)."""
from __future__ import annotations

import base64
import posixpath

from ansible.module_utils.common.text.converters import to_native
from ansible.plugins.action import ActionBase

from ansible_collections.kubegpu.fleet.plugins.module_utils._common.safe_io import UnsafeInput, check_timeout
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.driver_catalog_ctl import args_with_catalog, redact_catalog
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.rollout import reboot_need

FACT = "kubegpu_rolling_reboot_need"


def find_args(boot_path, sentinels):
    """One ``ansible.builtin.find`` over /boot and the sentinels' directories."""
    dirs, patterns = [boot_path], ["vmlinuz-*"]
    for path in sentinels:
        parent, base = posixpath.split(path)
        if parent not in dirs:
            dirs.append(parent)
        if base not in patterns:
            patterns.append(base)
    return {"paths": dirs, "patterns": patterns, "file_type": "any", "hidden": False, "recurse": False,
            "follow": False, "get_checksum": False}


def split_find(files, boot_path, sentinels):
    """``ansible.builtin.find``'s files -> (the /boot kernel entries, the sentinels that exist).

    A sentinel reached through two paths (``/var/run`` is a symlink to ``/run``) counts once."""
    boot = posixpath.normpath(boot_path)
    wanted = [posixpath.normpath(s) for s in sentinels]
    kernels, found, inodes = [], [], set()
    for item in files or []:
        path = posixpath.normpath(str(item.get("path") or ""))
        if posixpath.dirname(path) == boot and posixpath.basename(path).startswith("vmlinuz-") \
                and item.get("isreg"):  # a FIFO, directory or (dangling, looping) link is no kernel image
            kernels.append({"path": path, "islnk": bool(item.get("islnk"))})
    by_path = dict((posixpath.normpath(str(i.get("path") or "")), i) for i in files or [])
    for path in wanted:
        item = by_path.get(path)
        if item is None:
            continue
        ident = (item.get("dev"), item.get("inode"))
        if ident != (None, None) and ident in inodes:
            continue
        inodes.add(ident)
        found.append(path)
    return kernels, found


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _requires_connection = True

    ARGSPEC = {
        "mode": {"type": "str", "default": "needed", "choices": list(reboot_need.MODES)},
        "sentinels": {"type": "list", "elements": "str", "default": list(reboot_need.DEFAULT_SENTINELS)},
        "check_kernel": {"type": "bool", "default": True},
        "check_driver": {"type": "bool", "default": True},
        "boot_path": {"type": "str", "default": "/boot"},
        "proc_path": {"type": "str", "default": "/proc"},
        "nvidia_proc_path": {"type": "str"},
        "dev_path": {"type": "str", "default": "/dev"},
        "driver_root": {"type": "str", "default": "/"},
        "backend": {"type": "str", "default": "auto", "choices": ["auto", "nvml", "nvidia_smi"]},
        "timeout": {"type": "float", "default": 10},
        "node": {"type": "dict", "default": {}},
        "annotation": {"type": "str", "default": reboot_need.MAINTENANCE_ANNOTATION},
        "required": {"type": "bool", "default": False},
        "required_reasons": {"type": "list", "elements": "str", "default": []},
        "planned": {"type": "bool", "default": False},
    }

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _dummy, args = self.validate_argument_spec(argument_spec=self.ARGSPEC)
        bad = [p for p in args["sentinels"] + [args["boot_path"], args["proc_path"]] if not str(p).startswith("/")]
        if bad:
            result.update(failed=True, msg="sentinels, boot_path and proc_path must be absolute paths: %s"
                          % ", ".join(bad))
            return result
        sentinels = [posixpath.normpath(p) for p in args["sentinels"]]

        try:
            args["timeout"] = check_timeout(args["timeout"], "timeout")
        except UnsafeInput as exc:
            result.update(failed=True, msg=str(exc))
            return result
        found = self._execute_module(module_name="ansible.builtin.find", task_vars=task_vars,
                                     module_args=find_args(args["boot_path"], sentinels))
        if found.get("failed"):
            result.update(failed=True, msg="cannot list %s and the reboot sentinels on the node: %s"
                          % (args["boot_path"], found.get("msg")))
            return result
        kernels, present = split_find(found.get("files"), args["boot_path"], sentinels)

        running = None
        if args["check_kernel"]:
            osrelease = posixpath.join(args["proc_path"], "sys/kernel/osrelease")
            # slurp opens whatever is there: a FIFO would block it, a huge file be read whole.
            st = self._execute_module(module_name="ansible.builtin.stat", task_vars=task_vars,
                                      module_args={"path": osrelease, "get_checksum": False,
                                                   "get_mime": False, "get_attributes": False})
            st = st.get("stat") or {}
            if st.get("exists") and (not st.get("isreg") or st.get("size", 0) > 4096):
                result.update(failed=True, msg="%s is not the kernel's release file (%s)" % (
                    osrelease, "%d bytes" % st.get("size", 0) if st.get("isreg") else "not a regular file"))
                return result
            slurp = self._execute_module(module_name="ansible.builtin.slurp", task_vars=task_vars,
                                         module_args={"src": osrelease}) if st.get("exists") else {"failed": True}
            if not slurp.get("failed"):
                running = to_native(base64.b64decode(slurp.get("content") or "")).strip() or None

        guard = {}
        if args["check_driver"]:
            guard = self._driver_guard(args, task_vars)

        try:
            need = reboot_need.decide(mode=args["mode"], sentinels=present, guard=guard, running=running,
                                      boot_entries=kernels, node=args["node"], annotation=args["annotation"],
                                      required=args["required"], required_reasons=args["required_reasons"],
                                      check_kernel=args["check_kernel"], check_driver=args["check_driver"],
                                      planned=args["planned"])
        except reboot_need.RebootNeedError as exc:
            result.update(failed=True, msg=str(exc))
            return result
        msg = need["msg"]
        if self._task.check_mode and need["reboot"]:
            name = ((args["node"].get("metadata") or {}).get("name")
                    or (task_vars or {}).get("inventory_hostname") or "the node")
            msg = "check mode: would reboot %s (%s)" % (name, "; ".join(need["reasons"]))
        result.update(changed=False, need=need, msg=msg, ansible_facts={FACT: need})
        return result

    def _driver_guard(self, args, task_vars):
        module_args = {"state": "audit", "proc_path": args["nvidia_proc_path"] or args["proc_path"],
                       "dev_path": args["dev_path"], "driver_root": args["driver_root"], "backend": args["backend"],
                       "timeout": args["timeout"]}
        module_args, catalog, error = args_with_catalog(module_args, "reboot_need")
        if error is not None:
            return {"failed": True, "msg": error}
        out = self._execute_module(module_name="kubegpu.fleet.driver_guard", module_args=module_args,
                                   task_vars=task_vars)
        redact_catalog(out, catalog)
        return out
