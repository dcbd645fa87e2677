"""The matrix's vocabulary: the peers, protocols, layouts and dtypes it
crosses, the :class:`Cell` (one exchange and its verdict), the verdicts, and
which failures are bridge's own (:func:`bridge_at_fault`)."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from bridge.core import dtypes as _dtypes
from bridge.kit import matrix_holds as _holds
from bridge.kit import matrix_layouts as _layouts

__all__ = ["LAYOUTS", "DTYPES", "DEFAULT_DTYPES", "PROTOCOLS", "TABLE_PRODUCERS", "PEERS", "HEAVY_PEERS", "VERDICTS",
           "COPY_REASONS", "ALIGNMENT", "Cell", "available", "bridge_at_fault", "culprits", "copy_reasons",
           "iter_cells"]  # fmt: skip

# Each a view of a 4x12 base (bridge.kit.matrix_frameworks.apply_layout), but
# "component-aligned": 3x5 contiguous elements whose first sits half an element
# past an element boundary (complex at its component's alignment), which no
# view of an aligned base can be; made over memory placed so, and n/a for the
# one-byte dtypes, where every address is element-aligned. The layouts of
# bridge.kit.matrix_layouts (issue 35): "byte-misaligned" (3x5 at an odd
# address), "big-endian" (the base in '>' byte order), "chunked" (the 48
# values in two Arrow chunks), and DLPack main's codes, made by the
# "handmade" producer alone: "device-tpu", "device-tpu-host",
# "device-ascend", "code-bcomplex".
LAYOUTS = (
    "contiguous", "transposed", "stepped", "negative", "broadcast", "size1-odd", "component-aligned",
    _layouts.BYTE_MISALIGNED, _layouts.BIG_ENDIAN, _layouts.CHUNKED, "0-d", "zero-size", *_layouts.HANDMADE_LAYOUTS,
)  # fmt: skip
# Every bridge dtype can be asked for with --dtype.
DTYPES = tuple(d.name for d in _dtypes.all_dtypes())
# The default grid: one dtype of each kind the protocols treat differently;
# complex128 because torch's and paddle's kernels fault on it aligned to its
# component (8 bytes), where complex64 at 4 bytes computes.
DEFAULT_DTYPES = ("bool", "uint8", "int64", "float16", "bfloat16", "float32", "complex64", "complex128")
# dlpack-c-api: the DLPack C exchange API both ways (the producer type's
# managed_tensor_from_py_object_no_sync, the consumer's to_py_object or its
# from_dlpack reading the API); dlpack-copy and dlpack-device: from_dlpack with
# copy=True and with device="cpu" (the producer's __dlpack__ asked for copy /
# dl_device); jax-array: jnp.asarray of a producer with __jax_array__;
# arrow-device-stream: the consumer reads the producer's
# __arrow_c_device_stream__; bridge-convert: bridge.convert(x, consumer), into
# every destination of bridge.crossing.capabilities (the others are the
# "direct" ones); bridge-convert-batch: the same tensor inside a batch (a dict
# with a str and the tensor again in a list); bridge-convert-table: a table of
# two columns from each producer that makes tables (pyarrow, polars, pandas).
PROTOCOLS = ("dlpack", "dlpack-c-api", "dlpack-copy", "dlpack-device", "array-interface", "buffer",
             "arrow", "arrow-device-stream", "cuda-array-interface", "jax-array",
             *_holds.CONVERTS)  # fmt: skip
#: The producers that make tables (the ``bridge-convert-table`` cells' rows).
TABLE_PRODUCERS = ("pyarrow", "polars", "pandas")
PEERS = ("bridge", "numpy", "torch", "jax", "pyarrow", "polars", "nanoarrow", "tvm_ffi",
         "pydlpack", "paddle", "mlx", "onnxruntime", "array_api_strict", "pandas", "xarray",
         "arro3", "narwhals", "datafusion", "duckdb", "cuda_core",
         "tensorflow", "warp", "max", "cupy", _layouts.HANDMADE)  # fmt: skip
#: Peers of the ``heavy`` extra (not in make test's default install); the
#: matrix uses them when they are installed. max: Modular MAX's driver
#: (``max.driver.Buffer``), 740 MB installed.
HEAVY_PEERS = ("tensorflow", "warp", "max")
# A peer's import name (by default, the peer's name).
# handmade: the kit's own producer of hand-made capsules (DLPack main's codes).
_MODULE = {"pydlpack": "dlpack", "tvm_ffi": "tvm_ffi", "mlx": "mlx.core", "arro3": "arro3.core",
           "cuda_core": "cuda.core", "max": "max.driver", _layouts.HANDMADE: "bridge.kit.capsules"}  # fmt: skip
#: What a cell can end as; :mod:`bridge.kit.matrix` says what each means.
#: ``empty``: a zero-size tensor crossed intact; it has no bytes to share,
#: so it is neither a copy nor zero-copy.
VERDICTS = ("zero-copy", "copy", "empty", "unverified", "refused", "violation", "crash", "n/a")
#: Why a ``copy`` cell copied (empty when nothing tells): as
#: :func:`copy_reasons` tells it from the consumer's record in the destination
#: table or its other cells; for ``bridge-convert``, the kind of
#: :class:`bridge.CopyWarning` (``destination``: the library copies every
#: import; ``device``: the memory was on a device it does not hold; ``unpack``:
#: Arrow's bit-packed bools unpacked to a byte each; ``concatenate``: the
#: chunks of a chunked source joined into one array; ``byte-order``: a
#: non-native source swapped to native byte order).
COPY_REASONS = ("requested", "read-only", "alignment", "dtype", "layout", "destination", "device", "unpack",
                "concatenate", "byte-order")  # fmt: skip
#: The alignment, in bytes, a source's first element is checked for: the
#: largest the destination table asks for (jax and tensorflow copy or refuse
#: memory not aligned so).
ALIGNMENT = _holds.ALIGNMENT


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
    #: For a violation, the name of the rule it broke (a key of
    #: :data:`bridge.kit.rules.RULES`); empty otherwise.
    rule: str = ""
    #: How the exchange went, where there is more than one way: ``"exchange-api"``
    #: (the DLPack C exchange API, no capsule), ``"__dlpack__"`` (a capsule), or
    #: empty where the protocol has one path.
    path: str = ""
    #: For a ``copy``, why (one of :data:`COPY_REASONS`, filled in by
    #: :func:`copy_reasons` once the grid has run); empty otherwise.
    reason: str = ""
    #: Whether the producer's first element is :data:`ALIGNMENT`-byte
    #: aligned; None where its address is unknown.
    aligned: bool | None = None
    #: The largest power of two, up to :data:`ALIGNMENT`, that the producer's
    #: first element's address is a multiple of (8 for complex128 in the
    #: ``component-aligned`` layout); None where its address is unknown.
    alignment: int | None = None

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
    try:
        if importlib.util.find_spec(mod) is None:
            return False
    except ModuleNotFoundError:  # a submodule's parent is missing (max.driver without max)
        return False
    if peer == "cupy":
        try:
            import cupy

            return bool(cupy.cuda.runtime.getDeviceCount())
        except Exception:  # no driver or no device
            return False
    return True


# A cell's detail that says the producer failed making the case, whatever the
# consumer: a crash, or values its own library reads wrong
# (:class:`bridge.kit.matrix_layouts.MadeWrong`).
_PRODUCERS_OWN = ("the producer crashed", "the producer misread")


def bridge_at_fault(cell: Cell) -> bool:
    """Whether a violation or crash is bridge's own: bridge consuming anything,
    anything crossing through ``bridge.convert`` (the ``bridge-convert``
    protocol: convert chose what the destination was handed), or bridge
    producing for bridge or for NumPy (the reference consumer). Another
    consumer crashing on, or misreading, a valid bridge export is that
    consumer's failure, reported but not bridge's; so is another producer
    crashing on, or misreading, the case as it makes it."""
    if cell.verdict not in ("violation", "crash"):
        return False
    if cell.detail.startswith(_PRODUCERS_OWN) and cell.producer != "bridge":
        return False
    if cell.rule == "exceptions":
        # The exception's type is the choice of whoever raised it: the
        # producer, when the consumer passed its exception on.
        if "[raised by" in cell.detail:
            return cell.producer == "bridge"
        return cell.consumer == "bridge" or cell.protocol in _holds.CONVERTS
    if cell.protocol in _holds.CONVERTS:
        return True
    return cell.consumer == "bridge" or (cell.producer == "bridge" and cell.consumer == "numpy")


# Rules whose break may be the producer's export or the consumer's reading:
# the reference consumers (NumPy, bridge) decide (see :func:`culprits`).
_EITHER_SIDE = ("values", "strides", "shape", "dtype", "read-only", "alignment", "byte-order", "chunks",
                "unknown-code")  # fmt: skip


def culprits(cells: list[Cell]) -> list[str]:
    """For each cell, the library held responsible for its crash or violation
    ("" for the other verdicts):

    - a crash making the case, or importing a library, is that library's, as
      is a case the producer's library misread making it; any other crash is
      the consumer's;
    - through ``bridge-convert``, what would be the consumer's is bridge's
      (``convert`` chose what the consumer was handed);
    - a refusal of the wrong type is the consumer's, unless it passed on the
      producer's exception (``[raised by ...]``); a keyword ``__dlpack__``
      does not take is the producer's;
    - a write reaching read-only memory, copy=True sharing memory and
      unbalanced deleters are the consumer's;
    - values, strides, shape, dtype and read-only breaks are the producer's
      when the reference consumers (NumPy and bridge) break the same rule on
      the same case from it, else the consumer's.
    """
    reference = {(c.producer, c.dtype, c.layout, c.readonly, c.rule) for c in cells
                 if c.verdict == "violation" and c.consumer in ("numpy", "bridge") and c.rule in _EITHER_SIDE}  # fmt: skip
    return [_culprit(c, reference) for c in cells]


def _culprit(c: Cell, reference: set[tuple[str, str, str, bool, str]]) -> str:
    who = _culprit_direct(c, reference)
    if c.detail.startswith(_PRODUCERS_OWN):  # (the producer's, even where it is the consumer too)
        return who
    return "bridge" if who == c.consumer and c.protocol in _holds.CONVERTS else who


def _culprit_direct(c: Cell, reference: set[tuple[str, str, str, bool, str]]) -> str:
    if c.verdict not in ("violation", "crash"):
        return ""
    if c.detail.startswith(_PRODUCERS_OWN):
        return c.producer
    if c.verdict == "crash":
        if c.detail.startswith("importing "):
            return c.detail.split()[1]
        return c.consumer
    if c.rule == "exceptions":
        return c.producer if "[raised by" in c.detail else c.consumer
    if c.rule in ("dl_device", "copy") and "does not take" in c.detail:
        return c.producer
    if c.rule in _EITHER_SIDE and (c.producer, c.dtype, c.layout, c.readonly, c.rule) in reference:
        return c.producer
    return c.consumer


def copy_reasons(cells: list[Cell]) -> None:
    """Fill in the ``reason`` of each ``copy`` cell that has none (a
    ``bridge-convert`` cell has its :class:`bridge.CopyWarning`'s kind).

    A destination of :func:`bridge.convert` taking a case through its own
    import (the ``dlpack`` protocol) copies for the reason its record in the
    destination table names (:func:`bridge.kit.matrix_holds.copy_reason`:
    ``destination``, ``alignment``, ``layout``, ``dtype``;
    ``tests/crossing/test_capabilities.py`` holds the records to the
    matrix). Otherwise the reason is told from the consumer's behaviour: the
    cells of the same producer, consumer and protocol that were zero-copy.
    The first of these that holds names the reason; none holds, none is
    named:

    - ``requested``: the protocol asks for a copy (``dlpack-copy``);
    - ``concatenate``, ``byte-order``: a ``chunked`` source (its chunks
      joined) or a ``big-endian`` one (swapped): no array of one chunk, or
      of native byte order, is that source's memory;
    - ``read-only``: the same dtype and layout, writable, was shared;
    - ``alignment``: the source was not :data:`ALIGNMENT`-byte aligned, an
      aligned source was shared, and no unaligned one was (the consumer's
      shared sources are exactly its aligned ones: jax); or its first element
      was not aligned to its own size (:attr:`Cell.alignment`: the
      ``component-aligned`` layout), a source of its dtype aligned to its
      size was shared, and no source so misaligned was;
    - ``dtype``: another dtype of the same layout was shared, and no case of
      this dtype was;
    - ``layout``: a strided (not contiguous) source, whose dtype was shared
      when contiguous (and alignment cannot be the cause: the source was
      aligned, or an unaligned source was shared).
    """
    shared: dict[tuple[str, str, str], list[Cell]] = defaultdict(list)
    for c in cells:
        if c.verdict == "zero-copy":
            shared[(c.producer, c.consumer, c.protocol)].append(c)
    for c in cells:
        if c.verdict == "copy" and not c.reason:
            c.reason = _why_copied(c, shared.get((c.producer, c.consumer, c.protocol), []))


def _why_copied(c: Cell, zero: list[Cell]) -> str:
    if c.protocol == "dlpack-copy":
        return "requested"
    if c.layout in _layouts.COPY_REASON:
        return _layouts.COPY_REASON[c.layout]
    h = _holds.record(c.consumer)
    if h is not None and h.capsule != "none" and c.protocol == _holds.own_protocol(h):
        said = _holds.copy_reason(h, c.dtype, c.layout, c.readonly, c.aligned, c.alignment)
        if said:
            return said
    same_case = [z for z in zero if z.layout == c.layout and z.readonly == c.readonly]
    unaligned_shared = any(z.aligned is False for z in zero)
    if c.readonly and any(z.dtype == c.dtype and z.layout == c.layout and not z.readonly for z in zero):
        return "read-only"
    if c.aligned is False and not unaligned_shared and any(z.aligned for z in zero):
        return "alignment"
    if (_element_misaligned(c) and not any(_element_misaligned(z) for z in zero)
            and any(z.dtype == c.dtype and _element_misaligned(z) is False for z in zero)):  # fmt: skip
        return "alignment"
    if any(z.dtype != c.dtype for z in same_case) and not any(z.dtype == c.dtype for z in zero):
        return "dtype"
    alignment_ruled_out = c.aligned is not False or unaligned_shared
    contiguous_shared = any(z.layout == "contiguous" and z.dtype == c.dtype and z.readonly == c.readonly
                            for z in zero)  # fmt: skip
    if c.layout != "contiguous" and contiguous_shared and alignment_ruled_out:
        return "layout"
    return ""


def _element_misaligned(c: Cell) -> bool | None:
    """Whether the cell's source is not aligned to its own element's size
    (None: its address is unknown)."""
    if c.alignment is None:
        return None
    return c.alignment < _dtypes.get_dtype(c.dtype).itemsize


def iter_cells(cells: list[Cell], **where: Any) -> Iterator[Cell]:
    """The cells whose fields equal ``where`` (a small query helper for tests)."""
    for c in cells:
        if all(getattr(c, k) == v for k, v in where.items()):
            yield c
