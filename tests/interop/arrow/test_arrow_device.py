"""The Arrow C Device interface: ``__arrow_c_device_array__``'s fields and
keywords, device types bridge does not know, a CUDA tensor (a fake device
pointer, never dereferenced) exported and imported, and validity bitmaps that
live on a device.

Shared helpers (the Arrow type of each dtype, the C struct behind a capsule,
the address of an array's first value) are in ``arrow_helpers.py``; the peer
fixtures (``pl``, ``na``, ``duckdb``) in ``tests/conftest.py``.
"""

from __future__ import annotations

import ctypes
import ctypes.util

import numpy as np
import pytest
from arrow_helpers import PEERS, c_struct, fst_array, pa, values_address
from bridge._native import ffi
from lifetimes import balanced, frozen_heap, snapshot

import bridge


@pytest.fixture(scope="module", autouse=True)
def _frozen_heap():
    yield from frozen_heap(*PEERS)


def test_device_array_capsule_fields_and_keywords():
    for x in (bridge.arange(4, dtype=bridge.int32), bridge.arange(6).reshape(2, 3)):
        _schema, dev = x.__arrow_c_device_array__()
        d = c_struct(dev, b"arrow_device_array")
        assert (d.device_type, d.device_id, d.sync_event) == (1, -1, ffi.NULL)
        assert list(d.reserved) == [0, 0, 0] and d.array.length == x.shape[0]
        x.__arrow_c_device_array__(None, sync_event=None, stream=None)  # None keywords are fine
        with pytest.raises(NotImplementedError, match="sync_event"):
            x.__arrow_c_device_array__(sync_event=1)
        with pytest.raises(NotImplementedError, match="stream"):
            x.__arrow_c_device_array__(requested_schema=None, stream=0)
    a = pa.array(np.arange(5, dtype=np.float32)).slice(1)
    b = bridge.from_arrow(a.__arrow_c_device_array__())
    assert b.tolist() == [1.0, 2.0, 3.0, 4.0] and b.data_ptr() == values_address(a)


def test_unsupported_device_type():
    t = bridge.arange(4, dtype=bridge.float32)
    before = snapshot()
    schema, dev = t.__arrow_c_device_array__()
    c_struct(dev, b"arrow_device_array").device_type = 99
    with pytest.raises(ValueError, match="device type 99"):
        bridge.from_arrow((schema, dev))
    assert balanced(before)["arrow_releases"] == 1


def test_cuda_tensor_exports_a_device_array_without_touching_memory():
    """A CUDA tensor (fake device pointer, never dereferenced) exports an
    ArrowDeviceArray with device type 2; its host-only exports refuse. With
    work pending on a stream, the export waits for it (the CUDA driver), so
    that no sync event is needed."""

    class FakeCuda:
        def __init__(self, stream=None):
            self.__cuda_array_interface__ = {
                "shape": (4,), "typestr": "<f4", "data": (0xDEAD0000, False), "version": 3,
                "strides": None, "stream": stream,
            }  # fmt: skip

    if ctypes.util.find_library("cuda") is None:
        pending = bridge.from_cuda_array_interface(FakeCuda(stream=1), device_id=1)
        with pytest.raises(BufferError, match="CUDA driver"):
            pending.__arrow_c_device_array__()
    t = bridge.from_cuda_array_interface(FakeCuda(), device_id=1)
    schema, dev = t.__arrow_c_device_array__()
    d = c_struct(dev, b"arrow_device_array")
    assert (d.device_type, d.device_id, d.sync_event) == (2, 1, ffi.NULL)
    assert int(ffi.cast("uintptr_t", d.array.buffers[1])) + d.array.offset * 4 == 0xDEAD0000
    back = bridge.from_arrow((schema, dev))
    assert back.device == bridge.device("cuda:1") and back.data_ptr() == 0xDEAD0000
    with pytest.raises(ValueError, match="__arrow_c_device_array__"):
        t.__arrow_c_array__()
    with pytest.raises(ValueError, match="stream"):
        t.__arrow_c_stream__()
    # a request of its own type is zero-copy; another value type needs a cast,
    # which bridge makes only in host memory
    schema, dev = t.__arrow_c_device_array__(pa.float32().__arrow_c_schema__())
    assert bridge.from_arrow((schema, dev)).data_ptr() == 0xDEAD0000
    with pytest.raises(ValueError, match="requested Arrow type double needs a cast of this "
                                         "cuda:1 tensor, and bridge casts only host memory"):  # fmt: skip
        t.__arrow_c_device_array__(pa.float64().__arrow_c_schema__())


def _device_capsules(arr, device_type):
    """arr's __arrow_c_device_array__ pair, relabelled as living on device_type."""
    schema, array = arr.__arrow_c_device_array__()
    c_struct(array, b"arrow_device_array").device_type = device_type
    c_struct(array, b"arrow_device_array").device_id = 0
    return schema, array


def test_with_mask_refuses_to_read_a_device_bitmap():
    arr = pa.array([1.0, None, 3.0])
    with pytest.raises(ValueError, match="validity bitmap of a cuda:0 Arrow array cannot be read on the host"):
        bridge.from_arrow(_device_capsules(arr, 2), with_mask=True)
    fst = fst_array(pa.float32(), [2], pa.array(np.arange(6, dtype=np.float32)),
                    mask=pa.array([False, True, False]))  # fmt: skip
    with pytest.raises(ValueError, match="cannot be read on the host"):
        bridge.from_arrow(_device_capsules(fst, 2), with_mask=True)
    # without nulls there is no bitmap to read: the device tensor comes back
    values, valid = bridge.from_arrow(_device_capsules(pa.array([1.0, 2.0]), 2), with_mask=True)
    assert values.is_cuda and valid.tolist() == [True, True]
