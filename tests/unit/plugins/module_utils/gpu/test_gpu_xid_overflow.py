"""The Xid scan on a busy node: a kernel log larger than the 16 MiB bound still yields the Xid on
its newest line, from the journal, /dev/kmsg or dmesg, and says what it did not scan; a scan
that read nothing is a warning, never "no Xid". Fake journalctl/dmesg on PATH behave as the
real tools do (journalctl honours -r and -n); no timing asserts."""
import os
import stat

import pytest

from ansible_collections.kubegpu.fleet.tests.lib.procs import alive

from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu import xid as gpu_xid

REFERENCE = "/work/shared/reference/realworld-gpu-health/kmsg"

XID_79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1101234, name=nvc:[driver], GPU has fallen off the bus."
XID_48_OLD = ("NVRM: Xid (PCI:0000:18:00): 48, pid=1896, name=python, An uncorrectable double bit "
              "error (DBE) has been detected on GPU")
LOG_BYTES = 20 * 1000 * 1000   # 20 MB, above the 16 MiB bound
ORDINARY = ("eth0: renamed from veth%06x; cni0: port %d(veth%06x) entered forwarding state "
            "(ordinary kernel chatter of a busy node)")


def _script(path, body):
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def _lines(fmt, first, last, size=LOG_BYTES):
    """Kernel log text of about ``size`` bytes: ``first`` as its oldest line, ``last`` as its newest,
    ordinary lines between; ``fmt(i, message)`` writes one line (record ``i``, ``i`` / 1000 s)."""
    out = [fmt(0, first)]
    total = len(out[0])
    i = 1
    while total < size:
        line = fmt(i, ORDINARY % (i, i % 64, i))
        out.append(line)
        total += len(line)
        i += 1
    out.append(fmt(i, last))
    return "".join(out).encode()


