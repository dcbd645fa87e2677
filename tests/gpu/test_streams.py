"""Stream semantics of the DLPack Python spec, proven on a GPU: work enqueued
on one stream is seen by a read on another only because bridge ordered them.

Each test makes a producer stream busy (``torch.cuda._sleep``) before it
writes, then reads on a different non-blocking stream or the legacy default
stream. A control read without bridge's ordering sees the old values, which
shows the race is real and that the ordered read is right because of bridge.
Skipped where there is no CUDA device.
"""

from __future__ import annotations

import gc

import pytest

import bridge
from bridge.core.native import _C

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():  # pragma: no cover - CPU-only machines
    pytest.skip("no CUDA device", allow_module_level=True)

N = 1 << 22
SLEEP = 400_000_000  # GPU cycles: about 0.2 s at H100 clocks


def busy_write(x, value, stream):
    """On ``stream``: spin, then fill ``x`` with ``value`` (done ~0.2 s later)."""
    with torch.cuda.stream(stream):
        torch.cuda._sleep(SLEEP)
        x.fill_(value)


def fresh(value=0.0):
    x = torch.full((N,), value, device="cuda")
    torch.cuda.synchronize()
    return x


def test_control_an_unordered_read_sees_old_values():
    """The race the other tests rely on: without ordering, a read on the
    default stream overtakes the busy producer stream."""
    x = fresh()
    s = torch.cuda.Stream()
    busy_write(x, 7.0, s)
    early = x.sum().item()  # legacy default stream, not ordered after s
    torch.cuda.synchronize()
    assert early == 0.0
    assert x.sum().item() == 7.0 * N


def test_import_through_the_exchange_api_waits_for_the_producer_stream():
    x = fresh()
    s = torch.cuda.Stream()
    busy_write(x, 7.0, s)
    with torch.cuda.stream(s):  # torch's current work stream is s
        t = bridge.from_dlpack(x)
    assert t.data_ptr() == x.data_ptr() and t.untyped_storage()._stream == 1
    # bridge's stream (1, the legacy default) now waits for s: a read there is ordered
    y = torch.from_dlpack(t)
    assert y.sum().item() == 7.0 * N


def test_import_under_a_bridge_stream_passes_it_to_the_producer():
    x = fresh()
    s = torch.cuda.Stream()
    reader = torch.cuda.Stream()
    busy_write(x, 3.0, s)
    with torch.cuda.stream(s), bridge.cuda_stream(reader) as handle:
        t = bridge.from_dlpack(x)
        assert bridge.current_cuda_stream() == handle == reader.cuda_stream
    assert bridge.current_cuda_stream() == 1
    assert t.untyped_storage()._stream == reader.cuda_stream
    with torch.cuda.stream(reader):
        # torch passes `reader`: nothing more to wait for. Read on `reader` too: an
        # .item() after the block copies on the default stream, which does not wait for it
        total = torch.from_dlpack(t).sum().item()
    assert total == 3.0 * N


def test_legacy_capsule_from_dunder_dlpack_with_the_consumer_stream():
    x = fresh()
    s = torch.cuda.Stream()
    busy_write(x, 5.0, s)
    with torch.cuda.stream(s):
        # torch's __dlpack__(stream=1) makes the legacy default stream wait for s
        t = bridge.from_dlpack(x.__dlpack__(stream=1))
    assert torch.from_dlpack(t).sum().item() == 5.0 * N


def test_export_to_a_consumer_stream_waits_for_the_memory_stream():
    x = fresh()
    s = torch.cuda.Stream()
    with bridge.cuda_stream(s):
        t = bridge.from_dlpack(x)  # the memory's work is ordered on s from now on
    busy_write(x, 9.0, s)
    other = torch.cuda.Stream()
    cap = t.__dlpack__(max_version=(1, 3), stream=other.cuda_stream)  # other waits for s
    y = bridge.from_dlpack(cap)
    with torch.cuda.stream(other):
        total = torch.from_dlpack(y).sum().item()
    assert total == 9.0 * N


