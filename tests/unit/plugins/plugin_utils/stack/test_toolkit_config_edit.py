"""Controller-side edits of the NVIDIA Container Toolkit's config.toml
(plugins/plugin_utils/stack/toolkit_config.py): real tomlkit on the file the 1.17.8 package writes
(lab/packages/files/config.toml, sourced in the README beside it), the result parsed back by the real
tomllib."""
import hashlib
import importlib.util
import sys
import tomllib

import pytest
from hypothesis import given, settings as hsettings, strategies as st

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.stack import toolkit_config as tce
from ansible_collections.kubegpu.fleet.tests.lib.paths import TOOLKIT_CONFIG

FIXTURE = TOOLKIT_CONFIG
with open(FIXTURE) as _f:
    CONFIG = _f.read()
HOOK = "features.disable-cuda-compat-lib-hook"


def lines_kept(old, new):
    """Every line of ``old`` is in ``new``, in the same order."""
    it = iter(new.splitlines())
    return all(any(line == cand for cand in it) for line in old.splitlines())


def test_fixture_is_the_packaged_config():
    doc = tomllib.loads(CONFIG)
    assert doc["nvidia-container-runtime"]["mode"] == "auto" and "features" not in doc
    assert sum(line.startswith("#") for line in CONFIG.splitlines()) == 10  # commented defaults to keep


def test_mitigation_appends_the_features_table_and_keeps_the_file():
    new, changes = tce.edit(CONFIG, {HOOK: True})
    assert changes == [{"key": HOOK, "before": None, "after": "true"}]
    assert new == CONFIG + "\n[features]\ndisable-cuda-compat-lib-hook = true\n"
    assert tomllib.loads(new)["features"]["disable-cuda-compat-lib-hook"] is True


def test_replacing_a_value_keeps_its_line_comment_and_spacing():
    text = CONFIG + "\n[features]\n  disable-cuda-compat-lib-hook   = false   # CVE-2025-23266 mitigation\n"
    new, changes = tce.edit(text, {HOOK: True, "nvidia-container-runtime.mode": "cdi"})
    assert changes == [{"key": HOOK, "before": "false", "after": "true"},
                       {"key": "nvidia-container-runtime.mode", "before": '"auto"', "after": '"cdi"'}]
    assert new == text.replace('mode = "auto"', 'mode = "cdi"').replace(
        "  disable-cuda-compat-lib-hook   = false   #", "  disable-cuda-compat-lib-hook   = true   #")


def test_missing_key_goes_into_its_table_and_a_missing_sub_table_gets_its_own_header():
    new, changes = tce.edit(CONFIG, {"nvidia-container-cli.no-cgroups": True,
                                     "nvidia-container-runtime.modes.jit-cdi.x": 7})
    assert [c["key"] for c in changes] == ["nvidia-container-cli.no-cgroups", "nvidia-container-runtime.modes.jit-cdi.x"]
    assert lines_kept(CONFIG, new)
    assert '#user = "root:video"\nno-cgroups = true\n\n[nvidia-container-runtime]' in new
    assert 'cuda-compat-mode = "ldconfig"\n\n[nvidia-container-runtime.modes.jit-cdi]\nx = 7\n\n' \
           '[nvidia-container-runtime-hook]' in new
    doc = tomllib.loads(new)
    assert doc["nvidia-container-cli"]["no-cgroups"] is True
    assert doc["nvidia-container-runtime"]["modes"]["jit-cdi"] == {"x": 7}


def test_values_already_set_change_nothing_but_a_type_change_is_a_change():
    text = CONFIG + "\n[features]\ndisable-cuda-compat-lib-hook = true\ncount = 1\n"
    assert tce.edit(text, {HOOK: True, "features.count": 1}) == (text, [])
    new, changes = tce.edit(text, {"features.count": True})  # 1 is not true in TOML
    assert changes == [{"key": "features.count", "before": "1", "after": "true"}]
    assert tomllib.loads(new)["features"]["count"] is True


