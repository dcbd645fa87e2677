"""The matrix's vocabulary: the peers, protocols, layouts and dtypes it
crosses, the :class:`Cell` (one exchange and its verdict), the verdicts, and
which failures are bridge's own (:func:`bridge_at_fault`)."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
from collections.abc import Iterator
from typing import Any

from bridge.core import dtypes as _dtypes

__all__ = ["LAYOUTS", "DTYPES", "DEFAULT_DTYPES", "PROTOCOLS", "PEERS", "VERDICTS", "Cell",
           "available", "bridge_at_fault", "iter_cells"]  # fmt: skip

LAYOUTS = (
    "contiguous", "transposed", "stepped", "negative", "broadcast", "size1-odd", "0-d", "zero-size",
)  # fmt: skip
# Every bridge dtype can be asked for with --dtype.
DTYPES = tuple(d.name for d in _dtypes.all_dtypes())
# The default grid: one dtype of each kind the protocols treat differently.
DEFAULT_DTYPES = ("bool", "uint8", "int64", "float16", "bfloat16", "float32", "complex64")
PROTOCOLS = ("dlpack", "array-interface", "buffer", "arrow", "cuda-array-interface")
PEERS = ("bridge", "numpy", "torch", "jax", "pyarrow", "polars", "nanoarrow", "tvm_ffi",
         "pydlpack", "cupy")  # fmt: skip
# A peer's import name (by default, the peer's name).
_MODULE = {"pydlpack": "dlpack", "tvm_ffi": "tvm_ffi"}
#: What a cell can end as; :mod:`bridge.kit.matrix` says what each means.
VERDICTS = ("zero-copy", "copy", "unverified", "refused", "violation", "crash", "n/a")


@dataclasses.dataclass
class Cell:
    """One exchange: ``producer`` makes ``case`` and ``consumer`` takes it via ``protocol``."""

    producer: str
    consumer: str
    protocol: str
    dtype: str
    layout: str
    readonly: bool
    verdict: str = ""
    detail: str = ""

    @property
    def case(self) -> str:
        """The case label, e.g. ``float32/transposed/ro``."""
        return f"{self.dtype}/{self.layout}{'/ro' if self.readonly else ''}"

    def key(self) -> tuple[str, str, str, str, str, bool]:
        """A stable identity for the cell."""
        return (self.producer, self.consumer, self.protocol, self.dtype, self.layout, self.readonly)


def available(peer: str) -> bool:
    """Whether ``peer`` is importable here (cupy also needs a CUDA device)."""
    mod = _MODULE.get(peer, peer)
    if importlib.util.find_spec(mod) is None:
        return False
    if peer == "cupy":
        try:
            import cupy

            return bool(cupy.cuda.runtime.getDeviceCount())
        except Exception:  # no driver or no device
            return False
    return True


def bridge_at_fault(cell: Cell) -> bool:
    """Whether a violation or crash is bridge's own: bridge consuming anything,
    or bridge producing for bridge or for NumPy (the reference consumer).
    Another consumer crashing on, or misreading, a valid bridge export is
    that consumer's failure, reported but not bridge's."""
    if cell.verdict not in ("violation", "crash"):
        return False
    if cell.detail.startswith("the producer crashed") and cell.producer != "bridge":
        return False
    return cell.consumer == "bridge" or (cell.producer == "bridge" and cell.consumer == "numpy")


def iter_cells(cells: list[Cell], **where: Any) -> Iterator[Cell]:
    """The cells whose fields equal ``where`` (a small query helper for tests)."""
    for c in cells:
        if all(getattr(c, k) == v for k, v in where.items()):
            yield c
