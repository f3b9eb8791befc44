"""The NVIDIA node stack on the lab: lab/profiles/node-stack.yml boots two HGX-like
nodes (four NVSwitches on each node's PCI tree) with toolkit 1.14.6:

* stack-legacy: the legacy hook, fabric manager 570.158.01 with driver 570.172.08;
* stack-cdi: CDI mode (mode = "cdi", /etc/cdi/nvidia.yaml), fabric manager at the driver's version.

kubegpu.fleet.stack_facts runs on both through ansible (packages from the node's dpkg database,
config.toml parsed on the controller, NVSwitches from the lab's sysfs tree); the catalog rules
then run over those facts and the bundled catalog v2: fabricmanager.version_mismatch on the
legacy node only; CVE-2024-0132 (not in CDI mode, bulletin 5582) in the legacy node's
security.container-toolkit and not applicable on the CDI node.
"""
import copy
import os
import sys
import tomllib

import pytest
import yaml

from lab_fixture import lab_factory  # noqa: F401  pylint: disable=unused-import

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROFILE_FILE = os.path.join(REPO, "lab", "profiles", "node-stack.yml")
ENV = {"ANSIBLE_PIPELINING": "1", "ANSIBLE_TIMEOUT": "30", "ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.json"}
sys.path.insert(0, os.path.join(REPO, "lab"))
sys.path.insert(0, os.path.join(REPO, "lab", "node", "lib"))
from kubegpu_lab import profiles  # noqa: E402  pylint: disable=wrong-import-position
from kubegpu_lab.util import LabError  # noqa: E402  pylint: disable=wrong-import-position
from kubegpu_lab_node import hw  # noqa: E402  pylint: disable=wrong-import-position
from lib.paths import TOOLKIT_CONFIG  # noqa: E402  pylint: disable=wrong-import-position

from ansible_collections.kubegpu.fleet.plugins.module_utils.stack import facts as nvidia_stack  # noqa: E402
from ansible_collections.kubegpu.fleet.plugins.module_utils.catalog import evaluate as catalog_evaluate  # noqa: E402
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.catalog import load as catalog_load  # noqa: E402
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.rules import catalog as catalog_rules  # noqa: E402

NVSWITCHES = ["0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0"]


# ---------------------------------------------------------------- without a lab (no root needed)

@pytest.mark.parametrize("node, message", [
    ({"nvswitch": {"count": 13}}, "nvswitch must be {count: 0..12}"),
    ({"nvswitch": {"count": True}}, "nvswitch must be {count: 0..12}"),
    ({"runtime": {"toolkit_mode": "csv"}}, "runtime.toolkit_mode must be null or one of legacy, cdi, auto, jit-cdi"),
    ({"runtime": {"cdi_spec": "yes"}}, "runtime.cdi_spec must be true or false"),
    ({"runtime": {"toolkit_mode": "cdi"}, "driver": {"container_toolkit": None}},
     "runtime.toolkit_mode and runtime.cdi_spec need driver.container_toolkit"),
])
def test_profile_stack_keys_are_validated(node, message):
    doc = {"nodes": [dict(node, name="n")]}
    with pytest.raises(LabError) as err:
        profiles.expand(copy.deepcopy(doc))
    assert message in str(err.value)


def test_toolkit_mode_edit_keeps_the_rest():
    """runtime.toolkit_mode is a TOML edit of the real packaged file (mode = "auto"): only the
    mode line changes; a file without the key or without the table gets them."""
    with open(TOOLKIT_CONFIG) as f:
        text = f.read()
    assert tomllib.loads(text)["nvidia-container-runtime"]["mode"] == "auto"
    for mode in ("legacy", "cdi"):
        want = tomllib.loads(text)
        want["nvidia-container-runtime"]["mode"] = mode
        out = profiles.toolkit_config_text(text, mode)
        assert tomllib.loads(out) == want
        assert len(out.splitlines()) == len(text.splitlines())
        assert [(a, b) for a, b in zip(text.splitlines(), out.splitlines()) if a != b] == \
            [('mode = "auto"', 'mode = "%s"' % mode)]
        without_key = profiles.toolkit_config_text(text.replace('mode = "auto"\n', ""), mode)
        assert tomllib.loads(without_key) == want
    assert tomllib.loads(profiles.toolkit_config_text("disable-require = false\n", "cdi")) == \
        {"disable-require": False, "nvidia-container-runtime": {"mode": "cdi"}}
    for bad in ("nvidia-container-runtime = 1\n", "[nvidia-container-runtime\n"):
        with pytest.raises(LabError):
            profiles.toolkit_config_text(bad, "cdi")


def test_cdi_spec_shape():
    spec = yaml.safe_load(profiles.cdi_spec_text(2))
    assert spec["kind"] == "nvidia.com/gpu"
    assert [d["name"] for d in spec["devices"]] == ["0", "1", "all"]


