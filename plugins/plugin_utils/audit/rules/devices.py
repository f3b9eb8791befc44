# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Audit rules of GPU device access in containers: static CPU manager with a device plugin that
does not pass device specs, /dev/char symlinks, /dev/nvidia-uvm, and device cgroups of GPU containers."""
from __future__ import annotations

from ansible_collections.kubegpu.fleet.plugins.module_utils._common.versions import DevicePluginVersion
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.fields import as_dict as _d, dict_items as _l, nested as _g
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.finding_types import REF_CPUMGR, REF_UVM, finding


MIN_PLUGIN_FOR_DEVICE_SPECS = DevicePluginVersion("1.0.0-beta5")


def _truthy_env(value):
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def plugin_version(image):
    """``nvcr.io/nvidia/k8s-device-plugin:v0.17.0`` -> DevicePluginVersion or None (digest, latest)."""
    if not isinstance(image, str) or ":" not in image.rsplit("/", 1)[-1]:
        return None
    tag = image.rsplit(":", 1)[1].split("@", 1)[0]
    try:
        return DevicePluginVersion(tag)
    except ValueError:
        return None


def rule_cpumanager(ctx):
    kl = _d(ctx.get("kubelet"))
    dp = _d(_g(ctx, "api", "device_plugin"))
    out = []
    if kl.get("cpu_manager_policy") == "static" and dp:
        version = plugin_version(dp.get("image"))
        pass_specs = _truthy_env(dp.get("pass_device_specs"))
        too_old = version is not None and version < MIN_PLUGIN_FOR_DEVICE_SPECS
        if too_old or not pass_specs:
            out.append(finding("cpumanager.device_specs", {
                "cpu_manager_policy": "static", "device_plugin_image": dp.get("image"),
                "device_plugin_version": version.text if version else None,
                "PASS_DEVICE_SPECS": dp.get("pass_device_specs"), "plugin_older_than_1.0.0-beta5": too_old,
                "daemonset": dp.get("daemonset"),
            }, remediation={"summary": "set PASS_DEVICE_SPECS=true on the device plugin DaemonSet (and upgrade it "
                                       "to >= 1.0.0-beta5), then restart its pod on this node",
                            "vars": {"kubegpu_device_plugin_pass_device_specs": True}}))
    nv = _d(ctx.get("nvidia"))
    if kl.get("cgroup_driver") == "systemd" and nv.get("present"):
        missing = [n.get("path") for n in _l(nv.get("device_nodes"))
                   if n.get("exists") and n.get("dev_char_link") is not None and not n.get("dev_char_link")]
        if missing:
            out.append(finding("devchar.symlinks_missing", {"cgroup_driver": "systemd", "devices": missing},
                               remediation={"summary": "nvidia-ctk system create-dev-char-symlinks --create-all "
                                                       "at boot plus the udev rule"}))
    return out


def rule_uvm(ctx):
    nv = _d(ctx.get("nvidia"))
    if not nv.get("present"):
        return []
    nodes = dict((n.get("name"), n) for n in _l(nv.get("device_nodes")) if isinstance(n.get("name"), str))
    uvm = _d(nodes.get("nvidia-uvm"))
    loaded = _g(nv, "kernel_modules", "nvidia_uvm")
    if isinstance(loaded, dict):
        loaded = loaded.get("loaded")
    if uvm.get("exists") and loaded is not False:
        return []
    return [finding("uvm.node_missing", {"dev_nvidia_uvm_exists": bool(uvm.get("exists")),
                                         "nvidia_uvm_loaded": loaded},
                    remediation={"summary": "load nvidia_uvm and create control device nodes at boot before "
                                            "kubelet (nvidia-modprobe -u -c=0), restart the device plugin pod"})]


def rule_cgroups(ctx):
    cg = _d(ctx.get("cgroups"))
    pods = dict((p.get("uid"), p) for p in _l(_g(ctx, "api", "pods", default=[]))
                if isinstance(p.get("uid"), str))
    broken, tools = [], []
    for c in _l(cg.get("containers")):
        if not c.get("gpu"):
            continue
        pod = pods.get(c.get("pod_uid")) if isinstance(c.get("pod_uid"), str) else None
        label = "%s/%s" % (pod.get("namespace"), pod.get("name")) if pod else c.get("pod_uid")
        missing = _l(c.get("missing"))
        required_missing = [m.get("name") for m in missing if m.get("required")]
        if required_missing:
            broken.append({"pod": label, "container_id": c.get("container_id"), "missing": required_missing})
        elif missing:
            tools.append({"pod": label, "container_id": c.get("container_id")})
    out = []
    if broken:
        uvm_only = all(b["missing"] == ["nvidia-uvm"] for b in broken)
        out.append(finding("cgroup.devices_missing", {"containers": broken, "count": len(broken)},
                           remediation={"summary": ("restart the device plugin pod after nvidia_uvm is loaded, then "
                                                    "recreate the affected GPU pods") if uvm_only else
                                        ("set PASS_DEVICE_SPECS=true on the device plugin and recreate the "
                                         "affected GPU pods"),
                                        "vars": {"kubegpu_device_plugin_recreate_broken_pods": True}},
                           references=REF_UVM if uvm_only else REF_CPUMGR))
    if tools:
        out.append(finding("cgroup.uvm_tools_missing", {"containers": tools},
                           remediation={"summary": "usually harmless (profilers need it); restart the device "
                                                   "plugin pod"}))
    return out
