"""DLPack exchanges with real peer libraries, both directions: NumPy, PyTorch,
pyarrow, JAX, pydlpack, tvm-ffi, bridge's own C exchange API and bridge itself.

Every exchange checks values *and* aliasing (same data pointer, and a write on
one side is seen on the other wherever the consumer's array is writable) and
the C counters of ``bridge._C.stats()``. Layouts, dtypes and read-only memory
over the peers are in ``test_dlpack_peer_layouts.py``; reference counts and
leaks in ``test_dlpack_peer_lifetimes.py``.

Peers other than NumPy are optional: each test skips where its peer is not
installed. What the peers themselves do (copies, flags they drop, refusals)
is asserted as observed with the versions pinned in pyproject.toml, and
commented where it is surprising. The capsule reader and the small helpers
are in ``dlpack_peek.py``."""

from __future__ import annotations

import ctypes
import gc
import sys
import warnings
import weakref

import numpy as np
import pytest
from dlpack_peek import (
    DLCPU,
    IS_COPIED,
    PEERS,
    READ_ONLY,
    ExchangeAPI,
    FromPyObject,
    Versioned,
    VersionedDeleter,
    dims,
    np_ptr,
    peek,
    readonly_numpy,
    stats_delta,
)
from lifetimes import balanced, frozen_heap, snapshot
from pycapsule import capsule_ptr

import bridge
from bridge.core.native import _C


@pytest.fixture(scope="module", autouse=True)
def _frozen_heap():
    yield from frozen_heap(*PEERS)


# ======================================================= 1. peers, both ways

# ------------------------------------------------------------------ NumPy


def test_numpy_from_bridge_aliases():
    t = bridge.arange(12, dtype=bridge.float32).reshape(3, 4)
    a = np.from_dlpack(t)
    assert a.shape == (3, 4) and a.dtype == np.float32
    assert np_ptr(a) == t.data_ptr()
    assert a.tolist() == t.tolist()
    assert a.flags.writeable
    a[1, 2] = -1.0
    assert t[1, 2].item() == -1.0
    t[0, 0] = 7.0
    assert a[0, 0] == 7.0


def test_bridge_from_numpy_aliases():
    arr = np.arange(12.0).reshape(3, 4)
    b = bridge.from_dlpack(arr)
    assert b.shape == (3, 4) and b.dtype is bridge.float64 and b.device == bridge.device("cpu")
    assert b.data_ptr() == np_ptr(arr)
    assert b.tolist() == arr.tolist()
    assert not b.is_readonly
    b[2, 3] = -5.0
    assert arr[2, 3] == -5.0
    arr[0, 1] = 9.0
    assert b[0, 1].item() == 9.0


def test_numpy_versioned_capsule_is_read_as_versioned():
    arr = np.arange(4.0)
    info = peek(arr.__dlpack__(max_version=(1, 3)))
    # NumPy answers a (1, 3) request with a 1.0 capsule: consumers must check.
    assert info["name"] == "dltensor_versioned" and info["version"][0] == 1
    b = bridge.from_dlpack(arr.__dlpack__(max_version=(1, 3)))
    assert b.data_ptr() == np_ptr(arr)


# ---------------------------------------------------------------- PyTorch


def test_torch_from_bridge_aliases():
    torch = pytest.importorskip("torch")
    t = bridge.arange(12, dtype=bridge.float32).reshape(3, 4)
    before = snapshot()
    x = torch.from_dlpack(t)
    assert stats_delta(before)["exports"] == 1
    assert x.shape == (3, 4) and x.dtype == torch.float32 and x.stride() == (4, 1)
    assert x.data_ptr() == t.data_ptr()
    assert x.tolist() == t.tolist()
    x[1, 1] = 42.0
    assert t[1, 1].item() == 42.0
    t[2, 3] = -3.0
    assert x[2, 3].item() == -3.0
    del x
    balanced(before)


