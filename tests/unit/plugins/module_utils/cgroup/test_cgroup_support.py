"""Real-kernel plumbing shared by the cgroup_devices unit and module tests (no tests here).

* ``CgroupTree``: a uniquely named cgroup (``kgtest-<hex>``) in the real cgroup v1 devices
  hierarchy or the real cgroup v2 unified hierarchy, with v1 allow/deny rules or a real
  BPF_PROG_TYPE_CGROUP_DEVICE program per container, real processes placed in cgroups, and a
  cleanup that kills its processes, detaches programs and removes every cgroup bottom-up.
* ``FakeNode``: the edges this machine lacks (NVIDIA driver): ``<proc>/devices`` with a
  dynamic uvm major, mig-minors, GPU information files, and real character device nodes made
  with mknod in a temp dev dir (no driver behind them: open gives ENXIO unless the cgroup
  says EPERM).
* ``kernel_verdicts``: ground truth, independent of the code under test: a fresh Python
  process enters the cgroup and open()s each node.
* ``build_kubepods``: kubelet hierarchies for the cgroupfs and systemd drivers reproducing the
  seeds (CPU manager wipe, missing uvm) with their expected audit outcome.
"""
import ctypes
import errno
import os
import shutil
import signal
import struct
import subprocess
import sys
import time
import uuid

import pytest

V1_DEVICES = "/sys/fs/cgroup/devices"
V2_UNIFIED = "/sys/fs/cgroup/unified"

GPU_MAJOR = 195
UVM_MAJOR = 508   # dynamic on real nodes: deliberately not the common 510/511
CAPS_MAJOR = 509

# What runc puts in every container's device cgroup (plus the mknod wildcards).
RUNC_DEFAULT = [
    "c *:* m", "b *:* m", "c 1:3 rwm", "c 1:5 rwm", "c 1:7 rwm", "c 1:8 rwm", "c 1:9 rwm",
    "c 5:0 rwm", "c 5:1 rwm", "c 5:2 rwm", "c 136:* rwm", "c 10:200 rwm",
]

MIG_MINORS = """config 1
monitor 2
gpu0/gi0/access 3
gpu0/gi0/ci0/access 4
gpu0/gi1/access 12
gpu0/gi1/ci0/access 13
gpu1/gi1/access 147
gpu1/gi1/ci0/access 148
gpu1/gi2/access 156
gpu1/gi2/ci0/access 157
"""


def nvidia_rules(gpus=(), ctl=True, uvm=True, tools=True, caps=()):
    rules = []
    if ctl:
        rules.append("c %d:255 rw" % GPU_MAJOR)
    if uvm:
        rules.append("c %d:0 rw" % UVM_MAJOR)
    if tools:
        rules.append("c %d:1 rw" % UVM_MAJOR)
    rules += ["c %d:%d rw" % (GPU_MAJOR, g) for g in gpus]
    rules += ["c %d:%d r" % (CAPS_MAJOR, c) for c in caps]
    return rules


def _need_root():
    if os.geteuid() != 0:
        pytest.skip("needs root for cgroups and mknod")


# --------------------------------------------------------------------------- BPF (cgroup v2)

_NR_BPF = {"x86_64": 321, "aarch64": 280}
BPF_PROG_LOAD, BPF_PROG_ATTACH, BPF_PROG_DETACH = 5, 8, 9
BPF_PROG_TYPE_CGROUP_DEVICE = 15
BPF_CGROUP_DEVICE = 6
DEVCG_TYPE = {"b": 1, "c": 2}
DEVCG_ACC = {"m": 1, "r": 2, "w": 4}


def _insn(code, dst=0, src=0, off=0, imm=0):
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


