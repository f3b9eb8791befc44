"""Unit tests for plugins/module_utils/driver/packages.py and driver/node.py.

dpkg parsing is exercised against the real dpkg-query reading a throwaway dpkg database into
which real .deb files (built with dpkg-deb) were installed with ``dpkg --root``. rpm is not
installed on the development machine: rpm output is tested as text in the format the query
asks for.
"""
import os
import shutil
import subprocess

import pytest

from ansible_collections.kubegpu.fleet.plugins.module_utils.driver import node as dn
from ansible_collections.kubegpu.fleet.plugins.module_utils.driver import packages as dpk

HAVE_DPKG = all(shutil.which(b) for b in ("dpkg", "dpkg-deb", "dpkg-query"))


def run_command(args):
    proc = subprocess.run(args, check=False, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, env=dict(os.environ, LC_ALL="C"))
    return proc.returncode, proc.stdout, proc.stderr


def make_root(tmp, packages, holds=()):
    """A dpkg root under ``tmp`` with ``packages`` [(name, version)] really installed."""
    root = os.path.join(str(tmp), "root")
    admin = os.path.join(root, "var", "lib", "dpkg")
    for d in ("info", "updates", "triggers"):
        os.makedirs(os.path.join(admin, d))
    for f in ("status", "available"):
        open(os.path.join(admin, f), "w").close()
    debs = os.path.join(str(tmp), "debs")
    os.makedirs(debs, exist_ok=True)
    for name, version in packages:
        src = os.path.join(str(tmp), "src-%s-%s" % (name, version))
        os.makedirs(os.path.join(src, "DEBIAN"))
        with open(os.path.join(src, "DEBIAN", "control"), "w") as f:
            f.write("Package: %s\nVersion: %s\nArchitecture: all\nMaintainer: t <t@example.invalid>\n"
                    "Description: kubegpu test package\n" % (name, version))
        deb = os.path.join(debs, "%s_%s_all.deb" % (name, version))
        subprocess.run(["dpkg-deb", "--build", "--root-owner-group", src, deb], check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run(["dpkg", "--root=%s" % root, "--force-not-root", "--force-bad-path", "-i", deb],
                       check=True, stdout=subprocess.DEVNULL)
    if holds:
        subprocess.run(["dpkg", "--root=%s" % root, "--set-selections"], check=True,
                       input="".join("%s hold\n" % h for h in holds), universal_newlines=True)
    return root


DPKG_TEXT = (
    "libnvidia-compute-570\t570.172.08-0ubuntu1\tii \tamd64\n"
    "nvidia-compute-utils-570\t570.172.08-0ubuntu1\thi \tamd64\n"
    "nvidia-driver-570\t570.172.08-0ubuntu1\tii \tamd64\n"
    "libnvidia-compute-535\t535.183.01-0ubuntu1\trc \tamd64\n"
    "libgldispatch0-nvidia\t\tun \t\n"
    "nvidia-container-toolkit\t1.14.5-1\tii \tamd64\n"
    "nvidia-dkms-570\t570.172.08-0ubuntu1\tiU \tamd64\n"
    "garbage line\n"
)

RPM_TEXT = (
    "nvidia-driver\t3:570.148.08-1.el9\tii \tx86_64\n"
    "nvidia-driver-cuda-libs\t3:570.148.08-1.el9\tii \tx86_64\n"
    "kmod-nvidia-latest-dkms\t3:570.148.08-1.el9\tii \tx86_64\n"
    "nvidia-container-toolkit\t1.17.8-1\tii \tx86_64\n"
    "cuda-drivers\t570.148.08-1\tii \tx86_64\n"
)


def test_parse_dpkg_query():
    pkgs = dpk.parse_dpkg_query(DPKG_TEXT)
    names = [p["name"] for p in pkgs]
    assert "libnvidia-compute-535" not in names and "libgldispatch0-nvidia" not in names
    by = dict((p["name"], p) for p in pkgs)
    assert by["nvidia-compute-utils-570"]["held"] is True and by["nvidia-compute-utils-570"]["installed"]
    assert by["nvidia-dkms-570"]["installed"] is False and by["nvidia-dkms-570"]["status"] == "iU"
    assert by["libnvidia-compute-570"]["arch"] == "amd64"
    assert names == sorted(names)


def test_parse_rpm_query_and_userspace_version():
    pkgs = dpk.parse_rpm_query(RPM_TEXT)
    assert all(p["installed"] for p in pkgs)
    assert dpk.userspace_driver_version(pkgs) == ("570.148.08", "nvidia-driver-cuda-libs")
    assert dpk.toolkit_version(pkgs) == "1.17.8-1"
    assert dpk.upstream_version("3:570.148.08-1.el9") == "570.148.08"
    cu = dpk.compute_utils_status(pkgs, "570.148.08", "rpm")
    assert cu["checked"] is False and "Debian/Ubuntu" in cu["reason"]


def test_userspace_version_preference_and_toolkit():
    pkgs = dpk.parse_dpkg_query(DPKG_TEXT)
    assert dpk.userspace_driver_version(pkgs) == ("570.172.08", "libnvidia-compute-570")
    assert dpk.toolkit_version(pkgs) == "1.14.5-1"
    only_meta = [p for p in pkgs if p["name"] == "nvidia-driver-570"]
    assert dpk.userspace_driver_version(only_meta) == ("570.172.08", "nvidia-driver-570")
    assert dpk.userspace_driver_version([]) == (None, None)
    # Highest wins among several packages of one rule (leftover branch still installed).
    two = dpk.parse_dpkg_query("libnvidia-compute-535\t535.183.08-0ubuntu1\tii \tamd64\n"
                               "libnvidia-compute-570\t570.86.15-0ubuntu1\tii \tamd64\n")
    assert dpk.userspace_driver_version(two) == ("570.86.15", "libnvidia-compute-570")


def test_compute_utils_status():
    pkgs = dpk.parse_dpkg_query(DPKG_TEXT)
    cu = dpk.compute_utils_status(pkgs, "570.172.08", "dpkg")
    assert cu["checked"] and cu["installed"] and cu["matches_driver"]
    assert cu["package"] == "nvidia-compute-utils-570"
    cu = dpk.compute_utils_status(pkgs, "570.181.01", "dpkg")
    assert cu["installed"] and cu["matches_driver"] is False and "does not match driver 570.181.01" in cu["reason"]
    cu = dpk.compute_utils_status(pkgs, "580.65.06", "dpkg")
    assert cu["installed"] is False and cu["package"] == "nvidia-compute-utils-580"
    server = dpk.parse_dpkg_query("nvidia-compute-utils-570-server\t570.172.08-0ubuntu1\tii \tamd64\n")
    cu = dpk.compute_utils_status(server, "570.172.08", "dpkg")
    assert cu["package"] == "nvidia-compute-utils-570-server" and cu["matches_driver"]
    assert dpk.compute_utils_status(pkgs, None, "dpkg")["checked"] is False


def test_query_args():
    args = dpk.dpkg_query_args("/usr/bin/dpkg-query", "/host")
    assert args[:3] == ["/usr/bin/dpkg-query", "--admindir=/host/var/lib/dpkg", "-W"]
    assert args[-len(dpk.QUERY_PATTERNS):] == list(dpk.QUERY_PATTERNS)
    assert dpk.dpkg_query_args("dpkg-query")[1] == "-W"
    args = dpk.rpm_query_args("/usr/bin/rpm", "/host")
    assert args[:4] == ["/usr/bin/rpm", "--root", "/host", "-qa"]
    with pytest.raises(ValueError):
        dpk.query_packages(run_command, "pacman", "/bin/true")


def test_query_packages_reports_rpm_failure():
    def failing(args):
        return 1, "", "error: cannot open Packages database in /var/lib/rpm\n"
    pkgs, err = dpk.query_packages(failing, "rpm", "/usr/bin/rpm")
    assert pkgs == [] and "rpm failed (rc=1): error: cannot open Packages database" in err


@pytest.mark.skipif(not HAVE_DPKG, reason="dpkg tools not installed")
def test_real_dpkg_query_on_a_package_root(tmp_path):
    root = make_root(tmp_path, [("libnvidia-compute-570", "570.148.08-0ubuntu1"),
                                ("nvidia-compute-utils-570", "570.148.08-0ubuntu1"),
                                ("nvidia-container-toolkit", "1.14.5-1"),
                                ("zlib-unrelated", "1.0-1")],
                     holds=["libnvidia-compute-570"])
    pkgs, err = dpk.query_packages(run_command, "dpkg", shutil.which("dpkg-query"), root)
    assert err is None
    assert [p["name"] for p in pkgs] == ["libnvidia-compute-570", "nvidia-compute-utils-570",
                                         "nvidia-container-toolkit"]
    assert pkgs[0]["held"] is True and pkgs[0]["version"] == "570.148.08-0ubuntu1"
    # An empty database: dpkg-query exits 1 ("no packages found"), which is not an error.
    empty = make_root(tmp_path / "e", [])
    assert dpk.query_packages(run_command, "dpkg", shutil.which("dpkg-query"), empty) == ([], None)
    # dpkg-query itself treats a missing database as empty (rc 1, "no packages found"):
    # list_packages checks for the database first, so a wrong package_root is reported.
    pkgs, err = dpk.query_packages(run_command, "dpkg", shutil.which("dpkg-query"), str(tmp_path / "nope"))
    assert (pkgs, err) == ([], None)
    info = dn.list_packages(run_command, shutil.which, str(tmp_path / "nope"))
    assert info == {"manager": None, "packages": [],
                    "error": "no dpkg or rpm database under %s" % (tmp_path / "nope")}
    info = dn.list_packages(run_command, lambda b: None, root)
    assert info["error"] == "dpkg database found under %s but dpkg-query is not installed" % root
    info = dn.list_packages(run_command, shutil.which, root)
    assert info["manager"] == "dpkg" and len(info["packages"]) == 3


# ------------------------------------------------------------------------------ driver_node

@pytest.mark.skipif(not HAVE_DPKG, reason="dpkg tools not installed")
def test_gather_node_from_packages_and_proc(tmp_path):
    root = make_root(tmp_path, [("libnvidia-compute-570", "570.172.08-0ubuntu1"),
                                ("nvidia-container-toolkit-base", "1.17.8-1")])
    proc = tmp_path / "proc"
    (proc / "driver" / "nvidia").mkdir(parents=True)
    (proc / "driver" / "nvidia" / "version").write_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.148.08  Sat Apr 19 01:18:27 UTC 2025\n"
        "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n")
    params = {"package_root": root, "proc_path": str(proc), "mig_mixed": True, "mig_enabled": True,
              "gpu_names": ["NVIDIA H100 80GB HBM3"]}
    node, pkg_info, detection = dn.gather_node(params, run_command, shutil.which)
    assert pkg_info["manager"] == "dpkg" and pkg_info["error"] is None
    assert node["driver_version"] == "570.172.08"
    assert node["driver_version_source"] == "package libnvidia-compute-570"
    assert node["kernel_module_version"] == "570.148.08"
    assert node["kernel_module_version_source"] == str(proc / "driver" / "nvidia" / "version")
    assert node["toolkit_version"] == "1.17.8-1" and node["toolkit_version_source"] == "packages"
    assert node["mig_source"] == "option"
    assert detection["gpu_facts"] == "not needed"


