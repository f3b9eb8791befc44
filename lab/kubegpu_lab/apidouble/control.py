"""Start, stop and talk to an API double from Python (tests, the lab CLI, fake kubelets).

    proc = ApiDoubleProcess(state_dir, seeds=["seed.yaml"]).start()
    proc.kubeconfig              # path for kubectl / kubernetes client / kubernetes.core
    proc.client.history()        # /_double/history entries
    proc.client.add_fault({"resource": "pods", "subresource": "eviction", "code": 429})
    proc.stop()                  # SIGTERM: persists state, frees the port, exits 0
"""
import json
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from urllib.parse import quote

LAB_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class DoubleError(Exception):
    def __init__(self, code, body):
        Exception.__init__(self, "API double answered %s: %s" % (code, body))
        self.code = code
        self.body = body


class DoubleClient(object):
    """Minimal authenticated HTTP client for the double's control and API paths."""

    def __init__(self, url, token, cafile=None, timeout=30.0):
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self._ctx = ssl.create_default_context(cafile=cafile) if url.startswith("https") else None

    @classmethod
    def from_state_dir(cls, state_dir, timeout=30.0):
        with open(os.path.join(state_dir, "server.json")) as fh:
            info = json.load(fh)
        with open(info["token_file"]) as fh:
            token = fh.read().strip()
        return cls(info["url"], token, cafile=info.get("ca_file"), timeout=timeout)

    def request(self, method, path, body=None, content_type="application/json", token=True, timeout=None):
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode("utf-8")
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", content_type)
        if token:
            req.add_header("Authorization", "Bearer " + (self.token if token is True else token))
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout, context=self._ctx) as resp:
                raw = resp.read()
                return resp.status, (json.loads(raw.decode("utf-8")) if raw.strip() else None)
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                payload = json.loads(raw.decode("utf-8"))
            except ValueError:
                payload = raw.decode("utf-8", "replace")
            return exc.code, payload

    def _ok(self, method, path, body=None, content_type="application/json"):
        code, payload = self.request(method, path, body, content_type)
        if code >= 300:
            raise DoubleError(code, payload)
        return payload

    def history(self, since=0, resource=None, name=None, actor=None, verb=None, nodes=True):
        """History entries with seq > since, optionally only one resource (``nodes``,
        ``daemonsets.apps``...), object name, actor (``api``, ``controller/daemonset``...) or verb;
        ``nodes=False`` leaves out each entry's per-node snapshot (the unavailable lists stay)."""
        query = "since=%d" % since
        if not nodes:
            query += "&nodes=false"
        for key, value in (("resource", resource), ("name", name), ("actor", actor), ("verb", verb)):
            if value:
                query += "&%s=%s" % (key, value)
        return self._ok("GET", "/_double/history?" + query)["items"]

    def reads(self, since=0, resource=None, name=None, verb=None, user_agent=None, wait=0.0):
        """get/list answers the double has served (seq > since), each with the resourceVersion the
        client saw; ``wait`` > 0 blocks in the double until one matches or ``wait`` seconds pass."""
        query = "since=%d&wait=%s" % (since, float(wait))
        for key, value in (("resource", resource), ("name", name), ("verb", verb), ("user_agent", user_agent)):
            if value:
                query += "&%s=%s" % (key, quote(value))
        code, payload = self.request("GET", "/_double/reads?" + query, timeout=float(wait) + self.timeout)
        if code >= 300:
            raise DoubleError(code, payload)
        return payload["items"]

    def wait_for_read(self, since=0, timeout=120.0, **filters):
        """The first read served after ``since`` that matches ``filters``; DoubleError after ``timeout``
        (a safety deadline: the caller waits for the event, not for a time)."""
        items = self.reads(since=since, wait=timeout, **filters)
        if not items:
            raise DoubleError(408, "no read matching %s after seq %d within %s s" % (filters, since, timeout))
        return items[0]

    def state(self):
        return self._ok("GET", "/_double/state")

    def faults(self):
        return self._ok("GET", "/_double/faults")["items"]

    def add_fault(self, rule):
        return self._ok("POST", "/_double/faults", rule)["items"]

    def clear_faults(self, rule_id=None):
        return self._ok("DELETE", "/_double/faults" + ("/" + rule_id if rule_id else ""))

    def load(self, manifests, replace=False):
        """Create objects from a list of dicts or a YAML string (existing names kept unless replace)."""
        if isinstance(manifests, str):
            body, ctype = manifests.encode("utf-8"), "application/yaml"
        else:
            body, ctype = json.dumps(list(manifests)).encode("utf-8"), "application/json"
        return self._ok("POST", "/_double/objects" + ("?replace=true" if replace else ""), body, ctype)["items"]

    def tick(self):
        return self._ok("POST", "/_double/tick")

    def shutdown(self):
        return self._ok("POST", "/_double/shutdown")


class ApiDoubleProcess(object):
    """``python -m kubegpu_lab.apidouble`` as a child process."""

    def __init__(self, state_dir, port=0, seeds=(), python=None, extra_args=(), log_path=None, env=None):
        self.state_dir = os.path.abspath(state_dir)
        self.port_arg = port
        self.seeds = list(seeds)
        self.python = python or sys.executable
        self.extra_args = list(extra_args)
        self.log_path = log_path or os.path.join(self.state_dir, "apidouble.log")
        self.env = env
        self.proc = None
        self.info = None
        self._log = None

    def command(self):
        cmd = [self.python, "-m", "kubegpu_lab.apidouble", "--state-dir", self.state_dir,
               "--port", str(self.port_arg)]
        for seed in self.seeds:
            cmd += ["--seed", seed]
        return cmd + self.extra_args

    def start(self, timeout=30.0):
        os.makedirs(self.state_dir, exist_ok=True)
        info_path = os.path.join(self.state_dir, "server.json")
        if os.path.exists(info_path):
            os.unlink(info_path)
        env = dict(os.environ if self.env is None else self.env)
        env["PYTHONPATH"] = LAB_ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.command(), stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("API double exited with %s during start; log %s:\n%s"
                                   % (self.proc.returncode, self.log_path, self._tail()))
            if os.path.exists(info_path):
                try:
                    with open(info_path) as fh:
                        info = json.load(fh)
                except ValueError:
                    info = None
                if info and info.get("pid") == self.proc.pid:
                    self.info = info
                    return self
            time.sleep(0.05)
        self.kill()
        raise RuntimeError("API double did not come up within %ss; log %s:\n%s"
                           % (timeout, self.log_path, self._tail()))

    def _tail(self):
        try:
            with open(self.log_path, "rb") as fh:
                return fh.read()[-4000:].decode("utf-8", "replace")
        except OSError:
            return ""

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    @property
    def port(self):
        return self.info["port"]

    @property
    def url(self):
        return self.info["url"]

    @property
    def kubeconfig(self):
        return self.info["kubeconfig"]

    @property
    def token(self):
        with open(self.info["token_file"]) as fh:
            return fh.read().strip()

    @property
    def client(self):
        return DoubleClient(self.url, self.token, cafile=self.info.get("ca_file"))

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout=15.0):
        """SIGTERM and wait: the double persists its state and exits 0."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self._close_log()
        return self.proc.returncode

    def kill(self):
        """SIGKILL, like a crashed apiserver: no goodbye, state as of the last write."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._close_log()
        return self.proc.returncode if self.proc else None

    def _close_log(self):
        if self._log is not None:
            self._log.close()
            self._log = None
