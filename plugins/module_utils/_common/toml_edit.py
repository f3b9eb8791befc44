# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Set one scalar key of a TOML file in place (node side, Python 3.8+, standard library only).

Nodes have no TOML writer (``tomllib`` reads only, from Python 3.11; ``tomlkit`` is not on
them), and a round trip through a parser would drop the operator's comments and layout. So this
edits exactly one line, for the NVIDIA Container Toolkit's ``config.toml``, where it is used:

- ``[table]`` headers select a table (``[a.b]`` too); ``key = value`` under the wanted table, or
  a dotted ``table.key = value`` at the top level, is the key. A matching line keeps its
  indentation, spacing and trailing comment; only the value is replaced.
- A missing key is added after the last key line of its table; a missing table is appended.
- Refused (``TomlEditError``, file untouched): multi-line strings anywhere in the file (lines in
  them cannot be told from keys without a full parser), the table defined as an inline table
  (``features = {...}``), the key defined twice, keys whose name needs quoting, a current value
  that is not a one-line scalar (an array or inline table spanning lines).
- Values: booleans, integers and strings (written as basic strings with escapes).

Where the node's Python has ``tomllib`` the result is parsed again and must hold the value.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

try:
    import tomllib as _toml  # Python 3.11+
except ImportError:  # pragma: no cover - older node Pythons: no re-parse
    _toml = None

BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
HEADER = re.compile(r"^\s*\[\s*([A-Za-z0-9_.\s\"-]+?)\s*\]\s*(#.*)?$")
ARRAY_HEADER = re.compile(r"^\s*\[\[")
SCALAR = re.compile(r'^(true|false|[+-]?\d[\d_]*|"([^"\\]|\\.)*"|\'[^\']*\')$')


class TomlEditError(ValueError):
    """The edit cannot be made safely; the message says why."""


def render(value):
    """A TOML literal for a bool, int or str."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        out = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
        return '"%s"' % out
    raise TomlEditError("cannot write %r as a TOML value (a boolean, integer or string)" % (value,))


def _norm_table(text):
    return ".".join(part.strip().strip('"') for part in text.split("."))


def _key_line(key):
    return re.compile(r'^(?P<pre>\s*"?%s"?\s*=\s*)(?P<value>.*?)(?P<post>\s*(#.*)?)$' % re.escape(key))


def set_key(text, dotted, value):
    """Return ``(new_text, changed, old_value_text)`` with ``table.key`` set to ``value``.

    ``old_value_text`` is the value as written before (None when the key was absent).
    """
    if "." not in dotted:
        raise TomlEditError("setting %r: give the key as table.key (features.disable-cuda-compat-lib-hook)" % dotted)
    table, key = dotted.rsplit(".", 1)
    if not all(BARE_KEY.match(p) for p in table.split(".")) or not BARE_KEY.match(key):
        raise TomlEditError("setting %r: only bare keys (letters, digits, - and _) are supported" % dotted)
    literal = render(value)
    if '"""' in text or "'''" in text:
        raise TomlEditError("the file has multi-line strings; refusing a line edit without a full TOML parser")
    lines = text.splitlines(True)
    current = ""  # "" = top level; None = an array-of-tables section
    in_table = False
    table_seen = False
    last_in_table = None
    header_at = None
    hits = []
    top_dotted = _key_line(dotted)
    in_key = _key_line(key)
    inline = re.compile(r"^\s*%s\s*=\s*\{" % re.escape(table.split(".")[0]))
    for i, line in enumerate(lines):
        body = line.rstrip("\r\n")
        if ARRAY_HEADER.match(body):
            current, in_table = None, False
            continue
        m = HEADER.match(body)
        if m:
            current = _norm_table(m.group(1))
            in_table = current == table
            if in_table:
                if table_seen:
                    raise TomlEditError("table [%s] is defined twice" % table)
                table_seen, header_at, last_in_table = True, i, i
            continue
        if current == "":
            if inline.match(body):
                raise TomlEditError("%s is an inline table (%s); refusing to edit it line by line"
                                    % (table.split(".")[0], body.strip()))
            km = top_dotted.match(body)
            if km:
                hits.append((i, km))
            continue
        if in_table and body.strip() and not body.lstrip().startswith("#"):
            last_in_table = i
            km = in_key.match(body)
            if km:
                hits.append((i, km))
    if len(hits) > 1:
        raise TomlEditError("%s is set %d times in the file" % (dotted, len(hits)))
    newline = "\r\n" if text.endswith("\r\n") else "\n"
    if hits:
        i, km = hits[0]
        old = km.group("value").strip()
        if not SCALAR.match(old):
            raise TomlEditError("%s is set to %s, not a one-line boolean, integer or string; refusing to "
                                "replace it" % (dotted, old))
        if old == literal:
            return text, False, old
        ending = lines[i][len(lines[i].rstrip("\r\n")):]
        lines[i] = km.group("pre") + literal + km.group("post") + ending
        new = "".join(lines)
    else:
        old = None
        entry = "%s = %s%s" % (key, literal, newline)
        if table_seen:
            at = (last_in_table if last_in_table is not None else header_at) + 1
            lines.insert(at, entry)
            new = "".join(lines)
        else:
            sep = "" if not text or text.endswith("\n") else newline
            new = "%s%s%s[%s]%s%s" % (text, sep, newline if text.strip() else "", table, newline, entry)
    _check(new, table, key, value)
    return new, True, old


def _check(new, table, key, value):
    if _toml is None:
        return
    try:
        doc = _toml.loads(new)
    except ValueError as e:  # tomllib.TOMLDecodeError is a ValueError
        raise TomlEditError("the edited file would not be valid TOML (%s); left unchanged" % e)
    node = doc
    for part in table.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    if not isinstance(node, dict) or node.get(key) != value:
        raise TomlEditError("the edited file does not hold %s.%s = %s; left unchanged" % (table, key, render(value)))
