# -*- coding: utf-8 -*-
"""kubegpu.fleet.audit_node through real ansible-playbook on localhost.

Each scenario builds one node's filesystems in a temp dir - the fake libnvidia-ml.so.1 from
lab/fakes/nvml (loaded by the real pynvml inside the module) with its procfs and /dev, a
fake kubelet process (tests/fixtures/kubelet) whose --root-dir holds a device checkpoint, and
a plain copy of a cgroup v1 devices hierarchy - then runs the audit role (audit_node: every
probe of the registry and the evaluation in one task), and then each single-probe module as its
own task with the parameters the registry gave that probe, and kubegpu.fleet.audit_evaluate on
the modules' results. Every probe result and the evaluated findings must be the same.
"""
from __future__ import absolute_import, division, print_function

import json
import os
import shutil
import sys
import time

import pytest

from ansible_collections.kubegpu.fleet.plugins.module_utils.audit.probes import NAMES, REGISTRY, audit_argument_spec
from ansible_collections.kubegpu.fleet.tests.unit.plugins.module_utils.stack import test_nvidia_stack as stack

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "lab", "fakes", "nvml"))
sys.path.insert(0, os.path.join(REPO, "tests", "fixtures", "kubelet"))
import fakenvml  # noqa: E402  pylint: disable=wrong-import-position
from kubelet_fakeproc import FakeProc, fixture_path, write_script  # noqa: E402  pylint: disable=wrong-import-position

HARNESS_ENV = {"ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.json"}
V = fakenvml.DEFAULT_VERSION
POD_UID = "0f1c2d3e-4a5b-4c6d-8e9f-a0b1c2d3e4f5"
GONE = "GPU-00000000-dead-beef-0000-000000000000"
PROBES = NAMES
# Registered-result keys that say how a task ran rather than what the module found.
TASK_KEYS = ("invocation", "warnings", "deprecations", "skip_reason", "false_condition", "exception")


@pytest.fixture(scope="module")
def driver():
    return fakenvml.build(V)


class Node(object):
    """One node's filesystems under ``base``."""

    def __init__(self, base, root):
        self.base = base
        self.root = root
        self.nproc = os.path.join(base, "nvidia-proc")
        self.dev = os.path.join(base, "dev")
        self.scenario = os.path.join(base, "nvml.json")
        self.kubelet_root = os.path.join(base, "var-lib-kubelet")
        self.cgroup = os.path.join(base, "cgroup")
        self.kproc = FakeProc(os.path.join(base, "k")).path
        self.vars = {}

    def setup(self, gpus, kernel=V, checkpoint_ids=None, **scenario):
        fakenvml.write_driver_files(self.nproc, self.scenario, gpus, kernel, **scenario)
        os.makedirs(self.dev)
        if kernel:
            fakenvml.make_dev_nodes(self.dev, fakenvml.dev_nodes_for(gpus))
        # A kubelet with its own root dir and a static-CPU-manager config.
        fp = FakeProc(os.path.join(self.base, "k"))
        fp.set_meminfo(64 << 30)
        cfg = os.path.join(self.base, "kubelet-config.yaml")
        with open(fixture_path("gpu-static-config.yaml.fixture")) as src, open(cfg, "w") as dst:
            dst.write(src.read())
        fp.add_process(4242, ["/usr/bin/kubelet", "--config=%s" % cfg,
                              "--root-dir=%s" % self.kubelet_root],
                       exe=write_script(os.path.join(self.base, "kubelet-1.31.4")))
        # Device checkpoint: the node's ids plus ``checkpoint_ids`` (e.g. a GPU that is gone).
        ids = [g["uuid"] for g in gpus] + list(checkpoint_ids or [])
        ckpt = os.path.join(self.kubelet_root, "device-plugins", "kubelet_internal_checkpoint")
        os.makedirs(os.path.dirname(ckpt))
        with open(ckpt, "w") as f:
            json.dump({"Data": {"PodDeviceEntries": [
                {"PodUID": POD_UID, "ContainerName": "main", "ResourceName": "nvidia.com/gpu",
                 "DeviceIDs": {"-1": ids[:1]}, "AllocResp": ""}],
                "RegisteredDevices": {"nvidia.com/gpu": ids}}, "Checksum": 1}, f)
        # cgroup v1 devices hierarchy (plain files): one container lacks nvidia-uvm.
        pod = os.path.join(self.cgroup, "devices", "kubepods", "burstable", "pod" + POD_UID)
        for cid, rules in (("c0ffee01", "c 195:* rwm\nc %d:* rwm\n" % fakenvml.UVM_MAJOR),
                           ("c0ffee02", "c 195:0 rwm\nc 195:255 rwm\n")):
            os.makedirs(os.path.join(pod, cid))
            with open(os.path.join(pod, cid, "devices.list"), "w") as f:
                f.write(rules)
        self.vars = {
            "kubegpu_node_name": "gpu-node-1",
            "kubegpu_proc_path": self.kproc,
            "kubegpu_nvidia_proc_path": self.nproc,
            "kubegpu_dev_path": self.dev,
            "kubegpu_driver_root": self.root,
            "kubegpu_cgroup_root": self.cgroup,
            "kubegpu_cgroup_mode": "list",
            "kubegpu_gpu_probe_timeout": 10,
        }
        return self

    @property
    def env(self):
        env = dict(HARNESS_ENV)
        env["KUBEGPU_FAKE_NVML_CONFIG"] = self.scenario
        return env


