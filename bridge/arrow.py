"""Apache Arrow: buffers, arrays, tensors and the Arrow C Data Interface.

Export through the Arrow PyCapsule interface (C structs built and released in
cdefs/bridge.c): ``Tensor.__arrow_c_schema__``, ``__arrow_c_array__``,
``__arrow_c_stream__`` (a one-batch record-batch stream with one column,
``"tensor"``) and ``__arrow_c_device_array__``. A 1-d tensor is the primitive
Arrow type of its dtype (bool as the ``arrow.bool8`` extension, one byte per
value); an N-d tensor is an ``arrow.fixed_shape_tensor`` over a
FixedSizeList, the first dim being the batch. Every exported node holds its own
reference to the storage's keep-alive object; the release callbacks take the
GIL and do nothing after interpreter shutdown.

Import: :func:`from_arrow` takes pyarrow objects (Buffer, Array, ChunkedArray,
Tensor, FixedShapeTensorArray, Table, RecordBatch), anything with
``__arrow_c_array__`` / ``__arrow_c_stream__`` / ``__arrow_c_device_array__``
(polars, nanoarrow, DuckDB results) and bare capsules. Imported structs are
moved into a guard whose release runs exactly once, when the last view dies.
Arrow data is immutable: imported tensors are read-only (mutable pyarrow
Buffers excepted).

pyarrow-object helpers: :func:`to_buffer`, :func:`to_array`, :func:`to_tensor`,
:func:`to_fixed_shape_tensor`.
"""

from __future__ import annotations

import ctypes
import itertools
import json
import operator
import struct
from collections.abc import Callable
from typing import Any

import numpy as np

from bridge import _capi, _dtypes
from bridge import _strides as S
from bridge._device import CPU, device
from bridge._storage import UntypedStorage
from bridge._tensor import Tensor, _empty

__all__ = [
    "from_arrow",
    "to_buffer",
    "to_array",
    "to_tensor",
    "to_fixed_shape_tensor",
    "COLUMN_NAME",
]

# The field name of a tensor's Arrow schema, and so the one column of the record
# batch that __arrow_c_stream__ emits (DuckDB checks that the two agree).
COLUMN_NAME = "tensor"
_COLUMN = COLUMN_NAME.encode()

_FLAG_NULLABLE = 2
_EXT_NAME = b"ARROW:extension:name"
_EXT_META = b"ARROW:extension:metadata"
_BOOL8 = b"arrow.bool8"
_FST = b"arrow.fixed_shape_tensor"
# Arrow C device types (CDeviceDataInterface.rst) that bridge can name.
_ARROW_CPU, _ARROW_CUDA, _ARROW_CUDA_HOST = 1, 2, 3

_DTYPE_BY_FORMAT: dict[str, _dtypes.dtype] = {
    d.arrow_format: d for d in _dtypes.all_dtypes() if d.arrow_format and d is not _dtypes.bool
}


# ------------------------------------------------------------- metadata


def _encode_metadata(pairs: list[tuple[bytes, bytes]]) -> bytes:
    """Arrow's binary key-value encoding: int32 count, then (int32 length, bytes)."""
    out = [struct.pack("=i", len(pairs))]
    for key, value in pairs:
        out += [struct.pack("=i", len(key)), key, struct.pack("=i", len(value)), value]
    return b"".join(out)


def _decode_metadata(raw: bytes | None) -> dict[bytes, bytes]:
    """Arrow's key-value encoding back to a dict; ValueError when malformed (the
    C reader bounds the block, this checks each entry against it)."""
    if not raw:
        return {}
    try:
        (n,) = struct.unpack_from("=i", raw, 0)
        pos, out = 4, {}
        for _ in range(n):
            (lk,) = struct.unpack_from("=i", raw, pos)
            key = raw[pos + 4 : pos + 4 + lk]
            pos += 4 + lk
            (lv,) = struct.unpack_from("=i", raw, pos)
            out[key] = raw[pos + 4 : pos + 4 + lv]
            pos += 4 + lv
    except struct.error:
        raise ValueError("malformed Arrow schema metadata") from None
    if n < 0 or pos > len(raw):
        raise ValueError("malformed Arrow schema metadata")
    return out


# Arrow C data format strings -> the names pyarrow prints (for messages).
_TYPE_NAMES = {
    "n": "null", "b": "bool", "c": "int8", "C": "uint8", "s": "int16", "S": "uint16",
    "i": "int32", "I": "uint32", "l": "int64", "L": "uint64", "e": "halffloat",
    "f": "float", "g": "double", "z": "binary", "Z": "large_binary", "vz": "binary_view",
    "u": "string", "U": "large_string", "vu": "string_view", "tdD": "date32[day]",
    "tdm": "date64[ms]", "tts": "time32[s]", "ttm": "time32[ms]", "ttu": "time64[us]",
    "ttn": "time64[ns]", "tiM": "month_interval", "tiD": "day_time_interval",
    "tin": "month_day_nano_interval", "+s": "struct", "+m": "map", "+r": "run_end_encoded",
}  # fmt: skip
_UNIT = {"s": "s", "m": "ms", "u": "us", "n": "ns"}


