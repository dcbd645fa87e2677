"""Arrow interop: the PyCapsule interface both ways, pyarrow objects, peers.

Every exchange checks values *and* aliasing (the consumer's first value sits
at the tensor's ``data_ptr()``, Arrow offsets applied), then lifetimes: the
reference count of the storage's keep-alive object, the C counters of
``bridge._C.stats()`` (``arrow_exports``/``arrow_releases`` for exported
array nodes, ``arrow_imports``/``arrow_import_releases`` for import guards;
plain primitive pyarrow arrays enter through pyarrow's DLPack export and so
count as DLPack ``imports``), and resident memory over many round trips.
Malformed C structs are made by corrupting the fields of bridge's (or
pyarrow's) own exported structs in place, through cffi, before the import.

Peers other than pyarrow are optional: each test skips where its peer is not
installed. What the peers themselves do (types they drop, paths they prefer,
their own bugs) is asserted as observed with the installed versions (pyarrow
26, polars 2.1, nanoarrow 0.9, DuckDB 2.0) and commented.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import itertools
import json
import struct
import subprocess
import sys
import textwrap
import warnings
from typing import Any

import numpy as np
import pytest
from bridge._native import ffi
from lifetimes import RSS_BUDGET, balanced, delta, frozen_heap, round_trips, snapshot

import bridge
from bridge.arrow import to_array, to_buffer, to_fixed_shape_tensor, to_tensor

pa = pytest.importorskip("pyarrow")


# bridge dtype -> the Arrow type of its 1-d export
ARROW_TYPES: dict[str, tuple[Any, Any]] = {
    "int8": (bridge.int8, pa.int8()),
    "int16": (bridge.int16, pa.int16()),
    "int32": (bridge.int32, pa.int32()),
    "int64": (bridge.int64, pa.int64()),
    "uint8": (bridge.uint8, pa.uint8()),
    "uint16": (bridge.uint16, pa.uint16()),
    "uint32": (bridge.uint32, pa.uint32()),
    "uint64": (bridge.uint64, pa.uint64()),
    "float16": (bridge.float16, pa.float16()),
    "float32": (bridge.float32, pa.float32()),
    "float64": (bridge.float64, pa.float64()),
    "bool": (bridge.bool, pa.bool8()),
}
FORMATS = {
    "int8": "c",
    "int16": "s",
    "int32": "i",
    "int64": "l",
    "uint8": "C",
    "uint16": "S",
    "uint32": "I",
    "uint64": "L",
    "float16": "e",
    "float32": "f",
    "float64": "g",
    "bool": "c",
}


# ------------------------------------------------------------- helpers


# A private handle, so that our argtypes never clash with another user of
# ctypes.pythonapi. PyDLL keeps the GIL.
_PY = ctypes.PyDLL(None)
_capsule_ptr = _PY.PyCapsule_GetPointer
_capsule_ptr.restype = ctypes.c_void_p
_capsule_ptr.argtypes = (ctypes.py_object, ctypes.c_char_p)

_STRUCT_OF = {
    b"arrow_schema": "struct ArrowSchema *",
    b"arrow_array": "struct ArrowArray *",
    b"arrow_device_array": "struct ArrowDeviceArray *",
    b"arrow_array_stream": "struct ArrowArrayStream *",
}


def c_struct(capsule, name: bytes):
    """The C struct a PyCapsule-interface capsule points at, as a cffi pointer
    (the capsule stays the owner: its destructor still releases and frees it)."""
    return ffi.cast(_STRUCT_OF[name], _capsule_ptr(capsule, name))


def keepalive(t: bridge.Tensor) -> Any:
    """The object every Arrow export of ``t`` holds a reference to."""
    keep = t.untyped_storage().owner
    assert keep is not None
    return keep


def refs(obj: Any) -> int:
    gc.collect()
    return sys.getrefcount(obj)


def values_address(arr) -> int:
    """The address of a primitive (or bool8) array's first value: Array.buffers() ignores the offset."""
    if isinstance(arr.type, pa.BaseExtensionType):
        arr = arr.storage
    return arr.buffers()[1].address + arr.offset * arr.type.byte_width


def fst_values_address(arr) -> int:
    """The address of a FixedShapeTensorArray's (or FixedSizeListArray's) first value,
    both the list's offset and its values child's own offset applied."""
    lists = arr.storage if isinstance(arr.type, pa.BaseExtensionType) else arr
    values = lists.values  # ignores the list's offset, keeps its own
    if isinstance(values.type, pa.BaseExtensionType):
        values = values.storage
    first = values.offset + lists.offset * lists.type.list_size
    return values.buffers()[1].address + first * values.type.byte_width


def sample(dt, n: int = 7) -> bridge.Tensor:
    if dt is bridge.bool:
        return bridge.tensor([i % 3 != 1 for i in range(n)])
    return bridge.arange(n, dtype=bridge.int64).to(dt)


def spec_logical(physical: np.ndarray, perm) -> np.ndarray:
    """arrow.fixed_shape_tensor (CanonicalExtensions.rst): ``shape`` is the physical
    shape and logical dim i is physical dim ``permutation[i]``; dim 0 is the batch."""
    return physical.transpose(0, *(p + 1 for p in perm))


def fst_array(value_type, shape, values, permutation=None, dim_names=None, mask=None):
    typ = pa.fixed_shape_tensor(value_type, shape, permutation=permutation, dim_names=dim_names)
    size = int(np.prod(shape))
    storage = pa.FixedSizeListArray.from_arrays(values, size, mask=mask)
    return pa.ExtensionArray.from_storage(typ, storage)


class StreamOnly:
    """Forwards only ``__arrow_c_stream__``, as a DataFrame-like producer would."""

    def __init__(self, t: bridge.Tensor) -> None:
        self.t = t

    def __arrow_c_stream__(self, requested_schema=None):
        return self.t.__arrow_c_stream__(requested_schema)


@pytest.fixture(scope="module", autouse=True)
def _frozen_heap():
    yield from frozen_heap("pyarrow", "polars", "nanoarrow", "duckdb", "torch")


@pytest.fixture
def pl():
    return pytest.importorskip("polars")


@pytest.fixture
def na():
    return pytest.importorskip("nanoarrow")


