# -*- coding: utf-8 -*-
"""The KubeletConfiguration reader (kubelet/config_yaml.py)."""
import json

import pytest

from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet import config_yaml
from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet.config_yaml import (
    YAML_LOADERS,
    ConfigParseError,
    load_config_text,
    parse_config,
)
from ansible_collections.kubegpu.fleet.tests.fixtures.kubelet.kubelet_fakeproc import fixture_path, fixture_text


# -- config -------------------------------------------------------------------------------
def test_parse_config_messages():
    cfg, parser, err, warn = parse_config("kind: KubeletConfiguration\n", "/x.yaml")
    assert err is None and parser == "pyyaml" and cfg == {"kind": "KubeletConfiguration"}
    assert warn == []
    _c, _p, err, warn = parse_config("cgroupDriver: systemd\n", "/x.yaml")
    assert err is None and "no 'kind'" in warn[0]
    _c, _p, err, _w = parse_config("kind: Pod\n", "/x.yaml")
    assert "/x.yaml is a 'Pod', not a KubeletConfiguration" == err
    _c, _p, err, _w = parse_config("- a\n", "/x.yaml")
    assert err == "/x.yaml holds a list, not a KubeletConfiguration mapping"
    _c, _p, err, _w = parse_config("", "/x.yaml")
    assert err == "/x.yaml is empty"
    _c, _p, err, _w = parse_config("apiVersion: v1\nkind: KubeletConfiguration\n", "/x")
    assert err is None and "apiVersion 'v1'" in _w[0]


def test_malformed_config_message_names_file_and_line():
    with open(fixture_path("malformed-config.yaml.fixture")) as f:
        text = f.read()
    cfg, _p, err, _w = parse_config(text, "/etc/kubelet.yaml")
    assert cfg == {}
    assert err.startswith("cannot parse /etc/kubelet.yaml: ")
    assert "line 6" in err


# -- the KubeletConfiguration reader (PyYAML's safe loader with refusals) --------------------
BOMB = ("a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
        + "".join("%s: &%s [%s]\n" % (n, n, ", ".join(["*" + p] * 9))
                  for p, n in zip("abcdefgh", "bcdefghi")))


@pytest.mark.parametrize("text,line", [
    ("base: &anchor {a: 1}\n", 1),
    ("a: 1\nb: *alias\n", 2),
    ("- &x 1\n- *x\n", 1),
    ("k: [&x 1, *x]\n", 1),
    ("k: &s scalar\n", 1),
    (BOMB, 1),
])
@pytest.mark.parametrize("loader", YAML_LOADERS, ids=lambda c: c.__name__)
def test_anchors_and_aliases_are_refused_while_composing(text, line, loader):
    """A billion-laughs file (nine levels of nine aliases) is refused at its first anchor,
    before anything is built."""
    with pytest.raises(ConfigParseError) as e:
        load_config_text(text, loader)
    assert "anchors and aliases (&name, *name) are refused" in str(e.value)
    assert e.value.line == line and str(e.value).startswith("line %d: " % line)


@pytest.mark.parametrize("text", [
    "[" * 100000,
    "{" * 100000 + "}" * 100000,
    "a:\n" + "".join(" " * i + "b:\n" for i in range(1, 3000)),
    "x: " + "[" * 5000 + "]" * 5000,
    "x: " + "[" * 70 + "]" * 70,
    "- " * 5000 + "a\n",
    '{"Data": ' + "[" * 100000 + "]" * 100000 + "}",
    '{"x": ' + "[" * 70 + "]" * 70 + "}",
])
@pytest.mark.parametrize("loader", YAML_LOADERS, ids=lambda c: c.__name__)
def test_deep_nesting_is_a_parse_error_not_a_recursion_error(text, loader):
    with pytest.raises(ConfigParseError) as e:
        load_config_text(text, loader)
    assert "nested" in str(e.value)


