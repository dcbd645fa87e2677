"""``bridge.asarray``: one entry point that picks the best protocol an object offers."""

from __future__ import annotations

from typing import Any

import numpy as np

from bridge import array_interface, dlpack
from bridge._dtypes import get_dtype, uint8
from bridge._factories import tensor
from bridge._storage import UntypedStorage
from bridge._tensor import Tensor

__all__ = ["asarray"]


def asarray(obj: Any, *, dtype: Any = None, copy: bool | None = None) -> Tensor:
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
    only with ``copy=True``.
    """
    out = _share(obj, copy)
    if out is None:
        if copy is False:
            raise ValueError(f"asarray(copy=False): {type(obj).__name__} exposes no memory to share")
        return tensor(obj, dtype=dtype)
    if dtype is not None and out.dtype is not get_dtype(dtype):
        if copy is False:
            raise ValueError(f"asarray(copy=False): converting {out.dtype} to {dtype} needs a copy")
        return out.to(dtype)
    if copy and out.untyped_storage().owner is not None and not _fresh(out, obj):
        return out.clone()
    return out


def _fresh(out: Tensor, obj: Any) -> bool:
    # True when _share already made a private copy (so copy=True needs no second one).
    return getattr(out, "_asarray_fresh", False) is True


def _share(obj: Any, copy: bool | None) -> Tensor | None:
    out: Tensor
    if isinstance(obj, UntypedStorage):
        # As torch.frombuffer / Tensor().set_(storage): its bytes, as uint8.
        return Tensor._make(obj, uint8, (obj.nbytes(),), (1,), 0)
    if isinstance(obj, Tensor) or type(obj) is dlpack._CapsuleType:
        return dlpack.from_dlpack(obj)
    if isinstance(obj, np.ndarray):
        if not obj.dtype.isnative and copy:
            obj = obj.astype(obj.dtype.newbyteorder("="))
        out = array_interface.from_numpy(obj)
        return out
    if hasattr(obj, "__dlpack__"):
        return dlpack.from_dlpack(obj)
    if hasattr(obj, "__cuda_array_interface__"):
        return array_interface.from_cuda_array_interface(obj)
    if _exposes_memory(obj):
        arr = np.asarray(obj)
        if not arr.dtype.isnative and copy:
            arr = arr.astype(arr.dtype.newbyteorder("="))
        out = array_interface.from_numpy(arr)
        return out
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
