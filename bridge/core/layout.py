"""Memory layouts and fresh tensors: ``memory_format`` and its four values
(``torch.memory_format``), the strides each layout gives a shape, and the
allocation of a new tensor in memory bridge owns (the one place a tensor over
fresh memory is made, for the factories, copies and Arrow concatenation), and
the copy of a NumPy array's values into a tensor."""

from __future__ import annotations

import builtins
from typing import TYPE_CHECKING, Any

import numpy as np

from bridge.core import strides as S
from bridge.core.dtypes import dtype, from_numpy_dtype
from bridge.core.native import _C
from bridge.core.storage import UntypedStorage

if TYPE_CHECKING:
    from bridge.core.tensor import Tensor

__all__ = ["memory_format", "contiguous_format", "channels_last", "channels_last_3d", "preserve_format"]

_Bool = builtins.bool
_Int = builtins.int


class memory_format:
    """A tensor memory layout, as ``torch.memory_format``: ``contiguous_format``,
    ``channels_last`` (NHWC strides for a 4-d NCHW tensor), ``channels_last_3d``
    (NDHWC for 5-d) and ``preserve_format`` (keep the input's dim order)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"bridge.{self.name}"

    def __reduce__(self) -> str:
        return self.name


contiguous_format = memory_format("contiguous_format")
channels_last = memory_format("channels_last")
channels_last_3d = memory_format("channels_last_3d")
preserve_format = memory_format("preserve_format")
_C._register("contiguous_format", contiguous_format)


def _layout_strides(shape: tuple[_Int, ...], strides: tuple[_Int, ...], fmt: memory_format) -> tuple[_Int, ...]:
    if fmt is contiguous_format:
        return S.contiguous_strides(shape)
    if fmt is channels_last:
        if len(shape) != 4:
            raise ValueError(f"required rank 4 tensor to use channels_last format, got {len(shape)}-d")
        return S.channels_last_strides(shape)
    if fmt is channels_last_3d:
        if len(shape) != 5:
            raise ValueError(f"required rank 5 tensor to use channels_last_3d format, got {len(shape)}-d")
        return S.channels_last_strides(shape)
    if fmt is preserve_format:
        if S.is_non_overlapping_and_dense(shape, strides):
            return strides
        return S.dense_strides_like(shape, strides)
    raise TypeError(f"expected a bridge.memory_format, got {fmt!r}")


def _empty(shape: tuple[_Int, ...], dt: dtype, strides: tuple[_Int, ...] | None = None, zeroed: _Bool = False) -> Tensor:
    """A new tensor in fresh memory (strides default to contiguous; must be dense)."""
    if strides is None or S.is_contiguous(shape, strides):
        out: Tensor = _C.new_empty(shape, dt, zeroed)
        return out
    storage = UntypedStorage.__new__(UntypedStorage)
    storage._allocate(S.prod(shape) * dt.itemsize, zeroed)
    made: Tensor = _C.make_tensor(storage, dt, shape, strides, 0)
    return made


def _from_numpy_copy(arr: np.ndarray[Any, Any], dt: dtype) -> Tensor:
    out = _empty(arr.shape, dt)
    _copy_from_array(out, arr)
    return out


def _copy_from_array(out: Tensor, arr: np.ndarray[Any, Any]) -> None:
    """``arr``'s values into ``out``, broadcast to its shape and cast to its
    dtype: the copy kernel over ``arr``'s memory when it holds a bridge dtype,
    else NumPy's conversion (object and string arrays, casts C leaves to
    NumPy). ValueError when the shapes do not broadcast."""
    try:
        src = _C.from_memory(arr.__array_interface__["data"][0], from_numpy_dtype(arr.dtype), arr.shape,
                             arr.strides, arr, not arr.flags.writeable, (1, 0))  # fmt: skip
    except (TypeError, ValueError):  # no bridge dtype, or strides bridge cannot express
        src = None
    if src is None or not _C.copy_into(out, src):
        _numpy_copyto(out, arr)


def _numpy_copyto(out: Tensor, value: Any) -> None:
    """NumPy's copy of ``value`` (broadcast to ``out``'s shape, cast as torch
    casts) into ``out``. A dim along which ``out`` repeats one address
    (stride 0: an expanded tensor) is written once, with the value an element
    loop in index order leaves there (its last), as the copy kernel writes
    it: never once per virtual element. ValueError when the shapes do not
    broadcast."""
    view = out._np_view()
    value = np.broadcast_to(value, view.shape)
    if 0 in view.strides:
        last = tuple(slice(n - 1, n) if st == 0 else slice(None) for n, st in zip(view.shape, view.strides))
        view, value = view[last], value[last]
    np.copyto(view, value, casting="unsafe")
