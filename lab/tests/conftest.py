"""pytest plumbing for the lab's own tests (``make units`` runs them with the collection's unit
tests): the checkout is importable as ``ansible_collections.kubegpu.fleet``, as
tests/conftest.py arranges for the collection's tests, since the lab's layouts are checked
against the collection code that reads them (the reboot decision, the boot loader reader, the
toolkit config parser)."""
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tests"))
from lib.ansible_runner import ensure_collection_tree  # noqa: E402  pylint: disable=wrong-import-position

COLLECTIONS_PATH = ensure_collection_tree(REPO)
if COLLECTIONS_PATH not in sys.path:
    sys.path.insert(0, COLLECTIONS_PATH)
