# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The action_group attribute of the modules in each of the collection's action groups
(meta/runtime.yml ``action_groups``), written once per group."""
from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options: {}
"""

    NODE = r"""
options: {}
attributes:
  action_group:
    description: >-
      Use C(group/kubegpu.fleet.node) in C(module_defaults) to set this module's options once for
      every node module of the collection, for example the host paths (C(proc_path), C(dev_path),
      C(driver_root)) of an audit that runs in a container which mounts the host at C(/host).
    support: full
    membership:
      - kubegpu.fleet.node
"""

    K8S = r"""
options: {}
attributes:
  action_group:
    description: >-
      Use C(group/kubegpu.fleet.k8s) in C(module_defaults) to give this module the same Kubernetes
      connection settings as C(group/kubernetes.core.k8s) (same option names, same E(K8S_AUTH_*)
      environment fallbacks).
    support: full
    membership:
      - kubegpu.fleet.k8s
"""
