# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Known-bad catalog v2 on the controller: loading plus the shared validation and evaluation.

The catalog lives in ``catalog/v2/<component>.yml`` (format: ``catalog/README.md``, structure:
``catalog/schema/catalog-v2.schema.json``). Validation and evaluation (ordering, never
membership in a list) live in ``plugins/module_utils/driver/catalog_core.py`` so that the node
(``kubegpu.fleet.driver_guard``) evaluates with the very same code; this module re-exports that
API (``evaluate``, ``evaluate_many``, ``validate_catalog``, ``validate_entry``,
``normalize_version_text``, ``parse_version``, ``CONDITIONS``, ``COMPONENT_SCHEMES``, ...) and
adds ``load_catalog``, which reads the YAML files (PyYAML is a controller requirement).
"""
from __future__ import annotations

import os

from ansible_collections.kubegpu.fleet.plugins.module_utils.driver.catalog_core import (  # noqa: F401  pylint: disable=unused-import
    COMPONENT_SCHEMES,
    CONDITIONS,
    SCHEMA_VERSION,
    SEVERITIES,
    CatalogError,
    check_structure,
    condition_states,
    cvss_rating,
    evaluate,
    evaluate_many,
    in_branch,
    match_entry,
    normalize_version_text,
    parse_version,
    range_text,
    validate_catalog,
    validate_entry,
)


def load_catalog(directory, extra_docs=None):
    """Read every ``*.yml`` in ``directory`` (plus ``extra_docs``), validate, return entries."""
    import yaml  # controller side: PyYAML is a requirement of the collection

    docs = []
    for name in sorted(os.listdir(directory)):
        if not name.endswith((".yml", ".yaml")):
            continue
        path = os.path.join(directory, name)
        with open(path) as f:
            doc = yaml.safe_load(f)
        if isinstance(doc, dict):
            doc["_path"] = path
        docs.append(doc)
    docs.extend(extra_docs or [])
    return validate_catalog(docs)
