"""Arrow with peers other than pyarrow: polars, nanoarrow and DuckDB, both ways.

Each test skips where its peer is not installed. What the peers do (types they
drop, paths they prefer, their own bugs) is asserted as observed with the
installed versions (polars 2.1, nanoarrow 0.9, DuckDB 2.0) and commented.

Shared helpers (the Arrow type of each dtype, the C struct behind a capsule,
the address of an array's first value) are in ``arrow_helpers.py``; the peer
fixtures (``pl``, ``na``, ``duckdb``) in ``tests/conftest.py``.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest
from arrow_helpers import (
    ARROW_TYPES,
    FORMATS,
    PEERS,
    StreamOnly,
    fst_values_address,
    keepalive,
    pa,
    refs,
    sample,
    values_address,
)
from lifetimes import balanced, delta, frozen_heap, snapshot

import bridge


@pytest.fixture(scope="module", autouse=True)
def _frozen_heap():
    yield from frozen_heap(*PEERS)


# --------------------------------------------------------------------- polars


@pytest.mark.parametrize("name", list(ARROW_TYPES))
def test_polars_series_of_tensor(pl, name):
    dt, typ = ARROW_TYPES[name]
    t = sample(dt)
    before = snapshot()
    s = pl.Series(t)
    assert s.len() == 7  # the 1-d fast path names no field: s.name is "" (N-d: "tensor")
    back = s.to_arrow()
    assert back.type == typ and values_address(back) == t.data_ptr()
    if dt is bridge.bool:
        # polars keeps arrow.bool8 as an extension over Int8: the values are 0/1
        assert s.dtype == pl.Extension("arrow.bool8", pl.Int8, "")
        assert s.to_list() == [int(v) for v in t.tolist()]
    else:
        assert s.to_list() == t.tolist()
    b = bridge.from_arrow(s)  # polars exports a stream
    assert b.dtype is dt and b.data_ptr() == t.data_ptr() and b.tolist() == t.tolist()
    del s, back, b
    balanced(before)


def test_polars_fixed_shape_tensor_and_slices(pl):
    m = bridge.arange(24, dtype=bridge.int32).reshape(4, 2, 3)
    s = pl.Series(m)
    assert str(s.dtype).startswith("Extension") and s.len() == 4
    assert fst_values_address(s.to_arrow()) == m.data_ptr()
    b = bridge.from_arrow(s)
    assert b.shape == (4, 2, 3) and b.data_ptr() == m.data_ptr() and b.tolist() == m.tolist()
    x = bridge.arange(10, dtype=bridge.int64)[3:7]
    sx = pl.Series(x)
    assert sx.to_list() == [3, 4, 5, 6] and values_address(sx.to_arrow()) == x.data_ptr()
    assert bridge.from_arrow(sx).data_ptr() == x.data_ptr()
    s2 = pl.Series(m[1:3])
    assert s2.to_list() == [list(range(6, 12)), list(range(12, 18))]


def test_polars_dataframe(pl):
    t = bridge.arange(5, dtype=bridge.float32)
    for df in (pl.DataFrame({"tensor": t}), pl.DataFrame(pa.table({"tensor": t}))):
        assert df.columns == ["tensor"] and df["tensor"].to_list() == t.tolist()
        assert values_address(df["tensor"].to_arrow()) == t.data_ptr()
        b = bridge.from_arrow(df)
        assert b.data_ptr() == t.data_ptr()
    assert values_address(pl.Series(StreamOnly(t)).to_arrow()) == t.data_ptr()
    # a tensor is a column, not a frame: polars wants a struct for a DataFrame
    with pytest.raises(pl.exceptions.SchemaError, match="Struct"):
        pl.DataFrame(t)


def test_from_polars(pl):
    s = pl.Series("x", np.arange(10, dtype=np.int32))
    b = bridge.from_arrow(s)
    assert b.dtype is bridge.int32 and b.tolist() == list(range(10)) and b.is_readonly
    assert b.data_ptr() == values_address(s.to_arrow())
    sl = s.slice(2, 3)
    c = bridge.from_arrow(sl)
    assert c.tolist() == [2, 3, 4] and c.data_ptr() == b.data_ptr() + 8
    with pytest.raises(ValueError, match="nulls"):
        bridge.from_arrow(pl.Series([1, None, 3]))
    v, m = bridge.from_arrow(pl.Series([1, None, 3]), with_mask=True)
    assert m.tolist() == [True, False, True] and v.tolist()[::2] == [1, 3]
    two_chunks = pl.concat([pl.Series([1, 2]), pl.Series([3])], rechunk=False)
    assert two_chunks.n_chunks() == 2
    with pytest.raises(ValueError, match="2 batches"):
        bridge.from_arrow(two_chunks)
    assert bridge.from_arrow(pl.DataFrame({"a": [1.0, 2.0]})).tolist() == [1.0, 2.0]
    with pytest.raises(ValueError, match="2 columns"):
        bridge.from_arrow(pl.DataFrame({"a": [1], "b": [2]}))
    with pytest.raises(TypeError, match=r"Arrow type (string_view|string|large_string) has no"):  # polars: views
        bridge.from_arrow(pl.Series(["a", "b"]))
    s_del = pl.Series(np.arange(1000, dtype=np.float64))
    d = bridge.from_arrow(s_del)
    del s_del, s
    gc.collect()
    assert d[999].item() == 999.0


# ------------------------------------------------------------------ nanoarrow


@pytest.mark.parametrize("name", list(ARROW_TYPES))
def test_nanoarrow_c_array_of_tensor(na, name):
    dt, _typ = ARROW_TYPES[name]
    base = sample(dt, 9)
    t = base[2:]
    before = snapshot()
    c = na.c_array(t)
    # the 1-d fast path exports an unnamed field (N-d exports and __arrow_c_schema__ say "tensor")
    assert c.schema.format == FORMATS[name] and c.schema.name in (None, "tensor")
    assert (c.length, c.offset, c.null_count) == (7, 2, 0)
    assert c.buffers == (0, base.data_ptr())
    if dt is bridge.bool:
        assert c.schema.metadata[b"ARROW:extension:name"] == b"arrow.bool8"
    b = bridge.from_arrow(c)
    assert b.dtype is dt and b.data_ptr() == t.data_ptr() and b.tolist() == t.tolist()
    assert bridge.from_arrow(c[1:4]).data_ptr() == t.data_ptr() + dt.itemsize
    del c, b
    d = balanced(before)
    assert d["arrow_exports"] == 1 and d["arrow_imports"] == 2


def test_nanoarrow_streams_and_nested(na):
    t = bridge.arange(8, dtype=bridge.uint16)
    st = na.c_array_stream(t)
    assert st.get_schema().format == "S"  # the stream carries the array's own type
    b = bridge.from_arrow(st)
    assert b.data_ptr() == t.data_ptr() and b.tolist() == t.tolist()
    # nanoarrow.Array prefers the stream, which now agrees with the array
    arr = na.Array(t)
    assert arr.to_pylist() == t.tolist()
    assert bridge.from_arrow(arr).data_ptr() == t.data_ptr()
    m = bridge.arange(24, dtype=bridge.float32).reshape(4, 6)
    cm = na.c_array(m)
    assert cm.schema.format == "+w:6" and cm.n_children == 1
    assert next(iter(cm.children)).buffers[1] == m.data_ptr()
    assert bridge.from_arrow(cm).data_ptr() == m.data_ptr()


def test_from_nanoarrow_arrays(na):
    src = np.arange(10, dtype=np.int16)
    ca = na.c_array_from_buffers(na.int16(), 4, [None, src], offset=3)
    b = bridge.from_arrow(ca)
    assert b.tolist() == [3, 4, 5, 6] and b.data_ptr() == src.__array_interface__["data"][0] + 6
    del ca, src
    gc.collect()
    assert b.tolist() == [3, 4, 5, 6]  # nanoarrow's buffer (and the numpy array) kept alive
    v, m = bridge.from_arrow(na.c_array([1, None, 3], na.int32()), with_mask=True)
    assert m.tolist() == [True, False, True] and v.tolist()[::2] == [1, 3]
    bits = na.c_array([True, False, True], na.bool_())
    with pytest.raises(ValueError, match="copy=True"):
        bridge.from_arrow(bits)
    assert bridge.from_arrow(na.c_array([True, False, True], na.bool_()), copy=True).tolist() == [
        True,
        False,
        True,
    ]
    with pytest.raises(TypeError, match="Arrow type string has"):
        bridge.from_arrow(na.c_array(["a"], na.string()))


# --------------------------------------------------------------------- DuckDB


def _duck_rows(duckdb, sql: str, t: bridge.Tensor) -> list:
    """Run ``sql`` over the local ``t`` (``duckdb``: the module, its default
    connection, or a connection). DuckDB's replacement scan reads the calling
    frame's f_locals, which materialises a dict holding every local (the test's
    ``keep`` included) for the frame's lifetime: query from a short-lived frame."""
    return duckdb.sql(sql).fetchall()


