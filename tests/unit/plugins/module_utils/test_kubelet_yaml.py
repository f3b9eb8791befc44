# -*- coding: utf-8 -*-
"""The KubeletConfiguration loader: the fallback YAML-subset parser against PyYAML."""
import datetime
import json
import math
import os

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.kubegpu.fleet.plugins.module_utils import kubelet_yaml
from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet_yaml import (
    ConfigParseError,
    load_config_text,
    parse_yaml_subset,
    resolve_plain,
    strip_comment,
    to_plain,
)

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "kubelet")


def fixture_text(name):
    with open(os.path.join(FIXTURES, name)) as f:
        return f.read()


def same_as_pyyaml(text):
    ours = parse_yaml_subset(text)
    theirs = yaml.safe_load(text)
    assert ours == theirs, "fallback %r != PyYAML %r" % (ours, theirs)
    return ours


# -- real-shaped configs ------------------------------------------------------------------
@pytest.mark.parametrize("name", [
    "kubeadm-config.yaml.fixture",
    "gke-kubelet-config.yaml.fixture",
    "gpu-static-config.yaml.fixture",
    "eks-kubelet-config.json",
    "dropin-10-gpu.conf",
    "dropin-20-eviction.conf",
    "bad-quantities-config.yaml.fixture",
])
def test_fixture_configs_match_pyyaml(name):
    data = same_as_pyyaml(fixture_text(name))
    assert data["kind"] == "KubeletConfiguration"


def test_kubeadm_config_shape():
    data = parse_yaml_subset(fixture_text("kubeadm-config.yaml.fixture"))
    assert data["cgroupDriver"] == "systemd"
    assert data["clusterDNS"] == ["10.96.0.10"]          # Go's indentless sequence
    assert data["containerRuntimeEndpoint"] == ""
    assert data["memorySwap"] == {}
    assert data["logging"]["options"]["json"]["infoBufferSize"] == "0"   # quoted stays str
    assert data["logging"]["flushFrequency"] == 0
    assert data["healthzPort"] == 10248
    assert data["rotateCertificates"] is True


def test_hand_written_config_shape():
    data = parse_yaml_subset(fixture_text("gpu-static-config.yaml.fixture"))
    assert data["cgroupDriver"] == "systemd"            # quoted, trailing comment
    assert data["topologyManagerPolicy"] == "single-numa-node"
    assert data["kubeReserved"] == {"cpu": "1", "memory": "3.5Gi", "pid": "1000"}
    assert data["systemReserved"]["cpu"] == "1000m"
    assert data["evictionHard"] == {"memory.available": "2%", "nodefs.available": "10%"}
    assert data["enforceNodeAllocatable"] == ["pods", "system-reserved", "kube-reserved"]
    assert data["featureGates"] == {"KubeletPodResourcesGet": True,
                                    "CPUManagerPolicyAlphaOptions": True}
    assert data["serializeImagePulls"] is False          # YAML 1.1 "no"
    assert data["tlsCipherSuites"][1] == "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"


def test_json_config_through_the_flow_parser():
    text = fixture_text("eks-kubelet-config.json")
    assert parse_yaml_subset(text) == json.loads(text)


