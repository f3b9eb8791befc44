# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""kubelet device-manager checkpoint: parse, compare with the node's GPUs, remove safely.

Node side, Python 3.8+, standard library and the collection's ``fileutil`` only: the
``checkpoint_guard`` role installs this very file next to its boot-time entry script, which
imports it outside Ansible, with ``fileutil.py`` beside it. The file is removed through
``fileutil.remove_file`` (the collection's one way to remove a node file).

File format (``<kubelet root-dir>/device-plugins/kubelet_internal_checkpoint``)::

    {"Data": {"PodDeviceEntries": [{"PodUID": "..", "ContainerName": "..",
                                    "ResourceName": "nvidia.com/gpu",
                                    "DeviceIDs": {"0": ["GPU-.."]},    # v2, kubelet >= 1.20
                                    "AllocResp": "<base64 protobuf>"}],
              "RegisteredDevices": {"nvidia.com/gpu": ["GPU-.."]}},
     "Checksum": 1234, "BootID": ".."}                                 # BootID: newer kubelets

``DeviceIDs`` is a plain list in the v1 format (kubelet < 1.20) and a map from NUMA node
(decimal string, ``-1`` for devices without topology) to a list in v2. ``PodDeviceEntries``
and any list may be ``null`` (a nil Go slice). The checksum is FNV-32a over a go-spew dump of
the Go struct and cannot be recomputed here, so the file is never edited: a stale checkpoint
is backed up and removed, and kubelet starts from an empty one.

Device id comparison rule (``normalize_id``/``classify_id``):

* ``<id>::<n>`` (time-slicing / MPS replicas of k8s-device-plugin) compares on ``<id>``.
* Comparison ignores ASCII case (NVML prints lowercase hex; nothing relies on case).
* ``GPU-<uuid>`` and ``MIG-<uuid>`` are present when the node reports the same UUID.
* Legacy ``MIG-GPU-<uuid>/<gi>/<ci>`` is the MIG device UUID that drivers before R470
  reported (``nvidia-smi -L`` printed it in exactly that form). R470 and later report
  ``MIG-<uuid>`` instead, and neither form can be derived from the other. So a legacy id
  counts as present only when the node reports that exact legacy id (driver still pre-R470
  and same MIG layout); otherwise it is stale: the driver was upgraded or the layout changed,
  and the device plugin no longer advertises that id.
* Ids that are neither ``GPU-``/``MIG-`` UUIDs nor on the node (for example ``0``/``1`` from
  the device plugin's ``--device-id-strategy=index``) cannot be compared with a UUID list;
  they are reported as *unverifiable* and never counted as stale.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import fnmatch
import json
import os
import re
import subprocess
import time

if __name__.startswith("ansible_collections."):
    from ansible_collections.kubegpu.fleet.plugins.module_utils._common import fileutil
else:   # installed by the checkpoint_guard role as checkpoint.py, beside fileutil.py
    import fileutil  # pylint: disable=import-error

DEFAULT_PATH = "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"
DEFAULT_RESOURCE_NAMES = ("nvidia.com/*",)
# Real checkpoints are a few KiB to a few hundred KiB; anything far beyond is not one.
MAX_CHECKPOINT_BYTES = 64 << 20

FORMAT_V1 = "v1"
FORMAT_V2 = "v2"
FORMAT_UNKNOWN = "unknown"

_NUMA_KEY_RE = re.compile(r"^-?[0-9]{1,19}$")
_SMI_LINE_RE = re.compile(
    r"^\s*(?:GPU\s+\d+|MIG\s+.*?Device\s+\d+)\s*:.*\(UUID:\s*([^)\s]+)\s*\)\s*$")
_LEGACY_MIG_RE = re.compile(r"^mig-gpu-[^/]+/\d+/\d+$")


class CheckpointError(ValueError):
    """Base class: a checkpoint cannot be used or changed safely."""


class MalformedCheckpoint(CheckpointError):
    """The file is not a readable kubelet device-manager checkpoint (bad JSON or types)."""


class CheckpointChanged(CheckpointError):
    """The file changed between analysis and removal (kubelet wrote it meanwhile)."""


# --------------------------------------------------------------------------- device ids

def base_id(dev_id):
    """``GPU-x::3`` -> ``GPU-x``: the device a time-slicing/MPS replica id belongs to."""
    return dev_id.split("::", 1)[0]


def normalize_id(dev_id):
    """Comparison key of a device id: replica suffix dropped, surrounding space and case."""
    return base_id(dev_id).strip().lower()


def classify_id(dev_id):
    """``gpu``, ``mig``, ``mig-legacy`` or ``other`` (not a UUID, e.g. an index id)."""
    key = normalize_id(dev_id)
    if _LEGACY_MIG_RE.match(key):
        return "mig-legacy"
    if key.startswith("gpu-") and len(key) > 4:
        return "gpu"
    if key.startswith("mig-") and len(key) > 4:
        return "mig"
    return "other"


def resource_matches(resource, patterns):
    """True when ``resource`` matches one of the glob ``patterns`` (case sensitive)."""
    for pattern in patterns:
        if fnmatch.fnmatchcase(resource, pattern):
            return True
    return False


# --------------------------------------------------------------------------- parsing

def _reject_constant(name):
    raise MalformedCheckpoint("invalid JSON number %s" % name)


def _id_list(value, where):
    """A JSON list of strings (or null, a nil Go slice) -> list of str."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise MalformedCheckpoint("%s must be a list of strings, got %s"
                                  % (where, _json_type(value)))
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise MalformedCheckpoint("%s[%d] must be a string, got %s"
                                      % (where, i, _json_type(item)))
    return list(value)


def _json_type(value):
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _string_field(entry, key, where, required):
    if key not in entry:
        if required:
            raise MalformedCheckpoint("%s has no %s" % (where, key))
        return ""
    value = entry[key]
    if not isinstance(value, str):
        raise MalformedCheckpoint("%s.%s must be a string, got %s"
                                  % (where, key, _json_type(value)))
    return value


def _device_ids(value, where):
    """DeviceIDs of one entry -> (format or None, {numa: [ids]} or None, flat list)."""
    if value is None:
        return None, None, []
    if isinstance(value, list):
        return FORMAT_V1, None, _id_list(value, where)
    if isinstance(value, dict):
        numa = {}
        flat = []
        for key in sorted(value, key=_numa_sort_key):
            if not _NUMA_KEY_RE.match(key):
                raise MalformedCheckpoint("%s has NUMA node key %r, expected an integer"
                                          % (where, key))
            ids = _id_list(value[key], "%s[%r]" % (where, key))
            numa[key] = ids
            flat.extend(ids)
        return FORMAT_V2, numa, flat
    raise MalformedCheckpoint("%s must be a list (v1) or a NUMA-node map (v2), got %s"
                              % (where, _json_type(value)))


def _numa_sort_key(key):
    try:
        return (0, int(key), key)
    except ValueError:
        return (1, 0, key)


def parse_checkpoint(data):
    """Parse checkpoint bytes (or text) into plain data; raise MalformedCheckpoint.

    Returns ``{"format", "boot_id", "checksum", "registered": {resource: [ids]},
    "entries": [{"pod_uid", "container", "resource", "device_ids", "numa"}]}`` where
    ``numa`` is ``{node: [ids]}`` for v2 entries and None for v1. ``format`` is ``v1``/``v2``
    from the entries' DeviceIDs, ``v2`` when only a ``BootID`` tells, else ``unknown``.
    Unknown extra keys are ignored (newer kubelets add some).
    """
    if isinstance(data, (bytes, bytearray)):
        if len(data) > MAX_CHECKPOINT_BYTES:
            raise MalformedCheckpoint("file is %d bytes, larger than any device checkpoint "
                                      "(limit %d)" % (len(data), MAX_CHECKPOINT_BYTES))
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as e:
            raise MalformedCheckpoint("not UTF-8 text (byte %d)" % e.start)
    elif isinstance(data, str):
        text = data
    else:
        raise MalformedCheckpoint("expected bytes or text, got %s" % type(data).__name__)
    if not text.strip():
        raise MalformedCheckpoint("file is empty")
    try:
        doc = json.loads(text, parse_constant=_reject_constant)
    except MalformedCheckpoint:
        raise
    except RecursionError:
        raise MalformedCheckpoint("invalid JSON: nested too deeply")
    except ValueError as e:
        raise MalformedCheckpoint("invalid JSON: %s" % e)

    if not isinstance(doc, dict):
        raise MalformedCheckpoint("top level must be a JSON object, got %s" % _json_type(doc))
    if "Data" not in doc:
        raise MalformedCheckpoint("no \"Data\" object: not a kubelet device-manager checkpoint"
                                  " (top-level keys: %s)" % ", ".join(sorted(doc)[:10]))
    body = doc["Data"]
    if not isinstance(body, dict):
        raise MalformedCheckpoint("Data must be an object, got %s" % _json_type(body))
    checksum = doc.get("Checksum")
    if checksum is not None and (isinstance(checksum, bool) or not isinstance(checksum, int)):
        raise MalformedCheckpoint("Checksum must be an integer, got %s" % _json_type(checksum))
    boot_id = doc.get("BootID")
    if boot_id is not None and not isinstance(boot_id, str):
        raise MalformedCheckpoint("BootID must be a string, got %s" % _json_type(boot_id))

    registered = {}
    reg = body.get("RegisteredDevices")
    if reg is not None:
        if not isinstance(reg, dict):
            raise MalformedCheckpoint("Data.RegisteredDevices must be an object, got %s"
                                      % _json_type(reg))
        for resource in sorted(reg):
            registered[resource] = _id_list(reg[resource],
                                            "Data.RegisteredDevices[%r]" % resource)

    entries = []
    formats = set()
    raw_entries = body.get("PodDeviceEntries")
    if raw_entries is not None:
        if not isinstance(raw_entries, list):
            raise MalformedCheckpoint("Data.PodDeviceEntries must be a list or null, got %s"
                                      % _json_type(raw_entries))
        for i, entry in enumerate(raw_entries):
            where = "Data.PodDeviceEntries[%d]" % i
            if not isinstance(entry, dict):
                raise MalformedCheckpoint("%s must be an object, got %s"
                                          % (where, _json_type(entry)))
            resource = _string_field(entry, "ResourceName", where, True)
            pod_uid = _string_field(entry, "PodUID", where, False)
            container = _string_field(entry, "ContainerName", where, False)
            if "DeviceIDs" not in entry:
                raise MalformedCheckpoint("%s has no DeviceIDs" % where)
            fmt, numa, flat = _device_ids(entry["DeviceIDs"], where + ".DeviceIDs")
            alloc = entry.get("AllocResp")
            if alloc is not None and not isinstance(alloc, str):
                raise MalformedCheckpoint("%s.AllocResp must be a base64 string, got %s"
                                          % (where, _json_type(alloc)))
            if fmt is not None:
                formats.add(fmt)
            entries.append({"pod_uid": pod_uid, "container": container, "resource": resource,
                            "device_ids": flat, "numa": numa})
    if len(formats) > 1:
        raise MalformedCheckpoint("Data.PodDeviceEntries mixes list (v1) and NUMA-map (v2) "
                                  "DeviceIDs")
    if formats:
        fmt = formats.pop()
    elif boot_id is not None:
        fmt = FORMAT_V2
    else:
        fmt = FORMAT_UNKNOWN
    return {"format": fmt, "boot_id": boot_id, "checksum": checksum,
            "registered": registered, "entries": entries}


# --------------------------------------------------------------------------- comparison

def analyze(parsed, device_ids, resource_names=DEFAULT_RESOURCE_NAMES):
    """Compare a parsed checkpoint with the node's current device ids.

    Only resources matching ``resource_names`` (globs) are looked at. Returns
    ``{"registered": {resource: [ids]}, "allocated": [{"pod_uid", "container", "resource",
    "device_ids"}], "stale_ids": [...], "unverifiable_ids": [...], "stale": bool,
    "checked_ids": int}``; ``stale_ids`` and ``unverifiable_ids`` are the ids as written in
    the checkpoint, sorted and unique.
    """
    node = set()
    for dev in device_ids:
        node.add(normalize_id(dev))
    node.discard("")
    registered = {}
    for resource, ids in parsed["registered"].items():
        if resource_matches(resource, resource_names):
            registered[resource] = list(ids)
    allocated = []
    for entry in parsed["entries"]:
        if resource_matches(entry["resource"], resource_names):
            allocated.append({"pod_uid": entry["pod_uid"], "container": entry["container"],
                              "resource": entry["resource"],
                              "device_ids": list(entry["device_ids"])})
    seen = set()
    stale = set()
    unverifiable = set()
    for ids in list(registered.values()) + [a["device_ids"] for a in allocated]:
        for dev in ids:
            seen.add(dev)
            if normalize_id(dev) in node:
                continue
            if classify_id(dev) == "other":
                unverifiable.add(dev)
            else:
                stale.add(dev)
    return {"registered": registered, "allocated": allocated,
            "stale_ids": sorted(stale), "unverifiable_ids": sorted(unverifiable),
            "stale": bool(stale), "checked_ids": len(seen)}


def describe(path, parsed, analysis, size=None):
    """Human-readable summary of a checkpoint (diff ``before`` and journal logs)."""
    lines = ["# %s (format %s%s)" % (path, parsed["format"],
                                     ", %d bytes" % size if size is not None else "")]
    stale = set(analysis["stale_ids"])

    def fmt(ids):
        return " ".join("%s%s" % (i, " [stale]" if i in stale else "") for i in ids) or "-"

    for resource in sorted(analysis["registered"]):
        lines.append("registered %s: %s" % (resource, fmt(analysis["registered"][resource])))
    for a in analysis["allocated"]:
        lines.append("allocated pod %s container %s %s: %s"
                     % (a["pod_uid"] or "?", a["container"] or "?", a["resource"],
                        fmt(a["device_ids"])))
    if analysis["stale_ids"]:
        lines.append("stale: %s" % " ".join(analysis["stale_ids"]))
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- nvidia-smi -L

def parse_nvidia_smi_list(text):
    """Parse ``nvidia-smi -L`` output into (device ids, unrecognised lines).

    Handles ``GPU 0: NVIDIA A100 (UUID: GPU-..)``, R470+ MIG lines
    ``  MIG 1g.5gb Device 0: (UUID: MIG-..)`` and pre-R470 ``(UUID: MIG-GPU-../1/0)``.
    Any other non-blank line (``Unable to determine the device handle for GPU..``, ``No
    devices found``, NVML errors) is returned in the second list so callers can refuse to
    trust a partial device list.
    """
    ids = []
    problems = []
    for line in (text or "").splitlines():
        if not line.strip():
            continue
        m = _SMI_LINE_RE.match(line)
        if m and classify_id(m.group(1)) != "other":
            if m.group(1) not in ids:
                ids.append(m.group(1))
        else:
            problems.append(line.strip()[:200])
    return ids, problems


def list_node_devices(nvidia_smi, timeout):
    """Run ``nvidia-smi -L`` with a hard timeout; return (ids, error or None).

    A hung NVML leaves nvidia-smi in uninterruptible sleep where even SIGKILL does not take
    effect until the driver returns, so after the timeout the child is killed and waited on
    for at most two seconds more, then abandoned: the caller never blocks past ``timeout``
    plus that grace. The device list is trusted only when nvidia-smi exits 0, prints at
    least one device and nothing it does not understand.
    """
    try:
        proc = subprocess.Popen([nvidia_smi, "-L"], stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
    except OSError as e:
        return [], "cannot run %s: %s" % (nvidia_smi, e)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, 9)
        except OSError:
            pass
        try:
            proc.communicate(timeout=2)
        except subprocess.TimeoutExpired:
            pass
        return [], ("%s -L did not answer within %gs (NVML hang?); killed"
                    % (nvidia_smi, timeout))
    out = out.decode("utf-8", "replace")
    err = err.decode("utf-8", "replace").strip()
    if proc.returncode != 0:
        detail = (err or out.strip() or "no output").splitlines()
        return [], "%s -L exited %d: %s" % (nvidia_smi, proc.returncode,
                                            detail[-1][:300] if detail else "")
    ids, problems = parse_nvidia_smi_list(out)
    if problems:
        return [], "%s -L printed lines it cannot vouch for: %s" % (
            nvidia_smi, "; ".join(problems[:3]))
    if not ids:
        return [], "%s -L listed no GPUs" % nvidia_smi
    return ids, None


# --------------------------------------------------------------------------- files

def read_checkpoint(path):
    """Return the file's bytes, or None when it does not exist.

    Raises MalformedCheckpoint when ``path`` is not a regular file (a FIFO, socket, device,
    directory or symlink loop: checked on the open descriptor, opened without blocking, so a
    FIFO swapped in after a check never hangs the read) or is far too large, and OSError when
    it cannot be read (permissions, I/O).
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | \
        getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if e.errno == errno.ENOENT:
            return None
        if e.errno == errno.ELOOP:
            raise MalformedCheckpoint("symlink loop, not a file")
        if e.errno in (errno.ENXIO, errno.EISDIR):
            raise MalformedCheckpoint("not a regular file")
        raise
    try:
        st = os.fstat(fd)
        if not _is_regular(st.st_mode):
            raise MalformedCheckpoint("not a regular file")
        if st.st_size > MAX_CHECKPOINT_BYTES:
            raise MalformedCheckpoint("file is %d bytes, larger than any device checkpoint "
                                      "(limit %d)" % (st.st_size, MAX_CHECKPOINT_BYTES))
        data = fileutil.read_fd(fd, MAX_CHECKPOINT_BYTES)
        if len(data) > MAX_CHECKPOINT_BYTES:
            raise MalformedCheckpoint("file grew past %d bytes while being read"
                                      % MAX_CHECKPOINT_BYTES)
        return data
    finally:
        os.close(fd)


def _is_regular(mode):
    return (mode & 0o170000) == 0o100000


def backup_and_remove(path, expected, backup_func=None):
    """Back up ``path`` with ``backup_func`` (e.g. fileutil.backup_file) and remove it.

    ``expected`` is the content that was analysed. Nothing is removed unless the file still
    holds exactly those bytes and, when backing up, the backup holds them too; otherwise
    CheckpointChanged is raised and the file stays (a backup already made is kept and named
    in the message). The removal is ``fileutil.remove_file``: within the held directory, only
    while the file is the one whose bytes were compared. Returns the backup's path, or None
    without ``backup_func``; other failures, and a file root must not remove
    (``fileutil.unsafe_target``, checked before the backup), raise OSError
    (``fileutil.FileOpError``).
    """
    current = read_checkpoint(path)
    if current is None:
        raise CheckpointChanged("disappeared before it could be removed")
    if current != expected:
        raise CheckpointChanged("changed since it was read (kubelet wrote it meanwhile); "
                                "left in place, run again")
    problem = fileutil.unsafe_target(path, action="remove")
    if problem:
        raise fileutil.FileOpError(errno.EPERM, "refusing to remove %s: %s; the file was left in place"
                                   % (path, problem), path)
    dest = None
    if backup_func is not None:
        dest = backup_func(path)
        with open(dest, "rb") as f:
            copied = f.read()
        if copied != expected:
            raise CheckpointChanged("changed while it was being backed up; left in place, "
                                    "backup of the new content kept at %s" % dest)
    try:
        fileutil.remove_file(path, expected, backup=False)
    except fileutil.ContentChanged as e:
        kept = "; backup kept at %s" % dest if dest else ""
        if e.gone:
            raise CheckpointChanged("disappeared before it could be removed%s" % kept)
        raise CheckpointChanged("changed since it was read (kubelet wrote it meanwhile); "
                                "left in place, run again%s" % kept)
    return dest


def wait_for_driver(proc_path, timeout, interval=0.5):
    """Wait up to ``timeout`` s for ``<proc_path>/driver/nvidia/version``; True when present."""
    marker = os.path.join(proc_path, "driver", "nvidia", "version")
    deadline = time.monotonic() + max(0.0, timeout)
    while True:
        if os.path.exists(marker):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
