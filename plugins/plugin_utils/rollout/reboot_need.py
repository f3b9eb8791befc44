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
"""
from __future__ import annotations

import re

from ansible_collections.kubegpu.fleet.plugins.module_utils._common.safe_io import is_ascii_digits

MODES = ("needed", "always", "never")
DEFAULT_SENTINELS = ("/run/reboot-required", "/var/run/reboot-required")
MAINTENANCE_ANNOTATION = "kubegpu.io/maintenance"

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
           check_driver=True, planned=False):
    """The reboot decision for one node (keyword arguments only: no caller can swap two of them).

    ``sentinels``: the reboot sentinel paths that exist on the node (``/run/reboot-required``
    and the like; the driver role writes ``/run/reboot-required``). ``required`` and
    ``required_reasons``: what an earlier role of the same play recorded
    (``kubegpu_reboot_required``, ``kubegpu_reboot_reasons``).

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
    for path in sentinels or []:
        if path and path not in found:
            found.append(str(path))
            pending.append("sentinel %s" % path)
    driver = driver_check(guard) if check_driver else {"pending": None, "reason": "not checked"}
    if driver["pending"] is True:
        pending.append(driver["reason"])
    kernel = kernel_check(running, boot_entries) if check_kernel else {"pending": None, "reason": "not checked"}
    if kernel["pending"] is True:
        pending.append(kernel["reason"])
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
