"""The ``component-aligned`` layout: memory whose first element sits half an
element past an element boundary (complex128 at 8 bytes mod 16), made by
each producer that can make it, and the matrix finding, by itself, what
torch's and paddle's kernels do with it (they fault on complex128: the
consumers compute on their results, :attr:`bridge.kit.matrix_peers.Consumer.compute`),
``bridge.convert`` copying it for them (an ``alignment`` copy), and the
destination table's ``element_aligned`` held to both
(:func:`bridge.kit.matrix_holds.contradictions`).

The real exchanges run in the matrix's child processes, on a grid small
enough for ``make test``: bridge's tensors (what ``convert`` hands a
destination) into numpy, torch and paddle.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from bridge.crossing.capabilities import DESTINATIONS, Holds
from bridge.kit import matrix_cell
from bridge.kit.matrix_frameworks import COMPONENT_ALIGNED, COMPONENT_SHAPE, place_component_aligned
from bridge.kit.matrix_grid import DEFAULT_DTYPES, LAYOUTS, Cell, available, copy_reasons
from bridge.kit.matrix_holds import contradictions, copy_reason, geometry, problems
from bridge.kit.matrix_peers import Consumer, NotMade, consumer_entries, produce, reference
from bridge.kit.matrix_run import crash_line, plan, run_matrix

DTYPES = ("complex128", "complex64", "float32")
LAYOUTS_RUN = ("contiguous", COMPONENT_ALIGNED)


def test_the_layout_is_in_the_default_grid_with_complex128() -> None:
    assert COMPONENT_ALIGNED in LAYOUTS and "complex128" in DEFAULT_DTYPES
    g = geometry(COMPONENT_ALIGNED)
    assert (g.shape, g.strides) == (COMPONENT_SHAPE, (COMPONENT_SHAPE[1], 1))
    # An odd count, 3 mod 4: each vectorised loop over it ends in a scalar tail.
    assert int(np.prod(COMPONENT_SHAPE)) % 4 == 3


@pytest.mark.parametrize("dtype", ["complex128", "complex64", "float32", "int64", "float16", "bfloat16"])
def test_the_reference_sits_half_an_element_past_a_boundary(dtype: str) -> None:
    ref = reference(dtype, COMPONENT_ALIGNED)
    size = ref.dtype.itemsize
    assert ref.__array_interface__["data"][0] % size == size // 2
    assert ref.shape == COMPONENT_SHAPE and ref.flags.c_contiguous and ref.flags.writeable
    want = reference(dtype, "contiguous").reshape(-1)[: ref.size].reshape(COMPONENT_SHAPE)
    assert ref.tobytes() == want.tobytes()


def test_place_component_aligned_refuses_one_byte_items() -> None:
    with pytest.raises(ValueError, match="one-byte"):
        place_component_aligned(np.zeros(3, np.uint8))


def _producers() -> list[str]:
    return ["numpy", "bridge", *(p for p in ("torch", "tvm_ffi", "array_api_strict") if available(p))]


@pytest.mark.parametrize("producer", _producers())
@pytest.mark.parametrize("dtype", ["complex128", "float32"])
def test_producers_make_it_over_memory_placed_so(producer: str, dtype: str) -> None:
    obj, expected = produce(producer, dtype, COMPONENT_ALIGNED, False)
    address = matrix_cell._producer_address(obj)
    size = expected.dtype.itemsize
    assert address is not None and address % size == size // 2, (producer, address)
    assert np.array_equal(np.from_dlpack(obj), expected)


@pytest.mark.parametrize("dtype", ["bool", "uint8", "float8_e4m3fn"])
def test_one_byte_dtypes_are_not_made(dtype: str) -> None:
    with pytest.raises(NotMade, match="one-byte"):
        produce("numpy", dtype, COMPONENT_ALIGNED, False)


def test_producers_that_cannot_place_it_say_so() -> None:
    for producer in ("jax", "mlx"):
        if available(producer):
            with pytest.raises(NotMade, match="own"):
                produce(producer, "float32", COMPONENT_ALIGNED, False)


# ------------------------------------------------------- the record's fields


def test_problems_name_element_aligned_by_the_address_alignment() -> None:
    torch, pyarrow, numpy = DESTINATIONS["torch"], DESTINATIONS["pyarrow"], DESTINATIONS["numpy"]
    assert problems(torch, "complex128", COMPONENT_ALIGNED, aligned=False, alignment=8) == ("element_aligned",)
    assert problems(torch, "complex128", "contiguous", aligned=False, alignment=16) == ()
    assert problems(torch, "float32", COMPONENT_ALIGNED, aligned=False, alignment=2) == ()  # not asked of float32
    assert problems(numpy, "complex128", COMPONENT_ALIGNED, aligned=False, alignment=8) == ()
    assert "element_aligned" in problems(pyarrow, "float32", COMPONENT_ALIGNED, aligned=False, alignment=2)
    assert problems(torch, "complex128", COMPONENT_ALIGNED, aligned=False) == ()  # alignment unknown: not judged
    assert copy_reason(torch, "complex128", COMPONENT_ALIGNED, False, False, 8) == "alignment"
    assert copy_reason(torch, "complex128", "contiguous", False, True, 64) == ""


def _copying_misaligned(x: Any) -> np.ndarray[Any, Any]:
    """A consumer that copies what is not aligned to its element's size (as
    an Arrow importer must) and shares the rest."""
    a = np.from_dlpack(x)
    return a.copy() if a.__array_interface__["data"][0] % a.itemsize else a


def test_a_copy_of_memory_not_aligned_to_its_element_says_alignment() -> None:
    consumer = Consumer("picky", "dlpack", _copying_misaligned, lambda a: np.array(a, copy=True),
                        lambda a: int(a.__array_interface__["data"][0]), lambda a: bool(a.flags.writeable),
                        dtype_of=lambda a: a.dtype.name)  # fmt: skip
    cells = [matrix_cell.run_cell(Cell("numpy", "picky", "dlpack", dt, layout, False), consumer)
             for dt in ("float32", "complex128") for layout in LAYOUTS_RUN]  # fmt: skip
    copy_reasons(cells)
    got = {(c.dtype, c.layout): (c.verdict, c.reason) for c in cells}
    assert got == {(dt, lay): ("copy", "alignment") if lay == COMPONENT_ALIGNED else ("zero-copy", "")
                   for dt in ("float32", "complex128") for lay in LAYOUTS_RUN}, got  # fmt: skip
    assert {c.alignment for c in cells if c.layout == COMPONENT_ALIGNED} == {2, 8}


# ---------------------------------------------- the compute step, in a cell


def _numpy_consumer(compute: Any) -> Consumer:
    return Consumer("numpy", "dlpack", np.from_dlpack, lambda a: np.array(a, copy=True),
                    lambda a: int(a.__array_interface__["data"][0]), lambda a: bool(a.flags.writeable),
                    dtype_of=lambda a: a.dtype.name, compute=compute, computes="x op")  # fmt: skip


def test_a_library_computing_other_values_breaks_the_values_rule() -> None:
    wrong = matrix_cell.run_cell(Cell("numpy", "numpy", "dlpack", "float32", "contiguous", False),
                                 _numpy_consumer(lambda a: a + 1))  # fmt: skip
    assert (wrong.verdict, wrong.rule) == ("violation", "values") and "x op" in wrong.detail, wrong
    right = matrix_cell.run_cell(Cell("numpy", "numpy", "dlpack", "float32", "stepped", False),
                                 _numpy_consumer(lambda a: a * 1))  # fmt: skip
    assert right.verdict == "zero-copy", right


def test_an_operation_the_library_lacks_is_not_judged() -> None:
    def lacks(a: Any) -> Any:
        raise TypeError("no such kernel for this dtype")

    cell = matrix_cell.run_cell(Cell("numpy", "numpy", "dlpack", "float32", "contiguous", False),
                                _numpy_consumer(lacks))  # fmt: skip
    assert cell.verdict == "zero-copy", cell


def test_a_crash_computing_is_told_and_keeps_the_alignment(monkeypatch: pytest.MonkeyPatch) -> None:
    """A consumer that faults as it computes on element-misaligned memory
    (as torch's kernels do on complex128): the crash says so, in the worker's
    child and in the forks that run the cells like it, and the cell keeps the
    alignment its producer's memory had."""
    code = (
        "import os, sys, json, numpy as np, bridge.kit.matrix_run as m, bridge.kit.matrix_peers as p\n"
        "real = p.consumers\n"
        "def faulty(only=None):\n"
        "    out = real(only)\n"
        "    for c in out:\n"
        "        def boom(a, c=c):\n"
        "            if np.asarray(a).__array_interface__['data'][0] % np.asarray(a).itemsize:\n"
        "                os.abort()\n"
        "            return np.array(a, copy=True)\n"
        "        c.compute, c.computes = boom, 'a.copy()'\n"
        "    return out\n"
        "m.consumers = faulty\n"
        "m.worker(**json.loads(sys.stdin.read()))\n"
    )
    cells = [Cell(p, "numpy", "dlpack", "complex128", layout, False)
             for p in ("numpy", "bridge") for layout in LAYOUTS_RUN]  # fmt: skip
    out = {(c.producer, c.layout): c for c in run_matrix(cells, code=code)}
    for producer in ("numpy", "bridge"):
        crashed = out[(producer, COMPONENT_ALIGNED)]
        assert crashed.verdict == "crash" and "computing a.copy() on the result" in crashed.detail, crashed
        assert (crashed.aligned, crashed.alignment) == (False, 8), crashed
        assert out[(producer, "contiguous")].verdict == "zero-copy"


def test_crash_line_names_the_kernel_a_native_backtrace_faulted_in() -> None:
    paddle = ["!!!!!!! Segfault encountered !!!!!!!",
              '  File "./signal/../sysdeps/unix/sysv/linux/x86_64/libc_sigaction.c", line 0, in 0x00007efce525a04f',
              '  File "<unknown>", line 0, in phi::funcs::EigenScale<Eigen::DefaultDevice, phi::dtype::complex<double> >'
              "::Eval(Eigen::DefaultDevice const&, bool)",
              '  File "<unknown>", line 0, in void phi::ScaleKernel<phi::dtype::complex<double>, phi::CPUContext>'
              "(phi::CPUContext const&, bool, phi::DenseTensor*)",
              '  File "<unknown>", line 0, in 0xffffffffffffffff']  # fmt: skip
    assert crash_line(paddle) == "Segfault encountered in phi::ScaleKernel"
    # faulthandler's frames in the kit only call into the library: they name nothing
    torch = ["Fatal Python error: Segmentation fault", "",
             '  File "/w/bridge/kit/matrix_peers.py", line 290 in <lambda>',
             '  File "/w/bridge/kit/matrix_cell.py", line 380 in _computed_wrong']  # fmt: skip
    assert crash_line(torch) == "Fatal Python error: Segmentation fault"


# ------------------------------------------ the matrix, torch and paddle for real

CONSUMERS = ("numpy", "torch", "paddle")


@pytest.fixture(scope="module")
def grid() -> list[Cell]:
    pytest.importorskip("torch")  # (a test extra) the consumer whose crash the grid must find
    here = {p for p in CONSUMERS if available(p)}
    entries = [e for e in consumer_entries(here) if e.protocol in ("dlpack", "bridge-convert")]
    cells = [c for c in plan(["bridge"], entries, DTYPES) if c.layout in LAYOUTS_RUN]
    return run_matrix(cells)


def _one(cells: list[Cell], **kw: Any) -> list[Cell]:
    found = [c for c in cells if all(getattr(c, k) == v for k, v in kw.items())]
    assert found, kw
    return found


@pytest.mark.parametrize("consumer", ["torch", "paddle"])
def test_the_matrix_finds_the_crash_and_convert_copies(grid: list[Cell], consumer: str) -> None:
    pytest.importorskip(consumer)
    for c in _one(grid, consumer=consumer, protocol="dlpack", dtype="complex128", layout=COMPONENT_ALIGNED):
        assert c.verdict == "crash" and "computing" in c.detail and c.alignment == 8, c
    for c in _one(grid, consumer=consumer, protocol="dlpack", layout="contiguous", readonly=False):
        assert c.verdict == "zero-copy", c
    # complex64 at 4 bytes, and float32 at 2, compute: the crash is complex128's
    for dt in ("complex64", "float32"):
        c = _one(grid, consumer=consumer, protocol="dlpack", dtype=dt, layout=COMPONENT_ALIGNED, readonly=False)[0]
        assert c.verdict == "zero-copy", c
    via = _one(grid, consumer=consumer, protocol="bridge-convert")
    assert not [c for c in via if c.verdict in ("crash", "violation")]
    for dt in ("complex128", "complex64"):
        for c in _one(grid, consumer=consumer, protocol="bridge-convert", dtype=dt, layout=COMPONENT_ALIGNED):
            assert (c.verdict, c.reason) == ("copy", "alignment"), c


def test_the_table_holds_the_layout(grid: list[Cell]) -> None:
    found = contradictions(grid)
    assert not found, "\n".join(map(str, found))


def _wrong(name: str, **fields: Any) -> dict[str, Holds]:
    return {**DESTINATIONS, name: dataclasses.replace(DESTINATIONS[name], **fields)}


@pytest.mark.parametrize(("name", "fields", "field"), [
    ("torch", {"element_aligned": frozenset()}, "(every field)"),  # its clone faults on complex128
    ("paddle", {"element_aligned": frozenset({"complex64"})}, "(every field)"),  # its x * 1 does
    ("numpy", {"element_aligned": frozenset({"complex128", "complex64", "float32"})}, "element_aligned"),
])  # fmt: skip
def test_a_wrong_element_aligned_is_contradicted(grid: list[Cell], name: str, fields: dict[str, Any],
                                                 field: str) -> None:  # fmt: skip
    pytest.importorskip(name)
    found = [c for c in contradictions(grid, table=_wrong(name, **fields)) if c.consumer == name]
    assert any(c.field == field for c in found), f"{name} {fields}: not contradicted on {field}: {found}"
    if field == "(every field)":
        assert any("complex128/component-aligned" in c.case for c in found), found
