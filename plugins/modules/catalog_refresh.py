#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# This module is implemented as an action plugin and runs on the controller.
from __future__ import annotations

DOCUMENTATION = r"""
module: catalog_refresh
short_description: Refresh the known-bad catalog from NVIDIA's CSAF security bulletins (an overlay file)
version_added: 0.1.0
description:
  - Reads NVIDIA's CSAF 2.0 security bulletins from a URL (a CSAF C(index.txt), or a list of document
    URLs) or from a mirror directory (air-gapped fleets), converts them with the importer the
    collection's maintainers use (C(plugins/plugin_utils/catalog/csaf.py)) and writes a catalog overlay -
    a YAML list of catalog v2 documents holding the entries of bulletins the bundled catalog lacks.
  - The audit loads the overlay through the role variable C(kubegpu_catalog_overlay) (the
    P(kubegpu.fleet.catalog_overlay#lookup) lookup adds it to C(kubegpu_catalog_extra)).
  - The overlay is validated with the bundled catalog exactly as the audit loads it before it is
    written. A download, a document or a validation that fails fails the task and writes nothing - the
    last good overlay stays in place. The previous overlay is backed up (0600) beside it.
  - An entry the bundled catalog has already and that NVIDIA's document now describes otherwise is
    not overlaid (ids are unique); it is listed in RV(differs) with a warning - update the collection.
  - Products of NVIDIA's repository that are not a component of a GPU node (CUDA, networking,
    firmware, other software) are skipped.
options:
  index_url:
    description:
      - URL of a CSAF C(index.txt) (CSAF 2.0 section 7.1.13) - one document path per line, relative to
        the index's directory (NVIDIA's layout C(<year>/<id>/<id>.json)); blank lines and C(#) comments
        are skipped.
      - One of O(index_url), O(urls), O(mirror_dir).
    type: str
  urls:
    description:
      - URLs of CSAF documents (http or https), for example
        C(https://raw.githubusercontent.com/NVIDIA/product-security/main/2026/5861/5861.json).
    type: list
    elements: str
  mirror_dir:
    description:
      - A directory on the controller holding a copy of NVIDIA's repository - every C(<id>/<id>.json) below
        it is read (NVIDIA's layout; the C(CVE-*.json) records beside them are not CSAF) - or a flat copy of
        bulletins (C(<id>.json), a numeric id); symlinks are not followed.
      - A directory without any document fails the task (an empty overlay would replace a good one).
    type: path
  dest:
    description:
      - The overlay file to write on the controller (its directory must exist and be writable only by
        the user running the play).
    type: path
    required: true
  timeout:
    description:
      - Seconds each network read may take (a whole document may take at most 120 seconds).
    type: float
    default: 30
  max_documents:
    description:
      - The most documents one refresh reads (1 to 5000).
    type: int
    default: 1000
  validate_certs:
    description:
      - Verify the TLS certificates of https URLs.
    type: bool
    default: true
  verified:
    description:
      - The date (YYYY-MM-DD) recorded in each entry's C(sources[].verified); default today.
    type: str
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - kubegpu.fleet.controller_action
attributes:
  check_mode:
    support: full
    details: Downloads, converts and validates, and reports whether the overlay would change; writes nothing.
  diff_mode:
    support: full
notes:
  - Each document is at most 8 MiB, nested at most 32 levels, strict JSON, converted within 30 seconds.
seealso:
  - name: Catalog refresh
    description: catalog/README.md, "Refreshing the catalog" (connected and air-gapped fleets).
    link: https://github.com/kubegpu/fleet/blob/main/catalog/README.md
"""

EXAMPLES = r"""
- name: Refresh from a mirror of NVIDIA's repository served inside the site
  kubegpu.fleet.catalog_refresh:
    index_url: https://mirror.example.com/nvidia-product-security/index.txt
    dest: /var/lib/kubegpu/catalog-overlay.yml

- name: Refresh from a directory (air-gapped)
  kubegpu.fleet.catalog_refresh:
    mirror_dir: /srv/mirrors/nvidia-product-security
    dest: /var/lib/kubegpu/catalog-overlay.yml

- name: Two bulletins straight from NVIDIA's repository
  kubegpu.fleet.catalog_refresh:
    urls:
      - https://raw.githubusercontent.com/NVIDIA/product-security/main/2026/5861/5861.json
      - https://raw.githubusercontent.com/NVIDIA/product-security/main/2026/5857/5857.json
    dest: /var/lib/kubegpu/catalog-overlay.yml
"""

RETURN = r"""
dest:
  description: The overlay file.
  returned: success
  type: str
documents:
  description: How many documents were read.
  returned: success
  type: int
bulletins:
  description: Ids of the bulletins that hold rows of a GPU node's components.
  returned: success
  type: list
  elements: str
new_entries:
  description: Ids of the overlay's entries (those the bundled catalog lacks).
  returned: success
  type: list
  elements: str
differs:
  description: Bundled entries whose CSAF fields differ from NVIDIA's documents (not overlaid).
  returned: success
  type: list
  elements: str
newest_bulletin:
  description: The newest bulletin of the overlay (publisher, id, title, revision, date); null when the overlay is empty.
  returned: success
  type: dict
backup:
  description: The backup of the previous overlay, when one was replaced.
  returned: changed
  type: str
"""
