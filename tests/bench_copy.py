"""The copy rows of ``make bench`` (issues 25 and 33): contiguous() of
transposing layouts, copies between layouts, and overlapping copies, side by
side with NumPy, torch and a plain copy. Imported by tests/bench.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from bench_common import MiB64, Row, _threads, torch
from numpy.lib.stride_tricks import as_strided as np_as_strided

import bridge


def _layout_row(name: str, base: np.ndarray[Any, Any], view: Callable[[Any], Any], threads: int = 1,
                targets: tuple[tuple[str, float], ...] = (("plain", 2.0), ("numpy", 1.0), ("torch", 1.0)),
                torch_op: Callable[[Any], Any] | None = None) -> Row:  # fmt: skip
    """contiguous() of ``view`` applied to ``base`` (as a bridge tensor, an ndarray and a
    torch tensor, all over the same bytes), against a plain copy of those bytes.
    ``torch_op`` replaces torch's ``view(x).contiguous()`` where torch has no such view."""
    t = view(bridge.from_numpy(base))
    a = view(base)
    tt = torch.from_numpy(base) if torch is not None else None
    if tt is not None:
        torch_fn = (lambda: torch_op(tt)) if torch_op is not None else view(tt).contiguous
    assert a.nbytes == base.nbytes

    def check() -> None:
        want = np.ascontiguousarray(a)
        got = t.contiguous()
        assert got.is_contiguous() and np.array_equal(got.numpy(), want)
        if tt is not None:
            assert np.array_equal(torch_fn().numpy(), want)

    (vs, goal), *more = targets
    return Row(name + ("  [all threads]" if threads == 0 else ""),
               _threads(threads, t.contiguous), lambda: np.ascontiguousarray(a),
               _threads(threads, torch_fn) if tt is not None else None, target=goal, target_vs=vs,
               more_targets=tuple(more), check=check, plain_fn=lambda: np.copy(base))  # fmt: skip


