"""Property tests: random chains of view ops on bridge tensors against NumPy.

Every chain starts from a base tensor over int32 values (``arange(n).reshape(shape)``
or an ``as_strided`` view of a larger storage) and its NumPy twin ``t.numpy()``,
which shares the same memory. Each step applies one movement op to the tensor and
the same op, done the NumPy way, to the twin; after every step the two must agree
on shape, values, byte strides (for dims of size != 1), contiguity and the address
of the first element, and the view must still lie inside the base storage. At
the end of the chain a write through the view must be seen by the twin and a
write through the twin by the view.

``reshape``/``flatten`` may copy; after a copy the chain goes on over the new
memory, with ``t.numpy()`` of the copy as the new twin.

Chains are drawn from all ops and from smaller families of ops (indexing,
layout, reshape, dtype views), so that rarer combinations come up within the
example budget; the dtype family also starts from uint8/int16/float32 bases.
Where PyTorch's rules are stricter than NumPy's (``view(dtype)`` needs element
strides and offset divisible by the size ratio), the test expects PyTorch's.
The chain state and the checks after each step are in ``numpy_twin.py``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st
from numpy.lib.stride_tricks import as_strided as np_as_strided
from numpy.lib.stride_tricks import sliding_window_view
from numpy_twin import (
    VIEW_DTYPES,
    State,
    check_same,
    check_writes,
    new_state,
    same_values,
    writable,
)

import bridge

SETTINGS = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

sizes = st.integers(0, 5)
shapes = st.lists(sizes, min_size=0, max_size=5).map(tuple)


# ------------------------------------------------------------------------ bases


def draw_base(data: st.DataObject, dtypes: list[str] | None = None) -> State:
    """``arange(n).reshape(shape)`` or an in-bounds ``as_strided`` view (any
    strides, negative and zero included) of a larger ``arange`` storage, int32
    unless ``dtypes`` offers others."""
    name = data.draw(st.sampled_from(dtypes or ["int32"]), label="base dtype")
    bt, nt = VIEW_DTYPES[name]
    # empty bases a quarter of the time: every later view of them is empty too
    if data.draw(st.integers(0, 3), label="empty base") == 0:
        shape = data.draw(shapes, label="base shape")
    else:
        shape = data.draw(st.lists(st.integers(1, 5), max_size=5).map(tuple), label="base shape")
    if data.draw(st.booleans(), label="as_strided base"):
        strides = tuple(data.draw(st.integers(-6, 6), label="base stride") for _ in shape)
        if 0 in shape:
            offset = data.draw(st.integers(0, 4), label="base offset")
            m = offset + data.draw(st.integers(0, 3), label="slack")
        else:
            lo = sum((n - 1) * x for n, x in zip(shape, strides) if x < 0)
            hi = sum((n - 1) * x for n, x in zip(shape, strides) if x > 0) + 1
            offset = -lo + data.draw(st.integers(0, 3), label="base offset")
            m = offset + hi + data.draw(st.integers(0, 3), label="slack")
        flat = bridge.arange(m, dtype=bt)
        flat_np = flat.numpy()
        t = bridge.as_strided(flat, shape, strides, offset)
        a = np_as_strided(flat_np[offset:], shape, tuple(nt.itemsize * x for x in strides))
        note(f"base: arange({m}, dtype={name}).as_strided({shape}, {strides}, {offset})")
    else:
        n = int(np.prod(shape, dtype=np.int64))
        flat = bridge.arange(n, dtype=bt)
        t = flat.reshape(shape)
        a = flat.numpy().reshape(shape)
        note(f"base: arange({n}, dtype={name}).reshape({shape})")
    s = new_state(t, a, flat)
    check_same(s)
    return s


# -------------------------------------------------------------------------- ops
#
# Each op takes (data, state) and returns the list of (tensor, twin) results
# (several for split/chunk/unbind) and whether the result is in new memory, or
# None when the op does not apply to this shape.


def _dim(data: st.DataObject, nd: int, label: str = "dim") -> int:
    """A dim in range(nd), sometimes written negative."""
    d = data.draw(st.integers(0, nd - 1), label=label)
    return d - nd if data.draw(st.booleans(), label=label + " negative") else d


def _allow_empty(data: st.DataObject) -> bool:
    """Ops that may produce an empty view do so a quarter of the time (an empty
    view stays empty for the rest of the chain)."""
    return data.draw(st.integers(0, 3), label="allow empty") == 0


def _slice(data: st.DataObject, size: int) -> slice:
    step = data.draw(st.none() | st.sampled_from([-3, -2, -1, 1, 2, 3]), label="step")
    if size == 0 or _allow_empty(data):
        bound = st.none() | st.integers(-size - 2, size + 2)
        return slice(data.draw(bound, label="start"), data.draw(bound, label="stop"), step)
    # a non-empty slice, bounds written in any of the equivalent ways
    i = data.draw(st.integers(0, size - 1), label="first")
    if step is None or step > 0:
        j = data.draw(st.integers(i + 1, size + 2), label="stop")
        start: int | None = None if i == 0 and data.draw(st.booleans()) else i
        stop: int | None = None if j >= size and data.draw(st.booleans()) else j
    else:
        j = data.draw(st.integers(-1, i - 1), label="stop")  # -1: past the front
        start = None if i == size - 1 and data.draw(st.booleans()) else i
        stop = None if j == -1 else j
    if start is not None and start < size and data.draw(st.booleans(), label="negative start"):
        start -= size
    if stop is not None and 0 <= stop < size and data.draw(st.booleans(), label="negative stop"):
        stop -= size
    return slice(start, stop, step)


def op_index(data: st.DataObject, s: State) -> Any:
    shape = s.t.shape
    nd = len(shape)
    k = data.draw(st.integers(0, nd), label="dims indexed")
    use_ell = data.draw(st.booleans(), label="ellipsis")
    if use_ell:
        e = data.draw(st.integers(0, k), label="ellipsis position")
        dims = [*range(e), *range(nd - (k - e), nd)]
    else:
        e = k
        dims = list(range(k))
    parts: list[Any] = []
    for d in dims:
        size = shape[d]
        if size and data.draw(st.booleans(), label="int index"):
            parts.append(data.draw(st.integers(-size, size - 1), label="index"))
        else:
            parts.append(_slice(data, size))
    if use_ell:
        parts.insert(e, Ellipsis)
    for _ in range(data.draw(st.integers(0, 2), label="newaxes")):
        parts.insert(data.draw(st.integers(0, len(parts)), label="newaxis position"), None)
    key: Any = tuple(parts)
    if len(parts) == 1 and data.draw(st.booleans(), label="bare key"):
        key = parts[0]
    note(f"t[{key!r}]")
    # NumPy returns a scalar for a full integer index unless the key has an Ellipsis
    np_key = tuple(parts) if use_ell else (*parts, Ellipsis)
    return [(s.t[key], s.a[np_key])], False


def op_permute(data: st.DataObject, s: State) -> Any:
    nd = s.t.ndim
    perm = data.draw(st.permutations(range(nd)), label="perm")
    perm = [p - nd if data.draw(st.booleans()) else p for p in perm]
    note(f"permute({perm})")
    how = data.draw(st.sampled_from(["star", "tuple"]), label="permute args")
    t = s.t.permute(*perm) if how == "star" else s.t.permute(tuple(perm))
    return [(t, np.transpose(s.a, [p % nd for p in perm] if nd else []))], False


def op_transpose(data: st.DataObject, s: State) -> Any:
    nd = s.t.ndim
    if nd == 0:
        note("transpose(0, -1) of 0-d")
        return [(s.t.transpose(0, -1), s.a)], False
    d0, d1 = _dim(data, nd, "dim0"), _dim(data, nd, "dim1")
    note(f"transpose({d0}, {d1})")
    return [(s.t.transpose(d0, d1), np.swapaxes(s.a, d0, d1))], False


def op_t(data: st.DataObject, s: State) -> Any:
    which = data.draw(st.sampled_from(["t", "T", "mT"]), label="t kind")
    nd = s.t.ndim
    note(which)
    if which == "t":
        if nd > 2:
            with pytest.raises(ValueError):
                s.t.t()
            return None
        return [(s.t.t(), s.a.T)], False
    if which == "T":
        return [(s.t.T, s.a.T)], False
    if nd < 2:
        with pytest.raises(ValueError):
            s.t.mT  # noqa: B018
        return None
    return [(s.t.mT, np.swapaxes(s.a, -1, -2))], False


def op_expand(data: st.DataObject, s: State) -> Any:
    shape = s.t.shape
    lead = data.draw(st.lists(st.integers(0, 3), max_size=2), label="new leading sizes")
    target: list[int] = []
    resolved: list[int] = []
    for n in shape:
        if n == 1:
            m = data.draw(st.sampled_from([-1, 0, 1, 2, 3, 4]), label="expanded size")
        else:
            m = data.draw(st.sampled_from([-1, n]), label="kept size")
        target.append(m)
        resolved.append(n if m == -1 else m)
    new = (*lead, *target)
    final = (*lead, *resolved)
    if data.draw(st.booleans(), label="broadcast_to"):
        note(f"broadcast_to({final})")
        t = s.t.broadcast_to(final)
    else:
        note(f"expand({new})")
        t = s.t.expand(*new) if data.draw(st.booleans(), label="star") else s.t.expand(new)
    return [(t, writable(np.broadcast_to(s.a, final), s.root))], False


def op_squeeze(data: st.DataObject, s: State) -> Any:
    nd = s.t.ndim
    how = data.draw(st.sampled_from(["all", "dim", "dims"]), label="squeeze kind")
    if how == "all" or nd == 0:
        note("squeeze()")
        return [(s.t.squeeze(), np.squeeze(s.a))], False
    if how == "dim":
        d = _dim(data, nd)
        dims = [d]
        note(f"squeeze({d})")
        t = s.t.squeeze(d)
    else:
        picked = data.draw(st.lists(st.integers(0, nd - 1), unique=True, max_size=nd), label="dims")
        dims = picked
        note(f"squeeze({tuple(picked)})")
        t = s.t.squeeze(tuple(picked))
    # PyTorch semantics: dims that are not of size 1 are left alone
    axes = tuple(sorted({d % nd for d in dims if s.t.shape[d] == 1}))
    return [(t, np.squeeze(s.a, axis=axes) if axes else s.a)], False


def op_unsqueeze(data: st.DataObject, s: State) -> Any:
    nd = s.t.ndim
    d = data.draw(st.integers(-nd - 1, nd), label="dim")
    note(f"unsqueeze({d})")
    return [(s.t.unsqueeze(d), np.expand_dims(s.a, d))], False


def op_narrow(data: st.DataObject, s: State) -> Any:
    nd = s.t.ndim
    if nd == 0:
        with pytest.raises(IndexError):
            s.t.narrow(0, 0, 0)
        return None
    d = _dim(data, nd)
    size = s.t.shape[d]
    start = data.draw(st.integers(-size, size), label="start")
    begin = start + size if start < 0 else start
    low = 0 if begin == size or _allow_empty(data) else 1
    length = data.draw(st.integers(low, size - begin), label="length")
    note(f"narrow({d}, {start}, {length})")
    key = (slice(None),) * (d % nd) + (slice(begin, begin + length),)
    return [(s.t.narrow(d, start, length), s.a[key])], False


def op_select(data: st.DataObject, s: State) -> Any:
    nd = s.t.ndim
    dims = [d for d in range(nd) if s.t.shape[d]]
    if not dims:
        return None
    d = data.draw(st.sampled_from(dims), label="dim")
    size = s.t.shape[d]
    i = data.draw(st.integers(-size, size - 1), label="index")
    dd = d - nd if data.draw(st.booleans(), label="negative dim") else d
    note(f"select({dd}, {i})")
    return [(s.t.select(dd, i), s.a[(slice(None),) * d + (i, Ellipsis)])], False


def op_unfold(data: st.DataObject, s: State) -> Any:
    nd = s.t.ndim
    step = data.draw(st.integers(1, 3), label="step")
    if nd == 0:
        size = data.draw(st.integers(0, 1), label="size")
        note(f"unfold(0, {size}, {step}) of 0-d")
        return [(s.t.unfold(0, size, step), s.a.reshape(1)[:size])], False
    d = _dim(data, nd)
    n = s.t.shape[d]
    size = data.draw(st.integers(0 if n == 0 or _allow_empty(data) else 1, n), label="size")
    note(f"unfold({d}, {size}, {step})")
    windows = sliding_window_view(s.a, size, axis=d)
    windows = windows[(slice(None),) * (d % nd) + (slice(None, None, step),)]
    return [(s.t.unfold(d, size, step), writable(windows, s.root))], False


def op_diagonal(data: st.DataObject, s: State) -> Any:
    nd = s.t.ndim
    if nd < 2:
        with pytest.raises(ValueError):
            s.t.diagonal()
        return None
    d1 = _dim(data, nd, "dim1")
    d2 = _dim(data, nd, "dim2")
    if d1 % nd == d2 % nd:
        with pytest.raises(ValueError):
            s.t.diagonal(0, d1, d2)
        return None
    off = data.draw(st.integers(-6, 6), label="offset")
    note(f"diagonal({off}, {d1}, {d2})")
    return [(s.t.diagonal(off, d1, d2), writable(np.diagonal(s.a, off, d1, d2), s.root))], False


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _draw_reshape(data: st.DataObject, numel: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(shape as passed, with maybe one -1; shape resolved) holding ``numel`` elements."""
    if numel == 0:
        shape = tuple(data.draw(st.lists(sizes, min_size=1, max_size=4), label="empty shape"))
        if 0 not in shape:
            i = data.draw(st.integers(0, len(shape) - 1), label="zero position")
            shape = (*shape[:i], 0, *shape[i + 1 :])
        return shape, shape
    out: list[int] = []
    rest = numel
    for _ in range(data.draw(st.integers(0, 4), label="reshape ndim")):
        d = data.draw(st.sampled_from(_divisors(rest)), label="factor")
        out.append(d)
        rest //= d
    if rest != 1 or not out or data.draw(st.booleans(), label="trailing"):
        out.append(rest)
    for _ in range(data.draw(st.integers(0, 1), label="ones")):
        out.insert(data.draw(st.integers(0, len(out)), label="one position"), 1)
    resolved = tuple(out)
    if numel == 1 and data.draw(st.booleans(), label="to 0-d"):
        return (), ()
    passed = list(resolved)
    if data.draw(st.booleans(), label="use -1"):
        passed[data.draw(st.integers(0, len(passed) - 1), label="-1 position")] = -1
    return tuple(passed), resolved


