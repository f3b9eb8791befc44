"""GPU hardware health on the lab: the audit playbook against a control node and a
node carrying every hardware fault of lab/profiles/gpu-health.yml, one per GPU:

* GPU 0: a row marked for remapping (fake NVML ``health``) and Xid 63 in the kernel log;
* GPU 1: a row remap failure;
* GPU 2: on the node's PCI bus (the lab's sysfs tree) but not in the driver's list, and
  Xid 79 "GPU has fallen off the bus." in the kernel log.

Then the fault node reboots: the pending remap is applied (no gpu.reset_required, the volatile
ECC count starts again), the kernel log of the new boot has no Xid, and the hardware faults a
reboot does not fix (remap failure, the GPU off the bus) are still reported.

Each finding must come out on the fault node, with the right GPU, through the real path
(sysfs tree -> gpu_pci, fake NVML -> nvml_health, /dev/kmsg records -> gpu_xid, findings on the
controller, the report), and none on the control node, whose tree and log the lab writes the
same way.
"""
import copy
import json
import os
import sys

import pytest
import yaml

from lab_fixture import lab_factory  # noqa: F401  pylint: disable=unused-import

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROFILE_FILE = os.path.join(REPO, "lab", "profiles", "gpu-health.yml")
PLAYBOOK = os.path.join(REPO, "playbooks", "audit.yml")
ENV = {"ANSIBLE_PIPELINING": "1", "ANSIBLE_TIMEOUT": "30", "ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.json"}
PROBE_TASK = "kubegpu.fleet.audit : Audit the node"
HW_IDS = {"gpu.missing", "gpu.xid", "gpu.reset_required", "gpu.rma", "gpu.ecc_uncorrectable"}
sys.path.insert(0, os.path.join(REPO, "lab"))
sys.path.insert(0, os.path.join(REPO, "lab", "node", "lib"))
from kubegpu_lab import node as lab_node, profiles  # noqa: E402  pylint: disable=wrong-import-position
from kubegpu_lab.util import LabError  # noqa: E402  pylint: disable=wrong-import-position
from kubegpu_lab_node import hw  # noqa: E402  pylint: disable=wrong-import-position
# the lab's bus ids for GPUs 0, 1, 2 (lab/kubegpu_lab/node.py gpu_specs)
GPU0, GPU1, GPU2 = "0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0"


@pytest.fixture(scope="module")
def lab(lab_factory):  # noqa: F811
    with open(PROFILE_FILE) as f:
        profile = yaml.safe_load(f)
    return lab_factory(profile, name="hwh%d" % (os.getpid() % 10000))


# ---------------------------------------------------------------- without a lab (no root needed)

def fault_node_config():
    doc = profiles.load_profile(PROFILE_FILE)
    spec = [n for n in doc["nodes"] if n["name"] == "hw-fault"][0]
    return {"node": "hw-fault", "gpus": lab_node.gpu_specs(spec), "xid": spec["xid_events"]}


@pytest.mark.parametrize("gpus, message", [
    ({"count": 2, "missing": [2]}, "gpus.missing names GPU 2 but the node has 2 GPUs"),
    ({"count": 2, "health": {"x": {}}}, "gpus.health names GPU 'x', not a GPU index"),
    ({"count": 2, "health": {0: "bad"}}, "gpus.health of GPU 0 must be a mapping"),
    ({"count": 2, "xid": [{"gpu": 0, "xid": 31}]}, "Xid 31 has no built-in message: give the entry a text"),
    ({"count": 2, "xid": [{"gpu": 0}]}, "a gpus.xid entry needs gpu (an index) and xid (a number)"),
    ({"count": 2, "xid": [{"gpu": 0, "xid": 94, "gpu_instance": "x"}]}, "gpus.xid gpu_instance must be 0..99"),
    ({"count": 2, "xid": [{"gpu": 0, "xid": 94, "compute_instance": 0}]}, "compute_instance needs gpu_instance"),
])
def test_profile_hardware_keys_are_validated(gpus, message):
    doc = {"nodes": [{"name": "n", "gpus": gpus}]}
    with pytest.raises(LabError) as err:
        profiles.expand(copy.deepcopy(doc))
    assert message in str(err.value)


