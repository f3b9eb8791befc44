"""Fake NVIDIA .deb packages and the local apt repository lab nodes install them from.

Built with dpkg-deb from ``lab/packages`` (scripts, maintainer scripts, catalog of versions)
and the fake NVML library + nvidia-smi of ``lab/fakes/nvml`` (compiled once per driver
version, so each ``libnvidia-ml.so.1`` reports its own version). The repository is a flat
apt-ftparchive tree, cached under the lab cache by a hash of every input, bind-mounted
read-only into each node at /srv/kubegpu-lab/apt and used through a ``[trusted=yes]`` source.

Per driver version V of branch B (Debian version ``V-0ubuntu1``), with Ubuntu's names:

=============================  ================================================================
libnvidia-compute-B            libnvidia-ml.so.V + libnvidia-ml.so.1 (the fake NVML for V)
nvidia-utils-B                 nvidia-smi; Depends libnvidia-compute-B (= V)
nvidia-compute-utils-B         nvidia-cuda-mps-control/-server; Depends libnvidia-compute-B (>= V)
nvidia-kernel-common-B         udev rules
nvidia-dkms-B                  the kernel modules; postinst installs them for the running kernel
nvidia-driver-B                metapackage: Depends the five above at (= V) except
                               compute-utils, which it only Recommends (unversioned)
nvidia-modprobe                nvidia-modprobe at V
nvidia-fabricmanager-B         nv-fabricmanager + nvidia-fabricmanager.service at V (see
                               build_fabricmanager: no dependency on the driver packages)
=============================  ================================================================

Because the metapackage only Recommends compute-utils, ``apt-get install nvidia-driver-570=V2``
upgrades the libraries and modules and leaves nvidia-compute-utils-570 at the old version (or
absent when it was never installed): the seed's missing/mismatched nvidia-cuda-mps-control.
Each branch's packages Provide/Conflict a branch-neutral name, so a cross-branch move replaces
them. nvidia-container-toolkit(-base) come at their own versions (nvidia-ctk, the hook).
"""
import hashlib
import json
import os
import shutil
import tempfile

import yaml

from . import paths
from .util import LabError, file_lock, log, run, write_file

PKG_SRC = paths.PACKAGES_DIR
NVML_SRC = paths.NVML_SRC
MAINTAINER = "kubegpu.fleet GPU node lab <lab@kubegpu.invalid>"
ARCH = "amd64"
MULTIARCH = "x86_64-linux-gnu"
MODULE_NAMES = ("nvidia", "nvidia-uvm", "nvidia-modeset", "nvidia-drm", "nvidia-peermem")


def catalog():
    with open(os.path.join(PKG_SRC, "catalog.yml")) as f:
        return yaml.safe_load(f)


def deb_version(version, cat=None):
    cat = cat or catalog()
    return "%s-%s" % (version, cat["revision"])


def toolkit_deb_version(version, cat=None):
    cat = cat or catalog()
    return "%s-%s" % (version, cat["container_toolkit_revision"])


def _inputs_hash():
    h = hashlib.sha256()
    for top in (PKG_SRC, NVML_SRC):
        if not os.path.isdir(top):
            raise LabError("missing package sources %s" % top)
        for dirpath, dirnames, files in os.walk(top):
            dirnames[:] = sorted(d for d in dirnames if d not in ("build", "__pycache__"))
            for name in sorted(files):
                if name.endswith((".c", ".h", ".sh", ".yml", ".toml", ".rules", ".service", ".cfg")) or "." not in name:
                    path = os.path.join(dirpath, name)
                    h.update(os.path.relpath(path, paths.DATA_DIR).encode() + b"\0")
                    with open(path, "rb") as f:
                        h.update(f.read())
    with open(os.path.abspath(__file__), "rb") as f:
        h.update(f.read())
    return h.hexdigest()[:16]


def repo_dir(cache):
    return os.path.join(cache, "repo", _inputs_hash())


