"""cgroup_probe mechanics: child placement, errno classification, timeout, kill and reap."""
import errno
import os
import time

import pytest

from ansible_collections.kubegpu.fleet.plugins.module_utils.cgroup import probe as cgroup_probe
from ansible_collections.kubegpu.fleet.plugins.module_utils.cgroup.probe import (
    ProbeError,
    classify,
    collect,
    filesystem_type,
    probe_cgroup,
)

from ansible_collections.kubegpu.fleet.tests.unit.plugins.module_utils.cgroup.test_cgroup_support import GPU_MAJOR, CgroupTree, FakeNode


@pytest.fixture
def v1_tree():
    tree = CgroupTree("v1")
    yield tree
    tree.cleanup()


def _gone(pid):
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


@pytest.mark.parametrize("method, err, verdict", [
    ("access", 0, "allowed"), ("access", errno.EPERM, "denied"),
    ("access", errno.EACCES, "unknown"), ("access", errno.ENOENT, "unknown"),
    ("open", 0, "allowed"), ("open", errno.EPERM, "denied"), ("open", errno.ENXIO, "allowed"),
    ("open", errno.ENODEV, "allowed"), ("open", errno.EIO, "allowed"),
    ("open", errno.EACCES, "unknown"), ("open", errno.ENOENT, "unknown"),
])
def test_classify(method, err, verdict):
    assert classify(method, err)[0] == verdict


def test_bad_access_and_method():
    with pytest.raises(ValueError, match="mknod cannot be probed"):
        probe_cgroup("/sys/fs/cgroup/devices", ["/dev/null"], access="m")
    with pytest.raises(ValueError, match="probe method 'x'"):
        probe_cgroup("/sys/fs/cgroup/devices", ["/dev/null"], method="x")
    with pytest.raises(ValueError, match="2 access strings for 1 paths"):
        probe_cgroup("/sys/fs/cgroup/devices", ["/dev/null"], access=["r", "w"])


def test_refuses_plain_directories(tmp_path):
    """A copy of a cgroup tree must not get a pid written into its cgroup.procs file."""
    with pytest.raises(ProbeError, match="no cgroup.procs"):
        probe_cgroup(str(tmp_path), ["/dev/null"])
    procs = tmp_path / "cgroup.procs"
    procs.write_text("")
    with pytest.raises(ProbeError, match="not a live cgroup tree"):
        probe_cgroup(str(tmp_path), ["/dev/null"])
    assert procs.read_text() == ""


def test_filesystem_type_of_real_mounts(tmp_path):
    assert filesystem_type("/proc/self") == "proc"
    if os.path.isdir("/sys/fs/cgroup/devices"):
        assert filesystem_type("/sys/fs/cgroup/devices") == "cgroup"
    mi = tmp_path / "mountinfo"
    mi.write_text("22 1 0:21 / / rw - ext4 /dev/vda rw\n"
                  "30 22 0:26 / /mnt/with\\040space rw,nodev - tmpfs tmpfs rw\n"
                  "garbage line\n")
    assert filesystem_type("/mnt/with space/x", str(mi)) == "tmpfs"
    assert filesystem_type("/mnt/with", str(mi)) == "ext4"


def test_probe_v1_allowed_denied_unknown(v1_tree, tmp_path):
    node = FakeNode(str(tmp_path))
    cdir = v1_tree.restrict("p/c", ["c %d:0 rw" % GPU_MAJOR, "c %d:255 r" % GPU_MAJOR])
    paths = [node.dev + "/nvidia0", node.dev + "/nvidiactl", node.dev + "/nvidia1",
             node.dev + "/does-not-exist"]
    for method in cgroup_probe.METHODS:
        out = probe_cgroup(cdir, paths, method=method)
        assert [r.verdict for r in out.results] == ["allowed", "denied", "denied", "unknown"]
        assert out.results[1].errno == "EPERM"
        assert out.results[3].errno == "ENOENT"
        assert out.warnings == []
        rd = probe_cgroup(cdir, paths[:2], access="r", method=method)
        assert [r.verdict for r in rd.results] == ["allowed", "allowed"]
    with open(os.path.join(cdir, "cgroup.procs")) as f:
        assert f.read() == ""


def test_probe_refused_by_the_kernel_is_a_clear_error():
    """A v1 cpuset cgroup without CPUs refuses tasks (ENOSPC): ProbeError, child reaped."""
    base = "/sys/fs/cgroup/cpuset"
    if not os.path.isfile(os.path.join(base, "cpuset.cpus")):
        pytest.skip("no cgroup v1 cpuset hierarchy here")
    tree = CgroupTree("v1", base=base)
    try:
        cdir = tree.mkdir("empty")
        with open(os.path.join(cdir, "cpuset.cpus")) as f:
            assert f.read().strip() == ""
        before = set(os.listdir("/proc"))
        with pytest.raises(ProbeError, match="cannot move a probe process into .*ENOSPC"):
            probe_cgroup(cdir, ["/dev/null"])
        leftovers = [p for p in set(os.listdir("/proc")) - before if p.isdigit()
                     and _parent(p) == os.getpid()]
        assert leftovers == []
    finally:
        tree.cleanup()


def _parent(pid):
    try:
        with open("/proc/%s/stat" % pid) as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def test_timeout_kills_and_reaps_a_hung_child():
    """A probe child that hangs in open() (a wedged driver: the edge this machine lacks) is
    a real process that answered one device and then blocks: killed, reaped, rest unknown."""
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        try:
            os.close(rfd)
            os.write(wfd, b"M\n0 0\n")
            time.sleep(600)
        finally:
            os._exit(0)
    os.close(wfd)
    out = collect(pid, rfd, "/sys/fs/cgroup/x", ["/dev/a", "/dev/b", "/dev/c"], "open", 0.5)
    assert [r.verdict for r in out.results] == ["allowed", "unknown", "unknown"]
    assert "no answer within 0.5s" in out.results[1].reason
    assert out.warnings == ["probing /sys/fs/cgroup/x timed out after 0.5s at /dev/b"]
    assert _gone(pid)


def test_child_that_dies_before_entering():
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        os._exit(3)
    os.close(wfd)
    with pytest.raises(ProbeError, match="died before entering the cgroup"):
        collect(pid, rfd, "/sys/fs/cgroup/x", ["/dev/a"], "open", 5)
    assert _gone(pid)


@pytest.mark.parametrize("digits", ["\u00b2", "\u0663", "\uff11"])
def test_answers_that_are_not_ascii_digits_are_ignored(digits):
    """Lines whose numbers are not ASCII digits ('²'.isdigit() is True, int('²') raises) are
    no answers: the device stays unknown, nothing raises, and an "X" line with such an errno
    is not taken for a placement error."""
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        try:
            os.close(rfd)
            os.write(wfd, ("M\nX %s\n%s 0\n1 %s\n2 0\n" % (digits, digits, digits)).encode("utf-8"))
        finally:
            os._exit(0)
    os.close(wfd)
    out = collect(pid, rfd, "/sys/fs/cgroup/x", ["/dev/a", "/dev/b", "/dev/c"], "open", 5)
    assert [r.verdict for r in out.results] == ["unknown", "unknown", "allowed"]
    assert out.results[0].reason == "probe process exited early"
    assert _gone(pid)
