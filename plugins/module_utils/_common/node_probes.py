# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Thin "run" helpers shared by the node modules and kubegpu.fleet.audit_node: common part.

The helpers live in one small file per module (``<module>_run.py``), so each module ships
only what it imports. Each helper is the body of a module's ``main()``: it takes the
module's options as a plain dict (plus ``run_command``/``get_bin_path``/``warn`` callables
where it needs those of the module's AnsibleModule) and returns the result the module exits
with, or raises ProbeFailed with the message (and extra result keys) the module fails with.
gpu_facts, kubelet_facts, driver_guard, checkpoint_sync and cgroup_devices call them, so
audit_node, which runs the same probes in one process, returns exactly what they return.
A module's ``main()`` builds its AnsibleModule and hands the helper to :func:`run_probe_module`.

Node side: Python 3.8+.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ProbeFailed(Exception):
    """A probe failed the way its module fails: ``msg`` plus extra result keys."""

    def __init__(self, msg, **result):
        super(ProbeFailed, self).__init__(msg)
        self.msg = msg
        self.result = result


def to_native_text(e):
    """Text of an exception (never raises)."""
    try:
        return str(e)
    except Exception:  # pylint: disable=broad-except
        return repr(e)


def run_probe_module(module, run, *args, **kwargs):
    """The rest of a probe module's ``main()``: exit ``module`` with ``run(*args, **kwargs)``'s
    result, or fail it with a ProbeFailed's message and result keys."""
    try:
        result = run(*args, **kwargs)
    except ProbeFailed as e:
        module.fail_json(msg=e.msg, **e.result)
    module.exit_json(**result)
