"""The node's GPU "hardware": GPU UUIDs, MIG mode and MIG instances, and the NVML scenario.

The hardware state lives on the node's disk (/var/lib/kubegpu-lab/hw.json) because it outlives
reboots like the real thing: MIG mode and the instances mig-parted created are still there
after a reboot. Each boot renders the fake NVML scenario (/run/kubegpu-lab/nvml.json, linked
from /etc/kubegpu-lab/nvml.json where the fake libnvidia-ml.so.1 looks for it) from that state.

Hardware health (docs/lab.md, "GPU hardware faults"): a GPU's ``health`` goes into the
scenario as the fake NVML ``health`` key; a ``missing`` GPU stays on the node's PCI bus (the
lab's sysfs tree, /run/kubegpu-lab/sys, written by :func:`write_sysfs`) but is left out of the
driver's list (the scenario), as a GPU that fell off the bus; the profile's Xid events are
written by :func:`write_kernel_log` into the node's kernel log file (/run/kubegpu-lab/kmsg,
``/dev/kmsg`` record format) once the nvidia module is loaded.

With the ``gpu_uuids_change_on_reboot`` fault every boot after the first gives the GPUs (and
their MIG instances) new UUIDs, as after a board swap or on platforms that virtualise them.
"""
import copy
import os
import time
import uuid

from .common import (HW_STATE, NVML_SCENARIO, NVML_SCENARIO_LINK, PROC_OVERLAY_DIR, RUN_DIR, load_node_config,
                     locked, read_json, write_atomic, write_json)

# what the kernel module reports (the backing file of /proc/driver/nvidia/version)
KMOD_VERSION_FILE = os.path.join(PROC_OVERLAY_DIR, "driver", "nvidia", "version")

# GPU instance IDs a profile can take, in placement order (H100/A100 placements).
GI_IDS = {
    7: [0],
    4: [1],
    3: [1, 2],
    2: [3, 4, 5],
    1: [7, 8, 9, 10, 11, 12, 13],
}
# Minor numbers of /dev/nvidia-caps/nvidia-cap<N> (the driver's fixed table).
CAP_CONFIG_MINOR = 1
CAP_MONITOR_MINOR = 2
MAX_GI = 15
MAX_CI = 8
PER_GPU = MAX_GI * (1 + MAX_CI)


def gi_access_minor(gpu, gi):
    return 3 + gpu * PER_GPU + gi * (1 + MAX_CI)


def ci_access_minor(gpu, gi, ci):
    return gi_access_minor(gpu, gi) + 1 + ci


def mig_minors_text(gpu_count):
    """/proc/driver/nvidia-caps/mig-minors for ``gpu_count`` GPUs."""
    lines = ["config %d" % CAP_CONFIG_MINOR, "monitor %d" % CAP_MONITOR_MINOR]
    for g in range(gpu_count):
        for gi in range(MAX_GI):
            lines.append("gpu%d/gi%d/access %d" % (g, gi, gi_access_minor(g, gi)))
            for ci in range(MAX_CI):
                lines.append("gpu%d/gi%d/ci%d/access %d" % (g, gi, ci, ci_access_minor(g, gi, ci)))
    return "\n".join(lines) + "\n"


def profile_slices(profile):
    """``3g.40gb`` -> 3; ``1c.3g.40gb`` (compute-instance profiles) -> 3."""
    parts = profile.split(".")
    for p in parts:
        if p.endswith("g") and p[:-1].isdigit():
            return int(p[:-1])
    raise ValueError("cannot read the slice count of MIG profile %r" % profile)


def layout_instances(layout, existing=None):
    """MIG instances for one GPU's ``layout`` (list of profiles), GI IDs placed like the driver."""
    used = set()
    out = []
    for profile in layout:
        slices = profile_slices(profile)
        if slices not in GI_IDS:
            raise ValueError("MIG profile %r has no placement on this GPU" % profile)
        gi = next((g for g in GI_IDS[slices] if g not in used), None)
        if gi is None:
            raise ValueError("MIG layout %r does not fit on one GPU" % (layout,))
        used.add(gi)
        out.append({"profile": profile, "gi": gi, "ci": 0, "uuid": "MIG-%s" % uuid.uuid4()})
    if sum(profile_slices(p) for p in layout) > 7:
        raise ValueError("MIG layout %r needs more than 7 slices" % (layout,))
    return out


