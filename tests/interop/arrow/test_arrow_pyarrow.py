"""The pyarrow side: ``arrow.fixed_shape_tensor`` both ways (permutations as
CanonicalExtensions.rst defines them, dim names, batch slices, offsets on the
list and on its values, where pyarrow itself misreads them), structs and
record batches, and the pyarrow helpers ``to_array``, ``to_buffer``,
``to_tensor`` and ``to_fixed_shape_tensor`` with pa.Buffer and pa.Tensor.

What pyarrow does is asserted as observed with the installed version (26).

Shared helpers (the Arrow type of each dtype, the C struct behind a capsule,
the address of an array's first value) are in ``arrow_helpers.py``; the peer
fixtures (``pl``, ``na``, ``duckdb``) in ``tests/conftest.py``.
"""

from __future__ import annotations

import gc
import itertools

import numpy as np
import pytest
from arrow_helpers import (
    PEERS,
    fst_array,
    fst_values_address,
    keepalive,
    pa,
    refs,
    spec_logical,
    values_address,
)
from lifetimes import balanced, frozen_heap, snapshot

import bridge
from bridge.arrow import to_array, to_buffer, to_fixed_shape_tensor, to_tensor


@pytest.fixture(scope="module", autouse=True)
def _frozen_heap():
    yield from frozen_heap(*PEERS)


# -------------------------------------------- arrow.fixed_shape_tensor export


@pytest.mark.parametrize(
    ("shape", "perm"),
    [
        ((2, 3), (0, 1)),
        ((2, 3), (1, 0)),
        ((2, 3, 4), (0, 2, 1)),
        ((2, 3, 4), (1, 0, 2)),
        ((2, 3, 4), (2, 1, 0)),
        ((2, 3, 4), (1, 2, 0)),
        ((2, 3, 4), (2, 0, 1)),
    ],
)
def test_fst_export_of_permuted_tensor(shape, perm):
    """A batch whose element dims are a permuted dense block is exported zero-copy
    with the extension's permutation; ``shape`` is the physical (row-major) one."""
    n = int(np.prod(shape))
    base = bridge.arange(3 * n, dtype=bridge.int32).reshape(3, *shape)  # physical
    x = base.permute(0, *(p + 1 for p in perm))  # logical view
    a = pa.array(x)
    assert isinstance(a, pa.FixedShapeTensorArray) and len(a) == 3
    assert list(a.type.shape) == list(shape)
    assert a.type.permutation == (None if perm == tuple(range(len(shape))) else list(perm))
    assert a.storage.values.buffers()[1].address == x.data_ptr() == fst_values_address(a)
    assert a.storage.to_pylist() == np.arange(3 * n).reshape(3, n).tolist()
    want = spec_logical(np.arange(3 * n, dtype=np.int32).reshape(3, *shape), perm)
    assert x.tolist() == want.tolist()
    if all(perm[perm[i]] == i for i in range(len(perm))):
        # pyarrow agrees with the spec for involutions (see the 3-cycle test below)
        assert a.to_numpy_ndarray().tolist() == want.tolist()
    back = bridge.from_arrow(a)
    assert back.shape == x.shape and back.stride() == x.stride()
    assert back.data_ptr() == x.data_ptr() and back.tolist() == want.tolist()


@pytest.mark.parametrize("perm", [(1, 2, 0), (2, 0, 1)])
def test_pyarrow_fst_to_numpy_misreads_3_cycle_permutations(perm):
    """CanonicalExtensions.rst: logical dim i is physical dim permutation[i]
    (``{"shape": [100, 200, 500], "permutation": [2, 0, 1]}`` is logically
    [500, 100, 200]). bridge follows it both ways; pyarrow 26's
    to_numpy_ndarray/to_tensor give the right logical shape with the wrong
    strides for permutations that are not their own inverse."""
    values = pa.array(np.arange(48, dtype=np.int32))
    arr = fst_array(pa.int32(), (2, 3, 4), values, permutation=list(perm))
    want = spec_logical(np.arange(48, dtype=np.int32).reshape(2, 2, 3, 4), perm)
    b = bridge.from_arrow(arr)
    assert b.shape == want.shape and b.tolist() == want.tolist()
    assert b.data_ptr() == fst_values_address(arr)
    ref = arr.to_numpy_ndarray()
    assert ref.shape == want.shape
    assert ref.tolist() != want.tolist()  # pyarrow's bug, as observed


