"""kubegpu.fleet.toolkit_config through ansible-playbook (its action plugin edits on the
controller with tomlkit, the node module reads and writes; AnsiballZ, argument spec, check and
diff mode) on a copy of the packaged config.toml (lab/packages/files/config.toml), and
the node module run on its own, without the action plugin."""
import base64
import hashlib
import json
import os
import stat
import subprocess
import sys
import tomllib

from lib.paths import TOOLKIT_CONFIG  # tests/ is on sys.path (tests/conftest.py)

FIXTURE = TOOLKIT_CONFIG
with open(FIXTURE) as _f:
    CONFIG = _f.read()
HOOK = "features.disable-cuda-compat-lib-hook"
FLAG = {HOOK: True}
MODULE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "plugins", "modules", "toolkit_config.py")


def config_file(tmp_path, text=CONFIG):
    (tmp_path / "etc").mkdir()
    path = tmp_path / "etc" / "config.toml"
    path.write_text(text)
    os.chmod(str(path), 0o644)
    return path


def run_module_alone(ansible, tmp_path, args):
    """The node module without its action plugin: ``python toolkit_config.py args.json``, the
    collection importable as on a node (AnsibleModule reads its arguments from the file)."""
    argfile = tmp_path / "args.json"
    argfile.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    env = dict(os.environ, PYTHONPATH=ansible.collections_path)
    proc = subprocess.run([sys.executable, MODULE, str(argfile)], env=env, stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=60,
                          check=False)
    assert "Traceback" not in proc.stderr, proc.stderr
    out = json.loads(proc.stdout)
    out["_rc"] = proc.returncode
    return out


def test_check_mode_diff_then_change_backup_atomic_and_idempotence(ansible, tmp_path):
    path = config_file(tmp_path)
    expected = CONFIG + "\n[features]\ndisable-cuda-compat-lib-hook = true\n"

    res = ansible.module("toolkit_config", {"path": str(path), "settings": FLAG}, check=True, diff=True)
    assert res["_rc"] == 0 and res["changed"] is True, res
    assert res["changes"] == [{"key": HOOK, "before": None, "after": "true"}]
    assert res["diff"]["before"] == CONFIG and res["diff"]["after"] == expected
    assert path.read_text() == CONFIG and os.listdir(str(path.parent)) == ["config.toml"]  # no backup either

    inode = os.stat(str(path)).st_ino
    res = ansible.module("toolkit_config", {"path": str(path), "settings": FLAG}, diff=True)
    assert res["_rc"] == 0 and res["changed"] is True, res
    assert path.read_text() == expected  # comments and the rest of the file kept
    assert tomllib.loads(path.read_text())["features"]["disable-cuda-compat-lib-hook"] is True
    assert res["diff"]["after"] == expected
    st = os.stat(str(path))
    assert stat.S_IMODE(st.st_mode) == 0o644 and st.st_ino != inode  # renamed over the file, mode kept
    backup = res["backup_file"]
    assert open(backup).read() == CONFIG and stat.S_IMODE(os.stat(backup).st_mode) == 0o600
    assert sorted(os.listdir(str(path.parent))) == sorted(["config.toml", os.path.basename(backup)])  # no temp file

    again = ansible.module("toolkit_config", {"path": str(path), "settings": FLAG})
    assert again["_rc"] == 0 and again["changed"] is False and again["changes"] == [], again
    assert os.stat(str(path)).st_ino == st.st_ino and len(os.listdir(str(path.parent))) == 2  # no write, no backup


def test_change_of_an_existing_value_without_backup(ansible, tmp_path):
    text = CONFIG + "\n[features]\ndisable-cuda-compat-lib-hook = false  # set by the SRE team\n"
    path = config_file(tmp_path, text)
    res = ansible.module("toolkit_config", {"path": str(path), "backup": False,
                                            "settings": {HOOK: True, "nvidia-container-runtime.mode": "cdi"}})
    assert res["_rc"] == 0 and res["changed"] is True and "backup_file" not in res, res.get("msg")
    assert res["changes"] == [{"key": HOOK, "before": "false", "after": "true"},
                              {"key": "nvidia-container-runtime.mode", "before": '"auto"', "after": '"cdi"'}]
    assert path.read_text() == text.replace("= false  # set by", "= true  # set by").replace(
        'mode = "auto"', 'mode = "cdi"')
    assert os.listdir(str(path.parent)) == ["config.toml"]


