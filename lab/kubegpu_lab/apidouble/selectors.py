"""Label and field selectors with the apiserver's grammar and semantics.

Label selectors (string form, as in ``?labelSelector=``): ``k=v``, ``k==v``, ``k!=v``,
``k in (a,b)``, ``k notin (a,b)``, ``k``, ``!k``, ``k>1``, ``k<1``; comma means AND.
``LabelSelector`` objects (``matchLabels`` / ``matchExpressions``) as used by PDBs and workloads.
Field selectors: ``f=v``, ``f==v``, ``f!=v`` on the fields each resource type supports.
"""
import re

from .errors import bad_request

_KEY_RE = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                     r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


class Requirement(object):
    def __init__(self, key, op, values=()):
        self.key = key
        self.op = op  # in, notin, exists, !, =, !=, gt, lt
        self.values = list(values)

    def matches(self, labels):
        labels = labels or {}
        present = self.key in labels
        value = labels.get(self.key)
        if self.op in ("=", "in"):
            return present and value in self.values
        if self.op in ("!=", "notin"):
            return not present or value not in self.values
        if self.op == "exists":
            return present
        if self.op == "!":
            return not present
        if self.op in ("gt", "lt"):
            if not present:
                return False
            try:
                have = int(value)
            except ValueError:
                return False
            want = int(self.values[0])
            return have > want if self.op == "gt" else have < want
        raise ValueError("unknown operator %r" % self.op)

    def __repr__(self):
        return "Requirement(%r, %r, %r)" % (self.key, self.op, self.values)


class LabelSelector(object):
    """A conjunction of requirements; ``nothing=True`` selects no object at all."""

    def __init__(self, requirements=(), nothing=False):
        self.requirements = list(requirements)
        self.nothing = nothing

    @property
    def empty(self):
        return not self.nothing and not self.requirements

    def matches(self, labels):
        if self.nothing:
            return False
        return all(r.matches(labels) for r in self.requirements)


def _check_key(key, text):
    if not key or len(key.split("/")[-1]) > 63 or not _KEY_RE.match(key):
        raise bad_request("unable to parse requirement: invalid label key \"%s\": in selector \"%s\""
                          % (key, text))


def _check_value(value, text):
    if len(value) > 63 or not _VALUE_RE.match(value):
        raise bad_request("unable to parse requirement: invalid label value: \"%s\": in selector \"%s\""
                          % (value, text))


def _split_top(text):
    """Split on commas that are not inside parentheses."""
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise bad_request("unable to parse requirement: unbalanced ')' in selector \"%s\"" % text)
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth != 0:
        raise bad_request("unable to parse requirement: unbalanced '(' in selector \"%s\"" % text)
    parts.append("".join(cur))
    return parts


_SET_RE = re.compile(r"^\s*(\S+?)\s+(in|notin)\s*\((.*)\)\s*$")
_CMP_RE = re.compile(r"^\s*([^=!<>\s]+)\s*(==|=|!=|>|<)\s*(.*?)\s*$")


def parse_label_selector(text):
    """Parse the string form of a label selector; raise ApiError(400) on bad syntax."""
    text = text or ""
    if not text.strip():
        return LabelSelector()
    reqs = []
    for part in _split_top(text):
        if not part.strip():
            raise bad_request("found '', expected: !, identifier, or 'end of string' in selector \"%s\"" % text)
        m = _SET_RE.match(part)
        if m:
            key, op, body = m.group(1), m.group(2), m.group(3)
            _check_key(key, text)
            values = [v.strip() for v in body.split(",")] if body.strip() else []
            if not values:
                raise bad_request("unable to parse requirement: for 'in', 'notin' operators, values set "
                                  "can't be empty in selector \"%s\"" % text)
            for v in values:
                _check_value(v, text)
            reqs.append(Requirement(key, op, values))
            continue
        m = _CMP_RE.match(part)
        if m:
            key, op, value = m.group(1), m.group(2), m.group(3)
            _check_key(key, text)
            if op in (">", "<"):
                try:
                    int(value)
                except ValueError:
                    raise bad_request("unable to parse requirement: for 'Gt', 'Lt' operators, the value "
                                      "must be an integer in selector \"%s\"" % text)
                reqs.append(Requirement(key, "gt" if op == ">" else "lt", [value]))
                continue
            _check_value(value, text)
            reqs.append(Requirement(key, "!=" if op == "!=" else "=", [value]))
            continue
        stripped = part.strip()
        if stripped.startswith("!"):
            key = stripped[1:].strip()
            _check_key(key, text)
            reqs.append(Requirement(key, "!"))
            continue
        _check_key(stripped, text)
        reqs.append(Requirement(stripped, "exists"))
    return LabelSelector(reqs)


