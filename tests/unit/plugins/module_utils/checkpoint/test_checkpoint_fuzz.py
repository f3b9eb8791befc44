# -*- coding: utf-8 -*-
"""Fuzzing the checkpoint and nvidia-smi parsers: any input ends in a clean result or in
MalformedCheckpoint, never in another exception; clean results keep their invariants."""
import json
import os

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from ansible_collections.kubegpu.fleet.plugins.module_utils.checkpoint import sync as ck

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.abspath(os.path.join(HERE, "..", "..", "..", "..", "fixtures", "checkpoint"))
GOOD = sorted(n for n in os.listdir(FIX) if n.startswith("v") and n.endswith(".json"))

SETTINGS = settings(max_examples=400, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

json_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                         st.text(max_size=20))
json_values = st.recursive(
    json_scalars,
    lambda children: st.one_of(st.lists(children, max_size=4),
                               st.dictionaries(st.text(max_size=8), children, max_size=4)),
    max_leaves=25)

hexs = st.text(alphabet="0123456789abcdef", min_size=8, max_size=8)
uuid_ids = st.builds(lambda p, h: "%s-%s-1111-2222-3333-444455556666" % (p, h),
                     st.sampled_from(["GPU", "MIG", "gpu"]), hexs)
legacy_ids = st.builds(lambda h, gi, ci: "MIG-GPU-%s-1111-2222-3333-444455556666/%d/%d"
                       % (h, gi, ci), hexs, st.integers(0, 14), st.integers(0, 7))
any_ids = st.one_of(uuid_ids, legacy_ids, st.text(max_size=12),
                    st.builds(lambda i, n: "%s::%d" % (i, n), uuid_ids, st.integers(0, 64)))
resources = st.one_of(st.sampled_from(["nvidia.com/gpu", "nvidia.com/mig-1g.10gb",
                                       "nvidia.com/gpu.shared", "amd.com/gpu",
                                       "example.com/foo"]), st.text(max_size=10))
numa_maps = st.dictionaries(st.integers(-1, 7).map(str),
                            st.one_of(st.none(), st.lists(any_ids, max_size=4)), max_size=3)


@st.composite
def checkpoints(draw):
    """Well-typed checkpoints of either format, with nulls where Go writes them."""
    v2 = draw(st.booleans())
    entries = []
    for dummy in range(draw(st.integers(0, 4))):
        ids = draw(numa_maps) if v2 else draw(st.lists(any_ids, max_size=4))
        entries.append({"PodUID": draw(st.uuids()).hex, "ContainerName": draw(st.text(max_size=8)),
                        "ResourceName": draw(resources), "DeviceIDs": ids,
                        "AllocResp": draw(st.one_of(st.none(), st.just("CgA=")))})
    reg = draw(st.one_of(st.none(), st.dictionaries(
        resources, st.one_of(st.none(), st.lists(any_ids, max_size=5)), max_size=4)))
    doc = {"Data": {"PodDeviceEntries": draw(st.one_of(st.none(), st.just(entries)))
                    if not entries else entries,
                    "RegisteredDevices": reg},
           "Checksum": draw(st.integers(0, 2 ** 64 - 1))}
    if draw(st.booleans()):
        doc["BootID"] = str(draw(st.uuids()))
    return doc


def _clean_or_malformed(data):
    try:
        return ck.parse_checkpoint(data)
    except ck.MalformedCheckpoint as e:
        assert str(e)
        return None


@SETTINGS
@given(st.binary(max_size=2048))
def test_arbitrary_bytes(data):
    _clean_or_malformed(data)


@SETTINGS
@given(st.text(max_size=2048))
def test_arbitrary_text(text):
    _clean_or_malformed(text)


@SETTINGS
@given(json_values)
def test_arbitrary_json_documents(doc):
    _clean_or_malformed(json.dumps(doc).encode())


@SETTINGS
@given(st.dictionaries(st.sampled_from(["PodDeviceEntries", "RegisteredDevices", "x"]),
                       json_values, max_size=3),
       st.dictionaries(st.sampled_from(["Checksum", "BootID", "y"]), json_values, max_size=3))
def test_checkpoint_shaped_documents_with_wrong_types(data, top):
    doc = dict(top)
    doc["Data"] = data
    _clean_or_malformed(json.dumps(doc))


