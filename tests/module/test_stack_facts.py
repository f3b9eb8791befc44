# -*- coding: utf-8 -*-
"""kubegpu.fleet.stack_facts through real ansible-playbook on localhost: the module reads a
host tree (dpkg database read by the real dpkg-query, config.toml, PCI tree) and its action
plugin parses config.toml on the controller."""
from __future__ import absolute_import, division, print_function

import os
import shutil

import pytest

from ansible_collections.kubegpu.fleet.tests.unit.plugins.module_utils.stack import test_nvidia_stack as t

pytestmark = pytest.mark.skipif(not shutil.which("dpkg-query"), reason="needs dpkg-query")


def args(tmp_path, root, **kw):
    empty = tmp_path / "empty"
    os.makedirs(str(empty), exist_ok=True)
    a = dict(root=str(root), sys_path=str(kw.pop("sys_path", empty)), dev_path=str(empty),
             proc_path=str(empty), service_state=False)
    a.update(kw)
    return a


def test_facts_with_controller_side_toml(ansible, tmp_path):
    root = t.dpkg_root(tmp_path, [("nvidia-container-toolkit", "1.17.7-1"), ("nvidia-fabricmanager-570", "570.158.01-1")],
                       t.MITIGATED_CDI)
    t.put(root, "usr/bin/crun", "#!/bin/sh\n", 0o755)
    res = ansible.module("stack_facts", args(tmp_path, root, sys_path=t.nvswitch_sys(tmp_path)), check=True)
    assert res["_rc"] == 0 and not res.get("failed"), res
    stack = res["ansible_facts"]["nvidia_stack"]
    tk = stack["container_toolkit"]
    assert "config_text" not in tk
    assert tk["version"] == "1.17.7" and tk["injection_mode"] == "cdi" and tk["runtime"] == "crun"
    assert tk["cuda_compat_hook_disabled"] is True
    assert stack["fabric_manager"]["version"] == "570.158.01"
    assert stack["nvswitch"]["count"] == 4


def test_broken_toml_warns_and_succeeds(ansible, tmp_path):
    root = t.dpkg_root(tmp_path, [("nvidia-container-toolkit", "1.17.8-1")], "[nvidia-container-runtime\nmode=")
    res = ansible.module("stack_facts", args(tmp_path, root))
    assert res["_rc"] == 0 and not res.get("failed"), res
    tk = res["ansible_facts"]["nvidia_stack"]["container_toolkit"]
    assert tk["config"] is None and tk["injection_mode"] is None
    assert any("not valid TOML" in w for w in res.get("warnings", [])), res


def test_bad_option_fails_cleanly(ansible, tmp_path):
    res = ansible.module("stack_facts", {"fabric_manager_unit": "nvidia-*"})
    assert res["_rc"] != 0 and res.get("failed"), res
    assert "nvidia-*" in res["msg"] and "Traceback" not in res.get("module_stderr", "")
