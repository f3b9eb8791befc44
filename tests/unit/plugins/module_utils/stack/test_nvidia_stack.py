"""Node stack facts (module_utils/stack/facts.py) and their controller-side completion
(plugin_utils/stack/facts.py): a real dpkg database read by the real dpkg-query, real
config.toml contents (the file the 1.17.8 package writes), hostile files."""
import os
import shutil
import stat

import pytest

from ansible_collections.kubegpu.fleet.plugins.module_utils.stack import facts as ns
from ansible_collections.kubegpu.fleet.plugins.module_utils.driver.packages import parse_dpkg_query, parse_rpm_query
from ansible_collections.kubegpu.fleet.plugins.module_utils._common.node_probes import ProbeFailed
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.stack import facts as tc
from ansible_collections.kubegpu.fleet.tests.lib.paths import TOOLKIT_CONFIG

# What nvidia-ctk 1.17.8 writes at package install (postinst: nvidia-ctk config --in-place);
# internal/config/toml_test.go of v1.17.8 (ldconfig as on Debian/Ubuntu). One copy, shared with
# the toolkit_config tests and the lab's toolkit packages: lab/packages/files/config.toml.
with open(TOOLKIT_CONFIG) as _f:
    DEFAULT_CONFIG_1_17_8 = _f.read()

MITIGATED_CDI = DEFAULT_CONFIG_1_17_8.replace('mode = "auto"', 'mode = "cdi"').replace(
    'runtimes = ["docker-runc", "runc", "crun"]', 'runtimes = ["crun", "runc"]') + \
    "\n[features]\ndisable-cuda-compat-lib-hook = true\n"

STATUS_STANZA = """Package: {name}
Status: install ok installed
Priority: optional
Section: utils
Maintainer: NVIDIA CORPORATION <cudatools@nvidia.com>
Architecture: amd64
Version: {version}
Description: {name}

"""

OPEN_BANNER = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.172.08  Release Build  "
               "(dvs-builder@U16-I3-B03-4-3)  Tue Jul  8 18:58:45 UTC 2025\n"
               "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n")
PROPRIETARY_BANNER = ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.183.01  Sun May 12 19:39:15 UTC 2024\n"
                      "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n")