def from_label_selector_object(obj):
    """metav1.LabelSelectorAsSelector: nil -> nothing, {} -> everything."""
    if obj is None:
        return LabelSelector(nothing=True)
    reqs = []
    for key in sorted((obj.get("matchLabels") or {})):
        reqs.append(Requirement(key, "=", [str(obj["matchLabels"][key])]))
    for expr in obj.get("matchExpressions") or []:
        op = expr.get("operator")
        key = expr.get("key")
        values = [str(v) for v in expr.get("values") or []]
        if op == "In":
            reqs.append(Requirement(key, "in", values))
        elif op == "NotIn":
            reqs.append(Requirement(key, "notin", values))
        elif op == "Exists":
            reqs.append(Requirement(key, "exists"))
        elif op == "DoesNotExist":
            reqs.append(Requirement(key, "!"))
        else:
            raise ValueError("%r is not a valid label selector operator" % op)
    return LabelSelector(reqs)


def label_selector_string(obj):
    """The string form of a LabelSelector object (as ``status.selector`` / kubectl show it)."""
    sel = from_label_selector_object(obj)
    parts = []
    for r in sel.requirements:
        if r.op == "=":
            parts.append("%s=%s" % (r.key, r.values[0]))
        elif r.op in ("in", "notin"):
            parts.append("%s %s (%s)" % (r.key, r.op, ",".join(sorted(r.values))))
        elif r.op == "exists":
            parts.append(r.key)
        elif r.op == "!":
            parts.append("!" + r.key)
    return ",".join(parts)


# --- field selectors -------------------------------------------------------------------------

def _unescape_split(text, sep):
    out, cur, i = [], [], 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            cur.append(text[i + 1])
            i += 2
            continue
        if text.startswith(sep, i):
            out.append("".join(cur))
            cur = []
            i += len(sep)
            continue
        cur.append(ch)
        i += 1
    out.append("".join(cur))
    return out


def parse_field_selector(text, rtype):
    """[(field, op, value)] where op is '=' or '!='; 400 for fields the type does not support."""
    terms = []
    if not text:
        return terms
    for part in _unescape_split(text, ","):
        if not part:
            continue
        for op, sep in (("!=", "!="), ("=", "=="), ("=", "=")):
            idx = _find_unescaped(part, sep)
            if idx >= 0:
                field, value = part[:idx].strip(), part[idx + len(sep):].strip()
                break
        else:
            raise bad_request("invalid selector: '%s'; can't understand '%s'" % (text, part))
        if field not in rtype.field_selectors:
            raise bad_request('field label not supported: %s' % field)
        terms.append((field, op, value))
    return terms


def _find_unescaped(text, sep):
    i = 0
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text.startswith(sep, i):
            if sep == "=" and i > 0 and text[i - 1] == "!":
                i += 1
                continue
            return i
        i += 1
    return -1


def field_value(obj, field):
    """The string the apiserver compares a field selector against."""
    if field == "source":
        return str(((obj.get("source") or {}).get("component")) or "")
    cur = obj
    for part in field.split("."):
        if not isinstance(cur, dict):
            cur = None
            break
        cur = cur.get(part)
    if cur is None:
        if field in ("spec.hostNetwork", "spec.unschedulable"):
            return "false"
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


def field_matches(obj, terms):
    for field, op, value in terms:
        have = field_value(obj, field)
        if op == "=" and have != value:
            return False
        if op == "!=" and have == value:
            return False
    return True