def test_refusals_name_the_problem_and_change_nothing(ansible, tmp_path):
    missing = ansible.module("toolkit_config", {"path": str(tmp_path / "nope.toml"), "settings": FLAG})
    assert missing["_rc"] != 0 and "does not exist: install nvidia-container-toolkit-base" in missing["msg"]
    inline = tmp_path / "inline.toml"
    inline.write_text("features = { disable-cuda-compat-lib-hook = false }\n")
    res = ansible.module("toolkit_config", {"path": str(inline), "settings": FLAG})
    assert res["_rc"] != 0 and "cannot set features.disable-cuda-compat-lib-hook" in res["msg"]
    assert "inline table" in res["msg"] and str(inline) in res["msg"]
    assert inline.read_text() == "features = { disable-cuda-compat-lib-hook = false }\n"
    empty = ansible.module("toolkit_config", {"path": str(inline), "settings": {}})
    assert empty["_rc"] != 0 and "settings is empty" in empty["msg"]
    latin1 = tmp_path / "latin1.toml"
    latin1.write_bytes(b"# caf\xe9\ndisable-require = false\n")
    res = ansible.module("toolkit_config", {"path": str(latin1), "settings": FLAG})
    assert res["_rc"] != 0 and "%s is not UTF-8 text" % latin1 in res["msg"], res
    assert latin1.read_bytes() == b"# caf\xe9\ndisable-require = false\n"
    internal = ansible.module("toolkit_config", {"path": str(inline), "settings": FLAG, "content": "x = 1\n",
                                                 "expected_sha256": "0" * 64})
    assert internal["_rc"] != 0 and "content, expected_sha256: are set by the action plugin" in internal["msg"]
    assert inline.read_text() == "features = { disable-cuda-compat-lib-hook = false }\n"
    for res in (missing, res, empty, internal):
        assert "Traceback" not in res["_stderr"] and "Traceback" not in res.get("module_stderr", "")


def test_fifo_is_refused_without_blocking(ansible, tmp_path):
    fifo = tmp_path / "config.toml"
    os.mkfifo(str(fifo))
    res = ansible.module("toolkit_config", {"path": str(fifo), "settings": FLAG})
    assert res["_rc"] != 0 and "cannot read %s" % fifo in res["msg"] and "FIFO" in res["msg"], res
    assert stat.S_ISFIFO(os.lstat(str(fifo)).st_mode)


def test_module_alone_refuses_a_file_changed_since_the_read(ansible, tmp_path):
    path = config_file(tmp_path)
    read = run_module_alone(ansible, tmp_path, {"path": str(path), "settings": FLAG, "read": True})
    assert read["_rc"] == 0 and read["changed"] is False
    assert base64.b64decode(read["content_b64"]).decode() == CONFIG
    assert read["sha256"] == hashlib.sha256(CONFIG.encode()).hexdigest()

    # Someone runs `nvidia-ctk config --in-place --set ...` between the read and the write.
    theirs = CONFIG.replace('log-level = "info"', 'log-level = "debug"')
    path.write_text(theirs)
    mine = CONFIG + "\n[features]\ndisable-cuda-compat-lib-hook = true\n"
    res = run_module_alone(ansible, tmp_path, {"path": str(path), "settings": FLAG, "content": mine,
                                               "expected_sha256": read["sha256"]})
    assert res["_rc"] != 0 and res["changed"] is False
    assert "%s changed since it was read for the edit" % path in res["msg"] and "nothing was written" in res["msg"]
    assert path.read_text() == theirs and os.listdir(str(path.parent)) == ["config.toml"]

    # The same write against what the file holds now goes through (backup 0600 of their version).
    res = run_module_alone(ansible, tmp_path, {"path": str(path), "settings": FLAG, "content": mine,
                                               "expected_sha256": hashlib.sha256(theirs.encode()).hexdigest()})
    assert res["_rc"] == 0 and res["changed"] is True and path.read_text() == mine
    assert open(res["backup_file"]).read() == theirs and stat.S_IMODE(os.stat(res["backup_file"]).st_mode) == 0o600


def test_module_alone_with_settings_only_changes_nothing(ansible, tmp_path):
    path = config_file(tmp_path)
    res = run_module_alone(ansible, tmp_path, {"path": str(path), "settings": FLAG})
    assert res["_rc"] != 0 and "settings are applied by the kubegpu.fleet.toolkit_config action plugin" in res["msg"]
    assert path.read_text() == CONFIG and os.listdir(str(path.parent)) == ["config.toml"]
    bad = run_module_alone(ansible, tmp_path, {"path": str(path), "settings": FLAG, "content": "x = 1\n",
                                               "expected_sha256": "not-a-digest"})
    assert bad["_rc"] != 0 and "expected_sha256 must be the 64 hex digits" in bad["msg"]
    assert path.read_text() == CONFIG