def _type_name(schema: Any) -> str:
    """An Arrow type's name as pyarrow prints it (``timestamp[ns]``,
    ``decimal128(10, 2)``, ``fixed_size_list<item: float>[3]``), from a
    schema description; never raises."""
    fmt, _name, meta, _flags, children, has_dict = schema
    try:
        ext = _decode_metadata(meta).get(_EXT_NAME)
    except ValueError:
        ext = None
    kids = [f"{c[1] or 'item'}: {_type_name(c)}" for c in children]
    if fmt in _TYPE_NAMES and fmt not in ("+s", "+m", "+r"):
        base = _TYPE_NAMES[fmt]
    elif fmt.startswith("d:"):
        parts = fmt[2:].split(",")
        width = parts[2] if len(parts) > 2 else "128"
        base = f"decimal{width}({', '.join(parts[:2])})"
    elif fmt.startswith("w:"):
        base = f"fixed_size_binary[{fmt[2:]}]"
    elif fmt.startswith("ts") and len(fmt) >= 4 and fmt[3] == ":" and fmt[2] in _UNIT:
        tz = fmt[4:]
        base = f"timestamp[{_UNIT[fmt[2]]}{', tz=' + tz if tz else ''}]"
    elif fmt.startswith("tD") and len(fmt) == 3 and fmt[2] in _UNIT:
        base = f"duration[{_UNIT[fmt[2]]}]"
    elif fmt in ("+l", "+L", "+vl", "+vL"):
        kind = {"+l": "list", "+L": "large_list", "+vl": "list_view", "+vL": "large_list_view"}[fmt]
        base = f"{kind}<{', '.join(kids)}>"
    elif fmt.startswith("+w:"):
        base = f"fixed_size_list<{', '.join(kids)}>[{fmt[3:]}]"
    elif fmt in ("+s", "+m", "+r"):
        base = f"{_TYPE_NAMES[fmt]}<{', '.join(kids)}>"
    elif fmt.startswith(("+ud:", "+us:")):
        base = f"{'dense' if fmt[2] == 'd' else 'sparse'}_union<{', '.join(kids)}>"
    else:
        base = f"unknown type (format {fmt!r})"
    if has_dict:
        base = f"dictionary<indices={base}>"
    if ext == _BOOL8:
        return "bool8"
    if ext == _FST and fmt.startswith("+w:") and children:
        try:
            shape = json.loads(_decode_metadata(meta).get(_EXT_META) or b"{}").get("shape")
        except (ValueError, AttributeError):
            shape = None
        return f"fixed_shape_tensor[value_type={_type_name(children[0])}, shape={shape}]"
    if ext:
        return f"extension<{ext.decode(errors='replace')}> over {base}"
    return base


_BOOL8_META = _encode_metadata([(_EXT_NAME, _BOOL8), (_EXT_META, b"")])


# ------------------------------------------------------------------ export


def _value_schema(dt: _dtypes.dtype, name: bytes | None) -> tuple[Any, ...]:
    if dt is _dtypes.bool:
        return (b"c", name, _BOOL8_META, _FLAG_NULLABLE, ())
    fmt = dt.arrow_format
    if fmt is None:
        raise TypeError(
            f"{dt} has no zero-copy Arrow type (Arrow has int/uint 8-64, float16/32/64 and "
            "bool8); convert it with .to() first"
        )
    return (fmt.encode(), name, None, _FLAG_NULLABLE, ())


def _element_layout(shape: tuple[int, ...], strides: tuple[int, ...]) -> tuple[list[int], list[int]] | None:
    """For the per-element dims: (physical order as logical dim indices, the
    permutation) when they tile a dense row-major block in some order, else None."""
    n = len(shape)
    moving = [d for d in range(n) if shape[d] != 1]
    if all(strides[a] > strides[b] for a, b in itertools.pairwise(moving)):
        order = list(range(n))  # already row-major up to size-1 dims: no permutation
    else:
        # size-1 dims hold no data: put them innermost, where they cost nothing
        order = sorted(moving, key=lambda d: -strides[d]) + [d for d in range(n) if shape[d] == 1]
    want = S.contiguous_strides(tuple(shape[d] for d in order))
    if any(shape[d] != 1 and strides[d] != want[j] for j, d in enumerate(order)):
        return None
    return order, [order.index(i) for i in range(n)]


