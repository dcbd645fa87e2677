"""Lifetimes of Arrow exchanges: the reference count of the storage's keep-alive
object and the C counters of ``bridge._C.stats()`` (``arrow_exports``/
``arrow_releases`` for exported array nodes, ``arrow_imports``/
``arrow_import_releases`` for import guards; plain primitive pyarrow arrays
enter through pyarrow's DLPack export and so count as DLPack ``imports``)
through consumed, unconsumed and moved structs, and resident memory over many
round trips.

Shared helpers (the Arrow type of each dtype, the C struct behind a capsule,
the address of an array's first value) are in ``arrow_helpers.py``; the peer
fixtures (``pl``, ``na``, ``duckdb``) in ``tests/conftest.py``.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
from arrow_helpers import (
    PEERS,
    StreamOnly,
    c_struct,
    exported_structs,
    fst_array,
    keepalive,
    pa,
    refs,
    values_address,
)
from bridge._native import ffi
from lifetimes import RSS_BUDGET, balanced, delta, frozen_heap, round_trips, snapshot

import bridge
from bridge.arrow import to_fixed_shape_tensor


@pytest.fixture(scope="module", autouse=True)
def _frozen_heap():
    yield from frozen_heap(*PEERS)


def _consumers():
    def polars_series(t):
        return pytest.importorskip("polars").Series(t)

    def nanoarrow_array(t):
        return pytest.importorskip("nanoarrow").c_array(t)

    return {
        "pa.array": (pa.array, 1),
        "pa.table": (lambda t: pa.table({"tensor": t}), 1),
        "pa.chunked_array": (pa.chunked_array, 1),  # the stream, read at once
        "pa.RecordBatchReader": (lambda t: pa.RecordBatchReader.from_stream(
            t, schema=pa.schema([("tensor", pa.float32())])), 0),  # not read yet
        "to_fixed_shape_tensor": (lambda t: to_fixed_shape_tensor(t.reshape(2, -1)), 2),
        "polars": (polars_series, None),
        "nanoarrow": (nanoarrow_array, 1),
        "polars-fst": (lambda t: polars_series(t.reshape(4, 2)), None),
        "nanoarrow-fst": (lambda t: nanoarrow_array(t.reshape(4, 2)), 2),
        "pa.array-bool8": (lambda t: pa.array(t.view(bridge.bool)), 1),
        "from_arrow-capsules": (lambda t: bridge.from_arrow(t.__arrow_c_array__()), 1),
        "from_arrow-stream": (lambda t: bridge.from_arrow(t.__arrow_c_stream__()), 1),
    }


CONSUMERS = _consumers()


@pytest.mark.parametrize("case", list(CONSUMERS))
def test_consumed_export_releases_its_references(case):
    consume, nodes = CONSUMERS[case]
    t = bridge.arange(8, dtype=bridge.float32)
    keep = keepalive(t)
    r0 = refs(keep)
    before = snapshot()
    out = consume(t)
    assert refs(keep) > r0  # the consumer's struct (or stream) holds the memory
    d = delta(before)
    if nodes is not None:
        assert d["arrow_exports"] == nodes
    del out
    assert refs(keep) == r0
    d = balanced(before)
    if nodes is not None:
        assert d["arrow_exports"] == nodes


@pytest.mark.parametrize(
    ("method", "nodes"),
    [
        (lambda t: t.__arrow_c_array__(), 1),
        (lambda t: t.__arrow_c_device_array__(), 1),
        (lambda t: t.reshape(2, 4).__arrow_c_array__(), 2),
        (lambda t: t.reshape(2, 2, 2).__arrow_c_device_array__(), 2),
        (lambda t: t.__arrow_c_array__(pa.schema([("x", pa.float32())]).__arrow_c_schema__()), 2),
        (lambda t: t.__arrow_c_stream__(), 0),  # no batch built until get_next
        (lambda t: t.__arrow_c_schema__(), 0),
    ],
    ids=["array", "device-array", "nd-array", "nd-device-array", "requested", "stream", "schema"],
)
def test_unconsumed_capsules_release_themselves(method, nodes):
    t = bridge.arange(8, dtype=bridge.float32)
    keep = keepalive(t)
    r0 = refs(keep)
    before = snapshot()
    caps = method(t)
    d = delta(before)
    assert d["arrow_exports"] == nodes and d["arrow_releases"] == 0
    del caps
    assert refs(keep) == r0
    assert balanced(before)["arrow_releases"] == nodes


def _move(src, ctype: str):
    """Move a C struct the way consumers do: bitwise copy, then mark the source released."""
    dst = ffi.new(f"struct {ctype} *")
    ffi.memmove(dst, src, ffi.sizeof(f"struct {ctype}"))
    src.release = ffi.NULL
    return dst


@pytest.mark.parametrize("order", ["capsules-die-first", "release-first"])
@pytest.mark.parametrize("device", [False, True], ids=["array", "device-array"])
def test_moved_fast_path_structs_outlive_their_capsules(order, device):
    """1-d exports keep both capsules' structs, the owner reference and the buffer
    list in one C block: moved copies (whose ``buffers`` point into it) must stay
    valid whichever of the capsules and the release goes first."""
    base = bridge.arange(10, dtype=bridge.int16)
    t = base[2:]
    keep = keepalive(t)
    r0 = refs(keep)
    before = snapshot()
    schema, array, s, a = exported_structs(t, device)
    ms, ma = _move(s, "ArrowSchema"), _move(a, "ArrowArray")
    if order == "capsules-die-first":
        del schema, array, s, a
        gc.collect()
        assert refs(keep) == r0 + 1  # the moved array holds the memory
    assert ffi.string(ms.format) == b"s" and ms.n_children == 0
    assert (ma.length, ma.offset, ma.n_buffers, ma.null_count) == (8, 2, 2, 0)
    assert ma.buffers[0] == ffi.NULL and ma.buffers[1] == ffi.cast("void *", base.data_ptr())
    ma.release(ma)
    ms.release(ms)
    assert ma.release == ffi.NULL and ms.release == ffi.NULL
    assert refs(keep) == r0
    if order == "release-first":
        assert s.release == ffi.NULL and a.release == ffi.NULL  # still readable: capsules alive
        del schema, array, s, a
    assert balanced(before)["arrow_releases"] == 1


def test_fast_path_capsules_die_in_any_order():
    t = bridge.arange(6, dtype=bridge.float32)
    before = snapshot()
    schema, array = t.__arrow_c_array__()
    del array  # released unconsumed; the schema capsule still points into the block
    assert pa.DataType._import_from_c_capsule(schema) == pa.float32()
    del schema
    schema, array = t.__arrow_c_array__()
    del schema
    arr = pa.Array._import_from_c_capsule(t.__arrow_c_schema__(), array)
    del array
    assert values_address(arr) == t.data_ptr() and arr.to_pylist() == t.tolist()
    del arr
    assert balanced(before)["arrow_releases"] == 2


def test_moved_child_is_released_once():
    """Consumers may move a child out of the tree (bitwise copy, source marked
    released): every node holds its own reference, so the parent's release
    skips the moved child and the child's own release frees it later."""
    t = bridge.arange(12, dtype=bridge.int32)
    m = t.reshape(3, 4)
    keep = keepalive(t)
    r0 = refs(keep)
    before = snapshot()
    schema, array = m.__arrow_c_array__()
    parent = c_struct(array, b"arrow_array")
    assert parent.n_children == 1 and refs(keep) == r0 + 2
    moved = ffi.new("struct ArrowArray *")
    ffi.memmove(moved, parent.children[0], ffi.sizeof("struct ArrowArray"))
    parent.children[0].release = ffi.NULL
    del schema, array, parent  # the capsule destructor releases the parent only
    d = delta(before)
    assert (d["arrow_exports"], d["arrow_releases"]) == (2, 1)
    assert refs(keep) == r0 + 1  # the moved child still holds the memory
    assert moved.length == 12 and moved.buffers[1] == ffi.cast("void *", t.data_ptr())
    moved.release(moved)
    assert moved.release == ffi.NULL
    assert refs(keep) == r0
    assert balanced(before)["arrow_releases"] == 2


