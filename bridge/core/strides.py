"""Stride arithmetic as pure functions over (shape, strides, offset) tuples.

Everything here is in elements, touches no memory and holds no state, so it can
be property-tested against NumPy. Errors follow PyTorch: IndexError for
dimensions and indices out of range, ValueError for shapes that do not fit,
TypeError for arguments of the wrong kind.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable, Sequence
from typing import Any

Shape = tuple[int, ...]
Strides = tuple[int, ...]


def prod(shape: Iterable[int]) -> int:
    """Product of the sizes (1 for a 0-d shape)."""
    return math.prod(shape)


def as_shape(args: Sequence[Any], what: str = "shape") -> Shape:
    """Normalise ``f(2, 3)`` / ``f((2, 3))`` / ``f([2, 3])`` into a tuple of ints.

    Sizes must be integers (TypeError otherwise); negative sizes other than -1
    are left for the caller, which knows whether -1 is allowed.
    """
    if len(args) == 1 and not is_int(args[0]):
        seq = args[0]
        if hasattr(seq, "__iter__"):
            args = tuple(seq)
        else:
            raise TypeError(f"{what} must be a sequence of ints, got {seq!r}")
    try:
        return tuple(map(operator.index, args))
    except TypeError:
        raise TypeError(f"{what} must be a sequence of ints, got {tuple(args)!r}") from None


def is_int(x: Any) -> bool:
    """Whether ``x`` is an integer (has ``__index__``)."""
    try:
        operator.index(x)
    except TypeError:
        return False
    return True


def check_sizes(shape: Shape, what: str = "shape") -> None:
    """ValueError if any size is negative."""
    for s in shape:
        if s < 0:
            raise ValueError(f"negative dimension {s} in {what} {shape}")


def contiguous_strides(shape: Shape) -> Strides:
    """Row-major (C order) strides for ``shape``; size-0/1 dims still get the
    product of the trailing sizes, as PyTorch does (max(size, 1))."""
    strides = [0] * len(shape)
    acc = 1
    for i in range(len(shape) - 1, -1, -1):
        strides[i] = acc
        acc *= max(shape[i], 1)
    return tuple(strides)


def channels_last_strides(shape: Shape) -> Strides:
    """NHWC (4-d) or NDHWC (5-d) strides for an NCHW / NCDHW shape."""
    if len(shape) not in (4, 5):
        raise ValueError(f"channels_last needs a 4-d or 5-d shape, got {len(shape)}-d")
    order = (1, *range(len(shape) - 1, 1, -1), 0)  # innermost first: C, W, H, (D,) N
    strides = [0] * len(shape)
    acc = 1
    for d in order:
        strides[d] = acc
        acc *= max(shape[d], 1)
    return tuple(strides)


def is_contiguous(shape: Shape, strides: Strides) -> bool:
    """PyTorch's C-contiguity: size-1 dims may have any stride; empty tensors are contiguous."""
    if 0 in shape:
        return True
    expected = 1
    for size, stride in zip(reversed(shape), reversed(strides)):
        if size != 1:
            if stride != expected:
                return False
            expected *= size
    return True


def is_channels_last(shape: Shape, strides: Strides) -> bool:
    """PyTorch's channels_last (4-d) / channels_last_3d (5-d) contiguity."""
    if len(shape) not in (4, 5):
        return False
    expected = 1
    for d in (1, *range(len(shape) - 1, 1, -1), 0):
        if shape[d] != 1:
            if strides[d] != expected:
                return False
            expected *= shape[d]
    return True


def is_non_overlapping_and_dense(shape: Shape, strides: Strides) -> bool:
    """True when the elements tile a contiguous block exactly once in some dim order."""
    if 0 in shape:
        return True
    dims = sorted((d for d in range(len(shape)) if shape[d] != 1), key=lambda d: abs(strides[d]))
    expected = 1
    for d in dims:
        if strides[d] != expected:
            return False
        expected *= shape[d]
    return True


def dense_strides_like(shape: Shape, strides: Strides) -> Strides:
    """Contiguous strides that keep the dim order of ``strides`` (PyTorch's
    preserve_format for dense tensors): the dim with the largest stride is outermost."""
    order = sorted(range(len(shape)), key=lambda d: (-abs(strides[d]), -d))
    out = [0] * len(shape)
    acc = 1
    for d in reversed(order):
        out[d] = acc
        acc *= max(shape[d], 1)
    return tuple(out)


def extent(shape: Shape, strides: Strides, offset: int) -> tuple[int, int]:
    """``(lowest, highest + 1)`` element indices touched; ``(offset, offset)`` when empty."""
    lo = hi = offset
    for size, stride in zip(shape, strides):
        if size == 0:
            return offset, offset
        if stride > 0:
            hi += (size - 1) * stride
        else:
            lo += (size - 1) * stride
    return lo, hi + 1


