"""A stand-in for ``kubectl exec`` at the edge of the kubernetes.core.kubectl connection plugin.

No pod here can run a command, and the API double serves no ``pods/exec`` stream, so the tests put
this script first on ``PATH`` as ``kubectl`` (``install``). It does what ``kubectl exec`` does up
to the stream, with kubectl's own parsing, messages and exit codes, then runs the command as the
container would:

1. parses the command line the way kubectl's flag library does for what
   kubernetes.core.kubectl builds (``plugins/connection/kubectl.py`` ``_build_exec_cmd``: global
   flags, then ``exec -i POD [-c CONTAINER] -- CMD...``); a bool flag never takes the next word,
   so ``--insecure-skip-tls-verify true exec ...`` is refused as kubectl 1.32 refuses it;
2. resolves the cluster as kubectl does - ``--kubeconfig``, else ``$KUBECONFIG``, else
   ``~/.kube/config``; ``--context`` or the current context; ``--server``, ``--token`` and
   ``--certificate-authority`` over the kubeconfig's - and with no server at all fails as kubectl
   does (``localhost:8080`` refused);
3. GETs the pod from the API over TLS with that CA and token (as kubectl exec does before it
   streams): a missing pod or namespace, a wrong token or an untrusted certificate fails with
   kubectl's text; a container that is not in the pod's spec with the API server's BadRequest;
   a pod that is not Running with the kubelet's answer;
4. runs ``CMD`` locally with the pod's view: a private mount namespace in which
   ``$FAKE_KUBECTL_NODES/<the pod's spec.nodeName>`` is bind-mounted on ``$FAKE_KUBECTL_HOST_MOUNT``
   (the agent pod's hostPath mount of its node's root), a container's environment (``HOSTNAME``
   the pod name, no variable of the controller's), stdin passed through (``-i``), the command's
   exit status kubectl's.

Every call is appended as one JSON line to ``$FAKE_KUBECTL_LOG`` (the token itself never).
"""
import base64
import json
import os
import shlex
import ssl
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request

import yaml

# kubectl's global flags that take a value, and the bool ones (kubectl 1.32 ``kubectl options``)
VALUE_FLAGS = {"-n": "namespace", "--namespace": "namespace", "--kubeconfig": "kubeconfig", "--context": "context",
               "-s": "server", "--server": "server", "--token": "token", "--certificate-authority": "ca",
               "--client-certificate": "client_cert", "--client-key": "client_key", "--username": "username",
               "--password": "password", "--user": "user", "--cluster": "cluster", "--cache-dir": "cache_dir",
               "--request-timeout": "request_timeout", "--tls-server-name": "tls_server_name", "-v": "v"}
BOOL_FLAGS = {"--insecure-skip-tls-verify": "insecure"}
EXEC_VALUE_FLAGS = {"-c": "container", "--container": "container", "-n": "namespace", "--namespace": "namespace",
                    "--pod-running-timeout": "pod_running_timeout"}
EXEC_BOOL_FLAGS = {"-i": "stdin", "--stdin": "stdin", "-t": "tty", "--tty": "tty", "-q": "quiet", "--quiet": "quiet"}
POD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"   # a container image's


class Refused(Exception):
    """kubectl's message (stderr) and exit status."""

    def __init__(self, message, code=1):
        Exception.__init__(self, message)
        self.message = message
        self.code = code


def _bool(text, name, command):
    if text in ("1", "t", "T", "true", "TRUE", "True"):        # Go's strconv.ParseBool
        return True
    if text in ("0", "f", "F", "false", "FALSE", "False"):
        return False
    raise Refused('Error: invalid argument "%s" for "%s" flag: strconv.ParseBool: parsing "%s": invalid syntax\n'
                  "See 'kubectl %s--help' for usage." % (text, name, text, command + " " if command else ""))


def _flag(args, i, value_flags, bool_flags, out, command):
    """Consume the flag at ``args[i]`` into ``out``; the index after it."""
    word = args[i]
    name, eq, inline = word.partition("=")
    if name in bool_flags:
        out[bool_flags[name]] = _bool(inline, name, command) if eq else True
        return i + 1
    if name in value_flags:
        if eq:
            out[value_flags[name]] = inline
            return i + 1
        if i + 1 >= len(args):
            raise Refused("Error: flag needs an argument: %s" % word)
        out[value_flags[name]] = args[i + 1]
        return i + 2
    if len(name) == 2 and not name.startswith("--"):
        raise Refused("Error: unknown shorthand flag: '%s' in %s\nSee 'kubectl %s--help' for usage."
                      % (name[1], word, command + " " if command else ""))
    raise Refused("Error: unknown flag: %s\nSee 'kubectl %s--help' for usage." % (name, command + " " if command else ""))


