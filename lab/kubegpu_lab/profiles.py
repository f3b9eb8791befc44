"""Node profiles: what each lab node is (GPUs, MIG, driver, kubelet config, faults, pods).

A profile file (``lab/profiles/<name>.yml``) has ``defaults`` merged (deeply) under every entry
of ``nodes``, and ``cluster`` objects seeded into the API double. See docs/lab.md for every key;
``load_profile`` validates them and names the bad value.
"""
import copy
import os
import re
import uuid

import yaml

from . import bootfs, paths
from .util import LabError

PROFILE_DIR = paths.PROFILE_DIR
NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,30}[a-z0-9])?$")
MIG_RE = re.compile(r"^(?:\d+c\.)?\d+g\.\d+gb(?:\+me)?$")
GIB = 1024 ** 3

BUILTIN_DEFAULTS = {
    "gpus": {"count": 8, "model": "NVIDIA H100 80GB HBM3", "memory_mib": 81559, "architecture": "Hopper",
             "compute_capability": "9.0", "pci_device_id": "0x233010DE"},
    "mig": None,
    "mig_apply": "boot",
    "memory": "62Gi",
    "cpus": 32,
    "driver": {"version": "570.172.08", "compute_utils": "same", "container_toolkit": "1.17.8",
               "modprobe": True, "fabric_manager": None},
    "uvm": "boot",
    "dev_char_symlinks": True,
    "runtime": {"nvidia_hook": True, "toolkit_mode": None, "cdi_spec": False},
    "nvswitch": {"count": 0},
    "kubelet": {"version": "v1.31.4", "verbosity": 4, "flags": [], "config": {}},
    "faults": {"gpu_uuids_change_on_reboot": False},
    "setup": {"reboots": 0},
    "labels": {},
    "pods": [],
    "late_pods": [],
    "boot": {"layout": "debian", "pending_kernel": False, "other_flavour": False, "default": "newest"},
    # seconds of firmware POST before each boot after a reboot (real GPU servers take minutes,
    # and differently per model: the rollout bench gives its nodes different ones)
    "post_seconds": 0,
}

KUBELET_BASE_CONFIG = {
    "apiVersion": "kubelet.config.k8s.io/v1beta1",
    "kind": "KubeletConfiguration",
    "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                       "x509": {"clientCAFile": "/etc/kubernetes/pki/ca.crt"}},
    "authorization": {"mode": "Webhook"},
    "cgroupDriver": "systemd",
    "clusterDNS": ["10.96.0.10"],
    "clusterDomain": "cluster.local",
    "containerRuntimeEndpoint": "unix:///run/containerd/containerd.sock",
    "cpuManagerReconcilePeriod": "10s",
    "evictionPressureTransitionPeriod": "5m0s",
    "fileCheckFrequency": "20s",
    "healthzBindAddress": "127.0.0.1",
    "healthzPort": 10248,
    "httpCheckFrequency": "20s",
    "imageMinimumGCAge": "2m0s",
    "logging": {"flushFrequency": "5s", "verbosity": 0},
    "memorySwap": {},
    "nodeStatusReportFrequency": "5m0s",
    "nodeStatusUpdateFrequency": "10s",
    "rotateCertificates": True,
    "runtimeRequestTimeout": "15m0s",
    "shutdownGracePeriod": "0s",
    "shutdownGracePeriodCriticalPods": "0s",
    "staticPodPath": "/etc/kubernetes/manifests",
    "streamingConnectionIdleTimeout": "4h0m0s",
    "syncFrequency": "1m0s",
    "volumeStatsAggPeriod": "1m0s",
}


def deep_merge(base, over):
    out = copy.deepcopy(base)
    for k, v in (over or {}).items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def parse_bytes(value, what):
    m = re.match(r"^\s*(\d+(?:\.\d+)?)\s*(Ki|Mi|Gi|Ti)?\s*$", str(value))
    if not m:
        raise LabError("%s: %r is not a memory size like 62Gi" % (what, value))
    mult = {"Ki": 1024, "Mi": 1024 ** 2, "Gi": GIB, "Ti": 1024 ** 4, None: 1}[m.group(2)]
    return int(float(m.group(1)) * mult)


def profile_path(name_or_path):
    if os.path.sep in name_or_path or name_or_path.endswith((".yml", ".yaml")):
        return name_or_path
    return os.path.join(PROFILE_DIR, name_or_path + ".yml")


