"""The resource types the double serves and the discovery documents that describe them."""

ALL_VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]


class ResourceType(object):
    def __init__(self, group, version, plural, singular, kind, namespaced, short_names=(),
                 categories=(), subresources=None, status=True, generation=False,
                 verbs=None, field_selectors=(), crd=None):
        self.group = group
        self.version = version
        self.plural = plural
        self.singular = singular
        self.kind = kind
        self.namespaced = namespaced
        self.short_names = list(short_names)
        self.categories = list(categories)
        self.subresources = dict(subresources or {})
        if status and "status" not in self.subresources:
            self.subresources["status"] = {"kind": kind, "verbs": ["get", "patch", "update"]}
        self.has_status = status
        self.generation = generation
        self.verbs = list(verbs or ALL_VERBS)
        self.field_selectors = ("metadata.name", "metadata.namespace") + tuple(field_selectors)
        # A custom resource: served (paths, discovery, seeding) only while the CustomResourceDefinition
        # of this name is stored, as kube-apiserver serves a CRD's resource only once it exists.
        self.crd = crd

    @property
    def api_version(self):
        return self.version if not self.group else "%s/%s" % (self.group, self.version)

    @property
    def key(self):
        """Storage key: events.k8s.io events share core events' storage, like the real apiserver."""
        if self.group == "events.k8s.io" and self.plural == "events":
            return "events"
        return self.plural if not self.group else "%s.%s" % (self.plural, self.group)

    def __repr__(self):
        return "<ResourceType %s %s>" % (self.api_version, self.plural)


POD_FIELDS = ("spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
              "spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName")
EVENT_FIELDS = ("involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
                "involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion",
                "involvedObject.fieldPath", "reason", "reportingComponent", "source", "type")

RESOURCES = [
    ResourceType("", "v1", "namespaces", "namespace", "Namespace", False, ["ns"],
                 verbs=["create", "delete", "get", "list", "patch", "update", "watch"],
                 field_selectors=("status.phase",)),
    ResourceType("", "v1", "nodes", "node", "Node", False, ["no"],
                 field_selectors=("spec.unschedulable",)),
    ResourceType("", "v1", "pods", "pod", "Pod", True, ["po"], ["all"],
                 subresources={"eviction": {"kind": "Eviction", "group": "policy", "version": "v1",
                                            "verbs": ["create"]}},
                 field_selectors=POD_FIELDS),
    ResourceType("", "v1", "events", "event", "Event", True, ["ev"], status=False,
                 field_selectors=EVENT_FIELDS),
    ResourceType("apps", "v1", "daemonsets", "daemonset", "DaemonSet", True, ["ds"], ["all"],
                 generation=True),
    ResourceType("apps", "v1", "deployments", "deployment", "Deployment", True, ["deploy"], ["all"],
                 generation=True),
    ResourceType("apps", "v1", "replicasets", "replicaset", "ReplicaSet", True, ["rs"], ["all"],
                 generation=True),
    ResourceType("apps", "v1", "statefulsets", "statefulset", "StatefulSet", True, ["sts"], ["all"],
                 generation=True),
    ResourceType("policy", "v1", "poddisruptionbudgets", "poddisruptionbudget", "PodDisruptionBudget",
                 True, ["pdb"], generation=True),
    ResourceType("events.k8s.io", "v1", "events", "event", "Event", True, ["ev"], status=False,
                 field_selectors=EVENT_FIELDS),
    ResourceType("coordination.k8s.io", "v1", "leases", "lease", "Lease", True, status=False),
    ResourceType("apiextensions.k8s.io", "v1", "customresourcedefinitions", "customresourcedefinition",
                 "CustomResourceDefinition", False, ["crd", "crds"], ["api-extensions"], generation=True),
    # NVIDIA GPU Operator (deployments/gpu-operator/crds/nvidia.com_clusterpolicies.yaml): cluster-scoped,
    # status subresource, short name none; served only once its CRD is created.
    ResourceType("nvidia.com", "v1", "clusterpolicies", "clusterpolicy", "ClusterPolicy", False,
                 generation=True, crd="clusterpolicies.nvidia.com"),
]

GROUP_ORDER = ["apps", "events.k8s.io", "policy", "coordination.k8s.io", "apiextensions.k8s.io", "nvidia.com"]


def served(rtype, crds=()):
    """True when the double serves ``rtype`` now: built-in types always, custom ones while their CRD
    (a name in ``crds``) exists."""
    return rtype is not None and (rtype.crd is None or rtype.crd in crds)


def crd_resource(crd):
    """The custom resource type a CustomResourceDefinition object describes, if the double knows it."""
    spec = (crd or {}).get("spec") or {}
    names = spec.get("names") or {}
    for rtype in RESOURCES:
        if rtype.crd and rtype.group == spec.get("group") and rtype.plural == names.get("plural"):
            return rtype
    return None


