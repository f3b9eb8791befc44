# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the modules that act on one Node through the Kubernetes API (node_maintenance,
gpu_operands: plugins/plugin_utils/rollout/node_api.py) need and take beside their connection
options (kubegpu.fleet.k8s_auth)."""
from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
requirements:
  - kubernetes >= 25.3.0 (Python, on the controller)
options:
  name:
    description: Name of the Node.
    type: str
    required: true
"""