def test_dotted_keys_at_the_top_level_are_edited_where_they_are():
    text = "features.disable-cuda-compat-lib-hook = false # keep\nx = 1\n"
    new, changes = tce.edit(text, {HOOK: True, "features.other": "a\"b"})
    assert new == 'features.disable-cuda-compat-lib-hook = true # keep\nfeatures.other = "a\\"b"\nx = 1\n'
    assert [c["before"] for c in changes] == ["false", None]


def test_crlf_files_stay_crlf():
    text = CONFIG.replace("\n", "\r\n")
    new, _changes = tce.edit(text, {HOOK: True})
    assert new.startswith(text) and "\n" not in new.replace("\r\n", "")


@pytest.mark.parametrize("text,setting,words", [
    ("features = { disable-cuda-compat-lib-hook = false }\n", {HOOK: True},
     ["cannot set features.disable-cuda-compat-lib-hook", "features is an inline table",
      "write it as a [features] table"]),
    (CONFIG, {"nvidia-container-runtime.runtimes": "runc"},
     ["cannot set nvidia-container-runtime.runtimes", "is an array", '["docker-runc", "runc", "crun"]']),
    (CONFIG, {"nvidia-container-runtime.modes": True},
     ["cannot set nvidia-container-runtime.modes", "its value is a table"]),
    (CONFIG, {"disable-require.x": True}, ["cannot set disable-require.x", "disable-require is a bool (false)"]),
    (CONFIG, {"supported-driver-capabilities.x.y": 1}, ["supported-driver-capabilities is a str"]),
    ("[[runtime]]\nname = \"runc\"\n", {"runtime.name": "crun"}, ["runtime is an array of tables"]),
    (CONFIG, {"nvidia-container-runtime.modes.cdi.spec-dirs.x": 1}, ["spec-dirs is an array"]),
])
def test_refusals_name_the_key_and_the_reason(text, setting, words):
    with pytest.raises(tce.TomlEditError) as e:
        tce.edit(text, setting, "/etc/nvidia-container-runtime/config.toml")
    msg = str(e.value)
    assert msg.startswith("/etc/nvidia-container-runtime/config.toml: ")
    for w in words:
        assert w in msg, msg


@pytest.mark.parametrize("setting,words", [
    ({}, "settings is empty"),
    ({"disable-require": True}, "give the key as table.key"),
    ({"features.\"quoted key\"": True}, "only bare keys"),
    ({"features..x": True}, "only bare keys"),
    ({HOOK: 1.5}, "cannot write 1.5 (float)"),
    ({HOOK: None}, "cannot write None"),
    ({HOOK: ["a"]}, "cannot write ['a'] (list)"),
    ({HOOK: 1 << 63}, "does not fit a TOML integer"),
])
def test_bad_settings_are_refused_before_any_edit(setting, words):
    with pytest.raises(tce.TomlEditError) as e:
        tce.edit(CONFIG, setting)
    assert words in str(e.value)


def test_invalid_toml_is_refused():
    with pytest.raises(tce.TomlEditError) as e:
        tce.edit("[features\ndisable-cuda-compat-lib-hook = false\n", {HOOK: True}, "/x/config.toml")
    assert "/x/config.toml is not valid TOML" in str(e.value)
    with pytest.raises(tce.TomlEditError):
        tce.edit("a = 1\na = 2\n", {HOOK: True})  # a key defined twice


def test_plan_edit_decodes_and_hashes_the_bytes():
    data = CONFIG.encode()
    plan = tce.plan_edit(data, {HOOK: True}, "/etc/nvidia-container-runtime/config.toml")
    assert plan["sha256"] == hashlib.sha256(data).hexdigest()
    assert plan["before"] == CONFIG and plan["after"].startswith(CONFIG) and len(plan["changes"]) == 1


