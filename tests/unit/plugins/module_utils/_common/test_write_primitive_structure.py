# -*- coding: utf-8 -*-
"""Every file the collection writes, backs up, chmods, chowns, renames or removes goes through
the one write primitive, plugins/module_utils/_common/fileutil.py (docs/development.md,
"Writing node files"): a structure test on the source with ``ast`` (nothing is imported).

Scanned: every .py under plugins/modules, plugins/module_utils, plugins/action,
plugins/plugin_utils and plugins/filter, except fileutil.py itself. A finding is a call of

* ``os``: rename, renames, replace, unlink, remove, rmdir, removedirs, chmod, fchmod, lchmod,
  chown, fchown, lchown, link, symlink, truncate, ftruncate, mkdir, makedirs, mkfifo, mknod,
  utime; ``os.open`` whose flags hold O_WRONLY, O_RDWR, O_CREAT, O_TRUNC or O_APPEND, or flags
  the checker cannot see (a parameter, a call's result); ``os.fdopen`` opened for writing;
* ``shutil``: move, rmtree, chown, copy and every copy* function, make_archive, unpack_archive;
* ``tempfile``: mkstemp, mkdtemp, NamedTemporaryFile, TemporaryFile, SpooledTemporaryFile,
  TemporaryDirectory;
* a method named like pathlib's writers (write_text, write_bytes, unlink, rename, chmod, lchmod,
  touch, mkdir, rmdir, symlink_to, hardlink_to, link_to) on anything, and any import of pathlib
  (``Path.replace`` cannot be told from ``str.replace`` on the source, so pathlib stays out);
* ``open``/``io.open``/``codecs.open`` with a mode holding w, a, x or + , or a mode the checker
  cannot see.

Names imported from those modules (``from os import unlink``), and the modules imported under
another name, count the same. ALLOWED lists the calls that write no file of the node or of the
controller's user and why, ALLOWED_FILES the files a maintainer runs outside Ansible; an entry
that no longer matches anything fails too, so the lists stay exact. The checker is shown to fail on small sources at the end.
"""
import ast
import os

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", "..", "..", ".."))
SCANNED = ("plugins/modules", "plugins/module_utils", "plugins/action", "plugins/plugin_utils", "plugins/filter")
PRIMITIVE = "plugins/module_utils/_common/fileutil.py"

OS_WRITERS = frozenset((
    "rename", "renames", "replace", "unlink", "remove", "rmdir", "removedirs", "chmod", "fchmod", "lchmod",
    "chown", "fchown", "lchown", "link", "symlink", "truncate", "ftruncate", "mkdir", "makedirs", "mkfifo",
    "mknod", "utime"))
SHUTIL_WRITERS = frozenset(("move", "rmtree", "chown", "make_archive", "unpack_archive"))
TEMPFILE_WRITERS = frozenset(("mkstemp", "mkdtemp", "NamedTemporaryFile", "TemporaryFile",
                              "SpooledTemporaryFile", "TemporaryDirectory"))
PATH_METHODS = frozenset(("write_text", "write_bytes", "unlink", "rename", "chmod", "lchmod", "touch", "mkdir",
                          "rmdir", "symlink_to", "hardlink_to", "link_to"))
WRITE_FLAGS = frozenset(("O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC", "O_APPEND"))
OPENERS = frozenset(("open", "io.open", "codecs.open"))
# What an os.open flags expression the checker reads may be made of (os.O_X | getattr(os, "O_Y", 0)).
FLAG_NODES = (ast.BinOp, ast.BitOr, ast.Attribute, ast.Name, ast.Load, ast.Call, ast.Constant)

