# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Boot loader state as files hold it: parsers for what decides the next boot (node side, 3.8+).

Pure functions over text or bytes already read under a bound (boot/facts.py reads them); each
format follows its authority:

* GRUB environment block (``grubenv``): GRUB manual, "Environment block" (a preallocated
  1024-byte file, ``# GRUB Environment Block`` first, ``name=value`` lines, padded with ``#``),
  and grub-core/lib/envblk.c (a ``\\`` escapes the next byte, so values hold ``\\`` and newlines;
  lines starting with ``#`` are padding or comments: Debian's grub-editenv adds a ``# WARNING``
  line). grub-mkconfig's 00_header boots ``next_entry`` once (grub-reboot) and otherwise
  ``saved_entry`` (grub-set-default, ``GRUB_DEFAULT=saved``).
* ``grub.cfg`` as grub-mkconfig writes it: ``set default=...`` in the header; ``menuentry 'TITLE'
  [--class ...] $menuentry_id_option 'ID' {`` ... ``linux /boot/vmlinuz-RELEASE ...`` ... ``}``;
  ``submenu 'Advanced options for Debian GNU/Linux' $menuentry_id_option
  'gnulinux-advanced-UUID' {`` around one entry per kernel (ids
  ``gnulinux-RELEASE-advanced-UUID``); a default names an entry by index, title or id, one
  level per ``>`` (GRUB manual, "default": ``gnulinux-advanced-UUID>gnulinux-6.1.0-27-amd64-
  advanced-UUID``, ``1>2``); a default that names nothing boots the first entry (grub-core/
  normal/menu.c). ``blscfg`` (RHEL, Fedora, Rocky: ``GRUB_ENABLE_BLSCFG=true``) adds the Boot
  Loader Specification entries at that point of the menu, newest first (grub2's blscfg.c
  ``bls_cmp``: rpm's vercmp of the ``version`` key, then of the file name; some builds compare
  the file names alone, which for ``<machine-id>-<version>.conf`` names is the same order), their
  ids being the file names without ``.conf`` (what grubby writes to ``saved_entry``).
* Boot Loader Specification type #1 entries (UAPI.1, ``/boot/loader/entries/*.conf``): one
  ``key value`` per line, ``#`` comments; ``title``, ``version``, ``linux``, ``initrd``,
  ``options``, ``sort-key``, ``machine-id``.
* systemd-boot ``loader.conf`` (loader.conf(5)): ``default`` is a glob over entry ids,
  ``@saved`` the last booted entry; the ``LoaderEntryDefault``/``LoaderEntryOneShot``
  EFI variables (vendor GUID 4a67b082-0a4c-41cf-b6c7-440b29bb8c4f, systemd-boot(7)) override it;
  efivarfs files hold 4 attribute bytes, then the UTF-16LE value with a NUL at its end.
* ``needrestart -b`` (batch mode, README.batch.md of needrestart): ``NEEDRESTART-KCUR`` the
  running kernel, ``NEEDRESTART-KEXP`` the expected one, ``NEEDRESTART-KSTA`` 0 unknown, 1 up to
  date, 2 an ABI-compatible upgrade pending, 3 a version upgrade pending.
* ``dnf needs-restarting -r`` (dnf-plugins-core needs_restarting.rst): exit code 1 when a reboot
  is required, 0 when not; dnf itself also exits 1 ("No such command" without the plugin), so
  only its own sentence counts.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fnmatch
import re

from ansible_collections.kubegpu.fleet.plugins.module_utils._common.safe_io import is_ascii_digits

GRUBENV_SIGNATURE = b"# GRUB Environment Block\n"
GRUBENV_SIZE = 1024
# Entries a menu may hold before the rest is not parsed (grub.cfg of a node with every kernel
# since its install holds a few dozen; the bound is for a hostile file, and says so).
MAX_ENTRIES = 1000
MAX_DEPTH = 16
NEEDRESTART_KSTA = {"0": "unknown", "1": "current", "2": "ABI-compatible upgrade pending",
                    "3": "version upgrade pending"}


class BootFormatError(ValueError):
    """A file that is not what its name says (named in the message)."""


# --------------------------------------------------------------------------- GRUB environment

def parse_grubenv(data):
    """The variables of a GRUB environment block (bytes) as a dict of text.

    Raises :class:`BootFormatError` when the block does not start with GRUB's signature. A
    block of another size than 1024 bytes is read all the same (GRUB reads what is there);
    lines without ``=`` are skipped as envblk.c skips them."""
    if not isinstance(data, bytes) or not data.startswith(GRUBENV_SIGNATURE):
        raise BootFormatError("not a GRUB environment block (no '# GRUB Environment Block' signature)")
    out = {}
    pos, size = len(GRUBENV_SIGNATURE), len(data)
    while pos < size:
        if data[pos:pos + 1] in (b"#", b"\n"):
            end = data.find(b"\n", pos)
            pos = size if end < 0 else end + 1
            continue
        # one variable: name up to '=', value up to an unescaped newline
        eq = data.find(b"=", pos)
        nl = data.find(b"\n", pos)
        if eq < 0 or (0 <= nl < eq):
            pos = size if nl < 0 else nl + 1
            continue
        name = data[pos:eq]
        value = bytearray()
        i = eq + 1
        while i < size:
            c = data[i:i + 1]
            if c == b"\\" and i + 1 < size:
                value += data[i + 1:i + 2]
                i += 2
                continue
            if c == b"\n":
                break
            value += c
            i += 1
        out[name.decode("utf-8", "replace")] = bytes(value).decode("utf-8", "replace")
        pos = i + 1
    return out


# --------------------------------------------------------------------------- grub.cfg

def _tokens(line):
    """Words of one GRUB script line: quotes ('...' literal, "..." with \\ escapes) and
    backslashes as the GRUB shell reads them; an unquoted ``#`` at a word start begins a
    comment. Variables stay as written (``$menuentry_id_option``, ``${saved_entry}``)."""
    words, cur, have = [], [], False
    i, n = 0, len(line)
    while i < n:
        c = line[i]
        if c in " \t":
            if have:
                words.append("".join(cur))
                cur, have = [], False
            i += 1
            continue
        if c == "#" and not have:
            break
        if c == "'":
            end = line.find("'", i + 1)
            end = n if end < 0 else end
            cur.append(line[i + 1:end])
            have = True
            i = end + 1
            continue
        if c == '"':
            i += 1
            while i < n and line[i] != '"':
                if line[i] == "\\" and i + 1 < n:
                    i += 1
                cur.append(line[i])
                i += 1
            have = True
            i += 1
            continue
        if c == "\\" and i + 1 < n:
            cur.append(line[i + 1])
            have = True
            i += 2
            continue
        cur.append(c)
        have = True
        i += 1
    if have:
        words.append("".join(cur))
    return words


def _condition(words):
    """The test of an ``if``/``elif`` line: ``[ -n ${boot_counter} ]`` of ``if [ -n "${boot_counter}" ]; then``."""
    words = list(words[1:])
    while words and words[-1] in ("then", ";"):
        words.pop()
    if words and words[-1].endswith(";"):
        words[-1] = words[-1][:-1]
    return " ".join(words)


def _entry_head(words):
    """(title, id) of a ``menuentry``/``submenu`` line's words (after the keyword, before ``{``)."""
    title, ident, i = None, None, 0
    while i < len(words):
        w = words[i]
        if w in ("$menuentry_id_option", "${menuentry_id_option}", "--id") and i + 1 < len(words):
            ident = words[i + 1]
            i += 2
            continue
        if w.startswith("--id="):
            ident = w[len("--id="):]
        elif w in ("--class", "--users", "--hotkey") and i + 1 < len(words):
            i += 2
            continue
        elif w.startswith("--"):
            pass
        elif title is None:
            title = w
        i += 1
    return title, ident


def kernel_of_image(path):
    """The release a kernel image path names (``/boot/vmlinuz-6.1.0-27-amd64`` ->
    ``6.1.0-27-amd64``; ``/vmlinuz-5.14.0-427.13.1.el9_4.x86_64``), else None (a rescue image,
    a UKI, a link such as ``/vmlinuz``)."""
    if not isinstance(path, str) or not path:
        return None
    name = path.rstrip("/").rsplit("/", 1)[-1]
    if name.startswith("(") and ")" in name:
        name = name.split(")", 1)[1]
    if not name.startswith("vmlinuz-"):
        return None
    release = name[len("vmlinuz-"):]
    if not release or release.startswith("0-rescue-") or not is_ascii_digits(release[0]):
        return None
    return release


def parse_grub_cfg(text):
    """The menu and the default statements of a grub.cfg.

    Returns ``{"menu": [...], "defaults": [...], "blscfg": bool, "truncated": bool}``: ``menu``
    the top-level items in order, each ``{"type": "entry"|"submenu"|"blscfg", "title", "id",
    "linux", "kernel", "children"}`` (``blscfg`` marks where the BLS entries go);
    ``defaults`` the top-level ``set default=...`` statements in order, each ``{"value",
    "conditions"}`` (the enclosing ``if`` conditions, ``else of CONDITION`` in an else branch)."""
    menu, defaults = [], []
    stack = []        # open blocks: ("menu", item) or ("other", None) (function bodies)
    conds = []        # enclosing top-level if blocks: [condition, in its else branch]
    count = [0]
    truncated = False
    saw_bls = False
    for raw in text.splitlines():
        words = _tokens(raw.strip())
        if not words:
            continue
        head = words[0]
        if head == "}":
            if stack:
                stack.pop()
            continue
        opens = words[-1] == "{"
        if head in ("menuentry", "submenu") and opens:
            if count[0] >= MAX_ENTRIES or len(stack) >= MAX_DEPTH:
                truncated = True
                stack.append(("other", None))
                continue
            count[0] += 1
            title, ident = _entry_head(words[1:-1])
            item = {"type": "entry" if head == "menuentry" else "submenu", "title": title, "id": ident,
                    "linux": None, "kernel": None, "children": []}
            if not stack:
                menu.append(item)
            elif stack[-1][0] == "menu" and stack[-1][1]["type"] == "submenu":
                stack[-1][1]["children"].append(item)
            # else: inside a function or an entry's body, not part of the menu read at boot
            stack.append(("menu", item))
            continue
        if opens:
            stack.append(("other", None))
            continue
        if head in ("linux", "linuxefi", "linux16", "kernel") and stack and stack[-1][0] == "menu" \
                and stack[-1][1]["type"] == "entry" and len(words) > 1 and stack[-1][1]["linux"] is None:
            stack[-1][1]["linux"] = words[1]
            stack[-1][1]["kernel"] = kernel_of_image(words[1])
            continue
        if stack:
            continue          # inside a function or an entry: not run when the menu is read
        if head == "if" and words[-1] not in ("fi", "fi;"):
            conds.append([_condition(words), False])
        elif head == "elif" and conds:
            conds[-1] = [_condition(words), False]
        elif head == "else" and conds:
            conds[-1][1] = True
        elif head in ("fi", "fi;") and conds:
            conds.pop()
        elif head == "set" and len(words) > 1 and words[1].startswith("default="):
            defaults.append({"value": words[1][len("default="):],
                             "conditions": [("else of " if e else "") + c for c, e in conds]})
        elif head == "blscfg":
            saw_bls = True
            menu.append({"type": "blscfg", "title": None, "id": None, "linux": None, "kernel": None,
                         "children": []})
    return {"menu": menu, "defaults": defaults, "blscfg": saw_bls, "truncated": truncated}


_VAR_RE = re.compile(r"^\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?$")


def _mentions_next_entry(condition):
    return "next_entry" in condition


def grub_default(defaults, env):
    """Which default the header sets, from grub.cfg's ``set default=`` statements (``{"value",
    "conditions"}`` as :func:`parse_grub_cfg` gives them) and the environment block.

    grub-mkconfig's header sets ``default="${next_entry}"`` when ``next_entry`` is set (and clears
    it: one boot only), else (its ``else`` branch) the value of ``GRUB_DEFAULT`` (``0``, an entry
    or ``"${saved_entry}"``); an unconditional ``set default=`` later in the file overrides it.
    A ``set default=`` under another condition (RHEL's boot counting for OSTree rollbacks) is not
    evaluated: it is returned in ``notes``. Returns ``(value, source, once, notes)``; a value of
    ``""`` (an unset variable) boots the first entry."""
    env = env or {}
    notes = []
    plain = []
    for d in defaults:
        conds = d.get("conditions") or []
        if variable_name(d["value"]) == "next_entry":
            continue
        if not conds or (len(conds) == 1 and conds[0].startswith("else of ") and _mentions_next_entry(conds[0])):
            plain.append(d["value"])
        else:
            notes.append("grub.cfg sets default=%s only when %s (not evaluated)" % (d["value"], " and ".join(conds)))
    if env.get("next_entry") and any(variable_name(d["value"]) == "next_entry" for d in defaults):
        return env["next_entry"], "grubenv next_entry (grub-reboot: the next boot only)", True, notes
    if not plain:
        return "0", "grub.cfg sets no default (the first entry)", False, notes
    value = plain[-1]
    var = variable_name(value)
    if var is None:
        return value, "grub.cfg set default=%s" % value, False, notes
    if env.get(var):
        return env[var], "grubenv %s (grub.cfg set default=${%s})" % (var, var), False, notes
    return "", "grub.cfg set default=${%s}, %s unset in grubenv (the first entry)" % (var, var), False, notes


def variable_name(value):
    m = _VAR_RE.match(value or "")
    return m.group(1) if m else None


def expand_menu(menu, bls_entries):
    """The menu GRUB shows: ``blscfg`` markers replaced by the BLS entries (each ``{"type":
    "entry", "title", "id", "linux", "kernel"}``)."""
    out = []
    for item in menu:
        if item["type"] == "blscfg":
            out.extend(dict(e, type="entry", children=[]) for e in bls_entries)
        else:
            out.append(item)
    return out


def resolve_grub_entry(menu, value):
    """The menu entry a default value names, as GRUB resolves it: ``>`` separates the levels
    (submenus), each level a number (index) or an entry's id or title. Returns ``(entry, path,
    matched)``: ``matched`` False when the value names nothing and GRUB boots the first entry
    (or None when even that is no bootable entry)."""
    first = menu[0] if menu and menu[0]["type"] == "entry" else None
    if value is None or value == "":
        return first, "0", first is not None     # an empty default is entry 0
    items, path, item = menu, [], None
    for part in str(value).split(">"):
        item = None
        if is_ascii_digits(part):
            idx = int(part)
            item = items[idx] if idx < len(items) else None
        else:
            for it in items:
                if it["id"] == part:
                    item = it
                    break
            if item is None:
                for it in items:
                    if it["title"] == part:
                        item = it
                        break
        if item is None:
            break
        path.append(item["title"] or item["id"] or part)
        items = item["children"]
    if item is None or item["type"] != "entry":
        return first, "0", False
    return item, ">".join(path), True


# --------------------------------------------------------------------------- BLS

def parse_bls_entry(text):
    """A Boot Loader Specification type #1 entry: ``{key: value}`` (``initrd``/``options``
    lists, the rest the last value given)."""
    out = {"initrd": [], "options": []}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 1)
        key, value = parts[0], (parts[1].strip() if len(parts) > 1 else "")
        if key in ("initrd", "options"):
            out[key].append(value)
        else:
            out[key] = value
    return out


_SEG_RE = re.compile(r"[0-9]+|[A-Za-z]+")


def version_key(text):
    """rpm-like order of a version or file name: numbers as numbers, ranked above letters."""
    return [(1, int(s), "") if is_ascii_digits(s) else (0, 0, s) for s in _SEG_RE.findall(text or "")]


def bls_menu(entries):
    """BLS entries ``[(id, parsed)]`` in menu order (newest version first, as GRUB's blscfg
    and grubby list them) as menu items."""
    items = []
    for ident, e in entries:
        linux = e.get("linux")
        kernel = kernel_of_image(linux)
        if kernel is None and linux and "rescue" not in linux and "rescue" not in (e.get("version") or ""):
            kernel = e.get("version") or None   # an image not named vmlinuz-RELEASE: the entry's version
        items.append({"type": "entry", "title": e.get("title") or ident, "id": ident, "linux": linux,
                      "kernel": kernel, "version": e.get("version"), "sort_key": e.get("sort-key"),
                      "children": []})
    items.sort(key=lambda it: (version_key(it["version"] or it["id"]), version_key(it["id"])), reverse=True)
    return items


def match_loader_default(items, pattern):
    """The first systemd-boot entry whose id (file name, with or without ``.conf``) matches the
    glob ``pattern``, else None."""
    for it in items:
        ident = it["id"] or ""
        for name in (ident, ident + ".conf", ident[:-5] if ident.endswith(".conf") else ident):
            if fnmatch.fnmatchcase(name, pattern):
                return it
    return None


def parse_loader_conf(text):
    """systemd-boot's loader.conf: ``{option: value}`` (the last of each)."""
    out = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 1)
        out[parts[0]] = parts[1].strip() if len(parts) > 1 else ""
    return out


