# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""One node's published audit result: the record, its checks when read back, and its Node forms.

A run (or one slice of a run) publishes each node's result so that a later step - the fleet
report, run once - can read every slice's nodes back. The same record goes to either store
(``store.py``):

``{"schema": RECORD_SCHEMA, "schema_version": 1, "node", "run": {"id", "time"}, "status",
"error", "findings": [report findings], "coverage": {...} | None, "labels": {key: value},
"first_seen": {finding id: time}, "previous": {"run", "time", "findings": [ids]} | None, "digest"}``

* ``coverage`` is what the audit could see on the node (audit/coverage.py; None for a node the
  audit did not reach) and ``labels`` the Node's labels as the audit saw them (the report groups
  nodes by one of them): a report built from the store is the report the run itself would write.

* ``first_seen`` is kept across runs: a finding id the node's previous record also had keeps its
  time, a new one gets this run's time (``make_record``).
* ``previous`` is the node's result before this run (its run, time and finding ids), so the report
  can say what is new, resolved and persisting without keeping old reports. A second publish by
  the same run keeps the ``previous`` it had (re-running a slice does not erase the baseline).

What is read back is untrusted (anyone who may patch Nodes, or write the directory, wrote it):
``check_record`` validates size, schema, node name, run id, times, statuses and every finding,
and raises :class:`StoredResultError` naming what is wrong; nothing read back reaches the report
without it.

On a Node (``node_annotations``, ``parse_node_annotations``, ``node_conditions``):

* ``kubegpu.io/audit-result``: a compact JSON summary any tool can read with kubectl - run id,
  time, status, each finding id with its severity, first-seen time and an evidence digest, the
  previous run's ids - at most :data:`SUMMARY_MAX` bytes;