def new_state(cfg):
    gpus = []
    for spec in cfg.get("gpus", []):
        gpus.append({"uuid": "GPU-%s" % uuid.uuid4(), "mig_mode": "Disabled", "instances": []})
        if spec.get("health") is not None:
            gpus[-1]["health"] = copy.deepcopy(spec["health"])
    state = {"boots": 0, "uuid_generation": 1, "gpus": gpus}
    if cfg.get("mig_apply", "boot") == "boot":
        apply_layout(state, cfg)
    return state


def apply_layout(state, cfg):
    """Set MIG mode and instances from the node profile's layout (what mig-parted does)."""
    for gpu, spec in zip(state["gpus"], cfg.get("gpus", [])):
        layout = spec.get("mig")
        if layout:
            gpu["mig_mode"] = "Enabled"
            gpu["instances"] = layout_instances(layout)
        else:
            gpu["mig_mode"] = "Disabled"
            gpu["instances"] = []
    state["mig_applied"] = True
    return state


def reset_health(state):
    """What a reboot (a GPU reset) does to a GPU's memory health, on the state that outlives it:
    a row marked for remapping is remapped (``remapped_rows.pending`` -> false, its count stays,
    as it does in NVML after the reset), pages pending retirement are retired
    (``retired_pages.pending`` -> false), the volatile ECC counters (since the driver loaded)
    start again at 0, pending repairs are done and the driver's recovery verdict is None again
    (as after the fake nvidia-smi -r). A remap failure, unrepairable memory, the aggregate
    counters and the retired pages stay."""
    for gpu in state["gpus"]:
        health = gpu.get("health")
        if not isinstance(health, dict):
            continue
        for key in ("remapped_rows", "retired_pages"):
            if isinstance(health.get(key), dict) and health[key].get("pending"):
                health[key]["pending"] = False
        if health.get("recovery_action") not in (None, False):
            health["recovery_action"] = "none"
        for key, fields in (("reset_status", ("reset_required", "drain_and_reset_recommended")),
                            ("repair", ("channel_repair_pending", "tpc_repair_pending"))):
            if isinstance(health.get(key), dict):
                for name in fields:
                    if health[key].get(name):
                        health[key][name] = False
        ecc = health.get("ecc")
        if isinstance(ecc, dict):
            for name in list(ecc):
                if name.startswith("volatile_"):
                    ecc[name] = 0
            sram = ecc.get("sram")
            if isinstance(sram, dict):
                for name in list(sram):
                    if name.startswith("volatile_"):
                        sram[name] = 0


def rotate_uuids(state):
    state["uuid_generation"] = state.get("uuid_generation", 1) + 1
    for gpu in state["gpus"]:
        gpu["uuid"] = "GPU-%s" % uuid.uuid4()
        for inst in gpu["instances"]:
            inst["uuid"] = "MIG-%s" % uuid.uuid4()


def load_state():
    return read_json(HW_STATE)


def save_state(state):
    write_json(HW_STATE, state)


def boot(cfg=None):
    """Called once per boot (before the driver loads): count the boot, reset the GPUs' memory
    health as a reboot does (:func:`reset_health`), rotate UUIDs if the fault says so, render
    the NVML scenario. Returns the state."""
    cfg = cfg or load_node_config()
    with locked(HW_STATE + ".lock"):
        state = load_state()
        if state is None:
            state = new_state(cfg)
        else:
            reset_health(state)
            if cfg.get("faults", {}).get("gpu_uuids_change_on_reboot"):
                rotate_uuids(state)
        state["boots"] = state.get("boots", 0) + 1
        save_state(state)
        render_scenario(cfg, state)
    return state


def apply_mig_now(cfg=None):
    """Repartition MIG on the running node (mig-parted style) and re-render the scenario."""
    cfg = cfg or load_node_config()
    with locked(HW_STATE + ".lock"):
        state = load_state() or new_state(cfg)
        apply_layout(state, cfg)
        save_state(state)
        render_scenario(cfg, state)
    return state


