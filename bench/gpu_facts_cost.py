# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Part 2: what kubegpu.fleet.gpu_facts costs on a node with 8 GPUs x 7 MIG devices.

The node is the fake NVIDIA userspace at the C ABI (lab/fakes/nvml: libnvidia-ml.so.1 and
nvidia-smi built with gcc, loaded by the real pynvml) with a procfs tree and real device nodes
(mknod) in a scratch directory. Every figure is the wall time of a fresh process, as Ansible
runs a module on a node: the module file executed by the venv's Python with its arguments
file (what AnsiballZ unpacks and runs, without the zip step), median of several runs.

Baselines in the same invocation: an empty module (ansible.builtin.ping, run the same way) -
the floor any module pays (interpreter start, AnsibleModule) - and the raw tool a by-hand
audit runs, `nvidia-smi -q -x` (+ `nvidia-smi -L`, which the by-hand audit needs for MIG
UUIDs), against the same fake library.

Hung nvmlInit: the scenario's "hang" makes nvmlInit never return (as the R570 regression
does); the module must come back with probe.status=hung within timeout + 1 s (goal).
"""
import json
import os
import subprocess
import sys
import time

import benchlib

sys.path.insert(0, os.path.join(benchlib.REPO, "lab", "fakes", "nvml"))
import fakenvml  # noqa: E402  pylint: disable=wrong-import-position,import-error

TITLE = "gpu_facts cost (8 GPUs x 7 MIG devices, fake NVML at the C ABI)"
HANG_TIMEOUT = 2.0
HANG_REPS = 5
GOAL_HANG_OVERSHOOT_S = 1.0


class FakeNode(object):
    def __init__(self, root, hang=False):
        self.driver = fakenvml.build(fakenvml.DEFAULT_VERSION)
        self.root = root
        self.proc = os.path.join(root, "proc")
        self.dev = os.path.join(root, "dev")
        self.scenario = os.path.join(root, "nvml.json")
        gpus = fakenvml.hgx(8, 7)
        mig = {g["minor_number"]: [(m["gpu_instance_id"], m["compute_instance_id"]) for m in g["mig_devices"]]
               for g in gpus}
        fakenvml.write_procfs(self.proc, version=fakenvml.DEFAULT_VERSION, gpus=gpus, mig_instances=mig)
        extra = {"kernel_module_version_file": os.path.join(self.proc, "driver", "nvidia", "version")}
        if hang:
            extra["hang"] = True
        fakenvml.write_scenario(self.scenario, gpus, **extra)
        fakenvml.make_dev_nodes(self.dev, fakenvml.standard_dev_nodes(
            [g["minor_number"] for g in gpus],
            [(g, gi, ci) for g, inst in mig.items() for gi, ci in inst]))

    def env(self):
        env = dict(os.environ, KUBEGPU_FAKE_NVML_CONFIG=self.scenario,
                   PYTHONPATH=benchlib.COLLECTIONS)
        env.pop("LD_LIBRARY_PATH", None)
        return env

    def module_args(self, backend, timeout=10.0):
        return {"backend": backend, "timeout": timeout, "proc_path": self.proc, "dev_path": self.dev,
                "driver_root": self.driver.root}


def _time(cmd, env, stdin_file=None):
    t0 = time.monotonic()
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False,
                          universal_newlines=True)
    wall = time.monotonic() - t0
    return wall, proc


def run_module(node, module, args, scratch, env=None):
    path = os.path.join(scratch, "args-%s.json" % module.rsplit(".", 1)[-1])
    with open(path, "w") as f:
        json.dump({"ANSIBLE_MODULE_ARGS": args}, f)
    wall, proc = _time([benchlib.PYTHON, "-m", module, path], env or node.env())
    try:
        out = json.loads(proc.stdout)
    except ValueError:
        raise RuntimeError("%s gave no JSON (rc %d): %s %s" % (module, proc.returncode, proc.stdout[-2000:],
                                                               proc.stderr[-2000:]))
    if out.get("failed"):
        raise RuntimeError("%s failed: %s" % (module, out.get("msg")))
    return wall, out


def run(ctx):
    reps = ctx.get("reps", 7)
    scratch = benchlib.scratch("gpufacts")
    try:
        node = FakeNode(os.path.join(scratch, "node"))
        gpu_mod = "ansible_collections.kubegpu.fleet.plugins.modules.gpu_facts"
        samples = {"ping": [], "smi_qx": [], "smi_qx_L": [], "cmd_smi_qx": [], "nvml": [], "nvidia_smi": []}
        probe = {"nvml": [], "nvidia_smi": []}
        facts = {}
        # warm the page cache / bytecode once, then interleave the variants
        run_module(node, "ansible.modules.ping", {}, scratch)
        run_module(node, gpu_mod, node.module_args("nvml"), scratch)
        env_smi = dict(node.env(), LD_LIBRARY_PATH=node.driver.libdir)
        for _rep in range(reps):
            samples["ping"].append(run_module(node, "ansible.modules.ping", {}, scratch)[0])
            w, p = _time([node.driver.smi, "-q", "-x"], env_smi)
            if p.returncode != 0:
                raise RuntimeError("nvidia-smi -q -x failed: %s" % p.stderr)
            samples["smi_qx"].append(w)
            w2, p2 = _time([node.driver.smi, "-L"], env_smi)
            samples["smi_qx_L"].append(w + w2)
            # what a by-hand task pays: ansible.builtin.command running nvidia-smi -q -x
            w, out = run_module(node, "ansible.modules.command", {"argv": [node.driver.smi, "-q", "-x"]}, scratch,
                                env=env_smi)
            samples["cmd_smi_qx"].append(w)
            for backend in ("nvml", "nvidia_smi"):
                w, out = run_module(node, gpu_mod, node.module_args(backend), scratch)
                nv = out["ansible_facts"]["nvidia"]
                if nv["probe"]["status"] != "ok" or len(nv["device_ids"]) != 64:
                    raise RuntimeError("gpu_facts %s: unexpected facts: probe %s, %d device ids"
                                       % (backend, nv["probe"], len(nv["device_ids"])))
                samples[backend].append(w)
                probe[backend].append(nv["probe"]["elapsed"])
                facts[backend] = {"gpu_count": nv["gpu_count"], "device_ids": len(nv["device_ids"]),
                                  "device_nodes": len(nv["device_nodes"])}
        med = dict((k, benchlib.median(v)) for k, v in samples.items())
        med_probe = dict((k, benchlib.median(v)) for k, v in probe.items())

        hang_node = FakeNode(os.path.join(scratch, "hang"), hang=True)
        hang = {}
        for backend in ("nvml", "nvidia_smi"):
            walls, elapsed = [], []
            for _rep in range(HANG_REPS):
                w, out = run_module(hang_node, gpu_mod, hang_node.module_args(backend, HANG_TIMEOUT), scratch)
                nv = out["ansible_facts"]["nvidia"]
                if nv["probe"]["status"] != "hung":
                    raise RuntimeError("gpu_facts %s on a hung nvmlInit: probe %s" % (backend, nv["probe"]))
                walls.append(w)
                elapsed.append(nv["probe"]["elapsed"])
            # the module's own start (interpreter, imports) is what any module pays before its
            # probe starts; the goal is about the probe: time past the timeout once it started.
            # Median over the runs: on a shared machine one run can stall on the scheduler.
            floor = med["ping"]
            net = benchlib.median(walls) - floor - HANG_TIMEOUT
            hang[backend] = {"timeout_s": HANG_TIMEOUT, "wall_s": walls, "max_wall_s": max(walls),
                             "probe_elapsed_s": elapsed, "empty_module_s": floor,
                             "overshoot_s": max(walls) - HANG_TIMEOUT, "overshoot_net_s": net,
                             "probe_overshoot_s": max(elapsed) - HANG_TIMEOUT,
                             "goal_met": max(net, max(elapsed) - HANG_TIMEOUT) <= GOAL_HANG_OVERSHOOT_S,
                             "hung_in": nv["probe"].get("hung_in")}
    finally:
        benchlib.rmtree(scratch)
    return {"part": "gpu_facts_cost", "title": TITLE, "reps": reps, "samples_s": samples, "median_s": med,
            "probe_elapsed_median_s": med_probe, "facts": facts, "hang": hang,
            "ratios": {
                "nvml_vs_empty_module": med["nvml"] / med["ping"],
                "nvidia_smi_vs_empty_module": med["nvidia_smi"] / med["ping"],
                "nvml_vs_raw_nvidia_smi_qx": med["nvml"] / med["smi_qx"],
                "nvml_vs_command_nvidia_smi_qx": med["nvml"] / med["cmd_smi_qx"],
                "nvml_vs_raw_nvidia_smi_qx_L": med["nvml"] / med["smi_qx_L"],
                "nvidia_smi_backend_vs_raw_nvidia_smi_qx_L": med["nvidia_smi"] / med["smi_qx_L"],
                "nvml_vs_nvidia_smi_backend": med["nvml"] / med["nvidia_smi"],
            }}


def summary(r):
    m, q = r["median_s"], r["ratios"]
    lines = [
        "gpu_facts nvml backend: %.3f s = %.2fx an empty module (%.3f s), %.2fx a command task running "
        "`nvidia-smi -q -x` (%.3f s; the tool alone %.3f s)"
        % (m["nvml"], q["nvml_vs_empty_module"], m["ping"], q["nvml_vs_command_nvidia_smi_qx"], m["cmd_smi_qx"],
           m["smi_qx"]),
        "gpu_facts nvidia_smi backend: %.3f s = %.2fx an empty module, %.2fx raw `nvidia-smi -q -x` + `-L` (%.3f s)"
        % (m["nvidia_smi"], q["nvidia_smi_vs_empty_module"], q["nvidia_smi_backend_vs_raw_nvidia_smi_qx_L"],
           m["smi_qx_L"]),
    ]
    for b, h in sorted(r["hang"].items()):
        lines.append("gpu_facts %s on a hung nvmlInit: probe gives up after %.2f s with timeout %.1f s, module "
                     "returns %.2f s after start (median) = timeout %+.2f s past the empty-module floor (goal +%.1f s: %s)"
                     % (b, max(h["probe_elapsed_s"]), h["timeout_s"], benchlib.median(h["wall_s"]),
                        h["overshoot_net_s"],
                        GOAL_HANG_OVERSHOOT_S, "met" if h["goal_met"] else "NOT met"))
    return lines


def render(r):
    m, p, q = r["median_s"], r["probe_elapsed_median_s"], r["ratios"]
    rows = [
        ["empty module (`ansible.builtin.ping`)", "%.3f" % m["ping"], "-", "1.00x"],
        ["raw `nvidia-smi -q -x`", "%.3f" % m["smi_qx"], "-", "%.2fx" % (m["smi_qx"] / m["ping"])],
        ["raw `nvidia-smi -q -x` + `nvidia-smi -L`", "%.3f" % m["smi_qx_L"], "-", "%.2fx" % (m["smi_qx_L"] / m["ping"])],
        ["`ansible.builtin.command` running `nvidia-smi -q -x`", "%.3f" % m["cmd_smi_qx"], "-",
         "%.2fx" % (m["cmd_smi_qx"] / m["ping"])],
        ["gpu_facts backend=nvml", "%.3f" % m["nvml"], "%.3f" % p["nvml"], "%.2fx" % q["nvml_vs_empty_module"]],
        ["gpu_facts backend=nvidia_smi", "%.3f" % m["nvidia_smi"], "%.3f" % p["nvidia_smi"],
         "%.2fx" % q["nvidia_smi_vs_empty_module"]],
    ]
    out = ["Median of %d runs each (fresh process per run; 64 device IDs, %d device nodes checked)."
           % (r["reps"], r["facts"]["nvml"]["device_nodes"]), "",
           benchlib.md_table(["what", "wall s", "probe s", "vs empty module"], rows), "",
           "gpu_facts nvml vs one by-hand `command: nvidia-smi -q -x` task: **%.2fx** (a by-hand audit needs "
           "`-L` too, a second task); vs the bare tool: %.0fx - the difference is the module's Python start "
           "(the empty module), paid by every task on a node." % (q["nvml_vs_command_nvidia_smi_qx"],
                                                                  q["nvml_vs_raw_nvidia_smi_qx"]), "",
           "Hung `nvmlInit`, %d runs per backend (goal: return within timeout + %.0f s):"
           % (HANG_REPS, GOAL_HANG_OVERSHOOT_S), ""]
    rows = [[b, "%.1f" % h["timeout_s"], " / ".join("%.2f" % w for w in h["probe_elapsed_s"]),
             " / ".join("%.2f" % w for w in h["wall_s"]), "%.2f" % h["empty_module_s"],
             "%+.2f" % h["overshoot_net_s"], "%.2fx" % (h["max_wall_s"] / h["timeout_s"]),
             "met" if h["goal_met"] else "**not met**"]
            for b, h in sorted(r["hang"].items())]
    out.append(benchlib.md_table(["backend", "timeout s", "probe gave up after s", "module returned after s",
                                  "empty module s", "median past timeout + empty module", "worst wall / timeout",
                                  "goal"], rows))
    out += ["", "The goal counts the probe's own figure (`probe.elapsed`, from its start to its return, kill and "
            "reap included; worst run) and the median module wall time less the empty module's (the interpreter "
            "start every module pays before its probe begins)."]
    return "\n".join(out)


if __name__ == "__main__":
    res = run({"reps": int(os.environ.get("BENCH_REPS", "7"))})
    print("\n".join(summary(res)))
    print(render(res))
