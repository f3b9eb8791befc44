# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Kubernetes resource quantities (``512Mi``, ``1.5Gi``, ``100m``, ``1e3``) as exact numbers.

Node side, Python 3.8+. Both functions take operator or node input and raise
:class:`QuantityError` (a ``ValueError``) naming the bad value.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math
import re
from fractions import Fraction

INT64_MAX = (1 << 63) - 1

_BINARY_SUFFIXES = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL_SUFFIXES = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12,
                     "P": 15, "E": 18}
_QUANTITY_RE = re.compile(r"^([+-]?)([0-9]*)(?:\.([0-9]*))?([eEinumkKMGTP]*)([+-]?[0-9]*)$")
_LOOSE_QUANTITY_RE = re.compile(r"^[+-]?([0-9]+)?(?:\.([0-9]+))?\.?([^0-9.].*)$")


class QuantityError(ValueError):
    """A Kubernetes resource quantity that does not parse."""


def parse_quantity(value):
    """Exact value of a Kubernetes resource quantity as a ``fractions.Fraction``.

    Accepts what ``resource.ParseQuantity`` accepts: an optional sign, digits with an optional
    decimal part, and a suffix: binary (Ki Mi Gi Ti Pi Ei), decimal (n u m "" k M G T P E) or a
    decimal exponent (``e3``, ``E-2``). Integers and floats (YAML numbers) are accepted too.
    Raises QuantityError naming the value.
    """
    if isinstance(value, bool) or value is None:
        raise QuantityError("invalid Kubernetes quantity %r: expected a string such as '512Mi'"
                            % (value,))
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise QuantityError("invalid Kubernetes quantity %r" % (value,))
        text = repr(value)
    elif isinstance(value, str):
        text = value.strip()
    else:
        raise QuantityError("invalid Kubernetes quantity %r: expected a string such as '512Mi'"
                            % (value,))
    if not text or len(text) > 64:
        raise QuantityError("invalid Kubernetes quantity %r: %s" % (
            value, "empty" if not text else "too long"))
    m = _QUANTITY_RE.match(text)
    loose = _LOOSE_QUANTITY_RE.match(text)
    if not m and loose and (loose.group(1) or loose.group(2)):
        raise QuantityError("invalid Kubernetes quantity %r: unknown suffix %r (use Ki, Mi, Gi, Ti, "
                            "Pi, Ei, n, u, m, k, M, G, T, P, E or an exponent such as e3)"
                            % (value, loose.group(3)))
    if not m or not (m.group(2) or m.group(3)):
        raise QuantityError("invalid Kubernetes quantity %r: expected a number with an optional "
                            "suffix (Ki, Mi, Gi, Ti, Pi, Ei, n, u, m, k, M, G, T, P, E or an "
                            "exponent such as e3)" % (value,))
    sign, whole, frac, suffix, exp_digits = m.groups()
    frac = frac or ""
    number = Fraction(int((whole or "0") + frac), 10 ** len(frac))
    if sign == "-":
        number = -number
    if suffix in _BINARY_SUFFIXES and not exp_digits:
        return number * (1 << (10 * _BINARY_SUFFIXES[suffix]))
    if suffix in _DECIMAL_SUFFIXES and not exp_digits:
        return number * Fraction(10) ** _DECIMAL_SUFFIXES[suffix]
    if suffix in ("e", "E") and exp_digits and exp_digits not in ("+", "-"):
        exponent = int(exp_digits)
        if abs(exponent) > 30:
            raise QuantityError("invalid Kubernetes quantity %r: exponent out of range" % (value,))
        return number * Fraction(10) ** exponent
    raise QuantityError("invalid Kubernetes quantity %r: unknown suffix %r (use Ki, Mi, Gi, Ti, "
                        "Pi, Ei, n, u, m, k, M, G, T, P, E or an exponent such as e3)"
                        % (value, suffix + exp_digits))


def quantity_to_bytes(value):
    """Bytes (an int, rounded up like ``Quantity.Value()``) of a memory quantity.

    Negative or out-of-range (> int64) quantities raise QuantityError naming the value.
    """
    exact = parse_quantity(value)
    if exact < 0:
        raise QuantityError("invalid memory quantity %r: negative" % (value,))
    result = int(math.ceil(exact))
    if result > INT64_MAX:
        raise QuantityError("invalid memory quantity %r: larger than int64" % (value,))
    return result