@pytest.mark.parametrize("name", list(ARROW_TYPES))
def test_duckdb_reads_tensor_variable(duckdb, name):
    dt, _ = ARROW_TYPES[name]
    t = sample(dt)
    keep = keepalive(t)
    r0 = refs(keep)
    before = snapshot()
    if dt is bridge.float16:
        # DuckDB 2.0 has no half floats: "Unsupported Internal Arrow Type e"
        with pytest.raises(duckdb.NotImplementedException, match="Arrow Type e"):
            _duck_rows(duckdb, "select * from t", t)
    else:
        rows = _duck_rows(duckdb, "select tensor from t", t)
        assert [r[0] for r in rows] == t.tolist()  # bool8 reads as BOOLEAN
        assert _duck_rows(duckdb, "select count(*) from t", t) == [(7,)]
    assert refs(keep) == r0  # DuckDB released every stream and batch
    d = balanced(before)
    if dt is not bridge.float16:
        assert d["arrow_exports"] >= 2  # DuckDB asks for the stream more than once


def test_duckdb_reads_slices_and_batches(duckdb):
    # a connection of its own: duckdb.sql's default connection refuses a second
    # caller while busy (ResourceInUseException), as under make test-parallel
    con = duckdb.connect()
    x = bridge.arange(10, dtype=bridge.int64)[3:7]
    assert _duck_rows(con, "select tensor from t", x) == [(3,), (4,), (5,), (6,)]
    assert _duck_rows(con, "select sum(tensor) from t", x) == [(18,)]
    ms = bridge.arange(24, dtype=bridge.int32).reshape(4, 2, 3)[1:3]
    assert con.sql("select * from ms").fetchall() == [
        ((6, 7, 8, 9, 10, 11),),
        ((12, 13, 14, 15, 16, 17),),
    ]
    # DuckDB drops arrow.fixed_shape_tensor: a plain fixed-size list, in physical order
    mp = bridge.arange(24, dtype=bridge.int32).reshape(4, 3, 2).transpose(1, 2)
    assert con.sql("select * from mp limit 1").fetchall() == [((0, 1, 2, 3, 4, 5),)]
    assert mp[0].tolist() == [[0, 2, 4], [1, 3, 5]]
    out = bridge.from_arrow(con.sql("select * from ms"))
    assert out.shape == (2, 6) and out.tolist() == ms.reshape(2, 6).tolist()


