"""The torch API a torch user reaches for (storage and view library, no math),
each checked against torch 2.13: values, shapes, strides where torch gives
views, and the error types for bad input (where torch raises RuntimeError,
bridge raises ValueError for shapes/values and TypeError for wrong dtypes, as
the house rules ask; the tests check that torch rejects the same input)."""

from __future__ import annotations

import math
import os
import warnings

import numpy as np
import pytest

import bridge


def same(b: bridge.Tensor, t: object, *, strides: bool = True) -> None:
    """b has t's values, shape and (for views) strides."""
    assert tuple(b.shape) == tuple(t.shape)  # type: ignore[attr-defined]
    assert b.tolist() == t.tolist()  # type: ignore[attr-defined]
    if strides:
        assert b.stride() == t.stride()  # type: ignore[attr-defined]


def both_raise(bexc: type[BaseException], bcall, tcall, texc: type[BaseException] = RuntimeError) -> None:
    with pytest.raises(bexc):
        bcall()
    with pytest.raises(texc):
        tcall()


def pair(torch, *shape: int, dtype: str = "float32"):
    n = math.prod(shape)
    return (bridge.arange(n, dtype=dtype).reshape(shape), torch.arange(n, dtype=getattr(torch, dtype)).reshape(shape))


# ------------------------------------------------------------------ from_file


def test_from_file_elements_of_dtype(torch, tmp_path):
    p = tmp_path / "f.bin"
    p.write_bytes(np.arange(8, dtype=np.float32).tobytes())
    for kw in ({"size": 4}, {"size": 4, "dtype": "int16"}, {"size": 0}, {"size": 8}):
        tkw = dict(kw)
        if "dtype" in tkw:
            tkw["dtype"] = getattr(torch, tkw["dtype"])
        b, t = bridge.from_file(str(p), **kw), torch.from_file(str(p), **tkw)
        same(b, t)
        assert b.dtype.name == str(t.dtype)[6:]
    b = bridge.from_file(p, False, 2)
    b[0] = 9  # copy-on-write: the file is not touched
    assert np.fromfile(p, dtype=np.float32)[0] == 0


def test_from_file_shared_creates_and_writes_the_file(torch, tmp_path):
    p, q = tmp_path / "b.bin", tmp_path / "t.bin"
    b, t = bridge.from_file(p, shared=True, size=4), torch.from_file(str(q), shared=True, size=4)
    same(b, t)
    assert os.path.getsize(p) == os.path.getsize(q) == 16
    b.fill_(2.5)
    del b
    assert np.fromfile(p, dtype=np.float32).tolist() == [2.5] * 4


def test_from_file_bad_input(torch, tmp_path):
    p = tmp_path / "f.bin"
    p.write_bytes(bytes(8))
    both_raise(ValueError, lambda: bridge.from_file(p, size=100), lambda: torch.from_file(str(p), size=100))
    both_raise(ValueError, lambda: bridge.from_file(p, size=-1), lambda: torch.from_file(str(p), size=-1))
    both_raise(FileNotFoundError, lambda: bridge.from_file(tmp_path / "no", size=1),
               lambda: torch.from_file(str(tmp_path / "no"), size=1))  # fmt: skip
    with pytest.raises(TypeError):
        bridge.from_file(p, size=1.5)
    both_raise(TypeError, lambda: bridge.from_file(p, size=(1, 2)), lambda: torch.from_file(str(p), size=(1, 2)),
               TypeError)  # fmt: skip
    with pytest.raises(TypeError, match="unknown dtype"):
        bridge.from_file(p, size=1, dtype="nope")


def test_storage_from_file_takes_nbytes_as_torch(torch, tmp_path):
    p = tmp_path / "f.bin"
    p.write_bytes(bytes(range(8)))
    assert bridge.UntypedStorage.from_file(p, False, 4).tolist() == torch.UntypedStorage.from_file(str(p), False, 4).tolist()
    assert bridge.UntypedStorage.from_file(p, nbytes=4).nbytes() == 4
    both_raise(TypeError, lambda: bridge.UntypedStorage.from_file(p, size=4),
               lambda: torch.UntypedStorage.from_file(str(p), size=4), TypeError)  # fmt: skip


# ------------------------------------------------------------ as_tensor, asarray


