# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side: read, patch and wait on one Node in-process (logic in plugin_utils/node_api.py,
the connection in plugin_utils/k8s, resolved as kubernetes.core resolves it)."""
from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.kubegpu.fleet.plugins.module_utils._common.safe_io import UnsafeInput, check_timeout
from ansible_collections.kubegpu.fleet.plugins.plugin_utils import node_api
from ansible_collections.kubegpu.fleet.plugins.plugin_utils import rollout
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.k8s import action as k8s_action
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.k8s import client as k8s_client


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _requires_connection = False

    ARGSPEC = {
        "name": {"type": "str", "required": True},
        "state": {"type": "str", "default": "info", "choices": ["info", "patched", "ready", "budget", "validated"]},
        "unschedulable": {"type": "bool"},
        "annotations": {"type": "dict", "default": {}},
        "boot_id": {"type": "str", "default": ""},
        "batch": {"type": "list", "elements": "str", "default": []},
        "max_unavailable": {"type": "str", "default": "25%"},
        "allocatable": {"type": "dict", "default": {}},
        "nvidia": {"type": "dict"},
        "image_pattern": {"type": "str", "default": "k8s-device-plugin"},
        "timeout": {"type": "float", "default": 0},
        "poll": {"type": "float", "default": 1},
    }
    ARGSPEC.update(k8s_client.AUTH_ARG_SPEC)

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _dummy, args = self.validate_argument_spec(argument_spec=self.ARGSPEC)
        with k8s_action.masked(result, args) as secrets:
            self._run(result, args, secrets)
        return result

    def _run(self, result, args, secrets):
        bad = sorted(k for k, v in args["annotations"].items() if v is not None and not isinstance(v, str))
        if bad:
            result.update(failed=True, msg="annotations must map to strings or null (to remove); not strings: %s"
                          % ", ".join(bad))
            return
        if args["state"] != "patched" and (args["unschedulable"] is not None or args["annotations"]):
            result.update(failed=True, msg="unschedulable and annotations need state=patched (state=%s)" % args["state"])
            return
        try:  # nan, inf and 1e300 would make every wait endless
            args["timeout"] = check_timeout(args["timeout"], "timeout")
            args["poll"] = check_timeout(args["poll"], "poll", minimum=0.001, maximum=3600)
        except UnsafeInput as exc:
            result.update(failed=True, msg=str(exc))
            return
        api = None
        try:
            api = node_api.NodeApi.connect(args, environ=k8s_action.task_environ(self._task, self._templar))
            result.update(getattr(self, "_" + args["state"])(api, args))
        except (node_api.NodeApiError, rollout.RolloutError) as exc:
            result.update(failed=True, msg=str(exc))
        finally:
            if api is not None:   # tokens the client read from the environment or a kubeconfig
                secrets.extend(api.client.secrets)
                api.client.close()   # removes the kubeconfig's CA/key files: atexit never runs in a worker
        result.setdefault("changed", False)

    def _info(self, api, args):
        node = api.node(args["name"])
        return {"node": node or {}, "exists": node is not None}

    def _patched(self, api, args):
        out = node_api.patch_node(api, args["name"], args["unschedulable"], args["annotations"],
                                  check_mode=bool(self._task.check_mode))
        res = {"changed": out["changed"], "node": out["node"], "exists": True, "attempts": out["attempts"]}
        if self._task.diff:
            res["diff"] = {"before": out["before"], "after": out["after"],
                           "before_header": "Node %s" % args["name"], "after_header": "Node %s" % args["name"]}
        return res

    def _wait(self, args, fetch, check, what):
        """Poll until check(fetch())['ok'] or the timeout; returns (last check, wait fields)."""
        state = {}

        def done(value):
            state["check"] = check(value)
            return state["check"]["ok"]

        out = node_api.wait_until(fetch, done, args["timeout"], args["poll"])
        last = state.get("check") or {"ok": False, "msg": "no answer"}
        info = {"ok": out["ok"], "waited": out["waited"], "polls": out["polls"]}
        if not out["ok"]:
            info.update(failed=True, msg="%s: not within %s s (%d polls): %s" % (
                what, args["timeout"], out["polls"], out["last_error"] or last.get("msg")))
        return last, info

    def _ready(self, api, args):
        seen = {}

        def fetch():
            seen["node"] = api.node(args["name"])
            return seen["node"]

        what = "Node %s Ready%s" % (args["name"], " with a bootID other than %s" % args["boot_id"] if args["boot_id"] else "")
        last, info = self._wait(args, fetch, lambda node: node_api.ready_check(node, args["boot_id"]), what)
        return dict(info, node=seen.get("node") or {}, boot_id=last.get("boot_id"), ready=last)

    def _budget(self, api, args):
        batch = args["batch"] or [args["name"]]
        last, info = self._wait(args, api.nodes, lambda nodes: rollout.budget_check(nodes, batch, args["max_unavailable"]),
                                "disruption budget for %s" % ", ".join(batch))
        return dict(info, budget=last)

    def _validated(self, api, args):
        seen = {}

        def fetch():
            seen["node"] = api.node(args["name"])
            seen["pods"] = api.pods_on(args["name"])
            if "daemonsets" not in seen:
                seen["daemonsets"] = api.daemonsets()
            return seen

        def check(value):
            return node_api.validated_check(value["node"], value["pods"], value["daemonsets"], args["allocatable"],
                                            args["nvidia"], args["image_pattern"])

        last, info = self._wait(args, fetch, check, "GPU work on %s" % args["name"])
        return dict(info, node=seen.get("node") or {}, plugin=last.get("plugin"), resources=last.get("resources"))
