# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The known-bad catalog on the controller: read from the collection once per process, with the
task's ``catalog_extra``, validated once per task.

The catalog lives in ``catalog/v2/<component>.yml`` (format: ``catalog/README.md``, structure:
``catalog/schema/catalog-v2.schema.json``). Validation and evaluation are the node side's
(``plugins/module_utils/catalog/validate.py`` and ``evaluate.py``): kubegpu.fleet.driver_guard
runs the same code on the node. What only the controller does lives here: reading the YAML
files (PyYAML is a controller requirement; ``parse_document`` is the one reader of a catalog
file), the JSON schema check where ``jsonschema`` is installed, and the per-process cache.

``for_task`` is the one load of a task: the bundled files (read and validated once per process
while they are unchanged) plus the task's ``catalog_extra`` documents, validated together once.
The result carries both what the controller evaluates with (``entries``) and what a module on
the node gets (``node_catalog``, see ``module_args.py``).

``catalog_extra`` takes catalog v2 documents, each shaped like a file in ``catalog/v2/`` (one
document or a list of them); they are always validated with ``validate_catalog``, which checks
every rule of the JSON schema in code (https-only source URLs without credentials or control
characters, finite CVSS scores in 0..10, patterns, allowed keys) plus what the schema cannot say
(ordered ranges inside their branch, CVSS severity, ids unique across the bundled files and the
extra documents): the same rules as the bundled files, with or without ``jsonschema``. Where
``jsonschema`` is installed the documents also go through the schema first, which only changes
the wording of some messages.
"""
from __future__ import annotations

import copy
import json
import os

from ansible.module_utils.common.text.converters import to_native

from ansible_collections.kubegpu.fleet.plugins.module_utils.catalog.validate import (
    CatalogError,
    check_finite,
    document_list,
    validate_catalog,
)

COLLECTION_ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
CATALOG_DIR = os.path.join(COLLECTION_ROOT, "catalog", "v2")
SCHEMA_PATH = os.path.join(COLLECTION_ROOT, "catalog", "schema", "catalog-v2.schema.json")
DRIVER_COMPONENT = "driver"
DRIVER_KIND = "defect"

_CACHE = {}
# How often this process read the bundled files and validated a task's catalog_extra.
LOADS = {"bundled": 0, "extra": 0}


def catalog_files(directory):
    """The catalog files of ``directory``: its ``*.yml``/``*.yaml`` names, sorted."""
    return sorted(n for n in os.listdir(directory) if n.endswith((".yml", ".yaml")))


def parse_document(data, path):
    """One catalog file (bytes or text) -> its document, with ``_path`` set.

    The one YAML reader of catalog files: the bundled catalog, ``load_catalog`` and the CSAF
    importer's in-memory check of a merge all parse with it. Raises CatalogError when the text
    is not YAML.
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


def _read_documents(directory, names):
    docs = []
    for name in names:
        path = os.path.join(directory, name)
        with open(path, "rb") as f:
            docs.append(parse_document(f.read(), path))
    return docs


def load_catalog(directory, extra_docs=None):
    """Read every catalog file in ``directory`` (plus ``extra_docs``), validate, return the entries.

    Uncached: for tools and tests that read a catalog directory of their own.
    """
    docs = _read_documents(directory, catalog_files(directory))
    docs.extend(extra_docs or [])
    return validate_catalog(docs)


def _stamp(directory):
    out = []
    for n in catalog_files(directory):
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
    """Raise CatalogError when a document breaks the JSON schema (if jsonschema is there)."""
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
            raise CatalogError("%s document %d: %s: %s (catalog/schema/catalog-v2.schema.json)"
                               % (source, n, where, message))


def load_bundled_docs(directory=None):
    """The bundled catalog documents, validated: ``(docs, entries)``.

    Read once per process while the files are unchanged (their names, sizes and mtimes are
    compared on each call). Each file is read with ``parse_document`` and the lot validated with
    ``validate_catalog``: the CSAF importer checks a merge with the same two calls. Raises
    CatalogError (or OSError) on problems.
    """
    directory = directory or CATALOG_DIR
    key = (directory, _stamp(directory))
    if _CACHE.get("bundled_key") != key:
        docs = _read_documents(directory, [name for name, _m, _s in key[1]])
        LOADS["bundled"] += 1
        entries = validate_catalog(docs)
        _CACHE["bundled_key"] = key
        _CACHE["bundled"] = (docs, entries)
    return _CACHE["bundled"]


