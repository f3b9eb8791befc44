# -*- coding: utf-8 -*-
"""Unit tests for the end of plugins/module_utils/audit/probes.py, the body of kubegpu.fleet.audit_node:
one probe's failure or exception becomes its failed result, the real registered probes run
on an empty node, and the summary message."""
import subprocess

import pytest

from ansible_collections.kubegpu.fleet.plugins.module_utils.audit import probes
from ansible_collections.kubegpu.fleet.plugins.module_utils._common.node_probes import ProbeFailed


class Host(object):
    """What the probes get from AnsibleModule: real commands, no binaries, warnings kept."""

    def __init__(self):
        self.warned = []
        self.commands = []

    def warn(self, msg):
        self.warned.append(msg)

    def run_command(self, args, **kwargs):
        self.commands.append(args)
        p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           stdin=subprocess.DEVNULL, check=False, timeout=60)
        return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")

    @staticmethod
    def get_bin_path(name, required=False, opt_dirs=None):
        return None  # no journalctl, dpkg-query, rpm or nvidia-smi on this "node"


def empty_node(tmp_path, **extra):
    for d in ("proc", "dev", "root", "sys", "cgroup"):
        (tmp_path / d).mkdir()
    params = dict((k, o.get("default")) for k, o in probes.audit_argument_spec().items())
    params.update(proc_path=str(tmp_path / "proc"), nvidia_proc_path=None,
                  dev_path=str(tmp_path / "dev"), driver_root=str(tmp_path / "root"),
                  sys_path=str(tmp_path / "sys"), xid=False, cgroup_root=str(tmp_path / "cgroup"),
                  catalog_extra=[], _catalog=None, backend="nvidia_smi")
    params.update(extra)
    return params


def test_probe_failed_keeps_its_result_keys_and_warnings():
    def failing(warn):
        warn("first")
        raise ProbeFailed("no catalog", driver_version="570.1", changed=True)

    warned = []
    res = probes.run_probe("driver_guard", failing, warned.append)
    # the probe's keys are kept, failed/msg are the failure's (changed as the probe said)
    assert res == {"changed": True, "driver_version": "570.1", "failed": True, "msg": "no catalog",
                   "warnings": ["first"]}
    assert warned == ["first"]


def test_an_exception_is_captured_with_where_it_was_raised():
    def boom(warn):
        return {}["nvidia"]

    res = probes.run_probe("gpu_facts", boom, lambda w: None)
    assert res["msg"] == "gpu_facts probe raised KeyError: 'nvidia'" and res["failed"] is True
    assert res["raised_at"].startswith("test_audit_node_run.py:")
    assert res["raised_at"].endswith(" in boom") and "warnings" not in res
    assert probes.raised_at(ValueError("never raised")) is None


def test_summary_counts_in_registry_order():
    names = list(probes.NAMES)
    results = dict((n, {"changed": False}) for n in names)
    results[names[-1]] = {"failed": True}
    results[names[1]] = {"failed": True}
    results[names[2]] = {"skipped": True}
    failed, msg = probes.summary(results)
    assert failed == [names[1], names[-1]]
    assert msg == "%d probes run, 1 skipped, 2 failed: %s, %s" % (len(names) - 1, names[1], names[-1])
    assert probes.summary(dict((n, {}) for n in names))[1] == "%d probes run, 0 skipped, 0 failed" % len(names)


def test_audit_node_run_on_an_empty_node(tmp_path):
    host = Host()
    clock = iter(range(100))
    res = probes.audit_node_run(empty_node(tmp_path), host, lambda: float(next(clock)))
    assert sorted(res) == ["changed", "elapsed", "failed_probes", "msg", "probes"]
    assert res["changed"] is False and list(res["probes"]) == list(probes.NAMES)
    assert res["failed_probes"] == ["driver_guard"]
    assert "no catalog" in res["probes"]["driver_guard"]["msg"]
    skipped = [n for n in probes.NAMES if res["probes"][n].get("skipped")]
    assert skipped == ["checkpoint_sync", "cgroup_devices"]
    assert res["msg"] == "%d probes run, 2 skipped, 1 failed: driver_guard" % (len(probes.NAMES) - 2)
    assert res["elapsed"]["gpu_facts"] == 1.0 and res["elapsed"]["checkpoint_sync"] == 0
    # each probe's warnings went to the module as well as into its result
    kept = [w for n in probes.NAMES for w in res["probes"][n].get("warnings", [])]
    assert host.warned == kept


@pytest.mark.parametrize("timeout", [0, -1, float("nan"), float("inf")])
def test_a_bad_timeout_fails_before_any_probe_runs(tmp_path, timeout):
    host = Host()
    clock_calls = []
    with pytest.raises(ProbeFailed) as e:
        probes.audit_node_run(empty_node(tmp_path, timeout=timeout), host,
                              lambda: clock_calls.append(1) or 0.0)
    assert e.value.msg.startswith("timeout ") and e.value.result == {}
    assert clock_calls == [] and host.commands == [] and host.warned == []
