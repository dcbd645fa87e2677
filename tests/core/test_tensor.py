"""Tensor: the issue's seed examples, views, copies, factories, repr and errors."""

from __future__ import annotations

import numpy as np
import pytest
from lifetimes import shrunk

import bridge
from bridge import Tensor


def shares(a: Tensor, b: Tensor) -> bool:
    return a.untyped_storage() is b.untyped_storage()


# ------------------------------------------------------------ seed examples


def test_transpose_shares_storage():
    t = bridge.arange(6).reshape(2, 3)
    tr = t.t()
    assert tr.data_ptr() == t.data_ptr() and shares(t, tr)
    assert tr.stride() == (1, 3)


def test_points_slice_geometry():
    points = bridge.tensor([[4.0, 1.0, 5.0], [3.0, 2.0, 1.0], [7.0, 8.0, 9.0]])
    sub = points[1:3, 1:3]
    assert sub.storage_offset() == 4
    assert sub.stride() == (3, 1)
    assert not sub.is_contiguous()
    assert sub.tolist() == [[2.0, 1.0], [8.0, 9.0]]


def test_permute_contiguity():
    t = bridge.arange(24).reshape(1, 2, 3, 4)
    assert t.stride() == (24, 12, 4, 1)
    p = t.permute(1, 2, 3, 0)
    assert p.stride() == (12, 4, 1, 24) and p.is_contiguous()
    q = t.permute(0, 2, 3, 1)
    assert q.stride() == (24, 4, 1, 12) and not q.is_contiguous()


def test_broadcast_to_is_stride_zero_without_memory():
    t = bridge.arange(24).reshape(1, 2, 3, 4)
    b = t.broadcast_to((2, 2, 3, 4))
    assert b.stride() == (0, 12, 4, 1)
    assert shares(b, t) and b.untyped_storage().nbytes() == 24 * 8


def test_select_last_dim():
    t = bridge.arange(24).reshape(1, 2, 3, 4)
    s = t[:, :, :, 2]
    assert s.storage_offset() == 2 and s.stride() == (24, 12, 4)


def test_writes_are_seen_through_every_view():
    t = bridge.zeros(3, 4)
    views = [t.t(), t[1:, ::2], t.view(12), t.reshape(2, 6), t.unsqueeze(0)[0], t[..., None]]
    t[2, 2] = 5.0
    for v in views:
        assert 5.0 in v.numpy()
    t.t()[3, 0] = 7.0
    assert t[0, 3].item() == 7.0
    t.view(12)[5] = 9.0
    assert t[1, 1].item() == 9.0
    storage_vals = np.frombuffer(bytes(t.untyped_storage().tolist()), dtype=np.float32)
    assert storage_vals[5] == 9.0 and storage_vals[3] == 7.0 and storage_vals[10] == 5.0


# ------------------------------------------------------------------- views


def test_negative_steps_match_numpy():
    t = bridge.arange(24).reshape(4, 6)
    a = np.arange(24).reshape(4, 6)
    for key in [(slice(None, None, -1),), (slice(None), slice(None, None, -2)),
                (slice(3, 0, -2), slice(5, None, -3)), (Ellipsis, slice(None, None, -1))]:  # fmt: skip
        v = t[key]
        assert v.tolist() == a[key].tolist()
        assert tuple(s * 8 for s in v.stride()) == a[key].strides
        assert shares(v, t)


def test_index_none_ellipsis():
    t = bridge.arange(6).reshape(2, 3)
    assert t[None].shape == (1, 2, 3) and t[None].stride() == (6, 3, 1)
    assert t[:, None].stride() == (3, 3, 1)
    assert t[..., None].shape == (2, 3, 1)
    assert t[..., 1].tolist() == [1, 4]
    assert t[1].tolist() == [3, 4, 5] and t[-1, -1].item() == 5
    assert t[()].shape == (2, 3)


def test_setitem_broadcast_and_scalar():
    t = bridge.zeros(2, 3)
    t[0] = bridge.tensor([1.0, 2.0, 3.0])
    t[1, ::2] = 9
    t[:, 1] = bridge.tensor([[5.0]]).view(1)
    assert t.tolist() == [[1.0, 5.0, 3.0], [9.0, 5.0, 9.0]]
    t[...] = np.array([1, 2, 3])
    assert t.tolist() == [[1, 2, 3], [1, 2, 3]]


