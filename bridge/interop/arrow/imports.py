"""Arrow import: pyarrow objects, PyCapsule producers, capsule pairs and
streams into tensors. The C side (cdefs/arrow_import.c) moves the structs into
a guard and describes them; this module checks the description and builds
the tensor with the one C constructor (``_C.from_memory``)."""

from __future__ import annotations

import ctypes
import operator
from typing import Any

import numpy as np

from bridge._native import lib
from bridge.core import dtypes as _dtypes
from bridge.core import strides as S
from bridge.core.device import CPU, device
from bridge.core.layout import _empty, _from_numpy_copy
from bridge.core.native import _C
from bridge.core.storage import UntypedStorage
from bridge.core.tensor import Tensor
from bridge.interop.arrow.types import (
    _EXT_META,
    _EXT_NAME,
    _FST,
    _decode_metadata,
    _primitive,
    _pyarrow,
    _type_name,
)


class ArrowNullsError(ValueError):
    """Arrow data with nulls, which no tensor holds (a ValueError; bridge.convert
    names its own ways around it)."""


class ArrowChunksError(ValueError):
    """Arrow data in several chunks or batches, which no one tensor shares (a
    ValueError; ``copy=True`` concatenates them, as bridge.convert does with
    a named copy). ``parts``: the chunks read, zero-copy, so that a one-shot
    stream need not be read again to join them."""

    def __init__(self, message: str, parts: list[Tensor]) -> None:
        super().__init__(message)
        self.parts = parts


def concatenate(parts: list[Tensor]) -> Tensor:
    """The tensors (chunks of one Arrow type, so of one dtype and row shape)
    stacked along dim 0 into new, writable memory."""
    return _concat(parts)


def _device_of(dev_type: int, dev_id: int) -> device:
    """bridge's device for an Arrow (device_type, device_id), through the C
    device table; ValueError for a type bridge does not exchange through Arrow."""
    code = lib.bridge_device_from_arrow(dev_type)
    if code == 0:
        raise ValueError(f"Arrow device type {dev_type} is not supported by bridge")
    return device.from_dlpack(code, max(dev_id, 0))


_ADDRESS_SPACE = 1 << 64


def _address(base: int, index: int, itemsize: int, what: str) -> int:
    """The address of item ``index`` of the buffer at ``base``; ValueError when
    it lies past the 64-bit address space (an offset no buffer can have), which
    the C side could not take as an address (OverflowError)."""
    addr = base + index * itemsize
    if addr >= _ADDRESS_SPACE:
        raise ValueError(
            f"{what}: item {index} of the buffer at {base:#x} would be at {addr:#x}, past the "
            "64-bit address space (the offset is corrupt)"
        )
    return addr


def _check_array(arr: Any, n_buffers: int, what: str) -> tuple[int, int, tuple[int, ...]]:
    length, null_count, offset, buffers, _children = arr
    if len(buffers) != n_buffers:
        raise ValueError(f"{what} must have {n_buffers} buffers, got {len(buffers)}")
    if length < 0 or offset < 0:
        raise ValueError(f"{what} has a negative length ({length}) or offset ({offset})")
    if null_count != 0 and not (null_count == -1 and buffers[0] == 0):
        raise ArrowNullsError(
            f"{what} has {'some' if null_count < 0 else null_count} nulls; a tensor has no "
            "missing values (pass with_mask=True to get the validity mask as a copy)"
        )
    return length, offset, buffers


