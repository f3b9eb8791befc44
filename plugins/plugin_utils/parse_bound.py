# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one way controller code parses a document that came from a node.

A node is not trusted: a compromised or broken node can hand the controller any bytes it likes
(``config.toml`` text from the stack probe or the toolkit_config read, a Node annotation).
Parsers are not linear on every input (``tomllib`` is quadratic in the parts of one dotted
key: a 20 KB key takes a second, 256 KiB minutes; ``tomlkit`` spends about a millisecond per
deeply dotted line), so every parse of node data goes through this module:

1. **A shape check before parsing** (:func:`check_toml_shape`, :func:`load_json`): one linear
   pass, no parser, over the text's size, lines, longest line, dotted-key parts and length,
   bracket/brace nesting and the number of keys and tables, against :data:`TOML_LIMITS`
   (generous for real files: NVIDIA's packaged config.toml is 1.2 KiB, 42 lines, keys of at
   most 3 parts). A refused shape is a :class:`ShapeError` naming the line and the limit.
2. **A wall-clock bound around the parse** (:func:`run_bounded`): the parse runs in a forked
   child process that sends its result back through a pipe (pickle, at most
   :data:`MAX_RESULT_BYTES`, unpickled with only plain types and ``datetime`` allowed) and is
   killed with SIGKILL at the deadline (:data:`DEADLINE_S`), so a runaway parser - pure Python
   or C - costs the controller at most that much, and the caller gets a :class:`ParseTimeout`.
   Input whose shape the check proves small and flat (:data:`IN_PROCESS`: the real files) is
   parsed in the calling process: a fork costs more than such a parse (docs/development.md,
   "Parsing node data on the controller", has the measured numbers).

:func:`load_toml` (the stack facts) and :func:`toml_bounded` (the whole tomlkit edit of
toolkit_config) are the TOML entry points, :func:`load_json` the JSON one (linear C parser:
size and nesting checks, parsed in process). Every failure is a :class:`ParseError` (a
``ValueError``) whose message says what was refused and why; nothing else escapes.

tests/unit/plugins/plugin_utils/test_parse_bound.py fails when controller code imports a
parser anywhere else.
"""
from __future__ import annotations

import collections
import datetime
import io
import json
import os
import pickle
import re
import select
import signal
import time

try:
    import tomllib as _toml
except ImportError:  # pragma: no cover - Python < 3.11 controllers
    try:
        import tomli as _toml
    except ImportError:
        _toml = None

Limits = collections.namedtuple("Limits", "max_bytes max_lines max_line max_key_parts max_key_len max_nesting "
                                "max_keys max_tables")

# config.toml from a node. The node probe reads at most 256 KiB (module_utils/stack/facts.py).
TOML_LIMITS = Limits(max_bytes=256 << 10, max_lines=16384, max_line=16384, max_key_parts=8, max_key_len=256,
                     max_nesting=32, max_keys=8192, max_tables=2048)
# load_toml parses in the calling process (no fork) when the text is within all of these: the
# worst tomllib parse measured within them (3.9 ms) is about the cost of a fork (2-4 ms), a real
# config.toml's 0.2 ms. Edits always fork: tomlkit is slow even on small hostile texts.
IN_PROCESS = Limits(max_bytes=16 << 10, max_lines=512, max_line=1024, max_key_parts=4, max_key_len=128,
                    max_nesting=8, max_keys=512, max_tables=128)
DEADLINE_S = 2.0
MAX_RESULT_BYTES = 8 << 20
JSON_MAX_BYTES = 256 << 10
JSON_MAX_NESTING = 64


class ParseError(ValueError):
    """Node data that was not parsed: refused by the shape check, stopped at the deadline, or
    invalid. The message says which and why."""


class ShapeError(ParseError):
    """The text's size or shape exceeds a limit; nothing was parsed."""


class ParseTimeout(ParseError):
    """The parse did not finish within the deadline; its process was killed (``pid``)."""

    def __init__(self, msg, pid=None):
        super(ParseTimeout, self).__init__(msg)
        self.pid = pid


