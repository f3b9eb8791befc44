# -*- coding: utf-8 -*-
"""The node writers on the write primitive: toolkit_config's config.toml writer
(stack/config_file.py), driver_guard's pin writer (driver/guard_run.py) and checkpoint_sync's
removal (checkpoint/sync.py) refuse a file another user controls, in check mode too, and keep a
root-owned symlink. Real files; uid 65534 via os.chown (root only)."""
import hashlib
import os
import shutil
import stat
import subprocess
import tempfile

import pytest

from ansible_collections.kubegpu.fleet.plugins.module_utils._common import fileutil
from ansible_collections.kubegpu.fleet.plugins.module_utils.checkpoint import sync as ck
from ansible_collections.kubegpu.fleet.plugins.module_utils.driver import guard_run
from ansible_collections.kubegpu.fleet.plugins.module_utils.stack import config_file as cf

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="making files another uid owns (os.chown) needs root")

NOBODY = 65534
TEXT = "disable-require = false\n"
NEW = TEXT + "\n[features]\ndisable-cuda-compat-lib-hook = true\n"


def sha(text):
    return hashlib.sha256(text.encode()).hexdigest()


def tree(root):
    """Every entry under ``root``: relative path -> (type, mode, uid, content sha or link)."""
    out = {}
    for base, dirs, files in os.walk(str(root)):
        for n in dirs + files:
            p = os.path.join(base, n)
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                what = os.readlink(p)
            elif stat.S_ISREG(st.st_mode):
                with open(p, "rb") as f:
                    what = hashlib.sha256(f.read()).hexdigest()
            else:
                what = None
            out[os.path.relpath(p, str(root))] = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_uid, what)
    return out


# ------------------------------------------------------------------ toolkit_config's config.toml

@pytest.fixture
def ctk(tmp_path):
    d = tmp_path / "nvidia-container-runtime"
    d.mkdir()
    os.chmod(str(d), 0o755)
    f = d / "config.toml"
    f.write_text(TEXT)
    os.chmod(str(f), 0o644)
    return f


@pytest.mark.parametrize("how, words", [
    (lambda f: os.chown(str(f.parent), NOBODY, NOBODY), "its directory %(d)s is owned by uid 65534, not root"),
    (lambda f: os.chmod(str(f.parent), 0o777), "its directory %(d)s is writable by group and others"),
    (lambda f: os.chown(str(f.parent.parent), NOBODY, NOBODY), "the directory %(t)s on its path is owned by uid 65534"),
    (lambda f: os.chown(str(f), NOBODY, NOBODY), "%(f)s is owned by uid 65534, not root"),
])
def test_config_toml_another_user_controls_is_refused(ctk, how, words):
    how(ctk)
    before = tree(ctk.parent.parent)
    expect = words % {"d": ctk.parent, "t": ctk.parent.parent, "f": ctk}
    for call in (lambda: cf.read_config(str(ctk)),
                 lambda: cf.write_config(str(ctk), NEW, sha(TEXT), check_mode=True),
                 lambda: cf.write_config(str(ctk), NEW, sha(TEXT))):
        with pytest.raises(cf.ConfigFileError) as e:
            call()
        assert str(e.value).startswith("refusing to edit %s: " % ctk) and expect in str(e.value), str(e.value)
        assert "nothing was written" in str(e.value)
    assert tree(ctk.parent.parent) == before


def test_config_toml_symlink_another_user_owns_is_refused(tmp_path, ctk):
    secret = tmp_path / "secret"
    secret.write_text(TEXT)             # the same text, so that the sha256 check passes
    os.chmod(str(secret), 0o600)
    link = ctk.parent / "link.toml"
    link.symlink_to(secret)
    os.lchown(str(link), NOBODY, NOBODY)
    before = tree(tmp_path)
    with pytest.raises(cf.ConfigFileError) as e:
        cf.write_config(str(link), NEW, sha(TEXT))
    assert "%s is a symlink owned by uid 65534, not root" % link in str(e.value)
    assert tree(tmp_path) == before


def test_config_toml_root_symlink_keeps_the_link(tmp_path, ctk):
    store = tmp_path / "store"
    store.mkdir()
    real = store / "config.toml"
    real.write_text(TEXT)
    os.chmod(str(real), 0o640)
    ctk.unlink()
    ctk.symlink_to(real)
    data, digest = cf.read_config(str(ctk))
    changed, backup = cf.write_config(str(ctk), NEW, digest)
    assert changed and os.path.islink(str(ctk)) and os.readlink(str(ctk)) == str(real)
    assert real.read_text() == NEW and stat.S_IMODE(os.stat(str(real)).st_mode) == 0o640
    assert os.path.dirname(backup) == str(store) and open(backup, "rb").read() == data
    assert os.listdir(str(ctk.parent)) == ["config.toml"]


