# -*- coding: utf-8 -*-
"""Bad-input corpus for the controller-side modules not covered by the node corpora
(test_bad_input_gpu.py covers audit_cluster and audit_evaluate): node_maintenance, reboot_need,
rollout_decide, remediation_plan and audit_report.

Same rules as the node corpora, through the real ``ansible-playbook`` on localhost, one play per
module with one task per input: no traceback, no hang (the runner's timeout is only a safety net),
a clear ``msg`` when the task fails, and the files the module was pointed at intact byte for byte.
"""
from __future__ import absolute_import, division, print_function

import os

from test_bad_input_gpu import (DEPTH, assert_clean, fifo, loop, nested_dict, nested_list,
                                run_cases, snapshot, sparse, write)


def _failed_with(res, cid, *words):
    assert res[cid].get("failed"), (cid, res[cid])
    for w in words:
        assert w in res[cid]["msg"], (cid, res[cid]["msg"])


# ------------------------------------------------------------------------------ node_maintenance

def test_node_maintenance_bad_inputs(ansible, tmp_path):
    """No API at all behind the connection options, malformed kubeconfigs, wrong types: every one
    a clean failure naming the problem, never a token in the output."""
    token = "sekrit-token-0123456789"
    kc_dir = tmp_path / "kc"
    bad_kc = {
        "kubeconfig_fifo": fifo(kc_dir / "fifo"),
        "kubeconfig_binary": write(kc_dir / "binary", b"\xff\xfe\x00apiVersion" + os.urandom(256)),
        "kubeconfig_empty": write(kc_dir / "empty", b""),
        "kubeconfig_nested": write(kc_dir / "nested", "[" * 5000 + "]" * 5000),
        "kubeconfig_loop": loop(kc_dir / "loop"),
        "kubeconfig_huge": sparse(kc_dir / "huge", 64 << 20),
    }
    before = snapshot(kc_dir)
    unreachable = {"host": "https://127.0.0.1:1", "api_key": token, "validate_certs": False,
                   "timeout": 5}
    cases = [(cid, {"name": "gpu-1", "kubeconfig": path}, None) for cid, path in sorted(bad_kc.items())]
    cases += [
        ("api_refused", dict(unreachable, name="gpu-1"), None),
        ("api_refused_patch", dict(unreachable, name="gpu-1", state="patched", unschedulable=True), None),
        ("name_empty", dict(unreachable, name=""), None),
        ("name_nested", dict(unreachable, name=nested_list(DEPTH)), None),
        ("state_unknown", dict(unreachable, name="gpu-1", state="rebooted"), None),
        ("timeout_1e300", dict(unreachable, name="gpu-1", state="ready", timeout=1e300), None),
        ("timeout_nan", dict(unreachable, name="gpu-1", state="ready", timeout="nan"), None),
        ("annotations_wrong_type", dict(unreachable, name="gpu-1", state="patched",
                                        annotations="kubegpu.io/x=1"), None),
        ("batch_wrong_type", dict(unreachable, name="gpu-1", state="budget", batch=nested_dict(DEPTH)), None),
        ("env_credentials_refused", {"name": "gpu-1"},
         {"K8S_AUTH_HOST": "https://127.0.0.1:1", "K8S_AUTH_API_KEY": token,
          "K8S_AUTH_VERIFY_SSL": "false", "HOME": str(tmp_path / "home"), "KUBECONFIG": ""}),
    ]
    res = run_cases(ansible, "node_maintenance", cases)
    for cid, _args, _env in cases:
        assert res[cid].get("failed"), (cid, res[cid])
        assert token not in repr(res[cid]), cid
    _failed_with(res, "kubeconfig_fifo", "FIFO")
    _failed_with(res, "api_refused", "read Node gpu-1", "Connection refused")
    _failed_with(res, "env_credentials_refused", "read Node gpu-1", "Connection refused")
    _failed_with(res, "state_unknown", "state")
    _failed_with(res, "timeout_1e300", "timeout must be between")
    _failed_with(res, "timeout_nan", "timeout must be between")
    assert snapshot(kc_dir) == before


# ------------------------------------------------------------------------------ reboot_need

