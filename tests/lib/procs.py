"""Process helpers shared by the tests."""


def alive(pid):
    """True while ``pid`` exists and is not a zombie (from ``/proc/<pid>/stat``)."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            data = f.read()
    except (IOError, OSError):
        return False
    return data[data.rfind(b")") + 2:].split()[0] not in (b"Z", b"X")


def python_for_uid(uid):
    """An interpreter that a process running as ``uid`` (through ``setpriv``) can start: this
    one, else the system's ``/usr/bin/python3``; None when neither starts. A pyenv Python under
    root's 0700 home cannot load its shared libpython as another uid (the system python3.11
    shares its libpython with the system; a pyenv 3.12 does not)."""
    import subprocess
    import sys
    for candidate in (sys.executable, "/usr/bin/python3"):
        try:
            rc = subprocess.run(["setpriv", "--reuid=%d" % uid, "--regid=%d" % uid, "--clear-groups",
                                 candidate, "-I", "-c", "import os"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60,
                                check=False).returncode
        except (OSError, subprocess.SubprocessError):
            continue
        if rc == 0:
            return candidate
    return None