def ensure_repo(cache, rebuild=False):
    """Return the path of the built apt repository, building it when its inputs changed."""
    target = repo_dir(cache)
    with file_lock(os.path.join(cache, "repo", ".lock"), what="package repository"):
        if rebuild and os.path.isdir(target):
            shutil.rmtree(target)
        if os.path.exists(os.path.join(target, "Release")):
            return target
        if not os.path.exists(os.path.join(NVML_SRC, "build.sh")):
            raise LabError("the fake NVML sources (%s/build.sh) are missing" % NVML_SRC)
        tmp = target + ".building"
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        cat = catalog()
        log("building fake NVIDIA packages for %d driver versions into %s",
            len(cat["driver_versions"]), target)
        work = tempfile.mkdtemp(prefix="kubegpu-lab-pkg.")
        try:
            for version in cat["driver_versions"]:
                build_driver(version, cat, work, tmp)
                build_fabricmanager(version, cat, work, tmp)
            for version in cat["container_toolkit_versions"]:
                build_toolkit(version, cat, work, tmp)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        index_repo(tmp)
        os.rename(tmp, target)
    return target


def index_repo(path):
    packages = run(["apt-ftparchive", "packages", "."], cwd=path, capture=True).stdout
    write_file(os.path.join(path, "Packages"), packages)
    release = run(["apt-ftparchive", "-o", "APT::FTPArchive::Release::Origin=kubegpu-lab",
                   "-o", "APT::FTPArchive::Release::Label=kubegpu-lab", "release", "."],
                  cwd=path, capture=True).stdout
    write_file(os.path.join(path, "Release"), release)


# Python tools in lab/packages/files carry no shebang in the repository (they only run inside
# lab nodes); the package gets them with the node's interpreter named directly.
PYTHON_TOOLS = ("nvidia-modprobe", "nvidia-ctk", "nvidia-container-runtime-hook")


def _read_src(name, version):
    with open(os.path.join(PKG_SRC, "files", name)) as f:
        text = f.read().replace("@VERSION@", version)
    if name in PYTHON_TOOLS:
        text = "#!/usr/bin/python3\n" + text
    return text


