# -*- coding: utf-8 -*-
"""Memory reservations, eviction thresholds and the GKE ladder (kubelet/memory.py)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet.memory import (
    GKE_EVICTION_THRESHOLD_BYTES,
    gke_reserved_memory_bytes,
    parse_memory_threshold,
    read_meminfo_total,
)
from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet.quantity import QuantityError
from ansible_collections.kubegpu.fleet.tests.fixtures.kubelet.kubelet_fakeproc import FakeProc

GIB = 1 << 30
MIB = 1 << 20


def test_memory_threshold():
    assert parse_memory_threshold("100Mi") == {"raw": "100Mi", "bytes": 100 * MIB, "percent": None}
    assert parse_memory_threshold("10%", 1000) == {"raw": "10%", "bytes": 100, "percent": 10.0}
    assert parse_memory_threshold("2.5%", 64 * GIB)["bytes"] == int(64 * GIB * 0.025)
    assert parse_memory_threshold("5%", 1001)["bytes"] == 50   # truncated like the kubelet
    assert parse_memory_threshold("2%")["bytes"] is None
    for bad in ("150%", "-1%", "abc%", "%"):
        with pytest.raises(QuantityError) as e:
            parse_memory_threshold(bad, GIB)
        assert repr(bad) in str(e.value)


# -- GKE ladder ---------------------------------------------------------------------------
@pytest.mark.parametrize("gib,reserved_hundredths_gib", [
    (0, 0),
    (1, 25),                 # 25% of 1 GiB
    (4, 100),                # 25% of 4
    (8, 180),                # + 20% of 4
    (16, 260),               # + 10% of 8
    (32, 356),               # + 6% of 16
    (128, 932),              # + 6% of 112
    (256, 1188),             # + 2% of 128
    (2048, 4772),            # + 2% of 1920
])
def test_gke_ladder(gib, reserved_hundredths_gib):
    assert gke_reserved_memory_bytes(gib * GIB) == reserved_hundredths_gib * GIB // 100


def test_gke_ladder_byte_exact_and_eviction_separate():
    assert gke_reserved_memory_bytes(85 * GIB) == 7237019893
    assert gke_reserved_memory_bytes(1000) == 250
    assert GKE_EVICTION_THRESHOLD_BYTES == 100 * MIB


@given(st.integers(0, 2 ** 44), st.integers(1, 2 ** 34))
def test_gke_ladder_monotonic_and_bounded(n, delta):
    a = gke_reserved_memory_bytes(n)
    b = gke_reserved_memory_bytes(n + delta)
    assert a <= b <= a + delta // 4 + 1
    assert a <= n // 4
    assert a >= n // 50


@pytest.mark.parametrize("bad", [-1, 1.5, True, "16Gi", None])
def test_gke_ladder_rejects_bad_input(bad):
    with pytest.raises(ValueError) as e:
        gke_reserved_memory_bytes(bad)
    assert repr(bad) in str(e.value)


def test_read_meminfo_total(tmp_path):
    fp = FakeProc(tmp_path)
    assert read_meminfo_total(fp.path) is None
    fp.set_meminfo(256 * GIB)
    assert read_meminfo_total(fp.path) == 256 * GIB
    assert read_meminfo_total("/proc") > 0
