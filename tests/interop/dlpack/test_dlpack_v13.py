"""DLPack v1.3's rules past the basics: packed sub-byte types both ways, the
exchange API's version chain, strides never NULL on export (and NULL
strides on import by version), and the array API's stream / device / copy
wording. Hand-made producers are cffi structs (``handmade.Handmade``) and C
tables of ``bridge._drivers``; peers where installed."""

from __future__ import annotations

import ctypes
import gc

import numpy as np
import pytest
from bridge._native import ffi
from handmade import Handmade, deleter_calls

import bridge
from bridge.core.native import _C, _drivers
from bridge.dlpack import FLAG_IS_COPIED, FLAG_IS_SUBBYTE_TYPE_PADDED, FLAG_READ_ONLY

F4 = 17  # kDLFloat4_e2m1fn
F6 = 16  # kDLFloat6_e3m2fn


# The capsules managed() read: kept for the session, so the structs read stay valid.
_READ: list[object] = []


def managed(capsule):
    """The DLManagedTensor[Versioned] behind an unconsumed capsule (not consumed; kept alive)."""
    _READ.append(capsule)
    name, addr = _drivers.capsule_info(capsule)
    kind = "DLManagedTensorVersioned *" if name == "dltensor_versioned" else "DLManagedTensor *"
    return name, ffi.cast(kind, addr)


def raw(ptr: int, n: int) -> bytes:
    return bytes((ctypes.c_uint8 * n).from_address(ptr))


def pack(values: list[int], bits: int) -> np.ndarray:
    """DLPack's packed layout of ``values`` (little bit-endian), in a uint8 buffer."""
    acc = sum(v << (i * bits) for i, v in enumerate(values))
    n = (len(values) * bits + 7) // 8
    return np.frombuffer(acc.to_bytes(n, "little") + bytes(8), np.uint8).copy()


def padded_f4(codes: list[int], shape: tuple[int, ...]) -> bridge.Tensor:
    """A float4_e2m1fn tensor (one value per byte) of these 4-bit codes."""
    return bridge.tensor(codes, dtype=bridge.uint8).reshape(shape).view(bridge.float4_e2m1fn)


CODES = [1, 2, 3, 4, 5, 6, 7, 10, 0, 15, 8, 9]  # 0.5 1 1.5 2 3 4 6 -1 0 -6 -0 -0.5


# ------------------------------------------------------------ packed import


@pytest.mark.parametrize("versioned", [True, False])
def test_packed_float4_is_viewed_in_place_as_x2(versioned):
    buf = pack(CODES, 4)
    h = Handmade(versioned=versioned, shape=(3, 4), code=F4, bits=4, buf=buf)
    t = bridge.from_dlpack(h.capsule())
    assert t.dtype is bridge.float4_e2m1fn_x2 and t.dtype.dlpack == (F4, 4, 2)
    assert t.shape == (3, 2) and t.stride() == (2, 1)
    assert t.data_ptr() == buf.ctypes.data  # zero-copy
    assert t.view(bridge.uint8).tolist() == [[0x21, 0x43], [0x65, 0xA7], [0xF0, 0x98]]
    assert t.is_readonly == (not versioned)  # a legacy capsule is read-only


