# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Boot-time guard: remove a stale kubelet device-manager checkpoint before kubelet starts.

Run it with an explicit interpreter, as the unit does:
``python3 -I -B /usr/local/lib/kubegpu/checkpoint_guard.py --dry-run``.

Installed by the kubegpu.fleet.checkpoint_guard role together with ``checkpoint.py`` and
``fileutil.py`` (the collection's module_utils, copied verbatim) and run by
``kubegpu-checkpoint-guard.service`` (Type=oneshot, Before=kubelet.service). Standard library
only; Python 3.8+.

1. No checkpoint, or no ids in it for the watched resources: nothing to do.
2. Wait (bounded) for the NVIDIA driver, then list the node's GPU/MIG UUIDs with
   ``nvidia-smi -L`` under a hard timeout. If the driver is absent, nvidia-smi fails, hangs,
   or prints anything it cannot vouch for, the device list is not trustworthy and nothing
   is deleted.
3. Stale ids (in the checkpoint, not on the node): back the file up byte for byte (0600)
   beside it and remove it. kubelet has not started yet, so it simply starts with an empty
   checkpoint; no restart is needed.

Every decision is logged (to the journal when run by systemd) with the reason. Exit status:
0 when the guard did its job (including "could not verify, left alone"), 1 when removing a
stale checkpoint failed, 2 on bad usage. The unit uses Wants=, never Requires=, so even a
failure here does not keep kubelet from starting.
"""
from __future__ import absolute_import, division, print_function

import argparse
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import checkpoint as ck  # noqa: E402  pylint: disable=wrong-import-position
import fileutil  # noqa: E402  pylint: disable=wrong-import-position

PROG = "kubegpu-checkpoint-guard"
ERR, WARNING, NOTICE, INFO = 3, 4, 5, 6
_NAMES = {ERR: "error", WARNING: "warning", NOTICE: "notice", INFO: "info"}
# Where NVIDIA installs nvidia-smi besides $PATH (driver packages, GPU Operator host paths).
EXTRA_BIN_DIRS = ("/usr/bin", "/usr/sbin", "/usr/local/bin", "/usr/local/nvidia/bin",
                  "/run/nvidia/driver/usr/bin", "/bin", "/sbin")


def log(priority, message):
    """One line per event. Under systemd (JOURNAL_STREAM set) a ``<N>`` prefix sets the
    journal priority; elsewhere the level is written out."""
    if os.environ.get("JOURNAL_STREAM"):
        line = "<%d>%s" % (priority, message)
    else:
        line = "%s: %s: %s" % (PROG, _NAMES[priority], message)
    stream = sys.stderr if priority <= WARNING and not os.environ.get("JOURNAL_STREAM") \
        else sys.stdout
    stream.write(line + "\n")
    stream.flush()


def summary(**fields):
    """Machine-readable last line: ``summary {"action": ..., ...}``."""
    log(NOTICE if fields.get("action") == "removed" else INFO,
        "summary " + json.dumps(fields, sort_keys=True))


def find_nvidia_smi(name):
    if os.path.sep in name:
        return name if os.access(name, os.X_OK) else None
    dirs = os.environ.get("PATH", "").split(os.pathsep) + list(EXTRA_BIN_DIRS)
    return shutil.which(name, path=os.pathsep.join(d for d in dirs if d))


def parse_args(argv):
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--checkpoint", default=ck.DEFAULT_PATH,
                    help="kubelet device checkpoint (default: %(default)s)")
    ap.add_argument("--nvidia-smi", default="nvidia-smi",
                    help="nvidia-smi command or path (default: %(default)s)")
    ap.add_argument("--timeout", type=float, default=30.0,
                    help="seconds nvidia-smi -L may take before it is killed (default: 30)")
    ap.add_argument("--driver-wait", type=float, default=30.0,
                    help="seconds to wait for <proc>/driver/nvidia/version (default: 30)")
    ap.add_argument("--proc-path", default="/proc", help="procfs root (default: /proc)")
    ap.add_argument("--resource-name", action="append", dest="resource_names",
                    help="glob of resources to compare; repeatable (default: nvidia.com/*)")
    ap.add_argument("--no-backup", action="store_true",
                    help="remove without keeping a backup copy")
    ap.add_argument("--remove-malformed", action="store_true",
                    help="also back up and remove a checkpoint that cannot be parsed")
    ap.add_argument("--dry-run", action="store_true",
                    help="report what would be done, change nothing")
    args = ap.parse_args(argv)
    if args.timeout <= 0 or args.driver_wait < 0:
        ap.error("--timeout must be > 0 and --driver-wait >= 0")
    if not args.resource_names:
        args.resource_names = list(ck.DEFAULT_RESOURCE_NAMES)
    return args


def remove(args, data, reason):
    """Back up and remove; returns the exit status."""
    path = args.checkpoint
    if args.dry_run:
        log(NOTICE, "dry run: would %sremove %s (%s)"
            % ("" if args.no_backup else "back up and ", path, reason))
        summary(action="would-remove", path=path, reason=reason)
        return 0
    try:
        backup = ck.backup_and_remove(
            path, data, backup_func=None if args.no_backup else fileutil.backup_file)
    except ck.CheckpointError as e:
        log(ERR, "%s: not removed: %s" % (path, e))
        summary(action="failed", path=path, reason=str(e))
        return 1
    except (IOError, OSError) as e:
        log(ERR, "%s: cannot back up and remove: %s" % (path, e))
        summary(action="failed", path=path, reason=str(e))
        return 1
    log(NOTICE, "removed %s (%s); %s; kubelet will start with an empty device checkpoint"
        % (path, reason, "backup at %s" % backup if backup else "no backup kept"))
    summary(action="removed", path=path, reason=reason, backup_file=backup)
    return 0


def run(args):
    path = args.checkpoint
    try:
        data = ck.read_checkpoint(path)
    except ck.MalformedCheckpoint as e:
        log(WARNING, "%s: %s; left alone" % (path, e))
        summary(action="none", path=path, reason=str(e))
        return 0
    except (IOError, OSError) as e:
        log(ERR, "%s: cannot read: %s" % (path, e))
        summary(action="failed", path=path, reason=str(e))
        return 1
    if data is None:
        log(INFO, "%s does not exist; nothing to do" % path)
        summary(action="none", path=path, reason="no checkpoint")
        return 0
    try:
        parsed = ck.parse_checkpoint(data)
    except ck.MalformedCheckpoint as e:
        if args.remove_malformed:
            log(WARNING, "%s is not a usable device checkpoint (%s); removing it as "
                "configured (--remove-malformed)" % (path, e))
            return remove(args, data, "unparsable: %s" % e)
        log(WARNING, "%s is not a usable device checkpoint (%s); left alone (kubelet logs "
            "and ignores a corrupt checkpoint)" % (path, e))
        summary(action="none", path=path, reason="unparsable: %s" % e)
        return 0

    # Nothing to compare: do not touch the driver at all.
    probe = ck.analyze(parsed, [], args.resource_names)
    if probe["checked_ids"] == 0:
        log(INFO, "%s records no devices for %s; nothing to do"
            % (path, ", ".join(args.resource_names)))
        summary(action="none", path=path, reason="no matching devices")
        return 0

    if not ck.wait_for_driver(args.proc_path, args.driver_wait):
        log(WARNING, "NVIDIA driver not loaded after %gs (%s missing); cannot verify %s, "
            "left alone" % (args.driver_wait,
                            os.path.join(args.proc_path, "driver", "nvidia", "version"), path))
        summary(action="none", path=path, reason="driver not loaded")
        return 0
    smi = find_nvidia_smi(args.nvidia_smi)
    if smi is None:
        log(WARNING, "%s not found; cannot verify %s, left alone" % (args.nvidia_smi, path))
        summary(action="none", path=path, reason="nvidia-smi not found")
        return 0
    ids, error = ck.list_node_devices(smi, args.timeout)
    if error:
        log(WARNING, "device list not trustworthy, %s left alone: %s" % (path, error))
        summary(action="none", path=path, reason="untrusted device list: %s" % error)
        return 0

    analysis = ck.analyze(parsed, ids, args.resource_names)
    if analysis["unverifiable_ids"]:
        log(WARNING, "ids %s in %s are not GPU/MIG UUIDs (device-id-strategy=index?); not "
            "counted as stale" % (", ".join(analysis["unverifiable_ids"][:10]), path))
    if not analysis["stale"]:
        log(INFO, "%s matches the node's %d devices (%d ids checked); nothing to do"
            % (path, len(ids), analysis["checked_ids"]))
        summary(action="none", path=path, reason="not stale", node_devices=len(ids))
        return 0
    for line in ck.describe(path, parsed, analysis, size=len(data)).splitlines():
        log(INFO, line)
    log(NOTICE, "%s is stale: %d ids are not on this node (node has %s)"
        % (path, len(analysis["stale_ids"]), ", ".join(ids)))
    return remove(args, data, "stale: %s" % ", ".join(analysis["stale_ids"]))


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return run(args)
    except Exception as e:  # pylint: disable=broad-except
        # Last resort: one clear journal line instead of a traceback; kubelet still starts.
        log(ERR, "unexpected failure: %s: %s" % (type(e).__name__, e))
        summary(action="failed", path=args.checkpoint, reason="%s: %s" % (type(e).__name__, e))
        return 1


if __name__ == "__main__":
    sys.exit(main())