def test_kernel_log_records_and_the_second_boot(tmp_path):
    cfg = fault_node_config()
    path = str(tmp_path / "kmsg")
    first = hw.write_kernel_log(cfg, "570.172.08", 1, path=path)
    assert [r.split(";", 1)[1].strip() for r in first if "Xid" in r] == [
        "NVRM: Xid (PCI:0000:18:00): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate.",
        "NVRM: Xid (PCI:0000:3a:00): 79, pid=2761, name=python3, GPU has fallen off the bus."]
    assert all(r.startswith("3,") for r in first if "Xid" in r)
    assert not [r for r in hw.write_kernel_log(cfg, "570.172.08", 2, path=path) if "Xid" in r]
    assert not [r for r in hw.write_kernel_log(cfg, None, 1, path=path) if "Xid" in r]  # no driver, no Xid


def test_reset_health_applies_pending_work_only():
    state = hw.new_state(dict(fault_node_config(), mig_apply="never"))
    hw.reset_health(state)
    gpu0, gpu1 = state["gpus"][0]["health"], state["gpus"][1]["health"]
    assert gpu0["remapped_rows"] == {"correctable": 0, "uncorrectable": 1, "pending": False, "failure": False}
    assert gpu0["ecc"] == {"volatile_uncorrectable": 0, "aggregate_uncorrectable": 1}
    assert gpu1["remapped_rows"]["failure"] is True and gpu1["ecc"]["aggregate_uncorrectable"] == 3
    assert "health" not in state["gpus"][2]


# ---------------------------------------------------------------- on a lab

def run_audit(lab, workdir):
    """The audit playbook over the lab: (playbook result, JSON report)."""
    from lib.ansible_runner import AnsibleRunner, ensure_collection_tree  # tests/ is on sys.path (tests/conftest.py)
    runner = AnsibleRunner(REPO, ensure_collection_tree(REPO), workdir)
    report_dir = os.path.join(workdir, "report")
    env = dict(ENV, TMPDIR=workdir)
    res = runner.playbook(PLAYBOOK, inventory=lab.inventory, env=env, timeout=900,
                          extra_vars={"kubegpu_audit_report_dir": report_dir, "kubegpu_audit_formats": ["json"],
                                      "kubegpu_audit_fail_on": "never",
                                      # the probes' data in the task results (the Xid scan's attempts, PCI presence)
                                      "kubegpu_audit_details": True})
    assert res.rc == 0, res.stdout[-4000:] + res.stderr[-2000:]
    path = os.path.join(report_dir, "kubegpu-audit.json")
    assert os.path.exists(path), "no JSON report in %s" % report_dir
    with open(path) as f:
        return res, json.load(f)


@pytest.fixture(scope="module")
def audit(lab, tmp_path_factory):
    """One audit run over both nodes as booted."""
    return run_audit(lab, str(tmp_path_factory.mktemp("hwaudit")))


def node_findings(report, name):
    nodes = [n for n in report["nodes"] if n["name"] == name]
    assert len(nodes) == 1, [n["name"] for n in report["nodes"]]
    assert nodes[0]["status"] == "audited", nodes[0]
    return {f["id"]: f for f in nodes[0]["findings"]}


def gpu_bus_ids(finding):
    """The bus ids (sysfs form) of the GPUs a per-GPU finding names."""
    out = set()
    for gpu in finding["evidence"]["gpus"]:
        domain, rest = gpu["bus_id"].split(":", 1)
        out.add(("%04x:%s" % (int(domain, 16), rest)).lower())
    return out


def find_key(obj, key):
    """The first value of ``key`` anywhere in a nested result."""
    if isinstance(obj, dict):
        if key in obj and isinstance(obj[key], dict):
            return obj[key]
        values = obj.values()
    elif isinstance(obj, list):
        values = obj
    else:
        return None
    for v in values:
        got = find_key(v, key)
        if got is not None:
            return got
    return None


