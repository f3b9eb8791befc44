"""Run the Kubernetes API double: ``PYTHONPATH=lab python -m kubegpu_lab.apidouble --state-dir DIR``.

Writes into DIR: ``kubeconfig`` (0600), ``token`` (0600), ``state.json``, ``history.jsonl``,
``ca.crt``/``ca.key``/``server.crt``/``server.key`` (HTTPS unless ``--insecure-http``), and last ``server.json``
(pid, port, url, paths) once the port is bound: its appearance means "ready".
SIGTERM/SIGINT or ``POST /_double/shutdown`` stop it cleanly (state persisted, exit 0).
"""
import argparse
import ipaddress
import json
import os
import secrets
import signal
import ssl
import subprocess
import sys
import threading

import yaml

from .server import DEFAULT_KUBE_VERSION, ApiDoubleServer, ServerThread
from .store import Store
from .util import atomic_write_text


def kubeconfig_text(url, token, ca_data=None, name="kubegpu-lab", namespace="default"):
    cluster = {"server": url}
    if ca_data:
        cluster["certificate-authority-data"] = ca_data
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": name + "-admin", "user": {"token": token}}],
        "contexts": [{"name": name,
                      "context": {"cluster": name, "user": name + "-admin", "namespace": namespace}}],
        "current-context": name,
        "preferences": {},
    }
    return yaml.safe_dump(doc, sort_keys=False)


