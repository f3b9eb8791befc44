# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The GPU nodes of a cluster as Ansible hosts (the ``kubegpu.fleet.gpu_nodes`` inventory plugin).

Three steps, each a plain function so the plugin stays a thin shell around them:

1. :func:`list_all` reads Nodes (and, for the ``kubectl`` address, the agent pods) through the
   collection's one Kubernetes layer (``plugin_utils/k8s``), one page of :data:`PAGE_SIZE` objects
   per request, never more than :data:`MAX_ITEMS` objects in all;
2. :func:`node_record` turns one Node object into a small record of what the inventory needs
   (GPU facts from the capacity and the GPU Feature Discovery labels, addresses, node info), or
   says why the node is left out;
3. :func:`host_vars` and :func:`host_groups` give the host's variables and group names for the
   address mode and grouping the user chose.

Nothing in a Node is trusted: its labels and addresses come from the kubelet and from daemons on
the node. A label is used only when its key and value are valid Kubernetes label syntax (ASCII,
at most 63 characters per value, :func:`valid_label`), a node name only when it is a valid DNS
subdomain, an address only when it parses as an IP address (``InternalIP``, ``ExternalIP``) or a
DNS name (``Hostname``, ``InternalDNS``, ``ExternalDNS``); anything else is dropped and reported
in the record's ``problems``. Group names go through Ansible's ``to_safe_group_name``.
"""
from __future__ import annotations

import ipaddress
import re

from ansible.inventory.group import to_safe_group_name
from ansible.utils.unsafe_proxy import wrap_var

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.k8s import service
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.k8s.client import K8sError

PAGE_SIZE = 500          # objects per list request (the API's ``limit``)
MAX_ITEMS = 50000        # Nodes (or agent pods) in one cluster; Kubernetes supports 5,000
MAX_CONTINUE = 8192      # characters of a continue token
MAX_LABELS = 1024        # labels kept per node
MAX_ADDRESSES = 32       # addresses kept per node
MAX_TEXT = 256           # characters of a node info string (kernel, OS image, versions)
MAX_COUNT = 1 << 20      # a GPU or MIG device count above this is not a count

ADDRESS_MODES = ("internal_ip", "hostname", "kubectl")
KUBECTL_CONNECTION = "kubernetes.core.kubectl"

# GPU Feature Discovery (NVIDIA k8s-device-plugin's gpu-feature-discovery) and GPU Operator labels.
GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
L_PRESENT = "nvidia.com/gpu.present"
L_PRODUCT = "nvidia.com/gpu.product"
L_COUNT = "nvidia.com/gpu.count"
L_MEMORY = "nvidia.com/gpu.memory"
L_FAMILY = "nvidia.com/gpu.family"
L_COMPUTE = ("nvidia.com/gpu.compute.major", "nvidia.com/gpu.compute.minor")
L_DRIVER_FULL = "nvidia.com/cuda.driver-version.full"
L_DRIVER = ("nvidia.com/cuda.driver.major", "nvidia.com/cuda.driver.minor", "nvidia.com/cuda.driver.rev")
L_CUDA_FULL = "nvidia.com/cuda.runtime-version.full"
L_CUDA = ("nvidia.com/cuda.runtime.major", "nvidia.com/cuda.runtime.minor")
L_MIG_CAPABLE = "nvidia.com/mig.capable"
L_MIG_STRATEGY = "nvidia.com/mig.strategy"
L_MIG_CONFIG = "nvidia.com/mig.config"
L_MIG_CONFIG_STATE = "nvidia.com/mig.config.state"

_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_COUNT = re.compile(r"[0-9]{1,7}")
_VERSION_PART = re.compile(r"[0-9]{1,6}")
_TEXT = re.compile(r"[ -~]*")            # printable ASCII
_HOSTNAME_TYPES = ("Hostname", "InternalDNS", "ExternalDNS")
_IP_TYPES = ("InternalIP", "ExternalIP")


class InventoryError(Exception):
    """The inventory cannot be built; the message says why (never a token)."""


def dns_subdomain(text):
    """A valid DNS subdomain (RFC 1123, what Kubernetes requires of node and pod names)."""
    if not isinstance(text, str) or not 0 < len(text) <= 253:
        return False
    return all(len(part) <= 63 and _DNS_LABEL.fullmatch(part) for part in text.split("."))


def valid_label(key, value):
    """Kubernetes label syntax: ``[prefix/]name`` (prefix a DNS subdomain, name at most 63 characters)
    and a value of at most 63 characters, both ASCII alphanumerics with ``-``, ``_`` and ``.`` inside."""
    if not isinstance(key, str) or not isinstance(value, str) or len(key) > 317 or len(value) > 63:
        return False
    prefix, _sep, name = key.rpartition("/")
    if _sep and not dns_subdomain(prefix):
        return False
    return len(name) <= 63 and bool(_LABEL_NAME.fullmatch(name)) and bool(_LABEL_VALUE.fullmatch(value))


def _count(value):
    """A resource quantity or label that is a plain non-negative integer, else None."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value if 0 <= value <= MAX_COUNT else None
    if isinstance(value, str) and _COUNT.fullmatch(value):
        number = int(value)
        return number if number <= MAX_COUNT else None
    return None


