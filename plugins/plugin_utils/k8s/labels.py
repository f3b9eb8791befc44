# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Labels of Kubernetes objects on the controller: the one parser of label selectors such as
``kubegpu_skip_label``, an object's metadata and labels, and selector requirement matching.

Every role and plugin of the collection that asks "does this object carry the skip label"
goes through :func:`has_label` (roles through the ``kubegpu.fleet.has_label`` filter):

* ``key=value``: the label ``key`` is present with exactly ``value`` (``key=`` means the
  empty value);
* ``key``: the label ``key`` is present, with any value;
* empty (``""`` or null): no selector, nothing matches (the skip label switched off).

Keys follow Kubernetes' label key syntax (an optional DNS subdomain prefix and ``/``, then a
name of at most 63 characters); values at most 63 characters of ``[A-Za-z0-9_.-]``. Anything
else raises :class:`LabelError` naming the selector.

:func:`requirement_matches` evaluates one ``matchExpressions`` entry (of a node selector term
or a label selector) against an object's labels.
"""
from __future__ import annotations

import re

_NAME = r"[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?"
_PREFIX = r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*"
_KEY_RE = re.compile(r"^(%s/)?%s$" % (_PREFIX, _NAME))
_VALUE_RE = re.compile(r"^(%s)?$" % _NAME)


class LabelError(ValueError):
    """A label selector the collection cannot use."""


def parse_selector(selector):
    """``"key=value"`` -> ``(key, value)``; ``"key"`` -> ``(key, None)``; empty -> ``(None, None)``."""
    if selector is None:
        return None, None
    if not isinstance(selector, str):
        raise LabelError("a label selector must be a string (key or key=value), got %r" % (selector,))
    text = selector.strip()
    if not text:
        return None, None
    key, sep, value = text.partition("=")
    key, value = key.strip(), value.strip()
    if not key:
        raise LabelError("the label selector %r has no key (expected key or key=value)" % selector)
    if len(key) > 317 or not _KEY_RE.match(key) or len(key.split("/", 1)[0]) > 253:
        raise LabelError("the label selector %r: %r is not a Kubernetes label key" % (selector, key))
    if sep and not _VALUE_RE.match(value):
        raise LabelError("the label selector %r: %r is not a Kubernetes label value" % (selector, value))
    return key, (value if sep else None)


def object_meta(obj):
    """``metadata`` of a Kubernetes object (a dict as the API returns it); {} when it has none."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    return meta if isinstance(meta, dict) else {}


def labels_of(obj):
    """The labels of a Kubernetes object; {} when none."""
    labels = object_meta(obj).get("labels")
    return labels if isinstance(labels, dict) else {}


def requirement_matches(expr, labels):
    """Does the requirement ``{key, operator, values}`` hold for ``labels`` (a dict)?

    ``In``, ``NotIn``, ``Exists``, ``DoesNotExist`` as label selectors and node selector terms
    define them (values compared as text); ``Gt`` and ``Lt`` (node selector terms) compare the
    label and the single value as integers and fail when either is not one. Any other operator
    matches nothing.
    """
    key = expr.get("key")
    op = expr.get("operator")
    values = [str(v) for v in expr.get("values") or []]
    present = key in labels
    value = str(labels.get(key)) if present else None
    if op == "In":
        return present and value in values
    if op == "NotIn":
        return not present or value not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt"):
        try:
            have, want = int(value), int(values[0])
        except (TypeError, ValueError, IndexError):
            return False
        return have > want if op == "Gt" else have < want
    return False


def has_label(obj, selector):
    """Does ``obj`` (a Kubernetes object) match ``selector`` (see the module docstring)?"""
    key, value = parse_selector(selector)
    if key is None:
        return False
    labels = labels_of(obj)
    if key not in labels:
        return False
    return value is None or str(labels[key]) == value
