"""``make bench`` rows of issue 45: the calls that used to leave convert's C
fast path (a fix, an ask, a same-library call, jax as a destination), each
beside the route users write by hand for the same result.

Bars (issue 45): the read-only copy into torch at most ``torch.tensor(
a.to_numpy())``; ``readonly="share"`` at most ``torch.from_numpy(np.asarray(x))``;
a copy at most ``np.copy`` + ``torch.from_numpy``; a cast at most
``torch.from_numpy(a).to(dtype)``; ``columns=`` at most 1.05x the same call
without it; a same-library call at most 1.5x the library's own identity; numpy
-> jax at most ``jnp.asarray``, jax -> torch at most ``torch.from_dlpack``. The
reference is always in the torch column (the ratio is bridge / reference).
Operands are 1 KiB of float32 unless a row says otherwise.
"""

from __future__ import annotations

import importlib.util
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
from bench_common import Row, torch

import bridge

N = 256  # 1 KiB of float32


def _row(name: str, fn: Callable[[], Any], ref: Callable[[], Any], target: float,
         same: Callable[[Any, Any], bool] | None = None) -> Row:  # fmt: skip
    """A row: bridge's call against the hand-written ``ref`` (torch column);
    ``same`` (results -> bool) checked once."""
    name = f"one pass: {name}"

    def check() -> None:
        if same is not None:
            assert same(fn(), ref()), name

    return Row(name, fn, None, ref, target=target, target_vs="torch", check=check)


def _values(x: Any) -> Any:
    return np.asarray(x.numpy() if hasattr(x, "numpy") and not isinstance(x, np.ndarray) else x)


def _equal(x: Any, y: Any) -> bool:
    return bool(np.array_equal(_values(x), _values(y)))


