# -*- coding: utf-8 -*-
"""Bad-input corpus for kubegpu.fleet.gpu_operands through the real ansible-playbook (same rules
as tests/module/test_bad_input_controller.py): no traceback, a clear msg naming the problem, never
a token in the output, the kubeconfig files left byte for byte."""
from __future__ import absolute_import, division, print_function

import os

from test_bad_input_gpu import DEPTH, fifo, nested_dict, nested_list, run_cases, snapshot, write


def _failed_with(res, cid, *words):
    assert res[cid].get("failed"), (cid, res[cid])
    for w in words:
        assert w in res[cid]["msg"], (cid, res[cid]["msg"])


def test_gpu_operands_bad_inputs(ansible, tmp_path):
    token = "sekrit-token-0123456789"
    kc_dir = tmp_path / "kc"
    fifo_path = fifo(kc_dir / "fifo")
    binary = write(kc_dir / "binary", b"\xff\xfe\x00apiVersion" + os.urandom(256))
    before = snapshot(kc_dir)
    api = {"host": "https://127.0.0.1:1", "api_key": token, "validate_certs": False}
    cases = [
        ("kubeconfig_fifo", {"name": "gpu-1", "kubeconfig": fifo_path, "state": "paused"}, None),
        ("kubeconfig_binary", {"name": "gpu-1", "kubeconfig": binary, "state": "restored"}, None),
        ("api_refused", dict(api, name="gpu-1", state="paused"), None),
        ("state_unknown", dict(api, name="gpu-1", state="stopped"), None),
        ("name_nested", dict(api, name=nested_list(DEPTH)), None),
        ("components_driver", dict(api, name="gpu-1", state="paused", components=["device-plugin", "driver"]), None),
        ("components_path", dict(api, name="gpu-1", state="paused", components=["../../etc"]), None),
        ("components_nested", dict(api, name="gpu-1", state="paused", components=nested_dict(DEPTH)), None),
        ("components_empty", dict(api, name="gpu-1", state="paused", components=[]), None),
        ("annotation_bad", dict(api, name="gpu-1", state="paused", annotation="a b/c d"), None),
        ("timeout_nan", dict(api, name="gpu-1", state="paused", timeout="nan"), None),
        ("timeout_1e300", dict(api, name="gpu-1", state="paused", timeout=1e300), None),
        ("poll_zero", dict(api, name="gpu-1", state="paused", poll=0), None),
    ]
    res = run_cases(ansible, "gpu_operands", cases)
    for cid, _args, _env in cases:
        assert res[cid].get("failed"), (cid, res[cid])
        assert token not in repr(res[cid]), cid
    _failed_with(res, "kubeconfig_fifo", "FIFO")
    _failed_with(res, "api_refused", "read Node gpu-1", "Connection refused")
    _failed_with(res, "state_unknown", "state")
    _failed_with(res, "components_driver", "driver is never paused")
    _failed_with(res, "components_path", "is not a GPU Operator component name")
    _failed_with(res, "components_empty", "name at least one component")
    _failed_with(res, "annotation_bad", "is not an annotation key")
    _failed_with(res, "timeout_nan", "timeout must be between")
    _failed_with(res, "timeout_1e300", "timeout must be between")
    _failed_with(res, "poll_zero", "poll must be between")
    assert snapshot(kc_dir) == before
