"""NumPy, Python buffers and the CUDA array interface.

Export: ``Tensor.__array_struct__`` (C, the fast path NumPy prefers),
``Tensor.__array_interface__`` (version 3), ``Tensor.__buffer__`` /
``__release_buffer__`` (PEP 688, Python 3.12+) and ``Tensor.memoryview()``,
and ``Tensor.__cuda_array_interface__`` (version 3) for CUDA tensors.

Import: :func:`from_numpy` (C: NumPy's own DLPack export consumed in one
call), :func:`frombuffer` for any buffer-protocol object, and
:func:`from_cuda_array_interface` for CuPy arrays, PyTorch CUDA tensors,
Numba device arrays and anything else exposing ``__cuda_array_interface__``.
The source object is always the storage's owner, so it stays alive as long
as any view of it does; read-only sources give read-only tensors.
"""

from __future__ import annotations

import operator
import sys
from typing import Any

import numpy as np

from bridge import _capi, _dtypes
from bridge import _strides as S
from bridge import _tensor as _tensor_mod
from bridge._device import device
from bridge._storage import UntypedStorage
from bridge._tensor import Tensor

__all__ = ["from_numpy", "frombuffer", "from_cuda_array_interface", "CudaArrayInterfaceOwner"]


def _from_numpy_slow(a: Any) -> Tensor:
    """from_numpy for what NumPy's DLPack export refuses: ml_dtypes types
    (imported zero-copy) and layouts bridge cannot express (clear errors)."""
    if not isinstance(a, np.ndarray):
        raise TypeError(f"from_numpy() expects a numpy.ndarray, got {type(a).__name__}")
    dt = _dtypes.from_numpy_dtype(a.dtype)  # TypeError / ValueError with the reason
    return _wrap_host_array(a, dt)


def _wrap_host_array(a: np.ndarray[Any, Any], dt: _dtypes.dtype) -> Tensor:
    """A tensor over a NumPy array's memory, with the array as the owner."""
    ptr = a.__array_interface__["data"][0]
    return Tensor._over_memory(
        ptr, dt, tuple(a.shape), tuple(a.strides), a, readonly=not a.flags.writeable
    )


_array_struct, from_numpy = _capi.setup_numpy(Tensor, np.ndarray, _from_numpy_slow)


def _typestr(dt: _dtypes.dtype) -> str:
    return str(dt.numpy_dtype.str)


def _byte_strides(t: Tensor) -> tuple[int, ...] | None:
    if t.is_contiguous():
        return None
    isz = t._dtype.itemsize
    return tuple(s * isz for s in t._strides)


def _array_interface(self: Tensor) -> dict[str, Any]:
    """NumPy's array interface, version 3: ``shape``, ``typestr``, ``descr``,
    ``strides`` (bytes; None when C-contiguous) and ``data`` as
    ``(address, read_only)``. Host tensors of NumPy-native dtypes only
    (AttributeError otherwise, so NumPy falls back to ``__array__``)."""
    dt = self._dtype
    if not self._storage._device.is_host_accessible or dt._np_name.startswith("ml_dtypes."):
        raise AttributeError(
            "__array_interface__ is only defined for host tensors of NumPy-native dtypes"
        )
    self._check_bounds(BufferError)
    typestr = _typestr(dt)
    return {
        "version": 3,
        "shape": self._shape,
        "typestr": typestr,
        "descr": [("", typestr)],
        "strides": _byte_strides(self),
        "data": (self.data_ptr(), self._storage._readonly),
    }


def _memoryview(self: Tensor) -> memoryview:
    """A memoryview of the tensor's memory with its format, shape, strides and
    read-only bit (the PEP 688 ``__buffer__`` for Python < 3.12). BufferError
    for memory the host cannot read and dtypes without a PEP 3118 format
    (bfloat16, float8)."""
    if not self._storage._device.is_host_accessible:
        raise BufferError(f"a {self.device} tensor has no host buffer")
    self._check_bounds(BufferError)
    try:
        view: memoryview = memoryview(self._np_view())  # type: ignore[arg-type]
        return view
    except (TypeError, ValueError) as e:
        raise BufferError(f"{self._dtype} has no buffer-protocol format: {e}") from None


def _buffer(self: Tensor, flags: int) -> memoryview:
    """PEP 688 export: the memory as a memoryview (see :meth:`Tensor.memoryview`).
    BufferError when a writable buffer is asked of a read-only tensor."""
    if flags & 0x1 and self._storage._readonly:  # PyBUF_WRITABLE
        raise BufferError("a writable buffer was requested from a read-only tensor")
    return _memoryview(self)


def _release_buffer(self: Tensor, view: memoryview) -> None:
    """PEP 688: the consumer is done with the view from ``__buffer__``."""
    view.release()


