# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of the audit's per-node evaluation, shared by the kubegpu.fleet.audit_node
action (probes and evaluation in one task) and kubegpu.fleet.audit_evaluate (evaluation of
results gathered by other tasks): option checks, the catalog v2 for the evaluation, and the
``kubegpu_audit`` fact that kubegpu.fleet.audit_report aggregates.
"""
from __future__ import annotations

import math

from ansible_collections.kubegpu.fleet.plugins.module_utils.driver.catalog import CatalogError as DriverCatalogError
from ansible_collections.kubegpu.fleet.plugins.plugin_utils import catalog_v2, driver_catalog_ctl
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.findings import FINDINGS, evaluate_node


def check_evaluation_options(args):
    """The message for the first bad evaluation option, None when all are good."""
    if args.get("pending_threshold") is not None and args["pending_threshold"] < 0:
        return "pending_threshold must be a number of seconds >= 0, got %r" % (args["pending_threshold"],)
    fraction = args.get("memory_min_fraction")
    if fraction is not None and (math.isnan(fraction) or math.isinf(fraction) or fraction < 0):
        return ("memory_min_fraction must be a finite number >= 0 (a fraction such as 0.8), got %r"
                % (fraction,))
    if args.get("expected_gpus") is not None and args["expected_gpus"] < 0:
        return "expected_gpus must be a GPU count >= 0, got %r" % (args["expected_gpus"],)
    unknown = sorted(set(args.get("skip") or []) - set(FINDINGS))
    if unknown:
        return "unknown finding id(s) in skip: %s (known: %s)" % (", ".join(unknown), ", ".join(sorted(FINDINGS)))
    return None


def load_evaluation_catalog(catalog_extra=None, directory=None):
    """``(entries, error)``: the catalog v2 entries the findings are evaluated with - the bundled
    catalog (read, validated and cached per process by driver_catalog_ctl) plus the task's
    ``catalog_extra`` documents.

    Invalid ``catalog_extra`` documents are left out (the driver_guard probe, which validates
    the same documents, already fails with the reason), so the bundled entries still apply;
    ``(None, message)`` only when the bundled catalog itself cannot be read or is invalid."""
    if catalog_extra:
        try:
            return driver_catalog_ctl.catalog_entries(catalog_extra, directory), None
        except (catalog_v2.CatalogError, DriverCatalogError, IOError, OSError):
            pass  # the bundled catalog alone, below (its own problems are reported there)
    try:
        return driver_catalog_ctl.catalog_entries(None, directory), None
    except (catalog_v2.CatalogError, DriverCatalogError) as e:
        return None, "catalog v2: %s" % e
    except (IOError, OSError) as e:
        return None, "cannot read the catalog v2: %s" % e


def unreachable_audit(node, error):
    """``kubegpu_audit`` of a node the probes never reached: listed, never dropped."""
    return {"node": node, "status": "unreachable", "error": error, "findings": []}


def evaluate(node, ctx, args):
    """``(findings, kubegpu_audit)`` for one node; ``ctx`` as evaluate_node takes it, ``args``
    the evaluation options (pending_threshold, memory_min_fraction, skip, expected_gpus)."""
    findings = evaluate_node(ctx, pending_threshold_s=args["pending_threshold"],
                             memory_min_fraction=args["memory_min_fraction"], skip=args["skip"],
                             expected_gpus=args.get("expected_gpus"))
    return findings, {"node": node, "status": "audited", "findings": findings}
