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
adds ``parse_document`` (the one reader of a catalog file) and ``load_catalog``, which reads the
YAML files (PyYAML is a controller requirement).
"""
from __future__ import annotations

import os

from ansible_collections.kubegpu.fleet.plugins.module_utils.driver.catalog_core import (  # noqa: F401  pylint: disable=unused-import
    COMPONENT_SCHEMES,
    CONDITIONS,
    CVSS_VECTOR_RE,
    SCHEMA_VERSION,
    SEVERITIES,
    CatalogError,
    check_finite,
    check_structure,
    condition_states,
    cvss_rating,
    evaluate,
    evaluate_many,
    in_branch,
    is_finite_number,
    is_safe_url,
    match_entry,
    normalize_version_text,
    parse_version,
    range_text,
    short,
    url_problem,
    validate_catalog,
    validate_entry,
)


def catalog_files(directory):
    """The catalog files of ``directory``: its ``*.yml``/``*.yaml`` names, sorted."""
    return sorted(n for n in os.listdir(directory) if n.endswith((".yml", ".yaml")))


def parse_document(data, path):
    """One catalog file (bytes or text) -> its document, with ``_path`` set.

    The one YAML reader of catalog files: the audit's loader (``driver_catalog_ctl``),
    ``load_catalog`` and the CSAF importer's in-memory check of a merge all parse with it.
    Raises CatalogError when the text is not YAML.
    """
    import yaml  # controller side: PyYAML is a requirement of the collection

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        doc = yaml.load(data, Loader=loader)  # nosec: a safe loader
    except yaml.YAMLError as e:
        raise CatalogError("catalog file %s: not valid YAML: %s" % (path, e))
    if isinstance(doc, dict):
        doc["_path"] = path
    return doc


def load_catalog(directory, extra_docs=None):
    """Read every ``*.yml`` in ``directory`` (plus ``extra_docs``), validate, return entries."""
    docs = []
    for name in catalog_files(directory):
        path = os.path.join(directory, name)
        with open(path, "rb") as f:
            docs.append(parse_document(f.read(), path))
    docs.extend(extra_docs or [])
    return validate_catalog(docs)
