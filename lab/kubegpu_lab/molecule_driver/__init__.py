"""Molecule driver ``molecule-kubegpu-lab``: a scenario's platforms are lab nodes.

A scenario names the driver and lists its nodes, each with a node profile (``kubegpu-lab
node-profiles``), or names a whole lab profile in the driver options::

    driver:
      name: molecule-kubegpu-lab
      options:
        lab_name: my-scenario        # optional (default: $KUBEGPU_LAB_NAME, else molecule-<scenario>)
        profile: demo                # optional: a lab profile instead of per-platform profiles
    platforms:
      - name: gpu-a
        profile: healthy
      - name: gpu-b
        profile: no-memory-reservation
        node: {gpus: {count: 2}}     # optional: any profile node key, deep-merged

``create``/``destroy`` (this package's playbooks, which Molecule finds next to the driver class)
run ``python -m kubegpu_lab.molecule_driver create|destroy``: this module boots or removes the lab
and writes Molecule's instance config, which also carries each node's lab variables
(kubegpu_kubeconfig, kubegpu_proc_path, ...) so the generated inventory needs nothing else.
"""
import json
import os
import re
import sys

import yaml

from .. import profiles
from ..lab import Lab
from ..util import LabError, write_file

DRIVER_NAME = "molecule-kubegpu-lab"
# Connection settings Molecule maps itself (instance config keys); every other inventory variable
# of a lab node goes into the instance config's ``vars``.
CONNECTION_VARS = ("ansible_host", "ansible_user", "ansible_port", "ansible_ssh_private_key_file",
                   "ansible_ssh_common_args")


def _options(molecule_yml):
    driver = (molecule_yml or {}).get("driver") or {}
    return driver.get("options") or {}


def lab_name(molecule_yml, scenario=None, environ=None):
    """options.lab_name, else $KUBEGPU_LAB_NAME, else ``molecule-<scenario>`` (a DNS label)."""
    environ = os.environ if environ is None else environ
    name = _options(molecule_yml).get("lab_name") or environ.get("KUBEGPU_LAB_NAME")
    if not name:
        scenario = scenario or environ.get("MOLECULE_SCENARIO_NAME") or "default"
        name = re.sub(r"[^a-z0-9-]+", "-", ("molecule-" + scenario).lower()).strip("-")[:32].rstrip("-")
    if not profiles.NAME_RE.match(name):
        raise LabError("lab name %r must be a DNS label of at most 32 characters (driver option lab_name)" % name)
    return name


def lab_profile(molecule_yml):
    """The lab profile to boot: options.profile (a lab profile whose nodes are the platforms), or
    the platforms composed by node profile (profiles.compose)."""
    platforms = (molecule_yml or {}).get("platforms") or []
    names = [p.get("name") for p in platforms if isinstance(p, dict)]
    if not names or len(names) != len(platforms):
        raise LabError("molecule.yml: platforms must list the lab nodes, each with a name")
    named = _options(molecule_yml).get("profile")
    with_profile = [p["name"] for p in platforms if p.get("profile")]
    if named:
        if with_profile:
            raise LabError("molecule.yml: driver option profile (%s) and per-platform profiles (%s) exclude "
                           "each other" % (named, ", ".join(with_profile)))
        doc = profiles.load_profile(named)
        have = [n["name"] for n in doc["nodes"]]
        if sorted(have) != sorted(names):
            raise LabError("molecule.yml: platforms %s are not the nodes of lab profile %s (%s)"
                           % (", ".join(names), named, ", ".join(have)))
        return named
    missing = [p["name"] for p in platforms if not p.get("profile")]
    if missing:
        raise LabError("molecule.yml: platform(s) %s name no node profile (profile: healthy, ...; "
                       "kubegpu-lab node-profiles lists them)" % ", ".join(missing))
    return profiles.compose([{"name": p["name"], "profile": p["profile"], "node": p.get("node")}
                             for p in platforms], "molecule.yml platforms")


def instance_config(inventory):
    """Molecule's instance config (one entry per node) from the lab's inventory document."""
    top = inventory["all"]
    common = dict(top.get("vars") or {})
    out = []
    for name, hostvars in sorted(((top.get("children") or {}).get("gpu_nodes") or {}).get("hosts", {}).items()):
        merged = dict(common, **(hostvars or {}))
        out.append({"instance": name, "address": merged["ansible_host"], "user": merged["ansible_user"],
                    "port": merged["ansible_port"], "identity_file": merged["ansible_ssh_private_key_file"],
                    "vars": dict((k, v) for k, v in merged.items() if k not in CONNECTION_VARS)})
    return out


def create(molecule_yml, config_path, scenario=None):
    lab = Lab(lab_name(molecule_yml, scenario))
    existed = lab.exists()
    status = lab.up(lab_profile(molecule_yml))
    with open(status["inventory"]) as f:
        entries = instance_config(yaml.safe_load(f))
    write_file(config_path, "# Molecule managed (kubegpu lab %s)\n" % lab.name
               + yaml.safe_dump(entries, sort_keys=False), 0o600)
    return {"changed": not existed, "lab": lab.name, "inventory": status["inventory"],
            "instances": [e["instance"] for e in entries]}


def destroy(molecule_yml, config_path, scenario=None):
    result = Lab(lab_name(molecule_yml, scenario)).down()
    write_file(config_path, "# Molecule managed\n[]\n", 0o600)
    return {"changed": result["removed"], "lab": result["lab"]}


def main(argv=None):
    """``python -m kubegpu_lab.molecule_driver create|destroy --instance-config PATH``, molecule.yml
    (as JSON) on stdin; prints the result as JSON."""
    import argparse
    p = argparse.ArgumentParser(prog="python -m kubegpu_lab.molecule_driver")
    p.add_argument("action", choices=("create", "destroy"))
    p.add_argument("--instance-config", required=True)
    args = p.parse_args(argv)
    try:
        molecule_yml = json.loads(sys.stdin.read() or "{}")
        result = (create if args.action == "create" else destroy)(molecule_yml, args.instance_config)
    except (LabError, OSError, ValueError) as exc:
        sys.stderr.write("kubegpu-lab (molecule %s): error: %s\n" % (args.action, exc))
        return 1
    sys.stdout.write(json.dumps(result) + "\n")
    return 0
