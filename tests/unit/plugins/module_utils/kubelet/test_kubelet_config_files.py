# -*- coding: utf-8 -*-
"""Reading the kubelet's config files as it sees them (kubelet/config_files.py)."""
import os


from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet.config_files import (
    CONFIG_MAX_BYTES,
    kubelet_view_paths,
    read_config_file,
)
from ansible_collections.kubegpu.fleet.tests.fixtures.kubelet.kubelet_fakeproc import FakeProc


def test_read_config_file(tmp_path):
    good = tmp_path / "c.yaml"
    good.write_text("kind: KubeletConfiguration\n")
    missing = str(tmp_path / "missing.yaml")
    assert read_config_file([missing, str(good)]) == (
        "kind: KubeletConfiguration\n", str(good), None)
    assert read_config_file([missing]) == (None, None, "%s does not exist" % missing)
    text, path, err = read_config_file([str(tmp_path)])
    assert text is None and err == "%s is a directory; refusing to read it" % tmp_path
    fifo = str(tmp_path / "fifo")
    os.mkfifo(fifo)
    assert read_config_file([fifo])[2] == "%s is a FIFO; refusing to read it" % fifo
    loop = str(tmp_path / "loop")
    os.symlink(loop, loop)
    assert read_config_file([loop])[2] == "%s: symlink loop" % loop
    big = tmp_path / "big.yaml"
    with open(str(big), "wb") as f:
        f.truncate(CONFIG_MAX_BYTES + 1)
    assert "more than the %d bytes" % CONFIG_MAX_BYTES in read_config_file([str(big)])[2]
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(b"kind: KubeletConfiguration\nx: caf\xe9\n")
    assert read_config_file([str(latin)])[2] == "%s is not UTF-8 text (byte 33)" % latin


def test_kubelet_view_paths(tmp_path):
    fp = FakeProc(tmp_path)
    fp.add_process(7, ["/usr/bin/kubelet"], cwd="/etc/kubernetes", root=str(tmp_path / "root"))
    assert kubelet_view_paths("/var/lib/kubelet/config.yaml") == (
        "/var/lib/kubelet/config.yaml", ["/var/lib/kubelet/config.yaml"])
    path, cands = kubelet_view_paths("kubelet.yaml", fp.path, 7)
    assert path == "/etc/kubernetes/kubelet.yaml"
    assert cands == [path, os.path.join(fp.path, "7", "root", "etc/kubernetes/kubelet.yaml")]
