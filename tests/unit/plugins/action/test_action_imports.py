"""No action plugin imports another action plugin: code shared between action
plugins lives in plugins/plugin_utils (e.g. catalog/load.py for the known-bad catalog)."""
import ast
import os

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
ACTION_DIR = os.path.join(REPO, "plugins", "action")
ACTIONS = sorted(f for f in os.listdir(ACTION_DIR) if f.endswith(".py") and f != "__init__.py")
FORBIDDEN = ("ansible_collections.kubegpu.fleet.plugins.action", "plugins.action")


def imported_modules(path):
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from . import x / from .driver_guard import y
                out.append("." * node.level + (node.module or ""))
            else:
                out.append(node.module or "")
                out.extend("%s.%s" % (node.module, a.name) for a in node.names)
        elif isinstance(node, ast.Import):
            out.extend(a.name for a in node.names)
    return out


def offending(path):
    return [m for m in imported_modules(path)
            if m.startswith(".") or any(m == f or m.startswith(f + ".") for f in FORBIDDEN)]


def test_there_are_action_plugins_to_check():
    assert "driver_guard.py" in ACTIONS and "audit_node.py" in ACTIONS


@pytest.mark.parametrize("name", ACTIONS)
def test_action_plugin_imports_no_other_action_plugin(name):
    assert offending(os.path.join(ACTION_DIR, name)) == []


def test_the_check_catches_an_import_of_an_action_plugin(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from ansible_collections.kubegpu.fleet.plugins.action.driver_guard import args_with_catalog\n"
                   "from ansible.plugins.action import ActionBase\n")
    assert offending(str(bad)) == ["ansible_collections.kubegpu.fleet.plugins.action.driver_guard",
                                   "ansible_collections.kubegpu.fleet.plugins.action.driver_guard.args_with_catalog"]
    rel = tmp_path / "rel.py"
    rel.write_text("from .driver_guard import redact_catalog\n")
    assert offending(str(rel)) == [".driver_guard"]
