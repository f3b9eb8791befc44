"""driver.unlisted_branch: a driver branch that NVIDIA's latest driver bulletin in the catalog
does not list is possibly affected (the bulletin's own advice), over the bundled catalog."""
import copy
import os

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.catalog import load as catalog_load
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.finding_types import TYPES
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.rules import catalog as fs

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..", "..", ".."))
CATALOG = catalog_load.load_catalog(os.path.join(ROOT, "catalog", "v2"))


def ctx(driver, catalog=None):
    return {"nvidia": {"present": True, "driver_version": driver}, "catalog": catalog or CATALOG}


def unlisted(found):
    return [f for f in found if f["id"] == "driver.unlisted_branch"]


def latest():
    drivers = [e for e in CATALOG if e["component"] == "driver" and e["kind"] == "security"]
    date, aid = max((e["advisory"]["date"], str(e["advisory"]["id"])) for e in drivers)
    branches = sorted({int(i["branch"]) for e in drivers if str(e["advisory"]["id"]) == aid for i in e["affected"]})
    return aid, date, branches


def test_an_earlier_branch_the_bulletin_does_not_list_is_possibly_affected():
    aid, date, branches = latest()
    earlier = [b for b in range(450, max(branches)) if b not in branches and b % 5 == 0][-1]
    (f,) = unlisted(fs.rule_catalog(ctx("%d.100.01" % earlier)))
    assert f["severity"] == "warning" and f["evidence"]["status"] == "possibly_affected"
    assert f["evidence"]["branch"] == earlier and f["evidence"]["listed_branches"] == branches
    assert f["evidence"]["bulletin"]["id"] == aid and f["evidence"]["bulletin"]["date"] == date
    assert "Earlier software GPU branch releases that support these products might also be affected" \
        in f["evidence"]["advice"]
    assert "https://nvidia.custhelp.com/app/answers/detail/a_id/%s" % aid in f["references"]
    assert f["remediation"]["summary"].startswith("move to a branch the bulletin lists (%s)"
                                                  % ", ".join("R%d" % b for b in branches))
    assert f["id"] in TYPES and TYPES[f["id"]].manual


def test_a_listed_branch_gives_nothing_and_a_newer_one_is_info():
    _aid, _date, branches = latest()
    assert unlisted(fs.rule_catalog(ctx("%d.10.01" % branches[-1]))) == []
    assert unlisted(fs.rule_catalog(ctx("%d.10.01" % branches[0]))) == []
    (f,) = unlisted(fs.rule_catalog(ctx("%d.10.01" % (branches[-1] + 5))))
    assert f["severity"] == "info" and "newer than every branch" in f["evidence"]["reason"]


def test_a_newer_bulletin_listing_the_branch_clears_it():
    newer = copy.deepcopy([e for e in CATALOG if e["component"] == "driver" and e["kind"] == "security"][0])
    newer["id"] = "site-driver-newer"
    newer["advisory"] = dict(newer["advisory"], id="9999", date="2099-01-01")
    newer["affected"] = [{"branch": "570", "fixed": "570.999.01"}]
    assert unlisted(fs.rule_catalog(ctx("570.172.08"))), "R570 is not in the bundled catalog's latest bulletin"
    assert unlisted(fs.rule_catalog(ctx("570.172.08", CATALOG + [newer]))) == []


def test_unknown_driver_or_no_catalog_gives_nothing():
    assert fs.rule_unlisted_branch({"nvidia": {"driver_version": "570.172.08"}}) == []
    assert fs.rule_unlisted_branch({"catalog": CATALOG, "nvidia": {"driver_version": "garbage"}}) == []
    assert fs.rule_unlisted_branch({"catalog": CATALOG}) == []


def test_guest_driver_items_and_items_of_another_bulletin_do_not_list_a_branch():
    newer = copy.deepcopy([e for e in CATALOG if e["component"] == "driver" and e["kind"] == "security"][0])
    newer["id"] = "site-driver-newer"
    newer["advisory"] = dict(newer["advisory"], id="9999", date="2099-01-01")
    newer["affected"] = [{"branch": "580", "fixed": "580.999.01", "note": "NVIDIA security bulletin 9999"},
                         {"branch": "570", "fixed": "570.999.01", "conditions": {"vgpu_guest": True}},
                         {"branch": "535", "fixed": "535.999.01", "note": "NVIDIA security bulletin 5415"}]
    (f,) = unlisted(fs.rule_catalog(ctx("570.172.08", CATALOG + [newer])))
    assert f["evidence"]["listed_branches"] == [580] and f["evidence"]["bulletin"]["id"] == "9999"
    (f,) = unlisted(fs.rule_catalog(ctx("535.309.01", CATALOG + [newer])))
    assert f["evidence"]["listed_branches"] == [580]
    assert unlisted(fs.rule_catalog(ctx("580.10.01", CATALOG + [newer]))) == []


def test_the_newest_bulletin_is_worked_out_once_per_catalog_and_handed_out_as_copies():
    first = fs.latest_driver_bulletin(CATALOG)
    assert first == fs.read_latest_driver_bulletin(CATALOG)
    first[1].append(999)
    first[2].append("https://example.com/changed-by-a-caller")
    again = fs.latest_driver_bulletin(list(CATALOG))          # a new list of the same entries: the same answer
    assert again == fs.read_latest_driver_bulletin(CATALOG) and 999 not in again[1]
    # another catalog (a site's overlay dropped the newest bulletin's entries) is worked out afresh
    aid = str(again[0]["id"])
    older = [e for e in CATALOG if str((e.get("advisory") or {}).get("id")) != aid]
    assert fs.latest_driver_bulletin(older) == fs.read_latest_driver_bulletin(older)
    assert str(fs.latest_driver_bulletin(older)[0]["id"]) != aid
    assert fs.latest_driver_bulletin(CATALOG) == fs.read_latest_driver_bulletin(CATALOG)
