# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Part 1: fleet audit throughput - kubegpu.fleet.audit vs the by-hand baseline playbook.

One lab (bench/lab-profile.yml repeated to --nodes nodes), one inventory. Each run is a fresh
ansible-playbook under cpu_wrap.py (controller CPU of ansible-playbook and every process it
started on this machine - workers, ssh clients, ControlPersist masters, local modules - and
nothing of the node processes, which run under the lab's supervisors). Each run gets its own
ssh ControlPath directory, so no run reuses another's connections.

Runs, all against every node unless noted:
  audit / baseline, recommended settings    the headline ratio (repeated --reps times, median)
  audit / baseline, ansible-core defaults   forks 5, no pipelining
  audit, one lever back to ansible's default (forks 5, pipelining off, ControlPersist off,
  fact gathering on) or to the alternative (strategy free)
  audit on no host / on one host            fixed controller cost and one node's latency (scale model)
  what-if: the audit role through `roles:`  role argument validation on (the collection's playbook
                                            imports the role without it: one task execution per node)
"""
import json
import os
import time

import benchlib

TITLE = "Audit throughput"
PROFILE = os.path.join(benchlib.HERE, "lab-profile.yml")
BASELINE = os.path.join(benchlib.HERE, "baseline", "audit_by_hand.yml")
# issue 15: at least 5x the by-hand baseline, at most 0.35 s controller CPU per node
GOAL_SPEEDUP = 5.0
GOAL_CPU_PER_NODE = 0.35

# The collection's documented defaults (docs/benchmarks.md "Settings the collection recommends").
RECOMMENDED = {"forks": None, "pipelining": True, "control_persist": True, "strategy": "linear",
               "gather_facts": False, "ssh_compression": True, "poll_interval": None}
ANSIBLE_DEFAULTS = dict(RECOMMENDED, forks=5, pipelining=False)
LEVERS = [
    ("forks", "forks 5 (ansible default) instead of one per node", {"forks": 5}),
    ("pipelining", "pipelining off (ansible default)", {"pipelining": False}),
    ("controlpersist", "ControlPersist off (ControlMaster=no)", {"control_persist": False}),
    ("gather_facts", "fact gathering on (a setup task per node)", {"gather_facts": True}),
    ("strategy_free", "strategy free instead of linear", {"strategy": "free"}),
    ("no_compression", "ssh without -C (compression)", {"ssh_compression": False}),
    ("poll_interval", "internal_poll_interval 0.05 instead of 0.001", {"poll_interval": 0.05}),
]

GATHER_WRAPPER = """---
- name: Gather facts (bench lever)
  hosts: "{{ kubegpu_targets }}"
  gather_facts: true
  tasks: []

- name: The audit
  ansible.builtin.import_playbook: kubegpu.fleet.audit
"""


# What-if (not the audit as shipped): the audit's plays with the role applied through `roles:`,
# so ansible adds the role's argument validation task on every host (two task executions per
# node instead of playbooks/audit.yml's one). Reported apart: what that validation costs.
ROLE_VALIDATION_WHATIF = """---
- name: Read the cluster (as the audit)
  hosts: localhost
  connection: local
  gather_facts: false
  vars:
    ansible_python_interpreter: "{{ ansible_playbook_python }}"
  tasks:
    - name: Cluster view
      ansible.builtin.include_role:
        name: kubegpu.fleet.audit
        tasks_from: cluster

- name: The audit role with its argument validation (what-if)
  hosts: "{{ kubegpu_targets }}"
  gather_facts: false
  roles:
    - role: kubegpu.fleet.audit

- name: Write the fleet report (as the audit)
  hosts: localhost
  connection: local
  gather_facts: false
  vars:
    ansible_python_interpreter: "{{ ansible_playbook_python }}"
  tasks:
    - name: Fleet report
      ansible.builtin.include_role:
        name: kubegpu.fleet.audit
        tasks_from: report
"""


# The floor any Ansible-based audit pays: one task execution per node that does nothing
# (bench/audit_floor.py compares the audit's controller CPU with it).
PING_PLAYBOOK = """---
- name: One ansible.builtin.ping per node (the floor of an Ansible-based audit)
  hosts: "{{ kubegpu_targets }}"
  gather_facts: false
  tasks:
    - name: Ping
      ansible.builtin.ping:
