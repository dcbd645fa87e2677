"""NumPy, Python buffers and the CUDA array interface (metadata paths on CPU)."""

from __future__ import annotations

import array
import ctypes
import gc
import mmap
import sys

import numpy as np
import pytest
from lifetimes import shrunk

import bridge
from bridge.interop.cuda import CudaArrayInterfaceOwner

NATIVE = [d for d in bridge.all_dtypes() if not d._np_name.startswith("ml_dtypes.")]
ML = [d for d in bridge.all_dtypes() if d._np_name.startswith("ml_dtypes.")]


def layouts(dt):
    base = bridge.arange(48, dtype=bridge.int64).to(dt) if dt is not bridge.bool else (
        bridge.arange(48).to(bridge.int64).view(bridge.uint8)[::8].to(bridge.bool)
    )
    m = base.reshape(4, 12)
    return {
        "contiguous": m,
        "transposed": m.t(),
        "stepped": m[::2, 1::3],
        "negative": m[::-1, ::-2],
        "broadcast": m[0].broadcast_to((3, 12)),
        "size1-odd-stride": m[:, 2:3].as_strided((4, 1), (12, 7)),
        "0-d": m[1, 1],
        "zero-size": m[:, 5:5],
    }


@pytest.mark.parametrize("dt", NATIVE + ML, ids=lambda d: d.name)
def test_numpy_export_every_dtype_and_layout(dt):
    for name, t in layouts(dt).items():
        a = np.asarray(t)
        assert a.shape == t.shape, name
        assert a.dtype == dt.numpy_dtype, name
        if t.numel():
            assert a.__array_interface__["data"][0] == t.data_ptr(), name
            assert a.strides == tuple(s * dt.itemsize for s in t.stride()), name
        want = np.asarray(t.tolist(), dtype=np.float64 if dt in ML else a.dtype)
        got = a.astype(np.float64) if dt in ML else a
        assert np.array_equal(got, want, equal_nan=got.dtype.kind in "fc"), name
        back = bridge.from_numpy(a)
        assert back.shape == t.shape and back.dtype is dt, name
        if t.numel():
            assert back.data_ptr() == t.data_ptr() and back.stride() == t.stride(), name


def test_numpy_shares_memory_both_ways():
    t = bridge.zeros(3, 4)
    a = np.asarray(t)
    a[1, 2] = 7.0
    assert t[1, 2].item() == 7.0
    t[0, 0] = 3.0
    assert a[0, 0] == 3.0
    b = np.arange(6.0)
    u = bridge.from_numpy(b)
    u[5] = -1.0
    assert b[5] == -1.0
    b[0] = 9.0
    assert u[0].item() == 9.0


def test_array_keeps_tensor_alive():
    t = bridge.arange(100, dtype=bridge.float64)
    a = np.asarray(t)
    del t
    gc.collect()
    assert a[99] == 99.0


def test_from_numpy_keeps_array_alive_and_releases_it():
    a = np.arange(10.0)
    base = sys.getrefcount(a)
    t = bridge.from_numpy(a)
    v = t[2:]
    del t
    gc.collect()
    assert v.tolist() == list(range(2, 10))
    del v
    gc.collect()
    assert sys.getrefcount(a) == base


def test_array_interface_dict():
    t = bridge.arange(6, dtype=bridge.int32).reshape(2, 3)
    ai = t.__array_interface__
    assert ai["version"] == 3 and ai["shape"] == (2, 3) and ai["strides"] is None
    assert ai["typestr"] == np.dtype(np.int32).str and ai["descr"] == [("", ai["typestr"])]
    assert ai["data"] == (t.data_ptr(), False)
    assert t.t().__array_interface__["strides"] == (4, 12)

    class Wrapper:
        def __init__(self, ai):
            self.__array_interface__ = ai

    assert np.asarray(Wrapper(t.t().__array_interface__)).tolist() == t.t().tolist()
    with pytest.raises(AttributeError):
        bridge.zeros(2, dtype=bridge.bfloat16).__array_interface__  # noqa: B018
    assert not hasattr(bridge.zeros(2, dtype=bridge.bfloat16), "__array_struct__")