def fix_rows() -> list[Row]:
    """The rows issue 45 measures, for the peers installed. The warnings both
    routes give (bridge's CopyWarning, torch's of a read-only array) are
    ignored by a filter set here, once: each call still pays the filter's
    lookup, as a user's does, and no row pays a ``catch_warnings`` of its own."""
    if torch is None:
        return []
    warnings.filterwarnings("ignore", category=bridge.CopyWarning)
    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
    rows: list[Row] = []
    a = np.arange(N, dtype=np.float32)
    a64 = np.arange(N, dtype=np.float64)
    rows.append(_row("convert(ndarray, torch, copy=True) | torch.from_numpy(np.copy(a))",
                     lambda: bridge.convert(a, torch, copy=True), lambda: torch.from_numpy(np.copy(a)), 1.0, _equal))
    rows.append(_row("convert(f64 ndarray, torch, dtype=float32) | torch.from_numpy(a).to(torch.float32)",
                     lambda: bridge.convert(a64, torch, dtype=torch.float32),
                     lambda: torch.from_numpy(a64).to(torch.float32), 1.0, _equal))  # fmt: skip
    ro = a.copy()
    ro.flags.writeable = False
    rows.append(_row("convert(read-only ndarray, torch) | torch.tensor(a)",
                     lambda: bridge.convert(ro, torch), lambda: torch.tensor(ro), 1.0, _equal))
    flipped = a[::-1]
    rows.append(_row("convert(a[::-1], torch) | torch.from_numpy(a[::-1].copy())",
                     lambda: bridge.convert(flipped, torch), lambda: torch.from_numpy(flipped.copy()), 1.0, _equal))
    eight = {f"k{i}": a + i for i in range(7)}
    eight["ro"] = ro
    rows.append(_row("convert(dict of 8, one read-only, torch) | {k: from_numpy(v) or tensor(v)}",
                     lambda: bridge.convert(eight, torch),
                     lambda: {k: torch.from_numpy(v) if v.flags.writeable else torch.tensor(v) for k, v in eight.items()},
                     1.0, lambda x, y: all(_equal(x[k], y[k]) for k in eight)))  # fmt: skip
    rows.append(_row("convert(ndarray, numpy) | np.asarray(a)  [same library]",
                     lambda: bridge.convert(a, np), lambda: np.asarray(a), 1.5, _equal))
    t = torch.arange(N, dtype=torch.float32)
    rows.append(_row("convert(torch, torch) | torch.as_tensor(t)  [same library]",
                     lambda: bridge.convert(t, torch), lambda: torch.as_tensor(t), 1.5, _equal))
    if importlib.util.find_spec("pyarrow") is not None:
        import pyarrow as pa

        pa_arr = pa.array(a)
        rows.append(_row("convert(pa.Array, torch) | torch.tensor(a.to_numpy())  [read-only copy]",
                         lambda: bridge.convert(pa_arr, torch), lambda: torch.tensor(pa_arr.to_numpy()), 1.0,
                         _equal))  # fmt: skip
        rows.append(_row("convert(pa.Array, torch, readonly='share') | torch.from_numpy(a.to_numpy())",
                         lambda: bridge.convert(pa_arr, torch, readonly="share"),
                         lambda: torch.from_numpy(pa_arr.to_numpy()), 1.0, _equal))  # fmt: skip
        rows.append(_row("convert(pa.Array, pyarrow) | pa.array(a)  [same library]",
                         lambda: bridge.convert(pa_arr, pa), lambda: pa.array(pa_arr), 1.5, _equal))
        batch = pa.record_batch({f"c{i}": pa.array(np.arange(N, dtype=np.float32) + i) for i in range(8)})
        chosen = [f"c{i}" for i in range(8)]
        rows.append(_row("convert(batch, numpy, columns=all 8) | convert(batch, numpy)",
                         lambda: bridge.convert(batch, np, columns=chosen), lambda: bridge.convert(batch, np), 1.05))
    if importlib.util.find_spec("polars") is not None:
        import polars as pl

        s = pl.Series("x", a)
        rows.append(_row("convert(polars.Series, torch) | torch.tensor(s.to_numpy())  [read-only copy]",
                         lambda: bridge.convert(s, torch), lambda: torch.tensor(s.to_numpy()), 1.0, _equal))
    if importlib.util.find_spec("jax") is not None:
        import jax
        import jax.numpy as jnp

        x = jnp.arange(N, dtype=jnp.float32)
        x.block_until_ready()
        rows.append(_row("convert(jax, torch) | torch.tensor(np.asarray(x))  [read-only copy]",
                         lambda: bridge.convert(x, torch), lambda: torch.tensor(np.asarray(x)), 1.0, _equal))
        rows.append(_row("convert(jax, torch, readonly='share') | torch.from_numpy(np.asarray(x))",
                         lambda: bridge.convert(x, torch, readonly="share"),
                         lambda: torch.from_numpy(np.asarray(x)), 1.0, _equal))  # fmt: skip
        rows.append(_row("convert(jax, torch, readonly='share') | torch.from_dlpack(x)",
                         lambda: bridge.convert(x, torch, readonly="share"), lambda: torch.from_dlpack(x), 1.0,
                         _equal))  # fmt: skip
        rows.append(_row("convert(ndarray, jax) | jnp.asarray(a)",
                         lambda: bridge.convert(a, jax), lambda: jnp.asarray(a), 1.0, _equal))
        rows.append(_row("convert(jax, jax) | jnp.asarray(x)  [same library]",
                         lambda: bridge.convert(x, jax), lambda: jnp.asarray(x), 1.5, _equal))
    if importlib.util.find_spec("mlx") is not None:
        import mlx.core as mx

        m = mx.array(a)
        rows.append(_row("convert(mlx, torch, readonly='share') | torch.from_numpy(np.asarray(m))",
                         lambda: bridge.convert(m, torch, readonly="share"),
                         lambda: torch.from_numpy(np.asarray(m)), 1.0, _equal))  # fmt: skip
    return rows