# (file, finding) -> why it is not a write of a node file (or of the controller user's files).
ALLOWED = {
    ("plugins/module_utils/cgroup/probe.py", "os.open(path, flags): flags the checker cannot see"):
        "the device-cgroup probe opens /dev/nvidia* exactly as CUDA does (O_RDWR on an existing "
        "character device, never O_CREAT) to read the errno the device cgroup gives; nothing is written",
    ("plugins/module_utils/cgroup/probe.py", "os.open(procs, os.O_WRONLY)"):
        "the forked probe child writes its own pid into the probe cgroup's cgroup.procs, a cgroupfs "
        "control file, to move itself into it; no file is created or replaced",
    ("plugins/module_utils/gpu/probe.py", "os.open(os.devnull, os.O_RDWR)"):
        "a forked child's stdio on /dev/null",
    ("plugins/plugin_utils/rollout/slot.py", "os.open(os.devnull, os.O_RDWR)"):
        "the controller's Lease renewer daemon's stdio on /dev/null",
    ("plugins/plugin_utils/rollout/slot.py", "os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)"):
        "the controller user's private lock directory for the Lease renewer (<TMPDIR>/kubegpu-lease-<uid>, "
        "0700); spawn_renewer refuses it unless lstat shows it is this user's and 0700, before any file in it "
        "is made",
    ("plugins/plugin_utils/rollout/slot.py", "os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)"):
        "the renewer's empty flock(2) lock file (0600, O_NOFOLLOW) in that checked private directory; nothing "
        "is written to it",
    ("plugins/plugin_utils/rollout/slot.py", "os.unlink(path)"):
        "the renewer removes its own lock file from that private directory when it stops",
}


# file -> why every write in it is not one of a node file or made by Ansible: for files a maintainer
# runs outside Ansible only (none under the scanned directories: maintainer tools such as the CSAF
# importer live in scripts/). Such an entry must match something too.
ALLOWED_FILES = {}


def _dotted(node):
    """``a.b.c`` for a Name/Attribute chain, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _names_in(node):
    """Every identifier, attribute name and string constant in the expression ``node``."""
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Attribute):
            out.add(n.attr)
        elif isinstance(n, ast.Constant) and isinstance(n.value, str):
            out.add(n.value)
    return out


def _scopes(tree):
    """Map every node to the innermost function (or the module) holding it."""
    owner = {}

    def visit(node, scope):
        for child in ast.iter_child_nodes(node):
            owner[child] = scope
            visit(child, child if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) else scope)
    visit(tree, tree)
    return owner


def _assignments(scope, name):
    """The values assigned to ``name`` in ``scope`` (not in nested functions); None when ``name``
    is not assigned there (a parameter, a global, an import)."""
    values = []
    todo = list(ast.iter_child_nodes(scope))
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            values.append(node.value)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and isinstance(node.target, ast.Name) \
                and node.target.id == name and node.value is not None:
            values.append(node.value)
        todo.extend(ast.iter_child_nodes(node))
    return values or None


def _aliases(tree):
    """``local name -> canonical dotted name`` for imports of os, shutil, tempfile, io, codecs
    and pathlib anywhere in the file."""
    canon = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                canon[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                canon[a.asname or a.name] = "%s.%s" % (node.module, a.name)
    return canon


def _mode_of(call, position):
    """The mode argument of an open()-like call: the constant string, "" when absent (read),
    None when it is not a constant."""
    arg = call.args[position] if len(call.args) > position else None
    for kw in call.keywords:
        if kw.arg == "mode":
            arg = kw.value
    if arg is None:
        return ""
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    return None


def _writes_mode(mode):
    return mode is None or any(c in mode for c in "wax+")


def findings(source, name="<source>"):
    """``[(line, description)]`` of every write the primitive should make, in ``source``."""
    tree = ast.parse(source, name)
    canon = _aliases(tree)
    scope_of = _scopes(tree)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if any(m == "pathlib" or m.startswith("pathlib.") for m in mods):
                out.append((node.lineno, "imports pathlib"))
            continue
        if not isinstance(node, ast.Call):
            continue
        dotted = _dotted(node.func)
        if dotted is None:
            full = None
        else:
            head, _dot, rest = dotted.partition(".")
            full = canon.get(head, head) + ("." + rest if rest else "")
        text = _Text(source, node, dotted)
        module, _dot, func = (full or "").rpartition(".")
        if module == "os" and func in OS_WRITERS:
            out.append((node.lineno, text))
        elif module == "shutil" and (func in SHUTIL_WRITERS or func.startswith("copy")):
            out.append((node.lineno, text))
        elif module == "tempfile" and func in TEMPFILE_WRITERS:
            out.append((node.lineno, text))
        elif full == "os.open":
            flags = node.args[1] if len(node.args) > 1 else None
            for kw in node.keywords:
                if kw.arg == "flags":
                    flags = kw.value
            exprs = [flags] if flags is not None else []
            unseen = False
            if isinstance(flags, ast.Name):
                exprs = _assignments(scope_of[node], flags.id)
                if exprs is None:
                    unseen = True
                    exprs = []
            elif flags is not None and not all(isinstance(n, FLAG_NODES) for n in ast.walk(flags)):
                unseen = True
            names = set()
            for e in exprs:
                names |= _names_in(e)
            if unseen:
                out.append((node.lineno, "%s: flags the checker cannot see" % str(text)))
            elif names & WRITE_FLAGS:
                out.append((node.lineno, text))
        elif full == "os.fdopen" and _writes_mode(_mode_of(node, 1)):
            out.append((node.lineno, text))
        elif full in OPENERS and _writes_mode(_mode_of(node, 1)):
            out.append((node.lineno, text))
        elif isinstance(node.func, ast.Attribute) and node.func.attr in PATH_METHODS and module != "os":
            out.append((node.lineno, text))
    return sorted((line, str(what)) for line, what in out)


class _Text(object):
    """The call's source text, made only for a finding (get_source_segment is slow)."""

    def __init__(self, source, node, dotted):
        self.source, self.node, self.dotted = source, node, dotted

    def __str__(self):
        return " ".join((ast.get_source_segment(self.source, self.node) or self.dotted or "?").split())


