"""The batch and table rows of ``make bench`` (issue 34): ``bridge.convert`` of
a dict of arrays, a pyarrow Table and a polars DataFrame, side by side with the
route a user takes without bridge. Imported by tests/bench.py.

A row's reference sits in its destination's column: the numpy column for rows
into NumPy, the torch column for the others (jax's own route included). Every
check also fails on a CopyWarning: none of these calls copies anything it was
not asked to (a stack of separate columns is one copy, asked, never warned)."""

from __future__ import annotations

import importlib.util
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
from bench_common import Row, _threads, torch

import bridge

LEAVES, SMALL, COLUMNS, ROWS = 8, (4, 8), 8, 100_000


def _row(name: str, fn: Callable[[], Any], ref: Callable[[], Any], col: str, target: float,
         check: Callable[[], None]) -> Row:  # fmt: skip
    """A Row with the reference ``ref`` in column ``col`` ("numpy" or "torch"),
    the target taken against it."""
    return Row(name, fn, ref if col == "numpy" else None, ref if col == "torch" else None,
               target=target, target_vs=col, check=check)  # fmt: skip


def _quiet(make: Callable[[], Any]) -> Any:
    """make() with any CopyWarning raised as an error: an unasked copy fails the check."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", bridge.CopyWarning)
        return make()


def _shares(make: Callable[[], Any], src: dict[str, Any], ptr_in: Callable[[Any], int],
            ptr_out: Callable[[Any], int]) -> Callable[[], None]:  # fmt: skip
    """A check that every leaf of the batch ``make()`` shares its input's memory."""

    def check() -> None:
        out = _quiet(make)
        assert list(out) == list(src), "the batch lost or reordered keys"
        assert all(ptr_out(out[k]) == ptr_in(v) for k, v in src.items()), "convert copied a leaf"

    return check


def _same(make: Callable[[], Any], want: Callable[[], Any]) -> Callable[[], None]:
    """A check that ``make()`` (a dict of columns or one 2-D array) holds the
    reference's values, in the reference's shape (layouts may differ)."""

    def check() -> None:
        got, ref = _quiet(make), want()
        if isinstance(ref, dict):
            assert list(got) == list(ref), "the table lost or reordered columns"
            pairs = [(got[k], ref[k]) for k in ref]
        else:
            pairs = [(got, ref)]
        for g, r in pairs:
            assert tuple(g.shape) == tuple(r.shape) and np.array_equal(np.asarray(g), np.asarray(r))

    return check


def batch_rows() -> list[Row]:
    """A batch: one dict of 8 small (4, 8) float32 arrays converted in one call,
    ndarrays into torch and torch tensors into NumPy. Issue 34's bars: at most
    0.4x the dict comprehension of the destination's ``from_dlpack`` a user
    writes instead (the C loop of the fast path takes the whole dict), and at
    most 8x one ``convert`` of one of its arrays (a batch costs no more than its
    leaves one by one). Each result is checked to share every input's memory."""
    if torch is None:
        return []
    arrays = {f"k{i}": np.arange(32, dtype=np.float32).reshape(SMALL) + i for i in range(LEAVES)}
    tensors = {f"k{i}": torch.arange(32, dtype=torch.float32).reshape(SMALL) + i for i in range(LEAVES)}
    rows = []
    Case = tuple[str, dict[str, Any], Any, Callable[[Any], Any], str, str, Callable[[Any], int],
                 Callable[[Any], int]]  # fmt: skip
    cases: list[Case] = [
        ("8 ndarrays", arrays, torch, torch.from_dlpack, "torch", "torch.from_dlpack",
         lambda a: int(a.ctypes.data), lambda t: int(t.data_ptr())),
        ("8 torch tensors", tensors, np, np.from_dlpack, "numpy", "np.from_dlpack",
         lambda t: int(t.data_ptr()), lambda a: int(a.ctypes.data)),
    ]
    for what, d, to, imp, col, how, ptr_in, ptr_out in cases:
        name = f"convert(batch: dict of {what} (4,8) f32, {col})"

        def fn(d: dict[str, Any] = d, to: Any = to) -> Any:
            return bridge.convert(d, to)

        def loop(d: dict[str, Any] = d, imp: Callable[[Any], Any] = imp) -> Any:
            return {k: imp(v) for k, v in d.items()}

        def one(d: dict[str, Any] = d, to: Any = to) -> Any:
            return bridge.convert(d["k0"], to)

        check = _shares(fn, d, ptr_in, ptr_out)
        rows.append(_row(f"{name} | {{k: {how}(v)}} loop", fn, loop, col, 0.40, check))
        rows.append(_row(f"{name} | one convert(d['k0'], {col})  [<= 8x]", fn, one, col, 8.0, check))
    return rows


def _columns(dtype: type) -> dict[str, np.ndarray[Any, Any]]:
    """8 columns of 100,000 values over one buffer at irregular gaps (j*j
    elements), so that no two steps between them are equal: stack=True then
    copies once, as for columns read into separate memory. (Columns that an
    allocator happens to place one stride apart, as 8 fresh 800 KB ndarrays
    from glibc's malloc often are, are stacked as a read-only view instead,
    which torch cannot take without a copy.)"""
    base: np.ndarray[Any, Any] = np.random.default_rng(34).random(COLUMNS * ROWS + COLUMNS * COLUMNS).astype(dtype)
    return {f"c{j}": base[j * ROWS + j * j:(j + 1) * ROWS + j * j] for j in range(COLUMNS)}


