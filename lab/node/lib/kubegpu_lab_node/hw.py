"""The node's GPU "hardware": GPU UUIDs, MIG mode and MIG instances, and the NVML scenario.

The hardware state lives on the node's disk (/var/lib/kubegpu-lab/hw.json) because it outlives
reboots like the real thing: MIG mode and the instances mig-parted created are still there
after a reboot. Each boot renders the fake NVML scenario (/run/kubegpu-lab/nvml.json, linked
from /etc/kubegpu-lab/nvml.json where the fake libnvidia-ml.so.1 looks for it) from that state.

With the ``gpu_uuids_change_on_reboot`` fault every boot after the first gives the GPUs (and
their MIG instances) new UUIDs, as after a board swap or on platforms that virtualise them.
"""
import os
import uuid

from .common import (HW_STATE, NVML_SCENARIO, NVML_SCENARIO_LINK, PROC_OVERLAY_DIR, load_node_config,
                     locked, read_json, write_json)

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
    for _gpu in cfg.get("gpus", []):
        gpus.append({"uuid": "GPU-%s" % uuid.uuid4(), "mig_mode": "Disabled", "instances": []})
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
    """Called once per boot (before the driver loads): count the boot, rotate UUIDs if the
    fault says so, render the NVML scenario. Returns the state."""
    cfg = cfg or load_node_config()
    with locked(HW_STATE + ".lock"):
        state = load_state()
        if state is None:
            state = new_state(cfg)
        elif cfg.get("faults", {}).get("gpu_uuids_change_on_reboot"):
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
