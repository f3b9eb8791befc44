# -*- coding: utf-8 -*-
"""kubelet_config: merge, compare, render (PyYAML's dumper read back by the loader), sizing, flags."""
import json

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet import config as kc
from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet.config_yaml import load_config_text
from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet.memory import gke_reserved_memory_bytes
from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet.merge_patch import merge_patch

GIB = 1 << 30
MIB = 1 << 20
DEFAULTS = {"memory.available": "100Mi", "nodefs.available": "10%", "imagefs.available": "15%",
            "nodefs.inodesFree": "5%"}


# -- merge (merge_patch.merge_patch, RFC 7386; its RFC examples are in test_kubelet_merge_patch.py)
def test_settings_merge_keeps_order_merges_removes_and_appends():
    base = {"a": 1, "kubeReserved": {"cpu": "1", "ephemeral-storage": "1Gi"}, "b": [1, 2],
            "gone": True, "z": {"x": 1}}
    out = merge_patch(base, {"kubeReserved": {"memory": "5Gi"}, "b": [3], "gone": None,
                             "new": {"k": 1, "n": None}, "missing": None})
    assert list(out) == ["a", "kubeReserved", "b", "z", "new"]
    assert list(out["kubeReserved"]) == ["cpu", "ephemeral-storage", "memory"]
    assert out["b"] == [3] and out["new"] == {"k": 1}
    assert base["kubeReserved"] == {"cpu": "1", "ephemeral-storage": "1Gi"}  # inputs untouched
    out["z"]["x"] = 2
    assert base["z"]["x"] == 1


def test_settings_merge_scalar_over_mapping_and_back():
    assert merge_patch({"a": {"b": 1}}, {"a": 5}) == {"a": 5}
    assert merge_patch({"a": 5}, {"a": {"b": 1, "c": None}}) == {"a": {"b": 1}}


def test_same_is_type_strict_and_order_blind():
    assert kc.same({"a": 1, "b": [1, {"c": None}]}, {"b": [1, {"c": None}], "a": 1})
    assert not kc.same({"a": 1}, {"a": True})
    assert not kc.same({"a": 1}, {"a": 1.0})
    assert not kc.same([1, 2], [2, 1])
    assert kc.same(float("nan"), float("nan"))


def test_changed_paths_and_format():
    before = {"a": 1, "e": {"memory.available": "100Mi"}, "r": 1}
    after = {"a": 1, "e": {"memory.available": "200Mi", "nodefs.available": "10%"}, "n": 2}
    paths = [kc.format_path(p) for p in kc.changed_paths(before, after)]
    assert paths == ['e["memory.available"]', 'e["nodefs.available"]', "r", "n"]


# -- render: PyYAML's dumper, read back by the loader ----------------------------------------
def emit(data):
    return kc.render(data, "", "yaml")


def read_back(text):
    return load_config_text(text)[0]


def test_render_real_config_is_block_style_and_reads_back():
    data = {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            "authentication": {"anonymous": {"enabled": False}},
            "clusterDNS": ["10.96.0.10"], "kubeReserved": {"cpu": "1", "memory": "5489Mi"},
            "evictionHard": dict(DEFAULTS), "healthzPort": 10248, "memorySwap": {},
            "tlsCipherSuites": [], "shutdownGracePeriod": "0s", "staticPodPath": "/etc/kubernetes/manifests"}
    text = emit(data)
    assert "{" not in text.replace("memorySwap: {}", "")
    assert "cpu: '1'" in text and "memory.available: 100Mi" in text and "nodefs.available: 10%" in text
    assert "  - 10.96.0.10" in text
    assert kc.same(read_back(text), data) and kc.same(yaml.safe_load(text), data)
    assert list(read_back(text)) == list(data)


@pytest.mark.parametrize("value", ["yes", "No", "on", "null", "~", "", " x", "x ", "1", "0x1F", "1e3",
                                   "1.5", ".inf", "2001-12-14", "2001-12-14t21:59:43.10-05:00", "1:30",
                                   "a: b", "a #b", "#x", "-", "- x", "?", ":x", "x:", "&a", "*a", "!t",
                                   "|", ">", "%x", "@x", "`x", "'q'", '"q"', "[a]", "{a}", "=", "<<",
                                   "a\nb", "tab\there", "\x00\x07\x1b\x7f\x85\u2028\ufeff", "é", "😀",
                                   "back\\slash", 'quo"te', "x" * 300 + " " + "y" * 300])
