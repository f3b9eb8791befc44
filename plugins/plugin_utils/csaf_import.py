# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVIDIA CSAF 2.0 advisories -> catalog v2 entries (maintainer tool, controller side).

NVIDIA publishes every PSIRT bulletin as a CSAF 2.0 document (``<year>/<a_id>/<a_id>.json``
in the NVIDIA/product-security repository). This module reads the parts of the format that
carry facts the catalog needs:

* ``product_tree``: NVIDIA nests ``vendor > architecture ("Linux(R570)") > product_version``
  where the branch *name* is the product ("Tesla", "NVIDIA Container Toolkit") and
  ``product.name`` is the version text ("All driver versions prior to 570.133.07",
  "All versions up to and including 1.17.7 (CDI mode only ...)", "1.17.8"). The standard
  ``vendor > product_name > product_version`` layout and ``relationships`` are read too.
* ``vulnerabilities[]``: ``cve``, ``cwe``, ``scores[].cvss_v3`` (base score, vector),
  ``product_status`` (``known_affected``/``fixed``/``first_fixed``/``last_affected``),
  ``remediations`` (``vendor_fix``/``mitigation``/``workaround``, when present; NVIDIA's
  current documents have none).

Only the Linux data-center rows become entries (driver "Tesla" rows per branch, container
toolkit, GPU Operator, device plugin, MIG manager, fabric manager); GeForce, RTX/Quadro,
vGPU, guest-driver and Windows rows are counted in ``skipped``. One entry per CVE and
component, with one affected item per driver branch. Row qualifiers that the format cannot
carry ("only when CDI is enabled") go to ``notes`` and to ``warnings``: the maintainer turns
them into structured conditions when reviewing.

