"""rollout_gates: maintenance windows (days, times, time zones, over midnight) and the Prometheus
alert gate's filter rules (kured's); the real Prometheus server is in tests/lab/test_rollout_budget.py."""
import calendar
import io
import json

import pytest

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.rollout import gates as g


def at(text):
    """Epoch seconds of a UTC time 'YYYY-MM-DD HH:MM'."""
    day, hm = text.split()
    y, mo, d = (int(x) for x in day.split("-"))
    h, mi = (int(x) for x in hm.split(":"))
    return calendar.timegm((y, mo, d, h, mi, 0, 0, 0, 0))


NIGHTS = [{"days": ["mon", "tue", "wed", "thu"], "start": "22:00", "end": "05:00", "timezone": "Europe/Berlin"}]


def test_no_window_is_always_open():
    assert g.window_check([], at("2027-01-11 14:00"))["open"] is True


@pytest.mark.parametrize("utc, is_open", [
    ("2027-01-11 20:59", False),   # Monday 21:59 in Berlin (UTC+1 in January)
    ("2027-01-11 21:00", True),    # Monday 22:00
    ("2027-01-12 03:59", True),    # Tuesday 04:59: the Monday night
    ("2027-01-12 04:00", False),   # Tuesday 05:00: closed
    ("2027-01-14 21:30", True),    # Thursday night
    ("2027-01-15 03:00", True),    # Friday 04:00: still Thursday's night
    ("2027-01-15 21:30", False),   # Friday night: not listed
    ("2027-01-17 22:00", False),   # Sunday 23:00
    ("2027-07-12 20:30", True),    # Monday 22:30 in summer (UTC+2)
])
def test_a_window_over_midnight_in_a_time_zone(utc, is_open):
    assert g.window_check(NIGHTS, at(utc))["open"] is is_open


def test_a_closed_window_says_when_the_next_one_opens():
    out = g.window_check(NIGHTS, at("2027-01-15 12:00"))   # Friday noon
    assert not out["open"] and out["next_open"] == at("2027-01-18 21:00")   # Monday 22:00 Berlin
    assert "mon,tue,wed,thu 22:00-05:00 Europe/Berlin" in out["msg"] and "2027-01-18T21:00:00Z" in out["msg"]
    whole_day = g.window_check([{"days": "sat,sun"}], at("2027-01-16 12:00"))
    assert whole_day["open"] and whole_day["window"] == "sat,sun 00:00-00:00 UTC"


@pytest.mark.parametrize("bad, why", [
    ({"days": ["someday"]}, "is not a day"),
    ({"start": "25:00"}, "HH:MM"),
    ({"start": "7"}, "HH:MM"),
    ({"timezone": "Mars/Olympus"}, "unknown time zone"),
    ({"days": []}, "days must be"),
    ({"from": "22:00"}, "unknown keys from"),
])
def test_bad_windows_are_refused_with_the_reason(bad, why):
    with pytest.raises(g.GateError) as err:
        g.normalize_windows([bad])
    assert why in str(err.value)


def alerts(*items):
    return {"status": "success", "data": {"alerts": [
        {"labels": {"alertname": name, "severity": "warning"}, "state": state} for name, state in items]}}


def test_alert_rules_are_kureds():
    doc = alerts(("Watchdog", "firing"), ("GPUXidErrors", "pending"))
    assert not g.alerts_check(doc)["ok"]
    # the filter names alerts to ignore
    out = g.alerts_check(doc, "^Watchdog$")
    assert not out["ok"] and [a["alertname"] for a in out["blocking"]] == ["GPUXidErrors"]
    assert g.alerts_check(doc, "^Watchdog$", firing_only=True)["ok"]
    # match-only: only the matching alerts hold
    assert g.alerts_check(doc, "^GPU", match_only=True)["blocking"] == [{"alertname": "GPUXidErrors", "state": "pending"}]
    assert g.alerts_check(doc, "^Node", match_only=True)["ok"]
    assert g.alerts_check(alerts())["msg"] == "no active alerts"


@pytest.mark.parametrize("doc", [None, [], {"status": "error", "error": "bad"}, {"status": "success", "data": {}}])
def test_an_answer_of_another_shape_holds_new_starts(doc):
    assert not g.alerts_check(doc)["ok"]


def test_a_bad_filter_is_refused():
    with pytest.raises(g.GateError):
        g.compile_filter("(")


class Resp(io.BytesIO):
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def test_fetch_bounds_the_answer_and_names_what_failed():
    seen = {}

    def opener(url, timeout, validate_certs, ca_cert):
        seen.update(url=url, timeout=timeout, validate_certs=validate_certs, ca_cert=ca_cert)
        return Resp(json.dumps(alerts(("A", "firing"))).encode())

    doc = g.fetch_alerts("http://127.0.0.1:9090/prom/", timeout=3, opener=opener)
    assert seen == {"url": "http://127.0.0.1:9090/prom/api/v1/alerts", "timeout": 3, "validate_certs": True,
                    "ca_cert": None}
    assert doc["data"]["alerts"][0]["labels"]["alertname"] == "A"
    with pytest.raises(g.GateError) as err:
        g.fetch_alerts("http://x:1", opener=lambda *a, **k: Resp(b"[" * 100), max_bytes=64)
    assert "more than 64 bytes" in str(err.value)
    with pytest.raises(g.GateError) as err:
        g.fetch_alerts("http://x:1", opener=lambda *a, **k: Resp(b"<html>"))
    assert "not valid JSON" in str(err.value)
    with pytest.raises(g.GateError):
        g.fetch_alerts("file:///etc/passwd")
    with pytest.raises(g.GateError) as err:
        g.fetch_alerts("http://127.0.0.1:1", timeout=2)
    assert "cannot read http://127.0.0.1:1/api/v1/alerts" in str(err.value)
