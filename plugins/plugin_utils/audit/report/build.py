# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet audit report document: per-node audit results -> the versioned report (controller side).

``build_report`` turns per-node audit results into the report document (schema in
``docs/audit-report.schema.json``): nodes and their findings checked and sorted, the fleet
summary, ``cves`` (``group_cves``: the ``security.*`` findings grouped across the fleet by CVE),
``hands_on`` (hardware work for a person) and, when the audit's catalog is given, ``catalog``
(``catalog_state``: how current the known-bad catalog is). ``failing_findings`` picks the
findings at or above ``fail_on``; ``coverage_limit`` decides whether the audit saw too few of the
nodes in scope (``max_unaudited``). Pure functions: nothing here touches the network or nodes.

A finding's severity and title are the finding's own: a rule takes them from the finding table
(``plugin_utils/audit/finding_types.py``) and may change them per instance from the evidence, so
the report keeps what the node's audit said. Whether a finding is hands-on work reads the table
(``is_hands_on``).

Everything in a report may come from a node (names, finding text, evidence), so the document is
strict JSON before any renderer sees it: ``json_safe`` turns values into strict JSON values (NaN
and infinities become the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``; lone surrogates
become ``\\udcxx`` text; nesting deeper than JSON_MAX_DEPTH becomes a string). Each renderer
(``json_format``, ``markdown_format``, ``prometheus_format``, ``html_format`` beside this file)
starts with ``json_safe`` and has the one escaping path of its format.
"""
from __future__ import annotations

import datetime
import hashlib
import json
import math
import os
import re

import yaml  # ansible-core depends on PyYAML: always there on a controller

from ansible_collections.kubegpu.fleet.plugins.module_utils.catalog.validate import cvss_rating
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit import coverage as audit_coverage
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.fields import as_dict, as_list, dict_items
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.finding_types import TYPES

SCHEMA_ID = "kubegpu.fleet/audit-report"
# 2: findings of cluster scope (the finding table's ``scope``) are listed once per cluster in
# ``cluster.findings`` with the nodes they affect, no longer in each node's ``findings``.
SCHEMA_VERSION = 2

SEVERITIES = ("critical", "warning", "info")
GENERATED_AT = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z\Z")
SEVERITY_RANK = {"info": 1, "warning": 2, "critical": 3}
# not_audited: a node the cluster or inventory knows that no slice of the run covered (audit/fleet.py)
NODE_STATUSES = ("audited", "unreachable", "failed", "not_audited")
# Where a node's labels (its group, the GPU models of a node the audit did not see) come from:
# "result" - the node's result of the run (the audit's view of its Node; with the kubernetes store
# the Node the result is published on); "cluster" - the Node as the cluster lists it, for a node
# without a result of the run or without a finished audit; "last_result" - a node no slice of the
# run covered, as its last (older) result had them; None - not known (a node known only from the
# inventory, or a host whose audit did not finish and that the cluster pass did not see).
LABEL_SOURCES = ("result", "cluster", "last_result")


class ReportError(ValueError):
    """Raised for malformed audit input; the message names the offending value."""


COLLECTION_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))


def collection_version(root=COLLECTION_ROOT):
    """Version of the collection these plugins belong to, or None when it does not say.

    An installed collection (``ansible-galaxy collection install``, a tarball) has
    ``MANIFEST.json`` with ``collection_info.version``; a source checkout (this repository
    linked into a collections path) has ``galaxy.yml``. Both are small files we wrote.
    """
    try:
        with open(os.path.join(root, "MANIFEST.json"), encoding="utf-8") as fh:
            version = (json.load(fh).get("collection_info") or {}).get("version")
        if isinstance(version, str) and version:
            return version
    except (OSError, ValueError, AttributeError):
        pass
    try:
        with open(os.path.join(root, "galaxy.yml"), encoding="utf-8") as fh:
            doc = yaml.safe_load(fh)
    except (OSError, ValueError, yaml.YAMLError):
        return None
    version = doc.get("version") if isinstance(doc, dict) else None
    return str(version) if version not in (None, "") else None


JSON_MAX_DEPTH = 64
# The renderers' own pass: deeper than anything build_report leaves (its inputs sit a few levels
# below the report's root), so a built report renders unchanged.
RENDER_MAX_DEPTH = JSON_MAX_DEPTH + 16
NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}
_SURROGATE = re.compile("[\ud800-\udfff]")
# Invisible or direction-changing characters: C0/C1 controls (not tab, LF, CR), DEL, bidi
# embeddings, overrides and isolates, zero-width characters, BOM. Shown as U+FFFD in HTML and
# Markdown so a node name cannot hide or reorder what a reader sees.
INVISIBLE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u200b-\u200f\u202a-\u202e"
                       "\u2060-\u2064\u2066-\u2069\ufeff]")


def clean_text(text, visible=False):
    if _SURROGATE.search(text):
        text = text.encode("utf-8", "surrogatepass").decode("utf-8", "backslashreplace")
    if visible:
        text = INVISIBLE.sub("\ufffd", text)
    return str(text)


def json_safe(value, visible=False, max_depth=JSON_MAX_DEPTH, _depth=0):
    """A copy of ``value`` made of strict JSON values only.

    NaN/Infinity (a node's reading) become the strings ``"NaN"``/``"Infinity"``/``"-Infinity"``,
    integers wider than 64 bits a string saying so, keys strings, tuples and sets lists, other
    objects their ``str``; strings lose lone surrogates (``\\udcff`` text instead), and with
    ``visible`` their invisible characters (U+FFFD instead). Nesting deeper than ``max_depth``
    is replaced by a string saying so.
    """
    if isinstance(value, str):
        return clean_text(value, visible)
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value) if value.bit_length() <= 64 else "<integer of %d bits>" % value.bit_length()
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else NON_FINITE[repr(value)]
    if _depth >= max_depth:
        return "<nested deeper than %d levels: dropped>" % max_depth
    if isinstance(value, dict):
        return dict((_json_key(k, visible), json_safe(v, visible, max_depth, _depth + 1)) for k, v in value.items())
    if isinstance(value, (list, tuple, set, frozenset)):
        return [json_safe(v, visible, max_depth, _depth + 1) for v in value]
    return clean_text(str(value), visible)


def _json_key(key, visible):
    if isinstance(key, str):
        return clean_text(key, visible)
    if key is None or isinstance(key, (bool, int, float)):
        safe = json_safe(key)
        return safe if isinstance(safe, str) else json.dumps(safe)
    return clean_text(str(key), visible)


def severity_rank(severity):
    try:
        return SEVERITY_RANK[severity]
    except (KeyError, TypeError):
        raise ReportError("unknown severity %r (expected one of %s)" % (severity, ", ".join(SEVERITIES)))


def _check_finding(finding, node):
    if not isinstance(finding, dict):
        raise ReportError("finding on node %r is not a mapping: %r" % (node, finding))
    for key in ("id", "severity", "title"):
        if not isinstance(finding.get(key), str) or not finding.get(key):
            raise ReportError("finding on node %r lacks a string %r: %r" % (node, key, finding))
    severity_rank(finding["severity"])
    evidence = finding.get("evidence") or {}
    remediation = finding.get("remediation") or {}
    references = finding.get("references") or []
    out = {
        "id": finding["id"],
        "severity": finding["severity"],
        "title": finding["title"],
        "node": node,
        # a malformed shape is kept, never dropped, in the shape the renderers expect
        "evidence": evidence if isinstance(evidence, dict) else {"value": evidence},
        "remediation": remediation if isinstance(remediation, dict) else {"summary": str(remediation)},
        "references": list(references) if isinstance(references, list) else [str(references)],
    }
    return out


CATALOG_MAX_AGE_DAYS = 45
_ISO_DATE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})\Z")


def advisory_date(value):
    m = _ISO_DATE.match(value) if isinstance(value, str) else None
    if not m:
        return None
    try:
        return datetime.date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    except ValueError:
        return None


def catalog_state(entries, today, max_age_days=CATALOG_MAX_AGE_DAYS, error=None):
    """How current the known-bad catalog in use is.

    ``entries``: the catalog's entries (``plugin_utils/catalog/load.catalog_entries``: bundled plus
    ``catalog_extra``); ``today``: a ``datetime.date`` (the report's date). Returns
    ``{"entries", "advisories", "newest_advisory": {"id", "title", "revision", "date"} | None,
    "age_days", "max_age_days", "stale", "warning", "error"}``: the newest bulletin is the one
    whose revision date (``advisory.date``, CSAF ``current_release_date``) is latest, the age
    counts from that date, and ``stale`` is true (with ``warning`` saying so) when it is more
    than ``max_age_days`` old, when no entry names a dated bulletin, or when the catalog could
    not be read (``error``).
    """
    if isinstance(max_age_days, bool) or not isinstance(max_age_days, int) or max_age_days < 1:
        raise ReportError("catalog_max_age_days must be a whole number of days >= 1, got %r" % (max_age_days,))
    entries = [e for e in entries or [] if isinstance(e, dict)]
    advisories = {}
    for e in entries:
        adv = e.get("advisory") if isinstance(e.get("advisory"), dict) else {}
        date = advisory_date(adv.get("date"))
        if date is None or adv.get("id") is None:
            continue
        key = str(adv["id"])
        if key not in advisories or date > advisories[key][0]:
            advisories[key] = (date, adv)
    out = {"entries": len(entries), "advisories": len(advisories), "newest_advisory": None, "age_days": None,
           "max_age_days": max_age_days, "stale": True, "warning": None, "error": error}
    if error:
        out["warning"] = "the known-bad catalog could not be read, no security finding is reliable: %s" % error
        return out
    if not advisories:
        out["warning"] = "the known-bad catalog names no dated bulletin: how current it is is unknown"
        return out
    date, adv = max(advisories.values(), key=lambda da: (da[0], str(da[1].get("id"))))
    age = (today - date).days
    out.update(newest_advisory={"id": str(adv["id"]), "title": adv.get("title"),
                                "revision": None if adv.get("revision") is None else str(adv["revision"]),
                                "date": date.isoformat()},
               age_days=age, stale=age > max_age_days)
    if out["stale"]:
        out["warning"] = ("the known-bad catalog's newest bulletin (%s, revision %s of %s) is %d days old, more than "
                          "%d: advisories published since are not reported; refresh the catalog"
                          % (adv["id"], out["newest_advisory"]["revision"], date.isoformat(), age, max_age_days))
    return out


def build_report(nodes, cluster_findings=None, generated_at=None, collection_version=None,
                 fail_on="critical", run=None, catalog=None, catalog_max_age_days=CATALOG_MAX_AGE_DAYS,
                 catalog_error=None, group_label=None, max_unaudited=None):
    """Aggregate per-node results into the report document.

    ``catalog``: the entries of the known-bad catalog the audit used (or ``catalog_error``, why
    it could not be read); the report's ``catalog`` section says how current it is
    (``catalog_state``, dated by ``generated_at``). Without either the section is left out.

    ``nodes`` is a list of ``{"name", "status", "error"?, "findings": [...]}`` where status is
    audited | unreachable | failed. Unreachable and failed nodes are listed, never dropped.
    ``cluster_findings`` are findings about the cluster as a whole (node ``None``) or about a
    named node seen from the API (they carry ``node``).

    A node entry may carry ``coverage`` (what the audit could see, audit/coverage.py: a node that
    is not a GPU node or was not inspected is never clean) and ``labels`` (its Node labels).
    Findings of cluster scope (the finding table's ``scope``: GPU Operator, device plugin, MIG
    manager, DCGM Exporter) are listed once in ``cluster.findings`` (``cluster_scoped``) with the
    nodes they affect; each node names them in its ``cluster_findings``.

    ``group_label``: a Node label (a node pool: ``cloud.google.com/gke-nodepool``,
    ``eks.amazonaws.com/nodegroup``, ...) whose values group the nodes in ``summary.by_group``.
    A node entry's ``labels`` are None when they are not known (``labels_from``: ``LABEL_SOURCES``);
    a node the audit did not see gets its GPU models from them (``gpu_models``: GPU Feature
    Discovery's labels), so it is counted in its pool and GPU model all the same.

    ``max_unaudited``: how many of the GPU nodes in scope the audit may fail to see
    (``coverage_limit``; default ``DEFAULT_MAX_UNAUDITED``); ``summary.coverage_limit`` says the
    limit, the count and whether it was exceeded.
    """
    if max_unaudited is None:
        max_unaudited = DEFAULT_MAX_UNAUDITED
    max_unaudited = check_max_unaudited(max_unaudited)
    if group_label is not None and (not isinstance(group_label, str) or not group_label.strip()):
        raise ReportError("group_label must be a Node label name, got %r" % (group_label,))
    if fail_on not in SEVERITY_RANK and fail_on not in ("never", "none"):
        raise ReportError("fail_on must be one of critical, warning, info, never; got %r" % (fail_on,))
    if generated_at is None:
        generated_at = datetime.datetime.now(datetime.timezone.utc)
    if isinstance(generated_at, datetime.datetime):
        generated_at = generated_at.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    if not isinstance(generated_at, str) or not GENERATED_AT.match(generated_at):
        raise ReportError("generated_at must be a UTC time YYYY-MM-DDTHH:MM:SSZ, got %r" % (generated_at,))
    # Node data from here on is strict JSON (finite numbers, valid Unicode, bounded nesting).
    if not isinstance(nodes, (list, tuple)):
        raise ReportError("nodes must be a list, got %s" % type(nodes).__name__)
    nodes = json_safe(list(nodes))
    cluster_findings = json_safe(list(cluster_findings or []))
    run = json_safe(run) if isinstance(run, dict) else {}
    collection_version = json_safe(collection_version)
    catalog_info = None
    if catalog is not None or catalog_error is not None:
        today = datetime.date(int(generated_at[:4]), int(generated_at[5:7]), int(generated_at[8:10]))
        catalog_info = json_safe(catalog_state(catalog, today, catalog_max_age_days,
                                               error=None if catalog_error is None else str(catalog_error)))

    seen = set()
    out_nodes = []
    for entry in nodes:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise ReportError("node entry without a name: %r" % (entry,))
        name = entry["name"]
        if name in seen:
            raise ReportError("node %r appears twice" % name)
        seen.add(name)
        status = entry.get("status", "audited")
        if status not in NODE_STATUSES:
            raise ReportError("node %r has unknown status %r" % (name, status))
        findings = [_check_finding(f, name) for f in entry.get("findings") or []]
        known = isinstance(entry.get("labels"), dict)
        labels = as_dict(entry.get("labels"))
        source = entry.get("labels_from")
        row = {"name": name, "status": status, "error": entry.get("error"),
               "findings": sorted(findings, key=_finding_order),
               "coverage": check_coverage(entry.get("coverage"), name),
               "group": _text_or_none(labels.get(group_label)) if group_label is not None else None,
               "labels_from": (source if source in LABEL_SOURCES else "result") if known else None}
        if status != "audited":
            # what the audit would have said: the GPU models the cluster's Node labels name
            row["gpu_models"] = audit_coverage.gpu_models({"api": {"labels": labels}}) if known else {}
        out_nodes.append(row)

    by_name = {n["name"]: n for n in out_nodes}
    cluster = []
    for f in cluster_findings or []:
        node = f.get("node") if isinstance(f, dict) else None
        if node is not None and not isinstance(node, str):
            raise ReportError("cluster finding names a node that is not a string: %r" % (node,))
        checked = _check_finding(f, node)
        if node is not None and node in by_name:
            by_name[node]["findings"].append(checked)
            by_name[node]["findings"].sort(key=_finding_order)
        else:
            cluster.append(dict(checked, scope="cluster", digest=finding_digest(checked), nodes=[],
                                affected_nodes=0))

    out_nodes.sort(key=lambda n: n["name"])
    cluster = sorted(cluster + cluster_scoped(out_nodes), key=_cluster_order)
    all_findings = [f for n in out_nodes for f in n["findings"]] + cluster
    by_severity = dict((s, 0) for s in SEVERITIES)
    by_id = {}
    for f in all_findings:
        by_severity[f["severity"]] += 1
        slot = by_id.setdefault(f["id"], {"severity": f["severity"], "title": f["title"], "count": 0,
                                          "scope": f.get("scope", "node"), "nodes": [], "affected_nodes": 0})
        slot["count"] += 1
        if severity_rank(f["severity"]) > severity_rank(slot["severity"]):
            slot["severity"] = f["severity"]
        slot["nodes"].extend([f["node"]] if f["node"] is not None else f.get("nodes") or [])
    for slot in by_id.values():
        slot["nodes"] = sorted(set(slot["nodes"]))
        slot["affected_nodes"] = len(slot["nodes"])

    counts = dict((s, sum(1 for n in out_nodes if n["status"] == s)) for s in NODE_STATUSES)
    clean = sum(1 for n in out_nodes if is_clean(n))
    coverage_of = dict((status, sorted(n["name"] for n in out_nodes if n["status"] == "audited"
                                       and (n["coverage"] or {}).get("status") == status))
                       for status in audit_coverage.STATUSES)
    failing = failing_findings({"nodes": out_nodes, "cluster": {"findings": cluster}}, fail_on)
    out = {
        "schema": SCHEMA_ID,
        "schema_version": SCHEMA_VERSION,
        "generated_at": generated_at,
        "collection_version": collection_version,
        "run": dict(run or {}, fail_on=fail_on, max_unaudited=max_unaudited),
        "summary": {
            "nodes_total": len(out_nodes),
            "nodes_audited": counts["audited"],
            "nodes_unreachable": counts["unreachable"],
            "nodes_failed": counts["failed"],
            "nodes_clean": clean,
            "nodes_not_gpu": len(coverage_of["not_gpu_node"]),
            "nodes_not_inspected": len(coverage_of["not_inspected"]),
            "unreachable": sorted(n["name"] for n in out_nodes if n["status"] == "unreachable"),
            "failed": sorted(n["name"] for n in out_nodes if n["status"] == "failed"),
            "not_gpu_node": coverage_of["not_gpu_node"],
            "not_inspected": coverage_of["not_inspected"],
            "nodes_not_audited": counts["not_audited"],
            "not_audited": sorted(n["name"] for n in out_nodes if n["status"] == "not_audited"),
            "findings_total": len(all_findings),
            "by_severity": by_severity,
            "by_id": dict(sorted(by_id.items(), key=lambda kv: (-severity_rank(kv[1]["severity"]), kv[0]))),
            "fail_on": fail_on,
            "failing": len(failing),
            "hands_on": hands_on(out_nodes),
            "coverage": coverage_counts(out_nodes),
            "by_gpu_model": by_gpu_model(out_nodes),
            "by_group": None if group_label is None else {"label": group_label, "groups": by_group(out_nodes)},
            "coverage_limit": coverage_limit(out_nodes, max_unaudited),
        },
        "nodes": out_nodes,
        "cluster": {"findings": cluster},
        # the CVE table counts the nodes a cluster component affects
        "cves": group_cves([f for n in out_nodes for f in n["findings"]]
                           + [dict(f, node=name) for f in cluster for name in f["nodes"]]
                           + [f for f in cluster if not f["nodes"]]),
    }
    if catalog_info is not None:
        out["catalog"] = catalog_info
    return out


def check_coverage(cov, node):
    """A node's ``coverage`` (audit/coverage.py) as the report keeps it: the known checks with a
    known state (a check missing or malformed reads ``unknown``), details and reason as text,
    GPU models with whole counts. None stays None (an audit without coverage: an older fact)."""
    if cov is None:
        return None
    if not isinstance(cov, dict) or cov.get("status") not in audit_coverage.STATUSES:
        raise ReportError("node %r has a coverage without a known status (%s): %r"
                          % (node, ", ".join(audit_coverage.STATUSES),
                             cov.get("status") if isinstance(cov, dict) else cov))
    checks = {}
    for name in audit_coverage.CHECKS:
        check = as_dict(as_dict(cov.get("checks")).get(name))
        if check.get("state") in audit_coverage.STATES:
            checks[name] = {"state": check["state"], "detail": str(check.get("detail") or "")}
        else:
            checks[name] = {"state": "unknown", "detail": "not reported"}
    models = {}
    for model, count in as_dict(cov.get("gpu_models")).items():
        if not isinstance(count, bool) and isinstance(count, int) and count >= 0:
            models[str(model)] = count
    reason = cov.get("reason")
    return {"status": cov["status"], "reason": None if reason is None else str(reason), "checks": checks,
            "gpu_models": models}


def _text_or_none(value):
    return value if isinstance(value, str) else None


def is_clean(node):
    """An audited node with no finding of its own, none of the cluster's affecting it, and a
    coverage (when it has one) that says it is a GPU node the audit saw."""
    cov = node.get("coverage")
    return (node["status"] == "audited" and not node["findings"] and not node.get("cluster_findings")
            and (cov is None or cov.get("status") == "gpu_node"))


def scope_of(fid):
    """The finding table's scope of ``fid`` (``node`` for an id the table does not know)."""
    row = TYPES.get(fid)
    return row.scope if row is not None else "node"


def finding_digest(finding):
    """16 hex digits of SHA-256 over the finding's content but its node: the same problem seen
    on several nodes has one digest."""
    content = dict((k, finding.get(k)) for k in ("id", "severity", "title", "evidence", "remediation", "references"))
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode("utf-8", "backslashreplace")).hexdigest()[:16]


def cluster_scoped(nodes):
    """Take the findings of cluster scope out of each node's ``findings`` (in place) and return
    them once per cluster: one entry per id and content (``digest``: a component at two versions
    during an upgrade is two entries), with ``nodes`` (sorted) and ``affected_nodes``. Each node
    names its entries in ``cluster_findings`` (``[{"id", "digest"}]``)."""
    groups = {}
    for node in nodes:
        keep, refs = [], []
        for f in node["findings"]:
            if scope_of(f["id"]) != "cluster":
                keep.append(f)
                continue
            digest = finding_digest(f)
            group = groups.get((f["id"], digest))
            if group is None:
                group = groups[(f["id"], digest)] = dict(f, node=None, scope="cluster", digest=digest, nodes=[])
            if node["name"] not in group["nodes"]:
                group["nodes"].append(node["name"])
                refs.append({"id": f["id"], "digest": digest})
        node["findings"] = keep
        node["cluster_findings"] = sorted(refs, key=lambda r: (r["id"], r["digest"]))
    out = []
    for group in groups.values():
        group["nodes"].sort()
        group["affected_nodes"] = len(group["nodes"])
        out.append(group)
    return out


def _cluster_order(f):
    return (-severity_rank(f["severity"]), f["id"], -f["affected_nodes"], f["digest"])


def worst_severity(node, cluster_by_key=None):
    """The most severe severity among the node's findings and (with ``cluster_by_key``,
    ``{(id, digest): finding}``) the cluster findings affecting it; None without any."""
    sevs = [f["severity"] for f in node["findings"]]
    for ref in node.get("cluster_findings") or []:
        f = (cluster_by_key or {}).get((ref["id"], ref["digest"]))
        if f is not None:
            sevs.append(f["severity"])
    return max(sevs, key=severity_rank) if sevs else None


def coverage_counts(nodes):
    """``{"status": {coverage status: nodes}, check: {state: nodes}}`` over the audited nodes
    that report a coverage."""
    out = {"status": dict((s, 0) for s in audit_coverage.STATUSES)}
    for check in audit_coverage.CHECKS:
        out[check] = dict((state, 0) for state in audit_coverage.STATES)
    for node in nodes:
        cov = node.get("coverage")
        if node["status"] != "audited" or cov is None:
            continue
        out["status"][cov["status"]] += 1
        for check in audit_coverage.CHECKS:
            out[check][cov["checks"][check]["state"]] += 1
    return out


def _node_tally(entry, node):
    entry["nodes"] += 1
    if is_clean(node):
        entry["clean"] += 1
    if node["findings"] or node.get("cluster_findings"):
        entry["with_findings"] += 1


def node_gpu_models(node):
    """``{model: GPUs}`` of a report node: what the audit saw (its coverage), else, for a node the
    audit did not see, what the cluster's Node labels say (``gpu_models``); {} when neither."""
    if node["status"] == "audited":
        return (node.get("coverage") or {}).get("gpu_models") or {}
    return node.get("gpu_models") or {}


def by_gpu_model(nodes):
    """``[{"model", "nodes", "audited", "gpus", "clean", "with_findings"}]``: the nodes per GPU model
    (``node_gpu_models``; a node with two models counts under each; ``model`` None: no model
    known), most nodes first."""
    out = {}
    for node in nodes:
        models = node_gpu_models(node) or {None: 0}
        for model, count in models.items():
            entry = out.setdefault(model, {"model": model, "nodes": 0, "audited": 0, "gpus": 0, "clean": 0,
                                           "with_findings": 0})
            entry["gpus"] += count
            if node["status"] == "audited":
                entry["audited"] += 1
            _node_tally(entry, node)
    return sorted(out.values(), key=lambda e: (-e["nodes"], e["model"] is None, e["model"] or ""))


def by_group(nodes):
    """``[{"value", "nodes", "audited", "clean", "with_findings"}]``: the nodes per value of the
    report's ``group_label`` (``value`` None: the node has no such label, or its labels are not
    known - ``labels_from`` None), most nodes first."""
    out = {}
    for node in nodes:
        value = node.get("group") if isinstance(node.get("group"), str) else None
        entry = out.setdefault(value, {"value": value, "nodes": 0, "audited": 0, "clean": 0, "with_findings": 0})
        if node["status"] == "audited":
            entry["audited"] += 1
        _node_tally(entry, node)
    return sorted(out.values(), key=lambda e: (-e["nodes"], e["value"] is None, e["value"] or ""))


CVE_SEVERITIES = ("critical", "high", "medium", "low", "info")
CVE_SEVERITY_RANK = dict((sev, len(CVE_SEVERITIES) - i) for i, sev in enumerate(CVE_SEVERITIES))
SECURITY_PREFIX = "security."
CVE_ID = re.compile(r"^CVE-\d{4}-\d{4,}\Z")
CVE_NODE_LIST_MAX = 10  # node names shown per CVE in Markdown and HTML; JSON has them all


def _number(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _source_urls(sources):
    out = []
    for src in sources if isinstance(sources, list) else []:
        url = src.get("url") if isinstance(src, dict) else src
        if isinstance(url, str) and url and url not in out:
            out.append(url)
    return out


def _cve_ids(value):
    """The CVE ids in a list (``CVE-2025-23266``); anything else in it is ignored."""
    return [c for c in as_list(value) if isinstance(c, str) and CVE_ID.match(c)]


def group_cves(findings):
    """The ``security.<component>`` findings grouped by CVE across the fleet.

    Input: report findings (with ``node``) whose evidence is ``{component, version, cves, max_cvss,
    advisories: [{id, title, cves, max_cvss, severity, status, fixed, sources, ...}]}``. One entry
    per CVE: ``id``, ``max_cvss`` (highest score of the advisories naming it), ``severity`` (the
    highest catalog severity of those advisories, else the CVSS rating), ``components``,
    ``affected_nodes`` (count) and ``node_names``, ``possibly_affected_nodes`` (the nodes where only
    unknown conditions keep it), ``fixed`` (component -> first fixed versions of the nodes'
    branches), ``advisories`` (ids), ``sources`` (URLs) and ``nodes`` (node, component, version,
    status). Sorted by severity, score, id. Findings without CVEs add nothing.
    """
    by_cve = {}
    for f in findings:
        if not f["id"].startswith(SECURITY_PREFIX) or not isinstance(f.get("evidence"), dict):
            continue
        ev = f["evidence"]
        component = ev.get("component") if isinstance(ev.get("component"), str) else f["id"][len(SECURITY_PREFIX):]
        version = ev.get("version") if isinstance(ev.get("version"), str) else None
        advisories = dict_items(ev.get("advisories"))
        cves = _cve_ids(ev.get("cves"))
        for adv in advisories:
            cves += [c for c in _cve_ids(adv.get("cves")) if c not in cves]
        for cve in cves:
            slot = by_cve.setdefault(cve, {"id": cve, "max_cvss": None, "severity": None, "components": [],
                                           "fixed": {}, "advisories": [], "sources": [], "_nodes": {}})
            naming = [a for a in advisories if cve in _cve_ids(a.get("cves"))]
            status = "affected"
            if naming and all(a.get("status") == "possibly_affected" for a in naming):
                status = "possibly_affected"
            for adv in naming or [{"max_cvss": ev.get("max_cvss")}]:
                score = _number(adv.get("max_cvss"))
                if score is not None and (slot["max_cvss"] is None or score > slot["max_cvss"]):
                    slot["max_cvss"] = score
                sev = adv.get("severity") if adv.get("severity") in CVE_SEVERITY_RANK else None
                if sev and (slot["severity"] is None or CVE_SEVERITY_RANK[sev] > CVE_SEVERITY_RANK[slot["severity"]]):
                    slot["severity"] = sev
                if isinstance(adv.get("id"), str) and adv["id"] not in slot["advisories"]:
                    slot["advisories"].append(adv["id"])
                fixed = adv.get("fixed")
                if isinstance(fixed, str) and fixed:
                    versions = slot["fixed"].setdefault(component, [])
                    if fixed not in versions:
                        versions.append(fixed)
                for url in _source_urls(adv.get("sources")):
                    if url not in slot["sources"]:
                        slot["sources"].append(url)
            if component not in slot["components"]:
                slot["components"].append(component)
            node = f["node"] if f["node"] is not None else ""
            key = (node, component)
            prev = slot["_nodes"].get(key)
            if prev is None or (prev["status"] == "possibly_affected" and status == "affected"):
                slot["_nodes"][key] = {"node": f["node"], "component": component, "version": version,
                                       "status": status}
    out = []
    for slot in by_cve.values():
        nodes = sorted(slot.pop("_nodes").values(), key=lambda n: (n["node"] or "", n["component"]))
        if slot["severity"] is None:
            slot["severity"] = "info" if slot["max_cvss"] is None else cvss_rating(slot["max_cvss"])
        named = sorted(set(n["node"] for n in nodes if n["node"] is not None))
        sure = set(n["node"] for n in nodes if n["node"] is not None and n["status"] == "affected")
        slot.update(components=sorted(slot["components"]), advisories=sorted(slot["advisories"]),
                    fixed=dict((c, sorted(v)) for c, v in sorted(slot["fixed"].items())),
                    affected_nodes=len(named), node_names=named,
                    possibly_affected_nodes=sorted(set(named) - sure), nodes=nodes)
        out.append(slot)
    out.sort(key=lambda c: (-CVE_SEVERITY_RANK[c["severity"]], -(c["max_cvss"] or 0.0), c["id"]))
    return out


def _finding_order(f):
    return (-severity_rank(f["severity"]), f["id"])


def is_hands_on(finding):
    """True when ``finding`` is hardware work for a person: its type says so (the finding table's
    ``hands_on``: a GPU to replace, a GPU off the bus), or its evidence does (``hands_on``: the
    instance of a type whose remediation the evidence decides, an Xid NVIDIA says to investigate;
    or a finding of a type this collection does not know)."""
    row = TYPES.get(finding["id"])
    if row is not None and row.hands_on:
        return True
    return isinstance(finding.get("evidence"), dict) and finding["evidence"].get("hands_on") is True


def hands_on(nodes):
    """Nodes with hardware work a person must do (``is_hands_on`` findings). The remediation
    leaves these nodes cordoned. ``[{"node", "findings", "work"}]`` sorted by node."""
    out = []
    for node in nodes:
        picked = [f for f in node["findings"] if is_hands_on(f)]
        if picked:
            out.append({"node": node["name"], "findings": [f["id"] for f in picked],
                        "work": [str((f.get("remediation") or {}).get("summary") or f["title"])
                                 for f in picked]})
    return sorted(out, key=lambda e: e["node"])


def failing_findings(report, fail_on):
    """Findings at or above ``fail_on`` (``never``/``none`` -> none): each node's own, then the
    cluster's, each of those once (its ``nodes``: the nodes it affects)."""
    if fail_on in ("never", "none"):
        return []
    threshold = severity_rank(fail_on)
    out = [f for n in report["nodes"] for f in n["findings"] if severity_rank(f["severity"]) >= threshold]
    out += [f for f in report.get("cluster", {}).get("findings", []) if severity_rank(f["severity"]) >= threshold]
    return out


# ------------------------------------------------------------------------------ the coverage limit
# How many GPU nodes in the report's scope the audit may fail to see before the run fails, as a
# Kubernetes maxUnavailable: a whole number, or a percentage of the nodes in scope rounded down
# (a Deployment's maxUnavailable: kubernetes pkg/controller/deployment/util/deployment_util.go
# ResolveFenceposts calls intstr.GetScaledValueFromIntOrPercent(maxUnavailable, desired, false),
# roundUp false; the apps/v1 API reference: "Absolute number is calculated from percentage by
# rounding down"), at most 100% (the apps validation's IsNotMoreThan100Percent). "100%" never fails.
DEFAULT_MAX_UNAUDITED = "10%"
# a node in scope the audit did not see, by why; "not_inspected" is an audited node whose probes
# saw nothing (its coverage); "not a GPU node" is no GPU node: neither counted nor in scope
UNAUDITED = ("unreachable", "failed", "not_audited", "not_inspected")
UNAUDITED_LABELS = {"unreachable": "unreachable", "failed": "failed", "not_audited": "not audited",
                    "not_inspected": "not inspected"}
MESSAGE_NODES_MAX = 20    # nodes named in the failure message; the report names them all
WHY_MAX = 300             # characters of a node's reason in ``coverage_failing``
_PERCENT = re.compile(r"^([0-9]{1,3})%\Z")
_COUNT = re.compile(r"^[0-9]{1,9}\Z")
MAX_UNAUDITED_COUNT = 999999999   # a whole number of nodes: 9 digits, as a string may have


def check_max_unaudited(value):
    """``value`` as the report keeps it: a whole number >= 0 (an ``int``; a string of digits, as an
    extra variable may arrive, too) or a percentage string ``"N%"``, 0 <= N <= 100. Raises
    :class:`ReportError` for anything else (a negative, fractional or over-100% value, a bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ReportError("max_unaudited must be a whole number of nodes or a percentage such as \"10%%\", got %r"
                          % (value,))
    if isinstance(value, int):
        if value < 0 or value > MAX_UNAUDITED_COUNT:
            raise ReportError("max_unaudited must not be negative nor more than %d nodes, got %d"
                              % (MAX_UNAUDITED_COUNT, value))
        return value
    text = value.strip()
    if _COUNT.match(text):
        return int(text)
    m = _PERCENT.match(text)
    if m is None:
        raise ReportError("max_unaudited must be a whole number of nodes or a percentage such as \"10%%\" (whole "
                          "percent), got %r" % (value,))
    if int(m.group(1)) > 100:
        raise ReportError("max_unaudited must not be more than 100%%, got %r" % (value,))
    return "%d%%" % int(m.group(1))


def allowed_unaudited(max_unaudited, in_scope):
    """The number of nodes ``max_unaudited`` allows of ``in_scope`` nodes: the number itself, or the
    percentage of ``in_scope`` rounded down (10% of 9 nodes: 0; of 10: 1; of 19: 1)."""
    value = check_max_unaudited(max_unaudited)
    if isinstance(value, int):
        return value
    return int(value[:-1]) * in_scope // 100


def unaudited_status(node):
    """Why the audit did not see the report node (one of ``UNAUDITED``), or None: it saw it, or it is
    not a GPU node."""
    if node["status"] != "audited":
        return node["status"]
    if (node.get("coverage") or {}).get("status") == "not_inspected":
        return "not_inspected"
    return None


def _why(node, status):
    if status == "not_inspected":
        text = (node.get("coverage") or {}).get("reason")
    else:
        text = node.get("error")
    text = str(text) if text is not None else UNAUDITED_LABELS[status]
    return text if len(text) <= WHY_MAX else text[:WHY_MAX] + "..."


def coverage_limit(nodes, max_unaudited=DEFAULT_MAX_UNAUDITED):
    """Whether the audit saw enough of the report's nodes (its scope: out-of-scope nodes are not in
    ``nodes``). The GPU nodes in scope are every node but the audited ones that are not a GPU
    node; of them, those unreachable, failed, not audited or not inspected are unaudited.
    ``{"max_unaudited", "nodes_in_scope", "allowed", "unaudited", "by_status", "nodes",
    "exceeded"}``: ``exceeded`` when more nodes are unaudited than ``allowed``
    (``allowed_unaudited``); exactly the allowed number passes, no nodes in scope pass."""
    value = check_max_unaudited(max_unaudited)
    in_scope = [n for n in nodes if not (n["status"] == "audited"
                                         and (n.get("coverage") or {}).get("status") == "not_gpu_node")]
    by_status = dict((s, []) for s in UNAUDITED)
    for node in in_scope:
        status = unaudited_status(node)
        if status is not None:
            by_status[status].append(node["name"])
    names = sorted(name for group in by_status.values() for name in group)
    allowed = allowed_unaudited(value, len(in_scope))
    return {"max_unaudited": value, "nodes_in_scope": len(in_scope), "allowed": allowed, "unaudited": len(names),
            "by_status": dict((s, len(v)) for s, v in by_status.items()), "nodes": names,
            "exceeded": len(names) > allowed}


def coverage_failing(report):
    """``[{"node", "status", "why"}]``: every unaudited node of ``report`` when its coverage limit
    is exceeded (sorted by node), else []."""
    limit = report["summary"]["coverage_limit"]
    if not limit["exceeded"]:
        return []
    out = []
    for node in report["nodes"]:
        status = unaudited_status(node)
        if status is not None:
            out.append({"node": node["name"], "status": status, "why": _why(node, status)})
    return sorted(out, key=lambda e: e["node"])


def limit_text(limit):
    """``max_unaudited 10% allows 0 of 4`` - what the limit allows of the nodes in scope."""
    value = limit["max_unaudited"]
    rounded = isinstance(value, str) and int(value[:-1]) * limit["nodes_in_scope"] % 100
    return "max_unaudited %s allows %d of %d%s" % (value, limit["allowed"], limit["nodes_in_scope"],
                                                   " (rounded down)" if rounded else "")


def coverage_limit_text(limit):
    """One sentence of what the audit saw of the GPU nodes in scope and what the limit allows."""
    if limit["unaudited"] == 0:
        seen = "the audit saw all %d GPU nodes in scope" % limit["nodes_in_scope"]
    else:
        seen = "the audit did not see %d of the %d GPU nodes in scope (%s)" % (
            limit["unaudited"], limit["nodes_in_scope"],
            ", ".join("%d %s" % (limit["by_status"][s], UNAUDITED_LABELS[s]) for s in UNAUDITED if limit["by_status"][s]))
    return "%s; %s" % (seen, limit_text(limit))


def coverage_message(limit, failing):
    """The failure message of an exceeded coverage limit: what was not seen, the limit, the first
    ``MESSAGE_NODES_MAX`` nodes with why (``failing``: ``coverage_failing``); None when not exceeded."""
    if not limit["exceeded"]:
        return None
    shown = ", ".join("%s (%s)" % (e["node"], UNAUDITED_LABELS[e["status"]]) for e in failing[:MESSAGE_NODES_MAX])
    more = len(failing) - MESSAGE_NODES_MAX
    return ("%s: exceeded. Not seen: %s%s. The report lists every one with why; max_unaudited "
            "(kubegpu_audit_max_unaudited) \"100%%\" turns this check off."
            % (coverage_limit_text(limit), shown, " and %d more" % more if more > 0 else ""))