# -- the subset, case by case, against PyYAML ---------------------------------------------
SUBSET_CASES = [
    "a: 1\nb:\n- x\n- y\nc:\n  d: true\n  e: [1, 2, {f: g}]\n",
    "- a\n- b: 1\n  c: 2\n- - x\n  - y\n-\n  k: v\n-\n- last\n",
    "a:\n  - b: 1\n    c:\n    - d\n  - e\nf: g\n",
    "outer:\n    inner:\n        deep: [a, 'b c', \"d\"]\n    sibling: ~\n",
    "k: |\n  line1\n   line2\n\n  line3\n\nz: 1\n",
    "k: |-\n  a\n  b\n\n\nz: 1\n",
    "k: |+\n  a\n\n\nz: 1\n",
    "k: >\n  folded\n  text\n\n  para\n    more\n  back\n",
    "k: >-\n  a\n  b\n",
    "k: |2\n    indented\n  x\n",
    "- |\n  in a list\n- >\n  folded in\n  a list\n",
    "k: 'it''s # not a comment'  # comment\nj: \"a\\tb\\u00e9\\x41\\\"\"\n",
    "url: unix:///var/run/containerd/containerd.sock\nhash: a#b\ncolon: a:b\n",
    "key: value\n  continued here\n\n  after blank\nother: x\n",
    "--- \n# comment\nx: {a: 1,\n  b: [1,\n   2]}\n...\n",
    "%YAML 1.1\n---\na: b\n",
    "x: 0x1F\ny: 017\nz: 1_000\nw: 1:30\nv: .5\nu: 1e3\nt: ~\ns: yes\nr: -.inf\nq: 6.02e+23\n",
    "b1: on\nb2: Off\nb3: TRUE\nn1: null\nn2: Null\nn3:\ns1: 'yes'\ns2: \"123\"\n",
    "1: int key\ntrue: bool key\n\"quoted key\": v\n'single': w\n",
    "empty_map: {}\nempty_list: []\nnested: [[1, 2], [], {}]\nflow_pair: [a: 1]\n",
    "trailing_spaces: value   \nlist:   \n  - a   \n",
    "dup: 1\ndup: 2\n",
    "   indented_root: 1\n   second: 2\n",
    "a: b\r\nc:\r\n- d\r\n",
    "\ufeffbom: true\n",
    "plain with spaces: a value with spaces\n",
    "- - - deep\n    - er\n  - x\n",
    "key:    # comment after key\n  sub: 1\n",
    "seq_of_maps:\n- name: a\n  value: 1\n- name: b\n  value: [x]\n",
    "",
    "# only a comment\n",
    "---\n",
    "just a scalar\n",
    "[1, 2, 3]\n",
    "{a: 1}\n",
    "k: \"\"\nl: ''\n",
    "k: -1\nl: +2\nm: -0.5\nn: '-'\n",
    "dash-key: 1\n-leading: 2\n",
    "k: [a, b, c,]\n",
    "k: {a: , b: 1}\n",
    "k: {\"a\":1,\"b\":[true,false,null]}\n",
]


@pytest.mark.parametrize("text", SUBSET_CASES)
def test_subset_matches_pyyaml(text):
    same_as_pyyaml(text)


def test_nan_matches_pyyaml():
    ours = parse_yaml_subset("a: .nan\nb: .NaN\n")
    assert math.isnan(ours["a"]) and math.isnan(ours["b"])


def test_timestamps_stay_strings():
    # documented divergence: PyYAML builds dates, the fallback keeps the text
    assert parse_yaml_subset("d: 2001-12-14\n") == {"d": "2001-12-14"}
    assert to_plain(yaml.safe_load("d: 2001-12-14\n")) == {"d": "2001-12-14"}


# -- invalid or unsupported input: a clear error with the line, never anything else -------
INVALID_FOR_BOTH = [
    ("a: b: c\n", 1, "mapping values are not allowed"),
    ("a:\n  b: 1\n   c: 2\n", 3, "mapping values are not allowed"),
    ("a:\n    b: 1\n  c: 2\n", 3, "indentation"),
    ("a: 'unterminated\n", 1, "unterminated"),
    ("a: [1, 2\n", 1, "unterminated"),
    ("a: 1\n---\nb: 2\n", 2, "more than one YAML document"),
    ("a: x\n\tb: y\n", 2, "tab"),
    ("a: \"bad \\q escape\"\n", 1, "unknown escape"),
    ("- a\nb: 1\n", 2, ""),
    ("a: 1\n- b\n", 2, "sequence"),
    ("k: - a\n", 1, "sequence entries are not allowed"),
    ("a: {b: 1} extra\n", 1, "unexpected"),
]


