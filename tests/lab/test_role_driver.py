"""kubegpu.fleet.driver on booted lab nodes: the whole branch package set to the catalog's fix
with real apt/dpkg, holds, known-bad pins, the reboot record (never a reboot), check mode,
cross-branch refusal, the skip label and a held dpkg lock."""
import os
import time

import pytest
import yaml

from lab_fixture import device_plugin_ds, lab_factory, wait_for  # noqa: F401  pylint: disable=unused-import

OLD = "570.158.01"
NEW = "570.172.08"
REV = "-0ubuntu1"
# The newest 570 release the lab's apt repository carries (above NEW: the branch's security floor).
with open(os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                       "lab", "packages", "catalog.yml")) as _f:
    NEWEST_570 = max((str(v) for v in yaml.safe_load(_f)["driver_versions"] if str(v).startswith("570.")),
                     key=lambda v: tuple(int(x) for x in v.split(".")))
SET = ("libnvidia-compute-570", "nvidia-compute-utils-570", "nvidia-dkms-570", "nvidia-driver-570",
       "nvidia-kernel-common-570", "nvidia-utils-570")
PREF = "/etc/apt/preferences.d/kubegpu-fleet-nvidia-known-bad.pref"
LOCK_UNIT = "kubegpu-test-dpkg-lock"

PROFILE = {
    "name": "drvrole",
    "defaults": {"gpus": {"count": 1}, "kubelet": {"config": {"kubeReserved": {"cpu": "500m", "memory": "5489Mi"}}}},
    "nodes": [
        {"name": "drv-up", "gpus": {"count": 2}, "driver": {"version": OLD, "compute_utils": "none"}},
        {"name": "drv-chk", "driver": {"version": OLD, "compute_utils": "none"}},
        {"name": "drv-575", "driver": {"version": "575.57.08", "compute_utils": "same"}},
    ],
    "cluster": {"manifests": [device_plugin_ds()]},
}


@pytest.fixture(scope="module")
def lab(lab_factory):  # noqa: F811
    return lab_factory(PROFILE)


def run_role(ansible, lab, host, check=False, diff=False, **role_vars):
    role_vars.setdefault("kubegpu_driver_drain", False)
    play = [{"hosts": host, "gather_facts": False, "tasks": [
        {"name": "driver", "ansible.builtin.include_role": {"name": "kubegpu.fleet.driver"}, "vars": role_vars},
        {"name": "facts", "ansible.builtin.debug": {"msg": {
            "required": "{{ kubegpu_reboot_required | default(false) }}",
            "reasons": "{{ kubegpu_reboot_reasons | default([]) }}",
            "target": "{{ kubegpu_driver_target_version | default('') }}"}}},
    ]}]
    return ansible.playbook(play, inventory=lab.inventory, check=check, diff=diff, timeout=900)


def task(res, name, host):
    """Result of a role task on host (role tasks are named '<role> : <name>')."""
    return res.task("kubegpu.fleet.driver : " + name, host=host)


def failure(res, host):
    """Message of the task that failed the host (the last failed one: a rescued task fails first)."""
    for t in reversed(res.tasks(host)):
        if t.get("failed"):
            return t.get("msg", "")
    raise AssertionError("no failed task for %s:\n%s" % (host, res.stdout[-4000:]))


def packages(lab, node):
    out = lab.ssh(node, "dpkg-query -W -f '${db:Status-Abbrev} ${Package} ${Version}\\n' 'nvidia-*' 'libnvidia-*'").stdout
    return {f[1]: f[2] for f in (line.split() for line in out.splitlines()) if f[0] in ("ii", "hi")}


def node_state(lab, node):
    """Everything the role may change on a node."""
    return lab.ssh(node, "dpkg-query -W -f '${db:Status-Abbrev} ${Package} ${Version}\\n' 'nvidia-*' 'libnvidia-*'; "
                         "dpkg --get-selections 'nvidia-*' 'libnvidia-*'; "
                         "ls /etc/apt/preferences.d/ /run/reboot-required* 2>&1; "
                         "cat %s 2>/dev/null; true" % PREF).stdout


