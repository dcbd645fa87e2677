"""DLPack with real peers: every layout (transposed, stepped, negative,
broadcast, odd strides of size-1 dims, 0-d, zero-size) and every dtype over
NumPy and PyTorch, both ways, and read-only memory (the READ_ONLY flag, legacy
capsules, copies with IS_COPIED).

Peers other than NumPy are optional: each test skips where its peer is not
installed. What the peers themselves do (copies, flags they drop, refusals)
is asserted as observed with the versions pinned in pyproject.toml, and
commented where it is surprising. The capsule reader and the small helpers
are in ``dlpack_peek.py``."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from dlpack_peek import (
    IS_COPIED,
    PEERS,
    READ_ONLY,
    CopyingExporter,
    first,
    np_elem_strides,
    np_ptr,
    peek,
    readonly_numpy,
    stats_delta,
)
from lifetimes import balanced, frozen_heap, snapshot

import bridge


@pytest.fixture(scope="module", autouse=True)
def _frozen_heap():
    yield from frozen_heap(*PEERS)


# ============================================================= layouts


def _bridge_layouts():
    base = bridge.arange(60, dtype=bridge.float64).reshape(3, 4, 5)
    return {
        "contiguous": base,
        "transposed": base.permute(2, 0, 1),
        "stepped": base[::2, 1::2, ::3],
        "negative": base[::-1, :, ::-2],
        "broadcast": base[1, 2].expand(3, 4, 5),
        "size1-odd-strides": bridge.as_strided(base, (1, 4, 1), (7, 2, 13), 1),
        "0-d": base[1, 2, 3],
        "zero-size": base[:, 2:2, :],
    }


def _numpy_layouts():
    base = np.arange(60.0).reshape(3, 4, 5)
    ast = np.lib.stride_tricks.as_strided
    return {
        "contiguous": base,
        "transposed": base.transpose(2, 0, 1),
        "stepped": base[::2, 1::2, ::3],
        "negative": base[::-1, :, ::-2],
        "broadcast": np.broadcast_to(base[1, 2], (3, 4, 5)),
        "size1-odd-strides": ast(base[..., 1:], (1, 4, 1), (56, 16, 104)),
        "0-d": base[1, 2, 3, ...],
        "zero-size": base[:, 2:2, :],
    }


def _torch_layouts(torch):
    base = torch.arange(60, dtype=torch.float64).reshape(3, 4, 5)
    return {
        "contiguous": base,
        "transposed": base.permute(2, 0, 1),
        "stepped": base[::2, 1::2, ::3],
        "broadcast": base[1, 2].expand(3, 4, 5),
        "size1-odd-strides": base.as_strided((1, 4, 1), (7, 2, 13), 1),
        "0-d": base[1, 2, 3],
        "zero-size": base[:, 2:2, :],
    }


LAYOUTS = list(_bridge_layouts())
TORCH_LAYOUTS = [k for k in LAYOUTS if k != "negative"]


def _check_write(producer_get, consumer_set, ndim):
    idx = first(ndim)
    consumer_set(idx, 1234.5)
    assert producer_get(idx) == 1234.5


@pytest.mark.parametrize("layout", LAYOUTS)
def test_layout_bridge_to_numpy(layout):
    t = _bridge_layouts()[layout]
    before = snapshot()
    a = np.from_dlpack(t)
    assert a.shape == t.shape and a.tolist() == t.tolist()
    if t.numel():
        assert np_ptr(a) == t.data_ptr()
        assert np_elem_strides(a) == t.stride()
        assert a.flags.writeable
        _check_write(lambda i: t[i].item(), a.__setitem__, t.ndim)
    del a
    balanced(before)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_layout_numpy_to_bridge(layout):
    arr = _numpy_layouts()[layout]
    before = snapshot()
    b = bridge.from_dlpack(arr)
    assert b.shape == arr.shape and b.tolist() == arr.tolist()
    # np.broadcast_to gives a read-only view, and NumPy flags it READ_ONLY
    assert b.is_readonly == (not arr.flags.writeable)
    if arr.size:
        assert b.data_ptr() == np_ptr(arr)
        assert b.stride() == np_elem_strides(arr)
        if arr.flags.writeable:
            _check_write(lambda i: arr[i], b.__setitem__, arr.ndim)
    del b
    balanced(before)


@pytest.mark.parametrize("layout", TORCH_LAYOUTS)
def test_layout_bridge_to_torch(layout):
    torch = pytest.importorskip("torch")
    t = _bridge_layouts()[layout]
    before = snapshot()
    x = torch.from_dlpack(t)
    assert tuple(x.shape) == t.shape and x.tolist() == t.tolist()
    if t.numel():
        assert x.data_ptr() == t.data_ptr()
        assert x.stride() == t.stride()
        _check_write(lambda i: t[i].item(), x.__setitem__, t.ndim)
    del x
    balanced(before)


@pytest.mark.parametrize("layout", TORCH_LAYOUTS)
def test_layout_torch_to_bridge(layout):
    torch = pytest.importorskip("torch")
    x = _torch_layouts(torch)[layout]
    before = snapshot()
    b = bridge.from_dlpack(x)
    assert b.shape == tuple(x.shape) and b.tolist() == x.tolist()
    assert not b.is_readonly
    if x.numel():
        assert b.data_ptr() == x.data_ptr()
        assert b.stride() == x.stride()
        _check_write(lambda i: x[i].item(), b.__setitem__, x.ndim)
    del b
    balanced(before)


_NEGATIVE_STRIDE_CHILD = """
import sys, numpy as np, torch, bridge
x = bridge.arange(5, dtype=bridge.float32)[::-1] if sys.argv[1] == "bridge" else np.arange(5.0)[::-1]
try:
    y = torch.from_dlpack(x)
