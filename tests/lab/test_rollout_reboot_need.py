"""kubegpu.fleet.rolling_reboot with kubegpu_reboot=needed reboots exactly the nodes that need it.

Three lab nodes whose /boot is laid out as three distributions install kernels (lab profile key
``boot``, lab/kubegpu_lab/bootfs.py), around the running kernel release:

* rn-kernel (Debian layout, /vmlinuz links in /): a newer kernel of the running flavour is
  installed (``boot.pending_kernel``), as after ``apt upgrade`` before the reboot;
* rn-sentinel (Ubuntu layout, /boot/vmlinuz links): /run/reboot-required exists, as after
  unattended-upgrades (or the driver role);
* rn-idle (RHEL-family layout with the rescue image): the newest installed kernel runs, no
  sentinel, driver and module agree: nothing is pending.

One run of the playbook; the boot IDs in the API before and after say which nodes rebooted, the
plan says why the idle node was left out, and the run's JSON output counts the task executions
per node (the goal: at most 20 in the whole rolling_reboot playbook).

Six more nodes, two per layout, ask the boot loader what the flavour-blind /boot comparison
cannot answer:

* rn-<layout>-flavour: a newer kernel of another flavour (Ubuntu's ``-nvidia``, Debian's ``rt``,
  RHEL's ``+rt``; ``boot.other_flavour``) is the boot loader's default (grub-mkconfig's entry 0,
  grubby's default after the install): the next boot starts it, so the node reboots;
* rn-<layout>-pinned: a newer kernel of the running flavour is installed (``boot.pending_kernel``)
  but the default entry is the running kernel (``GRUB_DEFAULT=saved`` with ``saved_entry``,
  ``grubby --set-default``; ``boot.default: running``): a reboot would start the running kernel
  again, so the kernel is no reason and the node is left out of the rollout.
"""
import re
import os

import pytest

from lab_fixture import lab_factory, wait_for  # noqa: F401  pylint: disable=unused-import

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLAYBOOK = os.path.join(REPO, "playbooks", "rolling_reboot.yml")
LAYOUT = {"rn-kernel": ("debian", True), "rn-sentinel": ("ubuntu", False), "rn-idle": ("rhel", False)}
NODES = sorted(LAYOUT)
# boot-loader nodes: name -> (layout, boot profile key, reboots?)
BOOT = dict(("rn-%s-flavour" % lay, (lay, {"other_flavour": True}, True)) for lay in ("debian", "ubuntu", "rhel"))
BOOT.update(("rn-%s-pinned" % lay, (lay, {"pending_kernel": True, "default": "running"}, False))
            for lay in ("debian", "ubuntu", "rhel"))
BOOT_NODES = sorted(BOOT)
# the title of the default entry as boot_facts reads it: grub-mkconfig's simple entry (Debian,
# Ubuntu) or the BLS entry's title (RHEL)
TITLE = {"debian": "Debian GNU/Linux", "ubuntu": "Ubuntu", "rhel": "Lab Linux"}
MAX_TASKS_PER_NODE = 20

PLUGIN = {
    "apiVersion": "apps/v1", "kind": "DaemonSet",
    "metadata": {"name": "nvidia-device-plugin-daemonset", "namespace": "kube-system"},
    "spec": {"selector": {"matchLabels": {"name": "nvidia-device-plugin-ds"}},
             "template": {"metadata": {"labels": {"name": "nvidia-device-plugin-ds"}},
                          "spec": {"nodeSelector": {"nvidia.com/gpu.present": "true"},
                                   "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                                                    "effect": "NoSchedule"}],
                                   "containers": [{"name": "nvidia-device-plugin-ctr",
                                                   "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.2",
                                                   "env": [{"name": "PASS_DEVICE_SPECS", "value": "true"},
                                                           {"name": "FAIL_ON_INIT_ERROR", "value": "true"}],
                                                   "securityContext": {"privileged": True}}]}}},
}

PROFILE = {
    "name": "reboot-need",
    "description": "three GPU nodes: a newer kernel installed, a reboot-required sentinel, nothing pending",
    "defaults": {
        "gpus": {"count": 1},
        "kubelet": {"config": {
            "kubeReserved": {"cpu": "500m", "memory": "5489Mi"}, "systemReserved": {"cpu": "500m", "memory": "512Mi"},
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "10%", "imagefs.available": "15%",
                             "nodefs.inodesFree": "5%"}}},
        "pods": [{"name": "train-{node}", "namespace": "ml", "gpus": 1, "app": "train"}],
    },
    "nodes": [{"name": n, "seed": "healthy", "boot": {"layout": LAYOUT[n][0], "pending_kernel": LAYOUT[n][1]}}
              for n in NODES]
    + [{"name": n, "seed": "healthy", "boot": dict(BOOT[n][1], layout=BOOT[n][0])} for n in BOOT_NODES],
    "cluster": {"manifests": [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}}, PLUGIN]},
}