def test_fst_dim_names_follow_the_physical_order():
    nhwc = bridge.arange(2 * 4 * 5 * 3, dtype=bridge.float32).reshape(2, 4, 5, 3)
    nchw = nhwc.permute(0, 3, 1, 2)  # logically C, H, W; stored H, W, C
    a = to_fixed_shape_tensor(nchw, dim_names=["C", "H", "W"])
    assert a.type.shape == [4, 5, 3] and a.type.permutation == [2, 0, 1]
    assert a.type.dim_names == ["H", "W", "C"]  # dim_names name the physical dims
    assert fst_values_address(a) == nchw.data_ptr()
    back = bridge.from_arrow(a)
    assert back.shape == (2, 3, 4, 5) and back.stride() == nchw.stride()
    assert back.tolist() == nchw.tolist()
    plain = to_fixed_shape_tensor(nhwc, dim_names=["H", "W", "C"])
    assert plain.type.dim_names == ["H", "W", "C"] and plain.type.permutation is None
    with pytest.raises(ValueError, match="dim_names"):
        to_fixed_shape_tensor(nhwc, dim_names=["H", "W"])
    with pytest.raises(ValueError, match="at least 2 dims"):
        to_fixed_shape_tensor(bridge.arange(3))


def test_fst_export_of_size_one_dims_and_single_rows():
    x = bridge.arange(12, dtype=bridge.int64).reshape(3, 1, 4, 1)
    a = pa.array(x)
    assert a.type.permutation is None and fst_values_address(a) == x.data_ptr()
    assert a.to_numpy_ndarray().tolist() == x.tolist()
    row = bridge.arange(20, dtype=bridge.int64).reshape(4, 5)[2:3]  # one batch row, any stride
    r = pa.array(row)
    assert fst_values_address(r) == row.data_ptr()
    assert bridge.from_arrow(r).tolist() == row.tolist()


def test_fst_export_of_batch_slice_is_valid_arrow():
    m = bridge.arange(30, dtype=bridge.int32).reshape(5, 2, 3)
    s = m[1:4]
    a = pa.array(s)
    a.validate(full=True)
    assert fst_values_address(a) == s.data_ptr()
    assert a.storage.to_pylist() == np.arange(30).reshape(5, 6)[1:4].tolist()
    back = bridge.from_arrow(a)
    assert back.data_ptr() == s.data_ptr() and back.tolist() == s.tolist()


def test_fst_export_of_batch_slice_reads_right_in_pyarrow():
    m = bridge.arange(30, dtype=bridge.int32).reshape(5, 2, 3)
    assert to_fixed_shape_tensor(m[1:4]).to_numpy_ndarray().tolist() == m[1:4].tolist()


def test_every_permutation_round_trips_through_capsules():
    base = bridge.arange(2 * 2 * 3 * 4, dtype=bridge.uint8).reshape(2, 2, 3, 4)
    for perm in itertools.permutations(range(3)):
        x = base.permute(0, *(p + 1 for p in perm))
        b = bridge.from_arrow(x.__arrow_c_array__())
        assert b.shape == x.shape and b.stride() == x.stride() and b.data_ptr() == x.data_ptr()
        typ = pa.field(x).type
        assert typ.shape == [2, 3, 4] and (typ.permutation or [0, 1, 2]) == list(perm)


# -------------------------------------------- arrow.fixed_shape_tensor import


@pytest.mark.parametrize("dim_names", [None, ["rows", "cols"]])
def test_fst_import_from_pyarrow_permuted(dim_names):
    values = pa.array(np.arange(24, dtype=np.int32))
    arr = fst_array(pa.int32(), (2, 3), values, permutation=[1, 0], dim_names=dim_names)
    before = snapshot()
    b = bridge.from_arrow(arr)
    assert b.dtype is bridge.int32 and b.shape == (4, 3, 2) and b.stride() == (6, 1, 3)
    assert b.is_readonly and b.data_ptr() == fst_values_address(arr)
    assert b.tolist() == arr.to_numpy_ndarray().tolist()
    assert b.tolist() == np.arange(24).reshape(4, 2, 3).transpose(0, 2, 1).tolist()
    del b
    d = balanced(before)
    assert (d["arrow_imports"], d["imports"]) == (1, 0)


