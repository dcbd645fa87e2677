"""The interop layer: one module per protocol (``dlpack``, ``numpy`` for NumPy
and buffers, ``cuda``, ``arrow``), each converting core <-> foreign object and
owning nothing else; they import the core and never each other. This package
module is their facade: importing it loads every protocol, and
:func:`asarray` and :func:`as_tensor` pick the best protocol an object offers."""

from __future__ import annotations

from typing import Any

import numpy as np

from bridge.core.device import device as _device
from bridge.core.dtypes import get_dtype, uint8
from bridge.core.factories import tensor
from bridge.core.native import _C
from bridge.core.storage import UntypedStorage
from bridge.core.tensor import Tensor
from bridge.interop import arrow, cuda, dlpack, numpy, processes

__all__ = ["asarray", "as_tensor", "arrow", "cuda", "dlpack", "numpy", "processes"]


def asarray(obj: Any, *, dtype: Any = None, device: Any = None, copy: bool | None = None) -> Tensor:
    """A tensor over ``obj``'s memory, zero-copy whenever ``obj`` exposes it.

    Order of preference: a bridge Tensor (a view of it), an
    :class:`UntypedStorage` (a 1-d uint8 view of its bytes), DLPack (``__dlpack__``
    or a bare capsule), a NumPy array (:func:`bridge.from_numpy`),
    ``__cuda_array_interface__`` (device memory, never touched), then anything
    NumPy can view without copying (``__array_interface__``,
    ``__array_struct__``, the buffer protocol, ``__array__``). Python scalars
    and nested sequences are copied (as ``bridge.tensor``).

    ``dtype`` different from the source's makes a converted copy; ``copy=True``
    always copies; ``copy=False`` raises ValueError when a copy cannot be
    avoided. A source NumPy rejects for its byte order is copied (byte-swapped)
    only with ``copy=True``. ``device`` (torch's meaning) must be where the
    memory already is, or the CPU for copied Python data: bridge never moves
    memory between devices (RuntimeError otherwise).
    """
    want = None if device is None else _device(device)
    shared = _share(obj, copy)
    if want is not None and want != (_device("cpu") if shared is None else shared[0].device):
        where = "the CPU (a copy of Python data)" if shared is None else str(shared[0].device)
        raise RuntimeError(f"asarray(device={want}): the memory is on {where} and bridge does not move it")
    if shared is None:
        if copy is False:
            raise ValueError(f"asarray(copy=False): {type(obj).__name__} exposes no memory to share")
        return tensor(obj, dtype=dtype)
    out, fresh = shared
    if dtype is not None and out.dtype is not get_dtype(dtype):
        if copy is False:
            raise ValueError(f"asarray(copy=False): converting {out.dtype} to {dtype} needs a copy")
        return out.to(dtype)
    if copy and not fresh:
        return out.clone()
    return out


def as_tensor(data: Any, dtype: Any = None, device: Any = None) -> Tensor:
    """``data`` as a tensor, sharing its memory when ``dtype`` and ``device``
    allow, as ``torch.as_tensor`` does with NumPy arrays.

    A bridge tensor of the requested dtype and device is returned itself;
    another library's tensor or array is viewed zero-copy through the best
    protocol it offers (DLPack, a NumPy array, ``__cuda_array_interface__``,
    the array interface or the buffer protocol: :func:`asarray`'s order), so a
    torch tensor, a jax or NumPy array shares its memory with the result.
    Another ``dtype`` gives a converted copy. Python scalars and sequences are
    copied (as ``bridge.tensor``). ``dtype`` and ``device`` may be any that
    :func:`bridge.get_dtype` and :class:`bridge.device` read.

    RuntimeError for a ``device`` other than the one the memory is on (bridge
    never moves memory between devices) and for Python data on a device other
    than the CPU; TypeError for data that is neither an array nor numbers.
    """
    if isinstance(data, Tensor):
        return data.to(dtype=dtype, device=device)
    shared = _share(data, None)
    if shared is None:
        if device is not None and _device(device).type != "cpu":
            raise RuntimeError(f"bridge allocates only CPU memory, got device={device!r}")
        return tensor(data, dtype=dtype)
    return shared[0].to(dtype=dtype, device=device)


def _share(obj: Any, copy: bool | None) -> tuple[Tensor, bool] | None:
    """(a tensor over obj's memory, whether it is already a private copy), or
    None when obj exposes no memory."""
    out: Tensor
    if isinstance(obj, UntypedStorage):
        # As torch.frombuffer / Tensor().set_(storage): its bytes, as uint8.
        out = _C.make_tensor(obj, uint8, (obj.nbytes(),), (1,), 0)
        return out, False
    if isinstance(obj, Tensor) or type(obj) is dlpack.CapsuleType:
        return dlpack.from_dlpack(obj), False
    if isinstance(obj, np.ndarray) or (not hasattr(obj, "__dlpack__") and _exposes_memory(obj)
                                       and not hasattr(obj, "__cuda_array_interface__")):  # fmt: skip
        arr = np.asarray(obj)
        if not arr.dtype.isnative and copy:  # byte-swapped: only a copy can fix it
            return numpy.from_numpy(arr.astype(arr.dtype.newbyteorder("="))), True
        return numpy.from_numpy(arr), False
    if hasattr(obj, "__dlpack__"):
        return dlpack.from_dlpack(obj), False
    if hasattr(obj, "__cuda_array_interface__"):
        return cuda.from_cuda_array_interface(obj), False
    return None


def _exposes_memory(obj: Any) -> bool:
    if isinstance(obj, (list, tuple, int, float, complex, bool)):
        return False
    if hasattr(obj, "__array_interface__") or hasattr(obj, "__array_struct__"):
        return True
    if hasattr(obj, "__array__"):
        return True
    try:
        memoryview(obj).release()
    except TypeError:
        return False
    return True