Shape = collections.namedtuple("Shape", "bytes lines max_line max_key_parts max_key_len max_nesting keys tables")


# --------------------------------------------------------------------------- shape check

_TOML_SIGNIFICANT = re.compile(r"[\"'#\[\]{}=\n.,]")
_JSON_SIGNIFICANT = re.compile(r"[\"\[\]{}]")


def _string_end(text, i):
    """The index after the TOML string starting at ``i`` (a quote). An unterminated
    single-line string ends at its line's end, a multi-line one at the end of the text: the
    parser reports the error, the check only must not miscount."""
    q = text[i]
    n = len(text)
    if text.startswith(q * 3, i):
        k = i + 3
        while True:
            k = text.find(q * 3, k)
            if k < 0:
                return n
            if q == '"' and _escaped(text, k, i + 3):
                k += 1
                continue
            k += 3
            extra = 0
            while extra < 2 and k < n and text[k] == q:  # """a"""" ends with a quote in the string
                k += 1
                extra += 1
            return k
    k = i + 1
    while True:
        end = text.find(q, k)
        nl = text.find("\n", k)
        if end < 0 or (0 <= nl < end):
            return nl if nl >= 0 else n
        if q == '"' and _escaped(text, end, i + 1):
            k = end + 1
            continue
        return end + 1


def _escaped(text, k, start):
    """Whether the quote at ``k`` is escaped (an odd run of backslashes before it, after ``start``)."""
    b = 0
    while k - 1 - b >= start and text[k - 1 - b] == "\\":
        b += 1
    return b % 2 == 1


def toml_shape(text):
    """``(Shape, where)`` of TOML ``text``, measured in one linear pass without a parser
    (strings and comments skipped as TOML lexes them; a quoted key is one part, its quotes
    counted in its length). ``where``: metric -> offset of its largest instance. Invalid TOML
    is measured as far as it goes; the parser says what is wrong with it."""
    if not isinstance(text, str):
        raise ShapeError("the text is a %s, not a string" % type(text).__name__)
    lines = text.split("\n")
    sig = _TOML_SIGNIFICANT
    n = len(text)
    pos = 0
    stack = []
    ctx = "key"          # key (a line's start, or inside an inline table), header, value
    key_start, parts = 0, 1
    max_parts = max_klen = max_nest = keys = tables = 0
    where = {}           # metric -> offset where its maximum was seen (for the message)
    while pos < n:
        m = sig.search(text, pos)
        if m is None:
            break
        c, j = m.group(), m.start()
        pos = j + 1
        if c == "\n":
            if not stack:
                ctx, key_start, parts = "key", j + 1, 1
            continue
        if c == "#":
            nl = text.find("\n", j)
            pos = nl if nl >= 0 else n
            continue
        if c in "\"'":
            pos = _string_end(text, j)
            continue
        if ctx in ("key", "header"):
            if c == ".":
                parts += 1
                continue
            if c == "=" and ctx == "key" or c == "]" and ctx == "header":
                if parts > max_parts:
                    max_parts, where["parts"] = parts, j
                klen = len(text[key_start:j].strip())
                if klen > max_klen:
                    max_klen, where["klen"] = klen, j
                if ctx == "key":
                    keys += 1
                    ctx = "value"
                else:
                    ctx = "value"
                    if text.startswith("]]", j):
                        pos = j + 2
                continue
            if c == "[" and ctx == "key" and not stack and not text[key_start:j].strip():
                tables += 1
                ctx, parts = "header", 1
                key_start = j + (2 if text.startswith("[[", j) else 1)
                pos = key_start
                continue
            if c == "}" and stack:  # an empty inline table, or one ending in a comma
                stack.pop()
                ctx = "value"
                continue
            # anything else in a key is invalid TOML: measured as a value, the parser says why
        if c in "[{":
            stack.append(c)
            if len(stack) > max_nest:
                max_nest, where["nest"] = len(stack), j
            if c == "{":
                ctx, key_start, parts = "key", j + 1, 1
            else:
                ctx = "value"
        elif c in "]}":
            if stack:
                stack.pop()
            ctx = "value"
        elif c == "," and stack and stack[-1] == "{":
            ctx, key_start, parts = "key", j + 1, 1
    shape = Shape(bytes=len(text.encode("utf-8", "surrogatepass")), lines=len(lines),
                  max_line=max(len(line) for line in lines), max_key_parts=max_parts, max_key_len=max_klen,
                  max_nesting=max_nest, keys=keys, tables=tables)
    return shape, where


