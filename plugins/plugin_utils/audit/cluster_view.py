# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Per-node view of the cluster from Kubernetes API objects (controller side, pure).

Input is what ``kubernetes.core.k8s_info`` returns (``resources`` lists of plain dicts).
"""
from __future__ import annotations

import datetime
import re

from ansible_collections.kubegpu.fleet.plugins.module_utils.catalog import validate as catalog_validate
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.fields import as_dict as _d, as_list as _l, text as _s

PASS_DEVICE_SPECS = "PASS_DEVICE_SPECS"

# NVIDIA device plugin options (docs/customizing.md of NVIDIA/k8s-device-plugin): a command-line
# flag wins over its environment variable, which wins over the config file; the defaults apply
# when none is given. DEVICE_LIST_STRATEGY takes a comma-separated list since v0.15.
DEVICE_PLUGIN_OPTIONS = {
    "mig_strategy": ("--mig-strategy", "MIG_STRATEGY", "none"),
    "device_list_strategy": ("--device-list-strategy", "DEVICE_LIST_STRATEGY", "envvar"),
}
MIG_MANAGER_IMAGE = "k8s-mig-manager"
GPU_OPERATOR_IMAGE = "gpu-operator"   # the last path component of the operator image, exactly
DCGM_EXPORTER_IMAGE = "dcgm-exporter"  # nvcr.io/nvidia/k8s/dcgm-exporter:<DCGM>-<exporter>-<base>
DCGM_IMAGE = "dcgm"                    # nvcr.io/nvidia/cloud-native/dcgm:<DCGM>-<n>-<base> (standalone hostengine)
# dcgm-exporter tags: "<DCGM version>-<exporter version>[-<base image>]" (4.2.3-4.1.3-ubuntu22.04)
_EXPORTER_TAG = re.compile(r"^v?(\d+\.\d+\.\d+)-(\d+\.\d+\.\d+)(?:-[0-9A-Za-z.]+)*$")
CLUSTER_POLICY_KIND = "ClusterPolicy"


def parse_time(value):
    """RFC 3339 time from the API (``2026-11-22T05:00:00Z``) -> aware datetime, else None."""
    if not isinstance(value, str) or not value:
        return None
    text = value.strip().replace("Z", "+00:00")
    if "." in text:  # microTime: 2026-11-22T05:00:00.123456Z
        head, dot, tail = text.partition(".")
        frac = "".join(ch for ch in tail if ch.isdigit())
        zone = tail[len(frac):]
        text = head + dot + (frac + "000000")[:6] + zone
    try:
        dt = datetime.datetime.fromisoformat(text)
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=datetime.timezone.utc)
    return dt


def _meta(obj, key, default=None):
    return _d(_d(obj).get("metadata")).get(key, default)


def json_kind(value):
    """JSON name of a value's type ("a list", "a string"...), whatever class carries it."""
    for types, name in ((bool, "a boolean"), (dict, "an object"), (list, "a list"), (str, "a string"),
                        ((int, float), "a number")):
        if isinstance(value, types):
            return name
    return "null" if value is None else "a %s" % type(value).__name__