@pytest.fixture
def node(tmp_path, driver):
    return Node(str(tmp_path), driver.root)


# role variable -> audit_node option, for the variables these tests set
ROLE_VARS = {"kubegpu_proc_path": "proc_path", "kubegpu_nvidia_proc_path": "nvidia_proc_path",
             "kubegpu_dev_path": "dev_path", "kubegpu_driver_root": "driver_root", "kubegpu_cgroup_root": "cgroup_root",
             "kubegpu_cgroup_mode": "cgroup_mode", "kubegpu_gpu_probe_timeout": "timeout",
             "kubegpu_kubelet_config_path": "kubelet_config_path", "kubegpu_catalog_extra": "catalog_extra",
             "kubegpu_host_root": "root"}


def _module_params(probe, play_vars, probes):
    """The parameters the registry gives ``probe`` for the audit_node run with the role
    variables ``play_vars`` (audit_node's defaults for the rest) and earlier results ``probes``
    (the internal catalog aside: the driver_guard task's own action plugin loads it)."""
    audit_params = dict((k, o.get("default")) for k, o in audit_argument_spec().items())
    audit_params.update((ROLE_VARS[k], v) for k, v in play_vars.items() if k in ROLE_VARS)
    if audit_params.get("nvidia_proc_path") is None:
        audit_params["nvidia_proc_path"] = audit_params["proc_path"]
    params = probe.params(audit_params, probes)
    params.pop("_catalog", None)
    return params


def run_both(ansible, node, **extra_vars):
    """The audit role (one audit_node task), then the five single-probe modules with the
    registry's parameters and audit_evaluate on their results; return (five, single, seconds)."""
    play_vars = dict(node.vars)
    play_vars.setdefault("kubegpu_audit_details", True)   # the probes' data, to compare with the modules'
    play_vars.update(extra_vars)
    play = [{"hosts": "localhost", "gather_facts": False, "vars": play_vars, "tasks": [
        {"name": "start", "ansible.builtin.set_fact": {"an_t0": "{{ now().timestamp() }}"}},
        {"name": "audit", "ansible.builtin.include_role": {"name": "kubegpu.fleet.audit"}},
        {"name": "dump", "ansible.builtin.debug": {"msg": {
            "audit": "{{ kubegpu_audit }}", "node": "{{ kubegpu_audit_node }}",
            "seconds": "{{ now().timestamp() - an_t0 | float }}"}}}]}]
    res = ansible.playbook(play, env=node.env)
    assert res.rc == 0, res.stdout[-3000:] + res.stderr[-3000:]
    single = res.task("dump")["msg"]
    assert single["node"].get("unreachable_node") is not True
    probes = single["node"]["probes"]

    tasks = []
    for probe in REGISTRY:
        if probes[probe.name].get("skipped"):
            continue
        tasks.append({"name": probe.name, "kubegpu.fleet.%s" % probe.name: _module_params(probe, play_vars, probes),
                      "register": "t_" + probe.name, "ignore_errors": True})
    # what a user who runs the probes as separate tasks evaluates (audit_evaluate on those results;
    # the tasks' messages equal the probes', asserted in assert_same)
    errors = dict((name, probes[name]["msg"]) for name in probes if probes[name].get("failed"))
    tasks.append({"name": "evaluate", "kubegpu.fleet.audit_evaluate": dict(
        node="{{ kubegpu_node_name }}", errors=errors, **_evaluate_args(probes))})
    play = [{"hosts": "localhost", "gather_facts": False, "vars": play_vars, "tasks": tasks + [
        {"name": "dump", "ansible.builtin.debug": {"msg": {
            "audit": "{{ kubegpu_audit }}",
            "tasks": dict((p.name, "{{ t_%s | default({}) }}" % p.name) for p in REGISTRY)}}}]}]
    res = ansible.playbook(play, env=node.env)
    assert res.rc == 0, res.stdout[-3000:] + res.stderr[-3000:]
    five = res.task("dump")["msg"]
    for name in probes:
        if probes[name].get("skipped"):
            five["tasks"][name] = dict(probes[name])  # not run as a task: the skip rule is unit-tested
    return five, single, float(single["seconds"])