def copy_rows() -> list[Row]:
    """Copies (issue 25): contiguous() of transposing layouts of 64 MiB, side by side
    with NumPy, torch and a plain copy of the same bytes into new memory (np.copy,
    allocation and page faults included, as every contiguous() pays them).
    Targets: every transposing row at most 2x the plain copy and never slower
    than NumPy or torch; a contiguous clone at most 1.1x the plain copy. bridge
    and torch run on one thread, then (the issue's rows) on all."""
    f32 = np.arange(MiB64 // 4, dtype=np.float32)
    f64 = np.arange(MiB64 // 8, dtype=np.float64)
    u8 = (np.arange(MiB64) % 251).astype(np.uint8)
    issue = [
        ("contiguous() 64 MiB f32 (4096,4096).t()", f32, lambda x: x.reshape(4096, 4096).T),
        ("contiguous() 64 MiB f32 (256,256,256).permute(0,2,1)", f32,
         lambda x: x.reshape(256, 256, 256).transpose(0, 2, 1) if isinstance(x, np.ndarray)
         else x.reshape(256, 256, 256).permute(0, 2, 1)),
        ("contiguous() 64 MiB f32 (64,64,64,64).permute(0,2,3,1)  [channels-last]", f32,
         lambda x: x.reshape(64, 64, 64, 64).transpose(0, 2, 3, 1) if isinstance(x, np.ndarray)
         else x.reshape(64, 64, 64, 64).permute(0, 2, 3, 1)),
        ("contiguous() 64 MiB f32 (64,64,64,64).permute(3,1,2,0)", f32,
         lambda x: x.reshape(64, 64, 64, 64).transpose(3, 1, 2, 0) if isinstance(x, np.ndarray)
         else x.reshape(64, 64, 64, 64).permute(3, 1, 2, 0)),
    ]  # fmt: skip
    rows = [_layout_row(name, base, view) for name, base, view in issue]
    rows += [
        _layout_row("contiguous() 64 MiB f64 (2896,2896).t()", f64[: 2896 * 2896], lambda x: x.reshape(2896, 2896).T),
        _layout_row("contiguous() 64 MiB u8 (8192,8192).t()", u8, lambda x: x.reshape(8192, 8192).T),
        _layout_row("contiguous() 64 MiB f32 (4096,4096)[:, ::-1]  [negative stride; torch: flip(1)]",
                    f32, lambda x: x.reshape(4096, 4096)[:, ::-1] if isinstance(x, np.ndarray)
                    else x.reshape(4096, 4096).flip(1), targets=(("numpy", 1.0), ("torch", 1.0)),
                    torch_op=lambda x: x.reshape(4096, 4096).flip(1)),
    ]  # fmt: skip
    rows += [_layout_row(name, base, view, threads=0) for name, base, view in issue]
    rows.append(_broadcast_row(f32))
    rows.append(_copy_between_layouts_row())
    rows.append(_plain_clone_row(f32))
    rows.append(_small_transpose_row())
    return rows


def overlap_rows() -> list[Row]:
    """copy_ between views of one storage (issue 33), side by side with
    NumPy's ``copyto`` (which copies an overlapping source into a temporary
    first) and torch's advice (``dst.copy_(src.clone())``: its copy_ refuses
    most overlaps). Target: never slower than NumPy. One thread, as NumPy."""
    rows = []
    cases = [
        ("copy_ overlapping: 64 MiB f32 (4096,4096)[1:,1:] <- [:-1,:-1].t()  [shifted transpose]", 4096 * 4096,
         lambda x: (x.reshape(4096, 4096)[1:, 1:], x.reshape(4096, 4096)[:-1, :-1].T)),
        ("copy_ overlapping: 64 MiB f32 (4096,4096) <- itself .t()  [in-place transpose]", 4096 * 4096,
         lambda x: (x.reshape(4096, 4096), x.reshape(4096, 4096).T)),
        ("copy_ overlapping: 64 MiB f32 [1:] <- [:-1]  [a shift: runs, no temporary]", 4096 * 4096,
         lambda x: (x[1:], x[:-1])),
    ]  # fmt: skip
    for name, n, views in cases:
        a = np.arange(n, dtype=np.float32)
        na, nb = views(a)
        t = bridge.from_numpy(np.arange(n, dtype=np.float32))
        tt = torch.from_numpy(np.arange(n, dtype=np.float32)) if torch is not None else None
        bd, bs = _twin_views(t, views)
        td, ts = _twin_views(tt, views) if tt is not None else (None, None)

        def check(bd: Any = bd, bs: Any = bs, na: Any = na, nb: Any = nb) -> None:
            want = nb.copy()
            bd.copy_(bs)
            np.copyto(na, nb)
            assert np.array_equal(bd.numpy(), want) and np.array_equal(na, want)

        rows.append(Row(name, _threads(1, lambda bd=bd, bs=bs: bd.copy_(bs)),
                        lambda na=na, nb=nb: np.copyto(na, nb),
                        _threads(1, lambda td=td, ts=ts: td.copy_(ts.clone())) if td is not None else None,
                        target=1.0, check=check))  # fmt: skip
    strides = [int(x) for x in np.random.default_rng(5).integers(990, 1010, 16)]
    raw = np.arange(sum(strides) + 8, dtype=np.uint8)
    nd, ns = np_as_strided(raw[7:], [2] * 16, strides), np_as_strided(raw, [2] * 16, strides)
    u = bridge.from_numpy(raw.copy())
    ud, us = u.as_strided([2] * 16, strides, 7), u.as_strided([2] * 16, strides, 0)
    rows.append(Row("copy_ overlapping: u8, 16 dims of 2, strides ~1000 that do not nest  [64 KiB]",
                    lambda: ud.copy_(us), lambda: np.copyto(nd, ns), None, target=1.0))  # fmt: skip
    return rows


def _twin_views(x: Any, views: Callable[[Any], tuple[Any, Any]]) -> tuple[Any, Any]:
    """``views`` (written for NumPy: reshape, slices, ``.T``) applied to a
    bridge or torch tensor."""

    class Proxy:
        def __init__(self, v: Any) -> None:
            self.v = v

        def reshape(self, *shape: int) -> Proxy:
            return Proxy(self.v.reshape(*shape))

        def __getitem__(self, key: Any) -> Proxy:
            return Proxy(self.v[key])

        @property
        def T(self) -> Proxy:
            return Proxy(self.v.t())

    d, s = views(Proxy(x))
    return d.v, s.v


def _broadcast_row(f32: np.ndarray[Any, Any]) -> Row:
    """contiguous() of a row broadcast (stride 0) to 64 MiB."""
    row = np.arange(4096, dtype=np.float32)
    t = bridge.from_numpy(row).expand(4096, 4096)
    tt = torch.from_numpy(row).expand(4096, 4096) if torch is not None else None

    def check() -> None:
        assert np.array_equal(t.contiguous().numpy(), np.broadcast_to(row, (4096, 4096)))

    return Row("contiguous() 64 MiB f32 (4096,) expanded to (4096,4096)  [stride 0]",
               _threads(1, t.contiguous), lambda: np.ascontiguousarray(np.broadcast_to(row, (4096, 4096))),
               _threads(1, tt.contiguous) if tt is not None else None, target=1.0, more_targets=(("torch", 1.0),),
               check=check, plain_fn=lambda: np.copy(f32))  # fmt: skip


def _copy_between_layouts_row() -> Row:
    """copy_ of a contiguous (64,64,64,64) f32 tensor into a channels-last one (no allocation)."""
    a = np.arange(MiB64 // 4, dtype=np.float32).reshape(64, 64, 64, 64)
    d = np.empty((64, 64, 64, 64), dtype=np.float32).transpose(0, 2, 3, 1).copy().transpose(0, 3, 1, 2)
    src, dst = bridge.from_numpy(a), bridge.empty(64, 64, 64, 64, memory_format=bridge.channels_last)
    tsrc = torch.from_numpy(a) if torch is not None else None
    tdst = torch.empty(64, 64, 64, 64).to(memory_format=torch.channels_last) if torch is not None else None
    assert dst.is_contiguous(memory_format=bridge.channels_last) and d.strides == tuple(s * 4 for s in dst.stride())

    def check() -> None:
        dst.copy_(src)
        assert np.array_equal(dst.numpy(), a)

    return Row("copy_ 64 MiB f32 contiguous -> channels_last  [into touched memory]",
               _threads(1, lambda: dst.copy_(src)), lambda: np.copyto(d, a),
               _threads(1, lambda: tdst.copy_(tsrc)) if tdst is not None else None, target=1.0,
               more_targets=(("torch", 1.0),), check=check, plain_fn=lambda: np.copy(a))  # fmt: skip


def _plain_clone_row(f32: np.ndarray[Any, Any]) -> Row:
    """clone() of a contiguous 64 MiB tensor: the plain copy itself."""
    t = bridge.from_numpy(f32)
    tt = torch.from_numpy(f32) if torch is not None else None
    return Row("clone() 64 MiB f32 contiguous  [a.copy() | np.copy]", _threads(1, t.clone), f32.copy,
               _threads(1, tt.clone) if tt is not None else None, target=1.1, target_vs="plain",
               plain_fn=lambda: np.copy(f32))  # fmt: skip


def _small_transpose_row() -> Row:
    """contiguous() of a transposed 96-byte tensor: the per-call cost of a small copy."""
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    t = bridge.from_numpy(a).t()
    tt = torch.from_numpy(a).t() if torch is not None else None

    def check() -> None:
        assert np.array_equal(t.contiguous().numpy(), a.T)

    return Row("contiguous() of a transposed 96-byte tensor  [np.ascontiguousarray(a.T)]", t.contiguous,
               lambda: np.ascontiguousarray(a.T), tt.contiguous if tt is not None else None, target=1.0,
               target_vs="torch", check=check)  # fmt: skip
