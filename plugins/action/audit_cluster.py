# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side: the per-node cluster view, read from the API in-process (plugin_utils/k8s) or built
from k8s_info results the task passes in."""
from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.cluster import cluster_view
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.findings import evaluate_cluster
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.k8s import action as k8s_action
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.k8s import client as k8s_client
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.k8s import service


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _requires_connection = False

    ARGSPEC = {
        "nodes": {"type": "list", "elements": "dict"},
        "pods": {"type": "list", "elements": "dict", "default": []},
        "daemonsets": {"type": "list", "elements": "dict", "default": []},
        "events": {"type": "list", "elements": "dict", "default": []},
        "device_plugin_image_pattern": {"type": "str", "default": "k8s-device-plugin"},
    }
    ARGSPEC.update(k8s_client.AUTH_ARG_SPEC)

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _dummy, args = self.validate_argument_spec(argument_spec=self.ARGSPEC)
        with k8s_action.masked(result, args) as secrets:
            objects = {k: args[k] for k in ("nodes", "pods", "daemonsets", "events")}
            if args["nodes"] is None:
                client = None
                try:
                    client = k8s_client.connect(args, environ=k8s_action.task_environ(self._task, self._templar))
                    objects = service.read_cluster(client)
                    result["api_calls"] = objects["calls"]
                except k8s_client.K8sError as exc:
                    result.update(failed=True, changed=False, msg=str(exc))
                    return result
                finally:
                    if client is not None:
                        secrets.extend(client.secrets)
            view = cluster_view(objects["nodes"], objects["pods"], objects["daemonsets"], objects["events"],
                                image_pattern=args["device_plugin_image_pattern"])
            result.update(changed=False, cluster=view, cluster_findings=evaluate_cluster(view["device_plugin_daemonsets"]))
        return result