@pytest.mark.parametrize("text,line,words", INVALID_FOR_BOTH)
def test_invalid_yaml_is_rejected_like_pyyaml(text, line, words):
    with pytest.raises(yaml.YAMLError):
        yaml.safe_load(text)
    with pytest.raises(ConfigParseError) as e:
        parse_yaml_subset(text)
    assert e.value.line == line
    assert str(e.value).startswith("line %d:" % line)
    assert words in str(e.value)


UNSUPPORTED = [
    ("a: !!str 1\n", "tags"),
    ("? complex\n: key\n", "complex mapping keys"),
    ("<<: {a: 1}\n", "merge keys"),
    ("a: \"multi\n  line\"\n", "spanning lines"),
]


@pytest.mark.parametrize("text,words", UNSUPPORTED)
def test_unsupported_constructs_say_so(text, words):
    with pytest.raises(ConfigParseError) as e:
        parse_yaml_subset(text)
    assert words in str(e.value)
    assert "PyYAML" in str(e.value)


BOMB = ("a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
        + "".join("%s: &%s [%s]\n" % (n, n, ", ".join(["*" + p] * 9))
                  for p, n in zip("abcdefgh", "bcdefghi")))


@pytest.mark.parametrize("use_pyyaml", [True, False])
@pytest.mark.parametrize("text", [
    "base: &anchor {a: 1}\n",
    "a: *alias\n",
    "- &x 1\n- *x\n",
    "k: [&x 1, *x]\n",
    BOMB,
])
def test_anchors_and_aliases_are_refused_by_both_readers(text, use_pyyaml):
    """A billion-laughs file (nine levels of nine aliases: 387 million nodes) is refused while
    the events are read, before anything is built: it costs nothing."""
    with pytest.raises(ConfigParseError) as e:
        load_config_text(text, use_pyyaml=use_pyyaml)
    assert "anchors and aliases (&name, *name) are refused" in str(e.value)
    assert str(e.value).startswith("line ")


@pytest.mark.parametrize("use_pyyaml", [True, False])
@pytest.mark.parametrize("text", [
    "[" * 100000,
    "{" * 100000 + "}" * 100000,
    "a:\n" + "".join(" " * i + "b:\n" for i in range(1, 3000)),
    "x: " + "[" * 5000 + "]" * 5000,
    "x: " + "[" * 70 + "]" * 70,
    "- " * 5000 + "a\n",
])
def test_deep_nesting_is_a_parse_error_not_a_recursion_error(text, use_pyyaml):
    with pytest.raises(ConfigParseError):
        load_config_text(text, use_pyyaml=use_pyyaml)


def test_nesting_within_the_bound_reads():
    text = "x: " + "[" * 60 + "1" + "]" * 60 + "\n"
    assert load_config_text(text, use_pyyaml=False)[0] == load_config_text(text, use_pyyaml=True)[0]


def test_error_is_a_value_error():
    assert issubclass(ConfigParseError, ValueError)
    with pytest.raises(ConfigParseError):
        parse_yaml_subset(b"a: 1")


# -- helpers ------------------------------------------------------------------------------
@pytest.mark.parametrize("text,expected", [
    ("a: b # c", "a: b "),
    ("a: 'b # c' # d", "a: 'b # c' "),
    ('a: "b \\" # c" # d', 'a: "b \\" # c" '),
    ("a: it's # c", "a: it's "),
    ("a: b#c", "a: b#c"),
    ("# all", ""),
    ("- 'x # y'", "- 'x # y'"),
    ("[a, 'b # c', d] # e", "[a, 'b # c', d] "),
])
def test_strip_comment(text, expected):
    assert strip_comment(text) == expected


@pytest.mark.parametrize("text", ["0b101", "0x_1F", "-017", "190:20:30", "1_000.5", "+.inf",
                                  "-.Inf", "1.5e-3", "yes", "NO", "~", "", "0", "-0", "+12",
                                  "0.", "1e3", "Mi", "100Mi", "0o17", "12:60"])
def test_resolve_plain_matches_pyyaml(text):
    expected = yaml.safe_load("v: %s" % text)["v"] if text else None
    assert resolve_plain(text) == expected
    assert type(resolve_plain(text)) is type(expected)


