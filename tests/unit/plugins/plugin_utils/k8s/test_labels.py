"""The one skip-label parser (plugin_utils/k8s/labels.py) and the kubegpu.fleet.has_label filter every
role uses; the rollout plan and the device plugin planning go through it as well."""
import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.kubegpu.fleet.plugins.filter import labels as label_filters
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.k8s import labels
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.stack import device_plugin as dp
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.rollout import gpu_nodes as ro


def obj(**lab):
    return {"metadata": {"name": "n", "labels": dict(lab)}}


@pytest.mark.parametrize("selector,parsed", [
    ("kubegpu.io/maintenance=skip", ("kubegpu.io/maintenance", "skip")),
    ("kubegpu.io/maintenance", ("kubegpu.io/maintenance", None)),
    (" kubegpu.io/maintenance = skip ", ("kubegpu.io/maintenance", "skip")),
    ("frozen=", ("frozen", "")),
    ("frozen", ("frozen", None)),
    ("", (None, None)),
    (None, (None, None)),
])
def test_parse_selector(selector, parsed):
    assert labels.parse_selector(selector) == parsed


@pytest.mark.parametrize("selector", ["=skip", "bad key=x", "kubegpu.io/=x", "UPPER.example/x=y", "k=bad value",
                                      "a" * 64, "k=" + "v" * 64, 3, ["k=v"]])
def test_bad_selectors_raise_naming_the_selector(selector):
    with pytest.raises(labels.LabelError) as err:
        labels.parse_selector(selector)
    assert repr(selector) in str(err.value) or str(selector) in str(err.value)


@pytest.mark.parametrize("selector,node_labels,ok", [
    ("kubegpu.io/maintenance=skip", {"kubegpu.io/maintenance": "skip"}, True),
    ("kubegpu.io/maintenance=skip", {"kubegpu.io/maintenance": "later"}, False),
    ("kubegpu.io/maintenance=skip", {}, False),
    # the documented key-only form: the label present with any value (also the empty value)
    ("kubegpu.io/maintenance", {"kubegpu.io/maintenance": "later"}, True),
    ("kubegpu.io/maintenance", {"kubegpu.io/maintenance": ""}, True),
    ("kubegpu.io/maintenance", {"kubegpu.io/other": "skip"}, False),
    ("frozen=", {"frozen": ""}, True),
    ("frozen=", {"frozen": "x"}, False),
    ("", {"kubegpu.io/maintenance": "skip"}, False),
])
def test_every_caller_answers_the_same(selector, node_labels, ok):
    node = obj(**node_labels)
    assert labels.has_label(node, selector) is ok
    assert label_filters.has_label(node, selector) is ok
    assert ro.has_label(node, selector) is ok
    assert dp.has_label(node, selector) is ok


def test_objects_without_labels():
    assert labels.has_label({}, "k") is False
    assert labels.has_label({"metadata": {"labels": None}}, "k") is False
    assert labels.has_label(None, "k") is False


def test_errors_surface_as_each_callers_error():
    with pytest.raises(AnsibleFilterError, match="has no key"):
        label_filters.has_label(obj(), "=skip")
    with pytest.raises(ro.RolloutError):
        ro.has_label(obj(), "=skip")
    with pytest.raises(dp.DevicePluginError):
        dp.has_label(obj(), "=skip")
    assert "has_label" in label_filters.FilterModule().filters()


@pytest.mark.parametrize("op,values,node_labels,ok", [
    ("In", ["x", "y"], {"k": "y"}, True), ("In", ["x"], {}, False), ("In", [3], {"k": "3"}, True),
    ("NotIn", ["x"], {"k": "y"}, True), ("NotIn", ["x"], {}, True), ("NotIn", ["x"], {"k": "x"}, False),
    ("Exists", [], {"k": ""}, True), ("DoesNotExist", [], {"k": ""}, False), ("DoesNotExist", [], {}, True),
    ("Gt", ["3"], {"k": "4"}, True), ("Lt", ["3"], {"k": "4"}, False), ("Gt", ["3"], {"k": "x"}, False),
    ("Gt", [], {"k": "4"}, False), ("Lt", ["3"], {}, False), ("Bogus", [], {"k": "x"}, False),
])
def test_requirement_matches(op, values, node_labels, ok):
    assert labels.requirement_matches({"key": "k", "operator": op, "values": values}, node_labels) is ok


@pytest.mark.parametrize("thing,meta", [
    ({"metadata": {"name": "n"}}, {"name": "n"}), ({}, {}), (None, {}), ("node", {}), ({"metadata": ["x"]}, {}),
])
def test_object_meta_is_always_a_dict(thing, meta):
    assert labels.object_meta(thing) == meta
