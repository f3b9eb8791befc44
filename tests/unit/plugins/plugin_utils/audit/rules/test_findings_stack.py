"""Catalog v2 findings (security.*, defect.*, fabricmanager.version_mismatch) over the bundled
catalog and real-shaped node facts: one test per finding class, not per entry."""
import os

import pytest

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.catalog import load as catalog_load
from ansible_collections.kubegpu.fleet.plugins.module_utils.catalog import validate as catalog_validate
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit import evaluate as fd
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.finding_types import TYPES
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.rules import catalog as fs

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..", "..", ".."))
CATALOG = catalog_load.load_catalog(os.path.join(ROOT, "catalog", "v2"))
H100 = "NVIDIA H100 80GB HBM3"


def node(driver="570.172.08", toolkit="1.17.8", mode="legacy", runtime="runc", fm=None, nvswitch=False,
         components=None, kernel_modules="open", catalog="bundled", hook_disabled=False):
    """A node context shaped like audit_node's: gpu_facts' nvidia, stack_facts' nvidia_stack."""
    if catalog == "bundled":
        catalog = CATALOG
    ctx = {
        "nvidia": {"present": True, "driver_version": driver, "mig_mixed": False,
                   "gpus": [{"index": i, "name": H100, "mig_mode": {"current": "disabled"}} for i in range(8)]},
        "stack": {
            "container_toolkit": {"installed": toolkit is not None, "version": toolkit,
                                  "packages": {"nvidia-container-toolkit": "%s-1" % toolkit} if toolkit else {},
                                  "injection_mode": mode if toolkit else None, "runtime": runtime,
                                  "cdi_specs": ["/etc/cdi/nvidia.yaml"] if mode == "cdi" else [],
                                  "cuda_compat_hook_disabled": hook_disabled},
            "fabric_manager": {"installed": fm is not None, "package": "nvidia-fabricmanager-570" if fm else None,
                               "version": fm, "service": {"active": "failed", "enabled": "enabled"}},
            "nvswitch": {"present": nvswitch, "count": 4 if nvswitch else 0,
                         "bus_ids": ["0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0"] if nvswitch else []},
            "kernel_modules": kernel_modules},
        "api": {"components": components or {}},
    }
    if catalog is not None:
        ctx["catalog"] = catalog
    return ctx


def by_id(found):
    return dict((f["id"], f) for f in found)


def advisories(f):
    return dict((a["id"], a) for a in f["evidence"]["advisories"])


def test_security_toolkit_legacy_vulnerable():
    found = by_id(fs.rule_catalog(node(toolkit="1.17.7", mode="legacy", hook_disabled=True)))
    f = found["security.container-toolkit"]
    assert f["severity"] == "critical"
    assert f["evidence"]["component"] == "container-toolkit" and f["evidence"]["version"] == "1.17.7"
    assert "CVE-2025-23266" in f["evidence"]["cves"] and f["evidence"]["cves"] == sorted(f["evidence"]["cves"])
    assert f["evidence"]["max_cvss"] == 9.0
    adv = advisories(f)["ctk-cve-2025-23266"]
    assert adv["status"] == "affected" and adv["fixed"] == "1.17.8" and adv["severity"] == "critical"
    assert any("product-security" in s for s in adv["sources"])
    assert f["remediation"]["fixed"]["ctk-cve-2025-23266"] == "1.17.8"
    assert f["remediation"]["role"] == "kubegpu.fleet.device_plugin"
    # the highest first-fixed version over every matching advisory is the target
    assert "1.19.1 or later" in f["remediation"]["summary"]
    assert "ctk-cve-2025-23266" in f["evidence"]["mitigations"]
    assert f["evidence"]["cuda_compat_hook_disabled"] is True


def test_security_toolkit_cdi_not_applicable():
    """CVE-2024-0132/0133 do not affect CDI mode (bulletin 5582): not listed on a CDI node,
    listed on the same version in legacy mode."""
    legacy = advisories(by_id(fs.rule_catalog(node(toolkit="1.16.1", mode="legacy")))["security.container-toolkit"])
    cdi = advisories(by_id(fs.rule_catalog(node(toolkit="1.16.1", mode="cdi")))["security.container-toolkit"])
    assert {"ctk-cve-2024-0132", "ctk-cve-2024-0133"} <= set(legacy)
    assert not {"ctk-cve-2024-0132", "ctk-cve-2024-0133", "ctk-cve-2025-23359"} & set(cdi)
    assert "ctk-cve-2024-0134" in cdi  # no condition: affects both modes


