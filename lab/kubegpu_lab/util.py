"""Small host-side helpers shared by the lab: commands, files, locks, ports, processes."""
import contextlib
import errno
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time


class LabError(Exception):
    """A lab operation that cannot go on; the CLI prints the message and exits 1."""


def log(msg, *args):
    """Progress line on stderr (stdout is kept for machine-readable output)."""
    if args:
        msg = msg % args
    sys.stderr.write("kubegpu-lab: %s\n" % msg)
    sys.stderr.flush()


def run(cmd, check=True, capture=False, input=None, env=None, cwd=None, timeout=None):
    """Run ``cmd`` (a list); raise LabError naming the command and its output on failure."""
    proc = subprocess.run(cmd, input=input, env=env, cwd=cwd, timeout=timeout, check=False,
                          stdout=subprocess.PIPE if capture else None,
                          stderr=subprocess.PIPE if capture else None,
                          universal_newlines=True)
    if check and proc.returncode != 0:
        detail = ""
        if capture:
            detail = "\n" + (proc.stderr or "")[-4000:] + (proc.stdout or "")[-2000:]
        raise LabError("command failed (exit %d): %s%s" % (proc.returncode, " ".join(cmd), detail))
    return proc


def write_file(path, data, mode=0o644):
    """Write ``data`` (str or bytes) to ``path`` atomically (temp file + rename)."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_json(path, obj, mode=0o644):
    write_file(path, json.dumps(obj, indent=2, sort_keys=True) + "\n", mode)


def read_json(path, default=None):
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return default


@contextlib.contextmanager
def file_lock(path, timeout=None, what="lab"):
    """Exclusive flock on ``path``; with ``timeout`` raise LabError when it is not free."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (fcntl.LOCK_NB if deadline else 0))
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                if time.monotonic() >= deadline:
                    raise LabError("another kubegpu-lab command holds the %s lock %s" % (what, path))
                time.sleep(0.2)
        yield
    finally:
        os.close(fd)


def port_free(port, host="127.0.0.1"):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def pick_ports(count, start, taken=(), end=60999):
    """``count`` free loopback TCP ports at or above ``start``, skipping ``taken``."""
    out = []
    port = start
    while len(out) < count:
        if port > end:
            raise LabError("no free loopback ports between %d and %d" % (start, end))
        if port not in taken and port_free(port):
            out.append(port)
        port += 1
    return out


def wait_port(port, timeout, host="127.0.0.1", alive=None):
    """Wait until something accepts on ``port``; ``alive()`` False aborts early."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=1):
                return True
        except OSError:
            pass
        if alive is not None and not alive():
            return False
        time.sleep(0.2)
    return False


def pid_alive(pid):
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie is not alive for our purposes
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def proc_cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return [a.decode("utf-8", "replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def proc_start_time(pid):
    """Start time (clock ticks since boot) of ``pid``: pins a pid against reuse."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def children(pid):
    out = []
    try:
        for tid in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/children" % (pid, tid)) as f:
                out.extend(int(p) for p in f.read().split())
    except OSError:
        pass
    return out


def kill_quiet(pid, sig):
    try:
        os.kill(pid, sig)
        return True
    except (ProcessLookupError, TypeError):
        return False


def wait_gone(pids, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(pid_alive(p) for p in pids):
            return True
        time.sleep(0.1)
    return not any(pid_alive(p) for p in pids)


def spawn_daemon(cmd, log_path, env=None, cwd="/"):
    """Start ``cmd`` in its own session, detached from us, output to ``log_path``; return pid."""
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    with open(log_path, "ab", buffering=0) as logf, open(os.devnull, "rb") as devnull:
        proc = subprocess.Popen(cmd, stdin=devnull, stdout=logf, stderr=logf, env=env, cwd=cwd,
                                start_new_session=True, close_fds=True)
    return proc.pid


def mountpoints():
    """Mount points of this mount namespace (decoded from /proc/self/mountinfo)."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            mp = line.split()[4]
            out.append(mp.encode("utf-8").decode("unicode_escape"))
    return out


def is_mountpoint(path):
    return os.path.realpath(path) in mountpoints()


def umount_tree(path):
    """Unmount every mount at or below ``path`` (deepest first); lazily if busy."""
    real = os.path.realpath(path)
    mps = sorted((m for m in mountpoints() if m == real or m.startswith(real + "/")),
                 key=len, reverse=True)
    for mp in mps:
        if run(["umount", mp], check=False, capture=True).returncode != 0:
            run(["umount", "-l", mp], check=False, capture=True)
    return mps


def signal_name(sig):
    try:
        return signal.Signals(sig).name
    except ValueError:
        return str(sig)
