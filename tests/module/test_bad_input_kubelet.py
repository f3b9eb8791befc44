# -*- coding: utf-8 -*-
"""Bad-input corpus for kubelet_facts, kubelet_config and checkpoint_sync.

Every hostile or malformed input goes through the real module (ansible-playbook on localhost,
one playbook per module with one task per input and ``ignore_errors``). For each input the
module must come back - a hang fails the test through the playbook's hard subprocess timeout,
which is generous; the modules' own deadlines are what bound them - with a clean result: a
``msg`` when it failed, no ``module_stderr`` (a traceback), no ``exception`` beyond the
placeholder ansible-core 2.19 adds to every failure, and every file of the corpus intact byte
for byte (sha256 before and after) unless the case says it is the one file to change.
"""
import hashlib
import json
import os
import socket
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tests", "fixtures", "kubelet"))

from kubelet_fakeproc import FakeProc  # noqa: E402  pylint: disable=wrong-import-position

ENV = {"ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.json"}
HARD_TIMEOUT = 900  # the whole playbook; a module that hangs fails the test here
GIB = 1 << 30

CONFIG = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 110\n"
# 361 bytes, as in the issue: eight levels of nine aliases, 43 million nodes once expanded
# (kubelet_facts spent 8.6 s and 129 MB on such a file and returned 11.6 MB before).
ALIAS_BOMB = ("kind: KubeletConfiguration\n"
              "a: &a [lol,lol,lol,lol,lol,lol,lol,lol,lol]\n"
              + "".join("%s: &%s [%s]\n" % (n, n, ",".join(["*" + p] * 9))
                        for p, n in zip("abcdefg", "bcdefgh")))
ALIAS_BOMB += "#" * (360 - len(ALIAS_BOMB)) + "\n"
NESTED_YAML = "kind: KubeletConfiguration\nx:\n" + "".join(
    " " * i + "k:\n" for i in range(1, 2000)) + " " * 2000 + "v: 1\n"
NESTED_FLOW = "kind: KubeletConfiguration\nx: " + "[" * 20000 + "]" * 20000 + "\n"
NESTED_JSON = '{"kind": "KubeletConfiguration", "x": ' + "[" * 100000 + "]" * 100000 + "}"
NON_UTF8 = b"kind: KubeletConfiguration\nclusterDomain: caf\xe9.local\n\xff\xfe\n"
BINARY = bytes(range(256)) * 16
CHECKPOINT = json.dumps({"Data": {"PodDeviceEntries": None,
                                  "RegisteredDevices": {"nvidia.com/gpu": ["GPU-aaaa"]}},
                         "Checksum": 1})


def sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class Corpus(object):
    """Hostile files in a root-owned 0755 directory (so writers would be allowed to act)."""

    def __init__(self, tmp_path):
        self.dir = tmp_path / "corpus"
        self.dir.mkdir(mode=0o755)
        os.chmod(str(tmp_path), 0o755)
        self.files = {}
        self.sockets = []

    def text(self, name, data):
        return self.raw(name, data.encode("utf-8"))

    def raw(self, name, data):
        path = str(self.dir / name)
        with open(path, "wb") as f:
            f.write(data)
        self.files[path] = None
        return path

    def sparse(self, name, size):
        path = str(self.dir / name)
        with open(path, "wb") as f:
            f.write(b"kind: KubeletConfiguration\n")
            f.truncate(size)
        self.files[path] = None
        return path

    def fifo(self, name):
        path = str(self.dir / name)
        os.mkfifo(path)
        return path

    def loop(self, name):
        path = str(self.dir / name)
        os.symlink(path, path)
        return path

    def sock(self, name):
        path = str(self.dir / name)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(path)
        self.sockets.append(s)
        return path

    def subdir(self, name):
        path = self.dir / name
        path.mkdir(mode=0o755)
        return str(path)

    def snapshot(self):
        for path in self.files:
            self.files[path] = sha(path)
        return dict(self.files)

    def check_intact(self, before, allow=()):
        changed = [p for p, digest in before.items() if p not in allow and sha(p) != digest]
        assert changed == [], "files changed: %s" % changed
        for path in self.files:
            stray = [n for n in os.listdir(os.path.dirname(path))
                     if n.startswith(os.path.basename(path) + ".") and n.endswith(".bak")
                     or n.startswith("." + os.path.basename(path) + ".")]
            if path not in allow:
                assert stray == [], "left behind beside %s: %s" % (path, stray)

    def close(self):
        for s in self.sockets:
            s.close()


