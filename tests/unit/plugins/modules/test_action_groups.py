# -*- coding: utf-8 -*-
"""Every module in an action group of meta/runtime.yml says so in its documentation, through the
group's doc fragment (plugins/doc_fragments/action_group.py), and no other module claims a group."""
import os

import pytest
import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
MODULES = os.path.join(ROOT, "plugins", "modules")


def _groups():
    with open(os.path.join(ROOT, "meta", "runtime.yml"), encoding="utf-8") as f:
        return yaml.safe_load(f)["action_groups"]


def _documentation(name):
    with open(os.path.join(MODULES, name + ".py"), encoding="utf-8") as f:
        text = f.read()
    start = text.index('DOCUMENTATION = r"""') + len('DOCUMENTATION = r"""')
    return yaml.safe_load(text[start:text.index('"""', start)])


def _modules():
    return sorted(f[:-3] for f in os.listdir(MODULES) if f.endswith(".py") and not f.startswith("_"))


def test_the_groups_name_existing_modules():
    for group, members in _groups().items():
        assert members and set(members) <= set(_modules()), group


@pytest.mark.parametrize("name", _modules())
def test_a_module_declares_exactly_the_groups_it_is_in(name):
    doc = _documentation(name)
    fragments = doc.get("extends_documentation_fragment") or []
    declared = sorted(f.rsplit(".", 1)[1] for f in fragments if f.startswith("kubegpu.fleet.action_group."))
    expected = sorted(group for group, members in _groups().items() if name in members)
    assert declared == expected
    assert "action_group" not in (doc.get("attributes") or {}), "the group's doc fragment says it once"