def test_bridge_from_torch_uses_the_c_exchange_api(monkeypatch):
    torch = pytest.importorskip("torch")
    # torch >= 2.11 (the test extra pins 2.13) publishes it; bridge relies on it being used.
    assert hasattr(torch.Tensor, "__dlpack_c_exchange_api__")
    x = torch.arange(6.0).reshape(2, 3)

    def refuse(*args, **kwargs):
        raise AssertionError("bridge must not call torch.Tensor.__dlpack__ when the C API exists")

    # bridge caches the API per type; with __dlpack__ disabled, only the C API can succeed.
    monkeypatch.setattr(torch.Tensor, "__dlpack__", refuse)
    before = snapshot()
    b = bridge.from_dlpack(x)
    # torch's tensor is read from the DLTensor torch's API fills in, the tensor
    # object itself its owner: no managed tensor to import and release
    assert stats_delta(before) == {
        "exports": 0,
        "export_deleters": 0,
        "imports": 0,
        "import_releases": 0,
    }
    assert _C.stats()["api_imports"] == before["api_imports"] + 1
    assert b.untyped_storage().owner is x
    assert b.data_ptr() == x.data_ptr() and b.stride() == (3, 1)
    assert b.tolist() == x.tolist() and not b.is_readonly
    b[1, 2] = 99.0
    assert x[1, 2].item() == 99.0
    x[0, 0] = -1.0
    assert b[0, 0].item() == -1.0
    del b
    balanced(before)


def test_bridge_from_torch_keeps_torch_memory_alive():
    torch = pytest.importorskip("torch")
    x = torch.arange(1000.0)
    ptr = x.data_ptr()
    gone = weakref.ref(x)
    before = snapshot()
    b = bridge.from_dlpack(x)
    del x
    gc.collect()
    assert gone() is not None  # bridge's storage owns torch's tensor
    assert b.data_ptr() == ptr and b[999].item() == 999.0
    b[0] = 5.0
    assert b[0].item() == 5.0
    del b
    balanced(before)
    assert gone() is None  # and lets go of it with the last view


@pytest.mark.parametrize("copy", [None, True])
@pytest.mark.parametrize("view", ["conj", "neg"])
def test_bridge_from_torch_lazy_views_are_refused(view, copy):
    """torch 2.13's C exchange API (and its __dlpack__, for the negative bit)
    hands out lazy views whose memory does not hold their values: bridge refuses
    them rather than import wrong values."""
    torch = pytest.importorskip("torch")
    if view == "conj":
        x = torch.tensor([1 + 2j, 3 - 4j]).conj()
    else:
        x = torch.tensor([1 + 2j, 3 - 4j]).conj().imag  # a view with the negative bit
        assert x.is_neg()
    with pytest.raises(BufferError, match="resolve_"):
        bridge.from_dlpack(x, copy=copy)
    resolved = x.resolve_conj().resolve_neg()
    assert bridge.from_dlpack(resolved).tolist() == x.tolist()


