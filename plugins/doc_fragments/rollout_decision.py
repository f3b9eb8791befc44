# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Options every decision module of the rolling maintenance takes (rollout_start,
rollout_drain_verdict, rollout_validation_verdict, rollout_uncordon_decision,
rollout_failure_record), documented once as plugins/plugin_utils/rollout/decisions.py specifies
them once (``NAME``, ``MAINTENANCE``, ``NODE``, ``ANNOTATION``)."""
from __future__ import annotations


class ModuleDocFragment:
    # NAME and MAINTENANCE: every decision.
    DOCUMENTATION = r"""
options:
  name:
    description: The Kubernetes node name.
    type: str
    required: true
  maintenance:
    description: The host fact C(kubegpu_maintenance).
    type: dict
    default: {}
"""

    # NODE and ANNOTATION: the decisions that read the node's state before maintenance from the Node.
    NODE_RECORD = r"""
options:
  node:
    description:
      - The Node object as the API returns it (M(kubegpu.fleet.node_maintenance) C(state=info));
        V({}) when it does not exist.
      - Its maintenance annotation (O(annotation)) tells the node's state before maintenance when
        O(maintenance) does not.
    type: dict
    default: {}
  annotation:
    description: Annotation that records the state before maintenance on the Node.
    type: str
    default: kubegpu.io/maintenance
"""