@pytest.fixture
def duckdb():
    return pytest.importorskip("duckdb")


# ====================================================== 1. pyarrow, export


@pytest.mark.parametrize("name", list(ARROW_TYPES))
def test_pa_array_every_dtype_zero_copy(name):
    dt, typ = ARROW_TYPES[name]
    t = sample(dt)
    before = snapshot()
    a = pa.array(t)
    assert a.type == typ and len(a) == 7 and a.null_count == 0
    assert a.to_pylist() == t.tolist()
    assert values_address(a) == t.data_ptr()
    a.validate(full=True)
    # and back: primitive pyarrow arrays come in through pyarrow's DLPack export,
    # bool8 through the Arrow C data interface
    b = bridge.from_arrow(a)
    assert b.dtype is dt and b.shape == (7,) and b.is_readonly
    assert b.data_ptr() == t.data_ptr() and b.tolist() == t.tolist()
    t[1] = t[0]  # Arrow data is immutable, but it is a view: bridge-side writes show
    assert b.tolist() == t.tolist() and a.to_pylist() == t.tolist()
    del a, b
    d = balanced(before)
    assert d["arrow_exports"] == 1
    # pyarrow >= 26 exports plain arrays through DLPack (max_version); older pyarrow has no
    # max_version, so bridge takes the Arrow C data interface instead: either is zero-copy.
    paths = {(1, 0)} if dt is bridge.bool else {(0, 1), (1, 0)}
    assert (d["arrow_imports"], d["imports"]) in paths


@pytest.mark.parametrize("name", list(ARROW_TYPES))
def test_schema_capsule_every_dtype(name):
    dt, typ = ARROW_TYPES[name]
    t = sample(dt)
    field = pa.field(t)  # __arrow_c_schema__
    assert field.name == bridge.arrow.COLUMN_NAME and field.type == typ and field.nullable
    cap = t.__arrow_c_schema__()
    assert ffi.string(c_struct(cap, b"arrow_schema").format) == FORMATS[name].encode()
    m = t.reshape(1, 7)
    assert pa.field(m).type == pa.fixed_shape_tensor(typ, [7])


@pytest.mark.parametrize(("start", "length"), [(0, 10), (3, 5), (9, 1), (4, 0)])
def test_pa_array_of_sliced_tensor_uses_offset(start, length):
    base = bridge.arange(10, dtype=bridge.int32)
    t = base[start : start + length]
    a = pa.array(t)
    assert a.to_pylist() == list(range(start, start + length))
    if length:
        # bridge exports the storage's base address with the Arrow offset, not a moved pointer
        assert a.offset == start and a.buffers()[1].address == base.data_ptr()
        assert values_address(a) == t.data_ptr()
    a.validate(full=True)
    assert pa.array(base[5:6].reshape(1)).to_pylist() == [5]


def test_stream_and_array_describe_the_same_array():
    """A tensor is a column: __arrow_c_array__ and __arrow_c_stream__ both give
    its own type (as pa.Array and pa.ChunkedArray do), so every consumer sees
    one thing; tables are built from a dict, or asked for with a one-column
    struct request (docs/arrow.md)."""
    t = bridge.arange(6, dtype=bridge.float64)
    a, ca = pa.array(t), pa.chunked_array(t)
    assert a.type == ca.type == pa.float64() and ca.num_chunks == 1
    assert values_address(a) == values_address(ca.chunk(0)) == t.data_ptr()
    assert bridge.from_arrow(ca).data_ptr() == t.data_ptr()
    assert bridge.from_arrow(pa.chunked_array([pa.array(t)])).data_ptr() == t.data_ptr()
    with pytest.raises(pa.ArrowInvalid, match="non-struct"):
        pa.table(t)  # a column is not a table: pyarrow wants a struct stream
    tb = pa.table({"tensor": t})
    assert tb.schema.names == ["tensor"] and values_address(tb.column(0).chunk(0)) == t.data_ptr()
    assert bridge.from_arrow(tb).data_ptr() == t.data_ptr()
    assert bridge.from_arrow(tb.to_batches()[0]).data_ptr() == t.data_ptr()
    # the record-batch form, negotiated through requested_schema
    reader = pa.RecordBatchReader.from_stream(t, schema=pa.schema([("x", pa.float64())]))
    batch = reader.read_next_batch()
    assert batch.schema.names == ["x"] and values_address(batch.column(0)) == t.data_ptr()
    m = bridge.arange(12, dtype=bridge.int16).reshape(3, 4)
    assert pa.array(m).type == pa.chunked_array(m).type
    tm = pa.table({"m": m})
    assert isinstance(tm.column(0).type, pa.FixedShapeTensorType)
    assert fst_values_address(tm.column(0).chunk(0)) == m.data_ptr()
    assert bridge.from_arrow(tm).stride() == (4, 1)


def test_requested_schema_of_the_same_type_is_honoured():
    t = bridge.arange(5, dtype=bridge.float32)
    m = bridge.arange(6, dtype=bridge.float32).reshape(2, 3)
    before = snapshot()
    for x in (t, m):
        typ = pa.array(x).type
        for req in (typ.__arrow_c_schema__(), pa.field("renamed", typ, nullable=False).__arrow_c_schema__()):
            for method in ("__arrow_c_array__", "__arrow_c_device_array__"):
                b = bridge.from_arrow(getattr(x, method)(requested_schema=req))
                assert b.data_ptr() == x.data_ptr() and b.tolist() == x.tolist()
            assert bridge.from_arrow(x.__arrow_c_stream__(req)).data_ptr() == x.data_ptr()
        # the field name asked for is the one exported
        named = pa.field("renamed", typ).__arrow_c_schema__()
        assert pa.Field._import_from_c_capsule(x.__arrow_c_array__(named)[0]).name == "renamed"
        # a one-column struct: the record batch holding the tensor
        struct = pa.schema([("col", typ)]).__arrow_c_schema__()
        rb = pa.record_batch(_Forward(x, struct))
        assert rb.schema.names == ["col"] and rb.num_rows == x.shape[0]
        assert bridge.from_arrow(rb).data_ptr() == x.data_ptr()
    del b, rb
    balanced(before)


