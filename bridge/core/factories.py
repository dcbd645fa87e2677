"""Tensor factories with PyTorch's names, defaults and dtype inference."""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from bridge.core import dtypes as _dtypes
from bridge.core import strides as S
from bridge.core.device import device as _device
from bridge.core.dtypes import dtype
from bridge.core.layout import (
    _empty,
    _from_numpy_copy,
    _layout_strides,
    contiguous_format,
    memory_format,
    preserve_format,
)
from bridge.core.native import _C
from bridge.core.storage import UntypedStorage
from bridge.core.tensor import Tensor

__all__ = [
    "empty",
    "zeros",
    "ones",
    "full",
    "arange",
    "tensor",
    "empty_strided",
    "as_strided",
    "empty_like",
    "zeros_like",
    "ones_like",
    "full_like",
]


def _cpu_only(dev: Any) -> None:
    if dev is not None and _device(dev).type != "cpu":
        raise RuntimeError(
            f"bridge allocates only CPU memory, got device={dev!r}; device memory enters "
            "through DLPack or __cuda_array_interface__"
        )


def _shape_of(size: tuple[Any, ...]) -> tuple[int, ...]:
    shape = S.as_shape(size, "size")
    S.check_sizes(shape, "size")
    return shape


def _new(
    size: tuple[Any, ...],
    dt: Any,
    dev: Any,
    fmt: memory_format = contiguous_format,
    zeroed: bool = False,
) -> Tensor:
    the_dtype: dtype = _dtypes.float32 if dt is None else dt if type(dt) is dtype else _dtypes.get_dtype(dt)
    if dev is None and fmt is contiguous_format:
        out: Tensor = _C.new_empty(size, the_dtype, zeroed)  # all in C from here
        return out
    _cpu_only(dev)
    shape = _shape_of(size)
    return _empty(shape, the_dtype, _layout_strides(shape, S.contiguous_strides(shape), fmt), zeroed)


def _empty_general(
    *size: Any, dtype: Any = None, device: Any = None, memory_format: memory_format = contiguous_format
) -> Tensor:
    """An uninitialised tensor of ``size`` (default dtype float32) in new 64-byte
    aligned memory, laid out as ``memory_format``.

    The general path of :func:`empty`: what its C path does not finish (other
    dtype spellings, devices and layouts, and every error of those) comes here
    as it was called."""
    return _new(size, dtype, device, memory_format)


def _zeros_general(*size: Any, dtype: Any = None, device: Any = None) -> Tensor:
    """A tensor of ``size`` filled with zeros (default dtype float32).

    The general path of :func:`zeros`, as ``_empty_general`` is of :func:`empty`."""
    return _new(size, dtype, device, zeroed=True)


# Python's own errors for the call (an unexpected keyword argument) name the
# function by its __qualname__: the name the caller called.
_empty_general.__name__ = _empty_general.__qualname__ = "empty"
_zeros_general.__name__ = _zeros_general.__qualname__ = "zeros"
_C._register("empty_slow", _empty_general)
_C._register("zeros_slow", _zeros_general)

#: ``bridge.empty`` and ``bridge.zeros`` themselves: C (``py_empty`` and
#: ``py_zeros`` in ``cdefs/core/values.c``), their contract in their
#: docstrings. The common call (sizes as ints or one sequence, dtype None or a
#: bridge dtype, device None or "cpu", contiguous_format) is C's from the
#: arguments to the tensor; the general paths above take every other call.
empty = _C.empty
zeros = _C.zeros


def ones(*size: Any, dtype: Any = None, device: Any = None) -> Tensor:
    """A tensor of ``size`` filled with ones (default dtype float32)."""
    return _new(size, dtype, device).fill_(1)


def _scalar_dtype(value: Any) -> dtype:
    if isinstance(value, Tensor):
        return value.dtype
    if isinstance(value, (bool, np.bool_)):
        return _dtypes.bool
    if isinstance(value, numbers.Integral):
        return _dtypes.int64
    if isinstance(value, numbers.Real):
        return _dtypes.float32
    if isinstance(value, numbers.Complex):
        return _dtypes.complex64
    raise TypeError(f"fill value must be a number, got {type(value).__name__}")


def full(size: Any, fill_value: Any, *, dtype: Any = None, device: Any = None) -> Tensor:
    """A tensor of ``size`` filled with ``fill_value``; the dtype is inferred from
    the value as PyTorch does (bool, int64, float32, complex64) when not given."""
    dt = _scalar_dtype(fill_value) if dtype is None else dtype
    return _new((size,), dt, device).fill_(fill_value)