def test_nvswitches_on_the_lab_pci_tree(tmp_path):
    """hw.write_sysfs puts the NVSwitches on the node's bus; the probe's scan finds them (and
    the bridge is bound to nvidia-nvswitch while the module is loaded)."""
    cfg = {"gpus": [{"pci_bus_id": "00000000:18:00.0"}], "nvswitches": 4}
    hw.write_sysfs(cfg, True, root=str(tmp_path))
    facts, errors = nvidia_stack.nvswitch_facts(str(tmp_path), str(tmp_path / "nodev"))
    assert errors == []
    assert facts["present"] is True and facts["bus_ids"] == NVSWITCHES
    assert os.path.basename(os.readlink(str(tmp_path / "bus/pci/devices/0000:05:00.0/driver"))) == "nvidia-nvswitch"
    hw.write_sysfs({"gpus": cfg["gpus"]}, True, root=str(tmp_path / "plain"))
    assert nvidia_stack.nvswitch_facts(str(tmp_path / "plain"), str(tmp_path / "nodev"))[0]["present"] is False


# ---------------------------------------------------------------- on a lab

@pytest.fixture(scope="module")
def lab(lab_factory):  # noqa: F811
    with open(PROFILE_FILE) as f:
        profile = yaml.safe_load(f)
    return lab_factory(profile, name="stk%d" % (os.getpid() % 10000))


@pytest.fixture(scope="module")
def facts(lab, tmp_path_factory):
    """gpu_facts and stack_facts on both nodes, through ansible over ssh: {node: (nvidia, nvidia_stack)}."""
    from lib.ansible_runner import AnsibleRunner, ensure_collection_tree  # tests/ is on sys.path
    workdir = str(tmp_path_factory.mktemp("stackfacts"))
    runner = AnsibleRunner(REPO, ensure_collection_tree(REPO), workdir)
    play = [{"hosts": "gpu_nodes", "gather_facts": False, "tasks": [
        {"name": "gpu facts", "kubegpu.fleet.gpu_facts": {
            "proc_path": "{{ kubegpu_proc_path }}", "sys_path": "{{ kubegpu_sys_path }}", "xid": False}},
        {"name": "stack facts", "kubegpu.fleet.stack_facts": {
            "proc_path": "{{ kubegpu_proc_path }}", "sys_path": "{{ kubegpu_sys_path }}"}}]}]
    res = runner.playbook(play, inventory=lab.inventory, env=dict(ENV, TMPDIR=workdir), timeout=600)
    assert res.rc == 0, res.stdout[-4000:] + res.stderr[-2000:]
    out = {}
    for node in ("stack-legacy", "stack-cdi"):
        gpu = res.task("gpu facts", host=node)
        stack = res.task("stack facts", host=node)
        assert not stack.get("failed"), stack
        out[node] = (gpu["ansible_facts"]["nvidia"], stack["ansible_facts"]["nvidia_stack"])
    return out


def findings_for(nvidia, stack):
    ctx = {"nvidia": nvidia, "stack": stack, "api": {},
           "catalog": catalog_load.load_catalog(os.path.join(REPO, "catalog", "v2"))}
    return dict((f["id"], f) for f in catalog_rules.rule_catalog(ctx) + catalog_rules.rule_fabricmanager(ctx))


def test_toolkit_facts_legacy_and_cdi(facts):
    legacy = facts["stack-legacy"][1]["container_toolkit"]
    cdi = facts["stack-cdi"][1]["container_toolkit"]
    for tk in (legacy, cdi):
        assert tk["installed"] and tk["version"] == "1.14.6", tk
        assert tk["packages"]["nvidia-container-toolkit"] == "1.14.6-1", tk
        assert tk["config_path"] == "/etc/nvidia-container-runtime/config.toml" and tk["config"], tk
    assert legacy["injection_mode"] == "legacy" and legacy["config"]["mode"] == "legacy", legacy
    assert legacy["cdi_specs"] == [], legacy
    assert cdi["injection_mode"] == "cdi" and cdi["config"]["mode"] == "cdi", cdi
    assert cdi["cdi_specs"] == ["/etc/cdi/nvidia.yaml"], cdi


def test_fabric_manager_and_nvswitch_facts(facts):
    legacy, cdi = facts["stack-legacy"][1], facts["stack-cdi"][1]
    assert legacy["fabric_manager"]["package"] == "nvidia-fabricmanager-570"
    assert legacy["fabric_manager"]["version"] == "570.158.01"
    assert cdi["fabric_manager"]["version"] == "570.172.08"
    # the lab's daemon refuses a module of another version, as the real one does
    assert legacy["fabric_manager"]["service"]["active"] in ("failed", "inactive"), legacy["fabric_manager"]
    assert cdi["fabric_manager"]["service"]["active"] == "active", cdi["fabric_manager"]
    for stack in (legacy, cdi):
        assert stack["nvswitch"]["present"] is True and stack["nvswitch"]["bus_ids"] == NVSWITCHES, stack["nvswitch"]
        assert stack["kernel_modules"] in ("open", "proprietary"), stack