FAST = {
    "kubegpu_drain_timeout": 90, "kubegpu_drain_retry_delay": 2, "kubegpu_drain_pod_wait": 60,
    "kubegpu_validate_timeout": 90, "kubegpu_validate_poll": 2,
    "kubegpu_node_ready_timeout": 120, "kubegpu_node_ready_poll": 1,
    "kubegpu_budget_timeout": 20, "kubegpu_budget_poll": 2, "kubegpu_gpu_probe_timeout": 5,
}
ENV = {"ANSIBLE_PIPELINING": "1", "ANSIBLE_TIMEOUT": "30"}


@pytest.fixture(scope="module")
def lab(lab_factory):  # noqa: F811
    return lab_factory(PROFILE)


def boot_ids(lab, nodes=NODES):
    return dict((n, lab.node_obj(n)["status"]["nodeInfo"]["bootID"]) for n in nodes)


def task_executions(res, host):
    """Task results the play recorded for ``host`` (skipped ones and includes count too)."""
    return sum(1 for play in res.data.get("plays", []) for task in play.get("tasks", [])
               if host in task.get("hosts", {}))


def test_the_lab_boot_directories_look_like_the_distributions(lab):
    release = lab.ssh("rn-idle", "uname -r").stdout.strip()
    debian = lab.ssh("rn-kernel", "ls /boot; readlink /vmlinuz /vmlinuz.old").stdout.split()
    assert "vmlinuz-%s" % release in debian and "initrd.img-%s" % release in debian
    assert any(x.startswith("boot/vmlinuz-") for x in debian)
    ubuntu = lab.ssh("rn-sentinel", "readlink /boot/vmlinuz").stdout.strip()
    assert ubuntu == "vmlinuz-%s" % release
    rhel = lab.ssh("rn-idle", "ls -a /boot").stdout.split()
    assert any(x.startswith("vmlinuz-0-rescue-") for x in rhel) and ".vmlinuz-%s.hmac" % release in rhel


def test_needed_rollout_reboots_exactly_the_nodes_that_need_it(lab, ansible):
    for name in NODES:
        wait_for(lambda n=name: (lab.pod("ml", "train-%s" % n) or {}).get("status", {}).get("phase") == "Running",
                 120, "train-%s Running" % name)
    lab.ssh("rn-sentinel", "printf '*** System restart required ***\\n' > /run/reboot-required")
    before = boot_ids(lab)

    res = ansible.playbook(PLAYBOOK, inventory=lab.inventory, env=ENV, timeout=1200,
                           extra_vars=dict(FAST, kubegpu_reboot="needed", kubegpu_max_unavailable=1,
                                           kubegpu_targets=":".join(NODES)))
    assert res.rc == 0, (res.stdout + res.stderr)[-6000:]

    after = boot_ids(lab)
    rebooted = sorted(n for n in NODES if after[n] != before[n])
    assert rebooted == ["rn-kernel", "rn-sentinel"], (before, after)

    need = dict((n, res.task("kubegpu.fleet.rolling_reboot : Decide whether the node needs a reboot", host=n)["need"])
                for n in NODES)
    release = need["rn-idle"]["kernel"]["running"]
    # the lab's Debian grub.cfg boots entry 0, the newest kernel: the boot loader's answer decides
    assert need["rn-kernel"]["kernel"]["next_kernel"] == need["rn-kernel"]["kernel"]["newest"]
    assert need["rn-kernel"]["reasons"] == ["the boot loader's default entry (Debian GNU/Linux) starts kernel %s "
                                            "(newer), %s is running" % (need["rn-kernel"]["kernel"]["newest"], release)]
    assert need["rn-idle"]["kernel"]["basis"] == "boot loader"
    assert need["rn-sentinel"]["reasons"] == ["sentinel /run/reboot-required"]
    assert need["rn-idle"]["reboot"] is False and need["rn-idle"]["pending_reasons"] == []
    assert need["rn-idle"]["kernel"]["pending"] is False and need["rn-idle"]["kernel"]["newest"] == release
    assert need["rn-idle"]["driver"]["pending"] is False

    plan = res.task("kubegpu.fleet.rolling_reboot : Plan the rollout")["ansible_facts"]["kubegpu_rollout"]
    assert sorted(plan["hosts"]) == ["rn-kernel", "rn-sentinel"]
    assert plan["skipped"] == [{"host": "rn-idle", "node": "rn-idle",
                                "reason": "nothing to do: no reboot pending, no maintenance left open"}]
    for name in NODES:
        node = lab.node_obj(name)
        assert not node["spec"].get("unschedulable"), name
        assert "kubegpu.io/maintenance" not in (node["metadata"].get("annotations") or {})
    # the sentinel went with the reboot (/run is a tmpfs); the pending kernel stays pending (the lab
    # node runs the host's kernel), as a node whose boot loader did not pick the new kernel would
    assert lab.ssh("rn-sentinel", "test -e /run/reboot-required", check=False).returncode != 0

    counts = dict((n, task_executions(res, n)) for n in NODES)
    print("task executions per node: %s" % counts)
    assert counts["rn-idle"] <= 4, counts   # the need check only (include_role, its argument check, 2 tasks)
    assert max(counts.values()) <= MAX_TASKS_PER_NODE, counts


