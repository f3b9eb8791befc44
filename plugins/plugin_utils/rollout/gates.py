# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What must hold before a node of a rollout starts, besides a free slot: kured's gates.

* Maintenance windows (kured's ``--reboot-days``, ``--start-time``, ``--end-time``,
  ``--time-zone``): a list of ``{days, start, end, timezone}``; a node starts only while one is
  open. ``end`` before ``start`` is a window over midnight (it belongs to the day it starts on);
  ``start`` equal to ``end`` is the whole day. Time zones are IANA names (``zoneinfo``: the
  controller's tz database), ``UTC`` by default. No windows: always open.
* Alerts (kured's ``--prometheus-url``, ``--alert-filter-regexp``, ``--alert-filter-match-only``,
  ``--alert-firing-only``): Prometheus's HTTP API ``GET /api/v1/alerts``; an alert whose name
  the filter does not exclude holds new starts. An answer that cannot be read holds them too.

The document is fetched with a deadline and a size bound, and parsed by parse_bound (the one
JSON parser for data from outside the controller).
"""
from __future__ import annotations

import datetime
import re
import urllib.error

from ansible.module_utils.urls import open_url

from ansible_collections.kubegpu.fleet.plugins.plugin_utils import parse_bound

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_DAY_ALIASES = dict([(d, i) for i, d in enumerate(DAYS)] + [(n, i) for i, n in enumerate(
    ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"))])
_HHMM_RE = re.compile(r"^([01]?\d|2[0-3]):([0-5]\d)$")
ALERTS_MAX_BYTES = 8 << 20
ALERTS_PATH = "/api/v1/alerts"


class GateError(ValueError):
    """A window or alert setting the gates cannot work with."""


def _zone(name):
    try:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError  # pylint: disable=import-outside-toplevel
    except ImportError:  # pragma: no cover - Python < 3.9 controllers are not supported by ansible-core
        raise GateError("maintenance windows need Python 3.9+ (zoneinfo) on the controller")
    try:
        return ZoneInfo(str(name))
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise GateError("unknown time zone %r in a maintenance window (%s); use an IANA name such as "
                        "Europe/Berlin or UTC" % (name, exc))


def _minutes(text, what):
    match = _HHMM_RE.match(str(text or "").strip())
    if not match:
        raise GateError("%s must be HH:MM (24 h), got %r" % (what, text))
    return int(match.group(1)) * 60 + int(match.group(2))


def normalize_windows(windows):
    """The windows as ``[{days: [0..6], start: minutes, end: minutes, timezone, text}]``."""
    if windows in (None, "", []):
        return []
    if isinstance(windows, dict):
        windows = [windows]
    if not isinstance(windows, list):
        raise GateError("maintenance windows must be a list of {days, start, end, timezone}, got %r" % (windows,))
    out = []
    for n, win in enumerate(windows):
        if not isinstance(win, dict):
            raise GateError("maintenance window %d must be a mapping, got %r" % (n, win))
        unknown = sorted(set(win) - {"days", "start", "end", "timezone"})
        if unknown:
            raise GateError("maintenance window %d: unknown keys %s (days, start, end, timezone)" % (n, ", ".join(unknown)))
        days = win.get("days", list(DAYS))
        if isinstance(days, str):
            days = [d for d in re.split(r"[,\s]+", days) if d]
        if not isinstance(days, list) or not days:
            raise GateError("maintenance window %d: days must be a list of mon..sun" % n)
        idx = []
        for day in days:
            key = str(day).strip().lower()
            if key not in _DAY_ALIASES:
                raise GateError("maintenance window %d: %r is not a day (mon, tue, wed, thu, fri, sat, sun)" % (n, day))
            if _DAY_ALIASES[key] not in idx:
                idx.append(_DAY_ALIASES[key])
        start = _minutes(win.get("start", "00:00"), "maintenance window %d start" % n)
        end = _minutes(win.get("end", "00:00"), "maintenance window %d end" % n)
        tz = str(win.get("timezone") or "UTC")
        _zone(tz)
        text = "%s %02d:%02d-%02d:%02d %s" % (
            ",".join(DAYS[i] for i in sorted(idx)), start // 60, start % 60, end // 60, end % 60, tz)
        out.append({"days": sorted(idx), "start": start, "end": end, "timezone": tz, "text": text})
    return out


def _open_at(win, ts):
    local = datetime.datetime.fromtimestamp(ts, _zone(win["timezone"]))
    minute = local.hour * 60 + local.minute
    today, yesterday = local.weekday(), (local.weekday() - 1) % 7
    start, end = win["start"], win["end"]
    if start == end:                       # the whole day
        return today in win["days"]
    if start < end:
        return today in win["days"] and start <= minute < end
    # over midnight: the evening of a listed day, or the morning after it
    return (today in win["days"] and minute >= start) or (yesterday in win["days"] and minute < end)


def window_check(windows, now, horizon=8 * 86400):
    """Is a window open at ``now`` (epoch seconds)? ``{open, window, next_open, msg}``;
    ``next_open``: when one opens next (epoch seconds, minute resolution), None if open or none
    within ``horizon`` seconds."""
    wins = normalize_windows(windows)
    if not wins:
        return {"open": True, "window": None, "next_open": None, "msg": "no maintenance window set: always open"}
    for win in wins:
        if _open_at(win, now):
            return {"open": True, "window": win["text"], "next_open": None,
                    "msg": "inside the maintenance window %s" % win["text"]}
    step = 60 - int(now) % 60
    ts = int(now) + step
    nxt = None
    while ts <= now + horizon:
        if any(_open_at(w, ts) for w in wins):
            nxt = ts
            break
        ts += 60
    when = (datetime.datetime.fromtimestamp(nxt, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            if nxt is not None else "not within %d days" % (horizon // 86400))
    return {"open": False, "window": None, "next_open": nxt,
            "msg": "outside the maintenance window(s) %s; the next opens %s"
                   % ("; ".join(w["text"] for w in wins), when)}


# ------------------------------------------------------------------------------------ alerts

def compile_filter(pattern):
    if pattern in (None, ""):
        return None
    try:
        return re.compile(str(pattern))
    except re.error as exc:
        raise GateError("the alert filter %r is not a regular expression: %s" % (pattern, exc))


def alerts_check(doc, pattern=None, match_only=False, firing_only=False):
    """Which alerts hold new starts, from Prometheus's ``/api/v1/alerts`` answer.

    kured's rules: an alert whose name matches ``pattern`` is ignored, unless ``match_only``,
    where only the matching alerts count; with ``firing_only`` pending alerts never count.
    Returns ``{ok, blocking, ignored, msg}``; an answer of another shape is not ok."""
    regex = compile_filter(pattern)
    if not isinstance(doc, dict) or doc.get("status") != "success" or not isinstance(doc.get("data"), dict) \
            or not isinstance(doc["data"].get("alerts"), list):
        error = doc.get("error") if isinstance(doc, dict) else None
        return {"ok": False, "blocking": [], "ignored": [],
                "msg": "Prometheus did not answer with a list of alerts%s" % (": %s" % error if error else "")}
    blocking, ignored = [], []
    for alert in doc["data"]["alerts"]:
        if not isinstance(alert, dict):
            continue
        labels = alert.get("labels") if isinstance(alert.get("labels"), dict) else {}
        name = str(labels.get("alertname") or "")
        state = str(alert.get("state") or "")
        matched = bool(regex.search(name)) if regex is not None else False
        counts = matched if match_only else not matched
        if firing_only and state != "firing":
            counts = False
        (blocking if counts else ignored).append({"alertname": name, "state": state})
    names = sorted(set("%s (%s)" % (a["alertname"], a["state"]) for a in blocking))
    if blocking:
        msg = "alerts active in Prometheus hold new starts: %s" % ", ".join(names)
    else:
        msg = "no alert holds new starts (%d active, ignored by the filter)" % len(ignored) if ignored else \
            "no active alerts"
    return {"ok": not blocking, "blocking": blocking, "ignored": ignored, "msg": msg}


def _open_url(url, timeout, validate_certs, ca_cert):
    """ansible-core's HTTP client: the controller's proxy settings, CA bundle and TLS checks."""
    return open_url(url, headers={"Accept": "application/json"}, timeout=timeout,
                    validate_certs=validate_certs, ca_path=ca_cert, follow_redirects="safe")


def fetch_alerts(url, timeout=10.0, validate_certs=True, ca_cert=None, max_bytes=ALERTS_MAX_BYTES, opener=None):
    """GET ``<url>/api/v1/alerts`` within ``timeout`` seconds; the parsed document, or
    ``GateError`` saying why not (unreachable, an HTTP error, too large, not JSON)."""
    base = str(url or "").rstrip("/")
    if not re.match(r"^https?://[^\s/]+", base):
        raise GateError("the Prometheus URL must be http(s)://host[:port][/prefix], got %r" % (url,))
    target = base + ALERTS_PATH
    try:
        opened = (opener or _open_url)(target, timeout=timeout, validate_certs=validate_certs, ca_cert=ca_cert)
        with opened as resp:
            body = resp.read(max_bytes + 1)
    except urllib.error.HTTPError as exc:
        raise GateError("Prometheus %s answered HTTP %s" % (target, exc.code))
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise GateError("cannot read %s: %s" % (target, getattr(exc, "reason", None) or exc))
    if len(body) > max_bytes:
        raise GateError("%s answered more than %d bytes" % (target, max_bytes))
    try:
        return parse_bound.load_json(body, "the alerts from %s" % target, max_bytes=max_bytes)
    except parse_bound.ParseError as exc:
        raise GateError(str(exc))