except Exception as e:
    print("REFUSED", type(e).__name__, flush=True)
else:
    print("ACCEPTED", y.tolist(), flush=True)
"""


def test_torch_refuses_negative_strides():
    """torch has no negative strides. torch 2.13 does not raise for them: it aborts the
    process (c10::Error thrown through a noexcept frame; pytorch#188023), for NumPy's
    export exactly as for ours, so this runs in child processes."""
    pytest.importorskip("torch")
    procs = {
        who: subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(_NEGATIVE_STRIDE_CHILD), who],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for who in ("bridge", "numpy")
    }
    for who, proc in procs.items():
        out, err = proc.communicate(timeout=300)
        assert "ACCEPTED" not in out, (who, out)
        if proc.returncode == 0:
            refused = out.split()
            assert refused[0] == "REFUSED" and refused[1] in (
                "BufferError",
                "RuntimeError",
                "ValueError",
            ), out
        else:
            assert proc.returncode == -signal.SIGABRT, (who, proc.returncode, err[-2000:])
            assert "Storage size calculation overflowed" in err, err[-2000:]


# ------------------------------------------------------------- dtypes

NUMPY_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                "float16", "float32", "float64", "complex64", "complex128"]  # fmt: skip


def _sample(np_dtype: np.dtype) -> np.ndarray:
    vals = np.arange(6) % 2 if np_dtype == np.bool_ else np.arange(6)
    a = vals.astype(np_dtype)
    if np_dtype.kind == "c":
        a = a + (1j * np.arange(6)[::-1]).astype(np_dtype)
    return a.reshape(2, 3)


@pytest.mark.parametrize("name", NUMPY_DTYPES)
def test_dtype_numpy_both_ways(name):
    dt = getattr(bridge, name)
    src = _sample(np.dtype(name))
    b = bridge.from_dlpack(src)
    assert b.dtype is dt and b.data_ptr() == np_ptr(src)
    assert b.tolist() == src.tolist()
    a = np.from_dlpack(b)
    assert a.dtype == np.dtype(name) and np_ptr(a) == np_ptr(src)
    assert a.tolist() == src.tolist()
    assert src[0, 0] != src[1, 2]
    a[0, 0] = a[1, 2]
    assert src[0, 0] == src[1, 2] and b[0, 0].item() == src[1, 2]


EXOTIC = ["bfloat16", "float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz", "float8_e4m3fn",
          "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu"]  # fmt: skip


@pytest.mark.parametrize("name", EXOTIC)
def test_dtype_ml_dtypes_numpy_refuses_dlpack(name):
    """ml_dtypes gives NumPy these dtypes, but NumPy's DLPack supports none of them
    (NumPy 2.4): its import raises RuntimeError, its export BufferError. bridge's own
    NumPy view (the array interface) still works, zero-copy."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    assert hasattr(ml_dtypes, name), f"ml_dtypes has no {name}: bridge.{name} needs it"
    t = bridge.tensor([1.0, 2.0, 4.0, 0.5], dtype=getattr(bridge, name))
    with pytest.raises(RuntimeError, match="Unsupported dtype"):
        np.from_dlpack(t)
    view = t.numpy()
    assert view.dtype == np.dtype(getattr(ml_dtypes, name)) and np_ptr(view) == t.data_ptr()
    with pytest.raises(BufferError):
        bridge.from_dlpack(view)


TORCH_DTYPE_NAMES = [*NUMPY_DTYPES, "bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2",
                     "float8_e5m2fnuz", "float8_e8m0fnu"]  # fmt: skip


def _torch_sample(torch, tdt):
    if tdt == torch.bool:
        return (torch.arange(6) % 2).to(tdt).reshape(2, 3)
    if tdt.is_complex:
        return torch.tensor([1 + 2j, 3 - 1j, 0, -2 + 0.5j, 4j, 5], dtype=tdt).reshape(2, 3)
    if tdt.is_floating_point:  # exact in every float8, powers of two in e8m0
        return torch.tensor([1.0, 2.0, 4.0, 0.5, 0.25, 8.0]).to(tdt).reshape(2, 3)
    return torch.arange(6).to(tdt).reshape(2, 3)


def _as_list(torch, x):
    if x.dtype.is_floating_point and x.dtype not in (torch.float32, torch.float64, torch.float16):
        x = x.to(torch.float32)  # bridge's tolist() widens bfloat16/float8 to float32 too
    return x.tolist()


@pytest.mark.parametrize("name", TORCH_DTYPE_NAMES)
def test_dtype_torch_both_ways(name):
    torch = pytest.importorskip("torch")
    tdt = getattr(torch, name, None)
    assert tdt is not None, f"torch has no {name}"
    dt = getattr(bridge, name)
    x = _torch_sample(torch, tdt)
    b = bridge.from_dlpack(x)
    assert b.dtype is dt and b.data_ptr() == x.data_ptr()
    assert b.tolist() == _as_list(torch, x)
    y = torch.from_dlpack(b)
    assert y.dtype == tdt and y.data_ptr() == x.data_ptr()
    assert torch.equal(y.view(torch.uint8), x.view(torch.uint8))
    # a bridge-made tensor goes out too
    fresh = bridge.tensor(b.tolist(), dtype=dt)
    z = torch.from_dlpack(fresh)
    assert z.dtype == tdt and z.data_ptr() == fresh.data_ptr()
    assert torch.equal(z.view(torch.uint8), x.view(torch.uint8))


# ============================================================ read-only


def test_read_only_numpy_into_bridge():
    src = readonly_numpy(np.arange(6.0).reshape(2, 3))
    b = bridge.from_dlpack(src)
    assert b.is_readonly and b.untyped_storage().is_readonly
    assert b.data_ptr() == np_ptr(src)
    for write in (lambda: b.__setitem__((0, 0), 1.0), lambda: b.fill_(0.0), lambda: b.zero_(),
                  lambda: b.copy_(bridge.zeros(2, 3, dtype=bridge.float64)),
                  lambda: b.T.__setitem__(1, 5.0)):  # fmt: skip
        with pytest.raises(ValueError):
            write()
    assert src.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    # views, bridge->bridge imports and capsules keep it read-only
    assert b.T.is_readonly and b[1:].is_readonly and bridge.from_dlpack(b).is_readonly
    assert bridge.from_dlpack(b.__dlpack__(max_version=(1, 3))).is_readonly


def test_read_only_bridge_to_numpy():
    r = bridge.from_dlpack(readonly_numpy(np.arange(4.0)))
    info = peek(r.__dlpack__(max_version=(1, 3)))
    assert info["flags"] == READ_ONLY
    a = np.from_dlpack(r)
    assert np_ptr(a) == r.data_ptr() and a.tolist() == r.tolist()
    assert not a.flags.writeable
    with pytest.raises(ValueError):
        a[0] = 1.0
    assert not np.asarray(r).flags.writeable  # the array interface agrees


@pytest.mark.parametrize("max_version", [None, (0, 8)])
def test_read_only_bridge_refuses_legacy_capsule(max_version):
    r = bridge.from_dlpack(readonly_numpy(np.arange(4.0)))
    before = snapshot()
    with pytest.raises(BufferError, match="read-only"):
        r.__dlpack__() if max_version is None else r.__dlpack__(max_version=max_version)
    assert stats_delta(before)["exports"] == 0
    # a copy is fresh memory and may go out as a legacy capsule (imported read-only,
    # as every legacy capsule is); a versioned one says it is writable
    b = bridge.from_dlpack(r.__dlpack__(copy=True))
    assert b.is_readonly and b.data_ptr() != r.data_ptr()
    w = bridge.from_dlpack(r.__dlpack__(max_version=(1, 3), copy=True))
    assert not w.is_readonly and w.data_ptr() != r.data_ptr()


@pytest.mark.parametrize("readonly", [False, True])
def test_copy_export_has_is_copied_and_does_not_alias(readonly):
    src = np.arange(6.0).reshape(2, 3)
    t = bridge.from_dlpack(readonly_numpy(src) if readonly else src).T
    before = snapshot()
    info = peek(t.__dlpack__(max_version=(1, 3), copy=True))
    assert info["name"] == "dltensor_versioned"
    assert info["flags"] == IS_COPIED  # and no READ_ONLY: the copy is ours to write
    assert info["data"] != t.data_ptr() and info["shape"] == (3, 2)
    a = np.from_dlpack(CopyingExporter(t))
    assert a.tolist() == t.tolist() and np_ptr(a) != t.data_ptr()
    assert not np.shares_memory(a, src)
    assert a.flags.writeable
    a[0, 0] = -1.0
    assert src[0, 0] == 0.0
    del a
    assert balanced(before)["exports"] == 2


def test_torch_given_a_read_only_bridge_tensor():
    """torch 2.13 asks for a versioned capsule, gets READ_ONLY, and ignores it (it
    aliases the memory writable, as it does for NumPy's read-only arrays); bridge's
    part is only to set the flag, checked here."""
    torch = pytest.importorskip("torch")
    src = readonly_numpy(np.arange(4.0))
    r = bridge.from_dlpack(src)
    assert peek(r.__dlpack__(max_version=(1, 0)))["flags"] == READ_ONLY
    x = torch.from_dlpack(r)
    assert x.tolist() == src.tolist()
