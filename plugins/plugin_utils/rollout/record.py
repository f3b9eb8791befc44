# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The maintenance record a rollout persists on the Node: the ``kubegpu.io/maintenance``
annotation (the node's state before maintenance, so that a later run resumes it) and the
``kubegpu.io/maintenance-failed`` annotation (why a maintenance failed). Both are writable with the
Node's own credentials: they are node data, parsed under the one parse bound."""
from __future__ import annotations

import json

from ansible_collections.kubegpu.fleet.plugins.plugin_utils import parse_bound

MAINTENANCE_ANNOTATION = "kubegpu.io/maintenance"


def maintenance_annotation(record):
    """The ``kubegpu.io/maintenance`` annotation value for a maintenance record (stable JSON)."""
    keep = ("was_unschedulable", "boot_id", "allocatable", "started", "by")
    return json.dumps(dict((k, record.get(k)) for k in keep if k in record), sort_keys=True, separators=(",", ":"))


def parse_maintenance_annotation(text):
    """The record persisted on the Node, or None when absent or unreadable."""
    if not text:
        return None
    try:  # the Node's own credentials can write its annotations: node data, parsed under the bound
        data = parse_bound.load_json(text, "the maintenance annotation")
    except parse_bound.ParseError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("was_unschedulable"), bool):
        return None
    return data


def parse_failure_annotation(text):
    """The failure record (``kubegpu.io/maintenance-failed``) on a Node, or None when absent or unreadable."""
    if not text:
        return None
    try:  # node-writable, as the maintenance annotation
        data = parse_bound.load_json(text, "the maintenance-failed annotation")
    except parse_bound.ParseError:
        return None
    return data if isinstance(data, dict) else None
