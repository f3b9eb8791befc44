# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which Kubernetes containers may still open the NVIDIA devices CUDA needs (node side, 3.8+).

The pieces, each a plain function the unit tests call directly:

* ``parse_devices_list`` / ``DevicesList``: cgroup v1 ``devices.list`` with the kernel's own
  matching rules (one exception must cover the whole requested access; exceptions with the
  same type and numbers are merged; ``a *:* rwm`` means default-allow).
* ``parse_pod_dirname`` / ``parse_qos_dirname`` / ``parse_container_dirname``: kubelet cgroup
  names for the cgroupfs and systemd drivers.
* ``detect_layout`` / ``find_kubepods`` / ``discover_containers``: where the pod cgroups live.
* ``build_device_table``: NVIDIA device numbers from ``<proc>/devices`` (the uvm major is
  dynamic), ``<proc>/driver/nvidia-caps/mig-minors`` and the nodes under ``dev_path``.
* ``audit``: evaluates every container in ``list`` mode (devices.list) or ``probe`` mode
  (``cgroup_probe``: a short-lived child process moved into the cgroup asks the kernel).
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import collections
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
from ansible_collections.kubegpu.fleet.plugins.module_utils.cgroup import probe as cgroup_probe
from ansible_collections.kubegpu.fleet.plugins.module_utils._common import safe_io

MAX_U32 = 0xFFFFFFFF
# Highest GPU minor: 254 is /dev/nvidia-modeset, 255 is /dev/nvidiactl.
NVIDIACTL_MINOR = 255
MAX_GPU_MINOR = 253
MODES = ("auto", "list", "probe")
# Access CUDA needs on the GPU, control and uvm nodes (open(O_RDWR)).
NEEDED_ACCESS = "rw"
# NVIDIA_VISIBLE_DEVICES values that say nothing about a GPU allocation: "all" is baked into
# the nvidia/cuda images, "void"/"none"/"" mean no GPU.
_NON_EVIDENCE_VISIBLE = ("", "void", "none", "all")
_PROCESS_SAMPLE = 16
# devices.list: the kernel lists "a *:* rwm" for a default-allow cgroup and one short line per
# allowed device otherwise (a GPU container: about 20 lines). 4 MiB is some 200,000 rules:
# anything larger is hostile and reported as too large, never cut and misparsed.
DEVICES_LIST_LIMIT = 4 << 20

_NUM_RE = re.compile(r"^(?:\*|[0-9]{1,10})$")
_ACCESS_RE = re.compile(r"^[rwm]+$")
_UID_RE = re.compile(r"^[0-9A-Za-z][0-9A-Za-z_-]{0,127}$")
_SCOPE_RE = re.compile(r"^(cri-containerd|docker|crio|cri-o|libpod)-([0-9A-Za-z]{1,128})\.scope$")
_PREFIXED_RE = re.compile(r"^(cri-containerd|docker|crio|cri-o|libpod)-([0-9A-Za-z]{1,128})$")
_PLAIN_ID_RE = re.compile(r"^[0-9A-Za-z][0-9A-Za-z_.-]{0,254}$")
_GPU_NODE_RE = re.compile(r"^nvidia([0-9]{1,3})$")
_CAP_NODE_RE = re.compile(r"^nvidia-cap([0-9]{1,7})$")
_PID_RE = re.compile(r"^[0-9]{1,10}$")
_DEVICE_MINOR_RE = re.compile(r"^\s*Device Minor:\s*([0-9]{1,3})\s*$", re.MULTILINE)


class CgroupDevicesError(Exception):
    """Bad input or an unusable node layout; the module turns it into fail_json."""


class DevicesListError(ValueError):
    """A devices.list line that is not ``<a|b|c> <major|*>:<minor|*> <rwm>``."""

    def __init__(self, lineno, line, reason):
        self.lineno = lineno
        self.line = line
        self.reason = reason
        super(DevicesListError, self).__init__(
            "line %d %r: %s" % (lineno, line[:80], reason))


DeviceRule = collections.namedtuple("DeviceRule", "type major minor access")
"""One devices.list line: type a/b/c, major/minor int or None for ``*``, access frozenset."""


# --------------------------------------------------------------------------- devices.list