def render_scenario(cfg, state):
    gpus = []
    for idx, (spec, gpu) in enumerate(zip(cfg.get("gpus", []), state["gpus"])):
        if spec.get("missing"):
            continue  # on the bus (write_sysfs), not in the driver's list
        entry = {
            "uuid": gpu["uuid"],
            "name": spec.get("model", "NVIDIA H100 80GB HBM3"),
            "architecture": spec.get("architecture", "Hopper"),
            "compute_capability": spec.get("compute_capability", "9.0"),
            "pci_bus_id": spec["pci_bus_id"],
            "pci_device_id": spec.get("pci_device_id", "0x233010DE"),
            "minor_number": spec.get("minor", idx),
            "memory_mib": spec.get("memory_mib", 81559),
            "serial": spec.get("serial", "16523%08d" % (idx + 1)),
        }
        if spec.get("mig_capable", True):
            entry["mig_mode"] = gpu["mig_mode"]
            entry["mig_devices"] = [{"profile": i["profile"], "uuid": i["uuid"],
                                     "gpu_instance_id": i["gi"], "compute_instance_id": i["ci"]}
                                    for i in gpu["instances"]]
        else:
            entry["mig_mode"] = "N/A"
        # the state's copy (what reboots did to it), else the profile's (a state from before)
        health = gpu.get("health", spec.get("health"))
        if health is not None:
            entry["health"] = health
        gpus.append(entry)
    scenario = {"kernel_module_version_file": KMOD_VERSION_FILE, "gpus": gpus}
    scenario.update(cfg.get("nvml_extra", {}))
    write_json(NVML_SCENARIO, scenario)
    if not os.path.islink(NVML_SCENARIO_LINK):
        if os.path.lexists(NVML_SCENARIO_LINK):
            os.unlink(NVML_SCENARIO_LINK)
        os.symlink(NVML_SCENARIO, NVML_SCENARIO_LINK)
    return scenario


def devices(cfg, state):
    """Every GPU and MIG device as the hardware has them: for the kernel and the plugin."""
    out = []
    for idx, (spec, gpu) in enumerate(zip(cfg.get("gpus", []), state["gpus"])):
        minor = spec.get("minor", idx)
        out.append({"index": idx, "minor": minor, "uuid": gpu["uuid"], "mig_mode": gpu["mig_mode"],
                    "pci_bus_id": spec["pci_bus_id"], "model": spec.get("model"),
                    "instances": [dict(i, gi_minor=gi_access_minor(idx, i["gi"]),
                                       ci_minor=ci_access_minor(idx, i["gi"], i["ci"]))
                                  for i in gpu["instances"]]})
    return out


# ------------------------------------------------------------------------------ PCI bus, kernel log

SYS_DIR = os.path.join(RUN_DIR, "sys")      # the node's PCI tree: the audit's sys_path
KMSG_FILE = os.path.join(RUN_DIR, "kmsg")   # the node's kernel log: the audit's kmsg_path
PCI_ROOT = "pci0000:00"
# a host bridge, so the bus holds more than NVIDIA devices (vendor, device, class)
OTHER_DEVICES = {"0000:00:00.0": (0x8086, 0x09a2, 0x060000)}
CLASS_3D = 0x030200
# NVSwitches (HGX H100 baseboards carry four: lspci "Bridge [0680]: NVIDIA GH100 [H100 NVSwitch]
# [10de:22a3]"), bound to the NVSwitch half of nvidia.ko while the module is loaded.
NVSWITCH_DEVICE = 0x22A3
CLASS_BRIDGE_OTHER = 0x068000
NVSWITCH_BUSES = (0x05, 0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x0E, 0x0F, 0x10)


def nvswitch_bus_ids(count):
    """sysfs addresses of the node's ``count`` NVSwitches."""
    return ["0000:%02x:00.0" % b for b in NVSWITCH_BUSES[:max(0, int(count or 0))]]


def sysfs_bus_id(pci_bus_id):
    """``00000000:2A:00.0`` (NVML) -> ``0000:2a:00.0`` (sysfs)."""
    domain, rest = pci_bus_id.split(":", 1)
    return ("%04x:%s" % (int(domain, 16), rest)).lower()


def _pci_device_vendor(spec):
    """NVML's ``pci_device_id`` (0x233010DE: device << 16 | vendor) -> (vendor, device)."""
    value = int(str(spec.get("pci_device_id", "0x233010DE")), 16)
    return value & 0xFFFF, value >> 16


