# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
name: catalog_overlay
short_description: The catalog documents of the audit - catalog_extra plus the refresh job's overlay
version_added: 0.1.0
description:
  - Returns the catalog v2 documents the audit and the driver role pass as C(catalog_extra) - the
    documents of O(extra) (one document or a list) followed by those of the overlay file that
    M(kubegpu.fleet.catalog_refresh) wrote.
  - The overlay is read on the controller as a regular file of at most 64 MiB and parsed with the
    catalog's own reader; the audit validates the documents together with the bundled catalog.
  - An empty path returns O(extra) alone. A path without a file is an error (run the refresh first).
options:
  _terms:
    description: The overlay file's path (one; empty for none).
    required: true
  extra:
    description: Site-local catalog v2 documents (C(kubegpu_catalog_extra)).
    type: raw
    default: []
author:
  - kubegpu.fleet maintainers (@kubegpu)
"""

EXAMPLES = r"""
- name: Audit with the refreshed catalog
  kubegpu.fleet.audit_node:
    catalog_extra: "{{ query('kubegpu.fleet.catalog_overlay', '/var/lib/kubegpu/catalog-overlay.yml',
                     extra=kubegpu_catalog_extra) }}"
"""

RETURN = r"""
_raw:
  description: Catalog v2 documents.
  type: list
  elements: dict
"""

from ansible.errors import AnsibleError
from ansible.plugins.lookup import LookupBase

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.catalog import refresh


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        try:
            return refresh.overlay_documents(terms, self.get_option("extra"))
        except refresh.RefreshError as e:
            raise AnsibleError(str(e))