def test_reboot_need_bad_inputs(ansible, tmp_path):
    """Hostile /boot and procfs trees on the node (here localhost), malformed Node objects and
    out-of-range options."""
    def tree(cid, boot=None, osrelease=b"6.1.0-27-amd64\n"):
        base = tmp_path / cid
        os.makedirs(str(base / "boot"))
        os.makedirs(str(base / "proc" / "sys" / "kernel"))
        if osrelease is not None:
            write(base / "proc" / "sys" / "kernel" / "osrelease", osrelease)
        for name, kind in (boot or {}).items():
            path = base / "boot" / name
            if kind == "file":
                write(path, b"")
            elif kind == "fifo":
                fifo(path)
            elif kind == "loop":
                loop(path)
            elif kind == "dir":
                os.makedirs(str(path))
        return {"boot_path": str(base / "boot"), "proc_path": str(base / "proc"),
                "check_driver": False, "sentinels": [str(base / "reboot-required")]}

    cases = [
        ("boot_empty", tree("boot_empty")),
        ("boot_missing", dict(tree("boot_missing"), boot_path=str(tmp_path / "nowhere"))),
        ("boot_fifo_and_loop", tree("boot_fifo_and_loop", {"vmlinuz-6.1.0-28-amd64": "fifo",
                                                           "vmlinuz-6.1.0-29-amd64": "loop",
                                                           "vmlinuz-6.1.0-27-amd64": "file"})),
        ("boot_non_utf8_name", tree("boot_non_utf8_name", {"vmlinuz-6.1.0-27-amd64": "file",
                                                           "vmlinuz-\udcff\udcfe": "file"})),
        ("boot_directory_kernel", tree("boot_directory_kernel", {"vmlinuz-9.9.9-1-amd64": "dir",
                                                                 "vmlinuz-6.1.0-27-amd64": "file"})),
        ("osrelease_fifo", tree("osrelease_fifo", osrelease=None)),
        ("osrelease_binary", tree("osrelease_binary", osrelease=b"\xff\x00" + os.urandom(64))),
        ("osrelease_huge", tree("osrelease_huge", osrelease=b"6" * (8 << 20))),
        ("node_malformed", dict(tree("node_malformed"), node={"metadata": "x", "spec": [1]})),
        ("node_nested", dict(tree("node_nested"), node=nested_dict(DEPTH))),
        ("mode_unknown", dict(tree("mode_unknown"), mode="sometimes")),
        ("timeout_nan", dict(tree("timeout_nan"), check_driver=True, timeout="nan")),
        ("required_reasons_wrong_type", dict(tree("required_reasons_wrong_type"), required=True,
                                             required_reasons=nested_list(DEPTH))),
    ]
    fifo(tmp_path / "osrelease_fifo" / "proc" / "sys" / "kernel" / "osrelease")
    before = snapshot(tmp_path)
    res = run_cases(ansible, "reboot_need", [(cid, dict(args, mode=args.get("mode", "needed")), None)
                                             for cid, args in cases])
    ok = res["boot_fifo_and_loop"]
    assert not ok.get("failed"), ok
    # Only the regular kernel image counts: the FIFO and the loop are not installed kernels.
    assert ok["need"]["reboot"] is False, ok["need"]
    assert not res["boot_directory_kernel"]["need"]["reboot"], res["boot_directory_kernel"]["need"]
    for cid in ("osrelease_fifo", "osrelease_huge", "mode_unknown", "timeout_nan"):
        assert res[cid].get("failed"), (cid, res[cid])
    assert snapshot(tmp_path) == before


# ------------------------------------------------------------------------------ rollout_decide

def test_rollout_decide_bad_inputs(ansible):
    node = {"metadata": {"name": "gpu-1", "labels": {}, "annotations": {}}, "spec": {}, "status": {}}
    cases = [
        ("unknown_decision", {"decision": "explode", "name": "gpu-1"}),
        ("start_node_string", {"decision": "start", "name": "gpu-1", "node": {"metadata": "oops"}}),
        ("start_node_nested", {"decision": "start", "name": "gpu-1", "node": nested_dict(DEPTH)}),
        ("start_labels_list", {"decision": "start", "name": "gpu-1",
                               "node": {"metadata": {"labels": ["kubegpu.io/maintenance=skip"]}}}),
        ("start_skip_label_malformed", {"decision": "start", "name": "gpu-1", "node": node,
                                        "skip_label": "=value-without-key"}),
        ("start_annotation_not_json", {"decision": "start", "name": "gpu-1",
                                       "node": {"metadata": {"annotations": {
                                           "kubegpu.io/maintenance": "{not json \u00ff"}}}}),
        ("drain_pods_malformed", {"decision": "drain", "name": "gpu-1", "node": node,
                                  "pods": [{"metadata": None}, {"spec": "x"}, {}]}),
        ("drain_pdbs_malformed", {"decision": "drain", "name": "gpu-1", "node": node,
                                  "pods": [], "pdbs": [{"status": "broken"}]}),
        ("validation_checks_malformed", {"decision": "validation", "name": "gpu-1", "node": node,
                                         "checks": {"gpu_facts": "not a result", "driver_guard": [1]}}),
        ("validation_checks_nested", {"decision": "validation", "name": "gpu-1", "node": node,
                                      "checks": nested_dict(DEPTH)}),
        ("timeout_wrong_type", {"decision": "start", "name": "gpu-1", "node": node, "timeout": "soon"}),
        ("timeout_nan", {"decision": "drain", "name": "gpu-1", "node": node, "timeout": "nan"}),
        ("uncordon_maintenance_malformed", {"decision": "uncordon", "name": "gpu-1", "node": node,
                                            "maintenance": {"unschedulable_before": "perhaps"}}),
    ]
    res = run_cases(ansible, "rollout_decide", [(cid, args, None) for cid, args in cases])
    _failed_with(res, "unknown_decision", "decision")
    _failed_with(res, "timeout_wrong_type", "timeout")
    _failed_with(res, "timeout_nan", "timeout must be between")
    # A malformed maintenance record must never turn into an uncordon of a node it cannot vouch for.
    unc = res["uncordon_maintenance_malformed"]
    assert unc.get("failed") or not (unc.get("decision") or {}).get("uncordon"), unc