def test_as_tensor_shares_when_it_can(torch):
    n = np.arange(3.0)
    b, t = bridge.as_tensor(n), torch.as_tensor(n)
    assert b.data_ptr() == t.data_ptr() == n.ctypes.data
    assert bridge.as_tensor(n, dtype=bridge.float32).data_ptr() != n.ctypes.data
    x = bridge.arange(3)
    assert bridge.as_tensor(x) is x and bridge.as_tensor(x, bridge.int64, "cpu") is x
    assert bridge.as_tensor(x, dtype=bridge.float32).tolist() == [0.0, 1.0, 2.0]
    for data in ([1, 2], [1.5], 3, [True]):
        assert str(bridge.as_tensor(data).dtype)[7:] == str(torch.as_tensor(data).dtype)[6:]
    with pytest.raises(RuntimeError, match="only CPU"):
        bridge.as_tensor([1], device="cuda")
    with pytest.raises(TypeError):
        bridge.as_tensor(["a"])


class _DLPackOnly:
    """A producer that offers nothing but DLPack."""

    def __init__(self, a):
        self.a = a

    def __dlpack__(self, **kwargs):
        return self.a.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


class _ArrayInterfaceOnly:
    """A producer that offers nothing but the array interface."""

    def __init__(self, a):
        self.a = a
        self.__array_interface__ = a.__array_interface__


def test_as_tensor_shares_a_torch_tensor_as_torch_shares_numpy(torch):
    t = torch.arange(4.0)
    b = bridge.as_tensor(t)
    assert b.data_ptr() == t.data_ptr() and b.dtype is bridge.float32
    b[0] = 7.0
    assert t[0].item() == 7.0
    assert bridge.as_tensor(t, dtype=torch.float32, device=torch.device("cpu")).data_ptr() == t.data_ptr()
    converted = bridge.as_tensor(t, dtype=float)  # another dtype: a converted copy, as torch
    assert converted.dtype is bridge.float64 and converted.data_ptr() != t.data_ptr()
    assert torch.as_tensor(t, dtype=float).data_ptr() != t.data_ptr()


def test_as_tensor_shares_dlpack_and_array_interface_producers():
    n = np.arange(6, dtype=np.int32)
    for producer in (_DLPackOnly(n), _ArrayInterfaceOnly(n), memoryview(n)):
        got = bridge.as_tensor(producer)
        assert got.data_ptr() == n.ctypes.data and got.dtype is bridge.int32, type(producer)
    assert bridge.as_tensor(_DLPackOnly(n), dtype=bridge.int64).data_ptr() != n.ctypes.data


def test_as_tensor_to_another_device_is_a_runtime_error():
    with pytest.raises(RuntimeError, match="cannot move memory from cpu to cuda"):
        bridge.as_tensor(np.arange(3.0), device="cuda")


def test_asarray_copy_and_device_as_torch(torch):
    n = np.arange(3.0)
    assert bridge.asarray(n).data_ptr() == torch.asarray(n).data_ptr() == n.ctypes.data
    assert bridge.asarray(n, copy=True).data_ptr() != n.ctypes.data
    assert bridge.asarray(n, device="cpu").data_ptr() == n.ctypes.data
    both_raise(ValueError, lambda: bridge.asarray(n, copy=False, dtype=bridge.float32),
               lambda: torch.asarray(n, copy=False, dtype=torch.float32), ValueError)  # fmt: skip
    both_raise(ValueError, lambda: bridge.asarray([1, 2], copy=False), lambda: torch.asarray([1, 2], copy=False),
               ValueError)  # fmt: skip
    assert bridge.asarray([1.5]).dtype is bridge.float32
    assert bridge.asarray(3).shape == torch.asarray(3).shape
    with pytest.raises(RuntimeError, match="does not move"):
        bridge.asarray(n, device="cuda:0")
    with pytest.raises(RuntimeError, match="does not move"):
        bridge.asarray([1], device="cuda:0")


# ------------------------------------------------------------------ new_*


