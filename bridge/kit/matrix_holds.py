"""The destination table, as the matrix reads it.

What each library's own import can hold is written once, in
:mod:`bridge.crossing.capabilities` (one :class:`~bridge.crossing.capabilities.Holds`
record per destination of :func:`bridge.convert`). The matrix reads the same
records instead of restating them:

- :func:`problems` says which of a record's fields a matrix case breaks (the
  case's strides, dtype, alignment, element alignment, byte offset, read-only
  memory), in the fields' own names;
- :func:`copy_reason` names why a destination's own import copied a case,
  by its record (:func:`bridge.kit.matrix_grid.copy_reasons` asks it first);
- :func:`contradictions` holds each record to the cells of its library's own
  import (the ``dlpack`` protocol) and lists every cell whose verdict the
  record does not predict: a library that crashed, broke a rule or refused
  where its record says it holds the case, or shared memory where its record
  says it cannot (``tests/crossing/test_capabilities.py`` fails on any);
- :data:`ALIGNMENT` is the largest alignment a record asks for.

The records are read as their libraries are configured in the matrix's
child processes (:func:`record`: jax holds the 64-bit dtypes only with
``jax_enable_x64``), without importing any peer library here.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

import numpy as np

from bridge.core.dtypes import get_dtype
from bridge.core.strides import is_contiguous, is_non_overlapping_and_dense, prod
from bridge.crossing.capabilities import DESTINATIONS, WIDE, Holds
from bridge.kit.matrix_frameworks import apply_layout
from bridge.kit.matrix_layouts import UNRECORDED

if TYPE_CHECKING:  # (matrix_grid reads this module: the cells' type is imported for the checker only)
    from bridge.kit.matrix_grid import Cell

__all__ = ["CONVERT", "CONVERT_BATCH", "CONVERT_TABLE", "CONVERTS", "ALIGNMENT", "LAYOUT_FIELDS", "record", "own_protocol", "Geometry", "geometry", "problems",
           "copy_reason", "Contradiction", "contradictions"]  # fmt: skip

#: The protocol of the matrix that crosses through :func:`bridge.convert`.
CONVERT = "bridge-convert"
#: The protocol that crosses the case's tensor inside a batch
#: (``bridge.convert({"x": x, "label": "cat", "again": [x]}, peer)``): the
#: leaf judged as a ``bridge-convert`` cell, the batch by the ``batch`` rule.
CONVERT_BATCH = "bridge-convert-batch"
#: The protocol that crosses a table (two columns of the case's dtype) of the
#: producers that make tables: ``bridge.convert(table, peer)``, judged by the
#: ``table`` rule and, on its first column, as a ``bridge-convert`` cell.
CONVERT_TABLE = "bridge-convert-table"
#: Every protocol that crosses through :func:`bridge.convert` (whatever
#: convert hands the destination is bridge's choice).
CONVERTS = (CONVERT, CONVERT_BATCH, CONVERT_TABLE)
#: The largest alignment, in bytes, a destination asks its memory to have
#: (jax and tensorflow: 64): what the matrix checks each source's first
#: element for (:attr:`bridge.kit.matrix_grid.Cell.aligned`).
ALIGNMENT = max(h.alignment for h in DESTINATIONS.values())
#: The fields of a record that say which strides it holds.
LAYOUT_FIELDS = ("negative_strides", "zero_strides", "strides")


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def record(peer: str, table: Mapping[str, Holds] = DESTINATIONS) -> Holds | None:
    """The record of matrix peer ``peer`` (None when it is no destination of
    :func:`bridge.convert`), as its library is configured: jax without
    ``jax_enable_x64`` holds no 64-bit dtype (it narrows int64 to int32). The
    setting is read from jax when jax is imported here, else from the
    environment the matrix's children inherit (``JAX_ENABLE_X64``).
    ``table``: the records to read (the destination table by default)."""
    h = table.get(peer)
    if h is None or h.name != "jax":
        return h
    jax = sys.modules.get("jax")
    x64 = bool(jax.config.jax_enable_x64) if jax is not None else _truthy(os.environ.get("JAX_ENABLE_X64"))
    return h if x64 else dataclasses.replace(h, dtypes=h.dtypes - WIDE)


def own_protocol(h: Holds) -> str:
    """The matrix protocol of ``h``'s own import (its record's ``importer``):
    ``dlpack`` for the libraries that take DLPack, ``arrow`` for pyarrow and
    polars (the matrix's ``pa.array`` and ``pl.Series``)."""
    return "arrow" if h.capsule == "none" else "dlpack"


@dataclasses.dataclass(frozen=True)
class Geometry:
    """A matrix layout's shape and strides (in elements), as every producer
    makes it (:func:`bridge.kit.matrix_frameworks.apply_layout`)."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]


def geometry(layout: str) -> Geometry:
    """The shape and strides of matrix ``layout`` (a view of the 4x12 base)."""
    view = apply_layout(np.zeros((4, 12), np.uint8), layout, np)  # one-byte items: strides in elements
    return Geometry(tuple(view.shape), tuple(view.strides))


def problems(h: Holds, dtype: str, layout: str, readonly: bool = False, *, aligned: bool | None = None,
             byte_offset: bool = False, alignment: int | None = None) -> tuple[str, ...]:  # fmt: skip
    """The fields of record ``h`` that a case breaks: what ``h``'s own import
    cannot hold as it is. Empty: the record says it holds the case.

    ``dtypes`` (the dtype is not one it keeps: the ml_dtypes views are
    :func:`bridge.convert`'s fix, not the import's), ``zero_d``, ``max_ndim``,
    ``negative_strides``, ``zero_strides`` (on a dim of more than one
    element), ``strides`` (not compact, or not row-major, as the record asks;
    a zero-size case has no bytes, so no strides to hold), ``alignment``
    (``aligned`` is False: the source's first element is not
    :data:`ALIGNMENT`-byte aligned), ``element_aligned`` (the dtype is one the
    record wants aligned to its whole element, and ``alignment``, the largest
    power of two the source's address is a multiple of, is below
    :meth:`~bridge.crossing.capabilities.Holds.alignment_of` it: complex128 at
    8 bytes into torch), ``byte_offset`` (the producer's export
    sets one and the record ignores it), ``readonly`` (read-only memory into
    a library that writes, and shares: one that copies every import writes
    its own copy) and ``capsule`` (read-only memory into a library
    that asks for a legacy capsule, which cannot say read-only)."""
    g = geometry(layout)
    out: list[str] = []
    if dtype not in h.dtypes:
        out.append("dtypes")
    if not g.shape and not h.zero_d:
        out.append("zero_d")
    if h.max_ndim is not None and len(g.shape) > h.max_ndim:
        out.append("max_ndim")
    size = prod(g.shape)
    live = [s for n, s in zip(g.shape, g.strides) if n > 1]
    if size and not h.negative_strides and any(s < 0 for s in live):
        out.append("negative_strides")
    if size and not h.zero_strides and any(s == 0 for s in live):
        out.append("zero_strides")
    if size and h.strides == "contiguous" and not is_contiguous(g.shape, g.strides):
        out.append("strides")
    if size and h.strides == "compact" and not is_non_overlapping_and_dense(g.shape, g.strides):
        out.append("strides")
    if size and h.alignment and aligned is False:
        out.append("alignment")
    elif size and dtype in h.element_aligned and alignment is not None:
        if alignment < h.alignment_of(dtype, get_dtype(dtype).itemsize):
            out.append("element_aligned")
    if byte_offset and not h.byte_offset:
        out.append("byte_offset")
    if readonly and size and h.readonly == "writes" and not h.always_copies:
        out.append("readonly")
    if readonly and h.capsule == "legacy":
        out.append("capsule")
    return tuple(dict.fromkeys(out))


def copy_reason(h: Holds, dtype: str, layout: str, readonly: bool = False, aligned: bool | None = None,
                alignment: int | None = None) -> str:  # fmt: skip
    """Why ``h``'s own import copies a case, by its record ("" when the
    record does not say): ``destination`` (it copies every import),
    ``alignment`` (the first element is not aligned as the record asks: to
    its ``alignment``, or to the element's size for a dtype of its
    ``element_aligned``), ``layout`` (strides it cannot hold as they are),
    ``dtype``."""
    if h.always_copies:
        return "destination"
    found = problems(h, dtype, layout, readonly, aligned=aligned, alignment=alignment)
    if "alignment" in found or "element_aligned" in found:
        return "alignment"
    if any(f in found for f in LAYOUT_FIELDS):
        return "layout"
    if "dtypes" in found:
        return "dtype"
    return ""


@dataclasses.dataclass(frozen=True)
class Contradiction:
    """A cell whose verdict record ``field`` of its consumer does not
    predict: the table ``says`` one thing, the matrix ``saw`` another."""

    producer: str
    consumer: str
    case: str
    field: str
    says: str
    saw: str

    def __str__(self) -> str:
        return f"{self.producer} -> {self.consumer} {self.case}: {self.field}: the table says {self.says}; saw {self.saw}"


# Fields whose "cannot hold" is judged over all the cells that break them
# alone: one library's result may be readable for one dtype and not another.
# (element_aligned is judged over all its dtypes at once, as alignment is: the
# record may ask it of a dtype that was not seen to fail, complex64 beside
# complex128, as long as one dtype that breaks it alone did.)
_CANNOT = (*LAYOUT_FIELDS, "alignment", "element_aligned", "byte_offset", "zero_d", "max_ndim", "dtypes")


def _sub_byte(name: str) -> bool:
    """Whether bridge's dtype ``name`` has fewer than 8 bits a value (float6, float4)."""
    from bridge.core.dtypes import get_dtype

    return get_dtype(name).__dlpack_data_type__()[1] < 8


