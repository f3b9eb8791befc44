# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The deadline loop every wait on the API shares (kubernetes.core's k8s/waiter.py counterpart)."""
from __future__ import annotations

import time

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.k8s.client import K8sError


def wait_until(fetch, done, timeout, poll, clock=time.monotonic, sleep=time.sleep):
    """Call ``fetch()`` until ``done(value)`` is true or ``timeout`` seconds have passed.

    ``fetch`` errors (K8sError) count as not done and are kept as ``last_error``; the loop
    never sleeps past the deadline and always makes at least one call. ``clock`` and ``sleep``
    are injectable so tests drive time themselves. Returns
    ``{'ok', 'value', 'waited', 'polls', 'last_error'}``.
    """
    start = clock()
    deadline = start + max(float(timeout), 0.0)
    polls = 0
    value = None
    last_error = None
    while True:
        polls += 1
        try:
            value = fetch()
            last_error = None
            if done(value):
                return {"ok": True, "value": value, "waited": round(clock() - start, 3), "polls": polls,
                        "last_error": None}
        except K8sError as exc:
            last_error = str(exc)
        remaining = deadline - clock()
        if remaining <= 0:
            return {"ok": False, "value": value, "waited": round(clock() - start, 3), "polls": polls,
                    "last_error": last_error}
        sleep(min(max(float(poll), 0.05), remaining))
