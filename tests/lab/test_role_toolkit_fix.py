"""The device_plugin role's toolkit fix path (tasks_from: toolkit_fix) on booted lab nodes with
real apt/dpkg: a plan's upgrade moves nvidia-container-toolkit and -base to one version in one
transaction; with kubegpu_toolkit_upgrade false the documented config.toml mitigation is written
(backup 0600, diff, check mode) and the runtime restarted only on a change. The lab's container
runtime lives in its kubelet, so kubelet.service plays the runtime unit here."""
import tomllib

import pytest

from lab_fixture import lab_factory  # noqa: F401  pylint: disable=unused-import

CONFIG = "/etc/nvidia-container-runtime/config.toml"
FLAG = "features.disable-cuda-compat-lib-hook"
PROFILE = {
    "name": "e7tk",
    "defaults": {"gpus": {"count": 1}},
    "nodes": [
        {"name": "tk-up", "driver": {"version": "570.172.08", "container_toolkit": "1.14.3"}},
        {"name": "tk-mit", "driver": {"version": "570.172.08", "container_toolkit": "1.17.8"}},
    ],
}


@pytest.fixture(scope="module")
def lab(lab_factory):  # noqa: F811
    return lab_factory(PROFILE, name="e7tk")


def plan(target=None, mitigations=None, version="1.14.3"):
    return {"version": version, "target": target, "fixed": target or "1.17.8",
            "packages": ["nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
                         "libnvidia-container1"],
            "config_path": CONFIG, "mitigations": mitigations or {},
            "unmitigated": [{"id": "ctk-cve-2025-23267", "cves": ["CVE-2025-23267"],
                             "reason": "no configuration mitigation is published: upgrade"}],
            "advisories": ["ctk-cve-2025-23266", "ctk-cve-2025-23267"]}


def run(ansible, lab, host, fix, upgrade, check=False, diff=False):
    play = [{"hosts": host, "gather_facts": False, "tasks": [
        {"name": "toolkit fix", "ansible.builtin.include_role": {"name": "kubegpu.fleet.device_plugin",
                                                                 "tasks_from": "toolkit_fix"},
         "vars": {"kubegpu_toolkit_fix": fix, "kubegpu_toolkit_upgrade": upgrade,
                  "kubegpu_toolkit_runtime_service": "kubelet.service"}}]}]
    return ansible.playbook(play, inventory=lab.inventory, check=check, diff=diff, timeout=600)


def versions(lab, node):
    out = lab.ssh(node, "dpkg-query -W -f '${Package} ${Version}\\n' 'nvidia-container-toolkit*'").stdout
    return dict(line.split() for line in out.splitlines())


def test_upgrade_moves_every_toolkit_package_to_one_version(lab, ansible):
    assert versions(lab, "tk-up") == {"nvidia-container-toolkit": "1.14.3-1", "nvidia-container-toolkit-base": "1.14.3-1"}
    res = run(ansible, lab, "tk-up", plan(target="1.17.8"), True)
    assert res.rc == 0, res.stdout[-4000:]
    assert versions(lab, "tk-up") == {"nvidia-container-toolkit": "1.17.8-1", "nvidia-container-toolkit-base": "1.17.8-1"}
    again = run(ansible, lab, "tk-up", plan(target="1.17.8"), True)
    assert again.rc == 0 and again.stats["tk-up"]["changed"] == 0, again.stdout[-3000:]


def test_mitigation_is_written_with_backup_and_the_runtime_restarted_once(lab, ansible):
    fix = plan(mitigations={FLAG: True}, version="1.17.7")
    before = lab.ssh("tk-mit", "cat %s" % CONFIG).stdout
    pid = lab.ssh("tk-mit", "systemctl show -p MainPID --value kubelet.service").stdout.strip()

    check = run(ansible, lab, "tk-mit", fix, False, check=True, diff=True)
    assert check.rc == 0, check.stdout[-4000:]
    assert lab.ssh("tk-mit", "cat %s" % CONFIG).stdout == before

    res = run(ansible, lab, "tk-mit", fix, False)
    assert res.rc == 0, res.stdout[-4000:]
    after = lab.ssh("tk-mit", "cat %s" % CONFIG).stdout
    assert after.startswith(before)
    assert tomllib.loads(after)["features"]["disable-cuda-compat-lib-hook"] is True
    backup = res.task("kubegpu.fleet.device_plugin : Set the mitigation keys in the toolkit configuration",
                      host="tk-mit")["backup_file"]
    assert lab.ssh("tk-mit", "stat -c %a " + backup).stdout.strip() == "600"
    assert lab.ssh("tk-mit", "cat " + backup).stdout == before
    restarted = lab.ssh("tk-mit", "systemctl show -p MainPID --value kubelet.service").stdout.strip()
    assert restarted != pid
    report = res.task("kubegpu.fleet.device_plugin : Report what stays open without the upgrade", host="tk-mit")
    assert "ctk-cve-2025-23267" in report["msg"]

    again = run(ansible, lab, "tk-mit", fix, False)
    assert again.rc == 0 and again.stats["tk-mit"]["changed"] == 0, again.stdout[-3000:]
    assert lab.ssh("tk-mit", "systemctl show -p MainPID --value kubelet.service").stdout.strip() == restarted
    assert versions(lab, "tk-mit")["nvidia-container-toolkit"] == "1.17.8-1"  # no upgrade was allowed
