"""Property tests: the stride rules the C core exposes to Python, against NumPy.

Each rule is written once, in C (cdefs/core/geometry.c, cdefs/core/indexing.c), and
reaches Python as a ``bridge._C`` function that ``bridge.core.strides``
re-exports. Every one is held here to NumPy doing the same thing: contiguity
to ``as_strided(...).flags.c_contiguous``, contiguous strides to the strides of
``np.empty``, the extent to ``byte_bounds``, dense tiling to the element
addresses of an ``as_strided`` view, dim wrapping to ``normalize_axis_index``,
-1 inference to ``ndarray.reshape`` and basic indexing to NumPy's indexing of
the same memory. Where PyTorch's rule differs from NumPy's (a 0-d tensor takes
dim -1 and 0; size-0 dims get the strides of size 1; a new dim's stride), the
test says so and expects PyTorch's. The test of each rejection follows.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from numpy.lib.stride_tricks import as_strided

try:  # NumPy >= 2
    from numpy.lib.array_utils import byte_bounds, normalize_axis_index
except ImportError:  # NumPy 1.26
    from numpy import byte_bounds  # type: ignore[attr-defined,no-redef]
    from numpy.core.multiarray import normalize_axis_index  # type: ignore[no-redef]

from bridge import _C
from bridge.core import strides as S

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

shapes = st.lists(st.integers(0, 5), max_size=6).map(tuple)
small_shapes = st.lists(st.integers(0, 5), max_size=4).map(tuple)  # at most 625 elements
nonempty_shapes = st.lists(st.integers(1, 5), max_size=6).map(tuple)
itemsizes = st.sampled_from([1, 2, 4, 8])
INT64 = (-(2**63), 2**63 - 1)


def _bytes(itemsize: int) -> np.ndarray[Any, Any]:
    """A one-element array of the given item size, to hang as_strided views on
    (NumPy computes flags and bounds from the geometry alone; nothing is read)."""
    return np.zeros(1, dtype=f"u{itemsize}")


def _strided(
    shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int
) -> np.ndarray[Any, Any]:
    return as_strided(_bytes(itemsize), shape, tuple(s * itemsize for s in strides))


@st.composite
def geometries(
    draw: st.DrawFn, shape_st: st.SearchStrategy[tuple[int, ...]] = shapes
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A shape and strides that are often contiguous (or nearly), else anything."""
    shape = draw(shape_st)
    how = draw(st.sampled_from(["contiguous", "permuted", "perturbed", "any"]))
    if how == "any":
        return shape, tuple(draw(st.integers(-7, 7)) for _ in shape)
    strides = list(S.contiguous_strides(shape))
    if how == "permuted":  # dense in another dim order (the dims' strides permuted with them)
        perm = draw(st.permutations(range(len(shape))))
        acc = 1
        for d in reversed(perm):
            strides[d] = acc
            acc *= max(shape[d], 1)
    elif shape:  # one stride changed: a size-1 dim's is free, another's breaks the rule
        d = draw(st.integers(0, len(shape) - 1))
        strides[d] = draw(st.integers(-7, 7))
    return shape, tuple(strides)


def test_strides_reexports_the_c_rules() -> None:
    for name in ("contiguous_strides", "is_contiguous", "is_non_overlapping_and_dense", "extent",
                 "wrap_dim", "infer_size", "apply_index"):  # fmt: skip
        assert getattr(S, name) is getattr(_C, name), name


# ------------------------------------------------------------------ the rules


@SETTINGS
@given(shape=shapes, itemsize=itemsizes)
def test_contiguous_strides_are_numpys_c_order(shape: tuple[int, ...], itemsize: int) -> None:
    got = _C.contiguous_strides(shape)
    # NumPy gives a shape with a size-0 dim all-zero strides; PyTorch's rule
    # (max(size, 1)) is NumPy's strides for the shape with each 0 read as 1
    like = tuple(max(n, 1) for n in shape)
    want = np.empty(like, dtype=f"u{itemsize}").strides
    assert tuple(s * itemsize for s in got) == want
    assert _strided(shape, got, itemsize).flags.c_contiguous
    assert _C.is_contiguous(shape, got)


@SETTINGS
@given(geom=geometries(), itemsize=itemsizes)
def test_is_contiguous_is_numpys_c_contiguous_flag(
    geom: tuple[tuple[int, ...], tuple[int, ...]], itemsize: int
) -> None:
    shape, strides = geom
    note(f"shape {shape}, strides {strides}")
    assert _C.is_contiguous(shape, strides) == _strided(shape, strides, itemsize).flags.c_contiguous