def _line_of(text, offset):
    return text.count("\n", 0, offset) + 1


def check_toml_shape(text, limits=TOML_LIMITS, what="the TOML text"):
    """The text's :class:`Shape`; :class:`ShapeError` (naming the limit and the line) when it
    exceeds one of ``limits``. The byte size is checked before anything else is measured."""
    if not isinstance(text, str):
        raise ShapeError("%s is a %s, not text" % (what, type(text).__name__))
    size = len(text.encode("utf-8", "surrogatepass")) if len(text) * 4 > limits.max_bytes else len(text)
    if size > limits.max_bytes:
        raise ShapeError("%s is %d bytes, more than the %d bytes parsed on the controller"
                         % (what, size, limits.max_bytes))
    shape, where = toml_shape(text)
    checks = (
        (shape.lines, limits.max_lines, None, "%d lines"),
        (shape.max_line, limits.max_line, None, "a line of %d characters"),
        (shape.max_key_parts, limits.max_key_parts, "parts", "a dotted key of %d parts"),
        (shape.max_key_len, limits.max_key_len, "klen", "a key of %d characters"),
        (shape.max_nesting, limits.max_nesting, "nest", "arrays or inline tables nested %d levels deep"),
        (shape.keys, limits.max_keys, None, "%d keys"),
        (shape.tables, limits.max_tables, None, "%d tables"),
    )
    for value, limit, at, has in checks:
        if value > limit:
            line = " (line %d)" % _line_of(text, where[at]) if at in where else ""
            raise ShapeError("%s has %s%s, more than the %d parsed on the controller"
                             % (what, has % value, line, limit))
    return shape


def within(shape, limits):
    """Whether ``shape`` is within every one of ``limits``."""
    return (shape.bytes <= limits.max_bytes and shape.lines <= limits.max_lines and shape.max_line <= limits.max_line
            and shape.max_key_parts <= limits.max_key_parts and shape.max_key_len <= limits.max_key_len
            and shape.max_nesting <= limits.max_nesting and shape.keys <= limits.max_keys
            and shape.tables <= limits.max_tables)


# --------------------------------------------------------------------------- the time bound

class _Unpickler(pickle.Unpickler):
    """Only the types a parse result holds: containers and scalars are pickle opcodes; classes
    are limited to the datetime types tomllib returns."""

    ALLOWED = {("datetime", "datetime"), ("datetime", "date"), ("datetime", "time"), ("datetime", "timezone"),
               ("datetime", "timedelta"), ("builtins", "set"), ("builtins", "frozenset")}

    def find_class(self, module, name):
        if (module, name) in self.ALLOWED:
            return getattr(datetime, name) if module == "datetime" else {"set": set, "frozenset": frozenset}[name]
        raise pickle.UnpicklingError("%s.%s is not a parse result type" % (module, name))


