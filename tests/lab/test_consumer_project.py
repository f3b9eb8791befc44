"""A platform team's own project, tested the way docs/testing-your-roles.md tells it to.

In a temporary directory: a role of its own (``gpu_baseline``) that includes kubegpu.fleet.driver
and kubegpu.fleet.kubelet with the project's variables, and a Molecule scenario on two lab nodes
named by node profile. Its venv gets only built artifacts: the collection from the tarball
``ansible-galaxy collection build`` makes (installed with ``ansible-galaxy collection install``),
the lab from the wheel ``python -m build`` makes of lab/ (with its ``molecule`` extra), the rest
from the package index. Nothing in the venv or the project points into this checkout; then
``molecule test`` (destroy, syntax, create, converge, idempotence, verify with testinfra,
destroy) must pass.
"""
import glob
import os
import re
import subprocess
import sys
import textwrap

import pytest

from lab_fixture import assert_lab_gone, require_root
# the checkout's lab (lab_fixture put lab/ on the path), only to prove the teardown left nothing
from kubegpu_lab.lab import Lab  # noqa: E402  pylint: disable=wrong-import-order

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)
LAB_NAME = "molecule-gpu-fleet"


def run(cmd, timeout, **kwargs):
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                          timeout=timeout, check=False, **kwargs)
    assert proc.returncode == 0, "%s\n%s" % (" ".join(cmd), proc.stdout[-6000:])
    return proc.stdout


def pin(name, path=os.path.join(REPO, "requirements-dev.txt")):
    with open(path) as f:
        for line in f:
            if line.lower().startswith(name.lower() + "=="):
                return line.strip()
    raise AssertionError("%s is not pinned in %s" % (name, path))


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(textwrap.dedent(text).lstrip())


PROJECT = {
    "roles/gpu_baseline/defaults/main.yml": """
        ---
        # The platform team's baseline for its H100 pool.
        gpu_baseline_driver_branch: 570
        gpu_baseline_driver_version: 570.172.08
        gpu_baseline_kube_reserved_memory: auto
    """,
    "roles/gpu_baseline/meta/main.yml": """
        ---
        galaxy_info:
          author: platform team
          description: Driver and kubelet baseline of our GPU nodes
          license: GPL-3.0-or-later
          min_ansible_version: "2.16"
        dependencies: []
    """,
    "roles/gpu_baseline/tasks/main.yml": """
        ---
        - name: Driver at the pool's release
          ansible.builtin.include_role:
            name: kubegpu.fleet.driver
          vars:
            kubegpu_driver_branch: "{{ gpu_baseline_driver_branch }}"
            kubegpu_driver_version: "{{ gpu_baseline_driver_version }}"
            kubegpu_driver_drain: false

        - name: Kubelet memory reservation
          ansible.builtin.include_role:
            name: kubegpu.fleet.kubelet
          vars:
            kubegpu_kubelet_kube_reserved_memory: "{{ gpu_baseline_kube_reserved_memory }}"
    """,
    "molecule/default/molecule.yml": """
        ---
        driver:
          name: molecule-kubegpu-lab
          options:
            lab_name: %s
        platforms:
          - name: gpu-old-driver
            profile: healthy
            node:
              gpus: {count: 2}
              driver: {version: 570.158.01}
          - name: gpu-no-reservation
            profile: no-memory-reservation
            node:
              gpus: {count: 2}
        ansible:
          cfg:
            defaults:
              host_key_checking: false
        verifier:
          name: testinfra
        scenario:
          test_sequence: [destroy, syntax, create, converge, idempotence, verify, destroy]
    """ % LAB_NAME,
    "molecule/default/converge.yml": """
        ---
        - name: Converge
          hosts: all
          gather_facts: false
          roles:
            - role: gpu_baseline
    """,
    "molecule/default/tests/test_gpu_baseline.py": '''
        """What gpu_baseline promises on every node."""
        import yaml


        def test_driver_packages_at_the_release_and_held(host):
            version = host.check_output("dpkg-query -W -f '${Version}' nvidia-driver-570")
            assert version == "570.172.08-0ubuntu1"
            held = host.check_output("apt-mark showhold")
            assert "nvidia-driver-570" in held.split()
            nvml = host.file("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1")
            assert nvml.is_symlink and nvml.linked_to.endswith("libnvidia-ml.so.570.172.08")


        def test_kubelet_reserves_memory(host):
            config = yaml.safe_load(host.file("/var/lib/kubelet/config.yaml").content_string)
            assert config["kubeReserved"]["memory"].endswith("Mi")
            assert "memory.available" in config["evictionHard"]
            assert host.service("kubelet").is_running
    ''',
}


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    """The collection tarball and the lab's wheel and sdist, built from this checkout."""
    out = str(tmp_path_factory.mktemp("artifacts"))
    run([os.path.join(BIN, "ansible-galaxy"), "collection", "build", REPO, "--output-path", out], 900)
    run([sys.executable, "-m", "build", "--no-isolation", "--outdir", out, os.path.join(REPO, "lab")], 900)
    tarball = glob.glob(os.path.join(out, "kubegpu-fleet-*.tar.gz"))
    wheel = glob.glob(os.path.join(out, "kubegpu_lab-*-py3-none-any.whl"))
    sdist = glob.glob(os.path.join(out, "kubegpu_lab-*.tar.gz"))
    assert len(tarball) == len(wheel) == len(sdist) == 1, os.listdir(out)
    return tarball[0], wheel[0]


