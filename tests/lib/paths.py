# -*- coding: utf-8 -*-
"""Where the collection lives, for tests run by pytest from the checkout (``make units``) or by
``ansible-test units`` on a copy under ``<root>/ansible_collections/kubegpu/fleet``.

Import it as ``ansible_collections.kubegpu.fleet.tests.lib.paths`` (unit tests) or
``lib.paths`` (module, lab and integration tests, with ``tests/`` on the path)."""
from __future__ import absolute_import, division, print_function

import os

# The collection root: the checkout, the .build/collections link to it, or ansible-test's copy.
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _collections_root(repo):
    """The directory that holds ``ansible_collections/`` and can import this collection."""
    parts = repo.rstrip(os.sep).split(os.sep)
    if len(parts) >= 4 and parts[-3] == "ansible_collections":
        return os.sep.join(parts[:-3]) or os.sep
    return os.path.join(repo, ".build", "collections")


# Put this first on a child process's sys.path to import ansible_collections.kubegpu.fleet.
COLLECTIONS_ROOT = _collections_root(REPO)

# The container toolkit's packaged config.toml (1.17.8, sourced in lab/packages/files/README.md):
# the file the lab's toolkit packages install, read by the tests as the real default.
TOOLKIT_CONFIG = os.path.join(REPO, "lab", "packages", "files", "config.toml")