def _short_monotonic(i, msg):
    return "[%6d.%06d] gpu-node-7 kernel: %s\n" % (i // 1000, (i % 1000) * 1000, msg)


def _dmesg(i, msg):
    return "[%6d.%06d] %s\n" % (i // 1000, (i % 1000) * 1000, msg)


def _kmsg(i, msg):
    return "%d,%d,%d,-;%s\n" % (4 if "Xid" in msg else 6, i, i * 1000, msg)


def _journalctl(bin_dir, log):
    """journalctl as the real one answers ``-k -b -r -n N``: the newest N records, newest first
    with -r (every other argument is accepted and ignored)."""
    return _script(bin_dir / "journalctl", '''n=
reverse=
while [ $# -gt 0 ]; do
  case "$1" in
    -r|--reverse) reverse=1 ;;
    -n) shift; n="$1" ;;
  esac
  shift
done
if [ -n "$n" ]; then src="tail -n $n %s"; else src="cat %s"; fi
if [ -n "$reverse" ]; then $src | tac; else $src; fi''' % (log, log))


@pytest.fixture
def bin_dir(tmp_path, monkeypatch):
    d = tmp_path / "bin"
    d.mkdir()
    # The fakes are found the way the real tools are: by name on PATH.
    monkeypatch.setenv("PATH", "%s%s%s" % (d, os.pathsep, os.environ.get("PATH", "")))
    return d


def _assert_newest_xid_79(rep, source):
    assert rep["source"] == source, rep["attempts"]
    assert rep["scanned"] is True
    gpu = rep["gpus"]["0000:3b:00.0"]
    assert gpu["counts"] == {"79": 1} and gpu["action"] == "reboot" and rep["action"] == "reboot"
    assert gpu["last"]["message"] == "GPU has fallen off the bus."
    # The oldest line (an Xid 48 of another GPU) is in the part the bound cut: said, not hidden.
    assert "0000:18:00.0" not in rep["gpus"]
    assert rep["truncated"] is True
    assert rep["warning"].startswith("kernel log truncated (%s): " % source)
    assert rep["warning"].endswith("Xid errors in the part not scanned cannot be ruled out")


def test_journal_of_20_mb_yields_the_xid_on_its_last_line(tmp_path, bin_dir):
    log = tmp_path / "kernel.log"
    data = _lines(_short_monotonic, XID_48_OLD, XID_79)
    log.write_bytes(data)
    _journalctl(bin_dir, log)
    rep = gpu_xid.xid_report(kmsg=None, dmesg=None)          # journalctl found on PATH
    _assert_newest_xid_79(rep, "journal")
    assert "exceed 16.0 MiB: only the newest" in rep["warning"]
    newest = data.count(b"\n") - 1
    assert rep["gpus"]["0000:3b:00.0"]["last"]["timestamp"] == pytest.approx(newest / 1000.0)
    assert rep["stats"]["lines"] > 50000


def test_kmsg_file_of_20_mb_yields_the_xid_on_its_last_record(tmp_path, bin_dir):
    kmsg = tmp_path / "kmsg"
    data = _lines(_kmsg, XID_48_OLD, XID_79)
    kmsg.write_bytes(data)
    rep = gpu_xid.xid_report(journalctl=None, kmsg=str(kmsg), dmesg=None)
    _assert_newest_xid_79(rep, "kmsg")
    # The tail is whole records: all but the bound (and the one record it cut) was dropped.
    dropped = rep["dropped_bytes"]
    assert len(data) - gpu_xid.MAX_BYTES <= dropped < len(data) - gpu_xid.MAX_BYTES + 200
    assert "the oldest %.1f MiB were not scanned" % (dropped / float(1 << 20)) in rep["warning"]


def test_dmesg_of_20_mb_yields_the_xid_on_its_last_line(tmp_path, bin_dir):
    log = tmp_path / "dmesg.out"
    data = _lines(_dmesg, XID_48_OLD, XID_79)
    log.write_bytes(data)
    _script(bin_dir / "dmesg", "cat %s" % log)
    rep = gpu_xid.xid_report(journalctl=None, kmsg=None)       # dmesg found on PATH
    _assert_newest_xid_79(rep, "dmesg")
    assert len(data) - gpu_xid.MAX_BYTES <= rep["dropped_bytes"] < len(data) - gpu_xid.MAX_BYTES + 200
    assert "dmesg printed more than 16.0 MiB: the oldest" in rep["warning"]


def test_whole_log_under_the_bound_is_no_warning_and_in_time_order(tmp_path, bin_dir):
    log = tmp_path / "kernel.log"
    older = XID_79.replace("79, pid=1101234, name=nvc:[driver], GPU has fallen off the bus.",
                           "13, pid=2001, name=python, Graphics SM Warp Exception")
    log.write_bytes(_lines(_short_monotonic, older, XID_79, size=100000))
    _journalctl(bin_dir, log)
    rep = gpu_xid.xid_report(kmsg=None, dmesg=None)
    assert rep["source"] == "journal" and rep["gpus"]["0000:3b:00.0"]["counts"] == {"13": 1, "79": 1}
    assert (rep["truncated"], rep["dropped_bytes"], rep["warning"]) == (False, 0, None)
    # journalctl -r printed it newest first; the scan puts it back: the last event is the newest.
    assert rep["gpus"]["0000:3b:00.0"]["last"]["xid"] == 79


def test_no_source_at_all_is_a_warning(tmp_path, monkeypatch):
    # A container: no journalctl, no dmesg on PATH, no /dev/kmsg.
    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    rep = gpu_xid.xid_report(kmsg=str(tmp_path / "dev-kmsg"))
    assert rep["scanned"] is False and rep["source"] is None and rep["events"] == 0
    assert [a["source"] for a in rep["attempts"]] == ["journal", "kmsg", "dmesg"]
    w = rep["warning"]
    assert w.startswith("no kernel log could be read (journal: journalctl: No such file")
    assert "kmsg: %s: No such file or directory" % (tmp_path / "dev-kmsg") in w
    assert "dmesg: dmesg: No such file" in w and w.endswith("): Xid errors cannot be ruled out")
    rep = gpu_xid.xid_report(journalctl=None, kmsg=None, dmesg=None)
    assert rep["warning"] == "no kernel log source is enabled: Xid errors cannot be ruled out"


def test_hung_journalctl_is_killed_and_the_scan_falls_back_or_warns(tmp_path, bin_dir):
    fifo = tmp_path / "never-written"
    os.mkfifo(str(fifo))
    pids = tmp_path / "pids"
    # Prints nothing, then blocks forever: killed at the deadline, dmesg answers instead.
    _script(bin_dir / "journalctl", 'echo $$ >> %s; exec cat "%s"' % (pids, fifo))
    _script(bin_dir / "dmesg", 'echo "[ 7.250000] %s"' % XID_79)
    rep = gpu_xid.xid_report(timeout=0.5, kmsg=str(fifo))
    assert rep["source"] == "dmesg" and rep["gpus"]["0000:3b:00.0"]["counts"] == {"79": 1}
    assert "did not finish within 0.5s; it was killed" in rep["attempts"][0]["error"]
    assert "a FIFO" in rep["attempts"][1]["error"] and rep["warning"] is None
    # Every source hangs or is refused: the warning names each.
    _script(bin_dir / "dmesg", 'echo $$ >> %s; exec cat "%s"' % (pids, fifo))
    rep = gpu_xid.xid_report(timeout=0.5, kmsg=str(fifo))
    assert rep["scanned"] is False
    assert rep["warning"].startswith("no kernel log could be read (journal: journalctl did not "
                                     "finish within 0.5s; it was killed, kmsg: ")
    assert "dmesg: dmesg did not finish within 0.5s" in rep["warning"]
    for pid in pids.read_text().split():
        assert not alive(int(pid))


def test_journalctl_that_hangs_after_the_newest_records_keeps_them(tmp_path, bin_dir):
    fifo = tmp_path / "never-written"
    os.mkfifo(str(fifo))
    # Newest first (-r): what it printed before hanging is the newest part of the log.
    _script(bin_dir / "journalctl", "printf '%s\\n%s\\n'; exec cat \"%s\""
            % (_short_monotonic(2000, XID_79).strip(), _short_monotonic(1000, XID_48_OLD).strip(), fifo))
    rep = gpu_xid.xid_report(timeout=0.5, kmsg=None, dmesg=None)
    assert rep["source"] == "journal" and rep["events"] == 2 and rep["truncated"] is True
    assert rep["gpus"]["0000:3b:00.0"]["last"]["timestamp"] == 2.0
    assert "journalctl did not finish within 0.5s: only the newest" in rep["warning"]


def test_kmsg_ring_buffer_that_lost_the_first_records_says_so(tmp_path):
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("6,4711,8000000,-;usb 1-1: new device\n4,4712,9000000,-;%s\n" % XID_79)
    rep = gpu_xid.xid_report(journalctl=None, kmsg=str(kmsg), dmesg=None)
    assert rep["events"] == 1 and rep["truncated"] is True and rep["dropped_bytes"] == 0
    assert "no longer holds the first 4711 records of this boot" in rep["warning"]
    kmsg.write_text("5,0,0,-;Linux version 6.8.0\n4,1,9000000,-;%s\n" % XID_79)
    rep = gpu_xid.xid_report(journalctl=None, kmsg=str(kmsg), dmesg=None)
    assert rep["events"] == 1 and rep["warning"] is None


def _reference(name):
    path = os.path.join(REFERENCE, name)
    if not os.path.isfile(path):
        pytest.skip("real-world kernel logs not available here (%s)" % path)
    with open(path, "rb") as f:
        return f.read().decode("utf-8").splitlines()


@pytest.mark.parametrize("source", ["journal", "kmsg", "dmesg"])
def test_real_records_at_the_end_of_a_20_mb_log(tmp_path, bin_dir, source):
    """Real Xid 79 records (an HGX node's dmesg, an RTX 5090's kernel log: see the reference
    folder's SOURCES.md) as the newest lines of a 20 MB log, through each source."""
    hgx = _reference("gpud-hgx-xid79-sxid20034-dmesg.log")        # "[6781741.548779] NVRM: ..."
    rtx = _reference("ogkm-1151-rtx5090-xid79-kernel.log")        # bare record texts
    body = [line.split("] ", 1)[1] for line in hgx] + rtx
    fmt = {"journal": _short_monotonic, "kmsg": _kmsg, "dmesg": _dmesg}[source]
    data = _lines(fmt, XID_48_OLD, body[0])
    start = data.count(b"\n") + 1
    data += "".join(fmt(start + i, msg) for i, msg in enumerate(body[1:])).encode()
    log = tmp_path / "log"
    log.write_bytes(data)
    if source == "journal":
        _journalctl(bin_dir, log)
        rep = gpu_xid.xid_report(kmsg=None, dmesg=None)
    elif source == "kmsg":
        rep = gpu_xid.xid_report(journalctl=None, kmsg=str(log), dmesg=None)
    else:
        _script(bin_dir / "dmesg", "cat %s" % log)
        rep = gpu_xid.xid_report(journalctl=None, kmsg=None)
    assert rep["source"] == source and rep["truncated"] is True
    assert sorted(rep["gpus"]) == ["0000:06:00.0", "0000:91:00.0"]
    assert rep["gpus"]["0000:91:00.0"]["last"]["pid"] == "<unknown>"
    assert rep["gpus"]["0000:06:00.0"]["last"]["message"] == "GPU has fallen off the bus."
    assert rep["action"] == "reboot"
