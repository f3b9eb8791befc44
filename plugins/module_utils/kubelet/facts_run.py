# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""kubelet_facts run helper (the body of kubegpu.fleet.kubelet_facts).

Node side: Python 3.8+. See node_probes.py for the calling convention.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import time

from ansible_collections.kubegpu.fleet.plugins.module_utils._common import safe_io
from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet.allocation_log import unanswered_allocations
from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet.facts import gather_kubelet_facts
from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet.version import DEFAULT_PACKAGE
from ansible_collections.kubegpu.fleet.plugins.module_utils._common.node_probes import ProbeFailed

JOURNAL_TIMEOUT = 30.0
JOURNAL_MAX_BYTES = 32 << 20


def kubelet_allocation_log(params, run_command, get_bin_path):
    """Unanswered device-plugin calls from the kubelet's journal (never fails the task).

    ``journalctl`` runs with a deadline and an output bound (safe_io.run_command);
    ``run_command`` is accepted for the calling convention and not used."""
    out = {"source": None, "unit": params["journal_unit"], "since": params["journal_since"],
           "error": None, "unanswered": []}
    if not params["scan_journal"]:
        return out
    journalctl = get_bin_path("journalctl")
    if journalctl is None:
        out["error"] = "journalctl not found"
        return out
    timeout = params.get("timeout", JOURNAL_TIMEOUT) or JOURNAL_TIMEOUT
    try:
        res = safe_io.run_command(
            [journalctl, "-u", params["journal_unit"], "--since", params["journal_since"],
             "-o", "short-unix", "--no-pager", "-q"], timeout, limit=JOURNAL_MAX_BYTES,
            env=dict(os.environ, SYSTEMD_PAGER="", LC_ALL="C"))
    except (safe_io.UnsafeInput, OSError) as e:
        out["error"] = str(e)
        return out
    if res.rc != 0:
        out["error"] = (res.text("stderr") or res.text()).strip()[:500] or \
            "journalctl exited %d" % res.rc
        return out
    out["source"] = "journal"
    out["unanswered"] = unanswered_allocations(res.text().splitlines(), now=time.time())
    return out


def kubelet_facts_validate(params):
    """Option checks; raises ProbeFailed naming the bad value."""
    try:
        safe_io.check_unit_name(params["journal_unit"], "journal_unit")
        safe_io.check_package_name(params.get("kubelet_package") or DEFAULT_PACKAGE,
                                   "kubelet_package")
        safe_io.check_path(params["proc_path"], "proc_path")
        if params["config_path"] is not None:
            safe_io.check_path(params["config_path"], "config_path")
        if "timeout" in params and params["timeout"] is not None:
            params["timeout"] = safe_io.check_timeout(params["timeout"], minimum=0.1,
                                                      maximum=3600)
        since = params["journal_since"]
        if not isinstance(since, str) or not since.strip() or len(since) > 64 or \
                any(ord(c) < 32 for c in since):
            raise safe_io.UnsafeInput("journal_since must be a journalctl --since time such as "
                                      "-2h, got %r" % (since,))
    except safe_io.UnsafeInput as e:
        raise ProbeFailed(str(e))


def kubelet_facts_run(params, run_command, get_bin_path, warn=None):
    """kubelet_facts: ``{"changed": False, "ansible_facts": {"kubelet": facts}}``.

    ``params`` may omit the newer options (``kubelet_package``, ``timeout``, ``node_version``):
    audit_node passes the original ones. ``warn(msg)``, when given, is called once per process
    named kubelet that is not the kubelet (``facts["impostors"]``); the module passes its own."""
    params = dict(params)
    kubelet_facts_validate(params)
    proc_path = params["proc_path"]
    config_path = params["config_path"]
    if not proc_path or not os.path.isdir(proc_path):
        raise ProbeFailed("proc_path %r is not a directory" % (proc_path,))
    if config_path is not None:
        if not config_path or not os.path.isabs(config_path):
            raise ProbeFailed("config_path %r must be an absolute path" % (config_path,))
        if os.path.isdir(config_path):
            raise ProbeFailed("config_path %r is a directory, not a KubeletConfiguration file"
                              % (config_path,))
    timeout = params.get("timeout") or 5.0
    facts = gather_kubelet_facts(proc_path=proc_path, config_path=config_path,
                                 version_timeout=min(timeout, 30.0),
                                 unit=params["journal_unit"], get_bin_path=get_bin_path,
                                 package=params.get("kubelet_package") or DEFAULT_PACKAGE,
                                 node_version=params.get("node_version"))
    facts["allocation_log"] = kubelet_allocation_log(params, run_command, get_bin_path)
    if warn is not None:
        for imp in facts["impostors"]:
            warn("process %s is named kubelet but is not the kubelet (uid %s, executable %s): "
                 "%s; ignored" % (imp["pid"], imp["uid"], imp["exe"], imp["why"]))
    return dict(changed=False, ansible_facts={"kubelet": facts})