def _text(value):
    """A short printable ASCII string from node info, else None."""
    if isinstance(value, str) and len(value) <= MAX_TEXT and _TEXT.fullmatch(value):
        return value
    return None


def _dict(value):
    return value if isinstance(value, dict) else {}


def _version(labels, full, parts):
    """``550.54.15`` from the full-version label, else from the major/minor(/rev) labels."""
    text = labels.get(full)
    if text and all(_VERSION_PART.fullmatch(p) for p in text.split(".")) and 1 < len(text.split(".")) <= 4:
        return text
    values = [labels.get(p) for p in parts]
    if values[0] is None or values[1] is None:
        return None
    values = [v for v in values if v not in (None, "")]
    if all(_VERSION_PART.fullmatch(v) for v in values):
        return ".".join(values)
    return None


def _resources(status, key):
    """GPU count and MIG device counts of ``status[key]`` (capacity or allocatable)."""
    table = _dict(status.get(key))
    gpus = _count(table.get(GPU_RESOURCE))
    mig = {}
    for name, value in table.items():
        if isinstance(name, str) and name.startswith(MIG_RESOURCE_PREFIX) and len(name) <= 128:
            profile = name[len(MIG_RESOURCE_PREFIX):]
            number = _count(value)
            if _LABEL_NAME.fullmatch(profile) and number:
                mig[profile] = number
    return gpus, mig


def _mig(labels, devices, product):
    strategy = labels.get(L_MIG_STRATEGY)
    if strategy not in ("none", "single", "mixed"):
        strategy = "mixed" if devices else None
    capable = {"true": True, "false": False}.get(labels.get(L_MIG_CAPABLE))
    config = labels.get(L_MIG_CONFIG) or None
    if devices or (config and config != "all-disabled") or "-MIG-" in (product or ""):
        mode = "enabled"
    elif config == "all-disabled" or capable is False or (capable and strategy in ("single", "mixed")):
        mode = "disabled"
    else:
        mode = "unknown"
    return {"mode": mode, "strategy": strategy, "capable": capable, "config": config,
            "config_state": labels.get(L_MIG_CONFIG_STATE) or None, "devices": devices}


def gpu_facts(labels, status):
    """The node's GPU facts from its valid labels and its status; None when it shows no NVIDIA GPU."""
    capacity, mig_capacity = _resources(status, "capacity")
    allocatable, mig_allocatable = _resources(status, "allocatable")
    label_count = _count(labels.get(L_COUNT))
    product = labels.get(L_PRODUCT) or None
    evidence = []
    if capacity or allocatable:
        evidence.append("resources")
    if mig_capacity or mig_allocatable:
        evidence.append("mig_resources")
    if labels.get(L_PRESENT) == "true" or product or label_count:
        evidence.append("labels")
    if not evidence:
        return None
    compute = [labels.get(k) for k in L_COMPUTE]
    devices = dict(mig_capacity or mig_allocatable)
    return {
        "product": product,
        "count": label_count if label_count is not None else capacity,
        "capacity": capacity,
        "allocatable": allocatable,
        "memory_mib": _count(labels.get(L_MEMORY)),
        "family": labels.get(L_FAMILY) or None,
        "compute_capability": ".".join(compute) if all(c and _VERSION_PART.fullmatch(c) for c in compute) else None,
        "driver_version": _version(labels, L_DRIVER_FULL, L_DRIVER),
        "cuda_version": _version(labels, L_CUDA_FULL, L_CUDA),
        "mig": _mig(labels, devices, product),
        "evidence": evidence,
    }


