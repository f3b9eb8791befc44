"""Host preparation the lab does before booting nodes (no root needed: files stand in for sysctls)."""
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "lab"))

from kubegpu_lab import hostenv  # noqa: E402


def test_inotify_limit_raised_never_lowered(tmp_path):
    knob = tmp_path / "max_user_instances"
    knob.write_text("128\n")
    hostenv.raise_inotify_limit(str(knob))
    assert int(knob.read_text()) == hostenv.INOTIFY_MIN
    knob.write_text("8192\n")
    hostenv.raise_inotify_limit(str(knob))
    assert int(knob.read_text()) == 8192


def test_unwritable_limit_is_a_warning_not_a_failure(tmp_path, capsys):
    hostenv.raise_inotify_limit(str(tmp_path / "missing" / "knob"))
    assert "could not raise fs.inotify.max_user_instances" in capsys.readouterr().err
