# -*- coding: utf-8 -*-
"""Bad-input corpus for the container-stack surfaces: kubegpu.fleet.toolkit_config (the edit
on the controller), kubegpu.fleet.stack_facts (config.toml parsed on the controller, CDI spec
directories listed on the node) and the stack probe of kubegpu.fleet.audit_node, including a
compromised node whose module answers with results of the wrong shape.

Same rules as the other corpora (test_bad_input_gpu.py), through the real ``ansible-playbook``
on localhost, one play per surface with one task per input: no traceback, no hang, a clear
``msg`` when the task fails, the files intact by sha256 and nothing written anywhere else. The
256 KiB hostile config.toml texts (tests/lib/hostile_toml.py) cost the controller a shape check
or at most the parse bound's deadline each (plugins/plugin_utils/parse_bound.py); their
results say which.
"""
from __future__ import absolute_import, division, print_function

import json
import os
import shutil

import pytest

from test_bad_input_gpu import assert_clean, fifo, loop, run_cases, snapshot, sparse, write

from lib import hostile_toml
from lib.paths import TOOLKIT_CONFIG

from ansible_collections.kubegpu.fleet.plugins.module_utils.audit.probes import NAMES
from ansible_collections.kubegpu.fleet.plugins.plugin_utils import parse_bound
from ansible_collections.kubegpu.fleet.tests.unit.plugins.module_utils.stack import test_nvidia_stack as t

HOOK = "features.disable-cuda-compat-lib-hook"
NODE = "localhost"  # the inventory name the messages give
with open(TOOLKIT_CONFIG) as _f:
    CONFIG = _f.read()


def _failed_with(res, cid, *words):
    assert res[cid].get("failed"), (cid, res[cid])
    for w in words:
        assert w in res[cid]["msg"], (cid, res[cid]["msg"])


# ------------------------------------------------------------------------------ toolkit_config

def test_toolkit_config_bad_inputs(ansible, tmp_path):
    """Every hostile config.toml is refused with the bound's reason (or the node's) and left
    byte for byte as it was; no backup or temp file appears anywhere."""
    base = tmp_path / "cfg"
    files = {}
    for name, text in sorted(hostile_toml.corpus().items()):
        files[name] = write(base / name / "config.toml", text)
    files["binary"] = write(base / "binary" / "config.toml", b"\xff\xfe[features]\x00" + os.urandom(512))
    files["huge"] = sparse(base / "huge" / "config.toml", 4 << 20)
    files["fifo"] = fifo(base / "fifo" / "config.toml")
    files["loop"] = loop(base / "loop" / "config.toml")
    os.makedirs(str(base / "directory" / "config.toml"))
    files["directory"] = str(base / "directory" / "config.toml")
    files["crlf_nested"] = write(base / "crlf_nested" / "config.toml",
                                 CONFIG.replace("\n", "\r\n") + "x = " + "[" * 40 + "]" * 40 + "\r\n")
    before = snapshot(tmp_path)
    cases = [(cid, {"path": path, "settings": {HOOK: True}}, None) for cid, path in sorted(files.items())]
    res = run_cases(ansible, "toolkit_config", cases)
    for cid, _args, _env in cases:
        assert res[cid].get("failed") and res[cid].get("changed") is False, (cid, res[cid])
    for name, words in hostile_toml.REFUSED_BY_SHAPE.items():
        _failed_with(res, name, "%s from node %s has " % (files[name], NODE), words, "refusing to edit it")
    _failed_with(res, "dotted_within_limits", "%s from node %s could not be parsed within %g s (the parser was "
                 "stopped); refusing to edit it" % (files["dotted_within_limits"], NODE, parse_bound.DEADLINE_S))
    _failed_with(res, "crlf_nested", "nested 40 levels deep (line %d), more than the 32" % (CONFIG.count("\n") + 1))
    _failed_with(res, "binary", "is not UTF-8 text")
    _failed_with(res, "fifo", "FIFO")
    assert snapshot(tmp_path) == before


# ------------------------------------------------------------------------------ stack_facts

