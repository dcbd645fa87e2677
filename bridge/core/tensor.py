"""Tensor: a typed, strided view of an UntypedStorage.

A tensor is ``(storage, dtype, shape, strides, storage_offset)`` with strides and
offset in elements, as in PyTorch, held in C by ``bridge._C.TensorBase``; this
class adds the methods written in Python. The everyday view ops, ``item``,
``tolist``, scalar stores and dense clones are C methods of the base; what they
do not cover comes back here (the ``_*_slow`` methods, registered as up-calls). Views computed here use
the pure functions of :mod:`bridge.core.strides` and the one C constructor.
Copies of host memory go through the one strided-copy kernel in C
(``_C.copy_into``, ``cdefs/core/copy.c``); NumPy converts only what C leaves to
it (casts to and from float8/6/4, complex to real, floats outside an integer
type's range, and values that are not tensors). Copies of CUDA memory are the
CUDA driver's copy engine (``_C.cuda_clone``, ``_C.cuda_copy``, in
``cdefs/interop/cuda.c``).
"""

from __future__ import annotations

import builtins
import operator
from collections.abc import Iterator, Sequence
from typing import Any, SupportsIndex, overload

import numpy as np

from bridge.core import dtypes as _dtypes
from bridge.core import serialize as _serialize
from bridge.core import strides as S
from bridge.core import tensor_ops as _ops
from bridge.core.device import device, is_device_like
from bridge.core.dtypes import DType, dtype
from bridge.core.layout import (
    _copy_from_array,
    _empty,
    _from_numpy_copy,
    _layout_strides,
    _numpy_copyto,
    channels_last,
    channels_last_3d,
    contiguous_format,
    memory_format,
    preserve_format,
)
from bridge.core.native import _C, upcall
from bridge.core.printing import format_tensor
from bridge.core.storage import UntypedStorage

__all__ = [
    "Tensor",
    "memory_format",
    "contiguous_format",
    "channels_last",
    "channels_last_3d",
    "preserve_format",
]

# The C base under the module path its type names (help() shows no bridge._C).
TensorBase = _C.TensorBase

_Bool = builtins.bool
_Int = builtins.int
_Float = builtins.float
_DType = dtype  # inside Tensor, `dtype` names the property


def _is_advanced_key(k: Any) -> _Bool:
    return isinstance(k, (list, np.ndarray, Tensor, _Bool, np.bool_))