def scanned_files():
    files = []
    for top in SCANNED:
        for root, _dirs, names in os.walk(os.path.join(REPO, top)):
            for n in names:
                if n.endswith(".py"):
                    rel = os.path.relpath(os.path.join(root, n), REPO)
                    if rel != PRIMITIVE:
                        files.append(rel)
    return sorted(files)


def all_findings():
    found = {}
    for rel in scanned_files():
        with open(os.path.join(REPO, rel), encoding="utf-8") as f:
            for line, what in findings(f.read(), rel):
                found.setdefault((rel, what), []).append(line)
    return found


def test_the_plugins_are_found():
    files = scanned_files()
    for rel in ("plugins/modules/toolkit_config.py", "plugins/module_utils/stack/config_file.py",
                "plugins/action/audit_report.py", "plugins/plugin_utils/k8s/client.py",
                "plugins/module_utils/checkpoint/sync.py"):
        assert rel in files
    assert len(files) > 60


def test_nothing_writes_a_file_but_the_primitive():
    found = all_findings()
    unexpected = ["%s:%s: %s" % (rel, ",".join(map(str, lines)), what)
                  for (rel, what), lines in sorted(found.items())
                  if (rel, what) not in ALLOWED and rel not in ALLOWED_FILES]
    assert unexpected == [], (
        "write, back up, chmod, chown, rename and remove files through "
        "plugins/module_utils/_common/fileutil.py (write_file, backup_file, remove_file, make_dirs, "
        "private_tempdir), not:\n" + "\n".join(unexpected))


def test_every_allowed_entry_still_matches():
    found = all_findings()
    stale = [key for key in ALLOWED if key not in found]
    stale += [rel for rel in ALLOWED_FILES if not any(r == rel for r, _w in found)]
    assert stale == [], "ALLOWED entries that match nothing any more (remove them): %s" % stale


# ------------------------------------------------------------------ the checker itself

