"""Stride arithmetic over (shape, strides, offset) tuples, in elements.

The rules the C core applies to every tensor (cdefs/core/geometry.c, cdefs/core/indexing.c)
are written once, in C; this module re-exports them as the functions Python
calls: ``contiguous_strides``, ``is_contiguous``, ``is_non_overlapping_and_dense``,
``extent``, ``wrap_dim``, ``infer_size`` and ``apply_index`` (their docstrings
are the C ones; tests/core/test_geometry_property.py holds each to NumPy). What C
never needs is written here in Python: argument normalisation (``as_shape``,
``check_sizes``), channels-last layouts, ``dense_strides_like`` and
``broadcast_shapes``; ``compact_strides`` (any dim order, unchecked sizes) is
``contiguous_strides`` of the sizes in that order. Errors follow PyTorch:
IndexError for dimensions and indices out of range, ValueError for shapes that
do not fit, TypeError for arguments of the wrong kind.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable, Sequence
from typing import Any

from bridge.core.native import _C

Shape = tuple[int, ...]
Strides = tuple[int, ...]

# The rules written in C, one implementation each (see the module docstring).
contiguous_strides = _C.contiguous_strides
is_contiguous = _C.is_contiguous
is_non_overlapping_and_dense = _C.is_non_overlapping_and_dense
extent = _C.extent
wrap_dim = _C.wrap_dim
infer_size = _C.infer_size
apply_index = _C.apply_index


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


def compact_strides(shape: Sequence[int], order: Sequence[int] | None = None) -> Strides:
    """Element strides of the compact layout of ``shape`` whose dims nest in
    ``order``, outermost first (a permutation of ``range(len(shape))``; None:
    C order). They are ``contiguous_strides`` of the sizes taken in ``order``,
    put back in dim order: each stride is the product of the sizes nested
    inside its dim.

    Unlike ``contiguous_strides`` it takes sizes no tensor was checked for (a
    DLPack struct's fields, an ``__array_interface__``): a size below 1 counts
    as 1, as 0 already does there. ValueError when ``order`` is not a
    permutation of the dims, and ``contiguous_strides``' ValueError when a
    stride does not fit in int64 or there are more than ``MAX_NDIM`` dims;
    TypeError for a size or dim that is not an int.
    """
    sizes = [max(operator.index(n), 1) for n in shape]
    if order is None:
        return contiguous_strides(sizes)
    dims = [operator.index(d) for d in order]
    if sorted(dims) != list(range(len(sizes))):
        raise ValueError(f"order {tuple(dims)} is not a permutation of the {len(sizes)} dims")
    out = [0] * len(sizes)
    for d, stride in zip(dims, contiguous_strides([sizes[d] for d in dims])):
        out[d] = stride
    return tuple(out)


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