def test_read_only_is_carried_both_ways():
    ro = np.arange(4)
    ro.flags.writeable = False
    t = bridge.from_numpy(ro)
    assert t.is_readonly
    with pytest.raises(ValueError, match="read-only"):
        t[0] = 1
    a = np.asarray(t)
    assert not a.flags.writeable
    assert t.__array_interface__["data"][1] is True
    assert t.memoryview().readonly
    w = bridge.UntypedStorage.from_buffer(b"abcdefgh")
    rt = bridge.frombuffer(b"abcdefgh", dtype=bridge.uint8)
    assert rt.is_readonly and not np.asarray(rt).flags.writeable
    assert w.is_readonly


def test_numpy_method_and_array_protocol():
    t = bridge.arange(4, dtype=bridge.float32)
    assert t.numpy().ctypes.data == t.data_ptr()
    assert t.__array__().ctypes.data == t.data_ptr()
    assert t.__array__(copy=True).ctypes.data != t.data_ptr()
    assert t.__array__(np.float64).dtype == np.float64
    with pytest.raises(ValueError, match="copy=False"):
        t.__array__(np.float64, copy=False)
    assert np.array(t, copy=False).ctypes.data == t.data_ptr()
    bf = bridge.tensor([1.5, 2.5], dtype=bridge.bfloat16)
    assert bf.numpy().dtype.name == "bfloat16"
    assert np.asarray(bf).tolist() == [1.5, 2.5]


def test_numpy_needs_ml_dtypes_for_bfloat16(monkeypatch):
    t = bridge.zeros(2, dtype=bridge.uint16).view(bridge.bfloat16)
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)
    monkeypatch.setattr(bridge.bfloat16, "_np", None)  # forget the NumPy dtype found before
    with pytest.raises(TypeError, match="ml_dtypes"):
        t.numpy()


@pytest.mark.parametrize(
    "arr, exc, match",
    [
        (np.ones(3, ">f4" if sys.byteorder == "little" else "<f4"), ValueError, "byte order"),
        (np.lib.stride_tricks.as_strided(np.ones(6, np.float32), (2,), (6,)), ValueError, "multiple of the item size"),
        (np.array([object()]), TypeError, "object"),
        (np.zeros(2, [("a", "i4"), ("b", "f4")]), TypeError, "structured"),
        (np.array(["a"]), TypeError, "no bridge dtype"),
        ([1, 2], TypeError, "numpy.ndarray"),
    ],
)
def test_from_numpy_rejections(arr, exc, match):
    with pytest.raises(exc, match=match):
        bridge.from_numpy(arr)


def test_asarray_protocols():
    a = np.arange(4.0)
    assert bridge.asarray(a).data_ptr() == a.ctypes.data
    swapped = np.arange(3, dtype=">i4" if sys.byteorder == "little" else "<i4")
    with pytest.raises(ValueError, match="byte order"):
        bridge.asarray(swapped)
    assert bridge.asarray(swapped, copy=True).tolist() == [0, 1, 2]

    class AI:
        def __init__(self):
            self.keep = np.arange(5, dtype=np.int16)
            self.__array_interface__ = self.keep.__array_interface__

    obj = AI()
    t = bridge.asarray(obj)
    assert t.data_ptr() == obj.keep.ctypes.data and t.dtype is bridge.int16

    class ArrayOnly:
        def __array__(self, dtype=None, copy=None):
            return np.arange(3)

    assert bridge.asarray(ArrayOnly()).tolist() == [0, 1, 2]
    assert bridge.asarray([1, 2]).tolist() == [1, 2]
    with pytest.raises(ValueError, match="copy=False"):
        bridge.asarray([1, 2], copy=False)
    assert bridge.asarray(a, dtype=bridge.float32).dtype is bridge.float32
    with pytest.raises(ValueError, match="copy=False"):
        bridge.asarray(a, dtype=bridge.float32, copy=False)
    assert bridge.asarray(a, copy=True).data_ptr() != a.ctypes.data
    assert bridge.asarray(memoryview(b"ab")).tolist() == [97, 98]


# ------------------------------------------------------------ buffers