def test_stream_is_released_when_partly_read():
    t = bridge.arange(8, dtype=bridge.float32)
    keep = keepalive(t)
    r0 = refs(keep)
    before = snapshot()
    as_batches = pa.schema([("tensor", pa.float32())])  # the record-batch form
    reader = pa.RecordBatchReader.from_stream(t, schema=as_batches)
    assert reader.schema.names == ["tensor"]  # get_schema only
    assert delta(before)["arrow_exports"] == 0
    del reader
    assert refs(keep) == r0
    balanced(before)
    reader = pa.RecordBatchReader.from_stream(t, schema=as_batches)
    batch = reader.read_next_batch()
    with pytest.raises(StopIteration):
        reader.read_next_batch()
    del reader
    assert refs(keep) == r0 + 2  # the batch: struct + column
    assert values_address(batch.column(0)) == t.data_ptr()
    del batch
    assert refs(keep) == r0
    balanced(before)


def _pa_allocated(n: int, np_dtype, pa_type):
    """An n-value pyarrow array whose buffer comes from pyarrow's allocator
    (pa.total_allocated_bytes counts it), filled with 0..n-1."""
    buf = pa.allocate_buffer(n * np.dtype(np_dtype).itemsize)
    np.frombuffer(buf, dtype=np_dtype)[:] = np.arange(n) % 127
    return pa.Array.from_buffers(pa_type, n, [None, buf])