def test_advanced_indexing_copies():
    t = bridge.arange(10)
    picked = t[[1, 3, 5]]
    assert picked.tolist() == [1, 3, 5] and not shares(picked, t)
    mask = bridge.tensor([True, False] * 5)
    assert t[mask].tolist() == [0, 2, 4, 6, 8]
    t[bridge.tensor([0, 1])] = -1
    assert t.tolist()[:3] == [-1, -1, 2]


def test_view_and_reshape():
    t = bridge.arange(12).reshape(3, 4)
    assert t.view(-1).shape == (12,) and shares(t.view(4, 3), t)
    assert t.view((2, 6)).stride() == (6, 1)
    tt = t.t()
    with pytest.raises(ValueError, match="reshape"):
        tt.view(12)
    r = tt.reshape(12)
    assert not shares(r, t) and r.tolist() == np.arange(12).reshape(3, 4).T.reshape(12).tolist()
    assert shares(t[:, :2].reshape(3, 2), t)


def test_view_dtype():
    t = bridge.tensor([1.0, 2.0], dtype=bridge.float32)
    i = t.view(bridge.int32)
    assert i.tolist() == np.array([1.0, 2.0], np.float32).view(np.int32).tolist() and shares(i, t)
    b = t.view(bridge.uint8)
    assert b.shape == (8,)
    back = b.view(bridge.float32)
    assert back.tolist() == [1.0, 2.0]
    m = bridge.arange(8, dtype=bridge.int16).reshape(2, 4)
    w = m.view(bridge.int64)
    assert w.shape == (2, 1) and w.stride() == (1, 1)
    assert m.view("int16") is not m


def test_view_dtype_errors():
    with pytest.raises(ValueError, match="0-d"):
        bridge.tensor(1.0).view(bridge.float64)
    with pytest.raises(ValueError, match="stride 1"):
        bridge.zeros(4, 4).t().view(bridge.float64)
    with pytest.raises(ValueError, match="multiple of 2"):
        bridge.zeros(3).view(bridge.float64)
    with pytest.raises(ValueError, match="offset"):
        bridge.zeros(5)[1:].view(bridge.float64)


def test_permute_transpose_T_mT_movedim():
    a = np.arange(24).reshape(2, 3, 4)
    t = bridge.arange(24).reshape(2, 3, 4)
    assert t.permute(2, 0, 1).tolist() == a.transpose(2, 0, 1).tolist()
    assert t.permute([-1, 0, 1]).shape == (4, 2, 3)
    assert t.transpose(0, 2).tolist() == a.swapaxes(0, 2).tolist()
    assert t.T.tolist() == a.T.tolist()
    assert t.mT.tolist() == np.swapaxes(a, -1, -2).tolist()
    assert t.movedim(0, -1).tolist() == np.moveaxis(a, 0, -1).tolist()
    assert t.movedim((0, 1), (2, 0)).tolist() == np.moveaxis(a, (0, 1), (2, 0)).tolist()
    assert bridge.tensor(3).t().item() == 3


def test_expand_squeeze_unsqueeze():
    t = bridge.tensor([[1], [2]])
    e = t.expand(3, 2, 4)
    assert e.shape == (3, 2, 4) and e.stride() == (0, 1, 0)
    assert e.tolist() == np.broadcast_to(np.array([[1], [2]]), (3, 2, 4)).tolist()
    assert t.expand(-1, 5).shape == (2, 5)
    z = bridge.zeros(1, 3, 1)
    assert z.squeeze().shape == (3,)
    assert z.squeeze(0).shape == (3, 1) and z.squeeze(1).shape == (1, 3, 1)
    assert z.squeeze((0, 2)).shape == (3,)
    assert z.unsqueeze(-1).shape == (1, 3, 1, 1) and z.unsqueeze(0).shape == (1, 1, 3, 1)
    assert bridge.tensor(5).unsqueeze(0).shape == (1,)


