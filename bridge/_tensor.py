"""Tensor: a typed, strided view of an UntypedStorage.

A tensor is ``(storage, dtype, shape, strides, storage_offset)`` with strides and
offset in elements, as in PyTorch. Movement ops (indexing, view, permute,
expand, ...) return new tensors over the same storage; they are computed by the
pure functions of :mod:`bridge._strides` and never touch memory. Copies
(``contiguous``, ``clone``, ``copy_``, ``to``) use NumPy as the kernel over a
strided NumPy view of the storage.
"""

from __future__ import annotations

import builtins
import math
import operator
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from bridge import _dtypes
from bridge import _strides as S
from bridge._device import CPU as _CPU
from bridge._device import device
from bridge._dtypes import dtype
from bridge._storage import MAX_NBYTES, UntypedStorage

__all__ = [
    "Tensor",
    "memory_format",
    "contiguous_format",
    "channels_last",
    "channels_last_3d",
    "preserve_format",
]

_Bool = builtins.bool
_Int = builtins.int
_Float = builtins.float
_DType = dtype  # inside Tensor, `dtype` names the property


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

# Dtypes whose repr needs no dtype= suffix (PyTorch's defaults).
_DEFAULT_REPR_DTYPES = frozenset({_dtypes.float32, _dtypes.int64, _dtypes.bool, _dtypes.complex64})


# Index kinds that are basic for sure (checked first: the common case).
_BASIC_KEYS = frozenset({builtins.int, slice, type(None), type(Ellipsis)})


def _is_advanced_key(k: Any) -> _Bool:
    return isinstance(k, (list, np.ndarray, Tensor, _Bool, np.bool_))


