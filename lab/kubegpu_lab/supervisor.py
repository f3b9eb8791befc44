"""Per-node supervisor: boots a node with systemd-nspawn and turns exit 133 into a reboot.

``python -m kubegpu_lab.supervisor NODE_DIR`` runs detached (its own session) for as long as
the node is up. ``systemctl reboot`` inside the node makes systemd-nspawn exit with status 133;
the supervisor then boots the same root again, which gives the node a new
``/proc/sys/kernel/random/boot_id`` like a real reboot. Any other exit (poweroff, a failure)
ends the supervisor. SIGTERM asks the node to power off cleanly (nspawn forwards it to the
node's systemd as a shutdown request).
"""
import json
import os
import signal
import subprocess
import sys
import time

from . import cgroups
from .util import write_json

REBOOT_STATUS = 133


class Supervisor(object):
    def __init__(self, node_dir):
        self.node_dir = node_dir
        with open(os.path.join(node_dir, "node.json")) as f:
            self.cfg = json.load(f)
        self.run_dir = os.path.join(node_dir, "run")
        self.stopping = False
        self.child = None

    def log(self, msg, *args):
        text = msg % args if args else msg
        line = "%s supervisor[%d]: %s\n" % (time.strftime("%Y-%m-%dT%H:%M:%S"), os.getpid(), text)
        with open(os.path.join(self.run_dir, "supervisor.log"), "a") as f:
            f.write(line)

    def on_term(self, signum, _frame):
        self.stopping = True
        if self.child is not None and self.child.poll() is None:
            try:
                self.child.send_signal(signal.SIGTERM)
            except OSError:
                pass

    def nspawn_cmd(self):
        c = self.cfg
        cmd = ["systemd-nspawn", "--quiet", "--register=no", "--keep-unit", "--boot",
               "--machine=" + c["machine"], "--hostname=" + c["hostname"],
               "--directory=" + c["rootfs"], "--console=read-only", "--link-journal=no",
               "--resolv-conf=off", "--timezone=off", "--kill-signal=SIGRTMIN+3"]
        for src, dst in c.get("bind_ro", []):
            cmd.append("--bind-ro=%s:%s" % (src, dst))
        for src, dst in c.get("bind", []):
            cmd.append("--bind=%s:%s" % (src, dst))
        for key, value in sorted(c.get("env", {}).items()):
            cmd.append("--setenv=%s=%s" % (key, value))
        return cmd

    def main(self):
        os.makedirs(self.run_dir, exist_ok=True)
        signal.signal(signal.SIGTERM, self.on_term)
        signal.signal(signal.SIGINT, self.on_term)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        cgroups.enter(self.cfg["lab"], self.cfg["node"])
        boots = 0
        status_path = os.path.join(self.run_dir, "supervisor.json")
        rc = None
        while not self.stopping:
            if not os.path.ismount(self.cfg["rootfs"]):
                self.log("root %s is not mounted, not booting", self.cfg["rootfs"])
                rc = -1
                break
            boots += 1
            with open(os.path.join(self.run_dir, "console.log"), "ab", buffering=0) as console:
                console.write(("\n=== boot %d at %s ===\n" % (boots, time.strftime("%H:%M:%S"))).encode())
                self.child = subprocess.Popen(self.nspawn_cmd(), stdin=subprocess.DEVNULL,
                                              stdout=console, stderr=console, close_fds=True)
            write_json(status_path, {"pid": os.getpid(), "nspawn_pid": self.child.pid,
                                     "boots": boots, "boot_started": time.time(),
                                     "state": "running"})
            self.log("boot %d: systemd-nspawn pid %d", boots, self.child.pid)
            if self.stopping:  # SIGTERM raced with the start
                self.child.send_signal(signal.SIGTERM)
            while True:
                try:
                    rc = self.child.wait()
                    break
                except InterruptedError:
                    continue
            self.log("boot %d ended: systemd-nspawn exit status %d", boots, rc)
            if rc != REBOOT_STATUS:
                break
            if boots > 1000:
                self.log("too many reboots, giving up")
                break
            post = float(self.cfg.get("post_seconds") or 0)
            if post > 0:   # the firmware's POST before the next boot (interrupted by SIGTERM)
                self.log("POST: %.1f s before boot %d", post, boots + 1)
                until = time.monotonic() + post
                while not self.stopping and time.monotonic() < until:
                    time.sleep(min(0.2, max(until - time.monotonic(), 0.01)))
        write_json(status_path, {"pid": os.getpid(), "nspawn_pid": None, "boots": boots,
                                 "state": "stopped", "last_exit": rc, "stopped_at": time.time()})
        self.log("node stopped")
        return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        sys.stderr.write("usage: python -m kubegpu_lab.supervisor NODE_DIR\n")
        return 2
    return Supervisor(argv[0]).main()


if __name__ == "__main__":
    sys.exit(main())