# The node profiles a Molecule platform (or ``up --platforms``) names: the nodes of this lab
# profile, by their seed. Each brings the profile's defaults and cluster objects (device plugin
# DaemonSets) with it, so a node is the same whichever lab it is booted in.
NODE_PROFILE_SOURCE = "demo"


def node_profiles():
    """({node profile name (the seed): node entry}, profile document) of NODE_PROFILE_SOURCE."""
    with open(profile_path(NODE_PROFILE_SOURCE)) as f:
        doc = yaml.safe_load(f)
    return dict((n["seed"], n) for n in doc["nodes"] if n.get("seed")), doc


def compose(platforms, where="platforms"):
    """A lab profile document from a list of ``{name, profile, node}``: one node per entry, the
    node profile ``profile`` (node_profiles()) named ``name``, with ``node`` (optional, any
    profile node key: gpus, driver, kubelet, ...) deep-merged over it."""
    if not isinstance(platforms, list) or not platforms:
        raise LabError("%s: needs a non-empty list of nodes ({name, profile})" % where)
    catalog, doc = node_profiles()
    nodes = []
    for idx, plat in enumerate(platforms):
        if not isinstance(plat, dict) or not plat.get("name"):
            raise LabError("%s: entry #%d has no name" % (where, idx + 1))
        prof = plat.get("profile")
        if prof not in catalog:
            raise LabError("%s: %s: profile %r is not a node profile (one of: %s)"
                           % (where, plat["name"], prof, ", ".join(sorted(catalog))))
        over = plat.get("node") or {}
        if not isinstance(over, dict):
            raise LabError("%s: %s: node must be a map of profile node keys, not %r" % (where, plat["name"], over))
        node = deep_merge(catalog[prof], over)
        node["name"] = str(plat["name"])
        nodes.append(node)
    return {"name": "platforms", "description": "nodes by node profile: %s"
            % ", ".join("%s=%s" % (p["name"], p["profile"]) for p in platforms),
            "defaults": doc.get("defaults") or {}, "nodes": nodes, "cluster": doc.get("cluster") or {}}


def load_profile(name_or_path, node_count=None):
    """A lab profile by name (lab/profiles/<name>.yml), path, or as a document (a dict)."""
    if isinstance(name_or_path, dict):
        return expand(name_or_path, name_or_path.get("name") or "profile", node_count)
    path = profile_path(name_or_path)
    try:
        with open(path) as f:
            doc = yaml.safe_load(f) or {}
    except OSError as exc:
        raise LabError("cannot read profile %s: %s" % (path, exc.strerror))
    except yaml.YAMLError as exc:
        raise LabError("profile %s is not valid YAML: %s" % (path, exc))
    return expand(doc, path, node_count)


