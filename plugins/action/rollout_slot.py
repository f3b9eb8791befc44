# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of kubegpu.fleet.rollout_slot: take or give back a rollout slot held in the
cluster (a coordination.k8s.io Lease). Decisions in plugins/plugin_utils/rollout/lease.py and
gates.py, requests and the renewer in slot.py, the connection in plugin_utils/k8s (resolved as
kubernetes.core does)."""
from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.action import runner
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.rollout import slot


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        return runner.run(self, super().run(tmp, task_vars), task_vars, slot.ACTION)
