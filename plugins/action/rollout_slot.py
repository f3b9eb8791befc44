# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side: take or give back a rollout slot held in the cluster (a coordination.k8s.io Lease).

Decisions in plugin_utils/rollout_lease.py and rollout_gates.py, requests and the renewer in
plugin_utils/rollout_slot.py, the connection in plugin_utils/k8s (resolved as kubernetes.core does)."""
from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.kubegpu.fleet.plugins.module_utils._common.safe_io import UnsafeInput, check_timeout
from ansible_collections.kubegpu.fleet.plugins.plugin_utils import node_api, rollout, rollout_gates, rollout_lease, rollout_slot
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.k8s import action as k8s_action
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.k8s import client as k8s_client


def stopped_hosts(task_vars):
    """Hosts of this play that failed or became unreachable (Ansible removes them from
    ``ansible_play_hosts``), leaving out those the skip label ended on purpose."""
    task_vars = task_vars or {}
    everyone = list(task_vars.get("ansible_play_hosts_all") or [])
    remaining = set(task_vars.get("ansible_play_hosts") or [])
    hostvars = task_vars.get("hostvars") or {}
    out = []
    for host in everyone:
        if host in remaining:
            continue
        try:
            start = hostvars[host].get("kubegpu_rolling_reboot_start") or {}
        except (KeyError, AttributeError, TypeError):
            start = {}
        if isinstance(start, dict) and start.get("skip"):
            continue
        out.append(host)
    return out


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _requires_connection = False

    ARGSPEC = {
        "name": {"type": "str", "required": True},
        "state": {"type": "str", "default": "acquire", "choices": ["acquire", "hold", "release"]},
        "pool": {"type": "str", "default": rollout_lease.DEFAULT_POOL},
        "namespace": {"type": "str", "default": "kube-system"},
        "max_unavailable": {"type": "str", "default": "25%"},
        "max_parallel": {"type": "int", "default": 0},
        "lease_duration": {"type": "int", "default": 120},
        "clock_skew": {"type": "float", "default": 30},
        "timeout": {"type": "float", "default": 600},
        "poll": {"type": "float", "default": 5},
        "max_hold": {"type": "float", "default": 86400},
        "renew": {"type": "bool", "default": True},
        "windows": {"type": "list", "elements": "dict", "default": []},
        "prometheus_url": {"type": "str"},
        "alert_filter": {"type": "str"},
        "alert_filter_match_only": {"type": "bool", "default": False},
        "alert_firing_only": {"type": "bool", "default": False},
        "prometheus_timeout": {"type": "float", "default": 10},
        "prometheus_validate_certs": {"type": "bool", "default": True},
        "prometheus_ca_cert": {"type": "path"},
        "failed_annotation": {"type": "str", "default": "kubegpu.io/maintenance-failed"},
        "unschedulable": {"type": "bool"},
        "annotations": {"type": "dict", "default": {}},
    }
    ARGSPEC.update(k8s_client.AUTH_ARG_SPEC)

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _dummy, args = self.validate_argument_spec(argument_spec=self.ARGSPEC)
        with k8s_action.masked(result, args) as secrets:
            self._run(result, args, secrets, task_vars)
        return result

    def _checked(self, args):
        bad = sorted(k for k, v in args["annotations"].items() if v is not None and not isinstance(v, str))
        if bad:
            raise UnsafeInput("annotations must map to strings or null (to remove); not strings: %s" % ", ".join(bad))
        if args["state"] == "hold" and (args["unschedulable"] is not None or args["annotations"]):
            raise UnsafeInput("unschedulable and annotations go with state=acquire (the cordon) or release (the uncordon)")
        for key, low, high in (("timeout", 0, None), ("poll", 0.05, 3600), ("clock_skew", 0, 3600),
                               ("max_hold", 1, None), ("prometheus_timeout", 0.1, 300)):
            kwargs = {"minimum": low}
            if high is not None:
                kwargs["maximum"] = high
            args[key] = check_timeout(args[key], key, **kwargs)
        if args["max_parallel"] < 0:
            raise UnsafeInput("max_parallel must not be negative (0: only the budget limits), got %s" % args["max_parallel"])
        if not 1 <= args["lease_duration"] <= rollout_lease.MAX_DURATION:
            raise UnsafeInput("lease_duration must be 1..%d seconds, got %s" % (rollout_lease.MAX_DURATION,
                                                                                args["lease_duration"]))
        args["pool"] = rollout_lease.check_pool(args["pool"])
        rollout_gates.normalize_windows(args["windows"])
        rollout_gates.compile_filter(args["alert_filter"])
        rollout.scaled_max_unavailable(args["max_unavailable"], 1)

    def _run(self, result, args, secrets, task_vars):
        try:
            self._checked(args)
        except (UnsafeInput, rollout_lease.LeaseError, rollout_gates.GateError, rollout.RolloutError) as exc:
            result.update(failed=True, msg=str(exc))
            return
        run, holder, watch = rollout_slot.run_identity()
        result.update(run=run, holder=holder, changed=False)
        environ = k8s_action.task_environ(self._task, self._templar)
        client = None
        try:
            client = k8s_client.connect(args, environ=environ)
            api = rollout_slot.SlotApi(client, args["namespace"])
            if args["state"] == "release":
                # the uncordon first: a failed patch keeps the slot (the node is still in maintenance)
                patched = self._patch(result, args, client)
                out = rollout_slot.release(api, pool=args["pool"], node=args["name"], holder=holder,
                                           check_mode=bool(self._task.check_mode))
                result.update(out, changed=out["released"] or patched)
                return
            self._acquire(result, args, api, run, holder, watch, environ, task_vars)
        except rollout_slot.Stop as exc:
            result.update(failed=True, stopped=True, acquired=False, msg=str(exc))
        except k8s_client.K8sError as exc:
            result.update(failed=True, msg=str(exc))
        finally:
            if client is not None:
                secrets.extend(client.secrets)
                client.close()

    def _acquire(self, result, args, api, run, holder, watch, environ, task_vars):
        prometheus = None
        if args["prometheus_url"]:
            prometheus = {"url": args["prometheus_url"], "filter": args["alert_filter"],
                          "match_only": args["alert_filter_match_only"], "firing_only": args["alert_firing_only"],
                          "timeout": args["prometheus_timeout"], "validate_certs": args["prometheus_validate_certs"],
                          "ca_cert": args["prometheus_ca_cert"]}
        out = rollout_slot.acquire(
            api, pool=args["pool"], node=args["name"], holder=holder, run=run, max_unavailable=args["max_unavailable"],
            duration=args["lease_duration"], max_parallel=args["max_parallel"], skew=args["clock_skew"], timeout=args["timeout"], poll=args["poll"],
            windows=args["windows"], prometheus=prometheus, stop_hosts=stopped_hosts(task_vars),
            failed_annotation=args["failed_annotation"], check_mode=bool(self._task.check_mode),
            started=args["state"] == "hold")
        out.pop("lease", None)
        out.pop("own", None)
        result.update(out)
        if not out["acquired"]:
            result["failed"] = True
            return
        result["changed"] = out["decision"] in ("create", "takeover") and not self._task.check_mode
        try:   # the cordon, only with the slot held; a failed cordon gives the slot back
            if self._patch(result, args, api.client):
                result["changed"] = True
        except k8s_client.K8sError:
            if out["decision"] in ("create", "takeover") and not self._task.check_mode:
                rollout_slot.release(api, pool=args["pool"], node=args["name"], holder=holder)
            raise
        result["cordoned"] = args["unschedulable"] is True
        if args["renew"] and not self._task.check_mode:
            auth = dict((k, args[k]) for k in k8s_client.AUTH_ARG_SPEC if args.get(k) is not None)
            result["renewer"] = rollout_slot.spawn_renewer(
                auth, environ, namespace=args["namespace"], pool=args["pool"], node=args["name"], holder=holder,
                name=out["slot"], duration=args["lease_duration"], watch=watch, max_hold=args["max_hold"])

    def _patch(self, result, args, client):
        """The Node patch that goes with the slot (the cordon and the maintenance record, or the
        uncordon and clearing it): node_api.patch_node, guarded by the resourceVersion it read."""
        if args["unschedulable"] is None and not args["annotations"]:
            return False
        out = node_api.patch_node(node_api.NodeApi(client), args["name"], args["unschedulable"], args["annotations"],
                                  check_mode=bool(self._task.check_mode))
        result.update(node=out["node"], attempts=out["attempts"], patched=out["changed"])
        if self._task.diff:
            result["diff"] = {"before": out["before"], "after": out["after"],
                              "before_header": "Node %s" % args["name"], "after_header": "Node %s" % args["name"]}
        return out["changed"]
