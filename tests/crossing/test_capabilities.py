"""The destination table against the interop matrix: each installed
destination's own DLPack import, run as the matrix runs it (the ``dlpack``
protocol, in the kit's child processes, where a crash ends only its cell), must
behave as its record in ``bridge/crossing/capabilities.py`` says, or the test
fails naming the record's field and the cell (:func:`bridge.kit.matrix_holds.contradictions`
says what counts as a contradiction: torch said to hold negative strides and
crashing on them, jax said to refuse non-compact strides and sharing them,
a library said to copy every import and sharing, ...).

The grid, restricted to keep the run to a minute or two on two cores: the
records describe what each import does with bridge's tensors (what
``bridge.convert`` hands it), so bridge is the producer: every dtype x every
matrix layout (contiguous, transposed, stepped, negative, broadcast, a size-1
dim with an odd stride, 0-d, zero-size) x writable and read-only memory
(bridge's own 64-byte aligned memory and views past it, and NumPy's memory
lent read-only: aligned and unaligned first elements both occur). bridge's
exports never set DLPack's ``byte_offset``, so mlx (whose views do) produces
three dtypes over every layout, with the byte offset of each of its exports
read from its capsule, for the ``byte_offset`` field. The reference consumers
(NumPy and bridge) are destinations too: a failure they share with another
consumer is the producer's, not a contradiction.

A second test hands the same cells wrong records and checks that each is
contradicted: the check has teeth.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from bridge.crossing.capabilities import DESTINATIONS, Holds
from bridge.kit.capsules import inspect_capsule
from bridge.kit.matrix_grid import DTYPES, LAYOUTS, Cell, available
from bridge.kit.matrix_holds import Contradiction, contradictions, own_protocol
from bridge.kit.matrix_peers import consumer_entries, produce
from bridge.kit.matrix_run import plan, run_matrix

# The destinations whose own import the matrix runs: those taking DLPack (the
# Arrow ones are bridge's own route), installed here.
DLPACK_DESTINATIONS = sorted(n for n, h in DESTINATIONS.items() if own_protocol(h) == "dlpack" and available(n))
MLX_DTYPES = ("uint8", "float32", "bfloat16")


def _byte_offsets(dtypes: tuple[str, ...]) -> dict[tuple[str, str, str], bool]:
    """Whether mlx's DLPack export of each case sets ``byte_offset``, read
    from the capsule it hands out (never consumed: its deleter runs when
    the capsule goes)."""
    out: dict[tuple[str, str, str], bool] = {}
    for dtype in dtypes:
        for layout in LAYOUTS:
            try:
                obj, _ = produce("mlx", dtype, layout, False)
            except Exception:  # NotMade, or mlx refusing to make the case: it has no cell either
                continue
            view = inspect_capsule(obj.__dlpack__())
            out[("mlx", dtype, layout)] = view is not None and view.byte_offset != 0
    return out


@pytest.fixture(scope="module")
def grid() -> tuple[list[Cell], dict[tuple[str, str, str], bool]]:
    entries = [e for e in consumer_entries(set(DLPACK_DESTINATIONS)) if e.protocol == "dlpack"]
    cells = plan(["bridge"], entries, DTYPES, ["dlpack"])
    offsets: dict[tuple[str, str, str], bool] = {}
    if available("mlx"):
        cells += plan(["mlx"], entries, MLX_DTYPES, ["dlpack"])
        offsets = _byte_offsets(MLX_DTYPES)
    return run_matrix(cells), offsets


def _listing(found: list[Contradiction]) -> str:
    return "\n".join(str(c) for c in found[:30]) + (f"\n... and {len(found) - 30} more" if len(found) > 30 else "")


def test_the_grid_covers_every_record_and_field(grid: tuple[list[Cell], dict[tuple[str, str, str], bool]]) -> None:
    cells, offsets = grid
    assert {"bridge", "numpy"} <= set(DLPACK_DESTINATIONS)
    taken = {c.consumer for c in cells if c.verdict not in ("n/a",)}
    assert taken == set(DLPACK_DESTINATIONS), taken
    assert any(c.readonly for c in cells) and any(c.aligned is False for c in cells)
    assert not available("mlx") or any(offsets.values()), "no mlx export set byte_offset: the field goes unchecked"


def test_no_peer_contradicts_its_record(grid: tuple[list[Cell], dict[tuple[str, str, str], bool]]) -> None:
    cells, offsets = grid
    found = contradictions(cells, byte_offsets=offsets)
    assert not found, "the destination table disagrees with the matrix:\n" + _listing(found)


def _wrong(name: str, **fields: Any) -> dict[str, Holds]:
    return {**DESTINATIONS, name: dataclasses.replace(DESTINATIONS[name], **fields)}


# Wrong records, each with the field it must be contradicted on.
WRONG = [
    ("torch", {"negative_strides": True}, "(every field)"),  # torch aborts on them
    ("torch", {"readonly": "keeps"}, "(every field)"),  # a write through torch's result lands
    ("jax", {"strides": "any", "zero_strides": True}, "(every field)"),  # jax refuses them
    ("jax", {"capsule": "versioned"}, "(every field)"),  # read-only memory is refused
    ("tvm_ffi", {"negative_strides": False}, "negative_strides"),  # it shares them
    ("numpy", {"dtypes": DESTINATIONS["numpy"].dtypes - {"int16"}}, "dtypes"),  # it shares int16
    ("mlx", {"always_copies": False}, "(every field)"),  # it copies everything
    ("bridge", {"always_copies": True}, "always_copies"),  # it shares everything
    ("paddle", {"byte_offset": True}, "(every field)"),  # mlx's views arrive shifted
    ("torch", {"byte_offset": True}, "(every field)"),  # it refuses mlx's views
]


@pytest.mark.parametrize(("name", "fields", "field"), WRONG, ids=[f"{n}-{'-'.join(f)}" for n, f, _ in WRONG])
def test_a_wrong_record_is_contradicted(grid: tuple[list[Cell], dict[tuple[str, str, str], bool]], name: str,
                                        fields: dict[str, Any], field: str) -> None:  # fmt: skip
    pytest.importorskip(DESTINATIONS[name].module)
    if "byte_offset" in fields:
        pytest.importorskip("mlx.core")  # the producer whose views set byte_offset
    cells, offsets = grid
    found = [c for c in contradictions(cells, byte_offsets=offsets, table=_wrong(name, **fields)) if c.consumer == name]
    assert any(c.field == field for c in found), f"{name} {fields}: not contradicted on {field}: {_listing(found)}"