def test_new_factories_take_selfs_dtype(torch):
    for dt in ("float64", "int16", "bool"):
        b, t = pair(torch, 2, 3, dtype="float64")
        b, t = b.to(dt), t.to(getattr(torch, dt))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cases = [
                (b.new_empty(2, 3), t.new_empty(2, 3)),
                (b.new_empty((4,)), t.new_empty((4,))),
                (b.new_zeros(2), t.new_zeros(2)),
                (b.new_ones((1, 2)), t.new_ones((1, 2))),
                (b.new_full((2,), 1), t.new_full((2,), 1)),
                (b.new_tensor([1, 0]), t.new_tensor([1, 0])),
                (b.new_empty_strided((2, 3), (1, 2)), t.new_empty_strided((2, 3), (1, 2))),
                (b.new_zeros(2, dtype=bridge.int32), t.new_zeros(2, dtype=torch.int32)),
            ]
        for bb, tt in cases:
            assert bb.dtype.name == str(tt.dtype)[6:]
            assert bb.shape == tuple(tt.shape) and bb.stride() == tt.stride()
        for bb, tt in cases[2:6] + cases[7:]:
            assert bb.tolist() == tt.tolist()


def test_new_factories_bad_input(torch):
    b, t = pair(torch, 2)
    both_raise(ValueError, lambda: b.new_empty(-1), lambda: t.new_empty(-1))
    both_raise(TypeError, lambda: b.new_full(2, 1), lambda: t.new_full(2, 1), TypeError)
    both_raise(TypeError, lambda: b.new_zeros("a"), lambda: t.new_zeros("a"), TypeError)
    with pytest.raises(RuntimeError, match="only CPU"):
        b.new_zeros(2, device="cuda")


# ------------------------------------------------------------ in-place views


@pytest.mark.parametrize(
    "op",
    [
        lambda x: x.as_strided_((3,), (2,), 1),
        lambda x: x.as_strided_((2, 2), (1, 2)),
        lambda x: x.t_(),
        lambda x: x.transpose_(0, 1),
        lambda x: x.swapdims_(1, 0),
        lambda x: x.swapaxes_(0, -1),
        lambda x: x.unsqueeze_(0),
        lambda x: x.unsqueeze_(-1).squeeze_(),
        lambda x: x.unsqueeze_(1).squeeze_(1),
        lambda x: x.unsqueeze_(0).unsqueeze_(0).squeeze_((0, 1)),
        lambda x: x.resize_(3, 2),
        lambda x: x.resize_(4, 4),
        lambda x: x.resize_((1,)),
        lambda x: x.resize_(0),
        lambda x: x.resize_(2, 3),
    ],
)
def test_inplace_view_ops_keep_the_object(torch, op):
    b, t = pair(torch, 2, 3)
    rb, rt = op(b), op(t)
    assert rb is b and rt is t
    assert b.shape == tuple(t.shape) and b.stride() == t.stride() and b.storage_offset() == t.storage_offset()
    n = min(6, b.numel())  # grown elements are uninitialised in both
    assert b.reshape(-1)[:n].tolist() == t.reshape(-1)[:n].tolist()


def test_resize_grows_the_same_storage(torch):
    b, t = pair(torch, 6)
    s = b.untyped_storage()
    b.resize_(4, 4)
    t.resize_(4, 4)
    assert b.untyped_storage() is s and s.nbytes() == t.untyped_storage().nbytes() == 64
    b2, t2 = bridge.arange(6.0)[2:], torch.arange(6.0)[2:]
    same(b2.resize_(2, 2), t2.resize_(2, 2))
    assert b2.storage_offset() == 2
    b3, t3 = pair(torch, 2, 3, 4, 5)
    fmt = {"memory_format": bridge.channels_last}
    assert b3.resize_(2, 3, 4, 5, **fmt).stride() == (60, 20, 5, 1)  # same shape: unchanged
    assert b3.resize_(1, 3, 4, 5, **fmt).stride() == t3.resize_(1, 3, 4, 5, memory_format=torch.channels_last).stride()
    b4, t4 = bridge.zeros(3), torch.zeros(3)
    rb, rt = b4.resize_as_(bridge.zeros(2, 2)), t4.resize_as_(torch.zeros(2, 2))
    assert rb is b4 and rb.shape == tuple(rt.shape) and rb.stride() == rt.stride()
    assert rb.flatten()[:3].tolist() == rt.flatten()[:3].tolist()  # the 4th is uninitialised


