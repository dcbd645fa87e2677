"""DLPack exchanges with real peer libraries, both directions.

Every exchange checks values *and* aliasing (same data pointer, and a write on
one side is seen on the other wherever the consumer's array is writable), then
layouts and dtypes over NumPy and PyTorch, read-only handling, reference
counts, and leaks over 100,000 round trips (resident memory and the C
counters of ``bridge._C.stats()``).

Peers other than NumPy are optional: each test skips where its peer is not
installed. What the peers themselves do (copies, flags they drop, refusals)
is asserted as observed with the versions pinned in pyproject.toml, and
commented where it is surprising.
"""

from __future__ import annotations

import ctypes
import gc
import signal
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
from lifetimes import DLPACK_KEYS, RSS_BUDGET, balanced, delta, frozen_heap, round_trips, snapshot

import bridge

READ_ONLY = 1
IS_COPIED = 2
DLCPU = (1, 0)

# ------------------------------------------------------------- helpers


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device_type", ctypes.c_int32),
        ("device_id", ctypes.c_int32),
        ("ndim", ctypes.c_int32),
        ("code", ctypes.c_uint8),
        ("bits", ctypes.c_uint8),
        ("lanes", ctypes.c_uint16),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _Versioned(ctypes.Structure):
    _fields_ = [
        ("major", ctypes.c_uint32),
        ("minor", ctypes.c_uint32),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", _DLTensor),
    ]


class _ExchangeAPI(ctypes.Structure):
    _fields_ = [
        ("major", ctypes.c_uint32),
        ("minor", ctypes.c_uint32),
        ("prev_api", ctypes.c_void_p),
        ("allocator", ctypes.c_void_p),
        ("from_py_object", ctypes.c_void_p),
        ("to_py_object", ctypes.c_void_p),
        ("dltensor_from_py_object", ctypes.c_void_p),
        ("current_work_stream", ctypes.c_void_p),
    ]


# A private handle, so that our argtypes never clash with another user of
# ctypes.pythonapi (pydlpack sets its own on the shared one). PyDLL keeps the GIL.
_PY = ctypes.PyDLL(None)
_capsule_name = _PY.PyCapsule_GetName
_capsule_name.restype = ctypes.c_char_p
_capsule_name.argtypes = (ctypes.py_object,)
_capsule_ptr = _PY.PyCapsule_GetPointer
_capsule_ptr.restype = ctypes.c_void_p
_capsule_ptr.argtypes = (ctypes.py_object, ctypes.c_char_p)

_FromPyObject = ctypes.PYFUNCTYPE(
    ctypes.c_int, ctypes.py_object, ctypes.POINTER(ctypes.POINTER(_Versioned))
)
_VersionedDeleter = ctypes.PYFUNCTYPE(None, ctypes.POINTER(_Versioned))


def _dims(t: _DLTensor) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    shape = tuple(t.shape[i] for i in range(t.ndim))
    strides = None if not t.strides else tuple(t.strides[i] for i in range(t.ndim))
    return shape, strides


def peek(capsule) -> dict:
    """The header of an unconsumed DLPack capsule, read without consuming it
    (its destructor still frees it)."""
    name = _capsule_name(capsule)
    ptr = _capsule_ptr(capsule, name)
    if name == b"dltensor_versioned":
        m = _Versioned.from_address(ptr)
        t, version, flags = m.dl_tensor, (m.major, m.minor), m.flags
    else:
        assert name == b"dltensor", name
        t, version, flags = _DLTensor.from_address(ptr), None, None
    shape, strides = _dims(t)
    return {
        "name": name.decode(),
        "version": version,
        "flags": flags,
        "data": t.data or 0,
        "byte_offset": t.byte_offset,
        "shape": shape,
        "strides": strides,
        "dtype": (t.code, t.bits, t.lanes),
    }


def stats_delta(before: dict) -> dict:
    return delta(before, DLPACK_KEYS)