class _Forward:
    """Asks the tensor for its Arrow array with a fixed requested_schema."""

    def __init__(self, t, requested):
        self.t, self.requested = t, requested

    def __arrow_c_array__(self, requested_schema=None):
        return self.t.__arrow_c_array__(self.requested)


@pytest.mark.parametrize(
    ("requested", "names"),
    [
        (lambda: pa.string().__arrow_c_schema__(), "string"),
        (lambda: pa.list_(pa.int8()).__arrow_c_schema__(), r"list<item: int8>"),
        (lambda: pa.bool_().__arrow_c_schema__(), "bool"),  # bit-packed: no bridge dtype
        (lambda: pa.fixed_shape_tensor(pa.float32(), [3, 2]).__arrow_c_schema__(), "fixed_shape"),
        (lambda: pa.fixed_shape_tensor(pa.float64(), [3, 2]).__arrow_c_schema__(), "fixed_shape"),
        (lambda: pa.schema([("a", pa.float32()), ("b", pa.float32())]).__arrow_c_schema__(),
         r"struct<a: float, b: float>"),  # another number of fields
        (lambda: pa.schema([("a", pa.list_(pa.float64()))]).__arrow_c_schema__(),
         r"struct<a: list<item: double>>"),  # another nesting, in a struct
    ],
    ids=["string", "list", "bool_", "other-fst", "other-fst-and-value", "two-fields",
         "struct-of-list"],
)
def test_requested_schema_the_data_cannot_take_raises(requested, names):
    """The PyCapsule interface: a request no cast meets (another nesting, shape or
    number of fields, a type with no bridge dtype) raises."""
    t = bridge.arange(4, dtype=bridge.float32)
    m = bridge.arange(6, dtype=bridge.float32).reshape(2, 3)
    before = snapshot()
    for x in (t, m):
        for method in ("__arrow_c_array__", "__arrow_c_device_array__", "__arrow_c_stream__"):
            with pytest.raises(ValueError, match=f"requested Arrow type {names}.*cannot be produced"):
                getattr(x, method)(requested())
    balanced(before)


@pytest.mark.parametrize(
    "requested",
    [lambda: 42, lambda: "float64", lambda: pa.array([1]).__arrow_c_array__()[1]],
    ids=["int", "str", "array-capsule"],
)
def test_requested_schema_must_be_a_schema_capsule(requested):
    t = bridge.arange(4, dtype=bridge.float32)
    for method in ("__arrow_c_array__", "__arrow_c_device_array__", "__arrow_c_stream__"):
        with pytest.raises(TypeError, match="requested_schema must be an 'arrow_schema' PyCapsule"):
            getattr(t, method)(requested())


# (tensor dtype, requested type): casts that pyarrow's safe cast also makes
CASTS = [
    (bridge.int64, pa.int32()), (bridge.int64, pa.float64()), (bridge.int32, pa.uint8()),
    (bridge.float32, pa.float64()), (bridge.float64, pa.float16()), (bridge.float64, pa.int16()),
    (bridge.uint16, pa.int8()), (bridge.bool, pa.float32()), (bridge.uint64, pa.int64()),
]  # fmt: skip


def _cast_values(dt) -> bridge.Tensor:
    return bridge.tensor([0, 1, 2, 3, 0, 5, 6, 7], dtype=bridge.int64).to(dt)


@pytest.mark.parametrize(("dt", "typ"), CASTS, ids=[f"{d}-{t}" for d, t in CASTS])
def test_a_requested_type_is_met_by_a_cast(dt, typ):
    """Schema requests (issue 19): a request for another value type is met as
    pyarrow meets it for its own arrays, by a cast into new memory (bridge's
    own ``Tensor.to``): the values are pyarrow's cast of the same values, the
    tensor is untouched, and the new memory lives as long as the export."""
    t = _cast_values(dt)
    want = pa.array(t.numpy()).cast(typ)  # pyarrow's own cast of the same values
    before = snapshot()
    got = pa.array(t, type=typ)
    assert got.equals(want)
    assert values_address(got) != t.data_ptr()
    chunked = pa.chunked_array(t, type=typ)
    assert chunked.num_chunks == 1 and chunked.chunk(0).equals(want)
    schema, array = t.__arrow_c_array__(typ.__arrow_c_schema__())
    assert pa.Array._import_from_c_capsule(schema, array).to_pylist() == want.to_pylist()
    assert t.tolist() == _cast_values(dt).tolist()
    del got, chunked, schema, array
    balanced(before)


def test_a_requested_bool8_field_is_met_by_a_cast():
    """A field request keeps the extension (pa.array(type=) asks for its storage
    type): arrow.bool8, whose true is any nonzero byte, from numbers by
    bridge's cast to bool."""
    t = bridge.tensor([0, 1, 2, 0, 7])
    got = pa.Array._import_from_c_capsule(*t.__arrow_c_array__(pa.field("x", pa.bool8()).__arrow_c_schema__()))
    assert got.type == pa.bool8()
    assert got.to_pylist() == pa.array(t.numpy()).cast(pa.bool8()).to_pylist()


def test_a_requested_type_of_an_nd_tensor_is_met_by_a_cast():
    """The values of a fixed_shape_tensor (or its storage, a FixedSizeList) cast,
    the layout kept: a permuted tensor stays permuted; a layout with no Arrow
    form is cast into contiguous memory."""
    p = bridge.arange(24, dtype=bridge.float32).reshape(2, 4, 3).transpose(1, 2)
    typ = pa.array(p).type
    assert typ.permutation == [1, 0]
    req = pa.fixed_shape_tensor(pa.float64(), typ.shape, permutation=typ.permutation)
    got = pa.Array._import_from_c_capsule(*p.__arrow_c_array__(req.__arrow_c_schema__()))
    assert got.type == req
    back = bridge.from_arrow(got)
    assert back.dtype is bridge.float64 and back.stride() == p.stride() and back.tolist() == p.tolist()
    # pa.array(type=) asks for the storage type: a FixedSizeList of the values
    lists = pa.array(p, type=pa.list_(pa.int16(), 12))
    assert lists.type == pa.list_(pa.int16(), 12)
    assert lists.values.to_pylist() == pa.array(p).storage.values.cast(pa.int16()).to_pylist()
    # strided rows have no Arrow form: a cast request gives contiguous new memory
    s = bridge.arange(12, dtype=bridge.int32).reshape(3, 4).t()
    with pytest.raises(ValueError, match="not a batch of dense tensors"):
        pa.array(s)
    fst = pa.fixed_shape_tensor(pa.int64(), [3])
    got = pa.Array._import_from_c_capsule(*s.__arrow_c_array__(pa.field("s", fst).__arrow_c_schema__()))
    assert bridge.from_arrow(got).tolist() == s.tolist()


