# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Audit rules over the known-bad catalog v2 (controller side, pure functions).

:func:`rule_catalog` evaluates every NVIDIA component whose version the node (``ctx["nvidia"]``,
``ctx["stack"]``: the ``nvidia_stack`` facts of kubegpu.fleet.stack_facts) or its view from the
Kubernetes API (``ctx["api"]["components"]``) knows against ``ctx["catalog"]`` (the entries of
``plugin_utils/catalog/load.py``), with condition facts built from the node. It returns one
``security.<component>`` finding per component with security matches and one
``defect.<component>`` finding per component other than the driver with defect matches (driver
defects stay ``driver.known_bad``/``driver.at_risk`` from driver_guard).
:func:`rule_fabricmanager` returns ``fabricmanager.version_mismatch`` for an NVSwitch node whose
fabric manager version is not the driver's.

Severity: catalog critical/high -> critical, medium -> warning, low/info -> info; a
``possibly_affected`` match (a condition fact unknown) one step lower. A missing catalog makes
both rules return nothing.
"""
from __future__ import annotations

from ansible_collections.kubegpu.fleet.plugins.module_utils.catalog import evaluate as catalog_evaluate
from ansible_collections.kubegpu.fleet.plugins.module_utils.catalog import validate as catalog_validate
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.fields import as_dict as _d, dict_items as _l, nonblank as _str
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.finding_types import TYPES, finding
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.catalog import csaf

COMPONENTS = ("driver", "container-toolkit", "fabric-manager", "device-plugin", "gpu-operator", "mig-manager",
              "dcgm", "dcgm-exporter")
API_COMPONENTS = ("device-plugin", "mig-manager", "gpu-operator", "dcgm", "dcgm-exporter")

# The finding ids per component (rows of finding_types.TYPES; the instance severity comes from the matches).
SECURITY_IDS = {"driver": "security.driver", "container-toolkit": "security.container-toolkit",
                "fabric-manager": "security.fabric-manager", "device-plugin": "security.device-plugin",
                "gpu-operator": "security.gpu-operator", "mig-manager": "security.mig-manager",
                "dcgm": "security.dcgm", "dcgm-exporter": "security.dcgm-exporter"}
DEFECT_IDS = {"container-toolkit": "defect.container-toolkit", "fabric-manager": "defect.fabric-manager",
              "device-plugin": "defect.device-plugin", "gpu-operator": "defect.gpu-operator",
              "mig-manager": "defect.mig-manager", "dcgm": "defect.dcgm", "dcgm-exporter": "defect.dcgm-exporter"}
# The advice every NVIDIA GPU Display Driver bulletin gives under its table (e.g. 5821, 5861,
# "Bulletin Notes"), quoted in the driver.unlisted_branch finding with the bulletin's sources.
UNLISTED_BRANCH_ADVICE = ("The table above might not be a comprehensive list of all affected supported versions or "
                          "branch releases and might be updated as more information becomes available. Earlier "
                          "software GPU branch releases that support these products might also be affected. If you "
                          "are using an earlier branch release for which an update version is not listed above, "
                          "upgrade to the latest branch release.")

PACKAGES = {"driver": "the NVIDIA driver", "container-toolkit": "nvidia-container-toolkit",
            "fabric-manager": "the fabric manager", "device-plugin": "the NVIDIA device plugin",
            "gpu-operator": "the GPU Operator", "mig-manager": "the MIG manager",
            "dcgm": "DCGM (datacenter-gpu-manager)", "dcgm-exporter": "the DCGM Exporter"}
SEVERITY = {"critical": "critical", "high": "critical", "medium": "warning", "low": "info", "info": "info"}
LOWER = {"critical": "warning", "warning": "info", "info": "info"}
RANK = {"critical": 0, "warning": 1, "info": 2}
# Entries whose condition is the fabric manager / driver equality: rule_fabricmanager reports
# them as fabricmanager.version_mismatch, never also as defect.fabric-manager.
MISMATCH_CONDITION = "fabric_manager_matches_driver"


def _upstream(version):
    """Package version -> upstream (``3:570.172.08-0ubuntu1`` -> ``570.172.08``)."""
    v = _str(version)
    if v is None:
        return None
    if ":" in v:
        v = v.split(":", 1)[1]
    return v.split("-", 1)[0].strip()


def driver_version(ctx):
    nv = _d(ctx.get("nvidia"))
    return _str(nv.get("driver_version")) or _str(_d(ctx.get("driver_guard")).get("driver_version"))


def fabric_manager_matches(ctx):
    """True/False when both the fabric manager and the driver version are known, else None."""
    fm = _d(_d(ctx.get("stack")).get("fabric_manager"))
    fmv, drv = _upstream(fm.get("version")) if fm.get("installed") else None, _upstream(driver_version(ctx))
    if fmv is None or drv is None:
        return None
    return fmv == drv


def condition_facts(ctx):
    """Catalog condition facts (catalog_validate.CONDITIONS) from the node and its API view; a fact
    nothing tells is left out (unknown)."""
    nv = _d(ctx.get("nvidia"))
    stack = _d(ctx.get("stack"))
    tk = _d(stack.get("container_toolkit"))
    api = _d(ctx.get("api"))
    comps = _d(api.get("components"))
    facts = {}
    gpus = _l(nv.get("gpus"))
    if isinstance(nv.get("mig_enabled"), bool):
        facts["mig_enabled"] = nv["mig_enabled"]
    elif gpus:
        facts["mig_enabled"] = any(_d(g.get("mig_mode")).get("current") == "enabled" for g in gpus)
    if isinstance(nv.get("mig_mixed"), bool):
        facts["mig_mixed"] = nv["mig_mixed"]
    if isinstance(nv.get("vgpu_guest"), bool):
        facts["vgpu_guest"] = nv["vgpu_guest"]
    names = sorted(set(g.get("name") for g in gpus if _str(g.get("name"))))
    if names:
        facts["gpu_model"] = names
    if tk.get("installed") and tk.get("injection_mode") in ("legacy", "cdi"):
        facts["injection_mode"] = tk["injection_mode"]
    if tk.get("installed") and _str(tk.get("runtime")):
        facts["runtime"] = tk["runtime"]
    nvs = _d(stack.get("nvswitch"))
    if isinstance(nvs.get("present"), bool):
        facts["nvswitch"] = nvs["present"]
    if stack.get("kernel_modules") in ("open", "proprietary"):
        facts["kernel_modules"] = stack["kernel_modules"]
    match = fabric_manager_matches(ctx)
    if match is not None:
        facts[MISMATCH_CONDITION] = match
    dp = _d(comps.get("device-plugin"))
    if _str(dp.get("mig_strategy")):
        facts["mig_strategy"] = dp["mig_strategy"]
    dls = dp.get("device_list_strategy")
    if isinstance(dls, list) and dls:
        facts["device_list_strategy"] = [s for s in dls if isinstance(s, str)]
    elif _str(dls):
        facts["device_list_strategy"] = [s.strip() for s in dls.split(",") if s.strip()]
    gop = _d(comps.get("gpu-operator"))
    if isinstance(gop.get("cdi_enabled"), bool):
        facts["cdi_enabled"] = gop["cdi_enabled"]
    if isinstance(gop.get("driver_preinstalled"), bool):
        facts["driver_preinstalled"] = gop["driver_preinstalled"]
    for key in ("container_runtime", "k8s_distribution", "os"):
        if _str(api.get(key)):
            facts[key] = api[key]
    if isinstance(api.get("rdma"), bool):
        facts["rdma"] = api["rdma"]
    return dict((k, v) for k, v in facts.items() if k in catalog_validate.CONDITIONS)


def component_versions(ctx):
    """{component: version} of every component the node or its API view knows."""
    out = {}
    drv = driver_version(ctx)
    if drv:
        out["driver"] = drv
    stack = _d(ctx.get("stack"))
    tk = _d(stack.get("container_toolkit"))
    if tk.get("installed") and _str(tk.get("version")):
        out["container-toolkit"] = tk["version"]
    fm = _d(stack.get("fabric_manager"))
    if fm.get("installed") and _str(fm.get("version")):
        out["fabric-manager"] = fm["version"]
    comps = _d(_d(ctx.get("api")).get("components"))
    for comp in API_COMPONENTS:
        v = _str(_d(comps.get(comp)).get("version"))
        if v:
            out[comp] = v
    dcgm = _d(stack.get("dcgm"))
    if dcgm.get("installed") and _str(dcgm.get("version")):
        out["dcgm"] = dcgm["version"]  # the host package runs on the node: it wins over the API view
    return out


def _severity(match):
    sev = SEVERITY.get(match.get("severity"), "warning")
    return LOWER[sev] if match.get("status") == "possibly_affected" else sev


def _advisory(m):
    return {"id": m["id"], "title": m.get("title"), "cves": list(m.get("cves") or []),
            "max_cvss": m.get("max_cvss"), "severity": m.get("severity"), "status": m.get("status"),
            "affected_range": m.get("affected_range"), "fixed": m.get("fixed"),
            "unknown_conditions": list(m.get("unknown_conditions") or []), "sources": list(m.get("sources") or [])}


def _highest_fixed(component, matches):
    scheme = catalog_validate.COMPONENT_SCHEMES[component]
    best = None
    for m in matches:
        if not m.get("fixed"):
            continue
        try:
            v = catalog_validate.parse_version(scheme, m["fixed"])
        except catalog_validate.CatalogError:
            continue
        if best is None or v > best[0]:
            best = (v, m["fixed"])
    return best[1] if best else None


def _finding(kind, component, version, matches):
    """The ``security.<component>`` (``kind`` security) or ``defect.<component>`` finding of ``matches``."""
    fid = (SECURITY_IDS if kind == "security" else DEFECT_IDS)[component]
    cves = sorted(set(c for m in matches for c in (m.get("cves") or [])))
    scores = [m["max_cvss"] for m in matches if isinstance(m.get("max_cvss"), (int, float))]
    severity = min((_severity(m) for m in matches), key=lambda s: RANK[s])
    target = _highest_fixed(component, matches)
    what = PACKAGES.get(component, component)
    if target:
        summary = "upgrade %s %s to %s or later" % (what, version, target)
    else:
        summary = "no fixed release is known for %s %s: follow the advisories' remediation" % (what, version)
    mitigations = [m["mitigation"] for m in matches if _str(m.get("mitigation"))]
    if mitigations:
        summary += "; where the upgrade is not allowed: see the advisories' mitigation"
    remediation = {"summary": summary, "fixed": dict((m["id"], m.get("fixed")) for m in matches)}
    if TYPES[fid].role:
        remediation["role"] = TYPES[fid].role_fqcn
    refs = []
    for m in matches:
        for s in m.get("sources") or []:
            if s not in refs:
                refs.append(s)
    return finding(fid, {"component": component, "version": version, "cves": cves,
                         "max_cvss": max(scores) if scores else None,
                         "advisories": [_advisory(m) for m in matches],
                         "mitigations": dict((m["id"], m["mitigation"]) for m in matches
                                             if _str(m.get("mitigation")))},
                   remediation=remediation, references=refs, severity=severity)


def _catalog(ctx):
    catalog = ctx.get("catalog")
    return catalog if isinstance(catalog, list) and catalog else None


def rule_catalog(ctx):
    """security.<component> and defect.<component> findings (see the module docstring)."""
    ctx = _d(ctx)
    catalog = _catalog(ctx)
    if catalog is None:
        return []
    facts = condition_facts(ctx)
    by_id = dict((e.get("id"), e) for e in catalog if isinstance(e, dict))
    out = []
    for component, version in sorted(component_versions(ctx).items(), key=lambda kv: COMPONENTS.index(kv[0])):
        try:
            result = catalog_evaluate.evaluate(catalog, component, version, facts)
        except catalog_validate.CatalogError:
            continue  # a version that does not parse in the component's scheme matches nothing
        security = [m for m in result["matches"] if m["kind"] == "security"]
        defects = [m for m in result["matches"] if m["kind"] == "defect" and component != "driver"
                   and MISMATCH_CONDITION not in _conditions_of(by_id.get(m["id"]))]
        norm = result["matches"][0]["version"] if result["matches"] else version
        if security:
            f = _finding("security", component, norm, security)
            if component == "container-toolkit":
                # features.disable-cuda-compat-lib-hook (bulletin 5659's mitigation for
                # CVE-2025-23266 in legacy mode; reported bypassable): evidence, not a verdict.
                f["evidence"]["cuda_compat_hook_disabled"] = _d(_d(ctx.get("stack")).get(
                    "container_toolkit")).get("cuda_compat_hook_disabled")
            out.append(f)
        if defects:
            out.append(_finding("defect", component, norm, defects))
    out.extend(rule_unlisted_branch(ctx))
    return out


# The last catalog latest_driver_bulletin read and its answer: every node's evaluation asks it of
# the same catalog (the same entry objects, loaded once per process).
_LATEST = {"catalog": None, "answer": None}


def latest_driver_bulletin(catalog):
    """The newest driver bulletin of ``catalog`` (:func:`read_latest_driver_bulletin`), worked out
    again only when the catalog is not the same entries as on the last call (the audit's action
    plugin asks once when it is imported, before ansible forks its workers: see node_audit.py)."""
    last = _LATEST["catalog"]
    if last is None or len(last) != len(catalog) or any(a is not b for a, b in zip(last, catalog)):
        _LATEST["answer"] = read_latest_driver_bulletin(catalog)
        _LATEST["catalog"] = list(catalog)
    answer = _LATEST["answer"]
    return None if answer is None else (answer[0], list(answer[1]), list(answer[2]))


def read_latest_driver_bulletin(catalog):
    """``(advisory, listed branches, sources)`` of the newest driver security bulletin in the
    catalog (latest ``advisory.date``, then id), or None when no driver entry names a dated one.
    The branches are the data-center rows' (vGPU guest-driver items left out) of that bulletin's
    own items (an entry merged from several bulletins tags each item with its bulletin)."""
    by_id = {}
    for e in catalog:
        adv = _d(_d(e).get("advisory"))
        if e.get("component") != "driver" or e.get("kind") != "security" or not _str(adv.get("date")) \
                or adv.get("id") is None:
            continue
        slot = by_id.setdefault(str(adv["id"]), {"advisory": adv, "branches": set(), "sources": []})
        for item in _l(e.get("affected")):
            branch = item.get("branch")
            if _d(item.get("conditions")).get("vgpu_guest") is True:
                continue  # a vGPU guest-driver row: the data-center branches are what the bulletin lists
            origin = csaf.ITEM_BULLETIN_RE.match(_str(item.get("note")) or "")
            if origin and origin.group(1) != str(adv["id"]):
                continue  # an item another bulletin listed (one entry per CVE, csaf.merge_advisories)
            if isinstance(branch, str) and branch.isdigit():
                slot["branches"].add(int(branch))
        for src in _l(e.get("sources")):
            if _str(src.get("url")) and src["url"] not in slot["sources"]:
                slot["sources"].append(src["url"])
    if not by_id:
        return None
    newest = max(by_id.values(), key=lambda b: (str(b["advisory"]["date"]), str(b["advisory"]["id"])))
    return newest["advisory"], sorted(newest["branches"]), newest["sources"]


def rule_unlisted_branch(ctx):
    """driver.unlisted_branch: the node's driver branch is not in NVIDIA's latest driver bulletin.

    NVIDIA lists the supported branches it evaluated and writes that earlier branches "might also
    be affected" (UNLISTED_BRANCH_ADVICE): such a node is possibly affected, an earlier branch
    than the newest listed one at ``warning``; a branch newer than every listed one (released
    after the bulletin) at ``info``. Nothing when the catalog or the driver version is unknown."""
    ctx = _d(ctx)
    catalog = _catalog(ctx)
    version = driver_version(ctx)
    if catalog is None or version is None:
        return []
    try:
        branch = catalog_validate.parse_version("driver", version).branch
    except catalog_validate.CatalogError:
        return []
    latest = latest_driver_bulletin(catalog)
    if latest is None or not latest[1] or branch in latest[1]:
        return []
    advisory, listed, sources = latest
    earlier = branch < max(listed)
    reason = ("R%d is not among the branches NVIDIA's latest driver bulletin lists; the bulletin says earlier "
              "branches might also be affected" % branch if earlier else
              "R%d is newer than every branch NVIDIA's latest driver bulletin lists (the bulletin predates it): "
              "whether the bulletin's CVEs affect it is not known" % branch)
    names = ", ".join("R%d" % b for b in listed)
    return [finding("driver.unlisted_branch", {
        "component": "driver", "version": version, "branch": branch, "status": "possibly_affected",
        "reason": reason, "listed_branches": listed,
        "bulletin": {"id": str(advisory["id"]), "title": advisory.get("title"),
                     "revision": None if advisory.get("revision") is None else str(advisory["revision"]),
                     "date": str(advisory["date"])},
        "advice": UNLISTED_BRANCH_ADVICE},
        remediation={"summary": "move to a branch the bulletin lists (%s): the latest release of that branch" % names},
        references=sources, severity="warning" if earlier else "info")]


def _conditions_of(entry):
    entry = _d(entry)
    keys = set(_d(entry.get("conditions")))
    for item in _l(entry.get("affected")):
        keys |= set(_d(item.get("conditions")))
    return keys


def rule_fabricmanager(ctx):
    """fabricmanager.version_mismatch: NVSwitches present and the fabric manager's version is
    not the driver's (both known). Cites the fabric-manager catalog entries on that condition."""
    ctx = _d(ctx)
    catalog = _catalog(ctx)
    if catalog is None:
        return []
    stack = _d(ctx.get("stack"))
    nvs = _d(stack.get("nvswitch"))
    if nvs.get("present") is not True or fabric_manager_matches(ctx) is not False:
        return []
    fm = _d(stack.get("fabric_manager"))
    entries = [e for e in catalog if isinstance(e, dict) and e.get("component") == "fabric-manager"
               and MISMATCH_CONDITION in _conditions_of(e)]
    refs = []
    for e in entries:
        for s in _l(e.get("sources")):
            if _str(s.get("url")) and s["url"] not in refs:
                refs.append(s["url"])
    drv = _upstream(driver_version(ctx))
    return [finding("fabricmanager.version_mismatch", {
        "driver_version": drv, "fabric_manager_version": _upstream(fm.get("version")),
        "fabric_manager_package": fm.get("package"), "fabric_manager_service": fm.get("service"),
        "nvswitch_count": nvs.get("count"), "nvswitch_bus_ids": nvs.get("bus_ids"),
        "catalog_entries": [e.get("id") for e in entries]},
        remediation={"summary": "install the fabric manager at exactly the driver's version %s (move "
                                "both in lockstep, hold both), then restart nvidia-fabricmanager" % drv,
                     "vars": {"kubegpu_driver_version": drv} if drv else {}},
        references=refs)]
