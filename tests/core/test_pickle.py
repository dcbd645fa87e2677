"""Pickling and copying tensors and storages (bridge.core.serialize), against
NumPy's protocol-5 behaviour as the reference."""

from __future__ import annotations

import copy
import pickle
from typing import ClassVar

import numpy as np
import pytest
from lifetimes import shrunk

import bridge

ML = pytest.importorskip("ml_dtypes")


def roundtrip5(obj):
    """dumps/loads at protocol 5 with out-of-band buffers; returns (loaded, buffers)."""
    bufs: list[pickle.PickleBuffer] = []
    data = pickle.dumps(obj, protocol=5, buffer_callback=bufs.append)
    return pickle.loads(data, buffers=bufs), bufs


def address(buf) -> int:
    return np.frombuffer(buf, dtype=np.uint8).__array_interface__["data"][0]


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_every_protocol_round_trips_values_and_geometry(protocol):
    t = bridge.arange(24, dtype=bridge.int32).reshape(2, 3, 4).permute(2, 0, 1)
    u = pickle.loads(pickle.dumps(t, protocol=protocol))
    assert u.tolist() == t.tolist() and u.stride() == t.stride() and u.dtype == t.dtype
    assert not u.is_readonly and u.device == t.device


@pytest.mark.parametrize("dt", ["bfloat16", "float8_e4m3fn", "float16", "complex64", "bool", "uint64"])
def test_dtypes_survive(dt):
    t = bridge.zeros(5, dtype=getattr(bridge, dt))
    for u in (pickle.loads(pickle.dumps(t)), roundtrip5(t)[0]):
        assert u.dtype == t.dtype and u.shape == (5,)
        assert np.array_equal(np.asarray(u.numpy()), np.asarray(t.numpy()))


def test_protocol5_is_one_out_of_band_buffer_viewed_without_a_copy():
    for t in (bridge.arange(1000, dtype=bridge.float64), bridge.arange(24.0).reshape(2, 3, 4).permute(1, 2, 0)):
        u, bufs = roundtrip5(t)
        assert len(bufs) == 1
        assert u.data_ptr() == address(bufs[0]) + u.storage_offset() * u.itemsize
        assert u.tolist() == t.tolist() and u.stride() == t.stride()


def test_the_out_of_band_buffer_is_the_tensors_own_memory():
    t = bridge.arange(1000.0)
    bufs: list[pickle.PickleBuffer] = []
    pickle.dumps(t, protocol=5, buffer_callback=bufs.append)
    assert address(bufs[0]) == t.data_ptr()  # sending copies nothing


def test_a_view_pickles_its_whole_storage_as_torch_does():
    big = bridge.zeros(1 << 20)  # 4 MiB
    v = big[1000:1010]
    u, bufs = roundtrip5(v)
    assert len(bufs) == 1 and memoryview(bufs[0]).nbytes == big.nbytes  # out of band: no copy
    assert address(bufs[0]) == big.data_ptr()
    assert u.storage_offset() == 1000 and u.untyped_storage().nbytes() == big.nbytes
    assert u.tolist() == v.tolist()
    w = big[::4096]
    u, _ = roundtrip5(w)
    assert u.stride() == (4096,) and u.tolist() == w.tolist()
    small = v.clone()  # the way to send only a view's bytes, as in torch
    assert memoryview(roundtrip5(small)[1][0]).nbytes == 40


def test_a_dict_of_views_of_one_flat_buffer_keeps_its_aliasing_as_torch_save_does():
    torch = pytest.importorskip("torch")
    import io

    def torch_roundtrip(obj):
        f = io.BytesIO()
        torch.save(obj, f)
        f.seek(0)
        return torch.load(f)

    for lib, roundtrip in ((bridge, lambda o: pickle.loads(pickle.dumps(o, protocol=4))), (torch, torch_roundtrip)):
        flat = lib.zeros(1000)
        weights = {"w1": flat[:10].view(2, 5), "b1": flat[10:12], "w2": flat[100:400].view(10, 30)}
        back = roundtrip(weights)
        assert len({back[k].untyped_storage().data_ptr() for k in back}) == 1, lib  # one storage
        back["b1"][0] = 7.0
        assert back["w1"].untyped_storage().nbytes() == 4000
        assert back["w2"].storage_offset() == 100
    assert len(pickle.dumps(weights_of(bridge.zeros(1000)), protocol=4)) < 4000 + 1000  # once


def weights_of(flat):
    return {"w1": flat[:10].view(2, 5), "b1": flat[10:12], "w2": flat[100:400].view(10, 30)}


def test_two_views_of_one_storage_still_share_after_loads():
    base = bridge.arange(100.0)
    a, b = base[:80], base.view(10, 10).t()
    (x, y), bufs = roundtrip5((a, b))
    assert len(bufs) == 1 and x.untyped_storage() is y.untyped_storage()
    x[0] = -1.0
    assert y[0, 0].item() == -1.0