# ------------------------------------------------------------------------------ remediation_plan

def test_remediation_plan_bad_inputs(ansible):
    good = {"node": "gpu-1", "status": "audited", "findings": []}
    cases = [
        ("audit_empty", {"audit": {}}),
        ("audit_status_unknown", {"audit": {"node": "gpu-1", "status": "exploded"}}),
        ("findings_string", {"audit": dict(good, findings="driver.known_bad")}),
        ("findings_malformed", {"audit": dict(good, findings=[None, 1, "x", {"id": None},
                                                              {"id": "no.such.finding"}])}),
        ("findings_nested", {"audit": dict(good, findings=[nested_dict(DEPTH)])}),
        ("remediation_malformed", {"audit": dict(good, findings=[
            {"id": "driver.known_bad", "severity": "critical", "remediation": "upgrade"}])}),
        ("non_utf8_node", {"audit": dict(good, node="gpu-\u00ff")}),
        ("skip_unknown", {"audit": good, "skip_findings": ["no.such.finding"]}),
        ("skip_wrong_type", {"audit": good, "skip_findings": nested_dict(3)}),
        ("audit_wrong_type", {"audit": "gpu-1"}),
        ("audit_missing", {}),
    ]
    res = run_cases(ansible, "remediation_plan", [(cid, args, None) for cid, args in cases])
    _failed_with(res, "skip_unknown", "no.such.finding")
    _failed_with(res, "audit_missing", "audit")
    # Nothing the plan does not understand becomes an action on the node.
    for cid in ("audit_empty", "audit_status_unknown", "findings_malformed"):
        plan = res[cid].get("plan") or {}
        assert res[cid].get("failed") or not (plan.get("roles") or plan.get("reboot")), (cid, plan)


# ------------------------------------------------------------------------------ audit_report

def test_audit_report_bad_inputs(ansible, tmp_path):
    out = tmp_path / "reports"
    os.makedirs(str(out))
    dest_fifo = fifo(tmp_path / "dest-fifo" / "kubegpu-audit.json")
    blocker = write(tmp_path / "blocker", b"a file where a directory should be")
    before = snapshot(tmp_path)
    # Hosts with malformed audit records, set the way the audit role sets them (a fact per host).
    facts = {"kubegpu_audit": {"status": "audited", "node": "gpu-1",
                               "findings": [None, {"id": 1, "severity": "apocalyptic"}, "x"]}}
    play_vars = {"kubegpu_node_name": "gpu-\u00ff"}
    cases = [
        ("hosts_wrong_type", {"hosts": "localhost", "dest": str(out / "a")}),
        ("hosts_nested", {"hosts": nested_list(DEPTH), "dest": str(out / "b")}),
        ("dest_is_a_fifo_dir", {"hosts": ["localhost"], "dest": os.path.dirname(dest_fifo)}),
        ("dest_under_a_file", {"hosts": ["localhost"], "dest": os.path.join(blocker, "sub")}),
        ("formats_unknown", {"hosts": ["localhost"], "dest": str(out / "c"), "formats": ["pdf"]}),
        ("fail_on_unknown", {"hosts": ["localhost"], "dest": str(out / "d"), "fail_on": "always"}),
        ("cluster_findings_malformed", {"hosts": ["localhost"], "dest": str(out / "e"),
                                        "cluster_findings": [{"id": None}, {"severity": []}]}),
        ("run_nested", {"hosts": ["localhost"], "dest": str(out / "f"), "run": nested_dict(DEPTH),
                        "fail_on": "never"}),
        ("version_non_utf8", {"hosts": ["localhost"], "dest": str(out / "g"),
                              "collection_version": "0.1.0-\u00ff", "fail_on": "never"}),
        ("malformed_host_record", {"hosts": ["localhost"], "dest": str(out / "h"), "fail_on": "never"}),
    ]
    tasks = [{"name": "set malformed audit record", "ansible.builtin.set_fact": facts}]
    for cid, args in cases:
        tasks.append({"name": cid, "kubegpu.fleet.audit_report": args, "ignore_errors": True})
    res = ansible.playbook([{"hosts": "localhost", "gather_facts": False, "vars": play_vars,
                             "tasks": tasks}],
                           env={"ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.json"}, timeout=600)
    got = {}
    for cid, _args in cases:
        got[cid] = res.task(cid)
        assert_clean(cid, got[cid])
    for cid in ("hosts_wrong_type", "formats_unknown", "fail_on_unknown", "dest_is_a_fifo_dir",
                "dest_under_a_file"):
        assert got[cid].get("failed"), (cid, got[cid])
    # The FIFO where the JSON report would go is never opened for writing (that would block).
    after = snapshot(tmp_path)
    for path, kind in before.items():
        assert after.get(path) == kind, path
