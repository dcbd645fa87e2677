"""CUDA paths on a real GPU (torch and CuPy). Skipped where there is no CUDA device.

Copies of CUDA memory use only the CUDA driver's copy engine (tests/interop/cuda/test_cuda_copy.py
checks the calls against a fake driver on any machine); here they meet real memory.

Run on a GPU machine with `make test-gpu` (see ../shared/GPU.md for the set-up).
"""

from __future__ import annotations

import gc

import pytest

import bridge
from bridge.core.native import _C

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():  # pragma: no cover - CPU-only machines
    pytest.skip("no CUDA device", allow_module_level=True)
cupy = pytest.importorskip("cupy")


def test_torch_cuda_through_dlpack_both_ways():
    x = torch.arange(12, dtype=torch.float32, device="cuda").reshape(3, 4)
    t = bridge.from_dlpack(x)
    assert t.device == bridge.device("cuda", x.device.index) and t.data_ptr() == x.data_ptr()
    assert t.stride() == x.stride()
    back = torch.from_dlpack(t)
    back[0, 0] = 42
    torch.cuda.synchronize()
    assert x[0, 0].item() == 42


def test_torch_to_bridge_to_cupy_via_cuda_array_interface():
    x = torch.arange(6, dtype=torch.int32, device="cuda").reshape(2, 3).t()
    t = bridge.asarray(x)  # DLPack first
    c = cupy.asarray(t)  # __cuda_array_interface__
    assert c.data.ptr == x.data_ptr() and c.tolist() == x.tolist()
    c[0, 0] = -5
    cupy.cuda.runtime.deviceSynchronize()
    assert x[0, 0].item() == -5


def test_cupy_to_bridge_to_torch():
    c = cupy.arange(10, dtype=cupy.float64)[::2]
    t = bridge.from_cuda_array_interface(c)
    assert t.is_cuda and t.stride() == (2,) and t.data_ptr() == c.data.ptr
    x = torch.from_dlpack(t)
    assert x.tolist() == c.tolist()
    x[1] = 100.0
    torch.cuda.synchronize()
    assert float(c[1]) == 100.0


def test_cuda_views_are_metadata_only_and_lifetimes_hold():
    c = cupy.arange(100, dtype=cupy.float32)
    t = bridge.asarray(c)
    v = t[10:20:2]
    del c, t
    gc.collect()
    x = torch.from_dlpack(v)
    assert x.tolist() == [10.0, 12.0, 14.0, 16.0, 18.0]


def test_streams():
    x = torch.ones(4, device="cuda")
    t = bridge.from_dlpack(x)
    s = torch.cuda.Stream()
    cap = t.__dlpack__(max_version=(1, 3), stream=s.cuda_stream)
    assert bridge.from_dlpack(cap).data_ptr() == x.data_ptr()
    with pytest.raises(ValueError, match="stream 0"):
        t.__dlpack__(stream=0)
    assert t.__cuda_array_interface__["stream"] == 1