def test_the_boot_loaders_default_decides_whatever_the_flavour(lab, ansible):
    """Another flavour set as default reboots the node; a newer kernel that is not the default
    does not, on the Debian, Ubuntu and RHEL layouts, through the rolling_reboot playbook."""
    for name in BOOT_NODES:
        wait_for(lambda n=name: (lab.pod("ml", "train-%s" % n) or {}).get("status", {}).get("phase") == "Running",
                 120, "train-%s Running" % name)
    release = lab.ssh("rn-debian-pinned", "uname -r").stdout.strip()
    before = boot_ids(lab, BOOT_NODES)

    res = ansible.playbook(PLAYBOOK, inventory=lab.inventory, env=ENV, timeout=1200,
                           extra_vars=dict(FAST, kubegpu_reboot="needed", kubegpu_max_unavailable=1,
                                           kubegpu_targets=":".join(BOOT_NODES)))
    assert res.rc == 0, (res.stdout + res.stderr)[-6000:]

    after = boot_ids(lab, BOOT_NODES)
    rebooted = sorted(n for n in BOOT_NODES if after[n] != before[n])
    assert rebooted == sorted(n for n in BOOT_NODES if BOOT[n][2]), (before, after)
    need = dict((n, res.task("kubegpu.fleet.rolling_reboot : Decide whether the node needs a reboot", host=n)["need"])
                for n in BOOT_NODES)
    for name in BOOT_NODES:
        layout, _boot, reboots = BOOT[name]
        kernel = need[name]["kernel"]
        assert kernel["running"] == release and kernel["basis"] == "boot loader", (name, kernel)
        assert kernel["entry"] is not None and kernel["entry"].startswith(TITLE[layout]), (name, kernel)
        if reboots:
            # the other flavour is the newest image and the default: /boot's flavour-aware
            # comparison alone would have found nothing newer of the running flavour
            other = kernel["next_kernel"]
            assert other != release and other in kernel["installed"] and other not in kernel["compared"], kernel
            assert need[name]["reboot"] is True and kernel["pending"] is True
            assert need[name]["reasons"] == ["the boot loader's default entry (%s) starts kernel %s (another flavour, "
                                             "newer), %s is running" % (kernel["entry"], other, release)], need[name]
        else:
            same = [r for r in kernel["installed"] if r != release and r in kernel["compared"]]
            assert len(same) == 2 and kernel["newest"] != release, kernel   # the older one and the pending one
            assert kernel["next_kernel"] == release and kernel["pending"] is False
            assert need[name]["reboot"] is False and need[name]["pending_reasons"] == [], need[name]
            assert re.match(r"^the boot loader's default entry \(.+\) starts the running kernel %s: a reboot would "
                            r"start it again \(%s installed, not the default\)$"
                            % (re.escape(release), re.escape(kernel["newest"])), kernel["reason"]), kernel["reason"]
    plan = res.task("kubegpu.fleet.rolling_reboot : Plan the rollout")["ansible_facts"]["kubegpu_rollout"]
    assert sorted(plan["hosts"]) == sorted(n for n in BOOT_NODES if BOOT[n][2])
    assert sorted(s["host"] for s in plan["skipped"]) == sorted(n for n in BOOT_NODES if not BOOT[n][2])
    for name in BOOT_NODES:
        node = lab.node_obj(name)
        assert not node["spec"].get("unschedulable"), name
        assert "kubegpu.io/maintenance" not in (node["metadata"].get("annotations") or {})


def test_key_only_skip_label_keeps_every_role_away(lab, ansible):
    """The documented key-only kubegpu_skip_label (the label with any value) in the kubelet,
    driver and device_plugin roles, as remediate runs them (each role accepts it)."""
    lab.kubectl("label", "node", "rn-idle", "kubegpu.io/maintenance=until-friday", "--overwrite")
    role_vars = {"kubegpu_skip_label": "kubegpu.io/maintenance", "kubegpu_driver_drain": False}
    play = [{"hosts": "rn-idle", "gather_facts": False, "vars": role_vars, "tasks": [
        {"name": "kubelet", "ansible.builtin.include_role": {"name": "kubegpu.fleet.kubelet"}},
        {"name": "driver", "ansible.builtin.include_role": {"name": "kubegpu.fleet.driver"}},
        {"name": "device_plugin", "ansible.builtin.include_role": {"name": "kubegpu.fleet.device_plugin"}},
    ]}]
    try:
        res = ansible.playbook(play, inventory=lab.inventory, env=ENV, timeout=600)
    finally:
        lab.kubectl("label", "node", "rn-idle", "kubegpu.io/maintenance-")
    assert res.rc == 0, (res.stdout + res.stderr)[-4000:]
    said = [res.task("kubegpu.fleet.kubelet : Report a node with the skip label", host="rn-idle")["msg"],
            res.task("kubegpu.fleet.driver : Skip a node labelled for no maintenance", host="rn-idle")["msg"],
            res.task("kubegpu.fleet.device_plugin : Leave a node labelled for no maintenance alone",
                     host="rn-idle")["msg"]]
    assert all("rn-idle is labelled kubegpu.io/maintenance:" in m for m in said), said
    assert res.stats["rn-idle"]["changed"] == 0
