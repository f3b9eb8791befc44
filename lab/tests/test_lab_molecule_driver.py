"""The lab's Molecule driver without booting anything: the lab name, the profile a scenario's
platforms make (lab/kubegpu_lab/molecule_driver, profiles.compose), the instance config written
from the lab's inventory, and where the lab's data is found (lab/kubegpu_lab/paths.py)."""
import os

import pytest
import yaml

from ansible_collections.kubegpu.fleet.lab.kubegpu_lab import molecule_driver as md
from ansible_collections.kubegpu.fleet.lab.kubegpu_lab import paths, profiles
from ansible_collections.kubegpu.fleet.lab.kubegpu_lab.util import LabError


def scenario(platforms, **options):
    return {"driver": {"name": md.DRIVER_NAME, "options": options}, "platforms": platforms}


def test_lab_name_from_option_environment_or_scenario():
    assert md.lab_name(scenario([], lab_name="mine"), environ={}) == "mine"
    assert md.lab_name(scenario([]), environ={"KUBEGPU_LAB_NAME": "ci-7"}) == "ci-7"
    assert md.lab_name(scenario([]), environ={"MOLECULE_SCENARIO_NAME": "Default_GPU"}) == "molecule-default-gpu"
    long = md.lab_name(scenario([]), environ={"MOLECULE_SCENARIO_NAME": "x" * 60})
    assert len(long) <= 32 and profiles.NAME_RE.match(long)
    with pytest.raises(LabError, match="DNS label"):
        md.lab_name(scenario([], lab_name="Not_A_Label"), environ={})


def test_platforms_by_node_profile_make_one_node_each_with_overrides():
    doc = md.lab_profile(scenario([
        {"name": "gpu-a", "profile": "healthy", "node": {"gpus": {"count": 2}}},
        {"name": "gpu-b", "profile": "r570-nvml-hang"},
    ]))
    lab = profiles.load_profile(doc)
    nodes = dict((n["name"], n) for n in lab["nodes"])
    assert sorted(nodes) == ["gpu-a", "gpu-b"]
    assert nodes["gpu-a"]["seed"] == "healthy" and nodes["gpu-a"]["gpus"]["count"] == 2
    # the rest of the node profile (demo.yml's defaults under its node entry) is kept
    assert nodes["gpu-b"]["driver"]["version"] == "570.158.01" and nodes["gpu-b"]["gpus"]["count"] == 8
    assert nodes["gpu-b"]["mig_apply"] == "after-device-plugin"
    # the demo fleet's cluster objects (its device plugin DaemonSets) come along
    assert any(m.get("kind") == "DaemonSet" for m in lab["manifests"])


def test_every_node_profile_is_a_valid_lab_node():
    catalog, _doc = profiles.node_profiles()
    assert {"healthy", "r570-nvml-hang", "cpumanager-device-specs", "uvm-late", "stale-checkpoint",
            "no-memory-reservation", "row-remap-pending"} <= set(catalog)
    lab = profiles.load_profile(md.lab_profile(scenario(
        [{"name": "n%d" % i, "profile": name} for i, name in enumerate(sorted(catalog))])))
    assert [n["seed"] for n in lab["nodes"]] == sorted(catalog)


@pytest.mark.parametrize("platforms,options,message", [
    ([], {}, "platforms must list the lab nodes"),
    ([{"name": "a"}], {}, "name no node profile"),
    ([{"name": "a", "profile": "no-such"}], {}, "is not a node profile"),
    ([{"name": "a", "profile": "healthy", "node": [1]}], {}, "node must be a map"),
    ([{"name": "gpu-node-1", "profile": "healthy"}], {"profile": "smoke"}, "exclude each other"),
    ([{"name": "other"}], {"profile": "smoke"}, "are not the nodes of lab profile smoke"),
])
def test_bad_scenarios_are_refused_with_the_reason(platforms, options, message):
    with pytest.raises(LabError, match=message):
        md.lab_profile(scenario(platforms, **options))


def test_a_lab_profile_whose_nodes_are_the_platforms():
    assert md.lab_profile(scenario([{"name": "gpu-node-1"}], profile="smoke")) == "smoke"


def test_instance_config_carries_connection_and_lab_variables():
    inventory = {"all": {
        "vars": {"ansible_host": "127.0.0.1", "ansible_user": "root", "ansible_ssh_private_key_file": "/k",
                 "ansible_ssh_common_args": "-o X", "ansible_python_interpreter": "/usr/bin/python3",
                 "kubegpu_kubeconfig": "/lab/kubeconfig", "kubegpu_proc_path": "/run/kubegpu-lab/proc"},
        "children": {"gpu_nodes": {"hosts": {
            "gpu-b": {"ansible_port": 22202, "kubegpu_node_name": "gpu-b"},
            "gpu-a": {"ansible_port": 22201, "kubegpu_node_name": "gpu-a"}}}}}}
    entries = md.instance_config(inventory)
    assert [e["instance"] for e in entries] == ["gpu-a", "gpu-b"]
    a = entries[0]
    assert (a["address"], a["user"], a["port"], a["identity_file"]) == ("127.0.0.1", "root", 22201, "/k")
    assert a["vars"] == {"ansible_python_interpreter": "/usr/bin/python3", "kubegpu_kubeconfig": "/lab/kubeconfig",
                         "kubegpu_proc_path": "/run/kubegpu-lab/proc", "kubegpu_node_name": "gpu-a"}


def test_the_driver_ships_its_playbooks_and_schema():
    here = os.path.dirname(md.__file__)
    for step in ("create", "destroy"):
        with open(os.path.join(here, "playbooks", step + ".yml")) as f:
            play = yaml.safe_load(f)[0]
        argv = play["tasks"][0]["ansible.builtin.command"]["argv"]
        assert argv[1:4] == ["-m", "kubegpu_lab.molecule_driver", step]
    assert os.path.isfile(os.path.join(here, "schema.json"))


def test_data_found_next_to_the_package_in_a_checkout():
    assert paths.DATA_DIR == os.path.dirname(paths.PACKAGE_DIR)
    for d in (paths.NODE_KIT, paths.PACKAGES_DIR, paths.PROFILE_DIR, paths.NVML_SRC):
        assert os.path.isdir(d), d
    assert os.path.isfile(os.path.join(paths.NVML_SRC, "build.sh"))