def write_sysfs(cfg, nvidia_loaded, root=SYS_DIR):
    """The node's PCI devices as sysfs shows them: ``devices/pci0000:00/<bdf>/{vendor,device,class}``,
    ``bus/pci/devices/<bdf>`` links to them and a ``driver`` link to ``bus/pci/drivers/nvidia``
    on every GPU while the nvidia module is loaded (a missing GPU included: the driver still
    holds a GPU that fell off the bus). Attribute files are written as the kernel prints them
    (``0x%04x``, class ``0x%06x``); links change atomically (rename over)."""
    devices = dict((bdf, (v, d, c, None)) for bdf, (v, d, c) in OTHER_DEVICES.items())
    for spec in cfg.get("gpus", []):
        vendor, device = _pci_device_vendor(spec)
        devices[sysfs_bus_id(spec["pci_bus_id"])] = (vendor, device, CLASS_3D,
                                                     "nvidia" if nvidia_loaded else None)
    for bdf in nvswitch_bus_ids(cfg.get("nvswitches", 0)):
        devices[bdf] = (0x10DE, NVSWITCH_DEVICE, CLASS_BRIDGE_OTHER, "nvidia-nvswitch" if nvidia_loaded else None)
    bus_devices = os.path.join(root, "bus", "pci", "devices")
    os.makedirs(bus_devices, exist_ok=True)
    os.makedirs(os.path.join(root, "bus", "pci", "drivers", "nvidia"), exist_ok=True)
    if cfg.get("nvswitches"):
        os.makedirs(os.path.join(root, "bus", "pci", "drivers", "nvidia-nvswitch"), exist_ok=True)
    for bdf, (vendor, device, pci_class, driver) in sorted(devices.items()):
        dev_dir = os.path.join(root, "devices", PCI_ROOT, bdf)
        os.makedirs(dev_dir, exist_ok=True)
        for name, text in (("vendor", "0x%04x\n" % vendor), ("device", "0x%04x\n" % device),
                           ("class", "0x%06x\n" % pci_class)):
            write_atomic(os.path.join(dev_dir, name), text, 0o444)
        _symlink(os.path.join("..", "..", "..", "devices", PCI_ROOT, bdf), os.path.join(bus_devices, bdf))
        link = os.path.join(dev_dir, "driver")
        if driver:
            _symlink(os.path.join("..", "..", "..", "bus", "pci", "drivers", driver), link)
        elif os.path.lexists(link):
            os.unlink(link)


def _symlink(target, path):
    if os.path.islink(path) and os.readlink(path) == target:
        return
    tmp = "%s.new.%d" % (path, os.getpid())
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(target, tmp)
    os.rename(tmp, path)


def kmsg_record(seq, usec, text, level=6):
    """One ``/dev/kmsg`` record (``<prio>,<seq>,<usec>,<flags>;<text>``, prio = facility kern (0) + level)."""
    return "%d,%d,%d,-;%s\n" % (level, seq, usec, text)


def xid_line(spec, event):
    """The driver's Xid record: ``NVRM: Xid (PCI:0000:2a:00): 79, pid=..., name=..., <text>``
    (the ``pid=``/``name=`` part only when the profile gives them, as older drivers omit it);
    for an Xid attributed to a MIG instance ``(PCI:0000:18:00 GPU-I:01 GPU-CI:00)``, the open
    driver's format (kernel_rc.c)."""
    bdf = sysfs_bus_id(spec["pci_bus_id"])
    who = ""
    if event.get("pid") is not None:
        who += "pid=%s, " % event["pid"]
    if event.get("process"):
        who += "name=%s, " % event["process"]
    where = bdf.rsplit(".", 1)[0]
    if event.get("gpu_instance") is not None:
        where += " GPU-I:%02u" % event["gpu_instance"]
        if event.get("compute_instance") is not None:
            where += " GPU-CI:%02u" % event["compute_instance"]
    return "NVRM: Xid (PCI:%s): %d, %s%s" % (where, event["xid"], who, event["text"])


def write_kernel_log(cfg, driver_version, boot_number=1, path=KMSG_FILE):
    """The node's kernel log of this boot as ``/dev/kmsg`` records: the kernel banner, the
    driver's load message when the nvidia module is loaded (``driver_version``, or None), then
    the profile's Xid events: in the node's first boot only (they are what happened in the
    boot the profile describes; a reboot starts an empty log, like the ring buffer; the file is
    on /run) and only with the driver loaded (the driver prints them)."""
    now = int(time.monotonic() * 1000000)
    lines = [kmsg_record(0, 0, "Linux version %s (kubegpu.fleet lab node %s)" % (os.uname().release,
                                                                                 cfg.get("node", "?")), 5)]
    if driver_version:
        lines.append(kmsg_record(1, max(now - 2000000, 1), "nvidia: loading out-of-tree module taints kernel.", 4))
        lines.append(kmsg_record(2, max(now - 1000000, 2), "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  %s"
                                 % driver_version))
        gpus = cfg.get("gpus", [])
        seq = 3
        for event in (cfg.get("xid", []) if boot_number == 1 else []):
            for _i in range(event.get("count", 1)):
                lines.append(kmsg_record(seq, now + seq, xid_line(gpus[event["gpu"]], event), 3))
                seq += 1
    write_atomic(path, "".join(lines), 0o600)
    return lines
