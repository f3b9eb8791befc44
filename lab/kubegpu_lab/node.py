"""One lab node on the host: its directory, overlay root, provisioning, supervisor, ssh.

Layout under ``<lab dir>/nodes/<name>/``:

    node.json      what the supervisor boots (machine name, root, bind mounts)
    upper/ work/   the node's writable overlay layer (its "disk": survives reboots)
    rootfs/        overlay mount point: base image (read-only lower) + upper
    run/           supervisor.json, supervisor.log, console.log (boot output)
"""
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import uuid

import yaml

from . import bootfs, cgroups, paths
from .profiles import kubelet_config
from .util import (LabError, is_mountpoint, kill_quiet, pid_alive, read_json, run, spawn_daemon,
                   umount_tree, wait_port, write_file, write_json)

NODE_KIT = paths.NODE_KIT
REPO_MOUNT = "/srv/kubegpu-lab/apt"
PY_SHEBANG = "#!/usr/bin/python3\n"
DEV_CHAR_UNIT = """[Unit]
Description=Create /dev/char symlinks for the NVIDIA device nodes
After=kubegpu-lab-kernel.service nvidia-uvm-init.service
Before=kubelet.service
ConditionPathExists=/usr/bin/nvidia-ctk

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/bin/nvidia-ctk system create-dev-char-symlinks --create-all

[Install]
WantedBy=multi-user.target
"""
DEV_CHAR_RULE = ('# NVIDIA Container Toolkit: /dev/char symlinks for the NVIDIA devices (runc + systemd cgroups)\n'
                 'ACTION=="add", DEVPATH=="/bus/pci/drivers/nvidia", '
                 'RUN+="/usr/bin/nvidia-ctk system create-dev-char-symlinks --create-all"\n')