def _child(write_fd, func, args, passthrough):
    """In the forked child: run ``func``, write ``("ok", result)``, ``("raise", index, message)``
    or ``("crash", message)`` to the pipe. Never returns into the caller's stack."""
    code = 70
    try:
        try:
            out = ("ok", func(*args))
        except passthrough as e:
            out = ("raise", [isinstance(e, t) for t in passthrough].index(True), str(e))
        except RecursionError:
            out = ("crash", "too deeply nested (RecursionError)")
        except MemoryError:
            out = ("crash", "out of memory (MemoryError)")
        except Exception as e:  # pylint: disable=broad-except  # reported to the parent, never raised here
            out = ("crash", "%s: %s" % (type(e).__name__, e))
        data = pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL)
        view = memoryview(data)
        while view:
            view = view[os.write(write_fd, view):]
        code = 0
    except BaseException:  # pylint: disable=broad-except  # the child must reach os._exit
        code = 71
    finally:
        os._exit(code)  # pylint: disable=protected-access  # no atexit handlers or buffers of the parent


def run_bounded(func, args=(), what="the parse", deadline=DEADLINE_S, passthrough=(), max_result=MAX_RESULT_BYTES):
    """``func(*args)`` run in a forked child process killed at ``deadline`` seconds.

    Returns what ``func`` returned (it must pickle to plain types). An exception of a type in
    ``passthrough`` is raised again here as that type with its message (it must take the
    message as its one argument); :class:`ParseTimeout` when the deadline passed (the child was
    killed and reaped), :class:`ParseError` for anything else (the child raised something
    else, died, or sent more than ``max_result`` bytes).
    """
    passthrough = tuple(passthrough)
    read_fd, write_fd = os.pipe()
    started = time.monotonic()
    try:
        pid = os.fork()
    except OSError as e:
        os.close(read_fd)
        os.close(write_fd)
        raise ParseError("%s: cannot start the bounded parse process (%s)" % (what, e))
    if pid == 0:  # pragma: no cover - the child; its result is checked through the parent
        os.close(read_fd)
        _child(write_fd, func, args, passthrough)
    os.close(write_fd)
    chunks, size, status, error = [], 0, None, None
    poller = select.poll()  # not select(): a worker may hold descriptors past FD_SETSIZE
    poller.register(read_fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    try:
        while True:
            left = deadline - (time.monotonic() - started)
            if left <= 0:
                error = ParseTimeout("%s could not be parsed within %s s (the parser was stopped)"
                                     % (what, _seconds(deadline)), pid)
                break
            if not poller.poll(max(1, int(left * 1000 + 0.999))):
                continue
            chunk = os.read(read_fd, 1 << 16)
            if not chunk:
                break
            size += len(chunk)
            if size > max_result:
                error = ParseError("%s: the parse result is larger than %d bytes; refused" % (what, max_result))
                break
            chunks.append(chunk)
    finally:
        os.close(read_fd)
        if error is not None:
            _kill(pid)
        status = _reap(pid)
    if error is not None:
        raise error
    if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
        how = ("was killed by signal %d" % os.WTERMSIG(status)) if os.WIFSIGNALED(status) \
            else "exited with status %d" % os.WEXITSTATUS(status)
        raise ParseError("%s: the parse process %s" % (what, how))
    try:
        out = _Unpickler(io.BytesIO(b"".join(chunks))).load()
    except Exception as e:  # pylint: disable=broad-except  # any malformed result is refused
        raise ParseError("%s: the parse result could not be read back (%s)" % (what, e))
    if out[0] == "ok":
        return out[1]
    if out[0] == "raise":
        raise passthrough[out[1]](out[2])
    raise ParseError("%s: the parser failed: %s" % (what, out[1]))


def _kill(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:  # pragma: no cover - exited on its own meanwhile (still a zombie: reaped below)
        pass


def _reap(pid):
    while True:
        try:
            return os.waitpid(pid, 0)[1]
        except InterruptedError:  # pragma: no cover - PEP 475 retries; kept for clarity
            continue
        except ChildProcessError:  # pragma: no cover - reaped by someone else (a SIGCHLD handler)
            return 0


def _seconds(value):
    return ("%g" % value) if value else "0"


# --------------------------------------------------------------------------- entry points

def _source(what, node):
    return "%s from node %s" % (what, node) if node else what


def missing_toml():
    """The message for a controller without a TOML parser, or None."""
    if _toml is None:
        return "no TOML parser on the controller (Python 3.11+ tomllib, or tomli)"
    return None


def toml_loads(text):
    """``tomllib.loads``: only for code that already runs under :func:`toml_bounded`."""
    return _toml.loads(text)


def _toml_parse(text):
    try:
        return ("ok", _toml.loads(text))
    except ValueError as e:  # tomllib.TOMLDecodeError
        return ("invalid", str(e))


def toml_bounded(func, text, args=(), what="config.toml", node=None, deadline=DEADLINE_S, passthrough=(),
                 limits=TOML_LIMITS, in_process=IN_PROCESS):
    """``func(text, *args)`` for TOML ``text`` from a node, under the bound: the shape check
    against ``limits`` (:class:`ShapeError`), then ``func`` in the calling process when the
    shape is within ``in_process`` (None: never), else in a child killed at ``deadline``
    (:class:`ParseTimeout`). ``in_process`` must be limits within which ``func`` was measured
    to cost less than a fork."""
    source = _source(what, node)
    shape = check_toml_shape(text, limits, source)
    if in_process is not None and within(shape, in_process):
        return func(text, *args)
    return run_bounded(func, (text,) + tuple(args), source, deadline, passthrough)


def load_toml(text, what="config.toml", node=None, deadline=DEADLINE_S, limits=TOML_LIMITS):
    """The parsed document (a dict) of TOML ``text`` from a node; :class:`ParseError` when it
    is refused or not parsed in time (the message ends "treated as unreadable"), or not valid
    TOML ("... is not valid TOML: ...")."""
    missing = missing_toml()
    if missing:
        raise ParseError(missing)
    try:
        status, value = toml_bounded(_toml_parse, text, (), what, node, deadline, limits=limits)
    except ParseError as e:
        e.args = ("%s; treated as unreadable" % e,)
        raise
    if status != "ok":
        raise ParseError("%s is not valid TOML: %s" % (_source(what, node), value))
    return value


def load_json(text, what="the JSON document", node=None, max_bytes=JSON_MAX_BYTES, max_nesting=JSON_MAX_NESTING):
    """The parsed JSON ``text`` (str or bytes) from a node; :class:`ParseError` when too large,
    nested deeper than ``max_nesting``, or invalid. The C parser is linear; the nesting check
    keeps it from recursing (a RecursionError otherwise)."""
    source = _source(what, node)
    if isinstance(text, (bytes, bytearray)):
        if len(text) > max_bytes:
            raise ShapeError("%s is %d bytes, more than the %d bytes parsed on the controller"
                             % (source, len(text), max_bytes))
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ParseError("%s is not UTF-8 (%s)" % (source, e))
    if not isinstance(text, str):
        raise ShapeError("%s is a %s, not text" % (source, type(text).__name__))
    if len(text) > max_bytes or len(text.encode("utf-8", "surrogatepass")) > max_bytes:
        raise ShapeError("%s is more than the %d bytes parsed on the controller" % (source, max_bytes))
    depth = _json_nesting(text, max_nesting)
    if depth > max_nesting:
        raise ShapeError("%s is nested more than %d levels deep" % (source, max_nesting))
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as e:
        raise ParseError("%s is not valid JSON: %s" % (source, e))


def _json_nesting(text, limit):
    """The deepest bracket nesting outside strings, in one linear pass (stops past ``limit``)."""
    depth = deepest = 0
    pos, n = 0, len(text)
    sig = _JSON_SIGNIFICANT
    while pos < n:
        m = sig.search(text, pos)
        if m is None:
            break
        c, j = m.group(), m.start()
        pos = j + 1
        if c == '"':
            k = j + 1
            while True:
                end = text.find('"', k)
                if end < 0:
                    return deepest  # unterminated: json.loads says so
                if not _escaped(text, end, j + 1):
                    break
                k = end + 1
            pos = end + 1
        elif c in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    return deepest
        else:
            depth = max(depth - 1, 0)
    return deepest