def test_scalars_that_need_quotes_round_trip(value):
    data = {"k": value, value or "empty": [value]}
    text = emit(data)
    assert read_back(text) == data
    assert yaml.safe_load(text) == data   # and a reader without our refusals agrees
    if len(value) > 80:
        assert text.count("\n") == 3   # long strings are not folded over lines


@pytest.mark.parametrize("value", ["100Mi", "10%", "systemd", "/var/lib/kubelet", "0.0.0.0", "5m0s",
                                   "unix:///run/containerd/containerd.sock", "cluster.local", "a b",
                                   "kubelet.config.k8s.io/v1beta1", "a,b"])
def test_plain_scalars_stay_plain(value):
    assert emit({"v": value}) == "v: %s\n" % value


def test_floats_ints_bools_null():
    for value in (1.5, -0.0, 1e20, 1e-7, 3.0, float("inf"), float("-inf"), 0, -5, 2 ** 70, True, False, None):
        text = emit({"v": value})
        assert kc.same(read_back(text), {"v": value}), text
    assert emit({"v": float("nan")}) == "v: .nan\n"


def test_render_rejects_what_yaml_cannot_hold():
    with pytest.raises(kc.SettingsError) as e:
        emit({"a": object()})
    assert "cannot write" in str(e.value)


_keys = st.one_of(st.text(max_size=12), st.integers(-5, 5), st.booleans())
_scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2 ** 64, max_value=2 ** 64),
                     st.floats(allow_nan=False), st.text(max_size=20),
                     st.sampled_from(["yes", "off", "~", "1e3", "0o7", "017", "1_000", "2020-01-01",
                                      "100Mi", "10%", "a: b", "#", "- a", "=", "<<", ".5", "+1",
                                      "0b101", "1:20", "-.inf", "NaN", "Null"]))
_values = st.recursive(_scalars, lambda children: st.one_of(
    st.lists(children, max_size=4), st.dictionaries(_keys, children, max_size=4)), max_leaves=25)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(_keys, _values, max_size=6))
def test_render_round_trips_through_the_loader(data):
    text = emit(data)
    assert kc.same(read_back(text), data), text
    kc.check_round_trip(text, data)


def test_header_and_render():
    original = "# managed by kubeadm\n\n---\napiVersion: v1\n# inner comment\nkind: K\n"
    text = kc.render({"apiVersion": "v1", "kind": "K"}, original, "yaml")
    assert text == "# managed by kubeadm\n\n---\napiVersion: v1\nkind: K\n"
    assert kc.render({"a": 1}, "a: 0\n", "yaml") == "a: 1\n"
    as_json = kc.render({"a": [1]}, '{\n    "a": []\n}\n', "json")
    assert json.loads(as_json) == {"a": [1]} and '\n    "a"' in as_json


def test_check_round_trip_catches_a_mismatch():
    with pytest.raises(kc.SettingsError):
        kc.check_round_trip("a: 1\n", {"a": 2})
    with pytest.raises(kc.SettingsError):
        kc.check_round_trip("a: &x 1\n", {"a": 1})
    kc.check_round_trip("a: 1\n", {"a": 1})


# -- evictionHard and memory reservations ---------------------------------------------------
def test_complete_eviction_hard_adds_missing_defaults_keeps_operator_values():
    assert kc.complete_eviction_hard(None) == DEFAULTS
    out = kc.complete_eviction_hard({"memory.available": "500Mi"}, {"nodefs.available": "5%"})
    assert out == dict(DEFAULTS, **{"memory.available": "500Mi", "nodefs.available": "5%"})
    assert "imagefs.available" not in kc.complete_eviction_hard({}, {"imagefs.available": None})
    with pytest.raises(kc.SettingsError, match="memory.available"):
        kc.complete_eviction_hard({"memory.available": "lots"})
    with pytest.raises(kc.SettingsError):
        kc.complete_eviction_hard(["memory.available<1Gi"])


@pytest.mark.parametrize("gib,expected_mib", [(62, 5489), (16, 2663), (4, 1024), (256, 12166), (2048, 48866)])
def test_gke_ladder_sizing(gib, expected_mib):
    settings_, report = kc.memory_reservation_settings({}, gib * GIB)
    assert settings_["kubeReserved"] == {"memory": "%dMi" % expected_mib}
    assert report["kube_reserved"]["bytes"] >= gke_reserved_memory_bytes(gib * GIB)
    assert report["kube_reserved"]["bytes"] - gke_reserved_memory_bytes(gib * GIB) < MIB
    assert settings_["evictionHard"] == DEFAULTS
    assert report["allocatable_bytes"] == gib * GIB - expected_mib * MIB - 100 * MIB


