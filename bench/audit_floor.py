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


# What an ansible worker pays before the audit_node action evaluates a node: ansible forks a worker
# per host and task from a main process that never imported the evaluation nor loaded the catalog,
# so each worker imports and loads them afresh (a per-process cache helps no other worker).
COLD_START = """import json, sys, time
t0 = time.process_time()
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit import evaluate
t1 = time.process_time()
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.catalog import load
load.catalog_entries(None)
t2 = time.process_time()
load.catalog_entries(None)
t3 = time.process_time()
json.dump({"import_evaluation_s": t1 - t0, "load_catalog_s": t2 - t1, "load_catalog_again_s": t3 - t2}, sys.stdout)
"""


def cold_start(reps=5):
    """Median CPU seconds a fresh process spends importing the evaluation and loading the catalog."""
    runs = []
    for _i in range(reps):
        out = subprocess.run([benchlib.PYTHON, "-c", COLD_START], env=dict(os.environ, PYTHONPATH=benchlib.COLLECTIONS),
                             check=True, stdout=subprocess.PIPE, universal_newlines=True).stdout
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
        cold = cold_start()
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
    extra = a["cpu_per_node_s"] - p["cpu_per_node_s"]
    parts = {
        "fixed (cluster pass, report, catalog; amortised per node)":
            (a["fixed_cpu_s"] - p["fixed_cpu_s"]) / nodes,
        "per node, ansible-playbook's main process (strategy, templating, variables)":
            a["marginal_main_per_node_s"] - p["marginal_main_per_node_s"],
        "per node, workers (connection, module transfer and run, the evaluating action plugin)":
            a["marginal_workers_per_node_s"] - p["marginal_workers_per_node_s"],
    }
    return {"part": "audit_floor", "title": TITLE, "nodes": nodes, "reps": reps, "lab_up_s": up_s,
            "settings": dict(audit_throughput.RECOMMENDED, forks=nodes), "audit": a, "ping": p,
            "ratio_cpu_per_node": ratio, "extra_cpu_per_node_s": extra,
            "extra_parts": [[k, v, v / extra if extra > 0 else None] for k, v in parts.items()],
            "goal": {"goal": GOAL_RATIO, "value": ratio, "met": ratio <= GOAL_RATIO},
            "worker_cold_start": cold,
            "profile": dict(prof, run={"wall_s": profiled["wall_s"], "cpu_s": profiled["cpu_s"],
                                       "main_cpu_s": profiled["main_cpu_s"]})}


def summary(r):
    a, p = r["audit"], r["ping"]
    lines = ["audit %.3f s controller CPU per node vs ansible.builtin.ping %.3f s over the same %d nodes: %.2fx "
             "(goal <= %.1fx: %s)" % (a["cpu_per_node_s"], p["cpu_per_node_s"], r["nodes"], r["ratio_cpu_per_node"],
                                      r["goal"]["goal"], "met" if r["goal"]["met"] else "NOT met")]
    for what, s, share in r["extra_parts"]:
        lines.append("  the rest: %-90s %.3f s/node%s" % (what, s, "" if share is None else " (%.0f%%)" % (100 * share)))
    c = r.get("worker_cold_start")
    if c:
        lines.append("  of the workers' part, every worker imports the evaluation (%.3f s) and loads the catalog (%.3f s) "
                     "afresh" % (c["import_evaluation_s"], c["load_catalog_s"]))
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
    out += ["", "Goal: the audit at most %.1fx the ping floor per node: **%.2fx (%s)**. What the %.3f s per node "
            "above the floor is spent on:" % (r["goal"]["goal"], r["ratio_cpu_per_node"],
                                              "met" if r["goal"]["met"] else "not met", r["extra_cpu_per_node_s"]), ""]
    out.append(benchlib.md_table(["", "CPU s/node", "share"], [
        [what, "%.3f" % s, "-" if share is None else "%.0f%%" % (100 * share)] for what, s, share in r["extra_parts"]]))
    c = r.get("worker_cold_start")
    if c:
        out += ["", "Of the workers' part: ansible forks a worker per host and task from a main process that never "
                "imported the audit's evaluation nor loaded the known-bad catalog, so every worker does both afresh - "
                "%.3f s importing the evaluation (measured in a fresh process: an upper bound, a worker has ansible "
                "imported already) and %.3f s loading the catalog (%.3f s once loaded: the per-process cache helps no "
                "other worker), together at most %.0f%% of the workers' %.3f s per node above the floor." % (
                    c["import_evaluation_s"], c["load_catalog_s"], c["load_catalog_again_s"],
                    100 * (c["import_evaluation_s"] + c["load_catalog_s"]) / max(
                        r["audit"]["marginal_workers_per_node_s"] - r["ping"]["marginal_workers_per_node_s"], 1e-9),
                    r["audit"]["marginal_workers_per_node_s"] - r["ping"]["marginal_workers_per_node_s"])]
    prof = r["profile"]
    out += ["", "ansible-playbook's main process of one more audit run under cProfile with a CPU clock "
            "(%.1f s profiled; the profiler slows it, so shares, not seconds):" % prof["total_s"], ""]
    out.append(benchlib.md_table(["area", "share"], [[area, "%.0f%%" % (100 * share)]
                                                     for area, _s, share in prof["areas"]]))
    out += ["", benchlib.md_table(["function (most own CPU)", "own s", "cumulative s"],
                                  [["`%s`" % f, "%.2f" % tt, "%.2f" % ct] for f, tt, ct in prof["top"]])]
    return "\n".join(out)