def test_gather_node_options_win_and_bad_values_name_themselves(tmp_path):
    params = {"driver_version": "570.148.08", "kernel_module_version": "570.148.08",
              "toolkit_version": "none", "mig_mixed": False, "mig_enabled": False,
              "gpu_names": [], "package_root": str(tmp_path), "proc_path": str(tmp_path)}
    node, _pkgs, detection = dn.gather_node(params, run_command, lambda b: None)
    assert node["driver_version_source"] == "option" and node["toolkit_version"] is None
    assert node["toolkit_version_source"] == "option"
    assert detection["gpu_facts"] == "not needed"
    with pytest.raises(dn.NodeInputError, match="driver_version: cannot parse NVIDIA driver version '570.x'"):
        dn.gather_node(dict(params, driver_version="570.x"), run_command, lambda b: None)
    with pytest.raises(dn.NodeInputError, match="kernel_module_version: .*'latest'"):
        dn.gather_node(dict(params, kernel_module_version="latest"), run_command, lambda b: None)
    with pytest.raises(dn.NodeInputError, match="toolkit_version: cannot parse version '1.x'"):
        dn.gather_node(dict(params, toolkit_version="1.x"), run_command, lambda b: None)


def test_gather_node_without_gpu_facts_reports_why(tmp_path):
    params = {"package_root": str(tmp_path), "proc_path": str(tmp_path)}
    node, pkg_info, detection = dn.gather_node(params, run_command, lambda b: None, None,
                                               "cannot import gpu")
    assert pkg_info["manager"] is None
    assert detection == {"gpu_facts": "unavailable", "probe": None, "error": "cannot import gpu",
                         "warnings": []}
    assert node["mig_mixed"] is None and node["driver_version"] is None


