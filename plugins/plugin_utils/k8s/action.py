# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What an action plugin of the ``kubegpu.fleet.k8s`` group needs around the client: the environment a
kubernetes.core module of the same task would see, a client closed after use, and secrets masked out
of the result."""
from __future__ import annotations

import contextlib
import os

from ansible.module_utils.common.parameters import remove_values

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.k8s.client import connect, secrets_of


def task_environ(task, templar):
    """The controller's environment with the task's ``environment:`` keyword applied on top.

    A kubernetes.core module on localhost runs with exactly this environment, so ``K8S_AUTH_*``
    set on the play, block or task reach this action the same way.
    """
    env = dict(os.environ)
    environments = getattr(task, "environment", None) or []
    if not isinstance(environments, list):
        environments = [environments]
    for environment in environments:
        if not environment:
            continue
        values = templar.template(environment)
        if isinstance(values, dict):
            env.update((str(k), str(v)) for k, v in values.items() if v is not None)
    return env


@contextlib.contextmanager
def masked(result, args):
    """Run the body, then replace every secret (option values, plus those the body appends to the
    yielded list: tokens read from the environment or a kubeconfig) in ``result`` by ********."""
    secrets = secrets_of(args)
    try:
        yield secrets
    finally:
        values = set(s for s in secrets if s)
        if values:
            cleaned = remove_values(dict(result), values)
            result.clear()
            result.update(cleaned)


@contextlib.contextmanager
def connected(args, environ, secrets):
    """A client connected with the task's options (``k8s.client.AUTH_ARG_SPEC``) for the body.

    Afterwards the tokens it read from the environment or a kubeconfig join ``secrets`` (the list
    :func:`masked` yields) and it is closed, which removes the kubeconfig's CA/key files: atexit
    never runs in a worker."""
    client = connect(args, environ=environ)
    try:
        yield client
    finally:
        secrets.extend(client.secrets)
        client.close()