def test_inplace_view_ops_bad_input(torch):
    b, t = pair(torch, 2, 3, 4)
    both_raise(ValueError, b.t_, t.t_)
    both_raise(IndexError, lambda: b.transpose_(0, 3), lambda: t.transpose_(0, 3), IndexError)
    both_raise(IndexError, lambda: b.unsqueeze_(5), lambda: t.unsqueeze_(5), IndexError)
    both_raise(IndexError, lambda: b.squeeze_(5), lambda: t.squeeze_(5), IndexError)
    fmt = {"memory_format": bridge.channels_last}
    both_raise(ValueError, lambda: b.resize_(2, 2, **fmt), lambda: t.resize_(2, 2, memory_format=torch.channels_last))
    both_raise(ValueError, lambda: b.as_strided_((100,), (1,)), lambda: t.as_strided_((100,), (1,)))
    both_raise(ValueError, lambda: b.resize_(-1), lambda: t.resize_(-1))
    assert b.shape == (2, 3, 4)  # failed ops left it alone
    ro = bridge.frombuffer(b"abcd", dtype=bridge.uint8)
    with pytest.raises(ValueError, match="read-only"):
        ro.resize_(8)
    foreign = bridge.from_numpy(np.zeros(2))
    with pytest.raises(ValueError, match="did not allocate"):
        foreign.resize_(10)


# ------------------------------------------------------------ views


def test_ravel_views_when_possible(torch):
    b, t = pair(torch, 2, 3)
    for f in (lambda x: x.ravel(), lambda x: x.t().ravel(), lambda x: x[:, ::2].ravel(), lambda x: x[:1].ravel()):
        rb, rt = f(b), f(t)
        same(rb, rt)
        shares_b = rb.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
        assert shares_b == (rt.untyped_storage().data_ptr() == t.untyped_storage().data_ptr())
    same(bridge.ravel(b.t()), torch.ravel(t.t()))


@pytest.mark.parametrize("dims", [0, (1,), (0, 1), [-1], (), (2,), (0, 2)])
def test_flip_values_match_torch_and_are_a_view(torch, dims):
    b, t = pair(torch, 2, 3, 4)
    fb = b.flip(dims) if isinstance(dims, int) else b.flip(*dims) if dims else b.flip(dims)
    same(fb, t.flip(dims), strides=False)
    assert fb.untyped_storage() is b.untyped_storage()  # torch copies, bridge views
    b[0, 0, 0] = 100
    t[0, 0, 0] = 100
    tdims = (dims,) if isinstance(dims, int) else tuple(dims)
    same(bridge.flip(b, dims), torch.flip(t, tdims), strides=False)
    same(b[1:, :0].flip(0, 1), t[1:, :0].flip(0, 1), strides=False)


def test_flip_bad_input(torch):
    b, t = pair(torch, 2, 3)
    both_raise(ValueError, lambda: b.flip(0, 0), lambda: t.flip(0, 0))
    both_raise(IndexError, lambda: b.flip(2), lambda: t.flip(2), IndexError)
    both_raise(TypeError, lambda: b.flip(0.5), lambda: t.flip(0.5), TypeError)
    both_raise(TypeError, lambda: b.flip(), lambda: t.flip(), TypeError)


def test_real_imag_views(torch):
    b = bridge.tensor([[1 + 2j, 3 - 4j]], dtype=bridge.complex128)
    t = torch.tensor([[1 + 2j, 3 - 4j]], dtype=torch.complex128)
    for f in (lambda x: x.real, lambda x: x.imag, lambda x: x.t().imag):
        same(f(b), f(t))
        assert f(b).storage_offset() == f(t).storage_offset()
    b.real[0, 0] = 7
    t.real[0, 0] = 7
    assert b.tolist()[0][0] == 7 + 2j
    r, tr = pair(torch, 2)
    assert r.real is r and tr.real is tr
    same(bridge.real(b), torch.real(t))
    same(bridge.imag(b), torch.imag(t))
    both_raise(TypeError, lambda: r.imag, lambda: tr.imag)
    both_raise(TypeError, lambda: bridge.imag(r), lambda: torch.imag(tr))


