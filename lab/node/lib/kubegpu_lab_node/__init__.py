"""Code that runs inside a kubegpu lab node (Debian bookworm, python3 + python3-yaml only).

Installed by the lab into /usr/lib/kubegpu-lab/ on every node:

* ``hw``: the node's "hardware" (GPUs, MIG instances, UUIDs) and the fake NVML scenario.
* ``kernel``: the fake NVIDIA kernel modules (load/unload, /proc files, /dev nodes).
* ``runtime``: a minimal container runtime (transient systemd units, private /dev, device
  cgroup files in the real cgroupfs/systemd layouts).
* ``deviceplugin``: the NVIDIA device plugin as it behaves towards the kubelet.
* ``kubelet``: the fake kubelet (node registration, pod lifecycle, device manager, CPU manager).
* ``nvml``: ctypes access to libnvidia-ml.so.1 (whichever one the node has installed).
"""