@pytest.fixture
def corpus(tmp_path):
    c = Corpus(tmp_path)
    yield c
    c.close()


def run_cases(ansible, module, cases, check=False):
    """One playbook, one task per case; returns ``{case name: result}``."""
    tasks = []
    for name, args in cases:
        tasks.append({"name": name, "kubegpu.fleet.%s" % module: args, "ignore_errors": True})
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]
    try:
        res = ansible.playbook(play, env=ENV, check=check, timeout=HARD_TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail("%s did not return within %ds on the corpus (a hang)" % (module, HARD_TIMEOUT))
    out = {}
    for name, _args in cases:
        out[name] = res.task(name)
    return out


def assert_clean(name, res):
    assert "module_stderr" not in res, (name, res.get("module_stderr"))
    assert res.get("exception", "(traceback unavailable)") == "(traceback unavailable)", (name, res)
    assert "Traceback" not in json.dumps(res), name
    if res.get("failed"):
        assert isinstance(res.get("msg"), str) and res["msg"], (name, res)


def failed_with(results, name, *words):
    res = results[name]
    assert_clean(name, res)
    assert res.get("failed") is True, (name, res)
    for word in words:
        assert word in res["msg"], (name, word, res["msg"])
    return res


def ok(results, name):
    res = results[name]
    assert_clean(name, res)
    assert not res.get("failed"), (name, res)
    return res


# --------------------------------------------------------------------------- kubelet_facts

def _fake_node(tmp_path, config):
    fp = FakeProc(tmp_path / "node")
    fp.set_meminfo(64 * GIB)
    fp.add_process(4242, ["/usr/bin/kubelet", "--config=%s" % config, "--v=2"])
    return fp


def test_kubelet_facts_corpus(ansible, tmp_path, corpus):
    files = {
        "empty": corpus.text("empty.yaml", ""),
        "binary": corpus.raw("binary.yaml", BINARY),
        "huge": corpus.sparse("huge.yaml", (4 << 20) + 1),
        "nested-yaml": corpus.text("nested.yaml", NESTED_YAML),
        "nested-flow": corpus.text("nested-flow.yaml", NESTED_FLOW),
        "nested-json": corpus.text("nested.json", NESTED_JSON),
        "non-utf8": corpus.raw("latin1.yaml", NON_UTF8),
        "alias-bomb": corpus.text("bomb.yaml", ALIAS_BOMB),
        "fifo": corpus.fifo("fifo.yaml"),
        "loop": corpus.loop("loop.yaml"),
        "socket": corpus.sock("sock.yaml"),
        "list": corpus.text("list.yaml", "- kind\n- KubeletConfiguration\n"),
    }
    assert len(ALIAS_BOMB) == 361
    # a fake /proc whose files are hostile too: a FIFO cmdline, meminfo and status
    hostile = FakeProc(tmp_path / "hostile")
    d = hostile.add_process(77, ["/usr/bin/kubelet"])
    for name in ("cmdline", "status"):
        os.unlink(os.path.join(d, name))
        os.mkfifo(os.path.join(d, name))
    os.mkfifo(os.path.join(hostile.path, "meminfo"))
    via_flag = _fake_node(tmp_path, files["alias-bomb"])
    base = {"scan_journal": False, "timeout": 5}
    cases = [("config %s" % k, dict(base, proc_path=via_flag.path, config_path=v))
             for k, v in files.items()]
    cases += [
        ("bomb via the kubelet's --config", dict(base, proc_path=via_flag.path)),
        ("hostile proc tree", dict(base, proc_path=hostile.path)),
        ("proc_path is a FIFO", dict(base, proc_path=files["fifo"])),
        ("proc_path is a list", dict(base, proc_path=[1, 2])),
        ("config_path is a directory", dict(base, config_path=str(corpus.dir))),
        ("config_path relative", dict(base, config_path="etc/kubelet.yaml")),
        ("config_path with dotdot", dict(base, config_path="/etc/../etc/kubelet.yaml")),
        ("timeout 1e300", dict(base, timeout=1e300)),
        ("timeout -1", dict(base, timeout=-1)),
        ("timeout nan", dict(base, timeout="nan")),
        ("timeout text", dict(base, timeout="soon")),
        ("journal_unit glob", dict(base, journal_unit="*")),
        ("journal_unit option", dict(base, journal_unit="--all")),
        ("kubelet_package option", dict(base, kubelet_package="--admindir=/tmp")),
        ("journal_since control chars", dict(base, scan_journal=True, journal_since="-2h\n-x")),
        ("scan_journal not a bool", dict(base, scan_journal="perhaps")),
    ]
    before = corpus.snapshot()
    results = run_cases(ansible, "kubelet_facts", cases)
    corpus.check_intact(before)
    assert len(cases) >= 10

    def config_error(name):
        res = ok(results, name)
        return res["ansible_facts"]["kubelet"]["config_error"]

    assert config_error("config empty").endswith("empty.yaml is empty")
    assert "is not UTF-8 text" in config_error("config binary")
    assert "more than the %d bytes" % (4 << 20) in config_error("config huge")
    assert "nested" in config_error("config nested-yaml")
    assert "nested" in config_error("config nested-flow")
    assert "nested" in config_error("config nested-json")
    assert "is not UTF-8 text" in config_error("config non-utf8")
    assert "anchors and aliases" in config_error("config alias-bomb")
    assert "bomb.yaml" in config_error("config alias-bomb")
    assert "is a FIFO; refusing to read it" in config_error("config fifo")
    assert "symlink loop" in config_error("config loop")
    assert "sock.yaml is not a regular file" in config_error("config socket")
    assert "holds a list" in config_error("config list")
    bomb = ok(results, "bomb via the kubelet's --config")
    assert "anchors and aliases" in bomb["ansible_facts"]["kubelet"]["config_error"]
    assert len(json.dumps(bomb)) < 64 << 10        # no 11.6 MB result
    facts = ok(results, "hostile proc tree")["ansible_facts"]["kubelet"]
    assert facts["running"] is False and facts["node_memory_bytes"] is None
    failed_with(results, "proc_path is a FIFO", "is not a directory")
    failed_with(results, "proc_path is a list")
    failed_with(results, "config_path is a directory", "is a directory")
    failed_with(results, "config_path relative", "must be an absolute path")
    failed_with(results, "config_path with dotdot", "must not contain '..'")
    for name in ("timeout 1e300", "timeout -1", "timeout nan"):
        failed_with(results, name, "timeout must be between")
    failed_with(results, "timeout text", "timeout")
    failed_with(results, "journal_unit glob", "journal_unit must be a systemd unit name", "'*'")
    failed_with(results, "journal_unit option", "journal_unit must be a systemd unit name")
    failed_with(results, "kubelet_package option", "kubelet_package must be a package name")
    failed_with(results, "journal_since control chars", "journal_since must be")
    failed_with(results, "scan_journal not a bool", "scan_journal")
    assert not os.path.exists(via_flag.executed_marker)


# --------------------------------------------------------------------------- kubelet_config

def test_kubelet_config_corpus(ansible, tmp_path, corpus):
    good = corpus.text("good.yaml", CONFIG)
    files = {
        "empty": corpus.text("empty.yaml", ""),
        "binary": corpus.raw("binary.yaml", BINARY),
        "huge": corpus.sparse("huge.yaml", (4 << 20) + 1),
        "nested-yaml": corpus.text("nested.yaml", NESTED_YAML),
        "nested-flow": corpus.text("nested-flow.yaml", NESTED_FLOW),
        "nested-json": corpus.text("nested.json", NESTED_JSON),
        "non-utf8": corpus.raw("latin1.yaml", NON_UTF8),
        "alias-bomb": corpus.text("bomb.yaml", ALIAS_BOMB),
        "fifo": corpus.fifo("fifo.yaml"),
        "loop": corpus.loop("loop.yaml"),
        "socket": corpus.sock("sock.yaml"),
    }
    writable = corpus.text("group-writable.yaml", CONFIG)
    os.chmod(writable, 0o664)
    coerced = corpus.text("coerced.yaml", CONFIG)
    fp = _fake_node(tmp_path, files["alias-bomb"])
    base = {"proc_path": fp.path, "flag_files": [], "unit_dropin_dirs": [],
            "settings": {"maxPods": 64}}
    cases = [("file %s" % k, dict(base, path=v)) for k, v in files.items()]
    cases += [
        ("bomb via the kubelet's --config", dict((k, v) for k, v in base.items())),
        ("path is a directory", dict(base, path=corpus.subdir("dir.yaml"))),
        ("group-writable target", dict(base, path=writable)),
        ("settings key=value coerced", dict(base, path=coerced,
                                            settings="maxPods=7 failSwapOn=false "
                                                     "syncFrequency=1m0s")),
        ("settings maxPods not a number", dict(base, path=good, settings="maxPods=lots")),
        ("settings maxPods 1e300", dict(base, path=good, settings={"maxPods": 1e300})),
        ("settings maxPods out of int32", dict(base, path=good, settings="maxPods=99999999999")),
        ("settings bool not a bool", dict(base, path=good, settings={"failSwapOn": "maybe"})),
        ("settings duration an int", dict(base, path=good, settings={"syncFrequency": 60})),
        ("settings a list", dict(base, path=good, settings=[1, 2])),
        ("settings nested 70 deep", dict(base, path=good, settings=json.loads(
            '{"x": ' + '{"k": ' * 70 + "1" + "}" * 70 + "}"))),
        ("node_memory_bytes -1", dict(base, path=good,
                                      memory_reservation={"node_memory_bytes": -1})),
        ("kube_reserved nonsense", dict(base, path=good,
                                        memory_reservation={"kube_reserved": "1e300Qi",
                                                            "node_memory_bytes": GIB})),
        ("kubelet_unit glob", dict(base, path=good, kubelet_unit="kube*")),
        ("flag_files dotdot", dict(base, path=good, flag_files=["/etc/../etc/default/kubelet"])),
        ("proc_path relative", dict(base, path=good, proc_path="proc")),
        ("path with NUL", dict(base, path="/etc/kubelet\x00.yaml")),
    ]
    before = corpus.snapshot()
    results = run_cases(ansible, "kubelet_config", cases)
    corpus.check_intact(before, allow=[coerced])
    for name in results:
        assert results[name].get("changed") is not True or name == "settings key=value coerced", \
            (name, results[name])

    failed_with(results, "file empty", "holds nothing")
    failed_with(results, "file binary", "not UTF-8 text")
    failed_with(results, "file huge", "more than the %d bytes" % (4 << 20))
    failed_with(results, "file nested-yaml", "cannot parse", "nested")
    failed_with(results, "file nested-flow", "cannot parse", "nested")
    failed_with(results, "file nested-json", "cannot parse", "nested")
    failed_with(results, "file non-utf8", "not UTF-8 text (byte 45)")
    failed_with(results, "file alias-bomb", "cannot parse %s" % files["alias-bomb"],
                "anchors and aliases")
    failed_with(results, "file fifo", "is a FIFO; refusing to read it")
    failed_with(results, "file loop", "symlink loop")
    failed_with(results, "file socket", "sock.yaml is not a regular file")
    failed_with(results, "bomb via the kubelet's --config", "anchors and aliases")
    failed_with(results, "path is a directory", "is a directory")
    failed_with(results, "group-writable target", "refusing to edit %s" % writable,
                "writable by group (mode 0664)")
    res = ok(results, "settings key=value coerced")
    assert res["changed"] is True
    assert res["config"]["maxPods"] == 7 and res["config"]["failSwapOn"] is False
    with open(coerced) as f:
        text = f.read()
    assert "maxPods: 7\n" in text and "failSwapOn: false\n" in text
    assert "syncFrequency: 1m0s\n" in text
    failed_with(results, "settings maxPods not a number", "settings.maxPods must be an integer",
                "'lots'")
    failed_with(results, "settings maxPods 1e300", "settings.maxPods must be an integer")
    failed_with(results, "settings maxPods out of int32", "settings.maxPods must be an int32")
    failed_with(results, "settings bool not a bool", "settings.failSwapOn must be a boolean")
    failed_with(results, "settings duration an int", "settings.syncFrequency must be a duration")
    failed_with(results, "settings a list", "settings")
    failed_with(results, "settings nested 70 deep", "settings nest more than 63 levels")
    failed_with(results, "node_memory_bytes -1", "must be positive")
    failed_with(results, "kube_reserved nonsense", "1e300Qi")
    failed_with(results, "kubelet_unit glob", "kubelet_unit must be a systemd unit name")
    failed_with(results, "flag_files dotdot", "flag_files[0] must not contain '..'")
    failed_with(results, "proc_path relative", "proc_path")
    failed_with(results, "path with NUL")


def test_kubelet_config_disk_full_is_not_changed(ansible, tmp_path):
    """ENOSPC on the write: failed, changed false, the original byte for byte, no backup and
    no temp file left in the directory."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    try:
        subprocess.check_call(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0755", "tmpfs",
                               str(mnt)])
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip("cannot mount a tmpfs here: %s" % e)
    try:
        path = str(mnt / "config.yaml")          # ~20 KiB: its backup cannot fit
        with open(path, "w") as f:
            f.write(CONFIG + "# padding\n" * 2000)
        small = str(mnt / "small.yaml")          # its backup fits, the big rewrite does not
        with open(small, "w") as f:
            f.write(CONFIG)
        with open(str(mnt / "filler"), "wb") as f:
            f.write(b"\0" * (28 << 10))
        before = {path: sha(path), small: sha(small)}
        fp = FakeProc(tmp_path / "node")
        fp.set_meminfo(64 * GIB)
        base = {"proc_path": fp.path, "flag_files": [], "unit_dropin_dirs": []}
        big = {"maxPods": 64, "featureGates": dict(("Gate%d" % i, True) for i in range(4000))}
        results = run_cases(ansible, "kubelet_config", [
            ("backup on a full disk", dict(base, path=path, settings={"maxPods": 64})),
            ("no backup, rewrite on a full disk", dict(base, path=path, backup=False,
                                                       settings=big)),
            ("backup fits, rewrite does not", dict(base, path=small, settings=big)),
        ])
        for name in results:
            res = failed_with(results, name, "No space left on device", "nothing was changed")
            assert res["changed"] is False and res["restart_required"] is False, res
            assert res["backup_file"] is None and "diff" not in res
        msg = results["backup on a full disk"]["msg"]
        assert msg.startswith("cannot back up %s to %s." % (path, path)), msg
        assert "no backup was left behind" in msg
        assert results["no backup, rewrite on a full disk"]["msg"].startswith(
            "cannot write %s: No space left on device; the file keeps its previous content"
            % path)
        assert results["backup fits, rewrite does not"]["msg"].startswith(
            "cannot write %s: No space left on device" % small)
        assert dict((p, sha(p)) for p in before) == before
        assert sorted(os.listdir(str(mnt))) == ["config.yaml", "filler", "small.yaml"]
    finally:
        subprocess.call(["umount", "-l", str(mnt)])


# --------------------------------------------------------------------------- checkpoint_sync

def test_checkpoint_sync_corpus(ansible, tmp_path, corpus):
    files = {
        "empty": corpus.text("empty", ""),
        "binary": corpus.raw("binary", BINARY),
        "huge": corpus.sparse("huge", (64 << 20) + 1),
        "nested-json": corpus.text("nested", '{"Data": ' + "[" * 100000 + "]" * 100000 + "}"),
        "non-utf8": corpus.raw("latin1", b'{"Data": {"PodDeviceEntries": "caf\xe9"}}'),
        "alias-like": corpus.text("yaml", ALIAS_BOMB),
        "fifo": corpus.fifo("fifo"),
        "loop": corpus.loop("loop"),
        "socket": corpus.sock("sock"),
    }
    good = corpus.text("kubelet_internal_checkpoint", CHECKPOINT)
    shim = tmp_path / "shim"
    shim.mkdir()
    calls = tmp_path / "calls"
    (shim / "systemctl").write_text("#!/bin/sh\necho \"$*\" >> %s\n" % calls)
    os.chmod(str(shim / "systemctl"), 0o755)
    synced = {"device_ids": ["GPU-bbbb"], "state": "synced", "force": True}
    cases = [("file %s" % k, dict(synced, path=v)) for k, v in files.items()]
    cases += [
        ("path is a directory", dict(synced, path=corpus.subdir("dir"))),
        ("kubelet_service glob", dict(synced, path=good, kubelet_service="*")),
        ("kubelet_service option", dict(synced, path=good, kubelet_service="--all")),
        ("kubelet_service shell", dict(synced, path=good, kubelet_service="kubelet;reboot")),
        ("restart_timeout 1e300", dict(synced, path=good, restart_timeout=1e300)),
        ("restart_timeout -1", dict(synced, path=good, restart_timeout=-1)),
        ("restart_timeout nan", dict(synced, path=good, restart_timeout="nan")),
        ("device_ids a dict", dict(synced, path=good, device_ids={"a": 1})),
        ("device_ids blank", dict(synced, path=good, device_ids=["GPU-bbbb", " "])),
        ("resource_names blank", dict(synced, path=good, resource_names=[""])),
        ("path relative", dict(synced, path="device-plugins/kubelet_internal_checkpoint")),
        ("path dotdot", dict(synced, path="/var/lib/kubelet/../../etc/shadow")),
        ("state unknown", dict(synced, path=good, state="purged")),
    ]
    before = corpus.snapshot()
    env = dict(ENV, PATH="%s:%s" % (shim, os.environ.get("PATH", "/usr/bin:/bin")))
    tasks = [{"name": n, "kubegpu.fleet.checkpoint_sync": a, "ignore_errors": True}
             for n, a in cases]
    res = ansible.playbook([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}],
                           env=env, timeout=HARD_TIMEOUT)
    results = dict((n, res.task(n)) for n, _a in cases)
    # unparsable regular files are what force=true removes (after a backup): those are the
    # cases allowed to go; everything else is intact
    removed = [files[k] for k in ("empty", "binary", "nested-json", "non-utf8", "alias-like")]
    for path in removed:
        r = ok(results, "file %s" % [k for k, v in files.items() if v == path][0])
        assert r["changed"] is True and not os.path.exists(path)
        with open(r["backup_file"], "rb") as f:
            assert hashlib.sha256(f.read()).hexdigest() == before[path]
    corpus.files = dict((p, d) for p, d in corpus.files.items() if p not in removed)
    corpus.check_intact(dict((p, d) for p, d in before.items() if p not in removed))
    assert calls.read_text().splitlines() == ["restart kubelet"] * len(removed)

    failed_with(results, "file huge", "larger than any device checkpoint")
    failed_with(results, "file fifo", "not a regular file")
    failed_with(results, "file loop", "symlink loop")
    failed_with(results, "file socket", "not a regular file")
    failed_with(results, "path is a directory", "not a regular file")
    for name in ("kubelet_service glob", "kubelet_service option", "kubelet_service shell"):
        failed_with(results, name, "kubelet_service must be a systemd unit name")
    for name in ("restart_timeout 1e300", "restart_timeout -1", "restart_timeout nan"):
        failed_with(results, name, "restart_timeout must be between")
    failed_with(results, "device_ids a dict", "device_ids")
    failed_with(results, "device_ids blank", "device_ids[1] is empty")
    failed_with(results, "resource_names blank", "resource_names[0] is empty")
    failed_with(results, "path relative", "path must be an absolute path")
    failed_with(results, "path dotdot", "path must not contain '..'")
    failed_with(results, "state unknown", "state")
    assert os.path.exists(good) and sha(good) == before[good]


def test_checkpoint_sync_checked_corpus_never_touches(ansible, corpus):
    """state=checked over the same hostile files: a message each, nothing removed."""
    files = {
        "empty": corpus.text("empty", ""),
        "binary": corpus.raw("binary", BINARY),
        "nested-json": corpus.text("nested", '{"Data": ' + "{" * 100000 + "}" * 100000 + "}"),
        "non-utf8": corpus.raw("latin1", b"\xff\xfe{}"),
        "fifo": corpus.fifo("fifo"),
        "loop": corpus.loop("loop"),
        "huge": corpus.sparse("huge", (64 << 20) + 1),
    }
    cases = [(k, {"path": v, "device_ids": ["GPU-bbbb"], "force": True})
             for k, v in files.items()]
    before = corpus.snapshot()
    results = run_cases(ansible, "checkpoint_sync", cases)
    corpus.check_intact(before)
    for name, _args in cases:
        failed_with(results, name, files[name])
        assert results[name]["changed"] is False