def test_gather_node_probe_errors_do_not_escape(tmp_path):
    def broken(**kw):
        raise RuntimeError("proc_path %s is not a directory" % kw["proc_path"])
    params = {"package_root": str(tmp_path), "proc_path": str(tmp_path / "missing")}
    _node, _p, detection = dn.gather_node(params, run_command, lambda b: None, broken)
    assert detection["gpu_facts"] == "error" and "RuntimeError: proc_path" in detection["error"]


def test_apply_facts_fills_only_unknowns():
    node = {"driver_version": "570.148.08", "driver_version_source": "option",
            "kernel_module_version": None, "kernel_module_version_source": None,
            "mig_mixed": True, "mig_enabled": None, "mig_source": "option",
            "gpu_names": None, "gpu_names_source": None}
    facts = {"present": True, "probe": {"status": "ok", "backend": "nvml", "error": None},
             "driver_version": "570.172.08", "driver_version_source": "nvml",
             "kernel_module_version": "570.172.08", "mig_enabled": True, "mig_mixed": False,
             "gpus": [{"name": "NVIDIA H100 80GB HBM3"}, {"name": "NVIDIA H100 80GB HBM3"}]}
    detection = {}
    dn.apply_facts(node, facts, detection)
    assert node["driver_version"] == "570.148.08"          # option kept
    assert node["mig_mixed"] is True                       # option kept
    assert node["mig_enabled"] is True and node["mig_source"] == "option+gpu_facts"
    assert node["kernel_module_version"] == "570.172.08"
    assert node["gpu_names"] == ["NVIDIA H100 80GB HBM3"] * 2
    assert detection["probe"]["status"] == "ok"