@pytest.mark.parametrize("source, expected", [
    ("import os\nos.rename(a, b)\n", [(2, "os.rename(a, b)")]),
    ("import os\nos.replace(tmp, path)\n", [(2, "os.replace(tmp, path)")]),
    ("import os\nos.chmod(tmp, 0o644)\n", [(2, "os.chmod(tmp, 0o644)")]),
    ("import os\nos.lchown(p, 0, 0)\n", [(2, "os.lchown(p, 0, 0)")]),
    ("import os\nos.makedirs(d, exist_ok=True)\n", [(2, "os.makedirs(d, exist_ok=True)")]),
    ("import os as o\no.unlink(p)\n", [(2, "o.unlink(p)")]),
    ("from os import remove as rm\nrm(p)\n", [(2, "rm(p)")]),
    ("import shutil\nshutil.rmtree(d, ignore_errors=True)\n", [(2, "shutil.rmtree(d, ignore_errors=True)")]),
    ("import shutil\nshutil.copy2(a, b)\n", [(2, "shutil.copy2(a, b)")]),
    ("from shutil import move\nmove(a, b)\n", [(2, "move(a, b)")]),
    ("import tempfile\nfd, t = tempfile.mkstemp(dir=d)\n", [(2, "tempfile.mkstemp(dir=d)")]),
    ("from tempfile import NamedTemporaryFile\nNamedTemporaryFile('w')\n", [(2, "NamedTemporaryFile('w')")]),
    ("p.write_text('x')\n", [(1, "p.write_text('x')")]),
    ("p.unlink()\n", [(1, "p.unlink()")]),
    ("from pathlib import Path\n", [(1, "imports pathlib")]),
    ("with open(p, 'w') as f:\n    f.write(x)\n", [(1, "open(p, 'w')")]),
    ("open(p, mode='ab')\n", [(1, "open(p, mode='ab')")]),
    ("open(p, 'r+')\n", [(1, "open(p, 'r+')")]),
    ("open(p, m)\n", [(1, "open(p, m)")]),
    ("import io\nio.open(p, 'x')\n", [(2, "io.open(p, 'x')")]),
    ("import os\nos.fdopen(fd, 'wb')\n", [(2, "os.fdopen(fd, 'wb')")]),
    ("import os\nos.open(p, os.O_WRONLY | os.O_CREAT, 0o600)\n", [(2, "os.open(p, os.O_WRONLY | os.O_CREAT, 0o600)")]),
    ("import os\ndef f(p):\n    fl = os.O_RDONLY\n    fl |= getattr(os, 'O_TRUNC', 0)\n    return os.open(p, fl)\n",
     [(5, "os.open(p, fl)")]),
    ("import os\ndef f(p, fl):\n    return os.open(p, fl)\n", [(3, "os.open(p, fl): flags the checker cannot see")]),
])
def test_the_checker_finds_writes(source, expected):
    assert findings(source) == expected


@pytest.mark.parametrize("source", [
    "import os\nos.stat(p); os.lstat(p); os.listdir(d); os.readlink(p); os.path.exists(p)\n",
    "with open(p) as f:\n    f.read()\n",
    "open(p, 'rb'); open(p, mode='r', encoding='utf-8')\n",
    "import os\ndef f(p):\n    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, 'O_CLOEXEC', 0)\n    return os.open(p, flags)\n",
    "import os\nos.fdopen(fd, 'rb')\n",
    "import shutil\nshutil.which('apt-get')\n",
    "text.replace('a', 'b')\n",
    "from ansible_collections.kubegpu.fleet.plugins.module_utils._common import fileutil\n"
    "fileutil.write_file(p, data); fileutil.remove_file(p, data); fileutil.make_dirs(d)\n",
])
def test_the_checker_passes_reads_and_the_primitive(source):
    assert findings(source) == []


def test_the_checker_fails_on_the_writer_this_test_replaced():
    """audit_report's report writer as it was (mkstemp, chmod and replace by name)."""
    old = '''
import os
import tempfile


def _write(path, text):
    directory = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
'''
    assert [w for _l, w in findings(old)] == [
        'tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", dir=directory)',
        'os.fdopen(fd, "w", encoding="utf-8")', "os.chmod(tmp, 0o644)", "os.replace(tmp, path)", "os.unlink(tmp)"]
