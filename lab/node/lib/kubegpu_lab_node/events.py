"""Things that happen on a node after boot, in the order a seed needs them.

``kubegpu-lab-events.service`` waits until the NVIDIA device plugin has registered with the
kubelet in this boot and the kubelet has admitted the pods bound at that time, then, as the node profile asks:

* ``uvm: late`` - nvidia-uvm is loaded now (what the first CUDA job's ``nvidia-modprobe -u
  -c=0`` does on a node that does not load it at boot). The plugin's container already took
  its /dev snapshot, so it never hands /dev/nvidia-uvm to GPU containers until it restarts.
  Repeats on every boot unless something loads nvidia-uvm before the plugin starts
  (modules-load.d or a boot unit: the remediation).
On the first boot it also waits until the lab has placed the profile's pods (as a scheduler
would, once the node advertises GPUs), so they are admitted before the events.

* ``mig_apply: after-device-plugin`` - the MIG layout is applied once, on the running node,
  after the plugin advertised the pre-split devices ("pods stuck after a MIG split").

It writes /run/kubegpu-lab/events-done when it is finished (the lab waits for it).
"""
import os
import subprocess
import sys
import time

from . import hw, kernel
from .common import RUN_DIR, load_node_config

REGISTERED = os.path.join(RUN_DIR, "kubelet-synced")
# written by the lab once it has placed the profile's pods after the node's first boot
PLACED = "/var/lib/kubegpu-lab/pods-placed"
DONE = os.path.join(RUN_DIR, "events-done")


def log(msg):
    sys.stderr.write("kubegpu-lab-events: %s\n" % msg)
    sys.stderr.flush()


def main(argv):
    cfg = load_node_config()
    uvm_late = cfg.get("uvm", "boot") == "late"
    mig_late = cfg.get("mig_apply", "boot") == "after-device-plugin"
    state = hw.load_state() or {}
    mig_late = mig_late and not state.get("mig_applied")
    if (uvm_late or mig_late) and cfg.get("gpus"):
        log("waiting for the NVIDIA device plugin to register and the lab to place the pods")
        while not (os.path.exists(REGISTERED) and os.path.exists(PLACED)):
            time.sleep(0.5)
        if uvm_late:
            kstate = kernel.load_state() or {"modules": {}}
            if "nvidia_uvm" not in kstate["modules"]:
                log("a CUDA job loads nvidia-uvm now (nvidia-modprobe -u -c=0)")
                if os.path.exists("/usr/bin/nvidia-modprobe"):
                    subprocess.call(["/usr/bin/nvidia-modprobe", "-u", "-c=0"])
                else:
                    try:
                        kernel.load("nvidia_uvm")
                    except kernel.KernelError as exc:
                        log(str(exc))
        if mig_late:
            log("applying the MIG layout on the running node (mig-parted)")
            hw.apply_mig_now(cfg)
            kstate = kernel.load_state()
            if kstate and "nvidia" in kstate["modules"]:
                kernel.create_cap_nodes(kstate, cfg)
                kernel.write_proc(kstate, cfg)
    with open(DONE, "w") as f:
        f.write("%d\n" % time.time())
    log("done")
    return 0
