# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of kubegpu.fleet.rollout_decide: one decision of the rolling maintenance
(plugin_utils/rollout.py), its facts and its failure. No connection, no API."""
from __future__ import annotations

import time

from ansible.plugins.action import ActionBase

from ansible_collections.kubegpu.fleet.plugins.module_utils._common.safe_io import UnsafeInput, check_timeout
from ansible_collections.kubegpu.fleet.plugins.plugin_utils import rollout

DECISIONS = ("start", "drain", "validation", "uncordon", "failure")


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _requires_connection = False

    ARGSPEC = {
        "decision": {"type": "str", "required": True, "choices": list(DECISIONS)},
        "name": {"type": "str", "required": True},
        "node": {"type": "dict", "default": {}},
        "maintenance": {"type": "dict", "default": {}},
        "annotation": {"type": "str", "default": "kubegpu.io/maintenance"},
        "skip_label": {"type": "str", "default": rollout.DEFAULT_SKIP_LABEL},
        "timeout": {"type": "float", "default": 600},
        "pods": {"type": "list", "elements": "dict", "default": []},
        "pods_error": {"type": "str"},
        "evict_error": {"type": "str"},
        "accept_terminating": {"type": "bool", "default": False},
        "wedged": {"type": "bool", "default": False},
        "pdbs": {"type": "list", "elements": "dict"},
        "checks": {"type": "dict", "default": {}},
        "api": {"type": "dict", "default": {}},
        "driver_version": {"type": "str", "default": ""},
        "validate": {"type": "bool", "default": True},
        "reboot": {"type": "dict", "default": {}},
        "reboot_reasons": {"type": "list", "elements": "str", "default": []},
        "reason": {"type": "str"},
        "task": {"type": "str"},
        "cordon": {"type": "dict", "default": {}},
        "uncordon_failed": {"type": "bool", "default": False},
        "run": {"type": "str"},
        "fail": {"type": "bool", "default": True},
        "close": {"type": "bool", "default": False},
    }

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _dummy, args = self.validate_argument_spec(argument_spec=self.ARGSPEC)
        try:
            args["timeout"] = check_timeout(args["timeout"], "timeout")
        except UnsafeInput as exc:
            result.update(failed=True, msg=str(exc))
            return result
        try:
            out, facts, failed = getattr(self, "_" + args["decision"])(args, time.time())
        except rollout.RolloutError as exc:
            result.update(failed=True, msg=str(exc))
            return result
        result.update(changed=False, decision=out, msg=out["msg"], ansible_facts=facts)
        if failed and args["fail"]:
            result["failed"] = True
        return result

    def _start(self, args, now):
        out = rollout.start_maintenance(args["node"], args["name"], args["maintenance"], args["annotation"],
                                        args["skip_label"], args["timeout"], now)
        # the hosts of the play batch that go down now: the budget check counts them
        facts = {"kubegpu_rolling_reboot_start": out, "kubegpu_rolling_reboot_wants_down": out["cordon"]}
        if out["exists"] and not out["skip"] and not out["already"]:
            facts["kubegpu_maintenance"] = out["record"]
        return out, facts, not out["exists"]

    def _drain(self, args, now):
        out = rollout.drain_verdict(args["name"], args["pods"], args["accept_terminating"], args["pdbs"],
                                    args["maintenance"], int(args["timeout"]), args["pods_error"],
                                    args["evict_error"], args["wedged"])
        facts = {"kubegpu_rolling_reboot_drained": out["ok"], "kubegpu_rolling_reboot_wants_down": False}
        if out["ok"]:
            facts["kubegpu_maintenance"] = out["record"]
        return out, facts, not out["ok"]

    def _validation(self, args, now):
        facts = {}
        if not args["validate"] or self._task.check_mode:
            why = "check mode" if self._task.check_mode else "kubegpu_validate is false"
            out = {"ok": True, "skipped": True, "reasons": [], "record": args["maintenance"],
                   "msg": "%s: would validate %s (NVML, driver version, checkpoint, device plugin, allocatable)"
                          % (why, args["name"])}
        else:
            reboot = dict(args["reboot"], reasons=args["reboot_reasons"]) if args["reboot"].get("boot_id") else None
            out = rollout.validation_verdict(args["name"], args["checks"], args["api"], args["driver_version"],
                                             int(args["timeout"]), args["maintenance"], reboot)
            facts["kubegpu_maintenance"] = out["record"]
            if reboot:
                facts.update(kubegpu_reboot_required=False, kubegpu_reboot_reasons=[])
        if out["ok"] and args["close"]:
            # the uncordon decision of a node that validated (the next task writes it)
            closing = rollout.uncordon_decision(args["name"], out["record"], args["node"], args["annotation"], now)
            out["uncordon"] = closing
            out["msg"] += "; " + closing["msg"]
            facts.update(kubegpu_rolling_reboot_uncordon=closing, kubegpu_maintenance=closing["record"])
        return out, facts, not out["ok"]

    def _uncordon(self, args, now):
        out = rollout.uncordon_decision(args["name"], args["maintenance"], args["node"], args["annotation"], now)
        # closed before the patch: a failing patch tells the failure decision (uncordon_failed)
        return out, {"kubegpu_rolling_reboot_uncordon": out, "kubegpu_maintenance": out["record"]}, False

    def _failure(self, args, now):
        out = rollout.failure_record(args["name"], args["maintenance"], args["reason"], args["task"], now,
                                     args["cordon"], args["uncordon_failed"], args["run"])
        return out, {"kubegpu_maintenance": out["record"], "kubegpu_rolling_reboot_failure": out["failure"]}, True
