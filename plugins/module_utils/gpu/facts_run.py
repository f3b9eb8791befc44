# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_facts run helper (the body of kubegpu.fleet.gpu_facts).

Node side: Python 3.8+. See node_probes.py for the calling convention.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.module_utils.basic import missing_required_lib

from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu.facts import (
    GpuFactsError,
    nvidia_facts,
    pynvml_available,
)
from ansible_collections.kubegpu.fleet.plugins.module_utils._common import safe_io
from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu.pci import compare_gpus, scan_pci
from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu.xid import xid_report
from ansible_collections.kubegpu.fleet.plugins.module_utils._common.node_probes import ProbeFailed

# Options of the hardware part and their defaults (audit_node passes the same names).
HARDWARE_DEFAULTS = {"sys_path": "/sys", "xid": True, "xid_timeout": 10.0, "kmsg_path": "/dev/kmsg"}


def hardware_facts(facts, sys_path="/sys", xid=True, xid_timeout=10.0, kmsg_path="/dev/kmsg"):
    """Add ``pci``, ``xid`` and ``presence`` to the nvidia facts (in place), node side.

    ``presence`` compares the PCI bus with the driver's list only: the Node's
    ``nvidia.com/gpu`` capacity and the inventory's expected count are the controller's
    (kubegpu.fleet.audit_evaluate compares them with the same function). A nvidia-smi document
    that describes fewer GPUs than it says are attached is a presence problem too.
    """
    try:
        pci = scan_pci(sys_path)
    except safe_io.UnsafeInput as e:
        raise ProbeFailed("sys_path: %s" % e)
    facts["pci"] = pci
    if xid:
        try:
            facts["xid"] = xid_report(timeout=xid_timeout, kmsg=kmsg_path or None)
        except safe_io.UnsafeInput as e:
            raise ProbeFailed("xid_timeout: %s" % e)
    else:
        facts["xid"] = None
    gpus = facts.get("gpus") or []
    # Only a driver that answered has a list to compare: procfs or a failed probe says nothing
    # about which GPUs the driver can open.
    answered = facts.get("source") in ("nvml", "nvidia_smi")
    presence = compare_gpus(pci["gpus"] if (pci["available"] and answered) else None,
                            [g.get("pci_bus_id") for g in gpus if g.get("pci_bus_id")],
                            mig_gpus=0, xid_gpus=(facts["xid"] or {}).get("gpus"))
    presence["compared"] = bool(pci["available"] and answered)
    for warning in facts.get("warnings") or []:
        if warning.startswith("nvidia-smi reports"):
            presence["problems"].append(warning)
            presence["ok"] = False
    facts["presence"] = presence
    return facts


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
    hw = dict((k, params.get(k, v) if params.get(k) is not None else v)
              for k, v in HARDWARE_DEFAULTS.items())
    hardware_facts(facts, **hw)
    probe = facts["probe"]
    if probe["status"] in ("hung", "error"):
        warn("gpu_facts: %s probe %s: %s" % (probe["backend"], probe["status"], probe["error"]))
    for warning in facts.get("warnings") or []:
        if warning != probe.get("error"):
            warn("gpu_facts: %s" % warning)
    if (facts.get("xid") or {}).get("warning"):
        warn("gpu_facts: Xid scan: %s" % facts["xid"]["warning"])
    return dict(changed=False, ansible_facts={"nvidia": facts})
