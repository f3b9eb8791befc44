# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The work of the kubegpu.fleet.catalog_refresh action: NVIDIA's CSAF bulletins -> a catalog
overlay the audit loads (``kubegpu_catalog_overlay``, the ``catalog_overlay`` lookup).

Sources, one per task: ``index_url`` (a CSAF ``index.txt``, CSAF 2.0 section 7.1.13: one
document path per line, relative to the index's directory, as NVIDIA's repository lays its
bulletins out: ``<year>/<id>/<id>.json``), ``urls`` (document URLs), or ``mirror_dir`` (an
air-gapped copy of the repository: every ``<id>/<id>.json`` below it). Downloads use Ansible's
``open_url`` with a per-read ``timeout``, a whole-download deadline and a size bound per document
(``csaf.MAX_BYTES``); at most ``max_documents``. Each document is parsed and converted by the
importer the maintainers use (``csaf.py``: ``parse_bound`` bounds, a deadline per document),
products that are not a node component skipped (NVIDIA's repository holds every product).

The overlay holds the entries whose id the bundled catalog lacks (a newer bulletin); an entry the
bundled catalog has already and that NVIDIA's document now describes otherwise is listed in
``differs`` (update the collection): ids stay unique, as ``catalog_extra`` requires. The overlay
is validated with the bundled catalog exactly as the audit will load it (``load._with_extra``:
schema rules, ranges, severities, unique ids) and read back from its YAML text before it is
written through ``fileutil`` (atomic, the previous overlay backed up 0600). Any failure - a
download, a document, the validation - fails the task and writes nothing: the last good overlay
stays in place.
"""
from __future__ import annotations

import datetime
import os
import posixpath
import re
import time

from ansible.module_utils.common.text.converters import to_native

from ansible_collections.kubegpu.fleet.plugins.module_utils._common import fileutil
from ansible_collections.kubegpu.fleet.plugins.module_utils.catalog import validate as catalog_validate
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.action import runner
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.catalog import csaf
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.catalog import load

INDEX_MAX_BYTES = 1 << 20
OVERLAY_MAX_BYTES = 64 << 20
DOWNLOAD_DEADLINE = 120.0   # seconds per document, whatever the server does
MAX_DOCUMENTS = 5000
_CHUNK = 1 << 16
# an index line: a relative path of NVIDIA's layout (or any relative path without '..')
_INDEX_LINE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,255}$")

ARGUMENT_SPEC = {
    "index_url": {"type": "str"},
    "urls": {"type": "list", "elements": "str"},
    "mirror_dir": {"type": "path"},
    "dest": {"type": "path", "required": True},
    "timeout": {"type": "float", "default": 30.0},
    "max_documents": {"type": "int", "default": 1000},
    "validate_certs": {"type": "bool", "default": True},
    "verified": {"type": "str"},
}
MUTUALLY_EXCLUSIVE = [["index_url", "urls", "mirror_dir"]]


class RefreshError(Exception):
    """The refresh cannot produce an overlay; the message says which source or check failed."""


def _http_url(url, what):
    if not isinstance(url, str) or not re.match(r"^https?://[^/\s]+(/[^\s]*)?$", url):
        raise RefreshError("%s %s is not an http(s) URL" % (what, catalog_validate.short(url)))
    return url


def fetch(url, timeout, validate_certs, limit, opener=None, clock=time.monotonic):
    """The body of ``url``: at most ``limit`` bytes (more is an error), every read within
    ``timeout`` and the whole download within DOWNLOAD_DEADLINE (on ``clock``). Raises
    RefreshError."""
    if opener is None:
        from ansible.module_utils.urls import open_url as opener
    start = clock()
    try:
        resp = opener(url, timeout=timeout, validate_certs=validate_certs, follow_redirects="safe",
                      headers={"Accept": "application/json, text/plain"})
    except Exception as e:  # open_url raises urllib's, ssl's and socket's errors
        raise RefreshError("cannot fetch %s: %s" % (url, to_native(e)))
    chunks, size = [], 0
    try:
        while True:
            if clock() - start > DOWNLOAD_DEADLINE:
                raise RefreshError("%s: the download took longer than %.0f s" % (url, DOWNLOAD_DEADLINE))
            chunk = resp.read(min(_CHUNK, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise RefreshError("%s is larger than %d bytes" % (url, limit))
    except RefreshError:
        raise
    except Exception as e:
        raise RefreshError("cannot read %s: %s" % (url, to_native(e)))
    finally:
        close = getattr(resp, "close", None)
        if close:
            close()
    return b"".join(chunks)


def index_urls(index_url, text):
    """Document URLs of a CSAF ``index.txt``: each non-empty line a path relative to the index's
    directory (no scheme, no '..', no leading '/'); ``#`` comments and blank lines skipped."""
    base = index_url.rsplit("/", 1)[0] + "/"
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if not _INDEX_LINE.match(line) or ".." in line.split("/") or "//" in line:
            raise RefreshError("%s line %d: %s is not a relative document path" % (index_url, n,
                                                                                   catalog_validate.short(line)))
        if line.endswith(".json"):
            out.append(base + posixpath.normpath(line))
    return out


def mirror_files(directory, limit):
    """The CSAF documents below ``directory``: NVIDIA's layout ``<id>/<id>.json`` (the
    repository keeps CVE records, ``<id>/CVE-*.json``, beside them: not CSAF) or a flat copy of
    bulletins ``<id>.json`` (a numeric id); symlinks not followed, sorted; at most ``limit``."""
    if not os.path.isdir(directory):
        raise RefreshError("mirror_dir %s is not a directory" % directory)
    out = []
    for root, dirs, files in os.walk(directory, followlinks=False):
        dirs.sort()
        for name in sorted(files):
            if name == os.path.basename(root) + ".json" or re.match(r"^\d+\.json$", name):
                out.append(os.path.join(root, name))
                if len(out) > limit:
                    raise RefreshError("mirror_dir %s holds more than %d documents (max_documents)" % (directory, limit))
    return out


def _convert(data, where, verified):
    try:
        with csaf.deadline(csaf.DEADLINE):
            doc = csaf.parse_json(data)
            return csaf.import_advisory(doc, path=where, verified=verified, unknown_products="skip")
    except (csaf.CsafError, catalog_validate.CatalogError, csaf.DeadlineExceeded) as e:
        raise RefreshError("%s: %s" % (where, e))
    except (RecursionError, MemoryError) as e:
        raise RefreshError("%s: too large or nested to convert (%s)" % (where, type(e).__name__))


def read_sources(args, opener=None):
    """``[(where, import_advisory result)]`` of every document of the task's source; a source
    without any document is an error (an empty overlay would replace a good one)."""
    results = _read_sources(args, opener)
    if not results:
        where = args.get("mirror_dir") or args.get("index_url") or "urls"
        raise RefreshError("%s holds no CSAF document" % where)
    return results


def _read_sources(args, opener=None):
    limit = args["max_documents"]
    verified = args.get("verified") or datetime.date.today().isoformat()
    results = []
    if args.get("mirror_dir"):
        for path in mirror_files(args["mirror_dir"], limit):
            try:
                data = _read_file(path)
            except (OSError, csaf.CsafError) as e:
                raise RefreshError("%s: %s" % (path, e))
            results.append((path, _convert(data, path, verified)))
        return results
    if args.get("index_url"):
        index = _http_url(args["index_url"], "index_url")
        text = fetch(index, args["timeout"], args["validate_certs"], INDEX_MAX_BYTES, opener)
        try:
            urls = index_urls(index, text.decode("utf-8"))
        except UnicodeDecodeError:
            raise RefreshError("%s is not UTF-8 text" % index)
    else:
        urls = [_http_url(u, "urls entry") for u in args.get("urls") or []]
    if len(urls) > limit:
        raise RefreshError("%d documents, more than max_documents (%d)" % (len(urls), limit))
    for url in urls:
        data = fetch(url, args["timeout"], args["validate_certs"], csaf.MAX_BYTES, opener)
        results.append((url, _convert(data, url, verified)))
    return results


def _read_file(path):
    """A mirror's document: a regular file of at most csaf.MAX_BYTES (never a FIFO or device)."""
    import stat
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise csaf.CsafError("not a regular file")
        data = fileutil.read_fd(fd, csaf.MAX_BYTES)
        if len(data) > csaf.MAX_BYTES:
            raise csaf.CsafError("larger than %d bytes" % csaf.MAX_BYTES)
        return data
    finally:
        os.close(fd)


def build_overlay(results, bundled_docs, bundled_entries):
    """``(overlay documents, summary)`` from the converted documents: the entries the bundled
    catalog lacks, per component, validated with the bundled catalog as the audit loads them.
    Raises RefreshError when the overlay does not validate."""
    try:
        generated, notes = csaf.combine(results)
    except csaf.CsafError as e:
        raise RefreshError("%s%s" % ("%s: " % e.path if e.path else "", e))
    have = dict((e["id"], e) for e in bundled_entries)
    docs, new_ids, differs = [], [], []
    for component in sorted(generated):
        fresh = [e for e in generated[component] if e["id"] not in have]
        differs.extend(csaf.compare([e for e in generated[component] if e["id"] in have],
                                    [have[e["id"]] for e in generated[component] if e["id"] in have], component))
        if fresh:
            docs.append({"schema_version": 2, "component": component,
                         "version_scheme": catalog_validate.COMPONENT_SCHEMES[component], "entries": fresh})
            new_ids.extend(e["id"] for e in fresh)
    try:
        load._with_extra(bundled_docs, bundled_entries, [csaf._plain(d) for d in docs])  # pylint: disable=protected-access
    except catalog_validate.CatalogError as e:
        raise RefreshError("the overlay does not validate with the bundled catalog, nothing written: %s" % e)
    bulletins = sorted(set(str(r["advisory"]["id"]) for _w, r in results if r.get("entries")))
    newest = max((e["advisory"] for d in docs for e in d["entries"]), key=lambda a: (str(a["date"]), str(a["id"])),
                 default=None)
    return docs, {"new_entries": sorted(new_ids), "differs": differs, "notes": notes, "bulletins": bulletins,
                  "newest_bulletin": csaf._plain(newest) if newest else None}  # pylint: disable=protected-access


def overlay_text(docs, summary, source, today):
    header = ("kubegpu.fleet catalog overlay, written by kubegpu.fleet.catalog_refresh on %s from %s.\n"
              "Entries of NVIDIA bulletins the bundled catalog lacks; loaded by the audit through\n"
              "kubegpu_catalog_overlay (catalog/README.md, \"Refreshing the catalog\"). Do not edit: the next\n"
              "refresh rewrites it. Bulletins read: %s." % (today, source, ", ".join(summary["bulletins"]) or "none"))
    text = csaf.dump_documents(docs, header)
    back = load.parse_document(text, "the overlay")
    if csaf._plain(back) != csaf._plain(docs):  # pylint: disable=protected-access
        raise RefreshError("the overlay does not read back as written, nothing written")
    return text


def read_overlay(path):
    """The documents of an overlay file (the ``catalog_overlay`` lookup): a regular file of at most
    OVERLAY_MAX_BYTES, YAML through ``load.parse_document``, a list of catalog v2 documents."""
    import stat
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise RefreshError("no catalog overlay at %s: run playbooks/catalog_refresh.yml first, or leave "
                           "kubegpu_catalog_overlay empty" % path)
    except OSError as e:
        raise RefreshError("cannot read the catalog overlay %s: %s" % (path, e))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise RefreshError("the catalog overlay %s is not a regular file" % path)
        data = fileutil.read_fd(fd, OVERLAY_MAX_BYTES)
        if len(data) > OVERLAY_MAX_BYTES:
            raise RefreshError("the catalog overlay %s is larger than %d bytes" % (path, OVERLAY_MAX_BYTES))
    finally:
        os.close(fd)
    try:
        docs = load.parse_document(data, path)
    except catalog_validate.CatalogError as e:
        raise RefreshError(str(e))
    if docs is None:
        return []
    if not isinstance(docs, list) or not all(isinstance(d, dict) for d in docs):
        raise RefreshError("the catalog overlay %s is not a list of catalog v2 documents" % path)
    return docs


def overlay_documents(terms, extra):
    """The ``catalog_overlay`` lookup: the documents of ``extra`` (one or a list) and of the
    overlay file ``terms[0]`` (none for an empty path)."""
    if len(terms) > 1:
        raise RefreshError("catalog_overlay takes one path, got %d" % len(terms))
    if extra is None or extra == "":
        extra = []
    docs = [extra] if isinstance(extra, dict) else list(extra) if isinstance(extra, (list, tuple)) else None
    if docs is None:
        raise RefreshError("extra must be a catalog v2 document or a list of them, got %s" % type(extra).__name__)
    path = terms[0] if terms else ""
    if path:
        docs.extend(read_overlay(str(path)))
    return docs


def work(task, args):
    sources = [k for k in ("index_url", "urls", "mirror_dir") if args.get(k)]
    if len(sources) != 1:
        raise runner.ActionFailed("give one source: index_url, urls or mirror_dir")
    if args["timeout"] <= 0 or args["timeout"] > 3600:
        raise runner.ActionFailed("timeout must be between 0 and 3600 seconds, got %s" % args["timeout"])
    if not 1 <= args["max_documents"] <= MAX_DOCUMENTS:
        raise runner.ActionFailed("max_documents must be between 1 and %d, got %d" % (MAX_DOCUMENTS, args["max_documents"]))
    if args.get("verified") and not re.match(r"^\d{4}-\d\d-\d\d$", args["verified"]):
        raise runner.ActionFailed("verified must be a date YYYY-MM-DD, got %s" % catalog_validate.short(args["verified"]))
    dest = args["dest"]
    problem = fileutil.unsafe_target(dest)
    if problem:
        raise runner.ActionFailed(problem)
    try:
        bundled_docs, bundled_entries = load.load_bundled_docs()
        results = read_sources(args)
        docs, summary = build_overlay(results, bundled_docs, bundled_entries)
        today = datetime.date.today().isoformat()
        text = overlay_text(docs, summary, args[sources[0]] if sources[0] != "urls" else "%d URLs" % len(args["urls"]),
                            today)
    except RefreshError as e:
        raise runner.ActionFailed("%s; the last overlay at %s is kept" % (e, dest))
    except (catalog_validate.CatalogError, OSError) as e:
        raise runner.ActionFailed("cannot refresh the catalog: %s; the last overlay at %s is kept" % (e, dest))
    try:
        with open(dest, "rb") as f:
            before = f.read(OVERLAY_MAX_BYTES + 1).decode("utf-8", "replace")
    except FileNotFoundError:
        before = None
    except OSError as e:
        raise runner.ActionFailed("cannot read the current overlay %s: %s" % (dest, e))
    data = text.encode("utf-8")
    # the header's date alone does not make a change
    changed = before is None or _body(before) != _body(text)
    out = {"changed": changed, "dest": dest, "documents": len(results), "bulletins": summary["bulletins"],
           "new_entries": summary["new_entries"], "differs": summary["differs"],
           "newest_bulletin": summary["newest_bulletin"], "backup": None}
    if summary["differs"]:
        out["warnings"] = ["%d bundled entries differ from NVIDIA's documents (update the collection): %s"
                           % (len(summary["differs"]), "; ".join(summary["differs"][:5]))]
    if task.diff:
        out["diff"] = {"before": before or "", "after": text, "before_header": dest, "after_header": dest}
    if changed and not task.check_mode:
        try:
            out["backup"] = fileutil.write_file(dest, data, mode=0o644, backup=before is not None)
        except OSError as e:
            raise runner.ActionFailed("cannot write the overlay %s: %s; the last overlay is kept" % (dest, e))
    return out


def _body(text):
    return "\n".join(line for line in text.splitlines() if not line.startswith("#"))


ACTION = runner.Action(ARGUMENT_SPEC, work, mutually_exclusive=MUTUALLY_EXCLUSIVE)
