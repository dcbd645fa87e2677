"""``python -m bridge matrix --repro DIR``: a reproducer script and an issue
text per crash and violation cell, each script checked by running it.

A real run over a small subset with known red cells (polars panics on
bridge's zero-size Arrow export, a crash; nanoarrow reads a transposed NumPy
array as flat memory, a violation of ``strides``): every script it writes is
run in a subprocess and must exit 1 printing ``REPRODUCED``, and uses only its
two libraries (and NumPy). Then the parts: a cell that no longer fails says
``FIXED?`` and exits 0; a cell without templates falls back to the kit (and
says why); torch's read-only write and its abort on negative strides, by hand;
the HTML report's links; the templates' coverage of the peers' protocols.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from bridge.kit import matrix_repro
from bridge.kit.matrix_grid import LAYOUTS, Cell
from bridge.kit.matrix_html import to_html
from bridge.kit.matrix_peers import CONSUMES
from bridge.kit.matrix_repro import check_reproducers, repro_links, reproducer, write_reproducers
from bridge.kit.matrix_repro_peers import CONSUMERS, MODULES
from bridge.kit.matrix_repro_peers import LAYOUTS as SPELLED

SUBSET = ["--producer", "numpy,bridge", "--consumer", "nanoarrow,polars", "--protocol", "arrow", "--dtype", "float32"]
_STDLIB = {"sys", "re", "signal", "subprocess", "ctypes"}


def _imports(script: str) -> set[str]:
    """The top-level modules a script imports (in its child's CODE too)."""
    return {m.split(".")[0] for m in re.findall(r"^(?:import|from) ([\w.]+)", script, re.M)}


def _run(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=180)


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("polars")
    pytest.importorskip("nanoarrow")
    out = tmp_path_factory.mktemp("repro")
    proc = subprocess.run([sys.executable, "-m", "bridge", "matrix", *SUBSET, "--no-progress",
                           "--repro", str(out / "repro"), "--html", str(out / "report" / "m.html")],
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert "Reproducers:" in proc.stdout, proc.stdout + proc.stderr
    return out


def test_every_red_cell_gets_a_script_that_reproduces(written: Path) -> None:
    index = json.loads((written / "repro" / "index.json").read_text())
    rows = index["reproducers"]
    verdicts = {(r["producer"], r["consumer"], r["verdict"], r["rule"]) for r in rows}
    assert ("bridge", "polars", "crash", "") in verdicts and ("numpy", "nanoarrow", "violation", "strides") in verdicts
    # checked when written: the index says each reproduced
    assert {r["status"] for r in rows} == {"reproduced"}, [r for r in rows if r["status"] != "reproduced"]
    assert index["counts"]["reproduced"] == len(rows)
    paths = [written / "repro" / r["script"] for r in rows]
    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(_run, paths))
    for path, row, proc in zip(paths, rows, runs):
        assert proc.returncode != 0 and "REPRODUCED:" in proc.stdout, (path.name, proc.stdout, proc.stderr[-2000:])
        script = path.read_text()
        allowed = {"numpy", *(MODULES.get(p, p) for p in (row["producer"], row["consumer"]))} | _STDLIB
        assert row["standalone"] and _imports(script) <= allowed, (path.name, _imports(script))
        if row["verdict"] == "crash":  # run in a child interpreter, whose death the script reports
            assert "subprocess.run([sys.executable" in script and "process died (exit 1)" in proc.stdout


def test_each_issue_text_names_versions_rule_and_holds_its_script(written: Path) -> None:
    folder = written / "repro"
    for row in json.loads((folder / "index.json").read_text())["reproducers"]:
        text = (folder / row["issue"]).read_text()
        assert text.startswith("# ") and "- Versions: " in text and "## Expected" in text and "## Observed" in text
        assert (folder / row["script"]).read_text() in text  # the script inline
        assert "Checked when written: reproduced" in text
        if row["rule"] == "strides":
            assert "DLPack C API, DLTensor.strides" in text
    index_md = (folder / "index.md").read_text()
    assert "](bridge-polars-arrow-float32-zero-size.py)" in index_md


def test_the_html_report_links_each_red_case_to_its_reproducer(written: Path) -> None:
    page = (written / "report" / "m.html").read_text()
    assert "../repro/numpy-nanoarrow-arrow-float32-transposed.py" in page
    assert "withRepro" in page


def test_a_cell_that_no_longer_fails_says_fixed(tmp_path: Path) -> None:
    """A violation the libraries do not commit (NumPy refuses its own bfloat16
    with BufferError, a type the spec allows): the script exits 0."""
    pytest.importorskip("ml_dtypes")
    cell = Cell("numpy", "numpy", "dlpack", "bfloat16", "contiguous", False, verdict="violation",
                rule="exceptions", detail="refused with RuntimeError")  # fmt: skip
    [r] = write_reproducers([cell], tmp_path)
    assert r.standalone and r.status == "fixed?", (r.status, r.said)
    proc = _run(tmp_path / f"{r.name}.py")
    assert proc.returncode == 0 and "FIXED?" in proc.stdout, proc.stdout + proc.stderr
    assert "1 fixed?" in (tmp_path / "index.md").read_text()


def test_a_cell_without_templates_reruns_through_the_kit(tmp_path: Path) -> None:
    """A layout the templates do not spell: the script re-runs the cell
    through bridge's kit, and the script and its issue say why."""
    cell = Cell("numpy", "nanoarrow", "arrow", "float32", "no-such-layout", False, verdict="violation", rule="strides")
    r = reproducer(cell)
    assert not r.standalone and "no reproducer template for the no-such-layout layout" in r.why_bridge
    assert "from bridge.kit.matrix_cell import run_cell" in r.script and "bridge" in r.script.split('"""')[1]


def test_the_kit_fallback_reproduces_a_real_violation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("nanoarrow")
    monkeypatch.delitem(matrix_repro.CONSUMERS, "nanoarrow")  # as if nanoarrow had no templates
    cell = Cell("numpy", "nanoarrow", "arrow", "float32", "transposed", False, verdict="violation", rule="strides")
    [r] = write_reproducers([cell], tmp_path)
    assert not r.standalone and r.status == "reproduced", (r.status, r.said)


@pytest.mark.parametrize("producer", ["pyarrow", "tvm_ffi", "pydlpack", "array_api_strict", "max"])
def test_jax_copy_cells_are_standalone_and_placed_as_the_matrix_placed_them(tmp_path: Path, producer: str) -> None:
    """jax's from_dlpack(x, copy=True) hands back the producer's memory only
    when it is 64-byte aligned, so such a cell's verdict moves with where
    malloc put the matrix's tensor: the script, standalone (each producer
    tells its first element's address), places its memory at the cell's
    alignment, and reproduces on every run."""
    for module in ("jax", {"pydlpack": "dlpack", "max": "max.driver"}.get(producer, producer)):
        pytest.importorskip(module)
    cell = Cell(producer, "jax", "dlpack-copy", "float32", "contiguous", False, verdict="violation", rule="copy",
                detail="copy=True returned the producer's own memory", alignment=64)  # fmt: skip
    r = reproducer(cell)
    assert r.standalone, r.why_bridge
    assert "base = at(" in r.script
    path = tmp_path / f"{r.name}.py"
    path.write_text(r.script)
    for _ in range(2):
        proc = _run(path)
        assert proc.returncode == 1 and "REPRODUCED: copy=True returned the producer's own memory" in proc.stdout, (
            proc.stdout + proc.stderr)


def test_torch_read_only_and_negative_strides(tmp_path: Path) -> None:
    """torch writes through read-only NumPy memory and aborts on negative
    strides (a signal, reported by name), through standalone scripts."""
    pytest.importorskip("torch")
    cells = [Cell("numpy", "torch", "dlpack", "float32", "stepped", True, verdict="violation", rule="read-only"),
             Cell("numpy", "torch", "dlpack", "float32", "negative", False, verdict="crash")]  # fmt: skip
    repros = [reproducer(c) for c in cells]
    for r in repros:
        (tmp_path / f"{r.name}.py").write_text(r.script)
    check_reproducers(repros, tmp_path)
    assert [r.status for r in repros] == ["reproduced", "reproduced"], [r.said for r in repros]
    assert "signal SIGABRT" in repros[1].said and "torch.from_dlpack(x)" in repros[1].said
    assert all(_imports(r.script) <= {"numpy", "torch"} | _STDLIB for r in repros)


def test_links_are_relative_to_the_page(tmp_path: Path) -> None:
    cell = Cell("numpy", "nanoarrow", "arrow", "float32", "transposed", False, verdict="violation", rule="strides")
    r = reproducer(cell)
    links = repro_links([r], tmp_path / "out" / "repro", tmp_path / "out" / "m.html")
    assert links == {cell.key(): f"repro/{r.name}.py"}
    page = to_html([cell], repro=links)
    assert f'repro/{r.name}.py' in page
    assert "withRepro" in to_html([cell]) and f"{r.name}.py" not in to_html([cell])


def test_the_templates_match_the_peers() -> None:
    """Every protocol a consumer template takes is one the matrix's consumer
    speaks, and every layout of the grid that views the 4x12 base is spelled."""
    for peer, c in CONSUMERS.items():
        assert set(c.takes) <= set(CONSUMES.get(peer, ())), peer
    for layout in ("contiguous", "transposed", "stepped", "negative", "broadcast", "size1-odd", "component-aligned",
                   "0-d", "zero-size"):  # fmt: skip
        assert layout in LAYOUTS and "numpy" in SPELLED[layout], layout


# One restricted run whose red cells cover the new layouts (bridge.kit.matrix_layouts): the cell each
# layout's case looks for in it (producer, consumer, protocol, dtype, verdict).
NEW_SUBSET = ["--producer", "numpy,pyarrow,handmade", "--consumer", "numpy,torch,arro3", "--protocol",
              "dlpack,arrow,array-interface", "--dtype", "float32,complex128"]  # fmt: skip
NEW_RED = {
    # torch's clone faults on complex128 one byte off an element boundary
    "byte-misaligned": ("numpy", "torch", "dlpack", "complex128", "crash"),
    # arro3 reads a big-endian NumPy array's bytes as native
    "big-endian": ("numpy", "arro3", "arrow", "float32", "violation"),
    # torch.as_tensor refuses an Arrow stream of two chunks with RuntimeError
    "chunked": ("pyarrow", "torch", "array-interface", "float32", "violation"),
    # NumPy refuses DLPack device type 19 (TPU) with RuntimeError: the capsule is built with ctypes
    "device-tpu": ("handmade", "numpy", "dlpack", "float32", "violation"),
}  # fmt: skip


@pytest.fixture(scope="module")
def new_layouts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    for module in ("torch", "pyarrow", "arro3.core"):
        pytest.importorskip(module)
    out = tmp_path_factory.mktemp("repro-new") / "repro"
    proc = subprocess.run([sys.executable, "-m", "bridge", "matrix", *NEW_SUBSET, "--no-progress", "--repro", str(out)],
                          capture_output=True, text=True, timeout=900)  # fmt: skip
    assert "Reproducers:" in proc.stdout, proc.stdout + proc.stderr
    return out


@pytest.mark.parametrize("layout", sorted(NEW_RED))
def test_a_new_layout_gets_a_standalone_script(new_layouts: Path, layout: str) -> None:
    """The red cell of each new layout gets a script of its two libraries
    only (a hand-made capsule: ctypes), checked when written and run again
    here: exit 1, REPRODUCED."""
    producer, consumer, protocol, dtype, verdict = NEW_RED[layout]
    rows = [r for r in json.loads((new_layouts / "index.json").read_text())["reproducers"]
            if (r["producer"], r["consumer"], r["protocol"], r["case"], r["verdict"]) ==
            (producer, consumer, protocol, f"{dtype}/{layout}", verdict)]  # fmt: skip
    assert rows, f"no red cell {NEW_RED[layout]} on {layout}"
    row = rows[0]
    assert row["standalone"] and row["status"] == "reproduced", row
    script = (new_layouts / row["script"]).read_text()
    allowed = {"numpy", *(MODULES.get(p, p) for p in (producer, consumer))} | _STDLIB
    assert _imports(script) <= allowed, (row["script"], _imports(script))
    assert "bridge" not in _imports(script)
    proc = _run(new_layouts / row["script"])
    assert proc.returncode == 1 and "REPRODUCED:" in proc.stdout, (row["script"], proc.stdout, proc.stderr[-2000:])
    if verdict == "crash":
        assert "process died (signal" in proc.stdout


def test_a_batch_cell_converts_the_batch_itself() -> None:
    """bridge-convert-batch is bridge's own protocol: its script converts the
    batch with bridge (one of its two libraries), no kit."""
    cell = Cell("numpy", "torch", "bridge-convert-batch", "float32", "transposed", False, verdict="violation",
                rule="strides")  # fmt: skip
    r = reproducer(cell)
    assert r.standalone and "run_cell" not in r.script
    assert 'bridge.convert({"x": x, "label": "cat", "again": [x]}, "torch")["x"]' in r.script
