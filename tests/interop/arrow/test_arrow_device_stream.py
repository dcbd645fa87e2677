"""The Arrow C Device Stream interface (``__arrow_c_device_stream__``, capsule
``"arrow_device_array_stream"``): bridge's export read field by field and by
pyarrow and nanoarrow, imports of peers' streams, and device arrays with
their ``sync_event``.

pyarrow and nanoarrow speak plain streams only: ``bridge._drivers`` adapts a
plain stream to a CPU device stream and back (what Arrow's C++ does for CPU
memory), and makes hand-made CUDA-typed device streams (addresses never
dereferenced) with a sync event.
"""

from __future__ import annotations

import ctypes.util

import pytest
from arrow_helpers import PEERS, c_struct, pa, values_address
from bridge._native import ffi
from lifetimes import balanced, frozen_heap, snapshot

import bridge
from bridge.core.native import _drivers

NAME = b"arrow_device_array_stream"
NO_DRIVER = ctypes.util.find_library("cuda") is None


@pytest.fixture(scope="module", autouse=True)
def _frozen_heap():
    yield from frozen_heap(*PEERS)


def _read(capsule):
    """(schema format, [(device_type, device_id, sync_event, length, data address)]) of a
    device stream, read through its own callbacks with cffi; everything released."""
    st = c_struct(capsule, NAME)
    schema = ffi.new("struct ArrowSchema *")
    assert st.get_schema(st, schema) == 0
    fmt = ffi.string(schema.format).decode()
    schema.release(schema)
    out = []
    while True:
        d = ffi.new("struct ArrowDeviceArray *")
        assert st.get_next(st, d) == 0
        if d.array.release == ffi.NULL:
            break
        assert list(d.reserved) == [0, 0, 0]
        data = int(ffi.cast("uintptr_t", d.array.buffers[1]))
        out.append((d.device_type, d.device_id, d.sync_event, d.array.length, data))
        d.array.release(ffi.addressof(d.array))
    return fmt, out


def test_export_is_one_cpu_device_array_over_the_memory():
    t = bridge.arange(6, dtype=bridge.int32)
    before = snapshot()
    cap = t.__arrow_c_device_stream__()
    st = c_struct(cap, NAME)
    assert st.device_type == 1
    fmt, arrays = _read(cap)
    assert fmt == "i"
    assert arrays == [(1, -1, ffi.NULL, 6, t.data_ptr())]
    del cap, st
    assert balanced(before)["arrow_exports"] == 1


def test_export_keywords_and_requested_schema():
    t = bridge.arange(4, dtype=bridge.int32)
    t.__arrow_c_device_stream__(None, sync_event=None, stream=None)  # None keywords are fine
    with pytest.raises(NotImplementedError, match="stream"):
        t.__arrow_c_device_stream__(stream=7)
    cast = t.__arrow_c_device_stream__(pa.int64().__arrow_c_schema__())
    fmt, arrays = _read(cast)
    assert fmt == "l" and arrays[0][4] != t.data_ptr()  # the cast is new memory
    nd = bridge.arange(6, dtype=bridge.float32).reshape(2, 3)
    fmt, arrays = _read(nd.__arrow_c_device_stream__())
    assert fmt == "+w:3" and arrays[0][3] == 2  # a batch of fixed_shape_tensor rows
    with pytest.raises(ValueError, match="0-d"):
        bridge.tensor(1.0).__arrow_c_device_stream__()


def test_pyarrow_and_nanoarrow_read_the_export():
    t = bridge.arange(5, dtype=bridge.float32)
    ca = pa.ChunkedArray._import_from_c_capsule(_drivers.plain_stream(t.__arrow_c_device_stream__()))
    assert ca.to_pylist() == [0.0, 1.0, 2.0, 3.0, 4.0] and values_address(ca.chunk(0)) == t.data_ptr()
    na = pytest.importorskip("nanoarrow")
    s = na.ArrayStream(_drivers.plain_stream(t.__arrow_c_device_stream__()))
    assert s.read_all().to_pylist() == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_import_of_peers_streams():
    c = pa.chunked_array([pa.array([1, 2, 3], pa.int16())])
    before = snapshot()
    x = bridge.from_arrow(_drivers.device_stream(c.__arrow_c_stream__()))
    assert x.tolist() == [1, 2, 3] and x.dtype is bridge.int16 and x.is_readonly
    assert x.data_ptr() == values_address(c.chunk(0))  # zero-copy
    del x
    balanced(before)  # the schema and the array, released once each
    two = pa.chunked_array([[1.0], [2.0, 3.0]])
    with pytest.raises(ValueError, match="2 batches"):
        bridge.from_arrow(_drivers.device_stream(two.__arrow_c_stream__()))
    assert bridge.from_arrow(_drivers.device_stream(two.__arrow_c_stream__()), copy=True).tolist() == [1.0, 2.0, 3.0]
    na = pytest.importorskip("nanoarrow")
    stream = na.ArrayStream(pa.array([1.5, 2.5])).__arrow_c_stream__()
    assert bridge.from_arrow(_drivers.device_stream(stream)).tolist() == [1.5, 2.5]