def shape_problems(obj, kind):
    """What is malformed in an API object, as short texts (empty when it is well-formed enough).

    Kubernetes never sends these; a proxy, a broken aggregated API or a hand-written
    ``nodes``/``pods`` option can. Each problem names the field and what it holds instead.
    """
    problems = []
    if not isinstance(obj, dict):
        return ["%s is %s, not an object" % (kind, json_kind(obj))]

    def want(parent, path, types, label):
        value = parent.get(path[-1]) if isinstance(parent, dict) else None
        if value is not None and not isinstance(value, types):
            problems.append("%s is %s, expected %s" % (".".join(path), json_kind(value), label))
            return {}
        return value

    meta = want(obj, ["metadata"], dict, "an object")
    if meta is None:
        problems.append("metadata is missing or null")
    elif meta:
        for key in ("name", "namespace", "uid"):
            want(meta, ["metadata", key], str, "a string")
        want(meta, ["metadata", "labels"], dict, "an object")
        want(meta, ["metadata", "ownerReferences"], list, "a list")
    spec = want(obj, ["spec"], dict, "an object") or {}
    status = want(obj, ["status"], dict, "an object") or {}
    if kind == "node":
        want(status, ["status", "conditions"], list, "a list")
        want(status, ["status", "allocatable"], dict, "an object")
        want(status, ["status", "nodeInfo"], dict, "an object")
        for i, c in enumerate(_l(status.get("conditions"))):
            if not isinstance(c, dict):
                problems.append("status.conditions[%d] is %s, expected an object" % (i, json_kind(c)))
    elif kind == "deployment":
        template = want(spec, ["spec", "template"], dict, "an object") or {}
        tspec = want(template, ["spec", "template", "spec"], dict, "an object") or {}
        want(tspec, ["spec", "template", "spec", "containers"], list, "a list")
    elif kind == "clusterpolicy":
        for section in ("cdi", "mig", "devicePlugin", "migManager", "driver", "toolkit"):
            sub = want(spec, ["spec", section], dict, "an object") or {}
            if section in ("cdi", "driver"):
                want(sub, ["spec", section, "enabled"], (bool, str), "a boolean")
            if section == "mig":
                want(sub, ["spec", section, "strategy"], str, "a string")
            if section in ("devicePlugin", "migManager", "toolkit", "driver"):
                want(sub, ["spec", section, "version"], str, "a string")
    elif kind == "pod":
        want(spec, ["spec", "nodeName"], str, "a string")
        want(spec, ["spec", "containers"], list, "a list")
        want(status, ["status", "phase"], str, "a string")
        want(status, ["status", "conditions"], list, "a list")
    return problems


def node_conditions(node):
    out = {}
    for c in _l(_d(_d(node).get("status")).get("conditions")):
        if isinstance(c, dict) and _s(c.get("type")):
            out[c["type"]] = {"status": c.get("status"), "reason": c.get("reason"),
                              "lastTransitionTime": c.get("lastTransitionTime")}
    return out


def node_ready(node):
    cond = node_conditions(node).get("Ready")
    return None if cond is None else cond.get("status") == "True"


def _containers(spec):
    return [c for c in _l(_d(spec).get("containers")) if isinstance(c, dict)]


def is_device_plugin_pod(pod, image_pattern):
    for c in _containers(_d(pod).get("spec")):
        if image_pattern in str(c.get("image") or ""):
            return True
    return False


def _container_env(container, name):
    for e in _l(container.get("env")):
        if isinstance(e, dict) and e.get("name") == name:
            return e.get("value")
    return None


def _plugin_container(spec, image_pattern):
    for c in _containers(spec):
        if image_pattern in str(c.get("image") or ""):
            return c
    return None


def _args_pass_specs(container):
    for arg in _l(container.get("args")) + _l(container.get("command")):
        if str(arg) in ("--pass-device-specs", "--pass-device-specs=true"):
            return "true"
    return None


def device_plugin_summary(pod_or_template_spec, image_pattern, owner=None):
    c = _plugin_container(pod_or_template_spec, image_pattern)
    if c is None:
        return None
    value = _container_env(c, PASS_DEVICE_SPECS)
    if value is None:
        value = _args_pass_specs(c)
    return {"image": c.get("image"), "pass_device_specs": value, "daemonset": owner}


def pod_owner(pod, kind="DaemonSet"):
    for ref in _l(_meta(pod, "ownerReferences", [])):
        if isinstance(ref, dict) and ref.get("kind") == kind:
            return ref.get("name")
    return None


def pending_since(pod):
    """When the pod became Pending on its node: PodScheduled transition, else creation."""
    for c in _l(_d(_d(pod).get("status")).get("conditions")):
        if isinstance(c, dict) and c.get("type") == "PodScheduled" and c.get("status") == "True":
            t = parse_time(c.get("lastTransitionTime"))
            if t:
                return t
    return parse_time(_meta(pod, "creationTimestamp"))


