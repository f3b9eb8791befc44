"""The fake NVIDIA kernel modules of a lab node.

A node container shares the host kernel, whose /proc/devices has no NVIDIA majors and which
cannot load NVIDIA modules. The lab therefore keeps the "kernel" state per boot under
/run/kubegpu-lab/kernel and shows it where tools look for it, like LXCFS does:

* the files live in /run/kubegpu-lab/procfs: devices and modules (the host's own lines plus
  the NVIDIA majors and modules), meminfo (the profile's memory) and driver/ (nvidia/version,
  nvidia/gpus/<bus>/information and nvidia-caps/mig-minors while nvidia is loaded);
* they are bind-mounted over /proc/devices, /proc/meminfo, /proc/driver (and /proc/modules
  where the host kernel has one), and served complete by the FUSE view at
  /run/kubegpu-lab/proc (procview.py), the ``proc_path`` the lab inventory gives modules;
* /dev/nvidia* are real character device nodes (mknod) with the real majors/minors.

A module is "loaded" from the file its package installed under
/lib/modules/$(uname -r)/updates/dkms, and its version is recorded at that moment: upgrading
the packages later does not change the running module, so the new libnvidia-ml.so.1 reports
NVML_ERROR_LIB_RM_VERSION_MISMATCH until the node reboots (or the modules are reloaded).
Dynamic majors (nvidia-uvm, nvidia-caps) are allocated like the kernel does, top-down from 254
skipping the host's, so they depend on the load order and must be read, never hard-coded.
"""
import errno
import glob
import os
import re
import stat
import subprocess
import sys

from . import hw
from .common import (KERNEL_DIR, PROC_OVERLAY_DIR, load_node_config, locked, read_json,
                     write_in_place, write_json)

GPU_MAJOR = 195
CTL_MINOR = 255
MODESET_MINOR = 254
# name -> (modules it needs, size shown in /proc/modules)
MODULES = {
    "nvidia": ((), 73306112),
    "nvidia_modeset": (("nvidia",), 1581056),
    "nvidia_uvm": (("nvidia",), 1794048),
    "nvidia_drm": (("nvidia_modeset",), 126976),
    "nvidia_peermem": (("nvidia",), 16384),
}
ALIASES = {n.replace("_", "-"): n for n in MODULES}
STATE = os.path.join(KERNEL_DIR, "state.json")
LOCK = os.path.join(KERNEL_DIR, "lock")
DYN_MAJORS = list(range(254, 233, -1)) + list(range(511, 383, -1))
MODULES_LOAD_DIRS = ("/etc/modules-load.d", "/run/modules-load.d", "/usr/local/lib/modules-load.d",
                     "/usr/lib/modules-load.d", "/lib/modules-load.d")
BLACKLIST_DIRS = ("/etc/modprobe.d", "/run/modprobe.d", "/usr/lib/modprobe.d", "/lib/modprobe.d")


class KernelError(Exception):
    def __init__(self, msg, code=1):
        Exception.__init__(self, msg)
        self.code = code


def canonical(name):
    name = ALIASES.get(name, name)
    return name.replace("-", "_")


def module_dir():
    return os.path.join("/lib/modules", os.uname().release, "updates", "dkms")


def module_file(name):
    return os.path.join(module_dir(), name.replace("_", "-") + ".ko")


