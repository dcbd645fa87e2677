"""``bridge.asarray``: one entry point that picks the best protocol an object offers."""

from __future__ import annotations

from typing import Any

import numpy as np

from bridge import dlpack
from bridge._factories import tensor
from bridge._tensor import Tensor

__all__ = ["asarray"]


def asarray(obj: Any, *, dtype: Any = None, copy: bool | None = None) -> Tensor:
    """A tensor over ``obj``'s memory, zero-copy whenever ``obj`` exposes it.

    Order of preference: a bridge Tensor (a view of it), DLPack (``__dlpack__``
    or a bare capsule), then anything NumPy can view without copying
    (``__array_interface__``, ``__array_struct__``, the buffer protocol,
    ``__array__``), imported through NumPy's DLPack export so read-only
    memory stays read-only. Python scalars and nested sequences are copied
    (as ``bridge.tensor``). ``dtype`` different from the source's makes a
    converted copy; ``copy=True`` always copies and ``copy=False`` raises
    ValueError when a copy cannot be avoided.
    """
    out: Tensor | None = None
    if isinstance(obj, Tensor) or hasattr(obj, "__dlpack__") or type(obj) is dlpack._CapsuleType:
        out = dlpack.from_dlpack(obj, copy=copy if copy else None)
    elif _exposes_memory(obj):
        arr = np.asarray(obj)
        out = dlpack.from_dlpack(arr)
        if copy:
            out = out.clone()
    if out is None:
        if copy is False:
            raise ValueError(f"asarray(copy=False): {type(obj).__name__} exposes no memory to share")
        return tensor(obj, dtype=dtype)
    if dtype is not None and out.dtype is not _as_dtype(dtype):
        if copy is False:
            raise ValueError(f"asarray(copy=False): converting {out.dtype} to {dtype} needs a copy")
        out = out.to(dtype)
    return out


def _as_dtype(spec: Any) -> Any:
    from bridge._dtypes import get_dtype

    return get_dtype(spec)


def _exposes_memory(obj: Any) -> bool:
    if hasattr(obj, "__array_interface__") or hasattr(obj, "__array_struct__"):
        return True
    if hasattr(obj, "__array__"):
        return True
    try:
        memoryview(obj).release()
    except TypeError:
        return False
    return True
