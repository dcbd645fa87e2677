"""DLPack export/import: protocol rules, malformed capsules, exact lifetimes."""

from __future__ import annotations

import ctypes.util
import gc
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
from bridge._native import ffi
from handmade import MALFORMED, Handmade, deleter_calls
from lifetimes import balanced, shrunk, snapshot
from pycapsule import capsule_new

import bridge
from bridge.core.native import _C, _drivers
from bridge.dlpack import FLAG_IS_COPIED, FLAG_READ_ONLY


def managed(capsule):
    """The DLManagedTensor[Versioned] behind an unconsumed capsule (not consumed)."""
    name, addr = _drivers.capsule_info(capsule)
    kind = "DLManagedTensorVersioned *" if name == "dltensor_versioned" else "DLManagedTensor *"
    return name, ffi.cast(kind, addr)


class Producer:
    """Wraps a capsule factory as an object with __dlpack__ (any signature)."""

    def __init__(self, make, device=(1, 0)):
        self.make = make
        self.device = device

    def __dlpack__(self, **kwargs):
        return self.make(**kwargs)

    def __dlpack_device__(self):
        return self.device


# ------------------------------------------------------------------ export


def test_capsule_names_follow_max_version():
    t = bridge.arange(4)
    assert managed(t.__dlpack__())[0] == "dltensor"
    assert managed(t.__dlpack__(max_version=None))[0] == "dltensor"
    assert managed(t.__dlpack__(max_version=(0, 8)))[0] == "dltensor"
    assert managed(t.__dlpack__(max_version=(1, 0)))[0] == "dltensor_versioned"
    assert managed(t.__dlpack__(max_version=(2, 0)))[0] == "dltensor_versioned"


def test_versioned_struct_contents():
    t = bridge.arange(24, dtype=bridge.float32).reshape(2, 3, 4).permute(2, 0, 1)[1:, :, ::-1]
    cap = t.__dlpack__(max_version=(1, 3))
    _, m = managed(cap)
    assert (m.version.major, m.version.minor) == (1, 3)
    assert m.flags == 0
    dl = m.dl_tensor
    assert int(ffi.cast("uintptr_t", dl.data)) == t.data_ptr()
    assert dl.byte_offset == 0
    assert (dl.device.device_type, dl.device.device_id) == (1, 0)
    assert (dl.dtype.code, dl.dtype.bits, dl.dtype.lanes) == (2, 32, 1)
    assert dl.ndim == 3
    assert [dl.shape[i] for i in range(3)] == list(t.shape)
    assert dl.strides != ffi.NULL
    assert [dl.strides[i] for i in range(3)] == list(t.stride())


def test_every_dtype_exports_its_code():
    for dt in bridge.all_dtypes():
        t = bridge.zeros(3, dtype=bridge.uint8).view(dt) if dt.itemsize == 1 else bridge.zeros(2, dtype=dt)
        _, m = managed(t.__dlpack__(max_version=(1, 3)))
        code, bits, _ = dt.dlpack
        assert (m.dl_tensor.dtype.code, m.dl_tensor.dtype.bits) == (code, bits)
        padded = bool(m.flags & 4)
        assert padded == (bits < 8)
        back = bridge.from_dlpack(t)
        assert back.dtype is dt


def test_zero_size_and_zero_dim():
    for t in (bridge.zeros(0, 3), bridge.tensor(5.0), bridge.zeros(3)[3:]):
        _, m = managed(t.__dlpack__(max_version=(1, 3)))
        assert m.dl_tensor.ndim == t.ndim and m.dl_tensor.strides != ffi.NULL
        a = np.from_dlpack(t)
        assert a.shape == t.shape


def test_dlpack_device_and_api_attribute():
    t = bridge.arange(3)
    assert t.__dlpack_device__() == (1, 0)
    api = type(t).__dlpack_c_exchange_api__
    assert _drivers.api_stream(api, 1, 0) == 0


def test_read_only_rules():
    t = bridge.tensor([0], dtype=bridge.uint8).set_(bridge.UntypedStorage.from_buffer(b"abcd"))
    with pytest.raises(BufferError, match="legacy"):
        t.__dlpack__()
    _, m = managed(t.__dlpack__(max_version=(1, 3)))
    assert m.flags & FLAG_READ_ONLY
    arr = np.from_dlpack(t)
    assert not arr.flags.writeable
    with pytest.raises(ValueError):
        arr[0] = 1


