# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Trim a real NVIDIA CSAF document into a small test fixture (maintainer tool).

Keeps the document metadata (title, tracking, publisher, csaf_version, category) and the
summary note, the product_tree rows whose product or architecture name matches --keep (regular
expressions; default: the Linux data-center driver rows and the cloud-native products), and
the vulnerabilities that name a kept product, with their product lists cut to the kept rows.
Nothing is rewritten: every kept value is NVIDIA's.

    python3 scripts/trim_csaf_fixture.py SRC.json DEST.json [--keep REGEX ...]
"""
import argparse
import json
import re
import sys

DEFAULT_KEEP = [r"^Linux\(R\d+\)/Tesla$", r"/NVIDIA (Container Toolkit|GPU Operator|Kubernetes Device Plugin|MIG Manager)$"]


def trim(doc, keep):
    rx = [re.compile(k) for k in keep]
    kept = set()

    def walk(branches, arch):
        out = []
        for b in branches or []:
            b = dict(b)
            a = b["name"] if b.get("category") == "architecture" else arch
            if "product" in b:
                if b.get("category") == "product_version" and any(r.search("%s/%s" % (a or "", b["name"])) for r in rx):
                    kept.add(b["product"]["product_id"])
                    out.append(b)
                continue
            b["branches"] = walk(b.get("branches"), a)
            if b["branches"]:
                out.append(b)
        return out

    meta = {k: v for k, v in doc["document"].items() if k != "notes"}
    meta["notes"] = [n for n in doc["document"].get("notes", []) if n.get("category") == "summary"]
    tree = {"branches": walk(doc["product_tree"]["branches"], None)}
    vulns = []
    for v in doc.get("vulnerabilities", []):
        status = {k: [p for p in ids if p in kept] for k, ids in v.get("product_status", {}).items()}
        status = {k: ids for k, ids in status.items() if ids}
        if not status:
            continue
        v = {k: v[k] for k in ("cve", "cwe", "notes", "product_status", "scores", "remediations", "release_date") if k in v}
        v["product_status"] = status
        v["notes"] = [n for n in v.get("notes", []) if n.get("category") == "summary"]
        v["scores"] = [dict(s, products=[p for p in s.get("products", []) if p in kept]) for s in v.get("scores", [])]
        vulns.append(v)
    return {"document": meta, "product_tree": tree, "vulnerabilities": vulns}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    ap.add_argument("src")
    ap.add_argument("dest")
    ap.add_argument("--keep", action="append", help="regex on '<architecture>/<product>' (repeatable)")
    args = ap.parse_args(argv)
    with open(args.src) as f:
        doc = json.load(f)
    out = trim(doc, args.keep or DEFAULT_KEEP)
    with open(args.dest, "w") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
