# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""checkpoint_sync read/compare helper (kubegpu.fleet.checkpoint_sync before any removal).

Node side: Python 3.8+. See node_probes.py for the calling convention.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.kubegpu.fleet.plugins.module_utils._common import safe_io
from ansible_collections.kubegpu.fleet.plugins.module_utils.checkpoint.sync import (
    MalformedCheckpoint,
    analyze,
    parse_checkpoint,
    read_checkpoint,
)
from ansible_collections.kubegpu.fleet.plugins.module_utils._common.node_probes import ProbeFailed


def checkpoint_validate(params):
    """checkpoint_sync's option checks; raises ProbeFailed."""
    for i, dev in enumerate(params["device_ids"]):
        if not dev.strip():
            raise ProbeFailed("device_ids[%d] is empty; expected a GPU-/MIG- UUID" % i)
    for i, pat in enumerate(params["resource_names"]):
        if not pat.strip():
            raise ProbeFailed("resource_names[%d] is empty; expected a glob such as "
                              "nvidia.com/*" % i)
    try:
        safe_io.check_unit_name(params["kubelet_service"], "kubelet_service")
        safe_io.check_path(params["path"], "path")
        if params.get("restart_timeout") is not None:
            params["restart_timeout"] = safe_io.check_timeout(
                params["restart_timeout"], "restart_timeout", minimum=1.0, maximum=3600.0)
    except safe_io.UnsafeInput as e:
        raise ProbeFailed(str(e))
    if not os.path.basename(params["path"]):
        raise ProbeFailed("path %r names a directory, expected the checkpoint file"
                          % params["path"])


def checkpoint_inspect(params, warn):
    """Read and compare the checkpoint (checkpoint_sync before any removal).

    Returns ``(result, action)``: ``action`` is None when the module exits with ``result``
    (absent, matching, or stale with state=checked), else ``("unparsable", data, problem)``
    (state=synced with force) or ``("stale", data, parsed, analysis)`` (state=synced) for the
    caller's removal. Raises ProbeFailed (with the result keys) where the module fails.
    """
    checkpoint_validate(params)
    path = params["path"]
    result = dict(changed=False, exists=False, format=None, registered={}, allocated=[],
                  stale_ids=[], stale=False, backup_file=None, kubelet_restarted=False)
    data = None
    problem = None
    try:
        data = read_checkpoint(path)
    except MalformedCheckpoint as e:
        problem = e
        result["exists"] = True
    except (IOError, OSError) as e:
        raise ProbeFailed("%s: cannot read the checkpoint: %s" % (path, e), **result)
    if data is None and problem is None:
        result["msg"] = "%s does not exist; nothing to do" % path
        return result, None
    result["exists"] = True

    parsed = None
    if problem is None:
        try:
            parsed = parse_checkpoint(data)
        except MalformedCheckpoint as e:
            problem = e
    if problem is not None:
        if params["state"] == "synced" and params["force"] and data is not None:
            return result, ("unparsable", data, problem)
        raise ProbeFailed("%s: %s; the file was left untouched (state=synced with "
                          "force=true backs it up and removes it)" % (path, problem), **result)

    analysis = analyze(parsed, params["device_ids"], params["resource_names"])
    result.update(format=parsed["format"], registered=analysis["registered"],
                  allocated=analysis["allocated"], stale_ids=analysis["stale_ids"],
                  stale=analysis["stale"])
    if analysis["unverifiable_ids"]:
        warn("%s: ids %s are not GPU/MIG UUIDs (device plugin with "
             "--device-id-strategy=index?) and are not in device_ids; they cannot be "
             "compared and are not counted as stale"
             % (path, ", ".join(analysis["unverifiable_ids"][:10])))
    if not analysis["stale"]:
        result["msg"] = "%s matches the node (%d device ids checked)" % (
            path, analysis["checked_ids"])
        return result, None
    if params["state"] == "checked":
        result["msg"] = "%s is stale: %s not on the node" % (path, ", ".join(
            analysis["stale_ids"][:10]))
        return result, None
    return result, ("stale", data, parsed, analysis)
