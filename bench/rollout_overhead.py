# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Part 3: rollout overhead - kubegpu.fleet.rolling_reboot against the floor of the same run.

One 6-node lab (bench/rollout-profile.yml: one or two GPUs per node, the device plugin
DaemonSet, a ReplicaSet-owned GPU pod per node). One warm-up run with kubegpu_reboot=needed
(nothing is pending, so it touches nothing: the plan and the per-node checks only), then the
measured rollout: kubegpu_max_unavailable 2, kubegpu_max_parallel 0 (budget only: batches of
2), kubegpu_reboot always, every other variable at the role's default, the collection's
recommended Ansible settings (forks = nodes, pipelining, ControlPersist).

Everything is measured from the run itself:
  API history (the double's record of every write, with every node's Ready/bootID after it):
    cordon      the role's patch spec.unschedulable=true of the node
    ready       first entry after the cordon where the node is Ready with a bootID other than
                the one it had at the cordon (the kubelet of the new boot posted Ready)
    plugin      first device plugin pod on the node reported Ready after `ready`
    uncordon    the role's patch spec.unschedulable=false
  Ansible timeline (a callback written into the scratch dir: start/end of every task per host):
    drained     end of the role's "only DaemonSet and mirror pods are left" check
    reboot      start and end of ansible.builtin.reboot; end of the "Ready with a new boot ID" wait
    validated   end of the validation's last check
Batches are the nodes cordoned together (a node cordoned after a batch member was uncordoned
starts the next batch); they are checked against the plan's `serial`.

floor   = the ideal schedule of the nodes' own work (cordon -> ready: drain, shutdown, boot, kubelet
          registration) for the budget's 2 slots, max(longest, total / 2): the rollout is a sliding
          window (a node starts when a slot frees), so no batch boundary is in the floor
rollout = first cordon -> last uncordon (API); the playbook's wall time adds the plan, the
          per-node checks and Ansible's start and end
overhead = rollout / floor - 1 (goal <= 15 %)
tasks per node = task executions the callback saw start on the node in the measured run (its
          `need` check before the plan, skipped tasks and includes counted; goal <= 20), and the
          same for the warm-up run where nothing is pending
A second floor, cordon -> device plugin Ready (the node is fit for GPU work, which validation
waits for), is reported beside it.
"""
import json
import os
import sys
import time

import benchlib

sys.path.insert(0, os.path.join(benchlib.REPO, "lab"))
from kubegpu_lab.apidouble.control import DoubleClient  # noqa: E402  pylint: disable=wrong-import-position

TITLE = "Rollout overhead (rolling_reboot, 6 nodes, max_unavailable 2)"
PROFILE = os.path.join(benchlib.HERE, "rollout-profile.yml")
NODES = 6
GOAL_OVERHEAD = 0.15
GOAL_TASKS_PER_NODE = 20   # task executions per node in the whole playbook (issue 12)
PLAYBOOK = "kubegpu.fleet.rolling_reboot"
ROLLOUT_VARS = {"kubegpu_max_unavailable": 2, "kubegpu_max_parallel": 0, "kubegpu_reboot": "always"}
PLUGIN_DS = "nvidia-device-plugin-daemonset"
ROLE_UA = "OpenAPI-Generator/"   # the kubernetes Python client behind kubernetes.core

# Task names (suffix after "role : ") whose per-host timestamps give the phases.
T_DRAINED = "Wait until only DaemonSet and mirror pods are left on the node"
T_REBOOT = "Reboot the node"
T_READY_WAIT = "Wait until the Node is Ready with a new boot ID"
T_VALIDATED = "Wait until the device plugin is Ready and the GPU resources are back on the Node"
T_PLAN = "Plan the rollout"

TIMELINE_CALLBACK = '''
from __future__ import absolute_import, division, print_function
__metaclass__ = type
import json
import os
import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: rollout_timeline
type: aggregate
short_description: bench - start and end time of every task on every host, as JSON lines
description: [written by bench/rollout_overhead.py into its scratch directory]
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "rollout_timeline"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super(CallbackModule, self).__init__(*args, **kwargs)
        self._out = open(os.environ["BENCH_TIMELINE"], "a")

    def _write(self, **rec):
        rec["t"] = time.time()
        self._out.write(json.dumps(rec, default=str) + "\\n")
        self._out.flush()

    def v2_runner_on_start(self, host, task):
        self._write(ev="start", host=host.get_name(), task=task.get_name())

    def _end(self, ev, result):
        rec = dict(ev=ev, host=result._host.get_name(), task=result._task.get_name(),
                   attempts=result._result.get("attempts"), changed=result._result.get("changed"),
                   polls=result._result.get("polls"))
        plan = (result._result.get("ansible_facts") or {}).get("kubegpu_rollout")
        if isinstance(plan, dict):
            rec["plan"] = {"serial": plan.get("serial"), "hosts": plan.get("hosts")}
        self._write(**rec)

    def v2_runner_on_ok(self, result):
        self._end("ok", result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._end("failed", result)

    def v2_runner_on_skipped(self, result):
        self._end("skipped", result)

    def v2_runner_on_unreachable(self, result):
        self._end("unreachable", result)

    def v2_runner_retry(self, result):
        self._write(ev="retry", host=result._host.get_name(), task=result._task.get_name())
'''


def _body(entry):
    try:
        return json.loads(entry.get("body") or "{}")
    except ValueError:
        return {}


def _unschedulable_patch(entry, value):
    """The role's cordon (value True) / uncordon (value False) of a node."""
    if entry["resource"] != "nodes" or entry["verb"] != "patch" or entry.get("subresource"):
        return False
    if entry["actor"] != "api" or not (entry.get("user_agent") or "").startswith(ROLE_UA):
        return False
    if not entry.get("changed") or entry.get("code", 200) >= 300:
        return False
    body = _body(entry)
    if isinstance(body, list):   # RFC 6902 JSON patch (kubegpu.fleet.node_maintenance)
        return any(op.get("op") in ("add", "replace") and op.get("path") == "/spec/unschedulable"
                   and op.get("value") is value for op in body if isinstance(op, dict))
    return isinstance(body, dict) and (body.get("spec") or {}).get("unschedulable") is value