def test_frombuffer_sources():
    ba = bytearray(range(16))
    t = bridge.frombuffer(ba, dtype=bridge.int32)
    assert t.shape == (4,) and t.tolist() == np.frombuffer(bytes(ba), np.int32).tolist()
    t[0] = -1
    assert ba[:4] == b"\xff\xff\xff\xff"
    assert bridge.frombuffer(ba, dtype=bridge.uint8, count=3, offset=5).tolist() == [5, 6, 7]
    arr = array.array("d", [1.0, 2.0])
    assert bridge.frombuffer(arr, dtype=bridge.float64).tolist() == [1.0, 2.0]
    m = mmap.mmap(-1, 8)
    bridge.frombuffer(m, dtype=bridge.uint8)[0] = 9
    assert m[0] == 9
    c = (ctypes.c_float * 3)(1, 2, 3)
    ct = bridge.frombuffer(c, dtype=bridge.float32)
    assert ct.tolist() == [1.0, 2.0, 3.0] and ct.data_ptr() == ctypes.addressof(c)
    pa = pytest.importorskip("pyarrow")
    buf = pa.py_buffer(b"\x01\x00\x02\x00")
    pt = bridge.frombuffer(buf, dtype=bridge.int16)
    assert pt.tolist() == [1, 2] and pt.data_ptr() == buf.address and pt.is_readonly


def _c_contiguous_buffer(name):
    """A writable C-contiguous memoryview of several dims or formats, the bridge
    dtype to read it as, and the array whose memory it is."""
    if name == "2-d int32":
        a = np.arange(12, dtype=np.int32).reshape(3, 4)
        return memoryview(a), bridge.int32, a
    if name == "2-d bytes as int16":
        a = np.arange(16, dtype=np.uint8)
        return memoryview(bytearray(a.tobytes())).cast("B", (4, 4)), bridge.int16, None
    if name == "0-d":
        a = np.array(7, dtype=np.int64)
        return memoryview(a), bridge.int64, a
    a = np.arange(24.0).reshape(2, 3, 4)[1:]  # "3-d rows of a slice"
    return memoryview(a), bridge.float64, a


@pytest.mark.parametrize(
    "name, count, offset",
    [
        ("2-d int32", -1, 0), ("2-d int32", 5, 8), ("2-d int32", -1, 4),
        ("2-d bytes as int16", -1, 0), ("2-d bytes as int16", 3, 1),
        ("0-d", -1, 0), ("0-d", 1, 0),
        ("3-d rows of a slice", -1, 0), ("3-d rows of a slice", 2, 16),
    ],
)  # fmt: skip
def test_frombuffer_is_1d_over_the_bytes_like_torch(torch, name, count, offset):
    """Whatever the buffer's shape, torch.frombuffer's 1-d tensor over its bytes:
    same shape, values and address (both share the buffer's memory)."""
    mv, dt, a = _c_contiguous_buffer(name)
    address = (np.frombuffer(mv, np.uint8) if a is None else a).ctypes.data
    t = torch.frombuffer(mv, dtype=getattr(torch, dt.name), count=count, offset=offset)
    b = bridge.frombuffer(mv, dtype=dt, count=count, offset=offset)
    assert b.ndim == 1 and b.shape == tuple(t.shape)
    assert b.tolist() == t.tolist()
    assert b.data_ptr() == t.data_ptr() == address + offset
    b[0] = 99  # a view: the write shows in the buffer and in torch's view of it
    assert t[0].item() == 99


def _strided_buffers():
    base = np.arange(12, dtype=np.int32).reshape(3, 4)
    return {
        "transposed": base.T,
        "Fortran-ordered": np.asfortranarray(base),
        "every other row, reversed": base[::2, ::-1],
        "stepped 1-d": base.ravel()[::3],
    }


