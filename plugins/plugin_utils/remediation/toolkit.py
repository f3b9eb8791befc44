# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""How to fix a node's NVIDIA Container Toolkit findings (controller side, pure functions).

Input: the catalog matches of the node's toolkit version (``module_utils/catalog/evaluate.evaluate`` matches, or
the ``advisories`` of a ``security.container-toolkit`` / ``defect.container-toolkit``
finding: both carry ``id``, ``cves``, ``fixed``). Output: one plan with

- ``target``: the toolkit version to upgrade to - the highest first fixed release among the
  matches (a fix of a later advisory fixes the earlier ones of the same line), or a pinned
  target when it is not below that;
- ``packages``: the packages NVIDIA requires at one version (nvidia-container-toolkit,
  nvidia-container-toolkit-base, libnvidia-container-tools, libnvidia-container1);
- ``mitigations``: config.toml settings (``table.key`` -> value) that mitigate matches where the
  upgrade is not allowed, and ``unmitigated``: the matches no setting covers, with the reason.

Mitigations, from NVIDIA's bulletins and the toolkit's source:

- CVE-2025-23266 (bulletin 5659, July 2025 revision): set ``features.disable-cuda-compat-lib-hook
  = true`` in /etc/nvidia-container-runtime/config.toml (the bulletin printed
  /etc/nvidia-container-toolkit/config.toml; the maintainer corrected the path in
  NVIDIA/nvidia-container-toolkit#1208). The flag stops the runtime from injecting the
  enable-cuda-compat hook; the hook and the flag exist from toolkit 1.17.5 (before it only CDI
  mode is affected, through other hooks, and the flag does not help). It covers legacy mode and
  the runtime's automatic CDI spec; a static CDI spec (/etc/cdi, /var/run/cdi) keeps the hook
  until it is regenerated without it, so in CDI mode the match stays ``unmitigated``. Bulletin
  revision 2.0.0 dropped the mitigation and the reporter says it can be bypassed: the upgrade
  is the fix.
- CVE-2024-0132 / CVE-2024-0133 (bulletin 5582): "does not impact use cases where CDI is used":
  the mitigation is CDI mode, a change of how every GPU container gets its devices - reported,
  never switched automatically.
- Everything else: upgrade only.
"""
from __future__ import annotations

from ansible_collections.kubegpu.fleet.plugins.module_utils._common.versions import SemVer

TOOLKIT_PACKAGES = ("nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
                    "libnvidia-container1")
CONFIG_PATH = "/etc/nvidia-container-runtime/config.toml"
COMPAT_HOOK_FLAG = "features.disable-cuda-compat-lib-hook"
COMPAT_HOOK_FROM = SemVer("1.17.5")
CVE_COMPAT_HOOK = "CVE-2025-23266"
CVE_CDI_MITIGATED = ("CVE-2024-0132", "CVE-2024-0133")


class FixError(ValueError):
    """The plan cannot be made; the message names the bad value."""


def _semver(text, what):
    try:
        return SemVer(str(text).lstrip("v").split("-", maxsplit=1)[0] if text is not None else "")
    except ValueError:
        raise FixError("%s %r is not a toolkit version (1.17.8)" % (what, text))


def highest_fixed(matches):
    """The highest ``fixed`` among the matches (as written in the catalog), or None."""
    best = None
    for m in matches or ():
        fixed = m.get("fixed") if isinstance(m, dict) else None
        if not fixed:
            continue
        v = _semver(fixed, "fixed version of %s" % m.get("id"))
        if best is None or v > best[0]:
            best = (v, str(fixed))
    return best[1] if best else None


def fix_plan(matches, version, injection_mode=None, pinned_target=None):
    """The toolkit fix for ``matches`` on a node running toolkit ``version``.

    ``injection_mode``: ``legacy``, ``cdi`` or None (unknown) from the node's stack facts;
    ``pinned_target``: an operator's target version (must not be below the fixed one).
    Raises FixError for a version that does not parse or a pinned target below the fix.
    """
    installed = _semver(version, "installed toolkit version")
    matches = [m for m in matches or () if isinstance(m, dict) and m.get("id")]
    needed = highest_fixed(matches)
    target = needed
    if pinned_target:
        pinned = _semver(pinned_target, "kubegpu_toolkit_target")
        if needed and pinned < _semver(needed, "fixed version"):
            raise FixError("kubegpu_toolkit_target %s is below %s, the first release that fixes %s"
                           % (pinned_target, needed, ", ".join(sorted(m["id"] for m in matches))))
        target = str(pinned_target)
    if target and _semver(target, "target") <= installed:
        target = None  # nothing newer to install: the installed version is the target already
    mitigations = {}
    unmitigated = []
    for m in matches:
        cves = set(m.get("cves") or [])
        if CVE_COMPAT_HOOK in cves and installed >= COMPAT_HOOK_FROM and injection_mode != "cdi":
            mitigations[COMPAT_HOOK_FLAG] = True
            others = sorted(cves - {CVE_COMPAT_HOOK})
            if others:
                unmitigated.append({"id": m["id"], "cves": others, "reason": "no configuration mitigation "
                                    "for %s: upgrade" % ", ".join(others)})
            continue
        if CVE_COMPAT_HOOK in cves:
            reason = ("toolkit %s in CDI mode: the CDI spec carries the hook; regenerate it without the "
                      "enable-cuda-compat hook or upgrade" % installed.text if injection_mode == "cdi" else
                      "toolkit %s is older than 1.17.5, which has no disable-cuda-compat-lib-hook flag: "
                      "upgrade" % installed.text)
        elif cves & set(CVE_CDI_MITIGATED):
            reason = ("the advisory's mitigation is CDI mode (nvidia-container-runtime.mode = \"cdi\" with a "
                      "generated CDI spec): a change of every GPU container's device injection, not made "
                      "automatically - upgrade or switch deliberately")
        else:
            reason = "no configuration mitigation is published: upgrade"
        unmitigated.append({"id": m["id"], "cves": sorted(cves), "reason": reason})
    return {"version": installed.text, "target": target, "fixed": needed,
            "packages": list(TOOLKIT_PACKAGES), "config_path": CONFIG_PATH,
            "mitigations": mitigations, "unmitigated": unmitigated,
            "advisories": sorted(m["id"] for m in matches)}


def merge(a, b):
    """One plan from two (a security and a defect finding of the same toolkit): the higher
    target, every mitigation and unmitigated match, every advisory."""
    if not a or a.get("error"):
        return b if b and not a else a
    if not b or b.get("error"):
        return a if not b else b
    out = dict(a)
    targets = [t for t in (a.get("target"), b.get("target")) if t]
    out["target"] = max(targets, key=lambda t: _semver(t, "target")) if targets else None
    fixed = [t for t in (a.get("fixed"), b.get("fixed")) if t]
    out["fixed"] = max(fixed, key=lambda t: _semver(t, "fixed version")) if fixed else None
    out["mitigations"] = dict(a.get("mitigations") or {}, **(b.get("mitigations") or {}))
    out["unmitigated"] = list(a.get("unmitigated") or []) + [u for u in b.get("unmitigated") or []
                                                             if u not in (a.get("unmitigated") or [])]
    out["advisories"] = sorted(set(a.get("advisories") or []) | set(b.get("advisories") or []))
    return out
