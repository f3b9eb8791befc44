"""Remediation of the issue-14 findings (security.*, defect.*, fabricmanager.version_mismatch) and
the toolkit fix decision (plugins/plugin_utils/remediation/toolkit.py), over the bundled catalog v2 and
findings produced by the real rules (findings.evaluate_node)."""
import os

import pytest

from ansible_collections.kubegpu.fleet.plugins.module_utils.catalog import evaluate as catalog_evaluate
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.catalog import load as catalog_load
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit import evaluate as fd
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.finding_types import TYPES
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.remediation import toolkit as tf
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.remediation.plan import plan_node

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..", ".."))
CATALOG = catalog_load.load_catalog(os.path.join(ROOT, "catalog", "v2"))
H100 = "NVIDIA H100 80GB HBM3"


def ctx(driver="570.172.08", toolkit="1.17.8", mode="legacy", fm=None, nvswitch=False):
    return {
        "nvidia": {"present": True, "driver_version": driver, "kernel_module_version": driver, "mig_mixed": False,
                   "probe": {"status": "ok", "backend": "nvml"},
                   "gpus": [{"index": 0, "name": H100, "mig_mode": {"current": "disabled"}}]},
        "stack": {
            "container_toolkit": {"installed": True, "version": toolkit,
                                  "packages": {"nvidia-container-toolkit": "%s-1" % toolkit},
                                  "injection_mode": mode, "runtime": "runc",
                                  "cdi_specs": ["/etc/cdi/nvidia.yaml"] if mode == "cdi" else [],
                                  "cuda_compat_hook_disabled": False},
            "fabric_manager": {"installed": fm is not None, "package": "nvidia-fabricmanager-570" if fm else None,
                               "version": fm, "service": {"active": "failed", "enabled": "enabled"}},
            "nvswitch": {"present": nvswitch, "count": 4 if nvswitch else 0, "bus_ids": []},
            "kernel_modules": "open"},
        "api": {"components": {}},
        "catalog": CATALOG,
    }


def highest(versions):
    return max((v for v in versions if v), key=lambda v: tuple(int(x) for x in v.split(".")))


def audit(c):
    return {"node": "n", "status": "audited", "findings": fd.evaluate_node(c)}


def finding(c, fid):
    found = [f for f in audit(c)["findings"] if f["id"] == fid]
    assert found, [f["id"] for f in audit(c)["findings"]]
    return found[0]


def test_every_stack_finding_is_routed_or_left_for_a_person():
    stack = [fid for fid in TYPES if fid.startswith(("security.", "defect.", "fabricmanager."))]
    assert stack and all(TYPES[fid].automatic or TYPES[fid].manual for fid in stack)
    assert TYPES["security.driver"].drain and TYPES["security.fabric-manager"].drain \
        and not TYPES["fabricmanager.version_mismatch"].drain


def test_toolkit_finding_plans_the_upgrade_and_the_mitigation():
    f = finding(ctx(toolkit="1.17.7"), "security.container-toolkit")
    defect = finding(ctx(toolkit="1.17.7"), "defect.container-toolkit")  # 1.17.7 cuda-compat-mode defect
    plan = plan_node(audit(ctx(toolkit="1.17.7")), skip_findings=("security.driver",))
    # one plan for both findings
    assert "ctk-1.17.7-cuda-compat-mode-default" in [a["id"] for a in defect["evidence"]["advisories"]]
    fix = plan["roles"]["device_plugin"]["kubegpu_toolkit_fix"]
    assert fix["target"] == highest(a["fixed"] for a in f["evidence"]["advisories"]) and fix["version"] == "1.17.7"
    assert fix["target"] != "1.17.7" and "1.17.8" in [a["fixed"] for a in f["evidence"]["advisories"]]
    assert fix["packages"] == ["nvidia-container-toolkit", "nvidia-container-toolkit-base",
                               "libnvidia-container-tools", "libnvidia-container1"]
    assert fix["mitigations"] == {"features.disable-cuda-compat-lib-hook": True}
    assert "ctk-cve-2025-23266" in fix["advisories"] and f["id"] in plan["findings"]
    assert "ctk-1.17.7-cuda-compat-mode-default" in fix["advisories"]
    # CVE-2025-23267 (update-ldcache hook) has no configuration mitigation
    assert [u["id"] for u in fix["unmitigated"] if "CVE-2025-23267" in u["cves"]]
    assert plan["drain"] is False and plan["reboot"] is False


