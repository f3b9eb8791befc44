"""Small helpers shared by the store, the controllers and the server."""
import calendar
import datetime
import hashlib
import json
import os
import random
import re
import tempfile
import time

_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # apimachinery's utilrand alphabet
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def iso(ts=None):
    """RFC 3339 with second precision, as metav1.Time serialises."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if ts is None else ts))


def iso_micro(ts=None):
    """RFC 3339 with microseconds, as metav1.MicroTime serialises."""
    ts = time.time() if ts is None else ts
    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text):
    """Epoch seconds from an RFC 3339 timestamp (Z or offset, optional fraction); None if unparsable."""
    if not text or not isinstance(text, str):
        return None
    m = re.match(r"^(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(\.\d+)?(Z|[+-]\d\d:?\d\d)?$", text.strip())
    if not m:
        return None
    secs = calendar.timegm((int(m.group(1)), int(m.group(2)), int(m.group(3)),
                            int(m.group(4)), int(m.group(5)), int(m.group(6)), 0, 0, 0))
    if m.group(7):
        secs += float(m.group(7))
    tz = m.group(8)
    if tz and tz != "Z":
        sign = 1 if tz[0] == "+" else -1
        digits = tz[1:].replace(":", "")
        secs -= sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)
    return secs


def random_suffix(n=5):
    return "".join(random.choice(_NAME_CHARS) for dummy in range(n))


def short_hash(value, n=10):
    data = json.dumps(value, sort_keys=True, separators=(",", ":")).encode("utf-8")
    digest = hashlib.sha256(data).hexdigest()
    # controller-revision-hash values are "safe encoded" fnv hashes: letters/digits, no vowels
    out = []
    for ch in digest:
        out.append(_NAME_CHARS[int(ch, 16) % len(_NAME_CHARS)])
        if len(out) == n:
            break
    return "".join(out)


def scaled_value(value, total, round_up):
    """intstr.GetScaledValueFromIntOrPercent."""
    if isinstance(value, bool):
        raise ValueError("invalid type: bool")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        text = value.strip()
        if text.endswith("%"):
            try:
                pct = int(text[:-1])
            except ValueError:
                raise ValueError("invalid value for IntOrString: invalid value %r" % value)
            raw = pct * total
            if round_up:
                return -(-raw // 100)
            return raw // 100
        try:
            return int(text)
        except ValueError:
            raise ValueError("invalid value for IntOrString: invalid type: string is not a percentage")
    raise ValueError("invalid value for IntOrString: %r" % (value,))


def atomic_write_json(path, data):
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), dir=directory)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, sort_keys=True, separators=(",", ":"))
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_text(path, text, mode=0o600):
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), dir=directory)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def condition(obj, ctype):
    for cond in ((obj.get("status") or {}).get("conditions") or []):
        if cond.get("type") == ctype:
            return cond
    return None


def pod_ready(pod):
    cond = condition(pod, "Ready")
    return bool(cond and cond.get("status") == "True")


def controller_ref(obj):
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return ref
    return None


def meta(obj):
    return obj.setdefault("metadata", {})
