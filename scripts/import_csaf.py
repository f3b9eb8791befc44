# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Import NVIDIA CSAF 2.0 security bulletins into the kubegpu.fleet catalog v2.

Maintainer tool (not part of the Galaxy artifact). Usage, from the repository root:

    .venv/bin/python scripts/import_csaf.py 2025/5659/5659.json            # print YAML per component
    .venv/bin/python scripts/import_csaf.py --check catalog/v2 DOC.json ... # compare with the catalog
    .venv/bin/python scripts/import_csaf.py --merge catalog/v2 DOC.json ... # append new entries

--check exits 1 when the catalog differs from the documents on a field CSAF carries (ids,
CVEs, CVSS, severity, branch ranges, fixed versions, advisory revision) or lacks an entry.
--merge appends entries whose id is not in the catalog yet to catalog/v2/<component>.yml and
never rewrites existing entries; review the diff (qualifiers in `notes` become conditions),
run the catalog tests, commit. See catalog/README.md.

Documents that generate the same entry id: the newer revision of one bulletin wins (a note on
stderr names both files); two bulletins, or one revision with different content, are an error.
--merge builds every changed file in memory and validates the merged catalog with the audit's
own reader and validator before writing; it writes nothing when that fails, and each file is
replaced atomically when it succeeds.

Every product row that does not become an entry is listed on stderr with the reason
(``not imported: ...``); a product the importer does not know (neither a catalog component nor
one it leaves out, NOT_IMPORTED in plugins/plugin_utils/catalog/csaf.py) is an error, unless
--skip-unknown-products (to run over every bulletin of NVIDIA's repository) lists it as not imported.

Exit status: 0 done, 1 --check found differences, 2 error. Any malformed document ends in
`error: FILE: reason` on stderr and exit 2 (each document is bounded in size, nesting and time).
"""
import argparse
import atexit
import os
import shutil
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _collection_path():
    """Make ``ansible_collections.kubegpu.fleet`` importable from this checkout."""
    built = os.path.join(REPO, ".build", "collections")
    if os.path.isdir(os.path.join(built, "ansible_collections", "kubegpu", "fleet")):
        return built
    tmp = tempfile.mkdtemp(prefix="kubegpu-csaf-")
    atexit.register(shutil.rmtree, tmp, True)  # only a symlink and two directories: nothing of ours is lost
    os.makedirs(os.path.join(tmp, "ansible_collections", "kubegpu"))
    os.symlink(REPO, os.path.join(tmp, "ansible_collections", "kubegpu", "fleet"))
    return tmp


sys.path.insert(0, _collection_path())

from ansible_collections.kubegpu.fleet.plugins.module_utils.catalog import validate as catalog_validate  # noqa: E402
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.catalog import load as catalog_load  # noqa: E402
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.catalog import csaf as importer  # noqa: E402


MESSAGE_MAX = 600


def _printable(text):
    """A document's text as one terminal-safe line (control characters as '?')."""
    return "".join(c if c.isprintable() else "?" for c in text)


def _error(where, exc):
    text = str(exc) or type(exc).__name__
    if len(text) > MESSAGE_MAX:
        text = text[:MESSAGE_MAX] + "... (%d more characters)" % (len(text) - MESSAGE_MAX)
    print("error: %s: %s" % (where, text.replace("\n", " ")), file=sys.stderr)
    return 2


def _load(path, verified, unknown_products="error"):
    """One document, read, parsed and converted within importer.DEADLINE; raises CsafError."""
    try:
        with importer.deadline(importer.DEADLINE):
            doc = importer.read_document(path)
            return importer.import_advisory(doc, path=path, verified=verified, unknown_products=unknown_products)
    except (importer.CsafError, catalog_validate.CatalogError, OSError, importer.DeadlineExceeded) as exc:
        raise importer.CsafError(str(exc) or type(exc).__name__)
    except RecursionError:
        raise importer.CsafError("nested too deeply")
    except MemoryError:
        raise importer.CsafError("too large to convert")
    except Exception as exc:  # any other shape the checks above missed: still a message, never a traceback
        raise importer.CsafError("malformed CSAF document (%s: %s)" % (type(exc).__name__, exc))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    ap.add_argument("documents", nargs="+", help="CSAF 2.0 JSON files (NVIDIA/product-security <year>/<id>/<id>.json)")
    ap.add_argument("--component", action="append", choices=sorted(catalog_validate.COMPONENT_SCHEMES),
                    help="only this component (repeatable)")
    ap.add_argument("--verified", help="date to record in sources[].verified (default: today)")
    ap.add_argument("--skip-unknown-products", action="store_true",
                    help="list the rows of products the importer does not know as not imported instead of failing "
                         "(to run over every bulletin of NVIDIA's repository; the refresh job does the same)")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--check", metavar="CATALOG_DIR", help="compare with the catalog, exit 1 on differences")
    mode.add_argument("--merge", metavar="CATALOG_DIR", help="append new entries to CATALOG_DIR/<component>.yml")
    args = ap.parse_args(argv)

    results = []
    for path in args.documents:
        try:
            result = _load(path, args.verified, "skip" if args.skip_unknown_products else "error")
        except importer.CsafError as exc:
            return _error(path, exc)
        for row in result["skipped"]:
            print(_printable("%s: not imported: %s (%s %s: %s): %s" % (
                path, row["product_id"], row["product"], row["arch"], row["version_text"], row["reason"])),
                file=sys.stderr)
        for w in result["warnings"]:
            print("%s: review: %s" % (path, w), file=sys.stderr)
        result["entries"] = dict((comp, entries) for comp, entries in result["entries"].items()
                                 if not args.component or comp in args.component)
        results.append((path, result))
    try:
        generated, notes = importer.combine(results)
    except importer.CsafError as exc:
        return _error(exc.path or args.documents[-1], exc)
    for note in notes:
        print("review: %s" % note, file=sys.stderr)

    if args.check:
        try:
            entries = catalog_load.load_catalog(args.check)
        except (catalog_validate.CatalogError, OSError, UnicodeDecodeError) as exc:
            return _error(args.check, exc)
        diffs = []
        for comp, gen in sorted(generated.items()):
            diffs.extend(importer.compare(gen, [e for e in entries if e["component"] == comp], comp))
        for line in diffs:
            print(line)
        print("%d generated entries, %d difference(s)" % (sum(len(g) for g in generated.values()), len(diffs)),
              file=sys.stderr)
        return 1 if diffs else 0

    if args.merge:
        try:
            changes, lines = importer.plan_merge(args.merge, generated)
        except (catalog_validate.CatalogError, OSError, UnicodeDecodeError) as exc:
            return _error(args.merge, "the merged catalog would be invalid, nothing written: %s" % exc)
        try:
            importer.write_files(changes)
        except OSError as exc:
            return _error(args.merge, exc)
        for line in lines:
            print(line, file=sys.stderr)
        return 0

    for comp, gen in sorted(generated.items()):
        print("# component: %s (%d entries)" % (comp, len(gen)))
        print(importer.dump_entries(gen))
    return 0


if __name__ == "__main__":
    sys.exit(main())
