"""The matrix's batch and table crossings through bridge.convert
(``bridge-convert-batch``: the case's tensor inside a dict, its leaf judged as
a ``bridge-convert`` cell and the batch by the ``batch`` rule;
``bridge-convert-table``: a table of each producer that makes tables, judged
by the ``table`` rule and, on its first column, as a cell), run for real, and
a planted wrong batch or table reported as a violation of its rule.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

import bridge
from bridge.kit import matrix_cell
from bridge.kit.matrix_grid import (
    DEFAULT_DTYPES,
    PROTOCOLS,
    TABLE_PRODUCERS,
    Cell,
    available,
    bridge_at_fault,
)
from bridge.kit.matrix_holds import CONVERT, CONVERT_BATCH, CONVERT_TABLE
from bridge.kit.matrix_peers import CONSUMES, consumer_entries, consumers
from bridge.kit.matrix_run import plan, run_matrix
from bridge.kit.rules import RULES

WORKED = ("zero-copy", "copy", "empty", "unverified")
TABLE_MAKERS = [p for p in TABLE_PRODUCERS if available(p)]


def _one(producer: str, consumer: str, protocol: str, dtype: str = "float32", layout: str = "contiguous",
         readonly: bool = False) -> Cell:  # fmt: skip
    """One cell, run in this process (so that a monkeypatch reaches it)."""
    table = {(c.peer, c.protocol): c for c in consumers({consumer})}
    return matrix_cell.run_cell(Cell(producer, consumer, protocol, dtype, layout, readonly),
                                table[(consumer, protocol)])  # fmt: skip


def _bad(cells: list[Cell]) -> list[Cell]:
    return [c for c in cells if c.verdict in ("crash", "violation")]


def test_the_units_are_protocols_of_every_convert_destination_and_their_rules_are_stated() -> None:
    assert {CONVERT_BATCH, CONVERT_TABLE} <= set(PROTOCOLS)
    for peer, protocols in CONSUMES.items():
        if CONVERT in protocols:
            assert {CONVERT_BATCH, CONVERT_TABLE} <= set(protocols), peer
    for name in ("batch", "table"):
        r = RULES[name]
        assert r.spec and r.section and r.text.endswith(".") and r.url.startswith("https://")
    assert bridge_at_fault(Cell("numpy", "torch", CONVERT_BATCH, "float32", "contiguous", False,
                                verdict="violation", rule="batch"))  # fmt: skip


def test_plan_crosses_tables_of_the_table_makers_only_contiguous_and_writable() -> None:
    cells = plan(["numpy", *TABLE_MAKERS], consumer_entries({"numpy"}), DEFAULT_DTYPES, (CONVERT_TABLE,))
    assert cells and {c.producer for c in cells} == set(TABLE_MAKERS)
    assert {(c.layout, c.readonly) for c in cells} == {("contiguous", False)}
    assert len(cells) == len(TABLE_MAKERS) * len(DEFAULT_DTYPES)
    batch = plan(["numpy"], consumer_entries({"numpy"}), DEFAULT_DTYPES, (CONVERT_BATCH,))
    single = plan(["numpy"], consumer_entries({"numpy"}), DEFAULT_DTYPES, (CONVERT,))
    assert [c.key()[3:] for c in batch] == [c.key()[3:] for c in single]  # every case of the single cell


def test_batch_leaf_is_judged_as_the_single_cell_numpy_and_torch() -> None:
    """numpy and torch both ways: each batch cell ends as its single
    ``bridge-convert`` cell does (verdict and reason), with no violation."""
    pytest.importorskip("torch")
    cells = run_matrix(plan(["numpy", "torch"], consumer_entries({"numpy", "torch"}), ("float32", "bool"),
                            (CONVERT, CONVERT_BATCH)))  # fmt: skip
    single = {c.key()[:2] + c.key()[3:]: c for c in cells if c.protocol == CONVERT}
    batch = [c for c in cells if c.protocol == CONVERT_BATCH]
    assert not _bad(cells), _bad(cells)
    assert {(c.producer, c.consumer) for c in batch if c.verdict in WORKED} == {
        ("numpy", "numpy"), ("numpy", "torch"), ("torch", "numpy"), ("torch", "torch")}
    for c in batch:
        alone = single[c.key()[:2] + c.key()[3:]]
        assert (c.verdict, c.reason) == (alone.verdict, alone.reason), (c, alone)
    assert any(c.verdict == "copy" and c.reason == "layout" for c in batch)  # numpy negative into torch


def test_tables_cross_into_numpy_and_torch() -> None:
    pytest.importorskip("torch")
    assert TABLE_MAKERS, "no producer of tables installed"
    cells = run_matrix(plan(TABLE_MAKERS, consumer_entries({"numpy", "torch"}), ("float32", "int64", "bool"),
                            (CONVERT_TABLE,)))  # fmt: skip
    assert not _bad(cells), _bad(cells)
    for p in TABLE_MAKERS:
        for consumer in ("numpy", "torch"):
            assert [c for c in cells if (c.producer, c.consumer) == (p, consumer) and c.verdict in WORKED], (p, consumer)
    one = next(c for c in cells if (c.producer, c.consumer, c.dtype) == ("pyarrow", "numpy", "float32"))
    assert one.verdict == "zero-copy", one  # the column's own Arrow buffer
    unpacked = next(c for c in cells if (c.producer, c.consumer, c.dtype) == ("pyarrow", "numpy", "bool"))
    assert (unpacked.verdict, unpacked.reason) == ("copy", "unpack"), unpacked


def test_the_default_grid_of_the_units_has_no_crash_nor_violation() -> None:
    """The default dtypes, every layout, through the batch and the table, of
    bridge, numpy, torch and the table makers into bridge, numpy and torch."""
    pytest.importorskip("torch")
    producers = ["bridge", "numpy", "torch", *TABLE_MAKERS]
    cells = run_matrix(plan(producers, consumer_entries({"bridge", "numpy", "torch"}), DEFAULT_DTYPES,
                            (CONVERT_BATCH, CONVERT_TABLE)))  # fmt: skip
    assert not _bad(cells), _bad(cells)
    assert len([c for c in cells if c.protocol == CONVERT_BATCH and c.verdict in WORKED]) > 300
    assert len([c for c in cells if c.protocol == CONVERT_TABLE and c.verdict in WORKED]) >= 3 * len(TABLE_MAKERS)


# ------------------------------------------------------------------ planted


def _planted(monkeypatch: pytest.MonkeyPatch, wrong: Any) -> None:
    """``bridge.convert`` replaced by ``wrong(real_convert, obj, to, **kw)``."""
    real = bridge.convert

    def planted(obj: Any, to: Any, **kw: Any) -> Any:
        return wrong(real, obj, to, **kw)

    monkeypatch.setattr(bridge, "convert", planted)


def _broke(cell: Cell, rule: str, words: str) -> None:
    assert (cell.verdict, cell.rule) == ("violation", rule), cell
    assert words in cell.detail, cell.detail
    assert bridge_at_fault(cell)


def test_the_correct_batch_passes() -> None:
    assert _one("numpy", "numpy", CONVERT_BATCH).verdict == "zero-copy"
    assert _one("numpy", "numpy", CONVERT_BATCH, layout="negative", readonly=True).verdict == "zero-copy"


def test_a_batch_without_its_label_breaks_the_batch_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    def drop(real: Any, obj: Any, to: Any, **kw: Any) -> Any:
        out = real(obj, to, **kw)
        return {k: v for k, v in out.items() if k != "label"}

    _planted(monkeypatch, drop)
    _broke(_one("numpy", "numpy", CONVERT_BATCH), "batch", "keys ['x', 'again']")


def test_a_batch_whose_str_is_another_object_breaks_the_batch_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    def retell(real: Any, obj: Any, to: Any, **kw: Any) -> Any:
        out = real(obj, to, **kw)
        out["label"] = "".join(reversed(list(reversed(out["label"]))))  # equal, not the very object
        return out

    _planted(monkeypatch, retell)
    _broke(_one("numpy", "numpy", CONVERT_BATCH), "batch", "not the very object")


def test_a_tensor_twice_copied_twice_breaks_the_batch_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each place of the one array converted on its own, copied: two results
    in two memories, where convert gives one per source object."""

    def twice(real: Any, obj: Any, to: Any, **kw: Any) -> Any:
        return {"x": real(obj["x"], to, copy=True), "label": obj["label"], "again": [real(obj["x"], to, copy=True)]}

    _planted(monkeypatch, twice)
    _broke(_one("numpy", "numpy", CONVERT_BATCH), "batch", "two results")


