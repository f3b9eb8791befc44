# -*- coding: utf-8 -*-
"""playbooks/catalog_refresh.yml and kubegpu.fleet.catalog_refresh through ansible-playbook,
against a local HTTP server on loopback that serves CSAF documents written here in NVIDIA's
shape (tests/lib/csaf_docs.py) with a CSAF index.txt, and against a mirror directory: a bulletin
newer than the bundled catalog lands in the overlay and the next audit (the audit role on a node
with the fake NVML, kubegpu_catalog_overlay set) reports its CVE; a refresh that fails keeps
the last good overlay byte for byte."""
from __future__ import absolute_import, division, print_function

import functools
import hashlib
import http.server
import os
import shutil
import threading

import pytest

from ansible_collections.kubegpu.fleet.tests.lib import csaf_docs
from ansible_collections.kubegpu.fleet.tests.module.test_audit_node import Node, _audit_only, fakenvml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLAYBOOK = os.path.join(REPO, "playbooks", "catalog_refresh.yml")
DRIVER = "580.178.04"  # the latest R580 fix of the bundled catalog (bulletin 5861): clean before the refresh


def newer_driver_bulletin():
    """A driver bulletin newer than every bundled one: R580 before 580.999.01 affected."""
    archs = [csaf_docs.arch("Linux(R580)",
                            csaf_docs.row("t580_aff", "Tesla", "All driver versions prior to 580.999.01"),
                            csaf_docs.row("t580_fix", "Tesla", "580.999.01"))]
    return csaf_docs.bulletin("9901", "GPU Display Driver", archs,
                              [csaf_docs.vuln("CVE-2099-0901", ["t580_aff"], ["t580_fix"], score=7.8)],
                              date="2099-01-15")


def other_product_bulletin():
    """A bulletin of a product that is no node component (NVIDIA's repository holds every product)."""
    archs = [csaf_docs.arch("All", csaf_docs.row("tr_aff", "NVIDIA Triton Inference Server", "All versions prior to 25.07"),
                            csaf_docs.row("tr_fix", "NVIDIA Triton Inference Server", "25.07"))]
    return csaf_docs.bulletin("9902", "Triton", archs, [csaf_docs.vuln("CVE-2099-0902", ["tr_aff"], ["tr_fix"])])


def publish(directory, docs):
    """Write ``docs`` in NVIDIA's layout under ``directory`` and a CSAF index.txt listing them."""
    paths = [os.path.relpath(csaf_docs.write(directory, d), str(directory)) for d in docs]
    with open(os.path.join(str(directory), "index.txt"), "w") as f:
        f.write("# CSAF index\n" + "".join(p + "\n" for p in paths))
    return paths


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # pylint: disable=arguments-differ
        pass


@pytest.fixture
def server(tmp_path):
    root = tmp_path / "www"
    root.mkdir()
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(root)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield root, "http://127.0.0.1:%d" % httpd.server_address[1]
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


@pytest.fixture(scope="module")
def driver_root():
    return fakenvml.build(DRIVER)


def _sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _cves(ansible, node, **extra):
    node.vars.update(extra)
    audit = _audit_only(ansible, node)
    return set(c for f in audit["findings"] if f["id"] == "security.driver" for c in f["evidence"]["cves"])


def test_a_newer_bulletin_from_the_url_reaches_the_next_audit(ansible, server, tmp_path, driver_root):
    root, base = server
    publish(root, [newer_driver_bulletin(), csaf_docs.toolkit_bulletin(), other_product_bulletin()])
    overlay = str(tmp_path / "overlay.yml")
    node = Node(str(tmp_path / "node"), driver_root.root).setup([fakenvml.gpu(0)], kernel=DRIVER)
    assert "CVE-2099-0901" not in _cves(ansible, node)

    ev = {"kubegpu_catalog_overlay": overlay, "kubegpu_catalog_index_url": base + "/index.txt"}
    res = ansible.playbook(PLAYBOOK, extra_vars=ev)
    assert res.rc == 0, res.stdout[-3000:] + res.stderr[-3000:]
    task = res.task("Read NVIDIA's bulletins and write the overlay")
    assert task["changed"] is True and task["documents"] == 3
    assert task["bulletins"] == ["9901", "9959"]  # the Triton bulletin holds no node component
    assert "driver-cve-2099-0901" in task["new_entries"] and "ctk-cve-2099-0101" in task["new_entries"]
    assert task["newest_bulletin"]["id"] == "9959"
    assert oct(os.stat(overlay).st_mode & 0o777) == "0o644"

    assert "CVE-2099-0901" in _cves(ansible, node, kubegpu_catalog_overlay=overlay)

    again = ansible.playbook(PLAYBOOK, extra_vars=ev)  # nothing new: no change, no backup
    assert again.rc == 0 and again.task("Read NVIDIA's bulletins and write the overlay")["changed"] is False
    assert [n for n in os.listdir(str(tmp_path)) if n.startswith("overlay.yml.")] == []