N_ALIVE = 600_000


@pytest.mark.parametrize(
    "make",
    [
        lambda: fst_array(pa.float32(), (2, 3), _pa_allocated(N_ALIVE, np.float32, pa.float32())),
        lambda: pa.table({"x": _pa_allocated(N_ALIVE, np.float32, pa.float32())}),
        lambda: pa.ExtensionArray.from_storage(
            pa.bool8(), _pa_allocated(N_ALIVE, np.int8, pa.int8())
        ),
        lambda: _pa_allocated(N_ALIVE, np.float32, pa.float32()),  # through pyarrow's DLPack
    ],
    ids=["fixed-shape-tensor", "table", "bool8", "primitive"],
)
def test_from_arrow_keeps_arrow_memory_alive_until_the_last_view(make):
    base = pa.total_allocated_bytes()
    arr = make()
    size = pa.total_allocated_bytes() - base
    assert size >= N_ALIVE
    before = snapshot()
    b = bridge.from_arrow(arr)
    flat = b.reshape(-1)
    last = flat[-1].item()
    view = flat[-3:]
    del arr, b, flat
    gc.collect()
    assert pa.total_allocated_bytes() - base >= size  # nothing freed yet
    d = delta(before)
    live = d["arrow_imports"] + d["imports"] - d["arrow_import_releases"] - d["import_releases"]
    assert live == 1  # (a stream import also made and dropped guards for its schema and end)
    assert view[-1].item() == last
    del view
    gc.collect()
    assert pa.total_allocated_bytes() - base < N_ALIVE  # freed with the last view
    balanced(before)  # released exactly once


def test_from_arrow_guard_released_once_for_every_path():
    t = bridge.arange(16, dtype=bridge.int64)
    keep = keepalive(t)
    r0 = refs(keep)
    before = snapshot()
    views = [
        bridge.from_arrow(t.__arrow_c_array__()),
        bridge.from_arrow(t.__arrow_c_device_array__()),
        bridge.from_arrow(t.__arrow_c_stream__()),
        bridge.from_arrow(t.reshape(4, 4).__arrow_c_array__())[1:],
        bridge.from_arrow(StreamOnly(t)),
    ]
    for v in views:
        assert v.reshape(-1)[0].data_ptr() in (t.data_ptr(), t.data_ptr() + 32)
    assert refs(keep) > r0
    d = delta(before)
    assert d["arrow_import_releases"] < d["arrow_imports"]
    del views, v
    assert refs(keep) == r0
    balanced(before)