def test_a_batch_warning_naming_another_leaf_breaks_the_batch_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    def mislabel(real: Any, obj: Any, to: Any, **kw: Any) -> Any:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", bridge.CopyWarning)
            out = real(obj, to, **kw)
        w = caught[0].message
        assert isinstance(w, bridge.CopyWarning)
        warnings.warn(bridge.CopyWarning(str(w), w.kind, w.fixes, {"['again'][0]": w.fixes}), stacklevel=2)
        return out

    pytest.importorskip("torch")
    _planted(monkeypatch, mislabel)
    _broke(_one("numpy", "torch", CONVERT_BATCH, layout="negative"), "batch", "names the leaves")


def test_a_table_in_another_order_breaks_the_table_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("pyarrow")

    def reorder(real: Any, obj: Any, to: Any, **kw: Any) -> Any:
        return dict(reversed(list(real(obj, to, **kw).items())))

    _planted(monkeypatch, reorder)
    _broke(_one("pyarrow", "numpy", CONVERT_TABLE), "table", "not a dict of ['a', 'b']")


def test_a_table_column_of_other_values_breaks_the_table_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("pyarrow")

    def shuffle(real: Any, obj: Any, to: Any, **kw: Any) -> Any:
        out = real(obj, to, **kw)
        return {"a": out["a"], "b": np.ascontiguousarray(out["b"][::-1])}

    _planted(monkeypatch, shuffle)
    _broke(_one("pyarrow", "numpy", CONVERT_TABLE), "table", "column 'b'")
    monkeypatch.undo()
    assert _one("pyarrow", "numpy", CONVERT_TABLE).verdict == "zero-copy"