@pytest.mark.parametrize("strides, shape", [((8, 1), (3, 4)), ((2, 1), (3, 2)), ((1,), (12,))])
def test_packed_views_keep_whole_byte_strides(strides, shape):
    h = Handmade(shape=shape, strides=strides, code=F4, bits=4, buf=pack(CODES, 4))
    t = bridge.from_dlpack(h.capsule())
    assert t.shape == (*shape[:-1], shape[-1] // 2)
    assert t.stride() == (*(s // 2 for s in strides[:-1]), 1)


def test_packed_negative_row_strides_are_viewed_too():
    buf = pack(CODES, 4)
    t = bridge.from_dlpack(Handmade(shape=(3, 4), strides=(-4, 1), code=F4, bits=4, buf=buf, byte_offset=4).capsule())
    assert t.dtype is bridge.float4_e2m1fn_x2 and t.stride() == (-2, 1)
    assert t.view(bridge.uint8).tolist() == [[0xF0, 0x98], [0x65, 0xA7], [0x21, 0x43]]


@pytest.mark.parametrize(
    "shape, strides, byte_offset",
    [((3, 3), (4, 1), 0), ((2, 4), (4, 2), 0), ((2, 2), (3, 1), 0), ((3, 3), (-4, 1), 4),
     ((3, 2), (4, 3), 0)],
    ids=["odd-last-dim", "stepped-last-dim", "odd-row-stride", "negative-rows-odd-last-dim",
         "pairs-apart"],
)
def test_packed_layouts_a_view_cannot_hold_need_copy_true(shape, strides, byte_offset):
    def handmade():
        return Handmade(shape=shape, strides=strides, code=F4, bits=4, buf=pack(CODES, 4), byte_offset=byte_offset)

    before = deleter_calls()
    with pytest.raises(BufferError, match="packed") as e:
        bridge.from_dlpack(handmade().capsule())
    assert "copy=True" in str(e.value)
    gc.collect()
    assert deleter_calls() == before + 1  # consumed, released once
    before = deleter_calls()
    u = bridge.from_dlpack(handmade().capsule(), copy=True)
    gc.collect()
    assert deleter_calls() == before + 1  # unpacked into new memory: the producer's is let go at once
    assert u.dtype is bridge.float4_e2m1fn and u.shape == shape and not u.is_readonly
    base = byte_offset * 2
    want = [[CODES[base + i * strides[0] + j * strides[1]] for j in range(shape[1])] for i in range(shape[0])]
    assert u.view(bridge.uint8).tolist() == want


def test_copy_true_unpacks_even_where_a_view_fits():
    h = Handmade(shape=(3, 4), code=F4, bits=4, buf=pack(CODES, 4))
    u = bridge.from_dlpack(h.capsule(), copy=True)
    assert u.dtype is bridge.float4_e2m1fn and u.shape == (3, 4)
    assert u.view(bridge.uint8).flatten().tolist() == CODES
    v = bridge.from_dlpack(Handmade(shape=(3, 4), code=F4, bits=4, buf=pack(CODES, 4)).capsule())
    assert bridge.from_dlpack(v, copy=True).dtype is bridge.float4_e2m1fn_x2  # bridge's own: a plain copy


def test_packed_float6_values_straddle_bytes():
    codes = [0x3F, 0x01, 0x2A, 0x15, 0x00, 0x33]
    h = Handmade(shape=(2, 3), code=F6, bits=6, buf=pack(codes, 6))
    with pytest.raises(BufferError, match="packed"):
        bridge.from_dlpack(h.capsule())
    u = bridge.from_dlpack(Handmade(shape=(2, 3), code=F6, bits=6, buf=pack(codes, 6)).capsule(), copy=True)
    assert u.dtype is bridge.float6_e3m2fn
    assert u.view(bridge.uint8).flatten().tolist() == codes


def test_padded_flag_means_one_value_per_byte():
    buf = np.array(CODES, np.uint8)
    h = Handmade(shape=(3, 4), code=F4, bits=4, flags=FLAG_IS_SUBBYTE_TYPE_PADDED, buf=buf)
    t = bridge.from_dlpack(h.capsule())
    assert t.dtype is bridge.float4_e2m1fn and t.data_ptr() == buf.ctypes.data
    assert t.view(bridge.uint8).flatten().tolist() == CODES


def test_lanes_two_of_four_bits_is_the_x2_type():
    buf = pack(CODES, 4)
    t = bridge.from_dlpack(Handmade(shape=(3, 2), code=F4, bits=4, lanes=2, buf=buf).capsule())
    assert t.dtype is bridge.float4_e2m1fn_x2 and t.shape == (3, 2) and t.data_ptr() == buf.ctypes.data
    with pytest.raises(BufferError, match="lanes=2"):  # packed by its type, padded by its flag: refused
        bridge.from_dlpack(Handmade(shape=(3, 2), code=F4, bits=4, lanes=2, buf=buf,
                                    flags=FLAG_IS_SUBBYTE_TYPE_PADDED).capsule())  # fmt: skip


def test_packed_device_memory_is_not_unpacked():
    with pytest.raises(BufferError, match="host memory only"):
        bridge.from_dlpack(Handmade(shape=(3, 3), code=F4, bits=4, device=(2, 0)).capsule(), copy=True)


def test_x2_has_no_numpy_dtype_and_prints_its_bytes():
    t = bridge.tensor([0x21, 0xA7], dtype=bridge.uint8).view(bridge.float4_e2m1fn_x2)
    with pytest.raises(TypeError, match="packs 2 values into each byte"):
        _ = t.dtype.numpy_dtype
    assert "raw bits" in repr(t) and "float4_e2m1fn_x2" in repr(t)
    assert bridge.get_dtype("float4_e2m1fn_x2") is bridge.float4_e2m1fn_x2
    assert bridge.float4_e2m1fn_x2 not in bridge.all_dtypes()
    assert t.clone().view(bridge.uint8).tolist() == [0x21, 0xA7]
    with pytest.raises(TypeError, match="not defined"):
        bridge.promote_types(bridge.float4_e2m1fn_x2, bridge.float4_e2m1fn)


# ------------------------------------------------------------ packed export


def test_legacy_capsule_of_padded_float4_is_a_packed_copy():
    t = padded_f4(CODES, (3, 4))
    name, m = managed(t.__dlpack__())
    dl = m.dl_tensor
    assert name == "dltensor" and (dl.dtype.code, dl.dtype.bits, dl.dtype.lanes) == (F4, 4, 1)
    assert [dl.shape[i] for i in range(2)] == [3, 4] and [dl.strides[i] for i in range(2)] == [4, 1]
    data = int(ffi.cast("uintptr_t", dl.data))
    assert data != t.data_ptr()
    assert raw(data, 6) == bytes([0x21, 0x43, 0x65, 0xA7, 0xF0, 0x98])
    # strided views pack in C order; bridge reads its own legacy capsule back
    v = t.t()[1:]
    back = bridge.from_dlpack(v.__dlpack__(), copy=True)
    assert back.view(bridge.uint8).tolist() == v.view(bridge.uint8).tolist()


def test_legacy_capsule_of_padded_float6_packs_across_bytes():
    codes = [0x3F, 0x01, 0x2A, 0x15]
    t = bridge.tensor(codes, dtype=bridge.uint8).view(bridge.float6_e2m3fn)
    _, m = managed(t.__dlpack__())
    assert raw(int(ffi.cast("uintptr_t", m.dl_tensor.data)), 3) == pack(codes, 6)[:3].tobytes()


def test_padded_subbyte_legacy_export_without_a_copy_is_refused():
    t = padded_f4(CODES, (3, 4))
    with pytest.raises(BufferError, match="packed"):
        t.__dlpack__(copy=False)
    _, m = managed(t.__dlpack__(max_version=(1, 3)))  # versioned: padded, flagged, shared
    assert m.flags & FLAG_IS_SUBBYTE_TYPE_PADDED and int(ffi.cast("uintptr_t", m.dl_tensor.data)) == t.data_ptr()
    _, m = managed(t.__dlpack__(max_version=(1, 3), copy=False))
    assert m.flags == FLAG_IS_SUBBYTE_TYPE_PADDED


def test_x2_exports_packed_as_lanes_two():
    t = bridge.tensor([[0x21, 0x43]], dtype=bridge.uint8).view(bridge.float4_e2m1fn_x2)
    for mv in (None, (1, 3)):
        name, m = managed(t.__dlpack__(max_version=mv))
        dl = m.dl_tensor
        assert (dl.dtype.code, dl.dtype.bits, dl.dtype.lanes) == (F4, 4, 2)
        assert int(ffi.cast("uintptr_t", dl.data)) == t.data_ptr()
        if name == "dltensor_versioned":
            assert not m.flags & FLAG_IS_SUBBYTE_TYPE_PADDED
    peek = _drivers.api_peek(bridge.Tensor.__dlpack_c_exchange_api__, t)
    assert peek[4:7] == (F4, 4, 2)


def test_padded_subbyte_exports_never_give_null_strides():
    t = padded_f4(CODES, (3, 4)).t()
    for cap in (t.__dlpack__(max_version=(1, 3)), t.__dlpack__(), t.__dlpack__(max_version=(1, 3), copy=True)):
        _, m = managed(cap)
        assert m.dl_tensor.strides != ffi.NULL


def test_bare_dltensor_of_padded_subbyte_is_refused():
    with pytest.raises(BufferError, match="IS_SUBBYTE_TYPE_PADDED"):
        _drivers.api_peek(bridge.Tensor.__dlpack_c_exchange_api__, padded_f4(CODES, (12,)))


def test_jax_float4_legacy_capsule_is_packed():
    jnp = pytest.importorskip("jax.numpy")
    ml_dtypes = pytest.importorskip("ml_dtypes")
    vals = np.array(CODES, np.uint8).view(ml_dtypes.float4_e2m1fn).reshape(3, 4)
    a = jnp.asarray(vals)
    name, m = managed(a.__dlpack__())
    assert name == "dltensor" and (m.dl_tensor.dtype.code, m.dl_tensor.dtype.bits) == (F4, 4)
    x = bridge.from_dlpack(a)  # jax packs: six bytes for twelve values, seen in place
    assert x.dtype is bridge.float4_e2m1fn_x2 and x.shape == (3, 2) and x.is_readonly
    assert x.data_ptr() == a.unsafe_buffer_pointer()
    assert x.view(bridge.uint8).flatten().tolist() == [0x21, 0x43, 0x65, 0xA7, 0xF0, 0x98]
    u = bridge.from_dlpack(a, copy=True)
    assert u.dtype is bridge.float4_e2m1fn
    assert np.array_equal(np.asarray(u).astype(np.float32), vals.astype(np.float32))
    with pytest.raises(BufferError, match="packed"):
        bridge.from_dlpack(a[:, :3])


def test_torch_float4_x2_both_ways(torch):
    tt = torch.tensor([[0x21, 0x43], [0x65, 0xA7]], dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    x = bridge.from_dlpack(tt)
    assert x.dtype is bridge.float4_e2m1fn_x2 and x.data_ptr() == tt.data_ptr()
    back = torch.from_dlpack(x)
    assert back.dtype == torch.float4_e2m1fn_x2 and back.data_ptr() == tt.data_ptr()
    assert torch.from_dlpack(bridge.from_dlpack(tt.__dlpack__())).view(torch.uint8).tolist() == [[33, 67], [101, 167]]


# ------------------------------------------------- exchange API version chain


class _Chained:
    """An object whose type publishes a given exchange API (a chain from the
    drivers), over a bridge tensor; ``__dlpack__`` when ``protocol``."""

    def __init__(self, tensor: bridge.Tensor) -> None:
        self.tensor = tensor


def _chained_type(majors: tuple[int, ...], loop: bool = False, protocol: bool = True) -> type:
    ns: dict[str, object] = {"__dlpack_c_exchange_api__": _drivers.exchange_chain(majors, loop)}
    if protocol:
        ns["__dlpack__"] = lambda self, **kw: self.tensor.__dlpack__(**kw)
        ns["__dlpack_device__"] = lambda self: self.tensor.__dlpack_device__()
    return type(f"Chained{'_'.join(map(str, majors))}", (_Chained,), ns)


# The chain's walks and api_imports are counted for the whole process.
CHAIN_COUNTS = pytest.mark.thread_unsafe(
    reason="counts the drivers' exchange-chain walks and _C.stats()'s api_imports, "
    "process-wide counters that the other test threads' imports move too"
)


@CHAIN_COUNTS
@pytest.mark.parametrize("majors", [(2, 1), (3, 2, 1), (1,)])
def test_consumer_walks_the_chain_to_major_one(majors):
    t = bridge.arange(6.0).reshape(2, 3)
    obj = _chained_type(majors)(t)
    known, unknown = _drivers.exchange_chain_calls()
    before = _C.stats()["api_imports"]
    x = bridge.from_dlpack(obj)
    assert x.data_ptr() == t.data_ptr() and x.tolist() == t.tolist()
    assert _drivers.exchange_chain_calls() == (known + 1, unknown)  # the major 1 table, only
    assert _C.stats()["api_imports"] == before + 1


@CHAIN_COUNTS
@pytest.mark.parametrize("majors, loop", [((2,), False), ((3, 2), False), ((2, 3), True)])
def test_a_chain_without_major_one_falls_back_to_dlpack(majors, loop):
    t = bridge.arange(3.0)
    calls = _drivers.exchange_chain_calls()
    before = _C.stats()["api_imports"]
    x = bridge.from_dlpack(_chained_type(majors, loop)(t))
    assert x.data_ptr() == t.data_ptr()
    assert _drivers.exchange_chain_calls() == calls and _C.stats()["api_imports"] == before
    with pytest.raises(BufferError, match="holds no major version 1 table"):
        bridge.from_dlpack(_chained_type(majors, loop, protocol=False)(t))
    assert _drivers.exchange_chain_calls() == calls


def test_drivers_walk_the_chain_too():
    t = bridge.arange(3.0)
    chain = _drivers.exchange_chain((2, 1))
    obj = _chained_type((2, 1))(t)
    assert _drivers.api_peek(chain, obj)[7] == (3,)
    ours = bridge.Tensor.__dlpack_c_exchange_api__
    assert _drivers.api_convert(chain, ours, obj).data_ptr() == t.data_ptr()
    with pytest.raises(BufferError, match="holds no major version 1 table"):
        _drivers.api_convert(_drivers.exchange_chain((2, 3)), ours, obj)


def test_bridge_table_has_no_older_versions():
    class Header(ctypes.Structure):
        _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32), ("prev_api", ctypes.c_void_p)]

    api = bridge.Tensor.__dlpack_c_exchange_api__
    pythonapi = ctypes.PyDLL(None)
    pythonapi.PyCapsule_GetPointer.restype = ctypes.c_void_p
    pythonapi.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    h = Header.from_address(pythonapi.PyCapsule_GetPointer(api, b"dlpack_exchange_api"))
    assert (h.major, h.minor, h.prev_api) == (1, 3, None)


# ------------------------------------------------------------------ strides


def _export_paths(t: bridge.Tensor):
    """(path, strides pointer, ndim) of every way bridge hands out a DLTensor."""
    api = bridge.Tensor.__dlpack_c_exchange_api__
    for path, cap in (("versioned", t.__dlpack__(max_version=(1, 3))), ("legacy", t.__dlpack__()),
                      ("copy", t.__dlpack__(max_version=(1, 3), copy=True))):  # fmt: skip
        _, m = managed(cap)
        yield path, int(ffi.cast("uintptr_t", m.dl_tensor.strides)), m.dl_tensor.ndim
    peek = _drivers.api_peek(api, t)
    yield "dltensor_from_py_object", peek[11], peek[3]
    # managed_tensor_from_py_object_no_sync, handed to bridge's to_py_object, which refuses a
    # v1.3 tensor with NULL strides: taken, and with the strides given
    back = _drivers.api_convert(api, api, t)
    yield "managed_tensor_from_py_object", int(back.stride() == t.stride()), t.ndim


@pytest.mark.parametrize(
    "make",
    [lambda: bridge.arange(6.0).reshape(2, 3), lambda: bridge.arange(6.0).reshape(2, 3).t(),
     lambda: bridge.zeros(0, 3), lambda: bridge.zeros(1, 1, 1),
     lambda: bridge.zeros(4, 2, dtype=bridge.uint8).view(bridge.float4_e2m1fn_x2)],
    ids=["contiguous", "transposed", "zero-size", "size-1", "float4_x2"],
)  # fmt: skip
def test_no_export_path_gives_null_strides(make):
    for path, strides, ndim in _export_paths(make()):
        assert ndim > 0 and strides != 0, path


def test_null_strides_by_producer_version():
    buf = np.arange(6.0, dtype=np.float32)
    for minor in (0, 1):  # before v1.2: NULL is compact row-major
        t = bridge.from_dlpack(Handmade(shape=(2, 3), minor=minor, null_strides=True, buf=buf).capsule())
        assert t.stride() == (3, 1) and t.tolist() == [[0, 1, 2], [3, 4, 5]]
    t = bridge.from_dlpack(Handmade(versioned=False, shape=(2, 3), null_strides=True, buf=buf).capsule())
    assert t.stride() == (3, 1)
    for minor in (2, 3):  # since v1.2 strides must be set: refused, released once
        before = deleter_calls()
        with pytest.raises(BufferError, match=r"DLPack >= 1\.2 producer gave NULL strides"):
            bridge.from_dlpack(Handmade(shape=(2, 3), minor=minor, null_strides=True).capsule())
        gc.collect()
        assert deleter_calls() == before + 1
    # ndim 0 may have NULL strides at any version
    t = bridge.from_dlpack(Handmade(shape=(), minor=3, null_strides=True).capsule())
    assert t.shape == ()


# ------------------------------------- stream, dl_device and copy (array API)


def test_cpu_stream_none_and_minus_one():
    t = bridge.arange(3)
    for stream in (None, -1):
        for mv in (None, (1, 3)):
            assert bridge.from_dlpack(t.__dlpack__(max_version=mv, stream=stream)).tolist() == [0, 1, 2]
    with pytest.raises(ValueError, match="stream must be None or -1"):
        t.__dlpack__(stream=1)


def test_copy_false_across_devices_follows_the_array_api():
    t = bridge.arange(3)
    with pytest.raises(BufferError, match="copy=False forbids it"):  # __dlpack__: BufferError
        t.__dlpack__(max_version=(1, 3), dl_device=(2, 0), copy=False)
    with pytest.raises(ValueError, match=r"from_dlpack\(copy=False\)"):  # from_dlpack: ValueError
        bridge.from_dlpack(t, device="cuda", copy=False)
    _, m = managed(t.__dlpack__(max_version=(1, 3), dl_device=(1, 0), copy=True))
    assert m.flags & FLAG_IS_COPIED and not m.flags & FLAG_READ_ONLY
