"""The copy-engine cases of tests/interop/cuda/test_cuda_copy.py (written against a fake
libcuda over host memory) against the real driver and real device memory: the
same layouts, dtypes and operations, every value checked against NumPy over a
host copy that torch makes. Skipped where there is no CUDA device.
"""

from __future__ import annotations

import numpy as np
import pytest
from cuda_layouts import DTYPES, LAYOUTS

import bridge

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():  # pragma: no cover - CPU-only machines
    pytest.skip("no CUDA device", allow_module_level=True)


def device_buffer(n: int = 120, dtype: type = np.float32):
    """(torch CUDA tensor, bridge tensor over it) holding arange(n) as ``dtype``."""
    buf = torch.from_numpy(np.arange(n).astype(dtype)).cuda()
    return buf, bridge.from_dlpack(buf)


def on_host(buf) -> np.ndarray:
    torch.cuda.synchronize()
    return buf.cpu().numpy()


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
@pytest.mark.parametrize("name", list(LAYOUTS))
def test_every_layout_copies_like_numpy_on_the_real_driver(name: str, dtype: type) -> None:
    view, np_view = LAYOUTS[name]
    buf, x = device_buffer(dtype=dtype)
    t, want = view(x), np_view(on_host(buf))
    assert t.is_cuda and t.shape == want.shape
    for fmt in (None, bridge.contiguous_format):
        c = t.clone() if fmt is None else t.clone(memory_format=fmt)
        assert c.is_cuda and (c.data_ptr() != t.data_ptr() or c.numel() == 0)
        assert np.array_equal(c.numpy(force=True), want)
    assert t.contiguous().is_contiguous() and np.array_equal(t.contiguous().numpy(force=True), want)
    # device -> device into a fresh buffer, and into a transposed view of one
    out_buf, out = device_buffer(want.size, dtype)
    out_buf.zero_()
    out.reshape(want.shape).copy_(t)
    assert np.array_equal(on_host(out_buf).reshape(want.shape), want)
    if want.ndim == 2:
        out_buf.zero_()
        out.reshape(want.shape[::-1]).t().copy_(t)
        assert np.array_equal(on_host(out_buf).reshape(want.shape[::-1]).T, want)
    # host -> device into the view itself, device -> host out of it
    new = np.random.default_rng(0).integers(0, 100, size=want.shape).astype(dtype)
    t.copy_(bridge.from_numpy(new))
    assert np.array_equal(np_view(on_host(buf)), new)
    h = bridge.zeros(want.shape, dtype=t.dtype)
    h.copy_(t)
    assert np.array_equal(h.numpy(), new)
    # DLPack: copy=True on the device, dl_device to the host
    same = bridge.from_dlpack(t.__dlpack__(max_version=(1, 3), copy=True))
    assert same.is_cuda and np.array_equal(same.numpy(force=True), new)
    down = bridge.from_dlpack(t.__dlpack__(max_version=(1, 3), dl_device=(1, 0)))
    assert not down.is_cuda and np.array_equal(down.numpy(), new)


def test_a_large_transposed_copy_is_right() -> None:
    """A copy the driver splits (more rows than one 2-D copy takes)."""
    x = torch.arange(2048 * 1536, dtype=torch.float32, device="cuda").reshape(2048, 1536)
    t = bridge.from_dlpack(x)
    c = t.t().contiguous()
    assert torch.equal(torch.from_dlpack(c), x.t().contiguous())
