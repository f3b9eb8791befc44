# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where published audit results live between the runs and slices that write them and the
report step that reads them: the Kubernetes API (on each Node) or a directory (a PVC or NFS path).

Both stores take a node's result (``write.audit_nodes`` entry) and publish
``results.make_record(entry, run, time, previous)``, where ``previous`` is the node's record as
the store holds it at that moment, and both read every record back checked
(``results.check_record``): a record that fails is *rejected* with the reason, never used.

* :class:`NodeStore` (the API): per Node, one guarded JSON patch of the annotations
  (``rollout/node_api.patch_node``: a ``test`` of the resourceVersion the record was computed
  from; a conflict re-reads the Node and recomputes the record, so two runs publishing at once
  never lose each other's first-seen times) and one guarded patch of ``nodes/<name>/status`` with
  the areas' conditions (``results.node_conditions``). A 401/403 stops with the RBAC the
  publishing identity needs; a Node that does not exist is reported for that node only.
* :class:`DirectoryStore`: ``<path>/nodes/<node>.json`` written through the collection's write
  primitive (atomic rename, the directory's trust checks), under an exclusive lock on
  ``<path>/.lock`` for the read-compute-write of each publish (two runs on the same NFS path
  serialise there).
"""
from __future__ import annotations

import errno
import os

from ansible_collections.kubegpu.fleet.plugins.module_utils._common import fileutil, safe_io
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit import results
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.k8s import client as k8s_client
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.k8s import service
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.rollout import node_api

RBAC_HINT = ("the publishing identity needs patch on nodes and on nodes/status (a ClusterRole: apiGroups [\"\"], "
             "resources [nodes, nodes/status], verbs [get, list, patch]; docs/awx.md, \"Publishing the results\")")
READ_HINT = "the report step's identity needs list on nodes (docs/awx.md, \"Publishing the results\")"
MAX_ENTRIES = 100000   # files read from a directory store


class StoreError(Exception):
    """The store cannot be used at all (no access, a refused directory); the message says why."""


def _rbac(exc, hint):
    return isinstance(exc, k8s_client.K8sError) and exc.status in (401, 403) and "%s: %s" % (exc, hint)


class NodeStore(object):
    """Results on the Nodes, through a ``node_api.NodeApi``."""

    kind = "kubernetes"

    def __init__(self, api):
        self.api = api

    def publish(self, entries, run_id, run_time, check_mode=False):
        """Publish each entry; ``{node: {"changed", "error"?, "attempts"}}`` and the rejected
        stored records that were replaced (``{node: reason}``)."""
        out, replaced = {}, {}
        for entry in entries:
            name = entry["name"]
            try:
                results.check_node_name(name)
                out[name] = self._publish_one(entry, run_id, run_time, check_mode, replaced)
            except results.StoredResultError as e:
                out[name] = {"changed": False, "error": str(e)}
            except k8s_client.K8sError as e:
                refused = _rbac(e, RBAC_HINT)
                if refused:
                    raise StoreError("cannot publish the audit result of node %s: %s" % (name, refused))
                out[name] = {"changed": False, "error": "cannot publish to Node %s: %s" % (name, e)}
        return out, replaced

    def _publish_one(self, entry, run_id, run_time, check_mode, replaced):
        name = entry["name"]
        made = {}

        def annotations(node):
            previous = None
            try:
                previous = results.parse_node_annotations(name, (node.get("metadata") or {}).get("annotations"))
            except results.StoredResultError as e:
                replaced[name] = str(e)
            made["record"] = results.make_record(entry, run_id, run_time, previous)
            return results.node_annotations(made["record"])

        meta = node_api.patch_node(self.api, name, annotations=annotations, check_mode=check_mode)

        def conditions(node):
            current = (node.get("status") or {}).get("conditions")
            wanted = results.node_conditions(made["record"], current if isinstance(current, list) else [])
            if wanted == current:
                return [], None
            return [{"op": "add", "path": "/status/conditions", "value": wanted}], None

        fresh = [meta["node"]]   # the Node as the annotation patch returned it: no second read unless a conflict

        def read():
            return fresh.pop() if fresh else self.api.node(name)

        status = service.guarded_patch(
            read, conditions,
            lambda ops: service.json_patch(self.api.client, "v1", "nodes", name, ops, subresource="status",
                                           what="patch Node %s status" % name),
            check_mode=check_mode, what="Node %s" % name)
        return {"changed": meta["changed"] or status["changed"], "attempts": meta["attempts"] + status["attempts"]}

    def read(self):
        """``(records, rejected, nodes)``: checked records by node, ``{node: reason}`` for the
        annotations that failed the checks, and every Node the cluster has (one list call)."""
        try:
            nodes = self.api.nodes()
        except k8s_client.K8sError as e:
            refused = _rbac(e, READ_HINT)
            raise StoreError("cannot read the published audit results: %s" % (refused or e))
        records, rejected = {}, {}
        for node in nodes:
            meta = node.get("metadata") if isinstance(node, dict) else None
            name = meta.get("name") if isinstance(meta, dict) else None
            if not isinstance(name, str):
                continue
            try:
                record = results.parse_node_annotations(name, meta.get("annotations"), meta.get("labels"))
            except results.StoredResultError as e:
                rejected[name] = "the result on Node %s is not trusted: %s" % (name, e)
                continue
            if record is not None:
                records[name] = record
        return records, rejected, nodes


class DirectoryStore(object):
    """Results as one JSON file per node under ``path``/nodes."""

    kind = "directory"

    def __init__(self, path):
        if not isinstance(path, str) or not os.path.isabs(path):
            raise StoreError("the directory store needs an absolute path, got %r" % (path,))
        self.path = path
        self.nodes = os.path.join(path, "nodes")

    def _file(self, name):
        return os.path.join(self.nodes, results.check_node_name(name) + ".json")

    def _lock(self):
        try:
            fileutil.make_dirs(self.nodes, mode=0o750)
            with fileutil.NodeFile(os.path.join(self.path, ".lock"), action="lock") as lock:
                return lock.lock()   # an exclusive flock held until publish closes the descriptor
        except OSError as e:
            raise StoreError("cannot use the result directory %s: %s" % (self.path, e))

    def _read_one(self, name):
        try:
            data = safe_io.read_bytes(self._file(name), limit=results.RECORD_MAX, missing_ok=True)
        except (safe_io.UnsafeInput, OSError) as e:
            raise results.StoredResultError("cannot read %s: %s" % (self._file(name), e))
        if data is None:
            return None
        return results.parse_record(data, node=name, what=self._file(name))

    def publish(self, entries, run_id, run_time, check_mode=False):
        out, replaced = {}, {}
        fd = self._lock()
        try:
            for entry in entries:
                name = entry["name"]
                try:
                    results.check_node_name(name)
                    try:
                        previous = self._read_one(name)
                    except results.StoredResultError as e:
                        previous = None
                        replaced[name] = str(e)
                    record = results.make_record(entry, run_id, run_time, previous)
                    text = results.record_json(record)
                    changed = previous is None or results.record_json(previous) != text
                    if changed and not check_mode:
                        fileutil.write_file(self._file(name), text, mode=0o640, backup=False)
                    out[name] = {"changed": changed, "attempts": 1}
                except results.StoredResultError as e:
                    out[name] = {"changed": False, "error": str(e)}
                except OSError as e:
                    raise StoreError("cannot write the audit result of node %s to %s: %s" % (name, self.path, e))
        finally:
            os.close(fd)
        return out, replaced

    def read(self):
        """``(records, rejected, None)``: every ``<node>.json`` checked; any other entry, and any
        file that fails the checks, is rejected with the reason."""
        records, rejected = {}, {}
        try:
            names = os.listdir(self.nodes)
        except OSError as e:
            if e.errno == errno.ENOENT:
                return records, rejected, None
            raise StoreError("cannot read the result directory %s: %s" % (self.nodes, e))
        if len(names) > MAX_ENTRIES:
            raise StoreError("%s has %d entries, more than the %d read" % (self.nodes, len(names), MAX_ENTRIES))
        for entry in sorted(names):
            if entry.startswith(".") and ".json." in entry:
                continue   # a write in progress (the primitive's temporary file)
            name = entry[:-5] if entry.endswith(".json") else None
            if name is None or not results.NODE_NAME.match(name):
                rejected[entry] = "%s is not a node result file (<node name>.json)" % os.path.join(self.nodes, entry)
                continue
            try:
                record = self._read_one(name)
            except results.StoredResultError as e:
                rejected[name] = "the result file of node %s is not trusted: %s" % (name, e)
                continue
            if record is not None:
                records[name] = record
        return records, rejected, None