def _specs(t: Tensor, *, dim_names: list[str] | None = None) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """(schema spec, array spec) describing ``t`` in Arrow terms, zero-copy.
    ValueError when the layout has no Arrow form (use .contiguous())."""
    t._check_bounds(BufferError)
    st = t._storage
    dt = t._dtype
    ndim = len(t._shape)
    if ndim == 0:
        raise ValueError("a 0-d tensor has no Arrow array form; reshape(1) it")
    isz = dt.itemsize
    if st._ptr % isz:
        raise ValueError("the tensor's memory is not aligned to its item size, as Arrow requires")
    if ndim == 1:
        n = t._shape[0]
        if n > 1 and t._strides[0] != 1:
            raise ValueError(
                f"Arrow arrays are contiguous; this tensor has stride {t._strides[0]} "
                "(call .contiguous() for a copy)"
            )
        return _value_schema(dt, _COLUMN), (n, 0, t._offset, (0, st._ptr), ())
    batch, elem = t._shape[0], t._shape[1:]
    per = S.prod(elem)
    layout = _element_layout(elem, t._strides[1:])
    if layout is None or (batch > 1 and t._strides[0] != per):
        raise ValueError(
            f"a tensor with strides {t._strides} is not a batch of dense tensors, which "
            "arrow.fixed_shape_tensor needs (call .contiguous() for a copy)"
        )
    order, perm = layout
    meta: dict[str, Any] = {"shape": [elem[d] for d in order]}
    if perm != list(range(len(elem))):
        meta["permutation"] = perm
    if dim_names is not None:
        if len(dim_names) != len(elem):
            raise ValueError(f"dim_names needs {len(elem)} names, got {len(dim_names)}")
        meta["dim_names"] = [dim_names[d] for d in order]
    ext = _encode_metadata([(_EXT_NAME, _FST), (_EXT_META, json.dumps(meta).encode())])
    schema = (f"+w:{per}".encode(), _COLUMN, ext, _FLAG_NULLABLE, (_value_schema(dt, b"item"),))
    # Whole rows of offset go on the list (as pyarrow's own slices do, and as
    # its to_numpy_ndarray expects); the remainder on the values.
    rows, rest = divmod(t._offset, per) if per else (0, t._offset)
    child = ((rows + batch) * per, 0, rest, (0, st._ptr), ())
    return schema, (batch, 0, rows, (0,), (child,))


def _same_type(a: Any, b: Any) -> bool:
    """Whether two schema descriptions are the same Arrow type (names, nullability
    and dim_names aside)."""
    if a[0] != b[0] or len(a[4]) != len(b[4]) or a[5] != b[5]:
        return False
    ea, eb = _decode_metadata(a[2]), _decode_metadata(b[2])
    if ea.get(_EXT_NAME) != eb.get(_EXT_NAME):
        return False
    if ea.get(_EXT_NAME) == _FST:
        ma, mb = (json.loads(e.get(_EXT_META) or b"{}") for e in (ea, eb))
        if ma.get("shape") != mb.get("shape") or (ma.get("permutation") or None) != (
            mb.get("permutation") or None
        ):
            return False
    return all(_same_type(x, y) for x, y in zip(a[4], b[4]))


def _describe_spec(spec: tuple[Any, ...]) -> tuple[Any, ...]:
    fmt, name, meta, flags, children = spec
    return (fmt.decode(), name and name.decode(), meta, flags,
            tuple(_describe_spec(c) for c in children), False)  # fmt: skip


def _honour(schema: tuple[Any, ...], array: tuple[Any, ...], requested_schema: Any) -> tuple[Any, ...]:
    """The (schema, array) specs to export for a consumer's ``requested_schema``
    (Arrow PyCapsule interface, "Schema Requests"): the tensor's own type
    (or the storage type of its extension type: the same bytes) under the
    requested field name, or a one-column struct (a record batch) holding it. Anything else would be another type (a converting copy) or
    another number of fields: ValueError naming both types, as the interface
    asks of data that cannot take the request."""
    if requested_schema is None:
        return schema, array
    try:
        req = _capi.arrow_describe_schema(requested_schema)
    except (TypeError, ValueError) as e:
        if type(requested_schema).__name__ != "PyCapsule" or "named" in str(e):
            raise TypeError(
                f"requested_schema must be an 'arrow_schema' PyCapsule, got {requested_schema!r}"
            ) from None
        raise
    ours = _describe_spec(schema)
    bare = (*ours[:2], None, *ours[3:])  # the extension's storage type: the same bytes
    for candidate, meta in ((ours, schema[2]), (bare, None)):
        if _same_type(req, candidate):
            name = req[1].encode() if req[1] is not None else schema[1]
            return (schema[0], name, meta, req[3], schema[4]), array
    if req[0] == "+s" and len(req[4]) == 1 and _same_type(req[4][0], ours):
        col = req[4][0]
        inner = (schema[0], (col[1] or "").encode(), schema[2], col[3], schema[4])
        return (b"+s", (req[1] or "").encode(), None, req[3], (inner,)), (array[0], 0, 0, (0,), (array,))
    raise ValueError(
        f"requested Arrow type {_type_name(req)} cannot be produced from a tensor of Arrow type "
        f"{_type_name(ours)} without a copy; bridge only exports tensors as they are (convert "
        "with .to() or .contiguous() first)"
    )


