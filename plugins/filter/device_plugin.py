# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters behind kubegpu.fleet.device_plugin (logic in plugin_utils/stack/device_plugin.py)."""
from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.stack import device_plugin as dp


def _wrap(func):
    def run(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except dp.DevicePluginError as exc:
            raise AnsibleFilterError(str(exc))
    run.__name__ = func.__name__
    run.__doc__ = func.__doc__
    return run


def _get(mapping, key, default=None):
    try:
        value = mapping[key]
    except (KeyError, TypeError):
        return default
    return default if value is None else value


def device_plugin_hosts(hostnames, hostvars):
    """``[{host, node, kubelet, audit}]`` for inventory hosts, from their facts and audit results."""
    out = []
    for host in hostnames or []:
        hv = _get(hostvars, host, {})
        facts = _get(hv, "ansible_facts", {}) or {}
        out.append({"host": host, "node": _get(hv, "kubegpu_node_name", host) or host,
                    "kubelet": _get(facts, "kubelet", {}) or {},
                    "audit": _get(hv, "kubegpu_audit", {}) or {}})
    return out


def device_plugin_plan(daemonsets, nodes=None, pods=None, static_nodes=None,
                       image_pattern=dp.DEFAULT_IMAGE_PATTERN, min_version=dp.FIRST_WITH_DEVICE_SPECS,
                       version="v0.17.2", image="", pass_device_specs="auto", skip_label=dp.DEFAULT_SKIP_LABEL):
    return dp.plan_daemonsets(daemonsets, nodes or [], pods or [], static_nodes or [], image_pattern,
                              min_version, version, image, pass_device_specs, skip_label)


def device_plugin_static_nodes(hosts, explicit=None):
    return dp.static_cpu_manager_nodes(hosts, explicit or [])


def device_plugin_cpu_manager_known(hosts):
    return dp.cpu_manager_known(hosts)


def device_plugin_pass_mode(value):
    return dp.normalize_pass_mode(value)


def device_plugin_recreate(broken, pods, skip_label=dp.DEFAULT_SKIP_LABEL, image_pattern=dp.DEFAULT_IMAGE_PATTERN):
    return dp.pods_to_recreate(broken, pods, skip_label, image_pattern)


def device_plugin_pods(pods, image_pattern=dp.DEFAULT_IMAGE_PATTERN):
    """The device plugin pods among ``pods`` (a container runs the plugin image)."""
    return [p for p in pods or [] if dp.plugin_container((p or {}).get("spec"), image_pattern) is not None]


def device_plugin_ready_pods(pods, owner_uid=None):
    """Pods Running and Ready that are not being deleted (controlled by ``owner_uid`` when given)."""
    return dp.ready_pods(pods, owner_uid)


class FilterModule(object):
    def filters(self):
        return {
            "device_plugin_hosts": device_plugin_hosts,
            "device_plugin_plan": _wrap(device_plugin_plan),
            "device_plugin_static_nodes": device_plugin_static_nodes,
            "device_plugin_cpu_manager_known": device_plugin_cpu_manager_known,
            "device_plugin_pass_mode": _wrap(device_plugin_pass_mode),
            "device_plugin_recreate": device_plugin_recreate,
            "device_plugin_pods": device_plugin_pods,
            "device_plugin_ready_pods": device_plugin_ready_pods,
        }
