# -*- coding: utf-8 -*-
"""plugins/plugin_utils/catalog: the bundled catalog is read once per process, a task's catalog is
validated once (for the module on the node and for the controller's evaluation alike), and the
driver_guard action hands it to the module and redacts it from the result."""
import os
import shutil

import pytest

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.action import runner
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit import node_audit
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.catalog import driver_guard
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.catalog import load as cl
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.catalog import module_args

EXTRA = {
    "schema_version": 2, "component": "driver", "version_scheme": "driver",
    "entries": [{
        "id": "site-r570-test-defect", "kind": "defect", "title": "a site's own defect", "severity": "low",
        "affected": [{"branch": "570", "fixed": "570.999.99"}], "remediation": "upgrade the driver",
        "sources": [{"url": "https://example.com/site/defect", "verified": "2026-11-01"}],
    }],
}


@pytest.fixture
def fresh():
    """The process's catalog cache emptied, and the load counters as they are now."""
    cl._CACHE.clear()
    return dict(cl.LOADS)


def _loads(before):
    return dict((k, cl.LOADS[k] - before[k]) for k in before)


def test_bundled_files_are_read_once_per_process(fresh):
    first = cl.for_task()
    second = cl.for_task(EXTRA)
    third = cl.for_task()
    assert _loads(fresh) == {"bundled": 1, "extra": 1}
    assert first.error is None and second.error is None and third.error is None
    assert len(second.entries) == len(first.entries) + 1
    assert [e["id"] for e in third.entries] == [e["id"] for e in first.entries]


def test_a_changed_file_is_read_again(fresh, tmp_path):
    directory = str(tmp_path / "v2")
    shutil.copytree(cl.CATALOG_DIR, directory)
    cl.for_task(None, directory)
    cl.for_task(None, directory)
    assert _loads(fresh)["bundled"] == 1
    with open(os.path.join(directory, "driver.yml"), "a") as f:
        f.write("# a maintainer's edit\n")
    cl.for_task(None, directory)
    assert _loads(fresh)["bundled"] == 2


def test_one_validation_serves_the_node_and_the_evaluation(fresh):
    task_catalog = cl.for_task(EXTRA)
    args, catalog, error = module_args.args_with_catalog({"catalog_extra": EXTRA}, "audit_node", task_catalog)
    assert error is None and catalog is task_catalog.node_catalog and args["_catalog"] is catalog
    assert "site-r570-test-defect" in [e["id"] for e in task_catalog.entries]
    assert _loads(fresh) == {"bundled": 1, "extra": 1}
    # the node gets the bundled driver defects only; the task's extra documents go as catalog_extra
    assert [d["component"] for d in catalog] == ["driver"]
    assert all(e["kind"] == "defect" for e in catalog[0]["entries"])
    assert args["catalog_extra"] is EXTRA


def test_invalid_catalog_extra_fails_the_node_and_keeps_the_bundled_entries(fresh):
    http = [{"url": "http://example.com/x", "verified": "2026-11-01"}]
    bad = dict(EXTRA, entries=[dict(EXTRA["entries"][0], sources=http)])
    task_catalog = cl.for_task(bad)
    assert task_catalog.node_catalog is None and task_catalog.entries_error is None
    assert task_catalog.error.startswith("invalid catalog_extra: ") and "https://" in task_catalog.error
    assert len(task_catalog.entries) == len(cl.for_task().entries)


def test_a_bundled_id_in_catalog_extra_is_refused(fresh):
    bundled_id = cl.for_task().entries[0]["id"]
    clash = dict(EXTRA, entries=[dict(EXTRA["entries"][0], id=bundled_id)])
    error = cl.for_task(clash).error
    assert error.startswith("invalid catalog_extra: id %r already exists in the bundled catalog" % bundled_id)


def test_an_unreadable_bundled_catalog_is_reported_for_both_uses(fresh, tmp_path):
    task_catalog = cl.for_task(None, str(tmp_path / "missing"))
    assert task_catalog.entries is None and task_catalog.node_catalog is None
    assert task_catalog.entries_error.startswith("cannot read the catalog v2: ")
    assert task_catalog.error.startswith("cannot read the bundled catalog %s: " % (tmp_path / "missing"))