class Node(object):
    def __init__(self, lab, name):
        self.lab = lab
        self.name = name
        self.dir = os.path.join(lab.dir, "nodes", name)
        self.rootfs = os.path.join(self.dir, "rootfs")
        self.upper = os.path.join(self.dir, "upper")
        self.work = os.path.join(self.dir, "work")
        self.run_dir = os.path.join(self.dir, "run")

    # --- identity ---------------------------------------------------------------------------

    @property
    def info(self):
        return self.lab.state["nodes"][self.name]

    @property
    def ssh_port(self):
        return self.info["ssh_port"]

    @property
    def machine(self):
        # nspawn machine names must be unique on the host and valid hostnames
        return ("kgl-%s-%s" % (self.lab.name, self.name))[:63]

    # --- filesystem -------------------------------------------------------------------------

    def mount(self, base_rootfs):
        for d in (self.upper, self.work, self.rootfs, self.run_dir):
            os.makedirs(d, exist_ok=True)
        if is_mountpoint(self.rootfs):
            return
        run(["mount", "-t", "overlay", "kubegpu-lab-%s" % self.name, "-o",
             "lowerdir=%s,upperdir=%s,workdir=%s" % (base_rootfs, self.upper, self.work), self.rootfs],
            capture=True)

    def p(self, path):
        return os.path.join(self.rootfs, path.lstrip("/"))

    def put(self, path, content, mode=0o644):
        write_file(self.p(path), content, mode)

    def link(self, path, target):
        full = self.p(path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        if os.path.lexists(full):
            os.unlink(full)
        os.symlink(target, full)

    def provision(self, spec, api, pubkey, catalog):
        """Write everything that makes the base image this node (before its first boot)."""
        name = self.name
        self.put("/etc/hostname", name + "\n")
        self.put("/etc/hosts", "127.0.0.1\tlocalhost\n127.0.1.1\t%s\n::1\tlocalhost ip6-localhost\n" % name)
        machine_id = uuid.uuid4().hex
        self.put("/etc/machine-id", machine_id + "\n", 0o444)
        run(["ssh-keygen", "-A", "-f", self.rootfs], capture=True)
        self.put("/etc/ssh/sshd_config.d/10-kubegpu-lab.conf",
                 "Port %d\nListenAddress 127.0.0.1\nPermitRootLogin prohibit-password\n"
                 "PasswordAuthentication no\nKbdInteractiveAuthentication no\n" % self.ssh_port)
        os.makedirs(self.p("/root/.ssh"), mode=0o700, exist_ok=True)
        os.chmod(self.p("/root/.ssh"), 0o700)
        self.put("/root/.ssh/authorized_keys", pubkey, 0o600)
        self.put("/etc/apt/sources.list.d/kubegpu-lab.list",
                 "# the lab's fake NVIDIA packages (kubegpu.fleet lab)\n"
                 "deb [trusted=yes] file:%s ./\n" % REPO_MOUNT)
        self.install_kit()
        self.install_boot(spec["boot"], machine_id)
        cfg = {
            "lab": self.lab.name, "node": name, "index": spec["index"],
            "gpus": gpu_specs(spec), "mig_apply": spec["mig_apply"],
            "memory_bytes": spec["memory_bytes"], "cpus": spec["cpus"], "uvm": spec["uvm"],
            "faults": spec["faults"], "runtime": spec["runtime"], "post_seconds": spec.get("post_seconds", 0),
            "kubelet_version": spec["kubelet"]["version"], "labels": node_labels(spec),
            "xid": spec.get("xid_events", []),
            "nvswitches": spec.get("nvswitch", {}).get("count", 0),
        }
        self.put("/etc/kubegpu-lab/node.json", json.dumps(cfg, indent=2, sort_keys=True) + "\n")
        self.put("/var/lib/kubelet/config.yaml", yaml.safe_dump(kubelet_config(spec), sort_keys=False))
        with open(api["ca_file"]) as f:
            self.put("/etc/kubernetes/pki/ca.crt", f.read())
        kubeconfig = {
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "kubegpu-lab",
                          "cluster": {"server": api["url"], "certificate-authority": "/etc/kubernetes/pki/ca.crt"}}],
            "users": [{"name": "system:node:%s" % name, "user": {"token": api["token"]}}],
            "contexts": [{"name": "system:node:%s@kubegpu-lab" % name,
                          "context": {"cluster": "kubegpu-lab", "user": "system:node:%s" % name}}],
            "current-context": "system:node:%s@kubegpu-lab" % name,
        }
        self.put("/etc/kubernetes/kubelet.conf", yaml.safe_dump(kubeconfig, sort_keys=False), 0o600)
        flags = ["--v=%d" % spec["kubelet"]["verbosity"]] + list(spec["kubelet"].get("flags") or [])
        self.put("/etc/default/kubelet", 'KUBELET_EXTRA_ARGS="%s"\n' % " ".join(flags))
        os.makedirs(self.p("/etc/kubernetes/manifests"), exist_ok=True)
        if spec["uvm"] == "boot":
            self.put("/etc/modules-load.d/nvidia-uvm.conf", "# load nvidia-uvm at boot\nnvidia-uvm\n")
        if spec["dev_char_symlinks"]:
            self.put("/etc/systemd/system/nvidia-dev-char-symlinks.service", DEV_CHAR_UNIT)
            self.link("/etc/systemd/system/multi-user.target.wants/nvidia-dev-char-symlinks.service",
                      "/etc/systemd/system/nvidia-dev-char-symlinks.service")
            self.put("/lib/udev/rules.d/71-nvidia-dev-char.rules", DEV_CHAR_RULE)
        pkgs = packages_list(spec, catalog)
        if pkgs:
            self.apt_install(pkgs)
        self.configure_toolkit(spec)

    def configure_toolkit(self, spec):
        """After the packages: the toolkit's injection mode (``runtime.toolkit_mode``, an edit of
        the installed config.toml as ``nvidia-ctk config --set`` makes) and a CDI spec in
        /etc/cdi (``runtime.cdi_spec``)."""
        from .profiles import cdi_spec_text, toolkit_config_text
        rt = spec["runtime"]
        conf = "/etc/nvidia-container-runtime/config.toml"
        if rt.get("toolkit_mode"):
            with open(self.p(conf)) as f:
                text = f.read()
            self.put(conf, toolkit_config_text(text, rt["toolkit_mode"]))
        if rt.get("cdi_spec"):
            self.put("/etc/cdi/nvidia.yaml", cdi_spec_text(spec["gpus"]["count"]))

    def install_boot(self, boot, machine_id):
        """Installed kernels in /boot as the profile's distribution lays them out, around the
        running (the host's) kernel release; see bootfs.py."""
        for path, kind, data in bootfs.boot_entries(boot["layout"], os.uname().release, boot["pending_kernel"],
                                                    machine_id, boot.get("other_flavour", False),
                                                    boot.get("default", "newest")):
            if kind == "dir":
                os.makedirs(self.p(path), exist_ok=True)
            elif kind == "link":
                self.link(path, data)
            else:
                full = self.p(path)
                os.makedirs(os.path.dirname(full), exist_ok=True)
                with open(full, "wb") as f:
                    f.write(data)
                os.chmod(full, 0o600 if "/vmlinuz-" in path or "System.map" in path else 0o644)

    def install_kit(self):
        """The lab's node-side code (fake kernel, kubelet, runtime, plugin) and its units."""
        lib = self.p("/usr/lib/kubegpu-lab")
        if os.path.isdir(lib):
            shutil.rmtree(lib)
        shutil.copytree(os.path.join(NODE_KIT, "lib", "kubegpu_lab_node"),
                        os.path.join(lib, "kubegpu_lab_node"),
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        os.makedirs(os.path.join(lib, "bin"))
        for name in sorted(os.listdir(os.path.join(NODE_KIT, "bin"))):
            install_script(os.path.join(NODE_KIT, "bin", name), os.path.join(lib, "bin", name))
        write_file(os.path.join(lib, "README"),
                   "kubegpu.fleet GPU node lab: node-side emulation (see docs/lab.md in the collection).\n")
        install_script(os.path.join(NODE_KIT, "bin", "kubelet"), self.p("/usr/bin/kubelet"))
        os.makedirs(self.p("/usr/local/sbin"), exist_ok=True)
        install_script(os.path.join(NODE_KIT, "bin", "modprobe"), self.p("/usr/local/sbin/modprobe"))
        units = os.path.join(NODE_KIT, "systemd")
        shutil.copy2(os.path.join(units, "kubelet.service"), self.p("/lib/systemd/system/kubelet.service"))
        os.makedirs(self.p("/etc/systemd/system/kubelet.service.d"), exist_ok=True)
        shutil.copy2(os.path.join(units, "10-kubeadm.conf"), self.p("/etc/systemd/system/kubelet.service.d/10-kubeadm.conf"))
        for unit, target in (("kubegpu-lab-kernel.service", "sysinit.target"),
                             ("kubegpu-lab-procview.service", "sysinit.target"),
                             ("kubegpu-lab-events.service", "multi-user.target")):
            shutil.copy2(os.path.join(units, unit), self.p("/etc/systemd/system/" + unit))
            self.link("/etc/systemd/system/%s.wants/%s" % (target, unit), "/etc/systemd/system/" + unit)
        self.link("/etc/systemd/system/multi-user.target.wants/kubelet.service", "/lib/systemd/system/kubelet.service")

    def nspawn_run(self, command, repo, timeout=600):
        """Run a command in the (stopped) node's root with systemd-nspawn, not booted."""
        cmd = ["systemd-nspawn", "--quiet", "--register=no", "--keep-unit", "--machine=" + self.machine,
               "--directory=" + self.rootfs, "--bind-ro=%s:%s" % (repo, REPO_MOUNT), "--resolv-conf=off",
               "--timezone=off", "--setenv=DEBIAN_FRONTEND=noninteractive", "--pipe", "--"] + command
        lab, node = self.lab.name, self.name

        def enter():
            cgroups.enter(lab, node)

        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=enter,
                              universal_newlines=True, timeout=timeout, stdin=subprocess.DEVNULL, check=False)
        cgroups.remove(self.lab.name, self.name)
        self._remove_propagate_dir()
        return proc

    def _remove_propagate_dir(self):
        propagate = os.path.join("/run/systemd/nspawn/propagate", self.machine)
        if os.path.isdir(propagate) and not os.listdir(propagate):
            os.rmdir(propagate)

    def apt_install(self, pkgs):
        proc = self.nspawn_run(["/bin/sh", "-ec", "apt-get update -q -o APT::Update::Error-Mode=any >/dev/null; "
                                "apt-get install -y -q --no-install-recommends " + " ".join(pkgs)],
                               self.lab.state["repo"])
        if proc.returncode != 0:
            raise LabError("node %s: installing %s failed:\n%s" % (self.name, " ".join(pkgs), proc.stdout[-3000:]))

    # --- lifecycle --------------------------------------------------------------------------

    def supervisor_state(self):
        return read_json(os.path.join(self.run_dir, "supervisor.json"), {})

    def supervisor_pid(self):
        st = self.supervisor_state()
        pid = st.get("pid")
        if pid and st.get("state") == "running" and pid_alive(pid):
            return pid
        return None

    def running(self):
        return self.supervisor_pid() is not None

    def start(self):
        if self.running():
            return False
        try:
            with open(os.path.join(self.rootfs, "etc/kubegpu-lab/node.json")) as fh:
                post = float(json.load(fh).get("post_seconds") or 0)
        except (OSError, ValueError, TypeError, AttributeError):
            post = 0.0
        write_json(os.path.join(self.dir, "node.json"), {
            "lab": self.lab.name, "node": self.name, "machine": self.machine, "hostname": self.name,
            "rootfs": self.rootfs, "bind_ro": [[self.lab.state["repo"], REPO_MOUNT]],
            "bind": [["/dev/fuse", "/dev/fuse"]] if os.path.exists("/dev/fuse") else [],
            "post_seconds": min(max(post, 0.0), 900.0)})
        env = dict(os.environ)
        env["PYTHONPATH"] = paths.IMPORT_ROOT
        for name in ("supervisor.json",):
            path = os.path.join(self.run_dir, name)
            if os.path.exists(path):
                os.unlink(path)
        pid = spawn_daemon([sys.executable, "-m", "kubegpu_lab.supervisor", self.dir],
                           os.path.join(self.run_dir, "supervisor.out"), env=env)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.supervisor_pid() == pid:
                return True
            if not pid_alive(pid):
                break
            time.sleep(0.05)
        raise LabError("node %s: the supervisor (pid %d) did not start the node; see %s"
                       % (self.name, pid, os.path.join(self.run_dir, "supervisor.out")))

    def wait_ssh(self, timeout=90):
        deadline = time.monotonic() + timeout
        if not wait_port(self.ssh_port, timeout, alive=self.running):
            raise LabError("node %s: sshd did not come up on 127.0.0.1:%d within %ds%s"
                           % (self.name, self.ssh_port, timeout, self.console_tail()))
        while time.monotonic() < deadline:
            if self.ssh(["true"], check=False, timeout=10).returncode == 0:
                return
            time.sleep(0.3)
        raise LabError("node %s: ssh login failed%s" % (self.name, self.console_tail()))

    def ssh_cmd(self, command, raw=False):
        """ssh argv running ``command`` (a list, quoted for the remote shell unless ``raw``)."""
        remote = list(command) if raw else ([" ".join(shlex.quote(a) for a in command)] if command else [])
        return ["ssh", "-F", "/dev/null", "-i", self.lab.key_path, "-p", str(self.ssh_port),
                "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                "-o", "LogLevel=ERROR", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5",
                "root@127.0.0.1"] + remote

    def ssh(self, command, check=True, timeout=60, input=None):
        proc = subprocess.run(self.ssh_cmd(command), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, timeout=timeout, input=input, check=False)
        if check and proc.returncode != 0:
            raise LabError("node %s: %s failed (exit %d): %s%s" % (self.name, " ".join(command), proc.returncode,
                                                                   proc.stderr.strip(), proc.stdout.strip()))
        return proc

    def console_tail(self, n=30):
        try:
            with open(os.path.join(self.run_dir, "console.log"), "rb") as f:
                lines = f.read().decode("utf-8", "replace").splitlines()[-n:]
            return "\nconsole (last %d lines):\n  %s" % (len(lines), "\n  ".join(lines))
        except OSError:
            return ""

    def boot_id(self):
        return self.ssh(["cat", "/proc/sys/kernel/random/boot_id"], timeout=15).stdout.strip()

    def reboot(self, timeout=120):
        """systemctl reboot inside the node; wait until it answers with a new boot id."""
        before = self.boot_id()
        self.ssh(["systemctl", "reboot"], check=False, timeout=15)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                proc = self.ssh(["cat", "/proc/sys/kernel/random/boot_id"], check=False, timeout=10)
            except subprocess.TimeoutExpired:
                continue
            if proc.returncode == 0 and proc.stdout.strip() and proc.stdout.strip() != before:
                return proc.stdout.strip()
            time.sleep(0.5)
        raise LabError("node %s did not come back from reboot within %ds%s" % (self.name, timeout, self.console_tail()))

    def stop(self, timeout=30):
        """Power the node off (SIGTERM to the supervisor -> clean shutdown), then kill what is left."""
        pid = self.supervisor_pid()
        st = self.supervisor_state()
        if pid:
            kill_quiet(pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and pid_alive(pid):
                time.sleep(0.1)
        if st.get("nspawn_pid") and pid_alive(st["nspawn_pid"]):
            kill_quiet(st["nspawn_pid"], signal.SIGTERM)
            time.sleep(1)
        if not cgroups.kill_all(self.lab.name, self.name, timeout=10):
            raise LabError("node %s: processes left after SIGKILL: %s"
                           % (self.name, sorted(cgroups.procs(self.lab.name, self.name))))
        cgroups.remove(self.lab.name, self.name)
        self._remove_propagate_dir()

    def destroy(self):
        self.stop()
        umount_tree(self.dir)
        if is_mountpoint(self.rootfs):
            raise LabError("node %s: %s is still mounted" % (self.name, self.rootfs))
        shutil.rmtree(self.dir)

    # --- measurements -----------------------------------------------------------------------

    def memory(self):
        """PSS of every process of the node (supervisor + nspawn + container), in bytes."""
        total = 0
        for pid in cgroups.procs(self.lab.name, self.name):
            try:
                with open("/proc/%d/smaps_rollup" % pid) as f:
                    for line in f:
                        if line.startswith("Pss:"):
                            total += int(line.split()[1]) * 1024
                            break
            except OSError:
                continue
        return total


def install_script(src, dest):
    """Install one of the node's Python launchers: the repository keeps them without a shebang
    (they only run inside nodes), the node gets them with the interpreter named directly, so
    the process is called after the script (``comm`` = kubelet, as kubelet_facts expects)."""
    with open(src) as f:
        body = f.read()
    write_file(dest, PY_SHEBANG + body, 0o755)


def gpu_specs(spec):
    g = spec["gpus"]
    out = []
    buses = [0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb]
    for i in range(g["count"]):
        bus = buses[i] if i < len(buses) else 0x10 + i
        out.append({"model": g["model"], "memory_mib": g["memory_mib"], "architecture": g["architecture"],
                    "compute_capability": g["compute_capability"], "pci_device_id": g["pci_device_id"],
                    "pci_bus_id": "00000000:%02X:00.0" % bus, "minor": i, "mig": spec["mig_layout"][i]})
        health = spec.get("health_map", {}).get(i)
        if health is not None:
            out[-1]["health"] = health
        if i in spec.get("missing_gpus", []):
            out[-1]["missing"] = True
    return out


def node_labels(spec):
    labels = {}
    if spec["gpus"]["count"]:
        labels.update({"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": spec["gpus"]["model"].replace(" ", "-"),
                       "nvidia.com/gpu.count": str(spec["gpus"]["count"])})
    if spec.get("pool"):
        labels["kubegpu.io/pool"] = spec["pool"]
    labels.update(spec.get("labels") or {})
    return {str(k): str(v) for k, v in labels.items()}


def packages_list(spec, catalog):
    from .profiles import packages_for
    return packages_for(spec, catalog)