def _evaluate_args(probes):
    """audit_evaluate's options (named as the registry's ctx_key) from the module tasks'
    registered results (t_<probe>), as the registry's evaluation input maps them (a failed
    probe: {} and its message in errors)."""
    out = {}
    for probe in REGISTRY:
        name, key = probe.name, probe.ctx_key
        if probes[name].get("failed"):
            out[key] = {}
        elif probes[name].get("skipped"):
            out[key] = {} if probe.facts else probes[name]
        elif probe.facts:
            out[key] = "{{ t_%s.ansible_facts.%s }}" % (name, probe.facts)
        else:
            out[key] = "{{ t_%s }}" % name
    return out


def _clean(value):
    """Drop how-the-task-ran keys and timings (recursively) so results compare by content."""
    if isinstance(value, dict):
        return dict((k, _clean(v)) for k, v in value.items()
                    if k not in TASK_KEYS and not k.startswith("_ansible")
                    and k not in ("elapsed", "age_seconds") and not (k == "failed" and v is False))
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def assert_same(five, single):
    probes = single["node"]["probes"]
    assert sorted(probes) == sorted(PROBES)
    for name in PROBES:
        task, probe = five["tasks"][name], probes[name]
        assert bool(task.get("skipped")) == bool(probe.get("skipped")), name
        assert bool(task.get("failed")) == bool(probe.get("failed")), (name, task.get("msg"), probe.get("msg"))
        assert _clean(task) == _clean(probe), name
        # What the task warned, the probe warned.
        assert task.get("warnings", []) == probe.get("warnings", []), name
    # Same findings (evidence timings such as the probe's elapsed seconds aside).
    assert _clean(five["audit"]) == _clean(single["audit"])
    assert _ids(five["audit"]) == _ids(single["audit"])
    assert single["audit"]["status"] == "audited"
    # audit_node returns the findings it set in kubegpu_audit
    assert single["node"]["findings"] == single["audit"]["findings"]
    return probes


def _ids(audit):
    return sorted(f["id"] for f in audit["findings"])


def test_healthy_node_same_results_and_findings(ansible, node):
    gpus = [fakenvml.gpu(0), fakenvml.gpu(1)]
    node.setup(gpus, checkpoint_ids=[GONE])
    five, single, _s = run_both(ansible, node)
    probes = assert_same(five, single)
    nv = probes["gpu_facts"]["ansible_facts"]["nvidia"]
    assert nv["probe"]["status"] == "ok" and nv["gpu_count"] == 2
    kl = probes["kubelet_facts"]["ansible_facts"]["kubelet"]
    assert kl["running"] and kl["root_dir"] == node.kubelet_root
    assert probes["driver_guard"]["verdict"] == "ok"
    assert probes["driver_guard"]["driver_version"] == V
    # The checkpoint the kubelet probe found, compared with the GPU probe's device ids.
    assert probes["checkpoint_sync"]["stale"] is True and probes["checkpoint_sync"]["stale_ids"] == [GONE]
    assert [b["container_id"] for b in probes["cgroup_devices"]["broken"]] == ["c0ffee02"]
    assert {"checkpoint.stale", "cgroup.devices_missing"} <= set(_ids(single["audit"]))
    assert single["node"]["failed_probes"] == []
    # what the audit saw of the node: its GPUs through the fake NVML, the driver, the kubelet
    cov = single["audit"]["coverage"]
    assert cov["status"] == "gpu_node" and "audit.not_inspected" not in _ids(single["audit"])
    assert [cov["checks"][c]["state"] for c in ("driver", "nvml", "kubelet")] == ["yes", "yes", "yes"]
    # The action plugin sets the facts gpu_facts and kubelet_facts set.
    assert single["node"]["ansible_facts"]["nvidia"] == nv