def test_flatten_unflatten():
    t = bridge.arange(24).reshape(2, 3, 4)
    assert t.flatten().shape == (24,) and shares(t.flatten(), t)
    assert t.flatten(1).shape == (2, 12)
    assert t.flatten(0, 1).shape == (6, 4)
    assert bridge.tensor(3).flatten().shape == (1,)
    u = t.unflatten(2, (2, -1))
    assert u.shape == (2, 3, 2, 2) and u.tolist() == np.arange(24).reshape(2, 3, 2, 2).tolist()
    perm = t.permute(2, 0, 1)
    assert perm.flatten(1).tolist() == np.arange(24).reshape(2, 3, 4).transpose(2, 0, 1).reshape(4, 6).tolist()


def test_narrow_select_unfold_diagonal():
    t = bridge.arange(20).reshape(4, 5)
    a = np.arange(20).reshape(4, 5)
    assert t.narrow(1, 1, 3).tolist() == a[:, 1:4].tolist()
    assert t.narrow(0, -2, 2).tolist() == a[2:].tolist()
    assert t.select(1, -1).tolist() == a[:, -1].tolist()
    u = t.unfold(1, 2, 2)
    assert u.shape == (4, 2, 2) and u.tolist() == np.lib.stride_tricks.sliding_window_view(a, 2, axis=1)[:, ::2].tolist()
    assert t.diagonal().tolist() == np.diagonal(a).tolist()
    assert t.diagonal(2).tolist() == np.diagonal(a, 2).tolist()
    assert t.diagonal(-1).tolist() == np.diagonal(a, -1).tolist()
    assert t.diagonal(10).shape == (0,)
    b = bridge.arange(24).reshape(2, 3, 4)
    assert b.diagonal(0, 2, 0).tolist() == np.diagonal(np.arange(24).reshape(2, 3, 4), 0, 2, 0).tolist()


def test_split_chunk_unbind():
    t = bridge.arange(10)
    assert [p.tolist() for p in t.split(4)] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert [p.numel() for p in t.split([3, 7])] == [3, 7]
    assert [p.numel() for p in t.chunk(3)] == [4, 4, 2]
    assert [p.numel() for p in bridge.arange(5).chunk(4)] == [2, 2, 1]
    assert len(bridge.zeros(0).chunk(3)) == 3
    m = bridge.arange(6).reshape(2, 3)
    assert [r.tolist() for r in m.unbind(1)] == [[0, 3], [1, 4], [2, 5]]
    assert all(shares(p, t) for p in t.split(3))


@pytest.mark.parametrize(
    "call",
    [
        lambda: bridge.empty(0).chunk(2**62),
        lambda: bridge.chunk(bridge.empty(4, 0), 2**62, 1),
        lambda: bridge.empty(5).tensor_split(2**62),
        lambda: bridge.tensor_split(bridge.empty(0), 2**62),
    ],
)
def test_huge_piece_counts_refused_at_once(call):
    """A count of pieces far past the elements raises instead of building one
    empty view per piece until memory runs out."""
    with pytest.raises(ValueError, match="empty views"):
        call()


def test_empty_pieces_bound():
    """Up to the bound, an empty dim gives `chunks` empty views (as torch);
    one more is refused; a non-empty dim never gives more views than it has
    elements, whatever the count."""
    from bridge.core.tensor_ops import _MAX_EMPTY_PIECES as limit

    assert [p.shape for p in bridge.empty(2, 0).chunk(limit, 1)] == [(2, 0)] * limit
    with pytest.raises(ValueError, match=f"at most {limit} empty"):
        bridge.empty(2, 0).chunk(limit + 1, 1)
    assert len(bridge.empty(3).tensor_split(limit + 3)) == limit + 3
    with pytest.raises(ValueError, match=f"at most {limit} empty"):
        bridge.empty(3).tensor_split(limit + 4)
    assert [p.tolist() for p in bridge.arange(5).chunk(2**62)] == [[0], [1], [2], [3], [4]]
    big = bridge.zeros(1).expand(2**62 + 1)  # past float precision: chunk sizes are integer ceilings
    assert [p.shape[0] for p in big.chunk(2)] == [2**61 + 1, 2**61]


def test_as_strided_and_set():
    t = bridge.arange(10)
    w = t.as_strided((4, 3), (2, 1))
    assert w.tolist() == np.lib.stride_tricks.as_strided(np.arange(10), (4, 3), (16, 8)).tolist()
    assert bridge.as_strided(t, (2,), (1,), 8).tolist() == [8, 9]
    s = bridge.empty(0, dtype=bridge.int64)
    s.set_(t.untyped_storage(), 2, (2, 2), (1, 2))
    assert s.tolist() == [[2, 4], [3, 5]] and shares(s, t)
    s.set_(t)
    assert s.shape == (10,)
    s.set_()
    assert s.numel() == 0
    s.set_(t.untyped_storage())
    assert s.shape == (10,)


