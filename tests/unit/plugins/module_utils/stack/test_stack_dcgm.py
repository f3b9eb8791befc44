"""DCGM's host package in the node stack facts, read through the real dpkg-query over a dpkg
database written here, and evaluated against the bundled catalog (security.dcgm)."""
import os
import shutil

import pytest

from ansible_collections.kubegpu.fleet.plugins.module_utils.driver.packages import parse_rpm_query
from ansible_collections.kubegpu.fleet.plugins.module_utils.stack import facts as ns
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.catalog import load as catalog_load
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.rules import catalog as fs

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..", ".."))
CATALOG = catalog_load.load_catalog(os.path.join(ROOT, "catalog", "v2"))
STANZA = ("Package: {name}\nStatus: install ok installed\nPriority: optional\nSection: utils\n"
          "Maintainer: NVIDIA CORPORATION <cudatools@nvidia.com>\nArchitecture: amd64\nVersion: {version}\n"
          "Description: {name}\n\n")


def test_dcgm_package_names_and_versions():
    pkgs = [{"name": "datacenter-gpu-manager-4-core", "version": "1:4.5.2-1", "installed": True},
            {"name": "datacenter-gpu-manager-4-cuda12", "version": "1:4.5.2-1", "installed": True},
            {"name": "datacenter-gpu-manager", "version": "1:3.3.9", "installed": False},
            {"name": "datacenter-gpu-manager-exporter", "version": "4.8.1-1", "installed": False}]
    assert ns.dcgm_package(pkgs) == {"installed": True, "package": "datacenter-gpu-manager-4-core",
                                     "version": "4.5.2"}
    rpm = parse_rpm_query("datacenter-gpu-manager\t1:3.3.9-1\tii \tx86_64\n")
    assert ns.dcgm_package(rpm) == {"installed": True, "package": "datacenter-gpu-manager", "version": "3.3.9"}
    assert ns.dcgm_package([{"name": "nvidia-dcgm-lookalike", "version": "9.9.9", "installed": True}])["installed"] \
        is False


@pytest.mark.skipif(not shutil.which("dpkg-query"), reason="needs dpkg-query")
def test_stack_facts_read_dcgm_and_the_audit_reports_it(tmp_path):
    root = tmp_path / "host"
    os.makedirs(str(root / "var" / "lib" / "dpkg"))
    (root / "var" / "lib" / "dpkg" / "status").write_text("".join(STANZA.format(name=n, version=v) for n, v in (
        ("datacenter-gpu-manager-4-core", "1:4.5.2-1"), ("nvidia-container-toolkit", "1.17.8-1"))))
    for d in ("sys", "dev", "proc"):
        os.makedirs(str(tmp_path / d))
    warnings = []
    res = ns.stack_facts_run({"root": str(root), "sys_path": str(tmp_path / "sys"), "dev_path": str(tmp_path / "dev"),
                              "proc_path": str(tmp_path / "proc"), "service_state": False}, shutil.which,
                             warnings.append)
    stack = res["ansible_facts"]["nvidia_stack"]
    assert stack["dcgm"] == {"installed": True, "package": "datacenter-gpu-manager-4-core", "version": "4.5.2"}
    # the host package wins over the DCGM an exporter image bundles (API view)
    ctx = {"catalog": CATALOG, "stack": stack, "api": {"components": {"dcgm": {"version": "4.5.3"}}}}
    found = [f for f in fs.rule_catalog(ctx) if f["id"] == "security.dcgm"]
    assert len(found) == 1 and found[0]["evidence"]["version"] == "4.5.2"
    assert found[0]["evidence"]["cves"] == ["CVE-2026-47483"]
    stack["dcgm"]["version"] = "4.5.3"
    assert not [f for f in fs.rule_catalog(dict(ctx, stack=stack)) if f["id"] == "security.dcgm"]