def device_program(rules):
    """A default-deny BPF_PROG_TYPE_CGROUP_DEVICE program for v1-style allow rules.

    Same semantics as runc's generated filter: a request is allowed when one rule matches
    type, major, minor and covers all requested access bits.
    """
    head = [
        _insn(0x61, 2, 1, 0),        # r2 = ctx->access_type
        _insn(0xbf, 3, 2),           # r3 = r2
        _insn(0x57, 3, imm=0xFFFF),  # r3 &= 0xffff       (device type)
        _insn(0x77, 2, imm=16),      # r2 >>= 16          (access bits)
        _insn(0x61, 4, 1, 4),        # r4 = ctx->major
        _insn(0x61, 5, 1, 8),        # r5 = ctx->minor
    ]
    body = []
    for text in rules:
        parts = text.split()
        dtype, numbers, acc = parts
        major, minor = numbers.split(":")
        checks = []
        if dtype != "a":
            checks.append((0x55, 3, DEVCG_TYPE[dtype]))      # if r3 != type goto next
        if major != "*":
            checks.append((0x55, 4, int(major)))             # if r4 != major goto next
        if minor != "*":
            checks.append((0x55, 5, int(minor)))             # if r5 != minor goto next
        mask = sum(DEVCG_ACC[c] for c in set(acc))
        block_len = len(checks) + 3 + 2
        block = []
        for i, (code, reg, imm) in enumerate(checks):
            block.append(_insn(code, reg, off=block_len - i - 1, imm=imm))
        rest = block_len - len(checks)
        block.append(_insn(0xbf, 1, 2))                      # r1 = access bits
        block.append(_insn(0x57, 1, imm=(~mask) & 0xFFFF))   # r1 &= ~allowed
        block.append(_insn(0x55, 1, off=rest - 3, imm=0))    # if r1 != 0 goto next
        block.append(_insn(0xb7, 0, imm=1))                  # r0 = 1 (allow)
        block.append(_insn(0x95))                            # exit
        body += block
    tail = [_insn(0xb7, 0, imm=0), _insn(0x95)]               # r0 = 0 (deny)
    return b"".join(head + body + tail)


class BpfError(OSError):
    pass


def _bpf(cmd, attr):
    nr = _NR_BPF.get(os.uname().machine)
    if nr is None:
        raise BpfError(errno.ENOSYS, "no bpf syscall number for %s" % os.uname().machine)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    ret = libc.syscall(ctypes.c_long(nr), ctypes.c_int(cmd), attr, ctypes.c_uint(len(attr)))
    if ret < 0:
        err = ctypes.get_errno()
        raise BpfError(err, os.strerror(err))
    return ret


def load_device_program(code):
    insns = ctypes.create_string_buffer(code, len(code))
    license_ = ctypes.create_string_buffer(b"GPL")
    log = ctypes.create_string_buffer(1 << 16)
    attr = ctypes.create_string_buffer(128)
    struct.pack_into("<IIQQIIQ", attr, 0, BPF_PROG_TYPE_CGROUP_DEVICE, len(code) // 8,
                     ctypes.addressof(insns), ctypes.addressof(license_), 1, len(log),
                     ctypes.addressof(log))
    try:
        return _bpf(BPF_PROG_LOAD, attr)
    except BpfError as e:
        raise BpfError(e.errno, "BPF_PROG_LOAD: %s; verifier: %s"
                       % (e.strerror, log.value.decode("ascii", "replace")[-400:]))


def _attach_attr(cgroup_fd, prog_fd):
    attr = ctypes.create_string_buffer(128)
    struct.pack_into("<IIII", attr, 0, cgroup_fd, prog_fd, BPF_CGROUP_DEVICE, 0)
    return attr


