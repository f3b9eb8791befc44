# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one body of every action plugin of the collection.

An action plugin's ``run()`` is a single call::

    def run(self, tmp=None, task_vars=None):
        return runner.run(self, super().run(tmp, task_vars), task_vars, feature.ACTION)

where ``feature.ACTION`` is an :class:`Action`: the task's argument spec and the function that
does the work. The function gets a :class:`Task` (what it may ask of Ansible: run a module on the
node, the check mode flag, the task's environment, the host's name) and the validated options,
and returns the keys to add to the result. It raises :class:`ActionFailed` (or
:class:`~ansible_collections.kubegpu.fleet.plugins.module_utils._common.safe_io.UnsafeInput` for an
option that fails a bound) for a failure the user must read: the task fails with that message,
never a traceback. Option validation is Ansible's own (``validate_argument_spec``).
"""
from __future__ import annotations

from ansible_collections.kubegpu.fleet.plugins.module_utils._common.safe_io import UnsafeInput


class ActionFailed(Exception):
    """The task fails with ``str(exc)`` as its message; ``result`` keys go into the result too."""

    def __init__(self, msg, **result):
        super().__init__(msg)
        self.result = result


class Action(object):
    """An action plugin's argument spec and its work, ``work(task, args) -> dict``.

    ``argument_spec`` None hands the task's options unvalidated to the work, for an action that
    passes them to its module (which validates them).
    """

    __slots__ = ("argument_spec", "work", "mutually_exclusive", "required_if")

    def __init__(self, argument_spec, work, mutually_exclusive=None, required_if=None):
        self.argument_spec = argument_spec
        self.work = work
        self.mutually_exclusive = mutually_exclusive
        self.required_if = required_if


class Task(object):
    """What the work of an action may use of the running task."""

    def __init__(self, plugin, task_vars):
        self._plugin = plugin
        self.task_vars = task_vars or {}
        self.check_mode = bool(plugin._task.check_mode)
        self.diff = bool(getattr(plugin._task, "diff", False))

    @property
    def hostname(self):
        """The inventory name of the host the task runs for."""
        return self.task_vars.get("inventory_hostname")

    def module(self, name, args):
        """Run module ``name`` on the task's host with ``args``; its result as it returns it."""
        return self._plugin._execute_module(module_name=name, module_args=args, task_vars=self.task_vars)

    def validate(self, argument_spec):
        """The task's options validated against ``argument_spec`` (Ansible's own validation), for
        an action whose ``Action`` has no spec because it checks something before validating."""
        _validation, args = self._plugin.validate_argument_spec(argument_spec=argument_spec)
        return args

    @property
    def raw_args(self):
        """The task's arguments before validation (for an action that hands them on unchanged)."""
        return dict(self._plugin._task.args)

    def environ(self):
        """The controller's environment with the task's ``environment:`` applied on top."""
        from ansible_collections.kubegpu.fleet.plugins.plugin_utils.k8s import action as k8s_action
        return k8s_action.task_environ(self._plugin._task, self._plugin._templar)


def run(plugin, result, task_vars, action):
    """Validate the task's options against ``action``'s spec, do its work and fill ``result``."""
    kwargs = {}
    if action.mutually_exclusive:
        kwargs["mutually_exclusive"] = action.mutually_exclusive
    if action.required_if:
        kwargs["required_if"] = action.required_if
    if action.argument_spec is None:   # the options go to a module unchanged; it validates them
        args = dict(plugin._task.args)
    else:
        _validation, args = plugin.validate_argument_spec(argument_spec=action.argument_spec, **kwargs)
    try:
        out = action.work(Task(plugin, task_vars), args)
    except ActionFailed as exc:
        result.update(exc.result)
        result.update(failed=True, msg=str(exc))
        result.setdefault("changed", False)
        return result
    except UnsafeInput as exc:
        result.update(failed=True, changed=False, msg=str(exc))
        return result
    result.update(out)
    result.setdefault("changed", False)
    return result
