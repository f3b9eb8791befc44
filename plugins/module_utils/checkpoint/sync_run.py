# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The body of kubegpu.fleet.checkpoint_sync: read and compare the checkpoint
(:func:`checkpoint_inspect`, which the audit's probe also runs) and, with state=synced, back
up and remove a stale or unparsable one and restart kubelet (:func:`checkpoint_sync_run`).

Node side: Python 3.8+. See node_probes.py for the calling convention.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.kubegpu.fleet.plugins.module_utils._common import safe_io
from ansible_collections.kubegpu.fleet.plugins.module_utils.checkpoint.sync import (
    CheckpointError,
    MalformedCheckpoint,
    analyze,
    backup_and_remove,
    describe,
    parse_checkpoint,
    read_checkpoint,
)
from ansible_collections.kubegpu.fleet.plugins.module_utils._common.fileutil import backup_file, unsafe_target
from ansible_collections.kubegpu.fleet.plugins.module_utils._common.node_probes import ProbeFailed

# How much of an unparsable checkpoint the diff shows.
DIFF_RAW_LIMIT = 4096


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


def checkpoint_sync_run(params, warn, get_bin_path, check_mode=False, diff=False):
    """kubegpu.fleet.checkpoint_sync: the result the module exits with.

    ``params`` are the module's (``probe_options.CHECKPOINT_SYNC``), ``warn(msg)`` and
    ``get_bin_path(name, required=True)`` the module's (the latter fails the module itself when
    systemctl is missing, before anything is touched). Raises ProbeFailed with the result keys
    where the module fails.
    """
    result, action = checkpoint_inspect(params, warn)
    if action is None:
        return result
    path = params["path"]
    if action[0] == "unparsable":
        data, problem = action[1], action[2]
        warn("%s is not a usable device checkpoint (%s); force=true: removing it" % (path, problem))
        raw = data[:DIFF_RAW_LIMIT].decode("utf-8", "replace")
        before = "# %s (unparsable: %s, %d bytes)\n%s%s\n" % (
            path, problem, len(data), raw, "..." if len(data) > DIFF_RAW_LIMIT else "")
        return _remove(params, result, data, before, "unparsable: %s" % problem,
                       warn, get_bin_path, check_mode, diff)
    data, parsed, analysis = action[1], action[2], action[3]
    if not params["device_ids"] and not params["force"]:
        raise ProbeFailed("device_ids is empty: refusing to remove %s, every id in it would "
                          "count as stale and a node that reports no GPUs usually has a "
                          "broken driver; set force=true if the GPUs were really removed"
                          % path, **result)
    if analysis["allocated"]:
        warn("%s records %d GPU allocations of pod containers; kubelet forgets them "
             "when the checkpoint is removed (drain GPU pods first)"
             % (path, len(analysis["allocated"])))
    before = describe(path, parsed, analysis, size=len(data))
    return _remove(params, result, data, before,
                   "stale: %s" % ", ".join(analysis["stale_ids"][:10]),
                   warn, get_bin_path, check_mode, diff)


def _not_removed(result):
    """The result of a failure before the file was removed: not changed, no diff."""
    out = dict(result, changed=False)
    out.pop("diff", None)
    return out


def _remove(params, result, data, before, reason, warn, get_bin_path, check_mode, diff):
    """Back up and remove the checkpoint (only if it still holds ``data``), then restart
    kubelet; returns the result, raises ProbeFailed."""
    path = params["path"]
    service = params["kubelet_service"]
    result["changed"] = True
    if diff:
        result["diff"] = {"before": before, "after": "",
                          "before_header": path, "after_header": "%s (absent)" % path}
    problem = unsafe_target(path, action="remove")
    if problem:
        raise ProbeFailed("refusing to remove %s: %s. A file root removes must be writable by "
                          "root only, or another user chooses what root removes; the file "
                          "was left untouched" % (path, problem), **_not_removed(result))
    systemctl = None
    if params["restart_kubelet"]:
        # Locate systemctl before touching anything, so a node without it fails cleanly.
        systemctl = get_bin_path("systemctl", required=True)
    if check_mode:
        result["kubelet_restarted"] = bool(params["restart_kubelet"])
        result["msg"] = "would %sremove %s (%s)%s" % (
            "back up and " if params["backup"] else "", path, reason,
            " and restart %s" % service if params["restart_kubelet"] else "")
        return result
    try:
        result["backup_file"] = backup_and_remove(
            path, data, backup_func=backup_file if params["backup"] else None)
    except CheckpointError as e:
        raise ProbeFailed("%s: %s" % (path, e), **_not_removed(result))
    except (IOError, OSError) as e:
        raise ProbeFailed("%s: cannot back up and remove: %s" % (path, e), **_not_removed(result))
    done = "removed %s (%s)%s" % (path, reason, ", backup at %s" % result["backup_file"]
                                  if result["backup_file"] else ", no backup")
    if systemctl is None:
        warn("%s; kubelet was not restarted: a running kubelet keeps the old device "
             "state in memory and writes it back" % done)
        result["msg"] = done
        return result
    try:
        res = safe_io.run_command([systemctl, "restart", service],
                                  params["restart_timeout"], limit=1 << 20,
                                  env=dict(os.environ, LC_ALL="C", SYSTEMD_PAGER=""))
    except (safe_io.UnsafeInput, OSError) as e:
        raise ProbeFailed("%s, but 'systemctl restart %s' failed: %s" % (done, service, e),
                          **result)
    rc, out, err = res.rc, res.text(), res.text("stderr")
    if rc != 0:
        raise ProbeFailed("%s, but 'systemctl restart %s' failed (rc=%d): %s"
                          % (done, service, rc, (err or out).strip() or "no output"),
                          rc=rc, stdout=out, stderr=err, **result)
    result["kubelet_restarted"] = True
    result["msg"] = "%s; restarted %s" % (done, service)
    return result
