# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read and replace the NVIDIA Container Toolkit's ``config.toml`` (node side, Python 3.8+).

Nodes have no TOML writer, so the node never parses or edits the file: the
``kubegpu.fleet.toolkit_config`` action plugin reads it through :func:`read_config` (bounded,
regular files only), edits it on the controller with tomlkit, and hands the new text to
:func:`write_config`, together with the sha256 of the bytes its edit was based on.
:func:`write_config` reads the file again and refuses when it changed in between (someone ran
``nvidia-ctk config`` or edited it by hand): the edit would otherwise drop their change.
Both steps refuse a file root must not rewrite (another user owns or can write it, a directory
on its path, or a symlink leading to it: :func:`fileutil.unsafe_target`), so that check mode
fails as the write would. The write goes through :func:`fileutil.write_file`, the collection's
one write primitive: a 0600 byte-for-byte backup, then a temp file renamed over the file within
the held directory; a root-owned symlinked ``config.toml`` keeps its link and its target is
written.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import hashlib
import re

from ansible_collections.kubegpu.fleet.plugins.module_utils._common import fileutil
from ansible_collections.kubegpu.fleet.plugins.module_utils._common import safe_io
from ansible_collections.kubegpu.fleet.plugins.module_utils._common.node_probes import ProbeFailed

LIMIT = 1 << 20  # the packaged file is about 1.5 KiB
SHA256 = re.compile(r"^[0-9a-f]{64}$")


REFUSE = ("refusing to edit %s: %s; nothing was written. A file root rewrites must be writable by root only, "
          "or another user chooses what root writes: fix its ownership and mode (chown root:root, chmod go-w)")


NO_CONTENT = ("%s: settings are applied by the kubegpu.fleet.toolkit_config action plugin, which edits the file "
              "on the controller (tomlkit) and passes the new content; this run reached the module without it "
              "(the action plugin was bypassed), so nothing was changed")


class ConfigFileError(Exception):
    """The file cannot be read or replaced safely; the message names the path and the problem."""


def _refuse_unsafe(path):
    problem = fileutil.unsafe_target(path)
    if problem:
        raise ConfigFileError(REFUSE % (path, problem))


def sha256_hex(data):
    return hashlib.sha256(data).hexdigest()


def read_config(path, limit=LIMIT):
    """``(bytes, sha256 hex)`` of the regular file ``path``, read for an edit; :class:`ConfigFileError`
    when it is missing, not a regular file (a FIFO, a directory, a symlink loop), larger than
    ``limit``, unreadable, or a file root must not rewrite."""
    try:
        safe_io.check_path(path, "path")
        data = safe_io.read_bytes(path, limit, missing_ok=True)
    except (safe_io.UnsafeInput, OSError) as e:
        raise ConfigFileError("cannot read %s: %s" % (path, e))
    if data is None:
        raise ConfigFileError("%s does not exist: install nvidia-container-toolkit-base (it ships the file) "
                              "or name the right path" % path)
    _refuse_unsafe(path)
    return data, sha256_hex(data)


def write_config(path, content, expected_sha256, backup=True, check_mode=False, limit=LIMIT):
    """Replace ``path`` with ``content`` (text) when it still holds the bytes whose sha256 is
    ``expected_sha256``.

    Returns ``(changed, backup_file)``; ``backup_file`` is None without a backup or a change.
    Raises :class:`ConfigFileError` (and writes nothing) when the file changed since the edit
    was made, cannot be read, or when the backup or the write fails (the file keeps its content).
    """
    expected = (expected_sha256 or "").strip().lower()
    if not SHA256.match(expected):
        raise ConfigFileError("expected_sha256 must be the 64 hex digits of the sha256 of %s as the edit "
                              "read it, got %r" % (path, expected_sha256))
    new = content.encode("utf-8")
    if len(new) > limit:
        raise ConfigFileError("refusing to write %d bytes to %s: more than the %d bytes this module handles"
                              % (len(new), path, limit))
    data, current = read_config(path, limit)
    if current != expected:
        raise ConfigFileError("%s changed since it was read for the edit (sha256 now %s, the edit was based on "
                              "%s); nothing was written: run the task again to edit the new content"
                              % (path, current, expected))
    if new == data:
        return False, None
    if check_mode:
        return True, None
    try:
        return True, fileutil.write_file(path, new, backup=backup)
    except fileutil.FileOpError as e:
        raise ConfigFileError(str(e))


def toolkit_config_run(params, check_mode=False):
    """The body of kubegpu.fleet.toolkit_config: with ``read``, the file's bytes (base64) and
    sha256; else write ``content`` where the file still has ``expected_sha256``. Returns the
    module's result; raises ProbeFailed (with ``changed``/``path``) where the module fails."""
    path = params["path"]
    result = dict(changed=False, path=path)
    try:
        if params["read"]:
            data, digest = read_config(path)
            result.update(content_b64=base64.b64encode(data).decode("ascii"), sha256=digest)
            return result
        if params["content"] is None:
            raise ProbeFailed(NO_CONTENT % path, **result)
        changed, backup_file = write_config(path, params["content"], params["expected_sha256"],
                                            backup=params["backup"], check_mode=check_mode)
    except ConfigFileError as e:
        raise ProbeFailed(str(e), **result)
    result["changed"] = changed
    if backup_file:
        result["backup_file"] = backup_file
    return result