def event_component(ev):
    ev = _d(ev)
    src = _d(ev.get("source"))
    for value in (ev.get("reportingComponent"), ev.get("reportingController"), src.get("component")):
        if _s(value):
            return value
    return None


def kubelet_event_uids(events):
    """UIDs of pods that have at least one event reported by a kubelet."""
    out = set()
    for ev in _l(events):
        comp = event_component(ev) or ""
        if comp == "kubelet" or comp.endswith("/kubelet"):
            obj = _d(ev.get("involvedObject")) or _d(ev.get("regarding"))
            if obj.get("kind") == "Pod" and _s(obj.get("uid")):
                out.add(obj["uid"])
    return out


def _seconds_between(since, now):
    if since is None:
        return None
    try:
        return int((now - since).total_seconds())
    except (OverflowError, ValueError):  # a year-1 timestamp with an offset
        return None


def _label(obj, kind, index):
    name, ns = _s(_meta(obj, "name")), _s(_meta(obj, "namespace"))
    if name:
        return "%s %s" % (kind, "%s/%s" % (ns, name) if ns else name)
    return "%s #%d" % (kind, index)


def _problem_line(obj, kind, index, problems):
    """``<kind> <namespace>/<name>: <problem>; <problem>`` for a ``malformed`` list."""
    return "%s: %s" % (_label(obj, kind, index), "; ".join(problems))


def _note_malformed(obj, kind, index, malformed):
    """Add the shape problems of ``obj`` (item ``index`` of its list) to ``malformed``."""
    problems = shape_problems(obj, kind)
    if problems:
        malformed.append(_problem_line(obj, kind, index, problems))


def _template_spec(obj):
    """``spec.template.spec`` of a Deployment or DaemonSet (the pod spec it runs)."""
    return _d(_d(_d(obj).get("spec")).get("template")).get("spec")


# ---------------------------------------------------------------------------------------------
# NVIDIA stack components seen from the API: device plugin, MIG manager, GPU Operator


def split_image(image):
    """``registry/path/name:tag@sha256:...`` -> ``(repository, tag)``; tag None without one.

    A tag is what follows the last ``:`` after the last ``/`` (a registry port is not a tag);
    a digest (``@sha256:...``) is dropped: a digest-only reference has no version to read.
    """
    if not isinstance(image, str) or not image.strip():
        return None, None
    ref = image.strip().split("@", 1)[0]
    slash = ref.rfind("/")
    colon = ref.rfind(":")
    if colon > slash:
        return ref[:colon], ref[colon + 1:] or None
    return ref, None


def image_name(image):
    """Last path component of an image's repository (``k8s-device-plugin``), or None."""
    repo, _tag = split_image(image)
    return repo.rsplit("/", 1)[-1] if repo else None


def image_version(image, scheme):
    """The image tag as the catalog's version text (``v0.17.2-ubi9`` -> ``0.17.2``), or None
    when the image has no tag, only a digest, or a tag that is no version (``latest``)."""
    _repo, tag = split_image(image)
    if tag is None:
        return None
    try:
        text = catalog_validate.normalize_version_text(scheme, tag)
        catalog_validate.parse_version(scheme, text)
    except catalog_validate.CatalogError:
        return None
    return text


def _container_with_image(spec, name):
    for c in _containers(spec):
        if image_name(c.get("image")) == name:
            return c
    return None


def _flag_value(container, flag):
    """Value of ``--flag=v`` / ``--flag v`` in the container's command and args (last one wins)."""
    words = [str(w) for w in _l(container.get("command")) + _l(container.get("args"))]
    value = None
    for i, word in enumerate(words):
        if word.startswith(flag + "="):
            value = word[len(flag) + 1:]
        elif word == flag and i + 1 < len(words):
            value = words[i + 1]
    return value


def _uses_config_file(container):
    return _flag_value(container, "--config-file") is not None or _s(_container_env(container, "CONFIG_FILE")) is not None


