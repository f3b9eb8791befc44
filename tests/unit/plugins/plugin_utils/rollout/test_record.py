"""The maintenance annotation a rollout persists on the Node."""
import json

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.rollout import record


# ----------------------------------------------------------------------- annotation

def test_maintenance_annotation_round_trip():
    rec = {"active": True, "was_unschedulable": True, "boot_id": "b", "allocatable": {"nvidia.com/gpu": 2},
           "started": 1, "drained": True}
    text = record.maintenance_annotation(rec)
    assert json.loads(text) == {"was_unschedulable": True, "boot_id": "b", "allocatable": {"nvidia.com/gpu": 2},
                                "started": 1}
    assert record.parse_maintenance_annotation(text)["was_unschedulable"] is True
    assert record.parse_maintenance_annotation("") is None
    assert record.parse_maintenance_annotation("{not json") is None
    assert record.parse_maintenance_annotation('{"was_unschedulable": "yes"}') is None
