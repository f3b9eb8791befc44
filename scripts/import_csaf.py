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
"""
import argparse
import atexit
import json
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

from ansible_collections.kubegpu.fleet.plugins.plugin_utils import catalog_v2, csaf_import  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    ap.add_argument("documents", nargs="+", help="CSAF 2.0 JSON files (NVIDIA/product-security <year>/<id>/<id>.json)")
    ap.add_argument("--component", action="append", choices=sorted(catalog_v2.COMPONENT_SCHEMES),
                    help="only this component (repeatable)")
    ap.add_argument("--verified", help="date to record in sources[].verified (default: today)")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--check", metavar="CATALOG_DIR", help="compare with the catalog, exit 1 on differences")
    mode.add_argument("--merge", metavar="CATALOG_DIR", help="append new entries to CATALOG_DIR/<component>.yml")
    args = ap.parse_args(argv)

    generated = {}
    for path in args.documents:
        try:
            with open(path) as f:
                doc = json.load(f)
            result = csaf_import.import_advisory(doc, path=path, verified=args.verified)
        except (OSError, ValueError) as exc:
            print("error: %s: %s" % (path, exc), file=sys.stderr)
            return 2
        for key, n in sorted(result["skipped"].items()):
            print("%s: skipped %d non-data-center row(s): %s" % (path, n, key), file=sys.stderr)
        for w in result["warnings"]:
            print("%s: review: %s" % (path, w), file=sys.stderr)
        for comp, entries in result["entries"].items():
            if args.component and comp not in args.component:
                continue
            generated.setdefault(comp, []).extend(entries)

    if args.check:
        entries = catalog_v2.load_catalog(args.check)
        diffs = []
        for comp, gen in sorted(generated.items()):
            diffs.extend(csaf_import.compare(gen, [e for e in entries if e["component"] == comp]))
        for line in diffs:
            print(line)
        print("%d generated entries, %d difference(s)" % (sum(len(g) for g in generated.values()), len(diffs)),
              file=sys.stderr)
        return 1 if diffs else 0

    if args.merge:
        existing = {e["id"] for e in catalog_v2.load_catalog(args.merge)}
        for comp, gen in sorted(generated.items()):
            new = [e for e in gen if e["id"] not in existing]
            target = os.path.join(args.merge, "%s.yml" % comp)
            if not new:
                print("%s: nothing new" % target, file=sys.stderr)
                continue
            if not os.path.exists(target):
                with open(target, "w") as f:
                    f.write("---\nschema_version: 2\ncomponent: %s\nversion_scheme: %s\nentries:\n"
                            % (comp, catalog_v2.COMPONENT_SCHEMES[comp]))
            text = csaf_import.dump_entries(new)
            with open(target, "a") as f:
                f.write("\n" + "".join("  " + line if line.strip() else line for line in text.splitlines(True)))
            print("%s: appended %d entr%s" % (target, len(new), "y" if len(new) == 1 else "ies"), file=sys.stderr)
        catalog_v2.load_catalog(args.merge)  # the merged catalog must still validate
        return 0

    for comp, gen in sorted(generated.items()):
        print("# component: %s (%d entries)" % (comp, len(gen)))
        print(csaf_import.dump_entries(gen))
    return 0


if __name__ == "__main__":
    sys.exit(main())
