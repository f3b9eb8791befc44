# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters behind kubegpu.fleet.rolling_reboot (logic in plugin_utils/rollout/plan.py and drain.py).

Only what a task needs inside an expression: the plan (on localhost, from the API's Nodes and the
inventory) and the drain check inside the ``until:`` of the task that re-reads the node's pods.
Every other decision of the role is a controller module's (kubegpu.fleet.rollout_start,
rollout_drain_verdict, rollout_validation_verdict, rollout_uncordon_decision, rollout_failure_record,
reboot_need).
"""
from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.rollout import drain, gpu_nodes, plan


def _wrap(func):
    def run(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except gpu_nodes.RolloutError as exc:
            raise AnsibleFilterError(str(exc))
    run.__name__ = func.__name__
    run.__doc__ = func.__doc__
    return run


def _forks():
    """``ansible-playbook -f`` (or ANSIBLE_FORKS / ansible.cfg), as the running CLI parsed it."""
    try:
        from ansible import context  # pylint: disable=import-outside-toplevel
        return int(context.CLIARGS.get("forks") or 0) or None
    except (ImportError, TypeError, ValueError, AttributeError):
        return None


def rollout_plan(nodes, hosts, hostvars, max_unavailable="25%", max_parallel=1, skip_label=gpu_nodes.DEFAULT_SKIP_LABEL,
                 forks=None):
    """The rollout plan of inventory ``hosts`` (their kubegpu_node_name and need record from ``hostvars``);
    ``forks`` defaults to the running ansible-playbook's."""
    return plan.plan_from_hosts(nodes, hosts, hostvars, max_unavailable, max_parallel, skip_label,
                                forks if forks else _forks())


def rollout_leftover(pods, accept_terminating=False):
    """The pods still on a drained node, classified (``ok`` when none blocks)."""
    return drain.leftover_pods(pods, accept_terminating)


class FilterModule(object):
    """kubegpu.fleet rollout filters."""

    def filters(self):
        return dict((f.__name__, _wrap(f)) for f in (rollout_plan, rollout_leftover))
