# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Kubernetes connection resolution and JSON requests from the controller process.

Resolution is kubernetes.core's (``module_utils/k8s/client.py``, 6.x), step for step:

1. each connection setting is the task's option when it is not null, else its environment
   variable ``K8S_AUTH_<OPTION>`` or ``K8S_AUTH_<CLIENT NAME>`` (``K8S_AUTH_VALIDATE_CERTS`` or
   ``K8S_AUTH_VERIFY_SSL``; ``K8S_AUTH_CA_CERT`` or ``K8S_AUTH_SSL_CA_CERT``; ...); booleans from
   the environment are false for ``0``, ``false`` and ``no`` (any case), true otherwise;
2. with ``host`` and ``api_key`` (or ``host``, ``client_cert`` and ``client_key``) nothing is
   loaded: the job's credentials are complete (the AWX/AAP "OpenShift or Kubernetes API Bearer
   Token" credential injects exactly these variables);
3. else with a ``kubeconfig`` (a path, a list of paths joined by ``:``, or an inline dict) or a
   ``context``, that kubeconfig (default ``KUBECONFIG``, then ``~/.kube/config``) is loaded;
4. else the pod's service account (in-cluster) is tried first and, when the process does not run
   in a pod, the default kubeconfig (``KUBECONFIG``, then ``~/.kube/config``);
5. the settings given (options or environment) then override what was loaded: ``host``,
   ``api_key`` (sent as ``Authorization: Bearer``), ``validate_certs``, ``ca_cert``,
   ``client_cert``, ``client_key``, ``proxy``, ``no_proxy``; ``impersonate_user`` and
   ``impersonate_groups`` become impersonation headers.

``environ``, ``home`` and the service account directory are parameters, so tests resolve against
real files without touching the process.

