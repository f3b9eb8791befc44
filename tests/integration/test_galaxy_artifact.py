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


def _doc_types():
    """Every plugin type ansible-doc knows (its -t choices), read from ansible-doc itself."""
    from ansible.constants import DOCUMENTABLE_PLUGINS
    return sorted(set(DOCUMENTABLE_PLUGINS) | {"role"})


def test_every_plugin_of_every_type_is_documented_from_the_installed_artifact(installed):
    """What galaxy-importer runs per plugin: `ansible-doc -t TYPE --json` for each plugin the
    installed collection has. No plugin may be UNDOCUMENTED (filters are documented by
    plugins/filter/<name>.yml or the DOCUMENTATION of a single-filter file)."""
    import json
    listing, env = installed[1], installed[2]
    found = {}
    for doc_type in _doc_types():
        listed = json.loads(run([os.path.join(BIN, "ansible-doc"), "-t", doc_type, "-l", "--json",
                                 "kubegpu.fleet"], env=env).stdout)
        names = sorted(n for n in listed if n.startswith("kubegpu.fleet."))
        if not names:
            continue
        found[doc_type] = names
        undocumented = [n for n in names if listed[n] in ("UNDOCUMENTED", "", None)]
        assert not undocumented, (doc_type, undocumented)
        docs = json.loads(run([os.path.join(BIN, "ansible-doc"), "-t", doc_type, "--json"] + names,
                              env=env).stdout)
        for name in names:
            assert name in docs, (doc_type, name)
            body = docs[name].get("doc") or docs[name].get("entry_points")
            assert body, (doc_type, name)
    # Every plugin directory the artifact ships holds plugins of a type listed above (action
    # plugins are documented by their module, the helper directories hold no plugins).
    shipped = {p.split("/")[1] for p in listing if p.startswith("plugins/") and p.count("/") == 2
               and p.endswith((".py", ".yml")) and not p.endswith("__init__.py")}
    helpers = {"module_utils", "plugin_utils", "doc_fragments", "action"}
    assert {{"modules": "module"}.get(d, d) for d in shipped - helpers} <= set(found), (shipped, sorted(found))
    assert {"module", "filter", "role"} <= set(found)
    filters = {os.path.basename(p)[:-4] for p in listing if p.startswith("plugins/filter/") and p.endswith(".yml")}
    assert {"kubegpu.fleet.%s" % f for f in filters} <= set(found["filter"])
    assert len(found["filter"]) >= 12
