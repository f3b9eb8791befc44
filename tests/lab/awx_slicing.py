"""AWX job slicing as the sliced-audit lab tests reproduce it (test_audit_sliced_fleet.py against the
API double, test_audit_sliced_lab.py on booted lab nodes).

AWX job slicing (ansible/awx e21dd0a): a job template with ``job_slice_count`` > 1 launches a
workflow job with one node per slice (awx/main/models/jobs.py ``JobTemplate.create_unified_job``);
slice N of M gets the inventory's enabled hosts ordered by name, ``hosts[N-1::M]``
(awx/main/models/inventory.py ``Inventory.get_sliced_hosts`` / ``get_script_data``); every slice's
extra vars carry its own ``awx_job_id`` and the slicing workflow's ``awx_workflow_job_id``
(awx/main/models/unified_jobs.py ``awx_meta_vars``); the next workflow node gets the slices'
``set_stats`` artifacts as extra vars (awx/main/models/workflow.py ``get_effective_artifacts``).
Each slice runs in its own pod: here its own process with an empty HOME, TMPDIR and report dir, and
its own ssh ControlPath directory, as AWX gives every job (``RunJob.build_env``:
``ANSIBLE_SSH_CONTROL_PATH_DIR=/runner/cp``, the ``cp`` directory of the job's private data dir).
"""
import collections
import json
import os
import shutil
import subprocess
import tempfile

from test_api_double import play_env

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
AUDIT = os.path.join(REPO, "playbooks", "audit.yml")
REPORT = os.path.join(REPO, "playbooks", "audit_fleet_report.yml")
REPORT_TASK = "kubegpu.fleet.audit : Write the fleet audit report"
FAIL_TASK = "kubegpu.fleet.audit : Fail on GPU nodes the audit did not see or on findings at or above critical"
# what says how a finding or node changed since the previous run (it differs from run to run)
CHANGE_KEYS = ("first_seen", "known_days", "change", "previous_run", "resolved")


def awx_slices(hosts, count):
    """AWX's partition: enabled hosts ordered by name, slice N (1-based) = hosts[N-1::count]."""
    ordered = sorted(hosts)
    return [ordered[n - 1::count] for n in range(1, count + 1)]


def job(tmp_path, proc, label, playbook, inventory, extra_vars):
    """One AWX job: its own process, empty HOME and TMPDIR, its own report dir. ``proc`` is what
    the AWX Kubernetes credential points at (anything with a ``kubeconfig``), or None."""
    from lib.ansible_runner import AnsibleRunner, ensure_collection_tree  # tests/ is on sys.path
    pod = tmp_path / label
    for sub in ("home", "tmp", "report", "work"):
        (pod / sub).mkdir(parents=True)
    runner = AnsibleRunner(REPO, ensure_collection_tree(REPO), str(pod / "work"))
    # a short path (a unix socket's is at most 107 bytes; the job's directory under pytest's tmp is long)
    control = tempfile.mkdtemp(prefix="awx-cp-")
    env = dict(play_env(pod / "tmp"), HOME=str(pod / "home"), ANSIBLE_SHOW_CUSTOM_STATS="1", ANSIBLE_PIPELINING="1",
               ANSIBLE_SSH_CONTROL_PATH_DIR=control)
    if proc is not None:   # the AWX Kubernetes credential injects K8S_AUTH_*
        env["K8S_AUTH_KUBECONFIG"] = proc.kubeconfig
    ev = dict({"kubegpu_audit_report_dir": str(pod / "report"), "kubegpu_audit_formats": ["json", "prometheus"],
               "kubegpu_audit_xid": False, "kubegpu_audit_store": "kubernetes", "kubegpu_audit_group_label": "pool"},
              **extra_vars)
    try:
        res = runner.playbook(playbook, inventory=inventory, env=env, extra_vars=ev, timeout=900)
    finally:
        stop_control_masters(control)
    report = None
    path = pod / "report" / "kubegpu-audit.json"
    if path.exists():
        report = json.loads(path.read_text())
    return res, report, pod


def stop_control_masters(control):
    """End the ssh connection masters a job left (ControlPersist outlives ansible-playbook) and
    remove their directory: the pod is gone when the job ends."""
    for name in sorted(os.listdir(control)):
        subprocess.run(["ssh", "-o", "ControlPath=" + os.path.join(control, name), "-O", "exit", "kubegpu-job"],
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=30, check=False)
    shutil.rmtree(control)


def sliced_run(tmp_path, proc, hosts, inventory_for, label, workflow_id, first_job_id, count=3, extra_vars=None):
    """The sliced job (``count`` slices over AWX's partition of ``hosts``) and the report step over
    every host; ``inventory_for(path, hosts)`` writes an inventory of those hosts to path.
    (slice results, report step result, report)."""
    extra_vars = extra_vars or {}
    slices = []
    for n, part in enumerate(awx_slices(hosts, count), 1):
        inv = inventory_for(str(tmp_path / ("%s-slice%d.json" % (label, n))), part)
        res, report, _pod = job(tmp_path, proc, "%s-slice%d" % (label, n), AUDIT, inv, dict(extra_vars, **{
            "kubegpu_audit_step": "slice", "awx_job_id": first_job_id + n, "awx_workflow_job_id": workflow_id}))
        assert res.rc == 0, res.stdout[-3000:] + res.stderr[-2000:]
        assert report is None   # a slice writes no report
        slices.append(res)
    # the workflow's next node: the slices' artifacts (set_stats) are its extra vars
    artifacts = {}
    for res in slices:
        artifacts.update(res.data.get("global_custom_stats") or {})
    assert artifacts == {"kubegpu_audit_run_id": "awx-workflow-%d" % workflow_id}, artifacts
    inv = inventory_for(str(tmp_path / ("%s-report.json" % label)), hosts)
    res, report, _pod = job(tmp_path, proc, "%s-report" % label, REPORT, inv,
                            dict(extra_vars, awx_job_id=first_job_id + 10, awx_workflow_job_id=workflow_id - 1,
                                 **artifacts))
    return slices, res, report


def slice_ran_fail_task(res):
    """Whether a job ran (not skipped) the fail_on task."""
    return FAIL_TASK in [t["_task"] for t in res.tasks() if not t.get("skipped")]


def read_mark(client):
    items = client.reads(since=0)
    return max([i["seq"] for i in items] or [0])


def reads_since(client, mark):
    return list(client.reads(since=mark))


def read_counts(items):
    """{"<verb> <resource>": count} of API reads."""
    out = collections.Counter((i["verb"], i["resource"]) for i in items)
    return dict((k[0] + " " + k[1], v) for k, v in sorted(out.items()))


def node_entries(report):
    """Each node's whole entry (status, error, findings, coverage, group, ...) but what changed since
    the previous run (and, for a node not audited, the reason: it names the run)."""
    out = {}
    for n in report["nodes"]:
        e = dict((k, v) for k, v in n.items() if k not in CHANGE_KEYS)
        e["findings"] = [dict((k, v) for k, v in f.items() if k not in CHANGE_KEYS) for f in n["findings"]]
        if e["status"] == "not_audited":
            e["error"] = "not audited"
        out[n["name"]] = e
    return out


def findings_by_node(report):
    keep = ("id", "severity", "title", "evidence", "remediation", "references")
    return dict((n["name"], (n["status"], [dict((k, f.get(k)) for k in keep) for f in n["findings"]]))
                for n in report["nodes"])