def np_ptr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def np_elem_strides(a: np.ndarray) -> tuple[int, ...]:
    assert all(s % a.itemsize == 0 for s in a.strides)
    return tuple(s // a.itemsize for s in a.strides)


def first(ndim: int) -> tuple[int, ...]:
    return (0,) * ndim


class CopyingExporter:
    """Forwards to ``t.__dlpack__(max_version=(1, 3), copy=True)`` whatever the consumer asks."""

    def __init__(self, t: bridge.Tensor) -> None:
        self.t = t

    def __dlpack__(self, **kwargs):
        return self.t.__dlpack__(max_version=(1, 3), copy=True)

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()


def readonly_numpy(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


@pytest.fixture(scope="module", autouse=True)
def _frozen_heap():
    yield from frozen_heap("torch", "jax", "jax.dlpack", "jax.numpy", "pyarrow", "tvm_ffi", "dlpack")


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
    assert stats_delta(before) == {
        "exports": 0,
        "export_deleters": 0,
        "imports": 1,
        "import_releases": 0,
    }
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
    before = snapshot()
    b = bridge.from_dlpack(x)
    del x
    gc.collect()
    assert b.data_ptr() == ptr and b[999].item() == 999.0
    b[0] = 5.0
    assert b[0].item() == 5.0
    del b
    assert balanced(before)["import_releases"] == 1


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
    api = _ExchangeAPI.from_address(
        _capsule_ptr(bridge.Tensor.__dlpack_c_exchange_api__, b"dlpack_exchange_api")
    )
    assert (api.major, api.minor) == (1, 3)
    out = ctypes.POINTER(_Versioned)()
    assert _FromPyObject(api.from_py_object)(t, ctypes.byref(out)) == 0
    m = out.contents
    shape, strides = _dims(m.dl_tensor)
    info = {"version": (m.major, m.minor), "flags": m.flags, "data": m.dl_tensor.data,
            "shape": shape, "strides": strides}  # fmt: skip
    _VersionedDeleter(m.deleter)(out)
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


def test_bridge_unconsumed_capsule_is_released():
    t = bridge.arange(4)
    keep = t.untyped_storage().owner
    base = sys.getrefcount(keep)
    before = snapshot()
    cap = t.__dlpack__(max_version=(1, 3))
    assert sys.getrefcount(keep) == base + 1
    del cap
    assert sys.getrefcount(keep) == base
    assert balanced(before)["exports"] == 1


# =========================================================== 2. layouts


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


# ========================================================== 3. read-only


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


# =========================================================== 4. refcounts


def test_refcount_export_consumed_by_numpy():
    t = bridge.arange(10, dtype=bridge.float32)
    keep = t.untyped_storage().owner
    assert keep is not None
    base = sys.getrefcount(keep)
    before = snapshot()
    a = np.from_dlpack(t)
    assert sys.getrefcount(keep) == base + 1  # the export's manager_ctx
    del a
    assert sys.getrefcount(keep) == base
    assert balanced(before)["exports"] == 1


def test_refcount_import_from_numpy():
    arr = np.arange(10.0)
    base = sys.getrefcount(arr)
    before = snapshot()
    b = bridge.from_dlpack(arr)
    v = b[2:5][::-1]
    assert sys.getrefcount(arr) == base + 1  # NumPy's export, held by one guard
    del b
    assert sys.getrefcount(arr) == base + 1  # the view still holds it
    del v
    assert sys.getrefcount(arr) == base
    assert balanced(before)["import_releases"] == 1


def test_refcount_chain_numpy_bridge_torch_numpy():
    torch = pytest.importorskip("torch")
    arr = np.arange(12.0).reshape(3, 4)
    base = sys.getrefcount(arr)
    before = snapshot()
    b = bridge.from_dlpack(arr)
    x = torch.from_dlpack(b)
    out = np.from_dlpack(x)
    assert np_ptr(out) == b.data_ptr() == x.data_ptr() == np_ptr(arr)
    del b, x  # the middle of the chain goes first
    gc.collect()
    out[2, 3] = -1.0
    assert arr[2, 3] == -1.0 and out.tolist() == arr.tolist()
    assert sys.getrefcount(arr) > base
    del out
    gc.collect()
    assert sys.getrefcount(arr) == base
    d = balanced(before)
    assert d["imports"] == 1 and d["exports"] == 1


def test_consumer_dies_before_producer():
    t = bridge.arange(100, dtype=bridge.int64)
    keep = t.untyped_storage().owner
    base = sys.getrefcount(keep)
    before = snapshot()
    a = np.from_dlpack(t)
    del a
    assert sys.getrefcount(keep) == base
    assert t[99].item() == 99
    del t
    balanced(before)


def test_consumer_outlives_producer_export():
    t = bridge.arange(100, dtype=bridge.int64)
    keep = t.untyped_storage().owner
    base = sys.getrefcount(keep)
    before = snapshot()
    a = np.from_dlpack(t)
    del t
    gc.collect()
    assert sys.getrefcount(keep) == base  # the tensor's own ref went, the export's stayed
    assert a.tolist() == list(range(100))
    a[:] = a[::-1].copy()
    assert a[0] == 99
    assert stats_delta(before)["export_deleters"] == 0
    del a
    assert sys.getrefcount(keep) == base - 1
    balanced(before)


def test_consumer_outlives_producer_import():
    arr = np.arange(100.0)
    before = snapshot()
    b = bridge.from_dlpack(arr)
    del arr
    gc.collect()
    assert b[99].item() == 99.0
    b[0] = -1.0
    assert b[0].item() == -1.0
    assert stats_delta(before)["import_releases"] == 0
    del b
    assert balanced(before)["import_releases"] == 1


def test_consumer_outlives_producer_torch_both_ways():
    torch = pytest.importorskip("torch")
    before = snapshot()
    t = bridge.arange(50, dtype=bridge.float32)
    x = torch.from_dlpack(t)
    del t
    gc.collect()
    assert x[49].item() == 49.0
    y = torch.arange(50.0)
    b = bridge.from_dlpack(y)
    del y
    gc.collect()
    assert b[49].item() == 49.0
    del x, b
    balanced(before)


# ============================================================== 5. leaks


def _leak_cases():
    """name -> (setup() -> one round trip, iterations, exports and imports per trip)."""

    def numpy_export():
        t = bridge.arange(64, dtype=bridge.float32)
        return lambda: np.from_dlpack(t)

    def numpy_import():
        arr = np.arange(64.0)
        return lambda: bridge.from_dlpack(arr)

    def numpy_round_trip():
        arr = np.arange(64.0)
        return lambda: np.from_dlpack(bridge.from_dlpack(arr))

    def torch_export():
        torch = pytest.importorskip("torch")
        t = bridge.arange(64, dtype=bridge.float32)
        return lambda: torch.from_dlpack(t)

    def torch_import():
        torch = pytest.importorskip("torch")
        x = torch.arange(64.0)
        return lambda: bridge.from_dlpack(x)

    def tvm_export():
        tvm_ffi = pytest.importorskip("tvm_ffi")
        t = bridge.arange(64, dtype=bridge.float32)
        return lambda: tvm_ffi.from_dlpack(t)

    def tvm_import():
        tvm_ffi = pytest.importorskip("tvm_ffi")
        x = tvm_ffi.from_dlpack(np.arange(64.0))
        return lambda: bridge.from_dlpack(x)

    def bridge_capsule():
        t = bridge.arange(64, dtype=bridge.float32)
        return lambda: bridge.from_dlpack(t.__dlpack__(max_version=(1, 3)))

    def bridge_legacy_capsule():
        t = bridge.arange(64, dtype=bridge.float32)[::2]
        return lambda: bridge.from_dlpack(t.__dlpack__())

    def bridge_unconsumed_capsule():
        t = bridge.arange(64, dtype=bridge.float32)
        return lambda: t.__dlpack__(max_version=(1, 3))

    def bridge_self():
        t = bridge.arange(64, dtype=bridge.float32)
        return lambda: bridge.from_dlpack(t)

    def pyarrow_import():
        pa = pytest.importorskip("pyarrow")
        arr = pa.array(np.arange(64, dtype=np.int64))
        return lambda: bridge.from_dlpack(arr)

    def pydlpack_round_trip():
        dlpack = pytest.importorskip("dlpack")
        t = bridge.arange(64, dtype=bridge.float32)
        return lambda: bridge.from_dlpack(dlpack.asdlpack(t))

    n = 100_000
    return {
        "numpy-export": (numpy_export, n, 1, 0),
        "numpy-import": (numpy_import, n, 0, 1),
        "numpy-round-trip": (numpy_round_trip, n, 1, 1),
        "torch-export": (torch_export, n, 1, 0),
        "torch-import": (torch_import, n, 0, 1),
        "tvm-ffi-export": (tvm_export, n, 1, 0),
        "tvm-ffi-import": (tvm_import, n, 0, 1),
        "bridge-capsule": (bridge_capsule, n, 1, 1),
        "bridge-legacy-capsule": (bridge_legacy_capsule, n, 1, 1),
        "bridge-unconsumed-capsule": (bridge_unconsumed_capsule, n, 1, 0),
        "bridge-self": (bridge_self, n, 0, 0),
        "pyarrow-import": (pyarrow_import, n, 0, 1),
        "pydlpack-round-trip": (pydlpack_round_trip, 10_000, 1, 1),  # ~40 us a trip
    }


LEAK_CASES = _leak_cases()


@pytest.mark.parametrize("case", list(LEAK_CASES))
def test_no_leak_over_many_round_trips(case):
    setup, n, exports, imports = LEAK_CASES[case]
    d, grown = round_trips(setup(), n, max(n // 10, 2_000))
    assert d["exports"] == n * exports and d["imports"] == n * imports, d
    assert grown < RSS_BUDGET, f"resident memory grew by {grown} bytes over {n} round trips"