def expand(doc, where="profile", node_count=None):
    if not isinstance(doc, dict) or not isinstance(doc.get("nodes"), list) or not doc["nodes"]:
        raise LabError("%s: needs a non-empty 'nodes' list" % where)
    defaults = deep_merge(BUILTIN_DEFAULTS, doc.get("defaults") or {})
    nodes = list(doc["nodes"])
    if node_count is not None:
        if node_count < 1:
            raise LabError("--nodes must be at least 1, not %d" % node_count)
        # repeat the profile's node list to reach the count (gpu-0, gpu-1, ...)
        template = nodes
        nodes = []
        for i in range(node_count):
            n = copy.deepcopy(template[i % len(template)])
            if i >= len(template):
                n["name"] = "%s-%d" % (n["name"], i // len(template))
            nodes.append(n)
    out = []
    seen = set()
    for idx, raw in enumerate(nodes):
        if not isinstance(raw, dict) or not raw.get("name"):
            raise LabError("%s: node #%d has no name" % (where, idx + 1))
        node = deep_merge(defaults, raw)
        node["index"] = idx
        validate_node(node, where)
        if node["name"] in seen:
            raise LabError("%s: node name %r is used twice" % (where, node["name"]))
        seen.add(node["name"])
        out.append(node)
    cluster = doc.get("cluster") or {}
    manifests = cluster.get("manifests") or []
    if not isinstance(manifests, list):
        raise LabError("%s: cluster.manifests must be a list of Kubernetes objects" % where)
    return {"name": doc.get("name") or os.path.splitext(os.path.basename(str(where)))[0],
            "description": doc.get("description", ""), "nodes": out, "manifests": manifests,
            "source": where}


def _mig_layout(node, where):
    mig = node.get("mig")
    count = node["gpus"]["count"]
    layout = [None] * count
    if mig in (None, False):
        return layout
    if isinstance(mig, list):
        items = enumerate(mig)
    elif isinstance(mig, dict):
        items = mig.items()
    else:
        raise LabError("%s: node %s: mig must be a list (one entry per GPU) or a map GPU index -> "
                       "profiles, not %r" % (where, node["name"], mig))
    for gpu, profiles in items:
        try:
            gpu = int(gpu)
        except (TypeError, ValueError):
            raise LabError("%s: node %s: mig GPU index %r is not a number" % (where, node["name"], gpu))
        if not 0 <= gpu < count:
            raise LabError("%s: node %s: mig names GPU %d but the node has %d GPUs"
                           % (where, node["name"], gpu, count))
        if profiles in (None, False, []):
            continue
        if not isinstance(profiles, list) or not all(isinstance(p, str) and MIG_RE.match(p) for p in profiles):
            raise LabError("%s: node %s: MIG layout of GPU %d must be a list of profiles like 3g.40gb, "
                           "not %r" % (where, node["name"], gpu, profiles))
        slices = sum(int(re.search(r"(\d+)g\.", p).group(1)) for p in profiles)
        if slices > 7:
            raise LabError("%s: node %s: MIG layout %r of GPU %d needs %d slices (at most 7)"
                           % (where, node["name"], profiles, gpu, slices))
        layout[gpu] = profiles
    return layout


def validate_node(node, where):
    name = node["name"]
    if not NAME_RE.match(name):
        raise LabError("%s: node name %r must be a DNS label of at most 32 characters" % (where, name))
    g = node["gpus"]
    if not isinstance(g.get("count"), int) or not 0 <= g["count"] <= 16:
        raise LabError("%s: node %s: gpus.count must be 0..16, not %r" % (where, name, g.get("count")))
    node["mig_layout"] = _mig_layout(node, where)
    _validate_gpu_health(node, where)
    if node["mig_apply"] not in ("boot", "after-device-plugin"):
        raise LabError("%s: node %s: mig_apply must be boot or after-device-plugin, not %r"
                       % (where, name, node["mig_apply"]))
    node["memory_bytes"] = parse_bytes(node["memory"], "%s: node %s: memory" % (where, name))
    if not isinstance(node["cpus"], int) or node["cpus"] < 1:
        raise LabError("%s: node %s: cpus must be a positive integer, not %r" % (where, name, node["cpus"]))
    if node["uvm"] not in ("boot", "late", "never"):
        raise LabError("%s: node %s: uvm must be boot, late or never, not %r" % (where, name, node["uvm"]))
    d = node["driver"]
    if d.get("version") is not None and not re.match(r"^\d+\.\d+(\.\d+)?$", str(d["version"])):
        raise LabError("%s: node %s: driver.version %r is not a driver version" % (where, name, d["version"]))
    cu = d.get("compute_utils", "same")
    if cu not in ("same", "none") and not re.match(r"^\d+\.\d+(\.\d+)?$", str(cu)):
        raise LabError("%s: node %s: driver.compute_utils must be same, none or a version, not %r"
                       % (where, name, cu))
    fm = d.get("fabric_manager")
    if fm not in (None, False, "same") and not re.match(r"^\d+\.\d+(\.\d+)?$", str(fm)):
        raise LabError("%s: node %s: driver.fabric_manager must be null, same or a driver version, not %r"
                       % (where, name, fm))
    _validate_stack(node, where)
    kcfg = node["kubelet"].get("config")
    if not isinstance(kcfg, dict):
        raise LabError("%s: node %s: kubelet.config must be a mapping" % (where, name))
    if not isinstance(node["kubelet"].get("flags", []), list):
        raise LabError("%s: node %s: kubelet.flags must be a list" % (where, name))
    for key in ("pods", "late_pods"):
        if not isinstance(node.get(key), list):
            raise LabError("%s: node %s: %s must be a list" % (where, name, key))
    post = node.get("post_seconds")
    if isinstance(post, bool) or not isinstance(post, (int, float)) or not 0 <= post <= 900:
        raise LabError("%s: node %s: post_seconds must be 0..900 seconds, not %r" % (where, name, post))
    problem = bootfs.validate(node.get("boot"), where, name)
    if problem:
        raise LabError(problem)


TOOLKIT_MODES = ("legacy", "cdi", "auto", "jit-cdi")


def _validate_stack(node, where):
    """``nvswitch.count`` (NVSwitches on the PCI bus, 0..12), ``runtime.toolkit_mode`` (null:
    the package's config.toml as installed; else nvidia-container-runtime.mode is set to it after
    the install, as ``nvidia-ctk config --set`` does) and ``runtime.cdi_spec`` (write
    /etc/cdi/nvidia.yaml for the node's GPUs, as ``nvidia-ctk cdi generate`` does)."""
    name = node["name"]
    nvs = node.get("nvswitch")
    if not isinstance(nvs, dict) or not isinstance(nvs.get("count"), int) or isinstance(nvs.get("count"), bool) \
            or not 0 <= nvs["count"] <= 12:
        raise LabError("%s: node %s: nvswitch must be {count: 0..12}, not %r" % (where, name, nvs))
    rt = node["runtime"]
    if rt.get("toolkit_mode") is not None and rt["toolkit_mode"] not in TOOLKIT_MODES:
        raise LabError("%s: node %s: runtime.toolkit_mode must be null or one of %s, not %r"
                       % (where, name, ", ".join(TOOLKIT_MODES), rt["toolkit_mode"]))
    if not isinstance(rt.get("cdi_spec", False), bool):
        raise LabError("%s: node %s: runtime.cdi_spec must be true or false, not %r" % (where, name, rt["cdi_spec"]))
    if (rt.get("toolkit_mode") or rt.get("cdi_spec")) and not node["driver"].get("container_toolkit"):
        raise LabError("%s: node %s: runtime.toolkit_mode and runtime.cdi_spec need driver.container_toolkit"
                       % (where, name))


def toolkit_config_text(text, mode):
    """The package's config.toml with ``nvidia-container-runtime.mode`` set to ``mode``, as
    ``nvidia-ctk config --in-place --set nvidia-container-runtime.mode=<mode>`` sets it: a TOML
    edit (tomlkit) that keeps every other key, comment and table of the file as it was; the
    ``[nvidia-container-runtime]`` table is added when the file has none. LabError for a file that
    is not TOML or whose ``nvidia-container-runtime`` is not a table."""
    import tomlkit  # a development requirement (requirements-dev.txt), like the rest of the lab
    from tomlkit.exceptions import TOMLKitError
    try:
        doc = tomlkit.parse(text)
    except TOMLKitError as e:
        raise LabError("the toolkit's config.toml is not TOML: %s" % e)
    table = doc.get("nvidia-container-runtime")
    if table is None:
        table = tomlkit.table()
        doc["nvidia-container-runtime"] = table
    elif not isinstance(table, dict):
        raise LabError("the toolkit's config.toml: nvidia-container-runtime is %r, not a table" % (table,))
    table["mode"] = mode
    return tomlkit.dumps(doc)


def cdi_spec_text(gpu_count):
    """A CDI spec for the node's GPUs in the shape ``nvidia-ctk cdi generate`` writes (kind
    nvidia.com/gpu, one device per index plus ``all``, the control device nodes and the hooks)."""
    devices = []
    for i in range(gpu_count):
        devices.append({"name": str(i), "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia%d" % i}]}})
    if gpu_count:
        devices.append({"name": "all", "containerEdits": {"deviceNodes": [
            {"path": "/dev/nvidia%d" % i} for i in range(gpu_count)]}})
    spec = {"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": devices,
            "containerEdits": {
                "deviceNodes": [{"path": p} for p in ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")],
                "hooks": [{"hookName": "createContainer", "path": "/usr/bin/nvidia-cdi-hook",
                           "args": ["nvidia-cdi-hook", "create-symlinks", "--link",
                                    "libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so"]},
                          {"hookName": "createContainer", "path": "/usr/bin/nvidia-cdi-hook",
                           "args": ["nvidia-cdi-hook", "update-ldcache", "--folder", "/usr/lib/x86_64-linux-gnu"]}]}}
    return "---\n" + yaml.safe_dump(spec, sort_keys=False)


XID_MESSAGES = {
    # what the driver prints after the Xid number, as quoted in docs/hardware-health.md
    # ("Record format"); any other Xid needs its text in the profile
    79: "GPU has fallen off the bus.",
    63: "Row Remapper: New row marked for remapping, reset gpu to activate.",
    # NVIDIA/open-gpu-kernel-modules kern_gpu_error_cont_ga100.c, the example of _gpuGenerateErrorLog
    94: "Contained: CE User Channel (0x9). RST: No, D-RST: No",
}


def _gpu_index(value, node, where, key):
    count = node["gpus"]["count"]
    try:
        idx = int(value)
    except (TypeError, ValueError):
        raise LabError("%s: node %s: gpus.%s names GPU %r, not a GPU index" % (where, node["name"], key, value))
    if not 0 <= idx < count:
        raise LabError("%s: node %s: gpus.%s names GPU %d but the node has %d GPUs"
                       % (where, node["name"], key, idx, count))
    return idx


def _validate_gpu_health(node, where):
    """``gpus.health`` (GPU index -> the fake NVML ``health`` of that GPU), ``gpus.missing``
    (GPUs on the PCI bus that the driver does not list) and ``gpus.xid`` (Xid lines in the
    node's kernel log): normalised into ``health_map``, ``missing_gpus`` and ``xid_events``."""
    g = node["gpus"]
    name = node["name"]
    health = g.get("health") or {}
    if not isinstance(health, dict):
        raise LabError("%s: node %s: gpus.health must be a map GPU index -> health, not %r" % (where, name, health))
    node["health_map"] = {}
    for idx, h in health.items():
        i = _gpu_index(idx, node, where, "health")
        if not isinstance(h, dict):
            raise LabError("%s: node %s: gpus.health of GPU %d must be a mapping (the fake NVML health key), "
                           "not %r" % (where, name, i, h))
        node["health_map"][i] = h
    missing = g.get("missing") or []
    if not isinstance(missing, list):
        raise LabError("%s: node %s: gpus.missing must be a list of GPU indexes, not %r" % (where, name, missing))
    node["missing_gpus"] = sorted(set(_gpu_index(i, node, where, "missing") for i in missing))
    xids = g.get("xid") or []
    if not isinstance(xids, list):
        raise LabError("%s: node %s: gpus.xid must be a list, not %r" % (where, name, xids))
    node["xid_events"] = []
    for ev in xids:
        if not isinstance(ev, dict) or "gpu" not in ev or not isinstance(ev.get("xid"), int) or isinstance(ev.get("xid"), bool):
            raise LabError("%s: node %s: a gpus.xid entry needs gpu (an index) and xid (a number), not %r"
                           % (where, name, ev))
        text = ev.get("text") or XID_MESSAGES.get(ev["xid"])
        if not text:
            raise LabError("%s: node %s: Xid %d has no built-in message: give the entry a text"
                           % (where, name, ev["xid"]))
        count = ev.get("count", 1)
        if not isinstance(count, int) or not 1 <= count <= 100:
            raise LabError("%s: node %s: gpus.xid count must be 1..100, not %r" % (where, name, count))
        # the MIG instance the driver attributes the Xid to ("(PCI:... GPU-I:01 GPU-CI:00)")
        for key in ("gpu_instance", "compute_instance"):
            v = ev.get(key)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= 99):
                raise LabError("%s: node %s: gpus.xid %s must be 0..99, not %r" % (where, name, key, v))
        if ev.get("compute_instance") is not None and ev.get("gpu_instance") is None:
            raise LabError("%s: node %s: gpus.xid compute_instance needs gpu_instance" % (where, name))
        node["xid_events"].append({"gpu": _gpu_index(ev["gpu"], node, where, "xid"), "xid": ev["xid"],
                                   "text": str(text), "pid": ev.get("pid"), "process": ev.get("process"),
                                   "count": count, "gpu_instance": ev.get("gpu_instance"),
                                   "compute_instance": ev.get("compute_instance")})


