"""Arrow export through the PyCapsule interface (``__arrow_c_schema__``,
``__arrow_c_array__``, ``__arrow_c_stream__``) to pyarrow: every dtype, slices,
the array and the stream as one column, requested schemas (met as they are,
by a cast, or refused), and the tensors that have no Arrow form.

Every exchange checks values *and* aliasing (the consumer's first value sits
at the tensor's ``data_ptr()``, Arrow offsets applied) and that the C
counters of ``bridge._C.stats()`` balance.

Shared helpers (the Arrow type of each dtype, the C struct behind a capsule,
the address of an array's first value) are in ``arrow_helpers.py``; the peer
fixtures (``pl``, ``na``, ``duckdb``) in ``tests/conftest.py``.
"""

from __future__ import annotations

import pytest
from arrow_helpers import (
    ARROW_TYPES,
    FORMATS,
    PEERS,
    c_struct,
    fst_values_address,
    pa,
    sample,
    values_address,
)
from bridge._native import ffi
from lifetimes import balanced, frozen_heap, shrunk, snapshot

import bridge
from bridge.arrow import to_buffer, to_fixed_shape_tensor


@pytest.fixture(scope="module", autouse=True)
def _frozen_heap():
    yield from frozen_heap(*PEERS)


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


# ------------------------------------------------ requested schemas and casts


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


# ------------------------------------------------------------------- refusals


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
    t = shrunk(view)
    before = snapshot()
    with pytest.raises(BufferError, match=r"views bytes \[\d+, \d+\) of a storage that now holds 8"):
        export(t)
    balanced(before)
