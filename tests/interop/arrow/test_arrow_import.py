"""``bridge.from_arrow`` of pyarrow data: bools (arrow.bool8 zero-copy,
bit-packed only by copy), null slots (refused, or values plus a mask with
``with_mask=True``), types with no bridge dtype, and several chunks, batches
or columns (refused, or concatenated with ``copy=True``).

Shared helpers (the Arrow type of each dtype, the C struct behind a capsule,
the address of an array's first value) are in ``arrow_helpers.py``; the peer
fixtures (``pl``, ``na``, ``duckdb``) in ``tests/conftest.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
from arrow_helpers import PEERS, fst_array, fst_values_address, pa, values_address
from lifetimes import balanced, frozen_heap, snapshot

import bridge


@pytest.fixture(scope="module", autouse=True)
def _frozen_heap():
    yield from frozen_heap(*PEERS)


# ---------------------------------------------------------------------- bools


def test_bool_import_bool8_zero_copy_bitpacked_needs_copy():
    b8 = pa.ExtensionArray.from_storage(pa.bool8(), pa.array([1, 0, 1, 1], pa.int8()))
    t = bridge.from_arrow(b8)
    assert t.dtype is bridge.bool and t.tolist() == [True, False, True, True]
    assert t.data_ptr() == values_address(b8) and t.is_readonly
    bits = pa.array([True, False, True, False, False, True, True, False, True, True])
    with pytest.raises(ValueError, match="copy=True"):
        bridge.from_arrow(bits)
    with pytest.raises(ValueError, match="copy=True"):
        bridge.from_arrow(bits.__arrow_c_array__())
    c = bridge.from_arrow(bits, copy=True)
    assert c.dtype is bridge.bool and c.tolist() == bits.to_pylist()
    sliced = bits.slice(3, 6)  # a bit offset inside a byte
    assert bridge.from_arrow(sliced, copy=True).tolist() == sliced.to_pylist()
    assert not c.is_readonly  # a fresh copy


def test_bitpacked_bool_with_mask():
    out = bridge.from_arrow(pa.array([True, None, False]), copy=True, with_mask=True)
    assert isinstance(out, tuple)
    values, valid = out
    assert valid.tolist() == [True, False, True] and values.tolist()[::2] == [True, False]


# -------------------------------------------------------- nulls and with_mask


@pytest.mark.parametrize(
    "make",
    [
        lambda: pa.array([1, None, 3, 4, None], pa.int32()),
        lambda: pa.array([1.5, None, 3.5, 4.5, None], pa.float16()),
        lambda: pa.array([9, 9, 1, None, 3, 4, None], pa.uint64()).slice(2),
        lambda: pa.ExtensionArray.from_storage(
            pa.bool8(), pa.array([1, None, 1, 0, None], pa.int8())
        ),
    ],
    ids=["int32", "float16", "sliced-uint64", "bool8"],
)
def test_null_slots_refused_or_masked(make):
    arr = make()
    before = snapshot()
    with pytest.raises(ValueError, match="with_mask=True"):
        bridge.from_arrow(arr)
    with pytest.raises(ValueError, match="nulls"):
        bridge.from_arrow(arr.__arrow_c_array__())
    values, valid = bridge.from_arrow(arr, with_mask=True)
    assert valid.dtype is bridge.bool and valid.tolist() == [True, False, True, True, False]
    assert values.shape == (5,) and values.data_ptr() == values_address(arr)
    got = values.tolist()
    want = arr.to_pylist()
    assert [g for g, ok in zip(got, valid.tolist()) if ok] == [w for w in want if w is not None]
    # no nulls: an all-true mask
    clean = pa.array([1, 2, 3], pa.int16())
    v, m = bridge.from_arrow(clean, with_mask=True)
    assert v.tolist() == [1, 2, 3] and m.tolist() == [True] * 3
    del values, valid, v, m
    balanced(before)


def test_masks_of_slices_at_every_bit_offset():
    """The validity bitmap (and bit-packed bools) of a slice is read from the byte
    holding its first bit: the mask is right at every offset, whole bytes included."""
    vals = [None if i % 3 == 0 or i % 7 == 0 else i for i in range(40)]
    ints, bools = pa.array(vals, pa.int32()), pa.array([v is None or v % 2 == 0 for v in vals])
    for start in range(0, 25):
        sl = ints.slice(start, 13)
        values, valid = bridge.from_arrow(sl, with_mask=True)
        assert valid.tolist() == sl.is_valid().to_pylist()
        assert values.data_ptr() == values_address(sl)
        b = bools.slice(start, 13)
        assert bridge.from_arrow(b, copy=True).tolist() == b.to_pylist()


def test_fixed_shape_tensor_null_slots():
    arr = fst_array(
        pa.int32(),
        (2, 3),
        pa.array(np.arange(18, dtype=np.int32)),
        mask=pa.array([False, True, False]),
    )
    assert arr.null_count == 1
    with pytest.raises(ValueError, match="nulls"):
        bridge.from_arrow(arr)
    values, valid = bridge.from_arrow(arr, with_mask=True)
    assert valid.tolist() == [True, False, True] and values.shape == (3, 2, 3)
    assert values.data_ptr() == fst_values_address(arr)
    want = np.arange(18).reshape(3, 2, 3)
    assert values[0].tolist() == want[0].tolist() and values[2].tolist() == want[2].tolist()
    sl = arr.slice(1, 2)
    v2, m2 = bridge.from_arrow(sl, with_mask=True)
    assert m2.tolist() == [False, True] and v2[1].tolist() == want[2].tolist()


def test_with_mask_and_copy_give_new_writable_memory():
    arr = pa.array([1, None, 3], pa.int32())
    values, valid = bridge.from_arrow(arr, with_mask=True, copy=True)
    assert not values.is_readonly and values.data_ptr() != values_address(arr)
    values[1] = 0
    assert values.tolist() == [1, 0, 3] and valid.tolist() == [True, False, True]
    values, valid = bridge.from_arrow(arr, with_mask=True)  # without copy: a read-only view
    assert values.is_readonly and values.data_ptr() == values_address(arr)


# ------------------------------------------------ what one tensor cannot hold


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: pa.array(["a", "b"]), "Arrow type string has"),
        (lambda: pa.array(["a", "b", "a"]).dictionary_encode(), "dictionary"),
        (lambda: pa.array([[1, 2], [3]], pa.list_(pa.int32())), r"list<item: int32> has"),
        (lambda: pa.array([1], pa.timestamp("s")), r"timestamp\[s\] has"),
        (lambda: pa.array([1], pa.timestamp("ns", tz="UTC")), r"timestamp\[ns, tz=UTC\] has"),
        (lambda: pa.array([1], pa.decimal128(10, 2)), r"decimal128\(10, 2\) has"),
        (lambda: pa.array([1], pa.duration("ms")), r"duration\[ms\] has"),
        (lambda: pa.array(["a"]).dictionary_encode(), r"dictionary<indices=int32> has"),
        (lambda: pa.array([{"a": "x"}], pa.struct([("a", pa.string())])), "Arrow type string has"),
    ],
    ids=["string", "dictionary", "list", "timestamp", "timestamp-tz", "decimal", "duration",
         "dictionary-name", "struct-of-string"],
)
def test_unsupported_formats(make, match):
    arr = make()
    before = snapshot()
    with pytest.raises(TypeError, match=match):
        bridge.from_arrow(arr)
    with pytest.raises(TypeError, match=match):
        bridge.from_arrow(arr.__arrow_c_array__())
    with pytest.raises(TypeError, match=match):
        bridge.from_arrow(pa.table({"c": arr}))
    balanced(before)


def test_fixed_size_lists_of_bits_are_unpacked_with_copy_true():
    """A FixedSizeList of bit-packed bools (a 2-d bool polars Series, a bool
    FixedShapeTensorArray) is a copy, as a bool array is: refused without
    copy=True, unpacked one byte per value with it (permutation honoured)."""
    arr = pa.array([[True, False, True], [False, False, True]], pa.list_(pa.bool_(), 3))
    with pytest.raises(ValueError, match=r"fixed_size_list<item: bool>\[3\] holds bit-packed bools"):
        bridge.from_arrow(arr)
    t = bridge.from_arrow(arr, copy=True)
    assert t.dtype == bridge.bool and t.tolist() == [[True, False, True], [False, False, True]]
    assert not t.is_readonly
    bits = [True, False, False, False, True, True, False, True]
    fst = pa.ExtensionArray.from_storage(pa.fixed_shape_tensor(pa.bool_(), [2, 2], permutation=[1, 0]),
                                         pa.FixedSizeListArray.from_arrays(pa.array(bits), 4))  # fmt: skip
    ints = pa.ExtensionArray.from_storage(pa.fixed_shape_tensor(pa.int8(), [2, 2], permutation=[1, 0]),
                                          pa.FixedSizeListArray.from_arrays(pa.array([int(b) for b in bits], pa.int8()), 4))  # fmt: skip
    assert bridge.from_arrow(fst, copy=True).tolist() == [[[bool(v) for v in r] for r in m]
                                                          for m in bridge.from_arrow(ints).tolist()]  # fmt: skip


def test_several_chunks_batches_or_columns():
    with pytest.raises(ValueError, match=r"2 chunks.*copy=True"):
        bridge.from_arrow(pa.chunked_array([[1, 2], [3]]))
    # copy=True concatenates them into new, writable memory
    joined = bridge.from_arrow(pa.chunked_array([[1, 2], [3]]), copy=True)
    assert joined.tolist() == [1, 2, 3] and not joined.is_readonly
    fst = pa.chunked_array([pa.array(bridge.arange(4).reshape(2, 2)),
                            pa.array(bridge.arange(4, 6).reshape(1, 2))])  # fmt: skip
    assert bridge.from_arrow(fst, copy=True).tolist() == [[0, 1], [2, 3], [4, 5]]
    values, valid = bridge.from_arrow(pa.chunked_array([[1, None], [3]]), copy=True, with_mask=True)
    assert values[[0, 2]].tolist() == [1, 3] and valid.tolist() == [True, False, True]
    with pytest.raises(ValueError, match="0 chunks"):
        bridge.from_arrow(pa.chunked_array([], pa.int32()))
    two = pa.concat_tables([pa.table({"a": [1]}), pa.table({"a": [2]})])
    with pytest.raises(ValueError, match="2 batches"):
        bridge.from_arrow(two)
    b = pa.record_batch({"a": [1, 2]})
    reader = pa.RecordBatchReader.from_batches(b.schema, [b, b, b])
    with pytest.raises(ValueError, match="3 batches"):
        bridge.from_arrow(reader)
    assert bridge.from_arrow(two.combine_chunks()).tolist() == [1, 2]
    for multi in (pa.table({"a": [1], "b": [2]}), pa.record_batch({"a": [1], "b": [2.0]})):
        with pytest.raises(ValueError, match=r"2 columns \['a', 'b'\]"):
            bridge.from_arrow(multi)
    # pyarrow writes no batch for an empty table (a zero-length tensor included)
    assert pa.table({"e": bridge.empty(0, dtype=bridge.int32)}).to_batches() == []
    with pytest.raises(ValueError, match="0 batches"):
        bridge.from_arrow(pa.table({"e": bridge.empty(0, dtype=bridge.int32)}))
    assert bridge.from_arrow(bridge.empty(0, dtype=bridge.int32).__arrow_c_stream__()).shape == (0,)
