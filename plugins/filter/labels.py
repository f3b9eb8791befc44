# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""kubegpu.fleet.has_label: the one skip-label test of every role (logic in plugin_utils/k8s/labels.py)."""
from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.k8s import labels

DOCUMENTATION = r"""
name: has_label
short_description: Does a Kubernetes object carry a label (key=value, or key with any value)?
version_added: 0.1.0
description:
  - The parser behind O(kubegpu.fleet._common#role:shared:kubegpu_skip_label) in every role of the collection.
  - C(key=value) matches the label with exactly that value; C(key) matches the label with any
    value; an empty selector matches nothing.
options:
  _input:
    description: The object as the Kubernetes API returns it (C(metadata.labels) is read).
    type: dict
    required: true
  selector:
    description: C(key=value) or C(key).
    type: str
    required: true
author:
  - kubegpu.fleet maintainers (@kubegpu)
"""

EXAMPLES = r"""
- name: Leave a skip-labelled node alone
  ansible.builtin.meta: end_host
  when: node.resources[0] | kubegpu.fleet.has_label(kubegpu_skip_label)
"""

RETURN = r"""
_value:
  description: Whether the object matches.
  type: bool
"""


def has_label(obj, selector):
    try:
        return labels.has_label(obj, selector)
    except labels.LabelError as exc:
        raise AnsibleFilterError(str(exc))


class FilterModule(object):
    """kubegpu.fleet label filters."""

    def filters(self):
        return {"has_label": has_label}