def bpf_support():
    """None when a device program can be loaded and attached to a v2 cgroup here, else why."""
    if os.geteuid() != 0:
        return "not root"
    if not os.path.isfile(os.path.join(V2_UNIFIED, "cgroup.controllers")):
        return "%s is not a cgroup2 mount" % V2_UNIFIED
    probe_dir = os.path.join(V2_UNIFIED, "kgtest-bpfcheck-%s" % uuid.uuid4().hex[:8])
    try:
        fd = load_device_program(device_program(["c 1:3 rw"]))
    except OSError as e:
        return "BPF_PROG_LOAD(BPF_PROG_TYPE_CGROUP_DEVICE) failed: %s" % e
    try:
        os.mkdir(probe_dir)
        cfd = os.open(probe_dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            _bpf(BPF_PROG_ATTACH, _attach_attr(cfd, fd))
            _bpf(BPF_PROG_DETACH, _attach_attr(cfd, fd))
        finally:
            os.close(cfd)
    except OSError as e:
        return "BPF_PROG_ATTACH(BPF_CGROUP_DEVICE) failed: %s" % e
    finally:
        os.close(fd)
        if os.path.isdir(probe_dir):
            os.rmdir(probe_dir)
    return None


# --------------------------------------------------------------------------- cgroup trees

class CgroupTree(object):
    """A throw-away subtree of a real cgroup hierarchy; ``cleanup`` undoes everything."""

    def __init__(self, version, base=None):
        _need_root()
        self.version = version
        self.base = base or (V1_DEVICES if version == "v1" else V2_UNIFIED)
        marker = "cgroup.procs" if base else (
            "devices.list" if version == "v1" else "cgroup.controllers")
        if not os.path.isfile(os.path.join(self.base, marker)):
            pytest.skip("%s is not a cgroup %s hierarchy here" % (self.base, version))
        self.root = os.path.join(self.base, "kgtest-%s" % uuid.uuid4().hex[:12])
        os.mkdir(self.root)
        self.dirs = [self.root]
        self.procs = []
        self.attached = []   # (cgroup_fd, prog_fd)

    def path(self, rel):
        return os.path.join(self.root, rel.strip("/"))

    def mkdir(self, rel):
        cur = self.root
        for part in rel.strip("/").split("/"):
            cur = os.path.join(cur, part)
            if not os.path.isdir(cur):
                os.mkdir(cur)
                self.dirs.append(cur)
        return cur

    def _write(self, path, text):
        with open(path, "w") as f:
            f.write(text)

    def restrict(self, rel, rules):
        """Make ``rel`` default-deny with exactly ``rules`` allowed (v1 rules or BPF on v2)."""
        cdir = self.mkdir(rel)
        if self.version == "v1":
            self._write(os.path.join(cdir, "devices.deny"), "a")
            for rule in rules:
                self._write(os.path.join(cdir, "devices.allow"), rule)
        else:
            prog = load_device_program(device_program(rules))
            cfd = os.open(cdir, os.O_RDONLY | os.O_DIRECTORY)
            try:
                _bpf(BPF_PROG_ATTACH, _attach_attr(cfd, prog))
            except OSError:
                os.close(cfd)
                os.close(prog)
                raise
            self.attached.append((cfd, prog))
        return cdir

    def deny(self, rel, rule):
        """v1 only: add a deny exception to a default-allow cgroup (hidden from devices.list)."""
        cdir = self.mkdir(rel)
        self._write(os.path.join(cdir, "devices.deny"), rule)
        return cdir

    def enter(self, rel, pid):
        self._write(os.path.join(self.mkdir(rel), "cgroup.procs"), str(pid))

    def spawn(self, rel, argv=None, env=None, wait_for=None):
        """Start a real process and move it into ``rel``; returns its Popen."""
        argv = argv or ["sleep", "600"]
        proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                start_new_session=True)
        self.procs.append(proc)
        if wait_for:
            deadline = time.monotonic() + 20
            while os.path.basename(_cmdline(proc.pid).split("\0")[0]) != wait_for:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError("%s did not start: %s" % (
                        argv, proc.stderr.read().decode("utf-8", "replace")
                        if proc.poll() is not None else "timeout"))
                time.sleep(0.01)
        self.enter(rel, proc.pid)
        return proc

    def cleanup(self):
        problems = []
        for proc in self.procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except OSError:
                    proc.kill()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                problems.append("pid %d did not die" % proc.pid)
            if proc.stderr:
                proc.stderr.close()
        for cfd, prog in self.attached:
            try:
                _bpf(BPF_PROG_DETACH, _attach_attr(cfd, prog))
            except OSError as e:
                problems.append("detach: %s" % e)
            os.close(cfd)
            os.close(prog)
        self.attached = []
        for d in sorted(self.dirs, key=lambda p: p.count("/"), reverse=True):
            if not os.path.isdir(d):
                continue
            deadline = time.monotonic() + 10
            while True:
                for pid in _read_procs(d):   # anything left behind: move it out
                    try:
                        self._write(os.path.join(self.base, "cgroup.procs"), str(pid))
                    except OSError:
                        pass
                try:
                    os.rmdir(d)
                    break
                except OSError as e:
                    if e.errno != errno.EBUSY or time.monotonic() > deadline:
                        problems.append("rmdir %s: %s" % (d, e))
                        break
                    time.sleep(0.02)
        if problems:
            raise AssertionError("cgroup cleanup failed: %s" % "; ".join(problems))


