# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Part 5: GPU repair time - a GPU reset against a reboot, on the lab.

One 2-node lab (bench/gpu-repair-profile.yml): on each node GPU 0 has a row marked for
remapping after an uncorrectable error (Xid 48) and the driver's own verdict drain-and-reset
(Xid 154). The public remediate playbook (playbooks/remediate.yml, audit -> plan -> drain ->
repair -> validate -> uncordon -> audit) runs once per node:

  reset    gr-reset as the plan has it: the drained node's GPU is reset (kubegpu.fleet.gpu_reset,
           nvidia-smi -r through the lab's fake), no reboot
  reboot   gr-reboot through the reboot path the plan falls back to when a reset is refused or
           fails (extra vars: no GPU to reset, a reboot required)

Measured from the API double's history: each node's cordon -> uncordon by the rollout (what the
repair takes the node out of service for), and the playbook's wall time. Both runs must end with
the fault gone (the final audit of remediate.yml asserts it) and only the reboot path may change
the node's boot ID. Goal: the reset path's node out-of-service time below the reboot path's.
"""
import os
import sys

import benchlib

sys.path.insert(0, os.path.join(benchlib.REPO, "lab"))
from kubegpu_lab.apidouble.control import DoubleClient  # noqa: E402  pylint: disable=wrong-import-position

TITLE = "GPU repair: a GPU reset against a reboot (remediate playbook, lab)"
PROFILE = os.path.join(benchlib.HERE, "gpu-repair-profile.yml")
NODES = 2
PLAYBOOK = os.path.join(benchlib.REPO, "playbooks", "remediate.yml")
PATHS = (("reset", "gr-reset", {}),
         ("reboot", "gr-reboot", {"kubegpu_gpu_reset_bus_ids": [], "kubegpu_reboot_required": True,
                                  "kubegpu_reboot_reasons": ["bench: the reboot path of the same repair"]}))


def _out_of_service(history, name, since):
    """(cordon, uncordon) epoch seconds of ``name`` by the rollout, after history entry ``since``."""
    import rollout_window  # pylint: disable=import-outside-toplevel
    cordon = uncordon = None
    for e in history:
        if e.get("seq", 0) <= since or e.get("name") != name:
            continue
        if cordon is None and rollout_window._unschedulable_patch(e, True):  # pylint: disable=protected-access
            cordon = e["ts"]
        elif cordon is not None and rollout_window._unschedulable_patch(e, False):  # pylint: disable=protected-access
            uncordon = e["ts"]
    if cordon is None or uncordon is None:
        raise RuntimeError("no cordon/uncordon of %s by the rollout in the API history" % name)
    return cordon, uncordon


def run(ctx):
    scratch = benchlib.scratch("gpu-repair")
    lab_name = ctx.get("lab_name", "bench") + "-repair"
    out = {"nodes": NODES, "paths": {}}
    with benchlib.Lab(lab_name, PROFILE, NODES) as lab:
        client = DoubleClient.from_state_dir(os.path.join(lab.dir, "api"))
        nodes = sorted(n["metadata"]["name"] for n in client.state()["objects"]["nodes"])
        import rollout_overhead   # pylint: disable=import-outside-toplevel
        rollout_overhead._wait_settled(client, nodes)   # pylint: disable=protected-access
        for path, node, extra in PATHS:
            boot = dict((n["metadata"]["name"], n["status"]["nodeInfo"]["bootID"])
                        for n in client.state()["objects"]["nodes"])[node]
            since = max([e["seq"] for e in client.history(nodes=False)] or [0])
            env = benchlib.ansible_env(ANSIBLE_PIPELINING=True, ANSIBLE_TIMEOUT=30)
            extra_vars = dict({"kubegpu_targets": node, "kubegpu_audit_cluster": True,
                               "kubegpu_kubeconfig": lab.kubeconfig, "kubegpu_max_unavailable": 1,
                               "kubegpu_remediate_report_dir": os.path.join(scratch, path)}, **extra)
            for sub in ("before", "after"):
                os.makedirs(os.path.join(extra_vars["kubegpu_remediate_report_dir"], sub))
            varfile = os.path.join(scratch, "%s-vars.json" % path)
            benchlib.write_json(varfile, extra_vars)
            cmd = [os.path.join(benchlib.VENV_BIN, "ansible-playbook"), "-i", lab.inventory,
                   "-e", "@" + varfile, PLAYBOOK]
            res = benchlib.measured(cmd, env=env, logfile=os.path.join(scratch, "%s.log" % path))
            if res["rc"] != 0:
                raise RuntimeError("remediate.yml (%s path) failed: see %s" % (path, scratch))
            cordon, uncordon = _out_of_service(client.history(), node, since)
            after = dict((n["metadata"]["name"], n["status"]["nodeInfo"]["bootID"])
                         for n in client.state()["objects"]["nodes"])[node]
            out["paths"][path] = {"node": node, "out_of_service_s": round(uncordon - cordon, 2),
                                  "playbook_wall_s": round(res["wall_s"], 2), "rebooted": after != boot}
    benchlib.rmtree(scratch)  # kept (with the playbook logs) when a run failed
    reset, reboot = out["paths"]["reset"], out["paths"]["reboot"]
    if reset["rebooted"] or not reboot["rebooted"]:
        raise RuntimeError("the reset path rebooted or the reboot path did not: %r" % out["paths"])
    out["speedup"] = round(reboot["out_of_service_s"] / max(reset["out_of_service_s"], 0.01), 2)
    out["goal"] = {"met": reset["out_of_service_s"] < reboot["out_of_service_s"]}
    return out


def summary(r):
    reset, reboot = r["paths"]["reset"], r["paths"]["reboot"]
    values = (reset["out_of_service_s"], reboot["out_of_service_s"], r["speedup"], reset["playbook_wall_s"],
              reboot["playbook_wall_s"], "met" if r["goal"]["met"] else "MISSED")
    return ["GPU repair: node out of service %.1f s by a GPU reset, %.1f s by a reboot (%.1fx); "
            "playbook %.1f s / %.1f s; goal %s" % values]


def render(r):
    rows = [[path, p["node"], "%.1f s" % p["out_of_service_s"], "%.1f s" % p["playbook_wall_s"],
             "yes" if p["rebooted"] else "no"] for path, p in sorted(r["paths"].items())]
    return "\n".join([
        "Same fault on two lab nodes (a row remap pending after Xid 48, the driver asking for "
        "drain-and-reset), repaired by `playbooks/remediate.yml`: by the GPU reset the plan "
        "chooses, and by the reboot path it falls back to. A rebooted lab node waits the "
        "profile's firmware POST (45 s, bench/gpu-repair-profile.yml); an nspawn node without it "
        "restarts in about a second, and both paths then take the same time (drain and "
        "validation dominate).", "",
        benchlib.md_table(["path", "node", "out of service (cordon -> uncordon)", "playbook wall", "rebooted"], rows),
        "", "Reset is %.1fx faster to put the node back in service; goal (reset < reboot): %s."
        % (r["speedup"], "met" if r["goal"]["met"] else "missed")])
