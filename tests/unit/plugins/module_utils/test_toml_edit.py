"""One-key edits of the NVIDIA Container Toolkit's config.toml (plugins/module_utils/_common/toml_edit.py):
the result is parsed again with the standard library's tomllib, and everything but the edited
line is byte-identical."""
import tomllib

import pytest

from ansible_collections.kubegpu.fleet.plugins.module_utils._common.toml_edit import TomlEditError, render, set_key

FLAG = "features.disable-cuda-compat-lib-hook"

# Shaped like the config.toml the toolkit 1.17 packages install (comments, sub-tables of a table).
PACKAGED = """#accept-nvidia-visible-devices-as-volume-mounts = false
#accept-nvidia-visible-devices-envvar-when-unprivileged = true
disable-require = false
supported-driver-capabilities = "compat32,compute,display,graphics,ngx,utility,video"
#swarm-resource = "DOCKER_RESOURCE_GPU"

[nvidia-container-cli]
#debug = "/var/log/nvidia-container-toolkit.log"
environment = []
ldconfig = "@/sbin/ldconfig.real"
load-kmods = true

[nvidia-container-runtime]
#debug = "/var/log/nvidia-container-runtime.log"
log-level = "info"
mode = "auto"
runtimes = ["docker-runc", "runc", "crun"]

[nvidia-container-runtime.modes.cdi]
annotation-prefixes = ["cdi.k8s.io/"]
default-kind = "nvidia.com/gpu"
spec-dirs = ["/etc/cdi", "/var/run/cdi"]

[nvidia-container-runtime.modes.legacy]
cuda-compat-mode = "ldconfig"

[nvidia-ctk]
path = "nvidia-ctk"
"""


def test_missing_table_is_appended_and_the_rest_kept():
    new, changed, old = set_key(PACKAGED, FLAG, True)
    assert changed and old is None
    assert new.startswith(PACKAGED)
    assert new[len(PACKAGED):] == "\n[features]\ndisable-cuda-compat-lib-hook = true\n"
    doc = tomllib.loads(new)
    assert doc["features"]["disable-cuda-compat-lib-hook"] is True
    assert doc["nvidia-container-runtime"]["mode"] == "auto"
    # idempotent
    again, changed, old = set_key(new, FLAG, True)
    assert again == new and not changed and old == "true"


def test_existing_value_is_replaced_in_place_with_its_comment():
    text = PACKAGED.replace("[nvidia-ctk]", "[features]\n  disable-cuda-compat-lib-hook   =  false  # set by hand\n"
                            "allow-ldconfig-from-container = false\n\n[nvidia-ctk]")
    new, changed, old = set_key(text, FLAG, True)
    assert changed and old == "false"
    assert "  disable-cuda-compat-lib-hook   =  true  # set by hand\n" in new
    assert new.replace("=  true  #", "=  false  #") == text
    assert tomllib.loads(new)["features"]["disable-cuda-compat-lib-hook"] is True


def test_missing_key_goes_into_its_table():
    text = PACKAGED.replace("[nvidia-ctk]", "[features]\nallow-ldconfig-from-container = false\n\n[nvidia-ctk]")
    new, changed, _old = set_key(text, FLAG, True)
    assert changed
    assert "[features]\nallow-ldconfig-from-container = false\ndisable-cuda-compat-lib-hook = true\n\n[nvidia-ctk]" in new
    doc = tomllib.loads(new)
    assert doc["features"] == {"allow-ldconfig-from-container": False, "disable-cuda-compat-lib-hook": True}


def test_top_level_dotted_key_and_sub_tables_and_crlf():
    text = "features.disable-cuda-compat-lib-hook = false\n[features.other]\ndisable-cuda-compat-lib-hook = false\n"
    new, changed, _old = set_key(text, FLAG, True)
    assert new.splitlines()[0] == "features.disable-cuda-compat-lib-hook = true"
    assert new.splitlines()[2] == "disable-cuda-compat-lib-hook = false"  # [features.other] is another table
    crlf = PACKAGED.replace("\n", "\r\n")
    new, changed, _old = set_key(crlf, FLAG, True)
    assert new.endswith("\r\n[features]\r\ndisable-cuda-compat-lib-hook = true\r\n")
    assert tomllib.loads(new)["features"]["disable-cuda-compat-lib-hook"] is True


def test_values_are_rendered_as_toml():
    assert render(True) == "true" and render(0) == "0"
    assert render('a "b"\\') == '"a \\"b\\"\\\\"'
    new, _c, _o = set_key("", "nvidia-container-runtime.log-level", 'de"bug')
    assert tomllib.loads(new)["nvidia-container-runtime"]["log-level"] == 'de"bug'
    with pytest.raises(TomlEditError, match=r"cannot write \[1\] as a TOML value"):
        set_key(PACKAGED, FLAG, [1])


@pytest.mark.parametrize("text,message", [
    ('a = """x\n[features]\n"""\n', "multi-line strings"),
    ("features = { disable-cuda-compat-lib-hook = false }\n", "inline table"),
    ("[features]\ndisable-cuda-compat-lib-hook = false\ndisable-cuda-compat-lib-hook = true\n", "set 2 times"),
    ("[features]\na = 1\n[other]\n[features]\nb = 2\n", "defined twice"),
    ("[features]\ndisable-cuda-compat-lib-hook = [\n  1,\n]\n", "not a one-line boolean"),
    ("[features]\nbroken line\n", "would not be valid TOML"),
])
def test_files_it_cannot_edit_safely_are_refused(text, message):
    with pytest.raises(TomlEditError, match=message):
        set_key(text, FLAG, True)


def test_keys_must_be_bare_and_dotted():
    with pytest.raises(TomlEditError, match="table.key"):
        set_key(PACKAGED, "mode", "cdi")
    with pytest.raises(TomlEditError, match="only bare keys"):
        set_key(PACKAGED, 'features."a b"', True)