def test_nesting_within_the_bound_reads():
    nested = "[" * 62 + "1" + "]" * 62   # 63 levels with the top mapping: within 64
    assert load_config_text("x: " + nested + "\n")[0]["x"] == json.loads(nested)
    assert load_config_text('{"x": %s}' % nested)[0]["x"] == json.loads(nested)


@pytest.mark.parametrize("text,words", [
    ("a: b: c\n", "mapping values are not allowed"),
    ("a: [1\n", "expected ',' or ']'"),
    ("a: 1\n---\nb: 2\n", "expected a single document"),
    ("a: x\n\tb: y\n", "at line 2, column 1"),   # a tab (libyaml and Python word it apart)
    ("a: \"bad \\q escape\"\n", "unknown escape"),
    ("a: !!binary x\n", "base64"),
    ("a: !!python/object:os.system x\n", "could not determine a constructor"),
    ("{a: 1}: b\n", "unhashable"),
])
@pytest.mark.parametrize("loader", YAML_LOADERS, ids=lambda c: c.__name__)
def test_bad_yaml_is_a_config_parse_error_naming_the_problem(text, words, loader):
    with pytest.raises(ConfigParseError) as e:
        load_config_text(text, loader)
    assert words in str(e.value)


def test_the_libyaml_loader_is_used_where_pyyaml_has_libyaml():
    assert [c.__name__ for c in YAML_LOADERS] == ["_LibyamlLoader", "_PureLoader"]


@pytest.mark.parametrize("loader", YAML_LOADERS, ids=lambda c: c.__name__)
def test_loaders_read_the_fixture_configs_like_safe_load(loader):
    import yaml
    for name in ("kubeadm-config.yaml.fixture", "gke-kubelet-config.yaml.fixture",
                 "gpu-static-config.yaml.fixture", "dropin-10-gpu.conf", "dropin-20-eviction.conf",
                 "bad-quantities-config.yaml.fixture"):
        text = fixture_text(name)
        assert load_config_text(text, loader)[0] == yaml.safe_load(text), name


def test_load_config_text_readers_and_types():
    assert load_config_text('{"kind": "KubeletConfiguration"}') == (
        {"kind": "KubeletConfiguration"}, "json")
    # JSON-looking YAML (single quotes, comments) falls through to YAML
    assert load_config_text("{'a': 1} # c\n") == ({"a": 1}, "pyyaml")
    data, parser = load_config_text(
        "b: yes\nn: ~\ni: 0x1F\nf: 1.5\ns: 1e3\nq: '10'\nd: 2001-12-14\n"
        "t: 2001-12-14t21:59:43.10-05:00\nbin: !!binary aGk=\nset: !!set {y, x}\n"
        "2001-12-15: key\n")
    assert parser == "pyyaml"
    assert data == {"b": True, "n": None, "i": 31, "f": 1.5, "s": "1e3", "q": "10",
                    "d": "2001-12-14", "t": "2001-12-14t21:59:43.10-05:00", "bin": "hi",
                    "set": ["x", "y"], "2001-12-15": "key"}
    json.dumps(data)  # facts must be JSON-safe
    assert list(data) == ["b", "n", "i", "f", "s", "q", "d", "t", "bin", "set", "2001-12-15"]


def test_config_error_when_pyyaml_is_missing(monkeypatch):
    """The audit keeps going on a node without PyYAML: a YAML config is a config_error naming
    the package; a JSON one still reads. (The modules fail first: tests/module.)"""
    monkeypatch.setattr(config_yaml, "HAS_YAML", False)
    cfg, parser, err, _w = parse_config("kind: KubeletConfiguration\n", "/c.yaml")
    assert cfg == {} and parser is None
    assert "cannot parse /c.yaml: PyYAML is not installed" in err and "python3-yaml" in err
    assert parse_config('{"kind": "KubeletConfiguration"}', "/c.json")[:3] == (
        {"kind": "KubeletConfiguration"}, "json", None)
