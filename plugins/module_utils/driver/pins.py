# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Negative package pins for known-bad NVIDIA drivers (node side, Python 3.8+).

apt: an apt_preferences(5) file with one ``Pin-Priority: -1`` stanza per known-bad version or
range. apt cannot compare versions in a pin, so ranges become extended regular expressions
(apt's ``Pin: version /regex/``).

dnf: ``excludepkgs`` tokens in the ``[main]`` section of dnf.conf. dnf matches them as globs
(``name-version-release``), so ranges become several globs with digit classes
(``570.1[3-6][0-9].*``). The user's own exclude tokens are kept; the tokens this module owns
are listed in a marker comment so the next run can replace exactly those.

Version strings are matched in the forms NVIDIA publishes: numbers written without leading
zeros, or zero-padded to two digits (``570.148.08``). Components with more leading zeros
(``570.0148.8``) are not matched.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.kubegpu.fleet.plugins.module_utils.driver.defects import (
    driver_defects,
    entry_conditions_exclude,
    node_facts,
)
from ansible_collections.kubegpu.fleet.plugins.module_utils.catalog.evaluate import (
    range_text as core_range_text,
)
from ansible_collections.kubegpu.fleet.plugins.module_utils._common.versions import DriverVersion

DEFAULT_PIN_PACKAGES = ("*nvidia*", "cuda-drivers*", "libcuda*")
STAR = "*"  # atom: any further digits
APT_HEADER = (
    "# Managed by kubegpu.fleet driver_guard (state=pinned). Do not edit: the next run rewrites\n"
    "# this file from the known-bad NVIDIA driver catalog.\n"
    "# Pin-Priority -1 keeps apt from ever choosing these versions as install or upgrade\n"
    "# candidates. An explicit `apt-get install PACKAGE=VERSION` still overrides pins.\n"
)
DNF_MARKER = "# kubegpu.fleet driver_guard manages these excludepkgs entries:"
_DNF_KEY_RE = re.compile(r"^(\s*)(exclude|excludepkgs)\s*[=:]\s*(.*)$", re.IGNORECASE)
_SECTION_RE = re.compile(r"^\s*\[([^\]]+)\]\s*$")
_APT_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
_PIN_PACKAGE_RE = re.compile(r"^[A-Za-z0-9_.+*?\[\]-]+$")


# --------------------------------------------------------------------------------------------
# Integer and version ranges as digit-class patterns
# --------------------------------------------------------------------------------------------

def _split(lo_s, hi_s):
    """Equal-length digit strings lo_s <= hi_s -> list of patterns (lists of (a, b) classes)."""
    if not lo_s:
        return [[]]
    if lo_s[0] == hi_s[0]:
        d = int(lo_s[0])
        return [[(d, d)] + rest for rest in _split(lo_s[1:], hi_s[1:])]
    k = len(lo_s) - 1
    lo_first, hi_first = int(lo_s[0]), int(hi_s[0])
    out = []
    full_lo = lo_first
    if lo_s[1:] != "0" * k:
        out += [[(lo_first, lo_first)] + rest for rest in _split(lo_s[1:], "9" * k)]
        full_lo = lo_first + 1
    full_hi = hi_first if hi_s[1:] == "9" * k else hi_first - 1
    if full_lo <= full_hi:
        out.append([(full_lo, full_hi)] + [(0, 9)] * k)
    if hi_s[1:] != "9" * k:
        out += [[(hi_first, hi_first)] + rest for rest in _split("0" * k, hi_s[1:])]
    return out


def int_patterns(lo, hi=None):
    """Patterns for the decimal strings of the integers lo..hi (hi None: unbounded).

    Each pattern is a list of atoms: ``(a, b)`` is one digit in a..b, ``STAR`` any further
    digits. Strings are the natural form (no leading zero) plus, for 0..9, the two-digit
    zero-padded form ("08").
    """
    if lo < 0 or (hi is not None and hi < lo):
        return []
    out = []
    if lo <= 9:
        pad_hi = 9 if hi is None else min(hi, 9)
        out.append([(0, 0), (lo, pad_hi)])
    width_lo = len(str(lo))
    if hi is None:
        width_hi = max(3, width_lo)
    else:
        width_hi = len(str(hi))
    for width in range(width_lo, width_hi + 1):
        w_lo = max(lo, 10 ** (width - 1) if width > 1 else 0)
        w_hi = 10 ** width - 1 if hi is None else min(hi, 10 ** width - 1)
        if w_lo <= w_hi:
            out += _split(str(w_lo), str(w_hi))
    if hi is None:
        out.append([(1, 9)] + [(0, 9)] * width_hi + [STAR])
    return out


def _atom_regex(atom):
    if atom == STAR:
        return "[0-9]*"
    a, b = atom
    if a == b:
        return str(a)
    return "[0-9]" if (a, b) == (0, 9) else "[%d-%d]" % (a, b)


def _atom_glob(atom):
    if atom == STAR:
        return "*"
    return _atom_regex(atom)


def _inclusive_upper(version, exclusive):
    """(minor, patch) inclusive upper bound, patch None = any; None when empty."""
    _b, minor, patch = version.key()[:3]
    if not exclusive:
        return (minor, patch)
    if patch > 0:
        return (minor, patch - 1)
    if minor > 0:
        return (minor - 1, None)
    return None


def version_interval_pairs(low=None, high=None, high_exclusive=False):
    """Split a version interval inside one branch into (minor_interval, patch_interval) pairs.

    ``low``/``high`` are DriverVersions or None (branch start / unbounded). Intervals are
    ``(lo, hi)`` with hi None for unbounded.
    """
    lo_m, lo_p = (low.key()[1], low.key()[2]) if low is not None else (0, 0)
    if high is None:
        up = None
    else:
        up = _inclusive_upper(high, high_exclusive)
        if up is None:
            return []
    if up is None:
        pairs = [((lo_m, lo_m), (lo_p, None))]
        pairs.append(((lo_m + 1, None), (0, None)))
        if lo_p == 0:
            pairs = [((lo_m, None), (0, None))]
        return pairs
    hi_m, hi_p = up
    if (lo_m, lo_p) > (hi_m, hi_p if hi_p is not None else float("inf")):
        return []
    if lo_m == hi_m:
        return [((lo_m, lo_m), (lo_p, hi_p))]
    pairs = [((lo_m, lo_m), (lo_p, None))]
    if lo_m + 1 <= hi_m - 1:
        pairs.append(((lo_m + 1, hi_m - 1), (0, None)))
    pairs.append(((hi_m, hi_m), (0, hi_p)))
    return pairs


def _version_alternatives(branch, pairs):
    """[(kind, minor_patterns, patch_patterns or None)] for the pairs; kind '3' or '2'."""
    alts = []
    for (m_lo, m_hi), (p_lo, p_hi) in pairs:
        minors = int_patterns(m_lo, m_hi)
        if not minors:
            continue
        patches = "any" if (p_lo == 0 and p_hi is None) else int_patterns(p_lo, p_hi)
        if patches:
            alts.append(("3", minors, patches))
        if p_lo == 0:
            alts.append(("2", minors, None))
    return alts


def _pattern_regex(pattern):
    return "".join(_atom_regex(a) for a in pattern)


def _pattern_glob(pattern):
    return "".join(_atom_glob(a) for a in pattern)


def interval_regex(branch, pairs):
    """ERE body (no anchors) for driver version strings of ``branch`` in the pairs."""
    parts = []
    for kind, minors, patches in _version_alternatives(branch, pairs):
        m = "|".join(_pattern_regex(p) for p in minors)
        if kind == "2":
            parts.append("(%s)" % m)
        elif patches == "any":
            parts.append("(%s)\\.[0-9]+" % m)
        else:
            parts.append("(%s)\\.(%s)" % (m, "|".join(_pattern_regex(p) for p in patches)))
    if not parts:
        return None
    return "%d\\.(%s)" % (branch, "|".join(parts))


def interval_globs(branch, pairs):
    """fnmatch globs for driver version strings of ``branch`` in the pairs."""
    out = []
    for kind, minors, patches in _version_alternatives(branch, pairs):
        for mp in minors:
            m = _pattern_glob(mp)
            if kind == "2":
                out.append("%d.%s" % (branch, m))
            elif patches == "any":
                out.append("%d.%s.*" % (branch, m))
            else:
                for pp in patches:
                    out.append("%d.%s.%s" % (branch, m, _pattern_glob(pp)))
    seen = set()
    return [g for g in out if not (g in seen or seen.add(g))]


# --------------------------------------------------------------------------------------------
# Which versions to pin
# --------------------------------------------------------------------------------------------

def item_pairs(item):
    """Version interval pairs of a catalog v2 branch item, or None for the whole branch.

    ``introduced`` is the inclusive lower bound; ``fixed`` the exclusive upper bound, else
    ``last_affected`` the inclusive one; neither: every later release of the branch.
    """
    low = DriverVersion(item["introduced"]) if item.get("introduced") else None
    if item.get("fixed"):
        return version_interval_pairs(low, DriverVersion(item["fixed"]), True)
    if item.get("last_affected"):
        return version_interval_pairs(low, DriverVersion(item["last_affected"]), False)
    if low is not None:
        return version_interval_pairs(low, None)
    return None


def pin_plan(entries, node, branch=None, skip=()):
    """Known-bad driver versions to pin, as a list of dicts.

    Only the driver defects of the catalog (kind defect, component driver) and only their branch
    items are pinned (driver builds that are bad in themselves); security entries are fixed by
    upgrading, branch-less items (limitations, platform minimums) are never pinned. Entries
    whose non-state conditions rule the node out (another GPU model) are left out.
    ``branch`` limits the plan to one driver branch. Each pin has ``id``, ``title``,
    ``branch``, ``kind`` (range/branch), ``description``, ``regex`` (ERE body, no anchors) and
    ``globs`` (fnmatch version globs).
    """
    skip = set(skip or ())
    facts = node_facts(node)
    plan = []
    for entry in driver_defects(entries):
        if entry["id"] in skip or entry_conditions_exclude(entry, facts):
            continue
        for item in entry["affected"]:
            if not item.get("branch"):
                continue
            b = int(item["branch"])
            if branch is not None and b != branch:
                continue
            base = {"id": entry["id"], "title": entry["title"], "branch": b}
            pairs = item_pairs(item)
            if pairs is None:
                plan.append(dict(base, kind="branch",
                                 description="every %d release (no fixed %d release known)" % (b, b),
                                 regex="%d\\.[0-9]+(\\.[0-9]+)?" % b, globs=["%d.*" % b]))
                continue
            rx = interval_regex(b, pairs)
            if rx is None:
                continue
            plan.append(dict(base, kind="range", description=core_range_text(item),
                             regex=rx, globs=interval_globs(b, pairs)))
    return plan


def apt_version_regex(pin):
    """Full ``Pin: version`` regex: optional epoch, the version, optional Debian revision."""
    return "^([0-9]+:)?(%s)([-+~].*)?$" % pin["regex"]


def pin_matches_version(pin, package_version):
    """True when the apt regex of ``pin`` matches a package version string."""
    return re.match(apt_version_regex(pin), package_version) is not None


def validate_pin_packages(patterns):
    """Package-name patterns for pins: non-empty, no whitespace or regex delimiters."""
    if not patterns:
        raise ValueError("pin_packages must name at least one package pattern")
    for p in patterns:
        if not isinstance(p, str) or not _PIN_PACKAGE_RE.match(p):
            raise ValueError("pin_packages: %r is not a package name or glob "
                             "(letters, digits, . + - _ and the glob characters * ? [ ])" % (p,))
    return list(patterns)


def render_apt_preferences(plan, packages=DEFAULT_PIN_PACKAGES):
    """apt_preferences(5) text for the plan (header only when there is nothing to pin)."""
    out = [APT_HEADER]
    pkg_line = " ".join(packages)
    for pin in plan:
        out.append("\n")
        out.append("Explanation: %s: %s (%s)\n" % (pin["id"], _one_line(pin["title"]), pin["description"]))
        out.append("Package: %s\n" % pkg_line)
        out.append("Pin: version /%s/\n" % apt_version_regex(pin))
        out.append("Pin-Priority: -1\n")
    return "".join(out)


def _one_line(text):
    return " ".join(text.split())


def apt_preferences_name_ok(path):
    """apt ignores files in preferences.d unless the name has no extension or ends in .pref."""
    base = path.rstrip("/").rsplit("/", 1)[-1]
    if not _APT_NAME_RE.match(base):
        return False
    return "." not in base or base.endswith(".pref")


def dnf_tokens(plan, packages=DEFAULT_PIN_PACKAGES):
    """excludepkgs tokens (``name-version-release`` globs) for the plan."""
    out = []
    seen = set()
    for pin in plan:
        for glob in pin["globs"]:
            for name in packages:
                tok = "%s-%s-*" % (name, glob)
                if tok not in seen:
                    seen.add(tok)
                    out.append(tok)
    return out


def _split_tokens(value):
    return [t for t in re.split(r"[,\s]+", value.strip()) if t]


def render_dnf_conf(text, tokens, marker_width=100):
    """Return dnf.conf ``text`` with this module's excludepkgs ``tokens`` in ``[main]``.

    Tokens a previous run added (listed in marker comments) are replaced; every other token and
    line is kept. With no tokens, the module's tokens and markers are removed again.
    """
    lines = (text or "").splitlines()
    start = end = None
    for i, line in enumerate(lines):
        m = _SECTION_RE.match(line)
        if m and start is None and m.group(1).strip() == "main":
            start = i
        elif m and start is not None:
            end = i
            break
    if start is not None and end is None:
        end = len(lines)

    def marker_lines():
        out, cur = [], []
        for tok in tokens:
            cur.append(tok)
            if len(" ".join(cur)) > marker_width:
                out.append("%s %s" % (DNF_MARKER, " ".join(cur)))
                cur = []
        if cur:
            out.append("%s %s" % (DNF_MARKER, " ".join(cur)))
        return out

    if start is None:
        if not tokens:
            return text or ""
        head = list(lines)
        while head and not head[-1].strip():
            head.pop()
        if head:
            head.append("")
        head += ["[main]"] + marker_lines() + ["excludepkgs=" + ",".join(tokens)]
        return "\n".join(head) + "\n"

    section = lines[start + 1:end]
    managed = set()
    body = []
    for line in section:
        if line.strip().startswith(DNF_MARKER):
            managed.update(line.strip()[len(DNF_MARKER):].split())
        else:
            body.append(line)
    # Find exclude/excludepkgs keys with their continuation lines.
    keys = []  # (index in body, end index exclusive, indent, key, tokens)
    i = 0
    while i < len(body):
        m = _DNF_KEY_RE.match(body[i])
        if m and not body[i].lstrip().startswith(("#", ";")):
            j = i + 1
            value = m.group(3)
            while j < len(body) and body[j][:1] in (" ", "\t") and body[j].strip() \
                    and not body[j].lstrip().startswith(("#", ";")):
                value += " " + body[j].strip()
                j += 1
            keys.append((i, j, m.group(1), m.group(2), _split_tokens(value)))
            i = j
        else:
            i += 1
    new_body = []
    pos = 0
    placed = False
    for idx, (ki, kj, indent, key, toks) in enumerate(keys):
        new_body += body[pos:ki]
        user = [t for t in toks if t not in managed]
        merged = list(user)
        if not placed and tokens:
            merged += [t for t in tokens if t not in user]
            new_body += marker_lines()
            placed = True
        if merged:
            new_body.append("%s%s=%s" % (indent, key, ",".join(merged)))
        pos = kj
    new_body += body[pos:]
    if not placed and tokens:
        tail = []
        while new_body and not new_body[-1].strip():
            tail.insert(0, new_body.pop())
        new_body += marker_lines() + ["excludepkgs=" + ",".join(tokens)] + tail
    out = lines[:start + 1] + new_body + lines[end:]
    return "\n".join(out) + ("\n" if out else "")