def device_plugin_option(container, key):
    """A device plugin option as the plugin resolves it: flag, else env, else None when a config
    file may set it (unknown), else the documented default. ``device_list_strategy`` is a list."""
    flag, env, default = DEVICE_PLUGIN_OPTIONS[key]
    value = _flag_value(container, flag)
    if value is None:
        value = _container_env(container, env)
        value = value if isinstance(value, str) else None
    if value is None:
        value = None if _uses_config_file(container) else default
    if value is None:
        return None
    if key == "device_list_strategy":
        items = [v.strip() for v in value.split(",") if v.strip()]
        return items or None
    return value.strip() or None


def device_plugin_component(container):
    image = container.get("image") if isinstance(container.get("image"), str) else None
    return {"version": image_version(image, "device-plugin"), "image": image,
            "mig_strategy": device_plugin_option(container, "mig_strategy"),
            "device_list_strategy": device_plugin_option(container, "device_list_strategy")}


def mig_manager_component(container):
    image = container.get("image") if isinstance(container.get("image"), str) else None
    return {"version": image_version(image, "semver"), "image": image}


def dcgm_exporter_versions(image):
    """``(DCGM version, exporter version)`` of a dcgm-exporter image tag
    (``4.2.3-4.1.3-ubuntu22.04`` -> ``("4.2.3", "4.1.3")``); ``(None, None)`` for a tag in
    another shape, a digest only or no tag. The image bundles the DCGM libraries it names."""
    _repo, tag = split_image(image)
    m = _EXPORTER_TAG.match(tag) if tag else None
    return (m.group(1), m.group(2)) if m else (None, None)


def dcgm_exporter_component(container):
    image = container.get("image") if isinstance(container.get("image"), str) else None
    return {"version": dcgm_exporter_versions(image)[1], "image": image}


def dcgm_component(container, source):
    """DCGM seen from the API: the standalone hostengine image (``source`` "dcgm") or the DCGM
    libraries a dcgm-exporter image bundles (``source`` "dcgm-exporter")."""
    image = container.get("image") if isinstance(container.get("image"), str) else None
    version = image_version(image, "semver") if source == DCGM_IMAGE else dcgm_exporter_versions(image)[0]
    return {"version": version, "image": image, "source": source}


def _boolish(value):
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    return None


def cluster_policy_summary(cp):
    """What the audit needs from a ClusterPolicy (nvidia.com/v1): None for what it does not say."""
    spec = _d(_d(cp).get("spec"))
    return {
        "name": _s(_meta(cp, "name")),
        "state": _s(_d(_d(cp).get("status")).get("state")),
        "cdi_enabled": _boolish(_d(spec.get("cdi")).get("enabled")),
        "cdi_default": _boolish(_d(spec.get("cdi")).get("default")),
        "mig_strategy": _s(_d(spec.get("mig")).get("strategy")),
        "driver_enabled": _boolish(_d(spec.get("driver")).get("enabled")),
        "device_plugin_version": _s(_d(spec.get("devicePlugin")).get("version")),
        "mig_manager_version": _s(_d(spec.get("migManager")).get("version")),
        "toolkit_version": _s(_d(spec.get("toolkit")).get("version")),
    }


def gpu_operator_state(deployments, cluster_policies, crd_present, malformed):
    """The GPU Operator of the cluster: its Deployment(s) and the ClusterPolicy in effect.

    The operator reconciles one ClusterPolicy and marks any other ``ignored``; the one in effect is
    the first (by name) whose ``status.state`` is not ``ignored``.
    """
    operators = []
    for i, dep in enumerate(_l(deployments)):
        _note_malformed(dep, "deployment", i, malformed)
        spec = _template_spec(dep)
        c = _container_with_image(spec, GPU_OPERATOR_IMAGE)
        if c is None:
            continue
        operators.append({"namespace": _s(_meta(dep, "namespace")), "name": _s(_meta(dep, "name")),
                          "image": c.get("image"), "version": image_version(c.get("image"), "semver")})
    operators.sort(key=lambda o: (o["namespace"] or "", o["name"] or ""))
    policies = []
    for i, cp in enumerate(_l(cluster_policies)):
        _note_malformed(cp, "clusterpolicy", i, malformed)
        if isinstance(cp, dict):
            policies.append(cluster_policy_summary(cp))
    policies.sort(key=lambda p: p["name"] or "")
    active = [p for p in policies if p["state"] != "ignored"] or policies
    return {"deployments": operators, "cluster_policies": policies,
            "cluster_policy": active[0] if active else None, "cluster_policy_crd": crd_present,
            "namespaces": sorted(set(o["namespace"] for o in operators if o["namespace"]))}


