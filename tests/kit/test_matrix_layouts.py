"""The matrix's layouts that real peers break on (issue 35,
:mod:`bridge.kit.matrix_layouts`): ``byte-misaligned`` (the first element at
an odd address), ``big-endian``, ``chunked`` (two Arrow chunks) and DLPack
main's codes (``device-tpu``, ``device-tpu-host``, ``device-ascend``,
``code-bcomplex``, from the kit's ``handmade`` producer).

Each layout is made as claimed, checked through the producing library's own
API (the address mod the item size, ``dtype.byteorder``, the number of
chunks, the capsule's fields); consumers built wrong on purpose break each
layout's rule; real peers (numpy, torch, pyarrow, polars, bridge) get the
verdicts the rules give; and the grid restricted to these layouts, run for
real in the matrix's child processes, has no failure of bridge's own.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from bridge.kit import matrix_cell
from bridge.kit import matrix_layouts as L
from bridge.kit.capsules import inspect_capsule
from bridge.kit.matrix_grid import (
    COPY_REASONS,
    DEFAULT_DTYPES,
    LAYOUTS,
    PEERS,
    Cell,
    available,
    bridge_at_fault,
    copy_reasons,
    culprits,
)
from bridge.kit.matrix_holds import contradictions
from bridge.kit.matrix_peers import Consumer, NotMade, consumer_entries, consumers
from bridge.kit.matrix_run import plan, run_matrix
from bridge.kit.rules import RULES


def _np_consumer(name: str, protocol: str, take: Any) -> Consumer:
    return Consumer(name, protocol, take, lambda a: np.array(a, copy=True),
                    lambda a: int(np.asarray(a).__array_interface__["data"][0]),
                    lambda a: bool(np.asarray(a).flags.writeable), dtype_of=lambda a: np.asarray(a).dtype.name)  # fmt: skip


def _cell(producer: str, consumer: str, protocol: str, dtype: str, layout: str, readonly: bool = False) -> Cell:
    """One cell run in this process (for consumers that do not crash on it)."""
    table = {(c.peer, c.protocol): c for c in consumers({consumer})}
    done = matrix_cell.run_cell(Cell(producer, consumer, protocol, dtype, layout, readonly), table[(consumer, protocol)])
    copy_reasons([done])
    return done


def test_the_layouts_are_in_the_grid_with_their_rules_and_copy_reasons() -> None:
    assert set(L.NEW_LAYOUTS) <= set(LAYOUTS) and L.HANDMADE in PEERS and available(L.HANDMADE)
    for layout in L.NEW_LAYOUTS:
        r = RULES[L.RULE_OF[layout]]
        assert r.spec and r.section and r.text.endswith(".") and r.url.startswith("https://"), r
    assert set(L.COPY_REASON.values()) <= set(COPY_REASONS)
    assert "aligned" in RULES["alignment"].text and "endian" in RULES["byte-order"].text
    assert "first chunk" in RULES["chunks"].text and "kDLTPU 19" in RULES["unknown-code"].text


def test_the_header_has_the_codes_the_handmade_producer_uses() -> None:
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "cdefs" / "dlpack_next.h").read_text()
    for name, value in (("kDLTPU", 19), ("kDLTPUHost", 20), ("kDLAscend", 21), ("kDLBcomplex", 18)):
        assert f"#define {name} {value} " in text, name
    assert L.DEVICE_LAYOUTS == {"device-tpu": 19, "device-tpu-host": 20, "device-ascend": 21}


# ---------------------------------------------------------- made as claimed

MISALIGNED_MAKERS = [p for p in ("numpy", "bridge", "torch", "paddle", "onnxruntime", "tvm_ffi", "pydlpack",
                                 "array_api_strict") if available(p)]  # fmt: skip


@pytest.mark.parametrize(("producer", "dtype"), [(p, d) for p in MISALIGNED_MAKERS for d in ("float32", "int64", "complex128")
                                                  if (p, d) != ("onnxruntime", "complex128")])  # (it has no complex tensors)
def test_byte_misaligned_starts_at_an_odd_address(producer: str, dtype: str) -> None:
    obj, expected = L.produce(producer, dtype, L.BYTE_MISALIGNED, False)
    seen = np.from_dlpack(obj) if producer != "numpy" else obj  # the memory, as NumPy's own import sees it
    address = seen.__array_interface__["data"][0]
    assert address % seen.itemsize == 1 and address % 2 == 1 and not seen.flags.aligned, (producer, address)
    assert seen.shape == L.MISALIGNED_SHAPE and np.array_equal(seen, expected)
    assert matrix_cell._producer_address(obj) == address


@pytest.mark.parametrize(("dtype", "why"), [("bool", "one-byte"), ("uint8", "one-byte"), ("float16", "component-aligned"),
                                            ("bfloat16", "component-aligned")])  # fmt: skip
def test_byte_misaligned_is_na_for_items_of_one_and_two_bytes(dtype: str, why: str) -> None:
    with pytest.raises(NotMade, match=why):
        L.produce("numpy", dtype, L.BYTE_MISALIGNED, False)


def test_producers_with_memory_of_their_own_cannot_misalign_it() -> None:
    for producer in ("jax", "mlx", "pyarrow", "polars"):
        if available(producer):
            with pytest.raises(NotMade, match="own"):
                L.produce(producer, "float32", L.BYTE_MISALIGNED, False)


@pytest.mark.parametrize("dtype", ["int64", "float16", "float32", "complex128"])
def test_big_endian_is_numpys_in_big_endian_order(dtype: str) -> None:
    for readonly in (False, True):
        obj, expected = L.produce("numpy", dtype, L.BIG_ENDIAN, readonly)
        assert obj.dtype.byteorder == ">" and not obj.dtype.isnative and expected.dtype.isnative
        assert obj.shape == (4, 12) and obj.flags.writeable is not readonly
        assert obj.tolist() == expected.tolist()  # the same values, in other bytes
        assert obj.tobytes() != expected.tobytes()


def test_big_endian_is_na_where_there_is_no_byte_order_or_no_producer_of_it() -> None:
    for dtype in ("bool", "uint8", "bfloat16", "float8_e4m3fn"):
        with pytest.raises(NotMade, match="no byte order"):
            L.produce("numpy", dtype, L.BIG_ENDIAN, False)
    for producer in ("bridge", "torch", "pyarrow", "polars", "tvm_ffi", "pydlpack"):
        if available(producer):
            with pytest.raises(NotMade, match=r"native|refuses"):
                L.produce(producer, "float32", L.BIG_ENDIAN, False)


def test_onnxruntime_misreads_big_endian_numpy_memory_making_it() -> None:
    """``OrtValue.ortvalue_from_numpy`` wraps '>f4' memory as native float32:
    its own ``numpy()`` reads other values, so every cell of the case is the
    producer's violation, never bridge's."""
    pytest.importorskip("onnxruntime")
    with pytest.raises(L.MadeWrong, match="native byte order") as made:
        L.produce("onnxruntime", "float32", L.BIG_ENDIAN, False)
    assert made.value.rule == "byte-order" and made.value.made.numpy().tolist() != made.value.expected.tolist()
    cells = [_cell("onnxruntime", consumer, protocol, "float32", L.BIG_ENDIAN)
             for consumer, protocol in (("numpy", "dlpack"), ("bridge", "dlpack"), ("onnxruntime", "bridge-convert"))]
    for c, who in zip(cells, culprits(cells)):  # (its own, even through bridge.convert into onnxruntime)
        assert (c.verdict, c.rule, who) == ("violation", "byte-order", "onnxruntime"), c
        assert c.detail.startswith("the producer misread") and not bridge_at_fault(c)


CHUNK_MAKERS = [p for p in ("pyarrow", "polars", "pandas") if available(p)]


@pytest.mark.parametrize("producer", CHUNK_MAKERS)
@pytest.mark.parametrize("dtype", ["bool", "int64", "float32"])
def test_chunked_is_two_arrow_chunks(producer: str, dtype: str) -> None:
    import pyarrow as pa

    obj, expected = L.produce(producer, dtype, L.CHUNKED, False)
    if producer == "pyarrow":
        assert isinstance(obj, pa.ChunkedArray) and obj.num_chunks == 2
    elif producer == "polars":
        assert obj.n_chunks() == 2
    stream = pa.chunked_array(obj)  # its __arrow_c_stream__, as pyarrow reads it
    assert stream.num_chunks == 2 and [len(c) for c in stream.chunks] == [24, 24]
    assert expected.shape == (48,) and stream.to_numpy().tolist() == expected.tolist()
    assert not hasattr(obj, "__dlpack__") and not hasattr(obj, "__arrow_c_array__")
    assert L.first_chunk_address(obj) == pa.chunked_array(obj).chunk(0).buffers()[1].address


def test_chunked_is_na_for_other_producers_and_types() -> None:
    for producer in ("numpy", "bridge", "nanoarrow"):
        with pytest.raises(NotMade, match="chunked"):
            L.produce(producer, "float32", L.CHUNKED, False)
    with pytest.raises(NotMade, match="Arrow's types"):
        L.produce("pyarrow", "complex64", L.CHUNKED, False)


@pytest.mark.parametrize(("layout", "device"), sorted(L.DEVICE_LAYOUTS.items()))
def test_the_handmade_producer_lends_host_memory_on_dlpack_mains_devices(layout: str, device: int) -> None:
    obj, expected = L.produce(L.HANDMADE, "float32", layout, False)
    assert obj.__dlpack_device__() == (device, 0)
    versioned = inspect_capsule(obj.__dlpack__(max_version=(1, 3)))
    legacy = inspect_capsule(obj.__dlpack__())
    assert versioned is not None and legacy is not None
    assert versioned.name == "dltensor_versioned" and legacy.name == "dltensor"
    for view in (versioned, legacy):
        assert view.device == (device, 0) and view.dtype == (2, 32, 1) and view.shape == (4, 12)
        assert view.data == obj.data_ptr()
    assert np.array_equal(expected, np.arange(48, dtype=np.float32).reshape(4, 12))
    with pytest.raises(BufferError):
        obj.__dlpack__(max_version=(1, 3), copy=True)
    with pytest.raises(BufferError):
        obj.__dlpack__(max_version=(1, 3), dl_device=(1, 0))


def test_the_handmade_bcomplex_is_the_bfloat16_cases_halves() -> None:
    obj, expected = L.produce(L.HANDMADE, "bfloat16", L.BCOMPLEX, False)
    view = inspect_capsule(obj.__dlpack__(max_version=(1, 3)))
    assert view is not None and view.dtype == (18, 32, 1) and view.shape == (4, 6) and view.device == (1, 0)
    assert expected.dtype == np.complex64 and expected[0, 1] == 2 + 3j  # (real, imag) = elements 2, 3
    for dtype in ("float32", "complex64"):
        with pytest.raises(NotMade, match="bfloat16 halves"):
            L.produce(L.HANDMADE, dtype, L.BCOMPLEX, False)
    with pytest.raises(NotMade, match="DLPack main's codes"):
        L.produce("numpy", "float32", "device-tpu", False)
    with pytest.raises(NotMade, match="DLPack main's codes only"):
        L.produce(L.HANDMADE, "float32", "contiguous", False)


def test_plan_crosses_each_layout_on_its_dtypes_and_the_codes_from_handmade_only() -> None:
    entries = consumer_entries({"numpy", "bridge"})
    cells = plan(["numpy", L.HANDMADE], entries, DEFAULT_DTYPES)
    for c in cells:
        if c.layout in L.LAYOUT_DTYPES:
            assert c.dtype in L.LAYOUT_DTYPES[c.layout], c
        assert (c.producer == L.HANDMADE) == (c.layout in L.HANDMADE_LAYOUTS), c
        if c.producer == L.HANDMADE:
            assert c.protocol in L.HANDMADE_PROTOCOLS and not c.readonly, c
    assert {c.layout for c in cells} >= set(L.NEW_LAYOUTS)
    single = plan(["numpy"], entries, ["float64"])  # one dtype asked for: every layout crosses it
    assert {L.BYTE_MISALIGNED, L.BIG_ENDIAN, L.CHUNKED} <= {c.layout for c in single}


# ------------------------------------------------------------ rules with teeth


def test_a_consumer_taking_the_first_chunk_alone_breaks_chunks() -> None:
    import pyarrow as pa

    first = _np_consumer("first", "arrow", lambda o: pa.chunked_array(o).chunk(0).to_numpy())
    bad = matrix_cell.run_cell(Cell("pyarrow", "first", "arrow", "float32", L.CHUNKED, False), first)
    assert (bad.verdict, bad.rule) == ("violation", "chunks") and "(48,) arrived as (24,)" in bad.detail, bad
    whole = _np_consumer("whole", "arrow", lambda o: pa.chunked_array(o).to_numpy())
    good = matrix_cell.run_cell(Cell("polars", "whole", "arrow", "float32", L.CHUNKED, False), whole)
    copy_reasons([good])
    assert (good.verdict, good.reason) == ("copy", "concatenate"), good


def test_a_consumer_ignoring_the_byte_order_breaks_byte_order() -> None:
    native = _np_consumer("native", "buffer",
                          lambda o: np.frombuffer(memoryview(o).cast("B"), o.dtype.newbyteorder("=")).reshape(o.shape))  # fmt: skip
    bad = matrix_cell.run_cell(Cell("numpy", "native", "buffer", "float32", L.BIG_ENDIAN, False), native)
    assert (bad.verdict, bad.rule) == ("violation", "byte-order"), bad
    honest = _np_consumer("honest", "buffer", lambda o: np.asarray(memoryview(o)))
    good = matrix_cell.run_cell(Cell("numpy", "honest", "buffer", "float32", L.BIG_ENDIAN, True), honest)
    assert good.verdict == "zero-copy", good  # big-endian values read as such, read-only kept


def test_a_consumer_misreading_misaligned_memory_breaks_alignment() -> None:
    shifted = _np_consumer("shifted", "dlpack", lambda o: np.from_dlpack(o).copy() + 1)
    bad = matrix_cell.run_cell(Cell("numpy", "shifted", "dlpack", "int64", L.BYTE_MISALIGNED, False), shifted)
    assert (bad.verdict, bad.rule, bad.alignment) == ("violation", "alignment", 1), bad


def _host_view(o: Any) -> np.ndarray[Any, Any]:
    """A consumer that takes any DLPack tensor as host memory (what the rule forbids)."""
    view = inspect_capsule(o.__dlpack__(max_version=(1, 3)))
    assert view is not None
    return np.ndarray((4, 12), np.float32, buffer=o.buffer)  # the kit's own memory, read as the host's


def test_a_consumer_reading_tpu_memory_as_host_memory_breaks_unknown_code() -> None:
    host = _np_consumer("host", "dlpack", _host_view)
    for layout, verdict in (("device-tpu", "violation"), ("device-ascend", "violation"), ("device-tpu-host", "zero-copy")):
        c = matrix_cell.run_cell(Cell(L.HANDMADE, "host", "dlpack", "float32", layout, False), host)
        assert c.verdict == verdict, c
        if verdict == "violation":
            assert c.rule == "unknown-code" and "arrived as device type 1 (CPU)" in c.detail, c


def test_a_consumer_reading_bcomplex_as_another_dtype_breaks_unknown_code() -> None:
    wrong = _np_consumer("wrong", "dlpack", lambda o: o.buffer.view(np.float32))
    c = matrix_cell.run_cell(Cell(L.HANDMADE, "wrong", "dlpack", "bfloat16", L.BCOMPLEX, False), wrong)
    assert (c.verdict, c.rule) == ("violation", "unknown-code") and "arrived as float32" in c.detail, c


# ------------------------------------------------------------ real peers


def test_numpy_and_bridge_take_byte_misaligned_memory() -> None:
    for producer in ("numpy", "bridge"):
        for consumer in ("numpy", "bridge"):
            c = _cell(producer, consumer, "dlpack", "complex128", L.BYTE_MISALIGNED)
            assert c.verdict == "zero-copy" and c.alignment == 1, c


def test_big_endian_through_numpy_and_bridge() -> None:
    refused = _cell("numpy", "numpy", "dlpack", "float32", L.BIG_ENDIAN)
    assert refused.verdict == "refused" and "native byte order" in refused.detail, refused  # numpy's __dlpack__
    assert _cell("numpy", "numpy", "buffer", "float32", L.BIG_ENDIAN, readonly=True).verdict == "zero-copy"
    assert _cell("numpy", "bridge", "array-interface", "float32", L.BIG_ENDIAN).verdict == "refused"
    for consumer in ("numpy", "bridge"):
        for readonly in (False, True):
            c = _cell("numpy", consumer, "bridge-convert", "int64", L.BIG_ENDIAN, readonly)
            assert (c.verdict, c.reason) == ("copy", "byte-order"), c  # a writable copy of read-only memory is right


@pytest.mark.parametrize("producer", CHUNK_MAKERS)
def test_chunked_through_pyarrow_numpy_and_bridge(producer: str) -> None:
    refused = _cell(producer, "bridge", "arrow", "float32", L.CHUNKED)
    assert refused.verdict == "refused" and ("chunks" in refused.detail or "batches" in refused.detail), refused
    for consumer, protocol in (("numpy", "array-interface"), ("bridge", "bridge-convert"), ("numpy", "bridge-convert")):
        c = _cell(producer, consumer, protocol, "int64", L.CHUNKED)
        assert (c.verdict, c.reason) == ("copy", "concatenate"), c
    if available("pyarrow"):
        c = _cell(producer, "pyarrow", "arrow", "float32", L.CHUNKED)
        assert c.verdict in ("copy", "unverified") and c.rule == "", c


def test_dlpack_mains_codes_into_numpy_torch_and_bridge() -> None:
    for layout in L.HANDMADE_LAYOUTS:
        dtype = "bfloat16" if layout == L.BCOMPLEX else "float32"
        numpy = _cell(L.HANDMADE, "numpy", "dlpack", dtype, layout)
        # NumPy refuses each, with RuntimeError (numpy's: the array API's type is BufferError)
        assert numpy.verdict == "refused" or numpy.rule == "exceptions", numpy
        assert not bridge_at_fault(numpy)
        for protocol in ("bridge-convert", "bridge-convert-batch"):
            c = _cell(L.HANDMADE, "numpy", protocol, dtype, layout)
            assert c.verdict == "refused" and "BufferError" in c.detail, c
    assert _cell(L.HANDMADE, "bridge", "dlpack", "bfloat16", L.BCOMPLEX).verdict == "refused"
    tpu = _cell(L.HANDMADE, "bridge", "dlpack", "float32", "device-tpu")  # held on the TPU: not host-readable
    assert tpu.verdict == "unverified" and "tpu:0" in tpu.detail, tpu
    assert _cell(L.HANDMADE, "bridge", "dlpack", "float32", "device-tpu-host").verdict == "zero-copy"
    if available("torch"):
        for layout in L.HANDMADE_LAYOUTS:
            dtype = "bfloat16" if layout == L.BCOMPLEX else "float32"
            c = _cell(L.HANDMADE, "torch", "dlpack", dtype, layout)
            assert c.verdict == "refused" and c.detail.startswith("BufferError"), c


# ------------------------------------------------ the grid, for real

GRID_PEERS = {p for p in ("bridge", "numpy", "torch", "pyarrow", "polars") if available(p)}


@pytest.fixture(scope="module")
def grid() -> list[Cell]:
    """The new layouts between bridge, numpy, torch, pyarrow and polars, and
    the handmade producer into them, in the matrix's child processes."""
    producers = [*sorted(GRID_PEERS), L.HANDMADE]
    cells = [c for c in plan(producers, consumer_entries(GRID_PEERS), DEFAULT_DTYPES) if c.layout in L.NEW_LAYOUTS]
    return run_matrix(cells)