def _load_timeline(path):
    """{host: {task suffix: {start, end, attempts, retries}}} (last occurrence) and the plan."""
    tl, plan = {}, None
    with open(path) as f:
        for line in f:
            rec = json.loads(line)
            task = rec["task"].split(" : ", 1)[-1]
            slot = tl.setdefault(rec["host"], {}).setdefault(task, {"retries": 0, "runs": 0})
            if rec["ev"] == "start":
                slot["start"] = rec["t"]
                slot["runs"] += 1
            elif rec["ev"] == "retry":
                slot["retries"] += 1
            else:
                slot["end"] = rec["t"]
                slot["status"] = rec["ev"]
                if rec.get("polls"):   # an in-process wait (node_maintenance): its checks past the first
                    slot["retries"] += int(rec["polls"]) - 1
                if rec.get("plan"):
                    plan = rec["plan"]
    return tl, plan


def _task_count(tl, host):
    return sum(v["runs"] for v in tl.get(host, {}).values())


def analyse(history, timeline, plan, nodes):
    """Per-node phases, batches, floor and overhead from the API history and the timeline."""
    per = {}
    for e in history:
        for name in nodes:
            if _unschedulable_patch(e, True) and e["name"] == name and "cordon" not in per.get(name, {}):
                per.setdefault(name, {})["cordon"] = e["ts"]
                per[name]["boot_before"] = ((e.get("nodes") or {}).get(name) or {}).get("bootID")
            if _unschedulable_patch(e, False) and e["name"] == name:
                per.setdefault(name, {})["uncordon"] = e["ts"]
    missing = [n for n in nodes if "cordon" not in per.get(n, {}) or "uncordon" not in per.get(n, {})]
    if missing:
        raise RuntimeError("no cordon/uncordon by the role in the API history for %s" % ", ".join(missing))
    for name in nodes:
        p = per[name]
        for e in history:
            if e["ts"] < p["cordon"]:
                continue
            snap = (e.get("nodes") or {}).get(name) or {}
            if "ready" not in p and snap.get("ready") == "True" and snap.get("bootID") \
                    and snap.get("bootID") != p["boot_before"]:
                p["ready"] = e["ts"]
                p["boot_after"] = snap["bootID"]
            obj = e.get("object") or {}
            if "ready" in p and "plugin" not in p and e["resource"] == "pods" and obj.get("nodeName") == name \
                    and (e.get("name") or "").startswith(PLUGIN_DS) and obj.get("ready") in (True, "True") \
                    and not obj.get("deletionTimestamp"):
                p["plugin"] = e["ts"]
        # the node's pods gone: the kubelet's confirming DELETE of every pod the role evicted there
        evicted = set(e["name"] for e in history if e["ts"] >= p["cordon"] and e["resource"] == "pods"
                      and e["verb"] == "evict" and e.get("code", 200) < 300
                      and (e.get("object") or {}).get("nodeName") == name)
        gone = dict((e["name"], e["ts"]) for e in reversed(history)
                    if e["ts"] >= p["cordon"] and e["resource"] == "pods" and e["verb"] == "delete"
                    and e["name"] in evicted and e.get("code", 200) < 300)
        p["pods_gone"] = max(gone.values()) if evicted and set(gone) == evicted else None
        if "ready" not in p:
            raise RuntimeError("%s never came back Ready with a new bootID in the API history" % name)
        p.setdefault("plugin", None)
        t = timeline.get(name, {})

        def at(task, key, p=p, t=t):
            v = t.get(task, {}).get(key)
            return v if v is not None else None
        p.update(drained=at(T_DRAINED, "end"), reboot_start=at(T_REBOOT, "start"), reboot_end=at(T_REBOOT, "end"),
                 ready_seen=at(T_READY_WAIT, "end"), validated=at(T_VALIDATED, "end"),
                 ready_polls=t.get(T_READY_WAIT, {}).get("retries", 0) + 1,
                 validate_polls=sum(t.get(k, {}).get("retries", 0) for k in t if k.startswith("Wait until")
                                    and k not in (T_READY_WAIT, T_DRAINED)),
                 tasks=_task_count(timeline, name))
    # batches: cordon order; a node cordoned after a member of the current batch was uncordoned
    # opens the next batch (the linear strategy runs each task for the whole batch)
    order = sorted(nodes, key=lambda n: per[n]["cordon"])
    batches = []
    for name in order:
        if batches and per[name]["cordon"] < min(per[m]["uncordon"] for m in batches[-1]):
            batches[-1].append(name)
        else:
            batches.append([name])
    t0 = per[order[0]]["cordon"]

    def d(a, b):
        return None if a is None or b is None else b - a

    out_batches = []
    for i, members in enumerate(batches):
        first = min(per[n]["cordon"] for n in members)
        last = max(per[n]["uncordon"] for n in members)
        floor = max(per[n]["ready"] - per[n]["cordon"] for n in members)
        plugin = [per[n]["plugin"] - per[n]["cordon"] for n in members if per[n]["plugin"]]
        nxt = min(per[n]["cordon"] for n in batches[i + 1]) if i + 1 < len(batches) else None
        rows = []
        for n in members:
            p = per[n]
            rows.append({
                "node": n, "cordon_at_s": p["cordon"] - t0,
                "cordon_to_drained_s": d(p["cordon"], p["drained"]),
                "drained_to_reboot_s": d(p["drained"], p["reboot_start"]),
                "reboot_to_ready_s": d(p["reboot_start"], p["ready"]),
                "reboot_module_s": d(p["reboot_start"], p["reboot_end"]),
                "ready_to_seen_s": d(p["ready"], p["ready_seen"]),
                "ready_to_plugin_s": d(p["ready"], p["plugin"]),
                "seen_to_validated_s": d(p["ready_seen"], p["validated"]),
                "validated_to_uncordon_s": d(p["validated"], p["uncordon"]),
                "cordon_to_ready_s": p["ready"] - p["cordon"],
                "cordon_to_plugin_s": d(p["cordon"], p["plugin"]),
                "cordon_to_uncordon_s": p["uncordon"] - p["cordon"],
                "cordon_to_pods_gone_s": d(p["cordon"], p["pods_gone"]),
                # the node's own work only: its pods gone after the cordon + reboot issued -> Ready
                "node_work_s": (d(p["cordon"], p["pods_gone"]) + d(p["reboot_start"], p["ready"])
                                if p["pods_gone"] and p["reboot_start"] else None),
                "ready_polls": p["ready_polls"], "validate_retries": p["validate_polls"], "tasks": p["tasks"],
                "new_boot_id": p["boot_after"] != p["boot_before"],
            })
        work = [x["node_work_s"] for x in rows if x["node_work_s"] is not None]
        out_batches.append({
            "nodes": members, "span_s": last - first, "floor_s": floor,
            "floor_node_work_s": max(work) if len(work) == len(rows) else None,
            "floor_plugin_s": max(plugin) if len(plugin) == len(members) else None,
            "gap_to_next_s": (nxt - last) if nxt is not None else None,
            "cordon_spread_s": max(per[n]["cordon"] for n in members) - first,
            "rows": rows})
    total = max(per[n]["uncordon"] for n in nodes) - t0
    own = [per[n]["ready"] - per[n]["cordon"] for n in nodes]
    floor = max(own + [sum(own) / float(ROLLOUT_VARS["kubegpu_max_unavailable"])])
    floor_plugin = (sum(b["floor_plugin_s"] for b in out_batches)
                    if all(b["floor_plugin_s"] is not None for b in out_batches) else None)
    floor_work = (sum(b["floor_node_work_s"] for b in out_batches)
                  if all(b["floor_node_work_s"] is not None for b in out_batches) else None)
    serial = (plan or {}).get("serial")
    return {"floor_node_work_s": floor_work,
            "overhead_node_work": (total / floor_work - 1) if floor_work else None,
            "batches": out_batches, "rollout_s": total, "floor_s": floor, "floor_plugin_s": floor_plugin,
            "overhead": total / floor - 1, "overhead_plugin": (total / floor_plugin - 1) if floor_plugin else None,
            "plan_serial": serial, "plan_hosts": (plan or {}).get("hosts"),
            "batches_match_plan": serial is None or [len(b["nodes"]) for b in out_batches] == list(serial),
            "first_cordon_ts": t0}