def _owned_by_cluster_policy(obj):
    return any(isinstance(ref, dict) and ref.get("kind") == CLUSTER_POLICY_KIND
               for ref in _l(_meta(obj, "ownerReferences", [])))


def gpu_operator_component(operator):
    """The node's ``gpu-operator`` facts from the cluster's operator state."""
    policy = operator["cluster_policy"] or {}
    versions = sorted(set(o["version"] for o in operator["deployments"] if o["version"]))
    images = sorted(set(o["image"] for o in operator["deployments"] if o["image"]))
    return {"version": versions[0] if len(versions) == 1 else None,
            "image": images[0] if len(images) == 1 else None,
            "cdi_enabled": policy.get("cdi_enabled"),
            "mig_strategy": policy.get("mig_strategy"),
            "driver_enabled": policy.get("driver_enabled"),
            # catalog condition driver_preinstalled: the operator does not install the driver
            "driver_preinstalled": (not policy["driver_enabled"]) if isinstance(policy.get("driver_enabled"), bool)
            else None,
            "cluster_policy": policy.get("name")}


def components_summary(view):
    """Cluster-level summary: per component, how many nodes run it and which versions."""
    out = {}
    for name, entry in sorted(view.items()):
        for comp, facts in sorted((entry.get("components") or {}).items()):
            slot = out.setdefault(comp, {"nodes": 0, "versions": {}})
            slot["nodes"] += 1
            key = facts.get("version") or "unknown"
            ver = slot["versions"].setdefault(key, {"version": facts.get("version"), "nodes": 0,
                                                    "node_names": [], "images": []})
            ver["nodes"] += 1
            ver["node_names"].append(name)
            if facts.get("image") and facts["image"] not in ver["images"]:
                ver["images"].append(facts["image"])
    for slot in out.values():
        slot["versions"] = sorted(slot["versions"].values(), key=lambda v: (-v["nodes"], v["version"] or ""))
    return out


def _prefer(current, candidate_pod):
    """True when the pod should replace the component already recorded for its node: a running pod
    that is not being deleted wins over one that is pending, terminating or finished."""
    if current is None:
        return True
    live = _s(_d(_d(candidate_pod).get("status")).get("phase")) == "Running" and not _meta(
        candidate_pod, "deletionTimestamp")
    return live and not current.get("_live")


