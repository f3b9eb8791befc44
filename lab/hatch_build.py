"""Wheel build hook: the lab's data directories go into the package (kubegpu_lab/data/...) of the
standard wheel; an editable install leaves them in the checkout, where kubegpu_lab/paths.py
finds them next to the package."""
from hatchling.builders.hooks.plugin.interface import BuildHookInterface

DATA = {"node": "kubegpu_lab/data/node", "packages": "kubegpu_lab/data/packages",
        "profiles": "kubegpu_lab/data/profiles", "fakes/nvml": "kubegpu_lab/data/fakes/nvml"}


class CustomBuildHook(BuildHookInterface):
    def initialize(self, version, build_data):
        if version == "standard":
            build_data["force_include"].update(DATA)