def test_upgrade_moves_the_whole_set_holds_pins_and_records_the_reboot(lab, ansible):
    before = packages(lab, "drv-up")
    assert before["nvidia-driver-570"] == OLD + REV and "nvidia-compute-utils-570" not in before
    res = run_role(ansible, lab, "drv-up")
    assert res.rc == 0, res.stdout[-5000:]
    plan = task(res, "Plan the driver package transaction", "drv-up")
    assert plan["target_version"] == NEW and plan["installed_version"] == OLD
    assert sorted(plan["install"]) == sorted("%s=%s%s" % (p, NEW, REV) for p in SET)
    assert {c["name"]: c["from"] for c in plan["changes"]} == dict(
        {p: OLD + REV for p in SET if p != "nvidia-compute-utils-570"}, **{"nvidia-compute-utils-570": None})

    after = packages(lab, "drv-up")
    assert {p: after.get(p) for p in SET} == {p: NEW + REV for p in SET}
    assert lab.ssh("drv-up", "test -x /usr/bin/nvidia-cuda-mps-control", check=False).returncode == 0
    sel = dict(line.split() for line in lab.ssh("drv-up", "dpkg --get-selections %s" % " ".join(SET)).stdout.splitlines())
    assert sel == {p: "hold" for p in SET}
    # the known-bad versions can no longer be candidates: the candidate is the newest 570 the
    # repository carries, at or above the fix
    policy = lab.ssh("drv-up", "apt-cache policy nvidia-driver-570").stdout
    assert "Candidate: %s%s" % (NEWEST_570, REV) in policy
    for bad in ("570.124.06", "570.133.20", "570.148.08", OLD):
        line = [ln for ln in policy.splitlines() if ln.strip().startswith(bad + REV)]
        assert line and line[0].split()[-1] == "-1", (bad, policy)
    # never rebooted: the old module is still loaded, the reboot is recorded
    assert OLD in lab.ssh("drv-up", "head -1 /proc/driver/nvidia/version").stdout
    assert lab.ssh("drv-up", "nvidia-smi", check=False).returncode == 18
    mps = lab.ssh("drv-up", "nvidia-cuda-mps-control -d", check=False)
    assert mps.returncode == 1 and "driver version mismatch" in mps.stderr
    assert lab.ssh("drv-up", "cat /run/reboot-required").stdout.startswith("*** System restart required")
    pkgs = lab.ssh("drv-up", "cat /run/reboot-required.pkgs").stdout.split()
    assert "nvidia-dkms-570" in pkgs and "nvidia-compute-utils-570" not in pkgs
    facts = res.task("facts", host="drv-up")["msg"]
    assert facts["required"] is True and facts["target"] == NEW
    assert any("570.158.01 -> 570.172.08" in r for r in facts["reasons"]), facts

    again = run_role(ansible, lab, "drv-up")
    assert again.rc == 0, again.stdout[-5000:]
    assert again.stats["drv-up"]["changed"] == 0, [t["_task"] for t in again.tasks("drv-up") if t.get("changed")]
    assert task(again, "Plan the driver package transaction", "drv-up")["nothing_to_do"] is True
    # still not rebooted: the pending reboot is still recorded
    assert again.task("facts", host="drv-up")["msg"]["required"] is True

    lab.node("drv-up").reboot()
    smi = lab.ssh("drv-up", "nvidia-smi && head -1 /proc/driver/nvidia/version")
    assert NEW in smi.stdout and OLD not in smi.stdout
    nvml = lab.ssh("drv-up", "python3 -c \"import ctypes; l = ctypes.CDLL('libnvidia-ml.so.1'); "
                             "b = ctypes.create_string_buffer(80); "
                             "print(l.nvmlInit_v2(), l.nvmlSystemGetDriverVersion(b, 80), b.value.decode())\"")
    assert nvml.stdout.split() == ["0", "0", NEW]
    # the MPS control daemon starts against the new module (it refuses a module of another version)
    # the MPS control daemon starts against the new module (it refuses a module of another version)
    assert lab.ssh("drv-up", "nvidia-cuda-mps-control -d && nvidia-cuda-mps-control -V").stdout.split()[-1] == NEW
    third = run_role(ansible, lab, "drv-up")
    assert third.rc == 0 and third.stats["drv-up"]["changed"] == 0, third.stdout[-3000:]
    assert third.task("facts", host="drv-up")["msg"]["required"] is False


def test_check_mode_reports_the_plan_and_changes_nothing(lab, ansible):
    state = node_state(lab, "drv-chk")
    res = run_role(ansible, lab, "drv-chk", check=True, diff=True)
    assert res.rc == 0, res.stdout[-5000:]
    plan = task(res, "Plan the driver package transaction", "drv-chk")
    assert plan["nothing_to_do"] is False
    assert {c["name"]: (c["from"], c["to"]) for c in plan["changes"]}["nvidia-dkms-570"] == (OLD + REV, NEW + REV)
    assert "nvidia-dkms-570 %s%s" % (NEW, REV) in plan["diff"]["after"]
    assert "nvidia-compute-utils-570 (not installed)" in plan["diff"]["before"]
    assert task(res, "Install every package of the branch, pinned to the target version", "drv-chk")["changed"]
    assert node_state(lab, "drv-chk") == state


def test_cross_branch_moves_are_refused_and_change_nothing(lab, ansible):
    state = node_state(lab, "drv-chk")
    res = run_role(ansible, lab, "drv-chk", kubegpu_driver_version="580.65.06")
    assert res.rc != 0
    msg = failure(res, "drv-chk")
    assert "refusing a cross-branch driver change" in msg and "installed branch 570 (570.158.01)" in msg
    assert "target branch 580 (580.65.06)" in msg and "kubegpu_driver_allow_branch_change" in msg
    assert node_state(lab, "drv-chk") == state

    state = node_state(lab, "drv-575")
    res = run_role(ansible, lab, "drv-575")  # default branch 570
    assert res.rc != 0
    msg = failure(res, "drv-575")
    assert "installed branch 575 (575.57.08), target branch 570 (570.172.08)" in msg, msg
    assert node_state(lab, "drv-575") == state


