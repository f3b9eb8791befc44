# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Option specs of the audit's node probes: one place for their names, types and defaults.

Pure data, no imports: each single-probe module (gpu_facts, kubelet_facts, driver_guard,
checkpoint_sync, cgroup_devices) builds its AnsibleModule argument_spec from its entry here,
and the probe registry (``probes.py``) builds kubegpu.fleet.audit_node's options and each
probe's parameters from the same entries, so a default is written once. A module may add
options the audit never uses (driver_guard's pinning options) to its own spec.

Callers must copy before handing a spec to AnsibleModule: use :func:`spec`.

Node side: Python 3.8+.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy

GPU_BACKENDS = ["auto", "nvml", "nvidia_smi"]
CHECKPOINT_PATH = "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"
# The record kubegpu.fleet.gpu_reset keeps of this boot's resets (gpu/reset.py STATE_PATH).
RESET_STATE_PATH = "/var/lib/kubegpu/gpu-reset.json"

GPU_FACTS = dict(
    timeout=dict(type="float", default=10.0),
    backend=dict(type="str", default="auto", choices=GPU_BACKENDS),
    proc_path=dict(type="path", default="/proc"),
    dev_path=dict(type="path", default="/dev"),
    driver_root=dict(type="path", default="/"),
    sys_path=dict(type="path", default="/sys"),
    xid=dict(type="bool", default=True),
    xid_timeout=dict(type="float", default=10.0),
    kmsg_path=dict(type="path", default="/dev/kmsg"),
    reset_state_path=dict(type="path", default=RESET_STATE_PATH),
)

KUBELET_FACTS = dict(
    proc_path=dict(type="path", default="/proc"),
    config_path=dict(type="path"),
    scan_journal=dict(type="bool", default=True),
    journal_unit=dict(type="str", default="kubelet"),
    journal_since=dict(type="str", default="-2h"),
    kubelet_package=dict(type="str", default="kubelet"),
    node_version=dict(type="str"),
    timeout=dict(type="float", default=30.0),
)

# driver_guard's options for state audit/enforce; the module adds its pinning options.
DRIVER_GUARD = dict(
    state=dict(type="str", default="audit", choices=["audit", "enforce", "pinned"]),
    driver_version=dict(type="str"),
    kernel_module_version=dict(type="str"),
    mig_mixed=dict(type="bool"),
    mig_enabled=dict(type="bool"),
    toolkit_version=dict(type="str"),
    gpu_names=dict(type="list", elements="str"),
    catalog_extra=dict(type="raw"),
    skip_entries=dict(type="list", elements="str", default=[]),
    package_root=dict(type="path", default="/"),
    proc_path=dict(type="path", default="/proc"),
    dev_path=dict(type="path", default="/dev"),
    driver_root=dict(type="path", default="/"),
    backend=dict(type="str", default="auto", choices=GPU_BACKENDS),
    timeout=dict(type="float", default=10.0),
    command_timeout=dict(type="float", default=120.0),
    _catalog=dict(type="raw"),
)

CHECKPOINT_SYNC = dict(
    path=dict(type="path", default=CHECKPOINT_PATH),
    device_ids=dict(type="list", elements="str", required=True),
    resource_names=dict(type="list", elements="str", default=["nvidia.com/*"]),
    state=dict(type="str", choices=["checked", "synced"], default="checked"),
    restart_kubelet=dict(type="bool", default=True),
    kubelet_service=dict(type="str", default="kubelet"),
    restart_timeout=dict(type="float", default=300.0),
    backup=dict(type="bool", default=True),
    force=dict(type="bool", default=False),
)

CGROUP_DEVICES = dict(
    cgroup_root=dict(type="path", default="/sys/fs/cgroup"),
    proc_path=dict(type="path", default="/proc"),
    dev_path=dict(type="path", default="/dev"),
    mode=dict(type="str", default="auto", choices=["auto", "list", "probe"]),
    kubepods_path=dict(type="str"),
    probe_method=dict(type="str", default="access", choices=["access", "open"]),
    probe_timeout=dict(type="float", default=10.0),
    process_evidence=dict(type="bool", default=True),
)

STACK_FACTS = dict(
    root=dict(type="path", default="/"),
    sys_path=dict(type="path", default="/sys"),
    dev_path=dict(type="path", default="/dev"),
    proc_path=dict(type="path", default="/proc"),
    fabric_manager_unit=dict(type="str", default="nvidia-fabricmanager.service"),
    service_state=dict(type="bool", default=True),
    command_timeout=dict(type="float", default=30.0),
)


def spec(options, **extra):
    """A deep copy of ``options`` (plus ``extra`` options) for AnsibleModule."""
    out = copy.deepcopy(options)
    out.update(copy.deepcopy(extra))
    return out


def passed_on(options, name, **extra):
    """The spec of probe option ``name`` for a controller action that passes it to the probe's
    module on the node: the probe's type, default and choices, but ``str`` for a ``path`` (Ansible
    would expand a ``path`` option's ``~`` and variables on the controller, not on the node)."""
    out = copy.deepcopy(options[name])
    if out.get("type") == "path":
        out["type"] = "str"
    out.update(copy.deepcopy(extra))
    return out


def defaults(options):
    """Parameter dict of an option spec's defaults (None where it has none), deep-copied."""
    return dict((name, copy.deepcopy(o.get("default"))) for name, o in options.items())