def _np_nocopy_reshape(
    a: np.ndarray[Any, Any], shape: tuple[int, ...]
) -> np.ndarray[Any, Any] | None:
    """NumPy's reshape without a copy, or None when it needs one."""
    try:
        return np.reshape(a, shape, copy=False)
    except ValueError:
        return None
    except TypeError:  # NumPy < 2.1 has no copy= here; setting .shape never copies
        v = a.view()
        try:
            v.shape = shape
        except AttributeError:
            return None
        return v


def _reshape_result(s: State, t: bridge.Tensor, shape: tuple[int, ...]) -> Any:
    """Shared by reshape and flatten: a view where NumPy manages one, else a copy."""
    view = _np_nocopy_reshape(s.a, shape)
    shares = t.untyped_storage().data_ptr() == s.storage_ptr
    if s.a.size and view is not None:
        assert shares, "reshape copied although a view was possible"
    if shares:
        return [(t, view if view is not None else np.reshape(s.a, shape))], False
    # a copy: contiguous, new memory, equal values; the chain goes on over the copy
    assert view is None
    assert t.is_contiguous()
    assert t.shape == shape
    assert same_values(t.numpy(), np.reshape(s.a, shape))
    return [(t, t.numpy())], True


def op_view_shape(data: st.DataObject, s: State) -> Any:
    passed, shape = _draw_reshape(data, s.t.numel())
    how = data.draw(st.sampled_from(["view", "reshape"]), label="view or reshape")
    star = data.draw(st.booleans(), label="star")
    note(f"{how}({passed})")
    fn = s.t.view if how == "view" else s.t.reshape
    if how == "reshape":
        return _reshape_result(s, fn(*passed) if star else fn(passed), shape)
    view = _np_nocopy_reshape(s.a, shape)
    if view is None and s.a.size:
        with pytest.raises(ValueError):
            fn(*passed) if star else fn(passed)
        return None
    t = fn(*passed) if star else fn(passed)
    return [(t, view if view is not None else np.reshape(s.a, shape))], False