def test_the_roles_result_is_the_evaluation_and_each_probes_outcome(ansible, node):
    """kubegpu_audit_details false (the audit role's default): the node's result keeps each probe's
    outcome and kubegpu_audit - the same evaluation as with the details - and none of the probes'
    data nor their facts, about a tenth of the size a fleet's controller carries per node."""
    node.setup([fakenvml.gpu(0), fakenvml.gpu(1)], checkpoint_ids=[GONE])
    _five, full, _s = run_both(ansible, node)
    play_vars = dict(node.vars, kubegpu_audit_details=False)
    play = [{"hosts": "localhost", "gather_facts": False, "vars": play_vars, "tasks": [
        {"name": "audit", "ansible.builtin.include_role": {"name": "kubegpu.fleet.audit"}},
        {"name": "dump", "ansible.builtin.debug": {"msg": {
            "audit": "{{ kubegpu_audit }}", "node": "{{ kubegpu_audit_node }}",
            "nvidia": "{{ ansible_facts.nvidia | default('unset') }}"}}}]}]
    res = ansible.playbook(play, env=node.env)
    assert res.rc == 0, res.stdout[-3000:] + res.stderr[-3000:]
    lean = res.task("dump")["msg"]
    assert _clean(lean["audit"]) == _clean(full["audit"])
    assert {"checkpoint.stale", "cgroup.devices_missing"} <= set(_ids(lean["audit"]))
    probes = lean["node"]["probes"]
    assert sorted(probes) == sorted(PROBES)
    for name in PROBES:
        assert set(probes[name]) <= {"changed", "failed", "msg", "raised_at", "skipped", "skip_reason"}, name
        assert bool(probes[name].get("failed")) == bool(full["node"]["probes"][name].get("failed")), name
    assert "findings" not in lean["node"] and lean["nvidia"] == "unset"
    assert set(lean["node"]["ansible_facts"]) == {"kubegpu_audit"}
    assert len(json.dumps(lean["node"])) * 3 < len(json.dumps(full["node"]))


TOOLKIT_PACKAGES = [("nvidia-container-toolkit", "1.17.7-1"), ("nvidia-container-toolkit-base", "1.17.7-1"),
                    ("libnvidia-container1", "1.17.7-1"), ("libnvidia-container-tools", "1.17.7-1")]