def test_view_as_real_and_complex(torch):
    bc = bridge.tensor([1 + 2j, 3 - 4j, 5j])
    tc = torch.tensor([1 + 2j, 3 - 4j, 5j])
    same(bridge.view_as_real(bc), torch.view_as_real(tc))
    same(bridge.view_as_real(bc[::2]), torch.view_as_real(tc[::2]))
    same(bridge.view_as_real(bc[1]), torch.view_as_real(tc[1]))
    for dt in ("float32", "float64"):
        b, t = pair(torch, 4, 2, dtype=dt)
        same(bridge.view_as_complex(b), torch.view_as_complex(t))
        same(bridge.view_as_complex(b[::2]), torch.view_as_complex(t[::2]))
        assert bridge.view_as_complex(b).dtype.name == str(torch.view_as_complex(t).dtype)[6:]
    b, t = pair(torch, 2, 4)
    same(bridge.view_as_complex(b[:, :2]), torch.view_as_complex(t[:, :2]))
    assert bridge.view_as_complex(b[:, :2]).untyped_storage() is b.untyped_storage()


def test_view_as_real_and_complex_bad_input(torch):
    b, t = pair(torch, 2, 3)
    both_raise(TypeError, lambda: bridge.view_as_real(b), lambda: torch.view_as_real(t))
    both_raise(ValueError, lambda: bridge.view_as_complex(b), lambda: torch.view_as_complex(t))
    bi, ti = pair(torch, 4, 2, dtype="int64")
    both_raise(TypeError, lambda: bridge.view_as_complex(bi), lambda: torch.view_as_complex(ti))
    b9, t9 = bridge.arange(9.0)[1:].reshape(4, 2), torch.arange(9.0)[1:].reshape(4, 2)
    both_raise(ValueError, lambda: bridge.view_as_complex(b9), lambda: torch.view_as_complex(t9))
    b4, t4 = pair(torch, 2, 2)
    both_raise(ValueError, lambda: bridge.view_as_complex(b4.t()), lambda: torch.view_as_complex(t4.t()))
    b6, t6 = pair(torch, 4, 3)  # odd stride of the first dim
    both_raise(ValueError, lambda: bridge.view_as_complex(b6[:, :2]), lambda: torch.view_as_complex(t6[:, :2]))
    with pytest.raises(TypeError, match="Tensor"):
        bridge.view_as_real([1j])


@pytest.mark.parametrize("arg", [3, 1, 4, 11, [1, 5], [7, 2], [-3], [], (0, 10, 12), "t0", "t1"])
@pytest.mark.parametrize("dim", [0, -1])
def test_tensor_split_matches_torch(torch, arg, dim):
    b, t = pair(torch, 10, 2) if dim == 0 else pair(torch, 2, 10)
    barg, targ = arg, arg
    if arg == "t0":
        barg, targ = bridge.tensor(3), torch.tensor(3)
    elif arg == "t1":
        barg, targ = bridge.tensor([2, 4]), torch.tensor([2, 4])
    rb, rt = b.tensor_split(barg, dim), t.tensor_split(targ, dim)
    assert len(rb) == len(rt)
    for x, y in zip(rb, rt):
        same(x, y)
        if x.numel():  # bridge gives empty views offset 0
            assert x.storage_offset() == y.storage_offset()
    assert [x.tolist() for x in bridge.tensor_split(b, barg, dim)] == [y.tolist() for y in rt]


@pytest.mark.parametrize("size", [0, 1, 2, 5, 7, 12])
@pytest.mark.parametrize("pieces", [1, 2, 3, 5, 8, 13, 2**62])
@pytest.mark.parametrize("op", ["chunk", "tensor_split"])
def test_chunk_and_tensor_split_counts_match_torch(torch, op, size, pieces):
    """torch's piece counts and values wherever torch builds them; where torch
    fails on allocating its list (a huge count past the elements), bridge
    refuses at once with ValueError instead of building views until memory
    runs out."""
    b, t = pair(torch, 3, size)
    try:
        rt = getattr(t, op)(pieces, 1)
    except RuntimeError:
        with pytest.raises(ValueError, match="empty views"):
            getattr(b, op)(pieces, 1)
        return
    rb = getattr(b, op)(pieces, 1)
    assert len(rb) == len(rt)
    for x, y in zip(rb, rt):
        same(x, y, strides=x.numel() > 0)
        assert x.untyped_storage() is b.untyped_storage()