def test_a_request_for_the_same_type_is_zero_copy(na):
    """pa.array(type=), pa.chunked_array(type=) and nanoarrow's c_array(x, schema)
    with the tensor's own type: the tensor's memory, no copy."""
    t = bridge.arange(6, dtype=bridge.int32)
    assert values_address(pa.array(t, type=pa.int32())) == t.data_ptr()
    assert values_address(pa.chunked_array(t, type=pa.int32()).chunk(0)) == t.data_ptr()
    c = na.c_array(t, na.int32())
    assert c.schema.format == "i" and c.buffers[1] == t.data_ptr()
    m = bridge.arange(6, dtype=bridge.float32).reshape(2, 3)
    assert fst_values_address(pa.array(m, type=pa.array(m).type)) == m.data_ptr()


def test_nanoarrow_requests_are_cast(na):
    t = bridge.arange(6, dtype=bridge.int64)
    c = na.c_array(t, na.int16())
    assert c.schema.format == "s" and c.buffers[1] != t.data_ptr()
    assert na.Array(c).to_pylist() == pa.array(t.numpy()).cast(pa.int16()).to_pylist()
    s = na.c_array_stream(t, na.float32())
    assert s.get_schema().format == "f"
    assert na.Array(s).to_pylist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    with pytest.raises(ValueError, match=r"requested Arrow type struct<a: int32, b: int32> "
                                         r"cannot be produced"):  # fmt: skip
        na.c_array(t, na.struct({"a": na.int32(), "b": na.int32()}))


@pytest.mark.parametrize(
    ("values", "dt", "typ", "bad"),
    [
        ([1, 300], bridge.int64, pa.int8(), "300"),
        ([1, -1], bridge.int64, pa.uint64(), "-1"),
        ([1.0, 1.5], bridge.float64, pa.int64(), "1.5"),
        ([1.0, float("nan")], bridge.float32, pa.int32(), "nan"),
        ([1.0, float("inf")], bridge.float64, pa.uint8(), "inf"),
        ([1, 2**53 + 1], bridge.int64, pa.float64(), "9007199254740993"),
        ([1, 2**24 + 1], bridge.int32, pa.float32(), "16777217"),
        ([1, 2**63], bridge.uint64, pa.int64(), "9223372036854775808"),
    ],
    ids=["overflow", "negative-unsigned", "fraction", "nan", "inf", "float64-inexact",
         "float32-inexact", "unsigned-past-signed"],
)
def test_a_cast_that_loses_values_is_refused(values, dt, typ, bad):
    """What pyarrow's safe cast refuses (it raises for its own arrays), bridge
    refuses too, naming the value, rather than wrap or truncate it silently."""
    t = bridge.tensor(values, dtype=dt)
    with pytest.raises(pa.ArrowInvalid):
        pa.array(t.numpy()).cast(typ)
    before = snapshot()
    for make in (pa.array, pa.chunked_array):
        with pytest.raises(ValueError, match=rf"requested Arrow type \S+ cannot hold the value {bad} "):
            make(t, type=typ)
    balanced(before)


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


# ---------------------------------------------------- nulls and with_mask


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


# ------------------------------------------ arrow.fixed_shape_tensor export


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


# ------------------------------------------ arrow.fixed_shape_tensor import


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


# -------------------------------------------------- pa.Buffer and pa.Tensor


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


# ----------------------------------------------------- __arrow_c_device_array__


def test_device_array_capsule_fields_and_keywords():
    for x in (bridge.arange(4, dtype=bridge.int32), bridge.arange(6).reshape(2, 3)):
        _schema, dev = x.__arrow_c_device_array__()
        d = c_struct(dev, b"arrow_device_array")
        assert (d.device_type, d.device_id, d.sync_event) == (1, -1, ffi.NULL)
        assert list(d.reserved) == [0, 0, 0] and d.array.length == x.shape[0]
        x.__arrow_c_device_array__(None, sync_event=None, stream=None)  # None keywords are fine
        with pytest.raises(NotImplementedError, match="sync_event"):
            x.__arrow_c_device_array__(sync_event=1)
        with pytest.raises(NotImplementedError, match="stream"):
            x.__arrow_c_device_array__(requested_schema=None, stream=0)
    a = pa.array(np.arange(5, dtype=np.float32)).slice(1)
    b = bridge.from_arrow(a.__arrow_c_device_array__())
    assert b.tolist() == [1.0, 2.0, 3.0, 4.0] and b.data_ptr() == values_address(a)


# ============================================================ 1b. polars


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


# ========================================================== 1c. nanoarrow


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


# ============================================================= 1d. DuckDB


