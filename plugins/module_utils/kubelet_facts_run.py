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

from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet import (
    gather_kubelet_facts,
    unanswered_allocations,
)
from ansible_collections.kubegpu.fleet.plugins.module_utils.node_probes import ProbeFailed


def kubelet_allocation_log(params, run_command, get_bin_path):
    """Unanswered device-plugin calls from the kubelet's journal (never fails the task)."""
    out = {"source": None, "unit": params["journal_unit"], "since": params["journal_since"],
           "error": None, "unanswered": []}
    if not params["scan_journal"]:
        return out
    journalctl = get_bin_path("journalctl")
    if journalctl is None:
        out["error"] = "journalctl not found"
        return out
    rc, stdout, stderr = run_command(
        [journalctl, "-u", params["journal_unit"], "--since", params["journal_since"],
         "-o", "short-unix", "--no-pager", "-q"],
        environ_update={"SYSTEMD_PAGER": "", "LC_ALL": "C"})
    if rc != 0:
        out["error"] = (stderr or stdout).strip()[:500] or "journalctl exited %d" % rc
        return out
    out["source"] = "journal"
    out["unanswered"] = unanswered_allocations(stdout.splitlines(), now=time.time())
    return out


def kubelet_facts_run(params, run_command, get_bin_path):
    """kubelet_facts: ``{"changed": False, "ansible_facts": {"kubelet": facts}}``."""
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
    facts = gather_kubelet_facts(proc_path=proc_path, config_path=config_path,
                                 path_binary=get_bin_path("kubelet"))
    facts["allocation_log"] = kubelet_allocation_log(params, run_command, get_bin_path)
    return dict(changed=False, ansible_facts={"kubelet": facts})