def _torch_refusals(torch):
    """torch tensors torch's own __dlpack__ refuses, with the message it raises."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # quantized tensors are deprecated
        quantized = torch.quantize_per_tensor(torch.ones(2), 0.1, 0, torch.qint8)
    return {
        "requires_grad": (torch.ones(3, requires_grad=True),
                          "Can't export tensors that require gradient, use tensor.detach()"),
        "conj": (torch.tensor([1 + 2j]).conj(), "Can't export tensors with the conjugate bit set"),
        "sparse": (torch.ones(3).to_sparse(),
                   "Can't export tensors with layout other than torch.strided"),
        "quantized": (quantized, "QUInt/QInt types are not supported by dlpack"),
    }  # fmt: skip


@pytest.mark.parametrize("kind", ["requires_grad", "conj", "sparse", "quantized"])
@pytest.mark.parametrize("path", ["exchange-api", "protocol"])
def test_bridge_refuses_what_torch_refuses_to_export(torch, kind, path):
    """bridge takes torch tensors through torch's C exchange API, which skips the
    checks torch's __dlpack__ makes: bridge makes them, with torch's BufferError
    and its one-line message, on both paths."""
    x, message = _torch_refusals(torch)[kind]
    with pytest.raises(BufferError) as e:
        x.__dlpack__()
    assert str(e.value) == message
    before = snapshot()
    with pytest.raises(BufferError) as e:
        # device=/copy= take the protocol path; plain calls the exchange API
        bridge.from_dlpack(x) if path == "exchange-api" else bridge.from_dlpack(x, copy=False)
    assert message in str(e.value) and "\n" not in str(e.value)
    assert stats_delta(before)["imports"] == 0
    if kind == "requires_grad":
        assert bridge.from_dlpack(x.detach()).tolist() == [1.0, 1.0, 1.0]


# ---------------------------------------------------------------- pyarrow


def _arrow_values_address(arr) -> int:
    return arr.buffers()[1].address + arr.offset * arr.type.byte_width


def test_bridge_from_pyarrow_is_read_only_zero_copy():
    pa = pytest.importorskip("pyarrow")
    arr = pa.array(np.arange(10, dtype=np.int64))
    info = peek(arr.__dlpack__(max_version=(1, 3)))
    # pyarrow 26 exports versioned capsules flagged READ_ONLY (Arrow is immutable).
    assert info["name"] == "dltensor_versioned" and info["flags"] == READ_ONLY
    assert info["data"] == _arrow_values_address(arr)
    b = bridge.from_dlpack(arr)
    assert b.is_readonly
    assert b.dtype is bridge.int64 and b.shape == (10,)
    assert b.data_ptr() == _arrow_values_address(arr)
    assert b.tolist() == arr.to_pylist()
    with pytest.raises(ValueError):
        b[0] = 1
    with pytest.raises(ValueError):
        b.fill_(0)
    assert arr.to_pylist() == list(range(10))
    # read-only carries on to NumPy through a bridge export
    a = np.from_dlpack(b)
    assert np_ptr(a) == b.data_ptr() and not a.flags.writeable


@pytest.mark.parametrize(("offset", "length"), [(0, 10), (3, 4), (9, 1), (5, 0)])
def test_bridge_from_sliced_pyarrow(offset, length):
    pa = pytest.importorskip("pyarrow")
    base = pa.array(np.arange(10, dtype=np.float32))
    s = base.slice(offset, length)
    info = peek(s.__dlpack__(max_version=(1, 3)))
    assert info["shape"] == (length,)
    b = bridge.from_dlpack(s)
    assert b.shape == (length,) and b.is_readonly
    assert b.tolist() == s.to_pylist()
    if length:
        # the slice's offset lands in data (pyarrow) or byte_offset: bridge honours both
        assert info["data"] + info["byte_offset"] == _arrow_values_address(s)
        assert b.data_ptr() == base.buffers()[1].address + 4 * offset


def test_bridge_from_pyarrow_legacy_capsule_is_read_only():
    pa = pytest.importorskip("pyarrow")
    arr = pa.array(np.arange(6, dtype=np.float64))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # pyarrow deprecates legacy capsules
        cap = arr.__dlpack__()
    assert peek(cap)["name"] == "dltensor"
    b = bridge.from_dlpack(cap)
    # A legacy capsule has no flags: bridge cannot know whether the memory may be
    # written (Arrow's may not), so it imports it read-only, as NumPy does.
    assert b.is_readonly
    assert b.data_ptr() == _arrow_values_address(arr) and b.tolist() == arr.to_pylist()


def test_bridge_from_pyarrow_copy():
    pa = pytest.importorskip("pyarrow")
    arr = pa.array(np.arange(6, dtype=np.int32))
    info = peek(arr.__dlpack__(max_version=(1, 3), copy=True))
    assert info["flags"] == IS_COPIED  # a fresh copy is writable: no READ_ONLY
    b = bridge.from_dlpack(arr, copy=True)
    assert not b.is_readonly and b.data_ptr() != _arrow_values_address(arr)
    b[0] = 100
    assert arr.to_pylist()[0] == 0
    c = bridge.from_dlpack(arr, copy=False)
    assert c.is_readonly and c.data_ptr() == _arrow_values_address(arr)


def test_bridge_from_pyarrow_keeps_buffer_alive():
    pa = pytest.importorskip("pyarrow")
    arr = pa.array(np.arange(1000, dtype=np.int64))
    before = snapshot()
    b = bridge.from_dlpack(arr)
    del arr
    gc.collect()
    assert b[999].item() == 999 and b[0].item() == 0
    del b
    assert balanced(before)["imports"] == 1


@pytest.mark.parametrize(
    "make",
    [lambda pa: pa.array([True, False]), lambda pa: pa.array([1, None, 3])],
    ids=["bitpacked-bool", "nulls"],
)
def test_pyarrow_refuses_bool_and_nulls(make):
    pa = pytest.importorskip("pyarrow")
    arr = make(pa)
    before = snapshot()
    # pyarrow raises ArrowTypeError (a TypeError); bridge, as the spec says, retries once
    # without keywords (pyarrow then warns about the legacy request) and the error stands.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pytest.raises(TypeError):
            bridge.from_dlpack(arr)
    assert stats_delta(before)["imports"] == 0


# -------------------------------------------------------------------- JAX


def _jax():
    pytest.importorskip("jax")
    import jax
    import jax.dlpack
    import jax.numpy as jnp

    return jax, jnp


@pytest.mark.parametrize("entry", ["jax.dlpack.from_dlpack", "jnp.from_dlpack"])
def test_jax_from_bridge_contiguous_is_zero_copy(entry):
    jax, jnp = _jax()
    from_dlpack = jax.dlpack.from_dlpack if entry.startswith("jax.") else jnp.from_dlpack
    t = bridge.arange(12, dtype=bridge.float32).reshape(3, 4)
    assert t.data_ptr() % 64 == 0  # bridge allocations are 64-byte aligned
    before = snapshot()
    j = from_dlpack(t)
    assert j.shape == (3, 4) and j.dtype == jnp.float32
    assert np.asarray(j).tolist() == t.tolist()
    # jax imports aligned, compact CPU buffers without copying...
    assert j.unsafe_buffer_pointer() == t.data_ptr()
    # ...so a write through bridge is visible in the (nominally immutable) jax array
    t[0, 0] = 100.0
    assert float(j[0, 0]) == 100.0
    del t
    gc.collect()
    assert float(j[2, 3]) == 11.0  # jax keeps the export (and the memory) alive
    del j
    balanced(before)


def test_jax_accepts_transposed_bridge_tensor_without_copy():
    jax, _ = _jax()
    t = bridge.arange(12, dtype=bridge.float32).reshape(3, 4)
    tt = t.T
    assert tt.stride() == (1, 4)
    j = jax.dlpack.from_dlpack(tt)
    # A permutation of a compact buffer is "trivial striding" for jax: accepted, no copy.
    assert j.shape == (4, 3) and np.asarray(j).tolist() == tt.tolist()
    assert j.unsafe_buffer_pointer() == t.data_ptr()


@pytest.mark.parametrize("layout", ["stepped", "broadcast"])
def test_jax_refuses_non_compact_strides(layout):
    jax, _ = _jax()
    t = bridge.arange(12, dtype=bridge.float32).reshape(3, 4)
    x = t[:, ::2] if layout == "stepped" else t[0].expand(3, 4)
    before = snapshot()
    with pytest.raises(jax.errors.JaxRuntimeError, match="compact"):
        jax.dlpack.from_dlpack(x)
    balanced(before)  # the refused export was released


def test_jax_copies_unaligned_bridge_tensor():
    jax, _ = _jax()
    t = bridge.arange(17, dtype=bridge.float32)
    x = t[1:]
    assert x.data_ptr() % 64 == 4
    j = jax.dlpack.from_dlpack(x)
    assert np.asarray(j).tolist() == x.tolist()
    # jax needs 64-byte aligned CPU buffers: it copies this one, so writes are not shared
    assert j.unsafe_buffer_pointer() != x.data_ptr()
    x[0] = -1.0
    assert float(j[0]) == 1.0


def test_bridge_from_jax_aliases():
    _, jnp = _jax()
    ja = jnp.arange(6, dtype=jnp.float32).reshape(2, 3)
    # jax answers max_version=(1, 3) with a legacy capsule (no flags at all)
    assert peek(ja.__dlpack__(max_version=(1, 3)))["name"] == "dltensor"
    before = snapshot()
    b = bridge.from_dlpack(ja)
    assert b.data_ptr() == ja.unsafe_buffer_pointer()
    assert b.tolist() == np.asarray(ja).tolist() and b.stride() == (3, 1)
    # jax memory is immutable and its legacy capsule cannot say so: read-only
    assert b.is_readonly
    with pytest.raises(ValueError, match="read-only"):
        b[0, 0] = 42.0
    w = bridge.from_dlpack(ja, copy=True)  # the writable way: a copy
    assert not w.is_readonly and w.data_ptr() != b.data_ptr() and w.tolist() == b.tolist()
    del ja, w
    gc.collect()
    assert b[1, 2].item() == 5.0
    del b
    balanced(before)


def test_jax_cannot_take_a_read_only_bridge_tensor():
    jax, _ = _jax()
    r = bridge.from_dlpack(readonly_numpy(np.arange(4.0, dtype=np.float32)))
    before = snapshot()
    # jax asks for a legacy capsule, which cannot carry READ_ONLY: bridge refuses.
    with pytest.raises(BufferError, match="read-only"):
        jax.dlpack.from_dlpack(r)
    assert stats_delta(before)["exports"] == 0


# --------------------------------------------------------------- pydlpack


def test_pydlpack_wraps_bridge_tensor():
    dlpack = pytest.importorskip("dlpack")
    cached = len(dlpack.MemoryManager.cache)
    t = bridge.arange(6, dtype=bridge.float32)
    before = snapshot()
    obj = dlpack.asdlpack(t)
    # pydlpack reads our legacy capsule once, copies the struct and drops the capsule, so our
    # deleter runs at once; it keeps the bridge tensor object itself alive instead.
    assert stats_delta(before) == {
        "exports": 1,
        "export_deleters": 1,
        "imports": 0,
        "import_releases": 0,
    }
    assert obj.__dlpack_device__() == DLCPU
    a = np.from_dlpack(obj)
    assert np_ptr(a) == t.data_ptr() and a.tolist() == t.tolist()
    # bridge asks with max_version; pydlpack's __dlpack__(stream=None) raises TypeError; retry
    b = bridge.from_dlpack(obj)
    assert b.data_ptr() == t.data_ptr() and b.is_readonly  # pydlpack hands out legacy capsules
    t[0] = 5.0
    assert b[0].item() == 5.0 and a[0] == 5.0
    del obj, a, b, t
    d = balanced(before)
    assert d["imports"] == 1
    assert len(dlpack.MemoryManager.cache) == cached


def test_bridge_from_pydlpack_of_numpy():
    dlpack = pytest.importorskip("dlpack")
    cached = len(dlpack.MemoryManager.cache)
    arr = np.arange(6.0).reshape(2, 3).T
    base = sys.getrefcount(arr)
    b = bridge.from_dlpack(dlpack.asdlpack(arr))
    assert b.data_ptr() == np_ptr(arr) and b.stride() == (1, 3)
    assert b.tolist() == arr.tolist() and b.is_readonly  # a legacy capsule: read-only
    arr[2, 1] = -7.0
    assert b[2, 1].item() == -7.0
    del b
    gc.collect()
    assert sys.getrefcount(arr) == base
    assert len(dlpack.MemoryManager.cache) == cached


def test_pydlpack_cannot_take_a_read_only_bridge_tensor():
    dlpack = pytest.importorskip("dlpack")
    r = bridge.from_dlpack(readonly_numpy(np.arange(3.0)))
    # pydlpack only asks for legacy capsules, which cannot say READ_ONLY
    with pytest.raises(BufferError):
        dlpack.asdlpack(r)


# ---------------------------------------------------------------- tvm-ffi


def test_tvm_ffi_from_bridge_uses_our_c_exchange_api():
    tvm_ffi = pytest.importorskip("tvm_ffi")
    t = bridge.arange(12, dtype=bridge.float32).reshape(3, 4)
    before = snapshot()
    x = tvm_ffi.from_dlpack(t)
    assert stats_delta(before)["exports"] == 1
    assert tuple(x.shape) == (3, 4) and tuple(x.strides) == (4, 1)
    assert x.data_ptr() == t.data_ptr()
    a = np.from_dlpack(x)  # tvm tensors are not indexable: write through a NumPy view
    assert np_ptr(a) == t.data_ptr() and a.tolist() == t.tolist()
    a[2, 1] = -2.0
    assert t[2, 1].item() == -2.0
    t[0, 3] = 33.0
    assert a[0, 3] == 33.0
    xt = tvm_ffi.from_dlpack(t.T)
    assert tuple(xt.strides) == (1, 4) and xt.data_ptr() == t.data_ptr()
    del x, a, xt, t
    balanced(before)


def test_bridge_from_tvm_ffi_aliases():
    tvm_ffi = pytest.importorskip("tvm_ffi")
    t = bridge.arange(6, dtype=bridge.int32)
    before = snapshot()
    x = tvm_ffi.from_dlpack(t)
    b = bridge.from_dlpack(x)
    assert stats_delta(before)["imports"] == 1
    assert b.data_ptr() == x.data_ptr() == t.data_ptr()
    assert b.tolist() == list(range(6))
    b[5] = 50
    assert t[5].item() == 50
    del x, t
    gc.collect()
    assert b[5].item() == 50  # the chain bridge -> tvm -> bridge keeps the memory alive
    del b
    d = balanced(before)
    assert d["exports"] == 1 and d["imports"] == 1


def _tvm_test_wrapper():
    try:
        import tvm_ffi
    except ImportError:
        return None
    return getattr(tvm_ffi.core, "DLTensorTestWrapper", None)


@pytest.mark.skipif(
    _tvm_test_wrapper() is None, reason="needs tvm-ffi's DLTensorTestWrapper (tvm-ffi 0.1 has it)"
)
def test_bridge_from_tvm_ffi_through_an_exchange_api_producer():
    tvm_ffi = pytest.importorskip("tvm_ffi")
    wrapper_type = _tvm_test_wrapper()
    arr = np.arange(8.0)
    w = wrapper_type(tvm_ffi.from_dlpack(arr))
    assert hasattr(type(w), "__dlpack_c_exchange_api__")
    before = snapshot()
    b = bridge.from_dlpack(w)
    assert b.data_ptr() == np_ptr(arr) and b.tolist() == arr.tolist()
    b[3] = -3.0
    assert arr[3] == -3.0
    del b, w
    assert balanced(before)["imports"] == 1


# --------------------------------------------------- our C exchange API


def _call_our_exchange_export(t: bridge.Tensor) -> dict:
    api = ExchangeAPI.from_address(
        capsule_ptr(bridge.Tensor.__dlpack_c_exchange_api__, b"dlpack_exchange_api")
    )
    assert (api.major, api.minor) == (1, 3)
    out = ctypes.POINTER(Versioned)()
    assert FromPyObject(api.from_py_object)(t, ctypes.byref(out)) == 0
    m = out.contents
    shape, strides = dims(m.dl_tensor)
    info = {"version": (m.major, m.minor), "flags": m.flags, "data": m.dl_tensor.data,
            "shape": shape, "strides": strides}  # fmt: skip
    VersionedDeleter(m.deleter)(out)
    return info


@pytest.mark.parametrize("readonly", [False, True])
def test_our_exchange_api_export_carries_read_only(readonly):
    src = np.arange(12.0).reshape(3, 4)
    t = bridge.from_dlpack(readonly_numpy(src) if readonly else src).T
    before = snapshot()
    info = _call_our_exchange_export(t)
    assert info["flags"] == (READ_ONLY if readonly else 0)
    assert info["data"] == t.data_ptr() and info["shape"] == (4, 3) and info["strides"] == (1, 4)
    assert balanced(before)["exports"] == 1


# --------------------------------------------------- bridge <-> bridge


def test_bridge_from_bridge_is_a_view_without_export():
    t = bridge.arange(12, dtype=bridge.float32).reshape(3, 4).T
    before = snapshot()
    v = bridge.from_dlpack(t)
    assert stats_delta(before) == dict.fromkeys(
        ("exports", "export_deleters", "imports", "import_releases"), 0
    )
    assert v is not t and v.untyped_storage() is t.untyped_storage()
    assert v.data_ptr() == t.data_ptr() and v.stride() == t.stride() and v.tolist() == t.tolist()
    v[1, 2] = -1.0
    assert t[1, 2].item() == -1.0
    c = bridge.from_dlpack(t, copy=True)
    assert c.data_ptr() != t.data_ptr() and c.tolist() == t.tolist()


@pytest.mark.parametrize("max_version", [None, (0, 8), (1, 0), (1, 3), (2, 0)])
def test_bridge_from_bridge_capsule(max_version):
    t = bridge.arange(24, dtype=bridge.int16).reshape(2, 3, 4)[:, ::2, 1:]
    before = snapshot()
    cap = t.__dlpack__() if max_version is None else t.__dlpack__(max_version=max_version)
    info = peek(cap)
    if max_version is None or max_version[0] < 1:
        assert info["name"] == "dltensor"
    else:
        assert info["name"] == "dltensor_versioned" and info["version"] == (1, 3)
        assert info["flags"] == 0
    assert info["byte_offset"] == 0 and info["data"] == t.data_ptr()
    assert info["shape"] == t.shape and info["strides"] == t.stride()
    b = bridge.from_dlpack(cap)
    assert b.data_ptr() == t.data_ptr() and b.stride() == t.stride() and b.tolist() == t.tolist()
    assert b.is_readonly == (info["name"] == "dltensor")  # legacy capsules import read-only
    t[1, 1, 2] = 999
    assert b[1, 1, 2].item() == 999
    with pytest.raises(BufferError, match="consumed"):
        bridge.from_dlpack(cap)
    del b, cap
    d = balanced(before)
    assert d["exports"] == 1 and d["imports"] == 1


def test_bridge_from_torch_and_other_types_from_threads():
    """Imports of torch tensors (borrowed) and of other producer types from
    several threads at once: each thread's view is its own tensor's memory,
    and the per-type record bridge remembers switches types correctly."""
    import threading

    torch = pytest.importorskip("torch")
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            for i in range(300):
                x = torch.full((8,), float(k * 1000 + i))
                a = np.full(4, k * 1000 + i, dtype=np.int64)
                b = bridge.from_dlpack(x)
                c = bridge.from_dlpack(a)
                assert b.untyped_storage().owner is x and b.data_ptr() == x.data_ptr()
                assert b.tolist() == x.tolist() and c.tolist() == a.tolist()
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    before = snapshot()
    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    balanced(before)