@SETTINGS
@given(st.sampled_from(GOOD), st.data())
def test_mutated_real_fixtures(name, data):
    """Real fixtures with bytes flipped, cut or inserted."""
    with open(os.path.join(FIX, name), "rb") as f:
        raw = bytearray(f.read())
    for dummy in range(data.draw(st.integers(1, 4))):
        op = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        pos = data.draw(st.integers(0, max(0, len(raw) - 1)))
        if op == "flip" and raw:
            raw[pos] = data.draw(st.integers(0, 255))
        elif op == "cut":
            del raw[pos:pos + data.draw(st.integers(1, 16))]
        else:
            raw[pos:pos] = data.draw(st.binary(min_size=1, max_size=8))
    _clean_or_malformed(bytes(raw))


@SETTINGS
@given(st.sampled_from(GOOD), st.data())
def test_real_fixtures_with_a_value_replaced_by_anything(name, data):
    """Replace one value anywhere in a real checkpoint with an arbitrary JSON value."""
    with open(os.path.join(FIX, name), "rb") as f:
        doc = json.loads(f.read())
    paths = []

    def walk(node, path):
        paths.append(path)
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, path + [k])
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, path + [i])

    walk(doc, [])
    path = data.draw(st.sampled_from(paths[1:]))
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = data.draw(json_values)
    _clean_or_malformed(json.dumps(doc))


@SETTINGS
@given(checkpoints(), st.lists(any_ids, max_size=6),
       st.lists(st.sampled_from(["nvidia.com/*", "*", "amd.com/gpu", "[", "nvidia.com/gpu"]),
                max_size=3))
def test_well_typed_checkpoints_parse_and_analyze_with_invariants(doc, node, patterns):
    p = ck.parse_checkpoint(json.dumps(doc).encode())
    entries = doc["Data"]["PodDeviceEntries"] or []
    assert len(p["entries"]) == len(entries)
    formats = {isinstance(e["DeviceIDs"], dict) for e in entries}
    if entries:
        assert p["format"] == ("v2" if formats == {True} else "v1")
    a = ck.analyze(p, node, patterns)
    in_scope = set()
    for resource, ids in (doc["Data"]["RegisteredDevices"] or {}).items():
        if ck.resource_matches(resource, patterns):
            in_scope.update(ids or [])
    for e in entries:
        if ck.resource_matches(e["ResourceName"], patterns):
            ids = e["DeviceIDs"]
            if isinstance(ids, dict):
                for v in ids.values():
                    in_scope.update(v or [])
            else:
                in_scope.update(ids)
    node_keys = {ck.normalize_id(n) for n in node}
    assert set(a["stale_ids"]) <= in_scope
    assert set(a["unverifiable_ids"]) <= in_scope
    assert not set(a["stale_ids"]) & set(a["unverifiable_ids"])
    assert a["stale"] == bool(a["stale_ids"])
    assert a["checked_ids"] == len(in_scope)
    for dev in a["stale_ids"]:
        assert ck.normalize_id(dev) not in node_keys
        assert ck.classify_id(dev) != "other"
    for dev in in_scope - set(a["stale_ids"]) - set(a["unverifiable_ids"]):
        assert ck.normalize_id(dev) in node_keys
    # The node's own listing never makes anything stale.
    everything = list(in_scope)
    assert ck.analyze(p, everything, patterns)["stale_ids"] == []
    text = ck.describe("/x", p, a)
    assert text.startswith("# /x (format ")


@SETTINGS
@given(st.text(max_size=1024))
def test_nvidia_smi_parser_never_raises_and_only_returns_ids_it_saw(text):
    ids, problems = ck.parse_nvidia_smi_list(text)
    for dev in ids:
        assert "(UUID: " in text or "(UUID:" in text
        assert dev in text
        assert ck.classify_id(dev) != "other"
    assert len(ids) == len(set(ids))
    assume(text.strip())
    assert ids or problems


@SETTINGS
@given(st.lists(st.tuples(st.sampled_from(["GPU", "MIG"]), uuid_ids), min_size=1, max_size=8))
def test_nvidia_smi_listing_roundtrip(devs):
    lines = []
    expected = []
    for i, (kind, dev) in enumerate(devs):
        dev = "GPU" + dev[3:] if kind == "GPU" else "MIG" + dev[3:]
        if kind == "GPU":
            lines.append("GPU %d: NVIDIA H100 80GB HBM3 (UUID: %s)" % (i, dev))
        else:
            lines.append("  MIG 1g.10gb     Device  %d: (UUID: %s)" % (i, dev))
        if dev not in expected:
            expected.append(dev)
    ids, problems = ck.parse_nvidia_smi_list("\n".join(lines) + "\n")
    assert problems == [] and ids == expected