class Tensor(_C.TensorBase):
    """A strided view of an :class:`UntypedStorage` with an element :class:`dtype`.

    Make tensors with the factories (``bridge.tensor``, ``empty``, ``zeros``,
    ``arange``, ...) or the interop functions; the constructor is private.
    Every view shares the storage, so a write through one view is seen by all.
    Writing through a read-only tensor (memory borrowed read-only) raises
    ValueError; reading memory that is not host-accessible raises RuntimeError.
    """

    __slots__ = ()

    # ------------------------------------------------------ views (Python)

    def _derived(self, shape: Sequence[_Int], strides: Sequence[_Int], offset: _Int,
                 dt: dtype | None = None) -> Tensor:  # fmt: skip
        """A view computed from this one (RuntimeError if it leaves the storage)."""
        out: Tensor = _C.make_tensor(self._storage, self._dtype if dt is None else dt,
                                     tuple(shape), tuple(strides), offset, True)  # fmt: skip
        return out

    def _getitem_slow(self, key: Any) -> Tensor:
        """Indexing the C path does not cover: advanced keys (a copy, NumPy's semantics)."""
        parts = key if type(key) is tuple else (key,)
        if any(_is_advanced_key(k) for k in parts):
            picked = self._np_view()[_numpy_key(parts)]
            return _from_numpy_copy(np.asarray(picked), self._dtype)
        shape, strides, offset = S.apply_index(self._shape, self._strides, self._offset, key)
        return self._derived(shape, strides, offset)

    def _setitem_slow(self, key: Any, value: Any) -> None:
        self._check_writable()
        parts = key if isinstance(key, tuple) else (key,)
        if any(_is_advanced_key(k) for k in parts):
            target = self._np_view()
            target[_numpy_key(parts)] = _as_numpy_operand(value)
            return
        shape, strides, offset = S.apply_index(self._shape, self._strides, self._offset, key)
        self._derived(shape, strides, offset).copy_(value)

    def __iter__(self) -> Iterator[Tensor]:
        if not self.ndim:
            raise TypeError("iteration over a 0-d tensor")
        for i in range(self.shape[0]):
            yield self.select(0, i)

    def _view_dtype(self, arg: Any) -> Tensor:
        """``view(dtype)``: the same bytes as another element type."""
        new, old = _dtypes.get_dtype(arg), self._dtype
        shape, strides, offset = self._shape, self._strides, self._offset
        if new.itemsize == old.itemsize:
            return self._derived(shape, strides, offset, new)
        if not shape:
            raise ValueError(
                f"cannot view a 0-d {old} tensor as {new}: the element sizes differ "
                f"({old.itemsize} vs {new.itemsize} bytes)"
            )
        if strides[-1] != 1 and shape[-1] != 1:
            raise ValueError(f"viewing {old} as {new} needs the last dimension to have stride 1, got strides {strides}")
        if new.itemsize < old.itemsize:
            r = old.itemsize // new.itemsize
            return self._derived((*shape[:-1], shape[-1] * r), (*(s * r for s in strides[:-1]), 1),
                                 offset * r, new)  # fmt: skip
        r = new.itemsize // old.itemsize
        if shape[-1] % r:
            raise ValueError(f"viewing {old} as {new}: the last dimension ({shape[-1]}) must be a multiple of {r}")
        if offset % r:
            raise ValueError(f"viewing {old} as {new}: the storage offset ({offset}) must be a multiple of {r}")
        if any(s % r for s in strides[:-1]):
            raise ValueError(f"viewing {old} as {new}: every stride but the last must be a multiple of {r}, got {strides}")
        return self._derived((*shape[:-1], shape[-1] // r), (*(s // r for s in strides[:-1]), 1),
                             offset // r, new)  # fmt: skip

    def _reshape_copy(self, shape: tuple[_Int, ...]) -> Tensor:
        """``reshape`` when no view exists: a contiguous copy, viewed."""
        out: Tensor = self.contiguous().view(shape)
        return out

    def _is_contiguous_slow(self, memory_format: memory_format) -> _Bool:
        if memory_format is contiguous_format:
            return S.is_contiguous(self._shape, self._strides)
        if memory_format is channels_last:
            return self.ndim == 4 and S.is_channels_last(self._shape, self._strides)
        if memory_format is channels_last_3d:
            return self.ndim == 5 and S.is_channels_last(self._shape, self._strides)
        raise ValueError(f"is_contiguous() does not take {memory_format!r}")

    def is_non_overlapping_and_dense(self) -> builtins.bool:
        """Whether the elements fill a contiguous block exactly once, in some dim order."""
        return S.is_non_overlapping_and_dense(self._shape, self._strides)

    # The torch API written as functions in bridge.core.tensor_ops, bound here.
    movedim = moveaxis = _ops.movedim
    unflatten = _ops.unflatten
    unfold = _ops.unfold
    diagonal = _ops.diagonal
    split = _ops.split
    chunk = _ops.chunk
    unbind = _ops.unbind
    tensor_split = _ops.tensor_split
    ravel = _ops.ravel
    flip = _ops.flip
    as_strided_ = _ops.as_strided_
    squeeze_ = _ops.squeeze_
    unsqueeze_ = _ops.unsqueeze_
    t_ = _ops.t_
    transpose_ = _ops.transpose_
    swapdims_ = swapaxes_ = _ops.swapdims_
    resize_ = _ops.resize_
    resize_as_ = _ops.resize_as_
    new_empty = _ops.new_empty
    new_zeros = _ops.new_zeros
    new_ones = _ops.new_ones
    new_full = _ops.new_full
    new_tensor = _ops.new_tensor
    new_empty_strided = _ops.new_empty_strided
    is_floating_point = _ops.is_floating_point
    is_complex = _ops.is_complex
    is_signed = _ops.is_signed
    get_device = _ops.get_device
    is_pinned = _ops.is_pinned
    is_set_to = _ops.is_set_to
    dim_order = _ops.dim_order
    equal = _ops.equal

    @property
    def real(self) -> Tensor:
        """The real parts of a complex tensor (a view); a real tensor itself."""
        return _ops.real(self)

    @property
    def imag(self) -> Tensor:
        """The imaginary parts of a complex tensor (a view); TypeError for a real one."""
        return _ops.imag(self)

    def as_strided(self, size: Any, stride: Any, storage_offset: builtins.int | None = None) -> Tensor:
        """A view with arbitrary geometry over the same storage; ValueError if any
        element would fall outside the storage."""
        off = self._offset if storage_offset is None else operator.index(storage_offset)
        out: Tensor = _C.make_tensor(self._storage, self._dtype, S.as_shape((size,), "size"),
                                     S.as_shape((stride,), "stride"), off)  # fmt: skip
        return out

    def set_(self, source: Any = None, storage_offset: builtins.int = 0, size: Any = None, stride: Any = None) -> Tensor:
        """Repoint this tensor (in place) at ``source``: a storage (with the given
        offset, size and stride; default: all of it as 1-d), a tensor (its
        storage and geometry) or None (an empty storage). ValueError when the
        geometry leaves the storage."""
        if source is None:
            source = UntypedStorage(0)
        if isinstance(source, Tensor):
            if size is None:
                self._set_geometry(source._storage, source._dtype, source._shape, source._strides, source._offset)
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
        if len(strides) != len(shape):
            raise ValueError(f"size {shape} and stride {strides} have different lengths")
        self._set_geometry(source, self._dtype, shape, strides, off)
        return self

    # -------------------------------------------------------------- copies

    def _check_writable(self) -> None:
        if self.is_readonly:
            raise ValueError("cannot write to a read-only tensor (its memory was borrowed read-only)")

    def _np_view(self, bits: _Bool = False) -> np.ndarray[Any, Any]:
        """A NumPy array over exactly this tensor's elements (no copy), through the
        C buffer export of the tensor (or of its bits: ``bits=True`` uses an
        unsigned type of the same size, for copies that must not interpret
        values and work without ml_dtypes). RuntimeError for memory the host
        cannot read or bytes the storage no longer has."""
        dt = self._dtype
        if not self._storage._host_accessible:
            raise RuntimeError(f"storage on {self.device} cannot be read or written from the host")
        self._check_bounds(RuntimeError)
        if bits or dt.buffer_format is None:
            raw = np.asarray(self._derived(self._shape, self._strides, self._offset, _dtypes._BITS[dt.itemsize]))
            return raw if bits else raw.view(dt.numpy_dtype)
        arr: np.ndarray[Any, Any] = np.asarray(self)
        return arr

    def _clone_slow(self, memory_format: memory_format | None = None) -> Tensor:
        """clone() of what the C method does not take itself: other memory
        formats and preserve_format of non-dense tensors (the copy kernel, into
        strides worked out here), CUDA memory (the CUDA driver's copy engine,
        ``_C.cuda_clone``). None is preserve_format, as in torch."""
        if memory_format is None:
            memory_format = preserve_format
        strides = _layout_strides(self._shape, self._strides, memory_format)
        if not self._storage._host_accessible:
            _check_copyable(self, "clone")
            copied: Tensor = _C.cuda_clone(self, strides)
            return copied
        out = _empty(self._shape, self._dtype, strides)
        _C.copy_into(out, self)  # same dtype: C always does it
        return out

    def contiguous(self, memory_format: memory_format = contiguous_format) -> Tensor:
        """This tensor if it is already contiguous in ``memory_format``, else a copy that is."""
        if memory_format is preserve_format:
            raise ValueError("preserve_format is not supported by contiguous(); use clone()")
        if self.is_contiguous(memory_format):
            return self
        return self.clone(memory_format=memory_format)

    def copy_(self, src: Any, non_blocking: builtins.bool = False) -> Tensor:
        """Copy ``src`` (tensor, array, nested list or scalar; broadcast to this
        shape and cast to this dtype as PyTorch casts) into this tensor in place.

        When either side is CUDA memory the CUDA driver's copy engine moves the
        bytes (ordered on :func:`bridge.cuda_stream`'s stream; complete on
        return when host memory is involved); a dtype cast, or a value that is
        not a tensor, goes through host memory, where NumPy casts. RuntimeError
        without a CUDA driver, when a driver call fails, and for other devices
        the host cannot read."""
        self._check_writable()
        if not self._storage._host_accessible or (isinstance(src, Tensor) and not src._storage._host_accessible):
            self._device_copy_(src)
            return self
        if isinstance(src, Tensor):
            if _C.copy_into(self, src):
                return self
            # a cast C leaves to NumPy, which reads the source while it writes:
            # a source sharing memory with this tensor is copied first
            if _shares_memory(self, src):
                src = src.clone()
            _numpy_copyto(self, src._np_view())
            return self
        value = np.asarray(src)  # a NumPy array, nested lists or a scalar
        _broadcast_for(value, self._shape)  # torch's error for shapes that do not broadcast
        _copy_from_array(self, value)
        return self

    def _device_copy_(self, src: Any) -> None:
        """copy_() where this tensor or ``src`` is device memory: one dtype is
        one engine copy (``_C.cuda_copy`` broadcasts); a cast or a Python value
        comes through host memory."""
        _check_copyable(self, "copy_")
        if isinstance(src, Tensor):
            _check_copyable(src, "copy_")
            if src._dtype is self._dtype:
                _C.cuda_copy(self, src)
                return
            if not src._storage._host_accessible:
                host = _empty(src._shape, src._dtype)
                _C.cuda_copy(host, src)
                src = host
        if self._storage._host_accessible:
            self.copy_(src)
            return
        staged = _empty(self._shape, self._dtype)
        staged.copy_(src)
        _C.cuda_copy(self, staged)

    def fill_(self, value: Any) -> Tensor:
        """Set every element to the scalar ``value`` in place."""
        self._check_writable()
        arr = np.asarray(value.item() if isinstance(value, Tensor) else value)
        if arr.ndim:
            raise ValueError(f"fill_() takes a scalar, got shape {arr.shape}")
        _numpy_copyto(self, arr)
        return self

    def zero_(self) -> Tensor:
        """Set every element to zero in place."""
        self._check_writable()
        self._np_view(bits=True)[...] = 0
        return self

    def to(self, *args: Any, **kwargs: Any) -> Tensor:
        """``to(dtype)``, ``to(device)``, ``to(device, dtype)`` or ``to(other)``:
        this tensor when nothing changes and ``copy`` is false, else a converted
        copy. Only host memory can be converted (RuntimeError otherwise).
        Dtypes and devices may be any that :func:`bridge.get_dtype` and
        :class:`bridge.device` read (torch's, NumPy's, ``float``, objects with
        ``__dlpack_data_type__`` / ``__dlpack_device__``)."""
        dt: dtype | None = kwargs.pop("dtype", None)
        dev: Any = kwargs.pop("device", None)
        copy = _Bool(kwargs.pop("copy", False))
        kwargs.pop("non_blocking", None)
        if kwargs:
            raise TypeError(f"to() got unexpected keyword arguments {sorted(kwargs)}")
        for a in args:
            if isinstance(a, Tensor):
                dt, dev = a._dtype, a.device
            elif is_device_like(a) or (
                type(a) is str and a.strip().removeprefix("torch.").removeprefix("bridge.") not in _dtypes._BY_NAME
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
        if not _C.copy_into(out, self):  # a cast C leaves to NumPy
            np.copyto(out._np_view(), self._np_view(), casting="unsafe")
        return out

    @overload
    def type(self, dtype: None = None) -> str: ...
    @overload
    def type(self, dtype: DType | str) -> Tensor: ...
    def type(self, dtype: DType | str | None = None) -> str | Tensor:
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
        if arr.dtype.kind == "V" or arr.dtype.type.__module__.startswith("ml_dtypes") or (
            type(arr.dtype).__module__.startswith("ml_dtypes")
        ):
            arr = arr.astype(np.float32)
        return arr

    def _tolist_slow(self) -> Any:
        return self._values().tolist()

    def _item_slow(self) -> Any:
        return self._values().reshape(()).item()

    def __bool__(self) -> builtins.bool:
        n = self.numel()
        if n != 1:
            raise ValueError(f"Boolean value of Tensor with {n} elements is ambiguous")
        return _Bool(self.item())

    def _real_item(self, what: str) -> _Int | _Float:
        value = self.item()
        if isinstance(value, complex):
            raise TypeError(f"can't convert complex to {what}")
        return value

    def __int__(self) -> builtins.int:
        return _Int(self._real_item("int"))

    def __float__(self) -> builtins.float:
        return _Float(self._real_item("float"))

    def __complex__(self) -> complex:
        return complex(self.item())

    def __index__(self) -> builtins.int:
        if not self._dtype.is_integral or self.numel() != 1:
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return _Int(self._real_item("int"))

    def numpy(self, *, force: builtins.bool = False) -> np.ndarray[Any, Any]:
        """A NumPy array sharing this tensor's memory (read-only when the tensor is),
        through the tensor's buffer export.

        bfloat16 and float8 need ml_dtypes (TypeError naming it when missing).
        ``force=True`` returns a copy for memory the host cannot read directly
        (CUDA memory, through the CUDA driver's copy engine; RuntimeError for
        other devices). Raises TypeError for non-host tensors without
        ``force``, and BufferError for a view that reaches past its storage."""
        if not self._storage._host_accessible:
            if force:
                _check_copyable(self, "numpy")
                host = _empty(self._shape, self._dtype)
                _C.cuda_copy(host, self)
                return host._np_view()
            raise TypeError(
                f"can't convert {self.device} device type tensor to numpy; its memory is not "
                "host-accessible (numpy(force=True) copies it)"
            )
        if self._dtype.buffer_format is not None:
            arr: np.ndarray[Any, Any] = np.asarray(self)
            return arr
        self._check_bounds(BufferError)
        return self._np_view()

    def memoryview(self) -> memoryview:
        """A memoryview of the tensor's memory with its format, shape, strides and
        read-only bit (the buffer protocol, implemented in C). BufferError for
        memory the host cannot read and dtypes without a PEP 3118 format
        (bfloat16, float8)."""
        return memoryview(self)  # type: ignore[arg-type]

    def __array__(self, dtype: Any = None, copy: builtins.bool | None = None) -> np.ndarray[Any, Any]:
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

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        """The CUDA array interface, version 3, of CUDA tensors (AttributeError
        otherwise); provided by bridge.interop.cuda."""
        provider = upcall("cuda_array_interface")
        if provider is None or not self.is_cuda:
            raise AttributeError("__cuda_array_interface__ is only defined for CUDA tensors")
        out: dict[str, Any] = provider(self)
        return out

    def __jax_array__(self) -> Any:
        """JAX's array protocol: ``jnp.asarray(t)``, a ``jax.Array``'s operators
        and the ``jax.numpy`` functions that convert before tracing take the
        tensor as a ``jax.Array``, sharing its memory through DLPack where jax
        can (writable, a permutation of a compact layout, a dtype jax's DLPack
        takes), else a copy; provided by bridge.interop.jax_array. jax's own
        rules apply to the result (64-bit types become 32-bit unless
        ``jax_enable_x64``); jitted functions (``jax.jit``, ``jnp.sin``) refuse
        the protocol (jax's rule): pass ``jnp.asarray(t)``."""
        convert = upcall("jax_array")
        if convert is None:
            raise TypeError("bridge's jax interop is not loaded (import bridge)")
        return convert(self)

    # ------------------------------------- pickling, copies, shared memory

    def __reduce_ex__(self, protocol: SupportsIndex) -> tuple[Any, ...]:
        """Pickle support (:mod:`bridge.core.serialize`): the storage and the geometry."""
        return _serialize.reduce_tensor(self)

    def __deepcopy__(self, memo: dict[builtins.int, Any]) -> Tensor:
        return _serialize.deepcopy_tensor(self, memo)

    def __dask_tokenize__(self) -> tuple[Any, ...]:
        return _serialize.tokenize_tensor(self)

    def share_memory_(self) -> Tensor:
        """Move the storage into shared memory in place (``torch.Tensor.share_memory_``):
        ``multiprocessing`` then sends views of it, not copies. A no-op when
        already shared and for CUDA tensors; ValueError for memory bridge did
        not allocate (see ``UntypedStorage.share_memory_``)."""
        if self.device.is_host_accessible:
            self.untyped_storage().share_memory_()
        return self

    def is_shared(self) -> builtins.bool:
        """Whether the storage is in shared memory (a shared file mapping counts)."""
        return self.untyped_storage().is_shared()

    def __repr__(self) -> str:
        return format_tensor(self)


_C._register("tensor_class", Tensor)
# What the C fast paths fall back on (called as fn(tensor, *args)).
for _name in ("getitem_slow", "setitem_slow", "item_slow", "tolist_slow", "clone_slow",
              "is_contiguous_slow", "reshape_copy", "view_dtype"):  # fmt: skip
    _C._register(_name, getattr(Tensor, "_" + _name))


# ---------------------------------------------------------------- helpers


def _check_copyable(t: Tensor, op: str) -> None:
    """RuntimeError unless bridge can copy ``t``'s memory: host memory, or CUDA
    memory through the CUDA driver's copy engine (bridge launches no kernels
    and knows no other device's copy functions)."""
    if not t._storage._host_accessible and not t.is_cuda:
        raise RuntimeError(
            f"{op}() of {t.device} memory is not supported: bridge copies device memory only on CUDA "
            "(through the CUDA driver's copy engine) and never reads device memory on the host"
        )


def _shares_memory(a: Tensor, b: Tensor) -> _Bool:
    """Whether the storages of two tensors have bytes in common."""
    sa, sb = a.untyped_storage(), b.untyped_storage()
    pa, pb = sa.data_ptr(), sb.data_ptr()
    return pa < pb + sb.nbytes() and pb < pa + sa.nbytes()


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