def test_from_duckdb_results(duckdb):
    y = bridge.arange(100, dtype=bridge.float64)
    before = snapshot()
    b = bridge.from_arrow(duckdb.sql("select tensor * 2 as z from y"))
    assert b.dtype is bridge.float64 and b.shape == (100,) and b.is_readonly
    assert b.tolist() == [2.0 * i for i in range(100)]
    assert b.data_ptr() != y.data_ptr()  # DuckDB's own result buffer
    gc.collect()
    assert b[99].item() == 198.0  # the guard keeps DuckDB's memory alive
    d = delta(before)
    assert d["arrow_imports"] - d["arrow_import_releases"] == 1  # the live batch
    del b
    balanced(before)
    reader = duckdb.sql("select range::INTEGER as r from range(7)").arrow()
    assert isinstance(reader, pa.RecordBatchReader)  # DuckDB 2.0: .arrow() is a reader
    assert bridge.from_arrow(reader).tolist() == list(range(7))
    for sql, dt in [
        ("select range::TINYINT as r from range(3)", bridge.int8),
        ("select range::UBIGINT as r from range(3)", bridge.uint64),
        ("select range::FLOAT as r from range(3)", bridge.float32),
    ]:
        got = bridge.from_arrow(duckdb.sql(sql))
        assert got.dtype is dt and got.tolist() == [0, 1, 2]
    with pytest.raises(ValueError, match="copy=True"):
        bridge.from_arrow(duckdb.sql("select true as b"))
    assert bridge.from_arrow(duckdb.sql("select true as b"), copy=True).tolist() == [True]
    nulls = "select NULL::INT as r union all select 1"
    with pytest.raises(ValueError, match="nulls"):
        bridge.from_arrow(duckdb.sql(nulls))
    # two batches: concatenated (with their masks) into new memory when copy=True
    with pytest.raises(ValueError, match=r"2 batches.*copy=True"):
        bridge.from_arrow(duckdb.sql(nulls), with_mask=True)
    values, valid = bridge.from_arrow(duckdb.sql(nulls), with_mask=True, copy=True)
    assert values.shape == (2,) and values[1].item() == 1 and valid.tolist() == [False, True]
    assert not values.is_readonly
    # DuckDB reads a tensor's stream directly (the same column as its array)
    t = bridge.arange(3, dtype=bridge.float64)  # noqa: F841 (DuckDB finds it by name)
    assert duckdb.sql("select * from t").fetchall() == [(0.0,), (1.0,), (2.0,)]
    with pytest.raises(ValueError, match="0 batches"):
        bridge.from_arrow(duckdb.sql("select 1 as a where false"))
    with pytest.raises(ValueError, match="2 columns"):
        bridge.from_arrow(duckdb.sql("select 1 as a, 2 as b"))
    with pytest.raises(TypeError, match="Arrow type string has"):
        bridge.from_arrow(duckdb.sql("select 'a' as s"))