def _parse_number(text, lineno, line, what):
    if not _NUM_RE.match(text):
        raise DevicesListError(lineno, line, "%s %r is neither '*' nor a decimal number"
                               % (what, text))
    if text == "*":
        return None
    value = int(text)
    if value > MAX_U32:
        raise DevicesListError(lineno, line, "%s %s is larger than 32 bits" % (what, text))
    return value


def parse_devices_list(text):
    """Parse a cgroup v1 ``devices.list`` into a list of ``DeviceRule``.

    Raises ``DevicesListError`` on the first malformed line: a half-understood allow list
    would turn into wrong verdicts, so it is reported instead of guessed at.
    """
    rules = []
    for lineno, raw in enumerate((text or "").splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        fields = line.split()
        if fields == ["a"]:
            # what one writes to devices.allow; the kernel itself lists "a *:* rwm"
            rules.append(DeviceRule("a", None, None, frozenset("rwm")))
            continue
        if len(fields) != 3:
            raise DevicesListError(lineno, line, "expected 3 fields, found %d" % len(fields))
        dtype, numbers, access = fields
        if dtype not in ("a", "b", "c"):
            raise DevicesListError(lineno, line, "device type %r is not a, b or c" % dtype)
        parts = numbers.split(":")
        if len(parts) != 2:
            raise DevicesListError(lineno, line, "%r is not <major>:<minor>" % numbers)
        major = _parse_number(parts[0], lineno, line, "major")
        minor = _parse_number(parts[1], lineno, line, "minor")
        if not _ACCESS_RE.match(access):
            raise DevicesListError(lineno, line, "access %r is not made of r, w, m" % access)
        rules.append(DeviceRule(dtype, major, minor, frozenset(access)))
    return rules


def format_rule(rule):
    """The kernel's spelling of a rule (``c 195:* rw``)."""
    def num(value):
        return "*" if value is None else str(value)
    access = "".join(c for c in "rwm" if c in rule.access)
    return "%s %s:%s %s" % (rule.type, num(rule.major), num(rule.minor), access)


class DevicesList(object):
    """Evaluates device access the way the v1 devices controller does.

    A cgroup is either default-allow (the kernel then lists only ``a *:* rwm`` and hides any
    deny exceptions) or default-deny with an allow list. Exceptions with identical type and
    numbers are merged (the kernel ORs their access); a request is allowed when ONE exception
    matches type, major, minor and covers every requested access letter.
    """

    def __init__(self, rules):
        self.rules = list(rules)
        self.allow_all = any(r.type == "a" for r in self.rules)
        merged = collections.OrderedDict()
        for r in self.rules:
            if r.type == "a":
                continue
            key = (r.type, r.major, r.minor)
            merged[key] = merged.get(key, frozenset()) | r.access
        self.exceptions = [DeviceRule(k[0], k[1], k[2], v) for k, v in merged.items()]

    @classmethod
    def from_text(cls, text):
        return cls(parse_devices_list(text))

    def allows(self, dtype, major, minor, access=NEEDED_ACCESS):
        if self.allow_all:
            return True
        need = frozenset(access)
        for ex in self.exceptions:
            if ex.type != dtype:
                continue
            if ex.major is not None and ex.major != major:
                continue
            if ex.minor is not None and ex.minor != minor:
                continue
            if need <= ex.access:
                return True
        return False


# --------------------------------------------------------------------------- cgroup names

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


# --------------------------------------------------------------------------- device table

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


def _listdir(path):
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
    for bus in _listdir(base):
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
        for entry in _listdir(dev_path):
            m = _GPU_NODE_RE.match(entry)
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
        for entry in _listdir(caps_dir):
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


# --------------------------------------------------------------------------- processes

def _read_pids(cgroup_dir, limit=_PROCESS_SAMPLE):
    text = read_text(os.path.join(cgroup_dir, "cgroup.procs"), limit=65536) or ""
    pids = []
    for tok in text.split():
        if _PID_RE.match(tok):
            pid = int(tok)
            if pid > 0:
                pids.append(pid)
        if len(pids) >= limit:
            break
    return pids


def process_evidence(cgroup_dir, proc_path):
    """What the container's own processes say about it.

    Returns ``{"pids", "visible_devices", "dev_nodes", "sandbox"}``: the first
    NVIDIA_VISIBLE_DEVICES value that names devices (set by the device plugin), NVIDIA nodes
    found in the container's /dev (``<proc>/<pid>/root/dev``; injected by the runtime hook),
    and whether every process is the pod sandbox (``pause``).
    """
    pids = _read_pids(cgroup_dir)
    visible = None
    nodes = set()
    names = []
    for pid in pids:
        base = proc_file(proc_path, str(pid))
        cmdline = read_text(os.path.join(base, "cmdline"), limit=4096)
        if cmdline:
            names.append(os.path.basename(cmdline.split("\0", 1)[0]))
        if visible is None:
            env = read_text(os.path.join(base, "environ")) or ""
            for var in env.split("\0"):
                if var.startswith("NVIDIA_VISIBLE_DEVICES="):
                    value = var.split("=", 1)[1].strip()
                    if value.lower() not in _NON_EVIDENCE_VISIBLE:
                        visible = value[:256]
        for entry in _listdir(os.path.join(base, "root", "dev")):
            if entry == "nvidiactl" or _GPU_NODE_RE.match(entry):
                nodes.add(entry)
    return {"pids": pids, "visible_devices": visible, "dev_nodes": sorted(nodes),
            "sandbox": bool(names) and all(n == "pause" for n in names)}


# --------------------------------------------------------------------------- evaluation

def _diagnosis(missing, ctl_allowed, any_gpu_allowed):
    names = [m["name"] for m in missing if m["required"]]
    if not names:
        return None
    if not ctl_allowed and not any_gpu_allowed:
        return ("every NVIDIA device entry is gone from the device cgroup: the kubelet "
                "CPU manager (static policy) or a systemd daemon-reload rewrote it without the "
                "devices the NVIDIA hook injected; set PASS_DEVICE_SPECS=true on the device "
                "plugin (and /dev/char symlinks for the systemd driver), then recreate the pod")
    if names == ["nvidia-uvm"]:
        return ("the container may open the GPU but not /dev/nvidia-uvm: the device plugin "
                "started before nvidia-uvm existed; load nvidia_uvm (nvidia-modprobe -u -c=0), "
                "restart the device-plugin pod on this node, then recreate the pod")
    return ("the device cgroup lacks %s: NVIDIA entries were rewritten (CPU manager static "
            "policy / daemon-reload) or never granted; recreate the pod after fixing the "
            "device plugin" % ", ".join(names))


def evaluate_container(ref, table, verdicts, evidence, allow_all=None):
    """Build the result for one container from per-device verdicts.

    ``verdicts`` maps device name to ``("allowed"|"denied"|"unknown", reason)``.
    """
    status = collections.OrderedDict(
        (d["name"], verdicts.get(d["name"], ("unknown", None))[0]) for d in table)
    by_name = dict((d["name"], d) for d in table)
    ctl_allowed = status.get("nvidiactl") == "allowed"
    gpu_minors = [d["minor"] for d in table
                  if d["role"] == "gpu" and status.get(d["name"]) == "allowed"]
    evidence_list = []
    if ctl_allowed or gpu_minors:
        evidence_list.append("cgroup")
    if evidence.get("visible_devices"):
        evidence_list.append("env")
    if evidence.get("dev_nodes"):
        evidence_list.append("dev_nodes")
    gpu = bool(evidence_list)
    warnings = []
    missing = []
    unchecked = []
    mig = []
    if gpu:
        for d in table:
            if d["role"] not in ("required", "recommended"):
                continue
            st, reason = verdicts.get(d["name"], ("unknown", "not checked"))
            if st == "denied":
                missing.append({"name": d["name"], "major": d["major"], "minor": d["minor"],
                                "path": d["path"], "required": d["role"] == "required"})
                if d["role"] == "recommended":
                    warnings.append("%s (%d:%d) is not allowed: profilers and some CUDA tools "
                                    "fail" % (d["name"], d["major"], d["minor"]))
            elif st == "unknown":
                unchecked.append(d["name"])
                warnings.append("%s could not be checked: %s" % (d["name"], reason))
        if "cgroup" not in evidence_list:
            warnings.append(
                "the container looks like a GPU container (%s) but its device cgroup allows "
                "neither nvidiactl nor any GPU" % ", ".join(
                    ("NVIDIA_VISIBLE_DEVICES=%s" % evidence["visible_devices"])
                    if e == "env" else "NVIDIA nodes in its /dev: %s"
                    % " ".join(evidence["dev_nodes"]) for e in evidence_list))
        allowed_gpus = set(gpu_minors)
        allowed_gi = set()
        for d in table:
            if d["role"] == "mig" and status.get(d["name"]) == "allowed":
                mig.append({"name": d["name"], "minor": d["minor"], "path": d["path"],
                            "gpu": d["gpu"], "gi": d["gi"], "ci": d["ci"], "cap": d["cap"]})
                if d["cap"] == "gi":
                    allowed_gi.add((d["gpu"], d["gi"]))
        for cap in mig:
            label = "gpu%s/gi%s%s" % (cap["gpu"], cap["gi"],
                                      "" if cap["ci"] is None else "/ci%s" % cap["ci"])
            if cap["gpu"] not in allowed_gpus and "nvidia%s" % cap["gpu"] in by_name:
                warnings.append("MIG %s is allowed but its parent /dev/nvidia%s is not"
                                % (label, cap["gpu"]))
            if cap["cap"] == "ci" and (cap["gpu"], cap["gi"]) not in allowed_gi:
                warnings.append("MIG %s is allowed but its GPU instance capability is not"
                                % label)
        if allow_all:
            warnings.append("devices.list shows 'a *:* rwm' (default allow): deny exceptions "
                            "are not listed by the kernel; mode probe checks them")
    broken = any(m["required"] for m in missing)
    return {
        "path": ref.path,
        "cgroup_dir": ref.cgroup_dir,
        "pod_uid": ref.pod_uid,
        "container_id": ref.container_id,
        "runtime": ref.runtime,
        "qos": ref.qos,
        "gpu": gpu,
        "gpu_evidence": evidence_list,
        "sandbox": evidence.get("sandbox", False),
        "processes": len(evidence.get("pids", [])),
        "allow_all": allow_all,
        "access": status,
        "gpu_minors": gpu_minors,
        "mig_caps": mig,
        "missing": missing,
        "unchecked": unchecked,
        "broken": broken,
        "diagnosis": _diagnosis(missing, ctl_allowed, bool(gpu_minors)) if broken else None,
        "warnings": warnings,
        "error": None,
    }


def list_verdicts(cgroup_dir, table):
    """Verdicts from the container's devices.list; ``(verdicts, allow_all)``.

    Raises CgroupDevicesError when the file cannot be read or parsed.
    """
    path = os.path.join(cgroup_dir, "devices.list")
    try:
        text = safe_io.read_text(path, limit=DEVICES_LIST_LIMIT)
    except safe_io.TooLarge:
        raise CgroupDevicesError(
            "%s is too large to be a devices.list (more than %d bytes; a real one is a few "
            "lines): not audited" % (path, DEVICES_LIST_LIMIT))
    except safe_io.UnsafeInput as e:
        raise CgroupDevicesError("cannot read %s: %s" % (path, e))
    except (IOError, OSError) as e:
        raise CgroupDevicesError("cannot read %s: %s" % (path, e.strerror or e))
    try:
        dl = DevicesList.from_text(text)
    except DevicesListError as e:
        raise CgroupDevicesError("%s: %s" % (path, e))
    verdicts = {}
    for d in table:
        ok = dl.allows(d["type"], d["major"], d["minor"], d["needs"])
        verdicts[d["name"]] = ("allowed" if ok else "denied", None)
    return verdicts, dl.allow_all


def probe_verdicts(cgroup_dir, table, method, timeout):
    """Verdicts from the kernel: a child process in the cgroup asks for each device node.

    Returns ``(verdicts, warnings)``; raises CgroupDevicesError when the probe cannot run.
    """
    verdicts = {}
    probed = []
    for d in table:
        if d["node"] == "present":
            probed.append(d)
        else:
            verdicts[d["name"]] = ("unknown", "no character device node at %s (%s)"
                                   % (d["path"], d["node"]))
    warnings = []
    if probed:
        try:
            outcome = cgroup_probe.probe_cgroup(cgroup_dir, [d["path"] for d in probed],
                                                access=[d["needs"] for d in probed],
                                                method=method, timeout=timeout)
        except cgroup_probe.ProbeError as e:
            raise CgroupDevicesError(str(e))
        for d, res in zip(probed, outcome.results):
            verdicts[d["name"]] = (res.verdict, res.reason)
        warnings.extend(outcome.warnings)
    return verdicts, warnings


def _error_entry(ref, evidence, message):
    return {
        "path": ref.path, "cgroup_dir": ref.cgroup_dir, "pod_uid": ref.pod_uid,
        "container_id": ref.container_id, "runtime": ref.runtime, "qos": ref.qos,
        "gpu": bool(evidence.get("visible_devices") or evidence.get("dev_nodes")),
        "gpu_evidence": [], "sandbox": evidence.get("sandbox", False),
        "processes": len(evidence.get("pids", [])), "allow_all": None, "access": {},
        "gpu_minors": [], "mig_caps": [], "missing": [], "unchecked": [], "broken": False,
        "diagnosis": None, "warnings": [], "error": message,
    }


def audit(cgroup_root="/sys/fs/cgroup", proc_path="/proc", dev_path="/dev", mode="auto",
          kubepods_path=None, probe_method="access", probe_timeout=10.0,
          process_evidence_enabled=True):
    """Audit every kubelet container cgroup; returns the module's result dict (no changed)."""
    if mode not in MODES:
        raise CgroupDevicesError("mode %r is not one of %s" % (mode, ", ".join(MODES)))
    if probe_method not in cgroup_probe.METHODS:
        raise CgroupDevicesError("probe_method %r is not one of %s"
                                 % (probe_method, ", ".join(cgroup_probe.METHODS)))
    if not os.path.isdir(dev_path):
        raise CgroupDevicesError("dev_path %s does not exist or is not a directory" % dev_path)
    if not os.path.isdir(proc_path):
        raise CgroupDevicesError("proc_path %s does not exist or is not a directory"
                                 % proc_path)
    try:
        probe_timeout = safe_io.check_timeout(probe_timeout, "probe_timeout", minimum=0.001)
    except safe_io.UnsafeInput as e:
        raise CgroupDevicesError(str(e))
    version, hierarchy = detect_layout(cgroup_root)
    effective = mode
    if mode == "auto":
        effective = "list" if version == "v1" else "probe"
    if effective == "list" and version == "v2":
        raise CgroupDevicesError(
            "mode list reads cgroup v1 devices.list, but cgroup_root %s is cgroup v2 (device "
            "access is a BPF program there); use mode probe or auto" % cgroup_root)
    if effective == "probe" and os.geteuid() != 0:
        raise CgroupDevicesError("mode probe must run as root: it moves a probe process into "
                                 "each container cgroup (use become: true)")
    table, host_warnings = build_device_table(proc_path, dev_path)
    kubepods = find_kubepods(hierarchy, kubepods_path)
    if not kubepods:
        host_warnings.append("no kubepods cgroup under %s: kubelet has no pods here, or set "
                             "kubepods_path" % hierarchy)
    refs = discover_containers(hierarchy, kubepods)
    containers = []
    for ref in refs:
        if process_evidence_enabled:
            evidence = process_evidence(ref.cgroup_dir, proc_path)
        else:
            evidence = {"pids": [], "visible_devices": None, "dev_nodes": [],
                        "sandbox": False}
        if not os.path.isdir(ref.cgroup_dir):
            continue  # container went away while we looked
        extra = []
        allow_all = None
        try:
            if effective == "list":
                verdicts, allow_all = list_verdicts(ref.cgroup_dir, table)
            else:
                verdicts, extra = probe_verdicts(ref.cgroup_dir, table, probe_method,
                                                 probe_timeout)
        except CgroupDevicesError as e:
            if not os.path.isdir(ref.cgroup_dir):
                continue
            containers.append(_error_entry(ref, evidence, str(e)))
            continue
        entry = evaluate_container(ref, table, verdicts, evidence, allow_all)
        entry["warnings"].extend(extra)
        containers.append(entry)
    broken = [{"path": c["path"], "pod_uid": c["pod_uid"], "container_id": c["container_id"],
               "missing": [m["name"] for m in c["missing"] if m["required"]],
               "diagnosis": c["diagnosis"]} for c in containers if c["broken"]]
    summary = {
        "pods": len(set(c["pod_uid"] for c in containers)),
        "containers": len(containers),
        "gpu_containers": sum(1 for c in containers if c["gpu"]),
        "broken": len(broken),
        "with_warnings": sum(1 for c in containers if c["warnings"]),
        "errors": sum(1 for c in containers if c["error"]),
    }
    return {
        "cgroup_version": version,
        "mode": effective,
        "hierarchy": hierarchy,
        "kubepods": kubepods,
        "devices": table,
        "containers": containers,
        "broken": broken,
        "summary": summary,
        "host_warnings": host_warnings,
    }