def test_daemon_threads_dropping_exports_at_exit_do_not_abort(tmp_path):
    """A daemon thread that drops a pa.array(bridge tensor) while the interpreter
    finalises must not take the process down (the release frees memory bridge
    allocated without releasing the GIL, and leaves Python alone once it is
    finalising)."""
    script = tmp_path / "exit.py"
    script.write_text(textwrap.dedent("""
        import threading, time
        import pyarrow as pa
        import bridge

        def churn():
            while True:
                arrs = [pa.array(bridge.arange(1000, dtype=bridge.float32)) for _ in range(50)]
                nd = [pa.array(bridge.arange(64).reshape(8, 8)) for _ in range(20)]
                del arrs, nd

        for _ in range(4):
            threading.Thread(target=churn, daemon=True).start()
        time.sleep(0.2)
        print("exiting", flush=True)
    """))
    for _ in range(5):
        r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        assert "exiting" in r.stdout and "Fatal" not in r.stderr


# ------------------------------------------------------------------- no leaks


def _leak_cases():
    def pyarrow_round_trip():
        t = bridge.arange(64, dtype=bridge.float32)
        return lambda: bridge.from_arrow(pa.array(t))

    def pyarrow_fst_round_trip():
        m = bridge.arange(64, dtype=bridge.float32).reshape(8, 2, 4).transpose(1, 2)
        return lambda: bridge.from_arrow(pa.array(m))

    def bool8_round_trip():
        b = bridge.ones(64, dtype=bridge.bool)
        return lambda: bridge.from_arrow(pa.array(b))

    def capsule_pair():
        t = bridge.arange(64, dtype=bridge.int16)
        return lambda: bridge.from_arrow(t.__arrow_c_array__())

    def unconsumed():
        t = bridge.arange(64, dtype=bridge.int16).reshape(8, 8)
        return lambda: t.__arrow_c_device_array__()

    def stream():
        t = bridge.arange(64, dtype=bridge.uint32)
        return lambda: bridge.from_arrow(t.__arrow_c_stream__())

    def pa_table():
        t = bridge.arange(64, dtype=bridge.float64)
        return lambda: bridge.from_arrow(pa.table({"t": t}))

    def nanoarrow_round_trip():
        na = pytest.importorskip("nanoarrow")
        t = bridge.arange(64, dtype=bridge.float32)
        return lambda: bridge.from_arrow(na.c_array(t))

    def polars_round_trip():
        pl = pytest.importorskip("polars")
        t = bridge.arange(64, dtype=bridge.float32)
        return lambda: bridge.from_arrow(pl.Series(t))

    def duckdb_round_trip():
        duckdb = pytest.importorskip("duckdb")
        t = bridge.arange(64, dtype=bridge.float32)

        def trip(t=t):  # DuckDB's replacement scan sees locals, not closure cells
            return bridge.from_arrow(duckdb.sql("select tensor from t"))

        return trip

    n = 100_000
    return {  # name: (setup, trips, warm-up trips)
        "pyarrow-round-trip": (pyarrow_round_trip, n, 5_000),
        "pyarrow-fst-round-trip": (pyarrow_fst_round_trip, n, 5_000),
        "bool8-round-trip": (bool8_round_trip, n, 5_000),
        "capsule-pair": (capsule_pair, n, 5_000),
        "unconsumed-capsules": (unconsumed, n, 5_000),
        "stream": (stream, n, 5_000),
        "pa-table": (pa_table, 20_000, 2_000),  # ~20 us a trip
        "nanoarrow-round-trip": (nanoarrow_round_trip, n, 5_000),
        "polars-round-trip": (polars_round_trip, 20_000, 2_000),  # ~20 us a trip
        "duckdb-round-trip": (duckdb_round_trip, 1_000, 300),  # ~0.8 ms a query
    }


LEAK_CASES = _leak_cases()


@pytest.mark.parametrize("case", list(LEAK_CASES))
def test_no_leak_over_many_round_trips(case):
    setup, n, warm = LEAK_CASES[case]
    trip = setup()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        before = snapshot()
        trip()
        gc.collect()
        per_trip = delta(before)
    d, grown = round_trips(trip, n, warm)
    assert d == {k: n * v for k, v in per_trip.items()}, (d, per_trip)
    assert d["arrow_exports"] + d["arrow_imports"] > 0
    assert grown < RSS_BUDGET, f"resident memory grew by {grown} bytes over {n} round trips"
