"""Run kubegpu.fleet modules and playbooks through real ansible-playbook for tests."""
import json
import os
import subprocess
import sys

import yaml


def ensure_collection_tree(repo):
    """Link ``repo`` as ansible_collections/kubegpu/fleet under .build and return its root."""
    root = os.path.join(repo, ".build", "collections")
    ns_dir = os.path.join(root, "ansible_collections", "kubegpu")
    link = os.path.join(ns_dir, "fleet")
    os.makedirs(ns_dir, exist_ok=True)
    if not (os.path.islink(link) and os.path.realpath(link) == os.path.realpath(repo)):
        tmp = link + ".tmp%d" % os.getpid()
        os.symlink(repo, tmp)
        os.replace(tmp, link)
    return root


class PlaybookResult(object):
    """Parsed output of the ansible.posix.json callback."""

    def __init__(self, rc, data, stdout, stderr):
        self.rc = rc
        self.data = data
        self.stdout = stdout
        self.stderr = stderr

    def tasks(self, host="localhost"):
        out = []
        for play in self.data.get("plays", []):
            for task in play.get("tasks", []):
                res = task.get("hosts", {}).get(host)
                if res is not None:
                    res = dict(res)
                    res["_task"] = task["task"]["name"]
                    out.append(res)
        return out

    def task(self, name, host="localhost"):
        for res in self.tasks(host):
            if res["_task"] == name:
                return res
        raise KeyError("no task %r in %s" % (name, [t["_task"] for t in self.tasks(host)]))

    @property
    def stats(self):
        return self.data.get("stats", {})


class AnsibleRunner(object):
    def __init__(self, repo, collections_path, workdir):
        self.repo = repo
        self.collections_path = collections_path
        self.workdir = workdir
        self.python = sys.executable

    def env(self, extra=None):
        env = dict(os.environ)
        env.update({
            "ANSIBLE_COLLECTIONS_PATH": self.collections_path,
            "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
            "ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.json",
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_FORCE_COLOR": "0",
            "ANSIBLE_RETRY_FILES_ENABLED": "0",
            "ANSIBLE_LOCAL_TEMP": os.path.join(self.workdir, ".ansible-local"),
            "ANSIBLE_REMOTE_TEMP": os.path.join(self.workdir, ".ansible-remote"),
            "ANSIBLE_HOME": os.path.join(self.workdir, ".ansible-home"),
            "ANSIBLE_PYTHON_INTERPRETER": self.python,
            "ANSIBLE_DEPRECATION_WARNINGS": "0",
            "ANSIBLE_LOCALHOST_WARNING": "0",
            "ANSIBLE_INVENTORY_UNPARSED_WARNING": "0",
        })
        if extra:
            env.update(extra)
        return env

    def playbook(self, plays, check=False, diff=False, extra_vars=None, env=None,
                 inventory=None, timeout=600, args=()):
        """Run ``plays`` (a list of play dicts or a path) and return a PlaybookResult."""
        if isinstance(plays, str) and os.path.exists(plays):
            path = plays
        else:
            path = os.path.join(self.workdir, "playbook.yml")
            with open(path, "w") as f:
                yaml.safe_dump(plays, f, sort_keys=False)
        cmd = [os.path.join(os.path.dirname(self.python), "ansible-playbook"), path,
               "-i", inventory or "localhost,", "-c", "local" if inventory is None else "ssh"]
        if inventory is not None:
            cmd = cmd[:-2]
        if check:
            cmd.append("--check")
        if diff:
            cmd.append("--diff")
        if extra_vars:
            cmd += ["-e", json.dumps(extra_vars)]
        cmd += list(args)
        # stdin from /dev/null: never the runner's own (ansible refuses a non-blocking stdin, and one
        # killed run could leave a shared one so for every later run of the same worker).
        proc = subprocess.run(cmd, cwd=self.workdir, env=self.env(env), timeout=timeout, check=False,
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True)
        try:
            start = proc.stdout.index("{")
            data = json.loads(proc.stdout[start:])
        except ValueError:
            raise AssertionError("ansible-playbook printed no JSON (rc=%s)\nstdout:\n%s\nstderr:\n%s"
                                 % (proc.returncode, proc.stdout, proc.stderr))
        return PlaybookResult(proc.returncode, data, proc.stdout, proc.stderr)

    def module(self, name, args=None, check=False, diff=False, env=None, task_extra=None):
        """Run one module task on localhost; return its result dict (``_rc`` holds the exit)."""
        if "." not in name:
            name = "kubegpu.fleet." + name
        task = {"name": "under test", name: args or {}}
        if task_extra:
            task.update(task_extra)
        play = [{"hosts": "localhost", "gather_facts": False, "tasks": [task]}]
        res = self.playbook(play, check=check, diff=diff, env=env)
        out = res.task("under test")
        out["_rc"] = res.rc
        out["_stderr"] = res.stderr
        return out
