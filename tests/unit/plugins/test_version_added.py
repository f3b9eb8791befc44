# -*- coding: utf-8 -*-
"""No plugin documents a version_added newer than the collection's version (galaxy.yml): a plugin
cannot have been added in a release that does not exist yet."""
import os
import re

import yaml
from ansible.module_utils.compat.version import LooseVersion

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
VERSION_ADDED = re.compile(r"^\s*version_added:\s*[\"']?([0-9][0-9.]*)[\"']?\s*$", re.M)


def _galaxy_version():
    with open(os.path.join(ROOT, "galaxy.yml"), encoding="utf-8") as f:
        return str(yaml.safe_load(f)["version"])


def _documented():
    for folder, _dirs, files in os.walk(os.path.join(ROOT, "plugins")):
        for name in files:
            if not name.endswith((".py", ".yml", ".yaml")):
                continue
            path = os.path.join(folder, name)
            with open(path, encoding="utf-8") as f:
                for version in VERSION_ADDED.findall(f.read()):
                    yield os.path.relpath(path, ROOT), version


def test_version_added_is_never_past_the_collection_version():
    current = LooseVersion(_galaxy_version())
    found = list(_documented())
    assert len(found) > 20
    assert [(p, v) for p, v in found if LooseVersion(v) > current] == []