def kubelet_config(node):
    """The KubeletConfiguration file content for a node (base + profile keys; null removes)."""
    cfg = deep_merge(KUBELET_BASE_CONFIG, node["kubelet"].get("config") or {})
    return {k: v for k, v in cfg.items() if v is not None}


def packages_for(node, catalog_versions):
    """apt-get install arguments for the node's driver stack (name=version)."""
    from .packages import deb_version, toolkit_deb_version
    d = node["driver"]
    out = []
    version = d.get("version")
    if version:
        if version not in catalog_versions["driver_versions"]:
            raise LabError("node %s: driver %s is not in lab/packages/catalog.yml (%s)"
                           % (node["name"], version, ", ".join(catalog_versions["driver_versions"])))
        branch = version.split(".")[0]
        dv = deb_version(version)
        # apt does not pick older versions of exact-version dependencies by itself: name the set
        for pkg in ("nvidia-driver", "libnvidia-compute", "nvidia-utils", "nvidia-kernel-common", "nvidia-dkms"):
            out.append("%s-%s=%s" % (pkg, branch, dv))
        cu = d.get("compute_utils", "same")
        if cu == "same":
            out.append("nvidia-compute-utils-%s=%s" % (branch, dv))
        elif cu != "none":
            if cu not in catalog_versions["driver_versions"]:
                raise LabError("node %s: compute_utils %s is not in the package catalog" % (node["name"], cu))
            out.append("nvidia-compute-utils-%s=%s" % (branch, deb_version(cu)))
        if d.get("modprobe", True):
            out.append("nvidia-modprobe=%s" % dv)
    fm = d.get("fabric_manager")
    if fm:
        # nvidia-fabricmanager-B at the driver's version ("same") or at another one (a node
        # whose fabric manager does not match its driver: the daemon refuses to start)
        fm = version if fm == "same" else str(fm)
        if not fm or fm not in catalog_versions["driver_versions"]:
            raise LabError("node %s: fabric_manager %s is not a driver version of lab/packages/catalog.yml"
                           % (node["name"], fm or "same (the node has no driver)"))
        out.append("nvidia-fabricmanager-%s=%s" % (fm.split(".")[0], deb_version(fm)))
    tk = d.get("container_toolkit")
    if tk:
        if tk not in catalog_versions["container_toolkit_versions"]:
            raise LabError("node %s: container_toolkit %s is not in the package catalog" % (node["name"], tk))
        tv = toolkit_deb_version(tk)
        out += ["nvidia-container-toolkit=%s" % tv, "nvidia-container-toolkit-base=%s" % tv]
    return out