@pytest.mark.parametrize(("offset", "length"), [(1, 3), (4, 1), (0, 5), (2, 0)])
def test_fst_import_of_sliced_arrays(offset, length):
    """apache/arrow#35573: sliced FixedShapeTensorArrays once came back at the wrong
    offset. Both the list's offset and the values child's offset must count."""
    want = np.arange(30, dtype=np.int32).reshape(5, 2, 3)
    arr = fst_array(pa.int32(), (2, 3), pa.array(want.ravel()))
    sl = arr.slice(offset, length)
    b = bridge.from_arrow(sl)
    assert b.shape == (length, 2, 3) and b.tolist() == want[offset : offset + length].tolist()
    if length:
        assert b.data_ptr() == arr.storage.values.buffers()[1].address + offset * 24
        assert b.data_ptr() == fst_values_address(sl)
    # the offset on the values child instead of the list
    child = fst_array(pa.int32(), (2, 3), pa.array(want.ravel()).slice(6 * offset, 6 * length))
    c = bridge.from_arrow(child)
    assert c.tolist() == want[offset : offset + length].tolist()
    if length:
        assert c.data_ptr() == fst_values_address(child) == b.data_ptr()


def test_pyarrow_fst_to_numpy_ignores_the_values_offset():
    """The apache/arrow#35573 family, still in pyarrow 26: to_numpy_ndarray() of a
    FixedShapeTensorArray whose values child has an offset reads from the start
    of the buffer. bridge reads the right values."""
    want = np.arange(30, dtype=np.int32).reshape(5, 2, 3)
    child = fst_array(pa.int32(), (2, 3), pa.array(want.ravel()).slice(6))
    assert bridge.from_arrow(child).tolist() == want[1:].tolist()
    assert child.to_numpy_ndarray().tolist() == want[:4].tolist()  # pyarrow's bug, as observed


def test_plain_fixed_size_list_import():
    arr = pa.array([[1, 2, 3], [4, 5, 6]], pa.list_(pa.int16(), 3))
    b = bridge.from_arrow(arr)
    assert b.dtype is bridge.int16 and b.shape == (2, 3) and b.tolist() == [[1, 2, 3], [4, 5, 6]]
    assert b.data_ptr() == fst_values_address(arr)
    sl = arr.slice(1)
    assert bridge.from_arrow(sl).data_ptr() == fst_values_address(sl)
    with pytest.raises(TypeError, match=r"fixed_size_list<item: fixed_size_list<item: int32>\[2\]>\[1\]"):
        bridge.from_arrow(pa.array([[[1, 2]]], pa.list_(pa.list_(pa.int32(), 2), 1)))


def test_struct_and_record_batch_import():
    cols = pa.StructArray.from_arrays([pa.array(np.arange(6, dtype=np.int64))], names=["x"])
    b = bridge.from_arrow(cols.slice(2, 3))  # a struct offset applies to its child
    assert b.tolist() == [2, 3, 4] and b.data_ptr() == values_address(cols.field(0)) + 16
    fst = fst_array(pa.int32(), (2, 3), pa.array(np.arange(30, dtype=np.int32)))
    rb = pa.record_batch({"x": fst})
    r = bridge.from_arrow(rb.slice(1, 2))  # pyarrow slices the columns, not the struct
    assert r.tolist() == np.arange(30).reshape(5, 2, 3)[1:3].tolist()
    t = bridge.from_arrow(pa.table({"x": fst}).slice(1, 2))
    assert t.data_ptr() == r.data_ptr()


def test_sliced_struct_of_fixed_shape_tensor():
    fst = fst_array(pa.int32(), (2, 3), pa.array(np.arange(30, dtype=np.int32)))
    st = pa.StructArray.from_arrays([fst], names=["x"]).slice(1, 2)
    assert bridge.from_arrow(st).tolist() == np.arange(30).reshape(5, 2, 3)[1:3].tolist()


# ------------------------------------------ to_array, pa.Buffer and pa.Tensor