@pytest.fixture(scope="module")
def project(artifacts, tmp_path_factory):
    """The consumer's project dir and the environment its CI would run molecule with."""
    require_root()
    tarball, wheel = artifacts
    top = tmp_path_factory.mktemp("consumer")
    proj, venv, home = str(top / "project"), str(top / "venv"), str(top / "home")
    for rel, text in PROJECT.items():
        write(os.path.join(proj, rel), text)
    os.makedirs(home)
    run([sys.executable, "-m", "venv", venv], 300)
    vbin = os.path.join(venv, "bin")
    env = dict((k, v) for k, v in os.environ.items()
               if not k.startswith(("ANSIBLE_", "MOLECULE_", "PYTHON", "VIRTUAL_ENV", "KUBEGPU_")))
    env.update(HOME=home, PATH=vbin + os.pathsep + "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
               ANSIBLE_COLLECTIONS_PATH=os.path.join(proj, "collections"),
               ANSIBLE_ROLES_PATH=os.path.join(proj, "roles"),
               KUBEGPU_LAB_ROOT=str(top / "labs"))
    # the collection's dependencies come from the `ansible` package (Galaxy is not reachable)
    run([os.path.join(vbin, "pip"), "install", "-q", "--disable-pip-version-check",
         pin("ansible-core"), pin("ansible"), pin("molecule"), pin("pytest-testinfra"),
         "%s[molecule]" % wheel], 1200, env=env, cwd=proj)
    run([os.path.join(vbin, "ansible-galaxy"), "collection", "install", "--no-deps", "-p",
         os.path.join(proj, "collections"), tarball], 300, env=env, cwd=proj)
    installed = os.path.join(proj, "collections", "ansible_collections", "kubegpu", "fleet")
    run([os.path.join(vbin, "pip"), "install", "-q", "--disable-pip-version-check", "-r",
         os.path.join(installed, "requirements.txt")], 900, env=env, cwd=proj)
    yield proj, env, vbin
    # whatever happened, no lab node of the project is left behind
    run([os.path.join(vbin, "kubegpu-lab"), "down", "--name", LAB_NAME], 600, env=env, cwd=proj)
    assert_lab_gone(Lab(LAB_NAME, root=env["KUBEGPU_LAB_ROOT"]))


def test_nothing_in_the_consumer_venv_points_into_this_checkout(project):
    proj, env, vbin = project
    where = run([os.path.join(vbin, "python"), "-c",
                 "import kubegpu_lab.paths as p, importlib.metadata as m; print(p.DATA_DIR); "
                 "print(sorted(e.name for e in m.entry_points(group='molecule.driver')))"], 60, env=env, cwd=proj)
    data_dir, drivers = where.splitlines()
    assert data_dir.startswith(os.path.dirname(vbin)) and "molecule-kubegpu-lab" in drivers
    coll = run([os.path.join(vbin, "ansible-galaxy"), "collection", "list", "kubegpu.fleet"], 120, env=env, cwd=proj)
    assert os.path.join(proj, "collections") in coll
    for root, _dirs, files in os.walk(os.path.dirname(vbin)):
        for name in files:
            if name.endswith((".pth", ".json")) and "site-packages" in root:
                with open(os.path.join(root, name), errors="replace") as f:
                    assert REPO not in f.read(), os.path.join(root, name)


def test_check_reports_what_the_lab_needs(project):
    proj, env, vbin = project
    out = run([os.path.join(vbin, "kubegpu-lab"), "check"], 120, env=env, cwd=proj)
    assert '"ok": true' in out
    # on a machine without the host tools and without apt-get to install them, it refuses and says what
    bare = os.path.join(proj, "bare-path")
    os.makedirs(bare, exist_ok=True)
    proc = subprocess.run([os.path.join(vbin, "kubegpu-lab"), "check"], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, env=dict(env, PATH=bare),
                          cwd=proj, timeout=120, check=False)
    assert proc.returncode == 1, proc.stdout
    assert "missing host tools: " in proc.stderr and "systemd-nspawn" in proc.stderr, proc.stderr
    assert "systemd-container" in proc.stderr and "not a Debian/Ubuntu host" in proc.stderr, proc.stderr


def test_molecule_test_passes_on_two_lab_nodes(project):
    proj, env, vbin = project
    out = re.sub(r"\x1b\[[0-9;]*m", "", run([os.path.join(vbin, "molecule"), "test"], 3000, env=env, cwd=proj))
    for step in ("destroy", "syntax", "create", "converge", "idempotence", "verify"):
        assert "default ➜ %s: Executed: Successful" % step in out, (step, out[-6000:])
    # testinfra collected and passed the project's tests on both nodes
    assert re.search(r"4 passed", out), out[-6000:]
    assert re.search(r"default\s*: actions=\d+\s+successful=\d+\s+disabled=0\s+skipped=0\s+missing=0\s+failed=0", out), \
        out[-3000:]