def test_reservation_keeps_other_keys_larger_values_and_spelling():
    config = {"kubeReserved": {"cpu": "1", "memory": "8Gi"}, "systemReserved": {"memory": "1Gi"},
              "evictionHard": dict(DEFAULTS)}
    s, report = kc.memory_reservation_settings(config, 62 * GIB)
    assert s == {} and report["kube_reserved"]["action"] == "kept-larger"
    assert report["system_reserved"]["action"] == "left"
    s, report = kc.memory_reservation_settings(config, 62 * GIB, allow_lower=True)
    assert s == {"kubeReserved": {"memory": "5489Mi"}}
    merged = merge_patch(config, s)
    assert merged["kubeReserved"] == {"cpu": "1", "memory": "5489Mi"}
    # same value, other spelling: kept as written
    s, report = kc.memory_reservation_settings({"kubeReserved": {"memory": "5755633664"}}, 62 * GIB)
    assert "kubeReserved" not in s and report["kube_reserved"]["action"] == "kept"


def test_reservation_explicit_quantities_and_errors():
    s, report = kc.memory_reservation_settings({}, 62 * GIB, kube_reserved="6Gi", system_reserved="512Mi",
                                               eviction_hard={"memory.available": "1Gi"})
    assert s["kubeReserved"] == {"memory": "6Gi"} and s["systemReserved"] == {"memory": "512Mi"}
    assert s["evictionHard"]["memory.available"] == "1Gi" and len(s["evictionHard"]) == 4
    assert report["allocatable_bytes"] == 62 * GIB - 6 * GIB - 512 * MIB - GIB
    with pytest.raises(kc.SettingsError, match="kube_reserved"):
        kc.memory_reservation_settings({}, 62 * GIB, kube_reserved="six gigs")
    with pytest.raises(kc.SettingsError, match="node memory"):
        kc.memory_reservation_settings({}, 0)
    with pytest.raises(kc.SettingsError, match="kubeReserved.memory"):
        kc.memory_reservation_settings({"kubeReserved": {"memory": "x"}}, GIB)


def test_partial_eviction_hard_is_completed():
    s, _r = kc.memory_reservation_settings({"evictionHard": {"memory.available": "200Mi"}}, 62 * GIB)
    assert s["evictionHard"] == dict(DEFAULTS, **{"memory.available": "200Mi"})


# -- CPU manager ----------------------------------------------------------------------------
def test_static_policy_ensures_reserved_cpus():
    assert kc.static_cpu_settings({}, "static") == {"cpuManagerPolicy": "static", "kubeReserved": {"cpu": "1"}}
    assert kc.static_cpu_settings({"systemReserved": {"cpu": "500m"}}, "static") == {"cpuManagerPolicy": "static"}
    assert kc.static_cpu_settings({"reservedSystemCPUs": "0-1"}, "static") == {"cpuManagerPolicy": "static"}
    assert kc.static_cpu_settings({"kubeReserved": {"cpu": "0"}}, "static", "2")["kubeReserved"] == {"cpu": "2"}
    assert kc.static_cpu_settings({}, "none") == {"cpuManagerPolicy": "none"}
    with pytest.raises(kc.SettingsError):
        kc.static_cpu_settings({}, "dynamic")
    with pytest.raises(kc.SettingsError):
        kc.static_cpu_settings({}, "static", "0")


# -- flags ----------------------------------------------------------------------------------
def test_flag_occurrences_pflag_forms():
    words = ["--kube-reserved=cpu=1,memory=2Gi", "--v", "4", "--fail-swap-on", "--system_reserved",
             "memory=1Gi", "positional", "--eviction-hard", "memory.available<1Gi", "--", "--max-pods=3"]
    occ = [(name, value) for _s, _e, name, value in kc.flag_occurrences(words)]
    assert occ == [("kube-reserved", "cpu=1,memory=2Gi"), ("v", "4"), ("fail-swap-on", True),
                   ("system-reserved", "memory=1Gi"), ("eviction-hard", "memory.available<1Gi")]


def test_conflicts_only_for_keys_being_set():
    words = ["--kube-reserved=cpu=1", "--cpu-manager-policy", "static", "--max-pods=10", "--node-ip=1.2.3.4"]
    found = kc.flags_in_words(words, ["kubeReserved", "evictionHard"], "file", "/etc/default/kubelet")
    assert [(c["flag"], c["key"], c["value"]) for c in found] == [("--kube-reserved", "kubeReserved", "cpu=1")]
    found = kc.flags_in_words(words, ["cpuManagerPolicy", "maxPods"], "process", "pid 1")
    assert [c["flag"] for c in found] == ["--cpu-manager-policy", "--max-pods"]