def test_fabricmanager_mismatch_on_the_legacy_node_only(facts):
    legacy = findings_for(*facts["stack-legacy"])
    cdi = findings_for(*facts["stack-cdi"])
    f = legacy["fabricmanager.version_mismatch"]
    assert f["evidence"]["driver_version"] == "570.172.08"
    assert f["evidence"]["fabric_manager_version"] == "570.158.01"
    assert f["evidence"]["nvswitch_bus_ids"] == NVSWITCHES
    assert "fabricmanager.version_mismatch" not in cdi, cdi.get("fabricmanager.version_mismatch")


def test_cve_2024_0132_legacy_yes_cdi_not_applicable(facts):
    legacy = findings_for(*facts["stack-legacy"])["security.container-toolkit"]
    cdi = findings_for(*facts["stack-cdi"])["security.container-toolkit"]
    legacy_ids = set(a["id"] for a in legacy["evidence"]["advisories"])
    cdi_ids = set(a["id"] for a in cdi["evidence"]["advisories"])
    assert {"ctk-cve-2024-0132", "ctk-cve-2024-0133"} <= legacy_ids, legacy_ids
    assert "CVE-2024-0132" in legacy["evidence"]["cves"]
    assert legacy["severity"] == "critical"
    assert not {"ctk-cve-2024-0132", "ctk-cve-2024-0133"} & cdi_ids, cdi_ids
    assert "CVE-2024-0132" not in cdi["evidence"]["cves"]
    # the same version on the CDI node: evaluated, in range, ruled out by the condition
    result = catalog_evaluate.evaluate(
        catalog_load.load_catalog(os.path.join(REPO, "catalog", "v2")), "container-toolkit", "1.14.6",
        catalog_rules.condition_facts({"stack": facts["stack-cdi"][1]}))
    assert "ctk-cve-2024-0132" in [n["id"] for n in result["not_applicable"]]


# ---------------------------------------------------------------- through the audit (one task per node)

@pytest.fixture(scope="module")
def audit_report(lab, tmp_path_factory):
    """playbooks/audit.yml over both nodes: the stack_facts probe runs inside audit_node, its
    config.toml is parsed by audit_node's action, the catalog rules run there."""
    import json
    from lib.ansible_runner import AnsibleRunner, ensure_collection_tree  # tests/ is on sys.path
    workdir = str(tmp_path_factory.mktemp("stackaudit"))
    runner = AnsibleRunner(REPO, ensure_collection_tree(REPO), workdir)
    report_dir = os.path.join(workdir, "report")
    res = runner.playbook(os.path.join(REPO, "playbooks", "audit.yml"), inventory=lab.inventory,
                          env=dict(ENV, TMPDIR=workdir), timeout=900,
                          extra_vars={"kubegpu_audit_report_dir": report_dir, "kubegpu_audit_formats": ["json"],
                                      "kubegpu_audit_fail_on": "never"})
    assert res.rc == 0, res.stdout[-4000:] + res.stderr[-2000:]
    with open(os.path.join(report_dir, "kubegpu-audit.json")) as f:
        report = json.load(f)
    out = {}
    for n in report["nodes"]:
        assert n["status"] == "audited", n
        out[n["name"]] = dict((f["id"], f) for f in n["findings"])
        # every probe that could not run (audit.module_failed, one per probe)
        out[n["name"]]["failed_probes"] = [f["evidence"].get("probe") for f in n["findings"]
                                           if f["id"] == "audit.module_failed"]
        errors = [(f["evidence"].get("probe"), f["evidence"].get("error")) for f in n["findings"]
                  if f["id"] == "audit.module_failed"]
        print("%s: failed probes %s" % (n["name"], errors))
    return out


def test_audit_reports_the_stack_findings(audit_report):
    legacy, cdi = audit_report["stack-legacy"], audit_report["stack-cdi"]
    assert legacy["fabricmanager.version_mismatch"]["evidence"]["fabric_manager_version"] == "570.158.01"
    assert "fabricmanager.version_mismatch" not in cdi, sorted(cdi)
    legacy_ids = set(a["id"] for a in legacy["security.container-toolkit"]["evidence"]["advisories"])
    cdi_ids = set(a["id"] for a in cdi["security.container-toolkit"]["evidence"]["advisories"])
    assert "ctk-cve-2024-0132" in legacy_ids and "ctk-cve-2024-0132" not in cdi_ids, (legacy_ids, cdi_ids)
    assert "security.driver" in legacy and "security.driver" in cdi
    assert "stack_facts" not in legacy["failed_probes"] + cdi["failed_probes"]
