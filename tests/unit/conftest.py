"""Unit tests import everything by its collection name and never edit ``sys.path``.

A unit test module that inserts a path when it is imported (to reach a helper by a bare name)
works under one runner and not the other (ansible-test imports it as
``ansible_collections.kubegpu.fleet.tests.unit...`` from a copy of the tree), and two helpers
with one basename shadow each other. This hook fails the collection of such a module with a
message saying what to import instead. Allowed: the entry pytest itself adds for the module
(its directory in pytest's default import mode, the collections root under ansible-test).
"""
import os
import sys

import pytest


def _allowed_entries(collector):
    path = str(collector.path)
    allowed = {os.path.dirname(path), os.path.realpath(os.path.dirname(path))}
    root = os.environ.get("ANSIBLE_COLLECTIONS_PATH")
    if root and "ansible_collections" in __name__:
        allowed.update((root, os.path.normpath(root), os.path.realpath(root)))
    return allowed


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    if not isinstance(collector, pytest.Module):
        return (yield)
    before = list(sys.path)
    report = yield
    added = [p for p in sys.path if p not in before and p not in _allowed_entries(collector)]
    if added and report.outcome != "failed":
        report.outcome = "failed"
        report.longrepr = (
            "%s edits sys.path when imported (added %s): import helpers by their collection name "
            "instead, e.g. ansible_collections.kubegpu.fleet.tests.lib.procs, "
            "ansible_collections.kubegpu.fleet.lab.fakes.nvml.fakenvml (docs/development.md, Tests)"
            % (collector.path, ", ".join(added)))
    return report
