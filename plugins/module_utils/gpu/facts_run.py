# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_facts run helper (the body of kubegpu.fleet.gpu_facts).

Node side: Python 3.8+. See node_probes.py for the calling convention.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible.module_utils.basic import missing_required_lib

from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu.facts import (
    GpuFactsError,
    nvidia_facts,
    pynvml_available,
)
from ansible_collections.kubegpu.fleet.plugins.module_utils._common import safe_io
from ansible_collections.kubegpu.fleet.plugins.module_utils.audit.probe_options import GPU_FACTS
from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu.health import verdict as health_verdict
from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu.pci import compare_gpus, listed_bus_ids, scan_pci
from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu.reset import read_resets
from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu.xid import xid_report
from ansible_collections.kubegpu.fleet.plugins.module_utils._common.node_probes import ProbeFailed

# Options of the hardware part (audit_node passes the same names); their defaults are
# probe_options.GPU_FACTS'.
HARDWARE_OPTIONS = ("sys_path", "xid", "xid_timeout", "kmsg_path", "reset_state_path")


def read_uptime(proc_path="/proc"):
    """Seconds since boot from ``<proc>/uptime`` (its first field), None when unreadable."""
    text, _err = safe_io.try_read_text(os.path.join(proc_path, "uptime"), limit=256)
    field = (text or "").split(" ", 1)[0].strip()
    whole, _dot, frac = field.partition(".")
    if not safe_io.is_ascii_digits(whole) or len(whole) > 12 or (frac and not safe_io.is_ascii_digits(frac)):
        return None
    return float(field)


def judge_gpus(facts, uptime_s=None):
    """Each GPU's health verdict, computed here for both backends alike (the NVML child and the
    nvidia-smi parser only collect): with the node's uptime (PCIe replay rate) and MIG mode."""
    for gpu in facts.get("gpus") or []:
        if isinstance(gpu.get("health"), dict):
            gpu["health_verdict"] = health_verdict(
                gpu["health"], uptime_s=uptime_s,
                mig_enabled=(gpu.get("mig_mode") or {}).get("current") == "enabled")
    return facts


def hardware_facts(facts, sys_path, xid, xid_timeout, kmsg_path, reset_state_path, proc_path):
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
        # GPU resets of this boot (kubegpu.fleet.gpu_reset): the Xids they cleared call for nothing
        resets, problem = read_resets(reset_state_path, proc_path)
        if problem:
            facts.setdefault("warnings", []).append("GPU reset record not read: %s" % problem)
        try:
            facts["xid"] = xid_report(timeout=xid_timeout, kmsg=kmsg_path or None, resets=resets)
        except safe_io.UnsafeInput as e:
            raise ProbeFailed("xid_timeout: %s" % e)
    else:
        facts["xid"] = None
    gpus = facts.get("gpus") or []
    # Only a driver that answered has a list to compare: procfs or a failed probe says nothing
    # about which GPUs the driver can open.
    answered = facts.get("source") in ("nvml", "nvidia_smi")
    presence = compare_gpus(pci["gpus"] if (pci["available"] and answered) else None,
                            listed_bus_ids(gpus),
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
    hw = dict((k, params[k] if params.get(k) is not None else GPU_FACTS[k]["default"])
              for k in HARDWARE_OPTIONS)
    facts["uptime_s"] = read_uptime(params["proc_path"])
    judge_gpus(facts, facts["uptime_s"])
    hardware_facts(facts, proc_path=params["proc_path"], **hw)
    probe = facts["probe"]
    if probe["status"] in ("hung", "error"):
        warn("gpu_facts: %s probe %s: %s" % (probe["backend"], probe["status"], probe["error"]))
    for warning in facts.get("warnings") or []:
        if warning != probe.get("error"):
            warn("gpu_facts: %s" % warning)
    if (facts.get("xid") or {}).get("warning"):
        warn("gpu_facts: Xid scan: %s" % facts["xid"]["warning"])
    return dict(changed=False, ansible_facts={"nvidia": facts})