def arange(
    start: Any = 0, end: Any = None, step: Any = 1, *, dtype: Any = None, device: Any = None
) -> Tensor:
    """Values from ``start`` (inclusive) to ``end`` (exclusive) by ``step``;
    ``arange(n)`` counts 0..n-1. int64 when all arguments are integers, else
    float32 (PyTorch's inference). ValueError for step 0 or a step whose sign
    cannot reach ``end``."""
    _cpu_only(device)
    if end is None:
        start, end = 0, start
    args = (start, end, step)
    for a in args:
        if not isinstance(a, numbers.Real):
            raise TypeError(f"arange() arguments must be real numbers, got {a!r}")
    if step == 0:
        raise ValueError("arange(): step must be nonzero")
    if (end - start) * step < 0:
        raise ValueError(
            f"arange(): upper bound and larger bound inconsistent with step sign "
            f"(start={start}, end={end}, step={step})"
        )
    if dtype is None:
        all_int = all(isinstance(a, numbers.Integral) for a in args)
        dt = _dtypes.int64 if all_int else _dtypes.float32
    else:
        dt = _dtypes.get_dtype(dtype)
    n = max(math.ceil((end - start) / step), 0)
    out = _empty((n,), dt)
    # Computed in float64/int64 (as PyTorch accumulates in a wide type), then cast.
    wide = np.int64 if dt.is_integral and all(isinstance(a, numbers.Integral) for a in args) else np.float64
    np.copyto(out._np_view(), start + np.arange(n, dtype=wide) * np.asarray(step, dtype=wide), casting="unsafe")
    return out


def tensor(data: Any, *, dtype: Any = None, device: Any = None) -> Tensor:
    """A new tensor holding a copy of ``data`` (nested sequences of numbers, a
    NumPy array, a Tensor, an UntypedStorage (its bytes as uint8), or a scalar).

    Without ``dtype``, arrays and tensors keep theirs and Python data is
    inferred as PyTorch does: bool, int64, float32, complex64. Ragged nesting
    raises ValueError; non-numeric data raises TypeError.
    """
    _cpu_only(device)
    if isinstance(data, UntypedStorage):  # its bytes, as uint8 (not a list of ints)
        data = _C.make_tensor(data, _dtypes.uint8, (data.nbytes(),), (1,), 0)
    if isinstance(data, Tensor):
        if dtype is None:
            return data.clone(memory_format=contiguous_format)
        return data.to(dtype, copy=True).contiguous()
    has_dtype = isinstance(data, np.ndarray) or isinstance(data, np.generic)
    try:
        arr = np.asarray(data)
    except ValueError as e:
        raise ValueError(f"tensor(): data has an inhomogeneous (ragged) shape: {e}") from None
    if arr.dtype.kind in "OUSV" and not (arr.dtype.kind == "V" and has_dtype):
        raise TypeError(f"tensor(): cannot build a tensor from data of NumPy type {arr.dtype}")
    if dtype is not None:
        dt = _dtypes.get_dtype(dtype)
    elif has_dtype:
        dt = _dtypes.from_numpy_dtype(arr.dtype)
    else:
        kind = arr.dtype.kind
        if arr.size == 0 and kind == "f":
            dt = _dtypes.float32
        else:
            dt = {"b": _dtypes.bool, "i": _dtypes.int64, "u": _dtypes.int64, "f": _dtypes.float32,
                  "c": _dtypes.complex64}[kind]  # fmt: skip
    return _from_numpy_copy(arr, dt)


def empty_strided(size: Any, stride: Any, *, dtype: Any = None, device: Any = None) -> Tensor:
    """An uninitialised tensor with exactly the given strides, in new memory just
    large enough for them. Strides must be non-negative (ValueError)."""
    _cpu_only(device)
    shape = _shape_of((size,))
    strides = S.as_shape((stride,), "stride")
    if len(strides) != len(shape):
        raise ValueError(f"size {shape} and stride {strides} have different lengths")
    if any(s < 0 for s in strides):
        raise ValueError(f"empty_strided: negative strides are not supported, got {strides}")
    dt = _dtypes.float32 if dtype is None else _dtypes.get_dtype(dtype)
    _, hi = S.extent(shape, strides, 0)
    storage = UntypedStorage(hi * dt.itemsize)
    out: Tensor = _C.make_tensor(storage, dt, shape, strides, 0)
    return out


def as_strided(input: Tensor, size: Any, stride: Any, storage_offset: int | None = None) -> Tensor:
    """``input.as_strided(size, stride, storage_offset)``: a bounds-checked view."""
    return input.as_strided(size, stride, storage_offset)


def empty_like(
    input: Tensor, *, dtype: Any = None, device: Any = None, memory_format: memory_format = preserve_format
) -> Tensor:
    """An uninitialised tensor shaped like ``input`` (same dim order by default)."""
    _cpu_only(device)
    dt = input.dtype if dtype is None else _dtypes.get_dtype(dtype)
    return _empty(input.shape, dt, _layout_strides(input.shape, input.stride(), memory_format))


def zeros_like(
    input: Tensor, *, dtype: Any = None, device: Any = None, memory_format: memory_format = preserve_format
) -> Tensor:
    """Zeros shaped like ``input``."""
    return empty_like(input, dtype=dtype, device=device, memory_format=memory_format).zero_()


def ones_like(
    input: Tensor, *, dtype: Any = None, device: Any = None, memory_format: memory_format = preserve_format
) -> Tensor:
    """Ones shaped like ``input``."""
    return empty_like(input, dtype=dtype, device=device, memory_format=memory_format).fill_(1)


def full_like(
    input: Tensor, fill_value: Any, *, dtype: Any = None, device: Any = None,
    memory_format: memory_format = preserve_format,
) -> Tensor:  # fmt: skip
    """``fill_value`` everywhere, shaped like ``input``."""
    return empty_like(input, dtype=dtype, device=device, memory_format=memory_format).fill_(fill_value)