def op_flatten(data: st.DataObject, s: State) -> Any:
    nd = s.t.ndim
    if nd == 0:
        note("flatten() of 0-d")
        return _reshape_result(s, s.t.flatten(), (1,))
    a0 = data.draw(st.integers(0, nd - 1), label="start_dim")
    b0 = data.draw(st.integers(a0, nd - 1), label="end_dim")
    start = a0 - nd if data.draw(st.booleans()) else a0
    end = b0 - nd if data.draw(st.booleans()) else b0
    note(f"flatten({start}, {end})")
    shape = s.t.shape
    merged = (*shape[:a0], int(np.prod(shape[a0 : b0 + 1], dtype=np.int64)), *shape[b0 + 1 :])
    t = s.t.flatten(start, end)
    if a0 == b0:
        assert t is s.t or t.shape == shape
    return _reshape_result(s, t, merged)


def op_unflatten(data: st.DataObject, s: State) -> Any:
    nd = s.t.ndim
    if nd == 0:
        return None
    d = _dim(data, nd)
    n = s.t.shape[d]
    passed, split = _draw_reshape(data, n)
    if not passed:  # unflatten needs at least one size
        passed, split = (1,), (1,)
    note(f"unflatten({d}, {passed})")
    dd = d % nd
    new_shape = (*s.t.shape[:dd], *split, *s.t.shape[dd + 1 :])
    view = _np_nocopy_reshape(s.a, new_shape)
    assert view is not None or s.a.size == 0, "splitting one dim never needs a copy"
    want = view if view is not None else np.reshape(s.a, new_shape)
    return [(s.t.unflatten(d, passed), want)], False


