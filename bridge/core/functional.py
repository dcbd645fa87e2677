"""PyTorch's module-level functions over tensors: the functional forms of the
view ops (``bridge.permute(t, dims)`` is ``t.permute(dims)``), broadcasting,
``from_file``, ``equal``, type predicates and ``finfo``/``iinfo``
(``as_tensor``, which shares other libraries' memory, is the interop facade's).

Only functions that ``torch`` has at module level are here, with its names and
parameters. The ops themselves are the tensor methods
(:mod:`bridge.core.tensor_ops` and the C base).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from bridge.core import dtypes as _dtypes
from bridge.core import strides as S
from bridge.core import tensor_ops as _ops
from bridge.core.dtypes import dtype
from bridge.core.native import _C
from bridge.core.storage import UntypedStorage
from bridge.core.tensor import Tensor

__all__ = [
    "broadcast_shapes", "broadcast_tensors", "broadcast_to", "chunk", "diagonal", "equal",
    "expand_copy", "finfo", "flatten", "flip", "from_file", "iinfo", "imag", "is_complex",
    "is_floating_point", "is_signed", "is_storage", "is_tensor", "movedim", "moveaxis", "narrow", "numel",
    "permute", "ravel", "real", "reshape", "select", "split", "squeeze", "swapaxes", "swapdims", "t",
    "tensor_split", "transpose", "unbind", "unflatten", "unsqueeze", "view_as_complex", "view_as_real",
]  # fmt: skip


def _tensor(x: object, fn: str) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{fn}(): argument 'input' must be Tensor, not {type(x).__name__}")
    return x


# ------------------------------------------------------------ constructors


def from_file(filename: str | os.PathLike[str], shared: bool = False, size: int = 0, *, dtype: Any = None) -> Tensor:
    """A 1-d tensor of ``size`` elements of ``dtype`` (default float32) over a
    memory mapping of the file (``torch.from_file``): ``shared=True`` maps it
    shared (writes reach the file, which is created or extended as needed),
    ``shared=False`` copy-on-write (the file must hold ``size`` elements).
    ``size=0`` gives an empty tensor. Errors as ``UntypedStorage.from_file``."""
    dt = _dtypes.float32 if dtype is None else _dtypes.get_dtype(dtype)
    n = S.as_shape((size,), "size")
    if len(n) != 1:
        raise TypeError(f"from_file(): size must be an int, got {size!r}")
    S.check_sizes(n, "size")
    if n[0] == 0:
        return _C.make_tensor(UntypedStorage(0), dt, (0,), (1,), 0)  # type: ignore[no-any-return]
    storage = UntypedStorage.from_file(filename, shared, nbytes=n[0] * dt.itemsize)
    out: Tensor = _C.make_tensor(storage, dt, n, (1,), 0)
    return out


# ------------------------------------------------------------ predicates


def is_tensor(obj: object) -> bool:
    """Whether ``obj`` is a bridge Tensor."""
    return isinstance(obj, Tensor)


def is_storage(obj: object) -> bool:
    """Whether ``obj`` is a bridge UntypedStorage."""
    return isinstance(obj, UntypedStorage)


def numel(input: Tensor) -> int:
    """The number of elements; TypeError for a non-tensor (as torch)."""
    return _tensor(input, "numel").numel()


def is_floating_point(input: Tensor) -> bool:
    """``input.is_floating_point()``."""
    return _tensor(input, "is_floating_point").is_floating_point()


def is_complex(input: Tensor) -> bool:
    """``input.is_complex()``."""
    return _tensor(input, "is_complex").is_complex()


def is_signed(input: Tensor) -> bool:
    """``input.is_signed()``."""
    return _tensor(input, "is_signed").is_signed()


def equal(input: Tensor, other: Tensor) -> bool:
    """``input.equal(other)``: same shape and equal values after promotion."""
    return _tensor(input, "equal").equal(other)


# ------------------------------------------------------------ broadcasting


def broadcast_shapes(*shapes: int | Sequence[int]) -> tuple[int, ...]:
    """The shape all ``shapes`` broadcast to (an int counts as a 1-d shape).
    ValueError for negative sizes or shapes that do not broadcast."""
    norm: list[tuple[int, ...]] = []
    for s in shapes:
        shape = S.as_shape((s,), "shape") if isinstance(s, Sequence) else S.as_shape(((s,),), "shape")
        if any(d < 0 for d in shape):
            raise ValueError(f"Attempting to broadcast a dimension with negative length! ({shape})")
        norm.append(shape)
    return S.broadcast_shapes(*norm)


def broadcast_tensors(*tensors: Tensor) -> tuple[Tensor, ...]:
    """Views of every tensor expanded to their common broadcast shape."""
    ts = [_tensor(t, "broadcast_tensors") for t in tensors]
    shape = S.broadcast_shapes(*(t.shape for t in ts))
    return tuple(t.broadcast_to(shape) for t in ts)


def broadcast_to(input: Tensor, size: Sequence[int]) -> Tensor:
    """``input.broadcast_to(size)``: an expanded view."""
    return _tensor(input, "broadcast_to").broadcast_to(size)


def expand_copy(input: Tensor, size: Sequence[int]) -> Tensor:
    """``input.expand(size)`` copied into new contiguous memory."""
    return _tensor(input, "expand_copy").expand(size).contiguous()


# ------------------------------------------------------- view ops as functions


def permute(input: Tensor, dims: Sequence[int]) -> Tensor:
    """``input.permute(dims)``."""
    return _tensor(input, "permute").permute(dims)


def reshape(input: Tensor, shape: Sequence[int]) -> Tensor:
    """``input.reshape(shape)``: a view when the strides allow, else a copy."""
    return _tensor(input, "reshape").reshape(shape)


def transpose(input: Tensor, dim0: int, dim1: int) -> Tensor:
    """``input.transpose(dim0, dim1)``."""
    return _tensor(input, "transpose").transpose(dim0, dim1)


def swapaxes(input: Tensor, axis0: int, axis1: int) -> Tensor:
    """``input.swapaxes(axis0, axis1)``."""
    return _tensor(input, "swapaxes").transpose(axis0, axis1)


def swapdims(input: Tensor, dim0: int, dim1: int) -> Tensor:
    """``input.swapdims(dim0, dim1)``."""
    return _tensor(input, "swapdims").transpose(dim0, dim1)


def t(input: Tensor) -> Tensor:
    """``input.t()``."""
    return _tensor(input, "t").t()


def squeeze(input: Tensor, dim: int | Sequence[int] | None = None) -> Tensor:
    """``input.squeeze(dim)``."""
    x = _tensor(input, "squeeze")
    return x.squeeze() if dim is None else x.squeeze(dim)


def unsqueeze(input: Tensor, dim: int) -> Tensor:
    """``input.unsqueeze(dim)``."""
    return _tensor(input, "unsqueeze").unsqueeze(dim)


def flatten(input: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    """``input.flatten(start_dim, end_dim)``."""
    return _tensor(input, "flatten").flatten(start_dim, end_dim)


def unflatten(input: Tensor, dim: int, sizes: Sequence[int]) -> Tensor:
    """``input.unflatten(dim, sizes)``."""
    return _ops.unflatten(_tensor(input, "unflatten"), dim, sizes)


def narrow(input: Tensor, dim: int, start: int, length: int) -> Tensor:
    """``input.narrow(dim, start, length)``."""
    return _tensor(input, "narrow").narrow(dim, start, length)


def select(input: Tensor, dim: int, index: int) -> Tensor:
    """``input.select(dim, index)``."""
    return _tensor(input, "select").select(dim, index)


def diagonal(input: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    """``input.diagonal(offset, dim1, dim2)``."""
    return _ops.diagonal(_tensor(input, "diagonal"), offset, dim1, dim2)


def movedim(input: Tensor, source: int | Sequence[int], destination: int | Sequence[int]) -> Tensor:
    """``input.movedim(source, destination)``."""
    return _ops.movedim(_tensor(input, "movedim"), source, destination)


moveaxis = movedim


def chunk(input: Tensor, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
    """``input.chunk(chunks, dim)``."""
    return _ops.chunk(_tensor(input, "chunk"), chunks, dim)


def split(tensor: Tensor, split_size_or_sections: int | Sequence[int], dim: int = 0) -> tuple[Tensor, ...]:
    """``tensor.split(split_size_or_sections, dim)``."""
    return _ops.split(_tensor(tensor, "split"), split_size_or_sections, dim)


def tensor_split(input: Tensor, indices_or_sections: int | Sequence[int] | Tensor, dim: int = 0) -> tuple[Tensor, ...]:
    """``input.tensor_split(indices_or_sections, dim)``."""
    return _ops.tensor_split(_tensor(input, "tensor_split"), indices_or_sections, dim)


def unbind(input: Tensor, dim: int = 0) -> tuple[Tensor, ...]:
    """``input.unbind(dim)``."""
    return _ops.unbind(_tensor(input, "unbind"), dim)


def flip(input: Tensor, dims: int | Sequence[int]) -> Tensor:
    """``input.flip(dims)``: a zero-copy view with negative strides (torch copies)."""
    return _ops.flip(_tensor(input, "flip"), dims)


def ravel(input: Tensor) -> Tensor:
    """``input.ravel()``: a view when possible, else a copy."""
    return _ops.ravel(_tensor(input, "ravel"))


def real(input: Tensor) -> Tensor:
    """``input.real``."""
    return _ops.real(_tensor(input, "real"))


def imag(input: Tensor) -> Tensor:
    """``input.imag``; TypeError for a real tensor."""
    return _ops.imag(_tensor(input, "imag"))


def view_as_real(input: Tensor) -> Tensor:
    """A complex tensor viewed as its real type with a last dim of 2."""
    return _ops.view_as_real(_tensor(input, "view_as_real"))


def view_as_complex(input: Tensor) -> Tensor:
    """A float32/float64 tensor with a last dim of 2 viewed as complex."""
    return _ops.view_as_complex(_tensor(input, "view_as_complex"))


# ------------------------------------------------------------ finfo / iinfo


def _type_arg(type: Any, fn: str) -> dtype:
    try:
        return _dtypes.get_dtype(type)
    except (TypeError, ValueError):
        raise TypeError(f"{fn}() expects a bridge dtype, got {type!r}") from None


class finfo:
    """Machine limits of a floating type (``torch.finfo``): ``bits``, ``eps``,
    ``max``, ``min``, ``tiny`` (= ``smallest_normal``), ``resolution`` (10**-digits)
    and ``dtype`` (the type's name; a complex type reports its real part).
    Default: float32. bfloat16 and the float8/6/4 types need ml_dtypes
    (TypeError naming it otherwise); TypeError for non-floating types."""

    __slots__ = ("bits", "dtype", "eps", "max", "min", "resolution", "smallest_normal", "tiny")
    bits: int
    eps: float
    max: float
    min: float
    tiny: float
    smallest_normal: float
    resolution: float
    dtype: str

    def __init__(self, type: Any = None) -> None:
        dt = _dtypes.float32 if type is None else _type_arg(type, "finfo").to_real()
        if not dt.is_floating_point:
            raise TypeError(f"finfo() requires a floating point input type, got {dt}; use bridge.iinfo")
        if not dt.numpy_dtype.type.__module__.startswith("ml_dtypes"):
            info: Any = np.finfo(dt.numpy_dtype)
        else:
            import ml_dtypes  # present: numpy_dtype above needed it

            info = ml_dtypes.finfo(dt.numpy_dtype)
        self.bits, self.dtype = dt.dlpack[1], dt.name
        self.eps, self.max, self.min = float(info.eps), float(info.max), float(info.min)
        self.tiny = self.smallest_normal = float(info.smallest_normal)
        self.resolution = 10.0 ** -math.floor(-math.log10(self.eps))

    def __repr__(self) -> str:
        return (f"finfo(resolution={self.resolution:g}, min={self.min:g}, max={self.max:g}, eps={self.eps:g}, "
                f"smallest_normal={self.smallest_normal:g}, tiny={self.tiny:g}, dtype={self.dtype})")  # fmt: skip


class iinfo:
    """Limits of an integer type (``torch.iinfo``): ``bits``, ``max``, ``min`` and
    ``dtype`` (the type's name). TypeError for bool and non-integer types."""

    __slots__ = ("bits", "dtype", "max", "min")
    bits: int
    max: int
    min: int
    dtype: str

    def __init__(self, type: Any) -> None:
        dt = _type_arg(type, "iinfo")
        if not dt.is_integral:
            raise TypeError(f"iinfo() requires an integer input type, got {dt}; use bridge.finfo")
        info = np.iinfo(dt.numpy_dtype)
        self.bits, self.max, self.min, self.dtype = dt.dlpack[1], int(info.max), int(info.min), dt.name

    def __repr__(self) -> str:
        return f"iinfo(min={self.min}, max={self.max}, dtype={self.dtype})"