# -- property: anything PyYAML dumps in block style, the fallback reads back the same -----
_scalars = (st.none() | st.booleans() | st.integers(-10 ** 12, 10 ** 12)
            | st.floats(allow_nan=False, allow_infinity=True, width=64)
            | st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=0x2FF,
                                             blacklist_characters="\x7f\x85\xa0"),
                      max_size=20)
            | st.sampled_from(["yes", "no", "~", "- a", "a: b", "#x", "x #y", "'q'", '"d"',
                               "1e3", "0x10", "10%", "100Mi", "", " lead", "trail ", "a,b",
                               "[x]", "{y}", "@at", "`bt", "%pc", "&amp", "*star", "!bang",
                               "|pipe", ">gt", "?q", "a\tb", "2001-12-14"]))
_keys = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABC.-_/ 0123456789:#'\"", min_size=1,
                max_size=12)
_documents = st.recursive(
    _scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_keys, children, max_size=4),
    max_leaves=25)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=st.dictionaries(_keys, _documents, max_size=6), indent=st.sampled_from([2, 4]),
       flow=st.sampled_from([False, None]))
def test_roundtrip_against_pyyaml(doc, indent, flow):
    text = yaml.safe_dump(doc, default_flow_style=flow, indent=indent, width=10 ** 6,
                          allow_unicode=True, sort_keys=False)
    assert parse_yaml_subset(text) == yaml.safe_load(text)


@settings(max_examples=150, deadline=None)
@given(doc=st.dictionaries(_keys, _documents, max_size=6))
def test_roundtrip_with_comments_and_markers(doc):
    text = yaml.safe_dump(doc, default_flow_style=False, width=10 ** 6, allow_unicode=True)
    lines = ["# generated", "---"]
    for line in text.splitlines():
        lines.append(line)
        lines.append("   # interleaved comment")
        lines.append("")
    lines.append("...")
    decorated = "\n".join(lines) + "\n"
    assert parse_yaml_subset(decorated) == yaml.safe_load(decorated)


# -- load_config_text ---------------------------------------------------------------------
def test_load_config_text_picks_a_parser():
    assert load_config_text('{"kind": "KubeletConfiguration"}') == (
        {"kind": "KubeletConfiguration"}, "json")
    assert load_config_text("kind: KubeletConfiguration\n", use_pyyaml=True) == (
        {"kind": "KubeletConfiguration"}, "pyyaml")
    assert load_config_text("kind: KubeletConfiguration\n", use_pyyaml=False) == (
        {"kind": "KubeletConfiguration"}, "fallback")
    # JSON-looking YAML (single quotes) falls through to YAML
    assert load_config_text("{'a': 1}", use_pyyaml=False) == ({"a": 1}, "fallback")


def test_load_config_text_default_uses_pyyaml_when_importable():
    assert kubelet_yaml.HAS_PYYAML
    assert load_config_text("a: 1\n")[1] == "pyyaml"


@pytest.mark.parametrize("use_pyyaml", [True, False])
def test_load_config_text_errors_are_config_parse_errors(use_pyyaml):
    for bad in ("a: b: c\n", "a: [1\n", "a: !!binary x\n", "a: 0b_\n"):
        with pytest.raises(ConfigParseError):
            load_config_text(bad, use_pyyaml=use_pyyaml)


def test_to_plain_makes_pyyaml_output_json_safe():
    data = yaml.safe_load("d: 2001-12-14\nt: 2001-12-14t21:59:43.10-05:00\n"
                          "b: !!binary aGk=\ns: !!set {x, y}\n2001-12-15: key\n")
    plain = to_plain(data)
    json.dumps(plain)
    assert plain["d"] == "2001-12-14"
    assert plain["t"].startswith("2001-12-14T21:59:43.1")
    assert plain["b"] == "hi"
    assert plain["s"] == ["x", "y"]
    assert plain["2001-12-15"] == "key"
    assert to_plain(datetime.time(1, 2)) == "01:02:00"
