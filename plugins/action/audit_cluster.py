# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side: turn k8s_info results into the per-node cluster view."""
from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.cluster import cluster_view
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.findings import evaluate_cluster


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _requires_connection = False

    ARGSPEC = {
        "nodes": {"type": "list", "elements": "dict", "required": True},
        "pods": {"type": "list", "elements": "dict", "default": []},
        "daemonsets": {"type": "list", "elements": "dict", "default": []},
        "events": {"type": "list", "elements": "dict", "default": []},
        "device_plugin_image_pattern": {"type": "str", "default": "k8s-device-plugin"},
    }

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _dummy, args = self.validate_argument_spec(argument_spec=self.ARGSPEC)
        view = cluster_view(args["nodes"], args["pods"], args["daemonsets"], args["events"],
                            image_pattern=args["device_plugin_image_pattern"])
        result.update(changed=False, cluster=view, cluster_findings=evaluate_cluster(view["device_plugin_daemonsets"]))
        return result
