# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Part 1b: the audit's controller CPU per node against an ``ansible.builtin.ping`` pass over the same
inventory in the same run - the floor any Ansible-based audit pays (one task execution per node:
a worker, the connection, a module run, the result through the strategy).

One lab (bench/lab-profile.yml repeated to --nodes), recommended settings (audit_throughput.RECOMMENDED),
each run a fresh ansible-playbook under cpu_wrap.py (controller CPU of the whole process tree):

  ping / audit on no host           the fixed cost of each playbook (startup; the audit's cluster pass
                                     and report)
  ping / audit on every node         --reps times each, alternated (median)
  the audit once more, its main process under cProfile with a CPU clock: where the single
  ansible-playbook process spends its CPU, by area (templating, strategy, variables, ...)

What the rest is spent on: the fixed part (amortised per node), and per node the main process
(strategy, templating, variables) and the workers (connection, module transfer and run, the
action plugin that evaluates the findings on the controller).
"""
import json
import os
import pstats
import subprocess

import audit_throughput
import benchlib

TITLE = "Audit controller CPU against the ping floor"
GOAL_RATIO = 1.5
PROJECT_AT = (100, 1000, 5000)  # fleet sizes the ratio is projected to from the measured fixed part and slope
TOP = 12
# area of a profiled function by its file (first match wins)
AREAS = [
    ("kubegpu.fleet (the collection's controller code)", ("ansible_collections/kubegpu",)),
    ("task results (ansible's JSON visitor, strip_internal_keys, deep copies)",
     ("/ansible/_internal/_json/", "/ansible/vars/clean.py", "/copy.py")),
    ("templating (Jinja2)", ("/jinja2/", "/ansible/template/", "/ansible/_internal/_templating/")),
    ("variables and inventory", ("/ansible/vars/", "/ansible/inventory/", "/ansible/plugins/inventory/")),
    ("playbook and YAML loading", ("/ansible/playbook/", "/ansible/parsing/", "/yaml/", "/ansible/_internal/_yaml/")),
    ("strategy and task queue", ("/ansible/executor/", "/ansible/plugins/strategy/", "/multiprocessing/")),
    ("plugin loading", ("/ansible/plugins/loader", "/ansible/collections/", "/importlib/", "<frozen importlib")),
    ("callbacks and display", ("/ansible/plugins/callback/", "/ansible/utils/display")),
]


def area_of(filename):
    for name, marks in AREAS:
        if any(m in filename for m in marks):
            return name
    return "other (built-ins such as isinstance and getattr, called from all of the above; the Python runtime)"


# What a node's task worker pays for the catalog and the evaluation. ansible-playbook's strategy
# loads the action plugin's class in its main process before it forks a worker per node
# (action_loader.get(..., class_only=True)); the import reads and validates the bundled catalog
# there (plugin_utils/catalog/load.py preload, audit/node_audit.py warm), so every worker inherits it.
# Measured the same way: the class loaded through ansible's plugin loader, then a forked child
# times the task's catalog load and one node's evaluation (a lab-like node: one GPU, R570).
WORKER = r"""import json, os, sys, time
t0 = time.process_time()
from ansible.plugins.loader import action_loader, init_plugin_loader
init_plugin_loader([sys.argv[1]])
action_loader.get("kubegpu.fleet.audit_node", class_only=True)
t1 = time.process_time()
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.catalog import load
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit import evaluate
ctx = {"nvidia": {"present": True, "driver_version": "570.172.08", "gpu_count": 1,
                  "probe": {"status": "ok"}, "gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3"}]},
       "kubelet": {"running": True}, "api": {}, "errors": {}}
opts = {"node": "n", "api": {}, "pending_threshold": 300, "memory_min_fraction": 0.8, "skip": [], "expected_gpus": None}
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    c0 = time.process_time()
    task_catalog = load.for_task(None)
    c1 = time.process_time()
    evaluate.evaluate("n", dict(ctx, catalog=task_catalog.entries), opts)
    c2 = time.process_time()
    os.write(w, json.dumps({"catalog_s": c1 - c0, "evaluation_s": c2 - c1}).encode())
    os._exit(0)
