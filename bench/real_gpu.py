# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run gpu_facts and the health probes on a machine with a real NVIDIA GPU; keep what it saw.

    python3 bench/real_gpu.py OUTDIR [--reps 7]

Not part of `make bench` (CI has no GPU): it is run by hand on a lent GPU machine, where only
ansible-core's module_utils are needed (PYTHONPATH with ansible-core and a collection path that
holds ansible_collections/kubegpu/fleet). It writes into OUTDIR:

- ``nvidia-smi-q-x.xml``, ``nvidia-smi-L.txt``: the driver's own documents (fixtures for the
  nvidia-smi parsers);
- ``procfs.json``: /proc/driver/nvidia files, /proc/devices and the NVIDIA lines of
  /proc/modules, the PCI attributes of every NVIDIA function in sysfs, the /dev/nvidia* nodes;
- ``gpu_facts-nvml.json``, ``gpu_facts-nvidia_smi.json``: the module's result with each backend,
  executed as Ansible executes it on a node (the module file run by the node's Python with an
  arguments file);
- ``timings.json``: median wall time of a fresh process for the empty module
  (``ansible.builtin.ping``, the floor any module pays), gpu_facts with each backend and the by-hand
  ``nvidia-smi -q -x`` + ``nvidia-smi -L``, measured in the same run.
"""
import glob
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODULE = os.path.join(REPO, "plugins", "modules", "gpu_facts.py")
READ_LIMIT = 1 << 20


def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read(READ_LIMIT).decode("utf-8", "replace")
    except OSError as e:
        return "<unreadable: %s>" % e


def run_module(path, args, env):
    """(result dict, wall seconds) of one fresh module process."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"ANSIBLE_MODULE_ARGS": args}, f)
    try:
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, path, f.name], env=env, capture_output=True,
                              text=True, timeout=120, check=False)
        wall = time.perf_counter() - start
    finally:
        os.unlink(f.name)
    try:
        return json.loads(proc.stdout), wall
    except ValueError:
        return {"failed": True, "rc": proc.returncode, "stdout": proc.stdout[-4000:],
                "stderr": proc.stderr[-4000:]}, wall


def run_tool(argv):
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    return proc, time.perf_counter() - start


def capture_state(smi):
    state = {"uname": platform.uname()._asdict(), "python": sys.version.split()[0]}
    proc = {}
    for p in ["/proc/driver/nvidia/version", "/proc/devices", "/proc/driver/nvidia/params"] + \
            sorted(glob.glob("/proc/driver/nvidia/gpus/*/information")) + \
            sorted(glob.glob("/proc/driver/nvidia-caps/*")):
        if os.path.isfile(p):
            proc[p] = _read(p)
    proc["/proc/modules (nvidia lines)"] = "".join(
        line for line in _read("/proc/modules").splitlines(True) if line.startswith("nvidia"))
    state["proc"] = proc
    pci = {}
    for dev in sorted(glob.glob("/sys/bus/pci/devices/*")):
        if _read(os.path.join(dev, "vendor")).strip() != "0x10de":
            continue
        attrs = {}
        for name in ("vendor", "device", "subsystem_vendor", "subsystem_device", "class",
                     "current_link_speed", "current_link_width", "max_link_speed",
                     "max_link_width", "numa_node", "enable"):
            attrs[name] = _read(os.path.join(dev, name)).strip()
        driver = os.path.join(dev, "driver")
        attrs["driver"] = os.path.basename(os.readlink(driver)) if os.path.islink(driver) else None
        pci[os.path.basename(dev)] = attrs
    state["pci"] = pci
    nodes = {}
    for p in sorted(glob.glob("/dev/nvidia*")) + sorted(glob.glob("/dev/nvidia-caps/*")):
        try:
            st = os.lstat(p)
            nodes[p] = {"mode": oct(st.st_mode), "rdev": [os.major(st.st_rdev), os.minor(st.st_rdev)]}
        except OSError as e:
            nodes[p] = str(e)
    state["dev"] = nodes
    state["nvidia_smi"] = smi
    return state


def main():
    out = sys.argv[1]
    reps = int(sys.argv[sys.argv.index("--reps") + 1]) if "--reps" in sys.argv else 7
    os.makedirs(out, exist_ok=True)
    env = dict(os.environ, LC_ALL="C")
    smi = shutil.which("nvidia-smi")
    state = capture_state(smi)
    if smi:
        xml = run_tool([smi, "-q", "-x"])[0]
        with open(os.path.join(out, "nvidia-smi-q-x.xml"), "w") as f:
            f.write(xml.stdout)
        listing = run_tool([smi, "-L"])[0]
        with open(os.path.join(out, "nvidia-smi-L.txt"), "w") as f:
            f.write(listing.stdout)
    with open(os.path.join(out, "procfs.json"), "w") as f:
        json.dump(state, f, indent=1, sort_keys=True)

    import ansible.modules.ping as ping_module  # pylint: disable=import-outside-toplevel
    timings = {}
    for backend in ("nvml", "nvidia_smi"):
        walls = []
        result = None
        for _rep in range(reps):
            result, wall = run_module(MODULE, {"backend": backend, "timeout": 30}, env)
            walls.append(wall)
        with open(os.path.join(out, "gpu_facts-%s.json" % backend), "w") as f:
            json.dump(result, f, indent=1, sort_keys=True)
        timings["gpu_facts_%s" % backend] = {"median_s": statistics.median(walls), "runs": walls}
        probe = ((result.get("ansible_facts") or {}).get("nvidia") or {}).get("probe") or {}
        print("gpu_facts %-10s status=%s gpus=%s median %.3f s" % (
            backend, probe.get("status"),
            len(((result.get("ansible_facts") or {}).get("nvidia") or {}).get("gpus") or []),
            statistics.median(walls)))
    walls = [run_module(ping_module.__file__, {}, env)[1] for _rep in range(reps)]
    timings["ping_module"] = {"median_s": statistics.median(walls), "runs": walls}
    if smi:
        walls = []
        for _rep in range(reps):
            walls.append(run_tool([smi, "-q", "-x"])[1] + run_tool([smi, "-L"])[1])
        timings["nvidia_smi_q_x_plus_L"] = {"median_s": statistics.median(walls), "runs": walls}
    timings["reps"] = reps
    timings["machine"] = {"gpus": state["pci"] and len(state["pci"]),
                          "driver": state["proc"].get("/proc/driver/nvidia/version", "").splitlines()[:1],
                          "kernel": state["uname"]["release"]}
    with open(os.path.join(out, "timings.json"), "w") as f:
        json.dump(timings, f, indent=1, sort_keys=True)
    for name, t in sorted(timings.items()):
        if isinstance(t, dict) and "median_s" in t:
            print("%-24s %.3f s" % (name, t["median_s"]))


if __name__ == "__main__":
    main()