CLI: ``scripts/import_csaf.py`` (see catalog/README.md).
"""
from __future__ import annotations

import datetime
import re

from ansible_collections.kubegpu.fleet.plugins.plugin_utils import catalog_v2

try:  # optional: validates that each vector really scores the base score NVIDIA printed
    from cvss import CVSS3
except ImportError:  # pragma: no cover - the importer still works without it
    CVSS3 = None

# component, product-name regex, architecture regex (driver: group 1 is the branch)
ROWS = (
    ("driver", re.compile(r"^(Tesla|Data ?Center( GPU)?( Driver)?)$", re.I),
     re.compile(r"^Linux\s*\(R(\d+)\)$", re.I)),
    ("container-toolkit", re.compile(r"^NVIDIA Container Toolkit$", re.I), re.compile(r"^(Linux|All|)$", re.I)),
    ("gpu-operator", re.compile(r"^NVIDIA GPU Operator$", re.I), re.compile(r"^(Linux|All|)$", re.I)),
    ("device-plugin", re.compile(r"^NVIDIA (Kubernetes|K8s) Device Plugin$", re.I), re.compile(r"^(Linux|All|)$", re.I)),
    ("mig-manager", re.compile(r"^NVIDIA MIG Manager$", re.I), re.compile(r"^(Linux|All|)$", re.I)),
    ("fabric-manager", re.compile(r"^NVIDIA Fabric ?Manager$", re.I), re.compile(r"^(Linux|All|)$", re.I)),
)

ID_PREFIX = {
    "driver": "driver", "container-toolkit": "ctk", "gpu-operator": "gpu-operator",
    "device-plugin": "device-plugin", "mig-manager": "mig-manager", "fabric-manager": "fabric-manager",
}

_V = r"v?(\d+(?:\.\d+)+(?:-[0-9A-Za-z.]+)?)"
_PRIOR = re.compile(r"^All (?:driver )?versions? prior to " + _V + r"\s*(?:\((.*)\))?$", re.I)
_UPTO = re.compile(r"^All (?:driver )?versions? (?:up to and including|prior to and including) " + _V
                   + r"\s*(?:\((.*)\))?$", re.I)
_EXACT = re.compile(r"^" + _V + r"\s*(?:\((.*)\))?$")
_TAG = re.compile(r"<[^>]+>")


class CsafError(ValueError):
    """The document is not a CSAF advisory this importer can read; the message says why."""


class _Quoted(str):
    """A string the YAML dumper writes in double quotes (versions, dates)."""


def _text(html):
    return re.sub(r"\s+", " ", _TAG.sub(" ", html or "")).strip()


def product_rows(doc):
    """product_id -> {"product": name, "arch": architecture, "version_text": text}."""
    tree = doc.get("product_tree")
    if not isinstance(tree, dict):
        raise CsafError("no product_tree in the document")
    rows = {}

    def walk(branches, product_name, arch):
        for b in branches or []:
            cat, name = b.get("category"), b.get("name", "")
            pn = name if cat == "product_name" else product_name
            ar = name if cat == "architecture" else arch
            prod = b.get("product")
            if prod and prod.get("product_id"):
                if cat == "product_version" and product_name is None:
                    # NVIDIA layout: the branch names the product, product.name the version text
                    rows[prod["product_id"]] = {"product": name, "arch": ar or "", "version_text": prod.get("name", "")}
                elif cat == "product_version":
                    rows[prod["product_id"]] = {"product": product_name, "arch": ar or "", "version_text": name}
            walk(b.get("branches"), pn, ar)

    walk(tree.get("branches"), None, None)
    for rel in tree.get("relationships") or []:
        src = rows.get(rel.get("product_reference"))
        full = rel.get("full_product_name") or {}
        if src and full.get("product_id"):
            rows[full["product_id"]] = dict(src)
    return rows


def classify(row):
    """(component, branch) for a Linux data-center row, else None."""
    for component, prod_re, arch_re in ROWS:
        if prod_re.match(row.get("product") or ""):
            m = arch_re.match(row.get("arch") or "")
            if not m:
                return None
            branch = m.group(1) if component == "driver" else None
            return component, branch
    return None


def parse_row_version(text, status):
    """Version bounds of one product_status row: {"fixed"|"last_affected"|"exact": v, "qualifier": q}."""
    t = (text or "").strip()
    for rx, key in ((_PRIOR, "before"), (_UPTO, "last_affected"), (_EXACT, "exact")):
        m = rx.match(t)
        if m:
            return {key: m.group(1), "qualifier": (m.group(2) or "").strip() or None}
    raise CsafError("cannot read the version text %r of a %s row (expected 'All versions prior to X', "
                    "'All versions up to and including X' or a version)" % (text, status))


def _version(component, text):
    scheme = catalog_v2.COMPONENT_SCHEMES[component]
    return catalog_v2.normalize_version_text(scheme, text)


def _score(vuln, product_ids, problems):
    chosen = None
    for s in vuln.get("scores") or []:
        if "cvss_v3" not in s:
            continue
        if chosen is None or set(s.get("products") or []) & product_ids:
            chosen = s["cvss_v3"]
            if set(s.get("products") or []) & product_ids:
                break
    if chosen is None:
        raise CsafError("%s has no cvss_v3 score" % vuln.get("cve"))
    score = float(chosen["baseScore"])
    vector = chosen["vectorString"]
    if CVSS3 is not None:
        try:
            computed = float(CVSS3(vector).base_score)
        except Exception as exc:  # the cvss library raises its own error classes
            raise CsafError("%s: CVSS vector %r does not parse: %s" % (vuln.get("cve"), vector, exc))
        if computed != score:
            problems.append("%s: vector %s scores %s, the document says %s" % (vuln.get("cve"), vector, computed, score))
    version = chosen.get("version") or vector.split("/")[0].split(":")[1]
    return {"version": _Quoted(version), "base_score": score, "vector": vector}


def _remediation_texts(vuln, product_ids):
    fix, mitig = [], []
    for r in vuln.get("remediations") or []:
        if not set(r.get("product_ids") or []) & product_ids:
            continue
        text = _text(r.get("details"))
        if r.get("url"):
            text += " (%s)" % r["url"]
        if r.get("category") == "vendor_fix":
            fix.append(text)
        elif r.get("category") in ("mitigation", "workaround"):
            mitig.append(text)
    return fix, mitig


def source_urls(doc, path=None):
    """NVIDIA's bulletin page and, where the input path shows it, the CSAF file's URL."""
    aid = str(doc["document"]["tracking"]["id"])
    urls = ["https://nvidia.custhelp.com/app/answers/detail/a_id/%s" % aid]
    m = re.search(r"(\d{4})/(\d+)/(\d+)\.json$", path or "")
    if m:
        urls.append("https://github.com/NVIDIA/product-security/blob/main/%s/%s/%s.json" % m.groups())
    return urls


def import_advisory(doc, path=None, verified=None):
    """Turn one CSAF document into catalog v2 entries.

    Returns {"advisory": {...}, "entries": {component: [entry, ...]}, "skipped": {product: n},
    "warnings": [...]}. Raises CsafError when the document cannot be read.
    """
    if not isinstance(doc, dict) or not isinstance(doc.get("document"), dict):
        raise CsafError("not a CSAF document (no 'document' object)")
    meta = doc["document"]
    if str(meta.get("csaf_version")) != "2.0":
        raise CsafError("csaf_version is %r; this importer reads CSAF 2.0" % meta.get("csaf_version"))
    if meta.get("category") not in ("csaf_security_advisory", "csaf_vex", "csaf_base"):
        raise CsafError("document category %r is not an advisory" % meta.get("category"))
    tracking = meta.get("tracking") or {}
    if not tracking.get("id"):
        raise CsafError("document.tracking.id is missing")
    verified = verified or datetime.date.today().isoformat()
    advisory = {
        "publisher": (meta.get("publisher") or {}).get("name", ""),
        "id": _Quoted(str(tracking["id"])),
        "title": meta.get("title", ""),
        "revision": _Quoted(str(tracking.get("version", ""))),
        "date": _Quoted(str(tracking.get("current_release_date", ""))[:10]),
    }
    rows = product_rows(doc)
    urls = source_urls(doc, path)
    skipped, warnings, entries = {}, [], {}
    seen_skip = set()
    for vuln in doc.get("vulnerabilities") or []:
        cve = vuln.get("cve")
        if not cve:
            raise CsafError("a vulnerability without a cve id")
        per_comp = {}
        for status in ("known_affected", "last_affected", "fixed", "first_fixed"):
            for pid in (vuln.get("product_status") or {}).get(status) or []:
                row = rows.get(pid)
                if row is None:
                    raise CsafError("%s: product_status.%s names %r, which the product_tree lacks" % (cve, status, pid))
                where = classify(row)
                if where is None:
                    key = "%s %s" % (row.get("arch"), row.get("product"))
                    if (key, pid) not in seen_skip:
                        seen_skip.add((key, pid))
                        skipped[key] = skipped.get(key, 0) + 1
                    continue
                component, branch = where
                per_comp.setdefault(component, {}).setdefault(branch, []).append((status, pid, row))
        for component, branches in sorted(per_comp.items()):
            entry = _entry(doc, vuln, component, branches, advisory, urls, verified, warnings)
            if entry is not None:
                entries.setdefault(component, []).append(entry)
    for comp_entries in entries.values():
        comp_entries.sort(key=lambda e: e["id"])
    return {"advisory": advisory, "entries": entries, "skipped": skipped, "warnings": warnings}


def _branch_key(branch):
    return int(branch) if branch and branch.isdigit() else -1


def _entry(doc, vuln, component, branches, advisory, urls, verified, warnings):
    cve = vuln["cve"]
    eid = "%s-%s" % (ID_PREFIX[component], cve.lower())
    affected, qualifiers, pids = [], [], set()
    for branch in sorted(branches, key=_branch_key):
        item = {} if branch is None else {"branch": _Quoted(branch)}
        fixed = None
        bounds = {}
        for status, pid, row in branches[branch]:
            pids.add(pid)
            parsed = parse_row_version(row["version_text"], status)
            if parsed.get("qualifier"):
                qualifiers.append("%s: %s" % (row["version_text"], parsed["qualifier"]))
            if status in ("fixed", "first_fixed"):
                v = parsed.get("exact") or parsed.get("before") or parsed.get("last_affected")
                fixed = v if fixed is None else min(fixed, v, key=lambda x: catalog_v2.parse_version(
                    catalog_v2.COMPONENT_SCHEMES[component], x))
            elif "before" in parsed:
                bounds["before"] = parsed["before"]
            elif "last_affected" in parsed:
                bounds["last_affected"] = parsed["last_affected"]
            else:
                bounds.setdefault("introduced", parsed["exact"])
                bounds["last_affected"] = parsed["exact"]
        if not bounds:
            continue  # a fixed row without an affected row says nothing about this branch
        if bounds.get("introduced"):
            item["introduced"] = _Quoted(_version(component, bounds["introduced"]))
        if bounds.get("last_affected"):
            item["last_affected"] = _Quoted(_version(component, bounds["last_affected"]))
        fix = fixed or bounds.get("before")
        if fix:
            item["fixed"] = _Quoted(_version(component, fix))
        if fixed and bounds.get("before") and _version(component, fixed) != _version(component, bounds["before"]):
            warnings.append("%s: affected row says prior to %s but the fixed row says %s; using %s"
                            % (eid, bounds["before"], fixed, fixed))
        affected.append(item)
    if not affected:
        return None
    problems = []
    score = _score(vuln, pids, problems)
    warnings.extend(problems)
    cve_obj = {"id": cve, "cvss": score}
    if (vuln.get("cwe") or {}).get("id"):
        cve_obj["cwe"] = vuln["cwe"]["id"]
    summary = ""
    for note in vuln.get("notes") or []:
        if note.get("category") in ("summary", "description"):
            summary = _text(note.get("text"))
            break
    fix_texts, mitig_texts = _remediation_texts(vuln, pids)
    if fix_texts:
        remediation = " ".join(fix_texts)
    else:
        fixes = ["R%s %s" % (i["branch"], i["fixed"]) if "branch" in i else str(i["fixed"])
                 for i in affected if i.get("fixed")]
        remediation = ("Upgrade to the first fixed release of the installed %s or later: %s (NVIDIA security "
                       "bulletin %s)." % ("branch" if component == "driver" else "line",
                                          ", ".join(fixes) or "none published", advisory["id"]))
    entry = {
        "id": eid,
        "kind": "security",
        "title": "%s: %s" % (cve, advisory["title"]),
        "description": summary,
        "cves": [cve_obj],
        "severity": catalog_v2.cvss_rating(score["base_score"]),
        "affected": affected,
        "remediation": remediation,
    }
    if mitig_texts:
        entry["mitigation"] = " ".join(mitig_texts)
    if qualifiers:
        entry["notes"] = "Bulletin qualifiers (review into conditions): " + "; ".join(sorted(set(qualifiers)))
        warnings.append("%s: qualifier needs a structured condition: %s" % (eid, "; ".join(sorted(set(qualifiers)))))
    entry["advisory"] = advisory
    entry["sources"] = [{"url": u, "verified": _Quoted(verified),
                         "what": "CSAF 2.0 advisory %s revision %s, product_status and scores"
                         % (advisory["id"], advisory["revision"])} for u in urls]
    catalog_v2.validate_entry(entry, catalog_v2.COMPONENT_SCHEMES[component])
    return entry


KEY_ORDER = ("id", "kind", "title", "description", "cves", "severity", "affected", "conditions", "remediation",
             "mitigation", "notes", "advisory", "sources")


def csaf_view(entry):
    """The fields of an entry that a CSAF document carries, normalised for comparison."""
    affected = sorted(
        (str(i.get("branch") or ""), str(i.get("introduced") or ""), str(i.get("last_affected") or ""),
         str(i.get("fixed") or ""))
        for i in entry.get("affected") or [] if not i.get("conditions"))
    cves = sorted((c["id"], float(c["cvss"]["base_score"]), c["cvss"]["vector"], c.get("cwe"))
                  for c in entry.get("cves") or [])
    adv = entry.get("advisory") or {}
    return {"id": entry["id"], "kind": entry["kind"], "severity": entry["severity"], "cves": cves,
            "affected": affected, "advisory": (str(adv.get("id", "")), str(adv.get("revision", "")))}


def compare(generated, catalog_entries):
    """Differences between generated entries and the catalog's, on the CSAF fields only.

    Returns a list of human-readable lines; empty when the catalog agrees.
    """
    have = {e["id"]: e for e in catalog_entries}
    out = []
    for g in generated:
        c = have.get(g["id"])
        if c is None:
            out.append("%s: not in the catalog (new)" % g["id"])
            continue
        gv, cv = csaf_view(g), csaf_view(c)
        for key in sorted(gv):
            if gv[key] != cv[key]:
                out.append("%s: %s differs: CSAF %r, catalog %r" % (g["id"], key, gv[key], cv[key]))
    return out


def dump_entries(entries):
    """YAML text of a list of entries, versions double-quoted (catalog rule)."""
    import yaml

    class Dumper(yaml.SafeDumper):
        def increase_indent(self, flow=False, indentless=False):
            # indent sequences inside mappings (yamllint/ansible-lint "indentation")
            return super(Dumper, self).increase_indent(flow, False)

    def quoted(dumper, data):
        return dumper.represent_scalar("tag:yaml.org,2002:str", str(data), style='"')

    Dumper.add_representer(_Quoted, quoted)
    Dumper.ignore_aliases = lambda self, data: True
    ordered = [dict(sorted(e.items(), key=lambda kv: KEY_ORDER.index(kv[0]) if kv[0] in KEY_ORDER else 99))
               for e in entries]
    return yaml.dump(ordered, Dumper=Dumper, sort_keys=False, default_flow_style=False, width=100,
                     allow_unicode=True)
