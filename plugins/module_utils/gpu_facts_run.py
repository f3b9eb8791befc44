# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_facts run helper (the body of kubegpu.fleet.gpu_facts).

Node side: Python 3.8+. See node_probes.py for the calling convention.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.module_utils.basic import missing_required_lib

from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu import (
    GpuFactsError,
    nvidia_facts,
    pynvml_available,
)
from ansible_collections.kubegpu.fleet.plugins.module_utils.node_probes import ProbeFailed


def gpu_facts_run(params, warn):
    """gpu_facts: ``{"changed": False, "ansible_facts": {"nvidia": facts}}``."""
    if params["backend"] == "nvml" and not pynvml_available():
        raise ProbeFailed(missing_required_lib("nvidia-ml-py (module pynvml)",
                                               reason="for backend=nvml"))
    try:
        facts = nvidia_facts(proc_path=params["proc_path"], dev_path=params["dev_path"],
                             driver_root=params["driver_root"], backend=params["backend"],
                             timeout=params["timeout"])
    except GpuFactsError as e:
        raise ProbeFailed(str(e))
    probe = facts["probe"]
    if probe["status"] in ("hung", "error"):
        warn("gpu_facts: %s probe %s: %s" % (probe["backend"], probe["status"], probe["error"]))
    for warning in facts.get("warnings") or []:
        if warning != probe.get("error"):
            warn("gpu_facts: %s" % warning)
    return dict(changed=False, ansible_facts={"nvidia": facts})
