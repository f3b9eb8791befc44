# -*- coding: utf-8 -*-
"""An unprivileged impostor named ``kubelet`` beside a real-shaped kubelet.

Real processes, real procfs, the real modules through ansible-playbook. Both processes run in a
private PID namespace whose procfs is mounted for the test (``proc_path``), so the lab nodes'
kubelets that other tests run on this machine cannot interfere:

* the kubelet: a compiled stand-in in a root-owned 0755 directory, mode 0755, started as root
  with ``--config`` and ``--root-dir``;
* the impostor: the same kind of binary owned by ``nobody``, started as ``nobody`` (setpriv),
  with its own ``--config`` naming a root-owned file it wants rewritten and a ``--root-dir``.

Both binaries create a marker file when they are run by root or with ``--version``: the audit
must never execute them. systemd is not PID 1 on the test machine, so the root-owned-process
rule is what decides here (the systemd MainPID rule is covered in test_kubelet.py with a
stand-in systemctl).
"""
import hashlib
import os
import pwd
import shutil
import subprocess
import tempfile

import pytest

ENV = {"ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.json"}
NOBODY = pwd.getpwnam("nobody").pw_uid

STAND_IN_C = r"""
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* A kubelet-shaped process. Being run by root (the impostor is only ever started by nobody)
 * or with --version means an audit executed it: leave the marker and exit. */
int main(int argc, char **argv)
{
    int i, executed = TRIGGER_ON_ROOT && (getuid() == 0 || geteuid() == 0);
    for (i = 1; i < argc; i++)
        if (strcmp(argv[i], "--version") == 0)
            executed = 1;
    if (executed) {
        close(open(MARKER, O_WRONLY | O_CREAT, 0644));
        printf("Kubernetes v9.9.9\n");
        return 0;
    }
    printf("ready\n");
    fflush(stdout);
    alarm(600);              /* never outlives a crashed test by long */
    for (;;)
        pause();
}
"""

CONFIG = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 110\n"


