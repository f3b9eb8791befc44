# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one table of audit findings: one row per finding id, read by everything that names one.

A row says what the finding is (``severity``: the default, which a rule may change per instance
from the evidence; ``title``; ``scope``: ``node`` for a node's own state, ``cluster`` for what the
cluster deploys - the GPU Operator, device plugin DaemonSet, MIG manager and DCGM Exporter - and
cluster-wide findings; ``references``: the documents a rule cites unless it names its own), which
role fixes it (``role``, the short name of a kubegpu.fleet role, None when no role does) and how
the remediation treats it:

- ``drain``: the fix changes what running GPU pods depend on (driver files, the device
  checkpoint, device cgroups of existing containers) or needs a reboot: the node is drained first
  and goes through the rolling_reboot window;
- ``reboot``: the fix ends with a reboot (the kernel module changes: a driver fix, or the reboot
  is the fix);
- ``gpu_reset``: acted on by what the evidence says (:func:`..remediation.plan.gpu_disposition`):
  a GPU reset (the reboot its fallback), a reboot, hands-on work or nothing;
- ``hands_on``: hardware a person must handle (replace or reseat a GPU): the node is cordoned
  with the reason and nothing automatic runs on it;
- ``wedged``: the kubelet is stuck in a device-plugin call and never confirms pod deletions, so
  evicted pods stay Terminating until the node reboots;
- ``manual``: nothing here fixes it automatically; reported and left for a person.

The rules (audit/rules/) create findings only through :func:`finding`; a structure test checks
that every id a rule can emit has a row, that every row is emitted by some rule and that the
README's finding table (:func:`markdown_table`) lists exactly these rows.
"""
from __future__ import annotations

import collections

SEVERITIES = ("critical", "warning", "info")
SCOPES = ("node", "cluster")
ROLES = ("driver", "kubelet", "device_plugin", "rolling_reboot")
COLLECTION = "kubegpu.fleet"

GH = "https://github.com/"
REF_R570 = (GH + "NVIDIA/gpu-operator/issues/1361", GH + "NVIDIA/go-nvml/issues/152")
REF_ALLOC = (GH + "kubernetes/kubernetes/issues/130855", GH + "kubernetes/kubernetes/issues/129249")
REF_CPUMGR = (GH + "kubernetes/kubernetes/issues/77073", GH + "NVIDIA/nvidia-docker/issues/966",
              GH + "NVIDIA/k8s-device-plugin/commit/ea604b28")
REF_DEVCHAR = (GH + "NVIDIA/nvidia-container-toolkit/issues/48", GH + "opencontainers/runc/issues/3567")
REF_UVM = (GH + "NVIDIA/k8s-device-plugin/blob/main/internal/plugin/server.go", GH + "moby/moby/issues/15270")
REF_CKPT = (GH + "kubernetes/kubernetes/tree/master/pkg/kubelet/cm/devicemanager/checkpoint",)
REF_XID = ("https://docs.nvidia.com/deploy/xid-errors/index.html",)
REF_MEMERR = ("https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/index.html",
              "https://docs.nvidia.com/deploy/dynamic-page-retirement/index.html")
REF_DCGM = (GH + "NVIDIA/DCGM/blob/72fa3fe/modules/health/DcgmHealthWatch.cpp",)
REF_FM = ("https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/index.html",)
REF_MEM = ("https://kubernetes.io/docs/tasks/administer-cluster/reserve-compute-resources/",
           "https://cloud.google.com/kubernetes-engine/docs/concepts/plan-node-sizes")


class FindingType(collections.namedtuple("FindingType", (
        "id", "severity", "title", "scope", "references", "role",
        "drain", "reboot", "gpu_reset", "hands_on", "wedged", "manual"))):
    """One row of the table (see the module docstring for the columns)."""

    __slots__ = ()

    @property
    def role_fqcn(self):
        """``kubegpu.fleet.<role>``, or None when no role fixes the finding."""
        return "%s.%s" % (COLLECTION, self.role) if self.role else None

    @property
    def automatic(self):
        """The node's remediation runs ``role`` for it (a node finding a role fixes, not manual)."""
        return bool(self.role) and not self.manual and self.scope == "node"


def _row(fid, severity, title, scope="node", references=(), role=None, drain=False, reboot=False,
         gpu_reset=False, hands_on=False, wedged=False, manual=False):
    return FindingType(fid, severity, title, scope, tuple(references), role, drain, reboot, gpu_reset,
                       hands_on, wedged, manual)


_PRODUCTS = (("driver", "NVIDIA driver", "node"), ("container-toolkit", "NVIDIA Container Toolkit", "node"),
             ("fabric-manager", "NVIDIA Fabric Manager", "node"), ("device-plugin", "NVIDIA device plugin", "cluster"),
             ("gpu-operator", "NVIDIA GPU Operator", "cluster"), ("mig-manager", "NVIDIA MIG manager", "cluster"),
             ("dcgm", "NVIDIA DCGM", "node"), ("dcgm-exporter", "NVIDIA DCGM Exporter", "cluster"))