def _addresses(status, problems):
    out = []
    raw = status.get("addresses")
    if raw is None:
        return out
    if not isinstance(raw, list):
        problems.append("status.addresses is not a list")
        return out
    for entry in raw:
        if len(out) >= MAX_ADDRESSES:
            problems.append("more than %d addresses: the rest ignored" % MAX_ADDRESSES)
            break
        entry = _dict(entry)
        kind, address = entry.get("type"), entry.get("address")
        if kind in _IP_TYPES:
            try:
                ok = isinstance(address, str) and len(address) <= 45 and bool(ipaddress.ip_address(address))
            except ValueError:
                ok = False
        elif kind in _HOSTNAME_TYPES:
            ok = dns_subdomain(address)
        else:
            ok = False
        if ok:
            out.append({"type": kind, "address": address})
        else:
            known = kind if kind in _IP_TYPES + _HOSTNAME_TYPES else "address type"
            problems.append("an address that is not a valid %s ignored" % known)
    return out


def _ready(status):
    conditions = status.get("conditions")
    for cond in conditions if isinstance(conditions, list) else []:
        cond = _dict(cond)
        if cond.get("type") == "Ready":
            return {"True": True, "False": False}.get(cond.get("status"))
    return None


def node_record(node):
    """``(record, reason)`` for one Node object.

    ``record`` is None when the node is left out, ``reason`` then says why: ``not a GPU node`` (an
    ordinary node, expected) or what is malformed about it. A record has ``name``, ``labels`` (the
    valid ones), ``gpu`` (:func:`gpu_facts`), ``addresses``, ``unschedulable``, ``ready``, ``info``
    and ``problems`` (what was dropped from the object, for a warning).
    """
    if not isinstance(node, dict):
        return None, "not an object"
    meta, status = _dict(node.get("metadata")), _dict(node.get("status"))
    name = meta.get("name")
    if not dns_subdomain(name):
        return None, "its name is not a valid Kubernetes node name"
    problems = []
    labels = {}
    raw = meta.get("labels")
    if raw is not None and not isinstance(raw, dict):
        problems.append("metadata.labels is not a map")
        raw = {}
    invalid = 0
    for key, value in (raw or {}).items():
        if not valid_label(key, value):
            invalid += 1
        elif len(labels) < MAX_LABELS:
            labels[key] = value
        else:
            problems.append("more than %d labels: the rest ignored" % MAX_LABELS)
            break
    if invalid:
        problems.append("%d label(s) that are not valid Kubernetes labels ignored" % invalid)
    gpu = gpu_facts(labels, status)
    if gpu is None:
        return None, "not a GPU node"
    info = _dict(status.get("nodeInfo"))
    return {
        "name": name,
        "labels": labels,
        "gpu": gpu,
        "addresses": _addresses(status, problems),
        "unschedulable": _dict(node.get("spec")).get("unschedulable") is True,
        "ready": _ready(status),
        "info": {key: _text(info.get(src)) for key, src in (
            ("kubelet_version", "kubeletVersion"), ("kernel_version", "kernelVersion"), ("os_image", "osImage"),
            ("container_runtime", "containerRuntimeVersion"), ("architecture", "architecture"))},
        "problems": problems,
    }, None