def test_security_toolkit_crun_not_applicable():
    """CVE-2025-23266 does not affect crun as the low-level runtime."""
    adv = advisories(by_id(fs.rule_catalog(node(toolkit="1.17.7", runtime="crun")))["security.container-toolkit"])
    assert "ctk-cve-2025-23266" not in adv
    assert "ctk-cve-2026-24260" in adv


def test_possibly_affected_one_step_lower():
    """Injection mode unknown: CVE-2024-0132 (critical) is possibly_affected and, alone, gives a
    warning; the unknown condition is named."""
    only = [e for e in CATALOG if e["id"] == "ctk-cve-2024-0132"]
    f = by_id(fs.rule_catalog(node(toolkit="1.16.1", mode=None, catalog=only)))["security.container-toolkit"]
    adv = advisories(f)["ctk-cve-2024-0132"]
    assert adv["status"] == "possibly_affected"
    assert adv["unknown_conditions"] == ["injection_mode unknown"]
    assert f["severity"] == "warning"
    f2 = by_id(fs.rule_catalog(node(toolkit="1.16.1", mode="legacy", catalog=only)))["security.container-toolkit"]
    assert f2["severity"] == "critical"


def test_fixed_toolkit_no_finding():
    assert "security.container-toolkit" not in by_id(fs.rule_catalog(node(toolkit="1.19.1")))


def test_security_driver():
    f = by_id(fs.rule_catalog(node(driver="570.172.08")))["security.driver"]
    assert f["severity"] == "critical"
    assert f["remediation"]["role"] == "kubegpu.fleet.driver"
    assert "570.211.01" in f["remediation"]["summary"]
    assert all(a["fixed"].startswith("570.") for a in f["evidence"]["advisories"])
    # driver defects stay driver_guard's: no defect.driver
    assert not any(x["id"].startswith("defect.driver") for x in fs.rule_catalog(node(driver="570.158.01")))


@pytest.mark.parametrize("component,info,cve", [
    ("device-plugin", {"version": "v0.17.2", "device_list_strategy": ["cdi-cri"], "mig_strategy": "single"},
     "CVE-2025-23266"),
    ("gpu-operator", {"version": "v25.3.0", "cdi_enabled": True}, "CVE-2025-23266"),
    ("mig-manager", {"version": "v0.12.1"}, "CVE-2025-23267"),
])
def test_security_api_components(component, info, cve):
    comps = {component: info}
    if component == "mig-manager":
        comps["gpu-operator"] = {"version": "v25.10.1", "cdi_enabled": True}
    f = by_id(fs.rule_catalog(node(components=comps)))["security.%s" % component]
    assert cve in f["evidence"]["cves"]
    assert f["evidence"]["component"] == component


def test_device_plugin_envvar_strategy_not_applicable():
    plugin = {"version": "v0.17.2", "device_list_strategy": "envvar"}
    found = by_id(fs.rule_catalog(node(components={"device-plugin": plugin})))
    assert "security.device-plugin" not in found


def test_defect_component():
    f = by_id(fs.rule_catalog(node(toolkit="1.17.7")))["defect.container-toolkit"]
    assert list(advisories(f)) == ["ctk-1.17.7-cuda-compat-mode-default"]
    assert f["severity"] == "warning"  # catalog medium
    assert f["evidence"]["cves"] == [] and f["evidence"]["max_cvss"] is None


