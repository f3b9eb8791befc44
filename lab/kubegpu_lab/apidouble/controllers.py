"""The controllers a cluster runs beside kube-apiserver, as far as the lab needs them.

They run synchronously inside the store after each write (``_reconcile``), plus a periodic
``tick`` for time-driven work (node lifecycle). Every object they change is recorded in the
history with ``actor: controller/<name>``.

- daemonset: one pod per eligible node (nodeSelector, required node affinity, taints vs
  tolerations incl. the tolerations the real controller adds), ownerReference to the
  DaemonSet (controller: true), ``controller-revision-hash`` label from the pod template,
  RollingUpdate honouring ``maxUnavailable``, OnDelete, status counters.
- disruption: PodDisruptionBudget status as pkg/controller/disruption computes it.
- garbage collector: dependents of a removed owner are deleted (Orphan strips the refs).
- namespace: a deleted namespace is emptied, then removed.
- node lifecycle: taints for unschedulable / NotReady / Unknown, and a node whose kubelet
  lease is not renewed within ``node_monitor_grace`` seconds gets Ready=Unknown and its
  pods Ready=False.
- pod GC: pods bound to a deleted node are removed.
- event TTL: events are removed ``event_ttl`` seconds after their last write.
- phantom kubelet: pods bound to a node that has no kubelet (no Lease in kube-node-lease)
  start Running/Ready at once and vanish at once when deleted.
"""
import copy
import time

from . import resources
from .selectors import Requirement, from_label_selector_object
from .util import controller_ref, iso, parse_time, pod_ready, scaled_value, short_hash

NODE_LEASE_NAMESPACE = "kube-node-lease"
DISRUPTED_POD_TIMEOUT = 120.0

TAINT_UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
TAINT_NOT_READY = "node.kubernetes.io/not-ready"
TAINT_UNREACHABLE = "node.kubernetes.io/unreachable"
_CONTROLLER_TAINTS = (TAINT_UNSCHEDULABLE, TAINT_NOT_READY, TAINT_UNREACHABLE)

# Tolerations the DaemonSet controller adds to every daemon pod (pkg/controller/daemon/util).
DAEMON_TOLERATIONS = [
    {"key": TAINT_NOT_READY, "operator": "Exists", "effect": "NoExecute"},
    {"key": TAINT_UNREACHABLE, "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": TAINT_UNSCHEDULABLE, "operator": "Exists", "effect": "NoSchedule"},
]
HOSTNET_TOLERATION = {"key": "node.kubernetes.io/network-unavailable", "operator": "Exists",
                      "effect": "NoSchedule"}


def _rt(group, plural):
    return resources.find(group, "v1", plural)


def tolerates(tolerations, taint):
    for tol in tolerations or []:
        if tol.get("effect") and tol.get("effect") != taint.get("effect"):
            continue
        op = tol.get("operator", "Equal")
        if not tol.get("key"):
            if op == "Exists":
                return True
            continue
        if tol.get("key") != taint.get("key"):
            continue
        if op == "Exists" or (tol.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def _node_term_matches(term, node):
    labels = node["metadata"].get("labels") or {}
    for expr in term.get("matchExpressions") or []:
        op = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!",
              "Gt": "gt", "Lt": "lt"}.get(expr.get("operator"))
        if op is None or not Requirement(expr.get("key"), op, expr.get("values") or []).matches(labels):
            return False
    for expr in term.get("matchFields") or []:
        if expr.get("key") != "metadata.name":
            return False
        name = node["metadata"]["name"]
        values = expr.get("values") or []
        if expr.get("operator") == "In" and name not in values:
            return False
        if expr.get("operator") == "NotIn" and name in values:
            return False
    return bool(term.get("matchExpressions") or term.get("matchFields"))


