"""The kubegpu-lab wheel and sdist as `make lab-dist` builds them: the sdist holds the sources the
wheel is built from, the wheel installs the package with its data inside it (no path back into the
checkout), registers the CLI and the Molecule driver, and the fake NVML it ships as C sources
compiles on this machine and reports the driver version it was built for."""
import glob
import json
import os
import subprocess
import sys
import tarfile
import zipfile

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(cmd, **kwargs):
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                          timeout=600, check=False, **kwargs)
    assert proc.returncode == 0, "%s\n%s" % (" ".join(cmd), proc.stdout[-4000:])
    return proc.stdout


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("lab-dist"))
    run([sys.executable, "-m", "build", "--no-isolation", "--outdir", out, os.path.join(REPO, "lab")])
    wheel = glob.glob(os.path.join(out, "kubegpu_lab-*-py3-none-any.whl"))
    sdist = glob.glob(os.path.join(out, "kubegpu_lab-*.tar.gz"))
    assert len(wheel) == 1 and len(sdist) == 1, os.listdir(out)
    target = str(tmp_path_factory.mktemp("site"))
    run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
         "--no-index", "--target", target, wheel[0]])
    return wheel[0], sdist[0], target


def test_the_wheel_carries_the_lab_data_inside_the_package(dist):
    wheel = dist[0]
    names = zipfile.ZipFile(wheel).namelist()
    for path in ("kubegpu_lab/cli.py", "kubegpu_lab/molecule_driver/driver.py",
                 "kubegpu_lab/molecule_driver/playbooks/create.yml", "kubegpu_lab/molecule_driver/schema.json",
                 "kubegpu_lab/data/profiles/demo.yml", "kubegpu_lab/data/packages/catalog.yml",
                 "kubegpu_lab/data/node/bin/kubelet", "kubegpu_lab/data/fakes/nvml/fake_nvml.c",
                 "kubegpu_lab/data/fakes/nvml/build.sh"):
        assert path in names, path
    assert not [n for n in names if "__pycache__" in n or n.endswith((".pyc", ".so")) or "/fakes/build/" in n]
    meta = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    text = zipfile.ZipFile(wheel).read(meta[0]).decode()
    assert "kubegpu-lab = kubegpu_lab.cli:main" in text
    assert "molecule-kubegpu-lab = kubegpu_lab.molecule_driver.driver:KubegpuLab" in text
    with open(os.path.join(REPO, "galaxy.yml")) as f:
        galaxy_version = [line.split(":", 1)[1].strip() for line in f if line.startswith("version:")][0]
    assert os.path.basename(wheel).startswith("kubegpu_lab-%s-" % galaxy_version)


def test_the_sdist_holds_the_sources_and_no_build_output(dist):
    names = [n.split("/", 1)[1] for n in tarfile.open(dist[1]).getnames() if "/" in n]
    for path in ("pyproject.toml", "hatch_build.py", "LICENSE", "README.md", "kubegpu_lab/paths.py",
                 "node/systemd/kubelet.service", "fakes/nvml/nvidia_smi.c", "profiles/smoke.yml"):
        assert path in names, path
    assert not [n for n in names if n.startswith("fakes/build") or "__pycache__" in n]


def test_installed_lab_finds_its_data_in_the_install_and_lists_profiles(dist):
    target = dist[2]
    env = dict(os.environ, PYTHONPATH=target)
    out = run([sys.executable, "-c",
               "import json, kubegpu_lab.paths as p, kubegpu_lab.packages as k;"
               "print(json.dumps([p.PACKAGE_DIR, p.DATA_DIR, k._inputs_hash()]))"], env=env, cwd=target)
    package_dir, data_dir, digest = json.loads(out)
    assert package_dir == os.path.join(target, "kubegpu_lab")
    assert data_dir == os.path.join(target, "kubegpu_lab", "data")
    # the same inputs as the checkout: a lab from the wheel reuses the cached package repository
    here = run([sys.executable, "-c", "import kubegpu_lab.packages as k; print(k._inputs_hash())"],
               env=dict(os.environ, PYTHONPATH=os.path.join(REPO, "lab")), cwd="/")
    assert digest == here.strip()
    profiles_out = json.loads(run([sys.executable, "-m", "kubegpu_lab", "node-profiles"], env=env, cwd=target))
    assert "healthy" in profiles_out and "row-remap-pending" in profiles_out


def test_the_fake_nvml_compiles_from_the_installed_sources(dist, tmp_path):
    src = os.path.join(dist[2], "kubegpu_lab", "data", "fakes", "nvml")
    run(["bash", os.path.join(src, "build.sh"), str(tmp_path / "out"), "--version", "570.172.08"])
    lib = tmp_path / "out" / "usr" / "lib" / "x86_64-linux-gnu" / "libnvidia-ml.so.570.172.08"
    smi = tmp_path / "out" / "usr" / "bin" / "nvidia-smi"
    assert lib.is_file() and os.access(str(smi), os.X_OK)
    assert b"570.172.08" in lib.read_bytes()
