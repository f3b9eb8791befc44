# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where the kubelet's pod cgroups live: the cgroup version, the kubepods directories and the
pod and container cgroup names of the cgroupfs and systemd drivers.

Node side, Python 3.8+. Only directory names are read here, nothing is written.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import collections
import os
import re

_UID_RE = re.compile(r"^[0-9A-Za-z][0-9A-Za-z_-]{0,127}$")
_SCOPE_RE = re.compile(r"^(cri-containerd|docker|crio|cri-o|libpod)-([0-9A-Za-z]{1,128})\.scope$")
_PREFIXED_RE = re.compile(r"^(cri-containerd|docker|crio|cri-o|libpod)-([0-9A-Za-z]{1,128})$")
_PLAIN_ID_RE = re.compile(r"^[0-9A-Za-z][0-9A-Za-z_.-]{0,254}$")


class CgroupDevicesError(Exception):
    """Bad input or an unusable node layout; the module turns it into fail_json."""


def parse_qos_dirname(name):
    """QoS class of a kubepods child: ``besteffort``/``burstable`` (cgroupfs) or
    ``<prefix>-besteffort.slice``/``<prefix>-burstable.slice`` (systemd), else None.
    Guaranteed pods have no QoS directory: they sit directly under kubepods."""
    if not isinstance(name, str):
        return None
    for qos in ("besteffort", "burstable"):
        if name == qos or (name.endswith("-%s.slice" % qos) and len(name) > len(qos) + 7):
            return qos
    return None


def parse_pod_dirname(name):
    """Pod UID (with dashes) from ``pod<uid>`` (cgroupfs) or ``...-pod<uid_with_underscores>
    .slice`` (systemd), else None."""
    if not isinstance(name, str):
        return None
    if name.endswith(".slice"):
        last = name[:-len(".slice")].split("-")[-1]
        if not last.startswith("pod"):
            return None
        uid = last[3:]
        # systemd escapes the UID's dashes as underscores ("-" separates slice levels)
        if not _UID_RE.match(uid) or "-" in uid:
            return None
        return uid.replace("_", "-")
    if name.startswith("pod"):
        uid = name[3:]
        if not _UID_RE.match(uid) or "_" in uid:
            return None
        return uid
    return None


def parse_container_dirname(name):
    """``(runtime, container_id)`` for a container cgroup below a pod, else None.

    systemd: ``cri-containerd-<id>.scope``, ``docker-<id>.scope``, ``crio-<id>.scope``
    (``crio-conmon-<id>.scope`` is CRI-O's monitor process, not a container).
    cgroupfs: ``<id>`` (runtime unknown: None) or ``crio-<id>``.
    """
    if not isinstance(name, str) or name.startswith("crio-conmon-"):
        return None
    m = _SCOPE_RE.match(name)
    if m:
        return m.group(1), m.group(2)
    if name.endswith(".scope") or name.endswith(".slice"):
        return None
    m = _PREFIXED_RE.match(name)
    if m:
        return m.group(1), m.group(2)
    if _PLAIN_ID_RE.match(name) and name not in (".", ".."):
        return None, name
    return None


def _is_kubepods_name(name):
    return name in ("kubepods", "kubepods.slice") or (
        name.endswith("-kubepods.slice") and len(name) > len("-kubepods.slice"))


# --------------------------------------------------------------------------- discovery

def _subdirs(path):
    """Sorted names of the sub-directories of ``path`` (symlinks not followed); [] on error."""
    try:
        with os.scandir(path) as it:
            names = [e.name for e in it if e.is_dir(follow_symlinks=False)]
    except OSError:
        return []
    return sorted(names)


def detect_layout(cgroup_root):
    """``(version, hierarchy)``: "v1" with the devices hierarchy, or "v2" with the unified one.

    ``cgroup_root`` may be the cgroup mount point (``/sys/fs/cgroup``, v1, hybrid or v2), the
    v1 devices hierarchy itself, or any cgroup directory (or plain copy of one) above kubepods.
    """
    if not os.path.isdir(cgroup_root):
        raise CgroupDevicesError("cgroup_root %s does not exist or is not a directory"
                                 % cgroup_root)
    devices_dir = os.path.join(cgroup_root, "devices")
    if os.path.isfile(os.path.join(devices_dir, "devices.list")):
        return "v1", devices_dir
    if os.path.isfile(os.path.join(cgroup_root, "devices.list")):
        return "v1", cgroup_root
    if os.path.isfile(os.path.join(cgroup_root, "cgroup.controllers")):
        return "v2", cgroup_root
    if os.path.isdir(devices_dir):
        return "v1", devices_dir
    if any(_is_kubepods_name(n) for n in _subdirs(cgroup_root)):
        return "v1", cgroup_root
    raise CgroupDevicesError(
        "cannot tell the cgroup version of cgroup_root %s: it has no devices/ hierarchy, no "
        "devices.list (cgroup v1), no cgroup.controllers (cgroup v2) and no kubepods cgroup"
        % cgroup_root)


def find_kubepods(hierarchy, kubepods_path=None):
    """Absolute kubepods directories below ``hierarchy``.

    With ``kubepods_path`` (absolute, or relative to the hierarchy) exactly that directory;
    otherwise ``kubepods``, ``kubepods.slice`` or ``<prefix>-kubepods.slice`` one or two
    levels down (kind/k3s-style ``kubelet.slice/kubelet-kubepods.slice`` included).
    """
    if kubepods_path:
        path = kubepods_path if os.path.isabs(kubepods_path) else os.path.join(
            hierarchy, kubepods_path)
        if not os.path.isdir(path):
            raise CgroupDevicesError("kubepods_path %s is not a directory (looked at %s)"
                                     % (kubepods_path, path))
        return [os.path.normpath(path)]
    found = []
    for name in _subdirs(hierarchy):
        path = os.path.join(hierarchy, name)
        if _is_kubepods_name(name):
            found.append(path)
            continue
        for sub in _subdirs(path):
            if _is_kubepods_name(sub):
                found.append(os.path.join(path, sub))
    return found


ContainerRef = collections.namedtuple(
    "ContainerRef", "cgroup_dir path pod_uid container_id runtime qos")


def discover_containers(hierarchy, kubepods_dirs):
    """Every container cgroup below the kubepods directories, for all QoS classes."""
    out = []
    for kp in kubepods_dirs:
        pods = []
        for name in _subdirs(kp):
            uid = parse_pod_dirname(name)
            if uid is not None:
                pods.append((os.path.join(kp, name), uid, "guaranteed"))
                continue
            qos = parse_qos_dirname(name)
            if qos is None:
                continue
            qdir = os.path.join(kp, name)
            for pname in _subdirs(qdir):
                uid = parse_pod_dirname(pname)
                if uid is not None:
                    pods.append((os.path.join(qdir, pname), uid, qos))
        for pdir, uid, qos in pods:
            for cname in _subdirs(pdir):
                parsed = parse_container_dirname(cname)
                if parsed is None:
                    continue
                cdir = os.path.join(pdir, cname)
                rel = "/" + os.path.relpath(cdir, hierarchy).replace(os.sep, "/")
                out.append(ContainerRef(cdir, rel, uid, parsed[1], parsed[0], qos))
    return out