def _duck_rows(duckdb, sql: str, t: bridge.Tensor) -> list:
    """Run ``sql`` over the local ``t``. DuckDB's replacement scan reads the calling
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
    x = bridge.arange(10, dtype=bridge.int64)[3:7]
    assert _duck_rows(duckdb, "select tensor from t", x) == [(3,), (4,), (5,), (6,)]
    assert _duck_rows(duckdb, "select sum(tensor) from t", x) == [(18,)]
    ms = bridge.arange(24, dtype=bridge.int32).reshape(4, 2, 3)[1:3]
    assert duckdb.sql("select * from ms").fetchall() == [
        ((6, 7, 8, 9, 10, 11),),
        ((12, 13, 14, 15, 16, 17),),
    ]
    # DuckDB drops arrow.fixed_shape_tensor: a plain fixed-size list, in physical order
    mp = bridge.arange(24, dtype=bridge.int32).reshape(4, 3, 2).transpose(1, 2)
    assert duckdb.sql("select * from mp limit 1").fetchall() == [((0, 1, 2, 3, 4, 5),)]
    assert mp[0].tolist() == [[0, 2, 4], [1, 3, 5]]
    out = bridge.from_arrow(duckdb.sql("select * from ms"))
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


# ============================================================= 2. lifetimes


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
    schema, array = t.__arrow_c_device_array__() if device else t.__arrow_c_array__()
    s = c_struct(schema, b"arrow_schema")
    if device:
        a = ffi.addressof(c_struct(array, b"arrow_device_array").array)
    else:
        a = c_struct(array, b"arrow_array")
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


# ============================================================ 3. no leaks


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


# ========================================================= 4. malformed input


def _md(pairs: list[tuple[bytes, bytes]]) -> bytes:
    out = [struct.pack("=i", len(pairs))]
    for k, v in pairs:
        out += [struct.pack("=i", len(k)), k, struct.pack("=i", len(v)), v]
    return b"".join(out)


def _fst_md(meta: dict) -> bytes:
    return _md(
        [
            (b"ARROW:extension:name", b"arrow.fixed_shape_tensor"),
            (b"ARROW:extension:metadata", json.dumps(meta).encode()),
        ]
    )


def _set(field: str, value):
    def corrupt(s, a, hold):
        obj = s if field.startswith("schema.") else a
        name = field.split(".", 1)[1]
        if isinstance(value, bytes):
            value_c = ffi.new("char[]", value)
            hold.append(value_c)
            setattr(obj, name, value_c)
        else:
            setattr(obj, name, value)

    return corrupt


def _null_data(s, a, hold):
    a.buffers[1] = ffi.NULL


def _child(field: str, value):
    def corrupt(s, a, hold):
        setattr(a.children[0], field, value)

    return corrupt


def _moved_child(s, a, hold):
    moved = ffi.new("struct ArrowArray *")
    ffi.memmove(moved, a.children[0], ffi.sizeof("struct ArrowArray"))
    a.children[0].release = ffi.NULL
    hold.append(moved)  # released by the test after the import fails


def _offset_to_the_top(s, a, hold):
    """An offset that puts the first value 4 bytes below 2**64, the rest past it."""
    base = int(ffi.cast("uintptr_t", a.buffers[1]))
    a.offset = (2**64 - 4 - base) // 4


_1D = (8,)
_ND = (4, 2, 3)
MALFORMED = {
    # name: (tensor shape, corrupt(schema, array, hold), exception, match)
    "n_buffers-1": (_1D, _set("array.n_buffers", 1), ValueError, "must have 2 buffers, got 1"),
    "n_buffers-0": (_1D, _set("array.n_buffers", 0), ValueError, "must have 2 buffers, got 0"),
    "n_buffers-negative": (_1D, _set("array.n_buffers", -1), ValueError, "n_buffers -1"),
    "buffers-NULL": (_1D, _set("array.buffers", ffi.NULL), ValueError, "n_buffers 2"),
    "child-n_buffers": (_ND, _child("n_buffers", 1), ValueError, "values must have 2 buffers"),
    "negative-offset": (_1D, _set("array.offset", -1), ValueError, "negative"),
    "negative-length": (_1D, _set("array.length", -3), ValueError, "negative"),
    "child-negative-offset": (_ND, _child("offset", -2), ValueError, "negative"),
    "null-data-buffer": (_1D, _null_data, ValueError, "NULL data buffer"),
    "nulls-without-validity": (_1D, _set("array.null_count", 2), ValueError, "2 nulls"),
    "list-length-past-values": (_ND, _set("array.length", 5), ValueError, "fewer than 30"),
    "list-offset-past-values": (_ND, _set("array.offset", 1), ValueError, "fewer than 30"),
    "values-shorter-than-list": (_ND, _child("length", 23), ValueError, "fewer than 24"),
    "released-child": (_ND, _moved_child, ValueError, "released"),
    "negative-n_children": (_1D, _set("array.n_children", -1), ValueError, "n_children -1"),
    "schema-negative-n_children": (_1D, _set("schema.n_children", -1), ValueError, "n_children"),
    "NULL-format": (_1D, _set("schema.format", ffi.NULL), ValueError, "NULL format"),
    "format-string": (_1D, _set("schema.format", b"u"), TypeError, r"Arrow type string has no"),
    "format-timestamp": (_1D, _set("schema.format", b"tsn:"), TypeError, r"timestamp\[ns\] has no"),
    "format-list-size": (_ND, _set("schema.format", b"+w:x"), ValueError, "malformed"),
    "format-list-size-mismatch": (_ND, _set("schema.format", b"+w:5"), ValueError, "does not hold"),
    "fst-no-shape": (_ND, _set("schema.metadata", _fst_md({"dims": [2, 3]})), ValueError, "shape"),
    "fst-bad-json": (
        _ND,
        _set(
            "schema.metadata",
            _md(
                [
                    (b"ARROW:extension:name", b"arrow.fixed_shape_tensor"),
                    (b"ARROW:extension:metadata", b"{shape"),
                ]
            ),
        ),
        ValueError,
        "shape",
    ),
    "fst-bad-permutation": (
        _ND,
        _set("schema.metadata", _fst_md({"shape": [2, 3], "permutation": [0, 0]})),
        ValueError,
        "not a permutation",
    ),
    "fst-dim-names": (
        _ND,
        _set("schema.metadata", _fst_md({"shape": [2, 3], "dim_names": ["a"]})),
        ValueError,
        "dim_names",
    ),
    "metadata-negative-length": (
        _1D,
        _set("schema.metadata", struct.pack("=ii", 1, -4)),
        ValueError,
        "invalid length -4",
    ),
    "format-bitmap": (_1D, _set("schema.format", b"b"), ValueError, "copy=True"),
    # counts a parser must not trust (issue 9): a clear ValueError, never a
    # MemoryError, OverflowError, IndexError or UnicodeDecodeError
    "n_buffers-4": (_1D, _set("array.n_buffers", 4), ValueError, "4 buffers.*at most 3"),
    "n_buffers-huge": (_1D, _set("array.n_buffers", 2**62), ValueError, "at most 3 buffers"),
    "n_children-huge": (_1D, _set("array.n_children", 2**40), ValueError, "n_children 1099511627776"),
    "schema-n_children-huge": (_1D, _set("schema.n_children", 2**40), ValueError, "children"),
    "metadata-count-negative": (_1D, _set("schema.metadata", struct.pack("=i", -1)), ValueError,
                                "invalid pair count -1"),
    "metadata-count-huge": (_1D, _set("schema.metadata", struct.pack("=i", 2**30)), ValueError,
                            "invalid pair count"),
    "metadata-length-huge": (_1D, _set("schema.metadata", struct.pack("=ii", 1, 2**30)), ValueError,
                             "invalid length"),
    "format-not-utf8": (_1D, _set("schema.format", b"\xff\xfe"), ValueError, "not valid UTF-8"),
    "fst-negative-dims": (_ND, _set("schema.metadata", _fst_md({"shape": [-2, -3]})), ValueError,
                          "negative dimension"),
    "fst-shape-not-ints": (_ND, _set("schema.metadata", _fst_md({"shape": ["2", 3]})), ValueError,
                           "valid 'shape'"),
    "fst-permutation-not-ints": (
        _ND, _set("schema.metadata", _fst_md({"shape": [2, 3], "permutation": ["a", 0]})),
        ValueError, "valid 'shape'"),
    # offsets no buffer can have (issue 19): ValueError, never OverflowError
    "offset-past-2**64": (_1D, _set("array.offset", 2**62), ValueError,
                          r"item 4611686018427387904 of the buffer at 0x[0-9a-f]+ would be at "
                          r"0x[0-9a-f]+, past the 64-bit address space"),
    "child-offset-past-2**64": (_ND, _child("offset", 2**62), ValueError,
                                "FixedSizeList values: .* past the 64-bit address space"),
    "extent-past-2**64": (_1D, _offset_to_the_top, ValueError,
                          r"the described memory \(address 0xfffffffffffffffc, 1 dims\) does "
                          "not fit in a 64-bit address space"),
    "fst-metadata-not-utf8": (
        _ND,
        _set("schema.metadata", _md([(b"ARROW:extension:name", b"arrow.fixed_shape_tensor"),
                                     (b"ARROW:extension:metadata", b"\xff")])),
        ValueError, "valid 'shape'"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
@pytest.mark.parametrize("device", [False, True], ids=["array", "device-array"])
def test_malformed_structs(case, device):
    shape, corrupt, exc, match = MALFORMED[case]
    t = bridge.arange(24, dtype=bridge.int32)[: int(np.prod(shape))].reshape(*shape)
    keep = keepalive(t)
    r0 = refs(keep)
    before = snapshot()
    schema, array = t.__arrow_c_device_array__() if device else t.__arrow_c_array__()
    s = c_struct(schema, b"arrow_schema")
    if device:
        a = ffi.addressof(c_struct(array, b"arrow_device_array").array)
    else:
        a = c_struct(array, b"arrow_array")
    hold: list[Any] = []
    corrupt(s, a, hold)
    with pytest.raises(exc, match=match):
        bridge.from_arrow((schema, array))
    # both structs were moved into the import guard, released by now
    assert s.release == ffi.NULL and a.release == ffi.NULL
    for moved in hold:
        if ffi.typeof(moved) is ffi.typeof("struct ArrowArray *"):
            moved.release(moved)
    del schema, array, s, a
    assert refs(keep) == r0
    d = balanced(before)
    assert d["arrow_exports"] == (1 if len(shape) == 1 else 2) and d["arrow_imports"] == 1


def test_array_children_must_match_the_schema():
    """A struct schema with one child over an array with none (issue 19): a
    ValueError, never the IndexError of reading a child that is not there."""
    t = bridge.arange(8, dtype=bridge.int32)
    keep = keepalive(t)
    r0 = refs(keep)
    before = snapshot()
    schema, array = t.__arrow_c_array__(pa.schema([("col", pa.int32())]).__arrow_c_schema__())
    a = c_struct(array, b"arrow_array")
    assert c_struct(schema, b"arrow_schema").n_children == 1 and a.n_children == 1
    hold: list[Any] = []
    _moved_child(None, a, hold)  # the child leaves, to be released here
    a.n_children = 0
    with pytest.raises(ValueError, match=r"Arrow array has 0 children, but its schema "
                                         r"\(Arrow type struct<col: int32>\) has 1"):  # fmt: skip
        bridge.from_arrow((schema, array))
    hold[0].release(hold[0])
    del schema, array, a, hold
    assert refs(keep) == r0
    balanced(before)


def test_unsupported_device_type():
    t = bridge.arange(4, dtype=bridge.float32)
    before = snapshot()
    schema, dev = t.__arrow_c_device_array__()
    c_struct(dev, b"arrow_device_array").device_type = 99
    with pytest.raises(ValueError, match="device type 99"):
        bridge.from_arrow((schema, dev))
    assert balanced(before)["arrow_releases"] == 1


def test_struct_longer_than_its_child():
    rb = pa.record_batch({"x": np.arange(4, dtype=np.int64)})
    schema, array = rb.__arrow_c_array__()
    c_struct(array, b"arrow_array").length = 10
    with pytest.raises(ValueError, match="shorter than the struct"):
        bridge.from_arrow((schema, array))


def test_released_structs_are_refused():
    t = bridge.arange(4, dtype=bridge.float32)
    before = snapshot()
    pair = t.__arrow_c_array__()
    assert bridge.from_arrow(pair).tolist() == [0.0, 1.0, 2.0, 3.0]
    with pytest.raises(ValueError, match="already consumed"):
        bridge.from_arrow(pair)
    pa_pair = pa.array([1, 2, 3]).__arrow_c_array__()
    pa.Array._import_from_c_capsule(*pa_pair)  # pyarrow consumes it
    with pytest.raises(ValueError, match="already consumed"):
        bridge.from_arrow(pa_pair)
    stream = t.__arrow_c_stream__()
    bridge.from_arrow(stream)
    with pytest.raises(ValueError, match="already consumed"):
        bridge.from_arrow(stream)
    # a schema consumed elsewhere while its array is fresh: nothing is taken
    schema, array = t.__arrow_c_array__()
    pa.DataType._import_from_c_capsule(schema)
    with pytest.raises(ValueError, match="already consumed"):
        bridge.from_arrow((schema, array))
    assert c_struct(array, b"arrow_array").release != ffi.NULL  # still the capsule's
    del pair, schema, array, stream
    balanced(before)


def test_wrong_capsules():
    t = bridge.arange(4, dtype=bridge.float32)
    before = snapshot()
    schema, array = t.__arrow_c_array__()
    with pytest.raises(ValueError, match="named 'arrow_array' for the array, got 'dltensor"):
        bridge.from_arrow((schema, t.__dlpack__(max_version=(1, 3))))
    with pytest.raises(ValueError, match="named 'arrow_schema' for the schema, got 'arrow_array'"):
        bridge.from_arrow((array, schema))
    with pytest.raises(ValueError, match="'arrow_array_stream' for the stream, got 'arrow_schema'"):
        bridge.from_arrow(schema)
    with pytest.raises(ValueError, match="got 'dltensor"):
        bridge.from_arrow(t.__dlpack__())
    with pytest.raises(TypeError, match="PyCapsule for the array, got int"):
        bridge.from_arrow((schema, 42))
    with pytest.raises(TypeError, match="PyCapsule for the schema, got str"):
        bridge.from_arrow(("schema", array))
    for junk in (42, "abc", [1, 2], None, np.arange(3)):
        with pytest.raises(TypeError, match="not Arrow data"):
            bridge.from_arrow(junk)
    # nothing was taken: the pair still imports
    assert bridge.from_arrow((schema, array)).data_ptr() == t.data_ptr()
    del schema, array
    balanced(before)


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
        (lambda: pa.array([[True]], pa.list_(pa.bool_(), 1)), r"fixed_size_list<item: bool>\[1\] has"),
    ],
    ids=["string", "dictionary", "list", "timestamp", "timestamp-tz", "decimal", "duration",
         "dictionary-name", "struct-of-string", "fsl-of-bits"],
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


# ================================================================ 5. export refusals


def test_export_refusals():
    zero_d = bridge.tensor(1.5)
    for method in (
        "__arrow_c_array__",
        "__arrow_c_device_array__",
        "__arrow_c_stream__",
        "__arrow_c_schema__",
    ):
        with pytest.raises(ValueError, match="0-d"):
            getattr(zero_d, method)()
    strided = bridge.arange(8, dtype=bridge.float32)[::2]
    for method in ("__arrow_c_array__", "__arrow_c_device_array__", "__arrow_c_stream__"):
        with pytest.raises(ValueError, match="stride 2"):
            getattr(strided, method)()
    with pytest.raises(ValueError, match="stride -1"):
        pa.array(bridge.arange(4)[::-1])
    assert pa.array(strided[1:2]).to_pylist() == [2.0]  # one value: any stride
    assert pa.array(strided.contiguous()).to_pylist() == [0.0, 2.0, 4.0, 6.0]
    for not_dense in (
        bridge.arange(12).reshape(3, 4)[:, ::2],
        bridge.arange(3).reshape(1, 3).expand(4, 3),
        bridge.arange(24).reshape(2, 3, 4)[:, 1:],
    ):
        with pytest.raises(ValueError, match="not a batch of dense tensors"):
            not_dense.__arrow_c_array__()
    for dt in (bridge.complex64, bridge.complex128, bridge.bfloat16, bridge.float8_e4m3fn):
        for x in (bridge.zeros(3, dtype=dt), bridge.zeros((2, 3), dtype=dt)):
            for method in (
                "__arrow_c_array__",
                "__arrow_c_device_array__",
                "__arrow_c_stream__",
                "__arrow_c_schema__",
            ):
                with pytest.raises(TypeError, match="no zero-copy Arrow type"):
                    getattr(x, method)()
    misaligned = bridge.frombuffer(bytearray(20), dtype=bridge.int32, offset=1, count=4)
    with pytest.raises(ValueError, match="aligned"):
        misaligned.__arrow_c_array__()
    with pytest.raises(ValueError, match="aligned"):
        misaligned.reshape(2, 2).__arrow_c_array__()


def test_arrow_c_array_takes_only_requested_schema():
    for x in (bridge.arange(3), bridge.arange(6).reshape(2, 3)):
        with pytest.raises(TypeError):
            x.__arrow_c_array__(bogus=None)
        with pytest.raises(TypeError):
            x.__arrow_c_array__(None, None)


def test_every_permutation_round_trips_through_capsules():
    base = bridge.arange(2 * 2 * 3 * 4, dtype=bridge.uint8).reshape(2, 2, 3, 4)
    for perm in itertools.permutations(range(3)):
        x = base.permute(0, *(p + 1 for p in perm))
        b = bridge.from_arrow(x.__arrow_c_array__())
        assert b.shape == x.shape and b.stride() == x.stride() and b.data_ptr() == x.data_ptr()
        typ = pa.field(x).type
        assert typ.shape == [2, 3, 4] and (typ.permutation or [0, 1, 2]) == list(perm)


def test_cuda_tensor_exports_a_device_array_without_touching_memory():
    """A CUDA tensor (fake device pointer, never dereferenced) exports an
    ArrowDeviceArray with device type 2; its host-only exports refuse. With
    work pending on a stream, the export waits for it (the CUDA driver), so
    that no sync event is needed."""

    class FakeCuda:
        def __init__(self, stream=None):
            self.__cuda_array_interface__ = {
                "shape": (4,), "typestr": "<f4", "data": (0xDEAD0000, False), "version": 3,
                "strides": None, "stream": stream,
            }  # fmt: skip

    if ctypes.util.find_library("cuda") is None:
        pending = bridge.from_cuda_array_interface(FakeCuda(stream=1), device_id=1)
        with pytest.raises(BufferError, match="CUDA driver"):
            pending.__arrow_c_device_array__()
    t = bridge.from_cuda_array_interface(FakeCuda(), device_id=1)
    schema, dev = t.__arrow_c_device_array__()
    d = c_struct(dev, b"arrow_device_array")
    assert (d.device_type, d.device_id, d.sync_event) == (2, 1, ffi.NULL)
    assert int(ffi.cast("uintptr_t", d.array.buffers[1])) + d.array.offset * 4 == 0xDEAD0000
    back = bridge.from_arrow((schema, dev))
    assert back.device == bridge.device("cuda:1") and back.data_ptr() == 0xDEAD0000
    with pytest.raises(ValueError, match="__arrow_c_device_array__"):
        t.__arrow_c_array__()
    with pytest.raises(ValueError, match="stream"):
        t.__arrow_c_stream__()
    # a request of its own type is zero-copy; another value type needs a cast,
    # which bridge makes only in host memory
    schema, dev = t.__arrow_c_device_array__(pa.float32().__arrow_c_schema__())
    assert bridge.from_arrow((schema, dev)).data_ptr() == 0xDEAD0000
    with pytest.raises(ValueError, match="requested Arrow type double needs a cast of this "
                                         "cuda:1 tensor, and bridge casts only host memory"):  # fmt: skip
        t.__arrow_c_device_array__(pa.float64().__arrow_c_schema__())


# ================================================================ issue 9


def _shrunk(view=lambda t: t):
    """``view`` of a 1000-element int64 tensor, made before its storage shrank to 8 bytes."""
    t = bridge.arange(1000, dtype=bridge.int64)
    v = view(t)
    t.untyped_storage().resize_(8)
    return v


@pytest.mark.parametrize(
    ("view", "export"),
    [
        (None, lambda t: t.__arrow_c_array__()),  # the C fast path
        (None, lambda t: t.__arrow_c_device_array__()),
        (lambda t: t.view(10, 100), lambda t: t.__arrow_c_array__()),  # the Python path
        (None, lambda t: t.__arrow_c_stream__()),
        (None, lambda t: t.__arrow_c_schema__()),
        (None, lambda t: pa.array(t)),
        (None, lambda t: to_buffer(t)),
        (lambda t: t.view(10, 100), lambda t: to_fixed_shape_tensor(t)),
    ],
    ids=["array", "device-array", "nd-array", "stream", "schema", "pa.array", "to_buffer", "fst"],
)
def test_views_past_a_shrunk_storage_are_not_exported(view, export):
    t = _shrunk(view or (lambda t: t))
    before = snapshot()
    with pytest.raises(BufferError, match=r"views bytes \[\d+, \d+\) of a storage that now holds 8"):
        export(t)
    balanced(before)


def _device_capsules(arr, device_type):
    """arr's __arrow_c_device_array__ pair, relabelled as living on device_type."""
    schema, array = arr.__arrow_c_device_array__()
    c_struct(array, b"arrow_device_array").device_type = device_type
    c_struct(array, b"arrow_device_array").device_id = 0
    return schema, array