def _pieces(a: np.ndarray[Any, Any], d: int, bounds: list[tuple[int, int]]) -> list[Any]:
    return [a[(slice(None),) * d + (slice(lo, hi),)] for lo, hi in bounds]


def op_split(data: st.DataObject, s: State) -> Any:
    nd = s.t.ndim
    if nd == 0:
        return None
    d = _dim(data, nd)
    dd = d % nd
    n = s.t.shape[dd]
    how = data.draw(st.sampled_from(["size", "sections", "chunk", "unbind"]), label="split kind")
    if how == "unbind":
        note(f"unbind({d})")
        ts = s.t.unbind(d)
        want = [s.a[(slice(None),) * dd + (i, Ellipsis)] for i in range(n)]
    else:
        if how == "size":
            k = data.draw(st.integers(1, 6), label="split size")
            note(f"split({k}, {d})")
            ts = s.t.split(k, d)
            bounds = [(i, min(i + k, n)) for i in range(0, n, k)] or [(0, 0)]
        elif how == "sections":
            cuts = sorted(data.draw(st.lists(st.integers(0, n), max_size=3), label="cuts"))
            edges = [0, *cuts, n]
            sections = [hi - lo for lo, hi in itertools.pairwise(edges)]
            note(f"split({sections}, {d})")
            ts = s.t.split(sections, d)
            bounds = list(itertools.pairwise(edges))
        else:
            c = data.draw(st.integers(1, 6), label="chunks")
            note(f"chunk({c}, {d})")
            ts = s.t.chunk(c, d)
            if n == 0:  # PyTorch: `chunks` empty pieces
                bounds = [(0, 0)] * c
            else:
                k = -(-n // c)
                bounds = [(i, min(i + k, n)) for i in range(0, n, k)]
        want = _pieces(s.a, dd, bounds)
    assert isinstance(ts, tuple)
    assert len(ts) == len(want)
    if not ts:
        return None
    return list(zip(ts, want)), False


def op_movedim(data: st.DataObject, s: State) -> Any:
    nd = s.t.ndim
    if nd == 0:
        return None
    k = data.draw(st.integers(1, nd), label="dims moved")
    src = data.draw(st.permutations(range(nd)), label="source")[:k]
    dst = data.draw(st.permutations(range(nd)), label="destination")[:k]
    src = [x - nd if data.draw(st.booleans()) else x for x in src]
    dst = [x - nd if data.draw(st.booleans()) else x for x in dst]
    source: Any = src
    destination: Any = dst
    if k == 1 and data.draw(st.booleans(), label="ints"):
        source, destination = src[0], dst[0]
    elif data.draw(st.booleans(), label="tuples"):
        source, destination = tuple(src), tuple(dst)
    note(f"movedim({source}, {destination})")
    return [(s.t.movedim(source, destination), np.moveaxis(s.a, src, dst))], False


def op_view_dtype(data: st.DataObject, s: State) -> Any:
    name = data.draw(st.sampled_from(sorted(VIEW_DTYPES)), label="dtype")
    bt, nt = VIEW_DTYPES[name]
    note(f"view({name})")
    t = s.t
    try:
        want = s.a.view(nt)
    except ValueError:
        want = None
    old = t.element_size()
    r = nt.itemsize // old if nt.itemsize > old else 1
    # PyTorch's extra rules (element strides and offset in units of the new type;
    # stride(-1) == 1 even when empty), which byte-strided NumPy does not have
    torch_rejects = r > 1 and (t.storage_offset() % r != 0 or any(x % r for x in t.stride()[:-1]))
    if t.ndim and nt.itemsize != old and t.shape[-1] != 1 and t.stride(-1) != 1:
        torch_rejects = True
    if want is None or torch_rejects:
        with pytest.raises(ValueError):
            t.view(bt)
        return None
    return [(t.view(bt), want)], False


OPS: list[Callable[[st.DataObject, State], Any]] = [
    op_index,
    op_permute,
    op_transpose,
    op_t,
    op_expand,
    op_squeeze,
    op_unsqueeze,
    op_narrow,
    op_select,
    op_unfold,
    op_diagonal,
    op_view_shape,
    op_flatten,
    op_unflatten,
    op_split,
    op_movedim,
    op_view_dtype,
]

# Chains drawn from all ops, and from smaller families so that the rarer
# combinations (a dtype view of an offset slice, a reshape of a broadcast view,
# ...) come up often within the example budget.
FAMILIES: dict[str, list[Callable[[st.DataObject, State], Any]]] = {
    "all": OPS,
    "indexing": [op_index, op_narrow, op_select, op_split, op_unfold, op_diagonal, op_t],
    "layout": [op_permute, op_transpose, op_t, op_movedim, op_expand, op_squeeze, op_unsqueeze],
    "reshape": [op_view_shape, op_flatten, op_unflatten, op_expand, op_permute, op_index],
    "dtype": [op_view_dtype, op_index, op_narrow, op_unfold, op_transpose, op_view_shape],
}


def run_chain(
    data: st.DataObject,
    s: State,
    steps: int,
    ops: list[Callable[[st.DataObject, State], Any]] = OPS,
) -> State:
    for _ in range(steps):
        op = data.draw(st.sampled_from(ops), label="op")
        out = op(data, s)
        if out is None:
            event(f"{op.__name__}: not applicable")
            continue
        event(op.__name__)
        results, copied = out
        owner = results[0][0]
        states = [
            new_state(t, a, owner) if copied else State(t, a, s.root, s.storage_ptr, s.storage_nbytes)
            for t, a in results
        ]
        for piece in states:
            check_same(piece)
        s = states[data.draw(st.integers(0, len(states) - 1), label="piece")]
    return s


# ------------------------------------------------------------------------ tests


@pytest.mark.parametrize("family", sorted(FAMILIES))
@SETTINGS
@given(data=st.data())
def test_view_chains_match_numpy(family: str, data: st.DataObject) -> None:
    # the dtype family also starts from narrower types, so that views to wider
    # ones (with their alignment rules) come up often
    s = draw_base(data, sorted(VIEW_DTYPES) if family == "dtype" else None)
    s = run_chain(data, s, data.draw(st.integers(1, 6), label="steps"), FAMILIES[family])
    check_writes(data, s)


@SETTINGS
@given(st.data())
def test_contiguous_and_clone(data: st.DataObject) -> None:
    s = draw_base(data)
    s = run_chain(data, s, data.draw(st.integers(0, 4), label="steps"))
    t, a = s.t, s.a
    before = a.copy()

    c = t.contiguous()
    assert c.shape == t.shape
    assert c.dtype == t.dtype
    assert same_values(c.numpy(), a)
    assert c.is_contiguous()
    assert c.numpy().flags.c_contiguous
    if t.is_contiguous():
        assert c is t
    else:
        assert c.untyped_storage().data_ptr() != s.storage_ptr
        assert c.storage_offset() == 0

    k = t.clone()
    assert k.shape == t.shape
    assert same_values(k.numpy(), a)
    assert k.is_non_overlapping_and_dense()
    assert k.storage_offset() == 0
    assert k.untyped_storage().data_ptr() != s.storage_ptr
    assert k.untyped_storage().nbytes() == a.nbytes
    if t.is_non_overlapping_and_dense() and all(x >= 0 for x in t.stride()):
        assert k.stride() == t.stride()
    kc = t.clone(memory_format=bridge.contiguous_format)
    assert kc.is_contiguous()
    assert same_values(kc.numpy(), a)

    # the copies are new memory: writing them leaves the original alone
    for copy in {id(c): c, id(k): k, id(kc): kc}.values():
        if copy is t or copy.numel() == 0:
            continue
        copy.fill_(55)
        assert same_values(a, before)
        assert np.all(copy.numpy() == 55)


@SETTINGS
@given(
    m=st.integers(0, 40),
    shape=st.lists(st.integers(0, 4), max_size=4).map(tuple),
    strides_seed=st.lists(st.integers(-6, 6), min_size=4, max_size=4),
    offset=st.none() | st.integers(-2, 44),
    base_offset=st.integers(0, 3),
)
def test_as_strided_bounds(
    m: int,
    shape: tuple[int, ...],
    strides_seed: list[int],
    offset: int | None,
    base_offset: int,
) -> None:
    strides = tuple(strides_seed[: len(shape)])
    flat = bridge.arange(m, dtype=bridge.int32)
    src = flat[min(base_offset, m) :]
    off = src.storage_offset() if offset is None else offset
    empty = 0 in shape
    lo = off + sum((n - 1) * x for n, x in zip(shape, strides) if x < 0)
    hi = off + sum((n - 1) * x for n, x in zip(shape, strides) if x > 0) + 1
    inside = off >= 0 and ((empty and off <= m) or (not empty and lo >= 0 and hi <= m))
    if not inside:
        with pytest.raises(ValueError):
            src.as_strided(shape, strides, offset)
        with pytest.raises(ValueError):
            bridge.as_strided(src, shape, strides, offset)
        return
    t = src.as_strided(shape, strides, offset)
    assert t.storage_offset() == off
    want = np_as_strided(flat.numpy()[off:], shape, tuple(4 * x for x in strides))
    check_same(new_state(t, want, flat))
    t2 = bridge.as_strided(src, list(shape), list(strides), offset)
    check_same(new_state(t2, want, flat))


@pytest.mark.parametrize(
    "make",
    [
        # storage offset 1 of a 0-byte storage
        lambda: bridge.zeros(2, 0, dtype=bridge.int32)[1],
        # storage offset 10 of a 4-element storage
        lambda: bridge.arange(4, dtype=bridge.int32).as_strided((3, 0), (5, 1))[2],
    ],
    ids=["zeros(2,0)[1]", "as_strided((3,0),(5,1))[2]"],
)
def test_empty_view_with_offset_past_the_end(make: Callable[[], bridge.Tensor]) -> None:
    """An empty view may have a storage offset past the end of its storage
    (indexing a non-empty dim of an empty tensor makes one, as in PyTorch); it
    must still convert to NumPy, clone and list like any empty tensor."""
    t = make()
    assert t.numel() == 0
    assert t.storage_offset() * t.element_size() > t.untyped_storage().nbytes()
    assert t.numpy().shape == (0,)
    assert t.clone().shape == (0,)
    assert t.tolist() == []