os.close(w)
child = json.loads(os.read(r, 4096))
os.waitpid(pid, 0)
json.dump(dict(child, main_load_class_s=t1 - t0, main_catalog_loads=load.LOADS["bundled"]), sys.stdout)
"""


def worker_costs(reps=5):
    """Median CPU seconds: loading the action class in the main process (imports and the catalog),
    then, in a worker forked from it, the task's catalog and one node's evaluation."""
    runs = []
    for _i in range(reps):
        out = subprocess.run([benchlib.PYTHON, "-c", WORKER, benchlib.COLLECTIONS], check=True,
                             stdout=subprocess.PIPE, universal_newlines=True).stdout
        runs.append(json.loads(out))
    return dict((k, benchlib.median([r[k] for r in runs])) for k in runs[0])


def profile_summary(path):
    """``{"total_s", "areas": [[area, s, share]], "top": [[function, tottime s, cumtime s]]}`` of a
    CPU-clock profile."""
    stats = pstats.Stats(path)
    areas, rows, total = {}, [], 0.0
    for (filename, line, func), (_cc, _nc, tt, ct, _callers) in stats.stats.items():
        total += tt
        area = area_of(filename)
        areas[area] = areas.get(area, 0.0) + tt
        rows.append(("%s:%d(%s)" % (filename.split("site-packages/")[-1], line, func), tt, ct))
    rows.sort(key=lambda r: -r[1])
    return {"total_s": total,
            "areas": [[a, s, s / total if total else 0.0] for a, s in sorted(areas.items(), key=lambda kv: -kv[1])],
            "top": [list(r) for r in rows[:TOP]]}


def run(ctx):
    nodes = ctx.get("nodes", 20)
    reps = ctx.get("reps", 2)
    scratch = benchlib.scratch("audit-floor")
    try:
        with benchlib.Lab(ctx.get("lab_name", "bench"), audit_throughput.PROFILE, nodes) as lab:
            r = audit_throughput.Runner(lab, nodes, scratch)
            # warm-up on one node (bytecode caches, collection loading); not recorded
            r.run("audit", {}, targets="gpu_nodes[0]", label="warmup-audit")
            r.run("ping", {}, targets="gpu_nodes[0]", label="warmup-ping")
            fixed_ping = r.run("ping", {}, targets="kubegpu_bench_no_host", label="ping-0-nodes")
            fixed_audit = r.run("audit", {}, targets="kubegpu_bench_no_host", label="audit-0-nodes")
            pings, audits = [], []
            for i in range(reps):
                pings.append(r.run("ping", {}, label="ping-%d" % i))
                audits.append(r.run("audit", {}, label="audit-%d" % i))
            prof_path = os.path.join(scratch, "audit-main.prof")
            profiled = r.run("audit", {}, label="audit-profiled", profile=prof_path)
            prof = profile_summary(prof_path)
            up_s = lab.up_s
        cold = worker_costs()
    finally:
        benchlib.rmtree(scratch)

    def med(rs, key):
        return benchlib.median([x[key] for x in rs])

    def side(rs, fixed):
        cpu, main = med(rs, "cpu_s"), med(rs, "main_cpu_s")
        return {"wall_s": med(rs, "wall_s"), "cpu_s": cpu, "main_cpu_s": main, "cpu_per_node_s": cpu / nodes,
                "fixed_cpu_s": fixed["cpu_s"], "fixed_main_cpu_s": fixed["main_cpu_s"],
                "marginal_cpu_per_node_s": max(cpu - fixed["cpu_s"], 0.0) / nodes,
                "marginal_main_per_node_s": max(main - fixed["main_cpu_s"], 0.0) / nodes,
                "marginal_workers_per_node_s": max((cpu - main) - (fixed["cpu_s"] - fixed["main_cpu_s"]), 0.0) / nodes,
                "runs": [dict((k, x[k]) for k in ("wall_s", "cpu_s", "main_cpu_s")) for x in rs]}

    a, p = side(audits, fixed_audit), side(pings, fixed_ping)
    ratio = a["cpu_per_node_s"] / p["cpu_per_node_s"]
    # per added node (the slope from no node to every node): what a fleet of thousands pays per node,
    # where the fixed part of each playbook run (startup, the audit's cluster pass and report) is spread thin
    ratio_marginal = a["marginal_cpu_per_node_s"] / p["marginal_cpu_per_node_s"]
    extra = a["cpu_per_node_s"] - p["cpu_per_node_s"]
    parts = {
        "fixed (cluster pass, report, catalog; amortised per node)":
            (a["fixed_cpu_s"] - p["fixed_cpu_s"]) / nodes,
        "per node, ansible-playbook's main process (strategy, templating, variables)":
            a["marginal_main_per_node_s"] - p["marginal_main_per_node_s"],
        "per node, workers (connection, module transfer and run, the evaluating action plugin)":
            a["marginal_workers_per_node_s"] - p["marginal_workers_per_node_s"],
    }
    # the same two measured lines (fixed part + slope) at other fleet sizes: a projection, not a run
    projected = dict((str(n), (a["fixed_cpu_s"] + n * a["marginal_cpu_per_node_s"]) /
                      (p["fixed_cpu_s"] + n * p["marginal_cpu_per_node_s"])) for n in PROJECT_AT)
    return {"part": "audit_floor", "title": TITLE, "nodes": nodes, "reps": reps, "lab_up_s": up_s,
            "projected_ratio": projected,
            "settings": dict(audit_throughput.RECOMMENDED, forks=nodes), "audit": a, "ping": p,
            "ratio_cpu_per_node": ratio, "extra_cpu_per_node_s": extra,
            "extra_parts": [[k, v, v / extra if extra > 0 else None] for k, v in parts.items()],
            "goal": {"goal": GOAL_RATIO, "value": ratio, "met": ratio <= GOAL_RATIO},
            "ratio_marginal": ratio_marginal,
            "goal_marginal": {"goal": GOAL_RATIO, "value": ratio_marginal, "met": ratio_marginal <= GOAL_RATIO},
            "worker": cold,
            "profile": dict(prof, run={"wall_s": profiled["wall_s"], "cpu_s": profiled["cpu_s"],
                                       "main_cpu_s": profiled["main_cpu_s"]})}


def summary(r):
    a, p = r["audit"], r["ping"]
    lines = ["audit %.3f s controller CPU per node vs ansible.builtin.ping %.3f s over the same %d nodes: %.2fx "
             "(goal <= %.1fx: %s)" % (a["cpu_per_node_s"], p["cpu_per_node_s"], r["nodes"], r["ratio_cpu_per_node"],
                                      r["goal"]["goal"], "met" if r["goal"]["met"] else "NOT met"),
             "per added node (no node -> %d nodes): audit %.3f s vs ping %.3f s: %.2fx (%s); fixed per run: audit %.2f s, "
             "ping %.2f s" % (r["nodes"], a["marginal_cpu_per_node_s"], p["marginal_cpu_per_node_s"], r["ratio_marginal"],
                              "met" if r["goal_marginal"]["met"] else "NOT met", a["fixed_cpu_s"], p["fixed_cpu_s"])]
    if r.get("projected_ratio"):
        lines.append("  projected from the fixed part and the slope: " + ", ".join(
            "%s nodes %.2fx" % (size, v) for size, v in sorted(r["projected_ratio"].items(), key=lambda kv: int(kv[0]))))
    for what, s, share in r["extra_parts"]:
        lines.append("  the rest: %-90s %.3f s/node%s" % (what, s, "" if share is None else " (%.0f%%)" % (100 * share)))
    c = r.get("worker")
    if c:
        lines.append("  per worker: the catalog %.4f s, one node's evaluation %.4f s (the catalog read %d time(s), in the "
                     "main process, %.3f s with the imports)" % (c["catalog_s"], c["evaluation_s"],
                                                                 c["main_catalog_loads"], c["main_load_class_s"]))
    lines.append("  main process profile (CPU clock): " + ", ".join(
        "%s %.0f%%" % (area, 100 * share) for area, _s, share in r["profile"]["areas"][:5]))
    return lines


def render(r):
    a, p, n = r["audit"], r["ping"], r["nodes"]
    out = ["%d lab nodes (`bench/lab-profile.yml`), recommended settings (forks %d, pipelining, ControlPersist), "
           "median of %d runs each, ping and audit alternated in the same lab." % (n, n, r["reps"]), ""]
    rows = [["`ansible.builtin.ping`", "%.1f" % p["wall_s"], "%.1f" % p["cpu_s"], "%.3f" % p["cpu_per_node_s"],
             "%.1f" % p["fixed_cpu_s"], "%.3f" % p["marginal_main_per_node_s"],
             "%.3f" % p["marginal_workers_per_node_s"]],
            ["`kubegpu.fleet.audit`", "%.1f" % a["wall_s"], "%.1f" % a["cpu_s"], "**%.3f**" % a["cpu_per_node_s"],
             "%.1f" % a["fixed_cpu_s"], "%.3f" % a["marginal_main_per_node_s"],
             "%.3f" % a["marginal_workers_per_node_s"]]]
    out.append(benchlib.md_table(["playbook", "wall s", "controller CPU s", "CPU s/node", "fixed CPU s (no host)",
                                  "main process s/node", "workers s/node"], rows))
    out += ["", "Goal: the audit at most %.1fx the ping floor per node. Over these %d nodes (each run's CPU / %d): "
            "**%.2fx (%s)**. Per added node (the slope from no node to %d nodes, what a fleet of thousands pays per "
            "node; the fixed part of a run - ansible-playbook's startup, the audit's cluster pass, report and catalog - "
            "is %.1f s for the audit and %.1f s for ping): **%.2fx (%s)**, %.3f s against %.3f s." % (
                r["goal"]["goal"], n, n, r["ratio_cpu_per_node"], "met" if r["goal"]["met"] else "not met", n,
                a["fixed_cpu_s"], p["fixed_cpu_s"], r["ratio_marginal"],
                "met" if r["goal_marginal"]["met"] else "not met", a["marginal_cpu_per_node_s"],
                p["marginal_cpu_per_node_s"]),
            ""]
    if r.get("projected_ratio"):
        out += ["Projected, not measured: the same fixed parts and per-node slopes at larger fleets (the whole fleet in one ansible-playbook run) give "
                + ", ".join("%s nodes **%.2fx**" % (size, v) for size, v in
                            sorted(r["projected_ratio"].items(), key=lambda kv: int(kv[0])))
                + ". An AWX slice of a few hundred nodes pays the fixed part once per slice.", ""]
    out += ["What the %.3f s per node above the floor is spent on:" % r["extra_cpu_per_node_s"], ""]
    out.append(benchlib.md_table(["", "CPU s/node", "share"], [
        [what, "%.3f" % s, "-" if share is None else "%.0f%%" % (100 * share)] for what, s, share in r["extra_parts"]]))
    c = r.get("worker")
    if c:
        out += ["", "Of the workers' part: ansible-playbook's strategy loads the audit_node action plugin's class in the "
                "main process before it forks a worker per node, and that import reads and validates the bundled "
                "catalog (%d read, %.3f s with the imports, once per run). A worker forked from there spends %.4f s "
                "on its task's catalog and %.4f s evaluating one lab-like node (one GPU, R570): the rest of a "
                "worker's share is ansible's own per task - templating the task's options, the module's transfer "
                "and run, the result." % (c["main_catalog_loads"], c["main_load_class_s"], c["catalog_s"],
                                          c["evaluation_s"])]
    prof = r["profile"]
    out += ["", "ansible-playbook's main process of one more audit run under cProfile with a CPU clock "
            "(%.1f s profiled; the profiler slows it, so shares, not seconds):" % prof["total_s"], ""]
    out.append(benchlib.md_table(["area", "share"], [[area, "%.0f%%" % (100 * share)]
                                                     for area, _s, share in prof["areas"]]))
    out += ["", benchlib.md_table(["function (most own CPU)", "own s", "cumulative s"],
                                  [["`%s`" % f, "%.2f" % tt, "%.2f" % ct] for f, tt, ct in prof["top"]])]
    return "\n".join(out)