def _arrow_c_schema(self: Tensor) -> Any:
    """Arrow PyCapsule interface: an ``"arrow_schema"`` capsule of this tensor's
    Arrow type, as a field named ``"tensor"`` (see :mod:`bridge.arrow`)."""
    return _capi.arrow_export_schema(_specs(self)[0])


def _host_specs(t: Tensor, what: str, requested_schema: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    if not t._storage._device.is_host_accessible:
        raise ValueError(f"a {t.device} tensor has no CPU Arrow {what}; use __arrow_c_device_array__")
    return _honour(*_specs(t), requested_schema)


def _arrow_c_array(self: Tensor, requested_schema: Any = None) -> tuple[Any, Any]:
    """Arrow PyCapsule interface: ``("arrow_schema", "arrow_array")`` capsules
    over this tensor's memory, zero-copy. Host tensors only (ValueError for
    device memory: use ``__arrow_c_device_array__``). ``requested_schema``:
    see :func:`_honour` (ValueError when it asks for another type)."""
    schema, array = _host_specs(self, "array", requested_schema)
    return _capi.arrow_export_schema(schema), _capi.arrow_export_array(self._storage._keepalive(), array)


def _arrow_c_device_array(
    self: Tensor, requested_schema: Any = None, **kwargs: Any
) -> tuple[Any, Any]:
    """Arrow PyCapsule interface: ``("arrow_schema", "arrow_device_array")`` for
    host (device_type 1, id -1) and CUDA memory. ``sync_event`` is NULL: bridge
    enqueues no work. Extra keywords must be None (NotImplementedError)."""
    for key, value in kwargs.items():
        if value is not None:
            raise NotImplementedError(f"__arrow_c_device_array__ does not support {key}={value!r}")
    dev = self._storage._device
    if dev.type == "cpu":
        dev_type, dev_id = _ARROW_CPU, -1
    elif dev.type == "cuda":
        dev_type, dev_id = _ARROW_CUDA, dev.index or 0
    elif dev.type == "cuda_host":
        dev_type, dev_id = _ARROW_CUDA_HOST, dev.index or 0
    else:
        raise ValueError(f"Arrow has no device type for {dev}")
    schema, array = _honour(*_specs(self), requested_schema)
    return (
        _capi.arrow_export_schema(schema),
        _capi.arrow_export_device_array(self._storage._keepalive(), array, dev_type, dev_id),
    )


def _arrow_c_stream(self: Tensor, requested_schema: Any = None) -> Any:
    """Arrow PyCapsule interface: an ``"arrow_array_stream"`` of one array of
    the same type ``__arrow_c_array__`` gives (a tensor is a column, like
    ``pa.Array`` / ``pa.ChunkedArray``, not a table): ``pa.chunked_array(t)``
    and ``pa.array(t)`` agree. A one-column struct ``requested_schema`` gives
    the record-batch form that table consumers want. Host tensors only."""
    schema, array = _host_specs(self, "stream", requested_schema)
    return _capi.arrow_export_stream(self._storage._keepalive(), schema, array)


# ------------------------------------------------------------------ import


def _device_of(dev_type: int, dev_id: int) -> device:
    if dev_type == _ARROW_CPU:
        return CPU
    if dev_type == _ARROW_CUDA:
        return device("cuda", max(dev_id, 0))
    if dev_type == _ARROW_CUDA_HOST:
        return device("cuda_host", max(dev_id, 0))
    raise ValueError(f"Arrow device type {dev_type} is not supported by bridge")


def _primitive(fmt: str, meta: bytes | None) -> _dtypes.dtype | None:
    if fmt == "c" and _decode_metadata(meta).get(_EXT_NAME) == _BOOL8:
        return _dtypes.bool
    return _DTYPE_BY_FORMAT.get(fmt)


def _check_array(arr: Any, n_buffers: int, what: str) -> tuple[int, int, tuple[int, ...]]:
    length, null_count, offset, buffers, _children = arr
    if len(buffers) != n_buffers:
        raise ValueError(f"{what} must have {n_buffers} buffers, got {len(buffers)}")
    if length < 0 or offset < 0:
        raise ValueError(f"{what} has a negative length ({length}) or offset ({offset})")
    if null_count != 0 and not (null_count == -1 and buffers[0] == 0):
        raise ValueError(
            f"{what} has {'some' if null_count < 0 else null_count} nulls; a tensor has no "
            "missing values (pass with_mask=True to get the validity mask as a copy)"
        )
    return length, offset, buffers


def _validity(arr: Any, length: int, offset: int, dev: device) -> Tensor:
    """The validity bitmap of ``arr`` unpacked into a bool tensor (a copy, read
    on the host: ValueError for device memory)."""
    addr = arr[3][0]
    if addr == 0:
        return _full_bool(length, True)
    if dev != CPU:
        raise ValueError(
            f"the validity bitmap of a {dev} Arrow array cannot be read on the host; copy the "
            "array to the CPU first (with_mask=True reads the bitmap)"
        )
    nbytes = (offset + length + 7) // 8
    bits = np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(addr))
    mask = np.unpackbits(bits, bitorder="little")[offset : offset + length].astype(bool)
    return _host_copy(mask)


