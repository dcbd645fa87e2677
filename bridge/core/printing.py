"""How a tensor prints: PyTorch's layout of values, suffixes and summaries."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from bridge.core import dtypes as _dtypes

if TYPE_CHECKING:
    from bridge.core.tensor import Tensor

__all__ = ["format_tensor"]

# Dtypes whose repr needs no dtype= suffix (PyTorch's defaults).
_DEFAULT_REPR_DTYPES = frozenset({_dtypes.float32, _dtypes.int64, _dtypes.bool, _dtypes.complex64})


def format_tensor(t: Tensor) -> str:
    """The tensor as PyTorch prints it: ``tensor([...], dtype=..., device=...)``."""
    suffix = []
    dev = t.device
    if dev.type != "cpu":
        suffix.append(f"device='{dev}'")
    if t.numel() == 0 and t.ndim != 1:
        suffix.append(f"size={t.shape}")
    if t.dtype not in _DEFAULT_REPR_DTYPES:
        suffix.append(f"dtype=bridge.{t.dtype.name}")
    if not dev.is_host_accessible:
        body = "..."
    elif t.numel() == 0:
        body = "[]"
    else:
        try:
            body = _format_values(t._values())
        except TypeError:  # a dtype NumPy cannot see without ml_dtypes: show the bits
            body = _format_values(t._np_view(bits=True))
            suffix.append("(raw bits)")
    return "tensor(" + ", ".join([body, *suffix]) + ")"


def _edge_sample(arr: np.ndarray[Any, Any], edge: int = 3) -> np.ndarray[Any, Any]:
    for axis in range(arr.ndim):
        if arr.shape[axis] > 2 * edge:
            arr = np.concatenate(
                [np.take(arr, range(edge), axis), np.take(arr, range(-edge, 0), axis)], axis
            )
    return arr


def _float_formatter(sample: np.ndarray[Any, Any]) -> Any:
    """PyTorch's float printing: integers as ``3.``, else 4 decimals, switching
    to scientific notation when magnitudes span more than 1000x or leave
    [1e-4, 1e8]."""
    finite = sample[np.isfinite(sample)]
    nonzero = np.abs(finite[finite != 0])
    lo, hi = (float(nonzero.min()), float(nonzero.max())) if nonzero.size else (1.0, 1.0)
    int_mode = bool(np.all(finite == np.round(finite)))
    sci = hi / lo > 1000.0 or hi > 1e8 or (not int_mode and lo < 1e-4)
    spec = ".4e" if sci else (".0f" if int_mode else ".4f")
    dot = "." if int_mode and not sci else ""

    def fmt(x: Any) -> str:
        return format(x, spec) + dot if np.isfinite(x) else str(x)

    return fmt


def _format_values(arr: np.ndarray[Any, Any]) -> str:
    summarize = arr.size > 1000
    sample = _edge_sample(arr) if summarize else arr
    kind = arr.dtype.kind
    if kind == "f":
        base = _float_formatter(sample.astype(np.float64))
        fmt = base
    elif kind == "c":
        re_f = _float_formatter(sample.real.astype(np.float64))
        im_f = _float_formatter(sample.imag.astype(np.float64))

        def fmt(x: Any) -> str:
            im = im_f(abs(x.imag))
            return f"{re_f(x.real)}{'-' if x.imag < 0 else '+'}{im}j"

    elif kind == "b":

        def fmt(x: Any) -> str:
            return "True" if x else "False"

    else:
        fmt = str
    # As PyTorch: nan/inf do not widen the columns.
    finite = sample[np.isfinite(sample)] if kind in "fc" else sample
    width = max((len(fmt(x)) for x in finite.flat), default=0)
    text = np.array2string(
        arr,
        max_line_width=80,
        separator=", ",
        prefix="tensor(",
        threshold=1000,
        edgeitems=3,
        formatter={"all": lambda x: fmt(x).rjust(width)},
    )
    # PyTorch marks an elided run in a row with " ..." (one space wider than NumPy).
    return text.replace(", ..., ", ",  ..., ") if summarize else text