@pytest.mark.skipif(not shutil.which("dpkg-query"), reason="needs dpkg-query")
def test_host_root_reaches_the_stack_and_driver_probes(ansible, node, tmp_path):
    """kubegpu_host_root (audit_node's root): the stack probe reads the dpkg database, config.toml
    and runtime binaries under it, the action plugin parses that config.toml on the controller,
    and driver_guard reads the same package database - as the single modules do with it."""
    node.setup([fakenvml.gpu(0)])
    root = stack.dpkg_root(tmp_path, TOOLKIT_PACKAGES, stack.MITIGATED_CDI)
    stack.put(root, "usr/bin/crun", "#!/bin/sh\n", 0o755)
    five, single, _s = run_both(ansible, node, kubegpu_host_root=str(root))
    probes = assert_same(five, single)
    tk = probes["stack_facts"]["ansible_facts"]["nvidia_stack"]["container_toolkit"]
    assert tk["installed"] is True and tk["version"] == "1.17.7"
    assert tk["config_path"] == os.path.join(str(root), "etc", "nvidia-container-runtime", "config.toml")
    # parsed on the controller from the text read under the root (mode "cdi", runtimes crun first)
    assert "config_text" not in tk and tk["config_error"] is None
    assert tk["config"]["mode"] == "cdi" and tk["injection_mode"] == "cdi" and tk["runtime"] == "crun"
    assert tk["cuda_compat_hook_disabled"] is True
    assert single["node"]["ansible_facts"]["nvidia_stack"]["container_toolkit"] == tk
    dg = probes["driver_guard"]
    assert dg["package_manager"] == "dpkg" and dg["package_query_error"] is None
    assert sorted(p["name"] for p in dg["packages"]) == sorted(n for n, _v in TOOLKIT_PACKAGES)
    # The findings are evaluated from those facts: the toolkit under the root, with the hook
    # setting its config.toml holds.
    found = dict((f["id"], f) for f in single["audit"]["findings"])
    assert found["security.container-toolkit"]["evidence"]["version"] == "1.17.7"
    assert found["security.container-toolkit"]["evidence"]["cuda_compat_hook_disabled"] is True
    assert found["defect.container-toolkit"]["evidence"]["version"] == "1.17.7"


def test_hung_nvml_init_times_out_and_skips_the_checkpoint(ansible, node):
    bad = fakenvml.build("570.148.08")
    node.root = bad.root
    node.setup([fakenvml.gpu(0, profiles=["1g.10gb"]), fakenvml.gpu(1, mig=False)],
               kernel="570.148.08", checkpoint_ids=[GONE])
    five, single, seconds = run_both(ansible, node, kubegpu_gpu_probe_timeout=1.5)
    probes = assert_same(five, single)
    nv = probes["gpu_facts"]["ansible_facts"]["nvidia"]
    assert nv["probe"]["status"] == "hung" and nv["probe"]["hung_in"] == "nvmlInit"
    assert any("hung" in w for w in probes["gpu_facts"]["warnings"])
    # No trustworthy device list: the stale check is skipped, as the role's condition does.
    assert probes["checkpoint_sync"]["skipped"] is True
    assert probes["cgroup_devices"].get("skipped") is not True
    assert probes["driver_guard"]["verdict"] in ("known_bad", "at_risk")
    assert "checkpoint.stale" not in _ids(single["audit"])


def test_node_without_gpu_skips_checkpoint_and_cgroups(ansible, node, tmp_path):
    node.setup([], kernel=None)
    empty = tmp_path / "no-driver"
    empty.mkdir()
    node.root = str(empty)
    five, single, _s = run_both(ansible, node, kubegpu_driver_root=str(empty))
    probes = assert_same(five, single)
    nv = probes["gpu_facts"]["ansible_facts"]["nvidia"]
    assert nv["probe"]["status"] == "absent" and nv["present"] is False
    assert probes["checkpoint_sync"]["skipped"] and probes["cgroup_devices"]["skipped"]
    assert probes["driver_guard"]["verdict"] == "absent"


def test_failing_probes_fail_alone(ansible, node, tmp_path):
    """A relative kubelet config path fails kubelet_facts, a bad catalog_extra fails driver_guard
    (on the controller), a missing cgroup root fails cgroup_devices; the rest still runs and the
    role records each as an error of that probe, the same way in both modes."""
    node.setup([fakenvml.gpu(0)], checkpoint_ids=[GONE])
    five, single, _s = run_both(ansible, node, kubegpu_kubelet_config_path="relative/config.yaml",
                                kubegpu_catalog_extra=[{"id": "broken-entry"}],
                                kubegpu_cgroup_root=str(tmp_path / "no-such-cgroup"))
    probes = assert_same(five, single)
    assert single["node"]["failed_probes"] == ["kubelet_facts", "driver_guard", "cgroup_devices"]
    assert "absolute path" in probes["kubelet_facts"]["msg"]
    assert "catalog_extra" in probes["driver_guard"]["msg"]
    assert probes["gpu_facts"].get("failed") is not True
    # kubelet_facts failed, so the checkpoint is looked for at the kubelet's default path.
    assert probes["checkpoint_sync"].get("failed") is not True
    assert single["node"]["ansible_facts"].keys() == {"nvidia", "kubegpu_audit", "nvidia_stack"}