def test_clone_and_copy_go_through_the_copy_engine():
    """clone/contiguous/copy_/numpy(force=True) of CUDA memory: the driver's copy
    engine (cdefs/interop/cuda.c), no CuPy involved; checked with torch."""
    import numpy as np

    x = torch.arange(120, dtype=torch.float32, device="cuda")
    t = bridge.from_dlpack(x)
    views = {
        "contiguous": lambda v: v.reshape(2, 3, 4, 5),
        "transposed": lambda v: v.reshape(10, 12).t(),
        "rows": lambda v: v.reshape(10, 12)[:, 2:9],
        "step": lambda v: v.reshape(10, 12)[:, ::3],
        "3d-inner-contiguous": lambda v: v.reshape(2, 3, 4, 5)[:, 1:, :, 1:4],
        "permuted": lambda v: v.reshape(2, 3, 4, 5).permute(3, 1, 0, 2),
        "0-d": lambda v: v[7],
        "zero-size": lambda v: v[:0],
    }
    for name, view in views.items():
        b, want = view(t), view(x).cpu().numpy()
        for c in (b.clone(), b.contiguous()):
            assert c.is_cuda and np.array_equal(c.numpy(force=True), want), name
            assert torch.equal(torch.from_dlpack(c).cpu(), torch.from_numpy(want)), name
        host = bridge.zeros(want.shape)
        host.copy_(b)
        assert np.array_equal(host.numpy(), want), name
        if want.size:  # host -> device into the view itself, then device -> device back
            b.copy_(bridge.from_numpy(np.asarray(want + 1)))
            torch.cuda.synchronize()
            assert np.array_equal(view(x).cpu().numpy(), want + 1), name
            b.copy_(view(bridge.from_dlpack(x - 1)))
            torch.cuda.synchronize()
            assert np.array_equal(view(x).cpu().numpy(), want), name
    dst = bridge.from_dlpack(torch.zeros(12, 10, device="cuda"))
    dst.copy_(t.reshape(10, 12).t())
    torch.cuda.synchronize()
    assert torch.equal(torch.from_dlpack(dst), x.reshape(10, 12).t())
    ints = bridge.from_dlpack(torch.zeros(120, dtype=torch.int32, device="cuda"))
    ints.copy_(t)  # a cast: through the host
    assert torch.equal(torch.from_dlpack(ints).cpu(), torch.arange(120, dtype=torch.int32))


def test_copies_are_ordered_on_the_consumer_stream():
    """A clone made under bridge.cuda_stream(s) is recorded on s; a consumer on
    another stream that asks with stream= waits for it."""
    x = torch.arange(1 << 20, dtype=torch.float32, device="cuda")
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    with bridge.cuda_stream(s):
        c = bridge.from_dlpack(x).clone()
    assert c.untyped_storage()._stream == s.cuda_stream
    y = torch.from_dlpack(c)  # torch passes its current stream: ordered after s
    assert torch.equal(y, x)


# ------------------------------------------------ zero-copy with every peer


def versioned_and_legacy(x):
    """The two capsule kinds of one producer."""
    return [x.__dlpack__(max_version=(1, 3)), x.__dlpack__()]


def test_torch_both_capsule_kinds_and_the_exchange_api():
    x = torch.arange(24, dtype=torch.float32, device="cuda").reshape(2, 3, 4).permute(2, 0, 1)
    for cap in versioned_and_legacy(x):
        t = bridge.from_dlpack(cap)
        assert t.data_ptr() == x.data_ptr() and t.stride() == x.stride() and t.shape == x.shape
    t = bridge.from_dlpack(x)  # torch's C exchange API
    assert t.data_ptr() == x.data_ptr() and t.device == bridge.device("cuda", x.device.index)
    y = torch.from_dlpack(t)
    assert y.data_ptr() == x.data_ptr() and torch.equal(y, x)


def test_cupy_both_ways_through_dlpack():
    c = cupy.arange(12, dtype=cupy.int64).reshape(3, 4)[:, 1:]
    for cap in versioned_and_legacy(c):
        t = bridge.from_dlpack(cap)
        assert t.data_ptr() == c.data.ptr and t.stride() == (4, 1)
    t = bridge.from_dlpack(c)
    back = cupy.from_dlpack(t)
    assert back.data.ptr == c.data.ptr and back.tolist() == c.tolist()
    back[0, 0] = -1
    assert int(c[0, 0]) == -1


