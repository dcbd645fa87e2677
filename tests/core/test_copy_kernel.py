"""The copy kernel (``cdefs/core/copy.c``, ``_C.copy_into``) against NumPy.

Every copy bridge makes goes through one C kernel: ``clone``, ``contiguous``,
``copy_``, ``to(dtype)``. The property tests draw a destination view (any
dim order, steps, reversed dims: never two elements on one byte) and a
source view (any strides: negative, zero, overlapping; broadcast to the
destination's shape), on one storage or two, so that the two often overlap;
the expected result is ``np.copyto`` from a snapshot of the source (a copy
as if through a temporary). The whole storage is compared after each copy:
the kernel writes the destination's elements and nothing else.

Casts draw the two dtypes apart (random bytes: NaNs with payloads,
subnormals, values out of an integer's range); the conversions C does are
checked bit for bit against NumPy's (and ml_dtypes' for bfloat16), NaN
payloads included; what C leaves to NumPy must come out the same too, also
when the two views overlap (NumPy alone gets a broadcast overlapping source
wrong: copy_ hands it a copy).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st
from lifetimes import counting_alone
from numpy.lib.stride_tricks import as_strided as np_as_strided

import bridge
from bridge.core.native import _C, _drivers

SETTINGS = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

@pytest.fixture(params=[0, 1, 2], ids=["loops", "sse2", "avx2"])
def simd(request: pytest.FixtureRequest) -> Any:
    """Each instruction set of the kernel in turn (a level the CPU lacks runs as its best)."""
    old = _drivers.copy_simd(request.param)
    yield request.param
    _drivers.copy_simd(old)


# The dtypes whose conversions C does (the rest: float8/6/4, through NumPy).
C_CAST = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64", "complex64", "complex128"]  # fmt: skip
ML_CAST = ["bfloat16", "float8_e4m3fn", "float8_e5m2"]
BITS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64, 16: np.complex128}


def _np_dtype(dt: bridge.dtype, bits: bool) -> np.dtype[Any]:
    """NumPy's type for dt, or an unsigned one of its size for copies that only move bytes."""
    return np.dtype(BITS[dt.itemsize]) if bits else dt.numpy_dtype


# --------------------------------------------------------------------- views


@st.composite
def dst_geometry(draw: st.DrawFn, shape: tuple[int, ...]) -> tuple[tuple[int, ...], int]:
    """Strides (elements) of a destination: a dense layout in a random dim
    order, each dim stepped 1-3 and maybe reversed (never self-overlapping);
    and the number of elements it spans."""
    nd = len(shape)
    order = draw(st.permutations(range(nd)))
    strides = [0] * nd
    acc = 1
    for d in reversed(order):
        step = draw(st.integers(1, 3))
        strides[d] = acc * step
        acc *= step * max(shape[d], 1)
    signs = draw(st.lists(st.booleans(), min_size=nd, max_size=nd))
    return tuple(-s if neg else s for s, neg in zip(strides, signs)), acc