# ------------------------------------------------------------------ driver_guard's pins

def pinned(path, check_mode, get_bin_path=lambda name: None, run=None):
    params = {"package_manager": "apt", "pin_scope": "all", "pin_packages": ["nvidia-driver-*"],
              "skip_entries": [], "apt_preferences_path": str(path), "validate_pins": True,
              "dnf_conf_path": "/nonexistent/dnf.conf"}
    result = {"branch": None, "recommended_version": None}
    return guard_run.driver_guard_pinned(params, [], {}, result, get_bin_path, run, check_mode, True)


@pytest.mark.parametrize("check_mode", [True, False])
def test_pins_in_a_directory_another_user_owns_are_refused(tmp_path, check_mode):
    d = tmp_path / "preferences.d"
    d.mkdir()
    os.chown(str(d), NOBODY, NOBODY)
    with pytest.raises(guard_run.PinError) as e:
        pinned(d / "known-bad.pref", check_mode)
    assert str(e.value).startswith("refusing to write %s: its directory %s is owned by uid 65534, not root; "
                                   "nothing was written" % (d / "known-bad.pref", d))
    assert os.listdir(str(d)) == []


def test_pins_written_through_a_root_symlink_after_apt_checks_them_in_a_private_scratch_dir(tmp_path, monkeypatch):
    apt_cache = shutil.which("apt-cache")
    if not apt_cache:
        pytest.skip("apt-cache is not installed")
    scratch = tmp_path / "TMPDIR"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    d = tmp_path / "preferences.d"
    d.mkdir()
    store = tmp_path / "store"
    store.mkdir()
    real = store / "pins.pref"
    real.write_text("# old\n")
    link = d / "known-bad.pref"
    link.symlink_to(real)
    seen = []

    def run(argv):
        seen.extend(a.split("=", 1)[1] for a in argv if a.startswith("Dir::Etc::Preferences="))
        assert stat.S_IMODE(os.stat(os.path.dirname(seen[-1])).st_mode) == 0o700
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=60,
                           check=False)
        return p.returncode, p.stdout, p.stderr

    res = pinned(link, False, get_bin_path=lambda name: apt_cache if name == "apt-cache" else None, run=run)
    assert res["pins"]["validation"] == "apt-cache policy parsed the file"
    assert os.path.islink(str(link)) and real.read_text() == res["diff"]["after"]
    assert stat.S_IMODE(os.stat(str(real)).st_mode) == 0o644
    backup = res["pins"]["backup_file"]
    assert os.path.dirname(backup) == str(store) and open(backup).read() == "# old\n"
    assert seen and os.listdir(str(scratch)) == []            # the scratch directory is gone


# ------------------------------------------------------------------ checkpoint_sync's removal

def test_checkpoint_in_a_directory_another_user_owns_is_not_backed_up_nor_removed(tmp_path):
    d = tmp_path / "device-plugins"
    d.mkdir()
    path = d / "kubelet_internal_checkpoint"
    path.write_bytes(b"{}")
    os.chown(str(d), NOBODY, NOBODY)
    with pytest.raises(fileutil.FileOpError) as e:
        ck.backup_and_remove(str(path), b"{}", backup_func=fileutil.backup_file)
    assert str(e.value) == ("refusing to remove %s: its directory %s is owned by uid 65534, not root; the file "
                            "was left in place" % (path, d))
    assert os.listdir(str(d)) == ["kubelet_internal_checkpoint"]


def test_checkpoint_symlink_is_not_removed_through(tmp_path):
    d = tmp_path / "device-plugins"
    d.mkdir()
    real = tmp_path / "elsewhere"
    real.write_bytes(b"{}")
    link = d / "kubelet_internal_checkpoint"
    link.symlink_to(real)
    before = tree(tmp_path)
    with pytest.raises(fileutil.FileOpError) as e:
        ck.backup_and_remove(str(link), b"{}", backup_func=fileutil.backup_file)
    assert "%s is a symlink (to %s): a file is not removed through a symlink" % (link, real) in str(e.value)
    assert tree(tmp_path) == before
