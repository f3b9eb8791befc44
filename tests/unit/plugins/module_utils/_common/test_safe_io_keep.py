"""safe_io for logs larger than their bound: run_command(keep="head"/"tail") and read_tail keep
the newest part, whole lines, and say what they cut. Real processes, files and devices; no
timing asserts (a deadline only ends commands that never would)."""
import os
import sys

import pytest

from ansible_collections.kubegpu.fleet.tests.lib.procs import alive

from ansible_collections.kubegpu.fleet.plugins.module_utils._common.safe_io import (
    CommandTimeout, UnsafeInput, read_tail, run_command)

PY = sys.executable


def _numbered(n, width=20):
    """Lines "line 000001 xxxx\\n" ... of ``width`` bytes each."""
    return b"".join(b"line %06d %s\n" % (i, b"x" * (width - 13)) for i in range(1, n + 1))


def test_tail_keeps_the_newest_whole_lines_and_counts_the_rest():
    # 10,000 lines of 20 bytes printed in odd-sized writes; 1,010 bytes kept at most.
    script = ("import sys\n"
              "data = b''.join(b'line %06d ' % i + b'x' * 7 + b'\\n' for i in range(1, 10001))\n"
              "for i in range(0, len(data), 4099):\n"
              "    sys.stdout.buffer.write(data[i:i + 4099]); sys.stdout.flush()\n")
    r = run_command([PY, "-c", script], 60, limit=1010, keep="tail")
    assert r.rc == 0 and r.truncated is True
    # 1,010 bytes end mid-line at the front: the partial line goes, 50 whole lines stay.
    assert r.stdout == _numbered(10000)[-1000:] and r.stdout.startswith(b"line 009951 ")
    assert r.dropped == 200000 - 1000


def test_tail_that_starts_on_a_line_boundary_keeps_that_line():
    r = run_command([PY, "-c", "import sys; sys.stdout.buffer.write(%r)" % _numbered(100)], 60,
                    limit=200, keep="tail")
    assert r.stdout == _numbered(100)[-200:] and r.dropped == 2000 - 200


def test_tail_under_the_bound_is_whole_and_not_truncated():
    r = run_command([PY, "-c", "print('a'); print('b')"], 60, limit=1000, keep="tail")
    assert (r.stdout, r.truncated, r.dropped) == (b"a\nb\n", False, 0)


def test_head_stops_the_command_once_full():
    # `yes` never ends: the bound is what stops it (no deadline reached, no error).
    r = run_command(["yes", "record"], 60, limit=1001, keep="head")
    assert r.truncated is True and r.rc is not None
    assert r.stdout == b"record\n" * 143 and r.dropped > 0  # 1001 // 7 whole lines


def test_head_keeps_what_came_before_the_deadline(tmp_path):
    fifo = str(tmp_path / "never-written")
    os.mkfifo(fifo)
    pidfile = tmp_path / "pid"
    body = ("echo $$ > %s; printf 'newest\\nolder\\nold'; exec cat %s" % (pidfile, fifo))
    with pytest.raises(CommandTimeout, match="did not finish within 0.5s") as e:
        run_command(["sh", "-c", body], 0.5, limit=1 << 20, keep="head")
    res = e.value.result
    assert res.rc is None and res.truncated is True
    assert res.stdout == b"newest\nolder\n"  # the partial last line is not kept
    assert not alive(int(pidfile.read_text()))


def test_default_mode_is_unchanged():
    with pytest.raises(UnsafeInput, match="printed more than 1000 bytes"):
        run_command(["yes"], 60, limit=1000)
    with pytest.raises(UnsafeInput, match="keep must be"):
        run_command(["true"], 5, keep="middle")
    r = run_command(["echo", "x"], 60)
    assert (r.stdout, r.truncated, r.dropped) == (b"x\n", False, 0)


def test_read_tail_of_a_file_larger_than_the_bound(tmp_path):
    p = tmp_path / "log"
    p.write_bytes(_numbered(1000))                      # 20,000 bytes
    t = read_tail(str(p), limit=1010)
    assert t.data == _numbered(1000)[-1000:] and t.dropped == 19000 and t.truncated
    t = read_tail(str(p), limit=1000)                   # the cut falls on a line boundary
    assert t.data == _numbered(1000)[-1000:] and t.dropped == 19000
    t = read_tail(str(p), limit=20000)
    assert t.data == _numbered(1000) and t.dropped == 0 and not t.truncated
    # One line longer than the bound: its tail is all there is, kept as it is.
    p.write_bytes(b"y" * 5000)
    t = read_tail(str(p), limit=100)
    assert t.data == b"y" * 100 and t.dropped == 4900


def test_read_tail_refuses_what_read_bytes_refuses(tmp_path):
    fifo = str(tmp_path / "fifo")
    os.mkfifo(fifo)
    with pytest.raises(UnsafeInput, match="is a FIFO"):
        read_tail(fifo, allow_char_device=True)
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    os.symlink(a, b)
    os.symlink(b, a)
    with pytest.raises(UnsafeInput, match="symlink loop"):
        read_tail(a)
    with pytest.raises(UnsafeInput, match="a character device"):
        read_tail("/dev/null")
    with pytest.raises(OSError):
        read_tail(str(tmp_path / "missing"))


def test_read_tail_character_devices():
    assert read_tail("/dev/null", allow_char_device=True).data == b""
    # A device that never runs dry: the deadline ends the read, with an error (not the newest).
    with pytest.raises(UnsafeInput, match="still reading after 0.2s"):
        read_tail("/dev/zero", limit=4096, timeout=0.2, allow_char_device=True)


def test_read_tail_of_the_real_kmsg():
    try:
        t = read_tail("/dev/kmsg", limit=1 << 20, allow_char_device=True)
    except (OSError, UnsafeInput) as e:
        pytest.skip("/dev/kmsg is not readable here: %s" % e)
    if not t.data:
        pytest.skip("/dev/kmsg holds no records here")
    first = t.data.split(b"\n", 1)[0]
    prio_seq = first.split(b";", 1)[0].split(b",")
    assert len(prio_seq) >= 4 and prio_seq[0].isdigit() and prio_seq[1].isdigit(), first
    assert t.data.endswith(b"\n")