def test_the_lab_node_has_its_own_pci_tree_and_kernel_log(lab):
    """What the node shows: its GPUs on the lab's PCI tree (the missing one too, bound to
    nvidia), the driver listing two of three, the Xid records in the kernel log file, and a
    journal without kernel messages (nspawn gives the container no kernel log)."""
    out = lab.ssh("hw-fault", "cd /run/kubegpu-lab/sys/bus/pci/devices && for d in *; do "
                  "echo $d $(cat $d/vendor $d/device $d/class) $(basename $(readlink $d/driver 2>/dev/null) 2>/dev/null); "
                  "done; echo ---; nvidia-smi -L; echo ---; cat /run/kubegpu-lab/kmsg; echo ---; "
                  "journalctl -k -b -q --no-pager | wc -l; ls -l /dev/kmsg 2>&1 || true").stdout
    bus, smi, kmsg, journal = out.split("---\n")
    assert "%s 0x10de 0x2330 0x030200 nvidia" % GPU2 in bus, bus
    assert "0000:00:00.0 0x8086" in bus, bus
    assert len([line for line in smi.splitlines() if line.startswith("GPU ")]) == 2, smi
    assert "NVRM: Xid (PCI:0000:3a:00): 79, pid=2761, name=python3, GPU has fallen off the bus." in kmsg, kmsg
    assert "NVRM: Xid (PCI:0000:18:00): 63, pid=1896, Row Remapper: New row marked for remapping" in kmsg, kmsg
    assert journal.splitlines()[0].strip() == "0", journal
    print("journal kernel lines and /dev/kmsg in the node: %r" % journal)
    control = lab.ssh("hw-control", "ls /run/kubegpu-lab/sys/bus/pci/devices; grep -c 'Xid' /run/kubegpu-lab/kmsg || true").stdout
    assert control.split() == ["0000:00:00.0", "0000:18:00.0", "0000:2a:00.0", "0"], control


def test_each_hardware_finding_on_the_fault_node(audit):
    res, report = audit
    found = node_findings(report, "hw-fault")
    assert HW_IDS <= set(found), sorted(found)
    text = {k: json.dumps(v) for k, v in found.items()}
    assert GPU2 in text["gpu.missing"] and GPU0 not in text["gpu.missing"], text["gpu.missing"]
    assert found["gpu.missing"]["severity"] == "critical"
    assert GPU2 in text["gpu.xid"] and "79" in text["gpu.xid"] and "fallen off the bus" in text["gpu.xid"]
    assert found["gpu.xid"]["severity"] == "critical", found["gpu.xid"]  # Xid 79: reboot
    assert gpu_bus_ids(found["gpu.reset_required"]) == {GPU0}, text["gpu.reset_required"]
    assert gpu_bus_ids(found["gpu.rma"]) == {GPU1}, text["gpu.rma"]
    # GPU 0's volatile error (warning) and GPU 1's aggregate-only errors
    assert gpu_bus_ids(found["gpu.ecc_uncorrectable"]) == {GPU0, GPU1}, text["gpu.ecc_uncorrectable"]
    assert found["gpu.ecc_uncorrectable"]["severity"] == "warning", text["gpu.ecc_uncorrectable"]
    # the Xids came from the lab's kernel log file: the journal held none
    xid = find_key(res.task(PROBE_TASK, host="hw-fault")["probes"]["gpu_facts"], "xid")
    assert xid and xid["source"] == "kmsg", xid
    assert [a["source"] for a in xid["attempts"]] == ["journal"], xid["attempts"]


def test_no_hardware_finding_on_the_control_node(audit):
    res, report = audit
    found = node_findings(report, "hw-control")
    assert not HW_IDS & set(found), {k: found[k] for k in HW_IDS & set(found)}
    xid = find_key(res.task(PROBE_TASK, host="hw-control")["probes"]["gpu_facts"], "xid")
    assert xid and xid["source"] == "kmsg" and xid["events"] == 0, xid
    presence = find_key(res.task(PROBE_TASK, host="hw-control")["probes"]["gpu_facts"], "presence")
    assert presence and presence.get("compared") is True and not presence.get("missing"), presence


