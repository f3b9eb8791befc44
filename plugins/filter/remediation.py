# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""kubegpu.fleet.remediation_verdict: what the audit after remediation leaves unresolved
(logic in plugin_utils/remediation/verdict.py: final_verdict)."""
from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.finding_types import SEVERITIES
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.remediation import verdict

DOCUMENTATION = r"""
name: remediation_verdict
short_description: Split the findings left after remediation into unresolved ones and those left for a person
version_added: 0.1.0
description:
  - The final check of the C(kubegpu.fleet.remediate) playbook.
  - A finding at or above O(fail_on) that the node's remediation plan (made from the audit before
    the rollout) marked manual - left for a person, such as the cluster components the GPU Operator
    or Helm deploy - is listed in RV(_value.left_for_person); every other one (something the rollout
    should have fixed, a finding that appeared during it, a cluster-wide finding) is unresolved.
options:
  _input:
    description: The audit report after remediation (the C(report) that kubegpu.fleet.audit_report returns).
    type: dict
    required: true
  fail_on:
    description: Severity threshold (C(critical), C(warning), C(info), C(never)).
    type: str
    required: true
  hosts:
    description:
      - The variables of the audited hosts (C(hostvars) entries); C(kubegpu_remediation) is the
        node's plan, C(kubegpu_node_name) (else the inventory name) its node name.
    type: list
    elements: dict
    required: true
author:
  - kubegpu.fleet maintainers (@kubegpu)
"""

EXAMPLES = r"""
- name: Fail on what the rollout should have fixed
  ansible.builtin.fail:
    msg: "{{ verdict.unresolved }}"
  when: verdict.unresolved | length > 0
  vars:
    verdict: "{{ report.report | kubegpu.fleet.remediation_verdict('info', ansible_play_hosts_all | map('extract', hostvars) | list) }}"
"""

RETURN = r"""
_value:
  description: The findings left, split in two.
  type: dict
  contains:
    unresolved:
      description: Findings the rollout should have fixed, or that appeared during it, or cluster-wide ones.
      type: list
      elements: dict
      sample: [{"node": "gpu-7", "id": "driver.known_bad", "severity": "critical"}]
    left_for_person:
      description: Findings the node's remediation plan marked manual.
      type: list
      elements: dict
"""


def remediation_verdict(report, fail_on, hosts):
    if not isinstance(report, Mapping) or not isinstance(report.get("nodes"), list):
        raise AnsibleFilterError("remediation_verdict: the input must be an audit report (a dict with nodes), got %r"
                                 % type(report).__name__)
    if fail_on not in ("never", "none") and fail_on not in SEVERITIES:
        raise AnsibleFilterError("remediation_verdict: fail_on must be critical, warning, info or never, got %r"
                                 % (fail_on,))
    plans = {}
    for hv in hosts or []:
        if not isinstance(hv, Mapping):
            raise AnsibleFilterError("remediation_verdict: hosts must be host variable dicts, got %r" % (hv,))
        name = hv.get("kubegpu_node_name") or hv.get("inventory_hostname")
        plan = hv.get("kubegpu_remediation")
        if name and isinstance(plan, Mapping):
            plans[str(name)] = plan
    return verdict.final_verdict(report, fail_on, plans)


class FilterModule(object):
    """kubegpu.fleet remediation filters."""

    def filters(self):
        return {"remediation_verdict": remediation_verdict}