def test_with_mask_refuses_to_read_a_device_bitmap():
    arr = pa.array([1.0, None, 3.0])
    with pytest.raises(ValueError, match="validity bitmap of a cuda:0 Arrow array cannot be read on the host"):
        bridge.from_arrow(_device_capsules(arr, 2), with_mask=True)
    fst = fst_array(pa.float32(), [2], pa.array(np.arange(6, dtype=np.float32)),
                    mask=pa.array([False, True, False]))  # fmt: skip
    with pytest.raises(ValueError, match="cannot be read on the host"):
        bridge.from_arrow(_device_capsules(fst, 2), with_mask=True)
    # without nulls there is no bitmap to read: the device tensor comes back
    values, valid = bridge.from_arrow(_device_capsules(pa.array([1.0, 2.0]), 2), with_mask=True)
    assert values.is_cuda and valid.tolist() == [True, True]


def test_with_mask_and_copy_give_new_writable_memory():
    arr = pa.array([1, None, 3], pa.int32())
    values, valid = bridge.from_arrow(arr, with_mask=True, copy=True)
    assert not values.is_readonly and values.data_ptr() != values_address(arr)
    values[1] = 0
    assert values.tolist() == [1, 0, 3] and valid.tolist() == [True, False, True]
    values, valid = bridge.from_arrow(arr, with_mask=True)  # without copy: a read-only view
    assert values.is_readonly and values.data_ptr() == values_address(arr)