class ControllersMixin(object):
    """Mixed into Store; every method runs with the store lock held."""

    # --- node helpers -----------------------------------------------------------------------

    @staticmethod
    def _node_ready(node):
        for cond in ((node.get("status") or {}).get("conditions") or []):
            if cond.get("type") == "Ready":
                return cond.get("status")
        return None

    @staticmethod
    def _is_gpu_node(node):
        labels = node["metadata"].get("labels") or {}
        if str(labels.get("nvidia.com/gpu.present", "")).lower() == "true":
            return True
        status = node.get("status") or {}
        for field in ("capacity", "allocatable"):
            for key, value in (status.get(field) or {}).items():
                if key.startswith("nvidia.com/") and str(value) not in ("", "0"):
                    return True
        return False

    def _node_managed(self, name):
        """A node is run by a kubelet when its Lease exists in kube-node-lease."""
        return self._get(_rt("coordination.k8s.io", "leases"), NODE_LEASE_NAMESPACE, name) is not None

    @classmethod
    def _sync_node_taints(cls, node):
        spec = node.setdefault("spec", {})
        taints = [t for t in spec.get("taints") or [] if not (
            t.get("key") in _CONTROLLER_TAINTS and t.get("effect") == "NoSchedule")]
        if spec.get("unschedulable"):
            taints.append({"key": TAINT_UNSCHEDULABLE, "effect": "NoSchedule", "timeAdded": cls._taint_time(
                node, TAINT_UNSCHEDULABLE)})
        ready = cls._node_ready(node)
        if ready == "False":
            taints.append({"key": TAINT_NOT_READY, "effect": "NoSchedule"})
        elif ready == "Unknown":
            taints.append({"key": TAINT_UNREACHABLE, "effect": "NoSchedule"})
        if taints:
            spec["taints"] = taints
        else:
            spec.pop("taints", None)

    @staticmethod
    def _taint_time(node, key):
        for taint in (node.get("spec") or {}).get("taints") or []:
            if taint.get("key") == key and taint.get("timeAdded"):
                return taint["timeAdded"]
        return iso()

    # --- phantom kubelet --------------------------------------------------------------------

    def _phantom_kubelet_start(self, pod):
        node_name = (pod.get("spec") or {}).get("nodeName")
        if not node_name or self._get(_rt("", "nodes"), None, node_name) is None:
            return
        if self._node_managed(node_name):
            return
        now = iso()
        conds = [{"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": now}
                 for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")]
        statuses = []
        for ctr in pod["spec"].get("containers") or []:
            statuses.append({"name": ctr.get("name"), "image": ctr.get("image"), "imageID": "",
                             "containerID": "containerd://" + short_hash([pod["metadata"].get("uid"),
                                                                          ctr.get("name")], 32),
                             "ready": True, "started": True, "restartCount": 0, "lastState": {},
                             "state": {"running": {"startedAt": now}}})
        pod["status"] = {"phase": "Running", "conditions": conds, "hostIP": "127.0.0.1",
                         "hostIPs": [{"ip": "127.0.0.1"}], "startTime": now,
                         "qosClass": (pod.get("status") or {}).get("qosClass", "BestEffort"),
                         "containerStatuses": statuses}

    # --- reconcile --------------------------------------------------------------------------

    def _reconcile(self):
        for dummy in range(25):
            before = self.rv
            self._sync_gc()
            self._sync_namespaces()
            self._sync_daemonsets()
            self._sync_pdbs()
            if self.rv == before:
                return

    def _ctl_delete(self, actor, rtype, obj, options=None):
        result, removed = self._delete_internal(rtype, obj, options or {}, actor=actor)
        md = obj["metadata"]
        self.record(self._controller_ctx(actor), "delete", rtype, md.get("namespace"), md["name"], 200,
                    result, changed=True)
        return result, removed

    # --- garbage collector ------------------------------------------------------------------

    def _all_uids(self):
        uids = set()
        for bucket in self.data.values():
            for obj in bucket.values():
                uids.add(obj["metadata"].get("uid"))
        return uids

    def _sync_gc(self):
        if not self._pending_gc:
            return
        gone = set(self._pending_gc)
        self._pending_gc.clear()
        alive = self._all_uids()
        for key in list(self.data):
            rtype = resources.by_key(key)
            for obj in list(self.data[key].values()):
                refs = obj["metadata"].get("ownerReferences") or []
                if not refs or not any(r.get("uid") in gone for r in refs):
                    continue
                if any(r.get("uid") in alive for r in refs):
                    continue
                if obj["metadata"].get("deletionTimestamp"):
                    continue
                self._ctl_delete("controller/garbage-collector", rtype, obj)

    def _orphan_dependents(self, uid, dry_run):
        if dry_run or not uid:
            return
        for key in list(self.data):
            rtype = resources.by_key(key)
            for obj in list(self.data[key].values()):
                refs = obj["metadata"].get("ownerReferences") or []
                if any(r.get("uid") == uid for r in refs):
                    new = copy.deepcopy(obj)
                    new["metadata"]["ownerReferences"] = [r for r in refs if r.get("uid") != uid]
                    if not new["metadata"]["ownerReferences"]:
                        del new["metadata"]["ownerReferences"]
                    self._write(rtype, new, "MODIFIED", old=obj)

    def _pods_gc_for_node(self, node_name):
        pods = _rt("", "pods")
        for pod in self._objects(pods):
            if (pod.get("spec") or {}).get("nodeName") == node_name:
                self._remove(pods, pod)
                md = pod["metadata"]
                self.record(self._controller_ctx("controller/pod-gc"), "delete", pods, md.get("namespace"),
                            md["name"], 200, pod, changed=True)

    # --- namespace --------------------------------------------------------------------------

    def _sync_namespaces(self):
        nstype = _rt("", "namespaces")
        for ns in self._objects(nstype):
            if not ns["metadata"].get("deletionTimestamp"):
                continue
            name = ns["metadata"]["name"]
            kinds = [rt for rt in resources.RESOURCES if rt.namespaced and rt.group != "events.k8s.io"]
            for rtype in kinds:
                for obj in self._objects(rtype, name):
                    if not obj["metadata"].get("deletionTimestamp"):
                        self._ctl_delete("controller/namespace", rtype, obj)
            if not any(self._objects(rt, name) for rt in kinds):
                self._remove(nstype, ns)
                self.record(self._controller_ctx("controller/namespace"), "delete", nstype, None, name, 200, ns,
                            changed=True)

    # --- daemonset --------------------------------------------------------------------------

    @staticmethod
    def _template_hash(ds):
        return short_hash(ds["spec"].get("template") or {})

    def _ds_pod_template(self, ds, node_name, tmpl_hash):
        tmpl = copy.deepcopy(ds["spec"].get("template") or {})
        tmd = tmpl.get("metadata") or {}
        labels = dict(tmd.get("labels") or {})
        labels["controller-revision-hash"] = tmpl_hash
        labels["pod-template-generation"] = str(ds["metadata"].get("generation", 1))
        spec = tmpl.get("spec") or {}
        tolerations = list(spec.get("tolerations") or [])
        extra = list(DAEMON_TOLERATIONS)
        if spec.get("hostNetwork"):
            extra.append(HOSTNET_TOLERATION)
        for tol in extra:
            if not any(t.get("key") == tol["key"] and t.get("effect") == tol["effect"] for t in tolerations):
                tolerations.append(dict(tol))
        spec["tolerations"] = tolerations
        affinity = spec.setdefault("affinity", {})
        node_aff = affinity.setdefault("nodeAffinity", {})
        node_aff["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}]}
        spec["nodeName"] = node_name
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"generateName": ds["metadata"]["name"] + "-", "namespace": ds["metadata"]["namespace"],
                            "labels": labels,
                            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet",
                                                 "name": ds["metadata"]["name"], "uid": ds["metadata"]["uid"],
                                                 "controller": True, "blockOwnerDeletion": True}]},
               "spec": spec}
        if tmd.get("annotations"):
            pod["metadata"]["annotations"] = dict(tmd["annotations"])
        return pod

    @staticmethod
    def _ds_node_fit(ds, node):
        """(shouldRun, shouldContinueRunning) as the DaemonSet controller decides them."""
        spec = (ds["spec"].get("template") or {}).get("spec") or {}
        labels = node["metadata"].get("labels") or {}
        for key, value in (spec.get("nodeSelector") or {}).items():
            if labels.get(key) != value:
                return False, False
        required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                    .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
        terms = required.get("nodeSelectorTerms")
        if terms and not any(_node_term_matches(t, node) for t in terms):
            return False, False
        tolerations = list(spec.get("tolerations") or []) + DAEMON_TOLERATIONS
        if spec.get("hostNetwork"):
            tolerations.append(HOSTNET_TOLERATION)
        taints = (node.get("spec") or {}).get("taints") or []
        untolerated = [t for t in taints if t.get("effect") in ("NoSchedule", "NoExecute")
                       and not tolerates(tolerations, t)]
        if not untolerated:
            return True, True
        keeps = not any(t.get("effect") == "NoExecute" for t in untolerated)
        return False, keeps

    def _sync_daemonsets(self):
        dstype = _rt("apps", "daemonsets")
        pods = _rt("", "pods")
        nodes = self._objects(_rt("", "nodes"))
        for ds in self._objects(dstype):
            if ds["metadata"].get("deletionTimestamp"):
                continue
            actor = "controller/daemonset"
            uid = ds["metadata"]["uid"]
            owned = [p for p in self._objects(pods, ds["metadata"]["namespace"])
                     if (controller_ref(p) or {}).get("uid") == uid]
            tmpl_hash = self._template_hash(ds)
            by_node = {}
            for pod in owned:
                by_node.setdefault((pod.get("spec") or {}).get("nodeName") or "", []).append(pod)
            desired = []
            for node in nodes:
                name = node["metadata"]["name"]
                should_run, keep = self._ds_node_fit(ds, node)
                node_pods = by_node.get(name, [])
                live = [p for p in node_pods if not p["metadata"].get("deletionTimestamp")]
                failed = [p for p in live if (p.get("status") or {}).get("phase") == "Failed"]
                for pod in failed:
                    self._ctl_delete(actor, pods, pod)
                live = [p for p in live if p not in failed]
                if should_run:
                    desired.append(name)
                if not should_run and not keep:
                    for pod in live:
                        self._ctl_delete(actor, pods, pod)
                    continue
                if len(live) > 1:
                    live.sort(key=lambda p: (p["metadata"].get("labels", {}).get("controller-revision-hash")
                                             != tmpl_hash, p["metadata"].get("creationTimestamp", "")))
                    for pod in live[1:]:
                        self._ctl_delete(actor, pods, pod)
                if should_run and not node_pods:
                    self._create_internal(pods, self._ds_pod_template(ds, name, tmpl_hash), None, actor=actor)
            for node_name, node_pods in by_node.items():
                if node_name and self._get(_rt("", "nodes"), None, node_name) is None:
                    for pod in node_pods:
                        if not pod["metadata"].get("deletionTimestamp"):
                            self._ctl_delete(actor, pods, pod)
            self._ds_rolling_update(ds, desired, tmpl_hash, actor)
            self._ds_status(ds, desired, tmpl_hash)

    def _ds_live_pods(self, ds):
        uid = ds["metadata"]["uid"]
        return [p for p in self._objects(_rt("", "pods"), ds["metadata"]["namespace"])
                if (controller_ref(p) or {}).get("uid") == uid and not p["metadata"].get("deletionTimestamp")]

    def _ds_rolling_update(self, ds, desired, tmpl_hash, actor):
        strategy = ds["spec"].get("updateStrategy") or {}
        if strategy.get("type", "RollingUpdate") != "RollingUpdate":
            return
        pods = _rt("", "pods")
        try:
            max_unavailable = scaled_value((strategy.get("rollingUpdate") or {}).get("maxUnavailable", 1),
                                           len(desired), True)
        except ValueError:
            max_unavailable = 1
        max_unavailable = max(max_unavailable, 1)
        live = [p for p in self._ds_live_pods(ds) if p["spec"].get("nodeName") in desired]
        old = [p for p in live if p["metadata"].get("labels", {}).get("controller-revision-hash") != tmpl_hash]
        if not old:
            return
        ready_nodes = set(p["spec"]["nodeName"] for p in live if pod_ready(p))
        unavailable = len([n for n in desired if n not in ready_nodes])
        for pod in sorted(old, key=lambda p: p["metadata"]["name"]):
            if not pod_ready(pod):
                self._ctl_delete(actor, pods, pod)
        budget = max_unavailable - unavailable
        for pod in sorted(old, key=lambda p: p["metadata"]["name"]):
            if budget <= 0:
                break
            if pod_ready(pod):
                self._ctl_delete(actor, pods, pod)
                budget -= 1

    def _ds_status(self, ds, desired, tmpl_hash):
        live = self._ds_live_pods(ds)
        on_desired = [p for p in live if p["spec"].get("nodeName") in desired]
        scheduled_nodes = set(p["spec"].get("nodeName") for p in on_desired)
        ready = [p for p in on_desired if pod_ready(p)]
        updated = [p for p in on_desired
                   if p["metadata"].get("labels", {}).get("controller-revision-hash") == tmpl_hash]
        status = {
            "currentNumberScheduled": len(scheduled_nodes),
            "numberMisscheduled": len(set(p["spec"].get("nodeName") for p in live) - set(desired)),
            "desiredNumberScheduled": len(desired),
            "numberReady": len(ready),
            "observedGeneration": ds["metadata"].get("generation", 1),
            "updatedNumberScheduled": len(updated),
            "numberAvailable": len(ready),
        }
        if len(desired) - len(ready) > 0:
            status["numberUnavailable"] = len(desired) - len(ready)
        if ds.get("status") != status:
            new = copy.deepcopy(ds)
            new["status"] = status
            self._write(_rt("apps", "daemonsets"), new, "MODIFIED", old=ds)

    # --- disruption -------------------------------------------------------------------------

    @staticmethod
    def _pdb_selector(pdb):
        return from_label_selector_object((pdb.get("spec") or {}).get("selector"))

    def _expected_scale(self, pods):
        """Sum of the scale of the pods' controllers; raises ValueError like the real finder."""
        scales = {}
        unmanaged = []
        for pod in pods:
            ref = controller_ref(pod)
            if ref is None:
                unmanaged.append(pod["metadata"]["name"])
                continue
            if ref.get("uid") in scales:
                continue
            scale = self._controller_scale(ref, pod["metadata"].get("namespace"))
            if scale is None:
                raise ValueError('found no controllers for pod "%s"' % pod["metadata"]["name"])
            scales[scale[0]] = scale[1]
        return sum(scales.values()), unmanaged

    def _controller_scale(self, ref, namespace):
        kind, name, uid = ref.get("kind"), ref.get("name"), ref.get("uid")
        api = ref.get("apiVersion", "")
        if kind == "ReplicaSet" and api.startswith("apps/"):
            rs = self._get(_rt("apps", "replicasets"), namespace, name)
            if rs is None or rs["metadata"].get("uid") != uid:
                return None
            dref = controller_ref(rs)
            if dref and dref.get("kind") == "Deployment":
                dep = self._get(_rt("apps", "deployments"), namespace, dref.get("name"))
                if dep is not None and dep["metadata"].get("uid") == dref.get("uid"):
                    return dep["metadata"]["uid"], int(dep["spec"].get("replicas", 1))
            return uid, int(rs["spec"].get("replicas", 1))
        if kind == "StatefulSet" and api.startswith("apps/"):
            sts = self._get(_rt("apps", "statefulsets"), namespace, name)
            if sts is None or sts["metadata"].get("uid") != uid:
                return None
            return uid, int(sts["spec"].get("replicas", 1))
        if kind == "Deployment" and api.startswith("apps/"):
            dep = self._get(_rt("apps", "deployments"), namespace, name)
            if dep is None or dep["metadata"].get("uid") != uid:
                return None
            return uid, int(dep["spec"].get("replicas", 1))
        return None

    @staticmethod
    def _set_pdb_condition(pdb, ok, reason, message):
        status = pdb.setdefault("status", {})
        conds = status.setdefault("conditions", [])
        want = {"type": "DisruptionAllowed", "status": "True" if ok else "False", "reason": reason,
                "message": message, "observedGeneration": status.get("observedGeneration", 0)}
        for cond in conds:
            if cond.get("type") == "DisruptionAllowed":
                if cond.get("status") != want["status"]:
                    cond["lastTransitionTime"] = iso()
                cond.update(want)
                return
        want["lastTransitionTime"] = iso()
        conds.append(want)

    def _sync_pdbs(self):
        pdbtype = _rt("policy", "poddisruptionbudgets")
        podtype = _rt("", "pods")
        now = time.time()
        for pdb in self._objects(pdbtype):
            new = copy.deepcopy(pdb)
            status = new.setdefault("status", {})
            spec = new.get("spec") or {}
            ns = new["metadata"]["namespace"]
            try:
                sel = self._pdb_selector(new)
                pods = [] if sel.empty or sel.nothing else [
                    p for p in self._objects(podtype, ns) if sel.matches(p["metadata"].get("labels"))]
                if spec.get("maxUnavailable") is not None:
                    expected = self._expected_scale(pods)[0]
                    desired = max(expected - scaled_value(spec["maxUnavailable"], expected, True), 0)
                elif spec.get("minAvailable") is not None:
                    if isinstance(spec["minAvailable"], int):
                        desired = spec["minAvailable"]
                        expected = len(pods)
                    else:
                        expected = self._expected_scale(pods)[0]
                        desired = scaled_value(spec["minAvailable"], expected, True)
                else:
                    expected, desired = len(pods), 0
            except ValueError as exc:
                status["disruptionsAllowed"] = 0
                self._set_pdb_condition(new, False, "SyncFailed", str(exc))
            else:
                by_name = dict((p["metadata"]["name"], p) for p in pods)
                disrupted = {}
                for pod_name, when in (status.get("disruptedPods") or {}).items():
                    pod = by_name.get(pod_name)
                    ts = parse_time(when) or 0
                    if pod is None or pod["metadata"].get("deletionTimestamp") or ts + DISRUPTED_POD_TIMEOUT < now:
                        continue
                    disrupted[pod_name] = when
                healthy = len([p for p in pods if not p["metadata"].get("deletionTimestamp")
                               and p["metadata"]["name"] not in disrupted and pod_ready(p)])
                allowed = healthy - desired
                if expected <= 0 or allowed <= 0:
                    allowed = 0
                status["observedGeneration"] = new["metadata"].get("generation", 1)
                status["disruptionsAllowed"] = allowed
                status["currentHealthy"] = healthy
                status["desiredHealthy"] = desired
                status["expectedPods"] = expected
                if disrupted:
                    status["disruptedPods"] = disrupted
                else:
                    status.pop("disruptedPods", None)
                if allowed > 0:
                    self._set_pdb_condition(new, True, "SufficientPods", "")
                else:
                    self._set_pdb_condition(new, False, "InsufficientPods", "")
            if new != pdb:
                self._write(pdbtype, new, "MODIFIED", old=pdb)

    # --- node lifecycle (periodic) ----------------------------------------------------------

    def tick(self, now=None):
        """Mark nodes whose kubelet stopped renewing its lease as Unknown (node-monitor-grace-period)."""
        now = time.time() if now is None else now
        with self.lock:
            if self.closed:
                return
            leases = _rt("coordination.k8s.io", "leases")
            nodes = _rt("", "nodes")
            for node in self._objects(nodes):
                name = node["metadata"]["name"]
                lease = self._get(leases, NODE_LEASE_NAMESPACE, name)
                if lease is None:
                    continue
                spec = lease.get("spec") or {}
                renew = parse_time(spec.get("renewTime")) or parse_time(lease["metadata"].get("creationTimestamp"))
                if renew is None or now - renew <= self.node_monitor_grace:
                    continue
                if self._node_ready(node) == "Unknown":
                    continue
                self._mark_node_unknown(node, now)
            self._expire_events(now)
            self._reconcile()
            self._persist()

    def _expire_events(self, now):
        """Events live ``event_ttl`` seconds after their last write (kube-apiserver --event-ttl)."""
        events = _rt("", "events")
        for event in self._objects(events):
            md = event["metadata"]
            written = max(parse_time(event.get("lastTimestamp")) or 0, parse_time(event.get("eventTime")) or 0,
                          parse_time(md.get("creationTimestamp")) or 0)
            if written and now - written > self.event_ttl:
                self._remove(events, event)

    def _mark_node_unknown(self, node, now):
        nodes = _rt("", "nodes")
        new = copy.deepcopy(node)
        stamp = iso(now)
        conds = new.setdefault("status", {}).setdefault("conditions", [])
        if not any(c.get("type") == "Ready" for c in conds):
            conds.append({"type": "Ready"})
        for cond in conds:
            if cond.get("status") != "Unknown":
                cond["lastTransitionTime"] = stamp
            cond["status"] = "Unknown"
            cond["reason"] = "NodeStatusUnknown"
            cond["message"] = "Kubelet stopped posting node status."
        self._sync_node_taints(new)
        self._write(nodes, new, "MODIFIED", old=node)
        name = node["metadata"]["name"]
        self.record(self._controller_ctx("controller/node-lifecycle"), "update", nodes, None, name, 200, new,
                    subresource="status", changed=True)
        pods = _rt("", "pods")
        for pod in self._objects(pods):
            if (pod.get("spec") or {}).get("nodeName") != name or not pod_ready(pod):
                continue
            pnew = copy.deepcopy(pod)
            for cond in pnew["status"].get("conditions") or []:
                if cond.get("type") == "Ready":
                    cond["status"] = "False"
                    cond["lastTransitionTime"] = stamp
            self._write(pods, pnew, "MODIFIED", old=pod)
            self.record(self._controller_ctx("controller/node-lifecycle"), "update", pods,
                        pod["metadata"].get("namespace"), pod["metadata"]["name"], 200, pnew,
                        subresource="status", changed=True)