class NodeDouble(object):
    """The part of runner.Task the actions' work uses: the module runs 'on the node' and answers
    ``result`` with its arguments echoed in ``invocation``, as Ansible's modules do."""

    hostname = "gpu-node-1"

    def __init__(self, result=None):
        self.calls = []
        self.result = result or {"changed": False, "verdict": "ok"}

    def module(self, name, args):
        self.calls.append((name, args))
        return dict(self.result, invocation={"module_args": dict(args)})


def test_driver_guard_sends_the_catalog_and_redacts_it(fresh):
    node = NodeDouble()
    result = driver_guard.run_driver_guard(node, {"catalog_extra": EXTRA, "state": "audit"})
    (name, sent), = node.calls
    assert name == "kubegpu.fleet.driver_guard" and sent["_catalog"][0]["component"] == "driver"
    shown = result["invocation"]["module_args"]["_catalog"]
    assert shown.startswith("<bundled catalog v2 ") and shown.endswith(" driver defect entries>")
    assert _loads(fresh) == {"bundled": 1, "extra": 1}


@pytest.mark.parametrize("args, message", [
    ({"_catalog": []}, "_catalog is internal to driver_guard"),
    ({"catalog_extra": "not a document"}, "invalid catalog_extra: must be a catalog v2 document"),
])
def test_driver_guard_refuses_before_the_node(fresh, args, message):
    node = NodeDouble()
    with pytest.raises(runner.ActionFailed, match=message):
        driver_guard.run_driver_guard(node, args)
    assert node.calls == []


def test_audit_node_loads_the_catalog_once_for_the_node_and_the_evaluation(fresh):
    # a node whose module crashed: every probe in error, the node still evaluated (with the catalog)
    node = NodeDouble({"failed": True, "msg": "MODULE FAILURE", "module_stderr": "Traceback"})
    result = node_audit.audit_node(node, {"catalog_extra": EXTRA})
    (name, sent), = node.calls
    assert name == "kubegpu.fleet.audit_node" and sent["_catalog"][0]["component"] == "driver"
    assert result["ansible_facts"]["kubegpu_audit"]["node"] == "gpu-node-1"
    assert _loads(fresh) == {"bundled": 1, "extra": 1}


# What ansible-playbook's strategy does before it forks the task's workers (linear and free:
# action_loader.get(..., class_only=True)), then what a forked worker does with the catalog.
STRATEGY_THEN_WORKER = r"""
import json, os, sys
from ansible.plugins.loader import action_loader, init_plugin_loader
init_plugin_loader([sys.argv[1]])
action_loader.get(sys.argv[2], class_only=True)
load = sys.modules["ansible_collections.kubegpu.fleet.plugins.plugin_utils.catalog.load"]
before = load.LOADS["bundled"]
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    task_catalog = load.for_task(None)
    os.write(w, json.dumps({"loads": load.LOADS["bundled"] - before,
                            "entries": len(task_catalog.entries or [])}).encode())
    os._exit(0)
os.close(w)
child = json.loads(os.read(r, 65536))
os.waitpid(pid, 0)
json.dump({"main": before, "worker": child}, sys.stdout)
"""


@pytest.mark.parametrize("action", ["kubegpu.fleet.audit_node", "kubegpu.fleet.driver_guard"])
def test_the_main_process_reads_the_catalog_once_for_every_worker(action):
    """Loading a per-node action plugin's class reads and validates the bundled catalog (the strategy
    does it in ansible-playbook's main process); a worker forked from there reads nothing again."""
    import json
    import subprocess
    import sys
    root = cl.COLLECTION_ROOT
    for _i in range(3):
        root = os.path.dirname(root)        # .../ansible_collections/kubegpu/fleet -> the collections root
    out = subprocess.run([sys.executable, "-c", STRATEGY_THEN_WORKER, root, action], check=True,
                         stdout=subprocess.PIPE, universal_newlines=True).stdout
    got = json.loads(out)
    assert got["main"] == 1
    assert got["worker"]["loads"] == 0 and got["worker"]["entries"] > 200


def test_preload_never_raises_and_the_task_reports_the_problem(fresh, tmp_path, monkeypatch):
    """A bundled catalog that cannot be read fails nothing at import: the task that needs it says why."""
    monkeypatch.setattr(cl, "CATALOG_DIR", str(tmp_path / "missing"))
    cl.preload()
    assert _loads(fresh)["bundled"] == 0
    task_catalog = cl.for_task()
    assert task_catalog.entries is None and "cannot read the catalog v2" in task_catalog.entries_error
