"""A bridge view and its NumPy twin (the same op done the NumPy way on
``t.numpy()`` of the base): the state of a chain of view ops, and the checks
``test_views_property.py`` makes after every step and at its end."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import event
from hypothesis import strategies as st

import bridge

VIEW_DTYPES = {
    "int32": (bridge.int32, np.dtype(np.int32)),
    "uint8": (bridge.uint8, np.dtype(np.uint8)),
    "int16": (bridge.int16, np.dtype(np.int16)),
    "float32": (bridge.float32, np.dtype(np.float32)),
}
NP_DTYPE_OF = {bt: nt for bt, nt in VIEW_DTYPES.values()}


@dataclass
class State:
    """The view under test, its NumPy twin and the storage both must stay inside."""

    t: bridge.Tensor
    a: np.ndarray[Any, Any]
    root: np.ndarray[Any, Any]  # uint8 NumPy array over the whole storage (writable)
    storage_ptr: int
    storage_nbytes: int


def new_state(t: bridge.Tensor, a: np.ndarray[Any, Any], owner: bridge.Tensor) -> State:
    """A chain state whose view must stay inside ``owner``'s storage."""
    storage = owner.untyped_storage()
    return State(t, a, _root_of(owner), storage.data_ptr(), storage.nbytes())


def _root_of(t: bridge.Tensor) -> np.ndarray[Any, Any]:
    """A writable uint8 NumPy array over all of ``t``'s storage."""
    whole = bridge.empty(0, dtype=bridge.uint8).set_(t.untyped_storage())
    root = whole.numpy()
    assert root.nbytes == t.untyped_storage().nbytes()
    return root


def writable(x: np.ndarray[Any, Any], root: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``x`` (a NumPy view of ``root``'s memory that NumPy made read-only, as
    broadcast_to, diagonal and sliding_window_view do) with the same geometry but
    writable. Empty arrays are returned as they are (nothing to write)."""
    if x.flags.writeable or x.size == 0:
        return x
    off = int(x.ctypes.data) - int(root.ctypes.data)
    return np.ndarray(x.shape, x.dtype, buffer=root, offset=off, strides=x.strides)


def _byte_extent(x: np.ndarray[Any, Any]) -> tuple[int, int]:
    """``(lowest, highest + 1)`` byte addresses of a non-empty array."""
    lo = hi = int(x.ctypes.data)
    for size, stride in zip(x.shape, x.strides):
        if stride > 0:
            hi += (size - 1) * stride
        else:
            lo += (size - 1) * stride
    return lo, hi + x.itemsize


def _overlaps(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether two index tuples reach the same element (brute force; shapes are small)."""
    n = int(np.prod(shape, dtype=np.int64))
    if n <= 1:
        return False
    idx = np.indices(shape).reshape(len(shape), -1)
    offsets = np.asarray(strides, dtype=np.int64) @ idx
    return len(np.unique(offsets)) < n


def same_values(x: np.ndarray[Any, Any], y: np.ndarray[Any, Any]) -> bool:
    """Equal shapes and element bits (float32 views of integer bytes can hold NaNs)."""
    if x.dtype != y.dtype or x.shape != y.shape:
        return False
    bits = np.dtype(f"u{x.itemsize}")
    return bool(np.array_equal(x.view(bits), y.view(bits)))


def check_same(s: State) -> None:
    """The invariants checked after every step."""
    t, a = s.t, s.a
    assert isinstance(t, bridge.Tensor)
    assert t.shape == a.shape
    assert t.ndim == a.ndim
    assert t.numel() == a.size
    assert NP_DTYPE_OF[t.dtype] == a.dtype
    tn = t.numpy()
    assert tn.dtype == a.dtype
    assert tn.shape == a.shape
    assert same_values(tn, a)
    itemsize = a.itemsize
    # t.numpy() is exactly the tensor's geometry
    assert tn.strides == tuple(st_ * itemsize for st_ in t.stride())
    assert t.is_contiguous() == a.flags.c_contiguous
    assert t.untyped_storage().data_ptr() == s.storage_ptr
    assert t.untyped_storage().nbytes() == s.storage_nbytes
    if a.size:
        for size, got, want in zip(a.shape, tn.strides, a.strides):
            if size != 1:
                assert got == want, (tn.strides, a.strides)
        assert t.data_ptr() == int(tn.ctypes.data) == int(a.ctypes.data)
        assert t.data_ptr() == s.storage_ptr + t.storage_offset() * itemsize
        lo, hi = _byte_extent(tn)
        assert s.storage_ptr <= lo and hi <= s.storage_ptr + s.storage_nbytes


def _sentinels(dt: np.dtype[Any]) -> tuple[Any, Any]:
    return (dt.type(201), dt.type(77))


def check_writes(data: st.DataObject, s: State) -> None:
    """A write through the view is seen by the twin, and vice versa."""
    t, a = s.t, s.a
    if t.numel() == 0:
        event("final view empty")
        return
    event("final view written")
    idx = tuple(data.draw(st.integers(0, n - 1), label="write index") for n in t.shape)
    v, w = _sentinels(a.dtype)
    # one element: well defined even for broadcast (stride-0) or overlapping views
    t[idx] = v
    assert a[idx] == v
    assert t.numpy()[idx] == v
    a = writable(a, s.root)
    a[idx] = w
    assert t[idx].item() == w
    # every element, when each element has its own memory
    if _overlaps(a.shape, a.strides):
        return
    n = a.size
    pattern = ((np.arange(n) * 7 + 3) % 100).astype(a.dtype).reshape(a.shape)
    t.copy_(pattern)
    assert np.array_equal(a, pattern)
    a[...] = pattern[::-1] if a.ndim else pattern + 1
    assert np.array_equal(t.numpy(), a)
    assert t.tolist() == a.tolist()
