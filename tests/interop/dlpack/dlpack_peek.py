"""Helpers of the DLPack peer tests (``test_dlpack_peer*.py``): a ctypes reader of
DLPack capsules that does not go through bridge (so it checks bridge's exports
from outside), the spec's flag values, and small NumPy helpers.
"""

from __future__ import annotations

import ctypes

import numpy as np
from lifetimes import DLPACK_KEYS, delta
from pycapsule import capsule_name, capsule_ptr

import bridge

#: The peers the tests import: loaded before the heap is frozen (lifetimes.frozen_heap).
PEERS = ("torch", "jax", "jax.dlpack", "jax.numpy", "pyarrow", "tvm_ffi", "dlpack")

READ_ONLY = 1
IS_COPIED = 2
DLCPU = (1, 0)


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device_type", ctypes.c_int32),
        ("device_id", ctypes.c_int32),
        ("ndim", ctypes.c_int32),
        ("code", ctypes.c_uint8),
        ("bits", ctypes.c_uint8),
        ("lanes", ctypes.c_uint16),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class Versioned(ctypes.Structure):
    _fields_ = [
        ("major", ctypes.c_uint32),
        ("minor", ctypes.c_uint32),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


class ExchangeAPI(ctypes.Structure):
    _fields_ = [
        ("major", ctypes.c_uint32),
        ("minor", ctypes.c_uint32),
        ("prev_api", ctypes.c_void_p),
        ("allocator", ctypes.c_void_p),
        ("from_py_object", ctypes.c_void_p),
        ("to_py_object", ctypes.c_void_p),
        ("dltensor_from_py_object", ctypes.c_void_p),
        ("current_work_stream", ctypes.c_void_p),
    ]


FromPyObject = ctypes.PYFUNCTYPE(
    ctypes.c_int, ctypes.py_object, ctypes.POINTER(ctypes.POINTER(Versioned))
)
VersionedDeleter = ctypes.PYFUNCTYPE(None, ctypes.POINTER(Versioned))


def dims(t: DLTensor) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    shape = tuple(t.shape[i] for i in range(t.ndim))
    strides = None if not t.strides else tuple(t.strides[i] for i in range(t.ndim))
    return shape, strides


def peek(capsule) -> dict:
    """The header of an unconsumed DLPack capsule, read without consuming it
    (its destructor still frees it)."""
    name = capsule_name(capsule)
    ptr = capsule_ptr(capsule, name)
    if name == b"dltensor_versioned":
        m = Versioned.from_address(ptr)
        t, version, flags = m.dl_tensor, (m.major, m.minor), m.flags
    else:
        assert name == b"dltensor", name
        t, version, flags = DLTensor.from_address(ptr), None, None
    shape, strides = dims(t)
    return {
        "name": name.decode(),
        "version": version,
        "flags": flags,
        "data": t.data or 0,
        "byte_offset": t.byte_offset,
        "shape": shape,
        "strides": strides,
        "dtype": (t.code, t.bits, t.lanes),
    }


def stats_delta(before: dict) -> dict:
    return delta(before, DLPACK_KEYS)


def np_ptr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def np_elem_strides(a: np.ndarray) -> tuple[int, ...]:
    assert all(s % a.itemsize == 0 for s in a.strides)
    return tuple(s // a.itemsize for s in a.strides)


def first(ndim: int) -> tuple[int, ...]:
    return (0,) * ndim


class CopyingExporter:
    """Forwards to ``t.__dlpack__(max_version=(1, 3), copy=True)`` whatever the consumer asks."""

    def __init__(self, t: bridge.Tensor) -> None:
        self.t = t

    def __dlpack__(self, **kwargs):
        return self.t.__dlpack__(max_version=(1, 3), copy=True)

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()


def readonly_numpy(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a