def test_jax_gpu_both_ways_through_dlpack():
    import os

    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    jax = pytest.importorskip("jax")
    gpus = [d for d in jax.devices() if d.platform == "gpu"]
    assert gpus, f"jax has no GPU backend here: {jax.devices()}"
    import jax.numpy as jnp

    a = jax.device_put(jnp.arange(10, dtype=jnp.float32), gpus[0])
    t = bridge.from_dlpack(a)
    assert t.is_cuda and t.data_ptr() == a.unsafe_buffer_pointer()
    x = torch.from_dlpack(bridge.from_dlpack(a))
    assert x.tolist() == list(range(10))
    src = bridge.from_dlpack(torch.arange(6, dtype=torch.float32, device="cuda"))
    j = jax.dlpack.from_dlpack(src)
    assert j.unsafe_buffer_pointer() == src.data_ptr() and j.tolist() == [0, 1, 2, 3, 4, 5]


def test_cuda_array_interface_takes_the_pointer_device_not_the_current_one():
    x = torch.arange(4, device="cuda")
    assert _C.cuda_pointer_device(x.data_ptr()) == x.device.index
    assert _C.cuda_pointer_device(bridge.zeros(4).data_ptr()) == -1  # host memory: unknown
    t = bridge.from_cuda_array_interface(x)
    assert t.device == bridge.device("cuda", x.device.index)
    assert t.__dlpack_device__() == (2, x.device.index)


def test_arrow_device_array_round_trip_is_zero_copy():
    c = cupy.arange(8, dtype=cupy.float32)
    t = bridge.asarray(c)
    schema, arr = t.__arrow_c_device_array__()
    back = bridge.from_arrow((schema, arr))
    assert back.is_cuda and back.data_ptr() == c.data.ptr
    assert torch.from_dlpack(back).tolist() == c.tolist()


def test_producer_memory_outlives_every_consumer_and_counters_balance():
    gc.collect()
    before = _C.stats()
    x = torch.arange(1000, dtype=torch.float32, device="cuda")
    ptr = x.data_ptr()
    t = bridge.from_dlpack(x)
    c = cupy.from_dlpack(t)
    y = torch.from_dlpack(t)
    del x, t
    gc.collect()
    torch.cuda.empty_cache()  # would return the block to the driver if it were free
    z = torch.zeros(1000, device="cuda")  # would reuse a freed block
    assert c.data.ptr == ptr and float(c[999]) == 999.0 and y[5].item() == 5.0
    del c, y, z
    gc.collect()
    after = _C.stats()
    for a, b in (("imports", "import_releases"), ("exports", "export_deleters")):
        assert after[a] - before[a] == after[b] - before[b], (a, before, after)


# --------------------------------------------------- copies: the copy engine


def test_copy_true_and_dl_device_to_host():
    import numpy as np

    x = torch.arange(20, dtype=torch.float32, device="cuda").reshape(4, 5)[:, ::2]
    t = bridge.from_dlpack(x)
    h = np.from_dlpack(t, device="cpu")  # NumPy asks dl_device=(1, 0): bridge copies
    assert h.tolist() == x.cpu().tolist()
    cap = t.__dlpack__(max_version=(1, 3), dl_device=(1, 0), copy=True)
    host = bridge.from_dlpack(cap)
    assert host.device == bridge.device("cpu") and host.tolist() == x.cpu().tolist()
    with pytest.raises(BufferError, match="copy=False"):
        t.__dlpack__(max_version=(1, 3), dl_device=(1, 0), copy=False)
    same = bridge.from_dlpack(t.__dlpack__(max_version=(1, 3), copy=True))
    assert same.is_cuda and same.data_ptr() != t.data_ptr()
    assert torch.from_dlpack(same).tolist() == x.tolist()


def test_host_to_device_through_from_dlpack_device():
    import numpy as np

    a = np.arange(12, dtype=np.float64).reshape(3, 4)
    t = bridge.from_dlpack(a, device="cuda")  # NumPy cannot: bridge copies to the GPU
    assert t.is_cuda and torch.from_dlpack(t).cpu().numpy().tolist() == a.tolist()
    back = bridge.from_dlpack(t, device="cpu")
    assert back.tolist() == a.tolist() and not back.is_cuda
    with pytest.raises(ValueError, match="copy=False"):
        bridge.from_dlpack(t, device="cpu", copy=False)