def test_non_utf8_and_huge_files_are_refused():
    with pytest.raises(tce.TomlEditError) as e:
        tce.plan_edit(CONFIG.encode() + b"# caf\xe9\n", {HOOK: True}, "/p/config.toml")
    assert "/p/config.toml is not UTF-8 text" in str(e.value)
    huge = CONFIG.encode() + b"#" * (tce.MAX_BYTES + 1 - len(CONFIG)) + b"\n"
    with pytest.raises(tce.TomlEditError) as e:
        tce.plan_edit(huge, {HOOK: True}, "/p/config.toml")
    assert "more than the %d bytes" % tce.MAX_BYTES in str(e.value)


def test_the_check_after_the_edit_refuses_a_result_that_changes_other_keys():
    wanted = tce.check_settings({HOOK: True})
    new = CONFIG.replace('mode = "auto"', 'mode = "cdi"') + "\n[features]\ndisable-cuda-compat-lib-hook = true\n"
    with pytest.raises(tce.TomlEditError) as e:
        tce._verify(CONFIG, new, wanted, "/p")  # pylint: disable=protected-access
    assert "changes more than the requested keys" in str(e.value)
    with pytest.raises(tce.TomlEditError) as e:
        tce._verify(CONFIG, CONFIG, wanted, "/p")  # pylint: disable=protected-access
    assert "does not hold features.disable-cuda-compat-lib-hook" in str(e.value)


def test_without_tomlkit_the_message_says_pip_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "tomlkit", None)  # what `import tomlkit` meets when it is absent
    spec = importlib.util.spec_from_file_location("tce_without_tomlkit", tce.__file__)
    fresh = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fresh)
    assert "pip install tomlkit" in fresh.missing_library()
    with pytest.raises(fresh.TomlEditError) as e:
        fresh.edit(CONFIG, {HOOK: True})
    assert "pip install tomlkit" in str(e.value) and "Nothing was changed" in str(e.value)
    assert tce.missing_library() is None


TABLES = ["nvidia-container-cli", "nvidia-container-runtime", "nvidia-container-runtime.modes.legacy",
          "nvidia-container-runtime-hook", "nvidia-ctk", "features", "new-table", "nvidia-container-runtime.modes.new"]
KEYS = st.from_regex(r"[a-z][a-z0-9-]{0,12}", fullmatch=True).filter(
    lambda k: k not in ("environment", "runtimes", "modes", "annotation-prefixes", "spec-dirs", "cdi", "csv",
                        "legacy", "new"))
VALUES = st.one_of(st.booleans(), st.integers(-(1 << 63), (1 << 63) - 1), st.text(max_size=20))


@hsettings(max_examples=60, deadline=None)
@given(st.dictionaries(st.builds(lambda t, k: "%s.%s" % (t, k), st.sampled_from(TABLES), KEYS), VALUES,
                       min_size=1, max_size=5))
def test_any_scalar_settings_hold_and_the_rest_is_kept(setting):
    new, changes = tce.edit(CONFIG, setting)
    doc = tomllib.loads(new)
    for key, value in setting.items():
        node = doc
        for part in key.split("."):
            node = node[part]
        assert node == value and type(node) is type(value)
    assert [c["key"] for c in changes] == sorted(setting)
    comments = [line for line in CONFIG.splitlines() if line.startswith("#")]
    assert lines_kept("\n".join(comments), new)
    assert tce.edit(new, setting) == (new, [])  # idempotent


def test_task_strings_are_str_subclasses_and_still_compare_as_str():
    class TaggedStr(str):  # as ansible-core 2.19 hands task values over
        pass

    new, changes = tce.edit(CONFIG, {TaggedStr("nvidia-container-runtime.mode"): TaggedStr("cdi")})
    assert changes == [{"key": "nvidia-container-runtime.mode", "before": '"auto"', "after": '"cdi"'}]
    assert tomllib.loads(new)["nvidia-container-runtime"]["mode"] == "cdi"
    assert tce.edit(new, {"nvidia-container-runtime.mode": TaggedStr("cdi")}) == (new, [])