def parse(args):
    """``(options, pod, command)`` of ``kubectl [global flags] exec [flags] POD [flags] -- COMMAND...``."""
    opts = {}
    i = 0
    named = "exec" if "exec" in args else ""   # kubectl parses every flag as the subcommand's it found
    while i < len(args) and args[i].startswith("-") and args[i] != "--":
        i = _flag(args, i, VALUE_FLAGS, BOOL_FLAGS, opts, named)
    if i >= len(args) or args[i] != "exec":
        word = args[i] if i < len(args) else ""
        if i > 0 and word:
            # kubectl takes an unknown first word as a plugin name (kubectl-<word>)
            raise Refused("Error: flags cannot be placed before plugin name: %s" % args[0])
        raise Refused('Error: unknown command "%s" for "kubectl"' % word)
    i += 1
    pod, command = None, None
    while i < len(args):
        word = args[i]
        if word == "--":
            command = args[i + 1:]
            break
        if word.startswith("-") and word != "-":
            name = word.partition("=")[0]
            if name in VALUE_FLAGS and name not in EXEC_VALUE_FLAGS:
                i = _flag(args, i, VALUE_FLAGS, BOOL_FLAGS, opts, "exec")
            elif name in BOOL_FLAGS:
                i = _flag(args, i, VALUE_FLAGS, BOOL_FLAGS, opts, "exec")
            else:
                i = _flag(args, i, EXEC_VALUE_FLAGS, EXEC_BOOL_FLAGS, opts, "exec")
            continue
        if pod is None:
            pod = word
            i += 1
            continue
        raise Refused("error: exec [POD] [COMMAND] is not supported anymore. Use exec [POD] -- [COMMAND] instead\n"
                      "See 'kubectl exec -h' for help and examples")
    if pod is None:
        raise Refused("error: pod, type/name or --filename must be specified")
    if not command:
        raise Refused("error: you must specify at least one command for the container")
    return opts, pod, command


def _kubeconfig(opts):
    path = opts.get("kubeconfig") or (os.environ.get("KUBECONFIG") or "").split(os.pathsep)[0] or \
        os.path.join(os.path.expanduser("~"), ".kube", "config")
    if not os.path.exists(path):
        if opts.get("kubeconfig"):
            raise Refused("error: stat %s: no such file or directory" % path)
        return {}
    with open(path) as fh:
        return yaml.safe_load(fh) or {}


def _named(doc, kind, name):
    for entry in doc.get(kind) or []:
        if entry.get("name") == name:
            return entry.get(kind[:-1]) or {}
    return None


def cluster(opts):
    """``{server, token, ca_file, ca_data, insecure, namespace}`` as kubectl resolves them."""
    doc = _kubeconfig(opts)
    context_name = opts.get("context") or doc.get("current-context")
    context = _named(doc, "contexts", context_name) if context_name else {}
    if context is None:
        raise Refused('error: context "%s" does not exist' % context_name)
    found = _named(doc, "clusters", opts.get("cluster") or context.get("cluster")) or {}
    user = _named(doc, "users", opts.get("user") or context.get("user")) or {}
    out = {"server": opts.get("server") or found.get("server"),
           "token": opts.get("token") or user.get("token"),
           "ca_file": opts.get("ca") or found.get("certificate-authority"),
           "ca_data": None if opts.get("ca") else found.get("certificate-authority-data"),
           "insecure": opts.get("insecure", found.get("insecure-skip-tls-verify", False)),
           "namespace": opts.get("namespace") or context.get("namespace") or "default"}
    if out["insecure"] and (out["ca_file"] or out["ca_data"]):
        raise Refused("error: specifying a root certificates file with the insecure flag is not allowed")
    if not out["server"]:
        raise Refused("The connection to the server localhost:8080 was refused - did you specify the right host or port?")
    return out


def get_pod(where, name):
    """The pod, read as kubectl 1.32 reads it: a NotFound pod makes it read the namespace too, and a
    namespace that is not there is the error it reports."""
    base = "%s/api/v1/namespaces/%s" % (where["server"].rstrip("/"), urllib.parse.quote(where["namespace"]))
    try:
        return _get(where, base + "/pods/" + urllib.parse.quote(name))
    except Refused as exc:
        if not exc.message.startswith("Error from server (NotFound): "):
            raise
        try:
            _get(where, base)
        except Refused as ns_exc:
            if ns_exc.message.startswith("Error from server (NotFound): "):
                raise ns_exc
        raise exc


