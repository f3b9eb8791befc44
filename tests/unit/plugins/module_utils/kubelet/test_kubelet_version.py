# -*- coding: utf-8 -*-
"""The kubelet version from the package database (kubelet/version.py)."""

import pytest

from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet.process import parse_stat
from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet.version import package_version
from ansible_collections.kubegpu.fleet.tests.fixtures.kubelet.kubelet_fakeproc import fake_tools


# -- version ------------------------------------------------------------------------------


@pytest.mark.parametrize("body,version,source", [
    ("echo 'ii |1.31.4-1.1'\n", "v1.31.4", "package:kubelet 1.31.4-1.1 (dpkg)"),
    ("echo 'ii |1:1.30.2-00'\n", "v1.30.2", "package:kubelet 1:1.30.2-00 (dpkg)"),
])
def test_package_version_from_dpkg(tmp_path, body, version, source):
    assert package_version(fake_tools(tmp_path, dpkg_query=body)) == (version, source, None)


def test_package_version_falls_back_to_rpm_and_reports_failures(tmp_path):
    tools = fake_tools(tmp_path, dpkg_query="echo 'dpkg-query: no packages found' >&2\nexit 1\n",
                       rpm="echo 'ii |1.29.8-150500.1.1'\n")
    assert package_version(tools) == ("v1.29.8", "package:kubelet 1.29.8-150500.1.1 (rpm)", None)
    tools = fake_tools(tmp_path / "b" if (tmp_path / "b").mkdir() is None else None,
                       dpkg_query="printf 'rc |1.31.4-1.1'\n")
    version, source, err = package_version(tools)
    assert version is None and source is None and "status rc" in err
    assert package_version(lambda name: None)[2] == \
        "no package database (dpkg-query, rpm) on the node"


def test_package_version_survives_hostile_output(tmp_path):
    tools = fake_tools(tmp_path, dpkg_query="printf 'ii |\\377\\376abc'\n")
    version, _source, err = package_version(tools)
    assert version is None and "not a Kubernetes version" in err
    with pytest.raises(ValueError, match="kubelet package must be a package name"):
        package_version(tools, package="-kubelet")


def _alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return parse_stat(f.read())[0] not in ("Z", "X")
    except (IOError, OSError):
        return False


def test_package_version_deadline_kills_the_whole_group(tmp_path):
    pids = tmp_path / "pids"
    tools = fake_tools(tmp_path, dpkg_query="sleep 300 &\necho $$ $! > %s\nwait\n" % pids)
    version, _source, err = package_version(tools, timeout=1.0)
    assert version is None and "did not finish within 1s" in err
    shell, child = [int(x) for x in pids.read_text().split()]
    assert not _alive(shell) and not _alive(child)