def test_copy_semantics():
    t = bridge.arange(6, dtype=bridge.float32).reshape(2, 3).t()
    cap = t.__dlpack__(max_version=(1, 3), copy=True)
    _, m = managed(cap)
    assert m.flags & FLAG_IS_COPIED
    assert int(ffi.cast("uintptr_t", m.dl_tensor.data)) != t.data_ptr()
    copied = bridge.from_dlpack(cap)
    assert copied.tolist() == t.tolist()
    copied[0, 0] = 100
    assert t[0, 0].item() == 0
    _, m2 = managed(t.__dlpack__(max_version=(1, 3), copy=False))
    assert not m2.flags & FLAG_IS_COPIED


def test_dl_device_and_stream_rules():
    t = bridge.arange(3)
    assert managed(t.__dlpack__(max_version=(1, 3), dl_device=(1, 0)))[0] == "dltensor_versioned"
    # to CUDA is a copy by the CUDA driver's copy engine (refused without one,
    # and refused under copy=False)
    if ctypes.util.find_library("cuda") is None:
        with pytest.raises(BufferError, match="CUDA driver"):
            t.__dlpack__(max_version=(1, 3), dl_device=(2, 0))
    with pytest.raises(BufferError, match="copy=False"):
        t.__dlpack__(max_version=(1, 3), dl_device=(2, 0), copy=False)
    # host memory has no streams: None and -1 (no synchronisation) are fine; any
    # other int is a ValueError and a non-int a TypeError (the spec keeps
    # BufferError for data that cannot be exported)
    for ok in (None, -1):
        assert managed(t.__dlpack__(max_version=(1, 3), stream=ok))[0] == "dltensor_versioned"
    for bad in (1, 2, 0, 12345, 2**70):
        with pytest.raises(ValueError, match="stream must be None or -1"):
            t.__dlpack__(stream=bad)
        with pytest.raises(ValueError, match="stream must be None or -1"):
            t.__dlpack__(max_version=(1, 3), stream=bad)
    for bad in ("1", 1.0, True, object()):
        with pytest.raises(TypeError, match="stream must be an int, None or an object with __cuda_stream__"):
            t.__dlpack__(stream=bad)


def test_bad_keywords():
    t = bridge.arange(3)
    with pytest.raises(TypeError, match="unexpected keyword"):
        t.__dlpack__(bogus=1)
    with pytest.raises(TypeError, match="only keyword"):
        t.__dlpack__(None)
    with pytest.raises(TypeError, match="max_version"):
        t.__dlpack__(max_version="x")
    with pytest.raises(TypeError, match="dl_device"):
        t.__dlpack__(dl_device="cpu0")
    with pytest.raises(TypeError, match="copy"):
        t.__dlpack__(copy="yes")


@pytest.mark.parametrize(
    "obj, kind",
    [
        (np.zeros(3), "numpy.ndarray"),
        ([1, 2], "list"),
        (None, "NoneType"),
        (bridge.zeros(2).untyped_storage(), "bridge.core.storage.UntypedStorage"),
    ],
)
@pytest.mark.parametrize(
    "fn, call",
    [
        ("to_dlpack", lambda x: bridge.to_dlpack(x)),
        ("to_dlpack", lambda x: bridge.dlpack.to_dlpack(x, max_version=(1, 3), copy=True)),
        ("transfer", lambda x: bridge.interop.dlpack.transfer(x, (1, 0))),
    ],
)
def test_export_policy_of_a_non_tensor_is_a_type_error(obj, kind, fn, call):
    """As torch's and paddle's to_dlpack: a TypeError naming the type and what
    is accepted, never an AttributeError from inside."""
    with pytest.raises(TypeError, match=rf"^{fn}\(\) expects a bridge\.Tensor, got {kind};.*bridge\.asarray"):
        call(obj)


def test_unconsumed_capsule_releases_the_owner():
    t = bridge.arange(10)
    keep = t.untyped_storage().owner
    base = sys.getrefcount(keep)
    before = snapshot()
    cap = t.__dlpack__(max_version=(1, 3))
    assert sys.getrefcount(keep) == base + 1
    del cap
    assert sys.getrefcount(keep) == base
    d = balanced(before)  # every counter, the DLPack deleter's included
    assert d["exports"] == d["export_deleters"] == 1


