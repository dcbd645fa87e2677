"""Arrow export: the layout of a tensor as Arrow "specs" (types, lengths,
offsets; the data buffer named only as the storage's), the PyCapsule
interface's requested-schema rule, and the pyarrow-object helpers. The C
methods of Tensor (cdefs/arrow_export.c) export 1-d primitive tensors by
themselves and hand everything else to :func:`_export_policy` here; the C
side fills the structs from the tensor's own C struct."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

import numpy as np

from bridge._native import lib
from bridge.core import dtypes as _dtypes
from bridge.core import strides as S
from bridge.core.native import _C
from bridge.core.storage import UntypedStorage
from bridge.core.tensor import Tensor
from bridge.interop.arrow.types import (
    _BOOL8_META,
    _COLUMN,
    _EXT_META,
    _EXT_NAME,
    _FLAG_NULLABLE,
    _FST,
    _describe_spec,
    _encode_metadata,
    _primitive,
    _pyarrow,
    _same_type,
    _type_name,
)

if TYPE_CHECKING:  # for the annotations only: pyarrow is the optional arrow extra
    import pyarrow as pa

# The buffers of an exported array spec: 0 is NULL (no validity bitmap), 1 is
# the storage's data, which the C side takes from the tensor itself.
_DATA = (0, 1)

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
    dt = t._dtype
    ndim = len(t._shape)
    if ndim == 0:
        raise ValueError("a 0-d tensor has no Arrow array form; reshape(1) it")
    isz = dt.itemsize
    if t._storage.data_ptr() % isz and t.numel():  # (no element, no address to align)
        raise ValueError("the tensor's memory is not aligned to its item size, as Arrow requires")
    if ndim == 1:
        n = t._shape[0]
        if n > 1 and t._strides[0] != 1:
            raise ValueError(
                f"Arrow arrays are contiguous; this tensor has stride {t._strides[0]} "
                "(call .contiguous() for a copy)"
            )
        return _value_schema(dt, _COLUMN), (n, 0, t._offset, _DATA, ())
    batch, elem = t._shape[0], t._shape[1:]
    per = S.prod(elem)
    # Rows of no elements have no bytes, so any strides describe them.
    layout = _element_layout(elem, t._strides[1:]) if per else (list(range(len(elem))), list(range(len(elem))))
    if layout is None or (batch > 1 and per and t._strides[0] != per):
        raise ValueError(
            f"a tensor with strides {t._strides} is not a batch of dense tensors, which "
            "arrow.fixed_shape_tensor needs (call .contiguous() for a copy)"
        )
    import json  # here, not at the top: `import bridge` stays without json

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
    child = ((rows + batch) * per, 0, rest, _DATA, ())
    return schema, (batch, 0, rows, (0,), (child,))


def _describe_request(requested_schema: Any) -> tuple[Any, ...]:
    try:
        req: tuple[Any, ...] = _C.arrow_describe_schema(requested_schema)
    except (TypeError, ValueError) as e:
        if type(requested_schema).__name__ != "PyCapsule" or "named" in str(e):
            raise TypeError(
                f"requested_schema must be an 'arrow_schema' PyCapsule, got {requested_schema!r}"
            ) from None
        raise
    return req


def _match(req: tuple[Any, ...], schema: tuple[Any, ...], array: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """The (schema, array) specs of the data that ``schema``/``array`` describe
    in the form ``req`` asks for, with no copy: its own type (or the storage
    type of its extension type: the same bytes) under the requested field name
    and flags, or a one-column struct (a record batch) holding it; None when
    ``req`` is another type."""
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
    return None


def _requested_dtype(req: tuple[Any, ...], ndim: int) -> _dtypes.dtype | None:
    """The bridge dtype whose Arrow type ``req`` asks for, in the nesting a
    tensor of ``ndim`` dims exports (a primitive for 1-d, a fixed-size list or
    fixed_shape_tensor for N-d, either alone or as the one column of a
    struct); None for any other request."""
    if req[0] == "+s" and len(req[4]) == 1:
        req = req[4][0]
    if ndim > 1:
        if not req[0].startswith("+w:") or len(req[4]) != 1:
            return None
        req = req[4][0]
    if req[4] or req[5]:
        return None
    return _primitive(req[0], req[2])


def _as_dtype(schema: tuple[Any, ...], dt: _dtypes.dtype) -> tuple[Any, ...]:
    """The schema spec of a tensor exported as ``schema``, cast to ``dt``."""
    if schema[4]:  # a fixed-size list (fixed_shape_tensor): the values are its one child
        return (*schema[:4], (_value_schema(dt, schema[4][0][1]),))
    return _value_schema(dt, schema[1])


def _cast(t: Tensor, dt: _dtypes.dtype, name: str, *, dense: bool) -> Tensor:
    """``t`` as ``dt`` in new memory, by bridge's own cast: ``Tensor.to``, which
    keeps a layout Arrow can express (a permuted fixed_shape_tensor stays
    permuted), or with ``dense=True`` (``t``'s layout has no Arrow form) into
    contiguous memory. A cast that changes a value is refused, as pyarrow's
    safe cast refuses it: a value an integer type cannot hold (the sign
    included), a float with a fraction (or NaN, inf) to an integer, an
    integer a float cannot hold exactly. Float to float and anything to bool
    cast as pyarrow casts them (rounding; nonzero is True)."""
    if not t._storage._host_accessible:
        raise ValueError(
            f"the requested Arrow type {name} needs a cast of this {t.device} tensor, and bridge "
            "casts only host memory"
        )
    with np.errstate(all="ignore"):  # the round trip below tells what did not fit
        if dense:
            out = t.new_empty(tuple(t._shape), dtype=dt).copy_(t)
        else:
            out = t.to(dt)
        if dt is _dtypes.bool or (dt.is_floating_point and not t._dtype.is_integral):
            return out
        back = out.to(t._dtype)
    # the round trip misses what the sign flips (-1 to uint64 and back is -1)
    want, got = t.numpy(), back.numpy()
    changed = (want != got) | ((want < 0) != (out.numpy() < 0))
    if changed.any():
        bad = want[np.nonzero(changed)][0].item()
        raise ValueError(
            f"the requested Arrow type {name} cannot hold the value {bad!r} of this {t.dtype} "
            "tensor (pyarrow's safe cast refuses it too); convert explicitly with .to() first"
        )
    return out


def _honour(t: Tensor, requested_schema: Any) -> tuple[Tensor, tuple[Any, ...], tuple[Any, ...]]:
    """(tensor, schema spec, array spec) to export for a consumer's
    ``requested_schema`` (Arrow PyCapsule interface, "Schema Requests"). The
    tensor's own type, its extension's storage type or a one-column struct
    holding either is exported zero-copy, under the requested field name. A
    request for another value type in the same nesting is met as pyarrow meets
    it: a cast into new memory (:func:`_cast`), exported instead of ``t``. A
    request no cast meets (another number of fields, another nesting or shape,
    a type with no bridge dtype such as strings or bit-packed bools) is a
    ValueError naming both types."""
    if requested_schema is None:
        return t, *_specs(t)
    req = _describe_request(requested_schema)
    try:
        schema, array = _specs(t)
    except (TypeError, ValueError) as e:  # no Arrow form as it is (dtype, layout): a cast may have
        own: Exception | None = e
    else:
        own = None
        same = _match(req, schema, array)
        if same is not None:
            return t, *same
    dt = _requested_dtype(req, len(t._shape))
    # The cast keeps an exportable layout, so whether it meets the request is
    # known before copying anything: only the value type changes.
    if dt is not None and dt is not t._dtype and (own is not None or _match(req, _as_dtype(schema, dt), array)):
        cast = _cast(t, dt, _type_name(req), dense=own is not None)
        matched = _match(req, *_specs(cast))
        if matched is not None:
            return cast, *matched
    if own is not None:
        raise own
    raise ValueError(
        f"requested Arrow type {_type_name(req)} cannot be produced from a tensor of Arrow type "
        f"{_type_name(_describe_spec(schema))}: bridge meets a request for another value type "
        "(int/uint 8-64, float16/32/64, bool8) with a cast, but not one for another nesting, "
        "shape or number of fields, nor types with no bridge dtype (strings, bit-packed bools: "
        "bridge.arrow.to_array(t, type=...) converts through pyarrow)"
    )


def _host(t: Tensor, what: str) -> Tensor:
    if not t._storage._host_accessible:
        raise ValueError(f"a {t.device} tensor has no CPU Arrow {what}; use __arrow_c_device_array__")
    return t


def _arrow_device(t: Tensor, method: str, kwargs: dict[str, Any]) -> tuple[int, int]:
    """The Arrow (device_type, device_id) of ``t``'s memory, for a device
    method given ``kwargs``: the PyCapsule interface lets a consumer pass
    keywords a producer may not know, each with value None (anything else is
    NotImplementedError); ValueError for a device Arrow has no type for."""
    for key, value in kwargs.items():
        if value is not None:
            raise NotImplementedError(f"{method} does not support {key}={value!r}")
    dev = t.device
    code, index = dev.to_dlpack()
    dev_type = lib.bridge_device_to_arrow(code)
    if dev_type == 0:
        raise ValueError(f"Arrow has no device type for {dev}")
    return dev_type, -1 if dev.type == "cpu" else index


def _device_array(t: Tensor, requested_schema: Any = None, **kwargs: Any) -> tuple[Any, Any]:
    dev_type, dev_id = _arrow_device(t, "__arrow_c_device_array__", kwargs)
    src, schema, array = _honour(t, requested_schema)
    return _C.arrow_export_schema(schema), _C.arrow_export_device_array(src, array, dev_type, dev_id)


def _device_stream(t: Tensor, requested_schema: Any = None, **kwargs: Any) -> Any:
    """``__arrow_c_device_stream__``: one ArrowDeviceArray (the array
    :func:`_device_array` gives) in a C Device Stream on the tensor's device."""
    dev_type, dev_id = _arrow_device(t, "__arrow_c_device_stream__", kwargs)
    src, schema, array = _honour(t, requested_schema)
    return _C.arrow_export_device_stream(src, schema, array, dev_type, dev_id)


def _array(t: Tensor, requested_schema: Any = None) -> tuple[Any, Any]:
    src, schema, array = _honour(_host(t, "array"), requested_schema)
    return _C.arrow_export_schema(schema), _C.arrow_export_array(src, array)


def _stream(t: Tensor, requested_schema: Any = None) -> Any:
    src, schema, array = _honour(_host(t, "stream"), requested_schema)
    return _C.arrow_export_stream(src, schema, array)


def _schema(t: Tensor) -> Any:
    return _C.arrow_export_schema(_specs(t)[0])


_EXPORTS = {"array": _array, "device_array": _device_array, "stream": _stream,
            "device_stream": _device_stream, "schema": _schema}  # fmt: skip


def _export_policy(t: Tensor, kind: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The Arrow PyCapsule methods of Tensor (``__arrow_c_array__``,
    ``__arrow_c_device_array__``, ``__arrow_c_stream__``,
    ``__arrow_c_device_stream__``, ``__arrow_c_schema__``)
    for everything their C fast path leaves: N-d tensors, requested schemas,
    device memory, every error. A tensor is a column: the stream carries one
    array of the type the array capsules give (see docs/arrow.md)."""
    return _EXPORTS[kind](t, *args, **kwargs)


# --------------------------------------------------------- pyarrow objects


def to_buffer(obj: Tensor | UntypedStorage) -> pa.Buffer:
    """A ``pa.Buffer`` over a storage's bytes (or a contiguous tensor's), zero-copy;
    the buffer keeps the memory alive. Arrow buffers are immutable. Host
    memory only (ValueError), and tensors must be contiguous (ValueError)."""
    pa = _pyarrow("to_buffer()")

    if isinstance(obj, Tensor):
        obj._check_bounds(BufferError)
        if not obj.is_contiguous():
            raise ValueError("to_buffer() needs a contiguous tensor (call .contiguous())")
        storage, ptr, size = obj._storage, obj.data_ptr(), obj.nbytes
    elif isinstance(obj, UntypedStorage):
        storage, ptr, size = obj, obj.data_ptr(), obj.nbytes()
    else:
        raise TypeError(f"to_buffer() takes a Tensor or UntypedStorage, got {type(obj).__name__}")
    if not storage._host_accessible:
        raise ValueError(f"to_buffer() of {storage.device} memory is not supported")
    if _C.lend(storage.is_readonly, _C.CONSUMER_IMMUTABLE) == _C.LEND_REFUSED:
        raise BufferError("this read-only memory cannot be lent to Arrow")
    return pa.foreign_buffer(ptr, size, base=storage.owner)  # an immutable pa.Buffer


def to_array(t: Tensor, type: pa.DataType | None = None) -> pa.Array[Any]:
    """A ``pa.Array`` over a 1-d tensor, zero-copy (bool tensors as ``pa.bool8()``);
    an N-d tensor gives a FixedShapeTensorArray. ``type=pa.bool_()`` for a bool
    tensor is the one explicit copy (Arrow's bools are bit-packed); another
    ``type`` casts (a copy). ValueError for layouts Arrow cannot express."""
    pa = _pyarrow("to_array()")

    if type is not None and t._dtype is _dtypes.bool and pa.types.is_boolean(type):
        return pa.array(t.numpy(), type=pa.bool_())
    out = pa.array(t)
    if type is not None and out.type != type:
        out = out.cast(type)
    return out


def to_tensor(t: Tensor) -> pa.Tensor:
    """A ``pa.Tensor`` sharing the tensor's memory (strides kept). ValueError for
    negative strides, which pa.Tensor cannot hold; TypeError for bool (pa.Tensor
    would silently turn it into uint8: view as uint8 explicitly)."""
    pa = _pyarrow("to_tensor()")

    if t._dtype is _dtypes.bool:
        raise TypeError("pa.Tensor has no bool type; export t.view(bridge.uint8) explicitly")
    if any(s < 0 for s in t._strides):
        raise ValueError("pa.Tensor cannot hold negative strides (call .contiguous())")
    return pa.Tensor.from_numpy(np.asarray(t))


def to_fixed_shape_tensor(t: Tensor, dim_names: list[str] | None = None) -> pa.FixedShapeTensorArray[Any]:
    """A ``pa.FixedShapeTensorArray`` over a batch of tensors (first dim = batch),
    zero-copy; element dims stored in a permuted dense order are exported with
    the extension's ``permutation``. ``dim_names`` name the element dims."""
    pa = _pyarrow("to_fixed_shape_tensor()")

    if t.ndim < 2:
        raise ValueError("to_fixed_shape_tensor() needs a batch: a tensor of at least 2 dims")
    schema, array = _specs(t, dim_names=dim_names)
    return pa.Array._import_from_c_capsule(
        _C.arrow_export_schema(schema), _C.arrow_export_array(t, array)
    )


_C._register("arrow_export", _export_policy)