def test_a_raising_probe_becomes_that_probes_error():
    """An unexpected exception in one probe is captured with where it was raised, never a
    traceback (unit level: no option combination makes the real helpers raise)."""
    from ansible_collections.kubegpu.fleet.plugins.module_utils.audit.probes import run_probe as _run_probe

    def boom(warn):
        warn("about to fail")
        raise KeyError("nvidia")

    warned = []
    res = _run_probe("kubelet_facts", boom, warned.append)
    assert res["failed"] is True and res["changed"] is False
    assert res["msg"] == "kubelet_facts probe raised KeyError: 'nvidia'"
    assert "exception" not in res
    assert res["raised_at"].startswith("test_audit_node.py:") and res["raised_at"].endswith(" in boom")
    assert res["warnings"] == warned == ["about to fail"]
    ok = _run_probe("gpu_facts", lambda warn: {"changed": False}, warned.append)
    assert ok == {"changed": False}


def test_check_mode_is_the_same(ansible, node):
    node.setup([fakenvml.gpu(0)])
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "one pass", "kubegpu.fleet.audit_node": {
            "proc_path": node.kproc, "nvidia_proc_path": node.nproc, "dev_path": node.dev,
            "driver_root": node.root, "cgroup_root": node.cgroup, "cgroup_mode": "list"}}]}]
    started = time.time()
    res = ansible.playbook(play, check=True, env=node.env)
    assert res.rc == 0, res.stdout[-2000:]
    out = res.task("one pass")
    assert out["changed"] is False and out["failed_probes"] == []
    assert out["probes"]["checkpoint_sync"]["stale"] is False
    assert time.time() - started < 120


def test_a_node_without_python_is_audited_with_every_probe_in_error(ansible, tmp_path):
    """The module cannot run at all (no Python at the interpreter path): the task still succeeds,
    each probe without a skip rule is an error, the others are skipped, and the node is recorded
    as audited with audit.module_failed findings - never dropped."""
    play = [{"hosts": "localhost", "gather_facts": False,
             "vars": {"ansible_python_interpreter": str(tmp_path / "no-python")}, "tasks": [
                 {"name": "audit", "kubegpu.fleet.audit_node": {"node": "gpu-x"}, "register": "out"},
                 {"name": "dump", "ansible.builtin.debug": {"msg": {"out": "{{ out }}", "audit": "{{ kubegpu_audit }}"}}}]}]
    res = ansible.playbook(play)
    assert res.rc == 0, res.stdout[-3000:]
    out, audit = res.task("dump")["msg"]["out"], res.task("dump")["msg"]["audit"]
    assert out["failed_probes"] == ["gpu_facts", "kubelet_facts", "driver_guard"] + [
        p.name for p in REGISTRY[5:] if p.skip({}) is None]
    assert out["probes"]["checkpoint_sync"]["skipped"] and out["probes"]["cgroup_devices"]["skipped"]
    assert audit["node"] == "gpu-x" and audit["status"] == "audited"
    failed = sorted(f["evidence"]["probe"] for f in audit["findings"] if f["id"] == "audit.module_failed")
    assert failed == sorted(out["failed_probes"])
    assert any("audit_node failed" in w for w in res.task("audit").get("warnings", []))
    # the probes saw nothing: never clean, said so once
    assert audit["coverage"]["status"] == "not_inspected"
    assert [f["id"] for f in audit["findings"]].count("audit.not_inspected") == 1


def test_bad_evaluation_options_fail_before_the_node(ansible):
    out = ansible.module("audit_node", {"node": "n", "skip": ["no.such"]})
    assert out["_rc"] != 0 and "unknown finding id(s) in skip: no.such" in out["msg"] and "probes" not in out
    out = ansible.module("audit_node", {"memory_min_fraction": "nan"})
    assert out["_rc"] != 0 and "memory_min_fraction must be a finite number" in out["msg"]


