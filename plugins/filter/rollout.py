# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters behind kubegpu.fleet.rolling_reboot (logic in plugin_utils/rollout.py).

They work on what ``kubernetes.core.k8s_info`` and ``kubegpu.fleet.gpu_facts`` return, so a
task can re-read the API in an ``until:`` loop and decide in the same expression.
"""
from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.kubegpu.fleet.plugins.plugin_utils import rollout


def _wrap(func):
    def run(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except rollout.RolloutError as exc:
            raise AnsibleFilterError(str(exc))
    run.__name__ = func.__name__
    run.__doc__ = func.__doc__
    return run


def rollout_plan(nodes, targets, max_unavailable="25%", max_parallel=1, skip_label=rollout.DEFAULT_SKIP_LABEL, needs=None):
    return rollout.plan_rollout(nodes, targets, max_unavailable, max_parallel, skip_label, needs)


def rollout_budget(nodes, batch, max_unavailable="25%"):
    return rollout.budget_check(nodes, batch, max_unavailable)


def rollout_unavailable(nodes):
    return rollout.unavailable_gpu_nodes(nodes)


def rollout_unavailable_reason(node):
    return rollout.unavailable_reason(node) or ""


def rollout_has_label(node, selector=rollout.DEFAULT_SKIP_LABEL):
    return rollout.has_label(node, selector)


def rollout_gpu_resources(node, field="allocatable"):
    return rollout.gpu_resources(node, field)


def rollout_leftover(pods, accept_terminating=False):
    return rollout.leftover_pods(pods, accept_terminating)


def rollout_pdbs(pods, pdbs, only=None):
    return rollout.pdbs_for_pods(pods, pdbs, only)


def rollout_drain_report(leftover, pdbs=None):
    return rollout.drain_report(leftover, pdbs)


def rollout_plugin_pod(pods, daemonsets=None, image_pattern="k8s-device-plugin"):
    return rollout.plugin_pod(pods, daemonsets, image_pattern)


def rollout_expected_resources(nvidia, strategy="none"):
    return rollout.expected_resources(nvidia, strategy)


def rollout_resources_check(pre, post, expected=None):
    return rollout.resources_check(pre, post, expected)


def rollout_kernel_reboot_needed(running, installed):
    return rollout.kernel_reboot_needed(running, installed)


def rollout_annotation(record):
    return rollout.maintenance_annotation(record)


def rollout_parse_annotation(text):
    return rollout.parse_maintenance_annotation(text)


class FilterModule(object):
    """kubegpu.fleet rollout filters."""

    def filters(self):
        funcs = (rollout_plan, rollout_budget, rollout_unavailable, rollout_unavailable_reason, rollout_has_label, rollout_gpu_resources,
                 rollout_leftover, rollout_pdbs, rollout_drain_report, rollout_plugin_pod,
                 rollout_expected_resources, rollout_resources_check, rollout_kernel_reboot_needed,
                 rollout_annotation, rollout_parse_annotation)
        return dict((f.__name__, _wrap(f)) for f in funcs)