def _full_bool(n: int, value: bool) -> Tensor:
    return _host_copy(np.full(n, value, dtype=bool))


def _host_copy(a: np.ndarray[Any, Any]) -> Tensor:
    out = Tensor._make(UntypedStorage._allocate(a.nbytes), _dtypes.from_numpy_dtype(a.dtype),
                       a.shape, S.contiguous_strides(a.shape), 0)  # fmt: skip
    np.copyto(out._np_view(), a)
    return out


def _tensor_from(
    schema: Any, arr: Any, guard: Any, dev: device, *, copy: bool, with_mask: bool
) -> Any:
    fmt, _name, meta, _flags, children, has_dict = schema
    if has_dict:
        raise TypeError(f"Arrow type {_type_name(schema)} has no zero-copy tensor form")
    ext = _decode_metadata(meta)
    dt = _primitive(fmt, meta)
    if dt is not None:
        nulls = arr[1]
        if with_mask and nulls:
            arr = (arr[0], 0, *arr[2:])
        length, offset, buffers = _check_array(arr, 2, f"Arrow {_type_name(schema)} array")
        if buffers[1] == 0 and length:
            raise ValueError("Arrow array has a NULL data buffer")
        t = Tensor._over_memory(buffers[1] + offset * dt.itemsize, dt, (length,), (dt.itemsize,),
                                guard, readonly=True, dev=dev)  # fmt: skip
        if with_mask:
            return t, _validity((0, 0, 0, buffers), length, offset, dev) if nulls else _full_bool(length, True)
        return t
    if fmt == "b":
        if not copy:
            raise ValueError(
                "Arrow bool arrays are bit-packed; a bool tensor holds one byte per value, so "
                "this import is a copy: pass copy=True (or use pa.bool8() for zero-copy)"
            )
        nulls = arr[1]
        checked = (arr[0], 0, *arr[2:]) if with_mask else arr
        length, offset, buffers = _check_array(checked, 2, "Arrow bool array")
        if dev != CPU:
            raise ValueError("bit-packed bools can be unpacked only in host memory")
        values = _validity((0, 0, 0, (buffers[1],)), length, offset, dev)
        if with_mask:
            valid = _validity(arr, length, offset, dev) if nulls else _full_bool(length, True)
            return values, valid
        return values
    if fmt.startswith("+w:"):
        return _fixed_size_list(schema, arr, guard, dev, ext, with_mask=with_mask)
    if fmt == "+s":
        if len(children) != 1:
            names = [c[1] for c in children]
            raise ValueError(f"Arrow struct/record batch has {len(children)} columns {names}; "
                             "import one column")  # fmt: skip
        length, offset, _ = _check_array(arr, 1, "Arrow struct array")
        child = arr[4][0]
        if child[0] < offset + length:
            raise ValueError("Arrow struct child is shorter than the struct")
        # A struct's offset and length select the rows of its children.
        child = (length, child[1], child[2] + offset, child[3], child[4])
        return _tensor_from(children[0], child, guard, dev, copy=copy, with_mask=with_mask)
    raise TypeError(f"Arrow type {_type_name(schema)} has no zero-copy tensor form")


