"""DLPack with real peers: reference counts (who keeps whose memory alive,
whichever side dies first) and no leaks over 100,000 round trips (resident
memory and the C counters of ``bridge._C.stats()``).

Peers other than NumPy are optional: each test skips where its peer is not
installed. What the peers themselves do (copies, flags they drop, refusals)
is asserted as observed with the versions pinned in pyproject.toml, and
commented where it is surprising. The capsule reader and the small helpers
are in ``dlpack_peek.py``."""

from __future__ import annotations

import gc
import sys

import numpy as np
import pytest
from dlpack_peek import PEERS, np_ptr, stats_delta
from lifetimes import RSS_BUDGET, balanced, frozen_heap, round_trips, snapshot

import bridge


@pytest.fixture(scope="module", autouse=True)
def _frozen_heap():
    yield from frozen_heap(*PEERS)


# ============================================================ refcounts


def test_refcount_export_consumed_by_numpy():
    t = bridge.arange(10, dtype=bridge.float32)
    keep = t.untyped_storage().owner
    assert keep is not None
    base = sys.getrefcount(keep)
    before = snapshot()
    a = np.from_dlpack(t)
    assert sys.getrefcount(keep) == base + 1  # the export's manager_ctx
    del a
    assert sys.getrefcount(keep) == base
    assert balanced(before)["exports"] == 1


def test_refcount_import_from_numpy():
    arr = np.arange(10.0)
    base = sys.getrefcount(arr)
    before = snapshot()
    b = bridge.from_dlpack(arr)
    v = b[2:5][::-1]
    assert sys.getrefcount(arr) == base + 1  # NumPy's export, held by one guard
    del b
    assert sys.getrefcount(arr) == base + 1  # the view still holds it
    del v
    assert sys.getrefcount(arr) == base
    assert balanced(before)["import_releases"] == 1


def test_refcount_chain_numpy_bridge_torch_numpy():
    torch = pytest.importorskip("torch")
    arr = np.arange(12.0).reshape(3, 4)
    base = sys.getrefcount(arr)
    before = snapshot()
    b = bridge.from_dlpack(arr)
    x = torch.from_dlpack(b)
    out = np.from_dlpack(x)
    assert np_ptr(out) == b.data_ptr() == x.data_ptr() == np_ptr(arr)
    del b, x  # the middle of the chain goes first
    gc.collect()
    out[2, 3] = -1.0
    assert arr[2, 3] == -1.0 and out.tolist() == arr.tolist()
    assert sys.getrefcount(arr) > base
    del out
    gc.collect()
    assert sys.getrefcount(arr) == base
    d = balanced(before)
    assert d["imports"] == 1 and d["exports"] == 1


def test_consumer_dies_before_producer():
    t = bridge.arange(100, dtype=bridge.int64)
    keep = t.untyped_storage().owner
    base = sys.getrefcount(keep)
    before = snapshot()
    a = np.from_dlpack(t)
    del a
    assert sys.getrefcount(keep) == base
    assert t[99].item() == 99
    del t
    balanced(before)


def test_consumer_outlives_producer_export():
    t = bridge.arange(100, dtype=bridge.int64)
    keep = t.untyped_storage().owner
    base = sys.getrefcount(keep)
    before = snapshot()
    a = np.from_dlpack(t)
    del t
    gc.collect()
    assert sys.getrefcount(keep) == base  # the tensor's own ref went, the export's stayed
    assert a.tolist() == list(range(100))
    a[:] = a[::-1].copy()
    assert a[0] == 99
    assert stats_delta(before)["export_deleters"] == 0
    del a
    assert sys.getrefcount(keep) == base - 1
    balanced(before)


def test_consumer_outlives_producer_import():
    arr = np.arange(100.0)
    before = snapshot()
    b = bridge.from_dlpack(arr)
    del arr
    gc.collect()
    assert b[99].item() == 99.0
    b[0] = -1.0
    assert b[0].item() == -1.0
    assert stats_delta(before)["import_releases"] == 0
    del b
    assert balanced(before)["import_releases"] == 1


def test_consumer_outlives_producer_torch_both_ways():
    torch = pytest.importorskip("torch")
    before = snapshot()
    t = bridge.arange(50, dtype=bridge.float32)
    x = torch.from_dlpack(t)
    del t
    gc.collect()
    assert x[49].item() == 49.0
    y = torch.arange(50.0)
    b = bridge.from_dlpack(y)
    del y
    gc.collect()
    assert b[49].item() == 49.0
    del x, b
    balanced(before)


