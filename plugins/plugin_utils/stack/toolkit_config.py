# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ``kubegpu.fleet.toolkit_config`` action: set keys of the NVIDIA Container Toolkit's
``config.toml``, edited on the controller.

Nodes have no TOML writer: the node module reads the file (bounded, regular files only), and
:func:`plan_edit` decides the new text here, with the style-preserving TOML library ``tomlkit``
(comments, key order, spacing and the rest of the file are kept). Then the result is parsed again
with the standard library's ``tomllib`` and must equal the file as it was with exactly the
requested values set; anything else is refused. The module writes the new text only when a
value changes and not in check mode, refusing when the file changed since it was read (sha256 of
the bytes the edit was based on). :data:`ACTION` runs these steps.

Refused with :class:`TomlEditError` (a message naming the key; nothing is written):

- a setting that is not ``table.key`` of bare keys, or whose value is not a boolean, a 64-bit
  integer or a string;
- a key whose table, or a table on its dotted path, is an inline table (``features = {...}``),
  an array of tables, or a value that is not a table (``disable-require.x``);
- a key whose current value is an array or a table;
- a file that is not UTF-8, not valid TOML, or larger than :data:`MAX_BYTES`;
- a file the parse bound refuses or stops (plugins/plugin_utils/parse_bound.py: the text comes
  from the node, so its shape is checked first and the whole edit - tomlkit parse, change,
  tomllib checks - runs under the bound's deadline).

A missing table or key is added. Keys that already hold their value (same type and value) are
left alone: when all do, the text is returned unchanged.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import re

from ansible_collections.kubegpu.fleet.plugins.plugin_utils import parse_bound
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.action import runner
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.stack.facts import shown

try:
    import tomlkit
    from tomlkit import items as _items
    from tomlkit.container import Container as _Container, OutOfOrderTableProxy as _Proxy
    from tomlkit.exceptions import TOMLKitError as _TOMLKitError
except ImportError:  # pragma: no cover - exercised by the message test through a subprocess
    tomlkit = None

MODULE = "kubegpu.fleet.toolkit_config"
INTERNAL = ("read", "content", "expected_sha256")  # options only this action sets on the module
ARGSPEC = {
    # str, not path: "~" and variables are the node's, the module (type path) expands them there
    "path": {"type": "str", "default": "/etc/nvidia-container-runtime/config.toml"},
    "settings": {"type": "dict", "required": True},
    "backup": {"type": "bool", "default": True},
}
MAX_BYTES = parse_bound.TOML_LIMITS.max_bytes
BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
BARE_LF = re.compile(r"(?<!\r)\n")
INT64 = (-(1 << 63), (1 << 63) - 1)
MISSING_TOMLKIT = ("kubegpu.fleet.toolkit_config edits config.toml on the controller with the Python library "
                   "tomlkit, which the controller's Python lacks: pip install tomlkit (it is in the collection's "
                   "requirements.txt; add it to the execution environment). Nothing was changed.")


class TomlEditError(ValueError):
    """The edit cannot be made safely; the message says which key or file and why."""


def missing_library():
    """The message for a controller without tomlkit, or None."""
    return MISSING_TOMLKIT if tomlkit is None else None


def _plain(key, value):
    """``value`` as a plain bool, int or str (Ansible hands task strings over as str subclasses,
    which the type-exact comparison after the edit would not take for str)."""
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        value = int(value)
        if not INT64[0] <= value <= INT64[1]:
            raise TomlEditError("setting %s: %d does not fit a TOML integer (64-bit)" % (key, value))
        return value
    raise TomlEditError("setting %s: cannot write %r (%s) as a TOML value; give a boolean, integer or string"
                        % (key, value, type(value).__name__))


def check_settings(settings):
    """``[(key, [part, ...], value), ...]`` sorted by key; :class:`TomlEditError` when one is bad."""
    if not isinstance(settings, dict) or not settings:
        raise TomlEditError("settings is empty: name at least one table.key to set")
    out = []
    for key in sorted(settings, key=str):
        if not isinstance(key, str) or "." not in key:
            raise TomlEditError("setting %r: give the key as table.key (features.disable-cuda-compat-lib-hook)"
                                % (key,))
        parts = key.split(".")
        if not all(BARE_KEY.match(p) for p in parts):
            raise TomlEditError("setting %r: only bare keys (letters, digits, - and _) separated by dots are "
                                "supported" % (key,))
        out.append((str.__str__(key), parts, _plain(key, settings[key])))
    return out


def render(value):
    """The TOML literal of a boolean, integer or string, as tomlkit writes it."""
    if tomlkit is None:
        raise TomlEditError(MISSING_TOMLKIT)
    return tomlkit.item(value).as_string()


def decode(data, path):
    """The file's bytes as text; :class:`TomlEditError` when too large or not UTF-8."""
    if len(data) > MAX_BYTES:
        raise TomlEditError("%s is %d bytes, more than the %d bytes this edits; refusing to edit it"
                            % (path, len(data), MAX_BYTES))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise TomlEditError("%s is not UTF-8 text (%s); refusing to edit it" % (path, e))


def _kind(item):
    if isinstance(item, _items.InlineTable):
        return "an inline table"
    if isinstance(item, _items.AoT):
        return "an array of tables"
    if isinstance(item, _items.Array):
        return "an array"
    if isinstance(item, (_items.Table, _Proxy, _Container)):
        return "a table"
    return "a %s" % type(item.unwrap() if hasattr(item, "unwrap") else item).__name__


def _literal(item, limit=80):
    """The value as written (tomlkit hands booleans out as plain ``bool``), cut to ``limit``."""
    if isinstance(item, _items.Item):
        text = item.as_string().strip()
    else:
        text = tomlkit.item(item).as_string()
    return shown(text, limit)


def _shown(item):
    """`` (literal)`` for a value a message quotes; tables are named, not quoted."""
    if isinstance(item, (_items.Table, _items.AoT, _Proxy, _Container)) and not isinstance(item, _items.InlineTable):
        return ""
    return " (%s)" % _literal(item)


def _is_table(item):
    return isinstance(item, (_items.Table, _Proxy, _Container)) and not isinstance(item, _items.InlineTable)


def _set(doc, key, parts, value):
    """Set ``parts`` to ``value`` in the tomlkit document; ``(changed, before literal or None)``."""
    node = doc
    created = None  # the outermost table this adds, and whether it sits inside another table
    for i, part in enumerate(parts[:-1]):
        where = ".".join(parts[:i + 1])
        if part not in node:
            node[part] = tomlkit.table()
            if created is None:
                created = (node[part], node is not doc)
            node = node[part]
            continue
        child = node[part]
        if not _is_table(child):
            extra = ("; write it as a [%s] table to edit it here" % where) \
                if isinstance(child, _items.InlineTable) else ""
            raise TomlEditError("cannot set %s: %s is %s%s, not a table%s"
                                % (key, where, _kind(child), _shown(child), extra))
        node = child
    leaf = parts[-1]
    if leaf not in node:
        node[leaf] = value
        if created is not None and created[1]:
            # tomlkit puts a sub-table right before the next table's header: keep a blank line
            created[0].add(tomlkit.nl())
        return True, None
    current = node[leaf]
    if isinstance(current, (_items.Array, _items.AoT, _items.InlineTable, _items.Table, _Proxy, _Container)):
        raise TomlEditError("cannot set %s: its value is %s%s; refusing to replace it with a scalar"
                            % (key, _kind(current), _shown(current)))
    before = _literal(current)
    old = current.unwrap() if isinstance(current, _items.Item) else current
    if type(old) is type(value) and old == value:
        return False, before
    node[leaf] = value
    return True, before


def _expected(original, parts_values):
    doc = original
    for parts, value in parts_values:
        node = doc
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return doc


def _equal(a, b):
    """Values equal with their types (True is not 1)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def edit(text, settings, path="config.toml", node=None):
    """``(new_text, changes)`` with each ``table.key`` of ``settings`` set in the TOML ``text``.

    ``changes``: ``[{"key", "before" (the literal as written, None when absent), "after"}]`` for
    the keys whose value changes. :class:`TomlEditError` when the edit cannot be made safely,
    or the parse bound refuses the text or stops the edit (``node`` is named in that message).
    """
    if tomlkit is None:
        raise TomlEditError(MISSING_TOMLKIT)
    wanted = check_settings(settings)
    try:
        # tomlkit spends up to a millisecond per deeply dotted line even on small files: the
        # edit always runs in the bound's child process (docs/development.md has the numbers)
        return parse_bound.toml_bounded(_edit, text, (wanted, path), path, node, passthrough=(TomlEditError,),
                                        in_process=None)
    except parse_bound.ParseError as e:
        raise TomlEditError("%s; refusing to edit it" % e)


def _edit(text, wanted, path):
    """:func:`edit` after the settings check; runs under the parse bound."""
    try:
        doc = tomlkit.parse(text)
    except (_TOMLKitError, ValueError) as e:
        raise TomlEditError("%s is not valid TOML (%s); refusing to edit it" % (path, e))
    changes = []
    for key, parts, value in wanted:
        try:
            changed, before = _set(doc, key, parts, value)
        except (_TOMLKitError, ValueError) as e:
            if isinstance(e, TomlEditError):
                raise TomlEditError("%s: %s" % (path, e))
            raise TomlEditError("%s: cannot set %s: %s" % (path, key, e))
        if changed:
            changes.append({"key": key, "before": before, "after": render(value)})
    if not changes:
        return text, []
    new = doc.as_string()
    if "\r\n" in text and not BARE_LF.search(text):
        new = BARE_LF.sub("\r\n", new)  # lines tomlkit adds end as the file's lines do
    _verify(text, new, wanted, path)
    return new, changes


def _verify(text, new, wanted, path):
    if len(new.encode("utf-8")) > MAX_BYTES:
        raise TomlEditError("%s: the edited file would be larger than %d bytes; left unchanged" % (path, MAX_BYTES))
    loads = _tomlkit_loads if parse_bound.missing_toml() else parse_bound.toml_loads
    try:
        after = loads(new)
    except ValueError as e:  # tomllib.TOMLDecodeError is a ValueError
        raise TomlEditError("%s: the edited file would not be valid TOML (%s); left unchanged" % (path, e))
    expected = _expected(loads(text), [(parts, value) for _key, parts, value in wanted])
    if not _equal(after, expected):
        bad = [key for key, parts, value in wanted if not _holds(after, parts, value)]
        raise TomlEditError("%s: the edited file %s; left unchanged" % (
            path, "does not hold %s" % ", ".join(bad) if bad else "changes more than the requested keys"))


def _tomlkit_loads(text):  # pragma: no cover - Python < 3.11 controllers without tomli
    return tomlkit.parse(text).unwrap()


def _holds(doc, parts, value):
    node = doc
    for part in parts:
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return _equal(node, value)


def plan_edit(data, settings, path="config.toml", node=None):
    """The edit of the file's bytes ``data``: a dict with ``before`` and ``after`` (text),
    ``changes`` and ``sha256`` (of ``data``, for the node module's concurrent-change check)."""
    text = decode(data, path)
    after, changes = edit(text, settings, path, node)
    return {"before": text, "after": after, "changes": changes, "sha256": hashlib.sha256(data).hexdigest()}


def _toolkit_config(task, _raw):
    """Read through the module, edit here, write through the module (not in check mode)."""
    internal = [k for k in INTERNAL if k in task.raw_args]
    if internal:  # checked before validation, which would only call them unsupported
        raise runner.ActionFailed("%s: %s set by the action plugin, not by a task"
                                  % (", ".join(internal), "is" if len(internal) == 1 else "are"))
    args = task.validate(ARGSPEC)
    path = args["path"]
    result = {"changed": False, "path": path, "changes": []}
    missing = missing_library()
    if missing:
        raise runner.ActionFailed(missing, **result)
    try:
        check_settings(args["settings"])
    except TomlEditError as e:
        raise runner.ActionFailed("%s: %s" % (path, e), **result)

    read = task.module(MODULE, dict(args, read=True))
    if read.get("failed") or "content_b64" not in read:
        read.pop("invocation", None)
        result.update(read)
        result.setdefault("msg", "%s: the module returned no content" % path)
        result["failed"] = True
        return result
    try:
        data = base64.b64decode(read["content_b64"], validate=True)
        plan = plan_edit(data, args["settings"], path, task.hostname)
    except (binascii.Error, ValueError, TypeError) as e:
        raise runner.ActionFailed(str(e) if isinstance(e, TomlEditError)
                                  else "%s: the module returned undecodable content (%s)" % (path, e), **result)
    result["changes"] = plan["changes"]
    if task.diff:
        result["diff"] = {"before": plan["before"], "after": plan["after"],
                          "before_header": path, "after_header": path}
    if not plan["changes"]:
        return result
    result["changed"] = True
    if task.check_mode:
        return result
    write = task.module(MODULE, dict(args, content=plan["after"], expected_sha256=plan["sha256"]))
    write.pop("invocation", None)
    if write.get("failed"):
        result.update(write)
        result["changed"] = False
        return result
    result["changed"] = bool(write.get("changed"))
    for key in ("backup_file", "warnings", "deprecations"):
        if key in write:
            result[key] = write[key]
    return result


# validated inside, after the check for the options only this action may set
ACTION = runner.Action(None, _toolkit_config)
