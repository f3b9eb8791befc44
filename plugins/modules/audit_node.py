#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: audit_node
short_description: Run every audit probe of a GPU node in one module run
version_added: 0.2.0
description:
  - Runs, in one Python process on the node, the probes the C(kubegpu.fleet.audit) role
    needs - M(kubegpu.fleet.gpu_facts), M(kubegpu.fleet.kubelet_facts),
    M(kubegpu.fleet.driver_guard) (O(kubegpu.fleet.driver_guard#module:state=audit)),
    M(kubegpu.fleet.checkpoint_sync) (O(kubegpu.fleet.checkpoint_sync#module:state=checked))
    and M(kubegpu.fleet.cgroup_devices) - with the same code those modules run, and returns
    each probe's result under RV(probes) exactly as the module's task would have returned it.
  - One module run instead of five saves the controller four task executions (a worker
    process, a connection round trip and a module transfer each) per node.
  - The probes are chained the way the audit role chains the modules. driver_guard gets the
    driver and kernel module versions, MIG state and GPU names from gpu_facts.
    checkpoint_sync runs only when the NVML probe answered without errors (a stale check
    needs a trustworthy device list) and reads the checkpoint kubelet_facts found.
    cgroup_devices runs only when an NVIDIA driver is present; when it is skipped,
    C(skip_reason) says whether gpu_facts failed (and why) or found no driver.
  - A probe that fails - or raises - becomes a failed result (C(failed), C(msg)) for that
    probe only; the other probes still run and the task itself does not fail, like the
    five tasks with C(ignore_errors).
  - The gpu_facts probe keeps its guarantee - the NVML (or C(nvidia-smi)) call runs in a
    forked child that is killed after O(timeout) seconds (C(probe.status=hung)).
  - The known-bad driver catalog is bundled with the collection; the action plugin reads it on
    the controller (as for M(kubegpu.fleet.driver_guard)) and passes it to the node.
author:
  - kubegpu.fleet maintainers (@kubegpu)
options:
  proc_path:
    description:
      - Where the node's procfs is mounted, for the kubelet probe (C(/host/proc) from a
        container that mounts the host at C(/host)).
    type: path
    default: /proc
  nvidia_proc_path:
    description:
      - procfs holding the NVIDIA driver files (C(devices), C(driver/nvidia)), for the GPU,
        driver and cgroup probes. Defaults to O(proc_path).
    type: path
  dev_path:
    description: Where the node's C(/dev) is mounted.
    type: path
    default: /dev
  driver_root:
    description: Root of the NVIDIA driver userspace (C(/run/nvidia/driver) with the GPU Operator).
    type: path
    default: /
  backend:
    description:
      - How gpu_facts asks the driver, as M(kubegpu.fleet.gpu_facts) O(kubegpu.fleet.gpu_facts#module:backend).
      - The driver_guard probe keeps its own default (V(auto)) for the rare case it must probe again.
    type: str
    choices: [auto, nvml, nvidia_smi]
    default: auto
  timeout:
    description:
      - Seconds before the NVML probe counts as hung (gpu_facts and driver_guard).
      - A finite number greater than 0 and at most 86400; anything else fails the task.
    type: float
    default: 10
  kubelet_config_path:
    description:
      - KubeletConfiguration file for the kubelet probe; empty or unset means the one the
        kubelet's C(--config) flag names.
    type: path
  cgroup_root:
    description: cgroup mount point for the cgroup_devices probe.
    type: path
    default: /sys/fs/cgroup
  cgroup_mode:
    description: How cgroup_devices decides device access (see M(kubegpu.fleet.cgroup_devices)).
    type: str
    choices: [auto, list, probe]
    default: auto
  catalog_extra:
    description:
      - Additional known-bad catalog entries for the driver_guard probe, as
        M(kubegpu.fleet.driver_guard) O(kubegpu.fleet.driver_guard#module:catalog_extra).
    type: raw
  sys_path:
    description: Where the node's sysfs is mounted, for the PCI scan of gpu_facts.
    type: path
    default: /sys
  xid:
    description: Read the kernel log for Xid events (gpu_facts O(kubegpu.fleet.gpu_facts#module:xid)).
    type: bool
    default: true
  xid_timeout:
    description: Seconds each kernel log source may take.
    type: float
    default: 10
  kmsg_path:
    description: The kernel ring buffer read when the journal holds no kernel messages.
    type: path
    default: /dev/kmsg
  _catalog:
    description:
      - Internal. Set by the action plugin to the bundled catalog; do not set it.
    type: raw
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.actiongroups
attributes:
  check_mode:
    support: full
    details: Read only; every probe runs the same in check mode.
  diff_mode:
    support: none
    details: Changes nothing, so there is nothing to diff.
  platform:
    platforms: posix
    details: Linux nodes (procfs, /dev, cgroup v1 or v2); the node needs Python 3.8 or later.
  action_group:
    membership:
      - kubegpu.fleet.node
notes:
  - The C(kubegpu.fleet.audit) role uses this module (entry point C(main)); its entry point
    C(node_modules) runs the five modules as separate tasks instead.
  - The journal scan of kubelet_facts and every other option of the five modules keep their
    defaults.
seealso:
  - module: kubegpu.fleet.gpu_facts
  - module: kubegpu.fleet.kubelet_facts
  - module: kubegpu.fleet.driver_guard
  - module: kubegpu.fleet.checkpoint_sync
  - module: kubegpu.fleet.cgroup_devices
"""

EXAMPLES = r"""
- name: Gather everything the audit needs in one round trip
  kubegpu.fleet.audit_node:
    timeout: 5
  register: node_audit

- name: Show the driver verdict
  ansible.builtin.debug:
    msg: "{{ node_audit.probes.driver_guard.verdict | default('driver_guard failed') }}"

- name: List the probes that failed
  ansible.builtin.debug:
    msg: "{{ node_audit.probes | dict2items | selectattr('value.failed', 'defined')
             | selectattr('value.failed') | map(attribute='key') | list }}"

- name: Audit a GPU Operator node from a container that mounts the host at /host
  kubegpu.fleet.audit_node:
    proc_path: /host/proc
    dev_path: /host/dev
    driver_root: /host/run/nvidia/driver
    cgroup_root: /host/sys/fs/cgroup
"""

RETURN = r"""
probes:
  description:
    - One entry per probe, shaped like the result the corresponding module's task registers
      (without C(invocation)). A probe that failed has C(failed=true) and C(msg) (and, when
      it raised, C(raised_at), the file, line and function that raised; never a traceback); a probe that did not run has C(skipped=true) and
      C(skip_reason). Warnings a probe raised are in its C(warnings) and shown by the task.
  returned: always
  type: dict
  contains:
    gpu_facts:
      description: Result of M(kubegpu.fleet.gpu_facts) - the facts are in C(ansible_facts.nvidia).
      type: dict
      returned: always
    kubelet_facts:
      description: Result of M(kubegpu.fleet.kubelet_facts) - the facts are in C(ansible_facts.kubelet).
      type: dict
      returned: always
    driver_guard:
      description: Result of M(kubegpu.fleet.driver_guard) in state audit (C(verdict), C(matches), ...).
      type: dict
      returned: always
    checkpoint_sync:
      description: Result of M(kubegpu.fleet.checkpoint_sync) in state checked, or skipped when
        the NVML probe did not answer cleanly.
      type: dict
      returned: always
    cgroup_devices:
      description: Result of M(kubegpu.fleet.cgroup_devices), or skipped when no NVIDIA driver is present.
      type: dict
      returned: always
  sample:
    gpu_facts: {changed: false, ansible_facts: {nvidia: {present: true, probe: {status: ok}}}}
    kubelet_facts: {changed: false, ansible_facts: {kubelet: {running: true}}}
    driver_guard: {changed: false, verdict: ok, matches: []}
    checkpoint_sync: {changed: false, exists: true, stale: false, stale_ids: []}
    cgroup_devices: {changed: false, broken: [], summary: {pods: 1, containers: 2}}
failed_probes:
  description: Names of the probes that failed, in run order.
  returned: always
  type: list
  elements: str
  sample: [kubelet_facts]
elapsed:
  description: Seconds each probe took (0 for a skipped one).
  returned: always
  type: dict
  sample: {gpu_facts: 0.021, kubelet_facts: 0.004, driver_guard: 0.03, checkpoint_sync: 0.001, cgroup_devices: 0.01}
ansible_facts:
  description:
    - C(nvidia) and C(kubelet), as M(kubegpu.fleet.gpu_facts) and M(kubegpu.fleet.kubelet_facts)
      set them, when those probes succeeded (set by the action plugin on the controller).
  returned: when gpu_facts or kubelet_facts succeeded
  type: dict
"""

import time
import traceback

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.kubegpu.fleet.plugins.module_utils.cgroup_devices_run import cgroup_devices_run
from ansible_collections.kubegpu.fleet.plugins.module_utils.checkpoint import DEFAULT_PATH
from ansible_collections.kubegpu.fleet.plugins.module_utils.checkpoint_run import checkpoint_inspect
from ansible_collections.kubegpu.fleet.plugins.module_utils.driver_guard_run import (
    DRIVER_GUARD_ENVIRON,
    driver_guard_evaluate,
)
from ansible_collections.kubegpu.fleet.plugins.module_utils.driver_node import bounded_runner
from ansible_collections.kubegpu.fleet.plugins.module_utils import safe_io
from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu_facts_run import gpu_facts_run
from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet_facts_run import kubelet_facts_run
from ansible_collections.kubegpu.fleet.plugins.module_utils.node_probes import ProbeFailed

PROBES = ("gpu_facts", "kubelet_facts", "driver_guard", "checkpoint_sync", "cgroup_devices")


def _raised_at(exc):
    """``file:line in function`` of the innermost frame: where to look, without a traceback."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return None
    last = frames[-1]
    return "%s:%d in %s" % (last.filename.rsplit("/", 1)[-1], last.lineno, last.name)


def _run_probe(name, func, warn):
    """Run one probe; return its result dict (failures and exceptions become failed results)."""
    warnings = []
    try:
        result = func(warnings.append)
    except ProbeFailed as e:
        result = dict(changed=False)
        result.update(e.result)
        result.update(failed=True, msg=e.msg)
    except Exception as e:  # pylint: disable=broad-except
        result = dict(changed=False, failed=True,
                      msg="%s probe raised %s: %s" % (name, type(e).__name__, e),
                      raised_at=_raised_at(e))
    if warnings:
        result["warnings"] = warnings
        for w in warnings:
            warn(w)
    return result


def _skipped(reason):
    return dict(changed=False, skipped=True, skip_reason=reason)


def _nvidia(gpu):
    """ansible_facts.nvidia of a gpu_facts result, {} when the probe failed."""
    if gpu.get("failed"):
        return {}
    return (gpu.get("ansible_facts") or {}).get("nvidia") or {}


def driver_guard_params(p, nv):
    """driver_guard's options as the audit role passes them, from the gpu_facts facts."""
    mig_mixed = nv.get("mig_mixed")
    mig_enabled = nv.get("mig_enabled")
    return dict(
        state="audit",
        driver_version=nv.get("driver_version") or None,
        kernel_module_version=nv.get("kernel_module_version") or None,
        mig_mixed=mig_mixed if isinstance(mig_mixed, bool) else None,
        mig_enabled=mig_enabled if isinstance(mig_enabled, bool) else None,
        toolkit_version=None,
        gpu_names=[g.get("name") for g in nv.get("gpus") or []
                   if isinstance(g, dict) and isinstance(g.get("name"), str)],
        catalog_extra=p["catalog_extra"],
        skip_entries=[],
        package_root="/",
        proc_path=p["nvidia_proc_path"],
        dev_path=p["dev_path"],
        driver_root=p["driver_root"],
        backend="auto",
        timeout=p["timeout"],
        _catalog=p["_catalog"],
    )


def cgroup_skip_reason(gpu, nv):
    """Why cgroup_devices is not run: gpu_facts failed (and why), or it found no driver (and
    what it could not read, when procfs was not fully readable)."""
    if gpu.get("failed"):
        return "gpu_facts failed, so whether an NVIDIA driver is present is unknown: %s" % (
            gpu.get("msg") or "no message")
    reason = "no NVIDIA driver present (gpu_facts: probe %s%s)" % (
        (nv.get("probe") or {}).get("status"),
        ", %s" % (nv.get("probe") or {}).get("error") if (nv.get("probe") or {}).get("error") else "")
    unread = [w for w in nv.get("warnings") or [] if isinstance(w, str) and w.startswith("cannot ")]
    if unread:
        reason += "; but procfs was not fully readable: %s" % "; ".join(unread)
    return reason


def checkpoint_params(nv, kubelet):
    """checkpoint_sync's options (state checked) as the audit role passes them."""
    kl = {} if kubelet.get("failed") else (kubelet.get("ansible_facts") or {}).get("kubelet") or {}
    device_ids = nv.get("device_ids", [])
    if device_ids is None:
        raise ProbeFailed("missing required arguments: device_ids")
    return dict(path=kl.get("checkpoint_path") or DEFAULT_PATH,
                device_ids=[str(d) for d in device_ids], resource_names=["nvidia.com/*"],
                state="checked", restart_kubelet=True, kubelet_service="kubelet", backup=True,
                force=False)


def run_probes(module):
    """Run the five probes in the audit role's order; return (probes, elapsed)."""
    p = module.params
    if p["nvidia_proc_path"] is None:
        p["nvidia_proc_path"] = p["proc_path"]
    probes, elapsed = {}, {}

    def timed(name, func):
        start = time.time()
        probes[name] = _run_probe(name, func, module.warn)
        elapsed[name] = round(time.time() - start, 3)

    # dpkg-query/rpm with a deadline, bounded output and valid UTF-8 text (safe_io).
    driver_guard_run_command = bounded_runner(environ_update=DRIVER_GUARD_ENVIRON)

    timed("gpu_facts", lambda warn: gpu_facts_run(
        dict(proc_path=p["nvidia_proc_path"], dev_path=p["dev_path"], driver_root=p["driver_root"],
             backend=p["backend"], timeout=p["timeout"], sys_path=p["sys_path"], xid=p["xid"],
             xid_timeout=p["xid_timeout"], kmsg_path=p["kmsg_path"]), warn))
    nv = _nvidia(probes["gpu_facts"])

    timed("kubelet_facts", lambda warn: kubelet_facts_run(
        dict(proc_path=p["proc_path"], config_path=p["kubelet_config_path"] or None,
             scan_journal=True, journal_unit="kubelet", journal_since="-2h"),
        module.run_command, module.get_bin_path))

    timed("driver_guard", lambda warn: driver_guard_evaluate(
        driver_guard_params(p, nv), driver_guard_run_command, module.get_bin_path, warn)[0])

    probe = nv.get("probe") or {}
    if probe.get("status") == "ok" and not probe.get("errors"):
        timed("checkpoint_sync", lambda warn: checkpoint_inspect(
            checkpoint_params(nv, probes["kubelet_facts"]), warn)[0])
    else:
        probes["checkpoint_sync"] = _skipped(
            "the NVML probe did not answer without errors (status %s): no trustworthy device list"
            % (probe.get("status"),))
        elapsed["checkpoint_sync"] = 0

    if nv.get("present"):
        timed("cgroup_devices", lambda warn: cgroup_devices_run(
            dict(cgroup_root=p["cgroup_root"], proc_path=p["nvidia_proc_path"],
                 dev_path=p["dev_path"], mode=p["cgroup_mode"], kubepods_path=None,
                 probe_method="access", probe_timeout=10.0, process_evidence=True), warn))
    else:
        probes["cgroup_devices"] = _skipped(cgroup_skip_reason(probes["gpu_facts"], nv))
        elapsed["cgroup_devices"] = 0
    return probes, elapsed


def main():
    module = AnsibleModule(
        argument_spec=dict(
            proc_path=dict(type="path", default="/proc"),
            nvidia_proc_path=dict(type="path"),
            dev_path=dict(type="path", default="/dev"),
            driver_root=dict(type="path", default="/"),
            backend=dict(type="str", default="auto", choices=["auto", "nvml", "nvidia_smi"]),
            timeout=dict(type="float", default=10.0),
            kubelet_config_path=dict(type="path"),
            cgroup_root=dict(type="path", default="/sys/fs/cgroup"),
            cgroup_mode=dict(type="str", default="auto", choices=["auto", "list", "probe"]),
            catalog_extra=dict(type="raw"),
            sys_path=dict(type="path", default="/sys"),
            xid=dict(type="bool", default=True),
            xid_timeout=dict(type="float", default=10.0),
            kmsg_path=dict(type="path", default="/dev/kmsg"),
            _catalog=dict(type="raw"),
        ),
        supports_check_mode=True,
    )
    try:
        safe_io.check_timeout(module.params["timeout"], "timeout", minimum=0.001)
    except safe_io.UnsafeInput as e:
        module.fail_json(msg=str(e))
    probes, elapsed = run_probes(module)
    failed = [name for name in PROBES if probes[name].get("failed")]
    msg = "%d probes run, %d skipped, %d failed%s" % (
        len([n for n in PROBES if not probes[n].get("skipped")]),
        len([n for n in PROBES if probes[n].get("skipped")]), len(failed),
        (": " + ", ".join(failed)) if failed else "")
    module.exit_json(changed=False, probes=probes, failed_probes=failed, elapsed=elapsed, msg=msg)


if __name__ == "__main__":
    main()