def _get(where, url):
    if where["insecure"]:
        context = ssl._create_unverified_context()   # pylint: disable=protected-access
    else:
        cadata = base64.b64decode(where["ca_data"]).decode() if where["ca_data"] else None
        context = ssl.create_default_context(cafile=where["ca_file"], cadata=cadata)
    request = urllib.request.Request(url, headers={"Accept": "application/json",
                                                   "User-Agent": "kubectl/v1.32.4 (fake_kubectl.py)"})
    if where["token"]:
        request.add_header("Authorization", "Bearer " + where["token"])
    try:
        with urllib.request.urlopen(request, context=context, timeout=30) as resp:
            return json.loads(resp.read().decode("utf-8"))
    except urllib.error.HTTPError as exc:
        try:
            status = json.loads(exc.read().decode("utf-8"))
        except ValueError:
            status = {}
        if exc.code == 401:
            raise Refused("error: You must be logged in to the server (Unauthorized)")
        raise Refused("Error from server (%s): %s" % (status.get("reason") or exc.code, status.get("message")))
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, ssl.SSLCertVerificationError):
            raise Refused("Unable to connect to the server: tls: failed to verify certificate: x509: certificate "
                          "signed by unknown authority")
        raise Refused("Unable to connect to the server: %s" % exc.reason)


def container_of(pod, wanted, quiet):
    names = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]
    phase = (pod.get("status") or {}).get("phase")
    if phase in ("Succeeded", "Failed"):
        raise Refused("error: cannot exec into a container in a completed pod; current phase is %s" % phase)
    if not wanted:
        wanted = ((pod.get("metadata") or {}).get("annotations") or {}).get(
            "kubectl.kubernetes.io/default-container") or names[0]
        if len(names) > 1 and not quiet:
            sys.stderr.write('Defaulted container "%s" out of: %s\n' % (wanted, ", ".join(names)))
    if wanted not in names:
        raise Refused("Error from server (BadRequest): container %s is not valid for pod %s"
                      % (wanted, pod["metadata"]["name"]))
    if phase != "Running":
        raise Refused('error: unable to upgrade connection: container not found ("%s")' % wanted)
    return wanted


def log(entry):
    path = os.environ.get("FAKE_KUBECTL_LOG")
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, (json.dumps(entry, sort_keys=True) + "\n").encode())
        finally:
            os.close(fd)


def main(args):
    entry = {"argv": list(args), "refused": None}
    if "--token" in args[:-1]:   # the token never reaches the log
        at = args.index("--token") + 1
        entry["argv"][at] = "<token>"
    try:
        opts, pod_name, command = parse(args)
        where = cluster(opts)
        pod = get_pod(where, pod_name)
        container = container_of(pod, opts.get("container"), opts.get("quiet"))
    except Refused as exc:
        entry["refused"] = exc.message
        log(entry)
        sys.stderr.write(exc.message + "\n")
        return exc.code
    node = (pod.get("spec") or {}).get("nodeName")
    entry.update(pod=pod_name, namespace=where["namespace"], container=container, node=node,
                 server=where["server"], command=command, stdin=bool(opts.get("stdin")))
    log(entry)
    root = os.path.join(os.environ["FAKE_KUBECTL_NODES"], node)
    mount = os.environ["FAKE_KUBECTL_HOST_MOUNT"]
    env = {"PATH": POD_PATH, "HOSTNAME": pod_name, "HOME": "/root", "LANG": "C.UTF-8"}
    if not opts.get("stdin"):
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
    # the pod's own mount namespace: its node's root at the host mount, gone when the command ends
    userns = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    argv = ["unshare"] + userns + ["--mount", "--propagation", "private", "--", "/bin/sh", "-c",
                                   'mount --bind "$0" "$1" || exit 126; shift; exec "$@"', root, mount] + command
    os.execvpe("unshare", argv, env)
    return 127


def install(bin_dir, python=None):
    """Write ``bin_dir/kubectl`` running this script with ``python``; returns its path."""
    os.makedirs(bin_dir, exist_ok=True)
    path = os.path.join(bin_dir, "kubectl")
    fd, tmp = tempfile.mkstemp(dir=bin_dir)
    with os.fdopen(fd, "w") as fh:
        fh.write("#!/bin/sh\nexec %s %s \"$@\"\n" % (
            shlex.quote(python or sys.executable), shlex.quote(os.path.abspath(__file__))))
    os.chmod(tmp, 0o755)
    os.replace(tmp, path)
    return path


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