def test_round_trip_and_producers_with_only_the_device_stream():
    t = bridge.arange(12, dtype=bridge.int64).reshape(3, 4)

    class DeviceStreamOnly:
        def __arrow_c_device_stream__(self, requested_schema=None, **kwargs):
            return t.__arrow_c_device_stream__(requested_schema, **kwargs)

    for src in (t.__arrow_c_device_stream__(), DeviceStreamOnly()):
        back = bridge.from_arrow(src)
        assert back.shape == (3, 4) and back.data_ptr() == t.data_ptr() and back.tolist() == t.tolist()


def test_consumed_and_wrong_capsules():
    cap = bridge.arange(3).__arrow_c_device_stream__()
    bridge.from_arrow(cap)
    with pytest.raises(ValueError, match="already consumed"):
        bridge.from_arrow(cap)
    with pytest.raises(ValueError, match="unconsumed 'arrow_array_stream'"):
        _drivers.device_stream(bridge.arange(3).__arrow_c_device_stream__())


def test_arrays_on_another_device_than_the_stream_are_refused():
    c = pa.chunked_array([pa.array([1, 2], pa.int32())])
    before = snapshot()
    with pytest.raises(ValueError, match="device type 1 gave an array of device type 2"):
        bridge.from_arrow(_drivers.device_stream(c.__arrow_c_stream__(), 1, -1, 0, 2))
    balanced(before)


def test_hand_made_cuda_device_stream():
    """A CUDA-typed device stream (host addresses standing in for device ones,
    never dereferenced): its arrays arrive as CUDA tensors on their device."""
    c = pa.chunked_array([pa.array([1.0, 2.0], pa.float32())])
    x = bridge.from_arrow(_drivers.device_stream(c.__arrow_c_stream__(), 2, 1))
    assert x.device == bridge.device("cuda:1") and x.data_ptr() == values_address(c.chunk(0))
    with pytest.raises(RuntimeError, match="host"):
        x.tolist()  # device memory is never read on the host


def test_a_cuda_arrays_sync_event_is_waited_for():
    """A CUDA array's sync_event is honoured, not ignored: the consumer's stream
    waits for it through the CUDA driver, which a machine without one lacks
    (BufferError); the moved arrays are released all the same. (With a driver
    the fake event would be read: tests/gpu waits on a real one.)"""
    c = pa.chunked_array([pa.array([1.0, 2.0], pa.float32())])
    event = ffi.new("void **")  # where a producer's cudaEvent_t would be
    address = int(ffi.cast("uintptr_t", event))
    before = snapshot()
    if NO_DRIVER:
        with pytest.raises(BufferError, match="CUDA driver"):
            bridge.from_arrow(_drivers.device_stream(c.__arrow_c_stream__(), 2, 0, address))
        balanced(before)
    # a CPU stream's sync_event is no CUDA event: never waited for
    cpu = bridge.from_arrow(_drivers.device_stream(c.__arrow_c_stream__(), 1, -1, address))
    assert cpu.tolist() == [1.0, 2.0]


def test_cuda_tensor_exports_a_cuda_device_stream():
    class FakeCuda:
        def __init__(self) -> None:
            self.__cuda_array_interface__ = {"shape": (4,), "typestr": "<f4", "data": (0xDEAD0000, False),
                                             "version": 3, "strides": None, "stream": None}  # fmt: skip

    t = bridge.from_cuda_array_interface(FakeCuda(), device_id=1)
    cap = t.__arrow_c_device_stream__()
    assert c_struct(cap, NAME).device_type == 2
    _, arrays = _read(cap)
    assert arrays == [(2, 1, ffi.NULL, 4, 0xDEAD0000)]
    back = bridge.from_arrow(t.__arrow_c_device_stream__())
    assert back.device == bridge.device("cuda:1") and back.data_ptr() == 0xDEAD0000
    with pytest.raises(ValueError, match="__arrow_c_device_array__"):
        t.__arrow_c_stream__()
    plain = _drivers.plain_stream(t.__arrow_c_device_stream__())
    with pytest.raises(Exception, match="CPU arrays only"):  # pyarrow's ArrowInvalid from get_next
        pa.ChunkedArray._import_from_c_capsule(plain)