def test_tensor_split_bad_input(torch):
    b, t = pair(torch, 10)
    both_raise(ValueError, lambda: b.tensor_split(0), lambda: t.tensor_split(0))
    both_raise(TypeError, lambda: b.tensor_split(1.5), lambda: t.tensor_split(1.5), TypeError)
    both_raise(TypeError, lambda: b.tensor_split([1.5]), lambda: t.tensor_split([1.5]), TypeError)
    both_raise(ValueError, lambda: bridge.tensor(3.0).tensor_split(2), lambda: torch.tensor(3.0).tensor_split(2))
    both_raise(ValueError, lambda: b.tensor_split(bridge.tensor([[1]])), lambda: t.tensor_split(torch.tensor([[1]])))
    both_raise(TypeError, lambda: b.tensor_split(bridge.tensor([1.0])), lambda: t.tensor_split(torch.tensor([1.0])))
    both_raise(IndexError, lambda: b.tensor_split(2, 1), lambda: t.tensor_split(2, 1), IndexError)


def test_movedim_moveaxis_swapaxes(torch):
    b, t = pair(torch, 2, 3, 4)
    same(b.moveaxis(0, -1), t.moveaxis(0, -1))
    same(bridge.movedim(b, (0, 1), (2, 0)), torch.movedim(t, (0, 1), (2, 0)))
    same(bridge.moveaxis(b, 1, 0), torch.moveaxis(t, 1, 0))
    same(bridge.swapaxes(b, 0, 2), torch.swapaxes(t, 0, 2))
    same(bridge.swapdims(b, 0, 1), torch.swapdims(t, 0, 1))
    both_raise(ValueError, lambda: b.movedim((0, 0), (1, 2)), lambda: t.movedim((0, 0), (1, 2)))


# ------------------------------------------------------------ introspection


def test_dtype_predicates_and_device(torch):
    for name in ("float32", "bfloat16", "int8", "uint8", "bool", "complex64", "float8_e4m3fn", "uint16"):
        b, t = bridge.zeros(1, dtype=name), torch.zeros(1, dtype=getattr(torch, name))
        for p in ("is_floating_point", "is_complex", "is_signed"):
            assert getattr(b, p)() == getattr(t, p)(), (name, p)
            assert getattr(bridge, p)(b) == getattr(torch, p)(t), (name, p)
        assert b.get_device() == t.get_device() == -1
        assert b.is_pinned() is t.is_pinned() is False
    with pytest.raises(TypeError):
        bridge.is_complex([1j])


def test_is_set_to(torch):
    b, t = pair(torch, 2, 3)
    for f in (lambda x: x, lambda x: x.view(6), lambda x: x.view(2, 3), lambda x: x.t(), lambda x: x[1:]):
        assert b.is_set_to(f(b)) == t.is_set_to(f(t))
    assert not b.is_set_to(b.clone())
    c = bridge.empty(0).set_(b)
    assert c.is_set_to(b)
    both_raise(TypeError, lambda: b.is_set_to([1]), lambda: t.is_set_to([1]), TypeError)


@pytest.mark.parametrize(
    "view",
    [
        lambda x: x,
        lambda x: x.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2),
        lambda x: x.permute(3, 1, 0, 2),
        lambda x: x[:, :1],
        lambda x: x[:, :, ::2],
        lambda x: x[0, 0].t(),
        lambda x: x[0, 0, 0],
        lambda x: x[0, 0, 0, 0],
        lambda x: x[:, :1].expand(2, 3, 4, 5),
        lambda x: x.flatten()[:3].as_strided((2, 2), (1, 1)),
        lambda x: x[:1, :1].permute(1, 0, 3, 2),
    ],
)
def test_dim_order_matches_torch(torch, view):
    b, t = pair(torch, 2, 3, 4, 5)
    assert view(b).dim_order() == view(t).dim_order()
    try:
        expected = view(t).dim_order(ambiguity_check=True)
    except RuntimeError:
        with pytest.raises(ValueError, match="unique"):
            view(b).dim_order(ambiguity_check=True)
    else:
        assert view(b).dim_order(ambiguity_check=True) == expected