def _read_procs(cgroup_dir):
    try:
        with open(os.path.join(cgroup_dir, "cgroup.procs")) as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def _cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


# --------------------------------------------------------------------------- fake node edges

class FakeNode(object):
    """proc and dev directories of a GPU node: 2 GPUs (one with MIG), uvm at a dynamic major."""

    def __init__(self, base, gpu_major_name="nvidia", uvm=True, gpus=(0, 1),
                 mig=((1, 1, 0),)):
        _need_root()
        self.proc = os.path.join(base, "proc")
        self.dev = os.path.join(base, "dev")
        os.makedirs(os.path.join(self.proc, "driver", "nvidia-caps"))
        os.makedirs(os.path.join(self.dev, "nvidia-caps"))
        lines = ["Character devices:", "  1 mem", "  5 /dev/tty", "136 pts",
                 "%3d %s" % (GPU_MAJOR, gpu_major_name)]
        if uvm:
            lines.append("%3d nvidia-uvm" % UVM_MAJOR)
        lines += ["%3d nvidia-caps" % CAPS_MAJOR, "", "Block devices:", "  7 loop",
                  "259 blkext", ""]
        self.write_proc("devices", "\n".join(lines))
        self.write_proc("driver/nvidia-caps/mig-minors", MIG_MINORS)
        for g in gpus:
            self.write_proc("driver/nvidia/gpus/0000:%02x:00.0/information" % (0x3b + g),
                            "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 0\n"
                            "Device Minor: \t %d\nBus Location: \t 0000:%02x:00.0\n"
                            % (g, 0x3b + g))
        self.mknod("nvidiactl", GPU_MAJOR, 255)
        for g in gpus:
            self.mknod("nvidia%d" % g, GPU_MAJOR, g)
        if uvm:
            self.mknod("nvidia-uvm", UVM_MAJOR, 0)
            self.mknod("nvidia-uvm-tools", UVM_MAJOR, 1)
        self.caps = {}
        for gpu, gi, ci in mig:
            for line in MIG_MINORS.splitlines():
                name, minor = line.split()
                if name in ("gpu%d/gi%d/access" % (gpu, gi),
                            "gpu%d/gi%d/ci%d/access" % (gpu, gi, ci)):
                    self.mknod("nvidia-caps/nvidia-cap%s" % minor, CAPS_MAJOR, int(minor))
                    self.caps[name] = int(minor)

    def write_proc(self, rel, text):
        path = os.path.join(self.proc, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)

    def mknod(self, rel, major, minor):
        os.mknod(os.path.join(self.dev, rel), 0o600 | 0o020000, os.makedev(major, minor))

    def expose_pid(self, pid):
        """Make ``<proc>/<pid>`` the real process (as on a host's /proc)."""
        os.symlink("/proc/%d" % pid, os.path.join(self.proc, str(pid)))