"""

# ansible-playbook's main process under cProfile with a CPU clock (time.process_time): where the
# controller's single process spends its CPU (workers are forked from it and not profiled).
PROFILE_MAIN = """import cProfile, runpy, sys, time
out = sys.argv[1]
sys.argv = sys.argv[2:]
prof = cProfile.Profile(time.process_time)
code = 0
prof.enable()
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
except SystemExit as e:
    code = e.code
finally:
    prof.disable()
    prof.dump_stats(out)
sys.exit(code)
"""


class Runner(object):
    def __init__(self, lab, nodes, scratch):
        self.lab, self.nodes, self.scratch = lab, nodes, scratch
        self.count = 0
        self.idle_rate = 0.0
        self.gather_playbook = os.path.join(scratch, "audit-gather-facts.yml")
        with open(self.gather_playbook, "w") as f:
            f.write(GATHER_WRAPPER)
        self.whatif_playbook = os.path.join(scratch, "whatif-role-validation.yml")
        with open(self.whatif_playbook, "w") as f:
            f.write(ROLE_VALIDATION_WHATIF)
        self.ping_playbook = os.path.join(scratch, "ping.yml")
        with open(self.ping_playbook, "w") as f:
            f.write(PING_PLAYBOOK)

    def measure_idle(self, seconds=10.0):
        """CPU the idle lab burns per second (kubelets, device plugins, heartbeats)."""
        c0, t0 = self.lab.node_cpu_s(), time.monotonic()
        time.sleep(seconds)
        c1, t1 = self.lab.node_cpu_s(), time.monotonic()
        if c0 is not None and c1 is not None:
            self.idle_rate = (c1 - c0) / (t1 - t0)
        return self.idle_rate

    def run(self, kind, settings, targets="gpu_nodes", label=None, profile=None):
        """One measured ansible-playbook run of ``kind`` (audit, baseline, whatif, ping); with
        ``profile`` (a path) its main process runs under cProfile (PROFILE_MAIN) and dumps there."""
        self.count += 1
        tag = "%02d-%s" % (self.count, label or kind)
        s = dict(RECOMMENDED)
        s.update(settings)
        forks = s["forks"] or self.nodes
        cp_dir = os.path.join(self.scratch, "cp-" + tag)
        os.makedirs(cp_dir)
        ssh_args = "-o ControlMaster=auto -o ControlPersist=60s" if s["control_persist"] else "-o ControlMaster=no"
        env = benchlib.ansible_env(
            ANSIBLE_FORKS=forks, ANSIBLE_PIPELINING=s["pipelining"],
            ANSIBLE_SSH_ARGS=("-C " if s["ssh_compression"] else "") + ssh_args,
            ANSIBLE_SSH_CONTROL_PATH_DIR=cp_dir, ANSIBLE_STRATEGY=s["strategy"],
            ANSIBLE_INTERNAL_POLL_INTERVAL=s["poll_interval"])
        extra = {"kubegpu_targets": targets, "kubegpu_kubeconfig": self.lab.kubeconfig}
        if kind in ("audit", "whatif"):
            report_dir = os.path.join(self.scratch, "report-" + tag)
            extra.update(kubegpu_audit_fail_on="never", kubegpu_audit_report_dir=report_dir)
            playbook = self.gather_playbook if s["gather_facts"] else "kubegpu.fleet.audit"
            if kind == "whatif":
                playbook = self.whatif_playbook
            report = os.path.join(report_dir, "kubegpu-audit.json")
        elif kind == "ping":
            report, playbook = None, self.ping_playbook
        else:
            report = os.path.join(self.scratch, "baseline-%s.json" % tag)
            extra.update(baseline_report=report)
            playbook = BASELINE
        logfile = os.path.join(self.scratch, tag + ".log")
        cmd = [os.path.join(benchlib.VENV_BIN, "ansible-playbook"), "-i", self.lab.inventory,
               "-e", json.dumps(extra), playbook]
        if profile:
            cmd = [benchlib.PYTHON, "-c", PROFILE_MAIN, profile] + cmd
        node0 = self.lab.node_cpu_s()
        res = benchlib.measured(cmd, env=env, logfile=logfile)
        node1 = self.lab.node_cpu_s()
        if node0 is not None and node1 is not None:
            # the nodes' CPU in the same window (their cgroups), less what they burn idle
            res["node_cpu_s"] = max(node1 - node0 - self.idle_rate * res["wall_s"], 0.0)
        if res["rc"] != 0:
            with open(logfile) as f:
                tail = f.read()[-4000:]
            raise RuntimeError("%s run %s failed (rc %d):\n%s" % (kind, tag, res["rc"], tail))
        res.update(kind=kind, tag=tag, settings=dict(s, forks=forks), targets=targets)
        res["findings"] = self._findings(kind, report) if targets == "gpu_nodes" and report else None
        if res["findings"] is not None and len(res["findings"]) != self.nodes:
            raise RuntimeError("%s run %s covered %d of %d nodes" % (kind, tag, len(res["findings"]), self.nodes))
        benchlib.log("%-9s %-34s wall %6.1f s  controller CPU %6.1f s (main process %5.1f s)  node CPU %s"
                     % (kind, tag, res["wall_s"], res["cpu_s"], res["main_cpu_s"],
                        "%.1f s" % res["node_cpu_s"] if "node_cpu_s" in res else "n/a"))
        return res

    @staticmethod
    def _findings(kind, report):
        with open(report) as f:
            data = json.load(f)
        if kind in ("audit", "whatif"):
            return dict((n["name"], sorted(set(x["id"] for x in n["findings"]))) for n in data["nodes"]
                        if n.get("status") == "audited")
        return dict((n["node"], sorted(set(n["findings"]))) for n in data["nodes"])


def _agreement(audit, baseline):
    """Nodes where both playbooks report the same findings, among the finding ids the
    baseline knows how to compute."""
    known = set(["driver.known_bad", "nvml.hung", "driver.version_mismatch", "driver.compute_utils",
                 "uvm.node_missing", "devchar.symlinks_missing", "cpumanager.device_specs",
                 "cgroup.devices_missing", "checkpoint.stale", "kubelet.memory_reservation",
                 "kubelet.admission_blocked"])
    same = [n for n in audit if set(audit[n]) & known == set(baseline.get(n, [])) & known]
    return {"nodes": len(audit), "same": len(same),
            "differ": sorted(n for n in audit if n not in same)}


def _per_node(runs, key, nodes):
    vals = [x[key] for x in runs if key in x]
    return benchlib.median(vals) / nodes if vals else None


def run(ctx):
    nodes = ctx.get("nodes", 20)
    reps = ctx.get("reps", 2)
    quick = ctx.get("quick", False)
    scratch = benchlib.scratch("audit")
    runs = []
    try:
        with benchlib.Lab(ctx.get("lab_name", "bench"), PROFILE, nodes) as lab:
            r = Runner(lab, nodes, scratch)
            # warm-up on one node (bytecode caches, collection loading, the API double's first
            # requests); not recorded
            r.run("audit", {}, targets="gpu_nodes[0]", label="warmup-audit")
            r.run("baseline", {}, targets="gpu_nodes[0]", label="warmup-baseline")
            idle = r.measure_idle()
            fixed = r.run("audit", {}, targets="kubegpu_bench_no_host", label="audit-0-nodes")
            one = r.run("audit", {}, targets="gpu_nodes[0]", label="audit-1-node")
            head_a, head_b = [], []
            for i in range(reps):
                head_b.append(r.run("baseline", {}, label="baseline-recommended-%d" % i))
                head_a.append(r.run("audit", {}, label="audit-recommended-%d" % i))
            def_b = r.run("baseline", ANSIBLE_DEFAULTS, label="baseline-ansible-defaults")
            def_a = r.run("audit", ANSIBLE_DEFAULTS, label="audit-ansible-defaults")
            levers, refs = [], list(head_a)
            if not quick:
                for key, what, change in LEVERS:
                    levers.append((key, what, change, r.run("audit", change, label="lever-" + key)))
                # the reference again after the levers: on a shared machine the load drifts, so
                # levers are compared with the median of the references before and after them
                refs.append(r.run("audit", {}, label="audit-recommended-after-levers"))
            whatif = r.run("whatif", {}, label="whatif-role-validation")
            memory = lab.memory()
            up_s = lab.up_s
            runs = [fixed, one, def_b, def_a, whatif] + refs + head_b + [lv[3] for lv in levers]
    finally:
        benchlib.rmtree(scratch)

    def med(rs, key):
        return benchlib.median([x[key] for x in rs])

    a_wall, b_wall = med(head_a, "wall_s"), med(head_b, "wall_s")
    a_cpu, b_cpu = med(head_a, "cpu_s"), med(head_b, "cpu_s")
    a_main = med(head_a, "main_cpu_s")
    ref_wall, ref_cpu = med(refs, "wall_s"), med(refs, "cpu_s")
    result = {
        "part": "audit_throughput", "title": TITLE, "nodes": nodes, "reps": reps, "lab_up_s": up_s,
        "lab_memory": memory, "lab_idle_cpu_per_s": idle,
        "settings": {"recommended": dict(RECOMMENDED, forks=nodes), "ansible_defaults": ANSIBLE_DEFAULTS},
        "audit": {"wall_s": a_wall, "cpu_s": a_cpu, "main_cpu_s": a_main, "wall_per_node_s": a_wall / nodes,
                  "node_cpu_per_node_s": _per_node(head_a, "node_cpu_s", nodes),
                  "cpu_per_node_s": a_cpu / nodes, "runs": head_a},
        "baseline": {"wall_s": b_wall, "cpu_s": b_cpu, "main_cpu_s": med(head_b, "main_cpu_s"),
                     "node_cpu_per_node_s": _per_node(head_b, "node_cpu_s", nodes),
                     "wall_per_node_s": b_wall / nodes, "cpu_per_node_s": b_cpu / nodes, "runs": head_b},
        "ansible_defaults": {"audit": def_a, "baseline": def_b,
                             "speedup_wall": def_b["wall_s"] / def_a["wall_s"],
                             "cpu_ratio": def_b["cpu_s"] / def_a["cpu_s"]},
        "fixed": fixed, "one_node": one,
        "whatif_role_validation": {"wall_s": whatif["wall_s"], "cpu_s": whatif["cpu_s"],
                                   "cpu_per_node_s": whatif["cpu_s"] / nodes, "node_cpu_s": whatif.get("node_cpu_s"),
                                   "speedup_vs_baseline": b_wall / whatif["wall_s"]},
        "model_inputs": {
            "fixed_cpu_s": fixed["cpu_s"], "fixed_wall_s": fixed["wall_s"],
            "marginal_cpu_per_node_s": max(a_cpu - fixed["cpu_s"], 0.0) / nodes,
            "marginal_main_cpu_per_node_s": max(a_main - fixed["main_cpu_s"], 0.0) / nodes,
            "node_latency_s": max(one["wall_s"] - fixed["wall_s"], 0.0),
            "forks": nodes,
        },
        "ratios": {"speedup_wall": b_wall / a_wall, "baseline_cpu_vs_audit": b_cpu / a_cpu},
        "goals": {"speedup_wall": {"goal": GOAL_SPEEDUP, "value": b_wall / a_wall,
                                   "met": b_wall / a_wall >= GOAL_SPEEDUP},
                  "cpu_per_node_s": {"goal": GOAL_CPU_PER_NODE, "value": a_cpu / nodes,
                                     "met": a_cpu / nodes <= GOAL_CPU_PER_NODE}},
        "agreement": _agreement(head_a[-1]["findings"], head_b[-1]["findings"]),
        "lever_reference": {"wall_s": ref_wall, "cpu_s": ref_cpu, "runs": len(refs)},
        "levers": [{"lever": k, "what": w, "change": c, "wall_s": x["wall_s"], "cpu_s": x["cpu_s"],
                    "wall_vs_recommended": x["wall_s"] / ref_wall, "cpu_vs_recommended": x["cpu_s"] / ref_cpu}
                   for k, w, c, x in levers],
    }
    for x in runs:
        x.pop("findings", None)
    return result


def summary(r):
    a, b, g = r["audit"], r["baseline"], r["goals"]
    lines = [
        "audit of %d lab nodes: %.1f s wall, %.2f s controller CPU per node; by-hand baseline %.1f s, %.2f s per node"
        % (r["nodes"], a["wall_s"], a["cpu_per_node_s"], b["wall_s"], b["cpu_per_node_s"]),
        "audit vs baseline (same inventory, forks %d, pipelining, ControlPersist): %.2fx faster (goal %.0fx: %s), "
        "%.2fx less controller CPU" % (r["settings"]["recommended"]["forks"], r["ratios"]["speedup_wall"],
                                       g["speedup_wall"]["goal"], "met" if g["speedup_wall"]["met"] else "NOT met",
                                       r["ratios"]["baseline_cpu_vs_audit"]),
        "controller CPU per node %.2f s (goal <= %.2f s: %s)" % (a["cpu_per_node_s"], g["cpu_per_node_s"]["goal"],
                                                                 "met" if g["cpu_per_node_s"]["met"] else "NOT met"),
        "with ansible-core defaults (forks 5, no pipelining): audit %.2fx faster than baseline"
        % r["ansible_defaults"]["speedup_wall"],
    ]
    for lv in r["levers"]:
        lines.append("lever %-15s wall x%.2f, controller CPU x%.2f vs the recommended settings"
                     % (lv["lever"], lv["wall_vs_recommended"], lv["cpu_vs_recommended"]))
    w = r.get("whatif_role_validation")
    if w:
        lines.append("what-if, the role through roles: (its argument validation on every host): %.2fx faster than "
                     "the baseline, %.2f s controller CPU per node" % (w["speedup_vs_baseline"], w["cpu_per_node_s"]))
    ag = r["agreement"]
    lines.append("findings agree on %d/%d nodes (ids the baseline computes)%s"
                 % (ag["same"], ag["nodes"], (": differ on " + ", ".join(ag["differ"])) if ag["differ"] else ""))
    return lines


def render(r):
    a, b, d = r["audit"], r["baseline"], r["ansible_defaults"]
    n = r["nodes"]
    mem = r["lab_memory"]
    out = ["%d lab nodes (`bench/lab-profile.yml`: healthy, 8x7 MIG, CPU manager, late nvidia-uvm and "
           "no-memory-reservation nodes, repeated), lab booted in %.0f s; lab memory per node (PSS of all its "
           "processes) mean %.1f MiB, max %.1f MiB. Median of %d runs for the headline rows."
           % (n, r["lab_up_s"], mem["mean_bytes"] / 2 ** 20, mem["max_bytes"] / 2 ** 20, r["reps"]), ""]

    def node_cpu(x, per_run=False):
        v = x.get("node_cpu_s") if per_run else x.get("node_cpu_per_node_s")
        return "-" if v is None else "%.2f" % (v / n if per_run else v)

    rows = [
        ["by-hand baseline, recommended settings", "%.1f" % b["wall_s"], "%.2f" % b["wall_per_node_s"],
         "%.1f" % b["cpu_s"], "%.2f" % b["cpu_per_node_s"], node_cpu(b), "1.00x"],
        ["**kubegpu.fleet.audit, recommended settings**", "%.1f" % a["wall_s"], "%.2f" % a["wall_per_node_s"],
         "%.1f" % a["cpu_s"], "**%.2f**" % a["cpu_per_node_s"], node_cpu(a),
         "**%.2fx**" % r["ratios"]["speedup_wall"]],
        ["by-hand baseline, ansible-core defaults", "%.1f" % d["baseline"]["wall_s"],
         "%.2f" % (d["baseline"]["wall_s"] / n), "%.1f" % d["baseline"]["cpu_s"],
         "%.2f" % (d["baseline"]["cpu_s"] / n), node_cpu(d["baseline"], True),
         "%.2fx" % (b["wall_s"] / d["baseline"]["wall_s"])],
        ["kubegpu.fleet.audit, ansible-core defaults", "%.1f" % d["audit"]["wall_s"],
         "%.2f" % (d["audit"]["wall_s"] / n), "%.1f" % d["audit"]["cpu_s"], "%.2f" % (d["audit"]["cpu_s"] / n),
         node_cpu(d["audit"], True), "%.2fx" % (b["wall_s"] / d["audit"]["wall_s"])],
    ]
    out.append(benchlib.md_table(["run", "wall s", "wall s/node", "controller CPU s", "controller CPU s/node",
                                  "node CPU s/node", "speed vs baseline (recommended)"], rows))
    out += ["", "Node CPU: the lab nodes' cgroups during the run, less their idle rate (%.2f CPU s/s); on this "
            "machine it shares the controller's cores, so wall time follows controller + node CPU."
            % (r.get("lab_idle_cpu_per_s") or 0.0)]
    g = r["goals"]
    out += ["", "Goals: audit >= %.0fx faster than the baseline: **%.2fx (%s)**; controller CPU <= %.2f s per "
            "node: **%.2f s (%s)**. Same settings, audit vs baseline with ansible-core defaults: %.2fx."
            % (g["speedup_wall"]["goal"], g["speedup_wall"]["value"], "met" if g["speedup_wall"]["met"] else
               "not met", g["cpu_per_node_s"]["goal"], g["cpu_per_node_s"]["value"],
               "met" if g["cpu_per_node_s"]["met"] else "not met", d["speedup_wall"]), ""]
    ag = r["agreement"]
    out.append("Both playbooks report the same findings (among the ids the baseline computes) on %d of %d nodes%s."
               % (ag["same"], ag["nodes"], (" (differ: %s)" % ", ".join(ag["differ"])) if ag["differ"] else ""))
    if r["levers"]:
        ref = r["lever_reference"]
        out += ["", "Levers, each changed alone from the recommended settings (audit, %d nodes), compared with the "
                "median of %d runs of the recommended settings (before and after the levers):" % (n, ref["runs"]), ""]
        rows = [[lv["what"], "%.1f" % lv["wall_s"], "x%.2f" % lv["wall_vs_recommended"], "%.1f" % lv["cpu_s"],
                 "x%.2f" % lv["cpu_vs_recommended"]] for lv in r["levers"]]
        rows.insert(0, ["recommended (forks = nodes, pipelining, ControlPersist 60s, no facts, linear)",
                        "%.1f" % ref["wall_s"], "x1.00", "%.1f" % ref["cpu_s"], "x1.00"])
        out.append(benchlib.md_table(["settings", "wall s", "wall vs recommended", "controller CPU s",
                                      "CPU vs recommended"], rows))
    w = r.get("whatif_role_validation")
    if w:
        out += ["", "What-if, not the audit as shipped: the same plays with the role applied through `roles:`, so "
                "ansible adds the role's argument validation task on every host (two task executions per node; "
                "`playbooks/audit.yml` imports the role without it, and audit_node's argument spec checks the same "
                "variables): %.1f s wall (**%.2fx** the baseline), %.2f s controller CPU per node%s." % (
                    w["wall_s"], w["speedup_vs_baseline"], w["cpu_per_node_s"],
                    (", %.2f s node CPU per node" % (w["node_cpu_s"] / n)) if w.get("node_cpu_s") is not None else "")]
    m = r["model_inputs"]
    out += ["", "Scale-model inputs: fixed controller CPU (audit on no node: API reads, report) %.2f s / %.1f s wall; "
            "marginal controller CPU %.3f s per node (%.3f s of it in the single ansible-playbook process); "
            "one node's latency %.2f s." % (m["fixed_cpu_s"], m["fixed_wall_s"], m["marginal_cpu_per_node_s"],
                                            m["marginal_main_cpu_per_node_s"], m["node_latency_s"])]
    return "\n".join(out)


if __name__ == "__main__":
    res = run({"nodes": int(os.environ.get("BENCH_NODES", "20")), "reps": 1, "quick": True,
               "lab_name": "bench-dev2"})
    print("\n".join(summary(res)))