def test_env_files_and_unit_dropins():
    env = ('# kubeadm\nKUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///run/c.sock '
           '--kube-reserved=cpu=1 --pod-infra-container-image=pause:3.9"\nexport OTHER=x\n')
    parsed = kc.parse_env_text(env)
    assert [(n, q) for _i, n, _v, q in parsed] == [("KUBELET_KUBEADM_ARGS", '"'), ("OTHER", "")]
    unit = ("[Service]\nEnvironment=\"KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml\"\n"
            "EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env\nExecStart=/usr/bin/kubelet --old\n"
            "ExecStart=\nExecStart=/usr/bin/kubelet $KUBELET_CONFIG_ARGS \\\n  --eviction-hard=memory.available<5%\n")
    u = kc.parse_unit_text(unit)
    assert u["environment"] == [("KUBELET_CONFIG_ARGS", "--config=/var/lib/kubelet/config.yaml")]
    assert u["environment_files"] == ["/var/lib/kubelet/kubeadm-flags.env"]
    assert len(u["exec_start"]) == 1 and "--eviction-hard=memory.available<5%" in u["exec_start"][0]


def test_remove_flags_keeps_everything_else():
    env = ('# comment\nKUBELET_EXTRA_ARGS="--v=4 --cpu-manager-policy none --node-ip=10.0.0.1"\n'
           "OTHER='--cpu-manager-policy=static'\n")
    new, removed = kc.remove_flags_from_env_text(env, {"KUBELET_EXTRA_ARGS"}, {"cpu-manager-policy"})
    assert new == ('# comment\nKUBELET_EXTRA_ARGS="--v=4 --node-ip=10.0.0.1"\n'
                   "OTHER='--cpu-manager-policy=static'\n")
    assert removed == [("KUBELET_EXTRA_ARGS", "--cpu-manager-policy none")]
    new, removed = kc.remove_flags_from_env_text("A=--kube-reserved=cpu=1\n", {"A"}, {"kube-reserved"})
    assert new == 'A=""\n' and removed == [("A", "--kube-reserved=cpu=1")]
    same, removed = kc.remove_flags_from_env_text(env, {"KUBELET_EXTRA_ARGS"}, {"max-pods"})
    assert same == env and removed == []


def test_flag_values_become_config_that_replaces_maps():
    conflicts = [{"flag": "--kube-reserved", "value": "cpu=1,memory=2Gi"},
                 {"flag": "--kube-reserved", "value": "ephemeral-storage=1Gi"},
                 {"flag": "--eviction-hard", "value": "memory.available<500Mi"},
                 {"flag": "--cpu-manager-policy", "value": "static"}, {"flag": "--max-pods", "value": "64"}]
    values = kc.flag_values(conflicts)
    assert values == {"kubeReserved": {"cpu": "1", "memory": "2Gi", "ephemeral-storage": "1Gi"},
                      "evictionHard": {"memory.available": "500Mi"}, "cpuManagerPolicy": "static", "maxPods": 64}
    config = {"kubeReserved": {"pid": "100"}, "cpuManagerPolicy": "none"}
    merged = merge_patch(config, kc.replace_maps(config, values))
    assert merged["kubeReserved"] == {"cpu": "1", "memory": "2Gi", "ephemeral-storage": "1Gi"}
    with pytest.raises(kc.SettingsError):
        kc.flag_values([{"flag": "--kube-reserved", "value": "cpu"}])
    with pytest.raises(kc.SettingsError):
        kc.flag_values([{"flag": "--max-pods", "value": "many"}])


def test_mebibytes_rounds_up():
    assert kc.mebibytes(MIB) == "1Mi" and kc.mebibytes(MIB + 1) == "2Mi" and kc.mebibytes(0) == "0Mi"


