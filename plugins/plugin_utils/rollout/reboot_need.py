# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Does a GPU node need a reboot? The decision behind kubegpu.fleet.reboot_need (controller side).

Inputs are what the action gathers from the node (which reboot sentinels exist, the names in
``/boot``, the running kernel release, kubegpu.fleet.driver_guard's result) and the Node object
from the API (a maintenance an earlier run left open). Reasons come back in words.

Installed kernels are read the way distributions lay ``/boot`` out:

* Debian: ``vmlinuz-6.1.0-27-amd64`` (plus ``config-``, ``initrd.img-``, ``System.map-`` of the
  same release); the symlinks ``/vmlinuz``, ``/vmlinuz.old`` (or ``/boot/vmlinuz``,
  ``/boot/vmlinuz.old``) point at the newest and the previous kernel;
* Ubuntu: ``vmlinuz-5.15.0-105-generic`` with the flavour after the ABI number (``generic``,
  ``lowlatency``, ``aws``, ...) and the ``vmlinuz``/``vmlinuz.old`` symlinks in ``/boot``;
* RHEL, Rocky, Alma, CentOS Stream, Fedora: ``vmlinuz-5.14.0-427.13.1.el9_4.x86_64`` plus the
  rescue image ``vmlinuz-0-rescue-<machine-id>`` (a copy of some kernel, never newer) and the
  hidden ``.vmlinuz-<release>.hmac`` (FIPS).

Only ``vmlinuz-<release>`` names count; rescue images, ``.old``/``.bak``/package-manager
leftovers and symlinks named otherwise never do. Releases are compared segment by segment,
numbers as numbers (``6.1.0-27`` is newer than ``6.1.0-9``, ``5.15.0-105-generic`` than
``5.15.0-97-generic``), and only kernels of the running kernel's flavour are compared with it
(a ``lowlatency`` kernel installed beside the running ``generic`` one is not an update of it).

That comparison is the fallback. What a node boots next is its boot loader's default entry, not
the newest file, so the kernel decision asks the boot loader first (kubegpu.fleet.boot_facts on
the node: GRUB's grubenv and grub.cfg, the BLS entries with grubby, systemd-boot):

* the default entry starts another kernel than the running one: a reboot is pending, whatever
  the flavour (``6.8.0-1015-nvidia`` set as default beside a running ``6.8.0-50-generic``) and
  also when the entry's kernel is older (an operator pinned it);
* the default entry starts the running kernel: no kernel reason, even where a newer kernel is
  installed; the reason says that a reboot would start the running kernel again;
* the boot loader's answer is unknown (no state found, unreadable, an entry without a kernel
  release): the ``/boot`` comparison above decides, and the reason says so.

The distribution's own answers come as further reasons: ``dnf needs-restarting -r`` saying a
reboot is required (core libraries as well as the kernel); needrestart's kernel status (an ABI or
version upgrade pending) where the boot loader's answer is unknown; where the boot loader's
default is the running kernel, needrestart's expected kernel (the newest image, its heuristic) is
noted, not counted, since a reboot would not start it. ``/run/reboot-required.pkgs`` names the
packages behind the sentinel.
"""
from __future__ import annotations

import base64
import posixpath
import re

from ansible.module_utils.common.text.converters import to_native

from ansible_collections.kubegpu.fleet.plugins.module_utils._common.safe_io import check_timeout, is_ascii_digits
from ansible_collections.kubegpu.fleet.plugins.module_utils.audit.probe_options import DRIVER_GUARD, passed_on
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.action import runner
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.catalog.module_args import args_with_catalog, redact_catalog
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.rollout.record import MAINTENANCE_ANNOTATION

MODES = ("needed", "always", "never")
DEFAULT_SENTINELS = ("/run/reboot-required", "/var/run/reboot-required")

_SEGMENT_RE = re.compile(r"[0-9]+|[A-Za-z]+")  # ASCII: \d would take digits int() reads oddly
_RHEL_FLAVOUR_RE = re.compile(r"\.(x86_64|aarch64|ppc64le|s390x|i686|noarch)(\+[A-Za-z0-9_]+)?$")
_DEB_FLAVOUR_RE = re.compile(r"-([A-Za-z][A-Za-z0-9-]*)$")
_LEFTOVER_SUFFIXES = (".old", ".bak", ".orig", ".hmac", ".sig", ".rpmsave", ".rpmnew", ".rpmorig", "~")
_LEFTOVER_MARKERS = (".dpkg-", ".ucf-")


class RebootNeedError(ValueError):
    """An input the decision cannot work with (named in the message)."""


def release_key(release):
    """Sort key of a kernel release: numeric segments compare as numbers and rank above
    alphabetic ones at the same position (rpm's rule), separators do not count."""
    key = []
    for seg in _SEGMENT_RE.findall(str(release or "")):
        key.append((1, int(seg), "") if is_ascii_digits(seg) else (0, 0, seg))
    return key


def flavour(release):
    """The build flavour of a release: ``x86_64`` (``x86_64+debug``) on RHEL-family kernels,
    ``amd#``/``cloud-amd#``/``generic``/``lowlatency`` on Debian and Ubuntu (numbers in the
    suffix are written ``#``: they are builds, not flavours); None when the release carries none
    (a vanilla ``6.18.0``)."""
    text = str(release or "")
    match = _RHEL_FLAVOUR_RE.search(text)
    if match:
        return match.group(0).lstrip(".")
    match = _DEB_FLAVOUR_RE.search(text)
    if match:
        # numbers inside the suffix are builds, not flavours (6.18.44-fc-v669 and -fc-v670)
        return re.sub(r"\d+", "#", match.group(1))
    return None


def kernel_release_of(entry):
    """The release of a ``/boot`` entry that is an installed kernel, else None.

    ``entry``: a file name or path, or a dict with ``path`` (``ansible.builtin.find``'s shape;
    ``islnk`` true means a symlink, which counts only when it is named ``vmlinuz-<release>``)."""
    if isinstance(entry, dict):
        entry = entry.get("path") or entry.get("name") or ""
    name = str(entry or "").rstrip("/").rsplit("/", 1)[-1]
    if not name.startswith("vmlinuz-"):
        return None           # vmlinuz, vmlinuz.old, .vmlinuz-*.hmac, initrd.img-*, config-*, System.map-*
    release = name[len("vmlinuz-"):]
    if not release or release.startswith("0-rescue-") or release.startswith("rescue"):
        return None
    if release.endswith(_LEFTOVER_SUFFIXES) or any(m in release for m in _LEFTOVER_MARKERS):
        return None
    if not is_ascii_digits(release[0]):
        return None
    return release


def installed_kernels(entries):
    """The installed kernel releases among ``/boot`` entries, newest first, without duplicates."""
    seen = []
    for entry in entries or []:
        release = kernel_release_of(entry)
        if release and release not in seen:
            seen.append(release)
    return sorted(seen, key=release_key, reverse=True)


def kernel_check(running, entries):
    """Is a newer kernel than the running one installed?

    Returns ``{pending: True/False/None, running, installed, compared, newest, reason}``;
    ``pending`` is None (unknown, never a reason to reboot) when the running release is unknown
    or ``/boot`` has no kernel of its flavour."""
    if isinstance(entries, (str, bytes)) or not isinstance(entries, (list, tuple, type(None))):
        raise RebootNeedError("the /boot entries must be a list of names or find results, got %r" % (entries,))
    if running is not None and not isinstance(running, str):
        raise RebootNeedError("the running kernel release must be a string, got %r" % (running,))
    running = (running or "").strip()
    if "/" in running or " " in running:
        raise RebootNeedError("%r is not a kernel release (a /boot path or a list passed as the release?)" % running)
    installed = installed_kernels(entries)
    out = {"pending": None, "running": running or None, "installed": installed, "compared": [],
           "newest": None, "reason": None}
    if not running:
        out["reason"] = "running kernel release unknown"
        return out
    mine = flavour(running)
    compared = [r for r in installed if flavour(r) == mine] if mine else list(installed)
    out["compared"] = compared
    if not compared:
        out["reason"] = ("no installed kernel of the running kernel's flavour %s in /boot" % mine if mine and installed
                         else "no installed kernel in /boot")
        return out
    newest = compared[0]
    out["newest"] = newest
    if release_key(newest) > release_key(running):
        out["pending"] = True
        out["reason"] = "kernel %s is installed, %s is running" % (newest, running)
    else:
        out["pending"] = False
        out["reason"] = ("the running kernel %s is the newest installed" % running if newest == running
                         else "no installed kernel is newer than the running %s (newest %s)" % (running, newest))
    return out


BOOT_HOW_ITEMS = 20
BOOT_TEXT_CHARS = 300


def _node_text(value, limit=BOOT_TEXT_CHARS):
    """A string from the node's boot_facts result, cut to ``limit`` characters; None otherwise."""
    return value[:limit] if isinstance(value, str) and value else None


def _node_texts(value):
    """The strings of a list from the node's boot_facts result, each cut to BOOT_TEXT_CHARS."""
    return [t for t in (_node_text(v) for v in (value if isinstance(value, list) else [])) if t]


def _release_or_none(value):
    """A kernel release as the node reported it, None when it is not one (a path, spaces, too long)."""
    value = _node_text(value, 200)
    if value is None or "/" in value or any(c.isspace() for c in value) or not is_ascii_digits(value[0]):
        return None
    return value


def boot_loader_check(running, boot, entries):
    """Does the next boot start another kernel than the running one?

    ``boot``: kubegpu.fleet.boot_facts's result from the node (None or a failed result when it
    was not read). Returns :func:`kernel_check`'s keys (``pending``, ``running``, ``installed``,
    ``compared``, ``newest``, ``reason``) plus ``next_kernel``, ``loader``, ``entry``, ``once``,
    ``how``, ``basis`` (``boot loader`` or ``/boot``) and ``notes``."""
    base = kernel_check(running, entries)
    boot = boot if isinstance(boot, dict) else {}
    how = _node_texts(boot.get("how"))
    problems = _node_texts(boot.get("problems"))
    nxt = _release_or_none(boot.get("next_kernel"))
    once = isinstance(boot.get("once"), dict)
    entry = boot.get("once") if once else boot.get("default")
    title = _node_text((entry or {}).get("title")) if isinstance(entry, dict) else None
    out = dict(base, next_kernel=nxt, loader=_node_text(boot.get("loader"), 40) or "unknown", entry=title,
               once=once, how=how[:BOOT_HOW_ITEMS], basis="/boot", notes=problems[:BOOT_HOW_ITEMS])
    if nxt is None or base["running"] is None:
        if not boot:
            return out        # the boot loader was not asked: the /boot comparison as it is
        if boot.get("failed"):
            why = "boot loader not read: %s" % (_node_text(boot.get("msg")) or "boot_facts failed")
        elif base["running"] is None:
            why = "running kernel release unknown"
        elif out["loader"] == "unknown":
            why = "no boot loader state found"
        else:
            why = "the %s default entry names no kernel release" % out["loader"]
        out["reason"] = "next boot's kernel unknown (%s); by /boot: %s" % (why, base["reason"])
        return out
    out["basis"] = "boot loader"
    running = base["running"]
    which = "next-boot-only entry" if once else "default entry"
    named = " (%s)" % title if title else ""
    if nxt != running:
        out["pending"] = True
        words = []
        if flavour(nxt) != flavour(running):
            words.append("another flavour")
        words.append("older" if release_key(nxt) < release_key(running) else "newer")
        out["reason"] = "the boot loader's %s%s starts kernel %s (%s), %s is running" % (
            which, named, nxt, ", ".join(words), running)
        return out
    out["pending"] = False
    newer = [r for r in base["installed"] if release_key(r) > release_key(running)]
    if newer:
        out["reason"] = ("the boot loader's %s%s starts the running kernel %s: a reboot would start it again "
                         "(%s installed, not the default)" % (which, named, running, ", ".join(newer)))
    else:
        out["reason"] = "the boot loader's %s%s starts the running kernel %s" % (which, named, running)
    return out


def distribution_reasons(boot, kernel):
    """``(pending reasons, notes)`` from the distribution's answers in boot_facts's result."""
    dist = (boot or {}).get("distribution") if isinstance(boot, dict) else None
    dist = dist if isinstance(dist, dict) else {}
    reasons, notes = [], []
    dnf = dist.get("dnf_needs_restarting") if isinstance(dist.get("dnf_needs_restarting"), dict) else {}
    if dnf.get("required") is True:
        reasons.append("dnf needs-restarting -r: reboot is required")
    nr = dist.get("needrestart") if isinstance(dist.get("needrestart"), dict) else {}
    if str(nr.get("ksta")) in ("2", "3"):
        status = "ABI-compatible upgrade pending" if str(nr.get("ksta")) == "2" else "version upgrade pending"
        said = "needrestart: kernel %s expected, %s running (%s)" % (
            _release_or_none(nr.get("kexp")) or "?", _release_or_none(nr.get("kcur")) or "?", status)
        if kernel.get("basis") == "boot loader" and kernel.get("pending") is False:
            notes.append("%s; not counted: the boot loader's default entry starts the running kernel" % said)
        else:
            reasons.append(said)
    return reasons, notes


def reboot_required_packages(boot):
    """The package names of ``/run/reboot-required.pkgs`` from boot_facts's result (at most 20)."""
    dist = (boot or {}).get("distribution") if isinstance(boot, dict) else None
    req = (dist or {}).get("reboot_required") if isinstance(dist, dict) else None
    pkgs = (req or {}).get("packages") if isinstance(req, dict) else None
    return [t for t in (_node_text(p, 120) for p in (pkgs if isinstance(pkgs, list) else [])) if t][:20]


def driver_check(guard):
    """kubegpu.fleet.driver_guard's result -> {pending: True/False/None, reason}."""
    guard = guard if isinstance(guard, dict) else {}
    if guard.get("failed") or guard.get("skipped"):
        return {"pending": None, "reason": "driver not checked: %s" % (guard.get("msg") or "driver_guard failed"),
                "driver_version": None, "kernel_module_version": None}
    pending = guard.get("reboot_pending")
    installed, loaded = guard.get("driver_version"), guard.get("kernel_module_version")
    if pending is True:
        reason = "driver %s installed, kernel module %s loaded" % (installed, loaded)
    elif pending is False:
        reason = "driver %s installed and loaded" % installed
    else:
        reason = "driver or kernel module version unknown (installed %s, loaded %s)" % (installed, loaded)
    return {"pending": pending if isinstance(pending, bool) else None, "reason": reason,
            "driver_version": installed, "kernel_module_version": loaded}


# gpu.xid actions (NVIDIA's Xid catalog, see docs/hardware-health.md) a node reboot clears.
GPU_XID_REBOOT_ACTIONS = ("reboot", "reset_gpu")


def gpu_reasons(findings):
    """Reboot reasons from a node's audit findings (``kubegpu_audit.findings``): each GPU whose
    row remap or page retirement waits for a GPU reset (gpu.reset_required; rebooting the
    drained node resets every GPU) and each GPU whose worst Xid since boot calls for a GPU reset
    or a reboot (gpu.xid). Findings of any other id or shape give nothing."""
    out = []
    for f in findings if isinstance(findings, list) else []:
        if not isinstance(f, dict) or not isinstance(f.get("evidence"), dict):
            continue
        ev = f["evidence"]
        gpus = [g for g in ev.get("gpus") or [] if isinstance(g, dict)]
        if f.get("id") == "gpu.reset_required":
            for g in gpus:
                why = "; ".join(str(r) for r in g.get("reasons") or []) or "GPU reset required"
                out.append("%s: %s" % (g.get("gpu") or g.get("bus_id") or "GPU", why))
        elif f.get("id") == "gpu.xid":
            for g in gpus:
                if g.get("action") not in GPU_XID_REBOOT_ACTIONS:
                    continue
                xids = "/".join(str(x) for x in g.get("action_xids") or []) or "?"
                out.append("GPU %s: Xid %s since boot (NVIDIA: %s)" % (
                    g.get("bus_id"), xids, "reset the GPU" if g["action"] == "reset_gpu" else "reboot"))
    return out


def open_maintenance(node, annotation=MAINTENANCE_ANNOTATION):
    """The value of the maintenance annotation an earlier run left on the Node, else None."""
    meta = (node or {}).get("metadata") if isinstance(node, dict) else None
    annotations = (meta or {}).get("annotations") if isinstance(meta, dict) else None
    value = (annotations or {}).get(annotation) if isinstance(annotations, dict) else None
    return value if value else None


def decide(*, mode="needed", sentinels=None, guard=None, running=None, boot_entries=None, node=None,
           annotation=MAINTENANCE_ANNOTATION, required=False, required_reasons=None, check_kernel=True,
           check_driver=True, planned=False, boot=None):
    """The reboot decision for one node (keyword arguments only: no caller can swap two of them).

    ``sentinels``: the reboot sentinel paths that exist on the node (``/run/reboot-required``
    and the like; the driver role writes ``/run/reboot-required``). ``required`` and
    ``required_reasons``: what an earlier role of the same play recorded
    (``kubegpu_reboot_required``, ``kubegpu_reboot_reasons``). ``boot``: kubegpu.fleet.boot_facts's
    result (the boot loader's next kernel and the distribution's answers; None: not read).

    Returns ``{reboot, resume, reasons, pending_reasons, mode, planned, kernel, driver,
    sentinels, msg}``: ``pending_reasons`` why a reboot is pending whatever the mode,
    ``reasons`` why this run reboots (``reboot`` true), ``resume`` whether a maintenance left
    open on the Node is to be finished.
    """
    mode = str(mode or "").strip()
    if mode not in MODES:
        raise RebootNeedError("kubegpu_reboot must be one of %s, got %r" % (", ".join(MODES), mode))
    pending = []
    for reason in (required_reasons or []) if required else []:
        if str(reason) and str(reason) not in pending:
            pending.append(str(reason))
    if required and not pending:
        pending.append("kubegpu_reboot_required is set")
    found = []
    pkgs = reboot_required_packages(boot)
    for path in sentinels or []:
        if path and path not in found:
            found.append(str(path))
            pending.append("sentinel %s%s" % (path, " (packages: %s)" % ", ".join(pkgs)
                                              if pkgs and str(path).endswith("/reboot-required") else ""))
    driver = driver_check(guard) if check_driver else {"pending": None, "reason": "not checked"}
    if driver["pending"] is True:
        pending.append(driver["reason"])
    kernel = {"pending": None, "reason": "not checked"}
    if check_kernel:
        kernel = boot_loader_check(running, boot, boot_entries)
    if kernel["pending"] is True:
        pending.append(kernel["reason"])
    if check_kernel:
        more, notes = distribution_reasons(boot, kernel)
        pending.extend(r for r in more if r not in pending)
        kernel["notes"] = kernel.get("notes", []) + notes
    resume_value = open_maintenance(node, annotation)
    if mode == "always":
        reasons = ["forced (kubegpu_reboot=always)"] + pending
        reboot = True
    elif mode == "needed":
        reasons = list(pending)
        reboot = bool(pending)
    else:
        reasons, reboot = [], False
    resume = resume_value is not None
    if reboot:
        msg = "reboot: %s" % "; ".join(reasons)
    elif pending:
        msg = "no reboot: kubegpu_reboot=never holds back a pending reboot (%s)" % "; ".join(pending)
    else:
        msg = "no reboot needed (kubegpu_reboot=%s): %s" % (mode, "; ".join(
            r for r in (kernel.get("reason"), driver.get("reason")) if r) or "nothing pending")
    if resume:
        msg = "resuming an unfinished maintenance (%s annotation); %s" % (annotation, msg)
    boot_id = ((((node or {}).get("status") or {}).get("nodeInfo") or {}).get("bootID")
               if isinstance(node, dict) else None)
    return {"reboot": reboot, "resume": resume, "reasons": reasons, "boot_id": boot_id or "", "pending_reasons": pending, "mode": mode,
            "planned": bool(planned), "kernel": kernel, "driver": driver, "sentinels": found,
            "maintenance": resume_value, "msg": msg}


# ------------------------------------------------------------------ kubegpu.fleet.reboot_need
# What decides the reboot is read on the node by ansible.builtin.find, stat and slurp, by
# kubegpu.fleet.boot_facts and by kubegpu.fleet.driver_guard; the decision above is made on the
# controller.

FACT = "kubegpu_rolling_reboot_need"
NEED_SPEC = {
    "mode": {"type": "str", "default": "needed", "choices": list(MODES)},
    "sentinels": {"type": "list", "elements": "str", "default": list(DEFAULT_SENTINELS)},
    "check_kernel": {"type": "bool", "default": True},
    "check_driver": {"type": "bool", "default": True},
    "boot_path": {"type": "str", "default": "/boot"},
    # passed on to driver_guard (state=audit): its defaults
    "proc_path": passed_on(DRIVER_GUARD, "proc_path"),
    "nvidia_proc_path": {"type": "str"},
    "dev_path": passed_on(DRIVER_GUARD, "dev_path"),
    "driver_root": passed_on(DRIVER_GUARD, "driver_root"),
    "backend": passed_on(DRIVER_GUARD, "backend"),
    "timeout": passed_on(DRIVER_GUARD, "timeout"),
    "node": {"type": "dict", "default": {}},
    "annotation": {"type": "str", "default": MAINTENANCE_ANNOTATION},
    "required": {"type": "bool", "default": False},
    "required_reasons": {"type": "list", "elements": "str", "default": []},
    "planned": {"type": "bool", "default": False},
}
OSRELEASE_MAX_BYTES = 4096


def find_args(boot_path, sentinels):
    """One ``ansible.builtin.find`` over /boot and the sentinels' directories."""
    dirs, patterns = [boot_path], ["vmlinuz-*"]
    for path in sentinels:
        parent, base = posixpath.split(path)
        if parent not in dirs:
            dirs.append(parent)
        if base not in patterns:
            patterns.append(base)
    return {"paths": dirs, "patterns": patterns, "file_type": "any", "hidden": False, "recurse": False,
            "follow": False, "get_checksum": False}


def split_find(files, boot_path, sentinels):
    """``ansible.builtin.find``'s files -> (the /boot kernel entries, the sentinels that exist).

    A sentinel reached through two paths (``/var/run`` is a symlink to ``/run``) counts once."""
    boot = posixpath.normpath(boot_path)
    wanted = [posixpath.normpath(s) for s in sentinels]
    kernels, found, inodes = [], [], set()
    for item in files or []:
        path = posixpath.normpath(str(item.get("path") or ""))
        if posixpath.dirname(path) == boot and posixpath.basename(path).startswith("vmlinuz-") \
                and item.get("isreg"):  # a FIFO, directory or (dangling, looping) link is no kernel image
            kernels.append({"path": path, "islnk": bool(item.get("islnk"))})
    by_path = dict((posixpath.normpath(str(i.get("path") or "")), i) for i in files or [])
    for path in wanted:
        item = by_path.get(path)
        if item is None:
            continue
        ident = (item.get("dev"), item.get("inode"))
        if ident != (None, None) and ident in inodes:
            continue
        inodes.add(ident)
        found.append(path)
    return kernels, found


def running_release(task, proc_path):
    """The running kernel's release from ``<proc_path>/sys/kernel/osrelease`` on the node, None when
    it cannot be read; raises ActionFailed when the path holds something else than that small file."""
    osrelease = posixpath.join(proc_path, "sys/kernel/osrelease")
    # slurp opens whatever is there: a FIFO would block it, a huge file be read whole.
    st = task.module("ansible.builtin.stat", {"path": osrelease, "get_checksum": False, "get_mime": False,
                                              "get_attributes": False})
    st = st.get("stat") or {}
    if st.get("exists") and (not st.get("isreg") or st.get("size", 0) > OSRELEASE_MAX_BYTES):
        raise runner.ActionFailed("%s is not the kernel's release file (%s)" % (
            osrelease, "%d bytes" % st.get("size", 0) if st.get("isreg") else "not a regular file"))
    if not st.get("exists"):
        return None
    slurp = task.module("ansible.builtin.slurp", {"src": osrelease})
    if slurp.get("failed"):
        return None
    return to_native(base64.b64decode(slurp.get("content") or "")).strip() or None


def driver_guard(task, args):
    """kubegpu.fleet.driver_guard's audit on the node, with the bundled catalog (redacted from its result)."""
    module_args = {"state": "audit", "proc_path": args["nvidia_proc_path"] or args["proc_path"],
                   "dev_path": args["dev_path"], "driver_root": args["driver_root"], "backend": args["backend"],
                   "timeout": args["timeout"]}
    module_args, catalog, error = args_with_catalog(module_args, "reboot_need")
    if error is not None:
        return {"failed": True, "msg": error}
    out = task.module("kubegpu.fleet.driver_guard", module_args)
    redact_catalog(out, catalog)
    return out


def boot_facts(task, args, sentinels):
    """kubegpu.fleet.boot_facts on the node: the kernel its boot loader starts next and the
    distribution's answers (its failure is a result the decision words, never a task failure)."""
    run_path = posixpath.dirname(sentinels[0]) if sentinels else "/run"
    return task.module("kubegpu.fleet.boot_facts", {
        "boot_path": args["boot_path"], "proc_path": args["proc_path"], "run_path": run_path,
        "timeout": min(max(args["timeout"], 0.1), 600.0)})


def need_work(task, args):
    """kubegpu.fleet.reboot_need: gather on the node, decide, set the fact."""
    bad = [p for p in args["sentinels"] + [args["boot_path"], args["proc_path"]] if not str(p).startswith("/")]
    if bad:
        raise runner.ActionFailed("sentinels, boot_path and proc_path must be absolute paths: %s" % ", ".join(bad))
    sentinels = [posixpath.normpath(p) for p in args["sentinels"]]
    args["timeout"] = check_timeout(args["timeout"], "timeout")
    found = task.module("ansible.builtin.find", find_args(args["boot_path"], sentinels))
    if found.get("failed"):
        raise runner.ActionFailed("cannot list %s and the reboot sentinels on the node: %s"
                                  % (args["boot_path"], found.get("msg")))
    kernels, present = split_find(found.get("files"), args["boot_path"], sentinels)
    running = running_release(task, args["proc_path"]) if args["check_kernel"] else None
    boot = boot_facts(task, args, sentinels) if args["check_kernel"] else None
    guard = driver_guard(task, args) if args["check_driver"] else {}
    try:
        need = decide(mode=args["mode"], sentinels=present, guard=guard, running=running, boot_entries=kernels,
                      node=args["node"], annotation=args["annotation"], required=args["required"],
                      required_reasons=args["required_reasons"], check_kernel=args["check_kernel"],
                      check_driver=args["check_driver"], planned=args["planned"], boot=boot)
    except RebootNeedError as exc:
        raise runner.ActionFailed(str(exc))
    msg = need["msg"]
    if task.check_mode and need["reboot"]:
        name = (args["node"].get("metadata") or {}).get("name") or task.hostname or "the node"
        msg = "check mode: would reboot %s (%s)" % (name, "; ".join(need["reasons"]))
    return {"changed": False, "need": need, "msg": msg, "ansible_facts": {FACT: need}}


ACTION = runner.Action(NEED_SPEC, need_work)
