"""run_probe_module (plugins/module_utils/_common/node_probes.py), the end of every probe
module's main(): the helper's result exits the module, a ProbeFailed fails it with its message
and result keys, any other exception is not swallowed."""
import pytest

from ansible_collections.kubegpu.fleet.plugins.module_utils._common.node_probes import (
    ProbeFailed,
    run_probe_module,
)


class Exited(Exception):
    pass


class Module(object):
    """Records how the module ended; like AnsibleModule, exit_json/fail_json do not return."""

    def __init__(self):
        self.ended = None

    def exit_json(self, **kw):
        self.ended = ("exit", kw)
        raise Exited()

    def fail_json(self, **kw):
        self.ended = ("fail", kw)
        raise Exited()


def test_the_result_exits_the_module_with_the_arguments_passed_on():
    module = Module()
    with pytest.raises(Exited):
        run_probe_module(module, lambda a, b, c=None: dict(changed=False, got=[a, b, c]), 1, 2, c=3)
    assert module.ended == ("exit", dict(changed=False, got=[1, 2, 3]))


def test_a_probe_failure_fails_the_module_with_its_result_keys():
    def run():
        raise ProbeFailed("no driver", changed=False, path="/x")
    module = Module()
    with pytest.raises(Exited):
        run_probe_module(module, run)
    assert module.ended == ("fail", dict(msg="no driver", changed=False, path="/x"))


def test_another_exception_is_not_turned_into_a_result():
    def run():
        raise KeyError("bug")
    module = Module()
    with pytest.raises(KeyError):
        run_probe_module(module, run)
    assert module.ended is None