@pytest.mark.skipif(not shutil.which("dpkg-query"), reason="needs dpkg-query")
def test_stack_facts_bad_inputs(ansible, tmp_path):
    """Hostile config.toml texts and CDI spec directories on the node: the task succeeds, the
    config is unreadable with the bound's reason as a warning, what the directories hold is
    listed only when it is a regular spec file, and nothing changes."""
    def root(cid, config=None):
        r = t.dpkg_root(tmp_path / cid, [("nvidia-container-toolkit", "1.17.8-1")], config)
        empty = tmp_path / cid / "empty"
        os.makedirs(str(empty))
        return r, {"root": str(r), "sys_path": str(empty), "dev_path": str(empty), "proc_path": str(empty),
                   "service_state": False}

    cases = []
    for name, text in sorted(hostile_toml.corpus().items()):
        cases.append((name, root(name, text)[1], None))
    r, args = root("cdi_hostile", CONFIG)
    cdi = os.path.join(str(r), "etc", "cdi")
    write(os.path.join(cdi, "nvidia.yaml"), "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\n")
    fifo(os.path.join(cdi, "nvidia-fifo.yaml"))
    loop(os.path.join(cdi, "nvidia-loop.json"))
    os.makedirs(os.path.join(cdi, "nvidia-dir.json"))
    sparse(os.path.join(cdi, "nvidia-huge.yaml"), 64 << 20)
    write(os.path.join(cdi, "nvidia-binary.json"), b"\xff\x00" + os.urandom(256))
    write(os.path.join(cdi, "nvidia-" + "\udcff\udcfe" + ".yaml"), "x")
    write(os.path.join(cdi, "nvidia-nested.json"), "[" * 100000)
    cases.append(("cdi_hostile", args, None))
    r, args = root("cdi_too_many", CONFIG)
    run_cdi = os.path.join(str(r), "var", "run", "cdi")  # /var/run/cdi of a node with 4100 entries
    os.makedirs(run_cdi)
    for i in range(4100):
        open(os.path.join(run_cdi, "nvidia-%d.yaml" % i), "w").close()
    cases.append(("cdi_too_many", args, None))
    before = snapshot(tmp_path)
    res = run_cases(ansible, "stack_facts", cases)
    for cid, _args, _env in cases:
        assert not res[cid].get("failed"), (cid, res[cid])
    for name, words in hostile_toml.REFUSED_BY_SHAPE.items():
        tk = res[name]["ansible_facts"]["nvidia_stack"]["container_toolkit"]
        assert tk["config"] is None and tk["injection_mode"] is None and "config_text" not in tk, name
        assert tk["config_error"].startswith("config.toml from node %s has " % NODE) and words in tk["config_error"]
        assert any(tk["config_error"] in w for w in res[name]["warnings"]), (name, res[name].get("warnings"))
    tk = res["dotted_within_limits"]["ansible_facts"]["nvidia_stack"]["container_toolkit"]
    assert tk["config_error"] is None and tk["injection_mode"] == "legacy"  # valid TOML, within the limits
    specs = res["cdi_hostile"]["ansible_facts"]["nvidia_stack"]["container_toolkit"]["cdi_specs"]
    assert specs == ["/etc/cdi/nvidia-binary.json", "/etc/cdi/nvidia-huge.yaml", "/etc/cdi/nvidia-nested.json",
                     "/etc/cdi/nvidia.yaml"]
    assert any("skipped 'nvidia-\\udcff\\udcfe.yaml', a name that is not UTF-8" in w
               for w in res["cdi_hostile"]["warnings"]), res["cdi_hostile"].get("warnings")
    tk = res["cdi_too_many"]["ansible_facts"]["nvidia_stack"]["container_toolkit"]
    assert tk["cdi_specs"] == [] and tk["config"] is not None
    assert any("lists 4100 entries, more than the 4096" in w for w in res["cdi_too_many"]["warnings"])
    assert snapshot(tmp_path) == before


# ------------------------------------------------------------------------------ audit_node

def _compromised(tmp_path, cid, result):
    """An "interpreter" for the node that prints ``result`` whatever module it is given: what a
    compromised node can answer. Returns the task vars that send audit_node to it."""
    answer = write(tmp_path / "node" / (cid + ".json"), json.dumps(result))
    python = write(tmp_path / "node" / (cid + ".sh"), "#!/bin/sh\ncat '%s'\n" % answer, mode=0o755)
    return {"ansible_python_interpreter": python}


def _ok(facts=None):
    return {"changed": False, "ansible_facts": facts} if facts is not None else {"changed": False}