def test_to_array_bool_and_casts():
    b = bridge.tensor([True, False, True, True, False])
    z = to_array(b)  # zero-copy, one byte per value
    assert z.type == pa.bool8() and values_address(z) == b.data_ptr()
    assert z.to_pylist() == b.tolist()
    c = to_array(b, type=pa.bool_())  # the explicit, bit-packing copy
    assert c.type == pa.bool_() and c.to_pylist() == b.tolist()
    assert c.buffers()[1].address != b.data_ptr()
    f = bridge.arange(3, dtype=bridge.float32)
    d = to_array(f, type=pa.float64())
    assert d.type == pa.float64() and d.to_pylist() == [0.0, 1.0, 2.0]
    same = to_array(f, type=pa.float32())
    assert values_address(same) == f.data_ptr()
    m = bridge.arange(6, dtype=bridge.int8).reshape(3, 2)
    fm = to_array(m)
    assert isinstance(fm, pa.FixedShapeTensorArray) and fst_values_address(fm) == m.data_ptr()


def test_buffer_both_ways():
    t = bridge.arange(8, dtype=bridge.int32)
    keep = keepalive(t)
    r0 = refs(keep)
    buf = to_buffer(t)
    assert buf.address == t.data_ptr() and buf.size == 32 and not buf.is_mutable
    assert refs(keep) == r0 + 1
    assert np.frombuffer(buf, dtype=np.int32).tolist() == t.tolist()
    sbuf = to_buffer(t.untyped_storage())
    assert sbuf.address == t.data_ptr() and sbuf.size == t.untyped_storage().nbytes()
    assert to_buffer(t[2:]).address == t.data_ptr() + 8
    with pytest.raises(ValueError, match="contiguous"):
        to_buffer(t[::2])
    with pytest.raises(TypeError, match="Tensor or UntypedStorage"):
        to_buffer(b"abc")
    del t
    gc.collect()
    assert np.frombuffer(buf, dtype=np.int32).tolist() == list(range(8))  # buf keeps it alive
    del buf, sbuf
    assert refs(keep) == r0 - 1  # t's own reference went with it

    mutable = pa.allocate_buffer(16)
    m = bridge.from_arrow(mutable)
    assert m.dtype is bridge.uint8 and m.shape == (16,) and m.data_ptr() == mutable.address
    assert not m.is_readonly
    m.fill_(7)
    m[3] = 42
    assert bytes(mutable)[:4] == b"\x07\x07\x07\x2a"
    immutable = pa.py_buffer(b"abcdefgh")
    i = bridge.from_arrow(immutable)
    assert i.is_readonly and i.data_ptr() == immutable.address and bytes(i.tolist()) == b"abcdefgh"
    with pytest.raises(ValueError, match="read-only"):
        i[0] = 1
    whole = pa.py_buffer(bytearray(b"0123456789"))
    assert not bridge.from_arrow(whole).is_readonly
    sliced = whole.slice(3, 4)
    assert not sliced.is_mutable  # pyarrow 26: a slice of a mutable buffer is immutable
    s = bridge.from_arrow(sliced)
    assert s.data_ptr() == sliced.address and bytes(s.tolist()) == b"3456" and s.is_readonly
    del mutable
    gc.collect()
    assert m[3].item() == 42  # the tensor keeps the pyarrow buffer alive


def test_tensor_both_ways():
    t = bridge.arange(12, dtype=bridge.float64).reshape(3, 4)
    pt = to_tensor(t)
    assert pt.shape == (3, 4) and pt.strides == (32, 8) and pt.type == pa.float64()
    assert pt.to_numpy().__array_interface__["data"][0] == t.data_ptr()
    tt = to_tensor(t.t())
    assert tt.shape == (4, 3) and tt.strides == (8, 32)
    back = bridge.from_arrow(tt)
    assert back.shape == (4, 3) and back.stride() == (1, 4) and back.data_ptr() == t.data_ptr()
    assert back.tolist() == t.t().tolist() and back.is_readonly
    with pytest.raises(ValueError, match="negative strides"):
        to_tensor(t[:, ::-1])
    with pytest.raises(TypeError, match="bool"):
        to_tensor(bridge.ones(3, dtype=bridge.bool))
    src = np.arange(6, dtype=np.int16).reshape(2, 3)
    nt = pa.Tensor.from_numpy(src)
    b = bridge.from_arrow(nt)
    assert b.dtype is bridge.int16 and b.data_ptr() == src.__array_interface__["data"][0]
    del nt, src
    gc.collect()
    assert b.tolist() == [[0, 1, 2], [3, 4, 5]]  # the tensor keeps the pa.Tensor alive
    del t
    gc.collect()
    assert pt.to_numpy().tolist() == np.arange(12.0).reshape(3, 4).tolist()