# -- settings types (key=value strings become the KubeletConfiguration's types) -------------
@pytest.mark.parametrize("given_,expected", [
    ({"maxPods": "110"}, {"maxPods": 110}),
    ({"maxPods": " 64 "}, {"maxPods": 64}),
    ({"podPidsLimit": "-1"}, {"podPidsLimit": -1}),
    ({"podPidsLimit": str(1 << 40)}, {"podPidsLimit": 1 << 40}),
    ({"failSwapOn": "false", "serializeImagePulls": "True"},
     {"failSwapOn": False, "serializeImagePulls": True}),
    ({"memoryThrottlingFactor": "0.9"}, {"memoryThrottlingFactor": 0.9}),
    ({"syncFrequency": "1m0s", "shutdownGracePeriod": "30s"},
     {"syncFrequency": "1m0s", "shutdownGracePeriod": "30s"}),
    ({"reservedSystemCPUs": 0}, {"reservedSystemCPUs": "0"}),
    ({"kubeReserved": {"memory": "1Gi", "pid": 1000}},
     {"kubeReserved": {"memory": "1Gi", "pid": "1000"}}),
    ({"featureGates": {"KubeletPodResourcesGet": "true"}},
     {"featureGates": {"KubeletPodResourcesGet": True}}),
    ({"clusterDNS": "10.96.0.10, 10.96.0.11"}, {"clusterDNS": ["10.96.0.10", "10.96.0.11"]}),
    ({"maxPods": None, "serializeImagePulls": None}, {"maxPods": None, "serializeImagePulls": None}),
    ({"somethingNewer": "1"}, {"somethingNewer": "1"}),       # unknown fields as given
    ({"containerLogMaxSize": "10Mi"}, {"containerLogMaxSize": "10Mi"}),
])
def test_coerce_settings(given_, expected):
    out = kc.coerce_settings(given_)
    assert out == expected
    assert all(type(out[k]) is type(expected[k]) for k in expected)  # noqa: E721


@pytest.mark.parametrize("given_,words", [
    ({"maxPods": "lots"}, "settings.maxPods must be an integer (int32)"),
    ({"maxPods": "1.5"}, "settings.maxPods must be an integer"),
    ({"maxPods": 1.0}, "settings.maxPods must be an integer"),
    ({"maxPods": True}, "settings.maxPods must be an integer"),
    ({"maxPods": str(1 << 31)}, "settings.maxPods must be an int32 within"),
    ({"podPidsLimit": str(1 << 63)}, "settings.podPidsLimit must be an int64 within"),
    ({"failSwapOn": "maybe"}, "settings.failSwapOn must be a boolean"),
    ({"failSwapOn": 1}, "settings.failSwapOn must be a boolean"),
    ({"memoryThrottlingFactor": "nan"}, "must be a finite number"),
    ({"memoryThrottlingFactor": "1e999"}, "must be a finite number"),
    ({"syncFrequency": 60}, "settings.syncFrequency must be a duration string"),
    ({"syncFrequency": "1 minute"}, "settings.syncFrequency must be a duration string"),
    ({"cgroupDriver": True}, "settings.cgroupDriver must be a string"),
    ({"kubeReserved": "memory=1Gi"}, "settings.kubeReserved must be a mapping"),
    ({"featureGates": {"X": "perhaps"}}, "settings.featureGates.X must be a boolean"),
    ({"clusterDNS": [1.5]}, "settings.clusterDNS[0] must be a string"),
    ("maxPods=1", "settings must be a mapping"),
    ({1: 2}, "settings keys must be KubeletConfiguration field names"),
    ({"x": json.loads('{"k": ' * 70 + "1" + "}" * 70)}, "settings nest more than 63 levels"),
])
def test_coerce_settings_refuses_with_the_key_and_value(given_, words):
    with pytest.raises(kc.SettingsError) as e:
        kc.coerce_settings(given_)
    assert words in str(e.value)


def test_coerced_settings_are_written_with_their_types():
    config = {"kind": "KubeletConfiguration", "maxPods": 110}
    after = merge_patch(config, kc.coerce_settings({"maxPods": "7", "failSwapOn": "false"}))
    text = kc.render(after, "", "yaml")
    assert "maxPods: 7\n" in text and "failSwapOn: false\n" in text
    assert yaml.safe_load(text) == {"kind": "KubeletConfiguration", "maxPods": 7,
                                    "failSwapOn": False}


@pytest.mark.parametrize("digits", ["\u00b2", "\u0663", "\uff15"])
@pytest.mark.parametrize("key", ["nodefs.inodesFree", "imagefs.inodesFree", "pid.available"])
def test_eviction_count_that_is_not_ascii_digits_is_refused(key, digits):
    """'²'.isdigit() is True, but the kubelet refuses such a count (its quantities are ASCII):
    it is not taken as a number and fails naming the key."""
    with pytest.raises(kc.SettingsError, match=r"^evictionHard %s: " % key.replace(".", r"\.")):
        kc.complete_eviction_hard({}, {key: digits})
    assert kc.complete_eviction_hard({}, {key: "1000"})[key] == "1000"