The loader writes a kubeconfig's inline data (``certificate-authority-data``,
``client-certificate-data``, ``client-key-data``, an exec plugin's client certificate) into temp
files and removes them only from an ``atexit`` handler. An action plugin runs in Ansible's forked
WorkerProcess, which ends with ``os._exit``: atexit never runs there, so left to the loader every task
would leave the CA and the client key in the controller's temp dir. ``connect`` therefore gives each connection a
private 0700 directory for them (the loader's public ``temp_file_path``) and ``Client.close()`` (or
leaving ``with connect(...) as client:``) removes it; not earlier, because urllib3 reads the CA and
the client certificate each time it opens a connection. A path the user gave (``ca_cert``,
``client_cert``, ``certificate-authority: FILE``, the service account's ``ca.crt``) is never removed.

Nothing here writes the client's process-wide default configuration, and messages never contain a
token: ``Client.secrets`` lists the values a caller must mask
(``ansible.module_utils.common.parameters.remove_values``) in anything it returns.
"""
from __future__ import annotations

import errno
import inspect
import json
import os
import stat
import threading
import time
import warnings

from urllib.parse import urlencode

from ansible_collections.kubegpu.fleet.plugins.module_utils._common import fileutil

SERVICEACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"

# Option name -> kubernetes client (Configuration) name, as kubernetes.core's AUTH_ARG_MAP.
AUTH_ARG_MAP = {
    "kubeconfig": "kubeconfig",
    "context": "context",
    "host": "host",
    "api_key": "api_key",
    "validate_certs": "verify_ssl",
    "ca_cert": "ssl_ca_cert",
    "client_cert": "cert_file",
    "client_key": "key_file",
    "proxy": "proxy",
    "no_proxy": "no_proxy",
    "impersonate_user": "impersonate_user",
    "impersonate_groups": "impersonate_groups",
}

# The options of every controller action that talks to the API (kubernetes.core's names and aliases).
AUTH_ARG_SPEC = {
    "kubeconfig": {"type": "raw", "no_log": False},
    "context": {"type": "str"},
    "host": {"type": "str"},
    "api_key": {"type": "str", "no_log": True},
    "validate_certs": {"type": "bool", "aliases": ["verify_ssl"]},
    "ca_cert": {"type": "path", "aliases": ["ssl_ca_cert"]},
    "client_cert": {"type": "path", "aliases": ["cert_file"]},
    "client_key": {"type": "path", "aliases": ["key_file"], "no_log": False},
    "proxy": {"type": "str"},
    "no_proxy": {"type": "str"},
    "impersonate_user": {"type": "str"},
    "impersonate_groups": {"type": "list", "elements": "str"},
}

FALSE_STRINGS = ("0", "false", "no")


class K8sError(Exception):
    """A connection or an API call failed; ``status`` is the HTTP status (None when no response)."""

    def __init__(self, msg, status=None):
        super().__init__(msg)
        self.status = status


def auth_settings(params=None, environ=None):
    """The connection settings as kubernetes.core's _create_auth_spec builds them.

    Returns ``(auth, sources)``: ``auth`` maps option names to values (only those set),
    ``sources`` maps them to where each came from (``option`` or the environment variable name).
    """
    params = params or {}
    env = os.environ if environ is None else environ
    auth, sources = {}, {}
    for option, client_name in AUTH_ARG_MAP.items():
        if params.get(option) is not None:
            auth[option], sources[option] = params[option], "option"
            continue
        first, second = "K8S_AUTH_" + option.upper(), "K8S_AUTH_" + client_name.upper()
        # kubernetes.core: os.getenv(first) or os.getenv(second) - an empty first falls to the second
        value, var = (env.get(first), first) if env.get(first) else (env.get(second), second)
        if value is None:
            continue
        spec = AUTH_ARG_SPEC[option]
        if spec.get("type") == "bool":
            value = value.lower() not in FALSE_STRINGS
        elif spec.get("type") == "list":
            value = [v for v in value.split(",") if v != ""]
        auth[option], sources[option] = value, var
    return auth, sources


def default_kubeconfig(environ=None, home=None):
    """What the client loads when no kubeconfig is named: KUBECONFIG, else ~/.kube/config."""
    env = os.environ if environ is None else environ
    path = env.get("KUBECONFIG") or "~/.kube/config"
    base = home if home is not None else env.get("HOME")
    if base:
        path = ":".join(base + p[1:] if p == "~" or p.startswith("~/") else p for p in path.split(":"))
    return os.path.expanduser(path)


def secrets_of(auth):
    """Values that must never be shown: the bearer token and, from an inline kubeconfig, user credentials."""
    out = []
    if auth.get("api_key"):
        out.append(str(auth["api_key"]))
    kubeconfig = auth.get("kubeconfig")
    if isinstance(kubeconfig, dict):
        for user in kubeconfig.get("users") or []:
            for key, value in ((user or {}).get("user") or {}).items():
                if key in ("token", "password", "client-key-data") and value:
                    out.append(str(value))
    return out


def _describe_kubeconfig(kubeconfig, context):
    what = "an inline kubeconfig" if isinstance(kubeconfig, dict) else "the kubeconfig %s" % kubeconfig
    return what + (" (context %s)" % context if context else "")


KUBECONFIG_MAX_BYTES = 16 << 20


def _check_kubeconfig_files(kubeconfig):
    """Every existing file of a (``:``-joined) kubeconfig path is a regular file of sane size.

    The client's loader opens them with a plain open(): a FIFO there would block the task forever
    and a huge file would be read whole. stat() follows links without opening anything.
    """
    for path in str(kubeconfig).split(os.pathsep):
        if not path:
            continue
        path = os.path.expanduser(path)
        try:
            st = os.stat(path)
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                continue  # the loader names missing files itself
            raise K8sError("cannot load the kubeconfig %s: %s" % (path, exc.strerror or exc))
        if not stat.S_ISREG(st.st_mode):
            kind = "a FIFO" if stat.S_ISFIFO(st.st_mode) else "a directory" if stat.S_ISDIR(st.st_mode) \
                else "not a regular file"
            raise K8sError("cannot load the kubeconfig %s: it is %s" % (path, kind))
        if st.st_size > KUBECONFIG_MAX_BYTES:
            raise K8sError("cannot load the kubeconfig %s: %d bytes, more than the %d a kubeconfig may have"
                           % (path, st.st_size, KUBECONFIG_MAX_BYTES))


def _accepts_temp_file_path(loader):
    """kubernetes < 25.3 has no ``temp_file_path`` on load_kube_config (load_kube_config_from_dict has it)."""
    try:
        return "temp_file_path" in inspect.signature(loader).parameters
    except (TypeError, ValueError):
        return False


def _load_kubeconfig(config, kubeconfig, context, temp_dir=None):
    """Load a kubeconfig file (or ``:``-joined files, or a dict) into ``config``; K8sError on failure.

    ``temp_dir``: where the loader writes inline certificate and key data, or a callable that makes
    that directory (None: the loader's default, the process temp dir, cleaned only at interpreter exit)."""
    from kubernetes import config as kconfig  # pylint: disable=import-outside-toplevel

    if not isinstance(kubeconfig, dict):
        _check_kubeconfig_files(kubeconfig)
    loader = kconfig.load_kube_config_from_dict if isinstance(kubeconfig, dict) else kconfig.load_kube_config
    kwargs = {"context": context, "client_configuration": config, "persist_config": False}
    if temp_dir is not None and _accepts_temp_file_path(loader):
        kwargs["temp_file_path"] = temp_dir() if callable(temp_dir) else temp_dir
    try:
        if isinstance(kubeconfig, dict):
            loader(config_dict=kubeconfig, **kwargs)
        else:
            loader(config_file=kubeconfig, **kwargs)
    except Exception as exc:  # pylint: disable=broad-except  # the loader raises many types
        raise K8sError("cannot load %s: %s" % (_describe_kubeconfig(kubeconfig, context), exc))


def configuration(auth, environ=None, home=None, serviceaccount_dir=SERVICEACCOUNT_DIR, temp_dir=None):
    """A kubernetes.client.Configuration for ``auth`` (from auth_settings) and a line saying how it was made.

    ``temp_dir``: the directory (or a callable that makes it, called only when a kubeconfig is loaded)
    a kubeconfig's inline data are written into; the caller removes it when done with the
    configuration (``connect`` does: ``Client.close``)."""
    try:
        from kubernetes import client as kclient, config as kconfig  # pylint: disable=import-outside-toplevel
        from kubernetes.config import incluster_config  # pylint: disable=import-outside-toplevel
    except ImportError as exc:
        raise K8sError("the kubernetes Python package is required on the controller (pip install kubernetes): %s"
                       % exc)
    env = os.environ if environ is None else environ
    auth = dict(auth)
    if auth.get("kubeconfig") is not None and not isinstance(auth["kubeconfig"], (str, dict)):
        raise K8sError("kubeconfig must be a path or a dict (an inline kubeconfig), not %s"
                       % type(auth["kubeconfig"]).__name__)
    if isinstance(auth.get("host"), str):
        auth["host"] = auth["host"].rstrip("/")

    def given(*names):
        return all(auth.get(n) for n in names)

    config = kclient.Configuration()
    if given("api_key", "host") or given("client_cert", "client_key", "host"):
        how = "host %s with %s" % (auth["host"], "a bearer token" if auth.get("api_key") else "a client certificate")
    elif given("kubeconfig") or given("context"):
        kubeconfig = auth.get("kubeconfig") or default_kubeconfig(env, home)
        _load_kubeconfig(config, kubeconfig, auth.get("context"), temp_dir)
        how = _describe_kubeconfig(kubeconfig, auth.get("context"))
    else:
        loader = incluster_config.InClusterConfigLoader(
            token_filename=os.path.join(serviceaccount_dir, "token"),
            cert_filename=os.path.join(serviceaccount_dir, "ca.crt"), environ=env)
        try:
            loader.load_and_set(config)
            how = "the in-cluster service account (%s)" % serviceaccount_dir
        except kconfig.ConfigException as incluster_exc:
            kubeconfig = default_kubeconfig(env, home)
            try:
                _load_kubeconfig(config, kubeconfig, None, temp_dir)
            except K8sError as exc:
                raise K8sError(
                    "no Kubernetes connection: no host with api_key (options or K8S_AUTH_HOST and "
                    "K8S_AUTH_API_KEY), not in a cluster (%s), and %s" % (incluster_exc, exc))
            how = _describe_kubeconfig(kubeconfig, None)
    for option, client_name in AUTH_ARG_MAP.items():
        value = auth.get(option)
        if value is None or option in ("kubeconfig", "context", "impersonate_user", "impersonate_groups"):
            continue
        if option == "api_key":
            config.api_key = {"authorization": "Bearer %s" % value}
        else:
            setattr(config, client_name, value)
    return config, how


class Client(object):
    """JSON requests against the API, returning plain dicts (the shape kubernetes.core.k8s_info returns).

    Requests go through the official client's configuration (TLS, token or exec credentials,
    refreshed by its hooks) and REST layer. Error messages carry the verb, the object, the HTTP
    status and the API's own message - never a request header.
    """

    TIMEOUT = (10, 60)   # connect, read seconds (each socket read)
    MAX_BODY = 256 * 1024 * 1024   # bytes of one response: a list of 5,000 Nodes is about 100 MiB
    DEADLINE = 300   # seconds for one whole response
    CHUNK = 1024 * 1024

    def __init__(self, api_client, how="", secrets=(), impersonate_user=None, impersonate_groups=None,
                 temp_dirs=()):
        self._client = api_client
        self._config = api_client.configuration
        self.how = how
        self.secrets = [s for s in secrets if s]
        self._impersonate_user = impersonate_user
        self._impersonate_groups = list(impersonate_groups or [])
        self._temp_dirs = list(temp_dirs)

    def close(self):
        """Close the connections and remove the files the kubeconfig loader wrote for this client.

        Only the private directories ``connect`` made (or shares with another open client) go, never
        a file the user named. Idempotent; call it in ``finally`` (or use ``with``)."""
        dirs, self._temp_dirs = self._temp_dirs, []
        try:
            self._client.close()   # the ApiClient's thread pool, when one was started
            pool = getattr(getattr(self._client, "rest_client", None), "pool_manager", None)
            if pool is not None:
                pool.clear()       # open sockets
        finally:
            _release(dirs)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc_value, traceback):
        self.close()

    def _headers(self, content_type=None):
        try:
            from urllib3 import HTTPHeaderDict  # pylint: disable=import-outside-toplevel
        except ImportError:  # urllib3 < 2
            from urllib3._collections import HTTPHeaderDict  # pylint: disable=import-outside-toplevel

        headers = HTTPHeaderDict(getattr(self._client, "default_headers", None) or {})
        headers.setdefault("User-Agent", self._client.user_agent)
        headers["Accept"] = "application/json"
        for auth in (self._config.auth_settings() or {}).values():
            if auth.get("in") == "header" and auth.get("value"):
                headers[auth["key"]] = auth["value"]
                token = auth["value"].split(" ", 1)[-1]
                if token not in self.secrets:
                    self.secrets.append(token)
        if self._impersonate_user:
            headers["Impersonate-User"] = self._impersonate_user
        for group in self._impersonate_groups:
            headers.add("Impersonate-Group", group)
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    def mask(self, text):
        """``text`` with every secret this client knows replaced by ********."""
        text = str(text)
        for secret in sorted(self.secrets, key=len, reverse=True):
            text = text.replace(secret, "********")
        return text

    def _fail(self, what, detail, status=None):
        msg = "%s: %s" % (what, detail)
        if status in (401, 403):
            msg += " (credentials from %s)" % (self.how or "the default kubeconfig")
        raise K8sError(self.mask(msg), status=status)

    def request(self, what, method, path, query=None, body=None, content_type=None):
        """One HTTP request; the decoded JSON body, or K8sError with the API's message.

        The response is read in chunks up to ``MAX_BODY`` bytes and ``DEADLINE`` seconds in all (on
        top of the per-read socket timeout): an API server, proxy or impostor that sends without end,
        or a byte at a time, fails the request with a message instead of holding the task.
        """
        # headers first: a kubeconfig's token refresh hook re-applies its cluster settings (host
        # included) on every call, and the generated client builds the URL after it - as here
        headers = self._headers(content_type or ("application/json" if body is not None else None))
        url = self._config.host.rstrip("/") + path + ("?" + urlencode(query) if query else "")
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
        try:
            with warnings.catch_warnings():
                # validate_certs=false is the user's explicit choice; kubernetes.core silences it too
                warnings.filterwarnings("ignore", message="Unverified HTTPS request")
                status, data = self._send(method, url, headers, body)
        except K8sError as exc:
            self._fail(what, exc)
        except Exception as exc:  # pylint: disable=broad-except  # urllib3/ssl/socket errors
            self._fail(what, _reason(exc))
        try:
            doc = json.loads(data or b"{}")
        except (TypeError, ValueError):
            doc = {"message": (data or b"").decode("utf-8", "replace")[:300]}
        if not 200 <= int(status or 0) < 300:
            message = (doc or {}).get("message") if isinstance(doc, dict) else ""
            self._fail(what, "HTTP %s %s" % (status, message or ""), status=status)
        return doc

    def _send(self, method, url, headers, body):
        """(status, body bytes) of one request through the client's connection pool (its TLS and
        proxy settings), read under the size and time bounds."""
        import urllib3  # pylint: disable=import-outside-toplevel

        pool = self._client.rest_client.pool_manager
        resp = pool.request(method, url, headers=headers, body=body, preload_content=False,
                            timeout=urllib3.Timeout(connect=self.TIMEOUT[0], read=self.TIMEOUT[1]))
        complete = False
        try:
            deadline = time.monotonic() + self.DEADLINE
            chunks, size = [], 0
            while True:
                chunk = resp.read(self.CHUNK)
                if not chunk:
                    break
                size += len(chunk)
                if size > self.MAX_BODY:
                    raise K8sError("the response is larger than %d MiB; nothing of it was used"
                                   % (self.MAX_BODY // (1024 * 1024)))
                if time.monotonic() >= deadline:
                    raise K8sError("the response took longer than %d s to arrive; nothing of it was used"
                                   % self.DEADLINE)
                chunks.append(chunk)
            complete = True
            return resp.status, b"".join(chunks)
        finally:
            if not complete:
                resp.close()   # never hand a half-read connection back to the pool
            resp.release_conn()


def _reason(exc):
    """The innermost reason of a urllib3 error (MaxRetryError wraps the SSL or socket error)."""
    reason = getattr(exc, "reason", None)
    return str(reason if reason is not None else exc).replace("\n", ": ")


# Private directories of open Clients (the loader's inline data) -> how many open Clients use each.
# One lock serialises loading and removing: the loader keeps one file per distinct content for the
# whole process (see _loader_cache), so a second Client with the same inline CA may be handed the
# first Client's file; it then holds that directory too, and the directory goes with the last one.
_LOCK = threading.RLock()
_DIR_USERS = {}
_PRIVATE = {}   # their fileutil.PrivateDir objects, which remove them


def _loader_cache():
    """The loader's content -> temp file map, or None when the package no longer has one.

    ``kubernetes.config.kube_config._temp_files`` is private. It is used for one thing only: to
    forget the files a closed Client removed, so that a later load in the same process (an Ansible
    loop runs every item in one worker) writes them anew instead of handing out a removed path
    (kubernetes 28 and older do not check that a remembered file still exists).
    tests/unit/plugins/plugin_utils/k8s/test_k8s_tempfiles.py fails if the package changes it."""
    try:
        from kubernetes.config import kube_config  # pylint: disable=import-outside-toplevel
    except ImportError:
        return None
    cache = getattr(kube_config, "_temp_files", None)
    return cache if isinstance(cache, dict) else None


def _hold_shared(config, own):
    """Take a hold on every other open Client's directory that ``config`` names a file in."""
    held = []
    for path in (config.ssl_ca_cert, config.cert_file, config.key_file):
        if not path:
            continue
        folder = os.path.dirname(os.path.abspath(str(path)))
        if folder != own and folder in _DIR_USERS and folder not in held:
            _DIR_USERS[folder] += 1
            held.append(folder)
    return held


def _release(dirs):
    """Drop one hold on each directory; the last one removes it and the loader's memory of its files."""
    with _LOCK:
        for folder in dirs:
            if folder not in _DIR_USERS:
                continue
            _DIR_USERS[folder] -= 1
            if _DIR_USERS[folder] > 0:
                continue
            del _DIR_USERS[folder]
            private = _PRIVATE.pop(folder, None)
            if private is not None:
                private.cleanup()
            cache = _loader_cache()
            if cache is not None:
                prefix = folder + os.sep
                for key in [k for k, v in cache.items() if isinstance(v, str) and v.startswith(prefix)]:
                    del cache[key]


def connect(params=None, environ=None, home=None, serviceaccount_dir=SERVICEACCOUNT_DIR):
    """A Client resolved from the task's connection options (AUTH_ARG_SPEC names) and ``environ``.

    The caller must ``close()`` it (``finally``, or ``with connect(...) as client:``): that removes
    the kubeconfig's inline CA, client certificate and key the loader wrote to disk for it."""
    auth, _sources = auth_settings(params, environ)
    secrets = secrets_of(auth)
    dirs = []

    def private_dir():   # made only when a kubeconfig is loaded: host + token needs no file
        if not dirs:
            private = fileutil.PrivateDir("kubegpu-k8s-")   # 0700, in TMPDIR
            _PRIVATE[private.path] = private
            dirs.append(private.path)
            _DIR_USERS[dirs[0]] = 1
        return dirs[0]

    with _LOCK:
        client = None
        try:
            try:
                config, how = configuration(auth, environ, home, serviceaccount_dir, temp_dir=private_dir)
                from kubernetes import client as kclient  # pylint: disable=import-outside-toplevel
                api_client = kclient.ApiClient(config)
            except K8sError as exc:
                raise K8sError(_mask(str(exc), secrets))
            except Exception as exc:  # pylint: disable=broad-except  # bad TLS files, proxies: many types
                raise K8sError(_mask("cannot set up the Kubernetes client: %s" % exc, secrets))
            dirs.extend(_hold_shared(config, dirs[0] if dirs else None))
            client = Client(api_client, how, secrets, auth.get("impersonate_user"), auth.get("impersonate_groups"),
                            temp_dirs=dirs)
        finally:
            if client is None:
                _release(dirs)
    return client


def _mask(text, secrets):
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        text = text.replace(secret, "********")
    return text