def contradictions(cells: Iterable[Cell], byte_offsets: Mapping[tuple[str, str, str], bool] | None = None,
                   producers: Iterable[str] | None = None,
                   table: Mapping[str, Holds] = DESTINATIONS) -> list[Contradiction]:  # fmt: skip
    """The cells of each destination's own DLPack import (the ``dlpack``
    protocol: pyarrow's and polars' records describe bridge's Arrow route,
    which has no direct cells) whose verdicts its record does not predict.

    ``cells`` are the :class:`~bridge.kit.matrix_grid.Cell` objects of a
    finished run; ``byte_offsets`` says, per ``(producer, dtype, layout)``,
    whether the producer's export sets DLPack's ``byte_offset`` (unknown
    cases: it does not; bridge and NumPy never do); ``producers`` restricts
    the judgement to those producers (the records describe what each import
    does with bridge's tensors, what :func:`bridge.convert` hands it: bridge is
    the producer that tells them, and one setting ``byte_offset``, mlx, tells
    that field); ``table``: the records to judge (the destination table by
    default; a test hands it a wrong one to see it contradicted).

    A case no consumer took from its producer (the producer's export refused
    it) says nothing of a consumer and is not judged, nor is a layout the
    records do not describe (:data:`~bridge.kit.matrix_layouts.UNRECORDED`:
    non-native byte order, chunks, DLPack main's codes, which
    :func:`bridge.convert` never hands a destination), nor is a failure held to
    be the producer's (:func:`~bridge.kit.matrix_grid.culprits`), nor an
    ``unverified`` cell (nothing was observed), except as below. Contradicted:

    - a case the record says the library holds as it is (:func:`problems`
      finds nothing) crashed, broke a rule, was refused, or was copied by a
      library that shares;
    - every cell that breaks one field of the record alone (a stride kind, the
      alignment, the element alignment, the byte offset, 0-d, the dims, or one dtype) crossed
      zero-copy with its values intact, where the record says the library
      cannot hold it (no refusal, failure or copy of its own says otherwise,
      nor a result the library could not read back where it reads back that
      dtype in a layout it holds);
    - the library writes read-only memory, and a read-only case it holds
      otherwise crossed zero-copy with the result still read-only; it asks for
      legacy capsules, and a read-only case from bridge was not refused;
    - it copies every import, and a cell was zero-copy; it shares, and cells
      it holds as they are were copied and none was zero-copy.
    """
    from bridge.kit.matrix_grid import culprits

    all_cells = list(cells)
    chosen = set(producers) if producers is not None else None
    offsets = byte_offsets or {}
    exported = {(c.producer, c.dtype, c.layout, c.readonly) for c in all_cells
                if c.verdict in ("zero-copy", "copy", "unverified", "empty")}  # fmt: skip
    out: list[Contradiction] = []
    alone: dict[tuple[str, str, str], list[Cell]] = {}  # (consumer, field, dtype or "") -> its cells
    holds: dict[str, list[Cell]] = {}
    holding: list[Cell] = []
    for c, who in zip(all_cells, culprits(all_cells)):
        h = record(c.consumer, table)
        if h is None or h.capsule == "none" or c.protocol != own_protocol(h) or c.verdict == "n/a":
            continue
        if c.layout in UNRECORDED:
            continue
        if (chosen is not None and c.producer not in chosen) or (who and who != c.consumer):
            continue
        if (c.producer, c.dtype, c.layout, c.readonly) not in exported:
            continue
        found = problems(h, c.dtype, c.layout, c.readonly, aligned=c.aligned, alignment=c.alignment,
                         byte_offset=offsets.get((c.producer, c.dtype, c.layout), False))  # fmt: skip
        if h.always_copies and c.verdict == "zero-copy":
            out.append(_contra(c, h, "always_copies", f"{h.name} copies every import"))
        if not found:
            holds.setdefault(h.name, []).append(c)
            holding.append(c)
            if c.verdict in ("crash", "violation", "refused") or (c.verdict == "copy" and not h.always_copies):
                out.append(_contra(c, h, "(every field)", f"{h.name} holds this case as it is"))
        elif len(found) == 1 and found[0] in _CANNOT:
            alone.setdefault((h.name, found[0], c.dtype if found[0] == "dtypes" else ""), []).append(c)
        elif set(found) == {"readonly"} and c.verdict == "zero-copy" and "read-only lost" not in c.detail:
            out.append(_contra(c, h, "readonly", f"{h.name} writes through the memory it takes"))
        # A legacy capsule of a sub-byte dtype is a packed copy (DLPack v1.3), so
        # read-only memory is not lent through it: nothing for bridge to refuse.
        if "capsule" in found and c.producer == "bridge" and c.verdict != "refused" and not _sub_byte(c.dtype):
            out.append(_contra(c, h, "capsule", f"{h.name} asks for a legacy capsule, which cannot carry "
                                                "read-only memory"))  # fmt: skip
    # An unverified cell says the library could not read its result back only
    # where the checker reads that library's results of that dtype otherwise.
    readable = {(c.consumer, c.dtype) for c in holding if c.verdict in ("zero-copy", "copy", "empty")}
    for (name, field, dtype), members in alone.items():
        judged = [c for c in members if c.verdict != "unverified" or (c.consumer, c.dtype) in readable]
        if all(c.verdict in ("zero-copy", "empty") for c in judged) and any(c.verdict == "zero-copy" for c in judged):
            what = dtype if field == "dtypes" else _field_words(field)
            out.append(Contradiction(members[0].producer, name, ", ".join(c.case for c in members[:3]), field,
                                     f"{name} cannot hold {what}",
                                     f"all {len(members)} such cells zero-copy with their values intact"))  # fmt: skip
    for name, members in holds.items():
        if table[name].always_copies:
            continue
        if any(c.verdict == "copy" for c in members) and not any(c.verdict == "zero-copy" for c in members):
            out.append(Contradiction("*", name, "*", "always_copies", f"{name} shares the memory it takes",
                                     "no case it holds as it is was zero-copy"))  # fmt: skip
    return out


def _contra(c: Cell, h: Holds, field: str, says: str) -> Contradiction:
    what = f"{c.verdict} ({c.rule})" if c.rule else c.verdict
    return Contradiction(c.producer, h.name, c.case, field, says, f"{what}: {c.detail}" if c.detail else what)


def _field_words(field: str) -> str:
    return {"negative_strides": "negative strides", "zero_strides": "zero strides (a broadcast view)",
            "strides": "these strides", "alignment": "an unaligned first element",
            "element_aligned": "a first element not aligned to its size",
            "byte_offset": "a byte_offset", "zero_d": "a 0-d tensor", "max_ndim": "this many dims"}.get(field, field)  # fmt: skip
