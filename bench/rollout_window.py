# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Part 3b: the sliding window on a heterogeneous fleet - rolling_reboot against the ideal schedule.

One 6-node lab (bench/rollout-hetero-profile.yml: firmware POST of 0 to 40 s before a rebooted
node boots again, so reboot -> Ready differs by more than 3x between nodes). One rollout:
kubegpu_max_unavailable 2, kubegpu_max_parallel 0, kubegpu_reboot always, kubegpu_budget_poll 1
(the slot wait's poll sets how soon a node starts after a slot frees), forks = nodes + 1,
pipelining, ControlPersist; every other variable at the role's default.

From the API double's history:
  node work   each node's cordon -> uncordon by the role (drain, reboot, POST, validation,
              uncordon: what the node costs the budget)
  rollout     first cordon -> last uncordon
  ideal       max(longest node work, total node work / slots): no schedule of the same nodes
              with the same budget can be shorter
  serial      the `serial` batch floor of the same nodes: the plan's batches in its order, each
              as long as its slowest node's work (what the linear strategy with `serial` gives
              at best)
Goal: rollout within 10 % of the ideal, and shorter than the serial floor. Also checked: no
more than 2 GPU nodes unavailable at any entry of the history, every node rebooted.
"""
import json
import os
import sys

import benchlib

sys.path.insert(0, os.path.join(benchlib.REPO, "lab"))
from kubegpu_lab.apidouble.control import DoubleClient  # noqa: E402  pylint: disable=wrong-import-position

TITLE = "Sliding window on a heterogeneous fleet (rolling_reboot, 6 nodes, max_unavailable 2)"
PROFILE = os.path.join(benchlib.HERE, "rollout-hetero-profile.yml")
NODES = 6
SLOTS = 2
GOAL = 0.10
PLAYBOOK = "kubegpu.fleet.rolling_reboot"
ROLLOUT_VARS = {"kubegpu_max_unavailable": SLOTS, "kubegpu_max_parallel": 0, "kubegpu_reboot": "always",
                "kubegpu_budget_poll": 1}
ROLE_UA = "OpenAPI-Generator/"
PLAN_TASK = "Plan the rollout"


def _unschedulable_patch(entry, value):
    if entry["resource"] != "nodes" or entry["verb"] != "patch" or entry.get("subresource"):
        return False
    if entry["actor"] != "api" or not (entry.get("user_agent") or "").startswith(ROLE_UA):
        return False
    if not entry.get("changed") or (entry.get("code") or 200) >= 300:
        return False
    try:
        body = json.loads(entry.get("body") or "{}")
    except ValueError:
        return False
    return isinstance(body, list) and any(
        isinstance(op, dict) and op.get("op") in ("add", "replace") and op.get("path") == "/spec/unschedulable"
        and op.get("value") is value for op in body)


def schedule(history, nodes):
    """Per node: cordon, Ready with a new bootID, uncordon (epoch seconds) from the history."""
    per = {}
    for e in history:
        name = e.get("name")
        if name in nodes and _unschedulable_patch(e, True) and "cordon" not in per.get(name, {}):
            per.setdefault(name, {})["cordon"] = e["ts"]
            per[name]["boot_before"] = ((e.get("nodes") or {}).get(name) or {}).get("bootID")
        if name in nodes and _unschedulable_patch(e, False):
            per.setdefault(name, {})["uncordon"] = e["ts"]
    missing = [n for n in nodes if "cordon" not in per.get(n, {}) or "uncordon" not in per.get(n, {})]
    if missing:
        raise RuntimeError("no cordon/uncordon by the role in the API history for %s" % ", ".join(missing))
    for name in nodes:
        p = per[name]
        for e in history:
            snap = (e.get("nodes") or {}).get(name) or {}
            if e["ts"] >= p["cordon"] and snap.get("ready") == "True" and snap.get("bootID") \
                    and snap.get("bootID") != p["boot_before"]:
                p["ready"] = e["ts"]
                break
        if "ready" not in p:
            raise RuntimeError("%s never came back Ready with a new bootID" % name)
    return per


LEASES = "leases.coordination.k8s.io"


def handovers(history):
    """Slot handovers from the history: for each slot Lease created after a slot was given back
    (the nodes all wait from the start: forks = nodes + 1), the time from the oldest slot given
    back and not taken again (the Lease deleted after a node's uncordon) to the create. What the
    slot wait's poll (or a watch) decides; the first SLOTS creates had free slots waiting."""
    gaps, freed = [], []
    for e in history:
        if e.get("resource") != LEASES or e.get("actor") != "api" or (e.get("code") or 0) >= 300 or \
                not (e.get("name") or "").startswith("kubegpu-rollout-slot-"):
            continue
        if e["verb"] == "delete":
            freed.append(e["ts"])
        elif e["verb"] == "create" and freed:
            gaps.append(e["ts"] - freed.pop(0))
    return gaps


def greedy_floor(work, order, slots=SLOTS):
    """The rollout of the same nodes' work when each node, in ``order``, takes the first slot that
    frees with no handover time at all: what the sliding window can reach in the plan's order
    (the ideal bound may need another order)."""
    free = [0.0] * slots
    end = 0.0
    for name in order:
        start = min(free)
        free[free.index(start)] = start + work[name]
        end = max(end, start + work[name])
    return end


def analyse(history, nodes, plan_hosts, serial):
    per = schedule(history, nodes)
    work = dict((n, per[n]["uncordon"] - per[n]["cordon"]) for n in nodes)
    reboot = dict((n, per[n]["ready"] - per[n]["cordon"]) for n in nodes)
    t0 = min(per[n]["cordon"] for n in nodes)
    rollout = max(per[n]["uncordon"] for n in nodes) - t0
    ideal = max(list(work.values()) + [sum(work.values()) / float(SLOTS)])
    order = [h for h in (plan_hosts or sorted(nodes)) if h in nodes]
    batches, rest = [], list(order)
    for size in serial or [SLOTS]:
        if not rest:
            break
        batches.append(rest[:size])
        rest = rest[size:]
    while rest:
        batches.append(rest[:SLOTS])
        rest = rest[SLOTS:]
    serial_floor = sum(max(work[n] for n in b) for b in batches)
    worst = max(len(e.get("unavailable_gpu_nodes") or []) for e in history)
    gaps = handovers(history)
    greedy = greedy_floor(work, order)
    return {"per_node": dict((n, {"start_s": per[n]["cordon"] - t0, "work_s": work[n], "cordon_to_ready_s": reboot[n]})
                             for n in nodes),
            "rollout_s": rollout, "ideal_s": ideal, "serial_floor_s": serial_floor, "serial_batches": batches,
            "vs_ideal": rollout / ideal - 1, "vs_serial": rollout / serial_floor - 1,
            "reboot_spread": max(reboot.values()) / min(reboot.values()),
            "max_unavailable_gpu_nodes_seen": worst,
            "handover_s": {"count": len(gaps), "mean": sum(gaps) / len(gaps) if gaps else None,
                           "max": max(gaps) if gaps else None, "total": sum(gaps)},
            "start_order": sorted(nodes, key=lambda n: per[n]["cordon"]), "plan_order": order,
            "greedy_floor_s": greedy, "vs_greedy": rollout / greedy - 1,
            "goal": {"vs_ideal": GOAL, "met": rollout / ideal - 1 <= GOAL and rollout < serial_floor}}


def run(ctx):
    scratch = benchlib.scratch("rollout-window")
    lab_name = ctx.get("lab_name", "bench") + "-window"
    try:
        with benchlib.Lab(lab_name, PROFILE, NODES) as lab:
            client = DoubleClient.from_state_dir(os.path.join(lab.dir, "api"))
            nodes = sorted(n["metadata"]["name"] for n in client.state()["objects"]["nodes"])
            import rollout_overhead   # pylint: disable=import-outside-toplevel
            rollout_overhead._wait_settled(client, nodes)   # pylint: disable=protected-access
            since = max([e["seq"] for e in client.history(nodes=False)] or [0])
            boots = dict((n["metadata"]["name"], n["status"]["nodeInfo"]["bootID"])
                         for n in client.state()["objects"]["nodes"])
            env = benchlib.ansible_env(ANSIBLE_FORKS=len(nodes) + 1, ANSIBLE_PIPELINING=True, ANSIBLE_TIMEOUT=30,
                                       ANSIBLE_SSH_ARGS="-C -o ControlMaster=auto -o ControlPersist=60s",
                                       ANSIBLE_SSH_CONTROL_PATH_DIR=scratch)
            logfile = os.path.join(scratch, "rollout.log")
            variables = dict(ROLLOUT_VARS, kubegpu_kubeconfig=lab.kubeconfig)
            cmd = [os.path.join(benchlib.VENV_BIN, "ansible-playbook"), "-i", lab.inventory, "-e",
                   json.dumps(variables), PLAYBOOK, "-v"]
            res = benchlib.measured(cmd, env=env, logfile=logfile)
            with open(logfile) as f:
                text = f.read()
            if res["rc"] != 0:
                raise RuntimeError("rolling_reboot failed (rc %d):\n%s" % (res["rc"], text[-5000:]))
            history = [e for e in client.history(since=since) if e["seq"] > since]
            after = dict((n["metadata"]["name"], n["status"]["nodeInfo"]["bootID"])
                         for n in client.state()["objects"]["nodes"])
            plan = _plan_from_log(text)
            up_s = lab.up_s
    finally:
        if os.environ.get("BENCH_KEEP_SCRATCH"):
            benchlib.log("scratch kept: %s" % scratch)
        else:
            benchlib.rmtree(scratch)
    not_rebooted = [n for n in nodes if after.get(n) == boots.get(n)]
    if not_rebooted:
        raise RuntimeError("not rebooted by the rollout: %s" % ", ".join(not_rebooted))
    a = analyse(history, nodes, plan.get("hosts"), plan.get("serial"))
    a.update({"part": "rollout_window", "title": TITLE, "nodes": len(nodes), "lab_up_s": up_s, "vars": ROLLOUT_VARS,
              "playbook_wall_s": res["wall_s"], "playbook_cpu_s": res["cpu_s"], "plan_window": plan.get("window")})
    return a


def _plan_from_log(text):
    """The plan fact from the -v output of the plan task (hosts, serial, window)."""
    marker = text.find('"kubegpu_rollout": {')
    if marker < 0:
        return {}
    start = text.find("{", marker + len('"kubegpu_rollout": ') - 1)
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                try:
                    return json.loads(text[start:i + 1])
                except ValueError:
                    return {}
    return {}


def summary(r):
    g = r["goal"]
    lines = ["rolling_reboot of %d heterogeneous nodes (reboot cordon -> Ready differs %.1fx), %d slots: rollout "
             "%.1f s; ideal max(longest, total/slots) %.1f s -> %+.0f %% (goal <= %.0f %%); serial batch floor %s "
             "%.1f s -> %+.0f %%; %s"
             % (r["nodes"], r["reboot_spread"], SLOTS, r["rollout_s"], r["ideal_s"], 100 * r["vs_ideal"],
                100 * GOAL, "/".join(",".join(b) for b in r["serial_batches"]), r["serial_floor_s"],
                100 * r["vs_serial"], "met" if g["met"] else "NOT met"),
             "max GPU nodes unavailable seen %d; playbook wall %.1f s" % (r["max_unavailable_gpu_nodes_seen"],
                                                                          r["playbook_wall_s"]),
             handover_line(r), "start order %s, plan order %s; the window's own floor in plan order (each node "
             "takes the first slot that frees, no handover time) %.1f s -> %+.1f %%"
             % (",".join(r["start_order"]), ",".join(r["plan_order"]), r["greedy_floor_s"], 100 * r["vs_greedy"])]
    for n, p in sorted(r["per_node"].items(), key=lambda x: x[1]["start_s"]):
        lines.append("  %s: start %+.1f s, cordon -> Ready %.1f s, node work %.1f s"
                     % (n, p["start_s"], p["cordon_to_ready_s"], p["work_s"]))
    return lines


def handover_line(r):
    h = r.get("handover_s") or {}
    if not h.get("count"):
        return "slot handovers: none measured"
    return ("slot handovers (a slot given back -> the next waiting node's Lease): %d, mean %.2f s, max %.2f s, "
            "%.1f s in all (%.1f %% of the rollout) with kubegpu_budget_poll %s s"
            % (h["count"], h["mean"], h["max"], h["total"], 100.0 * h["total"] / r["rollout_s"],
               r["vars"]["kubegpu_budget_poll"]))


def render(r):
    rows = [[n, "%.1f" % p["start_s"], "%.1f" % p["cordon_to_ready_s"], "%.1f" % p["work_s"]]
            for n, p in sorted(r["per_node"].items(), key=lambda x: x[1]["start_s"])]
    out = ["%d lab nodes (`bench/rollout-hetero-profile.yml`: firmware POST 0 to 40 s, cordon -> Ready differs "
           "%.1fx), `kubegpu_max_unavailable=2 kubegpu_max_parallel=0 kubegpu_reboot=always kubegpu_budget_poll=1`, "
           "forks %d." % (r["nodes"], r["reboot_spread"], r["nodes"] + 1), "",
           benchlib.md_table(["what", "s", "rollout vs it"], [
               ["ideal schedule: max(longest node work, total node work / 2 slots)", "%.1f" % r["ideal_s"],
                "**%+.0f %%**" % (100 * r["vs_ideal"])],
               ["`serial` batch floor of the same nodes (%s)" % " / ".join(",".join(b) for b in r["serial_batches"]),
                "%.1f" % r["serial_floor_s"], "%+.0f %%" % (100 * r["vs_serial"])],
               ["sliding window floor in the plan's order (each node takes the first slot that frees, no "
                "handover time)", "%.1f" % r["greedy_floor_s"], "%+.1f %%" % (100 * r["vs_greedy"])],
               ["**rollout: first cordon -> last uncordon**", "%.1f" % r["rollout_s"], ""],
               ["whole `ansible-playbook` wall time", "%.1f" % r["playbook_wall_s"], ""]]), "",
           "Goal: within %.0f %% of the ideal and ahead of the serial floor: **%s**. At most %d GPU nodes were "
           "unavailable at once." % (100 * GOAL, "met" if r["goal"]["met"] else "not met",
                                     r["max_unavailable_gpu_nodes_seen"]), "",
           "%s. Nodes were cordoned in the order %s; the plan's order was %s (nodes that find free slots at "
           "the same moment start together, in either order)." % (
               handover_line(r)[0].upper() + handover_line(r)[1:], ", ".join(r["start_order"]),
               ", ".join(r["plan_order"])), "",
           benchlib.md_table(["node", "started at", "cordon -> Ready", "node work (cordon -> uncordon)"], rows)]
    return "\n".join(out)