@pytest.mark.parametrize("name", list(_strided_buffers()))
def test_frombuffer_refuses_non_contiguous_buffers(torch, name):
    """torch.frombuffer refuses a buffer that is not C-contiguous, so bridge
    does, with a ValueError that points to bridge.asarray; asarray keeps the
    shape and strides and shares the memory."""
    a = _strided_buffers()[name]
    mv = memoryview(a)
    with pytest.raises(RuntimeError, match="could not retrieve buffer"):
        torch.frombuffer(mv, dtype=torch.int32)
    with pytest.raises(ValueError, match=r"C-contiguous.*bridge\.asarray"):
        bridge.frombuffer(mv, dtype=bridge.int32)
    kept = bridge.asarray(mv)
    assert kept.shape == a.shape and kept.stride() == tuple(s // 4 for s in a.strides)
    assert kept.tolist() == a.tolist() and kept.data_ptr() == a.ctypes.data


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"dtype": bridge.int32}, ValueError, "multiple of the item size"),
        ({"dtype": bridge.uint8, "offset": 11}, ValueError, "outside"),
        ({"dtype": bridge.uint8, "count": 11}, ValueError, "available"),
        ({"dtype": bridge.uint8, "count": -2}, ValueError, "non-negative"),
        ({"dtype": "nope"}, TypeError, "unknown dtype"),
    ],
)
def test_frombuffer_rejections(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        bridge.frombuffer(bytearray(10), **kwargs)


def test_frombuffer_needs_a_buffer():
    with pytest.raises(TypeError, match="buffer protocol"):
        bridge.frombuffer([1, 2], dtype=bridge.uint8)


def test_memoryview_export():
    t = bridge.arange(12, dtype=bridge.int16).reshape(3, 4)[:, ::2]
    mv = t.memoryview()
    assert mv.format == "h" and mv.shape == (3, 2) and mv.strides == (8, 4) and not mv.readonly
    assert mv.tolist() == t.tolist()
    with pytest.raises(BufferError, match="format"):
        bridge.zeros(2, dtype=bridge.bfloat16).memoryview()
    if sys.version_info >= (3, 12):
        assert memoryview(t).tolist() == t.tolist()


def test_buffer_protocol_is_the_types_own():
    """The buffer export is C (bf_getbuffer), so memoryview, ctypes and NumPy
    take it on every Python version (3.12 also shows it as __buffer__)."""
    t = bridge.arange(3, dtype=bridge.int64)
    view = memoryview(t)
    assert view.tolist() == [0, 1, 2] and view.format == "q" and not view.readonly
    view.release()
    assert (ctypes.c_int64 * 3).from_buffer(t)[2] == 2  # a writable buffer
    ro = bridge.frombuffer(b"12345678", dtype=bridge.int64)
    assert memoryview(ro).readonly
    get = ctypes.pythonapi.PyObject_GetBuffer  # as a C consumer asks: PyBUF_WRITABLE
    get.argtypes = (ctypes.py_object, ctypes.c_void_p, ctypes.c_int)
    view_struct = (ctypes.c_char * 128)()
    with pytest.raises(BufferError, match="writable buffer was requested from a read-only tensor"):
        get(ro, ctypes.addressof(view_struct), 0x1)
    if sys.version_info >= (3, 12):
        assert t.__buffer__(0).tolist() == [0, 1, 2]


# -------------------------------------------------- CUDA array interface


class FakeCuda:
    """Describes (fake) device memory; bridge must never dereference it."""

    def __init__(self, **overrides):
        self.__cuda_array_interface__ = {
            "shape": (2, 3),
            "typestr": "<f4",
            "data": (0xDEAD0000, False),
            "version": 3,
            "strides": None,
            "stream": 1,
        }
        self.__cuda_array_interface__.update(overrides)


def test_cuda_import_is_metadata_only():
    src = FakeCuda(strides=(4, 8))
    t = bridge.from_cuda_array_interface(src, device_id=1)
    assert t.device == bridge.device("cuda:1") and t.is_cuda
    assert t.shape == (2, 3) and t.stride() == (1, 2) and t.data_ptr() == 0xDEAD0000
    owner = t.untyped_storage().owner
    assert isinstance(owner, CudaArrayInterfaceOwner) and owner.source is src and owner.stream == 1
    v = t.t()[1:]
    assert v.data_ptr() == 0xDEAD0000 + 8  # views are metadata only
    with pytest.raises(RuntimeError, match="host"):
        t.tolist()
    with pytest.raises(TypeError, match="numpy"):
        t.numpy()
    assert not hasattr(t, "__array_interface__") and not hasattr(t, "__array_struct__")
    out = t.__cuda_array_interface__
    assert out["data"] == (0xDEAD0000, False) and out["strides"] == (4, 8) and out["stream"] == 1
    assert out["version"] == 3 and out["typestr"] == "<f4" and out["shape"] == (2, 3)
    assert bridge.asarray(src).data_ptr() == 0xDEAD0000


def test_cuda_negative_strides_and_read_only():
    t = bridge.from_cuda_array_interface(FakeCuda(strides=(-12, 4), data=(0x1000, True)), device_id=0)
    assert t.stride() == (-3, 1) and t.data_ptr() == 0x1000 and t.is_readonly
    assert t.untyped_storage().data_ptr() == 0x1000 - 12


def test_cuda_dlpack_export_of_imported_memory():
    t = bridge.from_cuda_array_interface(FakeCuda(), device_id=0)
    assert t.__dlpack_device__() == (2, 0)
    cap = t.__dlpack__(max_version=(1, 3), stream=-1)
    back = bridge.from_dlpack(cap)
    assert back.device == bridge.device("cuda:0") and back.data_ptr() == 0xDEAD0000
    with pytest.raises(ValueError, match="stream 0"):
        t.__dlpack__(stream=0)
    # A copy to the host goes through the CUDA copy engine: without a driver
    # it is refused as data that cannot be exported, never read on the host.
    if bridge.core.native._C.cuda_pointer_device(0xDEAD0000) == -1 and not _has_cuda_driver():
        with pytest.raises(BufferError, match="CUDA driver"):
            t.__dlpack__(max_version=(1, 3), dl_device=(1, 0))
    with pytest.raises(BufferError, match="copy=False"):
        t.__dlpack__(max_version=(1, 3), dl_device=(1, 0), copy=False)


def _has_cuda_driver() -> bool:
    import ctypes.util

    return ctypes.util.find_library("cuda") is not None


def test_cpu_tensor_has_no_cuda_interface():
    assert not hasattr(bridge.zeros(2), "__cuda_array_interface__")


@pytest.mark.parametrize(
    "overrides, exc, match",
    [
        ({"stream": 0}, ValueError, "stream 0"),
        ({"mask": object()}, ValueError, "mask"),
        ({"typestr": ">f4" if sys.byteorder == "little" else "<f4"}, ValueError, "byte order"),
        ({"typestr": "|O"}, TypeError, "object"),
        ({"strides": (3, 1)}, ValueError, "multiple of the item size"),
        ({"data": (0, False)}, ValueError, "NULL pointer"),
        ({"shape": None}, ValueError, "malformed"),
    ],
)
def test_cuda_interface_rejections(overrides, exc, match):
    with pytest.raises(exc, match=match):
        bridge.from_cuda_array_interface(FakeCuda(**overrides), device_id=0)


def test_cuda_interface_missing():
    with pytest.raises(TypeError, match="no __cuda_array_interface__"):
        bridge.from_cuda_array_interface(object())


def test_other_device_copies_raise_clearly():
    from bridge.core.native import _C

    t = _C.from_memory(0x7F0000000000, bridge.float32, (2, 3), (12, 4), object(), False, (10, 0))
    assert t.device == bridge.device("rocm", 0)
    with pytest.raises(RuntimeError, match="rocm:0"):
        t.clone()


def test_numpy_views_outlive_resize_and_set():
    """NumPy holds the tensor (its array base), but the memory it views must stay
    valid after the tensor is repointed or its storage reallocated."""
    t = bridge.arange(1000, dtype=bridge.float64)
    a = np.asarray(t)
    b = t.numpy()
    t.untyped_storage().resize_(8)  # new, smaller memory; the old block must live on
    t.set_(bridge.zeros(3, dtype=bridge.float64))
    gc.collect()
    for arr in (a, b):
        assert arr[999] == 999.0 and arr.sum() == sum(range(1000))


# ------------------------------------------------------------ issue 9


@pytest.mark.parametrize(
    "export",
    [
        lambda t: np.asarray(t),
        lambda t: t.__array_struct__,
        lambda t: t.__array_interface__,
        lambda t: t.memoryview(),
        lambda t: t.numpy(),
        lambda t: np.array(t, copy=True),
    ],
    ids=["asarray", "array-struct", "array-interface", "memoryview", "numpy", "array-copy"],
)
def test_views_past_a_shrunk_storage_are_not_exported(export):
    t = shrunk()
    with pytest.raises(BufferError, match=r"views bytes \[0, 8000\) of a storage that now holds 8"):
        export(t)


def test_size_one_dims_with_strides_that_overflow_in_bytes():
    """A dim of size 1 may have any stride (as in torch); in bytes it may not fit,
    and since it steps nowhere it is exported as 0."""
    t = bridge.arange(4).as_strided((1,), (2**62,))
    assert t.tolist() == [0]
    assert np.asarray(t).tolist() == [0] and np.asarray(t).strides == (0,)
    assert memoryview(t).strides == (0,) and t.__array_interface__["data"][0] == t.data_ptr()
    assert t.clone().tolist() == [0]


# ------------------------------------------- CUDA streams (no GPU needed)


def test_cuda_stream_context_sets_this_threads_consumer_stream():
    import threading

    assert bridge.current_cuda_stream() == 1  # the legacy default stream
    seen = []
    with bridge.cuda_stream(12345) as h:
        assert h == 12345 and bridge.current_cuda_stream() == 12345
        th = threading.Thread(target=lambda: seen.append(bridge.current_cuda_stream()))
        th.start()
        th.join()
        with bridge.cuda_stream(2):
            assert bridge.current_cuda_stream() == 2
        assert bridge.current_cuda_stream() == 12345
    assert bridge.current_cuda_stream() == 1 and seen == [1]  # per thread


class _TorchLikeStream:
    cuda_stream = 0  # torch's default stream: the legacy default stream


class _CupyLikeStream:
    ptr = 777


@pytest.mark.parametrize("bad, exc", [("1", TypeError), (None, TypeError), (True, TypeError),
                                      (0, ValueError), (-1, ValueError)])  # fmt: skip
def test_cuda_stream_refuses_what_is_not_a_stream(bad, exc):
    with pytest.raises(exc, match="stream"):
        with bridge.cuda_stream(bad):
            pass
    assert bridge.current_cuda_stream() == 1


def test_cuda_stream_takes_torch_and_cupy_streams():
    with bridge.cuda_stream(_TorchLikeStream()) as h:
        assert h == 1
    with bridge.cuda_stream(_CupyLikeStream()) as h:
        assert h == 777


def test_cuda_imports_record_the_stream_their_work_is_ordered_on():
    with bridge.cuda_stream(4242):
        t = bridge.from_cuda_array_interface(FakeCuda(stream=None), device_id=0)
    assert t.untyped_storage()._stream == 0  # the producer said: nothing pending
    assert t.__cuda_array_interface__["stream"] is None
    t = bridge.from_cuda_array_interface(FakeCuda(stream=99), device_id=0)
    assert t.untyped_storage()._stream == 99 and t.__cuda_array_interface__["stream"] == 99
    with bridge.cuda_stream(4242):
        back = bridge.from_dlpack(t.__dlpack__(max_version=(1, 3), stream=-1))
    # A bare capsule says nothing of streams, and none was passed for it: nothing
    # bridge knows of to wait for (it once claimed the consumer's stream).
    assert back.untyped_storage()._stream == 0


class FakeCudaProducer:
    """A CUDA producer that records what each import asked it for."""

    def __init__(self, t):
        self.t, self.asked = t, []

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, **kwargs):
        self.asked.append(kwargs)
        return self.t.__dlpack__(max_version=(1, 3), stream=-1)


