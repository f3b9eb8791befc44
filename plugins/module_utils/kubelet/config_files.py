# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The files the kubelet loads its configuration from, read as the kubelet sees them.

Node side, Python 3.8+. The ``--config`` file and the ``--config-dir`` drop-ins are looked up
as named and through ``/proc/<pid>/root`` (the kubelet's mount namespace, for an audit that runs
in a container); every read is bounded and never blocks.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import os

from ansible_collections.kubegpu.fleet.plugins.module_utils._common import safe_io
from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet.config_yaml import parse_config

DEFAULT_CONFIG_PATH = "/var/lib/kubelet/config.yaml"
CONFIG_MAX_BYTES = 4 << 20


def kubelet_view_paths(path, proc_path=None, pid=None):
    """Where to read a path the kubelet names: as-is, then through ``<proc>/<pid>/root``.

    The second candidate reaches the kubelet's own mount namespace (an audit running in a
    container with the host's /proc). Relative paths are resolved against the kubelet's cwd.
    """
    candidates = []
    if pid is not None and proc_path and not os.path.isabs(path):
        try:
            cwd = os.readlink(os.path.join(proc_path, str(pid), "cwd"))
            path = os.path.join(cwd, path)
        except OSError:
            pass
    candidates.append(path)
    if pid is not None and proc_path and os.path.isabs(path):
        via_root = os.path.join(proc_path, str(pid), "root", path.lstrip("/"))
        if via_root != path:
            candidates.append(via_root)
    return path, candidates


def read_config_file(candidates):
    """Read the first readable candidate; return ``(text, read_path, error)``.

    Reads are bounded and never block (:func:`safe_io.read_bytes`): a FIFO, socket, device,
    directory, symlink loop or a file over ``CONFIG_MAX_BYTES`` is an error naming the path.
    When none can be read the error names the first candidate, with the most telling reason
    (permission denied over "does not exist").
    """
    failure = None
    for path in candidates:
        try:
            data = safe_io.read_bytes(path, CONFIG_MAX_BYTES)
        except safe_io.UnsafeInput as e:
            return None, path, str(e)
        except (IOError, OSError) as e:
            if failure is None or (failure[1].errno == errno.ENOENT and e.errno != errno.ENOENT):
                failure = (path, e)
            continue
        try:
            return data.decode("utf-8"), path, None
        except UnicodeDecodeError as e:
            return None, path, "%s is not UTF-8 text (byte %d)" % (path, e.start)
    if failure is None:
        return None, None, "no config file to read"
    path, e = failure
    if e.errno == errno.ENOENT:
        return None, None, "%s does not exist" % candidates[0]
    return None, None, "cannot read %s: %s" % (path, e.strerror or e)


def _walk_conf_files(directory, limit=256):
    """``*.conf`` files under ``directory`` in Go ``filepath.WalkDir`` order (lexical, depth first)."""
    out = []
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return out
    for name in names:
        path = os.path.join(directory, name)
        if os.path.isdir(path) and not os.path.islink(path):
            out.extend(_walk_conf_files(path, limit - len(out)))
        elif name.endswith(".conf") and os.path.isfile(path):
            out.append(path)
        if len(out) >= limit:
            break
    return out


def load_dropins(config_dir, proc_path, pid):
    """Parse the ``*.conf`` drop-ins of ``--config-dir`` in the order the kubelet applies them.

    Returns ``(list of (path as the kubelet sees it, data), errors)``.
    """
    errors = []
    config_dir, candidates = kubelet_view_paths(config_dir, proc_path, pid)
    directory = None
    for cand in candidates:
        if os.path.isdir(cand):
            directory = cand
            break
    if directory is None:
        return [], ["config-dir %s does not exist" % config_dir]
    if not os.access(directory, os.R_OK | os.X_OK):
        return [], ["cannot list config-dir %s: permission denied" % config_dir]
    out = []
    for path in _walk_conf_files(directory):
        shown = os.path.join(config_dir, os.path.relpath(path, directory))
        text, _read, error = read_config_file([path])
        if error:
            errors.append(error.replace(path, shown))
            continue
        data, _parser, error, _warnings = parse_config(text, shown)
        if error:
            errors.append(error)
            continue
        out.append((shown, data))
    return out, errors