def cluster_view(nodes, pods, daemonsets=None, events=None, now=None,
                 image_pattern="k8s-device-plugin", deployments=None, cluster_policies=None,
                 cluster_policy_crd=None):
    """Per-node API view: ``{node_name: {...}}`` plus the device plugin DaemonSets.

    Per node: ``exists``, ``ready``, ``unschedulable``, ``conditions``, ``boot_id``,
    ``allocatable`` (nvidia.com/*), ``pods`` (uid, namespace, name, phase),
    ``pending_pods`` (bound to the node and Pending: namespace, name, uid,
    ``pending_seconds``, ``kubelet_events``), ``device_plugin`` (image and PASS_DEVICE_SPECS of
    the plugin pod actually running there, else of its DaemonSet template), ``malformed``
    (what was wrong with the Node object or the pods bound to it: fields of the wrong type
    or missing; the rest of the view is built from what could be read).

    ``components`` (the NVIDIA stack seen from the API, a key only for what runs on or manages
    the node): ``device-plugin`` (version, image, mig_strategy, device_list_strategy, pod) of the
    device plugin pod on the node, ``mig-manager`` (version, image, pod) of the k8s-mig-manager pod,
    ``dcgm-exporter`` (version: the exporter's own, the second part of its image tag; image, pod),
    ``dcgm`` (version, image, pod, source: ``dcgm`` for a standalone hostengine pod, which wins, else
    ``dcgm-exporter`` for the DCGM libraries the exporter image bundles, the first part of its tag),
    ``gpu-operator`` (version, image, cdi_enabled, mig_strategy, driver_enabled, driver_preinstalled,
    cluster_policy)
    when the node runs an operand of the GPU Operator (a pod in the operator's namespace or of a
    DaemonSet owned by a ClusterPolicy). Versions are the image tags in the catalog's version text;
    an image without a tag, with only a digest or a tag that is no version gives ``version`` None.

    ``deployments`` (any namespace) and ``cluster_policies`` (nvidia.com/v1) feed the GPU Operator
    facts; ``cluster_policy_crd`` says whether the ClusterPolicy CRD is served (False: no
    operator; None: not known). The result's ``gpu_operator`` holds the operator Deployments and
    ClusterPolicies found, ``components`` the versions per component and on how many nodes.

    Malformed objects never raise: ``malformed`` at the top level lists those that could not
    be attached to a node (a Node without a name, a pod whose node is unknown because its
    ``spec.nodeName`` is not a string, a DaemonSet or event that is not an object, a Deployment or
    ClusterPolicy with fields of the wrong type).
    """
    now = now or datetime.datetime.now(datetime.timezone.utc)
    image_pattern = image_pattern if isinstance(image_pattern, str) else "k8s-device-plugin"
    kubelet_seen = kubelet_event_uids(events)
    malformed = []
    ds_by_name = {}
    ds_summaries = []
    for i, ds in enumerate(_l(daemonsets)):
        _note_malformed(ds, "daemonset", i, malformed)
        spec = _template_spec(ds)
        summary = device_plugin_summary(spec, image_pattern, owner=_s(_meta(ds, "name")))
        if summary is None:
            continue
        summary.update({"name": _s(_meta(ds, "name")), "namespace": _s(_meta(ds, "namespace"))})
        ds_by_name[(summary["namespace"], summary["name"])] = summary
        ds_summaries.append(summary)
    operator = gpu_operator_state(deployments, cluster_policies, cluster_policy_crd, malformed)
    ds_by_owner = {}
    for ds in _l(daemonsets):
        if isinstance(ds, dict) and _s(_meta(ds, "name")):
            ds_by_owner[(_s(_meta(ds, "namespace")), _meta(ds, "name"))] = _owned_by_cluster_policy(ds)
    operator_present = bool(operator["deployments"] or operator["cluster_policies"])
    for i, ev in enumerate(_l(events)):
        if not isinstance(ev, dict):
            malformed.append("event #%d is %s, not an object" % (i, json_kind(ev)))

    view = {}
    for i, n in enumerate(_l(nodes)):
        problems = shape_problems(n, "node")
        name = _s(_meta(n, "name"))
        if not name:
            malformed.append(_problem_line(n, "node", i, problems or ["metadata.name is missing"]))
            continue
        status = _d(n.get("status"))
        alloc = dict((k, v) for k, v in _d(status.get("allocatable")).items()
                     if isinstance(k, str) and k.startswith("nvidia.com/"))
        boot_id = _d(status.get("nodeInfo")).get("bootID")
        view[name] = {
            "exists": True,
            "ready": node_ready(n),
            "unschedulable": _d(n.get("spec")).get("unschedulable") is True,
            "conditions": node_conditions(n),
            "boot_id": boot_id if isinstance(boot_id, str) else None,
            "allocatable": alloc,
            "labels": _d(_meta(n, "labels", {})),
            "pods": [],
            "pending_pods": [],
            "device_plugin": None,
            "components": {},
            "malformed": ["Node: %s" % p for p in problems],
        }

    for i, p in enumerate(_l(pods)):
        problems = shape_problems(p, "pod")
        node = _d(_d(p).get("spec")).get("nodeName")
        if not isinstance(node, str) or node not in view:
            if problems:
                malformed.append(_problem_line(p, "pod", i, problems))
            continue
        entry = view[node]
        if problems:
            entry["malformed"].append(_problem_line(p, "pod", i, problems))
        phase = _s(_d(p.get("status")).get("phase"))
        uid = _s(_meta(p, "uid"))
        ns, pname = _s(_meta(p, "namespace")), _s(_meta(p, "name"))
        entry["pods"].append({"uid": uid, "namespace": ns, "name": pname, "phase": phase})
        if is_device_plugin_pod(p, image_pattern):
            owner = pod_owner(p)
            summary = device_plugin_summary(p.get("spec"), image_pattern, owner=owner)
            summary["pod"] = "%s/%s" % (ns, pname)
            summary["phase"] = phase
            entry["device_plugin"] = summary
        _node_components(entry, p, ns, pname, phase, image_pattern, operator, operator_present, ds_by_owner)
        if phase == "Pending" and not _meta(p, "deletionTimestamp"):
            since = pending_since(p)
            entry["pending_pods"].append({
                "namespace": ns, "name": pname, "uid": uid,
                "pending_seconds": _seconds_between(since, now),
                "kubelet_events": uid in kubelet_seen,
            })
    for entry in view.values():
        entry["pods"].sort(key=lambda x: (x["namespace"] or "", x["name"] or ""))
        entry["pending_pods"].sort(key=lambda x: (x["namespace"] or "", x["name"] or ""))
        for facts in entry["components"].values():
            facts.pop("_live", None)
    return {"nodes": view, "device_plugin_daemonsets": ds_summaries, "malformed": malformed,
            "gpu_operator": operator, "components": components_summary(view)}