def test_iteration_and_len():
    t = bridge.arange(6).reshape(3, 2)
    assert [r.tolist() for r in t] == [[0, 1], [2, 3], [4, 5]]
    assert len(t) == 3
    with pytest.raises(TypeError, match="0-d"):
        len(bridge.tensor(1))
    with pytest.raises(TypeError, match="0-d"):
        iter(bridge.tensor(1)).__next__()


# ------------------------------------------------------------------ copies


def test_contiguous_memory_formats(torch):
    x = bridge.arange(2 * 3 * 4 * 5, dtype=bridge.float32).reshape(2, 3, 4, 5)
    tx = torch.arange(2 * 3 * 4 * 5, dtype=torch.float32).reshape(2, 3, 4, 5)
    cl = x.contiguous(memory_format=bridge.channels_last)
    assert cl.stride() == tx.contiguous(memory_format=torch.channels_last).stride()
    assert cl.is_contiguous(memory_format=bridge.channels_last) and not cl.is_contiguous()
    assert cl.tolist() == x.tolist()
    assert x.contiguous() is x
    assert cl.contiguous(memory_format=bridge.channels_last) is cl
    v = bridge.zeros(2, 3, 4, 5, 6)
    assert v.contiguous(memory_format=bridge.channels_last_3d).stride() == torch.zeros(2, 3, 4, 5, 6).contiguous(memory_format=torch.channels_last_3d).stride()
    with pytest.raises(ValueError, match="rank 4"):
        bridge.zeros(2, 3).contiguous(memory_format=bridge.channels_last)
    with pytest.raises(ValueError, match="preserve_format"):
        x.contiguous(memory_format=bridge.preserve_format)


def test_clone_preserve_format(torch):
    x = bridge.arange(24, dtype=bridge.float32).reshape(2, 3, 4)
    tx = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4)
    for op in [lambda t: t.permute(2, 0, 1), lambda t: t[:, ::2], lambda t: t.transpose(0, 1)[:, 1:]]:
        got = op(x).clone()
        want = op(tx).clone()
        assert got.stride() == want.stride()
        assert got.tolist() == want.tolist()
        assert not shares(got, x)
    assert x[::2].clone(memory_format=bridge.contiguous_format).is_contiguous()


def test_contiguous_of_negative_strides():
    t = bridge.arange(6).reshape(2, 3)[::-1, ::-1]
    c = t.contiguous()
    assert c.stride() == (3, 1) and c.tolist() == [[5, 4, 3], [2, 1, 0]]


def test_copy_casts_and_broadcasts():
    t = bridge.zeros(2, 3, dtype=bridge.int32)
    t.copy_(bridge.tensor([1.7, -2.2, 3.9]))
    assert t.tolist() == [[1, -2, 3], [1, -2, 3]]
    t.copy_(7)
    assert t.tolist() == [[7] * 3] * 2
    with pytest.raises(ValueError, match="broadcast"):
        t.copy_(bridge.zeros(4))


def test_copy_between_overlapping_views():
    t = bridge.arange(6)
    t[1:].copy_(t[:-1])
    assert t.tolist() == [0, 0, 1, 2, 3, 4]


def test_to_and_casts():
    t = bridge.tensor([1.5, 2.5])
    assert t.to(bridge.float32) is t
    assert t.to(bridge.float32, copy=True) is not t
    assert t.to(bridge.int64).tolist() == [1, 2]
    assert t.to("float64").dtype is bridge.float64
    assert t.to("cpu") is t
    assert t.double().dtype is bridge.float64 and t.long().dtype is bridge.int64
    assert t.half().dtype is bridge.float16 and t.bool().tolist() == [True, True]
    assert t.bfloat16().tolist() == [1.5, 2.5]
    assert t.to(bridge.zeros(1, dtype=bridge.int8)).dtype is bridge.int8
    assert t.type() == "bridge.float32"
    with pytest.raises(RuntimeError, match="cuda"):
        t.to("cuda")
    with pytest.raises(TypeError, match="unexpected keyword"):
        t.to(bridge.float32, bogus=1)


