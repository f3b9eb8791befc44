# -*- coding: utf-8 -*-
"""Hostile config.toml texts a compromised node can hand the controller: each at most 256 KiB
(what the stack probe reads), each a shape that makes a TOML parser superlinear or deep.

Import it as ``ansible_collections.kubegpu.fleet.tests.lib.hostile_toml`` (unit tests) or
``lib.hostile_toml`` (module tests)."""
from __future__ import absolute_import, division, print_function

SIZE = 256 << 10


def _fill(unit, size=SIZE):
    """``unit(i)`` for i = 0, 1, ... joined while the text stays within ``size`` bytes."""
    out, total, i = [], 0, 0
    while True:
        piece = unit(i)
        if total + len(piece) > size:
            return "".join(out)
        out.append(piece)
        total += len(piece)
        i += 1


def _pad(text, size=SIZE - 4096):
    """``text`` followed by comment lines up to about ``size`` bytes (room left for an edit)."""
    line = "#" + "x" * 998 + "\n"
    return text + line * max(0, (size - len(text)) // len(line))


def corpus():
    """{name: text}. ``long_dotted_key``: tomllib takes minutes (quadratic in a key's parts);
    ``deep_dotted_lines``: tomlkit takes minutes (40-part keys); ``dotted_within_limits``:
    within every shape limit, valid TOML that tomllib parses in a tenth of a second but that
    tomlkit spends over a millisecond per line on (the edit's deadline stops it)."""
    return {
        "long_dotted_key": "a" + ".a" * ((SIZE - 3) // 2) + "=1\n",
        "deep_dotted_lines": _fill(lambda i: ".".join(["p"] * 39) + ".k%d=1\n" % i),
        "many_tables": _fill(lambda i: "[t%d]\n" % i),
        "deep_arrays": "x = " + "[" * ((SIZE - 8) // 2) + "]" * ((SIZE - 8) // 2) + "\n",
        "deep_inline_tables": "x = " + "{a=" * ((SIZE - 8) // 4) + "1" + "}" * ((SIZE - 8) // 4) + "\n",
        "one_long_line": "x = \"" + "\\u0041" * ((SIZE - 16) // 6) + "\"\n",
        "unterminated_string": "x = \"\"\"" + "a.b.c [d] {e} = " * ((SIZE - 16) // 16) + "\n",
        "dotted_within_limits": _pad("".join("p.p.p.p.p.p.p.k%d=1\n" % i for i in range(8000))),
    }


# Which of the bound's answers each text gets: a shape refusal (the words of its message), or
# parsed (valid TOML within every limit; the edit is stopped at its deadline instead).
REFUSED_BY_SHAPE = {
    "long_dotted_key": "a line of",
    "deep_dotted_lines": "a dotted key of 40 parts (line 1)",
    "many_tables": "lines",
    "deep_arrays": "a line of",
    "deep_inline_tables": "a line of",
    "one_long_line": "a line of",
    "unterminated_string": "a line of",
}
PARSED = ("dotted_within_limits",)
