"""CUDA paths on a real GPU (torch and CuPy). Skipped where there is no CUDA device.

Run on a GPU machine with `make test-gpu` (see ../shared/GPU.md for the set-up).
"""

from __future__ import annotations

import gc

import pytest

import bridge

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


def test_cuda_copies_go_through_cupy():
    c = cupy.arange(12, dtype=cupy.float32).reshape(3, 4)
    t = bridge.asarray(c).t()
    k = t.contiguous()
    assert k.is_cuda and k.is_contiguous() and k.data_ptr() != t.data_ptr()
    assert cupy.asarray(k).tolist() == c.T.tolist()
    dst = bridge.asarray(cupy.zeros((4, 3), dtype=cupy.float32))
    dst.copy_(t)
    assert cupy.asarray(dst).tolist() == c.T.tolist()
    host = bridge.zeros(4, 3)
    host.copy_(t)
    assert host.tolist() == c.T.tolist()