def test_fill_zero_item_tolist():
    t = bridge.empty(2, 2).fill_(3)
    assert t.tolist() == [[3.0, 3.0], [3.0, 3.0]]
    assert t.zero_().tolist() == [[0.0, 0.0], [0.0, 0.0]]
    assert bridge.tensor([[4]]).item() == 4
    assert float(bridge.tensor(2.5)) == 2.5 and int(bridge.tensor(3)) == 3
    assert [10, 20, 30][bridge.tensor(1)] == 20
    assert bool(bridge.tensor([True]))
    with pytest.raises(ValueError, match="cannot be converted"):
        bridge.zeros(2).item()
    with pytest.raises(ValueError, match="ambiguous"):
        bool(bridge.zeros(2))
    with pytest.raises(ValueError, match="scalar"):
        t.fill_([1, 2])


def test_copies_work_for_ml_dtypes():
    t = bridge.tensor([1.0, 2.0, 3.0], dtype=bridge.bfloat16)
    assert t[::-1].contiguous().tolist() == [3.0, 2.0, 1.0]
    f8 = bridge.tensor([1.0, 0.5], dtype=bridge.float8_e4m3fn)
    assert f8.tolist() == [1.0, 0.5] and f8.clone().tolist() == [1.0, 0.5]


# --------------------------------------------------------------- factories


def test_factories():
    assert bridge.empty(2, 3).shape == (2, 3) and bridge.empty((2, 3)).dtype is bridge.float32
    assert bridge.zeros([2]).tolist() == [0.0, 0.0]
    assert bridge.ones(2, dtype=bridge.int8).tolist() == [1, 1]
    assert bridge.full((2,), 7).dtype is bridge.int64
    assert bridge.full((2,), 7.0).dtype is bridge.float32
    assert bridge.full((1,), True).dtype is bridge.bool
    assert bridge.full((1,), 1j).dtype is bridge.complex64
    assert bridge.arange(5).tolist() == [0, 1, 2, 3, 4] and bridge.arange(5).dtype is bridge.int64
    assert bridge.arange(1, 2, 0.25).tolist() == [1.0, 1.25, 1.5, 1.75]
    assert bridge.arange(1, 2, 0.25).dtype is bridge.float32
    assert bridge.arange(5, 0, -2).tolist() == [5, 3, 1]
    assert bridge.arange(0).numel() == 0
    es = bridge.empty_strided((2, 3), (1, 2))
    assert es.stride() == (1, 2) and es.untyped_storage().nbytes() == 6 * 4
    assert bridge.empty(2, 3, 4, 5, memory_format=bridge.channels_last).is_contiguous(memory_format=bridge.channels_last)


def test_like_factories_preserve_layout():
    base = bridge.zeros(2, 3, 4).permute(2, 0, 1)
    for f in (bridge.empty_like, bridge.zeros_like, bridge.ones_like):
        out = f(base)
        assert out.stride() == base.stride() and not shares(out, base)
    assert bridge.full_like(base, 2).tolist() == np.full((4, 2, 3), 2.0).tolist()
    assert bridge.zeros_like(base, dtype=bridge.int8).dtype is bridge.int8


def test_tensor_dtype_inference_like_torch(torch):
    for data in ([1, 2], [1.0, 2], [True, False], [1 + 1j], 3, 2.5, [[1, 2], [3, 4]], [],
                 np.arange(3, dtype=np.int16), np.float16(1.5)):  # fmt: skip
        assert bridge.tensor(data).dtype.name == str(torch.tensor(data).dtype)[6:], data
        assert bridge.tensor(data).tolist() == torch.tensor(data).tolist()


def test_tensor_from_tensor_copies():
    t = bridge.arange(3)
    c = bridge.tensor(t)
    assert c.tolist() == [0, 1, 2] and not shares(c, t)
    assert bridge.tensor(t, dtype=bridge.float32).tolist() == [0.0, 1.0, 2.0]


