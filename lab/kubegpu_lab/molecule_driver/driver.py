"""The Molecule driver class (entry point ``molecule.driver``: ``molecule-kubegpu-lab``).

Molecule runs this package's ``playbooks/create.yml`` and ``destroy.yml`` (found next to this
file) unless the scenario names its own. Before every step it calls :meth:`sanity_checks`, which
refuses with one message per unmet requirement of the machine (root, systemd-nspawn, debootstrap,
cgroups, overlayfs: ``kubegpu-lab check``).
"""
import os

from molecule import util
from molecule.driver.delegated import Delegated

from .. import hostenv
from . import DRIVER_NAME


class KubegpuLab(Delegated):
    """GPU nodes of the kubegpu.fleet lab: booted systemd-nspawn nodes with a fake NVIDIA stack,
    a fake kubelet and the Kubernetes API double."""

    title = "Booted GPU nodes of the kubegpu.fleet lab (systemd-nspawn, fake NVIDIA stack, API double)."

    def __init__(self, config=None):
        super().__init__(config)
        self._name = DRIVER_NAME

    def schema_file(self):
        return os.path.join(os.path.dirname(os.path.abspath(__file__)), "schema.json")

    def sanity_checks(self):
        install = bool(self.options.get("install_host_tools", True))
        report = hostenv.check_host(install=install)
        if report["problems"]:
            util.sysexit_with_message("The kubegpu GPU node lab cannot run on this machine:\n- "
                                      + "\n- ".join(report["problems"]))

    def ansible_connection_options(self, instance_name):
        conn = super().ansible_connection_options(instance_name)
        if not conn or not self.managed:
            return conn
        try:
            entry = self._get_instance_config(instance_name)
        except (StopIteration, OSError):
            return conn
        lab_vars = dict(entry.get("vars") or {})
        lab_vars.update(conn)
        return lab_vars
