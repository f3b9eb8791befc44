"""Shared pytest plumbing for kubegpu.fleet.

Two ways in, one import name for the collection's code and test helpers
(``ansible_collections.kubegpu.fleet...``):

* ``pytest`` from the checkout (``make units``, ``make modules``, ...): this file links the
  repository into ``.build/collections/ansible_collections/kubegpu/fleet`` and puts
  ``.build/collections`` on ``sys.path`` (what ``ANSIBLE_COLLECTIONS_PATH`` is to ansible), so
  ``ansible_collections.kubegpu.fleet`` imports from any checkout location. ``tests/`` is on the
  path too, for the module, lab and integration tests' ``lib.*`` helpers.
* ``ansible-test units`` (``make units-ansible-test``) on a copy under
  ``<root>/ansible_collections/kubegpu/fleet``: ansible-test's collection loader serves
  ``ansible_collections.*`` and names this file ``ansible_collections.kubegpu.fleet.tests.conftest``;
  nothing is linked and ``sys.path`` is left alone.

Unit tests (``tests/unit``) never touch ``sys.path``: they import the collection, the fake NVML
(``...fleet.lab.fakes.nvml.fakenvml``), the lab (``...fleet.lab.kubegpu_lab``) and test helpers
(``...fleet.tests.lib``, ``...fleet.tests.fixtures``, ``...fleet.tests.unit...``) by that name.

Provides the ``ansible`` fixture (an ``AnsibleRunner``) that runs the collection's modules
through the real ``ansible-playbook`` (AnsiballZ, argument spec, check/diff mode) against
localhost with an explicit interpreter (interpreter discovery on this machine finds a broken
pyenv shim).
"""
import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

if __name__.startswith("ansible_collections."):
    # ansible-test units: the collection loader is installed and the tree is already in place.
    from ansible_collections.kubegpu.fleet.tests.lib.ansible_runner import AnsibleRunner
    from ansible_collections.kubegpu.fleet.tests.lib.paths import COLLECTIONS_ROOT as COLLECTIONS_PATH
else:
    sys.path.insert(0, os.path.join(REPO, "tests"))
    from lib.ansible_runner import AnsibleRunner, ensure_collection_tree  # noqa: E402  pylint: disable=wrong-import-position

    COLLECTIONS_PATH = ensure_collection_tree(REPO)
    if COLLECTIONS_PATH not in sys.path:
        sys.path.insert(0, COLLECTIONS_PATH)


@pytest.fixture
def ansible(tmp_path):
    """An AnsibleRunner bound to a per-test temp dir."""
    return AnsibleRunner(REPO, COLLECTIONS_PATH, str(tmp_path))
