"""The lab's container toolkit packages (lab/kubegpu_lab/packages.py build_toolkit) install NVIDIA's
packaged config.toml (lab/packages/files/config.toml, sourced in the README beside it) as a
conffile, for every toolkit version of the lab's catalog; the collection's controller-side
completion (plugins/plugin_utils/stack/facts.py) reads that file as a real node's: mode = "auto",
legacy injection before toolkit 1.18.0 and CDI from 1.18.0."""
import os
import shutil
import subprocess
import tomllib

import pytest

from ansible_collections.kubegpu.fleet.lab.kubegpu_lab import packages
from ansible_collections.kubegpu.fleet.plugins.module_utils._common.versions import SemVer
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.stack import facts as tc
from ansible_collections.kubegpu.fleet.tests.lib.paths import TOOLKIT_CONFIG

pytestmark = pytest.mark.skipif(not shutil.which("dpkg-deb"), reason="dpkg-deb is not installed")

CONF = "/etc/nvidia-container-runtime/config.toml"
VERSIONS = [str(v) for v in packages.catalog()["container_toolkit_versions"]]


@pytest.fixture(scope="module")
def base_debs(tmp_path_factory):
    """{version: (deb, extracted root)} of nvidia-container-toolkit-base, built as the lab builds it."""
    out = tmp_path_factory.mktemp("repo")
    work = tmp_path_factory.mktemp("work")
    cat = packages.catalog()
    debs = {}
    for version in VERSIONS:
        packages.build_toolkit(version, cat, str(work), str(out))
        deb = os.path.join(str(out), "nvidia-container-toolkit-base_%s_amd64.deb"
                           % packages.toolkit_deb_version(version, cat))
        root = tmp_path_factory.mktemp("root-" + version)
        subprocess.run(["dpkg-deb", "-x", deb, str(root)], check=True)
        debs[version] = (deb, root)
    return debs


def test_the_shared_copy_is_the_packaged_default():
    with open(TOOLKIT_CONFIG, "rb") as f:
        doc = tomllib.load(f)
    rt = doc["nvidia-container-runtime"]
    assert rt["mode"] == "auto"
    assert rt["runtimes"] == ["docker-runc", "runc", "crun"]
    assert set(rt["modes"]) == {"cdi", "csv", "legacy"}
    assert doc["nvidia-container-cli"]["ldconfig"] == "@/sbin/ldconfig.real"


@pytest.mark.parametrize("version", VERSIONS)
def test_every_toolkit_version_installs_it_as_a_conffile(base_debs, version):
    deb, root = base_debs[version]
    with open(TOOLKIT_CONFIG, "rb") as f:
        want = f.read()
    assert (root / CONF.lstrip("/")).read_bytes() == want
    control = subprocess.run(["dpkg-deb", "-I", deb, "conffiles"], check=True, stdout=subprocess.PIPE,
                             universal_newlines=True).stdout
    assert control.split() == [CONF]


@pytest.mark.parametrize("version", VERSIONS)
def test_the_collection_reads_the_lab_node_as_a_real_one(base_debs, version):
    _deb, root = base_debs[version]
    text = (root / CONF.lstrip("/")).read_text()
    stack = {"container_toolkit": {"installed": True, "version": version, "config_path": CONF,
                                   "config_text": text, "runtime_binaries": ["runc"]}}
    tk = tc.finish_stack_facts(stack)[0]["container_toolkit"]
    assert tk["config"]["mode"] == "auto"
    want = "cdi" if SemVer(version) >= SemVer("1.18.0") else "legacy"
    assert tk["injection_mode"] == want, tk["injection_mode_reason"]
    assert tk["runtime"] == "runc" and tk["cuda_compat_hook_disabled"] is False