def test_a_refresh_that_fails_keeps_the_last_good_overlay(ansible, server, tmp_path):
    root, base = server
    publish(root, [newer_driver_bulletin()])
    overlay = str(tmp_path / "overlay.yml")
    ev = {"kubegpu_catalog_overlay": overlay, "kubegpu_catalog_index_url": base + "/index.txt"}
    assert ansible.playbook(PLAYBOOK, extra_vars=ev).rc == 0
    good = _sha(overlay)

    broken = newer_driver_bulletin()
    broken["document"]["tracking"].update(id="9903")
    broken["vulnerabilities"][0]["scores"][0]["cvss_v3"]["vectorString"] = "CVSS:3.1/AV:X"
    publish(root, [newer_driver_bulletin(), broken])
    res = ansible.playbook(PLAYBOOK, extra_vars=ev)
    assert res.rc == 2
    msg = res.task("Read NVIDIA's bulletins and write the overlay")["msg"]
    assert "9903.json" in msg and "does not parse" in msg and "the last overlay at %s is kept" % overlay in msg
    assert _sha(overlay) == good

    shutil.rmtree(str(root / "2099"))  # the index names documents the server no longer has
    res = ansible.playbook(PLAYBOOK, extra_vars=ev)
    assert res.rc == 2 and "404" in res.task("Read NVIDIA's bulletins and write the overlay")["msg"]
    assert _sha(overlay) == good


def test_a_mirror_directory_gives_the_same_overlay_and_check_mode_writes_nothing(ansible, server, tmp_path):
    root, base = server
    publish(root, [newer_driver_bulletin(), csaf_docs.toolkit_bulletin()])
    by_url, by_dir = str(tmp_path / "url.yml"), str(tmp_path / "dir.yml")
    assert ansible.playbook(PLAYBOOK, extra_vars={"kubegpu_catalog_overlay": by_url,
                                                  "kubegpu_catalog_index_url": base + "/index.txt"}).rc == 0
    checked = ansible.playbook(PLAYBOOK, check=True, extra_vars={"kubegpu_catalog_overlay": by_dir,
                                                                 "kubegpu_catalog_mirror_dir": str(root)})
    assert checked.rc == 0 and checked.task("Read NVIDIA's bulletins and write the overlay")["changed"] is True
    assert not os.path.exists(by_dir)
    assert ansible.playbook(PLAYBOOK, extra_vars={"kubegpu_catalog_overlay": by_dir,
                                                  "kubegpu_catalog_mirror_dir": str(root)}).rc == 0
    body = [open(p).read().split("\n---\n")[-1].split("\n- ", 1)[1] for p in (by_url, by_dir)]
    assert body[0] == body[1]


def test_missing_options_and_a_missing_overlay_fail_with_a_message(ansible, tmp_path, driver_root):
    res = ansible.playbook(PLAYBOOK, extra_vars={"kubegpu_catalog_overlay": str(tmp_path / "o.yml")})
    assert res.rc == 2 and "one source" in res.stdout
    res = ansible.module("catalog_refresh", {"dest": str(tmp_path / "o.yml"), "urls": ["file:///etc/passwd"]})
    assert res.get("failed") and "is not an http(s) URL" in res["msg"]
    node = Node(str(tmp_path / "node"), driver_root.root).setup([fakenvml.gpu(0)], kernel=DRIVER)
    node.vars["kubegpu_catalog_overlay"] = str(tmp_path / "never-written.yml")
    play = [{"hosts": "localhost", "gather_facts": False, "vars": dict(node.vars), "tasks": [
        {"name": "audit", "ansible.builtin.include_role": {"name": "kubegpu.fleet.audit"}}]}]
    res = ansible.playbook(play, env=node.env)
    assert res.rc != 0 and "run playbooks/catalog_refresh.yml first" in res.stdout