def module_file_version(name):
    """Version recorded in the module file the driver package installed, or None."""
    try:
        with open(module_file(name)) as f:
            for line in f:
                if line.startswith("version:"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def version_tuple(text):
    return tuple(int(p) for p in re.findall(r"\d+", text or "")[:3])


def gpu_major_name(version):
    """/proc/devices calls the GPU major "nvidia" with 550.x and later drivers, "nvidia-frontend" before
    (NVIDIA's text names the 550 branch, no release inside it)."""
    return "nvidia" if version_tuple(version) >= (550,) else "nvidia-frontend"


# ------------------------------------------------------------------------------ state

def load_state():
    return read_json(STATE)


def save_state(state):
    write_json(STATE, state)


def _read(path):
    with open(path) as f:
        return f.read()


def _read_or(path, default):
    try:
        return _read(path)
    except OSError:
        return default


def _split_devices(text):
    chars, blocks, section = [], [], None
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("Character devices"):
            section = chars
            continue
        if s.startswith("Block devices"):
            section = blocks
            continue
        if section is not None and s:
            major, _sep, name = s.partition(" ")
            if major.isdigit():
                section.append((int(major), name.strip()))
    return chars, blocks


def _alloc_major(state):
    used = {major for major, _name in _split_devices(state["orig_devices"])[0]}
    used |= set(state["majors"].values())
    used.add(GPU_MAJOR)
    for m in DYN_MAJORS:
        if m not in used:
            return m
    raise KernelError("no free dynamic character major")


# ------------------------------------------------------------------------------ proc files

def meminfo_text(total_bytes):
    kb = total_bytes // 1024
    used = min(kb // 50, 2 * 1024 * 1024)
    cached = kb // 40
    lines = [
        ("MemTotal", kb), ("MemFree", kb - used - cached), ("MemAvailable", kb - used),
        ("Buffers", kb // 1000), ("Cached", cached), ("SwapCached", 0),
        ("Active", used // 2 + cached // 2), ("Inactive", used // 2 + cached // 2),
        ("Active(anon)", used // 2), ("Inactive(anon)", 0), ("Active(file)", cached // 2),
        ("Inactive(file)", cached // 2), ("Unevictable", 0), ("Mlocked", 0), ("SwapTotal", 0),
        ("SwapFree", 0), ("Zswap", 0), ("Zswapped", 0), ("Dirty", 128), ("Writeback", 0),
        ("AnonPages", used // 2), ("Mapped", used // 8), ("Shmem", 4096), ("KReclaimable", kb // 500),
        ("Slab", kb // 300), ("SReclaimable", kb // 500), ("SUnreclaim", kb // 1000),
        ("KernelStack", 12288), ("PageTables", 16384), ("SecPageTables", 0), ("NFS_Unstable", 0),
        ("Bounce", 0), ("WritebackTmp", 0), ("CommitLimit", kb // 2), ("Committed_AS", used * 2),
        ("VmallocTotal", 34359738367), ("VmallocUsed", 65536), ("VmallocChunk", 0), ("Percpu", 8192),
        ("HardwareCorrupted", 0), ("AnonHugePages", 0), ("ShmemHugePages", 0), ("ShmemPmdMapped", 0),
        ("FileHugePages", 0), ("FilePmdMapped", 0), ("Unaccepted", 0),
    ]
    out = ["%-16s%8d kB" % (k + ":", v) for k, v in lines]
    out += ["HugePages_Total:       0", "HugePages_Free:        0", "HugePages_Rsvd:        0",
            "HugePages_Surp:        0", "Hugepagesize:       2048 kB", "Hugetlb:               0 kB",
            "DirectMap4k:      %8d kB" % (kb // 64), "DirectMap2M:    %10d kB" % (kb - kb // 64)]
    return "\n".join(out) + "\n"


def devices_text(state):
    chars, blocks = _split_devices(state["orig_devices"])
    mods = state["modules"]
    extra = []
    if "nvidia" in mods:
        extra.append((GPU_MAJOR, gpu_major_name(mods["nvidia"]["version"])))
        extra.append((state["majors"]["nvidia-caps"], "nvidia-caps"))
    if "nvidia_uvm" in mods:
        extra.append((state["majors"]["nvidia-uvm"], "nvidia-uvm"))
    chars = sorted(chars + extra)
    lines = ["Character devices:"] + ["%3d %s" % c for c in chars]
    lines += ["", "Block devices:"] + ["%3d %s" % b for b in blocks]
    return "\n".join(lines) + "\n"


def modules_text(state):
    lines = []
    mods = state["modules"]
    for name in sorted(mods, key=lambda n: mods[n]["order"], reverse=True):
        users = sorted(n for n in mods if name in MODULES[n][0])
        used_by = ",".join(users) + "," if users else "-"
        lines.append("%s %d %d %s Live 0x0000000000000000 (POE)"
                     % (name, MODULES[name][1], len(users), used_by))
    return "\n".join(lines + [state["orig_modules"].rstrip("\n")]).strip("\n") + "\n"


def nvrm_version_text(version):
    if version_tuple(version) >= (560,):
        kind = "NVIDIA UNIX Open Kernel Module for x86_64"
    else:
        kind = "NVIDIA UNIX x86_64 Kernel Module"
    return ("NVRM version: %s  %s  Release Build  (dvs-builder@U16-I3-B03-4-3)  "
            "Tue Jul  8 18:11:52 UTC 2025\nGCC version:  gcc version 12.3.0 "
            "(Ubuntu 12.3.0-1ubuntu1~22.04) \n" % (kind, version))


def gpu_information_text(dev, version):
    return ("Model: \t\t %s\nIRQ:   \t\t %d\nGPU UUID: \t %s\nVideo BIOS: \t 96.00.99.00.01\n"
            "Bus Type: \t PCIe\nDMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\n"
            "Bus Location: \t %s\nDevice Minor: \t %d\nGPU Firmware: \t %s\nGPU Excluded:\t No\n"
            % (dev["model"], 200 + dev["index"], dev["uuid"], proc_bus_id(dev["pci_bus_id"]),
               dev["minor"], version))


def proc_bus_id(nvml_bus_id):
    """00000000:18:00.0 (NVML) -> 0000:18:00.0 (procfs/sysfs)."""
    dom, rest = nvml_bus_id.split(":", 1)
    return "%04x:%s" % (int(dom, 16), rest.lower())


def write_proc(state, cfg=None):
    """Bring the procfs views in line with ``state`` (files keep their inodes)."""
    cfg = cfg or load_node_config()
    write_in_place(os.path.join(PROC_OVERLAY_DIR, "devices"), devices_text(state))
    write_in_place(os.path.join(PROC_OVERLAY_DIR, "modules"), modules_text(state))
    drv = os.path.join(PROC_OVERLAY_DIR, "driver")
    os.makedirs(drv, exist_ok=True)
    if "nvidia" in state["modules"]:
        version = state["modules"]["nvidia"]["version"]
        hw_state = hw.load_state()
        os.makedirs(os.path.join(drv, "nvidia", "gpus"), exist_ok=True)
        _put(os.path.join(drv, "nvidia", "version"), nvrm_version_text(version))
        _put(os.path.join(drv, "nvidia", "params"), "ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 1\n"
             "DeviceFileUID: 0\nDeviceFileGID: 0\nDeviceFileMode: 438\n")
        for dev in hw.devices(cfg, hw_state):
            d = os.path.join(drv, "nvidia", "gpus", proc_bus_id(dev["pci_bus_id"]))
            os.makedirs(d, exist_ok=True)
            _put(os.path.join(d, "information"), gpu_information_text(dev, version))
        os.makedirs(os.path.join(drv, "nvidia-caps"), exist_ok=True)
        _put(os.path.join(drv, "nvidia-caps", "mig-minors"), hw.mig_minors_text(len(cfg.get("gpus", []))))
        write_mig_capabilities(os.path.join(drv, "nvidia", "capabilities"), hw.devices(cfg, hw_state))
    else:
        for name in ("nvidia", "nvidia-caps"):
            subprocess.call(["rm", "-rf", os.path.join(drv, name)])
    hw.write_sysfs(cfg, "nvidia" in state["modules"])
    if "nvidia_uvm" in state["modules"]:
        os.makedirs(os.path.join(drv, "nvidia-uvm"), exist_ok=True)
    else:
        subprocess.call(["rm", "-rf", os.path.join(drv, "nvidia-uvm")])


def write_mig_capabilities(capdir, devices):
    """``driver/nvidia/capabilities/gpu<minor>/mig/gi<G>[/ci<C>]/access`` for every MIG
    instance, as the driver exposes them (served by the kernel module, so they still read when
    NVML hangs). Rewritten whole: repartitioning MIG removes old instances."""
    subprocess.call(["rm", "-rf", capdir])
    for dev in devices:
        base = os.path.join(capdir, "gpu%d" % dev["minor"], "mig")
        os.makedirs(base, exist_ok=True)
        for inst in dev["instances"]:
            gi_dir = os.path.join(base, "gi%d" % inst["gi"])
            ci_dir = os.path.join(gi_dir, "ci%d" % inst["ci"])
            os.makedirs(ci_dir, exist_ok=True)
            _put(os.path.join(gi_dir, "access"), _cap_access_text(inst["gi_minor"]))
            _put(os.path.join(ci_dir, "access"), _cap_access_text(inst["ci_minor"]))


def _cap_access_text(minor):
    return "DeviceFileMinor: %d\nDeviceFileMode: 292\nDeviceFileModify: 1\n" % minor


def _put(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o444)
    os.replace(tmp, path)


# ------------------------------------------------------------------------------ /dev

def mknod(path, major, minor, mode):
    try:
        st = os.lstat(path)
        if stat.S_ISCHR(st.st_mode) and os.major(st.st_rdev) == major and os.minor(st.st_rdev) == minor:
            os.chmod(path, mode)
            return False
        os.unlink(path)
    except FileNotFoundError:
        pass
    os.makedirs(os.path.dirname(path), exist_ok=True)
    os.mknod(path, mode | stat.S_IFCHR, os.makedev(major, minor))
    os.chmod(path, mode)
    return True


def create_nodes(state, cfg=None, dev="/dev"):
    """Device nodes for the loaded modules (what udev + nvidia-modprobe do on a real node)."""
    cfg = cfg or load_node_config()
    mods = state["modules"]
    made = []
    if "nvidia" in mods:
        if mknod(os.path.join(dev, "nvidiactl"), GPU_MAJOR, CTL_MINOR, 0o666):
            made.append("nvidiactl")
        for d in hw.devices(cfg, hw.load_state()):
            if mknod(os.path.join(dev, "nvidia%d" % d["minor"]), GPU_MAJOR, d["minor"], 0o666):
                made.append("nvidia%d" % d["minor"])
        made += create_cap_nodes(state, cfg, dev)
    if "nvidia_modeset" in mods and mknod(os.path.join(dev, "nvidia-modeset"), GPU_MAJOR, MODESET_MINOR, 0o666):
        made.append("nvidia-modeset")
    if "nvidia_uvm" in mods:
        major = state["majors"]["nvidia-uvm"]
        if mknod(os.path.join(dev, "nvidia-uvm"), major, 0, 0o666):
            made.append("nvidia-uvm")
        if mknod(os.path.join(dev, "nvidia-uvm-tools"), major, 1, 0o666):
            made.append("nvidia-uvm-tools")
    return made


def create_cap_nodes(state, cfg=None, dev="/dev"):
    cfg = cfg or load_node_config()
    if "nvidia" not in state["modules"]:
        return []
    major = state["majors"]["nvidia-caps"]
    capdir = os.path.join(dev, "nvidia-caps")
    made = []
    for minor, mode in ((hw.CAP_CONFIG_MINOR, 0o400), (hw.CAP_MONITOR_MINOR, 0o444)):
        if mknod(os.path.join(capdir, "nvidia-cap%d" % minor), major, minor, mode):
            made.append("nvidia-caps/nvidia-cap%d" % minor)
    for d in hw.devices(cfg, hw.load_state()):
        for inst in d["instances"]:
            for minor in (inst["gi_minor"], inst["ci_minor"]):
                if mknod(os.path.join(capdir, "nvidia-cap%d" % minor), major, minor, 0o444):
                    made.append("nvidia-caps/nvidia-cap%d" % minor)
    return made


# ------------------------------------------------------------------------------ load/unload

def blacklisted(name):
    for d in BLACKLIST_DIRS:
        for path in sorted(glob.glob(os.path.join(d, "*.conf"))):
            try:
                text = _read(path)
            except OSError:
                continue
            for line in text.splitlines():
                f = line.split("#", 1)[0].split()
                if len(f) >= 2 and f[0] == "blacklist" and canonical(f[1]) == name:
                    return True
    return False


def load(name, create_device_nodes=True, cfg=None):
    """modprobe ``name`` (and what it needs). Returns the list of modules newly loaded."""
    name = canonical(name)
    if name not in MODULES:
        raise KernelError("modprobe: FATAL: Module %s not found in directory /lib/modules/%s"
                          % (name, os.uname().release))
    cfg = cfg or load_node_config()
    with locked(LOCK):
        state = load_state()
        if state is None:
            raise KernelError("the lab kernel is not booted (kubegpu-lab-kernel.service)")
        loaded = _load_locked(state, name)
        if loaded:
            save_state(state)
            write_proc(state, cfg)
        if create_device_nodes:
            create_nodes(state, cfg)
    return loaded


def _load_locked(state, name):
    mods = state["modules"]
    if name in mods:
        return []
    loaded = []
    for dep in MODULES[name][0]:
        loaded += _load_locked(state, dep)
    version = module_file_version(name)
    if version is None:
        raise KernelError("modprobe: FATAL: Module %s not found in directory /lib/modules/%s"
                          % (name, os.uname().release))
    if name != "nvidia":
        core = mods["nvidia"]["version"]
        if version != core:
            raise KernelError(
                "modprobe: ERROR: could not insert '%s': Invalid argument\n"
                "(kernel: NVRM: API mismatch: the client %s has the version %s, but this kernel "
                "module has the version %s)" % (name, name, version, core))
    if name == "nvidia":
        state["majors"].setdefault("nvidia-caps", _alloc_major(state))
    if name == "nvidia_uvm":
        state["majors"]["nvidia-uvm"] = _alloc_major(state)
    state["order"] = state.get("order", 0) + 1
    mods[name] = {"version": version, "order": state["order"]}
    loaded.append(name)
    return loaded


def _open_users(paths):
    """pids holding any of ``paths`` open."""
    targets = set(paths)
    users = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            for fd in os.listdir("/proc/%s/fd" % pid):
                try:
                    if os.readlink("/proc/%s/fd/%s" % (pid, fd)) in targets:
                        users.add(int(pid))
                except OSError:
                    continue
        except OSError:
            continue
    return users


def unload(name, cfg=None):
    name = canonical(name)
    cfg = cfg or load_node_config()
    with locked(LOCK):
        state = load_state()
        if state is None or name not in state["modules"]:
            raise KernelError("rmmod: ERROR: Module %s is not currently loaded" % name)
        users = sorted(n for n in state["modules"] if name in MODULES[n][0])
        if users:
            raise KernelError("rmmod: ERROR: Module %s is in use by: %s" % (name, " ".join(users)))
        nodes = glob.glob("/dev/nvidia*") if name == "nvidia" else (
            ["/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"] if name == "nvidia_uvm" else [])
        if _open_users(nodes):
            raise KernelError("rmmod: ERROR: Module %s is in use" % name)
        del state["modules"][name]
        if name == "nvidia_uvm":
            state["majors"].pop("nvidia-uvm", None)
        save_state(state)
        write_proc(state, cfg)


# ------------------------------------------------------------------------------ boot

def modules_load_d():
    """Module names from modules-load.d (and Debian's /etc/modules), first file name wins."""
    files = {}
    for d in MODULES_LOAD_DIRS:
        for path in glob.glob(os.path.join(d, "*.conf")):
            files.setdefault(os.path.basename(path), path)
    names = []
    for base in sorted(files):
        names += _module_lines(files[base])
    names += _module_lines("/etc/modules")
    return names


def _module_lines(path):
    try:
        text = _read(path)
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].split(";", 1)[0].strip()
        if line:
            out.append(line.split()[0])
    return out


def _overmount(src, dst):
    """LXCFS-style: bind the lab file over the procfs one, where the host kernel has it.

    A host kernel built without module support has no /proc/modules: nothing can be mounted
    there, and tools must use the complete view (procview.py) instead."""
    if not os.path.exists(dst) or os.path.ismount(dst):
        return False
    subprocess.check_call(["mount", "--bind", src, dst])
    return True


def boot():
    """Once per boot, before anything uses the GPU: procfs views, hardware, coldplug, modules-load.d."""
    cfg = load_node_config()
    os.makedirs(KERNEL_DIR, exist_ok=True)
    os.makedirs(PROC_OVERLAY_DIR, exist_ok=True)
    log = []
    with locked(LOCK):
        state = load_state()
        if state is None:
            state = {"orig_devices": _read_or("/proc/devices", "Character devices:\n\nBlock devices:\n"),
                     "orig_modules": _read_or("/proc/modules", ""),
                     "modules": {}, "majors": {}, "order": 0}
            save_state(state)
        for name in ("devices", "modules"):
            path = os.path.join(PROC_OVERLAY_DIR, name)
            write_in_place(path, devices_text(state) if name == "devices" else modules_text(state))
            _overmount(path, "/proc/" + name)
        if cfg.get("memory_bytes"):
            path = os.path.join(PROC_OVERLAY_DIR, "meminfo")
            write_in_place(path, meminfo_text(int(cfg["memory_bytes"])))
            _overmount(path, "/proc/meminfo")
        drv = os.path.join(PROC_OVERLAY_DIR, "driver")
        os.makedirs(drv, exist_ok=True)
        os.chmod(drv, 0o555)
        _overmount(drv, "/proc/driver")
    hw.boot(cfg)
    # udev coldplug: the GPUs' PCI modalias loads nvidia unless it is blacklisted
    if cfg.get("gpus") and not blacklisted("nvidia"):
        try:
            log += load("nvidia", cfg=cfg)
        except KernelError as exc:
            sys.stderr.write("%s\n" % exc)
    # systemd-modules-load (skipped in containers, so done here for the NVIDIA modules)
    for name in modules_load_d():
        if canonical(name) in MODULES:
            try:
                log += load(name, cfg=cfg)
            except KernelError as exc:
                sys.stderr.write("%s\n" % exc)
    state = load_state()
    if "nvidia" in state["modules"]:
        create_nodes(state, cfg)
    write_proc(state, cfg)
    hw.write_kernel_log(cfg, (state["modules"].get("nvidia") or {}).get("version"),
                        (hw.load_state() or {}).get("boots", 1))
    return log


def status():
    state = load_state() or {"modules": {}, "majors": {}}
    return {"modules": {k: v["version"] for k, v in state["modules"].items()},
            "majors": state["majors"],
            "installed": {n: module_file_version(n) for n in MODULES if module_file_version(n)}}


def main(argv=None):
    import json
    argv = sys.argv[1:] if argv is None else argv
    try:
        if argv[:1] == ["boot"]:
            loaded = boot()
            print("kubegpu-lab kernel booted; loaded: %s" % (", ".join(loaded) or "nothing"))
        elif argv[:1] == ["load"] and len(argv) >= 2:
            for name in argv[1:]:
                load(name)
        elif argv[:1] == ["unload"] and len(argv) >= 2:
            for name in argv[1:]:
                unload(name)
        elif argv[:1] == ["mig-apply"]:
            hw.apply_mig_now()
            state = load_state()
            if state and "nvidia" in state["modules"]:
                create_cap_nodes(state)
                write_proc(state)
        elif argv[:1] == ["status"]:
            print(json.dumps(status(), indent=2, sort_keys=True))
        else:
            sys.stderr.write("usage: kubegpu-lab-kernel boot|load MOD...|unload MOD...|mig-apply|status\n")
            return 2
    except KernelError as exc:
        sys.stderr.write("%s\n" % exc)
        return exc.code
    except OSError as exc:
        if exc.errno == errno.EPERM:
            sys.stderr.write("kubegpu-lab-kernel: %s (run as root)\n" % exc)
            return 1
        raise
    return 0