def pod_objects(node, spec, default_ns="default"):
    """A profile pod entry -> the objects to create: [ReplicaSet, Pod] (the pod owned by the
    ReplicaSet, as a Deployment's pod is, so drains need no --force) or [Pod] with
    ``controller: none`` or a full manifest."""
    pod = pod_manifest(node, spec, default_ns)
    if "apiVersion" in spec or spec.get("controller", "replicaset") == "none":
        return [pod]
    md = pod["metadata"]
    rs_uid = str(uuid.uuid5(uuid.NAMESPACE_URL, "kubegpu-lab/%s/%s/%s" % (node["name"], md["namespace"], md["name"])))
    md["labels"]["kubegpu.io/workload"] = md["name"]
    rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet",
          "metadata": {"name": md["name"], "namespace": md["namespace"], "uid": rs_uid,
                       "labels": dict(md["labels"])},
          "spec": {"replicas": 1, "selector": {"matchLabels": {"kubegpu.io/workload": md["name"]}},
                   "template": {"metadata": {"labels": dict(md["labels"])},
                                "spec": {k: v for k, v in pod["spec"].items() if k != "nodeName"}}}}
    md["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": md["name"],
                              "uid": rs_uid, "controller": True, "blockOwnerDeletion": True}]
    return [rs, pod]