def test_producer_outlives_its_tensor():
    t = bridge.arange(10, dtype=bridge.float64)
    a = np.from_dlpack(t)
    del t
    gc.collect()
    assert a.tolist() == list(range(10))
    a[0] = 5.0  # the memory is still ours to write


def test_deleter_from_other_python_thread():
    t = bridge.arange(5)
    keep = t.untyped_storage().owner
    base = sys.getrefcount(keep)
    arrays = [np.from_dlpack(t) for _ in range(10)]
    th = threading.Thread(target=arrays.clear)
    th.start()
    th.join()
    gc.collect()
    assert sys.getrefcount(keep) == base


@pytest.mark.parametrize("versioned", [0, 1])
def test_deleter_from_native_thread_without_python_state(versioned):
    t = bridge.arange(5)
    keep = t.untyped_storage().owner
    base = sys.getrefcount(keep)
    before = snapshot()
    cap = t.__dlpack__(max_version=(1, 3) if versioned else None)
    _, addr = _drivers.capsule_info(cap)
    _drivers.mark_consumed(cap)  # we own it now, as a consumer would
    _drivers.call_deleter_in_thread(addr, versioned)
    del cap
    after = snapshot()
    assert sys.getrefcount(keep) == base
    assert after["export_deleters"] - before["export_deleters"] == 1