_KERNEL_CHECK = r"""
import os, sys
with open(os.path.join(sys.argv[1], "cgroup.procs"), "w") as f:
    f.write(str(os.getpid()))
for arg in sys.argv[2:]:
    path, acc = arg.rsplit("=", 1)
    flags = {"rw": os.O_RDWR, "r": os.O_RDONLY, "w": os.O_WRONLY}[acc]
    try:
        os.close(os.open(path, flags | os.O_NONBLOCK))
        print(0)
    except OSError as e:
        print(e.errno)
"""


def kernel_verdicts(cgroup_dir, nodes):
    """{path: "allowed"|"denied"}: what the kernel does when a process in the cgroup opens
    each ``(path, access)`` node. Independent of the code under test."""
    if not nodes:
        return {}
    out = subprocess.run([sys.executable, "-c", _KERNEL_CHECK, cgroup_dir]
                         + ["%s=%s" % (p, a) for p, a in nodes],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60,
                         check=True, universal_newlines=True)
    errs = [int(x) for x in out.stdout.split()]
    assert len(errs) == len(nodes), out
    verdicts = {}
    for (path, _acc), err in zip(nodes, errs):
        assert err in (0, errno.EPERM, errno.ENXIO, errno.ENODEV), (path, err)
        verdicts[path] = "denied" if err == errno.EPERM else "allowed"
    return verdicts


# --------------------------------------------------------------------------- scenarios

def _uid():
    return str(uuid.uuid4())


def _cid():
    return uuid.uuid4().hex + uuid.uuid4().hex


class Expect(object):
    def __init__(self, gpu, broken, missing=(), gpu_minors=(), mig=0, warn=None,
                 evidence=None, sandbox=False):
        self.gpu = gpu
        self.broken = broken
        self.missing = sorted(missing)
        self.gpu_minors = list(gpu_minors)
        self.mig = mig
        self.warn = warn
        self.evidence = evidence
        self.sandbox = sandbox


def _pod_dir(driver, qos, uid):
    if driver == "cgroupfs":
        if qos == "guaranteed":
            return "kubepods/pod%s" % uid
        return "kubepods/%s/pod%s" % (qos, uid)
    u = uid.replace("-", "_")
    if qos == "guaranteed":
        return "kubepods.slice/kubepods-pod%s.slice" % u
    return "kubepods.slice/kubepods-%s.slice/kubepods-%s-pod%s.slice" % (qos, qos, u)


def _container_dir(driver, runtime, cid):
    if driver == "cgroupfs":
        return cid if runtime != "crio" else "crio-%s" % cid
    return "%s-%s.scope" % (runtime, cid)