def test_read_only_stays_read_only():
    arr = np.arange(6.0)
    arr.flags.writeable = False
    t = bridge.from_numpy(arr)
    assert t.is_readonly
    for u in (pickle.loads(pickle.dumps(t, protocol=4)), pickle.loads(pickle.dumps(t, protocol=5)), roundtrip5(t)[0]):
        assert u.is_readonly
        with pytest.raises(ValueError, match="read-only"):
            u[0] = 1.0


def test_loaded_over_a_read_only_buffer_is_read_only_and_never_writes_it():
    t = bridge.arange(8.0)
    bufs: list[pickle.PickleBuffer] = []
    data = pickle.dumps(t, protocol=5, buffer_callback=bufs.append)
    frozen = bytes(bufs[0])  # the receiver hands back an immutable buffer
    u = pickle.loads(data, buffers=[frozen])
    assert u.is_readonly and u.tolist() == t.tolist()
    writable = bytearray(bufs[0])
    v = pickle.loads(data, buffers=[writable])
    v[0] = 5.0
    assert writable[:4] == np.float32(5.0).tobytes() and not v.is_readonly


def test_a_misaligned_buffer_is_copied_once_to_an_aligned_address():
    t = bridge.arange(4.0)
    bufs: list[pickle.PickleBuffer] = []
    data = pickle.dumps(t, protocol=5, buffer_callback=bufs.append)
    raw = bytearray(33)
    raw[1:33] = bytes(bufs[0])
    odd = memoryview(raw)[1:]
    u = pickle.loads(data, buffers=[odd])
    assert u.data_ptr() % 8 == 0 and u.tolist() == [0.0, 1.0, 2.0, 3.0]


def test_empty_and_zero_dim_tensors():
    for t in (bridge.zeros(0, 3), bridge.tensor(3.5), bridge.zeros(4)[2:2]):
        for u in (pickle.loads(pickle.dumps(t)), roundtrip5(t)[0]):
            assert u.shape == t.shape and u.tolist() == t.tolist()


def test_storages_pickle_by_value():
    s = bridge.UntypedStorage([1, 2, 3])
    for proto in (2, 4, 5):
        assert pickle.loads(pickle.dumps(s, protocol=proto)).tolist() == [1, 2, 3]
    u, bufs = roundtrip5(s)
    assert len(bufs) == 1 and u.tolist() == [1, 2, 3]


def test_copy_shares_memory_and_deepcopy_copies_the_bytes_once():
    base = bridge.arange(10.0)
    a, b = base[:5], base[5:]
    c = copy.copy(a)
    c[0] = 100.0
    assert base[0].item() == 100.0  # copy.copy is a view, as in torch
    da, db = copy.deepcopy((a, b))
    assert da.untyped_storage() is db.untyped_storage()  # one copy for both views
    assert da.untyped_storage() is not base.untyped_storage()
    da[0] = -1.0
    assert base[0].item() == 100.0
    s = copy.deepcopy(base.untyped_storage())
    assert s.tolist() == base.untyped_storage().tolist() and s.data_ptr() != base.data_ptr()


def test_deepcopy_of_a_read_only_tensor_is_writable_as_numpy():
    arr = np.arange(3.0)
    arr.flags.writeable = False
    d = copy.deepcopy(bridge.from_numpy(arr))
    d[0] = 9.0
    assert arr[0] == 0.0 and copy.deepcopy(arr).flags.writeable


def test_device_tensors_refuse_with_a_clear_error():
    class FakeCuda:
        __cuda_array_interface__: ClassVar[dict[str, object]] = {"shape": (2,), "typestr": "<f4", "data": (0xDEAD0000, False),
                                    "version": 3, "strides": None, "stream": None}  # fmt: skip

    t = bridge.from_cuda_array_interface(FakeCuda(), device_id=0)
    with pytest.raises(TypeError, match=r"cannot pickle a cuda:0 tensor.*\.cpu\(\)"):
        pickle.dumps(t)
    with pytest.raises(TypeError, match="cannot pickle a cuda:0 storage"):
        pickle.dumps(t.untyped_storage())


def test_a_view_past_a_shrunk_storage_is_refused():
    v = shrunk(lambda t: t[500:])
    with pytest.raises(BufferError):
        pickle.dumps(v)


def test_share_memory_and_is_shared_as_torch():
    torch = pytest.importorskip("torch")
    t = bridge.zeros(4)
    r = torch.zeros(4)
    assert t.is_shared() is r.is_shared() is False
    assert t.share_memory_() is t and t.is_shared() and r.share_memory_().is_shared()
    assert t.share_memory_() is t  # no-op the second time
    foreign = bridge.from_numpy(np.zeros(3))
    with pytest.raises(ValueError, match="clone"):
        foreign.share_memory_()
