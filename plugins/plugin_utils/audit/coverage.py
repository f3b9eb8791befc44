# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the audit could see on a node (controller side, pure functions).

Findings say what is wrong; a node without findings is only clean if the audit looked. The
coverage of a node answers six questions from its probe results (the evaluation context of
:func:`..evaluate.evaluate_node`) and says, in one ``status``, what the node is:

``checks`` (each ``{"state", "detail"}``, ``state`` one of ``yes``, ``no``, ``unknown``, ``off``):

- ``pci_gpus``: NVIDIA GPUs on the PCI bus (gpu_facts' sysfs scan; ``unknown`` when sysfs could not be listed);
- ``driver``: the NVIDIA kernel driver loaded (gpu_facts ``present``);
- ``nvml``: the driver's management library answered (NVML or nvidia-smi: probe status ``ok``);
- ``kubelet``: a kubelet process found (kubelet_facts ``running``);
- ``kernel_log``: this boot's kernel log readable for the Xid scan (``off`` when the scan is off);
- ``cluster_view``: the cluster's view of the node (its Node object from the cluster pass).

``unknown`` is a probe that failed or was not run: what it would have seen is not known.

``status``:

- ``gpu_node``: the audit saw a GPU (on the PCI bus) or the NVIDIA driver;
- ``not_inspected``: the probes saw nothing of the host (the GPU probe failed or was not run and
  nothing else shows a GPU, or every node-side check is ``unknown``), or the cluster says the
  node has GPUs while the probes saw neither a GPU nor a driver (an audit container without the
  host's /proc, /sys and /dev);
- ``not_gpu_node``: no NVIDIA GPU on the bus (or the bus unreadable) and no NVIDIA driver, and the
  cluster does not say otherwise: a CPU worker or a host in the wrong inventory group.

A node that is not a GPU node or not inspected is never counted clean; the ``audit.not_inspected``
finding (rules/probes.py ``rule_coverage``) says so on the node, so ``fail_on: warning`` fails the
run on it.
"""
from __future__ import annotations

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.fields import as_dict as _d, dict_items as _l, nonblank

CHECKS = ("pci_gpus", "driver", "nvml", "kubelet", "kernel_log", "cluster_view")
STATES = ("yes", "no", "unknown", "off")
STATUSES = ("gpu_node", "not_gpu_node", "not_inspected")
LABELS = {"pci_gpus": "GPUs on the PCI bus", "driver": "NVIDIA driver loaded", "nvml": "NVML answered",
          "kubelet": "kubelet found", "kernel_log": "kernel log readable", "cluster_view": "cluster's view of the node"}
STATUS_LABELS = {"gpu_node": "GPU node", "not_gpu_node": "not a GPU node", "not_inspected": "not inspected"}
DETAIL_MAX = 300   # characters of a node-supplied reason kept in a check's detail
MODEL_MAX = 16     # GPU models kept per node
GFD_PRODUCT = "nvidia.com/gpu.product"
GFD_COUNT = "nvidia.com/gpu.count"
GFD_PRESENT = "nvidia.com/gpu.present"


def _short(text):
    text = str(text)
    return text if len(text) <= DETAIL_MAX else text[:DETAIL_MAX] + "..."


def _check(state, detail):
    return {"state": state, "detail": _short(detail)}


def _failed(probe, errors, given):
    """The ``unknown`` check of a probe that failed (its message) or whose result was not given."""
    if probe in errors:
        return _check("unknown", "%s failed: %s" % (probe, errors[probe]))
    return _check("unknown", "%s did not run" % probe if not given else "%s gave no answer" % probe)


def _pci(nv, errors):
    pci = _d(nv.get("pci"))
    if not nv or not pci:
        return _failed("gpu_facts", errors, bool(nv))
    if pci.get("available") is not True:
        why = "; ".join(str(_d(e).get("error")) for e in _l(pci.get("errors"))) or "not listed"
        return _check("unknown", "PCI bus not readable: %s" % why)
    gpus = _l(pci.get("gpus"))
    if gpus:
        return _check("yes", "%d NVIDIA GPU(s)" % len(gpus))
    return _check("no", "no NVIDIA GPU on the PCI bus")


def _driver(nv, errors):
    if not isinstance(nv.get("present"), bool):
        return _failed("gpu_facts", errors, bool(nv))
    if nv["present"]:
        version = nonblank(nv.get("driver_version")) or nonblank(nv.get("kernel_module_version"))
        return _check("yes", "loaded%s" % (" (%s)" % version if version else ""))
    return _check("no", "no NVIDIA driver loaded")


def _nvml(nv, errors):
    probe = _d(nv.get("probe"))
    if not probe:
        return _failed("gpu_facts", errors, bool(nv))
    status, backend = probe.get("status"), probe.get("backend") or "nvml"
    if status == "ok":
        return _check("yes", "answered (%s)" % backend)
    reason = nonblank(probe.get("error")) or str(status)
    return _check("no", "%s: %s" % (backend, reason))


def _kubelet(kl, errors):
    if not isinstance(kl.get("running"), bool):
        return _failed("kubelet_facts", errors, bool(kl))
    if kl["running"]:
        return _check("yes", "running%s" % (" (pid %s)" % kl["pid"] if kl.get("pid") is not None else ""))
    return _check("no", "no kubelet process")


def _kernel_log(nv, errors):
    if not nv:
        return _failed("gpu_facts", errors, False)
    if "xid" in nv and nv["xid"] is None:
        return _check("off", "Xid scan off")
    xid = _d(nv.get("xid"))
    if not xid:
        return _check("unknown", "no Xid scan result")
    warning = nonblank(xid.get("warning"))
    if xid.get("scanned") is False:
        return _check("no", "not readable: %s" % (warning or "no kernel log source answered"))
    source = nonblank(xid.get("source")) or "?"
    if warning:
        return _check("yes", "partly read from %s: %s" % (source, warning))
    return _check("yes", "read from %s" % source)


def _cluster_view(api):
    if api.get("exists") is True:
        ready = api.get("ready")
        return _check("yes", "Node object found%s" % ({True: ", Ready", False: ", NotReady"}.get(ready, "")))
    return _check("unknown", "no Node object in the cluster's view (the cluster pass did not run or lists no Node "
                             "of this name)")


def _api_gpus(api):
    """True when the cluster says the node has GPUs (allocatable nvidia.com/gpu, or GPU Feature
    Discovery's labels)."""
    alloc = str(_d(api.get("allocatable")).get("nvidia.com/gpu", "")).strip()
    labels = _d(api.get("labels"))
    count = str(labels.get(GFD_COUNT, "")).strip()
    return (alloc.isdigit() and int(alloc) > 0) or (count.isdigit() and int(count) > 0) \
        or str(labels.get(GFD_PRESENT, "")).strip().lower() == "true"


def gpu_models(ctx):
    """``{model: count}`` of the node's GPUs: the names the driver reports, else GPU Feature
    Discovery's ``nvidia.com/gpu.product`` label (with ``nvidia.com/gpu.count``); {} when neither says."""
    out = {}
    for gpu in _l(_d(ctx.get("nvidia")).get("gpus")):
        name = nonblank(gpu.get("name"))
        if name and (name in out or len(out) < MODEL_MAX):
            out[name] = out.get(name, 0) + 1
    if out:
        return out
    labels = _d(_d(ctx.get("api")).get("labels"))
    product = nonblank(labels.get(GFD_PRODUCT))
    if product:
        count = str(labels.get(GFD_COUNT, "")).strip()
        return {product[:DETAIL_MAX]: int(count) if count.isdigit() and len(count) < 6 else 0}
    return {}


def coverage(ctx):
    """The node's coverage ``{"status", "reason", "checks", "gpu_models"}`` from its evaluation context
    (``nvidia``, ``kubelet``, ``api``, ``errors``: probe name -> message); see the module docstring."""
    ctx = _d(ctx)
    nv, kl, api = _d(ctx.get("nvidia")), _d(ctx.get("kubelet")), _d(ctx.get("api"))
    errors = dict((str(k), _short(v)) for k, v in _d(ctx.get("errors")).items())
    checks = {"pci_gpus": _pci(nv, errors), "driver": _driver(nv, errors), "nvml": _nvml(nv, errors),
              "kubelet": _kubelet(kl, errors), "kernel_log": _kernel_log(nv, errors),
              "cluster_view": _cluster_view(api)}
    state = dict((k, v["state"]) for k, v in checks.items())
    if "yes" in (state["pci_gpus"], state["driver"], state["nvml"]):
        status, reason = "gpu_node", None
    elif _api_gpus(api) and "no" in (state["pci_gpus"], state["driver"]):
        status = "not_inspected"
        reason = ("the cluster says this node has GPUs but the probes saw no NVIDIA GPU and no driver: the audit "
                  "does not see the host (mount the host's /proc, /sys and /dev into the audit container)")
    elif state["driver"] == "no" and state["pci_gpus"] in ("no", "unknown"):
        status = "not_gpu_node"
        seen = "; ".join([checks["pci_gpus"]["detail"], checks["driver"]["detail"],
                          checks["kubelet"]["detail"] if state["kubelet"] != "yes" else "a kubelet runs (a CPU worker?)"])
        reason = ("nothing of a GPU node (%s): a host in the wrong inventory group, or an audit container without "
                  "the host's paths" % seen)
    else:
        status = "not_inspected"
        failed = sorted(p for p in ("gpu_facts", "kubelet_facts") if p in errors)
        reason = ("the probes saw nothing of the GPUs%s" % (" (%s failed)" % ", ".join(failed) if failed else ""))
    return {"status": status, "reason": reason, "checks": checks, "gpu_models": gpu_models(ctx)}