def test_factory_errors():
    with pytest.raises(ValueError, match="negative dimension"):
        bridge.empty(2, -1)
    with pytest.raises(TypeError, match="sequence of ints"):
        bridge.zeros(2.5)
    with pytest.raises(ValueError, match="step must be nonzero"):
        bridge.arange(0, 5, 0)
    with pytest.raises(ValueError, match="inconsistent"):
        bridge.arange(5, 0, 1)
    with pytest.raises(ValueError, match="ragged"):
        bridge.tensor([[1, 2], [3]])
    with pytest.raises(TypeError):
        bridge.tensor(["a", "b"])
    with pytest.raises(TypeError):
        bridge.full((2,), "x")
    with pytest.raises(RuntimeError, match="only CPU"):
        bridge.zeros(2, device="cuda")
    with pytest.raises(ValueError, match="negative strides"):
        bridge.empty_strided((2,), (-1,))
    with pytest.raises(TypeError, match="no public constructor"):
        Tensor()
    with pytest.raises(TypeError, match="unknown dtype"):
        bridge.zeros(2, dtype="float33")


# ------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    "op, exc, match",
    [
        (lambda t: t.view(5), ValueError, "invalid for input of size"),
        (lambda t: t.view(-1, -1), ValueError, "only one dimension"),
        (lambda t: t.reshape(7, -1), ValueError, "invalid"),
        (lambda t: t[3], IndexError, "out of bounds"),
        (lambda t: t[0, 0, 0], IndexError, "too many indices"),
        (lambda t: t[..., ...], IndexError, "single ellipsis"),
        (lambda t: t[::0], ValueError, "zero"),
        (lambda t: t["a"], TypeError, "valid indices"),
        (lambda t: t[1.5], TypeError, "valid indices"),
        (lambda t: t.permute(0), ValueError, "number of dims"),
        (lambda t: t.permute(0, 0), ValueError, "repeated"),
        (lambda t: t.transpose(0, 2), IndexError, "Dimension out of range"),
        (lambda t: t.size(5), IndexError, "Dimension out of range"),
        (lambda t: t.stride(-3), IndexError, "Dimension out of range"),
        (lambda t: t.select(0, 5), IndexError, "out of bounds"),
        (lambda t: t.narrow(1, 2, 5), ValueError, "exceeds"),
        (lambda t: t.narrow(1, 9, 1), IndexError, "out of range"),
        (lambda t: t.expand(3, 4), ValueError, "cannot be expanded"),
        (lambda t: t.expand(4), ValueError, "greater or equal"),
        (lambda t: t.squeeze(4), IndexError, "Dimension out of range"),
        (lambda t: t.unsqueeze(4), IndexError, "Dimension out of range"),
        (lambda t: t.flatten(1, 0), ValueError, "start_dim"),
        (lambda t: t.unflatten(1, (4, 2)), ValueError, "invalid"),
        (lambda t: t.unfold(1, 5, 1), ValueError, "exceeds"),
        (lambda t: t.unfold(1, 2, 0), ValueError, "step"),
        (lambda t: t.diagonal(0, 1, 1), ValueError, "identical"),
        (lambda t: t.split([1, 2]), ValueError, "sum"),
        (lambda t: t.split(0), ValueError, "positive"),
        (lambda t: t.chunk(0), ValueError, "greater than 0"),
        (lambda t: t.as_strided((2, 3), (3, 1), 1), ValueError, "storage holds 6"),
        (lambda t: t.as_strided((2,), (-1,), 0), ValueError, r"reaches elements \[-1"),
        (lambda t: t.as_strided((2,), (1,), -1), ValueError, "non-negative"),
        (lambda t: t.as_strided((2, 2), (1,)), ValueError, "different lengths"),
        (lambda t: t.as_strided((-2,), (1,)), ValueError, "negative dimension"),
        (lambda t: t.set_(t.untyped_storage(), 4, (3,)), ValueError, "storage holds"),
        (lambda t: t.set_(b"xx"), TypeError, "UntypedStorage or Tensor"),
        (lambda t: t.t().view(6), ValueError, "reshape"),
        (lambda t: t.is_contiguous(bridge.preserve_format), ValueError, "does not take"),
        (lambda t: t[0].mT, ValueError, "matrices"),
        (lambda t: bridge.zeros(2, 2, 2).t(), ValueError, "<= 2 dimensions"),
        (lambda t: t.movedim((0, 1), 0), ValueError, "same number"),
    ],
)
def test_bad_input_raises(op, exc, match):
    t = bridge.arange(6).reshape(2, 3)
    with pytest.raises(exc, match=match):
        op(t)


