# -*- coding: utf-8 -*-
"""Every action plugin under plugins/action is thin, as the modules are: its ``run()`` is one call
to ``runner.run`` (plugins/plugin_utils/action/runner.py) with the feature's ``Action`` (argument
spec and work), so the work lives in plugin_utils as plain functions unit tests call directly and
the preamble (option validation, failure messages) is written once.

Checked on the source with ``ast`` (nothing is imported):

* at module level only a docstring, imports and UPPER_CASE constants, and one class
  ``ActionModule``;
* the class body holds only constants (``TRANSFERS_FILES``, ``_supports_check_mode``, ...) and
  ``run``;
* ``run``'s body (after an optional docstring) is ``return runner.run(self, super().run(tmp,
  task_vars), task_vars, <feature>.ACTION)``, the last argument an attribute of an imported name.
"""
import ast
import os
import re

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ACTIONS = os.path.abspath(os.path.join(HERE, "..", "..", "..", "..", "plugins", "action"))
CONSTANT = re.compile(r"^_?[A-Za-z][A-Za-z0-9_]*$")
RUNNER = "ansible_collections.kubegpu.fleet.plugins.plugin_utils.action"


def _sources():
    return sorted(f for f in os.listdir(ACTIONS) if f.endswith(".py") and f != "__init__.py")


def _constant(node, pattern=re.compile(r"^_?[A-Z][A-Z0-9_]*$")):
    if not isinstance(node, ast.Assign):
        return False
    if not all(isinstance(t, ast.Name) and pattern.match(t.id) for t in node.targets):
        return False
    return not any(isinstance(x, (ast.Lambda, ast.Call)) for x in ast.walk(node.value))


def _docstring(node):
    return isinstance(node, ast.Expr) and isinstance(getattr(node, "value", None), ast.Constant) \
        and isinstance(node.value.value, str)


def problems(source):
    """What makes an action plugin source not thin (empty when it is)."""
    tree = ast.parse(source)
    found = []
    classes = []
    runner_names = set()
    imported = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                name = alias.asname or alias.name
                imported.add(name)
                if node.module == RUNNER and alias.name == "runner":
                    runner_names.add(name)
        elif isinstance(node, ast.Import):
            imported.update(a.asname or a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ClassDef):
            classes.append(node)
        elif not (_docstring(node) or _constant(node)):
            found.append("line %d: module level holds more than imports, constants and ActionModule"
                         % node.lineno)
    if [c.name for c in classes] != ["ActionModule"]:
        found.append("module level must define exactly one class, ActionModule")
        return found
    if not runner_names:
        found.append("does not import runner from %s" % RUNNER)
    runs = []
    for node in classes[0].body:
        if isinstance(node, ast.FunctionDef) and node.name == "run":
            runs.append(node)
        elif not (_docstring(node) or _constant(node, CONSTANT)):
            found.append("line %d: ActionModule holds more than constants and run()" % node.lineno)
    if len(runs) != 1:
        found.append("ActionModule must define run() once")
        return found
    body = [s for s in runs[0].body if not _docstring(s)]
    call = body[0].value if len(body) == 1 and isinstance(body[0], ast.Return) else None
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
            and isinstance(call.func.value, ast.Name) and call.func.value.id in runner_names
            and call.func.attr == "run" and len(call.args) == 4 and not call.keywords):
        found.append("run() must be one statement: return runner.run(self, super().run(tmp, task_vars), "
                     "task_vars, <feature>.ACTION)")
        return found
    last = call.args[3]
    if not (isinstance(last, ast.Attribute) and isinstance(last.value, ast.Name) and last.value.id in imported):
        found.append("run()'s Action must be an attribute of an imported plugin_utils module")
    return found


@pytest.mark.parametrize("name", _sources())
def test_action_plugin_is_thin(name):
    with open(os.path.join(ACTIONS, name), encoding="utf-8") as f:
        assert problems(f.read()) == []


THIN = '''
"""doc"""
from __future__ import annotations
from ansible.plugins.action import ActionBase
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.action import runner
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.rollout import reboot_need


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        return runner.run(self, super().run(tmp, task_vars), task_vars, reboot_need.ACTION)
'''


def test_the_thin_shape_passes():
    assert problems(THIN) == []


@pytest.mark.parametrize("bad", [
    THIN.replace("        return runner.run(", "        task_vars = task_vars or {}\n        return runner.run("),
    THIN.replace("reboot_need.ACTION)", "reboot_need.ACTION, extra=1)"),
    THIN.replace("    def run(", "    def _helper(self):\n        return 1\n\n    def run("),
    THIN + "\n\ndef helper():\n    return 1\n",
    THIN.replace("TRANSFERS_FILES = False", "TRANSFERS_FILES = make()"),
    THIN.replace("from ansible_collections.kubegpu.fleet.plugins.plugin_utils.action import runner\n", ""),
    THIN.replace("reboot_need.ACTION)", "ACTION)"),
    THIN.replace("runner.run(self", "runner.other(self"),
    THIN + "\n\nclass Other(object):\n    pass\n",
], ids=["preamble", "keyword", "helper-method", "helper-function", "computed-attribute", "no-runner",
        "local-action", "other-call", "second-class"])
def test_fat_shapes_fail(bad):
    assert problems(bad)