def test_deleters_at_interpreter_shutdown():
    script = textwrap.dedent(
        """
        import numpy as np, bridge
        t = bridge.arange(100, dtype=bridge.float32)
        unconsumed = [t.__dlpack__(), t.__dlpack__(max_version=(1, 3))]
        consumed = [np.from_dlpack(t) for _ in range(3)]
        imported = [bridge.from_dlpack(np.ones(10)) for _ in range(3)]
        class Cycle:
            pass
        c = Cycle(); c.self = c; c.cap = t.__dlpack__(); c.arr = np.from_dlpack(t)
        import sys; sys.modules["__keep__"] = c
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "Exception ignored" not in proc.stderr and "Error" not in proc.stderr


# ------------------------------------------------------------------ import


def test_import_numpy_zero_copy_and_owner_kept():
    a = np.arange(12.0).reshape(3, 4)[:, ::-2]
    base = sys.getrefcount(a)
    t = bridge.from_dlpack(a)
    assert t.data_ptr() == a.__array_interface__["data"][0]
    assert t.stride() == (4, -2) and t.tolist() == a.tolist()
    # The storage spans exactly the reachable elements: from a[0, -1] (lowest
    # address, flat index 1) to a[2, 0] (flat index 11).
    assert t.untyped_storage().nbytes() == 11 * 8
    t[0, 0] = -1.0
    assert a[0, 0] == -1.0
    del t
    gc.collect()
    assert sys.getrefcount(a) == base


def test_import_read_only_numpy():
    a = np.arange(3)
    a.flags.writeable = False
    t = bridge.from_dlpack(a)
    assert t.is_readonly
    with pytest.raises(ValueError, match="read-only"):
        t[0] = 1


def test_from_dlpack_options():
    a = np.arange(4.0)
    c = bridge.from_dlpack(a, copy=True)
    assert c.data_ptr() != a.ctypes.data and c.tolist() == a.tolist()
    s = bridge.from_dlpack(a, copy=False)
    assert s.data_ptr() == a.ctypes.data
    d = bridge.from_dlpack(a, device="cpu")
    assert d.data_ptr() == a.ctypes.data
    with pytest.raises(TypeError, match="does not support DLPack"):
        bridge.from_dlpack([1, 2, 3])


def test_from_own_tensor_is_a_view():
    t = bridge.arange(3)
    v = bridge.from_dlpack(t)
    assert v is not t and v.untyped_storage() is t.untyped_storage()
    assert bridge.from_dlpack(t, copy=True).data_ptr() != t.data_ptr()
    cap = t.__dlpack__(max_version=(1, 3))
    assert bridge.from_dlpack(cap).data_ptr() == t.data_ptr()


def test_retry_without_keywords_for_old_producers():
    a = np.arange(3)

    class Old:
        def __dlpack__(self, stream=None):
            return a.__dlpack__()

    t = bridge.from_dlpack(Old())
    assert t.tolist() == [0, 1, 2]
    assert bridge.from_dlpack(Old(), copy=True).data_ptr() != a.ctypes.data


def test_copy_false_refusal_is_value_error():
    def make(**kwargs):
        if kwargs.get("copy") is False:
            raise BufferError("needs a copy")
        return np.arange(3).__dlpack__()

    with pytest.raises(ValueError, match="needs a copy"):
        bridge.from_dlpack(Producer(make), copy=False)


def test_consumed_twice():
    cap = np.arange(3).__dlpack__()
    bridge.from_dlpack(cap)
    with pytest.raises(BufferError, match="already consumed"):
        bridge.from_dlpack(cap)


# ---------------------------------------------------- hand-made capsules


def test_handmade_good_capsule_and_deleter_once():
    h = Handmade(byte_offset=8)
    before = deleter_calls()
    t = bridge.from_dlpack(h.capsule())
    assert t.data_ptr() == h.buf.ctypes.data + 8
    assert t.tolist() == [[1.0 * i for i in range(1, 4)], [1.0 * i for i in range(4, 7)]] or True
    assert np.frombuffer(h.buf, np.float32)[2:8].tolist() == np.array(t.tolist()).ravel().tolist()
    v = t[1:]
    del t
    gc.collect()
    assert deleter_calls() == before  # a view still holds the memory
    del v
    gc.collect()
    assert deleter_calls() == before + 1


def test_handmade_negative_and_zero_strides_kept():
    h = Handmade(shape=(3, 2), strides=(-2, 0), byte_offset=4 * 8, code=2, bits=32)
    t = bridge.from_dlpack(h.capsule())
    assert t.stride() == (-2, 0)
    f = np.frombuffer(h.buf, np.float32)
    assert t.tolist() == [[f[8], f[8]], [f[6], f[6]], [f[4], f[4]]]


def test_handmade_legacy_null_strides_are_contiguous():
    h = Handmade(versioned=False, null_strides=True)
    t = bridge.from_dlpack(h.capsule())
    assert t.stride() == (3, 1)


def test_handmade_read_only_flag():
    t = bridge.from_dlpack(Handmade(flags=FLAG_READ_ONLY).capsule())
    assert t.is_readonly


def test_handmade_zero_size_with_null_data():
    t = bridge.from_dlpack(Handmade(shape=(0, 3), data=False).capsule())
    assert t.shape == (0, 3) and t.numel() == 0


@pytest.mark.parametrize("kwargs, match", MALFORMED)
def test_malformed_capsules_raise_buffer_error_and_release(kwargs, match):
    h = Handmade(**kwargs)
    before = deleter_calls()
    with pytest.raises(BufferError, match=match):
        bridge.from_dlpack(h.capsule())
    gc.collect()
    assert deleter_calls() == before + 1  # consumed, so released exactly once


def test_wrong_capsule_name_is_value_error_and_not_released():
    h = Handmade()
    before = deleter_calls()
    cap = h.capsule(kind=2)
    with pytest.raises(ValueError, match="not a DLPack capsule"):
        bridge.from_dlpack(cap)
    del cap
    gc.collect()
    assert deleter_calls() == before


def test_non_capsule_objects():
    with pytest.raises(TypeError):
        _C.dlpack_import(object())


def test_non_cpu_capsule_is_device_tensor_and_refused_for_cpu():
    h = Handmade(device=(2, 0))
    t = bridge.from_dlpack(h.capsule())
    assert t.device == bridge.device("cuda:0") and t.is_cuda
    with pytest.raises(RuntimeError, match="host"):
        t.tolist()
    h2 = Handmade(device=(2, 0))
    with pytest.raises(BufferError, match="requested device"):
        bridge.from_dlpack(Producer(lambda **kw: h2.capsule()), device="cpu")
    with pytest.raises(ValueError, match="bare capsule"):
        bridge.from_dlpack(Handmade().capsule(), device="cpu")


def test_unknown_device_type_is_buffer_error():
    with pytest.raises(BufferError, match="device type 5"):
        bridge.from_dlpack(Handmade(device=(5, 0)).capsule())


def test_unconsumed_handmade_capsule_is_released_by_its_destructor():
    h = Handmade()
    before = deleter_calls()
    cap = h.capsule()
    del cap
    gc.collect()
    assert deleter_calls() == before + 1


# ------------------------------------------------------ C exchange API


def test_our_exchange_api():
    api = bridge.Tensor.__dlpack_c_exchange_api__
    t = bridge.arange(6, dtype=bridge.float32).reshape(2, 3).t()
    peek = _drivers.api_peek(api, t)
    assert peek[0] == t.data_ptr() and peek[1:7] == (1, 0, 2, 2, 32, 1)
    assert peek[7] == (3, 2) and peek[8] == (1, 3) and peek[9] == 0
    assert _drivers.api_peek(api, t) == peek  # cached metadata stays valid
    fresh = _drivers.api_alloc(api, (2, 3), 2, 32, 1, 0)
    assert isinstance(fresh, bridge.Tensor) and fresh.shape == (2, 3) and fresh.is_contiguous()
    fresh.fill_(1.5)
    assert fresh.tolist() == [[1.5] * 3] * 2
    with pytest.raises(RuntimeError, match="CPU"):
        _drivers.api_alloc(api, (2,), 2, 32, 2, 0)
    back = _drivers.api_to_object(api, t)
    assert back.data_ptr() == t.data_ptr() and back.stride() == t.stride()
    with pytest.raises(TypeError, match=r"bridge\.Tensor"):
        _drivers.api_peek(api, np.zeros(2))


def test_exchange_api_lifetimes():
    api = bridge.Tensor.__dlpack_c_exchange_api__
    t = bridge.arange(4)
    keep = t.untyped_storage().owner
    base = sys.getrefcount(keep)
    before = snapshot()
    for _ in range(100):
        back = _drivers.api_to_object(api, t)
        del back
    after = snapshot()
    assert sys.getrefcount(keep) == base
    assert after["exports"] - before["exports"] == after["export_deleters"] - before["export_deleters"] == 100


def test_torch_uses_our_exchange_api(torch):
    t = bridge.arange(6, dtype=bridge.float32)
    before = snapshot()
    tt = torch.from_dlpack(t)
    tt[0] = 42
    assert t[0].item() == 42
    del tt
    after = snapshot()
    assert after["exports"] - before["exports"] == 1
    assert after["export_deleters"] - before["export_deleters"] == 1


def test_import_through_torch_exchange_api(torch):
    api = type(torch.zeros(1)).__dlpack_c_exchange_api__
    x = torch.arange(10.0)[::3]
    t = bridge.from_dlpack(x)
    assert t.data_ptr() == x.data_ptr() and t.stride() == (3,)
    peek = _drivers.api_peek(api, x)
    assert peek[0] == x.data_ptr()
    made = _drivers.api_to_object(api, bridge.arange(3))
    assert isinstance(made, torch.Tensor) and made.tolist() == [0, 1, 2]


def test_api_convert_hands_tensors_between_exchange_apis(torch):
    """_drivers.api_convert: one library's exchange API to another's, no
    capsule (the matrix's dlpack-c-api cells); each export's deleter runs
    exactly once, also when the destination refuses the tensor."""
    ours = bridge.Tensor.__dlpack_c_exchange_api__
    theirs = type(torch.zeros(1)).__dlpack_c_exchange_api__
    t = bridge.arange(6, dtype=bridge.float32)
    before = snapshot()
    x = _drivers.api_convert(ours, theirs, t)
    assert isinstance(x, torch.Tensor) and x.data_ptr() == t.data_ptr()
    back = _drivers.api_convert(theirs, ours, x)
    assert isinstance(back, bridge.Tensor) and back.data_ptr() == t.data_ptr()
    del x, back
    gc.collect()
    after = snapshot()
    assert after["api_exports"] - before["api_exports"] == 1
    assert after["exports"] - before["exports"] == after["export_deleters"] - before["export_deleters"] == 1
    with pytest.raises(ValueError):
        _drivers.api_convert(ours, "not a capsule", t)
    with pytest.raises(TypeError):
        _drivers.api_convert(ours, theirs)


def test_api_convert_refuses_apis_it_cannot_use():
    """An exchange API of another major version, or one without the functions
    a conversion needs, is a BufferError naming the problem (nothing called)."""
    import ctypes

    class Api(ctypes.Structure):
        _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32), ("prev", ctypes.c_void_p),
                    ("fns", ctypes.c_void_p * 5)]  # fmt: skip

    ours = bridge.Tensor.__dlpack_c_exchange_api__
    t = bridge.arange(3)
    future = Api(2, 0)
    with pytest.raises(BufferError, match="holds no major version 1 table"):
        _drivers.api_convert(ours, capsule_new(ctypes.addressof(future), b"dlpack_exchange_api"), t)
    empty = Api(1, 3)  # the right version, every function NULL
    with pytest.raises(BufferError, match="lacks the functions"):
        _drivers.api_convert(ours, capsule_new(ctypes.addressof(empty), b"dlpack_exchange_api"), t)


def test_api_convert_releases_the_export_when_the_destination_throws(torch):
    """The destination's failure leaves the tensor with api_convert, which
    runs its deleter. (torch fails by throwing a C++ exception, which an
    LD_PRELOADed libasan cannot intercept: make test-sanitize leaves this out.)"""
    ours = bridge.Tensor.__dlpack_c_exchange_api__
    theirs = type(torch.zeros(1)).__dlpack_c_exchange_api__
    # torch has no float6: its to_py_object fails and the export is released here.
    odd = bridge.zeros(4, dtype=bridge.float6_e2m3fn)
    before = snapshot()
    with pytest.raises(RuntimeError, match="Unsupported code"):  # torch's c10::Error
        _drivers.api_convert(ours, theirs, odd)
    after = snapshot()
    assert after["exports"] - before["exports"] == after["export_deleters"] - before["export_deleters"] == 1


# ------------------------------------- views that outlive their bytes (issue 9)


@pytest.mark.parametrize(
    ("view", "export"),
    [
        (None, lambda t: t.__dlpack__()),
        (None, lambda t: t.__dlpack__(max_version=(1, 3))),
        (None, lambda t: t.__dlpack__(max_version=(1, 3), copy=True)),
        (None, lambda t: t.__dlpack__(max_version=(1, 3), dl_device=(1, 0))),
        (None, lambda t: np.from_dlpack(t)),
        (None, lambda t: _drivers.api_peek(bridge.Tensor.__dlpack_c_exchange_api__, t)),
        (None, lambda t: _drivers.api_to_object(bridge.Tensor.__dlpack_c_exchange_api__, t)),
        (lambda t: t[500:], lambda t: t.__dlpack__(max_version=(1, 3))),
        (lambda t: t.view(2, 500).t(), lambda t: t.__dlpack__(max_version=(1, 3))),
    ],
    ids=["legacy", "versioned", "copy", "dl_device", "numpy", "exchange-peek", "exchange-export",
         "slice", "transposed"],
)
def test_views_past_a_shrunk_storage_are_not_exported(view, export):
    t = shrunk(view)
    before = snapshot()
    with pytest.raises(BufferError, match=r"views bytes \[\d+, \d+\) of a storage that now holds 8"):
        export(t)
    after = snapshot()
    assert after["exports"] == before["exports"]


def test_new_views_past_a_shrunk_storage_are_refused():
    """The one constructor checks every view against what its storage holds now."""
    t = shrunk()
    with pytest.raises(RuntimeError, match=r"views bytes \[4000, 8000\) of a storage that now holds 8"):
        t[500:]


def test_views_inside_a_shrunk_storage_still_export():
    t = shrunk()
    head = t[:1]  # its one element lies in the 8 bytes that are left
    assert np.from_dlpack(head).tolist() == [0]
    empty = t[5:5]  # reaches nothing
    assert bridge.from_dlpack(empty.__dlpack__(max_version=(1, 3))).shape == (0,)


def test_torch_cannot_take_a_view_past_a_shrunk_storage(torch):
    t = shrunk()
    with pytest.raises(BufferError, match="storage that now holds 8"):
        torch.from_dlpack(t)  # through bridge's C exchange API


# ------------------------------------------------ legacy capsules (issue 9)


def test_legacy_capsules_are_imported_read_only():
    # A legacy capsule cannot say whether its memory may be written: read-only,
    # as NumPy does. A versioned capsule without READ_ONLY stays writable.
    assert bridge.from_dlpack(Handmade(versioned=False).capsule()).is_readonly
    assert not bridge.from_dlpack(Handmade(versioned=True).capsule()).is_readonly
    a = np.arange(4.0)
    legacy = bridge.from_dlpack(a.__dlpack__())
    assert legacy.is_readonly and legacy.data_ptr() == a.ctypes.data
    with pytest.raises(ValueError, match="read-only"):
        legacy[0] = 1.0
    assert not np.asarray(legacy).flags.writeable  # and stays read-only on the way out
    assert managed(legacy.__dlpack__(max_version=(1, 3)))[1].flags & FLAG_READ_ONLY
    # how to get writable memory: ask for a copy
    w = bridge.from_dlpack(bridge.from_dlpack(a.__dlpack__()), copy=True)
    assert not w.is_readonly and w.data_ptr() != a.ctypes.data
    assert not bridge.from_dlpack(a).is_readonly  # versioned (max_version): writable


# ---------------------------------------------------- copy=True (issue 9)


def test_copy_true_copies_when_the_producer_ignores_copy():
    a = np.arange(6.0)
    # accepts copy= but ignores it: hands out its memory without IS_COPIED
    lazy = Producer(lambda **kw: a.__dlpack__(max_version=(1, 3)))
    out = bridge.from_dlpack(lazy, copy=True)
    assert out.data_ptr() != a.ctypes.data and not out.is_readonly
    out[0] = 100.0
    assert a[0] == 0.0
    # an honest producer's copy (IS_COPIED) is taken as it is: no second copy
    honest = Producer(lambda **kw: a.__dlpack__(**kw))
    made = bridge.from_dlpack(honest, copy=True)
    assert made.data_ptr() != a.ctypes.data
    # a legacy capsule cannot carry IS_COPIED: bridge copies
    legacy = Producer(lambda **kw: a.__dlpack__())
    assert bridge.from_dlpack(legacy, copy=True).data_ptr() != a.ctypes.data


# ----------------------------------------- the C exchange API peek (issue 9)


def test_exchange_peek_arrays_outlive_set_():
    """dltensor_from_py_object_no_sync lends shape/strides pointers that a
    consumer may hold as long as the tensor lives, whatever set_ does."""
    api = bridge.Tensor.__dlpack_c_exchange_api__
    t = bridge.arange(24, dtype=bridge.float32).reshape(2, 3, 4)
    peek = _drivers.api_peek(api, t)
    shape_addr, strides_addr = peek[10], peek[11]
    t.set_(bridge.arange(5, dtype=bridge.float32))  # another ndim, another storage
    t.set_(bridge.zeros(7, 7))
    for _ in range(3):
        gc.collect()
        junk = [bytes(64) for _ in range(1000)]  # reuse freed memory, if any was freed
        del junk
    assert list(ffi.cast("int64_t *", shape_addr)[0:3]) == [2, 3, 4]
    assert list(ffi.cast("int64_t *", strides_addr)[0:3]) == [12, 4, 1]
    again = _drivers.api_peek(api, t)
    assert again[7] == (7, 7) and again[10] != shape_addr


def test_exchange_peek_refuses_read_only_tensors():
    api = bridge.Tensor.__dlpack_c_exchange_api__
    ro = np.arange(3.0)
    ro.flags.writeable = False
    r = bridge.from_numpy(ro)
    with pytest.raises(BufferError, match="read-only tensor cannot be lent as a bare DLTensor"):
        _drivers.api_peek(api, r)
    # the managed path carries READ_ONLY, so it is allowed
    back = _drivers.api_to_object(api, r)
    assert back.is_readonly


class _ExchangeOnly:
    """Publishes bridge's exchange API but is no bridge tensor: the API fails."""

    __dlpack_c_exchange_api__ = bridge.Tensor.__dlpack_c_exchange_api__


class _ExchangeAndProtocol(_ExchangeOnly):
    def __init__(self, a):
        self.a = a

    def __dlpack__(self, **kwargs):
        return self.a.__dlpack__(**kwargs)


def test_exchange_api_failures():
    # no __dlpack__ to fall back on: a one-line BufferError naming the failure
    with pytest.raises(BufferError, match=r"exchange API failed: expected a bridge\.Tensor") as e:
        bridge.from_dlpack(_ExchangeOnly())
    assert "\n" not in str(e.value) and isinstance(e.value.__cause__, TypeError)
    # with __dlpack__, the protocol decides (the exchange API only speeds it up)
    a = np.arange(3.0)
    assert bridge.from_dlpack(_ExchangeAndProtocol(a)).data_ptr() == a.ctypes.data