def _node_components(entry, pod, ns, pname, phase, image_pattern, operator, operator_present, ds_by_owner):
    comps = entry["components"]
    spec = _d(pod).get("spec")
    live = phase == "Running" and not _meta(pod, "deletionTimestamp")
    where = "%s/%s" % (ns, pname)
    plugin = _plugin_container(spec, image_pattern)
    if plugin is not None and _prefer(comps.get("device-plugin"), pod):
        comps["device-plugin"] = dict(device_plugin_component(plugin), pod=where, _live=live)
    mig = _container_with_image(spec, MIG_MANAGER_IMAGE)
    if mig is not None and _prefer(comps.get("mig-manager"), pod):
        comps["mig-manager"] = dict(mig_manager_component(mig), pod=where, _live=live)
    exporter = _container_with_image(spec, DCGM_EXPORTER_IMAGE)
    if exporter is not None and _prefer(comps.get("dcgm-exporter"), pod):
        comps["dcgm-exporter"] = dict(dcgm_exporter_component(exporter), pod=where, _live=live)
    # DCGM: the standalone hostengine where one runs on the node, else the exporter's own libraries
    engine = _container_with_image(spec, DCGM_IMAGE)
    current = comps.get("dcgm")
    if engine is not None and (current is None or current["source"] != DCGM_IMAGE or _prefer(current, pod)):
        comps["dcgm"] = dict(dcgm_component(engine, DCGM_IMAGE), pod=where, _live=live)
    elif exporter is not None and (current is None or (current["source"] != DCGM_IMAGE and _prefer(current, pod))):
        comps["dcgm"] = dict(dcgm_component(exporter, DCGM_EXPORTER_IMAGE), pod=where, _live=live)
    if operator_present and "gpu-operator" not in comps:
        owner = pod_owner(pod)
        if (ns is not None and ns in operator["namespaces"]) or ds_by_owner.get((ns, owner)):
            comps["gpu-operator"] = gpu_operator_component(operator)