def wrap_dim(dim: Any, ndim: int, *, extra: int = 0) -> int:
    """Normalise a possibly negative dim; IndexError (PyTorch's message) when out of range.

    ``extra`` widens the range for ops that insert dims (unsqueeze: 1).
    """
    try:
        d = operator.index(dim)
    except TypeError:
        raise TypeError(f"dim must be an int, got {dim!r}") from None
    n = max(ndim + extra, 1)
    if not -n <= d < n:
        raise IndexError(
            f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {d})"
        )
    return d + n if d < 0 else d


def infer_size(shape: Shape, numel: int) -> Shape:
    """Resolve one -1 in ``shape`` so that it holds ``numel`` elements; ValueError if impossible."""
    low = min(shape, default=0)
    if low >= 0:  # the common case: nothing to infer
        if prod(shape) != numel:
            raise ValueError(f"shape {shape} is invalid for input of size {numel}")
        return shape
    if low == -1 and shape.count(-1) == 1:
        known = -prod(shape)
        if known == 0 or numel % known:
            raise ValueError(f"shape {shape} is invalid for input of size {numel}")
        i = shape.index(-1)
        return (*shape[:i], numel // known, *shape[i + 1 :])
    neg = [i for i, s in enumerate(shape) if s == -1]
    if len(neg) > 1:
        raise ValueError(f"only one dimension can be inferred, got shape {shape}")
    for s in shape:
        if s < -1:
            raise ValueError(f"invalid shape dimension {s} in {shape}")
    known = prod(s for s in shape if s != -1)
    if neg:
        if known == 0 or numel % known:
            raise ValueError(f"shape {shape} is invalid for input of size {numel}")
        i = neg[0]
        return (*shape[:i], numel // known, *shape[i + 1 :])
    if known != numel:
        raise ValueError(f"shape {shape} is invalid for input of size {numel}")
    return shape


def broadcast_shapes(*shapes: Shape) -> Shape:
    """The NumPy/PyTorch broadcast of ``shapes``; ValueError when they do not broadcast."""
    ndim = max((len(s) for s in shapes), default=0)
    out = [1] * ndim
    for s in shapes:
        for i, size in enumerate(s, ndim - len(s)):
            if size == 1:
                continue
            if out[i] == 1:
                out[i] = size
            elif out[i] != size:
                raise ValueError(f"shapes {', '.join(map(str, shapes))} cannot be broadcast together")
    return tuple(out)


def slice_dim(size: int, stride: int, s: slice) -> tuple[int, int, int]:
    """``(new_size, new_stride, element_offset)`` for slicing one dim with any step
    (negative steps included, NumPy semantics); ValueError for step 0."""
    start, stop, step = s.indices(size)  # ValueError for step 0 (Python's message)
    n = len(range(start, stop, step))
    return n, stride * step, (start * stride if n else 0)


def apply_index(
    shape: Shape, strides: Strides, offset: int, key: Any
) -> tuple[Shape, Strides, int]:
    """Apply a basic index (ints, slices, None, Ellipsis, or a tuple of them) to a view.

    IndexError for out-of-range ints, too many indices or several ellipses;
    TypeError for index kinds that are not basic (the caller handles advanced ones).
    """
    if not isinstance(key, tuple):
        key = (key,)
    n_ell = sum(1 for k in key if k is Ellipsis)
    if n_ell > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    consumed = sum(1 for k in key if k is not None and k is not Ellipsis)
    nd = len(shape)
    if consumed > nd:
        raise IndexError(f"too many indices for tensor of dimension {nd}")
    out_shape: list[int] = []
    out_strides: list[int] = []
    d = 0
    for k in key:
        if k is None:
            out_shape.append(1)
            # PyTorch's unsqueeze stride: the size*stride of the dim it lands before.
            out_strides.append(1 if d >= nd else strides[d] * shape[d])
            continue
        if k is Ellipsis:
            skip = nd - consumed
            out_shape.extend(shape[d : d + skip])
            out_strides.extend(strides[d : d + skip])
            d += skip
            continue
        if isinstance(k, slice):
            n, st, off = slice_dim(shape[d], strides[d], k)
            out_shape.append(n)
            out_strides.append(st)
            offset += off
            d += 1
            continue
        if isinstance(k, bool):
            raise TypeError("boolean scalar indices are not basic indices")
        try:
            i = operator.index(k)
        except TypeError:
            raise TypeError(
                f"only integers, slices, None, Ellipsis and tensors/arrays/lists are valid indices, got {k!r}"
            ) from None
        size = shape[d]
        if not -size <= i < size:
            raise IndexError(f"index {i} is out of bounds for dimension {d} with size {size}")
        offset += (i + size if i < 0 else i) * strides[d]
        d += 1
    out_shape.extend(shape[d:])
    out_strides.extend(strides[d:])
    return tuple(out_shape), tuple(out_strides), offset