def put(root, rel, text, mode=0o644):
    path = os.path.join(str(root), rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(text if isinstance(text, bytes) else text.encode())
    os.chmod(path, mode)
    return path


def dpkg_root(tmp_path, packages, config=None):
    root = tmp_path / "host"
    put(root, "var/lib/dpkg/status", "".join(STATUS_STANZA.format(name=n, version=v) for n, v in packages))
    if config is not None:
        put(root, "etc/nvidia-container-runtime/config.toml", config)
    put(root, "usr/bin/runc", "#!/bin/sh\n", 0o755)
    return root


def nvswitch_sys(tmp_path, count=4, taint=None):
    sysdir = tmp_path / "sys"
    devs = sysdir / "bus" / "pci" / "devices"
    os.makedirs(str(devs))
    entries = [("0000:00:00.0", "0x8086", "0x09a2", "0x060000"),
               ("0000:18:00.0", "0x10de", "0x2330", "0x030200")]
    entries += [("0000:%02x:00.0" % (5 + i), "0x10de", "0x22a3", "0x068000") for i in range(count)]
    for bdf, vendor, device, cls in entries:
        real = sysdir / "devices" / "pci0000:00" / bdf
        os.makedirs(str(real))
        for name, val in (("vendor", vendor), ("device", device), ("class", cls)):
            (real / name).write_text(val + "\n")
        os.symlink(os.path.join("..", "..", "..", "devices", "pci0000:00", bdf), str(devs / bdf))
    if taint is not None:
        put(sysdir, "module/nvidia/taint", taint + "\n")
    return sysdir


def run(root, sys_path, dev_path, proc_path, **extra):
    params = dict(root=str(root), sys_path=str(sys_path), dev_path=str(dev_path), proc_path=str(proc_path),
                  service_state=False)
    params.update(extra)
    warnings = []
    res = ns.stack_facts_run(params, shutil.which, warnings.append)
    stack = res["ansible_facts"]["nvidia_stack"]
    return stack, warnings


# ----------------------------------------------------------------------------- packages


def test_dpkg_query_shapes():
    out = ("libnvidia-container-tools\t1.17.8-1\tii \tamd64\n"
           "libnvidia-container1\t1.17.8-1\tii \tamd64\n"
           "nvidia-container-toolkit\t1.17.8-1\tii \tamd64\n"
           "nvidia-container-toolkit-base\t1.17.8-1\tii \tamd64\n"
           "nvidia-fabricmanager-570\t570.172.08-1\tii \tamd64\n"
           "nvidia-fabricmanager-550\t550.163.01-1\trc \tamd64\n")
    pkgs = parse_dpkg_query(out)
    tk = ns.toolkit_packages(pkgs)
    assert tk == {"installed": True, "version": "1.17.8",
                  "packages": {"libnvidia-container-tools": "1.17.8-1", "libnvidia-container1": "1.17.8-1",
                               "nvidia-container-toolkit": "1.17.8-1", "nvidia-container-toolkit-base": "1.17.8-1"}}
    # the removed-but-configured 550 package (rc) is not installed
    assert ns.fabric_manager_package(pkgs) == {"installed": True, "package": "nvidia-fabricmanager-570",
                                               "version": "570.172.08"}


def test_rpm_query_shapes():
    out = ("nvidia-container-toolkit-base\t1.17.8-1\tii \tx86_64\n"
           "libnvidia-container1\t1.17.8-1\tii \tx86_64\n"
           "nvidia-fabric-manager\t570.172.08-1\tii \tx86_64\n")
    pkgs = parse_rpm_query(out)
    tk = ns.toolkit_packages(pkgs)
    assert tk["version"] == "1.17.8" and tk["installed"]  # -base alone is enough
    assert ns.fabric_manager_package(pkgs)["package"] == "nvidia-fabric-manager"


def test_no_toolkit():
    assert ns.toolkit_packages(parse_dpkg_query("nvidia-driver-570\t570.172.08-0ubuntu1\tii \tamd64\n")) == \
        {"installed": False, "version": None, "packages": {}}
    assert ns.fabric_manager_package([]) == {"installed": False, "package": None, "version": None}


@pytest.mark.skipif(not shutil.which("dpkg-query"), reason="needs dpkg-query")
def test_stack_facts_real_dpkg_and_default_config(tmp_path):
    root = dpkg_root(tmp_path, [("nvidia-container-toolkit", "1.17.8-1"), ("nvidia-container-toolkit-base", "1.17.8-1"),
                                ("nvidia-fabricmanager-570", "570.158.01-1")], DEFAULT_CONFIG_1_17_8)
    proc = tmp_path / "proc"
    put(proc, "driver/nvidia/version", OPEN_BANNER)
    dev = tmp_path / "dev"
    for i in range(4):
        put(dev, "nvidia-nvswitch%d" % i, "")
    put(dev, "nvidia-nvswitchctl", "")
    stack, warnings = run(root, nvswitch_sys(tmp_path), dev, proc)
    tk = stack["container_toolkit"]
    assert tk["installed"] and tk["version"] == "1.17.8" and tk["package_manager"] == "dpkg"
    assert tk["config_path"] == str(root) + "/etc/nvidia-container-runtime/config.toml"
    assert tk["config_text"] == DEFAULT_CONFIG_1_17_8
    assert tk["runtime_binaries"] == ["runc"]
    assert stack["fabric_manager"]["package"] == "nvidia-fabricmanager-570"
    assert stack["fabric_manager"]["version"] == "570.158.01"
    assert stack["fabric_manager"]["service"] == {"active": None, "enabled": None}
    assert stack["nvswitch"]["present"] is True and stack["nvswitch"]["count"] == 4
    assert stack["nvswitch"]["bus_ids"] == ["0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0"]
    assert len(stack["nvswitch"]["device_nodes"]) == 4  # nvidia-nvswitchctl is not a switch
    assert stack["kernel_modules"] == "open"
    assert warnings == []
    # the controller's half: the default file (mode auto) on 1.17.8 is legacy injection, runc
    stack, warns = tc.finish_stack_facts(stack)
    tk = stack["container_toolkit"]
    assert "config_text" not in tk
    assert warns == []
    assert tk["config"]["mode"] == "auto" and tk["config"]["runtimes"] == ["docker-runc", "runc", "crun"]
    assert tk["config"]["cuda-compat-mode"] == "ldconfig"
    assert tk["injection_mode"] == "legacy"
    assert tk["runtime"] == "runc"
    assert tk["cuda_compat_hook_disabled"] is False
    assert tk["config"]["accept-nvidia-visible-devices-envvar-when-unprivileged"] is None  # commented out


@pytest.mark.skipif(not shutil.which("dpkg-query"), reason="needs dpkg-query")
def test_stack_facts_cdi_mode_crun_mitigated(tmp_path):
    root = dpkg_root(tmp_path, [("nvidia-container-toolkit", "1.17.7-1")], MITIGATED_CDI)
    put(root, "usr/bin/crun", "#!/bin/sh\n", 0o755)
    put(root, "etc/cdi/nvidia.yaml", "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: []\n")
    put(root, "var/run/cdi/nvidia-mig.json", "{}")
    put(root, "etc/cdi/other-vendor.yaml", "")
    empty = tmp_path / "empty"
    os.makedirs(str(empty))
    stack, _w = run(root, empty, empty, empty)
    assert stack["container_toolkit"]["cdi_specs"] == ["/etc/cdi/nvidia.yaml", "/var/run/cdi/nvidia-mig.json"]
    assert stack["nvswitch"]["present"] is None  # no PCI tree, no device nodes: undecided
    assert stack["kernel_modules"] is None
    tk = tc.finish_stack_facts(stack)[0]["container_toolkit"]
    assert tk["injection_mode"] == "cdi" and tk["runtime"] == "crun"
    assert tk["cuda_compat_hook_disabled"] is True
    assert tk["config"]["features"] == {"disable-cuda-compat-lib-hook": True}


def test_stack_facts_no_package_db_is_a_warning(tmp_path):
    empty = tmp_path / "empty"
    os.makedirs(str(empty))
    stack, warnings = run(empty, empty, empty, empty)
    assert stack["container_toolkit"]["installed"] is False
    assert any("no dpkg or rpm database" in w for w in warnings)
    assert tc.finish_stack_facts(stack)[0]["container_toolkit"]["injection_mode"] is None


@pytest.mark.parametrize("key,value", [("root", "relative/path"), ("sys_path", "/sys/../etc"),
                                       ("fabric_manager_unit", "nvidia-*"), ("command_timeout", float("nan"))])
def test_bad_options_fail_naming_the_value(tmp_path, key, value):
    with pytest.raises(ProbeFailed) as e:
        ns.stack_facts_run({key: value}, shutil.which, lambda m: None)
    assert key in e.value.msg


# ----------------------------------------------------------------------------- hostile files


def test_config_fifo_does_not_block(tmp_path):
    root = tmp_path / "host"
    path = root / "etc" / "nvidia-container-runtime" / "config.toml"
    os.makedirs(str(path.parent))
    os.mkfifo(str(path))
    p, text, err = ns.read_toolkit_config(str(root))
    assert text is None and "FIFO" in err


def test_config_huge(tmp_path):
    root = tmp_path / "host"
    put(root, "etc/nvidia-container-runtime/config.toml", b"#" * (ns.CONFIG_LIMIT + 1))
    _p, text, err = ns.read_toolkit_config(str(root))
    assert text is None and "more than" in err


def test_config_non_utf8(tmp_path):
    root = tmp_path / "host"
    put(root, "etc/nvidia-container-runtime/config.toml", b'[nvidia-container-runtime]\nmode = "\xff\xfe"\n')
    _p, text, err = ns.read_toolkit_config(str(root))
    assert text is None and "not UTF-8" in err
    stack = {"container_toolkit": {"installed": True, "version": "1.17.8", "config_text": None,
                                   "config_error": err, "runtime_binaries": ["runc"]}}
    tk = tc.finish_stack_facts(stack)[0]["container_toolkit"]
    assert tk["config"] is None and tk["injection_mode"] is None and tk["runtime"] is None
    assert tk["cuda_compat_hook_disabled"] is None


def test_config_missing(tmp_path):
    assert ns.read_toolkit_config(str(tmp_path)) == (None, None, None)
    # no file: the runtime's defaults (mode auto, default runtimes) apply
    stack = {"container_toolkit": {"installed": True, "version": "1.18.0", "config_path": None, "config_text": None,
                                   "config_error": None, "runtime_binaries": ["crun", "runc"]}}
    tk = tc.finish_stack_facts(stack)[0]["container_toolkit"]
    assert tk["config"] is None and tk["injection_mode"] == "cdi" and tk["runtime"] == "runc"
    assert tk["cuda_compat_hook_disabled"] is None


def test_broken_toml_is_a_warning():
    stack = {"container_toolkit": {"installed": True, "version": "1.17.8", "config_path": "/etc/x.toml",
                                   "config_text": "[nvidia-container-runtime\nmode = legacy", "config_error": None,
                                   "runtime_binaries": ["runc"]}}
    stack, warnings = tc.finish_stack_facts(stack)
    tk = stack["container_toolkit"]
    assert tk["config"] is None and "not valid TOML" in tk["config_error"]
    assert warnings and "/etc/x.toml" in warnings[0]
    assert tk["injection_mode"] is None


def test_config_wrong_types_ignored():
    doc, err = tc.parse_config('[nvidia-container-runtime]\nmode = 3\nruntimes = "runc"\n[features]\n'
                               'disable-cuda-compat-lib-hook = "yes"\n')
    assert err is None
    s = tc.selected_settings(doc)
    assert s["mode"] is None and s["runtimes"] is None and s["features"] == {}


@pytest.mark.parametrize("mode,version,expected", [
    ("legacy", "1.18.0", "legacy"), ("cdi", "1.16.1", "cdi"), ("jit-cdi", "1.18.0", "cdi"),
    ("auto", "1.17.8", "legacy"), ("auto", "1.18.0", "cdi"), (None, "1.17.5", "legacy"),
    ("csv", "1.17.8", None), ("auto", None, None), ("auto", "garbage", None),
])
def test_injection_mode(mode, version, expected):
    assert tc.injection_mode(mode, version)[0] == expected


@pytest.mark.parametrize("runtimes,installed,expected", [
    (None, ["runc", "crun"], "runc"), (["crun", "runc"], ["runc", "crun"], "crun"),
    (["/usr/local/bin/crun"], ["crun"], "crun"), (["docker-runc", "runc"], ["docker-runc"], "runc"),
    (["runc"], ["crun"], None),
])
def test_low_level_runtime(runtimes, installed, expected):
    assert tc.low_level_runtime(runtimes, installed) == expected


# ----------------------------------------------------------------------------- kernel modules, nvswitch, systemd


def test_kernel_module_flavour(tmp_path):
    proc = tmp_path / "proc"
    put(proc, "driver/nvidia/version", PROPRIETARY_BANNER)
    assert ns.kernel_module_flavour(str(proc), str(tmp_path / "nosys")) == ("proprietary", "proc_version")
    put(proc, "driver/nvidia/version", OPEN_BANNER)
    assert ns.kernel_module_flavour(str(proc), str(tmp_path / "nosys"))[0] == "open"
    # no procfs file: the module's taint decides (P = proprietary licence)
    noproc = str(tmp_path / "noproc")
    assert ns.kernel_module_flavour(noproc, str(nvswitch_sys(tmp_path / "a", 0, taint="POE"))) == \
        ("proprietary", "module_taint")
    assert ns.kernel_module_flavour(noproc, str(nvswitch_sys(tmp_path / "b", 0, taint="OE")))[0] == "open"
    assert ns.kernel_module_flavour(noproc, str(tmp_path / "nosys")) == (None, None)


def test_kernel_module_version_fifo(tmp_path):
    proc = tmp_path / "proc"
    os.makedirs(str(proc / "driver" / "nvidia"))
    os.mkfifo(str(proc / "driver" / "nvidia" / "version"))
    assert ns.kernel_module_flavour(str(proc), str(tmp_path / "nosys")) == (None, None)


def test_nvswitch_absent_on_gpu_only_bus(tmp_path):
    facts, errors = ns.nvswitch_facts(str(nvswitch_sys(tmp_path, 0)), str(tmp_path / "nodev"))
    assert facts == {"present": False, "count": 0, "bus_ids": [], "device_nodes": []} and errors == []


def fake_systemctl(tmp_path, body):
    return put(tmp_path, "bin/systemctl", "#!/bin/sh\n" + body, 0o755)


def test_service_state(tmp_path):
    ctl = fake_systemctl(tmp_path, 'echo "ActiveState=failed"; echo "UnitFileState=enabled"\n')
    assert ns.service_state(ctl) == ({"active": "failed", "enabled": "enabled"}, None)


def test_service_state_unknown_unit(tmp_path):
    ctl = fake_systemctl(tmp_path, 'echo "ActiveState=inactive"; echo "UnitFileState="\n')
    assert ns.service_state(ctl) == ({"active": "inactive", "enabled": None}, None)


def test_service_state_deadline(tmp_path):
    ctl = fake_systemctl(tmp_path, "exec sleep 60\n")
    state, err = ns.service_state(ctl, timeout=0.3)
    assert state == {"active": None, "enabled": None} and "systemctl show" in err


def test_service_state_refuses_glob():
    with pytest.raises(Exception) as e:
        ns.service_state("/bin/true", unit="nvidia-*")
    assert "nvidia-*" in str(e.value)


def test_cdi_spec_fifo_not_listed(tmp_path):
    root = tmp_path / "host"
    os.makedirs(str(root / "etc" / "cdi"))
    os.mkfifo(str(root / "etc" / "cdi" / "nvidia.yaml"))
    assert ns.cdi_specs(str(root)) == ([], [])
    assert not stat.S_ISREG(os.stat(str(root / "etc" / "cdi" / "nvidia.yaml")).st_mode)


@pytest.mark.parametrize("digits", ["\u00b2", "\u0663", "\uff17"])
def test_fabric_manager_version_with_non_ascii_digits(digits):
    """A fabric manager package version segment like '17²' ('²'.isdigit() is True, int('²')
    raises) counts as 0 when choosing the highest installed package; nothing raises."""
    pkgs = parse_dpkg_query("nvidia-fabricmanager-570\t570.17%s.08-1\tii \tamd64\n"
                            "nvidia-fabricmanager-575\t575.57.08-1\tii \tamd64\n"
                            "cuda-drivers-fabricmanager-570\t570.%s.01-1\tii \tamd64\n" % (digits, digits))
    assert ns.fabric_manager_package(pkgs) == {"installed": True, "package": "nvidia-fabricmanager-575",
                                               "version": "575.57.08"}
    only = parse_dpkg_query("nvidia-fabricmanager-570\t570.%s.08-1\tii \tamd64\n" % digits)
    assert ns.fabric_manager_package(only) == {"installed": True, "package": "nvidia-fabricmanager-570",
                                               "version": "570.%s.08" % digits}