def test_write_to_read_only_tensor_raises():
    t = bridge.tensor([0], dtype=bridge.uint8).set_(bridge.UntypedStorage.from_buffer(b"abcd"))
    assert t.is_readonly
    for op in (lambda: t.fill_(1), lambda: t.zero_(), lambda: t.copy_(t),
               lambda: t.__setitem__(0, 1), lambda: t.__setitem__([0], 1)):  # fmt: skip
        with pytest.raises(ValueError, match="read-only"):
            op()
    assert t[1:].is_readonly and t.clone().is_readonly is False


def test_views_never_read_out_of_bounds():
    small = bridge.arange(4)
    with pytest.raises(ValueError):
        small.as_strided((4,), (2,))
    with pytest.raises(ValueError):
        small.as_strided((1,), (1,), 4)
    assert small.as_strided((0,), (1,), 4).numel() == 0


# ------------------------------------------------------------------- repr


def test_repr_matches_torch(torch):
    cases = [
        ([[1.5, 2.0], [3.0, 4.0]], None),
        ([1e10, 1.0], None),
        ([0.1, 2.5], "float64"),
        ([1, 2, 3], None),
        ([True, False], None),
        ([1 + 2j, 3 - 0.5j], None),
        (3.0, None),
        ([[1, -2], [30, 4]], "int32"),
        (list(range(2000)), None),
        ([float("nan"), 1.0, float("inf")], None),
        ([1e-5, 1.0], None),
    ]
    for data, dt in cases:
        b = bridge.tensor(data, dtype=dt)
        t = torch.tensor(data, dtype=getattr(torch, dt) if dt else None)
        assert repr(b) == repr(t).replace("torch.", "bridge."), data
    assert repr(bridge.zeros(0, 3)) == "tensor([], size=(0, 3))"
    assert repr(bridge.zeros(0)) == "tensor([])"


# ------------------------------------------------------------ issue 9


@pytest.mark.parametrize(
    "use",
    [
        lambda t: t.tolist(),
        lambda t: t[999].item(),
        lambda t: t.clone(),
        lambda t: t.view(10, 100).t().contiguous(),
        lambda t: t.fill_(1),
        lambda t: t.zero_(),
        lambda t: t.__setitem__(500, 3),
        lambda t: t.copy_(bridge.zeros(1000, dtype=bridge.int64)),
        lambda t: bridge.zeros(1000, dtype=bridge.int64).copy_(t),
        lambda t: repr(t),
        lambda t: t.to(bridge.float32),
    ],
)
def test_reading_or_writing_past_a_shrunk_storage_raises(use):
    t = shrunk()
    with pytest.raises(RuntimeError, match=r"views bytes \[\d+, \d+\) of a storage that now holds 8"):
        use(t)


def test_views_inside_a_shrunk_storage_still_work():
    t = shrunk()
    assert t[0].item() == 0 and t[:1].tolist() == [0]
    t[0] = 7
    assert t.untyped_storage()[0] == 7


def test_geometry_that_does_not_fit_int64_is_refused():
    t = bridge.arange(4)
    with pytest.raises(ValueError, match="stride 1180591620717411303424 does not fit"):
        t.as_strided((1,), (2**70,))
    with pytest.raises(ValueError, match="does not fit"):
        t.as_strided((1,), (1,), 2**64)
    with pytest.raises(ValueError, match="does not fit"):
        bridge.empty(0).set_(t.untyped_storage(), 0, (1,), (-(2**63) - 1,))


def test_asarray_of_a_storage_is_a_zero_copy_uint8_view():
    s = bridge.UntypedStorage(b"\x01\x02\x03\x04")
    t = bridge.asarray(s)
    assert t.dtype is bridge.uint8 and t.shape == (4,) and t.data_ptr() == s.data_ptr()
    assert t.untyped_storage() is s and t.tolist() == [1, 2, 3, 4]
    t[0] = 9
    assert s[0] == 9
    # bridge.tensor always copies, but the bytes stay bytes (not 8x as int64)
    c = bridge.tensor(s)
    assert c.dtype is bridge.uint8 and c.tolist() == [9, 2, 3, 4] and c.data_ptr() != s.data_ptr()
    assert c.nbytes == 4
    ro = bridge.UntypedStorage.from_buffer(b"abc")
    assert bridge.asarray(ro).is_readonly