def _validity(arr: Any, length: int, offset: int, dev: device) -> Tensor:
    """The validity bitmap of ``arr`` unpacked into a bool tensor (a copy, read
    on the host: ValueError for device memory)."""
    base = arr[3][0]
    if base == 0:
        return _full_bool(length, True)
    if dev != CPU:
        raise ValueError(
            f"the validity bitmap of a {dev} Arrow array cannot be read on the host; copy the "
            "array to the CPU first (with_mask=True reads the bitmap)"
        )
    # only the bytes that hold this array's bits, from the one holding bit `offset`
    addr = _address(base, offset // 8, 1, "Arrow validity bitmap")
    skip = offset % 8
    bits = np.ctypeslib.as_array((ctypes.c_uint8 * ((skip + length + 7) // 8)).from_address(addr))
    mask = np.unpackbits(bits, bitorder="little")[skip : skip + length].astype(bool)
    return _host_copy(mask)


def _full_bool(n: int, value: bool) -> Tensor:
    return _host_copy(np.full(n, value, dtype=bool))


def _host_copy(a: np.ndarray[Any, Any]) -> Tensor:
    return _from_numpy_copy(a, _dtypes.from_numpy_dtype(a.dtype))


def _tensor_from(
    schema: Any, arr: Any, guard: Any, dev: device, *, copy: bool, with_mask: bool
) -> Any:
    fmt, _name, meta, _flags, children, has_dict = schema
    if len(arr[4]) != len(children):
        raise ValueError(
            f"Arrow array has {len(arr[4])} children, but its schema (Arrow type "
            f"{_type_name(schema)}) has {len(children)}"
        )
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
        addr = _address(buffers[1], offset, dt.itemsize, f"Arrow {_type_name(schema)} array")
        t = _C.from_memory(addr, dt, (length,), (dt.itemsize,), guard, True, dev.to_dlpack())
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
        return _fixed_size_list(schema, arr, guard, dev, ext, copy=copy, with_mask=with_mask)
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
    import json  # here, not at the top: `import bridge` stays without json

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
                     *, copy: bool, with_mask: bool) -> Any:  # fmt: skip
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
    bits = value_schema[0] == "b"  # bit-packed bools: unpacked, a copy, as a bool array's are
    dt = _dtypes.bool if bits else _primitive(value_schema[0], value_schema[2])
    if dt is None:
        raise TypeError(f"Arrow type {_type_name(schema)} has no tensor form")
    if bits and not copy:
        raise ValueError(f"Arrow type {_type_name(schema)} holds bit-packed bools; a bool tensor holds one byte "
                         "per value, so this import is a copy: pass copy=True")  # fmt: skip
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
    if bits:
        if dev != CPU:
            raise ValueError("bit-packed bools can be unpacked only in host memory")
        flat = _validity((0, 0, 0, (vbufs[1],)), length * size, first, dev)
        t = flat.as_strided((length, *elem), (size, *el_strides), 0).contiguous()
        if with_mask:
            return t, _validity(arr, length, offset, dev) if nulls else _full_bool(length, True)
        return t
    isz = dt.itemsize
    addr = _address(vbufs[1], first, isz, "FixedSizeList values")
    t = _C.from_memory(addr, dt, (length, *elem),
                       (size * isz, *(s * isz for s in el_strides)), guard, True, dev.to_dlpack())  # fmt: skip
    if with_mask:
        return t, _validity(arr, length, offset, dev) if nulls else _full_bool(length, True)
    return t


def _from_capsules(parsed: Any, *, copy: bool, with_mask: bool) -> Any:
    guard, schema, arr, dev_type, dev_id = parsed
    return _tensor_from(schema, arr, guard, _device_of(dev_type, dev_id), copy=copy,
                        with_mask=with_mask)  # fmt: skip


def _from_stream(capsule: Any, *, copy: bool, with_mask: bool) -> Any:
    """The tensor of an ``"arrow_array_stream"`` or ``"arrow_device_array_stream"``
    capsule (each array on its device; the C side made the consumer's stream
    wait for a CUDA array's sync_event)."""
    _sguard, schema, batches = _C.arrow_import_stream(capsule)
    parts = [_tensor_from(schema, arr, guard, _device_of(dev_type, dev_id), copy=copy, with_mask=with_mask)
             for guard, arr, dev_type, dev_id in batches]  # fmt: skip
    return _one_chunk(parts, "stream", "batches", copy=copy, with_mask=with_mask)


def _one_chunk(parts: list[Any], what: str, unit: str, *, copy: bool, with_mask: bool) -> Any:
    """The tensor of a one-chunk import; several chunks are concatenated along
    the first dim (with their masks) only when ``copy=True``."""
    if len(parts) == 1:
        return parts[0]
    if not copy or not parts:
        message = (f"the Arrow {what} has {len(parts)} {unit}; a zero-copy tensor needs exactly one "
                   + ("" if not parts else "(pass copy=True to concatenate them into new memory)"))  # fmt: skip
        if not parts:
            raise ValueError(message)
        raise ArrowChunksError(message, parts if not with_mask else [p[0] for p in parts])
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
    ``__arrow_c_device_array__``, ``__arrow_c_array__``,
    ``__arrow_c_device_stream__`` or ``__arrow_c_stream__`` (in that order of
    preference; polars, nanoarrow, DuckDB results), an ``"arrow_array_stream"``
    or ``"arrow_device_array_stream"`` capsule or a ``(schema_capsule,
    array_capsule)`` pair. A device stream's arrays arrive on their device; the
    consumer's CUDA stream waits for a CUDA array's ``sync_event``. The Arrow memory stays
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
        return _from_capsules(_C.arrow_import(*obj), copy=copy, with_mask=with_mask)
    if type(obj).__name__ == "PyCapsule":
        return _from_stream(obj, copy=copy, with_mask=with_mask)
    if hasattr(obj, "__arrow_c_device_array__"):
        return _from_capsules(_C.arrow_import(*obj.__arrow_c_device_array__()), copy=copy,
                              with_mask=with_mask)  # fmt: skip
    if hasattr(obj, "__arrow_c_array__"):
        return _from_capsules(_C.arrow_import(*obj.__arrow_c_array__()), copy=copy,
                              with_mask=with_mask)  # fmt: skip
    if hasattr(obj, "__arrow_c_device_stream__"):
        return _from_stream(obj.__arrow_c_device_stream__(), copy=copy, with_mask=with_mask)
    if hasattr(obj, "__arrow_c_stream__"):
        return _from_stream(obj.__arrow_c_stream__(), copy=copy, with_mask=with_mask)
    raise TypeError(f"{type(obj).__name__} is not Arrow data (no Arrow PyCapsule interface)")


def _from_pyarrow(obj: Any, *, copy: bool, with_mask: bool) -> Any:
    pa = _pyarrow("from_arrow() of a pyarrow object")

    if isinstance(obj, pa.Buffer):
        return _from_buffer(obj)
    if isinstance(obj, pa.ChunkedArray):
        parts = [_from_arrow_view(c, copy=copy, with_mask=with_mask) for c in obj.iterchunks()]
        return _one_chunk(parts, "ChunkedArray", "chunks", copy=copy, with_mask=with_mask)
    if isinstance(obj, pa.Tensor):
        arr = obj.to_numpy()
        dt = _dtypes.from_numpy_dtype(arr.dtype)
        ptr = arr.__array_interface__["data"][0]
        out: Tensor = _C.from_memory(ptr, dt, arr.shape, arr.strides, obj, True, (1, 0))
        return out
    return None


def _from_buffer(buf: Any) -> Tensor:
    """A uint8 tensor over a pyarrow Buffer (host or CUDA), zero-copy."""
    if buf.is_cpu:
        storage = UntypedStorage.from_buffer(buf)
        out: Tensor = _C.make_tensor(storage, _dtypes.uint8, (storage.nbytes(),), (1,), 0)
        return out
    dev = buf.device
    if "cuda" not in str(getattr(dev, "type_name", dev)).lower():
        raise ValueError(f"pyarrow buffer on {dev} is not host or CUDA memory")
    made: Tensor = _C.from_memory(buf.address, _dtypes.uint8, (buf.size,), (1,), buf,
                                  not buf.is_mutable, (2, dev.device_id))  # fmt: skip
    return made


_C._register("arrow_import", _from_arrow)
