"""The Galaxy artifact as a user gets it: built with ansible-galaxy, installed into an empty
collections path, every module documented, the public playbooks parse, and nothing of the
development tooling (lab, benchmarks, CI) shipped."""
import glob
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)


def run(cmd, env=None, cwd=None):
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env, cwd=cwd,
                          timeout=900)
    assert proc.returncode == 0, "%s\n%s\n%s" % (cmd, proc.stdout[-3000:], proc.stderr[-3000:])
    return proc


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(tarball, listing, env) with the tarball installed into an empty collections path."""
    out = tmp_path_factory.mktemp("build")
    run([os.path.join(BIN, "ansible-galaxy"), "collection", "build", REPO, "--output-path",
         str(out)])
    tarball = glob.glob(os.path.join(str(out), "kubegpu-fleet-*.tar.gz"))
    assert len(tarball) == 1
    listing = run(["tar", "-tzf", tarball[0]]).stdout.split()
    cols = tmp_path_factory.mktemp("collections")
    assert os.listdir(str(cols)) == []
    home = tmp_path_factory.mktemp("home")
    env = dict(os.environ)
    for k in [k for k in env if k.startswith("ANSIBLE_")]:
        del env[k]
    # Only the installed artifact (plus kubernetes.core/ansible.posix, which the `ansible`
    # package provides on sys.path as Galaxy would as dependencies): never the live checkout,
    # which the test run's own ANSIBLE_COLLECTIONS_PATH points at (ansible-galaxy would find it
    # "already installed" there and install nothing).
    env.update(ANSIBLE_COLLECTIONS_PATH=str(cols), HOME=str(home),
               ANSIBLE_LOCAL_TEMP=str(home / "tmp"), ANSIBLE_PYTHON_INTERPRETER=sys.executable)
    run([os.path.join(BIN, "ansible-galaxy"), "collection", "install", "--no-deps", "-p",
         str(cols), tarball[0]], env=env)
    assert os.path.isfile(os.path.join(str(cols), "ansible_collections", "kubegpu", "fleet",
                                       "MANIFEST.json"))
    return tarball[0], listing, env, str(cols)


def test_artifact_ships_the_collection_and_its_license(installed):
    listing, cols = installed[1], installed[3]
    for path in ("LICENSE", "README.md", "MANIFEST.json", "meta/runtime.yml", "playbooks/audit.yml",
                 "plugins/modules/gpu_facts.py", "roles/audit/meta/argument_specs.yml"):
        assert path in listing, path
    with open(os.path.join(cols, "ansible_collections", "kubegpu", "fleet", "LICENSE")) as f:
        head = f.read(200)
    assert "GNU GENERAL PUBLIC LICENSE" in head and "Version 3" in head


def test_artifact_leaves_out_the_development_tools(installed):
    listing = installed[1]
    unwanted = ("lab/", "bench/", "scripts/", "molecule/", ".ci/", "tests/",
                "tests/integration/", ".venv/", ".build/", ".git/")
    assert not [p for p in listing if p.startswith(unwanted)]
    for name in ("Makefile", "requirements-dev.txt", "lab/playbooks/demo.yml"):
        assert name not in listing
    # What the execution environment build reads (meta/execution-environment.yml) ships.
    for name in ("bindep.txt", "requirements.txt", "meta/execution-environment.yml"):
        assert name in listing, name
    assert not [p for p in listing if "__pycache__" in p or p.endswith(".pyc")]


def test_every_module_is_documented_from_the_installed_artifact(installed):
    listing, env, cols = installed[1], installed[2], installed[3]
    modules = sorted(os.path.basename(p)[:-3] for p in listing
                     if p.startswith("plugins/modules/") and p.endswith(".py")
                     and not p.endswith("__init__.py"))
    assert len(modules) >= 13
    listed = run([os.path.join(BIN, "ansible-doc"), "-t", "module", "-l", "kubegpu.fleet"],
                 env=env).stdout
    for name in modules:
        assert "kubegpu.fleet.%s" % name in listed, name
    doc = run([os.path.join(BIN, "ansible-doc"), "-t", "module"]
              + ["kubegpu.fleet.%s" % m for m in modules], env=env).stdout
    for name in modules:
        assert "kubegpu.fleet.%s" % name in doc
    # The docs come from the installed copy, not from the checkout.
    where = run([os.path.join(BIN, "ansible-doc"), "-t", "module", "--json",
                 "kubegpu.fleet.gpu_facts"], env=env).stdout
    assert cols in where and REPO not in where.replace(cols, "")


def test_public_playbooks_parse_from_the_installed_artifact(installed, tmp_path):
    listing, env = installed[1], installed[2]
    playbooks = sorted(os.path.basename(p)[:-4] for p in listing
                       if p.startswith("playbooks/") and p.endswith(".yml")
                       and p.count("/") == 1)
    assert "audit" in playbooks and "lab_demo" not in playbooks
    for name in playbooks:
        run([os.path.join(BIN, "ansible-playbook"), "-i", "localhost,",
             "kubegpu.fleet.%s" % name, "--syntax-check"], env=env, cwd=str(tmp_path))