# security.<component> / defect.<component>: the role of the component's fix, and whether the
# remediation runs it (cluster components the GPU Operator or Helm deploy, DCGM: left for a person).
_CATALOG_FIX = {"driver": ("driver", True), "container-toolkit": ("device_plugin", False),
                "fabric-manager": ("driver", True), "device-plugin": ("device_plugin", None),
                "gpu-operator": (None, None), "mig-manager": (None, None), "dcgm": (None, None),
                "dcgm-exporter": (None, None)}


def _catalog_rows():
    rows = []
    for kind in ("security", "defect"):
        for component, product, scope in _PRODUCTS:
            if kind == "defect" and component == "driver":
                continue  # driver defects are driver.known_bad / driver.at_risk (driver_guard)
            role, drains = _CATALOG_FIX[component]
            title = ("%s affected by published security advisories" % product if kind == "security"
                     else "%s release with a known defect" % product)
            rows.append(_row("%s.%s" % (kind, component), "info", title, scope=scope, role=role,
                             drain=bool(drains) and kind == "security", reboot=bool(drains) and kind == "security",
                             manual=drains is None))
    return rows


_ROWS = [
    _row("driver.known_bad", "critical", "Known-bad NVIDIA driver for this node's conditions",
         references=REF_R570, role="driver", drain=True, reboot=True),
    _row("driver.at_risk", "warning", "NVIDIA driver affected by a known bug whose trigger is absent today",
         references=REF_R570, role="driver", drain=True, reboot=True),
    _row("driver.version_mismatch", "critical",
         "NVIDIA userspace and kernel module versions differ (reboot pending)",
         role="rolling_reboot", drain=True, reboot=True),
    _row("driver.compute_utils", "warning", "nvidia-compute-utils missing or at another version than the driver",
         references=REF_R570[:1], role="driver"),
    _row("driver.unlisted_branch", "info", "NVIDIA driver branch not listed in NVIDIA's latest driver security "
         "bulletin (possibly affected)", role="driver", manual=True),
    _row("driver.unsupported_branch", "warning", "NVIDIA driver branch past NVIDIA's end of life or not in NVIDIA's "
         "support matrix", role="driver", manual=True),
    _row("nvml.hung", "critical", "NVML does not answer (nvmlInit hung)", references=REF_R570,
         role="driver", drain=True, reboot=True, wedged=True),
    _row("nvml.error", "critical", "NVML fails on this node", role="rolling_reboot", drain=True, reboot=True),
    _row("kubelet.admission_blocked", "critical", "Kubelet stopped admitting pods (device plugin Allocate hung)",
         references=REF_ALLOC + REF_R570, role="kubelet", drain=True, wedged=True),
    _row("kubelet.memory_reservation", "warning", "Kubelet memory reservation missing or too small for the node",
         references=REF_MEM, role="kubelet"),
    _row("kubelet.eviction_hard_partial", "warning", "evictionHard partially set: unset defaults are zeroed",
         references=REF_MEM, role="kubelet"),
    _row("node.not_ready", "critical", "Node is NotReady in the Kubernetes API", manual=True),
    _row("cpumanager.device_specs", "critical",
         "Static CPU manager with a device plugin that does not pass device specs",
         references=REF_CPUMGR, role="device_plugin"),
    _row("devchar.symlinks_missing", "warning",
         "/dev/char symlinks for NVIDIA devices missing (systemd cgroup driver)",
         references=REF_DEVCHAR, role="device_plugin"),
    _row("uvm.node_missing", "critical", "/dev/nvidia-uvm missing or nvidia_uvm not loaded on the node",
         references=REF_UVM, role="device_plugin"),
    _row("cgroup.devices_missing", "critical", "GPU containers lost NVIDIA devices from their device cgroup",
         references=REF_CPUMGR, role="device_plugin", drain=True),
    _row("cgroup.uvm_tools_missing", "info", "GPU containers cannot open /dev/nvidia-uvm-tools",
         role="device_plugin", drain=True),
    _row("checkpoint.stale", "critical", "Kubelet device checkpoint names GPUs the node no longer has",
         references=REF_CKPT, role="kubelet", drain=True),
    _row("gpu.missing", "critical", "GPUs on the PCI bus or in the inventory are missing from the driver's list",
         references=REF_XID, hands_on=True, manual=True),
    _row("gpu.xid", "info", "NVIDIA Xid errors in the kernel log since boot", references=REF_XID,
         role="rolling_reboot", drain=True, gpu_reset=True),
    _row("gpu.reset_required", "critical", "GPU memory repair pending: a GPU reset or reboot is needed",
         references=REF_MEMERR, role="rolling_reboot", drain=True, gpu_reset=True),
    _row("gpu.rma", "critical", "GPU hardware fault that needs a replacement (RMA candidate)",
         references=REF_MEMERR + REF_DCGM, hands_on=True, manual=True),
    _row("gpu.ecc_uncorrectable", "info", "Uncorrectable GPU memory (ECC) errors", references=REF_MEMERR,
         manual=True),
    _row("gpu.recovery_action", "warning", "The NVIDIA driver's recovery verdict for a GPU is not None",
         references=REF_DCGM + REF_XID, role="rolling_reboot", drain=True, gpu_reset=True),
    _row("gpu.row_remap_exhausting", "warning", "GPU memory banks running out of spare rows (early RMA signal)",
         references=REF_MEMERR + REF_DCGM, manual=True),
    _row("gpu.pcie_degraded", "warning", "GPU PCIe link degraded (trained below its maximum, or replaying)",
         references=REF_DCGM, manual=True),
    _row("gpu.clocks_slowdown", "warning", "GPU clocks held down by hardware protection (thermal, power brake)",
         references=REF_DCGM, manual=True),
    _row("gpu.nvlink", "warning", "NVLink errors or NVLinks down", references=REF_DCGM + REF_XID, manual=True),
    _row("gpu.fabric", "critical", "GPU not registered with the NVLink fabric", references=REF_FM, manual=True),
    _row("nvswitch.sxid", "info", "NVSwitch SXid errors in the kernel log since boot", references=REF_FM,
         role="rolling_reboot", drain=True, gpu_reset=True),
    # the fabric manager package alone moves to the driver's version and its service restarts: no reboot
    _row("fabricmanager.version_mismatch", "critical", "Fabric manager version differs from the driver's on an "
         "NVSwitch system (CUDA fails with error 802)", role="driver"),
] + _catalog_rows() + [
    _row("cluster.device_plugin_outdated", "critical", "NVIDIA device plugin older than 1.0.0-beta5",
         scope="cluster", references=REF_CPUMGR, role="device_plugin"),
    _row("audit.module_failed", "warning", "An audit probe could not run on this node", manual=True),
    _row("audit.not_inspected", "warning", "Not a GPU node, or the audit saw nothing of it (never counted clean)",
         manual=True),
]