def test_names_that_are_not_utf8_are_replaced_not_raised():
    t = bridge.arange(3, dtype=bridge.int32)
    schema, array = t.__arrow_c_array__()
    hold = ffi.new("char[]", b"\xffname")
    c_struct(schema, b"arrow_schema").name = hold
    assert bridge.from_arrow((schema, array)).tolist() == [0, 1, 2]


class _PythonStream:
    """An ArrowArrayStream whose callbacks are Python functions (ctypes), as a
    stream produced by Python code would have: get_schema works, get_next
    fails, and release runs Python code."""

    GET_SCHEMA = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
    GET_NEXT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
    LAST_ERROR = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)
    RELEASE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

    def __init__(self):
        self.released = []
        self.schema_source = pa.schema([("x", pa.int32())])
        self.message = ctypes.create_string_buffer(b"boom")
        self.callbacks = (
            self.GET_SCHEMA(self._get_schema), self.GET_NEXT(lambda st, out: 5),
            self.LAST_ERROR(lambda st: ctypes.addressof(self.message)), self.RELEASE(self._release),
        )  # fmt: skip
        self.struct = ffi.new("struct ArrowArrayStream *")
        for name, cb in zip(("get_schema", "get_next", "get_last_error", "release"), self.callbacks):
            ftype = ffi.typeof(getattr(self.struct, name))
            setattr(self.struct, name, ffi.cast(ftype, ctypes.cast(cb, ctypes.c_void_p).value))

    def _get_schema(self, st, out):
        self.schema_source._export_to_c(out)
        return 0

    def _release(self, st):
        self.released.append(sum(range(10)))  # calls into Python: needs no error pending
        ffi.cast("struct ArrowArrayStream *", st).release = ffi.NULL

    def capsule(self):
        new = ctypes.pythonapi.PyCapsule_New
        new.restype, new.argtypes = ctypes.py_object, (ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)
        return new(int(ffi.cast("uintptr_t", self.struct)), b"arrow_array_stream", None)


def test_stream_import_keeps_its_error_across_a_python_release():
    """When get_next fails, bridge raises and releases the producer's stream; a
    release written in Python must run without bridge's error pending (else
    it fails with SystemError) and bridge's error must survive it."""
    src = _PythonStream()
    with pytest.raises(RuntimeError, match=r"get_next failed \(5\): boom"):
        bridge.from_arrow(src.capsule())
    assert src.released == [45]


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
