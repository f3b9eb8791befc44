# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The audit's node probe registry: the one place that says which probes the audit runs, in
which order, with which options, chained how and skipped when.

kubegpu.fleet.audit_node iterates :data:`REGISTRY` on the node (its options are built from
the entries' ``audit_options``); its action plugin iterates it on the controller to turn the
probe results into the evaluation's input (``ctx_key``/``facts``). The single-probe modules
(gpu_facts, kubelet_facts, driver_guard, checkpoint_sync, cgroup_devices) take their option
specs from ``probe_options`` (the same dicts ``options`` points to) and call the same run
helpers, so a probe's result is the same whether its module or audit_node ran it. They do not
import this file, so a single-probe module ships and imports only its own probe's code.

A probe entry (:class:`Probe`):

``name``
    Result key under audit_node's ``probes`` and the probe's module name.
``options``
    The probe module's option spec (``probe_options``): its parameters start from these defaults.
``audit_options``
    ``{audit_node option: probe option}``: audit_node options that set this probe's options.
    An audit_node option shared by several probes (``dev_path``) takes its spec from the
    first probe that declares it; :data:`AUDIT_FALLBACKS` lists options that default to another.
    ``root`` (the node's filesystem root, ``/host`` from a container) is driver_guard's
    ``package_root`` and stack_facts' ``root``: both read the package database, and
    stack_facts the toolkit's config.toml, CDI specs and runtime binaries, under it.
``chain(results, audit_params)``
    Parameters taken from earlier probes' results (``results``: name -> result so far); may
    raise ProbeFailed (the probe then fails like its module would, for that input).
``skip(results)``
    None to run the probe, else the reason it is skipped (its result is then
    ``{"changed": False, "skipped": True, "skip_reason": reason}``).
``run(params, host)``
    The probe's result dict; raise ProbeFailed to fail. ``host`` gives ``warn(msg)``,
    ``run_command`` and ``get_bin_path`` (an AnsibleModule does).
``ctx_key``, ``facts``
    Where the controller-side evaluation (plugin_utils/audit/evaluate.py ``evaluate_node``) finds
    the probe's output: ``ctx[ctx_key]`` is ``result["ansible_facts"][facts]`` when ``facts``
    is set (and the action plugin sets that fact on the host), else the whole result; ``{}``
    when the probe failed or was skipped. A failed probe's message goes to ``ctx["errors"]``.

The end of this file is the body of kubegpu.fleet.audit_node (:func:`audit_node_run`): run the
registered probes in order, each failure or unexpected exception captured as that probe's failed
result, never a traceback, and summarise them.

Node side: Python 3.8+.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time
import traceback

from ansible_collections.kubegpu.fleet.plugins.module_utils._common import safe_io
from ansible_collections.kubegpu.fleet.plugins.module_utils.audit import probe_options
from ansible_collections.kubegpu.fleet.plugins.module_utils._common.node_probes import ProbeFailed

# The run functions import their probe's code when called: the audit_node action plugin imports
# this registry on the controller for every node (names, evaluation input) and must not pay for
# the node code (about 0.06 s of CPU per task). AnsiballZ still ships those modules with
# audit_node: its dependency finder reads imports anywhere in a file, function bodies included.
# pylint: disable=import-outside-toplevel


class Probe(object):
    """One registry entry (see the module docstring)."""

    def __init__(self, name, options, run, audit_options, ctx_key, facts=None, chain=None, skip=None):
        self.name = name
        self.options = options
        self.run = run
        self.audit_options = audit_options
        self.ctx_key = ctx_key
        self.facts = facts
        self.chain = chain or (lambda results, audit_params: {})
        self.skip = skip or (lambda results: None)

    def params(self, audit_params, results):
        """This probe's parameters: its defaults, the audit_node options mapped to it, then
        what it takes from earlier probes."""
        params = probe_options.defaults(self.options)
        for audit_name, name in self.audit_options.items():
            params[name] = audit_params[audit_name]
        params.update(self.chain(results, audit_params))
        return params


def facts_of(result, key):
    """``result["ansible_facts"][key]`` of a probe that succeeded, else {}."""
    if not isinstance(result, dict) or result.get("failed") or result.get("skipped"):
        return {}
    value = (result.get("ansible_facts") or {}).get(key)
    return value if isinstance(value, dict) else {}


def _nvidia(results):
    return facts_of(results.get("gpu_facts"), "nvidia")


# --------------------------------------------------------------------------- gpu_facts


def _run_gpu_facts(params, host):
    from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu.facts_run import gpu_facts_run
    return gpu_facts_run(params, host.warn)


# --------------------------------------------------------------------------- kubelet_facts


def _run_kubelet_facts(params, host):
    from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet.facts_run import kubelet_facts_run
    return kubelet_facts_run(params, host.run_command, host.get_bin_path)


def _chain_kubelet_facts(results, audit_params):
    # the role passes "" for "the one the kubelet's --config names"
    return {"config_path": audit_params.get("kubelet_config_path") or None}


# --------------------------------------------------------------------------- driver_guard


def _run_driver_guard(params, host):
    from ansible_collections.kubegpu.fleet.plugins.module_utils.driver.guard_run import (
        DRIVER_GUARD_ENVIRON,
        driver_guard_evaluate,
    )
    from ansible_collections.kubegpu.fleet.plugins.module_utils.driver.node import bounded_runner
    run = bounded_runner(params["command_timeout"], environ_update=DRIVER_GUARD_ENVIRON)
    return driver_guard_evaluate(params, run, host.get_bin_path, host.warn)[0]


def _chain_driver_guard(results, audit_params):
    """driver_guard gets the driver and kernel module versions, MIG state and GPU names from
    gpu_facts (None - detect it yourself - where gpu_facts does not know)."""
    nv = _nvidia(results)
    mig_mixed, mig_enabled = nv.get("mig_mixed"), nv.get("mig_enabled")
    return dict(
        driver_version=nv.get("driver_version") or None,
        kernel_module_version=nv.get("kernel_module_version") or None,
        mig_mixed=mig_mixed if isinstance(mig_mixed, bool) else None,
        mig_enabled=mig_enabled if isinstance(mig_enabled, bool) else None,
        gpu_names=[g.get("name") for g in nv.get("gpus") or []
                   if isinstance(g, dict) and isinstance(g.get("name"), str)],
    )


# --------------------------------------------------------------------------- checkpoint_sync


def _run_checkpoint_sync(params, host):
    if params["state"] != "checked":
        raise ProbeFailed("the checkpoint_sync probe only checks (state=checked)")
    from ansible_collections.kubegpu.fleet.plugins.module_utils.checkpoint.sync_run import checkpoint_inspect
    return checkpoint_inspect(params, host.warn)[0]


def _chain_checkpoint_sync(results, audit_params):
    """The checkpoint kubelet_facts found (the default path when it failed) and gpu_facts'
    device ids."""
    kl = facts_of(results.get("kubelet_facts"), "kubelet")
    device_ids = _nvidia(results).get("device_ids", [])
    if device_ids is None:
        raise ProbeFailed("missing required arguments: device_ids")
    return dict(path=kl.get("checkpoint_path") or probe_options.CHECKPOINT_PATH,
                device_ids=[str(d) for d in device_ids])


def _skip_checkpoint_sync(results):
    """Stale detection needs a trustworthy device list: skip unless NVML answered cleanly."""
    probe = _nvidia(results).get("probe") or {}
    if probe.get("status") == "ok" and not probe.get("errors"):
        return None
    return ("the NVML probe did not answer without errors (status %s): no trustworthy device list"
            % (probe.get("status"),))


# --------------------------------------------------------------------------- cgroup_devices


def _run_cgroup_devices(params, host):
    from ansible_collections.kubegpu.fleet.plugins.module_utils.cgroup.devices_run import cgroup_devices_run
    return cgroup_devices_run(params, host.warn)


def _skip_cgroup_devices(results):
    """Run only when an NVIDIA driver is present; else say whether gpu_facts failed (and why)
    or found no driver (and what it could not read, when procfs was not fully readable)."""
    gpu = results.get("gpu_facts") or {}
    nv = _nvidia(results)
    if nv.get("present"):
        return None
    if gpu.get("failed"):
        return "gpu_facts failed, so whether an NVIDIA driver is present is unknown: %s" % (
            gpu.get("msg") or "no message")
    probe = nv.get("probe") or {}
    reason = "no NVIDIA driver present (gpu_facts: probe %s%s)" % (
        probe.get("status"), ", %s" % probe.get("error") if probe.get("error") else "")
    unread = [w for w in nv.get("warnings") or [] if isinstance(w, str) and w.startswith("cannot ")]
    if unread:
        reason += "; but procfs was not fully readable: %s" % "; ".join(unread)
    return reason


# --------------------------------------------------------------------------- stack_facts


def _run_stack_facts(params, host):
    # config.toml comes back as text: the audit_node action parses it on the controller
    # (plugin_utils/stack/facts.finish_stack_facts), as the stack_facts action does.
    from ansible_collections.kubegpu.fleet.plugins.module_utils.stack.facts import stack_facts_run
    return stack_facts_run(params, host.get_bin_path, host.warn)


# --------------------------------------------------------------------------- the registry

REGISTRY = (
    Probe("gpu_facts", probe_options.GPU_FACTS, _run_gpu_facts, ctx_key="nvidia", facts="nvidia",
          audit_options={"nvidia_proc_path": "proc_path", "dev_path": "dev_path", "driver_root": "driver_root",
                         "backend": "backend", "timeout": "timeout", "sys_path": "sys_path", "xid": "xid",
                         "xid_timeout": "xid_timeout", "kmsg_path": "kmsg_path"}),
    Probe("kubelet_facts", probe_options.KUBELET_FACTS, _run_kubelet_facts, ctx_key="kubelet", facts="kubelet",
          audit_options={"proc_path": "proc_path"}, chain=_chain_kubelet_facts),
    Probe("driver_guard", probe_options.DRIVER_GUARD, _run_driver_guard, ctx_key="driver_guard",
          audit_options={"nvidia_proc_path": "proc_path", "dev_path": "dev_path", "driver_root": "driver_root",
                         "root": "package_root", "timeout": "timeout", "catalog_extra": "catalog_extra",
                         "_catalog": "_catalog"},
          chain=_chain_driver_guard),
    Probe("checkpoint_sync", probe_options.CHECKPOINT_SYNC, _run_checkpoint_sync, ctx_key="checkpoint",
          chain=_chain_checkpoint_sync, skip=_skip_checkpoint_sync, audit_options={}),
    Probe("cgroup_devices", probe_options.CGROUP_DEVICES, _run_cgroup_devices, ctx_key="cgroups",
          audit_options={"nvidia_proc_path": "proc_path", "dev_path": "dev_path", "cgroup_root": "cgroup_root",
                         "cgroup_mode": "mode"},
          skip=_skip_cgroup_devices),
    Probe("stack_facts", probe_options.STACK_FACTS, _run_stack_facts, ctx_key="stack", facts="nvidia_stack",
          audit_options={"root": "root", "nvidia_proc_path": "proc_path", "dev_path": "dev_path",
                         "sys_path": "sys_path"}),
)

NAMES = tuple(p.name for p in REGISTRY)

# audit_node options that are not a probe option of their own.
AUDIT_EXTRA_OPTIONS = dict(
    # the kubelet probe's config_path: empty or unset means the one the kubelet's --config names
    kubelet_config_path=dict(type="path"),
)
# audit_node options its action plugin uses on the controller to evaluate the findings (as
# kubegpu.fleet.audit_evaluate does); never sent to the node.
EVALUATION_OPTIONS = dict(
    node=dict(type="str"),
    api=dict(type="dict", default={}),
    pending_threshold=dict(type="int", default=300),
    memory_min_fraction=dict(type="float", default=0.8),
    skip=dict(type="list", elements="str", default=[]),
    expected_gpus=dict(type="int"),
)
# audit_node options its action plugin uses on the controller to shape the task's result; never
# sent to the node.
RESULT_OPTIONS = dict(
    details=dict(type="bool", default=True),
)
# audit_node options its action plugin reads on the controller into the catalog_extra it sends:
# the overlay file kubegpu.fleet.catalog_refresh wrote (empty: none). Never sent to the node.
CATALOG_OPTIONS = dict(
    catalog_overlay=dict(type="str", default=""),
)
# Every audit_node option the controller keeps for itself.
CONTROLLER_OPTIONS = dict(EVALUATION_OPTIONS, **dict(RESULT_OPTIONS, **CATALOG_OPTIONS))
# audit_node options whose default is another audit_node option's value.
AUDIT_FALLBACKS = {"nvidia_proc_path": "proc_path"}


def audit_argument_spec():
    """kubegpu.fleet.audit_node's argument_spec, from the registry (plus the controller's
    options, which the module accepts and ignores: its action plugin takes them out)."""
    out = {}
    for probe in REGISTRY:
        for audit_name, name in probe.audit_options.items():
            if audit_name not in out:
                out[audit_name] = probe_options.spec({name: probe.options[name]})[name]
    out.update(probe_options.spec(AUDIT_EXTRA_OPTIONS))
    out.update(probe_options.spec(CONTROLLER_OPTIONS))
    for name, fallback in AUDIT_FALLBACKS.items():
        out[name].pop("default", None)
        if fallback not in out:
            raise ValueError("audit option %s falls back to unknown option %s" % (name, fallback))
    return out


def run_all(audit_params, host, run_probe, clock):
    """Run every registered probe in order; returns ``(results, elapsed)``.

    ``run_probe(name, func)`` runs one probe function (``func(warn)`` -> result) and turns a
    failure into a failed result; ``clock()`` returns seconds (time.time)."""
    audit_params = dict(audit_params)
    for name, fallback in AUDIT_FALLBACKS.items():
        if audit_params.get(name) is None:
            audit_params[name] = audit_params[fallback]
    results, elapsed = {}, {}
    for probe in REGISTRY:
        reason = probe.skip(results)
        if reason is not None:
            results[probe.name] = dict(changed=False, skipped=True, skip_reason=reason)
            elapsed[probe.name] = 0
            continue
        start = clock()
        results[probe.name] = run_probe(probe.name, _bound(probe, audit_params, results, host))
        elapsed[probe.name] = round(clock() - start, 3)
    return results, elapsed


class _Host(object):
    """``host`` for a probe run: the module's run_command/get_bin_path, the probe's warn."""

    def __init__(self, host, warn):
        self.run_command = host.run_command
        self.get_bin_path = host.get_bin_path
        self.warn = warn


def _bound(probe, audit_params, results, host):
    def func(warn):
        return probe.run(probe.params(audit_params, results), _Host(host, warn))
    return func


def evaluation_input(results):
    """``(ctx, errors)`` for evaluate_node from audit_node's probe results (controller side):
    each probe's ``ctx_key`` as the module's task would have passed it, and the messages of
    the probes that failed."""
    ctx, errors = {}, {}
    for probe in REGISTRY:
        res = results.get(probe.name)
        if not isinstance(res, dict):
            res = {}
        if res.get("failed"):
            errors[probe.name] = res.get("msg") or "failed"
            ctx[probe.ctx_key] = {}
        elif probe.facts:
            ctx[probe.ctx_key] = facts_of(res, probe.facts)
        else:
            ctx[probe.ctx_key] = res  # a skipped probe's result too, as a task registers it
    return ctx, errors


# The body of kubegpu.fleet.audit_node, on the node.

def raised_at(exc):
    """``file:line in function`` of the innermost frame: where to look, without a traceback."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return None
    last = frames[-1]
    return "%s:%d in %s" % (last.filename.rsplit("/", 1)[-1], last.lineno, last.name)


def run_probe(name, func, warn):
    """Run one probe; return its result dict (failures and exceptions become failed results).

    ``func(warn)`` returns the probe's result or raises; the probe's warnings are kept in its
    result and passed on to ``warn``."""
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
                      raised_at=raised_at(e))
    if warnings:
        result["warnings"] = warnings
        for w in warnings:
            warn(w)
    return result


def run_probes(params, host, clock=time.time):
    """Run the registered probes in order with audit_node's ``params`` (the controller's
    options are dropped); ``host`` gives ``warn``, ``run_command`` and ``get_bin_path`` (the
    AnsibleModule). Returns ``(probes, elapsed)``."""
    params = dict((k, v) for k, v in params.items() if k not in CONTROLLER_OPTIONS)
    return run_all(params, host, lambda name, func: run_probe(name, func, host.warn), clock)


def summary(probes):
    """``(failed probe names, message)`` for audit_node's result, in registry order."""
    failed = [name for name in NAMES if probes[name].get("failed")]
    msg = "%d probes run, %d skipped, %d failed%s" % (
        len([n for n in NAMES if not probes[n].get("skipped")]),
        len([n for n in NAMES if probes[n].get("skipped")]), len(failed),
        (": " + ", ".join(failed)) if failed else "")
    return failed, msg


def audit_node_run(params, host, clock=time.time):
    """kubegpu.fleet.audit_node: the result the module exits with; raises ProbeFailed for a bad
    ``timeout`` (before any probe runs). A failing probe never fails the module."""
    try:
        safe_io.check_timeout(params["timeout"], "timeout", minimum=0.001)
    except safe_io.UnsafeInput as e:
        raise ProbeFailed(str(e))
    probes, elapsed = run_probes(params, host, clock)
    failed, msg = summary(probes)
    return dict(changed=False, probes=probes, failed_probes=failed, elapsed=elapsed, msg=msg)
