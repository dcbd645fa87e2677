"""Tensor methods written as functions: the view ops beyond the C fast paths,
the in-place geometry ops, the ``new_*`` factories and the introspection of
PyTorch's ``Tensor`` API. :class:`bridge.core.tensor.Tensor` binds each as a
method (``Tensor.flip = flip``); :mod:`bridge.core.functional` exposes the
module-level forms.

Every view here is ``(storage, dtype, shape, strides, offset)`` computed with
:mod:`bridge.core.strides` and made by the one C constructor; the in-place ops
compute the same view and move this tensor onto it (``_set_geometry``, as
``set_`` does), so the Python object keeps its identity.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from bridge.core import dtypes as _dtypes
from bridge.core import strides as S
from bridge.core.dtypes import dtype
from bridge.core.layout import _empty, contiguous_format, memory_format

if TYPE_CHECKING:
    from bridge.core.tensor import Tensor

__all__ = [
    "movedim", "unflatten", "unfold", "diagonal", "split", "chunk", "unbind", "tensor_split",
    "ravel", "flip", "view_as_real", "view_as_complex", "real", "imag",
    "as_strided_", "squeeze_", "unsqueeze_", "t_", "transpose_", "swapdims_", "resize_", "resize_as_",
    "new_empty", "new_zeros", "new_ones", "new_full", "new_tensor", "new_empty_strided",
    "is_floating_point", "is_complex", "is_signed", "get_device", "is_set_to", "dim_order",
    "is_pinned", "equal",
]  # fmt: skip


def _dims_arg(dims: tuple[Any, ...], what: str) -> list[int]:
    """``f(0, 1)`` and ``f((0, 1))`` both mean dims (0, 1), as in PyTorch."""
    if len(dims) == 1 and isinstance(dims[0], Sequence):
        dims = tuple(dims[0])
    try:
        return [operator.index(d) for d in dims]
    except TypeError:
        raise TypeError(f"{what}: dims must be ints, got {dims!r}") from None


def _adopt(self: Tensor, view: Tensor) -> Tensor:
    """Move ``self`` onto ``view``'s geometry in place (the in-place ops)."""
    self._set_geometry(view._storage, view._dtype, view._shape, view._strides, view._offset)
    return self


# ------------------------------------------------------------------ views


def movedim(self: Tensor, source: int | Sequence[int], destination: int | Sequence[int]) -> Tensor:
    """A view with the dims in ``source`` moved to the positions in ``destination``."""
    nd = self.ndim
    src = [S.wrap_dim(d, nd) for d in (source if isinstance(source, Sequence) else [source])]
    dst = [S.wrap_dim(d, nd) for d in (destination if isinstance(destination, Sequence) else [destination])]
    if len(src) != len(dst):
        raise ValueError("movedim: source and destination must have the same number of dims")
    if len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise ValueError("movedim: repeated dim in source or destination")
    order: list[int | None] = [None] * nd
    for s, d in zip(src, dst):
        order[d] = s
    rest = iter(d for d in range(nd) if d not in src)
    perm = [o if o is not None else next(rest) for o in order]
    return self.permute(perm)


def unflatten(self: Tensor, dim: int, sizes: Sequence[int]) -> Tensor:
    """A view with ``dim`` split into ``sizes`` (one may be -1)."""
    shape, strides = self._shape, self._strides
    d = S.wrap_dim(dim, len(shape))
    sizes_t = S.as_shape((sizes,), "sizes")
    if not sizes_t:
        raise ValueError("unflatten: sizes must be non-empty")
    sizes_t = S.infer_size(sizes_t, shape[d])
    inner = tuple(s * strides[d] for s in S.contiguous_strides(sizes_t))
    return self._derived((*shape[:d], *sizes_t, *shape[d + 1 :]),
                         (*strides[:d], *inner, *strides[d + 1 :]), self._offset)  # fmt: skip


