"""``bridge.convert`` between CUDA tensors of torch, CuPy and jax, host <-> CUDA
moves, stream objects, and the Arrow C Device interfaces with CUDA memory, on a
real GPU. Skipped where there is no CUDA device.

Each peer is checked through its own API (its pointer, its host copy), never
through bridge.
"""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

import bridge

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():  # pragma: no cover - CPU-only machines
    pytest.skip("no CUDA device", allow_module_level=True)
cupy = pytest.importorskip("cupy")

N = 1 << 22
SLEEP = 400_000_000  # GPU cycles: about 0.2 s at H100 clocks


def _jax():
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    jax = pytest.importorskip("jax")
    gpus = [d for d in jax.devices() if d.platform == "gpu"]
    if not gpus:
        pytest.fail(f"jax has no GPU backend here: {jax.devices()}")
    return jax, gpus[0]


def make(lib: str, n: int = 64):
    """A float32 arange(n) on CUDA device 0, made by ``lib``."""
    if lib == "torch":
        return torch.arange(n, dtype=torch.float32, device="cuda")
    if lib == "cupy":
        return cupy.arange(n, dtype=cupy.float32)
    if lib == "jax":
        jax, gpu = _jax()
        return jax.device_put(np.arange(n, dtype=np.float32), gpu)
    return bridge.from_dlpack(torch.arange(n, dtype=torch.float32, device="cuda"))


def ptr(obj) -> int:
    """The device pointer of ``obj``, through its own library's API."""
    if isinstance(obj, torch.Tensor):
        return obj.data_ptr()
    if isinstance(obj, cupy.ndarray):
        return obj.data.ptr
    if isinstance(obj, bridge.Tensor):
        return obj.data_ptr()
    return obj.unsafe_buffer_pointer()  # jax


def host(obj) -> np.ndarray:
    """A host copy of ``obj`` made by its own library."""
    if isinstance(obj, torch.Tensor):
        return obj.cpu().numpy()
    if isinstance(obj, cupy.ndarray):
        return cupy.asnumpy(obj)
    if isinstance(obj, bridge.Tensor):
        return obj.numpy(force=True)
    return np.asarray(obj)


def module(lib: str):
    return {"torch": torch, "cupy": cupy, "bridge": bridge}.get(lib) or _jax()[0]


LIBS = ["torch", "cupy", "jax", "bridge"]


WRITABLE = {"torch", "cupy"}  # destinations whose tensors are writable


@pytest.mark.parametrize("dst", LIBS)
@pytest.mark.parametrize("src", LIBS)
def test_convert_between_cuda_peers_is_zero_copy(src: str, dst: str) -> None:
    """Zero-copy by device pointer between every pair, except jax's immutable
    arrays into a destination that writes: one copy on the device, named
    ``read-only`` (zero-copy again with ``readonly="share"``)."""
    x = make(src)
    want = np.arange(64, dtype=np.float32)
    if src == "jax" and dst in WRITABLE:
        with pytest.warns(bridge.CopyWarning) as rec:
            y = bridge.convert(x, module(dst))
        assert rec[0].message.kind == "read-only"
        assert ptr(y) != ptr(x) and np.array_equal(host(y), want)
        assert bridge.from_dlpack(y).is_cuda  # copied on the device, not through the host
        with pytest.raises(BufferError, match="copy=False"):
            bridge.convert(x, module(dst), copy=False)
        y = bridge.convert(x, module(dst), readonly="share")
        assert ptr(y) == ptr(x)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("error", bridge.CopyWarning)
        y = bridge.convert(x, module(dst))
    assert ptr(y) == ptr(x), (src, dst)
    assert np.array_equal(host(y), want)
    y2 = bridge.convert(x, module(dst), copy=False)  # a second time: the registered destination
    assert ptr(y2) == ptr(x)


