# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Shared pieces of the bench parts: machine description, CPU-accounted runs, the lab."""
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
VENV_BIN = os.path.join(REPO, ".venv", "bin")
PYTHON = os.path.join(VENV_BIN, "python") if os.path.exists(os.path.join(VENV_BIN, "python")) else sys.executable
COLLECTIONS = os.path.join(REPO, ".build", "collections")
LAB_ROOT = os.environ.get("KUBEGPU_LAB_ROOT", "/var/lib/kubegpu-lab")
# the lab puts each node in <unified>/kubegpu-lab/<lab>/<node> (lab/kubegpu_lab/cgroups.py)
CGROUP2 = "/sys/fs/cgroup/unified" if os.path.isdir("/sys/fs/cgroup/unified") else "/sys/fs/cgroup"


def log(msg):
    sys.stderr.write("bench: %s\n" % msg)
    sys.stderr.flush()


def machine():
    """nproc, memory, kernel, CPU model, Python and ansible-core versions."""
    model = None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = None
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) * 1024
    try:
        ansible_version = subprocess.run([os.path.join(VENV_BIN, "ansible"), "--version"], stdout=subprocess.PIPE,
                                         universal_newlines=True, check=False).stdout.splitlines()[0]
    except (OSError, IndexError):
        ansible_version = None
    return {"nproc": os.cpu_count(), "memory_bytes": mem, "kernel": platform.release(), "cpu_model": model,
            "python": platform.python_version(), "ansible": ansible_version,
            "loadavg_start": os.getloadavg()}


def ansible_env(**extra):
    env = dict(os.environ)
    env.update({
        "ANSIBLE_COLLECTIONS_PATH": COLLECTIONS,
        "ANSIBLE_HOST_KEY_CHECKING": "False",
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_NOCOLOR": "1",
        "PATH": VENV_BIN + os.pathsep + env.get("PATH", ""),
    })
    for k, v in extra.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = str(v)
    return env


def measured(cmd, env=None, logfile=None, cwd=REPO):
    """Run ``cmd`` under cpu_wrap.py; returns its result dict (rc, wall_s, user_s, sys_s, ...)."""
    fd, out = tempfile.mkstemp(prefix="bench-cpu-", suffix=".json")
    os.close(fd)
    try:
        with open(logfile or os.devnull, "w") as lf:
            # own process group: on Ctrl-C/SIGTERM the whole playbook tree is stopped, not orphaned
            proc = subprocess.Popen([sys.executable, os.path.join(HERE, "cpu_wrap.py"), out, "--"] + list(cmd),
                                    env=env, cwd=cwd, stdout=lf, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                rc = proc.wait()
            except BaseException:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                    proc.wait(timeout=10)
                except (OSError, subprocess.TimeoutExpired):
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                raise
        if rc != 0:
            raise RuntimeError("cpu_wrap failed (%d) for %s" % (rc, " ".join(cmd)))
        with open(out) as f:
            res = json.load(f)
    finally:
        os.unlink(out)
    res["cpu_s"] = res["user_s"] + res["sys_s"]
    res["main_cpu_s"] = res["main_user_s"] + res["main_sys_s"]
    return res


def median(values):
    return statistics.median(values) if values else None


def lab_cli(*args, check=True, capture=True):
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "lab"))
    proc = subprocess.run([PYTHON, "-m", "kubegpu_lab"] + list(args), env=env, cwd=REPO, check=False,
                          stdout=subprocess.PIPE if capture else None, stderr=subprocess.PIPE,
                          universal_newlines=True)
    if check and proc.returncode != 0:
        raise RuntimeError("kubegpu_lab %s failed (%d):\n%s" % (" ".join(args), proc.returncode,
                                                                proc.stderr[-4000:]))
    return proc


class Lab(object):
    """``with Lab(name, profile, nodes) as lab:`` boots a lab and always powers it down again
    (on failure, on Ctrl-C and on SIGTERM too)."""

    def __init__(self, name, profile, nodes):
        self.name, self.profile, self.nodes = name, profile, nodes
        self.status = None
        self.up_s = None

    @property
    def dir(self):
        return os.path.join(LAB_ROOT, self.name)

    @property
    def inventory(self):
        return os.path.join(self.dir, "inventory.yml")

    @property
    def kubeconfig(self):
        return os.path.join(self.dir, "kubeconfig")

    def __enter__(self):
        self._old_term = signal.signal(signal.SIGTERM, self._on_term)
        lab_cli("down", "--name", self.name, check=False)  # a leftover of an interrupted bench
        log("lab %s: up --profile %s --nodes %d" % (self.name, self.profile, self.nodes))
        t0 = time.monotonic()
        try:
            proc = lab_cli("up", "--profile", self.profile, "--nodes", str(self.nodes), "--name", self.name)
        except BaseException:
            self._down()
            raise
        self.up_s = time.monotonic() - t0
        self.status = json.loads(proc.stdout)
        log("lab %s: %d nodes up in %.0f s" % (self.name, self.nodes, self.up_s))
        return self

    def node_cpu_s(self):
        """CPU seconds used so far by every node of the lab (their cgroup2 cpu.stat), or None."""
        path = os.path.join(CGROUP2, "kubegpu-lab", self.name, "cpu.stat")
        try:
            with open(path) as f:
                for line in f:
                    if line.startswith("usage_usec "):
                        return int(line.split()[1]) / 1e6
        except OSError:
            return None
        return None

    def _on_term(self, signum, frame):
        raise KeyboardInterrupt("SIGTERM")

    def memory(self):
        st = json.loads(lab_cli("status", "--name", self.name, "--memory").stdout)
        per_node = [n.get("memory_bytes") for n in st.get("nodes", {}).values() if n.get("memory_bytes")]
        return {"nodes": len(per_node), "per_node_bytes": per_node,
                "mean_bytes": statistics.mean(per_node) if per_node else None,
                "max_bytes": max(per_node) if per_node else None}

    def _down(self):
        log("lab %s: down" % self.name)
        proc = lab_cli("down", "--name", self.name, check=False)
        if proc.returncode != 0:
            log("lab %s: down failed: %s" % (self.name, proc.stderr[-2000:]))

    def __exit__(self, *exc):
        try:
            self._down()
        finally:
            signal.signal(signal.SIGTERM, self._old_term)
        return False


def write_json(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def scratch(prefix):
    d = tempfile.mkdtemp(prefix="kubegpu-bench-%s-" % prefix)
    return d


def rmtree(path):
    shutil.rmtree(path, ignore_errors=True)


def md_table(columns, rows):
    out = ["| " + " | ".join(columns) + " |", "|" + "|".join(" --- " for _column in columns) + "|"]
    for r in rows:
        out.append("| " + " | ".join(str(c) for c in r) + " |")
    return "\n".join(out)