def _fst_layout(ext: dict[bytes, bytes], size: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(element shape, element strides) of an ``arrow.fixed_shape_tensor`` with
    ``size`` values per row; ValueError for metadata that does not describe one."""
    try:
        meta = json.loads(ext.get(_EXT_META, b"{}"))
        phys = tuple(operator.index(s) for s in meta["shape"])
        perm = [operator.index(p) for p in (meta.get("permutation") or range(len(phys)))]
        names = meta.get("dim_names")
    except (ValueError, KeyError, TypeError, AttributeError):
        raise ValueError("arrow.fixed_shape_tensor metadata has no valid 'shape'") from None
    if any(d < 0 for d in phys):
        raise ValueError(f"fixed_shape_tensor shape {list(phys)} has a negative dimension")
    if S.prod(phys) != size:
        raise ValueError(f"fixed_shape_tensor shape {list(phys)} does not hold {size} values")
    if sorted(perm) != list(range(len(phys))):
        raise ValueError(f"fixed_shape_tensor permutation {perm} is not a permutation")
    if names is not None and (not isinstance(names, list) or len(names) != len(phys)):
        raise ValueError("fixed_shape_tensor dim_names does not match its shape")
    cs = S.contiguous_strides(phys)
    return tuple(phys[p] for p in perm), tuple(cs[p] for p in perm)


def _fixed_size_list(schema: Any, arr: Any, guard: Any, dev: device, ext: dict[bytes, bytes],
                     *, with_mask: bool) -> Any:  # fmt: skip
    fmt, _, _, _, children, _ = schema
    try:
        size = int(fmt[3:])
    except ValueError:
        raise ValueError(f"malformed FixedSizeList format {fmt!r}") from None
    if size < 0 or len(children) != 1 or len(arr[4]) != 1:
        raise ValueError(f"malformed FixedSizeList {fmt!r}: needs one child and a size >= 0")
    nulls = arr[1]
    parent = (arr[0], 0, *arr[2:]) if with_mask else arr
    length, offset, _buffers = _check_array(parent, 1, f"Arrow {_type_name(schema)} array")
    value_schema, value_arr = children[0], arr[4][0]
    dt = _primitive(value_schema[0], value_schema[2])
    if dt is None:
        raise TypeError(f"Arrow type {_type_name(schema)} has no tensor form")
    vlen, voff, vbufs = _check_array(value_arr, 2, "FixedSizeList values")
    first = voff + offset * size
    if vlen < (offset + length) * size:
        raise ValueError(
            f"FixedSizeList values hold {vlen} items, fewer than {(offset + length) * size} needed"
        )
    if vbufs[1] == 0 and length * size:
        raise ValueError("FixedSizeList values have a NULL data buffer")
    elem: tuple[int, ...] = (size,)
    el_strides: tuple[int, ...] = (1,)
    if ext.get(_EXT_NAME) == _FST:
        elem, el_strides = _fst_layout(ext, size)
    isz = dt.itemsize
    t = Tensor._over_memory(vbufs[1] + first * isz, dt, (length, *elem),
                            (size * isz, *(s * isz for s in el_strides)), guard,
                            readonly=True, dev=dev)  # fmt: skip
    if with_mask:
        return t, _validity(arr, length, offset, dev) if nulls else _full_bool(length, True)
    return t


def _from_capsules(parsed: Any, *, copy: bool, with_mask: bool) -> Any:
    guard, schema, arr, dev_type, dev_id = parsed
    return _tensor_from(schema, arr, guard, _device_of(dev_type, dev_id), copy=copy,
                        with_mask=with_mask)  # fmt: skip


def _from_stream(capsule: Any, *, copy: bool, with_mask: bool) -> Any:
    _sguard, schema, batches = _capi.arrow_import_stream(capsule)
    parts = [_tensor_from(schema, arr, guard, CPU, copy=copy, with_mask=with_mask)
             for guard, arr in batches]  # fmt: skip
    return _one_chunk(parts, "stream", "batches", copy=copy, with_mask=with_mask)


def _one_chunk(parts: list[Any], what: str, unit: str, *, copy: bool, with_mask: bool) -> Any:
    """The tensor of a one-chunk import; several chunks are concatenated along
    the first dim (with their masks) only when ``copy=True``."""
    if len(parts) == 1:
        return parts[0]
    if not copy or not parts:
        raise ValueError(
            f"the Arrow {what} has {len(parts)} {unit}; a zero-copy tensor needs exactly one "
            + ("" if not parts else "(pass copy=True to concatenate them into new memory)")
        )
    if with_mask:
        return _concat([p[0] for p in parts]), _concat([p[1] for p in parts])
    return _concat(parts)


def _concat(parts: list[Tensor]) -> Tensor:
    """The tensors (chunks of one Arrow type, so of one dtype and row shape)
    stacked along dim 0 into new, writable memory."""
    first = parts[0]
    rest = first.shape[1:]
    out = _empty((sum(p.shape[0] for p in parts), *rest), first.dtype)
    row = 0
    for p in parts:
        out[row : row + p.shape[0]].copy_(p)
        row += p.shape[0]
    return out


def _from_arrow(obj: Any, *, copy: bool = False, with_mask: bool = False) -> Any:
    out = _from_arrow_view(obj, copy=copy, with_mask=with_mask)
    if not copy:
        return out
    # copy=True: new, writable memory (as from_dlpack(copy=True)); the masks
    # and concatenations are fresh already.
    if with_mask:
        values, valid = out
        return (values.clone() if values.is_readonly else values), valid
    return out.clone() if out.is_readonly else out


def _from_arrow_view(obj: Any, *, copy: bool = False, with_mask: bool = False) -> Any:
    """A read-only tensor over Arrow memory, zero-copy (the body of
    :func:`from_arrow`, which handles plain primitive pyarrow arrays in C).

    Accepts pyarrow Buffers (a uint8 tensor; writable when the buffer is
    mutable; device buffers give device tensors), Arrays of int/uint/float
    types (float16 included) and ``arrow.bool8``, ChunkedArrays of one chunk,
    Tensors, FixedShapeTensorArrays (permutation honoured; the batch is the
    first dim), one-column Tables/RecordBatches, any object with
    ``__arrow_c_device_array__``, ``__arrow_c_array__`` or ``__arrow_c_stream__``
    (polars, nanoarrow, DuckDB results), an ``"arrow_array_stream"`` capsule
    or a ``(schema_capsule, array_capsule)`` pair. The Arrow memory stays
    alive, and its release callback runs once, when the last view dies.

    ``with_mask=True`` returns ``(values, valid)``, where ``valid`` is a bool
    tensor unpacked from the validity bitmap (a copy); without it, data with
    nulls raises ValueError. Bit-packed ``pa.bool_()`` data needs ``copy=True``;
    ``copy=True`` always returns new, writable memory.

    Errors: TypeError for types with no tensor form (strings, dictionaries,
    nested lists, unsupported value types); ValueError for nulls, multi-chunk
    data, several columns, released structs, wrong capsule names and
    malformed structs (buffer counts, negative offsets, lengths past the end
    of a buffer of known size).
    """
    if type(obj).__module__.startswith("pyarrow"):
        out = _from_pyarrow(obj, copy=copy, with_mask=with_mask)
        if out is not None:
            return out
    if isinstance(obj, tuple) and len(obj) == 2:
        return _from_capsules(_capi.arrow_import(*obj), copy=copy, with_mask=with_mask)
    if type(obj).__name__ == "PyCapsule":
        return _from_stream(obj, copy=copy, with_mask=with_mask)
    if hasattr(obj, "__arrow_c_device_array__"):
        return _from_capsules(_capi.arrow_import(*obj.__arrow_c_device_array__()), copy=copy,
                              with_mask=with_mask)  # fmt: skip
    if hasattr(obj, "__arrow_c_array__"):
        return _from_capsules(_capi.arrow_import(*obj.__arrow_c_array__()), copy=copy,
                              with_mask=with_mask)  # fmt: skip
    if hasattr(obj, "__arrow_c_stream__"):
        return _from_stream(obj.__arrow_c_stream__(), copy=copy, with_mask=with_mask)
    raise TypeError(f"{type(obj).__name__} is not Arrow data (no Arrow PyCapsule interface)")


def _from_pyarrow(obj: Any, *, copy: bool, with_mask: bool) -> Any:
    import pyarrow as pa

    if isinstance(obj, pa.Buffer):
        return _from_buffer(obj)
    if isinstance(obj, pa.ChunkedArray):
        parts = [_from_arrow_view(c, copy=copy, with_mask=with_mask) for c in obj.iterchunks()]
        return _one_chunk(parts, "ChunkedArray", "chunks", copy=copy, with_mask=with_mask)
    if isinstance(obj, pa.Tensor):
        arr = obj.to_numpy()
        dt = _dtypes.from_numpy_dtype(arr.dtype)
        ptr = arr.__array_interface__["data"][0]
        return Tensor._over_memory(ptr, dt, tuple(arr.shape), tuple(arr.strides), obj, readonly=True)
    return None


def _from_buffer(buf: Any) -> Tensor:
    if buf.is_cpu:
        storage = UntypedStorage.from_buffer(buf)
    else:
        dev = buf.device
        if "cuda" not in str(getattr(dev, "type_name", dev)).lower():
            raise ValueError(f"pyarrow buffer on {dev} is not host or CUDA memory")
        storage = UntypedStorage._wrap(buf.address, buf.size, device("cuda", dev.device_id), buf,
                                       readonly=not buf.is_mutable)  # fmt: skip
    return Tensor._make(storage, _dtypes.uint8, (storage.nbytes(),), (1,), 0)


# --------------------------------------------------------- pyarrow objects


def to_buffer(obj: Tensor | UntypedStorage) -> Any:
    """A ``pa.Buffer`` over a storage's bytes (or a contiguous tensor's), zero-copy;
    the buffer keeps the memory alive. Arrow buffers are immutable. Host
    memory only (ValueError), and tensors must be contiguous (ValueError)."""
    import pyarrow as pa

    if isinstance(obj, Tensor):
        obj._check_bounds(BufferError)
        if not obj.is_contiguous():
            raise ValueError("to_buffer() needs a contiguous tensor (call .contiguous())")
        storage, ptr, size = obj._storage, obj.data_ptr(), obj.nbytes
    elif isinstance(obj, UntypedStorage):
        storage, ptr, size = obj, obj.data_ptr(), obj.nbytes()
    else:
        raise TypeError(f"to_buffer() takes a Tensor or UntypedStorage, got {type(obj).__name__}")
    if not storage._device.is_host_accessible:
        raise ValueError(f"to_buffer() of {storage.device} memory is not supported")
    return pa.foreign_buffer(ptr, size, base=storage._keepalive())


def to_array(t: Tensor, type: Any = None) -> Any:
    """A ``pa.Array`` over a 1-d tensor, zero-copy (bool tensors as ``pa.bool8()``);
    an N-d tensor gives a FixedShapeTensorArray. ``type=pa.bool_()`` for a bool
    tensor is the one explicit copy (Arrow's bools are bit-packed); another
    ``type`` casts (a copy). ValueError for layouts Arrow cannot express."""
    import pyarrow as pa

    if type is not None and t._dtype is _dtypes.bool and pa.types.is_boolean(type):
        return pa.array(t.numpy(), type=pa.bool_())
    out = pa.array(t)
    if type is not None and out.type != type:
        out = out.cast(type)
    return out


def to_tensor(t: Tensor) -> Any:
    """A ``pa.Tensor`` sharing the tensor's memory (strides kept). ValueError for
    negative strides, which pa.Tensor cannot hold; TypeError for bool (pa.Tensor
    would silently turn it into uint8: view as uint8 explicitly)."""
    import pyarrow as pa

    if t._dtype is _dtypes.bool:
        raise TypeError("pa.Tensor has no bool type; export t.view(bridge.uint8) explicitly")
    if any(s < 0 for s in t._strides):
        raise ValueError("pa.Tensor cannot hold negative strides (call .contiguous())")
    return pa.Tensor.from_numpy(np.asarray(t))


def to_fixed_shape_tensor(t: Tensor, dim_names: list[str] | None = None) -> Any:
    """A ``pa.FixedShapeTensorArray`` over a batch of tensors (first dim = batch),
    zero-copy; element dims stored in a permuted dense order are exported with
    the extension's ``permutation``. ``dim_names`` name the element dims."""
    import pyarrow as pa

    if t.ndim < 2:
        raise ValueError("to_fixed_shape_tensor() needs a batch: a tensor of at least 2 dims")
    schema, array = _specs(t, dim_names=dim_names)
    return pa.Array._import_from_c_capsule(
        _capi.arrow_export_schema(schema), _capi.arrow_export_array(t._storage._keepalive(), array)
    )


# pyarrow's primitive array classes: from_arrow takes these through pyarrow's
# own DLPack export (C++), the cheapest zero-copy road out of pyarrow.
_PA_PRIMITIVE: frozenset[type] = frozenset()
try:
    import pyarrow as _pa

    _PA_PRIMITIVE = frozenset(
        getattr(_pa.lib, name)
        for name in ("Int8Array", "UInt8Array", "Int16Array", "UInt16Array", "Int32Array",
                     "UInt32Array", "Int64Array", "UInt64Array", "HalfFloatArray", "FloatArray",
                     "DoubleArray")
    )
except (ImportError, AttributeError):  # pyarrow is a dependency, but the C interface needs none of it
    pass


def _export_fallback(t: Tensor, device: bool, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    # Everything the C fast path (1-d contiguous host tensors, no options)
    # leaves to Python: N-d tensors, requested schemas, device memory, errors.
    return (_arrow_c_device_array if device else _arrow_c_array)(t, *args, **kwargs)


from_arrow: Callable[..., Any] = _capi.make_from_arrow(_from_arrow, set(_PA_PRIMITIVE))
# (a C builtin: plain primitive pyarrow arrays in C, everything else in _from_arrow)

# __arrow_c_array__ / __arrow_c_device_array__ are C method descriptors
# (cdefs/bridge.c: tensor_arrow_export) with the functions above as fallback.
Tensor.__arrow_c_array__, Tensor.__arrow_c_device_array__ = _capi.setup_arrow(_export_fallback)
Tensor.__arrow_c_schema__ = _arrow_c_schema
Tensor.__arrow_c_stream__ = _arrow_c_stream