def _wait_settled(client, nodes, timeout=180):
    """Every node Ready and schedulable, its GPU pod Running, its plugin pod Ready."""
    deadline = time.monotonic() + timeout
    why = "?"
    while time.monotonic() < deadline:
        objs = client.state()["objects"]
        ready = dict((n["metadata"]["name"], any(c["type"] == "Ready" and c["status"] == "True"
                                                 for c in n["status"].get("conditions", [])))
                     for n in objs.get("nodes", []))
        running = set(p["spec"].get("nodeName") for p in objs.get("pods", [])
                      if p["metadata"]["name"].startswith("train-") and p["status"].get("phase") == "Running")
        plugin = set(p["spec"].get("nodeName") for p in objs.get("pods", [])
                     if p["metadata"]["name"].startswith(PLUGIN_DS)
                     and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", [])))
        bad = [n for n in nodes if not ready.get(n) or n not in running or n not in plugin]
        if not bad:
            return
        why = ", ".join(bad)
        time.sleep(2)
    raise RuntimeError("lab not settled after %d s: %s" % (timeout, why))


def run(ctx):
    scratch = benchlib.scratch("rollout")
    lab_name = ctx.get("lab_name", "bench") + "-rollout"
    try:
        with open(os.path.join(scratch, "rollout_timeline.py"), "w") as f:
            f.write(TIMELINE_CALLBACK)
        with benchlib.Lab(lab_name, PROFILE, NODES) as lab:
            client = DoubleClient.from_state_dir(os.path.join(lab.dir, "api"))
            nodes = sorted(lab.status["nodes"]) if isinstance(lab.status.get("nodes"), dict) else None
            if not nodes:
                nodes = sorted(n["name"] for n in client.state()["objects"]["nodes"])
            _wait_settled(client, nodes)

            def play(tag, extra):
                cp_dir = os.path.join(scratch, "cp-" + tag)
                os.makedirs(cp_dir)
                timeline = os.path.join(scratch, tag + ".jsonl")
                open(timeline, "w").close()
                env = benchlib.ansible_env(
                    ANSIBLE_FORKS=len(nodes), ANSIBLE_PIPELINING=True, ANSIBLE_TIMEOUT=30,
                    ANSIBLE_SSH_ARGS="-C -o ControlMaster=auto -o ControlPersist=60s",
                    ANSIBLE_SSH_CONTROL_PATH_DIR=cp_dir, ANSIBLE_CALLBACK_PLUGINS=scratch,
                    ANSIBLE_CALLBACKS_ENABLED="rollout_timeline", BENCH_TIMELINE=timeline)
                variables = dict(extra, kubegpu_kubeconfig=lab.kubeconfig)
                logfile = os.path.join(scratch, tag + ".log")
                cmd = [os.path.join(benchlib.VENV_BIN, "ansible-playbook"), "-i", lab.inventory,
                       "-e", json.dumps(variables), PLAYBOOK]
                res = benchlib.measured(cmd, env=env, logfile=logfile)
                if res["rc"] != 0:
                    with open(logfile) as f:
                        raise RuntimeError("rolling_reboot %s failed (rc %d):\n%s" % (tag, res["rc"], f.read()[-5000:]))
                benchlib.log("rolling_reboot %-8s wall %6.1f s  controller CPU %6.1f s"
                             % (tag, res["wall_s"], res["cpu_s"]))
                return res, timeline

            # warm-up: nothing pending, kubegpu_reboot=needed -> plan and checks only, no change
            noop, noop_tl_path = play("noop", dict(ROLLOUT_VARS, kubegpu_reboot="needed"))
            noop_timeline, _plan = _load_timeline(noop_tl_path)
            since = max([e["seq"] for e in client.history(nodes=False)] or [0])
            boot_before = dict((n["metadata"]["name"], n["status"]["nodeInfo"]["bootID"])
                               for n in client.state()["objects"]["nodes"])
            res, tl_path = play("rollout", ROLLOUT_VARS)
            history = [e for e in client.history(since=since) if e["seq"] > since]
            boot_after = dict((n["metadata"]["name"], n["status"]["nodeInfo"]["bootID"])
                              for n in client.state()["objects"]["nodes"])
            timeline, plan = _load_timeline(tl_path)
            up_s = lab.up_s
    finally:
        if os.environ.get("BENCH_KEEP_SCRATCH"):
            benchlib.log("scratch kept: %s" % scratch)
        else:
            benchlib.rmtree(scratch)
    not_rebooted = [n for n in nodes if boot_after.get(n) == boot_before.get(n)]
    if not_rebooted:
        raise RuntimeError("not rebooted by the rollout: %s" % ", ".join(not_rebooted))
    a = analyse(history, timeline, plan, nodes)
    worst = max(len(e.get("unavailable_gpu_nodes") or []) for e in history)
    a.update({
        "part": "rollout_overhead", "title": TITLE, "nodes": len(nodes), "lab_up_s": up_s,
        "vars": ROLLOUT_VARS, "playbook_wall_s": res["wall_s"], "playbook_cpu_s": res["cpu_s"],
        "playbook_main_cpu_s": res["main_cpu_s"], "noop_wall_s": noop["wall_s"], "noop_cpu_s": noop["cpu_s"],
        "overhead_playbook": res["wall_s"] / a["floor_s"] - 1,
        "tasks_per_node": dict((n, _task_count(timeline, n)) for n in nodes),
        "noop_tasks_per_node": dict((n, _task_count(noop_timeline, n)) for n in nodes),
        "max_unavailable_gpu_nodes_seen": worst,
        "goal": {"overhead": GOAL_OVERHEAD, "value": a["overhead"], "met": a["overhead"] <= GOAL_OVERHEAD},
    })
    worst_tasks = max(a["tasks_per_node"].values())
    a["goal_tasks"] = {"tasks_per_node": GOAL_TASKS_PER_NODE, "value": worst_tasks,
                       "met": worst_tasks <= GOAL_TASKS_PER_NODE}
    return a


def _f(v, fmt="%.1f"):
    return "-" if v is None else fmt % v


def _sources(r):
    """Where the time above the floor goes, summed over batches (slowest node per phase)."""
    after_ready, validate, uncordon, gaps, spread = 0.0, 0.0, 0.0, 0.0, 0.0
    for b in r["batches"]:
        slow = max(b["rows"], key=lambda x: x["cordon_to_uncordon_s"])
        after_ready += slow["ready_to_seen_s"] or 0.0
        validate += slow["seen_to_validated_s"] or 0.0
        uncordon += slow["validated_to_uncordon_s"] or 0.0
        gaps += b["gap_to_next_s"] or 0.0
        spread += b["span_s"] - (slow["cordon_to_uncordon_s"])
    return [("Ready -> the role sees it (ansible.builtin.reboot reconnecting with its back-off, then the Ready wait)",
             after_ready),
            ("validation (rollout_node_check: gpu_facts, driver_guard, checkpoint_sync over ssh in one task; "
             "plugin pod and allocatable in one in-process wait; the verdict)", validate),
            ("validated -> uncordon (one resourceVersion-guarded patch: uncordon + annotations)", uncordon),
            ("between batches (last uncordon -> next batch's cordon: role start, Node read, budget check, cordon + "
             "annotation in one patch)", gaps),
            ("cordon spread inside a batch", spread)]


def summary(r):
    g = r["goal"]
    lines = [
        "rolling_reboot of %d nodes (max_unavailable 2, batches %s): rollout %.1f s (first cordon -> last uncordon), "
        "playbook %.1f s wall, %.1f s controller CPU"
        % (r["nodes"], "/".join(str(len(b["nodes"])) for b in r["batches"]), r["rollout_s"], r["playbook_wall_s"],
           r["playbook_cpu_s"]),
        "floor (ideal schedule of the nodes' cordon -> Ready with new bootID, 2 slots): %.1f s; overhead rollout/floor - 1 = "
        "%.0f %% (goal <= %.0f %%: %s); playbook/floor - 1 = %.0f %%"
        % (r["floor_s"], 100 * r["overhead"], 100 * g["overhead"], "met" if g["met"] else "NOT met",
           100 * r["overhead_playbook"]),
    ]
    if r.get("floor_plugin_s"):
        lines.append("floor to device plugin Ready (node fit for GPU work): %.1f s; overhead against it %.0f %%"
                     % (r["floor_plugin_s"], 100 * r["overhead_plugin"]))
    if r.get("floor_node_work_s"):
        lines.append("stricter floor, the node's own work only (cordon -> its pods gone, + reboot issued -> Ready): "
                     "%.1f s; overhead against it %.0f %%" % (r["floor_node_work_s"], 100 * r["overhead_node_work"]))
    gt = r["goal_tasks"]
    lines.append("task executions per node: at most %d (goal <= %d: %s; %s); nothing pending: at most %d"
                 % (gt["value"], gt["tasks_per_node"], "met" if gt["met"] else "NOT met",
                    ", ".join("%s %d" % (n, c) for n, c in sorted(r["tasks_per_node"].items())),
                    max(r["noop_tasks_per_node"].values())))
    for i, b in enumerate(r["batches"]):
        slow = max(b["rows"], key=lambda x: x["cordon_to_ready_s"])
        lines.append("batch %d %s: span %.1f s, floor %.1f s (%s: cordon->drained %s, drained->reboot %s, "
                     "reboot->Ready %s, Ready->seen %s, seen->validated %s, validated->uncordon %s)%s"
                     % (i + 1, ",".join(b["nodes"]), b["span_s"], b["floor_s"], slow["node"],
                        _f(slow["cordon_to_drained_s"]), _f(slow["drained_to_reboot_s"]),
                        _f(slow["reboot_to_ready_s"]), _f(slow["ready_to_seen_s"]),
                        _f(slow["seen_to_validated_s"]), _f(slow["validated_to_uncordon_s"]),
                        ("; %.1f s to the next batch" % b["gap_to_next_s"]) if b["gap_to_next_s"] is not None else ""))
    top = sorted(_sources(r), key=lambda x: -x[1])
    lines.append("above the floor: " + "; ".join("%s %.1f s" % (k.split(" (")[0], v) for k, v in top))
    lines.append("plan serial %s, batches from the history match: %s; max GPU nodes unavailable seen %d"
                 % (r["plan_serial"], r["batches_match_plan"], r["max_unavailable_gpu_nodes_seen"]))
    return lines


def render(r):
    g = r["goal"]
    out = ["%d lab nodes (`bench/rollout-profile.yml`: 1-2 GPUs each, device plugin DaemonSet, a ReplicaSet-owned "
           "GPU pod per node), lab booted in %.0f s. `ansible-playbook kubegpu.fleet.rolling_reboot -e "
           "kubegpu_max_unavailable=2 -e kubegpu_max_parallel=0 -e kubegpu_reboot=always`, every other variable at "
           "the role's default, forks %d, pipelining, ControlPersist. A run with nothing pending (plan and checks "
           "only) took %.1f s." % (r["nodes"], r["lab_up_s"] or 0, r["nodes"], r["noop_wall_s"]), ""]
    out.append(benchlib.md_table(["what", "s", "vs floor"], [
        ["floor: ideal schedule, max(longest, total / 2 slots), of the nodes' cordon -> Ready with a new bootID (API history)",
         "%.1f" % r["floor_s"], "1.00x"],
        ["floor to device plugin Ready on the node (API history)", _f(r.get("floor_plugin_s")),
         ("%.2fx" % (r["floor_plugin_s"] / r["floor_s"])) if r.get("floor_plugin_s") else "-"],
        ["stricter floor: the node's own work only (cordon -> its evicted pods gone, + reboot issued -> Ready), "
         "slowest per batch", _f(r.get("floor_node_work_s")),
         ("%.2fx" % (r["floor_node_work_s"] / r["floor_s"])) if r.get("floor_node_work_s") else "-"],
        ["**rollout: first cordon -> last uncordon (API history)**", "%.1f" % r["rollout_s"],
         "**%.2fx**" % (r["rollout_s"] / r["floor_s"])],
        ["whole `ansible-playbook` wall time", "%.1f" % r["playbook_wall_s"],
         "%.2fx" % (r["playbook_wall_s"] / r["floor_s"])],
    ]))
    out += ["", "Goal: overhead (rollout / floor - 1) <= %.0f %%: **%.0f %% (%s)**; against the device-plugin floor "
            "%s, against the node's own work %s; the whole playbook %.0f %%. Controller CPU of the run: %.1f s. "
            "Batches %s (plan `serial` %s); at "
            "most %d GPU nodes were unavailable at once."
            % (100 * g["overhead"], 100 * r["overhead"], "met" if g["met"] else "not met",
               ("%.0f %%" % (100 * r["overhead_plugin"])) if r.get("overhead_plugin") is not None else "-",
               ("%.0f %%" % (100 * r["overhead_node_work"])) if r.get("overhead_node_work") is not None else "-",
               100 * r["overhead_playbook"], r["playbook_cpu_s"],
               " / ".join(",".join(b["nodes"]) for b in r["batches"]), r["plan_serial"],
               r["max_unavailable_gpu_nodes_seen"]), ""]
    rows = []
    for i, b in enumerate(r["batches"]):
        for x in b["rows"]:
            rows.append(["%d" % (i + 1), x["node"], _f(x["cordon_to_drained_s"]), _f(x["drained_to_reboot_s"]),
                         _f(x["reboot_to_ready_s"]), _f(x["ready_to_seen_s"]), _f(x["seen_to_validated_s"]),
                         _f(x["validated_to_uncordon_s"]), "**%.1f**" % x["cordon_to_ready_s"],
                         _f(x["cordon_to_uncordon_s"]), "%d" % x["tasks"]])
        rows.append(["%d" % (i + 1), "batch: span %.1f, floor %.1f" % (b["span_s"], b["floor_s"]), "", "", "", "",
                     "", "", "", "gap to next %s" % _f(b["gap_to_next_s"]), ""])
    out.append(benchlib.md_table(["batch", "node", "cordon -> drained", "drained -> reboot issued",
                                  "reboot -> Ready (API)", "Ready -> role sees it", "-> validated",
                                  "validated -> uncordon", "cordon -> Ready", "cordon -> uncordon", "tasks"], rows))
    gt = r["goal_tasks"]
    out += ["", "Task executions per node in the whole playbook (its `need` check, the maintenance; skipped "
            "tasks and includes count): at most **%d** (goal <= %d: %s); with nothing pending at most %d."
            % (gt["value"], gt["tasks_per_node"], "met" if gt["met"] else "not met",
               max(r["noop_tasks_per_node"].values()))]
    polls = sum(x["ready_polls"] - 1 + x["validate_retries"] for b in r["batches"] for x in b["rows"])
    out += ["", "Seconds; `tasks`: task executions the node went through (its `need` check before the plan "
            "included). The role's waits (Ready, NVML, module, checkpoint, plugin, allocatable) checked again %d "
            "times in all, so their poll intervals cost %s here; the rest is task executions: the node probes over "
            "ssh (a module run each), the in-process API calls of `kubegpu.fleet.node_maintenance` (the kubernetes "
            "client's configuration and REST layer loaded in each task's worker) and Ansible's own cost per task."
            % (polls, "nothing" if polls == 0 else "at most %d poll delays" % polls)]
    out += ["", "Time above the floor, slowest node of each batch, summed: "
            + "; ".join("%s %.1f s" % (k, v) for k, v in sorted(_sources(r), key=lambda x: -x[1])) + "."]
    return "\n".join(out)


if __name__ == "__main__":
    res = run({"lab_name": "bench-dev3"})
    print("\n".join(summary(res)))
