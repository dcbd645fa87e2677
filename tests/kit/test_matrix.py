"""The interop matrix: its verdicts on known cells, crash isolation, the CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bridge.kit import matrix, matrix_run
from bridge.kit.matrix import Cell, bridge_at_fault, consumers, run_cell, run_matrix


def one(producer, consumer, protocol, dtype="float32", layout="contiguous", readonly=False):
    table = {(c.peer, c.protocol): c for c in consumers({consumer})}
    assert (consumer, protocol) in table, f"{consumer} ({protocol}) is not installed"
    return run_cell(Cell(producer, consumer, protocol, dtype, layout, readonly), table[(consumer, protocol)])


def test_known_good_cells_are_zero_copy():
    pytest.importorskip("torch")
    assert one("numpy", "torch", "dlpack").verdict == "zero-copy"
    assert one("torch", "numpy", "dlpack").verdict == "zero-copy"
    assert one("bridge", "numpy", "dlpack", layout="transposed").verdict == "zero-copy"
    assert one("numpy", "bridge", "dlpack", layout="negative", readonly=True).verdict == "zero-copy"
    assert one("bridge", "numpy", "array-interface", dtype="bfloat16").verdict == "zero-copy"


def test_known_refusals():
    pytest.importorskip("jax")
    pytest.importorskip("pyarrow")
    jax_cell = one("numpy", "jax", "dlpack", layout="stepped")
    # jax refuses strided input, but with its own JaxRuntimeError: the array
    # API's exception types are BufferError/TypeError/ValueError.
    assert (jax_cell.verdict, jax_cell.rule) == ("violation", "exceptions"), jax_cell
    assert "JaxRuntimeError" in jax_cell.detail
    arrow_bool = one("pyarrow", "bridge", "dlpack", dtype="bool")
    assert arrow_bool.verdict == "refused"
    assert one("pyarrow", "bridge", "arrow", dtype="bool").verdict == "refused"  # bit-packed


def test_read_only_is_checked():
    ro = one("numpy", "bridge", "dlpack", readonly=True)
    assert ro.verdict == "zero-copy"
    pytest.importorskip("torch")
    # torch imports read-only memory as a writable tensor: a write through it
    # lands in the read-only NumPy array (the read-only rule).
    lost = one("numpy", "torch", "dlpack", readonly=True)
    assert (lost.verdict, lost.rule) == ("violation", "read-only"), lost
    assert "changed the read-only source" in lost.detail


def test_not_made_cases_are_na():
    pytest.importorskip("torch")
    assert one("torch", "numpy", "dlpack", layout="negative").verdict == "n/a"


def test_torch_negative_strides_crash_is_isolated():
    """torch 2.13 aborts the process on negative strides (pytorch#188023): the
    matrix marks the cell and goes on with the next one in a new process."""
    pytest.importorskip("torch")
    cells = [
        Cell("numpy", "torch", "dlpack", "float32", "negative", False),
        Cell("numpy", "torch", "dlpack", "float32", "contiguous", False),
    ]
    out = {c.layout: c for c in run_matrix(cells)}
    assert out["negative"].verdict in ("crash", "refused")
    assert out["contiguous"].verdict == "zero-copy"


def test_blame():
    def cell(p, c, v):
        return Cell(p, c, "dlpack", "float32", "contiguous", False, verdict=v)

    assert bridge_at_fault(cell("numpy", "bridge", "violation"))
    assert bridge_at_fault(cell("bridge", "numpy", "crash"))
    assert not bridge_at_fault(cell("bridge", "torch", "crash"))
    assert not bridge_at_fault(cell("numpy", "torch", "violation"))
    assert not bridge_at_fault(cell("numpy", "bridge", "refused"))


def test_bridge_convert_cells_name_the_reason_of_their_copies():
    """Through bridge.convert, what the consumer cannot hold is fixed, and a
    copy's reason is the CopyWarning's kind."""
    pytest.importorskip("torch")
    neg = one("numpy", "torch", "bridge-convert", layout="negative")
    assert (neg.verdict, neg.reason) == ("copy", "layout") and "negative strides" in neg.detail, neg
    ro = one("numpy", "torch", "bridge-convert", readonly=True)
    assert (ro.verdict, ro.reason, ro.rule) == ("copy", "read-only", ""), ro
    view = one("bridge", "numpy", "bridge-convert", dtype="bfloat16", layout="stepped")
    assert view.verdict == "zero-copy" and "dtype-view" in view.detail, view


def test_blame_through_convert():
    """convert chose what the consumer was handed: its failures are bridge's,
    except the producer's (making the case, or its own exception passed on)."""
    from bridge.kit.matrix_grid import culprits

    def cell(v, detail="", rule=""):
        return Cell("numpy", "torch", "bridge-convert", "float32", "negative", False, verdict=v, detail=detail,
                    rule=rule)  # fmt: skip

    mine = [cell("crash", "process died"), cell("violation", "values differ", "strides"),
            cell("violation", "refused with RuntimeError", "exceptions")]  # fmt: skip
    assert all(bridge_at_fault(c) for c in mine) and culprits(mine) == ["bridge"] * 3
    theirs = [cell("crash", "the producer crashed making this case: x"),
              cell("violation", "refused with RuntimeError [raised by numpy]", "exceptions")]  # fmt: skip
    assert not any(bridge_at_fault(c) for c in theirs) and culprits(theirs) == ["numpy"] * 2


def test_summary_and_markdown():
    cells = [Cell("a", "b", "dlpack", "float32", "contiguous", False, verdict="zero-copy"),
             Cell("a", "b", "dlpack", "float32", "negative", False, verdict="crash", detail="x")]  # fmt: skip
    rows = matrix.summarise(cells)
    assert rows[0]["zero-copy"] == 1 and rows[0]["crash"] == 1
    md = matrix.to_markdown(cells)
    assert "| a | b | dlpack |" in md and "Violations and crashes" in md


def test_cli_json_and_filters():
    proc = subprocess.run(
        [sys.executable, "-m", "bridge", "matrix", "--producer", "numpy", "--consumer", "bridge",
         "--protocol", "dlpack", "--dtype", "float32,int64", "--json"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    cells = json.loads(proc.stdout)
    assert {c["producer"] for c in cells} == {"numpy"} and {c["consumer"] for c in cells} == {"bridge"}
    assert {c["dtype"] for c in cells} == {"float32", "int64"}
    # A zero-size tensor has no bytes to share: it is "empty", not zero-copy; NumPy's
    # __dlpack__ refuses big-endian memory (DLPack has no byte order); NumPy has no chunks.
    other = {"zero-size": "empty", "big-endian": "refused", "chunked": "n/a"}
    want = {c["case"]: other.get(c["layout"], "zero-copy") for c in cells}
    assert {c["case"]: c["verdict"] for c in cells} == want
    assert all({"producer", "consumer", "protocol", "case", "verdict", "reason"} <= set(c) for c in cells)


@pytest.mark.parametrize(
    ("option", "value", "valid"),
    [
        ("--dtype", "float33", "bool, uint8"),
        ("--producer", "numpy,nump", "bridge, numpy, torch"),
        ("--consumer", "tensorflo", "bridge, numpy, torch"),
        ("--protocol", "dlpak", "dlpack, dlpack-c-api, dlpack-copy"),
    ],
)
def test_cli_rejects_unknown_names_listing_the_valid_ones(option, value, valid):
    proc = subprocess.run([sys.executable, "-m", "bridge", "matrix", option, value],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 2 and proc.stdout == ""
    bad = value.split(",")[-1]
    assert f"unknown {option[2:]} {bad!r}; valid: {valid}" in proc.stderr


def test_cli_list():
    proc = subprocess.run([sys.executable, "-m", "bridge", "matrix", "--list"],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0
    for name in (*matrix.PEERS, *matrix.PROTOCOLS, *matrix.DTYPES):
        assert name in proc.stdout
    assert "cupy (not installed)" in proc.stdout or matrix.available("cupy")


def test_every_bridge_dtype_is_a_matrix_dtype():
    import bridge

    assert set(matrix.DTYPES) == {d.name for d in bridge.all_dtypes()}
    for dt in ("float8_e4m3fn", "float4_e2m1fn", "uint32", "complex128"):
        cell = one("bridge", "numpy", "dlpack", dtype=dt)
        # NumPy refuses the dtypes it lacks with RuntimeError (the exceptions
        # rule: BufferError is the spec's type); NumPy's failing, not bridge's.
        assert cell.verdict in ("zero-copy", "refused") or cell.rule == "exceptions", cell
        assert not bridge_at_fault(cell)
    # NumPy's DLPack export has no float8: its refusal is recorded as such
    cell = one("numpy", "bridge", "dlpack", dtype="float8_e5m2")
    assert cell.verdict == "refused" and "DLPack only supports" in cell.detail


def test_a_child_that_floods_stderr_does_not_hang_the_runner():
    """The runner reads a child's stdout line by line; a child that first writes
    more than a pipe holds to stderr must not block it (and so the run)."""
    import threading

    cells = [Cell("numpy", "bridge", "dlpack", "float32", "contiguous", False)]
    code = (
        "import sys, json, dataclasses, bridge.kit.matrix_run as m\n"
        "sys.stderr.write('x' * (4 << 20)); sys.stderr.flush()\n"
        "m.worker(**json.loads(sys.stdin.read()))\n"
    )
    out: list = []
    th = threading.Thread(target=lambda: out.append(matrix_run.run_worker(cells, None, code)), daemon=True)
    th.start()
    th.join(timeout=120)
    assert not th.is_alive(), "the runner hung on a full stderr pipe"
    finished, crash = out[0]
    assert crash is None and finished[0].verdict == "zero-copy"


def test_a_peer_whose_parent_package_is_missing_is_not_available(monkeypatch: pytest.MonkeyPatch) -> None:
    """A peer imported as a submodule (max.driver, mlx.core) is simply not
    available where its package is not installed: no ModuleNotFoundError out
    of find_spec, which would break the collection of every test that asks."""
    from bridge.kit import matrix_grid

    monkeypatch.setitem(matrix_grid._MODULE, "ghost", "no_such_package_here.driver")
    assert matrix_grid.available("ghost") is False
