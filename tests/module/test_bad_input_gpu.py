# -*- coding: utf-8 -*-
"""Bad-input corpus for the GPU, driver, cgroup and audit modules.

Each module gets at least ten hostile or malformed inputs - empty, binary, huge, deeply nested,
FIFO, symlink loop, wrong option types, non-UTF-8, out-of-range options - run through the real
``ansible-playbook`` on localhost, one play per module with one task per input
(``ignore_errors``). For every input:

* no traceback: no ``exception``, no ``module_stderr``, no "Traceback" anywhere in the result;
* no hang: the play returns. The modules' own timeouts bound every wait; the subprocess
  timeout of the runner is only a safety net (it fails the test, it is not a measurement);
* a clear ``msg`` when the task fails, naming what was wrong;
* the files the module was pointed at are intact byte for byte (sha256 before and after;
  FIFOs, symlinks and directories by kind and target).

The node side is a temp tree (``proc_path``, ``dev_path``, ``driver_root``, ``cgroup_root``)
plus fake commands on the task's PATH (dpkg-query, apt-cache, dpkg, nvidia-smi) written as
shell scripts: a command that never returns, one that prints non-UTF-8 bytes or 40 MB, an
nvidia-smi that daemonises a ``sleep`` (which must be gone by pid once the module returned).
"""
from __future__ import absolute_import, division, print_function

import hashlib
import json
import os
import stat

import pytest

from lib.procs import alive

HARNESS_ENV = {"ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.json"}
# Safety net only: far above what the modules' own deadlines allow on a loaded machine.
PLAY_TIMEOUT = 1200
VERSION = "570.172.08"
BUS = "0000:3b:00.0"
UID = "0f1c2d3e-4a5b-4c6d-8e9f-a0b1c2d3e4f5"
NVRM = ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  %s  Tue Jul  8 18:30:54 UTC 2025\n"
        "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n" % VERSION)
DEVICES = ("Character devices:\n  1 mem\n195 nvidia\n195 nvidiactl\n 511 nvidia-uvm\n"
           "\nBlock devices:\n  7 loop\n")
MODULES = ("nvidia_uvm 1982464 0 - Live 0x0000000000000000 (POE)\n"
           "nvidia 104071168 1 nvidia_uvm, Live 0x0000000000000000 (POE)\n")
INFO = ("Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 0\nGPU UUID: \t GPU-1b2c3d4e-0000-0000-0000-000000000000\n"
        "Device Minor: \t 0\nBus Location: \t %s\n" % BUS)
SMI_XML = ("<?xml version=\"1.0\" ?>\n<nvidia_smi_log><driver_version>%s</driver_version>"
           "<cuda_version>12.8</cuda_version><attached_gpus>1</attached_gpus>"
           "<gpu id=\"00000000:3B:00.0\"><product_name>NVIDIA H100 80GB HBM3</product_name>"
           "<uuid>GPU-1b2c3d4e-0000-0000-0000-000000000000</uuid><minor_number>0</minor_number>"
           "<mig_mode><current_mig>Disabled</current_mig><pending_mig>Disabled</pending_mig></mig_mode>"
           "</gpu></nvidia_smi_log>\n" % VERSION)
# Nesting carried through the playbook's YAML and the module's JSON arguments: deep enough to show
# nothing here walks it recursively, shallow enough for PyYAML (recursive) to load the playbook.
# Deeper nesting that only a module parses (nvidia-smi XML) goes to 100,000 levels below.
DEPTH = 100


# ------------------------------------------------------------------------------ helpers

def write(path, data, mode=0o644):
    path = str(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode("utf-8"))
    os.chmod(path, mode)
    return path