def list_all(client, api_version, plural, what, namespace=None, label_selector=None, page_size=PAGE_SIZE,
             max_items=MAX_ITEMS):
    """Every object of a list call, read in pages of ``page_size``; ``(items, requests)``.

    The API's answer is checked as it comes: a body that is not a list, more than ``max_items``
    objects, an oversized continue token or an empty page that asks to continue (a server that
    would keep the reader forever) is a K8sError."""
    items, token, requests = [], None, 0
    path = service.object_path(api_version, plural, None, namespace)
    while True:
        query = {"limit": str(page_size)}
        if label_selector:
            query["labelSelector"] = label_selector
        if token:
            query["continue"] = token
        doc = client.request(what, "GET", path, query=query)
        requests += 1
        page = doc.get("items") if isinstance(doc, dict) else None
        if not isinstance(page, list):
            if isinstance(doc, dict) and doc.get("items") is None and "kind" in doc:
                page = []   # an empty list is sent as items: null by some servers
            else:
                raise K8sError("%s: the API's answer is not a list" % what)
        items.extend(page)
        if len(items) > max_items:
            raise K8sError("%s: more than %d objects, more than a cluster this inventory reads" % (what, max_items))
        token = _dict(doc.get("metadata")).get("continue")
        if not token:
            return items, requests
        if not isinstance(token, str) or len(token) > MAX_CONTINUE:
            raise K8sError("%s: the API's continue token is not a string of at most %d characters" % (what, MAX_CONTINUE))
        if not page:
            raise K8sError("%s: the API sent an empty page and asked to continue" % what)


def _pod_ready(pod):
    for cond in _dict(pod.get("status")).get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def agent_pods(pods):
    """``{node name: {"pod", "container"}}``: per node, the running agent pod to exec into (a Ready one
    first, then by name), from the pods the label selector listed. Pods being deleted, not Running,
    or whose names are not valid are never chosen."""
    best = {}
    for pod in pods:
        if not isinstance(pod, dict):
            continue
        meta, spec = _dict(pod.get("metadata")), _dict(pod.get("spec"))
        node, name = spec.get("nodeName"), meta.get("name")
        if not dns_subdomain(node) or not dns_subdomain(name) or meta.get("deletionTimestamp"):
            continue
        if _dict(pod.get("status")).get("phase") != "Running":
            continue
        containers = spec.get("containers") if isinstance(spec.get("containers"), list) else []
        first = _dict(containers[0]).get("name") if containers else None
        rank = (not _pod_ready(pod), name)
        if node not in best or rank < best[node][0]:
            best[node] = (rank, {"pod": name, "container": first if dns_subdomain(first) and "." not in first
                                 else None})
    return {node: entry for node, (_rank, entry) in best.items()}


# Host variables of the node's filesystems for a pod that mounts the host at ``mount`` (the names
# roles/_common/defaults/main.yml declares).
HOST_PATH_VARS = (
    ("kubegpu_host_root", ""), ("kubegpu_driver_root", ""), ("kubegpu_proc_path", "/proc"),
    ("kubegpu_dev_path", "/dev"), ("kubegpu_sys_path", "/sys"), ("kubegpu_cgroup_root", "/sys/fs/cgroup"),
    ("kubegpu_kmsg_path", "/dev/kmsg"),
    ("kubegpu_checkpoint_path", "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"))

# Connection options (from the inventory file) the kubectl connection gets too, under its names.
# A token never becomes a host variable: give it by K8S_AUTH_API_KEY, which both read.
KUBECTL_AUTH_VARS = (("kubeconfig", "ansible_kubectl_kubeconfig"), ("context", "ansible_kubectl_context"),
                     ("host", "ansible_kubectl_host"), ("ca_cert", "ansible_kubectl_ca_cert"),
                     ("client_cert", "ansible_kubectl_client_cert"), ("client_key", "ansible_kubectl_client_key"))
# kubernetes.core.kubectl (6.2 and before, ansible-collections/kubernetes.core issue 1021) puts its
# validate_certs option - ansible_kubectl_validate_certs, else K8S_AUTH_VERIFY_SSL, which AWX's
# Kubernetes credential always sets - on kubectl's command line as "--insecure-skip-tls-verify VALUE":
# kubectl takes VALUE for a plugin name and runs nothing ("flags cannot be placed before plugin name").
# The variable is set empty, which keeps the option off the command line and kubectl verifying the
# server (its default); validate_certs false in the inventory file is kubectl's own
# "--insecure-skip-tls-verify=true" instead, without a CA file (kubectl refuses the two together).
KUBECTL_VALIDATE_CERTS_VAR = "ansible_kubectl_validate_certs"
KUBECTL_INSECURE = {"ansible_kubectl_extra_args": "--insecure-skip-tls-verify=true", "ansible_kubectl_ca_cert": ""}