def test_dim_order_bad_input(torch):
    b, t = pair(torch, 2, 3)
    with pytest.raises(TypeError, match="bool"):
        b.dim_order(ambiguity_check=[bridge.contiguous_format])
    with pytest.raises(TypeError):
        b.dim_order(1)
    with pytest.raises(TypeError):
        t.dim_order(1)


def test_equal_as_torch(torch):
    cases = [
        ([1, 2], None, [1.0, 2.0], None),
        ([1, 2], None, [[1, 2]], None),
        ([float("nan")], None, [float("nan")], None),
        ([True], None, [1], None),
        ([0.1], "float64", [0.1], "float32"),
        ([1.5, 2], "bfloat16", [1.5, 2], "float32"),
        ([257], "int16", [257], "bfloat16"),
        ([], None, [], None),
        ([1 + 1j], None, [1], None),
    ]
    for a, da, c, dc in cases:
        ba, bc = bridge.tensor(a, dtype=da), bridge.tensor(c, dtype=dc)
        ta = torch.tensor(a, dtype=getattr(torch, da) if da else None)
        tc = torch.tensor(c, dtype=getattr(torch, dc) if dc else None)
        assert ba.equal(bc) == torch.equal(ta, tc), (a, da, c, dc)
        assert bridge.equal(ba, bc) == ta.equal(tc)
    b, t = pair(torch, 2, 3)
    assert b.t().equal(b.t().contiguous()) and b.flip(0).equal(bridge.tensor(b.tolist()[::-1]))
    both_raise(TypeError, lambda: bridge.equal(b, [1]), lambda: torch.equal(t, [1]), TypeError)
    both_raise(TypeError, lambda: bridge.equal([1], b), lambda: torch.equal([1], t), TypeError)


def test_eq_operator_is_identity():
    a = bridge.zeros(2)
    assert (a == a) is True and (a == a.view(2)) is False  # documented: no elementwise ==


# ------------------------------------------------------------ module functions


def test_module_functions_exist_in_torch(torch):
    names = [
        "permute", "reshape", "transpose", "squeeze", "unsqueeze", "flatten", "narrow", "select", "movedim",
        "moveaxis", "swapaxes", "swapdims", "t", "chunk", "split", "tensor_split", "unbind", "flip", "ravel",
        "view_as_real", "view_as_complex", "broadcast_to", "expand_copy", "unflatten", "diagonal", "real", "imag",
        "is_tensor", "is_storage", "numel", "broadcast_shapes", "broadcast_tensors", "equal", "finfo", "iinfo",
        "from_file", "as_tensor", "asarray", "is_floating_point", "is_complex", "is_signed",
    ]  # fmt: skip
    for n in names:
        assert hasattr(torch, n) and hasattr(bridge, n) and n in bridge.__all__, n


def test_functional_forms_match_torch(torch):
    b, t = pair(torch, 2, 3, 1)
    calls = [
        ("permute", ((2, 0, 1),)), ("reshape", ((3, 2),)), ("transpose", (0, 1)), ("squeeze", ()),
        ("squeeze", (2,)), ("unsqueeze", (0,)), ("flatten", ()), ("flatten", (1,)), ("narrow", (1, 1, 2)),
        ("select", (1, 2)), ("broadcast_to", ((4, 2, 3, 5),)), ("unflatten", (1, (3, 1))),
        ("diagonal", (0, 0, 1)), ("expand_copy", ((2, 3, 4),)),
    ]  # fmt: skip
    for name, args in calls:
        same(getattr(bridge, name)(b, *args), getattr(torch, name)(t, *args))
    same(bridge.t(b[:, :, 0]), torch.t(t[:, :, 0]))
    for name, args in [("chunk", (2, 1)), ("split", (2, 1)), ("split", ([1, 2], 1)), ("unbind", (1,))]:
        for x, y in zip(getattr(bridge, name)(b, *args), getattr(torch, name)(t, *args)):
            same(x, y)
    assert bridge.expand_copy(b, (2, 3, 4)).is_contiguous()
    assert bridge.is_tensor(b) and not bridge.is_tensor(b.numpy())
    assert bridge.is_storage(b.untyped_storage()) and not bridge.is_storage(b)
    assert bridge.numel(b) == torch.numel(t) == 6
    both_raise(TypeError, lambda: bridge.numel(b.numpy()), lambda: torch.numel(t.numpy()), TypeError)
    both_raise(TypeError, lambda: bridge.permute([1], (0,)), lambda: torch.permute([1], (0,)), TypeError)
    both_raise(IndexError, lambda: bridge.select(b, 3, 0), lambda: torch.select(t, 3, 0), IndexError)


