"""kubegpu.fleet.driver moves fabric manager in lockstep with the driver on booted lab nodes:
the fake nvidia-fabricmanager-570 (lab/packages) refuses to start against a kernel module of
another version, as nv-fabricmanager does. A node with fabric manager at the old version ends
with driver and fabric manager at the target (one apt transaction) and the service active after
the reboot; a node whose fabric manager alone differs gets it fixed and restarted without a
reboot; a node without fabric manager gets none."""
from lab_fixture import lab_factory  # noqa: F401  pylint: disable=unused-import

import pytest

OLD = "570.158.01"
NEW = "570.172.08"
REV = "-0ubuntu1"
FM = "nvidia-fabricmanager-570"
UNIT = "nvidia-fabricmanager.service"

PROFILE = {
    "name": "e7fm",
    "defaults": {"gpus": {"count": 1}},
    "nodes": [
        {"name": "fm-up", "driver": {"version": OLD, "fabric_manager": "same"}},
        {"name": "fm-only", "driver": {"version": NEW, "fabric_manager": OLD}},
        {"name": "fm-none", "driver": {"version": OLD}},
    ],
}


@pytest.fixture(scope="module")
def lab(lab_factory):  # noqa: F811
    return lab_factory(PROFILE, name="e7fm")


def run_role(ansible, lab, host, check=False):
    play = [{"hosts": host, "gather_facts": False, "tasks": [
        {"name": "driver", "ansible.builtin.include_role": {"name": "kubegpu.fleet.driver"},
         "vars": {"kubegpu_driver_drain": False}},
        {"name": "facts", "ansible.builtin.debug": {"msg": {
            "required": "{{ kubegpu_reboot_required | default(false) }}"}}},
    ]}]
    return ansible.playbook(play, inventory=lab.inventory, check=check, timeout=900)


def plan_of(res, host):
    return res.task("kubegpu.fleet.driver : Plan the driver package transaction", host=host)


def packages(lab, node):
    out = lab.ssh(node, "dpkg-query -W -f '${db:Status-Abbrev} ${Package} ${Version}\\n' 'nvidia-*' 'libnvidia-*'").stdout
    return {f[1]: f[2] for f in (line.split() for line in out.splitlines()) if f[0] in ("ii", "hi")}


def unit_state(lab, node):
    out = lab.ssh(node, "systemctl show --property=ActiveState --property=UnitFileState %s" % UNIT).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def test_fabric_manager_moves_with_the_driver_and_runs_after_the_reboot(lab, ansible):
    before = packages(lab, "fm-up")
    assert before[FM] == OLD + REV and before["nvidia-driver-570"] == OLD + REV
    assert unit_state(lab, "fm-up") == {"ActiveState": "active", "UnitFileState": "enabled"}

    res = run_role(ansible, lab, "fm-up")
    assert res.rc == 0, res.stdout[-5000:]
    plan = plan_of(res, "fm-up")
    # one transaction: the fabric manager spec is in the same apt install as the driver's
    assert "%s=%s%s" % (FM, NEW, REV) in plan["install"] and "nvidia-dkms-570=%s%s" % (NEW, REV) in plan["install"]
    assert plan["fabric_manager"]["from"] == OLD and plan["fabric_manager"]["changed"] is True
    after = packages(lab, "fm-up")
    assert after[FM] == NEW + REV and after["nvidia-driver-570"] == NEW + REV
    assert lab.ssh("fm-up", "dpkg --get-selections %s" % FM).stdout.split() == [FM, "hold"]
    # the old module is still loaded: the new daemon would refuse it, so it was not restarted
    refuse = lab.ssh("fm-up", "nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg", check=False)
    assert refuse.returncode == 1 and "don't match with driver version %s" % OLD in refuse.stderr
    assert not any(t.get("changed") for t in res.tasks("fm-up")
                   if t["_task"].endswith("Restart fabric manager against the loaded driver of the target version"))

    again = run_role(ansible, lab, "fm-up")
    assert again.rc == 0, again.stdout[-5000:]
    assert again.stats["fm-up"]["changed"] == 0, [t["_task"] for t in again.tasks("fm-up") if t.get("changed")]

    lab.node("fm-up").reboot()
    assert NEW in lab.ssh("fm-up", "head -1 /proc/driver/nvidia/version").stdout
    assert unit_state(lab, "fm-up") == {"ActiveState": "active", "UnitFileState": "enabled"}
    assert lab.ssh("fm-up", "nv-fabricmanager -v").stdout.strip() == "Fabric Manager version is : %s" % NEW


def test_a_fabric_manager_that_alone_differs_is_fixed_and_restarted_without_reboot(lab, ansible):
    assert packages(lab, "fm-only")[FM] == OLD + REV
    # at boot it refused the 570.172.08 module
    assert unit_state(lab, "fm-only")["ActiveState"] == "failed"
    journal = lab.ssh("fm-only", "journalctl -b -u %s --no-pager" % UNIT).stdout
    assert "interface version %s don't match with driver version %s" % (OLD, NEW) in journal

    check = run_role(ansible, lab, "fm-only", check=True)
    assert check.rc == 0, check.stdout[-5000:]
    assert packages(lab, "fm-only")[FM] == OLD + REV and unit_state(lab, "fm-only")["ActiveState"] == "failed"

    res = run_role(ansible, lab, "fm-only")
    assert res.rc == 0, res.stdout[-5000:]
    plan = plan_of(res, "fm-only")
    assert [c["name"] for c in plan["changes"]] == [FM]
    assert plan["reboot_required"] is False and plan["drain_required"] is False
    assert packages(lab, "fm-only")[FM] == NEW + REV
    assert unit_state(lab, "fm-only")["ActiveState"] == "active"
    assert res.task("facts", host="fm-only")["msg"]["required"] is False

    again = run_role(ansible, lab, "fm-only")
    assert again.rc == 0 and again.stats["fm-only"]["changed"] == 0, again.stdout[-3000:]


def test_a_node_without_fabric_manager_gets_none(lab, ansible):
    res = run_role(ansible, lab, "fm-none")
    assert res.rc == 0, res.stdout[-5000:]
    plan = plan_of(res, "fm-none")
    assert plan["fabric_manager"]["installed"] is False
    assert not any("fabricmanager" in s for s in plan["install"])
    after = packages(lab, "fm-none")
    assert after["nvidia-driver-570"] == NEW + REV and not [p for p in after if "fabricmanager" in p]