# ------------------------------------------------------------ bounded_runner

def _script(tmp_path, body):
    path = tmp_path / "tool"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return str(path)


def test_bounded_runner_decodes_non_utf8_output_to_valid_text(tmp_path):
    tool = _script(tmp_path, r"printf 'nvidia-utils-\351\377570\t1.0\tii \tall\n'; printf '\376' >&2")
    rc, out, err = dn.bounded_runner(10)([tool])
    assert rc == 0
    assert out == "nvidia-utils-\ufffd\ufffd570\t1.0\tii \tall\n" and err == "\ufffd"
    out.encode("utf-8")  # valid UTF-8 JSON for the controller: no surrogates
    assert [p["name"] for p in dpk.parse_dpkg_query(out)] == ["nvidia-utils-\ufffd\ufffd570"]


def test_bounded_runner_kills_a_command_past_its_deadline(tmp_path):
    pidfile = str(tmp_path / "pid")
    tool = _script(tmp_path, "echo $$ > '%s'; exec sleep 300" % pidfile)
    rc, out, err = dn.bounded_runner(0.5)([tool])
    assert rc == dn.RC_TIMEOUT and out == ""
    assert "did not finish within 0.5s; it was killed" in err
    with open(pidfile) as f:
        pid = int(f.read())
    assert not os.path.exists("/proc/%d" % pid) or open("/proc/%d/stat" % pid).read().split(") ")[1][0] in "ZX"


def test_bounded_runner_bounds_output_and_reports_missing_tools(tmp_path):
    rc, _out, err = dn.bounded_runner(30, limit=1000)(["head", "-c", "5000", "/dev/zero"])
    assert rc == dn.RC_TIMEOUT and "printed more than 1000 bytes" in err
    rc, _out, err = dn.bounded_runner(30)([str(tmp_path / "no-such-tool")])
    assert rc == dn.RC_CANNOT_RUN and "cannot run" in err and "no-such-tool" in err


def test_bounded_runner_environment(tmp_path):
    run = dn.bounded_runner(10, environ_update={"LC_ALL": "C", "KUBEGPU_X": "1"})
    rc, out, _err = run(["sh", "-c", "echo $LC_ALL $KUBEGPU_X $KUBEGPU_Y"], environ_update={"KUBEGPU_Y": "2"})
    assert (rc, out) == (0, "C 1 2\n")


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 1e300, -1, 0, "soon"])
def test_bounded_runner_refuses_bad_timeouts(value):
    with pytest.raises(ValueError, match="command timeout"):
        dn.bounded_runner(value)


def test_query_timeout_is_a_package_query_error(tmp_path):
    tool = _script(tmp_path, "exec sleep 300")
    pkgs, err = dpk.query_packages(dn.bounded_runner(0.5), "dpkg", tool)
    assert pkgs == [] and "rc=124" in err and "did not finish within 0.5s" in err