def build_kubepods(tree, node, driver, tmpdir):
    """Pods for every QoS class, seeds 3 and 4 included; returns {rel path: Expect}.

    Processes: a pause sandbox, CUDA-image processes with NVIDIA_VISIBLE_DEVICES=all (not a
    GPU allocation), and wiped GPU containers whose process still carries the device
    plugin's NVIDIA_VISIBLE_DEVICES or NVIDIA nodes in its private /dev.
    """
    expect = {}
    runtimes = {"cgroupfs": ["cri-containerd", "crio", "cri-containerd", "crio"],
                "systemd": ["cri-containerd", "crio", "docker", "cri-containerd"]}[driver]
    pause_bin = os.path.join(tmpdir, "pause")
    if not os.path.exists(pause_bin):
        shutil.copy("/bin/sleep", pause_bin)

    def container(qos, uid, runtime, rules, exp, privileged=False):
        rel = "%s/%s" % (_pod_dir(driver, qos, uid), _container_dir(driver, runtime, _cid()))
        if privileged:
            tree.mkdir(rel)
        else:
            tree.restrict(rel, rules)
        expect["/" + rel] = exp
        return rel

    def process(rel, env=None, argv=None, wait_for=None):
        full_env = dict(os.environ)
        full_env.pop("NVIDIA_VISIBLE_DEVICES", None)
        full_env.update(env or {})
        proc = tree.spawn(rel, argv=argv, env=full_env, wait_for=wait_for)
        node.expose_pid(proc.pid)
        return proc

    gpu_uuid = "GPU-%s" % uuid.uuid4()
    # pod A (besteffort): sandbox + healthy GPU container
    a = _uid()
    rel = container("besteffort", a, runtimes[0], RUNC_DEFAULT,
                    Expect(False, False, sandbox=True))
    process(rel, argv=[pause_bin, "600"], wait_for="pause")
    container("besteffort", a, runtimes[0], RUNC_DEFAULT + nvidia_rules(gpus=[0]),
              Expect(True, False, gpu_minors=[0], evidence=["cgroup"]))
    # pod B (burstable): seed 4 - GPU container without the (dynamic) uvm major
    b = _uid()
    container("burstable", b, runtimes[1], RUNC_DEFAULT + nvidia_rules(gpus=[1], uvm=False,
                                                                       tools=False),
              Expect(True, True, missing=["nvidia-uvm", "nvidia-uvm-tools"], gpu_minors=[1],
                     warn="nvidia-uvm-tools", evidence=["cgroup"]))
    if driver == "systemd":
        tree.mkdir("%s/crio-conmon-%s.scope" % (_pod_dir(driver, "burstable", b), _cid()))
    # pod C (guaranteed): seed 3 - CPU manager rewrote the device cgroups
    c = _uid()
    container("guaranteed", c, runtimes[2], RUNC_DEFAULT + ["c %d:0 rw" % GPU_MAJOR],
              Expect(True, True, missing=["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"],
                     gpu_minors=[0], evidence=["cgroup"]))
    rel = container("guaranteed", c, runtimes[2], RUNC_DEFAULT,
                    Expect(True, True, missing=["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"],
                           evidence=["env"]))
    process(rel, env={"NVIDIA_VISIBLE_DEVICES": gpu_uuid})
    rel = container("guaranteed", c, runtimes[2], RUNC_DEFAULT,
                    Expect(True, True, missing=["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"],
                           evidence=["dev_nodes"]))
    ctr_dev = os.path.join(tmpdir, "ctr-dev-%s" % uuid.uuid4().hex[:6])
    os.mkdir(ctr_dev)
    for name, minor in (("nvidiactl", 255), ("nvidia0", 0)):
        os.mknod(os.path.join(ctr_dev, name), 0o600 | 0o020000, os.makedev(GPU_MAJOR, minor))
    process(rel, argv=["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
                       "mount --bind %s /dev && exec sleep 600" % ctr_dev],
            wait_for="sleep")
    rel = container("guaranteed", c, runtimes[2], RUNC_DEFAULT, Expect(False, False))
    process(rel, env={"NVIDIA_VISIBLE_DEVICES": "all"})
    # pod D (burstable): MIG container, uvm-tools-only gap, privileged container
    d = _uid()
    caps = sorted(node.caps.values())
    container("burstable", d, runtimes[3], RUNC_DEFAULT + nvidia_rules(gpus=[1], caps=caps),
              Expect(True, False, gpu_minors=[1], mig=len(caps), evidence=["cgroup"]))
    container("burstable", d, runtimes[3], RUNC_DEFAULT + nvidia_rules(gpus=[0], tools=False),
              Expect(True, False, missing=["nvidia-uvm-tools"], gpu_minors=[0],
                     warn="nvidia-uvm-tools", evidence=["cgroup"]))
    container("burstable", d, runtimes[3], [],
              Expect(True, False, gpu_minors=[0, 1], mig=len(caps), evidence=["cgroup"]),
              privileged=True)
    # MIG caps without the GI capability: a warning, not broken
    container("burstable", d, runtimes[3],
              RUNC_DEFAULT + nvidia_rules(gpus=[1], caps=[node.caps["gpu1/gi1/ci0/access"]]),
              Expect(True, False, gpu_minors=[1], mig=1, warn="GPU instance capability",
                     evidence=["cgroup"]))
    return expect
