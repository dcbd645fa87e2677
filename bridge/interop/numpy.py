"""NumPy and Python buffers.

Export, all in C over the tensor's struct (``cdefs/interop/numpy.c``): the buffer
protocol (PEP 3118; what NumPy tries first, and what ``memoryview(t)`` uses),
``Tensor.__array_struct__`` and ``Tensor.__array_interface__`` (version 3).
Every export holds the storage's owner.

Import: :func:`from_numpy` (C: NumPy's own DLPack export consumed in one
call; what NumPy refuses comes to :func:`_from_numpy_slow` here) and
:func:`frombuffer` for any buffer-protocol object. The source object is always
the storage's owner, so it stays alive as long as any view of it does;
read-only sources give read-only tensors.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from bridge.core import dtypes as _dtypes
from bridge.core.native import _C
from bridge.core.storage import UntypedStorage
from bridge.core.tensor import Tensor

__all__ = ["from_numpy", "frombuffer", "wrap_host_array"]

from_numpy = _C.from_numpy


def wrap_host_array(a: np.ndarray[Any, Any], dt: _dtypes.dtype) -> Tensor:
    """A tensor over a NumPy array's memory, with the array as the owner."""
    out: Tensor = _C.from_memory(a.__array_interface__["data"][0], dt, a.shape, a.strides, a,
                                 not a.flags.writeable, (1, 0))  # fmt: skip
    return out


def _from_numpy_slow(a: Any) -> Tensor:
    """from_numpy for what NumPy's DLPack export refuses: ml_dtypes types
    (imported zero-copy through DLPack all the same, as unsigned integers of
    their size, so that every array gets the same owner kind) and layouts
    bridge cannot express (clear errors)."""
    if not isinstance(a, np.ndarray):
        raise TypeError(f"from_numpy() expects a numpy.ndarray, got {type(a).__name__}")
    dt = _dtypes.from_numpy_dtype(a.dtype)  # TypeError / ValueError with the reason
    bits = _dtypes._BITS[dt.itemsize]
    if a.dtype != bits.numpy_dtype:  # a type NumPy's DLPack does not name
        t = _C.from_numpy(a.view(bits.numpy_dtype))
        out: Tensor = _C.make_tensor(t.untyped_storage(), dt, t.shape, t.stride(), t.storage_offset())
        return out
    return wrap_host_array(a, dt)  # NumPy refused its own type: bridge says why


def frombuffer(buffer: Any, *, dtype: Any, count: int = -1, offset: int = 0) -> Tensor:
    """A 1-d tensor over ``count`` elements of ``dtype`` in ``buffer``, starting
    ``offset`` bytes in (``torch.frombuffer``), sharing its memory.

    Any C-contiguous buffer-protocol object works (bytes, bytearray,
    memoryview, mmap, array.array, pyarrow.Buffer, ctypes arrays), whatever
    its shape and format: the result is always 1-d over its bytes, as torch's.
    The buffer stays alive while the tensor does, and read-only buffers give
    read-only tensors. Raises TypeError for non-buffers and ValueError for a
    buffer that is not C-contiguous (``bridge.asarray`` views those with their
    shape and strides) and for sizes and offsets that do not fit.
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
        # torch.frombuffer refuses these too (it asks for a simple buffer); the
        # bytes in memory order would not be the elements in index order.
        raise ValueError(
            f"frombuffer() needs a C-contiguous buffer, got one of shape {mv.shape} and byte "
            f"strides {mv.strides}; bridge.asarray(buffer) views it with its shape and strides"
        )
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
    out: Tensor = _C.make_tensor(storage, dt, (count,), (1,), 0)
    return out


_C._register("ndarray", np.ndarray)
_C._register("numpy_slow", _from_numpy_slow)
