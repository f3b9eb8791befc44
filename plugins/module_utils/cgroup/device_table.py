# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The NVIDIA devices CUDA needs, with their numbers, from ``/proc`` and ``/dev``.

Node side, Python 3.8+. The uvm major is dynamic (``<proc>/devices``), MIG capability minors
come from ``<proc>/driver/nvidia-caps/mig-minors``, the GPU minors from the driver's
``<proc>/driver/nvidia/gpus/*/information`` or the ``/dev/nvidia<N>`` nodes.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re
import stat

from ansible_collections.kubegpu.fleet.plugins.module_utils._common.procfs import (
    char_major,
    nvidia_gpu_major,
    parse_mig_minors,
    parse_proc_devices,
    proc_file,
    read_text,
    read_text_reason,
)
from ansible_collections.kubegpu.fleet.plugins.module_utils.cgroup.devices_list import NEEDED_ACCESS
from ansible_collections.kubegpu.fleet.plugins.module_utils.cgroup.kubepods import CgroupDevicesError

# Highest GPU minor: 254 is /dev/nvidia-modeset, 255 is /dev/nvidiactl.
NVIDIACTL_MINOR = 255
MAX_GPU_MINOR = 253
GPU_NODE_RE = re.compile(r"^nvidia([0-9]{1,3})$")
_CAP_NODE_RE = re.compile(r"^nvidia-cap([0-9]{1,7})$")
_DEVICE_MINOR_RE = re.compile(r"^\s*Device Minor:\s*([0-9]{1,3})\s*$", re.MULTILINE)


def _node_info(path, expected_major):
    """``(state, minor)`` of a device node: state is present, missing, not_char_device or
    wrong_major; minor from st_rdev when it is a character device, else None."""
    try:
        st = os.stat(path)
    except OSError:
        return "missing", None
    if not stat.S_ISCHR(st.st_mode):
        return "not_char_device", None
    if expected_major is not None and os.major(st.st_rdev) != expected_major:
        return "wrong_major", os.minor(st.st_rdev)
    return "present", os.minor(st.st_rdev)


def list_dir(path):
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def _device(name, role, major, minor, path, node, **extra):
    # CUDA opens the GPU, control and uvm nodes read-write, MIG capability nodes read-only.
    d = {"name": name, "role": role, "type": "c", "major": major, "minor": minor,
         "path": path, "node": node, "needs": "r" if role == "mig" else NEEDED_ACCESS}
    d.update(extra)
    return d


def gpu_minors_from_proc(proc_path):
    """GPU minors from ``<proc>/driver/nvidia/gpus/*/information`` ("Device Minor: N")."""
    base = proc_file(proc_path, "driver", "nvidia", "gpus")
    minors = set()
    for bus in list_dir(base):
        text = read_text(os.path.join(base, bus, "information"), limit=65536)
        for m in _DEVICE_MINOR_RE.finditer(text or ""):
            minor = int(m.group(1))
            if minor <= MAX_GPU_MINOR:
                minors.add(minor)
    return minors


def build_device_table(proc_path, dev_path):
    """NVIDIA device table: ``(devices, host_warnings)``.

    ``devices`` lists nvidiactl (required), nvidia-uvm (required), nvidia-uvm-tools
    (recommended), every GPU (``nvidia<N>``: nodes under dev_path plus the minors the driver
    reports in /proc) and every MIG GI/CI capability node present under
    ``dev_path/nvidia-caps``. Majors come from ``<proc>/devices`` only.
    """
    devices_file = proc_file(proc_path, "devices")
    text, reason = read_text_reason(devices_file)
    if text is None:
        raise CgroupDevicesError("cannot read %s (is proc_path %s right?)%s"
                                 % (devices_file, proc_path, (": %s" % reason) if reason else ""))
    majors = parse_proc_devices(text)
    warnings = []
    table = []
    gpu_major, gpu_major_name = nvidia_gpu_major(majors)
    if gpu_major is None:
        warnings.append("no NVIDIA GPU major ('nvidia' or 'nvidia-frontend') in %s: the "
                        "NVIDIA driver is not loaded; GPU devices cannot be checked"
                        % devices_file)
    else:
        path = os.path.join(dev_path, "nvidiactl")
        node, _minor = _node_info(path, gpu_major)
        table.append(_device("nvidiactl", "required", gpu_major, NVIDIACTL_MINOR, path, node))
    uvm_major = char_major(majors, "nvidia-uvm")
    if uvm_major is None:
        warnings.append("nvidia-uvm is not registered in %s: nvidia_uvm is not loaded "
                        "(nvidia-modprobe -u -c=0); /dev/nvidia-uvm cannot be checked"
                        % devices_file)
    else:
        for name, minor, role in (("nvidia-uvm", 0, "required"),
                                  ("nvidia-uvm-tools", 1, "recommended")):
            path = os.path.join(dev_path, name)
            node, _minor = _node_info(path, uvm_major)
            table.append(_device(name, role, uvm_major, minor, path, node))
    if gpu_major is not None:
        minors = {}
        for entry in list_dir(dev_path):
            m = GPU_NODE_RE.match(entry)
            if not m:
                continue
            path = os.path.join(dev_path, entry)
            node, rminor = _node_info(path, gpu_major)
            minor = rminor if node in ("present", "wrong_major") else int(m.group(1))
            if node == "wrong_major":
                warnings.append("%s is not a device of the NVIDIA major %d" % (path, gpu_major))
                continue
            if minor <= MAX_GPU_MINOR:
                minors[minor] = (path, node)
        for minor in gpu_minors_from_proc(proc_path):
            if minor not in minors:
                path = os.path.join(dev_path, "nvidia%d" % minor)
                minors[minor] = (path, _node_info(path, gpu_major)[0])
        for minor in sorted(minors):
            path, node = minors[minor]
            table.append(_device("nvidia%d" % minor, "gpu", gpu_major, minor, path, node,
                                 gpu=minor))
    caps_major = char_major(majors, "nvidia-caps")
    if caps_major is not None:
        mig_text = read_text(proc_file(proc_path, "driver", "nvidia-caps", "mig-minors"))
        by_minor = {}
        for e in parse_mig_minors(mig_text):
            if e["kind"] in ("gi", "ci"):
                by_minor.setdefault(e["minor"], e)
        caps_dir = os.path.join(dev_path, "nvidia-caps")
        for entry in list_dir(caps_dir):
            m = _CAP_NODE_RE.match(entry)
            if not m:
                continue
            path = os.path.join(caps_dir, entry)
            node, rminor = _node_info(path, caps_major)
            if node == "wrong_major":
                warnings.append("%s is not a device of the nvidia-caps major %d"
                                % (path, caps_major))
                continue
            minor = rminor if node == "present" else int(m.group(1))
            e = by_minor.get(minor)
            if e is None:
                continue
            table.append(_device(entry, "mig", caps_major, minor, path, node,
                                 gpu=e["gpu"], gi=e["gi"], ci=e["ci"], cap=e["kind"]))
    for d in table:
        if d["role"] in ("required", "recommended") and d["node"] != "present":
            warnings.append("%s (%d:%d) has no character device node at %s (%s)"
                            % (d["name"], d["major"], d["minor"], d["path"], d["node"]))
    return table, warnings
