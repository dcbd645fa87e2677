"""One cell of the matrix: make the case, hand it to the consumer, and judge
what came back (:func:`run_cell`).

The checks, in order: the consumer takes the object or refuses it with an
exception type the protocols allow; the values are equal bit for bit; a
read-only source does not come back writable; the result's address tells
zero-copy from copy; and bridge's DLPack/Arrow counters balance once the
consumer's object dies.
"""

from __future__ import annotations

import gc
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from bridge.kit.matrix_grid import Cell
from bridge.kit.matrix_peers import Consumer, NotMade, arrow_address, produce

__all__ = ["run_cell"]

# Exceptions a consumer may raise to refuse an exchange (BufferError, TypeError,
# ValueError, NotImplementedError and RuntimeError are the DLPack / array API /
# Arrow choices; jax raises its own runtime error).
_REFUSALS = (BufferError, TypeError, ValueError, NotImplementedError, RuntimeError)


def _producer_address(obj: Any) -> int | None:
    for probe in (
        lambda o: o.data_ptr(),
        lambda o: o.__array_interface__["data"][0],
        lambda o: o.unsafe_buffer_pointer(),
        lambda o: arrow_address(o),
    ):
        try:
            value = probe(obj)
        except Exception:
            continue
        if isinstance(value, int):
            return value
    return None


def _same(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> bool:
    if a.shape != b.shape:
        return False
    if a.dtype == object and b.dtype != object:  # e.g. polars' object columns
        try:
            a = np.asarray(a.tolist(), dtype=b.dtype).reshape(b.shape)
        except (TypeError, ValueError):
            return False
    if a.size == 0:
        return True
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    if a.dtype.itemsize != b.dtype.itemsize:
        return bool(np.array_equal(a.astype(np.float64), b.astype(np.float64)))
    return a.tobytes() == b.tobytes()


def _counters() -> tuple[int, int, int, int]:
    if "bridge" not in sys.modules:
        return (0, 0, 0, 0)
    from bridge.core.native import _C

    s = _C.stats()
    return (s["exports"] - s["export_deleters"], s["imports"] - s["import_releases"],
            s["arrow_exports"] - s["arrow_releases"], s["arrow_imports"] - s["arrow_import_releases"])  # fmt: skip


_SPEAKS: dict[str, Callable[[Any], bool]] = {
    "dlpack": lambda o: hasattr(o, "__dlpack__"),
    "arrow": lambda o: any(hasattr(o, m) for m in (
        "__arrow_c_array__", "__arrow_c_stream__", "__arrow_c_device_array__")),
    "cuda-array-interface": lambda o: hasattr(o, "__cuda_array_interface__"),
}  # fmt: skip


def run_cell(cell: Cell, consumer: Consumer, on_made: Callable[[], None] | None = None) -> Cell:
    """Run one exchange and fill in its verdict and detail (``on_made`` is
    called once the producer has made its object, before the consumer runs)."""
    try:
        obj, expected = produce(cell.producer, cell.dtype, cell.layout, cell.readonly)
    except NotMade as e:
        cell.verdict, cell.detail = "n/a", str(e)
        return cell
    except Exception as e:  # the producer library refuses to make this case
        cell.verdict = "n/a"
        cell.detail = f"{cell.producer} refused to make it: {type(e).__name__}: {str(e)[:100]}"
        return cell
    if on_made is not None:
        on_made()
    speaks = _SPEAKS.get(cell.protocol)
    if speaks is not None and not speaks(obj) and not (
        cell.protocol == "arrow" and isinstance(obj, np.ndarray)  # Arrow consumers take buffers
    ):
        cell.verdict, cell.detail = "n/a", f"{cell.producer} does not speak {cell.protocol}"
        return cell
    src_addr = _producer_address(obj)
    gc.collect(0)  # settle earlier cells' objects before counting this one's
    before = _counters()
    try:
        result = consumer.take(obj)
    except _REFUSALS as e:
        cell.verdict, cell.detail = "refused", f"{type(e).__name__}: {str(e)[:120]}"
        return cell
    except Exception as e:  # a refusal of an unexpected type (jax's runtime errors among them)
        kind = type(e).__name__
        allowed = "Jax" in kind or "Arrow" in kind or "Polars" in kind or "Compute" in kind
        cell.verdict = "refused" if allowed else "violation"
        cell.detail = f"{kind}: {str(e)[:120]}" if allowed else (
            f"unexpected exception type {kind}: {str(e)[:100]}"
        )
        return cell
    try:
        got = consumer.values(result)
    except Exception as e:  # the exchange worked; the checker cannot read this result type
        cell.verdict = "unverified"
        cell.detail = f"result not readable by the checker: {type(e).__name__}: {str(e)[:80]}"
        return cell
    got = np.asarray(got)
    if got.dtype == object and got.shape == () and expected.dtype != object:
        cell.verdict = "refused"
        cell.detail = "not an array to this consumer: it was wrapped as a Python object"
        return cell
    if got.ndim != expected.ndim and got.size == expected.size and consumer.protocol == "arrow":
        # Arrow consumers without a tensor type take N-d input as a flat array.
        cell.detail = f"taken as a {got.ndim}-d array of {got.size} values"
        expected = expected.reshape(got.shape)
    if not _same(got, expected):
        cell.verdict, cell.detail = "violation", "values differ"
        return cell
    if cell.readonly and consumer.writable(result) and consumer.peer in ("numpy", "bridge"):
        cell.verdict, cell.detail = "violation", "read-only source came back writable"
        return cell
    if cell.readonly and consumer.writable(result):
        cell.detail = f"read-only lost: {consumer.peer} has no read-only tensors"
    dst_addr = None
    try:
        dst_addr = consumer.address(result)
    except Exception:
        dst_addr = None
    empty = expected.size == 0
    if empty:
        cell.verdict = "zero-copy" if dst_addr == src_addr else "copy"
        cell.detail = cell.detail or "empty tensor: nothing to share"
    elif src_addr is None or dst_addr is None:
        cell.verdict = "unverified"
        cell.detail = cell.detail or "addresses not observable; values equal"
    elif dst_addr == src_addr:
        cell.verdict = "zero-copy"
    else:
        cell.verdict = "copy"
    del result, got  # the producer stays alive: only the consumer's references must go
    gc.collect(0)
    after = _counters()
    for _ in range(20):  # some consumers (jax) free their buffers asynchronously
        if after == before:
            break
        time.sleep(0.005)
        gc.collect()
        after = _counters()
    if after != before:
        cell.verdict = "violation"
        cell.detail = f"bridge deleters unbalanced after the consumer died: {before} -> {after}"
    return cell