# ================================================================ leaks


def _leak_cases():
    """name -> (setup() -> one round trip, iterations, exports and imports per trip)."""

    def numpy_export():
        t = bridge.arange(64, dtype=bridge.float32)
        return lambda: np.from_dlpack(t)

    def numpy_import():
        arr = np.arange(64.0)
        return lambda: bridge.from_dlpack(arr)

    def numpy_round_trip():
        arr = np.arange(64.0)
        return lambda: np.from_dlpack(bridge.from_dlpack(arr))

    def torch_export():
        torch = pytest.importorskip("torch")
        t = bridge.arange(64, dtype=bridge.float32)
        return lambda: torch.from_dlpack(t)

    def torch_import():
        torch = pytest.importorskip("torch")
        x = torch.arange(64.0)
        return lambda: bridge.from_dlpack(x)

    def tvm_export():
        tvm_ffi = pytest.importorskip("tvm_ffi")
        t = bridge.arange(64, dtype=bridge.float32)
        return lambda: tvm_ffi.from_dlpack(t)

    def tvm_import():
        tvm_ffi = pytest.importorskip("tvm_ffi")
        x = tvm_ffi.from_dlpack(np.arange(64.0))
        return lambda: bridge.from_dlpack(x)

    def tvm_convert_numpy():  # a capsule's tensor straight into an ndarray, released by its base
        tvm_ffi = pytest.importorskip("tvm_ffi")
        x = tvm_ffi.from_dlpack(np.arange(64.0))
        return lambda: bridge.convert(x, np)

    def bridge_capsule():
        t = bridge.arange(64, dtype=bridge.float32)
        return lambda: bridge.from_dlpack(t.__dlpack__(max_version=(1, 3)))

    def bridge_legacy_capsule():
        t = bridge.arange(64, dtype=bridge.float32)[::2]
        return lambda: bridge.from_dlpack(t.__dlpack__())

    def bridge_unconsumed_capsule():
        t = bridge.arange(64, dtype=bridge.float32)
        return lambda: t.__dlpack__(max_version=(1, 3))

    def bridge_self():
        t = bridge.arange(64, dtype=bridge.float32)
        return lambda: bridge.from_dlpack(t)

    def pyarrow_import():
        pa = pytest.importorskip("pyarrow")
        arr = pa.array(np.arange(64, dtype=np.int64))
        return lambda: bridge.from_dlpack(arr)

    def pydlpack_round_trip():
        dlpack = pytest.importorskip("dlpack")
        t = bridge.arange(64, dtype=bridge.float32)
        return lambda: bridge.from_dlpack(dlpack.asdlpack(t))

    n = 100_000
    return {
        "numpy-export": (numpy_export, n, 1, 0),
        "numpy-import": (numpy_import, n, 0, 1),
        "numpy-round-trip": (numpy_round_trip, n, 1, 1),
        "torch-export": (torch_export, n, 1, 0),
        "torch-import": (torch_import, n, 0, 0),  # borrowed: torch's tensor object owns the memory
        "tvm-ffi-export": (tvm_export, n, 1, 0),
        "tvm-ffi-import": (tvm_import, n, 0, 1),
        "tvm-ffi-convert-numpy": (tvm_convert_numpy, n, 0, 1),
        "bridge-capsule": (bridge_capsule, n, 1, 1),
        "bridge-legacy-capsule": (bridge_legacy_capsule, n, 1, 1),
        "bridge-unconsumed-capsule": (bridge_unconsumed_capsule, n, 1, 0),
        "bridge-self": (bridge_self, n, 0, 0),
        "pyarrow-import": (pyarrow_import, n, 0, 1),
        "pydlpack-round-trip": (pydlpack_round_trip, 10_000, 1, 1),  # ~40 us a trip
    }


LEAK_CASES = _leak_cases()


@pytest.mark.parametrize("case", list(LEAK_CASES))
def test_no_leak_over_many_round_trips(case):
    setup, n, exports, imports = LEAK_CASES[case]
    d, grown = round_trips(setup(), n, max(n // 10, 2_000))
    assert d["exports"] == n * exports and d["imports"] == n * imports, d
    assert grown < RSS_BUDGET, f"resident memory grew by {grown} bytes over {n} round trips"