def _with_extra(docs, entries, extra):
    """The bundled ``entries`` plus the ``catalog_extra`` documents, validated together."""
    extra_docs = document_list(extra, "catalog_extra")
    if not extra_docs:
        return list(entries)
    LOADS["extra"] += 1
    bundled_ids = set(e["id"] for e in entries)
    clash = sorted(e["id"] for d in extra_docs
                   for e in (d["entries"] if isinstance(d.get("entries"), list) else [])
                   if isinstance(e, dict) and isinstance(e.get("id"), str) and e["id"] in bundled_ids)
    if clash:
        raise CatalogError("; ".join(
            "id %r already exists in the bundled catalog (use skip_entries to drop the bundled entry "
            "and pick a new id)" % i for i in clash), "catalog_extra")
    try:
        for n, doc in enumerate(extra_docs):  # depth and finite numbers first: the schema walk recurses
            check_finite(doc, "catalog_extra[%d]" % n)
        check_schema(extra_docs, "catalog_extra")
        return validate_catalog(list(docs) + [dict(d, _path="catalog_extra[%d]" % n)
                                              for n, d in enumerate(extra_docs)])
    except CatalogError as e:
        if e.source is not None:
            raise
        raise CatalogError(to_native(e), "catalog_extra")


def catalog_entries(extra=None, directory=None):
    """Every bundled entry plus the ``catalog_extra`` documents, validated together: the list
    ``module_utils/catalog/evaluate.evaluate`` takes (all components). Raises CatalogError
    naming the problem (``invalid catalog_extra: ...`` for one in the extra documents)."""
    docs, entries = load_bundled_docs(directory)
    return _with_extra(docs, entries, extra)


def driver_payload(docs):
    """The catalog a module on the node gets: the bundled driver document with its defect entries
    only (a new copy on each call: the caller may change it)."""
    out = []
    for doc in docs:
        if isinstance(doc, dict) and doc.get("component") == DRIVER_COMPONENT:
            slim = dict((k, v) for k, v in doc.items() if k not in ("_path", "entries"))
            slim["entries"] = [copy.deepcopy(e) for e in doc["entries"] if e.get("kind") == DRIVER_KIND]
            out.append(slim)
    return out


class TaskCatalog(object):
    """The catalog of one task, loaded once (``for_task``).

    ``entries``: what the controller evaluates with: the bundled entries plus the task's valid
    ``catalog_extra`` (the bundled entries alone when ``catalog_extra`` is invalid: the
    driver_guard probe fails with the reason, the bundled entries still apply); None, with
    ``entries_error`` saying why, only when the bundled catalog cannot be read or is invalid.

    ``node_catalog``: what a module on the node gets (the bundled driver defects); None, with
    ``error`` saying why, when the bundled catalog or ``catalog_extra`` is invalid.
    """

    __slots__ = ("entries", "entries_error", "node_catalog", "error")

    def __init__(self, entries=None, entries_error=None, node_catalog=None, error=None):
        self.entries = entries
        self.entries_error = entries_error
        self.node_catalog = node_catalog
        self.error = error


def for_task(extra=None, directory=None):
    """The task's catalog: the bundled files (cached per process) and ``extra`` validated once."""
    try:
        docs, entries = load_bundled_docs(directory)
    except CatalogError as e:
        return TaskCatalog(entries_error="catalog v2: %s" % e, error=to_native(e))
    except (IOError, OSError) as e:
        return TaskCatalog(entries_error="cannot read the catalog v2: %s" % e,
                           error="cannot read the bundled catalog %s: %s" % (directory or CATALOG_DIR, to_native(e)))
    try:
        merged = _with_extra(docs, entries, extra)
    except CatalogError as e:
        return TaskCatalog(entries=list(entries), error=to_native(e))
    return TaskCatalog(entries=merged, node_catalog=driver_payload(docs))


def preload():
    """Read and validate the bundled catalog into this process's cache; never raises (the task
    that needs the catalog reports a problem itself, with the same message).

    Called when this module is first imported. ansible-playbook's strategy loads an action
    plugin's class in its main process (``action_loader.get(..., class_only=True)``, to read
    ``BYPASS_HOST_LOOP``) before it forks a worker per host for the task, so the action plugins
    that import this module - the audit's per-node action above all - find the catalog already
    read and validated in every worker: once per ansible-playbook run instead of once per host.
    A file changed since (size or mtime) is read again: ``load_bundled_docs`` compares them.
    """
    try:
        load_bundled_docs()
    except Exception:  # pylint: disable=broad-except  # reported by the task that needs the catalog
        pass


preload()