def test_toolkit_before_the_compat_hook_cannot_be_mitigated_by_the_flag():
    f = finding(ctx(toolkit="1.16.1", mode="legacy"), "security.container-toolkit")
    fix = tf.fix_plan(f["evidence"]["advisories"], f["evidence"]["version"], injection_mode="legacy")
    # the highest fix among every matching advisory
    assert fix["target"] == highest(a["fixed"] for a in f["evidence"]["advisories"])
    assert fix["mitigations"] == {}
    by = dict((u["id"], u["reason"]) for u in fix["unmitigated"])
    assert "CDI mode" in by["ctk-cve-2024-0132"]


def test_toolkit_fix_plan_from_catalog_matches_and_pins():
    res = catalog_evaluate.evaluate(CATALOG, "container-toolkit", "1.17.6", {"injection_mode": "cdi", "runtime": "runc"})
    sec = [m for m in res["matches"] if m["kind"] == "security"]
    fix = tf.fix_plan(sec, "1.17.6", injection_mode="cdi")
    assert fix["target"] == highest(m["fixed"] for m in sec) and fix["mitigations"] == {}
    assert any("CDI mode" in u["reason"] and "CVE-2025-23266" in u["cves"] for u in fix["unmitigated"])
    assert tf.fix_plan(sec, "1.17.6", pinned_target="9.0.0")["target"] == "9.0.0"
    with pytest.raises(tf.FixError, match=r"kubegpu_toolkit_target 1\.17\.7 is below %s" % fix["target"]):
        tf.fix_plan(sec, "1.17.6", pinned_target="1.17.7")
    # only the compat-hook advisory of a 1.17.5 legacy node: the flag mitigates it
    hook = [m for m in sec if m["id"] == "ctk-cve-2025-23266"]
    assert tf.fix_plan(hook, "1.17.5", injection_mode="legacy")["mitigations"] == {
        "features.disable-cuda-compat-lib-hook": True}
    assert tf.fix_plan(hook, "1.17.4", injection_mode="legacy")["mitigations"] == {}
    with pytest.raises(tf.FixError, match=r"installed toolkit version 'x\.y' is not a toolkit version"):
        tf.fix_plan(sec, "x.y")
    assert tf.fix_plan([], "1.17.8")["target"] is None


def test_driver_security_finding_targets_the_branch_fix():
    c = ctx(driver="570.158.01", toolkit="1.17.8")
    f = finding(c, "security.driver")
    plan = plan_node(audit(c))
    want = max((a["fixed"] for a in f["evidence"]["advisories"] if a["fixed"] and a["fixed"].startswith("570.")),
               key=lambda v: tuple(int(x) for x in v.split(".")))
    assert plan["roles"]["driver"]["kubegpu_driver_version"] == want
    assert plan["drain"] and plan["reboot"]


def test_fabric_manager_mismatch_runs_the_driver_role_without_a_reboot():
    c = ctx(driver="570.172.08", fm="570.158.01", nvswitch=True)
    plan = plan_node(audit(c), skip_findings=("security.driver", "security.container-toolkit"))
    assert "fabricmanager.version_mismatch" in plan["findings"]
    assert plan["roles"]["driver"] == {"kubegpu_driver_version": "570.172.08"}
    assert "kubegpu_toolkit_fix" not in plan["roles"].get("device_plugin", {})
    assert plan["reboot"] is False and plan["drain"] is False
    # with the driver's own security fix due, the driver (and fabric manager with it) goes to the fix
    both = plan_node(audit(c), skip_findings=("security.container-toolkit",))
    fix = finding(c, "security.driver")
    assert both["roles"]["driver"]["kubegpu_driver_version"] == highest(
        a["fixed"] for a in fix["evidence"]["advisories"] if a["fixed"].startswith("570."))
    assert both["reboot"] and both["drain"]
