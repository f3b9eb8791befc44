# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Load KubeletConfiguration files on a node (node side, Python 3.8+).

A KubeletConfiguration is JSON or YAML. PyYAML is not guaranteed on managed nodes, so
``load_config_text`` uses, in order: ``json`` for text that starts with ``{``, PyYAML's safe
loader when it is importable, and otherwise ``parse_yaml_subset``: a small parser for the
block-YAML subset that kubelet configs use (kubeadm, EKS, GKE and hand-written ones):

* block mappings and sequences, including "indentless" sequences under a key
  (``key:`` followed by ``- item`` at the key's column, as Go's YAML encoder writes them);
* plain, single-quoted and double-quoted scalars on one line, plain scalars folded over
  several lines, literal (``|``) and folded (``>``) block scalars with chomping indicators;
* flow collections (``[a, b]``, ``{k: v}``, nested, and spanning lines);
* comments, ``---`` / ``...`` document markers and ``%`` directives.

Scalars resolve like PyYAML's SafeLoader (YAML 1.1): ``yes``/``on``/``true`` are booleans,
``~``/``null`` is None, ``0x1F``/``017``/``1_000``/``1:30`` are integers, ``1.5``/``.inf`` are
floats, ``1e3`` is a string. Differences from PyYAML, all outside what kubelet configs contain:
timestamps stay strings, and tags, complex (``?``) keys, multi-line quoted scalars and
multiple documents raise ``ConfigParseError`` with the line number instead of being parsed.

Anchors and aliases are refused by every reader (PyYAML included): a 361-byte "billion
laughs" file expands to millions of nodes, and a rewrite would write them all out. Nesting
deeper than ``MAX_DEPTH`` is refused too (no RecursionError). Nothing here raises anything
but ``ConfigParseError`` for bad input.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import json
import re

try:
    import yaml as _yaml
    HAS_PYYAML = True
except ImportError:  # PyYAML is optional on nodes
    _yaml = None
    HAS_PYYAML = False


class ConfigParseError(ValueError):
    """The text is not valid (or not supported) JSON/YAML; the message names the line."""

    def __init__(self, msg, line=None):
        self.line = line
        if line is not None:
            msg = "line %d: %s" % (line, msg)
        super(ConfigParseError, self).__init__(msg)


# YAML 1.1 implicit types, as PyYAML's resolver defines them.
_NULL_RE = re.compile(r"^(?:~|null|Null|NULL|)$")
_BOOL_RE = re.compile(r"^(?:yes|Yes|YES|no|No|NO|true|True|TRUE|false|False|FALSE"
                      r"|on|On|ON|off|Off|OFF)$")
_INT_RE = re.compile(r"""^(?:[-+]?0b[0-1_]+
                    |[-+]?0[0-7_]+
                    |[-+]?(?:0|[1-9][0-9_]*)
                    |[-+]?0x[0-9a-fA-F_]+
                    |[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+)$""", re.X)
_FLOAT_RE = re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?
                    |\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?
                    |[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*
                    |[-+]?\.(?:inf|Inf|INF)
                    |\.(?:nan|NaN|NAN))$""", re.X)
_TRUE = frozenset(["yes", "true", "on"])

_DQ_ESCAPES = {
    "0": "\0", "a": "\x07", "b": "\x08", "t": "\t", "\t": "\t", "n": "\n", "v": "\x0b",
    "f": "\x0c", "r": "\r", "e": "\x1b", " ": " ", '"': '"', "/": "/", "\\": "\\",
    "N": "\x85", "_": "\xa0", "L": "\u2028", "P": "\u2029",
}
_DQ_HEX = {"x": 2, "u": 4, "U": 8}
_FLOW_INDICATORS = ",[]{}"
ANCHORS_REFUSED = ("YAML anchors and aliases (&name, *name) are refused: an alias can expand a "
                   "small file into a huge one; write the values out")
# Far deeper than any KubeletConfiguration (4 levels); bounds the recursion of every reader.
MAX_DEPTH = 64


def resolve_plain(text, line=None):
    """Turn a plain (unquoted) scalar into None/bool/int/float/str like PyYAML's SafeLoader."""
    if _NULL_RE.match(text):
        return None
    if _BOOL_RE.match(text):
        return text.lower() in _TRUE
    if _INT_RE.match(text):
        return _construct_int(text, line)
    if _FLOAT_RE.match(text):
        return _construct_float(text)
    return text


def _sexagesimal(parts):
    value = 0
    for part in parts:
        value = value * 60 + part
    return value


def _construct_int(text, line):
    value = text.replace("_", "")
    sign = -1 if value[0] == "-" else 1
    if value[0] in "+-":
        value = value[1:]
    try:
        if value == "0":
            return 0
        if value.startswith("0b"):
            return sign * int(value[2:], 2)
        if value.startswith("0x"):
            return sign * int(value[2:], 16)
        if value[0] == "0":
            return sign * int(value, 8)
        if ":" in value:
            return sign * _sexagesimal([int(p) for p in value.split(":")])
        return sign * int(value)
    except ValueError:
        raise ConfigParseError("cannot read %r as an integer" % text, line)


def _construct_float(text):
    value = text.replace("_", "").lower()
    sign = -1 if value[0] == "-" else 1
    if value[0] in "+-":
        value = value[1:]
    if value == ".inf":
        return sign * float("inf")
    if value == ".nan":
        return float("nan")
    if ":" in value:
        parts = value.split(":")
        return sign * (_sexagesimal([int(p) for p in parts[:-1]]) * 60 + float(parts[-1]))
    return sign * float(value)


def _starts_token(text, i):
    """True when a quote at ``text[i]`` opens a quoted scalar (not one inside a plain one)."""
    if i == 0:
        return True
    prev = text[i - 1]
    if prev in "[{,":
        return True
    if prev not in " \t":
        return False
    before = text[:i].rstrip(" \t")
    return before == "" or before[-1] in ":-[{,?"


def _skip_quoted(text, i):
    """Index just past the quoted scalar opening at ``text[i]``, or None if unterminated."""
    quote = text[i]
    j = i + 1
    n = len(text)
    while j < n:
        c = text[j]
        if quote == "'":
            if c == "'":
                if j + 1 < n and text[j + 1] == "'":
                    j += 2
                    continue
                return j + 1
        else:
            if c == "\\":
                j += 2
                continue
            if c == '"':
                return j + 1
        j += 1
    return None


def strip_comment(text):
    """Remove a trailing ``# comment`` (a ``#`` at the start or after whitespace, outside quotes)."""
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c in "'\"" and _starts_token(text, i):
            end = _skip_quoted(text, i)
            if end is None:
                return text
            i = end
            continue
        if c == "#" and (i == 0 or text[i - 1] in " \t"):
            return text[:i]
        i += 1
    return text


def parse_quoted(text, i, line=None):
    """Parse the quoted scalar opening at ``text[i]``; return ``(value, index after it)``."""
    quote = text[i]
    out = []
    j = i + 1
    n = len(text)
    while j < n:
        c = text[j]
        if quote == "'":
            if c == "'":
                if j + 1 < n and text[j + 1] == "'":
                    out.append("'")
                    j += 2
                    continue
                return "".join(out), j + 1
            out.append(c)
            j += 1
            continue
        if c == '"':
            return "".join(out), j + 1
        if c == "\\":
            if j + 1 >= n:
                break
            esc = text[j + 1]
            if esc in _DQ_ESCAPES:
                out.append(_DQ_ESCAPES[esc])
                j += 2
                continue
            if esc in _DQ_HEX:
                width = _DQ_HEX[esc]
                digits = text[j + 2:j + 2 + width]
                if len(digits) != width or not re.match(r"^[0-9A-Fa-f]+$", digits):
                    raise ConfigParseError("bad escape \\%s%s in a double-quoted scalar"
                                           % (esc, digits), line)
                out.append(chr(int(digits, 16)))
                j += 2 + width
                continue
            raise ConfigParseError("unknown escape \\%s in a double-quoted scalar" % esc, line)
        out.append(c)
        j += 1
    raise ConfigParseError("unterminated %s-quoted scalar (quoted scalars spanning lines are not "
                           "supported without PyYAML)" % ("single" if quote == "'" else "double"),
                           line)


def _is_seq_item(text):
    return text == "-" or text.startswith("- ") or text.startswith("-\t")


def _plain_key_end(text):
    """Index of the ``:`` that ends a plain mapping key in ``text``, or -1."""
    if not text or text[0] in "[{&*!|>%@`'\"" or _is_seq_item(text):
        return -1
    i = 0
    n = len(text)
    while i < n:
        if text[i] == ":" and (i + 1 == n or text[i + 1] in " \t"):
            return i
        i += 1
    return -1


class _Line:
    __slots__ = ("index", "indent", "text")

    def __init__(self, index, indent, text):
        self.index = index
        self.indent = indent
        self.text = text

    @property
    def no(self):
        return self.index + 1


class _SubsetParser:
    def __init__(self, text):
        text = text.replace("\r\n", "\n").replace("\r", "\n")
        if text.startswith("\ufeff"):
            text = text[1:]
        self.raw = text.split("\n")
        self.pos = 0
        self.override = None  # (_Line) re-presenting the rest of a "- " line as a line
        self.end = len(self.raw)

    # -- line access ----------------------------------------------------------------------
    def _structural(self, index):
        if self.override is not None and self.override.index == index:
            return self.override
        line = self.raw[index]
        body = line.lstrip(" ")
        indent = len(line) - len(body)
        if body.startswith("\t"):
            rest = body.lstrip(" \t")
            if rest and not rest.startswith("#"):
                raise ConfigParseError("tab character used for indentation", index + 1)
            return None
        content = strip_comment(body).rstrip(" \t")
        if not content:
            return None
        return _Line(index, indent, content)

    def peek(self):
        index = self.pos
        while index < self.end:
            ln = self._structural(index)
            if ln is not None:
                self.pos = index
                return ln
            index += 1
        self.pos = self.end
        return None

    def consume(self, ln):
        if self.override is not None and self.override.index == ln.index:
            self.override = None
        self.pos = ln.index + 1

    # -- documents ------------------------------------------------------------------------
    def parse_document(self):
        self._document_start()
        root = self.peek()
        value = None
        if root is not None and not self._is_doc_marker(root):
            value = self.parse_node(root.indent, -1)
        trailing = self.peek()
        if trailing is not None:
            if trailing.indent == 0 and trailing.text == "...":
                self.consume(trailing)
                trailing = self.peek()
            if trailing is not None:
                if self._is_doc_marker(trailing):
                    raise ConfigParseError("more than one YAML document; a kubelet config file "
                                           "holds exactly one", trailing.no)
                raise ConfigParseError("unexpected content %r (check the indentation)"
                                       % trailing.text, trailing.no)
        return value

    @staticmethod
    def _is_doc_marker(ln):
        return ln.indent == 0 and (ln.text in ("---", "...") or ln.text.startswith("--- "))

    def _document_start(self):
        ln = self.peek()
        while ln is not None and ln.indent == 0 and ln.text.startswith("%"):
            self.consume(ln)
            ln = self.peek()
        if ln is not None and ln.indent == 0 and (ln.text == "---" or ln.text.startswith("--- ")):
            rest = ln.text[3:].lstrip(" ")
            if rest:
                self.override = _Line(ln.index, 4, rest)
            else:
                self.consume(ln)

    # -- block nodes ----------------------------------------------------------------------
    def parse_node(self, indent, parent_indent):
        ln = self.peek()
        if _is_seq_item(ln.text):
            return self.parse_seq(indent)
        if self._key_split(ln) is not None:
            return self.parse_map(indent)
        self.consume(ln)
        return self.parse_value(ln.text, ln, parent_indent, allow_indentless=False)

    def _key_split(self, ln):
        """(key, rest) when ``ln`` is a ``key: value`` line, else None."""
        text = ln.text
        if text.startswith("? ") or text == "?":
            raise ConfigParseError("complex mapping keys ('? ') are not supported without PyYAML",
                                   ln.no)
        if text[0] in "'\"":
            value, end = parse_quoted(text, 0, ln.no)
            rest = text[end:].lstrip(" \t")
            if rest == ":" or rest.startswith(": ") or rest.startswith(":\t"):
                return value, rest[1:]
            return None
        end = _plain_key_end(text)
        if end < 0:
            return None
        key_text = text[:end].rstrip(" \t")
        if key_text.startswith("<<"):
            raise ConfigParseError("merge keys ('<<') are not supported without PyYAML", ln.no)
        return resolve_plain(key_text, ln.no), text[end + 1:]

    def parse_map(self, indent):
        result = {}
        while True:
            ln = self.peek()
            if ln is None or ln.indent < indent or self._is_doc_marker(ln):
                return result
            if ln.indent > indent:
                raise ConfigParseError("unexpected indentation (expected a key at column %d)"
                                       % (indent + 1), ln.no)
            split = self._key_split(ln)
            if split is None:
                if _is_seq_item(ln.text):
                    raise ConfigParseError("a sequence item where a mapping key was expected",
                                           ln.no)
                raise ConfigParseError("expected 'key: value', found %r" % ln.text, ln.no)
            key, rest = split
            try:
                hash(key)
            except TypeError:
                raise ConfigParseError("unhashable mapping key", ln.no)
            self.consume(ln)
            result[key] = self.parse_value(rest, ln, indent, allow_indentless=True)

    def parse_seq(self, indent):
        result = []
        while True:
            ln = self.peek()
            if ln is None or ln.indent < indent or self._is_doc_marker(ln):
                return result
            if ln.indent > indent:
                raise ConfigParseError("unexpected indentation (expected '- ' at column %d)"
                                       % (indent + 1), ln.no)
            if not _is_seq_item(ln.text):
                return result
            rest = ln.text[1:]
            item = rest.lstrip(" \t")
            if not item:
                self.consume(ln)
                nxt = self.peek()
                if nxt is not None and nxt.indent > indent and not self._is_doc_marker(nxt):
                    result.append(self.parse_node(nxt.indent, indent))
                else:
                    result.append(None)
                continue
            if "\t" in rest[:len(rest) - len(item)]:
                raise ConfigParseError("tab character used for indentation", ln.no)
            sub_indent = indent + 1 + len(rest) - len(item)
            sub = _Line(ln.index, sub_indent, item)
            if _is_seq_item(item) or self._key_split(sub) is not None:
                self.override = sub
                result.append(self.parse_node(sub_indent, indent))
            else:
                self.consume(ln)
                result.append(self.parse_value(item, ln, indent, allow_indentless=False))

    # -- values ---------------------------------------------------------------------------
    def parse_value(self, rest, ln, parent_indent, allow_indentless):
        """The value after ``key:`` or ``- `` (``rest``); ``ln`` is already consumed."""
        rest = rest.strip(" \t")
        if not rest:
            nxt = self.peek()
            if nxt is None or self._is_doc_marker(nxt):
                return None
            if nxt.indent > parent_indent:
                return self.parse_node(nxt.indent, parent_indent)
            if allow_indentless and nxt.indent == parent_indent and _is_seq_item(nxt.text):
                return self.parse_seq(parent_indent)
            return None
        first = rest[0]
        if first in "|>":
            return self.parse_block_scalar(rest, ln, parent_indent)
        if first in "[{":
            return self.parse_flow(rest, ln)
        if first in "&*":
            raise ConfigParseError(ANCHORS_REFUSED, ln.no)
        if first == "!":
            raise ConfigParseError("tags are not supported without PyYAML", ln.no)
        if first in "'\"":
            value, end = parse_quoted(rest, 0, ln.no)
            tail = rest[end:].strip(" \t")
            if tail:
                raise ConfigParseError("unexpected %r after a quoted scalar" % tail, ln.no)
            return value
        if first in "@`%":
            raise ConfigParseError("a plain scalar cannot start with %r" % first, ln.no)
        if _is_seq_item(rest):
            raise ConfigParseError("sequence entries are not allowed here", ln.no)
        return self._plain(rest, ln, parent_indent)

    def _plain(self, text, ln, parent_indent):
        self._check_plain(text, ln)
        parts = [text]
        last = ln.index
        while True:
            nxt = self.peek()
            if nxt is None or nxt.indent <= parent_indent or self._is_doc_marker(nxt):
                break
            if any(self.raw[k].lstrip(" \t").startswith("#") for k in range(last + 1, nxt.index)):
                break  # a comment line ends a multi-line plain scalar
            self._check_plain(nxt.text, nxt)
            if _is_seq_item(nxt.text):
                raise ConfigParseError("sequence entries are not allowed here", nxt.no)
            blank = nxt.index - last - 1
            parts.append("\n" * blank if blank else " ")
            parts.append(nxt.text)
            self.consume(nxt)
            last = nxt.index
        return resolve_plain("".join(parts), ln.no)

    @staticmethod
    def _check_plain(text, ln):
        if _plain_key_end(text) >= 0 or ": " in text:
            raise ConfigParseError("mapping values are not allowed here", ln.no)

    def parse_block_scalar(self, header, ln, parent_indent):
        m = re.match(r"^([|>])([+-]?)([1-9]?)([+-]?)$", header)
        if not m or (m.group(2) and m.group(4)):
            raise ConfigParseError("bad block scalar header %r" % header, ln.no)
        style = m.group(1)
        chomp = m.group(2) or m.group(4)
        explicit = int(m.group(3)) if m.group(3) else None
        base = max(parent_indent, 0) if parent_indent >= 0 else 0
        content_indent = base + explicit if explicit else None
        lines = []
        index = ln.index + 1
        while index < self.end:
            raw = self.raw[index]
            if raw.strip(" ") == "":
                lines.append(raw)
                index += 1
                continue
            indent = len(raw) - len(raw.lstrip(" "))
            if content_indent is None:
                if indent <= parent_indent:
                    break
                content_indent = indent
            if indent < content_indent:
                break
            if indent == 0 and (raw.startswith("---") or raw.startswith("...")):
                break
            lines.append(raw)
            index += 1
        self.pos = index
        if content_indent is None:
            content_indent = parent_indent + 1
        body = [raw[content_indent:] if len(raw) > content_indent else "" for raw in lines]
        trailing = 0
        while body and body[-1] == "":
            body.pop()
            trailing += 1
        if style == "|":
            text = "\n".join(body)
        else:
            text = self._fold(body)
        if not body:
            return "\n" * trailing if chomp == "+" else ""
        if chomp == "-":
            return text
        if chomp == "+":
            return text + "\n" * (trailing + 1)
        return text + "\n"

    @staticmethod
    def _fold(body):
        out = []
        prev = None
        empties = 0
        for line in body:
            if line == "":
                empties += 1
                continue
            kind = "more" if line[0] in " \t" else "normal"
            if prev is None:
                out.append("\n" * empties)
            elif prev == "normal" and kind == "normal":
                out.append("\n" * empties if empties else " ")
            else:
                out.append("\n" * (empties + 1))
            out.append(line)
            prev = kind
            empties = 0
        return "".join(out)

    # -- flow collections -----------------------------------------------------------------
    def parse_flow(self, rest, ln):
        text = rest
        self.consume(ln)
        while not _flow_balanced(text):
            nxt = self.peek()
            if nxt is None:
                raise ConfigParseError("unterminated flow collection", ln.no)
            text = text + " " + nxt.text
            self.consume(nxt)
        value, end = _FlowParser(text, ln.no).parse()
        if text[end:].strip(" \t"):
            raise ConfigParseError("unexpected %r after a flow collection" % text[end:].strip(), ln.no)
        return value


def _flow_balanced(text):
    depth = 0
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c in "'\"" and _starts_token(text, i):
            end = _skip_quoted(text, i)
            if end is None:
                return True  # let the flow parser report the unterminated quote
            i = end
            continue
        if c in "[{":
            depth += 1
        elif c in "]}":
            depth -= 1
        i += 1
    return depth <= 0


class _FlowParser:
    def __init__(self, text, line):
        self.text = text
        self.line = line
        self.i = 0

    def error(self, msg):
        raise ConfigParseError(msg, self.line)

    def ws(self):
        while self.i < len(self.text) and self.text[self.i] in " \t":
            self.i += 1

    def peekc(self):
        self.ws()
        return self.text[self.i] if self.i < len(self.text) else ""

    def parse(self):
        return self.node(), self.i

    def node(self):
        c = self.peekc()
        if c == "[":
            return self.seq()
        if c == "{":
            return self.mapping()
        if c in "'\"":
            value, self.i = parse_quoted(self.text, self.i, self.line)
            return value
        if c in "&*":
            self.error(ANCHORS_REFUSED)
        if c == "!":
            self.error("tags are not supported without PyYAML")
        return self.plain()

    def plain(self):
        start = self.i
        n = len(self.text)
        while self.i < n:
            c = self.text[self.i]
            if c in _FLOW_INDICATORS:
                break
            if c == ":" and (self.i + 1 == n or self.text[self.i + 1] in " \t" + _FLOW_INDICATORS):
                break
            self.i += 1
        return resolve_plain(self.text[start:self.i].strip(" \t"), self.line)

    def _after_colon(self):
        """After a key: consume ``:`` and return the value (None when there is none)."""
        if self.peekc() != ":":
            return None, False
        self.i += 1
        if self.peekc() in (",", "]", "}", ""):
            return None, True
        return self.node(), True

    def seq(self):
        self.i += 1
        out = []
        while True:
            c = self.peekc()
            if c == "]":
                self.i += 1
                return out
            if c == "":
                self.error("unterminated flow sequence")
            item = self.node()
            value, is_pair = self._after_colon()
            if is_pair:
                item = {item: value}
            out.append(item)
            c = self.peekc()
            if c == ",":
                self.i += 1
            elif c != "]":
                self.error("expected ',' or ']' in a flow sequence, found %r" % c)

    def mapping(self):
        self.i += 1
        out = {}
        while True:
            c = self.peekc()
            if c == "}":
                self.i += 1
                return out
            if c == "":
                self.error("unterminated flow mapping")
            key = self.node()
            try:
                hash(key)
            except TypeError:
                self.error("unhashable mapping key in a flow mapping")
            value, _pair = self._after_colon()
            out[key] = value
            c = self.peekc()
            if c == ",":
                self.i += 1
            elif c != "}":
                self.error("expected ',' or '}' in a flow mapping, found %r" % c)


def parse_yaml_subset(text):
    """Parse one YAML document of the supported subset; raise ConfigParseError on anything else."""
    if not isinstance(text, str):
        raise ConfigParseError("expected text, got %s" % type(text).__name__)
    try:
        data = _SubsetParser(text).parse_document()
    except RecursionError:
        raise ConfigParseError("nested more deeply than this parser reads (limit %d levels)"
                               % MAX_DEPTH)
    check_depth(data)
    return data


def check_depth(data, limit=MAX_DEPTH):
    """Raise ConfigParseError when ``data`` nests more than ``limit`` levels (iterative)."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list)):
            if depth > limit:
                raise ConfigParseError("nested more than %d levels deep; not a "
                                       "KubeletConfiguration" % limit)
            items = value.values() if isinstance(value, dict) else value
            stack.extend((v, depth + 1) for v in items)


def _yaml_precheck(text, loader):
    """Walk PyYAML's event stream (linear in the text, nothing expanded): refuse anchors,
    aliases and nesting deeper than MAX_DEPTH before anything is constructed."""
    depth = 0
    for event in _yaml.parse(text, Loader=loader):
        if isinstance(event, _yaml.AliasEvent) or getattr(event, "anchor", None):
            mark = getattr(event, "start_mark", None)
            raise ConfigParseError(ANCHORS_REFUSED, mark.line + 1 if mark else None)
        if isinstance(event, (_yaml.MappingStartEvent, _yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                raise ConfigParseError("nested more than %d levels deep; not a "
                                       "KubeletConfiguration" % MAX_DEPTH)
        elif isinstance(event, (_yaml.MappingEndEvent, _yaml.SequenceEndEvent)):
            depth -= 1


def to_plain(data):
    """Make loaded data JSON-safe: dates/times become ISO strings, odd keys become strings."""
    if isinstance(data, dict):
        out = {}
        for key, value in data.items():
            if not isinstance(key, (str, int, float, bool)) and key is not None:
                key = to_plain(key)
                if not isinstance(key, str):
                    key = str(key)
            out[key] = to_plain(value)
        return out
    if isinstance(data, (list, tuple)):
        return [to_plain(v) for v in data]
    if isinstance(data, (datetime.date, datetime.datetime, datetime.time)):
        return data.isoformat()
    if isinstance(data, bytes):
        return data.decode("utf-8", "replace")
    if isinstance(data, (set, frozenset)):
        return sorted((to_plain(v) for v in data), key=repr)
    return data


def load_config_text(text, use_pyyaml=None):
    """Parse a kubelet config file's text; return ``(data, parser)``.

    ``parser`` is ``json``, ``pyyaml`` or ``fallback``. ``use_pyyaml`` None means "when
    importable". Raises ConfigParseError (never anything else) when the text does not parse.
    """
    if use_pyyaml is None:
        use_pyyaml = HAS_PYYAML
    if use_pyyaml and not HAS_PYYAML:
        raise ConfigParseError("PyYAML is not installed")
    if text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except RecursionError:
            raise ConfigParseError("nested more deeply than the JSON reader goes")
        except ValueError:
            pass  # JSON-looking YAML (flow mapping with comments, single quotes...)
        else:
            check_depth(data)
            return data, "json"
    if use_pyyaml:
        loader = getattr(_yaml, "CSafeLoader", None) or _yaml.SafeLoader
        try:
            _yaml_precheck(text, loader)
            data = _yaml.load(text, Loader=loader)  # nosec - a SafeLoader
        except ConfigParseError:
            raise
        except _yaml.YAMLError as e:
            raise ConfigParseError(" ".join(str(e).split()))
        except RecursionError:
            raise ConfigParseError("nested more deeply than PyYAML reads")
        except (ValueError, TypeError, OverflowError) as e:
            raise ConfigParseError("%s: %s" % (type(e).__name__, e))
        return to_plain(data), "pyyaml"
    return parse_yaml_subset(text), "fallback"
