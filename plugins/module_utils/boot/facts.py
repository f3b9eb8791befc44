# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which kernel does the next boot start, and how do we know (the body of kubegpu.fleet.boot_facts).

Node side, Python 3.8+. Reads the boot loader's own state, every file through safe_io's bounded
readers (no FIFO blocks, no file is read past its bound, a symlink loop is a problem, not a
hang) and every command through safe_io.run_command (argv, deadline, output bound):

* GRUB: ``grubenv`` (``/boot/grub/grubenv``, ``/boot/grub2/grubenv``) and ``grub.cfg`` beside
  it; the header's default (``next_entry`` once, ``saved_entry``, an index, title or id) is
  resolved in the menu the way GRUB resolves it (formats.py). With ``blscfg`` in grub.cfg the
  menu holds the ``/boot/loader/entries`` entries, and ``grubby --default-kernel`` (RHEL family),
  where installed, gives the distribution's own answer, which wins where the two differ (the
  difference is reported).
* systemd-boot (``LoaderInfo`` EFI variable, or a ``loader.conf`` on the ESP without a
  grub.cfg): ``LoaderEntryOneShot``, ``LoaderEntryDefault``, then loader.conf's ``default`` glob,
  else the first entry.
* The distribution's answers: ``needrestart -b -k`` (KCUR/KEXP/KSTA), ``dnf needs-restarting -r``,
  ``/run/reboot-required`` and ``/run/reboot-required.pkgs``.

A missing file or tool is "unknown" and said in words (``how``, ``problems``), never a failure.
Nothing is written.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.kubegpu.fleet.plugins.module_utils._common.safe_io import (
    CommandTimeout,
    UnsafeInput,
    check_path,
    check_timeout,
    read_bytes,
    run_command,
)
from ansible_collections.kubegpu.fleet.plugins.module_utils.boot import formats

GRUBENV_LIMIT = 64 << 10      # the block is 1024 bytes; anything far larger is not one
GRUB_CFG_LIMIT = 2 << 20      # a grub.cfg with every kernel since install is tens of KiB
BLS_ENTRY_LIMIT = 64 << 10
BLS_MAX_ENTRIES = 256         # past it, the newest (by file name version) are kept and that is said
SMALL_LIMIT = 64 << 10        # loader.conf, osrelease, reboot-required.pkgs
EFIVAR_LIMIT = 4096
COMMAND_LIMIT = 1 << 20
LOADER_GUID = "4a67b082-0a4c-41cf-b6c7-440b29bb8c4f"
ENTRIES_REPORTED = 32
SEARCH_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")


class BootFactsError(ValueError):
    """An option value the module refuses (named in the message)."""


def find_command(name, path=None):
    """Absolute path of an executable regular file ``name`` on ``path`` (a PATH string; default
    the process PATH, then the sbin and bin directories), else None."""
    if path is not None:
        dirs = path.split(os.pathsep)
    else:
        dirs = os.environ.get("PATH", "").split(os.pathsep) + list(SEARCH_PATH)
    for d in dirs:
        if not d or not d.startswith("/"):
            continue
        full = os.path.join(d, name)
        try:
            if os.path.isfile(full) and os.access(full, os.X_OK):
                return full
        except (OSError, ValueError):
            continue
    return None


def _read(path, limit, problems, binary=False):
    """Bounded read of a file that may be missing: content, or None (missing or refused; a
    refusal is appended to ``problems``)."""
    try:
        data = read_bytes(path, limit, missing_ok=True)
    except UnsafeInput as e:
        problems.append(str(e))
        return None
    except (IOError, OSError) as e:
        problems.append("%s: %s" % (path, e.strerror or e))
        return None
    if data is None or binary:
        return data
    return data.decode("utf-8", "replace")


def _run(argv, timeout, problems):
    """A command's CommandResult, or None (could not start, timed out, too much output: said)."""
    try:
        return run_command(argv, timeout, limit=COMMAND_LIMIT)
    except CommandTimeout as e:
        problems.append(str(e))
    except UnsafeInput as e:
        problems.append(str(e))
    except (IOError, OSError) as e:
        problems.append("%s: %s" % (argv[0], e.strerror or e))
    return None


