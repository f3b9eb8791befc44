"""safe_io on real files, FIFOs, sockets, devices and real child processes (no timing asserts)."""
import os
import socket
import sys

import pytest

from ansible_collections.kubegpu.fleet.tests.lib.procs import alive

from ansible_collections.kubegpu.fleet.plugins.module_utils._common import safe_io
from ansible_collections.kubegpu.fleet.plugins.module_utils._common.safe_io import (
    CommandTimeout, UnsafeInput, check_package_name, check_path, check_timeout, check_unit_name,
    read_bytes, read_text, run_command, try_read_text)


def test_regular_file_is_read_whole(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(b"a\xffb\n")
    assert read_bytes(str(p)) == b"a\xffb\n"
    assert read_text(str(p)) == u"a\ufffdb\n"


def test_missing_file(tmp_path):
    assert read_bytes(str(tmp_path / "nope"), missing_ok=True) is None
    with pytest.raises(OSError):
        read_bytes(str(tmp_path / "nope"))
    assert try_read_text(str(tmp_path / "nope")) == (None, None)


def test_fifo_is_refused_without_blocking(tmp_path):
    # Nobody ever opens the write side: a plain open() would block forever here.
    fifo = str(tmp_path / "fifo")
    os.mkfifo(fifo)
    with pytest.raises(UnsafeInput, match="is a FIFO"):
        read_bytes(fifo)
    text, why = try_read_text(fifo)
    assert text is None and "FIFO" in why


def test_socket_directory_and_device_are_refused(tmp_path):
    sock_path = str(tmp_path / "s")
    s = socket.socket(socket.AF_UNIX)
    try:
        s.bind(sock_path)
        with pytest.raises(UnsafeInput):
            read_bytes(sock_path)
    finally:
        s.close()
    with pytest.raises(UnsafeInput, match="regular file|directory"):
        read_bytes(str(tmp_path))
    with pytest.raises(UnsafeInput, match="character device"):
        read_bytes("/dev/zero")
    # Where a device is meant, it is read within the bound (/dev/zero never ends).
    with pytest.raises(UnsafeInput, match="more than"):
        read_bytes("/dev/zero", limit=4096, allow_char_device=True)
    assert read_bytes("/dev/null", allow_char_device=True) == b""


def test_symlink_loop_is_named(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    os.symlink(a, b)
    os.symlink(b, a)
    with pytest.raises(UnsafeInput, match="symlink loop"):
        read_bytes(a)


def test_oversized_file_is_an_error_never_a_silent_cut(tmp_path):
    p = tmp_path / "big"
    p.write_bytes(b"x" * 5000)
    with pytest.raises(UnsafeInput, match="5000 bytes"):
        read_bytes(str(p), limit=4096)
    assert len(read_bytes(str(p), limit=5000)) == 5000


def test_procfs_files_of_size_zero_are_bounded_by_what_is_read():
    assert os.stat("/proc/self/status").st_size == 0
    assert b"Pid:" in read_bytes("/proc/self/status")
    with pytest.raises(UnsafeInput, match="holds more than"):
        read_bytes("/proc/self/status", limit=16)


@pytest.mark.parametrize("value", [1e300, float("nan"), float("inf"), -1, "abc", None, [1],
                                   "1e309", 86401])
def test_timeouts_out_of_range_are_refused(value):
    with pytest.raises(UnsafeInput, match="timeout"):
        check_timeout(value)


def test_timeouts_in_range():
    assert check_timeout("2.5") == 2.5
    assert check_timeout(0) == 0.0


@pytest.mark.parametrize("name", ["kubelet", "kubelet.service", "snap.kubelet.daemon.service",
                                  "getty@tty1.service", "k3s-agent.service",
                                  "sys-devices-x\\x2dy.device"])
def test_unit_names_accepted(name):
    assert check_unit_name(name) == name


@pytest.mark.parametrize("name", ["*", "kube*", "kubelet?", "[k]ubelet", "-H", "--all", "a b",
                                  "", "kubelet;reboot", "kubelet\n", "x" * 300, None, 5, ".."])
def test_unit_names_refused(name):
    with pytest.raises(UnsafeInput, match="systemd unit name"):
        check_unit_name(name)


@pytest.mark.parametrize("good,bad", [("nvidia-driver-570", "-oAPT::x"),
                                      ("libnvidia-compute-570:amd64", "nvidia*"),
                                      ("kmod-nvidia-open-dkms", "a b")])
def test_package_names(good, bad):
    if ":" in good:  # arch-qualified names are the caller's business
        with pytest.raises(UnsafeInput):
            check_package_name(good)
    else:
        assert check_package_name(good) == good
    with pytest.raises(UnsafeInput, match="package name"):
        check_package_name(bad)


def test_paths():
    assert check_path("/var/lib/kubelet/config.yaml") == "/var/lib/kubelet/config.yaml"
    for bad in ("relative/x", "/a/../etc/shadow", "/a\0b", "", None):
        with pytest.raises(UnsafeInput):
            check_path(bad)


def test_command_output_and_status():
    r = run_command([sys.executable, "-c", "import sys; print('out'); "
                     "sys.stderr.write('err\\xff'); sys.exit(3)"], 60)
    assert (r.rc, r.stdout, r.text("stderr")) == (3, b"out\n", u"err\u00ff")


def test_command_is_never_a_shell(tmp_path):
    marker = tmp_path / "ran"
    r = run_command(["echo", "$(touch %s)" % marker, "*"], 60)
    assert r.stdout == b"$(touch %s) *\n" % str(marker).encode()
    assert not marker.exists()


def test_command_deadline_kills_the_whole_group(tmp_path):
    # The command forks a child that would outlive it and never closes stdout; the deadline is
    # what ends the wait (the test's only clock is the module's own deadline).
    script = ("import os, time\n"
              "pid = os.fork()\n"
              "if pid == 0:\n"
              "    open(%r, 'w').write(str(os.getpid()))\n"
              "    time.sleep(3600)\n"
              "time.sleep(3600)\n" % str(tmp_path / "child.pid"))
    with pytest.raises(CommandTimeout, match="did not finish within 0.5s"):
        run_command([sys.executable, "-c", script], 0.5)
    child = int((tmp_path / "child.pid").read_text())
    assert not alive(child)


def test_daemonised_grandchild_does_not_outlive_the_command(tmp_path):
    # Double fork + setsid, stdio closed: the classic daemon escapes the process group and the
    # pipes; the child subreaper still finds it.
    script = ("import os, sys, time\n"
              "if os.fork() == 0:\n"
              "    os.setsid()\n"
              "    if os.fork() == 0:\n"
              "        for fd in (0, 1, 2): os.close(fd)\n"
              "        open(%r, 'w').write(str(os.getpid()))\n"
              "        os.rename(%r, %r)\n"
              "        time.sleep(3600)\n"
              "    os._exit(0)\n"
              "os.wait()\n"
              "while not os.path.exists(%r): time.sleep(0.01)\n"
              "print('daemon started')\n"
              % ((str(tmp_path / "d.tmp"),) + (str(tmp_path / "d.tmp"), str(tmp_path / "d.pid"))
                 + (str(tmp_path / "d.pid"),)))
    r = run_command([sys.executable, "-c", script], 60)
    assert r.rc == 0 and r.stdout == b"daemon started\n"
    daemon = int((tmp_path / "d.pid").read_text())
    assert not alive(daemon)


def test_output_bound_kills_the_command():
    with pytest.raises(UnsafeInput, match="printed more than 1000 bytes"):
        run_command(["yes"], 60, limit=1000)


def test_bad_argv_and_missing_binary():
    with pytest.raises(UnsafeInput):
        run_command("ls -l", 5)
    with pytest.raises(UnsafeInput):
        run_command(["true"], 1e300)
    with pytest.raises(OSError):
        run_command(["/nonexistent/nvidia-smi"], 5)


def test_module_exports():
    assert set(safe_io.__all__) >= {"read_bytes", "run_command", "check_unit_name"}


@pytest.mark.parametrize("text, want", [
    ("0", True), ("0123456789", True), ("4242", True),
    ("", False), (" 1", False), ("1 ", False), ("-1", False), ("+1", False), ("1.0", False), ("1_0", False),
    ("\u00b2", False), ("1\u00b2", False), ("\u0663", False), ("\uff15\uff17\uff10", False),
    ("\u2167", False), (None, False), (b"12", False), (12, False),
])
def test_is_ascii_digits(text, want):
    """Only what int() takes as a plain ASCII number: '²'.isdigit() is True, int('²') raises."""
    assert safe_io.is_ascii_digits(text) is want
    if want:
        assert int(text) >= 0