def frombuffer(buffer: Any, *, dtype: Any, count: int = -1, offset: int = 0) -> Tensor:
    """A 1-d tensor over ``count`` elements of ``dtype`` in ``buffer``, starting
    ``offset`` bytes in (``torch.frombuffer``), sharing its memory.

    Any buffer-protocol object works (bytes, bytearray, memoryview, mmap,
    array.array, pyarrow.Buffer, ctypes arrays); the buffer stays alive while
    the tensor does, and read-only buffers give read-only tensors. A strided
    (non-contiguous) buffer gives a tensor with the buffer's own shape and
    strides (``count`` and ``offset`` must then be left out, and ``dtype``
    must have the buffer's item size). Raises TypeError for non-buffers and
    ValueError for sizes, offsets and strides that do not fit.
    """
    dt = _dtypes.get_dtype(dtype)
    try:
        mv = memoryview(buffer)
    except TypeError:
        raise TypeError(
            f"frombuffer() needs an object with the buffer protocol, got {type(buffer).__name__}"
        ) from None
    count, offset = operator.index(count), operator.index(offset)
    if not mv.c_contiguous:
        if count != -1 or offset != 0:
            raise ValueError("count and offset apply to contiguous buffers only")
        if mv.itemsize != dt.itemsize:
            raise ValueError(
                f"a strided buffer of {mv.itemsize}-byte items cannot be viewed as {dt} "
                f"({dt.itemsize} bytes)"
            )
        arr = np.asarray(mv)
        if arr.dtype != dt.bit_numpy_dtype and arr.dtype.itemsize == dt.itemsize:
            arr = arr.view(dt.bit_numpy_dtype)
        return _wrap_host_array(arr, dt)
    total = mv.nbytes
    if not 0 <= offset <= total:
        raise ValueError(f"offset {offset} is outside a buffer of {total} bytes")
    avail = total - offset
    if count == -1:
        if avail % dt.itemsize:
            raise ValueError(
                f"buffer length after offset ({avail} bytes) is not a multiple of the item "
                f"size of {dt} ({dt.itemsize} bytes)"
            )
        count = avail // dt.itemsize
    elif count < 0:
        raise ValueError(f"count must be -1 or non-negative, got {count}")
    elif count * dt.itemsize > avail:
        raise ValueError(
            f"{count} elements of {dt} need {count * dt.itemsize} bytes but only {avail} are "
            f"available after offset {offset}"
        )
    storage = UntypedStorage.from_buffer(buffer, offset=offset, count=count * dt.itemsize)
    return Tensor._make(storage, dt, (count,), (1,), 0)


# ------------------------------------------------------ CUDA array interface


class CudaArrayInterfaceOwner:
    """Owner of device memory imported through ``__cuda_array_interface__``:
    the source object (kept alive) and the stream its work is ordered on
    (None: no synchronisation needed), which bridge passes on when it
    re-exports the memory."""

    __slots__ = ("source", "stream")

    def __init__(self, source: Any, stream: int | None) -> None:
        self.source = source
        self.stream = stream

    def __repr__(self) -> str:
        return f"CudaArrayInterfaceOwner({type(self.source).__name__}, stream={self.stream})"


def _cuda_array_interface(self: Tensor) -> dict[str, Any]:
    """The CUDA array interface, version 3, for CUDA tensors (AttributeError
    otherwise): ``shape``, ``typestr``, ``descr``, ``data`` as
    ``(address, read_only)``, ``strides`` in bytes (None when C-contiguous) and
    ``stream``: the stream the producer of this memory ordered its work on
    (None when no synchronisation is needed; 1, the legacy default stream,
    for memory that came through DLPack, whose producer synchronised with
    it). Device memory is never touched."""
    st = self._storage
    if st._device.type != "cuda":
        raise AttributeError("__cuda_array_interface__ is only defined for CUDA tensors")
    typestr = _typestr(self._dtype)
    owner = st._owner
    stream = owner.stream if isinstance(owner, CudaArrayInterfaceOwner) else 1
    return {
        "version": 3,
        "shape": self._shape,
        "typestr": typestr,
        "descr": [("", typestr)],
        "data": (self.data_ptr(), st._readonly),
        "strides": _byte_strides(self),
        "stream": stream,
    }