def find(group, version, plural):
    for rtype in RESOURCES:
        if rtype.group == group and rtype.version == version and rtype.plural == plural:
            return rtype
    return None


def by_kind(api_version, kind):
    for rtype in RESOURCES:
        if rtype.api_version == api_version and rtype.kind == kind:
            return rtype
    return None


def by_key(key):
    for rtype in RESOURCES:
        if rtype.key == key and not (rtype.group == "events.k8s.io"):
            return rtype
    return None


def group_versions(crds=()):
    """[(group, version)] for /apis, in a stable order (custom groups only while their CRD exists)."""
    out = []
    for group in GROUP_ORDER:
        versions = sorted(set(r.version for r in RESOURCES if r.group == group and served(r, crds)))
        for version in versions:
            out.append((group, version))
    return out


def api_versions_doc(server_address):
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]}


def api_group_list_doc(crds=()):
    groups = []
    seen = []
    for group, version in group_versions(crds):
        if group in seen:
            continue
        seen.append(group)
        versions = [{"groupVersion": "%s/%s" % (group, v), "version": v}
                    for g, v in group_versions(crds) if g == group]
        groups.append({"name": group, "versions": versions, "preferredVersion": versions[0]})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group_doc(group, crds=()):
    versions = [{"groupVersion": "%s/%s" % (group, v), "version": v} for g, v in group_versions(crds) if g == group]
    if not versions:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": versions,
            "preferredVersion": versions[0]}


def resource_list_doc(group, version, crds=()):
    members = [r for r in RESOURCES if r.group == group and r.version == version and served(r, crds)]
    if not members:
        return None
    resources = []
    for r in members:
        entry = {"name": r.plural, "singularName": r.singular, "namespaced": r.namespaced, "kind": r.kind,
                 "verbs": r.verbs}
        if r.short_names:
            entry["shortNames"] = r.short_names
        if r.categories:
            entry["categories"] = r.categories
        resources.append(entry)
        for sub in sorted(r.subresources):
            spec = r.subresources[sub]
            sentry = {"name": "%s/%s" % (r.plural, sub), "singularName": "", "namespaced": r.namespaced,
                      "kind": spec["kind"], "verbs": spec["verbs"]}
            if "group" in spec:
                sentry["group"] = spec["group"]
                sentry["version"] = spec["version"]
            resources.append(sentry)
    return {"kind": "APIResourceList", "apiVersion": "v1",
            "groupVersion": version if not group else "%s/%s" % (group, version), "resources": resources}


def _gv_path(group, version):
    return "api/%s" % version if not group else "apis/%s/%s" % (group, version)


def openapi_v3_root(crds=()):
    """/openapi/v3: where each group-version's document lives (what kubectl's openapi3 client reads)."""
    paths = {}
    for group, version in [("", "v1")] + group_versions(crds):
        path = _gv_path(group, version)
        paths[path] = {"serverRelativeURL": "/openapi/v3/%s?hash=%s" % (path, "kubegpu-apidouble-1")}
    return {"paths": paths}


def openapi_v3_doc(path, crds=()):
    """A deliberately small OpenAPI v3 document: the operations with their GVK and query parameters.

    Enough for kubectl's query-parameter verifier (it sends ``fieldValidation`` to servers that
    declare it). No schemas: kubectl explain has nothing to show, and apply falls back to its
    compiled-in types for the patch computation.
    """
    for group, version in [("", "v1")] + group_versions(crds):
        if _gv_path(group, version) == path.strip("/"):
            break
    else:
        return None
    params = [{"name": n, "in": "query", "schema": {"type": "string"}, "uniqueItems": True}
              for n in ("dryRun", "fieldManager", "fieldValidation", "pretty")]
    paths = {}
    for r in RESOURCES:
        if r.group != group or r.version != version or not served(r, crds):
            continue
        gvk = {"group": group, "version": version, "kind": r.kind}
        base = "/" + path.strip("/")
        coll = base + ("/namespaces/{namespace}/" if r.namespaced else "/") + r.plural
        item = coll + "/{name}"

        def op(action):
            return {"operationId": "%s%s" % (action, r.kind), "parameters": list(params),
                    "x-kubernetes-action": action, "x-kubernetes-group-version-kind": dict(gvk),
                    "responses": {"200": {"description": "OK"}}}
        paths[coll] = {"get": op("list"), "post": op("post")}
        paths[item] = {"get": op("get"), "put": op("put"), "patch": op("patch"), "delete": op("delete")}
        if r.has_status:
            paths[item + "/status"] = {"get": op("get"), "put": op("put"), "patch": op("patch")}
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes (kubegpu lab API double)", "version": "v1.32"},
            "paths": paths, "components": {"schemas": {}}}
