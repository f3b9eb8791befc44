"""The bundled known-bad driver catalog against its JSON Schema (controller side, jsonschema).

The node-side validator (plugins/module_utils/driver_catalog.py) must agree with the schema on
structure; the cross-check below feeds both the same broken catalogs.
"""
import copy
import json
import os

import jsonschema
import pytest
import yaml

from ansible_collections.kubegpu.fleet.plugins.module_utils import driver_catalog as dc

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CATALOG = os.path.join(REPO, "catalog", "known_bad_drivers.yml")
SCHEMA = os.path.join(REPO, "catalog", "known_bad_drivers.schema.json")


@pytest.fixture(scope="module")
def schema():
    with open(SCHEMA) as f:
        data = json.load(f)
    jsonschema.Draft202012Validator.check_schema(data)
    return data


@pytest.fixture(scope="module")
def catalog():
    with open(CATALOG) as f:
        return yaml.safe_load(f)


def schema_errors(schema, data):
    return sorted(e.message for e in jsonschema.Draft202012Validator(schema).iter_errors(data))


def test_bundled_catalog_matches_schema(schema, catalog):
    assert schema_errors(schema, catalog) == []
    dc.validate_catalog(catalog, "bundled")


def test_catalog_versions_are_strings_not_yaml_numbers(catalog):
    # An unquoted 550.40 would load as the float 550.4; every version must be a string.
    def walk(node):
        if isinstance(node, dict):
            for k, v in node.items():
                if k in ("versions",):
                    assert all(isinstance(x, str) for x in v), v
                elif k in ("from", "to", "before", "fixed"):
                    assert isinstance(v, str), (k, v)
                else:
                    walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)
    walk(catalog)


def test_every_entry_has_a_reference_and_remediation(catalog):
    for e in catalog["entries"]:
        assert e["references"] and all(r.startswith("https://") for r in e["references"]), e["id"]
        assert e["remediation"].strip()


def _first(cat):
    return cat["entries"][0]


BROKEN = [
    ("float version", lambda c: _first(c)["affected"][0]["versions"].__setitem__(0, 570.1)),
    ("bad severity", lambda c: _first(c).__setitem__("severity", "urgent")),
    ("unknown entry key", lambda c: _first(c).__setitem__("owner", "me")),
    ("no references", lambda c: _first(c).pop("references")),
    ("empty references", lambda c: _first(c).__setitem__("references", [])),
    ("bad id", lambda c: _first(c).__setitem__("id", "Has Spaces")),
    ("branch as string", lambda c: _first(c)["affected"][0].__setitem__("branch", "570")),
    ("branch item without fixed", lambda c: _first(c)["affected"][0].pop("fixed")),
    ("fixed garbage", lambda c: _first(c)["affected"][0].__setitem__("fixed", "soon")),
    ("range with to and before", lambda c: _first(c)["affected"][0]["ranges"][0].__setitem__("to", "570.130.01")),
    ("empty range", lambda c: _first(c)["affected"][0]["ranges"].__setitem__(0, {})),
    ("all_versions with a fix", lambda c: _first(c)["affected"][1].__setitem__("fixed", "575.99.01")),
    ("all_versions with versions", lambda c: _first(c)["affected"][1].__setitem__("versions", ["575.57.08"])),
    ("fix-only entry", lambda c: _first(c).__setitem__("affected", [{"branch": 580, "fixed": "580.65.06"}])),
    ("none without versions", lambda c: _first(c).__setitem__("affected", [{"branch": 575, "fixed": "none"}])),
    ("branch-less item with fixed", lambda c: c["entries"][1]["affected"][0].__setitem__("fixed", "550.40")),
    ("unknown condition", lambda c: _first(c)["conditions"].__setitem__("kernel", "6.8")),
    ("condition not bool", lambda c: _first(c)["conditions"].__setitem__("mig_mixed", "yes")),
    ("toolkit bound not semver", lambda c: c["entries"][1]["conditions"]["toolkit_version"].__setitem__("before", "1.14")),
    ("empty gpu_model", lambda c: c["entries"][4]["conditions"].__setitem__("gpu_model", "")),
    ("wrong schema_version", lambda c: c.__setitem__("schema_version", 2)),
    ("unknown top-level key", lambda c: c.__setitem__("generated", True)),
    ("blank title", lambda c: _first(c).__setitem__("title", "   ")),
]


@pytest.mark.parametrize("name, mutate", BROKEN, ids=[b[0] for b in BROKEN])
def test_schema_and_node_validator_both_reject(schema, catalog, name, mutate):
    broken = copy.deepcopy(catalog)
    mutate(broken)
    assert schema_errors(schema, broken), "schema accepted: %s" % name
    with pytest.raises(dc.CatalogError):
        dc.validate_catalog(broken, "test")


ACCEPTED = [
    ("to bound", lambda c: _first(c)["affected"][0]["ranges"].__setitem__(0, {"from": "570.124.06", "to": "570.158.01"})),
    ("no conditions key", lambda c: c["entries"][2].pop("conditions")),
    ("no notes/description", lambda c: (_first(c).pop("notes"), _first(c).pop("description"))),
    ("toolkit pre-release bound", lambda c: c["entries"][1]["conditions"]["toolkit_version"].__setitem__("before", "1.14.6-rc.1")),
    ("two-part version", lambda c: c["entries"][1]["affected"][0]["ranges"].__setitem__(0, {"from": "550.40"})),
]


@pytest.mark.parametrize("name, mutate", ACCEPTED, ids=[a[0] for a in ACCEPTED])
def test_schema_and_node_validator_both_accept(schema, catalog, name, mutate):
    ok = copy.deepcopy(catalog)
    mutate(ok)
    assert schema_errors(schema, ok) == []
    dc.validate_catalog(ok, "test")