def _deb(out_dir, work, fields, files, scripts=None, conffiles=(), triggers=None):
    """Assemble one .deb. ``files``: {path: (content|None, mode, symlink_target|None)}."""
    name = fields["Package"]
    root = os.path.join(work, "%s_%s" % (name, fields["Version"]))
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(os.path.join(root, "DEBIAN"))
    size = 0
    for path, (content, mode, link) in sorted(files.items()):
        dest = os.path.join(root, path.lstrip("/"))
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        if link is not None:
            os.symlink(link, dest)
            continue
        if isinstance(content, str):
            content = content.encode()
        with open(dest, "wb") as f:
            f.write(content)
        os.chmod(dest, mode)
        size += len(content)
    doc = os.path.join(root, "usr", "share", "doc", name)
    os.makedirs(doc, exist_ok=True)
    with open(os.path.join(doc, "README.kubegpu-lab"), "w") as f:
        f.write("Fake package built by the kubegpu.fleet GPU node lab (lab/packages).\n")
    control = dict(fields)
    control.setdefault("Maintainer", MAINTAINER)
    control.setdefault("Architecture", ARCH)
    control.setdefault("Section", "non-free/libs")
    control.setdefault("Priority", "optional")
    control["Installed-Size"] = str(max(1, size // 1024))
    order = ["Package", "Source", "Version", "Architecture", "Maintainer", "Installed-Size",
             "Depends", "Recommends", "Provides", "Conflicts", "Replaces", "Breaks", "Section",
             "Priority", "Description"]
    lines = ["%s: %s" % (k, control[k]) for k in order if control.get(k)]
    write_file(os.path.join(root, "DEBIAN", "control"), "\n".join(lines) + "\n")
    for script, text in (scripts or {}).items():
        write_file(os.path.join(root, "DEBIAN", script), text, 0o755)
    if conffiles:
        write_file(os.path.join(root, "DEBIAN", "conffiles"), "\n".join(conffiles) + "\n")
    if triggers:
        write_file(os.path.join(root, "DEBIAN", "triggers"), triggers)
    deb = os.path.join(out_dir, "%s_%s_%s.deb" % (name, fields["Version"], control["Architecture"]))
    run(["dpkg-deb", "--root-owner-group", "-Zgzip", "-z1", "--build", root, deb], capture=True)
    shutil.rmtree(root)
    return deb


def _desc(summary):
    return "%s\n Fake package from the kubegpu.fleet GPU node lab; it installs the lab's\n" \
           " emulation of this NVIDIA component, not NVIDIA software." % summary


def build_driver(version, cat, work, out):
    branch = version.split(".")[0]
    dv = deb_version(version, cat)
    src = "nvidia-graphics-drivers-%s" % branch
    nvml_out = os.path.join(work, "nvml-%s" % version)
    run(["bash", os.path.join(NVML_SRC, "build.sh"), nvml_out, "--version", version], capture=True)
    libdir = "/usr/lib/%s" % MULTIARCH
    with open(os.path.join(nvml_out, libdir.lstrip("/"), "libnvidia-ml.so.%s" % version), "rb") as f:
        lib = f.read()
    with open(os.path.join(nvml_out, "usr", "bin", "nvidia-smi"), "rb") as f:
        smi = f.read()

    def neutral(name):
        return {"Provides": name, "Conflicts": name, "Replaces": name}

    _deb(out, work, dict(neutral("libnvidia-compute"), Package="libnvidia-compute-%s" % branch,
                         Source=src, Version=dv,
                         Description=_desc("NVIDIA libcompute package (NVML %s)" % version)),
         {"%s/libnvidia-ml.so.%s" % (libdir, version): (lib, 0o644, None),
          "%s/libnvidia-ml.so.1" % libdir: (None, 0, "libnvidia-ml.so.%s" % version)},
         triggers="activate-noawait ldconfig\n")
    _deb(out, work, dict(neutral("nvidia-utils"), Package="nvidia-utils-%s" % branch, Source=src,
                         Version=dv, Depends="libnvidia-compute-%s (= %s)" % (branch, dv),
                         Section="non-free/utils", Description=_desc("NVIDIA driver support binaries")),
         {"/usr/bin/nvidia-smi": (smi, 0o755, None)})
    _deb(out, work, dict(neutral("nvidia-compute-utils"), Package="nvidia-compute-utils-%s" % branch,
                         Source=src, Version=dv,
                         Depends="libnvidia-compute-%s (>= %s)" % (branch, dv),
                         Section="non-free/libs", Description=_desc("NVIDIA compute utilities")),
         {"/usr/bin/nvidia-cuda-mps-control": (_read_src("nvidia-cuda-mps-control", version), 0o755, None),
          "/usr/bin/nvidia-cuda-mps-server": (_read_src("nvidia-cuda-mps-server", version), 0o755, None)})
    _deb(out, work, dict(neutral("nvidia-kernel-common"), Package="nvidia-kernel-common-%s" % branch,
                         Source=src, Version=dv, Section="non-free/kernel",
                         Description=_desc("Shared files used with the kernel module")),
         {"/lib/udev/rules.d/60-nvidia-kernel-common.rules":
          (_read_src("nvidia-kernel-common.rules", version), 0o644, None)})
    modules = {}
    for mod in MODULE_NAMES:
        modules["/usr/src/nvidia-%s/%s.ko" % (version, mod)] = (
            "kubegpu-lab fake kernel module\nname: %s\nversion: %s\nlicense: NVIDIA\n"
            % (mod.replace("-", "_"), version), 0o644, None)
    modules["/usr/src/nvidia-%s/dkms.conf" % version] = (
        'PACKAGE_NAME="nvidia"\nPACKAGE_VERSION="%s"\nAUTOINSTALL="yes"\n' % version, 0o644, None)
    _deb(out, work, dict(neutral("nvidia-dkms-kernel"), Package="nvidia-dkms-%s" % branch, Source=src,
                         Version=dv, Depends="nvidia-kernel-common-%s (>= %s)" % (branch, dv),
                         Section="non-free/kernel", Description=_desc("NVIDIA DKMS package")),
         modules, scripts={"postinst": _read_src("dkms-postinst", version),
                           "prerm": _read_src("dkms-prerm", version)})
    deps = ["libnvidia-compute-%s (= %s)" % (branch, dv), "nvidia-utils-%s (= %s)" % (branch, dv),
            "nvidia-kernel-common-%s (= %s)" % (branch, dv), "nvidia-dkms-%s (= %s)" % (branch, dv)]
    _deb(out, work, dict(neutral("nvidia-driver"), Package="nvidia-driver-%s" % branch, Source=src,
                         Version=dv, Depends=", ".join(deps),
                         Recommends="nvidia-compute-utils-%s" % branch, Section="non-free/libs",
                         Description=_desc("NVIDIA driver metapackage")),
         {})
    _deb(out, work, dict(Package="nvidia-modprobe", Source="nvidia-modprobe", Version=dv,
                         Section="non-free/utils",
                         Description=_desc("utility to load NVIDIA kernel modules and create device nodes")),
         {"/usr/bin/nvidia-modprobe": (_read_src("nvidia-modprobe", version), 0o755, None)})


def build_fabricmanager(version, cat, work, out):
    """nvidia-fabricmanager-B at V, shaped like NVIDIA's own packaging of fabric manager
    (NVIDIA/yum-packaging-fabric-manager: one service package per branch, Provides/Conflicts a
    branch-neutral name, no dependency on the driver packages - the CUDA repository ties FM to
    the driver only through the cuda-drivers-fabricmanager-B metapackage). So, as in the field,
    a fabric manager of another version than the driver can be installed: the daemon then
    refuses to start. Canonical's archive packages add ``Depends: nvidia-kernel-common-B-server
    (= V)`` (Launchpad #2129682); the lab does not model that (docs/lab.md, "Fake packages")."""
    branch = version.split(".")[0]
    dv = deb_version(version, cat)
    name = "nvidia-fabricmanager-%s" % branch

    def src(fname):
        return _read_src(fname, version).replace("@BRANCH@", branch)

    _deb(out, work, dict(Package=name, Source="fabric-manager-%s" % branch, Version=dv,
                         Provides="nvidia-fabricmanager", Conflicts="nvidia-fabricmanager",
                         Replaces="nvidia-fabricmanager", Section="non-free/utils",
                         Description=_desc("Fabric Manager for NVSwitch based systems (%s)" % version)),
         {"/usr/bin/nv-fabricmanager": (src("nv-fabricmanager"), 0o755, None),
          "/lib/systemd/system/nvidia-fabricmanager.service":
          (src("nvidia-fabricmanager.service"), 0o644, None),
          "/usr/share/nvidia/nvswitch/fabricmanager.cfg": (src("fabricmanager.cfg"), 0o644, None)},
         scripts={"postinst": src("fabricmanager-postinst"), "prerm": src("fabricmanager-prerm")},
         conffiles=["/usr/share/nvidia/nvswitch/fabricmanager.cfg"])


def build_toolkit(version, cat, work, out):
    dv = toolkit_deb_version(version, cat)
    _deb(out, work, dict(Package="nvidia-container-toolkit-base", Source="nvidia-container-toolkit",
                         Version=dv, Section="utils",
                         Description=_desc("NVIDIA Container Toolkit Base (nvidia-ctk)")),
         {"/usr/bin/nvidia-ctk": (_read_src("nvidia-ctk", version), 0o755, None),
          "/etc/nvidia-container-runtime/config.toml": (_read_src("config.toml", version), 0o644, None)},
         conffiles=["/etc/nvidia-container-runtime/config.toml"])
    _deb(out, work, dict(Package="nvidia-container-toolkit", Source="nvidia-container-toolkit", Version=dv,
                         Depends="nvidia-container-toolkit-base (= %s)" % dv, Section="utils",
                         Description=_desc("NVIDIA Container toolkit (runtime hook)")),
         {"/usr/bin/nvidia-container-runtime-hook":
          (_read_src("nvidia-container-runtime-hook", version), 0o755, None)})


def describe(cache):
    """Versions available in the repository (for docs and status)."""
    cat = catalog()
    return {"driver_versions": cat["driver_versions"],
            "container_toolkit_versions": cat["container_toolkit_versions"],
            "repo": repo_dir(cache)}


if __name__ == "__main__":
    print(json.dumps(describe("/var/cache/kubegpu-lab"), indent=2))
