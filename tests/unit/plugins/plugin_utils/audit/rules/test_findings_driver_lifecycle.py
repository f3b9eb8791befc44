"""driver.unsupported_branch: a driver branch past NVIDIA's end of life (NVIDIA's support matrix,
sourced in rules/lifecycle.py) or absent from the current matrix, on a given audit day."""
import pytest

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.evaluate import evaluate_node
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.finding_types import TYPES
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.rules import catalog as catalog_rules
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.rules import lifecycle


CATALOG = [{"id": "x", "component": "driver"}]  # the rule runs where the audit has a catalog


def ctx(driver, today="2026-11-27"):
    return {"nvidia": {"present": True, "driver_version": driver}, "today": today, "catalog": CATALOG}


def found(driver, today="2026-11-27"):
    return lifecycle.rule_unsupported_branch(ctx(driver, today))


@pytest.mark.parametrize("driver,today,status,severity,eol", [
    ("535.309.01", "2026-11-27", "end_of_life", "warning", "2026-06"),    # LTSB, June 2026
    ("535.309.01", "2026-06-30", None, None, None),                       # the last day of June 2026
    ("535.309.01", "2026-07-01", "end_of_life", "warning", "2026-06"),
    ("610.57.04", "2026-11-27", "end_of_life", "warning", "2026-08"),     # NFB, August 2026
    ("450.248.02", "2026-11-27", "end_of_life", "warning", "2023-07"),
    ("570.195.03", "2026-11-27", "unsupported", "warning", None),         # older than R580, R595, R620
    ("470.256.02", "2026-11-27", "unsupported", "warning", None),
    ("590.48.01", "2026-11-27", "possibly_unsupported", "info", None),    # between the matrix's branches
    ("625.10.01", "2026-11-27", "possibly_unsupported", "info", None),    # newer than the table
    ("580.178.04", "2026-11-27", None, None, None),
    ("595.91.07", "2026-11-27", None, None, None),
    ("620.10.01", "2026-11-27", None, None, None),
    ("595.91.07", "2027-04-01", "end_of_life", "warning", "2027-03"),     # the Production Branch a year on
])
def test_verdicts(driver, today, status, severity, eol):
    out = found(driver, today)
    if status is None:
        assert out == []
        return
    (f,) = out
    assert f["id"] == "driver.unsupported_branch" and f["severity"] == severity
    ev = f["evidence"]
    assert (ev["status"], ev["end_of_life"], ev["audit_day"]) == (status, eol, today)
    assert ev["branch"] == int(driver.split(".")[0]) and ev["version"] == driver
    assert ev["advice"] == catalog_rules.UNLISTED_BRANCH_ADVICE
    assert ev["lifecycle_checked"] == lifecycle.CHECKED
    assert f["references"][0].startswith("https://docs.nvidia.com/datacenter/tesla/")
    assert f["remediation"]["role"] == "kubegpu.fleet.driver"


def test_remediation_names_the_supported_branches_of_the_day():
    (f,) = found("535.309.01", "2026-11-27")
    assert f["evidence"]["supported_branches"] == [620, 595, 580]
    assert f["remediation"]["summary"].startswith(
        "move to the latest release of a supported branch: R620 (Long Term Support Branch, end of life September 2029)")
    (f,) = found("535.309.01", "2027-04-01")
    assert f["evidence"]["supported_branches"] == [620, 580]  # R595 is over then


def test_the_table_is_sourced_and_the_row_exists():
    assert set(lifecycle.CURRENT) <= set(lifecycle.BRANCHES)
    for branch, (designation, eol, source) in lifecycle.BRANCHES.items():
        assert designation in (lifecycle.LTSB, lifecycle.PB, lifecycle.NFB), branch
        assert source in lifecycle.SOURCES and len(eol) == 7, branch
    assert TYPES["driver.unsupported_branch"].manual


def test_unknown_driver_gives_nothing_and_the_audit_runs_the_rule():
    assert lifecycle.rule_unsupported_branch({"nvidia": {}, "catalog": CATALOG}) == []
    assert lifecycle.rule_unsupported_branch({"nvidia": {"driver_version": "garbage"}, "catalog": CATALOG}) == []
    assert lifecycle.rule_unsupported_branch({"nvidia": {"driver_version": "570.195.03"}}) == []  # no catalog
    assert found("570.195.03", "not a day")  # an unreadable day: today (UTC) instead, R570 stays unsupported
    ids = [f["id"] for f in evaluate_node(ctx("570.195.03"))]
    assert "driver.unsupported_branch" in ids