def ensure_tls(state_dir):
    """A self-signed CA and a server certificate for 127.0.0.1/localhost, made once with openssl."""
    ca_crt = os.path.join(state_dir, "ca.crt")
    ca_key = os.path.join(state_dir, "ca.key")
    crt = os.path.join(state_dir, "server.crt")
    key = os.path.join(state_dir, "server.key")
    if all(os.path.exists(p) for p in (ca_crt, crt, key)):
        return ca_crt, crt, key
    ext = os.path.join(state_dir, "server.ext")
    with open(ext, "w") as fh:
        fh.write("subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=critical,CA:FALSE\n"
                 "keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n")

    def run(*cmd):
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    try:
        run("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", ca_key, "-out", ca_crt, "-days", "3650", "-subj", "/CN=kubegpu-lab-ca",
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
        csr = os.path.join(state_dir, "server.csr")
        run("openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", key, "-out", csr, "-subj", "/CN=kube-apiserver")
        run("openssl", "x509", "-req", "-in", csr, "-CA", ca_crt, "-CAkey", ca_key, "-CAcreateserial",
            "-out", crt, "-days", "3650", "-extfile", ext)
    except (OSError, subprocess.CalledProcessError) as exc:
        raise SystemExit("apidouble: cannot create TLS certificates with openssl: %s" % exc)
    for path in (csr, ext, os.path.join(state_dir, "ca.srl")):
        if os.path.exists(path):
            os.unlink(path)
    os.chmod(key, 0o600)
    os.chmod(ca_key, 0o600)
    return ca_crt, crt, key


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m kubegpu_lab.apidouble",
                                description="Stateful Kubernetes API double on loopback (kubegpu.fleet lab).")
    p.add_argument("--state-dir", required=True, help="directory for state, history, kubeconfig, token")
    p.add_argument("--port", type=int, default=0, help="TCP port on the host (0: pick a free one)")
    p.add_argument("--host", default="127.0.0.1", help="loopback address to bind (default 127.0.0.1)")
    p.add_argument("--seed", action="append", default=[],
                   help="YAML file of manifests to create at start (repeatable; existing names are kept)")
    p.add_argument("--reseed", action="store_true", help="seed objects replace existing ones of the same name")
    p.add_argument("--token", help="bearer token (default: DIR/token, else a new random one)")
    p.add_argument("--kubeconfig", help="where to write the kubeconfig (default DIR/kubeconfig)")
    p.add_argument("--insecure-http", action="store_true",
                   help="serve plain HTTP instead of HTTPS (kubectl then never sends the token: it reads "
                        "credentials only for TLS servers)")
    p.add_argument("--kube-version", default=DEFAULT_KUBE_VERSION, help="gitVersion served at /version")
    p.add_argument("--node-monitor-grace", type=float, default=40.0,
                   help="seconds without a kubelet lease renewal before a node turns Ready=Unknown")
    p.add_argument("--event-ttl", type=float, default=3600.0,
                   help="seconds an event is kept after its last write (kube-apiserver default: 1h)")
    p.add_argument("--access-log", action="store_true", help="log every request to DIR/access.log")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        if not ipaddress.ip_address(args.host).is_loopback:
            raise ValueError
    except ValueError:
        raise SystemExit("apidouble: --host must be a loopback address, not %r" % args.host)
    state_dir = os.path.abspath(args.state_dir)
    os.makedirs(state_dir, mode=0o700, exist_ok=True)
    token_file = os.path.join(state_dir, "token")
    token = args.token
    if not token and os.path.exists(token_file):
        with open(token_file) as fh:
            token = fh.read().strip()
    token = token or secrets.token_urlsafe(32)
    atomic_write_text(token_file, token + "\n")

    store = Store(state_dir, node_monitor_grace=args.node_monitor_grace, event_ttl=args.event_ttl)
    for path in args.seed:
        with open(path) as fh:
            try:
                docs = [d for d in yaml.safe_load_all(fh) if d]
            except yaml.YAMLError as exc:
                raise SystemExit("apidouble: cannot parse seed file %s: %s" % (path, exc))
        try:
            store.load_objects(docs, actor="seed", replace=args.reseed)
        except (ValueError, KeyError) as exc:
            raise SystemExit("apidouble: bad object in seed file %s: %s" % (path, exc))
        except Exception as exc:  # ApiError from validation: name the file and the reason
            raise SystemExit("apidouble: seed file %s rejected: %s" % (path, exc))

    ssl_context = None
    ca_file = ca_data = None
    tls = not args.insecure_http
    if tls:
        ca_file, crt, key = ensure_tls(state_dir)
        ssl_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ssl_context.load_cert_chain(crt, key)
        import base64
        with open(ca_file, "rb") as fh:
            ca_data = base64.b64encode(fh.read()).decode("ascii")
    access_log = open(os.path.join(state_dir, "access.log"), "a", buffering=1) if args.access_log else None
    try:
        server = ApiDoubleServer((args.host, args.port), store, token, kube_version=args.kube_version,
                                 ssl_context=ssl_context, access_log=access_log)
    except OSError as exc:
        store.close()
        raise SystemExit("apidouble: cannot listen on %s:%s: %s" % (args.host, args.port, exc))
    url = "%s://%s:%d" % ("https" if tls else "http", args.host, server.port)
    kubeconfig = os.path.abspath(args.kubeconfig or os.path.join(state_dir, "kubeconfig"))
    atomic_write_text(kubeconfig, kubeconfig_text(url, token, ca_data))

    stop_event = threading.Event()
    server.on_shutdown_request = stop_event.set
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: stop_event.set())
    runner = ServerThread(server).start()
    info_path = os.path.join(state_dir, "server.json")
    atomic_write_text(info_path, json.dumps({
        "pid": os.getpid(), "host": args.host, "port": server.port, "url": url, "kubeconfig": kubeconfig,
        "token_file": token_file, "ca_file": ca_file, "state_dir": state_dir,
        "kube_version": args.kube_version}, indent=2) + "\n", mode=0o644)
    print("apidouble: serving %s (state %s, kubeconfig %s)" % (url, state_dir, kubeconfig), flush=True)
    while not stop_event.wait(0.5):
        pass
    runner.stop()
    if access_log:
        access_log.close()
    if os.path.exists(info_path):
        os.unlink(info_path)
    print("apidouble: stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
