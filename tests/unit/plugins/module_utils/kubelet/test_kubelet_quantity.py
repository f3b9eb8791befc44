# -*- coding: utf-8 -*-
"""Kubernetes resource quantities (kubelet/quantity.py)."""
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet.quantity import (
    _BINARY_SUFFIXES,
    parse_quantity,
    quantity_to_bytes,
    QuantityError,
)

GIB = 1 << 30
MIB = 1 << 20


# -- quantities ---------------------------------------------------------------------------
@pytest.mark.parametrize("text,expected", [
    ("100Mi", 100 * MIB),
    ("1Gi", GIB),
    ("1.5Gi", 3 * GIB // 2),
    ("3.5Gi", 7 * GIB // 2),
    ("2829Mi", 2829 * MIB),
    ("128974848", 128974848),
    ("129e6", 129000000),
    ("129M", 129000000),
    ("1k", 1000),
    ("1Ki", 1024),
    ("7Ti", 7 << 40),
    ("1P", 10 ** 15),
    ("1Pi", 1 << 50),
    ("1E", 10 ** 18),
    ("1Ei", 1 << 60),
    ("1E3", 1000),
    ("2.5e+3", 2500),
    ("1e-3", 1),          # rounds up like Quantity.Value()
    ("500m", 1),
    ("1000m", 1),
    ("1001m", 2),
    ("100u", 1),
    ("100n", 1),
    ("0", 0),
    ("0.1", 1),
    ("+1Ki", 1024),
    (".5Ki", 512),
    ("1.Gi", GIB),
    ("00100Mi", 100 * MIB),
    (" 256Mi ", 256 * MIB),
    (1073741824, GIB),    # YAML integer
    (1.5, 2),             # YAML float
])
def test_quantity_to_bytes(text, expected):
    assert quantity_to_bytes(text) == expected


def test_parse_quantity_is_exact():
    assert parse_quantity("1.5Gi") == Fraction(3 << 29)
    assert parse_quantity("100m") == Fraction(1, 10)
    assert parse_quantity("-2k") == -2000
    assert parse_quantity("12.345678901234567890123456789Gi") == \
        Fraction(12345678901234567890123456789, 10 ** 27) * GIB


@pytest.mark.parametrize("bad,words", [
    ("1GB", "unknown suffix 'GB'"),
    ("1KiB", "unknown suffix 'KiB'"),
    ("1K", "unknown suffix 'K'"),
    ("1ki", "unknown suffix 'ki'"),
    ("1e", "unknown suffix 'e'"),
    ("1Ki1", "unknown suffix 'Ki1'"),
    ("1 Gi", "unknown suffix ' Gi'"),
    ("Mi", "expected a number"),
    ("ten", "expected a number"),
    ("1.5.5", ""),
    ("--1", "expected a number"),
    ("", "empty"),
    ("1e31", "exponent out of range"),
    (True, "expected a string"),
    (None, "expected a string"),
    ([1], "expected a string"),
    (float("nan"), ""),
])
def test_bad_quantities_name_the_value(bad, words):
    with pytest.raises(QuantityError) as e:
        quantity_to_bytes(bad)
    assert repr(bad) in str(e.value)
    assert words in str(e.value)
    assert isinstance(e.value, ValueError)


@pytest.mark.parametrize("bad,words", [("-1Gi", "negative"), ("9Ei", "larger than int64")])
def test_memory_quantities_must_fit(bad, words):
    with pytest.raises(QuantityError) as e:
        quantity_to_bytes(bad)
    assert repr(bad) in str(e.value) and words in str(e.value)


@given(st.integers(0, 2 ** 40), st.sampled_from(sorted(_BINARY_SUFFIXES)))
def test_binary_suffixes_property(n, suffix):
    expected = n * 1024 ** _BINARY_SUFFIXES[suffix]
    if expected > 2 ** 63 - 1:
        with pytest.raises(QuantityError):
            quantity_to_bytes("%d%s" % (n, suffix))
    else:
        assert quantity_to_bytes("%d%s" % (n, suffix)) == expected


@given(st.integers(0, 10 ** 6), st.integers(0, 999))
def test_decimal_fractions_round_up(whole, milli):
    value = quantity_to_bytes("%d.%03dk" % (whole, milli))
    assert value == whole * 1000 + milli