def pod_manifest(node, spec, default_ns="default"):
    """A short pod entry of a profile (or a full manifest) -> a Pod bound to the node."""
    if "apiVersion" in spec:
        pod = copy.deepcopy(spec)
        pod.setdefault("spec", {})["nodeName"] = node["name"]
        return pod
    name = spec.get("name")
    if not name:
        raise LabError("node %s: a pod entry needs a name" % node["name"])
    name = name.replace("{node}", node["name"])
    resources = {}
    gpus = spec.get("gpus", 0)
    if gpus:
        resources = {"limits": {spec.get("resource", "nvidia.com/gpu"): str(gpus)}}
    container = {"name": spec.get("container", "main"),
                 "image": spec.get("image", "nvcr.io/nvidia/cuda:12.8.1-base-ubuntu22.04" if gpus
                                   else "registry.k8s.io/pause:3.10"),
                 "resources": resources}
    if spec.get("cpu") or spec.get("memory_request"):
        req = {}
        if spec.get("cpu"):
            req["cpu"] = str(spec["cpu"])
        if spec.get("memory_request"):
            req["memory"] = str(spec["memory_request"])
        container["resources"] = deep_merge(container["resources"], {"requests": req, "limits": req})
    labels = dict(spec.get("labels") or {})
    labels.setdefault("app", spec.get("app", name))
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": spec.get("namespace", default_ns), "labels": labels},
           "spec": {"nodeName": node["name"], "containers": [container],
                    "terminationGracePeriodSeconds": spec.get("grace", 5),
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}}
    return pod
