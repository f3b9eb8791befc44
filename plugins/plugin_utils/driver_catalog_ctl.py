# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of the driver catalog, shared by every action plugin that runs driver_guard.

Modules run on the node and cannot read the collection's data files, so the action plugins of
``driver_guard``, ``audit_node``, ``reboot_need`` and ``rollout_node_check`` load catalog v2
(``<collection>/catalog/v2/*.yml``) here, validate it together with the task's
``catalog_extra`` documents (a bad catalog fails on the controller, before anything runs on
the node) and pass the driver defects to the module in the internal ``_catalog`` option. The
catalog is replaced by a one-line summary in the returned ``invocation``.

``catalog_extra`` takes catalog v2 documents, each shaped like a file in ``catalog/v2/`` (one
document or a list of them); they are always validated with ``catalog_v2.validate_catalog``,
which checks every rule of ``catalog/schema/catalog-v2.schema.json`` in code (https-only source
URLs without credentials or control characters, finite CVSS scores in 0..10, patterns, allowed
keys) plus what the schema cannot say (ordered ranges inside their branch, CVSS severity, ids
unique across the bundled files and the extra documents): the same rules as the bundled files,
with or without ``jsonschema``. Where ``jsonschema`` is installed the documents also go through
the schema first, which only changes the wording of some messages.
"""
from __future__ import annotations

import copy
import json
import os

from ansible.module_utils.common.text.converters import to_native

from ansible_collections.kubegpu.fleet.plugins.module_utils.driver.catalog import (
    COMPONENT,
    KIND,
    CatalogError as DriverCatalogError,
    _doc_list,
)
from ansible_collections.kubegpu.fleet.plugins.plugin_utils import catalog_v2

COLLECTION_ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
CATALOG_DIR = os.path.join(COLLECTION_ROOT, "catalog", "v2")
SCHEMA_PATH = os.path.join(COLLECTION_ROOT, "catalog", "schema", "catalog-v2.schema.json")

_CACHE = {}


def _stamp(directory):
    names = catalog_v2.catalog_files(directory)
    out = []
    for n in names:
        st = os.stat(os.path.join(directory, n))
        out.append((n, st.st_mtime_ns, st.st_size))
    return tuple(out)


def _schema_validator():
    """A jsonschema validator for catalog v2 documents, or None without jsonschema."""
    if "validator" not in _CACHE:
        try:
            import jsonschema
        except ImportError:
            _CACHE["validator"] = None
        else:
            with open(SCHEMA_PATH) as f:
                _CACHE["validator"] = jsonschema.Draft202012Validator(json.load(f))
    return _CACHE["validator"]


def check_schema(docs, source):
    """Raise catalog_v2.CatalogError when a document breaks the JSON schema (if jsonschema is there)."""
    validator = _schema_validator()
    if validator is None:
        return
    for n, doc in enumerate(docs):
        clean = dict((k, v) for k, v in doc.items() if k != "_path") if isinstance(doc, dict) else doc
        errors = sorted(validator.iter_errors(clean), key=lambda e: list(e.absolute_path))
        if errors:
            err = errors[0]
            where = "/".join(str(p) for p in err.absolute_path)[:200] or "(document)"
            message = err.message if len(err.message) <= 300 else err.message[:300] + "..."
            raise catalog_v2.CatalogError("%s document %d: %s: %s (catalog/schema/catalog-v2.schema.json)"
                                          % (source, n, where, message))


def load_bundled_docs(directory=None):
    """The bundled catalog v2 documents, validated (cached per process while the files are unchanged).

    Returns ``(docs, entries)``; raises catalog_v2.CatalogError (or OSError) on problems. Each
    file is read with ``catalog_v2.parse_document`` and the lot validated with
    ``catalog_v2.validate_catalog``: the CSAF importer checks a merge with the same two calls.
    """
    directory = directory or CATALOG_DIR
    key = (directory, _stamp(directory))
    if _CACHE.get("bundled_key") != key:
        docs = []
        for name, _m, _s in key[1]:
            path = os.path.join(directory, name)
            with open(path, "rb") as f:
                docs.append(catalog_v2.parse_document(f.read(), path))
        entries = catalog_v2.validate_catalog(docs)
        _CACHE["bundled_key"] = key
        _CACHE["bundled"] = (docs, entries)
    return _CACHE["bundled"]


def catalog_entries(extra=None, directory=None):
    """Every bundled v2 entry plus the ``catalog_extra`` documents, validated together.

    The list catalog_v2.evaluate takes (all components). Raises catalog_v2.CatalogError or
    driver_catalog.CatalogError naming the problem.
    """
    docs, entries = load_bundled_docs(directory)
    extra_docs = _doc_list(extra, "catalog_extra")
    if not extra_docs:
        return list(entries)
    bundled_ids = set(e["id"] for e in entries)
    clash = sorted(e["id"] for d in extra_docs
                   for e in (d["entries"] if isinstance(d.get("entries"), list) else [])
                   if isinstance(e, dict) and isinstance(e.get("id"), str) and e["id"] in bundled_ids)
    if clash:
        raise DriverCatalogError("catalog_extra", [
            "id %r already exists in the bundled catalog (use skip_entries to drop the bundled entry "
            "and pick a new id)" % i for i in clash])
    try:
        for n, doc in enumerate(extra_docs):  # depth and finite numbers first: the schema walk recurses
            catalog_v2.check_finite(doc, "catalog_extra[%d]" % n)
        check_schema(extra_docs, "catalog_extra")
        return catalog_v2.validate_catalog(list(docs) + [dict(d, _path="catalog_extra[%d]" % n)
                                                         for n, d in enumerate(extra_docs)])
    except catalog_v2.CatalogError as e:
        raise DriverCatalogError("catalog_extra", [to_native(e)])


def driver_payload(docs):
    """The ``_catalog`` the node gets: the bundled driver document with its defect entries only."""
    out = []
    for doc in docs:
        if isinstance(doc, dict) and doc.get("component") == COMPONENT:
            slim = dict((k, v) for k, v in doc.items() if k not in ("_path", "entries"))
            slim["entries"] = [copy.deepcopy(e) for e in doc["entries"] if e.get("kind") == KIND]
            out.append(slim)
    return out


def catalog_with_extra(extra, directory=None):
    """``(catalog, None)``: the node payload (bundled driver defects), after validating the whole
    bundled catalog with ``catalog_extra``; or ``(None, message)`` when either is invalid or the
    bundled files cannot be read."""
    try:
        catalog_entries(extra, directory)
        docs, _entries = load_bundled_docs(directory)
    except (catalog_v2.CatalogError, DriverCatalogError) as e:
        return None, to_native(e)
    except (IOError, OSError) as e:
        return None, "cannot read the bundled catalog %s: %s" % (directory or CATALOG_DIR, to_native(e))
    return driver_payload(docs), None


def args_with_catalog(task_args, owner, directory=None):
    """``(args, catalog, error)`` for a module that takes the catalog in ``_catalog``: a copy of
    the task's arguments with the bundled driver defects added (``catalog_extra`` validated and
    passed on), or without it and ``error`` set when the catalog is invalid. Raises ValueError
    when the task passed the internal ``_catalog`` itself."""
    args = dict(task_args)
    if "_catalog" in args:
        raise ValueError("_catalog is internal to %s: the bundled catalog is loaded by the action plugin; "
                         "use catalog_extra to add entries" % owner)
    catalog, error = catalog_with_extra(args.get("catalog_extra"), directory)
    if catalog is not None:
        args["_catalog"] = catalog
    return args, catalog, error


def redact_catalog(module_result, catalog):
    """Replace the injected catalog in the echoed invocation by a one-line summary."""
    invocation = module_result.get("invocation")
    if isinstance(invocation, dict) and isinstance(invocation.get("module_args"), dict):
        if invocation["module_args"].get("_catalog") is not None:
            invocation["module_args"]["_catalog"] = "<bundled catalog v2 %s: %d driver defect entries>" % (
                os.path.join(CATALOG_DIR, "driver.yml"), sum(len(d["entries"]) for d in catalog or []))
