"""cuda.core's CUDA stream protocol (``__cuda_stream__() -> (0, address)``, which
tvm-ffi, torch and paddle speak): bridge's stream objects (:class:`bridge.CudaStream`)
speak it, and every place bridge takes a stream takes an object that speaks it.
No GPU: hand-made stream objects, fake device pointers never dereferenced."""

from __future__ import annotations

import ctypes.util

import pytest

import bridge
from bridge.core.native import _C, _drivers


class Stream:
    """A hand-made stream object of cuda.core's protocol, answering ``answer``."""

    def __init__(self, answer) -> None:
        self.answer = answer

    def __cuda_stream__(self):
        return self.answer


class FakeCuda:
    """``__cuda_array_interface__`` over a fake device pointer."""

    def __init__(self, stream=None) -> None:
        self.__cuda_array_interface__ = {"shape": (4,), "typestr": "<f4", "data": (0xDEAD0000, False),
                                         "version": 3, "strides": None, "stream": stream}  # fmt: skip


def test_bridge_streams_speak_the_protocol():
    s = bridge.current_cuda_stream()
    assert isinstance(s, bridge.CudaStream) and s == 1 and int(s) == s.handle == 1 and hash(s) == hash(1)
    assert s.__cuda_stream__() == (0, 1)  # the legacy default stream: cudaStreamLegacy is 1 too
    with bridge.cuda_stream(0xBEEF) as h:
        assert isinstance(h, bridge.CudaStream) and h.__cuda_stream__() == (0, 0xBEEF)
        assert bridge.current_cuda_stream().__cuda_stream__() == (0, 0xBEEF)
    assert repr(bridge.CudaStream(2)) == "bridge.CudaStream(0x2)"
    assert _C.cuda_stream_handle(bridge.CudaStream(0x1234)) == 0x1234


def test_cuda_stream_takes_protocol_objects():
    with bridge.cuda_stream(Stream((0, 0x5000))) as h:
        assert h == 0x5000 and bridge.current_cuda_stream() == 0x5000
        # the exchange API's current_work_stream reports it to consumers
        assert _drivers.api_stream(bridge.Tensor.__dlpack_c_exchange_api__, 2, 0) == 0x5000
    with bridge.cuda_stream(Stream((0, 0))) as h:  # NULL: the default stream, DLPack's 1
        assert h == 1
    with bridge.cuda_stream(bridge.current_cuda_stream()) as h:  # bridge's own object
        assert h == 1


@pytest.mark.parametrize(
    "answer, exc, match",
    [((1, 0x5000), ValueError, "version 1"), ((0, -5), ValueError, "address"),
     (0x5000, TypeError, "not a .version, handle. tuple"), ((0, "x"), TypeError, "tuple of ints"),
     ((0,), TypeError, "tuple")],
    ids=["version", "negative", "not-a-tuple", "not-ints", "short"],
)  # fmt: skip
def test_malformed_protocol_answers(answer, exc, match):
    with pytest.raises(exc, match=match):
        with bridge.cuda_stream(Stream(answer)):
            pass
    assert bridge.current_cuda_stream() == 1
    t = bridge.from_cuda_array_interface(FakeCuda(), device_id=0)
    with pytest.raises(exc, match=match):
        t.__dlpack__(max_version=(1, 3), stream=Stream(answer))


def test_dlpack_export_takes_protocol_streams():
    t = bridge.from_cuda_array_interface(FakeCuda(), device_id=0)  # nothing pending: no driver call
    for s in (Stream((0, 0x5000)), Stream((0, 0)), bridge.CudaStream(7)):
        assert t.__dlpack__(max_version=(1, 3), stream=s) is not None
    with pytest.raises(ValueError, match="stream must be None or -1"):  # host memory has no streams
        bridge.arange(3).__dlpack__(stream=Stream((0, 0x5000)))
    with pytest.raises(TypeError, match="__cuda_stream__"):
        t.__dlpack__(stream=object())
    if ctypes.util.find_library("cuda") is None:
        pending = bridge.from_cuda_array_interface(FakeCuda(stream=99), device_id=0)
        with pytest.raises(BufferError, match="CUDA driver"):  # the handle reached the ordering
            pending.__dlpack__(max_version=(1, 3), stream=Stream((0, 0x5000)))


def test_imports_pass_a_protocol_stream_to_producers():
    class Producer:
        def __init__(self) -> None:
            self.t, self.asked = bridge.from_cuda_array_interface(FakeCuda(stream=1), device_id=0), []

        def __dlpack_device__(self):
            return (2, 0)

        def __dlpack__(self, **kwargs):
            self.asked.append(kwargs)
            return self.t.__dlpack__(max_version=(1, 3), stream=-1)

    p = Producer()
    with bridge.cuda_stream(Stream((0, 0x6000))):
        out = bridge.from_dlpack(p)
    assert [kw["stream"] for kw in p.asked] == [0x6000]
    assert out.untyped_storage()._stream == 0x6000


def test_cuda_stream_objects_are_valid_handles():
    with pytest.raises(ValueError, match="invalid CUDA stream 0"):
        bridge.CudaStream(0)
    with pytest.raises(TypeError):
        bridge.CudaStream("1")
    s = bridge.CudaStream(5)
    with pytest.raises(AttributeError, match="immutable"):
        s.handle = 6
    assert s == bridge.CudaStream(5) and s != 6 and s != "5" and {s: 1}[5] == 1
    assert int(s) == 5 and list(range(9))[s] == 5  # an index wherever an int index goes
