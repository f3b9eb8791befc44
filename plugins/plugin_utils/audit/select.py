# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Choose nodes from the fleet's published audit results with a JMESPath expression.

An AWX workflow goes audit -> remediate (or rolling_reboot, or a report view) on exactly the nodes
the audit says need it: ``kubegpu.fleet.audit_select`` reads the results a run published
(``store.py``: the Nodes or a directory, every record checked), runs the expression over them and
returns the node names and the inventory hosts they are.

The expression is compiled first (``compile_expression``): an invalid one fails with the parser's
message and where it stopped, before the store is read and before any play touches a node.

The document it runs over (``documents``) is a JSON list, one object per node of the run, sorted by
node name::

    {"node": "gpu-a", "status": "audited" | "unreachable" | "failed", "error": str | null,
     "run": "awx-workflow-812", "time": "2026-11-27T02:00:00Z",
     "labels": {"cloud.google.com/gke-nodepool": "train", ...},
     "coverage": "gpu_node" | "not_gpu_node" | "not_inspected" | null,
     "ids": ["driver.known_bad", ...],
     "severities": ["critical", ...],
     "findings": [{"id", "severity", "title", "first_seen", "evidence"}, ...]}

and it must give a list of node names of the document (strings) or of its objects (their
``node``), for example
every node of pool ``train`` with a known-bad driver::

    [?contains(ids, 'driver.known_bad') && labels."cloud.google.com/gke-nodepool" == 'train'].node

