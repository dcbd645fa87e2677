"""The CUDA array interface and the thread's CUDA consumer stream.

Export: ``Tensor.__cuda_array_interface__`` (version 3) for CUDA tensors.
Import: :func:`from_cuda_array_interface` for CuPy arrays, PyTorch CUDA
tensors, Numba device arrays and anything else exposing
``__cuda_array_interface__``; the source object is the storage's owner (kept
alive with the stream its work is ordered on). Device memory is never read on
the host by this module; copies of CUDA memory (``clone``, ``copy_``,
``numpy(force=True)``, DLPack copies) are the CUDA driver's copy engine, in C
(``cdefs/interop/cuda.c``), ordered on :func:`cuda_stream`'s stream.
"""

from __future__ import annotations

import contextlib
import operator
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np

from bridge.core import dtypes as _dtypes
from bridge.core import strides as S
from bridge.core.native import _C
from bridge.core.owners import CudaArrayInterfaceOwner
from bridge.core.tensor import Tensor

__all__ = ["from_cuda_array_interface", "CudaArrayInterfaceOwner", "CudaStream", "cuda_stream",
           "current_cuda_stream"]  # fmt: skip


#: dtype -> its typestr: NumPy's ``dtype.str`` costs more than the rest of the
#: interface together, and cupy.asarray(bridge) asks for it on every call.
_TYPESTRS: dict[_dtypes.dtype, str] = {}


def _typestr(dt: _dtypes.dtype) -> str:
    s = _TYPESTRS.get(dt)
    if s is None:
        s = _TYPESTRS[dt] = str(dt.numpy_dtype.str)
    return s


def _cuda_array_interface(t: Tensor) -> dict[str, Any]:
    """The CUDA array interface, version 3: ``shape``, ``typestr``, ``descr``,
    ``data`` as ``(address, read_only)``, ``strides`` in bytes (None when
    C-contiguous) and ``stream``: the stream the memory's last work was
    ordered on, which the consumer waits for (None when nothing is pending;
    for memory that came through DLPack, the consumer stream bridge passed
    its producer, 1 by default). Device memory is never touched."""
    t._check_bounds(BufferError)
    typestr = _typestr(t.dtype)
    stream = t.untyped_storage()._stream or None
    isz = t.itemsize
    return {
        "version": 3,
        "shape": t.shape,
        "typestr": typestr,
        "descr": [("", typestr)],
        "data": (t.data_ptr(), _C.lend(t.is_readonly, _C.CONSUMER_FLAGGED) == _C.LEND_READONLY),
        "strides": None if t.is_contiguous() else tuple(s * isz for s in t.stride()),
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
    if device_id is None:  # the pointer's own device, not the current one
        device_id = _C.cuda_pointer_device(ptr) if ptr else -1
        if device_id < 0:
            device_id = _current_cuda_device()
    out: Tensor = _C.from_memory(ptr, dt, shape, tuple(int(st) for st in byte_strides),
                                 CudaArrayInterfaceOwner(obj, stream), bool(readonly), (2, device_id))  # fmt: skip
    # The producer's stream (None: nothing pending) is what later consumers wait for.
    out.untyped_storage()._stream = 0 if stream is None else int(stream)
    return out


class CudaStream:
    """A CUDA stream as bridge hands it out (:func:`cuda_stream`,
    :func:`current_cuda_stream`): ``handle`` is the stream as DLPack numbers
    streams (1 the legacy default stream, 2 the per-thread one, else a
    ``CUstream`` address; CUDA's own ``cudaStreamLegacy`` and
    ``cudaStreamPerThread`` are 1 and 2 too). It speaks cuda.core's CUDA
    stream protocol (``__cuda_stream__``), so tvm-ffi, cuda.core and torch take
    it as a stream, and is an integer to everything else (``__index__``,
    ``__int__``; equal to its handle), so it goes wherever a DLPack stream
    int goes."""

    __slots__ = ("handle",)

    handle: int

    def __init__(self, handle: int) -> None:
        """The stream of this handle (an int >= 1: ValueError otherwise; TypeError for a non-int)."""
        value = operator.index(handle)
        if value < 1:
            raise ValueError(f"invalid CUDA stream {value}: 1 is the legacy default stream, 2 the per-thread one")
        object.__setattr__(self, "handle", value)

    def __cuda_stream__(self) -> tuple[int, int]:
        """cuda.core's CUDA stream protocol, version 0: ``(0, handle)``."""
        return (0, self.handle)

    def __index__(self) -> int:
        return self.handle

    def __int__(self) -> int:
        return self.handle

    def __eq__(self, other: object) -> bool:
        if isinstance(other, CudaStream):
            return self.handle == other.handle
        if isinstance(other, int) and not isinstance(other, bool):
            return self.handle == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.handle)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("CudaStream is immutable")

    def __repr__(self) -> str:
        return f"bridge.CudaStream({self.handle:#x})"


def _stream_handle(stream: Any) -> int:
    if isinstance(stream, int) and not isinstance(stream, bool):
        handle = stream
    elif isinstance(stream, CudaStream):
        handle = stream.handle
    elif hasattr(stream, "__cuda_stream__"):  # cuda.core's protocol: torch, cuda.core, paddle
        handle = _C.cuda_stream_handle(stream)
    elif hasattr(stream, "cuda_stream"):  # torch.cuda.Stream of a torch without the protocol
        handle = int(stream.cuda_stream) or 1  # torch's default stream is 0: the legacy default
    elif hasattr(stream, "ptr"):  # cupy.cuda.Stream
        handle = int(stream.ptr) or 1
    else:
        raise TypeError(
            f"expected a CUDA stream (an int handle, an object with __cuda_stream__, a torch or CuPy "
            f"stream), got {type(stream).__name__}"
        )
    if handle <= 0:
        raise ValueError(f"invalid CUDA stream {handle}: 1 is the legacy default stream, 2 the per-thread one")
    return handle


@contextlib.contextmanager
def cuda_stream(stream: Any) -> Iterator[CudaStream]:
    """Within the block, this thread's CUDA imports are ordered on ``stream``
    (an int handle as DLPack numbers them, any object of cuda.core's CUDA
    stream protocol ``__cuda_stream__``: a ``torch.cuda.Stream``, a cuda.core
    ``Stream``, a :class:`CudaStream`; or a ``cupy.cuda.Stream``):
    ``from_dlpack`` passes it to producers, waits on it for exchange-API and
    Arrow producers, and records it as the stream the imported memory is
    ready on. Outside any block the stream is 1, the legacy default stream.
    Yields it as a :class:`CudaStream`. TypeError/ValueError for something
    that is not a stream (or a ``__cuda_stream__`` answer of another protocol
    version)."""
    handle = CudaStream(_stream_handle(stream))
    previous = _C.cuda_set_stream(handle.handle)
    try:
        yield handle
    finally:
        _C.cuda_set_stream(previous)


def current_cuda_stream() -> CudaStream:
    """This thread's CUDA consumer stream (see :func:`cuda_stream`), 1 unless
    set, as a :class:`CudaStream` (an int that speaks ``__cuda_stream__``)."""
    return CudaStream(_C.cuda_current_stream())


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


_C._register("cuda_array_interface", _cuda_array_interface)