def _entry_view(item, how, matched=True):
    if item is None:
        return None
    return {"kernel": item.get("kernel"), "title": item.get("title"), "id": item.get("id"),
            "linux": item.get("linux"), "how": how, "matched": matched}


def read_bls_entries(directory, problems):
    """``[(id, parsed)]`` of the ``*.conf`` entries in ``directory`` (bounded in count and size)."""
    try:
        names = [n for n in os.listdir(directory) if n.endswith(".conf") and not n.startswith(".")]
    except (IOError, OSError):
        return []
    names.sort(key=formats.version_key, reverse=True)
    if len(names) > BLS_MAX_ENTRIES:
        problems.append("%s holds %d entries; the %d newest by name were read" % (
            directory, len(names), BLS_MAX_ENTRIES))
        names = names[:BLS_MAX_ENTRIES]
    out = []
    for name in names:
        text = _read(os.path.join(directory, name), BLS_ENTRY_LIMIT, problems)
        if text is not None:
            out.append((name[:-len(".conf")], formats.parse_bls_entry(text)))
    return out


def _efivar(sys_path, name, problems):
    path = os.path.join(sys_path, "firmware", "efi", "efivars", "%s-%s" % (name, LOADER_GUID))
    data = _read(path, EFIVAR_LIMIT, problems, binary=True)
    return formats.parse_efivar_string(data) if data is not None else None


def grub_state(boot_path, problems, how):
    """``(env, env_path, cfg, cfg_path)`` of the first GRUB directory holding a grub.cfg or grubenv."""
    for sub in ("grub", "grub2"):
        d = os.path.join(boot_path, sub)
        env_path, cfg_path = os.path.join(d, "grubenv"), os.path.join(d, "grub.cfg")
        raw = _read(env_path, GRUBENV_LIMIT, problems, binary=True)
        text = _read(cfg_path, GRUB_CFG_LIMIT, problems)
        if raw is None and text is None:
            continue
        env = None
        if raw is not None:
            try:
                env = formats.parse_grubenv(raw)
                how.append("%s: %s" % (env_path, ", ".join(
                    "%s=%s" % (k, env[k]) for k in ("next_entry", "saved_entry") if env.get(k)) or "no saved or next entry"))
            except formats.BootFormatError as e:
                problems.append("%s: %s" % (env_path, e))
        cfg = formats.parse_grub_cfg(text) if text is not None else None
        if cfg is not None and cfg["truncated"]:
            problems.append("%s: more than %d menu entries or %d submenu levels; the rest was not read"
                            % (cfg_path, formats.MAX_ENTRIES, formats.MAX_DEPTH))
        return env, (env_path if raw is not None else None), cfg, (cfg_path if text is not None else None)
    return None, None, None, None


def resolve_grub(env, cfg, cfg_path, bls, how):
    """``(default_view, once_view, menu)`` from GRUB's state."""
    menu = formats.expand_menu(cfg["menu"], formats.bls_menu(bls))
    value, source, once, notes = formats.grub_default(cfg["defaults"], env or {})
    how.extend(notes)
    item, path, matched = formats.resolve_grub_entry(menu, value)
    words = "%s -> %s" % (source, path if matched else "no entry named %r: GRUB boots the first entry" % value
                          if value else "the first entry")
    how.append("%s: %s" % (cfg_path, words))
    view = _entry_view(item, words, matched)
    if not once:
        return view, None, menu
    # next_entry boots once; the persistent default is the header's other branch
    value2, source2, _o, _n = formats.grub_default(cfg["defaults"], dict(env or {}, next_entry=""))
    item2, path2, matched2 = formats.resolve_grub_entry(menu, value2)
    return _entry_view(item2, "%s -> %s" % (source2, path2), matched2), view, menu