def from_cuda_array_interface(obj: Any, *, device_id: int | None = None) -> Tensor:
    """A CUDA tensor over the device memory ``obj`` describes with
    ``__cuda_array_interface__`` (versions 0-3), keeping ``obj`` alive. The
    memory is never read on the host: shapes, strides and the pointer are
    taken as given. ``device_id`` names the GPU (default: asked of CuPy or
    torch when one is importable, else 0).

    Errors: TypeError when ``obj`` has no interface or its typestr has no
    bridge dtype; ValueError for a malformed interface (missing keys, stream
    0, strides that are not whole elements, a mask, non-native byte order).
    """
    try:
        cai = obj.__cuda_array_interface__
    except AttributeError:
        raise TypeError(f"{type(obj).__name__} has no __cuda_array_interface__") from None
    if not isinstance(cai, dict):
        raise ValueError("__cuda_array_interface__ must be a dict")
    try:
        shape = tuple(int(s) for s in cai["shape"])
        typestr = cai["typestr"]
        ptr, readonly = cai["data"]
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"malformed __cuda_array_interface__: {e!r}") from None
    if cai.get("mask") is not None:
        raise ValueError("__cuda_array_interface__ with a mask is not supported")
    stream = cai.get("stream")
    if stream == 0:
        raise ValueError("__cuda_array_interface__ stream 0 is disallowed by the specification")
    np_dt = np.dtype(typestr)
    if not np_dt.isnative:
        raise ValueError(f"typestr {typestr!r} is not in native byte order")
    dt = _dtypes.from_numpy_dtype(np_dt)
    byte_strides = cai.get("strides")
    if byte_strides is None:
        byte_strides = tuple(st * dt.itemsize for st in S.contiguous_strides(shape))
    ptr = int(ptr or 0)
    if ptr == 0 and S.prod(shape):
        raise ValueError("__cuda_array_interface__ has a NULL pointer for a non-empty array")
    dev = device("cuda", _current_cuda_device() if device_id is None else device_id)
    return Tensor._over_memory(
        ptr, dt, shape, tuple(int(st) for st in byte_strides),
        CudaArrayInterfaceOwner(obj, stream), readonly=bool(readonly), dev=dev,
    )  # fmt: skip


def _current_cuda_device() -> int:
    for name in ("cupy", "torch"):
        mod = sys.modules.get(name)
        if mod is None:
            continue
        try:
            if name == "cupy":
                return int(mod.cuda.runtime.getDevice())
            if mod.cuda.is_available():
                return int(mod.cuda.current_device())
        except Exception:  # no usable CUDA runtime: fall through
            continue
    return 0


def _cupy() -> Any:
    try:
        import cupy
    except ImportError:
        raise RuntimeError(
            "copying CUDA memory needs CuPy (`pip install cupy-cuda12x`); bridge never reads "
            "device memory on the host"
        ) from None
    return cupy


def _cuda_clone(t: Tensor, strides: tuple[int, ...]) -> Tensor:
    """clone() of a CUDA tensor: CuPy copies on the tensor's device into new
    memory laid out with ``strides`` (a dense layout of ``t.shape``)."""
    cupy = _cupy()
    with cupy.cuda.Device(t.device.index or 0):
        src = cupy.asarray(t)  # through __cuda_array_interface__, no copy
        isz = t._dtype.itemsize
        dst = cupy.ndarray(
            t.shape,
            src.dtype,
            memptr=cupy.cuda.alloc(max(t.numel(), 1) * isz),
            strides=tuple(st * isz for st in strides),
        )
        dst[...] = src
    return from_cuda_array_interface(dst, device_id=t.device.index or 0)


def _cuda_copy(dst: Tensor, src: Any) -> None:
    """copy_() into or out of CUDA memory, through CuPy (broadcasting and casting
    as NumPy does; host sources are uploaded)."""
    cupy = _cupy()
    dev = dst.device if dst.is_cuda else src.device
    with cupy.cuda.Device(dev.index or 0):
        value = cupy.asarray(src) if isinstance(src, Tensor) else cupy.asarray(np.asarray(src))
        if dst.is_cuda:
            cupy.asarray(dst)[...] = value
        else:
            np.copyto(dst.numpy(), cupy.asnumpy(value), casting="unsafe")


_tensor_mod.DEVICE_KERNELS["cuda"] = {"clone": _cuda_clone, "copy_": _cuda_copy}

_core_numpy = Tensor.numpy


def _numpy(self: Tensor, *, force: bool = False) -> np.ndarray[Any, Any]:
    """A NumPy array sharing this tensor's memory (read-only when the tensor is).

    Host tensors of NumPy-native dtypes go through ``__array_struct__`` (C);
    bfloat16 and float8 need ml_dtypes (TypeError naming it when missing).
    ``force=True`` copies device memory to the host (through the device's copy
    kernel, CuPy for CUDA); without it, device tensors raise TypeError."""
    if self._storage._dldev[0] == 1 and not self._dtype._np_name.startswith("ml_dtypes."):
        arr: np.ndarray[Any, Any] = np.asarray(self)
        return arr
    return _core_numpy(self, force=force)


Tensor.numpy = _numpy  # type: ignore[method-assign]
Tensor.__array_struct__ = _array_struct
Tensor.__array_interface__ = property(_array_interface)
Tensor.__cuda_array_interface__ = property(_cuda_array_interface)
Tensor.memoryview = _memoryview
Tensor.__buffer__ = _buffer
Tensor.__release_buffer__ = _release_buffer