def host_vars(record, address="internal_ip", pool_label=None, pods=None, kubectl=None):
    """``(variables, reason)``: the host's variables, or None and why the host cannot be reached.

    ``address``: ``internal_ip`` (``ansible_host`` the node's first InternalIP), ``hostname``
    (``ansible_host`` the node name) or ``kubectl`` (``ansible_connection`` kubernetes.core.kubectl
    into the node's agent pod from ``pods``, :func:`agent_pods`). ``kubectl``: ``{namespace,
    container, host_mount, auth}`` for that mode."""
    facts = {
        "kubegpu_node_name": record["name"],
        "kubegpu_gpu": record["gpu"],
        "kubegpu_node": {"addresses": record["addresses"], "labels": record["labels"],
                         "unschedulable": record["unschedulable"], "ready": record["ready"],
                         "pool": record["labels"].get(pool_label) if pool_label else None,
                         "info": record["info"]},
    }
    if address == "internal_ip":
        ips = [a["address"] for a in record["addresses"] if a["type"] == "InternalIP"]
        if not ips:
            return None, "it has no valid InternalIP address"
        facts["ansible_host"] = ips[0]
    elif address == "hostname":
        facts["ansible_host"] = record["name"]
    elif address == "kubectl":
        kubectl = kubectl or {}
        pod = (pods or {}).get(record["name"])
        if not pod:
            return None, "no running pod of the agent (namespace %s, selector %s) on it" % (
                kubectl.get("namespace"), kubectl.get("selector"))
        facts.update({"ansible_connection": KUBECTL_CONNECTION, "ansible_kubectl_pod": pod["pod"],
                      "ansible_kubectl_namespace": kubectl.get("namespace")})
        container = kubectl.get("container") or pod.get("container")
        if container:
            facts["ansible_kubectl_container"] = container
        mount = kubectl.get("host_mount")
        if mount:
            mount = mount.rstrip("/")
            facts.update((var, (mount + sub) or "/") for var, sub in HOST_PATH_VARS)
        auth = kubectl.get("auth") or {}
        facts.update((var, auth[option]) for option, var in KUBECTL_AUTH_VARS
                     if auth.get(option) is not None and not isinstance(auth[option], dict))
        facts[KUBECTL_VALIDATE_CERTS_VAR] = ""
        if auth.get("validate_certs") is False:
            facts.update(KUBECTL_INSECURE)
    else:
        raise InventoryError("address must be one of %s, not %r" % (", ".join(ADDRESS_MODES), address))
    return facts, None


def make_unsafe(value):
    """``value`` with every string that could be a template (one with ``{`` or ``}``) marked unsafe.

    Strings without braces are left plain: Jinja cannot find a template in them, and AWX's
    inventory import stores a wrapped value as the dict ``{"__ansible_unsafe": ...}``
    (community.general issue 8212), which would break ``ansible_host``."""
    if isinstance(value, dict):
        return dict((make_unsafe(k), make_unsafe(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return [make_unsafe(v) for v in value]
    if isinstance(value, str) and ("{" in value or "}" in value):
        return wrap_var(value)
    return value


def host_groups(record, prefix="gpu_", pool_label=None):
    """Group names for the node (Ansible-safe): ``<prefix>nodes`` and, when known, ``<prefix>product_*``,
    ``<prefix>driver_*``, ``<prefix>mig_<mode>``, ``<prefix>mig_strategy_*`` and ``<prefix>pool_*``."""
    gpu = record["gpu"]
    names = [prefix + "nodes"]
    for kind, value in (("product_", gpu["product"]), ("driver_", gpu["driver_version"]),
                        ("mig_", gpu["mig"]["mode"]), ("mig_strategy_", gpu["mig"]["strategy"]),
                        ("pool_", record["labels"].get(pool_label) if pool_label else None)):
        if value:
            names.append(prefix + kind + value)
    return [to_safe_group_name(n, force=True, silent=True) for n in names]
