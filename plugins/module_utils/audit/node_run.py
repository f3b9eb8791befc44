# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The body of kubegpu.fleet.audit_node: run the registered probes (probes.py ``REGISTRY``)
in order, each failure or unexpected exception captured as that probe's failed result, never
a traceback, and summarise them.

Node side: Python 3.8+. The controller-side action plugin does not import this file (it
imports the registry only).
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time
import traceback

from ansible_collections.kubegpu.fleet.plugins.module_utils._common import safe_io
from ansible_collections.kubegpu.fleet.plugins.module_utils._common.node_probes import ProbeFailed
from ansible_collections.kubegpu.fleet.plugins.module_utils.audit.probes import (
    EVALUATION_OPTIONS,
    NAMES,
    run_all,
)


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
    """Run the registered probes in order with audit_node's ``params`` (the evaluation
    options are dropped); ``host`` gives ``warn``, ``run_command`` and ``get_bin_path`` (the
    AnsibleModule). Returns ``(probes, elapsed)``."""
    params = dict((k, v) for k, v in params.items() if k not in EVALUATION_OPTIONS)
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