def test_skip_label_leaves_the_node_alone(lab, ansible):
    state = node_state(lab, "drv-575")
    lab.kubectl("label", "node", "drv-575", "kubegpu.io/maintenance=skip")
    try:
        res = run_role(ansible, lab, "drv-575", kubegpu_driver_allow_branch_change=True)
    finally:
        lab.kubectl("label", "node", "drv-575", "kubegpu.io/maintenance-")
    assert res.rc == 0, res.stdout[-3000:]
    assert "labelled kubegpu.io/maintenance=skip" in task(res, "Skip a node labelled for no maintenance", "drv-575")["msg"]
    assert res.stats["drv-575"]["changed"] == 0
    assert node_state(lab, "drv-575") == state


def test_allowed_branch_change_drains_through_rolling_reboot_first(lab, ansible):
    assert lab.node_obj("drv-575")["spec"].get("unschedulable") is not True
    try:
        res = run_role(ansible, lab, "drv-575", kubegpu_driver_allow_branch_change=True, kubegpu_driver_drain=True,
                       kubegpu_max_unavailable=1)
        assert res.rc == 0, res.stdout[-5000:]
        names = [t["_task"] for t in res.tasks("drv-575")]
        cordon = next(i for i, n in enumerate(names) if n.startswith("kubegpu.fleet.rolling_reboot : "))
        install = names.index("kubegpu.fleet.driver : Install every package of the branch, pinned to the target version")
        assert cordon < install, names
        assert lab.node_obj("drv-575")["spec"].get("unschedulable") is True
        plan = task(res, "Plan the driver package transaction", "drv-575")
        assert plan["branch_change"] and plan["installed_branch"] == 575 and plan["target_version"] == NEW
        after = packages(lab, "drv-575")
        assert {p: after.get(p) for p in SET} == {p: NEW + REV for p in SET}
        assert not [p for p in after if p.endswith("-575")], after
        assert any("575.57.08 -> 570.172.08" in r for r in res.task("facts", host="drv-575")["msg"]["reasons"])
    finally:
        lab.kubectl("uncordon", "drv-575")


def hold_dpkg_lock(lab, node, seconds):
    """Hold the dpkg frontend lock (POSIX fcntl lock, as apt takes it) in a transient unit."""
    script = ("import fcntl, time; f = open('/var/lib/dpkg/lock-frontend', 'w'); fcntl.lockf(f, fcntl.LOCK_EX); "
              "open('/run/kubegpu-test-locked', 'w').close(); time.sleep(%d); "
              "open('/run/kubegpu-test-released', 'w').write(str(time.time()))" % seconds)
    lab.ssh(node, "rm -f /run/kubegpu-test-locked /run/kubegpu-test-released; "
                  "systemd-run --quiet --collect --unit %s python3 -c \"%s\"" % (LOCK_UNIT, script))
    wait_for(lambda: lab.ssh(node, "test -e /run/kubegpu-test-locked", check=False).returncode == 0, 120, "dpkg lock held")


def test_held_dpkg_lock_is_reported_after_the_timeout(lab, ansible):
    state = node_state(lab, "drv-chk")
    hold_dpkg_lock(lab, "drv-chk", 600)
    try:
        start = time.monotonic()
        res = run_role(ansible, lab, "drv-chk", kubegpu_driver_lock_timeout=6)
        took = time.monotonic() - start
        assert res.rc != 0
        msg = failure(res, "drv-chk")
        assert msg.startswith("dpkg lock held on drv-chk: apt waited 6 s"), msg
        assert "/var/lib/dpkg/lock-frontend" in msg and "python3" in msg, msg
        assert took >= 6
    finally:
        lab.ssh("drv-chk", "systemctl stop %s" % LOCK_UNIT, check=False)
    assert node_state(lab, "drv-chk") == state


def test_held_dpkg_lock_is_waited_for_then_the_upgrade_runs(lab, ansible):
    hold_dpkg_lock(lab, "drv-chk", 20)
    res = run_role(ansible, lab, "drv-chk", kubegpu_driver_lock_timeout=120)
    assert res.rc == 0, res.stdout[-5000:]
    released = float(lab.ssh("drv-chk", "cat /run/kubegpu-test-released").stdout)
    # dpkg ran only after the lock was released (dpkg.log has second resolution)
    log = lab.ssh("drv-chk", "grep ' upgrade nvidia-dkms-570:' /var/log/dpkg.log | tail -1").stdout.split()
    ran = time.mktime(time.strptime(" ".join(log[:2]), "%Y-%m-%d %H:%M:%S"))
    assert ran >= int(released) - 1, (log, released)
    after = packages(lab, "drv-chk")
    assert {p: after.get(p) for p in SET} == {p: NEW + REV for p in SET}
