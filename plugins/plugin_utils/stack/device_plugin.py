# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the device_plugin role changes, decided from API objects (controller side, pure).

* :func:`plan_daemonsets` - which NVIDIA device plugin DaemonSets need a newer image and/or
  ``PASS_DEVICE_SPECS=true``, and the strategic merge patch that does it (containers and env
  are merged by name, so every other container, env entry and field is kept).
* :func:`static_cpu_manager_nodes` - the nodes that run the static CPU manager policy, from
  kubelet facts, audit findings and an explicit list.
* :func:`pods_to_recreate` / :func:`recreate_manifest` - GPU pods whose containers lost their
  devices: deleted (a controller owns them) or deleted and created again (bare pods).

Inputs are what ``kubernetes.core.k8s_info`` returns (plain dicts).
"""
from __future__ import annotations

import copy

from ansible_collections.kubegpu.fleet.plugins.module_utils._common.versions import DevicePluginVersion
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.k8s import labels as label_selector
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.k8s.labels import object_meta

PASS_DEVICE_SPECS = "PASS_DEVICE_SPECS"
DEFAULT_IMAGE_PATTERN = "k8s-device-plugin"
DEFAULT_SKIP_LABEL = "kubegpu.io/maintenance=skip"
# First release with --pass-device-specs / PASS_DEVICE_SPECS (NVIDIA/k8s-device-plugin ea604b28).
FIRST_WITH_DEVICE_SPECS = "1.0.0-beta5"
PASS_MODES = ("auto", "always", "never")
CPU_MANAGER_FINDING = "cpumanager.device_specs"

# Fields the API server owns: a pod created again must not carry them.
_SERVER_METADATA = ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp",
                    "deletionGracePeriodSeconds", "generation", "managedFields", "selfLink")


class DevicePluginError(ValueError):
    """Settings or objects the role cannot work with."""


# ------------------------------------------------------------------------------- helpers

def _truthy(value):
    return str(value).strip().lower() in ("1", "true", "yes", "on", "y")


def normalize_pass_mode(value):
    """``kubegpu_device_plugin_pass_device_specs`` -> ``auto``, ``always`` or ``never``.

    True (what the audit's remediation vars say) means ``always``, false ``never``.
    """
    if isinstance(value, bool):
        return "always" if value else "never"
    text = str(value if value is not None else "auto").strip().lower()
    if text in PASS_MODES:
        return text
    if text in ("true", "yes", "on", "1"):
        return "always"
    if text in ("false", "no", "off", "0"):
        return "never"
    raise DevicePluginError("kubegpu_device_plugin_pass_device_specs must be auto, always (true) or never "
                            "(false), not %r" % (value,))


def parse_version(text, what="version"):
    try:
        return DevicePluginVersion(str(text))
    except ValueError as exc:
        raise DevicePluginError("%s: %s" % (what, exc))


def image_version(image):
    """``nvcr.io/nvidia/k8s-device-plugin:v0.14.5`` -> DevicePluginVersion, None if untagged/unparseable."""
    if not isinstance(image, str):
        return None
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    if ":" not in last:
        return None
    try:
        return DevicePluginVersion(last.rsplit(":", 1)[1])
    except ValueError:
        return None


def image_repository(image):
    """The image without tag or digest (a registry port is kept): ``reg:5000/a/b:v1@sha256:..`` -> ``reg:5000/a/b``."""
    name = str(image).split("@", 1)[0]
    head, sep, last = name.rpartition("/")
    last = last.split(":", 1)[0]
    return head + sep + last


def has_label(obj, selector):
    """The one skip-label test (plugin_utils/k8s/labels.py), a bad selector a :class:`DevicePluginError`."""
    try:
        return label_selector.has_label(obj, selector)
    except label_selector.LabelError as exc:
        raise DevicePluginError(str(exc))


def plugin_container(pod_spec, image_pattern=DEFAULT_IMAGE_PATTERN):
    """The first container running the device plugin image, else None."""
    for ctr in (pod_spec or {}).get("containers") or []:
        if isinstance(ctr, dict) and image_pattern in str(ctr.get("image") or ""):
            return ctr
    return None


def pass_device_specs_state(container):
    """What the container asks for: dict ``value`` (True/False/None), ``source`` (env/args/None),
    ``value_from`` (the env entry uses valueFrom) and ``flag_false`` (a --pass-device-specs=false
    flag, which wins over the environment and cannot be fixed by setting the variable)."""
    out = {"value": None, "source": None, "value_from": False, "flag_false": False}
    for env in container.get("env") or []:
        if isinstance(env, dict) and env.get("name") == PASS_DEVICE_SPECS:
            if env.get("valueFrom") is not None:
                out.update(source="env", value_from=True)
            else:
                out.update(value=_truthy(env.get("value", "")), source="env")
    for arg in list(container.get("args") or []) + list(container.get("command") or []):
        arg = str(arg)
        if arg == "--pass-device-specs" or arg.startswith("--pass-device-specs="):
            flag_value = arg.partition("=")[2] if "=" in arg else "true"
            if _truthy(flag_value):
                out.update(value=True, source="args")
            else:
                out.update(value=False, source="args", flag_false=True)
    return out


# --------------------------------------------------------------------------- node matching

def _term_matches(term, node):
    labels = label_selector.labels_of(node)
    exprs = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not exprs and not fields:
        return False  # an empty term matches nothing (k8s.io/component-helpers nodeaffinity)
    if not all(label_selector.requirement_matches(e, labels) for e in exprs):
        return False
    for f in fields:
        if f.get("key") != "metadata.name":
            return False
        if not label_selector.requirement_matches(f, {"metadata.name": object_meta(node).get("name")}):
            return False
    return True


def node_selected(pod_spec, node):
    """Whether a pod template's nodeSelector and required node affinity admit ``node``."""
    spec = pod_spec or {}
    labels = label_selector.labels_of(node)
    for key, value in (spec.get("nodeSelector") or {}).items():
        if key not in labels or str(labels[key]) != str(value):
            return False
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = required.get("nodeSelectorTerms")
    if terms and not any(_term_matches(t, node) for t in terms):
        return False
    return True


def _owned_by(pod, ds):
    uid = object_meta(ds).get("uid")
    for ref in object_meta(pod).get("ownerReferences") or []:
        if ref.get("kind") == "DaemonSet" and ((uid and ref.get("uid") == uid) or
                                               (not uid and ref.get("name") == object_meta(ds).get("name"))):
            return True
    return False


def daemonset_nodes(ds, nodes=(), pods=()):
    """Nodes the DaemonSet serves: its template selects them, or a pod of it is bound there."""
    spec = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
    out = set()
    for node in nodes or []:
        name = object_meta(node).get("name")
        if name and node_selected(spec, node):
            out.add(name)
    for pod in pods or []:
        if object_meta(pod).get("namespace") == object_meta(ds).get("namespace") and _owned_by(pod, ds):
            node = (pod.get("spec") or {}).get("nodeName")
            if node:
                out.add(node)
    return sorted(out)


# ------------------------------------------------------------------ static CPU manager nodes

def static_cpu_manager_nodes(hosts=(), explicit=()):
    """Names of the nodes with ``cpuManagerPolicy: static``.

    ``hosts``: one dict per inventory host with ``node`` (Kubernetes node name), ``kubelet``
    (``ansible_facts.kubelet`` of kubegpu.fleet.kubelet_facts) and ``audit`` (the
    ``kubegpu_audit`` fact); either may be missing. A host counts when its kubelet facts say
    ``static`` or its audit found ``cpumanager.device_specs``. ``explicit``: node names given
    by the operator.
    """
    out = set(str(n) for n in explicit or [] if n)
    for host in hosts or []:
        if not isinstance(host, dict):
            continue
        node = host.get("node")
        if not node:
            continue
        kubelet = host.get("kubelet") or {}
        if isinstance(kubelet, dict) and kubelet.get("cpu_manager_policy") == "static":
            out.add(str(node))
            continue
        audit = host.get("audit") or {}
        findings = audit.get("findings") if isinstance(audit, dict) else None
        if any(isinstance(f, dict) and f.get("id") == CPU_MANAGER_FINDING for f in findings or []):
            out.add(str(audit.get("node") or node))
    return sorted(out)


def cpu_manager_known(hosts=()):
    """Names of the hosts whose CPU manager policy is known (kubelet facts or an audit)."""
    out = []
    for host in hosts or []:
        if not isinstance(host, dict):
            continue
        kubelet = host.get("kubelet") or {}
        audit = host.get("audit") or {}
        if (isinstance(kubelet, dict) and kubelet.get("cpu_manager_policy")) or (
                isinstance(audit, dict) and audit.get("status") == "audited"):
            out.append(host.get("host") or host.get("node"))
    return out


# ------------------------------------------------------------------------------- planning

def _target_image(current, image, version):
    if image:
        return image
    return "%s:%s" % (image_repository(current), version)


def plan_daemonsets(daemonsets, nodes=(), pods=(), static_nodes=(), image_pattern=DEFAULT_IMAGE_PATTERN,
                    min_version=FIRST_WITH_DEVICE_SPECS, version="v0.17.2", image="",
                    pass_device_specs="auto", skip_label=DEFAULT_SKIP_LABEL):
    """One entry per device plugin DaemonSet (those whose template runs ``image_pattern``).

    Entry keys: ``namespace``, ``name``, ``container``, ``image``, ``version`` (text or None),
    ``nodes`` (served), ``static_nodes`` (served nodes with the static CPU manager),
    ``skip_nodes`` (served nodes carrying the skip label), ``pass_device_specs`` (current:
    true/false/None), ``upgrade``, ``target_image``, ``set_pass_device_specs``, ``reasons``,
    ``warnings``, ``blocked`` (why a needed change is not made, else None), ``patch`` (strategic
    merge patch body, None when nothing is to change or it is blocked).
    """
    mode = normalize_pass_mode(pass_device_specs)
    minimum = parse_version(min_version, "kubegpu_device_plugin_min_version")
    if image:
        target_version = image_version(image)
        if target_version is None:
            raise DevicePluginError("kubegpu_device_plugin_image %r has no version tag this role can compare "
                                    "(e.g. nvcr.io/nvidia/k8s-device-plugin:v0.17.2)" % (image,))
    else:
        target_version = parse_version(version, "kubegpu_device_plugin_version")
    if target_version < minimum:
        raise DevicePluginError("the target device plugin version %s is older than "
                                "kubegpu_device_plugin_min_version %s" % (target_version.text, minimum.text))
    if mode != "never" and not target_version.passes_device_specs():
        raise DevicePluginError("the target device plugin version %s predates %s and cannot pass device specs"
                                % (target_version.text, FIRST_WITH_DEVICE_SPECS))
    static = set(static_nodes or [])
    node_by_name = dict((object_meta(n).get("name"), n) for n in nodes or [])
    plans = []
    for ds in daemonsets or []:
        tmpl_spec = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
        ctr = plugin_container(tmpl_spec, image_pattern)
        if ctr is None:
            continue
        md = object_meta(ds)
        served = daemonset_nodes(ds, nodes, pods)
        current_image = str(ctr.get("image") or "")
        current = image_version(current_image)
        state = pass_device_specs_state(ctr)
        entry = {
            "namespace": md.get("namespace"), "name": md.get("name"), "container": ctr.get("name"),
            "image": current_image, "version": current.text if current else None,
            "nodes": served, "static_nodes": sorted(static.intersection(served)),
            "skip_nodes": sorted(n for n in served if n in node_by_name and has_label(node_by_name[n], skip_label)),
            "pass_device_specs": state["value"], "upgrade": False, "target_image": None,
            "set_pass_device_specs": False, "reasons": [], "warnings": [], "blocked": None, "patch": None,
        }
        wants_specs = mode == "always" or (mode == "auto" and bool(entry["static_nodes"]))
        if wants_specs and state["value"] is not True:
            if state["flag_false"]:
                entry["blocked"] = ("its container passes --pass-device-specs=false, which overrides the "
                                    "PASS_DEVICE_SPECS environment variable: remove the flag")
            else:
                entry["set_pass_device_specs"] = True
                why = ("always" if mode == "always" else
                       "serves static CPU manager nodes: %s" % ", ".join(entry["static_nodes"]))
                entry["reasons"].append("PASS_DEVICE_SPECS=true (%s)" % why)
        if current is None:
            entry["warnings"].append("cannot tell the version of %s (no version tag): image left as it is"
                                     % current_image)
        else:
            too_old = current < minimum
            no_specs = (wants_specs or state["value"] is True) and not current.passes_device_specs()
            if too_old or no_specs:
                entry["upgrade"] = True
                entry["target_image"] = _target_image(current_image, image, target_version.text)
                entry["reasons"].append("image %s -> %s (%s)" % (
                    current_image, entry["target_image"],
                    "older than %s" % minimum.text if too_old else "predates %s" % FIRST_WITH_DEVICE_SPECS))
        if not (entry["upgrade"] or entry["set_pass_device_specs"]):
            plans.append(entry)
            continue
        if entry["skip_nodes"] and entry["blocked"] is None:
            entry["blocked"] = ("it serves node(s) labelled %s (%s): changing its template would restart "
                                "their device plugin pods" % (skip_label, ", ".join(entry["skip_nodes"])))
        if entry["blocked"] is None:
            entry["patch"] = daemonset_patch(entry["container"], entry["target_image"] if entry["upgrade"] else None,
                                             entry["set_pass_device_specs"], state["value_from"])
        plans.append(entry)
    return sorted(plans, key=lambda e: (e["namespace"] or "", e["name"] or ""))


def daemonset_patch(container, image=None, pass_device_specs=False, drop_value_from=False):
    """Strategic merge patch for one container of a DaemonSet's pod template."""
    ctr = {"name": container}
    if image:
        ctr["image"] = image
    if pass_device_specs:
        env = {"name": PASS_DEVICE_SPECS, "value": "true"}
        if drop_value_from:
            env["valueFrom"] = None  # null deletes the field in a strategic merge patch
        ctr["env"] = [env]
    return {"spec": {"template": {"spec": {"containers": [ctr]}}}}


# ------------------------------------------------------------------------- pods

def pod_ready(pod):
    """Running, not being deleted, and the Ready condition True."""
    status = (pod or {}).get("status") or {}
    if object_meta(pod).get("deletionTimestamp") or status.get("phase") != "Running":
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def ready_pods(pods, owner_uid=None):
    """Ready pods (see :func:`pod_ready`), only those controlled by ``owner_uid`` when given."""
    return [p for p in pods or [] if pod_ready(p)
            and (owner_uid is None or (controller_of(p) or {}).get("uid") == owner_uid)]


def controller_of(pod):
    for ref in object_meta(pod).get("ownerReferences") or []:
        if ref.get("controller"):
            return ref
    return None


def recreate_manifest(pod):
    """The pod as it must be created again: same name, labels, annotations and spec (nodeName
    included, so it lands on the same node), without status and server-owned metadata."""
    md = copy.deepcopy(object_meta(pod))
    for key in _SERVER_METADATA:
        md.pop(key, None)
    md.pop("ownerReferences", None)
    return {"apiVersion": pod.get("apiVersion") or "v1", "kind": "Pod", "metadata": md,
            "spec": copy.deepcopy(pod.get("spec") or {})}


def pods_to_recreate(broken, pods, skip_label=DEFAULT_SKIP_LABEL, image_pattern=DEFAULT_IMAGE_PATTERN):
    """GPU pods to recreate from kubegpu.fleet.cgroup_devices' ``broken`` list.

    Returns one dict per pod: ``namespace``, ``name``, ``uid``, ``action`` (``delete``: its
    controller recreates it; ``recreate``: bare pod, deleted and created again from
    ``manifest``), ``owner`` (``Kind/name`` or None), ``missing`` (device names), and
    ``skipped`` (a reason, e.g. the skip label, else None).
    """
    by_uid = dict((object_meta(p).get("uid"), p) for p in pods or [] if object_meta(p).get("uid"))
    missing = {}
    for entry in broken or []:
        uid = (entry or {}).get("pod_uid")
        if uid:
            missing.setdefault(uid, set()).update((entry or {}).get("missing") or [])
    out = []
    for uid in sorted(missing):
        pod = by_uid.get(uid)
        if pod is None:
            continue  # gone already, or not a pod the API knows (static pod mirror)
        md = object_meta(pod)
        owner = controller_of(pod)
        item = {"namespace": md.get("namespace"), "name": md.get("name"), "uid": uid,
                "owner": "%s/%s" % (owner.get("kind"), owner.get("name")) if owner else None,
                "missing": sorted(missing[uid]), "skipped": None,
                "action": "delete" if owner else "recreate", "manifest": None}
        if md.get("deletionTimestamp"):
            item["skipped"] = "already being deleted"
        elif has_label(pod, skip_label):
            item["skipped"] = "labelled %s" % skip_label
        elif plugin_container(pod.get("spec"), image_pattern) is not None:
            item["skipped"] = "device plugin pod (restarted separately)"
        elif (owner or {}).get("kind") == "Node":
            item["skipped"] = "static pod (the kubelet owns it)"
        if item["action"] == "recreate" and item["skipped"] is None:
            item["manifest"] = recreate_manifest(pod)
        out.append(item)
    return sorted(out, key=lambda x: (x["namespace"] or "", x["name"] or ""))