* ``kubegpu.io/audit-findings``: the full findings and coverage, zlib-compressed and
  base64-encoded, at most :data:`FINDINGS_MAX` bytes; larger ones are left out (the summary says
  so and the report shows the summary's ids, severities, digests and coverage status);
* the labels are the Node's own (``metadata.labels``, read with the annotations);
* one Node condition per finding area (``CONDITION_AREAS``, node-problem-detector style: status
  ``True`` when the area has findings), ``lastTransitionTime`` kept while the status holds; a node
  whose audit did not finish changes no area condition (nothing was seen) and says so in
  ``KubegpuAudit``.
"""
from __future__ import annotations

import base64
import binascii
import datetime
import hashlib
import json
import re
import zlib

from ansible_collections.kubegpu.fleet.plugins.plugin_utils import parse_bound
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit import coverage as audit_coverage
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.evaluate import LABEL_TEXT_MAX, LABELS_MAX, node_labels
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.finding_types import TYPES
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report.build import (
    SEVERITIES,
    ReportError,
    check_coverage as report_coverage,
    json_safe,
)

RECORD_SCHEMA = "kubegpu.fleet/audit-node-result"
RECORD_VERSION = 1
RECORD_MAX = 1 << 20          # bytes of one stored record (a directory file, the decompressed findings)
SUMMARY_MAX = 16 << 10        # bytes of the summary annotation
FINDINGS_MAX = 128 << 10      # bytes of the compressed findings annotation (Node annotations total 256 KiB)
FINDINGS_PER_NODE = 512
ERROR_MAX = 2000
MESSAGE_MAX = 1024            # characters of a condition message

SUMMARY_ANNOTATION = "kubegpu.io/audit-result"
FINDINGS_ANNOTATION = "kubegpu.io/audit-findings"
STATUSES = ("audited", "unreachable", "failed")
TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z\Z")
RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}\Z")
FINDING_ID = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,127}\Z")
# DNS-1123 subdomain: what the API server accepts as a Node name (and a safe file name)
NODE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")

# Node condition type -> the finding id prefixes it covers (the text before the first dot).
CONDITION_AREAS = (
    ("KubegpuDriver", ("driver", "defect", "fabricmanager")),
    ("KubegpuGPUHealth", ("gpu", "nvml", "nvswitch")),
    ("KubegpuSecurity", ("security",)),
    ("KubegpuKubelet", ("kubelet", "cpumanager", "checkpoint", "node")),
    ("KubegpuDeviceAccess", ("devchar", "uvm", "cgroup")),
    ("KubegpuClusterComponents", ("cluster",)),
)
AUDIT_CONDITION = "KubegpuAudit"   # the audit itself: True when it did not finish or a probe failed
CONDITION_TYPES = tuple(t for t, _p in CONDITION_AREAS) + (AUDIT_CONDITION,)


class StoredResultError(ValueError):
    """A stored result that is not trusted: malformed, oversized, of another schema or node."""


def utc_time(value=None):
    """``YYYY-MM-DDTHH:MM:SSZ`` of ``value`` (a datetime; now when None)."""
    value = value or datetime.datetime.now(datetime.timezone.utc)
    return value.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def canonical(value):
    """Compact JSON with sorted keys: what digests and sizes are computed on."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def digest(value):
    return "sha256:" + hashlib.sha256(canonical(value).encode("utf-8", "surrogatepass")).hexdigest()


def check_node_name(name):
    if not isinstance(name, str) or len(name) > 253 or not NODE_NAME.match(name):
        raise StoredResultError("node name %r is not a Kubernetes node name (DNS-1123 subdomain)" % (name,))
    return name


def check_run_id(run_id):
    if not isinstance(run_id, str) or not RUN_ID.match(run_id):
        raise StoredResultError("run id %r is not 1-128 characters of letters, digits, '.', '_', ':', '-'"
                                % (run_id,))
    return run_id


def _check_time(value, what):
    if not isinstance(value, str) or not TIME.match(value):
        raise StoredResultError("%s %r is not a UTC time YYYY-MM-DDTHH:MM:SSZ" % (what, value))
    return value


def _check_finding(f, i):
    if not isinstance(f, dict):
        raise StoredResultError("finding %d is not a mapping" % i)
    if not isinstance(f.get("id"), str) or not FINDING_ID.match(f["id"]):
        raise StoredResultError("finding %d has no valid id: %r" % (i, f.get("id")))
    if f.get("severity") not in SEVERITIES:
        raise StoredResultError("finding %s has severity %r (not one of %s)"
                                % (f["id"], f.get("severity"), ", ".join(SEVERITIES)))
    if not isinstance(f.get("title"), str) or not f["title"]:
        raise StoredResultError("finding %s has no title" % f["id"])
    for key, kind in (("evidence", dict), ("remediation", dict), ("references", list)):
        if key in f and f[key] is not None and not isinstance(f[key], kind):
            raise StoredResultError("finding %s has a %s that is not a %s" % (f["id"], key, kind.__name__))
    references = [str(r) for r in f.get("references") or []]
    return _stored(f["id"], f["severity"], f["title"][:500], f.get("evidence") or {}, f.get("remediation") or {}, references)


# What a record keeps of a finding the node's audit made (finding_types.finding created it there).
FINDING_KEYS = ("id", "severity", "title", "evidence", "remediation", "references")


def _stored(*values):
    return dict(zip(FINDING_KEYS, values))


def node_findings(findings):
    """A node's findings as the record keeps them: strict JSON, only the report's keys, the node's
    own (``node`` is the record's), sorted by id then digest so two runs compare equal."""
    out = [_check_finding(f, i) for i, f in enumerate(json_safe(list(findings or [])))]
    if len(out) > FINDINGS_PER_NODE:
        raise StoredResultError("%d findings, more than %d per node" % (len(out), FINDINGS_PER_NODE))
    return sorted(out, key=lambda f: (f["id"], digest(f)))


def check_coverage(cov, node):
    """A node's coverage (audit/coverage.py) as the record keeps it - the report's form
    (``build.check_coverage``) within the bounds the audit writes it in - or None; raises
    :class:`StoredResultError`."""
    if cov is None:
        return None
    try:
        out = report_coverage(cov, node)
    except ReportError as e:
        raise StoredResultError(str(e))
    long_detail = [k for k, v in out["checks"].items() if len(v["detail"]) > audit_coverage.DETAIL_MAX + 3]
    if long_detail:
        raise StoredResultError("coverage check %s has a detail of more than %d characters"
                                % (long_detail[0], audit_coverage.DETAIL_MAX + 3))
    if out["reason"] is not None and len(out["reason"]) > ERROR_MAX:
        raise StoredResultError("the coverage reason is more than %d characters" % ERROR_MAX)
    if len(out["gpu_models"]) > audit_coverage.MODEL_MAX or any(len(m) > LABEL_TEXT_MAX for m in out["gpu_models"]):
        raise StoredResultError("the coverage names more than %d GPU models or a model name of more than %d "
                                "characters" % (audit_coverage.MODEL_MAX, LABEL_TEXT_MAX))
    return out


def check_labels(labels):
    """The Node labels a record keeps (``{str: str}``, at most ``LABELS_MAX``, each key and value at
    most ``LABEL_TEXT_MAX`` characters: evaluate.node_labels' bounds); None is ``{}``. Raises
    :class:`StoredResultError`."""
    if labels is None:
        return {}
    if not isinstance(labels, dict):
        raise StoredResultError("labels is not a mapping")
    if len(labels) > LABELS_MAX:
        raise StoredResultError("%d labels, more than the %d a record keeps" % (len(labels), LABELS_MAX))
    for key, value in labels.items():
        if not isinstance(key, str) or not isinstance(value, str) or not key \
                or len(key) > LABEL_TEXT_MAX or len(value) > LABEL_TEXT_MAX:
            raise StoredResultError("label %r is not a label key and value of at most %d characters"
                                    % (key, LABEL_TEXT_MAX))
    return dict(sorted(labels.items()))


def make_record(entry, run_id, run_time, previous=None):
    """The record of one node's audit (``entry``: ``{"name", "status", "error"?, "findings"}`` as
    ``write.audit_nodes`` gives, with ``coverage`` and ``labels`` when audited) for run ``run_id`` at ``run_time``, with ``first_seen`` and
    ``previous`` carried from the node's stored record ``previous`` (a checked record or None)."""
    name = check_node_name(entry.get("name"))
    check_run_id(run_id)
    _check_time(run_time, "run time")
    status = entry.get("status", "audited")
    if status not in STATUSES:
        raise StoredResultError("node %s has status %r" % (name, status))
    findings = node_findings(entry.get("findings"))
    if previous is not None and previous["run"]["id"] == run_id:
        baseline = previous.get("previous")   # this run published the node before: keep its baseline
        base_seen = dict((baseline or {}).get("first_seen") or {})
    elif previous is not None and previous["status"] != "audited" and previous.get("previous") is not None:
        # the node was not seen last time: what changed is measured against the last run that saw it
        baseline = previous["previous"]
        base_seen = previous["first_seen"]
    elif previous is not None:
        baseline = {"run": previous["run"]["id"], "time": previous["run"]["time"],
                    "status": previous["status"], "findings": sorted(set(f["id"] for f in previous["findings"])),
                    "first_seen": previous["first_seen"]}
        base_seen = previous["first_seen"]
    else:
        baseline, base_seen = None, {}
    first_seen = {}
    if status == "audited":
        for f in findings:
            first_seen[f["id"]] = base_seen.get(f["id"], run_time)
    elif previous is not None:
        # nothing was seen this run: the first-seen times stay as they were
        first_seen = dict(base_seen)
    if baseline is not None:
        baseline = dict(baseline, first_seen=dict((k, v) for k, v in sorted(baseline["first_seen"].items())
                                                  if k in baseline["findings"]))
    error = entry.get("error")
    record = {"schema": RECORD_SCHEMA, "schema_version": RECORD_VERSION, "node": name,
              "run": {"id": run_id, "time": run_time}, "status": status,
              "error": None if error is None else str(error)[:ERROR_MAX],
              "findings": findings, "coverage": check_coverage(entry.get("coverage"), name),
              "labels": check_labels(json_safe(entry.get("labels"))),
              "first_seen": dict(sorted(first_seen.items())), "previous": baseline}
    record["digest"] = digest(findings)
    size = len(canonical(record).encode("utf-8", "surrogatepass"))
    if size > RECORD_MAX:
        raise StoredResultError("the result of node %s is %d bytes, more than the %d a record may hold"
                                % (name, size, RECORD_MAX))
    return record


def _check_previous(prev):
    if prev is None:
        return None
    if not isinstance(prev, dict):
        raise StoredResultError("previous is not a mapping")
    check_run_id(prev.get("run"))
    _check_time(prev.get("time"), "previous run time")
    if prev.get("status") not in STATUSES:
        raise StoredResultError("previous status %r" % (prev.get("status"),))
    ids = prev.get("findings")
    if not isinstance(ids, list) or not all(isinstance(i, str) and FINDING_ID.match(i) for i in ids):
        raise StoredResultError("previous findings is not a list of finding ids")
    seen = prev.get("first_seen")
    if not isinstance(seen, dict):
        raise StoredResultError("previous first_seen is not a mapping")
    for k, v in seen.items():
        _check_time(v, "previous first_seen of %s" % k)
    return {"run": prev["run"], "time": prev["time"], "status": prev["status"], "findings": sorted(set(ids)),
            "first_seen": dict(sorted(seen.items()))}


def check_record(doc, node=None):
    """The record ``doc`` (parsed JSON) checked; raises :class:`StoredResultError`. ``node``: the
    name it must be about (a Node's annotation about another node, a file of another name)."""
    if not isinstance(doc, dict):
        raise StoredResultError("not a JSON object")
    if doc.get("schema") != RECORD_SCHEMA:
        raise StoredResultError("schema %r, not %s" % (doc.get("schema"), RECORD_SCHEMA))
    if doc.get("schema_version") != RECORD_VERSION:
        raise StoredResultError("schema_version %r, this collection reads %d"
                                % (doc.get("schema_version"), RECORD_VERSION))
    name = check_node_name(doc.get("node"))
    if node is not None and name != node:
        raise StoredResultError("the record is about node %r, found on %r" % (name, node))
    run = doc.get("run")
    if not isinstance(run, dict):
        raise StoredResultError("run is not a mapping")
    check_run_id(run.get("id"))
    _check_time(run.get("time"), "run time")
    if doc.get("status") not in STATUSES:
        raise StoredResultError("status %r is not one of %s" % (doc.get("status"), ", ".join(STATUSES)))
    if doc.get("error") is not None and not isinstance(doc["error"], str):
        raise StoredResultError("error is not a string")
    if not isinstance(doc.get("findings"), list):
        raise StoredResultError("findings is not a list")
    findings = node_findings(doc["findings"])
    seen = doc.get("first_seen")
    if not isinstance(seen, dict):
        raise StoredResultError("first_seen is not a mapping")
    for k, v in seen.items():
        if not FINDING_ID.match(str(k)):
            raise StoredResultError("first_seen names %r, not a finding id" % (k,))
        _check_time(v, "first_seen of %s" % k)
    missing = sorted(set(f["id"] for f in findings) - set(seen))
    if doc["status"] == "audited" and missing:
        raise StoredResultError("first_seen lacks %s" % ", ".join(missing))
    if doc.get("digest") != digest(findings):
        raise StoredResultError("the digest does not match the findings (changed after it was written)")
    return {"schema": RECORD_SCHEMA, "schema_version": RECORD_VERSION, "node": name,
            "run": {"id": run["id"], "time": run["time"]}, "status": doc["status"],
            "error": None if doc.get("error") is None else doc["error"][:ERROR_MAX], "findings": findings,
            "coverage": check_coverage(doc.get("coverage"), name), "labels": check_labels(doc.get("labels")),
            "first_seen": dict(sorted(seen.items())), "previous": _check_previous(doc.get("previous")),
            "digest": doc["digest"]}


def parse_record(text, node=None, what="the stored result"):
    """``text`` (bytes or str) parsed under the size and nesting bound and checked."""
    try:
        doc = parse_bound.load_json(text, what, node=node, max_bytes=RECORD_MAX)
    except parse_bound.ParseError as e:
        raise StoredResultError(str(e))
    return check_record(doc, node)


def record_json(record):
    return canonical(record) + "\n"


# ------------------------------------------------------------------------------ on a Node

def _summary(record, full):
    return {"v": RECORD_VERSION, "node": record["node"], "run": record["run"]["id"], "time": record["run"]["time"],
            "status": record["status"], "error": None if record["error"] is None else record["error"][:200],
            "digest": record["digest"], "full": full,
            "coverage": None if record["coverage"] is None else record["coverage"]["status"],
            "findings": dict((f["id"], [f["severity"], record["first_seen"].get(f["id"]), digest(f["evidence"])[7:23]])
                             for f in record["findings"]),
            "previous": None if record["previous"] is None else {
                "run": record["previous"]["run"], "time": record["previous"]["time"],
                "status": record["previous"]["status"], "findings": record["previous"]["findings"],
                "first_seen": record["previous"]["first_seen"]}}


def node_annotations(record):
    """``{annotation: value}`` for the Node: the summary, and the full findings and coverage when
    they fit (None removes a stale findings annotation). The labels are the Node's own."""
    bulk = {"findings": record["findings"], "coverage": record["coverage"]}
    packed = base64.b64encode(zlib.compress(canonical(bulk).encode("utf-8", "surrogatepass"), 9))
    full = len(packed) <= FINDINGS_MAX
    summary = canonical(_summary(record, full))
    if len(summary.encode("utf-8")) > SUMMARY_MAX:
        raise StoredResultError("the summary of node %s is more than %d bytes" % (record["node"], SUMMARY_MAX))
    return {SUMMARY_ANNOTATION: summary, FINDINGS_ANNOTATION: packed.decode("ascii") if full else None}


def _unpack_findings(text):
    if not isinstance(text, str) or len(text) > FINDINGS_MAX:
        raise StoredResultError("the findings annotation is missing or more than %d bytes" % FINDINGS_MAX)
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
        inflater = zlib.decompressobj()
        data = inflater.decompress(raw, RECORD_MAX + 1)
    except (binascii.Error, UnicodeEncodeError, zlib.error) as e:
        raise StoredResultError("the findings annotation is not base64 zlib data: %s" % e)
    if len(data) > RECORD_MAX or inflater.unconsumed_tail:
        raise StoredResultError("the findings annotation inflates to more than %d bytes" % RECORD_MAX)
    try:
        return parse_bound.load_json(data, "the findings annotation", max_bytes=RECORD_MAX)
    except parse_bound.ParseError as e:
        raise StoredResultError(str(e))


def parse_node_annotations(node_name, annotations, labels=None):
    """The record a Node's annotations hold (None when it has none), checked, with the Node's
    ``labels`` (its ``metadata.labels``, bounded as the audit bounds them); raises
    :class:`StoredResultError`. Without the full findings (too large when written, or removed) the
    findings are the summary's: id, severity, the finding table's title, evidence ``{"digest"}``;
    the coverage only its status."""
    text = (annotations or {}).get(SUMMARY_ANNOTATION)
    if text is None:
        return None
    if not isinstance(text, str) or len(text.encode("utf-8", "surrogatepass")) > SUMMARY_MAX:
        raise StoredResultError("the %s annotation is more than %d bytes" % (SUMMARY_ANNOTATION, SUMMARY_MAX))
    try:
        s = parse_bound.load_json(text, "the %s annotation" % SUMMARY_ANNOTATION, node=node_name,
                                  max_bytes=SUMMARY_MAX)
    except parse_bound.ParseError as e:
        raise StoredResultError(str(e))
    if not isinstance(s, dict) or s.get("v") != RECORD_VERSION:
        raise StoredResultError("the %s annotation is not a version %d summary" % (SUMMARY_ANNOTATION, RECORD_VERSION))
    ids = s.get("findings")
    if not isinstance(ids, dict):
        raise StoredResultError("the summary's findings is not a mapping")
    for k, v in ids.items():
        if not isinstance(v, list) or len(v) != 3:
            raise StoredResultError("the summary's finding %r is not [severity, first_seen, digest]" % (k,))
    cov = s.get("coverage")
    if cov is not None and cov not in audit_coverage.STATUSES:
        raise StoredResultError("the summary's coverage %r is not one of %s" % (cov, ", ".join(audit_coverage.STATUSES)))
    cov = None if cov is None else {"status": cov, "reason": "the full coverage was too large for the Node annotation"}
    if s.get("full"):
        bulk = _unpack_findings((annotations or {}).get(FINDINGS_ANNOTATION))
        if not isinstance(bulk, dict) or not isinstance(bulk.get("findings"), list):
            raise StoredResultError("the findings annotation is not {findings, coverage}")
        findings, cov = bulk["findings"], bulk.get("coverage")
    else:
        findings = []
        for fid, (severity, _seen, ev_digest) in sorted(ids.items()):
            row = TYPES.get(fid)
            evidence = {"digest": ev_digest, "note": "the full findings were too large for the Node annotation"}
            findings.append(_stored(fid, severity, row.title if row else fid, evidence, {}, []))
    doc = {"schema": RECORD_SCHEMA, "schema_version": RECORD_VERSION, "node": s.get("node"),
           "run": {"id": s.get("run"), "time": s.get("time")}, "status": s.get("status"), "error": s.get("error"),
           "findings": findings, "coverage": cov, "labels": node_view_labels(labels),
           "first_seen": dict((k, v[1]) for k, v in ids.items() if v[1] is not None),
           "previous": s.get("previous")}
    try:
        doc["findings"] = node_findings(findings)
    except StoredResultError:
        raise
    except (TypeError, ValueError) as e:
        raise StoredResultError("the findings are malformed: %s" % e)
    doc["digest"] = s.get("digest") if s.get("full") else digest(doc["findings"])
    record = check_record(doc, node_name)
    if sorted(f["id"] for f in record["findings"]) != sorted(ids):
        raise StoredResultError("the findings annotation does not match the summary's finding ids")
    return record


def node_view_labels(labels):
    """A Node's ``metadata.labels`` as the audit keeps them (evaluate.node_labels: strings only,
    at most ``LABELS_MAX``, each cut at ``LABEL_TEXT_MAX``); None is ``{}``; raises
    :class:`StoredResultError` for labels that are not a mapping."""
    if labels is None:
        return {}
    if not isinstance(labels, dict):
        raise StoredResultError("the Node's labels are not a mapping")
    return node_labels({"labels": labels})


def _area(finding_id):
    prefix = finding_id.split(".", 1)[0]
    for ctype, prefixes in CONDITION_AREAS:
        if prefix in prefixes:
            return ctype
    return AUDIT_CONDITION


def _camel(text):
    return "".join(p[:1].upper() + p[1:] for p in re.split(r"[^A-Za-z0-9]+", text) if p)


def _message(text):
    return text if len(text) <= MESSAGE_MAX else text[:MESSAGE_MAX - 20] + " ... (cut)"


def node_conditions(record, current):
    """The Node's ``status.conditions`` after publishing ``record``: each area's condition
    (``CONDITION_TYPES``) set, other conditions (Ready, node-problem-detector's) kept as they are.
    ``lastTransitionTime`` is kept while a condition's status does not change."""
    now = record["run"]["time"]
    wanted = {}
    by_area = {}
    for f in record["findings"]:
        by_area.setdefault(_area(f["id"]), []).append(f)
    if record["status"] == "audited":
        for ctype, _prefixes in CONDITION_AREAS:
            found = by_area.get(ctype, [])
            if found:
                worst = sorted(found, key=lambda f: (SEVERITIES.index(f["severity"]), f["id"]))[0]
                wanted[ctype] = ("True", _camel(worst["id"]), _message(
                    "run %s: %s" % (record["run"]["id"], ", ".join("%s (%s)" % (f["id"], f["severity"]) for f in found))))
            else:
                wanted[ctype] = ("False", "NoFindings", "run %s: no findings" % record["run"]["id"])
        audit = by_area.get(AUDIT_CONDITION, [])
        wanted[AUDIT_CONDITION] = (("True", "ProbesFailed", _message("run %s: %s" % (
            record["run"]["id"], ", ".join(sorted(set(f["id"] for f in audit)))))) if audit
            else ("False", "Audited", "run %s: every probe ran" % record["run"]["id"]))
    else:
        wanted[AUDIT_CONDITION] = ("True", _camel(record["status"]), _message(
            "run %s: the node was %s: %s" % (record["run"]["id"], record["status"], record["error"] or "")))
    out = []
    done = set()
    for cond in current or []:
        if not isinstance(cond, dict):
            continue
        ctype = cond.get("type")
        if ctype in wanted and ctype not in done:
            out.append(_condition(ctype, wanted[ctype], cond, now))
            done.add(ctype)
        elif ctype not in wanted:
            out.append(cond)
    for ctype in CONDITION_TYPES:
        if ctype in wanted and ctype not in done:
            out.append(_condition(ctype, wanted[ctype], None, now))
    return out


def _condition(ctype, want, old, now):
    status, reason, message = want
    transition = now
    if old is not None and old.get("status") == status and isinstance(old.get("lastTransitionTime"), str):
        transition = old["lastTransitionTime"]
    return {"type": ctype, "status": status, "reason": reason, "message": message,
            "lastHeartbeatTime": now, "lastTransitionTime": transition}