def table_rows() -> list[Row]:
    """A pyarrow Table (8 float64 columns x 100,000 rows) as a dict of columns
    and, with stack=True, as one 2-D array, beside the pyarrow/NumPy/pandas
    routes to the same result. Bar (ours: issue 34 names none for tables):
    never slower than the route beside it, 1.0x. Into NumPy every column is a
    zero-copy view; into torch, readonly="share" lends Arrow's read-only memory
    as torch.from_numpy of to_numpy() does (its warning silenced in the
    reference); stack=True copies once, straight into the result, where the
    NumPy route stacks the views and pandas consolidates a block first."""
    if torch is None or importlib.util.find_spec("pyarrow") is None:
        return []
    import pyarrow as pa

    tbl = pa.table(_columns(np.float64))
    what = "table: pa.Table 8 f64 cols x 100k"

    def torch_cols() -> dict[str, Any]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # torch: the array is not writable
            return {n: torch.from_numpy(tbl.column(n).to_numpy()) for n in tbl.column_names}

    def column_stack() -> Any:
        return torch.from_numpy(np.column_stack([tbl.column(n).to_numpy() for n in tbl.column_names]))

    def to_np() -> dict[str, Any]:
        return {n: tbl.column(n).to_numpy() for n in tbl.column_names}

    def conv_np() -> Any:
        return bridge.convert(tbl, np)

    def conv_share() -> Any:
        return bridge.convert(tbl, torch, readonly="share")

    def conv_stack() -> Any:
        return bridge.convert(tbl, torch, stack=True)

    rows = [
        _row(f"convert({what}, numpy) | {{n: column(n).to_numpy()}}", conv_np, to_np, "numpy", 1.0,
             _same(conv_np, to_np)),
        _row(f"convert({what}, torch, readonly='share') | {{n: torch.from_numpy(col.to_numpy())}}",
             conv_share, torch_cols, "torch", 1.0, _same(conv_share, torch_cols)),
        _row(f"convert({what}, torch, stack=True) | from_numpy(np.column_stack(cols))", conv_stack,
             column_stack, "torch", 1.0, _same(conv_stack, column_stack)),
    ]  # fmt: skip
    def hf_style() -> dict[str, Any]:  # HF datasets' torch formatting: each column through NumPy, then a copy
        return {n: torch.tensor(tbl.column(n).to_numpy()) for n in tbl.column_names}

    def conv_copy() -> Any:  # the default: Arrow's read-only memory copied into writable tensors, as torch.tensor does
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", bridge.CopyWarning)
            return bridge.convert(tbl, torch)

    for n, each in ((1, "1 thread"), (0, "a thread per CPU")):  # torch's copies and bridge's alike
        rows.append(_row(f"convert({what}, torch) | HF-datasets-style {{n: torch.tensor(col.to_numpy())}}  "
                         f"[{each} each]", _threads(n, conv_copy), _threads(n, hf_style), "torch", 1.0,
                         _same(conv_copy, hf_style)))  # fmt: skip
    if importlib.util.find_spec("pandas") is not None:
        def via_pandas() -> Any:
            return torch.from_numpy(tbl.to_pandas().to_numpy())

        rows.append(_row(f"convert({what}, torch, stack=True) | from_numpy(to_pandas().to_numpy())",
                         conv_stack, via_pandas, "torch", 1.0, _same(conv_stack, via_pandas)))  # fmt: skip
    return rows


def polars_rows() -> list[Row]:
    """A polars DataFrame (8 columns x 100,000 rows) beside polars' own exports:
    stack=True against ``df.to_torch()`` (one 2-D tensor), readonly="share"
    against ``df.to_torch("dict")``, and stack=True into jax against
    ``df.to_jax()``. Bar (ours, as for tables): 1.0x polars' own route. The jax
    rows use float32 columns: jax holds float64 only with jax_enable_x64 (bridge
    refuses float64 there; ``to_jax`` narrows it to float32 on the way)."""
    if torch is None or importlib.util.find_spec("polars") is None:
        return []
    import polars as pl

    df = pl.DataFrame(_columns(np.float64))
    what = "polars: DataFrame 8 f64 cols x 100k"
    rows = []
    if hasattr(pl.DataFrame, "to_torch"):
        def conv_stack() -> Any:
            return bridge.convert(df, torch, stack=True)

        def conv_share() -> Any:
            return bridge.convert(df, torch, readonly="share")

        def own_dict() -> Any:
            return df.to_torch("dict")

        def conv_copy() -> Any:  # the default: each read-only column copied into writable memory, as to_torch does
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", bridge.CopyWarning)
                return bridge.convert(df, torch)

        rows += [
            _row(f"convert({what}, torch, stack=True) | df.to_torch()", conv_stack, df.to_torch, "torch",
                 1.0, _same(conv_stack, df.to_torch)),
            _row(f"convert({what}, torch, readonly='share') | df.to_torch('dict')", conv_share, own_dict,
                 "torch", 1.0, _same(conv_share, own_dict)),
        ]  # fmt: skip
        for n, each in ((1, "1 thread"), (0, "a thread per CPU")):
            rows.append(_row(f"convert({what}, torch) | df.to_torch('dict')  [{each} each]", _threads(n, conv_copy),
                             _threads(n, own_dict), "torch", 1.0, _same(conv_copy, own_dict)))  # fmt: skip
    if hasattr(pl.DataFrame, "to_jax") and importlib.util.find_spec("jax") is not None:
        df32 = pl.DataFrame(_columns(np.float32))

        def conv_jax() -> Any:  # jax may copy asynchronously: both routes wait for theirs
            out: Any = bridge.convert(df32, "jax", stack=True)
            return out.block_until_ready()

        def own_jax() -> Any:
            return df32.to_jax().block_until_ready()

        rows.append(_row("convert(polars: DataFrame 8 f32 cols x 100k, 'jax', stack=True) | df.to_jax()",
                         conv_jax, own_jax, "torch", 1.0, _same(conv_jax, own_jax)))  # fmt: skip
    return rows