def test_the_grid_has_no_failure_of_bridges_own(grid: list[Cell]) -> None:
    own = [c for c in grid if bridge_at_fault(c)]
    assert not own, "\n".join(f"{c.producer}->{c.consumer} {c.protocol} {c.case}: {c.verdict} {c.rule} {c.detail}"
                              for c in own[:20])  # fmt: skip
    assert {c.layout for c in grid if c.verdict not in ("n/a",)} == set(L.NEW_LAYOUTS)
    assert not contradictions(grid)


def test_the_grid_finds_torchs_complex128_crash_and_convert_copies_for_it(grid: list[Cell]) -> None:
    if "torch" not in GRID_PEERS:
        pytest.skip("torch is not installed")
    cell = next(c for c in grid if (c.producer, c.consumer, c.protocol, c.case) ==
                ("numpy", "torch", "dlpack", "complex128/byte-misaligned"))  # fmt: skip
    assert cell.verdict == "crash" and "computing x.clone()" in cell.detail and cell.alignment == 1, cell
    for dtype in ("float32",):  # the crash is complex128's
        ok = next(c for c in grid if (c.producer, c.consumer, c.protocol, c.dtype, c.layout, c.readonly) ==
                  ("numpy", "torch", "dlpack", dtype, L.BYTE_MISALIGNED, False))  # fmt: skip
        assert ok.verdict == "zero-copy", ok
    via = [c for c in grid if c.consumer == "torch" and c.protocol == "bridge-convert" and c.dtype == "complex128"
           and c.layout == L.BYTE_MISALIGNED and c.verdict != "n/a"]  # fmt: skip
    assert via and all((c.verdict, c.reason) == ("copy", "alignment") for c in via), via


def test_the_grid_names_the_copies_of_chunks_and_byte_order(grid: list[Cell]) -> None:
    for c in grid:
        if c.verdict == "copy" and c.layout == L.CHUNKED:
            assert c.reason in ("concatenate", "unpack"), c  # (a bool chunk's bits unpacked first)
        if c.verdict == "copy" and c.layout == L.BIG_ENDIAN:
            assert c.reason == "byte-order", c
    assert not [c for c in grid if c.layout in L.HANDMADE_LAYOUTS and c.verdict == "zero-copy"
                and c.layout != "device-tpu-host"]  # fmt: skip