@pytest.mark.parametrize(
    "path",
    [
        lambda p: bridge.from_dlpack(p),
        lambda p: bridge.from_dlpack(p, copy=False),
        lambda p: bridge.from_dlpack(p, copy=None, device=None),
        lambda p: bridge.from_dlpack(p, device=(2, 0)),
        lambda p: bridge.from_dlpack(p, device="cuda:0"),
        lambda p: bridge.asarray(p),
    ],
    ids=["plain", "copy-false", "none-keywords", "device-pair", "device-name", "asarray"],
)
def test_every_import_path_passes_the_consumer_stream(path):
    p = FakeCudaProducer(bridge.from_cuda_array_interface(FakeCuda(stream=1), device_id=0))
    with bridge.cuda_stream(4242):
        out = path(p)
    assert [kw["stream"] for kw in p.asked] == [4242]
    assert p.asked[0]["max_version"] == (1, 3)
    assert out.untyped_storage()._stream == 4242  # ordered on the stream the producer was passed
    assert out.data_ptr() == 0xDEAD0000


def test_a_copying_import_passes_the_consumer_stream_too():
    p = FakeCudaProducer(bridge.from_cuda_array_interface(FakeCuda(stream=1), device_id=0))
    with bridge.cuda_stream(77):
        try:
            bridge.from_dlpack(p, copy=True)  # the copy itself needs the CUDA driver
        except BufferError:
            assert not _has_cuda_driver()
    assert p.asked and all(kw["stream"] == 77 and kw["copy"] is True for kw in p.asked)


def test_cuda_export_orders_streams_only_when_they_differ():
    t = bridge.from_cuda_array_interface(FakeCuda(stream=1), device_id=0)
    for kwargs in ({}, {"stream": 1}, {"stream": -1}, {"stream": None}):
        assert t.__dlpack__(max_version=(1, 3), **kwargs) is not None  # nothing to wait for
    pending = bridge.from_cuda_array_interface(FakeCuda(stream=99), device_id=0)
    assert pending.__dlpack__(max_version=(1, 3), stream=-1) is not None  # the consumer opted out
    if not _has_cuda_driver():
        for kwargs in ({}, {"stream": 5}):
            with pytest.raises(BufferError, match="CUDA driver"):
                pending.__dlpack__(max_version=(1, 3), **kwargs)
