"""kubegpu.fleet.toolkit_config through ansible-playbook (AnsiballZ, argument spec, check and
diff mode): the CVE-2025-23266 mitigation setting in a copy of the packaged config.toml."""
import os
import stat
import tomllib

CONFIG = """disable-require = false
supported-driver-capabilities = "compat32,compute,display,graphics,ngx,utility,video"

[nvidia-container-cli]
environment = []
ldconfig = "@/sbin/ldconfig.real"
load-kmods = true

[nvidia-container-runtime]
log-level = "info"
mode = "legacy"
runtimes = ["docker-runc", "runc", "crun"]
"""
FLAG = {"features.disable-cuda-compat-lib-hook": True}


def test_check_mode_diff_then_change_backup_and_idempotence(ansible, tmp_path):
    (tmp_path / "etc").mkdir()
    path = tmp_path / "etc" / "config.toml"
    path.write_text(CONFIG)
    os.chmod(str(path), 0o644)

    res = ansible.module("toolkit_config", {"path": str(path), "settings": FLAG}, check=True, diff=True)
    assert res["_rc"] == 0 and res["changed"] is True
    assert res["changes"] == [{"key": "features.disable-cuda-compat-lib-hook", "before": None, "after": "true"}]
    assert res["diff"]["after"].endswith("[features]\ndisable-cuda-compat-lib-hook = true\n")
    assert path.read_text() == CONFIG and os.listdir(str(path.parent)) == ["config.toml"]  # no backup either

    res = ansible.module("toolkit_config", {"path": str(path), "settings": FLAG})
    assert res["_rc"] == 0 and res["changed"] is True
    assert tomllib.loads(path.read_text())["features"]["disable-cuda-compat-lib-hook"] is True
    assert stat.S_IMODE(os.stat(str(path)).st_mode) == 0o644
    backup = res["backup_file"]
    assert open(backup).read() == CONFIG and stat.S_IMODE(os.stat(backup).st_mode) == 0o600

    again = ansible.module("toolkit_config", {"path": str(path), "settings": FLAG})
    assert again["_rc"] == 0 and again["changed"] is False and again["changes"] == []


def test_refusals_name_the_problem(ansible, tmp_path):
    missing = ansible.module("toolkit_config", {"path": str(tmp_path / "nope.toml"), "settings": FLAG})
    assert missing["_rc"] != 0 and "does not exist: install nvidia-container-toolkit-base" in missing["msg"]
    inline = tmp_path / "inline.toml"
    inline.write_text("features = { disable-cuda-compat-lib-hook = false }\n")
    res = ansible.module("toolkit_config", {"path": str(inline), "settings": FLAG})
    assert res["_rc"] != 0 and "cannot set features.disable-cuda-compat-lib-hook" in res["msg"]
    assert "inline table" in res["msg"] and "Traceback" not in res.get("module_stderr", "")
    assert inline.read_text() == "features = { disable-cuda-compat-lib-hook = false }\n"
    empty = ansible.module("toolkit_config", {"path": str(inline), "settings": {}})
    assert empty["_rc"] != 0 and "settings is empty" in empty["msg"]
