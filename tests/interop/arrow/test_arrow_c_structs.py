"""Arrow C structs that cannot be trusted: malformed structs (made by corrupting
the fields of bridge's, or pyarrow's, own exported structs in place, through
cffi, before the import), released or wrong capsules, and a stream whose
callbacks are Python code. Each is a clear exception, and everything taken
is released.

Shared helpers (the Arrow type of each dtype, the C struct behind a capsule,
the address of an array's first value) are in ``arrow_helpers.py``; the peer
fixtures (``pl``, ``na``, ``duckdb``) in ``tests/conftest.py``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import struct
from typing import Any

import numpy as np
import pytest
from arrow_helpers import PEERS, c_struct, exported_structs, keepalive, pa, refs
from bridge._native import ffi
from lifetimes import balanced, frozen_heap, snapshot
from pycapsule import capsule_new

import bridge


@pytest.fixture(scope="module", autouse=True)
def _frozen_heap():
    yield from frozen_heap(*PEERS)


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
    schema, array, s, a = exported_structs(t, device)
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
        return capsule_new(int(ffi.cast("uintptr_t", self.struct)), b"arrow_array_stream")


def test_stream_import_keeps_its_error_across_a_python_release():
    """When get_next fails, bridge raises and releases the producer's stream; a
    release written in Python must run without bridge's error pending (else
    it fails with SystemError) and bridge's error must survive it."""
    src = _PythonStream()
    with pytest.raises(RuntimeError, match=r"get_next failed \(5\): boom"):
        bridge.from_arrow(src.capsule())
    assert src.released == [45]
