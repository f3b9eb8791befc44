"""The node-side catalog v2 validator against the JSON schema.

driver_guard validates the catalog again on the node, where jsonschema is not installed:
``module_utils/catalog/validate.check_structure`` carries the schema's shape rules. The cross-check below
feeds the schema and the node validator (``validate.validate_documents``) the same broken
documents, so a malformed ``catalog_extra`` fails with a message on either side.
"""
import copy
import json
import os

import jsonschema
import pytest
import yaml

from ansible_collections.kubegpu.fleet.plugins.module_utils.driver import defects as dc
from ansible_collections.kubegpu.fleet.plugins.module_utils.catalog import validate as cv
from ansible_collections.kubegpu.fleet.tests.lib import paths

REPO = paths.REPO
DRIVER = os.path.join(REPO, "catalog", "v2", "driver.yml")
SCHEMA = os.path.join(REPO, "catalog", "schema", "catalog-v2.schema.json")


@pytest.fixture(scope="module")
def schema():
    with open(SCHEMA) as f:
        data = json.load(f)
    jsonschema.Draft202012Validator.check_schema(data)
    return data


@pytest.fixture(scope="module")
def driver_doc():
    with open(DRIVER) as f:
        return yaml.safe_load(f)


def schema_errors(schema, data):
    return sorted(e.message for e in jsonschema.Draft202012Validator(schema).iter_errors(data))


def test_the_v1_catalog_is_gone():
    assert not os.path.exists(os.path.join(REPO, "catalog", "known_bad_drivers.yml"))
    assert not os.path.exists(os.path.join(REPO, "catalog", "known_bad_drivers.schema.json"))


def test_bundled_driver_catalog_passes_both(schema, driver_doc):
    assert schema_errors(schema, driver_doc) == []
    entries = cv.validate_documents([driver_doc], "bundled")
    assert len(dc.driver_defects(entries)) >= 4


def _defect(doc):
    return [e for e in doc["entries"] if e["id"] == "driver-r570-mig-mixed-unschedulable"][0]


BROKEN = [
    ("float version", lambda d: _defect(d)["affected"][0].__setitem__("fixed", 570.1)),
    ("bad severity", lambda d: _defect(d).__setitem__("severity", "urgent")),
    ("v1 severity warning", lambda d: _defect(d).__setitem__("severity", "warning")),
    ("unknown entry key", lambda d: _defect(d).__setitem__("owner", "me")),
    ("v1 references instead of sources", lambda d: _defect(d).__setitem__("references", [_defect(d).pop("sources")[0]["url"]])),
    ("empty sources", lambda d: _defect(d).__setitem__("sources", [])),
    ("bad id", lambda d: _defect(d).__setitem__("id", "Has Spaces")),
    ("branch as number", lambda d: _defect(d)["affected"][0].__setitem__("branch", 570)),
    ("v1 versions list", lambda d: _defect(d)["affected"][0].__setitem__("versions", ["570.124.06"])),
    ("v1 ranges", lambda d: _defect(d)["affected"][0].__setitem__("ranges", [{"from": "570.124.06"}])),
    ("item not a mapping", lambda d: _defect(d)["affected"].__setitem__(0, "570.124.06")),
    ("empty affected", lambda d: _defect(d).__setitem__("affected", [])),
    ("entry not a mapping", lambda d: d["entries"].__setitem__(0, "nvml")),
    ("unknown top-level key", lambda d: d.__setitem__("generated", True)),
    ("missing remediation", lambda d: _defect(d).pop("remediation")),
    ("wrong kind", lambda d: _defect(d).__setitem__("kind", "bug")),
    ("unknown condition", lambda d: _defect(d)["conditions"].__setitem__("kernel", "6.8")),
    ("condition not bool", lambda d: _defect(d)["conditions"].__setitem__("mig_mixed", "yes")),
    ("wrong schema_version", lambda d: d.__setitem__("schema_version", 1)),
]


@pytest.mark.parametrize("name, mutate", BROKEN, ids=[b[0] for b in BROKEN])
def test_schema_and_node_validator_both_reject(schema, driver_doc, name, mutate):
    broken = copy.deepcopy(driver_doc)
    mutate(broken)
    assert schema_errors(schema, broken), "schema accepted: %s" % name
    with pytest.raises(cv.CatalogError):
        cv.validate_documents([broken], "test")


ACCEPTED = [
    ("no conditions key", lambda d: _defect(d).pop("conditions")),
    ("no notes/description", lambda d: (_defect(d).pop("notes"), _defect(d).pop("description"))),
    ("two-part version", lambda d: _defect(d)["affected"].append({"branch": "550", "introduced": "550.40"})),
    ("item note", lambda d: _defect(d)["affected"][0].__setitem__("note", "why")),
]


@pytest.mark.parametrize("name, mutate", ACCEPTED, ids=[a[0] for a in ACCEPTED])
def test_schema_and_node_validator_both_accept(schema, driver_doc, name, mutate):
    ok = copy.deepcopy(driver_doc)
    mutate(ok)
    assert schema_errors(schema, ok) == []
    cv.validate_documents([ok], "test")
