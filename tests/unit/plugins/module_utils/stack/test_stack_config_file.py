"""Node-side read and sha256-checked write of the toolkit's config.toml
(plugins/module_utils/stack/config_file.py) on real files, FIFOs and symlinks."""
import hashlib
import os
import stat

import pytest

from ansible_collections.kubegpu.fleet.plugins.module_utils.stack import config_file as cf

TEXT = "disable-require = false\n\n[nvidia-container-runtime]\nmode = \"auto\"\n"
NEW = TEXT + "\n[features]\ndisable-cuda-compat-lib-hook = true\n"


def sha(text):
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture
def conf(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text(TEXT)
    os.chmod(str(path), 0o640)
    return path


def test_read_returns_bytes_and_digest(conf):
    assert cf.read_config(str(conf)) == (TEXT.encode(), sha(TEXT))


@pytest.mark.parametrize("make,words", [
    (lambda p: None, "does not exist: install nvidia-container-toolkit-base"),
    (lambda p: os.mkfifo(str(p)), "FIFO"),
    (lambda p: os.mkdir(str(p)), "is a directory"),
    (lambda p: os.symlink(str(p), str(p)), "symlink loop"),
    (lambda p: p.write_bytes(b"#" * (cf.LIMIT + 1)), "more than the %d bytes" % cf.LIMIT),
])
def test_read_refuses_what_is_no_bounded_regular_file(tmp_path, make, words):
    path = tmp_path / "config.toml"
    make(path)
    with pytest.raises(cf.ConfigFileError) as e:
        cf.read_config(str(path))
    assert str(path) in str(e.value) and words in str(e.value)


def test_relative_path_is_refused():
    with pytest.raises(cf.ConfigFileError) as e:
        cf.read_config("etc/config.toml")
    assert "must be an absolute path" in str(e.value)


def test_write_backs_up_and_renames_over_the_file(conf):
    inode = os.stat(str(conf)).st_ino
    changed, backup = cf.write_config(str(conf), NEW, sha(TEXT))
    assert changed and conf.read_text() == NEW
    st = os.stat(str(conf))
    assert st.st_ino != inode and stat.S_IMODE(st.st_mode) == 0o640
    assert open(backup).read() == TEXT and stat.S_IMODE(os.stat(backup).st_mode) == 0o600
    assert sorted(os.listdir(str(conf.parent))) == sorted(["config.toml", os.path.basename(backup)])


def test_write_refuses_a_file_changed_since_the_read(conf):
    conf.write_text(TEXT.replace("auto", "cdi"))
    with pytest.raises(cf.ConfigFileError) as e:
        cf.write_config(str(conf), NEW, sha(TEXT).upper())
    assert "%s changed since it was read for the edit" % conf in str(e.value)
    assert sha(TEXT.replace("auto", "cdi")) in str(e.value) and "nothing was written" in str(e.value)
    assert conf.read_text() == TEXT.replace("auto", "cdi") and os.listdir(str(conf.parent)) == ["config.toml"]


def test_check_mode_same_content_and_no_backup(conf):
    assert cf.write_config(str(conf), NEW, sha(TEXT), check_mode=True) == (True, None)
    assert cf.write_config(str(conf), TEXT, sha(TEXT)) == (False, None)
    assert conf.read_text() == TEXT and os.listdir(str(conf.parent)) == ["config.toml"]
    assert cf.write_config(str(conf), NEW, sha(TEXT), backup=False) == (True, None)
    assert conf.read_text() == NEW and os.listdir(str(conf.parent)) == ["config.toml"]


@pytest.mark.parametrize("digest", ["", "abc", "g" * 64, None])
def test_write_refuses_a_malformed_digest(conf, digest):
    with pytest.raises(cf.ConfigFileError) as e:
        cf.write_config(str(conf), NEW, digest)
    assert "expected_sha256 must be the 64 hex digits" in str(e.value)
    assert conf.read_text() == TEXT


def test_write_refuses_oversized_content(conf):
    with pytest.raises(cf.ConfigFileError) as e:
        cf.write_config(str(conf), "#" * (cf.LIMIT + 1), sha(TEXT))
    assert "refusing to write" in str(e.value) and conf.read_text() == TEXT


def _params(path, **kw):
    out = dict(path=str(path), read=False, content=None, expected_sha256=None, backup=True)
    out.update(kw)
    return out


def test_module_body_reads_writes_and_fails_with_the_path(conf):
    """toolkit_config_run is the module's body: read, write (check mode first), and each
    failure a ProbeFailed carrying the module's result keys."""
    from ansible_collections.kubegpu.fleet.plugins.module_utils._common.node_probes import ProbeFailed
    import base64
    got = cf.toolkit_config_run(_params(conf, read=True))
    assert got == dict(changed=False, path=str(conf), sha256=sha(TEXT),
                       content_b64=base64.b64encode(TEXT.encode()).decode("ascii"))
    with pytest.raises(ProbeFailed) as no_content:
        cf.toolkit_config_run(_params(conf))
    assert no_content.value.msg == cf.NO_CONTENT % conf
    assert no_content.value.result == dict(changed=False, path=str(conf))
    planned = cf.toolkit_config_run(_params(conf, content=NEW, expected_sha256=sha(TEXT)), check_mode=True)
    assert planned == dict(changed=True, path=str(conf)) and conf.read_text() == TEXT
    done = cf.toolkit_config_run(_params(conf, content=NEW, expected_sha256=sha(TEXT)))
    assert done["changed"] is True and conf.read_text() == NEW
    assert open(done["backup_file"]).read() == TEXT
    with pytest.raises(ProbeFailed) as stale:
        cf.toolkit_config_run(_params(conf, content=TEXT, expected_sha256=sha(TEXT)))
    assert "changed since it was read" in stale.value.msg and stale.value.result == dict(changed=False, path=str(conf))
    assert conf.read_text() == NEW
