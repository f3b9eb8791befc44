"""Shared pytest plumbing for kubegpu.fleet.

* Makes ``ansible_collections.kubegpu.fleet`` importable from any checkout location by
  linking the repository into ``.build/collections/ansible_collections/kubegpu/fleet``.
* Provides ``ansible_module`` / ``ansible_playbook`` fixtures that run the collection's
  modules through the real ``ansible-playbook`` (AnsiballZ, argument spec, check/diff mode)
  against localhost with an explicit interpreter (interpreter discovery on this machine
  finds a broken pyenv shim).
"""
import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests"))

from lib.ansible_runner import AnsibleRunner, ensure_collection_tree  # noqa: E402

COLLECTIONS_PATH = ensure_collection_tree(REPO)
if COLLECTIONS_PATH not in sys.path:
    sys.path.insert(0, COLLECTIONS_PATH)


@pytest.fixture
def ansible(tmp_path):
    """An AnsibleRunner bound to a per-test temp dir."""
    return AnsibleRunner(REPO, COLLECTIONS_PATH, str(tmp_path))