def test_broadcast_shapes_and_tensors(torch):
    for shapes in [((2, 1), (3,)), (2, (3, 1)), ((), (4,)), ((0, 1), (1, 5)), ((1,),)]:
        assert bridge.broadcast_shapes(*shapes) == tuple(torch.broadcast_shapes(*shapes))
    both_raise(ValueError, lambda: bridge.broadcast_shapes((2,), (3,)), lambda: torch.broadcast_shapes((2,), (3,)))
    both_raise(ValueError, lambda: bridge.broadcast_shapes((-1,), (2,)), lambda: torch.broadcast_shapes((-1,), (2,)),
               ValueError)  # fmt: skip
    b1, t1 = pair(torch, 2, 1)
    b2, t2 = pair(torch, 3)
    for x, y in zip(bridge.broadcast_tensors(b1, b2), torch.broadcast_tensors(t1, t2)):
        same(x, y)
    both_raise(ValueError, lambda: bridge.broadcast_tensors(b2, bridge.zeros(2)),
               lambda: torch.broadcast_tensors(t2, torch.zeros(2)))  # fmt: skip
    with pytest.raises(TypeError):
        bridge.broadcast_tensors(b1, [1])


@pytest.mark.parametrize(
    "name", ["float32", "float16", "bfloat16", "float64", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu",
             "complex64", "complex128"],
)  # fmt: skip
def test_finfo_matches_torch(torch, name):
    b, t = bridge.finfo(getattr(bridge, name)), torch.finfo(getattr(torch, name))
    for attr in ("bits", "eps", "max", "min", "tiny", "smallest_normal", "resolution", "dtype"):
        assert getattr(b, attr) == getattr(t, attr), (name, attr)


def test_finfo_iinfo_defaults_and_errors(torch):
    assert bridge.finfo().dtype == torch.finfo().dtype == "float32"
    assert "eps=1.19209e-07" in repr(bridge.finfo())
    for name in ("int8", "uint8", "int16", "int32", "int64", "uint16", "uint32", "uint64"):
        b, t = bridge.iinfo(getattr(bridge, name)), torch.iinfo(getattr(torch, name))
        assert (b.bits, b.max, b.min, b.dtype) == (t.bits, t.max, t.min, t.dtype)
    assert repr(bridge.iinfo(bridge.int8)) == "iinfo(min=-128, max=127, dtype=int8)"
    both_raise(TypeError, lambda: bridge.finfo(bridge.int32), lambda: torch.finfo(torch.int32), TypeError)
    both_raise(TypeError, lambda: bridge.iinfo(bridge.float32), lambda: torch.iinfo(torch.float32), TypeError)
    both_raise(TypeError, lambda: bridge.iinfo(bridge.bool), lambda: torch.iinfo(torch.bool), TypeError)
    with pytest.raises(TypeError, match="bridge dtype"):
        bridge.finfo("nope")


def test_clone_takes_memory_format_none_as_torch_does(torch):
    t = bridge.arange(24, dtype=bridge.float32).reshape(2, 3, 4).permute(2, 0, 1)
    ref = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4).permute(2, 0, 1)
    got, want = t.clone(memory_format=None), ref.clone(memory_format=None)
    assert got.stride() == want.stride() and got.tolist() == want.tolist()
    assert got.data_ptr() != t.data_ptr()


def test_is_contiguous_takes_none_and_refuses_unknown_keywords(torch):
    t = bridge.arange(6).view(2, 3)
    assert t.is_contiguous(None) is True and t.t().is_contiguous(memory_format=None) is False
    assert t.t().is_contiguous(bridge.contiguous_format) is torch.arange(6).view(2, 3).t().is_contiguous()
    with pytest.raises(TypeError, match="unexpected keyword argument 'format'"):
        t.is_contiguous(format=bridge.contiguous_format)