@st.composite
def src_geometry(draw: st.DrawFn, shape: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A source broadcast to ``shape``: leading dims dropped or size 1, any
    strides (zero and negative too, elements may share memory)."""
    nd = len(shape)
    keep = draw(st.integers(0, nd))
    sshape = list(shape[nd - keep :])
    for i in range(keep):
        if draw(st.integers(0, 4)) == 0:
            sshape[i] = 1
    strides = tuple(draw(st.integers(-7, 7)) for _ in sshape)
    return tuple(sshape), strides


def span(shape: tuple[int, ...], strides: tuple[int, ...]) -> tuple[int, int]:
    """(lowest, highest) element offsets from element [0, ..., 0]."""
    lo = hi = 0
    for n, s in zip(shape, strides):
        if n > 1:
            lo += min(0, s * (n - 1))
            hi += max(0, s * (n - 1))
    return lo, hi


def place(data: st.DataObject, shape: tuple[int, ...], strides: tuple[int, ...], nelem: int,
          label: str) -> int:  # fmt: skip
    """An offset that puts the view inside ``nelem`` elements."""
    lo, hi = span(shape, strides)
    return data.draw(st.integers(-lo, max(-lo, nelem - 1 - hi)), label=label)


class Twin:
    """A bridge storage of random bytes and its snapshot: views of both by geometry."""

    def __init__(self, raw: bytes) -> None:
        self.base = bridge.tensor(np.frombuffer(raw, dtype=np.uint8))
        self.before = self.base.numpy().copy()

    def view(self, dt: bridge.dtype, shape: tuple[int, ...], strides: tuple[int, ...], offset: int) -> bridge.Tensor:
        out: bridge.Tensor = self.base.view(dt).as_strided(shape, strides, offset)
        return out

    @staticmethod
    def np_view(arr: np.ndarray[Any, Any], npdt: np.dtype[Any], shape: tuple[int, ...],
                strides: tuple[int, ...], offset: int) -> np.ndarray[Any, Any]:  # fmt: skip
        isz = npdt.itemsize
        bits = np.dtype(BITS[isz])  # as_strided cannot name ml_dtypes types: view them after
        start = arr.view(bits)[offset:] if 0 not in shape else arr.view(bits)
        out = np_as_strided(start, shape, tuple(s * isz for s in strides), writeable=True)
        return out.view(npdt)


def same(got: np.ndarray[Any, Any], want: np.ndarray[Any, Any]) -> bool:
    """Equal bits (NaN payloads included)."""
    return bool(np.array_equal(np.ascontiguousarray(got).view(np.uint8), np.ascontiguousarray(want).view(np.uint8)))


def _undefined_casts(dt_dst: bridge.dtype, dt_src: bridge.dtype, values: np.ndarray[Any, Any]) -> Any:
    """Where a float (or complex) -> integer cast has no defined result (NaN, or out of the
    integer type's range: C leaves it undefined, and NumPy's result depends on
    the loop it picks), as a mask; None for any other cast."""
    if dt_dst is dt_src or not dt_dst.is_integral or dt_dst.is_bool or not (
            dt_src.is_floating_point or dt_src.is_complex):  # fmt: skip
        return None
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (NumPy's ComplexWarning: the real part is what a cast takes)
        v = np.asarray(np.real(values), dtype=np.float64)
        info = np.iinfo(_np_dtype(dt_dst, False))
        return ~np.isfinite(v) | (v < info.min) | (v >= float(info.max) + 1)


def check_copy(data: st.DataObject, dt_dst: bridge.dtype, dt_src: bridge.dtype,
               shape: tuple[int, ...]) -> None:  # fmt: skip
    """Draw the two views for one copy, do it with bridge and NumPy, compare."""
    bits = dt_dst is dt_src
    dstrides, dext = data.draw(dst_geometry(shape), label="dst strides")
    sshape, sstrides = data.draw(src_geometry(shape), label="src shape, strides")
    slo, shi = span(sshape, sstrides)
    isz = max(dt_dst.itemsize, dt_src.itemsize)
    # a small storage, so the two views often meet; sometimes two storages
    nbytes = (max(dext, shi - slo + 1) + data.draw(st.integers(0, 8), label="slack")) * isz
    nbytes += -nbytes % 16
    two = data.draw(st.integers(0, 3), label="storages") == 0
    dtw = Twin(data.draw(st.binary(min_size=nbytes, max_size=nbytes), label="bytes"))
    stw = Twin(data.draw(st.binary(min_size=nbytes, max_size=nbytes), label="src bytes")) if two else dtw
    doff = place(data, shape, dstrides, nbytes // dt_dst.itemsize, "dst offset")
    soff = place(data, sshape, sstrides, nbytes // dt_src.itemsize, "src offset")
    dst = dtw.view(dt_dst, shape, dstrides, doff)
    src = stw.view(dt_src, sshape, sstrides, soff)
    note(f"dst {dt_dst} {shape} {dstrides} +{doff}; src {dt_src} {sshape} {sstrides} +{soff}; two={two}")
    # NumPy: from a snapshot of the source (np.copyto's own overlap rule)
    want = dtw.before.copy()
    wd = Twin.np_view(want, _np_dtype(dt_dst, bits), shape, dstrides, doff)
    ws = Twin.np_view(stw.before, _np_dtype(dt_src, bits), sshape, sstrides, soff)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        np.copyto(wd, np.broadcast_to(ws, shape), casting="unsafe")
        if _C.copy_into(dst, src):
            event("C did it")
        else:  # what copy_ does then: NumPy (dst's contents are unspecified before)
            event("left to NumPy")
            dst.copy_(src)
        got = dtw.base.numpy()
        gd = Twin.np_view(got, _np_dtype(dt_dst, bits), shape, dstrides, doff)
        if not bits:
            gd, wd = gd.copy(), wd.copy()
    if src.untyped_storage().data_ptr() == dst.untyped_storage().data_ptr() and dst.numel():
        event("one storage")
    undefined = _undefined_casts(dt_dst, dt_src, np.broadcast_to(ws, shape))
    if undefined is not None:  # C leaves these undefined, and NumPy's loops differ on them
        gd, wd = gd[~undefined], wd[~undefined]
    assert same(gd, wd), (gd, wd)
    # nothing else written
    mask = np.zeros(got.size, dtype=np.uint8)
    Twin.np_view(mask, _np_dtype(dt_dst, True), shape, dstrides, doff)[...] = np.array(1).astype(
        _np_dtype(dt_dst, True)
    )
    outside = np.repeat(mask.reshape(-1, dt_dst.itemsize).any(1), dt_dst.itemsize) == 0
    assert np.array_equal(got[outside], want[outside])


shapes = st.lists(st.integers(0, 5), min_size=0, max_size=4).map(tuple)
# fewer dims, larger: full tiles, SIMD blocks and their edges
big_shapes = st.lists(st.integers(1, 80), min_size=1, max_size=3).map(tuple).filter(
    lambda s: int(np.prod(s)) <= 20000
)
same_dtypes = st.sampled_from(["uint8", "int16", "float32", "float64", "complex128", "bool", "bfloat16"])


@SETTINGS
@given(data=st.data(), shape=shapes, name=same_dtypes)
def test_copy_matches_numpy(data: st.DataObject, shape: tuple[int, ...], name: str) -> None:
    dt = getattr(bridge, name)
    check_copy(data, dt, dt, shape)


@settings(SETTINGS, max_examples=60, suppress_health_check=[*SETTINGS.suppress_health_check,
                                                            HealthCheck.function_scoped_fixture])  # fmt: skip
@given(data=st.data(), shape=big_shapes, name=same_dtypes)
def test_large_copy_matches_numpy(data: st.DataObject, shape: tuple[int, ...], name: str, simd: int) -> None:
    dt = getattr(bridge, name)
    check_copy(data, dt, dt, shape)


@SETTINGS
@given(data=st.data(), shape=shapes, a=st.sampled_from(C_CAST), b=st.sampled_from(C_CAST))
def test_cast_matches_numpy(data: st.DataObject, shape: tuple[int, ...], a: str, b: str) -> None:
    check_copy(data, getattr(bridge, a), getattr(bridge, b), shape)


@settings(SETTINGS, max_examples=100)
@given(data=st.data(), shape=shapes, a=st.sampled_from(C_CAST + ML_CAST), b=st.sampled_from(C_CAST + ML_CAST))
def test_cast_with_ml_dtypes_matches(data: st.DataObject, shape: tuple[int, ...], a: str, b: str) -> None:
    pytest.importorskip("ml_dtypes")
    check_copy(data, getattr(bridge, a), getattr(bridge, b), shape)


@settings(SETTINGS, max_examples=40)
@given(data=st.data(), shape=big_shapes, a=st.sampled_from(C_CAST), b=st.sampled_from(C_CAST))
def test_large_cast_matches_numpy(data: st.DataObject, shape: tuple[int, ...], a: str, b: str) -> None:
    check_copy(data, getattr(bridge, a), getattr(bridge, b), shape)


# ------------------------------------------------------------ chosen cases


def _stats() -> dict[str, int]:
    out: dict[str, int] = _C.stats()
    return out


@pytest.mark.parametrize(
    ("make", "want_temp"),
    [
        (lambda t: (t[1:], t[:-1]), False),  # shift up: copied backwards
        (lambda t: (t[:-1], t[1:]), False),  # shift down: forwards
        (lambda t: (t, t.flip(0)), True),  # in-place reversal
        (lambda t: (t.view(200, 200), t.view(200, 200).t()), True),  # in-place transpose
        (lambda t: (t.view(200, 200), t.view(200, 200).t().flip(0)), True),  # rot90
        (lambda t: (t.view(200, 200)[:50, :50], t.view(200, 200)[:50, :50].t()), True),  # a gapped block
        (lambda t: (t.view(40, 40, 25)[:, :, :20], t.view(40, 40, 25)[:, :, :20].permute(1, 0, 2).flip(2)), True),
        (lambda t: (t.view(200, 200)[1:, 1:], t.view(200, 200)[:-1, :-1].t()), True),  # a shifted transpose
        (lambda t: (t.view(200, 200)[:150, :190], t.view(200, 200)[:190, :150].t()), True),
        (lambda t: (t[:27000].view(30, 30, 30), t[:27000].view(30, 30, 30).permute(1, 2, 0)), True),
        (lambda t: (t.view(200, 200)[1:], t.view(200, 200)[0].expand(199, 200)), False),  # a row to all
        (lambda t: (t.view(200, 200)[:, 1:], t.view(200, 200)[:, :-1]), False),  # shift along rows
        (lambda t: (t, t), False),  # onto itself
        (lambda t: (t.view(200, 200)[:100, :100], t.as_strided((100, 100), (1, 1), 0)), False),  # windows
        (lambda t: (t.as_strided((100, 100), (1, 200), 50), t.as_strided((100, 100), (1, 1), 0)), False),
        (lambda t: (t.view(200, 200)[1:, :50], t.view(200, 200)[:-1, 100:101].expand(199, 50).t().t()), False),
    ],
)  # fmt: skip
def test_overlapping_copies(make: Any, want_temp: bool) -> None:
    """Overlapping copies match NumPy's (which copies src first): a safe
    order of runs through a tile-sized buffer where one exists (a shift),
    else one temporary of src's distinct elements (as NumPy does)."""
    t = bridge.arange(40000, dtype=bridge.float64)
    a = t.numpy()
    dst, src = make(t)
    want = a.copy()
    np.copyto(Twin.np_view(want, np.dtype(np.float64), dst.shape, dst.stride(), dst.storage_offset()),
              src.numpy().copy())  # fmt: skip
    before = _stats()
    dst.copy_(src)
    after = _stats()
    assert np.array_equal(a, want)
    assert not counting_alone() or after["copy_temporaries"] - before["copy_temporaries"] == want_temp


def test_overlapping_cast_between_equal_sizes() -> None:
    """An int32 view written from the float32 transpose of its own bytes."""
    t = bridge.arange(40000, dtype=bridge.float32)
    a = t.numpy()
    want = a.copy()
    want.view(np.int32).reshape(200, 200)[...] = a.reshape(200, 200).T.astype(np.int32)
    t.view(bridge.int32).view(200, 200).copy_(t.view(200, 200).t())
    assert a.tobytes() == want.tobytes()


_HELD_ONCE = """
import resource, numpy as np, bridge
t = bridge.arange(1 << 24, dtype=bridge.float64)  # 128 MiB, touched
dst = t.view(4096, 4096).t()[:, 1:]  # meets src, and no order of runs is safe
src = t[:4095].expand(4096, 4095)
want = np.broadcast_to(t.numpy()[:4095].copy(), (4096, 4095))
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
dst.copy_(src)
assert np.array_equal(dst.numpy(), want)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak)
"""


def test_a_broadcast_source_overlapping_its_destination_is_held_once() -> None:
    """The temporary holds src's distinct elements: a row repeated 4,096 times
    onto a transposed view of its own storage holds one row (32 KiB), not the
    128 MiB of the whole source. Peak memory, in a fresh process."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _HELD_ONCE], check=True, capture_output=True, text=True)
    assert int(out.stdout) < 16 << 10, out.stdout  # KiB


@settings(SETTINGS, max_examples=150)
@given(
    side=st.integers(1, 9),
    ndim=st.integers(1, 4),
    perm_seed=st.permutations(range(4)),
    flips=st.lists(st.booleans(), min_size=4, max_size=4),
    dtype=st.sampled_from(["uint8", "int16", "float32", "float64", "complex128"]),
)
def test_in_place_permutations_match_numpy(side: int, ndim: int, perm_seed: list[int], flips: list[bool],
                                           dtype: str) -> None:  # fmt: skip
    """x.copy_(x.permute(p).flip(...)) for equal dims: NumPy's answer, through
    at most one temporary."""
    perm = [d for d in perm_seed if d < ndim]
    t = bridge.arange(side**ndim, dtype=getattr(bridge, dtype)).reshape(*([side] * ndim))
    want = t.numpy().transpose(perm).copy()
    for d, f in enumerate(flips[:ndim]):
        if f:
            want = np.flip(want, d)
    src = t.permute(*perm)
    dims = [d for d, f in enumerate(flips[:ndim]) if f]
    if dims:
        src = src.flip(*dims)
    before = _stats()
    t.copy_(src)
    after = _stats()
    np.testing.assert_array_equal(t.numpy(), want)
    assert not counting_alone() or after["copy_temporaries"] - before["copy_temporaries"] <= 1


@pytest.mark.thread_unsafe(reason="sets the process-wide copy thread count and counts the pool's jobs "
                                  "in _C.stats(), which the other test threads' copies move too")
def test_large_copies_split_between_threads_and_small_ones_never() -> None:
    old = _C.copy_threads(2)
    try:
        assert _C.copy_threads() == 2
        a = np.arange(1 << 21, dtype=np.float32).reshape(1024, 2048)  # 8 MiB
        t = bridge.from_numpy(a).t()
        before = _stats()["copy_threads"]
        out = t.contiguous()
        assert _stats()["copy_threads"] == before + 1
        assert np.array_equal(out.numpy(), a.T)
        small = bridge.from_numpy(a[:100, :100]).t()
        assert np.array_equal(small.contiguous().numpy(), a[:100, :100].T)
        c = bridge.from_numpy(a).clone()  # contiguous, 8 MiB: rows split too
        assert np.array_equal(c.numpy(), a)
        assert _stats()["copy_threads"] == before + 2
        _C.copy_threads(1)
        t.contiguous()
        assert _stats()["copy_threads"] == before + 2
    finally:
        _C.copy_threads(old)


@pytest.mark.thread_unsafe(reason="sets the process-wide copy thread count and restores it after: "
                                  "from several test threads at once, the restores interleave and "
                                  "can leave another thread's value behind (it runs 4 threads of its own)")
def test_copies_running_at_once_from_several_threads_each_finish_whole() -> None:
    """The pool runs one job at a time: a copy that finds it busy does its
    parts itself. Four threads copying 8 MiB at once (GIL released) each get
    their own values."""
    import threading

    old = _C.copy_threads(2)
    errors: list[int] = []
    try:
        sources = [np.full((1024, 2048), k, dtype=np.float32) for k in range(4)]

        def work(k: int) -> None:
            for _ in range(5):
                out = bridge.from_numpy(sources[k]).t().contiguous()
                if not (out.numpy() == k).all():
                    errors.append(k)

        threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    finally:
        _C.copy_threads(old)
    assert errors == []


def test_a_forked_child_copies_on_threads_of_its_own() -> None:
    """The pool's workers are the parent's: a child forked after they ran
    starts with none and makes its own (a fork in the middle of a job waits
    for it)."""
    import subprocess
    import sys

    code = """
import os, numpy as np, bridge
from bridge.core.native import _C
_C.copy_threads(2)
a = np.arange(1 << 21, dtype=np.float32).reshape(1024, 2048)
assert np.array_equal(bridge.from_numpy(a).t().contiguous().numpy(), a.T)  # the parent's workers
pid = os.fork()
if pid == 0:
    ok = np.array_equal(bridge.from_numpy(a).t().contiguous().numpy(), a.T)
    os._exit(0 if ok and _C.stats()["copy_threads"] >= 2 else 1)
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "0"


def test_copy_into_contract() -> None:
    t = bridge.zeros(2, 3)
    with pytest.raises(TypeError, match="two tensors"):
        _C.copy_into(t, np.zeros((2, 3)))
    with pytest.raises(TypeError, match="two tensors"):
        _C.copy_into(t)
    with pytest.raises(ValueError, match=r"cannot broadcast a value of shape \(4,\) to shape \(2, 3\)"):
        _C.copy_into(t, bridge.zeros(4))
    with pytest.raises(ValueError, match=r"cannot broadcast a value of shape \(1, 2, 3\)"):
        _C.copy_into(t, bridge.zeros(1, 2, 3))  # more dims than dst: refused, as torch
    ro = np.zeros((2, 3), dtype=np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        _C.copy_into(bridge.from_numpy(ro), t)
    with pytest.raises(TypeError, match="copy_threads"):
        _C.copy_threads(1, 2)
    with pytest.raises(ValueError, match="at most 64"):
        _C.copy_threads(65)


def test_device_memory_is_refused() -> None:
    host = np.zeros(4, dtype=np.float32)
    cuda = _C.from_memory(host.ctypes.data, bridge.float32, (4,), (4,), host, False, (2, 0))
    with pytest.raises(RuntimeError, match="cannot be read or written from the host"):
        _C.copy_into(cuda, bridge.zeros(4))
    with pytest.raises(RuntimeError, match="cannot be read or written from the host"):
        _C.copy_into(bridge.zeros(4), cuda)


def test_casts_c_leaves_to_numpy() -> None:
    # out of an integer's range, NaN, complex to real: NumPy's results (and warnings)
    f = bridge.tensor([1.5, 3e10, float("nan"), -2.5])
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        assert not _C.copy_into(bridge.empty(4, dtype=bridge.int32), f)
        want = f.numpy().astype(np.int32)
        assert np.array_equal(f.to(bridge.int32).numpy(), want)
        c = bridge.tensor([1 + 2j, 3 - 1j])
        assert not _C.copy_into(bridge.empty(2), c)
        assert c.to(bridge.float64).tolist() == [1.0, 3.0]
    assert _C.copy_into(bridge.empty(3, dtype=bridge.int64), bridge.tensor([1.9, -1.9, 0.0]))


def test_overlapping_cast_left_to_numpy_reads_the_source_first() -> None:
    # 2.0 (float32) broadcast into the int32 view over its own bytes: NumPy alone
    # would read the source again after the first write
    t = bridge.tensor([2.0, 3e10, 0.0], dtype=bridge.float32)
    dst = t.view(bridge.int32)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        dst.copy_(t[1].expand(3))  # out of int32's range: NumPy's value in all three
        want = np.full(3, np.float32(3e10)).astype(np.int32)
    assert dst.tolist() == want.tolist()
    t = bridge.tensor([2.0, 0.0, 0.0], dtype=bridge.float32)
    t.view(bridge.int32).copy_(t[0].expand(3))  # in range: C, through its overlap check
    assert t.view(bridge.int32).tolist() == [2, 2, 2]


def test_geometry_edges() -> None:
    # size-1 dims with huge strides never enter the arithmetic
    t = bridge.arange(6, dtype=bridge.int16)
    odd = t.as_strided((1, 6, 1), (2**62, 1, 2**62))
    assert odd.contiguous().tolist() == [[[v] for v in range(6)]]
    # many dims
    shape = (1,) * 30 + (2, 3) + (1,) * 30
    big = bridge.arange(6).reshape(shape)
    perm = tuple(reversed(range(62)))
    assert np.array_equal(big.permute(perm).contiguous().numpy(), np.arange(6).reshape(shape).transpose(perm))
    # empty and 0-d
    assert bridge.zeros(0, 3).t().contiguous().shape == (3, 0)
    z = bridge.tensor(7.0)
    out = bridge.empty(())
    assert _C.copy_into(out, z) and out.item() == 7.0
    # a destination with stride 0 keeps the last value written along it
    d = bridge.zeros(1).expand(4)
    d.copy_(bridge.tensor([1.0, 2.0, 3.0, 4.0]))
    assert d.tolist() == [4.0] * 4


@pytest.mark.parametrize("name", ["uint8", "int16", "float32", "float64", "complex128"])
def test_clone_layouts(name: str) -> None:
    a = np.arange(2 * 3 * 5 * 7).astype(name).reshape(2, 3, 5, 7).transpose(0, 3, 1, 2)[:, ::-2]
    t = bridge.from_numpy(np.ascontiguousarray(a.transpose(0, 2, 3, 1))).permute(0, 3, 1, 2)
    for fmt in (bridge.contiguous_format, bridge.channels_last, bridge.preserve_format, None):
        c = t.clone(memory_format=fmt)
        assert np.array_equal(c.numpy(), t.numpy())
        assert c.is_non_overlapping_and_dense()
    assert t.clone(memory_format=bridge.channels_last).is_contiguous(memory_format=bridge.channels_last)
    assert t.flip(1).contiguous().is_contiguous()
    assert np.array_equal(t.flip(1).contiguous().numpy(), t.numpy()[:, ::-1])


@pytest.mark.parametrize("name", ["uint8", "int16", "float32", "float64", "complex128"])
def test_transposes_and_reversals_every_block_and_edge(name: str, simd: int) -> None:
    # the SIMD blocks (up to 32 x 16 elements) whole and cut at every kind of edge
    for n, m in [(1, 1), (7, 9), (16, 16), (31, 33), (32, 16), (48, 64), (64, 65), (100, 37), (130, 257)]:
        a = (np.arange(n * m) % 251).astype(name).reshape(n, m)
        t = bridge.from_numpy(a)
        for got, want in ((t.t(), a.T), (t.flip(1), a[:, ::-1]), (t.t().flip(0), a.T[::-1]),
                          (t[::2, 1::3].t(), a[::2, 1::3].T)):  # fmt: skip
            assert np.array_equal(got.contiguous().numpy(), np.ascontiguousarray(want)), (n, m, want.strides)
            for cast in ("int64", "float32"):
                if name != "complex128":
                    assert np.array_equal(got.to(getattr(bridge, cast)).numpy(), want.astype(cast))
    # src rows 64 KiB apart (every cache set shared): staged through the scratch buffer
    wide = (np.arange(37 * (65536 // a.itemsize)) % 251).astype(name).reshape(37, -1)[:, :300]
    assert np.array_equal(bridge.from_numpy(wide).t().contiguous().numpy(), np.ascontiguousarray(wide.T))
    if name != "complex128":
        assert np.array_equal(bridge.from_numpy(wide).t().to(bridge.float64).numpy(), wide.T.astype(np.float64))
    b = (np.arange(5 * 40 * 70) % 251).astype(name).reshape(5, 40, 70)
    for perm in [(0, 2, 1), (2, 1, 0), (1, 2, 0), (2, 0, 1)]:
        got = bridge.from_numpy(b).permute(perm).contiguous().numpy()
        assert np.array_equal(got, np.ascontiguousarray(b.transpose(perm)))


def _draw_two_views(base: Any, shape: list[int], data: st.DataObject, dst_lo: int,
                    top: int) -> tuple[Any, Any, tuple[list[int], int]] | None:  # fmt: skip
    """Two as_strided views of base's storage (strides dst_lo..top for dst, 0..top
    for src, any offsets that fit; src's dims flipped at random): (dst, src, dst's
    (strides, offset)), or None when a drawn view does not fit."""
    n = base.numel()

    def view(lo: int) -> tuple[list[int], int] | None:
        strides = [data.draw(st.integers(lo, top)) for _ in shape]
        span = sum((k - 1) * x for k, x in zip(shape, strides))
        return None if span >= n else (strides, data.draw(st.integers(0, n - 1 - span)))

    d, s = view(dst_lo), view(0)
    if d is None or s is None:
        return None
    src = base.as_strided(shape, s[0], s[1])
    flips = [i for i in range(len(shape)) if data.draw(st.booleans())]
    return base.as_strided(shape, d[0], d[1]), src.flip(*flips) if flips else src, d


@settings(SETTINGS, max_examples=300)
@given(
    shape=st.lists(st.integers(1, 6), min_size=1, max_size=3),
    data=st.data(),
    dtype=st.sampled_from(["uint8", "int16", "float32", "complex128"]),
)
def test_any_overlap_matches_numpy(shape: list[int], data: st.DataObject, dtype: str) -> None:
    """Two views of one storage, any strides and offsets (reversed dims too),
    copied one into the other: NumPy's answer (it copies the source first),
    through at most one temporary."""
    n = 256
    base = bridge.arange(n, dtype=getattr(bridge, dtype))
    a = base.numpy()

    drawn = _draw_two_views(base, shape, data, 0, 9)
    if drawn is None:
        return
    dst, src, d = drawn
    dn = np.lib.stride_tricks.as_strided(a[d[1]:], shape, [x * a.itemsize for x in d[0]])
    if any(x == 0 for x, k in zip(d[0], shape) if k > 1):
        return  # a dst that writes one place many times: its order is the kernel's own
    want = a.copy()
    wn = np.lib.stride_tricks.as_strided(want[d[1]:], shape, [x * a.itemsize for x in d[0]])
    wn[...] = src.numpy().copy()
    if len({int(p) for p in np.lib.stride_tricks.as_strided(np.arange(n)[d[1]:], shape,
                                                            [x * 8 for x in d[0]]).ravel()}) < dn.size:
        return  # dst's own elements overlap: NumPy's element order decides
    before = _stats()
    dst.copy_(src)
    np.testing.assert_array_equal(a, want)
    assert not counting_alone() or _stats()["copy_temporaries"] - before["copy_temporaries"] <= 1


_GRID_PAIRS = [("int16", "int16"), ("float32", "float32"), ("complex128", "complex128"), ("int32", "float32"),
               ("float32", "int32"), ("uint32", "int32"), ("int16", "uint16"), ("int32", "int16"),
               ("int16", "int32"), ("float64", "int32")]  # fmt: skip


@settings(SETTINGS, max_examples=300)
@given(data=st.data(), pair=st.sampled_from(_GRID_PAIRS),
       shape=st.lists(st.integers(1, 5), min_size=1, max_size=3))  # fmt: skip
def test_overlaps_across_grids_and_casts_match_numpy(data: st.DataObject, pair: tuple[str, str],
                                                     shape: list[int]) -> None:  # fmt: skip
    """Two imports of one byte buffer at any byte offsets (so that elements
    may sit a part of an element apart), of one dtype or two: NumPy's answer,
    through at most one temporary."""
    nb = 512
    raw = np.frombuffer(bytearray((np.arange(nb) * 7 % 50).astype(np.uint8).tobytes()), dtype=np.uint8)
    dt, sdt = (np.dtype(x) for x in pair)

    def typed(buf: Any, off: int, dtype: np.dtype[Any], strides: list[int]) -> Any:
        arr = np.frombuffer(buf, dtype=np.uint8, offset=off, count=nb - off)
        return np_as_strided(arr[: arr.size // dtype.itemsize * dtype.itemsize].view(dtype), shape, strides)

    def view(dtype: np.dtype[Any], zero: bool) -> tuple[list[int], int] | None:
        strides = [data.draw(st.integers(0 if zero else 1, 9)) * dtype.itemsize for _ in shape]
        span = sum((k - 1) * x for k, x in zip(shape, strides)) + dtype.itemsize
        if span > nb - 8:
            return None
        off = data.draw(st.integers(0, nb - span))
        return strides, off - off % dtype.itemsize if data.draw(st.booleans()) else off

    d, s = view(dt, False), view(sdt, True)
    if d is None or s is None:
        return
    cells = np_as_strided(np.arange(nb)[d[1]:], shape, [x // dt.itemsize * 8 for x in d[0]]).ravel()
    if len(set(cells.tolist())) < cells.size:
        return  # dst's own elements overlap: its order is the kernel's own
    srcn = typed(raw.data, s[1], sdt, s[0])
    if sdt.kind == "f" and dt.kind in "iu":
        return  # out-of-range float -> int is undefined in C and NumPy alike
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        vals = srcn.astype(dt)
    want = bytearray(raw.tobytes())
    typed(memoryview(want), d[1], dt, d[0])[...] = vals
    dst, src = bridge.from_numpy(typed(raw.data, d[1], dt, d[0])), bridge.from_numpy(srcn)
    before = _stats()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dst.copy_(src)
    assert raw.tobytes() == bytes(want)
    temporaries = _stats()["copy_temporaries"] - before["copy_temporaries"]
    assert not counting_alone() or temporaries <= 1
    event(f"temporary: {temporaries}")


@settings(SETTINGS, max_examples=300)
@given(shape=st.lists(st.integers(1, 6), min_size=1, max_size=3), data=st.data())
def test_destination_whose_elements_share_memory(shape: list[int], data: st.DataObject) -> None:
    """A destination whose own elements share addresses (as_strided, which
    torch refuses in copy_) meeting its source: each such address ends up
    holding the value one of its elements was to get, every other byte is
    untouched; at most one temporary."""
    n = 128
    base = bridge.arange(n, dtype=bridge.float64)
    a = base.numpy()
    old = a.copy()

    drawn = _draw_two_views(base, shape, data, 1, 5)
    if drawn is None:
        return
    dst, src, d = drawn
    values = src.numpy().copy()
    cells = np_as_strided(np.arange(n)[d[1]:], shape, [x * 8 for x in d[0]])
    wanted: dict[int, set[float]] = {}
    for idx in np.ndindex(*shape):
        wanted.setdefault(int(cells[idx]), set()).add(float(values[idx]))
    before = _stats()
    dst.copy_(src)
    assert not counting_alone() or _stats()["copy_temporaries"] - before["copy_temporaries"] <= 1
    for i in range(n):
        assert a[i] in wanted[i] if i in wanted else a[i] == old[i], (i, a[i], wanted.get(i))


def test_destination_sharing_memory_over_a_window_source_ends() -> None:
    # walked a tree of elements that were not all their address's writer: it never ended
    base = bridge.arange(128, dtype=bridge.float64)
    dst = base.as_strided([3, 3, 4], [5, 2, 3], 14)
    dst.copy_(base.as_strided([3, 3, 4], [3, 5, 1], 6).flip(0))
    assert base[:14].tolist() == list(range(14)) and base[52:].tolist() == list(range(52, 128))


def test_views_whose_strides_do_not_nest_copy_as_numpy_does() -> None:
    """16 size-2 dims of uint8 with strides near 1000 (no dim nests in the
    next), meeting a shifted copy of themselves: NumPy's answer (this searched
    per element for 13-18 s before the overlap took one temporary)."""
    rng = np.random.default_rng(5)
    strides = [int(x) for x in rng.integers(990, 1010, 16)]
    span = sum(strides) + 1
    raw = np.arange(span + 7, dtype=np.uint8)
    want = raw.copy()
    dn = np_as_strided(want[7:], [2] * 16, strides)
    dn[...] = np_as_strided(want, [2] * 16, strides).copy()
    t = bridge.from_numpy(raw)
    t.as_strided([2] * 16, strides, 7).copy_(t.as_strided([2] * 16, strides, 0))
    assert np.array_equal(raw, want)


@pytest.mark.filterwarnings("ignore:Casting complex values to real")  # NumPy's ComplexWarning, as torch warns
@pytest.mark.parametrize("value", ["tensor", "scalar"])
def test_an_expanded_destination_is_written_once_per_address(value: str) -> None:
    """copy_ into an expanded tensor with a cast the kernel leaves to NumPy
    (complex -> real), and fill_: each address once, holding what an element
    loop in index order leaves there (the last), never 2**40 virtual
    elements (about 80 minutes)."""
    base = bridge.zeros(4)
    dst = base.expand(2**40, 4)
    if value == "tensor":
        dst.copy_(bridge.tensor([1 + 2j, 2, 3, 4], dtype=bridge.complex128))
    else:
        dst.fill_(7)
    assert base.tolist() == ([1.0, 2.0, 3.0, 4.0] if value == "tensor" else [7.0] * 4)
    col = bridge.zeros(3, 1)
    col.expand(3, 5).copy_(bridge.arange(15, dtype=bridge.complex64).reshape(3, 5).real.to(bridge.complex128))
    assert col.flatten().tolist() == [4.0, 9.0, 14.0]  # the last element of each row