def parse_efivar_string(data):
    """An efivarfs string variable (4 attribute bytes, UTF-16LE, NUL-terminated) as text, or
    None when it is not one."""
    if not isinstance(data, bytes) or len(data) < 6 or (len(data) - 4) % 2:
        return None
    try:
        text = data[4:].decode("utf-16-le")
    except UnicodeDecodeError:
        return None
    return text.split("\0", 1)[0] or None


# --------------------------------------------------------------------------- distribution answers

def parse_needrestart(text):
    """``needrestart -b`` output: ``{"version", "kcur", "kexp", "ksta", "status"}`` (None where a
    key is missing); ``status`` the KSTA in words."""
    out = {"version": None, "kcur": None, "kexp": None, "ksta": None, "status": None}
    keys = {"NEEDRESTART-VER": "version", "NEEDRESTART-KCUR": "kcur", "NEEDRESTART-KEXP": "kexp",
            "NEEDRESTART-KSTA": "ksta"}
    for raw in text.splitlines():
        key, sep, value = raw.partition(":")
        if sep and key.strip() in keys:
            out[keys[key.strip()]] = value.strip() or None
    if out["ksta"] is not None:
        out["status"] = NEEDRESTART_KSTA.get(out["ksta"], "unknown status %s" % out["ksta"])
    return out


def parse_needs_restarting(rc, stdout, stderr):
    """``dnf needs-restarting -r``: ``(required True/False/None, why)``."""
    text = "%s\n%s" % (stdout or "", stderr or "")
    low = text.lower()
    if rc == 1 and "reboot is required" in low:
        return True, "dnf needs-restarting -r: reboot is required"
    if rc == 0 and ("reboot should not be necessary" in low or "no core libraries" in low or not text.strip()):
        return False, "dnf needs-restarting -r: reboot should not be necessary"
    said = "; ".join(ln.strip() for ln in text.splitlines() if ln.strip()) or "no output"
    return None, "dnf needs-restarting -r: exit code %s (%s)" % (rc, said[:300])