def sha(path):
    with open(str(path), "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _need(*tools):
    for tool in tools:
        if shutil.which(tool) is None:
            pytest.skip("%s is not installed" % tool)
    if os.geteuid() != 0:
        pytest.skip("needs root (PID namespace, procfs mount, setpriv)")


def _compile(gcc, src, out, marker, trigger_on_root):
    subprocess.check_call([gcc, "-O1", "-o", str(out), "-DMARKER=\"%s\"" % marker,
                           "-DTRIGGER_ON_ROOT=%d" % trigger_on_root, str(src)])


class Namespace(object):
    """A PID namespace (its init is ``sleep``) with its procfs mounted at ``proc``."""

    def __init__(self, proc):
        self.proc = str(proc)
        self.procs = []
        self.holder = subprocess.Popen(
            ["unshare", "--pid", "--fork", "--kill-child", "sh", "-c", "echo ready; exec sleep 600"],
            stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
        assert self.holder.stdout.readline() == b"ready\n"
        self.init = int(open("/proc/%d/task/%d/children" % (self.holder.pid, self.holder.pid))
                        .read().split()[0])
        os.makedirs(self.proc)
        subprocess.check_call(["nsenter", "-t", str(self.init), "--pid", "--",
                               "mount", "-t", "proc", "proc", self.proc])

    def start(self, argv):
        """Start ``argv`` in the namespace; return once it has printed ``ready``."""
        p = subprocess.Popen(["nsenter", "-t", str(self.init), "--pid", "--"] + argv,
                             stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
        self.procs.append(p)
        assert p.stdout.readline() == b"ready\n"
        return p

    def pid_of(self, config):
        """The namespace pid of the process whose command line has ``--config=<config>``."""
        for name in os.listdir(self.proc):
            if name.isdigit():
                try:
                    with open(os.path.join(self.proc, name, "cmdline"), "rb") as f:
                        if ("--config=%s" % config).encode() in f.read().split(b"\0"):
                            return int(name)
                except (IOError, OSError):
                    pass
        return None

    def close(self):
        subprocess.call(["umount", "-l", self.proc])
        self.holder.kill()                 # --kill-child: the namespace's init and all in it die
        self.holder.wait()
        for p in self.procs:
            p.wait()
            p.stdout.close()
        self.holder.stdout.close()


@pytest.fixture
def scene(tmp_path):
    _need("unshare", "nsenter", "setpriv", "mount")
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        pytest.skip("no C compiler to build the stand-in binaries")
    src = tmp_path / "stand_in.c"
    src.write_text(STAND_IN_C)
    # nobody must reach its own binary: a 0755 directory under /tmp, not pytest's 0700 tmp_path
    shared = tempfile.mkdtemp(prefix="kubegpu-impostor-", dir="/tmp")
    os.chmod(shared, 0o755)
    s = type("Scene", (), {})()
    s.markers = [os.path.join(shared, "impostor-was-executed"),
                 str(tmp_path / "kubelet-was-executed")]
    # the real-shaped kubelet: root-owned, 0755, in a root-owned 0755 directory
    rootbin = tmp_path / "usr-bin"
    rootbin.mkdir(mode=0o755)
    s.kubelet = rootbin / "kubelet"
    _compile(gcc, src, s.kubelet, s.markers[1], 0)
    os.chmod(str(s.kubelet), 0o755)
    # the impostor: owned by nobody, in nobody's directory
    home = os.path.join(shared, "mallory")
    os.mkdir(home, 0o755)
    s.impostor = os.path.join(home, "kubelet")
    _compile(gcc, src, s.impostor, s.markers[0], 1)
    os.chmod(s.impostor, 0o755)
    os.chown(home, NOBODY, NOBODY)
    os.chown(s.impostor, NOBODY, NOBODY)
    # the kubelet's config, and the root-owned file the impostor wants root to rewrite
    etc = tmp_path / "etc-kubelet"
    etc.mkdir(mode=0o755)
    s.config = etc / "config.yaml"
    s.config.write_text(CONFIG)
    s.root_dir = str(tmp_path / "var-lib-kubelet")
    victim_dir = tmp_path / "etc-victim"
    victim_dir.mkdir(mode=0o755)
    s.victim = victim_dir / "precious.yaml"
    s.victim.write_text(CONFIG.replace("110", "5"))
    s.victim_sha = sha(s.victim)
    s.ns = Namespace(tmp_path / "nsproc")
    try:
        yield s
    finally:
        s.ns.close()
        shutil.rmtree(shared, ignore_errors=True)
        assert not any(os.path.exists(m) for m in s.markers), "a stand-in binary was executed"


def start_both(s, impostor_first):
    real = [str(s.kubelet), "--config=%s" % s.config, "--root-dir=%s" % s.root_dir, "--v=2"]
    evil = ["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY, "--clear-groups",
            s.impostor, "--config=%s" % s.victim, "--root-dir=/tmp/mallory-root",
            "--cpu-manager-policy=static"]
    for argv in ([evil, real] if impostor_first else [real, evil]):
        s.ns.start(argv)
    return s.ns.pid_of(s.config), s.ns.pid_of(s.victim)


def facts_of(ansible, s):
    res = ansible.module("kubelet_facts", {"proc_path": s.ns.proc, "scan_journal": False},
                         env=ENV)
    assert res["_rc"] == 0 and not res.get("failed"), res
    return res, res["ansible_facts"]["kubelet"]


def config_task(ansible, s, **args):
    base = {"proc_path": s.ns.proc, "flag_files": [], "unit_dropin_dirs": []}
    base.update(args)
    return ansible.module("kubelet_config", base, env=ENV)


@pytest.mark.parametrize("impostor_first", [True, False], ids=["impostor-first", "kubelet-first"])
def test_impostor_is_never_the_kubelet(ansible, scene, impostor_first):
    s = scene
    real_pid, evil_pid = start_both(s, impostor_first)
    assert real_pid and evil_pid

    res, facts = facts_of(ansible, s)
    assert facts["running"] is True and facts["pid"] == real_pid
    assert facts["identified_by"] == "root-owned"
    assert sorted(facts["pids"]) == sorted([real_pid, evil_pid])
    assert facts["flags"]["config"] == str(s.config)
    assert facts["root_dir"] == s.root_dir and facts["cpu_manager_policy"] == "none"
    assert facts["config_path"] == str(s.config) and facts["config"]["maxPods"] == 110
    assert facts["exe"] == str(s.kubelet)
    assert facts["impostors"] == [{"pid": evil_pid, "uid": NOBODY, "exe": s.impostor,
                                   "why": "runs as uid %d (effective %d), not root"
                                          % (NOBODY, NOBODY)}]
    warnings = " ".join(res.get("warnings", []))
    assert "process %d is named kubelet but is not the kubelet" % evil_pid in warnings
    # the version is never obtained by running a binary found through /proc
    assert facts["version_source"] is None or facts["version_source"].startswith("package:")
    assert not any(os.path.exists(m) for m in s.markers)

    # kubelet_config edits the identified kubelet's --config, never the impostor's
    res = config_task(ansible, s, settings={"maxPods": 64})
    assert res["_rc"] == 0 and res["changed"] is True, res
    assert res["path"] == str(s.config) and res["kubelet"]["pid"] == real_pid
    assert "maxPods: 64" in s.config.read_text()
    assert sha(s.victim) == s.victim_sha
    assert [i["pid"] for i in res["kubelet"]["impostors"]] == [evil_pid]


def test_kubelet_config_refuses_a_target_another_user_owns(ansible, scene):
    s = scene
    start_both(s, True)
    before = sha(s.config)
    os.chown(str(s.config), NOBODY, NOBODY)
    res = config_task(ansible, s, settings={"maxPods": 64})
    assert res["_rc"] != 0 and res["changed"] is False, res
    assert res["msg"].startswith("refusing to edit %s: %s is owned by uid %d, not root"
                                 % (s.config, s.config, NOBODY))
    assert sha(s.config) == before and sha(s.victim) == s.victim_sha
    assert sorted(os.listdir(str(s.config.parent))) == ["config.yaml"]   # no backup, no temp
    # the impostor's own file, named explicitly, is refused too
    res = config_task(ansible, s, path=s.impostor + ".yaml", settings={"maxPods": 1})
    assert res["_rc"] != 0 and not os.path.exists(s.impostor + ".yaml")
    with open(s.impostor + ".yaml", "w") as f:
        f.write(CONFIG)
    os.chown(s.impostor + ".yaml", NOBODY, NOBODY)
    res = config_task(ansible, s, path=s.impostor + ".yaml", settings={"maxPods": 1})
    assert res["_rc"] != 0 and "refusing to edit" in res["msg"], res
    assert "maxPods: 110" in open(s.impostor + ".yaml").read()


def test_impostor_alone_is_reported_and_never_used(ansible, scene):
    s = scene
    evil = ["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY, "--clear-groups",
            s.impostor, "--config=%s" % s.victim, "--root-dir=/tmp/mallory-root"]
    s.ns.start(evil)
    evil_pid = s.ns.pid_of(s.victim)
    _res, facts = facts_of(ansible, s)
    assert facts["running"] is False and facts["pid"] is None and facts["flags"] == {}
    assert facts["root_dir"] == "/var/lib/kubelet"
    assert [i["pid"] for i in facts["impostors"]] == [evil_pid]
    res = config_task(ansible, s, settings={"maxPods": 1})
    assert res.get("path") != str(s.victim), res
    assert sha(s.victim) == s.victim_sha