def unfold(self: Tensor, dimension: int, size: int, step: int) -> Tensor:
    """A view of all windows of ``size`` entries of ``dimension``, ``step`` apart,
    as a new last dim (PyTorch's ``Tensor.unfold``)."""
    shape, strides = list(self._shape), list(self._strides)
    nd = len(shape)
    d = S.wrap_dim(dimension, nd)
    size, step = operator.index(size), operator.index(step)
    if step <= 0:
        raise ValueError(f"unfold: step must be positive, got {step}")
    dim_size = shape[d] if nd else 1
    if size < 0 or size > dim_size:
        raise ValueError(f"unfold: size {size} exceeds dimension {d} of size {dim_size}")
    if nd == 0:
        return self._derived((size,), (1,), self._offset)
    inner = strides[d]
    shape[d] = (dim_size - size) // step + 1
    strides[d] = inner * step
    return self._derived((*shape, size), (*strides, inner), self._offset)


def diagonal(self: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    """A view of the diagonal of the (dim1, dim2) planes, appended as the last dim."""
    shape, strides = self._shape, self._strides
    nd = len(shape)
    if nd < 2:
        raise ValueError(f"diagonal() needs at least 2 dimensions, got {nd}")
    a, b = S.wrap_dim(dim1, nd), S.wrap_dim(dim2, nd)
    if a == b:
        raise ValueError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    offset = operator.index(offset)
    if offset >= 0:
        n = max(min(shape[a], shape[b] - offset), 0)
        start = offset * strides[b]
    else:
        n = max(min(shape[a] + offset, shape[b]), 0)
        start = -offset * strides[a]
    keep = [d for d in range(nd) if d not in (a, b)]
    return self._derived((*(shape[d] for d in keep), n), (*(strides[d] for d in keep), strides[a] + strides[b]),
                         self._offset + (start if n else 0))  # fmt: skip


def split(self: Tensor, split_size_or_sections: int | Sequence[int], dim: int = 0) -> tuple[Tensor, ...]:
    """Views of consecutive pieces along ``dim``: pieces of ``split_size`` (the
    last may be smaller), or of the listed sizes (which must sum to the dim)."""
    d = S.wrap_dim(dim, self.ndim)
    size = self._shape[d]
    if isinstance(split_size_or_sections, (list, tuple)):
        sections = [operator.index(s) for s in split_size_or_sections]
        if any(s < 0 for s in sections) or sum(sections) != size:
            raise ValueError(
                f"split sizes {sections} must be non-negative and sum to the size of dimension {d} ({size})"
            )
    else:
        step = operator.index(split_size_or_sections)  # type: ignore[arg-type]
        if step <= 0 and not (step == 0 and size == 0):
            raise ValueError(f"split size must be positive, got {step}")
        sections = [min(step, size - i) for i in range(0, size, step)] if size else [0]
    out = []
    start = 0
    for n in sections:
        out.append(self.narrow(d, start, n))
        start += n
    return tuple(out)


_MAX_EMPTY_PIECES = 2**16
"""The most empty views one ``chunk`` or ``tensor_split`` call builds beyond
the dimension's elements. Both follow torch and return a requested count of
pieces even where the dimension has fewer elements; without a bound, a huge
count (``empty(0).chunk(2**62)``) builds views until memory runs out, where
torch fails on allocating its list."""


def _check_empty_pieces(op: str, pieces: int, size: int) -> None:
    """ValueError when ``pieces`` views of a dimension of ``size`` elements
    would include more than :data:`_MAX_EMPTY_PIECES` empty ones."""
    if pieces - size > _MAX_EMPTY_PIECES:
        raise ValueError(
            f"{op}: {pieces} pieces of a dimension of size {size} would build {pieces - size} empty views;"
            f" at most {_MAX_EMPTY_PIECES} empty pieces are built"
        )


def chunk(self: Tensor, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
    """At most ``chunks`` views of equal size (the last may be smaller) along
    ``dim``: ``ceil(size / chunks)`` elements each, so never more views than
    the dim has elements, except for an empty dim, which gives ``chunks``
    empty views (as torch). ValueError for ``chunks <= 0`` and for an empty
    dim asked for more than 65536 chunks (a bound torch does not have: a huge
    count would build views until memory runs out)."""
    chunks = operator.index(chunks)
    if chunks <= 0:
        raise ValueError(f"chunk expects `chunks` to be greater than 0, got: {chunks}")
    d = S.wrap_dim(dim, self.ndim)
    size = self._shape[d]
    if size == 0:
        _check_empty_pieces("chunk", chunks, size)
        return tuple(self.narrow(d, 0, 0) for _ in range(chunks))
    # Integer ceiling: `math.ceil(size / chunks)` rounds through a float and is
    # off by one once the operands pass 2**53.
    return split(self, -(-size // chunks), d)


def unbind(self: Tensor, dim: int = 0) -> tuple[Tensor, ...]:
    """The views ``select(dim, i)`` for every i."""
    d = S.wrap_dim(dim, self.ndim)
    return tuple(self.select(d, i) for i in range(self._shape[d]))


def tensor_split(self: Tensor, indices_or_sections: int | Sequence[int] | Tensor, dim: int = 0) -> tuple[Tensor, ...]:
    """Views along ``dim`` (``torch.tensor_split``): ``n`` sections of sizes
    differing by at most one (the first ``size % n`` one larger), or the pieces
    between the listed indices (slice semantics: negative indices wrap,
    decreasing ones give empty pieces). A tensor argument is a 0-d int (the
    sections) or a 1-d int tensor (the indices). ValueError for a 0-d self,
    ``n <= 0`` or a tensor of more dims; TypeError for non-integers."""
    if self.ndim == 0:
        raise ValueError("tensor_split expected at least a 1-dimensional tensor, but got a 0-d tensor")
    from bridge.core.tensor import Tensor

    arg: Any = indices_or_sections
    if isinstance(arg, Tensor):
        if not (arg.dtype.is_integral):
            raise TypeError(f"tensor_split expected an integer tensor, got {arg.dtype}")
        if arg.ndim > 1:
            raise ValueError(f"tensor_split expected a 0-d or 1-d tensor of indices or sections, got {arg.ndim}-d")
        arg = arg.tolist()
    d = S.wrap_dim(dim, self.ndim)
    size = self._shape[d]
    if isinstance(arg, Sequence):
        try:
            cuts = [operator.index(i) for i in arg]
        except TypeError:
            raise TypeError(f"tensor_split indices must be ints, got {arg!r}") from None
        out, prev = [], 0
        for stop in [*cuts, size]:
            lo, hi, _ = slice(prev, stop).indices(size)
            out.append(self.narrow(d, lo, max(hi - lo, 0)))
            prev = stop
        return tuple(out)
    try:
        n = operator.index(arg)
    except TypeError:
        raise TypeError(f"tensor_split expects an int, a sequence of ints or a tensor, got {arg!r}") from None
    if n <= 0:
        raise ValueError(f"number of sections must be larger than 0, got {n}")
    _check_empty_pieces("tensor_split", n, size)
    small, big = divmod(size, n)
    return split(self, [small + (i < big) for i in range(n)], d)


def ravel(self: Tensor) -> Tensor:
    """The elements as 1-d: a view when the strides allow, else a contiguous copy
    (``torch.ravel``: ``reshape(-1)``)."""
    return self.reshape(-1)


def flip(self: Tensor, *dims: int | Sequence[int]) -> Tensor:
    """The elements in reverse order along ``dims``, as a ZERO-COPY VIEW with
    negative strides (``torch.flip`` copies; the values are the same).
    ValueError for a repeated dim, IndexError for one out of range, TypeError
    when no dims are given (``flip(())`` flips nothing)."""
    if not dims:
        raise TypeError("flip() missing 1 required argument: 'dims'")
    ds = [S.wrap_dim(d, self.ndim) for d in _dims_arg(dims, "flip")]
    if len(set(ds)) != len(ds):
        raise ValueError(f"flip: dims {tuple(ds)} repeat a dim")
    shape, strides, offset = self._shape, list(self._strides), self._offset
    for d in ds:
        if shape[d] > 1:
            offset += (shape[d] - 1) * strides[d]
            strides[d] = -strides[d]
    return self._derived(shape, strides, offset if S.prod(shape) else self._offset)


def view_as_real(self: Tensor) -> Tensor:
    """A view of a complex tensor as its real type with a last dim of 2 (real,
    imaginary), as ``torch.view_as_real``; TypeError for non-complex tensors."""
    if not self._dtype.is_complex:
        raise TypeError(f"view_as_real is only supported for complex tensors, got {self._dtype}")
    return self._derived((*self._shape, 2), (*(2 * s for s in self._strides), 1), 2 * self._offset,
                         self._dtype.to_real())  # fmt: skip


def view_as_complex(self: Tensor) -> Tensor:
    """A view of a float32/float64 tensor whose last dim is (real, imaginary) as
    complex64/complex128 (``torch.view_as_complex``). TypeError for other
    dtypes; ValueError unless the last dim has size 2 and stride 1 and the
    other strides and the offset are even."""
    dt = self._dtype
    if dt not in (_dtypes.float32, _dtypes.float64):
        raise TypeError(f"view_as_complex is only supported for float32 and float64 tensors, got {dt}")
    shape, strides, off = self._shape, self._strides, self._offset
    if not shape or shape[-1] != 2:
        raise ValueError(f"view_as_complex: the tensor must have a last dimension of size 2, got shape {shape}")
    if strides[-1] != 1:
        raise ValueError(f"view_as_complex: the last dimension must have stride 1, got strides {strides}")
    if any(s % 2 for s in strides[:-1]):
        raise ValueError(f"view_as_complex: every stride but the last must be even, got {strides}")
    if off % 2:
        raise ValueError(f"view_as_complex: the storage offset must be even, got {off}")
    return self._derived(shape[:-1], tuple(s // 2 for s in strides[:-1]), off // 2, dt.to_complex())


def real(self: Tensor) -> Tensor:
    """The real parts of a complex tensor as a view; a real tensor itself."""
    return view_as_real(self).select(-1, 0) if self._dtype.is_complex else self


def imag(self: Tensor) -> Tensor:
    """The imaginary parts of a complex tensor as a view; TypeError for a real
    tensor (PyTorch raises too: there is no storage for them)."""
    if not self._dtype.is_complex:
        raise TypeError(f"imag is not implemented for tensors with non-complex dtypes ({self._dtype})")
    return view_as_real(self).select(-1, 1)


# --------------------------------------------------------- in-place views


def as_strided_(self: Tensor, size: Sequence[int], stride: Sequence[int], storage_offset: int | None = None) -> Tensor:
    """``as_strided`` applied to this tensor in place (returns self)."""
    return _adopt(self, self.as_strided(size, stride, storage_offset))


def squeeze_(self: Tensor, dim: int | Sequence[int] | None = None) -> Tensor:
    """``squeeze(dim)`` applied to this tensor in place (returns self)."""
    return _adopt(self, self.squeeze() if dim is None else self.squeeze(dim))


def unsqueeze_(self: Tensor, dim: int) -> Tensor:
    """``unsqueeze(dim)`` applied to this tensor in place (returns self)."""
    return _adopt(self, self.unsqueeze(dim))


def t_(self: Tensor) -> Tensor:
    """``t()`` applied to this tensor in place (returns self); ValueError above 2-d."""
    return _adopt(self, self.t())


def transpose_(self: Tensor, dim0: int, dim1: int) -> Tensor:
    """``transpose(dim0, dim1)`` applied to this tensor in place (returns self)."""
    return _adopt(self, self.transpose(dim0, dim1))


def swapdims_(self: Tensor, dim0: int, dim1: int) -> Tensor:
    """``swapdims(dim0, dim1)`` (= ``transpose_``) in place (returns self)."""
    return _adopt(self, self.transpose(dim0, dim1))


def resize_(self: Tensor, *sizes: Any, memory_format: memory_format = contiguous_format) -> Tensor:
    """Give this tensor the shape ``sizes`` in place (``torch.Tensor.resize_``):
    the same shape changes nothing; another gets ``memory_format`` strides
    from the same storage offset, and the storage grows (keeping its bytes)
    when too small. Elements are not moved: new ones are uninitialised.
    ValueError for negative sizes, a read-only tensor, or a storage that must
    grow but is not bridge's (see ``UntypedStorage.resize_``)."""
    from bridge.core.layout import _layout_strides

    shape = S.as_shape(sizes, "size")
    S.check_sizes(shape, "size")
    if shape == self._shape:
        return self
    self._check_writable()
    strides = _layout_strides(shape, S.contiguous_strides(shape), memory_format)
    need = (self._offset + S.prod(shape)) * self._dtype.itemsize if S.prod(shape) else 0
    storage = self._storage
    if need > storage.nbytes():
        storage.resize_(need)
    self._set_geometry(storage, self._dtype, shape, strides, self._offset)
    return self


def resize_as_(self: Tensor, the_template: Tensor, memory_format: memory_format | None = None) -> Tensor:
    """``resize_(the_template.shape)`` in place (returns self)."""
    return resize_(self, the_template._shape, memory_format=memory_format or contiguous_format)


# ------------------------------------------------------------- new_* factories


def _like_self(self: Tensor, dt: Any, dev: Any) -> dtype:
    """The dtype for a ``new_*`` tensor; only self's device (the CPU) allocates."""
    from bridge.core.device import device as _device

    target = self.device if dev is None else _device(dev)
    if target.type != "cpu":
        raise RuntimeError(f"bridge allocates only CPU memory, got device {target}")
    return self._dtype if dt is None else _dtypes.get_dtype(dt)


def _size_arg(size: tuple[Any, ...]) -> tuple[int, ...]:
    shape = S.as_shape(size, "size")
    S.check_sizes(shape, "size")
    return shape


def new_empty(self: Tensor, *size: Any, dtype: Any = None, device: Any = None) -> Tensor:
    """An uninitialised tensor of ``size`` with self's dtype and device unless given."""
    return _empty(_size_arg(size), _like_self(self, dtype, device))


def new_zeros(self: Tensor, *size: Any, dtype: Any = None, device: Any = None) -> Tensor:
    """Zeros of ``size`` with self's dtype and device unless given."""
    return _empty(_size_arg(size), _like_self(self, dtype, device), zeroed=True)


def new_ones(self: Tensor, *size: Any, dtype: Any = None, device: Any = None) -> Tensor:
    """Ones of ``size`` with self's dtype and device unless given."""
    return new_empty(self, *size, dtype=dtype, device=device).fill_(1)


def new_full(self: Tensor, size: Sequence[int], fill_value: Any, *, dtype: Any = None, device: Any = None) -> Tensor:
    """``fill_value`` everywhere in a tensor of ``size`` (a sequence, TypeError
    otherwise, as in PyTorch) with self's dtype and device unless given."""
    if not isinstance(size, Sequence):
        raise TypeError(f"new_full(): size must be a sequence of ints, not {type(size).__name__}")
    return new_empty(self, size, dtype=dtype, device=device).fill_(fill_value)


def new_tensor(self: Tensor, data: Any, *, dtype: Any = None, device: Any = None) -> Tensor:
    """A copy of ``data`` (as ``bridge.tensor``) with self's dtype and device unless given."""
    from bridge.core.factories import tensor

    return tensor(data, dtype=_like_self(self, dtype, device))


def new_empty_strided(self: Tensor, size: Sequence[int], stride: Sequence[int], *, dtype: Any = None,
                      device: Any = None) -> Tensor:  # fmt: skip
    """``bridge.empty_strided(size, stride)`` with self's dtype and device unless given."""
    from bridge.core.factories import empty_strided

    return empty_strided(size, stride, dtype=_like_self(self, dtype, device))


# ---------------------------------------------------------- introspection


def is_floating_point(self: Tensor) -> bool:
    """Whether the dtype is a real floating type (float8 .. float64, bfloat16)."""
    return self._dtype.is_floating_point


def is_complex(self: Tensor) -> bool:
    """Whether the dtype is complex."""
    return self._dtype.is_complex


def is_signed(self: Tensor) -> bool:
    """Whether the dtype holds negative values (False for bool and unsigned ints)."""
    return self._dtype.is_signed


def get_device(self: Tensor) -> int:
    """The device index, -1 for CPU memory (``torch.Tensor.get_device``)."""
    dev = self.device
    return -1 if dev.type == "cpu" else (dev.index or 0)


def is_pinned(self: Tensor) -> bool:
    """Always False: bridge never page-locks memory."""
    return self._storage.is_pinned()


def is_set_to(self: Tensor, tensor: Tensor) -> bool:
    """Whether both tensors view the same storage with the same offset, shape
    and strides (``torch.Tensor.is_set_to``); TypeError for a non-tensor."""
    from bridge.core.tensor import Tensor

    if not isinstance(tensor, Tensor):
        raise TypeError(f"is_set_to() expects a Tensor, got {type(tensor).__name__}")
    return (self._storage is tensor._storage and self._offset == tensor._offset
            and self._shape == tensor._shape and self._strides == tensor._strides)  # fmt: skip


def _order_key(shape: tuple[int, ...], strides: tuple[int, ...], a: int, b: int) -> int:
    """PyTorch's ``should_swap`` for dims a, b (1: b goes first, -1: a does)."""
    sa, sb = strides[a], strides[b]
    if sa == 0 or sb == 0:
        return 0

    def ge(x: int, y: int) -> bool:
        return y == 0 or (x != 0 and (x >= y or x % y == 0))

    if sa == sb:
        return 0 if ge(shape[b], shape[a]) else 1
    if ge(sb, sa):
        return -1
    return 1 if ge(sa, sb) else 0


def dim_order(self: Tensor, *, ambiguity_check: bool = False) -> tuple[int, ...]:
    """The dims from outermost to innermost in memory (``torch.Tensor.dim_order``,
    PyTorch's algorithm, ties kept in logical order). ``ambiguity_check=True``
    raises ValueError when the order is not unique (repeated strides or size-1
    dims); the list-of-memory-formats form is not supported (TypeError)."""
    if not isinstance(ambiguity_check, bool):
        raise TypeError(f"dim_order(): ambiguity_check must be a bool, got {type(ambiguity_check).__name__}")
    shape, strides, nd = self._shape, self._strides, self.ndim
    if ambiguity_check and (1 in shape or any(a == b for a, b in itertools.pairwise(strides))):
        raise ValueError("The tensor does not have unique dim order")
    if nd <= 1:
        return tuple(range(nd))
    contiguous = S.is_contiguous(shape, strides)
    channels_last = nd == 4 and S.is_channels_last(shape, strides)
    if contiguous and not channels_last:
        return tuple(range(nd))
    if channels_last and not contiguous:
        return (0, *range(2, nd), 1)
    perm = list(reversed(range(nd)))
    for i in range(1, nd):
        d1 = i
        for d0 in reversed(range(i)):
            c = _order_key(shape, strides, perm[d0], perm[d1])
            if c > 0:
                perm[d0], perm[d1] = perm[d1], perm[d0]
                d1 = d0
            elif c < 0:
                break
    if ambiguity_check and any(_order_key(shape, strides, a, b) != -1 for a, b in itertools.pairwise(perm)):
        raise ValueError("The tensor does not have unique dim order")
    return tuple(reversed(perm))


def equal(self: Tensor, other: Tensor) -> bool:
    """``torch.equal``: True when both have the same shape and equal values after
    promotion to their common dtype (NaN is never equal). TypeError for a
    non-tensor; RuntimeError for memory the host cannot read."""
    from bridge.core.tensor import Tensor

    if not isinstance(other, Tensor):
        raise TypeError(f"equal(): argument 'other' must be Tensor, not {type(other).__name__}")
    if self._shape != other._shape:
        return False
    common = _dtypes.promote_types(self._dtype, other._dtype).numpy_dtype
    a: np.ndarray[Any, Any] = self._np_view().astype(common, copy=False)
    b: np.ndarray[Any, Any] = other._np_view().astype(common, copy=False)
    return bool(np.array_equal(a, b))