def _audit_only(ansible, node):
    play = [{"hosts": "localhost", "gather_facts": False, "vars": dict(node.vars), "tasks": [
        {"name": "audit", "ansible.builtin.include_role": {"name": "kubegpu.fleet.audit"}},
        {"name": "dump", "ansible.builtin.debug": {"msg": "{{ kubegpu_audit }}"}}]}]
    res = ansible.playbook(play, env=node.env)
    assert res.rc == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return res.task("dump")["msg"]


def test_a_vgpu_guest_is_reported_the_guest_driver_cves_and_bare_metal_is_not(ansible, tmp_path):
    """580.159.03: NVIDIA's bulletin 5861 lists CVE-2026-47519 and CVE-2026-47520 for the vGPU
    guest driver only (fixed in 580.178.04, vGPU 19.6); the data-center CVEs of 5861 hold on both."""
    drv = fakenvml.build("580.159.03")
    found = {}
    for name, gpus in (("guest", fakenvml.vgpu_guest(1)), ("metal", [fakenvml.gpu(0)])):
        node = Node(str(tmp_path / name), drv.root).setup(gpus, kernel="580.159.03")
        audit = _audit_only(ansible, node)
        (sec,) = [f for f in audit["findings"] if f["id"] == "security.driver"]
        found[name] = sec
    assert {"CVE-2026-47519", "CVE-2026-47520"} <= set(found["guest"]["evidence"]["cves"])
    assert not {"CVE-2026-47519", "CVE-2026-47520"} & set(found["metal"]["evidence"]["cves"])
    assert set(found["metal"]["evidence"]["cves"]) < set(found["guest"]["evidence"]["cves"])
    guest_only = [a for a in found["guest"]["evidence"]["advisories"] if a["id"] == "driver-cve-2026-47519"]
    assert guest_only[0]["status"] == "affected" and guest_only[0]["fixed"] == "580.178.04"


SITE_DEFECT = {
    "id": "site-570-172-hang", "kind": "defect", "title": "Site: NVML hangs on our fleet", "severity": "critical",
    "affected": [{"branch": "570", "introduced": V, "last_affected": V, "fixed": "570.195.03"}],
    "remediation": "Upgrade to 570.195.03.",
    "sources": [{"url": "https://wiki.example.invalid/gpu/nvml-hang", "verified": "2026-11-24"}]}


def test_the_catalog_overlay_is_read_by_the_action_plugin_like_catalog_extra(ansible, node, tmp_path):
    """kubegpu_catalog_overlay reaches audit_node's catalog_overlay, which its action plugin reads on the
    controller into catalog_extra: the node's driver_guard probe and the evaluation see the overlay's
    entry exactly as when the same document is given as catalog_extra."""
    node.setup([fakenvml.gpu(0)])
    doc = {"schema_version": 2, "component": "driver", "version_scheme": "driver", "entries": [SITE_DEFECT]}
    overlay = tmp_path / "overlay.yml"
    overlay.write_text(json.dumps([doc]))  # JSON is YAML: the overlay reader's format

    def site_findings(audit):
        return sorted(f["id"] for f in audit["findings"] if "site-570-172-hang" in json.dumps(f))

    plain = dict(node.vars)
    assert site_findings(_audit_only(ansible, node)) == []
    node.vars = dict(plain, kubegpu_catalog_overlay=str(overlay))
    by_overlay = _audit_only(ansible, node)
    node.vars = dict(plain, kubegpu_catalog_extra=[doc])
    by_extra = _audit_only(ansible, node)
    assert site_findings(by_overlay) == site_findings(by_extra) != []
    assert by_overlay["findings"] == by_extra["findings"]

    # the action refuses a bad overlay before the node is reached, with the lookup's messages
    out = ansible.module("audit_node", {"catalog_overlay": str(tmp_path / "never-written.yml")})
    assert out["_rc"] != 0 and "run playbooks/catalog_refresh.yml first" in out["msg"] and "probes" not in out
    overlay.write_text(json.dumps(doc))
    out = ansible.module("audit_node", {"catalog_overlay": str(overlay)})
    assert out["_rc"] != 0 and "is not a list of catalog v2 documents" in out["msg"] and "probes" not in out
    out = ansible.module("audit_node", {"catalog_overlay": str(tmp_path)})
    assert out["_rc"] != 0 and "is not a regular file" in out["msg"] and "probes" not in out