def test_audit_node_with_a_compromised_node(ansible, tmp_path):
    """Probe results of the wrong shape fail only their probe, with a message; the task
    succeeds and the node is recorded as audited. A hostile config.toml in the stack probe's
    text costs the shape check and makes the config unreadable, with a warning."""
    stack_ok = {"container_toolkit": {"installed": True, "version": "1.17.8", "config_path": "/etc/c.toml",
                                      "config_text": CONFIG, "config_error": None, "runtime_binaries": ["runc"]}}
    hostile = dict(stack_ok["container_toolkit"], config_text=hostile_toml.corpus()["long_dotted_key"])
    bad_binaries = dict(stack_ok["container_toolkit"], runtime_binaries=5)
    results = {
        "wrong_shapes": {
            "changed": False, "failed_probes": 12, "msg": ["not", "text"], "warnings": "one string",
            "probes": {
                "gpu_facts": "a string",
                "kubelet_facts": {"changed": False, "ansible_facts": ["kubelet"]},
                # driver_guard missing
                "checkpoint_sync": {"changed": False, "skipped": True, "skip_reason": {"why": ["x"]}},
                "cgroup_devices": {"changed": False, "failed": True, "msg": "x" * 100000},
                "stack_facts": _ok({"nvidia_stack": {"container_toolkit": bad_binaries}}),
            }},
        "stack_not_a_dict": {"changed": False, "probes": dict(
            [(n, _ok()) for n in NAMES if n != "stack_facts"]
            + [("stack_facts", _ok({"nvidia_stack": ["not", "a", "dict"]}))])},
        "hostile_config": {"changed": False, "probes": dict(
            [(n, _ok()) for n in NAMES if n != "stack_facts"]
            + [("stack_facts", _ok({"nvidia_stack": {"container_toolkit": hostile}}))])},
        "probes_a_list": {"changed": False, "probes": [1, 2, 3]},
    }
    tasks = []
    for cid, result in results.items():
        tasks.append({"name": cid, "kubegpu.fleet.audit_node": {"node": "gpu-%s" % cid},
                      "vars": _compromised(tmp_path, cid, result), "register": "out_" + cid})
        tasks.append({"name": "audit " + cid, "ansible.builtin.debug": {"var": "kubegpu_audit"}})
    before = snapshot(tmp_path)
    res = ansible.playbook([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}],
                           env={"ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.json"})
    assert res.rc == 0, res.stdout[-3000:]
    out = {}
    for cid in results:
        out[cid] = res.task(cid)
        assert_clean(cid, out[cid])
        assert not out[cid].get("failed"), (cid, out[cid])
        audit = res.task("audit " + cid)["kubegpu_audit"]
        assert audit["node"] == "gpu-%s" % cid and audit["status"] == "audited", (cid, audit)

    probes = out["wrong_shapes"]["probes"]
    assert out["wrong_shapes"]["failed_probes"] == ["gpu_facts", "kubelet_facts", "driver_guard", "cgroup_devices",
                                                    "stack_facts"]
    assert probes["gpu_facts"]["msg"] == ("the node's gpu_facts result could not be read on the controller: "
                                          "the probe's result is a str, not a dict")
    assert probes["kubelet_facts"]["msg"].endswith("the probe's ansible_facts is a list, not a dict")
    assert probes["driver_guard"]["msg"].endswith("audit_node returned no result for this probe")
    assert probes["stack_facts"]["msg"].endswith("nvidia_stack.container_toolkit.runtime_binaries is a int, not a list")
    assert probes["checkpoint_sync"]["skip_reason"] == "{'why': ['x']}"
    assert len(probes["cgroup_devices"]["msg"]) <= 2000 and probes["cgroup_devices"]["msg"].endswith("...")
    assert out["wrong_shapes"]["msg"] == "5 probes run, 1 skipped, 5 failed: gpu_facts, kubelet_facts, " \
                                         "driver_guard, cgroup_devices, stack_facts"
    assert "one string" in out["wrong_shapes"]["warnings"]
    assert out["stack_not_a_dict"]["failed_probes"] == ["stack_facts"]
    assert out["stack_not_a_dict"]["probes"]["stack_facts"]["msg"].endswith(
        "the probe's nvidia_stack fact is a list, not a dict")

    tk = out["hostile_config"]["probes"]["stack_facts"]["ansible_facts"]["nvidia_stack"]["container_toolkit"]
    assert out["hostile_config"]["failed_probes"] == []
    assert tk["config"] is None and tk["injection_mode"] is None and "config_text" not in tk
    assert tk["config_error"].startswith("config.toml from node gpu-hostile_config has a line of ")
    assert any(tk["config_error"] in w for w in out["hostile_config"]["warnings"])

    assert out["probes_a_list"]["failed_probes"] and "audit_node failed" in out["probes_a_list"]["msg"]
    assert snapshot(tmp_path) == before