def fifo(path):
    path = str(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    os.mkfifo(path)
    return path


def sparse(path, size):
    """A file of ``size`` bytes that costs no disk (a hostile "huge" file)."""
    path = str(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.truncate(size)
    return path


def loop(path):
    """A symlink loop (a -> b -> a) at ``path``."""
    path = str(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    os.symlink(path + ".b", path)
    os.symlink(path, path + ".b")
    return path


def swap(path, make):
    """Replace the file at ``path`` by what ``make(path)`` creates (a FIFO, a huge file...)."""
    os.remove(path)
    make(path)


def huge(path):
    return sparse(path, 50 << 20)


def script(path, body):
    return write(path, "#!/bin/sh\n" + body + "\n", mode=0o755)


def snapshot(root):
    """Kind and content of everything under ``root``: sha256 of regular files, link targets,
    and the kind of FIFOs, sockets, devices and directories (never opened)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(str(root)):
        if dirpath == str(root):  # the runner's own files (playbook, Ansible temp dirs)
            dirnames[:] = [d for d in dirnames if not d.startswith(".ansible")]
            filenames = [f for f in filenames if f != "playbook.yml"]
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                out[path] = "link:" + os.readlink(path)
            elif stat.S_ISREG(st.st_mode):
                h = hashlib.sha256()
                with open(path, "rb") as f:
                    for chunk in iter(lambda: f.read(1 << 20), b""):
                        h.update(chunk)
                out[path] = "file:%d:%s" % (st.st_size, h.hexdigest())
            elif stat.S_ISDIR(st.st_mode):
                out[path] = "dir"
            else:
                out[path] = "special:%o" % stat.S_IFMT(st.st_mode)
    return out


def nested_list(depth, leaf="x"):
    value = leaf
    for _level in range(depth):
        value = [value]
    return value


def nested_dict(depth, leaf="x"):
    value = leaf
    for _level in range(depth):
        value = {"a": value}
    return value


def assert_clean(case, res):
    """No traceback anywhere, and a failure says what failed."""
    blob = json.dumps(res)
    assert "Traceback" not in blob, (case, blob[:3000])
    # ansible-core 2.19 marks every failed result with this placeholder; a real one is a traceback.
    assert res.get("exception") in (None, "(traceback unavailable)"), (case, res.get("exception"))
    assert "module_stderr" not in res, (case, res.get("module_stderr"))
    assert "module_stdout" not in res or not res.get("failed"), (case, res.get("module_stdout"))
    if res.get("failed"):
        assert isinstance(res.get("msg"), str) and res["msg"].strip(), (case, res)


def run_cases(ansible, module, cases, env=None):
    """One play, one task per case (``ignore_errors``); returns {case id: result}."""
    tasks = []
    for cid, args, task_env in cases:
        task = {"name": cid, "kubegpu.fleet." + module: args, "ignore_errors": True}
        if task_env:
            task["environment"] = task_env
        tasks.append(task)
    res = ansible.playbook([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}],
                           env=dict(HARNESS_ENV, **(env or {})), timeout=PLAY_TIMEOUT)
    out = {}
    for cid, _args, _env in cases:
        r = res.task(cid)
        assert_clean(cid, r)
        out[cid] = r
    return out


def gpu_node(base, smi=None):
    """A one-GPU node tree under ``base``: proc, dev, driver root (with ``smi`` as nvidia-smi)."""
    base = str(base)
    proc = os.path.join(base, "proc")
    write(os.path.join(proc, "devices"), DEVICES)
    write(os.path.join(proc, "modules"), MODULES)
    write(os.path.join(proc, "driver", "nvidia", "version"), NVRM)
    write(os.path.join(proc, "driver", "nvidia", "gpus", BUS, "information"), INFO)
    os.makedirs(os.path.join(base, "dev"))
    root = os.path.join(base, "driver")
    os.makedirs(os.path.join(root, "usr", "bin"))
    if smi is not None:
        script(os.path.join(root, "usr", "bin", "nvidia-smi"), smi)
    return {"proc_path": proc, "dev_path": os.path.join(base, "dev"), "driver_root": root}


def smi_printing(tmp_path, name, data):
    """nvidia-smi body that prints the bytes of ``data`` (kept in a file beside the tree)."""
    path = write(tmp_path / "smi-output" / name, data)
    return "cat '%s'" % path


# ------------------------------------------------------------------------------ gpu_facts

def test_gpu_facts_bad_inputs(ansible, tmp_path):
    cases = []
    trees = {}

    def node(cid, smi=None, args=None):
        trees[cid] = gpu_node(tmp_path / cid, smi)
        a = dict(trees[cid], backend="nvidia_smi", timeout=5)
        a.update(args or {})
        cases.append((cid, a, None))
        return trees[cid]

    n = node("empty_procfs")
    for rel in ("devices", "modules", "driver/nvidia/version"):
        write(os.path.join(n["proc_path"], rel), b"")
    n = node("binary_procfs")
    for rel in ("devices", "modules", "driver/nvidia/version",
                "driver/nvidia/gpus/%s/information" % BUS):
        write(os.path.join(n["proc_path"], rel), os.urandom(4096))
    n = node("huge_modules")
    os.remove(os.path.join(n["proc_path"], "modules"))
    sparse(os.path.join(n["proc_path"], "modules"), 50 << 20)
    n = node("fifo_devices")
    os.remove(os.path.join(n["proc_path"], "devices"))
    fifo(os.path.join(n["proc_path"], "devices"))
    n = node("fifo_information")
    os.remove(os.path.join(n["proc_path"], "driver/nvidia/gpus", BUS, "information"))
    fifo(os.path.join(n["proc_path"], "driver/nvidia/gpus", BUS, "information"))
    n = node("loop_version")
    os.remove(os.path.join(n["proc_path"], "driver/nvidia/version"))
    loop(os.path.join(n["proc_path"], "driver/nvidia/version"))
    n = node("dangling_gpu_link")
    os.symlink("/nonexistent/kubegpu-gone", os.path.join(n["proc_path"], "driver/nvidia/gpus",
                                                         "0000:3c:00.0"))
    n = node("directory_modules")
    os.remove(os.path.join(n["proc_path"], "modules"))
    os.makedirs(os.path.join(n["proc_path"], "modules"))
    n = node("unreadable_procfs_no_driver")
    for rel in ("devices", "modules"):
        os.remove(os.path.join(n["proc_path"], rel))
        fifo(os.path.join(n["proc_path"], rel))
    os.remove(os.path.join(n["proc_path"], "driver/nvidia/version"))
    node("smi_version_abc", smi=smi_printing(tmp_path, "abc", SMI_XML.replace(VERSION, "abc")))
    node("smi_non_utf8", smi=smi_printing(
        tmp_path, "latin1", SMI_XML.encode("utf-8").replace(b"HBM3", b"HBM3 \xff\xfe\xe9")))
    node("smi_deeply_nested_xml", smi=smi_printing(
        tmp_path, "nested", SMI_XML.replace("</nvidia_smi_log>", "<x>" * 100000 + "</x>" * 100000
                                            + "</nvidia_smi_log>")))
    node("smi_binary", smi=smi_printing(tmp_path, "binary", os.urandom(65536)))
    node("smi_huge_output", smi="head -c 40000000 /dev/zero")
    node("smi_never_returns", smi="exec sleep 300", args={"timeout": 2})
    base = dict(gpu_node(tmp_path / "opts"), backend="nvidia_smi")
    for cid, extra in (("timeout_1e300", {"timeout": 1e300}), ("timeout_nan", {"timeout": "nan"}),
                       ("timeout_negative", {"timeout": -1}), ("timeout_wrong_type", {"timeout": [1]}),
                       ("backend_wrong", {"backend": {"a": 1}}),
                       ("proc_path_missing", {"proc_path": str(tmp_path / "nope")}),
                       ("dev_path_is_fifo", {"dev_path": fifo(tmp_path / "devfifo")})):
        cases.append((cid, dict(base, **extra), None))

    before = snapshot(tmp_path)
    res = run_cases(ansible, "gpu_facts", cases)
    assert snapshot(tmp_path) == before
    assert len(cases) >= 10

    def facts(cid):
        r = res[cid]
        assert not r.get("failed"), (cid, r.get("msg"))
        return r["ansible_facts"]["nvidia"]

    # The kernel module still counts from what could be read; what could not is said.
    f = facts("empty_procfs")
    assert f["present"] is False and f["kernel_module_version"] is None
    assert facts("binary_procfs")["kernel_module_version"] is None
    f = facts("huge_modules")
    assert any("modules" in w and "more than" in w for w in f["warnings"]), f["warnings"]
    f = facts("fifo_devices")
    assert any("devices is a FIFO" in w for w in f["warnings"]), f["warnings"]
    f = facts("fifo_information")
    assert f["gpu_count"] == 0
    assert any("not counted as a GPU" in w and "FIFO" in w for w in f["warnings"]), f["warnings"]
    f = facts("loop_version")
    assert f["kernel_module_version"] is None
    assert any("symlink loop" in w for w in f["warnings"]), f["warnings"]
    # A dangling link under gpus/ is not a GPU; the real one still is.
    f = facts("dangling_gpu_link")
    assert f["gpu_count"] == 1 and f["gpus"][0]["pci_bus_id"] == BUS
    assert any("0000:3c:00.0 is not counted as a GPU" in w for w in f["warnings"]), f["warnings"]
    assert any("0000:3c:00.0" in w for w in res["dangling_gpu_link"]["warnings"])
    f = facts("directory_modules")
    assert any("modules is not a regular file" in w or "modules is a directory" in w
               for w in f["warnings"]), f["warnings"]
    # present: false, but never silently when procfs could not be read.
    f = facts("unreadable_procfs_no_driver")
    assert f["present"] is False
    assert any("present is false" in w for w in f["warnings"]), f["warnings"]
    # A driver version that is no version is not believed.
    f = facts("smi_version_abc")
    assert f["driver_version"] is None and f["probe"]["status"] == "error"
    assert "'abc'" in f["probe"]["error"]
    f = facts("smi_non_utf8")
    assert f["probe"]["status"] == "ok" and f["driver_version"] == VERSION
    assert "\ufffd" in f["gpus"][0]["name"]
    assert facts("smi_deeply_nested_xml")["driver_version"] == VERSION
    assert facts("smi_binary")["probe"]["status"] == "error"
    f = facts("smi_huge_output")
    assert f["probe"]["status"] == "error" and "printed more than" in f["probe"]["error"]
    assert facts("smi_never_returns")["probe"]["status"] == "hung"
    for cid, text in (("timeout_1e300", "timeout must be between"), ("timeout_nan", "got nan"),
                      ("timeout_negative", "got -1"), ("timeout_wrong_type", "timeout"),
                      ("backend_wrong", "backend"), ("proc_path_missing", "proc_path"),
                      ("dev_path_is_fifo", "dev_path")):
        assert res[cid].get("failed"), cid
        assert text in res[cid]["msg"], (cid, res[cid]["msg"])


def test_daemonised_grandchild_of_nvidia_smi_is_killed(ansible, tmp_path):
    """nvidia-smi that double-forks a ``sleep`` into its own session (setsid): the sleep does
    not outlive the module, whether nvidia-smi answers or hangs. Checked by pid."""
    pids = {}
    cases = []
    for cid, tail in (("answers", "cat '%s'" % write(tmp_path / "xml", SMI_XML)),
                      ("hangs", "exec sleep 300")):
        pidfile = str(tmp_path / ("%s.pid" % cid))
        pids[cid] = pidfile
        # The subshell forks the background job and exits; setsid (not a group leader here)
        # execs sleep in a new session: a daemon reparented away from nvidia-smi.
        body = ("( setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $! > '%s' )\n"
                "while [ ! -s '%s' ]; do :; done\n%s" % (pidfile, pidfile, tail))
        n = gpu_node(tmp_path / cid, smi=body)
        cases.append((cid, dict(n, backend="nvidia_smi", timeout=5 if cid == "answers" else 2), None))
    res = run_cases(ansible, "gpu_facts", cases)
    assert res["answers"]["ansible_facts"]["nvidia"]["probe"]["status"] == "ok"
    assert res["hangs"]["ansible_facts"]["nvidia"]["probe"]["status"] == "hung"
    for cid, pidfile in pids.items():
        with open(pidfile) as f:
            pid = int(f.read().strip())
        assert pid > 1
        assert not alive(pid), "%s: daemonised sleep %d is still running" % (cid, pid)


# ------------------------------------------------------------------------------ driver_guard

DPKG_ROWS = "nvidia-driver-570\t570.124.06-0ubuntu1\tii \tamd64\n"


def fake_bin(tmp_path, name, tools):
    """A directory with fake tools (``{tool: sh body}``) put first on the task's PATH."""
    d = tmp_path / ("bin-%s" % name)
    for tool, body in tools.items():
        script(d / tool, body)
    return {"PATH": "%s:/usr/sbin:/usr/bin:/sbin:/bin" % d}


def test_driver_guard_bad_inputs(ansible, tmp_path):
    proc = tmp_path / "proc"
    write(proc / "driver" / "nvidia" / "version", NVRM)
    known = {"driver_version": VERSION, "mig_mixed": False, "mig_enabled": False,
             "gpu_names": ["NVIDIA H100 80GB HBM3"], "proc_path": str(proc), "timeout": 5,
             "command_timeout": 20}
    out = write(tmp_path / "dpkg-out" / "latin1", (DPKG_ROWS + "nvidia-utils-570\t570.124.06\tii \tamd64\n")
                .encode("utf-8").replace(b"utils-570", b"utils-\xe9\xff570"))
    cases = [
        ("dpkg_non_utf8", dict(known), fake_bin(tmp_path, "latin1", {"dpkg-query": "cat '%s'" % out})),
        ("dpkg_never_returns", dict(known, command_timeout=2),
         fake_bin(tmp_path, "hang", {"dpkg-query": "exec sleep 300"})),
        ("dpkg_binary", dict(known), fake_bin(tmp_path, "binary", {
            "dpkg-query": "cat '%s'" % write(tmp_path / "dpkg-out" / "bin", os.urandom(65536))})),
        ("dpkg_empty", dict(known), fake_bin(tmp_path, "empty", {"dpkg-query": "exit 0"})),
        ("dpkg_huge", dict(known), fake_bin(tmp_path, "huge", {
            "dpkg-query": "head -c 40000000 /dev/zero"})),
    ]
    fproc = tmp_path / "fifo-proc"
    fifo(fproc / "driver" / "nvidia" / "version")
    lproc = tmp_path / "loop-proc"
    loop(lproc / "driver" / "nvidia" / "version")
    cases += [
        ("version_fifo", dict(known, driver_version=None, proc_path=str(fproc), driver_root=str(tmp_path)),
         fake_bin(tmp_path, "ok1", {"dpkg-query": "exit 0"})),
        ("version_symlink_loop", dict(known, kernel_module_version=None, proc_path=str(lproc)),
         fake_bin(tmp_path, "ok2", {"dpkg-query": "exit 0"})),
        ("timeout_1e300", dict(known, timeout=1e300), None),
        ("timeout_nan", dict(known, timeout="nan"), None),
        ("command_timeout_negative", dict(known, command_timeout=-1), None),
        ("driver_version_abc", dict(known, driver_version="abc"), None),
        ("driver_version_binary", dict(known, driver_version="\x00\x01\x7f"), None),
        ("catalog_extra_nested", dict(known, catalog_extra=nested_list(DEPTH)), None),
        ("catalog_extra_wrong_type", dict(known, catalog_extra=5), None),
        ("gpu_names_wrong_type", dict(known, gpu_names={"a": {"b": 1}}), None),
    ]
    pin_dir = tmp_path / "pins"
    pref = fifo(pin_dir / "kubegpu.pref")
    dnf_conf = write(pin_dir / "dnf.conf", b"[main]\ngpgcheck=1\n# \xff\xfe not UTF-8\n")
    cases += [
        ("pin_target_is_fifo", dict(known, state="pinned", package_manager="apt", validate_pins=False,
                                    apt_preferences_path=pref), fake_bin(tmp_path, "ok3", {"dpkg-query": "exit 0"})),
        ("pin_target_not_utf8", dict(known, state="pinned", package_manager="dnf", dnf_conf_path=dnf_conf),
         fake_bin(tmp_path, "ok4", {"dpkg-query": "exit 0"})),
    ]
    before = snapshot(tmp_path)
    res = run_cases(ansible, "driver_guard", cases)
    assert snapshot(tmp_path) == before
    assert len(cases) >= 10

    r = res["dpkg_non_utf8"]
    assert not r.get("failed"), r.get("msg")
    names = [p["name"] for p in r["packages"]]
    assert "nvidia-driver-570" in names and any("\ufffd" in n for n in names), names
    r = res["dpkg_never_returns"]
    assert not r.get("failed"), r.get("msg")
    assert "did not finish within 2s" in r["package_query_error"]
    assert not res["dpkg_binary"].get("failed"), res["dpkg_binary"].get("msg")
    assert res["dpkg_empty"]["packages"] == []
    assert "printed more than" in res["dpkg_huge"]["package_query_error"]
    r = res["version_fifo"]
    assert any("is a FIFO" in w for w in r["detection"]["warnings"]), r["detection"]
    assert any("is a FIFO" in w for w in r.get("warnings", []))
    r = res["version_symlink_loop"]
    assert r["kernel_module_version"] is None
    assert any("symlink loop" in w for w in r["detection"]["warnings"]), r["detection"]
    for cid, text in (("timeout_1e300", "timeout must be between"), ("timeout_nan", "got nan"),
                      ("command_timeout_negative", "command_timeout must be between"),
                      ("driver_version_abc", "'abc'"), ("driver_version_binary", "driver_version"),
                      ("catalog_extra_nested", "catalog_extra"), ("catalog_extra_wrong_type", "catalog_extra"),
                      ("gpu_names_wrong_type", "gpu_names"), ("pin_target_is_fifo", "FIFO"),
                      ("pin_target_not_utf8", "utf-8")):
        assert res[cid].get("failed"), cid
        assert text in res[cid]["msg"], (cid, res[cid]["msg"])


# ------------------------------------------------------------------------ driver_upgrade_plan

def test_driver_upgrade_plan_bad_inputs(ansible, tmp_path):
    if not os.path.exists("/var/lib/dpkg/status"):
        pytest.skip("driver_upgrade_plan reads the host's dpkg database (none here)")
    dpkg = "if [ \"$1\" = --print-architecture ]; then echo amd64; else exit 2; fi"
    rows = write(tmp_path / "rows", DPKG_ROWS)
    ok_query = "cat '%s'" % rows
    madison = write(tmp_path / "madison", " nvidia-driver-570 | 570.172.08-0ubuntu1 | http://x noble/main amd64 Packages\n")
    plan = {"version": VERSION, "command_timeout": 20, "compute_utils": False}

    def tools(name, query=ok_query, apt_cache="cat '%s'" % madison):
        return fake_bin(tmp_path, name, {"dpkg-query": query, "apt-cache": apt_cache, "dpkg": dpkg})

    latin1 = write(tmp_path / "latin1", (DPKG_ROWS + "nvidia-utils-570\t570.124.06\tii \tamd64\n")
                   .encode("utf-8").replace(b"utils-570", b"utils-\xe9\xff570"))
    fproc = tmp_path / "fifo-proc"
    fifo(fproc / "driver" / "nvidia" / "version")
    cases = [
        ("apt_cache_never_returns", dict(plan, command_timeout=2), tools("hang", apt_cache="exec sleep 300")),
        ("dpkg_query_never_returns", dict(plan, command_timeout=2), tools("qhang", query="exec sleep 300")),
        ("dpkg_query_non_utf8", dict(plan), tools("latin1", query="cat '%s'" % latin1)),
        ("apt_cache_binary", dict(plan), tools("abin", apt_cache="cat '%s'" % write(
            tmp_path / "abin", os.urandom(65536)))),
        ("apt_cache_empty", dict(plan), tools("aempty", apt_cache="exit 0")),
        ("apt_cache_huge", dict(plan), tools("ahuge", apt_cache="head -c 40000000 /dev/zero")),
        ("proc_version_fifo", dict(plan, proc_path=str(fproc)), tools("pfifo")),
        ("command_timeout_1e300", dict(plan, command_timeout=1e300), tools("o1")),
        ("command_timeout_nan", dict(plan, command_timeout="nan"), tools("o2")),
        ("command_timeout_negative", dict(plan, command_timeout=-1), tools("o3")),
        ("version_abc", dict(plan, version="abc"), tools("o4")),
        ("branch_wrong_type", dict(plan, version=None, branch="five-seventy"), tools("o5")),
        ("fixed_releases_nested", dict(plan, version=None, branch=570,
                                       fixed_releases=[nested_list(DEPTH)]), tools("o6")),
        ("dnf_module_glob", dict(plan, package_manager="dnf", dnf_module="*"), tools("o7")),
    ]
    before = snapshot(tmp_path)
    res = run_cases(ansible, "driver_upgrade_plan", cases)
    assert snapshot(tmp_path) == before
    r = res["apt_cache_never_returns"]
    assert r["failed"] and "apt-cache madison failed (rc=124)" in r["msg"] and "within 2s" in r["msg"], r["msg"]
    r = res["dpkg_query_never_returns"]
    assert r["failed"] and "did not finish within 2s" in r["msg"], r["msg"]
    r = res["dpkg_query_non_utf8"]
    assert not r.get("failed"), r.get("msg")
    assert r["target_version"] == VERSION
    assert "printed more than" in res["apt_cache_huge"]["msg"]
    r = res["proc_version_fifo"]
    assert any("is a FIFO" in w for w in r.get("warnings", [])), r
    for cid, text in (("command_timeout_1e300", "command_timeout must be between"),
                      ("command_timeout_nan", "got nan"), ("command_timeout_negative", "got -1"),
                      ("version_abc", "abc"), ("branch_wrong_type", "branch"),
                      ("dnf_module_glob", "dnf_module must be a package name")):
        assert res[cid].get("failed"), cid
        assert text in res[cid]["msg"], (cid, res[cid]["msg"])
    for cid in ("apt_cache_binary", "apt_cache_empty"):
        assert res[cid].get("failed") and res[cid]["msg"], cid  # no candidate at the target


# ------------------------------------------------------------------------------ cgroup_devices

def cgroup_node(base, devices_list):
    """A node tree with one GPU container whose devices.list is ``devices_list`` (bytes, or a
    callable that creates the file itself). Returns the module args (mode list)."""
    base = str(base)
    n = gpu_node(base)
    leaf = os.path.join(base, "cg", "devices", "kubepods.slice", "kubepods-besteffort.slice",
                        "kubepods-besteffort-pod%s.slice" % UID.replace("-", "_"), "cri-containerd-ab12.scope")
    os.makedirs(leaf)
    path = os.path.join(leaf, "devices.list")
    if callable(devices_list):
        devices_list(path)
    else:
        write(path, devices_list)
    write(os.path.join(leaf, "cgroup.procs"), b"")
    return {"cgroup_root": os.path.join(base, "cg"), "proc_path": n["proc_path"], "dev_path": n["dev_path"],
            "mode": "list"}, leaf


def test_cgroup_devices_bad_inputs(ansible, tmp_path):
    cases = []
    leaves = {}

    def add(cid, devices_list, extra=None, prep=None):
        args, leaf = cgroup_node(tmp_path / cid, devices_list)
        leaves[cid] = leaf
        if prep:
            prep(args, leaf)
        args.update(extra or {})
        cases.append((cid, args, None))

    good = b"c 195:* rwm\nc 511:* rwm\n"
    add("devices_list_huge", lambda p: sparse(p, 50 << 20))
    add("devices_list_fifo", fifo)
    add("devices_list_binary", b"\x00\x01\x02\xff\xfe" * 1000)
    add("devices_list_empty", b"")
    add("devices_list_symlink_loop", loop)
    add("devices_list_directory", os.makedirs)
    add("devices_list_non_utf8", b"c 195:* rwm\nc \xff\xfe:0 rw\n")
    add("devices_list_privileged", b"a *:* rwm\n")
    add("proc_devices_fifo", good, prep=lambda a, _l: swap(os.path.join(a["proc_path"], "devices"), fifo))
    add("proc_devices_huge", good, prep=lambda a, _l: swap(os.path.join(a["proc_path"], "devices"), huge))
    add("cgroup_procs_fifo", good, prep=lambda _a, l: swap(os.path.join(l, "cgroup.procs"), fifo))
    add("information_fifo", good, prep=lambda a, _l: swap(
        os.path.join(a["proc_path"], "driver/nvidia/gpus", BUS, "information"), fifo))
    add("probe_timeout_1e300", good, extra={"probe_timeout": 1e300})
    add("probe_timeout_nan", good, extra={"probe_timeout": "nan"})
    add("probe_timeout_negative", good, extra={"probe_timeout": -1})
    add("mode_wrong_type", good, extra={"mode": ["list"]})
    before = snapshot(tmp_path)
    res = run_cases(ansible, "cgroup_devices", cases)
    assert snapshot(tmp_path) == before

    def container(cid):
        r = res[cid]
        assert not r.get("failed"), (cid, r.get("msg"))
        assert len(r["containers"]) == 1, (cid, r["containers"])
        return r["containers"][0]

    err = container("devices_list_huge")["error"]
    assert "too large to be a devices.list" in err and "parse" not in err, err
    assert "is a FIFO" in container("devices_list_fifo")["error"]
    assert "line 1" in container("devices_list_binary")["error"]
    assert container("devices_list_empty")["error"] is None
    assert "symlink loop" in container("devices_list_symlink_loop")["error"]
    assert "not a regular file" in container("devices_list_directory")["error"] \
        or "directory" in container("devices_list_directory")["error"]
    assert "line 2" in container("devices_list_non_utf8")["error"]
    c = container("devices_list_privileged")
    assert c["error"] is None and c["allow_all"] is True and not c["broken"]
    assert container("cgroup_procs_fifo")["error"] is None
    assert container("information_fifo")["error"] is None
    for cid, text in (("proc_devices_fifo", "is a FIFO"), ("proc_devices_huge", "more than"),
                      ("probe_timeout_1e300", "probe_timeout must be between"),
                      ("probe_timeout_nan", "got nan"), ("probe_timeout_negative", "got -1"),
                      ("mode_wrong_type", "mode")):
        assert res[cid].get("failed"), cid
        assert text in res[cid]["msg"], (cid, res[cid]["msg"])


# ------------------------------------------------------------------------------ audit_node

def test_audit_node_bad_inputs(ansible, tmp_path):
    cases = []

    def add(cid, prep=None, extra=None, devices_list=b"c 195:* rwm\nc 511:* rwm\n"):
        args, leaf = cgroup_node(tmp_path / cid, devices_list)
        a = {"proc_path": str(tmp_path / "kproc"), "nvidia_proc_path": args["proc_path"],
             "dev_path": args["dev_path"], "driver_root": os.path.join(str(tmp_path / cid), "driver"),
             "cgroup_root": args["cgroup_root"], "cgroup_mode": "list", "backend": "nvidia_smi",
             "timeout": 5, "kubelet_config_path": str(tmp_path / "no-kubelet.yaml")}
        if prep:
            prep(a, leaf)
        a.update(extra or {})
        cases.append((cid, a, None))

    os.makedirs(str(tmp_path / "kproc"))
    add("gpu_facts_fails", extra={"dev_path": str(tmp_path / "missing-dev")})
    add("proc_devices_fifo", prep=lambda a, _l: swap(os.path.join(a["nvidia_proc_path"], "devices"), fifo))
    add("proc_modules_huge", prep=lambda a, _l: swap(os.path.join(a["nvidia_proc_path"], "modules"), huge))
    add("version_binary", prep=lambda a, _l: write(os.path.join(a["nvidia_proc_path"], "driver/nvidia/version"),
                                                   b"NVRM \xff\xfe\x00" + os.urandom(512)))
    add("dangling_gpu_link", prep=lambda a, _l: os.symlink(
        "/nonexistent", os.path.join(a["nvidia_proc_path"], "driver/nvidia/gpus/0000:3c:00.0")))
    add("devices_list_huge", devices_list=lambda p: sparse(p, 50 << 20))
    add("devices_list_loop", devices_list=loop)
    add("no_driver_unreadable_procfs", prep=lambda a, _l: [
        (os.remove(os.path.join(a["nvidia_proc_path"], rel)), fifo(os.path.join(a["nvidia_proc_path"], rel)))
        for rel in ("devices", "modules")] + [os.remove(os.path.join(a["nvidia_proc_path"], "driver/nvidia/version"))])
    add("catalog_extra_nested", extra={"catalog_extra": nested_dict(DEPTH)})
    add("catalog_extra_wrong_type", extra={"catalog_extra": "not a catalog"})
    add("timeout_1e300", extra={"timeout": 1e300})
    add("timeout_nan", extra={"timeout": "nan"})
    add("timeout_negative", extra={"timeout": -1})
    add("cgroup_mode_wrong", extra={"cgroup_mode": {"x": 1}})
    before = snapshot(tmp_path)
    res = run_cases(ansible, "audit_node", cases)
    assert snapshot(tmp_path) == before

    def probes(cid):
        r = res[cid]
        assert not r.get("failed"), (cid, r.get("msg"))
        for name in ("gpu_facts", "driver_guard", "cgroup_devices"):
            assert "exception" not in r["probes"][name], (cid, name, r["probes"][name])
        return r["probes"]

    # gpu_facts failed: the skip reason says so and why, never "no NVIDIA driver present".
    p = probes("gpu_facts_fails")
    assert p["gpu_facts"]["failed"]
    reason = p["cgroup_devices"]["skip_reason"]
    assert reason.startswith("gpu_facts failed") and "missing-dev" in reason, reason
    # No driver found, but procfs was unreadable: the reason says that too.
    p = probes("no_driver_unreadable_procfs")
    reason = p["cgroup_devices"]["skip_reason"]
    assert "no NVIDIA driver present" in reason and "FIFO" in reason, reason
    p = probes("proc_devices_fifo")
    assert any("FIFO" in w for w in p["gpu_facts"]["ansible_facts"]["nvidia"]["warnings"])
    p = probes("proc_modules_huge")
    assert any("more than" in w for w in p["gpu_facts"]["ansible_facts"]["nvidia"]["warnings"])
    assert probes("version_binary")["gpu_facts"]["ansible_facts"]["nvidia"]["kernel_module_version"] is None
    assert probes("dangling_gpu_link")["gpu_facts"]["ansible_facts"]["nvidia"]["gpu_count"] == 1
    c = probes("devices_list_huge")["cgroup_devices"]["containers"][0]
    assert "too large" in c["error"]
    c = probes("devices_list_loop")["cgroup_devices"]["containers"][0]
    assert "symlink loop" in c["error"]
    for cid in ("catalog_extra_nested", "catalog_extra_wrong_type"):
        p = probes(cid)
        assert p["driver_guard"]["failed"] and "catalog_extra" in p["driver_guard"]["msg"], cid
        assert not p["gpu_facts"].get("failed"), cid
    for cid, text in (("timeout_1e300", "timeout must be between"), ("timeout_nan", "got nan"),
                      ("timeout_negative", "got -1"), ("cgroup_mode_wrong", "cgroup_mode")):
        assert res[cid].get("failed"), cid
        assert text in res[cid]["msg"], (cid, res[cid]["msg"])


# ------------------------------------------------------------------------------ controller side

def _node(name="gpu-1", **over):
    n = {"metadata": {"name": name, "uid": "n-1", "labels": {"nvidia.com/gpu.present": "true"}},
         "spec": {},
         "status": {"conditions": [{"type": "Ready", "status": "True"}],
                    "allocatable": {"nvidia.com/gpu": "8"}, "nodeInfo": {"bootID": "b-1"}}}
    n.update(over)
    return n


def _pod(name, node="gpu-1", **over):
    p = {"metadata": {"name": name, "namespace": "ml", "uid": "u-" + name,
                      "creationTimestamp": "2026-11-22T05:00:00Z"},
         "spec": {"nodeName": node, "containers": [{"name": "c", "image": "cuda"}]},
         "status": {"phase": "Pending"}}
    p.update(over)
    return p


def test_audit_cluster_malformed_api_objects(ansible):
    dp = {"metadata": {"name": "nvdp", "namespace": "kube-system"},
          "spec": {"template": {"spec": {"containers": [{"image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0",
                                                         "env": ["PASS_DEVICE_SPECS=true", None]}]}}}}
    cases = [
        ("metadata_null", {"nodes": [_node(), {"metadata": None, "status": {}}], "pods": []}),
        ("metadata_list", {"nodes": [_node(), {"metadata": ["gpu-2"]}], "pods": [_pod("a", metadata=[1])]}),
        ("status_string", {"nodes": [_node(status="Ready")], "pods": [_pod("a", status="Pending")]}),
        ("conditions_dict", {"nodes": [_node(status={"conditions": {"type": "Ready"}})], "pods": []}),
        ("containers_string", {"nodes": [_node()], "pods": [_pod("a", spec={"nodeName": "gpu-1",
                                                                            "containers": "cuda"})]}),
        ("node_name_int", {"nodes": [_node()], "pods": [_pod("a", spec={"nodeName": 7})]}),
        ("labels_list_alloc_int_keys", {"nodes": [_node(metadata={"name": "gpu-1", "labels": ["a"]},
                                                        status={"allocatable": {1: 2, "nvidia.com/gpu": 1}})],
                                        "pods": []}),
        ("events_strings", {"nodes": [_node()], "pods": [_pod("a")],
                            "events": [{"involvedObject": "Pod/a", "source": "kubelet"},
                                       {"reportingComponent": 5, "regarding": []}]}),
        ("deeply_nested", {"nodes": [_node()], "pods": [_pod("a", metadata={
            "name": "a", "namespace": "ml", "uid": "u-a", "annotations": {"x": json.dumps(nested_list(DEPTH))},
            "labels": nested_dict(DEPTH)})]}),
        ("control_characters", {"nodes": [_node(name="gpu-\x01\u202e")],
                                "pods": [_pod("\x00\x7f", node="gpu-\x01\u202e")]}),
        ("bad_times", {"nodes": [_node()], "pods": [_pod("a", metadata={
            "name": "a", "namespace": "ml", "uid": "u-a", "creationTimestamp": "0001-01-01T00:00:00-23:59"}),
            _pod("b", metadata={"name": "b", "namespace": "ml", "uid": "u-b", "creationTimestamp": ["x"]})]}),
        ("daemonset_env_strings", {"nodes": [_node()], "pods": [], "daemonsets": [dp, {"spec": "x"}]}),
        ("nodes_not_a_list", {"nodes": "gpu-1", "pods": []}),
        ("pods_wrong_elements", {"nodes": [_node()], "pods": ["a", 1]}),
    ]
    res = run_cases(ansible, "audit_cluster", [(cid, args, None) for cid, args in cases])

    def view(cid):
        r = res[cid]
        assert not r.get("failed"), (cid, r.get("msg"))
        return r["cluster"]

    v = view("metadata_null")
    assert list(v["nodes"]) == ["gpu-1"] and any("metadata is missing" in m for m in v["malformed"])
    v = view("metadata_list")
    assert any("metadata is a list" in m for m in v["malformed"]), v["malformed"]
    v = view("status_string")
    n = v["nodes"]["gpu-1"]
    assert n["ready"] is None and any("status is a string" in m for m in n["malformed"]), n["malformed"]
    assert any("pod ml/a" in m for m in n["malformed"]) and n["pods"][0]["phase"] is None
    assert view("conditions_dict")["nodes"]["gpu-1"]["malformed"]
    n = view("containers_string")["nodes"]["gpu-1"]
    assert n["pending_pods"][0]["name"] == "a" and any("containers is a string" in m for m in n["malformed"])
    v = view("node_name_int")
    assert v["nodes"]["gpu-1"]["pods"] == [] and any("nodeName is a number" in m for m in v["malformed"])
    n = view("labels_list_alloc_int_keys")["nodes"]["gpu-1"]
    assert n["labels"] == {} and n["allocatable"] == {"nvidia.com/gpu": 1}
    assert view("events_strings")["malformed"] == []
    assert view("deeply_nested")["nodes"]["gpu-1"]["pods"][0]["name"] == "a"
    assert "gpu-\x01\u202e" in view("control_characters")["nodes"]
    n = view("bad_times")["nodes"]["gpu-1"]
    assert [p["name"] for p in n["pending_pods"]] == ["a", "b"] and n["pending_pods"][1]["pending_seconds"] is None
    assert view("daemonset_env_strings")["device_plugin_daemonsets"][0]["pass_device_specs"] is None
    for cid in ("nodes_not_a_list", "pods_wrong_elements"):
        assert res[cid].get("failed") and ("nodes" in res[cid]["msg"] or "pods" in res[cid]["msg"]), cid


def test_audit_evaluate_malformed_node_results(ansible):
    cases = [
        ("probe_string", {"nvidia": {"present": True, "probe": "hung"}}),
        ("device_nodes_string", {"nvidia": {"present": True, "device_nodes": "nvidia-uvm"}}),
        ("matches_strings", {"driver_guard": {"verdict": "known_bad", "matches": ["r570", 1, None],
                                              "compute_utils": "yes"}}),
        ("pending_seconds_text", {"api": {"pending_pods": [{"name": "a", "pending_seconds": "lots"}, "b"]}}),
        ("memory_text", {"kubelet": {"memory": {"reserved_total_bytes": "1Gi",
                                                "recommended_reserved_bytes": "2Gi"}}}),
        ("containers_dict", {"cgroups": {"containers": {"gpu": True}}}),
        ("errors_int_keys", {"errors": {1: "x", "gpu_facts": None}}),
        ("deeply_nested", {"nvidia": nested_dict(DEPTH), "kubelet": {"allocation_log": nested_dict(DEPTH)}}),
        ("binary_text", {"nvidia": {"present": True, "device_nodes": [{"name": "nvidia-uvm", "exists": True}],
                                    "probe": {"status": "error", "error": "\x00\x01\ufffd\u202e"}}}),
        ("pending_threshold_negative", {"pending_threshold": -1}),
        ("memory_min_fraction_nan", {"memory_min_fraction": "nan"}),
        ("memory_min_fraction_inf", {"memory_min_fraction": "inf"}),
        ("skip_wrong_type", {"skip": {"a": 1}}),
        ("nvidia_wrong_type", {"nvidia": ["not", "a", "dict"]}),
    ]
    res = run_cases(ansible, "audit_evaluate", [(cid, dict(args, node="gpu-1"), None) for cid, args in cases])

    def ids(cid):
        """The findings the malformed values gave: audit.not_inspected (the node's coverage: these
        contexts carry no GPU or driver a probe saw; tests/unit/.../audit/test_coverage.py) aside."""
        r = res[cid]
        assert not r.get("failed"), (cid, r.get("msg"))
        return [f["id"] for f in r["findings"] if f["id"] != "audit.not_inspected"]

    assert "nvml.hung" not in ids("probe_string")
    assert ids("device_nodes_string") == ["uvm.node_missing"]
    assert "driver.known_bad" in ids("matches_strings")
    assert ids("pending_seconds_text") == []
    assert ids("memory_text") == []
    assert ids("containers_dict") == []
    assert ids("errors_int_keys") == ["audit.module_failed", "audit.module_failed"]
    assert ids("deeply_nested") == []
    assert ids("binary_text") == ["nvml.error"]
    for cid, text in (("pending_threshold_negative", "pending_threshold"),
                      ("memory_min_fraction_nan", "memory_min_fraction"),
                      ("memory_min_fraction_inf", "memory_min_fraction"),
                      ("skip_wrong_type", "skip"), ("nvidia_wrong_type", "nvidia")):
        assert res[cid].get("failed"), cid
        assert text in res[cid]["msg"], (cid, res[cid]["msg"])