TYPES = collections.OrderedDict((r.id, r) for r in _ROWS)


def finding(fid, evidence, remediation=None, references=None, severity=None, title=None, fix=True):
    """A finding of type ``fid`` (a row of :data:`TYPES`; KeyError for an id with none).

    ``severity`` and ``title`` default to the row's, ``references`` (None) to the row's.
    ``remediation`` (``summary``, ``vars``, ...) gets the row's role as ``role`` after its
    summary unless it names one or ``fix`` is false (this instance needs no role run).
    """
    row = TYPES[fid]
    rem = dict(remediation or {})
    if fix and row.role and "role" not in rem:
        ordered = {}
        if "summary" in rem:
            ordered["summary"] = rem.pop("summary")
        ordered["role"] = row.role_fqcn
        ordered.update(rem)
        rem = ordered
    return {"id": fid, "severity": severity or row.severity, "title": title or row.title,
            "evidence": evidence, "remediation": rem,
            "references": list(row.references if references is None else references)}


def unknown_ids_message(ids, option):
    """The message for ids in option ``option`` that name no finding type; None when all do."""
    unknown = sorted(set(ids or ()) - set(TYPES))
    if not unknown:
        return None
    return "unknown finding id(s) in %s: %s (known: %s)" % (option, ", ".join(unknown), ", ".join(sorted(TYPES)))


README_BEGIN = "<!-- finding table: generated from plugins/plugin_utils/audit/finding_types.py -->"
README_END = "<!-- end of finding table -->"


def _fixed_by(row):
    if row.hands_on:
        return "a person, hands-on (the node is cordoned)"
    if row.manual or not row.role:
        return "a person"
    if row.gpu_reset:
        return "drain, then a GPU reset or a reboot, as the evidence says"
    if row.scope == "cluster":
        return "`%s` (cluster side)" % row.role
    return ", ".join(["`%s`" % row.role] + [w for w, on in (("drain", row.drain), ("reboot", row.reboot)) if on])


def markdown_table():
    """The README's finding table (one line per row, between README_BEGIN and README_END)."""
    lines = [README_BEGIN, "| finding | severity | scope | title | fixed by |", "| --- | --- | --- | --- | --- |"]
    for row in TYPES.values():
        title = row.title.replace("|", "\\|")
        lines.append("| `%s` | %s | %s | %s | %s |" % (row.id, row.severity, row.scope, title, _fixed_by(row)))
    lines.append(README_END)
    return "\n".join(lines) + "\n"