def resolve_systemd_boot(sys_path, esp_paths, problems, how):
    """``(default_view, once_view, menu, conf_path)`` of systemd-boot, or Nones without it."""
    conf_path, conf = None, None
    for esp in esp_paths:
        p = os.path.join(esp, "loader", "loader.conf")
        text = _read(p, SMALL_LIMIT, problems)
        if text is not None:
            conf_path, conf = p, formats.parse_loader_conf(text)
            break
    info = _efivar(sys_path, "LoaderInfo", problems)
    if conf is None and not (info or "").startswith("systemd-boot"):
        return None, None, None, None
    entries = []
    for esp in esp_paths:
        entries += read_bls_entries(os.path.join(esp, "loader", "entries"), problems)
    seen, unique = set(), []
    for ident, e in entries:
        if ident not in seen:
            seen.add(ident)
            unique.append((ident, e))
    menu = formats.bls_menu(unique)
    oneshot = _efivar(sys_path, "LoaderEntryOneShot", problems)
    default_var = _efivar(sys_path, "LoaderEntryDefault", problems)
    pattern = (conf or {}).get("default")
    if pattern == "@saved":
        pattern = _efivar(sys_path, "LoaderEntryLastBooted", problems)
    if default_var:
        item, words = formats.match_loader_default(menu, default_var), "EFI variable LoaderEntryDefault=%s" % default_var
    elif pattern:
        item, words = formats.match_loader_default(menu, pattern), "%s default %s" % (conf_path, pattern)
    else:
        item, words = None, "no default set"
    if item is None:
        item = menu[0] if menu else None
        words += " -> the first entry" + (" (%s)" % item["id"] if item else ": no entries")
    else:
        words += " -> %s" % item["id"]
    how.append("systemd-boot: %s" % words)
    once = None
    if oneshot:
        hit = formats.match_loader_default(menu, oneshot)
        once = _entry_view(hit, "EFI variable LoaderEntryOneShot=%s (the next boot only)" % oneshot, hit is not None)
    return _entry_view(item, words, True), once, menu, conf_path


def distribution_answers(run_path, commands, timeout, path, problems):
    """needrestart, dnf needs-restarting and /run/reboot-required, each None where absent."""
    out = {"needrestart": None, "dnf_needs_restarting": None,
           "reboot_required": {"exists": False, "packages": []}}
    sentinel = os.path.join(run_path, "reboot-required")
    out["reboot_required"]["exists"] = os.path.lexists(sentinel)
    pkgs = _read(sentinel + ".pkgs", SMALL_LIMIT, problems)
    if pkgs is not None:
        seen = []
        for line in pkgs.splitlines():
            name = line.strip()
            if name and name not in seen:
                seen.append(name)
        out["reboot_required"]["packages"] = seen
    if not commands:
        return out
    nr = find_command("needrestart", path)
    if nr:
        # -b batch (never restarts anything), -k kernel check only, -r l list only
        res = _run([nr, "-b", "-k", "-r", "l"], timeout, problems)
        if res is not None:
            parsed = formats.parse_needrestart(res.text())
            parsed["rc"] = res.rc
            out["needrestart"] = parsed
    dnf = find_command("dnf", path)
    if dnf:
        # no repository is loaded: the rpm database and the boot time decide, no network
        res = _run([dnf, "-q", "--disablerepo=*", "needs-restarting", "-r"], timeout, problems)
        if res is not None:
            required, why = formats.parse_needs_restarting(res.rc, res.text(), res.text("stderr"))
            out["dnf_needs_restarting"] = {"required": required, "rc": res.rc, "msg": why}
    return out


def check_params(params):
    for key in ("boot_path", "proc_path", "sys_path", "run_path"):
        try:
            check_path(params[key], key)
        except UnsafeInput as e:
            raise BootFactsError(str(e))
    for esp in params["esp_paths"]:
        try:
            check_path(esp, "esp_paths")
        except UnsafeInput as e:
            raise BootFactsError(str(e))
    try:
        return check_timeout(params["timeout"], "timeout", minimum=0.1, maximum=600)
    except UnsafeInput as e:
        raise BootFactsError(str(e))