def test_what_the_driver_reports_itself_on_the_nvidia_node(audit):
    """hw-nvidia: the MIG-attributed Xid 94 keeps its instance and only restarts the job; the
    driver's drain-and-reset verdict decides GPU 1 (Xid 48 + 154 in the log, a row pending);
    GPU 2's link trained x8 of x16 under load and replaying is a warning."""
    res, report = audit
    found = node_findings(report, "hw-nvidia")
    assert {"gpu.xid", "gpu.recovery_action", "gpu.reset_required", "gpu.pcie_degraded"} <= set(found), sorted(found)
    assert not {"gpu.missing", "gpu.rma"} & set(found), sorted(found)
    xid = dict((g["bus_id"], g) for g in found["gpu.xid"]["evidence"]["gpus"])
    assert xid[GPU0]["mig"] == {"GI 1 CI 0": {"gpu_instance": 1, "compute_instance": 0, "counts": {"94": 1}}}
    assert xid[GPU0]["action"] == "restart_app"
    assert (xid[GPU1]["catalog_action"], xid[GPU1]["driver_action"], xid[GPU1]["action"]) == \
        ("reset_gpu", "drain_and_reset", "reset_gpu")
    assert found["gpu.recovery_action"]["severity"] == "critical"
    assert gpu_bus_ids(found["gpu.recovery_action"]) == {GPU1}
    assert gpu_bus_ids(found["gpu.reset_required"]) == {GPU1}
    assert found["gpu.pcie_degraded"]["severity"] == "warning" and gpu_bus_ids(found["gpu.pcie_degraded"]) == {GPU2}
    facts = res.task(PROBE_TASK, host="hw-nvidia")["probes"]["gpu_facts"]
    assert find_key(facts, "xid")["source"] == "kmsg"


def test_a_gpu_reset_applies_the_remap_without_a_reboot(lab, audit, tmp_path):
    """kubegpu.fleet.gpu_reset on hw-nvidia (the lab's fake nvidia-smi -r): GPU 1 is reset and
    validated, the node keeps its boot, and the next audit no longer asks for the reset (the Xid
    48/154 it cleared are counted as before the reset); GPU 2's link is still reported."""
    from lib.ansible_runner import AnsibleRunner, ensure_collection_tree
    node = lab.lab.node("hw-nvidia")
    boot = node.boot_id()
    runner = AnsibleRunner(REPO, ensure_collection_tree(REPO), str(tmp_path))
    play = [{"hosts": "hw-nvidia", "gather_facts": False, "tasks": [
        {"name": "under test", "kubegpu.fleet.gpu_reset": {
            "bus_ids": [GPU1], "sys_path": "{{ kubegpu_sys_path }}"}}]}]
    res = runner.playbook(play, inventory=lab.inventory, env=dict(ENV, TMPDIR=str(tmp_path)), timeout=600)
    assert res.rc == 0, res.stdout[-4000:] + res.stderr[-2000:]
    out = res.task("under test", host="hw-nvidia")
    assert out["reset"] == [GPU1] and out["fallback"] is None and out["validation"] == [], out
    assert node.boot_id() == boot
    (tmp_path / "after").mkdir()
    _res, after = run_audit(lab, str(tmp_path / "after"))
    found = node_findings(after, "hw-nvidia")
    assert not {"gpu.reset_required", "gpu.recovery_action"} & set(found), sorted(found)
    xid = dict((g["bus_id"], g) for g in found["gpu.xid"]["evidence"]["gpus"])
    assert xid[GPU1]["before_reset"] == 2 and xid[GPU1]["total"] == 0
    assert found["gpu.xid"]["evidence"]["action"] == "restart_app"  # GPU 0's contained error only
    assert gpu_bus_ids(found["gpu.pcie_degraded"]) == {GPU2}


def test_a_reboot_applies_the_pending_remap_and_leaves_the_hardware_faults(lab, audit, tmp_path):
    """Runs last (it reboots the fault node): the before is the module's audit."""
    _res, before = audit
    assert "gpu.reset_required" in node_findings(before, "hw-fault")
    old_boot = lab.lab.node("hw-fault").boot_id()
    assert lab.lab.node("hw-fault").reboot() != old_boot
    res, after = run_audit(lab, str(tmp_path))
    found = node_findings(after, "hw-fault")
    assert "gpu.reset_required" not in found, found.get("gpu.reset_required")
    assert "gpu.xid" not in found, found.get("gpu.xid")
    assert gpu_bus_ids(found["gpu.rma"]) == {GPU1}, found.get("gpu.rma")
    assert GPU2 in json.dumps(found["gpu.missing"]), found.get("gpu.missing")
    # only aggregate counts are left (GPU 0's 1 and GPU 1's 3): info, not warning
    assert found["gpu.ecc_uncorrectable"]["severity"] == "info", found["gpu.ecc_uncorrectable"]
    xid = find_key(res.task(PROBE_TASK, host="hw-fault")["probes"]["gpu_facts"], "xid")
    assert xid["source"] == "kmsg" and xid["events"] == 0, xid
    assert not HW_IDS & set(node_findings(after, "hw-control"))