def _element_offsets(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> list[int]:
    """The offset of every element of an as_strided view from element 0, in
    elements, read from NumPy's own addresses (a 0-d view per index)."""
    a = _strided(shape, strides, itemsize)
    base = a.__array_interface__["data"][0]
    return [
        (a[(*i, Ellipsis)].__array_interface__["data"][0] - base) // itemsize
        for i in np.ndindex(shape)
    ]


@SETTINGS
@given(geom=geometries(small_shapes), itemsize=itemsizes)
def test_non_overlapping_and_dense_means_the_elements_tile_a_block(
    geom: tuple[tuple[int, ...], tuple[int, ...]], itemsize: int
) -> None:
    """PyTorch's rule: the elements are exactly [0, numel) from element 0 up
    (so no negative stride steps); empty tensors are dense."""
    shape, strides = geom
    note(f"shape {shape}, strides {strides}")
    n = int(np.prod(shape, dtype=np.int64))
    if n == 0:
        assert _C.is_non_overlapping_and_dense(shape, strides)
        return
    offsets = sorted(_element_offsets(shape, strides, itemsize))
    assert _C.is_non_overlapping_and_dense(shape, strides) == (offsets == list(range(n)))


@SETTINGS
@given(geom=geometries(), offset=st.integers(0, 50), itemsize=itemsizes)
def test_extent_is_numpys_byte_bounds(
    geom: tuple[tuple[int, ...], tuple[int, ...]], offset: int, itemsize: int
) -> None:
    shape, strides = geom
    lo, hi = _C.extent(shape, strides, offset)
    if 0 in shape:  # nothing is reached: NumPy's byte_bounds does not cover empty arrays
        assert (lo, hi) == (offset, offset)
        return
    a = _strided(shape, strides, itemsize)
    base = a.__array_interface__["data"][0]
    low, high = byte_bounds(a)
    assert ((lo - offset) * itemsize, (hi - offset) * itemsize) == (low - base, high - base)


@SETTINGS
@given(shape=nonempty_shapes, big=st.lists(st.integers(-(2**62), 2**62), min_size=6, max_size=6),
       offset=st.integers(0, 2**62))  # fmt: skip
def test_extent_overflow_is_a_value_error(
    shape: tuple[int, ...], big: list[int], offset: int
) -> None:
    """Large strides: the extent in Python ints (NumPy's byte_bounds arithmetic)
    either fits in int64 and is C's answer, or C refuses it."""
    strides = tuple(big[: len(shape)])
    lo = offset + sum((n - 1) * s for n, s in zip(shape, strides) if s < 0)
    hi = offset + sum((n - 1) * s for n, s in zip(shape, strides) if s > 0) + 1
    parts = [(n - 1) * s for n, s in zip(shape, strides)]
    fits = all(INT64[0] <= v <= INT64[1] for v in (lo, hi, *parts))
    if fits:
        assert _C.extent(shape, strides, offset) == (lo, hi)
    else:
        with pytest.raises(ValueError, match="overflow a 64-bit range"):
            _C.extent(shape, strides, offset)


@SETTINGS
@given(ndim=st.integers(0, 8), dim=st.integers(-10, 10))
def test_wrap_dim_is_numpys_normalize_axis_index(ndim: int, dim: int) -> None:
    # PyTorch lets a 0-d tensor take dim -1 and 0, as if it had one dim
    try:
        want = normalize_axis_index(dim, max(ndim, 1))
    except IndexError:  # NumPy's AxisError
        with pytest.raises(IndexError, match="Dimension out of range"):
            _C.wrap_dim(dim, ndim)
        return
    assert _C.wrap_dim(dim, ndim) == want
    assert _C.wrap_dim(np.int64(dim), ndim) == want


@SETTINGS
@given(numel=st.integers(0, 60), shape=st.lists(st.integers(-3, 7), max_size=5).map(tuple))
def test_infer_size_is_numpys_reshape(numel: int, shape: tuple[int, ...]) -> None:
    if any(n < -1 for n in shape):  # NumPy reads any negative size as -1; PyTorch refuses
        with pytest.raises(ValueError, match=r"invalid shape dimension|only one dimension"):
            _C.infer_size(shape, numel)
        return
    try:
        want = np.empty(numel, dtype=np.uint8).reshape(shape).shape
    except ValueError:
        with pytest.raises(ValueError, match=r"invalid for input of size|only one dimension"):
            _C.infer_size(shape, numel)
        return
    assert _C.infer_size(shape, numel) == want


@SETTINGS
@given(data=st.data())
def test_infer_size_of_a_fitting_shape(data: st.DataObject) -> None:
    """Shapes drawn to fit (the cases the previous test rarely meets), one size
    maybe written -1."""
    shape = data.draw(st.lists(st.integers(0, 6), max_size=5).map(tuple))
    numel = int(np.prod(shape, dtype=np.int64))
    passed = list(shape)
    if shape and data.draw(st.booleans()):
        passed[data.draw(st.integers(0, len(shape) - 1))] = -1
    try:
        want = np.empty(numel, dtype=np.uint8).reshape(passed).shape
    except ValueError:  # -1 beside a 0: ambiguous
        with pytest.raises(ValueError, match="invalid for input of size"):
            _C.infer_size(passed, numel)
        return
    assert _C.infer_size(passed, numel) == want == shape


# ------------------------------------------------------------- basic indexing


@st.composite
def keys(draw: st.DrawFn, shape: tuple[int, ...]) -> tuple[list[Any], bool]:
    """The parts of a basic key for ``shape`` (ints in and out of range, slices
    with any step, None, at most one Ellipsis, sometimes one part too many) and
    whether it has an Ellipsis."""
    nd = len(shape)
    k = draw(st.integers(0, nd + 1))  # nd + 1: one index too many
    parts: list[Any] = []
    for d in range(k):
        size = shape[d] if d < nd else 1
        kind = draw(st.sampled_from(["int", "npint", "slice", "slice"]))
        if kind == "slice":
            bound = st.none() | st.integers(-size - 2, size + 2)
            step = draw(st.none() | st.sampled_from([-3, -2, -1, 1, 2, 3]))
            parts.append(slice(draw(bound), draw(bound), step))
        else:
            i = draw(st.integers(-size - 1, size))  # -size - 1 and size: out of range
            parts.append(np.int64(i) if kind == "npint" else i)
    ell = draw(st.booleans())
    if ell:
        parts.insert(draw(st.integers(0, len(parts))), Ellipsis)
    for _ in range(draw(st.integers(0, 2))):
        parts.insert(draw(st.integers(0, len(parts))), None)
    return parts, ell


@SETTINGS
@given(data=st.data(), geom=geometries(nonempty_shapes), itemsize=itemsizes)
def test_apply_index_is_numpys_basic_indexing(
    data: st.DataObject, geom: tuple[tuple[int, ...], tuple[int, ...]], itemsize: int
) -> None:
    shape, strides = geom
    lo = sum((n - 1) * s for n, s in zip(shape, strides) if s < 0)
    hi = sum((n - 1) * s for n, s in zip(shape, strides) if s > 0) + 1
    offset = -lo + data.draw(st.integers(0, 3))
    buf = np.zeros(offset + hi, dtype=f"u{itemsize}")
    a = np.ndarray(shape, buf.dtype, buffer=buf, offset=offset * itemsize,
                   strides=tuple(s * itemsize for s in strides))  # fmt: skip
    parts, ell = data.draw(keys(shape))
    key: Any = tuple(parts)
    if len(parts) == 1 and data.draw(st.booleans()):
        key = parts[0]
    note(f"shape {shape}, strides {strides}, offset {offset}, key {key!r}")
    # NumPy gives a scalar for a full integer index unless the key has an Ellipsis
    np_key = tuple(parts) if ell else (*parts, Ellipsis)
    try:
        b = a[np_key]
    except IndexError:
        with pytest.raises(IndexError, match=r"out of bounds|too many indices"):
            _C.apply_index(shape, strides, offset, key)
        return
    got_shape, got_strides, got_offset = _C.apply_index(shape, strides, offset, key)
    assert got_shape == b.shape
    # a dim of size 0 or 1 never steps, so its stride is free (a new dim has
    # NumPy's stride 0 and PyTorch's size * stride of the dim it lands before)
    for n, got, want in zip(b.shape, got_strides, b.strides):
        if n > 1:
            assert got * itemsize == want
    if b.size:
        assert (
            got_offset * itemsize
            == b.__array_interface__["data"][0] - buf.__array_interface__["data"][0]
        )


def test_apply_index_rejects_two_ellipses_as_numpy_does() -> None:
    a = np.zeros((2, 3))
    with pytest.raises(IndexError, match="single ellipsis"):
        a[..., ...]
    with pytest.raises(IndexError, match="single ellipsis"):
        _C.apply_index((2, 3), (3, 1), 0, (Ellipsis, Ellipsis))


# ---------------------------------------------- broadcasting (Python's own rule)


@SETTINGS
@given(
    shapes_=st.lists(st.lists(st.sampled_from([0, 1, 1, 2, 3]), max_size=4).map(tuple), max_size=4)
)
def test_broadcast_shapes_is_numpys(shapes_: list[tuple[int, ...]]) -> None:
    try:
        want = np.broadcast_shapes(*shapes_)
    except ValueError:
        with pytest.raises(ValueError, match="cannot be broadcast together"):
            S.broadcast_shapes(*shapes_)
        return
    assert S.broadcast_shapes(*shapes_) == want


# ----------------------------------------------------------------- rejections


def test_contiguous_strides_that_do_not_fit_int64_are_refused() -> None:
    with pytest.raises(
        ValueError,
        match=r"strides of size \(1099511627776, 1099511627776, 1099511627776\) do not fit",
    ):
        _C.contiguous_strides((2**40, 2**40, 2**40))


def test_a_negative_size_is_refused() -> None:
    with pytest.raises(ValueError, match="negative dimension -1 in size"):
        _C.is_contiguous((2, -1), (1, 1))


def test_shape_and_strides_of_different_lengths_are_refused() -> None:
    with pytest.raises(ValueError, match=r"different lengths \(2 and 1\)"):
        _C.is_non_overlapping_and_dense((2, 3), (1,))


def test_a_size_past_int64_is_refused() -> None:
    with pytest.raises(
        ValueError, match="shape 9223372036854775808 does not fit in a 64-bit integer"
    ):
        _C.contiguous_strides((2**63,))


def test_a_shape_that_is_not_a_sequence_of_ints_is_refused() -> None:
    with pytest.raises(TypeError, match="shape must be a sequence of ints"):
        _C.contiguous_strides((2, 1.5))


def test_an_offset_past_int64_is_refused() -> None:
    with pytest.raises(ValueError, match="storage offset 9223372036854775808 does not fit"):
        _C.extent((2,), (1,), 2**63)


def test_an_offset_that_is_not_an_int_is_refused() -> None:
    with pytest.raises(TypeError, match="storage offset must be an int, got float"):
        _C.apply_index((2,), (1,), 0.0, 0)


def test_a_dim_past_int64_is_out_of_range() -> None:
    with pytest.raises(IndexError, match=r"range of \[-3, 2\], but got 1180591620717411303424"):
        _C.wrap_dim(2**70, 3)


def test_a_bool_dim_is_refused_as_pytorch_does() -> None:
    with pytest.raises(TypeError, match="dim must be an int, got bool"):
        _C.wrap_dim(True, 3)


def test_a_dim_that_is_not_an_int_is_refused() -> None:
    with pytest.raises(TypeError, match="dim must be an int, got float"):
        _C.wrap_dim(1.0, 3)


def test_an_ndim_out_of_range_is_refused() -> None:
    with pytest.raises(ValueError, match=r"ndim must be in \[0, 64\], got -1"):
        _C.wrap_dim(0, -1)


def test_a_negative_numel_is_refused() -> None:
    with pytest.raises(ValueError, match="numel must be >= 0, got -1"):
        _C.infer_size((-1,), -1)


def test_two_inferred_sizes_are_refused() -> None:
    with pytest.raises(
        ValueError, match=r"only one dimension can be inferred, got shape \(-1, -1\)"
    ):
        _C.infer_size((-1, -1), 4)


def test_a_size_below_minus_one_is_refused() -> None:
    with pytest.raises(ValueError, match=r"invalid shape dimension -2 in \(2, -2\)"):
        _C.infer_size((2, -2), 4)


def test_a_bool_index_is_not_basic() -> None:
    with pytest.raises(TypeError, match="boolean scalar indices are not basic indices"):
        _C.apply_index((2,), (1,), 0, True)


def test_a_float_index_is_not_an_index() -> None:
    with pytest.raises(
        TypeError,
        match=r"only integers, slices, None, Ellipsis and tensors/arrays/lists are valid indices, got 1\.5",
    ):
        _C.apply_index((2,), (1,), 0, 1.5)


def test_a_zero_slice_step_is_refused_as_python_does() -> None:
    with pytest.raises(ValueError, match="slice step cannot be zero"):
        _C.apply_index((2,), (1,), 0, slice(None, None, 0))


def test_an_index_past_int64_is_out_of_range() -> None:
    with pytest.raises(IndexError, match="index 9223372036854775808 is out of range"):
        _C.apply_index((2,), (1,), 0, 2**63)


@pytest.mark.parametrize(
    ("fn", "signature", "n"),
    [
        (_C.contiguous_strides, r"contiguous_strides\(shape\)", 1),
        (_C.is_contiguous, r"is_contiguous\(shape, strides\)", 2),
        (_C.is_non_overlapping_and_dense, r"is_non_overlapping_and_dense\(shape, strides\)", 2),
        (_C.extent, r"extent\(shape, strides, offset\)", 3),
        (_C.wrap_dim, r"wrap_dim\(dim, ndim\)", 2),
        (_C.infer_size, r"infer_size\(shape, numel\)", 2),
        (_C.apply_index, r"apply_index\(shape, strides, offset, key\)", 4),
    ],
    ids=lambda x: getattr(x, "__name__", None),
)
def test_a_rule_called_with_too_few_arguments_says_its_signature(
    fn: Any, signature: str, n: int
) -> None:
    with pytest.raises(TypeError, match=rf"{signature} takes {n} arguments \(0 given\)"):
        fn()