def boot_facts(params, path=None):
    """The module's result (without ``changed``). ``path``: the PATH commands are looked up on."""
    timeout = check_params(params)
    problems, how = [], []
    boot = params["boot_path"]
    running = _read(os.path.join(params["proc_path"], "sys", "kernel", "osrelease"), 4096, problems)
    running = (running or "").strip() or None
    bls = read_bls_entries(os.path.join(boot, "loader", "entries"), problems)
    env, env_path, cfg, cfg_path = grub_state(boot, problems, how)
    default = once = None
    menu = []
    loader = "unknown"
    sd_default, sd_once, sd_menu, sd_conf = resolve_systemd_boot(
        params["sys_path"], params["esp_paths"], problems, how)
    sd_firmware = (_efivar(params["sys_path"], "LoaderInfo", []) or "").startswith("systemd-boot")
    sd_found = sd_conf is not None or bool(sd_menu)
    if sd_firmware and not sd_found:
        problems.append("the LoaderInfo EFI variable names systemd-boot, but no loader.conf or entries were "
                        "found under %s" % ", ".join(params["esp_paths"]))
    if sd_found and (sd_firmware or cfg is None):
        loader, default, once, menu = "systemd-boot", sd_default, sd_once, sd_menu
    elif cfg is not None:
        loader = "grub-bls" if cfg["blscfg"] else "grub"
        default, once, menu = resolve_grub(env, cfg, cfg_path, bls, how)
    elif bls:
        loader = "grub-bls"
        menu = formats.bls_menu(bls)
    grubby = find_command("grubby", path) if params["commands"] and (bls or loader == "grub-bls") else None
    if grubby and loader in ("grub-bls", "unknown", "grub"):
        res = _run([grubby, "--default-kernel"], timeout, problems)
        line = next((ln.strip() for ln in (res.text() if res is not None else "").splitlines() if ln.strip()), "")
        kernel = formats.kernel_of_image(line)
        if res is not None and res.rc == 0 and kernel:
            words = "grubby --default-kernel: %s" % line
            how.append(words)
            if default is not None and default.get("kernel") and default["kernel"] != kernel:
                problems.append("grub.cfg and grubenv resolve to kernel %s, grubby --default-kernel says %s; "
                                "grubby's answer is used" % (default["kernel"], kernel))
            if default is None or default.get("kernel") != kernel:
                hit = next((it for it in menu if it.get("kernel") == kernel), None)
                default = dict(_entry_view(hit, words) or {"title": None, "id": None, "linux": line,
                                                           "matched": True}, kernel=kernel, how=words)
                loader = "grub-bls" if loader == "unknown" else loader
        elif res is not None:
            problems.append("grubby --default-kernel: exit code %s, %r" % (res.rc, line[:200]))
    if loader == "unknown":
        how.append("no boot loader state found (no grub.cfg or grubenv in %s/grub or %s/grub2, no systemd-boot "
                   "loader.conf, no BLS entries with grubby)" % (boot, boot))
    nxt = once if once is not None else default
    entries = [{"title": it.get("title"), "id": it.get("id"), "kernel": it.get("kernel")}
               for it in _flatten(menu)][:ENTRIES_REPORTED]
    return {
        "running": running,
        "loader": loader,
        "default": default,
        "once": once,
        "next_kernel": (nxt or {}).get("kernel"),
        "how": how,
        "entries": entries,
        "grubenv": {"path": env_path, "saved_entry": (env or {}).get("saved_entry"),
                    "next_entry": (env or {}).get("next_entry")} if env_path else None,
        "grub_cfg": cfg_path,
        "loader_conf": sd_conf,
        "distribution": distribution_answers(params["run_path"], params["commands"], timeout, path, problems),
        "problems": problems,
    }


def _flatten(menu):
    for it in menu:
        if it["type"] == "entry":
            yield it
        yield from _flatten(it.get("children") or [])