def test_convert_strided_cuda_views_copy_on_the_device_only_where_the_destination_must() -> None:
    x = torch.arange(24, dtype=torch.float32, device="cuda").reshape(4, 6)
    c = bridge.convert(x.t(), cupy)  # CuPy takes any strides
    assert c.data.ptr == x.data_ptr() and c.strides == (4, 24)
    jax = _jax()[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error", bridge.CopyWarning)
        j = bridge.convert(x.t(), jax)  # compact (a permutation of dense dims): as it is
    assert np.array_equal(np.asarray(j), x.t().cpu().numpy())
    with pytest.warns(bridge.CopyWarning) as rec:
        j = bridge.convert(x[:, ::2], jax)  # not compact: one copy, on the GPU
    assert rec[0].message.kind == "layout"
    assert j.devices() == {_jax()[1]}
    assert np.array_equal(np.asarray(j), x[:, ::2].cpu().numpy())
    with pytest.raises(BufferError, match="copy=False"):
        bridge.convert(x[:, ::2], jax, copy=False)


def test_convert_moves_between_host_and_cuda_with_a_named_fix() -> None:
    a = np.arange(12, dtype=np.float64).reshape(3, 4)
    with pytest.warns(bridge.CopyWarning) as rec:
        c = bridge.convert(a, cupy)  # CuPy holds CUDA memory only
    assert rec[0].message.kind == "device"
    assert isinstance(c, cupy.ndarray) and np.array_equal(cupy.asnumpy(c), a)
    with pytest.raises(BufferError, match="copy=False"):
        bridge.convert(a, cupy, copy=False)
    x = torch.arange(6, dtype=torch.int32, device="cuda").reshape(2, 3)
    with pytest.warns(bridge.CopyWarning) as rec:
        h = bridge.convert(x, np)
    assert rec[0].message.kind == "device" and isinstance(h, np.ndarray)
    assert np.array_equal(h, x.cpu().numpy())
    back = bridge.convert(h, torch)  # host stays host for torch (it holds both)
    assert back.device.type == "cpu"


def _busy_write(x, value: float, stream) -> None:
    with torch.cuda.stream(stream):
        torch.cuda._sleep(SLEEP)
        x.fill_(value)


def _fresh():
    x = torch.zeros(N, device="cuda")
    torch.cuda.synchronize()
    return x


def test_convert_orders_the_destination_after_the_producer_stream() -> None:
    """torch writes on a busy stream s; convert to CuPy (and jax) while s is
    torch's current stream; a read on the destination's own stream sees the
    write, because the stream rules were kept on the way."""
    x = _fresh()
    s = torch.cuda.Stream()
    _busy_write(x, 7.0, s)
    with torch.cuda.stream(s):
        c = bridge.convert(x, cupy)
    assert c.data.ptr == x.data_ptr()
    assert float(c.sum()) == 7.0 * N  # CuPy's current (null) stream
    x = _fresh()
    _busy_write(x, 5.0, s)
    with torch.cuda.stream(s):
        j = bridge.convert(x, _jax()[0])
    assert float(j.sum()) == 5.0 * N


def test_control_without_ordering_the_race_is_real() -> None:
    x = _fresh()
    s = torch.cuda.Stream()
    _busy_write(x, 7.0, s)
    c = cupy.from_dlpack(x.__dlpack__(stream=-1))  # no sync asked
    early = float(c.sum())
    torch.cuda.synchronize()
    assert early == 0.0


def test_cupy_streams_and_cuda_core_streams_are_taken() -> None:
    x = _fresh()
    s = cupy.cuda.Stream(non_blocking=True)
    with bridge.cuda_stream(s) as handle:
        t = bridge.from_dlpack(x)
    assert int(handle) == s.ptr and t.untyped_storage()._stream == s.ptr
    core = pytest.importorskip("cuda.core.experimental") if _no_core() else pytest.importorskip("cuda.core")
    dev = core.Device(0)
    dev.set_current()
    cs = dev.create_stream()
    ts = torch.cuda.Stream()
    with bridge.cuda_stream(ts):
        t = bridge.from_dlpack(x)
    _busy_write(x, 3.0, ts)
    cap = t.__dlpack__(max_version=(1, 3), stream=cs)  # cs waits for ts
    y = bridge.from_dlpack(cap)
    with torch.cuda.stream(torch.cuda.ExternalStream(cs.__cuda_stream__()[1])):
        total = torch.from_dlpack(y).sum().item()
    assert total == 3.0 * N


def _no_core() -> bool:
    try:
        import cuda.core as core

        return not hasattr(core, "Device")
    except ImportError:
        return True


def test_arrow_device_stream_with_cuda_memory() -> None:
    x = torch.arange(16, dtype=torch.float32, device="cuda")
    t = bridge.from_dlpack(x)
    cap = t.__arrow_c_device_stream__()
    back = bridge.from_arrow(cap)
    assert back.is_cuda and back.data_ptr() == x.data_ptr()
    assert torch.equal(torch.from_dlpack(back), x)
    big = _fresh()
    s = torch.cuda.Stream()
    with bridge.cuda_stream(s):
        t = bridge.from_dlpack(big)
    _busy_write(big, 6.0, s)
    back = bridge.from_arrow(t.__arrow_c_device_stream__())
    other = torch.cuda.Stream()
    with torch.cuda.stream(other):
        total = torch.from_dlpack(back).sum().item()
    assert total == 6.0 * N