An empty list is a valid selection of no node (nothing to do: ``playbooks/select_from_audit.yml``
runs the playbook on no node, or fails with ``kubegpu_select_require_nodes``). Anything else -
``null`` (a key that is not in the document), a number, a string that is not a node of the
document - fails with what it gave: a typo must never pass as "nothing chosen". jmespath is the library (the JMESPath specification's reference
Python implementation, the one ansible's ``json_query`` filter uses), not code of our own.
"""
from __future__ import annotations

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.action import runner
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit import fleet, publish
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.k8s import action as k8s_action
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.k8s import client as k8s_client

try:
    import jmespath
    import jmespath.exceptions
    HAS_JMESPATH = True
except ImportError:   # pragma: no cover - a declared requirement (requirements.txt)
    jmespath = None
    HAS_JMESPATH = False

EXPRESSION_MAX = 4096    # characters of an expression
SHOWN_MAX = 200          # characters of a wrong result quoted back
FINDING_KEYS = ("id", "severity", "title", "evidence")   # of a stored finding, with its first_seen


class SelectError(ValueError):
    """An expression that cannot be used, or a result that is not a list of node names."""


def compile_expression(text):
    """The compiled expression ``text``; raises :class:`SelectError` with the parser's reason."""
    if not HAS_JMESPATH:
        raise SelectError("the Python library jmespath is required on the controller (pip install jmespath)")
    if not isinstance(text, str) or not text.strip():
        raise SelectError("the selection expression is empty")
    if len(text) > EXPRESSION_MAX:
        raise SelectError("the selection expression is %d characters, more than %d" % (len(text), EXPRESSION_MAX))
    try:
        return jmespath.compile(text)
    except jmespath.exceptions.JMESPathError as e:
        raise SelectError("invalid JMESPath expression %r: %s" % (text, " ".join(str(e).split())))


def documents(records, run_id):
    """The document the expression runs over: one object per checked record of run ``run_id``
    (``results.check_record``'s form), sorted by node name."""
    out = []
    for name in sorted(records):
        record = records[name]
        if record["run"]["id"] != run_id:
            continue
        cov = record.get("coverage")
        out.append({"node": name, "status": record["status"], "error": record["error"],
                    "run": record["run"]["id"], "time": record["run"]["time"],
                    "labels": dict(record.get("labels") or {}),
                    "coverage": None if cov is None else cov["status"],
                    "ids": sorted(set(f["id"] for f in record["findings"])),
                    "severities": sorted(set(f["severity"] for f in record["findings"])),
                    "findings": [dict([(k, f[k]) for k in FINDING_KEYS], first_seen=record["first_seen"].get(f["id"]))
                                 for f in record["findings"]]})
    return out


def _shown(value):
    text = repr(value)
    return text if len(text) <= SHOWN_MAX else text[:SHOWN_MAX] + "..."


def select(expression, docs):
    """The sorted node names ``expression`` (compiled, or text) chooses from ``docs``; raises
    :class:`SelectError` when it gives anything but a list of the documents' node names or objects."""
    if isinstance(expression, str):
        expression = compile_expression(expression)
    try:
        found = expression.search(docs)
    except jmespath.exceptions.JMESPathError as e:   # a function given the wrong type, at run time
        raise SelectError("the selection expression failed on the published results: %s" % " ".join(str(e).split()))
    if not isinstance(found, list):
        raise SelectError("the selection expression gave %s, not a list of node names (end it with .node, "
                          "for example [?contains(ids, 'driver.known_bad')].node)" % _shown(found))
    known = set(d["node"] for d in docs)
    names = set()
    for item in found:
        name = item.get("node") if isinstance(item, dict) else item
        if not isinstance(name, str) or name not in known:
            raise SelectError("the selection expression gave %s among its results, not a node name or a node "
                              "of the run's published results" % _shown(item))
        names.add(name)
    return sorted(names)


def inventory_hosts(names, hosts, hostvars):
    """``(hosts, missing)``: the inventory hostnames of the node ``names`` (a host is its
    ``kubegpu_node_name``, else its inventory name; ``hosts`` the inventory's hosts) and the names
    no inventory host is."""
    by_node = {}
    for host in hosts or []:
        hv = hostvars[host] if host in hostvars else {}
        node = hv.get("kubegpu_node_name") if hasattr(hv, "get") else None
        by_node.setdefault(node if isinstance(node, str) and node else host, []).append(host)
    chosen, missing = [], []
    for name in names:
        if name in by_node:
            chosen.extend(by_node[name])
        else:
            missing.append(name)
    return sorted(set(chosen)), missing


# ------------------------------------------------------------------------ kubegpu.fleet.audit_select

ARGUMENT_SPEC = dict({"expression": {"type": "str", "required": True},
                      "hosts": {"type": "list", "elements": "str"}}, **publish.STORE_SPEC)
ARGUMENT_SPEC.update(k8s_client.AUTH_ARG_SPEC)


def select_work(task, args):
    """kubegpu.fleet.audit_select: compile, read the store, choose; the task's result keys."""
    try:
        compiled = compile_expression(args["expression"])   # before anything is read
    except SelectError as e:
        raise runner.ActionFailed(str(e))
    out = {}
    with k8s_action.masked(out, args) as secrets:
        with publish.open_store(task, args, secrets) as where:
            records, rejected, _nodes = where.read()
        run_id = fleet.select_run(records, args["run_id"] or None)
        if run_id is None:
            raise runner.ActionFailed("the %s store holds no audit result to select from: publish a run first "
                                      "(kubegpu_audit_store)" % where.kind)
        docs = documents(records, run_id)
        if not docs:
            raise runner.ActionFailed("the %s store holds no result of run %s to select from (runs found: %s)" % (
                where.kind, run_id, ", ".join(sorted(set(r["run"]["id"] for r in records.values()))) or "none"))
        try:
            names = select(compiled, docs)
        except SelectError as e:
            raise runner.ActionFailed(str(e))
        task_vars = task.task_vars
        hosts = args["hosts"] if args["hosts"] is not None else list((task_vars.get("groups") or {}).get("all") or [])
        chosen, missing = inventory_hosts(names, hosts, task_vars.get("hostvars", {}))
        out.update(changed=False, run_id=run_id, store=args["store"], considered=len(docs), nodes=names,
                   hosts=chosen, missing=missing, rejected=dict(sorted(rejected.items())))
        warnings = []
        if missing:
            warnings.append("selected but not in the inventory (not run on): %s" % ", ".join(missing))
        if rejected:
            warnings.append("stored results not trusted, not selectable: %s" % "; ".join(
                "%s: %s" % kv for kv in sorted(rejected.items())))
        if warnings:
            out["warnings"] = warnings
    return out


ACTION = runner.Action(ARGUMENT_SPEC, select_work)