class Tensor:
    """A strided view of an :class:`UntypedStorage` with an element :class:`dtype`.

    Make tensors with the factories (``bridge.tensor``, ``empty``, ``zeros``,
    ``arange``, ...) or the interop functions; the constructor is private.
    Every view shares the storage, so a write through one view is seen by all.
    Writing through a read-only tensor (memory borrowed read-only) raises
    ValueError; reading memory that is not host-accessible raises RuntimeError.
    """

    __slots__ = ("__weakref__", "_dlmeta", "_dtype", "_offset", "_shape", "_storage", "_strides")

    _storage: UntypedStorage
    _dtype: dtype
    _shape: tuple[_Int, ...]
    _strides: tuple[_Int, ...]
    _offset: _Int
    # Packed int64 shape+strides handed to C exchange API consumers, by
    # geometry; never dropped while the tensor lives (the consumer holds raw
    # pointers into them, also after set_ changes the geometry).
    _dlmeta: dict[tuple[tuple[_Int, ...], tuple[_Int, ...]], bytes]

    # Protocol methods installed by the interop modules (bridge.dlpack, ...),
    # so that the core imports none of them.
    __dlpack__: Callable[..., Any]
    __dlpack_device__: Callable[..., tuple[_Int, _Int]]
    __dlpack_c_exchange_api__: Any
    __array_struct__: Any
    __array_interface__: Any
    __cuda_array_interface__: Any
    memoryview: Callable[..., builtins.memoryview]
    __buffer__: Callable[..., builtins.memoryview]
    __release_buffer__: Callable[..., None]
    __arrow_c_schema__: Callable[..., Any]
    __arrow_c_array__: Callable[..., Any]
    __arrow_c_device_array__: Callable[..., Any]
    __arrow_c_stream__: Callable[..., Any]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError(
            "bridge.Tensor has no public constructor; use bridge.tensor(data), bridge.empty(shape), "
            "bridge.from_dlpack(x) or another factory"
        )

    @classmethod
    def _make(
        cls,
        storage: UntypedStorage,
        dt: dtype,
        shape: tuple[_Int, ...],
        strides: tuple[_Int, ...],
        offset: _Int,
    ) -> Tensor:
        """Trusted constructor: the caller guarantees the view lies inside the storage."""
        self = object.__new__(cls)
        self._storage = storage
        self._dtype = dt
        self._shape = shape
        self._strides = strides
        self._offset = offset
        return self

    @classmethod
    def _over_memory(
        cls,
        ptr: _Int,
        dt: dtype,
        shape: tuple[_Int, ...],
        byte_strides: tuple[_Int, ...],
        owner: Any,
        *,
        readonly: _Bool,
        dev: device | None = None,
    ) -> Tensor:
        """A tensor over foreign memory whose first element is at ``ptr``, with
        ``owner`` keeping it alive: the storage spans exactly the reachable
        elements (negative strides included). ValueError when a byte stride
        is not a whole number of elements."""
        isz = dt.itemsize
        strides = []
        for d, st in enumerate(byte_strides):
            if st % isz:
                raise ValueError(
                    f"stride of {st} bytes in dim {d} is not a multiple of the item size "
                    f"({isz} bytes); a tensor's strides count whole elements"
                )
            strides.append(st // isz)
        el_strides = tuple(strides)
        lo, hi = S.extent(shape, el_strides, 0)
        start, nbytes = ptr + lo * isz, (hi - lo) * isz
        if nbytes > MAX_NBYTES or start < 0 or start + nbytes > 2**64:
            raise ValueError(
                f"a tensor of shape {shape} with byte strides {byte_strides} at address {ptr:#x} "
                "does not fit in a 64-bit address space"
            )
        storage = UntypedStorage._wrap(
            ptr + lo * isz, (hi - lo) * isz, _CPU if dev is None else dev, owner, readonly=readonly
        )
        return Tensor._make(storage, dt, shape, el_strides, -lo)

    def _view(self, shape: tuple[_Int, ...], strides: tuple[_Int, ...], offset: _Int) -> Tensor:
        """A view derived from this one by stride arithmetic (in bounds by construction)."""
        out = object.__new__(Tensor)
        out._storage = self._storage
        out._dtype = self._dtype
        out._shape = shape
        out._strides = strides
        out._offset = offset
        return out

    def _checked_view(
        self,
        shape: tuple[_Int, ...],
        strides: tuple[_Int, ...],
        offset: _Int,
        storage: UntypedStorage | None = None,
        dt: dtype | None = None,
    ) -> Tensor:
        """A view from user-given geometry: ValueError if it reaches outside the storage."""
        storage = self._storage if storage is None else storage
        dt = self._dtype if dt is None else dt
        S.check_sizes(shape, "size")
        if len(strides) != len(shape):
            raise ValueError(f"size {shape} and stride {strides} have different lengths")
        S.check_in_bounds(shape, strides, offset, storage.nbytes() // dt.itemsize)
        return Tensor._make(storage, dt, shape, strides, offset)

    # ----------------------------------------------------------- metadata

    def untyped_storage(self) -> UntypedStorage:
        """The storage this tensor views."""
        return self._storage

    def storage_offset(self) -> _Int:
        """Offset of the first element in the storage, in elements."""
        return self._offset

    def size(self, dim: _Int | None = None) -> Any:
        """The shape as a tuple, or the size of one dim (IndexError if out of range)."""
        if dim is None:
            return self._shape
        return self._shape[S.wrap_dim(dim, len(self._shape))]

    @property
    def shape(self) -> tuple[_Int, ...]:
        """The shape as a tuple of ints."""
        return self._shape

    def stride(self, dim: _Int | None = None) -> Any:
        """The strides in elements as a tuple, or the stride of one dim."""
        if dim is None:
            return self._strides
        return self._strides[S.wrap_dim(dim, len(self._shape))]

    @property
    def dtype(self) -> dtype:
        """The element type."""
        return self._dtype

    @property
    def device(self) -> device:
        """The device of the storage."""
        return self._storage._device

    @property
    def is_cuda(self) -> _Bool:
        """Whether the tensor is in CUDA device memory."""
        return self._storage._device.type == "cuda"

    @property
    def is_cpu(self) -> _Bool:
        """Whether the tensor is in host memory."""
        return self._storage._device.type == "cpu"

    @property
    def ndim(self) -> _Int:
        """Number of dimensions."""
        return len(self._shape)

    def dim(self) -> _Int:
        """Number of dimensions."""
        return len(self._shape)

    def numel(self) -> _Int:
        """Number of elements."""
        return S.prod(self._shape)

    nelement = numel

    def element_size(self) -> _Int:
        """Bytes per element."""
        return self._dtype.itemsize

    @property
    def itemsize(self) -> _Int:
        """Bytes per element."""
        return self._dtype.itemsize

    @property
    def nbytes(self) -> _Int:
        """Bytes the elements would occupy if packed (numel * itemsize)."""
        return S.prod(self._shape) * self._dtype.itemsize

    def data_ptr(self) -> _Int:
        """Address of the first element."""
        return self._storage._ptr + self._offset * self._dtype.itemsize

    @property
    def is_readonly(self) -> _Bool:
        """Whether the memory is read-only (borrowed from a read-only producer)."""
        return self._storage._readonly

    def is_contiguous(self, memory_format: memory_format = contiguous_format) -> _Bool:
        """Whether the strides are those of ``memory_format`` (PyTorch's rule:
        size-1 dims may have any stride and empty tensors are contiguous)."""
        if memory_format is contiguous_format:
            return S.is_contiguous(self._shape, self._strides)
        if memory_format is channels_last:
            return len(self._shape) == 4 and S.is_channels_last(self._shape, self._strides)
        if memory_format is channels_last_3d:
            return len(self._shape) == 5 and S.is_channels_last(self._shape, self._strides)
        raise ValueError(f"is_contiguous() does not take {memory_format!r}")

    def is_non_overlapping_and_dense(self) -> _Bool:
        """Whether the elements fill a contiguous block exactly once, in some dim order."""
        return S.is_non_overlapping_and_dense(self._shape, self._strides)

    def __len__(self) -> _Int:
        if not self._shape:
            raise TypeError("len() of a 0-d tensor")
        return self._shape[0]

    # -------------------------------------------------------------- views

    def __getitem__(self, key: Any) -> Tensor:
        """Basic indexing (ints, slices with any step, None, Ellipsis) returns a
        view; advanced indexing (int/bool tensors, arrays, lists) returns a copy
        with NumPy's semantics."""
        if type(key) not in _BASIC_KEYS:
            parts = key if type(key) is tuple else (key,)
            if any(type(k) not in _BASIC_KEYS and _is_advanced_key(k) for k in parts):
                picked = self._np_view()[_numpy_key(parts)]
                return _from_numpy_copy(np.asarray(picked), self._dtype)
        shape, strides, offset = S.apply_index(self._shape, self._strides, self._offset, key)
        return self._view(shape, strides, offset)

    def __setitem__(self, key: Any, value: Any) -> None:
        """Write ``value`` (a scalar, tensor or array, broadcast) into ``self[key]``."""
        self._check_writable()
        parts = key if isinstance(key, tuple) else (key,)
        if any(_is_advanced_key(k) for k in parts):
            target = self._np_view()
            target[_numpy_key(parts)] = _as_numpy_operand(value)
            return
        shape, strides, offset = S.apply_index(self._shape, self._strides, self._offset, key)
        self._view(shape, strides, offset).copy_(value)

    def __iter__(self) -> Iterator[Tensor]:
        if not self._shape:
            raise TypeError("iteration over a 0-d tensor")
        for i in range(self._shape[0]):
            yield self.select(0, i)

    def view(self, *shape: Any) -> Tensor:
        """A view with a new shape (one size may be -1), or with another dtype
        (``view(bridge.int32)``). ValueError when the strides do not allow a view
        (use :meth:`reshape`) or the dtype's size does not fit the layout."""
        if len(shape) == 1 and type(shape[0]) not in (_Int, tuple, list):
            arg = shape[0]
            if isinstance(arg, (dtype, str)) or not (S.is_int(arg) or isinstance(arg, Sequence)):
                return self._view_dtype(_dtypes.get_dtype(arg))
        new_shape = S.infer_size(S.as_shape(shape), self.numel())
        strides = S.view_strides(self._shape, self._strides, new_shape)
        if strides is None:
            raise ValueError(
                f"view size {new_shape} is not compatible with input tensor's size {self._shape} "
                f"and stride {self._strides} (at least one dimension spans across two contiguous "
                "subspaces); use .reshape(...) instead"
            )
        return self._view(new_shape, strides, self._offset)

    def _view_dtype(self, new: _DType) -> Tensor:
        old = self._dtype
        if new.itemsize == old.itemsize:
            return Tensor._make(self._storage, new, self._shape, self._strides, self._offset)
        if not self._shape:
            raise ValueError(
                f"cannot view a 0-d {old} tensor as {new}: the element sizes differ "
                f"({old.itemsize} vs {new.itemsize} bytes)"
            )
        if self._strides[-1] != 1 and self._shape[-1] != 1:
            raise ValueError(
                f"viewing {old} as {new} needs the last dimension to have stride 1, "
                f"got strides {self._strides}"
            )
        if new.itemsize < old.itemsize:
            r = old.itemsize // new.itemsize
            shape = (*self._shape[:-1], self._shape[-1] * r)
            strides = (*(s * r for s in self._strides[:-1]), 1)
            return Tensor._make(self._storage, new, shape, strides, self._offset * r)
        r = new.itemsize // old.itemsize
        if self._shape[-1] % r:
            raise ValueError(
                f"viewing {old} as {new}: the last dimension ({self._shape[-1]}) must be a "
                f"multiple of {r}"
            )
        if self._offset % r:
            raise ValueError(
                f"viewing {old} as {new}: the storage offset ({self._offset}) must be a "
                f"multiple of {r}"
            )
        if any(s % r for s in self._strides[:-1]):
            raise ValueError(
                f"viewing {old} as {new}: every stride but the last must be a multiple of "
                f"{r}, got {self._strides}"
            )
        shape = (*self._shape[:-1], self._shape[-1] // r)
        strides = (*(s // r for s in self._strides[:-1]), 1)
        return Tensor._make(self._storage, new, shape, strides, self._offset // r)

    def view_as(self, other: Tensor) -> Tensor:
        """``self.view(other.shape)``."""
        return self.view(other._shape)

    def reshape(self, *shape: Any) -> Tensor:
        """A view with the new shape when the strides allow it, else a contiguous copy."""
        new_shape = S.infer_size(S.as_shape(shape), self.numel())
        strides = S.view_strides(self._shape, self._strides, new_shape)
        if strides is not None:
            return self._view(new_shape, strides, self._offset)
        return self.contiguous().view(new_shape)

    def reshape_as(self, other: Tensor) -> Tensor:
        """``self.reshape(other.shape)``."""
        return self.reshape(other._shape)

    def permute(self, *dims: Any) -> Tensor:
        """A view with the dims reordered; ValueError unless ``dims`` is a permutation."""
        shape, strides = S.permute(self._shape, self._strides, S.as_shape(dims, "dims"))
        return self._view(shape, strides, self._offset)

    def transpose(self, dim0: _Int, dim1: _Int) -> Tensor:
        """A view with ``dim0`` and ``dim1`` swapped."""
        nd = len(self._shape)
        a, b = S.wrap_dim(dim0, nd), S.wrap_dim(dim1, nd)
        if not self._shape:
            return self._view((), (), self._offset)
        shape, strides = list(self._shape), list(self._strides)
        shape[a], shape[b] = shape[b], shape[a]
        strides[a], strides[b] = strides[b], strides[a]
        return self._view(tuple(shape), tuple(strides), self._offset)

    swapaxes = swapdims = transpose

    def t(self) -> Tensor:
        """Transpose of a tensor of at most 2 dims (ValueError above that)."""
        if len(self._shape) > 2:
            raise ValueError(f"t() expects a tensor with <= 2 dimensions, but self is {self.ndim}D")
        return self.transpose(0, -1) if self._shape else self

    @property
    def T(self) -> Tensor:
        """All dims reversed."""
        return self._view(self._shape[::-1], self._strides[::-1], self._offset)

    @property
    def mT(self) -> Tensor:
        """The last two dims swapped (a batch of matrices transposed); ValueError below 2-d."""
        if len(self._shape) < 2:
            raise ValueError(f"tensor.mT is only supported on matrices or batches of matrices. Got {self.ndim}-D tensor.")
        return self.transpose(-2, -1)

    def movedim(self, source: Any, destination: Any) -> Tensor:
        """A view with the dims in ``source`` moved to the positions in ``destination``."""
        nd = len(self._shape)
        src = [S.wrap_dim(d, nd) for d in (source if isinstance(source, Sequence) else [source])]
        dst = [S.wrap_dim(d, nd) for d in (destination if isinstance(destination, Sequence) else [destination])]
        if len(src) != len(dst):
            raise ValueError("movedim: source and destination must have the same number of dims")
        if len(set(src)) != len(src) or len(set(dst)) != len(dst):
            raise ValueError("movedim: repeated dim in source or destination")
        order: list[_Int | None] = [None] * nd
        for s, d in zip(src, dst):
            order[d] = s
        rest = iter(d for d in range(nd) if d not in src)
        perm = [o if o is not None else next(rest) for o in order]
        return self.permute(perm)

    moveaxis = movedim

    def expand(self, *sizes: Any) -> Tensor:
        """A broadcast view: size-1 dims stretched and new leading dims added with
        stride 0 (no memory is allocated); -1 keeps a size."""
        shape, strides = S.expand(self._shape, self._strides, S.as_shape(sizes, "size"))
        return self._view(shape, strides, self._offset)

    def expand_as(self, other: Tensor) -> Tensor:
        """``self.expand(other.shape)``."""
        return self.expand(other._shape)

    def broadcast_to(self, shape: Any) -> Tensor:
        """A broadcast view with ``shape`` (stride 0 where stretched)."""
        return self.expand(S.as_shape((shape,)))

    def squeeze(self, dim: Any = None) -> Tensor:
        """A view without size-1 dims (all of them, or those among ``dim``)."""
        nd = len(self._shape)
        if dim is None:
            drop = {d for d in range(nd) if self._shape[d] == 1}
        else:
            dims = dim if isinstance(dim, (tuple, list)) else (dim,)
            drop = {d for d in (S.wrap_dim(x, nd) for x in dims) if nd and self._shape[d] == 1}
        keep = [d for d in range(nd) if d not in drop]
        return self._view(
            tuple([self._shape[d] for d in keep]), tuple([self._strides[d] for d in keep]), self._offset
        )

    def unsqueeze(self, dim: _Int) -> Tensor:
        """A view with a size-1 dim inserted at ``dim``."""
        d = S.wrap_dim(dim, len(self._shape), extra=1)
        shape, strides, _ = S.apply_index(
            self._shape, self._strides, self._offset, (slice(None),) * d + (None,)
        )
        return self._view(shape, strides, self._offset)

    def flatten(self, start_dim: _Int = 0, end_dim: _Int = -1) -> Tensor:
        """Dims ``start_dim..end_dim`` merged into one: a view when the strides allow, else a copy."""
        nd = len(self._shape)
        if nd == 0:
            return self.reshape(1)
        a, b = S.wrap_dim(start_dim, nd), S.wrap_dim(end_dim, nd)
        if a > b:
            raise ValueError("flatten() has invalid args: start_dim cannot come after end_dim")
        if a == b:
            return self
        merged = S.prod(self._shape[a : b + 1])
        return self.reshape(*self._shape[:a], merged, *self._shape[b + 1 :])

    def unflatten(self, dim: _Int, sizes: Sequence[_Int]) -> Tensor:
        """A view with ``dim`` split into ``sizes`` (one may be -1)."""
        nd = len(self._shape)
        d = S.wrap_dim(dim, nd)
        sizes_t = S.as_shape((sizes,), "sizes")
        if not sizes_t:
            raise ValueError("unflatten: sizes must be non-empty")
        sizes_t = S.infer_size(sizes_t, self._shape[d])
        inner = S.contiguous_strides(sizes_t)
        strides = tuple(s * self._strides[d] for s in inner)
        return self._view(
            (*self._shape[:d], *sizes_t, *self._shape[d + 1 :]),
            (*self._strides[:d], *strides, *self._strides[d + 1 :]),
            self._offset,
        )

    def narrow(self, dim: _Int, start: _Int, length: _Int) -> Tensor:
        """A view of ``length`` entries of ``dim`` starting at ``start`` (may be negative)."""
        if not self._shape:
            raise IndexError("narrow() cannot be applied to a 0-dim tensor")
        d = S.wrap_dim(dim, len(self._shape))
        size = self._shape[d]
        start, length = operator.index(start), operator.index(length)
        if not -size <= start <= size:
            raise IndexError(f"start ({start}) out of range for dimension {d} of size {size}")
        if start < 0:
            start += size
        if length < 0 or start + length > size:
            raise ValueError(f"start ({start}) + length ({length}) exceeds dimension size ({size})")
        key = (slice(None),) * d + (slice(start, start + length),)
        return self[key]

    def select(self, dim: _Int, index: _Int) -> Tensor:
        """The view at ``index`` along ``dim``, with that dim removed."""
        if not self._shape:
            raise IndexError("select() cannot be applied to a 0-dim tensor")
        d = S.wrap_dim(dim, len(self._shape))
        return self[(slice(None),) * d + (operator.index(index),)]

    def unfold(self, dimension: _Int, size: _Int, step: _Int) -> Tensor:
        """A view of all windows of ``size`` entries of ``dimension``, ``step`` apart,
        as a new last dim (PyTorch's ``Tensor.unfold``)."""
        nd = len(self._shape)
        d = S.wrap_dim(dimension, nd)
        size, step = operator.index(size), operator.index(step)
        if step <= 0:
            raise ValueError(f"unfold: step must be positive, got {step}")
        dim_size = self._shape[d] if nd else 1
        if size < 0 or size > dim_size:
            raise ValueError(f"unfold: size {size} exceeds dimension {d} of size {dim_size}")
        if nd == 0:
            return self._view((size,), (1,), self._offset)
        shape, strides = list(self._shape), list(self._strides)
        shape[d] = (dim_size - size) // step + 1
        strides[d] = self._strides[d] * step
        return self._view((*shape, size), (*strides, self._strides[d]), self._offset)

    def diagonal(self, offset: _Int = 0, dim1: _Int = 0, dim2: _Int = 1) -> Tensor:
        """A view of the diagonal of the (dim1, dim2) planes, appended as the last dim."""
        nd = len(self._shape)
        if nd < 2:
            raise ValueError(f"diagonal() needs at least 2 dimensions, got {nd}")
        a, b = S.wrap_dim(dim1, nd), S.wrap_dim(dim2, nd)
        if a == b:
            raise ValueError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
        offset = operator.index(offset)
        sa, sb = self._shape[a], self._shape[b]
        if offset >= 0:
            n = max(min(sa, sb - offset), 0)
            start = offset * self._strides[b]
        else:
            n = max(min(sa + offset, sb), 0)
            start = -offset * self._strides[a]
        keep = [d for d in range(nd) if d not in (a, b)]
        return self._view(
            (*(self._shape[d] for d in keep), n),
            (*(self._strides[d] for d in keep), self._strides[a] + self._strides[b]),
            self._offset + (start if n else 0),
        )

    def as_strided(self, size: Any, stride: Any, storage_offset: _Int | None = None) -> Tensor:
        """A view with arbitrary geometry over the same storage; ValueError if any
        element would fall outside the storage."""
        shape = S.as_shape((size,), "size")
        strides = S.as_shape((stride,), "stride")
        off = self._offset if storage_offset is None else operator.index(storage_offset)
        return self._checked_view(shape, strides, off)

    def split(self, split_size_or_sections: Any, dim: _Int = 0) -> tuple[Tensor, ...]:
        """Views of consecutive pieces along ``dim``: pieces of ``split_size`` (the
        last may be smaller), or of the listed sizes (which must sum to the dim)."""
        d = S.wrap_dim(dim, len(self._shape))
        size = self._shape[d]
        if isinstance(split_size_or_sections, (list, tuple)):
            sections = [operator.index(s) for s in split_size_or_sections]
            if any(s < 0 for s in sections) or sum(sections) != size:
                raise ValueError(
                    f"split sizes {sections} must be non-negative and sum to the size of "
                    f"dimension {d} ({size})"
                )
        else:
            step = operator.index(split_size_or_sections)
            if step <= 0 and not (step == 0 and size == 0):
                raise ValueError(f"split size must be positive, got {step}")
            sections = [min(step, size - i) for i in range(0, size, step)] if size else [0]
        out = []
        start = 0
        for n in sections:
            out.append(self.narrow(d, start, n))
            start += n
        return tuple(out)

    def chunk(self, chunks: _Int, dim: _Int = 0) -> tuple[Tensor, ...]:
        """At most ``chunks`` views of equal size (the last may be smaller) along ``dim``."""
        chunks = operator.index(chunks)
        if chunks <= 0:
            raise ValueError(f"chunk expects `chunks` to be greater than 0, got: {chunks}")
        d = S.wrap_dim(dim, len(self._shape))
        size = self._shape[d]
        if size == 0:  # PyTorch returns `chunks` empty pieces here
            return tuple(self.narrow(d, 0, 0) for _ in range(chunks))
        return self.split(math.ceil(size / chunks), d)

    def unbind(self, dim: _Int = 0) -> tuple[Tensor, ...]:
        """The views ``select(dim, i)`` for every i."""
        d = S.wrap_dim(dim, len(self._shape))
        return tuple(self.select(d, i) for i in range(self._shape[d]))

    def set_(
        self,
        source: Any = None,
        storage_offset: _Int = 0,
        size: Any = None,
        stride: Any = None,
    ) -> Tensor:
        """Repoint this tensor (in place) at ``source``: a storage (with the given
        offset, size and stride; default: all of it as 1-d), a tensor (its
        storage and geometry) or None (an empty storage). ValueError when the
        geometry leaves the storage."""
        if source is None:
            source = UntypedStorage(0)
        if isinstance(source, Tensor):
            if size is None:
                view = Tensor._make(source._storage, source._dtype, source._shape, source._strides, source._offset)
                self._assign(view)
                return self
            source = source._storage
        if not isinstance(source, UntypedStorage):
            raise TypeError(f"set_() expects an UntypedStorage or Tensor, got {type(source).__name__}")
        off = operator.index(storage_offset)
        if size is None:
            shape: tuple[_Int, ...] = ((source.nbytes() // self._dtype.itemsize) - off,)
        else:
            shape = S.as_shape((size,), "size")
        strides = S.contiguous_strides(shape) if stride is None else S.as_shape((stride,), "stride")
        self._assign(self._checked_view(shape, strides, off, storage=source))
        return self

    def _assign(self, other: Tensor) -> None:
        # _dlmeta is kept: a consumer of the C exchange API may still hold
        # pointers into the shape/strides arrays handed out before.
        self._storage = other._storage
        self._dtype = other._dtype
        self._shape = other._shape
        self._strides = other._strides
        self._offset = other._offset

    # -------------------------------------------------------------- copies

    def _check_writable(self) -> None:
        if self._storage._readonly:
            raise ValueError("cannot write to a read-only tensor (its memory was borrowed read-only)")

    def _np_view(self, bits: _Bool = False) -> np.ndarray[Any, Any]:
        """A NumPy array over exactly this tensor's elements (no copy).

        ``bits=True`` uses an unsigned type of the same size, for copies that
        must not interpret values (and work without ml_dtypes)."""
        storage = self._storage
        buf = storage._np
        if buf is None:
            buf = storage._host_array()
        isz = self._dtype.itemsize
        np_dt = self._dtype.bit_numpy_dtype if bits else self._dtype.numpy_dtype
        # An empty view may sit past the end of its storage (PyTorch allows
        # it, e.g. select() on a size-0 dim); NumPy checks the offset anyway.
        offset = self._offset * isz if 0 not in self._shape else 0
        try:
            view: np.ndarray[Any, Any] = np.ndarray(
                self._shape,
                np_dt,
                buffer=buf,
                offset=offset,
                strides=tuple([s * isz for s in self._strides]),
            )
        except (TypeError, ValueError):
            # NumPy checks that the view lies inside the buffer, which is the
            # storage's bytes as they are now: it fails after a shrink.
            self._check_bounds(RuntimeError)
            # A size-0/1 dim may have any stride (as in torch), one NumPy's
            # byte arithmetic may not take: those strides address nothing.
            view = np.ndarray(
                self._shape,
                np_dt,
                buffer=buf,
                offset=offset,
                strides=tuple([s * isz if n > 1 else 0 for n, s in zip(self._shape, self._strides)]),
            )
        return view

    def _check_bounds(self, error: type[Exception] = BufferError) -> None:
        """Raise ``error`` when this view reaches past the bytes its storage
        holds now (a storage can shrink under its views with ``resize_``).
        Exports raise BufferError; reads and writes RuntimeError."""
        isz = self._dtype.itemsize
        lo, hi = S.extent(self._shape, self._strides, self._offset)
        nbytes = self._storage._nbytes
        if lo != hi and (lo < 0 or hi * isz > nbytes):
            raise error(
                f"the tensor views bytes [{lo * isz}, {hi * isz}) of a storage that now holds "
                f"{nbytes} bytes (the storage was resized after the view was made)"
            )

    def contiguous(self, memory_format: memory_format = contiguous_format) -> Tensor:
        """This tensor if it is already contiguous in ``memory_format``, else a copy that is."""
        if memory_format is preserve_format:
            raise ValueError("preserve_format is not supported by contiguous(); use clone()")
        if self.is_contiguous(memory_format=memory_format) if memory_format in (
            contiguous_format, channels_last, channels_last_3d
        ) else False:
            return self
        return self.clone(memory_format=memory_format)

    def clone(self, memory_format: memory_format = preserve_format) -> Tensor:
        """A copy in new memory with the layout of ``memory_format``
        (``preserve_format``: the same strides when dense, else the same dim order).
        Device memory is copied on its device by the kernel registered for it
        (CUDA: CuPy); RuntimeError when there is none."""
        if not self._storage._device.is_host_accessible:
            strides = _layout_strides(self._shape, self._strides, memory_format)
            copied: Tensor = _device_kernel(self, "clone")(self, strides)
            return copied
        out = Tensor._make(
            UntypedStorage._allocate(self.numel() * self._dtype.itemsize),
            self._dtype,
            self._shape,
            _layout_strides(self._shape, self._strides, memory_format),
            0,
        )
        np.copyto(out._np_view(bits=True), self._np_view(bits=True))
        return out

    def copy_(self, src: Any, non_blocking: _Bool = False) -> Tensor:
        """Copy ``src`` (tensor, array, nested list or scalar; broadcast to this
        shape and cast to this dtype as PyTorch casts) into this tensor in place."""
        self._check_writable()
        if not self._storage._device.is_host_accessible or (
            isinstance(src, Tensor) and not src._storage._device.is_host_accessible
        ):
            _device_kernel(self if not self._storage._device.is_host_accessible else src, "copy_")(
                self, src
            )
            return self
        if isinstance(src, Tensor) and src._dtype is self._dtype:
            dst_np = self._np_view(bits=True)
            np.copyto(dst_np, _broadcast_for(src._np_view(bits=True), self._shape), casting="no")
            return self
        value = _as_numpy_operand(src)
        np.copyto(self._np_view(), _broadcast_for(value, self._shape), casting="unsafe")
        return self

    def fill_(self, value: Any) -> Tensor:
        """Set every element to the scalar ``value`` in place."""
        self._check_writable()
        arr = np.asarray(value.item() if isinstance(value, Tensor) else value)
        if arr.ndim:
            raise ValueError(f"fill_() takes a scalar, got shape {arr.shape}")
        np.copyto(self._np_view(), arr, casting="unsafe")
        return self

    def zero_(self) -> Tensor:
        """Set every element to zero in place."""
        self._check_writable()
        self._np_view(bits=True)[...] = 0
        return self

    def to(self, *args: Any, **kwargs: Any) -> Tensor:
        """``to(dtype)``, ``to(device)``, ``to(device, dtype)`` or ``to(other)``:
        this tensor when nothing changes and ``copy`` is false, else a converted
        copy. Only host memory can be converted (RuntimeError otherwise)."""
        dt: dtype | None = kwargs.pop("dtype", None)
        dev: Any = kwargs.pop("device", None)
        copy = _Bool(kwargs.pop("copy", False))
        kwargs.pop("non_blocking", None)
        if kwargs:
            raise TypeError(f"to() got unexpected keyword arguments {sorted(kwargs)}")
        for a in args:
            if isinstance(a, Tensor):
                dt, dev = a._dtype, a.device
            elif isinstance(a, (device, str)) and not (
                isinstance(a, str) and a.removeprefix("torch.").removeprefix("bridge.") in _dtypes._BY_NAME
            ):
                dev = a
            else:
                dt = _dtypes.get_dtype(a)
        if dev is not None and device(dev) != self.device:
            raise RuntimeError(f"bridge cannot move memory from {self.device} to {device(dev)}")
        dt = self._dtype if dt is None else _dtypes.get_dtype(dt)
        if dt is self._dtype and not copy:
            return self
        if dt is self._dtype:
            return self.clone()
        out = _empty(self._shape, dt, _layout_strides(self._shape, self._strides, preserve_format))
        np.copyto(out._np_view(), self._np_view(), casting="unsafe")
        return out

    def type(self, dtype: Any = None) -> Any:
        """The dtype's name when called without arguments, else ``to(dtype)``."""
        if dtype is None:
            return f"bridge.{self._dtype.name}"
        return self.to(dtype)

    def float(self) -> Tensor:
        """``to(bridge.float32)``."""
        return self.to(_dtypes.float32)

    def double(self) -> Tensor:
        """``to(bridge.float64)``."""
        return self.to(_dtypes.float64)

    def half(self) -> Tensor:
        """``to(bridge.float16)``."""
        return self.to(_dtypes.float16)

    def bfloat16(self) -> Tensor:
        """``to(bridge.bfloat16)``."""
        return self.to(_dtypes.bfloat16)

    def long(self) -> Tensor:
        """``to(bridge.int64)``."""
        return self.to(_dtypes.int64)

    def int(self) -> Tensor:
        """``to(bridge.int32)``."""
        return self.to(_dtypes.int32)

    def short(self) -> Tensor:
        """``to(bridge.int16)``."""
        return self.to(_dtypes.int16)

    def char(self) -> Tensor:
        """``to(bridge.int8)``."""
        return self.to(_dtypes.int8)

    def byte(self) -> Tensor:
        """``to(bridge.uint8)``."""
        return self.to(_dtypes.uint8)

    def bool(self) -> Tensor:
        """``to(bridge.bool)``."""
        return self.to(_dtypes.bool)

    def cpu(self) -> Tensor:
        """This tensor when it is on the CPU; RuntimeError otherwise."""
        return self.to("cpu")

    # ---------------------------------------------------- values out

    def _values(self) -> np.ndarray[Any, Any]:
        """The elements as a NumPy array of a type NumPy can print and convert
        (bfloat16/float8 widened to float32)."""
        arr = self._np_view()
        if arr.dtype.kind == "V" or type(arr.dtype).__module__.startswith("ml_dtypes") or (
            arr.dtype.type.__module__.startswith("ml_dtypes")
        ):
            arr = arr.astype(np.float32)
        return arr

    def tolist(self) -> Any:
        """The elements as (nested) Python lists of Python scalars."""
        return self._values().tolist()

    def item(self) -> Any:
        """The single element as a Python scalar; ValueError unless numel() == 1."""
        n = self.numel()
        if n != 1:
            raise ValueError(f"a Tensor with {n} elements cannot be converted to Scalar")
        return self._values().reshape(()).item()

    def __bool__(self) -> _Bool:
        n = self.numel()
        if n != 1:
            raise ValueError(f"Boolean value of Tensor with {n} elements is ambiguous")
        return _Bool(self.item())

    def __int__(self) -> _Int:
        return _Int(self.item())

    def __float__(self) -> _Float:
        return _Float(self.item())

    def __complex__(self) -> complex:
        return complex(self.item())

    def __index__(self) -> _Int:
        if not self._dtype.is_integral or self.numel() != 1:
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return _Int(self.item())

    def numpy(self, *, force: _Bool = False) -> np.ndarray[Any, Any]:
        """A NumPy array sharing this tensor's memory (read-only when the tensor is).

        bfloat16 and float8 need ml_dtypes (TypeError naming it when missing).
        ``force=True`` returns a copy for memory the host cannot read directly.
        Raises TypeError for non-host tensors without ``force``."""
        if not self.device.is_host_accessible:
            if force:
                host = _empty(self._shape, self._dtype)
                _device_kernel(self, "copy_")(host, self)
                return host._np_view()
            raise TypeError(
                f"can't convert {self.device} device type tensor to numpy; its memory is not "
                "host-accessible (numpy(force=True) copies it)"
            )
        return self._np_view()

    def __array__(self, dtype: Any = None, copy: _Bool | None = None) -> np.ndarray[Any, Any]:
        """NumPy 2 protocol: zero-copy unless a copy is asked for or a dtype change
        needs one; ``copy=False`` with a needed copy raises ValueError."""
        arr = self.numpy()
        if dtype is not None and np.dtype(dtype) != arr.dtype:
            if copy is False:
                raise ValueError(f"converting {self._dtype} to {np.dtype(dtype)} needs a copy, but copy=False")
            cast: np.ndarray[Any, Any] = arr.astype(dtype)
            return cast
        if copy:
            dup: np.ndarray[Any, Any] = arr.copy()
            return dup
        return arr

    # ---------------------------------------------------------------- repr

    def __repr__(self) -> str:
        return _format_tensor(self)


# ---------------------------------------------------------------- helpers

# Copy kernels for memory the host cannot touch, by device type, registered by
# the interop module that knows a library for it (bridge.array_interface: CuPy).
DEVICE_KERNELS: dict[str, dict[str, Callable[..., Any]]] = {}


def _device_kernel(t: Tensor, op: str) -> Callable[..., Any]:
    dev = t._storage._device
    kernel = DEVICE_KERNELS.get(dev.type, {}).get(op)
    if kernel is None:
        raise RuntimeError(
            f"{op}() of {dev} memory needs a library that can copy it on the device "
            f"(for CUDA: CuPy, `pip install cupy-cuda12x`); bridge never reads device memory "
            "on the host"
        )
    return kernel



def _layout_strides(
    shape: tuple[_Int, ...], strides: tuple[_Int, ...], fmt: memory_format
) -> tuple[_Int, ...]:
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
    if strides is None:
        strides = S.contiguous_strides(shape)
    nbytes = S.prod(shape) * dt.itemsize
    return Tensor._make(UntypedStorage._allocate(nbytes, zeroed=zeroed), dt, shape, strides, 0)


def _from_numpy_copy(arr: np.ndarray[Any, Any], dt: dtype) -> Tensor:
    out = _empty(arr.shape, dt)
    np.copyto(out._np_view(), arr, casting="unsafe")
    return out


def _as_numpy_operand(value: Any) -> Any:
    if isinstance(value, Tensor):
        return value._np_view()
    return np.asarray(value)


def _numpy_key(parts: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(p._np_view() if isinstance(p, Tensor) else p for p in parts)


def _broadcast_for(value: Any, shape: tuple[_Int, ...]) -> Any:
    """``value`` broadcast to ``shape``, with PyTorch's error type for a mismatch."""
    vshape = np.shape(value)
    if vshape == shape:
        return value
    try:
        S.broadcast_shapes(shape, vshape)
        return np.broadcast_to(value, shape)
    except ValueError:
        raise ValueError(f"cannot broadcast a value of shape {vshape} to shape {shape}") from None


# ---------------------------------------------------------------- repr


def _format_tensor(t: Tensor) -> str:
    suffix = []
    dev = t.device
    if dev.type != "cpu":
        suffix.append(f"device='{dev}'")
    if t.numel() == 0 and t.ndim != 1:
        suffix.append(f"size={t.shape}")
    if t._dtype not in _DEFAULT_REPR_DTYPES:
        suffix.append(f"dtype=bridge.{t._dtype.name}")
    if not dev.is_host_accessible:
        body = "..."
    elif t.numel() == 0:
        body = "[]"
    else:
        try:
            body = _format_values(t._values())
        except TypeError:  # a dtype NumPy cannot see without ml_dtypes: show the bits
            body = _format_values(t._np_view(bits=True))
            suffix.append("(raw bits)")
    return "tensor(" + ", ".join([body, *suffix]) + ")"


def _edge_sample(arr: np.ndarray[Any, Any], edge: _Int = 3) -> np.ndarray[Any, Any]:
    for axis in range(arr.ndim):
        if arr.shape[axis] > 2 * edge:
            arr = np.concatenate(
                [np.take(arr, range(edge), axis), np.take(arr, range(-edge, 0), axis)], axis
            )
    return arr


def _float_formatter(sample: np.ndarray[Any, Any]) -> Any:
    """PyTorch's float printing: integers as ``3.``, else 4 decimals, switching
    to scientific notation when magnitudes span more than 1000x or leave
    [1e-4, 1e8]."""
    finite = sample[np.isfinite(sample)]
    nonzero = np.abs(finite[finite != 0])
    lo, hi = (float(nonzero.min()), float(nonzero.max())) if nonzero.size else (1.0, 1.0)
    int_mode = bool(np.all(finite == np.round(finite)))
    sci = hi / lo > 1000.0 or hi > 1e8 or (not int_mode and lo < 1e-4)
    spec = ".4e" if sci else (".0f" if int_mode else ".4f")
    dot = "." if int_mode and not sci else ""

    def fmt(x: Any) -> str:
        return format(x, spec) + dot if np.isfinite(x) else str(x)

    return fmt


def _format_values(arr: np.ndarray[Any, Any]) -> str:
    summarize = arr.size > 1000
    sample = _edge_sample(arr) if summarize else arr
    kind = arr.dtype.kind
    if kind == "f":
        base = _float_formatter(sample.astype(np.float64))
        fmt = base
    elif kind == "c":
        re_f = _float_formatter(sample.real.astype(np.float64))
        im_f = _float_formatter(sample.imag.astype(np.float64))

        def fmt(x: Any) -> str:
            im = im_f(abs(x.imag))
            return f"{re_f(x.real)}{'-' if x.imag < 0 else '+'}{im}j"

    elif kind == "b":

        def fmt(x: Any) -> str:
            return "True" if x else "False"

    else:
        fmt = str
    # As PyTorch: nan/inf do not widen the columns.
    finite = sample[np.isfinite(sample)] if kind in "fc" else sample
    width = max((len(fmt(x)) for x in finite.flat), default=0)
    text = np.array2string(
        arr,
        max_line_width=80,
        separator=", ",
        prefix="tensor(",
        threshold=1000,
        edgeitems=3,
        formatter={"all": lambda x: fmt(x).rjust(width)},
    )
    # PyTorch marks an elided run in a row with " ..." (one space wider than NumPy).
    return text.replace(", ..., ", ",  ..., ") if summarize else text