def test_security_fabric_manager_from_extra_entry():
    """The bundled catalog has no fabric manager advisory yet; a site entry (catalog_extra
    shape) with a kernel-module condition produces security.fabric-manager."""
    extra = {"schema_version": 2, "component": "fabric-manager", "version_scheme": "driver", "entries": [{
        "id": "site-fm-test", "kind": "security", "title": "test advisory",
        "cves": [{"id": "CVE-2099-0001", "cvss": {"version": "3.1", "base_score": 7.1,
                                                  "vector": "CVSS:3.1/AV:L/AC:L/PR:L/UI:N/S:U/C:H/I:N/A:H"}}],
        "severity": "high", "affected": [{"branch": "570", "fixed": "570.195.03"}],
        "conditions": {"kernel_modules": ["open"]},
        "remediation": "upgrade", "advisory": {"publisher": "t", "id": "1", "revision": "1.0", "date": "2026-11-23"},
        "sources": [{"url": "https://example.com/a", "verified": "2026-11-23"}]}]}
    cat = catalog_validate.validate_catalog([extra])
    found = by_id(fs.rule_catalog(node(fm="570.172.08", catalog=cat)))
    assert found["security.fabric-manager"]["severity"] == "critical"
    assert found["security.fabric-manager"]["evidence"]["cves"] == ["CVE-2099-0001"]
    unknown = by_id(fs.rule_catalog(node(fm="570.172.08", kernel_modules=None, catalog=cat)))
    assert unknown["security.fabric-manager"]["severity"] == "warning"
    assert "security.fabric-manager" not in by_id(fs.rule_catalog(node(fm="570.172.08", kernel_modules="proprietary",
                                                                       catalog=cat)))


def test_fabricmanager_version_mismatch():
    ctx = node(driver="570.172.08", fm="570.158.01", nvswitch=True)
    found = by_id(fs.rule_fabricmanager(ctx))
    f = found["fabricmanager.version_mismatch"]
    assert f["severity"] == "critical"
    assert f["evidence"]["driver_version"] == "570.172.08"
    assert f["evidence"]["fabric_manager_version"] == "570.158.01"
    assert f["evidence"]["nvswitch_count"] == 4
    assert f["evidence"]["catalog_entries"] == ["fabric-manager-driver-version-mismatch"]
    assert "https://github.com/NVIDIA/gpu-operator/issues/544" in f["references"]
    # not reported twice through the catalog rule
    assert "defect.fabric-manager" not in by_id(fs.rule_catalog(ctx))


@pytest.mark.parametrize("kw", [
    dict(fm="570.172.08", nvswitch=True),          # versions match
    dict(fm="570.158.01", nvswitch=False),         # no NVSwitch: the fabric manager is not used
    dict(fm=None, nvswitch=True),                  # not installed: version unknown
])
def test_fabricmanager_no_mismatch(kw):
    assert fs.rule_fabricmanager(node(driver="570.172.08", **kw)) == []


def test_fabricmanager_package_revision_ignored():
    assert fs.rule_fabricmanager(node(driver="570.172.08", fm="570.172.08-1", nvswitch=True)) == []


def test_no_catalog_no_findings():
    ctx = node(toolkit="1.17.7", fm="570.158.01", nvswitch=True, catalog=None)
    assert fs.rule_catalog(ctx) == [] and fs.rule_fabricmanager(ctx) == []
    ids = [f["id"] for f in fd.evaluate_node(ctx)]
    assert not [i for i in ids if i.startswith(("security.", "defect.", "fabricmanager."))]


def test_evaluate_node_wires_rules():
    ids = [f["id"] for f in fd.evaluate_node(node(toolkit="1.17.7", fm="570.158.01", nvswitch=True))]
    assert {"security.driver", "security.container-toolkit", "defect.container-toolkit",
            "fabricmanager.version_mismatch"} <= set(ids)
    for fid in ids:
        assert fid in TYPES


def test_malformed_stack_does_not_raise():
    ctx = node()
    ctx["stack"] = {"container_toolkit": "garbage", "fabric_manager": [1], "nvswitch": None}
    ctx["api"] = {"components": {"device-plugin": {"version": "not-a-version"}}}
    found = fs.rule_catalog(ctx) + fs.rule_fabricmanager(ctx)
    assert [f["id"] for f in found] == ["security.driver", "driver.unlisted_branch"]


def test_condition_facts_from_node():
    facts = fs.condition_facts(node(toolkit="1.17.7", fm="570.158.01", nvswitch=True, components={
        "device-plugin": {"version": "v0.17.2", "mig_strategy": "mixed", "device_list_strategy": "envvar,cdi-cri"},
        "gpu-operator": {"version": "v25.3.0", "cdi_enabled": False}}))
    assert facts == {"mig_enabled": False, "mig_mixed": False, "gpu_model": [H100], "injection_mode": "legacy",
                     "runtime": "runc", "nvswitch": True, "kernel_modules": "open",
                     "fabric_manager_matches_driver": False, "mig_strategy": "mixed",
                     "device_list_strategy": ["envvar", "cdi-cri"], "cdi_enabled": False}
