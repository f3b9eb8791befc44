"""Process helpers shared by the tests."""


def alive(pid):
    """True while ``pid`` exists and is not a zombie (from ``/proc/<pid>/stat``)."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            data = f.read()
    except (IOError, OSError):
        return False
    return data[data.rfind(b")") + 2:].split()[0] not in (b"Z", b"X")