def test_export_to_a_cuda_stream_protocol_object_waits_for_the_memory_stream():
    """A stream object of cuda.core's protocol (torch.cuda.Stream has
    __cuda_stream__) is taken where an int handle is: the same ordering."""
    x = fresh()
    s = torch.cuda.Stream()
    with bridge.cuda_stream(s) as handle:
        t = bridge.from_dlpack(x)
        assert handle.__cuda_stream__() == (0, s.cuda_stream)
    busy_write(x, 6.0, s)
    other = torch.cuda.Stream()
    y = bridge.from_dlpack(t.__dlpack__(max_version=(1, 3), stream=other))  # other waits for s
    with torch.cuda.stream(other):
        total = torch.from_dlpack(y).sum().item()
    assert total == 6.0 * N


def test_export_with_stream_minus_one_does_not_wait():
    x = fresh()
    s = torch.cuda.Stream()
    with bridge.cuda_stream(s):
        t = bridge.from_dlpack(x)
    busy_write(x, 9.0, s)
    other = torch.cuda.Stream()
    cap = t.__dlpack__(max_version=(1, 3), stream=-1)  # the consumer said: no sync
    with torch.cuda.stream(other):
        early = torch.from_dlpack(cap).sum().item()
    torch.cuda.synchronize()
    assert early == 0.0


def test_torch_consumer_on_the_default_stream_is_ordered():
    """torch.from_dlpack(bridge) passes its current stream (1): the default
    stream waits for the stream bridge recorded."""
    x = fresh()
    s = torch.cuda.Stream()
    with bridge.cuda_stream(s):
        t = bridge.from_dlpack(x)
    busy_write(x, 4.0, s)
    assert torch.from_dlpack(t).sum().item() == 4.0 * N


def test_stream_zero_is_refused_and_bad_streams_are_type_errors():
    t = bridge.from_dlpack(fresh())
    with pytest.raises(ValueError, match="stream 0"):
        t.__dlpack__(stream=0)
    with pytest.raises(TypeError, match="stream must be an int"):
        t.__dlpack__(stream="1")
    with pytest.raises(ValueError, match="invalid stream"):
        t.__dlpack__(stream=-7)
    with pytest.raises(TypeError, match="CUDA stream"):
        with bridge.cuda_stream("default"):
            pass


def test_cupy_consumer_through_cuda_array_interface_waits_for_the_stream():
    cupy = pytest.importorskip("cupy")
    x = fresh()
    s = torch.cuda.Stream()
    with bridge.cuda_stream(s):
        t = bridge.from_dlpack(x)
    busy_write(x, 2.0, s)
    assert t.__cuda_array_interface__["stream"] == s.cuda_stream
    c = cupy.asarray(t)  # CuPy waits for the interface's stream
    assert float(c.sum()) == 2.0 * N


def test_arrow_device_export_waits_for_pending_work():
    x = fresh()
    s = torch.cuda.Stream()
    with bridge.cuda_stream(s):
        t = bridge.from_dlpack(x)
    busy_write(x, 6.0, s)
    schema, arr = t.__arrow_c_device_array__()  # synchronises s: no sync event needed
    back = bridge.from_arrow((schema, arr))
    assert back.data_ptr() == x.data_ptr()
    other = torch.cuda.Stream()
    with torch.cuda.stream(other):
        total = torch.from_dlpack(back).sum().item()
    assert total == 6.0 * N


def test_counters_balance_after_stream_ordered_exchanges():
    gc.collect()
    before = _C.stats()
    for _ in range(50):
        x = torch.ones(16, device="cuda")
        t = bridge.from_dlpack(x)
        y = torch.from_dlpack(t)
        del x, t, y
    gc.collect()
    after = _C.stats()
    assert after["imports"] - before["imports"] == after["import_releases"] - before["import_releases"]
    assert after["exports"] - before["exports"] == after["export_deleters"] - before["export_deleters"]
